#!/usr/bin/env python3
"""causal_conv1d side by side with its peers, on the GPU machine.

Runs in one process, on the shapes of bench/shapes.toml [causal_conv1d]:
  ours          the tuned winner, launched through the C ABI (libautotune.so, ctypes)
  torch_conv1d  torch F.conv1d depthwise (cuDNN) + bias + SiLU, the same function
  copy          a device-to-device copy of the same byte count (the ceiling)
All are timed with triton.testing.do_bench (CUDA events, L2 flushed before every
sample, median). Writes bench/results/<gpu>-causal_conv1d.{json,md} under --out.

Usage: bench_causal_conv1d.py --lib .device/libautotune.so --db tuning.db --out DIR
       --commit SHA --command "the command line that ran this"
"""
import os
import sys

import torch
import torch.nn.functional as F

# bench_common, beside this script, also puts runtime/python on sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (arg_parser, bandwidth_row, load_spec,  # noqa: E402
                          time_bandwidth, write_results)
import autotune_runtime  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def main():
    args = arg_parser().parse_args()
    spec = load_spec(args.shapes, "causal_conv1d")
    rt = autotune_runtime.Runtime(args.lib, args.db, require_tuned=True)
    torch.manual_seed(0)
    dtype = DTYPES[spec["dtype"]]
    silu = bool(spec["silu"])
    use_bias = bool(spec["bias"])
    name = torch.cuda.get_device_name()
    rows = []
    for s in spec["shapes"]:
        B, C, L, W = s["B"], s["C"], s["L"], s["W"]
        x = torch.randn(B, C, L, device="cuda", dtype=dtype)
        w = (torch.rand(C, W, device="cuda", dtype=dtype) - 0.5)
        bias = (torch.rand(C, device="cuda", dtype=dtype) - 0.5) if use_bias else None
        out = torch.full_like(x, float("nan"))
        a = rt.causal_conv1d_args(x, w, bias, out, silu)
        variant = rt.causal_conv1d_variant(a)
        stream = torch.cuda.current_stream().cuda_stream
        launch = rt.lib.autotune_causal_conv1d

        def ours():
            # The prepared struct straight to the C ABI: what a production caller pays.
            rt.check(launch(rt.handle, a, stream))

        def peer():
            y = F.conv1d(x, w.unsqueeze(1), bias, padding=W - 1, groups=C)[..., :L]
            return F.silu(y) if silu else y

        src = torch.randn(B * C * L, device="cuda", dtype=dtype)
        dst = torch.empty_like(src)

        def copy():
            dst.copy_(src)

        ours()
        torch.cuda.synchronize()
        ref = F.conv1d(x.double(), w.double().unsqueeze(1),
                       bias.double() if bias is not None else None, padding=W - 1, groups=C)[..., :L]
        ref = F.silu(ref) if silu else ref
        rel_err = ((out.double() - ref).norm() / ref.norm()).item()
        peer_err = ((peer().double() - ref).norm() / ref.norm()).item()
        nbytes = 2 * B * C * L * x.element_size() + (C * W + (C if use_bias else 0)) * w.element_size()
        t, gbps = time_bandwidth({"ours": ours, "torch_conv1d": peer, "copy": copy}, nbytes,
                                 warmup=50, rep=300)
        shape = {"B": B, "C": C, "L": L, "W": W, "dtype": spec["dtype"], "bias": use_bias,
                 "silu": silu}
        rows.append(bandwidth_row(shape, "torch_conv1d", t, gbps, rel_err, peer_err, variant,
                                  pct_of_copy=round(100 * gbps["ours"] / gbps["copy"], 1)))
        r = rows[-1]
        print(f"B={B} C={C} L={L} W={W}: ours {r['ours_us']} us {r['ours']} GB/s "
              f"({r['pct_of_copy']}% of copy), torch {r['peers_us']['torch_conv1d']} us "
              f"({r['speedup_vs_torch_conv1d']}x), rel_err {rel_err:.2e}", flush=True)
        del x, out, src, dst
        torch.cuda.empty_cache()

    def table(f):
        f.write("Effective GB/s (x read once, out written once); all measured in one run.\n\n")
        f.write("| B | C | L | W | ours us | ours GB/s | % of copy | torch_conv1d GB/s | speedup | copy GB/s | rel_err | variant |\n")
        f.write("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            s = r["shape"]
            f.write(f"| {s['B']} | {s['C']} | {s['L']} | {s['W']} | {r['ours_us']} | {r['ours']} | "
                    f"{r['pct_of_copy']} | {r['peers']['torch_conv1d']} | {r['speedup_vs_torch_conv1d']}x | "
                    f"{r['peers']['copy']} | {r['rel_err']:.2e} | `{r['variant']}` |\n")

    ceilings = {"copy_TBps": round(max(r["peers"]["copy"] for r in rows) / 1e3, 3)}
    stem = write_results(args, "causal_conv1d", name, rows, ceilings, "GBps", table)
    print(f"wrote {stem}.json and .md")


if __name__ == "__main__":
    main()
