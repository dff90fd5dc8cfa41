"""What the GPU suite's bookkeeping needs, without torch (tests/python/test_package.py
checks it in CI): running a mirrored peer grid within a time budget and counting its
cases, judging a bad-input case, and writing the results files in the format of
shared/bench/RESULTS.md (<gpu>-conformance.json, <gpu>-bad-input.json).
"""
import concurrent.futures
import datetime
import json
import os
import random
import subprocess
import threading
import time
import traceback

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class ContextLost(Exception):
    """The CUDA context no longer works: every later GPU check would fail with it."""


def run_grid(op, grid, cases, unsupported, group_key, run_case, budget_s, seed=0,
             health=None, notes="", max_failures=20, threads=1):
    """Run one mirrored grid. cases: the peer's parameter combinations (dicts), after the
    peer's own skips. unsupported(case): a feature name when the case needs something
    autotune does not do (counted, not run), else None. Supported cases are grouped by
    group_key (cases of one group share a compiled problem) and the groups run in a
    seeded random order until budget_s is spent (None: all); run_case(case) returns
    (ok, detail) or raises (an error). health(): raises ContextLost when the GPU context
    is gone; it is asked after every error.

    threads > 1: the groups run in a pool of that many threads (the library compiles
    different problems concurrently, and ctypes releases the GIL while it does); each
    group runs whole in one thread, its cases in order, with tensors of its own. What
    each case gave is collected per group and counted in the groups' seeded order, so
    the row and its failures list do not depend on which thread finished first. A
    group that starts after the budget is spent does not run (not_run). An exception
    anywhere in a group's thread is that case's error, never lost; ContextLost stops
    the groups not yet started and is raised once the running ones are done.
    Returns the conformance row."""
    row = {"op": op, "grid": grid, "cases": len(cases), "pass": 0, "wrong": 0, "error": 0,
           "unsupported": {}, "not_run": 0, "failures": []}
    groups = {}
    for case in cases:
        feature = unsupported(case)
        if feature:
            row["unsupported"][feature] = row["unsupported"].get(feature, 0) + 1
        else:
            groups.setdefault(group_key(case), []).append(case)
    keys = sorted(groups, key=repr)
    random.Random(seed).shuffle(keys)
    start = time.monotonic()
    stop = threading.Event()  # set when the context is lost

    def run_group(key):
        """[(case, kind, detail)] of one group, or None when it did not start."""
        if stop.is_set() or (budget_s is not None and time.monotonic() - start > budget_s):
            return None
        results = []
        for case in groups[key]:
            try:
                ok, detail = run_case(case)
            except ContextLost:
                stop.set()
                raise
            except Exception as e:  # noqa: BLE001 - every failure is counted, none stops the grid
                results.append((case, "error", f"{type(e).__name__}: {e}"))
                if health is not None:
                    try:
                        health()
                    except ContextLost:
                        stop.set()
                        raise
                continue
            results.append((case, "pass" if ok else "wrong", detail))
        return results

    outcomes = {}
    lost = None
    if threads <= 1:
        for key in keys:
            outcomes[key] = run_group(key)
            if outcomes[key] is None:
                break
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
            futures = {key: pool.submit(run_group, key) for key in keys}
            for key in keys:
                try:
                    outcomes[key] = futures[key].result()
                except ContextLost as e:
                    lost = lost or e
                    stop.set()
                    outcomes[key] = None
                except BaseException as e:  # noqa: BLE001 - a harness fault in that group
                    outcomes[key] = [(groups[key][0], "error",
                                      f"{type(e).__name__}: {e} (in the group's thread)")]
    if lost is not None:
        raise lost
    ran_groups = 0
    for key in keys:
        results = outcomes.get(key)
        if results is None:
            row["not_run"] += len(groups[key])
            continue
        ran_groups += 1
        done = {id(case) for case, _, _ in results}
        for case, kind, detail in results:
            row[kind] += 1
            if kind != "pass":
                _note_failure(row, case, kind, detail, max_failures)
        # A group cut short by a harness fault: its remaining cases count as not run.
        row["not_run"] += sum(1 for case in groups[key] if id(case) not in done)
    row["seconds"] = round(time.monotonic() - start, 1)
    run = row["pass"] + row["wrong"] + row["error"]
    supported = sum(len(g) for g in groups.values())
    sampled = f"{run} of the {supported} supported cases ran" + (
        f" ({len(keys)} compiled problems, groups in a seeded random order until the "
        f"{budget_s:.0f} s budget was spent; not_run counts the rest)"
        if row["not_run"] and budget_s is not None else
        " (not_run: cases whose group did not finish)" if row["not_run"] else "")
    if threads > 1:
        sampled += f"; {threads} threads"
    row["notes"] = (notes + " " if notes else "") + sampled
    return row


