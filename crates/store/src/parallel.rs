//! Writing one snapshot from many processes (MPI ranks), PnetCDF-style (docs/parallel.md):
//! each rank holds some boxes of every level; every decision that depends on values (bounds,
//! layout trials, the mean correction) is made from reductions so all ranks take the same one;
//! each shard of a level gets one owner, the rank storing most of its cells less a penalty for
//! load beyond an even share (counted over all levels), and the ranks send each owner their pieces
//! of its shards; owners compress and write their shards into the snapshot file at offsets
//! agreed by all, and rank 0 writes the metadata and commits.
//!
//! The transport is the caller's ([`Collective`]: mpi4py in the Python package, nothing for a
//! single process). Every collective call starts with a gather of a status byte, so a rank that
//! fails between two calls sends its error in place of its next call: the others see it there
//! and stop with it instead of waiting for a rank that will never come.

use crate::error::{invalid, Error, ErrorKind, Result};
use crate::store::{PendingSnapshot, Store};
use amrzip_amr::{BoxView, ChunkPlan, IBox, Layout, Spread, Tiling};
use amrzip_codec::blockset::{Block, BlockInfo, Pool};
use amrzip_codec::{ByteReader, Element};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// What the writer needs of a process group. Calls are collective: every rank makes the same
/// calls in the same order.
pub trait Collective: Sync {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Every rank's `bytes`, by rank.
    fn all_gather(&self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>>;
    /// Sends `to[r]` to rank `r` (`to` has one entry per rank); returns what each rank sent
    /// this one, by rank.
    fn exchange(&self, to: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>>;
    /// Writes `bytes` at `offset` of the existing file `path`, every rank its own range.
    fn write_at(&self, path: &Path, offset: u64, bytes: &[u8]) -> Result<()>;
}

/// One process: nothing to agree with.
pub struct Serial;

impl Collective for Serial {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_gather(&self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        Ok(vec![bytes])
    }
    fn exchange(&self, to: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
        Ok(to)
    }
    fn write_at(&self, path: &Path, offset: u64, bytes: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(path).map_err(|e| Error::io(path, e))?;
        f.write_all_at(bytes, offset).map_err(|e| Error::io(path, e))
    }
}

const OK: u8 = 0;
const FAILED: u8 = 1;
const KINDS: [ErrorKind; 7] = [
    ErrorKind::Invalid,
    ErrorKind::Corrupt,
    ErrorKind::NotAStore,
    ErrorKind::Exists,
    ErrorKind::NotFound,
    ErrorKind::Io,
    ErrorKind::Interrupted,
];

/// A [`Collective`] with the status protocol of this module's header.
pub struct Group<'a> {
    comm: &'a dyn Collective,
    /// Set once a call failed (here or on a peer): no further calls are made.
    done: AtomicBool,
}

impl<'a> Group<'a> {
    pub fn new(comm: &'a dyn Collective) -> Group<'a> {
        Group { comm, done: AtomicBool::new(false) }
    }

    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// Every rank's `bytes`, or the error of the first rank that failed.
    pub fn gather(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        if self.done.load(Ordering::Relaxed) {
            return Err(invalid!("the ranks stopped after an error"));
        }
        let mut msg = Vec::with_capacity(bytes.len() + 1);
        msg.push(OK);
        msg.extend_from_slice(bytes);
        let all = self.comm.all_gather(msg).inspect_err(|_| self.done.store(true, Ordering::Relaxed))?;
        if let Some((r, m)) = all.iter().enumerate().find(|(_, m)| m.first() != Some(&OK)) {
            self.done.store(true, Ordering::Relaxed);
            // The failed rank's error, of its kind (a snapshot that exists, a bad argument...).
            let kind = m.get(1).and_then(|&k| KINDS.get(k as usize)).copied().unwrap_or(ErrorKind::Interrupted);
            let text = String::from_utf8_lossy(m.get(2..).unwrap_or_default());
            return Err(Error::new(kind, format!("rank {r}: {text}")));
        }
        Ok(all.into_iter().map(|mut m| m.split_off(1)).collect())
    }

    /// Tells the other ranks that this one failed with `e` (they get the error at their next
    /// call), unless the failure came from a call.
    pub fn fail(&self, e: &Error) {
        if !self.done.swap(true, Ordering::Relaxed) {
            let mut msg = vec![FAILED, KINDS.iter().position(|&k| k == e.kind).unwrap_or(0) as u8];
            msg.extend_from_slice(e.message.as_bytes());
            let _ = self.comm.all_gather(msg);
        }
    }

    /// Element-wise sums over the ranks, in place (in rank order, so every rank gets the same
    /// bits).
    pub fn sum(&self, v: &mut [f64]) -> Result<()> {
        self.reduce(v, |a, b| a + b)
    }

    pub fn max(&self, v: &mut [f64]) -> Result<()> {
        self.reduce(v, f64::max)
    }

    fn reduce(&self, v: &mut [f64], op: impl Fn(f64, f64) -> f64) -> Result<()> {
        if self.size() == 1 {
            return Ok(());
        }
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let all = self.gather(&bytes)?;
        for i in 0..v.len() {
            let mut it = all.iter().map(|m| m.get(8 * i..8 * i + 8).map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes"))));
            let first =
                it.next().flatten().ok_or_else(|| invalid!("a rank sent {} values for a reduction of {}", all[0].len() / 8, v.len()))?;
            v[i] = it.try_fold(first, |acc, y| y.map(|y| op(acc, y)).ok_or_else(|| invalid!("ranks disagree on a reduction's length")))?;
        }
        Ok(())
    }

    /// Sends `to[r]` to rank r; what each rank sent here, by rank.
    pub fn exchange(&self, mut to: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
        if self.size() == 1 {
            return Ok(to);
        }
        if to.len() != self.size() {
            return Err(invalid!("an exchange needs one message per rank, got {} for {}", to.len(), self.size()));
        }
        self.gather(&[])?;
        // What stays here does not travel.
        let own = std::mem::take(&mut to[self.rank()]);
        let mut got = self.comm.exchange(to).inspect_err(|_| self.done.store(true, Ordering::Relaxed))?;
        if got.len() != self.size() {
            return Err(invalid!("an exchange returned {} messages for {} ranks", got.len(), self.size()));
        }
        got[self.rank()] = own;
        Ok(got)
    }

    pub fn write_at(&self, path: &Path, offset: u64, bytes: &[u8]) -> Result<()> {
        self.gather(&[])?;
        self.comm.write_at(path, offset, bytes).inspect_err(|_| self.done.store(true, Ordering::Relaxed))
    }
}

/// Starts snapshot `name` of the store at `store` on rank 0 and checks that every rank was asked
/// for the same (`asked` describes the request; `mismatch(r)` is the error when rank r's differs):
/// rank 0's pending snapshot (None elsewhere), and the temporary file every rank writes into.
pub fn begin_together(
    group: &Group,
    store: &Path,
    name: &str,
    asked: &str,
    mismatch: impl Fn(usize) -> Error,
) -> Result<(Option<PendingSnapshot>, PathBuf)> {
    let pending = if group.rank() == 0 { Some(Store::open_or_create(store)?.begin(name)?) } else { None };
    let temp = pending.as_ref().map_or_else(PathBuf::new, |p| p.temp_path().to_path_buf());
    if group.size() == 1 {
        return Ok((pending, temp));
    }
    let all = group.gather(format!("{asked}\n{}", temp.display()).as_bytes())?;
    let text: Vec<String> = all.iter().map(|m| String::from_utf8_lossy(m).into_owned()).collect();
    if let Some(r) = text.iter().position(|t| t.split('\n').next() != Some(asked)) {
        return Err(mismatch(r));
    }
    Ok((pending, PathBuf::from(text[0].split_once('\n').map_or("", |(_, p)| p))))
}

/// Rank 0 commits `pending`, a file of `len` bytes; every rank returns (its length, its path).
pub fn commit_together(group: &Group, pending: Option<PendingSnapshot>, len: u64) -> Result<(u64, PathBuf)> {
    let committed = match pending {
        Some(p) => format!("{len} {}", p.commit()?.display()),
        None => String::new(),
    };
    let committed = String::from_utf8_lossy(&group.gather(committed.as_bytes())?[0]).into_owned();
    let (len, path) = committed.split_once(' ').ok_or_else(|| invalid!("rank 0 sent no commit"))?;
    Ok((len.parse().map_err(|_| invalid!("rank 0 sent no commit"))?, PathBuf::from(path)))
}

/// Runs one collective operation of `group`: a panic becomes an error like any other, and an
/// error (here or on a peer) reaches the other ranks, which would otherwise wait for this one.
pub fn guarded<R>(group: &Group, work: impl FnOnce() -> Result<R>) -> Result<R> {
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
    let result = run.unwrap_or_else(|panic| {
        let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
        Err(invalid!("internal error (please report it): {}", what.unwrap_or_default()))
    });
    result.inspect_err(|e| group.fail(e))
}

/// Owners of work units (chunks) by the PnetCDF rule: for each unit, largest first, the rank
/// whose access (what it holds of the unit) less its workload penalty is largest. The penalty is
/// `alpha` times what the rank would own beyond an even share of all the work so far (`owned`,
/// carried from earlier calls: all levels and variables share it, plus this call's units):
/// PnetCDF's penalty grows from the first unit a rank owns, which, taking the units in order,
/// hands a rank's own units to others when it has merely been reached first, and moves data a
/// balanced distribution never needed to move. A rank holding nothing of a unit may win it when
/// the holders are loaded past their share by more than they hold of it. Ties go to the lower
/// rank. `access[u]` lists (rank, size) for unit u; `size[u]` is the unit's work.
pub fn assign_owners(access: &[Vec<(usize, u64)>], size: &[u64], owned: &mut [f64], alpha: f64) -> Vec<usize> {
    let share = (owned.iter().sum::<f64>() + size.iter().map(|&s| s as f64).sum::<f64>()) / owned.len().max(1) as f64;
    // Least-owning ranks, for units no holder should take.
    let mut idle: BinaryHeap<std::cmp::Reverse<(u64, usize)>> =
        owned.iter().enumerate().map(|(r, &o)| std::cmp::Reverse((o.to_bits(), r))).collect();
    let mut order: Vec<usize> = (0..access.len()).collect();
    order.sort_by_key(|&u| std::cmp::Reverse(size[u]));
    let mut owner = vec![0; access.len()];
    for u in order {
        let mut best: Option<(f64, usize)> = None;
        let mut consider = |r: usize, a: f64| {
            let score = a - alpha * (owned[r] + size[u] as f64 - share).max(0.0);
            if best.is_none_or(|(s, b)| score > s || (score == s && r < b)) {
                best = Some((score, r));
            }
        };
        for &(r, a) in &access[u] {
            consider(r, a as f64);
        }
        // The least-owning rank (stale heap entries skipped: loads only grow).
        while let Some(&std::cmp::Reverse((bits, r))) = idle.peek() {
            if bits == owned[r].to_bits() {
                consider(r, access[u].iter().find(|(q, _)| *q == r).map_or(0.0, |&(_, a)| a as f64));
                break;
            }
            idle.pop();
        }
        let (_, r) = best.expect("at least one rank");
        owner[u] = r;
        owned[r] += size[u] as f64;
        idle.push(std::cmp::Reverse((owned[r].to_bits(), r)));
    }
    owner
}

/// The values of `b` inside `sub` (a part of it), in C order.
pub fn extract<T: Element>(b: &BoxView<T>, sub: &IBox) -> Vec<T> {
    let nd = sub.ndim();
    let shape = b.shape();
    let g = |d: usize| b.ghost.get(d).copied().unwrap_or(0);
    let full: Vec<usize> = (0..nd).map(|d| shape[d] + 2 * g(d)).collect();
    // Strides of the data array per dimension.
    let mut stride = vec![1usize; nd];
    match b.layout {
        Layout::C => (0..nd.saturating_sub(1)).rev().for_each(|d| stride[d] = stride[d + 1] * full[d + 1]),
        Layout::Fortran => (1..nd).for_each(|d| stride[d] = stride[d - 1] * full[d - 1]),
    }
    let sub_shape = sub.shape();
    let mut out = Vec::with_capacity(sub_shape.iter().product());
    let mut rows = sub.clone();
    rows.hi[nd - 1] = rows.lo[nd - 1];
    amrzip_amr::boxes::for_each_cell(&rows, |c| {
        let start: usize = (0..nd).map(|d| (c[d] - b.lo[d]) as usize + g(d)).zip(&stride).map(|(i, s)| i * s).sum();
        let s = stride[nd - 1];
        out.extend((0..sub_shape[nd - 1]).map(|k| b.data[start + k * s]));
    });
    out
}

/// A box piece sent to a shard's owner: the piece of global box `index`, C order.
pub struct Piece<T> {
    pub index: u32,
    pub region: IBox,
    pub values: Vec<T>,
}

pub fn pack<T: Element>(p: &Piece<T>, out: &mut Vec<u8>) {
    out.extend_from_slice(&p.index.to_le_bytes());
    p.region.lo.iter().chain(&p.region.hi).for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    out.extend_from_slice(&(p.values.len() as u64).to_le_bytes());
    p.values.iter().for_each(|v| v.write_le(out));
}

/// The pieces of one message (from one rank), checked against the boxes they name.
pub fn unpack<T: Element>(bytes: &[u8], dim: usize, boxes: &[IBox]) -> Result<Vec<Piece<T>>> {
    let mut rest = bytes;
    let mut take = |n: usize| -> Result<&[u8]> {
        let (head, tail) = rest.split_at_checked(n).ok_or_else(|| invalid!("a box piece message is cut short"))?;
        rest = tail;
        Ok(head)
    };
    let mut pieces = Vec::new();
    let word = |b: &[u8]| i64::from_le_bytes(b.try_into().expect("8 bytes"));
    let mut left = bytes.len();
    while left > 0 {
        let index = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
        let corners = take(16 * dim)?;
        let lo: Vec<i64> = corners[..8 * dim].chunks(8).map(word).collect();
        let hi: Vec<i64> = corners[8 * dim..].chunks(8).map(word).collect();
        let region = IBox::new(lo, hi);
        let n = word(take(8)?) as usize;
        let inside = boxes.get(index as usize).is_some_and(|b| b.contains(&region));
        if region.is_empty() || !inside || region.cells() != Some(n) {
            return Err(invalid!("a box piece names box {index} and region {region:?}, not a part of it"));
        }
        let raw = take(n.checked_mul(T::BYTES).ok_or_else(|| invalid!("box piece too large"))?)?;
        pieces.push(Piece { index, region, values: raw.chunks(T::BYTES).map(T::read_le).collect() });
        left -= 4 + 16 * dim + 8 + raw.len();
    }
    Ok(pieces)
}

/// A writer whose positions start at `base`: a rank's entries of the snapshot file, built in
/// memory as the zip library lays them out at their place in the file.
struct Shifted {
    bytes: Vec<u8>,
    base: u64,
    /// The position, shared with the caller (the zip writer keeps its writer to itself).
    at: std::rc::Rc<std::cell::Cell<u64>>,
}

impl Write for Shifted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let at = (self.at.get() - self.base) as usize;
        let end = at + buf.len();
        if end > self.bytes.len() {
            self.bytes.resize(end, 0);
        }
        self.bytes[at..end].copy_from_slice(buf);
        self.at.set(self.at.get() + buf.len() as u64);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Seek for Shifted {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        let end = self.base + self.bytes.len() as u64;
        let to = match pos {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => end.checked_add_signed(d),
            SeekFrom::Current(d) => self.at.get().checked_add_signed(d),
        };
        match to {
            Some(p) if p >= self.base => {
                self.at.set(p);
                Ok(p)
            }
            _ => Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before this rank's part of the file")),
        }
    }
}

/// A rank's entries laid out from `base`: (their local headers and data, their central
/// directory records).
fn lay_out(entries: &[(String, Vec<u8>)], base: u64) -> Result<(Vec<u8>, Vec<u8>)> {
    use zip::write::SimpleFileOptions;
    let at = std::rc::Rc::new(std::cell::Cell::new(base));
    let mut zip = zip::ZipWriter::new(Shifted { bytes: Vec::new(), base, at: at.clone() });
    let err = |e: zip::result::ZipError| invalid!("laying out snapshot entries: {e}");
    for (name, bytes) in entries {
        let options = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .unix_permissions(0o644)
            .large_file(bytes.len() as u64 >= u32::MAX as u64);
        zip.start_file(name, options).map_err(err)?;
        zip.write_all(bytes).map_err(|e| invalid!("laying out snapshot entries: {e}"))?;
    }
    // The local part ends where the central directory starts: finish writes it next.
    let local_len = at.get() - base;
    let mut out = zip.finish().map_err(err)?.bytes;
    let mut directory = out.split_off(local_len as usize);
    // The records run up to the end-of-directory records the library added for these entries alone.
    let mut end = 0;
    while directory.get(end..end + 4) == Some(&[0x50, 0x4b, 0x01, 0x02]) {
        let len = |o: usize| u16::from_le_bytes([directory[end + o], directory[end + o + 1]]) as usize;
        end += 46 + len(28) + len(30) + len(32);
    }
    directory.truncate(end);
    Ok((out, directory))
}

/// A snapshot file written by every rank in rounds: each round, every rank's entries go after
/// those of the rounds before (rank after rank); `finish` adds the central directory.
#[derive(Default)]
pub struct ArchiveRounds {
    /// Where the next round starts.
    end: u64,
    /// Rank 0: every entry's central directory record so far, and their count.
    records: Vec<u8>,
    count: u64,
}

impl ArchiveRounds {
    /// Writes this rank's `entries` (collective; a rank may have none).
    pub fn write(&mut self, group: &Group, path: &Path, entries: &[(String, Vec<u8>)]) -> Result<()> {
        // The local part's length does not depend on where it starts.
        let (local, _) = lay_out(entries, 0)?;
        let lengths = group.gather(&(local.len() as u64).to_le_bytes())?;
        let lengths: Vec<u64> =
            lengths.iter().map(|b| b.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))).collect();
        let base = self.end + lengths[..group.rank()].iter().sum::<u64>();
        let (local, directory) = lay_out(entries, base)?;
        let mut record = (entries.len() as u64).to_le_bytes().to_vec();
        record.extend_from_slice(&directory);
        let records = group.gather(&record)?;
        group.write_at(path, base, &local)?;
        self.end += lengths.iter().sum::<u64>();
        if group.rank() == 0 {
            for r in &records {
                let (count, rest) = r.split_at_checked(8).ok_or_else(|| invalid!("a rank sent no directory records"))?;
                self.count += u64::from_le_bytes(count.try_into().expect("8 bytes"));
                self.records.extend_from_slice(rest);
            }
        }
        Ok(())
    }

