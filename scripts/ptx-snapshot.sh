#!/usr/bin/env bash
# Writes every PTX module that the tests and examples compile, for every
# target and variant, to DIR as <kernel>.<arch>.<hash>.ptx (tile-ir's
# `ptx-snapshot` feature), by running the test suite. For refactors: snapshot
# before and after, then `scripts/ptx-snapshot.sh --diff BEFORE AFTER`.
#
#   scripts/ptx-snapshot.sh DIR            # snapshot this tree into DIR
#   scripts/ptx-snapshot.sh --diff A B     # files in one set and not the other
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--diff" ]; then
    a=$2 b=$3
    only_a=$(comm -23 <(ls "$a" | sort) <(ls "$b" | sort))
    only_b=$(comm -13 <(ls "$a" | sort) <(ls "$b" | sort))
    if [ -z "$only_a$only_b" ]; then
        echo "identical: $(ls "$a" | wc -l) modules"
        exit 0
    fi
    [ -n "$only_a" ] && printf 'only in %s:\n%s\n' "$a" "$only_a"
    [ -n "$only_b" ] && printf 'only in %s:\n%s\n' "$b" "$only_b"
    exit 1
fi
dir=$(realpath -m "${1:?usage: scripts/ptx-snapshot.sh DIR}")
rm -rf "$dir"
mkdir -p "$dir"
# The kernels under #[tile_kernel] compile when rustc expands them: make sure
# the root package's targets are expanded again.
touch src/lib.rs
TILE_PTX_SNAPSHOT="$dir" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/ptx-snapshot}" \
    cargo test --workspace --features tile-ir/ptx-snapshot --no-fail-fast -q >"$dir.log" 2>&1 || {
    echo "the test suite failed (log: $dir.log)"; exit 1; }
echo "$(ls "$dir" | wc -l) modules in $dir (log: $dir.log)"
