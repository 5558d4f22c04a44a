//! The stored (normalized) form of an admitted image: the submitted bytes when they already
//! fit, otherwise a decoded, upright, downscaled and re-encoded copy within the byte cap.
//!
//! Pass-through: a single-frame, non-GIF, 8-bit RGB(A)/palette image without retained
//! metadata whose bytes and long edge fit the stored-image limits is kept byte for byte.
//! Everything else is decoded (bounded by the admission limits), turned upright by its
//! EXIF orientation, converted to 8-bit RGB or RGBA, scaled to fit the long-edge cap and
//! re-encoded: low-colour images as PNG, opaque images as JPEG at qualities 85, 80 and 75,
//! images with an alpha channel as PNG. When no candidate fits the byte cap the size
//! shrinks (at least by a factor 0.9 each step) until one does.

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
use image::imageops::FilterType;
use image::{DynamicImage, ImageDecoder, ImageReader, RgbImage, RgbaImage};

use crate::error::{AttachmentError, AttachmentErrorCode};
use crate::limits::ImageLimits;
use crate::probe::{DetectedImage, probe};

const QUALITIES: [u8; 3] = [85, 80, 75];
const LOW_COLOUR_SAMPLE_EDGE: u32 = 128;
const LOW_COLOUR_LIMIT: usize = 256;
const MIN_SCALE_STEP: f64 = 0.9;

/// The bytes to store and the facts their reference records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Normalized {
    pub data: Vec<u8>,
    pub media_type: &'static str,
    pub width: u64,
    pub height: u64,
}

/// Whether the submitted bytes can be stored unchanged.
pub(crate) fn can_pass_through(detected: &DetectedImage, bytes: u64, limits: &ImageLimits) -> bool {
    detected.media_type != "image/gif"
        && !detected.animated
        && detected.plain
        && bytes <= limits.normalized_image_max_bytes
        && detected.width.max(detected.height) <= limits.normalized_image_max_dimension
}

fn invalid(e: impl std::fmt::Display) -> AttachmentError {
    AttachmentError::new(
        AttachmentErrorCode::InvalidImage,
        format!("Invalid image: {e}."),
    )
}

fn write_failed(e: impl std::fmt::Display) -> AttachmentError {
    AttachmentError::new(
        AttachmentErrorCode::AttachmentWriteFailed,
        format!("Image normalization failed: {e}."),
    )
}

/// Decodes the first frame of `data` within the admission limits and turns it upright.
fn decode(
    data: &[u8],
    detected: &DetectedImage,
    limits: &ImageLimits,
) -> Result<DynamicImage, AttachmentError> {
    let format = match detected.media_type {
        "image/png" => image::ImageFormat::Png,
        "image/jpeg" => image::ImageFormat::Jpeg,
        "image/gif" => image::ImageFormat::Gif,
        "image/webp" => image::ImageFormat::WebP,
        other => return Err(invalid(format!("unsupported type {other}"))),
    };
    let side = u32::try_from(limits.max_image_dimension).unwrap_or(u32::MAX);
    let mut bounds = image::Limits::default();
    bounds.max_image_width = Some(side);
    bounds.max_image_height = Some(side);
    // The decoded raster (at most 16-bit RGBA) plus one working copy.
    bounds.max_alloc = Some(
        limits
            .max_image_pixels
            .saturating_mul(16)
            .max(64 * 1024 * 1024),
    );
    let mut reader = ImageReader::with_format(Cursor::new(data), format);
    reader.limits(bounds);
    let mut decoder = reader.into_decoder().map_err(invalid)?;
    let orientation = decoder.orientation().map_err(invalid)?;
    let (w, h) = decoder.dimensions();
    if u64::from(w).saturating_mul(u64::from(h)) > limits.max_image_pixels {
        return Err(AttachmentError::new(
            AttachmentErrorCode::ImageTooManyPixels,
            "Image exceeds the configured decoded-pixel limit.",
        ));
    }
    let mut image = DynamicImage::from_decoder(decoder).map_err(invalid)?;
    image.apply_orientation(orientation);
    Ok(image)
}

/// Whether a nearest-neighbour sample of at most 128×128 has at most 256 colours
/// (5 bits per channel, alpha included).
fn low_colour(image: &DynamicImage) -> bool {
    use image::GenericImageView;
    let (w, h) = image.dimensions();
    let scale = (f64::from(LOW_COLOUR_SAMPLE_EDGE) / f64::from(w.max(h))).min(1.0);
    let sw = ((f64::from(w) * scale).round() as u32).max(1);
    let sh = ((f64::from(h) * scale).round() as u32).max(1);
    let mut colours = std::collections::HashSet::new();
    for y in 0..sh {
        let sy = (u64::from(y) * u64::from(h) / u64::from(sh)) as u32;
        for x in 0..sw {
            let sx = (u64::from(x) * u64::from(w) / u64::from(sw)) as u32;
            let [r, g, b, a] = image.get_pixel(sx, sy).0;
            colours.insert(
                (u32::from(r >> 3) << 15)
                    | (u32::from(g >> 3) << 10)
                    | (u32::from(b >> 3) << 5)
                    | u32::from(a >> 3),
            );
            if colours.len() > LOW_COLOUR_LIMIT {
                return false;
            }
        }
    }
    true
}