    /// Rank 0 writes the central directory and returns the file's length (the others 0). Rank 0
    /// syncs nothing: committing does.
    pub fn finish(self, group: &Group, path: &Path) -> Result<u64> {
        if group.rank() != 0 {
            return Ok(0);
        }
        let mut tail = self.records;
        let cd_size = tail.len() as u64;
        end_of_directory(&mut tail, self.count, cd_size, self.end);
        Serial.write_at(path, self.end, &tail)?;
        Ok(self.end + tail.len() as u64)
    }
}

/// Writes every rank's `entries` into the snapshot file at `path` in one round, then, on rank
/// 0, the central directory; returns the file's length.
pub fn write_archive(group: &Group, path: &Path, entries: &[(String, Vec<u8>)]) -> Result<u64> {
    let mut rounds = ArchiveRounds::default();
    rounds.write(group, path, entries)?;
    rounds.finish(group, path)
}

/// The end-of-central-directory records after `size` bytes of records for `count` entries
/// starting at `offset`: Zip64 ones (record and locator) when a value does not fit the classic.
fn end_of_directory(out: &mut Vec<u8>, count: u64, size: u64, offset: u64) {
    let zip64 = count >= 0xffff || size >= 0xffff_ffff || offset >= 0xffff_ffff;
    if zip64 {
        let at = offset + size;
        out.extend_from_slice(&[0x50, 0x4b, 0x06, 0x06]);
        out.extend_from_slice(&44u64.to_le_bytes());
        out.extend_from_slice(&45u16.to_le_bytes());
        out.extend_from_slice(&45u16.to_le_bytes());
        out.extend_from_slice(&[0; 8]);
        for v in [count, count, size, offset] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&[0x50, 0x4b, 0x06, 0x07, 0, 0, 0, 0]);
        out.extend_from_slice(&at.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
    }
    out.extend_from_slice(&[0x50, 0x4b, 0x05, 0x06, 0, 0, 0, 0]);
    let c = count.min(0xffff) as u16;
    out.extend_from_slice(&c.to_le_bytes());
    out.extend_from_slice(&c.to_le_bytes());
    out.extend_from_slice(&(size.min(0xffff_ffff) as u32).to_le_bytes());
    out.extend_from_slice(&(offset.min(0xffff_ffff) as u32).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
}

/// Every box of a level with its stored cells (`masks`), over `placeholder` values (at least
/// as many as the largest box holds): the level's geometry, for plans whose values are never read.
pub fn placeholder_views<'a, T>(boxes: &[IBox], masks: &'a [Option<Vec<bool>>], placeholder: &'a [T]) -> Vec<BoxView<'a, T>> {
    boxes
        .iter()
        .zip(masks)
        .map(|(b, m)| BoxView {
            lo: b.lo.clone(),
            hi: b.hi.clone(),
            data: &placeholder[..b.cells().unwrap_or(0)],
            layout: Layout::C,
            stored: m.as_deref(),
            ghost: Vec::new(),
        })
        .collect()
}

/// A level spread over the ranks, seen as one process sees it: the level's geometry (every box,
/// from the spec) gives the list of blocks a predictor choice samples, a sampled block is put
/// together from every rank's part of it, and shared tables pool every rank's statistics.
pub struct SpreadBlocks<'g, 'a, T> {
    group: &'g Group<'g>,
    /// Every box of the level, over placeholder values: the plan of the whole level, whose
    /// blocks' values are never read.
    everyone: Vec<BoxView<'a, T>>,
    /// This rank's boxes (or pieces of boxes).
    local: &'g [BoxView<'a, T>],
    /// The first error of a collective call made while sampling (the choice sees no blocks then).
    pub failed: std::sync::Mutex<Option<Error>>,
    /// The level's blocks per tiling described so far, shared by the level's fields.
    known: &'g Described,
}

