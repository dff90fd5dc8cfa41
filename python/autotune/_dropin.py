"""Entry points with the names, arguments and defaults of the libraries PyTorch models
already call, so that switching is a change of import:

    from causal_conv1d import causal_conv1d_fn                           # causal-conv1d
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn # mamba-ssm
    from flash_attn import flash_attn_func                               # flash-attn 2
becomes
    from autotune import causal_conv1d_fn, selective_scan_fn, flash_attn_func

Each makes the copies its peer makes for layouts the kernels do not read (a strided
last dimension, channel-last conv input, ...), then calls the registered operator
(torch.ops.autotune.*). Eagerly, on plain tensors, the operator's implementation is
called directly, skipping the dispatcher's round trip: its per-signature plan makes a
warm call read only its tensors' shapes, strides, dtypes and pointers, and the copies
are looked for on a signature's first call only (a layout the library accepted needs
none). Under torch.compile (and for tensor subclasses) the call goes through torch.ops,
so the graph holds the operator.

Forward only: when autograd would record the call (grad mode on and an input requiring
grad), the result carries a node whose backward raises NotImplementedError. What the
peers do and autotune does not is refused by name (NotImplementedError), never ignored.
"""
import torch
import torch.nn.functional as F

from . import _calls, _ops

_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_Tensor = torch.Tensor
_CONV = torch.ops.autotune.causal_conv1d.default
_CONV_STATES = torch.ops.autotune.causal_conv1d_with_states.default
_SCAN = torch.ops.autotune.selective_scan.default
_SCAN_STATE = torch.ops.autotune.selective_scan_with_state.default
_ATTN = torch.ops.autotune.attention.default
_ATTN_LSE = torch.ops.autotune.attention_with_lse.default
_VARLEN = torch.ops.autotune.attention_varlen.default
_VARLEN_LSE = torch.ops.autotune.attention_varlen_with_lse.default
_KVCACHE = torch.ops.autotune.attention_kvcache.default
_KVCACHE_LSE = torch.ops.autotune.attention_kvcache_with_lse.default

_ACTIVATIONS = (None, "silu", "swish")
_NO_WINDOW = (-1, -1)


class _ForwardOnly(torch.autograd.Function):
    """fn(*args) recorded by autograd with a backward that refuses."""

    @staticmethod
    def forward(ctx, name, fn, *args):
        ctx.name = name
        return fn(*args)

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError(
            f"autotune.{ctx.name} is forward-only: it has no backward. Run inference under "
            "torch.no_grad() or torch.inference_mode(); train with the original library")


# ---- causal-conv1d ----------------------------------------------------------------------------
def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,
                     return_final_states=False, final_states_out=None, activation=None):
    """causal-conv1d's causal_conv1d_fn.

    x: (batch, dim, seqlen), fp32/fp16/bf16; any batch and channel strides (a view of a
        packed projection is read in place), or channel-last (x.stride(1) == 1, such as
        Mamba-2's xBC.transpose(1, 2), a slice of its in_proj output: read in place too).
        Any other x with x.stride(2) != 1 is first copied to a contiguous tensor.
    weight: (dim, width), width 2..4, fp32/fp16/bf16 (x's dtype or another one).
    bias: (dim,), weight's dtype.
    seq_idx: (batch, seqlen) torch.int32 ids of packed sequences (x at s counts for the
        output at t only when their ids are equal; a negative id marks padding, whose
        output is 0), with channel-last x and without states, as causal-conv1d accepts
        it; copied when its last dimension is strided.
    initial_states: (batch, dim, width - 1), x's dtype, any layout (copied when not
        contiguous); unlike causal-conv1d, channel-first x may have them too.
    return_final_states: also return the last width - 1 inputs, (batch, dim, width - 1),
        x's dtype; written into final_states_out when given (x's dtype and that shape).
    activation: None, "silu" or "swish".

    out: (batch, dim, seqlen), x's dtype: channel-last ((batch, seqlen, dim) memory) for
    channel-last x, as causal-conv1d returns it; x's strides for a dense x (a permutation
    of a contiguous tensor, such as Mamba's (dim, batch, seqlen) memory: torch.empty_like);
    else contiguous.
    """
    if activation not in _ACTIVATIONS:
        raise NotImplementedError("activation must be None, silu, or swish")
    if seq_idx is not None:
        _check_seq_idx(x, seq_idx, initial_states, return_final_states)
        if isinstance(seq_idx, _Tensor) and seq_idx.dim() == 2 and seq_idx.stride(-1) != 1:
            seq_idx = seq_idx.contiguous()
    silu = activation is not None
    with_final = True if return_final_states else False
    if type(x) is _Tensor and not _is_compiling():
        if _grad_enabled() and _conv_records(x, weight, bias, initial_states):
            result = _ForwardOnly.apply("causal_conv1d_fn", _ops.conv, x, weight, bias,
                                        initial_states, silu, with_final, _conv_copies,
                                        seq_idx)
        else:  # the warm path: the plan's call, nothing built on the way to it
            result = _calls.conv(_ops._plans, _ops._device, x, weight, bias, initial_states,
                                 silu, with_final, _conv_copies, seq_idx)
    else:
        x, weight, bias, initial_states = _conv_copies(x, weight, bias, initial_states) or \
            (x, weight, bias, initial_states)
        fn = _CONV_STATES if with_final else _CONV
        if _grad_enabled() and _conv_records(x, weight, bias, initial_states):
            result = _ForwardOnly.apply("causal_conv1d_fn", fn, x, weight, bias, initial_states,
                                        silu, seq_idx)
        else:
            result = fn(x, weight, bias, initial_states, silu, seq_idx)
    if not return_final_states:
        return result
    out, final = result
    if final_states_out is not None:
        if (final_states_out.dtype != final.dtype or final_states_out.shape != final.shape or
                final_states_out.device != final.device):
            raise ValueError(
                f"autotune.causal_conv1d_fn: final_states_out must be {list(final.shape)} "
                f"(batch, dim, width - 1) {final.dtype} on {final.device}, not "
                f"{list(final_states_out.shape)} {final_states_out.dtype} on "
                f"{final_states_out.device}")
        final_states_out.copy_(final)
        final = final_states_out
    return out, final


