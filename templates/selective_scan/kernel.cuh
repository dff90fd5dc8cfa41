// Mamba-1 selective scan forward, u/delta/z/out [B, D, L] (last dimension contiguous):
//   dt_t  = softplus(delta_t + delta_bias[d]) if SOFTPLUS else delta_t + delta_bias[d]
//   h_t   = exp(dt_t * A[d,n]) * h_{t-1} + dt_t * B_t[n] * u_t          (h_{-1} = 0)
//   y_t   = sum_n C_t[n] * h_t[n] + D[d] * u_t
//   out_t = y_t * silu(z_t) if HAS_Z;   last_state[b,d,n] = h_{L-1}[n] if LAST_STATE.
// B and C are each, independently (as mamba-ssm's is_variable_B / is_variable_C),
// fixed per channel ([D, N] fp32) or variable ([B, G, N, L], the element type of u;
// channel d reads group d / (D / G)).
//
// One block owns (batch b, AT_CPB channels) and walks L in chunks. Inside a chunk
// each thread owns AT_ITEMS consecutive time steps; the state h[n] a chunk starts
// from is carried in registers from the previous chunk. Per state n a thread
// composes its steps into one affine map h -> a*h + b, the maps are scanned across
// the threads of the channel, and the thread replays its steps from its prefix.
// Every (b, d, t, n) costs one exponential: at N = 16 the special-function unit
// (16 ex2 per clock per SM on sm_80..sm_90) is the floor, not memory, so the FMA
// instructions per element are counted and part of the exponentials can move to
// the FMA pipes as a polynomial (AT_POLY), as FlashAttention-4 does for softmax.
//
// Compile-time parameters (NVRTC -D, set by runtime/ops/selective_scan.cpp):
//   AT_THREADS  threads per block = CPB * NSPLIT * (time lanes per channel).
//   AT_ITEMS    time steps per thread per chunk: more amortize the cross-thread
//               scan (about 30 instructions per state) over more steps, but hold
//               2*ITEMS more registers per state in flight.
//   AT_CPB      channels per block: they share the staged B/C of the chunk, which
//               cuts shared-memory staging and L2 reads of B/C by CPB.
//   AT_NSPLIT   state groups per channel: group g handles states n % NSPLIT == g
//               over the same time steps; partial y meet in shared memory. Splits
//               give more threads per channel without a longer chunk.
//   AT_SCAN     0: warp-shuffle scan (+ one shared-memory exchange across warps);
//               1: shared-memory block scan (Hillis-Steele, a barrier per step).
//   AT_VEC      elements per vector access of u/delta/z/out and the B/C staging.
//   AT_POLY     of every 8 states, how many take exp2 from a degree-5 polynomial
//               on the FMA pipes instead of ex2.approx on the SFU.
//   AT_MINB     blocks per SM the register allocation must allow (launch bounds):
//               more resident warps hide the staging barriers and load latency,
//               at the price of registers (and spills when too few remain).
//   AT_N, AT_NSLICE  state size and the states staged in shared memory at once
//               (dynamic shared memory: NSLICE rows of B if variable, NSLICE of C
//               if variable, then the partial y of state groups 1..NSPLIT-1).
//   AT_VAR_B, AT_VAR_C  0/1: B, C variable (staged per chunk) or fixed (read once
//               per state from [D, N]).
//   AT_HAS_BIAS, AT_SOFTPLUS, AT_HAS_D, AT_HAS_Z, AT_LAST_STATE: 0/1.
//   AT_X_T      element type of u, delta, z, out (and variable B/C).
#include "common/async.cuh"
#include "common/numeric.cuh"

#ifndef AT_THREADS
#error "AT_THREADS must be defined"
#endif

#if !defined(AT_VAR_B) || !defined(AT_VAR_C)
#error "AT_VAR_B and AT_VAR_C must be defined"
#endif
// Whether any of B and C is variable (a group index and staging are needed).
#define AT_VAR_ANY (AT_VAR_B || AT_VAR_C)

typedef AT_X_T x_t;
#if AT_VAR_B
typedef x_t b_t;
#else
typedef float b_t;
#endif
#if AT_VAR_C
typedef x_t c_t;
#else
typedef float c_t;
#endif

