#!/usr/bin/env bash
# Runs the binaries gathered by scripts/dist.sh (on the GPU machine).
#   run.sh tests     every test binary (GPU tests included)
#   run.sh examples  every example (correctness check + bandwidth/TFLOPS vs peer)
#   run.sh gemm      the gemm example, its GPU tests and the cuBLAS tests only
#   run.sh memcheck  the GPU tests under compute-sanitizer memcheck and racecheck
#                    (with TILE_TEST_SMALL=1: tests that honour it use small sizes)
#   run.sh hopper    the sm_90a GEMM path (issue 4), in order:
#                    1. the gemm GPU tests (test-gpu_gemm, every test, full sizes);
#                    2. its `hopper_` tests under compute-sanitizer memcheck, then
#                       racecheck, at small sizes (TILE_TEST_SMALL=1);
#                    3. the gemm example against cuBLAS at 4096³ and 8192³, f16
#                       and bf16 (RESULT gemm lines);
#                    4. ncu on one 8192³ f16 launch of the example's kernel:
#                       tensor pipe utilization, DRAM throughput, achieved
#                       occupancy, duration, registers, shared memory;
#                    5. SASS instruction counts (HGMMA, UTMALDG, SYNCS = mbarrier,
#                       BAR, ...) of every sm_90a kernel of the gemm tests and
#                       example, one `RESULT sass` line per kernel.
#                    Steps with `hopper:N[,N..]` only (e.g. `run.sh hopper:3,4`).
#   run.sh attention FlashAttention forward (issue 9), in order:
#                    1. the benchmark: PyTorch SDPA (cuDNN and flash backends,
#                       attention_peers.py) and ours on the same shapes
#                       (`example-flash_attention --list-shapes`), merged into a
#                       table with ratios, attention.csv and attention.svg
#                       (TFLOPS against sequence length) beside this script
#                       and in $OUT if set (RESULT attention lines); then
#                       ours again with TILE_SKIP_SCHEDULES=
#                       warp_specialized_loop_persistent (attention-plain.csv);
#                    2. large sizes against PyTorch SDPA in float32
#                       (--dump, attention_check.py; RESULT attention_check);
#                    3. the GPU tests (test-gpu_flash_attention);
#                    4. compute-sanitizer memcheck, racecheck and synccheck on
#                       them at small sizes (TILE_TEST_SMALL=1);
#                    5. the tile-shape variants (example-flash_attention_tune:
#                       RESULT attention_tune lines).
#                    Steps with `attention:N[,N..]` only; ATTENTION_SET=acceptance
#                    or sweep benchmarks only those shapes (default all).
#   run.sh sweep     the GEMM sweep (issue 10), in order:
#                    1. example-gemm_sweep: every sweep shape (M from 1 to 8192
#                       against the layers' N x K, odd K and N), both layouts,
#                       f16 and bf16, ours and cuBLAS in the same run, checked;
#                       RESULT gemm_sweep lines, the geometric mean and minimum
#                       ratio, gemm_sweep.csv and gemm_sweep.svg beside this
#                       script and in $OUT if set;
#                    2. the shape-dispatch GPU test (test-gpu_gemm shaped_gemm);
#                    3. compute-sanitizer memcheck and racecheck on it at
#                       small sizes (TILE_TEST_SMALL=1);
#                    4. the gemm example at 4096^3 and 8192^3 (the example's
#                       kernel must not have changed);
#                    5. the sweep again with --tune: the autotuner's pick among
#                       the shape rule's candidates where the rule is not sure
#                       (tuned once per shape bucket, cached in tune-cache/
#                       beside this script: a second run reads the choices),
#                       gemm_sweep_tuned.csv/.svg and gemm_tune_cache.json (the
#                       choices, to ship as TILE_TUNE_CACHE).
#                    Steps 1 and 5 print a RESULT line per shape as it is
#                    measured and write the CSV row by row; they start no
#                    shape after SWEEP_DEADLINE seconds (default 400) and then
#                    summarize what they measured (partial=1).
#                    Steps with `sweep:N[,N..]` only (e.g. `run.sh sweep:5`).
#   run.sh mla       MLA decode (issue 13), in order:
#                    1. the benchmark: the peers (mla_peers.py: PyTorch's clone
#                       as a copy bandwidth, FlashMLA if it imports) and ours on
#                       the same shapes (`example-mla_decode --list-shapes`),
#                       beside the DSL copy kernel's bandwidth, merged into a
#                       table, mla.csv and mla.svg (TFLOPS against context)
#                       beside this script and in $OUT if set (RESULT mla lines);
#                    2. large sizes against PyTorch in float32 (--dump,
#                       mla_check.py; RESULT mla_check);
#                    3. the GPU tests (test-gpu_mla_decode);
#                    4. compute-sanitizer memcheck, racecheck and synccheck on
#                       them at small sizes (TILE_TEST_SMALL=1).
#                    Steps with `mla:N[,N..]` only; MLA_SET=acceptance or sweep
#                    benchmarks only those shapes (default all).
#   run.sh candle    the candle example (issue 11; built by `dist.sh candle`):
#                    a tile RMSNorm as a candle CustomOp2 on candle's CUDA
#                    tensors and stream, against candle's own ops: one
#                    RESULT candle_rmsnorm line per shape (relative error;
#                    times at 4096 x 4096) and RESULT candle_rmsnorm_check ok
#                    when all matched. First shows which libcuda.so.1 and
#                    CUDA 13 libraries the loader picks (the driver's, and
#                    /usr/local/cuda's, added to LD_LIBRARY_PATH when there);
#                    fails if libcuda resolves to a stub.
#   run.sh all       tests, examples and memcheck
# Every `RESULT ...` line is collected in results.txt beside this script.
# cuBLAS (the gemm peer) is found as libcublas.so.13/.12/.11 or libcublas.so on
# the loader path; TILE_CUBLAS=/path/to/libcublas.so.N overrides. The CUDA
# tools (compute-sanitizer, ncu, cuobjdump or nvdisasm, ptxas) are found on
# PATH, then in /usr/local/cuda/bin and /opt/nvidia/nsight-compute/*.
#
# Why SASS comes from cubin/ and not from the test binary: tile embeds PTX,
# which the driver compiles when a kernel is first launched, so the binaries
# hold no SASS for cuobjdump. `dist.sh gemm` dumps each kernel's sm_90a PTX at
# build time (TILE_DUMP) and assembles it with ptxas into cubin/<kernel>...cubin;
# where it could not, it leaves the PTX in ptx/ and step 5 assembles it here.
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
# The path of a CUDA tool, or nothing.
tool() {
  local t
  t=$(command -v "$1") && { echo "$t"; return; }
  for t in /usr/local/cuda/bin/"$1" /usr/local/cuda-*/bin/"$1" /opt/nvidia/nsight-compute/*/"$1"; do
    [[ -x $t ]] && { echo "$t"; return; }
  done
}
# Sets $found to the path of a tool that a step needs; fails the run when missing.
need() {
  found=$(tool "$1")
  [[ -n $found ]] || { echo "!! FAILED: $1 not found (PATH, /usr/local/cuda/bin)"; status=1; return 1; }
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

# ---- hopper: the sm_90a GEMM path -------------------------------------------
if [[ $what == hopper || $what == hopper:* ]]; then
  steps=",1,2,3,4,5,"
  [[ $what == hopper:* ]] && steps=",${what#hopper:},"
  step() { [[ $steps == *",$1,"* ]]; }
  : >"$results"
  gemm_tests="$here/bin/test-gpu_gemm"
  gemm_example="$here/bin/example-gemm"
  for f in "$gemm_tests" "$gemm_example"; do
    [[ -x $f ]] || { echo "!! FAILED: $f missing (build with scripts/dist.sh gemm)"; status=1; }
  done
  if step 1 && [[ -x $gemm_tests ]]; then
    echo "== [hopper 1] gemm GPU tests"
    start=$SECONDS
    run "$gemm_tests" --test-threads=1
    echo "   (gemm GPU tests took $((SECONDS - start)) s)"
  fi
  if step 2 && [[ -x $gemm_tests ]] && need compute-sanitizer; then
    cs=$found
    echo "== [hopper 2] compute-sanitizer on the hopper_ tests at small sizes"
    for t in memcheck racecheck; do
      TILE_TEST_SMALL=1 run "$cs" --tool "$t" --error-exitcode 1 "$gemm_tests" --test-threads=1 hopper_
    done
  fi
  if step 3 && [[ -x $gemm_example ]]; then
    echo "== [hopper 3] gemm example vs cuBLAS"
    example "$gemm_example" --size 4096,8192 --dtype f16,bf16
  fi
  if step 4 && [[ -x $gemm_example ]] && need ncu; then
    ncu=$found
    echo "== [hopper 4] ncu: one 8192^3 f16 launch"
    # The tensor pipe metric's name depends on the ncu version and the chip:
    # keep the candidates this ncu knows (wgmma counts under gmma on Hopper).
    known=$("$ncu" --query-metrics 2>/dev/null | awk '{print $1}')
    metrics="gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed"
    metrics+=",dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum"
    metrics+=",sm__warps_active.avg.pct_of_peak_sustained_active"
    metrics+=",launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__block_size,launch__grid_size"
    tensor=0
    for m in sm__pipe_tensor_op_gmma_cycles_active sm__pipe_tensor_op_hmma_cycles_active sm__pipe_tensor_cycles_active \
      sm__inst_executed_pipe_tensor_op_gmma sm__inst_executed_pipe_tensor_op_hmma; do
      if grep -qx "$m" <<<"$known"; then
        case $m in
          *_cycles_active) metrics+=",$m.avg.pct_of_peak_sustained_active" ;;
          *) metrics+=",$m.sum" ;;
        esac
        tensor=1
      fi
    done
    # If the query failed, ask for the generic name and let ncu say.
    [[ $tensor == 1 ]] || metrics+=",sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
    run "$ncu" --launch-count 1 --metrics "$metrics" "$gemm_example" --once --size 8192 --dtype f16
  fi
  if step 5; then
    echo "== [hopper 5] SASS of the sm_90a kernels (per kernel: instruction counts)"
    dis=$(tool cuobjdump)
    if [[ -n $dis ]]; then dis=("$dis" -sass); else dis=$(tool nvdisasm) && dis=("$dis" -c); fi
    ptxas=$(tool ptxas)
    shopt -s nullglob
    # Assemble PTX that dist.sh left unassembled.
    for p in "$here"/ptx/*.ptx; do
      c="$here/cubin/$(basename "$p" .ptx).cubin"
      [[ -e $c ]] && continue
      if [[ -n $ptxas ]]; then
        mkdir -p "$here/cubin" && "$ptxas" -arch=sm_90a "$p" -o "$c" || { echo "!! FAILED: ptxas $p"; status=1; }
      fi
    done
    cubins=("$here"/cubin/*.cubin)
    if [[ ${#cubins[@]} == 0 ]]; then
      echo "!! FAILED: no cubin/ (and no ptx/ with a ptxas here): build with scripts/dist.sh gemm"
      status=1
    elif [[ -z ${dis[0]} ]]; then
      echo "!! FAILED: neither cuobjdump nor nvdisasm found"
      status=1
    else
      for c in "${cubins[@]}"; do
        # Mnemonics (the opcode before its first `.`), predicates dropped.
        counts=$("${dis[@]}" "$c" 2>/dev/null \
          | sed -nE 's#^[[:space:]]*/\*[0-9a-f]+\*/[[:space:]]+(@!?U?P[A-Z0-9]+[[:space:]]+)?([A-Z][A-Z0-9_]*).*#\2#p' \
          | sort | uniq -c)
        line="RESULT sass kernel=$(basename "$c" .cubin)"
        for op in HGMMA WARPGROUP UTMALDG UTMASTG SYNCS BAR HMMA LDGSTS LDSM STG STS; do
          n=$(awk -v op="$op" '$2 == op {print $1}' <<<"$counts")
          line+=" $op=${n:-0}"
        done
        echo "$line" | tee -a "$results"
      done
    fi
  fi
