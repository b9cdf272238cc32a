//! ptxas for the code generation tests: `TILE_PTXAS`, else `ptxas` on PATH;
//! absent, a check is skipped with a message, unless `CI` is set, where a
//! missing ptxas fails the test.

use std::sync::atomic::{AtomicUsize, Ordering};

fn ptxas() -> Option<String> {
    if let Ok(p) = std::env::var("TILE_PTXAS") {
        if !p.is_empty() {
            return Some(p);
        }
    }
    if std::process::Command::new("ptxas").arg("--version").output().is_ok() {
        return Some("ptxas".into());
    }
    if std::env::var("CI").is_ok() {
        panic!("ptxas not found (set TILE_PTXAS) and CI is set");
    }
    None
}

/// Assembles `ptx` for `arch` (`sm_80`, `sm_90a`) with `-v`; returns the
/// report, or None when ptxas is absent. A ptxas failure fails the test with
/// its message and the numbered PTX.
pub fn assemble(name: &str, ptx: &str, arch: &str) -> Option<String> {
    let Some(bin) = ptxas() else {
        eprintln!("skipping ptxas check of {name} ({arch}): no ptxas (set TILE_PTXAS)");
        return None;
    };
    // Tests run in parallel and share kernel names: one file per call.
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tile-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}-{n}.{arch}.ptx"));
    std::fs::write(&src, ptx).unwrap();
    let out = dir.join(format!("{name}-{n}.{arch}.cubin"));
    let res = std::process::Command::new(&bin)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run ptxas");
    let report = format!("{}{}", String::from_utf8_lossy(&res.stdout), String::from_utf8_lossy(&res.stderr));
    assert!(res.status.success(), "ptxas failed on {name} ({arch}):\n{report}\n--- PTX ---\n{}", numbered(ptx));
    Some(report)
}

fn numbered(s: &str) -> String {
    s.lines().enumerate().map(|(i, l)| format!("{:4} {l}\n", i + 1)).collect()
}
