#!/usr/bin/env python3
"""Times PyTorch SDPA on attention shapes: the peers of our FlashAttention
benchmark (examples/flash_attention.rs --bench --peers CSV).

    attention_peers.py [--out peers.csv] [--warmup 10] [--iters 50] SPEC..

Each SPEC is dtype:b:h:h_kv:s_q:s_k:d:causal (what `example-flash_attention
--list-shapes` prints); q, k, v are contiguous [b, h, s, d] CUDA tensors.
Backends: cuDNN (SDPBackend.CUDNN_ATTENTION) and flash
(SDPBackend.FLASH_ATTENTION), each forced with torch.nn.attention.sdpa_kernel.
Timing: `warmup` calls, then `iters` calls each between two CUDA events;
the median is reported. A backend that refuses a shape is reported on stderr
and left out. Writes `impl,spec,ms` lines (impl: cudnn, flash) and prints a
`RESULT attention_peer ...` line per measurement.
"""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def parse(spec):
    f = spec.split(":")
    if len(f) < 8:
        raise SystemExit(f"bad spec {spec!r}: expected dtype:b:h:h_kv:s_q:s_k:d:causal")
    b, h, hkv, sq, sk, d, causal = (int(x) for x in f[1:8])
    return DTYPES[f[0]], b, h, hkv, sq, sk, d, bool(causal)


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="peers.csv")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("specs", nargs="+")
    a = ap.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    rows = []
    for spec in a.specs:
        dtype, b, h, hkv, sq, sk, d, causal = parse(spec)
        if sq != sk and causal:
            # SDPA's is_causal is aligned top-left; ours bottom-right. Equal only for s_q == s_k.
            print(f"skip {spec}: causal with s_q != s_k differs between SDPA and ours", file=sys.stderr)
            continue
        q = torch.randn(b, h, sq, d, device="cuda", dtype=dtype)
        k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype)
        v = torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype)
        flops = 4 * b * h * sq * sk * d / (2 if causal else 1)
        for name, backend in BACKENDS:
            kw = {"is_causal": causal}
            if hkv != h:
                kw["enable_gqa"] = True

            def run():
                return F.scaled_dot_product_attention(q, k, v, **kw)

            try:
                # The backend is forced around the whole measurement (entering the
                # context per call would time Python, not the kernel, at small shapes).
                with sdpa_kernel(backend):
                    run()
                    torch.cuda.synchronize()
                    ms = time_ms(run, a.warmup, a.iters)
            except Exception as e:  # the backend refuses this shape (or this torch lacks it)
                print(f"{name} {spec}: not available: {str(e).splitlines()[0][:200]}", file=sys.stderr)
                continue
            rows.append((name, spec, ms))
            print(f"RESULT attention_peer impl={name} shape={spec} ms={ms:.4f} tflops={flops / ms / 1e9:.1f}")
        del q, k, v
        torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        f.write("impl,spec,ms\n")
        for name, spec, ms in rows:
            f.write(f"{name},{spec},{ms:.5f}\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
