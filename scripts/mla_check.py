#!/usr/bin/env python3
"""Checks dumps of our MLA decode (`example-mla_decode --dump DIR SPEC..`)
against PyTorch in float32 (on the GPU when there is one).

    mla_check.py DIR..

Each DIR holds meta.txt (the spec dtype:b:h_q:s_q:ctx:lengths[:contiguous],
then `b s_q h_q ctx_max scale`), q.bin ([b, s_q, h_q, 576]) and kv.bin (the
keys of each batch in order, [b, ctx_max, 576], zero past each seqlen), both
raw little-endian f16/bf16; seqlens.bin (i32 [b]); out.bin (f32
[b, s_q, h_q, 512]) and lse.bin (f32 [b, h_q, s_q]). The reference upcasts
to float32: scores = scale * q k^T over the keys of the batch, token t of
s_q sees keys j <= seqlen - s_q + t (causal within the new tokens), V = the
first 512 columns of the keys, out = softmax(scores) V, lse = logsumexp
(natural log). Rows that see no key are expected to be out = 0, lse = -inf.
Prints one `RESULT mla_check ...` line per dump; exits 1 if any is off.
"""
import sys

import numpy as np
import torch

TOL = {"f16": 3e-3, "bf16": 1.5e-2}
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def load16(path, dtype, shape):
    raw = np.fromfile(path, dtype=np.uint16)
    t = torch.from_numpy(raw.astype(np.int16)).view(torch.float16 if dtype == "f16" else torch.bfloat16)
    return t.reshape(shape).to(DEV).float()


def load32(path, shape, np_dtype=np.float32):
    return torch.from_numpy(np.fromfile(path, dtype=np_dtype)).reshape(shape).to(DEV)


def check(d):
    lines = open(f"{d}/meta.txt").read().split("\n")
    spec = lines[0].strip()
    dtype = spec.split(":")[0]
    b, sq, hq, cmax = (int(x) for x in lines[1].split()[:4])
    scale = float(lines[1].split()[4])
    q = load16(f"{d}/q.bin", dtype, (b, sq, hq, 576))
    kv = load16(f"{d}/kv.bin", dtype, (b, cmax, 576))
    seqlens = np.fromfile(f"{d}/seqlens.bin", dtype=np.int32)
    out = load32(f"{d}/out.bin", (b, sq, hq, 512))
    lse = load32(f"{d}/lse.bin", (b, hq, sq))
    out_ref = torch.zeros_like(out)
    lse_ref = torch.full_like(lse, float("-inf"))
    for bi in range(b):
        n = int(seqlens[bi])
        if n <= 0:
            continue
        k = kv[bi, :n]  # [n, 576]
        s = torch.einsum("thd,jd->thj", q[bi], k) * scale  # [s_q, h_q, n]
        t = torch.arange(sq, device=DEV)[:, None, None]
        j = torch.arange(n, device=DEV)[None, None, :]
        s = s.masked_fill(j > n - sq + t, float("-inf"))
        l = torch.logsumexp(s, dim=-1)  # [s_q, h_q]
        p = torch.exp(s - l[..., None]).nan_to_num(0.0)
        out_ref[bi] = torch.einsum("thj,jc->thc", p, k[:, :512])
        lse_ref[bi] = l.transpose(0, 1)
    unseen = torch.isneginf(lse_ref)
    ok_special = bool(torch.equal(torch.isneginf(lse), unseen)) and not bool(torch.isnan(out).any())
    o_rel = ((out - out_ref).norm() / out_ref.norm().clamp_min(1e-30)).item()
    o_max = (out - out_ref).abs().max().item()
    finite = ~unseen
    lse_max = (lse[finite] - lse_ref[finite]).abs().max().item() if finite.any() else 0.0
    tol = TOL[dtype]
    ok = ok_special and o_rel <= tol and o_max <= 8 * tol and lse_max <= tol
    print(
        f"RESULT mla_check shape={spec} o_rel={o_rel:.2e} o_max={o_max:.2e} lse_max={lse_max:.2e} "
        f"unseen_rows={int(unseen.sum())} status={'ok' if ok else 'FAILED'}"
    )
    return ok


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: mla_check.py DIR..")
    ok = all([check(d) for d in sys.argv[1:]])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
