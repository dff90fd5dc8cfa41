#!/usr/bin/env python3
"""selective_scan (Mamba-1 forward) side by side with a PyTorch scan, on the GPU machine.

Runs in one process, on the shapes of bench/shapes.toml [selective_scan] (bf16 u/delta/z/out,
fp32 A/D/delta_bias, variable B/C with one group, D skip, z gate, delta_bias, softplus):
  ours        the tuned winner, launched through the C ABI (libautotune.so, ctypes, require_tuned)
  torch_scan  a chunked PyTorch scan: within chunks of 32 steps the state is
              h_t = exp(S_t) * (h_0 + cumsum_s exp(-S_s) * dt_s u_s B_s) with S the cumulative
              log-decay (cumsum), y = einsum(h, C); the state carries between chunks
  copy        a device-to-device copy of the same byte count (the memory ceiling)
All are timed with triton.testing.do_bench (CUDA events, L2 flushed before every sample,
median). The floor of the op is max(bytes / copy bandwidth, exps / exp-unit rate) with
exps = B*D*L*N and the exp unit at 16 per clock per SM (sm_80..sm_90) at the maximum SM
clock; "% of floor" is floor time / measured time. rel_err is measured against a float64
sequential scan over the first channels of every batch.

Usage: bench_selective_scan.py --lib .device/libautotune.so --db tuning.db --out DIR
       --commit SHA --command "the command line that ran this"
"""
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

# bench_common, beside this script, also puts runtime/python on sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (arg_parser, bandwidth_row, load_spec,  # noqa: E402
                          time_bandwidth, write_results)

EXP_PER_CLOCK_PER_SM = 16  # MUFU.EX2 throughput, CUDA programming guide, cc 8.0-9.0
REF_CHANNELS = 64          # channels per batch checked against the float64 scan
TORCH_CHUNK = 32           # steps per chunk of the PyTorch scan (exp(-S) stays in fp32 range)

# The C ABI structs, as the Python bindings define them (tests/check_python_abi.py holds
# them to the C layout); the benchmark calls the C functions directly, so that a timed
# call builds no struct.
import autotune_runtime  # noqa: E402


def max_sm_clock_mhz():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits",
                              "-i", str(torch.cuda.current_device())],
                             capture_output=True, text=True, check=True).stdout
        return float(out.strip().splitlines()[0])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return None


def torch_scan(u, delta, A, Bm, Cm, Dv, z, bias):
    """Chunked selective scan in fp32: cumsum of log-decays within a chunk, state carried."""
    Bsz, Dd, L = u.shape
    N = A.shape[1]
    dt = F.softplus(delta.float() + bias[None, :, None])           # [B, D, L]
    x = dt * u.float()                                               # [B, D, L]
    h = torch.zeros(Bsz, Dd, N, device=u.device, dtype=torch.float32)
    ys = []
    for t0 in range(0, L, TORCH_CHUNK):
        t1 = min(L, t0 + TORCH_CHUNK)
        S = torch.cumsum(dt[:, :, t0:t1, None] * A[None, :, None, :], dim=2)  # [B, D, T, N]
        Bc = Bm[:, 0, :, t0:t1].float().transpose(1, 2)               # [B, T, N] (G = 1)
        Cc = Cm[:, 0, :, t0:t1].float().transpose(1, 2)
        w = torch.exp(-S) * (x[:, :, t0:t1, None] * Bc[:, None])
        hs = torch.exp(S) * (h[:, :, None, :] + torch.cumsum(w, dim=2))
        ys.append(torch.einsum("bdtn,btn->bdt", hs, Cc))
        h = hs[:, :, -1, :]
    y = torch.cat(ys, dim=2) + Dv[None, :, None] * u.float()
    return (y * F.silu(z.float())).to(u.dtype)


def reference(u, delta, A, Bm, Cm, Dv, z, bias, channels):
    """Sequential float64 scan over the first `channels` channels of every batch."""
    u, delta, z = (t[:, :channels].double() for t in (u, delta, z))
    A, Dv, bias = A[:channels].double(), Dv[:channels].double(), bias[:channels].double()
    Bm, Cm = Bm[:, 0].double(), Cm[:, 0].double()                      # [B, N, L]
    dt = F.softplus(delta + bias[None, :, None])
    h = torch.zeros(u.shape[0], channels, A.shape[1], device=u.device, dtype=torch.float64)
    y = torch.empty_like(u)
    for t in range(u.shape[2]):
        h = torch.exp(dt[:, :, t, None] * A[None]) * h + \
            (dt[:, :, t] * u[:, :, t])[:, :, None] * Bm[:, None, :, t]
        y[:, :, t] = (h * Cm[:, None, :, t]).sum(-1)
    y = y + Dv[None, :, None] * u
    return y * F.silu(z)


def rel_err(out, ref, channels):
    o = out[:, :channels].double()
    return ((o - ref).norm() / ref.norm()).item()