/// A level's blocks per tiling ((unit, chunk) shapes): their descriptions and the number of the
/// first block of each chunk (and one past the last). They depend on the boxes alone, so every
/// field of the level shares them.
pub type Described = std::sync::Mutex<BTreeMap<(Vec<usize>, Vec<usize>), (Vec<BlockInfo>, Vec<usize>)>>;

impl<'g, 'a, T: Element> SpreadBlocks<'g, 'a, T> {
    /// `placeholder` must hold at least as many values as the largest box.
    pub fn new(
        group: &'g Group<'g>,
        boxes: &[IBox],
        masks: &'a [Option<Vec<bool>>],
        placeholder: &'a [T],
        local: &'g [BoxView<'a, T>],
        known: &'g Described,
    ) -> Self {
        SpreadBlocks { group, everyone: placeholder_views(boxes, masks, placeholder), local, failed: std::sync::Mutex::new(None), known }
    }

    fn keep(&self, e: Error) {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
    }

    /// Takes the first error met while sampling.
    pub fn check(&self) -> Result<()> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).take().map_or(Ok(()), Err)
    }

    /// The level's blocks with `tiling` and where each chunk's start: each rank describes a share
    /// of the chunks (the walk over every block's cells is the costly part of a choice).
    fn described(&self, tiling: &Tiling) -> Result<(Vec<BlockInfo>, Vec<usize>)> {
        let key = (tiling.unit.clone(), tiling.chunk.clone());
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = known.get(&key) {
            return Ok(d.clone());
        }
        let global = ChunkPlan::new(&self.everyone, tiling).map_err(|e| invalid!("{e}"))?;
        let (rank, ranks, n) = (self.group.rank(), self.group.size(), global.chunks().len());
        let share = |r: usize| r * n / ranks..(r + 1) * n / ranks;
        let mut msg = Vec::new();
        for k in share(rank) {
            let blocks = global.block_info(k);
            msg.extend_from_slice(&(blocks.len() as u64).to_le_bytes());
            for b in blocks {
                msg.extend_from_slice(&[b.fits as u8, b.full as u8]);
                msg.extend_from_slice(&(b.stored as u64).to_le_bytes());
            }
        }
        let mut info = Vec::new();
        let mut starts = vec![0usize];
        for (r, part) in self.group.gather(&msg)?.iter().enumerate() {
            let mut at = ByteReader::new(part);
            for _ in share(r) {
                for _ in 0..at.u64("block count")? {
                    let (fits, full) = (at.u8("fits")? != 0, at.u8("full")? != 0);
                    info.push(BlockInfo { fits, full, stored: at.u64("stored cells")? as usize });
                }
                starts.push(info.len());
            }
        }
        known.insert(key, (info.clone(), starts.clone()));
        Ok((info, starts))
    }

    fn try_fetch(&self, tiling: &Tiling, picked: &[usize]) -> Result<Vec<Block<T>>> {
        let (_, starts) = self.described(tiling)?;
        let global = ChunkPlan::new(&self.everyone, tiling).map_err(|e| invalid!("{e}"))?;
        let local = ChunkPlan::new(self.local, tiling).map_err(|e| invalid!("{e}"))?;
        let total = *starts.last().expect("one entry");
        if let Some(&i) = picked.iter().find(|&&i| i >= total) {
            return Err(invalid!("block {i} sampled from a level of {total} blocks"));
        }
        let chunk_of = |i: usize| starts.partition_point(|&s| s <= i) - 1;
        let chunks: BTreeSet<usize> = picked.iter().map(|&i| chunk_of(i)).collect();
        let positions: BTreeMap<usize, Vec<u64>> =
            chunks.iter().map(|&k| (k, global.gather(k).iter().map(|b| b.position).collect())).collect();
        let local_chunks: BTreeMap<&Vec<i64>, usize> = local.chunks().iter().enumerate().map(|(k, (c, _))| (c, k)).collect();
        let mut mine: BTreeMap<usize, Vec<Block<T>>> = BTreeMap::new();
        for &k in &chunks {
            if let Some(&lk) = local_chunks.get(&global.chunks()[k].0) {
                mine.insert(k, local.gather(lk));
            }
        }
        let n: usize = tiling.unit.iter().product();
        // This rank's part of each sampled block: its number in `picked`, values, stored cells.
        let mut msg = Vec::new();
        let mut wanted = Vec::with_capacity(picked.len());
        for (j, &i) in picked.iter().enumerate() {
            let k = chunk_of(i);
            let position = positions[&k][i - starts[k]];
            wanted.push(position);
            if let Some(b) = mine.get(&k).and_then(|blocks| blocks.iter().find(|b| b.position == position)) {
                msg.extend_from_slice(&(j as u32).to_le_bytes());
                b.values.iter().for_each(|v| v.write_le(&mut msg));
                msg.extend((0..n).map(|c| b.mask.as_ref().is_none_or(|m| m[c]) as u8));
            }
        }
        let parts = self.group.gather(&msg)?;
        let mut blocks: Vec<(Vec<T>, Vec<bool>)> = vec![(vec![T::default(); n], vec![false; n]); picked.len()];
        let record = 4 + n * T::BYTES + n;
        for part in &parts {
            if part.len() % record != 0 {
                return Err(invalid!("a rank sent sampled blocks of the wrong size"));
            }
            for r in part.chunks(record) {
                let j = u32::from_le_bytes(r[..4].try_into().expect("4 bytes")) as usize;
                let (values, mask) = blocks.get_mut(j).ok_or_else(|| invalid!("a rank sent a block that was not sampled"))?;
                for c in 0..n {
                    if r[4 + n * T::BYTES + c] != 0 {
                        values[c] = T::read_le(&r[4 + c * T::BYTES..]);
                        mask[c] = true;
                    }
                }
            }
        }
        Ok(blocks
            .into_iter()
            .zip(wanted)
            .map(|((values, mask), position)| {
                let full = mask.iter().all(|&m| m);
                Block { position, values, mask: (!full).then_some(mask) }
            })
            .collect())
    }
}

