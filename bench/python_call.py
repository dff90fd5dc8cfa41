#!/usr/bin/env python3
"""Host time of a warm call from Python, ours (runtime/python/autotune_runtime.py over
libautotune.so) beside torch's own ops, at launch-bound sizes: rows python_call_us
(median over single calls) and python_call_p99_us for bench/results/<gpu>-tuning.json.

  python3 bench/python_call.py --lib .device/libautotune.so [--calls 2000]

Each call is timed alone on the host (perf_counter around the call, the stream
synchronized every 50 calls so launches never wait for a full queue). Nothing is
tuned: the default variants run, which changes the GPU time, not the host time.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runtime", "python"))
import autotune_runtime  # noqa: E402


def host_times(fn, calls):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
        if i % 50 == 49:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    rt = autotune_runtime.Runtime(args.lib, "/nonexistent/autotune-python-call.db")
    dev = "cuda"
    bf16 = torch.bfloat16
    # attention: [B, S, H, D] as flash-attn callers pass it
    q = torch.randn(1, 128, 4, 64, device=dev, dtype=bf16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    # causal_conv1d
    x = torch.randn(1, 64, 256, device=dev, dtype=bf16)
    w = torch.rand(64, 4, device=dev, dtype=bf16) - 0.5
    b = torch.rand(64, device=dev, dtype=bf16) - 0.5
    # selective_scan
    u = torch.randn(1, 64, 256, device=dev, dtype=bf16)
    delta = torch.rand(1, 64, 256, device=dev, dtype=bf16) - 3
    A = -torch.rand(64, 16, device=dev) - 0.01
    Bm = torch.randn(1, 16, 256, device=dev, dtype=bf16)
    Cm = torch.randn(1, 16, 256, device=dev, dtype=bf16)
    Dv = torch.rand(64, device=dev)
    z = torch.randn_like(u)
    dbias = -torch.rand(64, device=dev)
    cases = {
        "attention": lambda: rt.attention(q, k, v, causal=True),
        "sdpa": lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
        "causal_conv1d": lambda: rt.causal_conv1d(x, w, b, silu=True),
        "conv1d": lambda: F.silu(F.conv1d(x, w.unsqueeze(1), b, padding=3, groups=64)[..., :256]),
        "selective_scan": lambda: rt.selective_scan(u, delta, A, Bm, Cm, D=Dv, z=z,
                                                    delta_bias=dbias, delta_softplus=True),
    }
    for op, fn in cases.items():
        med, p99 = host_times(fn, args.calls)
        notes = "torch" if op in ("sdpa", "conv1d") else "autotune_runtime over the C ABI"
        print(json.dumps({"name": "python_call_us", "op": op, "value": round(med, 2),
                          "unit": "us", "notes": f"median host time of a warm call ({notes})"}))
        print(json.dumps({"name": "python_call_p99_us", "op": op, "value": round(p99, 2),
                          "unit": "us"}))


if __name__ == "__main__":
    main()
