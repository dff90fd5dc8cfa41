# An untuned paged varlen prefill through the drop-in (flash_attn_varlen_func with block_table):
# error per sequence against fp32 SDPA and the time of a warm call. On the GPU machine:
# PYTHONPATH=python AUTOTUNE_LIBRARY=.device/libautotune.so python3 bench/varlen_paged_probe.py
import torch, autotune
dev = 'cuda'
torch.manual_seed(0)
lens = [900, 3000, 17, 2048, 4096, 1500, 2600, 2223]
B = len(lens); Hq, Hkv, D, page = 32, 8, 128, 256
cu = torch.tensor([0] + lens, device=dev).cumsum(0).int()
q = torch.randn(sum(lens), Hq, D, device=dev, dtype=torch.bfloat16)
per = -(-max(lens) // page); nb = B * per + 5
kp = torch.randn(nb, page, Hkv, D, device=dev, dtype=torch.bfloat16); vp = torch.randn_like(kp)
bt = torch.randperm(nb, device=dev)[:B * per].int().view(B, per)
f = lambda: autotune.flash_attn_varlen_func(q, kp, vp, cu, cu, max(lens), max(lens), causal=True, block_table=bt)
out = f()
err = 0
for b, n in enumerate(lens):
    k = kp[bt[b].long()].reshape(-1, Hkv, D)[:n]; v = vp[bt[b].long()].reshape(-1, Hkv, D)[:n]
    qq = q[cu[b]:cu[b + 1]].float().transpose(0, 1)
    kk = k.float().repeat_interleave(Hq // Hkv, 1).transpose(0, 1)
    vv = v.float().repeat_interleave(Hq // Hkv, 1).transpose(0, 1)
    r = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=True).transpose(0, 1)
    err = max(err, (out[cu[b]:cu[b + 1]].float() - r).abs().max().item())
print('max abs err vs fp32 SDPA per sequence', err)
for _ in range(3): f()
e0 = torch.cuda.Event(True); e1 = torch.cuda.Event(True); e0.record()
for _ in range(20): f()
e1.record(); torch.cuda.synchronize(); print('untuned call us', e0.elapsed_time(e1) / 20 * 1000)
