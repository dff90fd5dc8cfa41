// One decoding step of the Mamba selective scan against a state updated in place
// (mamba-ssm's selective_state_update). For every row (b, h, p), with g = h / (H / G)
// the group of head h and n < N:
//   dt     = dt[b,h,p] + dt_bias[h,p], softplus'd if AT_SOFTPLUS
//   s[n]   = state[e,h,p,n] * exp(dt * A[h,p,n]) + dt * B[b,g,n] * x[b,h,p]
//   out    = (sum_n s[n] * C[b,g,n] + D[h,p] * x[b,h,p]) * silu(z[b,h,p])
// and s is written back to state[e,h,p,n]. e = b, or with AT_GATHER state_indices[b];
// an e outside [0, E) (such as the padding index -1) is padding: out is 0 and no state
// is touched. All arithmetic is fp32; out sums the new states as they are stored
// (rounded to the state's type), as mamba-ssm's reference does.
//
// Each row is handled by a group of AT_LANES consecutive lanes of a warp: lane j owns
// states n in [j * k_per, (j + 1) * k_per), k_per = ceil(N / LANES), and keeps them,
// with their A, B and C, in registers. A thread issues all of its loads before it
// computes and all of its state stores after (state_out may be state_in, so the
// compiler could not move a load above an earlier store itself): its 4 * k_per loads
// are in flight together, as branch-free predicated loads, and only the state's wait
// for the gather's index. The group's partial sums meet over __shfl_xor_sync and lane
// 0 of the group writes out. Consecutive groups take consecutive rows (p fastest), so
// x, dt, z and out are read across a warp in one pass and B/C rows are shared by the
// rows of a (b, g). The kernel moves the state once each way and is bound by memory
// (or, for a small batch, by its launch): no shared memory, scalar accesses through
// any strides (stride 0 included: mamba-ssm passes A, dt, D and dt_bias broadcast).
//
// Compile-time parameters (NVRTC -D, all given by the host):
//   AT_THREADS   threads per block, a multiple of 32: a block holds THREADS / LANES
//                rows. Fewer threads make more blocks for a small batch to spread over
//                the SMs; more make fewer blocks to schedule.
//   AT_LANES     lanes per row (1, 2, 4, 8, 16 or 32, at most N): more lanes hold
//                fewer states each (fewer registers, more warps resident, more loads
//                in flight per row) at the price of the shuffles that sum out and of
//                lanes that only repeat the row's scalar loads.
//   AT_NSTATE    state size N (1..256), the registers: k_per states per lane.
//   AT_WORDS     0: A, B and C element by element, as fp32 registers. 1: each kept in
//                its own type and read as whole words where its last stride is 1 and
//                the lane's run is aligned (else element by element into the same
//                registers); A broadcast over n (Mamba-2's stride 0) is one load and one
//                exponential a row. Fewer registers per state, so a lane can hold more
//                states (more bytes in flight) at the price of conversions at use.
//   AT_HAS_D, AT_HAS_Z, AT_HAS_DT_BIAS, AT_SOFTPLUS  0/1.
//   AT_GATHER    0: state row b; 1: state row state_indices[b].
//   AT_A_BCAST   1: A's state stride is 0 (Mamba-2's per-head A viewed over P and N):
//                one A and one exponential a row, no registers for a run of A.
//   AT_X_T       element type of x, dt, z and out; AT_S_T of the state; AT_BC_T of B
//                and C; AT_A_T of A; AT_P_T of D and dt_bias (float, at_f16, at_bf16).

#include "common/numeric.cuh"

#ifndef AT_THREADS
#error "AT_THREADS must be defined"
#endif

typedef AT_X_T x_t;
typedef AT_S_T s_t;
typedef AT_BC_T bc_t;
typedef AT_A_T a_t;
typedef AT_P_T p_t;

constexpr int k_threads = AT_THREADS;
constexpr int k_lanes = AT_LANES;
constexpr int k_nstate = AT_NSTATE;
constexpr int k_per = (k_nstate + k_lanes - 1) / k_lanes; // states per lane
constexpr int k_rows = k_threads / k_lanes;               // rows per block
// Whether some lanes own fewer than k_per states (their n >= N are predicated off).
constexpr bool k_ragged = k_per * k_lanes != k_nstate;
constexpr float k_log2e = 1.4426950408889634f;
// A lane's k_per states as words of up to 16 bytes when every lane has all of them, they
// fill whole 32-bit words, the state's last stride is 1 and they start on a word.
constexpr int k_state_bytes = k_per * static_cast<int>(sizeof(s_t));
constexpr bool k_state_vec = !k_ragged && k_state_bytes % 4 == 0;
constexpr int k_state_align = k_state_bytes % 16 == 0 ? 16 : k_state_bytes % 8 == 0 ? 8 : 4;
constexpr int k_state_words = k_state_bytes / 4; // 32-bit words
#ifndef AT_WORDS
#define AT_WORDS 0
#endif
#ifndef AT_A_BCAST
#define AT_A_BCAST 0
#endif

