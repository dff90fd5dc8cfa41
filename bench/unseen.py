#!/usr/bin/env python3
"""Shapes nobody tuned: each op's time under each runtime policy for untuned shapes,
beside the time of the shape's own tuned winner and the peers.

On the GPU machine, after a benchmark run left the grid's database (bench/run_on_device.sh
OP tunes bench/shapes.toml's shapes into /tmp/autotune-bench-OP.db):

  python3 bench/unseen.py --lib .device/libautotune.so --cli .device/autotune \
      --op causal_conv1d --db /tmp/autotune-bench-causal_conv1d.db --out $OUT [--count 12]

Shapes are drawn with a fixed seed from realistic ranges (odd lengths, batch 1-64, the
channel and state sizes of Mamba models); none is in the database. Per shape:
- ours under each policy (nearest, default): a runtime over the grid's database;
- tuned: the shape tuned on its own (`autotune --shape S` into a copy of the grid's
  database, so transfer from the grid applies as it would for a user), then run with
  policy error (it must be the tuned winner); the tuning time is recorded;
- peers: a device copy of the same bytes (and torch F.conv1d for causal_conv1d).
Rows {op, shape, policy, ours_us, tuned_us, ratio_to_tuned, peers} go to
<gpu>-unseen.json (merged with other ops' rows) and a Markdown table beside it;
new_shape_s rows (tuning time per shape) are printed for <gpu>-tuning.json.
"""
import argparse
import datetime
import json
import os
import random
import shutil
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
import triton.testing

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runtime", "python"))
import autotune_runtime  # noqa: E402

POLICIES = ["nearest", "heuristic", "default"]


def conv_shapes(rng, count):
    shapes = []
    while len(shapes) < count:
        s = {"B": rng.choice([1, 2, 3, 4, 8, 16, 32, 64]),
             "C": rng.choice([768, 1536, 2048, 2560, 3072, 4096, 5120]),
             "L": rng.choice([333, 512, 1000, 1500, 2047, 3000, 4095, 8192]),
             "W": rng.choice([4, 4, 4, 3, 2])}
        if s["B"] * s["C"] * s["L"] <= 2 ** 28 and s not in shapes:
            shapes.append(s)
    return shapes


def scan_shapes(rng, count):
    shapes = []
    while len(shapes) < count:
        s = {"B": rng.choice([1, 2, 3, 4, 8, 16]),
             "D": rng.choice([1536, 2048, 3072, 4096, 5120]),
             "L": rng.choice([512, 777, 1000, 1500, 2047, 3000, 4095]),
             "N": 16}
        if s["B"] * s["D"] * s["L"] <= 2 ** 26 and s not in shapes:
            shapes.append(s)
    return shapes


def shape_text(op, s):
    if op == "causal_conv1d":
        return f"B={s['B']},C={s['C']},L={s['L']},W={s['W']},dtype=bf16,bias=1,silu=1"
    return f"B={s['B']},D={s['D']},L={s['L']},N={s['N']},dtype=bf16"


