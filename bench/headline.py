#!/usr/bin/env python3
"""The headline command timed, and its winners checked against exhaustive search.

On the GPU machine (bundle in .device/, see scripts/device-bundle.sh):

  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
  python3 bench/headline.py --ops causal_conv1d --out $OUT            # both steps, ~1.5 min
  python3 bench/headline.py --ops selective_scan --steps default --out $OUT   # ~75 s
  python3 bench/headline.py --ops selective_scan --steps exhaustive --shapes 1 --out $OUT
                  # ~12 min (4096 sampled variants, compiled and measured): run it in two
                  # calls on the machine the default step left warm; the second resumes
  python3 bench/headline.py --ops attention --steps default --out $OUT   # ~3 min
  python3 bench/headline.py --ops attention --steps exhaustive --out $OUT  # ~7.5 min

Here, without a GPU: `python3 bench/headline.py --dry-run` prints the shapes, the
subsets and the commands with estimates.

1. step `default`: `autotune --arch auto --op OP` with no other option than --db (an
   empty database, /tmp/autotune-headline-OP.db, left for bench/unseen.py) and --json,
   timed: headline_default_s. --out/headline-OP-default.json holds the summary (wall
   time, each shape's winner and its time by phase), --out/headline-OP-default.log the
   progress lines, --out/headline-OP-default-report.json.gz the CLI's whole --json
   report (every variant's timing, SM clock and search step: bench/clock_cuts.py reads
   it). The summary's "breakdown" says where the wall time went: the tuner's phases_s
   (select, setup, compile, cubin_load, measure, restart, store, recheck, other;
   tuner/report.hpp) and worker_s summed over the shapes, the search's time against the
   budgets, and the 5 slowest shapes with theirs (also in <gpu>-headline.{json,md}).
2. step `exhaustive`: the shapes --shapes (indices into the op's default shapes; default:
   a draw with --seed of DEFAULT_COUNT[op] of them) tuned one at a time with
   `--strategy exhaustive` into /tmp/autotune-exhaustive-OP.db, started from a copy of
   the default run's database when it is there (its cubins; its results and winners
   deleted). That run measures every valid variant in full, the default run's winner
   among them, in one session; a session the call's time limit cuts resumes where it
   stopped when the same step runs again on the warm machine (selective_scan's 4096
   variants take two calls):
   default_us is its median of the default run's winner, exhaustive_us its own winner's,
   ratio = default_us / exhaustive_us, within_2pct = ratio <= 1.02 (the issue asks for
   that on at least 90% of the shapes). default_run_us is the default run's own median.
   It needs the default step's summary: from this machine's /tmp (a warm machine), from
   --out, or --default FILE (e.g. a file brought back by an earlier device call, carried
   in the working tree).
--max-seconds (default 570) stops before a step or a shape that would not end in time
(the estimate: the op's prior, then the slowest shape measured) and says so in "notes";
every finished shape is already written (--out/headline-OP-ex-I.json).

After each step, --out/<gpu>-headline.{json,md} is rebuilt from the summaries and rows
in --out (and the folders of --collect): rows {op, shape, default_us, exhaustive_us,
ratio, within_2pct, ...}, per op the summary, and the headline_default_s rows for
bench/results/<gpu>-tuning.json (also printed). Ops or shapes measured in separate
device calls come back in separate folders: merge them here without a GPU with
`python3 bench/headline.py --collect DIR1 DIR2 ... --out bench/results`.
"""
import argparse
import datetime
import glob
import gzip
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))

OPS = ["causal_conv1d", "selective_scan", "attention"]
WITHIN = 1.02
# Shapes compared with exhaustive search per op by default (a draw with --seed): every
# causal_conv1d shape (112-136 variants each, seconds), 2 of selective_scan's 4 (about
# 4400 variants each: 5-6 minutes per shape), 6 of attention's 51 (150-430 variants at
# about 0.3 s: about 70 s per shape).
DEFAULT_COUNT = {"causal_conv1d": 5, "selective_scan": 2, "attention": 6}
# Estimates on the H100 for --dry-run and --max-seconds (until a shape was measured):
# the default run (h100-tuning.json; attention's is the 3-minute target) and the
# exhaustive run of one shape.
DEFAULT_S = {"causal_conv1d": 9, "selective_scan": 71, "attention": 180}
EXHAUSTIVE_S = {"causal_conv1d": 10, "selective_scan": 330, "attention": 75}
S_PER_VARIANT = {"causal_conv1d": 0.06, "selective_scan": 0.075, "attention": 0.3}


def default_db(op):
    return f"/tmp/autotune-headline-{op}.db"


def exhaustive_db(op):
    return f"/tmp/autotune-exhaustive-{op}.db"


