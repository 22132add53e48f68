//! Decoder robustness, run as property tests: on any input, `decompress::<f32>`,
//! `decompress::<f64>` and `info` answer `Ok` or `Err` — no panic, no hang, no allocation out of
//! proportion to the input.
//!
//! Inputs are derived from a corpus of valid streams. Streams carry CRC32s over the header and
//! the payload, so random damage mostly stops at the checksum; most mutators therefore rebuild
//! the checksums afterwards, and the structured ones edit header fields and the chunk contents
//! behind the lossless stage, so the Huffman, zstd and predictor parsers see hostile bytes.
//!
//! `AMRZIP_FUZZ_CASES` sets the cases per property (default [`DEFAULT_CASES`]), for longer runs.
//! A debug build (`cargo test` without `--release`) also turns integer overflows into failures.

use amrzip_codec::{compress, decompress, info, CodecError, Config, DType, Element, ErrorBound, PredictorKind, Preset, StreamInfo};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::FileFailurePersistence;
use std::alloc::{GlobalAlloc, Layout, System};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

/// Cases per property: the whole file takes about 20 s in a release build on two cores.
const DEFAULT_CASES: u32 = 3000;

/// Longest a decode of one input may take. Every corpus stream decodes in milliseconds; the
/// slack is for slow CI machines, a real hang never ends.
const TIME_BUDGET: Duration = Duration::from_secs(10);

/// Largest single allocation a decode may make. Every corpus-derived input decodes with a few
/// MiB; anything near this comes from a length field taken at its word.
const ALLOCATION_CAP: usize = 256 << 20;

// ---------------------------------------------------------------------------------------------
// Allocation tracking

struct Tracking;

static LARGEST_ALLOCATION: AtomicUsize = AtomicUsize::new(0);
/// The input being decoded, so an allocation too large to survive can still name it.
static INPUT_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static INPUT_LEN: AtomicUsize = AtomicUsize::new(0);
static REPORTED: AtomicBool = AtomicBool::new(false);

fn note_allocation(size: usize) {
    LARGEST_ALLOCATION.fetch_max(size, Ordering::Relaxed);
    if size > ALLOCATION_CAP && !REPORTED.swap(true, Ordering::Relaxed) {
        report_huge_allocation(size);
    }
}

/// A request the system cannot satisfy aborts the process before any assertion runs, so the
/// input is written out here, without allocating, to leave a reproducer behind.
#[cfg(unix)]
fn report_huge_allocation(size: usize) {
    extern "C" {
        fn write(fd: i32, buf: *const u8, count: usize) -> isize;
    }
    let emit = |bytes: &[u8]| {
        // Safety: writes an initialised buffer to stderr.
        unsafe { write(2, bytes.as_ptr(), bytes.len()) };
    };
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut v = size;
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    emit(b"\ndecoder_fuzz: allocation of ");
    emit(&digits[at..]);
    emit(b" bytes while decoding this input (hex, at most 4 KiB shown):\n");
    let ptr = INPUT_PTR.load(Ordering::Relaxed);
    if !ptr.is_null() {
        // Safety: `check` keeps the input alive while its pointer is published.
        let input = unsafe { std::slice::from_raw_parts(ptr, INPUT_LEN.load(Ordering::Relaxed).min(4096)) };
        for line in input.chunks(32) {
            let mut text = [b'\n'; 65];
            for (k, &b) in line.iter().enumerate() {
                text[2 * k] = b"0123456789abcdef"[(b >> 4) as usize];
                text[2 * k + 1] = b"0123456789abcdef"[(b & 15) as usize];
            }
            emit(&text[..2 * line.len()]);
            emit(b"\n");
        }
    }
}

#[cfg(not(unix))]
fn report_huge_allocation(_size: usize) {}

// Safety: forwards to the system allocator unchanged; only records the sizes asked for.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

// ---------------------------------------------------------------------------------------------
// The decoding oracle

/// What the three entry points made of one input.
struct Outcome {
    info: amrzip_codec::Result<StreamInfo>,
    f32: amrzip_codec::Result<(usize, Vec<usize>)>,
    f64: amrzip_codec::Result<(usize, Vec<usize>)>,
}

fn decode_all(input: &[u8]) -> Outcome {
    let threads = if input.len().is_multiple_of(2) { None } else { Some(2) };
    Outcome {
        info: info(input),
        f32: decompress::<f32>(input, threads).map(|(v, s)| (v.len(), s)),
        f64: decompress::<f64>(input, threads).map(|(v, s)| (v.len(), s)),
    }
}

