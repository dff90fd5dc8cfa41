"""One op call, repeated, for a profiler to look at (Nsight Compute on the GPU machine).

    ncu --clock-control none --kernel-name regex:scan --launch-skip 3 --launch-count 1 \
        --section WarpStateStats --section SourceCounters \
        python3 bench/profile_call.py selective_scan "B=1,D=5120,L=2047" --policy heuristic

Inputs are random (never zeros); the call runs --repeat times so the profiler can skip
the first (compile and load) launches. Prints the variant the policy chose.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

import autotune  # noqa: E402


def parse_shape(text):
    shape = {}
    for item in text.split(","):
        key, value = item.split("=")
        shape[key.strip()] = value.strip()
    return shape


def dtype_of(shape):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
        shape.get("dtype", "bf16")]


def scan_call(shape):
    b, d, length, n = (int(shape[k]) for k in ("B", "D", "L", "N"))
    dt = dtype_of(shape)
    dev = "cuda"
    u = torch.randn(b, d, length, device=dev, dtype=dt)
    delta = (torch.rand(b, d, length, device=dev) * 0.1).to(dt)
    a = -torch.rand(d, n, device=dev) - 0.5
    bm = torch.randn(b, n, length, device=dev, dtype=dt)
    cm = torch.randn(b, n, length, device=dev, dtype=dt)
    dskip = torch.randn(d, device=dev)
    z = torch.randn(b, d, length, device=dev, dtype=dt)
    bias = torch.rand(d, device=dev) * 0.1
    return lambda: autotune.selective_scan_fn(u, delta, a, bm, cm, dskip, z=z, delta_bias=bias,
                                              delta_softplus=True)


def conv_call(shape):
    b, c, length, w = (int(shape[k]) for k in ("B", "C", "L", "W"))
    dt = dtype_of(shape)
    if shape.get("layout", "bcl") == "blc":  # channel-last: [B, L, C] memory
        x = torch.randn(b, length, c, device="cuda", dtype=dt).transpose(1, 2)
    else:
        x = torch.randn(b, c, length, device="cuda", dtype=dt)
    weight = torch.randn(c, w, device="cuda", dtype=dt)
    bias = torch.randn(c, device="cuda", dtype=dt)
    return lambda: autotune.causal_conv1d_fn(x, weight, bias, activation="silu")


def attention_call(shape):
    b, h, s, d = (int(shape[k]) for k in ("B", "H", "S", "D"))
    dt = dtype_of(shape)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(3))
    causal = shape.get("causal", "0") in ("1", "true")
    return lambda: autotune.flash_attn_func(q, k, v, causal=causal)


def decode_call(shape):
    """One decode step against a paged cache (pages shuffled, every sequence full)."""
    b, hq, hkv, ctx, d = (int(shape[k]) for k in ("B", "Hq", "Hkv", "ctx", "D"))
    page = int(shape.get("page", 256))
    dt = dtype_of(shape)
    per_seq = ctx // page
    kc = torch.randn(b * per_seq, page, hkv, d, device="cuda", dtype=dt)
    vc = torch.randn_like(kc)
    table = torch.randperm(b * per_seq).view(b, per_seq).to("cuda", torch.int32)
    lens = torch.full((b,), ctx, device="cuda", dtype=torch.int32)
    q = torch.randn(b, 1, hq, d, device="cuda", dtype=dt)
    return lambda: autotune.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens,
                                                    block_table=table)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("op", choices=["selective_scan", "causal_conv1d", "attention", "decode"])
    parser.add_argument("shape", help="k=v,... (attention: B,H,S,D,causal,dtype; decode: "
                        "B,Hq,Hkv,ctx,D,page,dtype)")
    parser.add_argument("--policy", default="heuristic")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    autotune.set_policy(args.policy)
    shape = parse_shape(args.shape)
    call = {"selective_scan": scan_call, "causal_conv1d": conv_call,
            "attention": attention_call, "decode": decode_call}[args.op](shape)
    for _ in range(args.repeat):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        call()
    end.record()
    torch.cuda.synchronize()
    print(f"{args.op} {args.shape} policy={args.policy}: {start.elapsed_time(end) / 20 * 1e3:.1f} us "
          f"a call (back to back, L2 warm)", flush=True)


if __name__ == "__main__":
    main()