def default_shapes(op, path=os.path.join(HERE, "shapes.toml")):
    """The op's default shapes in the CLI's order (runtime/ops/OP.cpp default_shapes(),
    which bench/shapes.toml mirrors), as --shape texts."""
    with open(path, "rb") as f:
        spec = tomllib.load(f)[op]
    if op == "causal_conv1d":
        return [f"B={s['B']},C={s['C']},L={s['L']},W={s['W']}" for s in spec["shapes"]]
    if op == "selective_scan":
        return [f"B={s['B']},D={s['D']},L={s['L']},N={s['N']}" for s in spec["shapes"]]
    out = []
    g = spec["grid"]
    for dtype in spec["dtype"]:
        for d in g["head_dim"]:
            for causal in g["causal"]:
                for s in g["seqlen"]:
                    out.append(f"B={16384 // s},H={2048 // d},S={s},D={d},causal={int(causal)},"
                               f"dtype={dtype},layout=bshd")
    for e in spec["extra"]:
        heads = f"Hq={e['Hq']},Hkv={e['Hkv']}" if "Hq" in e else f"H={e['H']}"
        causal = ",causal=1" if e.get("causal") else ""
        out.append(f"B={e['B']},{heads},S={e['S']},D={e['D']}{causal},dtype=fp16,layout=bhsd")
    return out


def subset(op, count, seed, n):
    """Indices into the op's n default shapes compared with exhaustive search. For
    attention, one shape from each of k different groups (dtype x D x causal of the grid,
    6 sequence lengths each, and the 3 extra shapes), so that the draw spreads."""
    k = min(n, count if count is not None else DEFAULT_COUNT[op])
    rng = random.Random(f"{seed}-{op}")
    if op != "attention" or n != 51:
        return sorted(rng.sample(range(n), k))
    groups = [list(range(g * 6, g * 6 + 6)) for g in range(8)] + [[48, 49, 50]]
    picked = rng.sample(groups, min(k, len(groups)))
    out = [rng.choice(g) for g in picked]
    rest = [i for i in range(n) if i not in out]
    return sorted(out + rng.sample(rest, k - len(out)))


def gpu_slug(name):
    # As bench_common.gpu_slug (bench_common needs triton to import; this runs without).
    m = re.search(r"(H100|H200|A100|L4|B200|GB200|RTX \w+)", name)
    return (m.group(1) if m else name).lower().replace(" ", "")


class Deadline:
    def __init__(self, seconds):
        self.start = time.monotonic()
        self.seconds = seconds

    def elapsed(self):
        return time.monotonic() - self.start

    def left(self):
        return self.seconds - self.elapsed()


def fresh_db(path):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


def copy_db(src, dst):
    """A plain copy of an SQLite database and its WAL (its writer has exited; the GPU
    machine has no sqlite3 tool)."""
    fresh_db(dst)
    for suffix in ("", "-wal"):
        if os.path.exists(src + suffix):
            shutil.copyfile(src + suffix, dst + suffix)


def run_cli(cli, args, log_path, timeout):
    """The CLI with --json: (report or None, seconds, returncode or 'timeout')."""
    cmd = [cli] + args + ["--json"]
    print("$ " + " ".join(cmd), flush=True)
    start = time.monotonic()
    with open(log_path, "a") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        rc, stdout = run_group(cmd, stdout=subprocess.PIPE, stderr=log, timeout=timeout)
    seconds = time.monotonic() - start
    if rc == "timeout":
        return None, seconds, rc
    if rc != 0:
        sys.stderr.write(open(log_path).read()[-3000:])
        return None, seconds, rc
    return json.loads(stdout), seconds, 0


def run_group(cmd, stdout, stderr, timeout):
    """(returncode or 'timeout', stdout) of cmd run in a session of its own; on timeout
    that session (the CLI and its measuring worker) is killed, by its process group id."""
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=max(1.0, timeout))
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", None


def stored_winners(cli, db, op):
    """The winners `autotune report --json` finds in db (one JSON object a line)."""
    p = subprocess.run([cli, "report", "--db", db, "--op", op, "--json"], capture_output=True,
                       text=True)
    if p.returncode != 0:
        return []
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def nvidia_smi_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i",
                              "0"], capture_output=True, text=True, timeout=30).stdout
        return out.strip().splitlines()[0] or None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def read_json(path):
    with open(path) as f:
        return json.load(f)


# ---- steps -------------------------------------------------------------------------------------

