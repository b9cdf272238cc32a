//! Configures kernel compilation for this package.
//!
//! `#[tile_kernel]` runs inside rustc and reads its settings from the
//! environment. Cargo cannot tell that a proc macro read an environment
//! variable, so this script declares them: changing one rebuilds the kernels.
//!
//! - `TILE_ARCHS`: comma-separated PTX targets to embed (default `sm_80,sm_90a`).
//! - `TILE_PTXAS`: path to `ptxas`; when set, every kernel is assembled for
//!   every target at build time and a failure is a compile error.
//! - `TILE_DUMP`: a folder; each kernel's Tile IR, Thread IR and PTX (and the
//!   `ptxas -v` report when `TILE_PTXAS` is set) are written there.
//! - `TILE_OPTIONS_OFF`: comma-separated compiler switches to turn off
//!   (`tile_ir::CompileOptions::SWITCHES`), to bisect or compare.
//! - `TILE_OPTIONS_ON`: comma-separated compiler experiments to turn on
//!   (`tile_ir::CompileOptions::EXPERIMENTS`: what is off by default), to
//!   time them against the default build.
//!
//! Not declared, since it changes no output: `TILE_PTXAS_CACHE`, a folder
//! where `ptxas`'s cubins are kept by content and reused, so that a kernel
//! expanded by several tests and examples, or by clippy and then the build,
//! is assembled once (`.ci/run` and `scripts/dist.sh` set it).
fn main() {
    for var in ["TILE_ARCHS", "TILE_PTXAS", "TILE_DUMP", "TILE_PTX_SNAPSHOT", "TILE_OPTIONS_OFF", "TILE_OPTIONS_ON"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let archs = std::env::var("TILE_ARCHS").unwrap_or_else(|_| "sm_80,sm_90a".to_string());
    println!("cargo:rustc-env=TILE_ARCHS={archs}");
}
