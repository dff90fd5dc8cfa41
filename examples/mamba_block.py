#!/usr/bin/env python3
"""A Mamba-1 block as model code on autotune's drop-ins: the forward pass of mamba-ssm's
Mamba module (mamba_ssm/modules/mamba_simple.py) both ways it runs there: the fused path
(use_fast_path: one mamba_inner_fn call) and the path through causal_conv1d_fn and
selective_scan_fn, with `from autotune import ...` in place of mamba-ssm's and
causal-conv1d's imports. As there, x and z are channel halves of one in_proj output laid
out [batch, channels, length] with the batch stride smaller than the channel stride, and
dt is such a view too: the kernels read them in place.

Runs the bf16 block both ways, eagerly and under torch.compile(fullgraph=True), and
checks each against the same block in float32 on PyTorch only (nn.Conv1d and a
sequential scan).

    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
    python3 examples/mamba_block.py --lib .device/libautotune.so

Exit status 1 when a result is off.
"""
import argparse
import copy
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import autotune  # noqa: E402  (the library is looked for at the first call, not here)
from autotune import causal_conv1d_fn, mamba_inner_fn, selective_scan_fn  # noqa: E402


class Mamba(nn.Module):
    """mamba-ssm's Mamba block (its parameters and their initialisation), forward only.
    kernels="autotune" runs the drop-ins (use_fast_path: mamba_inner_fn, as mamba-ssm's
    default); kernels="torch" the PyTorch reference."""

    def __init__(self, d_model, d_state=16, d_conv=4, expand=2, dt_min=0.001, dt_max=0.1,
                 dt_init_floor=1e-4, conv_bias=True, bias=False, device=None, dtype=None):
        factory = {"device": device, "dtype": dtype}
        super().__init__()
        self.d_model, self.d_state, self.d_conv = d_model, d_state, d_conv
        self.d_inner = int(expand * d_model)
        self.dt_rank = math.ceil(d_model / 16)
        self.kernels = "autotune"
        self.use_fast_path = True
        self.in_proj = nn.Linear(d_model, self.d_inner * 2, bias=bias, **factory)
        self.conv1d = nn.Conv1d(self.d_inner, self.d_inner, bias=conv_bias, kernel_size=d_conv,
                                groups=self.d_inner, padding=d_conv - 1, **factory)
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + d_state * 2, bias=False, **factory)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=True, **factory)
        dt_init_std = self.dt_rank ** -0.5
        nn.init.uniform_(self.dt_proj.weight, -dt_init_std, dt_init_std)
        dt = torch.exp(torch.rand(self.d_inner, **factory) * (math.log(dt_max) - math.log(dt_min))
                       + math.log(dt_min)).clamp(min=dt_init_floor)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        A = torch.arange(1, d_state + 1, dtype=torch.float32, device=device).repeat(self.d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A))  # kept in fp32
        self.D = nn.Parameter(torch.ones(self.d_inner, device=device))  # kept in fp32
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=bias, **factory)

    def forward(self, hidden_states):
        batch, seqlen, dim = hidden_states.shape
        # xz = rearrange(W_in @ rearrange(h, "b l d -> d (b l)"), "d (b l) -> b d l")
        xz = (self.in_proj.weight @ hidden_states.permute(2, 0, 1).reshape(dim, batch * seqlen))
        xz = xz.reshape(-1, batch, seqlen).permute(1, 0, 2)
        if self.in_proj.bias is not None:
            xz = xz + self.in_proj.bias.to(dtype=xz.dtype)[:, None]
        A = -torch.exp(self.A_log.float())
        if self.kernels == "autotune" and self.use_fast_path:
            return mamba_inner_fn(xz, self.conv1d.weight, self.conv1d.bias, self.x_proj.weight,
                                  self.dt_proj.weight, self.out_proj.weight, self.out_proj.bias,
                                  A, None, None, self.D.float(),
                                  delta_bias=self.dt_proj.bias.float(), delta_softplus=True)
        x, z = xz.chunk(2, dim=1)
        if self.kernels == "autotune":
            x = causal_conv1d_fn(x=x, weight=self.conv1d.weight.squeeze(1), bias=self.conv1d.bias,
                                 activation="silu")
        else:
            x = F.silu(self.conv1d(x)[..., :seqlen])
        x_dbl = self.x_proj(x.permute(0, 2, 1).reshape(batch * seqlen, -1))  # (b l) d
        dt, B, C = torch.split(x_dbl, [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = (self.dt_proj.weight @ dt.t()).reshape(-1, batch, seqlen).permute(1, 0, 2)
        B = B.reshape(batch, seqlen, -1).permute(0, 2, 1).contiguous()  # b dstate l
        C = C.reshape(batch, seqlen, -1).permute(0, 2, 1).contiguous()
        if self.kernels == "autotune":
            y = selective_scan_fn(x, dt, A, B, C, self.D.float(), z=z,
                                  delta_bias=self.dt_proj.bias.float(), delta_softplus=True)
        else:
            y = scan_reference(x, dt, A, B, C, self.D.float(), z, self.dt_proj.bias.float())
        return self.out_proj(y.permute(0, 2, 1))


def scan_reference(u, delta, A, B, C, D, z, delta_bias):
    """The Mamba-1 selective scan step by step (variable B and C, softplus), in u's dtype."""
    delta = F.softplus(delta + delta_bias[:, None])
    h = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for t in range(u.shape[2]):
        h = torch.exp(delta[:, :, t, None] * A) * h + \
            (delta[:, :, t] * u[:, :, t])[:, :, None] * B[:, None, :, t]
        ys.append((h * C[:, None, :, t]).sum(-1))
    y = torch.stack(ys, dim=-1) + u * D[:, None]
    return y * F.silu(z)


def rel_err(out, ref):
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", help="libautotune.so (else $AUTOTUNE_LIBRARY, the package's search)")
    ap.add_argument("--db", help="tuning database (else $AUTOTUNE_DB)")
    args = ap.parse_args()
    if args.lib:
        os.environ["AUTOTUNE_LIBRARY"] = os.path.abspath(args.lib)
    if args.db:
        autotune.set_database(args.db)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    block = Mamba(d_model=512, device="cuda", dtype=torch.bfloat16).eval()
    reference = copy.deepcopy(block).float()
    reference.kernels = "torch"
    hidden = torch.randn(2, 300, 512, device="cuda", dtype=torch.bfloat16)
    failures = 0
    results = []
    with torch.no_grad():
        ref = reference(hidden.float())
        for fast in (True, False):
            block.use_fast_path = fast
            path = "mamba_inner_fn" if fast else "causal_conv1d_fn + selective_scan_fn"
            torch._dynamo.reset()
            results += [(f"{path}, eager", block(hidden)),
                        (f"{path}, torch.compile(fullgraph=True)",
                         torch.compile(block, fullgraph=True)(hidden))]
    for name, out in results:
        err = rel_err(out, ref)
        ok = out.dtype == torch.bfloat16 and out.shape == hidden.shape and err < 3e-2
        print(f"Mamba block {name}: relative error {err:.2e} vs the float32 PyTorch block "
              f"({'ok' if ok else 'OFF'})")
        failures += not ok
    print("ok" if failures == 0 else f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
