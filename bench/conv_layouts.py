#!/usr/bin/env python3
"""causal_conv1d_fn on x laid out four ways, beside a device copy of the same bytes:
- contiguous [B, C, L];
- mamba_xz: mamba-ssm's view of its in_proj output (xz = in_proj(...) computed as
  [2C, B*L], viewed as [B, 2C, L] and sliced x = xz[:, :C]: batch stride L, channel
  stride B*L), with a contiguous out, as the Mamba block calls it. At odd L the rows of
  x and out then start at different offsets from a 16-byte boundary (the kernel's
  realigned ragged rows);
- channel_last: a contiguous [B, L, C] tensor transposed to [B, C, L] (x.stride(1) == 1);
- mamba2_xbc: Mamba-2's xBC.transpose(1, 2), xBC a slice of the in_proj output [B, L, P]
  (P = 2C + 64: z before it, dt after it), channel-last with length stride P.
Channel-last x gives a channel-last out (as causal-conv1d does). Libraries side by side
(e.g. two builds, interleaved
rounds, each the fastest of --rounds); the policy is `heuristic` over an empty
database (the configuration a user gets for an untuned shape).

  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
  python3 bench/conv_layouts.py --lib new=.device/libautotune.so \\
      [--lib old=.device_old/libautotune.so] --out $OUT

Each library runs in its own process (one libautotune per process); rows go to
OUT/<gpu>-conv-layouts.json (header as ../shared/bench/RESULTS.md: op, gpu, date, commit
from --commit, command) and the table to OUT/<gpu>-conv-layouts.md and stdout. Times are triton's do_bench medians
(L2 flushed); pct_of_copy = 100 * copy_us / us, the copy moving as many bytes (read +
written) as the conv's x and out.
"""
import argparse
import json
import os
import subprocess
import sys

SHAPES = [  # (B, C, L, W): odd lengths (ragged rows) and two aligned references
    (64, 1536, 333, 2), (64, 3072, 333, 2), (16, 2048, 333, 4), (4, 2560, 2047, 4),
    (2, 4096, 4095, 3), (1, 4096, 16383, 4), (8, 1536, 1001, 4), (2, 768, 2047, 4),
    (2, 4096, 3000, 4),
    (2, 2048, 512, 4), (2, 768, 2048, 4), (8, 4096, 2048, 4), (4, 5120, 4096, 4),
]


LAYOUTS = ("contiguous", "mamba_xz", "channel_last", "mamba2_xbc")


