#!/usr/bin/env python3
"""A grouped-query attention block as model code on autotune's flash_attn_func (the
flash-attn 2 signature: `from autotune import flash_attn_func` in place of
`from flash_attn import flash_attn_func`). q, k and v come from one fused projection;
v goes to the kernel as a view of it ([batch, seqlen, heads, headdim] with the sequence
stride of the fused row), read in place; 16 query heads share 4 key/value heads;
rotary embeddings on q and k.

Runs the bf16 block eagerly and under torch.compile(fullgraph=True), for a causal
prefill and for a decoding step (one new query against the cached keys, causal
bottom-right aligned), and checks them against the same block in float32 with PyTorch's
scaled_dot_product_attention.

    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
    python3 examples/gqa_attention.py --lib .device/libautotune.so

Exit status 1 when a result is off.
"""
import argparse
import copy
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import autotune  # noqa: E402  (the library is looked for at the first call, not here)
from autotune import flash_attn_func  # noqa: E402


def rotary(x, positions, base=10000.0):
    """Rotary position embedding on [batch, seqlen, heads, headdim] (halves rotated)."""
    half = x.shape[-1] // 2
    freqs = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.float()[:, None] * freqs[None]  # [seqlen, half]
    cos, sin = angles.cos()[None, :, None], angles.sin()[None, :, None]
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


class GQAAttention(nn.Module):
    """kernels="autotune": flash_attn_func; kernels="torch": SDPA on repeated k/v heads."""

    def __init__(self, d_model=2048, n_heads=16, n_kv_heads=4, device=None, dtype=None):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        self.kernels = "autotune"
        self.wqkv = nn.Linear(d_model, (n_heads + 2 * n_kv_heads) * self.head_dim, bias=False,
                              device=device, dtype=dtype)
        self.wo = nn.Linear(n_heads * self.head_dim, d_model, bias=False, device=device,
                            dtype=dtype)

    def forward(self, x, cache=None):
        """x: [batch, seqlen, d_model]; cache: (k, v) of the earlier positions or None.
        Returns the output and the cache extended by x's keys and values."""
        b, s, _ = x.shape
        hq, hkv, d = self.n_heads, self.n_kv_heads, self.head_dim
        qkv = self.wqkv(x)  # one projection; q, k, v are views of it
        q = qkv[..., :hq * d].view(b, s, hq, d)
        k = qkv[..., hq * d:(hq + hkv) * d].view(b, s, hkv, d)
        v = qkv[..., (hq + hkv) * d:].view(b, s, hkv, d)
        start = 0 if cache is None else cache[0].shape[1]
        positions = torch.arange(start, start + s, device=x.device)
        q, k = rotary(q, positions), rotary(k, positions)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=1)
            v = torch.cat([cache[1], v], dim=1)
        if self.kernels == "autotune":
            o = flash_attn_func(q, k, v, causal=True)
        else:
            g = hq // hkv
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.repeat_interleave(g, 2).transpose(1, 2),
                v.repeat_interleave(g, 2).transpose(1, 2),
                attn_mask=torch.ones(s, k.shape[1], dtype=torch.bool, device=x.device).tril(
                    k.shape[1] - s)).transpose(1, 2)
        return self.wo(o.reshape(b, s, hq * d)), (k, v)


def rel_err(out, ref):
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", help="libautotune.so (else $AUTOTUNE_LIBRARY, the package's search)")
    ap.add_argument("--db", help="tuning database (else $AUTOTUNE_DB)")
    args = ap.parse_args()
    if args.lib:
        os.environ["AUTOTUNE_LIBRARY"] = os.path.abspath(args.lib)
    if args.db:
        autotune.set_database(args.db)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    block = GQAAttention(device="cuda", dtype=torch.bfloat16).eval()
    reference = copy.deepcopy(block).float()
    reference.kernels = "torch"
    prompt = torch.randn(2, 500, 2048, device="cuda", dtype=torch.bfloat16)
    step = torch.randn(2, 1, 2048, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(block, fullgraph=True)
    failures = 0
    with torch.no_grad():
        ref, ref_cache = reference(prompt.float())
        ref_step, _ = reference(step.float(), ref_cache)
        for name, fn in (("eager", block), ("torch.compile(fullgraph=True)", compiled)):
            out, cache = fn(prompt)
            out_step, _ = fn(step, cache)
            for what, o, r in (("prefill, 500 tokens", out, ref),
                               ("decode step against 500 cached", out_step, ref_step)):
                err = rel_err(o, r)
                ok = o.dtype == torch.bfloat16 and o.shape == r.shape and err < 2e-2
                print(f"GQA block {name}, {what}: relative error {err:.2e} vs the float32 "
                      f"SDPA block ({'ok' if ok else 'OFF'})")
                failures += not ok
    print("ok" if failures == 0 else f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
