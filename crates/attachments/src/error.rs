//! Attachment failures with upstream's stable codes.

/// Stable attachment failure codes (upstream's `AttachmentErrorCode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachmentErrorCode {
    /// More images in one message than `maxImagesPerMessage`. Caller-correctable.
    TooManyImages,
    /// One message's images exceed `maxMessageImageBytes`. Caller-correctable.
    ImagesTooLarge,
    /// A media type the deployment does not accept. Caller-correctable.
    UnsupportedImageType,
    /// Upload data that is not canonical base64. Caller-correctable.
    InvalidImageBase64,
    /// Bytes that are not a well-formed PNG, JPEG, GIF or WebP. Caller-correctable.
    InvalidImage,
    /// The bytes are a different format than declared. Caller-correctable.
    ImageTypeMismatch,
    /// The image exceeds a byte limit. Caller-correctable.
    ImageTooLarge,
    /// Width × height exceeds `maxImagePixels`. Caller-correctable.
    ImageTooManyPixels,
    /// A side exceeds `maxImageDimension`. Caller-correctable.
    ImageDimensionTooLarge,
    /// A reference that is not `sha256:<64 hex>`.
    InvalidAttachmentRef,
    /// Stored bytes that no longer match their reference.
    AttachmentCorrupt,
    /// The store could not be written (disk full, permissions).
    AttachmentWriteFailed,
    /// The referenced object is not in the store.
    AttachmentNotFound,
    /// The object exists but could not be read.
    AttachmentReadFailed,
}

impl AttachmentErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TooManyImages => "TOO_MANY_IMAGES",
            Self::ImagesTooLarge => "IMAGES_TOO_LARGE",
            Self::UnsupportedImageType => "UNSUPPORTED_IMAGE_TYPE",
            Self::InvalidImageBase64 => "INVALID_IMAGE_BASE64",
            Self::InvalidImage => "INVALID_IMAGE",
            Self::ImageTypeMismatch => "IMAGE_TYPE_MISMATCH",
            Self::ImageTooLarge => "IMAGE_TOO_LARGE",
            Self::ImageTooManyPixels => "IMAGE_TOO_MANY_PIXELS",
            Self::ImageDimensionTooLarge => "IMAGE_DIMENSION_TOO_LARGE",
            Self::InvalidAttachmentRef => "INVALID_ATTACHMENT_REF",
            Self::AttachmentCorrupt => "ATTACHMENT_CORRUPT",
            Self::AttachmentWriteFailed => "ATTACHMENT_WRITE_FAILED",
            Self::AttachmentNotFound => "ATTACHMENT_NOT_FOUND",
            Self::AttachmentReadFailed => "ATTACHMENT_READ_FAILED",
        }
    }

    /// Whether the caller can fix the failure by changing what it submits.
    pub fn is_admission(self) -> bool {
        matches!(
            self,
            Self::TooManyImages
                | Self::ImagesTooLarge
                | Self::UnsupportedImageType
                | Self::InvalidImageBase64
                | Self::InvalidImage
                | Self::ImageTypeMismatch
                | Self::ImageTooLarge
                | Self::ImageTooManyPixels
                | Self::ImageDimensionTooLarge
        )
    }
}

/// An attachment failure: a stable code and a message without raw bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AttachmentError {
    pub code: AttachmentErrorCode,
    pub message: String,
}

impl AttachmentError {
    pub fn new(code: AttachmentErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}