def step_default(args, op, deadline):
    db = fresh_db(default_db(op))
    log = os.path.join(args.out, f"headline-{op}-default.log")
    if os.path.exists(log):
        os.remove(log)
    n = len(default_shapes(op))
    summary = {"op": op, "run_id": f"{time.time():.0f}-{os.getpid()}", "commit": args.commit,
               "date": datetime.date.today().isoformat(),
               "command": f"autotune --arch auto --op {op} --db EMPTY_DB --json",
               "wall_s": None, "shapes": n, "winners": [], "gpu": None}
    report, seconds, rc = run_cli(args.cli, ["--arch", "auto", "--op", op, "--db", db], log,
                                  deadline.left())
    summary["wall_s"] = round(seconds, 1)
    if report is None:
        done = stored_winners(args.cli, db, op)
        why = (f"stopped by --max-seconds after {seconds:.0f} s" if rc == "timeout"
               else f"autotune exited with {rc} after {seconds:.0f} s")
        summary["wall_s"] = None
        summary["notes"] = f"not finished: {why}; {len(done)} of {n} shapes done"
        summary["gpu"] = done[0]["gpu"] if done else nvidia_smi_name()
        summary["winners"] = [{"problem": w["problem"], "winner": w["config"],
                               "winner_us": w["median_us"]} for w in done]
    else:
        summary["gpu"] = report.get("device")
        summary["arch"] = report.get("arch")
        summary["shapes"] = len(report["problems"])
        summary["winners"] = [{"index": i, "problem": p["problem"], "winner": p["winner"],
                               "winner_us": p["winner_us"], "seconds": round(p["seconds"], 2),
                               "measured": len(p["variants"]),
                               "budget_exhausted": p.get("budget_exhausted"),
                               **problem_times(p)}
                              for i, p in enumerate(report["problems"])]
        summary["breakdown"] = breakdown(report, seconds)
        # The full report travels back with --out (gzipped, ~50 KB for attention): what
        # bench/clock_cuts.py and a later look at the search read.
        with gzip.open(os.path.join(args.out, f"headline-{op}-default-report.json.gz"),
                       "wt") as f:
            json.dump(report, f)
    for folder in (args.out, args.work):
        write_json(os.path.join(folder, f"headline-{op}-default.json"), summary)
    print(f"headline_default_s {op}: {summary['wall_s']} s for {summary['shapes']} shapes"
          + (f" ({summary['notes']})" if summary.get("notes") else ""), flush=True)
    if summary.get("breakdown"):
        b = summary["breakdown"]
        print("  by phase (s): " + ", ".join(f"{k} {v}" for k, v in b["phases_s"].items())
              + f"; search {b['search_s']} of budgets {b['budget_s']}", flush=True)
    return summary


# ---- where the default run's time went --------------------------------------------------------

# The tuner's --json fields (tuner/report.hpp): phases_s partitions each problem's seconds,
# worker_s is the worker's own account of its part of setup, measure and recheck.
PHASES = ["select", "setup", "compile", "cubin_load", "measure", "restart", "store", "recheck",
          "other"]
WORKER_PARTS = ["context", "modules", "allocate", "inputs", "copy", "module_load", "check",
                "timing"]
SLOWEST = 5


def problem_times(p):
    """A problem's time by phase from the CLI's JSON ({} from a CLI older than phases_s)."""
    if "phases_s" not in p:
        return {}
    return {"phases_s": {k: round(p["phases_s"].get(k, 0.0), 3) for k in PHASES},
            "worker_s": {k: round(p["worker_s"].get(k, 0.0), 3) for k in WORKER_PARTS},
            "search_s": round(p.get("search_s", 0.0), 3),
            "budget_s": round(p.get("budget_s", 0.0), 3),
            "worker_restarts": p.get("worker_restarts", 0)}


def breakdown(report, wall_s):
    """Where the default run's wall time went: each phase summed over the problems, the
    part outside them, the budgets' overrun, and the SLOWEST slowest problems."""
    problems = report["problems"]
    if not problems or "phases_s" not in problems[0]:
        return None
    tuned = [p for p in problems if not p["cached"]]
    problems_s = sum(p["seconds"] for p in problems)
    session_s = report.get("seconds", problems_s)
    phases = {k: round(sum(p["phases_s"].get(k, 0.0) for p in problems), 2) for k in PHASES}
    worker = {k: round(sum(p["worker_s"].get(k, 0.0) for p in problems), 2)
              for k in WORKER_PARTS}
    search = sum(p.get("search_s", 0.0) for p in tuned)
    budget = sum(p.get("budget_s", 0.0) for p in tuned)
    over = sum(max(0.0, p.get("search_s", 0.0) - p.get("budget_s", 0.0)) for p in tuned
               if p.get("budget_s", 0.0) > 0)
    slowest = sorted(range(len(problems)), key=lambda i: -problems[i]["seconds"])[:SLOWEST]
    return {
        "wall_s": round(wall_s, 2),
        # The CLI process outside its tuning session: start, worker exit, JSON output.
        "outside_session_s": round(wall_s - session_s, 2),
        "start_s": round(report.get("start_s", 0.0), 2),
        "problems_s": round(problems_s, 2),
        "tuned": len(tuned),
        "phases_s": phases,
        "worker_s": worker,
        "search_s": round(search, 2),
        "budget_s": round(budget, 2),
        "over_budget_s": round(over, 2),
        # Outside every budget: what the "about 0.5 s per problem" estimated.
        "outside_budget_s": round(problems_s - search, 2),
        "worker_restarts": sum(p.get("worker_restarts", 0) for p in problems),
        "slowest": [{"index": i, "problem": problems[i]["problem"],
                     "seconds": round(problems[i]["seconds"], 2),
                     "measured": len(problems[i]["variants"]), **problem_times(problems[i])}
                    for i in slowest],
    }


