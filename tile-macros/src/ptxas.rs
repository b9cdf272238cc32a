//! Assembling a variant's PTX with `TILE_PTXAS` (`ptxas -arch=<arch> -v`),
//! optionally through a content-addressed cache (`TILE_PTXAS_CACHE`).
//!
//! The same kernel is expanded many times in one build: by every test and
//! example that includes a kernel file, and again by `cargo clippy`,
//! `cargo doc` and `cargo test` over one tree (CI runs all three). With
//! `TILE_PTXAS_CACHE=<dir>`, a variant whose exact PTX was assembled before
//! by the same `ptxas` for the same arch reuses that cubin and report.
//!
//! Guarantees: a cache hit returns what this `ptxas` made of this exact
//! text (the entry stores the whole key — the `ptxas` path, its size and
//! modification time, the arch and the PTX — and a hit compares it byte for
//! byte, so a hash collision is a miss, never a wrong cubin); a failed
//! assembly is never cached; entries are written to temporary names and
//! renamed into place, the key last, so concurrent builds sharing the
//! folder see whole entries or none; a cache that cannot be read or written
//! only costs the time of running `ptxas`.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

/// What `ptxas` made of one variant: its `-v` report and the cubin.
#[derive(Debug)]
pub(crate) struct Assembled {
    pub report: String,
    pub cubin: Vec<u8>,
}

/// Assembles `ptx` for `arch`, through the cache folder `cache` when given
/// (see the module doc).
pub(crate) fn assemble(
    ptxas: &str,
    arch: &str,
    kernel: &str,
    ptx: &str,
    cache: Option<&Path>,
) -> Result<Assembled, String> {
    let entry = cache.and_then(|dir| Entry::new(dir, ptxas, arch, ptx));
    if let Some(hit) = entry.as_ref().and_then(Entry::read) {
        return Ok(hit);
    }
    let assembled = run_ptxas(ptxas, arch, kernel, ptx)?;
    if let Some(entry) = &entry {
        entry.write(&assembled);
    }
    Ok(assembled)
}

/// One cache entry: its files' common stem and the full key they answer.
struct Entry {
    stem: PathBuf,
    key: String,
}

impl Entry {
    /// The entry for this `ptxas` (identified by its path, size and
    /// modification time), arch and PTX; `None` where `ptxas` cannot be
    /// identified (then nothing is cached).
    fn new(dir: &Path, ptxas: &str, arch: &str, ptx: &str) -> Option<Entry> {
        let meta = std::fs::metadata(ptxas).ok()?;
        let modified = meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
        let key = format!("{ptxas}\n{}\n{modified}\n{arch}\n{ptx}", meta.len());
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        Some(Entry { stem: dir.join(format!("{arch}-{:016x}", h.finish())), key })
    }

    fn path(&self, ext: &str) -> PathBuf {
        self.stem.with_extension(ext)
    }

    /// The stored result, if the entry exists and its key is this one.
    fn read(&self) -> Option<Assembled> {
        if std::fs::read(self.path("key")).ok()? != self.key.as_bytes() {
            return None;
        }
        let cubin = std::fs::read(self.path("cubin")).ok().filter(|c| c.starts_with(b"\x7fELF"))?;
        let report = std::fs::read_to_string(self.path("report")).ok()?;
        Some(Assembled { report, cubin })
    }

    /// Stores `a` (best effort: a failure leaves no entry behind).
    fn write(&self, a: &Assembled) {
        let Some(dir) = self.stem.parent() else { return };
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        let files: [(&str, &[u8]); 3] =
            [("cubin", &a.cubin), ("report", a.report.as_bytes()), ("key", self.key.as_bytes())];
        for (ext, bytes) in files {
            let tmp = self.path(&format!("{ext}.{}-{}", std::process::id(), nonce()));
            let ok = std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, self.path(ext)));
            if ok.is_err() {
                let _ = std::fs::remove_file(&tmp);
                return;
            }
        }
    }
}

