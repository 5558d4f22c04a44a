//! Zstandard container of a compressed log: concatenated independent frames, each with a
//! content checksum. Frame 1 holds the header line; every durable batch adds one frame.
//!
//! A structural scan finds frame boundaries without decompressing; a frame cut short by a
//! crash can only be the last one, and whatever whole blocks it holds are salvaged.

use std::io::Read;

/// Little-endian magic number of a Zstandard frame.
const MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// Compression level of every frame. A frame is one durable batch, usually a few hundred
/// bytes to a few KiB: at that size level 1 compresses as well as libzstd's default (3)
/// and about a third faster (`zstd -b1 -e3 -B1500` on a loop session's log: ratio 2.244
/// against 2.239). The frames are ordinary zstd frames whatever the level.
const LEVEL: i32 = 1;

/// Complete frames (`[start, end)` byte ranges) and where an incomplete last frame starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FrameScan {
    pub frames: Vec<(usize, usize)>,
    pub torn_start: Option<usize>,
}

/// Whether `bytes` start like a Zstandard frame.
pub(crate) fn has_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// Structural damage found by [`scan_frames`]: the frames complete before it, and the start
/// of the frame that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FrameDamage {
    pub frames: Vec<(usize, usize)>,
    pub frame_start: usize,
    pub message: String,
}

impl std::fmt::Display for FrameDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Scans frame boundaries. Errors (invalid magic, reserved bits or block types, skippable
/// frames) are structural damage; EOF inside a frame marks it torn. Stops after
/// `max_frames` complete frames.
pub(crate) fn scan_frames(buf: &[u8], max_frames: usize) -> Result<FrameScan, FrameDamage> {
    let mut frames = Vec::new();
    let mut offset = 0usize;
    let mut start: usize;
    macro_rules! damage {
        ($($arg:tt)*) => {
            return Err(FrameDamage { frames, frame_start: start, message: format!($($arg)*) })
        };
    }
    let torn = |frames: Vec<(usize, usize)>, start: usize| {
        Ok(FrameScan {
            frames,
            torn_start: Some(start),
        })
    };
    while offset < buf.len() {
        start = offset;
        if buf.len() - offset < 4 {
            return torn(frames, start);
        }
        if buf[offset..offset + 4] != MAGIC {
            damage!("invalid Zstandard frame magic at byte {offset}");
        }
        offset += 4;
        let Some(&descriptor) = buf.get(offset) else {
            return torn(frames, start);
        };
        if descriptor & 0x18 != 0 {
            damage!("reserved Zstandard frame-header bit at byte {offset}");
        }
        offset += 1;
        let content_size_flag = descriptor >> 6;
        let single_segment = descriptor & 0x20 != 0;
        let checksum = descriptor & 0x04 != 0;
        let dictionary_bytes = match descriptor & 0x03 {
            3 => 4,
            n => usize::from(n),
        };
        let content_size_bytes = match content_size_flag {
            0 => usize::from(single_segment),
            n => 1usize << n,
        };
        let rest = usize::from(!single_segment) + dictionary_bytes + content_size_bytes;
        if buf.len() - offset < rest {
            return torn(frames, start);
        }
        offset += rest;
        match walk_blocks(buf, offset, None) {
            Blocks::End(end) => offset = end,
            Blocks::Torn => return torn(frames, start),
            Blocks::Reserved(at) => damage!("reserved Zstandard block type at byte {at}"),
        }
        if checksum {
            if buf.len() - offset < 4 {
                return torn(frames, start);
            }
            offset += 4;
        }
        frames.push((start, offset));
        if frames.len() == max_frames {
            break;
        }
    }
    Ok(FrameScan {
        frames,
        torn_start: None,
    })
}

/// Where a frame's chain of blocks leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blocks {
    /// The last block ends here.
    End(usize),
    /// The input ends inside the chain.
    Torn,
    /// A block at this offset has the reserved type.
    Reserved(usize),
}

