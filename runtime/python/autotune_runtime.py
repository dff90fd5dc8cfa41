"""Python bindings of autotune's runtime library over its C ABI (ctypes; no build
step, no Python-side JIT). Kernels run on PyTorch's current stream in the primary
CUDA context, so tensors' device pointers pass straight through.

    import autotune_runtime
    at = autotune_runtime.Runtime("build/libautotune.so")
    out = at.causal_conv1d(x, weight, bias, silu=True)
    o = at.attention(q, k, v, causal=True)              # [B, S, H, D] or layout="bhsd"
    y = at.selective_scan(u, delta, A, B, C, D=D, z=z, delta_bias=bias)

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


I64x2 = ctypes.c_int64 * 2
I64x3 = ctypes.c_int64 * 3


class AttentionArgs(ctypes.Structure):
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("batch", ctypes.c_int64), ("heads_q", ctypes.c_int64),
                ("heads_kv", ctypes.c_int64), ("seq_q", ctypes.c_int64),
                ("seq_k", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("dtype", ctypes.c_int32), ("causal", ctypes.c_int32),
                ("layout_bhsd", ctypes.c_int32), ("scale", ctypes.c_double),
                ("q_strides", I64x3), ("k_strides", I64x3), ("v_strides", I64x3),
                ("o_strides", I64x3), ("workspace", ctypes.c_void_p),
                ("workspace_bytes", ctypes.c_uint64)]


class SelectiveScanArgs(ctypes.Structure):
    _fields_ = [("u", ctypes.c_void_p), ("delta", ctypes.c_void_p), ("A", ctypes.c_void_p),
                ("B", ctypes.c_void_p), ("C", ctypes.c_void_p), ("D", ctypes.c_void_p),
                ("z", ctypes.c_void_p), ("delta_bias", ctypes.c_void_p), ("out", ctypes.c_void_p),
                ("last_state", ctypes.c_void_p),
                ("batch", ctypes.c_int64), ("dim", ctypes.c_int64), ("length", ctypes.c_int64),
                ("dstate", ctypes.c_int64), ("groups", ctypes.c_int64),
                ("dtype", ctypes.c_int32), ("variable_bc", ctypes.c_int32),
                ("delta_softplus", ctypes.c_int32),
                ("u_strides", I64x2), ("delta_strides", I64x2), ("z_strides", I64x2),
                ("out_strides", I64x2), ("b_strides", I64x3), ("c_strides", I64x3)]


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
        for op, struct in (("attention", AttentionArgs), ("selective_scan", SelectiveScanArgs)):
            getattr(lib, f"autotune_{op}").argtypes = [ctypes.c_void_p, ctypes.POINTER(struct),
                                                       ctypes.c_void_p]
            getattr(lib, f"autotune_{op}_variant").argtypes = [
                ctypes.c_void_p, ctypes.POINTER(struct), ctypes.c_char_p, ctypes.c_uint64]
        lib.autotune_attention_workspace_size.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(AttentionArgs), ctypes.POINTER(ctypes.c_uint64)]
        self.workspaces = {}  # (device, bytes) -> zero-filled tensor, kept for later calls
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
        return self.variant("causal_conv1d", args)

    def variant(self, op, args):
        """'tuned <variant>' or 'default <variant>': what a call of op with args runs."""
        buf = ctypes.create_string_buffer(512)
        self.check(getattr(self.lib, f"autotune_{op}_variant")(self.handle, ctypes.byref(args),
                                                                buf, len(buf)))
        return buf.value.decode()

    def attention_args(self, q, k, v, o, lse=None, causal=False, scale=None, layout="bshd"):
        """The C struct for a call. q, o: [B, Sq, Hq, D] (layout "bshd") or [B, Hq, Sq, D]
        ("bhsd"); k, v likewise with Hkv; any strides with a contiguous last dimension.
        lse: fp32 [B, Hq, Sq] contiguous or None."""
        bhsd = layout == "bhsd"
        if layout not in ("bshd", "bhsd"):
            raise ValueError(f"autotune: layout must be 'bshd' or 'bhsd', not {layout!r}")

        def dims(t):  # (B, H, S, D) and (batch, head, seq) strides
            if bhsd:
                return t.shape, (t.stride(0), t.stride(1), t.stride(2))
            B, S, H, D = t.shape
            return (B, H, S, D), (t.stride(0), t.stride(2), t.stride(1))
        (B, Hq, Sq, D), qs = dims(q)
        (_, Hkv, Sk, _), ks = dims(k)
        _, vs = dims(v)
        _, os_ = dims(o)
        return AttentionArgs(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), _ptr(lse),
                             B, Hq, Hkv, Sq, Sk, D, dtype_code(q.dtype), int(causal), int(bhsd),
                             float(scale or 0.0), I64x3(*qs), I64x3(*ks), I64x3(*vs),
                             I64x3(*os_), None, 0)

    def attention(self, q, k, v, causal=False, scale=None, layout="bshd", return_lse=False,
                  out=None):
        """softmax(scale Q K^T + mask) V (scale None: 1/sqrt(D)); with return_lse, also the
        fp32 log-sum-exp [B, Hq, Sq]. A split-KV variant's workspace is allocated,
        zero-filled and kept by this object."""
        import torch
        if out is None:
            out = torch.empty(q.shape, device=q.device, dtype=q.dtype)
        lse = None
        if return_lse:
            B, Hq, Sq = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bhsd" else \
                (q.shape[0], q.shape[2], q.shape[1])
            lse = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32)
        args = self.attention_args(q, k, v, out, lse, causal, scale, layout)
        need = ctypes.c_uint64()
        self.check(self.lib.autotune_attention_workspace_size(self.handle, ctypes.byref(args),
                                                              ctypes.byref(need)))
        if need.value:
            key = (q.device, need.value)
            if key not in self.workspaces:
                self.workspaces[key] = torch.zeros(need.value, device=q.device,
                                                   dtype=torch.uint8)
            args.workspace = self.workspaces[key].data_ptr()
            args.workspace_bytes = need.value
        self.check(self.lib.autotune_attention(self.handle, ctypes.byref(args),
                                               torch.cuda.current_stream().cuda_stream))
        return (out, lse) if return_lse else out

    def selective_scan_args(self, u, delta, A, B, C, out, D=None, z=None, delta_bias=None,
                            delta_softplus=True, last_state=None):
        """The C struct for a call. u, delta, z, out: [B, D, L] (contiguous last dim); A fp32
        [D, N]; B, C: [B, G, N, L] of u's dtype (variable) or fp32 [D, N] (fixed)."""
        Bn, Dn, L = u.shape
        variable = B.dim() == 4
        N = B.shape[2] if variable else B.shape[1]
        G = B.shape[1] if variable else 1
        bs = (B.stride(0), B.stride(1), B.stride(2)) if variable else (-1, -1, -1)
        cs = (C.stride(0), C.stride(1), C.stride(2)) if variable else (-1, -1, -1)
        zs = (z.stride(0), z.stride(1)) if z is not None else (-1, -1)
        return SelectiveScanArgs(u.data_ptr(), delta.data_ptr(), A.data_ptr(), B.data_ptr(),
                                 C.data_ptr(), _ptr(D), _ptr(z), _ptr(delta_bias),
                                 out.data_ptr(), _ptr(last_state), Bn, Dn, L, N, G,
                                 dtype_code(u.dtype), int(variable), int(delta_softplus),
                                 I64x2(u.stride(0), u.stride(1)),
                                 I64x2(delta.stride(0), delta.stride(1)), I64x2(*zs),
                                 I64x2(out.stride(0), out.stride(1)), I64x3(*bs), I64x3(*cs))

    def selective_scan(self, u, delta, A, B, C, D=None, z=None, delta_bias=None,
                       delta_softplus=True, return_last_state=False, out=None):
        """Mamba-1 selective scan forward; with return_last_state also h_L fp32 [B, D, N]."""
        import torch
        if out is None:
            out = torch.empty(u.shape, device=u.device, dtype=u.dtype)
        last = None
        if return_last_state:
            N = B.shape[2] if B.dim() == 4 else B.shape[1]
            last = torch.empty((u.shape[0], u.shape[1], N), device=u.device,
                               dtype=torch.float32)
        args = self.selective_scan_args(u, delta, A, B, C, out, D, z, delta_bias,
                                        delta_softplus, last)
        self.check(self.lib.autotune_selective_scan(self.handle, ctypes.byref(args),
                                                    torch.cuda.current_stream().cuda_stream))
        return (out, last) if return_last_state else out
