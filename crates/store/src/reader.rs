//! Reading a snapshot back: a field of a level over any region, covered cells rebuilt from the
//! finer levels; every chunk read is checked against where it must be and what it must hold.
//!
//! A region read fetches only the chunks it touches (with the shard headers and indexes that
//! locate them) and decodes them in parallel. Decoded chunks are kept in a cache of
//! `CACHE_BYTES` per open snapshot, so reads that overlap (boxes sharing a chunk, covered cells
//! rebuilt from the finer level) decode each chunk once.

use crate::archive::Archive;
use crate::array::{apply_offset, group_attributes, FieldCodec, FieldStats, FolderArray, LevelArray};
use crate::error::{corrupt, invalid, Error, ErrorKind, Result};
use crate::geometry::LevelGeometry;
use crate::layout;
use crate::metadata::SnapshotMeta;
use crate::shard;
use crate::store::{SnapshotEntry, SnapshotKind, Store};
use amrzip_amr::boxes::for_each_cell;
use amrzip_amr::unit_blocks::scatter;
use amrzip_amr::{decode_blocks_many, IBox, SharedTables, Tiling};
use amrzip_codec::blockset::{self, Block};
use amrzip_codec::{DType, Element};
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Decoded chunks kept per open snapshot.
pub const CACHE_BYTES: usize = 256 << 20;
/// Chunks a read decodes together (see `Snapshot::decode_checked`): chunks of one unit block
/// fill the fitted walk's lanes twice.
const DECODE_BATCH: usize = 8;

/// What reads put in covered cells (those a finer level refines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Covered {
    /// The mean of the finer cells over them (for node-centred data, the fine node on them).
    Average,
    /// NaN.
    Nan,
}

/// Where a field's chunks are.
enum Place {
    /// Inner chunks of the level array's shards.
    Shards { shard: Vec<usize> },
    /// Files below a version-1 array folder.
    Files { dir: PathBuf },
}

/// One (level, field) opened for reading.
pub struct FieldArray {
    pub codec: FieldCodec,
    pub tiling: Tiling,
    pub stats: FieldStats,
    tables: Arc<SharedTables>,
    place: Place,
    /// Chunks per dimension over the level's index space.
    grid: Vec<i64>,
}

impl FieldArray {
    pub fn tables(&self) -> &[Vec<u8>] {
        self.tables.stored()
    }
}

/// A decoded chunk, as the cache keeps it.
#[derive(Clone)]
pub enum Decoded {
    F32(Arc<Vec<f32>>),
    F64(Arc<Vec<f64>>),
}

/// The element types a snapshot holds, and their place in the chunk cache.
pub trait Value: Element {
    fn wrap(v: Arc<Vec<Self>>) -> Decoded;
    fn unwrap(d: &Decoded) -> Option<Arc<Vec<Self>>>;
}

impl Value for f32 {
    fn wrap(v: Arc<Vec<f32>>) -> Decoded {
        Decoded::F32(v)
    }
    fn unwrap(d: &Decoded) -> Option<Arc<Vec<f32>>> {
        match d {
            Decoded::F32(v) => Some(v.clone()),
            Decoded::F64(_) => None,
        }
    }
}

impl Value for f64 {
    fn wrap(v: Arc<Vec<f64>>) -> Decoded {
        Decoded::F64(v)
    }
    fn unwrap(d: &Decoded) -> Option<Arc<Vec<f64>>> {
        match d {
            Decoded::F64(v) => Some(v.clone()),
            Decoded::F32(_) => None,
        }
    }
}

/// (level, field, chunk index, covered cells filled in).
type CacheKey = (usize, usize, Vec<i64>, bool);

#[derive(Default)]
struct Cache {
    map: HashMap<CacheKey, (Option<Decoded>, usize, u64)>,
    bytes: usize,
    tick: u64,
}

impl Cache {
    fn get(&mut self, key: &CacheKey) -> Option<Option<Decoded>> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|e| {
            e.2 = tick;
            e.0.clone()
        })
    }

    fn put(&mut self, key: CacheKey, value: Option<Decoded>, bytes: usize) {
        self.tick += 1;
        if let Some(old) = self.map.insert(key, (value, bytes, self.tick)) {
            self.bytes -= old.1;
        }
        self.bytes += bytes;
        while self.bytes > CACHE_BYTES && self.map.len() > 1 {
            let oldest = self.map.iter().min_by_key(|(_, e)| e.2).map(|(k, _)| k.clone()).expect("non-empty");
            let e = self.map.remove(&oldest).expect("present");
            self.bytes -= e.1;
        }
    }
}

type ShardKey = (usize, Vec<u64>);

/// A shard found in a snapshot file: where its chunks end and its index starts.
struct ShardPlace {
    name: String,
    body_end: u64,
    inner: usize,
}

enum Container {
    File(Archive),
    Folder { dir: PathBuf, bytes_read: AtomicU64 },
}

/// A snapshot opened for reading.
pub struct Snapshot {
    pub name: String,
    pub path: PathBuf,
    pub meta: SnapshotMeta,
    container: Container,
    geometry: Vec<LevelGeometry>,
    arrays: Mutex<Vec<Option<Vec<Arc<FieldArray>>>>>,
    /// Shards by (level, coordinates), None where absent.
    shards: Mutex<HashMap<ShardKey, Option<Arc<ShardPlace>>>>,
    cache: Mutex<Cache>,
    /// Threads decoding chunks: None for rayon's global pool (all cores).
    threads: Option<usize>,
}

/// `n` NaNs, or an error where memory does not suffice (a read of a huge region must fail
/// cleanly, not abort the host program).
fn nan<T: Element>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| invalid!("{n} values do not fit in memory"))?;
    v.resize(n, T::from_f64(f64::NAN));
    Ok(v)
}

/// Bytes of `n` whole chunks of `tiling` decoded into `T`s.
fn chunks_bytes<T>(tiling: &Tiling, n: usize) -> usize {
    n * tiling.chunk.iter().product::<usize>() * std::mem::size_of::<T>()
}

