//! All the tables of the metadata server (mserver): the data servers (dservers) and their
//! workloads, the hash of box metadata with the per-(timestep, level) lists of committed
//! boxes, the polytree index of each timestep, and a binary snapshot of them
//! (`docs/format.md`, section 18).
//!
//! A box is written in two steps: [`Catalog::place`] chooses a dserver and records a pending
//! write, [`Catalog::commit`] makes it the box's committed record once the payload is there
//! (or [`Catalog::abort`] forgets it). Readers only ever see committed records, so a box being
//! rewritten stays readable from its old dserver until the new copy is committed. Each writer
//! names its write (a version number), so that writers racing on one box each commit their own
//! write, the last commit winning. Loads count pending and committed records alike: both
//! payloads occupy memory meanwhile.

use crate::placement::Workload;
use crate::polytree::{self, check_hierarchy, Polytree, MAX_LEVELS};
use crate::MAX_DIMS;
use amrzip_amr::IBox;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// Box coordinates lie within `±2^61`, so that every extent and refined coordinate is exact.
pub const COORD_LIMIT: i64 = 1 << 61;
/// Longest node name or dserver address, in bytes.
pub const MAX_NAME: usize = 4096;
/// Most opaque metadata bytes per record.
pub const MAX_META: usize = 1 << 20;

/// Where a box's payload lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub dserver: u32,
    pub nbytes: u64,
    /// What the client stores with the box (dtype, shape, codec...); never interpreted here.
    pub meta: Vec<u8>,
}

/// A box of a timestep's level.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BoxKey {
    pub timestep: u64,
    pub level: u32,
    pub bx: IBox,
}

impl BoxKey {
    pub fn new(timestep: u64, level: u32, lo: Vec<i64>, hi: Vec<i64>) -> BoxKey {
        BoxKey { timestep, level, bx: IBox::new(lo, hi) }
    }

    fn describe(&self) -> String {
        format!("box {:?}..={:?} of timestep {} level {}", self.bx.lo, self.bx.hi, self.timestep, self.level)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DServerStatus {
    pub id: u32,
    pub node: String,
    pub address: String,
    /// Bytes it may hold; 0: unlimited.
    pub capacity: u64,
    /// Bytes of the records (pending and committed) placed on it.
    pub load: u64,
    pub alive: bool,
    /// Records (pending and committed) placed on it.
    pub boxes: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TimestepSummary {
    /// Committed boxes per level, up to the finest level holding any.
    pub boxes: Vec<usize>,
    /// Committed bytes per level.
    pub bytes: Vec<u64>,
    /// Whether refinement ratios are known, so that queries can be answered (the index itself
    /// is built when a query needs it).
    pub indexed: bool,
    /// Axes of the timestep's boxes.
    pub ndim: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct IndexStats {
    /// Boxes per level indexed.
    pub boxes: Vec<usize>,
    pub edges: usize,
    pub seconds: f64,
}

/// A box a query found, with its committed record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit<'a> {
    pub level: u32,
    pub bx: &'a IBox,
    pub record: &'a Record,
}

#[derive(Default)]
struct Entry {
    /// Position in the level's committed lists.
    committed: Option<usize>,
    /// Writes placed and not yet committed, by version.
    pending: Vec<(u64, Record)>,
}

struct Timestep {
    ndim: usize,
    /// Per level: the hash of box metadata.
    entries: Vec<HashMap<IBox, Entry>>,
    /// Per level: the committed boxes and their records, in step (the paper's per-level lists).
    boxes: Vec<Vec<IBox>>,
    records: Vec<Vec<Record>>,
    /// Refinement ratios given to the last index build, and its thread count.
    ratios: Option<Vec<Vec<i64>>>,
    threads: usize,
    /// The index over `boxes`; None when never built or when boxes came or went since.
    index: Option<Polytree>,
}

impl Timestep {
    fn new(ndim: usize) -> Timestep {
        Timestep { ndim, entries: Vec::new(), boxes: Vec::new(), records: Vec::new(), ratios: None, threads: 0, index: None }
    }

    /// Levels up to the finest holding a committed box.
    fn levels(&self) -> usize {
        self.boxes.iter().rposition(|b| !b.is_empty()).map_or(0, |l| l + 1)
    }

    fn grow(&mut self, level: usize) {
        while self.entries.len() <= level {
            self.entries.push(HashMap::new());
            self.boxes.push(Vec::new());
            self.records.push(Vec::new());
        }
    }

    /// Adds a committed box at the end of its level's lists.
    fn push(&mut self, level: usize, bx: IBox, record: Record) {
        self.grow(level);
        let slot = self.boxes[level].len();
        self.entries[level].entry(bx.clone()).or_default().committed = Some(slot);
        self.boxes[level].push(bx);
        self.records[level].push(record);
        self.index = None;
    }

    fn hits(&self, found: Vec<(usize, usize)>) -> Vec<Hit<'_>> {
        found.into_iter().map(|(l, i)| Hit { level: l as u32, bx: &self.boxes[l][i], record: &self.records[l][i] }).collect()
    }

    fn ratios(&self, t: u64) -> Result<&[Vec<i64>], String> {
        let ratios = self.ratios.as_deref().ok_or_else(|| format!("timestep {t} has no index: build it with index({t}, ref_ratio=...)"))?;
        check_hierarchy(&self.boxes[..self.levels()], ratios)
            .map_err(|e| format!("timestep {t} changed since its index was built: {e}"))?;
        Ok(ratios)
    }

    fn check_region(&self, t: u64, region: &IBox) -> Result<(), String> {
        if region.ndim() != self.ndim || region.hi.len() != self.ndim || region.is_empty() {
            return Err(format!("region {:?}..={:?} is empty or not {}-dimensional like timestep {t}", region.lo, region.hi, self.ndim));
        }
        Ok(())
    }
}

struct DServer {
    node: u32,
    address: String,
    records: u64,
}

/// The dserver registry and its workload tables.
#[derive(Default)]
struct Servers {
    nodes: Vec<String>,
    node_ids: HashMap<String, u32>,
    dservers: Vec<DServer>,
    by_address: HashMap<String, u32>,
    workload: Workload,
}

impl Servers {
    fn add_node(&mut self, name: &str) -> u32 {
        let n = self.workload.add_node();
        self.nodes.push(name.to_string());
        self.node_ids.insert(name.to_string(), n);
        n
    }

    fn add_dserver(&mut self, node: u32, address: &str, capacity: u64) -> u32 {
        let id = self.workload.add_dserver(node, capacity);
        self.dservers.push(DServer { node, address: address.to_string(), records: 0 });
        self.by_address.insert(address.to_string(), id);
        id
    }

    fn charge(&mut self, r: &Record) {
        self.workload.charge(r.dserver, r.nbytes);
        self.dservers[r.dserver as usize].records += 1;
    }

    fn release(&mut self, r: &Record) {
        self.workload.release(r.dserver, r.nbytes);
        self.dservers[r.dserver as usize].records -= 1;
    }

    /// Why no dserver can take `nbytes`: the few live ones with the most room, and how many
    /// others there are.
    fn no_room(&self, nbytes: u64) -> String {
        if self.dservers.is_empty() {
            return "no data server registered".to_string();
        }
        let w = &self.workload;
        let mut live: Vec<u32> = (0..self.dservers.len() as u32).filter(|&d| w.alive(d)).collect();
        let dead = self.dservers.len() - live.len();
        if live.is_empty() {
            return format!("no live data server can take {nbytes} bytes: all {dead} registered data servers are marked dead");
        }
        let room = |d: u32| if w.capacity(d) == 0 { u64::MAX - w.load(d) } else { w.capacity(d).saturating_sub(w.load(d)) };
        live.sort_by_key(|&d| (std::cmp::Reverse(room(d)), d));
        const SHOWN: usize = 3;
        let mut parts: Vec<String> = live
            .iter()
            .take(SHOWN)
            .map(|&d| {
                let cap = if w.capacity(d) == 0 { "unlimited".to_string() } else { w.capacity(d).to_string() };
                format!("dserver {d} ({}) holds {}/{cap} bytes", self.dservers[d as usize].address, w.load(d))
            })
            .collect();
        if live.len() > SHOWN {
            parts.push(format!("and {} more live ones, none with more room", live.len() - SHOWN));
        }
        let dead = if dead > 0 { format!("; {dead} dead") } else { String::new() };
        format!("no live data server can take {nbytes} bytes: {}{dead}", parts.join(", "))
    }
}

/// The metadata server's tables.
#[derive(Default)]
pub struct Catalog {
    servers: Servers,
    timesteps: BTreeMap<u64, Timestep>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").field("dservers", &self.servers.dservers.len()).field("timesteps", &self.timesteps()).finish()
    }
}

fn check_name(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > MAX_NAME {
        return Err(format!("{what} {s:?} must be 1 to {MAX_NAME} bytes long"));
    }
    Ok(())
}

fn check_box(b: &IBox) -> Result<(), String> {
    let nd = b.lo.len();
    if !(1..=MAX_DIMS).contains(&nd) || b.hi.len() != nd {
        return Err(format!("box {:?}..={:?} must have lo and hi of 1 to {MAX_DIMS} coordinates each", b.lo, b.hi));
    }
    if b.is_empty() {
        return Err(format!("box {:?}..={:?} is empty (lo > hi)", b.lo, b.hi));
    }
    if b.lo.iter().chain(&b.hi).any(|v| v.unsigned_abs() > COORD_LIMIT as u64) {
        return Err(format!("box {:?}..={:?} has coordinates beyond ±2^61", b.lo, b.hi));
    }
    Ok(())
}

fn check_key(key: &BoxKey) -> Result<(), String> {
    if key.level as usize >= MAX_LEVELS {
        return Err(format!("level {} is beyond the {MAX_LEVELS} levels a timestep may have", key.level));
    }
    check_box(&key.bx)
}

impl Catalog {
    pub fn new() -> Catalog {
        Catalog::default()
    }

