#!/usr/bin/env bash
# Builds the release test and example binaries (with the `gpu` feature) into
# dist/, with dist/run.sh, so that they can be carried to a GPU machine that
# has no Rust toolchain and run there in one command:
#   scripts/dist.sh && (on the GPU machine) dist/run.sh [tests|examples|gemm|memcheck|all]
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf dist && mkdir -p dist/bin

# Test binaries: every integration test of the workspace, with the gpu feature
# of the facade and of the runtime (tile-runtime's GPU tests: launch, cuBLAS).
cargo test --release --features gpu,tile-runtime/gpu --workspace --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil, os
for line in sys.stdin:
    try: msg = json.loads(line)
    except ValueError: continue
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
        name = msg["target"]["name"]
        if name in ("ui",):  # trybuild needs cargo: not on the GPU machine
            continue
        kind = msg["target"]["kind"][0]
        dst = f"dist/bin/test-{name}" if kind != "lib" else f"dist/bin/unit-{name}"
        shutil.copy(msg["executable"], dst)
        print("test  ", dst)
'
# Example binaries.
cargo build --release --features gpu --examples
for ex in examples/*.rs; do
  name=$(basename "$ex" .rs)
  cp "target/release/examples/$name" "dist/bin/example-$name"
  echo "example dist/bin/example-$name"
done
strip --strip-debug dist/bin/* 2>/dev/null || true
cp scripts/run-dist.sh dist/run.sh
chmod +x dist/run.sh
du -sh dist