impl<T: Element> Spread<T> for SpreadBlocks<'_, '_, T> {
    fn info(&self, tiling: &Tiling) -> Vec<BlockInfo> {
        self.described(tiling).map(|(info, _)| info).unwrap_or_else(|e| {
            self.keep(e);
            Vec::new()
        })
    }

    fn fetch(&self, tiling: &Tiling, picked: &[usize]) -> Vec<Block<T>> {
        self.try_fetch(tiling, picked).unwrap_or_else(|e| {
            self.keep(e);
            Vec::new()
        })
    }
}

impl<T: Element> Pool for SpreadBlocks<'_, '_, T> {
    fn all_gather(&self, bytes: Vec<u8>) -> amrzip_codec::Result<Vec<Vec<u8>>> {
        self.group.gather(&bytes).map_err(|e| amrzip_codec::CodecError::InvalidInput(e.message))
    }
}

/// The stored cells of each box per chunk of edge `edge` (from the index space's corner
/// `origin`): per box, (chunk coordinates, stored cells) where there are some.
pub fn chunk_cells(boxes: &[IBox], masks: &[Option<Vec<bool>>], origin: &[i64], edge: usize) -> Vec<Vec<(Vec<i64>, u64)>> {
    use rayon::prelude::*;
    let e = edge as i64;
    boxes
        .par_iter()
        .zip(masks)
        .map(|(b, mask)| {
            let nd = b.ndim();
            let span = IBox::new(
                (0..nd).map(|d| (b.lo[d] - origin[d]).div_euclid(e)).collect(),
                (0..nd).map(|d| (b.hi[d] - origin[d]).div_euclid(e)).collect(),
            );
            let mut out = Vec::new();
            amrzip_amr::boxes::for_each_cell(&span, |c| {
                let chunk =
                    IBox::new((0..nd).map(|d| origin[d] + c[d] * e).collect(), (0..nd).map(|d| origin[d] + (c[d] + 1) * e - 1).collect());
                let Some(part) = b.intersect(&chunk) else { return };
                let n = match mask {
                    None => part.cells().unwrap_or(0) as u64,
                    Some(m) => {
                        let mut n = 0u64;
                        amrzip_amr::boxes::for_each_cell(&part, |cell| n += m[b.offset_c(cell)] as u64);
                        n
                    }
                };
                if n > 0 {
                    out.push((c.to_vec(), n));
                }
            });
            out
        })
        .collect()
}

