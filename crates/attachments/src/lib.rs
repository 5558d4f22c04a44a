//! Durable image attachments: the content-addressed local store (`ctx.attachments`), format
//! and dimension probing of PNG, JPEG, GIF and WebP, upstream's admission limits and error
//! codes, and canonical base64 admission of wire images (ACP, SDK).
//!
//! Deviation from upstream: upstream decodes and re-encodes every image (downscaling to a
//! 2048 px long edge, stripping metadata). This build has no image codec: it validates the
//! container structure and dimensions, and stores the submitted bytes unchanged when they
//! fit the stored-image byte cap; larger images are refused with `IMAGE_TOO_LARGE`.

mod error;
mod limits;
mod plugin;
mod probe;
mod store;
mod wire;

pub use error::{AttachmentError, AttachmentErrorCode};
pub use limits::ImageLimits;
pub use plugin::{AttachmentLocalPlugin, AttachmentsMounted, register_catalog};
pub use probe::{DetectedImage, ProbeError, probe, sniff};
pub use store::{AttachmentStore, SaveImage};
pub use wire::{decode_canonical_base64, encode_base64, media_type_for_path};
