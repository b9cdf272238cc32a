#!/usr/bin/env bash
# Builds the release test and example binaries (with the `gpu` feature) into
# dist/, with dist/run.sh, so that they can be carried to a GPU machine that
# has no Rust toolchain and run there in one command:
#   scripts/dist.sh [all|gemm|attention|sweep|mla|candle] && (on the GPU machine) dist/run.sh [MODE]
# (run.sh's header lists its modes).
#
#   all   (default) every integration test binary of the workspace and every
#         example (about 65 MB);
#   gemm  only what `run.sh gemm` and `run.sh hopper` use: the tests gpu_gemm
#         (tile), gpu_cublas and gpu_tma (tile-runtime) and the gemm example
#         (a few MB: fits where the whole dist does not, e.g. a 64 MB carry),
#         plus cubin/: the sm_90a kernels of those binaries assembled with
#         ptxas (the binaries embed PTX only; `run.sh hopper` reads the SASS
#         of these), or ptx/ when no ptxas is found here.
#   attention  only what `run.sh attention` uses: the test gpu_flash_attention
#         and the flash_attention and flash_attention_tune examples (plus, as for every mode, the
#         scripts attention_peers.py and attention_check.py).
#   sweep only what `run.sh sweep` uses: the test gpu_gemm and the gemm_sweep
#         and gemm examples.
# Every mode but candle builds with TILE_PTXAS (found as for gemm), so that
# the binaries embed every kernel's cubin.
#   mla   only what `run.sh mla` uses: the test gpu_mla_decode and the
#         mla_decode example (plus the scripts mla_peers.py and mla_check.py).
#   candle  only what `run.sh candle` uses: the candle_rmsnorm example
#         (feature `candle`, `--no-default-features`), built against CUDA 13.0
#         assembled from NVIDIA's wheels and Debian's libcuda1 by
#         scripts/cuda-toolkit.sh (no CUDA toolkit needed here; that script
#         says what comes from where and why nothing of it is loaded at run
#         time). The binary needs libcuda.so.1, libcudart.so.13,
#         libcublas.so.13 and libcurand.so.10 (checked, printed), by soname,
#         with no RPATH: on the GPU machine the driver's libcuda and
#         /usr/local/cuda's libraries are what run. TILE_CUDA_TOOLKIT=<dir>
#         keeps the assembled toolkit elsewhere (default target/cuda-13.0).
#         The default workspace build needs none of this.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
case "$what" in
  all | gemm | attention | sweep | mla | candle) ;;
  *) echo "usage: scripts/dist.sh [all|gemm|attention|sweep|mla|candle]" >&2; exit 2 ;;
esac
rm -rf dist && mkdir -p dist/bin

# ptxas (TILE_PTXAS, else on PATH, else the nvidia-cuda-nvcc wheel's), or nothing.
find_ptxas() {
  local p="${TILE_PTXAS:-$(command -v ptxas || true)}"
  if [[ -z $p ]]; then
    p=$(python3 -c 'import os, nvidia.cuda_nvcc as m; print(os.path.join(list(m.__path__)[0], "bin", "ptxas"))' \
      2>/dev/null || true)
  fi
  [[ -x $p ]] && echo "$p"
}
# The binaries embed every kernel's cubin (TILE_PTXAS at build time; the
# build script declares it, so a change rebuilds the kernels): no JIT
# compile at a kernel's first launch on the GPU machine (which, per variant
# launched, counts against the time limits of tests and runs there).
if [[ $what != candle ]]; then
  if ptxas=$(find_ptxas); then
    export TILE_PTXAS="$ptxas"
    # The same kernels expanded by several binaries are assembled once.
    export TILE_PTXAS_CACHE="${TILE_PTXAS_CACHE:-$PWD/target/ptxas-cache}"
    echo "cubins  embedded (TILE_PTXAS=$ptxas)"
  else
    echo "cubins  none: no ptxas found (the kernels are JIT-compiled at their first launch)"
  fi
fi

# Copies the test executables that cargo reports (JSON messages on stdin)
# into dist/bin: test-<name> for integration tests, unit-<name> for lib tests.
collect_tests() {
  python3 -c '
import json, sys, shutil
for line in sys.stdin:
    try: msg = json.loads(line)
    except ValueError: continue
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
        name = msg["target"]["name"]
        if name in ("ui",):  # trybuild needs cargo: not on the GPU machine
            continue
        kind = msg["target"]["kind"][0]
        if kind == "proc-macro":  # links the toolchain libstd.so: not on the GPU machine
            continue
        dst = f"dist/bin/test-{name}" if kind != "lib" else f"dist/bin/unit-{name}"
        shutil.copy(msg["executable"], dst)
        print("test   ", dst)
'
}