def conv_case(s):
    B, C, L, W = s["B"], s["C"], s["L"], s["W"]
    x = torch.randn(B, C, L, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(C, W, device="cuda", dtype=torch.bfloat16) - 0.5
    b = torch.rand(C, device="cuda", dtype=torch.bfloat16) - 0.5
    out = torch.empty_like(x)
    nbytes = 2 * (2 * B * C * L + C * W + C)

    def run(rt):
        return lambda: rt.causal_conv1d(x, w, b, silu=True, out=out)

    def check():
        ref = F.silu(F.conv1d(x.double(), w.double().unsqueeze(1), b.double(), padding=W - 1,
                              groups=C)[..., :L])
        return ((out.double() - ref).norm() / ref.norm()).item()

    peers = {"torch_conv1d": lambda: F.silu(F.conv1d(x, w.unsqueeze(1), b, padding=W - 1,
                                                     groups=C)[..., :L])}
    return run, check, peers, nbytes


def scan_case(s):
    B, D, L, N = s["B"], s["D"], s["L"], s["N"]
    dt = torch.bfloat16
    u = torch.randn(B, D, L, device="cuda", dtype=dt)
    delta = (torch.rand(B, D, L, device="cuda") * -3.0).to(dt)
    z = torch.randn(B, D, L, device="cuda", dtype=dt)
    A = -(torch.rand(D, N, device="cuda") * 1.99 + 0.01)
    Bm = torch.randn(B, 1, N, L, device="cuda", dtype=dt)
    Cm = torch.randn(B, 1, N, L, device="cuda", dtype=dt)
    Dv = torch.rand(D, device="cuda") * 2 - 1
    bias = -torch.rand(D, device="cuda")
    out = torch.empty_like(u)
    nbytes = 4 * B * D * L * 2 + 2 * B * N * L * 2

    def run(rt):
        return lambda: rt.selective_scan(u, delta, A, Bm, Cm, D=Dv, z=z, delta_bias=bias,
                                         delta_softplus=True, out=out)

    return run, None, {}, nbytes


def bench_us(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--op", required=True, choices=["causal_conv1d", "selective_scan"])
    ap.add_argument("--db", required=True, help="the benchmark grid's tuning database")
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=12)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--tune-args", default="", help="extra autotune options for the tuned reference")
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    shapes = (conv_shapes if args.op == "causal_conv1d" else scan_shapes)(rng, args.count)
    make = conv_case if args.op == "causal_conv1d" else scan_case
    runtimes = {p: autotune_runtime.Runtime(args.lib, args.db, policy=p) for p in POLICIES}
    rows, tuning = [], []
    for s in shapes:
        text = shape_text(args.op, s)
        own = f"/tmp/autotune-unseen-{os.getpid()}.db"
        shutil.copy(args.db, own)
        t0 = time.time()
        cmd = [args.cli, "--arch", "auto", "--op", args.op, "--shape", text, "--db", own,
               "--quiet"] + args.tune_args.split()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        tune_s = time.time() - t0
        tuning.append({"name": "new_shape_s", "op": args.op, "shape": text,
                       "value": round(tune_s, 2), "unit": "s",
                       "notes": "autotune --shape S over a copy of the grid's database "
                                f"{args.tune_args}".strip()})
        run, check, peers, nbytes = make(s)
        tuned_rt = autotune_runtime.Runtime(args.lib, own, policy="error")
        tuned_us = bench_us(run(tuned_rt))
        src = torch.empty(nbytes // 2, device="cuda", dtype=torch.bfloat16).normal_()
        dst = torch.empty_like(src)
        peer_us = {name: bench_us(fn) for name, fn in peers.items()}
        peer_us["copy"] = bench_us(lambda: dst.copy_(src))
        for policy, rt in runtimes.items():
            fn = run(rt)
            fn()
            torch.cuda.synchronize()
            err = check() if check else None
            us = bench_us(fn)
            rows.append({"op": args.op, "shape": dict(s, dtype="bf16"), "policy": policy,
                         "ours_us": round(us, 2), "tuned_us": round(tuned_us, 2),
                         "ratio_to_tuned": round(tuned_us / us, 3),
                         "GBps": round(nbytes / (us * 1e-6) / 1e9, 1),
                         "copy_fraction": round(peer_us["copy"] / us, 3),
                         "rel_err": None if err is None else float(f"{err:.3g}"),
                         "peers": {k: round(v, 2) for k, v in peer_us.items()},
                         "tune_s": round(tune_s, 2), "MB": round(nbytes / 1e6, 1)})
            print(json.dumps(rows[-1]), flush=True)
        os.remove(own)
    name = torch.cuda.get_device_name()
    slug = "h100" if "H100" in name else "h200" if "H200" in name else name.lower().replace(" ", "-")
    path = os.path.join(args.out, f"{slug}-unseen.json")
    old = json.load(open(path)) if os.path.exists(path) else {"rows": []}
    kept = [r for r in old.get("rows", []) if r.get("op") != args.op]
    result = {"gpu": name, "date": datetime.date.today().isoformat(), "commit": args.commit,
              "command": " ".join(sys.argv), "metric": "us (lower is better); ratio_to_tuned = "
              "tuned_us / ours_us", "rows": kept + rows}
    os.makedirs(args.out, exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(args.out, f"{slug}-unseen.md"), "w") as f:
        f.write(f"# Shapes nobody tuned ({name})\n\ncommit `{args.commit}`, {result['date']}; "
                f"command: `{result['command']}`\n\n")
        f.write("| op | shape | policy | ours µs | tuned µs | ratio to tuned | % of copy |"
                " tune s |\n|---|---|---|---|---|---|---|---|\n")
        for r in result["rows"]:
            f.write(f"| {r['op']} | {shape_text(r['op'], r['shape'])} | {r['policy']} | "
                    f"{r['ours_us']} | {r['tuned_us']} | {r['ratio_to_tuned']} | "
                    f"{100 * r['copy_fraction']:.0f} | {r['tune_s']} |\n")
    for t in tuning:
        print(json.dumps(t))


if __name__ == "__main__":
    main()
