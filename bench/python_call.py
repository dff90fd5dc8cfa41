#!/usr/bin/env python3
"""Host time of a warm call from Python, ours beside torch's own ops, at launch-bound
sizes: rows python_call_us (median over single calls) and python_call_p99_us for
bench/results/<gpu>-tuning.json. Ours three ways: the ctypes Runtime
(runtime/python/autotune_runtime.py; ops attention, causal_conv1d, selective_scan), the
package's drop-ins (flash_attn_func, causal_conv1d_fn, selective_scan_fn,
flash_attn_with_kvcache, flash_attn_varlen_func: what a model calls) and the registered operators through torch's dispatcher
(torch.ops.autotune.attention, ...: what a compiled graph calls). Issue 16's floor: the
drop-in attention call at most sdpa's, the drop-in conv call at most conv1d's.

  python3 bench/python_call.py --lib .device/libautotune.so [--calls 2000]

Every row is taken under torch.no_grad(), as inference runs. Each call is timed alone on
the host (perf_counter around the call, the stream synchronized every 50 calls so
launches never wait for a full queue); a row's median and p99 are each the best of
--repeats (3) repetitions in this process, gc.collect() before each. The garbage collector
stays on (as a user has it): the p99 row's notes count the collections that ran during the
timed calls of all repetitions (a warm call of ours leaves nothing to collect, so a tail
that comes with none is not the collector's). Nothing is tuned: the default variants run,
which changes the GPU time, not the host time.
"""
import argparse
import gc
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runtime", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import autotune_runtime  # noqa: E402


SYNC_EVERY = 50  # calls between stream synchronizations (not timed)


def single_call_samples(fn, calls, clock=time.perf_counter):
    """Seconds of each of `calls` warm calls of fn, each timed alone on the host, the
    stream synchronized (untimed) every SYNC_EVERY calls so that launches never wait for a
    full queue. The sample list is preallocated: the loop appends nothing."""
    samples = [0.0] * calls
    for i in range(calls):
        t0 = clock()
        fn()
        samples[i] = clock() - t0
        if i % SYNC_EVERY == SYNC_EVERY - 1:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return samples