def _note_failure(row, case, kind, detail, limit):
    if len(row["failures"]) < limit:
        row["failures"].append({"case": {k: _plain(v) for k, v in case.items()}, "kind": kind,
                                "detail": str(detail)[:400]})


def _plain(v):
    return v if isinstance(v, (bool, int, float, str, type(None))) else str(v)


def judge_bad_input(call, inputs_unchanged, healthy):
    """A bad-input case's verdict and message. call(): makes the mistake (must raise).
    inputs_unchanged(): True when every input still equals its copy taken before.
    healthy(): a good call of the same op and a device synchronize; raises when the
    context is gone."""
    try:
        call()
        raised, message = None, "no exception"
    except Exception as e:  # noqa: BLE001 - what was raised is the result
        raised, message = e, f"{type(e).__name__}: {e}".splitlines()[0][:300]
    try:
        healthy()
    except Exception as e:  # noqa: BLE001
        return f"context lost ({type(e).__name__}: {e})"[:300], message
    if raised is None:
        return "accepted (no exception)", message
    if not inputs_unchanged():
        return "raised, but an input was modified", message
    return "raised", message


def header(gpu, command):
    return {"gpu": gpu, "date": datetime.date.today().isoformat(), "commit": commit(),
            "command": command}


def commit():
    """The commit measured: .device/COMMIT (written by scripts/device-bundle.sh), else git."""
    path = os.path.join(REPO, ".device", "COMMIT")
    if os.path.exists(path):
        with open(path) as f:
            return f.read().strip() or "unknown"
    try:
        out = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def gpu_slug(name):
    """'NVIDIA H100 80GB HBM3' -> 'h100' (the results files' prefix)."""
    for word in name.replace("-", " ").split():
        w = word.lower()
        if w[:1] in "ahlbv" and any(c.isdigit() for c in w) and w not in ("80gb", "hbm3"):
            return w
    return "gpu"


def write_json(path, data):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


class Tally:
    """Named checks with a result each, printed as they finish and summed as the line
    'N passed, N failed' that test runners' readers look for."""

    def __init__(self, out=print):
        self.passed, self.failed, self.skipped = 0, 0, 0
        self.failures = []
        self.out = out

    def check(self, name, fn):
        """Run fn(); it passes when it returns without raising (returning a string notes
        it; returning ("skip", why) skips)."""
        start = time.monotonic()
        try:
            result = fn()
        except ContextLost:
            self.record(name, False, "the CUDA context was lost")
            raise
        except Exception as e:  # noqa: BLE001
            detail = f"{type(e).__name__}: {e}"
            self.record(name, False, detail + "\n" + traceback.format_exc(limit=4))
            return False
        if isinstance(result, tuple) and result and result[0] == "skip":
            self.skipped += 1
            self.out(f"SKIP {name}: {result[1]}")
            return True
        self.record(name, True, f"{result} ({time.monotonic() - start:.1f} s)"
                    if result else f"({time.monotonic() - start:.1f} s)")
        return True

    def record(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            self.out(f"PASS {name} {detail}".rstrip())
        else:
            self.failed += 1
            self.failures.append(name)
            self.out(f"FAIL {name}: {detail}".rstrip())

    def summary(self):
        line = f"{self.passed} passed, {self.failed} failed"
        return line + (f", {self.skipped} skipped" if self.skipped else "")