fn hex(bytes: &[u8]) -> String {
    if bytes.len() > 4096 {
        return format!("<{} bytes>", bytes.len());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decodes `input` every way, on a worker thread so a hang fails the case instead of the run,
/// and checks the answers are consistent: a decode that succeeds agrees with `info`, a
/// damaged stream is `Corrupt`, and only a dtype mismatch is `InvalidInput`.
fn check(input: &[u8]) -> Result<Outcome, TestCaseError> {
    // One input at a time, so the allocation record belongs to it.
    static SERIAL: Mutex<()> = Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let input = Arc::new(input.to_vec());
    INPUT_LEN.store(input.len(), Ordering::Relaxed);
    INPUT_PTR.store(input.as_ptr().cast_mut(), Ordering::Relaxed);
    LARGEST_ALLOCATION.store(0, Ordering::Relaxed);

    let (tx, rx) = mpsc::channel();
    let worker = {
        let input = Arc::clone(&input);
        std::thread::spawn(move || {
            let _ = tx.send(decode_all(&input));
        })
    };
    let received = rx.recv_timeout(TIME_BUDGET);
    INPUT_PTR.store(std::ptr::null_mut(), Ordering::Relaxed);
    let outcome = match received {
        Ok(outcome) => {
            let _ = worker.join();
            outcome
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            return Err(TestCaseError::fail(format!("no answer within {TIME_BUDGET:?} for input {}", hex(&input))))
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let payload = worker.join().expect_err("the worker ended without an answer");
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            return Err(TestCaseError::fail(format!("decoder panicked ({message}) on input {}", hex(&input))));
        }
    };
    let largest = LARGEST_ALLOCATION.load(Ordering::Relaxed);
    prop_assert!(largest <= ALLOCATION_CAP, "allocation of {} bytes for an input of {} bytes: {}", largest, input.len(), hex(&input));

    match &outcome.info {
        Ok(meta) => prop_assert!(meta.shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n)).is_some()),
        Err(e) => prop_assert!(matches!(e, CodecError::Corrupt(_)), "info: {:?} on input {}", e, hex(&input)),
    }
    for (dtype, result) in [(DType::F32, &outcome.f32), (DType::F64, &outcome.f64)] {
        match (result, &outcome.info) {
            (Ok((len, shape)), Ok(meta)) => {
                prop_assert_eq!(meta.dtype, dtype);
                prop_assert_eq!(shape, &meta.shape);
                prop_assert_eq!(Some(*len), shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n)));
            }
            (Ok(_), Err(e)) => {
                return Err(TestCaseError::fail(format!("decoded as {dtype:?} but info failed ({e}) on input {}", hex(&input))))
            }
            (Err(CodecError::InvalidInput(m)), Ok(meta)) => {
                prop_assert!(meta.dtype != dtype, "{:?}: InvalidInput ({}) on a {:?} stream: {}", dtype, m, meta.dtype, hex(&input))
            }
            (Err(CodecError::Corrupt(_)), _) => {}
            (Err(e), Err(_)) => return Err(TestCaseError::fail(format!("{dtype:?}: {e:?} on an unreadable stream: {}", hex(&input)))),
        }
    }
    prop_assert!(outcome.f32.is_err() || outcome.f64.is_err());
    Ok(outcome)
}

// ---------------------------------------------------------------------------------------------
// Stream format, as far as the tests need it

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), as the format specifies.
fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    !data.iter().fold(!0u32, |c, &b| TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8))
}

/// Bytes before the bound: magic, version, dtype, ndim, preset, bound mode, codebook source.
const LEAD: usize = 10;
const NDIM_AT: usize = 6;
/// The bound mode byte, whose top bit says that the absolute bound follows the bound.
const MODE_AT: usize = 8;
/// Raw bytes per lossless frame (the chunk payload is a frame table, then the frames).
const FRAME_BYTES: usize = 1 << 20;