def causal_conv1d_varlen_states(x, cu_seqlens, state_len):
    """causal-conv1d's causal_conv1d_varlen_states: the conv states of packed sequences.

    x: (total_tokens, dim), the sequences one after another; cu_seqlens: (batch + 1,)
    integer tensor on x's device, their cumulative lengths (from 0, not decreasing, at
    most total_tokens: read on the GPU, not checked); state_len: int >= 0. Returns states
    (batch, dim, state_len) in x's dtype with dim contiguous (the layout
    causal_conv1d_update takes): sequence b's last state_len tokens, left zero-filled where
    it is shorter. Pure data movement, done by one batched torch gather (no kernel of the
    library, no host synchronisation)."""
    name = "causal_conv1d_varlen_states"
    if not isinstance(x, _Tensor) or x.dim() != 2:
        raise ValueError(f"autotune.{name}: x must be a (total_tokens, dim) tensor, not "
                         f"{_describe(x)}")
    if (not isinstance(cu_seqlens, _Tensor) or cu_seqlens.dim() != 1
            or cu_seqlens.shape[0] < 1 or cu_seqlens.dtype.is_floating_point
            or cu_seqlens.dtype.is_complex or cu_seqlens.dtype == torch.bool):
        raise TypeError(f"autotune.{name}: cu_seqlens must be a (batch + 1,) integer tensor, "
                        f"not {_describe(cu_seqlens)}")
    if cu_seqlens.device != x.device:
        raise ValueError(f"autotune.{name}: cu_seqlens is on {cu_seqlens.device}, x on "
                         f"{x.device}; both must be on one device")
    if isinstance(state_len, bool) or not isinstance(state_len, int) or state_len < 0:
        raise ValueError(f"autotune.{name}: state_len must be an int >= 0, not {state_len!r}")
    total, dim = x.shape
    batch = cu_seqlens.shape[0] - 1
    if total == 0 or state_len == 0 or batch == 0:
        return x.new_zeros((batch, state_len, dim)).transpose(1, 2)
    cu = cu_seqlens.to(torch.long)
    # Row (b, i) reads token ends[b] - state_len + i where that lies in sequence b.
    pos = cu[1:, None] - state_len + torch.arange(state_len, device=x.device)
    keep = (pos >= cu[:-1, None]) & (pos >= 0) & (pos < total)
    rows = x.index_select(0, pos.clamp(0, total - 1).flatten()).view(batch, state_len, dim)
    return torch.where(keep[:, :, None], rows, rows.new_zeros(())).transpose(1, 2)


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None):
    """causal-conv1d's causal_conv1d_update: a decoding step (or a few tokens) of the conv
    against a rolling state of the last inputs, updated in place.

    x: (batch, dim) or (batch, dim, seqlen), fp32/fp16/bf16, any layout causal_conv1d_fn
        reads. conv_state: (batch, dim, state_len), state_len >= width - 1, x's dtype, any
        strides; with conv_state_indices a larger (entries, dim, state_len) tensor whose
        row conv_state_indices[b] is sequence b's (torch.int32 (batch,), on x's device;
        entries outside [0, entries), such as causal-conv1d's padding -1, are padding:
        their output is 0 and no row is written). cache_seqlens: None, the state's last
        width - 1 entries precede x and the state shifts left by seqlen; or torch.int32
        (batch,) on x's device, the state is a circular buffer whose inputs before x end
        at cache_seqlens[b] - 1 (mod state_len) and x is written from cache_seqlens[b]
        (mod state_len) on. weight, bias, activation as causal_conv1d_fn.

    out: x's shape and dtype. One launch of autotune's causal_conv1d_update op reads the
    window from the state, runs the conv and writes the state back (state_len up to 64);
    nothing waits on the GPU: indices and lengths are read there, never checked on the
    host. Under torch.compile it is the registered operator torch.ops.autotune.
    causal_conv1d_update (one node; conv_state declared mutated); with gradients enabled
    on an input that requires them, or for a longer state, the same step runs as torch
    operations around causal_conv1d_fn.
    """
    if activation not in _ACTIVATIONS:
        raise NotImplementedError("activation must be None, silu, or swish")
    if (type(x) is _Tensor and type(conv_state) is _Tensor and type(weight) is _Tensor and
            not _is_compiling() and conv_state.dim() == 3 and
            conv_state.shape[2] <= _UPDATE_MAX_STATE and not _update_records(x, weight, bias)):
        # One launch (the library's causal_conv1d_update op). A call whose signature already
        # ran goes straight to its plan; a new one is checked here first (_update_checks).
        unsqueeze = x.dim() == 2
        out = _calls.conv_update(_ops._plans, _ops._device, x.unsqueeze(-1) if unsqueeze else x,
                                 conv_state, weight, bias, activation is not None,
                                 cache_seqlens, conv_state_indices, _update_checks)
        return out.squeeze(-1) if unsqueeze else out
    x, unsqueeze = _update_checks(x, conv_state, weight, bias, cache_seqlens, conv_state_indices)
    batch, dim, seqlen = x.shape
    width = weight.shape[1]
    state_len = conv_state.shape[2]
    if _is_compiling() and state_len <= _UPDATE_MAX_STATE and not _update_records(x, weight,
                                                                                  bias):
        # Traced: the registered operator, one node that updates conv_state in place.
        out = _UPDATE_OP(x, conv_state, weight.contiguous(),
                         None if bias is None else bias.contiguous(), activation is not None,
                         cache_seqlens, conv_state_indices)
        return out.squeeze(-1) if unsqueeze else out
    # With gradients, or a state longer than the kernel holds: torch operations around
    # causal_conv1d_fn.
    valid = None
    if conv_state_indices is None:
        states = conv_state
    else:
        index = conv_state_indices.long()
        valid = (index >= 0) & (index < conv_state.shape[0])
        rows = torch.where(valid, index, 0)
        states = conv_state.index_select(0, rows)  # a copy: the rows' states before the call
    if cache_seqlens is None:
        # contiguous here, so that the conv's warm call finds its plan (a strided window
        # would take the first-call path, which copies it, on every call)
        window = states[:, :, state_len - (width - 1):].contiguous()
    else:
        start = cache_seqlens.long()
        taps = (start[:, None] + torch.arange(1 - width, 0, device=x.device)).remainder(state_len)
        window = states.gather(2, taps[:, None, :].expand(batch, dim, width - 1))
    out = causal_conv1d_fn(x, weight, bias, initial_states=window, activation=activation)

    # The state after x: shifted by seqlen, or x written into the circular buffer (only
    # its last state_len inputs when seqlen is longer, so that no position is written twice).
    keep = min(seqlen, state_len)
    if cache_seqlens is None:
        new = (x[:, :, seqlen - state_len:] if seqlen >= state_len else
               torch.cat([states[:, :, seqlen:], x], dim=2))
        if valid is None:
            conv_state.copy_(new)
    else:
        pos = (start[:, None] + torch.arange(seqlen - keep, seqlen, device=x.device)).remainder(
            state_len)
        new = states if valid is None else states.clone()
        new.scatter_(2, pos[:, None, :].expand(batch, dim, keep), x[:, :, seqlen - keep:])
    if valid is not None:
        # Padding entries write what the first valid entry writes to its row (its new state),
        # or, when no entry is valid, row 0's own state back: every row written gets one
        # value, in whatever order the copies land, and no host sync is needed.
        # (index_select, not a 0-d tensor index, which torch would read on the host)
        first = valid.to(torch.int32).argmax().reshape(1)
        fallback = torch.where(valid.index_select(0, first)[:, None, None],
                               new.index_select(0, first), states.index_select(0, first))
        conv_state.index_copy_(0, torch.where(valid, rows, rows.index_select(0, first)),
                               torch.where(valid[:, None, None], new, fallback))
        out = out.masked_fill(~valid[:, None, None], 0)
    return out.squeeze(-1) if unsqueeze else out


def _update_records(x, weight, bias):
    """Whether autograd would record an update on these (grad mode on, an input that
    requires a gradient): the step then runs as torch operations."""
    return _grad_enabled() and (x.requires_grad or weight.requires_grad or
                                getattr(bias, "requires_grad", False))


def _update_checks(x, conv_state, weight, bias, cache_seqlens, conv_state_indices):
    """causal_conv1d_update's arguments checked as causal-conv1d states its conditions (the
    library checks them again, by its own names): x made 3-d, and whether it was 2-d."""
    name = "autotune.causal_conv1d_update"
    for what, t in (("x", x), ("conv_state", conv_state), ("weight", weight)):
        if not isinstance(t, _Tensor):
            raise TypeError(f"{name}: {what} must be a torch.Tensor, not {type(t).__name__}")
    unsqueeze = x.dim() == 2
    if unsqueeze:
        x = x.unsqueeze(-1)
    if x.dim() != 3:
        raise ValueError(f"{name}: x must be (batch, dim) or (batch, dim, seqlen), not "
                         f"{list(x.shape)}")
    if not x.is_cuda:
        raise ValueError(f"{name}: x is on {x.device}; autotune's kernels take CUDA tensors")
    batch, dim, seqlen = x.shape
    if weight.dim() != 2 or weight.shape[0] != dim:
        raise ValueError(f"{name}: weight must be (dim={dim}, width), not {list(weight.shape)}")
    width = weight.shape[1]
    if conv_state.dim() != 3 or conv_state.shape[1] != dim or conv_state.shape[2] < width - 1:
        raise ValueError(f"{name}: conv_state must be (batch, dim={dim}, state_len >= width - 1 "
                         f"= {width - 1}), not {list(conv_state.shape)}")
    if conv_state.dtype != x.dtype or conv_state.device != x.device:
        raise ValueError(f"{name}: conv_state is {conv_state.dtype} on {conv_state.device}; it "
                         f"must be x's dtype and device ({x.dtype} on {x.device})")
    if conv_state_indices is not None:
        _check_int32_vector(name, "conv_state_indices", conv_state_indices, batch, x)
        if conv_state.shape[0] == 0:
            raise ValueError(f"{name}: conv_state has no rows to select")
    elif conv_state.shape[0] != batch:
        raise ValueError(f"{name}: conv_state has {conv_state.shape[0]} rows for a batch of "
                         f"{batch} (pass conv_state_indices to select rows)")
    if cache_seqlens is not None:
        _check_int32_vector(name, "cache_seqlens", cache_seqlens, batch, x)
    return x, unsqueeze


_UPDATE_OP = torch.ops.autotune.causal_conv1d_update.default
_STATE_UPDATE_OP = torch.ops.autotune.selective_state_update.default


# The longest state the one-launch update takes (the library's causal_conv1d_update keeps a
# state row in registers).
_UPDATE_MAX_STATE = 64