/// Block offsets known to lead to [`Blocks::Torn`] or [`Blocks::Reserved`]: whatever frame
/// header led there, the chain from such an offset ends the same way. Without this,
/// candidate frames nested inside each other's blocks would each walk the same long chain
/// again (quadratic in the damaged tail).
struct DeadEnds {
    bits: Vec<u64>,
    /// Block headers read by walks that used this memo (the work done).
    steps: usize,
}

impl DeadEnds {
    fn new(len: usize) -> Self {
        Self {
            bits: vec![0; len / 64 + 1],
            steps: 0,
        }
    }

    fn contains(&self, at: usize) -> bool {
        self.bits
            .get(at / 64)
            .is_some_and(|word| word & (1 << (at % 64)) != 0)
    }

    fn insert(&mut self, at: usize) {
        if let Some(word) = self.bits.get_mut(at / 64) {
            *word |= 1 << (at % 64);
        }
    }
}

/// Follows the block headers of a frame from `offset` to the end of its last block. With
/// `dead_ends`, a chain reaching an offset known to be a dead end stops there, and every
/// offset of a chain that turns out dead is remembered.
fn walk_blocks(buf: &[u8], mut offset: usize, dead_ends: Option<&mut DeadEnds>) -> Blocks {
    let mut visited = Vec::new();
    let outcome = loop {
        if let Some(dead) = dead_ends.as_deref()
            && dead.contains(offset)
        {
            break Blocks::Torn;
        }
        if dead_ends.is_some() {
            visited.push(offset);
        }
        if buf.len() - offset < 3 {
            break Blocks::Torn;
        }
        let header = u32::from(buf[offset])
            | u32::from(buf[offset + 1]) << 8
            | u32::from(buf[offset + 2]) << 16;
        let last = header & 1 != 0;
        let block_type = (header >> 1) & 0x03;
        let size = (header >> 3) as usize;
        if block_type == 3 {
            break Blocks::Reserved(offset);
        }
        let payload = if block_type == 1 { 1 } else { size };
        if buf.len() - offset - 3 < payload {
            break Blocks::Torn;
        }
        offset += 3 + payload;
        if last {
            break Blocks::End(offset);
        }
    };
    if let Some(dead) = dead_ends {
        dead.steps += visited.len();
        if !matches!(outcome, Blocks::End(_)) {
            for at in visited {
                dead.insert(at);
            }
        }
    }
    outcome
}

/// The end offset of the frame starting at `start` of `buf` when it is structurally
/// complete, using and extending `dead_ends` (offsets in `buf`) for its blocks.
fn complete_frame_at_in(buf: &[u8], start: usize, dead_ends: &mut DeadEnds) -> Option<usize> {
    let frame = buf.get(start..)?;
    if !frame.starts_with(&MAGIC) {
        return None;
    }
    let descriptor = *frame.get(4)?;
    if descriptor & 0x18 != 0 {
        return None;
    }
    let single_segment = descriptor & 0x20 != 0;
    let checksum = descriptor & 0x04 != 0;
    let dictionary_bytes = match descriptor & 0x03 {
        3 => 4,
        n => usize::from(n),
    };
    let content_size_bytes = match descriptor >> 6 {
        0 => usize::from(single_segment),
        n => 1usize << n,
    };
    let header = 5 + usize::from(!single_segment) + dictionary_bytes + content_size_bytes;
    if frame.len() < header {
        return None;
    }
    let Blocks::End(end) = walk_blocks(buf, start + header, Some(dead_ends)) else {
        return None;
    };
    let end = end + if checksum { 4 } else { 0 };
    (end <= buf.len()).then_some(end)
}

thread_local! {
    /// This thread's compression context, kept between frames: a new one costs an
    /// allocation and the zeroing of its tables on every batch. Each frame still starts a
    /// new session (no history is shared between frames).
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn new_compressor() -> std::io::Result<zstd::bulk::Compressor<'static>> {
    let mut compressor = zstd::bulk::Compressor::new(LEVEL)?;
    compressor.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
    Ok(compressor)
}

