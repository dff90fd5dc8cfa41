"""autotune's kernels as PyTorch operators: torch.ops.autotune.* registered with
torch.library (define + a CUDA implementation + a fake implementation), so that
torch.compile(fullgraph=True) traces them as single nodes and CUDA graphs capture them.

    torch.ops.autotune.causal_conv1d(x, weight, bias=None, initial_states=None, silu=False)
    torch.ops.autotune.causal_conv1d_with_states(...)            -> (out, final_states)
    torch.ops.autotune.selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None,
                                      delta_softplus=False)
    torch.ops.autotune.selective_scan_with_state(...)            -> (out, last_state)
    torch.ops.autotune.attention(q, k, v, causal=False, softmax_scale=None)   # [B, S, H, D]
    torch.ops.autotune.attention_with_lse(...)                   -> (out, lse)

The operators are functional (they allocate and return their outputs; nothing is
mutated) and strict: every tensor goes to the C ABI as it is, and the library refuses
what its kernels cannot read (a strided last dimension, a non-contiguous weight, a
wrong dtype or size), naming the argument. The drop-in functions (autotune.
causal_conv1d_fn, ...) make the copies the peers make before calling them.

Registration uses torch.library.Library define/impl rather than custom_op: a call
then crosses the dispatcher into Python once, not once per dispatch key. There is no
autograd formula: the drop-ins raise on backward (see _dropin.py).

Warm path of a call: one dict lookup for the device's runtime, the output allocations,
the tensors' (pointer, dtype, shape, strides) packed into a reused per-thread buffer,
one ctypes call on torch's current raw stream. A split-KV attention workspace is found
by a dict lookup of the call's signature.
"""
import ctypes
import threading

import torch

from . import _config
from ._runtime import Runtime, attention_fields, tensor_fields


def _no_cuda(device):
    raise RuntimeError("autotune: this torch is built without CUDA")


# The raw CUstream of torch's current stream on a device (absent from CPU-only builds).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _no_cuda
_contiguous = torch.contiguous_format
_f32 = torch.float32


class _Device:
    """What a CUDA device's calls share: its runtime (the database and policy of the
    time it was created), the ctypes entry points, and the attention workspaces."""

    def __init__(self, index):
        self.index = index
        self.rt = Runtime(None, _config.database(), policy=_config.policy(), device=index)
        lib = self.rt.lib
        self.handle = self.rt.handle
        self.conv = lib.autotune_causal_conv1d
        self.attn = lib.autotune_attention
        self.scan = lib.autotune_selective_scan
        self.pack = self.rt._pack_call
        self.check = self.rt.check
        self.workspace = {}  # attention call signature -> (pointer, bytes) or (0, 0)
        self.buffers = {}  # bytes -> the zero-filled uint8 tensor behind those pointers


_devices = {}
_retired = []  # runtimes of an earlier database/policy: kept, their kernels stay loaded
_lock = threading.Lock()


def _device(index, t, what):
    """The state of CUDA device `index` (t, named `what`, is the tensor on it; None when
    the device was asked for by number), created on its first call."""
    if index is None or index < 0:
        where = f"{what} is on {t.device}" if t is not None else f"device {index} was asked for"
        raise ValueError(f"autotune: {where}; autotune's kernels take CUDA tensors")
    with _lock:
        st = _devices.get(index)
        if st is None:
            st = _devices[index] = _Device(index)
    return st


def get_runtime(device=0):
    """The Runtime (autotune.Runtime) that serves CUDA device `device` (an index, "cuda:N"
    or a torch.device), for variant queries; created on first use with the current
    database and policy."""
    if not isinstance(device, int):
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"autotune: {device} is not a CUDA device")
        device = device.index if device.index is not None else torch.cuda.current_device()
    st = _devices.get(device) or _device(device, None, "device")
    return st.rt


def _retire():
    with _lock:
        _retired.extend(_devices.values())
        _devices.clear()


_config.on_change(_retire)


# ---- launches: tensors straight to the C ABI -------------------------------------------
def _conv_launch(x, weight, bias, initial_states, out, final_states, silu):
    dev = x.get_device()
    st = _devices.get(dev) or _device(dev, x, "x")
    buf = st.pack("causal_conv1d", *tensor_fields(x, "x"), *tensor_fields(weight, "weight"),
                  *tensor_fields(bias, "bias"), *tensor_fields(initial_states, "initial_states"),
                  *tensor_fields(out, "out"), *tensor_fields(final_states, "final_states"),
                  1 if silu else 0)
    status = st.conv(st.handle, buf, _raw_stream(dev))
    if status:
        st.check(status)


