//! The content-addressed local store: `<root>/objects/<2 hex>/<sha256>`, published by an
//! atomic link from a synced temporary file, read back only after the digest is verified.

use std::io::Write;
use std::path::{Path, PathBuf};

use dsh_llm::ImageAttachmentRef;
use sha2::{Digest, Sha256};

use crate::error::{AttachmentError, AttachmentErrorCode};
use crate::limiter::FifoLimiter;
use crate::limits::ImageLimits;
use crate::normalize::{Normalized, normalize};
use crate::probe::{DetectedImage, probe};

/// One image offered for admission.
#[derive(Clone, Debug)]
pub struct SaveImage {
    pub data: Vec<u8>,
    /// The declared type, checked against the bytes.
    pub media_type: String,
    /// Display name (never interpreted as a path).
    pub name: Option<String>,
}

/// The durable image store (`ctx.attachments`).
#[derive(Debug)]
pub struct AttachmentStore {
    root: PathBuf,
    limits: ImageLimits,
    /// `imageCompressionConcurrency`: how many normalizations may run at once.
    compressions: FifoLimiter,
}

/// Upstream's default `imageCompressionConcurrency`.
pub const DEFAULT_IMAGE_COMPRESSION_CONCURRENCY: usize = 2;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_failed(what: &str, path: &Path, e: &std::io::Error) -> AttachmentError {
    AttachmentError::new(
        AttachmentErrorCode::AttachmentWriteFailed,
        format!("cannot {what} {}: {e}", path.display()),
    )
}

impl AttachmentStore {
    /// A store rooted at `root` (normally `$DSH_HOME/attachments/v1`).
    pub fn new(root: PathBuf, limits: ImageLimits) -> Self {
        Self::with_compression_concurrency(root, limits, DEFAULT_IMAGE_COMPRESSION_CONCURRENCY)
    }

    /// A store that runs at most `concurrency` normalizations at once (FIFO); a batch
    /// prepares that many images in parallel and still publishes them in order.
    pub fn with_compression_concurrency(
        root: PathBuf,
        limits: ImageLimits,
        concurrency: usize,
    ) -> Self {
        Self {
            root,
            limits,
            compressions: FifoLimiter::new(concurrency),
        }
    }