/// Compresses `plain` into one checksummed frame.
pub(crate) fn compress_frame(plain: &[u8]) -> std::io::Result<Vec<u8>> {
    COMPRESSOR.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return new_compressor()?.compress(plain);
        };
        let compressor = match slot.as_mut() {
            Some(c) => c,
            None => slot.insert(new_compressor()?),
        };
        let frame = compressor.compress(plain);
        if frame.is_err() {
            // A context in an unknown state is not used again.
            *slot = None;
        }
        frame
    })
}

/// The plaintext size the frames of `buf` declare (a capacity hint; 0 when unknown).
pub(crate) fn declared_size(buf: &[u8], frames: &[(usize, usize)]) -> usize {
    frames
        .iter()
        .map(
            |&(start, end)| match zstd::zstd_safe::get_frame_content_size(&buf[start..end]) {
                Ok(Some(n)) => usize::try_from(n).unwrap_or(0),
                _ => 0,
            },
        )
        .fold(0usize, usize::saturating_add)
}

/// The environment variable that sets [`InflateLimits::frame`].
pub const MAX_FRAME_BYTES_ENV: &str = "DSH_MAX_LOG_FRAME_BYTES";
/// The environment variable that sets [`InflateLimits::log`].
pub const MAX_LOG_BYTES_ENV: &str = "DSH_MAX_LOG_BYTES";
/// Default of [`InflateLimits::frame`]: one batch of a live session is far smaller.
pub const DEFAULT_MAX_FRAME_BYTES: u64 = 256 << 20;

/// Smallest plaintext budget of a compressed log, whatever its size.
pub(crate) const MIN_PLAIN_BUDGET: u64 = 64 << 20;
/// Largest plaintext budget of a compressed log.
pub(crate) const MAX_PLAIN_BUDGET: u64 = 4 << 30;
/// Plaintext bytes allowed per compressed byte. Session JSONL compresses 5–30×; a
/// decompression bomb, thousands of times.
const PLAIN_PER_COMPRESSED: u64 = 256;

/// How much a compressed log may inflate when it is read. Every decompression of a log's
/// bytes counts: its intact frames, the candidate frames probed after damaged bytes (to
/// tell damage inside the log from a crash tail) and the salvage of a torn last frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InflateLimits {
    /// Most plaintext any one frame may inflate to.
    pub frame: u64,
    /// Most plaintext a whole log may inflate to; `None`: 256 bytes per compressed byte,
    /// at least 64 MiB and at most 4 GiB.
    pub log: Option<u64>,
}

impl Default for InflateLimits {
    fn default() -> Self {
        Self {
            frame: DEFAULT_MAX_FRAME_BYTES,
            log: None,
        }
    }
}

impl InflateLimits {
    /// The defaults, overridden by `DSH_MAX_LOG_FRAME_BYTES` and `DSH_MAX_LOG_BYTES`
    /// (positive byte counts). A value that is not one is an error naming the variable.
    pub fn from_env() -> Result<Self, String> {
        let log = match std::env::var_os(MAX_LOG_BYTES_ENV) {
            None => None,
            Some(_) => Some(dsh_kernel::config::byte_limit_from_env(
                MAX_LOG_BYTES_ENV,
                0,
            )?)
            .filter(|n| *n > 0),
        };
        Ok(Self {
            frame: dsh_kernel::config::byte_limit_from_env(
                MAX_FRAME_BYTES_ENV,
                DEFAULT_MAX_FRAME_BYTES,
            )?,
            log,
        })
    }

    /// The plaintext budget of a log of `compressed_len` bytes.
    pub(crate) fn log_budget(&self, compressed_len: usize) -> u64 {
        self.log.unwrap_or_else(|| {
            (compressed_len as u64)
                .saturating_mul(PLAIN_PER_COMPRESSED)
                .clamp(MIN_PLAIN_BUDGET, MAX_PLAIN_BUDGET)
        })
    }
}

