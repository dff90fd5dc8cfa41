#!/usr/bin/env python3
"""Where the tail of a warm call's host time comes from (issue 14's python_call_p99_us):
single calls timed alone, as bench/python_call.py times them, for three calls of rising
length -- a ctypes call into the library that does no GPU work, torch's cheapest kernel
launch, and our warm attention call -- each in two conditions: the process free to move
between cores (as python_call.py runs) and pinned to one core. Per row: the median, p99,
p99 / median, the share of calls over 1.5x the median, and the commonest gaps (in calls)
between such slow calls, which tell a periodic cost (every n-th launch) from random
interruptions.

  python3 bench/launch_tail.py --lib .device/libautotune.so [--calls 4000]
"""
import argparse
import collections
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runtime", "python"))
import autotune_runtime  # noqa: E402
from python_call import SYNC_EVERY, single_call_samples  # noqa: E402


def profile(fn, calls):
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    samples = single_call_samples(fn, calls)
    ordered = sorted(samples)
    med = ordered[calls // 2]
    p99 = ordered[int(calls * 0.99)]
    slow = [i for i, s in enumerate(samples) if s > 1.5 * med]
    gaps = collections.Counter(b - a for a, b in zip(slow, slow[1:]))
    phase = collections.Counter(i % SYNC_EVERY for i in slow)
    return med * 1e6, p99 * 1e6, len(slow) / calls, gaps.most_common(4), phase.most_common(3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--calls", type=int, default=4000)
    args = ap.parse_args()
    rt = autotune_runtime.Runtime(args.lib, "/nonexistent/autotune-launch-tail.db")
    q = torch.randn(1, 128, 4, 64, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    cases = {
        "ctypes_call": rt.lib.autotune_last_error,
        "torch_launch": lambda: torch.cuda._sleep(1),
        "attention": lambda: rt.attention(q, k, v, causal=True),
    }
    cpus = sorted(os.sched_getaffinity(0))
    with torch.no_grad():
        for pinned in (False, True):
            if pinned:
                os.sched_setaffinity(0, {cpus[len(cpus) // 2]})
            for name, fn in cases.items():
                med, p99, share, gaps, phase = profile(fn, args.calls)
                print(f"{'pinned' if pinned else 'free  '} {name:13s} median {med:7.2f} us  "
                      f"p99 {p99:7.2f} us  ({p99 / med:.2f}x)  over 1.5x: {share * 100:5.2f}%  "
                      f"gaps {gaps}  position after sync {phase}")
            os.sched_setaffinity(0, cpus)


if __name__ == "__main__":
    main()
