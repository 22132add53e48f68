//! The store folder: the snapshots it holds, and how a snapshot is committed (docs/format.md
//! section 15.5).
//!
//! A store is a folder of snapshot files and nothing else (version-1 stores also have a root
//! document listing their snapshot folders). The committed snapshots are exactly the files
//! `<name>.zarr.zip` in the folder (and the folders a version-1 root lists). No shared document is rewritten when a snapshot
//! is added, so writers in other threads, processes, ranks or jobs cannot lose each other's
//! snapshots: a writer builds `.writing-<name>-<tag>.zarr.zip` while holding a lock on it, syncs
//! it, and hard-links it to its final name, which fails if the name is taken. A crash at any
//! instant leaves committed snapshots untouched and at most one temporary file, which
//! `amrzip check --repair` finishes (if complete) or removes once no writer holds its lock.

use crate::error::{Error, ErrorKind, Result};
use crate::layout::{self, FOLDER_STORE_VERSION, ROOT, STORE_VERSION, WRITING_PREFIX};
use serde_json::{json, Value};
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, RandomState};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// A random number for names and ids (std's hasher keys are seeded from the OS).
pub fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    RandomState::new().hash_one((std::process::id(), SystemTime::now(), COUNTER.fetch_add(1, Ordering::Relaxed)))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotKind {
    /// `<name>.zarr.zip`.
    File,
    /// A folder listed in a version-1 store's root.
    Folder,
}

#[derive(Clone, Debug)]
pub struct SnapshotEntry {
    pub name: String,
    pub kind: SnapshotKind,
    pub path: PathBuf,
}

/// What a snapshot holds, as its root document's `amrzip.kind` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// An AMR hierarchy (no kind; also what a version-1 folder or an unreadable file is taken
    /// for, whose reader then says what is wrong).
    Amr,
    /// Plain variables (`"variables"`).
    Variables,
    /// A multiresolution array (`"multires"`).
    Multires,
}

impl SnapshotEntry {
    /// The snapshot at `path`: a snapshot file, or a version-1 snapshot folder.
    pub fn at(path: &Path) -> Result<SnapshotEntry> {
        let meta = fs::symlink_metadata(path).map_err(|e| Error::io(path, e))?;
        let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (name, kind) = if meta.is_file() {
            (layout::snapshot_of_file(&file_name).unwrap_or(&file_name).to_string(), SnapshotKind::File)
        } else if meta.is_dir() {
            (file_name, SnapshotKind::Folder)
        } else {
            return Err(Error::new(ErrorKind::Corrupt, format!("{}: not a snapshot file or folder", path.display())));
        };
        Ok(SnapshotEntry { name, kind, path: path.to_path_buf() })
    }

    /// What the snapshot holds, from its root document (one open of the file).
    pub fn holds(&self) -> Holds {
        if self.kind != SnapshotKind::File {
            return Holds::Amr;
        }
        let root = || -> Option<Value> { serde_json::from_slice(&crate::archive::Archive::open(&self.path).ok()?.read(ROOT).ok()?).ok() };
        match root().as_ref().and_then(|r| r["attributes"]["amrzip"]["kind"].as_str()) {
            Some(crate::multires::KIND) => Holds::Multires,
            Some(crate::variables::KIND) => Holds::Variables,
            _ => Holds::Amr,
        }
    }
}

pub struct Store {
    path: PathBuf,
    version: u64,
    /// Version 1: the snapshot folders the root lists, oldest first.
    folders: Vec<String>,
}

/// A version-1 store's root document, listing its snapshot folders.
fn folder_root_doc(folders: &[String]) -> Value {
    json!({"zarr_format": 3, "node_type": "group", "attributes": {"amrzip": {"store_version": FOLDER_STORE_VERSION, "snapshots": folders}}})
}