def _check_int32_vector(name, what, t, batch, x, batch_word="batch"):
    """A per-sequence int32 argument (causal_conv1d_update's cache_seqlens and
    conv_state_indices, flash_attn_with_kvcache's cache_leftpad): torch.int32 (batch,) on
    x's device; batch_word is what the peer calls the batch."""
    if not isinstance(t, _Tensor) or t.dtype != torch.int32:
        kind = t.dtype if isinstance(t, _Tensor) else type(t).__name__
        raise TypeError(f"{name}: {what} must be a torch.int32 tensor ({batch_word},), not "
                        f"{kind}")
    if tuple(t.shape) != (batch,) or t.device != x.device:
        raise ValueError(f"{name}: {what} must be ({batch},) on {x.device}, not {list(t.shape)} "
                         f"on {t.device}")


def _check_seq_idx(x, seq_idx, initial_states, return_final_states):
    """causal-conv1d's conditions on seq_idx: channel-last x, no states (the library checks
    the rest: dtype, shape, device)."""
    try:
        channel_last = _calls.conv_out_form(x) == _calls._OUT_CHANNEL_LAST
    except AttributeError:
        return  # not a tensor: the call refuses it by name
    if not channel_last:
        raise ValueError("autotune.causal_conv1d_fn: seq_idx is only supported with channel-last "
                         "x (x.stride(1) == 1), as in causal-conv1d")
    if initial_states is not None or return_final_states:
        raise ValueError("autotune.causal_conv1d_fn: seq_idx takes no initial_states and no "
                         "return_final_states, as in causal-conv1d")


def _conv_records(x, weight, bias, initial_states):
    """Whether autograd would record a call on these (grad mode on)."""
    return (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
            or (initial_states is not None and initial_states.requires_grad))


def _conv_copies(x, weight, bias, initial_states):
    """The contiguous copies causal-conv1d makes (x with neither its last nor, channel-last,
    its channel dimension contiguous; a non-contiguous weight, bias or initial_states), or
    None when none is needed. Not tensors: None (the call then refuses them by name)."""
    try:
        x_read = x.stride(-1) == 1 or _calls.conv_out_form(x) == _calls._OUT_CHANNEL_LAST
        if (x_read and weight.is_contiguous() and
                (bias is None or bias.is_contiguous()) and
                (initial_states is None or initial_states.is_contiguous())):
            return None
        return (x if x_read else x.contiguous(), weight.contiguous(),
                None if bias is None else bias.contiguous(),
                None if initial_states is None else initial_states.contiguous())
    except AttributeError:
        return None


# ---- mamba-ssm ------------------------------------------------------------------------------
def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False, cu_seqlens=None):
    """mamba-ssm's selective_scan_fn (Mamba-1).

    u, delta, z: (batch, dim, seqlen), fp32/fp16/bf16 (one dtype); any batch and channel
        strides; a strided last dimension is copied first (as mamba-ssm does).
    A: (dim, dstate) fp32, dstate <= 64. Complex A is refused (TypeError naming A).
    B, C: (dim, dstate) fp32 (fixed), (batch, dstate, seqlen) or (batch, groups, dstate,
        seqlen) in u's dtype (variable), each on its own: one fixed and one variable
        is accepted, as in mamba-ssm.
    D, delta_bias: (dim,) fp32.
    cu_seqlens (newer mamba-ssm): not implemented (NotImplementedError).

    out: (batch, dim, seqlen), u's dtype, y * silu(z) when z is given, in u's layout when u
    is dense (as mamba-ssm's takes delta's), else contiguous; with return_last_state also
    last_state (batch, dim, dstate) fp32.
    """
    if cu_seqlens is not None:
        raise NotImplementedError(
            "autotune.selective_scan_fn: cu_seqlens (variable-length packed sequences) is not "
            "implemented")
    delta_softplus = True if delta_softplus else False
    with_state = True if return_last_state else False
    if type(u) is _Tensor and not _is_compiling():
        if _grad_enabled() and _scan_records(u, delta, A, B, C, D, z, delta_bias):
            return _ForwardOnly.apply("selective_scan_fn", _ops.scan, u, delta, A, B, C, D, z,
                                      delta_bias, delta_softplus, with_state, _scan_copies)
        # the warm path: the plan's call, nothing built on the way to it
        return _calls.scan(_ops._plans, _ops._device, u, delta, A, B, C, D, z, delta_bias,
                           delta_softplus, with_state, _scan_copies)
    u, delta, A, B, C, D, z, delta_bias = _scan_copies(u, delta, A, B, C, D, z, delta_bias) or \
        (u, delta, A, B, C, D, z, delta_bias)
    fn = _SCAN_STATE if with_state else _SCAN
    if _grad_enabled() and _scan_records(u, delta, A, B, C, D, z, delta_bias):
        return _ForwardOnly.apply("selective_scan_fn", fn, u, delta, A, B, C, D, z, delta_bias,
                                  delta_softplus)
    return fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus)


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False, state_batch_indices=None):
    """mamba-ssm's selective_state_update (mamba_ssm.ops.triton.selective_state_update): one
    decoding step of the selective scan, the state updated in place.

    state: (batch, dim, dstate) or (batch, nheads, dim, dstate), fp32/fp16/bf16; with
        state_batch_indices a larger (entries, ...) tensor whose row
        state_batch_indices[b] is sequence b's (torch.int32 (batch,) on x's device;
        entries outside [0, entries) are padding: out 0, no row written).
    x, dt, z: (batch, dim) or (batch, nheads, dim), one dtype. A: (dim, dstate) or
        (nheads, dim, dstate). B, C: (batch, dstate) or (batch, ngroups, dstate), ngroups
        dividing nheads. D, dt_bias: (dim,) or (nheads, dim), one dtype. Each tensor may be
        any float dtype of its own group and any strides, broadcast views included (Mamba-2
        passes A, dt, D and dt_bias expanded over dim and dstate, stride 0). dstate <= 256.

    out: x's shape and dtype: sum_n state * C + D * x, times silu(z) when z is given, with
    the state first decayed by exp(dt * A) and fed dt * B * x (dt = softplus(dt + dt_bias)
    with dt_softplus). One launch of autotune's selective_state_update op (under
    torch.compile the registered operator torch.ops.autotune.selective_state_update, one
    node with state declared mutated).
    """
    if _is_compiling():  # the registered operator: one node that updates state in place
        return _STATE_UPDATE_OP(state, x, dt, A, B, C, D, z, dt_bias,
                                True if dt_softplus else False, state_batch_indices)
    return _state_update_call(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                              state_batch_indices)


def _state_update_call(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices):
    return _calls.state_update(_ops._plans, _ops._device, state, x, dt, A, B, C, D, z, dt_bias,
                               True if dt_softplus else False, state_batch_indices,
                               _state_update_checks)




