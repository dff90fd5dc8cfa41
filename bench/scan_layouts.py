"""selective_scan_fn on the layouts models pass, side by side (the runtime's heuristic
policy, bf16, N=16, variable B/C, D, z, delta_bias, softplus):
- contiguous: [B, D, L] tensors;
- mamba: u, delta and xz in [D, B, L] memory (Mamba's "d (b l) -> b d l"), z the second
  half of xz: the rows of u, delta, z and out share their offsets, so ragged=shift reads
  whole vectors;
- mixed: u contiguous, delta in Mamba's layout: the rows disagree in their offsets (for
  B > 1), so ragged=shift runs as ragged=async.
Also prints out's strides (it keeps a dense u's layout). On the GPU machine:

    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
    AUTOTUNE_LIBRARY=$PWD/.device/libautotune.so python3 bench/scan_layouts.py
"""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import autotune  # noqa: E402

DT = torch.bfloat16


def rows(B, D, L, mamba):
    if mamba:
        return torch.randn(D, B, L, device="cuda", dtype=DT).permute(1, 0, 2)
    return torch.randn(B, D, L, device="cuda", dtype=DT)


def run(B, D, L, layout):
    mamba = layout == "mamba"
    u = rows(B, D, L, mamba)
    delta = rows(B, D, L, mamba or layout == "mixed") * 0.1
    xz = rows(B, 2 * D, L, mamba)
    z = xz[:, D:]
    A = -torch.rand(D, 16, device="cuda") - 0.5
    Bm = torch.randn(B, 1, 16, L, device="cuda", dtype=DT)
    Cm = torch.randn(B, 1, 16, L, device="cuda", dtype=DT)
    Dv = torch.randn(D, device="cuda")
    bias = torch.rand(D, device="cuda") * 0.1

    def call():
        return autotune.selective_scan_fn(u, delta, A, Bm, Cm, Dv, z=z, delta_bias=bias,
                                          delta_softplus=True)

    out = call()
    ms = do_bench(call, warmup=25, rep=100)
    gbps = 4 * B * D * L * 2 / (ms * 1e-3) / 1e9  # u, delta, z read, out written
    print(f"B={B} D={D} L={L} {layout:10s} {ms * 1e3:8.1f} us {gbps:7.0f} GB/s "
          f"out strides {tuple(out.stride())}", flush=True)


def main():
    torch.manual_seed(0)
    autotune.set_policy("heuristic")
    for shape in ((2, 2560, 2047), (1, 5120, 2047), (4, 2048, 1500)):
        for layout in ("contiguous", "mamba", "mixed"):
            run(*shape, layout)


if __name__ == "__main__":
    main()
