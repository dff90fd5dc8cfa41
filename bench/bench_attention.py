#!/usr/bin/env python3
"""attention side by side with its peers, on the GPU machine.

Runs in one process, on the shapes of bench/shapes.toml [attention] (the grid in
bf16 and fp16, layout [B,S,H,D]; then the extra shapes, fp16, layout [B,H,S,D]):
  ours        the tuned winner, launched through the C ABI (libautotune.so, ctypes)
  sdpa_flash  torch SDPA, FLASH_ATTENTION backend forced (FlashAttention-2)
  sdpa_cudnn  torch SDPA, CUDNN_ATTENTION backend forced
  flex        torch.compile(flex_attention) (causal through a block mask)
All on the same tensors, timed with triton.testing.do_bench (CUDA events, L2
flushed before every sample, median). TFLOPs = 4*B*Hq*Sq*Sk*D, halved when causal.
A peer that fails gets null with a note. Writes <gpu>-attention.{json,md,png}.

Usage: bench_attention.py --lib .device/libautotune.so --db tuning.db --out DIR
       --commit SHA --command "the command line that ran this" [--only N]
"""
import math
import os
import sys

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

# bench_common, beside this script, also puts runtime/python on sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import arg_parser, load_spec, write_results as write_files  # noqa: E402

# The C ABI struct, as the Python bindings define it (tests/check_python_abi.py holds
# it to the C layout); the benchmark calls the C functions directly, so that a timed
# call builds no struct.
import autotune_runtime  # noqa: E402

DTYPES = {"fp16": (torch.float16, 1), "bf16": (torch.bfloat16, 2)}
PEERS = ("sdpa_flash", "sdpa_cudnn", "flex")


def shapes_from(spec):
    out = []
    g = spec["grid"]
    for dtype in spec["dtype"]:
        for d in g["head_dim"]:
            for causal in g["causal"]:
                for s in g["seqlen"]:
                    out.append(dict(B=16384 // s, Hq=2048 // d, Hkv=2048 // d, Sq=s, Sk=s, D=d,
                                    causal=causal, dtype=dtype, layout="bshd"))
    for e in spec["extra"]:
        hq = e.get("Hq", e.get("H"))
        out.append(dict(B=e["B"], Hq=hq, Hkv=e.get("Hkv", hq), Sq=e["S"], Sk=e["S"], D=e["D"],
                        causal=e.get("causal", False), dtype="fp16", layout="bhsd"))
    return out


def tflops(s, ms):
    f = 4 * s["B"] * s["Hq"] * s["Sq"] * s["Sk"] * s["D"] / (2 if s["causal"] else 1)
    return f / (ms * 1e-3) / 1e12


