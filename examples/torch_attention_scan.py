#!/usr/bin/env python3
"""PyTorch tensors through autotune's runtime (C ABI, ctypes): attention and the
selective scan, each checked against a float64 PyTorch reference.

    python3 examples/torch_attention_scan.py --lib build/libautotune.so [--db tuning.db]

Shapes untuned in the database run the ops' default variants; a split-KV attention
winner (tune a decoding shape first, e.g.
`autotune --arch auto --op attention --shape "B=1,Hq=32,Hkv=8,Sq=1,Sk=4096,D=128"`)
gets its workspace from the bindings. Exit status 1 when a result is off.
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime",
                                "python"))
import autotune_runtime  # noqa: E402


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def attention_reference(q, k, v, causal):
    """float64 softmax(Q K^T / sqrt(D) + mask) V on [B, S, H, D] tensors (GQA by repeat)."""
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    rep = qd.shape[1] // kd.shape[1]
    kd, vd = kd.repeat_interleave(rep, 1), vd.repeat_interleave(rep, 1)
    s = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:  # bottom-right aligned
        sq, sk = s.shape[-2], s.shape[-1]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(-1) @ vd).transpose(1, 2)


def scan_reference(u, delta, A, B, C, D, z, bias):
    """float64 Mamba-1 selective scan, step by step (variable B/C, one group)."""
    u, delta, z = u.double(), delta.double(), z.double()
    A, B, C, D, bias = A.double(), B.double()[:, 0], C.double()[:, 0], D.double(), bias.double()
    dt = torch.nn.functional.softplus(delta + bias[None, :, None])
    h = torch.zeros(u.shape[0], u.shape[1], A.shape[1], dtype=torch.float64, device=u.device)
    ys = []
    for t in range(u.shape[2]):
        a = torch.exp(dt[:, :, t, None] * A[None])
        h = a * h + (dt[:, :, t] * u[:, :, t])[:, :, None] * B[:, None, :, t]
        ys.append((h * C[:, None, :, t]).sum(-1) + D[None] * u[:, :, t])
    y = torch.stack(ys, -1)
    return y * z * torch.sigmoid(z)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--db", default=None)
    args = ap.parse_args()
    at = autotune_runtime.Runtime(args.lib, args.db)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    failures = 0

    for B, Hq, Hkv, Sq, Sk, D, causal in ((2, 8, 2, 300, 300, 64, True),
                                          (1, 32, 8, 1, 4096, 128, False)):
        q = torch.randn(B, Sq, Hq, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, Sk, Hkv, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, Sk, Hkv, D, device=dev, dtype=torch.bfloat16)
        ref = attention_reference(q, k, v, causal)
        o, lse = at.attention(q, k, v, causal=causal, return_lse=True)
        o2 = at.attention(q, k, v, causal=causal)
        o3 = at.attention(q, k, v, causal=causal)  # reuses any workspace of the call before
        torch.cuda.synchronize()
        err = max(rel_err(o, ref), rel_err(o2, ref))
        same = torch.equal(o2, o3)
        variant = at.variant("attention", at.attention_args(q, k, v, o2, None, causal))
        print(f"attention B={B} Hq={Hq} Hkv={Hkv} Sq={Sq} Sk={Sk} D={D} causal={causal}: "
              f"rel err {err:.2e}, repeat identical {same}, {variant}, "
              f"workspaces held {len(at.workspaces)}")
        failures += err > 1e-2 or not same or not torch.isfinite(lse).all().item()

    Bn, Dn, L, N = 2, 64, 300, 16
    u = torch.randn(Bn, Dn, L, device=dev, dtype=torch.bfloat16)
    delta = (torch.rand(Bn, Dn, L, device=dev) * -3).to(torch.bfloat16)
    z = torch.randn(Bn, Dn, L, device=dev, dtype=torch.bfloat16)
    A = -(torch.rand(Dn, N, device=dev) * 1.99 + 0.01)
    Bm = torch.randn(Bn, 1, N, L, device=dev, dtype=torch.bfloat16)
    Cm = torch.randn(Bn, 1, N, L, device=dev, dtype=torch.bfloat16)
    Dv = torch.rand(Dn, device=dev) * 2 - 1
    bias = -torch.rand(Dn, device=dev)
    y, last = at.selective_scan(u, delta, A, Bm, Cm, D=Dv, z=z, delta_bias=bias,
                                return_last_state=True)
    torch.cuda.synchronize()
    err = rel_err(y, scan_reference(u, delta, A, Bm, Cm, Dv, z, bias))
    print(f"selective_scan B={Bn} D={Dn} L={L} N={N}: rel err {err:.2e}, last state "
          f"{tuple(last.shape)} finite {torch.isfinite(last).all().item()}")
    failures += err > 1e-2 or not torch.isfinite(last).all().item()
    print("ok" if failures == 0 else f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