constexpr int k_threads = AT_THREADS;
constexpr int k_items = AT_ITEMS;
constexpr int k_cpb = AT_CPB;
constexpr int k_nsplit = AT_NSPLIT;
constexpr int k_vec = AT_VEC;
constexpr int k_poly = AT_POLY;
constexpr int k_n = AT_N;
[[maybe_unused]] constexpr int k_nslice = AT_NSLICE; // time-parallel forms only

constexpr float k_log2e = 1.4426950408889634f;
constexpr float k_ln2 = 0.6931471805599453f;

static_assert(k_poly >= 0 && k_poly <= 8, "POLY counts states out of 8");

struct ScanArgs {
  const x_t* u;
  const x_t* delta;
  const float* A; // [D, N]
  const b_t* B;   // variable: [B, G, N, L] strided; fixed: [D, N]
  const c_t* C;
  const float* D;          // [D] or null
  const x_t* z;            // or null
  const float* delta_bias; // [D] or null
  x_t* out;
  float* last_state; // [B, D, N] or null
  int batch;
  int dim;
  int length;
  int groups;
  long long u_bs, u_ds, delta_bs, delta_ds, z_bs, z_ds, out_bs, out_ds;
  long long b_bs, b_gs, b_ns, c_bs, c_gs, c_ns;
  int vector_ok; // every row and stride allows VEC-element vector accesses, L % VEC == 0
                 // (ragged=shift: u, delta, z and out share their rows' offsets)
  int ch_mod;    // ragged=shift: channels d and d + ch_mod share their rows' offset
};

// 2^x on the FMA-pipe polynomial or on ex2.approx. The choice folds at compile time:
// callers pass a condition on unrolled indices.
__device__ __forceinline__ float exp2_sel(bool poly, float x) {
  return poly ? at_exp2_poly(x) : at_exp2_approx(x);
}

// log(1 + e^x); x itself above 20, where the two agree in fp32. There e^x may
// overflow to +inf, which the select discards (lg2(1 + inf) = inf is never returned).
__device__ __forceinline__ float softplus(float x) {
  float e = at_exp(x);
  float r = at_log2_approx(1.0f + e) * k_ln2;
  return x > 20.0f ? x : r;
}

// COUNT floats from shared memory with the widest aligned reads (p 16-byte aligned
// when COUNT % 4 == 0, which the row layout guarantees).
template <int COUNT>
__device__ __forceinline__ void load_shared(const float* p, float (&v)[COUNT]) {
  if constexpr (COUNT % 4 == 0) {
#pragma unroll
    for (int i = 0; i < COUNT; i += 4) {
      float4 w = *reinterpret_cast<const float4*>(p + i);
      v[i] = w.x, v[i + 1] = w.y, v[i + 2] = w.z, v[i + 3] = w.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < COUNT; ++i) {
      v[i] = p[i];
    }
  }
}

// A thread's ITEMS steps of one [.., L] row starting at t0, as floats; zero past L.
template <typename T>
__device__ __forceinline__ void load_steps(const T* row, int t0, int length, bool vector_ok,
                                           float (&v)[k_items]) {
#pragma unroll
  for (int q = 0; q < k_items; q += k_vec) {
    const int p = t0 + q;
    if (vector_ok) {
      at_vec<T, k_vec> w;
      if (p < length) { // L % VEC == 0: the whole vector is inside
        w.load(row + p);
      } else {
#pragma unroll
        for (int j = 0; j < k_vec; ++j) {
          w.elem[j] = at_from_float<T>(0.0f);
        }
      }
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        v[q + j] = at_to_float(w.elem[j]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        v[q + j] = p + j < length ? at_to_float(row[p + j]) : 0.0f;
      }
    }
  }
}

__device__ __forceinline__ void store_steps(x_t* row, int t0, int length, bool vector_ok,
                                            const float (&v)[k_items]) {
#pragma unroll
  for (int q = 0; q < k_items; q += k_vec) {
    const int p = t0 + q;
    at_vec<x_t, k_vec> w;
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      w.elem[j] = at_from_float<x_t>(v[q + j]);
    }
    if (vector_ok) {
      if (p < length) {
        w.store(row + p);
      }
    } else {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        if (p + j < length) {
          row[p + j] = w.elem[j];
        }
      }
    }
  }
}

#ifndef AT_MINB
#define AT_MINB 1
#endif

