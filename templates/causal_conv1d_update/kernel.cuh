// Causal depthwise conv1d decoding step against a rolling state (causal-conv1d's
// causal_conv1d_update): the L new inputs x[b,c,0..L-1] continue the inputs the state
// row of sequence b holds,
//   out[b,c,t] = act(bias[c] + sum_{k<W} w[c,k] * in[t-W+1+k]),
// where in[i] = x[b,c,i] for i >= 0 and, before 0, the state's W-1 inputs before x.
// The state row is then updated with x, in one of two forms:
//   linear   (AT_CIRCULAR 0): the row is the last S inputs, oldest first; the W-1
//            before x are its last W-1, and it shifts left by L with x's last
//            min(L, S) inputs filling its end.
//   circular (AT_CIRCULAR 1): the row is a ring written from p = cache_seqlens[b]
//            (mod S) on; the W-1 inputs before x are positions p-W+1 .. p-1 (mod S),
//            and x's last min(L, S) inputs are written at (p + t) mod S, the rest of
//            the ring kept.
// With AT_GATHER the row is state_indices[b] of E rows; one outside [0, E) (such as
// the padding index -1) is padding: its outputs are 0 and no state row is touched.
//
// One thread per (b, c), adjacent threads adjacent channels: the state row (S
// elements, S known at compile time) and a window of the last W-1 inputs live in
// registers. The kernel moves a few MB at most and is bound by its launch, so it
// stays simple: no shared memory, scalar accesses through any strides.
//
// Compile-time parameters (NVRTC -D, all given by the host):
//   AT_THREADS   threads (channels) per block, a multiple of 32: fewer threads make
//                more blocks for a small batch * channels to spread over the SMs,
//                more make fewer blocks to schedule.
//   AT_WIDTH     filter width W (2..4).
//   AT_STATE_LEN state length S (W-1..64), the registers of the state row.
//   AT_SILU, AT_HAS_BIAS  0/1.
//   AT_CIRCULAR  0: linear state; 1: circular, positioned by cache_seqlens.
//   AT_GATHER    0: row b of the state; 1: row state_indices[b].
//   AT_X_T       element type of x, out and the state; AT_W_T of weight and bias.

#include "common/numeric.cuh"

#ifndef AT_THREADS
#error "AT_THREADS must be defined"
#endif

typedef AT_X_T x_t;
typedef AT_W_T w_t;

constexpr int k_threads = AT_THREADS;
constexpr int k_width = AT_WIDTH;
constexpr int k_halo = k_width - 1;
constexpr int k_state = AT_STATE_LEN;
// Inputs of x loaded before their outputs are computed: their loads are in flight
// together (the compiler would not move a load of x above an earlier store to out,
// which may alias it, so a one-at-a-time loop would wait for each load in turn).
constexpr int k_chunk = 4;

static_assert(k_threads % 32 == 0 && k_threads >= 32 && k_threads <= 1024,
              "threads must be whole warps, at most 1024");
static_assert(k_width >= 2 && k_width <= 4, "width must be 2..4");
static_assert(k_state >= k_halo && k_state <= 64, "state length must be width - 1..64");

// Mirrored byte for byte by the host (runtime/ops): keep the fields and their order.
struct UpdateArgs {
  const x_t* x;             // [B, C, L], element strides below
  const w_t* weight;        // [C, W] contiguous
  const w_t* bias;          // [C] or null (AT_HAS_BIAS 0)
  x_t* out;                 // [B, C, L]
  const x_t* state_in;      // [E, C, S]: the state before the call
  x_t* state_out;           // [E, C, S], state_in's strides: the state after the call (may
                            // be state_in itself: every element is read before any write)
  const int* cache_seqlens; // int32 [B] (AT_CIRCULAR) or null
  const int* state_indices; // int32 [B] (AT_GATHER) or null
  int batch;                // B
  int channels;             // C
  int length;               // L >= 1, positions of x this call
  int entries;              // E, rows of the state (B without AT_GATHER)
  long long x_batch_stride, x_channel_stride, x_length_stride;
  long long out_batch_stride, out_channel_stride, out_length_stride;
  long long state_entry_stride, state_channel_stride, state_pos_stride;
};

// s[pos] for a position known only at run time (0 <= pos < k_state): one select per
// element, so that s stays in registers (an indexed read would put it in local memory).
__device__ __forceinline__ x_t state_at(const x_t (&s)[k_state], int pos) {
  x_t v = s[0];
#pragma unroll
  for (int j = 1; j < k_state; ++j) {
    if (j == pos) {
      v = s[j];
    }
  }
  return v;
}

