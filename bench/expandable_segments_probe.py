# Tensors in PyTorch's expandable segments (memory mapped by cuMemMap in 20 MB chunks): the
# allocation checks must accept tensors spanning chunks. On the GPU machine:
# PYTHONPATH=python AUTOTUNE_LIBRARY=.device/libautotune.so python3 bench/expandable_segments_probe.py
import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
import ctypes
import torch
import autotune
cuda = ctypes.CDLL("libcuda.so.1")
def rng(t):
    start = ctypes.c_uint64(); size = ctypes.c_size_t()
    r = cuda.cuMemGetAddressRange_v2(ctypes.byref(start), ctypes.byref(size), ctypes.c_uint64(t.data_ptr()))
    return r, t.data_ptr() - start.value, size.value, t.numel() * t.element_size()
y = None
for n in (8, 64, 600):
    x = torch.randn(2, 4096, n * 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4, device="cuda")
    print("x MB", x.numel() * 2 >> 20, "driver range (rc, offset, size, bytes)", rng(x))
    try:
        y = autotune.causal_conv1d_fn(x, w, None, activation="silu"); torch.cuda.synchronize()
        print("  conv ok")
    except Exception as e:
        print("  conv FAILED", type(e).__name__, str(e)[:200])
    del x, y
q = torch.randn(8, 8192, 32, 128, device="cuda", dtype=torch.bfloat16)
print("q MB", q.numel() * 2 >> 20, rng(q))
try:
    o = autotune.flash_attn_func(q, q, q, causal=True); torch.cuda.synchronize(); print("  attn ok")
except Exception as e:
    print("  attn FAILED", type(e).__name__, str(e)[:200])