/// Why a frame could not be inflated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Frame `frame` (an index into the given frames) failed validation.
    Invalid { frame: usize, message: String },
    /// The plaintext would exceed a limit (the message names it and how to raise it).
    TooLarge { message: String },
}

/// The plaintext budget of reading one log: what is left of the whole-log allowance, and
/// the per-frame cap.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    limits: InflateLimits,
    compressed_len: usize,
    total: u64,
    used: u64,
}

impl Budget {
    /// A fresh budget for reading a log of `compressed_len` bytes.
    pub fn for_log(compressed_len: usize, limits: InflateLimits) -> Self {
        Self {
            limits,
            compressed_len,
            total: limits.log_budget(compressed_len),
            used: 0,
        }
    }

    /// What is left of the whole-log allowance.
    pub fn left(&self) -> u64 {
        self.total.saturating_sub(self.used)
    }

    /// Inflates the single frame `frame` (found at byte `at` of the log; its checksum
    /// verified) into `sink`, within the per-frame cap and what is left of the log's
    /// allowance. Returns the plaintext length. Nothing past the allowed bytes is ever
    /// produced: a bomb stops at the cap.
    fn inflate(
        &mut self,
        frame: &[u8],
        at: usize,
        index: usize,
        sink: Sink<'_>,
    ) -> Result<u64, DecodeError> {
        let (room, cap) = self.room();
        let invalid = |e: std::io::Error| DecodeError::Invalid {
            frame: index,
            message: format!("Zstandard frame at byte {at} failed validation: {e}"),
        };
        let decoder = zstd::stream::read::Decoder::with_buffer(frame)
            .map_err(invalid)?
            .single_frame();
        let mut limited = decoder.take(room.saturating_add(1));
        let produced = match sink {
            Sink::Keep(out) => limited.read_to_end(out).map(|n| n as u64),
            Sink::Discard => std::io::copy(&mut limited, &mut std::io::sink()),
        };
        let produced = produced.map_err(invalid)?;
        self.used = self.used.saturating_add(produced.min(room));
        if produced <= room {
            return Ok(produced);
        }
        Err(DecodeError::TooLarge {
            message: self.exceeded(at, cap),
        })
    }

    /// How many bytes the next frame may inflate to, and which limit sets that.
    fn room(&self) -> (u64, Cap) {
        match self.limits.frame <= self.left() {
            true => (self.limits.frame, Cap::Frame),
            false => (self.left(), Cap::Log),
        }
    }

    /// The error text for a frame at byte `at` that went past the `cap` limit.
    fn exceeded(&self, at: usize, cap: Cap) -> String {
        if cap == Cap::Frame {
            format!(
                "the Zstandard frame at byte {at} inflates to more than {} bytes, the limit for one frame (set {MAX_FRAME_BYTES_ENV} to raise it); refusing it as a likely decompression bomb",
                self.limits.frame
            )
        } else {
            let rule = match self.limits.log {
                Some(_) => String::new(),
                None => format!(" (256 per compressed byte of {})", self.compressed_len),
            };
            format!(
                "the log inflates to more than {} bytes{rule}, the limit for one log (set {MAX_LOG_BYTES_ENV} to raise it); refusing it as a likely decompression bomb",
                self.total
            )
        }
    }
}

/// Where inflated bytes go.
enum Sink<'a> {
    /// Appended to the plaintext.
    Keep(&'a mut Vec<u8>),
    /// Only counted (a candidate frame probed for validity).
    Discard,
}

/// Which limit bounds the next frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cap {
    Frame,
    Log,
}

