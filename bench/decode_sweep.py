#!/usr/bin/env python3
"""Every decode shape of bench_attention_features.py (section d: a paged KV cache, every
sequence full) timed under a list of pinned variants, beside the copy of the same bytes:
which schedule reads a full cache fastest, independent of what the tuner stored (it tunes
on cache lengths drawn in [1, Sk]). For bench/notes/attention-features.md, not a results
file.

On the GPU machine (bundle in .device/):
  python3 bench/decode_sweep.py --lib .device/libautotune.so --out $OUT
prints one line per (shape, variant) and writes --out/decode-sweep.json.
"""
import argparse
import itertools
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import bench_attention_features as baf  # noqa: E402


def variants(block_ms, warps, splits, block_ns, stages, q="smem"):
    base = f"swizzle=xor,q={q},family=mma"
    return [f"block_m={m},block_n={n},warps={w},stages={st},splits={sp},{base}"
            for m, w, sp, n, st in itertools.product(block_ms, warps, splits, block_ns, stages)
            # warps sharing 16-row tiles split each key tile in whole 16-key steps
            if m >= 16 * w or n % (16 * (16 * w // m)) == 0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=os.path.join(HERE, "shapes.toml"))
    ap.add_argument("--block-m", default="64", help="16 and 32: warps sharing rows (split "
                    "keys)")
    ap.add_argument("--warps", default="4")
    ap.add_argument("--splits", default="1,2,4,8,16")
    ap.add_argument("--block-n", default="64,128")
    ap.add_argument("--stages", default="1,2,3")
    ap.add_argument("--q", choices=["smem", "regs"], default="smem",
                    help="where the query tile stays (the q parameter)")
    ap.add_argument("--batch", default="", help="only these B (comma-separated)")
    ap.add_argument("--context", default="", help="only these contexts (comma-separated)")
    ap.add_argument("--flush", choices=["dirty", "clean"], default="dirty",
                    help="L2 flush before each timed call: do_bench's (a zeroed buffer: dirty "
                    "lines) or bench_common.do_bench_clean_l2's (read after it: clean)")
    ap.add_argument("--rep", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    baf.gpu_modules()
    import torch
    from autotune import Runtime
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    configs = variants(ints(args.block_m), ints(args.warps), ints(args.splits),
                       ints(args.block_n), ints(args.stages), args.q)
    cases = [c for c in baf.cases_of(args.shapes, ["decode"]) if not c["skip"]
             and (not args.batch or c["shape"]["B"] in ints(args.batch))
             and (not args.context or c["shape"]["context"] in ints(args.context))]
    bench_args = argparse.Namespace(lib=args.lib, db=None, rep=args.rep, warmup=args.warmup)
    rows = []
    for cfg in configs:
        # No database: the pinned variant runs.
        b = baf.Bench(bench_args, Runtime(args.lib, "/tmp/decode-sweep-no.db",
                                          policy="pin:" + cfg))
        b.peers = lambda row, fns, metric, digits=1: None  # ours only
        b.clean_l2 = args.flush == "clean"
        for c in cases:
            row = b.new_row(c)
            baf.run_decode(b, c, row)
            s = c["shape"]
            pct = None if not row["ours"] else round(100 * row["ours"] / 2970, 1)
            rows.append({"B": s["B"], "context": s["context"], "config": cfg,
                         "us": row["ours_us"], "GBps": row["ours"], "pct_of_2.97": pct,
                         "rel_err": row["rel_err"], "notes": row["notes"]})
            print(f"B={s['B']:3d} ctx={s['context']:6d} {cfg:80s} {row['ours_us']} us "
                  f"{pct}% err={row['rel_err']} {row['notes'] or ''}", flush=True)
            torch.cuda.empty_cache()
    best = {}
    for r in rows:
        k = (r["B"], r["context"])
        if r["us"] and (k not in best or r["us"] < best[k]["us"]):
            best[k] = r
    print("best per shape:")
    for k, r in sorted(best.items()):
        print(f"  B={k[0]} ctx={k[1]}: {r['us']} us, {r['pct_of_2.97']}% -- {r['config']}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "decode-sweep.json"), "w") as f:
        json.dump({"rows": rows, "best": [best[k] for k in sorted(best)]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