extern "C" __global__ void __launch_bounds__(k_threads)
    causal_conv1d_update_fwd(const UpdateArgs args) {
  const int c = blockIdx.x * k_threads + threadIdx.x;
  const int b = blockIdx.y;
  if (c >= args.channels) {
    return;
  }
  const int length = args.length;
  const x_t* x_row = args.x + b * args.x_batch_stride + c * args.x_channel_stride;
  x_t* out_row = args.out + b * args.out_batch_stride + c * args.out_channel_stride;

  int row = b;
#if AT_GATHER
  row = args.state_indices[b];
#endif
  if (row < 0 || row >= args.entries) {
    // Padding: zeros out, the state untouched.
    const x_t zero = at_from_float<x_t>(0.0f);
    for (int t = 0; t < length; ++t) {
      out_row[t * args.out_length_stride] = zero;
    }
    return;
  }

  // The whole state row first: state_out may be state_in, and is written only at the end.
  const long long state_offset = row * args.state_entry_stride + c * args.state_channel_stride;
  const x_t* state_row = args.state_in + state_offset;
  x_t s[k_state];
#pragma unroll
  for (int j = 0; j < k_state; ++j) {
    s[j] = state_row[j * args.state_pos_stride];
  }

  float w[k_width];
  float bias = 0.0f;
#pragma unroll
  for (int k = 0; k < k_width; ++k) {
    w[k] = at_to_float(args.weight[static_cast<long long>(c) * k_width + k]);
  }
#if AT_HAS_BIAS
  bias = at_to_float(args.bias[c]);
#endif

  // win: the W-1 inputs before the next position, oldest first.
  float win[k_halo];
#if AT_CIRCULAR
  // head = p mod S (non-negative for any p): where x[0] goes, one past the newest input.
  const int p = args.cache_seqlens[b];
  const int head = ((p % k_state) + k_state) % k_state;
#pragma unroll
  for (int k = 0; k < k_halo; ++k) {
    int pos = head - k_halo + k; // >= -S since S >= W-1: one wrap suffices
    if (pos < 0) {
      pos += k_state;
    }
    win[k] = at_to_float(state_at(s, pos));
  }
  int pos = head; // (head + t) mod S for the position t at hand
#else
#pragma unroll
  for (int k = 0; k < k_halo; ++k) {
    win[k] = at_to_float(s[k_state - k_halo + k]);
  }
#endif

  // Inputs at t >= keep_from remain in the state (earlier ones are overwritten or
  // shifted out within this call, so they are not put in at all).
  const int keep_from = length - k_state;
  for (int t0 = 0; t0 < length; t0 += k_chunk) {
    x_t xs[k_chunk];
#pragma unroll
    for (int i = 0; i < k_chunk; ++i) {
      if (t0 + i < length) {
        xs[i] = x_row[(t0 + i) * args.x_length_stride];
      }
    }
#pragma unroll
    for (int i = 0; i < k_chunk; ++i) {
      const int t = t0 + i;
      if (t >= length) {
        break;
      }
      const float xf = at_to_float(xs[i]);
      float acc = bias;
#pragma unroll
      for (int k = 0; k < k_halo; ++k) {
        acc = fmaf(w[k], win[k], acc);
      }
      acc = fmaf(w[k_halo], xf, acc);
#if AT_SILU
      acc = at_silu_rcp(acc);
#endif
      out_row[t * args.out_length_stride] = at_from_float<x_t>(acc);
#pragma unroll
      for (int k = 0; k + 1 < k_halo; ++k) {
        win[k] = win[k + 1];
      }
      win[k_halo - 1] = xf;
      if (t >= keep_from) {
#if AT_CIRCULAR
#pragma unroll
        for (int j = 0; j < k_state; ++j) {
          if (j == pos) {
            s[j] = xs[i];
          }
        }
#else
#pragma unroll
        for (int j = 0; j + 1 < k_state; ++j) {
          s[j] = s[j + 1];
        }
        s[k_state - 1] = xs[i];
#endif
      }
#if AT_CIRCULAR
      pos = pos + 1 == k_state ? 0 : pos + 1;
#endif
    }
  }

  x_t* state_out_row = args.state_out + state_offset;
#pragma unroll
  for (int j = 0; j < k_state; ++j) {
    state_out_row[j * args.state_pos_stride] = s[j];
  }
}
