//! The stored (normalized) form of admitted images: downscaling to the long-edge cap,
//! re-encoding within the byte cap, EXIF orientation, alpha, animation and pass-through.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Cursor;

use dsh_attachments::{AttachmentErrorCode, AttachmentStore, ImageLimits, SaveImage, probe};
use image::{DynamicImage, ImageFormat, Rgb, RgbImage, Rgba, RgbaImage};
use pretty_assertions::assert_eq;

fn store(limits: ImageLimits) -> (tempfile::TempDir, AttachmentStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = AttachmentStore::new(dir.path().join("attachments/v1"), limits);
    (dir, store)
}

fn encode(image: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    image.write_to(&mut out, format).unwrap();
    out.into_inner()
}

fn save(store: &AttachmentStore, data: &[u8], media_type: &str) -> dsh_llm::ImageAttachmentRef {
    store
        .save_image(&SaveImage {
            data: data.to_vec(),
            media_type: media_type.into(),
            name: Some("x".into()),
        })
        .unwrap()
}

fn decode_stored(store: &AttachmentStore, r: &dsh_llm::ImageAttachmentRef) -> DynamicImage {
    let bytes = store.read_image(r).unwrap();
    image::load_from_memory(&bytes).unwrap()
}

/// A deterministic pseudo-random generator (xorshift), so noise is reproducible.
fn noise(seed: &mut u32) -> u8 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 17;
    *seed ^= *seed << 5;
    (*seed >> 24) as u8
}

#[test]
fn a_large_png_is_downscaled_to_the_long_edge_cap() {
    let source = RgbImage::from_fn(5000, 3000, |x, y| {
        Rgb([(x % 256) as u8, (y % 256) as u8, ((x + y) % 256) as u8])
    });
    let data = encode(&DynamicImage::ImageRgb8(source), ImageFormat::Png);
    let (_dir, store) = store(ImageLimits::default());
    let r = save(&store, &data, "image/png");
    assert_eq!((r.width, r.height), (2048, 1229));
    assert_eq!(r.original_dimensions, Some((5000, 3000)));
    assert!(r.bytes <= ImageLimits::default().normalized_image_max_bytes);
    let stored = store.read_image(&r).unwrap();
    assert_eq!(stored.len() as u64, r.bytes);
    let detected = probe(&stored).unwrap();
    assert_eq!(
        (detected.media_type, detected.width, detected.height),
        (r.media_type.as_str(), 2048, 1229)
    );
}

#[test]
fn a_noisy_opaque_image_becomes_a_jpeg_under_the_byte_cap() {
    let mut seed = 0x1234_5678;
    let source = RgbImage::from_fn(900, 600, |_, _| {
        Rgb([noise(&mut seed), noise(&mut seed), noise(&mut seed)])
    });
    let data = encode(&DynamicImage::ImageRgb8(source), ImageFormat::Png);
    let cap = 60_000;
    assert!(data.len() as u64 > cap);
    let (_dir, store) = store(ImageLimits {
        normalized_image_max_bytes: cap,
        ..ImageLimits::default()
    });
    let r = save(&store, &data, "image/png");
    assert_eq!(r.media_type, "image/jpeg");
    assert!(r.bytes <= cap, "{} > {cap}", r.bytes);
    // The byte cap alone forced a smaller raster, same aspect ratio.
    assert!(r.width < 900 && r.height < 600, "{}x{}", r.width, r.height);
    assert_eq!(r.original_dimensions, Some((900, 600)));
    let decoded = decode_stored(&store, &r);
    assert_eq!(
        (u64::from(decoded.width()), u64::from(decoded.height())),
        (r.width, r.height)
    );
}

#[test]
fn transparency_survives_normalization() {
    let source = RgbaImage::from_fn(3000, 200, |x, y| {
        if x < 1500 {
            Rgba([0, 0, 0, 0])
        } else {
            Rgba([(x % 251) as u8, (y % 241) as u8, ((x * y) % 239) as u8, 255])
        }
    });
    let data = encode(&DynamicImage::ImageRgba8(source), ImageFormat::Png);
    let (_dir, store) = store(ImageLimits::default());
    let r = save(&store, &data, "image/png");
    assert_eq!(r.media_type, "image/png");
    assert_eq!((r.width, r.height), (2048, 137));
    let decoded = decode_stored(&store, &r);
    assert!(decoded.color().has_alpha());
    let rgba = decoded.to_rgba8();
    assert_eq!(rgba.get_pixel(10, 10).0[3], 0);
    assert_eq!(rgba.get_pixel(2000, 10).0[3], 255);
}

