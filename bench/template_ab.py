#!/usr/bin/env python3
"""Pinned variants timed under two template trees, rounds interleaved: did a kernel change
make them faster? The tuner measures each (shape, variant) through the CLI
(`autotune --strategy exhaustive` with every parameter pinned, so exactly one variant, checked
against the reference before it is timed), once with the templates of --old
(AUTOTUNE_TEMPLATE_DIR) and once with the binary's own, alternating, for --rounds rounds.

On the GPU machine (bundle in .device/, the old templates unpacked beside it):
  mkdir -p .device/old_templates && git archive HEAD templates | \\
      tar -x -C .device/old_templates --strip-components=1       # on the development machine
  python3 bench/template_ab.py --cli .device/autotune --op attention --old .device/old_templates \\
      --case "B=32,Hq=16,Hkv=16,Sq=512,Sk=512,D=128,causal=0,dtype=bf16|block_m=128,block_n=128,..." \\
      --rounds 3
prints one row per case: each round's old and new medians (us), the best of each, new / old.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def measure(cli, op, shape, config, templates, db):
    """(outcome, median_us) of the one variant `config` of `shape`, tuned into `db` with
    `templates` (None: the binary's own)."""
    cmd = [cli, "--arch", "auto", "--op", op, "--db", db, "--strategy", "exhaustive", "--json",
           "--shape", shape]
    for item in config.split(","):
        cmd += ["--param", item]
    env = dict(os.environ)
    env.pop("AUTOTUNE_TEMPLATE_DIR", None)
    if templates:
        env["AUTOTUNE_TEMPLATE_DIR"] = templates
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise SystemExit(f"template_ab: {' '.join(cmd)} exited {run.returncode}:\n{run.stderr}")
    variants = json.loads(run.stdout)["problems"][0]["variants"]
    if len(variants) != 1:
        raise SystemExit(f"template_ab: '{config}' pins {len(variants)} variants of {shape}, "
                         "not one: give every parameter of the op's space")
    return variants[0]["outcome"], variants[0].get("median_us")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True, help="the autotune binary")
    ap.add_argument("--op", required=True)
    ap.add_argument("--old", required=True, help="the templates to compare against")
    ap.add_argument("--case", action="append", required=True,
                    help="SHAPE|CONFIG, every parameter of CONFIG given (repeatable)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if not os.path.isdir(args.old):
        raise SystemExit(f"template_ab: --old {args.old} is not a directory")
    cases = []
    for text in args.case:
        shape, sep, config = text.partition("|")
        if not sep or not shape or not config:
            raise SystemExit(f"template_ab: --case must be SHAPE|CONFIG, not {text!r}")
        cases.append((shape, config))
    times = {(c, side): [] for c in range(len(cases)) for side in ("old", "new")}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for c, (shape, config) in enumerate(cases):
                for side, templates in (("old", args.old), ("new", None)):
                    # A database per measurement: nothing is reused between the two trees.
                    db = os.path.join(tmp, f"{side}-{r}-{c}.db")
                    outcome, us = measure(args.cli, args.op, shape, config, templates, db)
                    if outcome != "OK":
                        raise SystemExit(f"template_ab: {side} templates: {shape} {config}: "
                                         f"{outcome}")
                    times[(c, side)].append(us)
    print("| shape | variant | old us (rounds) | new us (rounds) | best old | best new | "
          "new / old |")
    print("|---|---|---|---|---|---|---|")
    for c, (shape, config) in enumerate(cases):
        old, new = times[(c, "old")], times[(c, "new")]
        rounds = lambda xs: " ".join(f"{x:.2f}" for x in xs)  # noqa: E731
        print(f"| {shape} | `{config}` | {rounds(old)} | {rounds(new)} | {min(old):.2f} | "
              f"{min(new):.2f} | {min(new) / min(old):.3f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