fn le_u64(s: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(s.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// The chunks a (possibly damaged) shape and chunk shape make, None on overflow.
fn grid(dims: &[u64]) -> Option<u64> {
    let (shape, chunk) = dims.split_at(dims.len() / 2);
    shape.iter().zip(chunk).try_fold(1u64, |acc, (&n, &c)| acc.checked_mul(n.checked_div(c)? + u64::from(c != 0 && n % c != 0)))
}

/// The header's fields up to the chunk entries: (eb, radius, dims, codebook range, entries
/// offset), walking its varints.
#[allow(clippy::type_complexity)]
fn header_fields(s: &[u8]) -> Option<(Option<f64>, u64, Vec<u64>, Range<usize>, usize)> {
    let ndim = *s.get(NDIM_AT)? as usize;
    let mut at = LEAD + 8;
    let eb = if *s.get(MODE_AT)? & 0x80 != 0 {
        at += 8;
        Some(f64::from_bits(le_u64(s, at - 8)?))
    } else {
        None
    };
    let radius = read_varint(s, &mut at)?;
    let dims = (0..2 * ndim).map(|_| read_varint(s, &mut at)).collect::<Option<Vec<u64>>>()?;
    let cb_len = usize::try_from(read_varint(s, &mut at)?).ok()?;
    let codebook = at..at.checked_add(cb_len).filter(|&e| e <= s.len())?;
    Some((eb, radius, dims, codebook.clone(), codebook.end))
}

/// The chunk entries from `at` (as many as the grid has), and where they end.
fn entries_at(s: &[u8], mut at: usize, dims: &[u64]) -> Option<(Vec<Entry>, usize)> {
    let n = grid(dims)?;
    let mut entries = Vec::new();
    for _ in 0..n {
        let predictor = *s.get(at)?;
        at += 1;
        let stored_len = read_varint(s, &mut at)?;
        let raw_len = read_varint(s, &mut at)?;
        entries.push(Entry { predictor, stored_len, raw_len });
    }
    Some((entries, at))
}

/// Offset of the header checksum, found by walking the header's length fields.
fn header_end(s: &[u8]) -> Option<usize> {
    let (_, _, dims, _, at) = header_fields(s)?;
    let (_, end) = entries_at(s, at, &dims)?;
    (end <= s.len()).then_some(end)
}

/// Recomputes both checksums in place, wherever the (possibly damaged) header puts them.
fn fix_checksums(s: &mut [u8]) {
    let Some(end) = header_end(s) else { return };
    if end + 4 > s.len() {
        return;
    }
    let crc = crc32(&s[..end]);
    s[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    let len = s.len();
    if len >= end + 8 {
        let crc = crc32(&s[end + 4..len - 4]);
        s[len - 4..].copy_from_slice(&crc.to_le_bytes());
    }
}

#[derive(Clone, Debug)]
struct Entry {
    predictor: u8,
    stored_len: u64,
    raw_len: u64,
}

/// A stream split into its fields; `to_bytes` writes it back with fresh checksums, whatever
/// the fields have been changed to.
#[derive(Clone, Debug)]
struct Parts {
    lead: [u8; LEAD],
    bound: f64,
    /// Written where the mode byte's top bit is set.
    eb: f64,
    radius: u64,
    /// Shape, then chunk shape.
    dims: Vec<u64>,
    codebook: Vec<u8>,
    /// As many as the grid has, unless an edit says otherwise.
    entries: Vec<Entry>,
    payloads: Vec<Vec<u8>>,
}

impl Parts {
    /// Splits a stream the codec wrote.
    fn parse(s: &[u8]) -> Parts {
        let (eb, radius, dims, codebook, at) = header_fields(s).expect("a corpus header");
        let (entries, _) = entries_at(s, at, &dims).expect("corpus entries");
        let mut at = header_end(s).unwrap() + 4;
        let payloads = entries
            .iter()
            .map(|e| {
                let p = s[at..at + e.stored_len as usize].to_vec();
                at += p.len();
                p
            })
            .collect();
        assert_eq!(at + 4, s.len(), "payloads do not end 4 bytes before the stream does");
        let bound = f64::from_bits(le_u64(s, LEAD).unwrap());
        Parts {
            lead: s[..LEAD].try_into().unwrap(),
            bound,
            eb: eb.unwrap_or(bound),
            radius,
            dims,
            codebook: s[codebook].to_vec(),
            entries,
            payloads,
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.lead.to_vec();
        out.extend_from_slice(&self.bound.to_le_bytes());
        if self.lead[MODE_AT] & 0x80 != 0 {
            out.extend_from_slice(&self.eb.to_le_bytes());
        }
        put_varint(&mut out, self.radius);
        for &d in &self.dims {
            put_varint(&mut out, d);
        }
        put_varint(&mut out, self.codebook.len() as u64);
        out.extend_from_slice(&self.codebook);
        for e in &self.entries {
            out.push(e.predictor);
            put_varint(&mut out, e.stored_len);
            put_varint(&mut out, e.raw_len);
        }
        out.extend_from_slice(&crc32(&out).to_le_bytes());
        let start = out.len();
        for p in &self.payloads {
            out.extend_from_slice(p);
        }
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn element_bytes(&self) -> usize {
        if self.lead[5] == DType::F64 as u8 {
            8
        } else {
            4
        }
    }

    /// Chunk `k`'s bytes before the lossless stage: its frames, unpacked and joined.
    fn raw(&self, k: usize) -> Vec<u8> {
        let (payload, raw_len) = (&self.payloads[k], self.entries[k].raw_len as usize);
        let mut at = 0;
        let table: Vec<(u8, usize)> = (0..raw_len.div_ceil(FRAME_BYTES))
            .map(|_| {
                let flag = payload[at];
                at += 1;
                (flag, read_varint(payload, &mut at).expect("corpus frame table") as usize)
            })
            .collect();
        let mut raw = Vec::with_capacity(raw_len);
        for (flag, len) in table {
            let body = &payload[at..at + len];
            at += len;
            if flag == 0 {
                raw.extend_from_slice(body);
            } else {
                raw.extend(zstd::bulk::decompress(body, FRAME_BYTES).expect("corpus frames decompress"));
            }
        }
        raw
    }

    /// Replaces chunk `k` by `raw`, its frames stored as is or through zstd, with consistent
    /// lengths.
    fn set_raw(&mut self, k: usize, raw: &[u8], zstd: bool) {
        let frames: Vec<Vec<u8>> = raw
            .chunks(FRAME_BYTES)
            .map(|f| if zstd { zstd::bulk::compress(f, 1).expect("zstd into memory") } else { f.to_vec() })
            .collect();
        let mut payload = Vec::new();
        for f in &frames {
            payload.push(u8::from(zstd));
            put_varint(&mut payload, f.len() as u64);
        }
        for f in &frames {
            payload.extend_from_slice(f);
        }
        self.entries[k] = Entry { predictor: self.entries[k].predictor, stored_len: payload.len() as u64, raw_len: raw.len() as u64 };
        self.payloads[k] = payload;
    }
}

fn read_varint(s: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *s.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7F) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The fields of a chunk before the lossless stage: patch count, patches, side length, side
/// information, exact count, exact values, then the entropy-coded symbols.
#[derive(Clone, Copy, Debug)]
enum Field {
    PatchCount,
    Patches,
    SideLength,
    Side,
    ExactCount,
    Exact,
    Symbols,
    Anywhere,
}

/// Byte ranges of a chunk's fields, in `Field` order (without `Anywhere`); None once a damaged
/// count makes them unreadable.
fn fields(raw: &[u8], element: usize) -> Option<[Range<usize>; 7]> {
    let mut at = 0;
    let patches = read_varint(raw, &mut at)?;
    let patch_count = 0..at;
    let start = at;
    for _ in 0..patches {
        read_varint(raw, &mut at)?;
        at = at.checked_add(element).filter(|&a| a <= raw.len())?;
    }
    let patch_list = start..at;
    let start = at;
    let side_len = usize::try_from(read_varint(raw, &mut at)?).ok()?;
    let side_length = start..at;
    let side = at..at.checked_add(side_len).filter(|&a| a <= raw.len())?;
    at = side.end;
    let start = at;
    let exact = usize::try_from(read_varint(raw, &mut at)?).ok()?;
    let exact_count = start..at;
    let exact_values = at..exact.checked_mul(element)?.checked_add(at).filter(|&a| a <= raw.len())?;
    Some([patch_count, patch_list, side_length, side, exact_count, exact_values.clone(), exact_values.end..raw.len()])
}

/// The range of `field`, or the whole chunk when the fields cannot be read.
fn field_range(raw: &[u8], element: usize, field: Field) -> Range<usize> {
    let index = match field {
        Field::PatchCount => 0,
        Field::Patches => 1,
        Field::SideLength => 2,
        Field::Side => 3,
        Field::ExactCount => 4,
        Field::Exact => 5,
        Field::Symbols => 6,
        Field::Anywhere => return 0..raw.len(),
    };
    fields(raw, element).map_or(0..raw.len(), |f| f[index].clone())
}

// ---------------------------------------------------------------------------------------------
// Corpus

struct Sample {
    name: String,
    bytes: Vec<u8>,
}

/// A field of `n` values: smooth, plus the features named by `kind`.
fn field_values(shape: &[usize], kind: &str) -> Vec<f64> {
    let n: usize = shape.iter().product();
    let last = *shape.last().unwrap();
    (0..n)
        .map(|i| {
            let (row, col) = ((i / last) as f64, (i % last) as f64);
            let smooth = (0.05 * row).sin() * 10.0 + (0.11 * col).cos() * 3.0;
            match kind {
                "smooth" => smooth,
                "noisy" => smooth + ((i * 2_654_435_761) % 1000) as f64 * 1e-3,
                "special" => match i % 37 {
                    3 => f64::NAN,
                    11 => f64::INFINITY,
                    19 => f64::NEG_INFINITY,
                    23 => 1e30,
                    _ => smooth,
                },
                "jumps" => smooth + if (i / 7) % 2 == 0 { 0.0 } else { 1e4 },
                "constant" => 2.5,
                "nan" => f64::NAN,
                "flat" => {
                    if i % 100_003 == 5 {
                        f64::NAN
                    } else if i % 250_007 == 9 {
                        1e6
                    } else {
                        1.0
                    }
                }
                _ => unreachable!("unknown field kind {kind}"),
            }
        })
        .collect()
}

fn encode<T: Element>(shape: &[usize], kind: &str, bound: ErrorBound, preset: Preset, predictor: Option<PredictorKind>) -> Sample {
    let data: Vec<T> = field_values(shape, kind).into_iter().map(T::from_f64).collect();
    let config = Config { preset, predictor, ..Config::new(bound) };
    let bytes = compress(&data, shape, &config).expect("corpus arrays compress");
    Sample { name: format!("{} {shape:?} {kind} {bound:?} {preset:?} {predictor:?}", T::DTYPE.name()), bytes }
}

/// Valid streams covering both dtypes, every predictor, stored and zstd chunks, patches, exact
/// values, outliers, single-symbol and empty codebooks, an empty array, and several chunks.
fn corpus() -> &'static [Sample] {
    static CORPUS: OnceLock<Vec<Sample>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        type Case = (&'static [usize], &'static str, ErrorBound, Preset, Option<PredictorKind>);
        let cases: [Case; 10] = [
            (&[300], "special", ErrorBound::Relative(1e-3), Preset::Ratio, None),
            (&[17, 23], "noisy", ErrorBound::Absolute(1e-4), Preset::Ratio, Some(PredictorKind::Lorenzo)),
            (&[9, 8, 7], "noisy", ErrorBound::Relative(1e-2), Preset::Ratio, Some(PredictorKind::Regression)),
            (&[3, 5, 6, 7], "special", ErrorBound::Relative(1e-4), Preset::Ratio, Some(PredictorKind::Interpolation)),
            (&[40, 40], "jumps", ErrorBound::Absolute(1e-3), Preset::Speed, None),
            (&[33, 31], "smooth", ErrorBound::Relative(1e-6), Preset::Ratio, Some(PredictorKind::DualQuant)),
            (&[64], "constant", ErrorBound::Relative(1e-3), Preset::Ratio, None),
            (&[12, 12], "nan", ErrorBound::Absolute(1e-2), Preset::Speed, None),
            (&[5, 0, 3], "smooth", ErrorBound::Relative(1e-3), Preset::Ratio, None),
            (&[20, 20], "noisy", ErrorBound::Absolute(0.0), Preset::Ratio, None),
        ];
        let mut samples: Vec<Sample> = cases
            .iter()
            .flat_map(|&(shape, kind, bound, preset, predictor)| {
                [encode::<f32>(shape, kind, bound, preset, predictor), encode::<f64>(shape, kind, bound, preset, predictor)]
            })
            .collect();
        // Two chunks and several Huffman segments, yet a stream of a few hundred bytes.
        samples.push(encode::<f32>(&[2049, 1024], "flat", ErrorBound::Absolute(1e-2), Preset::Speed, None));
        samples
    })
}

fn sample(index: &Index) -> &'static Sample {
    let c = corpus();
    &c[index.index(c.len())]
}

// ---------------------------------------------------------------------------------------------
// Mutations

/// A byte-level edit; positions are taken modulo the length at the time of the edit.
#[derive(Clone, Debug)]
enum ByteEdit {
    Flip { at: Index, mask: u8 },
    Set { at: Index, value: u8 },
    Overwrite { at: Index, bytes: Vec<u8> },
    Insert { at: Index, bytes: Vec<u8> },
    Delete { at: Index, len: usize },
}

fn byte_edits() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        3 => (any::<Index>(), 1u8..=255).prop_map(|(at, mask)| ByteEdit::Flip { at, mask }),
        2 => (any::<Index>(), prop_oneof![Just(0u8), Just(0xFF), Just(0x80), Just(0x7F), any::<u8>()]).prop_map(|(at, value)| ByteEdit::Set { at, value }),
        2 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..32)).prop_map(|(at, bytes)| ByteEdit::Overwrite { at, bytes }),
        1 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16)).prop_map(|(at, bytes)| ByteEdit::Insert { at, bytes }),
        1 => (any::<Index>(), 1usize..32).prop_map(|(at, len)| ByteEdit::Delete { at, len }),
    ]
}

