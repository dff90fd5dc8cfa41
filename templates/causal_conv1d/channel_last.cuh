// Causal depthwise conv1d forward, channel-last: the kernel of kernel.cuh's op for x and
// out whose channel dimension is contiguous (x.stride(1) == 1: memory order [B, L, C],
// what Mamba-2 passes as xBC.transpose(1, 2)). Same semantics, arguments and entry point;
// kernel.cuh includes this file when AT_CHANNEL_LAST=1, after ConvArgs and conv_point.
//
// A thread owns k_vec adjacent channels (one vector access per position) and walks a
// chunk of args.chunk consecutive positions, k_items at a time. Its inputs travel
// through a ring of k_stages steps in shared memory that only this thread reads: cp.async
// keeps the next k_stages - 1 steps in flight without holding registers for them (a
// register prefetch of one step cost occupancy: bench/notes/causal_conv1d-channel-last.md).
// Each position's outputs are computed from the W-1 inputs before it, which stay in
// registers from one position to the next (as fp32). Only the chunk's first W-1 inputs
// are loaded twice (by this thread and by the thread of the chunk before). The host picks
// the chunk length (runtime/ops/causal_conv1d.cpp channel_last_grid): about two waves of
// threads, but enough steps a thread for the ring to overlap loads with compute. k_lanes
// consecutive threads cover consecutive channel vectors, so a warp's accesses at one
// position are one contiguous span of memory.
//
// Compile-time parameters in this layout:
//   AT_THREADS   threads per block.
//   AT_VEC       channels per vector access (the weights of those channels live in
//                registers: k_vec x W floats, the register cost of wide vectors).
//   AT_ITEMS     positions per step: vectors in flight per thread.
//   AT_CL_LANES  threads along the channels (a power of two, at most the block; the
//                host's choice: enough to cover C / k_vec, so short C packs positions).
//   AT_CPB, AT_SMEM are not used (the space's values cpb=1, load=direct).
//   AT_SEQ_IDX   1: args.seq_idx holds packed sequences' ids; the input at s counts for
//                the output at t only when seq_idx[b, s] == seq_idx[b, t] (each position's
//                id is read once per thread, and the window keeps the ids of its inputs).
//                A negative id marks padding: the output there is 0 (causal-conv1d's).
//
// vector_mode: 1 when x's and out's addresses and batch and length strides are
// multiples of a vector (each position's channels then start aligned); a last vector
// that C does not fill is copied in part (zero-filled) and stored element by element.
// 0: every access is one element (copied into the ring through registers).

#include "common/async.cuh"

#ifndef AT_CL_LANES
#error "AT_CL_LANES must be defined"
#endif
constexpr int k_lanes = AT_CL_LANES;
constexpr int k_groups = k_threads / k_lanes; // position chunks a block walks side by side
static_assert(k_threads % k_lanes == 0, "the channel lanes must divide the block");
// Steps in each thread's ring: two in flight while one is computed.
constexpr int k_stages = 3;
constexpr int k_vec_bytes = k_vec * int(sizeof(x_t));
constexpr int k_copy_bytes = k_vec_bytes >= 16 ? 16 : k_vec_bytes; // one cp.async

#ifndef AT_SEQ_IDX
#define AT_SEQ_IDX 0
#endif
// One thread's state: its channels' filters and bias, and the inputs at the k_halo
// positions before the next one it computes (win[h] is position t - k_halo + h).
struct ChannelLastThread {
  float w[k_vec][k_width];
  float bias[k_vec];
  float win[k_halo][k_vec];
#if AT_SEQ_IDX
  int sid[k_halo]; // the sequence ids of the window's positions
#endif
};

// Inputs at position q (0 <= q < length) of the thread's channels: one vector, or one
// element at a time for a partial last vector or unaligned tensors.
__device__ __forceinline__ void load_channels(at_vec<x_t, k_vec>& v, const x_t* p, bool whole,
                                              int valid) {
  if (whole) {
    v.load(p);
  } else {
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      v.elem[j] = at_load_or_zero(p + j, j < valid);
    }
  }
}

// The thread's channels at one position (the first `valid` of them) copied into shared
// memory at dst, zeros past them.
__device__ __forceinline__ void stage_channels(unsigned dst, const x_t* src, int valid) {
  const int bytes = valid * int(sizeof(x_t));
#pragma unroll
  for (int q = 0; q < k_vec_bytes / k_copy_bytes; ++q) {
    const int left = bytes - q * k_copy_bytes;
    cp_async_bytes<k_copy_bytes>(dst + q * k_copy_bytes,
                                 reinterpret_cast<const char*>(src) + q * k_copy_bytes,
                                 left < 0              ? 0
                                 : left > k_copy_bytes ? k_copy_bytes
                                                       : left);
  }
}

// The outputs at the first `count` of those N positions, each shifting the window by one
// position.
template <int N>
__device__ __forceinline__ void
compute_steps(ChannelLastThread& s, const at_vec<x_t, k_vec> (&v)[N], x_t* out_pos,
              long long out_step, bool whole, int valid, int count, const int (&ids)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (i >= count) {
      break;
    }
    float cur[k_vec];
    v[i].to_float(cur);
    at_vec<x_t, k_vec> o;
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      float point[k_width];
#pragma unroll
      for (int h = 0; h < k_halo; ++h) {
#if AT_SEQ_IDX
        point[h] = s.sid[h] == ids[i] ? s.win[h][j] : 0.0f; // another sequence's input
#else
        point[h] = s.win[h][j];
#endif
      }
      point[k_halo] = cur[j];
#if AT_SEQ_IDX
      o.elem[j] = at_from_float<x_t>(ids[i] < 0 ? 0.0f : conv_point(point, s.w[j], s.bias[j]));
#else
      o.elem[j] = at_from_float<x_t>(conv_point(point, s.w[j], s.bias[j]));
#endif
#pragma unroll
      for (int h = 0; h + 1 < k_halo; ++h) {
        s.win[h][j] = s.win[h + 1][j];
      }
      s.win[k_halo - 1][j] = cur[j];
    }