// The i-th value of a lane's run of A, B or C as fp32: fp32 registers, or (AT_WORDS) a run
// kept in its own type.
__device__ __forceinline__ float run_value(const float (&v)[k_per], int i) {
  return v[i];
}
template <typename T> __device__ __forceinline__ float run_value(const at_vec<T, k_per>& v, int i) {
  return at_to_float(v.elem[i]);
}

// AT_WORDS: a lane's k_per values of one of A, B, C from row (stride `stride` between
// them): one load when the stride is 0, whole words when it is 1 and `first` is aligned
// to them (and every lane has all k_per), else element by element; zeros where off.
template <typename T>
__device__ __forceinline__ void load_run(at_vec<T, k_per>& v, const T* row, int n0,
                                         long long stride, bool on) {
  const T* first = row + n0 * stride;
  if (stride == 0) {
    const T value = at_load_or_zero(row, on);
#pragma unroll
    for (int i = 0; i < k_per; ++i) {
      v.elem[i] = value;
    }
  } else if (!k_ragged && stride == 1 &&
             reinterpret_cast<unsigned long long>(first) % at_vec<T, k_per>::k_word == 0) {
    if (on) {
      v.load(first);
    } else {
#pragma unroll
      for (int i = 0; i < k_per; ++i) {
        v.elem[i] = at_from_float<T>(0.0f);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < k_per; ++i) {
      v.elem[i] = at_load_or_zero(first + i * stride, on && (!k_ragged || n0 + i < k_nstate));
    }
  }
}

// 16, 8 or 4 bytes to global memory in one instruction (the compiler split a uint4
// assignment into four 4-byte stores here); p aligned to the access.
__device__ __forceinline__ void store_words(void* p, unsigned a, unsigned b, unsigned c,
                                            unsigned d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d)
               : "memory");
}
__device__ __forceinline__ void store_words(void* p, unsigned a, unsigned b) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(a), "r"(b) : "memory");
}

// 32 bits of stored states: one fp32, or two 16-bit ones (the first in the low half).
__device__ __forceinline__ unsigned state_word(const float* v) {
  return __float_as_uint(v[0]);
}
__device__ __forceinline__ unsigned state_word(const at_bf16* v) {
  return unsigned(v[0].bits) | (unsigned(v[1].bits) << 16);
}
__device__ __forceinline__ unsigned state_word(const at_f16* v) {
  return unsigned(v[0].bits) | (unsigned(v[1].bits) << 16);
}

static_assert(k_threads % 32 == 0 && k_threads >= 32 && k_threads <= 1024,
              "threads must be whole warps, at most 1024");
static_assert(k_lanes == 1 || k_lanes == 2 || k_lanes == 4 || k_lanes == 8 || k_lanes == 16 ||
                  k_lanes == 32,
              "lanes must be a power of two up to 32");
static_assert(k_nstate >= 1 && k_nstate <= 256, "state size must be 1..256");
static_assert(k_lanes <= k_nstate, "lanes must not exceed the state size");
static_assert(k_per <= 32, "at most 32 states per lane (registers: 64 spill)");

// Mirrored byte for byte by the host (runtime/ops): keep the fields and their order.
struct StateUpdateArgs {
  const x_t* x;             // [B, H, P]
  const x_t* dt;            // [B, H, P]
  const p_t* dt_bias;       // [H, P] or null
  const a_t* A;             // [H, P, N]
  const bc_t* B;            // [B, G, N]
  const bc_t* C;            // [B, G, N]
  const p_t* D;             // [H, P] or null
  const x_t* z;             // [B, H, P] or null
  x_t* out;                 // [B, H, P]
  const s_t* state_in;      // [E, H, P, N]
  s_t* state_out;           // [E, H, P, N], state_in's strides (the runtime passes state_in:
                            // in place; every element is read before the same thread writes it)
  const int* state_indices; // int32 [B] (AT_GATHER) or null
  int batch, heads, dim, groups, entries;                          // B, H, P, G, E (N is AT_NSTATE)
  long long x_stride[3], dt_stride[3], z_stride[3], out_stride[3]; // element strides (b, h, p)
  long long dt_bias_stride[2], D_stride[2];                        // (h, p)
  long long A_stride[3];                                           // (h, p, n)
  long long B_stride[3], C_stride[3];                              // (b, g, n)
  long long state_stride[4];                                       // (e, h, p, n)
};

