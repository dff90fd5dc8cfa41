"""causal_conv1d_update, the decoding step of a Mamba block's conv: host and GPU time of
a warm call through the drop-in (autotune.causal_conv1d_update) and of causal-conv1d's
own reference written in torch (torch_ref: roll the state, F.conv1d-free sum, as the
peer's tests compute it), on the shapes of bench/notes/causal_conv1d-update.md. On the
GPU machine:

    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
    AUTOTUNE_LIBRARY=$PWD/.device/libautotune.so python3 bench/conv_update_call.py

PKG=folder imports the package from there instead of python/ (an older copy, for a
before/after on one machine). Per shape and form (plain: the state shifts; circular:
cache_seqlens and conv_state_indices): host µs of a warm call (median of 500 single calls
after 50 warm-up, the stream synchronized every 50), stream µs per call (events around
500 back-to-back calls: the host's pace when it is slower than the GPU), and GPU µs per
call (a CUDA graph of 100 calls replayed, divided by 100: the kernels alone), with the
max error of one call against a float64 reference of out and the new state.
"""
import os
import sys
import time

sys.path.insert(0, os.environ.get("PKG", "python"))
import torch  # noqa: E402

import autotune  # noqa: E402

autotune.set_policy("heuristic")
dev = "cuda"
SHAPES = [(1, 5120, 4, 4), (16, 5120, 4, 4), (64, 5120, 4, 4), (64, 8192, 4, 3)]


def reference(x, state, weight, bias, lens, rows):
    """out and the new state rows in float64 (x (B, C, L), state rows gathered)."""
    B, C, L = x.shape
    S = state.shape[2]
    W = weight.shape[1]
    xs, st = x.double(), state.double()
    if lens is None:
        full = torch.cat([st, xs], dim=2)  # oldest first
        window = full[:, :, S - (W - 1):]
        new = full[:, :, -S:]
    else:
        idx = (lens.long()[:, None] + torch.arange(-(W - 1), 0, device=dev)) % S
        window = torch.cat([st.gather(2, idx[:, None, :].expand(B, C, W - 1)), xs], dim=2)
        new = st.clone()
        for t in range(max(0, L - S), L):
            pos = (lens.long() + t) % S
            new.scatter_(2, pos[:, None, None].expand(B, C, 1), xs[:, :, t:t + 1])
    out = torch.stack([(window[:, :, t:t + W] * weight.double()).sum(-1) for t in range(L)], -1)
    out = out + bias.double()[:, None]
    return out * torch.sigmoid(out), new


def timed(f, n=500):
    for _ in range(50):
        f()
    torch.cuda.synchronize()
    ts = []
    for i in range(n):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
        if i % 50 == 0:
            torch.cuda.synchronize()
    ts.sort()
    host = ts[len(ts) // 2] * 1e6
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        f()
    e1.record()
    torch.cuda.synchronize()
    stream = e0.elapsed_time(e1) * 1e3 / n
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        f()
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            for _ in range(100):
                f()
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    e0.record()
    for _ in range(10):
        g.replay()
    e1.record()
    torch.cuda.synchronize()
    gpu = e0.elapsed_time(e1) * 1e3 / 1000
    return host, stream, gpu


def main():
    torch.manual_seed(0)
    print(f"{'B':>3} {'C':>5} {'W':>2} {'S':>2} {'form':8} {'call':10} {'host us':>8} "
          f"{'stream us':>9} {'gpu us':>7} {'max err':>8}")
    for B, C, W, S in SHAPES:
        for form in ("plain", "circular"):
            x = torch.randn(B, C, device=dev, dtype=torch.bfloat16)
            weight = torch.randn(C, W, device=dev, dtype=torch.float32) * 0.5
            bias = torch.randn(C, device=dev, dtype=torch.float32) * 0.5
            E = B if form == "plain" else 2 * B + 3
            state = torch.randn(E, C, S, device=dev, dtype=torch.bfloat16)
            lens = rows = None
            if form == "circular":
                lens = torch.randint(0, 3 * S, (B,), device=dev, dtype=torch.int32)
                rows = torch.randperm(E, device=dev)[:B].to(torch.int32)
            gathered = state if rows is None else state[rows.long()]
            want_out, want_state = reference(x[:, :, None], gathered, weight, bias, lens, rows)
            out = autotune.causal_conv1d_update(x, state, weight, bias, "silu", lens, rows)
            got_state = state if rows is None else state[rows.long()]
            err = max((out.double() - want_out[:, :, 0]).abs().max().item(),
                      (got_state.double() - want_state).abs().max().item())
            calls = {"autotune": lambda: autotune.causal_conv1d_update(x, state, weight, bias,
                                                                      "silu", lens, rows)}
            if form == "plain":
                def torch_ref():
                    window = torch.cat([state, x[:, :, None]], dim=2)
                    state.copy_(window[:, :, 1:])
                    y = (window[:, :, -W:] * weight).sum(-1) + bias
                    return torch.nn.functional.silu(y).to(x.dtype)
                calls["torch_ref"] = torch_ref
            for name, f in calls.items():
                host, stream, gpu = timed(f)
                print(f"{B:3d} {C:5d} {W:2d} {S:2d} {form:8} {name:10} {host:8.1f} {stream:9.1f} "
                      f"{gpu:7.2f} {err if name == 'autotune' else float('nan'):8.1e}",
                      flush=True)


if __name__ == "__main__":
    main()