#if AT_SCAN == 2
#include "selective_scan/state_parallel.cuh"
#else
// ---- Time-parallel scan (AT_SCAN 0: warp shuffles, 1: shared memory) ----
constexpr int k_tpc = k_threads / (k_cpb * k_nsplit); // time lanes per channel and state group
constexpr int k_chunk = k_tpc * k_items;              // time steps per chunk
constexpr int k_warps_pc = k_tpc / 32;                // warps per (channel, state group)
constexpr int k_groups = k_cpb * k_nsplit;            // scan groups per block
constexpr int k_npg = k_n / k_nsplit;                 // states per group
constexpr int k_slices = k_n / k_nslice;
constexpr int k_spg = k_nslice / k_nsplit; // states per group per staged slice
// Shared rows keep each thread's ITEMS values contiguous (vector reads); 4 words of
// padding per thread spread a quarter-warp's 16-byte reads over all 32 banks.
constexpr int k_pad = k_items >= 8 ? 4 : 0;
constexpr int k_lane_stride = k_items + k_pad;
constexpr int k_slots = k_tpc * k_lane_stride;

static_assert(k_threads % (k_cpb * k_nsplit) == 0, "CPB * NSPLIT must divide the threads");
static_assert(k_tpc % 32 == 0, "each (channel, state group) needs whole warps");
static_assert(k_items % k_vec == 0, "a thread's steps must be whole vectors");
static_assert(k_n % k_nslice == 0 && k_nslice % k_nsplit == 0, "slices must split N evenly");

#if AT_VAR_ANY
// Stages NSLICE states x CHUNK steps of one variable B or C tensor as fp32 in the
// thread-major row layout (each thread's ITEMS steps contiguous). Zero past L, so
// padded steps contribute nothing.
__device__ __forceinline__ void stage_bc(float (*dst)[k_slots], const x_t* src,
                                         long long state_stride, int chunk_start, int length,
                                         bool vector_ok) {
  constexpr int k_vecs_per_row = k_chunk / k_vec;
  for (int e = threadIdx.x; e < k_nslice * k_vecs_per_row; e += k_threads) {
    const int row = e / k_vecs_per_row;
    const int tt = (e % k_vecs_per_row) * k_vec;
    const int t = chunk_start + tt;
    const x_t* s = src + row * state_stride;
    float v[k_vec];
    if (vector_ok && t < length) {
      at_vec<x_t, k_vec> w;
      w.load(s + t);
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        v[j] = at_to_float(w.elem[j]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        v[j] = t + j < length ? at_to_float(s[t + j]) : 0.0f;
      }
    }
    float* d = &dst[row][(tt / k_items) * k_lane_stride + tt % k_items];
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      d[j] = v[j];
    }
  }
}
#endif

