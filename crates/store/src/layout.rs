//! Names of the store's files and of the entries inside a snapshot (docs/format.md section 15):
//!
//! ```text
//! STORE/<snapshot>.zarr.zip              one committed snapshot: a Zarr v3 hierarchy in a zip
//! STORE/.writing-<snapshot>-<tag>.zarr.zip   a snapshot being written (locked by its writer)
//!   zarr.json                            group: the snapshot's metadata
//!   level_<L>/zarr.json                  array (field, x, y, z) of level L
//!   level_<L>/c/0/<i>/<j>/<k>            shard: every field's chunks of one region
//! ```
//!
//! A store is its folder: no document describes it, so adding a snapshot rewrites nothing.
//! Version-1 stores hold snapshot folders instead, listed in a root `zarr.json`.

use crate::error::{invalid, Result};

/// Stores of snapshot files (no root document: the version is implied).
pub const STORE_VERSION: u64 = 2;
/// Stores whose root lists snapshot folders (written before snapshots were single files).
pub const FOLDER_STORE_VERSION: u64 = 1;
/// The Zarr metadata document of a snapshot (and of a version-1 store's root).
pub const ROOT: &str = "zarr.json";
pub const SNAPSHOT_SUFFIX: &str = ".zarr.zip";
pub const WRITING_PREFIX: &str = ".writing-";
pub const CODEC_NAME: &str = "amrzip.amr";

/// Checks a snapshot name: one path component a user can type, so that no name read from
/// anywhere can reach outside the store.
pub fn check_snapshot_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.bytes().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || b"_.+-".contains(&c));
    if ok {
        Ok(())
    } else {
        Err(invalid!(
            "snapshot name {name:?} must be 1-128 characters of letters, digits, '_', '.', '+', '-', starting with a letter or digit"
        ))
    }
}

pub fn snapshot_file(name: &str) -> String {
    format!("{name}{SNAPSHOT_SUFFIX}")
}

/// The snapshot a committed file holds, from its file name.
pub fn snapshot_of_file(file_name: &str) -> Option<&str> {
    let name = file_name.strip_suffix(SNAPSHOT_SUFFIX)?;
    check_snapshot_name(name).ok().map(|_| name)
}

/// The snapshot a writer's temporary file was for (`.writing-<name>-<tag>.zarr.zip`).
pub fn snapshot_of_temp(file_name: &str) -> Option<&str> {
    let rest = file_name.strip_prefix(WRITING_PREFIX)?;
    let rest = rest.strip_suffix(SNAPSHOT_SUFFIX).unwrap_or(rest);
    let (name, _tag) = rest.rsplit_once('-')?;
    check_snapshot_name(name).ok().map(|_| name)
}

pub fn level_array(level: usize) -> String {
    format!("level_{level}")
}

/// The key of a level's shard at spatial shard coordinates `coords` (the field axis has one
/// shard, index 0).
pub fn shard_key(level: usize, coords: &[u64]) -> String {
    let mut key = format!("level_{level}/c/0");
    for c in coords {
        key.push('/');
        key.push_str(&c.to_string());
    }
    key
}

/// A field name as one folder name of version-1 stores: percent-encoded (RFC 3986) but for
/// letters, digits and `_.-~()[],+=`, and a leading `.`.
pub fn field_dir(field: &str) -> String {
    let mut out = String::new();
    for (i, b) in field.bytes().enumerate() {
        if (b.is_ascii_alphanumeric() || b"_.-~()[],+=".contains(&b)) && !(i == 0 && b == b'.') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The key of a chunk below its array in version-1 stores (Zarr's default key encoding).
pub fn folder_chunk_key(index: &[i64]) -> String {
    let parts: Vec<String> = index.iter().map(i64::to_string).collect();
    format!("c/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_one_path_component() {
        for bad in ["", "../x", "a/b", ".hidden", "-x", "a b", &"x".repeat(129), "é"] {
            assert!(check_snapshot_name(bad).is_err(), "{bad:?}");
        }
        for good in ["step_000120", "a", "run.2+b-c", &"x".repeat(128)] {
            assert!(check_snapshot_name(good).is_ok(), "{good:?}");
        }
        assert_eq!(snapshot_of_file("step_1.zarr.zip"), Some("step_1"));
        assert_eq!(snapshot_of_file("..zarr.zip"), None);
        assert_eq!(snapshot_of_temp(".writing-step_1-3fa2.zarr.zip"), Some("step_1"));
        assert_eq!(shard_key(2, &[0, 3, 1]), "level_2/c/0/0/3/1");
    }

    #[test]
    fn field_folders_match_version_1_stores() {
        assert_eq!(field_dir("Y(H2)"), "Y(H2)");
        assert_eq!(field_dir("a/b c"), "a%2Fb%20c");
        assert_eq!(field_dir(".x"), "%2Ex");
        assert_eq!(field_dir("µ"), "%C2%B5");
    }
}