enum Raster {
    Rgb(RgbImage),
    Rgba(RgbaImage),
}

impl Raster {
    fn resize(&self, w: u32, h: u32) -> Raster {
        let filter = FilterType::CatmullRom;
        match self {
            Raster::Rgb(i) if i.dimensions() == (w, h) => Raster::Rgb(i.clone()),
            Raster::Rgba(i) if i.dimensions() == (w, h) => Raster::Rgba(i.clone()),
            Raster::Rgb(i) => Raster::Rgb(image::imageops::resize(i, w, h, filter)),
            Raster::Rgba(i) => Raster::Rgba(image::imageops::resize(i, w, h, filter)),
        }
    }

    fn png(&self) -> Result<Vec<u8>, AttachmentError> {
        let mut out = Vec::new();
        let encoder =
            PngEncoder::new_with_quality(&mut out, CompressionType::Best, PngFilter::Adaptive);
        let result = match self {
            Raster::Rgb(i) => i.write_with_encoder(encoder),
            Raster::Rgba(i) => i.write_with_encoder(encoder),
        };
        result.map_err(write_failed)?;
        Ok(out)
    }

    fn jpeg(&self, quality: u8) -> Result<Vec<u8>, AttachmentError> {
        let mut out = Vec::new();
        let encoder = JpegEncoder::new_with_quality(&mut out, quality);
        match self {
            Raster::Rgb(i) => i.write_with_encoder(encoder),
            Raster::Rgba(i) => DynamicImage::ImageRgba8(i.clone())
                .to_rgb8()
                .write_with_encoder(encoder),
        }
        .map_err(write_failed)?;
        Ok(out)
    }
}

#[derive(Clone, Copy)]
enum Encoding {
    Png,
    Jpeg(u8),
}

/// Produces the stored form of an admitted image (`detected` is its probe).
pub(crate) fn normalize(
    data: &[u8],
    detected: &DetectedImage,
    limits: &ImageLimits,
) -> Result<Normalized, AttachmentError> {
    if can_pass_through(detected, data.len() as u64, limits) {
        return Ok(Normalized {
            data: data.to_vec(),
            media_type: detected.media_type,
            width: detected.width,
            height: detected.height,
        });
    }
    let decoded = decode(data, detected, limits)?;
    let has_alpha = decoded.color().has_alpha();
    let few_colours = low_colour(&decoded);
    let source = if has_alpha {
        Raster::Rgba(decoded.into_rgba8())
    } else {
        Raster::Rgb(decoded.into_rgb8())
    };
    let mut attempts = Vec::new();
    if few_colours {
        attempts.push(Encoding::Png);
    }
    if has_alpha {
        // Upstream falls back to lossy WebP here; this build has no lossy WebP encoder,
        // so images with alpha stay lossless PNG and shrink until they fit.
        if !few_colours {
            attempts.push(Encoding::Png);
        }
    } else {
        attempts.extend(QUALITIES.map(Encoding::Jpeg));
    }

    let (sw, sh) = match &source {
        Raster::Rgb(i) => i.dimensions(),
        Raster::Rgba(i) => i.dimensions(),
    };
    let max_dim = limits.normalized_image_max_dimension as f64;
    let scale = (max_dim / f64::from(sw.max(sh))).min(1.0);
    let mut width = ((f64::from(sw) * scale).round() as u32).max(1);
    let mut height = ((f64::from(sh) * scale).round() as u32).max(1);
    let cap = limits.normalized_image_max_bytes;
    loop {
        let raster = source.resize(width, height);
        let mut smallest: Option<usize> = None;
        for attempt in &attempts {
            let (bytes, media_type) = match attempt {
                Encoding::Png => (raster.png()?, "image/png"),
                Encoding::Jpeg(q) => (raster.jpeg(*q)?, "image/jpeg"),
            };
            if bytes.len() as u64 <= cap {
                return verified(bytes, media_type, width, height);
            }
            smallest = Some(smallest.map_or(bytes.len(), |s| s.min(bytes.len())));
        }
        if width == 1 && height == 1 {
            break;
        }
        let smallest = smallest.unwrap_or(1).max(1) as f64;
        let scale = ((cap as f64 / smallest).sqrt() * 0.95).min(MIN_SCALE_STEP);
        width = ((f64::from(width) * scale).floor() as u32).max(1);
        height = ((f64::from(height) * scale).floor() as u32).max(1);
    }
    Err(AttachmentError::new(
        AttachmentErrorCode::ImageTooLarge,
        "Image cannot be encoded within the configured stored-image byte cap.",
    ))
}

/// Checks that the encoder produced what the reference will claim.
fn verified(
    data: Vec<u8>,
    media_type: &'static str,
    width: u32,
    height: u32,
) -> Result<Normalized, AttachmentError> {
    match probe(&data) {
        Ok(d)
            if d.media_type == media_type
                && d.width == u64::from(width)
                && d.height == u64::from(height)
                && !d.animated =>
        {
            Ok(Normalized {
                data,
                media_type,
                width: u64::from(width),
                height: u64::from(height),
            })
        }
        _ => Err(write_failed(
            "the encoder did not produce a single-frame image of the expected size",
        )),
    }
}