/// Writes `bytes` to a new file beside `target` and syncs it; returns its path.
fn write_temp(target: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let dir = target.parent().unwrap_or(Path::new("."));
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{:016x}.tmp", random_u64()));
    let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| Error::io(&tmp, e))?;
    Ok(tmp)
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    // Directories cannot be opened for syncing everywhere (Windows); there the rename stands.
    match File::open(dir) {
        Ok(d) => d.sync_all().or_else(|e| if e.kind() == std::io::ErrorKind::PermissionDenied { Ok(()) } else { Err(e) }),
        Err(_) => Ok(()),
    }
    .map_err(|e| Error::io(dir, e))
}

/// Links `from` to the new name `to` (fails if `to` exists), falling back to a rename after a
/// check on file systems without hard links.
fn link_new(from: &Path, to: &Path) -> std::io::Result<()> {
    match fs::hard_link(from, to) {
        Ok(()) => fs::remove_file(from).or(Ok(())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(e),
        Err(_) if to.exists() => Err(std::io::ErrorKind::AlreadyExists.into()),
        Err(_) => fs::rename(from, to),
    }
}

/// Whether `path` still names the open `file`.
#[cfg(unix)]
fn still_named(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Elsewhere an open file cannot lose its name.
#[cfg(not(unix))]
fn still_named(_: &File, path: &Path) -> bool {
    path.exists()
}

/// Whether a name in the store folder is one of our temporary files (a snapshot being written,
/// or a version-1 root being rewritten by a repair).
fn is_temporary(name: &str) -> bool {
    name.starts_with(WRITING_PREFIX) || (name.starts_with(".zarr.json.") && name.ends_with(".tmp"))
}

impl Store {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// Opens the store at `path`, which must exist: a folder of snapshot files (or empty, or
    /// holding only writers' temporary files), or a version-1 store with its root document.
    pub fn open(path: &Path) -> Result<Store> {
        let not_a_store = |what: &str| Error::new(ErrorKind::NotAStore, format!("{}: {what}", path.display()));
        match fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_a_store("no such store")),
            Err(e) => return Err(Error::io(path, e)),
            Ok(m) if !m.is_dir() => return Err(not_a_store("not an amrzip store (a file, not a folder)")),
            Ok(_) => {}
        }
        let root = path.join(ROOT);
        let bytes = match fs::read(&root) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Anything but snapshots and writers' temporary files: someone else's folder.
                let foreign = fs::read_dir(path).map_err(|e| Error::io(path, e))?.filter_map(|e| e.ok()).any(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    layout::snapshot_of_file(&name).is_none() && !is_temporary(&name)
                });
                if foreign {
                    return Err(not_a_store("not an amrzip store (it holds files that are not snapshots, and no version-1 zarr.json)"));
                }
                return Ok(Store { path: path.to_path_buf(), version: STORE_VERSION, folders: Vec::new() });
            }
            Err(e) => return Err(Error::io(&root, e)),
        };
        let bad = |what: &str| Error::new(ErrorKind::NotAStore, format!("{}: {what}", root.display()));
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| bad(&format!("not readable JSON ({e})")))?;
        let meta = doc.pointer("/attributes/amrzip").ok_or_else(|| bad("not an amrzip store (no attributes.amrzip)"))?;
        let version = meta.get("store_version").and_then(Value::as_u64).ok_or_else(|| bad("no store_version"))?;
        if version != FOLDER_STORE_VERSION {
            return Err(bad(&format!(
                "store version {version}: a store of version {STORE_VERSION} has no zarr.json, version {FOLDER_STORE_VERSION} is read"
            )));
        }
        let list = meta.get("snapshots").and_then(Value::as_array).ok_or_else(|| bad("bad snapshot list"))?;
        let folders: Vec<String> =
            list.iter().map(|n| n.as_str().map(str::to_string)).collect::<Option<_>>().ok_or_else(|| bad("bad snapshot list"))?;
        for n in &folders {
            layout::check_snapshot_name(n).map_err(|e| bad(&format!("snapshot list: {}", e.message)))?;
        }
        Ok(Store { path: path.to_path_buf(), version, folders })
    }

    /// Opens the store at `path`, creating its folder if there is none. Writers creating one
    /// store at once all succeed: there is nothing to create but the folder.
    pub fn open_or_create(path: &Path) -> Result<Store> {
        if !path.exists() {
            fs::create_dir_all(path).map_err(|e| Error::io(path, e))?;
        }
        Store::open(path).map_err(|e| match e.kind {
            ErrorKind::NotAStore => Error::new(ErrorKind::Exists, format!("{} exists and is not an amrzip store", path.display())),
            _ => e,
        })
    }

    /// The committed snapshots, oldest first: a version-1 store's listed folders, then the
    /// snapshot files in the order their writers finished them (modification time, then name).
    pub fn snapshots(&self) -> Result<Vec<SnapshotEntry>> {
        let mut out: Vec<SnapshotEntry> =
            self.folders.iter().map(|n| SnapshotEntry { name: n.clone(), kind: SnapshotKind::Folder, path: self.path.join(n) }).collect();
        let mut files = Vec::new();
        for e in fs::read_dir(&self.path).map_err(|e| Error::io(&self.path, e))? {
            let e = e.map_err(|e| Error::io(&self.path, e))?;
            let file_name = e.file_name().to_string_lossy().into_owned();
            let Some(name) = layout::snapshot_of_file(&file_name) else { continue };
            // Symbolic links could lead out of the store: only regular files are snapshots.
            let meta = e.metadata().map_err(|err| Error::io(&e.path(), err))?;
            if !meta.file_type().is_file() {
                continue;
            }
            files.push((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), name.to_string(), e.path()));
        }
        files.sort();
        out.extend(files.into_iter().map(|(_, name, path)| SnapshotEntry { name, kind: SnapshotKind::File, path }));
        Ok(out)
    }

    /// Snapshot `name`, or the latest committed one.
    pub fn find(&self, name: Option<&str>) -> Result<SnapshotEntry> {
        let all = self.snapshots()?;
        let found = match name {
            None => all.last(),
            Some(n) => all.iter().rev().find(|s| s.name == n),
        };
        found.cloned().ok_or_else(|| match name {
            None => Error::new(ErrorKind::Corrupt, format!("{}: the store holds no committed snapshot", self.path.display())),
            Some(n) => {
                let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
                Error::new(ErrorKind::NotFound, format!("{}: no snapshot {n:?} (snapshots: {})", self.path.display(), names.join(", ")))
            }
        })
    }

    /// Whether snapshot `name` exists in any form, listed or not (a version-1 folder renamed
    /// into place by a writer that died before listing it counts: its name is taken).
    pub fn exists(&self, name: &str) -> bool {
        self.path.join(layout::snapshot_file(name)).exists() || self.path.join(name).exists()
    }

    /// Starts writing snapshot `name`: a locked temporary file in the store.
    pub fn begin(&self, name: &str) -> Result<PendingSnapshot> {
        layout::check_snapshot_name(name)?;
        if self.exists(name) {
            return Err(exists(&self.path, name));
        }
        // Between creating the file and locking it, a repair running beside us may take it for
        // a dead writer's: it locks it, removes it, then lets go. So the lock is waited for (a
        // checker holds it only that long), and if the file lost its name meanwhile, the start
        // is made again under another tag.
        for _ in 0..64 {
            let temp = self.path.join(format!("{WRITING_PREFIX}{name}-{:016x}{}", random_u64(), layout::SNAPSHOT_SUFFIX));
            let file = OpenOptions::new().read(true).write(true).create_new(true).open(&temp).map_err(|e| Error::io(&temp, e))?;
            file.lock().map_err(|e| Error::new(ErrorKind::Io, format!("{}: cannot lock ({e})", temp.display())))?;
            if still_named(&file, &temp) {
                return Ok(PendingSnapshot { store: self.path.clone(), name: name.to_string(), temp, file: Some(file) });
            }
        }
        Err(Error::new(
            ErrorKind::Io,
            format!("{}: cannot start snapshot {name:?}: its temporary files keep being removed", self.path.display()),
        ))
    }

    /// Lists `name` in a version-1 store's root (repairing a folder a writer renamed into
    /// place but died before listing).
    pub(crate) fn list_folder(&mut self, name: &str) -> Result<()> {
        self.folders.push(name.to_string());
        let root = self.path.join(ROOT);
        let doc = serde_json::to_vec(&folder_root_doc(&self.folders)).expect("JSON");
        let tmp = write_temp(&root, &doc)?;
        fs::rename(&tmp, &root).map_err(|e| Error::io(&root, e))?;
        sync_dir(&self.path)
    }

    pub(crate) fn folders(&self) -> &[String] {
        &self.folders
    }
}

