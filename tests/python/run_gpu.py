#!/usr/bin/env python3
"""The GPU suite of the autotune Python package as a plain script (no pytest needed):
the mirrored peer grids (conformance), the registered operators under opcheck,
torch.compile and CUDA graphs, the drop-ins' behaviour, and the bad-input suite. Prints
one line per check and closes with "N passed, N failed"; writes <gpu>-conformance.json
and <gpu>-bad-input.json (format: shared/bench/RESULTS.md) into --out.

    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
    python3 tests/python/run_gpu.py --lib .device/libautotune.so --out bench/results

The grids are large (flash-attn's test_flash_attn_output alone has 31680 cases) and
every new problem shape compiles its kernel on first use, so they are sampled: the
supported cases are grouped by compiled problem and the groups run in a seeded random
order until the grid's share of --budget-s is spent (--full runs everything). The
groups of a grid run in --threads threads (default min(14, cores)): the library
compiles different problems at once. Each JSON row says how many cases ran and how
many did not. Exit status 1 when a check failed.

    python3 tests/python/run_gpu.py --lib .device/libautotune.so --out $OUT --full \
        --threads 14
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from harness import ContextLost, Tally, gpu_slug, header, write_json  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for <gpu>-conformance.json and "
                    "<gpu>-bad-input.json")
    ap.add_argument("--lib", help="libautotune.so (else $AUTOTUNE_LIBRARY, the package's "
                    "search)")
    ap.add_argument("--db", help="tuning database (else $AUTOTUNE_DB, the default path)")
    ap.add_argument("--policy", help="policy for untuned shapes (else $AUTOTUNE_POLICY, "
                    "nearest)")
    ap.add_argument("--budget-s", type=float, default=130.0,
                    help="seconds for all conformance grids together (default 130)")
    ap.add_argument("--full", action="store_true", help="run every supported grid case")
    ap.add_argument("--threads", type=int, default=min(14, os.cpu_count() or 1),
                    help="threads running a grid's groups (compiled problems) at once "
                    "(default min(14, cores)); the bad-input suite and the other checks "
                    "always run in one thread")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="run only checks whose name contains this")
    args = ap.parse_args()
    if args.threads < 1:
        ap.error(f"--threads must be at least 1, not {args.threads}")
    if args.budget_s <= 0:
        ap.error(f"--budget-s must be positive, not {args.budget_s}")
    command = "python3 tests/python/" + " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])
    start = time.monotonic()

    try:
        import torch
    except ImportError as e:
        print(f"SKIP: torch does not import ({e})")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device (torch.cuda.is_available() is False)")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    import gpu_checks as g
    g.setup(args.lib, args.db, args.policy)
    import autotune
    gpu = torch.cuda.get_device_name(0)
    print(f"{gpu}; torch {torch.__version__}; library {autotune.find_library()}; "
          f"policy {autotune._config.policy()}; database "
          f"{autotune._config.database() or os.environ.get('AUTOTUNE_DB') or 'default path'}")

    tally = Tally(out=lambda line: print(line, flush=True))
    wanted = (lambda name: args.only in name) if args.only else (lambda name: True)
    rows, bad_rows = [], []
    try:
        tally.check("runtime: starts on cuda:0", lambda: str(autotune.get_runtime(0).policy))
        for name, spec in g.GRIDS.items():
            if not wanted(f"conformance: {name}"):
                continue
            budget = None if args.full else args.budget_s * spec[6]

            def grid(name=name, budget=budget):
                row = g.conformance(name, budget, seed=args.seed, threads=args.threads)
                rows.append(row)
                summary = (f"{row['pass']} pass, {row['wrong']} wrong, {row['error']} error, "
                           f"{sum(row['unsupported'].values())} unsupported "
                           f"{row['unsupported']}, {row['not_run']} not run, of {row['cases']}")
                if row["wrong"] or row["error"]:
                    raise AssertionError(summary + "; first: " + str(row["failures"][:3]))
                if row["pass"] == 0:
                    raise AssertionError(summary + "; no case ran")
                return summary

            tally.check(f"conformance: {name}", grid)
        for name, fn in g.OTHER_CHECKS.items():
            if wanted(name):
                tally.check(name, fn)
        if wanted("bad input"):
            for row in g.bad_input():
                bad_rows.append(row)
                tally.record(f"bad input: {row['op']}: {row['case']}", row["verdict"] == "raised",
                             f"[{row['verdict']}] {row['message']}")
                if row["verdict"].startswith("context lost"):
                    raise ContextLost(row["verdict"])
    except ContextLost as e:
        print(f"ABORT: the CUDA context was lost ({e}); the remaining checks did not run")

    slug = gpu_slug(gpu)
    head = header(gpu, command)
    if rows:
        write_json(os.path.join(args.out, f"{slug}-conformance.json"), dict(
            head, op="all", torch=torch.__version__,
            notes="Per op and mirrored peer grid: cases (the peer's parameter combinations after "
                  "its own skips), pass / wrong / error (supported cases run), unsupported (by "
                  "the feature autotune lacks; not run), not_run (supported, outside the time "
                  "budget: every new problem shape compiles on first use). failures lists the "
                  "first ones with their parameters.",
            rows=rows))
    if bad_rows:
        write_json(os.path.join(args.out, f"{slug}-bad-input.json"), dict(
            head, op="all", torch=torch.__version__,
            notes="verdict 'raised': an exception, then a good call of the same op and "
                  "torch.cuda.synchronize() succeed and every input equals its copy from "
                  "before the call. op torch.ops.autotune.* is the registered operator (tensors "
                  "straight to the C ABI), autotune.*_fn the drop-in, autotune.Runtime.* the "
                  "ctypes layer (where out= exists).",
            rows=bad_rows))
    print(f"({time.monotonic() - start:.0f} s)")
    print(tally.summary())
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
