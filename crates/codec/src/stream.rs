//! The stream container: a versioned, self-describing header with its own checksum, the
//! chunks' payloads, and a checksum over the payload. Layout (all integers little-endian):
//!
//! ```text
//! "AMRZ" | version u8 | dtype u8 | ndim u8 | preset u8 | bound mode u8 | codebook source u8 | 2 zero bytes
//! bound f64 (as the user gave it) | eb f64 (absolute bound used) | radius u32
//! shape u64 x ndim | chunk shape u64 x ndim
//! codebook length u32 | codebook bytes (the table, an offline codebook id, or nothing)
//! chunk count u64 | per chunk: predictor u8, stored length u64, raw length u64
//! crc32 of everything above (u32)
//! chunk payloads, in chunk order | crc32 of the payloads (u32)
//! ```
//! `docs/format.md` describes the whole format, including what is inside a chunk.

use crate::bytes::{append_all, crc32, ByteReader};
use crate::element::DType;
use crate::error::{corrupt, Result};
use crate::grid::{checked_num_elements, num_elements};
use crate::predictor::PredictorKind;
use crate::{ErrorBound, Preset};

pub const MAGIC: &[u8; 4] = b"AMRZ";
pub const VERSION: u8 = 1;
/// A chunk may hold at most this many elements (a power of two). The decoder allocates a
/// chunk's symbols only after its bitstream proved long enough to hold them.
pub const MAX_CHUNK_ELEMENTS: usize = 1 << 27;
const MAX_NDIM: usize = 4;

/// Where the stream's Huffman codebook comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodebookSource {
    /// Serialized in the header.
    Inline = 0,
    /// One of the codebooks built into the library; the header holds its id (one byte).
    Offline = 1,
    /// The codebook of the preceding record of a chunked stream (see `streaming`); the header
    /// holds nothing, and the stream cannot be decoded on its own.
    Previous = 2,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ChunkEntry {
    pub predictor: PredictorKind,
    pub stored_len: u64,
    pub raw_len: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub preset: Preset,
    pub bound: ErrorBound,
    pub eb: f64,
    pub radius: u32,
    pub chunk_shape: Vec<usize>,
    pub codebook_source: CodebookSource,
    pub codebook: Vec<u8>,
    pub chunks: Vec<ChunkEntry>,
}

