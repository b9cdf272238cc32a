#!/usr/bin/env bash
# Runs the binaries gathered by scripts/dist.sh (on the GPU machine).
#   run.sh tests     every test binary (GPU tests included)
#   run.sh examples  every example (correctness check + bandwidth/TFLOPS vs peer)
#   run.sh memcheck  the GPU tests under compute-sanitizer memcheck and racecheck
#   run.sh all       all of the above
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
what="${1:-all}"
status=0
run() { echo "== $*"; "$@" || { echo "!! FAILED: $*"; status=1; }; }
if [[ $what == tests || $what == all ]]; then
  for t in "$here"/bin/test-* "$here"/bin/unit-*; do [[ -x $t ]] && run "$t" --test-threads=1; done
fi
if [[ $what == examples || $what == all ]]; then
  for e in "$here"/bin/example-*; do run "$e"; done
fi
if [[ $what == memcheck || $what == all ]]; then
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for t in "$here"/bin/test-gpu*; do
    [[ -x $t ]] || continue
    run "$cs" --tool memcheck --error-exitcode 1 "$t" --test-threads=1
    run "$cs" --tool racecheck --error-exitcode 1 "$t" --test-threads=1
  done
fi
exit $status