/// Decompresses `frames` of `buf` one by one (checksums verified), appending to `out`,
/// within `budget`. On an error `out` holds exactly the frames before the failing one.
pub(crate) fn decode_bounded(
    buf: &[u8],
    frames: &[(usize, usize)],
    out: &mut Vec<u8>,
    budget: &mut Budget,
) -> Result<(), DecodeError> {
    for (i, &(start, end)) in frames.iter().enumerate() {
        let before = out.len();
        if let Err(e) = budget.inflate(&buf[start..end], start, i, Sink::Keep(out)) {
            out.truncate(before);
            return Err(e);
        }
    }
    Ok(())
}

/// Decompresses complete frames (checksums verified), appending to `out`.
#[cfg(test)]
pub(crate) fn decompress_complete(frames: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(frames)?;
    decoder.read_to_end(out)?;
    Ok(())
}

/// Where a valid frame (structurally complete, checksum verified) starts somewhere after
/// the first byte of `tail` (which begins at byte `offset` of the log). A crash can only
/// tear the last frame, so an apparently torn frame followed by a valid one is damage
/// inside the log, not a crash tail.
///
/// Candidates are inflated (into nothing) within `budget`: a candidate that inflates past
/// a limit is an error, since whether it is valid cannot be known without inflating it,
/// and taking it for garbage would cut whatever it holds.
pub(crate) fn valid_frame_follows(
    tail: &[u8],
    offset: usize,
    budget: &mut Budget,
) -> Result<Option<usize>, DecodeError> {
    find_valid_frame(tail, offset, budget, &mut DeadEnds::new(tail.len()))
}

fn find_valid_frame(
    tail: &[u8],
    offset: usize,
    budget: &mut Budget,
    dead_ends: &mut DeadEnds,
) -> Result<Option<usize>, DecodeError> {
    let mut from = 1;
    while let Some(rel) = tail
        .get(from..)
        .and_then(|t| t.windows(4).position(|w| w == MAGIC))
    {
        let at = from + rel;
        if let Some(end) = complete_frame_at_in(tail, at, dead_ends) {
            match budget.inflate(&tail[at..end], offset + at, 0, Sink::Discard) {
                Ok(_) => return Ok(Some(at)),
                Err(DecodeError::Invalid { .. }) => {}
                Err(too_large @ DecodeError::TooLarge { .. }) => return Err(too_large),
            }
        }
        from = at + 1;
    }
    Ok(None)
}