fn exists(store: &Path, name: &str) -> Error {
    Error::new(
        ErrorKind::Exists,
        format!("{}: snapshot {name:?} already exists (snapshots are never overwritten)", store.join(name).display()),
    )
}

/// A snapshot being written: a temporary file its writer holds locked. Dropped without
/// [`PendingSnapshot::commit`], it is removed.
pub struct PendingSnapshot {
    store: PathBuf,
    name: String,
    temp: PathBuf,
    file: Option<File>,
}

impl PendingSnapshot {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// A handle on the temporary file to write through (the lock stays with this object).
    pub fn file(&self) -> Result<File> {
        self.file.as_ref().expect("open until committed").try_clone().map_err(|e| Error::io(&self.temp, e))
    }

    /// Syncs the written file and gives it its name: from then on the snapshot is committed.
    pub fn commit(mut self) -> Result<PathBuf> {
        let file = self.file.take().expect("committed once");
        file.sync_all().map_err(|e| Error::io(&self.temp, e))?;
        let target = self.store.join(layout::snapshot_file(&self.name));
        // A version-1 store's writer may have taken the name as a folder meanwhile.
        if self.store.join(&self.name).exists() {
            self.file = Some(file);
            return Err(exists(&self.store, &self.name));
        }
        match link_new(&self.temp, &target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                self.file = Some(file);
                return Err(exists(&self.store, &self.name));
            }
            Err(e) => {
                self.file = Some(file);
                return Err(Error::io(&target, e));
            }
        }
        sync_dir(&self.store)?;
        drop(file);
        Ok(target)
    }
}

