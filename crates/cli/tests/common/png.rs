//! Small, valid PNG files built by hand for the image tests (shared by path: `images.rs`,
//! `web.rs`). Chunk CRCs are real; the pixel data is only decoded where a test says so.
#![allow(dead_code, clippy::unwrap_used)]

/// The CRC-32 of PNG chunks (IEEE, reflected).
pub fn crc32(data: &[u8]) -> u32 {
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

/// A small PNG of `w`×`h` (header and chunk CRCs valid; pixel data not decoded).
pub fn png(w: u32, h: u32) -> Vec<u8> {
    png_with_payload(w, h, &[0x78, 0x9C, 0x63, 0, 0, 0, 1, 0, 1])
}

/// An RGB PNG of `w`×`h` whose IDAT chunk is `idat`.
pub fn png_with_payload(w: u32, h: u32, idat: &[u8]) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8], body: &[u8]| {
        out.extend(u32::try_from(body.len()).unwrap().to_be_bytes());
        let mut crc_input = kind.to_vec();
        crc_input.extend(body);
        out.extend(&crc_input);
        out.extend(crc32(&crc_input).to_be_bytes());
    };
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    chunk(b"IHDR", &ihdr);
    chunk(b"IDAT", idat);
    chunk(b"IEND", &[]);
    out
}