def find_default(args, op):
    """The default step's summary: --default, else this machine's work folder, else --out."""
    candidates = [args.default] if args.default else []
    candidates += [os.path.join(args.work, f"headline-{op}-default.json"),
                   os.path.join(args.out, f"headline-{op}-default.json")]
    for path in candidates:
        if path and os.path.exists(path):
            s = read_json(path)
            if s.get("op") == op:
                return s
    return None


def report_variant(problem, variant):
    """`variant`'s entry in a report's problem, or None where it was not measured."""
    return next((v for v in problem["variants"] if v["variant"] == variant), None)


def measured_us(problem, variant):
    """The full-measurement median of `variant` in a report's problem, and its outcome."""
    v = report_variant(problem, variant)
    if v is None:
        return None, "not measured by the exhaustive run (not among its valid variants)"
    if v["outcome"] == "OK" and v["eliminated_in_round"] == 0:
        return v["median_us"], "OK"
    return None, f"{v['outcome']} (eliminated in round {v['eliminated_in_round']})"


def clock_of(problem, variant):
    """The SM clock (MHz, NVML, read right after the timing) of `variant`'s latest timing in
    a report's problem, or None."""
    v = report_variant(problem, variant)
    return (v.get("sm_clock_mhz") or None) if v else None


PAIRED_RUNS = 3  # sessions of the paired re-measure


def config_fields(config):
    return dict(kv.split("=", 1) for kv in config.split(","))


def paired(args, op, db, shape, a, b, log, deadline):
    """a's and b's medians re-measured side by side: PAIRED_RUNS short sessions of
    `--strategy exhaustive --force` over only the parameter values of a and b (--param per
    parameter: their cross product, at most 2^k variants, both among them), seconds apart.
    One exhaustive session measures its hundreds of variants over minutes while the
    GPU's clock moves with its temperature and power (the same variant's median moved
    12% between two runs, bench/notes/untuned-shapes.md), so its medians of two variants
    measured minutes apart can differ by more than the 2% asked; here they are measured
    under the same conditions, in alternating order (a's values first, then b's, then
    a's). Returns {runs, default_us, exhaustive_us, ratio} (medians
    over the sessions; ratio = the median of the sessions' a/b) or None."""
    fa, fb = config_fields(a), config_fields(b)
    if any(fa.get(k) is None or fb.get(k) is None for k in set(fa) | set(fb)):
        return None  # a parameter one of them lacks: not one space

    def params(flip):
        # A space enumerates its values in the order given: flipped, b's come first.
        out = []
        for k in dict.fromkeys(list(fa) + list(fb)):
            va, vb = (fb[k], fa[k]) if flip else (fa[k], fb[k])
            out += ["--param", f"{k}={va}" if va == vb else f"{k}={va}|{vb}"]
        return out
    ua, ub = [], []
    for run in range(PAIRED_RUNS):
        if deadline.left() < 30:
            break
        report, _, _ = run_cli(args.cli, ["--arch", "auto", "--op", op, "--db", db, "--strategy",
                                          "exhaustive", "--force", "--shape", shape,
                                          *params(run % 2 == 1)], log, deadline.left())
        if report is None:
            break
        e = report["problems"][0]
        x, _ = measured_us(e, a)
        y, _ = measured_us(e, b)
        if x and y:
            ua.append(x)
            ub.append(y)
    if not ua:
        return None
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    return {"runs": len(ua), "default_us": round(med(ua), 2), "exhaustive_us": round(med(ub), 2),
            "ratio": round(med([x / y for x, y in zip(ua, ub)]), 4)}


