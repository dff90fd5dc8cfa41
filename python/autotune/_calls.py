"""The call path shared by the registered operators (_ops.py), the drop-ins (_dropin.py)
and Runtime's methods: a per-signature plan, so that a warm call does little more than
read its tensors' pointers.

A call's signature is everything in the op's args struct except the data pointers: the
device, each tensor's shape, strides and dtype (or its absence), the flags and scalars,
and which outputs the call allocates. The first call of a signature in a thread checks
and packs every field as before (tensor_fields: type, rank, dtype, null data) and calls
the library, which validates everything; only when the library accepted the call is its
plan kept: the packed args struct (a ctypes buffer owned by the plan), a view of it as
64-bit words with the words of the data pointers, the outputs' allocation, and the
library's entry point (and for a split-KV attention variant, the word of its workspace:
every call writes the calling stream's there, Runtime.stream_workspace). A warm call
reads shape, strides and dtype of each tensor for the key (one flat tuple: an absent
optional tensor is three Nones, a present one adds no tuple of its own), drops the key
once the plan is found, allocates its outputs, writes each data pointer into
its word of the plan's buffer (the other bytes stay as the first call packed them) and
calls the library. Nothing it creates outlives it but the outputs (and the tuple that
returns two): a warm call leaves the garbage collector nothing to collect and starts no
collection (tests/python/test_package.py, TestWarmCallsLeaveNothingToCollect).

Plans are per thread (threading.local: two threads never write one buffer) and per
owner (a Runtime, or the package's device table, which drops them all when the database
or policy changes). The library still checks every call's pointers (device memory of
the runtime's GPU, inside an allocation), so a plan never lets a CPU tensor through.

The library's three call functions are called through function pointers without
argtypes: every argument is already a ctypes object (the handle, the args buffer, the
stream as c_void_p or None), which skips ctypes' per-argument conversion.
"""
import ctypes
import threading
import weakref

from ._runtime import (NO_VARLEN, NO_WINDOW, attention_features, attention_fields,
                       check_varlen_tensors, kvcache_fields, paged_fields, scale_field,
                       seq_idx_fields, sequence_index_fields, tensor_fields, varlen_fields)

# A thread's plans stop growing here (shapes that change every call, such as a serving
# loop's sequence lengths, would otherwise keep one plan per length forever): the cache
# is emptied and refills with the signatures still in use.
MAX_PLANS = 2048

_torch = None
_empty_like = _empty = _contiguous = _f32 = _raw_stream = None


def _load_torch():
    """torch's functions the warm path calls, bound once (the package imports without
    torch; a plan exists only after a first call, which runs this)."""
    global _torch, _empty_like, _empty, _contiguous, _f32, _raw_stream
    if _torch is None:
        import torch
        _empty_like, _empty = torch.empty_like, torch.empty
        _contiguous, _f32 = torch.contiguous_format, torch.float32
        _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _no_cuda
        _torch = torch
    return _torch


def _no_cuda(device):
    raise RuntimeError("autotune: this torch is built without CUDA")


class _StreamArgs(dict):
    """Raw CUstream -> the ctypes argument that passes it (None for the default stream),
    made once per stream."""

    def __missing__(self, raw):
        arg = self[raw] = ctypes.c_void_p(raw)
        return arg


STREAMS = _StreamArgs({0: None})


class _Caches:
    __slots__ = ("conv", "scan", "attn", "update", "state", "__weakref__")

    def __init__(self):
        self.conv, self.scan, self.attn, self.update, self.state = {}, {}, {}, {}, {}


class Plans(threading.local):
    """One owner's plans: per thread, a dict per op (conv, scan, attn) from signature to
    plan. clear() empties every thread's dicts (the owner's runtime changed)."""

    def __init__(self):
        # threading.local runs this once in each thread that uses the object.
        caches = _Caches()
        self.conv, self.scan, self.attn = caches.conv, caches.scan, caches.attn
        self.update, self.state = caches.update, caches.state
        self._caches = caches  # the thread's reference; the registry only holds weak ones
        with _REGISTRY_LOCK:
            threads = _THREADS.get(self)
            if threads is None:
                threads = _THREADS[self] = weakref.WeakSet()
            threads.add(caches)

    def clear(self):
        with _REGISTRY_LOCK:
            caches = list(_THREADS.get(self, ()))
        for c in caches:
            c.conv.clear()
            c.scan.clear()
            c.attn.clear()
            c.update.clear()
            c.state.clear()


_REGISTRY_LOCK = threading.Lock()
_THREADS = weakref.WeakKeyDictionary()  # Plans -> the live threads' caches of it


def _remember(cache, key, plan):
    if key is not None:
        if len(cache) >= MAX_PLANS:
            cache.clear()
        cache[key] = plan


