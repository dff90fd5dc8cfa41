"""What the GPU suite's bookkeeping needs, without torch (tests/python/test_package.py
checks it in CI): running a mirrored peer grid within a time budget and counting its
cases, judging a bad-input case, and writing the results files in the format of
shared/bench/RESULTS.md (<gpu>-conformance.json, <gpu>-bad-input.json).
"""
import datetime
import json
import os
import random
import subprocess
import time
import traceback

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class ContextLost(Exception):
    """The CUDA context no longer works: every later GPU check would fail with it."""


def run_grid(op, grid, cases, unsupported, group_key, run_case, budget_s, seed=0,
             health=None, notes="", max_failures=20):
    """Run one mirrored grid. cases: the peer's parameter combinations (dicts), after the
    peer's own skips. unsupported(case): a feature name when the case needs something
    autotune does not do (counted, not run), else None. Supported cases are grouped by
    group_key (cases of one group share a compiled problem) and the groups run in a
    seeded random order until budget_s is spent; run_case(case) returns (ok, detail) or
    raises (an error). health(): raises ContextLost when the GPU context is gone; it is
    asked after every error. Returns the conformance row."""
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
    for i, key in enumerate(keys):
        if budget_s is not None and time.monotonic() - start > budget_s:
            row["not_run"] = sum(len(groups[k]) for k in keys[i:])
            break
        for case in groups[key]:
            try:
                ok, detail = run_case(case)
            except ContextLost:
                raise
            except Exception as e:  # noqa: BLE001 - every failure is counted, none stops the grid
                row["error"] += 1
                _note_failure(row, case, "error", f"{type(e).__name__}: {e}", max_failures)
                if health is not None:
                    health()
                continue
            if ok:
                row["pass"] += 1
            else:
                row["wrong"] += 1
                _note_failure(row, case, "wrong", detail, max_failures)
    row["seconds"] = round(time.monotonic() - start, 1)
    run = row["pass"] + row["wrong"] + row["error"]
    supported = sum(len(g) for g in groups.values())
    sampled = f"{run} of the {supported} supported cases ran" + (
        f" ({len(keys)} compiled problems, groups in a seeded random order until the "
        f"{budget_s:.0f} s budget was spent; not_run counts the rest)" if row["not_run"] else "")
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