def step_exhaustive(args, op, summary, deadline):
    winners = summary["winners"]
    if summary.get("notes") or "index" not in (winners[0] if winners else {}):
        print(f"{op}: no exhaustive step, the default run did not finish "
              f"({summary.get('notes')}); run --steps default again", flush=True)
        return []
    indices = args.shapes if args.shapes is not None else subset(op, args.count, args.seed,
                                                                 len(winners))
    indices = [i for i in indices if i < len(winners)]
    db = exhaustive_db(op)
    if not os.path.exists(db):
        if os.path.exists(default_db(op)):
            # Its cubins, without its timings and winners: every variant is measured in the
            # exhaustive session, and a session cut by the call's time limit resumes from
            # what it stored when the same step runs again (no --force).
            copy_db(default_db(op), db)
            with sqlite3.connect(db) as con:
                con.execute("DELETE FROM winners")
                con.execute("DELETE FROM results")
            con.close()
        else:
            fresh_db(db)
    log = os.path.join(args.out, f"headline-{op}-exhaustive.log")
    rows, notes, took = [], [], []
    for k, i in enumerate(indices):
        estimate = max(took) if took else EXHAUSTIVE_S[op]
        if deadline.left() < estimate:
            notes.append(f"stopped by --max-seconds {args.max_seconds:.0f} at "
                         f"{deadline.elapsed():.0f} s before shapes {indices[k:]} (estimate "
                         f"{estimate:.0f} s each): run --steps exhaustive --shapes "
                         f"{','.join(map(str, indices[k:]))} in another call")
            break
        b = winners[i]
        report, seconds, rc = run_cli(
            args.cli, ["--arch", "auto", "--op", op, "--db", db, "--strategy", "exhaustive",
                       "--shape", b["problem"]], log, deadline.left())
        took.append(seconds)
        row = {"op": op, "index": i, "shape": b["problem"], "default_us": None,
               "exhaustive_us": None, "ratio": None, "within_2pct": None,
               "default_variant": b["winner"], "exhaustive_variant": None,
               "default_run_us": b["winner_us"], "default_s": b.get("seconds"),
               "default_measured": b.get("measured"), "exhaustive_s": None,
               "exhaustive_measured": None, "exhaustive_wall_s": round(seconds, 1),
               "default_run_id": summary["run_id"], "commit": args.commit}
        if report is None:
            row["notes"] = (f"exhaustive run stopped by --max-seconds after {seconds:.0f} s "
                            f"(its results are stored: the same step resumes it)"
                            if rc == "timeout" else f"autotune exited with {rc}")
        else:
            e = report["problems"][0]
            default_us, outcome = measured_us(e, b["winner"])
            row.update(default_us=default_us, exhaustive_us=e["winner_us"],
                       exhaustive_variant=e["winner"], exhaustive_s=round(e["seconds"], 2),
                       exhaustive_measured=len(e["variants"]),
                       # the clock each of the two ran at in the exhaustive session: a long,
                       # dense kernel throttles the GPU, and the clocks of two timings can
                       # differ more than the 2% the comparison asks about
                       default_mhz=clock_of(e, b["winner"]),
                       exhaustive_mhz=clock_of(e, e["winner"]))
            if default_us and e["winner_us"]:
                row["ratio"] = round(default_us / e["winner_us"], 4)
                row["within_2pct"] = row["ratio"] <= WITHIN
                if b["winner"] != e["winner"] and row["ratio"] > WITHIN:
                    # Two different variants more than 2% apart in one long session: measure
                    # the pair again side by side, which decides within_2pct.
                    pair = paired(args, op, db, b["problem"], b["winner"], e["winner"], log,
                                  deadline)
                    if pair:
                        row["paired"] = pair
                        row["within_2pct"] = pair["ratio"] <= WITHIN
            else:
                row["notes"] = f"the default winner in the exhaustive run: {outcome}"
                if e["winner"] and outcome.startswith("not measured"):
                    # Outside the exhaustive run's sample (spaces over 4096 valid variants
                    # are sampled): the pair measured side by side decides.
                    pair = paired(args, op, db, b["problem"], b["winner"], e["winner"], log,
                                  deadline)
                    if pair:
                        row.update(paired=pair, ratio=pair["ratio"],
                                   within_2pct=pair["ratio"] <= WITHIN)
        rows.append(row)
        for folder in (args.out, args.work):
            write_json(os.path.join(folder, f"headline-{op}-ex-{i}.json"), row)
        print(f"[{op} {i}] {b['problem']}: default {b['winner']} {row['default_us']} us, "
              f"exhaustive {row['exhaustive_variant']} {row['exhaustive_us']} us, ratio "
              f"{row['ratio']} ({seconds:.0f} s)", flush=True)
        collect(args, quiet=True)
    if notes:
        note = {"op": op, "notes": "; ".join(notes), "default_run_id": summary["run_id"]}
        for folder in (args.out, args.work):
            write_json(os.path.join(folder, f"headline-{op}-ex-notes.json"), note)
        print(note["notes"], flush=True)
    return rows


# ---- results --------------------------------------------------------------------------------

