//! The chunked-stream container, "AMRS" (`docs/format.md`, section 13): arrays compressed one
//! after another into records, each an amrzip stream whose codebook may be the one of the record
//! before, then an end block with the counts and a digest of everything before it.
//!
//! [`StreamWriter`] cuts the arrays it is given into chunks (an element count for a flat
//! sequence, or slabs along axis 0) and owns the [`StreamEncoder`] that keeps its choices from
//! chunk to chunk; [`AtomicFile`] gives it a file that appears only once complete.
//! [`StreamReader`] reads the records back in order, checking what section 13 requires of a
//! reader, and decodes them; [`StreamReader::describe`] reads the structure without decoding.
//!
//! Damaged data fails with [`CodecError::Corrupt`] naming the record; nothing is allocated for a
//! length before its bytes have arrived.

use amrzip_codec::{
    self as codec, CodebookSource, CodecError, Config, DType, Element, EncoderStats, Policy, StreamDecoder, StreamEncoder, StreamInfo,
};
use blake2::digest::{Update, VariableOutput};
use blake2::Blake2bVar;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The first four bytes of a chunked stream.
pub const MAGIC: [u8; 4] = *b"AMRS";
/// The container version this build writes and reads.
pub const VERSION: u8 = 1;
const HEADER_LEN: usize = 8;
const DIGEST_LEN: usize = 4;
/// The zero length that ends the records, the record and element counts, and the digest.
const TAIL_LEN: u64 = 8 + 16 + DIGEST_LEN as u64;

