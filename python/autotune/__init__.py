"""autotune for PyTorch: tuned CUDA kernels for attention, causal_conv1d and the Mamba-1
selective scan, run through libautotune.so's C ABI (NVRTC-compiled kernels; nothing in
this package is compiled, against torch or anything else).

    import autotune
    out = autotune.flash_attn_func(q, k, v, causal=True)            # flash-attn 2
    y = autotune.causal_conv1d_fn(x, weight, bias, activation="silu")  # causal-conv1d
    y = autotune.causal_conv1d_update(x_t, conv_state, weight, bias, "silu")  # a decode step
    y = autotune.selective_scan_fn(u, dt, A, B, C, D, z=z, delta_bias=dt_bias,
                                   delta_softplus=True)             # mamba-ssm
    y = autotune.mamba_inner_fn(xz, conv1d_weight, conv1d_bias, x_proj_weight,
                                dt_proj_weight, out_proj_weight, out_proj_bias, A,
                                D=D, delta_bias=dt_bias)            # its Mamba block
    y = autotune.selective_state_update(ssm_state, x_t, dt, A, B, C, D, z=z, dt_bias=dt_bias,
                                        dt_softplus=True)           # its decoding step
    torch.ops.autotune.attention(q, k, v, causal=True)              # the registered ops

    autotune.set_database("tuning.db")   # else $AUTOTUNE_DB, else the default path
    autotune.set_policy("nearest")       # else $AUTOTUNE_POLICY: nearest|default|error|pin:...

libautotune.so is found at first use ($AUTOTUNE_LIBRARY, beside the package, the
repository's build/, the loader's path); importing never needs it. Without torch, the
package still imports (Runtime's loader, configuration); the torch entry points then
raise ModuleNotFoundError when called.
"""
from ._config import POLICIES, set_database, set_policy
from ._library import LibraryNotFoundError
from ._library import find as find_library
from ._runtime import AutotuneError, Runtime

__version__ = "0.1.0"

__all__ = [
    "AutotuneError", "LibraryNotFoundError", "POLICIES", "Runtime", "causal_conv1d_fn",
    "causal_conv1d_update", "causal_conv1d_varlen_states",
    "find_library", "flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func", "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache",
    "get_runtime", "mamba_inner_fn", "selective_scan_fn", "selective_state_update",
    "set_database", "set_policy",
    "torch_available",
]

try:
    import torch as _torch
except ImportError as _error:  # the torch-free parts stay usable
    _torch = None
    _torch_error = _error

torch_available = _torch is not None

if torch_available:
    from ._dropin import (causal_conv1d_fn, causal_conv1d_update, causal_conv1d_varlen_states,
                          flash_attn_func,
                          flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                          flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                          flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache,
                          mamba_inner_fn, selective_scan_fn, selective_state_update)
    from ._ops import get_runtime
else:
    def _needs_torch(name):
        def missing(*args, **kwargs):
            raise ModuleNotFoundError(f"autotune.{name} needs PyTorch, which does not import "
                                      f"here ({_torch_error})")
        missing.__name__ = missing.__qualname__ = name
        return missing

    causal_conv1d_fn = _needs_torch("causal_conv1d_fn")
    causal_conv1d_update = _needs_torch("causal_conv1d_update")
    causal_conv1d_varlen_states = _needs_torch("causal_conv1d_varlen_states")
    selective_scan_fn = _needs_torch("selective_scan_fn")
    mamba_inner_fn = _needs_torch("mamba_inner_fn")
    selective_state_update = _needs_torch("selective_state_update")
    flash_attn_func = _needs_torch("flash_attn_func")
    flash_attn_qkvpacked_func = _needs_torch("flash_attn_qkvpacked_func")
    flash_attn_kvpacked_func = _needs_torch("flash_attn_kvpacked_func")
    flash_attn_varlen_func = _needs_torch("flash_attn_varlen_func")
    flash_attn_varlen_qkvpacked_func = _needs_torch("flash_attn_varlen_qkvpacked_func")
    flash_attn_varlen_kvpacked_func = _needs_torch("flash_attn_varlen_kvpacked_func")
    flash_attn_with_kvcache = _needs_torch("flash_attn_with_kvcache")
    get_runtime = _needs_torch("get_runtime")
