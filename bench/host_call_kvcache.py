"""Host time of a warm decoding call through flash_attn_with_kvcache (paged cache, Sq=1,
a launch-bound size), beside flash_attn_func's and flash_attn_varlen_func's, and checks
that warm calls leave nothing to collect and follow new cache lengths and offsets. On the
GPU machine:

    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
    AUTOTUNE_LIBRARY=$PWD/.device/libautotune.so python3 bench/host_call_kvcache.py

PKG=folder imports the package from there instead of python/ (an older copy, for a
before/after on one machine). Prints medians and p90 of 2000 single calls (the stream
synchronized every 50), a cProfile of 500 calls, the garbage-collector counts and the
error of a warm call with new lengths against a float32 reference.
"""
import cProfile
import gc
import os
import pstats
import sys
import time

sys.path.insert(0, os.environ.get("PKG", "python"))
import torch  # noqa: E402

import autotune  # noqa: E402

autotune.set_policy("heuristic")
dev = "cuda"
B, Hq, Hkv, D, page, ctx = 1, 8, 2, 128, 256, 256
kc = torch.randn(B * ctx // page, page, Hkv, D, device=dev, dtype=torch.bfloat16)
vc = torch.randn_like(kc)
table = torch.arange(B * ctx // page, dtype=torch.int32, device=dev).view(B, -1)
lens = torch.full((B,), ctx, device=dev, dtype=torch.int32)
q = torch.randn(B, 1, Hq, D, device=dev, dtype=torch.bfloat16)
k = torch.randn(B, 64, Hq, D, device=dev, dtype=torch.bfloat16)
calls = {
  "flash_attn_func": lambda: autotune.flash_attn_func(q, k, k),
  "with_kvcache": lambda: autotune.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens,
                                                          block_table=table),
}
for name, f in calls.items():
    for _ in range(50): f()
    torch.cuda.synchronize()
    ts = []
    for i in range(2000):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
        if i % 50 == 0: torch.cuda.synchronize()
    ts.sort()
    print(f"{name}: median {ts[len(ts) // 2] * 1e6:.1f} us host, "
          f"p90 {ts[int(len(ts) * .9)] * 1e6:.1f}")
pr = cProfile.Profile(); pr.enable()
for _ in range(500): calls["with_kvcache"]()
pr.disable(); torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(18)
f = calls["with_kvcache"]
for _ in range(10): f()
gc.collect(); c0, o0 = gc.get_count()[0], len(gc.get_objects())
for _ in range(1000): f()
c1, o1 = gc.get_count()[0], len(gc.get_objects())
print("kvcache warm: gen0 growth", c1 - c0, "objects left", o1 - o0)
# correctness of the warm path against a fresh runtime on new pointers and new lengths
lens2 = torch.full((B,), 100, device=dev, dtype=torch.int32)
o1 = autotune.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens2, block_table=table)
kk = kc.view(-1, Hkv, D)[:100].float(); vv = vc.view(-1, Hkv, D)[:100].float()
qs = q.view(Hkv, Hq // Hkv, D).float()
ref = torch.softmax(torch.einsum("hgd,khd->hgk", qs, kk) * D ** -0.5, -1)
ref = torch.einsum("hgk,khd->hgd", ref, vv).reshape(1, 1, Hq, D)
print("warm call with new lengths: max abs err", (o1.float() - ref).abs().max().item())
# varlen: two sequences of 40 and 24 tokens
tq = torch.randn(64, Hq, D, device=dev, dtype=torch.bfloat16)
cu = torch.tensor([0, 40, 64], device=dev, dtype=torch.int32)
fv = lambda: autotune.flash_attn_varlen_func(tq, tq, tq, cu, cu, 40, 40, causal=True)  # noqa: E731
for _ in range(50):
    fv()
torch.cuda.synchronize()
ts = []
for i in range(2000):
    t0 = time.perf_counter()
    fv()
    ts.append(time.perf_counter() - t0)
    if i % 50 == 0:
        torch.cuda.synchronize()
ts.sort()
print(f"flash_attn_varlen_func: median {ts[len(ts) // 2] * 1e6:.1f} us host, "
      f"p90 {ts[int(len(ts) * .9)] * 1e6:.1f}")
ov = fv()
ref = torch.cat([torch.nn.functional.scaled_dot_product_attention(
    tq[a:b].transpose(0, 1)[None], tq[a:b].transpose(0, 1)[None], tq[a:b].transpose(0, 1)[None],
    is_causal=True)[0].transpose(0, 1) for a, b in ((0, 40), (40, 64))])
print("varlen warm call: max abs err", (ov.float() - ref.float()).abs().max().item())