/// Who compresses what of a level in a parallel write: each chunk (with stored cells) gets an
/// owner by [`assign_owners`], which the ranks holding parts of it send their pieces to; each
/// shard (`m` chunks per side) a writer, the rank owning most of its cells, which the owners send
/// the compressed chunks to.
pub struct Ownership {
    /// Chunk coordinates, by unit number (lattice order).
    pub chunks: Vec<Vec<i64>>,
    /// The owner of each chunk.
    pub owner: Vec<usize>,
    /// Per box: (chunk unit, the part of the box in that chunk) where the part stores cells.
    pub pieces: Vec<Vec<(usize, IBox)>>,
    /// The writer of each shard, by shard coordinates.
    pub writers: BTreeMap<Vec<i64>, usize>,
    /// Chunks per shard side.
    pub m: usize,
    /// Stored cells held by a rank other than their chunk's owner (sent to it).
    pub moved: u64,
}

impl Ownership {
    /// The ownership of a level at chunk edge `edge`: its boxes (held by the ranks `holders`,
    /// storing the cells of `masks`) chunked from `origin` over the index space `space`, sharded
    /// as the writer shards `fields` fields; `owned`: what each rank owns so far (all levels
    /// share it).
    #[allow(clippy::too_many_arguments)]
    pub fn of_level(
        boxes: &[IBox],
        holders: &[i64],
        masks: &[Option<Vec<bool>>],
        origin: &[i64],
        space: &[usize],
        edge: usize,
        fields: usize,
        owned: &mut [f64],
    ) -> Ownership {
        let per_box = chunk_cells(boxes, masks, origin, edge);
        let present: BTreeSet<Vec<i64>> = per_box.iter().flatten().map(|(c, _)| c.clone()).collect();
        let grid: Vec<usize> = space.iter().map(|&n| n.div_ceil(edge)).collect();
        let m = crate::chunking::shard_factor(&present, fields, &grid);
        Ownership::new(boxes, holders, &per_box, origin, edge, m, owned)
    }

