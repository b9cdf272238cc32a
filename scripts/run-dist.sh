#!/usr/bin/env bash
# Runs the binaries gathered by scripts/dist.sh (on the GPU machine).
#   run.sh tests     every test binary (GPU tests included)
#   run.sh examples  every example (correctness check + bandwidth/TFLOPS vs peer)
#   run.sh gemm      the gemm example, its GPU tests and the cuBLAS tests only
#   run.sh memcheck  the GPU tests under compute-sanitizer memcheck and racecheck
#                    (with TILE_TEST_SMALL=1: tests that honour it use small sizes)
#   run.sh all       all of the above
# Every `RESULT ...` line the examples print is collected in results.txt beside
# this script. cuBLAS (the gemm peer) is found as libcublas.so.13/.12/.11 or
# libcublas.so on the loader path; TILE_CUBLAS=/path/to/libcublas.so.N overrides.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
what="${1:-all}"
status=0
run() { echo "== $*"; "$@" || { echo "!! FAILED: $*"; status=1; }; }
results="$here/results.txt"
# Runs an example, keeping its RESULT lines.
example() {
  echo "== $*"
  "$@" 2>&1 | tee "$here/.example.log"
  local rc=${PIPESTATUS[0]}
  grep '^RESULT ' "$here/.example.log" >>"$results"
  [[ $rc == 0 ]] || { echo "!! FAILED: $*"; status=1; }
}
if [[ $what == tests || $what == all ]]; then
  for t in "$here"/bin/test-* "$here"/bin/unit-*; do [[ -x $t ]] && run "$t" --test-threads=1; done
fi
if [[ $what == examples || $what == all ]]; then
  : >"$results"
  for e in "$here"/bin/example-*; do example "$e"; done
fi
if [[ $what == gemm ]]; then
  : >"$results"
  for t in "$here"/bin/test-gpu_gemm "$here"/bin/test-gpu_cublas "$here"/bin/test-gemm_interp; do
    [[ -x $t ]] && run "$t" --test-threads=1
  done
  example "$here/bin/example-gemm"
fi
if [[ -s $results ]]; then echo "== RESULT lines (also in $results)"; cat "$results"; fi
if [[ $what == memcheck || $what == all ]]; then
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  export TILE_TEST_SMALL=1
  for t in "$here"/bin/test-gpu*; do
    [[ -x $t ]] || continue
    run "$cs" --tool memcheck --error-exitcode 1 "$t" --test-threads=1
    run "$cs" --tool racecheck --error-exitcode 1 "$t" --test-threads=1
  done
fi
exit $status