impl Snapshot {
    /// Opens snapshot `name` (default: the latest) of the store at `store`.
    pub fn open_in(store: &Path, name: Option<&str>) -> Result<Snapshot> {
        let store = Store::open(store)?;
        Snapshot::open(&store.find(name)?)
    }

    pub fn open(entry: &SnapshotEntry) -> Result<Snapshot> {
        let (container, meta_bytes, where_) = match entry.kind {
            SnapshotKind::File => {
                let archive = Archive::open(&entry.path)?;
                let bytes = archive.read(layout::ROOT)?;
                let where_ = format!("{}: {}", entry.path.display(), layout::ROOT);
                (Container::File(archive), bytes, where_)
            }
            SnapshotKind::Folder => {
                let file = entry.path.join(layout::ROOT);
                let bytes = std::fs::read(&file).map_err(|e| Error::io(&file, e))?;
                let c = Container::Folder { dir: entry.path.clone(), bytes_read: AtomicU64::new(bytes.len() as u64) };
                (c, bytes, file.display().to_string())
            }
        };
        let attributes = group_attributes(&meta_bytes, &where_)?;
        if attributes["kind"] == "variables" {
            return Err(invalid!(
                "{}: snapshot {:?} holds plain variables, not an AMR hierarchy (amrzip.parallel.open_variables or zarr reads it)",
                entry.path.display(),
                entry.name
            ));
        }
        if attributes["kind"] == crate::multires::KIND {
            return Err(invalid!(
                "{}: snapshot {:?} holds multiresolution (HZ) arrays, not an AMR hierarchy (amrzip.open reads it as a MultiresDataset)",
                entry.path.display(),
                entry.name
            ));
        }
        let meta = SnapshotMeta::from_json(&attributes, &where_)?;
        if (entry.kind == SnapshotKind::File) != (meta.version >= 3) {
            return Err(corrupt!("{where_}: snapshot version {} cannot be stored as a {:?}", meta.version, entry.kind));
        }
        let geometry = (0..meta.levels.len()).map(|l| LevelGeometry::of(&meta, l)).collect();
        Ok(Snapshot {
            name: entry.name.clone(),
            path: entry.path.clone(),
            arrays: Mutex::new(vec![None; meta.levels.len()]),
            meta,
            container,
            geometry,
            shards: Mutex::new(HashMap::new()),
            cache: Mutex::new(Cache::default()),
            threads: None,
        })
    }

    /// Decodes chunks on `threads` threads (None: all cores); at least 1.
    pub fn with_threads(mut self, threads: Option<usize>) -> Result<Snapshot> {
        amrzip_codec::start_threads(threads)?;
        self.threads = threads;
        Ok(self)
    }

    /// Bytes read from disk so far: metadata, shard headers and indexes, chunks.
    pub fn bytes_read(&self) -> u64 {
        match &self.container {
            Container::File(a) => a.bytes_read.load(Ordering::Relaxed),
            Container::Folder { bytes_read, .. } => bytes_read.load(Ordering::Relaxed),
        }
    }

    /// The snapshot's size on disk: its file, or the files of its folder.
    pub fn stored_bytes(&self) -> u64 {
        match &self.container {
            Container::File(a) => a.file_len(),
            Container::Folder { dir, .. } => folder_bytes(dir),
        }
    }

    fn level_meta(&self, level: usize) -> Result<&crate::metadata::LevelMeta> {
        self.meta.levels.get(level).ok_or_else(|| {
            Error::new(ErrorKind::Invalid, format!("level {level} out of range: the snapshot has {} levels", self.meta.levels.len()))
        })
    }

    fn space_shape(&self, level: usize) -> Vec<usize> {
        self.meta.index_space(level).shape()
    }

    /// The arrays of `level`, one per field, read when first needed.
    pub fn arrays(&self, level: usize) -> Result<Vec<Arc<FieldArray>>> {
        self.level_meta(level)?;
        if let Some(a) = &self.arrays.lock().unwrap_or_else(|p| p.into_inner())[level] {
            return Ok(a.clone());
        }
        let opened = self.open_arrays(level)?;
        self.arrays.lock().unwrap_or_else(|p| p.into_inner())[level] = Some(opened.clone());
        Ok(opened)
    }

    fn open_arrays(&self, level: usize) -> Result<Vec<Arc<FieldArray>>> {
        let space = self.space_shape(level);
        let origin = self.meta.levels[level].domain.lo.clone();
        let grid_of = |chunk: &[usize]| -> Vec<i64> { space.iter().zip(chunk).map(|(&n, &c)| n.div_ceil(c) as i64).collect() };
        let tiling =
            |unit: &[usize], chunk: &[usize]| Tiling::new(origin.clone(), unit.to_vec(), chunk.to_vec()).map_err(|e| corrupt!("{e}"));
        match &self.container {
            Container::File(archive) => {
                let key = format!("{}/{}", layout::level_array(level), layout::ROOT);
                let where_ = format!("{}: {key}", self.path.display());
                let bounds: Vec<f64> = self.meta.bounds.iter().map(|b| b.abs).collect();
                let level_array = LevelArray::from_zarr_json(&archive.read(&key)?, &where_, &self.meta.dtypes, &bounds, &space)?;
                let tables = Arc::new(SharedTables::new(level_array.tables.clone()));
                level_array
                    .fields
                    .iter()
                    .zip(&level_array.stats)
                    .map(|(codec, stats)| {
                        Ok(Arc::new(FieldArray {
                            tiling: tiling(&codec.unit, &level_array.chunk).map_err(|e| e.within(&where_))?,
                            codec: codec.clone(),
                            stats: stats.clone(),
                            tables: tables.clone(),
                            place: Place::Shards { shard: level_array.shard.clone() },
                            grid: grid_of(&level_array.chunk),
                        }))
                    })
                    .collect()
            }
            Container::Folder { dir, bytes_read } => self
                .meta
                .fields
                .iter()
                .zip(&self.meta.dtypes)
                .map(|(field, &dtype)| {
                    let array_dir = dir.join(layout::level_array(level)).join(layout::field_dir(field));
                    let file = array_dir.join(layout::ROOT);
                    let bytes = std::fs::read(&file).map_err(|e| Error::io(&file, e))?;
                    bytes_read.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    let where_ = file.display().to_string();
                    let a = FolderArray::from_zarr_json(&bytes, &where_, dtype, &origin, &space)?;
                    Ok(Arc::new(FieldArray {
                        tiling: tiling(&a.codec.unit, &a.chunk).map_err(|e| e.within(&where_))?,
                        tables: Arc::new(SharedTables::new(a.tables)),
                        place: Place::Files { dir: array_dir },
                        grid: grid_of(&a.chunk),
                        codec: a.codec,
                        stats: a.stats,
                    }))
                })
                .collect(),
        }
    }