def _scan_launch(u, delta, A, B, C, D, z, delta_bias, out, last_state, delta_softplus):
    dev = u.get_device()
    st = _devices.get(dev) or _device(dev, u, "u")
    buf = st.pack("selective_scan", *tensor_fields(u, "u"), *tensor_fields(delta, "delta"),
                  *tensor_fields(A, "A"), *tensor_fields(B, "B"), *tensor_fields(C, "C"),
                  *tensor_fields(D, "D"), *tensor_fields(z, "z"),
                  *tensor_fields(delta_bias, "delta_bias"), *tensor_fields(out, "out"),
                  *tensor_fields(last_state, "last_state"), 1 if delta_softplus else 0)
    status = st.scan(st.handle, buf, _raw_stream(dev))
    if status:
        st.check(status)


def _attn_launch(q, k, v, o, lse, causal, scale):
    dev = q.get_device()
    st = _devices.get(dev) or _device(dev, q, "q")
    if scale is not None and not scale > 0:
        raise ValueError(f"autotune: softmax_scale must be positive or None (1/sqrt(headdim)), "
                         f"not {scale}")
    fields = (*attention_fields(q, "q"), *attention_fields(k, "k"), *attention_fields(v, "v"),
              *attention_fields(o, "o"), *tensor_fields(lse, "lse"), 1 if causal else 0,
              scale or 0.0)
    # What the library's call signature holds (sizes, dtype, causal, lse, q's layout),
    # as far as it decides the variant and so the workspace.
    key = (q.shape, k.shape, q.stride(), q.dtype, bool(causal), lse is None)
    ws = st.workspace.get(key)
    if ws is None:
        ws = _attention_workspace(st, key, fields, q)
    buf = st.pack("attention", *fields, *ws)
    status = st.attn(st.handle, buf, _raw_stream(dev))
    if status:
        st.check(status)


def _attention_workspace(st, key, fields, q):
    """First call of a signature: the variant's workspace (0 bytes unless it splits the
    keys), zero-filled once and shared by later calls of any signature needing as many
    bytes (each call leaves it zeroed for the next)."""
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            "autotune: the first attention call of this signature (shapes, q's layout, dtype, "
            "causal, lse) is inside CUDA graph capture; run it once eagerly before capturing "
            "(torch.cuda.graphs' warm-up): the first call resolves the variant, may compile it, "
            "and allocates a split-KV variant's workspace, none of which may happen in a graph")
    args = st.rt.pack("attention", *fields, 0, 0)
    n = ctypes.c_uint64()
    st.check(st.rt.lib.autotune_attention_workspace_size(st.handle, args, ctypes.byref(n)))
    need = n.value
    ws = (0, 0)
    if need:
        buf = st.buffers.get(need)
        if buf is None:
            buf = st.buffers[need] = torch.zeros(need, dtype=torch.uint8, device=q.device)
        ws = (buf.data_ptr(), need)
    st.workspace[key] = ws
    return ws


# ---- output shapes (shared by the real and the fake implementations) ----------------------
def _states_shape(x, weight):
    if x.dim() != 3 or weight.dim() != 2:
        raise ValueError(f"autotune: x must be [batch, channels, length] and weight [channels, "
                         f"width], not {list(x.shape)} and {list(weight.shape)}")
    if not 2 <= weight.shape[1] <= 4:
        raise ValueError(f"autotune: weight has width {weight.shape[1]}; expected 2, 3 or 4")
    return (x.shape[0], x.shape[1], weight.shape[1] - 1)


def _last_state_shape(u, A):
    if u.dim() != 3 or A.dim() != 2:
        raise ValueError(f"autotune: u must be [batch, dim, length] and A [dim, dstate], not "
                         f"{list(u.shape)} and {list(A.shape)}")
    return (u.shape[0], u.shape[1], A.shape[1])


def _lse_shape(q):
    if q.dim() != 4:
        raise ValueError(f"autotune: q must be [batch, seqlen, heads, headdim], not "
                         f"{list(q.shape)}")
    return (q.shape[0], q.shape[2], q.shape[1])


# ---- CUDA implementations -----------------------------------------------------------------
def causal_conv1d(x, weight, bias=None, initial_states=None, silu=False):
    out = torch.empty_like(x, memory_format=_contiguous)
    _conv_launch(x, weight, bias, initial_states, out, None, silu)
    return out


def causal_conv1d_with_states(x, weight, bias=None, initial_states=None, silu=False):
    out = torch.empty_like(x, memory_format=_contiguous)
    final = x.new_empty(_states_shape(x, weight))
    _conv_launch(x, weight, bias, initial_states, out, final, silu)
    return out, final


def selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    out = torch.empty_like(u, memory_format=_contiguous)
    _scan_launch(u, delta, A, B, C, D, z, delta_bias, out, None, delta_softplus)
    return out