/// `jpeg` with an APP1 Exif segment carrying `orientation` inserted after SOI.
fn with_orientation(jpeg: &[u8], orientation: u16) -> Vec<u8> {
    let mut tiff = b"Exif\0\0MM\0\x2a\0\0\0\x08".to_vec();
    tiff.extend(1u16.to_be_bytes());
    tiff.extend(0x0112u16.to_be_bytes());
    tiff.extend(3u16.to_be_bytes());
    tiff.extend(1u32.to_be_bytes());
    tiff.extend(orientation.to_be_bytes());
    tiff.extend([0, 0, 0, 0, 0, 0]);
    let mut out = jpeg[..2].to_vec();
    out.extend([0xFF, 0xE1]);
    out.extend((tiff.len() as u16 + 2).to_be_bytes());
    out.extend(tiff);
    out.extend(&jpeg[2..]);
    out
}

#[test]
fn an_exif_rotated_jpeg_is_stored_upright() {
    // Stored raster: 64 wide, 32 high; red on the left half, blue on the right.
    let raster = RgbImage::from_fn(64, 32, |x, _| {
        if x < 32 {
            Rgb([255, 0, 0])
        } else {
            Rgb([0, 0, 255])
        }
    });
    let jpeg = encode(&DynamicImage::ImageRgb8(raster), ImageFormat::Jpeg);
    // Orientation 6: the viewer rotates 90° clockwise, so the left half ends up on top.
    let data = with_orientation(&jpeg, 6);
    let (_dir, store) = store(ImageLimits::default());
    let r = save(&store, &data, "image/jpeg");
    assert_eq!((r.width, r.height), (32, 64));
    assert_eq!(r.original_dimensions, None);
    let decoded = decode_stored(&store, &r).to_rgb8();
    assert_eq!(decoded.dimensions(), (32, 64));
    let top = decoded.get_pixel(16, 8).0;
    let bottom = decoded.get_pixel(16, 56).0;
    assert!(top[0] > 200 && top[2] < 60, "top {top:?}");
    assert!(bottom[2] > 200 && bottom[0] < 60, "bottom {bottom:?}");
    // The stored copy carries no orientation (no EXIF) any more.
    let stored = store.read_image(&r).unwrap();
    assert!(!stored.windows(4).any(|w| w == b"Exif"));
}

#[test]
fn an_animated_gif_is_stored_as_one_frame() {
    use image::codecs::gif::GifEncoder;
    use image::{Delay, Frame};
    let mut data = Vec::new();
    {
        let mut encoder = GifEncoder::new(&mut data);
        for colour in [[255, 0, 0, 255], [0, 255, 0, 255], [0, 0, 255, 255]] {
            let frame = Frame::from_parts(
                RgbaImage::from_pixel(20, 10, Rgba(colour)),
                0,
                0,
                Delay::from_numer_denom_ms(100, 1),
            );
            encoder.encode_frame(frame).unwrap();
        }
    }
    assert!(probe(&data).unwrap().animated);
    let (_dir, store) = store(ImageLimits::default());
    let r = save(&store, &data, "image/gif");
    assert_ne!(r.media_type, "image/gif");
    assert_eq!((r.width, r.height), (20, 10));
    let stored = store.read_image(&r).unwrap();
    assert!(!probe(&stored).unwrap().animated);
    // The first frame.
    let pixel = image::load_from_memory(&stored).unwrap().to_rgba8();
    assert_eq!(pixel.get_pixel(5, 5).0, [255, 0, 0, 255]);
}

#[test]
fn images_that_already_fit_pass_through_byte_for_byte() {
    let (_dir, store) = store(ImageLimits::default());
    let png = encode(
        &DynamicImage::ImageRgb8(RgbImage::from_fn(300, 200, |x, y| {
            Rgb([x as u8, y as u8, 7])
        })),
        ImageFormat::Png,
    );
    let jpeg = encode(
        &DynamicImage::ImageRgb8(RgbImage::from_pixel(30, 20, Rgb([9, 99, 199]))),
        ImageFormat::Jpeg,
    );
    let webp = encode(
        &DynamicImage::ImageRgba8(RgbaImage::from_pixel(30, 20, Rgba([1, 2, 3, 128]))),
        ImageFormat::WebP,
    );
    for (data, media_type, w, h) in [
        (png, "image/png", 300, 200),
        (jpeg, "image/jpeg", 30, 20),
        (webp, "image/webp", 30, 20),
    ] {
        let r = save(&store, &data, media_type);
        assert_eq!(
            (r.media_type.as_str(), r.width, r.height, r.bytes),
            (media_type, w, h, data.len() as u64)
        );
        assert_eq!(r.original_dimensions, None);
        assert_eq!(store.read_image(&r).unwrap(), data);
    }
}

#[test]
fn the_stored_copy_is_what_the_digest_names() {
    use sha2::Digest;
    let source = RgbImage::from_fn(2500, 100, |x, y| Rgb([(x % 256) as u8, y as u8, 3]));
    let data = encode(&DynamicImage::ImageRgb8(source), ImageFormat::Png);
    let (_dir, store) = store(ImageLimits::default());
    let r = save(&store, &data, "image/png");
    let stored = store.read_image(&r).unwrap();
    assert_ne!(stored, data);
    let hex: String = sha2::Sha256::digest(&stored)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(r.attachment_id, format!("sha256:{hex}"));
    // Saving the same source again is idempotent.
    assert_eq!(save(&store, &data, "image/png"), r);
}

