"""The GPU checks of the autotune Python package (run by run_gpu.py and by pytest through
test_gpu.py; torch and a CUDA GPU needed):

- conformance: the peers' own forward test grids for what autotune supports, with their
  parameter lists, inputs and pass criteria, against float32 references written here
  (causal-conv1d tests/test_causal_conv1d.py::test_causal_conv1d, mamba-ssm
  tests/ops/test_selective_scan.py::test_selective_scan and ::test_mamba_inner_fn, flash-attn
  tests/test_flash_attn.py::test_flash_attn_output, ::test_flash_attn_qkvpacked,
  ::test_flash_attn_varlen_output and ::test_flash_attn_kvcache);
- the registered operators: torch.library.opcheck (schema, fake implementation against
  the real one, AOT dispatch with dynamic shapes), torch.compile(fullgraph=True) with
  inductor and with dynamic shapes, CUDA graph capture and replay;
- the drop-ins' behaviour (peer layouts, refusals by name, forward-only autograd);
- the bad-input suite: every mistake issue 16 lists, each to end in an exception with a
  healthy CUDA context and unchanged inputs.
"""
import math
import os
import sys
import threading

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import autotune  # noqa: E402
from harness import ContextLost, judge_bad_input, run_grid  # noqa: E402

DEV = "cuda"
OPS = None  # torch.ops.autotune, once setup() ran


def setup(lib=None, db=None, policy=None):
    """Point the package at a library / database / policy, keep the references exact."""
    global OPS
    if lib:
        os.environ["AUTOTUNE_LIBRARY"] = os.path.abspath(lib)
    if db:
        autotune.set_database(db)
    if policy:
        autotune.set_policy(policy)
    # float32 references in full float32 (no TF32 in matmuls or cuDNN convolutions).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    OPS = torch.ops.autotune


def health():
    try:
        torch.cuda.synchronize()
        torch.ones(8, device=DEV).sum().item()
    except Exception as e:  # noqa: BLE001
        raise ContextLost(f"{type(e).__name__}: {e}") from e


def product(**lists):
    cases = [{}]
    for name, values in lists.items():
        cases = [dict(c, **{name: v}) for c in cases for v in values]
    return cases


# =====================================================================================
# causal-conv1d: tests/test_causal_conv1d.py::test_causal_conv1d
# =====================================================================================
def conv_ref(x, weight, bias=None, initial_states=None, return_final_states=False,
             activation=None):
    """causal-conv1d's causal_conv1d_ref: computed in weight's dtype (fp32 in the grid)."""
    dtype_in = x.dtype
    x = x.to(weight.dtype)
    seqlen = x.shape[-1]
    dim, width = weight.shape
    if initial_states is None:
        out = F.conv1d(x, weight.unsqueeze(1), bias, padding=width - 1, groups=dim)
    else:
        x = torch.cat([initial_states.to(weight.dtype), x], dim=-1)
        out = F.conv1d(x, weight.unsqueeze(1), bias, padding=0, groups=dim)
    out = out[..., :seqlen]
    final = F.pad(x, (width - 1 - x.shape[-1], 0)).to(dtype_in) if return_final_states else None
    out = (out if activation is None else F.silu(out)).to(dtype_in)
    return out, final


CONV_GRID = dict(
    return_final_states=[False, True], has_initial_states=[False, True],
    channel_last=[False, True], itype=[torch.float32, torch.float16, torch.bfloat16],
    silu_activation=[False, True], has_bias=[False, True], width=[2, 3, 4],
    seqlen=[1, 2, 8, 16, 32, 64, 128, 129, 130, 151, 256, 372, 512, 784, 1024, 1134, 2048,
            4096],
    dim=[64, 4096 + 32])


def conv_cases():
    # The peer skips channel-first x with initial or final states.
    return [c for c in product(**CONV_GRID)
            if c["channel_last"] or not (c["has_initial_states"] or c["return_final_states"])]


def conv_tolerance(itype):
    """causal-conv1d's test tolerances (rtol, atol) for an input dtype."""
    if itype == torch.bfloat16:
        return 1e-2, 5e-2
    return (3e-4, 1e-3) if itype == torch.float32 else (3e-3, 5e-3)


def conv_run(c):
    itype, dim, seqlen, width = c["itype"], c["dim"], c["seqlen"], c["width"]
    rtol, atol = conv_tolerance(itype)
    torch.random.manual_seed(0)
    batch = 2
    if not c["channel_last"]:
        x = torch.randn(batch, 4096 + dim + 64, seqlen, device=DEV,
                        dtype=itype)[:, 4096:4096 + dim, :]
    else:
        x = torch.randn(batch, seqlen, 4096 + dim + 64, device=DEV,
                        dtype=itype)[:, :, 4096:4096 + dim].transpose(1, 2)
    weight = torch.randn(dim, width, device=DEV, dtype=torch.float32)
    bias = torch.randn(dim, device=DEV, dtype=torch.float32) if c["has_bias"] else None
    initial_states = (torch.randn(batch, width - 1, dim, device=DEV, dtype=itype).transpose(1, 2)
                      if c["has_initial_states"] else None)
    activation = "silu" if c["silu_activation"] else None
    rfs = c["return_final_states"]
    out = autotune.causal_conv1d_fn(x, weight, bias, initial_states=initial_states,
                                    return_final_states=rfs, activation=activation)
    out_ref, final_ref = conv_ref(x, weight, bias, initial_states, rfs, activation)
    if rfs:
        out, final = out
        if not torch.allclose(final, final_ref, rtol=rtol, atol=atol):
            return False, f"final states max diff {(final - final_ref).abs().max().item():.3g}"
    if not torch.allclose(out, out_ref, rtol=rtol, atol=atol):
        return False, f"output max diff {(out.float() - out_ref.float()).abs().max().item():.3g}"
    return True, ""


def conv_key(c):
    # Channel-last x is read in place (its own kernel form): its own compiled problem.
    return tuple(v for k, v in sorted(c.items()))


# causal-conv1d: tests/test_causal_conv1d.py::test_causal_conv1d_varlen (packed sequences in
# each row, seq_idx) and ::test_causal_conv1d_varlen_padding (rows ending in padding, seq_idx
# -1, whose outputs must be 0); channel-last x, as the peer supports it.
CONV_VARLEN_GRID = dict(
    padding=[False, True], itype=[torch.float32, torch.float16, torch.bfloat16],
    silu_activation=[False, True], has_bias=[False, True], width=[2, 3, 4],
    seqlen=[8, 16, 32, 63, 64, 65, 127, 128, 129, 151, 256, 257, 372, 512, 784, 1024, 1134,
            2048, 4096],
    dim=[64, 4096 + 32])


def conv_varlen_cases():
    # The padding test's own seqlen list.
    return [c for c in product(**CONV_VARLEN_GRID)
            if not c["padding"] or c["seqlen"] in (128, 256, 512, 1024)]