def _state_update_checks(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices):
    """selective_state_update's arguments checked on a signature's first call, as mamba-ssm
    would meet them (the library checks every shape, dtype and stride by name after)."""
    name = "autotune.selective_state_update"
    for what, t in (("state", state), ("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C),
                    ("D", D), ("z", z), ("dt_bias", dt_bias)):
        if t is not None and not isinstance(t, _Tensor):
            raise TypeError(f"{name}: {what} must be a torch.Tensor, not {type(t).__name__}")
    if not x.is_cuda:
        raise ValueError(f"{name}: x is on {x.device}; autotune's kernels take CUDA tensors")
    for what, t in (("state", state), ("dt", dt), ("A", A), ("B", B), ("C", C), ("D", D),
                    ("z", z), ("dt_bias", dt_bias)):
        if t is not None and t.device != x.device:
            raise ValueError(f"{name}: {what} is on {t.device}; it must be on x's device "
                             f"({x.device})")
    if A.is_complex():
        raise TypeError(f"{name}: A is complex ({A.dtype}); autotune's kernels are "
                        "real-valued")
    if state_batch_indices is not None:
        _check_int32_vector(name, "state_batch_indices", state_batch_indices, x.shape[0], x)


def _scan_records(u, delta, A, B, C, D, z, delta_bias):
    """Whether autograd would record a call on these (grad mode on)."""
    return (u.requires_grad or delta.requires_grad or A.requires_grad or B.requires_grad or
            C.requires_grad or (D is not None and D.requires_grad) or
            (z is not None and z.requires_grad) or
            (delta_bias is not None and delta_bias.requires_grad))


def _scan_copies(u, delta, A, B, C, D, z, delta_bias):
    """The contiguous copies mamba-ssm makes (u, delta, B, C, z with a strided last
    dimension; a non-contiguous A or D), or None when none is needed."""
    try:
        if (u.stride(-1) == 1 and delta.stride(-1) == 1 and A.is_contiguous() and
                B.stride(-1) == 1 and C.stride(-1) == 1 and (D is None or D.is_contiguous())
                and (z is None or z.stride(-1) == 1)):
            return None
        last = _last_contiguous
        return (last(u), last(delta), A.contiguous(), last(B), last(C),
                None if D is None else D.contiguous(), None if z is None else last(z),
                delta_bias)
    except AttributeError:
        return None


def _last_contiguous(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def mamba_inner_fn(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight,
                   out_proj_weight, out_proj_bias, A, B=None, C=None, D=None, delta_bias=None,
                   B_proj_bias=None, C_proj_bias=None, delta_softplus=True, checkpoint_lvl=1,
                   b_rms_weight=None, c_rms_weight=None, dt_rms_weight=None,
                   b_c_dt_rms_eps=1e-6, *, cu_seqlens=None, seq_idx=None):
    """mamba-ssm's mamba_inner_fn: the fused path of its Mamba-1 block (Mamba.forward with
    use_fast_path), forward only. The convolution and the scan are autotune's
    (causal_conv1d_fn, selective_scan_fn: x, z and the projected dt are read in place);
    the projections are torch's F.linear and matmul, laid out as mamba-ssm lays them out.

    xz: (batch, 2 * dim, seqlen), x and z its channel halves; a strided last dimension is
        copied first (as mamba-ssm does). conv1d_weight: (dim, 1, width), conv1d_bias
        (dim,). x_proj_weight: (dt_rank + dstate per variable B/C, dim); delta_proj_weight:
        (dim, dt_rank); out_proj_weight: (d_out, dim), out_proj_bias (d_out,) or None.
    A: (dim, dstate) fp32. B, C: None (variable: projected from x, plus B_proj_bias /
        C_proj_bias when given) or (dim, dstate) fp32 (fixed). D, delta_bias: (dim,) fp32.
    b_rms_weight, c_rms_weight (dstate,) and dt_rms_weight (dim,): RMS norms (eps
        b_c_dt_rms_eps) of the variable B, C and of dt before the scan, as mamba-ssm 2.2
        applies them. checkpoint_lvl (0 or 1) only shapes mamba-ssm's backward: accepted,
        nothing to do forward.
    seq_idx (newer mamba-ssm): passed to the convolution, as there. cu_seqlens (newer
        mamba-ssm): not implemented (NotImplementedError), like selective_scan_fn's.
    Under autocast the projection weights are cast to the autocast dtype first, as
    mamba-ssm casts them.

    out: (batch, seqlen, d_out): out_proj(selective_scan(conv(x), dt, A, B, C, D, z)).
    """
    name = "autotune.mamba_inner_fn"
    if cu_seqlens is not None:
        raise NotImplementedError(
            f"{name}: cu_seqlens (variable-length packed sequences) is not implemented")
    if checkpoint_lvl not in (0, 1):
        raise ValueError(f"{name}: checkpoint_lvl={checkpoint_lvl!r}: expected 0 or 1 (as "
                         "mamba-ssm asserts; it only shapes the backward pass)")
    for what, t in (("xz", xz), ("conv1d_weight", conv1d_weight), ("x_proj_weight", x_proj_weight),
                    ("delta_proj_weight", delta_proj_weight), ("out_proj_weight", out_proj_weight),
                    ("A", A)):
        if not isinstance(t, _Tensor):
            raise TypeError(f"{name}: {what} must be a torch.Tensor, not {type(t).__name__}")
    if A.is_complex():
        raise TypeError(f"{name}: A is complex ({A.dtype}); autotune's kernels are real-valued")
    if xz.dim() != 3 or xz.shape[1] % 2 != 0:
        raise ValueError(f"{name}: xz must be (batch, 2 * dim, seqlen), not {list(xz.shape)}")
    if conv1d_weight.dim() != 3 or conv1d_weight.shape[1] != 1:
        raise ValueError(f"{name}: conv1d_weight must be (dim, 1, width), as nn.Conv1d's "
                         f"depthwise weight, not {list(conv1d_weight.shape)}")
    if A.dim() != 2 or delta_proj_weight.dim() != 2 or x_proj_weight.dim() != 2:
        raise ValueError(f"{name}: A {list(A.shape)}, delta_proj_weight "
                         f"{list(delta_proj_weight.shape)} and x_proj_weight "
                         f"{list(x_proj_weight.shape)} must be matrices")
    batch, dim, seqlen = xz.shape[0], xz.shape[1] // 2, xz.shape[2]
    delta_rank, d_state = delta_proj_weight.shape[1], A.shape[1]
    projected = delta_rank + d_state * ((B is None) + (C is None))
    if x_proj_weight.shape[0] < projected:
        raise ValueError(
            f"{name}: x_proj_weight has {x_proj_weight.shape[0]} rows; dt_rank "
            f"{delta_rank} + dstate {d_state} per variable B/C needs {projected}")
    for what, weight, given in (("b_rms_weight", b_rms_weight, B),
                                ("c_rms_weight", c_rms_weight, C)):
        if weight is not None and given is not None and getattr(given, "ndim", 0) != 4:
            raise ValueError(f"{name}: {what} normalises a variable {what[0].upper()} (None: "
                             f"projected from x, or (batch, 1, dstate, seqlen)), not a fixed one")
    if _autocast_enabled():
        dtype = _autocast_dtype()
        x_proj_weight = x_proj_weight.to(dtype=dtype)
        delta_proj_weight = delta_proj_weight.to(dtype=dtype)
        out_proj_weight = out_proj_weight.to(dtype=dtype)
        if out_proj_bias is not None:
            out_proj_bias = out_proj_bias.to(dtype=dtype)
    if xz.stride(-1) != 1:
        xz = xz.contiguous()
    x, z = xz.chunk(2, dim=1)
    conv1d_out = causal_conv1d_fn(x, conv1d_weight.squeeze(1), conv1d_bias, seq_idx=seq_idx,
                                  activation="silu")
    if conv1d_out.stride(-1) != 1:  # channel-last (seq_idx): the layout the linear reads
        conv1d_out = conv1d_out.contiguous()
    # (b l) d rows for the projection; dt back as "d (b l) -> b d l", read in place.
    x_dbl = F.linear(conv1d_out.transpose(1, 2).reshape(batch * seqlen, dim), x_proj_weight)
    delta = (delta_proj_weight @ x_dbl[:, :delta_rank].t()).view(dim, batch, seqlen)
    delta = delta.permute(1, 0, 2)

    def variable(rows, bias):  # "(b l) dstate -> b 1 dstate l"
        if bias is not None:
            rows = rows + bias.to(dtype=rows.dtype)
        return rows.view(batch, seqlen, d_state).transpose(1, 2).unsqueeze(1).contiguous()

    if B is None:
        B = variable(x_dbl[:, delta_rank:delta_rank + d_state], B_proj_bias)
    if C is None:
        C = variable(x_dbl[:, -d_state:], C_proj_bias)
    if b_rms_weight is not None:
        B = _rms_norm(B, b_rms_weight, b_c_dt_rms_eps, dim=2)
    if c_rms_weight is not None:
        C = _rms_norm(C, c_rms_weight, b_c_dt_rms_eps, dim=2)
    if dt_rms_weight is not None:
        delta = _rms_norm(delta, dt_rms_weight, b_c_dt_rms_eps, dim=1)
    out_z = selective_scan_fn(conv1d_out, delta, A, B, C, D, z=z, delta_bias=delta_bias,
                              delta_softplus=delta_softplus)
    return F.linear(out_z.transpose(1, 2), out_proj_weight, out_proj_bias)


def _rms_norm(t, weight, eps, dim):
    """mamba-ssm's rms_norm_forward over dimension `dim` of t: in float32 (or t's wider
    dtype), weight applied, the result in t's dtype and contiguous."""
    f = t.to(torch.promote_types(t.dtype, torch.float32))
    shape = [1] * t.dim()
    shape[dim] = -1
    f = f * torch.rsqrt(f.square().mean(dim, keepdim=True) + eps) * weight.to(f.dtype).view(shape)
    return f.to(dtype=t.dtype).contiguous()


def _autocast_enabled():
    try:
        return torch.is_autocast_enabled("cuda")
    except TypeError:  # torch before 2.4: the CUDA one without an argument
        return torch.is_autocast_enabled()


def _autocast_dtype():
    try:
        return torch.get_autocast_dtype("cuda")
    except AttributeError:  # torch before 2.4
        return torch.get_autocast_gpu_dtype()


# ---- flash-attn 2 ---------------------------------------------------------------------------
def _features(name, dropout_p, causal, window_size, softcap, alibi_slopes, keys):
    """(causal, window, softcap, alibi_slopes) as the kernels take them, read as flash-attn
    2 reads its arguments, after refusing what they do not do. keys: the tensor whose
    dimension 1 is seqlen_k."""
    if dropout_p != 0.0:
        raise NotImplementedError(
            f"autotune.{name}: dropout_p={dropout_p}: attention dropout is not supported "
            "(forward-only kernels, for inference); pass dropout_p=0.0")
    softcap = float(softcap)
    if not softcap >= 0.0 or softcap == float("inf"):
        raise ValueError(f"autotune.{name}: softcap={softcap}: expected a positive, finite cap "
                         "or 0.0 (off)")
    if alibi_slopes is not None:
        if not isinstance(alibi_slopes, _Tensor):
            raise TypeError(f"autotune.{name}: alibi_slopes must be a float32 tensor of shape "
                            f"(nheads,) or (batch_size, nheads), not {type(alibi_slopes).__name__}")
        if alibi_slopes.dtype != torch.float32:
            raise ValueError(f"autotune.{name}: alibi_slopes is {alibi_slopes.dtype}; flash-attn "
                             "takes float32 slopes")
        if not alibi_slopes.is_contiguous():
            alibi_slopes = alibi_slopes.contiguous()
    window = _NO_WINDOW
    if window_size is not _NO_WINDOW and tuple(window_size) != _NO_WINDOW:
        try:
            given = tuple(int(w) for w in window_size)
        except (TypeError, ValueError):
            given = ()
        if len(given) != 2 or min(given) < -1:
            raise ValueError(f"autotune.{name}: window_size={tuple(window_size)}: expected "
                             "(left, right), each -1 (unbounded) or a number of keys >= 0")
        # flash-attn's reading: a side at least seqlen_k long is unbounded; causal bounds
        # the right side at 0; (unbounded, 0) is causal.
        seqlen_k = keys.shape[1]
        left, right = given
        left = -1 if left >= seqlen_k else left
        right = 0 if causal else (-1 if right >= seqlen_k else right)
        causal = left < 0 and right == 0 or bool(causal)
        if left >= 0 or (right >= 0 and not causal):
            window = (left, right)
    return causal, window, softcap, alibi_slopes


def _pad_head_dim(q, k, v, softmax_scale):
    """A head dim the kernels do not build (not a multiple of 8, or under 32), handled as
    flash-attn handles one it does not build: q, k and v zero-padded in the last dimension
    to the next size the kernels build (the zeros add nothing to q.k and give output
    columns that are cut off afterwards), the softmax scale kept at 1/sqrt(the real head
    dim). Copies q, k and v. Returns (q, k, v, softmax_scale, the real head dim, or None
    when nothing was padded)."""
    try:
        d = q.shape[-1]
        same = k.shape[-1] == d and v.shape[-1] == d
    except AttributeError:
        return q, k, v, softmax_scale, None
    if not same or (d % 8 == 0 and d >= 32) or not 1 <= d <= 256:
        return q, k, v, softmax_scale, None  # as built, or refused by the library
    pad = [0, max(32, (d + 7) // 8 * 8) - d]
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    F = torch.nn.functional
    return F.pad(q, pad), F.pad(k, pad), F.pad(v, pad), scale, d


def _cut_head_dim(result, head_dim, with_lse):
    """The output of padded q, k, v back to the real head dim (a view, as flash-attn
    returns it)."""
    if head_dim is None:
        return result
    if with_lse:
        return (result[0][..., :head_dim],) + tuple(result[1:])
    return result[..., :head_dim]


def _attend(name, q, k, v, softmax_scale, causal, return_attn_probs, window=_NO_WINDOW,
            softcap=0.0, alibi_slopes=None):
    causal = True if causal else False
    with_lse = True if return_attn_probs else False
    if type(q) is _Tensor and not _is_compiling():
        d = q.shape[-1]
        head_dim = None
        if d % 8 or d < 32:  # a head dim the kernels do not build (else q, k, v as given)
            q, k, v, softmax_scale, head_dim = _pad_head_dim(q, k, v, softmax_scale)
        if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            result = _ForwardOnly.apply(name, _ops.attend, q, k, v, causal, softmax_scale,
                                        with_lse, _attn_copies, window, softcap, alibi_slopes)
        else:  # the warm path: the plan's call, nothing built on the way to it
            result = _calls.attention(_ops._plans, _ops._device, q, k, v, causal, softmax_scale,
                                      with_lse, _attn_copies, window, softcap, alibi_slopes)
        if head_dim is not None:
            result = _cut_head_dim(result, head_dim, with_lse)
    else:
        q, k, v, softmax_scale, head_dim = _pad_head_dim(q, k, v, softmax_scale)
        q, k, v = _attn_copies(q, k, v) or (q, k, v)
        fn, args = (_ATTN_LSE if with_lse else _ATTN), (q, k, v, causal, softmax_scale,
                                                        window[0], window[1], softcap,
                                                        alibi_slopes)
        result = _attention_forward(name, fn, args, q, k, v, head_dim, with_lse)
    if not return_attn_probs:
        return result
    out, lse = result
    if (causal or window[1] >= 0) and q.shape[1] > k.shape[1]:
        # Rows that see no key (a right bound with seqlen_q > seqlen_k): autotune's LSE is
        # -inf (the log of an empty sum); flash-attn 2 returns +inf there.
        lse = lse.masked_fill(lse == float("-inf"), float("inf"))
    if alibi_slopes is not None and causal and window[0] < 0:
        seqlen_q, seqlen_k = q.shape[1], k.shape[1]
        rows = torch.arange(seqlen_q, device=lse.device, dtype=torch.float32) + \
            (seqlen_k - seqlen_q)
        lse = _alibi_lse(lse, alibi_slopes, rows[None, :])
    # flash-attn returns S_dmask only with dropout; without it, an empty tensor.
    return out, lse, q.new_empty((0,))


def _attention_forward(name, fn, args, q, k, v, head_dim, with_lse):
    """fn(*args) (forward only: a backward through it raises), its output cut back to
    head_dim when the head dim was padded."""
    if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        result = _ForwardOnly.apply(name, fn, *args)
    else:
        result = fn(*args)
    return _cut_head_dim(result, head_dim, with_lse)


def _alibi_lse(lse, slopes, rows):
    """An LSE [batch, nheads, seqlen_q] as flash-attn 2 returns it under causal ALiBi: its
    causal kernel adds slope * j to the logits, not -slope * (i + Sk - Sq - j), which gives
    the same O and an LSE larger by slope * (i + Sk - Sq). rows: i + Sk - Sq per batch and
    row, [batch or 1, seqlen_q]; slopes [nheads] or [batch, nheads]."""
    slopes = slopes if slopes.dim() == 2 else slopes.unsqueeze(0)
    return lse + slopes[:, :, None] * rows[:, None, :]


def _attn_copies(q, k, v):
    """Contiguous copies of q, k, v whose last dimension is strided (flash-attn makes
    them too), or None when none is needed."""
    try:
        if q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1:
            return None
        return _last_contiguous(q), _last_contiguous(k), _last_contiguous(v)
    except AttributeError:
        return None


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=_NO_WINDOW, softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    """flash-attn 2's flash_attn_func.

    q: (batch, seqlen_q, nheads, headdim); k, v: (batch, seqlen_k, nheads_k, headdim),
    fp16/bf16 (one dtype), nheads a multiple of nheads_k (MQA/GQA); headdim up to 256
    (the kernels build multiples of 8 from 32; other head dims run on zero-padded copies,
    as flash-attn runs them); any batch/seq/head strides (multiples of 8 elements).
    causal: bottom-right aligned when seqlen_q != seqlen_k (a row that sees no key is 0).
    window_size: (left, right), -1 unbounded: query i sees keys i + seqlen_k - seqlen_q -
    left ..= i + seqlen_k - seqlen_q + right (sliding-window / local attention), read as
    flash-attn reads it (causal makes right 0; a side >= seqlen_k is unbounded).
    softcap: > 0 turns each logit s into softcap * tanh(s / softcap); 0.0 off; negative
    raises ValueError.
    alibi_slopes: float32 (nheads,) or (batch_size, nheads): the logit of query i and key
    j gets -slope * |i + seqlen_k - seqlen_q - j|. All of these combine, as in flash-attn.
    softmax_scale: None is 1/sqrt(headdim). deterministic: accepted (the forward pass is
    deterministic). dropout_p != 0 raises NotImplementedError.

    out: (batch, seqlen_q, nheads, headdim); with return_attn_probs, (out, softmax_lse
    (batch, nheads, seqlen_q) fp32, S_dmask) where S_dmask is empty, as flash-attn returns
    it without dropout.
    """
    if dropout_p or softcap or alibi_slopes is not None or window_size is not _NO_WINDOW:
        causal, window, softcap, alibi_slopes = _features(
            "flash_attn_func", dropout_p, causal, window_size, softcap, alibi_slopes, k)
        return _attend("flash_attn_func", q, k, v, softmax_scale, causal, return_attn_probs,
                       window, softcap, alibi_slopes)
    return _attend("flash_attn_func", q, k, v, softmax_scale, causal, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=_NO_WINDOW, softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """flash-attn 2's flash_attn_qkvpacked_func: qkv (batch, seqlen, 3, nheads, headdim),
    read in place (q, k and v are views of it); otherwise as flash_attn_func."""
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError("autotune.flash_attn_qkvpacked_func: qkv must be (batch, seqlen, 3, "
                         f"nheads, headdim), not {list(qkv.shape)}")
    causal, window, softcap, alibi_slopes = _features(
        "flash_attn_qkvpacked_func", dropout_p, causal, window_size, softcap, alibi_slopes, qkv)
    q, k, v = qkv.unbind(2)
    return _attend("flash_attn_qkvpacked_func", q, k, v, softmax_scale, causal,
                   return_attn_probs, window, softcap, alibi_slopes)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=_NO_WINDOW, softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """flash-attn 2's flash_attn_kvpacked_func: q (batch, seqlen_q, nheads, headdim), kv
    (batch, seqlen_k, 2, nheads_k, headdim), read in place; otherwise as flash_attn_func."""
    if kv.dim() != 5 or kv.shape[2] != 2:
        raise ValueError("autotune.flash_attn_kvpacked_func: kv must be (batch, seqlen_k, 2, "
                         f"nheads_k, headdim), not {list(kv.shape)}")
    causal, window, softcap, alibi_slopes = _features(
        "flash_attn_kvpacked_func", dropout_p, causal, window_size, softcap, alibi_slopes, kv)
    k, v = kv.unbind(2)
    return _attend("flash_attn_kvpacked_func", q, k, v, softmax_scale, causal, return_attn_probs,
                   window, softcap, alibi_slopes)


class _SeqlenK:
    """What _features reads of the keys (shape[1], seqlen_k) for a varlen call: flash-attn
    reads a window side >= max_seqlen_k as unbounded."""

    def __init__(self, max_seqlen_k):
        self.shape = (0, int(max_seqlen_k))


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=_NO_WINDOW, softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash-attn 2's flash_attn_varlen_func: variable-length sequences packed.

    q: (total_q, nheads, headdim); k, v: (total_k, nheads_k, headdim), fp16/bf16, nheads a
    multiple of nheads_k; headdim up to 256 (the kernels build multiples of 8 from 32;
    other head dims run on zero-padded copies, as in flash_attn_func); token and head
    strides multiples of 8 elements (a strided last dimension is copied first).
    cu_seqlens_q, cu_seqlens_k: (batch_size + 1,) torch.int32 CUDA tensors, the sequences'
    cumulative lengths (sequence b is rows cu_seqlens[b] .. cu_seqlens[b+1] - 1). They are
    read on the GPU, never checked there (flash-attn does not either): they must start at
    0, not decrease and end within total_q (total_k). Each sequence is clamped into the
    tensors, so a wrong offset computes wrong rows but never reads or writes past q, k, v,
    out or the LSE. A sequence may be empty.
    max_seqlen_q, max_seqlen_k: ints >= 1, the longest sequences; a longer one is computed
    only up to max_seqlen_q rows (as in flash-attn). The tuning key buckets them and the
    totals to powers of two.
    causal (bottom-right aligned per sequence), window_size, softcap, alibi_slopes
    ((nheads,) or (batch_size, nheads) fp32), softmax_scale, deterministic: as
    flash_attn_func, per sequence. dropout_p != 0 raises NotImplementedError.
    block_table: (batch_size, max_num_blocks_per_seq) torch.int32 on q's device, k and v
    then a paged KV cache (num_blocks, page_block_size, nheads_k, headdim), as in
    flash-attn: sequence b's keys are the first cu_seqlens_k[b + 1] - cu_seqlens_k[b]
    keys of its pages block_table[b] (read in place; page_block_size a multiple of 16
    that a variant's block_n divides, as flash_attn_with_kvcache's).

    out: (total_q, nheads, headdim); with return_attn_probs, (out, softmax_lse (nheads,
    total_q) fp32, an empty S_dmask). Rows that see no key: O = 0 and LSE +inf, as
    flash-attn 2 returns them; with ALiBi under causal (no left bound) the LSE carries
    flash-attn 2's offset slope * (i + Sk - Sq), as in flash_attn_func.
    """
    return _attend_varlen("flash_attn_varlen_func", q, k, v, cu_seqlens_q, cu_seqlens_k,
                          max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                          window_size, softcap, alibi_slopes, return_attn_probs, block_table)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=_NO_WINDOW,
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash-attn 2's flash_attn_varlen_qkvpacked_func: qkv (total, 3, nheads, headdim),
    read in place (q, k and v are views of it), one cu_seqlens and max_seqlen for queries
    and keys; otherwise as flash_attn_varlen_func."""
    name = "flash_attn_varlen_qkvpacked_func"
    if not isinstance(qkv, _Tensor) or qkv.dim() != 4 or qkv.shape[1] != 3:
        raise ValueError(f"autotune.{name}: qkv must be a (total_tokens, 3, nheads, headdim) "
                         f"tensor, not {_describe(qkv)}")
    q, k, v = qkv.unbind(1)
    return _attend_varlen(name, q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                          dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                          return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=_NO_WINDOW, softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False):
    """flash-attn 2's flash_attn_varlen_kvpacked_func: q (total_q, nheads, headdim), kv
    (total_k, 2, nheads_k, headdim) read in place; otherwise as flash_attn_varlen_func."""
    name = "flash_attn_varlen_kvpacked_func"
    if not isinstance(kv, _Tensor) or kv.dim() != 4 or kv.shape[1] != 2:
        raise ValueError(f"autotune.{name}: kv must be a (total_k, 2, nheads_k, headdim) "
                         f"tensor, not {_describe(kv)}")
    k, v = kv.unbind(1)
    return _attend_varlen(name, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                          dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                          return_attn_probs)


def _describe(x):
    return list(x.shape) if isinstance(x, _Tensor) else type(x).__name__


def _attend_varlen(name, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                   dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                   return_attn_probs, block_table=None):
    """flash_attn_varlen_func and its packed forms, name naming the one called; with
    block_table, k and v are a paged cache."""
    for what, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, _Tensor):
            raise TypeError(f"autotune.{name}: {what} must be a torch.Tensor, not "
                            f"{type(t).__name__}")
        if block_table is not None and what != "q":
            if t.dim() != 4:
                raise ValueError(f"autotune.{name}: {what} must be (num_blocks, page_block_size, "
                                 f"nheads_k, headdim) with a block_table, not {list(t.shape)}")
        elif t.dim() != 3:
            raise ValueError(f"autotune.{name}: {what} must be (total_tokens, nheads, headdim), "
                             f"not {list(t.shape)}")
    if block_table is not None:
        if not isinstance(block_table, _Tensor) or block_table.dtype != torch.int32:
            raise TypeError(f"autotune.{name}: block_table must be a torch.int32 tensor "
                            "(batch_size, max_num_blocks_per_seq), not "
                            f"{getattr(block_table, 'dtype', type(block_table).__name__)}")
        if block_table.device != q.device:
            raise ValueError(f"autotune.{name}: block_table is on {block_table.device}, q on "
                             f"{q.device}; both must be on the same CUDA device")
    for what, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(t, _Tensor):
            raise TypeError(f"autotune.{name}: {what} must be a torch.int32 tensor, not "
                            f"{type(t).__name__}")
        if t.dtype != torch.int32:
            raise TypeError(f"autotune.{name}: {what} is {t.dtype}; flash-attn takes torch.int32 "
                            "cumulative sequence lengths")
        if t.dim() != 1 or t.shape[0] < 2:
            raise ValueError(f"autotune.{name}: {what} must be (batch_size + 1,) with "
                             f"batch_size >= 1, not {list(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"autotune.{name}: {what} is on {t.device}, q on {q.device}; both "
                             "must be on the same CUDA device")
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(f"autotune.{name}: cu_seqlens_q has {cu_seqlens_q.shape[0]} entries, "
                         f"cu_seqlens_k {cu_seqlens_k.shape[0]}: both are (batch_size + 1,)")
    for what, n in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"autotune.{name}: {what} must be an int, not {type(n).__name__}")
        if n < 1:
            raise ValueError(f"autotune.{name}: {what}={n} must be >= 1")
    causal, window, softcap, alibi_slopes = _features(
        name, dropout_p, causal, window_size, softcap, alibi_slopes, _SeqlenK(max_seqlen_k))
    if not q.is_cuda:
        raise ValueError(f"autotune.{name}: q is on {q.device}; autotune's kernels take CUDA "
                         "tensors")
    q, k, v = _attn_copies(q, k, v) or (q, k, v)
    q, k, v, softmax_scale, head_dim = _pad_head_dim(q, k, v, softmax_scale)
    with_lse = True if return_attn_probs else False
    if type(q) is _Tensor and not _is_compiling():
        fn = _varlen_warm
        args = (q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                causal, softmax_scale, with_lse, window, softcap, alibi_slopes, block_table)
    else:  # traced (torch.compile): the registered operator, one node of the graph
        fn = _VARLEN_LSE if with_lse else _VARLEN
        args = (q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                causal, softmax_scale, window[0], window[1], softcap, alibi_slopes, block_table)
    result = _attention_forward(name, fn, args, q, k, v, head_dim, with_lse)
    if not return_attn_probs:
        return result
    out, lse = result
    if causal or window[1] >= 0:
        lse = lse.masked_fill(lse == float("-inf"), float("inf"))
    if alibi_slopes is not None and causal and window[0] < 0:
        lse = lse + _varlen_alibi_offset(alibi_slopes, cu_seqlens_q, cu_seqlens_k, lse.shape[1])
    return out, lse, q.new_empty((0,))


def _varlen_warm(*args):
    """The varlen call on the package's per-signature plans (_calls.varlen)."""
    return _calls.varlen(_ops._plans, _ops._device, *args)


def _varlen_alibi_offset(slopes, cu_seqlens_q, cu_seqlens_k, total_q):
    """flash-attn 2's causal-ALiBi LSE offset (see _attend) of a varlen call's packed rows,
    [heads, total_q]: slope * (i + seqlen_k - seqlen_q), i the row within its sequence."""
    t = torch.arange(total_q, device=cu_seqlens_q.device, dtype=cu_seqlens_q.dtype)
    seq = torch.searchsorted(cu_seqlens_q[1:].contiguous(), t, right=True)
    seq = seq.clamp(max=cu_seqlens_q.shape[0] - 2)
    shift = (t - cu_seqlens_q[seq] + (cu_seqlens_k[seq + 1] - cu_seqlens_k[seq])
             - (cu_seqlens_q[seq + 1] - cu_seqlens_q[seq])).float()
    per_row = slopes.unsqueeze(1) if slopes.dim() == 1 else slopes[seq].t()
    return per_row * shift


def _rotary(x, cos, sin, positions, interleaved):
    """x (batch, seqlen, nheads, headdim) with its first rotary_dim = 2 * cos.shape[1]
    dimensions rotated by the angles of rows `positions` (batch, seqlen) of cos and sin:
    pairs (2i, 2i + 1) when interleaved (GPT-J), else (i, i + rotary_dim / 2) (GPT-NeoX);
    in float32, rounded to x's dtype once, as flash-attn 2 rotates. A new tensor."""
    half = cos.shape[1]
    c = cos[positions].float().unsqueeze(2)  # (batch, seqlen, 1, half)
    s = sin[positions].float().unsqueeze(2)
    rotated = x[..., :2 * half].float()
    if interleaved:
        x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
        rotated = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    else:
        x1, x2 = rotated[..., :half], rotated[..., half:]
        rotated = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    return torch.cat((rotated.to(x.dtype), x[..., 2 * half:]), dim=-1)


def _kvcache_rotary(name, q, k, cos, sin, interleaved, cache_seqlens, capacity, per_row):
    """flash_attn_with_kvcache's rotary embedding of q and the new keys k (see its
    docstring), every argument checked first; per_row: causal or windowed (query i at
    cache_seqlens + i, else every query at cache_seqlens)."""
    if cos is None or sin is None:
        raise ValueError(f"autotune.{name}: rotary_cos and rotary_sin go together")
    if k is None:
        raise ValueError(f"autotune.{name}: rotary_cos/rotary_sin rotate the new keys: k and v "
                         "must be given with them")
    for what, t in (("rotary_cos", cos), ("rotary_sin", sin)):
        if not isinstance(t, _Tensor) or t.dim() != 2:
            raise ValueError(f"autotune.{name}: {what} must be a (seqlen_ro, rotary_dim / 2) "
                             f"tensor, not {_describe(t)}")
        if t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"autotune.{name}: {what} is {t.dtype} on {t.device}; it must be "
                             f"q's dtype and device ({q.dtype} on {q.device})")
    if not isinstance(k, _Tensor) or k.dim() != 4 or k.shape[0] != q.shape[0]:
        raise ValueError(f"autotune.{name}: k must be (batch_size, seqlen_new, nheads_k, "
                         f"headdim) with q's batch size {q.shape[0]}, not {_describe(k)}")
    if tuple(cache_seqlens.shape) != (q.shape[0],) or cache_seqlens.device != q.device:
        raise ValueError(f"autotune.{name}: cache_seqlens must be ({q.shape[0]},) on {q.device}, "
                         f"not {list(cache_seqlens.shape)} on {cache_seqlens.device}")
    if cos.shape != sin.shape:
        raise ValueError(f"autotune.{name}: rotary_cos is {list(cos.shape)}, rotary_sin "
                         f"{list(sin.shape)}: the same shape")
    rotary_dim = 2 * cos.shape[1]
    if rotary_dim % 16 or not 0 < rotary_dim <= q.shape[-1]:
        raise ValueError(f"autotune.{name}: rotary_dim = 2 * rotary_cos.shape[1] = {rotary_dim} "
                         f"must be a multiple of 16 in 16..headdim ({q.shape[-1]})")
    if cos.shape[0] < capacity:
        raise ValueError(f"autotune.{name}: rotary_cos has {cos.shape[0]} positions, fewer than "
                         f"the {capacity} keys the cache holds")
    seqlen_new, seqlen_q = k.shape[1], q.shape[1]
    # Each sequence's first new row, as the kernel clamps the cache length; positions are
    # kept inside the table (a position past it would fault the GPU).
    start = cache_seqlens.clamp(0, max(capacity - seqlen_new, 0)).long()[:, None]
    last = cos.shape[0] - 1
    k_pos = (start + torch.arange(seqlen_new, device=q.device)).clamp_(max=last)
    q_pos = (start + torch.arange(seqlen_q, device=q.device)) if per_row else \
        start.expand(-1, seqlen_q)
    return (_rotary(q, cos, sin, q_pos.clamp(max=last), interleaved),
            _rotary(k, cos, sin, k_pos, interleaved))


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=_NO_WINDOW, softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """flash-attn 2's flash_attn_with_kvcache: decoding against a KV cache.

    q: (batch_size, seqlen_q, nheads, headdim). k_cache, v_cache: (batch_size_cache,
    seqlen_cache, nheads_k, headdim), or paged (num_blocks, page_block_size, nheads_k,
    headdim) with block_table (batch_size, max_num_blocks_per_seq) torch.int32;
    page_block_size a multiple of 16 that a variant's block_n divides (flash-attn uses
    multiples of 256). cache_seqlens: int or (batch_size,) torch.int32, each sequence's
    cached keys (read on the GPU, clamped into the cache). cache_leftpad: None or
    (batch_size,) torch.int32 on q's device, a contiguous cache only (refused with
    block_table, as flash-attn refuses it): sequence b's keys start at cache row
    cache_leftpad[b] (rows before it are padding), so it attends rows cache_leftpad[b] ..
    cache_seqlens[b] - 1 and the new keys; causal, the window and ALiBi then count its keys
    from cache_leftpad[b] (seqlen_k = cache_seqlens[b] - cache_leftpad[b] + seqlen_new),
    while the new keys are still written at cache_seqlens[b].. and rotary positions stay
    cache_seqlens-based, as in flash-attn (read on the GPU, clamped into [0,
    cache_seqlens[b]]). k, v: (batch_size, seqlen_new, nheads_k, headdim) appended at
    cache_seqlens[b].. (written into the cache, in place, by the same launch) and attended.
    causal is bottom-right aligned against each sequence's keys; window_size, softcap,
    alibi_slopes, softmax_scale as flash_attn_func. num_splits is the tuner's choice
    (split-KV variants) and ignored. rotary_cos, rotary_sin (seqlen_ro, rotary_dim / 2) in
    q's dtype, rotary_dim a multiple of 16 up to headdim, seqlen_ro covering the cache,
    with k and v given: the new keys are rotated at positions cache_seqlens,
    cache_seqlens + 1, ... and written rotated; the queries at cache_seqlens + i when
    causal or windowed, else all at cache_seqlens (flash-attn 2's convention), pairs
    (2i, 2i + 1) when rotary_interleaved, else (i, i + rotary_dim / 2); here by torch
    operations in float32 before the attention launch, not fused into it.
    cache_batch_idx: None or (batch_size,) torch.int32 on q's device, a contiguous cache
    only (refused with block_table, as flash-attn refuses it): k_cache and v_cache are then
    (batch_size_cache, seqlen_cache, nheads_k, headdim), a pool of cache slots of any size,
    and sequence b reads slot cache_batch_idx[b] (and appends k, v there), while
    cache_seqlens, cache_leftpad and k, v stay indexed by b. Read on the GPU, clamped into
    [0, batch_size_cache) (flash-attn leaves an index out of range undefined); two sequences
    appending to one slot write it in an unspecified order, as in flash-attn.

    A head dim the kernels do not build (not a multiple of 8, or under 32; up to 256)
    runs as flash-attn runs it: q, the caches and k, v are zero-padded copies to the next
    size the kernels build, the output is cut back (a view), and when k, v were appended
    the padded caches' first headdim columns are copied back into k_cache and v_cache in
    place. That copies the whole cache twice per call: correct but slow (flash-attn pays
    the same); a head dim the kernels build reads the cache in place. softmax_scale
    defaults to 1/sqrt(headdim) of the real head dim.

    out: (batch_size, seqlen_q, nheads, headdim); with return_softmax_lse also the fp32
    softmax_lse (batch_size, nheads, seqlen_q) as flash-attn 2 returns it (+inf on rows
    that see no key, its causal-ALiBi offset as in flash_attn_func).
    """
    name = "flash_attn_with_kvcache"
    for what, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, _Tensor):
            raise TypeError(f"autotune.{name}: {what} must be a torch.Tensor, not "
                            f"{type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"autotune.{name}: {what} must be 4-d, not {list(t.shape)}")
    if (k is None) != (v is None):
        raise ValueError(f"autotune.{name}: k and v (the new keys and values) go together")
    if cache_leftpad is not None:
        _check_cache_index(name, cache_leftpad, block_table, q)
    if cache_batch_idx is not None:
        _check_cache_index(name, cache_batch_idx, block_table, q, "cache_batch_idx")
    if not q.is_cuda:
        raise ValueError(f"autotune.{name}: q is on {q.device}; autotune's kernels take CUDA "
                         "tensors")
    B = q.shape[0]
    if cache_seqlens is None:
        raise ValueError(f"autotune.{name}: cache_seqlens is required (an int or a "
                         "(batch_size,) torch.int32 tensor)")
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=q.device)
    if not isinstance(cache_seqlens, _Tensor) or cache_seqlens.dtype != torch.int32:
        raise TypeError(f"autotune.{name}: cache_seqlens must be an int or a torch.int32 "
                        "tensor")
    if block_table is not None:
        if not isinstance(block_table, _Tensor) or block_table.dtype != torch.int32:
            raise TypeError(f"autotune.{name}: block_table must be a torch.int32 tensor")
        capacity = block_table.shape[1] * k_cache.shape[1]
    else:
        capacity = k_cache.shape[1]
    causal, window, softcap, alibi_slopes = _features(
        name, 0.0, causal, window_size, softcap, alibi_slopes, _SeqlenK(capacity))
    if rotary_cos is not None or rotary_sin is not None:
        q, k = _kvcache_rotary(name, q, k, rotary_cos, rotary_sin, rotary_interleaved,
                               cache_seqlens, capacity, causal or window != _NO_WINDOW)
    caches = (k_cache, v_cache)  # the caller's
    head_dim = None
    d = q.shape[-1]
    if d % 8 or d < 32:  # a head dim the kernels do not build: padded copies
        q, k_cache, v_cache, k, v, softmax_scale, head_dim = _kvcache_pad_head_dim(
            q, k_cache, v_cache, k, v, softmax_scale)
    if type(q) is _Tensor and not _is_compiling():
        result = _calls.kvcache(_ops._plans, _ops._device, q, k_cache, v_cache, cache_seqlens,
                                block_table, k, v, bool(causal), softmax_scale,
                                bool(return_softmax_lse), window, softcap, alibi_slopes,
                                cache_leftpad, cache_batch_idx)
    else:  # traced (torch.compile): the registered operator, which writes the caches
        result = (_KVCACHE_LSE if return_softmax_lse else _KVCACHE)(
            q, k_cache, v_cache, cache_seqlens, block_table, k, v, causal, softmax_scale,
            window[0], window[1], softcap, alibi_slopes, cache_leftpad, cache_batch_idx)
    if head_dim is not None:
        result = _kvcache_cut_head_dim(result, head_dim, bool(return_softmax_lse), caches,
                                       (k_cache, v_cache), k is not None)
    if not return_softmax_lse:
        return result
    # softmax_lse as flash-attn 2 returns it: +inf on rows that see no key, and under
    # causal ALiBi without a left bound larger by slope * (i + seqlen_k - seqlen_q) (see
    # _attend), seqlen_k being each sequence's keys: its cached ones (clamped into the
    # cache as the kernel clamps them), less its left padding (clamped likewise), plus the
    # new ones.
    out, lse = result
    lse = lse.masked_fill(lse == float("-inf"), float("inf"))
    if alibi_slopes is not None and causal and window[0] < 0:
        seqlen_new = 0 if k is None else k.shape[1]
        seqlen_q = q.shape[1]
        cached = cache_seqlens.clamp(0, max(capacity - seqlen_new, 0))
        if cache_leftpad is not None:
            cached = cached - torch.minimum(cache_leftpad.clamp(min=0), cached)
        seqlen_k = cached + seqlen_new
        lse = _alibi_lse(lse, alibi_slopes,
                         torch.arange(seqlen_q, device=lse.device, dtype=torch.float32)[None, :]
                         + (seqlen_k - seqlen_q).float()[:, None])
    return out, lse


def _kvcache_pad_head_dim(q, k_cache, v_cache, k, v, softmax_scale):
    """flash_attn_with_kvcache with a head dim the kernels do not build (not a multiple of
    8, or under 32; at most 256), as flash-attn runs it: q, the caches and the new k, v
    zero-padded in the last dimension to the next size the kernels build (copies), the
    softmax scale kept at 1/sqrt(the real head dim). Returns (q, k_cache, v_cache, k, v,
    softmax_scale, the real head dim), or the arguments and None when their head dims
    differ or are out of range (the library then refuses them by name)."""
    d = q.shape[-1]
    given = [t for t in (k_cache, v_cache, k, v) if t is not None]
    if not 1 <= d <= 256 or any(not isinstance(t, _Tensor) or t.shape[-1] != d for t in given):
        return q, k_cache, v_cache, k, v, softmax_scale, None
    pad = [0, max(32, (d + 7) // 8 * 8) - d]
    F = torch.nn.functional
    q, k_cache, v_cache = F.pad(q, pad), F.pad(k_cache, pad), F.pad(v_cache, pad)
    if k is not None:
        k, v = F.pad(k, pad), F.pad(v, pad)
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    return q, k_cache, v_cache, k, v, scale, d


def _kvcache_cut_head_dim(result, head_dim, with_lse, caches, padded, appended):
    """The output of a launch on padded copies (_kvcache_pad_head_dim) cut back to the
    real head dim (a view, as flash-attn returns it); when new keys were appended (into the
    padded copies), the padded caches' first head_dim columns copied back into the
    caller's caches, every row, as flash-attn copies them."""
    if appended:
        caches[0].copy_(padded[0][..., :head_dim])
        caches[1].copy_(padded[1][..., :head_dim])
    return _cut_head_dim(result, head_dim, with_lse)


def _check_cache_index(name, index, block_table, q, what="cache_leftpad"):
    """flash_attn_with_kvcache's cache_leftpad (or cache_batch_idx, what): a torch.int32
    (batch_size,) tensor on q's device, with a contiguous cache (flash-attn refuses both with
    a paged one)."""
    if block_table is not None:
        raise ValueError(f"autotune.{name}: {what} is not supported with a paged KV cache "
                         f"(block_table), as in flash-attn: pass a contiguous cache or no {what}")
    _check_int32_vector(f"autotune.{name}", what, index, q.shape[0], q, "batch_size")
