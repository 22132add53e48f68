//! The stream container: a versioned, self-describing header with its own checksum, the
//! chunks' payloads, and a checksum over the payload. Layout of version 2 (integers
//! little-endian, varints LEB128):
//!
//! ```text
//! "AMRZ" | version u8 | dtype u8 | ndim u8 | preset u8 | bound mode u8 | codebook source u8
//! bound f64 (as the user gave it) | eb f64 (the absolute bound used; only where the mode
//! byte's top bit is set: absent when it is the bound as given)
//! radius varint | shape varint x ndim | chunk shape varint x ndim
//! codebook length varint | codebook bytes (a Huffman table, an offline codebook id, the context
//! coder, or nothing)
//! per chunk (as many as the chunk grid has): predictor u8, stored length varint, raw length varint
//! crc32 of everything above (u32)
//! chunk payloads, in chunk order | crc32 of the payloads (u32)
//! ```
//! Version 1 (still read) had fixed-width integers and a chunk count. A small array's stream is
//! mostly header, so version 2 keeps it short. `docs/format.md` describes the whole format,
//! including what is inside a chunk.

use crate::bytes::{append_all, crc32, put_varint, ByteReader};
use crate::element::DType;
use crate::error::{corrupt, Result};
use crate::grid::{checked_num_elements, num_elements};
use crate::predictor::PredictorKind;
use crate::{ErrorBound, Preset};

