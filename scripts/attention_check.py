#!/usr/bin/env python3
"""Checks dumps of our FlashAttention forward (`example-flash_attention
--dump DIR SPEC..`) against PyTorch SDPA in float32 on the GPU.

    attention_check.py DIR..

Each DIR holds meta.txt (dtype:b:h:h_kv:s_q:s_k:d:causal[:layout]), q.bin,
k.bin, v.bin, o.bin (raw little-endian f16/bf16, layout bhsd or bshd) and
lse.bin (f32 [b, h, s_q]). The reference upcasts q, k, v to float32, repeats
the key/value heads for GQA, and runs SDPA (math backend) with an explicit
boolean mask for causal: row i sees keys j <= i + s_k - s_q (bottom-right,
as our kernels; PyTorch's `is_causal` is top-left and agrees only when
s_q == s_k). Rows that see no key are expected to be o = 0, lse = -inf.
The LSE reference is logsumexp of the masked scores. Prints one
`RESULT attention_check ...` line per dump; exits 1 if any is off.
"""
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOL = {"f16": 5e-3, "bf16": 2e-2}


def load(path, dtype, shape):
    raw = np.fromfile(path, dtype=np.uint16)
    t = torch.from_numpy(raw.astype(np.int16)).view(torch.float16 if dtype == "f16" else torch.bfloat16)
    return t.reshape(shape).cuda().float()


def check(d):
    f = open(f"{d}/meta.txt").read().split()[0].split(":")
    dtype = f[0]
    b, h, hkv, sq, sk, hd, causal = (int(x) for x in f[1:8])
    layout = f[8] if len(f) > 8 else "bhsd"

    def shape(heads, s):
        return (b, heads, s, hd) if layout == "bhsd" else (b, s, heads, hd)

    def to_bhsd(t):
        return t if layout == "bhsd" else t.transpose(1, 2)

    q = to_bhsd(load(f"{d}/q.bin", dtype, shape(h, sq)))
    k = to_bhsd(load(f"{d}/k.bin", dtype, shape(hkv, sk)))
    v = to_bhsd(load(f"{d}/v.bin", dtype, shape(hkv, sk)))
    o = to_bhsd(load(f"{d}/o.bin", dtype, shape(h, sq)))
    lse = torch.from_numpy(np.fromfile(f"{d}/lse.bin", dtype=np.float32)).reshape(b, h, sq).cuda()
    k = k.repeat_interleave(h // hkv, dim=1)
    v = v.repeat_interleave(h // hkv, dim=1)
    scale = 1.0 / math.sqrt(hd)
    i = torch.arange(sq, device="cuda")[:, None]
    j = torch.arange(sk, device="cuda")[None, :]
    mask = (j <= i + (sk - sq)) if causal else torch.ones(sq, sk, dtype=torch.bool, device="cuda")
    seen = mask.any(dim=1)  # rows that see at least one key
    o_ref = torch.empty_like(o)
    lse_ref = torch.empty_like(lse)
    for bi in range(b):  # one batch at a time: the scores are b*h*sq*sk floats
        with sdpa_kernel(SDPBackend.MATH):
            o_ref[bi] = F.scaled_dot_product_attention(q[bi : bi + 1], k[bi : bi + 1], v[bi : bi + 1], attn_mask=mask)[0]
        s = torch.einsum("hqd,hkd->hqk", q[bi], k[bi]) * scale
        lse_ref[bi] = torch.logsumexp(s.masked_fill(~mask, float("-inf")), dim=-1)
    o_ref[:, :, ~seen] = 0.0
    lse_ref[:, :, ~seen] = float("-inf")
    finite = torch.isfinite(lse_ref)
    ok_special = bool(torch.equal(torch.isneginf(lse), torch.isneginf(lse_ref))) and not bool(torch.isnan(o).any())
    o_rel = ((o - o_ref).norm() / o_ref.norm().clamp_min(1e-30)).item()
    o_max = (o - o_ref).abs().max().item()
    lse_max = (lse[finite] - lse_ref[finite]).abs().max().item() if finite.any() else 0.0
    masked_zero = bool((o[:, :, ~seen] == 0).all())
    tol = TOL[dtype]
    ok = ok_special and masked_zero and o_rel <= tol and o_max <= 8 * tol and lse_max <= tol
    spec = ":".join(f)
    print(
        f"RESULT attention_check shape={spec} o_rel={o_rel:.2e} o_max={o_max:.2e} lse_max={lse_max:.2e} "
        f"unseen_rows={int((~seen).sum())} status={'ok' if ok else 'FAILED'}"
    )
    return ok


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: attention_check.py DIR..")
    ok = all([check(d) for d in sys.argv[1:]])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