def collect(args, quiet=False):
    """<out>/<gpu>-headline.{json,md} from the summaries and rows in --out and --collect's
    folders (a later folder's file wins over an earlier one's)."""
    folders = list(args.collect or []) + [args.out]
    summaries, rows, notes = {}, {}, {}
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, "headline-*-default.json"))):
            s = read_json(path)
            summaries[s["op"]] = s
        for path in sorted(glob.glob(os.path.join(folder, "headline-*-ex-*.json"))):
            r = read_json(path)
            if path.endswith("-ex-notes.json"):
                notes[r["op"]] = r
            else:
                rows[(r["op"], r["index"])] = r
    if not summaries:
        if not quiet:
            print(f"no headline-*-default.json in {', '.join(folders)}")
        return None
    stale = [r for (op, _), r in rows.items()
             if op in summaries and r.get("default_run_id") != summaries[op]["run_id"]]
    kept = [r for (op, _), r in sorted(rows.items(), key=lambda kv: (OPS.index(kv[0][0]),
                                                                     kv[0][1]))
            if op in summaries and r.get("default_run_id") == summaries[op]["run_id"]]
    gpu = next((s["gpu"] for s in summaries.values() if s.get("gpu")), "unknown GPU")
    result = {"gpu": gpu, "date": datetime.date.today().isoformat(),
              "commit": ", ".join(sorted({s["commit"] for s in summaries.values()})),
              "command": "python3 bench/headline.py --ops OP --out DIR (autotune --arch auto "
                         "--op OP into an empty database, timed; then --strategy exhaustive, "
                         "one shape at a time, on a subset of its shapes)",
              "within": f"ratio = default_us / exhaustive_us <= {WITHIN} (both medians from the "
                        "exhaustive run of the shape; where the winners differ and that ratio "
                        f"is over {WITHIN}, or the default winner lies outside the exhaustive "
                        "run's sample, the ratio of the pair re-measured side by side in "
                        f"{PAIRED_RUNS} short sessions decides: row 'paired')",
              "summary": {}, "tuning": [], "rows": kept, "breakdown": {}}
    for op in [o for o in OPS if o in summaries]:
        s = summaries[op]
        op_rows = [r for r in kept if r["op"] == op]
        compared = [r for r in op_rows if r["within_2pct"] is not None]
        ok = sum(1 for r in compared if r["within_2pct"])
        entry = {"headline_default_s": s["wall_s"], "shapes": s["shapes"],
                 "compared": len(compared), "within_2pct": ok,
                 "pct_within_2pct": round(100 * ok / len(compared), 1) if compared else None,
                 "commit": s["commit"], "date": s["date"]}
        op_notes = [s.get("notes"), notes.get(op, {}).get("notes")
                    if notes.get(op, {}).get("default_run_id") == s["run_id"] else None]
        failed = [r for r in op_rows if r.get("notes")]
        if failed:
            op_notes.append(f"{len(failed)} shapes without a comparison (see their notes)")
        if any(r["op"] == op for r in stale):
            op_notes.append(f"{sum(1 for r in stale if r['op'] == op)} rows of an earlier "
                            "default run dropped")
        if [n for n in op_notes if n]:
            entry["notes"] = "; ".join(n for n in op_notes if n)
        result["summary"][op] = entry
        if s.get("breakdown"):
            result["breakdown"][op] = dict(s["breakdown"], commit=s["commit"],
                                           run_id=s["run_id"])
        result["tuning"].append({
            "name": "headline_default_s", "op": op, "value": s["wall_s"], "unit": "s",
            "commit": s["commit"],
            "command": f"autotune --arch auto --op {op} --db EMPTY (bench/headline.py)",
            "notes": (f"{s['shapes']} default shapes, wall time of the command; winners within "
                      f"2% of exhaustive on {ok} of {len(compared)} compared shapes")
            + (f"; {s['notes']}" if s.get("notes") else "")})
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{gpu_slug(gpu)}-headline")
    write_json(stem + ".json", result)
    text = markdown(result)
    with open(stem + ".md", "w") as f:
        f.write(text)
    if not quiet:
        print(text)
        print(f"wrote {stem}.json and .md")
        print("rows for bench/results/<gpu>-tuning.json:")
        for t in result["tuning"]:
            print(json.dumps(t))
    return result


def mhz_cell(r):
    if r.get("default_mhz") is None and r.get("exhaustive_mhz") is None:
        return "-"
    return f"{r.get('default_mhz') or '-'} / {r.get('exhaustive_mhz') or '-'}"


def paired_cell(p):
    if not p:
        return "-"
    return f"{p['default_us']:.1f} / {p['exhaustive_us']:.1f} = {p['ratio']:.3f} ({p['runs']} runs)"


