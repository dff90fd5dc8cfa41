#!/usr/bin/env python3
"""attention's flash-attn 2 features side by side with their peers, on the GPU machine.

Five sections (bench/shapes.toml [attention_features], bf16, flash-attn's layout
[.., S, H, D]); --only picks some, by letter or name:
  a  head_dim  the [attention] grid (S = 512 .. 16384, B = 16384 // S, causal 0/1) at
               D = 96 and 256, Hq = Hkv = 2048 // D (21 at D = 96, 8 at D = 256: Hq*D as
               near 2048 as a whole head count gets, the rule bench_attention.py uses),
               beside sdpa_flash and sdpa_cudnn.                          TFLOP/s
  b  window    a sliding window at S = 16384, B = 1, Hq = Hkv = 16, D = 128: causal with
               window_size (4096, 0) and non-causal (4096, 4096), beside flex (the same
               mask as a block mask) and sdpa_efficient (the same mask as a dense additive
               [S, S] mask). The bounds are call values, not in the tuning key (the tuner
               runs window=1 problems with (S/4, S/8): left 4096 here too).  TFLOP/s
  c  varlen    16384 tokens in sequences of seeded random lengths 64 .. 4096 packed with
               cu_seqlens (varlen=1), Hq = Hkv = 16, D = 128, causal 0/1, beside
               sdpa_flash and sdpa_cudnn on the batch zero-padded to [B, max_len],
               sdpa_flash_loop (one SDPA call per sequence, no padding) and flex (a
               document mask over the packed tokens).                     TFLOP/s
  d  decode    one decode step (Sq = 1) against a paged KV cache: B in {8, 32, 64}, Hq = 32,
               Hkv = 8, D = 128, context in {1024, 4096, 16384, 32768} tokens per sequence
               (every sequence full), page 256, the pages shuffled; beside sdpa_flash,
               sdpa_cudnn and sdpa_efficient on K/V gathered from the pages into contiguous
               [B, Hkv, context, D] tensors beforehand (GQA as the G = Hq/Hkv query heads of
               a KV head stacked as G query rows, exact for Sq = 1), sdpa_flash_gather (the
               gather, index_select into preallocated buffers, plus sdpa_flash: what a torch
               caller without a paged kernel pays every step), and copy (a device-to-device
               copy moving as many bytes: K cache into the gather buffer, read + written).
               Skipped with a note when cache + gathered copy exceed max_gb (20 GB; none
               does: the largest, B=64 at 32768, is 17.2 GB).              GB/s
  e  score_mod softcap (Gemma 2's 50; D = 128 and 256) and ALiBi (BLOOM's slopes) on causal
               problems of 16384 tokens, beside flex with the same score_mod and
               sdpa_efficient with ALiBi as a dense additive mask (no SDPA backend has
               softcap).                                                   TFLOP/s
  ours is the tuned winner, launched through the C ABI (libautotune.so, ctypes): the args
  struct (with the split-KV workspace the variant needs, attention_workspace) is packed
  once per shape and each timed call is autotune_attention(handle, args, stream), as in
  bench_attention.py. Everything is timed with triton.testing.do_bench (CUDA events, L2
  flushed before every sample, median); the flush (a ~256 MB memset) keeps the GPU queue
  ahead of the host, so a call's host cost (a few us of ctypes) is not in its time, and
  decode's K/V come from HBM.

Metrics (the JSON's "sections" key says the same): the file keeps the attention format
(header "metric": "TFLOPs"), every row says its "section" and its own "metric": TFLOPs for
a, b, c; GBps for d (K/V bytes read: 2 * B * context * Hkv * D * 2, also as "kv_bytes",
with "pct_of_copy_ceiling" against 2.97 TB/s and "pct_of_copy" against the copy measured
in the same row). FLOPs: a) 4*B*Hq*Sq*Sk*D, halved when causal (bench_attention.tflops,
so a's rows compare with <gpu>-attention.json); b) 4*B*Hq*D * the (query, key) pairs the
window keeps, counted exactly (row i keeps keys max(0, i-left) .. min(S-1, i+right), right
0 when causal); c) 4*Hq*D * sum over sequences of L_i^2, halved when causal (real tokens
only: the padded peers' extra work counts for nothing). Shape fields: flash-attn's window
[left, right] ([-1, -1]: none), softcap (0: none), alibi, varlen, paged (and Tq/Tk/seqlens,
page/context). rel_err: ours against a float32 reference (SDPA's memory-efficient backend,
or a chunked masked softmax in float32 for the masks it lacks; per sequence for varlen,
per batch row for decode). A value that could not be measured is null with a note.

Tuning: before measuring, the script tunes its shapes itself with one CLI call
  AUTOTUNE --arch auto --op attention --shape S1 --shape S2 ... --db DB --quiet
  [--budget-s S] [--tune-args="--strategy halving ..."]  (the = form: the value starts with --)
(stdout to OUT/tune-attention-features.txt). --tune-only stops after it (no torch needed),
--bench-only (= --no-tune) measures from the database only. A full run does not fit one
10-minute device call; on one warm machine (the database in /tmp survives between calls),
with bench/run_on_device.sh (which sets LD_LIBRARY_PATH and the database path):
  STEP=tune   SECTIONS=a       bash bench/run_on_device.sh attention_features  # ~3-4 min
  STEP=resume SECTIONS=b,c,d   bash bench/run_on_device.sh attention_features  # ~3-4 min
  STEP=bench                   bash bench/run_on_device.sh attention_features  # ~5-6 min
(estimates, not measured: about 2-3 s per shape at the default --budget-s 2 plus each new
compile group's compiles, 20 s for the first shape of a fresh database; flex compiles
~30-60 s per mask; run_on_device.sh's STEP=tune empties the database, STEP=resume keeps it).
A bench call cut short keeps its rows (rewritten after each).
Benching sections in separate calls: --merge FILE (a previous run's JSON) keeps FILE's rows
of the sections not run now, e.g. BENCH_ARGS="--merge bench/results/h100-attention-features.json".

--dry-run prints the shapes, the --shape strings, FLOPs / bytes and memory, and the tuning
command, without torch, triton or a GPU; with a CLI at --autotune it also checks each
--shape string with `autotune list --op attention --arch sm_90a --shape S` (no GPU).

Usage: bench_attention_features.py --lib .device/libautotune.so --db tuning.db --out DIR
       [--autotune .device/autotune] [--only a,b,c,d] [--tune-only | --bench-only]
       [--budget-s S] [--tune-args "..."] [--merge FILE] [--rep MS] [--dry-run]
       --commit SHA --command "the command line that ran this"
Writes OUT/<gpu>-attention-features.{json,md}.
"""
import datetime
import importlib.util
import json
import os
import random
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SECTIONS = {"a": "head_dim", "b": "window", "c": "varlen", "d": "decode", "e": "score_mod"}
PEERS = {
    "head_dim": ("sdpa_flash", "sdpa_cudnn"),
    "window": ("flex", "sdpa_efficient"),
    "varlen": ("sdpa_flash", "sdpa_cudnn", "sdpa_flash_loop", "flex"),
    "decode": ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_flash_gather", "copy"),
    "score_mod": ("flex", "sdpa_efficient"),
}
COPY_TBPS = 2.97  # the H100's device-to-device copy ceiling (RESULTS.md)
CEILINGS = {"copy_TBps": COPY_TBPS, "bf16_mm_TFLOPs": 691}
SECTION_INFO = {
    "head_dim": {"metric": "TFLOPs", "flops": "4*B*Hq*Sq*Sk*D, halved when causal",
                 "peers": list(PEERS["head_dim"])},
    "window": {"metric": "TFLOPs", "flops": "4*B*Hq*D*pairs, pairs = sum over query rows i "
               "of the keys j with max(0, i-left) <= j <= min(S-1, i+right) (right 0 when "
               "causal)", "peers": list(PEERS["window"])},
    "varlen": {"metric": "TFLOPs", "flops": "4*Hq*D*sum_i(L_i^2), halved when causal (real "
               "tokens only)", "peers": list(PEERS["varlen"])},
    "decode": {"metric": "GBps", "bytes": "K/V read: 2*B*context*Hkv*D*2",
               "peers": list(PEERS["decode"])},
    "score_mod": {"metric": "TFLOPs", "flops": "4*B*Hq*Sq*Sk*D, halved when causal",
                  "peers": list(PEERS["score_mod"])},
}