def selective_scan_with_state(u, delta, A, B, C, D=None, z=None, delta_bias=None,
                              delta_softplus=False):
    out = torch.empty_like(u, memory_format=_contiguous)
    last = u.new_empty(_last_state_shape(u, A), dtype=_f32)
    _scan_launch(u, delta, A, B, C, D, z, delta_bias, out, last, delta_softplus)
    return out, last


def attention(q, k, v, causal=False, softmax_scale=None):
    out = torch.empty_like(q, memory_format=_contiguous)
    _attn_launch(q, k, v, out, None, causal, softmax_scale)
    return out


def attention_with_lse(q, k, v, causal=False, softmax_scale=None):
    out = torch.empty_like(q, memory_format=_contiguous)
    lse = q.new_empty(_lse_shape(q), dtype=_f32)
    _attn_launch(q, k, v, out, lse, causal, softmax_scale)
    return out, lse


# ---- fake implementations: outputs of the right shape, dtype, device and strides ----------
def _conv_fake(x, weight, bias=None, initial_states=None, silu=False):
    return torch.empty_like(x, memory_format=_contiguous)


def _conv_states_fake(x, weight, bias=None, initial_states=None, silu=False):
    return (torch.empty_like(x, memory_format=_contiguous), x.new_empty(_states_shape(x, weight)))


def _scan_fake(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    return torch.empty_like(u, memory_format=_contiguous)


def _scan_state_fake(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    return (torch.empty_like(u, memory_format=_contiguous),
            u.new_empty(_last_state_shape(u, A), dtype=_f32))


def _attention_fake(q, k, v, causal=False, softmax_scale=None):
    return torch.empty_like(q, memory_format=_contiguous)


def _attention_lse_fake(q, k, v, causal=False, softmax_scale=None):
    return (torch.empty_like(q, memory_format=_contiguous),
            q.new_empty(_lse_shape(q), dtype=_f32))


# ---- registration ---------------------------------------------------------------------------
_CONV_ARGS = "Tensor x, Tensor weight, Tensor? bias=None, Tensor? initial_states=None, " \
             "bool silu=False"
_SCAN_ARGS = "Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D=None, " \
             "Tensor? z=None, Tensor? delta_bias=None, bool delta_softplus=False"
_ATTN_ARGS = "Tensor q, Tensor k, Tensor v, bool causal=False, float? softmax_scale=None"

# name: (arguments, returns, CUDA implementation, fake implementation)
OPS = {
    "causal_conv1d": (_CONV_ARGS, "Tensor", causal_conv1d, _conv_fake),
    "causal_conv1d_with_states": (_CONV_ARGS, "(Tensor, Tensor)", causal_conv1d_with_states,
                                  _conv_states_fake),
    "selective_scan": (_SCAN_ARGS, "Tensor", selective_scan, _scan_fake),
    "selective_scan_with_state": (_SCAN_ARGS, "(Tensor, Tensor)", selective_scan_with_state,
                                  _scan_state_fake),
    "attention": (_ATTN_ARGS, "Tensor", attention, _attention_fake),
    "attention_with_lse": (_ATTN_ARGS, "(Tensor, Tensor)", attention_with_lse,
                           _attention_lse_fake),
}


def _refuse_device(name, arg_names):
    """The implementation for CPU tensors: an error naming the first tensor not on CUDA
    (the dispatcher would otherwise say only that the op has no CPU kernel)."""
    def refuse(*args):
        for arg_name, a in zip(arg_names, args):
            if isinstance(a, torch.Tensor) and not a.is_cuda:
                raise ValueError(f"autotune::{name}: {arg_name} is on {a.device}; autotune's "
                                 "kernels take CUDA tensors")
        raise ValueError(f"autotune::{name}: every tensor must be a CUDA tensor")
    return refuse


# needs_fixed_stride_order: inductor passes the inputs with the strides they had when
# traced (views of a packed projection stay views), as the kernels' rules were checked on
# those.
_TAGS = tuple(getattr(torch.Tag, t) for t in ("needs_fixed_stride_order",) if hasattr(torch.Tag, t))

_lib = torch.library.Library("autotune", "DEF")
for _name, (_args, _returns, _impl, _fake) in OPS.items():
    _lib.define(f"{_name}({_args}) -> {_returns}", tags=_TAGS)
    _lib.impl(_name, _impl, "CUDA")
    _arg_names = [a.strip().split(" ")[1].split("=")[0] for a in _args.split(",")]
    _lib.impl(_name, _refuse_device(_name, _arg_names), "CPU")
    torch.library.register_fake(f"autotune::{_name}", _fake, lib=_lib)
del _name, _args, _returns, _impl, _fake, _arg_names