/// Applies `edit` to `s[range]` (all of `s` if the range is empty).
fn apply_byte_edit(s: &mut Vec<u8>, range: Range<usize>, edit: &ByteEdit) {
    let range = if range.is_empty() { 0..s.len() } else { range };
    let pick = |at: &Index| range.start + at.index(range.len().max(1));
    match edit {
        ByteEdit::Flip { at, mask } if !range.is_empty() => s[pick(at)] ^= mask,
        ByteEdit::Set { at, value } if !range.is_empty() => s[pick(at)] = *value,
        ByteEdit::Overwrite { at, bytes } if !range.is_empty() => {
            let start = pick(at);
            let end = (start + bytes.len()).min(s.len());
            s[start..end].copy_from_slice(&bytes[..end - start]);
        }
        ByteEdit::Delete { at, len } if !range.is_empty() => {
            let start = pick(at);
            s.drain(start..(start + len).min(s.len()));
        }
        ByteEdit::Insert { at, bytes } => {
            let start = if range.is_empty() { 0 } else { pick(at) };
            s.splice(start..start, bytes.iter().copied());
        }
        ByteEdit::Flip { .. } | ByteEdit::Set { .. } | ByteEdit::Overwrite { .. } | ByteEdit::Delete { .. } => {}
    }
}