    /// Registers a dserver of `node` (created on first use) at `address`, or, when the address
    /// is known, marks it alive again with the new capacity (0: unlimited). Returns its id.
    pub fn add_dserver(&mut self, node: &str, address: &str, capacity: u64) -> Result<u32, String> {
        check_name("node name", node)?;
        check_name("address", address)?;
        let s = &mut self.servers;
        if let Some(&id) = s.by_address.get(address) {
            let registered = &s.nodes[s.dservers[id as usize].node as usize];
            if registered != node {
                return Err(format!("dserver {id} at {address} is registered on node {registered:?}, not {node:?}"));
            }
            s.workload.set_capacity(id, capacity);
            s.workload.set_alive(id, true);
            return Ok(id);
        }
        // Ids fit an i32, as the Python bindings hand them out.
        if s.dservers.len() >= i32::MAX as usize {
            return Err(format!("at most {} dservers can be registered", i32::MAX));
        }
        let n = match s.node_ids.get(node) {
            Some(&n) => n,
            None => s.add_node(node),
        };
        Ok(s.add_dserver(n, address, capacity))
    }

    pub fn set_alive(&mut self, id: u32, alive: bool) -> Result<(), String> {
        if id as usize >= self.servers.dservers.len() {
            return Err(format!("no dserver {id} (there are {})", self.servers.dservers.len()));
        }
        self.servers.workload.set_alive(id, alive);
        Ok(())
    }

    pub fn dservers(&self) -> Vec<DServerStatus> {
        let s = &self.servers;
        s.dservers
            .iter()
            .enumerate()
            .map(|(id, d)| {
                let id = id as u32;
                DServerStatus {
                    id,
                    node: s.nodes[d.node as usize].clone(),
                    address: d.address.clone(),
                    capacity: s.workload.capacity(id),
                    load: s.workload.load(id),
                    alive: s.workload.alive(id),
                    boxes: d.records,
                }
            })
            .collect()
    }

