"""autotune's kernels as PyTorch operators: torch.ops.autotune.* registered with
torch.library (define + a CUDA implementation + a fake implementation), so that
torch.compile(fullgraph=True) traces them as single nodes and CUDA graphs capture them.

    torch.ops.autotune.causal_conv1d(x, weight, bias=None, initial_states=None, silu=False,
                                     seq_idx=None)
    torch.ops.autotune.causal_conv1d_with_states(...)            -> (out, final_states)
    torch.ops.autotune.selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None,
                                      delta_softplus=False)
    torch.ops.autotune.selective_scan_with_state(...)            -> (out, last_state)
    torch.ops.autotune.attention(q, k, v, causal=False, softmax_scale=None,   # [B, S, H, D]
                                 window_left=-1, window_right=-1, softcap=0.0,
                                 alibi_slopes=None)
    torch.ops.autotune.attention_with_lse(...)                   -> (out, lse)
    torch.ops.autotune.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k,  # [T, H, D]
                                        max_seqlen_q, max_seqlen_k, causal=False, ...)
    torch.ops.autotune.attention_varlen_with_lse(...)            -> (out, lse [H, Tq])
    torch.ops.autotune.attention_kvcache(q, k_cache, v_cache, cache_seqlens,
                                         block_table=None, k_new=None, v_new=None, ...,
                                         cache_leftpad=None, cache_batch_idx=None)
    torch.ops.autotune.attention_kvcache_with_lse(...)           -> (out, lse [B, H, Sq])

    torch.ops.autotune.causal_conv1d_update(x, conv_state, weight, bias=None, silu=False,
                                            cache_seqlens=None, conv_state_indices=None)
    torch.ops.autotune.selective_state_update(state, x, dt, A, B, C, D=None, z=None,
                                              dt_bias=None, dt_softplus=False,
                                              state_batch_indices=None)

The KV cache operators write k_new/v_new into k_cache/v_cache, and the two decoding steps
their conv_state / state (declared mutated in their schemas); every other operator is
functional.

The operators allocate and return their outputs and are strict: every tensor goes to the C ABI as it is, and the library refuses
what its kernels cannot read (a strided last dimension, a non-contiguous weight, a
wrong dtype or size), naming the argument. The drop-in functions (autotune.
causal_conv1d_fn, ...) make the copies the peers make before calling them.

Registration uses torch.library.Library define/impl rather than custom_op: a call
then crosses the dispatcher into Python once, not once per dispatch key. There is no
autograd formula: the drop-ins raise on backward (see _dropin.py).

Warm path of a call (_calls.py): the call's signature (device, each tensor's shape,
strides and dtype, the flags) finds this thread's plan for it, which holds the packed
args struct; the outputs are allocated, their and the inputs' data pointers written
into the struct, and the library called on torch's current raw stream. The first call
of a signature checks and packs every field and keeps the plan once the library
accepted the call (a split-KV attention variant's workspace is part of it).
"""
import threading

import torch

from . import _calls, _config
from ._calls import last_state_shape as _last_state_shape
from ._calls import lse_shape_of as _lse_shape
from ._calls import states_shape as _states_shape
from ._runtime import Runtime

_contiguous = torch.contiguous_format
_f32 = torch.float32

_devices = {}  # CUDA device index -> its Runtime
_retired = []  # runtimes of an earlier database/policy: kept, their kernels stay loaded
_lock = threading.Lock()
# Per thread, signature -> call plan (_calls.py), for the operators and the drop-ins.
_plans = _calls.Plans()


def _device(index, t, what):
    """The Runtime of CUDA device `index` (t, named `what`, is the tensor on it; None when
    the device was asked for by number), created on its first call with the current
    database and policy."""
    if index is None or index < 0:
        where = f"{what} is on {t.device}" if t is not None else f"device {index} was asked for"
        raise ValueError(f"autotune: {where}; autotune's kernels take CUDA tensors")
    rt = _devices.get(index)
    if rt is None:
        with _lock:
            rt = _devices.get(index)
            if rt is None:
                rt = _devices[index] = Runtime(None, _config.database(),
                                               policy=_config.policy(), device=index)
    return rt


def get_runtime(device=0):
    """The Runtime (autotune.Runtime) that serves CUDA device `device` (an index, "cuda:N"
    or a torch.device), for variant queries; created on first use with the current
    database and policy."""
    if not isinstance(device, int):
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"autotune: {device} is not a CUDA device")
        device = device.index if device.index is not None else torch.cuda.current_device()
    return _device(device, None, "device")


def _retire():
    with _lock:
        _retired.extend(_devices.values())
        _devices.clear()
        _plans.clear()


_config.on_change(_retire)


# ---- CUDA implementations: tensors straight to the C ABI ----------------------------------
# The drop-ins call conv/scan/attention below directly when eager (copies: the peer's
# copies, made on a first call only when the library would refuse the layout).
def conv(x, weight, bias, initial_states, silu, with_final, copies=None, seq_idx=None):
    return _calls.conv(_plans, _device, x, weight, bias, initial_states, silu, with_final,
                       copies, seq_idx)


def scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, with_state, copies=None):
    return _calls.scan(_plans, _device, u, delta, A, B, C, D, z, delta_bias, delta_softplus,
                       with_state, copies)


def attend(q, k, v, causal, softmax_scale, with_lse, copies=None, window=_calls.NO_WINDOW,
           softcap=0.0, alibi_slopes=None):
    return _calls.attention(_plans, _device, q, k, v, causal, softmax_scale, with_lse, copies,
                            window, softcap, alibi_slopes)


def causal_conv1d(x, weight, bias=None, initial_states=None, silu=False, seq_idx=None):
    return _calls.conv(_plans, _device, x, weight, bias, initial_states, silu, False,
                       seq_idx=seq_idx)


def causal_conv1d_with_states(x, weight, bias=None, initial_states=None, silu=False,
                              seq_idx=None):
    return _calls.conv(_plans, _device, x, weight, bias, initial_states, silu, True,
                       seq_idx=seq_idx)


def selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    return _calls.scan(_plans, _device, u, delta, A, B, C, D, z, delta_bias, delta_softplus,
                       False)


def selective_scan_with_state(u, delta, A, B, C, D=None, z=None, delta_bias=None,
                              delta_softplus=False):
    return _calls.scan(_plans, _device, u, delta, A, B, C, D, z, delta_bias, delta_softplus,
                       True)


# No window (-1, -1) passes as the one NO_WINDOW tuple: a warm call builds no pair.
_NO_WINDOW = _calls.NO_WINDOW


def attention(q, k, v, causal=False, softmax_scale=None, window_left=-1, window_right=-1,
              softcap=0.0, alibi_slopes=None):
    return _calls.attention(_plans, _device, q, k, v, causal, softmax_scale, False, None,
                            _NO_WINDOW if window_left == -1 and window_right == -1 else
                            (window_left, window_right), softcap, alibi_slopes)


def attention_with_lse(q, k, v, causal=False, softmax_scale=None, window_left=-1,
                       window_right=-1, softcap=0.0, alibi_slopes=None):
    return _calls.attention(_plans, _device, q, k, v, causal, softmax_scale, True, None,
                            _NO_WINDOW if window_left == -1 and window_right == -1 else
                            (window_left, window_right), softcap, alibi_slopes)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     causal=False, softmax_scale=None, window_left=-1, window_right=-1,
                     softcap=0.0, alibi_slopes=None, block_table=None):
    return _device(q.get_device(), q, "q").attention_varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
        False, None, (window_left, window_right), softcap, alibi_slopes, block_table)


def attention_varlen_with_lse(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              causal=False, softmax_scale=None, window_left=-1, window_right=-1,
                              softcap=0.0, alibi_slopes=None, block_table=None):
    return _device(q.get_device(), q, "q").attention_varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
        True, None, (window_left, window_right), softcap, alibi_slopes, block_table)


def attention_kvcache(q, k_cache, v_cache, cache_seqlens, block_table=None, k_new=None,
                      v_new=None, causal=False, softmax_scale=None, window_left=-1,
                      window_right=-1, softcap=0.0, alibi_slopes=None, cache_leftpad=None,
                      cache_batch_idx=None):
    return _device(q.get_device(), q, "q").attention_kvcache(
        q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, causal, softmax_scale,
        False, (window_left, window_right), softcap, alibi_slopes, cache_leftpad,
        cache_batch_idx)


def attention_kvcache_with_lse(q, k_cache, v_cache, cache_seqlens, block_table=None,
                               k_new=None, v_new=None, causal=False, softmax_scale=None,
                               window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None,
                               cache_leftpad=None, cache_batch_idx=None):
    return _device(q.get_device(), q, "q").attention_kvcache(
        q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, causal, softmax_scale,
        True, (window_left, window_right), softcap, alibi_slopes, cache_leftpad,
        cache_batch_idx)


def causal_conv1d_update(x, conv_state, weight, bias=None, silu=False, cache_seqlens=None,
                         conv_state_indices=None):
    return _calls.conv_update(_plans, _device, x, conv_state, weight, bias, silu, cache_seqlens,
                              conv_state_indices)


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False, state_batch_indices=None):
    return _calls.state_update(_plans, _device, state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                               state_batch_indices)


# ---- fake implementations: outputs of the right shape, dtype, device and strides ----------
def _conv_fake(x, weight, bias=None, initial_states=None, silu=False, seq_idx=None):
    _calls._load_torch()
    return _calls.conv_out(x, _calls.conv_out_form(x))


def _conv_states_fake(x, weight, bias=None, initial_states=None, silu=False, seq_idx=None):
    return (_conv_fake(x, weight), x.new_empty(_states_shape(x, weight)))


