#!/usr/bin/env python3
"""Decoding several new queries per sequence against a paged KV cache (speculative
decoding's verification step, chunked prefill): how the time grows with Sq, and what
running a K/V head's G query heads as G * Sq rows of that head would give (the same call
with q reshaped to [B, Sq * G, Hkv, D], non-causal: exact there, one block reading each
K/V tile for all G heads). For bench/notes/attention-features.md, not a results file.

On the GPU machine (bundle in .device/):
  AUTOTUNE_LIBRARY=.device/libautotune.so python3 bench/decode_sq.py [--policy heuristic]
prints one line per (context, Sq): microseconds and GB/s of K/V read, per layout.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import autotune  # noqa: E402
import bench_common as common  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="heuristic")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--hq", type=int, default=32)
    ap.add_argument("--hkv", type=int, default=8)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--page", type=int, default=256)
    ap.add_argument("--contexts", default="1024,4096,16384")
    ap.add_argument("--sq", default="1,2,4,8,16")
    args = ap.parse_args()
    autotune.set_policy(args.policy)
    B, Hq, Hkv, D, page = args.batch, args.hq, args.hkv, args.d, args.page
    G = Hq // Hkv
    torch.manual_seed(0)
    print(f"B={B} Hq={Hq} Hkv={Hkv} D={D} page={page} policy={args.policy} bf16; "
          "us (GB/s of K/V read), clean L2")
    for ctx in [int(x) for x in args.contexts.split(",")]:
        per_seq = ctx // page
        nblocks = B * per_seq
        kc = torch.randn(nblocks, page, Hkv, D, device="cuda", dtype=torch.bfloat16)
        vc = torch.randn_like(kc)
        table = torch.randperm(nblocks).view(B, per_seq).to("cuda", torch.int32)
        kv_bytes = 2 * B * ctx * Hkv * D * 2
        for sq in [int(x) for x in args.sq.split(",")]:
            lens = torch.full((B,), ctx - sq, device="cuda", dtype=torch.int32)
            q = torch.randn(B, sq, Hq, D, device="cuda", dtype=torch.bfloat16)
            # The G heads of a K/V head as rows: [B, Sq, Hkv, G, D] -> [B, Sq * G, Hkv, D]
            qg = q.view(B, sq, Hkv, G, D).permute(0, 1, 3, 2, 4).reshape(B, sq * G, Hkv, D)
            cases = {
                "causal": lambda: autotune.flash_attn_with_kvcache(
                    q, kc, vc, cache_seqlens=lens + sq, block_table=table, causal=True),
                "non-causal": lambda: autotune.flash_attn_with_kvcache(
                    q, kc, vc, cache_seqlens=lens + sq, block_table=table, causal=False),
                "as rows (non-causal)": lambda: autotune.flash_attn_with_kvcache(
                    qg, kc, vc, cache_seqlens=lens + sq, block_table=table, causal=False),
            }
            out = []
            for name, fn in cases.items():
                try:
                    fn()
                    torch.cuda.synchronize()
                    ms = common.do_bench_clean_l2(fn, warmup=10, rep=40)
                    out.append(f"{name} {ms * 1e3:7.2f} ({kv_bytes / (ms * 1e-3) / 1e9:6.0f})")
                except Exception as e:  # noqa: BLE001
                    out.append(f"{name} failed: {str(e)[:80]}")
            print(f"ctx={ctx:6d} Sq={sq:2d}: " + "; ".join(out), flush=True)
        del kc, vc


if __name__ == "__main__":
    main()
