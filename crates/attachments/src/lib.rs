//! Durable image attachments: the content-addressed local store (`ctx.attachments`), format
//! and dimension probing of PNG, JPEG, GIF and WebP, upstream's admission limits and error
//! codes, and canonical base64 admission of wire images (ACP, SDK).
//!
//! The store keeps a normalized copy, as upstream does: images that already fit pass
//! through byte for byte; others are decoded, turned upright, downscaled to the long-edge
//! cap and re-encoded within the byte cap (see the README for the encodings and the
//! deviations: alpha images become PNG, not lossy WebP).

mod admission;
mod error;
mod limiter;
mod limits;
mod normalize;
mod plugin;
mod probe;
mod store;
mod wire;

pub use admission::{
    AdmissionError, admit_prompt_images, check_image_route, decode_prompt_image,
    store_prompt_images,
};
pub use error::{AttachmentError, AttachmentErrorCode};
pub use limits::ImageLimits;
pub use plugin::{AttachmentLocalPlugin, AttachmentsMounted, register_catalog};
pub use probe::{DetectedImage, ProbeError, drop_damaged_ancillary_png_chunks, probe, sniff};
pub use store::{AttachmentStore, DEFAULT_IMAGE_COMPRESSION_CONCURRENCY, SaveImage};
pub use wire::{decode_canonical_base64, encode_base64, media_type_for_path};