impl Drop for PendingSnapshot {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// A writer's temporary file found in the store, and whether its writer still holds it.
#[derive(Clone, Debug)]
pub struct Interrupted {
    pub path: PathBuf,
    pub snapshot: Option<String>,
    pub in_progress: bool,
    /// The lock taken on a file no writer holds, kept while this lives: a writer that has just
    /// created the file waits for it, and finds the file gone if it was removed meanwhile.
    _lock: Option<Arc<File>>,
}

/// The temporary files and folders of writers in the store. A file whose lock can be taken
/// belongs to a writer that is gone; folders (version-1 writers) carry no lock.
pub fn interrupted(store: &Path) -> Result<Vec<Interrupted>> {
    let mut out = Vec::new();
    for e in fs::read_dir(store).map_err(|e| Error::io(store, e))? {
        let e = e.map_err(|e| Error::io(store, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !is_temporary(&name) {
            continue;
        }
        let path = e.path();
        let (in_progress, lock) = match File::open(&path) {
            Ok(f) if path.is_file() => match f.try_lock() {
                Ok(()) => (false, Some(Arc::new(f))),
                Err(std::fs::TryLockError::WouldBlock) => (true, None),
                Err(std::fs::TryLockError::Error(_)) => (false, None),
            },
            _ => (false, None),
        };
        out.push(Interrupted { snapshot: layout::snapshot_of_temp(&name).map(str::to_string), path, in_progress, _lock: lock });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("amrzip-store-{tag}-{:x}", random_u64()));
        let _ = fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn many_threads_create_one_store_and_commit_without_losing_any() {
        let path = tmp("concurrent");
        std::thread::scope(|s| {
            for t in 0..8 {
                let path = &path;
                s.spawn(move || {
                    for r in 0..5 {
                        let store = Store::open_or_create(path).unwrap();
                        let w = store.begin(&format!("t{t}_r{r}")).unwrap();
                        w.file().unwrap().write_all(b"data").unwrap();
                        w.commit().unwrap();
                    }
                });
            }
        });
        let store = Store::open(&path).unwrap();
        assert_eq!(store.snapshots().unwrap().len(), 40);
        assert!(interrupted(&path).unwrap().is_empty());
        // A taken name is refused at the start and at commit.
        assert_eq!(store.begin("t0_r0").err().unwrap().kind, ErrorKind::Exists);
        let a = store.begin("late").unwrap();
        let b = store.begin("late").unwrap();
        a.commit().unwrap();
        assert_eq!(b.commit().err().unwrap().kind, ErrorKind::Exists);
        assert!(interrupted(&path).unwrap().is_empty());
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn threads_creating_one_store_at_the_same_instant_all_get_it() {
        // Eight threads opening or creating each of 500 stores at once: none may fail.
        let base = tmp("create");
        let barrier = std::sync::Barrier::new(8);
        let failed = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for k in 0..500 {
                        barrier.wait();
                        // Not unwrapped here: a panicking thread would leave the others at the barrier.
                        if let Err(e) = Store::open_or_create(&base.join(k.to_string())) {
                            failed.lock().unwrap().push(e.message);
                        }
                    }
                });
            }
        });
        let failed = failed.into_inner().unwrap();
        assert!(failed.is_empty(), "{} of 4000 failed, first: {}", failed.len(), failed[0]);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_repair_beside_writers_never_takes_their_files() {
        // `check --repair` removes temporary files no writer holds: one a writer has just
        // created and not yet locked must not be lost to it (the writer would fail at commit).
        let path = tmp("repair");
        let store = Store::open_or_create(&path).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let repairs = AtomicU64::new(0);
        let failed = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        crate::check::check(&path, true).unwrap();
                        repairs.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            let writers: Vec<_> = (0..4)
                .map(|t| {
                    let (store, failed) = (&store, &failed);
                    s.spawn(move || {
                        for r in 0..250 {
                            let done = store.begin(&format!("t{t}_r{r}")).and_then(|w| {
                                w.file()?.write_all(b"data").map_err(|e| Error::io(w.temp_path(), e))?;
                                w.commit()
                            });
                            if let Err(e) = done {
                                failed.lock().unwrap().push(e.message);
                            }
                        }
                    })
                })
                .collect();
            for w in writers {
                w.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        let failed = failed.into_inner().unwrap();
        assert!(failed.is_empty(), "{} of 1000 writes failed beside {} repairs, first: {}", failed.len(), repairs.into_inner(), failed[0]);
        assert_eq!(store.snapshots().unwrap().len(), 1000);
        assert!(interrupted(&path).unwrap().is_empty());
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_folder_with_other_files_is_not_taken_over() {
        let path = tmp("foreign");
        fs::create_dir_all(&path).unwrap();
        fs::write(path.join("notes.txt"), "mine").unwrap();
        assert_eq!(Store::open_or_create(&path).err().unwrap().kind, ErrorKind::Exists);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_held_temporary_file_is_in_progress_until_dropped() {
        let path = tmp("held");
        let store = Store::open_or_create(&path).unwrap();
        let w = store.begin("x").unwrap();
        let found = interrupted(&path).unwrap();
        assert_eq!(found.len(), 1);
        assert!(found[0].in_progress);
        assert_eq!(found[0].snapshot.as_deref(), Some("x"));
        drop(w);
        assert!(interrupted(&path).unwrap().is_empty());
        fs::remove_dir_all(&path).unwrap();
    }
}