    /// The most normalizations that ever ran at once in this store (diagnostics).
    pub fn peak_compressions(&self) -> usize {
        self.compressions.peak()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn limits(&self) -> &ImageLimits {
        &self.limits
    }

    fn object_path(&self, sha: &str) -> PathBuf {
        self.root.join("objects").join(&sha[..2]).join(sha)
    }

    /// Validates one image against the limits and its declared type, and proves its stored
    /// (normalized) form fits, without storing anything.
    pub fn validate_image(&self, input: &SaveImage) -> Result<DetectedImage, AttachmentError> {
        let detected = self.admit(input)?;
        self.normalize(input, &detected)?;
        Ok(detected)
    }

    /// The source checks: declared type, byte, pixel and side limits, container structure.
    fn admit(&self, input: &SaveImage) -> Result<DetectedImage, AttachmentError> {
        use AttachmentErrorCode as C;
        let l = &self.limits;
        if !l.media_types.iter().any(|m| *m == input.media_type) {
            return Err(AttachmentError::new(
                C::UnsupportedImageType,
                format!(
                    "Image type {} is not accepted by this deployment.",
                    input.media_type
                ),
            ));
        }
        if input.data.len() as u64 > l.max_image_bytes {
            return Err(AttachmentError::new(
                C::ImageTooLarge,
                format!(
                    "Image is {} bytes; the limit is {} bytes.",
                    input.data.len(),
                    l.max_image_bytes
                ),
            ));
        }
        let detected = probe(&input.data)
            .map_err(|e| AttachmentError::new(C::InvalidImage, format!("Invalid image: {e}.")))?;
        if detected.media_type != input.media_type {
            return Err(AttachmentError::new(
                C::ImageTypeMismatch,
                format!(
                    "Declared image type {} does not match its bytes ({}).",
                    input.media_type, detected.media_type
                ),
            ));
        }
        if detected.width.saturating_mul(detected.height) > l.max_image_pixels {
            return Err(AttachmentError::new(
                C::ImageTooManyPixels,
                "Image exceeds the configured decoded-pixel limit.",
            ));
        }
        if detected.width.max(detected.height) > l.max_image_dimension {
            return Err(AttachmentError::new(
                C::ImageDimensionTooLarge,
                "Image exceeds the configured per-side pixel limit.",
            ));
        }
        Ok(detected)
    }

    /// Validates an ordered batch (count, aggregate bytes, then each image) before storing
    /// any of it, then stores each; references come back in input order.
    pub fn save_images(
        &self,
        inputs: &[SaveImage],
    ) -> Result<Vec<ImageAttachmentRef>, AttachmentError> {
        use AttachmentErrorCode as C;
        if inputs.len() as u64 > self.limits.max_images_per_message {
            return Err(AttachmentError::new(
                C::TooManyImages,
                "Image batch exceeds the configured image-count limit.",
            ));
        }
        let total: u64 = inputs.iter().map(|i| i.data.len() as u64).sum();
        if total > self.limits.max_message_image_bytes {
            return Err(AttachmentError::new(
                C::ImagesTooLarge,
                "Image batch exceeds the configured aggregate image-byte limit.",
            ));
        }
        let prepared = self.prepare_all(inputs)?;
        prepared
            .into_iter()
            .map(|(data, r)| self.commit(&data, r))
            .collect()
    }

    /// Validates, normalizes and durably stores one image; the reference names only
    /// committed bytes (the stored form, which is what its digest covers).
    pub fn save_image(&self, input: &SaveImage) -> Result<ImageAttachmentRef, AttachmentError> {
        let (data, r) = self.prepare(input)?;
        self.commit(&data, r)
    }

    /// The stored form of `input` and its reference, before anything is written.
    fn prepare(&self, input: &SaveImage) -> Result<(Vec<u8>, ImageAttachmentRef), AttachmentError> {
        let detected = self.admit(input)?;
        let stored = self.normalize(input, &detected)?;
        let sha = hex(&Sha256::digest(&stored.data));
        let reduced = stored.width.max(stored.height) < detected.width.max(detected.height);
        let r = ImageAttachmentRef {
            attachment_id: format!("sha256:{sha}"),
            media_type: stored.media_type.to_string(),
            bytes: stored.data.len() as u64,
            width: stored.width,
            height: stored.height,
            name: input.name.clone(),
            original_dimensions: reduced.then_some((detected.width, detected.height)),
        };
        Ok((stored.data, r))
    }

    /// Prepares a batch with up to `imageCompressionConcurrency` images at once; the first
    /// failure in input order wins, and nothing is published before every image is ready.
    fn prepare_all(
        &self,
        inputs: &[SaveImage],
    ) -> Result<Vec<(Vec<u8>, ImageAttachmentRef)>, AttachmentError> {
        let workers = self.compressions.permits().min(inputs.len());
        if workers <= 1 {
            return inputs.iter().map(|i| self.prepare(i)).collect();
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut slots: Vec<Option<Result<_, AttachmentError>>> = Vec::new();
        slots.resize_with(inputs.len(), || None);
        let slots = std::sync::Mutex::new(slots);
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let Some(input) = inputs.get(i) else { break };
                        let prepared = self.prepare(input);
                        if let Some(slot) = slots
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .get_mut(i)
                        {
                            *slot = Some(prepared);
                        }
                    }
                });
            }
        });
        slots
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .into_iter()
            .map(|slot| {
                slot.unwrap_or_else(|| {
                    Err(AttachmentError::new(
                        AttachmentErrorCode::AttachmentWriteFailed,
                        "an image of the batch was not prepared",
                    ))
                })
            })
            .collect()
    }

    /// Normalizes under the compression limiter.
    fn normalize(
        &self,
        input: &SaveImage,
        detected: &DetectedImage,
    ) -> Result<Normalized, AttachmentError> {
        let _permit = self.compressions.acquire();
        normalize(&input.data, detected, &self.limits)
    }

    fn commit(
        &self,
        data: &[u8],
        r: ImageAttachmentRef,
    ) -> Result<ImageAttachmentRef, AttachmentError> {
        let sha = r.sha256_hex().unwrap_or_default().to_string();
        self.publish(&sha, data)?;
        Ok(r)
    }

    fn publish(&self, sha: &str, data: &[u8]) -> Result<(), AttachmentError> {
        let target = self.object_path(sha);
        // A damaged object is replaced by the verified bytes below.
        if let Ok(existing) = std::fs::read(&target)
            && hex(&Sha256::digest(&existing)) == sha
        {
            return Ok(());
        }
        let bucket = target.parent().unwrap_or(&self.root).to_path_buf();
        let staging = self.root.join("tmp");
        for dir in [&bucket, &staging] {
            create_private_dir(dir).map_err(|e| write_failed("create", dir, &e))?;
        }
        let temporary = staging.join(uuid_like(sha));
        let result = (|| {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temporary)
                .map_err(|e| write_failed("create", &temporary, &e))?;
            file.write_all(data)
                .and_then(|()| file.sync_all())
                .map_err(|e| write_failed("write", &temporary, &e))?;
            std::fs::rename(&temporary, &target)
                .map_err(|e| write_failed("publish", &target, &e))?;
            if let Ok(dir) = std::fs::File::open(&bucket) {
                let _ = dir.sync_all();
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        result
    }

    /// Stores bytes another store holds under their digest (`sha256` hex): a team worker
    /// copies a session's objects into the store its turn reads. Bytes whose digest is not
    /// `sha256` are refused; an object already present is kept.
    pub fn put_object(&self, sha256: &str, data: &[u8]) -> Result<(), AttachmentError> {
        let valid = sha256.len() == 64
            && sha256
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !valid || hex(&Sha256::digest(data)) != sha256 {
            return Err(AttachmentError::new(
                AttachmentErrorCode::AttachmentCorrupt,
                format!("object {sha256:?} does not hold bytes of that digest"),
            ));
        }
        self.publish(sha256, data)
    }

    /// Reads the bytes of `image`, verifying digest, size and container facts.
    pub fn read_image(&self, image: &ImageAttachmentRef) -> Result<Vec<u8>, AttachmentError> {
        use AttachmentErrorCode as C;
        let Some(sha) = image.sha256_hex() else {
            return Err(AttachmentError::new(
                C::InvalidAttachmentRef,
                format!(
                    "attachment id \"{}\" is not sha256:<64 hex>",
                    image.attachment_id
                ),
            ));
        };
        let path = self.object_path(sha);
        let data = match std::fs::metadata(&path) {
            Ok(meta) if meta.len() != image.bytes => {
                return Err(AttachmentError::new(
                    C::AttachmentCorrupt,
                    format!(
                        "stored attachment {} has the wrong size",
                        image.attachment_id
                    ),
                ));
            }
            Ok(_) => std::fs::read(&path),
            Err(e) => Err(e),
        };
        let data = data.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => AttachmentError::new(
                C::AttachmentNotFound,
                format!("attachment {} is not in the store", image.attachment_id),
            ),
            _ => AttachmentError::new(
                C::AttachmentReadFailed,
                format!("cannot read attachment {}: {e}", image.attachment_id),
            ),
        })?;
        if hex(&Sha256::digest(&data)) != sha {
            return Err(AttachmentError::new(
                C::AttachmentCorrupt,
                format!(
                    "stored attachment {} failed integrity verification",
                    image.attachment_id
                ),
            ));
        }
        match probe(&data) {
            Ok(d)
                if d.media_type == image.media_type
                    && d.width == image.width
                    && d.height == image.height => {}
            _ => {
                return Err(AttachmentError::new(
                    C::AttachmentCorrupt,
                    format!(
                        "stored attachment {} does not match its reference",
                        image.attachment_id
                    ),
                ));
            }
        }
        Ok(data)
    }
}