    /// `per_box`: `chunk_cells` of the level's `boxes` (held by the ranks `holders`) at edge
    /// `edge`; `m` chunks per shard side.
    #[allow(clippy::too_many_arguments)]
    fn new(
        boxes: &[IBox],
        holders: &[i64],
        per_box: &[Vec<(Vec<i64>, u64)>],
        origin: &[i64],
        edge: usize,
        m: usize,
        owned: &mut [f64],
    ) -> Ownership {
        let e = edge as i64;
        let mut units: BTreeMap<Vec<i64>, usize> = per_box.iter().flatten().map(|(c, _)| (c.clone(), 0)).collect();
        for (u, v) in units.values_mut().enumerate() {
            *v = u;
        }
        let mut held: BTreeMap<(usize, usize), u64> = BTreeMap::new();
        let mut cells = vec![0u64; units.len()];
        let mut pieces = Vec::with_capacity(boxes.len());
        for ((b, &holder), chunks) in boxes.iter().zip(holders).zip(per_box) {
            let mut mine = Vec::with_capacity(chunks.len());
            for (c, n) in chunks {
                let u = units[c];
                *held.entry((u, holder.max(0) as usize)).or_default() += n;
                cells[u] += n;
                let chunk = IBox::new(
                    c.iter().zip(origin).map(|(&ci, &o)| o + ci * e).collect(),
                    c.iter().zip(origin).map(|(&ci, &o)| o + (ci + 1) * e - 1).collect(),
                );
                mine.push((u, b.intersect(&chunk).expect("the box stores cells in the chunk")));
            }
            pieces.push(mine);
        }
        let mut access = vec![Vec::new(); units.len()];
        for (&(u, r), &n) in &held {
            access[u].push((r, n));
        }
        let owner = assign_owners(&access, &cells, owned, OWNER_PENALTY);
        let chunks: Vec<Vec<i64>> = units.into_keys().collect();
        let mut shard_cells: BTreeMap<Vec<i64>, BTreeMap<usize, u64>> = BTreeMap::new();
        for (u, c) in chunks.iter().enumerate() {
            let shard: Vec<i64> = c.iter().map(|&v| v.div_euclid(m as i64)).collect();
            *shard_cells.entry(shard).or_default().entry(owner[u]).or_default() += cells[u];
        }
        let writers = shard_cells
            .into_iter()
            .map(|(s, by)| (s, by.into_iter().max_by_key(|&(r, n)| (n, std::cmp::Reverse(r))).map_or(0, |(r, _)| r)))
            .collect();
        // Cells whose holder is not their chunk's owner.
        let moved = held.iter().filter(|&(&(u, r), _)| owner[u] != r).map(|(_, &n)| n).sum();
        Ownership { chunks, owner, pieces, writers, m, moved }
    }
}

