"""The ctypes bindings of libautotune.so, under the module name the bench/ scripts,
examples/torch_*.py and tests/check_python_abi.py import (runtime/python on sys.path).
The code lives in the Python package, python/autotune/_runtime.py; this module re-exports
it from the checkout it sits in.

    import autotune_runtime
    at = autotune_runtime.Runtime("build/libautotune.so")   # or Runtime(): found as
    out = at.causal_conv1d(x, weight, bias, silu=True)      # autotune._library says
    o = at.attention(q, k, v, causal=True)                  # [B, S, H, D] or layout="bhsd"
    y = at.selective_scan(u, delta, A, B, C, D=D, z=z, delta_bias=bias)

For PyTorch models, use the package itself: `import autotune` (registered torch ops,
flash-attn / causal-conv1d / mamba-ssm compatible entry points).
"""
import os
import sys

_PACKAGE_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "..", "..", "python"))
if _PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, _PACKAGE_ROOT)

from autotune._runtime import (AUTOTUNE_BF16, AUTOTUNE_FP16, AUTOTUNE_FP32,  # noqa: E402
                               MAX_DIMS, ArgsLayout, AutotuneError, Library, Runtime,
                               _current_stream, attention_features, attention_fields,
                               dtype_code, tensor_fields)

__all__ = ["AUTOTUNE_BF16", "AUTOTUNE_FP16", "AUTOTUNE_FP32", "MAX_DIMS", "ArgsLayout",
           "AutotuneError", "Library", "Runtime", "_current_stream", "attention_features",
           "attention_fields", "dtype_code", "tensor_fields"]