extern "C" __global__ void __launch_bounds__(k_threads)
    selective_state_update_fwd(const StateUpdateArgs args) {
  const int lane = threadIdx.x % k_lanes; // lane j of the row's group
  // Rows in 32 bits: the host keeps B*H*P below 2^31, so r (less than B*H*P plus a
  // block) fits an unsigned, whose division is inline (a 64-bit one is a called
  // subroutine, with a stack frame around the call). Addresses are 64-bit below.
  const unsigned dim = args.dim;
  const unsigned heads = args.heads;
  const unsigned r = blockIdx.x * static_cast<unsigned>(k_rows) + threadIdx.x / k_lanes;
  // Threads past the last row compute zeros and skip every access, but stay for the
  // shuffles (full-warp masks).
  const bool valid = r < static_cast<unsigned>(args.batch) * heads * dim;
  const unsigned bh = r / dim;
  const unsigned b32 = bh / heads;
  const unsigned h32 = bh - b32 * heads;
  const long long p = r - bh * dim;
  const long long h = h32;
  const long long b = b32;
  const long long g = h32 / (heads / static_cast<unsigned>(args.groups));

  // The row's scalars (every lane of the group loads them: one broadcast access). They,
  // A, B and C do not depend on the state row, so their loads do not wait for the
  // gather's index; only the state's loads do. A padding row reads them in vain.
  long long e = b;
  float dt = 0.0f;
  float xv = 0.0f;
  float dskip = 0.0f;
#if AT_HAS_Z
  float zv = 0.0f;
#endif
  if (valid) {
#if AT_GATHER
    e = args.state_indices[b];
#endif
    xv = at_to_float(args.x[b * args.x_stride[0] + h * args.x_stride[1] + p * args.x_stride[2]]);
    const long long dt_at = b * args.dt_stride[0] + h * args.dt_stride[1] + p * args.dt_stride[2];
    dt = at_to_float(args.dt[dt_at]);
#if AT_HAS_DT_BIAS
    dt += at_to_float(args.dt_bias[h * args.dt_bias_stride[0] + p * args.dt_bias_stride[1]]);
#endif
#if AT_HAS_D
    dskip = at_to_float(args.D[h * args.D_stride[0] + p * args.D_stride[1]]);
#endif
#if AT_HAS_Z
    zv = at_to_float(args.z[b * args.z_stride[0] + h * args.z_stride[1] + p * args.z_stride[2]]);
#endif
  }
  // Whether the row updates a state row (not padding, not past the end).
  const bool active = valid && e >= 0 && e < args.entries;

  // The lane's states and their A, B, C: all loads issued before any arithmetic, as
  // predicated loads (zero where off: past N, or the state of an inactive row), so that
  // no branch splits them.
  const long long state_offset =
      e * args.state_stride[0] + h * args.state_stride[1] + p * args.state_stride[2];
  const s_t* state_row = args.state_in + state_offset;
  const a_t* a_row = args.A + h * args.A_stride[0] + p * args.A_stride[1];
  const bc_t* b_row = args.B + b * args.B_stride[0] + g * args.B_stride[1];
  const bc_t* c_row = args.C + b * args.C_stride[0] + g * args.C_stride[1];
  const int n0 = lane * k_per;
  float s[k_per];
#if AT_A_BCAST
  const float a_row_value = at_to_float(at_load_or_zero(a_row, valid)); // A[h, p, every n]
#elif AT_WORDS
  at_vec<a_t, k_per> a;
  load_run(a, a_row, n0, args.A_stride[2], valid);
#else
  float a[k_per];
#endif
#if AT_WORDS
  at_vec<bc_t, k_per> bv;
  at_vec<bc_t, k_per> cv;
  load_run(bv, b_row, n0, args.B_stride[2], valid);
  load_run(cv, c_row, n0, args.C_stride[2], valid);
#else
  float bv[k_per];
  float cv[k_per];
#endif
  // The lane's states as one run of vectors where they are contiguous and aligned (the
  // state's own layout: every row alike), else element by element.
  const s_t* state_first = state_row + n0 * args.state_stride[3];
  const bool state_vec = k_state_vec && args.state_stride[3] == 1 &&
                         reinterpret_cast<unsigned long long>(state_first) % k_state_align == 0;
  if (state_vec) {
    if (active) {
      at_vec<s_t, k_per> v;
      v.load(state_first);
      v.to_float(s);
    } else {
#pragma unroll
      for (int i = 0; i < k_per; ++i) {
        s[i] = 0.0f;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < k_per; ++i) {
    const long long n = n0 + i;
    const bool in_n = !k_ragged || n < k_nstate;
    if (!state_vec) {
      s[i] = at_to_float(at_load_or_zero(state_row + n * args.state_stride[3], active && in_n));
    }
#if !AT_WORDS
#if !AT_A_BCAST
    a[i] = at_to_float(at_load_or_zero(a_row + n * args.A_stride[2], valid && in_n));
#endif
    bv[i] = at_to_float(at_load_or_zero(b_row + n * args.B_stride[2], valid && in_n));
    cv[i] = at_to_float(at_load_or_zero(c_row + n * args.C_stride[2], valid && in_n));
#endif
  }

  // Once per row: the accurate library softplus.
#if AT_SOFTPLUS
  dt = dt <= 20.0f ? log1pf(expf(dt)) : dt;
#endif
  const float dt_log2e = dt * k_log2e; // exp(dt * A) = 2^(dt log2(e) * A)
  const float dtx = dt * xv;
  float acc = 0.0f;
  s_t stored[k_per]; // the new states as stored
  // With AT_A_BCAST (the host sets it whenever a call's A has state stride 0) A is one
  // value a row, so exp(dt * A) is computed once for the row.
#if AT_A_BCAST
  const float row_decay = at_exp2_approx(dt_log2e * a_row_value);
#endif
#pragma unroll
  for (int i = 0; i < k_per; ++i) {
#if AT_A_BCAST
    const float d = row_decay;
#else
    const float d = at_exp2_approx(dt_log2e * run_value(a, i));
#endif
    stored[i] = at_from_float<s_t>(fmaf(s[i], d, run_value(bv, i) * dtx));
    // out reads the state as it is stored (rounded to s_t): what the next step will see,
    // and what mamba-ssm's reference computes out from.
    acc = fmaf(at_to_float(stored[i]), run_value(cv, i), acc); // past N: 0 * 0
  }

  s_t* state_out_row = args.state_out + state_offset;
  if (state_vec) {
    if (active) {
      // Whole words built from the bits (a union of the 16-bit elements would be stored
      // element by element).
      unsigned w[k_state_words > 0 ? k_state_words : 1];
#pragma unroll
      for (int i = 0; i < k_state_words; ++i) {
        w[i] = state_word(&stored[i * 4 / static_cast<int>(sizeof(s_t))]);
      }
      void* dst = state_out_row + n0;
      if (k_state_align == 16) {
#pragma unroll
        for (int i = 0; i + 3 < k_state_words; i += 4) {
          store_words(static_cast<unsigned*>(dst) + i, w[i], w[i + 1], w[i + 2], w[i + 3]);
        }
      } else if (k_state_align == 8) {
#pragma unroll
        for (int i = 0; i + 1 < k_state_words; i += 2) {
          store_words(static_cast<unsigned*>(dst) + i, w[i], w[i + 1]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < k_state_words; ++i) {
          reinterpret_cast<unsigned*>(dst)[i] = w[i];
        }
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < k_per; ++i) {
      const long long n = n0 + i;
      if (active && (!k_ragged || n < k_nstate)) {
        state_out_row[n * args.state_stride[3]] = stored[i];
      }
    }
  }

  // The group's partial sums: every lane of the warp is here (no early return).
#pragma unroll
  for (int offset = k_lanes / 2; offset > 0; offset /= 2) {
    acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  }

  if (valid && lane == 0) {
    float y = 0.0f; // padding: zeros out
    if (active) {
      y = fmaf(dskip, xv, acc); // dskip is 0 without AT_HAS_D
#if AT_HAS_Z
      y *= at_silu_rcp(zv);
#endif
    }
    args.out[b * args.out_stride[0] + h * args.out_stride[1] + p * args.out_stride[2]] =
        at_from_float<x_t>(y);
  }
}
