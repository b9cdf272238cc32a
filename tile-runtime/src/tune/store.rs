//! The on-disk cache of tuning choices: one JSON file (`tune.json`) under
//! the user's cache directory ([`cache_dir`]), and shipped files a program
//! names with `TILE_TUNE_CACHE` (read only).
//!
//! Expects nothing of the launch. Guarantees: a file that is missing or
//! cannot be parsed reads as empty (never an error at a launch); a save
//! reads the file, replaces the entry with the same key, writes a
//! temporary file in the same directory and renames it over the old one,
//! so that a reader in another process sees the old file or the new one,
//! never a torn one (two processes saving at once may lose one of the two
//! entries, which is then tuned again: never a wrong one).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::key::Key;
use super::Record;

/// The format tag of the file; another tag reads as empty.
pub const FORMAT: &str = "tile-tune/1";

/// The cache file's contents.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CacheFile {
    /// [`FORMAT`].
    pub format: String,
    /// One entry per (device, kernel, hash, bucket).
    pub entries: Vec<Record>,
}

impl CacheFile {
    /// The file at `path`; empty when it is missing, unreadable, not JSON
    /// of this format (a warning on stderr then, once per path read).
    pub fn load(path: &Path) -> CacheFile {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(_) => return CacheFile::default(),
        };
        match serde_json::from_str::<CacheFile>(&text) {
            Ok(f) if f.format == FORMAT => f,
            Ok(f) => {
                eprintln!(
                    "tile: ignoring the tuning cache `{}`: its format is `{}`, not `{FORMAT}`",
                    path.display(),
                    f.format
                );
                CacheFile::default()
            }
            Err(e) => {
                eprintln!("tile: ignoring the tuning cache `{}`: {e}", path.display());
                CacheFile::default()
            }
        }
    }

    pub(crate) fn find(&self, key: &Key) -> Option<&Record> {
        self.entries.iter().find(|r| r.matches(key))
    }

    /// Replaces the entries with `record`'s key by `record`.
    pub(crate) fn insert(&mut self, record: Record) {
        let key = record.key();
        self.entries.retain(|r| !r.matches(&key));
        self.entries.push(record);
    }

    /// Writes the file atomically (temporary file + rename), creating the
    /// directory.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut file = self.clone();
        file.format = FORMAT.into();
        let text = serde_json::to_string_pretty(&file).map_err(std::io::Error::other)?;
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("tune.json");
        // Unique per process (the pid) and per write within it (threads).
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{nonce}.{n}.tmp", std::process::id()));
        let written = std::fs::write(&tmp, text + "\n").and_then(|_| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Adds `record` to the file at `path` (read, insert, atomic write).
    pub(crate) fn save_record(path: &Path, record: &Record) -> std::io::Result<()> {
        let mut file = CacheFile::load(path);
        file.insert(record.clone());
        file.write(path)
    }
}

/// The user's cache directory for tile: `$TILE_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/tile`, else `$HOME/.cache/tile`; `None` when none of
/// them is set (choices are then kept in memory only).
pub fn cache_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("TILE_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("tile")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("tile")))
}

/// The cache file in `dir`.
pub fn cache_file(dir: &Path) -> PathBuf {
    dir.join("tune.json")
}