/// Values around the limits a decoder checks lengths and counts against.
fn hostile_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..=4,
        5u64..=300,
        Just(1u64 << 20),
        Just((1u64 << 24) + 1),
        Just((1u64 << 27) + 1),
        Just(1u64 << 32),
        Just(1u64 << 40),
        Just(1u64 << 62),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn hostile_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(-0.0),
        Just(5e-324),
        Just(1e-300),
        Just(1e-12),
        Just(1.0),
        Just(1e300),
        Just(f64::MAX),
        Just(f64::INFINITY),
        Just(f64::NAN),
        Just(-1.0),
        any::<f64>(),
    ]
}

/// An edit of one header field; the checksums are rebuilt afterwards.
#[derive(Clone, Debug)]
enum HeaderEdit {
    /// Magic, version, dtype, ndim, preset, bound mode or codebook source.
    Lead {
        at: Index,
        value: u8,
    },
    Bound(f64),
    Eb(f64),
    Radius(u64),
    Dim {
        at: Index,
        value: u64,
    },
    /// A new shape and chunk shape, with the chunk table resized to the new grid (entries and
    /// payloads repeated from the original, at most `MAX_GRID_ENTRIES` written).
    Grid {
        shape: Vec<u64>,
        chunk: Vec<u64>,
    },
    Codebook(Vec<ByteEdit>),
    /// How many chunk entries are written (their payloads with them), whatever the grid says.
    EntryCount(u64),
    Entry {
        at: Index,
        predictor: Option<u8>,
        stored_len: Option<u64>,
        raw_len: Option<u64>,
    },
}