def write_results(args, name, rows):
    """JSON and Markdown of the rows so far (rewritten after every shape)."""
    def table(f):
        f.write("TFLOP/s = 4*B*Hq*Sq*Sk*D / time, halved when causal; all measured in one run "
                "(do_bench median, L2 flushed). Grid: layout [B,S,H,D]; extra shapes: "
                "[B,H,S,D], fp16.\n\n")
        f.write("| dtype | B | Hq | Hkv | S | D | causal | ours us | ours | sdpa_flash | sdpa_cudnn "
                "| flex | ours/flash | rel_err | variant |\n")
        f.write("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            s = r["shape"]
            pv = [r["peers"].get(p) for p in PEERS]
            f.write(f"| {s['dtype']} | {s['B']} | {s['Hq']} | {s['Hkv']} | {s['Sq']} | {s['D']} | "
                    f"{int(s['causal'])} | {r['ours_us']} | {r['ours']} | "
                    + " | ".join("n/a" if x is None else str(x) for x in pv)
                    + f" | {r.get('vs_sdpa_flash')} | {r['rel_err']} | `{r['variant']}` |\n")
        notes = [(i, r["notes"]) for i, r in enumerate(rows) if r.get("notes")]
        if notes:
            f.write("\nNotes (peers that could not run a shape):\n\n")
            for i, n in notes:
                for k, v in n.items():
                    f.write(f"- row {i + 1} {k}: {v}\n")
    return write_files(args, "attention", name, rows,
                       {"bf16_mm_TFLOPs": 691, "fp16_mm_TFLOPs": 657}, "TFLOPs", table)


def main():
    ap = arg_parser()
    ap.add_argument("--only", default="", help="comma-separated shape indices (debugging)")
    ap.add_argument("--rep", type=int, default=200, help="do_bench rep (ms)")
    args = ap.parse_args()

    shapes = shapes_from(load_spec(args.shapes, "attention"))
    if args.only:
        shapes = [shapes[int(i)] for i in args.only.split(",")]
    rt = autotune_runtime.Runtime(args.lib, args.db, require_tuned=True)

    torch._dynamo.config.recompile_limit = 1000
    torch._dynamo.config.cache_size_limit = 1000
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention, dynamic=False)

    torch.manual_seed(0)
    name = torch.cuda.get_device_name()
    rows = []
    for s in shapes:
        dtype, code = DTYPES[s["dtype"]]
        B, Hq, Hkv, S, D, causal = s["B"], s["Hq"], s["Hkv"], s["Sq"], s["D"], s["causal"]
        bhsd = s["layout"] == "bhsd"

        def make(h):
            if bhsd:
                return torch.randn(B, h, S, D, device="cuda", dtype=dtype)
            return torch.randn(B, S, h, D, device="cuda", dtype=dtype).transpose(1, 2)

        # Views [B, H, S, D] over storage in the shape's layout.
        q, k, v = make(Hq), make(Hkv), make(Hkv)
        o = make(Hq)
        o.fill_(float("nan"))
        # q, k, v, o are already [B, H, S, D] views.
        a = rt.attention_args(q, k, v, o, None, causal, None, layout="bhsd")
        stream = torch.cuda.current_stream().cuda_stream
        row = {"shape": dict(s), "ours": None, "ours_us": None, "rel_err": None, "variant": None,
               "peers": {}, "peers_us": {}, "notes": {}}
        try:
            row["variant"] = rt.variant("attention", a)
        except RuntimeError as e:
            row["notes"]["ours"] = str(e)[:300]
        gqa = Hq != Hkv

        launch = rt.lib.autotune_attention

        def ours():
            # The prepared struct straight to the C ABI: what a production caller pays.
            rc = launch(rt.handle, a, stream)
            if rc:
                rt.check(rc)

        def sdpa(backend):
            def run():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal),
                                                          enable_gqa=gqa)
            return run

        mask = None
        if causal:
            mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, S, S)

        def flex_run():
            return flex(q, k, v, block_mask=mask, enable_gqa=gqa)

        fns = {"sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
               "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION), "flex": flex_run}
        if row["variant"] is not None:
            ours()
            torch.cuda.synchronize()
            # fp32 reference without materialising S x S: memory-efficient SDPA.
            kr, vr = k.float(), v.float()
            if gqa:
                kr = kr.repeat_interleave(Hq // Hkv, dim=1)
                vr = vr.repeat_interleave(Hq // Hkv, dim=1)
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                ref = F.scaled_dot_product_attention(q.float(), kr, vr, is_causal=bool(causal))
            row["rel_err"] = float(f"{((o.float() - ref).norm() / ref.norm()).item():.3g}")
            del kr, vr, ref
            ms = triton.testing.do_bench(ours, warmup=25, rep=args.rep, return_mode="median")
            row["ours"], row["ours_us"] = round(tflops(s, ms), 1), round(ms * 1e3, 1)
        for p in PEERS:
            try:
                fns[p]()
                torch.cuda.synchronize()
                ms = triton.testing.do_bench(fns[p], warmup=25, rep=args.rep, return_mode="median")
                row["peers"][p], row["peers_us"][p] = round(tflops(s, ms), 1), round(ms * 1e3, 1)
            except Exception as e:  # a peer that cannot run this shape
                row["peers"][p] = None
                row["notes"][p] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        if row["ours"] and row["peers"].get("sdpa_flash"):
            row["vs_sdpa_flash"] = round(row["ours"] / row["peers"]["sdpa_flash"], 3)
        if not row["notes"]:
            del row["notes"]
        rows.append(row)
        pr = " ".join(f"{p} {row['peers'].get(p)}" for p in PEERS)
        print(f"{s['dtype']} B={B} Hq={Hq} Hkv={Hkv} S={S} D={D} causal={int(causal)} {s['layout']}: "
              f"ours {row['ours']} TFLOPs ({row['ours_us']} us, x{row.get('vs_sdpa_flash')} flash) "
              f"{pr} err {row['rel_err']} {row['variant']}", flush=True)
        del q, k, v, o
        torch.cuda.empty_cache()
        write_results(args, name, rows)  # a run cut short still leaves its rows

    stem = write_results(args, name, rows)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        grid = [r for r in rows if r["shape"]["layout"] == "bshd"]
        panels = sorted({(r["shape"]["dtype"], r["shape"]["D"], int(r["shape"]["causal"]))
                         for r in grid})
        if panels:
            cols = 4
            nrows = math.ceil(len(panels) / cols)
            fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.4 * nrows), squeeze=False)
            for ax, (dt, d, c) in zip(axes.flat, panels):
                sel = [r for r in grid if (r["shape"]["dtype"], r["shape"]["D"],
                                           int(r["shape"]["causal"])) == (dt, d, c)]
                xs = [r["shape"]["Sq"] for r in sel]
                ax.plot(xs, [r["ours"] for r in sel], "o-", label="ours")
                for p in PEERS:
                    ax.plot(xs, [r["peers"].get(p) for r in sel], ".--", label=p)
                ax.set_xscale("log", base=2)
                ax.set_title(f"{dt} D={d} {'causal' if c else 'non-causal'}")
                ax.set_xlabel("seqlen")
                ax.set_ylabel("TFLOP/s")
                ax.grid(alpha=0.3)
            for ax in list(axes.flat)[len(panels):]:
                ax.axis("off")
            axes.flat[0].legend(fontsize=8)
            fig.suptitle(f"attention forward on {name}")
            fig.tight_layout()
            fig.savefig(stem + ".png", dpi=110)
    except Exception as e:
        print(f"plot failed: {e}")
    print(f"wrote {stem}.json, .md and .png")


if __name__ == "__main__":
    main()