def bench_common():
    """bench_common (arg_parser, load_spec, write_results). It imports triton.testing, which
    --help and --dry-run do without (a machine with neither torch nor triton): a stand-in
    module takes its place there, and measuring refuses to start on it (gpu_modules)."""
    if importlib.util.find_spec("triton") is None:
        import types
        stub = types.ModuleType("triton")
        stub.testing = types.ModuleType("triton.testing")
        stub.stand_in = True
        sys.modules["triton"], sys.modules["triton.testing"] = stub, stub.testing
    import bench_common as common
    return common


common = bench_common()


# ---- the shapes (no torch) -------------------------------------------------------------------

def pairs(sq, sk, causal, left=-1, right=-1):
    """(query, key) pairs a bottom-right aligned causal mask and window keep (-1: unbounded)."""
    n = 0
    for i in range(sq):
        c = i + sk - sq  # the query's diagonal
        lo = 0 if left < 0 else max(0, c - left)
        hi = c if causal else (sk - 1 if right < 0 else c + right)
        n += max(0, min(sk - 1, hi) - lo + 1)
    return n


def shape_fields(B, Hq, Hkv, Sq, Sk, D, causal, dtype, **more):
    """A row's shape: attention's fields, then the features' (flash-attn's conventions)."""
    s = dict(B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Sk=Sk, D=D, causal=bool(causal), dtype=dtype,
             layout="bshd", window=[-1, -1], softcap=0.0, alibi=False, varlen=False,
             paged=False)
    s.update(more)
    return s


def cli_shape(s):
    """The autotune --shape text of a row's shape (the runtime's problem key)."""
    t = (f"B={s['B']},Hq={s['Hq']},Hkv={s['Hkv']},Sq={s['Sq']},Sk={s['Sk']},D={s['D']},"
         f"causal={int(s['causal'])},dtype={s['dtype']},layout={s['layout']}")
    if list(s["window"]) != [-1, -1]:
        t += ",window=1"
    if s["varlen"]:
        t += f",varlen=1,Tq={s['Tq']},Tk={s['Tk']}"
    if s["paged"]:
        t += f",paged=1,page={s['page']}"
    if s["softcap"]:
        t += ",softcap=1"
    if s["alibi"]:
        t += ",alibi=1"
    return t


def varlen_lengths(v):
    """Sequence lengths drawn with v's seed from min_len..max_len until they sum to v's
    tokens (the last one takes the rest, itself in min_len..max_len)."""
    rng = random.Random(v["seed"])
    lengths, rest = [], v["tokens"]
    while rest > v["max_len"]:
        n = rng.randint(v["min_len"], min(v["max_len"], rest - v["min_len"]))
        lengths.append(n)
        rest -= n
    lengths.append(rest)
    return lengths