def measure(match, layouts):
    """In a child process: one row per shape and layout, as JSON lines on stdout."""
    import torch
    import triton
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "python"))
    import autotune
    autotune.set_policy("heuristic")
    torch.manual_seed(0)
    for (b, c, length, width) in SHAPES:
        if match not in f"B={b},C={c},L={length},W={width}":
            continue
        for layout in LAYOUTS:
            if layout not in layouts:
                continue
            if layout == "contiguous":
                x = torch.randn(b, c, length, device="cuda", dtype=torch.bfloat16)
            elif layout == "mamba_xz":
                xz = torch.randn(2 * c, b * length, device="cuda", dtype=torch.bfloat16)
                x = xz.view(2 * c, b, length).permute(1, 0, 2)[:, :c]
            elif layout == "channel_last":
                x = torch.randn(b, length, c, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
            else:
                zxbcdt = torch.randn(b, length, 2 * c + 64, device="cuda", dtype=torch.bfloat16)
                x = zxbcdt[:, :, c:2 * c].transpose(1, 2)
            w = torch.randn(c, width, device="cuda", dtype=torch.bfloat16) * 0.5
            bias = torch.randn(c, device="cuda", dtype=torch.bfloat16) * 0.5

            def call():
                return autotune.causal_conv1d_fn(x, w, bias, activation="silu")
            out = call()
            ref = torch.nn.functional.silu(torch.nn.functional.conv1d(
                x.float(), w.float().unsqueeze(1), bias.float(), padding=width - 1,
                groups=c)[..., :length])
            err = ((out.float() - ref).norm() / ref.norm()).item()
            src = torch.empty(b * c * length, device="cuda", dtype=torch.bfloat16).normal_()
            dst = torch.empty_like(src)
            ms = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median")
            copied_us = None
            if layout in ("channel_last", "mamba2_xbc"):
                # What a channel-first kernel costs it: x.contiguous() first (autotune
                # before channel-last kernels, and any library that only reads [B, C, L]).
                copied_us = round(1e3 * triton.testing.do_bench(
                    lambda: autotune.causal_conv1d_fn(x.contiguous(), w, bias,
                                                      activation="silu"),
                    warmup=25, rep=100, return_mode="median"), 2)
            copy_ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=100,
                                              return_mode="median")
            print(json.dumps({"shape": {"B": b, "C": c, "L": length, "W": width},
                              "layout": layout, "x_strides": list(x.stride()),
                              "out_strides": list(out.stride()),
                              "us": round(ms * 1e3, 2), "copy_us": round(copy_ms * 1e3, 2),
                              "copied_first_us": copied_us,
                              "rel_err": err}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", default=[],
                    help="NAME=PATH of a libautotune.so (repeat to compare builds)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=".")
    ap.add_argument("--match", default="", help="only the shapes whose B=..,C=..,L=..,W=.. "
                    "contains this")
    ap.add_argument("--layouts", default=",".join(LAYOUTS),
                    help="comma-separated subset of " + ", ".join(LAYOUTS))
    ap.add_argument("--commit", default="unknown", help="the commit measured (results header)")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        measure(args.match, args.layouts.split(","))
        return
    if not args.lib:
        ap.error("name at least one --lib NAME=PATH")
    libs = [item.split("=", 1) for item in args.lib]
    best = {}
    for _ in range(args.rounds):
        for name, path in libs:
            env = dict(os.environ, AUTOTUNE_LIBRARY=os.path.abspath(path),
                       AUTOTUNE_DB="/tmp/autotune-conv-layouts-empty.db")
            run = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure",
                                  "--match", args.match, "--layouts", args.layouts],
                                 env=env, capture_output=True, text=True, check=True)
            for line in run.stdout.splitlines():
                row = json.loads(line)
                key = (name, json.dumps(row["shape"]), row["layout"])
                if key not in best or row["us"] < best[key]["us"]:
                    best[key] = row
    rows = []
    for (name, _, _), row in best.items():
        row = dict(row, lib=name, pct_of_copy=round(100 * row["copy_us"] / row["us"], 1))
        rows.append(row)
    import datetime
    import torch
    gpu = torch.cuda.get_device_name(0)
    slug = "h200" if "H200" in gpu else "h100" if "H100" in gpu else "gpu"
    command = "python3 " + " ".join(sys.argv)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{slug}-conv-layouts.json"), "w") as f:
        json.dump({"op": "causal_conv1d", "gpu": gpu, "date": str(datetime.date.today()),
                   "commit": args.commit, "command": command, "metric": "pct_of_copy",
                   "policy": "heuristic, empty database", "rows": rows}, f, indent=1)
    names = [n for n, _ in libs]
    lines = [f"# causal_conv1d by x layout ({gpu})", "",
             f"commit `{args.commit}`; command: `{command}`; policy heuristic over an empty "
             "database; triton do_bench medians, L2 flushed.", "",
             "| shape | layout | " + " | ".join(f"{n} us (% of copy)" for n in names) +
             " | copy us | x.contiguous() first, us | rel_err |",
             "|---|---|" + "---|" * len(names) + "---|---|---|"]
    seen = []
    for row in rows:
        key = (json.dumps(row["shape"]), row["layout"])
        if key in seen:
            continue
        seen.append(key)
        cells = []
        for n in names:
            r = next(x for x in rows if x["lib"] == n and (json.dumps(x["shape"]),
                                                           x["layout"]) == key)
            cells.append(f"{r['us']} ({r['pct_of_copy']})")
        s = row["shape"]
        lines.append(f"| B={s['B']},C={s['C']},L={s['L']},W={s['W']} | {row['layout']} | " +
                     " | ".join(cells) + f" | {row['copy_us']} | "
                     f"{row['copied_first_us'] or ''} | {row['rel_err']:.4f} |")
    with open(os.path.join(args.out, f"{slug}-conv-layouts.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
