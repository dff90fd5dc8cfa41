#!/usr/bin/env python3
"""Shapes nobody tuned: each op's time under each runtime policy for untuned shapes,
beside the time of the shape's own tuned winner and the peers of the existing benches.

On the GPU machine (bundle in .device/, see scripts/device-bundle.sh), one op per device
call (each fits in 10 minutes, the benchmark grid's database included):

  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
  python3 bench/unseen.py --ops causal_conv1d --out $OUT --commit $(cat .device/COMMIT)
  python3 bench/unseen.py --ops selective_scan --out $OUT ...
  python3 bench/unseen.py --ops attention --out $OUT ...

Here, without a GPU or torch: `python3 bench/unseen.py --dry-run` prints the shapes and
the commands (and checks each shape with `autotune list` when a CLI is at hand).

The database holds only the benchmark grid: --db PATH, else /tmp/autotune-headline-OP.db
(the database bench/headline.py's default step leaves on a warm machine), made or
completed here with `autotune --arch auto --op OP --strategy halving --budget-s 2` when
it is missing (an existing complete one costs a second: nothing is measured again).
On the H100 that takes about 9 s for causal_conv1d, 70 s for selective_scan and 190 s
for attention (bench/results/h100-tuning.json, headline_default_s).

Shapes: --count (default 12) per op, drawn with a fixed seed (--seed) from realistic
ranges, none in the benchmark grid (bench/shapes.toml):
- causal_conv1d: batch 1-64, Mamba channel counts 768-5120, odd lengths (333, 1000, 2047,
  4095, ...), W 2/3/4; bf16, bias, SiLU. The draw of earlier results (seed 2026) is kept.
- selective_scan: batch 1-64, Mamba d_inner 1536/2048/2560/3072/4096/5120 with N=16,
  odd lengths; bf16, variable B/C (one group), D skip, z gate, delta_bias, softplus.
- attention: heads of real models (Llama-2/3, Mistral, Qwen2, GPT-2, StarCoder/
  SantaCoder MQA: Hq 8-64, Hkv = Hq or 1/4/8, D 64/128), batch 1-64, Sq = Sk (prefill)
  or Sq < Sk (chunked prefill / decode against a cache, causal bottom-right aligned),
  causal or not, bf16 or fp16, layout [B,S,H,D].
Per shape:
- ours under each policy (--policies, default nearest, heuristic, default): a runtime
  over the grid's database, timed after a first call (which compiles what it runs);
  `variant` is what the runtime's *_variant() reports;
- tuned: the shape tuned on its own (`autotune --shape S` with the default strategy,
  halving, into a scratch copy of the grid's database, so transfer from the grid applies
  as it would for a user), then run with policy error (it must be the tuned winner);
  tune_s is the wall time of that command;
- peers, in us: causal_conv1d torch F.conv1d (depthwise, + bias + SiLU) and a copy;
  selective_scan a copy; attention torch SDPA with the flash and the cuDNN backend
  forced (bottom-right causal mask when Sq < Sk). The copy is a device-to-device copy
  whose read + write traffic equals the op's effective bytes (as bench_causal_conv1d.py
  and bench_selective_scan.py measure it); pct_of_copy = 100 * copy_us / ours_us.
  (Rows of causal_conv1d before this version copied twice those bytes: their
  copy_fraction reads about twice too high.)
All timed with triton.testing.do_bench (CUDA events, L2 flushed, median); the tuned winner,
each policy's variant and the copy in --rounds interleaved rounds (default 3), each one's
time the median of its rounds.
Rows {op, shape, policy, ours_us, tuned_us, ratio_to_tuned (tuned_us / ours_us),
peers{...}} plus variant, tuned_variant, rel_err, tune_s and, for causal_conv1d and
selective_scan, gbps and pct_of_copy (and the earlier names GBps, copy_fraction, MB),
for attention tflops. Written after every shape to --out/<gpu>-unseen.{json,md}, merged
with the rows of the other ops from --merge (default bench/results/<gpu>-unseen.json):
a run of one op replaces that op's rows only. --max-seconds (default 540) stops before a
shape that would not finish in time and says so in the op's "notes". The new_shape_s rows
for <gpu>-tuning.json are printed at the end.

--cold: tuning one new shape into an EMPTY database instead (no neighbours, no cubins:
the op's cold budget, 10x the 2 s, and every variant it measures compiled), the autotune
CLI alone (no torch, no library):
  python3 bench/unseen.py --cold --ops causal_conv1d,selective_scan,attention --out $OUT
times `autotune --arch auto --op OP --shape S --db EMPTY --json` for the first shape of
each op's draw (--only picks others): new_shape_cold_s, printed as rows for
<gpu>-tuning.json and written with the tuner's time by phase to
--out/<gpu>-new-shape-cold.{json,md} (a run of some ops keeps the other ops' rows).
About 10 s (causal_conv1d), 35 s (selective_scan) and 30 s (attention) per shape on the
H100 (estimates: the cold budget plus compiling). --cold-exhaustive also tunes the shape
with --strategy exhaustive --force over the same database (its cubins) and says whether
the cold winner is within 3% of the exhaustive one (ratio of their medians in that run):
about 10 s more for causal_conv1d and 2 minutes for attention; selective_scan samples
4096 variants, most of them not yet compiled (about 9 minutes: a call of its own, with
--max-seconds 590).
"""
import argparse
import datetime
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))

OPS = ["causal_conv1d", "selective_scan", "attention"]
POLICIES = ["nearest", "heuristic", "default"]
GRID_ARGS = "--strategy halving --budget-s 2"
# Seconds per shape before one was measured (tuning + measuring), for --max-seconds.
PRIOR_SHAPE_S = {"causal_conv1d": 12, "selective_scan": 25, "attention": 30}
# Seconds to make the grid's database from nothing (H100, h100-tuning.json), for --dry-run.
GRID_S = {"causal_conv1d": 9, "selective_scan": 70, "attention": 190}


def grid_db_path(op):
    """Where bench/headline.py's default step leaves op's database on the GPU machine."""
    return f"/tmp/autotune-headline-{op}.db"


# ---- shapes -------------------------------------------------------------------------------

