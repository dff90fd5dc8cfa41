"""Python bindings of autotune's runtime library over its C ABI (ctypes; no build
step, no Python-side JIT). Kernels run on PyTorch's current stream in the primary
CUDA context, so tensors' device pointers pass straight through.

    import autotune_runtime
    at = autotune_runtime.Runtime("build/libautotune.so")
    out = at.causal_conv1d(x, weight, bias, silu=True)

Mirrors runtime/dispatch/autotune.h; keep the two in step.
"""
import ctypes

AUTOTUNE_FP32, AUTOTUNE_FP16, AUTOTUNE_BF16 = 0, 1, 2


class CausalConv1dArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("weight", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("out", ctypes.c_void_p), ("batch", ctypes.c_int64), ("channels", ctypes.c_int64),
                ("length", ctypes.c_int64), ("width", ctypes.c_int64),
                ("x_dtype", ctypes.c_int32), ("weight_dtype", ctypes.c_int32),
                ("silu", ctypes.c_int32), ("x_batch_stride", ctypes.c_int64),
                ("x_channel_stride", ctypes.c_int64), ("out_batch_stride", ctypes.c_int64),
                ("out_channel_stride", ctypes.c_int64),
                ("initial_states", ctypes.c_void_p), ("final_states", ctypes.c_void_p)]


def dtype_code(dtype):
    import torch
    codes = {torch.float32: AUTOTUNE_FP32, torch.float16: AUTOTUNE_FP16,
             torch.bfloat16: AUTOTUNE_BF16}
    if dtype not in codes:
        raise TypeError(f"autotune: unsupported dtype {dtype}")
    return codes[dtype]


def _ptr(t):
    return t.data_ptr() if t is not None else None


class AutotuneError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"{message} (status {status})")
        self.status = status


class Runtime:
    """One runtime: the tuning database (path, or the default one) opened read-only."""

    def __init__(self, library, database=None, require_tuned=False):
        self.lib = ctypes.CDLL(library)
        lib = self.lib
        lib.autotune_runtime_create.argtypes = [ctypes.c_char_p, ctypes.c_int,
                                                ctypes.POINTER(ctypes.c_void_p)]
        lib.autotune_runtime_destroy.argtypes = [ctypes.c_void_p]
        lib.autotune_last_error.restype = ctypes.c_char_p
        lib.autotune_causal_conv1d.argtypes = [ctypes.c_void_p, ctypes.POINTER(CausalConv1dArgs),
                                               ctypes.c_void_p]
        lib.autotune_causal_conv1d_variant.argtypes = [ctypes.c_void_p,
                                                       ctypes.POINTER(CausalConv1dArgs),
                                                       ctypes.c_char_p, ctypes.c_uint64]
        self.handle = ctypes.c_void_p()
        self.check(lib.autotune_runtime_create(database.encode() if database else None,
                                               int(require_tuned), ctypes.byref(self.handle)))

    def check(self, status):
        if status != 0:
            raise AutotuneError(status, self.lib.autotune_last_error().decode())

    def __del__(self):
        if getattr(self, "handle", None):
            self.lib.autotune_runtime_destroy(self.handle)
            self.handle = None

    def causal_conv1d_args(self, x, weight, bias=None, out=None, silu=True,
                           initial_states=None, final_states=None):
        """The C struct for a call; x/out [B, C, L] with a contiguous last dimension,
        weight [C, W] contiguous, bias [C], states [B, C, W-1] contiguous."""
        B, C, L = x.shape
        return CausalConv1dArgs(x.data_ptr(), weight.data_ptr(), _ptr(bias), out.data_ptr(),
                                B, C, L, weight.shape[1], dtype_code(x.dtype),
                                dtype_code(weight.dtype), int(silu), x.stride(0), x.stride(1),
                                out.stride(0), out.stride(1), _ptr(initial_states),
                                _ptr(final_states))

    def causal_conv1d(self, x, weight, bias=None, silu=True, initial_states=None,
                      final_states=None, out=None):
        import torch
        if out is None:
            out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        args = self.causal_conv1d_args(x, weight, bias, out, silu, initial_states, final_states)
        self.check(self.lib.autotune_causal_conv1d(self.handle, ctypes.byref(args),
                                                   torch.cuda.current_stream().cuda_stream))
        return out

    def causal_conv1d_variant(self, args):
        """'tuned <variant>' or 'default <variant>': what a call with these args runs."""
        buf = ctypes.create_string_buffer(512)
        self.check(self.lib.autotune_causal_conv1d_variant(self.handle, ctypes.byref(args), buf,
                                                           len(buf)))
        return buf.value.decode()