def conv_varlen_run(c):
    itype, dim, seqlen, width = c["itype"], c["dim"], c["seqlen"], c["width"]
    rtol, atol = conv_tolerance(itype)
    torch.random.manual_seed(seqlen + dim + width)
    batch = 3
    # Per row: the peer's sub-sequence lengths (1-4 splits at random positions) over the
    # whole row, or (padding) over a random true length in [seqlen / 2, seqlen], the rest -1.
    true_lens = ([torch.randint(seqlen // 2, seqlen + 1, (1,)).item() for _ in range(batch)]
                 if c["padding"] else [seqlen] * batch)
    seqlens = []
    for n in true_lens:
        nsplits = torch.randint(1, 4 if c["padding"] else 5, (1,)).item()
        eos = torch.randperm(n - 1)[:nsplits].sort().values
        seqlens.append(torch.diff(torch.cat([torch.tensor([-1]), eos,
                                             torch.tensor([n - 1])])).tolist())
    x = torch.randn(batch, seqlen, 4096 + dim + 64, device=DEV,
                    dtype=itype)[:, :, 4096:4096 + dim].transpose(1, 2)
    weight = torch.randn(dim, width, device=DEV, dtype=torch.float32)
    bias = torch.randn(dim, device=DEV, dtype=torch.float32) if c["has_bias"] else None
    rows, next_id = [], 0
    for b, sl in enumerate(seqlens):
        ids = []
        for s in sl:
            ids.append(torch.full((s,), next_id if c["padding"] else len(ids), dtype=torch.int32,
                                  device=DEV))
            next_id += 1
        ids.append(torch.full((seqlen - true_lens[b],), -1, dtype=torch.int32, device=DEV))
        rows.append(torch.cat(ids))
    seq_idx = torch.stack(rows)
    activation = "silu" if c["silu_activation"] else None
    out = autotune.causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx, activation=activation)
    out_ref = torch.zeros_like(x)
    for b in range(batch):
        parts = [conv_ref(x_s, weight, bias, activation=activation)[0]
                 for x_s in torch.split(x[[b], :, :true_lens[b]], seqlens[b], dim=2)]
        out_ref[b, :, :true_lens[b]] = torch.cat(parts, dim=2)[0]
    if not torch.allclose(out, out_ref, rtol=rtol, atol=atol):
        return False, f"output max diff {(out.float() - out_ref.float()).abs().max().item():.3g}"
    if c["padding"] and bool((out[:, :, min(true_lens):] * (seq_idx[:, None, min(true_lens):] < 0)
                              ).abs().max() != 0):
        return False, "padding positions (seq_idx -1) are not 0"
    return True, ""


def conv_varlen_key(c):
    return (str(c["itype"]), c["silu_activation"], c["has_bias"], c["width"], c["dim"],
            c["seqlen"])


# =====================================================================================
# causal-conv1d: tests/test_causal_conv1d.py::test_causal_conv1d_update,
# ::test_causal_conv1d_update_with_batch_gather, ::test_causal_conv1d_update_with_padding
# =====================================================================================
def conv_update_expect(x, state, weight, bias, activation, cache_seqlens):
    """What causal_conv1d_update gives for sequences whose state rows are `state` (already
    selected): the output in float64, and the state after the call (copies of x and of
    the old state, so exact)."""
    batch, dim, seqlen = x.shape
    width, state_len = weight.shape[1], state.shape[2]
    every = torch.arange(batch, device=x.device)
    if cache_seqlens is None:
        before = state[:, :, state_len - (width - 1):]
        after = torch.cat([state, x], dim=2)[:, :, -state_len:]
    else:
        lengths = cache_seqlens.long()
        cols = (lengths[:, None] + torch.arange(1 - width, 0, device=x.device)) % state_len
        before = state[every[:, None], :, cols].transpose(1, 2)  # (batch, dim, width - 1)
        after = state.clone()
        for t in range(seqlen):  # in order: a later input overwrites an earlier one
            after[every, :, (lengths + t) % state_len] = x[:, :, t]
    seq = torch.cat([before, x], dim=2).double()
    w = weight.double()
    out = sum(w[None, :, k, None] * seq[:, :, k:k + seqlen] for k in range(width))
    if bias is not None:
        out = out + bias.double()[None, :, None]
    if activation is not None:
        out = out * torch.sigmoid(out)
    return out, after


CONV_UPDATE_GRID = dict(
    mode=["plain", "gather", "padding"], itype=[torch.float32, torch.float16, torch.bfloat16],
    silu_activation=[False, True], has_bias=[False, True], has_cache_seqlens=[False, True],
    seqlen=[1, 4, 5], width=[2, 3, 4], dim=[2048, 2048 + 16, 4096])


def conv_update_cases():
    # The peer's padding test runs without cache_seqlens only.
    return [c for c in product(**CONV_UPDATE_GRID)
            if not (c["mode"] == "padding" and c["has_cache_seqlens"])]


def conv_update_run(c):
    itype, dim, seqlen, width = c["itype"], c["dim"], c["seqlen"], c["width"]
    rtol, atol = conv_tolerance(itype)
    torch.random.manual_seed(0)
    batch = 64
    x = torch.randn(batch, seqlen, dim, device=DEV, dtype=itype).transpose(-1, -2)
    state_len = int(torch.randint(width - 1, width + 10, (1,)).item())
    entries = batch if c["mode"] == "plain" else 10 * batch
    conv_state = torch.randn(entries, state_len, dim, device=DEV, dtype=itype).transpose(-1, -2)
    indices = None
    if c["mode"] == "gather":
        indices = torch.randperm(entries)[:batch].to(dtype=torch.int32, device=DEV)
    elif c["mode"] == "padding":
        used = torch.randperm(entries)[:batch // 2].to(device=DEV)
        both = torch.cat([used, torch.full((batch - batch // 2,), -1, device=DEV)])
        indices = both[torch.randperm(batch, device=DEV)].to(torch.int32)
    weight = torch.randn(dim, width, device=DEV, dtype=torch.float32)
    bias = torch.randn(dim, device=DEV, dtype=torch.float32) if c["has_bias"] else None
    activation = "silu" if c["silu_activation"] else None
    lengths = (torch.randint(0, 1024, (batch,), dtype=torch.int32, device=DEV)
               if c["has_cache_seqlens"] else None)
    old = conv_state.clone()
    out = autotune.causal_conv1d_update(x, conv_state, weight, bias, activation=activation,
                                        cache_seqlens=lengths, conv_state_indices=indices)
    if out.shape != x.shape or out.dtype != x.dtype:
        return False, f"out is {list(out.shape)} {out.dtype}, x {list(x.shape)} {x.dtype}"
    used = (torch.ones(batch, dtype=torch.bool, device=DEV) if indices is None
            else indices >= 0)
    rows = torch.arange(batch, device=DEV) if indices is None else indices[used].long()
    ref, after = conv_update_expect(x[used], old[rows], weight, bias, activation,
                                    None if lengths is None else lengths[used])
    expected = old.clone()
    expected[rows] = after
    if not torch.equal(conv_state, expected):
        return False, "conv_state after the call differs from the expected update"
    if not torch.all(out[~used] == 0):
        return False, "padding entries' output is not 0"
    if not torch.allclose(out[used].double(), ref, rtol=rtol, atol=atol):
        return False, f"output max diff {(out[used].double() - ref).abs().max().item():.3g}"
    return True, ""


def conv_update_key(c):
    # One compiled conv problem per shape and flags (x channel-last past one token).
    return (str(c["itype"]), c["dim"], c["seqlen"], c["width"], c["has_bias"],
            c["silu_activation"])


# =====================================================================================
# mamba-ssm: tests/ops/triton/test_selective_state_update.py (the four tests: plain,
# with heads, with batch indices, with heads and batch indices)
# =====================================================================================
def state_update_ref(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False):
    """mamba-ssm's selective_state_update_ref: state updated in place (in its dtype), out
    from it in float32 (the peer's order), x's dtype."""
    has_heads = state.dim() > 3
    if not has_heads:
        state, x, dt, A = state[:, None], x[:, None], dt[:, None], A[None]
        B, C = B[:, None], C[:, None]
        D = None if D is None else D[None]
        z = None if z is None else z[:, None]
        dt_bias = None if dt_bias is None else dt_bias[None]
    nheads, ngroups = state.shape[1], B.shape[1]
    if dt_bias is not None:
        dt = dt + dt_bias
    dt = torch.nn.functional.softplus(dt) if dt_softplus else dt
    dA = torch.exp(dt[..., None] * A)
    B = B.repeat_interleave(nheads // ngroups, dim=1)
    C = C.repeat_interleave(nheads // ngroups, dim=1)
    dB = dt[..., None] * B[:, :, None, :]
    state.copy_(state * dA + dB * x[..., None])
    out = torch.einsum("bhdn,bhn->bhd", state.to(C.dtype), C)
    if D is not None:
        out = out + (x * D).to(out.dtype)
    out = (out if z is None else out * torch.nn.functional.silu(z)).to(x.dtype)
    return out if has_heads else out[:, 0]


STATE_UPDATE_GRID = dict(
    test=["plain", "heads", "batch_indices", "heads_batch_indices"],
    itype=[torch.float32, torch.float16, torch.bfloat16], has_z=[False, True],
    tie_hdim=[False, True], ngroups=[1, 2, 4], dstate=[16, 32, 64], dim=[2048, 2048 + 16, 4096])


def state_update_cases():
    # The head tests have tie_hdim and ngroups, no 2048 + 16; the others neither of those.
    out = []
    for c in product(**STATE_UPDATE_GRID):
        heads = c["test"].startswith("heads")
        if heads and c["dim"] == 2048 + 16:
            continue
        if not heads and (c["tie_hdim"] or c["ngroups"] != 1):
            continue
        out.append(c)
    return out


def _state_update_tolerance(c):
    itype, heads, indices = c["itype"], c["test"].startswith("heads"), "indices" in c["test"]
    if itype == torch.float32:
        return 3e-4, 1e-3
    if itype == torch.bfloat16:
        if heads and indices:
            return 1e-1, 1e-1
        if heads:
            return 1e-2, 1e-1
        return (6e-2, 6e-2) if indices else (1e-2, 5e-2)
    return (5e-3, 3e-2) if heads else (5e-3, 1e-2)


def state_update_run(c):
    itype, dim, dstate = c["itype"], c["dim"], c["dstate"]
    heads, indices = c["test"].startswith("heads"), "indices" in c["test"]
    rtol, atol = _state_update_tolerance(c)
    torch.random.manual_seed(0)
    batch = 16 if indices else 2
    entries = 10 * batch if indices else batch
    if heads:
        headdim = 64
        nheads = dim // headdim
        state = torch.randn(entries, nheads, headdim, dstate, dtype=itype, device=DEV)
        x = torch.randn(batch, nheads, headdim, device=DEV, dtype=itype)
        if not c["tie_hdim"]:
            dt = torch.randn(batch, nheads, headdim, device=DEV, dtype=itype)
            dt_bias = torch.rand(nheads, headdim, device=DEV) - 4.0
            A = -torch.rand(nheads, headdim, dstate, device=DEV) - 1.0
            D = torch.randn(nheads, headdim, device=DEV)
        else:  # einops.repeat's broadcast views (stride 0), as Mamba-2 passes them
            dt = torch.randn(batch, nheads, device=DEV, dtype=itype)[:, :, None].expand(
                batch, nheads, headdim)
            dt_bias = (torch.rand(nheads, device=DEV) - 4.0)[:, None].expand(nheads, headdim)
            A = (-torch.rand(nheads, device=DEV) - 1.0)[:, None, None].expand(
                nheads, headdim, dstate)
            D = torch.randn(nheads, device=DEV)[:, None].expand(nheads, headdim)
        B = torch.randn(batch, c["ngroups"], dstate, device=DEV)
        C = torch.randn(batch, c["ngroups"], dstate, device=DEV)
    else:
        state = torch.randn(entries, dim, dstate, dtype=itype, device=DEV)
        x = torch.randn(batch, dim, device=DEV, dtype=itype)
        dt = torch.randn(batch, dim, device=DEV, dtype=itype)
        dt_bias = torch.rand(dim, device=DEV) - 4.0
        A = -torch.rand(dim, dstate, device=DEV) - 1.0
        B = torch.randn(batch, dstate, device=DEV)
        C = torch.randn(batch, dstate, device=DEV)
        D = torch.randn(dim, device=DEV)
    z = torch.randn_like(x) if c["has_z"] else None
    rows = (torch.randperm(entries)[:batch].to(dtype=torch.int32, device=DEV) if indices
            else None)
    before = state.clone()
    state_ref = (state if rows is None else state[rows.long()]).detach().clone()
    out = autotune.selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                                          dt_softplus=True, state_batch_indices=rows)
    out_ref = state_update_ref(state_ref, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                               dt_softplus=True)
    if out.shape != x.shape or out.dtype != x.dtype:
        return False, f"out is {list(out.shape)} {out.dtype}, x {list(x.shape)} {x.dtype}"
    got = state if rows is None else state[rows.long()]
    if not torch.allclose(got, state_ref, rtol=rtol, atol=atol):
        return False, f"state max diff {(got.float() - state_ref.float()).abs().max().item():.3g}"
    if rows is not None:
        untouched = torch.ones(entries, dtype=torch.bool, device=DEV)
        untouched[rows.long()] = False
        if not torch.equal(state[untouched], before[untouched]):
            return False, "a state row no index selects changed"
    if not torch.allclose(out, out_ref, rtol=rtol, atol=atol):
        return False, f"output max diff {(out.float() - out_ref.float()).abs().max().item():.3g}"
    return True, ""


def state_update_key(c):
    return (c["test"], str(c["itype"]), c["has_z"], c["tie_hdim"], c["ngroups"], c["dstate"],
            c["dim"])


# =====================================================================================
# mamba-ssm: tests/ops/test_selective_scan.py::test_selective_scan
# =====================================================================================
def scan_ref(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
             return_last_state=False):
    """mamba-ssm's selective_scan_ref (real A), in float32."""
    dtype_in = u.dtype
    u = u.float()
    delta = delta.float()
    if delta_bias is not None:
        delta = delta + delta_bias[..., None].float()
    if delta_softplus:
        delta = F.softplus(delta)
    dim = A.shape[0]
    is_variable_B = B.dim() >= 3
    is_variable_C = C.dim() >= 3
    B = B.float()
    C = C.float()
    deltaA = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    if not is_variable_B:
        deltaB_u = torch.einsum("bdl,dn,bdl->bdln", delta, B, u)
    elif B.dim() == 3:
        deltaB_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    else:
        B = B.repeat_interleave(dim // B.shape[1], dim=1)  # B G N L -> B (G H) N L
        deltaB_u = torch.einsum("bdl,bdnl,bdl->bdln", delta, B, u)
    if is_variable_C and C.dim() == 4:
        C = C.repeat_interleave(dim // C.shape[1], dim=1)
    # The recurrence x_i = deltaA_i * x_{i-1} + deltaB_u_i (x_{-1} = 0), all steps at once:
    # a doubling scan (log2(L) rounds over the whole sequence) instead of the peer's
    # Python loop over i, which holds the GIL for 4096 small launches per case and would
    # serialize the grid's threads. Same float32 arithmetic, summed in another order.
    x, a = deltaB_u.clone(), deltaA.clone()
    step = 1
    while step < x.shape[2]:
        x[:, :, step:] = x[:, :, step:] + a[:, :, step:] * x[:, :, :-step]
        a[:, :, step:] = a[:, :, step:] * a[:, :, :-step]
        step *= 2
    last_state = x[:, :, -1]
    if not is_variable_C:
        y = (x * C[None, :, None, :]).sum(-1)
    elif C.dim() == 3:
        y = (x * C.transpose(1, 2)[:, None]).sum(-1)
    else:
        y = (x * C.transpose(2, 3)).sum(-1)
    out = y if D is None else y + u * D[:, None]
    if z is not None:
        out = out * F.silu(z)
    out = out.to(dtype=dtype_in)
    return out, last_state


SCAN_GRID = dict(
    wtype=[torch.float32], itype=[torch.float32, torch.float16, torch.bfloat16],
    seqlen=[128, 256, 512, 1024, 2048, 4096], return_last_state=[True],
    has_delta_bias=[True], delta_softplus=[True], has_z=[True], has_D=[True],
    varBC_groups=[1, 2], is_variable_C=[True], is_variable_B=[True])

# The test's commented-out parameter lists (the full space the file names).
SCAN_GRID_FULL = dict(
    wtype=[torch.float32, torch.complex64], itype=[torch.float32, torch.float16, torch.bfloat16],
    seqlen=[8, 16, 32, 64, 128, 256, 372, 512, 784, 1024, 1134, 2048, 4096],
    return_last_state=[False, True], has_delta_bias=[False, True],
    delta_softplus=[False, True], has_z=[False, True], has_D=[False, True],
    varBC_groups=[1, 2], is_variable_C=[False, True], is_variable_B=[False, True])


def scan_cases(grid):
    return [c for c in product(**grid)
            if not (c["varBC_groups"] > 1 and (not c["is_variable_B"] or not c["is_variable_C"]))]


def scan_unsupported(c):
    # One fixed and one variable B/C runs (the problem field var_bc=B or C).
    if c["wtype"] == torch.complex64:
        return "complex A"
    return None


def scan_tolerance(itype):
    """mamba-ssm's test tolerances (rtol, atol) for an input dtype (test_selective_scan and
    test_mamba_inner_fn)."""
    if itype == torch.bfloat16:
        return 3e-2, 5e-2
    return (6e-4, 2e-3) if itype == torch.float32 else (3e-3, 5e-3)


def scan_run(c):
    itype, wtype, seqlen = c["itype"], c["wtype"], c["seqlen"]
    rtol, atol = scan_tolerance(itype)
    torch.random.manual_seed(0)
    batch_size, dim, dstate = 2, 4, 8
    groups = c["varBC_groups"]
    A = -0.5 * torch.rand(dim, dstate, device=DEV, dtype=wtype)

    def bc(variable):
        if not variable:
            shape = (dim, dstate)
        elif groups == 1:
            shape = (batch_size, dstate, seqlen)
        else:
            shape = (batch_size, groups, dstate, seqlen)
        return torch.randn(*shape, device=DEV, dtype=wtype if not variable else itype)

    B = bc(c["is_variable_B"])
    C = bc(c["is_variable_C"])
    D = torch.randn(dim, device=DEV, dtype=torch.float32) if c["has_D"] else None
    z = torch.randn(batch_size, dim, seqlen, device=DEV, dtype=itype) if c["has_z"] else None
    delta_bias = (0.5 * torch.rand(dim, device=DEV, dtype=torch.float32)
                  if c["has_delta_bias"] else None)
    u = torch.randn(batch_size, dim, seqlen, device=DEV, dtype=itype)
    delta = 0.5 * torch.rand(batch_size, dim, seqlen, device=DEV, dtype=itype)
    rls = c["return_last_state"]
    out, *rest = autotune.selective_scan_fn(u, delta, A, B, C, D, z=z, delta_bias=delta_bias,
                                            delta_softplus=c["delta_softplus"],
                                            return_last_state=rls) if rls else \
        (autotune.selective_scan_fn(u, delta, A, B, C, D, z=z, delta_bias=delta_bias,
                                    delta_softplus=c["delta_softplus"]),)
    out_ref, state_ref = scan_ref(u, delta, A, B, C, D, z=z, delta_bias=delta_bias,
                                  delta_softplus=c["delta_softplus"], return_last_state=rls)
    if not torch.allclose(out, out_ref, rtol=rtol, atol=atol):
        return False, f"output max diff {(out.float() - out_ref.float()).abs().max().item():.3g}"
    if rls and not torch.allclose(rest[0], state_ref, rtol=rtol, atol=atol):
        return False, f"state max diff {(rest[0] - state_ref).abs().max().item():.3g}"
    return True, ""


def scan_key(c):
    return tuple(v for _, v in sorted(c.items(), key=lambda kv: kv[0]))


# =====================================================================================
# mamba-ssm: tests/ops/test_selective_scan.py::test_mamba_inner_fn
# =====================================================================================
def mamba_inner_ref(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight,
                    out_proj_weight, out_proj_bias, A, B=None, C=None, D=None, delta_bias=None,
                    B_proj_bias=None, C_proj_bias=None, delta_softplus=True, b_rms_weight=None,
                    c_rms_weight=None, dt_rms_weight=None, b_c_dt_rms_eps=1e-6, conv=None,
                    scan=None):
    """mamba-ssm's mamba_inner_ref (its rms norms as mamba-ssm 2.2's mamba_inner_fn applies
    them). conv(x, weight, bias) and scan(u, delta, A, B, C, D, z, delta_bias, softplus)
    are the kernels: autotune's drop-ins, as the peer's test passes its own library's
    (default), or float32 references (_conv_f32, _scan_f32)."""
    if conv is None:
        def conv(x, w, b):
            return autotune.causal_conv1d_fn(x, w, b, activation="silu")
    if scan is None:
        def scan(*args):
            return autotune.selective_scan_fn(*args[:6], z=args[6], delta_bias=args[7],
                                              delta_softplus=args[8])
    batch, seqlen = xz.shape[0], xz.shape[-1]
    delta_rank, d_state = delta_proj_weight.shape[1], A.shape[-1]
    x, z = xz.chunk(2, dim=1)
    x = conv(x, conv1d_weight.squeeze(1), conv1d_bias)
    x_dbl = F.linear(x.transpose(1, 2).reshape(-1, x.shape[1]), x_proj_weight)  # (b l) d
    delta = (delta_proj_weight @ x_dbl[:, :delta_rank].t()).view(-1, batch, seqlen)
    delta = delta.permute(1, 0, 2)

    def rms(t, weight, dim):
        f = t.float()
        shape = [1] * t.dim()
        shape[dim] = -1
        return (f * torch.rsqrt(f.square().mean(dim, keepdim=True) + b_c_dt_rms_eps) *
                weight.float().view(shape)).to(t.dtype)

    def variable(rows, bias, weight):  # "(b l) dstate -> b dstate l"
        if bias is not None:
            rows = rows + bias.to(dtype=rows.dtype)
        rows = rows.view(batch, seqlen, d_state).transpose(1, 2).contiguous()
        return rows if weight is None else rms(rows, weight, 1)

    if B is None:
        B = variable(x_dbl[:, delta_rank:delta_rank + d_state], B_proj_bias, b_rms_weight)
    if C is None:
        C = variable(x_dbl[:, -d_state:], C_proj_bias, c_rms_weight)
    if dt_rms_weight is not None:
        delta = rms(delta, dt_rms_weight, 1).contiguous()
    y = scan(x, delta, A, B, C, D, z, delta_bias, delta_softplus)
    return F.linear(y.transpose(1, 2), out_proj_weight, out_proj_bias)


def _conv_f32(x, w, b):
    return conv_ref(x.float(), w.float(), None if b is None else b.float(),
                    activation="silu")[0]


def _scan_f32(u, delta, A, B, C, D, z, delta_bias, softplus):
    f = (lambda t: None if t is None else t.float())
    return scan_ref(u.float(), delta.float(), A, f(B), f(C), D, z=f(z), delta_bias=delta_bias,
                    delta_softplus=softplus)[0]


INNER_GRID = dict(wtype=[torch.float32], itype=[torch.float32], seqlen=[128],
                  is_variable_C=[False, True], is_variable_B=[False, True])

# The test's commented-out parameter lists, less fp16: the peer's inputs (randn
# projection weights, no scaling) overflow fp16 in the projections, so its own reference
# is inf/NaN there.
INNER_GRID_FULL = dict(
    wtype=[torch.float32, torch.complex64], itype=[torch.float32, torch.bfloat16],
    seqlen=[8, 16, 32, 64, 128, 256, 372, 512, 784, 1024, 1134, 2048, 4096],
    is_variable_C=[False, True], is_variable_B=[False, True])


def inner_run(c):
    itype, wtype, seqlen = c["itype"], c["wtype"], c["seqlen"]
    rtol, atol = scan_tolerance(itype)
    torch.random.manual_seed(0)
    batch_size, dim, dstate, dt_rank = 2, 768, 8, 48
    var_b, var_c = c["is_variable_B"], c["is_variable_C"]
    # As the peer draws them, requires_grad included (forward-only: the call must still
    # run with grad mode on and every input recorded).
    xz = torch.randn(batch_size, 2 * dim, seqlen, device=DEV, dtype=itype, requires_grad=True)
    conv1d_weight = torch.randn(dim, 1, 3, device=DEV, dtype=itype, requires_grad=True)
    conv1d_bias = torch.randn(dim, device=DEV, dtype=itype, requires_grad=True)
    x_proj_weight = torch.randn(dt_rank + (int(var_b) + int(var_c)) * dstate, dim, device=DEV,
                                dtype=itype, requires_grad=True)
    delta_proj_weight = torch.randn(dim, dt_rank, device=DEV, dtype=itype, requires_grad=True)
    out_proj_weight = torch.randn(dim // 2, dim, device=DEV, dtype=itype, requires_grad=True)
    A = (-0.5 * torch.rand(dim, dstate, device=DEV, dtype=wtype)).requires_grad_()
    B = None if var_b else torch.randn(dim, dstate, device=DEV, dtype=wtype, requires_grad=True)
    C = None if var_c else torch.randn(dim, dstate, device=DEV, dtype=wtype, requires_grad=True)
    D = 0 * torch.randn(dim, device=DEV, dtype=torch.float32, requires_grad=True)
    delta_bias = (0.5 * torch.rand(dim, device=DEV, dtype=torch.float32)).requires_grad_()
    args = (xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight,
            None, A, B, C, D)
    out = autotune.mamba_inner_fn(*args, delta_bias=delta_bias, delta_softplus=True)
    out_ref = mamba_inner_ref(*args, delta_bias=delta_bias, delta_softplus=True)
    if out.shape != out_ref.shape or out.dtype != out_ref.dtype:
        return False, f"output {list(out.shape)} {out.dtype}, expected {list(out_ref.shape)}"
    if not torch.allclose(out, out_ref, rtol=rtol, atol=atol):
        return False, f"output max diff {(out.float() - out_ref.float()).abs().max().item():.3g}"
    return True, ""


# =====================================================================================
# flash-attn: tests/test_flash_attn.py::test_flash_attn_output, ::test_flash_attn_qkvpacked
# =====================================================================================
def attention_ref(q, k, v, causal=False, upcast=True, reorder_ops=False, window_size=(-1, -1),
                  softcap=0.0, alibi_slopes=None):
    """flash-attn's attention_ref without padding or dropout: softcap, then the window
    (causal is its right bound 0: bottom-right aligned, rows that see no key are 0), then
    the ALiBi bias -slope * |i + sk - sq - j|. Returns the output and, for upcast, the
    fp32 log-sum-exp [b, h, sq] (rows without a key: -inf) as flash-attn 2 returns it:
    under causal without a left bound its kernel adds slope * j instead, an LSE larger
    by slope * (i + sk - sq)."""
    dtype_og = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    g = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(g, dim=2)
    v = v.repeat_interleave(g, dim=2)
    d = q.shape[-1]
    if not reorder_ops:
        scores = torch.einsum("bthd,bshd->bhts", q / math.sqrt(d), k)
    else:
        scores = torch.einsum("bthd,bshd->bhts", q, k / math.sqrt(d))
    if softcap > 0:
        scores = (scores / softcap).tanh() * softcap
    mask = None
    left, right = window_size
    right = 0 if causal else right
    row = torch.arange(seqlen_q, device=q.device)[:, None]
    col = torch.arange(seqlen_k, device=q.device)
    diag = row + seqlen_k - seqlen_q
    if left >= 0 or right >= 0:
        mask = torch.zeros(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
        if right >= 0:
            mask |= col > diag + right
        if left >= 0:
            mask |= col < diag - left
        scores = scores.masked_fill(mask, float("-inf"))
    if alibi_slopes is not None:
        slopes = alibi_slopes if alibi_slopes.dim() == 2 else alibi_slopes.unsqueeze(0)
        scores = scores - slopes[:, :, None, None] * (diag - col).abs().to(scores.dtype)
    lse = torch.logsumexp(scores.float(), dim=-1) if upcast else None
    if lse is not None and alibi_slopes is not None and causal and left < 0:
        lse = lse + slopes[:, :, None] * (row[:, 0] + seqlen_k - seqlen_q).float()
    attention = torch.softmax(scores, dim=-1).to(v.dtype)
    if mask is not None:
        attention = attention.masked_fill(torch.all(mask, dim=-1, keepdim=True), 0.0)
    output = torch.einsum("bhts,bshd->bthd", attention, v)
    return output.to(dtype=dtype_og), lse


# What the drop-ins run: the kernels build multiples of 8 from 32 to 256, and the Python
# drop-ins run other head dims up to 256 on zero-padded copies, as flash-attn does.
SUPPORTED_HEAD_DIMS = tuple(range(1, 257))


def attention_unsupported(c):
    """Each unsupported case counted once, under the first of these features."""
    if c["d"] not in SUPPORTED_HEAD_DIMS:
        return "head_dim"
    if c["dropout_p"] > 0.0:
        return "dropout"
    return None


def _attn_features(c, batch_size, nheads, seqlen_k):
    """The peer's window_size, alibi_slopes and softcap of a case (its draws: a random
    window of both bounds under seqlen_k, slopes in [0, 0.3) per batch and head)."""
    window_size = (-1, -1) if not c["local"] else tuple(
        int(w) for w in torch.randint(0, seqlen_k, (2,)))
    alibi_slopes = torch.rand(batch_size, nheads, device=DEV, dtype=torch.float32) * 0.3 \
        if c["alibi"] else None
    return window_size, alibi_slopes, c.get("softcap", 0.0)


ATTN_OUTPUT_GRID = dict(
    kvpacked=[True, False], dtype=[torch.float16, torch.bfloat16], mha_type=["mha", "mqa", "gqa"],
    deterministic=[False, True], alibi=[False, True], local=[False, True], causal=[False, True],
    d=[32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256],
    seqlens=[(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256),
             (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048)],
    dropout_p=[0.0, 0.17], softcap=[0.0, 50.0])


def attn_output_cases(grid=ATTN_OUTPUT_GRID):
    # The peer skips softcap with dropout (test_flash_attn_output and _varlen_output).
    return [c for c in product(**grid) if not (c["softcap"] > 0.0 and c["dropout_p"] > 0.0)]


def _lse_ok(lse, lse_ref):
    """Our own addition to the peer's criterion: the returned softmax_lse (flash-attn's
    convention: natural log of the sum of exp(scale q.k)) within 1e-3 relative / 2e-3
    absolute of the fp32 reference, on rows that see at least one key."""
    rows = torch.isfinite(lse_ref)
    if lse.shape != lse_ref.shape or lse.dtype != torch.float32:
        return False, f"lse shape/dtype {tuple(lse.shape)} {lse.dtype}"
    if not torch.allclose(lse[rows], lse_ref[rows], rtol=1e-3, atol=2e-3):
        return False, f"lse max diff {(lse[rows] - lse_ref[rows]).abs().max().item():.3g}"
    return True, ""


def attn_output_run(c):
    seqlen_q, seqlen_k = c["seqlens"]
    d, dtype, causal = c["d"], c["dtype"], c["causal"]
    torch.random.manual_seed(0)
    batch_size = 4
    nheads = 6 if c["softcap"] == 0.0 else 4
    nheads_k = nheads if c["mha_type"] == "mha" else (1 if c["mha_type"] == "mqa" else 2)
    q = torch.randn(batch_size, seqlen_q, nheads, d, device=DEV, dtype=dtype)
    window_size, alibi_slopes, softcap = _attn_features(c, batch_size, nheads, seqlen_k)
    if c["kvpacked"]:
        kv = torch.randn(batch_size, seqlen_k, 2, nheads_k, d, device=DEV, dtype=dtype)
        out, lse, s_dmask = autotune.flash_attn_kvpacked_func(
            q, kv, 0.0, causal=causal, window_size=window_size, softcap=softcap,
            alibi_slopes=alibi_slopes, deterministic=c["deterministic"], return_attn_probs=True)
        k, v = kv[:, :, 0], kv[:, :, 1]
    else:
        k = torch.randn(batch_size, seqlen_k, nheads_k, d, device=DEV, dtype=dtype)
        v = torch.randn(batch_size, seqlen_k, nheads_k, d, device=DEV, dtype=dtype)
        out, lse, s_dmask = autotune.flash_attn_func(
            q, k, v, 0.0, causal=causal, window_size=window_size, softcap=softcap,
            alibi_slopes=alibi_slopes, deterministic=c["deterministic"], return_attn_probs=True)
    return _attn_judge(q, k, v, causal, out, lse, s_dmask, window_size, softcap, alibi_slopes)


def _attn_refs(q, k, v, causal, window_size=(-1, -1), softcap=0.0, alibi_slopes=None):
    """The fp32 reference's output and LSE, and the peer's out_pt: PyTorch in q's dtype
    (no upcast, operations reordered), whose error sets the bar."""
    features = dict(window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes)
    out_ref, lse_ref = attention_ref(q, k, v, causal=causal, **features)
    out_pt, _ = attention_ref(q, k, v, causal=causal, upcast=False, reorder_ops=True,
                              **features)
    return out_ref, out_pt, lse_ref


def _attn_judge(q, k, v, causal, out, lse, s_dmask, window_size=(-1, -1), softcap=0.0,
                alibi_slopes=None):
    out_ref, out_pt, lse_ref = _attn_refs(q, k, v, causal, window_size, softcap, alibi_slopes)
    err = (out - out_ref).abs().max().item()
    err_pt = (out_pt - out_ref).abs().max().item()
    # flash-attn's criterion: at most twice the error of PyTorch in the same dtype.
    if not err <= 2 * err_pt:
        return False, f"output max diff {err:.3g} > 2 x PyTorch's {err_pt:.3g}"
    if s_dmask.numel() != 0:
        return False, "S_dmask is not empty"
    return _lse_ok(lse, lse_ref)


def attn_output_key(c):
    return (str(c["dtype"]), c["mha_type"], c["causal"], c["d"], c["seqlens"])


ATTN_QKV_GRID = dict(
    dtype=[torch.float16, torch.bfloat16], deterministic=[False, True], alibi=[False, True],
    local=[False, True], causal=[False, True],
    d=[32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256],
    seqlen=[97, 128, 200, 384, 768, 1024, 1025, 2048], dropout_p=[0.0, 0.17])


def attn_qkv_run(c):
    seqlen, d, dtype, causal = c["seqlen"], c["d"], c["dtype"], c["causal"]
    torch.random.manual_seed(0)
    batch_size, nheads = 4, 9
    qkv = torch.randn(batch_size, seqlen, 3, nheads, d, device=DEV, dtype=dtype)
    window_size, alibi_slopes, softcap = _attn_features(c, batch_size, nheads, seqlen)
    out, lse, s_dmask = autotune.flash_attn_qkvpacked_func(
        qkv, 0.0, causal=causal, window_size=window_size, alibi_slopes=alibi_slopes,
        deterministic=c["deterministic"], return_attn_probs=True)
    return _attn_judge(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal, out, lse, s_dmask,
                       window_size, softcap, alibi_slopes)


def attn_qkv_key(c):
    return (str(c["dtype"]), c["causal"], c["d"], c["seqlen"])


# =====================================================================================
# flash-attn: tests/test_flash_attn.py::test_flash_attn_varlen_output, ::test_flash_attn_kvcache
# =====================================================================================
def _attn_judge_seqs(seqs, causal, window_size, softcap=0.0, mult=2, slack=0.0):
    """The peers' criterion against a reference per sequence (varlen, KV cache): the
    largest output error over all sequences at most mult x PyTorch's (+ slack), then
    each sequence's LSE (_lse_ok). seqs: (out [Sq, H, D], lse [H, Sq], q, k, v,
    alibi_slopes) per sequence, the last four with a batch dimension of 1. The LSE is
    flash-attn 2's (attention_ref: with its causal-ALiBi offset), as every drop-in returns
    it."""
    err = err_pt = 0.0
    lses = []
    for out, lse, q, k, v, slopes in seqs:
        out_ref, out_pt, lse_ref = _attn_refs(q, k, v, causal, tuple(window_size), softcap,
                                              slopes)
        err = max(err, (out - out_ref[0]).abs().max().item())
        err_pt = max(err_pt, (out_pt[0] - out_ref[0]).abs().max().item())
        lses.append((lse, lse_ref[0]))
    if not err <= mult * err_pt + slack:
        return False, f"output max diff {err:.3g} > {mult} x PyTorch's {err_pt:.3g} + {slack:g}"
    for i, (lse, lse_ref) in enumerate(lses):
        ok, detail = _lse_ok(lse, lse_ref)
        if not ok:
            return False, f"sequence {i}: {detail}"
    return True, ""


ATTN_VARLEN_GRID = dict(
    kvpacked=[True, False], dtype=[torch.float16, torch.bfloat16], mha_type=["mha", "mqa", "gqa"],
    deterministic=[False, True], alibi=[False, True], local=[False, True], causal=[False, True],
    d=[32, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256],
    seqlens=[(1, 147), (113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256),
             (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048)],
    dropout_p=[0.0, 0.17], softcap=[0.0, 50.0])


def attn_varlen_unsupported(c):
    return attention_unsupported(c)


def _random_lengths(max_seqlen, batch_size):
    """The peer's generate_random_padding_mask(mode="random") as lengths: each sequence
    max(1, max_seqlen - 20) .. max_seqlen long."""
    return torch.randint(max(1, max_seqlen - 20), max_seqlen + 1, (batch_size,)).tolist()


def _cu_seqlens(lengths):
    return torch.tensor([0] + lengths, device=DEV).cumsum(0).to(torch.int32)


def attn_varlen_run(c):
    seqlen_q, seqlen_k = c["seqlens"]
    d, dtype, causal = c["d"], c["dtype"], c["causal"]
    torch.random.manual_seed(0)
    batch_size = 4
    nheads = 6 if c["softcap"] == 0.0 else 4
    nheads_k = nheads if c["mha_type"] == "mha" else (1 if c["mha_type"] == "mqa" else 2)
    window_size, alibi_slopes, softcap = _attn_features(c, batch_size, nheads, seqlen_k)
    q = torch.randn(batch_size, seqlen_q, nheads, d, device=DEV, dtype=dtype)
    if softcap > 0.0:
        q = q * softcap  # the peer's: logits within the cap's range
    k, v = (torch.randn(batch_size, seqlen_k, nheads_k, d, device=DEV, dtype=dtype)
            for _ in range(2))
    lens_q, lens_k = _random_lengths(seqlen_q, batch_size), _random_lengths(seqlen_k, batch_size)

    def unpad(x, lens):
        return torch.cat([x[b, :n] for b, n in enumerate(lens)])

    features = dict(causal=causal, window_size=window_size, softcap=softcap,
                    alibi_slopes=alibi_slopes, deterministic=c["deterministic"],
                    return_attn_probs=True)
    cu_q, cu_k = _cu_seqlens(lens_q), _cu_seqlens(lens_k)
    if c["kvpacked"]:  # the peer's kvpacked case: k and v read from one packed tensor
        kv = unpad(torch.stack([k, v], dim=2), lens_k)
        out, lse, s_dmask = autotune.flash_attn_varlen_kvpacked_func(
            unpad(q, lens_q), kv, cu_q, cu_k, max(lens_q), max(lens_k), 0.0, **features)
    else:
        out, lse, s_dmask = autotune.flash_attn_varlen_func(
            unpad(q, lens_q), unpad(k, lens_k), unpad(v, lens_k), cu_q, cu_k, max(lens_q),
            max(lens_k), 0.0, **features)
    if s_dmask.numel() != 0:
        return False, "S_dmask is not empty"
    # flash-attn reads a window side of max_seqlen_k or more as unbounded.
    window = tuple(-1 if w >= max(lens_k) else w for w in window_size)
    seqs = [(o, lse_b, q[b:b + 1, :lens_q[b]], k[b:b + 1, :lens_k[b]], v[b:b + 1, :lens_k[b]],
             None if alibi_slopes is None else alibi_slopes[b:b + 1])
            for b, (o, lse_b) in enumerate(zip(out.split(lens_q), lse.split(lens_q, dim=1)))]
    return _attn_judge_seqs(seqs, causal, window, softcap)


# tests/test_flash_attn.py::test_flash_attn_varlen_causal: causal varlen batches, the keys
# packed or (paged_kv_block_size) pages of a cache read through a block table.
ATTN_VARLEN_CAUSAL_GRID = dict(
    dtype=[torch.float16, torch.bfloat16], local=[False, True],
    d=[32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256], swap_sq_sk=[False, True],
    seqlens=[(1, 239), (3, 799), (127, 512), (127, 513), (113, 203), (128, 217), (113, 211),
             (108, 256), (256, 512), (1023, 1024)],
    paged_kv_block_size=[None, 256, 512])


def attn_varlen_causal_run(c):
    seqlen_q, seqlen_k = c["seqlens"]
    if c["swap_sq_sk"]:
        seqlen_q, seqlen_k = seqlen_k, seqlen_q
    d, dtype, page = c["d"], c["dtype"], c["paged_kv_block_size"]
    torch.random.manual_seed(0)
    batch_size, nheads = 8, 9
    window_size = (-1, -1) if not c["local"] else tuple(
        int(w) for w in torch.randint(0, seqlen_k, (2,)))
    q = torch.randn(batch_size, seqlen_q, nheads, d, device=DEV, dtype=dtype)
    block_table = None
    if page is None:
        k, v = (torch.randn(batch_size, seqlen_k, nheads, d, device=DEV, dtype=dtype)
                for _ in range(2))
    else:
        # The peer's _generate_block_kvcache: 3x the pages the batch needs, dealt out by a
        # random permutation; k, v [batch, seqlen_k, ...] are what the pages hold.
        num_blocks = math.ceil(seqlen_k / page) * batch_size * 3
        k_pages, v_pages = (torch.randn(num_blocks, page, nheads, d, device=DEV, dtype=dtype)
                            for _ in range(2))
        block_table = torch.randperm(num_blocks, dtype=torch.int32, device=DEV).view(
            batch_size, -1)
        k, v = (x[block_table.long().flatten()].view(batch_size, -1, nheads, d)[:, :seqlen_k]
                for x in (k_pages, v_pages))
    lens_q, lens_k = _random_lengths(seqlen_q, batch_size), _random_lengths(seqlen_k, batch_size)

    def unpad(x, lens):
        return torch.cat([x[b, :n] for b, n in enumerate(lens)])

    cu_q, cu_k = _cu_seqlens(lens_q), _cu_seqlens(lens_k)
    out, lse, _ = autotune.flash_attn_varlen_func(
        unpad(q, lens_q), unpad(k, lens_k) if page is None else k_pages,
        unpad(v, lens_k) if page is None else v_pages, cu_q, cu_k, max(lens_q), max(lens_k),
        0.0, causal=True, window_size=window_size, block_table=block_table,
        return_attn_probs=True)
    window = tuple(-1 if w >= max(lens_k) else w for w in window_size)
    seqs = [(o, lse_b, q[b:b + 1, :lens_q[b]], k[b:b + 1, :lens_k[b]], v[b:b + 1, :lens_k[b]],
             None)
            for b, (o, lse_b) in enumerate(zip(out.split(lens_q), lse.split(lens_q, dim=1)))]
    return _attn_judge_seqs(seqs, True, window, slack=1e-5)


def attn_varlen_causal_key(c):
    return (str(c["dtype"]), c["d"], c["seqlens"], c["swap_sq_sk"], c["paged_kv_block_size"])


ATTN_KVCACHE_GRID = dict(
    dtype=[torch.float16], num_splits=[1, 0], mha_type=["mha", "mqa", "gqa"],
    new_kv=[False, True], alibi=[False, True], local=[False, True], causal=[False, True],
    seqlen_new_eq_seqlen_q=[True, False], rotary_interleaved=[False, True],
    rotary_fraction=[0.0, 0.5, 1.0], paged_kv_block_size=[None, 256],
    has_leftpad=[False, True],
    has_batch_idx=[False],  # the peer's active list ([False, True] is commented out there)
    d=[32, 59, 64, 80, 128, 256],
    seqlens=[(1, 128), (1, 339), (3, 1024), (64, 800), (64, 256), (3, 799), (64, 2048),
             (16, 20000), (1, 128 * 1024), (16, 128 * 1024), (128, 128)])


def attn_kvcache_cases(grid=ATTN_KVCACHE_GRID):
    # The peer's skips: new keys with seqlen_q > seqlen_k, rotary without new keys,
    # cache_batch_idx or cache_leftpad with a paged cache.
    return [c for c in product(**grid)
            if not ((c["new_kv"] and c["seqlens"][0] > c["seqlens"][1]) or
                    (not c["new_kv"] and c["rotary_fraction"] > 0.0) or
                    ((c["has_batch_idx"] or c["has_leftpad"]) and
                     c["paged_kv_block_size"] is not None))]


# flash_attn_with_kvcache takes every head dim up to 256: the kernels build the multiples
# of 8 from 32, and the drop-in runs the others on zero-padded copies of q and the caches
# (written back after an append), as flash-attn does.
KVCACHE_HEAD_DIMS = tuple(range(1, 257))


# The same test with the peer's commented-out has_batch_idx=True: a contiguous cache of
# twice the batch, each sequence in the slot a random permutation gives it.
ATTN_KVCACHE_BATCH_IDX_GRID = dict(ATTN_KVCACHE_GRID, has_batch_idx=[True])


def attn_kvcache_unsupported(c):
    """What autotune.flash_attn_with_kvcache refuses (the library refuses a head dim over
    256). cache_leftpad and cache_batch_idx are supported."""
    if c["d"] not in KVCACHE_HEAD_DIMS:
        return "head_dim"
    return None


def _appended(cache, new, lengths, block_table, slots):
    """A copy of cache with sequence b's new rows at lengths[b].. (of its slot slots[b] in
    a contiguous cache): what the call leaves."""
    out, page = cache.clone(), cache.shape[1]
    for b, n in enumerate(lengths):
        pos = torch.arange(n, n + new.shape[1], device=cache.device)
        if block_table is None:
            out[slots[b], pos] = new[b]
        else:
            out[block_table[b, pos // page].long(), pos % page] = new[b]
    return out


def _cache_rows(cache, block_table, b, n, start=0, slot=None):
    """Sequence b's rows start .. n - 1 of a cache, [1, n - start, nheads_k, d] (start:
    its cache_leftpad, and slot its cache batch, a contiguous cache only; default b)."""
    if block_table is None:
        slot = b if slot is None else slot
        return cache[slot:slot + 1, start:n]
    page = cache.shape[1]
    return cache[block_table[b, :(n + page - 1) // page].long()].flatten(0, 1)[None, start:n]


def _rotary_ref(x, cos, sin, positions, interleaved):
    """The rotary embedding in float64 as complex multiplications (independent of the
    package's): pairs (2i, 2i + 1) when interleaved, else (i, i + rotary_dim / 2), rotated
    by row positions[b, s] of cos + i sin; rounded to x's dtype."""
    half = cos.shape[1]
    xr = x[..., :2 * half].double()
    if interleaved:
        z = torch.complex(xr[..., 0::2], xr[..., 1::2])
    else:
        z = torch.complex(xr[..., :half], xr[..., half:])
    z = z * torch.complex(cos.double(), sin.double())[positions].unsqueeze(2)
    rot = (torch.stack((z.real, z.imag), dim=-1).flatten(-2) if interleaved
           else torch.cat((z.real, z.imag), dim=-1))
    return torch.cat((rot.to(x.dtype), x[..., 2 * half:]), dim=-1)


def attn_kvcache_run(c):
    seqlen_q, seqlen_k = c["seqlens"]
    d, dtype, new_kv, page = c["d"], c["dtype"], c["new_kv"], c["paged_kv_block_size"]
    torch.random.manual_seed(0)
    batch_size, nheads = 2, 6
    nheads_k = nheads if c["mha_type"] == "mha" else (1 if c["mha_type"] == "mqa" else 3)
    window_size, alibi_slopes, _ = _attn_features(c, batch_size, nheads, seqlen_k)
    q = torch.randn(batch_size, seqlen_q, nheads, d, device=DEV, dtype=dtype)
    seqlen_new = seqlen_q if c["seqlen_new_eq_seqlen_q"] else int(
        torch.randint(1, seqlen_q + 1, (1,)))
    k, v = (torch.randn(batch_size, seqlen_new, nheads_k, d, device=DEV, dtype=dtype)
            if new_kv else None for _ in range(2))
    block_table = cache_batch_idx = None
    slots = list(range(batch_size))  # the cache batch of each sequence (contiguous cache)
    if page is None:
        batch_cache = batch_size
        if c["has_batch_idx"]:  # the peer's: a cache of twice the batch, a random slot each
            batch_cache = batch_size * 2
            cache_batch_idx = torch.randperm(batch_cache, dtype=torch.int32,
                                             device=DEV)[:batch_size]
            slots = cache_batch_idx.tolist()
        shape = (batch_cache, seqlen_k, nheads_k, d)
    else:  # the peer's paged cache: 3x the blocks needed, dealt by a random table
        num_blocks = math.ceil(seqlen_k / page) * batch_size * 3
        shape = (num_blocks, page, nheads_k, d)
        block_table = torch.randperm(num_blocks, dtype=torch.int32, device=DEV).view(
            batch_size, -1)
    k_cache, v_cache = (torch.randn(*shape, device=DEV, dtype=dtype) for _ in range(2))
    # The peer's rotary: rotary_dim the fraction of d rounded down to 16, a table as long
    # as the cache, the queries rotated per row when causal or windowed.
    rotary_dim = int(c["rotary_fraction"] * d) // 16 * 16
    per_row = c["causal"] or c["local"]
    rotary = {}
    if rotary_dim > 0:
        angle = torch.rand(seqlen_k if page is None else shape[0] * page, rotary_dim // 2,
                           device=DEV) * 2 * math.pi
        rotary = dict(rotary_cos=angle.cos().to(dtype), rotary_sin=angle.sin().to(dtype),
                      rotary_interleaved=c["rotary_interleaved"])
    # Cached keys per sequence, leaving room for the new ones (and, rotating queries per
    # row, for seqlen_q positions: the peer's bound).
    room = seqlen_q if per_row and rotary_dim > 0 else seqlen_new
    cache_seqlens = torch.randint(0 if new_kv else 1,
                                  seqlen_k - room + 1 if new_kv else seqlen_k + 1,
                                  (batch_size,), dtype=torch.int32, device=DEV)
    lengths = cache_seqlens.tolist()
    # The peer's cache_leftpad: per sequence a random start in [0, cache_seqlens[b]) (0 for
    # an empty cache); sequence b then attends its rows leftpad[b] .. and the new keys, its
    # key indices (masks, ALiBi) counted from leftpad[b], while the new keys still go to
    # cache_seqlens[b].. and rotary positions stay cache_seqlens-based.
    cache_leftpad = None
    pads = [0] * batch_size
    if c["has_leftpad"]:
        cache_leftpad = torch.cat([
            torch.randint(0, n, (1,), dtype=torch.int32, device=DEV) if n > 0 else
            torch.zeros(1, dtype=torch.int32, device=DEV) for n in lengths])
        pads = cache_leftpad.tolist()
    q_ref, k_ref = q, k
    if rotary_dim > 0:
        start = cache_seqlens.long()[:, None]
        cos, sin = rotary["rotary_cos"], rotary["rotary_sin"]
        q_pos = start + torch.arange(seqlen_q, device=DEV) if per_row else \
            start.expand(-1, seqlen_q)
        q_ref = _rotary_ref(q, cos, sin, q_pos, c["rotary_interleaved"])
        k_ref = _rotary_ref(k, cos, sin, start + torch.arange(seqlen_new, device=DEV),
                            c["rotary_interleaved"])
    k_want, v_want = k_cache, v_cache  # what the call must leave in the caches
    if new_kv:
        k_want, v_want = (_appended(cache, new, lengths, block_table, slots)
                          for cache, new in ((k_cache, k_ref), (v_cache, v)))
    out, lse = autotune.flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, cache_leftpad=cache_leftpad,
        cache_batch_idx=cache_batch_idx, block_table=block_table, causal=c["causal"],
        window_size=window_size, alibi_slopes=alibi_slopes, num_splits=c["num_splits"],
        return_softmax_lse=True, **rotary)
    # The peer's check of the cache: the new rows appended in place (rotated keys within
    # 1e-3, as the peer allows; otherwise copied exactly), and here every other row kept.
    for name, cache, want in (("k", k_cache, k_want), ("v", v_cache, v_want)):
        if not new_kv:
            continue
        same = (torch.allclose(cache, want, rtol=1e-3, atol=1e-3) if name == "k" and rotary
                else torch.equal(cache, want))
        if not same:
            return False, (f"{name} cache after appending: max diff "
                           f"{(cache - want).abs().max().item():.3g}")
    # The reference per sequence on its keys alone: the peer's key_padding_mask (arange <
    # cache_seqlens + seqlen_new, and >= cache_leftpad) with attention_ref's columns
    # re-indexed from cache_leftpad (key_leftpad), i.e. rows leftpad[b] .. of the cache
    # after the append, indexed from 0.
    seen = [n + (seqlen_new if new_kv else 0) for n in lengths]
    seqs = [(out[b], lse[b], q_ref[b:b + 1],
             _cache_rows(k_want, block_table, b, n, pads[b], slots[b]),
             _cache_rows(v_want, block_table, b, n, pads[b], slots[b]),
             None if alibi_slopes is None else alibi_slopes[b:b + 1])
            for b, n in enumerate(seen)]
    return _attn_judge_seqs(seqs, c["causal"], window_size, mult=5 if c["alibi"] else 3,
                            slack=1e-5)


def attn_kvcache_key(c):
    return (str(c["dtype"]), c["mha_type"], c["causal"], c["d"], c["seqlens"],
            c["paged_kv_block_size"], c["new_kv"])


# name: (op, peer test, cases, unsupported, group key, run, share of the budget, notes)
GRIDS = {
    "causal_conv1d": (
        "causal_conv1d", "causal-conv1d tests/test_causal_conv1d.py::test_causal_conv1d",
        conv_cases, lambda c: None, conv_key, conv_run, 0.16,
        "the peer's lists (channel-first x with states skipped, as the peer skips them), "
        "tolerances and fp32 weights; x is a channel slice of a wider tensor (channel-first) "
        "or a transposed view (channel-last, read in place); reference in float32."),
    "causal_conv1d_varlen": (
        "causal_conv1d", "causal-conv1d tests/test_causal_conv1d.py::test_causal_conv1d_varlen, "
        "_varlen_padding",
        conv_varlen_cases, lambda c: None, conv_varlen_key, conv_varlen_run, 0.04,
        "autotune.causal_conv1d_fn with seq_idx on the peer's two packed-sequence tests "
        "(batch 3, channel-last x sliced from a wider tensor, 1-4 sequences a row; padding: "
        "rows of a random true length in [seqlen / 2, seqlen], the rest seq_idx -1); pass: "
        "the peer's tolerances against a float32 reference per sequence, and padding "
        "positions exactly 0."),
    "causal_conv1d_update": (
        "causal_conv1d", "causal-conv1d tests/test_causal_conv1d.py::test_causal_conv1d_update, "
        "_with_batch_gather, _with_padding",
        conv_update_cases, lambda c: None, conv_update_key, conv_update_run, 0.08,
        "autotune.causal_conv1d_update on the peer's three update tests (batch 64, x and "
        "conv_state channel-last views, state_len drawn in [width - 1, width + 10), fp32 "
        "weight and bias, cache_seqlens in [0, 1024), 640 state rows gathered by a "
        "permutation, half of them -1 with padding); pass: the peer's tolerances against a "
        "float64 reference, padding outputs exactly 0, and conv_state exactly as expected "
        "(updated rows, every other row unchanged)."),
    "selective_state_update": (
        "selective_state_update",
        "mamba-ssm tests/ops/triton/test_selective_state_update.py (test_selective_state_update, "
        "_with_heads, _with_batch_indices, _with_heads_with_batch_indices)",
        state_update_cases, lambda c: None, state_update_key, state_update_run, 0.05,
        "autotune.selective_state_update on the peer's four tests: their parametrize lists, "
        "inputs (fp32 B, C, A, D, dt_bias; Mamba-2's broadcast A, dt, D and dt_bias with "
        "tie_hdim), tolerances and reference (selective_state_update_ref, here in torch); "
        "with batch indices also every unselected state row unchanged."),
    "selective_scan": (
        "selective_scan", "mamba-ssm tests/ops/test_selective_scan.py::test_selective_scan",
        lambda: scan_cases(SCAN_GRID), scan_unsupported, scan_key, scan_run, 0.16,
        "the active parametrize lists, tolerances (rtol/atol by itype) and inputs; "
        "reference: the peer's selective_scan_ref in float32."),
    "selective_scan_full": (
        "selective_scan", "mamba-ssm tests/ops/test_selective_scan.py::test_selective_scan "
        "(the commented-out full parameter lists)",
        lambda: scan_cases(SCAN_GRID_FULL), scan_unsupported, scan_key, scan_run, 0.08,
        "every list the test file names (fixed B/C, no z/D/bias, softplus off, ...), "
        "sampled."),
    "mamba_inner_fn": (
        "selective_scan", "mamba-ssm tests/ops/test_selective_scan.py::test_mamba_inner_fn",
        lambda: product(**INNER_GRID), scan_unsupported, scan_key, inner_run, 0.02,
        "autotune.mamba_inner_fn on the peer's active lists, inputs (requires_grad on, "
        "batch 2, dim 768, dstate 8, dt_rank 48, width 3) and criterion: allclose to "
        "mamba_inner_ref on the same library's causal_conv1d_fn and selective_scan_fn, as "
        "the peer runs it (the plumbing: views, B/C from the projection, the scan's "
        "arguments). Against float32 references the peer's unscaled random projections "
        "are too ill-conditioned for its tolerances; 'drop-in: mamba_inner_fn against "
        "float32' checks the numbers on model-scaled weights."),
    "mamba_inner_fn_full": (
        "selective_scan", "mamba-ssm tests/ops/test_selective_scan.py::test_mamba_inner_fn "
        "(the commented-out full parameter lists)",
        lambda: product(**INNER_GRID_FULL), scan_unsupported, scan_key, inner_run, 0.04,
        "every list the test file names (bf16, seqlen 8-4096, complex A refused) but fp16, "
        "where the peer's own inputs overflow (its reference is not finite)."),
    "attention_output": (
        "attention", "flash-attn tests/test_flash_attn.py::test_flash_attn_output",
        attn_output_cases, attention_unsupported, attn_output_key, attn_output_run, 0.20,
        "the peer's lists (batch 4, nheads 6, nheads_k 6/1/2 for mha/mqa/gqa, kvpacked and "
        "not); pass: the peer's criterion (max error <= 2x PyTorch's in the same dtype) and "
        "the returned softmax_lse against the fp32 reference on rows with a key; each "
        "unsupported case counted once under the first of head_dim (over 256) and dropout; "
        "window, softcap and ALiBi as the peer draws "
        "them."),
    "attention_qkvpacked": (
        "attention", "flash-attn tests/test_flash_attn.py::test_flash_attn_qkvpacked",
        lambda: product(**ATTN_QKV_GRID), attention_unsupported, attn_qkv_key, attn_qkv_run,
        0.08, "batch 4, nheads 9; criterion and unsupported features as test_flash_attn_output."),
    "attention_varlen": (
        "attention", "flash-attn tests/test_flash_attn.py::test_flash_attn_varlen_output",
        lambda: attn_output_cases(ATTN_VARLEN_GRID), attn_varlen_unsupported, attn_output_key,
        attn_varlen_run, 0.12,
        "autotune.flash_attn_varlen_func (kvpacked cases: flash_attn_varlen_kvpacked_func) "
        "on the peer's lists and inputs (batch 4 of max(1, seqlen - 20) .. seqlen tokens "
        "each, q scaled by softcap); reference per sequence; criterion, unsupported "
        "features and the LSE (flash-attn 2's, its causal-ALiBi offset included) as "
        "test_flash_attn_output."),
    "attention_varlen_causal": (
        "attention", "flash-attn tests/test_flash_attn.py::test_flash_attn_varlen_causal",
        lambda: product(**ATTN_VARLEN_CAUSAL_GRID),
        lambda c: "head_dim" if c["d"] not in SUPPORTED_HEAD_DIMS else None,
        attn_varlen_causal_key, attn_varlen_causal_run, 0.06,
        "autotune.flash_attn_varlen_func, causal, on the peer's lists and inputs (batch 8, "
        "nheads 9, max(1, seqlen - 20) .. seqlen tokens a sequence, a random window when "
        "local); the keys packed, or pages of 256 or 512 rows read through a shuffled "
        "block_table (the peer's _generate_block_kvcache: 3x the pages needed); pass: the "
        "peer's criterion (max error <= 2x PyTorch's + 1e-5, reference per sequence) and "
        "flash-attn 2's LSE on rows with a key; head dims that are not a multiple of 8 on "
        "zero-padded copies (of the whole cache when paged), as flash-attn runs them."),
    "attention_kvcache": (
        "attention", "flash-attn tests/test_flash_attn.py::test_flash_attn_kvcache",
        attn_kvcache_cases, attn_kvcache_unsupported, attn_kvcache_key, attn_kvcache_run, 0.12,
        "autotune.flash_attn_with_kvcache on the peer's active lists and skips (batch 2, "
        "nheads 6, nheads_k 6/1/3, contiguous and paged caches of 256-row blocks, random "
        "cache_seqlens); pass: the peer's criterion (max error <= 3x PyTorch's, 5x with "
        "ALiBi, + 1e-5; reference per sequence on its cached and new keys), new k/v "
        "appended in place with every other cache row unchanged, and flash-attn 2's LSE on "
        "rows with a key; cache_leftpad as the peer draws it (per sequence in [0, "
        "cache_seqlens)), the reference per sequence on its keys from leftpad on, indexed "
        "from leftpad (the peer's key_padding_mask and key_leftpad); head dims that are not "
        "a multiple of 8 (d=59) on zero-padded copies of q and the caches, as flash-attn "
        "runs them; unsupported: head_dim (over 256); rotary embeddings as the peer draws "
        "them, checked against a float64 rotation."),
    "attention_kvcache_batch_idx": (
        "attention", "flash-attn tests/test_flash_attn.py::test_flash_attn_kvcache "
        "(has_batch_idx=True, commented out in the peer's list)",
        lambda: attn_kvcache_cases(ATTN_KVCACHE_BATCH_IDX_GRID), attn_kvcache_unsupported,
        attn_kvcache_key, attn_kvcache_run, 0.03,
        "as attention_kvcache, with the peer's cache_batch_idx: a contiguous cache of twice "
        "the batch and each sequence in the slot a random permutation gives it (the peer "
        "skips it with a paged cache); the reference reads each sequence's slot, and after "
        "an append every slot's other rows (and the unused slots) must be unchanged."),
}


def conformance(name, budget_s, seed=0, threads=1):
    """One grid's row; threads > 1 runs its groups (compiled problems) in a thread pool
    (harness.run_grid). The cases seed torch's global generators, so with threads the
    inputs of cases running at the same time interleave: random all the same, not
    reproducible value for value (run with --threads 1 to reproduce one)."""
    op, grid, cases, unsupported, key, run, _, notes = GRIDS[name]
    return run_grid(op, grid, cases(), unsupported, key, run, budget_s, seed=seed,
                    health=health, notes=notes, threads=threads)


# =====================================================================================
# The registered operators: opcheck, torch.compile, CUDA graphs
# =====================================================================================
def _conv_inputs(B=2, C=64, L=128, W=4, dtype=torch.bfloat16):
    x = torch.randn(B, C, L, device=DEV, dtype=dtype)
    w = torch.randn(C, W, device=DEV, dtype=dtype) * 0.5
    b = torch.randn(C, device=DEV, dtype=dtype) * 0.5
    return x, w, b


def _attn_inputs(B=2, Sq=128, Sk=128, Hq=4, Hkv=2, D=64, dtype=torch.bfloat16):
    q = torch.randn(B, Sq, Hq, D, device=DEV, dtype=dtype)
    k = torch.randn(B, Sk, Hkv, D, device=DEV, dtype=dtype)
    v = torch.randn(B, Sk, Hkv, D, device=DEV, dtype=dtype)
    return q, k, v


def _scan_inputs(B=2, D=64, L=128, N=16, dtype=torch.bfloat16):
    u = torch.randn(B, D, L, device=DEV, dtype=dtype)
    delta = (torch.rand(B, D, L, device=DEV) * 0.5).to(dtype)  # stable without softplus too
    A = -(torch.rand(D, N, device=DEV) * 1.99 + 0.01)
    Bm = torch.randn(B, N, L, device=DEV, dtype=dtype)
    Cm = torch.randn(B, N, L, device=DEV, dtype=dtype)
    Dv = torch.rand(D, device=DEV) * 2 - 1
    z = torch.randn(B, D, L, device=DEV, dtype=dtype)
    dbias = -torch.rand(D, device=DEV)
    return u, delta, A, Bm, Cm, Dv, z, dbias


def check_opcheck():
    """torch.library.opcheck on every operator: the schema (no input mutated or aliased),
    the fake implementation against the real one (shapes, strides, dtypes), AOT dispatch
    with dynamic shapes."""
    x, w, b = _conv_inputs()
    q, k, v = _attn_inputs()
    u, delta, A, Bm, Cm, Dv, z, dbias = _scan_inputs()
    init = torch.randn(2, 64, 3, device=DEV, dtype=torch.bfloat16)
    xz = torch.randn(2, 128, 128, device=DEV, dtype=torch.bfloat16)  # x: a channel view
    calls = [
        (OPS.causal_conv1d.default, (x, w, b, None, True)),
        (OPS.causal_conv1d.default, (xz[:, :64], w, None, None, False)),
        (OPS.causal_conv1d_with_states.default, (x, w, b, init, True)),
        (OPS.attention.default, (q, k, v, True, None)),
        (OPS.attention.default, (q.transpose(1, 2).contiguous().transpose(1, 2), k, v, False,
                                 0.1)),
        (OPS.attention_with_lse.default, (q, k, v, False, None)),
        (OPS.selective_scan.default, (u, delta, A, Bm, Cm, Dv, z, dbias, True)),
        (OPS.selective_scan_with_state.default, (u, delta, A, Bm, Cm, None, None, None, False)),
    ]
    # varlen: the batch packed as two sequences of 100 and 156 queries (keys likewise).
    qp, kp, vp = (t.flatten(0, 1) for t in (q, k, v))
    cu = torch.tensor([0, 100, qp.shape[0]], device=DEV, dtype=torch.int32)
    calls += [(OPS.attention_varlen.default, (qp, kp, vp, cu, cu, 156, 156, True, None)),
              (OPS.attention_varlen_with_lse.default, (qp, kp, vp, cu, cu, 156, 156, False,
                                                       0.1))]
    # KV cache: one query row per sequence, one new key appended (the caches declared
    # written), and a call without new keys.
    k_cache, v_cache = (torch.randn(2, 256, 2, 64, device=DEV, dtype=torch.bfloat16)
                        for _ in range(2))
    lens = torch.tensor([100, 37], device=DEV, dtype=torch.int32)
    q1 = torch.randn(2, 1, 4, 64, device=DEV, dtype=torch.bfloat16)
    k1, v1 = (torch.randn(2, 1, 2, 64, device=DEV, dtype=torch.bfloat16) for _ in range(2))
    calls += [(OPS.attention_kvcache.default, (q1, k_cache, v_cache, lens, None, k1, v1, True,
                                               None)),
              (OPS.attention_kvcache_with_lse.default, (q1, k_cache, v_cache, lens))]
    # The Mamba decoding steps (their states declared written), Mamba-1's and Mamba-2's forms.
    step = torch.randn(2, 64, 1, device=DEV, dtype=torch.bfloat16)
    conv_state = torch.randn(2, 64, 4, device=DEV, dtype=torch.bfloat16)
    ssm = torch.randn(2, 4, 16, 8, device=DEV, dtype=torch.float32)
    sx, sdt, sz = (torch.randn(2, 4, 16, device=DEV, dtype=torch.bfloat16) for _ in range(3))
    sA = -torch.rand(4, 16, 8, device=DEV) - 1.0
    sB, sC = (torch.randn(2, 2, 8, device=DEV) for _ in range(2))
    sD, sbias = torch.randn(4, 16, device=DEV), torch.rand(4, 16, device=DEV) - 4.0
    calls += [(OPS.causal_conv1d_update.default, (step, conv_state, w, b, True)),
              (OPS.causal_conv1d_update.default,
               (step, conv_state, w, None, False,
                torch.tensor([3, 9], device=DEV, dtype=torch.int32),
                torch.tensor([1, 0], device=DEV, dtype=torch.int32))),
              (OPS.selective_state_update.default, (ssm, sx, sdt, sA, sB, sC, sD, sz, sbias,
                                                    True)),
              (OPS.selective_state_update.default, (ssm[:, 0, :, :], sx[:, 0], sdt[:, 0], sA[0],
                                                    sB[:, 0], sC[:, 0]))]
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    for op, args in calls:
        torch.library.opcheck(op, args, test_utils=utils)
    return f"{len(calls)} calls"


def _model_fn(q, k, v, x, w, b, u, delta, A, Bm, Cm, Dv, z, dbias):
    """A small forward pass over the three drop-ins with torch ops around them."""
    o = autotune.flash_attn_func(q * 1.0, k, v, causal=True)
    o2, lse, _ = autotune.flash_attn_func(q, k, v, return_attn_probs=True)
    y = autotune.causal_conv1d_fn(x, w, b, activation="silu")
    y2, final = autotune.causal_conv1d_fn(x, w, b, return_final_states=True)
    s = autotune.selective_scan_fn(y, delta, A, Bm, Cm, Dv, z=z, delta_bias=dbias,
                                   delta_softplus=True)
    s2, last = autotune.selective_scan_fn(u, delta, A, Bm, Cm, return_last_state=True)
    return o * 2, o2, lse + 1, y2, final, s - 1, s2, last


def _model_inputs():
    q, k, v = _attn_inputs()
    x, w, b = _conv_inputs()
    u, delta, A, Bm, Cm, Dv, z, dbias = _scan_inputs()
    return q, k, v, x, w, b, u, delta, A, Bm, Cm, Dv, z, dbias


def _same(outs, refs, what):
    for i, (o, r) in enumerate(zip(outs, refs)):
        if o.shape != r.shape or o.dtype != r.dtype:
            raise AssertionError(f"{what}: output {i} is {tuple(o.shape)} {o.dtype}, eager "
                                 f"{tuple(r.shape)} {r.dtype}")
        if not torch.allclose(o.float(), r.float(), rtol=1e-2, atol=1e-2):
            raise AssertionError(f"{what}: output {i} differs from eager by "
                                 f"{(o.float() - r.float()).abs().max().item():.3g}")


def check_compile_graph():
    """torch.compile(fullgraph=True): one graph, every drop-in traced to its operator."""
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    torch._dynamo.reset()
    args = _model_inputs()
    with torch.no_grad():
        ref = _model_fn(*args)
        out = torch.compile(_model_fn, fullgraph=True, backend=backend)(*args)
    _same(out, ref, "fullgraph")
    if len(seen) != 1:
        raise AssertionError(f"{len(seen)} graphs")
    targets = {str(n.target) for n in seen[0].graph.nodes if n.op == "call_function"}
    wanted = {"autotune.attention.default", "autotune.attention_with_lse.default",
              "autotune.causal_conv1d.default", "autotune.causal_conv1d_with_states.default",
              "autotune.selective_scan.default", "autotune.selective_scan_with_state.default"}
    missing = wanted - targets
    if missing:
        raise AssertionError(f"not in the graph: {sorted(missing)}; it holds {sorted(targets)}")
    return "1 graph, 6 operators"


def check_compile_varlen():
    """torch.compile(fullgraph=True) of flash_attn_varlen_func (and its kvpacked form, with
    ALiBi and the LSE): one graph holding the varlen operators, matching eager."""
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    q, k, v = (t.flatten(0, 1) for t in _attn_inputs())
    cu = torch.tensor([0, 100, q.shape[0]], device=DEV, dtype=torch.int32)
    slopes = torch.rand(q.shape[1], device=DEV) * 0.1

    def fn(q, k, v, cu, slopes):
        o = autotune.flash_attn_varlen_func(q, k, v, cu, cu, 156, 156, causal=True)
        o2, lse, _ = autotune.flash_attn_varlen_kvpacked_func(
            q, torch.stack((k, v), dim=1), cu, cu, 156, 156, causal=True, alibi_slopes=slopes,
            return_attn_probs=True)
        return o, o2, lse

    torch._dynamo.reset()
    with torch.no_grad():
        ref = fn(q, k, v, cu, slopes)
        out = torch.compile(fn, fullgraph=True, backend=backend)(q, k, v, cu, slopes)
    _same(out, ref, "varlen fullgraph")
    if len(seen) != 1:
        raise AssertionError(f"{len(seen)} graphs")
    targets = {str(n.target) for n in seen[0].graph.nodes if n.op == "call_function"}
    wanted = {"autotune.attention_varlen.default", "autotune.attention_varlen_with_lse.default"}
    if wanted - targets:
        raise AssertionError(f"not in the graph: {sorted(wanted - targets)}")
    return "1 graph, 2 varlen operators"


def check_compile_kvcache():
    """torch.compile(fullgraph=True) of a decoding step through flash_attn_with_kvcache
    (new keys appended): one graph holding the KV cache operator; the output and the
    caches it leaves match eager's. Also at head dim 59 (run on zero-padded copies, the
    caches written back inside the graph) with cache_leftpad."""
    for d, leftpad in ((64, None), (59, [3, 0])):
        seen = []

        def backend(gm, example_inputs):
            seen.append(gm)
            return gm.forward

        torch.manual_seed(0)
        caches = [torch.randn(2, 256, 2, d, device=DEV, dtype=torch.bfloat16)
                  for _ in range(2)]
        lens = torch.tensor([100, 37], device=DEV, dtype=torch.int32)
        pad = None if leftpad is None else torch.tensor(leftpad, device=DEV, dtype=torch.int32)
        q = torch.randn(2, 1, 4, d, device=DEV, dtype=torch.bfloat16)
        k, v = (torch.randn(2, 1, 2, d, device=DEV, dtype=torch.bfloat16) for _ in range(2))

        def step(q, k_cache, v_cache, k, v, lens, pad):
            return autotune.flash_attn_with_kvcache(q, k_cache, v_cache, k, v,
                                                    cache_seqlens=lens, cache_leftpad=pad,
                                                    causal=True)

        torch._dynamo.reset()
        with torch.no_grad():
            eager = [c.clone() for c in caches]
            ref = step(q, *eager, k, v, lens, pad)
            compiled = [c.clone() for c in caches]
            out = torch.compile(step, fullgraph=True, backend=backend)(q, *compiled, k, v,
                                                                       lens, pad)
        what = f"kvcache fullgraph d={d}" + ("" if pad is None else " leftpad")
        _same((out, *compiled), (ref, *eager), what)
        if not torch.equal(eager[0][0, 100], k[0, 0]):
            raise AssertionError(f"{what}: the new key is not in the cache at row 100")
        if len(seen) != 1:
            raise AssertionError(f"{what}: {len(seen)} graphs")
        targets = {str(n.target) for n in seen[0].graph.nodes if n.op == "call_function"}
        if "autotune.attention_kvcache.default" not in targets:
            raise AssertionError(f"{what}: autotune.attention_kvcache not in the graph: "
                                 f"{sorted(targets)}")
    return "1 graph each (d=64; d=59 padded, with cache_leftpad); output and caches match eager"


def check_compile_mamba_step():
    """torch.compile(fullgraph=True) of a Mamba decoding step through the two drop-ins
    (causal_conv1d_update, then selective_state_update on its output): one graph holding
    both operators; the output and the two states it leaves match eager's."""
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    torch.manual_seed(0)
    batch, dim, width, dstate = 2, 64, 4, 16
    conv_state = torch.randn(batch, dim, width, device=DEV, dtype=torch.bfloat16)
    ssm_state = torch.randn(batch, dim, dstate, device=DEV, dtype=torch.bfloat16)
    x = torch.randn(batch, dim, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(dim, width, device=DEV, dtype=torch.bfloat16)
    bias = torch.randn(dim, device=DEV, dtype=torch.bfloat16)
    dt, z = (torch.randn(batch, dim, device=DEV, dtype=torch.bfloat16) for _ in range(2))
    A = -torch.rand(dim, dstate, device=DEV) - 1.0
    Bm, Cm = (torch.randn(batch, dstate, device=DEV, dtype=torch.bfloat16) for _ in range(2))
    Dv, dbias = torch.randn(dim, device=DEV), torch.rand(dim, device=DEV) - 4.0

    def step(x, conv_state, ssm_state):
        y = autotune.causal_conv1d_update(x, conv_state, w, bias, "silu")
        return autotune.selective_state_update(ssm_state, y, dt, A, Bm, Cm, Dv, z=z,
                                               dt_bias=dbias, dt_softplus=True) * 2

    torch._dynamo.reset()
    with torch.no_grad():
        eager = [conv_state.clone(), ssm_state.clone()]
        ref = step(x, *eager)
        compiled = [conv_state.clone(), ssm_state.clone()]
        out = torch.compile(step, fullgraph=True, backend=backend)(x, *compiled)
    _same((out, *compiled), (ref, *eager), "mamba step fullgraph")
    if len(seen) != 1:
        raise AssertionError(f"{len(seen)} graphs")
    targets = {str(n.target) for n in seen[0].graph.nodes if n.op == "call_function"}
    wanted = {"autotune.causal_conv1d_update.default", "autotune.selective_state_update.default"}
    if wanted - targets:
        raise AssertionError(f"not in the graph: {sorted(wanted - targets)}; it holds "
                             f"{sorted(targets)}")
    return "1 graph, both operators; output and states match eager"


def check_compile_inductor():
    """torch.compile(fullgraph=True) with inductor (the default backend) matches eager."""
    torch._dynamo.reset()
    args = _model_inputs()
    with torch.no_grad():
        ref = _model_fn(*args)
        fn = torch.compile(_model_fn, fullgraph=True)
        out = fn(*args)
        out2 = fn(*args)
    _same(out, ref, "inductor")
    _same(out2, ref, "inductor, second call")


def check_compile_dynamic():
    """fullgraph with dynamic shapes (the fake implementations under symbolic sizes):
    two sequence lengths, one compiled graph."""
    torch._dynamo.reset()
    frames = []

    def backend(gm, example_inputs):
        frames.append(gm)
        return gm.forward

    def block(x, w, b, delta, A, Bm, Cm, Dv, z, dbias):
        y = autotune.causal_conv1d_fn(x, w, b, activation="silu")
        return autotune.selective_scan_fn(y, delta, A, Bm, Cm, Dv, z=z, delta_bias=dbias,
                                          delta_softplus=True) * 2

    fn = torch.compile(block, fullgraph=True, dynamic=True, backend=backend)
    with torch.no_grad():
        for L in (128, 200):
            x, w, b = _conv_inputs(L=L)
            u, delta, A, Bm, Cm, Dv, z, dbias = _scan_inputs(L=L)
            _same([fn(x, w, b, delta, A, Bm, Cm, Dv, z, dbias)],
                  [block(x, w, b, delta, A, Bm, Cm, Dv, z, dbias)], f"dynamic L={L}")
    if len(frames) != 1:
        raise AssertionError(f"{len(frames)} graphs for two lengths (expected 1)")


def _captured(fn, args):
    """fn(*args) captured in a CUDA graph after the warm-up torch's documentation asks for
    (two calls on a side stream): (graph, its static output)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn(*args)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = fn(*args)
    return g, static_out


def check_cuda_graph():
    """Capture the drop-ins in a CUDA graph after the warm-up torch's documentation asks
    for; replay on new input values; the results equal eager calls on those values."""
    args = _model_inputs()
    with torch.no_grad():
        g, static_out = _captured(_model_fn, args)
        for trial in range(2):
            fresh = _model_inputs()
            for a, f in zip(args, fresh):
                a.copy_(f)
            g.replay()
            torch.cuda.synchronize()
            _same(static_out, _model_fn(*args), f"replay {trial}")
    return "8 outputs, 2 replays"


def check_conv_update_graph():
    """causal_conv1d_update captured in a CUDA graph (a decoding step whose state lives in
    place), plain and circular with gathered and padded rows: three replays on new x walk
    the state exactly as three eager calls on a copy of it do."""
    torch.manual_seed(0)
    dim, width = 256, 4
    w = torch.randn(dim, width, device=DEV)
    b = torch.randn(dim, device=DEV)
    cases = (("plain", torch.randn(8, dim, width, device=DEV, dtype=torch.bfloat16), None, None),
             ("circular, gathered and padded rows",
              torch.randn(40, dim, 6, device=DEV, dtype=torch.bfloat16),
              torch.tensor([30, -1, 7, 12, -1, 0, 39, 5], dtype=torch.int32, device=DEV),
              torch.tensor([0, 3, 9, 1, 6, 100, 2, 5], dtype=torch.int32, device=DEV)))
    with torch.no_grad():
        for what, state, indices, lengths in cases:
            x = torch.randn(8, dim, device=DEV, dtype=torch.bfloat16)
            mirror = state.clone()

            def step(x, state, indices=indices, lengths=lengths):
                return autotune.causal_conv1d_update(x, state, w, b, "silu", cache_seqlens=lengths,
                                                     conv_state_indices=indices)

            g, out = _captured(step, (x, state))
            # the two warm-up calls advanced the state (the capture records, runs nothing)
            for _ in range(2):
                step(x, mirror)
            if not torch.equal(state, mirror):
                raise AssertionError(f"{what}: the warm-up calls left another state")
            for trial in range(3):
                x.copy_(torch.randn_like(x))
                g.replay()
                want = step(x, mirror)
                torch.cuda.synchronize()
                if not (torch.equal(out, want) and torch.equal(state, mirror)):
                    raise AssertionError(f"{what}: replay {trial} differs from the eager call")
    return "2 forms, 3 replays each"


def check_workspace_per_stream():
    """Split-KV decoding calls on two streams at once, 30 rounds: each stream has its own
    workspace (the counters in it are per call), and every output matches the eager
    call's. (Earlier checks may already have made the default stream's workspace of this
    size, and torch hands out pooled stream handles again, so what is looked for is a
    workspace per stream, not workspaces new to this check.)"""
    rt = autotune.get_runtime(0)
    torch.manual_seed(0)
    inputs = [_attn_inputs(B=8, Sq=1, Sk=1024, Hq=32, Hkv=8, D=128) for _ in range(2)]
    with torch.no_grad():
        refs = [autotune.flash_attn_func(*x) for x in inputs]  # warm-up, default stream
        for x, ref in zip(inputs, refs):
            want, _ = attention_ref(*x)
            if not (ref - want).abs().max().item() < 2e-2:
                raise AssertionError("the eager call is wrong")
        streams = [torch.cuda.Stream() for _ in range(2)]
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())
        outs = [[], []]
        for _ in range(30):
            for i, s in enumerate(streams):
                with torch.cuda.stream(s):
                    outs[i].append(autotune.flash_attn_func(*inputs[i]))
        torch.cuda.synchronize()
    per_stream = {key[1] for key in rt.workspaces}
    missing = [s.cuda_stream for s in streams if s.cuda_stream not in per_stream]
    if len(missing) == len(streams):
        raise AssertionError("no split-KV variant ran for B=8, Sq=1, Sk=1024 (no stream got a "
                             "workspace): nothing to check")
    if missing:
        raise AssertionError(f"stream {missing[0]:#x} has no workspace of its own: "
                             f"{sorted(per_stream)}")
    for i in range(2):
        for r, o in enumerate(outs[i]):
            err = (o.float() - refs[i].float()).abs().max().item()
            if not err < 2e-2:  # the split merge may add its partials in another order
                raise AssertionError(f"stream {i}, round {r}: differs from the eager call by "
                                     f"{err:.3g}")
    return "2 streams x 30 split-KV calls, a workspace each, every output as eager"


def check_kvcache_graph():
    """A decoding step through flash_attn_with_kvcache (append, causal, split-KV) captured
    in a CUDA graph after an eager warm-up, then replayed on new values: the output and
    the caches it leaves equal eager calls on the same values."""
    torch.manual_seed(0)
    B, S, Hq, Hkv, D = 8, 1024, 32, 8, 128

    def fresh():
        caches = [torch.randn(B, S, Hkv, D, device=DEV, dtype=torch.bfloat16) for _ in range(2)]
        lens = torch.randint(100, S - 1, (B,), device=DEV, dtype=torch.int32)
        q = torch.randn(B, 1, Hq, D, device=DEV, dtype=torch.bfloat16)
        k, v = (torch.randn(B, 1, Hkv, D, device=DEV, dtype=torch.bfloat16) for _ in range(2))
        return [q, *caches, k, v, lens]

    def step(q, k_cache, v_cache, k, v, lens):
        return autotune.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens,
                                                causal=True)

    static = fresh()
    with torch.no_grad():
        g, static_out = _captured(step, static)
        for trial in range(2):
            values = fresh()
            for a, f in zip(static, values):
                a.copy_(f)
            g.replay()
            eager = [t.clone() for t in values]
            ref = step(*eager)
            torch.cuda.synchronize()
            _same((static_out, static[1], static[2]), (ref, eager[1], eager[2]),
                  f"kvcache graph replay {trial}")
    return "2 replays; output and caches as eager"


def check_capture_first_call_refused():
    """A first attention call of a new signature inside capture is refused with a message
    asking for warm-up (nothing is allocated or compiled in the graph); the context is
    healthy afterwards."""
    q, k, v = _attn_inputs(Sq=96, Sk=96, D=128)  # a signature not called before
    g = torch.cuda.CUDAGraph()
    try:
        with torch.no_grad(), torch.cuda.graph(g):
            autotune.flash_attn_func(q, k, v)
    except RuntimeError as e:
        if "warm-up" not in str(e) and "eagerly" not in str(e):
            raise AssertionError(f"refused, but not for the warm-up: {e}") from e
    else:
        raise AssertionError("a first call inside capture was accepted")
    health()
    with torch.no_grad():
        out = autotune.flash_attn_func(q, k, v)
    ref, _ = attention_ref(q, k, v)
    if not (out - ref).abs().max().item() < 2e-2:
        raise AssertionError("the call after the refused capture is wrong")


# =====================================================================================
# The drop-ins' behaviour
# =====================================================================================
def check_workspace_threads():
    """Eight threads each make their first split-KV decoding calls at once, each with
    shapes of its own (workspace sizes new to the runtime): the stream's workspaces are
    made under a lock, so none is freed under a call; every output matches its fp32
    reference."""
    inputs = []
    torch.manual_seed(0)
    for t in range(8):
        inputs.append(_attn_inputs(B=2, Sq=1, Sk=3000 + 517 * t, Hq=8, Hkv=2,
                                   D=(64, 128, 256)[t % 3]))
    refs = [attention_ref(*x)[0] for x in inputs]
    outs, errors = [None] * 8, []
    start = threading.Barrier(8)

    def work(t):
        try:
            start.wait()
            with torch.no_grad():
                outs[t] = [autotune.flash_attn_func(*inputs[t]) for _ in range(4)]
        except Exception as e:  # reported below, with the thread's index
            errors.append(f"thread {t}: {e!r}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    torch.cuda.synchronize()
    if errors:
        raise AssertionError("; ".join(errors))
    for t in range(8):
        for r, o in enumerate(outs[t]):
            err = (o.float() - refs[t].float()).abs().max().item()
            if not err < 2e-2:
                raise AssertionError(f"thread {t}, call {r}: {err:.3g} from the reference")
    return "8 threads x 4 first split-KV calls of their own shapes, every output right"


def check_mamba_views():
    """Mamba's layout: x and z are channel halves of one in_proj output laid out
    [batch, channels, length] with the batch stride smaller than the channel stride; dt
    likewise. conv and scan read them in place and match the references."""
    torch.manual_seed(0)
    B, D, L, N = 3, 64, 130, 16
    hidden = torch.randn(B, L, 32, device=DEV, dtype=torch.bfloat16)
    w_in = torch.randn(2 * D, 32, device=DEV, dtype=torch.bfloat16) / 6
    xz = (w_in @ hidden.permute(2, 0, 1).reshape(32, B * L)).reshape(2 * D, B, L).permute(1, 0, 2)
    x, z = xz.chunk(2, dim=1)
    assert x.stride(0) < x.stride(1), x.stride()
    w = torch.randn(D, 4, device=DEV, dtype=torch.bfloat16) * 0.5
    b = torch.randn(D, device=DEV, dtype=torch.bfloat16) * 0.5
    with torch.no_grad():
        y = autotune.causal_conv1d_fn(x, w, b, activation="silu")
        y_ref, _ = conv_ref(x, w.float(), b.float(), activation="silu")
        if not torch.allclose(y, y_ref, rtol=1e-2, atol=5e-2):
            raise AssertionError(f"conv on the view: {(y - y_ref).abs().max().item():.3g}")
        dt = (torch.randn(D, B * L, device=DEV, dtype=torch.bfloat16) * 0.5).reshape(D, B, L)
        dt = dt.permute(1, 0, 2)
        A = -torch.rand(D, N, device=DEV) - 0.1
        Bm = torch.randn(B, N, L, device=DEV, dtype=torch.bfloat16)
        Cm = torch.randn(B, N, L, device=DEV, dtype=torch.bfloat16)
        Dv = torch.rand(D, device=DEV)
        dbias = torch.rand(D, device=DEV) - 2
        s = autotune.selective_scan_fn(y, dt, A, Bm, Cm, Dv, z=z, delta_bias=dbias,
                                       delta_softplus=True)
        s_ref, _ = scan_ref(y, dt, A, Bm, Cm, Dv, z=z, delta_bias=dbias, delta_softplus=True)
        if not torch.allclose(s, s_ref, rtol=3e-2, atol=5e-2):
            raise AssertionError(f"scan on the views: {(s - s_ref).abs().max().item():.3g}")
    # The outputs keep the dense layout they were given, as the peers' do (so that u,
    # delta, z and out share their rows' offsets: ragged=shift at L=130).
    if y.stride() != x.stride() or s.stride() != y.stride():
        raise AssertionError(f"layouts: x {x.stride()}, conv out {y.stride()}, scan out "
                             f"{s.stride()}")


def check_mamba_inner():
    """mamba_inner_fn against the same computation in float32 (float32 conv and scan
    references) on weights scaled as a model's are: fixed and variable B/C, projection
    biases, mamba-ssm 2.2's RMS norms, odd lengths, fp32/fp16/bf16, xz laid out as the
    Mamba block makes it and contiguous, and bf16 under autocast with fp32 weights."""
    def rel(out, ref):
        return ((out.float() - ref.float()).norm() / ref.float().norm()).item()

    failures = []
    cases = [  # dtype, batch, dim, seqlen, dstate, var_b, var_c, extras, block layout, autocast
        (torch.bfloat16, 2, 256, 300, 16, True, True, (), True, False),
        (torch.float16, 3, 128, 129, 16, True, False, ("biases",), False, False),
        (torch.float32, 1, 192, 1000, 8, False, True, (), True, False),
        (torch.bfloat16, 2, 128, 64, 16, False, False, (), False, False),
        (torch.bfloat16, 2, 256, 333, 16, True, True, ("rms", "biases"), True, False),
        (torch.float32, 2, 128, 200, 16, True, True, ("rms",), False, False),
        (torch.bfloat16, 2, 256, 512, 16, True, True, (), True, True),
    ]
    for dtype, batch, dim, seqlen, dstate, var_b, var_c, extras, block, autocast in cases:
        torch.manual_seed(seqlen)
        d_model, dt_rank = dim // 2, max(1, dim // 32)
        wtype = torch.float32 if autocast else dtype
        hidden = torch.randn(batch, seqlen, d_model, device=DEV, dtype=dtype)
        w_in = torch.randn(2 * dim, d_model, device=DEV, dtype=dtype) / d_model ** 0.5
        if block:  # "d (b l) -> b d l", as mamba-ssm's Mamba.forward builds xz
            xz = (w_in @ hidden.permute(2, 0, 1).reshape(d_model, -1)).view(2 * dim, batch, -1)
            xz = xz.permute(1, 0, 2)
        else:
            xz = (hidden @ w_in.t()).transpose(1, 2).contiguous()
        p = dict(
            conv1d_weight=torch.randn(dim, 1, 4, device=DEV, dtype=wtype) / 2,
            conv1d_bias=torch.randn(dim, device=DEV, dtype=wtype) / 2,
            x_proj_weight=torch.randn(dt_rank + dstate * (var_b + var_c), dim, device=DEV,
                                      dtype=wtype) / dim ** 0.5,
            delta_proj_weight=torch.randn(dim, dt_rank, device=DEV, dtype=wtype) / dt_rank ** 0.5,
            out_proj_weight=torch.randn(d_model, dim, device=DEV, dtype=wtype) / dim ** 0.5,
            out_proj_bias=torch.randn(d_model, device=DEV, dtype=wtype) / 4,
            A=-torch.exp(torch.rand(dim, dstate, device=DEV) * 2),
            B=None if var_b else torch.randn(dim, dstate, device=DEV),
            C=None if var_c else torch.randn(dim, dstate, device=DEV),
            D=torch.rand(dim, device=DEV),
            delta_bias=torch.rand(dim, device=DEV) - 4)
        if "biases" in extras:
            p["B_proj_bias"] = torch.randn(dstate, device=DEV, dtype=wtype) / 4
            p["C_proj_bias"] = torch.randn(dstate, device=DEV, dtype=wtype) / 4
        if "rms" in extras:
            p["b_rms_weight"] = torch.rand(dstate, device=DEV) + 0.5
            p["c_rms_weight"] = torch.rand(dstate, device=DEV) + 0.5
            p["dt_rms_weight"] = torch.rand(dim, device=DEV) + 0.5
        with torch.no_grad():
            if autocast:
                with torch.autocast("cuda", dtype=dtype):
                    out = autotune.mamba_inner_fn(xz, **p)
            else:
                out = autotune.mamba_inner_fn(xz, **p)
            f32 = {k: (v.float() if isinstance(v, torch.Tensor) else v) for k, v in p.items()}
            ref = mamba_inner_ref(xz.float(), **f32, conv=_conv_f32, scan=_scan_f32)
        err = rel(out, ref)
        limit = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}[dtype]
        name = (f"{dtype} B={batch},D={dim},L={seqlen},N={dstate} var_b={var_b} var_c={var_c} "
                f"{'+'.join(extras) or '-'}{' block xz' if block else ''}"
                f"{' autocast' if autocast else ''}")
        if out.shape != (batch, seqlen, d_model) or out.dtype != dtype or not err < limit:
            failures.append(f"{name}: {list(out.shape)} {out.dtype}, relative error {err:.3g}")
    if failures:
        raise AssertionError("; ".join(failures))
    return f"{len(cases)} cases within their dtype's relative error"


def check_conv_layouts():
    """Channel-last x, channel-last initial states and final_states_out: the results of
    contiguous inputs; inputs unchanged."""
    torch.manual_seed(1)
    x_cl = torch.randn(2, 100, 64, device=DEV, dtype=torch.float16).transpose(1, 2)
    w = torch.randn(64, 3, device=DEV)
    init = torch.randn(2, 2, 64, device=DEV, dtype=torch.float16).transpose(1, 2)
    copies = [t.clone() for t in (x_cl, w, init)]
    final_out = torch.empty(2, 2, 64, device=DEV, dtype=torch.float16).transpose(1, 2)
    with torch.no_grad():
        out, final = autotune.causal_conv1d_fn(x_cl, w, None, initial_states=init,
                                               return_final_states=True,
                                               final_states_out=final_out, activation="swish")
        ref, ref_final = conv_ref(x_cl, w, None, init, True, "silu")
    if final is not final_out:
        raise AssertionError("final_states_out was not the tensor returned")
    if not torch.allclose(out, ref, rtol=3e-3, atol=5e-3) or not torch.equal(final, ref_final):
        raise AssertionError("channel-last conv differs from the reference")
    for t, c in zip((x_cl, w, init), copies):
        if not torch.equal(t, c):
            raise AssertionError("an input was modified")
    if out.stride(1) != 1 or out.stride(2) != 64:
        raise AssertionError(f"channel-last x gave out strides {out.stride()}, not channel-last")
    # Mamba-2: xBC a slice of the in_proj output [B, L, P], passed as xBC.transpose(1, 2),
    # read in place (the channel-last kernel) and returned channel-last.
    zxbcdt = torch.randn(3, 777, 2 * 96 + 40, device=DEV, dtype=torch.bfloat16)
    xbc = zxbcdt[:, :, 96:192].transpose(1, 2)
    w2 = torch.randn(96, 4, device=DEV, dtype=torch.bfloat16)
    b2 = torch.randn(96, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        out2 = autotune.causal_conv1d_fn(xbc, w2, b2, activation="silu")
        ref2, _ = conv_ref(xbc, w2, b2, None, False, "silu")
    if not torch.allclose(out2, ref2, rtol=1e-2, atol=5e-2):
        raise AssertionError("Mamba-2's xBC view differs from the reference")
    if out2.stride() != (777 * 96, 1, 96):
        raise AssertionError(f"Mamba-2's xBC view gave out strides {out2.stride()}")


def check_conv_seq_idx():
    """Packed sequences (seq_idx) on channel-last x, as causal-conv1d's
    test_causal_conv1d_varlen checks them: each sequence convolved on its own, zeros
    before its start; seq_idx on channel-first x or with states raises."""
    torch.manual_seed(2)
    batch, seqlen, dim, width = 2, 1000, 4096 + 32, 4
    x = torch.randn(batch, seqlen, 4096 + dim + 64, device=DEV,
                    dtype=torch.bfloat16)[:, :, 4096:4096 + dim].transpose(1, 2)
    weight = torch.randn(dim, width, device=DEV, dtype=torch.float32)
    bias = torch.randn(dim, device=DEV, dtype=torch.float32)
    seq_idx = torch.zeros(batch, seqlen, dtype=torch.int32, device=DEV)
    for b, cuts in enumerate(([1, 7, 300, 301, 650], [2, 3, 999])):
        for i, c in enumerate(cuts):
            seq_idx[b, c:] = i + 1
    with torch.no_grad():
        out = autotune.causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx, activation="silu")
        ref = torch.empty_like(out)
        for b in range(batch):
            ids = seq_idx[b].tolist()
            start = 0
            for t in range(1, seqlen + 1):
                if t == seqlen or ids[t] != ids[start]:
                    part, _ = conv_ref(x[b:b + 1, :, start:t], weight, bias, None, False, "silu")
                    ref[b:b + 1, :, start:t] = part
                    start = t
    if not torch.allclose(out, ref, rtol=1e-2, atol=5e-2):
        raise AssertionError(f"seq_idx: max diff {(out.float() - ref.float()).abs().max():.3g}")
    # The same signature again (the warm plan) with other ids: one sequence a row.
    with torch.no_grad():
        out1 = autotune.causal_conv1d_fn(x, weight, bias, seq_idx=torch.zeros_like(seq_idx),
                                         activation="silu")
        ref1, _ = conv_ref(x, weight, bias, None, False, "silu")
    if not torch.allclose(out1, ref1, rtol=1e-2, atol=5e-2):
        raise AssertionError("seq_idx: a warm call did not read its own ids")
    for kwargs, what in (({"initial_states": torch.zeros(batch, width - 1, dim, device=DEV,
                                                          dtype=x.dtype).transpose(1, 2)},
                          "initial_states"), ({"return_final_states": True}, "final states")):
        try:
            autotune.causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx, **kwargs)
        except ValueError:
            continue
        raise AssertionError(f"seq_idx with {what} did not raise")
    try:
        autotune.causal_conv1d_fn(x.contiguous(), weight, bias, seq_idx=seq_idx)
    except ValueError:
        return
    raise AssertionError("seq_idx with channel-first x did not raise")


def check_attention_conventions():
    """flash-attn's conventions: return_attn_probs gives (out, lse, empty S_dmask);
    window_size (-1, 0) without causal is causal; a window of seqlen_k or more is no
    window; GQA; Sq > Sk causal rows that see no key are 0; [B, H, S, D] views work."""
    torch.manual_seed(2)
    q, k, v = _attn_inputs(Sq=200, Sk=128, Hq=8, Hkv=2, D=128)
    with torch.no_grad():
        causal = autotune.flash_attn_func(q, k, v, causal=True)
        as_window = autotune.flash_attn_func(q, k, v, window_size=(-1, 0))
        wide = autotune.flash_attn_func(q, k, v, causal=True, window_size=(128, 500))
        ref, _ = attention_ref(q, k, v, causal=True)
        out3 = autotune.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
        qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # memory [B, H, S, D]
        viewed = autotune.flash_attn_func(qt, k, v, causal=True)
    if not (torch.equal(causal, as_window) and torch.equal(causal, wide)):
        raise AssertionError("window_size (-1, 0) / a window past seqlen_k is not causal")
    if (len(out3) != 3 or out3[2].numel() != 0 or out3[1].shape != (2, 8, 200) or
            not (out3[0] - causal).abs().max().item() < 1e-2):
        raise AssertionError("return_attn_probs does not return (out, lse, empty S_dmask)")
    if not (causal - ref).abs().max().item() < 2e-2:
        raise AssertionError(f"causal Sq > Sk: {(causal - ref).abs().max().item():.3g}")
    if causal[:, :72].abs().max().item() != 0:
        raise AssertionError("rows that see no key are not 0")
    if not (viewed - ref).abs().max().item() < 2e-2:
        raise AssertionError("a [B, H, S, D]-strided q differs")


def check_forward_only():
    """Inputs requiring grad: the forward runs; backward raises NotImplementedError
    naming the function; under no_grad nothing is recorded."""
    x, w, b = _conv_inputs()
    w.requires_grad_()
    out = autotune.causal_conv1d_fn(x, w, b, activation="silu")
    if not out.requires_grad:
        raise AssertionError("the output of a grad-requiring call does not require grad")
    try:
        out.float().sum().backward()
    except NotImplementedError as e:
        if "causal_conv1d_fn" not in str(e):
            raise AssertionError(f"backward refused without naming the function: {e}") from e
    else:
        raise AssertionError("backward through causal_conv1d_fn did not raise")
    q, k, v = _attn_inputs()
    q.requires_grad_()
    try:
        autotune.flash_attn_func(q, k, v).sum().backward()
    except NotImplementedError:
        pass
    else:
        raise AssertionError("backward through flash_attn_func did not raise")
    with torch.no_grad():
        if autotune.causal_conv1d_fn(x, w, b).requires_grad:
            raise AssertionError("no_grad output requires grad")


def check_database_and_policy():
    """set_policy / set_database take effect on the next call; a captured-before runtime
    is kept (its kernels stay loaded); the variant the runtime reports changes source."""
    x, w, b = _conv_inputs(L=136)
    previous = autotune._config._policy
    with torch.no_grad():
        before = autotune.causal_conv1d_fn(x, w, b)
        autotune.set_policy("default")
        try:
            rt = autotune.get_runtime(0)
            args = rt.causal_conv1d_args(x, w, b, torch.empty_like(x), False)
            source = rt.causal_conv1d_variant(args)
            after = autotune.causal_conv1d_fn(x, w, b)
        finally:
            autotune.set_policy(previous)
    if not source.startswith("default"):
        raise AssertionError(f"policy 'default' runs {source!r}")
    if not torch.allclose(before.float(), after.float(), rtol=1e-2, atol=1e-2):
        raise AssertionError("the default variant's result differs")
    return source


OTHER_CHECKS = {
    "ops: torch.library.opcheck": check_opcheck,
    "compile: fullgraph, one graph with the six operators": check_compile_graph,
    "compile: fullgraph with inductor matches eager": check_compile_inductor,
    "compile: fullgraph, dynamic shapes": check_compile_dynamic,
    "compile: fullgraph, varlen operators": check_compile_varlen,
    "compile: fullgraph, KV cache decoding step": check_compile_kvcache,
    "compile: fullgraph, Mamba decoding step": check_compile_mamba_step,
    "cuda graph: capture and replay": check_cuda_graph,
    "cuda graph: first attention call inside capture is refused": check_capture_first_call_refused,
    "cuda graph: KV cache decoding step": check_kvcache_graph,
    "cuda graph: conv update decoding step": check_conv_update_graph,
    "workspace: split-KV calls on two streams at once": check_workspace_per_stream,
    "workspace: first split-KV calls from eight threads at once": check_workspace_threads,
    "drop-in: Mamba's strided views": check_mamba_views,
    "drop-in: mamba_inner_fn against float32": check_mamba_inner,
    "drop-in: channel-last conv, states": check_conv_layouts,
    "drop-in: conv packed sequences (seq_idx)": check_conv_seq_idx,
    "drop-in: flash-attn conventions": check_attention_conventions,
    "drop-in: forward only": check_forward_only,
    "config: set_policy takes effect": check_database_and_policy,
}


# =====================================================================================
# The bad-input suite (issue 16's list)
# =====================================================================================
def bad_input_cases():
    """(op, case, call, inputs, good) tuples: call() makes the mistake, inputs are the
    tensors that must come back unchanged, good() is a correct call of the same op."""
    bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    rt = autotune.get_runtime(0)
    cases = []

    def add(op, case, call, inputs, good):
        cases.append((op, case, call, inputs, good))

    # ---- causal_conv1d
    x, w, b = _conv_inputs()
    init = torch.randn(2, 64, 3, device=DEV, dtype=bf16)
    conv_op = "torch.ops.autotune.causal_conv1d"
    conv_in = [x, w, b, init]

    def conv_good():
        OPS.causal_conv1d(x, w, b, None, True)

    wide = torch.randn(2, 64, 256, device=DEV, dtype=bf16)
    add(conv_op, "CPU tensors", lambda: OPS.causal_conv1d(x.cpu(), w.cpu(), b.cpu()),
        conv_in, conv_good)
    add(conv_op, "weight on the CPU, x on the GPU", lambda: OPS.causal_conv1d(x, w.cpu(), b),
        conv_in, conv_good)
    add(conv_op, "x with a strided last dimension",
        lambda: OPS.causal_conv1d(wide[..., ::2], w, b), conv_in + [wide], conv_good)
    wt = torch.randn(4, 64, device=DEV, dtype=bf16)
    add(conv_op, "non-contiguous weight", lambda: OPS.causal_conv1d(x, wt.t(), b),
        conv_in + [wt], conv_good)
    add(conv_op, "bias of the wrong dtype (fp32 with a bf16 weight)",
        lambda: OPS.causal_conv1d(x, w, b.float()), conv_in, conv_good)
    add(conv_op, "weight with fewer channels than x", lambda: OPS.causal_conv1d(x, w[:32], b),
        conv_in, conv_good)
    add(conv_op, "short bias", lambda: OPS.causal_conv1d(x, w, b[:32]), conv_in, conv_good)
    add(conv_op, "initial states of the wrong shape ([B, C, 2] for width 4)",
        lambda: OPS.causal_conv1d(x, w, b, init[..., :2].contiguous()), conv_in, conv_good)
    add(conv_op, "initial states of another dtype",
        lambda: OPS.causal_conv1d(x, w, b, init.half()), conv_in, conv_good)
    add(conv_op, "weight of width 5", lambda: OPS.causal_conv1d(
        x, torch.randn(64, 5, device=DEV, dtype=bf16), b), conv_in, conv_good)
    add("autotune.Runtime.causal_conv1d", "out of the wrong dtype",
        lambda: rt.causal_conv1d(x, w, b, out=torch.empty(2, 64, 128, device=DEV, dtype=f16)),
        conv_in, conv_good)
    add("autotune.Runtime.causal_conv1d", "out too small",
        lambda: rt.causal_conv1d(x, w, b, out=torch.empty(2, 64, 64, device=DEV, dtype=bf16)),
        conv_in, conv_good)
    fso = torch.empty(2, 64, 3, device=DEV, dtype=f32)
    add("autotune.causal_conv1d_fn", "final_states_out of the wrong dtype",
        lambda: autotune.causal_conv1d_fn(x, w, b, return_final_states=True,
                                          final_states_out=fso), conv_in, conv_good)
    add("autotune.causal_conv1d_fn", "seq_idx with channel-first x",
        lambda: autotune.causal_conv1d_fn(x, w, b, seq_idx=torch.zeros(
            2, 128, device=DEV, dtype=torch.int32)), conv_in, conv_good)
    # causal_conv1d_update: conv_state must come back unchanged from every refusal.
    state = torch.randn(2, 64, 4, device=DEV, dtype=bf16)
    step = x[:, :, 0].contiguous()
    upd = "autotune.causal_conv1d_update"

    def update_good():
        autotune.causal_conv1d_update(step, state.clone(), w, b, "silu")

    for name, call in (
            ("conv_state of another dtype", lambda: autotune.causal_conv1d_update(
                step, state.half(), w, b)),
            ("conv_state shorter than width - 1", lambda: autotune.causal_conv1d_update(
                step, state[..., :2], w, b)),
            ("conv_state with fewer rows than the batch, no indices",
             lambda: autotune.causal_conv1d_update(step, state[:1], w, b)),
            ("conv_state_indices of dtype int64", lambda: autotune.causal_conv1d_update(
                step, state, w, b, conv_state_indices=torch.zeros(2, device=DEV,
                                                                  dtype=torch.long))),
            ("cache_seqlens of the wrong length", lambda: autotune.causal_conv1d_update(
                step, state, w, b, cache_seqlens=torch.zeros(3, device=DEV,
                                                             dtype=torch.int32))),
            ("x on the CPU", lambda: autotune.causal_conv1d_update(step.cpu(), state, w, b)),
            ("weight of width 5 (the conv refuses it before the state is written)",
             lambda: autotune.causal_conv1d_update(
                 step, state, torch.randn(64, 5, device=DEV, dtype=bf16), b))):
        add(upd, name, call, [step, state, w, b], update_good)
    # selective_state_update: the state must come back unchanged from every refusal.
    ssm = torch.randn(2, 64, 16, device=DEV, dtype=bf16)
    sx, sdt = torch.randn(2, 64, device=DEV, dtype=bf16), torch.randn(2, 64, device=DEV,
                                                                       dtype=bf16)
    sA = -torch.rand(64, 16, device=DEV) - 1.0
    sB, sC = torch.randn(2, 16, device=DEV), torch.randn(2, 16, device=DEV)
    sD = torch.randn(64, device=DEV)
    ssu = "autotune.selective_state_update"

    def state_update_good():
        autotune.selective_state_update(ssm.clone(), sx, sdt, sA, sB, sC, sD, dt_softplus=True)

    for name, call in (
            ("dt of another dtype than x", lambda: autotune.selective_state_update(
                ssm, sx, sdt.float(), sA, sB, sC, sD)),
            ("C with another state size than B", lambda: autotune.selective_state_update(
                ssm, sx, sdt, sA, sB, sC[:, :8], sD)),
            ("state with more rows than the batch, no indices",
             lambda: autotune.selective_state_update(torch.cat([ssm, ssm]), sx, sdt, sA, sB,
                                                     sC, sD)),
            ("state_batch_indices of dtype int64", lambda: autotune.selective_state_update(
                ssm, sx, sdt, sA, sB, sC, sD,
                state_batch_indices=torch.zeros(2, device=DEV, dtype=torch.long))),
            ("x on the CPU", lambda: autotune.selective_state_update(
                ssm, sx.cpu(), sdt, sA, sB, sC, sD)),
            ("A complex", lambda: autotune.selective_state_update(
                ssm, sx, sdt, sA.to(torch.complex64), sB, sC, sD)),
            ("groups that do not divide the heads", lambda: autotune.selective_state_update(
                ssm[:, None].expand(2, 3, 64, 16).contiguous(), sx[:, None].expand(2, 3, 64),
                sdt[:, None].expand(2, 3, 64), sA[None].expand(3, 64, 16),
                torch.randn(2, 2, 16, device=DEV), torch.randn(2, 2, 16, device=DEV)))):
        add(ssu, name, call, [ssm, sx, sdt, sA, sB, sC, sD], state_update_good)
    x_cl = x.transpose(1, 2).contiguous().transpose(1, 2)  # channel-last, same values
    for name, seq in (("seq_idx of dtype float32", torch.zeros(2, 128, device=DEV)),
                      ("seq_idx on the CPU", torch.zeros(2, 128, dtype=torch.int32)),
                      ("seq_idx of the wrong length",
                       torch.zeros(2, 127, device=DEV, dtype=torch.int32))):
        add("autotune.causal_conv1d_fn", name,
            lambda seq=seq: autotune.causal_conv1d_fn(x_cl, w, b, seq_idx=seq),
            [x_cl, w, b], conv_good)
    add("autotune.causal_conv1d_fn", "activation 'relu'",
        lambda: autotune.causal_conv1d_fn(x, w, b, activation="relu"), conv_in, conv_good)

    # ---- attention
    q, k, v = _attn_inputs()
    attn_op = "torch.ops.autotune.attention"
    attn_in = [q, k, v]

    def attn_good():
        OPS.attention(q, k, v, True)

    wide_q = torch.randn(2, 128, 4, 128, device=DEV, dtype=bf16)
    add(attn_op, "CPU tensors", lambda: OPS.attention(q.cpu(), k.cpu(), v.cpu()), attn_in,
        attn_good)
    add(attn_op, "k on the CPU, q on the GPU", lambda: OPS.attention(q, k.cpu(), v), attn_in,
        attn_good)
    add(attn_op, "q with a strided last dimension",
        lambda: OPS.attention(wide_q[..., ::2], k, v), attn_in + [wide_q], attn_good)
    add(attn_op, "mismatched k/v dtypes (bf16 k, fp16 v)",
        lambda: OPS.attention(q, k, v.half()), attn_in, attn_good)
    k128 = torch.randn(2, 128, 2, 128, device=DEV, dtype=bf16)
    add(attn_op, "k with another head dim", lambda: OPS.attention(q, k128, v), attn_in + [k128],
        attn_good)
    add(attn_op, "v shorter than k", lambda: OPS.attention(q, k, v[:, :64]), attn_in, attn_good)
    # flash-attn computes with any scale; the kernels take a positive one (None: the default)
    for scale in (-0.125, 0.0, float("inf")):
        add("autotune.flash_attn_func", f"softmax_scale={scale}",
            lambda scale=scale: autotune.flash_attn_func(q, k, v, softmax_scale=scale), attn_in,
            attn_good)
    cu = torch.tensor([0, 128, 256], device=DEV, dtype=torch.int32)
    packed = [t.reshape(-1, *t.shape[2:]) for t in (q, k, v)]  # [total, heads, D] views
    for scale in (-0.125, 0.0):
        add("autotune.flash_attn_varlen_func", f"softmax_scale={scale}",
            lambda scale=scale: autotune.flash_attn_varlen_func(
                *packed, cu, cu, 128, 128, softmax_scale=scale), attn_in, attn_good)
    k3 = torch.randn(2, 128, 3, 64, device=DEV, dtype=bf16)
    add(attn_op, "kv heads that do not divide q heads (4 and 3)",
        lambda: OPS.attention(q, k3, k3), attn_in + [k3], attn_good)
    add(attn_op, "fp32 q, k, v", lambda: OPS.attention(q.float(), k.float(), v.float()),
        attn_in, attn_good)
    q36 = torch.randn(2, 128, 4, 36, device=DEV, dtype=bf16)
    add(attn_op, "head dim 36 (not a multiple of 8)",
        lambda: OPS.attention(q36, q36[:, :, :2], q36[:, :, :2]), attn_in + [q36], attn_good)
    q264 = torch.randn(2, 128, 4, 264, device=DEV, dtype=bf16)
    add(attn_op, "head dim 264 (over 256)",
        lambda: OPS.attention(q264, q264[:, :, :2], q264[:, :, :2]), attn_in + [q264], attn_good)
    add(attn_op, "softmax_scale <= 0", lambda: OPS.attention(q, k, v, False, -1.0), attn_in,
        attn_good)
    add("autotune.Runtime.attention", "out of the wrong dtype",
        lambda: rt.attention(q, k, v, out=torch.empty(2, 128, 4, 64, device=DEV, dtype=f16)),
        attn_in, attn_good)
    add("autotune.Runtime.attention", "out too small",
        lambda: rt.attention(q, k, v, out=torch.empty(2, 64, 4, 64, device=DEV, dtype=bf16)),
        attn_in, attn_good)
    add("autotune.flash_attn_func", "dropout_p=0.1 (not supported)",
        lambda: autotune.flash_attn_func(q, k, v, dropout_p=0.1), attn_in, attn_good)
    for case, kwargs in (
            ("window_size (-2, 5)", {"window_size": (-2, 5)}),
            ("window_size of three sides", {"window_size": (4, 0, 1)}),
            ("a negative softcap", {"softcap": -1.0}),
            ("alibi_slopes for 3 heads (q has 4)", {"alibi_slopes": torch.rand(3, device=DEV)}),
            ("alibi_slopes on the CPU", {"alibi_slopes": torch.rand(4)}),
            ("float16 alibi_slopes", {"alibi_slopes": torch.rand(4, device=DEV).half()}),
            ("alibi_slopes for another batch size",
             {"alibi_slopes": torch.rand(3, 4, device=DEV)})):
        add("autotune.flash_attn_func", case,
            lambda kwargs=kwargs: autotune.flash_attn_func(q, k, v, **kwargs), attn_in, attn_good)

    # ---- attention against a KV cache: cache_leftpad's mistakes, each refused before the
    # launch (the new keys given, so a call that ran would have written the caches).
    kv_fn = "autotune.flash_attn_with_kvcache"
    kv_op = "torch.ops.autotune.attention_kvcache"
    k_cache, v_cache = (torch.randn(2, 256, 2, 64, device=DEV, dtype=bf16) for _ in range(2))
    paged_k, paged_v = (torch.randn(4, 256, 2, 64, device=DEV, dtype=bf16) for _ in range(2))
    table = torch.tensor([[2], [0]], device=DEV, dtype=torch.int32)
    lens = torch.tensor([100, 37], device=DEV, dtype=torch.int32)
    pad = torch.tensor([10, 0], device=DEV, dtype=torch.int32)
    q1 = torch.randn(2, 1, 4, 64, device=DEV, dtype=bf16)
    k1, v1 = (torch.randn(2, 1, 2, 64, device=DEV, dtype=bf16) for _ in range(2))
    kv_in = [k_cache, v_cache, paged_k, paged_v, table, lens, pad, q1, k1, v1]

    def kv_good():
        autotune.flash_attn_with_kvcache(q1, k_cache, v_cache, cache_seqlens=lens,
                                         cache_leftpad=pad, causal=True)

    for case, kwargs in (
            ("cache_leftpad with a paged cache (block_table)",
             dict(k_cache=paged_k, v_cache=paged_v, block_table=table, cache_leftpad=pad)),
            ("cache_leftpad of dtype int64", dict(cache_leftpad=pad.long())),
            ("cache_leftpad of shape (3,) for batch 2",
             dict(cache_leftpad=torch.zeros(3, device=DEV, dtype=torch.int32))),
            ("cache_leftpad of shape (2, 1)", dict(cache_leftpad=pad[:, None])),
            ("cache_leftpad on the CPU", dict(cache_leftpad=pad.cpu())),
            ("cache_batch_idx with a paged cache (block_table)",
             dict(k_cache=paged_k, v_cache=paged_v, block_table=table,
                  cache_batch_idx=table[:, 0])),
            ("cache_batch_idx of dtype int64", dict(cache_batch_idx=table[:, 0].long())),
            ("cache_batch_idx of shape (2, 1)", dict(cache_batch_idx=table)),
            ("cache_batch_idx on the CPU", dict(cache_batch_idx=table[:, 0].cpu())),
            ("a cache of 4 slots without cache_batch_idx",
             dict(k_cache=paged_k, v_cache=paged_v)),
            # the scale is refused before the launch (which would have appended k, v)
            ("softmax_scale=-0.125", dict(softmax_scale=-0.125)),
            ("softmax_scale=0.0", dict(softmax_scale=0.0))):
        args = dict(k_cache=k_cache, v_cache=v_cache)
        args.update(kwargs)
        add(kv_fn, case, lambda args=args: autotune.flash_attn_with_kvcache(
            q1, k=k1, v=v1, cache_seqlens=lens, causal=True, **args), kv_in, kv_good)
    # The registered operator hands cache_leftpad to the library as it is.
    add(kv_op, "cache_leftpad with a paged cache (block_table)",
        lambda: OPS.attention_kvcache(q1, paged_k, paged_v, lens, table, k1, v1, True,
                                      cache_leftpad=pad), kv_in, kv_good)
    add(kv_op, "cache_leftpad of dtype int64",
        lambda: OPS.attention_kvcache(q1, k_cache, v_cache, lens, None, k1, v1, True,
                                      cache_leftpad=pad.long()), kv_in, kv_good)
    add(kv_op, "cache_leftpad of shape (3,) for batch 2",
        lambda: OPS.attention_kvcache(q1, k_cache, v_cache, lens, None, k1, v1, True,
                                      cache_leftpad=torch.zeros(3, device=DEV,
                                                                dtype=torch.int32)),
        kv_in, kv_good)
    add(kv_op, "cache_batch_idx with a paged cache (block_table)",
        lambda: OPS.attention_kvcache(q1, paged_k, paged_v, lens, table, k1, v1, True,
                                      cache_batch_idx=table[:, 0]), kv_in, kv_good)
    add(kv_op, "cache_batch_idx of dtype int64",
        lambda: OPS.attention_kvcache(q1, paged_k, paged_v, lens, None, k1, v1, True,
                                      cache_batch_idx=table[:, 0].long()), kv_in, kv_good)

    # ---- selective_scan
    u, delta, A, Bm, Cm, Dv, z, dbias = _scan_inputs()
    scan_op = "torch.ops.autotune.selective_scan"
    scan_in = [u, delta, A, Bm, Cm, Dv, z, dbias]

    def scan_good():
        OPS.selective_scan(u, delta, A, Bm, Cm, Dv, z, dbias, True)

    wide_u = torch.randn(2, 64, 256, device=DEV, dtype=bf16)
    fixed = torch.randn(64, 16, device=DEV)
    add(scan_op, "CPU tensors", lambda: OPS.selective_scan(
        u.cpu(), delta.cpu(), A.cpu(), Bm.cpu(), Cm.cpu()), scan_in, scan_good)
    add(scan_op, "u with a strided last dimension",
        lambda: OPS.selective_scan(wide_u[..., ::2], delta, A, Bm, Cm), scan_in + [wide_u],
        scan_good)
    add(scan_op, "bf16 A", lambda: OPS.selective_scan(u, delta, A.bfloat16(), Bm, Cm), scan_in,
        scan_good)
    add(scan_op, "bf16 D", lambda: OPS.selective_scan(u, delta, A, Bm, Cm, Dv.bfloat16()),
        scan_in, scan_good)
    add(scan_op, "fp32 B with bf16 u", lambda: OPS.selective_scan(u, delta, A, Bm.float(), Cm),
        scan_in, scan_good)
    add(scan_op, "complex A", lambda: OPS.selective_scan(
        u, delta, A.to(torch.complex64), Bm, Cm), scan_in, scan_good)
    add(scan_op, "a bf16 fixed B (fixed B/C are fp32)",
        lambda: OPS.selective_scan(u, delta, A, fixed.bfloat16(), Cm), scan_in + [fixed],
        scan_good)
    add(scan_op, "delta of another dtype", lambda: OPS.selective_scan(u, delta.half(), A, Bm, Cm),
        scan_in, scan_good)
    add(scan_op, "z shorter than u",
        lambda: OPS.selective_scan(u, delta, A, Bm, Cm, Dv, z[..., :64]), scan_in, scan_good)
    add(scan_op, "A with another dim than u", lambda: OPS.selective_scan(u, delta, A[:32], Bm, Cm),
        scan_in, scan_good)
    big_n = torch.randn(2, 128, 128, device=DEV, dtype=bf16)
    add(scan_op, "dstate 128 (N <= 64)", lambda: OPS.selective_scan(
        u, delta, -torch.rand(64, 128, device=DEV), big_n, big_n), scan_in + [big_n], scan_good)
    add(scan_op, "5-dimensional B", lambda: OPS.selective_scan(
        u, delta, A, Bm[:, None, None], Cm), scan_in, scan_good)
    add("autotune.Runtime.selective_scan", "out of the wrong dtype",
        lambda: rt.selective_scan(u, delta, A, Bm, Cm, out=torch.empty(2, 64, 128, device=DEV,
                                                                      dtype=f16)),
        scan_in, scan_good)
    add("autotune.Runtime.selective_scan", "out too small",
        lambda: rt.selective_scan(u, delta, A, Bm, Cm, out=torch.empty(2, 64, 100, device=DEV,
                                                                      dtype=bf16)),
        scan_in, scan_good)
    add("autotune.selective_scan_fn", "complex A",
        lambda: autotune.selective_scan_fn(u, delta, A.to(torch.complex64), Bm, Cm), scan_in,
        scan_good)
    add("autotune.selective_scan_fn", "cu_seqlens (not implemented)",
        lambda: autotune.selective_scan_fn(u, delta, A, Bm, Cm, cu_seqlens=torch.tensor(
            [0, 128], device=DEV, dtype=torch.int32)), scan_in, scan_good)

    if torch.cuda.device_count() > 1:
        x1 = x.to("cuda:1")
        add(conv_op, "x on cuda:1, weight and bias on cuda:0",
            lambda: OPS.causal_conv1d(x1, w, b), conv_in + [x1], conv_good)
    return cases


def bad_input():
    """The rows of <gpu>-bad-input.json."""
    rows = []
    with torch.no_grad():
        for op, case, call, inputs, good in bad_input_cases():
            copies = [t.clone() for t in inputs]

            def healthy(good=good):
                torch.cuda.synchronize()
                good()
                torch.cuda.synchronize()

            def unchanged(inputs=inputs, copies=copies):
                return all(torch.equal(t, c) for t, c in zip(inputs, copies))

            verdict, message = judge_bad_input(call, unchanged, healthy)
            rows.append({"op": op, "case": case, "verdict": verdict, "message": message})
            if verdict.startswith("context lost"):
                break
    return rows
