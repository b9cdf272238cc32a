#!/usr/bin/env bash
# A/B of MLA decode builds in one device run (issue 13): several builds of
# `scripts/dist.sh mla` timed in interleaved rounds on the same machine,
# their GPU tests and sanitizers, FlashMLA beside them.
#
#   (here)  scripts/mla-ab.sh pack DIR VARIANT..
#       VARIANT is NAME[@REV][+OPTION,..]: the binaries of `scripts/dist.sh
#       mla` built from the work tree (or from git revision REV, in a
#       worktree), with TILE_OPTIONS_ON=OPTION,.. when given; stripped and
#       gzipped into DIR/NAME/. DIR also gets this script, mla_peers.py and,
#       with FMLA_KIT=PATH (a tarball of scripts/flashmla/kit.sh), FlashMLA's
#       kit and build.py. Carry DIR (under .device/, ignored) to the machine.
#   (GPU)   DIR/mla-ab.sh run [SPECS]
#       SPECS: comma-separated dtype:b:h_q:s_q:ctx:lengths (default the
#       seesaw's s_q 2 shapes). Environment: ROUNDS (2) rounds of `--bench
#       SPECS`, the variants in DIR's order within each; TESTS (a filter of
#       test-gpu_mla_decode, default `seesaw`; empty: none) on every variant;
#       SANITIZE (variant names) under racecheck, synccheck and memcheck at
#       small sizes; PEERS=1 FlashMLA on SPECS (built in the background
#       while ours run); MLA_TILES passed through; DEADLINE (seconds, 480):
#       no step starts after it. Writes ab.txt (RESULT lines), table.md (the
#       TFLOPS of each round and each variant's median over the first) and
#       the logs into $OUT (or DIR/out).
set -euo pipefail
cmd="${1:-}"
shift || true

