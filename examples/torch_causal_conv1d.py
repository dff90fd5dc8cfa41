#!/usr/bin/env python3
"""PyTorch calling autotune's runtime through the C ABI (libautotune.so), no
Python-side JIT: the tuned winner for each shape runs on PyTorch's own stream, in
the same (primary) CUDA context.

    autotune --arch auto --op causal_conv1d --shape "B=2,C=512,L=1000,W=4,dtype=bf16,silu=1"
    python3 examples/torch_causal_conv1d.py --lib build/libautotune.so
"""
import argparse
import ctypes

import torch
import torch.nn.functional as F

_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


class _ConvArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("weight", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("out", ctypes.c_void_p), ("batch", ctypes.c_int64), ("channels", ctypes.c_int64),
                ("length", ctypes.c_int64), ("width", ctypes.c_int64),
                ("x_dtype", ctypes.c_int32), ("weight_dtype", ctypes.c_int32),
                ("silu", ctypes.c_int32), ("x_batch_stride", ctypes.c_int64),
                ("x_channel_stride", ctypes.c_int64), ("out_batch_stride", ctypes.c_int64),
                ("out_channel_stride", ctypes.c_int64),
                ("initial_states", ctypes.c_void_p), ("final_states", ctypes.c_void_p)]


class Autotune:
    def __init__(self, lib_path, database=None):
        self._lib = ctypes.CDLL(lib_path)
        self._lib.autotune_last_error.restype = ctypes.c_char_p
        self._lib.autotune_causal_conv1d.argtypes = [ctypes.c_void_p, ctypes.POINTER(_ConvArgs),
                                                     ctypes.c_void_p]
        self._rt = ctypes.c_void_p()
        self._check(self._lib.autotune_runtime_create(
            database.encode() if database else None, 0, ctypes.byref(self._rt)))

    def _check(self, rc):
        if rc != 0:
            raise RuntimeError(self._lib.autotune_last_error().decode())

    def causal_conv1d(self, x, weight, bias=None, silu=True):
        """x: [B, C, L] (last dim contiguous), weight: [C, W] contiguous, bias: [C] or None."""
        assert x.is_cuda and x.stride(2) == 1 and weight.is_contiguous()
        B, C, L = x.shape
        out = torch.empty((B, C, L), device=x.device, dtype=x.dtype)
        args = _ConvArgs(x.data_ptr(), weight.data_ptr(), bias.data_ptr() if bias is not None else None,
                         out.data_ptr(), B, C, L, weight.shape[1], _DTYPES[x.dtype],
                         _DTYPES[weight.dtype], int(silu), x.stride(0), x.stride(1),
                         out.stride(0), out.stride(1))
        self._check(self._lib.autotune_causal_conv1d(self._rt, ctypes.byref(args),
                                                     torch.cuda.current_stream().cuda_stream))
        return out

    def __del__(self):
        if getattr(self, "_rt", None):
            self._lib.autotune_runtime_destroy(self._rt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libautotune.so")
    ap.add_argument("--db", default=None)
    args = ap.parse_args()
    at = Autotune(args.lib, args.db)
    x = torch.randn(2, 512, 1000, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, 4, device="cuda", dtype=torch.bfloat16) * 0.5
    b = torch.randn(512, device="cuda", dtype=torch.bfloat16) * 0.5
    ours = at.causal_conv1d(x, w, b, silu=True)
    ref = F.silu(F.conv1d(x.double(), w.double().unsqueeze(1), b.double(), padding=3, groups=512)[..., :1000])
    err = ((ours.double() - ref).norm() / ref.norm()).item()
    print(f"relative error vs float64 torch: {err:.2e}")
    assert err < 1e-2


if __name__ == "__main__":
    main()