    /// Chooses the dserver for write `version` of `nbytes` to `key` and records it as pending:
    /// the dserver of its committed record when that one is alive and has room (no move), else
    /// Algorithm 1's choice, with the dserver of the committed record it will replace. A
    /// pending write of the same version is replaced.
    pub fn place(&mut self, key: &BoxKey, version: u64, nbytes: u64, meta: Vec<u8>) -> Result<(u32, Option<u32>), String> {
        check_key(key)?;
        if meta.len() > MAX_META {
            return Err(format!("{} bytes of box metadata, at most {MAX_META} are kept", meta.len()));
        }
        let (t, level) = (key.timestep, key.level as usize);
        let ts = self.timesteps.get(&t);
        if let Some(ts) = ts {
            if ts.ndim != key.bx.ndim() {
                return Err(format!("timestep {t} holds {}-D boxes, {} is {}-D", ts.ndim, key.describe(), key.bx.ndim()));
            }
        }
        let (committed, pending) = match ts.and_then(|ts| Some((ts, ts.entries.get(level)?.get(&key.bx)?))) {
            Some((ts, e)) => (
                e.committed.map(|slot| ts.records[level][slot].dserver),
                e.pending.iter().find(|(v, _)| *v == version).map(|(_, r)| r.clone()),
            ),
            None => (None, None),
        };
        // The write being replaced must not count against its replacement.
        if let Some(p) = &pending {
            self.servers.release(p);
        }
        let w = &self.servers.workload;
        let choice = match committed {
            Some(d) if w.fits(d, nbytes) => Some((d, None)),
            _ => w.place(nbytes).map(|d| (d, committed)),
        };
        let Some((d, old)) = choice else {
            if let Some(p) = &pending {
                self.servers.charge(p);
            }
            return Err(self.servers.no_room(nbytes));
        };
        let record = Record { dserver: d, nbytes, meta };
        self.servers.charge(&record);
        let ts = self.timesteps.entry(t).or_insert_with(|| Timestep::new(key.bx.ndim()));
        ts.grow(level);
        let pending = &mut ts.entries[level].entry(key.bx.clone()).or_default().pending;
        pending.retain(|(v, _)| *v != version);
        pending.push((version, record));
        Ok((d, old))
    }

    /// Makes pending write `version` of `key` its committed record, releasing the one it
    /// replaces.
    pub fn commit(&mut self, key: &BoxKey, version: u64) -> Result<(), String> {
        let level = key.level as usize;
        let no_pending = || format!("no pending write {version} of {} to commit", key.describe());
        let ts = self.timesteps.get_mut(&key.timestep).ok_or_else(no_pending)?;
        let entry = ts.entries.get_mut(level).and_then(|e| e.get_mut(&key.bx)).ok_or_else(no_pending)?;
        let at = entry.pending.iter().position(|(v, _)| *v == version).ok_or_else(no_pending)?;
        let (_, record) = entry.pending.swap_remove(at);
        match entry.committed {
            Some(slot) => {
                let old = std::mem::replace(&mut ts.records[level][slot], record);
                self.servers.release(&old);
            }
            None => ts.push(level, key.bx.clone(), record),
        }
        Ok(())
    }

    /// Forgets pending write `version` of `key`; false when there was none.
    pub fn abort(&mut self, key: &BoxKey, version: u64) -> bool {
        let Some(entries) = self.timesteps.get_mut(&key.timestep).and_then(|ts| ts.entries.get_mut(key.level as usize)) else {
            return false;
        };
        let Some(entry) = entries.get_mut(&key.bx) else { return false };
        let Some(at) = entry.pending.iter().position(|(v, _)| *v == version) else { return false };
        let (_, record) = entry.pending.swap_remove(at);
        self.servers.release(&record);
        if entries.get(&key.bx).is_some_and(|e| e.committed.is_none() && e.pending.is_empty()) {
            entries.remove(&key.bx);
        }
        true
    }

    /// The committed record of `key`.
    pub fn locate(&self, key: &BoxKey) -> Option<&Record> {
        let ts = self.timesteps.get(&key.timestep)?;
        let slot = ts.entries.get(key.level as usize)?.get(&key.bx)?.committed?;
        Some(&ts.records[key.level as usize][slot])
    }

    /// Deletes the committed record of `key` (a pending write stays) and returns it.
    pub fn remove(&mut self, key: &BoxKey) -> Option<Record> {
        let level = key.level as usize;
        let ts = self.timesteps.get_mut(&key.timestep)?;
        let entries = ts.entries.get_mut(level)?;
        let entry = entries.get_mut(&key.bx)?;
        let slot = entry.committed.take()?;
        if entry.pending.is_empty() {
            entries.remove(&key.bx);
        }
        ts.boxes[level].swap_remove(slot);
        let record = ts.records[level].swap_remove(slot);
        if let Some(moved) = ts.boxes[level].get(slot) {
            if let Some(e) = entries.get_mut(moved) {
                e.committed = Some(slot);
            }
        }
        ts.index = None;
        self.servers.release(&record);
        Some(record)
    }

    /// Forgets a timestep: every record (committed and pending) with its dserver, sorted by
    /// level and box, for the dservers to delete. Unknown timesteps give nothing.
    pub fn drop_timestep(&mut self, timestep: u64) -> Vec<(BoxKey, u32)> {
        let Some(ts) = self.timesteps.remove(&timestep) else { return Vec::new() };
        let mut out = Vec::new();
        for (level, entries) in ts.entries.into_iter().enumerate() {
            for (bx, entry) in entries {
                let committed = entry.committed.map(|slot| &ts.records[level][slot]);
                for r in committed.into_iter().chain(entry.pending.iter().map(|(_, r)| r)) {
                    self.servers.release(r);
                    out.push((BoxKey { timestep, level: level as u32, bx: bx.clone() }, r.dserver));
                }
            }
        }
        out.sort_by(|(a, da), (b, db)| (a.level, &a.bx.lo, &a.bx.hi, da).cmp(&(b.level, &b.bx.lo, &b.bx.hi, db)));
        out
    }

    pub fn timesteps(&self) -> Vec<u64> {
        self.timesteps.keys().copied().collect()
    }

