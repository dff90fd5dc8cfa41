"""What the GPU benchmarks (bench_attention.py, bench_selective_scan.py,
bench_causal_conv1d.py) share: the options they all take and the reading of their
bench/shapes.toml section, the timing and the row of a bandwidth benchmark
(ours beside a peer and a copy, in GB/s), the GPU's short name in file names, and the
writing of <gpu>-<op>.json and the head of <gpu>-<op>.md. Importing it puts
runtime/python (the autotune_runtime bindings) on sys.path.
"""
import argparse
import datetime
import json
import os
import re
import sys
import tomllib

import triton.testing

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runtime", "python"))


def arg_parser():
    """The options of every benchmark; a script adds its own before parse_args()."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--command", default=" ".join(sys.argv))
    ap.add_argument("--shapes", default=os.path.join(HERE, "shapes.toml"))
    return ap


def load_spec(path, op):
    """The [op] section of the shapes file."""
    with open(path, "rb") as f:
        return tomllib.load(f)[op]


def do_bench_clean_l2(fn, warmup=25, rep=100):
    """Median ms of fn as triton.testing.do_bench times it (CUDA events around each call,
    an L2 flush before each), except for the flush: do_bench zeroes a 256 MB buffer, which
    leaves the L2 full of dirty lines, so a read-only kernel timed after it also pays for
    writing up to 50 MB of the flush's zeros back to HBM (about 17 us on an H100, most of a
    small decoding step). Here the flush reads a 256 MB buffer after that zeroing: what it
    evicts is written back before the timed call, and the L2 holds clean lines."""
    import torch
    dirty = torch.empty(64 * 1024 * 1024, dtype=torch.float32, device="cuda")
    clean = torch.ones(64 * 1024 * 1024, dtype=torch.float32, device="cuda")
    sink = torch.empty((), dtype=torch.float32, device="cuda")

    def flush():
        dirty.zero_()
        torch.sum(clean, dim=0, out=sink)
    fn()
    torch.cuda.synchronize()
    est0, est1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    est0.record()
    for _ in range(5):
        flush()
        fn()
    est1.record()
    torch.cuda.synchronize()
    per_call = max(est0.elapsed_time(est1) / 5, 1e-3)  # flush included: fewer calls
    n_warmup, n_rep = max(1, int(warmup / per_call)), max(5, int(rep / per_call))
    for _ in range(n_warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for i in range(n_rep):
        flush()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2]


def time_bandwidth(fns, nbytes, warmup, rep):
    """Median ms (do_bench, L2 flushed) and GB/s over nbytes of each function in fns, in order."""
    t = {k: triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
         for k, fn in fns.items()}
    gbps = {k: nbytes / (v * 1e-3) / 1e9 for k, v in t.items()}
    return t, gbps


def bandwidth_row(shape, peer, t, gbps, err, peer_err, variant, **extra):
    """The result row of ours beside peer and "copy" (t, gbps from time_bandwidth); the
    keys of extra go between "peers_us" and the speedup."""
    return {
        "shape": shape,
        "ours": round(gbps["ours"], 1),
        "ours_us": round(t["ours"] * 1e3, 2),
        "rel_err": float(f"{err:.3g}"),
        "variant": variant,
        "peers": {peer: round(gbps[peer], 1), "copy": round(gbps["copy"], 1)},
        "peers_us": {peer: round(t[peer] * 1e3, 2), "copy": round(t["copy"] * 1e3, 2)},
        **extra,
        f"speedup_vs_{peer}": round(t[peer] / t["ours"], 2),
        f"{peer}_rel_err": float(f"{peer_err:.3g}"),
    }


def gpu_slug(name):
    m = re.search(r"(H100|H200|A100|L4|B200|GB200|RTX \w+)", name)
    return (m.group(1) if m else name).lower().replace(" ", "")


def write_results(args, op, name, rows, ceilings, metric, write_table, **extra):
    """Writes <out>/<gpu>-<op>.json and .md and returns their path without suffix. The JSON
    holds extra's keys between "ceilings" and "metric"; the .md is a title and the commit
    line, then what write_table(f) writes."""
    result = {
        "op": op,
        "gpu": name,
        "date": datetime.date.today().isoformat(),
        "commit": args.commit,
        "command": args.command,
        "ceilings": ceilings,
        **extra,
        "metric": metric,
        "timing": "triton.testing.do_bench median, L2 flushed before each sample",
        "rows": rows,
    }
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{gpu_slug(name)}-{op}")
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    with open(stem + ".md", "w") as f:
        f.write(f"# {op} on {name}\n\n")
        f.write(f"commit `{args.commit}`, {result['date']}; command: `{args.command}`\n\n")
        write_table(f)
    return stem