fn uuid_like(sha: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{}-{nanos}", &sha[..16], std::process::id())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::tests::{jpeg_bytes, png_bytes};
    use pretty_assertions::assert_eq;

    /// A decodable `w`×`h` image in `format`, encoded by the `image` crate.
    fn encoded(format: image::ImageFormat, w: u32, h: u32) -> Vec<u8> {
        let pixels = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, 9]));
        let mut out = std::io::Cursor::new(Vec::new());
        image::DynamicImage::ImageRgb8(pixels)
            .write_to(&mut out, format)
            .unwrap();
        out.into_inner()
    }

    fn store(limits: ImageLimits) -> (tempfile::TempDir, AttachmentStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = AttachmentStore::new(dir.path().join("attachments/v1"), limits);
        (dir, store)
    }

    fn png(w: u32, h: u32) -> SaveImage {
        SaveImage {
            data: png_bytes(w, h),
            media_type: "image/png".into(),
            name: Some("a.png".into()),
        }
    }

    #[test]
    fn saved_images_read_back_verified() {
        let (_dir, store) = store(ImageLimits::default());
        let input = png(4, 3);
        let r = store.save_image(&input).unwrap();
        let sha = hex(&Sha256::digest(&input.data));
        assert_eq!(
            r,
            ImageAttachmentRef {
                attachment_id: format!("sha256:{sha}"),
                media_type: "image/png".into(),
                bytes: input.data.len() as u64,
                width: 4,
                height: 3,
                name: Some("a.png".into()),
                original_dimensions: None,
            }
        );
        assert_eq!(store.read_image(&r).unwrap(), input.data);
        // Saving again is idempotent.
        assert_eq!(store.save_image(&input).unwrap(), r);
        // A tampered object is detected.
        let path = store.object_path(&sha);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(
            store.read_image(&r).unwrap_err().code,
            AttachmentErrorCode::AttachmentCorrupt
        );
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            store.read_image(&r).unwrap_err().code,
            AttachmentErrorCode::AttachmentNotFound
        );
    }

    #[test]
    fn limits_and_mismatches_are_refused_with_their_codes() {
        use AttachmentErrorCode as C;
        let limits = ImageLimits {
            max_image_dimension: 100,
            max_image_pixels: 5000,
            max_images_per_message: 2,
            max_message_image_bytes: 1000,
            ..ImageLimits::default()
        };
        let (_dir, store) = store(limits);
        let code = |input: SaveImage| store.save_image(&input).unwrap_err().code;
        assert_eq!(code(png(101, 1)), C::ImageDimensionTooLarge);
        assert_eq!(code(png(80, 80)), C::ImageTooManyPixels);
        let mut wrong = png(1, 1);
        wrong.media_type = "image/jpeg".into();
        assert_eq!(code(wrong), C::ImageTypeMismatch);
        let mut tiff = png(1, 1);
        tiff.media_type = "image/tiff".into();
        assert_eq!(code(tiff), C::UnsupportedImageType);
        assert_eq!(
            code(SaveImage {
                data: b"not an image".to_vec(),
                media_type: "image/gif".into(),
                name: None
            }),
            C::InvalidImage
        );
        assert_eq!(
            store
                .save_images(&[png(1, 1), png(1, 1), png(1, 1)])
                .unwrap_err()
                .code,
            C::TooManyImages
        );
        // A failing member stores nothing of its batch.
        let batch = [
            SaveImage {
                data: jpeg_bytes(2, 2, None),
                media_type: "image/jpeg".into(),
                name: None,
            },
            png(101, 1),
        ];
        assert!(store.save_images(&batch).is_err());
        assert!(!store.root().join("objects").exists());
        let ok = store
            .save_images(&[SaveImage {
                data: encoded(image::ImageFormat::Gif, 2, 2),
                media_type: "image/gif".into(),
                name: None,
            }])
            .unwrap();
        assert_eq!((ok[0].width, ok[0].height), (2, 2));
    }

    #[test]
    fn byte_limits_bound_one_image_a_batch_and_the_stored_copy() {
        use AttachmentErrorCode as C;
        let one = png_bytes(1, 1).len() as u64;
        let (_dir, small) = store(ImageLimits {
            max_image_bytes: one - 1,
            ..ImageLimits::default()
        });
        let err = small.save_image(&png(1, 1)).unwrap_err();
        assert_eq!(err.code, C::ImageTooLarge);
        assert!(
            err.message.contains("bytes; the limit is"),
            "{}",
            err.message
        );
        let (_dir, store) = store(ImageLimits {
            max_message_image_bytes: one * 2,
            ..ImageLimits::default()
        });
        let err = store
            .save_images(&[png(1, 1), png(1, 1), png(1, 1)])
            .unwrap_err();
        assert_eq!(err.code, C::ImagesTooLarge);
        assert!(store.save_images(&[png(1, 1), png(1, 1)]).is_ok());
        // Only the stored-copy cap binds: the submission fits, no stored form would.
        let (_dir, store) = self::store(ImageLimits {
            normalized_image_max_bytes: 10,
            ..ImageLimits::default()
        });
        let real = SaveImage {
            data: encoded(image::ImageFormat::Png, 1, 1),
            media_type: "image/png".into(),
            name: None,
        };
        assert_eq!(store.save_image(&real).unwrap_err().code, C::ImageTooLarge);
    }

    #[test]
    fn every_format_round_trips_through_the_store() {
        use image::ImageFormat as F;
        let (_dir, store) = store(ImageLimits::default());
        // GIF is always re-encoded (here as a lossless PNG); the others pass through.
        for (format, media_type, stored_type, w, h) in [
            (F::Png, "image/png", "image/png", 5, 4),
            (F::Jpeg, "image/jpeg", "image/jpeg", 6, 7),
            (F::Gif, "image/gif", "image/png", 8, 9),
            (F::WebP, "image/webp", "image/webp", 10, 11),
        ] {
            let data = encoded(format, w, h);
            let input = SaveImage {
                data: data.clone(),
                media_type: media_type.into(),
                name: None,
            };
            let r = store.save_image(&input).unwrap();
            assert_eq!(
                (r.media_type.as_str(), r.width, r.height),
                (stored_type, u64::from(w), u64::from(h))
            );
            let stored = store.read_image(&r).unwrap();
            assert_eq!(stored == data, media_type == stored_type);
        }
    }

    #[test]
    fn malformed_images_and_references_get_clear_errors() {
        use AttachmentErrorCode as C;
        let (_dir, store) = store(ImageLimits::default());
        let mut truncated = png(3, 3);
        truncated.data.truncate(20);
        let err = store.save_image(&truncated).unwrap_err();
        assert_eq!(err.code, C::InvalidImage);
        assert!(
            err.message.starts_with("Invalid image: "),
            "{}",
            err.message
        );
        let err = store
            .read_image(&ImageAttachmentRef {
                attachment_id: "sha256:nothex".into(),
                media_type: "image/png".into(),
                bytes: 1,
                width: 1,
                height: 1,
                name: None,
                original_dimensions: None,
            })
            .unwrap_err();
        assert_eq!(err.code, C::InvalidAttachmentRef);
        assert!(err.message.contains("sha256:nothex"), "{}", err.message);
    }
}