const MAX_GRID_ENTRIES: u64 = 64;

fn header_edits() -> impl Strategy<Value = HeaderEdit> {
    let dim = prop_oneof![4 => 0u64..=40, 1 => hostile_u64()];
    let dims = (1usize..=4).prop_flat_map(move |nd| {
        (prop::collection::vec(dim.clone(), nd), prop::collection::vec(prop_oneof![3 => 1u64..=16, 1 => hostile_u64()], nd))
    });
    prop_oneof![
        3 => (any::<Index>(), prop_oneof![0u8..=5, any::<u8>()]).prop_map(|(at, value)| HeaderEdit::Lead { at, value }),
        1 => hostile_f64().prop_map(HeaderEdit::Bound),
        2 => hostile_f64().prop_map(HeaderEdit::Eb),
        2 => prop_oneof![0u64..=3, 32767u64..=32769, Just(1 << 15), hostile_u64()].prop_map(HeaderEdit::Radius),
        2 => (any::<Index>(), hostile_u64()).prop_map(|(at, value)| HeaderEdit::Dim { at, value }),
        4 => dims.prop_map(|(shape, chunk)| HeaderEdit::Grid { shape, chunk }),
        3 => prop::collection::vec(byte_edits(), 1..4).prop_map(HeaderEdit::Codebook),
        1 => hostile_u64().prop_map(HeaderEdit::EntryCount),
        3 => (any::<Index>(), prop::option::of(0u8..=4), prop::option::of(hostile_u64()), prop::option::of(hostile_u64()))
            .prop_map(|(at, predictor, stored_len, raw_len)| HeaderEdit::Entry { at, predictor, stored_len, raw_len }),
    ]
}

/// Makes the chunk table `n` entries long (at most `MAX_GRID_ENTRIES` written), entries and
/// payloads repeated from the original.
fn resize_entries(p: &mut Parts, n: u64) {
    let written = n.min(MAX_GRID_ENTRIES) as usize;
    let (entries, payloads) = (p.entries.clone(), p.payloads.clone());
    if entries.is_empty() {
        p.entries = vec![Entry { predictor: 0, stored_len: 0, raw_len: 0 }; written];
        p.payloads = vec![Vec::new(); written];
    } else {
        p.entries = entries.iter().cycle().take(written).cloned().collect();
        p.payloads = payloads.iter().cycle().take(written).cloned().collect();
    }
}