def conv_shapes(rng, count, grid=()):
    # The draw of the first results (bench/results/h100-unseen.json, seed 2026): keep the
    # choices and their order, so that the same seed gives the same shapes.
    shapes = []
    while len(shapes) < count:
        s = {"B": rng.choice([1, 2, 3, 4, 8, 16, 32, 64]),
             "C": rng.choice([768, 1536, 2048, 2560, 3072, 4096, 5120]),
             "L": rng.choice([333, 512, 1000, 1500, 2047, 3000, 4095, 8192]),
             "W": rng.choice([4, 4, 4, 3, 2])}
        if (s["B"] * s["C"] * s["L"] <= 2 ** 28 and s not in shapes
                and shape_text("causal_conv1d", s) not in grid):
            shapes.append(s)
    return shapes


def scan_shapes(rng, count, grid=()):
    shapes = []
    while len(shapes) < count:
        s = {"B": rng.choice([1, 2, 3, 4, 8, 16, 32, 64]),
             # Mamba-1 d_inner (2 x d_model): 130m, 370m, 2560, 790m, 1.4b, 2.8b.
             "D": rng.choice([1536, 2048, 2560, 3072, 4096, 5120]),
             "L": rng.choice([333, 512, 777, 1000, 1500, 2047, 3000, 4095, 8191]),
             "N": 16}
        if (s["B"] * s["D"] * s["L"] <= 2 ** 26 and s not in shapes
                and shape_text("selective_scan", s) not in grid):
            shapes.append(s)
    return shapes


# (Hq, Hkv, D) of real models.
ATTENTION_HEADS = [
    (32, 32, 128),  # Llama-2-7B
    (40, 40, 128),  # Llama-2-13B
    (32, 8, 128),   # Llama-3-8B, Mistral-7B
    (64, 8, 128),   # Llama-2/3-70B
    (28, 4, 128),   # Qwen2-7B
    (48, 1, 128),   # StarCoder (MQA)
    (16, 1, 128),   # SantaCoder (MQA)
    (12, 12, 64),   # GPT-2
    (16, 16, 64),   # GPT-2 medium
    (8, 1, 64),     # small MQA
]
ATTENTION_LENGTHS = [333, 512, 1000, 1023, 1500, 2047, 3000, 4095, 8191]
ATTENTION_QUERIES = [1, 16, 100, 128, 500]  # Sq < Sk: decode and chunked prefill
ATTENTION_MAX_FLOPS = 2e12   # 4*B*Hq*Sq*Sk*D before the causal halving: a few ms at most
ATTENTION_MAX_TOKENS = 65536  # B*Sk


def attention_shapes(rng, count, grid=()):
    shapes = []
    while len(shapes) < count:
        hq, hkv, d = rng.choice(ATTENTION_HEADS)
        sk = rng.choice(ATTENTION_LENGTHS)
        # Every third shape Sq < Sk (decode, chunked prefill), the others Sq = Sk (prefill).
        sq = sk if len(shapes) % 3 != 2 else rng.choice([q for q in ATTENTION_QUERIES if q < sk])
        s = {"B": rng.choice([1, 2, 3, 4, 8, 16, 32, 64]), "Hq": hq, "Hkv": hkv, "Sq": sq,
             "Sk": sk, "D": d, "causal": rng.random() < 0.5,
             "dtype": rng.choice(["bf16", "bf16", "bf16", "fp16"]), "layout": "bshd"}
        flops = 4 * s["B"] * hq * sq * sk * d
        if (flops <= ATTENTION_MAX_FLOPS and s["B"] * sk <= ATTENTION_MAX_TOKENS
                and s not in shapes and shape_text("attention", s) not in grid):
            shapes.append(s)
    return shapes


DRAWS = {"causal_conv1d": (conv_shapes, 0), "selective_scan": (scan_shapes, 1),
         "attention": (attention_shapes, 2)}


def draw(op, seed, count, grid):
    """count shapes of op drawn with seed (each op its own stream), none in grid."""
    fn, offset = DRAWS[op]
    return fn(random.Random(seed + offset), count, grid)


def shape_text(op, s):
    """The --shape text of the autotune CLI (the runtime's problem key, less defaults)."""
    if op == "causal_conv1d":
        return f"B={s['B']},C={s['C']},L={s['L']},W={s['W']},dtype=bf16,bias=1,silu=1"
    if op == "selective_scan":
        return f"B={s['B']},D={s['D']},L={s['L']},N={s['N']},dtype=bf16"
    return (f"B={s['B']},Hq={s['Hq']},Hkv={s['Hkv']},Sq={s['Sq']},Sk={s['Sk']},D={s['D']},"
            f"causal={int(bool(s['causal']))},dtype={s['dtype']},layout={s['layout']}")


def grid_texts(op, path=os.path.join(HERE, "shapes.toml")):
    """The shape texts of op's benchmark grid (bench/shapes.toml, as bench_OP.py reads it)."""
    with open(path, "rb") as f:
        spec = tomllib.load(f)[op]
    if op == "causal_conv1d":
        return {shape_text(op, s) for s in spec["shapes"]}
    if op == "selective_scan":
        return {shape_text(op, s) for s in spec["shapes"]}
    out = set()
    g = spec["grid"]
    for dtype in spec["dtype"]:
        for d in g["head_dim"]:
            for causal in g["causal"]:
                for s in g["seqlen"]:
                    out.add(shape_text(op, dict(B=16384 // s, Hq=2048 // d, Hkv=2048 // d, Sq=s,
                                                Sk=s, D=d, causal=causal, dtype=dtype,
                                                layout="bshd")))
    for e in spec["extra"]:
        hq = e.get("Hq", e.get("H"))
        out.add(shape_text(op, dict(B=e["B"], Hq=hq, Hkv=e.get("Hkv", hq), Sq=e["S"], Sk=e["S"],
                                    D=e["D"], causal=e.get("causal", False), dtype="fp16",
                                    layout="bhsd")))
    return out


def row_shape(op, s):
    """The shape as a result row holds it."""
    if op == "attention":
        return dict(s, causal=bool(s["causal"]))
    return dict(s, dtype="bf16")


# ---- measuring (GPU machine: torch, triton, libautotune.so) ---------------------------------

class Case:
    """One shape's tensors: run(rt) gives the call of a runtime, check() the relative error
    of the output the last call wrote, peers the peers' calls; nbytes / flops for the metric."""
    nbytes = None
    flops = None
    out = None

    def poison(self):
        """NaN in the output, so that a call that writes nothing fails its check."""
        self.out.fill_(float("nan"))

    def check(self):
        return None


