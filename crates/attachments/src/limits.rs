//! Deployment image limits (the `attachment-local` row config), with upstream's defaults.

use serde::Deserialize;

/// What one image, one message and one stored image may be.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ImageLimits {
    /// Encoded bytes of one submitted image (20 MiB).
    pub max_image_bytes: u64,
    /// Images in one message (20).
    pub max_images_per_message: u64,
    /// Encoded bytes of all images of one message (200 MiB).
    pub max_message_image_bytes: u64,
    /// Width × height of one image (64,000,000).
    pub max_image_pixels: u64,
    /// Width and height of one image (8192 px).
    pub max_image_dimension: u64,
    /// Long edge of a stored image (2048 px): larger sources are downscaled.
    pub normalized_image_max_dimension: u64,
    /// Encoded bytes of a stored image (4 MiB): larger sources are re-encoded (and shrunk)
    /// until they fit.
    pub normalized_image_max_bytes: u64,
    /// Accepted media types.
    #[serde(skip)]
    pub media_types: Vec<&'static str>,
}

impl Default for ImageLimits {
    fn default() -> Self {
        Self {
            max_image_bytes: 20 * 1024 * 1024,
            max_images_per_message: 20,
            max_message_image_bytes: 200 * 1024 * 1024,
            max_image_pixels: 64_000_000,
            max_image_dimension: 8192,
            normalized_image_max_dimension: 2048,
            normalized_image_max_bytes: 4 * 1024 * 1024,
            media_types: dsh_llm::IMAGE_MEDIA_TYPES.to_vec(),
        }
    }
}

impl ImageLimits {
    /// The most bytes one image read may take (per-image and per-message bounds).
    pub fn read_cap(&self) -> u64 {
        self.max_image_bytes.min(self.max_message_image_bytes)
    }

    /// Every limit must be positive.
    pub fn validate(&self) -> Result<(), String> {
        let fields = [
            ("maxImageBytes", self.max_image_bytes),
            ("maxImagesPerMessage", self.max_images_per_message),
            ("maxMessageImageBytes", self.max_message_image_bytes),
            ("maxImagePixels", self.max_image_pixels),
            ("maxImageDimension", self.max_image_dimension),
            (
                "normalizedImageMaxDimension",
                self.normalized_image_max_dimension,
            ),
            ("normalizedImageMaxBytes", self.normalized_image_max_bytes),
        ];
        for (name, value) in fields {
            if value == 0 {
                return Err(format!("{name} must be a positive integer"));
            }
        }
        Ok(())
    }
}