extern "C" __global__ void __launch_bounds__(k_threads, AT_MINB)
    selective_scan_fwd(const ScanArgs args) {
  extern __shared__ __align__(16) float s_dyn[];
  const int blocks_per_batch = (args.dim + k_cpb - 1) / k_cpb;
  const int b = blockIdx.x / blocks_per_batch;
  const int d_first = (blockIdx.x % blocks_per_batch) * k_cpb;
  const int c_local = threadIdx.x / (k_tpc * k_nsplit);
  const int g = (threadIdx.x / k_tpc) % k_nsplit; // state group
  const int lane_t = threadIdx.x % k_tpc;         // time lane within the group
  const int lane = threadIdx.x % 32;
  const int group = c_local * k_nsplit + g; // scan group in the block
  const int d_raw = d_first + c_local;
  const bool active = d_raw < args.dim;
  const int d = active ? d_raw : args.dim - 1; // idle channels compute, never store
  const int length = args.length;
  const bool vector_ok = args.vector_ok != 0;

  const x_t* u_row = args.u + b * args.u_bs + d * args.u_ds;
  const x_t* delta_row = args.delta + b * args.delta_bs + d * args.delta_ds;
  x_t* out_row = args.out + b * args.out_bs + d * args.out_ds;
  const float* a_row = args.A + static_cast<long long>(d) * k_n;
#if AT_VAR_ANY
  // Every channel of the block is in one group (the op checks (D/G) % CPB == 0).
  const int bc_group = d_first / (args.dim / args.groups);
#endif
#if AT_VAR_B
  const x_t* b_base = args.B + b * args.b_bs + bc_group * args.b_gs;
  float(*s_b)[k_slots] = reinterpret_cast<float(*)[k_slots]>(s_dyn);
#endif
#if AT_VAR_C
  const x_t* c_base = args.C + b * args.c_bs + bc_group * args.c_gs;
  float(*s_c)[k_slots] = reinterpret_cast<float(*)[k_slots]>(s_dyn) + (AT_VAR_B ? k_nslice : 0);
#endif
  constexpr int k_bc_words = (AT_VAR_B + AT_VAR_C) * k_nslice * k_slots;
#if AT_SCAN
  __shared__ float2 s_scan[2][k_groups][k_tpc];
#else
  __shared__ float2 s_warp[2][k_groups][k_warps_pc]; // unused with one warp per group
  (void)s_warp;
#endif
#if AT_NSPLIT > 1
  float(*s_y)[k_nsplit - 1][k_slots] =
      reinterpret_cast<float(*)[k_nsplit - 1][k_slots]>(s_dyn + k_bc_words);
#else
  (void)k_bc_words;
#endif
  const float bias = AT_HAS_BIAS ? args.delta_bias[d] : 0.0f;
  const float dskip = AT_HAS_D ? args.D[d] : 0.0f;

  float carry[k_npg]; // h at the end of the previous chunk, for this group's states
#pragma unroll
  for (int k = 0; k < k_npg; ++k) {
    carry[k] = 0.0f;
  }

  for (int chunk_start = 0; chunk_start < length; chunk_start += k_chunk) {
    const int t0 = chunk_start + lane_t * k_items;
    float uv[k_items], dt[k_items], du[k_items], y[k_items];
    load_steps(u_row, t0, length, vector_ok, uv);
    load_steps(delta_row, t0, length, vector_ok, dt);
    float dt_sum = 0.0f; // the thread's composed decay is exp(A * dt_sum): one ex2
#pragma unroll
    for (int i = 0; i < k_items; ++i) {
      float x = dt[i] + bias;
#if AT_SOFTPLUS
      x = softplus(x);
#endif
      x = t0 + i < length ? x : 0.0f; // padded steps: decay 1, input 0
      dt[i] = x;
      du[i] = x * uv[i];
      dt_sum += x;
      y[i] = g == 0 ? dskip * uv[i] : 0.0f; // the D skip, added once per channel
    }

#pragma unroll
    for (int s = 0; s < k_slices; ++s) {
#if AT_VAR_ANY
      __syncthreads(); // the previous slice's readers are done
#if AT_VAR_B
      stage_bc(s_b, b_base + static_cast<long long>(s) * k_nslice * args.b_ns, args.b_ns,
               chunk_start, length, vector_ok);
#endif
#if AT_VAR_C
      stage_bc(s_c, c_base + static_cast<long long>(s) * k_nslice * args.c_ns, args.c_ns,
               chunk_start, length, vector_ok);
#endif
      __syncthreads();
#endif
#pragma unroll
      for (int j = 0; j < k_spg; ++j) {
        const int k = s * k_spg + j;          // this group's state index (static)
        const int n_local = j * k_nsplit + g; // row in the staged slice
        const int n = s * k_nslice + n_local;
        const float a2 = a_row[n] * k_log2e;

        // Compose the thread's steps: h -> at * h + hb.
        float bv[k_items];
#if AT_VAR_B
        load_shared(&s_b[n_local][lane_t * k_lane_stride], bv);
#else
        const float b_fixed = args.B[static_cast<long long>(d) * k_n + n];
#pragma unroll
        for (int i = 0; i < k_items; ++i) {
          bv[i] = b_fixed;
        }
#endif
        float a[k_items];
        float hb = 0.0f;
#pragma unroll
        for (int i = 0; i < k_items; ++i) {
          a[i] = exp2_sel(k % 8 < k_poly, dt[i] * a2);
          bv[i] *= du[i];
          hb = fmaf(a[i], hb, bv[i]);
        }
        float at = at_exp2_approx(dt_sum * a2);

        // Scan the composed maps across the group's time lanes; h_in is the state
        // this thread's first step starts from.
        float h_in;
#if AT_SCAN
        s_scan[0][group][lane_t] = make_float2(at, hb);
        __syncthreads();
        int src = 0;
#pragma unroll
        for (int off = 1; off < k_tpc; off *= 2) {
          float2 me = s_scan[src][group][lane_t];
          if (lane_t >= off) {
            float2 up = s_scan[src][group][lane_t - off];
            me = make_float2(me.x * up.x, fmaf(me.x, up.y, me.y));
          }
          s_scan[src ^ 1][group][lane_t] = me;
          __syncthreads();
          src ^= 1;
        }
        {
          float2 prev = lane_t > 0 ? s_scan[src][group][lane_t - 1] : make_float2(1.0f, 0.0f);
          float2 total = s_scan[src][group][k_tpc - 1];
          h_in = fmaf(prev.x, carry[k], prev.y);
          carry[k] = fmaf(total.x, carry[k], total.y);
        }
        __syncthreads(); // s_scan is rewritten by the next state
#else
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
          float a_up = __shfl_up_sync(0xffffffffu, at, off);
          float b_up = __shfl_up_sync(0xffffffffu, hb, off);
          if (lane >= off) {
            hb = fmaf(at, b_up, hb);
            at *= a_up;
          }
        }
        float c_in = carry[k];
        if constexpr (k_warps_pc > 1) {
          // Warp totals meet in shared memory; double-buffered by state parity so
          // one barrier per state suffices.
          const int warp = lane_t / 32;
          if (lane == 31) {
            s_warp[k & 1][group][warp] = make_float2(at, hb);
          }
          __syncthreads();
          float c = carry[k];
#pragma unroll
          for (int w = 0; w < k_warps_pc; ++w) {
            c_in = w == warp ? c : c_in;
            float2 p = s_warp[k & 1][group][w];
            c = fmaf(p.x, c, p.y);
          }
          carry[k] = c;
        }
        const float h_end = fmaf(at, c_in, hb);
        h_in = __shfl_up_sync(0xffffffffu, h_end, 1);
        h_in = lane == 0 ? c_in : h_in;
        if constexpr (k_warps_pc == 1) {
          carry[k] = __shfl_sync(0xffffffffu, h_end, 31);
        }
#endif

        // Replay the steps from h_in and accumulate y.
        float cv[k_items];
#if AT_VAR_C
        load_shared(&s_c[n_local][lane_t * k_lane_stride], cv);
#else
        const float c_fixed = args.C[static_cast<long long>(d) * k_n + n];
#pragma unroll
        for (int i = 0; i < k_items; ++i) {
          cv[i] = c_fixed;
        }
#endif
        float h = h_in;
#pragma unroll
        for (int i = 0; i < k_items; ++i) {
          h = fmaf(a[i], h, bv[i]);
          y[i] = fmaf(cv[i], h, y[i]);
        }
      }
    }

#if AT_NSPLIT > 1
    // Partial y of groups 1.. meet group 0's in shared memory.
    if (g > 0) {
#pragma unroll
      for (int i = 0; i < k_items; ++i) {
        s_y[c_local][g - 1][lane_t * k_lane_stride + i] = y[i];
      }
    }
    __syncthreads();
    if (g == 0) {
#pragma unroll
      for (int r = 0; r < k_nsplit - 1; ++r) {
        float part[k_items];
        load_shared(&s_y[c_local][r][lane_t * k_lane_stride], part);
#pragma unroll
        for (int i = 0; i < k_items; ++i) {
          y[i] += part[i];
        }
      }
    }
    __syncthreads(); // s_y is rewritten by the next chunk
#endif
    if (g == 0 && active) {
#if AT_HAS_Z
      float zv[k_items];
      load_steps(args.z + b * args.z_bs + d * args.z_ds, t0, length, vector_ok, zv);
#pragma unroll
      for (int i = 0; i < k_items; ++i) {
        y[i] *= at_silu_rcp(zv[i]);
      }
#endif
      store_steps(out_row, t0, length, vector_ok, y);
    }
  }

#if AT_LAST_STATE
  if (active && lane_t == 0) {
    float* dst = args.last_state + (static_cast<long long>(b) * args.dim + d) * k_n;
#pragma unroll
    for (int s = 0; s < k_slices; ++s) {
#pragma unroll
      for (int j = 0; j < k_spg; ++j) {
        dst[s * k_nslice + j * k_nsplit + g] = carry[s * k_spg + j];
      }
    }
  }
#else
  (void)carry;
#endif
}
#endif // AT_SCAN