impl Header {
    pub fn write(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        let (mode, bound) = match self.bound {
            ErrorBound::Absolute(b) => (0u8, b),
            ErrorBound::Relative(b) => (1u8, b),
            ErrorBound::Ratio(r) => (2u8, r),
            ErrorBound::Psnr(p) => (3u8, p),
        };
        out.extend_from_slice(&[
            VERSION,
            self.dtype as u8,
            self.shape.len() as u8,
            self.preset as u8,
            mode,
            self.codebook_source as u8,
            0,
            0,
        ]);
        out.extend_from_slice(&bound.to_le_bytes());
        out.extend_from_slice(&self.eb.to_le_bytes());
        out.extend_from_slice(&self.radius.to_le_bytes());
        for &n in self.shape.iter().chain(&self.chunk_shape) {
            out.extend_from_slice(&(n as u64).to_le_bytes());
        }
        out.extend_from_slice(&(self.codebook.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.codebook);
        out.extend_from_slice(&(self.chunks.len() as u64).to_le_bytes());
        for c in &self.chunks {
            out.push(c.predictor as u8);
            out.extend_from_slice(&c.stored_len.to_le_bytes());
            out.extend_from_slice(&c.raw_len.to_le_bytes());
        }
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Parses and validates the header; returns it and its length in bytes.
    pub fn read(stream: &[u8]) -> Result<(Header, usize)> {
        let mut r = ByteReader::new(stream);
        if r.take(4, "magic").map_err(|_| corrupt!("too short to be an amrzip stream ({} bytes)", stream.len()))? != MAGIC {
            return Err(corrupt!("not an amrzip stream (bad magic)"));
        }
        let version = r.u8("version")?;
        if version != VERSION {
            return Err(corrupt!("unsupported format version {version} (this build reads version {VERSION})"));
        }
        let dtype = DType::from_code(r.u8("dtype")?).ok_or_else(|| corrupt!("unknown dtype code"))?;
        let ndim = r.u8("ndim")? as usize;
        if !(1..=MAX_NDIM).contains(&ndim) {
            return Err(corrupt!("{ndim} dimensions (1 to {MAX_NDIM} supported)"));
        }
        let preset = match r.u8("preset")? {
            0 => Preset::Ratio,
            1 => Preset::Speed,
            p => return Err(corrupt!("unknown preset {p}")),
        };
        let mode = r.u8("bound mode")?;
        let codebook_source = match r.u8("codebook source")? {
            0 => CodebookSource::Inline,
            1 => CodebookSource::Offline,
            2 => CodebookSource::Previous,
            c => return Err(corrupt!("unknown codebook source {c}")),
        };
        if r.take(2, "reserved")? != [0, 0] {
            return Err(corrupt!("reserved header bytes are not zero"));
        }
        let value = r.f64("bound")?;
        let bound = match mode {
            0 => ErrorBound::Absolute(value),
            1 => ErrorBound::Relative(value),
            2 => ErrorBound::Ratio(value),
            3 => ErrorBound::Psnr(value),
            m => return Err(corrupt!("unknown bound mode {m}")),
        };
        let eb = r.f64("absolute bound")?;
        if !(value >= 0.0 && value.is_finite() && eb >= 0.0 && eb.is_finite()) {
            return Err(corrupt!("invalid error bound {value} / {eb}"));
        }
        let radius = r.u32("radius")?;
        if !(2..=32768).contains(&radius) {
            return Err(corrupt!("quantization radius {radius} out of range"));
        }
        let mut dims = Vec::with_capacity(2 * ndim);
        for _ in 0..2 * ndim {
            let n = r.u64("shape")?;
            dims.push(usize::try_from(n).map_err(|_| corrupt!("dimension {n} too large"))?);
        }
        let (shape, chunk_shape) = (dims[..ndim].to_vec(), dims[ndim..].to_vec());
        checked_num_elements(&shape).filter(|&n| n <= isize::MAX as usize / 8).ok_or_else(|| corrupt!("shape {shape:?} is too large"))?;
        if chunk_shape.iter().zip(&shape).any(|(&c, &n)| c == 0 || (n > 0 && c > n)) {
            return Err(corrupt!("chunk shape {chunk_shape:?} does not fit shape {shape:?}"));
        }
        if chunk_shape.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n)).is_none_or(|n| n > MAX_CHUNK_ELEMENTS) {
            return Err(corrupt!("chunk shape {chunk_shape:?} exceeds {MAX_CHUNK_ELEMENTS} elements"));
        }
        let cb_len = r.u32("codebook length")? as usize;
        let codebook = r.take(cb_len, "codebook")?.to_vec();
        match (codebook_source, cb_len) {
            (CodebookSource::Inline, _) | (CodebookSource::Offline, 1) | (CodebookSource::Previous, 0) => {}
            (source, n) => return Err(corrupt!("{n} codebook bytes for a codebook source {source:?}")),
        }
        let n_chunks = r.u64("chunk count")?;
        let expected: usize = shape.iter().zip(&chunk_shape).map(|(&n, &c)| n.div_ceil(c)).product();
        if n_chunks != expected as u64 {
            return Err(corrupt!("{n_chunks} chunks listed but the chunk grid has {expected}"));
        }
        // Each entry takes 17 bytes: a count the stream cannot hold fails before we allocate.
        if expected > r.remaining() / 17 {
            return Err(corrupt!("{expected} chunk entries cannot fit in the {} bytes left", r.remaining()));
        }
        let mut chunks = Vec::with_capacity(expected);
        for _ in 0..expected {
            let predictor = PredictorKind::from_code(r.u8("chunk predictor")?).ok_or_else(|| corrupt!("unknown predictor code"))?;
            chunks.push(ChunkEntry { predictor, stored_len: r.u64("chunk length")?, raw_len: r.u64("chunk raw length")? });
        }
        let covered = r.position();
        let crc = r.u32("header checksum")?;
        if crc != crc32(&stream[..covered]) {
            return Err(corrupt!("header checksum mismatch"));
        }
        Ok((Header { dtype, shape, preset, bound, eb, radius, chunk_shape, codebook_source, codebook, chunks }, r.position()))
    }
}