fn apply_header_edit(p: &mut Parts, edit: &HeaderEdit) {
    match edit {
        HeaderEdit::Lead { at, value } => p.lead[at.index(LEAD)] = *value,
        HeaderEdit::Bound(v) => p.bound = *v,
        HeaderEdit::Eb(v) => {
            p.eb = *v;
            p.lead[MODE_AT] |= 0x80;
        }
        HeaderEdit::Radius(v) => p.radius = *v,
        HeaderEdit::Dim { at, value } => {
            if !p.dims.is_empty() {
                let d = at.index(p.dims.len());
                p.dims[d] = *value;
            }
        }
        HeaderEdit::Grid { shape, chunk } => {
            p.lead[NDIM_AT] = shape.len() as u8;
            p.dims = shape.iter().chain(chunk).copied().collect();
            resize_entries(p, grid(&p.dims).unwrap_or(u64::MAX));
        }
        HeaderEdit::Codebook(edits) => {
            for e in edits {
                apply_byte_edit(&mut p.codebook, 0..0, e);
            }
        }
        HeaderEdit::EntryCount(n) => resize_entries(p, *n),
        HeaderEdit::Entry { at, predictor, stored_len, raw_len } => {
            if !p.entries.is_empty() {
                let k = at.index(p.entries.len());
                let e = &mut p.entries[k];
                e.predictor = predictor.unwrap_or(e.predictor);
                e.stored_len = stored_len.unwrap_or(e.stored_len);
                e.raw_len = raw_len.unwrap_or(e.raw_len);
            }
        }
    }
}

/// An edit of one chunk's bytes before the lossless stage.
#[derive(Clone, Debug)]
enum ChunkEdit {
    Bytes {
        field: Field,
        edit: ByteEdit,
    },
    /// Rewrites a count or length varint.
    Varint {
        field: Field,
        value: u64,
    },
    /// Moves a count or length varint by a small amount, to land just past a limit.
    Nudge {
        field: Field,
        delta: i64,
    },
    Truncate(Index),
    Append(Vec<u8>),
}

fn fields_any() -> impl Strategy<Value = Field> {
    prop_oneof![
        1 => Just(Field::PatchCount),
        1 => Just(Field::Patches),
        1 => Just(Field::SideLength),
        3 => Just(Field::Side),
        1 => Just(Field::ExactCount),
        1 => Just(Field::Exact),
        3 => Just(Field::Symbols),
        2 => Just(Field::Anywhere),
    ]
}

fn count_fields() -> impl Strategy<Value = Field> {
    prop_oneof![Just(Field::PatchCount), Just(Field::SideLength), Just(Field::ExactCount)]
}

fn chunk_edits() -> impl Strategy<Value = ChunkEdit> {
    prop_oneof![
        6 => (fields_any(), byte_edits()).prop_map(|(field, edit)| ChunkEdit::Bytes { field, edit }),
        2 => (count_fields(), hostile_u64()).prop_map(|(field, value)| ChunkEdit::Varint { field, value }),
        2 => (count_fields(), -3i64..=3).prop_map(|(field, delta)| ChunkEdit::Nudge { field, delta }),
        1 => any::<Index>().prop_map(ChunkEdit::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..64).prop_map(ChunkEdit::Append),
    ]
}

fn apply_chunk_edit(raw: &mut Vec<u8>, element: usize, edit: &ChunkEdit) {
    match edit {
        ChunkEdit::Bytes { field, edit } => {
            let range = field_range(raw, element, *field);
            apply_byte_edit(raw, range, edit);
        }
        ChunkEdit::Varint { field, value } => rewrite_varint(raw, field_range(raw, element, *field), |_| *value),
        ChunkEdit::Nudge { field, delta } => rewrite_varint(raw, field_range(raw, element, *field), |v| v.wrapping_add_signed(*delta)),
        ChunkEdit::Truncate(at) => raw.truncate(at.index(raw.len() + 1)),
        ChunkEdit::Append(bytes) => raw.extend_from_slice(bytes),
    }
}

fn rewrite_varint(raw: &mut Vec<u8>, range: Range<usize>, f: impl Fn(u64) -> u64) {
    let mut at = range.start;
    let Some(old) = read_varint(raw, &mut at) else { return };
    let mut new = Vec::new();
    put_varint(&mut new, f(old));
    raw.splice(range.start..at, new);
}

// ---------------------------------------------------------------------------------------------
// Properties

fn fuzz_config() -> ProptestConfig {
    let cases = std::env::var("AMRZIP_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CASES);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        max_shrink_time: 120_000,
        ..ProptestConfig::default()
    }
}

/// A strict prefix is never a stream: the payload length is known and the checksum trails it.
#[test]
fn every_truncation_is_rejected() {
    for s in corpus() {
        for len in 0..s.bytes.len() {
            let outcome = check(&s.bytes[..len]).unwrap_or_else(|e| panic!("{}: {e}", s.name));
            assert!(outcome.info.is_err() && outcome.f32.is_err() && outcome.f64.is_err(), "{}: prefix of {len} bytes accepted", s.name);
            let mut fixed = s.bytes[..len].to_vec();
            fix_checksums(&mut fixed);
            check(&fixed).unwrap_or_else(|e| panic!("{}, checksums fixed: {e}", s.name));
        }
    }
}