fi

# ---- sweep: the GEMM sweep against cuBLAS ------------------------------------
if [[ $what == sweep || $what == sweep:* ]]; then
  steps=",1,2,3,4,5,"
  [[ $what == sweep:* ]] && steps=",${what#sweep:},"
  step() { [[ $steps == *",$1,"* ]]; }
  : >"$results"
  ex="$here/bin/example-gemm_sweep"
  tests="$here/bin/test-gpu_gemm"
  for f in "$ex" "$tests"; do
    [[ -x $f ]] || { echo "!! FAILED: $f missing (build with scripts/dist.sh sweep)"; status=1; }
  done
  if step 1 && [[ -x $ex ]]; then
    echo "== [sweep 1] GEMM sweep vs cuBLAS"
    start=$SECONDS
    example "$ex" --deadline "${SWEEP_DEADLINE:-400}" --csv "$here/gemm_sweep.csv" --plot "$here/gemm_sweep.svg"
    if [[ -n ${OUT:-} && -d ${OUT:-} ]]; then cp "$here/gemm_sweep.csv" "$here/gemm_sweep.svg" "$OUT/" 2>/dev/null; fi
    echo "   (sweep took $((SECONDS - start)) s)"
  fi
  if step 2 && [[ -x $tests ]]; then
    echo "== [sweep 2] shape-dispatch GPU test"
    run "$tests" --test-threads=1 shaped_gemm
  fi
  if step 3 && [[ -x $tests ]] && need compute-sanitizer; then
    cs=$found
    echo "== [sweep 3] compute-sanitizer at small sizes"
    for t in memcheck racecheck; do
      TILE_TEST_SMALL=1 run "$cs" --tool "$t" --error-exitcode 1 "$tests" --test-threads=1 shaped_gemm
    done
  fi
  if step 4 && [[ -x $here/bin/example-gemm ]]; then
    echo "== [sweep 4] gemm example at 4096^3 and 8192^3"
    example "$here/bin/example-gemm" --size 4096,8192 --dtype f16,bf16 --no-check
  fi
  if step 5 && [[ -x $ex ]]; then
    echo "== [sweep 5] GEMM sweep vs cuBLAS, tuned (cache: $here/tune-cache)"
    start=$SECONDS
    TILE_CACHE_DIR="$here/tune-cache" TILE_TUNE="${TILE_TUNE:-quiet}" example "$ex" --tune \
      --deadline "${SWEEP_DEADLINE:-400}" --csv "$here/gemm_sweep_tuned.csv" --plot "$here/gemm_sweep_tuned.svg" \
      --save-tuning "$here/gemm_tune_cache.json"
    if [[ -n ${OUT:-} && -d ${OUT:-} ]]; then
      cp "$here/gemm_sweep_tuned.csv" "$here/gemm_sweep_tuned.svg" "$here/gemm_tune_cache.json" "$OUT/" 2>/dev/null
    fi
    echo "   (tuned sweep took $((SECONDS - start)) s)"
  fi
