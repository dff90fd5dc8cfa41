#!/usr/bin/env python3
"""PyTorch calling autotune's runtime through the C ABI (libautotune.so), no
Python-side JIT: the tuned winner for each shape runs on PyTorch's own stream, in
the same (primary) CUDA context.

    autotune --arch auto --op causal_conv1d --shape "B=2,C=512,L=1000,W=4,dtype=bf16,silu=1"
    python3 examples/torch_causal_conv1d.py --lib build/libautotune.so
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "python"))
import autotune_runtime  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libautotune.so")
    ap.add_argument("--db", default=None)
    args = ap.parse_args()
    at = autotune_runtime.Runtime(args.lib, args.db)
    x = torch.randn(2, 512, 1000, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, 4, device="cuda", dtype=torch.bfloat16) * 0.5
    b = torch.randn(512, device="cuda", dtype=torch.bfloat16) * 0.5
    state = torch.randn(2, 512, 3, device="cuda", dtype=torch.bfloat16)
    final = torch.empty_like(state)
    ours = at.causal_conv1d(x, w, b, silu=True, initial_states=state, final_states=final)
    # Reference: the initial state is the input before t = 0.
    xs = torch.cat([state, x], dim=2).double()
    ref = F.silu(F.conv1d(xs, w.double().unsqueeze(1), b.double(), groups=512))
    err = ((ours.double() - ref).norm() / ref.norm()).item()
    print(f"relative error vs float64 torch: {err:.2e}; final state exact: "
          f"{torch.equal(final, x[..., -3:])}")
    assert err < 1e-2 and torch.equal(final, x[..., -3:])


if __name__ == "__main__":
    main()