/// One level as [`simulate_owners`] takes it: domain, ratio to the next level, boxes and the
/// rank holding each.
pub struct SimulatedLevel {
    pub domain: IBox,
    pub ref_ratio: Vec<i64>,
    pub boxes: Vec<IBox>,
    pub holders: Vec<i64>,
}

/// What the owner assignment of a parallel write does with `ranks` ranks holding boxes as the
/// levels say, at the writer's default (box-sized) chunk edge, the penalty carried from level to
/// level: the stored cells each rank owns in the end, and the stored cells that move to another
/// rank (held by one rank, owned by another).
pub fn simulate_owners(levels: &[SimulatedLevel], node: &[bool], ranks: usize) -> (Vec<f64>, u64) {
    let mut owned = vec![0.0; ranks];
    let mut moved = 0u64;
    for (l, lev) in levels.iter().enumerate() {
        let finer = levels.get(l + 1).map_or(&[][..], |f| &f.boxes[..]);
        let coverage = amrzip_amr::boxes::Coverage::new(finer, &lev.ref_ratio, node);
        let masks: Vec<Option<Vec<bool>>> = {
            use rayon::prelude::*;
            lev.boxes.par_iter().map(|b| amrzip_amr::boxes::stored_mask(b, &coverage)).collect()
        };
        let origin = &lev.domain.lo;
        let Some(&(_, edge)) = crate::chunking::candidates(&lev.boxes, node, origin, None, None, true).first() else { continue };
        let space: Vec<usize> = lev.domain.shape().iter().zip(node).map(|(&n, &nd)| n + nd as usize).collect();
        moved += Ownership::of_level(&lev.boxes, &lev.holders, &masks, origin, &space, edge, 1, &mut owned).moved;
    }
    (owned, moved)
}