/// What can go wrong reading or writing a chunked stream.
#[derive(Debug)]
pub enum Error {
    /// Damaged data (`CodecError::Corrupt`) or unusable arguments (`CodecError::InvalidInput`).
    Codec(CodecError),
    /// The source or destination failed; running out of bytes is `Corrupt` instead.
    Io(io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl From<CodecError> for Error {
    fn from(e: CodecError) -> Error {
        Error::Codec(e)
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Codec(e) => e.fmt(f),
            Error::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Codec(e) => Some(e),
            Error::Io(e) => Some(e),
        }
    }
}

fn corrupt(message: String) -> Error {
    Error::Codec(CodecError::Corrupt(message))
}

fn invalid(message: String) -> Error {
    Error::Codec(CodecError::InvalidInput(message))
}

/// A shape as Python prints a tuple, so that messages read the same from every binding.
fn tuple(shape: &[usize]) -> String {
    match shape {
        [n] => format!("({n},)"),
        _ => format!("({})", shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// BLAKE2b with a 4-byte output over every byte of the stream before the digest. A checksum of
/// the counts alone, or a CRC-32 over the records, would accept records swapped, repeated or
/// spliced in from another stream: each record ends in CRC-32s of its own parts, which makes its
/// CRC-32 depend on its length only.
#[derive(Clone)]
struct Digest(Blake2bVar);

impl Digest {
    fn new() -> Digest {
        Digest(Blake2bVar::new(DIGEST_LEN).expect("BLAKE2b has outputs of 1 to 64 bytes"))
    }

    fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn value(&self) -> [u8; DIGEST_LEN] {
        let mut out = [0; DIGEST_LEN];
        self.0.clone().finalize_variable(&mut out).expect("a buffer of the output size");
        out
    }
}

/// Writes arrays of `T` into a chunked stream on `W`, chunk by chunk as they fill.
///
/// `chunk` is an element count `[n]` (the data is a flat sequence, cut every `n` elements
/// whatever the shapes written) or a chunk shape `[rows, rest..]` of 2 to 4 sides: the arrays
/// written then have shape `[any, rest..]` and are cut into slabs of `rows` along axis 0. Rows
/// that do not fill a chunk wait in a buffer of one chunk; [`finish`](Self::finish) writes them
/// and the end block.
pub struct StreamWriter<T: Element, W: Write> {
    out: W,
    encoder: StreamEncoder,
    /// The sides after axis 0 (none for a flat stream), and the elements of one chunk.
    rest: Vec<usize>,
    chunk_len: usize,
    pending: Vec<T>,
    records: u64,
    elements: u64,
    bytes_written: u64,
    digest: Digest,
    finished: bool,
    /// A write to `out` failed part way: the stream can only be abandoned.
    broken: bool,
}

impl<T: Element, W: Write> StreamWriter<T, W> {
    /// Starts a stream on `out` (its header is written at once) compressed by a
    /// [`StreamEncoder`] of `config` and `policy`.
    pub fn new(out: W, chunk: &[usize], config: Config, policy: Policy) -> Result<Self> {
        if !(1..=4).contains(&chunk.len()) || chunk.contains(&0) {
            return Err(invalid(format!("chunk must be an element count or a shape of 1 to 4 positive sides, got {chunk:?}")));
        }
        let chunk_len = chunk
            .iter()
            .try_fold(1usize, |n, &side| n.checked_mul(side))
            .ok_or_else(|| invalid(format!("chunk {chunk:?} is too large")))?;
        let encoder = StreamEncoder::new(config, policy)?;
        let mut writer = StreamWriter {
            out,
            encoder,
            rest: chunk[1..].to_vec(),
            chunk_len,
            pending: Vec::new(),
            records: 0,
            elements: 0,
            bytes_written: 0,
            digest: Digest::new(),
            finished: false,
            broken: false,
        };
        let mut header = [0; HEADER_LEN];
        header[..4].copy_from_slice(&MAGIC);
        header[4] = VERSION;
        header[5] = T::DTYPE as u8;
        writer.emit(&header)?;
        Ok(writer)
    }

    /// Appends `data` (C order, of `shape`); every chunk it completes is compressed and written
    /// before this returns.
    pub fn write(&mut self, data: &[T], shape: &[usize]) -> Result<()> {
        self.check_open("write() after finish()")?;
        if shape.iter().try_fold(1usize, |n, &side| n.checked_mul(side)) != Some(data.len()) {
            return Err(invalid(format!("{} values do not make an array of shape {}", data.len(), tuple(shape))));
        }
        if !self.rest.is_empty() && shape.get(1..) != Some(&self.rest[..]) {
            let rest: Vec<String> = self.rest.iter().map(usize::to_string).collect();
            return Err(invalid(format!("expected an array of shape (any, {}), got {}", rest.join(", "), tuple(shape))));
        }
        let mut data = data;
        while !data.is_empty() {
            if self.pending.is_empty() && data.len() >= self.chunk_len {
                // Whole chunks go to the encoder straight from the caller's array.
                let (chunk, rest) = data.split_at(self.chunk_len);
                self.encode(chunk)?;
                data = rest;
            } else {
                if self.pending.capacity() == 0 {
                    self.pending.reserve_exact(self.chunk_len);
                }
                let take = (self.chunk_len - self.pending.len()).min(data.len());
                self.pending.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.pending.len() == self.chunk_len {
                    self.flush_pending()?;
                }
            }
        }
        Ok(())
    }

    /// Compresses what is left, writes the end block and flushes `out`. The stream is then
    /// complete; for an [`AtomicFile`], [`commit`](AtomicFile::commit) it.
    pub fn finish(&mut self) -> Result<()> {
        self.check_open("finish() called twice")?;
        self.flush_pending()?;
        self.finished = true;
        let mut end = [0; 24];
        end[8..16].copy_from_slice(&self.records.to_le_bytes());
        end[16..].copy_from_slice(&self.elements.to_le_bytes());
        self.emit(&end)?;
        let digest = self.digest.value();
        self.emit(&digest)?;
        self.out.flush().inspect_err(|_| self.broken = true)?;
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Elements compressed so far (those waiting for their chunk to fill not counted).
    pub fn elements(&self) -> u64 {
        self.elements
    }

    /// Bytes of the stream written to `out` so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// The encoder's choices so far.
    pub fn stats(&self) -> &EncoderStats {
        self.encoder.stats()
    }

    pub fn get_ref(&self) -> &W {
        &self.out
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    fn check_open(&self, after_finish: &str) -> Result<()> {
        if self.finished {
            return Err(invalid(after_finish.to_string()));
        }
        if self.broken {
            return Err(invalid("an earlier write to the output failed: the stream is incomplete".to_string()));
        }
        Ok(())
    }

    fn flush_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        let result = self.encode(&pending);
        self.pending = pending;
        self.pending.clear();
        result
    }

    fn encode(&mut self, piece: &[T]) -> Result<()> {
        let row: usize = self.rest.iter().product();
        let mut shape = vec![piece.len() / row];
        shape.extend_from_slice(&self.rest);
        let record = self.encoder.encode(piece, &shape)?;
        self.emit(&(record.len() as u64).to_le_bytes())?;
        self.emit(&record)?;
        self.records += 1;
        self.elements += piece.len() as u64;
        Ok(())
    }

    fn emit(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).inspect_err(|_| self.broken = true)?;
        self.digest.update(bytes);
        self.bytes_written += bytes.len() as u64;
        Ok(())
    }
}

impl<T: Element> StreamWriter<T, AtomicFile> {
    /// A stream written to `<path>.part` and renamed to `path` by [`AtomicFile::commit`] after
    /// [`finish`](Self::finish).
    pub fn create(path: impl AsRef<Path>, chunk: &[usize], config: Config, policy: Policy) -> Result<Self> {
        StreamWriter::new(AtomicFile::create(path)?, chunk, config, policy)
    }
}

/// A file written beside its name, as `<name>.part`, and renamed onto it once complete, so that
/// no reader ever sees half of it. Dropped or discarded before [`commit`](Self::commit), the
/// partial file is removed.
pub struct AtomicFile {
    file: Option<BufWriter<File>>,
    part: PathBuf,
    path: PathBuf,
    committed: bool,
}

impl AtomicFile {
    pub fn create(path: impl AsRef<Path>) -> io::Result<AtomicFile> {
        let path = path.as_ref().to_path_buf();
        let mut name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{} names no file", path.display())))?
            .to_os_string();
        name.push(".part");
        let part = path.with_file_name(name);
        let file = BufWriter::new(File::create(&part)?);
        Ok(AtomicFile { file: Some(file), part, path, committed: false })
    }

    /// Flushes the file to disk and renames it to its name, then syncs the folder so that the
    /// rename lasts too.
    pub fn commit(&mut self) -> io::Result<()> {
        let file = self.file.take().ok_or_else(|| io::Error::other("the file was already committed or discarded"))?;
        file.into_inner().map_err(io::IntoInnerError::into_error)?.sync_all()?;
        fs::rename(&self.part, &self.path)?;
        self.committed = true;
        #[cfg(unix)]
        {
            let folder = self.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            File::open(folder)?.sync_all()?;
        }
        Ok(())
    }

    /// Closes and removes the partial file.
    pub fn discard(&mut self) -> io::Result<()> {
        if self.file.take().is_some() && !self.committed {
            fs::remove_file(&self.part)?;
        }
        Ok(())
    }

    fn file(&mut self) -> io::Result<&mut BufWriter<File>> {
        self.file.as_mut().ok_or_else(|| io::Error::other("the file was already committed or discarded"))
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file()?.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file()?.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Also after a failed commit. Failing to remove it, a drop has no one to tell.
        if !self.committed {
            self.file = None;
            let _ = fs::remove_file(&self.part);
        }
    }
}

/// One record of a chunked stream, checked but not decoded.
pub struct Record {
    /// Where the record's bytes start in the stream (after its length field).
    pub offset: u64,
    /// The record: an amrzip stream (`docs/format.md`, sections 2 to 10).
    pub bytes: Vec<u8>,
    /// Its header, read and checked by [`amrzip_codec::info`].
    pub info: StreamInfo,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Records,
    Done,
    Failed,
}

/// Reads a chunked stream from `R`: its records in order, checked as section 13 requires, and
/// decoded into the chunks they hold.
///
/// The digest covers the whole stream and is only known at its end: a consumer must not trust
/// the chunks it was given until the reader returned `None`. After an error the reader returns
/// that it failed.
pub struct StreamReader<R: Read> {
    input: R,
    dtype: DType,
    /// Bytes the source holds past those read, when it can tell.
    left: Option<u64>,
    offset: u64,
    digest: Digest,
    decoder: StreamDecoder,
    records: u64,
    elements: u64,
    first_shape: Option<Vec<usize>>,
    state: State,
}

impl<R: Read> StreamReader<R> {
    /// Reads and checks the header. `len` is the number of bytes the source holds from where it
    /// stands, when known (a file or a buffer, not a pipe): a record length past it is refused
    /// before anything is read. `threads` as for [`amrzip_codec::decompress`].
    pub fn new(input: R, len: Option<u64>, threads: Option<usize>) -> Result<Self> {
        let mut reader = StreamReader {
            input,
            dtype: DType::F32,
            left: len,
            offset: 0,
            digest: Digest::new(),
            decoder: StreamDecoder::new(threads),
            records: 0,
            elements: 0,
            first_shape: None,
            state: State::Records,
        };
        let header: [u8; HEADER_LEN] = reader.read_array(|| "the header".to_string())?;
        if header[..4] != MAGIC || header[6..] != [0, 0] {
            return Err(corrupt("not a chunked amrzip stream (bad magic)".to_string()));
        }
        if header[4] != VERSION {
            return Err(corrupt(format!("unsupported chunked stream version {} (this build reads {VERSION})", header[4])));
        }
        reader.dtype = DType::from_code(header[5]).ok_or_else(|| corrupt(format!("unknown dtype code {}", header[5])))?;
        Ok(reader)
    }

    /// The element type of every record.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The next record, checked without decoding it: its length against the source, its header
    /// (`amrzip_codec::info`), its dtype, that it joins the records before along axis 0, and that
    /// the first one holds its own codebook. After the last record: `None`, once the end block's
    /// counts and digest matched and nothing followed it.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        match self.state {
            State::Done => return Ok(None),
            State::Failed => return Err(corrupt("reading the chunked stream failed earlier".to_string())),
            State::Records => {}
        }
        let record = self.read_record();
        match &record {
            Err(_) => self.state = State::Failed,
            Ok(None) => self.state = State::Done,
            Ok(Some(_)) => {}
        }
        record
    }

    /// The next record decoded: its values and shape, or `None` after the last.
    pub fn next_chunk<T: Element>(&mut self) -> Result<Option<(Vec<T>, Vec<usize>)>> {
        if T::DTYPE != self.dtype {
            return Err(invalid(format!("the stream holds {} values, not {}", self.dtype.name(), T::DTYPE.name())));
        }
        let Some(record) = self.next_record()? else { return Ok(None) };
        // The decoder also checks what `info` does not: the payload behind the header.
        self.decoder.decode::<T>(&record.bytes).map(Some).map_err(|e| {
            self.state = State::Failed;
            in_record(self.records - 1, e)
        })
    }

    /// Reads the records left (all of them, from a new reader) without decoding them: all of
    /// section 13 is checked, the payloads as far as their checksums. What `amrzip info` shows
    /// of a chunked stream.
    pub fn describe(&mut self) -> Result<Description> {
        let mut records = Vec::new();
        while let Some(Record { offset, bytes, info }) = self.next_record()? {
            records.push(RecordSummary { offset, size: bytes.len() as u64, info });
        }
        Ok(Description { dtype: self.dtype, records, elements: self.elements, size: self.offset })
    }

    fn read_record(&mut self) -> Result<Option<Record>> {
        let k = self.records;
        let length = u64::from_le_bytes(self.read_array(|| format!("the length of record {k}"))?);
        if length == 0 {
            self.read_end()?;
            return Ok(None);
        }
        // Room for the record, then the zero length and the end block.
        if self.left.is_some_and(|left| length > left.saturating_sub(TAIL_LEN)) {
            return Err(corrupt(format!("record {k} claims {length} bytes, more than the stream holds")));
        }
        let offset = self.offset;
        let bytes = self.read_vec(length, || format!("record {k}"))?;
        let info = codec::info(&bytes).map_err(|e| in_record(k, e))?;
        if info.dtype != self.dtype {
            return Err(corrupt(format!("record {k} holds {} values in a stream of {}", info.dtype.name(), self.dtype.name())));
        }
        match &self.first_shape {
            None if info.codebook_source == CodebookSource::Previous => {
                return Err(corrupt(format!("record {k} inherits the codebook of a record before it, but it is the first")));
            }
            None => self.first_shape = Some(info.shape.clone()),
            Some(first) if info.shape.get(1..) != first.get(1..) => {
                return Err(corrupt(format!("record {k} of shape {:?} does not join records of shape {first:?}", info.shape)));
            }
            Some(_) => {}
        }
        self.records += 1;
        self.elements = self.elements.saturating_add(info.shape.iter().product::<usize>() as u64);
        Ok(Some(Record { offset, bytes, info }))
    }

    fn read_end(&mut self) -> Result<()> {
        let counts: [u8; 16] = self.read_array(|| "the end block".to_string())?;
        let expected = self.digest.value();
        let digest: [u8; DIGEST_LEN] = self.read_array(|| "the end block".to_string())?;
        if digest != expected {
            return Err(corrupt("chunked stream checksum mismatch: records damaged, reordered or replaced".to_string()));
        }
        let (records, elements) = split_counts(&counts);
        if (records, elements) != (self.records, self.elements) {
            return Err(corrupt(format!(
                "end block does not match the stream: {} records of {} elements read, {records} of {elements} recorded",
                self.records, self.elements
            )));
        }
        let mut byte = [0];
        loop {
            match self.input.read(&mut byte) {
                Ok(0) => return Ok(()),
                Ok(_) => return Err(corrupt("unexpected bytes after the end of the chunked stream".to_string())),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn read_array<const N: usize>(&mut self, what: impl Fn() -> String) -> Result<[u8; N]> {
        let mut bytes = [0; N];
        match self.input.read_exact(&mut bytes) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(truncated(&what())),
            Err(e) => Err(e.into()),
            Ok(()) => {
                self.consumed(&bytes);
                Ok(bytes)
            }
        }
    }

    /// `n` bytes. From a source that cannot tell its size they are allocated as they arrive: a
    /// damaged length must not make us allocate what the source lacks.
    fn read_vec(&mut self, n: u64, what: impl Fn() -> String) -> Result<Vec<u8>> {
        let known = if self.left.is_some() { n } else { 0 };
        let mut bytes =
            Vec::with_capacity(usize::try_from(known).map_err(|_| corrupt(format!("{} is too large for this machine", what())))?);
        (&mut self.input).take(n).read_to_end(&mut bytes)?;
        if (bytes.len() as u64) < n {
            return Err(truncated(&what()));
        }
        self.consumed(&bytes);
        Ok(bytes)
    }

    fn consumed(&mut self, bytes: &[u8]) {
        self.digest.update(bytes);
        self.offset += bytes.len() as u64;
        self.left = self.left.map(|left| left.saturating_sub(bytes.len() as u64));
    }
}

impl<R: Read + Seek> StreamReader<R> {
    /// A reader that learns the size of its source by seeking to its end and back.
    pub fn seekable(mut input: R, threads: Option<usize>) -> Result<Self> {
        let here = input.stream_position()?;
        let end = input.seek(SeekFrom::End(0))?;
        input.seek(SeekFrom::Start(here))?;
        StreamReader::new(input, Some(end.saturating_sub(here)), threads)
    }

    /// The records and elements the end block declares, read from the end of the source without
    /// reading the records (to size an output before decoding); the reader checks them against
    /// the records when it gets there.
    pub fn declared_counts(&mut self) -> Result<(u64, u64)> {
        let here = self.input.stream_position()?;
        let end = self.input.seek(SeekFrom::End(0))?;
        if end < here.saturating_sub(self.offset) + HEADER_LEN as u64 + TAIL_LEN {
            self.input.seek(SeekFrom::Start(here))?;
            return Err(corrupt("too short to be a chunked amrzip stream".to_string()));
        }
        self.input.seek(SeekFrom::End(-(TAIL_LEN as i64)))?;
        let mut tail = [0; TAIL_LEN as usize];
        let read = self.input.read_exact(&mut tail);
        self.input.seek(SeekFrom::Start(here))?;
        read?;
        if tail[..8] != [0; 8] {
            return Err(corrupt("no end block".to_string()));
        }
        Ok(split_counts(tail[8..24].try_into().expect("16 bytes")))
    }
}

impl StreamReader<BufReader<File>> {
    /// A reader of the file at `path`.
    pub fn open(path: impl AsRef<Path>, threads: Option<usize>) -> Result<Self> {
        StreamReader::seekable(BufReader::new(File::open(path)?), threads)
    }
}

fn split_counts(counts: &[u8; 16]) -> (u64, u64) {
    let (records, elements) = counts.split_at(8);
    (u64::from_le_bytes(records.try_into().expect("8 bytes")), u64::from_le_bytes(elements.try_into().expect("8 bytes")))
}

fn truncated(what: &str) -> Error {
    corrupt(format!("chunked stream truncated in {what}"))
}

/// A record that fails, whatever the codec calls the failure: the stream is what is wrong.
fn in_record(k: u64, e: CodecError) -> Error {
    match e {
        CodecError::Corrupt(m) | CodecError::InvalidInput(m) => corrupt(format!("record {k}: {m}")),
    }
}

/// One record as [`StreamReader::describe`] saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordSummary {
    /// Where the record's bytes start in the stream, and how many there are.
    pub offset: u64,
    pub size: u64,
    pub info: StreamInfo,
}

impl RecordSummary {
    /// The predictors of the record's chunks, as `amrzip info` names them ("lorenzo+regression").
    pub fn predictor(&self) -> String {
        self.info.predictors.iter().map(|(kind, _)| kind.name()).collect::<Vec<_>>().join("+")
    }
}

/// The structure of a chunked stream, checked in full but not decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct Description {
    pub dtype: DType,
    pub records: Vec<RecordSummary>,
    pub elements: u64,
    /// Bytes of the whole stream.
    pub size: u64,
}

impl Description {
    /// The records' arrays joined along axis 0 (1-D for a flat stream or one with no record).
    pub fn shape(&self) -> Vec<u64> {
        let rest = self.chunk_shape().map_or(&[][..], |first| &first[1..]);
        let row = rest.iter().product::<usize>().max(1) as u64;
        std::iter::once(self.elements / row).chain(rest.iter().map(|&n| n as u64)).collect()
    }

    /// The first record's shape: every record's but the last, when the writer cut the data.
    pub fn chunk_shape(&self) -> Option<&[usize]> {
        self.records.first().map(|r| &r.info.shape[..])
    }

    /// Bytes of the values the stream holds.
    pub fn original_size(&self) -> u64 {
        self.elements.saturating_mul(self.dtype.size() as u64)
    }

    /// The smallest and largest absolute bound of a record.
    pub fn abs_bound_range(&self) -> Option<(f64, f64)> {
        let bounds = self.records.iter().map(|r| r.info.abs_bound);
        Some((bounds.clone().reduce(f64::min)?, bounds.reduce(f64::max)?))
    }

    /// Records per combination of predictors ([`RecordSummary::predictor`]), in order of first use.
    pub fn records_per_predictor(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for name in self.records.iter().map(RecordSummary::predictor) {
            match counts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, count)) => *count += 1,
                None => counts.push((name, 1)),
            }
        }
        counts
    }

    /// Records with a new codebook, with the codebook of the record before, with a built-in one.
    pub fn codebooks(&self) -> [(CodebookSource, usize); 3] {
        [CodebookSource::Inline, CodebookSource::Previous, CodebookSource::Offline]
            .map(|source| (source, self.records.iter().filter(|r| r.info.codebook_source == source).count()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amrzip_codec::{ErrorBound, Preset};
    use proptest::prelude::*;
    use std::io::Cursor;

    const ADAPTIVE: Policy = Policy::Adaptive(amrzip_codec::DEFAULT_THRESHOLDS);

    fn config(bound: ErrorBound) -> Config {
        Config { bound, preset: Preset::Ratio, threads: Some(1), predictor: None }
    }

    /// Smooth rows, then rows of noise from `noisy_from` on (a change of character mid-stream).
    fn field<T: Element>(rows: usize, row: usize, noisy_from: usize) -> Vec<T> {
        (0..rows * row)
            .map(|i| {
                let (r, c) = ((i / row) as f64, (i % row) as f64);
                let noise = if i / row >= noisy_from { ((i as u64).wrapping_mul(2654435761) % 4093) as f64 / 400.0 } else { 0.0 };
                T::from_f64((r * 0.3).sin() + (c * 0.2).cos() + noise)
            })
            .collect()
    }

    /// The stream of `data` (shape `[rows, rest..]`) written in pieces of `piece_rows` rows.
    fn stream<T: Element>(data: &[T], shape: &[usize], chunk: &[usize], piece_rows: usize, bound: ErrorBound) -> Vec<u8> {
        let row: usize = shape[1..].iter().product();
        let mut w = StreamWriter::<T, _>::new(Vec::new(), chunk, config(bound), ADAPTIVE).unwrap();
        for piece in data.chunks(piece_rows * row) {
            let mut piece_shape = shape.to_vec();
            piece_shape[0] = piece.len() / row;
            w.write(piece, &piece_shape).unwrap();
        }
        w.finish().unwrap();
        assert_eq!(w.bytes_written(), w.get_ref().len() as u64);
        w.into_inner()
    }

    /// A small stream of six records, kept and rebuilt codebooks among them.
    fn small() -> Vec<u8> {
        stream(&field::<f32>(22, 30, 12), &[22, 5, 6], &[4, 5, 6], 7, ErrorBound::Absolute(1e-2))
    }

    fn records_of(bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut r = StreamReader::new(bytes, None, Some(1)).unwrap();
        std::iter::from_fn(|| r.next_record().unwrap()).map(|rec| rec.bytes).collect()
    }

    /// A stream of `records` as a writer would frame them, with the counts given or read.
    fn container(dtype: u8, records: &[Vec<u8>], counts: Option<(u64, u64)>) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[VERSION, dtype, 0, 0]);
        let mut elements = 0;
        for r in records {
            out.extend_from_slice(&(r.len() as u64).to_le_bytes());
            out.extend_from_slice(r);
            elements += codec::info(r).map_or(0, |i| i.shape.iter().product::<usize>() as u64);
        }
        let (n, e) = counts.unwrap_or((records.len() as u64, elements));
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&e.to_le_bytes());
        let mut digest = Digest::new();
        digest.update(&out);
        out.extend_from_slice(&digest.value());
        out
    }

    /// Reads and decodes the whole stream: the source's size known (`seekable`) or not.
    fn read_all(bytes: &[u8], seekable: bool) -> Result<u64> {
        let mut r = if seekable {
            StreamReader::seekable(Cursor::new(bytes), Some(1))?
        } else {
            StreamReader::new(Cursor::new(bytes), None, Some(1))?
        };
        let mut elements = 0;
        loop {
            let chunk = match r.dtype() {
                DType::F32 => r.next_chunk::<f32>()?.map(|(v, _)| v.len()),
                DType::F64 => r.next_chunk::<f64>()?.map(|(v, _)| v.len()),
            };
            match chunk {
                Some(n) => elements += n as u64,
                None => return Ok(elements),
            }
        }
    }

    fn corrupt_message(bytes: &[u8]) -> String {
        let mut messages = [true, false].map(|seekable| match read_all(bytes, seekable) {
            Err(Error::Codec(CodecError::Corrupt(m))) => m,
            other => panic!("expected a corrupt stream, got {other:?}"),
        });
        // Knowing the size only refuses a length sooner; else both readers fail the same way.
        if messages[0] != messages[1] {
            assert!(messages[0].contains("more than the stream holds"), "{messages:?}");
            messages.swap(0, 1);
        }
        messages[0].clone()
    }

    fn assert_corrupt(bytes: &[u8], fragment: &str) {
        let message = corrupt_message(bytes);
        assert!(message.contains(fragment), "{message:?} does not say {fragment:?}");
    }

    #[test]
    fn round_trip_however_the_data_is_written() {
        let (rows, rest) = (22, [5, 6]);
        let x = field::<f64>(rows, 30, 12);
        let whole = stream(&x, &[rows, 5, 6], &[4, 5, 6], rows, ErrorBound::Absolute(1e-3));
        for piece_rows in [1, 3, 4, 9] {
            assert_eq!(stream(&x, &[rows, 5, 6], &[4, 5, 6], piece_rows, ErrorBound::Absolute(1e-3)), whole);
        }
        let mut r = StreamReader::seekable(Cursor::new(&whole), None).unwrap();
        assert_eq!(r.declared_counts().unwrap(), (6, x.len() as u64));
        let mut start = 0;
        while let Some((values, shape)) = r.next_chunk::<f64>().unwrap() {
            assert_eq!(shape, [4.min(rows - start), rest[0], rest[1]]);
            for (a, b) in values.iter().zip(&x[start * 30..]) {
                assert!((a - b).abs() <= 1e-3);
            }
            start += shape[0];
        }
        assert_eq!(start, rows);
        assert!(r.next_chunk::<f64>().unwrap().is_none(), "the end stays the end");
    }

    #[test]
    fn flat_streams_take_any_shape() {
        let x = field::<f32>(1, 1000, 1000);
        let mut w = StreamWriter::<f32, _>::new(Vec::new(), &[128], config(ErrorBound::Psnr(50.0)), Policy::Rebuild).unwrap();
        w.write(&x[..300], &[3, 100]).unwrap();
        w.write(&[], &[0, 7]).unwrap();
        w.write(&x[300..], &[700]).unwrap();
        assert_eq!((w.records(), w.elements()), (7, 896));
        w.finish().unwrap();
        assert_eq!((w.records(), w.elements(), w.stats().records), (8, 1000, 8));
        let bytes = w.into_inner();
        let shapes: Vec<Vec<usize>> = records_of(&bytes).iter().map(|r| codec::info(r).unwrap().shape).collect();
        assert_eq!(shapes.last().unwrap(), &[1000 - 7 * 128]);
        assert!(shapes[..7].iter().all(|s| s == &[128]));
        assert_eq!(read_all(&bytes, false).unwrap(), 1000);
    }

    #[test]
    fn empty_stream() {
        for chunk in [&[10][..], &[3, 4]] {
            let mut w = StreamWriter::<f64, _>::new(Vec::new(), chunk, config(ErrorBound::Absolute(1.0)), Policy::Rebuild).unwrap();
            w.finish().unwrap();
            let bytes = w.into_inner();
            assert_eq!(bytes.len(), 8 + 28);
            assert_eq!(bytes, container(1, &[], None));
            let d = StreamReader::new(&bytes[..], None, None).unwrap().describe().unwrap();
            assert_eq!((d.records.len(), d.elements, d.size, d.shape(), d.chunk_shape()), (0, 0, 36, vec![0], None));
            assert_eq!(d.abs_bound_range(), None);
        }
    }

    #[test]
    fn describe_reads_the_structure() {
        let bytes = small();
        let d = StreamReader::new(&bytes[..], None, None).unwrap().describe().unwrap();
        assert_eq!(
            (d.dtype, d.elements, d.size, d.shape(), d.chunk_shape()),
            (DType::F32, 660, bytes.len() as u64, vec![22, 5, 6], Some(&[4, 5, 6][..]))
        );
        assert_eq!(d.original_size(), 660 * 4);
        let records = records_of(&bytes);
        assert_eq!(d.records.len(), records.len());
        let mut offset = 8;
        for (summary, record) in d.records.iter().zip(&records) {
            assert_eq!((summary.offset, summary.size), (offset + 8, record.len() as u64));
            assert_eq!(&bytes[summary.offset as usize..][..record.len()], &record[..]);
            assert_eq!(summary.info, codec::info(record).unwrap());
            offset += 8 + record.len() as u64;
        }
        assert_eq!(d.abs_bound_range(), Some((1e-2, 1e-2)));
        let codebooks = d.codebooks();
        assert_eq!(codebooks.iter().map(|(_, n)| n).sum::<usize>(), 6);
        assert!(codebooks[1].1 >= 1, "some records keep the codebook: {codebooks:?}");
        assert_eq!(d.records_per_predictor().iter().map(|(_, n)| n).sum::<usize>(), 6);
    }

    #[test]
    fn writer_arguments() {
        let new = |chunk: &[usize]| StreamWriter::<f32, _>::new(Vec::new(), chunk, config(ErrorBound::Absolute(1.0)), Policy::Rebuild);
        for chunk in [&[][..], &[0], &[4, 0], &[1, 2, 3, 4, 5]] {
            assert!(matches!(new(chunk), Err(Error::Codec(CodecError::InvalidInput(m))) if m.contains("1 to 4 positive")), "{chunk:?}");
        }
        assert!(matches!(new(&[usize::MAX, 2]), Err(Error::Codec(CodecError::InvalidInput(_)))));
        let relative = StreamWriter::<f32, _>::new(Vec::new(), &[4], config(ErrorBound::Relative(0.1)), Policy::Rebuild);
        assert!(matches!(relative, Err(Error::Codec(CodecError::InvalidInput(_)))));

        let mut w = new(&[4, 5]).unwrap();
        let message = |r: Result<()>| match r {
            Err(Error::Codec(CodecError::InvalidInput(m))) => m,
            other => panic!("expected invalid input, got {other:?}"),
        };
        assert_eq!(message(w.write(&[0.0; 18], &[3, 6])), "expected an array of shape (any, 5), got (3, 6)");
        assert_eq!(message(w.write(&[0.0; 20], &[20])), "expected an array of shape (any, 5), got (20,)");
        assert_eq!(message(w.write(&[0.0; 3], &[2, 5])), "3 values do not make an array of shape (2, 5)");
        w.write(&[1.0; 15], &[3, 5]).unwrap();
        w.finish().unwrap();
        assert_eq!(message(w.write(&[0.0; 5], &[1, 5])), "write() after finish()");
        assert_eq!(message(w.finish()), "finish() called twice");
    }

    /// Fails after `budget` bytes.
    struct Failing(usize);

    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if buf.len() > self.0 {
                return Err(io::Error::other("disk full"));
            }
            self.0 -= buf.len();
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_output_stops_the_writer() {
        let mut w = StreamWriter::<f32, _>::new(Failing(100), &[4], config(ErrorBound::Absolute(1.0)), Policy::Rebuild).unwrap();
        assert!(matches!(w.write(&field::<f32>(1, 400, 400), &[400]), Err(Error::Io(_))));
        assert!(matches!(w.finish(), Err(Error::Codec(CodecError::InvalidInput(m))) if m.contains("incomplete")));
    }

    #[test]
    fn atomic_file() {
        let folder = std::env::temp_dir().join(format!("amrzip-chunked-{}", std::process::id()));
        fs::create_dir_all(&folder).unwrap();
        let path = folder.join("s.amrzs");
        let part = folder.join("s.amrzs.part");
        let x = field::<f32>(10, 30, 10);
        let mut w = StreamWriter::<f32, _>::create(&path, &[4, 30], config(ErrorBound::Absolute(1e-3)), ADAPTIVE).unwrap();
        w.write(&x, &[10, 30]).unwrap();
        assert!(part.exists() && !path.exists());
        w.finish().unwrap();
        w.get_mut().commit().unwrap();
        assert!(!part.exists());
        assert_eq!(fs::read(&path).unwrap(), stream(&x, &[10, 30], &[4, 30], 10, ErrorBound::Absolute(1e-3)));
        assert_eq!(read_all(&fs::read(&path).unwrap(), true).unwrap(), 300);
        assert_eq!(StreamReader::open(&path, None).unwrap().describe().unwrap().elements, 300);

        // Abandoned, dropped, or committed twice: the finished file stays as it was.
        let before = fs::read(&path).unwrap();
        let mut w = StreamWriter::<f32, _>::create(&path, &[4, 30], config(ErrorBound::Absolute(1e-3)), Policy::Rebuild).unwrap();
        w.write(&x, &[10, 30]).unwrap();
        drop(w);
        let mut file = AtomicFile::create(&path).unwrap();
        file.write_all(b"partial").unwrap();
        file.discard().unwrap();
        assert!(file.commit().is_err() && file.write(b"x").is_err());
        assert!(!part.exists());
        assert_eq!(fs::read(&path).unwrap(), before);
        assert!(AtomicFile::create(folder.join("missing").join("s")).is_err());
        fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn header_errors() {
        let good = container(0, &[], None);
        let mut cases = vec![
            (b"".to_vec(), "truncated in the header"),
            (b"AMRS".to_vec(), "truncated in the header"),
            (b"AMRS\x01\x00\x00\x00".to_vec(), "truncated in the length of record 0"),
            (b"AMRZ\x01\x00\x00\x00".to_vec(), "bad magic"),
            (vec![0; 36], "bad magic"),
        ];
        for (at, value, fragment) in
            [(6, 1, "bad magic"), (7, 1, "bad magic"), (4, 2, "version 2"), (4, 0, "version 0"), (5, 7, "dtype code 7")]
        {
            let mut bytes = good.clone();
            bytes[at] = value;
            cases.push((bytes, fragment));
        }
        for (bytes, fragment) in cases {
            assert_corrupt(&bytes, fragment);
        }
        let plain = codec::compress(&field::<f32>(4, 5, 5), &[4, 5], &config(ErrorBound::Absolute(1e-3))).unwrap();
        assert_corrupt(&plain, "bad magic");
    }

    #[test]
    fn record_errors() {
        let records = records_of(&small());
        let f64_record = codec::compress(&field::<f64>(4, 30, 4), &[4, 5, 6], &config(ErrorBound::Absolute(1e-3))).unwrap();
        let other_sides = codec::compress(&field::<f32>(4, 30, 4), &[4, 6, 5], &config(ErrorBound::Absolute(1e-3))).unwrap();
        let flat = codec::compress(&field::<f32>(4, 30, 4), &[120], &config(ErrorBound::Absolute(1e-3))).unwrap();
        let inheriting = records.iter().position(|r| codec::info(r).unwrap().codebook_source == CodebookSource::Previous).unwrap();
        let elements: u64 = 660;
        let cases = [
            (container(0, &[records[0].clone(), f64_record], None), "record 1 holds float64 values in a stream of float32"),
            (
                container(0, &[records[0].clone(), other_sides], None),
                "record 1 of shape [4, 6, 5] does not join records of shape [4, 5, 6]",
            ),
            (container(0, &[records[0].clone(), flat], None), "record 1 of shape [120] does not join"),
            (container(0, &[records[inheriting].clone()], None), "record 0 inherits the codebook"),
            (
                container(0, &records, Some((5, elements))),
                "end block does not match the stream: 6 records of 660 elements read, 5 of 660 recorded",
            ),
            (container(0, &records, Some((6, elements + 1))), "end block does not match"),
            (container(0, &[records[0].clone(), b"not a stream".to_vec()], None), "record 1: "),
            (container(1, &records, None), "record 0 holds float32 values in a stream of float64"),
        ];
        for (bytes, fragment) in cases {
            assert_corrupt(&bytes, fragment);
        }
        // A record whose header is sound but whose payload does not decode: only the decoder sees it.
        let mut damaged = records.clone();
        let last = damaged.len() - 1;
        let n = damaged[last].len();
        damaged[last][n - 6] ^= 0x10;
        let bytes = container(0, &damaged, None);
        assert_corrupt(&bytes, &format!("record {last}: "));
    }

    #[test]
    fn lengths_past_the_end() {
        let bytes = small();
        for length in [1u64, 1 << 31, 1 << 62, u64::MAX] {
            let mut damaged = bytes.clone();
            damaged[8..16].copy_from_slice(&length.to_le_bytes());
            corrupt_message(&damaged);
            // Refused before reading when the size is known, whatever the length.
            if length > bytes.len() as u64 {
                assert!(matches!(read_all(&damaged, true), Err(Error::Codec(CodecError::Corrupt(m))) if m.contains("record 0 claims")));
            }
        }
    }

    #[test]
    fn every_truncation() {
        let bytes = small();
        for n in 0..bytes.len() {
            let message = corrupt_message(&bytes[..n]);
            assert!(message.contains("truncated") || message.contains("more than the stream holds"), "at {n}: {message}");
        }
        assert_eq!(read_all(&bytes, true).unwrap(), 660);
    }

    #[test]
    fn trailing_bytes() {
        let bytes = small();
        for tail in [&b"\0"[..], b"junk", &[0; 28], &bytes] {
            assert_corrupt(&[&bytes[..], tail].concat(), "");
        }
        assert_corrupt(&[&bytes[..], b"\0"].concat(), "unexpected bytes after the end");
    }

    #[test]
    fn records_swapped_repeated_or_removed() {
        let bytes = small();
        let records = records_of(&bytes);
        let end = &bytes[bytes.len() - 28..];
        let reframed = |recs: &[Vec<u8>]| {
            let mut out = bytes[..8].to_vec();
            for r in recs {
                out.extend_from_slice(&(r.len() as u64).to_le_bytes());
                out.extend_from_slice(r);
            }
            out.extend_from_slice(end);
            out
        };
        assert_eq!(reframed(&records), bytes);
        for k in 0..records.len() {
            let mut removed = records.clone();
            removed.remove(k);
            let mut repeated = records.clone();
            repeated.insert(k, records[k].clone());
            for damaged in [removed, repeated] {
                corrupt_message(&reframed(&damaged));
            }
            for j in k + 1..records.len() {
                let mut swapped = records.clone();
                swapped.swap(k, j);
                let message = corrupt_message(&reframed(&swapped));
                // Either a record cannot come first, or the digest catches the order.
                assert!(message.contains("checksum mismatch") || message.contains("inherits"), "{message}");
            }
        }
        // The end block of the records as they are now, under the old digest: the digest still knows.
        let mut repeated = records.clone();
        repeated.push(records[records.len() - 1].clone());
        let mut forged = container(0, &repeated, None);
        let n = forged.len();
        forged[n - 4..].copy_from_slice(&end[24..]);
        assert_corrupt(&forged, "checksum mismatch");
    }

    #[test]
    fn a_failed_reader_stays_failed() {
        let bytes = small();
        let mut r = StreamReader::new(&bytes[..bytes.len() - 1], None, None).unwrap();
        while r.next_record().is_ok_and(|rec| rec.is_some()) {}
        assert!(matches!(r.next_record(), Err(Error::Codec(CodecError::Corrupt(m))) if m.contains("failed earlier")));
        let mut r = StreamReader::new(&bytes[..], None, None).unwrap();
        assert!(matches!(r.next_chunk::<f64>(), Err(Error::Codec(CodecError::InvalidInput(_)))));
    }

    #[test]
    fn declared_counts() {
        let bytes = small();
        let mut cursor = Cursor::new([b"prefix", &bytes[..]].concat());
        cursor.set_position(6);
        let mut r = StreamReader::seekable(cursor, None).unwrap();
        assert_eq!(r.declared_counts().unwrap(), (6, 660));
        assert_eq!(r.describe().unwrap().elements, 660, "the reader goes on where it was");
        let mut r = StreamReader::seekable(Cursor::new(&bytes[..30]), None).unwrap();
        assert!(matches!(r.declared_counts(), Err(Error::Codec(CodecError::Corrupt(m))) if m.contains("too short")));
        let mut r = StreamReader::seekable(Cursor::new(&bytes[..bytes.len() - 1]), None).unwrap();
        assert!(matches!(r.declared_counts(), Err(Error::Codec(CodecError::Corrupt(m))) if m == "no end block"));
    }

    /// The stream with its digest made right again, so that a mutation reaches the checks behind it.
    fn redigest(bytes: &mut [u8]) {
        if let Some(at) = bytes.len().checked_sub(DIGEST_LEN) {
            let mut digest = Digest::new();
            digest.update(&bytes[..at]);
            bytes[at..].copy_from_slice(&digest.value());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Whatever is done to a stream, reading it returns, and only ever with a corrupt stream.
        #[test]
        fn hostile_mutations_never_panic(
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            lengths in prop::collection::vec((0usize..8, any::<u64>()), 0..2),
            cut in any::<prop::sample::Index>(),
            insert in prop::collection::vec(any::<u8>(), 0..12),
            at in any::<prop::sample::Index>(),
            fix_digest in any::<bool>(),
        ) {
            let original = small();
            let mut bytes = original.clone();
            for (i, v) in flips {
                let i = i.index(bytes.len());
                bytes[i] = v;
            }
            // Lengths are where a reader allocates: put hostile values in those of the records.
            let mut offsets = vec![8];
            for r in records_of(&original) {
                offsets.push(offsets.last().unwrap() + 8 + r.len());
            }
            for (k, value) in lengths {
                let o = offsets[k % offsets.len()];
                bytes[o..o + 8].copy_from_slice(&value.to_le_bytes());
            }
            let at = at.index(bytes.len() + 1);
            bytes.splice(at..at, insert);
            bytes.truncate(cut.index(bytes.len() + 1).max(bytes.len().min(8)));
            if fix_digest {
                redigest(&mut bytes);
            }
            for seekable in [true, false] {
                match read_all(&bytes, seekable) {
                    Ok(n) => prop_assert!(bytes == original && n == 660, "a damaged stream read as sound"),
                    Err(Error::Codec(CodecError::Corrupt(_))) => {}
                    Err(e) => prop_assert!(false, "not a corruption: {e:?}"),
                }
            }
            let described = StreamReader::new(&bytes[..], None, None).and_then(|mut r| r.describe());
            prop_assert!(described.is_ok() == (bytes == original));
        }
    }
}
