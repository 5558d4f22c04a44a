//! Format detection and dimension probing for PNG, JPEG, GIF and WebP, from the container
//! structure alone (no pixel decoding): every chunk, segment or block is walked and
//! bounds-checked, PNG chunk CRCs are verified, and truncated or inconsistent files are
//! refused. Any input, however corrupt, yields an error, never a panic; work is linear in
//! the input size and nothing is allocated beyond a few counters.

/// What the container says about an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetectedImage {
    pub media_type: &'static str,
    /// Width as a viewer perceives it (JPEG EXIF orientations 5–8 swap the axes).
    pub width: u64,
    pub height: u64,
    /// More than one frame (APNG, animated GIF or WebP).
    pub animated: bool,
    /// 8-bit RGB(A) or palette samples and no retained metadata (EXIF, XMP, IPTC, ICC
    /// profile, text chunks or comments): the bytes may be stored as they are when they
    /// also fit the stored-image limits. Always false for GIF.
    pub plain: bool,
}

/// Why bytes are not a supported image (the message names the problem).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProbeError(pub String);

fn bad(format: &str, why: &str) -> ProbeError {
    ProbeError(format!("malformed {format}: {why}"))
}

/// The media type the leading bytes announce, if any.
pub fn sniff(data: &[u8]) -> Option<&'static str> {
    if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if data.starts_with(b"GIF87a") || data.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if data.len() >= 12 && &data[0..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// Detects the format from the bytes and validates the whole container.
pub fn probe(data: &[u8]) -> Result<DetectedImage, ProbeError> {
    let detected = match sniff(data) {
        Some("image/png") => png(data)?,
        Some("image/jpeg") => jpeg(data)?,
        Some("image/gif") => gif(data)?,
        Some("image/webp") => webp(data)?,
        _ => {
            return Err(ProbeError(
                "unsupported or malformed image data (not PNG, JPEG, GIF or WebP)".into(),
            ));
        }
    };
    if detected.width == 0 || detected.height == 0 {
        return Err(ProbeError(format!(
            "malformed {}: zero width or height",
            detected.media_type
        )));
    }
    Ok(detected)
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le24(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 3)?;
    Some(u32::from(s[0]) | u32::from(s[1]) << 8 | u32::from(s[2]) << 16)
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
};

fn crc32(bytes: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in bytes {
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

/// `data` without the PNG chunks that are both ancillary (their type starts with a lowercase
/// letter: colour profiles, metadata, text) and damaged (checksum mismatch), as PNG readers
/// such as libpng treat them: skipped with a warning. `None` when `data` is not a PNG whose
/// chunks can be walked, or when nothing was dropped. A damaged critical chunk stays, so
/// the image is still refused.
pub fn drop_damaged_ancillary_png_chunks(data: &[u8]) -> Option<Vec<u8>> {
    if sniff(data) != Some("image/png") {
        return None;
    }
    let mut out = data.get(..8)?.to_vec();
    let mut at = 8;
    let mut dropped = false;
    while at < data.len() {
        let len = be32(data, at)? as usize;
        let end = at.checked_add(12)?.checked_add(len)?;
        let chunk = data.get(at..end)?;
        let kind = &chunk[4..8];
        let stored = be32(chunk, 8 + len)?;
        let ancillary = kind[0].is_ascii_lowercase();
        if ancillary && crc32(&chunk[4..8 + len]) != stored {
            dropped = true;
        } else {
            out.extend_from_slice(chunk);
        }
        at = end;
        if kind == b"IEND" {
            break;
        }
    }
    dropped.then_some(out)
}

fn png(data: &[u8]) -> Result<DetectedImage, ProbeError> {
    let f = "PNG";
    let mut at = 8;
    let mut first = true;
    let mut size = None;
    let mut animated = false;
    let mut saw_idat = false;
    let mut plain = false;
    loop {
        let len = be32(data, at).ok_or_else(|| bad(f, "truncated chunk header"))? as usize;
        let kind = data
            .get(at + 4..at + 8)
            .ok_or_else(|| bad(f, "truncated chunk header"))?;
        let end = at
            .checked_add(12)
            .and_then(|x| x.checked_add(len))
            .filter(|&e| e <= data.len())
            .ok_or_else(|| bad(f, "chunk runs past the end of the file"))?;
        let body = &data[at + 8..at + 8 + len];
        let stored = be32(data, at + 8 + len).ok_or_else(|| bad(f, "truncated chunk"))?;
        if crc32(&data[at + 4..at + 8 + len]) != stored {
            return Err(bad(f, "chunk checksum mismatch"));
        }
        if first {
            if kind != b"IHDR" || len != 13 {
                return Err(bad(f, "the first chunk is not IHDR"));
            }
            let (w, h) = (be32(body, 0).unwrap_or(0), be32(body, 4).unwrap_or(0));
            if w > i32::MAX as u32 || h > i32::MAX as u32 {
                return Err(bad(f, "dimensions out of range"));
            }
            let (depth, color) = (body[8], body[9]);
            let valid = match color {
                0 => matches!(depth, 1 | 2 | 4 | 8 | 16),
                3 => matches!(depth, 1 | 2 | 4 | 8),
                2 | 4 | 6 => matches!(depth, 8 | 16),
                _ => false,
            };
            if !valid {
                return Err(bad(f, "invalid bit depth or colour type"));
            }
            size = Some((u64::from(w), u64::from(h)));
            plain = matches!((depth, color), (8, 2 | 6) | (_, 3));
            first = false;
        } else {
            match kind {
                b"IHDR" => return Err(bad(f, "a second IHDR chunk")),
                b"acTL" => animated = be32(body, 0).is_some_and(|frames| frames > 1),
                b"IDAT" => saw_idat = true,
                b"IEND" => break,
                b"iCCP" | b"eXIf" | b"tEXt" | b"zTXt" | b"iTXt" => plain = false,
                _ => {}
            }
        }
        at = end;
    }
    if !saw_idat {
        return Err(bad(f, "no image data (IDAT)"));
    }
    let (width, height) = size.ok_or_else(|| bad(f, "no IHDR"))?;
    Ok(DetectedImage {
        media_type: "image/png",
        width,
        height,
        animated,
        plain: plain && !animated,
    })
}

/// The EXIF orientation (1–8) of an APP1 `Exif` payload, if it has one.
fn exif_orientation(app1: &[u8]) -> Option<u16> {
    let tiff = app1.strip_prefix(b"Exif\0\0")?;
    let little = match tiff.get(0..2)? {
        b"II" => true,
        b"MM" => false,
        _ => return None,
    };
    let r16 = |at: usize| {
        if little {
            le16(tiff, at)
        } else {
            be16(tiff, at)
        }
    };
    let r32 = |at: usize| {
        if little {
            le32(tiff, at)
        } else {
            be32(tiff, at)
        }
    };
    let ifd = r32(4)? as usize;
    let count = r16(ifd)? as usize;
    for i in 0..count.min(512) {
        let entry = ifd.checked_add(2 + i * 12)?;
        if r16(entry)? == 0x0112 {
            return r16(entry + 8).filter(|o| (1..=8).contains(o));
        }
    }
    None
}

fn jpeg(data: &[u8]) -> Result<DetectedImage, ProbeError> {
    let f = "JPEG";
    let mut at = 2;
    let mut size = None;
    let mut orientation = 1;
    let mut plain = true;
    loop {
        // Markers may be padded with any number of 0xFF fill bytes.
        if data.get(at) != Some(&0xFF) {
            return Err(bad(f, "expected a marker"));
        }
        while data.get(at) == Some(&0xFF) {
            at += 1;
        }
        let marker = *data.get(at).ok_or_else(|| bad(f, "truncated marker"))?;
        at += 1;
        match marker {
            0xD8 | 0x01 | 0xD0..=0xD7 => continue,
            0xD9 => return Err(bad(f, "end of image before any scan")),
            _ => {}
        }
        let len = be16(data, at).ok_or_else(|| bad(f, "truncated segment"))? as usize;
        if len < 2 || at + len > data.len() {
            return Err(bad(f, "segment runs past the end of the file"));
        }
        let body = &data[at + 2..at + len];
        match marker {
            0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                if body.len() < 6 {
                    return Err(bad(f, "short frame header"));
                }
                let h = be16(body, 1).unwrap_or(0);
                let w = be16(body, 3).unwrap_or(0);
                size = Some((u64::from(w), u64::from(h)));
                // 8-bit precision, three (YCbCr) components.
                plain &= body[0] == 8 && body[5] == 3;
            }
            0xE1 => {
                plain = false;
                if let Some(o) = exif_orientation(body) {
                    orientation = o;
                }
            }
            // ICC profile, IPTC, comment.
            0xE2 | 0xED | 0xFE => plain = false,
            0xDA => {
                // Entropy-coded data follows; the file must still end with EOI.
                let (w, h) = size.ok_or_else(|| bad(f, "scan before any frame header"))?;
                let tail = &data[at + len..];
                let trimmed = tail
                    .iter()
                    .rposition(|&b| b != 0)
                    .map_or(&tail[..0], |i| &tail[..=i]);
                if !trimmed.ends_with(&[0xFF, 0xD9]) {
                    return Err(bad(f, "truncated (no end-of-image marker)"));
                }
                let (width, height) = if orientation >= 5 { (h, w) } else { (w, h) };
                return Ok(DetectedImage {
                    media_type: "image/jpeg",
                    width,
                    height,
                    animated: false,
                    plain,
                });
            }
            _ => {}
        }
        at += len;
    }
}

/// Skips GIF data sub-blocks starting at `at`; returns the index after the terminator.
fn gif_sub_blocks(data: &[u8], mut at: usize) -> Result<usize, ProbeError> {
    loop {
        let n = *data
            .get(at)
            .ok_or_else(|| bad("GIF", "truncated data block"))? as usize;
        at += 1;
        if n == 0 {
            return Ok(at);
        }
        at += n;
        if at > data.len() {
            return Err(bad("GIF", "data block runs past the end of the file"));
        }
    }
}

fn gif(data: &[u8]) -> Result<DetectedImage, ProbeError> {
    let f = "GIF";
    let width = le16(data, 6).ok_or_else(|| bad(f, "truncated header"))?;
    let height = le16(data, 8).ok_or_else(|| bad(f, "truncated header"))?;
    let flags = *data.get(10).ok_or_else(|| bad(f, "truncated header"))?;
    let mut at = 13;
    if flags & 0x80 != 0 {
        at += 3 << ((flags & 7) + 1);
    }
    let mut frames = 0u32;
    loop {
        match data.get(at) {
            Some(0x2C) => {
                let packed = *data
                    .get(at + 9)
                    .ok_or_else(|| bad(f, "truncated image descriptor"))?;
                at += 10;
                if packed & 0x80 != 0 {
                    at += 3 << ((packed & 7) + 1);
                }
                // LZW minimum code size, then the image data.
                if data.get(at).is_none() {
                    return Err(bad(f, "truncated image data"));
                }
                at = gif_sub_blocks(data, at + 1)?;
                frames += 1;
            }
            Some(0x21) => {
                if data.get(at + 1).is_none() {
                    return Err(bad(f, "truncated extension"));
                }
                at = gif_sub_blocks(data, at + 2)?;
            }
            Some(0x3B) => break,
            Some(_) => return Err(bad(f, "unknown block")),
            None => return Err(bad(f, "truncated (no trailer)")),
        }
    }
    if frames == 0 {
        return Err(bad(f, "no image frames"));
    }
    Ok(DetectedImage {
        media_type: "image/gif",
        width: u64::from(width),
        height: u64::from(height),
        animated: frames > 1,
        plain: false,
    })
}

fn webp(data: &[u8]) -> Result<DetectedImage, ProbeError> {
    let f = "WebP";
    let riff = le32(data, 4).ok_or_else(|| bad(f, "truncated header"))? as usize;
    let end = riff
        .checked_add(8)
        .filter(|&e| e <= data.len())
        .ok_or_else(|| bad(f, "RIFF size runs past the end of the file"))?;
    let mut at = 12;
    let mut result: Option<DetectedImage> = None;
    let mut saw_image = false;
    while at + 8 <= end {
        let kind = &data[at..at + 4];
        let len = le32(data, at + 4).unwrap_or(0) as usize;
        let body_end = (at + 8)
            .checked_add(len)
            .filter(|&e| e <= end)
            .ok_or_else(|| bad(f, "chunk runs past the end of the file"))?;
        let body = &data[at + 8..body_end];
        match kind {
            b"VP8X" => {
                let flags = *body.first().ok_or_else(|| bad(f, "short VP8X chunk"))?;
                let w = le24(body, 4).ok_or_else(|| bad(f, "short VP8X chunk"))?;
                let h = le24(body, 7).ok_or_else(|| bad(f, "short VP8X chunk"))?;
                result = Some(DetectedImage {
                    media_type: "image/webp",
                    width: u64::from(w) + 1,
                    height: u64::from(h) + 1,
                    animated: flags & 0x02 != 0,
                    // ICC, EXIF and XMP flags.
                    plain: flags & 0x2C == 0 && flags & 0x02 == 0,
                });
            }
            b"VP8 " => {
                if body.get(3..6) != Some(&[0x9D, 0x01, 0x2A]) {
                    return Err(bad(f, "bad VP8 frame header"));
                }
                let w = le16(body, 6).ok_or_else(|| bad(f, "short VP8 chunk"))? & 0x3FFF;
                let h = le16(body, 8).ok_or_else(|| bad(f, "short VP8 chunk"))? & 0x3FFF;
                saw_image = true;
                result.get_or_insert(DetectedImage {
                    media_type: "image/webp",
                    width: u64::from(w),
                    height: u64::from(h),
                    animated: false,
                    plain: true,
                });
            }
            b"VP8L" => {
                if body.first() != Some(&0x2F) {
                    return Err(bad(f, "bad VP8L signature"));
                }
                let bits = le32(body, 1).ok_or_else(|| bad(f, "short VP8L chunk"))?;
                saw_image = true;
                result.get_or_insert(DetectedImage {
                    media_type: "image/webp",
                    width: u64::from(bits & 0x3FFF) + 1,
                    height: u64::from((bits >> 14) & 0x3FFF) + 1,
                    animated: false,
                    plain: true,
                });
            }
            b"ANMF" => saw_image = true,
            _ => {}
        }
        // Chunks are padded to even sizes.
        at = body_end + (len & 1);
    }
    if !saw_image {
        return Err(bad(f, "no image data"));
    }
    result.ok_or_else(|| bad(f, "no image header"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// A minimal valid PNG of `w`×`h` (the IDAT payload is not decoded by the probe).
    pub(crate) fn png_bytes(w: u32, h: u32) -> Vec<u8> {
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut chunk = |kind: &[u8], body: &[u8]| {
            out.extend((body.len() as u32).to_be_bytes());
            let mut crc_input = kind.to_vec();
            crc_input.extend(body);
            out.extend(&crc_input);
            out.extend(crc32(&crc_input).to_be_bytes());
        };
        let mut ihdr = w.to_be_bytes().to_vec();
        ihdr.extend(h.to_be_bytes());
        ihdr.extend([8, 2, 0, 0, 0]);
        chunk(b"IHDR", &ihdr);
        chunk(b"IDAT", &[0x78, 0x9C, 0x63, 0, 0, 0, 1, 0, 1]);
        chunk(b"IEND", &[]);
        out
    }

    #[test]
    fn a_damaged_ancillary_chunk_is_dropped_and_a_damaged_critical_one_is_kept() {
        let good = png_bytes(2, 3);
        assert_eq!(drop_damaged_ancillary_png_chunks(&good), None);
        // A tEXt chunk with a wrong checksum after IHDR (8 + 25 bytes in).
        let mut damaged = good[..33].to_vec();
        damaged.extend(4u32.to_be_bytes());
        damaged.extend(b"tEXtabcd");
        damaged.extend(0u32.to_be_bytes());
        damaged.extend(&good[33..]);
        assert!(probe(&damaged).is_err());
        let repaired = drop_damaged_ancillary_png_chunks(&damaged).unwrap();
        assert_eq!(repaired, good);
        assert!(probe(&repaired).is_ok());
        // A damaged IDAT is critical: nothing is dropped, the image stays refused.
        let mut critical = good.clone();
        let idat_crc = critical.len() - 12 - 4;
        critical[idat_crc] ^= 0xFF;
        assert_eq!(drop_damaged_ancillary_png_chunks(&critical), None);
        assert!(probe(&critical).is_err());
    }

    pub(crate) fn jpeg_bytes(w: u16, h: u16, orientation: Option<u16>) -> Vec<u8> {
        let mut out = vec![0xFF, 0xD8];
        if let Some(o) = orientation {
            let mut tiff = b"Exif\0\0MM\0\x2a\0\0\0\x08".to_vec();
            tiff.extend(1u16.to_be_bytes());
            tiff.extend(0x0112u16.to_be_bytes());
            tiff.extend(3u16.to_be_bytes());
            tiff.extend(1u32.to_be_bytes());
            tiff.extend(o.to_be_bytes());
            tiff.extend([0, 0]);
            out.extend([0xFF, 0xE1]);
            out.extend((tiff.len() as u16 + 2).to_be_bytes());
            out.extend(tiff);
        }
        out.extend([0xFF, 0xC0, 0, 11, 8]);
        out.extend(h.to_be_bytes());
        out.extend(w.to_be_bytes());
        out.extend([1, 1, 0x11, 0]);
        out.extend([0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0x3F, 0]);
        out.extend([0x12, 0x34, 0xFF, 0x00, 0x56]);
        out.extend([0xFF, 0xD9]);
        out
    }

    pub(crate) fn gif_bytes(w: u16, h: u16, frames: usize) -> Vec<u8> {
        let mut out = b"GIF89a".to_vec();
        out.extend(w.to_le_bytes());
        out.extend(h.to_le_bytes());
        out.extend([0x80, 0, 0]);
        out.extend([0; 6]);
        for _ in 0..frames {
            out.extend([0x21, 0xF9, 4, 0, 0, 0, 0, 0]);
            out.push(0x2C);
            out.extend([0, 0, 0, 0]);
            out.extend(w.to_le_bytes());
            out.extend(h.to_le_bytes());
            out.push(0);
            out.extend([2, 2, 0x4C, 0x01, 0]);
        }
        out.push(0x3B);
        out
    }

    pub(crate) fn webp_lossless(w: u32, h: u32) -> Vec<u8> {
        let bits = (w - 1) | (h - 1) << 14;
        let mut body = vec![0x2F];
        body.extend(bits.to_le_bytes());
        body.extend([0, 0, 0]);
        let mut out = b"RIFF".to_vec();
        out.extend(((body.len() + 12) as u32).to_le_bytes());
        out.extend(b"WEBPVP8L");
        out.extend((body.len() as u32).to_le_bytes());
        out.extend(body);
        out
    }

    #[test]
    fn each_format_reports_its_dimensions() {
        let cases = [
            (png_bytes(3, 2), "image/png", 3, 2, false),
            (jpeg_bytes(640, 480, None), "image/jpeg", 640, 480, false),
            (jpeg_bytes(640, 480, Some(6)), "image/jpeg", 480, 640, false),
            (gif_bytes(5, 7, 1), "image/gif", 5, 7, false),
            (gif_bytes(5, 7, 3), "image/gif", 5, 7, true),
            (webp_lossless(300, 200), "image/webp", 300, 200, false),
        ];
        for (bytes, media_type, width, height, animated) in cases {
            assert_eq!(
                probe(&bytes).map(|d| (d.media_type, d.width, d.height, d.animated)),
                Ok((media_type, width, height, animated))
            );
        }
    }

    #[test]
    fn the_conformance_pixel_probes_as_a_one_by_one_png() {
        let bytes = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC",
        )
        .unwrap();
        assert_eq!(probe(&bytes).map(|d| (d.width, d.height)), Ok((1, 1)));
    }

    #[test]
    fn corrupt_and_truncated_images_are_refused() {
        let mut flipped = png_bytes(3, 2);
        flipped[20] ^= 1;
        let png = png_bytes(3, 2);
        let jpeg = jpeg_bytes(4, 4, None);
        let gif = gif_bytes(1, 1, 1);
        for bad in [
            flipped,
            png[..png.len() - 5].to_vec(),
            jpeg[..jpeg.len() - 2].to_vec(),
            gif[..gif.len() - 1].to_vec(),
            png_bytes(0, 2),
            b"plain text".to_vec(),
            b"RIFF\xff\xff\xff\xffWEBP".to_vec(),
        ] {
            assert!(probe(&bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(proptest::num::u8::ANY, 0..256), kind in 0usize..4) {
            let prefix: &[u8] = match kind {
                0 => b"\x89PNG\r\n\x1a\n",
                1 => &[0xFF, 0xD8, 0xFF],
                2 => b"GIF89a",
                _ => b"RIFF\x20\0\0\0WEBP",
            };
            let mut bytes = prefix.to_vec();
            bytes.extend(tail);
            let _ = probe(&bytes);
        }

        #[test]
        fn every_truncation_of_a_valid_image_is_handled(cut in 0usize..64) {
            for full in [png_bytes(9, 9), jpeg_bytes(9, 9, Some(8)), gif_bytes(9, 9, 2), webp_lossless(9, 9)] {
                let cut = cut.min(full.len());
                let _ = probe(&full[..cut]);
            }
        }
    }
}