# The tensor fields whose data pointers a warm call rewrites, by name and in the order the
# warm paths below unpack their words (fields the structs gain later shift nothing).
POINTERS = {
    "causal_conv1d": ("x", "weight", "bias", "initial_states", "out", "final_states",
                      "seq_idx"),
    "selective_scan": ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "out",
                       "last_state"),
    "attention": ("q", "k", "v", "o", "lse", "alibi_slopes"),
    "causal_conv1d_update": ("x", "conv_state", "weight", "bias", "out", "cache_seqlens",
                             "conv_state_indices"),
    "selective_state_update": ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "out",
                               "state_batch_indices"),
}
# A variable-length attention call also rewrites its offsets; one against a KV cache its
# index tensors and new rows.
VARLEN_POINTERS = POINTERS["attention"] + ("cu_seqlens_q", "cu_seqlens_k", "block_table")
KVCACHE_POINTERS = POINTERS["attention"] + ("cache_seqlens", "block_table", "k_new", "v_new",
                                            "cache_leftpad", "cache_batch_idx")


def _new_args(rt, op, values, pointers=None):
    """The plan's args struct packed with values, a view of it as 64-bit words and the
    words of the data pointers of the fields named by pointers (default POINTERS[op])."""
    layout = rt.layouts[op]
    buf = ctypes.create_string_buffer(layout.size)
    layout.struct.pack_into(buf, 0, *values)
    return (buf, memoryview(buf).cast("B").cast("Q"),
            layout.pointer_slots_of(pointers or POINTERS[op]))


def _fail(library, status):
    library.check(status)


def _launch(fn, handle, buf, lib, dev, words, i_extra, extra_shape, device, out):
    """A warm call's launch from its plan's buffer: out, or (out, a new fp32 second output:
    attention's log-sum-exp, the scan's last state) when the signature asks for one."""
    if extra_shape is None:
        status = fn(handle, buf, STREAMS[_raw_stream(dev)])
        if status:
            _fail(lib, status)
        return out
    extra = _empty(extra_shape, dtype=_f32, device=device)
    words[i_extra] = extra.data_ptr()
    status = fn(handle, buf, STREAMS[_raw_stream(dev)])
    if status:
        _fail(lib, status)
    return out, extra


def _first_call(plans, rt, key, q, fields, features, pointers, lse_shape):
    """The first attention call of a varlen or KV-cache signature: packs fields, the
    workspace and features, calls the library and keeps the plan once it accepted the
    call (the layout varlen() and kvcache() unpack)."""
    dev = q.get_device()
    workspace = rt.attention_workspace(key, fields, q, features)
    buf, words, slots = _new_args(rt, "attention", fields + workspace + features, pointers)
    lib = rt.library
    fn, handle = lib.calls["attention"], rt.handle
    status = fn(handle, buf, STREAMS[_raw_stream(dev)])
    if status:
        _fail(lib, status)
    i_ws = rt.layouts["attention"].offsets["workspace"] // 8
    # The runtime through a weak reference: its own plans hold this one (no cycle).
    _remember(plans.attn, key, (buf, words, fn, handle, lib, dev, lse_shape, q.device,
                                weakref.ref(rt), i_ws, workspace[1], *slots))


# ---- causal_conv1d ------------------------------------------------------------------------
# How a conv call allocates out: like x (a dense x: contiguous, or a permutation of a
# contiguous tensor), contiguous (any other channel-first x), or channel-last [B, L, C]
# memory viewed [B, C, L] (channel-last x: the library wants out in x's layout, as
# causal-conv1d returns it).
_OUT_LIKE, _OUT_CONTIGUOUS, _OUT_CHANNEL_LAST = 0, 1, 2


def dense(t):
    """Whether t's elements fill its span exactly with rows of stride 1 (a permutation of a
    contiguous tensor, e.g. Mamba's [B, D, L] view of [D, B, L] memory): torch.empty_like
    then keeps its strides, as mamba-ssm's and causal-conv1d's outputs do."""
    if t.is_contiguous():
        return True
    dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz != 1)
    expect = 1
    for st, sz in dims:
        if st != expect:
            return False
        expect *= sz
    return t.dim() == 0 or t.shape[-1] == 1 or t.stride(-1) == 1


def conv_out_form(x):
    """Which of the three allocations above out takes for x: channel-last when x's channel
    dimension is the contiguous one and its length dimension is not (the library's rule:
    one channel or one position reads as channel-first)."""
    shape, strides = x.shape, x.stride()
    if (len(shape) == 3 and shape[1] > 1 and shape[2] > 1 and strides[1] == 1 and
            strides[2] != 1):
        return _OUT_CHANNEL_LAST
    return _OUT_LIKE if dense(x) else _OUT_CONTIGUOUS


def conv_out(x, form):
    """An uninitialised out for x, allocated as `form` says."""
    if form == _OUT_LIKE:
        return _empty_like(x)
    if form == _OUT_CONTIGUOUS:
        return _empty_like(x, memory_format=_contiguous)
    b, c, length = x.shape
    return _empty((b, length, c), dtype=x.dtype, device=x.device).transpose(1, 2)