def cases_of(path, sections, head_dims=None):
    """The benchmark cases of the selected sections: {section, shape, cli, flops | kv_bytes,
    mem_bytes (the GPU memory the row's tensors need, about), skip (a reason or None)};
    head_dims: section a's head dims (None: all of the spec's)."""
    spec = common.load_spec(path, "attention_features")
    grid = common.load_spec(path, "attention")["grid"]
    dtype = spec["dtype"]
    out = []
    if "head_dim" in sections:
        for d in spec["head_dim"]:
            if head_dims and d not in head_dims:
                continue
            h = 2048 // d
            for causal in grid["causal"]:
                for S in grid["seqlen"]:
                    B = 16384 // S
                    s = shape_fields(B, h, h, S, S, d, causal, dtype)
                    out.append(dict(section="head_dim", shape=s,
                                    flops=4 * B * h * S * S * d // (2 if causal else 1),
                                    mem_bytes=4 * B * S * h * d * 2 + 3 * B * S * h * d * 4))
    if "window" in sections:
        for w in spec["window"]:
            h = w.get("Hq", w.get("H"))
            left, right = w["left"], 0 if w["causal"] else w["right"]
            s = shape_fields(w["B"], h, w.get("Hkv", h), w["S"], w["S"], w["D"], w["causal"],
                             dtype, window=[left, right])
            p = pairs(w["S"], w["S"], w["causal"], left, right)
            out.append(dict(section="window", shape=s, pairs=p,
                            flops=4 * w["B"] * h * w["D"] * p,
                            mem_bytes=4 * w["B"] * w["S"] * h * w["D"] * 2 + 2 * w["S"] ** 2
                            + (1 << 31)))
    if "varlen" in sections:
        v = spec["varlen"]
        lengths = varlen_lengths(v)
        T, L = sum(lengths), max(lengths)
        for causal in v["causal"]:
            s = shape_fields(len(lengths), v["H"], v.get("Hkv", v["H"]), L, L, v["D"], causal,
                             dtype, varlen=True, Tq=T, Tk=T, seqlens=lengths)
            sq = sum(n * n for n in lengths)
            out.append(dict(section="varlen", shape=s,
                            flops=4 * v["H"] * v["D"] * sq // (2 if causal else 1),
                            mem_bytes=(4 * T + 3 * len(lengths) * L) * v["H"] * v["D"] * 2))
    if "decode" in sections:
        dc = spec["decode"]
        for B in dc["B"]:
            for ctx in dc["context"]:
                s = shape_fields(B, dc["Hq"], dc["Hkv"], 1, ctx, dc["D"], False, dtype,
                                 paged=True, page=dc["page"], context=ctx)
                kv = 2 * B * ctx * dc["Hkv"] * dc["D"] * 2
                mem = 2 * kv  # the paged cache and its gathered copy
                skip = None
                if mem > dc["max_gb"] * 1e9:
                    skip = (f"skipped: the cache and its gathered copy need {mem / 1e9:.2f} GB "
                            f"(> max_gb = {dc['max_gb']})")
                out.append(dict(section="decode", shape=s, kv_bytes=kv, mem_bytes=mem,
                                skip=skip, seed=dc["seed"]))
    if "score_mod" in sections:
        for m in spec["score_mod"]:
            h = m["H"]
            for S in m["S"]:
                B = m["tokens"] // S
                s = shape_fields(B, h, h, S, S, m["D"], m["causal"], dtype,
                                 softcap=float(m.get("softcap", 0.0)),
                                 alibi=bool(m.get("alibi", False)))
                out.append(dict(section="score_mod", shape=s,
                                flops=4 * B * h * S * S * m["D"] // (2 if m["causal"] else 1),
                                mem_bytes=4 * B * S * h * m["D"] * 2 + 3 * B * S * h * m["D"] * 4
                                + (h * S * S * 2 if m.get("alibi") else 0)))
    for c in out:
        c["cli"] = cli_shape(c["shape"])
        c.setdefault("skip", None)
    return out


def tune_command(args, cases):
    cmd = [args.autotune, "--arch", "auto", "--op", "attention"]
    for c in cases:
        if not c["skip"]:
            cmd += ["--shape", c["cli"]]
    cmd += ["--db", args.db or "$AUTOTUNE_DB", "--quiet"]
    if args.budget_s is not None:
        cmd += ["--budget-s", str(args.budget_s)]
    return cmd + shlex.split(args.tune_args)


def describe(c):
    s = c["shape"]
    if c["section"] == "decode":
        what = f"K/V read {c['kv_bytes'] / 1e6:.1f} MB"
    else:
        what = f"{c['flops'] / 1e9:.1f} GFLOP"
        if "pairs" in c:
            what += f" ({c['pairs']} pairs)"
    extra = ""
    if s["varlen"]:
        extra = f" seqlens={s['seqlens']}"
    return f"{c['cli']}: {what}, ~{c['mem_bytes'] / 1e9:.2f} GB{extra}"


def dry_run(args, cases):
    for sec in SECTIONS.values():
        sel = [c for c in cases if c["section"] == sec]
        if not sel:
            continue
        print(f"[{sec}] {len(sel)} shapes, {SECTION_INFO[sec]['metric']}, peers "
              f"{', '.join(PEERS[sec])}")
        for c in sel:
            print(f"  {describe(c)}" + (f"  ({c['skip']})" if c["skip"] else ""))
    print("tune:", shlex.join(tune_command(args, cases)))
    if not os.access(args.autotune, os.X_OK):
        print(f"({args.autotune} not found: the --shape strings were not checked)")
        return 0
    bad = 0
    for c in cases:
        r = subprocess.run([args.autotune, "list", "--op", "attention", "--arch", "sm_90a",
                            "--shape", c["cli"]], capture_output=True, text=True)
        n = len(r.stdout.splitlines()) if r.returncode == 0 else 0
        if r.returncode != 0 or n == 0:
            bad += 1
            print(f"REFUSED {c['cli']}: rc {r.returncode} {r.stderr.strip()[:300]}")
    print(f"{len(cases) - bad} of {len(cases)} --shape strings accepted by "
          f"{args.autotune} list (sm_90a)")
    return 1 if bad else 0


def tune(args, cases):
    cmd = tune_command(args, cases)
    os.makedirs(args.out, exist_ok=True)
    log = os.path.join(args.out, "tune-attention-features.txt")
    n = sum(1 for c in cases if not c["skip"])
    print(f"tuning {n} shapes: {shlex.join(cmd)}", flush=True)
    start = time.time()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f).returncode
        except OSError as e:  # no CLI there
            print(f"cannot run {args.autotune}: {e}", flush=True)
            return 127
    print(f"tuned {n} shapes in {time.time() - start:.0f} s (exit {rc}; table in {log})",
          flush=True)
    return rc


# ---- measuring (GPU machine: torch, triton, libautotune.so) ---------------------------------

torch = F = SDPBackend = sdpa_kernel = do_bench = grid_tflops = None
NO_VARLEN = NO_WINDOW = attention_features = attention_fields = None
kvcache_fields = tensor_fields = varlen_fields = Runtime = None