def conv_case(s):
    import torch
    import torch.nn.functional as F
    c = Case()
    B, C, L, W = s["B"], s["C"], s["L"], s["W"]
    x = torch.randn(B, C, L, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(C, W, device="cuda", dtype=torch.bfloat16) - 0.5
    b = torch.rand(C, device="cuda", dtype=torch.bfloat16) - 0.5
    out = torch.empty_like(x)
    c.nbytes = 2 * (2 * B * C * L + C * W + C)
    c.run = lambda rt: (lambda: rt.causal_conv1d(x, w, b, silu=True, out=out))
    c.args = lambda rt: rt.causal_conv1d_args(x, w, b, out, True)
    c.out = out
    ref = []

    def check():
        if not ref:
            ref.append(F.silu(F.conv1d(x.double(), w.double().unsqueeze(1), b.double(),
                                       padding=W - 1, groups=C)[..., :L]))
        return ((out.double() - ref[0]).norm() / ref[0].norm()).item()
    c.check = check
    c.peers = {"torch_conv1d": lambda: F.silu(F.conv1d(x, w.unsqueeze(1), b, padding=W - 1,
                                                       groups=C)[..., :L])}
    return c


def scan_case(s):
    import torch
    c = Case()
    B, D, L, N = s["B"], s["D"], s["L"], s["N"]
    dt = torch.bfloat16
    # Ranges as bench_selective_scan.py's and the tuner's.
    u = torch.randn(B, D, L, device="cuda", dtype=dt)
    delta = (torch.rand(B, D, L, device="cuda") * -3.0).to(dt)
    z = torch.randn(B, D, L, device="cuda", dtype=dt)
    A = -(torch.rand(D, N, device="cuda") * 1.99 + 0.01)
    Bm = torch.randn(B, 1, N, L, device="cuda", dtype=dt)
    Cm = torch.randn(B, 1, N, L, device="cuda", dtype=dt)
    Dv = torch.rand(D, device="cuda") * 2 - 1
    bias = -torch.rand(D, device="cuda")
    out = torch.empty_like(u)
    # bench_selective_scan.py's effective bytes (the fp32 A, D, delta_bias included).
    c.nbytes = 4 * B * D * L * 2 + 2 * B * N * L * 2 + D * N * 4 + 2 * D * 4
    c.run = lambda rt: (lambda: rt.selective_scan(u, delta, A, Bm, Cm, D=Dv, z=z,
                                                  delta_bias=bias, delta_softplus=True, out=out))
    c.args = lambda rt: rt.selective_scan_args(u, delta, A, Bm, Cm, out, Dv, z, bias, True)
    c.out = out
    ref = []
    channels = min(D, 16)

    def check():
        from bench_selective_scan import reference, rel_err
        if not ref:
            ref.append(reference(u, delta, A, Bm, Cm, Dv, z, bias, channels))
        return rel_err(out, ref[0], channels)
    c.check = check
    c.peers = {}
    return c


def attention_case(s):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    c = Case()
    B, Hq, Hkv, Sq, Sk, D = s["B"], s["Hq"], s["Hkv"], s["Sq"], s["Sk"], s["D"]
    causal = bool(s["causal"])
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[s["dtype"]]
    # [B, S, H, D] storage (layout bshd), as a user's projections give it.
    q = torch.randn(B, Sq, Hq, D, device="cuda", dtype=dt)
    k = torch.randn(B, Sk, Hkv, D, device="cuda", dtype=dt)
    v = torch.randn(B, Sk, Hkv, D, device="cuda", dtype=dt)
    o = torch.empty_like(q)
    c.flops = 4 * B * Hq * Sq * Sk * D / (2 if causal else 1)
    c.nbytes = 2 * (q.numel() + k.numel() + v.numel() + o.numel())
    c.run = lambda rt: (lambda: rt.attention(q, k, v, causal=causal, out=o))
    c.args = lambda rt: rt.attention_args(q, k, v, o, None, causal, None, layout="bshd")
    c.out = o
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    gqa = Hq != Hkv
    mask = None
    if causal and Sq != Sk:
        # torch's is_causal is top-left aligned when Sq != Sk (and refused by flash);
        # the FlashAttention convention, ours, is bottom-right.
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(Sq, Sk)

    def sdpa(backend):
        def run():
            with sdpa_kernel(backend):
                if mask is not None:
                    return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask,
                                                          enable_gqa=gqa)
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                      enable_gqa=gqa)
        return run
    c.peers = {"sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
               "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
    ref = []

    def check():
        if not ref:
            # fp32, a batch element and 8 heads at a time, an explicit bottom-right mask.
            m = None
            if causal:
                m = torch.ones(Sq, Sk, device="cuda", dtype=torch.bool).tril(Sk - Sq)
            r = torch.empty(B, Hq, Sq, D, device="cuda", dtype=torch.float32)
            g = Hq // Hkv
            for b in range(B):
                for h0 in range(0, Hq, 8):
                    h1 = min(Hq, h0 + 8)
                    heads = torch.arange(h0, h1, device="cuda") // g
                    kr = kt[b, heads].float().unsqueeze(0)
                    vr = vt[b, heads].float().unsqueeze(0)
                    r[b, h0:h1] = F.scaled_dot_product_attention(
                        qt[b:b + 1, h0:h1].float(), kr, vr, attn_mask=m)[0]
            ref.append(r)
        r = ref[0]
        return ((ot.float() - r).norm() / r.norm()).item()
    ot = o.transpose(1, 2)
    c.check = check
    return c


CASES = {"causal_conv1d": conv_case, "selective_scan": scan_case, "attention": attention_case}


def bench_us(fn):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


def interleaved_us(timed, rounds):
    """{name: median us over `rounds` rounds of bench_us}, the names timed in turn in each
    round, in reverse order every other round."""
    names = list(timed)
    samples = {n: [] for n in names}
    for r in range(max(1, rounds)):
        for n in (names if r % 2 == 0 else names[::-1]):
            samples[n].append(bench_us(timed[n]))
    return {n: statistics.median(v) for n, v in samples.items()}


def copy_peer(nbytes):
    """A device copy whose read + write traffic is nbytes."""
    import torch
    src = torch.empty(max(1, nbytes // 4), device="cuda", dtype=torch.bfloat16).normal_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def short_error(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def copy_db(src, dst):
    """A plain copy of an SQLite database and its WAL (the writer has exited)."""
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(dst + suffix):
            os.remove(dst + suffix)
    for suffix in ("", "-wal"):
        if os.path.exists(src + suffix):
            shutil.copyfile(src + suffix, dst + suffix)


def run_group(cmd, timeout):
    """(returncode or 'timeout', stderr) of cmd run in a session of its own, stdout
    discarded; on timeout that session (the CLI and its measuring worker) is killed, by
    its process group id."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=max(1.0, timeout))
        return proc.returncode, err or ""
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", ""


class Deadline:
    def __init__(self, seconds):
        self.start = time.monotonic()
        self.seconds = seconds

    def elapsed(self):
        return time.monotonic() - self.start

    def left(self):
        return self.seconds - self.elapsed()


def make_grid(args, op, deadline, run):
    """The grid's database of op: --db, else made or completed at grid_db_path(op)."""
    if args.db:
        if not os.path.exists(args.db):
            raise SystemExit(f"--db {args.db} does not exist")
        run["grid_db"] = args.db
        return args.db
    path = grid_db_path(op)
    existed = os.path.exists(path)
    cmd = [args.cli, "--arch", "auto", "--op", op, "--db", path, "--quiet"] + GRID_ARGS.split()
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    rc, err = run_group(cmd, deadline.left())
    if rc == "timeout":
        raise subprocess.TimeoutExpired(cmd, deadline.seconds)
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with {rc}: {err[-2000:]}")
    run["grid_db"] = path
    run["grid_command"] = " ".join(cmd[:1] + ["--arch", "auto", "--op", op] + GRID_ARGS.split())
    run["grid_s"] = round(time.monotonic() - t0, 1)
    run["grid_db_existed"] = existed
    print(f"grid database of {op}: {path} ({'completed' if existed else 'made'} in "
          f"{run['grid_s']} s)", flush=True)
    return path


def measure_shape(args, op, s, grid_db, runtimes, deadline):
    """The rows of one shape (one per policy) and its tuning time."""
    import torch
    import autotune_runtime
    text = shape_text(op, s)
    notes = {}
    own = os.path.join(args.tmp, f"autotune-unseen-{op}-{os.getpid()}.db")
    copy_db(grid_db, own)
    cmd = [args.cli, "--arch", "auto", "--op", op, "--shape", text, "--db", own,
           "--quiet"] + args.tune_args.split()
    t0 = time.monotonic()
    tune_s = None
    rc, err = run_group(cmd, deadline.left())
    if rc == 0:
        tune_s = time.monotonic() - t0
    elif rc == "timeout":
        notes["tuned"] = f"tuning stopped by --max-seconds after {time.monotonic() - t0:.0f} s"
    else:
        notes["tuned"] = f"autotune exited with {rc}: {err.strip()[-300:]}"
    case = CASES[op](s)
    # What is timed: the tuned winner and each policy's variant (each checked first),
    # then timed together in args.rounds interleaved rounds (order reversed every other
    # round) so that a drift of the GPU's clock or a noisy moment reaches them alike;
    # each one's time is the median of its rounds. Timed one after another, the same
    # variant under two policies measured up to 8% apart on a 9 us kernel (causal_conv1d
    # B=2,C=2048,L=512: 8.86 and 9.54 us).
    timed = {}  # name -> fn
    keep = []   # runtimes alive until the timing is done
    tuned_variant = None
    if tune_s is not None:
        try:
            rt = autotune_runtime.Runtime(args.lib, own, policy="error")
            keep.append(rt)
            fn = case.run(rt)
            case.poison()
            fn()
            torch.cuda.synchronize()
            tuned_variant = rt.variant(op, case.args(rt))
            err = case.check()
            if err is not None and not err < args.max_rel_err:
                notes["tuned"] = f"rel_err {err:.3g} of the tuned winner"
            timed["tuned"] = fn
        except Exception as e:  # a runtime error is a result, not the end of the run
            notes["tuned"] = short_error(e)
    peer_us = {}
    for name, fn in case.peers.items():
        try:
            fn()
            torch.cuda.synchronize()
            peer_us[name] = round(bench_us(fn), 2)
        except Exception as e:  # a peer that cannot run this shape
            peer_us[name] = None
            notes[name] = short_error(e)
    if op != "attention":
        timed["copy"] = copy_peer(case.nbytes)
    rows = []
    for policy, rt in runtimes.items():
        row = {"op": op, "shape": row_shape(op, s), "policy": policy, "variant": None,
               "ours_us": None, "tuned_us": None, "ratio_to_tuned": None,
               "tuned_variant": tuned_variant, "rel_err": None, "peers": peer_us,
               "tune_s": None if tune_s is None else round(tune_s, 2)}
        row_notes = dict(notes)
        try:
            fn = case.run(rt)
            case.poison()
            fn()  # compiles (nearest, heuristic) what it runs, outside the timing
            torch.cuda.synchronize()
            row["variant"] = rt.variant(op, case.args(rt))
            err = case.check()
            row["rel_err"] = None if err is None or err != err else float(f"{err:.3g}")
            if err is not None and not err < args.max_rel_err:
                row_notes["ours"] = f"rel_err {err:.3g} over {args.max_rel_err}"
            timed["policy " + policy] = fn
        except Exception as e:
            row_notes["ours"] = short_error(e)
        if row_notes:
            row["notes"] = row_notes
        rows.append(row)
    us_of = interleaved_us(timed, args.rounds)
    tuned_us = us_of.get("tuned")
    if "copy" in us_of:
        peer_us["copy"] = round(us_of["copy"], 2)
    for row in rows:
        us = us_of.get("policy " + row["policy"])
        row["peers"] = dict(peer_us)
        row["tuned_us"] = None if tuned_us is None else round(tuned_us, 2)
        row["ours_us"] = None if us is None else round(us, 2)
        if us and tuned_us:
            row["ratio_to_tuned"] = round(tuned_us / us, 3)
        us = row["ours_us"]
        if op == "attention":
            row["tflops"] = round(case.flops / (us * 1e-6) / 1e12, 1) if us else None
            flash = peer_us.get("sdpa_flash")
            row["vs_sdpa_flash"] = round(flash / us, 3) if us and flash else None
        else:
            gbps = round(case.nbytes / (us * 1e-6) / 1e9, 1) if us else None
            row["gbps"] = gbps
            row["pct_of_copy"] = round(100 * peer_us["copy"] / us, 1) if us else None
            # The names of the first results, kept so that old and new rows compare.
            row["GBps"] = gbps
            row["copy_fraction"] = round(peer_us["copy"] / us, 3) if us else None
            row["MB"] = round(case.nbytes / 1e6, 1)
        print(json.dumps(row), flush=True)
    del keep
    del case
    torch.cuda.empty_cache()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(own + suffix):
            os.remove(own + suffix)
    return rows, tune_s


# ---- results ---------------------------------------------------------------------------------

def summarize(op, rows):
    """Per policy: shapes measured, ratio_to_tuned >= 0.9, median and min; the op's floors."""
    out = {}
    policies = {r["policy"] for r in rows if r["op"] == op}
    for policy in sorted(policies, key=lambda p: (POLICIES + sorted(policies)).index(p)):
        rs = [r for r in rows if r["op"] == op and r["policy"] == policy]
        ratios = [r["ratio_to_tuned"] for r in rs if r.get("ratio_to_tuned") is not None]
        s = {"shapes": len(rs), "with_ratio": len(ratios),
             "ratio_ge_0.9": sum(1 for x in ratios if x >= 0.9),
             "median_ratio": round(statistics.median(ratios), 3) if ratios else None,
             "min_ratio": min(ratios) if ratios else None}
        if op == "causal_conv1d":
            big = [r for r in rs if r.get("MB", 0) >= 16 and r.get("pct_of_copy") is not None]
            s["ge_16MB"] = len(big)
            s["ge_16MB_at_90pct_of_copy"] = sum(1 for r in big if r["pct_of_copy"] >= 90)
        if op == "selective_scan":
            long_ = [r for r in rs if r["shape"]["L"] >= 512 and r.get("gbps") is not None]
            s["L_ge_512"] = len(long_)
            s["L_ge_512_at_1TBps"] = sum(1 for r in long_ if r["gbps"] >= 1000)
        out[policy] = s
    tunes = sorted({(shape_text(op, r["shape"]), r["tune_s"]) for r in rows
                    if r["op"] == op and r.get("tune_s") is not None})
    if tunes:
        vals = [t for _, t in tunes]
        out["tune_s"] = {"shapes": len(vals), "median": round(statistics.median(vals), 2),
                         "max": max(vals)}
    return out


def new_shape_rows(result, ops):
    """The new_shape_s rows of <gpu>-tuning.json for ops."""
    out = []
    for op in ops:
        t = result["summary"].get(op, {}).get("tune_s")
        if not t:
            continue
        out.append({"name": "new_shape_s", "op": op, "value": t["median"], "unit": "s",
                    "commit": result["runs"][op]["commit"],
                    "command": f"bench/unseen.py: autotune --arch auto --op {op} --shape S "
                               "--db COPY_OF_GRID_DB (defaults)",
                    "notes": f"median over {t['shapes']} unseen shapes with the benchmark grid "
                             f"in the database; max {t['max']} s"})
    return out


def fmt(v, digits=None):
    if v is None:
        return "-"
    return f"{v:.{digits}f}" if digits is not None else str(v)


def markdown(result):
    lines = [f"# Shapes nobody tuned ({result['gpu']})", "",
             "Each op's database holds only its benchmark grid (bench/shapes.toml). "
             "ratio to tuned = tuned_us / ours_us (1.0: as fast as the shape's own tuned "
             "winner); peers in us; % of copy = a device copy of the same traffic / ours. "
             "All measured in one process per op (do_bench median, L2 flushed); the tuned winner, "
             "each policy and the copy timed in interleaved rounds, the median of the rounds.", ""]
    for op in [o for o in OPS if o in result["runs"]]:
        run = result["runs"][op]
        lines += [f"## {op}", "", f"commit `{run['commit']}`, {run['date']}; command: "
                  f"`{run['command']}`", ""]
        if run.get("grid_s") is not None:
            lines.append(f"Grid database: `{run.get('grid_command', '')}` "
                         f"({'completed' if run.get('grid_db_existed') else 'made'} in "
                         f"{run['grid_s']} s).")
            lines.append("")
        if run.get("notes"):
            lines += [f"Notes: {run['notes']}", ""]
        summ = result["summary"].get(op, {})
        head = "| policy | shapes | ratio >= 0.9 | median ratio | min ratio |"
        sep = "|---|---|---|---|---|"
        if op == "causal_conv1d":
            head += " >= 16 MB at >= 90% of copy |"
            sep += "---|"
        if op == "selective_scan":
            head += " L >= 512 at >= 1 TB/s |"
            sep += "---|"
        lines += [head, sep]
        for policy, s in summ.items():
            if policy == "tune_s":
                continue
            line = (f"| {policy} | {s['shapes']} | {s['ratio_ge_0.9']}/{s['with_ratio']} | "
                    f"{fmt(s['median_ratio'])} | {fmt(s['min_ratio'])} |")
            if op == "causal_conv1d":
                line += f" {s['ge_16MB_at_90pct_of_copy']}/{s['ge_16MB']} |"
            if op == "selective_scan":
                line += f" {s['L_ge_512_at_1TBps']}/{s['L_ge_512']} |"
            lines.append(line)
        if summ.get("tune_s"):
            t = summ["tune_s"]
            lines += ["", f"Tuning one shape (`autotune --shape S`, defaults, over a copy of the "
                          f"grid's database): median {t['median']} s, max {t['max']} s over "
                          f"{t['shapes']} shapes."]
        lines.append("")
        rate = "TFLOP/s" if op == "attention" else "GB/s"
        extra = "" if op == "attention" else " % of copy |"
        lines += [f"| shape | policy | ours µs | tuned µs | ratio to tuned | {rate} |{extra} "
                  "peers µs | rel_err | tune s | variant |",
                  "|---|---|---|---|---|---|" + ("---|" if extra else "") + "---|---|---|---|"]
        for r in [r for r in result["rows"] if r["op"] == op]:
            peers = ", ".join(f"{k} {fmt(v)}" for k, v in r.get("peers", {}).items())
            metric = r.get("tflops") if op == "attention" else r.get("gbps", r.get("GBps"))
            pct = ""
            if op != "attention":
                p = r.get("pct_of_copy")
                if p is None and r.get("copy_fraction") is not None:
                    p = round(100 * r["copy_fraction"], 1)
                pct = f" {fmt(p)} |"
            variant = r.get("variant")
            lines.append(f"| {shape_text(op, r['shape'])} | {r['policy']} | {fmt(r['ours_us'])} | "
                         f"{fmt(r['tuned_us'])} | {fmt(r['ratio_to_tuned'])} | {fmt(metric)} |"
                         f"{pct} {peers} | {fmt(r.get('rel_err'))} | {fmt(r.get('tune_s'))} | "
                         f"{'`' + variant + '`' if variant else '-'} |")
        notes = [(r, r["notes"]) for r in result["rows"] if r["op"] == op and r.get("notes")]
        if notes:
            lines += ["", "Row notes:", ""]
            for r, n in notes:
                for k, v in n.items():
                    lines.append(f"- {shape_text(op, r['shape'])} {r['policy']} {k}: {v}")
        lines.append("")
    return "\n".join(lines)


def write_results(args, gpu, slug, runs, rows, ops_run):
    """<out>/<slug>-unseen.{json,md}: this run's ops' rows beside the other ops' rows of
    --merge."""
    merge = args.merge if args.merge is not None else os.path.join(HERE, "results",
                                                                    f"{slug}-unseen.json")
    old = {"rows": [], "runs": {}}
    if merge and os.path.exists(merge):
        with open(merge) as f:
            old = json.load(f)
    old_runs = dict(old.get("runs") or {})
    for r in old.get("rows", []):  # the first results had one header for their one op
        if r["op"] not in old_runs and "commit" in old:
            old_runs[r["op"]] = {k: old.get(k) for k in ("commit", "command", "date")}
    kept = [r for r in old.get("rows", []) if r["op"] not in ops_run]
    all_runs = {op: run for op, run in old_runs.items() if op not in ops_run}
    all_runs.update(runs)
    all_rows = sorted(kept + rows, key=lambda r: OPS.index(r["op"]))  # stable within an op
    result = {"gpu": gpu, "date": datetime.date.today().isoformat(), "commit": args.commit,
              "command": " ".join(sys.argv),
              "metric": "us (lower is better); ratio_to_tuned = tuned_us / ours_us; peers in us; "
                        "gbps: effective GB/s; pct_of_copy = 100 * copy_us / ours_us with a copy "
                        "of the same read + write traffic",
              "timing": "triton.testing.do_bench median (warmup 25 ms, rep 100 ms), L2 flushed; "
                        "the tuned winner, each policy and the copy in runs[op].rounds interleaved "
                        "rounds, the median of each one's rounds (an op's run without `rounds` "
                        "timed each once, one after another)",
              "runs": all_runs,
              "summary": {op: summarize(op, all_rows) for op in OPS if op in all_runs},
              "rows": all_rows}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{slug}-unseen.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, f"{slug}-unseen.md"), "w") as f:
        f.write(markdown(result))
    return result


# ---- a new shape into an empty database (--cold) ------------------------------------------------

# Seconds per shape on the H100, for --dry-run and --max-seconds: the cold run (the cold
# budget, 10 x 2 s, plus compiling), and the exhaustive check over its database.
COLD_S = {"causal_conv1d": 10, "selective_scan": 35, "attention": 30}
COLD_EXHAUSTIVE_S = {"causal_conv1d": 10, "selective_scan": 540, "attention": 120}
COLD_WITHIN = 1.03


def cli_json(cmd, timeout):
    """(report or None, seconds, returncode or 'timeout', stderr tail) of an autotune
    command with --json, run in a session of its own (killed whole on timeout)."""
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, time.monotonic() - t0, "timeout", ""
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        return None, seconds, proc.returncode, (err or "")[-500:]
    return json.loads(out), seconds, 0, ""


def fresh_db(path):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


def cold_shape(args, op, s, deadline):
    """One new shape tuned into an empty database (and, with --cold-exhaustive, checked
    against an exhaustive run over it): its row."""
    text = shape_text(op, s)
    db = fresh_db(os.path.join(args.tmp, f"autotune-cold-{op}-{os.getpid()}.db"))
    row = {"op": op, "shape": row_shape(op, s), "cold_s": None, "winner": None,
           "winner_us": None}
    base = [args.cli, "--arch", "auto", "--op", op, "--shape", text, "--db", db]
    report, seconds, rc, err = cli_json(base + ["--json"] + args.tune_args.split(),
                                        deadline.left())
    if report is None:
        row["notes"] = (f"stopped by --max-seconds after {seconds:.0f} s" if rc == "timeout"
                        else f"autotune exited with {rc}: {err.strip()}")
        fresh_db(db)
        return row, None
    p = report["problems"][0]
    row.update(cold_s=round(seconds, 2), winner=p["winner"], winner_us=p["winner_us"],
               problem=p["problem"], compiled=p.get("compiled"), measured=len(p["variants"]),
               budget_exhausted=p.get("budget_exhausted"))
    for key in ("search_s", "budget_s", "phases_s", "worker_s"):
        if key in p:
            row[key] = p[key]
    if args.cold_exhaustive:
        if deadline.left() < COLD_EXHAUSTIVE_S[op]:
            row["notes"] = (f"no exhaustive check: {deadline.left():.0f} s left of "
                            f"--max-seconds (estimate {COLD_EXHAUSTIVE_S[op]} s)")
        else:
            ex, ex_s, rc, err = cli_json(base + ["--strategy", "exhaustive", "--force", "--json"],
                                         deadline.left())
            row["exhaustive_s"] = round(ex_s, 1)
            if ex is None:
                row["notes"] = ("exhaustive run stopped by --max-seconds" if rc == "timeout"
                                else f"exhaustive run exited with {rc}: {err.strip()}")
            else:
                e = ex["problems"][0]
                row.update(exhaustive_winner=e["winner"], exhaustive_us=e["winner_us"],
                           exhaustive_measured=len(e["variants"]))
                mine = [v for v in e["variants"] if v["variant"] == p["winner"]]
                ok = [v for v in mine if v["outcome"] == "OK" and v["eliminated_in_round"] == 0]
                if ok and e["winner_us"]:
                    row["cold_us_in_exhaustive"] = ok[0]["median_us"]
                    row["ratio"] = round(ok[0]["median_us"] / e["winner_us"], 4)
                    row["within_3pct"] = row["ratio"] <= COLD_WITHIN
                else:
                    row["notes"] = ("the cold winner in the exhaustive run: "
                                    + (mine[0]["outcome"] if mine else "not measured"))
    fresh_db(db)
    return row, report.get("device")


def cold_rows_for_tuning(result):
    """The new_shape_cold_s rows of <gpu>-tuning.json: per op, the median cold time."""
    out = []
    for op in OPS:
        rs = [r for r in result["rows"] if r["op"] == op and r.get("cold_s") is not None]
        if not rs:
            continue
        checked = [r for r in rs if r.get("within_3pct") is not None]
        notes = (f"{len(rs)} new shape(s) tuned into an empty database (defaults, cold budget); "
                 + ", ".join(f"{shape_text(op, r['shape'])} {r['cold_s']} s" for r in rs))
        if checked:
            notes += (f"; winner within 3% of exhaustive on {sum(r['within_3pct'] for r in checked)}"
                      f" of {len(checked)}")
        out.append({"name": "new_shape_cold_s", "op": op,
                    "value": round(statistics.median(r["cold_s"] for r in rs), 2), "unit": "s",
                    "commit": result["runs"][op]["commit"],
                    "command": f"bench/unseen.py --cold: autotune --arch auto --op {op} --shape S "
                               "--db EMPTY (defaults)",
                    "notes": notes})
    return out


def cold_markdown(result):
    lines = [f"# A new shape tuned into an empty database ({result['gpu']})", "",
             "`autotune --arch auto --op OP --shape S --db EMPTY` (defaults: halving, the cold "
             "budget), timed; ratio = the cold winner's median / the exhaustive winner's, both "
             "from an exhaustive run over the same database (--cold-exhaustive).", "",
             "| op | shape | cold s | winner | winner us | compiled | measured | search s / "
             "budget s | exhaustive us | ratio | within 3% | commit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        within = r.get("within_3pct")
        lines.append(
            f"| {r['op']} | {shape_text(r['op'], r['shape'])} | {fmt(r['cold_s'])} | "
            f"`{r.get('winner') or '-'}` | {fmt(r.get('winner_us'))} | {fmt(r.get('compiled'))} | "
            f"{fmt(r.get('measured'))} | {fmt(r.get('search_s'))} / {fmt(r.get('budget_s'))} | "
            f"{fmt(r.get('exhaustive_us'))} | {fmt(r.get('ratio'))} | "
            f"{'-' if within is None else ('yes' if within else 'no')} | "
            f"{result['runs'][r['op']]['commit']} |")
    notes = [r for r in result["rows"] if r.get("notes")]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {r['op']} {shape_text(r['op'], r['shape'])}: "
                                       f"{r['notes']}" for r in notes]
    return "\n".join(lines) + "\n"


def run_cold(args, ops, shapes):
    """--cold: per op, the first shape of the draw (or --only's) into an empty database."""
    sys.path.insert(0, HERE)
    from headline import gpu_slug  # the one without triton
    deadline = Deadline(args.max_seconds)
    runs, rows, gpu = {}, [], None
    for op in ops:
        runs[op] = {"commit": args.commit, "date": datetime.date.today().isoformat(),
                    "command": " ".join(["python3", "bench/unseen.py"] + sys.argv[1:])}
        picked = shapes[op] if args.only else shapes[op][:1]
        for s in picked:
            if deadline.left() < COLD_S[op]:
                runs[op]["notes"] = (f"stopped by --max-seconds {args.max_seconds:.0f} before "
                                     f"{shape_text(op, s)}")
                break
            row, device = cold_shape(args, op, s, deadline)
            gpu = gpu or device
            rows.append(row)
            print(json.dumps(row), flush=True)
    gpu = gpu or "unknown GPU"
    slug = gpu_slug(gpu)
    path = os.path.join(args.out, f"{slug}-new-shape-cold.json")
    old = {"rows": [], "runs": {}}
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
    all_runs = {op: r for op, r in old.get("runs", {}).items() if op not in ops}
    all_runs.update(runs)
    kept = [r for r in old.get("rows", []) if r["op"] not in ops]
    result = {"gpu": gpu, "date": datetime.date.today().isoformat(), "commit": args.commit,
              "command": " ".join(["python3", "bench/unseen.py"] + sys.argv[1:]),
              "within": f"ratio = cold winner's median / exhaustive winner's median <= "
                        f"{COLD_WITHIN} (both from the exhaustive run)",
              "runs": all_runs,
              "rows": sorted(kept + rows, key=lambda r: OPS.index(r["op"]))}
    result["tuning"] = cold_rows_for_tuning(result)
    os.makedirs(args.out, exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    text = cold_markdown(result)
    with open(os.path.join(args.out, f"{slug}-new-shape-cold.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"wrote {path} and .md")
    print("rows for bench/results/<gpu>-tuning.json:")
    for t in result["tuning"]:
        print(json.dumps(t))


# ---- main --------------------------------------------------------------------------------------

def dry_run_cold(args, ops, shapes):
    total = 0.0
    for op in ops:
        picked = shapes[op] if args.only else shapes[op][:1]
        est = (COLD_S[op] + (COLD_EXHAUSTIVE_S[op] if args.cold_exhaustive else 0)) * len(picked)
        total += est
        print(f"== {op}: estimate {est:.0f} s on the H100")
        for s in picked:
            print(f"$ {args.cli} --arch auto --op {op} --shape {shape_text(op, s)} --db EMPTY "
                  "--json")
            if args.cold_exhaustive:
                print(f"$ ... the same --db --strategy exhaustive --force --json")
    print(f"estimated {total:.0f} s in all; --max-seconds {args.max_seconds:.0f} per call")


def dry_run(args, ops, shapes):
    cli = args.cli if os.path.exists(args.cli) else os.path.join(REPO, "build", "autotune")
    have_cli = os.path.exists(cli)
    total = 0.0
    for op in ops:
        grid = grid_texts(op)
        db = args.db or grid_db_path(op)
        est = (0 if args.db else GRID_S[op]) + PRIOR_SHAPE_S[op] * len(shapes[op])
        total += est
        print(f"== {op}: {len(shapes[op])} shapes (seed {args.seed}), database {db}; "
              f"estimate {est:.0f} s on the H100")
        if not args.db:
            print(f"$ {args.cli} --arch auto --op {op} --db {db} --quiet {GRID_ARGS}"
                  "   # unless already complete")
        for s in shapes[op]:
            text = shape_text(op, s)
            assert text not in grid, f"{text} is in the benchmark grid"
            line = f"  {text}"
            if have_cli:
                p = subprocess.run([cli, "list", "--op", op, "--arch", "sm_90a", "--shape", text],
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    raise SystemExit(f"{cli} list refused {text}: {p.stderr.strip()}")
                line += f"   ({len(p.stdout.splitlines())} valid variants on sm_90a)"
            print(line)
        print(f"  per shape: $ {args.cli} --arch auto --op {op} --shape S --db COPY_OF_GRID_DB "
              f"--quiet {args.tune_args}".rstrip())
        print(f"  then policies {', '.join(args.policies)} and the tuned winner timed; peers: "
              + {"causal_conv1d": "torch_conv1d, copy", "selective_scan": "copy",
                 "attention": "sdpa_flash, sdpa_cudnn"}[op])
    print(f"estimated {total:.0f} s in all; --max-seconds {args.max_seconds:.0f} per call")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=".device/libautotune.so")
    ap.add_argument("--cli", default=".device/autotune")
    ap.add_argument("--ops", default=None,
                    help="comma-separated ops (default: all three; one per device call fits)")
    ap.add_argument("--op", choices=OPS, help="one op (the same as --ops OP)")
    ap.add_argument("--db", default=None,
                    help="the benchmark grid's database (default: made or completed at "
                         "/tmp/autotune-headline-OP.db); with several ops, give none")
    ap.add_argument("--out", default=None, help="output folder (default: $OUT, else bench/results)")
    ap.add_argument("--merge", default=None,
                    help="the results file whose other ops' rows to keep (default "
                         "bench/results/<gpu>-unseen.json; '' for none)")
    ap.add_argument("--count", type=int, default=12)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--only", default="", help="comma-separated shape indices (debugging)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--tune-args", default="", help="extra autotune options for the tuned reference")
    ap.add_argument("--max-seconds", type=float, default=540,
                    help="stop before a shape that would not end within this many seconds of "
                         "the start (a device call allows 600)")
    ap.add_argument("--max-rel-err", type=float, default=2e-2,
                    help="a rel_err above this is noted in the row")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds timing the tuned winner, each policy and the copy "
                         "(each one's time: the median of its rounds)")
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--commit", default=None, help="default: .device/COMMIT")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the shapes and commands; no GPU, torch or library needed")
    ap.add_argument("--cold", action="store_true",
                    help="new_shape_cold_s: tune the first drawn shape of each op (or --only's) "
                         "into an empty database with the CLI alone (H100: about 10 / 35 / 30 s "
                         "per shape for causal_conv1d / selective_scan / attention)")
    ap.add_argument("--cold-exhaustive", action="store_true",
                    help="with --cold: also an exhaustive run over the same database, and "
                         "whether the cold winner is within 3%% of it (about 10 s more for "
                         "causal_conv1d, 2 min for attention, 9 min for selective_scan)")
    args = ap.parse_args()
    ops = [args.op] if args.op else (args.ops.split(",") if args.ops else list(OPS))
    for op in ops:
        if op not in OPS:
            ap.error(f"unknown op {op!r} (expected {', '.join(OPS)})")
    if args.db and len(ops) > 1:
        ap.error("--db is one op's grid database: give one op with it")
    args.policies = [p for p in args.policies.split(",") if p]
    if args.out is None:
        args.out = os.environ.get("OUT") or os.path.join(HERE, "results")
    if args.commit is None:
        path = os.path.join(os.path.dirname(os.path.abspath(args.cli)), "COMMIT")
        args.commit = open(path).read().strip() if os.path.exists(path) else "unknown"
    shapes = {op: draw(op, args.seed, args.count, grid_texts(op)) for op in ops}
    if args.only:
        idx = [int(i) for i in args.only.split(",")]
        shapes = {op: [v[i] for i in idx if i < len(v)] for op, v in shapes.items()}
    if args.cold_exhaustive and not args.cold:
        ap.error("--cold-exhaustive goes with --cold")
    if args.dry_run:
        (dry_run_cold if args.cold else dry_run)(args, ops, shapes)
        return
    if args.cold:
        run_cold(args, ops, shapes)
        return

    import torch
    sys.path.insert(0, HERE)
    from bench_common import gpu_slug  # noqa: F401  (puts runtime/python on sys.path)
    import autotune_runtime
    deadline = Deadline(args.max_seconds)
    gpu = torch.cuda.get_device_name()
    slug = gpu_slug(gpu)
    torch.manual_seed(0)
    runs, rows, result = {}, [], None
    for op in ops:
        run = {"commit": args.commit, "date": datetime.date.today().isoformat(),
               "command": " ".join(["python3", "bench/unseen.py"] + sys.argv[1:]),
               "seed": args.seed, "count": args.count, "policies": args.policies,
               "rounds": args.rounds}
        runs[op] = run
        notes = []
        try:
            grid_db = make_grid(args, op, deadline, run)
        except subprocess.TimeoutExpired:
            run["notes"] = f"the grid's database was not done within --max-seconds " \
                           f"{args.max_seconds:.0f}: nothing measured"
            result = write_results(args, gpu, slug, runs, rows, ops)
            continue
        runtimes = {p: autotune_runtime.Runtime(args.lib, grid_db, policy=p)
                    for p in args.policies}
        took = []
        for i, s in enumerate(shapes[op]):
            estimate = max(took) if took else PRIOR_SHAPE_S[op]
            if deadline.left() < estimate:
                notes.append(f"stopped by --max-seconds {args.max_seconds:.0f} at "
                             f"{deadline.elapsed():.0f} s: shapes {i + 1}-{len(shapes[op])} of "
                             f"{len(shapes[op])} not measured "
                             f"({', '.join(shape_text(op, x) for x in shapes[op][i:])})")
                break
            t0 = time.monotonic()
            shape_rows, _ = measure_shape(args, op, s, grid_db, runtimes, deadline)
            took.append(time.monotonic() - t0)
            rows += shape_rows
            run["shapes_measured"] = i + 1
            if notes:
                run["notes"] = "; ".join(notes)
            result = write_results(args, gpu, slug, runs, rows, ops)
        if notes:
            run["notes"] = "; ".join(notes)
        run.setdefault("shapes_measured", 0)
        del runtimes
        result = write_results(args, gpu, slug, runs, rows, ops)
    print(markdown(result))
    print(f"wrote {os.path.join(args.out, slug + '-unseen.json')} and .md")
    print("rows for bench/results/<gpu>-tuning.json:")
    for t in new_shape_rows(result, ops):
        print(json.dumps(t))


if __name__ == "__main__":
    main()