if [[ $cmd == pack ]]; then
  dir="$1"
  shift
  [[ $# -gt 0 ]] || { echo "usage: scripts/mla-ab.sh pack DIR NAME[@REV][+OPTION,..].." >&2; exit 2; }
  root="$(cd "$(dirname "$0")/.." && pwd)"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  order=()
  for v in "$@"; do
    name="${v%%[@+]*}"
    rev=""; opts=""
    [[ $v == *@* ]] && { rev="${v#*@}"; rev="${rev%%+*}"; }
    [[ $v == *+* ]] && opts="${v#*+}"
    src="$root"
    if [[ -n $rev ]]; then
      src="$root/target/ab-worktrees/$rev"
      [[ -d $src ]] || git -C "$root" worktree add --detach "$src" "$rev" >/dev/null
    fi
    echo "== $name: $( [[ -n $rev ]] && echo "at $rev" || echo "work tree" )$( [[ -n $opts ]] && echo ", TILE_OPTIONS_ON=$opts" )"
    # A revision builds into a target folder of its own: cargo names a
    # workspace member's artifacts by its path relative to the workspace, so
    # a worktree sharing target/ would overwrite the work tree's artifacts
    # and each would then be taken as fresh for the other.
    tdir="${CARGO_TARGET_DIR:-$root/target}"
    [[ -n $rev ]] && tdir="$root/target/ab-targets/$rev"
    (cd "$src" && CARGO_TARGET_DIR="$tdir" TILE_OPTIONS_ON="$opts" scripts/dist.sh mla 2>&1 | tail -4)
    rm -rf "${dir:?}/$name" && mkdir -p "$dir/$name"
    for f in "$src"/dist/bin/*; do
      strip "$f" 2>/dev/null || true
      gzip -9c "$f" > "$dir/$name/$(basename "$f").gz"
    done
    order+=("$name")
  done
  printf '%s\n' "${order[@]}" > "$dir/variants"
  cp "$0" "$root/scripts/mla_peers.py" "$dir/"
  if [[ -n ${FMLA_KIT:-} ]]; then
    cp "$FMLA_KIT" "$dir/fmla-kit.tar.gz"
    cp "$root/scripts/flashmla/build.py" "$root/scripts/flashmla/dense_api.cpp" "$dir/"
  fi
  du -sh "$dir"
  exit 0
fi

if [[ $cmd != run ]]; then
  echo "usage: scripts/mla-ab.sh pack DIR VARIANT.. | DIR/mla-ab.sh run [SPECS]" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
specs="${1:-bf16:128:128:2:8192:uniform,f16:128:128:2:8192:uniform,bf16:64:128:2:8192:uniform,bf16:128:128:2:8192:ragged}"
out="${OUT:-$here/out}"
mkdir -p "$out"
t0=$(date +%s)
say() { echo "[t+$(($(date +%s) - t0))s] $*"; }
in_time() { [[ $(($(date +%s) - t0)) -lt ${DEADLINE:-480} ]]; }
mapfile -t variants < "$here/variants"
for v in "${variants[@]}"; do
  mkdir -p "/tmp/ab/$v"
  for f in "$here/$v"/*.gz; do zcat "$f" > "/tmp/ab/$v/$(basename "$f" .gz)"; done
  chmod +x "/tmp/ab/$v"/*
done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true
if [[ ${PEERS:-0} == 1 && -f $here/fmla-kit.tar.gz && ! -d /tmp/fmla_pkg ]]; then
  (tar xzf "$here/fmla-kit.tar.gz" -C /tmp && cd /tmp && nice -n 19 python3 "$here/build.py" fmla --out /tmp/fmla_pkg \
    > "$out/fmla_build.log" 2>&1; echo "build rc=$?" >> "$out/fmla_build.log") &
fi
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in "${variants[@]}"; do
    in_time || { say "deadline: no more rounds"; break 2; }
    say "bench $v, round $r"
    "/tmp/ab/$v/example-mla_decode" --bench "$specs" 2>&1 | grep -E "RESULT mla |FAILED" | sed "s/^/$v $r /" | tee -a "$out/ab.txt" || true
  done
done
python3 - "$out/ab.txt" "${variants[@]}" > "$out/table.md" <<'EOF'
import collections, re, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) \d+ RESULT mla shape=(\S+) ours_tflops=(\S+)", line)
    if m:
        runs[(m.group(2), m.group(1))].append(float(m.group(3)))
variants = sys.argv[2:]
print("| shape | " + " | ".join(variants) + " | " + " | ".join(f"{v} / {variants[0]}" for v in variants[1:]) + " |")
print("|---" * (2 * len(variants)) + "|")
for shape in dict.fromkeys(s for s, _ in runs):
    cells = [", ".join(f"{x:.1f}" for x in runs[(shape, v)]) for v in variants]
    med = {v: statistics.median(runs[(shape, v)]) for v in variants if runs[(shape, v)]}
    ratios = [f"{med[v] / med[variants[0]]:.3f}" if v in med and variants[0] in med else "" for v in variants[1:]]
    print(f"| {shape} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
EOF
cat "$out/table.md"
if [[ -n ${TESTS-seesaw} ]]; then
  for v in "${variants[@]}"; do
    in_time || { say "deadline: skipping the tests of $v"; continue; }
    say "test-gpu_mla_decode ${TESTS-seesaw} on $v"
    timeout 150 "/tmp/ab/$v/test-gpu_mla_decode" ${TESTS-seesaw} > "$out/test_$v.txt" 2>&1 || true
    grep -E "test result|FAILED|panicked" "$out/test_$v.txt" | tail -3
  done
fi
for v in ${SANITIZE:-}; do
  for tool in racecheck synccheck memcheck; do
    in_time || { say "deadline: skipping $tool on $v"; continue; }
    say "$tool on $v"
    TILE_TEST_SMALL=1 timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "/tmp/ab/$v/test-gpu_mla_decode" ${TESTS:-seesaw} > "$out/${tool}_$v.txt" 2>&1 && rc=0 || rc=$?
    echo "rc=$rc" >> "$out/${tool}_$v.txt"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result|rc=" "$out/${tool}_$v.txt" | tail -3
  done
done
if [[ ${PEERS:-0} == 1 && -f $here/fmla-kit.tar.gz ]]; then
  while ! grep -q "build rc" "$out/fmla_build.log" 2>/dev/null && in_time; do sleep 5; done
  tail -1 "$out/fmla_build.log" || true
  if in_time; then
    say "FlashMLA"
    PYTHONPATH=/tmp/fmla_pkg timeout 120 python3 "$here/mla_peers.py" --out "$out/peers.csv" ${specs//,/ } 2>&1 | tail -12 || true
  fi
fi
say done