/// Salvages the plaintext of a torn frame (at byte `at` of the log): the output produced
/// before the decoder hit the end of input or an error. A frame with no whole block yields
/// nothing; one that inflates past the budget is an error (what it holds is not cut).
pub(crate) fn salvage_torn(
    frame_prefix: &[u8],
    at: usize,
    budget: &mut Budget,
) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    let Ok(decoder) = zstd::stream::read::Decoder::with_buffer(frame_prefix) else {
        return Ok(out);
    };
    let (room, cap) = budget.room();
    let mut decoder = decoder.single_frame().take(room.saturating_add(1));
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match decoder.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    }
    let produced = out.len() as u64;
    budget.used = budget.used.saturating_add(produced.min(room));
    if produced > room {
        return Err(DecodeError::TooLarge {
            message: budget.exceeded(at, cap),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_compressor_writes_the_same_self_contained_frames_as_a_new_one() {
        let big = b"a line of a session log\n".repeat(4096);
        let inputs: [&[u8]; 4] = [b"header\n", &big, b"", b"one\ntwo\n"];
        for plain in inputs {
            let kept = compress_frame(plain).unwrap();
            let fresh = new_compressor().unwrap().compress(plain).unwrap();
            assert_eq!(kept, fresh, "a kept context must not change the frame");
            // Each frame decodes alone: nothing of the previous frames is referenced.
            assert_eq!(zstd::bulk::decompress(&kept, plain.len()).unwrap(), plain);
        }
    }

    #[test]
    fn scan_finds_frames_and_torn_tail() {
        let a = compress_frame(b"header\n").unwrap();
        let b = compress_frame(b"one\ntwo\n").unwrap();
        let mut buf = a.clone();
        buf.extend_from_slice(&b);
        let scan = scan_frames(&buf, usize::MAX).unwrap();
        assert_eq!(
            scan,
            FrameScan {
                frames: vec![(0, a.len()), (a.len(), buf.len())],
                torn_start: None
            }
        );
        for cut in a.len() + 1..buf.len() {
            let scan = scan_frames(&buf[..cut], usize::MAX).unwrap();
            assert_eq!(
                scan,
                FrameScan {
                    frames: vec![(0, a.len())],
                    torn_start: Some(a.len())
                }
            );
        }
        let mut bad = buf.clone();
        bad[a.len()] ^= 1;
        let damage = scan_frames(&bad, usize::MAX).unwrap_err();
        assert!(damage.message.contains(&format!("at byte {}", a.len())));
        assert_eq!(damage.frames, vec![(0, a.len())]);
        assert_eq!(damage.frame_start, a.len());
        let mut out = Vec::new();
        decompress_complete(&buf, &mut out).unwrap();
        assert_eq!(out, b"header\none\ntwo\n");
    }

    /// `units` raw blocks of 16 bytes in a chain that runs past the end; each payload
    /// starts a candidate frame whose first block jumps to the next outer block, so every
    /// candidate's chain joins the outer one.
    fn nested_candidates(units: usize) -> Vec<u8> {
        let header = |size: u32| (size << 3).to_le_bytes()[..3].to_vec();
        let mut tail = b"junk".to_vec();
        for _ in 0..units {
            tail.extend(header(16));
            tail.extend(MAGIC);
            tail.extend([0x00, 0x38]);
            tail.extend(header(7));
            tail.extend([0u8; 7]);
        }
        tail.extend(header(1 << 20));
        tail
    }

    #[test]
    fn nested_candidate_frames_are_walked_once() {
        for units in [1_000, 4_000] {
            let tail = nested_candidates(units);
            let mut budget = Budget::for_log(tail.len(), InflateLimits::default());
            let mut dead_ends = DeadEnds::new(tail.len());
            assert_eq!(
                find_valid_frame(&tail, 0, &mut budget, &mut dead_ends),
                Ok(None)
            );
            // Each outer block is read once, plus each candidate's own first block: linear
            // (walking each candidate's chain to the end would be units² / 2).
            assert!(dead_ends.steps <= 3 * units, "{} steps", dead_ends.steps);
        }
        // A valid frame after the same chain is still found.
        let mut tail = nested_candidates(100);
        let at = tail.len();
        tail.extend(compress_frame(b"line\n").unwrap());
        let mut budget = Budget::for_log(tail.len(), InflateLimits::default());
        assert_eq!(valid_frame_follows(&tail, 0, &mut budget), Ok(Some(at)));
    }

    #[test]
    fn checksum_damage_is_detected() {
        let mut frame = compress_frame(&b"0123456789abcdef".repeat(64)).unwrap();
        let n = frame.len();
        frame[n - 1] ^= 0xFF;
        assert!(
            scan_frames(&frame, usize::MAX)
                .unwrap()
                .torn_start
                .is_none()
        );
        assert!(decompress_complete(&frame, &mut Vec::new()).is_err());
    }

    #[test]
    fn salvage_keeps_whole_blocks_of_a_torn_frame() {
        // Incompressible input larger than one block (128 KiB) makes several blocks.
        let mut state = 0x2545F491u32;
        let plain: Vec<u8> = (0..300_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                b'a' + (state % 26) as u8
            })
            .collect();
        let frame = compress_frame(&plain).unwrap();
        let mut budget = Budget::for_log(frame.len(), InflateLimits::default());
        let salvaged = salvage_torn(&frame[..frame.len() - 10], 0, &mut budget).unwrap();
        assert!(salvaged.len() >= 128 * 1024, "salvaged {}", salvaged.len());
        assert_eq!(&plain[..salvaged.len()], &salvaged[..]);
        assert!(
            salvage_torn(&frame[..5], 0, &mut budget)
                .unwrap()
                .is_empty()
        );
    }
}