#[test]
fn undecodable_pixels_are_an_invalid_image_not_a_panic() {
    // A structurally sound PNG with metadata (so it must be decoded) whose pixel data is junk.
    let mut png = encode(
        &DynamicImage::ImageRgb8(RgbImage::from_pixel(64, 64, Rgb([1, 2, 3]))),
        ImageFormat::Png,
    );
    let mut text = b"tEXt".to_vec();
    text.extend(b"Comment\0hello");
    let len = (text.len() - 4) as u32;
    let crc = crc32(&text);
    let mut chunk = len.to_be_bytes().to_vec();
    chunk.extend(&text);
    chunk.extend(crc.to_be_bytes());
    png.splice(33..33, chunk);
    // Corrupt the IDAT payload but keep its checksum valid.
    let idat = png.windows(4).position(|w| w == b"IDAT").unwrap();
    let len = u32::from_be_bytes(png[idat - 4..idat].try_into().unwrap()) as usize;
    for b in &mut png[idat + 6..idat + 4 + len] {
        *b = 0xAB;
    }
    let crc = crc32(&png[idat..idat + 4 + len]);
    png[idat + 4 + len..idat + 8 + len].copy_from_slice(&crc.to_be_bytes());
    assert!(!probe(&png).unwrap().plain);
    let (_dir, store) = store(ImageLimits::default());
    let err = store
        .save_image(&SaveImage {
            data: png,
            media_type: "image/png".into(),
            name: None,
        })
        .unwrap_err();
    assert_eq!(err.code, AttachmentErrorCode::InvalidImage);
    assert!(
        err.message.starts_with("Invalid image: "),
        "{}",
        err.message
    );
}

#[test]
fn a_byte_cap_nothing_fits_is_refused() {
    let source = RgbImage::from_fn(50, 50, |x, y| Rgb([x as u8 * 5, y as u8 * 5, 0]));
    let data = encode(&DynamicImage::ImageRgb8(source), ImageFormat::Png);
    let (_dir, store) = store(ImageLimits {
        normalized_image_max_bytes: 10,
        ..ImageLimits::default()
    });
    let err = store
        .save_image(&SaveImage {
            data,
            media_type: "image/png".into(),
            name: None,
        })
        .unwrap_err();
    assert_eq!(err.code, AttachmentErrorCode::ImageTooLarge);
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn a_batch_normalizes_within_the_compression_concurrency_and_keeps_its_order() {
    // Four oversized images, each needing a real decode, resize and re-encode.
    let batch: Vec<SaveImage> = (0..4u32)
        .map(|i| {
            let source = RgbImage::from_fn(2600 + i * 10, 1000, |x, y| {
                Rgb([(x % 256) as u8, (y % 256) as u8, (i * 40) as u8])
            });
            SaveImage {
                data: encode(&DynamicImage::ImageRgb8(source), ImageFormat::Png),
                media_type: "image/png".into(),
                name: Some(format!("image-{i}")),
            }
        })
        .collect();
    for concurrency in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let store = AttachmentStore::with_compression_concurrency(
            dir.path().join("attachments/v1"),
            ImageLimits::default(),
            concurrency,
        );
        let refs = store.save_images(&batch).unwrap();
        let names: Vec<_> = refs.iter().map(|r| r.name.clone().unwrap()).collect();
        assert_eq!(names, ["image-0", "image-1", "image-2", "image-3"]);
        let widths: Vec<_> = refs
            .iter()
            .map(|r| r.original_dimensions.unwrap().0)
            .collect();
        assert_eq!(widths, [2600, 2610, 2620, 2630]);
        assert!(store.peak_compressions() >= 1);
        assert!(
            store.peak_compressions() <= concurrency,
            "{} normalizations ran at once with imageCompressionConcurrency {concurrency}",
            store.peak_compressions()
        );
        for r in &refs {
            assert_eq!(decode_stored(&store, r).width(), 2048);
        }
    }
}

#[test]
fn a_failing_image_fails_the_batch_and_publishes_nothing() {
    let good = SaveImage {
        data: encode(
            &DynamicImage::ImageRgb8(RgbImage::from_fn(2600, 100, |x, _| Rgb([x as u8, 0, 0]))),
            ImageFormat::Png,
        ),
        media_type: "image/png".into(),
        name: None,
    };
    let bad = SaveImage {
        data: b"not an image".to_vec(),
        media_type: "image/png".into(),
        name: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("attachments/v1");
    let store =
        AttachmentStore::with_compression_concurrency(root.clone(), ImageLimits::default(), 2);
    let err = store.save_images(&[good.clone(), bad, good]).unwrap_err();
    assert_eq!(err.code, AttachmentErrorCode::InvalidImage);
    assert!(
        !root.join("objects").exists(),
        "nothing is published from a failed batch"
    );
}