def conv(plans, runtime_for, x, weight, bias, initial_states, silu, with_final, copies=None,
         seq_idx=None):
    """out (and final states [B, C, W-1] in x's dtype when with_final) of a conv call.
    runtime_for(device_index, tensor, name): the Runtime serving that device. copies:
    the drop-in's function making the copies its peer makes (called on a first call
    only; a signature the library accepted needs none). seq_idx: int32 [B, L] ids of
    packed sequences, or None."""
    try:
        key = (x.get_device(), x.shape, x.stride(), x.dtype, weight.shape, weight.stride(),
               weight.dtype, None if bias is None else bias.shape,
               None if bias is None else bias.stride(), None if bias is None else bias.dtype,
               None if initial_states is None else initial_states.shape,
               None if initial_states is None else initial_states.stride(),
               None if initial_states is None else initial_states.dtype, silu, with_final,
               None if seq_idx is None else seq_idx.shape,
               None if seq_idx is None else seq_idx.stride(),
               None if seq_idx is None else seq_idx.dtype)
        plan = plans.conv.get(key)
    except (AttributeError, TypeError):  # not tensors: the first-call path says which
        key = plan = None
    if plan is None:
        return _conv_first(plans, runtime_for, key, x, weight, bias, initial_states, silu,
                           with_final, copies, seq_idx)
    del key  # its tuples go now: a warm call holds few new objects at once
    (buf, words, fn, handle, lib, dev, out_form, final_shape, dtype, device,
     i_x, i_w, i_b, i_s, i_o, i_f, i_q) = plan
    out = _empty_like(x) if out_form == _OUT_LIKE else conv_out(x, out_form)
    words[i_x] = x.data_ptr()
    words[i_w] = weight.data_ptr()
    if bias is not None:
        words[i_b] = bias.data_ptr()
    if initial_states is not None:
        words[i_s] = initial_states.data_ptr()
    if seq_idx is not None:
        words[i_q] = seq_idx.data_ptr()
    words[i_o] = out.data_ptr()
    if final_shape is None:
        status = fn(handle, buf, STREAMS[_raw_stream(dev)])
        if status:
            _fail(lib, status)
        return out
    final = _empty(final_shape, dtype=dtype, device=device)
    words[i_f] = final.data_ptr()
    status = fn(handle, buf, STREAMS[_raw_stream(dev)])
    if status:
        _fail(lib, status)
    return out, final


def _conv_first(plans, runtime_for, key, x, weight, bias, init, silu, with_final, copies,
                seq_idx):
    torch = _load_torch()
    if copies is not None:
        copied = copies(x, weight, bias, init)
        if copied is not None:
            return conv(plans, runtime_for, *copied, silu, with_final, seq_idx=seq_idx)
    fields_x = tensor_fields(x, "x")
    dev = x.get_device()
    rt = runtime_for(dev, x, "x")
    out_form = conv_out_form(x)
    out = conv_out(x, out_form)
    final = final_shape = None
    if with_final:
        final_shape = states_shape(x, weight)
        final = torch.empty(final_shape, dtype=x.dtype, device=x.device)
    buf, words, slots = _new_args(rt, "causal_conv1d", (
        *fields_x, *tensor_fields(weight, "weight"), *tensor_fields(bias, "bias"),
        *tensor_fields(init, "initial_states"), *tensor_fields(out, "out"),
        *tensor_fields(final, "final_states"), 1 if silu else 0, *seq_idx_fields(seq_idx)))
    lib = rt.library  # plans hold the library, never the runtime: no cycle through them
    fn, handle = lib.calls["causal_conv1d"], rt.handle
    status = fn(handle, buf, STREAMS[_raw_stream(dev)])
    if status:
        _fail(lib, status)
    _remember(plans.conv, key, (buf, words, fn, handle, lib, dev, out_form, final_shape,
                                x.dtype, x.device, *slots))
    return (out, final) if with_final else out


