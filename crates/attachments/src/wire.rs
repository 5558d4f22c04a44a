//! Wire forms: canonical base64 (RFC 4648, padded, no whitespace) and path extensions.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::error::{AttachmentError, AttachmentErrorCode};

/// Decodes canonical base64, refusing aliases (whitespace, URL-safe alphabet, non-zero
/// padding bits) that would decode to the same bytes.
pub fn decode_canonical_base64(data: &str) -> Result<Vec<u8>, AttachmentError> {
    let refuse = || {
        AttachmentError::new(
            AttachmentErrorCode::InvalidImageBase64,
            "image data must be canonical base64",
        )
    };
    if data.is_empty() {
        return Err(refuse());
    }
    let bytes = STANDARD.decode(data).map_err(|_| refuse())?;
    if STANDARD.encode(&bytes) != data {
        return Err(refuse());
    }
    Ok(bytes)
}

/// Standard padded base64.
pub fn encode_base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// The image media type a path's extension declares (`.png`, `.jpg`, `.jpeg`, `.webp`,
/// `.gif`, case-insensitive).
pub fn media_type_for_path(path: &str) -> Option<&'static str> {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let (_, ext) = name.rsplit_once('.')?;
    match ext.to_ascii_lowercase().as_str() {
        "png" => Some("image/png"),
        "jpg" | "jpeg" => Some("image/jpeg"),
        "webp" => Some("image/webp"),
        "gif" => Some("image/gif"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_base64_is_accepted() {
        assert_eq!(decode_canonical_base64("aGk=").unwrap(), b"hi");
        for bad in ["", "aGk", "aGl=", "aG k=", "a-_=", "aGk=\n"] {
            assert!(decode_canonical_base64(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn extensions_declare_media_types() {
        assert_eq!(media_type_for_path("a/b/Red.PNG"), Some("image/png"));
        assert_eq!(media_type_for_path("x.jpeg"), Some("image/jpeg"));
        assert_eq!(media_type_for_path("x.tiff"), None);
        assert_eq!(media_type_for_path("png"), None);
        assert_eq!(media_type_for_path("dir.png/file"), None);
    }
}