/// The oracle and the test's own format code agree with the codec on valid streams.
#[test]
fn corpus_decodes_and_reassembles() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    for s in corpus() {
        let outcome = check(&s.bytes).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        assert!(outcome.info.is_ok() && (outcome.f32.is_ok() || outcome.f64.is_ok()), "{} does not decode", s.name);
        let parts = Parts::parse(&s.bytes);
        assert_eq!(parts.to_bytes(), s.bytes, "{}", s.name);
        let mut copy = s.bytes.clone();
        fix_checksums(&mut copy);
        assert_eq!(copy, s.bytes, "{}", s.name);
        for k in 0..parts.entries.len() {
            let raw = parts.raw(k);
            let element = parts.element_bytes();
            assert_eq!(fields(&raw, element).map(|f| f[6].end), Some(raw.len()), "{}: chunk {k} fields", s.name);
            for zstd in [false, true] {
                let mut repacked = parts.clone();
                repacked.set_raw(k, &raw, zstd);
                let outcome = check(&repacked.to_bytes()).unwrap_or_else(|e| panic!("{}: {e}", s.name));
                assert!(outcome.f32.is_ok() || outcome.f64.is_ok(), "{}: chunk {k} repacked (zstd {zstd}) does not decode", s.name);
            }
        }
    }
}

/// A header announcing more chunk entries than the stream holds must be refused without
/// reserving memory for them (the entries come before the header checksum).
#[test]
fn chunk_table_larger_than_the_stream_is_refused() {
    let mut s = b"AMRZ".to_vec();
    s.extend_from_slice(&[1, DType::F32 as u8, 1, 0, 0, 0, 0, 0]);
    s.extend_from_slice(&0.1f64.to_le_bytes());
    s.extend_from_slice(&0.1f64.to_le_bytes());
    s.extend_from_slice(&32768u32.to_le_bytes());
    s.extend_from_slice(&(1u64 << 40).to_le_bytes());
    s.extend_from_slice(&1u64.to_le_bytes());
    s.extend_from_slice(&0u32.to_le_bytes());
    s.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let outcome = check(&s).unwrap_or_else(|e| panic!("{e}"));
    assert!(outcome.info.is_err() && outcome.f32.is_err() && outcome.f64.is_err());
}

proptest! {
    #![proptest_config(fuzz_config())]

    #[test]
    fn damaged_streams(index in any::<Index>(), edits in prop::collection::vec(byte_edits(), 1..6), fix in any::<bool>()) {
        let mut s = sample(&index).bytes.clone();
        for e in &edits {
            let len = s.len();
            apply_byte_edit(&mut s, 0..len, e);
        }
        if fix {
            fix_checksums(&mut s);
        }
        check(&s)?;
    }

    #[test]
    fn spliced_streams(a in any::<Index>(), b in any::<Index>(), cut_a in any::<Index>(), cut_b in any::<Index>(), fix in any::<bool>()) {
        let (a, b) = (&sample(&a).bytes, &sample(&b).bytes);
        let mut s = a[..cut_a.index(a.len() + 1)].to_vec();
        s.extend_from_slice(&b[cut_b.index(b.len() + 1)..]);
        if fix {
            fix_checksums(&mut s);
        }
        check(&s)?;
    }

    #[test]
    fn random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..600), after_magic in any::<bool>(), fix in any::<bool>()) {
        let mut s = if after_magic { b"AMRZ\x01".to_vec() } else { Vec::new() };
        s.extend_from_slice(&bytes);
        if fix {
            fix_checksums(&mut s);
        }
        check(&s)?;
    }

    #[test]
    fn hostile_headers(index in any::<Index>(), edits in prop::collection::vec(header_edits(), 1..4)) {
        let mut parts = Parts::parse(&sample(&index).bytes);
        for e in &edits {
            apply_header_edit(&mut parts, e);
        }
        check(&parts.to_bytes())?;
    }

    #[test]
    fn hostile_chunk_contents(
        index in any::<Index>(),
        chunk in any::<Index>(),
        edits in prop::collection::vec(chunk_edits(), 1..4),
        zstd in any::<bool>(),
        predictor in prop::option::weighted(0.15, 0u8..=3),
        header in prop::option::weighted(0.1, header_edits()),
    ) {
        let mut parts = Parts::parse(&sample(&index).bytes);
        if !parts.entries.is_empty() {
            let k = chunk.index(parts.entries.len());
            let mut raw = parts.raw(k);
            let element = parts.element_bytes();
            for e in &edits {
                apply_chunk_edit(&mut raw, element, e);
            }
            parts.set_raw(k, &raw, zstd);
            if let Some(p) = predictor {
                parts.entries[k].predictor = p;
            }
        }
        if let Some(e) = &header {
            apply_header_edit(&mut parts, e);
        }
        check(&parts.to_bytes())?;
    }
}