fi

# ---- attention: FlashAttention forward against PyTorch SDPA -----------------
if [[ $what == attention || $what == attention:* ]]; then
  steps=",1,2,3,4,5,"
  [[ $what == attention:* ]] && steps=",${what#attention:},"
  step() { [[ $steps == *",$1,"* ]]; }
  : >"$results"
  ex="$here/bin/example-flash_attention"
  tests="$here/bin/test-gpu_flash_attention"
  for f in "$ex" "$tests"; do
    [[ -x $f ]] || { echo "!! FAILED: $f missing (build with scripts/dist.sh attention)"; status=1; }
  done
  if step 1 && [[ -x $ex ]]; then
    echo "== [attention 1] benchmark: PyTorch SDPA (cuDNN, flash) and ours"
    start=$SECONDS
    mapfile -t shapes < <("$ex" --list-shapes "${ATTENTION_SET:-all}")
    run python3 "$here/attention_peers.py" --out "$here/peers.csv" "${shapes[@]}"
    example "$ex" --bench "${ATTENTION_SET:-all}" --peers "$here/peers.csv" --csv "$here/attention.csv" \
      --plot "$here/attention.svg"
    # The same binary without the persistent variant (the plain
    # warp-specialized loop then runs): its RESULT lines name the schedule.
    echo "== [attention 1b] ours without warp_specialized_loop_persistent"
    TILE_SKIP_SCHEDULES=warp_specialized_loop_persistent example "$ex" --bench "${ATTENTION_SET:-all}" \
      --peers "$here/peers.csv" --csv "$here/attention-plain.csv"
    if [[ -n ${OUT:-} && -d ${OUT:-} ]]; then
      cp "$here/peers.csv" "$here/attention.csv" "$here/attention-plain.csv" "$here/attention.svg" "$OUT/" 2>/dev/null
    fi
    echo "   (benchmark took $((SECONDS - start)) s)"
  fi
  if step 2 && [[ -x $ex ]]; then
    echo "== [attention 2] large sizes against PyTorch SDPA in float32"
    dumps="$here/attention-dumps"
    rm -rf "$dumps"
    specs=(f16:2:16:16:4096:4096:128:0 f16:2:16:16:4096:4096:128:1 bf16:1:16:4:3000:4500:128:1:bshd
      f16:1:8:2:8192:2048:64:1 bf16:2:8:8:2500:2500:256:0:bshd f16:1:8:1:2047:4099:256:1)
    run "$ex" --dump "$dumps" "${specs[@]}"
    echo "== python3 attention_check.py"
    python3 "$here/attention_check.py" "$dumps"/* 2>&1 | tee "$here/.check.log" || { echo "!! FAILED: attention_check.py"; status=1; }
    grep '^RESULT ' "$here/.check.log" >>"$results"
    rm -rf "$dumps"
  fi
  if step 3 && [[ -x $tests ]]; then
    echo "== [attention 3] GPU tests"
    run "$tests" --test-threads=1
  fi
  if step 4 && [[ -x $tests ]] && need compute-sanitizer; then
    cs=$found
    echo "== [attention 4] compute-sanitizer at small sizes"
    for t in memcheck racecheck synccheck; do
      TILE_TEST_SMALL=1 run "$cs" --tool "$t" --error-exitcode 1 "$tests" --test-threads=1 every_combination_f16 short_loops
    done
  fi
  if step 5 && [[ -x $here/bin/example-flash_attention_tune ]]; then
    echo "== [attention 5] tile-shape variants"
    example "$here/bin/example-flash_attention_tune"
  fi
fi

# ---- mla: MLA decode (issue 13) ----------------------------------------------
if [[ $what == mla || $what == mla:* ]]; then
  steps=",1,2,3,4,"
  [[ $what == mla:* ]] && steps=",${what#mla:},"
  step() { [[ $steps == *",$1,"* ]]; }
  : >"$results"
  ex="$here/bin/example-mla_decode"
  tests="$here/bin/test-gpu_mla_decode"
  for f in "$ex" "$tests"; do
    [[ -x $f ]] || { echo "!! FAILED: $f missing (build with scripts/dist.sh mla)"; status=1; }
  done
  if step 1 && [[ -x $ex ]]; then
    echo "== [mla 1] benchmark: the peers and ours"
    start=$SECONDS
    mapfile -t shapes < <("$ex" --list-shapes "${MLA_SET:-all}")
    run python3 "$here/mla_peers.py" --out "$here/mla-peers.csv" "${shapes[@]}"
    example "$ex" --bench "${MLA_SET:-all}" --peers "$here/mla-peers.csv" --csv "$here/mla.csv" --plot "$here/mla.svg"
    if [[ -n ${OUT:-} && -d ${OUT:-} ]]; then cp "$here/mla-peers.csv" "$here/mla.csv" "$here/mla.svg" "$OUT/" 2>/dev/null; fi
    echo "   (benchmark took $((SECONDS - start)) s)"
  fi
  if step 2 && [[ -x $ex ]]; then
    echo "== [mla 2] large sizes against PyTorch in float32"
    dumps="$here/mla-dumps"
    rm -rf "$dumps"
    specs=(f16:4:128:1:8191:ragged bf16:4:128:2:8192:uniform f16:8:16:2:4000:ragged:contiguous
      bf16:2:20:1:8191:uniform bf16:3:64:2:1000:ragged)
    run "$ex" --dump "$dumps" "${specs[@]}"
    echo "== python3 mla_check.py"
    python3 "$here/mla_check.py" "$dumps"/* 2>&1 | tee "$here/.check.log" || { echo "!! FAILED: mla_check.py"; status=1; }
    grep '^RESULT ' "$here/.check.log" >>"$results"
    rm -rf "$dumps"
  fi
  if step 3 && [[ -x $tests ]]; then
    echo "== [mla 3] GPU tests"
    run "$tests" --test-threads=1
  fi
  if step 4 && [[ -x $tests ]] && need compute-sanitizer; then
    cs=$found
    echo "== [mla 4] compute-sanitizer at small sizes"
    for t in memcheck racecheck synccheck; do
      TILE_TEST_SMALL=1 run "$cs" --tool "$t" --error-exitcode 1 "$tests" --test-threads=1 every_combination_f16 empty_splits
    done
  fi
fi

# ---- candle: the candle CustomOp example (issue 11) --------------------------
if [[ $what == candle ]]; then
  : >"$results"
  ex="$here/bin/example-candle_rmsnorm"
  if [[ ! -x $ex ]]; then
    echo "!! FAILED: $ex missing (build with scripts/dist.sh candle)"
    status=1
  else
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
      [[ -d $d ]] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
    echo "== the libraries the loader picks"
    libs=$(ldd "$ex")
    grep -E 'libcuda|libcudart|libcublas|libcurand|libnvrtc|not found' <<<"$libs"
    if grep -q 'not found' <<<"$libs"; then
      echo "!! FAILED: a library of $ex is not found (the driver's libcuda.so.1; CUDA 13's libcublas.so.13, libcudart.so.13, libcurand.so.10)"
      status=1
    elif grep -E 'libcuda\.so\.1 =>' <<<"$libs" | grep -q stubs; then
      echo "!! FAILED: libcuda.so.1 resolves to a stub; the driver's libcuda must come first on the loader path"
      status=1
    else
      echo "== example-candle_rmsnorm"
      example "$ex"
    fi
  fi
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
