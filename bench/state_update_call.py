"""selective_state_update, the decoding step of a Mamba block's selective scan: host and
GPU time of a warm call through the drop-in (autotune.selective_state_update) beside
mamba-ssm's reference written in torch (torch_ref, the peer's selective_state_update_ref),
and the bytes the GPU time moves against a device copy. On the GPU machine:

    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
    AUTOTUNE_LIBRARY=$PWD/.device/libautotune.so python3 bench/state_update_call.py

Per shape: host µs of a warm call (median of 500 single calls after 50 warm-up, the stream
synchronized every 50), GPU µs per call (a CUDA graph of 100 calls replayed, divided by
100; the state stays in L2 only where it fits), GB/s of the state read and written plus
the small tensors, the same for a device copy of as many bytes, and the max error of one
call against the float64 reference (out, new state).
"""
import os
import sys

sys.path.insert(0, os.environ.get("PKG", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
import torch  # noqa: E402

import autotune  # noqa: E402
from autotune._runtime import tensor_fields  # noqa: E402
from conv_update_call import timed  # noqa: E402  (host µs, stream µs, GPU µs of a call)
from gpu_checks import state_update_ref  # noqa: E402

autotune.set_policy("heuristic")
dev = "cuda"
# (name, B, H, P, N, G, state dtype): Mamba-1 2.8B (no heads) and Mamba-2 2.7B.
SHAPES = [("mamba1", 1, 0, 5120, 16, 1, torch.bfloat16),
          ("mamba1", 64, 0, 5120, 16, 1, torch.bfloat16),
          ("mamba2", 1, 80, 64, 128, 1, torch.bfloat16),
          ("mamba2", 64, 80, 64, 128, 1, torch.bfloat16),
          ("mamba2", 64, 80, 64, 128, 1, torch.float32)]


def main():
    torch.manual_seed(0)
    print(f"{'model':6} {'B':>3} {'H':>3} {'P':>5} {'N':>4} {'state':9} {'call':9} {'host us':>8} "
          f"{'gpu us':>8} {'GB/s':>7} {'copy GB/s':>9} {'max err':>8}")
    for name, B, H, P, N, G, sdt in SHAPES:
        heads = (H,) if H else ()
        hh = H or 1
        x = torch.randn(B, *heads, P, device=dev, dtype=torch.bfloat16)
        dt = torch.randn(B, *heads, P, device=dev, dtype=torch.bfloat16)
        z = torch.randn_like(x) if name == "mamba1" else None
        if H:
            A = (-torch.rand(H, device=dev) - 1.0)[:, None, None].expand(H, P, N)
            D = torch.randn(H, device=dev)[:, None].expand(H, P)
            dt_bias = (torch.rand(H, device=dev) - 4.0)[:, None].expand(H, P)
            dt = torch.randn(B, H, device=dev, dtype=torch.bfloat16)[:, :, None].expand(B, H, P)
            Bm = torch.randn(B, G, N, device=dev, dtype=torch.bfloat16)
        else:
            A = -torch.rand(P, N, device=dev) - 1.0
            D = torch.randn(P, device=dev)
            dt_bias = torch.rand(P, device=dev) - 4.0
            Bm = torch.randn(B, N, device=dev, dtype=torch.bfloat16)
        Cm = torch.randn_like(Bm)
        state = torch.randn(B, *heads, P, N, device=dev, dtype=sdt)
        ref_state = state.double().clone()
        want = state_update_ref(ref_state, x.double(), dt.double(), A.double(), Bm.double(),
                                Cm.double(), D.double(), None if z is None else z.double(),
                                dt_bias.double(), True)
        out = autotune.selective_state_update(state, x, dt, A, Bm, Cm, D, z=z, dt_bias=dt_bias,
                                              dt_softplus=True)
        err = max((out.double() - want).abs().max().item(),
                  (state.double() - ref_state).abs().max().item())
        moved = 2 * state.numel() * state.element_size() + x.numel() * 2 * (4 if z is not None
                                                                           else 3)
        src = torch.empty(moved // 2, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        calls = {
            "autotune": lambda: autotune.selective_state_update(
                state, x, dt, A, Bm, Cm, D, z=z, dt_bias=dt_bias, dt_softplus=True),
            "torch_ref": lambda: state_update_ref(state, x, dt, A, Bm, Cm, D, z=z,
                                                  dt_bias=dt_bias, dt_softplus=True),
        }
        copy_us = timed(lambda: dst.copy_(src))[2]
        args = autotune.get_runtime(x.device.index).pack(
            "selective_state_update", *[f for t, n in (
                (state, "state"), (x, "x"), (dt, "dt"), (A, "A"), (Bm, "B"), (Cm, "C"), (D, "D"),
                (z, "z"), (dt_bias, "dt_bias"), (out, "out"), (None, "i"))
                for f in tensor_fields(t, n)], 1)
        print("  variant:", autotune.get_runtime(x.device.index).selective_state_update_variant(
            args), flush=True)
        for call, f in calls.items():
            host, _, gpu = timed(f)
            print(f"{name:6} {B:3d} {hh:3d} {P:5d} {N:4d} {str(sdt)[6:]:9} {call:9} {host:8.1f} "
                  f"{gpu:8.2f} {moved / gpu * 1e-3:7.0f} {moved / copy_us * 1e-3:9.0f} "
                  f"{err if call == 'autotune' else float('nan'):8.1e}", flush=True)


if __name__ == "__main__":
    main()
