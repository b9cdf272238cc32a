#!/usr/bin/env bash
# Packs what scripts/flashmla/build.py compiles on a GPU machine without
# network: FlashMLA's sources and the CUTLASS headers it pins, from local git
# clones (any clone with the commits: a mirror will do).
#   kit.sh FLASHMLA_GIT CUTLASS_GIT OUT.tar.gz [FLASHMLA_COMMIT]
# FLASHMLA_COMMIT defaults to HEAD; the CUTLASS commit is the one FlashMLA's
# `csrc/cutlass` submodule records. The tarball unpacks to `fmla/` (src/,
# cutlass/); build with `python3 scripts/flashmla/build.py fmla`.
set -euo pipefail
fm="$1" cu="$2" out="$3" rev="${4:-HEAD}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/fmla/src" "$tmp/fmla/cutlass"
git -C "$fm" archive "$rev" csrc flash_mla | tar -x -C "$tmp/fmla/src"
rm -rf "$tmp/fmla/src/csrc/sm100" "$tmp/fmla/src/csrc/sm90/prefill"
pin="$(git -C "$fm" ls-tree "$rev" csrc/cutlass | awk '{print $3}')"
git -C "$cu" archive "$pin" include tools/util/include | tar -x -C "$tmp/fmla/cutlass"
echo "FlashMLA $(git -C "$fm" rev-parse --short "$rev"), CUTLASS ${pin:0:9}" > "$tmp/fmla/VERSION"
tar czf "$out" -C "$tmp" fmla
echo "wrote $out: $(cat "$tmp/fmla/VERSION")"