/// A parsed stream: its header and each chunk's stored bytes, checksums verified.
pub struct Stream<'a> {
    pub header: Header,
    pub payloads: Vec<&'a [u8]>,
}

impl<'a> Stream<'a> {
    pub fn read(stream: &'a [u8]) -> Result<Stream<'a>> {
        let (header, header_len) = Header::read(stream)?;
        let mut r = ByteReader::new(&stream[header_len..]);
        let mut payloads = Vec::with_capacity(header.chunks.len());
        for (i, c) in header.chunks.iter().enumerate() {
            let len = usize::try_from(c.stored_len).map_err(|_| corrupt!("chunk {i} length too large"))?;
            payloads.push(r.take(len, "chunk payload").map_err(|_| corrupt!("stream truncated in chunk {i} of {}", header.chunks.len()))?);
        }
        let payload_end = header_len + r.position();
        let crc = r.u32("payload checksum").map_err(|_| corrupt!("stream truncated before the payload checksum"))?;
        if r.remaining() != 0 {
            return Err(corrupt!("{} unexpected bytes after the end of the stream", r.remaining()));
        }
        if crc != crc32(&stream[header_len..payload_end]) {
            return Err(corrupt!("payload checksum mismatch"));
        }
        Ok(Stream { header, payloads })
    }

    pub fn write(header: &Header, payloads: &[Vec<u8>]) -> Vec<u8> {
        let total: usize = payloads.iter().map(Vec::len).sum();
        let mut out = Vec::with_capacity(total + 256 + 17 * payloads.len());
        header.write(&mut out);
        let start = out.len();
        append_all(&mut out, &payloads.iter().map(|p| &p[..]).collect::<Vec<_>>());
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

/// What `info` reports about a stream.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamInfo {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub preset: Preset,
    pub bound: ErrorBound,
    /// The absolute bound every value honours.
    pub abs_bound: f64,
    pub chunk_shape: Vec<usize>,
    pub codebook_source: CodebookSource,
    /// Id of the built-in codebook, for `CodebookSource::Offline`.
    pub offline_codebook: Option<u8>,
    /// Chunks per predictor, in predictor-code order, for those used.
    pub predictors: Vec<(PredictorKind, usize)>,
    pub compressed_size: usize,
    pub original_size: usize,
}

impl StreamInfo {
    pub fn read(stream: &[u8]) -> Result<StreamInfo> {
        let s = Stream::read(stream)?;
        let h = s.header;
        let mut predictors: Vec<(PredictorKind, usize)> = Vec::new();
        for c in &h.chunks {
            match predictors.iter_mut().find(|(k, _)| *k == c.predictor) {
                Some((_, n)) => *n += 1,
                None => predictors.push((c.predictor, 1)),
            }
        }
        predictors.sort_by_key(|(k, _)| *k as u8);
        Ok(StreamInfo {
            dtype: h.dtype,
            original_size: num_elements(&h.shape) * h.dtype.size(),
            shape: h.shape,
            preset: h.preset,
            bound: h.bound,
            abs_bound: h.eb,
            chunk_shape: h.chunk_shape,
            codebook_source: h.codebook_source,
            offline_codebook: (h.codebook_source == CodebookSource::Offline).then(|| h.codebook[0]),
            predictors,
            compressed_size: stream.len(),
        })
    }
}