# Test binaries, with the gpu feature of the facade and of the runtime
# (tile-runtime's GPU tests: launch, TMA, cuBLAS). Cargo's diagnostics go to
# stderr (shown); the JSON messages on stdout feed collect_tests.
features=(--features gpu,tile-runtime/gpu)
if [[ $what == candle ]]; then
  eval "$(scripts/cuda-toolkit.sh "${TILE_CUDA_TOOLKIT:-target/cuda-13.0}")"
  cargo build --release --no-default-features --features candle --example candle_rmsnorm
  bin="${CARGO_TARGET_DIR:-target}/release/examples/candle_rmsnorm"
  # What the GPU machine's loader will resolve: sonames only, never a path
  # into the toolkit assembled here.
  if readelf -d "$bin" | grep -qE '\((RPATH|RUNPATH)\)'; then
    echo "dist.sh: $bin has an RPATH/RUNPATH; it must find the GPU machine's libraries" >&2
    exit 1
  fi
  readelf -d "$bin" | grep -q 'Shared library: \[libcuda.so.1\]' || { echo "dist.sh: $bin does not link libcuda.so.1" >&2; exit 1; }
  echo "needs   $(readelf -d "$bin" | sed -nE 's/.*Shared library: \[(.*)\]/\1/p' | tr '\n' ' ')"
  cp "$bin" dist/bin/example-candle_rmsnorm
  strip --strip-debug dist/bin/* 2>/dev/null || true
  cp scripts/run-dist.sh dist/run.sh
  chmod +x dist/run.sh
  du -sh dist
  exit 0
fi
if [[ $what == all ]]; then
  cargo test --release "${features[@]}" --workspace --no-run --message-format=json | collect_tests
  # Every example but candle_rmsnorm, which needs the `candle` feature and
  # a CUDA build (`dist.sh candle`).
  examples=()
  for ex in examples/*.rs; do [[ $ex == examples/candle_rmsnorm.rs ]] || examples+=("$ex"); done
elif [[ $what == attention ]]; then
  cargo test --release "${features[@]}" --test gpu_flash_attention --no-run --message-format=json | collect_tests
  examples=(examples/flash_attention.rs examples/flash_attention_tune.rs)
elif [[ $what == sweep ]]; then
  cargo test --release "${features[@]}" --test gpu_gemm --no-run --message-format=json | collect_tests
  examples=(examples/gemm_sweep.rs examples/gemm.rs)
elif [[ $what == mla ]]; then
  cargo test --release "${features[@]}" --test gpu_mla_decode --no-run --message-format=json | collect_tests
  examples=(examples/mla_decode.rs)
else
  # Every kernel the gemm binaries compile dumps its PTX here (TILE_DUMP);
  # touching their sources makes the macros run again, so the dump is fresh
  # and holds exactly these kernels.
  dump="$PWD/target/dist-dump"
  rm -rf "$dump" && mkdir -p "$dump"
  export TILE_DUMP="$dump"
  touch tests/gpu_gemm.rs examples/gemm.rs
  cargo test --release "${features[@]}" --test gpu_gemm --no-run --message-format=json | collect_tests
  cargo test --release -p tile-runtime --features gpu --test gpu_cublas --test gpu_tma --no-run --message-format=json \
    | collect_tests
  examples=(examples/gemm.rs)
fi
# Example binaries.
example_args=()
for ex in "${examples[@]}"; do example_args+=(--example "$(basename "$ex" .rs)"); done
cargo build --release --features gpu "${example_args[@]}"
for ex in "${examples[@]}"; do
  name=$(basename "$ex" .rs)
  cp "${CARGO_TARGET_DIR:-target}/release/examples/$name" "dist/bin/example-$name"
  echo "example dist/bin/example-$name"
done
strip --strip-debug dist/bin/* 2>/dev/null || true

# sm_90a cubins of the dumped kernels (gemm only).
if [[ $what == gemm ]]; then
  ptxas=$(find_ptxas || true)
  shopt -s nullglob
  ptx=("$dump"/*.sm_90a*.ptx)
  [[ ${#ptx[@]} -gt 0 ]] || { echo "dist.sh: no sm_90a PTX in $dump (TILE_ARCHS without sm_90a?)" >&2; exit 1; }
  if [[ -x $ptxas ]]; then
    mkdir -p dist/cubin
    for p in "${ptx[@]}"; do
      "$ptxas" -arch=sm_90a "$p" -o "dist/cubin/$(basename "$p" .ptx).cubin"
    done
    echo "cubin   dist/cubin: ${#ptx[@]} sm_90a kernels ($("$ptxas" --version | tail -n 1))"
  else
    mkdir -p dist/ptx
    cp "${ptx[@]}" dist/ptx/
    echo "ptx     dist/ptx: ${#ptx[@]} sm_90a kernels (no ptxas here: run.sh hopper assembles them)"
  fi
fi
cp scripts/run-dist.sh dist/run.sh
cp scripts/attention_peers.py scripts/attention_check.py scripts/mla_peers.py scripts/mla_check.py dist/
chmod +x dist/run.sh
du -sh dist
