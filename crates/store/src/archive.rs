//! A snapshot file: a zip archive of stored (uncompressed) entries, as zarr-python's `ZipStore`
//! and zarrs' zip storage read them. One file per snapshot keeps a store to a handful of files
//! however many levels and fields it has (each file costs a disk block or more, which dwarfed
//! small compressed snapshots), and makes committing a snapshot one atomic link.
//!
//! Readers open the central directory once and then read byte ranges of entries directly, so a
//! region read touches only the shard headers, indexes and chunks it needs. Every whole entry
//! read is checked against the CRC-32 the archive records for it.

use crate::error::{corrupt, Error, Result};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

struct Entry {
    /// Where its local header starts, as the central directory says.
    header_start: u64,
    size: u64,
    crc32: u32,
    data_start: OnceLock<u64>,
}

/// A snapshot file opened for reading.
pub struct Archive {
    path: PathBuf,
    file: File,
    len: u64,
    entries: HashMap<String, Entry>,
    /// Bytes read from the file so far (central directory excluded).
    pub bytes_read: AtomicU64,
}

fn zip_error(path: &Path, e: zip::result::ZipError) -> Error {
    match e {
        zip::result::ZipError::Io(e) => Error::io(path, e),
        e => corrupt!("{}: not a readable zip archive ({e})", path.display()),
    }
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

impl Archive {
    pub fn open(path: &Path) -> Result<Archive> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        // Buffered: the central directory is parsed in reads of a record's few fields each.
        let zip = ZipArchive::new(BufReader::new(file.try_clone().map_err(|e| Error::io(path, e))?)).map_err(|e| zip_error(path, e))?;
        let mut entries = HashMap::with_capacity(zip.len());
        // The central directory's records only: each entry's local header is read when the entry
        // is (a snapshot has hundreds of entries, and a reader wants few of them).
        for index in 0..zip.len() {
            let e = zip.by_index_data(index).map_err(|e| zip_error(path, e))?;
            let name = e.name().map_err(|e| zip_error(path, e))?.into_owned();
            if e.compression() != CompressionMethod::Stored || e.encrypted() || e.size() != e.compressed_size() {
                return Err(corrupt!(
                    "{}: entry {name} is compressed or encrypted (snapshot entries are stored as they are)",
                    path.display()
                ));
            }
            let entry = Entry { header_start: e.header_start(), size: e.size(), crc32: e.crc32(), data_start: OnceLock::new() };
            if entries.insert(name.clone(), entry).is_some() {
                return Err(corrupt!("{}: entry {name} appears twice", path.display()));
            }
        }
        Ok(Archive { path: path.to_path_buf(), file, len, entries, bytes_read: AtomicU64::new(0) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file_len(&self) -> u64 {
        self.len
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The entry's size, or None if the archive has no such entry.
    pub fn size(&self, name: &str) -> Option<u64> {
        self.entries.get(name).map(|e| e.size)
    }

    fn entry(&self, name: &str) -> Result<&Entry> {
        self.entries.get(name).ok_or_else(|| corrupt!("{}: entry {name} missing", self.path.display()))
    }

    /// What is wrong with entry `name`, as an error.
    fn damaged(&self, name: &str, what: &str) -> Error {
        corrupt!("{}: entry {name}: {what}", self.path.display())
    }

    /// Entry `name`'s local header: the lengths of its name and extra field, after checking
    /// that a local header is where the central directory points.
    fn local_header(&self, name: &str, e: &Entry) -> Result<(u16, u16)> {
        let mut head = [0u8; 30];
        read_at(&self.file, &mut head, e.header_start).map_err(|_| self.damaged(name, "local header past the end of the file"))?;
        if head[..4] != [0x50, 0x4b, 0x03, 0x04] {
            return Err(self.damaged(name, "no local header where the central directory points"));
        }
        Ok((u16::from_le_bytes([head[26], head[27]]), u16::from_le_bytes([head[28], head[29]])))
    }

    /// Checks every entry's local header against the central directory: its signature and the
    /// same name. A name damaged in the central directory alone moves an entry (a shard) to
    /// another key, which only a reader that checks its chunks' position tags would notice.
    pub fn check_local_names(&self) -> Result<()> {
        for (name, e) in &self.entries {
            let mut local = vec![0u8; self.local_header(name, e)?.0 as usize];
            read_at(&self.file, &mut local, e.header_start + 30)
                .map_err(|_| self.damaged(name, "local header past the end of the file"))?;
            if local != name.as_bytes() {
                return Err(self.damaged(name, &format!("named {:?} in its local header", String::from_utf8_lossy(&local))));
            }
        }
        Ok(())
    }

    /// Where the entry's bytes start in the file (its local header read once).
    fn data_start(&self, name: &str, e: &Entry) -> Result<u64> {
        if let Some(&start) = e.data_start.get() {
            return Ok(start);
        }
        let (name_len, extra_len) = self.local_header(name, e)?;
        let start = e.header_start + 30 + name_len as u64 + extra_len as u64;
        if start.checked_add(e.size).is_none_or(|end| end > self.len) {
            return Err(corrupt!("{}: entry {name} runs past the end of the file", self.path.display()));
        }
        Ok(*e.data_start.get_or_init(|| start))
    }

    /// `len` bytes of entry `name` from `offset`.
    pub fn read_range(&self, name: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let e = self.entry(name)?;
        if offset.checked_add(len).is_none_or(|end| end > e.size) {
            return Err(corrupt!("{}: entry {name}: bytes {offset}..+{len} lie past its end ({} bytes)", self.path.display(), e.size));
        }
        let start = self.data_start(name, e)?;
        let mut buf = vec![0u8; usize::try_from(len).map_err(|_| corrupt!("{}: entry {name} too large", self.path.display()))?];
        read_at(&self.file, &mut buf, start + offset).map_err(|err| Error::io(&self.path, err))?;
        self.bytes_read.fetch_add(len, Ordering::Relaxed);
        Ok(buf)
    }

    /// The whole entry, checked against its CRC-32.
    pub fn read(&self, name: &str) -> Result<Vec<u8>> {
        let e = self.entry(name)?;
        let bytes = self.read_range(name, 0, e.size)?;
        if crc32fast::hash(&bytes) != e.crc32 {
            return Err(corrupt!("{}: entry {name} is damaged (CRC-32 mismatch)", self.path.display()));
        }
        Ok(bytes)
    }
}

/// Writes a snapshot file, entry after entry.
pub struct ArchiveWriter {
    zip: ZipWriter<BufWriter<File>>,
    path: PathBuf,
}

impl ArchiveWriter {
    /// Writes into `file` (already created, empty) at `path` (for messages).
    pub fn new(file: File, path: &Path) -> ArchiveWriter {
        ArchiveWriter { zip: ZipWriter::new(BufWriter::with_capacity(1 << 20, file)), path: path.to_path_buf() }
    }

    pub fn add(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Stored)
            .unix_permissions(0o644)
            .large_file(bytes.len() as u64 >= u32::MAX as u64);
        self.zip.start_file(name, options).map_err(|e| zip_error(&self.path, e))?;
        self.zip.write_all(bytes).map_err(|e| Error::io(&self.path, e))
    }

    /// Writes the central directory and flushes; returns the file, not yet synced.
    pub fn finish(self) -> Result<File> {
        let out = self.zip.finish().map_err(|e| zip_error(&self.path, e))?;
        out.into_inner().map_err(|e| Error::io(&self.path, e.into_error()))
    }
}