#if AT_SEQ_IDX
#pragma unroll
    for (int h = 0; h + 1 < k_halo; ++h) {
      s.sid[h] = s.sid[h + 1];
    }
    s.sid[k_halo - 1] = ids[i];
#endif
    x_t* dst = out_pos + i * out_step;
    if (whole) {
      o.store(dst);
    } else {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        if (j < valid) {
          dst[j] = o.elem[j];
        }
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(k_threads) causal_conv1d_fwd(const ConvArgs args) {
  const int vectors = (args.channels + k_vec - 1) / k_vec; // channel vectors of a position
  const int blocks_per_batch = (vectors + k_lanes - 1) / k_lanes;
  const int b = blockIdx.x / blocks_per_batch;
  const int cv = (blockIdx.x % blocks_per_batch) * k_lanes + threadIdx.x % k_lanes;
  const int t0 = (blockIdx.y * k_groups + threadIdx.x / k_lanes) * args.chunk;
  if (cv >= vectors || t0 >= args.length) {
    return; // (no block-wide synchronisation below)
  }
  const int c0 = cv * k_vec;
  const int valid = args.channels - c0 < k_vec ? args.channels - c0 : k_vec;
  const bool whole = args.vector_mode != 0 && valid == k_vec;
  const int t1 = t0 + args.chunk < args.length ? t0 + args.chunk : args.length;

  ChannelLastThread s;
#pragma unroll
  for (int j = 0; j < k_vec; ++j) {
    const int c = j < valid ? c0 + j : c0; // (a partial vector repeats its first channel)
#pragma unroll
    for (int k = 0; k < k_width; ++k) {
      s.w[j][k] = at_to_float(args.weight[c * k_width + k]);
    }
#if AT_HAS_BIAS
    s.bias[j] = at_to_float(args.bias[c]);
#else
    s.bias[j] = 0.0f;
#endif
  }
  const x_t* x_b = args.x + b * args.x_batch_stride + c0;
  x_t* out_b = args.out + b * args.out_batch_stride + c0;
  const long long state_b = static_cast<long long>(b) * args.channels + c0; // [B, C, W-1] row
#if AT_SEQ_IDX
  const int* seq_b = args.seq_idx + b * args.seq_idx_batch_stride;
#endif
  // The window in front of t0: x, or before position 0 the initial state (or zero).
#pragma unroll
  for (int h = 0; h < k_halo; ++h) {
    const int q = t0 - k_halo + h;
    if (q >= 0) {
      at_vec<x_t, k_vec> v;
      load_channels(v, x_b + q * args.x_length_stride, whole, valid);
      v.to_float(s.win[h]);
    } else {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        const bool from_init = args.initial_states != nullptr && j < valid;
        const x_t* src = args.initial_states + (state_b + j) * k_halo + (k_halo + q);
        s.win[h][j] = at_to_float(at_load_or_zero(from_init ? src : x_b, from_init));
      }
    }
#if AT_SEQ_IDX
    // (before position 0 the inputs are zeros: no initial states with seq_idx)
    s.sid[h] = q >= 0 ? seq_b[q] : -1;
#endif
  }
  const long long xs = args.x_length_stride, os = args.out_length_stride;
  // Steps of k_items positions through the ring (step k in slot k % k_stages; the last
  // one may be partial). Without vectors each element is copied through registers.
  __shared__ at_vec<x_t, k_vec> ring[k_stages][k_items][k_threads];
  const int steps = (t1 - t0 + k_items - 1) / k_items;
  auto issue = [&](int k) {
    if (k < steps) {
#pragma unroll
      for (int i = 0; i < k_items; ++i) {
        const int p = t0 + k * k_items + i;
        at_vec<x_t, k_vec>& slot = ring[k % k_stages][i][threadIdx.x];
        if (p < t1 && args.vector_mode != 0) {
          stage_channels(at_smem_addr(&slot), x_b + p * xs, valid);
        } else if (p < t1) {
          load_channels(slot, x_b + p * xs, false, valid);
        }
      }
    }
    cp_async_commit(); // (an empty group past the last step keeps the count uniform)
  };
#pragma unroll
  for (int k = 0; k + 1 < k_stages; ++k) {
    issue(k);
  }
#pragma unroll 1
  for (int k = 0; k < steps; ++k) {
    issue(k + k_stages - 1);
    cp_async_wait<k_stages - 1>(); // this thread's step k has landed
    at_vec<x_t, k_vec> cur[k_items];
#pragma unroll
    for (int i = 0; i < k_items; ++i) {
      cur[i] = ring[k % k_stages][i][threadIdx.x];
    }
    const int first = t0 + k * k_items;
    int ids[k_items] = {};
#if AT_SEQ_IDX
#pragma unroll
    for (int i = 0; i < k_items; ++i) {
      ids[i] = first + i < t1 ? seq_b[first + i] : 0;
    }
#endif
    compute_steps<k_items>(s, cur, out_b + first * os, os, whole, valid, t1 - first, ids);
  }
  // The chunk that ends the row leaves the row's last W-1 inputs in the window (the
  // initial state's, or zeros, where L < W-1).
  if (args.final_states && t1 == args.length) {
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      if (j < valid) {
#pragma unroll
        for (int h = 0; h < k_halo; ++h) {
          args.final_states[(state_b + j) * k_halo + h] = at_from_float<x_t>(s.win[h][j]);
        }
      }
    }
  }
}