# ---- causal_conv1d_update -------------------------------------------------------------------
def conv_update(plans, runtime_for, x, conv_state, weight, bias, silu, cache_seqlens,
                conv_state_indices, checks=None):
    """out [B, C, L] of a decoding step of the conv against conv_state, which the launch
    updates in place (one kernel: the window read from the state, the conv, the state
    shifted or written circularly). cache_seqlens, conv_state_indices: int32 [B] CUDA
    tensors or None; their values are read on the GPU. checks: the drop-in's own checks,
    run on a first call only (a signature the library accepted passed them); a weight or
    bias that is not contiguous is copied there, and such a signature keeps no plan."""
    try:
        key = (x.get_device(), x.shape, x.stride(), x.dtype, conv_state.shape,
               conv_state.stride(), conv_state.dtype, conv_state.get_device(), weight.shape,
               weight.stride(), weight.dtype, None if bias is None else bias.shape,
               None if bias is None else bias.stride(), None if bias is None else bias.dtype,
               silu, None if cache_seqlens is None else cache_seqlens.shape,
               None if cache_seqlens is None else cache_seqlens.stride(),
               None if cache_seqlens is None else cache_seqlens.dtype,
               None if cache_seqlens is None else cache_seqlens.get_device(),
               None if conv_state_indices is None else conv_state_indices.shape,
               None if conv_state_indices is None else conv_state_indices.stride(),
               None if conv_state_indices is None else conv_state_indices.dtype,
               None if conv_state_indices is None else conv_state_indices.get_device())
        plan = plans.update.get(key)
    except (AttributeError, TypeError):  # not tensors: the first-call path says which
        key = plan = None
    if plan is None:
        return _conv_update_first(plans, runtime_for, key, x, conv_state, weight, bias, silu,
                                  cache_seqlens, conv_state_indices, checks)
    del key  # its tuples go now: a warm call holds few new objects at once
    buf, words, fn, handle, lib, dev, i_x, i_s, i_w, i_b, i_o, i_l, i_i = plan
    out = _empty_like(x)
    words[i_x] = x.data_ptr()
    words[i_s] = conv_state.data_ptr()
    words[i_w] = weight.data_ptr()
    if bias is not None:
        words[i_b] = bias.data_ptr()
    if cache_seqlens is not None:
        words[i_l] = cache_seqlens.data_ptr()
    if conv_state_indices is not None:
        words[i_i] = conv_state_indices.data_ptr()
    words[i_o] = out.data_ptr()
    status = fn(handle, buf, STREAMS[_raw_stream(dev)])
    if status:
        _fail(lib, status)
    return out


def _conv_update_first(plans, runtime_for, key, x, conv_state, weight, bias, silu,
                       cache_seqlens, conv_state_indices, checks):
    _load_torch()
    if checks is not None:
        checks(x, conv_state, weight, bias, cache_seqlens, conv_state_indices)
    if not weight.is_contiguous() or (bias is not None and not bias.is_contiguous()):
        return conv_update(plans, runtime_for, x, conv_state, weight.contiguous(),
                           None if bias is None else bias.contiguous(), silu, cache_seqlens,
                           conv_state_indices)
    fields_x = tensor_fields(x, "x")
    dev = x.get_device()
    rt = runtime_for(dev, x, "x")
    out = _empty_like(x)
    buf, words, slots = _new_args(rt, "causal_conv1d_update", (
        *fields_x, *tensor_fields(conv_state, "conv_state"), *tensor_fields(weight, "weight"),
        *tensor_fields(bias, "bias"), *tensor_fields(out, "out"),
        *sequence_index_fields(cache_seqlens, "cache_seqlens"),
        *sequence_index_fields(conv_state_indices, "conv_state_indices"), 1 if silu else 0))
    lib = rt.library  # plans hold the library, never the runtime: no cycle through them
    fn, handle = lib.calls["causal_conv1d_update"], rt.handle
    status = fn(handle, buf, STREAMS[_raw_stream(dev)])
    if status:
        _fail(lib, status)
    _remember(plans.update, key, (buf, words, fn, handle, lib, dev, *slots))
    return out