    fn timestep(&self, t: u64) -> Result<&Timestep, String> {
        self.timesteps.get(&t).ok_or_else(|| format!("timestep {t} is not in the catalog"))
    }

    fn timestep_mut(&mut self, t: u64) -> Result<&mut Timestep, String> {
        self.timesteps.get_mut(&t).ok_or_else(|| format!("timestep {t} is not in the catalog"))
    }

    pub fn summary(&self, timestep: u64) -> Result<TimestepSummary, String> {
        let ts = self.timestep(timestep)?;
        let n = ts.levels();
        Ok(TimestepSummary {
            boxes: ts.boxes[..n].iter().map(Vec::len).collect(),
            bytes: ts.records[..n].iter().map(|r| r.iter().map(|r| r.nbytes).sum()).collect(),
            indexed: ts.ratios.is_some(),
            ndim: ts.ndim,
        })
    }

    /// Builds the polytree over the committed boxes of `timestep` on `threads` threads
    /// (0: one per core), `ratios[l]` refining level `l` into `l + 1`. The ratios are kept:
    /// queries rebuild the index with them when boxes came or went since.
    pub fn build_index(&mut self, timestep: u64, ratios: Vec<Vec<i64>>, threads: usize) -> Result<IndexStats, String> {
        let ts = self.timestep_mut(timestep)?;
        if ratios.len() >= MAX_LEVELS {
            return Err(format!("{} refinement ratios given, a timestep has at most {MAX_LEVELS} levels", ratios.len()));
        }
        if let Some((l, r)) = ratios.iter().enumerate().find(|(_, r)| r.len() != ts.ndim || r.iter().any(|&v| v < 1)) {
            return Err(format!("the refinement ratio of level {l}, {r:?}, must have {} entries of at least 1", ts.ndim));
        }
        let start = Instant::now();
        let tree = Polytree::build(&ts.boxes[..ts.levels()], &ratios, threads).map_err(|e| format!("timestep {timestep}: {e}"))?;
        let seconds = start.elapsed().as_secs_f64();
        let stats = IndexStats { boxes: tree.levels().iter().map(Vec::len).collect(), edges: tree.edges(), seconds };
        ts.ratios = Some(ratios);
        ts.threads = threads;
        ts.index = Some(tree);
        Ok(stats)
    }

    /// The committed boxes of levels `level_min..=level_max` meeting `region` (level-0 cells),
    /// sorted by level and position in the level's list, found through the polytree (rebuilt
    /// first if boxes came or went since it was built).
    pub fn query(&mut self, timestep: u64, region: &IBox, level_min: usize, level_max: usize) -> Result<Vec<Hit<'_>>, String> {
        let ts = self.timestep_mut(timestep)?;
        ts.check_region(timestep, region)?;
        let tree = match ts.index.take() {
            Some(tree) => tree,
            None => Polytree::build(&ts.boxes[..ts.levels()], ts.ratios(timestep)?, ts.threads)?,
        };
        let found = tree.query(region, level_min, level_max);
        ts.index = Some(tree);
        Ok(ts.hits(found))
    }

    /// What [`Catalog::query`] answers, by testing every committed box (the baseline).
    pub fn scan(&self, timestep: u64, region: &IBox, level_min: usize, level_max: usize) -> Result<Vec<Hit<'_>>, String> {
        let ts = self.timestep(timestep)?;
        ts.check_region(timestep, region)?;
        let found = polytree::scan(&ts.boxes[..ts.levels()], ts.ratios(timestep)?, region, level_min, level_max);
        Ok(ts.hits(found))
    }
}

/// Snapshot layout version written by [`Catalog::to_bytes`].
pub const SNAPSHOT_VERSION: u32 = 1;
pub const SNAPSHOT_MAGIC: &[u8; 8] = b"AMRZSTG1";

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len() as u32);
    out.extend_from_slice(b);
}

/// Reads a snapshot front to back; every failure says what was being read and where.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let left = self.data.len() - self.at;
        if n > left {
            return Err(format!("staging snapshot truncated: {what} needs {n} bytes at offset {}, {left} left", self.at));
        }
        self.at += n;
        Ok(&self.data[self.at - n..self.at])
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap_or_default()))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap_or_default()))
    }

    fn i64s(&mut self, n: usize, what: &str) -> Result<Vec<i64>, String> {
        let raw = self.take(n * 8, what)?;
        Ok(raw.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default())).collect())
    }

    /// A count of items taking at least `each` bytes, checked against the bytes left.
    fn count(&mut self, wide: bool, each: usize, what: &str) -> Result<usize, String> {
        let at = self.at;
        let n = if wide { self.u64(what)? } else { u64::from(self.u32(what)?) };
        let left = (self.data.len() - self.at) as u64;
        if n.saturating_mul(each as u64) > left {
            return Err(format!("staging snapshot damaged: {what} is {n} at offset {at}, more than the {left} bytes left can hold"));
        }
        Ok(n as usize)
    }

    fn text(&mut self, what: &str) -> Result<String, String> {
        let at = self.at;
        let n = self.count(false, 1, what)?;
        let s = std::str::from_utf8(self.take(n, what)?)
            .map_err(|_| format!("staging snapshot damaged: {what} at offset {at} is not UTF-8"))?;
        check_name(what, s).map_err(|e| format!("staging snapshot damaged: {e}"))?;
        Ok(s.to_string())
    }
}

/// Bytes of a record besides its coordinates: dserver, nbytes, meta length.
const RECORD_BYTES: usize = 4 + 8 + 4;