fn nonce() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// Runs `ptxas -arch=<arch> -v <file> -o <tmp>`; returns its `-v` report
/// and the cubin it wrote, or its message on failure.
fn run_ptxas(ptxas: &str, arch: &str, kernel: &str, ptx: &str) -> Result<Assembled, String> {
    let stem = std::env::temp_dir().join(format!("tile-{}-{kernel}-{arch}-{}", std::process::id(), nonce()));
    let ptx_path = stem.with_extension("ptx");
    let cubin_path = stem.with_extension("cubin");
    std::fs::write(&ptx_path, ptx).map_err(|e| format!("cannot write `{}`: {e}", ptx_path.display()))?;
    let output = std::process::Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg(&ptx_path)
        .arg("-o")
        .arg(&cubin_path)
        .output();
    let _ = std::fs::remove_file(&ptx_path);
    let cubin = std::fs::read(&cubin_path);
    let _ = std::fs::remove_file(&cubin_path);
    let output = output.map_err(|e| format!("cannot run TILE_PTXAS=`{ptxas}`: {e}"))?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    if !output.status.success() {
        return Err(format!("{} ({})", text.trim_end(), output.status));
    }
    match cubin {
        Ok(cubin) if cubin.starts_with(b"\x7fELF") => Ok(Assembled { report: text, cubin }),
        Ok(_) => Err(format!("ptxas wrote `{}`, which is not an ELF cubin", cubin_path.display())),
        Err(e) => Err(format!("ptxas succeeded but its cubin `{}` cannot be read: {e}", cubin_path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTXAS: &str = "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/nvidia/cuda_nvcc/bin/ptxas";
    const GOOD: &str = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n";

    fn ptxas() -> Option<&'static str> {
        let found = Path::new(PTXAS).exists();
        if !found {
            eprintln!("ptxas not found at {PTXAS}; skipping");
        }
        found.then_some(PTXAS)
    }

    #[test]
    fn ptxas_reports_and_failures() {
        let Some(ptxas) = ptxas() else { return };
        for arch in ["sm_80", "sm_90a"] {
            let good = GOOD.replace("sm_80", arch);
            let assembled = assemble(ptxas, arch, "k", &good, None).expect("valid PTX assembles");
            assert!(assembled.report.contains("Compiling entry function 'k'"), "{}", assembled.report);
            // The cubin is an ELF image (64-bit: EI_CLASS 2) for the arch.
            assert!(
                assembled.cubin.starts_with(b"\x7fELF\x02"),
                "{:?}",
                &assembled.cubin[..8.min(assembled.cubin.len())]
            );
        }
        let bad = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n\tfrobnicate;\n}\n";
        let err = assemble(ptxas, "sm_80", "k", bad, None).expect_err("invalid PTX fails");
        assert!(err.contains("frobnicate") || err.contains("syntax error"), "{err}");
        let missing = assemble("/nonexistent/ptxas", "sm_80", "k", GOOD, None).expect_err("no such ptxas");
        assert!(missing.contains("cannot run TILE_PTXAS"), "{missing}");
    }

    /// A second assembly of the same text is read from the cache (the entry
    /// planted with a marked report shows it was not run again); another
    /// text, another arch or a key that differs (a collision) is a miss;
    /// failures are not stored.
    #[test]
    fn the_cache_answers_only_the_same_text() {
        let Some(ptxas) = ptxas() else { return };
        let dir = std::env::temp_dir().join(format!("tile-ptxas-cache-test-{}-{}", std::process::id(), nonce()));
        let first = assemble(ptxas, "sm_80", "k", GOOD, Some(&dir)).unwrap();
        let entry = Entry::new(&dir, ptxas, "sm_80", GOOD).unwrap();
        assert_eq!(std::fs::read(entry.path("cubin")).unwrap(), first.cubin);
        std::fs::write(entry.path("report"), "from the cache").unwrap();
        assert_eq!(assemble(ptxas, "sm_80", "k", GOOD, Some(&dir)).unwrap().report, "from the cache");
        // Another text (one more instruction) and another arch: assembled.
        let other = GOOD.replace("ret;", "ret;\n\tret;");
        assert_ne!(assemble(ptxas, "sm_80", "k", &other, Some(&dir)).unwrap().report, "from the cache");
        let hopper = GOOD.replace("sm_80", "sm_90a");
        assert_ne!(assemble(ptxas, "sm_90a", "k", &hopper, Some(&dir)).unwrap().report, "from the cache");
        // The stored key differs (as a hash collision would): a miss, run again.
        std::fs::write(entry.path("key"), format!("{}x", entry.key)).unwrap();
        assert_ne!(assemble(ptxas, "sm_80", "k", GOOD, Some(&dir)).unwrap().report, "from the cache");
        // A failure leaves no entry.
        let bad = GOOD.replace("ret;", "frobnicate;");
        assert!(assemble(ptxas, "sm_80", "k", &bad, Some(&dir)).is_err());
        assert!(!Entry::new(&dir, ptxas, "sm_80", &bad).unwrap().path("key").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
