#!/usr/bin/env python3
"""Which portable-family tile serves a decoding step (Sq of 1-4, a contiguous or paged
cache) that nobody tuned: each shape's variants over a restricted space measured in full
by the tuner (`autotune --shape S --strategy exhaustive`), beside what the runtime runs
for it under the `heuristic` and `nearest` policies (an empty database: the built-in
points; paged shapes get no policy rows). Results: bench/results/h100-decode-points.json;
bench/notes/attention-features.md reads them.

On the GPU machine (bundle in .device/):
  python3 bench/decode_points.py --lib .device/libautotune.so --cli .device/autotune \
      --out $OUT [--set fit|validate] [--name FILE] [--shape "B=4,Hq=16,...,Sk=333,D=64" ...]

Prints per shape the fastest variants, where each policy's variant ranks and its time
against the best (tuner medians of one run), and writes --out/FILE.json (default
decode-points.json) with every variant measured.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "runtime", "python"))

# Decoding steps of real models: MHA (Hq = Hkv: one row a block), GQA 4 and 8, head dims
# 64 and 128, short to long contexts, 4 new queries; the fifth is a built-in point's own.
SHAPES = [
    "B=4,Hq=16,Hkv=16,Sq=1,Sk=333,D=64,causal=1",
    "B=1,Hq=32,Hkv=32,Sq=1,Sk=2000,D=128,causal=1",
    "B=16,Hq=32,Hkv=32,Sq=1,Sk=700,D=128,causal=1",
    "B=4,Hq=64,Hkv=8,Sq=1,Sk=3000,D=128,causal=1",
    "B=8,Hq=32,Hkv=8,Sq=1,Sk=1024,D=128,causal=1",
    "B=2,Hq=32,Hkv=32,Sq=1,Sk=8000,D=128,causal=1",
    "B=8,Hq=32,Hkv=4,Sq=1,Sk=1500,D=64,causal=1",
    "B=32,Hq=32,Hkv=8,Sq=1,Sk=500,D=128,causal=1",
    "B=64,Hq=12,Hkv=12,Sq=1,Sk=200,D=64,causal=1",
    "B=4,Hq=32,Hkv=8,Sq=4,Sk=1500,D=128,causal=1",
    # Paged caches (the tuner draws each sequence's length in [1, Sk]); no policy rows.
    "B=8,Hq=32,Hkv=8,Sq=1,Sk=4096,D=128,causal=1,paged=1,page=256",
    "B=32,Hq=32,Hkv=8,Sq=1,Sk=1024,D=128,causal=1,paged=1,page=256",
]

# Shapes the adapt rule was not fitted on (its check, run after the rule was written).
VALIDATE = [
    "B=2,Hq=40,Hkv=40,Sq=1,Sk=1200,D=128,causal=1",
    "B=12,Hq=32,Hkv=8,Sq=1,Sk=2500,D=128,causal=1",
    "B=1,Hq=64,Hkv=8,Sq=1,Sk=16000,D=128,causal=1",
    "B=24,Hq=16,Hkv=16,Sq=1,Sk=900,D=64,causal=1",
    "B=3,Hq=28,Hkv=4,Sq=1,Sk=777,D=128,causal=1",
    "B=48,Hq=32,Hkv=8,Sq=1,Sk=3000,D=128,causal=1",
    "B=2,Hq=32,Hkv=8,Sq=2,Sk=5000,D=128,causal=1",
    "B=6,Hq=32,Hkv=8,Sq=1,Sk=20000,D=128,causal=1",
    "B=16,Hq=12,Hkv=12,Sq=1,Sk=100,D=64,causal=1",
    "B=16,Hq=32,Hkv=8,Sq=1,Sk=2048,D=128,causal=1,paged=1,page=256",
]

SPACE = ["family=mma|wgmma", "block_m=16|32|64", "block_n=64|128", "stages=1|2",
         "splits=1|2|4|8|16", "q=regs|smem", "swizzle=xor|pad", "warps=4"]


def parse(text):
    out = {}
    for kv in text.split(","):
        k, v = kv.split("=")
        out[k] = v
    return out


def config_of(variant):
    """The configuration part of a runtime variant string ('SOURCE ... k=v,...')."""
    return variant.rsplit(" ", 1)[-1]


def same(a, b):
    return parse(a) == parse(b)


def policy_variants(lib, shape):
    """{policy: configuration} the runtime runs for shape with an empty database."""
    import torch
    import autotune_runtime
    import unseen
    s = {k: (v if k in ("dtype", "layout") else int(v)) for k, v in parse(shape).items()}
    s.setdefault("dtype", "bf16")
    s.setdefault("layout", "bshd")
    case = unseen.attention_case(s)
    out = {}
    for policy in ("heuristic", "nearest"):
        rt = autotune_runtime.Runtime(lib, "/nonexistent/decode-points.db", policy=policy)
        case.run(rt)()
        torch.cuda.synchronize()
        out[policy] = rt.variant("attention", case.args(rt))
        err = case.check()
        if not err < 2e-2:
            raise SystemExit(f"{shape} under {policy}: rel_err {err}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", action="append", help="default: the --set list")
    ap.add_argument("--set", choices=["fit", "validate"], default="fit",
                    help="fit: the shapes the adapt rule was written from; validate: others")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--name", default="decode-points", help="output file name (.json)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = []
    for shape in args.shape or (SHAPES if args.set == "fit" else VALIDATE):
        policies = {} if "paged=1" in shape else policy_variants(args.lib, shape)
        # The space, widened by each policy's own values so that their variants are run.
        params = {p.split("=")[0]: p.split("=")[1].split("|") for p in SPACE}
        for v in policies.values():
            for k, val in parse(config_of(v)).items():
                if k in params and val not in params[k]:
                    params[k].append(val)
        db = os.path.join("/tmp", f"decode-points-{os.getpid()}.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db + suffix):
                os.remove(db + suffix)
        cmd = [args.cli, "--arch", "auto", "--op", "attention", "--shape", shape, "--db", db,
               "--strategy", "exhaustive", "--json", "--quiet"]
        for k, vals in params.items():
            cmd += ["--param", f"{k}={'|'.join(vals)}"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-1000:]}")
        prob = json.loads(p.stdout)["problems"][0]
        ok = sorted((v for v in prob["variants"] if v["outcome"] == "OK" and v.get("median_us")),
                    key=lambda v: v["median_us"])
        best = ok[0]["median_us"]
        print(f"\n{shape}: {len(ok)} variants measured, best {best:.2f} us")
        for v in ok[:args.top]:
            print(f"  {v['median_us']:8.2f}  {v['variant']}")
        row = {"shape": shape, "measured": len(ok), "best_us": best,
               "variants": [(v["variant"], v["median_us"]) for v in ok], "policies": {}}
        for policy, variant in policies.items():
            mine = [(i, v) for i, v in enumerate(ok) if same(v["variant"], config_of(variant))]
            if mine:
                i, v = mine[0]
                print(f"  {policy}: rank {i + 1}, {v['median_us']:.2f} us, "
                      f"{best / v['median_us']:.3f} of the best: {variant}")
                row["policies"][policy] = {"variant": variant, "rank": i + 1,
                                           "us": v["median_us"], "ratio": best / v["median_us"]}
            else:
                print(f"  {policy}: not measured in this run: {variant}")
                row["policies"][policy] = {"variant": variant}
        results.append(row)
    with open(os.path.join(args.out, args.name + ".json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