impl Catalog {
    /// The snapshot of the dservers, the committed boxes and the refinement ratios
    /// (`docs/format.md`, section 18). Pending writes are left out.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(SNAPSHOT_MAGIC);
        put_u32(&mut out, SNAPSHOT_VERSION);
        let s = &self.servers;
        put_u32(&mut out, s.nodes.len() as u32);
        for n in &s.nodes {
            put_bytes(&mut out, n.as_bytes());
        }
        put_u32(&mut out, s.dservers.len() as u32);
        for (id, d) in s.dservers.iter().enumerate() {
            put_u32(&mut out, d.node);
            put_bytes(&mut out, d.address.as_bytes());
            put_u64(&mut out, s.workload.capacity(id as u32));
        }
        put_u32(&mut out, self.timesteps.len() as u32);
        for (&t, ts) in &self.timesteps {
            put_u64(&mut out, t);
            out.push(ts.ndim as u8);
            match &ts.ratios {
                None => out.push(0),
                Some(ratios) => {
                    out.push(1);
                    put_u32(&mut out, ratios.len() as u32);
                    for v in ratios.iter().flatten() {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                }
            }
            let n = ts.levels();
            put_u32(&mut out, n as u32);
            for (boxes, records) in ts.boxes[..n].iter().zip(&ts.records) {
                put_u64(&mut out, boxes.len() as u64);
                for (b, r) in boxes.iter().zip(records) {
                    for v in b.lo.iter().chain(&b.hi) {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                    put_u32(&mut out, r.dserver);
                    put_u64(&mut out, r.nbytes);
                    put_bytes(&mut out, &r.meta);
                }
            }
        }
        let crc = crc32fast::hash(&out);
        put_u32(&mut out, crc);
        out
    }

    /// Restores a snapshot of [`Catalog::to_bytes`]: dservers marked alive, loads recomputed
    /// from the committed records, indexes rebuilt when first queried. Refuses anything that
    /// is not exactly such a snapshot, saying what is wrong.
    pub fn from_bytes(data: &[u8]) -> Result<Catalog, String> {
        let head = SNAPSHOT_MAGIC.len() + 4;
        if data.len() < SNAPSHOT_MAGIC.len() || &data[..SNAPSHOT_MAGIC.len()] != SNAPSHOT_MAGIC {
            return Err("not a staging catalog snapshot (no AMRZSTG1 magic)".to_string());
        }
        if data.len() < head + 4 {
            return Err(format!("staging snapshot truncated: {} bytes, less than the {} of its header and checksum", data.len(), head + 4));
        }
        let version = u32::from_le_bytes([data[8], data[9], data[10], data[11]]);
        if version != SNAPSHOT_VERSION {
            return Err(format!("staging snapshot version {version}, this reader knows version {SNAPSHOT_VERSION}"));
        }
        let (body, tail) = data.split_at(data.len() - 4);
        let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(format!(
                "staging snapshot damaged or truncated: checksum {computed:#010x} of its {} bytes, {stored:#010x} stored",
                body.len()
            ));
        }
        let damaged = |m: String| format!("staging snapshot damaged: {m}");
        let mut r = Reader { data: body, at: head };
        let mut c = Catalog::new();

        let nodes = r.count(false, 4 + 1, "node count")?;
        for i in 0..nodes {
            let name = r.text("node name")?;
            if c.servers.node_ids.contains_key(&name) {
                return Err(damaged(format!("node {i} is named {name:?} like an earlier one")));
            }
            c.servers.add_node(&name);
        }
        let dservers = r.count(false, 4 + 4 + 1 + 8, "dserver count")?;
        for i in 0..dservers {
            let node = r.u32("dserver node")?;
            let address = r.text("dserver address")?;
            let capacity = r.u64("dserver capacity")?;
            if node as usize >= nodes {
                return Err(damaged(format!("dserver {i} is on node {node}, of {nodes} nodes")));
            }
            if c.servers.by_address.contains_key(&address) {
                return Err(damaged(format!("dserver {i} has the address {address:?} of an earlier one")));
            }
            c.servers.add_dserver(node, &address, capacity);
        }

        let timesteps = r.count(false, 8 + 1 + 1 + 4, "timestep count")?;
        for _ in 0..timesteps {
            let t = r.u64("timestep")?;
            let ndim = r.u8("dimension")? as usize;
            if !(1..=MAX_DIMS).contains(&ndim) {
                return Err(damaged(format!("timestep {t} has {ndim} axes")));
            }
            if let Some(&before) = c.timesteps.keys().next_back().filter(|&&before| before >= t) {
                return Err(damaged(format!("timestep {t} follows timestep {before}: timesteps must be in increasing order")));
            }
            let mut ts = Timestep::new(ndim);
            ts.ratios = match r.u8("ratio flag")? {
                0 => None,
                1 => {
                    let n = r.count(false, 8 * ndim, "ratio count")?;
                    if n >= MAX_LEVELS {
                        return Err(damaged(format!("timestep {t} has {n} refinement ratios")));
                    }
                    let mut ratios = Vec::new();
                    for l in 0..n {
                        let ratio = r.i64s(ndim, "refinement ratio")?;
                        if ratio.iter().any(|&v| v < 1) {
                            return Err(damaged(format!("timestep {t} refines level {l} by {ratio:?}")));
                        }
                        ratios.push(ratio);
                    }
                    Some(ratios)
                }
                f => return Err(damaged(format!("timestep {t} has ratio flag {f}"))),
            };
            let levels = r.count(false, 8, "level count")?;
            if levels > MAX_LEVELS {
                return Err(damaged(format!("timestep {t} has {levels} levels")));
            }
            for level in 0..levels {
                let n = r.count(true, 16 * ndim + RECORD_BYTES, "box count")?;
                for _ in 0..n {
                    let lo = r.i64s(ndim, "box lo")?;
                    let hi = r.i64s(ndim, "box hi")?;
                    let key = BoxKey::new(t, level as u32, lo, hi);
                    check_box(&key.bx).map_err(|e| damaged(format!("timestep {t} level {level}: {e}")))?;
                    let dserver = r.u32("record dserver")?;
                    let nbytes = r.u64("record size")?;
                    let len = r.count(false, 1, "record metadata length")?;
                    if len > MAX_META {
                        return Err(damaged(format!("{} has {len} bytes of metadata", key.describe())));
                    }
                    let meta = r.take(len, "record metadata")?.to_vec();
                    if dserver as usize >= dservers {
                        return Err(damaged(format!("{} is on dserver {dserver}, of {dservers}", key.describe())));
                    }
                    let node = c.servers.workload.node_of(dserver);
                    if c.servers.workload.node_load(node).checked_add(nbytes).is_none() {
                        return Err(damaged(format!("the loads of node {:?} overflow", c.servers.nodes[node as usize])));
                    }
                    if ts.entries.get(level).is_some_and(|e| e.contains_key(&key.bx)) {
                        return Err(damaged(format!("{} appears twice", key.describe())));
                    }
                    let record = Record { dserver, nbytes, meta };
                    c.servers.charge(&record);
                    ts.push(level, key.bx, record);
                }
            }
            c.timesteps.insert(t, ts);
        }
        if r.at != body.len() {
            return Err(damaged(format!("{} bytes after the last timestep", body.len() - r.at)));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: u64, level: u32, lo: &[i64], hi: &[i64]) -> BoxKey {
        BoxKey::new(t, level, lo.to_vec(), hi.to_vec())
    }

    fn loads(c: &Catalog) -> Vec<(u64, u64)> {
        c.dservers().iter().map(|d| (d.load, d.boxes)).collect()
    }

    /// Two nodes: "a" with dservers 0 and 1, "b" with dserver 2 (capacity 1000).
    fn three() -> Catalog {
        let mut c = Catalog::new();
        assert_eq!(c.add_dserver("a", "tcp://a:1", 0), Ok(0));
        assert_eq!(c.add_dserver("a", "tcp://a:2", 0), Ok(1));
        assert_eq!(c.add_dserver("b", "tcp://b:1", 1000), Ok(2));
        c
    }

    #[test]
    fn registering_again_revives_and_updates() {
        let mut c = three();
        c.set_alive(1, false).unwrap();
        assert_eq!(c.add_dserver("a", "tcp://a:2", 77), Ok(1));
        let d = &c.dservers()[1];
        assert_eq!((d.alive, d.capacity, d.node.as_str(), d.address.as_str()), (true, 77, "a", "tcp://a:2"));
        let e = c.add_dserver("b", "tcp://a:2", 0).unwrap_err();
        assert!(e.contains("registered on node \"a\", not \"b\""), "{e}");
        assert!(c.set_alive(9, true).unwrap_err().contains("no dserver 9"));
        assert!(c.add_dserver("", "x", 0).is_err());
    }

    #[test]
    fn racing_writers_each_commit_their_own_write() {
        let mut c = Catalog::new();
        c.add_dserver("n", "tcp://a", 0).unwrap();
        let k = key(0, 0, &[0], &[7]);
        c.place(&k, 1, 10, b"one".to_vec()).unwrap();
        c.place(&k, 2, 20, b"two".to_vec()).unwrap();
        assert_eq!(c.dservers()[0].load, 30);
        c.commit(&k, 2).unwrap();
        assert_eq!(c.locate(&k).unwrap().meta, b"two");
        c.commit(&k, 1).unwrap(); // the last commit wins
        assert_eq!(c.locate(&k).unwrap().meta, b"one");
        assert_eq!(c.dservers()[0].load, 10);
        assert!(c.commit(&k, 2).unwrap_err().contains("no pending write 2"));
        c.place(&k, 3, 5, vec![]).unwrap();
        assert!(!c.abort(&k, 4) && c.abort(&k, 3));
        assert_eq!(c.dservers()[0].load, 10);
    }

    #[test]
    fn commit_abort_and_replace_account_for_loads() {
        let mut c = three();
        let k = key(1, 0, &[0, 0], &[7, 7]);
        // Node a and node b are both empty: node a, dserver 0.
        assert_eq!(c.place(&k, 0, 100, b"m1".to_vec()), Ok((0, None)));
        assert_eq!(loads(&c), vec![(100, 1), (0, 0), (0, 0)]);
        assert!(c.locate(&k).is_none());
        // Placing again replaces the pending write: its load does not count against the new one.
        assert_eq!(c.place(&k, 0, 50, b"m2".to_vec()), Ok((0, None)));
        assert_eq!(loads(&c), vec![(50, 1), (0, 0), (0, 0)]);
        c.commit(&k, 0).unwrap();
        assert_eq!(c.locate(&k), Some(&Record { dserver: 0, nbytes: 50, meta: b"m2".to_vec() }));
        assert!(c.commit(&k, 0).unwrap_err().contains("no pending write 0 of box [0, 0]..=[7, 7] of timestep 1 level 0"));
        // A rewrite stays on the committed record's dserver while it is alive and has room;
        // both copies count until the commit.
        assert_eq!(c.place(&k, 0, 70, vec![]), Ok((0, None)));
        assert_eq!(loads(&c), vec![(120, 2), (0, 0), (0, 0)]);
        c.commit(&k, 0).unwrap();
        assert_eq!(loads(&c), vec![(70, 1), (0, 0), (0, 0)]);
        // Its dserver dead: Algorithm 1 moves it (node b is empty) and names the old dserver.
        c.set_alive(0, false).unwrap();
        assert_eq!(c.place(&k, 0, 70, vec![]), Ok((2, Some(0))));
        assert!(c.abort(&k, 0));
        assert!(!c.abort(&k, 0));
        assert_eq!(loads(&c), vec![(70, 1), (0, 0), (0, 0)]);
        assert_eq!(c.locate(&k).map(|r| r.dserver), Some(0));
        assert_eq!(c.place(&k, 0, 70, vec![]), Ok((2, Some(0))));
        c.commit(&k, 0).unwrap();
        assert_eq!(loads(&c), vec![(0, 0), (0, 0), (70, 1)]);
        // Remove keeps a pending write.
        c.set_alive(0, true).unwrap();
        let k2 = key(1, 1, &[0, 0], &[3, 3]);
        c.place(&k2, 0, 5, vec![]).unwrap();
        c.commit(&k2, 0).unwrap();
        c.place(&k2, 0, 6, vec![]).unwrap();
        assert_eq!(c.remove(&k2).map(|r| r.nbytes), Some(5));
        assert!(c.remove(&k2).is_none());
        assert!(c.locate(&k2).is_none());
        c.commit(&k2, 0).unwrap();
        assert_eq!(c.locate(&k2).map(|r| r.nbytes), Some(6));
        assert_eq!(c.summary(1).unwrap(), TimestepSummary { boxes: vec![1, 1], bytes: vec![70, 6], indexed: false, ndim: 2 });
        let dropped = c.drop_timestep(1);
        assert_eq!(dropped.len(), 2);
        assert_eq!(dropped[0], (k.clone(), 2));
        assert_eq!(loads(&c), vec![(0, 0); 3]);
        assert!(c.timesteps().is_empty());
        assert!(c.summary(1).unwrap_err().contains("timestep 1 is not in the catalog"));
    }

    #[test]
    fn refusals_say_why() {
        let mut c = Catalog::new();
        assert_eq!(c.place(&key(0, 0, &[0], &[1]), 0, 1, vec![]), Err("no data server registered".to_string()));
        for i in 0..6 {
            c.add_dserver("n", &format!("tcp://h:{i}"), 1000 + i).unwrap();
        }
        c.set_alive(5, false).unwrap();
        let e = c.place(&key(0, 0, &[0], &[1]), 0, 5000, vec![]).unwrap_err();
        assert_eq!(
            e,
            "no live data server can take 5000 bytes: dserver 4 (tcp://h:4) holds 0/1004 bytes, dserver 3 (tcp://h:3) holds 0/1003 \
             bytes, dserver 2 (tcp://h:2) holds 0/1002 bytes, and 2 more live ones, none with more room; 1 dead"
        );
        assert!(c.timesteps().is_empty(), "a refused write leaves nothing behind");
        c.place(&key(0, 0, &[0, 0], &[1, 1]), 0, 1, vec![]).unwrap();
        let e = c.place(&key(0, 1, &[0], &[1]), 0, 1, vec![]).unwrap_err();
        assert!(e.contains("timestep 0 holds 2-D boxes"), "{e}");
        assert!(c.place(&key(0, 0, &[0, 0], &[1]), 0, 1, vec![]).unwrap_err().contains("lo and hi"));
        assert!(c.place(&key(0, 0, &[2, 0], &[1, 1]), 0, 1, vec![]).unwrap_err().contains("empty"));
        assert!(c.place(&key(0, 0, &[0; 9], &[1; 9]), 0, 1, vec![]).is_err());
        assert!(c.place(&key(0, 99, &[0, 0], &[1, 1]), 0, 1, vec![]).unwrap_err().contains("level 99"));
        assert!(c.place(&key(0, 0, &[0, 0], &[1, 1 << 62]), 0, 1, vec![]).unwrap_err().contains("2^61"));
        for d in 0..5 {
            c.set_alive(d, false).unwrap();
        }
        let e = c.place(&key(0, 0, &[0, 0], &[1, 1]), 0, 1, vec![]).unwrap_err();
        assert!(e.contains("all 6 registered data servers are marked dead"), "{e}");
        // The refused rewrite kept the pending write it would have replaced.
        assert_eq!(loads(&c)[0], (1, 1));
    }

    /// A catalog of two timesteps, nested levels, some boxes committed.
    fn populated() -> Catalog {
        let mut c = three();
        for (lo, hi) in [([0, 0], [7, 7]), ([8, 0], [15, 7])] {
            let k = key(5, 0, &lo, &hi);
            c.place(&k, 0, 64, b"coarse".to_vec()).unwrap();
            c.commit(&k, 0).unwrap();
        }
        for i in 0..6 {
            let k = key(5, 1, &[4 * i, 2], &[4 * i + 3, 5]);
            c.place(&k, 0, 16 + i as u64, vec![i as u8]).unwrap();
            c.commit(&k, 0).unwrap();
        }
        c.place(&key(5, 1, &[40, 40], &[41, 41]), 0, 4, vec![]).unwrap();
        let k = key(9, 0, &[-3, -3], &[3, 3]);
        c.place(&k, 0, 1, vec![]).unwrap();
        c.commit(&k, 0).unwrap();
        c
    }

    fn found(hits: &[Hit<'_>]) -> Vec<(u32, Vec<i64>)> {
        hits.iter().map(|h| (h.level, h.bx.lo.clone())).collect()
    }

    #[test]
    fn queries_need_ratios_and_follow_changes() {
        let mut c = populated();
        let region = IBox::from_slices(&[3, 0], &[4, 7]);
        let e = c.query(5, &region, 0, 9).unwrap_err();
        assert_eq!(e, "timestep 5 has no index: build it with index(5, ref_ratio=...)");
        assert!(c.scan(5, &region, 0, 9).is_err());
        assert!(c.query(6, &region, 0, 9).unwrap_err().contains("timestep 6 is not in the catalog"));
        assert!(c.build_index(5, vec![vec![2]], 1).unwrap_err().contains("2 entries"));
        let stats = c.build_index(5, vec![vec![2, 2]], 2).unwrap();
        assert_eq!((stats.boxes, stats.edges), (vec![2, 6], 6));
        assert!(c.summary(5).unwrap().indexed);
        // Coarse cells 3..=4 (in coarse box 0) refine to fine cells 6..=9: fine boxes 1 (4..7)
        // and 2 (8..11).
        let want = vec![(0, vec![0, 0]), (1, vec![4, 2]), (1, vec![8, 2])];
        assert_eq!(found(&c.query(5, &region, 0, 9).unwrap()), want);
        assert_eq!(found(&c.scan(5, &region, 0, 9).unwrap()), want);
        assert_eq!(c.query(5, &region, 1, 1).unwrap()[1].record.meta, vec![2]);
        assert!(c.query(5, &IBox::from_slices(&[0], &[1]), 0, 9).unwrap_err().contains("not 2-dimensional"));
        // A removal moves the last box of the level into the hole; the index is rebuilt.
        c.remove(&key(5, 1, &[4, 2], &[7, 5])).unwrap();
        let want = vec![(0, vec![0, 0]), (1, vec![8, 2])];
        assert_eq!(found(&c.query(5, &region, 0, 9).unwrap()), want);
        assert_eq!(found(&c.scan(5, &region, 0, 9).unwrap()), want);
        // A new level needs a ratio the build was not given.
        let k = key(5, 2, &[16, 8], &[19, 11]);
        c.place(&k, 0, 1, vec![]).unwrap();
        c.commit(&k, 0).unwrap();
        let e = c.query(5, &region, 0, 9).unwrap_err();
        assert!(e.contains("timestep 5 changed since its index was built: 3 levels need 2 refinement ratios, 1 given"), "{e}");
        c.build_index(5, vec![vec![2, 2], vec![2, 2]], 0).unwrap();
        assert_eq!(c.query(5, &region, 2, 2).unwrap().len(), 1);
    }

    #[test]
    fn snapshots_round_trip_committed_state() {
        let mut c = populated();
        c.build_index(5, vec![vec![2, 2], vec![4, 4]], 1).unwrap();
        c.set_alive(1, false).unwrap();
        let bytes = c.to_bytes();
        let mut r = Catalog::from_bytes(&bytes).unwrap();
        assert_eq!(r.to_bytes(), bytes);
        assert_eq!(r.timesteps(), vec![5, 9]);
        // Loads without the pending write; every dserver alive again.
        let mut want = c.dservers();
        want[1].alive = true;
        let pending = c.timesteps[&5].entries[1][&IBox::from_slices(&[40, 40], &[41, 41])].pending[0].1.clone();
        want[pending.dserver as usize].load -= pending.nbytes;
        want[pending.dserver as usize].boxes -= 1;
        assert_eq!(r.dservers(), want);
        assert_eq!(r.summary(5).unwrap(), c.summary(5).unwrap());
        let region = IBox::from_slices(&[0, 0], &[20, 20]);
        let a = found(&c.query(5, &region, 0, 9).unwrap());
        assert_eq!(found(&r.query(5, &region, 0, 9).unwrap()), a);
        assert!(r.locate(&key(5, 1, &[40, 40], &[41, 41])).is_none());
        assert_eq!(r.locate(&key(5, 1, &[8, 2], &[11, 5])), c.locate(&key(5, 1, &[8, 2], &[11, 5])));
        // New writes after a restore go on.
        let k = key(9, 0, &[4, 4], &[5, 5]);
        r.place(&k, 0, 3, vec![]).unwrap();
        r.commit(&k, 0).unwrap();
        assert_eq!(Catalog::from_bytes(&Catalog::new().to_bytes()).unwrap().timesteps(), Vec::<u64>::new());
    }

    #[test]
    fn damaged_snapshots_are_refused_at_every_byte() {
        let bytes = populated().to_bytes();
        for n in 0..bytes.len() {
            assert!(Catalog::from_bytes(&bytes[..n]).is_err(), "truncated to {n} bytes");
        }
        for i in 0..bytes.len() {
            for flip in [0x01, 0x80] {
                let mut bad = bytes.clone();
                bad[i] ^= flip;
                assert!(Catalog::from_bytes(&bad).is_err(), "byte {i} ^ {flip:#x}");
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Catalog::from_bytes(&longer).is_err());
        assert!(Catalog::from_bytes(b"AMRZHZ01....").unwrap_err().contains("not a staging catalog snapshot"));
    }

    /// Rewrites bytes of a snapshot and its checksum, as a faulty writer would.
    fn forged(bytes: &[u8], at: usize, with: &[u8]) -> Vec<u8> {
        let mut b = bytes[..bytes.len() - 4].to_vec();
        b[at..at + with.len()].copy_from_slice(with);
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn checksummed_nonsense_is_refused_by_name() {
        let bytes = three().to_bytes();
        let e = Catalog::from_bytes(&forged(&bytes, 8, &2u32.to_le_bytes())).unwrap_err();
        assert!(e.contains("version 2"), "{e}");
        // Node count (offset 12) claiming more nodes than bytes.
        let e = Catalog::from_bytes(&forged(&bytes, 12, &u32::MAX.to_le_bytes())).unwrap_err();
        assert!(e.contains("node count is 4294967295 at offset 12"), "{e}");
        // Nodes "a" and "b" take 5 bytes each from offset 16; the dserver count follows at 26,
        // then dserver 0 (node index, address length, 9 bytes of address, capacity) and 1.
        let e = Catalog::from_bytes(&forged(&bytes, 30, &7u32.to_le_bytes())).unwrap_err();
        assert!(e.contains("dserver 0 is on node 7, of 2 nodes"), "{e}");
        let e = Catalog::from_bytes(&forged(&bytes, 63, b"tcp://a:1")).unwrap_err();
        assert!(e.contains("dserver 1 has the address \"tcp://a:1\" of an earlier one"), "{e}");
        let e = Catalog::from_bytes(&forged(&bytes, 25, b"a")).unwrap_err();
        assert!(e.contains("node 1 is named \"a\""), "{e}");
        // A box whose dserver does not exist.
        let mut c = three();
        let k = key(1, 0, &[0], &[3]);
        c.place(&k, 0, 8, vec![]).unwrap();
        c.commit(&k, 0).unwrap();
        let bytes = c.to_bytes();
        let at = bytes.len() - 4 - 4 - 8 - 4;
        let e = Catalog::from_bytes(&forged(&bytes, at, &3u32.to_le_bytes())).unwrap_err();
        assert!(e.contains("box [0]..=[3] of timestep 1 level 0 is on dserver 3, of 3"), "{e}");
        let e = Catalog::from_bytes(&forged(&bytes, at - 16, &5i64.to_le_bytes())).unwrap_err();
        assert!(e.contains("is empty"), "{e}");
        // Timesteps out of order: populated() holds 5 then 9; the last one's number sits
        // before its ndim, ratio flag, level count, box count, one 2-D box and its record.
        let bytes = populated().to_bytes();
        let at = bytes.len() - 4 - (8 + 1 + 1 + 4 + 8 + 32 + RECORD_BYTES);
        assert_eq!(bytes[at..at + 8], 9u64.to_le_bytes());
        let e = Catalog::from_bytes(&forged(&bytes, at, &5u64.to_le_bytes())).unwrap_err();
        assert!(e.contains("timestep 5 follows timestep 5"), "{e}");
    }
}
