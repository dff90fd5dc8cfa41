#!/usr/bin/env python3
"""Turns two `autotune --json` reports into bench/results/<gpu>-tuning.json.

On the GPU machine, with an empty database:
  autotune --arch auto --op OP --quiet --json > cold.json     # compiles and measures all
  autotune --arch auto --op OP --json > warm.json              # must find everything stored
then: tuning_cost.py --cold cold.json --warm warm.json --gpu "NVIDIA H100 80GB HBM3" \
        --cores 16 --commit SHA --command "..." --out bench/results
Rows already in the output file for other ops are kept.
"""
import argparse
import datetime
import json
import os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", required=True)
    ap.add_argument("--warm", required=True)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--cores", type=int, required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cold = json.load(open(args.cold))
    warm = json.load(open(args.warm))
    op = cold["op"]
    problems = cold["problems"]
    candidates = sum(len(p["variants"]) for p in problems)
    seconds = sum(p["seconds"] for p in problems)
    compiled = sum(p["compiled"] for p in problems)
    compile_s = sum(p["compile_s"] for p in problems)
    warm_compiled = sum(p["compiled"] for p in warm["problems"])
    warm_measured = sum(len(p["variants"]) for p in warm["problems"])
    warm_s = sum(p["seconds"] for p in warm["problems"])
    peak = max(p["device_bytes"] for p in problems)
    rows = [
        {"name": "cold_s_per_candidate", "op": op, "value": round(seconds / candidates, 4), "unit": "s",
         "notes": f"{candidates} candidates over {len(problems)} problems, {seconds:.1f} s "
                  f"(compile on {args.cores} cores + check + time); successive problems reuse cubins"},
        {"name": "cold_compile_s_per_variant", "op": op, "value": round(compile_s / max(compiled, 1), 4),
         "unit": "s", "notes": f"{compiled} NVRTC compilations, wall time with {args.cores} threads"},
        {"name": "warm_rerun_compilations", "op": op, "value": warm_compiled, "unit": "count"},
        {"name": "warm_rerun_measurements", "op": op, "value": warm_measured, "unit": "count"},
        {"name": "warm_rerun_s", "op": op, "value": round(warm_s, 4), "unit": "s",
         "notes": "all winners found in the database"},
        {"name": "peak_tuner_gpu_bytes", "op": op, "value": peak, "unit": "B",
         "notes": "problem buffers + fp32 reference + L2 flush buffer (when needed) + copy buffers"},
    ]
    os.makedirs(args.out, exist_ok=True)
    slug = "h100" if "H100" in args.gpu else "h200" if "H200" in args.gpu else args.gpu.lower()
    path = os.path.join(args.out, f"{slug}-tuning.json")
    old = json.load(open(path)) if os.path.exists(path) else {"rows": []}
    kept = [r for r in old.get("rows", []) if r.get("op") != op]
    result = {"gpu": args.gpu, "date": datetime.date.today().isoformat(), "commit": args.commit,
              "command": args.command, "rows": kept + rows}
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    for r in rows:
        print(f"{r['name']}: {r['value']} {r['unit']}")


if __name__ == "__main__":
    main()