def gpu_modules():
    """torch, triton and the bindings, imported for measuring only. bench_attention.tflops
    (the grid's TFLOP/s) is imported from bench_attention.py, so that section a's rows use
    the formula of <gpu>-attention.json."""
    global torch, F, SDPBackend, sdpa_kernel, do_bench, grid_tflops
    global NO_VARLEN, NO_WINDOW, attention_features, attention_fields, kvcache_fields
    global tensor_fields, varlen_fields, Runtime
    import triton
    if getattr(triton, "stand_in", False):
        sys.exit("measuring needs torch and triton (only --help, --dry-run and --tune-only "
                 "run without them)")
    import torch as _torch
    import torch.nn.functional as _F
    import triton.testing
    from torch.nn.attention import SDPBackend as _SDPBackend
    from torch.nn.attention import sdpa_kernel as _sdpa_kernel

    import autotune_runtime  # noqa: F401 (puts python/ on sys.path)
    from autotune import _runtime
    from bench_attention import tflops
    torch, F, SDPBackend, sdpa_kernel = _torch, _F, _SDPBackend, _sdpa_kernel
    do_bench, grid_tflops = triton.testing.do_bench, tflops
    NO_VARLEN, NO_WINDOW = _runtime.NO_VARLEN, _runtime.NO_WINDOW
    attention_features, attention_fields = _runtime.attention_features, _runtime.attention_fields
    kvcache_fields, tensor_fields = _runtime.kvcache_fields, _runtime.tensor_fields
    varlen_fields, Runtime = _runtime.varlen_fields, autotune_runtime.Runtime
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 references in float32


def short(e):
    lines = str(e).strip().splitlines() or [""]
    return f"{type(e).__name__}: {lines[0][:200]}"


def rel_err(o, ref):
    return float(f"{((o.float() - ref).norm() / ref.norm()).item():.3g}")


def ref_masked(q, k, v, allowed, mod=None):
    """float32 softmax(q k^T / sqrt(D)) v over [B, H, S, D] tensors, keys where allowed(i, j)
    (index tensors; None: all), in chunks of query rows (about 1 GB of scores each). mod(s,
    i, j): the logits s of query rows i (aligned to the keys: i + Sk - Sq) and keys j
    changed before the mask (softcap, ALiBi)."""
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    q, k, v = q.float(), k.float(), v.float()
    out = torch.empty_like(q)
    rows = max(1, min(Sq, (1 << 28) // (B * H * Sk)))
    j = torch.arange(Sk, device=q.device)
    for i0 in range(0, Sq, rows):
        i = torch.arange(i0, min(Sq, i0 + rows), device=q.device)
        s = torch.matmul(q[:, :, i0:i0 + rows], k.transpose(-1, -2)) * D ** -0.5
        if mod is not None:
            s = mod(s, i[:, None] + Sk - Sq, j[None, :])
        if allowed is not None:
            s.masked_fill_(~allowed(i[:, None] + Sk - Sq, j[None, :]), float("-inf"))
        out[:, :, i0:i0 + rows] = torch.matmul(torch.softmax(s, -1), v)
    return out


def ref_dense(q, k, v, causal):
    """The float32 reference of a [B, H, S, D] problem, Sq = Sk (memory-efficient SDPA, as
    bench_attention.py; a chunked softmax where that backend refuses the shape)."""
    try:
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            return F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                  is_causal=bool(causal))
    except RuntimeError:
        return ref_masked(q, k, v, (lambda i, j: j <= i) if causal else None)


def window_allowed(left, right, causal):
    right = 0 if causal else right

    def allowed(i, j):  # index tensors, or flex's mask_mod indices
        m = (j >= i - left) if left >= 0 else (i >= 0) & (j >= 0)
        return m & (j <= i + right) if right >= 0 else m
    return allowed


class Bench:
    """What every row shares: the runtime, the launch and the stream, the timing, the
    compiled flex attention (first use) and the rows' bookkeeping."""

    def __init__(self, args, rt=None):
        """rt: the runtime to measure (default: args.db's tuned winners, nothing else)."""
        self.args = args
        self.rt = rt or Runtime(args.lib, args.db, require_tuned=True)
        self.launch = self.rt.lib.autotune_attention
        self.stream = torch.cuda.current_stream().cuda_stream
        self._flex = None
        # time() after an L2 flush that leaves no dirty lines (common.do_bench_clean_l2)
        # instead of do_bench's; decode rows measure both.
        self.clean_l2 = False

    def flex(self):
        """torch.compile(flex_attention) and create_block_mask, as bench_attention.py."""
        if self._flex is None:
            for key in ("recompile_limit", "cache_size_limit"):
                try:
                    setattr(torch._dynamo.config, key, 1000)
                except (AttributeError, KeyError):
                    pass
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            self._flex = (torch.compile(flex_attention, dynamic=False), create_block_mask)
        return self._flex

    def time(self, fn, clean_l2=None):
        fn()
        torch.cuda.synchronize()
        if self.clean_l2 if clean_l2 is None else clean_l2:
            return common.do_bench_clean_l2(fn, warmup=self.args.warmup, rep=self.args.rep)
        return do_bench(fn, warmup=self.args.warmup, rep=self.args.rep, return_mode="median")

    def new_row(self, c):
        return {"section": c["section"], "metric": SECTION_INFO[c["section"]]["metric"],
                "shape": dict(c["shape"]), "ours": None, "ours_us": None, "rel_err": None,
                "variant": None, "peers": {}, "peers_us": {}, "notes": {}}

    def ours(self, row, fields, q, features, out, check, metric, digits=1):
        """Packs the call once, names its variant, runs it once into out (NaN first) for
        check() (the relative error), then times it. Returns the call (None when it could
        not run)."""
        try:
            ws = self.rt.attention_workspace(None, fields, q, features)
            a = self.rt.pack("attention", *fields, *ws, *features)
            row["variant"] = self.rt.variant("attention", a)
        except Exception as e:  # not tuned (--no-tune on a database without it), refused
            row["notes"]["ours"] = short(e)
            return
        rt, launch, stream = self.rt, self.launch, self.stream

        def call():
            # The prepared struct straight to the C ABI: what a production caller pays.
            rc = launch(rt.handle, a, stream)
            if rc:
                rt.check(rc)
        try:
            out.fill_(float("nan"))
            call()
            torch.cuda.synchronize()
            row["rel_err"] = check()
            ms = self.time(call)
            row["ours"], row["ours_us"] = round(metric(ms), 1), round(ms * 1e3, digits)
            return call
        except Exception as e:
            row["notes"]["ours"] = short(e)
        return None

    def peers(self, row, fns, metric, digits=1):
        for p, fn in fns.items():
            try:
                ms = self.time(fn)
                row["peers"][p], row["peers_us"][p] = round(metric(ms), 1), round(ms * 1e3, digits)
            except Exception as e:  # a peer that cannot run this shape
                row["peers"][p] = None
                row["notes"][p] = short(e)
                torch.cuda.synchronize()
                torch.cuda.empty_cache()


def sdpa(backend, q, k, v, causal=False, **kw):
    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), **kw)
    return run