    pub fn field_array(&self, level: usize, field: usize) -> Result<Arc<FieldArray>> {
        let arrays = self.arrays(level)?;
        arrays.get(field).cloned().ok_or_else(|| invalid!("field {field} out of range"))
    }

    fn describe(&self, level: usize, field: usize, index: &[i64]) -> String {
        format!("{}: level {level} field {:?} chunk {index:?}", self.path.display(), self.meta.fields[field])
    }

    /// The shard at `coords` of `level`, or None where the shard does not exist.
    fn shard(&self, archive: &Archive, level: usize, coords: &[u64], a: &FieldArray) -> Result<Option<Arc<ShardPlace>>> {
        let key = (level, coords.to_vec());
        if let Some(s) = self.shards.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(s.clone());
        }
        let name = layout::shard_key(level, coords);
        let found = match archive.size(&name) {
            None => None,
            Some(size) => {
                let Place::Shards { shard } = &a.place else { unreachable!("shards only in snapshot files") };
                let inner = self.meta.fields.len() * shard.iter().product::<usize>();
                let index_len = shard::index_len(inner) as u64;
                if size < index_len {
                    return Err(corrupt!("{}: {name}: shard of {size} bytes is shorter than its index", self.path.display()));
                }
                Some(Arc::new(ShardPlace { name, body_end: size - index_len, inner }))
            }
        };
        self.shards.lock().unwrap_or_else(|p| p.into_inner()).insert(key, found.clone());
        Ok(found)
    }

    /// The index entries of `slots` (sorted) of a shard, read in one span of its index. A read
    /// does not check the whole index's CRC (that would read all of it): each chunk says where
    /// it belongs and carries its own CRC, which catches a wrong entry.
    fn shard_entries(&self, archive: &Archive, s: &ShardPlace, slots: &[u64]) -> Result<Vec<Option<(u64, u64)>>> {
        let (Some(&first), Some(&last)) = (slots.first(), slots.last()) else { return Ok(Vec::new()) };
        let bytes = archive.read_range(&s.name, s.body_end + 16 * first, 16 * (last - first + 1))?;
        slots
            .iter()
            .map(|&k| {
                shard::entry(&bytes[16 * (k - first) as usize..][..16], s.body_end)
                    .map_err(|e| e.within(format!("{}: {}: slot {k}", self.path.display(), s.name)))
            })
            .collect()
    }

    /// A shard's whole index, checked (CRC, entries inside the shard, none overlapping).
    fn shard_index(&self, archive: &Archive, s: &ShardPlace) -> Result<Vec<Option<(u64, u64)>>> {
        let bytes = archive.read_range(&s.name, s.body_end, shard::index_len(s.inner) as u64)?;
        shard::read_index(&bytes, s.inner, s.body_end).map_err(|e| e.within(format!("{}: {}", self.path.display(), s.name)))
    }

    /// The stored bytes (block sets) of chunks `indices` of a field, None where absent.
    fn fetch(&self, level: usize, field: usize, a: &FieldArray, indices: &[Vec<i64>]) -> Result<Vec<Option<Vec<u8>>>> {
        match (&self.container, &a.place) {
            (Container::File(archive), Place::Shards { shard }) => {
                // Per shard, the slots wanted and where each goes in the output.
                let mut by_shard: BTreeMap<Vec<u64>, Vec<(u64, usize)>> = BTreeMap::new();
                for (k, idx) in indices.iter().enumerate() {
                    let coords: Vec<u64> = idx.iter().zip(shard).map(|(&i, &m)| (i as u64) / m as u64).collect();
                    let slot = idx.iter().zip(shard).fold(field as u64, |p, (&i, &m)| p * m as u64 + (i as u64) % m as u64);
                    by_shard.entry(coords).or_default().push((slot, k));
                }
                // Where each chunk lies (the shard indexes, read in one span per shard), then the
                // chunks themselves, read and checked in parallel: on the caller's pool, these
                // reads were a serial part of every multi-threaded read.
                let mut reads: Vec<(usize, Arc<ShardPlace>, u64, u64)> = Vec::new();
                for (coords, mut wanted) in by_shard {
                    let Some(place) = self.shard(archive, level, &coords, a)? else { continue };
                    wanted.sort_unstable();
                    let slots: Vec<u64> = wanted.iter().map(|&(p, _)| p).collect();
                    for ((_, k), entry) in wanted.into_iter().zip(self.shard_entries(archive, &place, &slots)?) {
                        if let Some((offset, nbytes)) = entry {
                            reads.push((k, place.clone(), offset, nbytes));
                        }
                    }
                }
                let read: Vec<(usize, Vec<u8>)> = reads
                    .into_par_iter()
                    .map(|(k, place, offset, nbytes)| {
                        let mut bytes = archive.read_range(&place.name, offset, nbytes)?;
                        let position = indices[k].iter().zip(&a.grid).fold(field as u64, |p, (&i, &g)| p * g as u64 + i as u64);
                        let set = shard::open_chunk(&bytes, position).map_err(|e| e.within(self.describe(level, field, &indices[k])))?;
                        let tag = bytes.len() - set.len();
                        bytes.drain(..tag);
                        Ok((k, bytes))
                    })
                    .collect::<Result<_>>()?;
                let mut out = vec![None; indices.len()];
                for (k, bytes) in read {
                    out[k] = Some(bytes);
                }
                Ok(out)
            }
            (Container::Folder { bytes_read, .. }, Place::Files { dir }) => indices
                .par_iter()
                .map(|idx| {
                    let file = dir.join(layout::folder_chunk_key(idx));
                    match std::fs::read(&file) {
                        Ok(b) => {
                            bytes_read.fetch_add(b.len() as u64, Ordering::Relaxed);
                            Ok(Some(b))
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                        Err(e) => Err(Error::io(&file, e)),
                    }
                })
                .collect(),
            _ => unreachable!("a field's place matches its snapshot's container"),
        }
    }

    /// What the cache holds of chunks `indices` (plain, or `filled` with covered cells), and the
    /// positions in `indices` of those it does not.
    #[allow(clippy::type_complexity)]
    fn cached<T: Value>(&self, level: usize, field: usize, indices: &[Vec<i64>], filled: bool) -> (Vec<Option<Arc<Vec<T>>>>, Vec<usize>) {
        let mut out = vec![None; indices.len()];
        let mut missing = Vec::new();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        for (k, idx) in indices.iter().enumerate() {
            match cache.get(&(level, field, idx.clone(), filled)) {
                Some(hit) => out[k] = hit.as_ref().and_then(T::unwrap),
                None => missing.push(k),
            }
        }
        (out, missing)
    }

    /// Chunks `indices` of a field decoded over their whole extent (NaN where nothing is
    /// stored), None where the chunk stores nothing. Those not cached are fetched, then decoded
    /// in parallel, each checked against the cells the boxes store there.
    fn chunks<T: Value>(&self, level: usize, field: usize, indices: &[Vec<i64>]) -> Result<Vec<Option<Arc<Vec<T>>>>> {
        let (mut out, missing) = self.cached::<T>(level, field, indices, false);
        if missing.is_empty() {
            return Ok(out);
        }
        let a = self.field_array(level, field)?;
        if a.codec.dtype != <T as Element>::DTYPE {
            return Err(invalid!("field {:?} holds {:?} values", self.meta.fields[field], a.codec.dtype));
        }
        let wanted: Vec<Vec<i64>> = missing.iter().map(|&k| indices[k].clone()).collect();
        let decode = || -> Result<Vec<Option<Vec<T>>>> {
            let blocks = self.fetch_decoded::<T>(level, field, &a, &wanted)?;
            wanted
                .par_iter()
                .zip(blocks)
                .map(|(idx, blocks)| -> Result<Option<Vec<T>>> {
                    let Some(blocks) = blocks else { return Ok(None) };
                    let cells = a.tiling.chunk_box(idx);
                    let mut values = nan::<T>(a.tiling.chunk.iter().product())?;
                    scatter(&blocks, idx, &a.tiling, &cells.lo, &cells.hi, &mut values);
                    apply_offset(&mut values, a.codec.offset);
                    Ok(Some(values))
                })
                .collect::<Result<_>>()
        };
        let decoded = amrzip_codec::run_sized_with_threads(self.threads, chunks_bytes::<T>(&a.tiling, wanted.len()), || Ok(decode()))??;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        for (k, values) in missing.into_iter().zip(decoded) {
            let values = values.map(Arc::new);
            let bytes = values.as_ref().map_or(0, |v| v.len() * std::mem::size_of::<T>());
            cache.put((level, field, indices[k].clone(), false), values.clone().map(T::wrap), bytes);
            out[k] = values;
        }
        Ok(out)
    }

    /// Whether `level` exists and `field` is one of the snapshot's, of values `T`.
    fn check_field<T: Value>(&self, field: usize, level: usize) -> Result<()> {
        self.level_meta(level)?;
        if field >= self.meta.fields.len() {
            return Err(invalid!("field {field} out of range: the snapshot has {} fields", self.meta.fields.len()));
        }
        if self.meta.dtypes[field] != <T as Element>::DTYPE {
            return Err(invalid!("field {:?} holds {:?} values", self.meta.fields[field], self.meta.dtypes[field]));
        }
        Ok(())
    }

    /// Chunks `idxs` of a field fetched and decoded (see `decode_checked`), `DECODE_BATCH` at a
    /// time, the batches in parallel.
    fn fetch_decoded<T: Value>(&self, level: usize, field: usize, a: &FieldArray, idxs: &[Vec<i64>]) -> Result<Vec<Option<Vec<Block<T>>>>> {
        let stored = self.fetch(level, field, a, idxs)?;
        let decoded = idxs
            .par_chunks(DECODE_BATCH)
            .zip(stored.par_chunks(DECODE_BATCH))
            .map(|(idxs, bytes)| self.decode_checked::<T>(level, field, a, idxs, bytes))
            .collect::<Result<Vec<_>>>()?;
        Ok(decoded.into_iter().flatten().collect())
    }

    /// Chunks `idxs` of a field (their stored bytes, None where absent) decoded into unit blocks
    /// and checked against the cells the boxes store there; None where a chunk stores none.
    /// Decoded together, so that their whole blocks share the fitted walk's lanes.
    fn decode_checked<T: Value>(
        &self,
        level: usize,
        field: usize,
        a: &FieldArray,
        idxs: &[Vec<i64>],
        bytes: &[Option<Vec<u8>>],
    ) -> Result<Vec<Option<Vec<Block<T>>>>> {
        let geometry = &self.geometry[level];
        let mut present = Vec::with_capacity(idxs.len());
        for (k, (idx, bytes)) in idxs.iter().zip(bytes).enumerate() {
            let Some(bytes) = bytes else {
                if geometry.chunk_mask(&a.tiling, idx).is_some() {
                    return Err(corrupt!("{}: missing (the boxes store cells in it)", self.describe(level, field, idx)));
                }
                continue;
            };
            let book = blockset::info(bytes).map_err(|e| Error::from(e).within(self.describe(level, field, idx)))?.codebook_index as usize;
            if !a.codec.tables.contains(&book) {
                return Err(corrupt!("{}: codes with tables {book}, not the field's (misplaced)", self.describe(level, field, idx)));
            }
            present.push((k, &idx[..], &bytes[..]));
        }
        let chunks: Vec<(&[i64], &[u8])> = present.iter().map(|&(_, idx, bytes)| (idx, bytes)).collect();
        let decoded = decode_blocks_many::<T>(&chunks, &a.tables, &a.tiling, a.codec.eb);
        let checked: Vec<(usize, Vec<Block<T>>)> = present
            .par_iter()
            .zip(decoded)
            .map(|(&(k, idx, _), blocks)| {
                let blocks = blocks.map_err(|e| Error::from(e).within(self.describe(level, field, idx)))?;
                geometry.check_blocks(&a.tiling, idx, &blocks).map_err(|e| corrupt!("{}: {e}", self.describe(level, field, idx)))?;
                Ok((k, blocks))
            })
            .collect::<Result<_>>()?;
        let mut out: Vec<Option<Vec<Block<T>>>> = (0..idxs.len()).map(|_| None).collect();
        for (k, blocks) in checked {
            out[k] = Some(blocks);
        }
        Ok(out)
    }

    /// Every box of field `field` on `level` and each finer level (`[level - first][box]`, C
    /// order), covered cells averaged down as `Covered::Average` reads them, decoded straight
    /// into the box arrays: the finest level first, each level's chunks in one parallel batch,
    /// then its boxes in parallel, their covered cells from the finer boxes just built. What
    /// reading whole levels needs: no chunk passes through the cache or is decoded twice.
    pub fn read_boxes<T: Value>(&self, field: usize, level: usize) -> Result<Vec<Vec<Vec<T>>>> {
        self.check_field::<T>(field, level)?;
        let mut levels: Vec<Vec<Vec<T>>> = Vec::new();
        for l in (level..self.meta.levels.len()).rev() {
            let boxes = self.level_boxes(field, l, levels.last().map(Vec::as_slice))?;
            levels.push(boxes);
        }
        levels.reverse();
        Ok(levels)
    }

    /// The boxes of `level` (see `read_boxes`); `finer`: the next level's, covered cells rebuilt.
    fn level_boxes<T: Value>(&self, field: usize, level: usize, finer: Option<&[Vec<T>]>) -> Result<Vec<Vec<T>>> {
        let a = self.field_array(level, field)?;
        let lev = &self.meta.levels[level];
        let indices = self.box_chunks(level, &a);
        let at: HashMap<&[i64], usize> = indices.iter().enumerate().map(|(k, idx)| (&idx[..], k)).collect();
        let node = &self.meta.node;
        let work = || -> Result<Vec<Vec<T>>> {
            let blocks = self.fetch_decoded::<T>(level, field, &a, &indices)?;
            lev.boxes
                .par_iter()
                .map(|b| -> Result<Vec<T>> {
                    let mut values = nan::<T>(b.cells().expect("boxes were validated"))?;
                    for idx in self.chunk_indices(&a, b) {
                        if let Some(chunk) = &blocks[at[&idx[..]]] {
                            scatter(chunk, &idx, &a.tiling, &b.lo, &b.hi, &mut values);
                        }
                    }
                    apply_offset(&mut values, a.codec.offset);
                    let (Some(finer), Some(fine_level)) = (finer, self.geometry.get(level + 1)) else { return Ok(values) };
                    for piece in self.geometry[level].coverage.pieces(b) {
                        let region = piece.refine(&lev.ref_ratio, node);
                        let meeting = fine_level.boxes.meeting(&region);
                        if let [f] = meeting[..] {
                            let fine_box = &fine_level.boxes.boxes()[f];
                            if node.iter().all(|&n| !n) && fine_box.contains(&region) {
                                // One fine box holds the piece's fine cells (AMReX's coarsenable
                                // boxes): averaged straight into the box.
                                restrict_into(&finer[f], fine_box, &piece, &lev.ref_ratio, &mut values, b);
                                continue;
                            }
                        }
                        // The fine cells over the piece, from every fine box holding some (NaN
                        // elsewhere), as a region read of the finer level gives them.
                        let mut fine = nan::<T>(region.cells().expect("inside the finer level"))?;
                        for f in meeting {
                            let fine_box = &fine_level.boxes.boxes()[f];
                            let part = fine_box.intersect(&region).expect("meeting boxes intersect");
                            copy_box(&finer[f], fine_box, &mut fine, &region, &part);
                        }
                        paste(&mut values, b, &restrict(&fine, &region, &lev.ref_ratio, node), &piece);
                    }
                    Ok(values)
                })
                .collect()
        };
        amrzip_codec::run_sized_with_threads(self.threads, chunks_bytes::<T>(&a.tiling, indices.len()), || Ok(work()))?
    }

    /// The chunks of a field that `level`'s boxes touch, each once, in the order the boxes first
    /// touch them.
    fn box_chunks(&self, level: usize, a: &FieldArray) -> Vec<Vec<i64>> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for b in &self.meta.levels[level].boxes {
            out.extend(self.chunk_indices(a, b).into_iter().filter(|idx| seen.insert(idx.clone())));
        }
        out
    }

    /// Indices of a field's chunks that `region` touches, within the level's index space.
    fn chunk_indices(&self, a: &FieldArray, region: &IBox) -> Vec<Vec<i64>> {
        let lo: Vec<i64> =
            (0..region.ndim()).map(|d| ((region.lo[d] - a.tiling.origin[d]).div_euclid(a.tiling.chunk[d] as i64)).max(0)).collect();
        let hi: Vec<i64> = (0..region.ndim())
            .map(|d| ((region.hi[d] - a.tiling.origin[d]).div_euclid(a.tiling.chunk[d] as i64)).min(a.grid[d] - 1))
            .collect();
        let mut out = Vec::new();
        for_each_cell(&IBox::new(lo, hi), |c| out.push(c.to_vec()));
        out
    }

    /// Like `chunks`, with covered cells rebuilt from the finer level (NaN chunks for those that
    /// store nothing but hold covered cells); cached, so each fine region is averaged down once
    /// however many coarse reads need it.
    fn filled<T: Value>(&self, level: usize, field: usize, indices: &[Vec<i64>]) -> Result<Vec<Option<Arc<Vec<T>>>>> {
        let (mut out, missing) = self.cached::<T>(level, field, indices, true);
        if missing.is_empty() {
            return Ok(out);
        }
        let a = self.field_array(level, field)?;
        let wanted: Vec<Vec<i64>> = missing.iter().map(|&k| indices[k].clone()).collect();
        let plain = self.chunks::<T>(level, field, &wanted)?;
        let lev = &self.meta.levels[level];
        let space = self.meta.index_space(level);
        for ((k, idx), data) in missing.into_iter().zip(&wanted).zip(plain) {
            let region = a.tiling.chunk_box(idx);
            let pieces = region.intersect(&space).map(|r| self.geometry[level].coverage.pieces(&r)).unwrap_or_default();
            let data = if pieces.is_empty() {
                data
            } else {
                let mut values = match data {
                    Some(d) => d.as_ref().clone(),
                    None => nan::<T>(a.tiling.chunk.iter().product())?,
                };
                for piece in &pieces {
                    let fine =
                        self.read_into::<T>(field, level + 1, &piece.refine(&lev.ref_ratio, &self.meta.node), Covered::Average, true)?;
                    paste(
                        &mut values,
                        &region,
                        &restrict(&fine, &piece.refine(&lev.ref_ratio, &self.meta.node), &lev.ref_ratio, &self.meta.node),
                        piece,
                    );
                }
                Some(Arc::new(values))
            };
            let bytes = data.as_ref().map_or(0, |v| v.len() * std::mem::size_of::<T>());
            self.cache.lock().unwrap_or_else(|p| p.into_inner()).put((level, field, idx.clone(), true), data.clone().map(T::wrap), bytes);
            out[k] = data;
        }
        Ok(out)
    }

    /// Field `field` of `level` over `region` (inclusive, the level's index space), C order
    /// indexed [i, j, k]. Cells outside every box are NaN; covered cells as `covered` says.
    /// With `whole_chunks` (callers that will read everything), covered cells come from chunks
    /// filled whole and cached, so no fine cell is averaged down twice; otherwise only the
    /// region's covered cells are rebuilt, which reads the least.
    pub fn read<T: Value>(&self, field: usize, level: usize, region: &IBox, covered: Covered, whole_chunks: bool) -> Result<Vec<T>> {
        self.check_field::<T>(field, level)?;
        if region.ndim() != self.meta.dim || region.is_empty() {
            return Err(invalid!("region {:?}..{:?} is not a non-empty {}-dimensional box", region.lo, region.hi, self.meta.dim));
        }
        if region.cells().is_none_or(|n| n > isize::MAX as usize / 8) || region.lo.iter().chain(&region.hi).any(|v| v.abs() > 1 << 40) {
            return Err(invalid!("region {:?}..{:?} is too large", region.lo, region.hi));
        }
        self.read_into(field, level, region, covered, whole_chunks)
    }

    fn read_into<T: Value>(&self, field: usize, level: usize, region: &IBox, covered: Covered, whole_chunks: bool) -> Result<Vec<T>> {
        let a = self.field_array(level, field)?;
        let mut out = nan::<T>(region.cells().expect("checked"))?;
        let rebuild = covered == Covered::Average && level + 1 < self.meta.levels.len();
        let indices = self.chunk_indices(&a, region);
        let chunks =
            if rebuild && whole_chunks { self.filled::<T>(level, field, &indices)? } else { self.chunks::<T>(level, field, &indices)? };
        for (idx, data) in indices.iter().zip(chunks) {
            if let Some(data) = data {
                let chunk = a.tiling.chunk_box(idx);
                if let Some(piece) = chunk.intersect(region) {
                    copy_box(&data, &chunk, &mut out, region, &piece);
                }
            }
        }
        if rebuild && !whole_chunks {
            let lev = &self.meta.levels[level];
            for piece in self.geometry[level].coverage.pieces(region) {
                let fine_box = piece.refine(&lev.ref_ratio, &self.meta.node);
                let fine = self.read_into::<T>(field, level + 1, &fine_box, covered, whole_chunks)?;
                paste(&mut out, region, &restrict(&fine, &fine_box, &lev.ref_ratio, &self.meta.node), &piece);
            }
        }
        Ok(out)
    }

    /// The chunks of a field where the boxes store cells.
    fn expected_chunks(&self, level: usize, a: &FieldArray) -> Vec<Vec<i64>> {
        let mut candidates = std::collections::BTreeSet::new();
        for b in &self.meta.levels[level].boxes {
            candidates.extend(self.chunk_indices(a, b));
        }
        candidates.into_iter().filter(|idx| self.geometry[level].chunk_mask(&a.tiling, idx).is_some()).collect()
    }

    /// How many chunks of field `field` of `level` the snapshot holds.
    fn stored_chunks(&self, level: usize, field: usize, a: &FieldArray) -> Result<usize> {
        match (&self.container, &a.place) {
            (Container::File(archive), Place::Shards { shard }) => {
                let prefix = format!("{}/c/", layout::level_array(level));
                let per: usize = shard.iter().product();
                let mut count = 0;
                for name in archive.names().filter(|n| n.starts_with(&prefix)) {
                    let coords: Option<Vec<u64>> = name[prefix.len()..].split('/').map(|c| c.parse().ok()).collect();
                    let coords = coords.filter(|c| c.len() == self.meta.dim + 1 && c[0] == 0).map(|c| c[1..].to_vec());
                    let Some(coords) = coords else { return Err(corrupt!("{}: unexpected entry {name}", self.path.display())) };
                    if let Some(place) = self.shard(archive, level, &coords, a)? {
                        count += self.shard_index(archive, &place)?[field * per..(field + 1) * per].iter().flatten().count();
                    }
                }
                Ok(count)
            }
            (Container::Folder { .. }, Place::Files { dir }) => {
                fn files(dir: &Path) -> usize {
                    std::fs::read_dir(dir)
                        .map_or(0, |entries| entries.flatten().map(|e| if e.path().is_dir() { files(&e.path()) } else { 1 }).sum())
                }
                Ok(files(&dir.join("c")))
            }
            _ => unreachable!("a field's place matches its snapshot's container"),
        }
    }

    /// Reads and checks everything the snapshot holds: every entry against its checksum, every
    /// level's metadata, and every chunk, which must exist exactly where the boxes store cells,
    /// say it is where it is found, and decode to the cells the boxes store. Returns how many
    /// chunks were checked; the first problem is the error.
    pub fn verify(&self) -> Result<u64> {
        if let Container::File(archive) = &self.container {
            for name in archive.names() {
                archive.read(name)?;
            }
            let levels: Vec<String> = (0..self.meta.levels.len()).map(|l| format!("{}/{}", layout::level_array(l), layout::ROOT)).collect();
            for name in archive.names() {
                let known = name == layout::ROOT
                    || levels.iter().any(|l| l == name)
                    || (0..self.meta.levels.len()).any(|l| name.starts_with(&format!("{}/c/", layout::level_array(l))));
                if !known {
                    return Err(corrupt!("{}: unexpected entry {name}", self.path.display()));
                }
            }
        }
        let mut checked = 0u64;
        for level in 0..self.meta.levels.len() {
            for (field, a) in self.arrays(level)?.iter().enumerate() {
                let expected = self.expected_chunks(level, a);
                // In batches, so that a large level is never held decoded whole.
                for batch in expected.chunks(64) {
                    match a.codec.dtype {
                        DType::F32 => self.chunks::<f32>(level, field, batch).map(|_| ())?,
                        DType::F64 => self.chunks::<f64>(level, field, batch).map(|_| ())?,
                    }
                }
                let stored = self.stored_chunks(level, field, a)?;
                if stored != expected.len() {
                    return Err(corrupt!(
                        "{}: level {level} field {:?} holds {stored} chunks where the boxes store cells in {}",
                        self.path.display(),
                        self.meta.fields[field],
                        expected.len()
                    ));
                }
                checked += expected.len() as u64;
            }
        }
        Ok(checked)
    }

    /// Decodes the chunks of `level`'s boxes (and, with `finer`, those of the finer levels,
    /// which rebuild covered cells) in one parallel batch per level, so that reading the boxes
    /// one by one afterwards decodes nothing. Levels whose chunks would not fit in half the
    /// cache are left to be read as asked.
    pub fn prefetch<T: Value>(&self, field: usize, level: usize, finer: bool) -> Result<()> {
        let mut budget = CACHE_BYTES / 2;
        let last = if finer { self.meta.levels.len() } else { level + 1 };
        for l in level..last {
            let a = self.field_array(l, field)?;
            let indices = self.box_chunks(l, &a);
            let size = chunks_bytes::<T>(&a.tiling, indices.len());
            if size > budget {
                return Ok(());
            }
            budget -= size;
            self.chunks::<T>(l, field, &indices)?;
        }
        Ok(())
    }

    /// A uniform array over `level`'s index space: coarser levels upsampled (piecewise
    /// constant; for node-centred data each coarse node also fills the fine nodes up to the
    /// next one) where no finer data exists, finer levels averaged down.
    pub fn to_uniform<T: Value>(&self, field: usize, level: usize) -> Result<Vec<T>> {
        self.level_meta(level)?;
        let top_space = self.meta.index_space(level);
        let top_lo = self.meta.levels[level].domain.lo.clone();
        let n = top_space
            .cells()
            .filter(|&n| n <= isize::MAX as usize / 8)
            .ok_or_else(|| invalid!("level {level} is too large for one array"))?;
        let mut out = nan::<T>(n)?;
        let node = &self.meta.node;
        for l in 0..=level {
            let mut ratio = vec![1i64; self.meta.dim];
            for k in l..level {
                for (r, q) in ratio.iter_mut().zip(&self.meta.levels[k].ref_ratio) {
                    *r *= q;
                }
            }
            // Finer levels paint over coarse data afterwards, so covered coarse values are not
            // needed, except at nodes: the last covered node also fills the fine nodes past it.
            let covered = if l == level || node.iter().any(|&n| n) { Covered::Average } else { Covered::Nan };
            self.prefetch::<T>(field, l, covered == Covered::Average)?;
            for b in &self.meta.levels[l].boxes {
                let data = self.read_into::<T>(field, l, b, covered, true)?;
                let shape = b.shape();
                // A coarse node box of n nodes spans (n - 1) r + 1 fine nodes.
                let fine_shape: Vec<usize> =
                    (0..shape.len()).map(|d| shape[d] * ratio[d] as usize - (ratio[d] as usize - 1) * node[d] as usize).collect();
                let lo: Vec<i64> = (0..shape.len()).map(|d| b.lo[d] * ratio[d] - top_lo[d]).collect();
                let dest = IBox::new(lo.clone(), lo.iter().zip(&fine_shape).map(|(&l, &s)| l + s as i64 - 1).collect());
                let space0 = IBox::new(vec![0; shape.len()], top_space.shape().iter().map(|&s| s as i64 - 1).collect());
                let Some(dest) = dest.intersect(&space0) else { continue };
                let src_box = IBox::new(vec![0; shape.len()], shape.iter().map(|&s| s as i64 - 1).collect());
                let last = shape.len() - 1;
                let mut starts = dest.clone();
                starts.hi[last] = dest.lo[last];
                let mut src = vec![0i64; shape.len()];
                for_each_cell(&starts, |cell| {
                    for d in 0..last {
                        src[d] = (cell[d] - lo[d]) / ratio[d];
                    }
                    src[last] = 0;
                    let (row_src, row_dst) = (src_box.offset_c(&src), space0.offset_c(cell));
                    for (k, x) in (dest.lo[last]..=dest.hi[last]).enumerate() {
                        let v = data[row_src + ((x - lo[last]) / ratio[last]) as usize];
                        if !v.to_f64().is_nan() {
                            out[row_dst + k] = v;
                        }
                    }
                });
            }
        }
        Ok(out)
    }
}

