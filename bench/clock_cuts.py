#!/usr/bin/env python3
"""Which cuts of a tuning session compared timings taken at different SM clocks.

    python3 bench/clock_cuts.py REPORT.json [--within 1.10]

REPORT.json is `autotune --json` output (bench/headline.py keeps the default run's as
headline-OP-default-report.json.gz in its --out; gzipped or not, e.g. bench/results/
h100-headline-attention-report.json.gz, the attention run of 73e7075). Every timing
carries the SM clock NVML reported right after it (`sm_clock_mhz`). Prints the spread of
those clocks, then each variant the search cut (eliminated_in_round > 0) whose median is
within --within of its problem's winner as timed but below it once both are scaled to a
common clock (median x MHz): cuts made between timings taken under different conditions.
Scaling is not a correction (a lower clock is partly the kernel's own power draw, which it
also pays in use); the list says where a side-by-side timing would be needed to decide.
"timed in": the search step the cut variant's timing comes from (reports of 2026-11-27
on; "?" in older ones). No GPU needed."""
import argparse
import gzip
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report")
    ap.add_argument("--within", type=float, default=1.10,
                    help="list cut variants up to this ratio to the winner as timed (default 1.10)")
    args = ap.parse_args()
    opener = gzip.open if args.report.endswith(".gz") else open
    with opener(args.report, "rt") as f:
        report = json.load(f)
    clocks, rows = [], []
    for index, problem in enumerate(report["problems"]):
        timed = [v for v in problem.get("variants", [])
                 if v.get("outcome") == "OK" and v.get("median_us") and v.get("sm_clock_mhz")]
        clocks += [v["sm_clock_mhz"] for v in timed]
        winner = next((v for v in timed if v["variant"] == problem.get("winner")), None)
        if winner is None:
            continue
        for v in timed:
            if not v.get("eliminated_in_round"):
                continue
            raw = v["median_us"] / winner["median_us"]
            scaled = raw * v["sm_clock_mhz"] / winner["sm_clock_mhz"]
            if raw <= args.within and scaled < 1.0:
                rows.append((index, raw, scaled, v["sm_clock_mhz"], winner["sm_clock_mhz"],
                             v.get("timed_in") or "?", v["variant"]))
    if not clocks:
        sys.exit(f"{args.report}: no timing with an SM clock (was NVML missing?)")
    print(f"{len(clocks)} timings; SM clock MHz min {min(clocks)}, median "
          f"{statistics.median(clocks):.0f}, max {max(clocks)}")
    problems = len({r[0] for r in rows})
    print(f"{len(rows)} cut variants in {problems} of {len(report['problems'])} problems within "
          f"{args.within:.2f}x of the winner as timed, faster once scaled by clock:")
    print("| problem | as timed | clock-scaled | its MHz | winner's MHz | timed in | variant |")
    print("|---|---|---|---|---|---|---|")
    for index, raw, scaled, mhz, wmhz, step, variant in rows:
        print(f"| {index} | {raw:.3f} | {scaled:.3f} | {mhz} | {wmhz} | {step} | `{variant}` |")


if __name__ == "__main__":
    main()