def bshd(B, S, H, D, dtype=None):
    """A [B, S, H, D] tensor seen as [B, H, S, D] (flash-attn's layout, SDPA's indexing)."""
    return torch.randn(B, S, H, D, device="cuda", dtype=dtype or torch.bfloat16).transpose(1, 2)


def dense_fields(q, k, v, o, causal):
    return (*attention_fields(q, "q", True), *attention_fields(k, "k", True),
            *attention_fields(v, "v", True), *attention_fields(o, "o", True),
            *tensor_fields(None), int(causal), 0.0)


def run_head_dim(b, c, row):
    s = c["shape"]
    B, H, S, D, causal = s["B"], s["Hq"], s["Sq"], s["D"], s["causal"]
    q, k, v, o = bshd(B, S, H, D), bshd(B, S, H, D), bshd(B, S, H, D), bshd(B, S, H, D)

    def metric(ms):
        return grid_tflops(s, ms)
    b.ours(row, dense_fields(q, k, v, o, causal), q, attention_features(), o,
           lambda: rel_err(o, ref_dense(q, k, v, causal)), metric)
    b.peers(row, {"sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, causal),
                  "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)}, metric)
    if row["ours"] and row["peers"].get("sdpa_flash"):
        row["vs_sdpa_flash"] = round(row["ours"] / row["peers"]["sdpa_flash"], 3)


def run_window(b, c, row):
    s = c["shape"]
    B, H, S, D, causal = s["B"], s["Hq"], s["Sq"], s["D"], s["causal"]
    left, right = s["window"]
    q, k, v, o = bshd(B, S, H, D), bshd(B, S, H, D), bshd(B, S, H, D), bshd(B, S, H, D)
    allowed = window_allowed(left, right, causal)
    row["pairs"] = c["pairs"]

    def metric(ms):
        return c["flops"] / (ms * 1e-3) / 1e12
    b.ours(row, dense_fields(q, k, v, o, causal), q, attention_features((left, right)), o,
           lambda: rel_err(o, ref_masked(q, k, v, allowed)), metric)
    fns = {}
    try:
        flex, create_block_mask = b.flex()

        def mask_mod(bi, hi, qi, ki):
            return allowed(qi, ki)
        mask = create_block_mask(mask_mod, None, None, S, S, device="cuda")
        fns["flex"] = lambda: flex(q, k, v, block_mask=mask)
    except Exception as e:
        row["peers"]["flex"], row["notes"]["flex"] = None, short(e)
    i = torch.arange(S, device="cuda")
    bias = torch.zeros(S, S, device="cuda", dtype=q.dtype)
    bias.masked_fill_(~allowed(i[:, None], i[None, :]), float("-inf"))
    fns["sdpa_efficient"] = sdpa(SDPBackend.EFFICIENT_ATTENTION, q, k, v,
                                 attn_mask=bias[None, None])
    b.peers(row, fns, metric)
    if row["ours"] and row["peers"].get("flex"):
        row["vs_flex"] = round(row["ours"] / row["peers"]["flex"], 3)


def alibi_slopes(H):
    """ALiBi's slopes for H heads as its paper and BLOOM draw them: 2^(-8 (h + 1) / H)."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device="cuda",
                        dtype=torch.float32)


def run_score_mod(b, c, row):
    """Softcap or ALiBi (flash-attn's: logits c * tanh(s / c), bias -slope * |i - j|) on a
    dense problem; flex with the same score_mod (and the causal block mask), sdpa_efficient
    with the bias as a dense additive [H, S, S] mask (ALiBi only: no backend has tanh)."""
    s = c["shape"]
    B, H, S, D, causal = s["B"], s["Hq"], s["Sq"], s["D"], s["causal"]
    cap, alibi = s["softcap"], s["alibi"]
    q, k, v, o = bshd(B, S, H, D), bshd(B, S, H, D), bshd(B, S, H, D), bshd(B, S, H, D)
    slopes = alibi_slopes(H) if alibi else None

    def metric(ms):
        return c["flops"] / (ms * 1e-3) / 1e12

    def mod(sc, i, j):  # the logits capped, then biased
        if cap:
            sc = cap * torch.tanh(sc / cap)
        if alibi:
            sc = sc - slopes[None, :, None, None] * (i - j).abs()
        return sc

    def reference():
        allowed = (lambda i, j: j <= i) if causal else None
        return rel_err(o, ref_masked(q, k, v, allowed, mod))
    b.ours(row, dense_fields(q, k, v, o, causal), q,
           attention_features(softcap=cap, alibi_slopes=slopes), o, reference, metric)
    fns = {}
    try:
        flex, create_block_mask = b.flex()
        if cap:
            def score_mod(score, bi, hi, qi, ki):
                return cap * torch.tanh(score / cap)
        else:
            def score_mod(score, bi, hi, qi, ki):
                return score - slopes[hi] * (qi - ki).abs()
        mask = None
        if causal:
            mask = create_block_mask(lambda bi, hi, qi, ki: ki <= qi, None, None, S, S,
                                     device="cuda")
        fns["flex"] = lambda: flex(q, k, v, score_mod=score_mod, block_mask=mask)
    except Exception as e:
        row["peers"]["flex"], row["notes"]["flex"] = None, short(e)
    if alibi:
        i = torch.arange(S, device="cuda")
        bias = (-slopes[:, None, None] * (i[:, None] - i[None, :]).abs()).to(q.dtype)
        if causal:
            bias.masked_fill_(i[None, :] > i[:, None], float("-inf"))
        fns["sdpa_efficient"] = sdpa(SDPBackend.EFFICIENT_ATTENTION, q, k, v, attn_mask=bias[None])
    else:
        row["peers"]["sdpa_efficient"] = None
        row["notes"]["sdpa_efficient"] = "no SDPA backend applies a softcap (tanh) to the logits"
    b.peers(row, fns, metric)
    if row["ours"] and row["peers"].get("flex"):
        row["vs_flex"] = round(row["ours"] / row["peers"]["flex"], 3)


def run_varlen(b, c, row):
    s = c["shape"]
    H, Hkv, D, causal, lengths = s["Hq"], s["Hkv"], s["D"], s["causal"], s["seqlens"]
    T, L, n = s["Tq"], s["Sq"], len(lengths)
    bounds = [0]
    for m in lengths:
        bounds.append(bounds[-1] + m)
    cu = torch.tensor(bounds, device="cuda", dtype=torch.int32)
    q = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(T, Hkv, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(T, Hkv, D, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)

    def seq(t, i):  # sequence i of a packed tensor as [1, H, L_i, D]
        return t[bounds[i]:bounds[i + 1]].unsqueeze(0).transpose(1, 2)

    def check():
        ref = torch.empty(T, H, D, device="cuda")
        for i in range(n):
            ref[bounds[i]:bounds[i + 1]] = ref_dense(seq(q, i), seq(k, i), seq(v, i),
                                                     causal)[0].transpose(0, 1)
        return rel_err(o, ref)

    def metric(ms):
        return c["flops"] / (ms * 1e-3) / 1e12
    fields = (*tensor_fields(q, "q"), *tensor_fields(k, "k"), *tensor_fields(v, "v"),
              *tensor_fields(o, "o"), *tensor_fields(None), int(causal), 0.0)
    features = attention_features(NO_WINDOW, 0.0, None, varlen_fields(cu, cu, L, L))
    b.ours(row, fields, q, features, o, check, metric)

    def padded(t):
        p = torch.zeros(n, L, t.shape[1], D, device="cuda", dtype=t.dtype)
        for i in range(n):
            p[i, :lengths[i]] = t[bounds[i]:bounds[i + 1]]
        return p.transpose(1, 2)
    qp, kp, vp = padded(q), padded(k), padded(v)
    seqs = [(seq(q, i), seq(k, i), seq(v, i)) for i in range(n)]

    def loop():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            for qi, ki, vi in seqs:
                F.scaled_dot_product_attention(qi, ki, vi, is_causal=bool(causal))
    fns = {"sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION, qp, kp, vp, causal),
           "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION, qp, kp, vp, causal),
           "sdpa_flash_loop": loop}
    try:
        flex, create_block_mask = b.flex()
        doc = torch.repeat_interleave(torch.arange(n, device="cuda"),
                                      torch.tensor(lengths, device="cuda"))

        def mask_mod(bi, hi, qi, ki):
            same = doc[qi] == doc[ki]
            return (same & (qi >= ki)) if causal else same
        mask = create_block_mask(mask_mod, None, None, T, T, device="cuda")
        qf, kf, vf = (t.unsqueeze(0).transpose(1, 2) for t in (q, k, v))
        fns["flex"] = lambda: flex(qf, kf, vf, block_mask=mask)
    except Exception as e:
        row["peers"]["flex"], row["notes"]["flex"] = None, short(e)
    b.peers(row, fns, metric)
    if row["ours"] and row["peers"].get("sdpa_flash"):
        row["vs_sdpa_flash"] = round(row["ours"] / row["peers"]["sdpa_flash"], 3)


def run_decode(b, c, row):
    s = c["shape"]
    B, Hq, Hkv, D, ctx, page = s["B"], s["Hq"], s["Hkv"], s["D"], s["context"], s["page"]
    G, per_seq = Hq // Hkv, ctx // page
    nblocks = B * per_seq
    gen = torch.Generator(device="cpu").manual_seed(c["seed"])
    kc = torch.randn(nblocks, page, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    table = torch.randperm(nblocks, generator=gen).view(B, per_seq).to("cuda", torch.int32)
    flat = table.view(-1).long()
    lens = torch.full((B,), ctx, device="cuda", dtype=torch.int32)
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    # The gathered copy, [B, context, Hkv, D], seen as [B, Hkv, context, D].
    kg = torch.empty(B, ctx, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vg = torch.empty_like(kg)

    def gather():
        torch.index_select(kc, 0, flat, out=kg.view(nblocks, page, Hkv, D))
        torch.index_select(vc, 0, flat, out=vg.view(nblocks, page, Hkv, D))
    gather()
    kt, vt = kg.transpose(1, 2), vg.transpose(1, 2)
    qs = q.view(B, Hkv, G, D)  # the G query heads of a KV head as G query rows

    def check():
        ref = torch.empty(B, Hkv, G, D, device="cuda")
        for i in range(B):
            sc = torch.matmul(qs[i].float(), kt[i].float().transpose(-1, -2)) * D ** -0.5
            ref[i] = torch.matmul(torch.softmax(sc, -1), vt[i].float())
        return rel_err(o, ref.view(B, 1, Hq, D))

    def metric(ms):
        return c["kv_bytes"] / (ms * 1e-3) / 1e9
    fields = (*attention_fields(q, "q"), *attention_fields(kc, "k_cache"),
              *attention_fields(vc, "v_cache"), *attention_fields(o, "o"),
              *tensor_fields(None), 0, 0.0)
    features = attention_features(NO_WINDOW, 0.0, None, NO_VARLEN, kvcache_fields(lens, table))
    call = b.ours(row, fields, q, features, o, check, metric, digits=2)
    flash = sdpa(SDPBackend.FLASH_ATTENTION, qs, kt, vt)

    def flash_gather():
        gather()
        flash()
    src, dst = kc.view(-1), kg.view(-1)  # run last: it overwrites the gathered K

    def copy():
        dst.copy_(src)
    b.peers(row, {"sdpa_flash": flash, "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION, qs, kt, vt),
                  "sdpa_efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION, qs, kt, vt),
                  "sdpa_flash_gather": flash_gather, "copy": copy}, metric, digits=2)
    row["kv_bytes"] = c["kv_bytes"]
    if call is not None and row["peers"].get("copy"):
        # Both again after a flush that leaves the L2 clean (do_bench's leaves it full of
        # dirty lines that a read-only kernel pays to write back: common.do_bench_clean_l2).
        t_ours, t_copy = b.time(call, clean_l2=True), b.time(copy, clean_l2=True)
        row["clean_l2"] = {"ours_us": round(t_ours * 1e3, 2), "ours": round(metric(t_ours), 1),
                           "copy_us": round(t_copy * 1e3, 2), "copy": round(metric(t_copy), 1),
                           "pct_of_copy": round(100 * t_copy / t_ours, 1),
                           "pct_of_copy_ceiling":
                               round(100 * metric(t_ours) / (COPY_TBPS * 1e3), 1)}
    if row["ours"]:
        row["pct_of_copy_ceiling"] = round(100 * row["ours"] / (COPY_TBPS * 1e3), 1)
        if row["peers"].get("copy"):
            row["pct_of_copy"] = round(100 * row["ours"] / row["peers"]["copy"], 1)
        if row["peers"].get("sdpa_flash"):
            row["vs_sdpa_flash"] = round(row["ours"] / row["peers"]["sdpa_flash"], 3)


RUN = {"head_dim": run_head_dim, "window": run_window, "varlen": run_varlen,
       "decode": run_decode, "score_mod": run_score_mod}


# ---- the result files --------------------------------------------------------------------------

def cell(x):
    return "n/a" if x is None else str(x)


def table_writer(rows, runs=None):
    runs = runs or {}

    def table(f):
        f.write("All measured in one run per section (do_bench median, L2 flushed), bf16, "
                "flash-attn's layout [.., S, H, D]; ours: the tuned winner through the C ABI. "
                "n/a: not measured (see the notes).\n")
        for sec in SECTIONS.values():
            sel = [r for r in rows if r["section"] == sec]
            if not sel:
                continue
            peers = PEERS[sec]
            f.write(f"\n## {sec}\n\n")
            if sec in runs:
                f.write(f"Run at commit `{runs[sec]['commit']}`, {runs[sec]['date']}: "
                        f"`{runs[sec]['command']}`\n\n")
            if sec == "head_dim":
                f.write("TFLOP/s = 4*B*Hq*Sq*Sk*D / time, halved when causal (as "
                        "<gpu>-attention.md). B = 16384 // S, Hq = Hkv = 2048 // D (21 at "
                        "D = 96, 8 at D = 256).\n\n")
                head, cols = "| D | causal | B | Hq | S |", 5
            elif sec == "window":
                f.write("TFLOP/s = 4*B*Hq*D*pairs / time, pairs = sum over query rows i of "
                        "the keys j with max(0, i - left) <= j <= min(S - 1, i + right) "
                        "(right = 0 when causal): only the pairs the window keeps. flex: the "
                        "window as a block mask; sdpa_efficient: as a dense additive [S, S] "
                        "mask.\n\n")
                head, cols = "| S | Hq | causal | window | pairs |", 5
            elif sec == "varlen":
                f.write("TFLOP/s = 4*Hq*D*sum_i(L_i^2) / time, halved when causal (the real "
                        "tokens only). sdpa_flash / sdpa_cudnn: the batch zero-padded to "
                        "[B, max_len] (their padding costs them); sdpa_flash_loop: one call "
                        "per sequence; flex: a document mask over the packed tokens.\n\n")
                head, cols = "| causal | B | T | max_len | lengths |", 5
            elif sec == "score_mod":
                f.write("TFLOP/s = 4*B*Hq*Sq*Sk*D / time, halved when causal. softcap: "
                        "logits c * tanh(s / c); alibi: slopes 2^(-8 (h + 1) / H), bias "
                        "-slope * |i - j|. flex: the same score_mod (and the causal block "
                        "mask); sdpa_efficient: ALiBi as a dense additive [H, S, S] mask.\n\n")
                head, cols = "| mod | D | causal | B | Hq | S |", 6
            else:
                s = sel[0]["shape"]
                f.write(f"GB/s of K/V bytes read (2*B*context*Hkv*D*2) / time; % of the "
                        f"{COPY_TBPS} TB/s copy ceiling and of the copy measured beside it "
                        f"(copy: as many bytes read + written). Sq = 1, Hq = {s['Hq']}, "
                        f"Hkv = {s['Hkv']}, D = {s['D']}, a paged cache (page {s['page']}, the "
                        "pages shuffled, every sequence full); sdpa_*: on K/V gathered "
                        "beforehand, sdpa_flash_gather: the gather + sdpa_flash. Clean L2: "
                        "ours and the copy timed again after a flush that leaves the L2 clean "
                        "(do_bench's zeroed buffer leaves up to 50 MB of dirty lines, which a "
                        "read-only kernel writes back inside its own time: "
                        "bench_common.do_bench_clean_l2).\n\n")
                head, cols = "| B | context | K/V MB |", 3
            extra = (" % of 2.97 TB/s | % of copy | clean L2: ours us | % of 2.97 TB/s | "
                     "copy us | % of copy |") if sec == "decode" else ""
            f.write(head + " ours us | ours |" + extra + "".join(f" {p} |" for p in peers)
                    + " rel_err | variant |\n")
            n = cols + 2 + (6 if sec == "decode" else 0) + len(peers) + 2
            f.write("|" + "---|" * n + "\n")
            for r in sel:
                s = r["shape"]
                if sec == "head_dim":
                    lead = f"| {s['D']} | {int(s['causal'])} | {s['B']} | {s['Hq']} | {s['Sq']} |"
                elif sec == "window":
                    lead = (f"| {s['Sq']} | {s['Hq']} | {int(s['causal'])} | "
                            f"({s['window'][0]}, {s['window'][1]}) | {r.get('pairs')} |")
                elif sec == "score_mod":
                    mod = f"softcap {s['softcap']:g}" if s["softcap"] else "alibi"
                    lead = (f"| {mod} | {s['D']} | {int(s['causal'])} | {s['B']} | {s['Hq']} | "
                            f"{s['Sq']} |")
                elif sec == "varlen":
                    lead = (f"| {int(s['causal'])} | {s['B']} | {s['Tq']} | {s['Sq']} | "
                            f"{' '.join(map(str, s['seqlens']))} |")
                else:
                    lead = (f"| {s['B']} | {s['context']} | "
                            f"{cell(r.get('kv_bytes') and round(r['kv_bytes'] / 1e6, 1))} |")
                mid = ""
                if sec == "decode":
                    cl = r.get("clean_l2") or {}
                    mid = (f" {cell(r.get('pct_of_copy_ceiling'))} | {cell(r.get('pct_of_copy'))} |"
                           + "".join(f" {cell(cl.get(k))} |" for k in
                                     ("ours_us", "pct_of_copy_ceiling", "copy_us", "pct_of_copy")))
                f.write(lead + f" {cell(r['ours_us'])} | {cell(r['ours'])} |" + mid
                        + "".join(f" {cell(r['peers'].get(p))} |" for p in peers)
                        + f" {cell(r['rel_err'])} | `{r['variant']}` |\n")
        notes = [(i, r) for i, r in enumerate(rows) if r.get("notes")]
        if notes:
            f.write("\nNotes (what could not be measured):\n\n")
            for i, r in notes:
                for k, v in r["notes"].items():
                    f.write(f"- {r['section']} row {i + 1} ({cli_shape(r['shape'])}) {k}: {v}\n")
    return table


def write(args, name, rows, selected, merged):
    """<gpu>-attention-features.{json,md}: rows of the sections run now after the kept rows
    of --merge's file, in section order."""
    # --head-dims: section a's rows of the other head dims stay as --merge's file has them.
    def rerun(r):
        if r.get("section") not in selected:
            return False
        return not (r["section"] == "head_dim" and args.head_dims and
                    r["shape"]["D"] not in args.head_dims)
    kept = [r for r in merged.get("rows", []) if not rerun(r)]
    order = list(SECTIONS.values())
    all_rows = sorted(kept + rows, key=lambda r: order.index(r["section"]))
    before = merged.get("section_runs", {})
    runs = {k: v for k, v in before.items() if k not in selected}
    for sec in selected:
        runs[sec] = {"commit": args.commit, "date": datetime.date.today().isoformat(),
                     "command": args.command}
        partial = sec == "head_dim" and args.head_dims and any(
            r["section"] == sec for r in kept)
        if partial and sec in before:
            dims = sorted({r["shape"]["D"] for r in kept if r["section"] == sec})
            runs[sec]["command"] += (f"` (D={', '.join(map(str, args.head_dims))}); the D="
                                     f"{', '.join(map(str, dims))} rows: commit "
                                     f"`{before[sec]['commit']}`, {before[sec]['date']}: "
                                     f"`{before[sec]['command']}")
    runs = {k: runs[k] for k in order if k in runs}
    return common.write_results(args, "attention-features", name, all_rows, CEILINGS, "TFLOPs",
                                table_writer(all_rows, runs), sections=SECTION_INFO,
                                section_runs=runs)


def bench(args, cases, selected):
    gpu_modules()
    merged = {}
    if args.merge:
        with open(args.merge) as f:
            merged = json.load(f)
    torch.manual_seed(0)
    name = torch.cuda.get_device_name()
    if merged and merged.get("gpu") != name:
        sys.exit(f"--merge {args.merge} is of {merged.get('gpu')}, not {name}")
    b = Bench(args)
    rows = []
    for c in cases:
        start = time.time()
        row = b.new_row(c)
        if c["skip"]:
            row["notes"]["ours"] = c["skip"]
            for p in PEERS[c["section"]]:
                row["peers"][p] = None
        else:
            try:
                RUN[c["section"]](b, c, row)
            except Exception as e:  # the row's own tensors (out of memory, ...)
                row["notes"]["row"] = short(e)
        for p in PEERS[c["section"]]:
            if p not in row["peers"]:
                row["peers"][p] = None
                row["notes"].setdefault(p, "not run (the row failed before it)")
        if not row["notes"]:
            del row["notes"]
        rows.append(row)
        pr = " ".join(f"{p} {row['peers'].get(p)}" for p in PEERS[c["section"]])
        print(f"[{c['section']}] {c['cli']}: ours {row['ours']} {row['metric']} "
              f"({row['ours_us']} us) {pr} err {row['rel_err']} {row['variant']} "
              f"[{time.time() - start:.1f} s]", flush=True)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        write(args, name, rows, selected, merged)  # a run cut short still leaves its rows
    stem = write(args, name, rows, selected, merged)
    print(f"wrote {stem}.json and .md")


def parse_sections(text):
    names = {**SECTIONS, **{v: v for v in SECTIONS.values()}}
    if not text:
        return list(SECTIONS.values())
    out = []
    for t in text.split(","):
        t = t.strip()
        if t not in names:
            raise SystemExit(f"--only: unknown section {t!r} (a|b|c|d or "
                             f"{'|'.join(SECTIONS.values())})")
        if names[t] not in out:
            out.append(names[t])
    return [s for s in SECTIONS.values() if s in out]


def main():
    ap = common.arg_parser()
    ap.description = ("attention's features (head dims 96/256, sliding window, varlen, paged "
                      "decode) beside their peers; see the module docstring")
    for action in ap._actions:  # --dry-run runs without them
        if action.dest in ("lib", "db", "out"):
            action.required = False
    ap.add_argument("--only", default="", help="sections, comma-separated: a|head_dim, "
                    "b|window, c|varlen, d|decode (default: all)")
    ap.add_argument("--autotune", default=None, help="the autotune CLI (default: beside --lib, "
                    "else .device/autotune)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--tune-only", action="store_true", help="tune the shapes, measure nothing")
    mode.add_argument("--bench-only", "--no-tune", dest="no_tune", action="store_true",
                      help="measure from the database as it is (no tuning)")
    mode.add_argument("--dry-run", action="store_true", help="print the shapes, --shape "
                      "strings, FLOPs/bytes and the tuning command (no torch, no GPU)")
    ap.add_argument("--budget-s", type=float, default=None, help="autotune --budget-s")
    ap.add_argument("--tune-args", default="", help="more autotune options, one string")
    ap.add_argument("--head-dims", default=None,
                    type=lambda t: [int(x) for x in t.split(",") if x.strip()],
                    help="section a: only these head dims (comma-separated; with --merge the "
                    "file's rows of the others are kept)")
    ap.add_argument("--merge", default=None, help="a previous run's JSON: keep its rows of the "
                    "sections not run now")
    ap.add_argument("--rep", type=int, default=200, help="do_bench rep (ms)")
    ap.add_argument("--warmup", type=int, default=25, help="do_bench warmup (ms)")
    args = ap.parse_args()
    if args.autotune is None:
        args.autotune = (os.path.join(os.path.dirname(os.path.abspath(args.lib)), "autotune")
                         if args.lib else os.path.join(HERE, "..", ".device", "autotune"))
    selected = parse_sections(args.only)
    cases = cases_of(args.shapes, selected, args.head_dims)
    if args.dry_run:
        return dry_run(args, cases)
    need = ["db", "out"] + ([] if args.tune_only else ["lib"])
    missing = [f"--{k}" for k in need if not getattr(args, k)]
    if missing:
        ap.error(f"{', '.join(missing)} required (all but --dry-run)")
    if not args.no_tune:
        rc = tune(args, cases)
        if args.tune_only:
            return rc
        if rc:
            print("tuning failed for some shapes: their rows will say so", flush=True)
    bench(args, cases, selected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