def main():
    args = arg_parser().parse_args()
    spec = load_spec(args.shapes, "selective_scan")
    rt = autotune_runtime.Runtime(args.lib, args.db, require_tuned=True)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    name = props.name
    sms = props.multi_processor_count
    clock_mhz = max_sm_clock_mhz()
    exp_rate = sms * EXP_PER_CLOCK_PER_SM * clock_mhz * 1e6 if clock_mhz else None
    rows = []
    for s in spec["shapes"]:
        Bsz, Dd, L, N = s["B"], s["D"], s["L"], s["N"]
        dt = torch.bfloat16
        # Ranges as the tuner's (runtime/ops/selective_scan.cpp): softplus(delta + bias)
        # in about [0.02, 0.7], decays exp(dt * A) from 0.25 to 0.9998.
        u = torch.randn(Bsz, Dd, L, device=dev, dtype=dt)
        delta = (torch.rand(Bsz, Dd, L, device=dev) * -3.0).to(dt)
        z = torch.randn(Bsz, Dd, L, device=dev, dtype=dt)
        A = -(torch.rand(Dd, N, device=dev) * 1.99 + 0.01)
        Bm = torch.randn(Bsz, 1, N, L, device=dev, dtype=dt)
        Cm = torch.randn(Bsz, 1, N, L, device=dev, dtype=dt)
        Dv = torch.rand(Dd, device=dev) * 2 - 1
        bias = -torch.rand(Dd, device=dev)
        out = torch.full_like(u, float("nan"))
        a = rt.selective_scan_args(u, delta, A, Bm, Cm, out, Dv, z, bias, True)
        stream = torch.cuda.current_stream().cuda_stream
        variant = rt.variant("selective_scan", a)
        launch = rt.lib.autotune_selective_scan

        def ours():
            rc = launch(rt.handle, a, stream)
            if rc:
                rt.check(rc)

        def peer():
            return torch_scan(u, delta, A, Bm, Cm, Dv, z, bias)

        nbytes = (4 * Bsz * Dd * L * 2 + 2 * Bsz * N * L * 2 + Dd * N * 4 + 2 * Dd * 4)
        src = torch.randn(nbytes // 4, device=dev, dtype=dt)
        dst = torch.empty_like(src)

        def copy():
            dst.copy_(src)

        ours()
        torch.cuda.synchronize()
        ch = min(Dd, REF_CHANNELS)
        ref = reference(u, delta, A, Bm, Cm, Dv, z, bias, ch)
        err = rel_err(out, ref, ch)
        peer_err = rel_err(peer(), ref, ch)
        t, gbps = time_bandwidth({"ours": ours, "torch_scan": peer, "copy": copy}, nbytes,
                                 warmup=25, rep=200)
        exps = Bsz * Dd * L * N
        floor_bytes_us = nbytes / (gbps["copy"] * 1e9) * 1e6
        floor_exp_us = exps / exp_rate * 1e6 if exp_rate else None
        floor_us = max(floor_bytes_us, floor_exp_us or 0.0)
        shape = {"B": Bsz, "D": Dd, "L": L, "N": N, "G": 1, "dtype": "bf16", "var_bc": True,
                 "delta_bias": True, "softplus": True, "has_d": True, "has_z": True}
        rows.append(bandwidth_row(
            shape, "torch_scan", t, gbps, err, peer_err, variant,
            floor_us=round(floor_us, 2),
            floor_bytes_us=round(floor_bytes_us, 2),
            floor_exp_us=round(floor_exp_us, 2) if floor_exp_us else None,
            pct_of_floor=round(100 * floor_us / (t["ours"] * 1e3), 1)))
        r = rows[-1]
        print(f"B={Bsz} D={Dd} L={L} N={N}: ours {r['ours_us']} us {r['ours']} GB/s "
              f"({r['pct_of_floor']}% of floor {r['floor_us']} us), torch_scan "
              f"{r['peers_us']['torch_scan']} us ({r['speedup_vs_torch_scan']}x), "
              f"rel_err {err:.2e} (torch {peer_err:.2e}) [{r['variant']}]", flush=True)
        del u, delta, z, Bm, Cm, out, src, dst, ref
        torch.cuda.empty_cache()

    def table(f):
        f.write("Effective GB/s (u, delta, z, B, C, A, D, delta_bias read once, out written once); "
                "all measured in one run. Floor = max(bytes / copy, B*D*L*N exps / "
                f"({sms} SMs x 16/clk x {clock_mhz} MHz)).\n\n")
        f.write("| B | D | L | N | ours us | ours GB/s | floor us (bytes / exp) | % of floor | "
                "torch_scan GB/s | speedup | copy GB/s | rel_err | variant |\n")
        f.write("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            s = r["shape"]
            f.write(f"| {s['B']} | {s['D']} | {s['L']} | {s['N']} | {r['ours_us']} | {r['ours']} | "
                    f"{r['floor_us']} ({r['floor_bytes_us']} / {r['floor_exp_us']}) | "
                    f"{r['pct_of_floor']} | {r['peers']['torch_scan']} | "
                    f"{r['speedup_vs_torch_scan']}x | {r['peers']['copy']} | {r['rel_err']:.2e} | "
                    f"`{r['variant']}` |\n")

    ceilings = {
        "copy_TBps": round(max(r["peers"]["copy"] for r in rows) / 1e3, 3),
        "exp_per_clock_per_sm": EXP_PER_CLOCK_PER_SM,
        "sm_count": sms,
        "max_sm_clock_mhz": clock_mhz,
        "exp_Gps": round(exp_rate / 1e9, 1) if exp_rate else None,
    }
    stem = write_results(args, "selective_scan", name, rows, ceilings, "GBps", table,
                         floor="max(bytes / copy bandwidth measured on the same bytes, "
                               "B*D*L*N / (SMs * 16 * max SM clock))")
    print(f"wrote {stem}.json and .md")


if __name__ == "__main__":
    main()