# ---- selective_state_update -----------------------------------------------------------------
def _sig(t):
    """An optional tensor's part of a signature: shape, strides, dtype, device (or None)."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.get_device())


def state_update(plans, runtime_for, state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                 state_batch_indices, checks=None):
    """out (x's shape) of a decoding step of the selective scan; state is updated in place
    by the same launch. checks: the drop-in's own checks, run on a first call only."""
    try:
        key = (x.get_device(), x.shape, x.stride(), x.dtype, state.shape, state.stride(),
               state.dtype, state.get_device(), dt.shape, dt.stride(), dt.dtype, A.shape,
               A.stride(), A.dtype, B.shape, B.stride(), B.dtype, C.shape, C.stride(), C.dtype,
               _sig(D), _sig(z), _sig(dt_bias), _sig(state_batch_indices), bool(dt_softplus))
        plan = plans.state.get(key)
    except (AttributeError, TypeError):  # not tensors: the first-call path says which
        key = plan = None
    if plan is None:
        return _state_update_first(plans, runtime_for, key, state, x, dt, A, B, C, D, z,
                                   dt_bias, dt_softplus, state_batch_indices, checks)
    del key  # its tuples go now: a warm call holds few new objects at once
    (buf, words, fn, handle, lib, dev, i_s, i_x, i_dt, i_a, i_b, i_c, i_d, i_z, i_db, i_o,
     i_i) = plan
    out = _empty_like(x)
    words[i_s] = state.data_ptr()
    words[i_x] = x.data_ptr()
    words[i_dt] = dt.data_ptr()
    words[i_a] = A.data_ptr()
    words[i_b] = B.data_ptr()
    words[i_c] = C.data_ptr()
    if D is not None:
        words[i_d] = D.data_ptr()
    if z is not None:
        words[i_z] = z.data_ptr()
    if dt_bias is not None:
        words[i_db] = dt_bias.data_ptr()
    if state_batch_indices is not None:
        words[i_i] = state_batch_indices.data_ptr()
    words[i_o] = out.data_ptr()
    status = fn(handle, buf, STREAMS[_raw_stream(dev)])
    if status:
        _fail(lib, status)
    return out


def _state_update_first(plans, runtime_for, key, state, x, dt, A, B, C, D, z, dt_bias,
                        dt_softplus, state_batch_indices, checks):
    _load_torch()
    if checks is not None:
        checks(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices)
    fields_x = tensor_fields(x, "x")
    dev = x.get_device()
    rt = runtime_for(dev, x, "x")
    out = _empty_like(x)
    buf, words, slots = _new_args(rt, "selective_state_update", (
        *tensor_fields(state, "state"), *fields_x, *tensor_fields(dt, "dt"),
        *tensor_fields(A, "A"), *tensor_fields(B, "B"), *tensor_fields(C, "C"),
        *tensor_fields(D, "D"), *tensor_fields(z, "z"), *tensor_fields(dt_bias, "dt_bias"),
        *tensor_fields(out, "out"),
        *sequence_index_fields(state_batch_indices, "state_batch_indices", "mamba-ssm"),
        1 if dt_softplus else 0))
    lib = rt.library  # plans hold the library, never the runtime: no cycle through them
    fn, handle = lib.calls["selective_state_update"], rt.handle
    status = fn(handle, buf, STREAMS[_raw_stream(dev)])
    if status:
        _fail(lib, status)
    _remember(plans.state, key, (buf, words, fn, handle, lib, dev, *slots))
    return out


# ---- selective_scan -----------------------------------------------------------------------
def scan_out(u, like_u):
    """An uninitialised out for u: u's layout where u is dense (like_u = dense(u); Mamba's
    [B, D, L] view of [D, B, L] memory: u, delta, z and out then share their rows' offsets,
    which the kernels' ragged=shift reads as whole vectors), else contiguous."""
    return _empty_like(u) if like_u else _empty_like(u, memory_format=_contiguous)


def scan(plans, runtime_for, u, delta, A, B, C, D, z, delta_bias, delta_softplus, with_state,
         copies=None):
    """out (and the last state fp32 [B, D, N] when with_state) of a selective scan call;
    runtime_for and copies as for conv."""
    try:
        key = (u.get_device(), u.shape, u.stride(), u.dtype, delta.shape, delta.stride(),
               delta.dtype, A.shape, A.stride(), A.dtype, B.shape, B.stride(), B.dtype,
               C.shape, C.stride(), C.dtype, None if D is None else D.shape,
               None if D is None else D.stride(), None if D is None else D.dtype,
               None if z is None else z.shape, None if z is None else z.stride(),
               None if z is None else z.dtype,
               None if delta_bias is None else delta_bias.shape,
               None if delta_bias is None else delta_bias.stride(),
               None if delta_bias is None else delta_bias.dtype, delta_softplus, with_state)
        plan = plans.scan.get(key)
    except (AttributeError, TypeError):
        key = plan = None
    if plan is None:
        return _scan_first(plans, runtime_for, key, u, delta, A, B, C, D, z, delta_bias,
                           delta_softplus, with_state, copies)
    del key  # its tuples go now: a warm call holds few new objects at once
    (buf, words, fn, handle, lib, dev, like_u, state_shape, device,
     i_u, i_dt, i_a, i_b, i_c, i_d, i_z, i_db, i_o, i_s) = plan
    out = _empty_like(u) if like_u else _empty_like(u, memory_format=_contiguous)  # scan_out
    words[i_u] = u.data_ptr()
    words[i_dt] = delta.data_ptr()
    words[i_a] = A.data_ptr()
    words[i_b] = B.data_ptr()
    words[i_c] = C.data_ptr()
    if D is not None:
        words[i_d] = D.data_ptr()
    if z is not None:
        words[i_z] = z.data_ptr()
    if delta_bias is not None:
        words[i_db] = delta_bias.data_ptr()
    words[i_o] = out.data_ptr()
    return _launch(fn, handle, buf, lib, dev, words, i_s, state_shape, device, out)


def _scan_first(plans, runtime_for, key, u, delta, A, B, C, D, z, delta_bias, delta_softplus,
                with_state, copies):
    torch = _load_torch()
    if copies is not None:
        copied = copies(u, delta, A, B, C, D, z, delta_bias)
        if copied is not None:
            return scan(plans, runtime_for, *copied, delta_softplus, with_state)
    fields_u = tensor_fields(u, "u")
    dev = u.get_device()
    rt = runtime_for(dev, u, "u")
    like_u = dense(u)  # kept for warm calls
    out = scan_out(u, like_u)
    last = state_shape = None
    if with_state:
        state_shape = last_state_shape(u, A)
        last = torch.empty(state_shape, dtype=_f32, device=u.device)
    buf, words, slots = _new_args(rt, "selective_scan", (
        *fields_u, *tensor_fields(delta, "delta"), *tensor_fields(A, "A"),
        *tensor_fields(B, "B"), *tensor_fields(C, "C"), *tensor_fields(D, "D"),
        *tensor_fields(z, "z"), *tensor_fields(delta_bias, "delta_bias"),
        *tensor_fields(out, "out"), *tensor_fields(last, "last_state"),
        1 if delta_softplus else 0))
    lib = rt.library
    fn, handle = lib.calls["selective_scan"], rt.handle
    status = fn(handle, buf, STREAMS[_raw_stream(dev)])
    if status:
        _fail(lib, status)
    _remember(plans.scan, key, (buf, words, fn, handle, lib, dev, like_u, state_shape,
                                u.device, *slots))
    return (out, last) if with_state else out


# ---- attention ----------------------------------------------------------------------------
def attention(plans, runtime_for, q, k, v, causal, scale, with_lse, copies=None,
              window=NO_WINDOW, softcap=0.0, alibi_slopes=None):
    """out [B, Sq, Hq, D] (and the fp32 log-sum-exp [B, Hq, Sq] when with_lse) of an
    attention call on [B, S, H, D] tensors; runtime_for and copies as for conv. window:
    (left, right), -1 unbounded, (-1, -1) none; softcap 0: off; alibi_slopes: fp32 [Hq] or
    [B, Hq], or None."""
    try:
        key = (q.get_device(), q.shape, q.stride(), q.dtype, k.shape, k.stride(), k.dtype,
               v.shape, v.stride(), v.dtype, causal, scale, with_lse, window, softcap,
               None if alibi_slopes is None else alibi_slopes.shape,
               None if alibi_slopes is None else alibi_slopes.stride(),
               None if alibi_slopes is None else alibi_slopes.dtype,
               None if alibi_slopes is None else alibi_slopes.get_device())
        plan = plans.attn.get(key)
    except (AttributeError, TypeError):
        key = plan = None
    if plan is None:
        return _attention_first(plans, runtime_for, key, q, k, v, causal, scale, with_lse,
                                copies, window, softcap, alibi_slopes)
    del key  # its tuples go now: a warm call holds few new objects at once
    (buf, words, fn, handle, lib, dev, contiguous, lse_shape, device, runtime, i_ws, ws_bytes,
     i_q, i_k, i_v, i_o, i_l, i_a) = plan
    out = _empty_like(q) if contiguous else _empty_like(q, memory_format=_contiguous)
    words[i_q] = q.data_ptr()
    words[i_k] = k.data_ptr()
    words[i_v] = v.data_ptr()
    words[i_o] = out.data_ptr()
    if alibi_slopes is not None:
        words[i_a] = alibi_slopes.data_ptr()
    if ws_bytes:  # a split-KV variant: this stream's workspace
        words[i_ws] = runtime().stream_workspace(dev, ws_bytes)
    return _launch(fn, handle, buf, lib, dev, words, i_l, lse_shape, device, out)


def _attention_first(plans, runtime_for, key, q, k, v, causal, scale, with_lse, copies, window,
                     softcap, alibi_slopes):
    torch = _load_torch()
    if copies is not None:
        copied = copies(q, k, v)
        if copied is not None:
            return attention(plans, runtime_for, *copied, causal, scale, with_lse, None, window,
                             softcap, alibi_slopes)
    fields_q = attention_fields(q, "q")
    dev = q.get_device()
    rt = runtime_for(dev, q, "q")
    contiguous = q.is_contiguous()
    out = torch.empty_like(q, memory_format=_contiguous)
    lse = lse_shape = None
    if with_lse:
        lse_shape = lse_shape_of(q)
        lse = torch.empty(lse_shape, dtype=_f32, device=q.device)
    fields = (*fields_q, *attention_fields(k, "k"), *attention_fields(v, "v"),
              *attention_fields(out, "o"), *tensor_fields(lse, "lse"), 1 if causal else 0,
              scale_field(scale))
    features = attention_features(window, softcap, alibi_slopes)
    workspace = rt.attention_workspace(key, fields, q, features)
    buf, words, slots = _new_args(rt, "attention", fields + workspace + features)
    lib = rt.library
    fn, handle = lib.calls["attention"], rt.handle
    status = fn(handle, buf, STREAMS[_raw_stream(dev)])
    if status:
        _fail(lib, status)
    i_ws = rt.layouts["attention"].offsets["workspace"] // 8
    # The runtime through a weak reference: its own plans hold this one (no cycle).
    _remember(plans.attn, key, (buf, words, fn, handle, lib, dev, contiguous, lse_shape,
                                q.device, weakref.ref(rt), i_ws, workspace[1], *slots))
    return (out, lse) if with_lse else out


# ---- attention against a KV cache (flash_attn_with_kvcache) ------------------------------
def kvcache(plans, runtime_for, q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
            causal, scale, with_lse, window, softcap, alibi_slopes, cache_leftpad,
            cache_batch_idx=None):
    """out [B, Sq, Hq, D] (and the fp32 log-sum-exp [B, Hq, Sq] when with_lse) of a decoding
    call against a KV cache, as Runtime.attention_kvcache describes it; the cache lengths,
    the block table, the new rows, the left padding and the cache slots are tensors whose
    data pointers a warm call rewrites like the others (their values are read on the GPU). A
    decoding loop's host time is this call: the same plan as attention's."""
    try:
        key = ("kvcache", q.get_device(), q.shape, q.stride(), q.dtype, k_cache.shape,
               k_cache.stride(), k_cache.dtype, v_cache.shape, v_cache.stride(),
               v_cache.dtype, cache_seqlens.shape, cache_seqlens.stride(), cache_seqlens.dtype,
               cache_seqlens.get_device(),
               None if block_table is None else block_table.shape,
               None if block_table is None else block_table.stride(),
               None if block_table is None else block_table.dtype,
               None if block_table is None else block_table.get_device(),
               None if k_new is None else k_new.shape,
               None if k_new is None else k_new.stride(),
               None if k_new is None else k_new.dtype,
               None if k_new is None else k_new.get_device(),
               None if v_new is None else v_new.shape,
               None if v_new is None else v_new.stride(),
               None if v_new is None else v_new.dtype,
               None if v_new is None else v_new.get_device(),
               None if cache_leftpad is None else cache_leftpad.shape,
               None if cache_leftpad is None else cache_leftpad.stride(),
               None if cache_leftpad is None else cache_leftpad.dtype,
               None if cache_leftpad is None else cache_leftpad.get_device(),
               None if cache_batch_idx is None else cache_batch_idx.shape,
               None if cache_batch_idx is None else cache_batch_idx.stride(),
               None if cache_batch_idx is None else cache_batch_idx.dtype,
               None if cache_batch_idx is None else cache_batch_idx.get_device(),
               causal, scale, with_lse, window, softcap,
               None if alibi_slopes is None else alibi_slopes.shape,
               None if alibi_slopes is None else alibi_slopes.stride(),
               None if alibi_slopes is None else alibi_slopes.dtype,
               None if alibi_slopes is None else alibi_slopes.get_device())
        plan = plans.attn.get(key)
    except (AttributeError, TypeError):
        key = plan = None
    if plan is None:
        return _kvcache_first(plans, runtime_for, key, q, k_cache, v_cache, cache_seqlens,
                              block_table, k_new, v_new, causal, scale, with_lse, window,
                              softcap, alibi_slopes, cache_leftpad, cache_batch_idx)
    del key
    (buf, words, fn, handle, lib, dev, lse_shape, device, runtime, i_ws, ws_bytes, i_q, i_k, i_v,
     i_o, i_l, i_a, i_s, i_t, i_kn, i_vn, i_lp, i_bi) = plan
    out = _empty_like(q, memory_format=_contiguous)
    words[i_q] = q.data_ptr()
    words[i_k] = k_cache.data_ptr()
    words[i_v] = v_cache.data_ptr()
    words[i_o] = out.data_ptr()
    words[i_s] = cache_seqlens.data_ptr()
    if block_table is not None:
        words[i_t] = block_table.data_ptr()
    if k_new is not None:
        words[i_kn] = k_new.data_ptr()
        words[i_vn] = v_new.data_ptr()
    if cache_leftpad is not None:
        words[i_lp] = cache_leftpad.data_ptr()
    if cache_batch_idx is not None:
        words[i_bi] = cache_batch_idx.data_ptr()
    if alibi_slopes is not None:
        words[i_a] = alibi_slopes.data_ptr()
    if ws_bytes:  # a split-KV variant: this stream's workspace
        words[i_ws] = runtime().stream_workspace(dev, ws_bytes)
    return _launch(fn, handle, buf, lib, dev, words, i_l, lse_shape, device, out)


def _kvcache_first(plans, runtime_for, key, q, k_cache, v_cache, cache_seqlens, block_table,
                   k_new, v_new, causal, scale, with_lse, window, softcap, alibi_slopes,
                   cache_leftpad, cache_batch_idx):
    torch = _load_torch()
    fields_q = attention_fields(q, "q")
    dev = q.get_device()
    rt = runtime_for(dev, q, "q")
    out = torch.empty_like(q, memory_format=_contiguous)
    lse = lse_shape = None
    if with_lse:
        lse_shape = lse_shape_of(q)
        lse = torch.empty(lse_shape, dtype=_f32, device=q.device)
    fields = (*fields_q, *attention_fields(k_cache, "k_cache"),
              *attention_fields(v_cache, "v_cache"), *attention_fields(out, "o"),
              *tensor_fields(lse, "lse"), 1 if causal else 0, scale_field(scale))
    features = attention_features(window, softcap, alibi_slopes, NO_VARLEN,
                                  kvcache_fields(cache_seqlens, block_table, k_new, v_new,
                                                 cache_leftpad, cache_batch_idx))
    _first_call(plans, rt, key, q, fields, features, KVCACHE_POINTERS, lse_shape)
    return (out, lse) if with_lse else out


# ---- variable-length attention (flash_attn_varlen_func) ------------------------------------
def varlen(plans, runtime_for, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
           causal, scale, with_lse, window, softcap, alibi_slopes, block_table=None):
    """out (total_q, Hq, D) (and the fp32 log-sum-exp (Hq, total_q) when with_lse) of a
    variable-length call, as Runtime.attention_varlen describes it. The longest lengths are
    part of the signature (they are packed, and they pick the variant); the offsets (and a
    paged cache's block table) are rewritten by pointer like the tensors."""
    try:
        key = ("varlen", q.get_device(), q.shape, q.stride(), q.dtype, k.shape, k.stride(),
               k.dtype, v.shape, v.stride(), v.dtype, cu_seqlens_q.shape, cu_seqlens_q.stride(),
               cu_seqlens_q.dtype, cu_seqlens_q.get_device(), cu_seqlens_k.shape,
               cu_seqlens_k.stride(), cu_seqlens_k.dtype, cu_seqlens_k.get_device(),
               max_seqlen_q, max_seqlen_k, causal, scale, with_lse, window, softcap,
               None if alibi_slopes is None else alibi_slopes.shape,
               None if alibi_slopes is None else alibi_slopes.stride(),
               None if alibi_slopes is None else alibi_slopes.dtype,
               None if alibi_slopes is None else alibi_slopes.get_device(),
               None if block_table is None else block_table.shape,
               None if block_table is None else block_table.stride(),
               None if block_table is None else block_table.dtype,
               None if block_table is None else block_table.get_device())
        plan = plans.attn.get(key)
    except (AttributeError, TypeError):
        key = plan = None
    if plan is None:
        return _varlen_first(plans, runtime_for, key, q, k, v, cu_seqlens_q, cu_seqlens_k,
                             max_seqlen_q, max_seqlen_k, causal, scale, with_lse, window,
                             softcap, alibi_slopes, block_table)
    del key
    (buf, words, fn, handle, lib, dev, lse_shape, device, runtime, i_ws, ws_bytes, i_q, i_k, i_v,
     i_o, i_l, i_a, i_cq, i_ck, i_bt) = plan
    out = _empty_like(q, memory_format=_contiguous)
    words[i_q] = q.data_ptr()
    words[i_k] = k.data_ptr()
    words[i_v] = v.data_ptr()
    words[i_o] = out.data_ptr()
    words[i_cq] = cu_seqlens_q.data_ptr()
    words[i_ck] = cu_seqlens_k.data_ptr()
    if alibi_slopes is not None:
        words[i_a] = alibi_slopes.data_ptr()
    if block_table is not None:
        words[i_bt] = block_table.data_ptr()
    if ws_bytes:  # a split-KV variant: this stream's workspace
        words[i_ws] = runtime().stream_workspace(dev, ws_bytes)
    return _launch(fn, handle, buf, lib, dev, words, i_l, lse_shape, device, out)


def _varlen_first(plans, runtime_for, key, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                  max_seqlen_k, causal, scale, with_lse, window, softcap, alibi_slopes,
                  block_table):
    torch = _load_torch()
    check_varlen_tensors(q, k, v, block_table is not None)
    varlen_args = varlen_fields(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    dev = q.get_device()
    rt = runtime_for(dev, q, "q")
    out = torch.empty_like(q, memory_format=_contiguous)
    lse = lse_shape = None
    if with_lse:
        lse_shape = (q.shape[1], q.shape[0])
        lse = torch.empty(lse_shape, dtype=_f32, device=q.device)
    # A paged cache (num_blocks, page_block_size, nheads_k, headdim) is indexed [B, H, S, D]
    # as flash_attn_with_kvcache's.
    kv_fields = tensor_fields if block_table is None else attention_fields
    fields = (*tensor_fields(q, "q"), *kv_fields(k, "k"), *kv_fields(v, "v"),
              *tensor_fields(out, "o"), *tensor_fields(lse, "lse"), 1 if causal else 0,
              scale_field(scale))
    features = attention_features(window, softcap, alibi_slopes, varlen_args,
                                  paged_fields(block_table))
    _first_call(plans, rt, key, q, fields, features, VARLEN_POINTERS, lse_shape)
    return (out, lse) if with_lse else out


# ---- output shapes (shared with the fake implementations) ----------------------------------
def states_shape(x, weight):
    if x.dim() != 3 or weight.dim() != 2:
        raise ValueError(f"autotune: x must be [batch, channels, length] and weight [channels, "
                         f"width], not {list(x.shape)} and {list(weight.shape)}")
    if not 2 <= weight.shape[1] <= 4:
        raise ValueError(f"autotune: weight has width {weight.shape[1]}; expected 2, 3 or 4")
    return (x.shape[0], x.shape[1], weight.shape[1] - 1)


def last_state_shape(u, A):
    if u.dim() != 3 or A.dim() != 2:
        raise ValueError(f"autotune: u must be [batch, dim, length] and A [dim, dstate], not "
                         f"{list(u.shape)} and {list(A.shape)}")
    return (u.shape[0], u.shape[1], A.shape[1])


def lse_shape_of(q):
    if q.dim() != 4:
        raise ValueError(f"autotune: q must be [batch, seqlen, heads, headdim], not "
                         f"{list(q.shape)}")
    return (q.shape[0], q.shape[2], q.shape[1])
