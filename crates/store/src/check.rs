//! `amrzip check`: verifies every committed snapshot of a store and finds the work writers left
//! unfinished; with repair, finishes it (a snapshot file written whole whose writer died before
//! giving it its name; a version-1 snapshot folder renamed into place but never listed) or
//! removes it. Committed snapshots are never changed or removed, even damaged ones: the report
//! names what is wrong with them.

use crate::array::group_attributes;
use crate::error::Result;
use crate::layout::{self, ROOT, WRITING_PREFIX};
use crate::metadata::SnapshotMeta;
use crate::reader::Snapshot;
use crate::store::{interrupted, sync_dir, Holds, SnapshotEntry, SnapshotKind, Store};
use serde_json::{json, Value};
use std::fs;
use std::path::Path;

/// What was found, as JSON: `{"store", "store_version", "snapshots": [{"name", "path", "ok",
/// "chunks" | "problem"}], "interrupted": [{"path", "snapshot", "in_progress", "action"}],
/// "unlisted": [folder names], "ok"}`.
pub fn check(path: &Path, repair: bool) -> Result<Value> {
    let mut store = Store::open(path)?;
    let mut actions = Vec::new();
    for t in interrupted(path)? {
        let name = t.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let action = if t.in_progress {
            Value::Null
        } else if !repair {
            json!(if t.path.is_dir() || name.starts_with('.') && !name.starts_with(WRITING_PREFIX) { "remove" } else { "finish or remove" })
        } else {
            json!(finish_or_remove(&store, &t.path, t.snapshot.as_deref())?)
        };
        actions.push(json!({"path": t.path.to_string_lossy(), "snapshot": t.snapshot, "in_progress": t.in_progress, "action": action}));
    }
    let mut unlisted = Vec::new();
    if store.version() == layout::FOLDER_STORE_VERSION {
        for name in unlisted_folders(&store)? {
            if repair {
                store.list_folder(&name)?;
            }
            unlisted.push(json!({"name": name, "action": if repair { "listed" } else { "list" }}));
        }
    }
    let mut snapshots = Vec::new();
    let mut ok = true;
    for entry in store.snapshots()? {
        let verified = match entry.holds() {
            Holds::Variables => crate::variables::VariablesFile::open(&entry.path).and_then(|f| f.verify()),
            Holds::Multires => crate::multires::MultiresSnapshot::open(&entry).and_then(|s| s.verify()),
            Holds::Amr => Snapshot::open(&entry).and_then(|s| s.verify()),
        };
        let report = match verified {
            Ok(chunks) => json!({"name": entry.name, "path": entry.path.to_string_lossy(), "ok": true, "chunks": chunks}),
            Err(e) => {
                ok = false;
                json!({"name": entry.name, "path": entry.path.to_string_lossy(), "ok": false, "problem": e.message})
            }
        };
        snapshots.push(report);
    }
    let pending = actions.iter().any(|a| a["action"].is_string() && !repair) || (!unlisted.is_empty() && !repair);
    Ok(json!({
        "store": path.to_string_lossy(),
        "store_version": store.version(),
        "snapshots": snapshots,
        "interrupted": actions,
        "unlisted": unlisted,
        "ok": ok && !pending,
    }))
}

/// A temporary file or folder no writer holds: a snapshot file written whole gets its name (if
/// still free), anything else is removed. Returns what was done.
fn finish_or_remove(store: &Store, path: &Path, snapshot: Option<&str>) -> Result<String> {
    // Another repair running beside this one may have removed it first.
    let gone = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(crate::Error::io(path, e)),
        _ => Ok(()),
    };
    if path.is_dir() {
        gone(fs::remove_dir_all(path))?;
        return Ok("removed".into());
    }
    if let Some(name) = snapshot {
        let whole = Snapshot::open(&SnapshotEntry { name: name.to_string(), kind: SnapshotKind::File, path: path.to_path_buf() })
            .and_then(|s| s.verify());
        if whole.is_ok() && !store.exists(name) {
            let target = store.path().join(layout::snapshot_file(name));
            if fs::hard_link(path, &target).is_ok() {
                sync_dir(store.path())?;
                gone(fs::remove_file(path))?;
                return Ok(format!("finished as snapshot {name}"));
            }
        }
    }
    gone(fs::remove_file(path))?;
    Ok("removed".into())
}

/// Folders of a version-1 store holding a valid snapshot that its root does not list.
fn unlisted_folders(store: &Store) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in fs::read_dir(store.path()).map_err(|e| crate::Error::io(store.path(), e))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if layout::check_snapshot_name(&name).is_err() || store.folders().contains(&name) || !e.path().is_dir() {
            continue;
        }
        let doc = e.path().join(ROOT);
        let valid = fs::read(&doc)
            .ok()
            .and_then(|b| group_attributes(&b, &name).ok())
            .is_some_and(|m| SnapshotMeta::from_json(&m, &name).is_ok_and(|m| m.version < 3));
        if valid {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}