/// The weight of a rank's load beyond an even share against what it holds of a chunk: at 2 a
/// holder keeps a chunk unless that takes it past its share by more than half what it holds
/// (the most-loaded rank stays within 1.14x the average in the owner simulation, 64-4,096
/// ranks on the real files' boxes; at 1, within about 1.25x on uneven units).
pub(crate) const OWNER_PENALTY: f64 = 2.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_follow_access_then_balance() {
        // Eight units each held whole by rank 0: the penalty spreads them, the holder keeping
        // ties (no data moves for those).
        let access = vec![vec![(0, 100)]; 8];
        let mut owned = vec![0.0; 2];
        let owner = assign_owners(&access, &[100; 8], &mut owned, 1.0);
        assert_eq!(owner.iter().filter(|&&r| r == 0).count(), 5, "{owner:?}");
        // Without a penalty the holder keeps them all.
        let mut owned = vec![0.0; 2];
        assert_eq!(assign_owners(&access, &[100; 8], &mut owned, 0.0), vec![0; 8]);
        // A unit goes to the rank holding most of it.
        let mut owned = vec![0.0; 3];
        assert_eq!(assign_owners(&[vec![(0, 10), (2, 90)]], &[100], &mut owned, 1.0), vec![2]);
    }

    #[test]
    fn balanced_holdings_stay_where_they_are() {
        // Each of 4 ranks holds a contiguous quarter of 16 equal units, twice (two variables):
        // every unit stays with its holder, whatever the order the units come in.
        let access: Vec<Vec<(usize, u64)>> = (0..16).map(|u| vec![(u / 4, 100)]).collect();
        let mut owned = vec![0.0; 4];
        for _ in 0..2 {
            assert_eq!(assign_owners(&access, &[100; 16], &mut owned, OWNER_PENALTY), (0..16).map(|u| u / 4).collect::<Vec<_>>());
        }
    }

    #[test]
    fn owners_balance_many_ranks() {
        // 4096 ranks, 16384 units of uneven sizes, each held by one rank of a block distribution.
        let ranks = 4096;
        let size: Vec<u64> = (0..16384u64).map(|u| 1000 + (u * 7919) % 9000).collect();
        let access: Vec<Vec<(usize, u64)>> = (0..size.len()).map(|u| vec![(u * ranks / size.len(), size[u])]).collect();
        let mut owned = vec![0.0; ranks];
        assign_owners(&access, &size, &mut owned, OWNER_PENALTY);
        let max = owned.iter().cloned().fold(0.0, f64::max);
        let avg = owned.iter().sum::<f64>() / ranks as f64;
        assert!(max / avg <= 1.2, "max/avg {}", max / avg);
    }

    #[test]
    fn pieces_round_trip_and_are_checked() {
        let data: Vec<f64> = (0..24).map(|v| v as f64).collect();
        let b = BoxView { lo: vec![0, 0, 0], hi: vec![1, 2, 3], data: &data, layout: Layout::C, stored: None, ghost: vec![] };
        let sub = IBox::new(vec![1, 1, 2], vec![1, 2, 3]);
        let values = extract(&b, &sub);
        assert_eq!(values, vec![18.0, 19.0, 22.0, 23.0]);
        let fortran = BoxView {
            layout: Layout::Fortran,
            ..BoxView { lo: vec![0, 0, 0], hi: vec![1, 2, 3], data: &data, layout: Layout::C, stored: None, ghost: vec![] }
        };
        // Fortran order: x fastest, so cell (i, j, k) is at i + 2 j + 6 k.
        assert_eq!(extract(&fortran, &sub), vec![1.0 + 2.0 + 12.0, 1.0 + 2.0 + 18.0, 1.0 + 4.0 + 12.0, 1.0 + 4.0 + 18.0]);
        let mut msg = Vec::new();
        pack(&Piece { index: 0, region: sub.clone(), values: values.clone() }, &mut msg);
        let boxes = [IBox::new(vec![0, 0, 0], vec![1, 2, 3])];
        let back: Vec<Piece<f64>> = unpack(&msg, 3, &boxes).unwrap();
        assert_eq!((back[0].index, &back[0].region, &back[0].values), (0, &sub, &values));
        assert!(unpack::<f64>(&msg[..msg.len() - 1], 3, &boxes).is_err());
        let outside = [IBox::new(vec![0, 0, 0], vec![0, 0, 0])];
        assert!(unpack::<f64>(&msg, 3, &outside).is_err());
    }

    #[test]
    fn archive_parts_make_one_readable_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.zip");
        std::fs::write(&path, b"").unwrap();
        let entries = vec![("x/1".to_string(), vec![1u8; 100]), ("zarr.json".to_string(), b"{}".to_vec())];
        let len = write_archive(&Group::new(&Serial), &path, &entries).unwrap();
        assert_eq!(len, std::fs::metadata(&path).unwrap().len());
        let a = crate::archive::Archive::open(&path).unwrap();
        assert_eq!(a.read("x/1").unwrap(), vec![1u8; 100]);
        assert_eq!(a.read("zarr.json").unwrap(), b"{}");
    }
}