def markdown(result):
    def us(v):
        return "-" if v is None else f"{v:.1f}"
    lines = [f"# The headline command on {result['gpu']}", "",
             f"commit `{result['commit']}`, {result['date']}; `{result['command']}`", "",
             "| op | headline_default_s | shapes | within 2% of exhaustive | notes |",
             "|---|---|---|---|---|"]
    for op, s in result["summary"].items():
        lines.append(f"| {op} | {s['headline_default_s']} | {s['shapes']} | "
                     f"{s['within_2pct']}/{s['compared']} | {s.get('notes', '')} |")
    lines += ["", "default_us: the exhaustive run's full measurement of the default run's "
              "winner; ratio = default_us / exhaustive_us; default run us: the default run's own "
              "median of its winner. paired: where the winners differ by more than 2% in the "
              "exhaustive run, the two re-measured side by side (median of "
              f"{PAIRED_RUNS} short sessions: default us / exhaustive us = ratio); it decides "
              "within 2%. MHz: the SM clock the two winners' timings ran at in the exhaustive "
              "run.", "",
              "| op | # | shape | default_us | exhaustive_us | ratio | paired | within 2% | default winner "
              "| exhaustive winner | MHz | default run us | default s (variants) | exhaustive s "
              "(variants) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        within = "-" if r["within_2pct"] is None else ("yes" if r["within_2pct"] else "no")
        lines.append(f"| {r['op']} | {r['index']} | `{r['shape']}` | {us(r['default_us'])} | "
                     f"{us(r['exhaustive_us'])} | {ratio} | {paired_cell(r.get('paired'))} | "
                     f"{within} | `{r['default_variant']}` | "
                     f"`{r['exhaustive_variant']}` | {mhz_cell(r)} | {us(r['default_run_us'])} | "
                     f"{r['default_s']} ({r['default_measured']}) | {r['exhaustive_s']} "
                     f"({r['exhaustive_measured']}) |")
    notes = [r for r in result["rows"] if r.get("notes")]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {r['op']} {r['index']} `{r['shape']}`: {r['notes']}"
                                       for r in notes]
    for op, b in result.get("breakdown", {}).items():
        lines += [""] + breakdown_markdown(op, b)
    return "\n".join(lines) + "\n"


def breakdown_markdown(op, b):
    """The default run's time by phase (tuner/report.hpp names them), then its slowest
    problems."""
    def pct(v):
        return f"{100 * v / b['wall_s']:.1f}" if b["wall_s"] else "-"
    lines = [f"## Where the default run's {b['wall_s']} s went ({op}, `{b['commit']}`)", "",
             f"{b['tuned']} problems tuned; the search (compile, cubin loads, measure and store "
             f"inside the strategy) took {b['search_s']} s against budgets summing to "
             f"{b['budget_s']} s ({b['over_budget_s']} s over them); {b['outside_budget_s']} s "
             f"of the problems' time lies outside the search; {b['worker_restarts']} worker "
             "restarts.", "",
             "| phase | seconds | % of wall |", "|---|---|---|",
             f"| before the first problem | {b['start_s']} | {pct(b['start_s'])} |"]
    for k in PHASES:
        lines.append(f"| {k} | {b['phases_s'][k]} | {pct(b['phases_s'][k])} |")
    lines += [f"| CLI outside the session | {b['outside_session_s']} | "
              f"{pct(b['outside_session_s'])} |", "",
              "The worker's own account (inside setup, measure, restart and recheck): " +
              ", ".join(f"{k} {b['worker_s'][k]} s" for k in WORKER_PARTS) + ".", "",
              f"The {len(b['slowest'])} slowest problems:", "",
              "| # | shape | s | " + " | ".join(PHASES) + " | search / budget | measured |",
              "|---|---|---|" + "---|" * len(PHASES) + "---|---|"]
    for r in b["slowest"]:
        ph = r.get("phases_s", {})
        lines.append(f"| {r['index']} | `{r['problem']}` | {r['seconds']} | "
                     + " | ".join(str(ph.get(k, "-")) for k in PHASES)
                     + f" | {r.get('search_s', '-')} / {r.get('budget_s', '-')} | "
                       f"{r['measured']} |")
    return lines


# ---- main -------------------------------------------------------------------------------------

