#!/usr/bin/env python3
"""Times the peers of our MLA decode benchmark (examples/mla_decode.rs
--bench --peers CSV) on the same shapes.

    mla_peers.py [--out peers.csv] [--warmup 3] [--iters 10] SPEC..

Each SPEC is dtype:b:h_q:s_q:ctx:lengths[:contiguous] (what `example-mla_decode
--list-shapes` prints). Peers:
- `torch_clone`: PyTorch's `clone` of a 2 GiB tensor, written as the line
  `torch_clone,copy:<bytes read + written>,ms` (the device copy bandwidth).
- `flashmla`: DeepSeek's FlashMLA (`flash_mla.get_mla_metadata` +
  `flash_mla_with_kvcache`) when the package imports: paged cache
  [blocks, 64, 1, 576], the pages in order, the lengths as ours (ragged:
  uniform in [ctx/2, 3 ctx/2), not the same draws), softmax scale
  1/sqrt(192), causal; split + combine (metadata outside the timing).
  Skipped with a note on stderr when it does not import. On a GPU machine
  without it, `scripts/flashmla/build.py` builds its sm90 dense decode from a
  tarball that `scripts/flashmla/kit.sh` packs here (no network needed
  there); then `PYTHONPATH=/tmp/fmla_pkg mla_peers.py ...`.
Timing: `warmup` calls, then `iters` calls each between two CUDA events;
the median. Writes `impl,spec,ms,sum_seqlen` lines (Σ seqlen of the
lengths FlashMLA ran, its own draws for ragged shapes; empty for the copy)
and prints `RESULT mla_peer ...`.
"""
import argparse
import statistics
import sys

import torch

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def time_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    events[0].record()
    for i in range(iters):
        fn()
        events[i + 1].record()
    torch.cuda.synchronize()
    return statistics.median(events[i].elapsed_time(events[i + 1]) for i in range(iters))


def flashmla_ms(spec, warmup, iters):
    import flash_mla

    f = spec.split(":")
    dtype, (b, hq, sq, ctx), ragged = DTYPES[f[0]], (int(x) for x in f[1:5]), f[5] == "ragged"
    if len(f) > 6 and f[6] == "contiguous":
        return None
    g = torch.Generator().manual_seed(ctx * 31 + b)
    if ragged:
        seqlens = (torch.rand(b, generator=g) * ctx + ctx / 2).int()
    else:
        seqlens = torch.full((b,), ctx, dtype=torch.int32)
    seqlens = seqlens.cuda()
    max_blocks = (int(seqlens.max()) + 63) // 64
    block_table = torch.arange(b * max_blocks, dtype=torch.int32, device="cuda").view(b, max_blocks)
    cache = torch.randn(b * max_blocks, 64, 1, 576, dtype=dtype, device="cuda")
    q = torch.randn(b, sq, hq, 576, dtype=dtype, device="cuda")
    meta, splits = flash_mla.get_mla_metadata(seqlens, sq * hq, 1)
    scale = 192 ** -0.5

    def run():
        flash_mla.flash_mla_with_kvcache(q, cache, block_table, seqlens, 512, meta, splits, softmax_scale=scale, causal=True)

    return time_ms(run, warmup, iters), int(seqlens.sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="peers.csv")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("specs", nargs="+")
    a = ap.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    rows = []
    x = torch.empty(1 << 30, dtype=torch.float16, device="cuda")
    ms = time_ms(lambda: x.clone(), 3, 20)
    rows.append(("torch_clone", f"copy:{4 << 30}", ms, ""))
    print(f"RESULT mla_peer impl=torch_clone gbps={(4 << 30) / (ms * 1e-3) / 1e9:.0f}")
    del x
    try:
        import flash_mla  # noqa: F401

        have = True
    except ImportError as e:
        print(f"flash_mla does not import ({e}): FlashMLA left out", file=sys.stderr)
        have = False
    for spec in a.specs if have else []:
        try:
            timed = flashmla_ms(spec, a.warmup, a.iters)
        except Exception as e:  # a shape FlashMLA refuses
            print(f"flashmla {spec}: {e}", file=sys.stderr)
            continue
        if timed is not None:
            ms, total = timed
            rows.append(("flashmla", spec, ms, total))
            # Its own lengths (ragged ones are not ours): the FLOPs and bytes follow from them.
            print(f"RESULT mla_peer impl=flashmla shape={spec} ms={ms:.4f} sum_seqlen={total}")
        torch.cuda.empty_cache()
    with open(a.out, "w") as out:
        out.write("impl,spec,ms,sum_seqlen\n")
        for r in rows:
            out.write(f"{r[0]},{r[1]},{r[2]:.5f},{r[3]}\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