/// Total size of the files below `dir`.
fn folder_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => total += folder_bytes(&e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

/// Copies `piece` of `src` (an array over `src_box`) into `dst` (an array over `dst_box`).
fn copy_box<T: Copy>(src: &[T], src_box: &IBox, dst: &mut [T], dst_box: &IBox, piece: &IBox) {
    let nd = piece.ndim();
    let row = (piece.hi[nd - 1] - piece.lo[nd - 1] + 1) as usize;
    let mut starts = piece.clone();
    starts.hi[nd - 1] = piece.lo[nd - 1];
    for_each_cell(&starts, |cell| {
        let (s, d) = (src_box.offset_c(cell), dst_box.offset_c(cell));
        dst[d..d + row].copy_from_slice(&src[s..s + row]);
    });
}

/// Pastes `coarse` (an array over `piece`) into `dst` (an array over `dst_box`).
fn paste<T: Copy>(dst: &mut [T], dst_box: &IBox, coarse: &[T], piece: &IBox) {
    copy_box(coarse, piece, dst, dst_box, piece);
}

/// `restrict` of the fine cells over the cell-centred coarse box `piece` (refined by `ratio`,
/// inside `fine_box`, over which `fine` lies) written into `dst` (over `dst_box`, which holds
/// `piece`), without gathering them first: each coarse cell's fine rows along the last
/// dimension summed on their own and added in, in C order, as `restrict` sums them.
fn restrict_into<T: Element>(fine: &[T], fine_box: &IBox, piece: &IBox, ratio: &[i64], dst: &mut [T], dst_box: &IBox) {
    let nd = piece.ndim();
    let last = nd - 1;
    let count: f64 = ratio.iter().map(|&r| r as f64).product();
    let (r_last, width) = (ratio[last] as usize, (piece.hi[last] - piece.lo[last] + 1) as usize);
    let fine_stride = amrzip_codec::strides(&fine_box.shape());
    // Where a coarse cell's fine rows start, from its first fine cell, in C order.
    let mut fine_rows = Vec::new();
    amrzip_codec::for_each_index(&ratio[..last].iter().map(|&r| r as usize).collect::<Vec<_>>(), |k| {
        fine_rows.push(k.iter().zip(&fine_stride).map(|(&i, &s)| i * s).sum::<usize>())
    });
    let dst_stride = amrzip_codec::strides(&dst_box.shape());
    let mut sums = vec![0.0f64; width];
    // Each row of coarse cells along the last dimension: its first cell's offsets in `fine`
    // (of its first fine cell) and in `dst`, as sums of strides (this runs on every covered row).
    amrzip_codec::for_each_index(&piece.shape()[..last], |k| {
        sums.fill(0.0);
        let (mut start, mut at) = (0, 0);
        for d in 0..nd {
            let coarse = piece.lo[d] + k.get(d).map_or(0, |&i| i as i64);
            start += (coarse * ratio[d] - fine_box.lo[d]) as usize * fine_stride[d];
            at += (coarse - dst_box.lo[d]) as usize * dst_stride[d];
        }
        // The fine rows of this row of coarse cells, in C order.
        for &row in &fine_rows {
            let run = &fine[start + row..start + row + width * r_last];
            for (sum, cells) in sums.iter_mut().zip(run.chunks_exact(r_last)) {
                *sum += cells.iter().fold(0.0, |s, x| s + x.to_f64());
            }
        }
        for (o, &s) in dst[at..at + width].iter_mut().zip(&sums) {
            *o = T::from_f64(s / count);
        }
    });
}

/// Coarse values from the fine ones over them (`fine` over `fine_box`): cells average their
/// fine cells (summed in float64), nodes take the fine node they coincide with (AMReX's nodal
/// average-down injects too).
fn restrict<T: Element>(fine: &[T], fine_box: &IBox, ratio: &[i64], node: &[bool]) -> Vec<T> {
    let nd = fine_box.ndim();
    let coarse = IBox::new(
        (0..nd).map(|d| fine_box.lo[d].div_euclid(ratio[d])).collect(),
        (0..nd)
            .map(|d| if node[d] { fine_box.hi[d].div_euclid(ratio[d]) } else { (fine_box.hi[d] + 1).div_euclid(ratio[d]) - 1 })
            .collect(),
    );
    let count: f64 = (0..nd).map(|d| if node[d] { 1.0 } else { ratio[d] as f64 }).product();
    let mut sums = vec![0.0f64; coarse.cells().unwrap_or(0)];
    let (last, r_last) = (nd - 1, ratio[nd - 1]);
    let mut starts = fine_box.clone();
    starts.hi[last] = fine_box.lo[last];
    let mut at = vec![0i64; nd];
    for_each_cell(&starts, |cell| {
        // Along node dimensions only the fine nodes on coarse ones count.
        if (0..last).any(|d| node[d] && cell[d].rem_euclid(ratio[d]) != 0) {
            return;
        }
        for d in 0..last {
            at[d] = cell[d].div_euclid(ratio[d]);
        }
        at[last] = coarse.lo[last];
        let base = coarse.offset_c(&at) as i64 - coarse.lo[last];
        let src = fine_box.offset_c(cell) as i64 - fine_box.lo[last];
        // Each coarse cell's fine cells along the last dimension are summed on their own, then
        // added in, as numpy's mean of the reshaped blocks does: version-1 stores read the same
        // to the bit as before.
        for c in coarse.lo[last]..=coarse.hi[last] {
            let run: f64 = if node[last] {
                fine[(src + c * r_last) as usize].to_f64()
            } else {
                (c * r_last..(c + 1) * r_last).fold(0.0, |s, x| s + fine[(src + x) as usize].to_f64())
            };
            sums[(base + c) as usize] += run;
        }
    });
    sums.into_iter().map(|s| T::from_f64(s / count)).collect()
}