def host_times(fn, calls, repeats=3):
    """(median, p99, collections, after_sync_median, others_p99): the median and p99 of
    single warm calls in microseconds, each the best of `repeats` repetitions in this
    process (the garbage collector emptied before each: a collection triggered by what an
    earlier row left is not this row's jitter), how many garbage collections started
    during the timed loops of all repetitions (counted by a gc callback; the collector
    stays enabled), and, to tell where a tail comes from, the median of the calls made
    right after a synchronization (1 in SYNC_EVERY) and the p99 of the other calls (best
    of the repetitions too)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = None
    clock = time.perf_counter
    started = [0]

    def count(phase, info):
        if phase == "start":
            started[0] += 1

    collections = 0
    for _ in range(repeats):
        gc.collect()
        started[0] = 0
        gc.callbacks.append(count)
        try:
            samples = single_call_samples(fn, calls, clock)
        finally:
            gc.callbacks.remove(count)
        collections += started[0]
        after = sorted(samples[i] for i in range(0, calls, SYNC_EVERY))
        others = sorted(samples[i] for i in range(calls) if i % SYNC_EVERY)
        samples.sort()
        stats = (samples[len(samples) // 2], samples[int(len(samples) * 0.99)],
                 after[len(after) // 2], others[int(len(others) * 0.99)])
        best = stats if best is None else tuple(map(min, best, stats))
    med, p99, after_med, others_p99 = (x * 1e6 for x in best)
    return med, p99, collections, after_med, others_p99


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3,
                    help="repetitions per row; median and p99 are each the best (default 3)")
    args = ap.parse_args()
    if args.calls < 100:
        ap.error(f"--calls must be at least 100 (a p99 needs them), not {args.calls}")
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, not {args.repeats}")
    db = "/nonexistent/autotune-python-call.db"
    rt = autotune_runtime.Runtime(args.lib, db)
    os.environ["AUTOTUNE_LIBRARY"] = os.path.abspath(args.lib)
    import autotune
    autotune.set_database(db)
    ops = torch.ops.autotune
    dev = "cuda"
    bf16 = torch.bfloat16
    # attention: [B, S, H, D] as flash-attn callers pass it
    q = torch.randn(1, 128, 4, 64, device=dev, dtype=bf16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    # causal_conv1d
    x = torch.randn(1, 64, 256, device=dev, dtype=bf16)
    w = torch.rand(64, 4, device=dev, dtype=bf16) - 0.5
    b = torch.rand(64, device=dev, dtype=bf16) - 0.5
    # selective_scan
    u = torch.randn(1, 64, 256, device=dev, dtype=bf16)
    delta = torch.rand(1, 64, 256, device=dev, dtype=bf16) - 3
    A = -torch.rand(64, 16, device=dev) - 0.01
    Bm = torch.randn(1, 16, 256, device=dev, dtype=bf16)
    Cm = torch.randn(1, 16, 256, device=dev, dtype=bf16)
    Dv = torch.rand(64, device=dev)
    z = torch.randn_like(u)
    dbias = -torch.rand(64, device=dev)
    # decoding against a paged KV cache (one 256-key page per sequence) and a varlen batch
    kc = torch.randn(1, 256, 2, 64, device=dev, dtype=bf16)
    vc = torch.randn_like(kc)
    table = torch.zeros(1, 1, device=dev, dtype=torch.int32)
    lens = torch.full((1,), 200, device=dev, dtype=torch.int32)
    q1 = torch.randn(1, 1, 4, 64, device=dev, dtype=bf16)
    tq = torch.randn(128, 4, 64, device=dev, dtype=bf16)
    cu = torch.tensor([0, 80, 128], device=dev, dtype=torch.int32)
    cases = {
        "attention": lambda: rt.attention(q, k, v, causal=True),
        "sdpa": lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
        "causal_conv1d": lambda: rt.causal_conv1d(x, w, b, silu=True),
        "conv1d": lambda: F.silu(F.conv1d(x, w.unsqueeze(1), b, padding=3, groups=64)[..., :256]),
        "selective_scan": lambda: rt.selective_scan(u, delta, A, Bm, Cm, D=Dv, z=z,
                                                    delta_bias=dbias, delta_softplus=True),
        "flash_attn_func": lambda: autotune.flash_attn_func(q, k, v, causal=True),
        "causal_conv1d_fn": lambda: autotune.causal_conv1d_fn(x, w, b, activation="silu"),
        "selective_scan_fn": lambda: autotune.selective_scan_fn(
            u, delta, A, Bm, Cm, Dv, z=z, delta_bias=dbias, delta_softplus=True),
        "flash_attn_with_kvcache": lambda: autotune.flash_attn_with_kvcache(
            q1, kc, vc, cache_seqlens=lens, block_table=table),
        "flash_attn_varlen_func": lambda: autotune.flash_attn_varlen_func(
            tq, tq, tq, cu, cu, 80, 80, causal=True),
        "torch.ops.autotune.attention": lambda: ops.attention(q, k, v, True),
        "torch.ops.autotune.causal_conv1d": lambda: ops.causal_conv1d(x, w, b, None, True),
        "torch.ops.autotune.selective_scan": lambda: ops.selective_scan(
            u, delta, A, Bm, Cm, Dv, z, dbias, True),
    }
    kinds = {"sdpa": "torch", "conv1d": "torch", "flash_attn_func": "the package's drop-in",
             "causal_conv1d_fn": "the package's drop-in",
             "selective_scan_fn": "the package's drop-in",
             "flash_attn_with_kvcache": "the package's drop-in: one decoding step, paged cache",
             "flash_attn_varlen_func": "the package's drop-in: two packed sequences"}
    with torch.no_grad():
        rows = {op: host_times(fn, args.calls, args.repeats) for op, fn in cases.items()}
    # Where a tail comes from when nothing is collected: two baselines timed the same way.
    # host_spin: Python spinning for the attention row's median (no GPU, no library): the
    # machine's own jitter (timer interrupts, ...) at that call length; torch_launch: the
    # cheapest kernel launch torch makes (torch.cuda._sleep of one cycle).
    spin_s = rows["attention"][0] * 1e-6
    clock = time.perf_counter

    def spin():
        t0 = clock()
        while clock() - t0 < spin_s:
            pass
    rows["host_spin"] = host_times(spin, args.calls, args.repeats)
    rows["torch_launch"] = host_times(lambda: torch.cuda._sleep(1), args.calls, args.repeats)
    # The parts of our warm call that are not ours: the output's allocation and a ctypes
    # call into the library that does nothing on the GPU.
    rows["empty_like"] = host_times(lambda: torch.empty_like(q), args.calls, args.repeats)
    last_error = rt.lib.autotune_last_error
    rows["ctypes_call"] = host_times(last_error, args.calls, args.repeats)
    kinds["empty_like"] = "torch.empty_like(q): the output allocation our warm call makes"
    kinds["ctypes_call"] = "autotune_last_error() through ctypes: a library call, no GPU work"
    kinds["host_spin"] = "a Python loop spinning for the attention row's median, no GPU"
    kinds["torch_launch"] = "torch.cuda._sleep(1), torch's cheapest kernel launch"
    for op, (med, p99, collections, after_med, others_p99) in rows.items():
        notes = kinds.get(op, "the registered operator through torch's dispatcher"
                          if op.startswith("torch.ops") else "autotune_runtime over the C ABI")
        print(json.dumps({"name": "python_call_us", "op": op, "value": round(med, 2),
                          "unit": "us", "notes": f"median host time of a warm call ({notes}); "
                          f"best of {args.repeats} repetitions of {args.calls} calls"}))
        print(json.dumps({"name": "python_call_p99_us", "op": op, "value": round(p99, 2),
                          "ratio_to_median": round(p99 / med, 2),
                          "unit": "us", "notes": f"99th percentile, best of {args.repeats} "
                          f"repetitions of {args.calls} calls; {collections} garbage "
                          f"collections during the timed calls; the calls right after a "
                          f"stream synchronization (1 in {SYNC_EVERY}): median "
                          f"{after_med:.2f} us; p99 of the others: {others_p99:.2f} us"}))


if __name__ == "__main__":
    main()