def dry_run(args, ops, steps):
    cli = args.cli if os.path.exists(args.cli) else os.path.join(REPO, "build", "autotune")
    have_cli = os.path.exists(cli)
    for op in ops:
        shapes = default_shapes(op)
        est = 0.0
        print(f"== {op}: {len(shapes)} default shapes")
        if "default" in steps:
            est += DEFAULT_S[op]
            print(f"$ {args.cli} --arch auto --op {op} --db {default_db(op)} --json   "
                  f"# empty database; estimate {DEFAULT_S[op]} s")
        if "exhaustive" in steps:
            idx = args.shapes if args.shapes is not None else subset(op, args.count, args.seed,
                                                                     len(shapes))
            print(f"exhaustive on shapes {','.join(map(str, idx))} of {len(shapes)}:")
            for i in idx:
                line = f"  [{i}] {shapes[i]}"
                guess = EXHAUSTIVE_S[op]
                if have_cli:
                    p = subprocess.run([cli, "list", "--op", op, "--arch", "sm_90a", "--shape",
                                        shapes[i]], capture_output=True, text=True)
                    if p.returncode != 0:
                        raise SystemExit(f"{cli} list refused {shapes[i]}: {p.stderr.strip()}")
                    n = len(p.stdout.splitlines())
                    guess = max(5.0, n * S_PER_VARIANT[op])
                    line += f"   {n} variants on sm_90a, ~{guess:.0f} s"
                est += guess
                print(line)
            print(f"  each: $ {args.cli} --arch auto --op {op} --db {exhaustive_db(op)} "
                  "--strategy exhaustive --shape PROBLEM --json")
        print(f"  estimate {est:.0f} s on the H100 (--max-seconds {args.max_seconds:.0f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", default=".device/autotune")
    ap.add_argument("--ops", default=None, help="comma-separated ops (default: all three)")
    ap.add_argument("--op", choices=OPS, help="one op (the same as --ops OP)")
    ap.add_argument("--steps", default="default,exhaustive",
                    help="default, exhaustive or both (comma-separated)")
    ap.add_argument("--step", choices=["all", "default", "exhaustive", "collect"],
                    help="(older spelling) all = default,exhaustive; collect = only rebuild")
    ap.add_argument("--shapes", "--subset", dest="shapes",
                    type=lambda s: [int(x) for x in s.split(",") if x],
                    help="indices into the op's default shapes for the exhaustive step "
                         "(default: a draw of DEFAULT_COUNT[op] with --seed)")
    ap.add_argument("--count", type=int, default=None,
                    help="shapes drawn for the exhaustive step (default: 5 / 2 / 6 for "
                         "causal_conv1d / selective_scan / attention)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", default=os.environ.get("OUT"),
                    help="results folder (default $OUT)")
    ap.add_argument("--collect", nargs="*", default=None, metavar="DIR",
                    help="only rebuild <gpu>-headline.{json,md} in --out from these folders "
                         "(and --out)")
    ap.add_argument("--default", default=None,
                    help="the default step's summary (headline-OP-default.json) for the "
                         "exhaustive step, when this machine's /tmp no longer has it")
    ap.add_argument("--work", default="/tmp/autotune-headline",
                    help="a folder kept while the machine stays warm")
    ap.add_argument("--max-seconds", type=float, default=570,
                    help="stop before a step or shape that would not end within this many "
                         "seconds of the start (a device call allows 600)")
    ap.add_argument("--commit", default=None, help="default: .device/COMMIT")
    ap.add_argument("--dry-run", action="store_true", help="print shapes, subsets, commands")
    args = ap.parse_args()
    ops = [args.op] if args.op else (args.ops.split(",") if args.ops else list(OPS))
    for op in ops:
        if op not in OPS:
            ap.error(f"unknown op {op!r} (expected {', '.join(OPS)})")
    steps = [s for s in args.steps.split(",") if s]
    if args.step:
        steps = {"all": ["default", "exhaustive"], "collect": []}.get(args.step, [args.step])
        if args.step == "collect" and args.collect is None:
            args.collect = []
    for s in steps:
        if s not in ("default", "exhaustive"):
            ap.error(f"unknown step {s!r}")
    if args.dry_run:
        dry_run(args, ops, steps)
        return
    if not args.out:
        ap.error("--out is required (or $OUT)")
    os.makedirs(args.out, exist_ok=True)
    if args.collect is not None:
        if collect(args) is None:
            raise SystemExit(1)
        return
    os.makedirs(args.work, exist_ok=True)
    if args.commit is None:
        path = os.path.join(os.path.dirname(os.path.abspath(args.cli)), "COMMIT")
        args.commit = open(path).read().strip() if os.path.exists(path) else "unknown"
    if args.shapes is not None and len(ops) > 1:
        ap.error("--shapes indexes one op's shapes: give one op with it")
    deadline = Deadline(args.max_seconds)
    for op in ops:
        summary = None
        if "default" in steps:
            if deadline.left() < DEFAULT_S[op]:
                print(f"{op}: not started, {deadline.left():.0f} s left of --max-seconds "
                      f"(estimate {DEFAULT_S[op]} s)", flush=True)
                continue
            summary = step_default(args, op, deadline)
            collect(args, quiet=True)
        if "exhaustive" in steps:
            summary = summary or find_default(args, op)
            if summary is None:
                raise SystemExit(f"{op}: no headline-{op}-default.json in {args.work} or "
                                 f"{args.out}: run --steps default first or give --default")
            # The summary beside this step's rows (collect reads it from --out).
            write_json(os.path.join(args.out, f"headline-{op}-default.json"), summary)
            step_exhaustive(args, op, summary, deadline)
    collect(args)


if __name__ == "__main__":
    main()
