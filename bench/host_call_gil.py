#!/usr/bin/env python3
"""Does ctypes' release of the GIL around a warm call put a tail on its host time?

    python3 bench/host_call_gil.py --lib .device/libautotune.so [--calls 4000] [--rounds 3]

The warm path (_calls.py) calls the library through a CDLL function pointer, which
releases the GIL for the call and takes it back after. Here the same warm attention call
(autotune_runtime.Runtime.attention, [B, S, H, D] bf16, causal, a launch-bound size) runs
through a CDLL pointer and through a PyDLL one (the GIL held), two signatures of one
Runtime, beside the trivial library call both ways, torch's cheapest launch and a Python
spin of the call's length; rounds interleaved in one process, each row timed as
bench/python_call.py times it (single calls, the stream synchronized every 50). Prints
median, p99, p99 / median and the share of calls over 1.5x the median, per round."""
import argparse
import ctypes
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from python_call import single_call_samples  # noqa: E402
import autotune_runtime  # noqa: E402  (python_call put runtime/python on sys.path)


def tail(fn, calls):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    s = sorted(single_call_samples(fn, calls))
    med, p99 = s[len(s) // 2] * 1e6, s[int(len(s) * 0.99)] * 1e6
    over = sum(1 for x in s if x * 1e6 > 1.5 * med) / len(s)
    return med, p99, over


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rt = autotune_runtime.Runtime(args.lib, "/nonexistent/autotune-gil.db")
    dev, bf16 = "cuda", torch.bfloat16
    qa = torch.randn(1, 128, 4, 64, device=dev, dtype=bf16)
    qb = torch.randn(1, 136, 4, 64, device=dev, dtype=bf16)
    ka, va, kb, vb = (torch.randn_like(t) for t in (qa, qa, qb, qb))
    with torch.no_grad():
        rt.attention(qa, ka, va, causal=True)  # signature A's plan keeps the CDLL pointer
        pydll = ctypes.PyDLL(os.path.abspath(args.lib))
        rt.library.calls["attention"] = pydll._FuncPtr(("autotune_attention", pydll))
        rt.attention(qb, kb, vb, causal=True)  # signature B's plan keeps the PyDLL one
        pydll.autotune_last_error.restype = ctypes.c_char_p
        spin_s = 10e-6
        clock = time.perf_counter

        def spin():
            t0 = clock()
            while clock() - t0 < spin_s:
                pass
        cases = {
            "attention, CDLL (GIL released)": lambda: rt.attention(qa, ka, va, causal=True),
            "attention, PyDLL (GIL held)": lambda: rt.attention(qb, kb, vb, causal=True),
            "autotune_last_error, CDLL": rt.lib.autotune_last_error,
            "autotune_last_error, PyDLL": pydll.autotune_last_error,
            "torch.cuda._sleep(1)": lambda: torch.cuda._sleep(1),
            "spin 10 us": spin,
        }
        print("| round | call | median us | p99 us | p99 / median | over 1.5x median |")
        print("|---|---|---|---|---|---|")
        for r in range(args.rounds):
            for name, fn in cases.items():
                med, p99, over = tail(fn, args.calls)
                print(f"| {r} | {name} | {med:.2f} | {p99:.2f} | {p99 / med:.2f} | "
                      f"{100 * over:.2f}% |", flush=True)


if __name__ == "__main__":
    main()