def _scan_fake(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    _calls._load_torch()
    return _calls.scan_out(u, _calls.dense(u))


def _scan_state_fake(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    return (_scan_fake(u, delta, A, B, C),
            u.new_empty(_last_state_shape(u, A), dtype=_f32))


def _attention_fake(q, k, v, causal=False, softmax_scale=None, window_left=-1, window_right=-1,
                    softcap=0.0, alibi_slopes=None):
    return torch.empty_like(q, memory_format=_contiguous)


def _attention_lse_fake(q, k, v, causal=False, softmax_scale=None, window_left=-1,
                        window_right=-1, softcap=0.0, alibi_slopes=None):
    return (torch.empty_like(q, memory_format=_contiguous),
            q.new_empty(_lse_shape(q), dtype=_f32))


def _attention_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           causal=False, softmax_scale=None, window_left=-1, window_right=-1,
                           softcap=0.0, alibi_slopes=None, block_table=None):
    return torch.empty_like(q, memory_format=_contiguous)


def _attention_varlen_lse_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               causal=False, softmax_scale=None, window_left=-1,
                               window_right=-1, softcap=0.0, alibi_slopes=None,
                               block_table=None):
    return (torch.empty_like(q, memory_format=_contiguous),
            q.new_empty((q.shape[1], q.shape[0]), dtype=_f32))


def _attention_kvcache_fake(q, k_cache, v_cache, cache_seqlens, block_table=None, k_new=None,
                            v_new=None, causal=False, softmax_scale=None, window_left=-1,
                            window_right=-1, softcap=0.0, alibi_slopes=None,
                            cache_leftpad=None, cache_batch_idx=None):
    return torch.empty_like(q, memory_format=_contiguous)


def _attention_kvcache_lse_fake(q, k_cache, v_cache, cache_seqlens, block_table=None,
                                k_new=None, v_new=None, causal=False, softmax_scale=None,
                                window_left=-1, window_right=-1, softcap=0.0,
                                alibi_slopes=None, cache_leftpad=None, cache_batch_idx=None):
    return (torch.empty_like(q, memory_format=_contiguous),
            q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=_f32))


def _conv_update_fake(x, conv_state, weight, bias=None, silu=False, cache_seqlens=None,
                      conv_state_indices=None):
    return torch.empty_like(x)


def _state_update_fake(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                       state_batch_indices=None):
    return torch.empty_like(x)


# ---- registration ---------------------------------------------------------------------------
_CONV_ARGS = "Tensor x, Tensor weight, Tensor? bias=None, Tensor? initial_states=None, " \
             "bool silu=False, Tensor? seq_idx=None"
_SCAN_ARGS = "Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D=None, " \
             "Tensor? z=None, Tensor? delta_bias=None, bool delta_softplus=False"
_ATTN_ARGS = "Tensor q, Tensor k, Tensor v, bool causal=False, float? softmax_scale=None, " \
             "int window_left=-1, int window_right=-1, float softcap=0.0, " \
             "Tensor? alibi_slopes=None"

_VARLEN_ARGS = "Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, " \
               "int max_seqlen_q, int max_seqlen_k, bool causal=False, " \
               "float? softmax_scale=None, int window_left=-1, int window_right=-1, " \
               "float softcap=0.0, Tensor? alibi_slopes=None, Tensor? block_table=None"

# The caches are written (the new rows appended): declared mutated, so that functionalization
# (torch.compile) orders them and keeps the writes.
_KVCACHE_ARGS = "Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor cache_seqlens, " \
                "Tensor? block_table=None, Tensor? k_new=None, Tensor? v_new=None, " \
                "bool causal=False, float? softmax_scale=None, int window_left=-1, " \
                "int window_right=-1, float softcap=0.0, Tensor? alibi_slopes=None, " \
                "Tensor? cache_leftpad=None, Tensor? cache_batch_idx=None"

# The decoding steps update their state in place: declared mutated, as the caches above.
_CONV_UPDATE_ARGS = "Tensor x, Tensor(a!) conv_state, Tensor weight, Tensor? bias=None, " \
                    "bool silu=False, Tensor? cache_seqlens=None, " \
                    "Tensor? conv_state_indices=None"
_STATE_UPDATE_ARGS = "Tensor(a!) state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, " \
                     "Tensor? D=None, Tensor? z=None, Tensor? dt_bias=None, " \
                     "bool dt_softplus=False, Tensor? state_batch_indices=None"

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
    "attention_varlen": (_VARLEN_ARGS, "Tensor", attention_varlen, _attention_varlen_fake),
    "attention_varlen_with_lse": (_VARLEN_ARGS, "(Tensor, Tensor)", attention_varlen_with_lse,
                                  _attention_varlen_lse_fake),
    "attention_kvcache": (_KVCACHE_ARGS, "Tensor", attention_kvcache, _attention_kvcache_fake),
    "attention_kvcache_with_lse": (_KVCACHE_ARGS, "(Tensor, Tensor)", attention_kvcache_with_lse,
                                   _attention_kvcache_lse_fake),
    "causal_conv1d_update": (_CONV_UPDATE_ARGS, "Tensor", causal_conv1d_update,
                             _conv_update_fake),
    "selective_state_update": (_STATE_UPDATE_ARGS, "Tensor", selective_state_update,
                               _state_update_fake),
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