pub const MAGIC: &[u8; 4] = b"AMRZ";
pub const VERSION: u8 = 2;
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
    /// No codebook: the symbols are coded in context (`entropy::contexts`); the header holds
    /// the context coder.
    Contexts = 3,
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
    /// Bytes of the values the stream decodes to (saturating).
    pub fn decoded_bytes(&self) -> usize {
        self.shape.iter().fold(self.dtype.size(), |n, &d| n.saturating_mul(d))
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        let (mode, bound) = match self.bound {
            ErrorBound::Absolute(b) => (0u8, b),
            ErrorBound::Relative(b) => (1u8, b),
            ErrorBound::Ratio(r) => (2u8, r),
            ErrorBound::Psnr(p) => (3u8, p),
        };
        // The absolute bound is stored only where it is not the bound as given.
        let own_eb = self.eb.to_bits() != bound.to_bits() || mode != 0;
        let mode = mode | (own_eb as u8) << 7;
        out.extend_from_slice(&[VERSION, self.dtype as u8, self.shape.len() as u8, self.preset as u8, mode, self.codebook_source as u8]);
        out.extend_from_slice(&bound.to_le_bytes());
        if own_eb {
            out.extend_from_slice(&self.eb.to_le_bytes());
        }
        put_varint(out, self.radius as u64);
        for &n in self.shape.iter().chain(&self.chunk_shape) {
            put_varint(out, n as u64);
        }
        put_varint(out, self.codebook.len() as u64);
        out.extend_from_slice(&self.codebook);
        for c in &self.chunks {
            out.push(c.predictor as u8);
            put_varint(out, c.stored_len);
            put_varint(out, c.raw_len);
        }
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Parses and validates the header (version 1 or 2); returns it and its length in bytes.
    pub fn read(stream: &[u8]) -> Result<(Header, usize)> {
        let mut r = ByteReader::new(stream);
        if r.take(4, "magic").map_err(|_| corrupt!("too short to be an amrzip stream ({} bytes)", stream.len()))? != MAGIC {
            return Err(corrupt!("not an amrzip stream (bad magic)"));
        }
        let version = r.u8("version")?;
        if !(1..=VERSION).contains(&version) {
            return Err(corrupt!("unsupported format version {version} (this build reads versions 1 to {VERSION})"));
        }
        let v1 = version == 1;
        // Version 1's fixed-width integers, version 2's varints.
        let int = |r: &mut ByteReader, width: usize, what: &str| -> Result<u64> {
            match (v1, width) {
                (true, 4) => r.u32(what).map(u64::from),
                (true, _) => r.u64(what),
                (false, _) => r.varint(what),
            }
        };
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
        // Version 2 flags with the top bit of the mode that the absolute bound follows the bound.
        let (mode, own_eb) = match r.u8("bound mode")? {
            m if v1 => (m, true),
            m => (m & 0x7f, m & 0x80 != 0),
        };
        let codebook_source = match r.u8("codebook source")? {
            0 => CodebookSource::Inline,
            1 => CodebookSource::Offline,
            2 => CodebookSource::Previous,
            3 if !v1 => CodebookSource::Contexts,
            c => return Err(corrupt!("unknown codebook source {c}")),
        };
        if v1 && r.take(2, "reserved")? != [0, 0] {
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
        let eb = if own_eb { r.f64("absolute bound")? } else { value };
        if !(value >= 0.0 && value.is_finite() && eb >= 0.0 && eb.is_finite()) {
            return Err(corrupt!("invalid error bound {value} / {eb}"));
        }
        let radius = int(&mut r, 4, "radius")?;
        if !(2..=32768).contains(&radius) {
            return Err(corrupt!("quantization radius {radius} out of range"));
        }
        let mut dims = Vec::with_capacity(2 * ndim);
        for _ in 0..2 * ndim {
            let n = int(&mut r, 8, "shape")?;
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
        let cb_len = int(&mut r, 4, "codebook length")?;
        let codebook = r.take(usize::try_from(cb_len).unwrap_or(usize::MAX), "codebook")?.to_vec();
        match (codebook_source, codebook.len()) {
            (CodebookSource::Inline, _) | (CodebookSource::Offline, 1) | (CodebookSource::Previous, 0) => {}
            (CodebookSource::Contexts, n) if n > 0 => {}
            (source, n) => return Err(corrupt!("{n} codebook bytes for a codebook source {source:?}")),
        }
        let expected: usize = shape.iter().zip(&chunk_shape).map(|(&n, &c)| n.div_ceil(c)).product();
        if v1 {
            let n_chunks = r.u64("chunk count")?;
            if n_chunks != expected as u64 {
                return Err(corrupt!("{n_chunks} chunks listed but the chunk grid has {expected}"));
            }
        }
        // An entry takes at least 3 bytes (17 in version 1): a count the stream cannot hold
        // fails before we allocate.
        if expected > r.remaining() / if v1 { 17 } else { 3 } {
            return Err(corrupt!("{expected} chunk entries cannot fit in the {} bytes left", r.remaining()));
        }
        let mut chunks = Vec::with_capacity(expected);
        for _ in 0..expected {
            let predictor = PredictorKind::from_code(r.u8("chunk predictor")?).ok_or_else(|| corrupt!("unknown predictor code"))?;
            chunks.push(ChunkEntry {
                predictor,
                stored_len: int(&mut r, 8, "chunk length")?,
                raw_len: int(&mut r, 8, "chunk raw length")?,
            });
        }
        let covered = r.position();
        let crc = r.u32("header checksum")?;
        if crc != crc32(&stream[..covered]) {
            return Err(corrupt!("header checksum mismatch"));
        }
        Ok((
            Header { dtype, shape, preset, bound, eb, radius: radius as u32, chunk_shape, codebook_source, codebook, chunks },
            r.position(),
        ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{compress, decompress, Config};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// The 6 x 7 field the version-1 streams below were written from.
    fn field() -> Vec<f64> {
        (0..6).flat_map(|i| (0..7).map(move |j| (0.3 * i as f64).sin() + 0.1 * (j * j) as f64)).collect()
    }

    #[test]
    fn version_1_streams_still_decode() {
        // Written by the version-1 writer: float64 at abs 1e-3 in ratio mode, float32 at rel
        // 1e-2 in speed mode.
        let f64_stream = hex(concat!(
            "414d525a0101020000000000fca9f1d24d62503ffca9f1d24d62503f0080000006000000000000000700000000000000",
            "060000000000000007000000000000001900000007f0fc0100fc02000a0004014000ae0300930a006308200819010000",
            "000000000002150000000000000013000000000000001dc09f9300130003010001000cfedd7b33b3bb90246d0b00003e",
            "d85da6"
        ));
        let f32_stream = hex(concat!(
            "414d525a01000201010000007b14ae47e17a843fbdf5285c078aa73f0080000006000000000000000700000000000000",
            "060000000000000007000000000000001200000005eeff01010e01010011003600630820c60001000000000000000213",
            "000000000000001100000000000000aa52a70700110004010100010009fe6ea72d92040000008480430a"
        ));
        let x = field();
        let (y, shape) = decompress::<f64>(&f64_stream, None).unwrap();
        assert_eq!(shape, [6, 7]);
        assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() <= 1e-3));
        let (y, _) = decompress::<f32>(&f32_stream, None).unwrap();
        let eb = Header::read(&f32_stream).unwrap().0.eb;
        assert!(x.iter().zip(&y).all(|(&a, &b)| (a as f32 as f64 - b as f64).abs() <= eb));
    }

    #[test]
    fn an_absolute_bound_is_stored_once_and_any_other_beside_its_bound() {
        let x = field();
        for (bound, own_eb) in [(ErrorBound::Absolute(1e-3), false), (ErrorBound::Relative(1e-3), true)] {
            let s = compress(&x, &[6, 7], &Config::new(bound)).unwrap();
            assert_eq!(s[4], VERSION);
            assert_eq!(s[8] & 0x80 != 0, own_eb);
            let h = Header::read(&s).unwrap().0;
            assert_eq!(h.bound, bound);
            let (y, _) = decompress::<f64>(&s, None).unwrap();
            assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() <= h.eb));
        }
    }
}
