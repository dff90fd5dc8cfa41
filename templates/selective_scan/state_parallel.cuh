// Selective scan, state-parallel form (AT_SCAN == 2), included by kernel.cuh.
//
// A lane owns NPL = N / NSPLIT states of one channel and walks the time steps in
// order, so there is no scan across threads at all: per (step, state) it spends one
// multiply for the exponent, one exp2, one multiply for dt*u*B, and one
// multiply-add each into h and into its partial y -- about half the instructions of
// the time-parallel form, whose cross-thread scan and compose/replay passes cost as
// much as the recurrence itself. NSPLIT lanes share a channel (a warp holds
// 32 / NSPLIT channels); their partial y meet in shared memory.
//
// A block owns CPB = warps * 32 / NSPLIT channels of one batch and walks L in
// chunks of T = ITEMS steps. Per chunk:
//   1. stage: all threads load u, delta (and z) of the block's channels with vector
//      loads, compute dt = softplus(delta + bias) and dt*u once per (channel, step),
//      and stage them -- with the chunk's variable B and/or C, shared by every
//      channel -- as fp32 in shared memory (a fixed B or C stays in registers);
//   2. scan: each lane runs its states through the T steps (broadcast 16-byte
//      reads: the lanes of a channel read the same dt, the channels of a warp the
//      same B/C rows) and stores its partial y;
//   3. finish: all threads sum the NSPLIT partials per (channel, step), add D*u,
//      gate with silu(z) and store out with vector stores.
// The global loads of chunk k+1 are issued before the scan of chunk k and staged
// after it, so their latency hides behind the scan; two barriers per chunk. What
// was tried instead and dropped (producer warps, one barrier per chunk, longer
// chunks, time slices for few channels), with its measurements and ncu profiles,
// is in bench/notes/selective_scan.md.
//
// Parameters as in kernel.cuh, read for this form as:
//   AT_ITEMS   T, steps per chunk: longer chunks amortize the barriers and the
//              staging, at T registers of partial y per lane.
//   AT_NSPLIT  lanes per channel (divides 32 and N): more lanes per channel give
//              more parallelism for few channels, fewer give fewer partials to sum
//              and more independent recurrences per lane (latency hiding).
//   AT_TSPLIT  time slices per chunk (S): the warps form S groups, group s walks
//              steps [s*T/S, (s+1)*T/S) of every chunk. Group 0 starts from the
//              true state; groups s > 0 start from zero and keep the running decay
//              product P_t = a_1 ... a_t of their slice, so that once the states at
//              the slice boundaries are known (composed through shared memory),
//              y_t gains sum_n C_t[n] P_t[n] h_in[n] -- three more FP32 operations
//              per (step, state), no more exponentials, S times the parallelism for
//              problems with few channels.
//   AT_CPL     channels per lane (1, 2 or 4; TSPLIT 1 only): a lane runs the same
//              states of CPL channels side by side, so each B/C read from shared
//              memory serves CPL channels. Shared-memory reads per (step, state)
//              fall from 2 + 2/NPL words (fp32 B/C) to 2/CPL + 2/NPL -- the bound of
//              the one-channel lane, whose reads alone fill the shared-memory port at
//              the exp unit's rate -- for CPL times the registers and 1/CPL the lanes
//              (fewer warps to hide latency).
//   AT_CPB     must equal warps / TSPLIT * 32 / NSPLIT * CPL.
//   AT_VEC     elements per vector access of u/delta/z/out/B/C (4 or 8).
//   AT_POLY    of every 8 steps, how many take exp2 from the FMA-pipe polynomial.

#ifndef AT_TSPLIT
#define AT_TSPLIT 1
#endif
#ifndef AT_CPL
#define AT_CPL 1
#endif
// AT_RAGGED: L is not a multiple of VEC (the op sets it from the problem). The rows of
// a contiguous [B, D, L] tensor then start at every offset from a 16-byte boundary, so
// no split of a row into VEC-element vectors is aligned for every row. Such builds
// move u, delta, z, B, C and out in the element layout (see Prefetch) instead of the
// vector layout: consecutive lanes touch consecutive elements of a row, one element
// per access, so a warp reads or writes whole sectors whatever the alignment and the
// length; the loop over the chunk and the scan are the same. Without it, calls whose
// rows are all aligned (vector_ok) use vectors, others one element per access.
// AT_RAGGED 1 holds the next chunk's elements in registers while the scan runs (one
// predicated load each), 2 copies them into a shared-memory tile with cp.async (no
// registers held, more shared-memory reads in the staging); which is faster depends
// on the shape, so the tuner measures both (parameter ragged=regs|async).
// AT_RAGGED 3 (ragged=shift) keeps the vector layout instead: the rows of a block
// are chosen to share one offset s from a vector boundary (channels d, d + m, d + 2m,
// ... where m * the channel stride is a whole number of vectors), and the block walks
// its own timeline tau = t + s, so that every chunk of every row starts at a vector
// boundary. Steps outside [0, L) of the first and the last chunk are masked (dt and
// dt*u zero, outputs not stored). The variable B and C rows keep their own offsets
// and come through the shared-memory tile of AT_RAGGED 2, staged from there a vector
// at a time (stage_bc_vec) except in the first and the last chunk. It needs u, delta, z and
// out to share their rows' offsets (the op checks it per call and passes ch_mod, the
// m above); otherwise ch_mod is 1 and vector_ok 0, and the call runs as AT_RAGGED 2.
#ifndef AT_RAGGED
#define AT_RAGGED 0
#endif
constexpr bool k_shift = AT_RAGGED == 3;
constexpr bool k_ragged = AT_RAGGED == 1 || AT_RAGGED == 2; // element layout
constexpr bool k_async = AT_RAGGED == 2;
// The element layout's code of AT_RAGGED 2, compiled (AT_RAGGED 3: for the calls whose
// rows do not share their offsets), and the shared-memory tile of raw rows: u, delta, z
// (element layout) and the variable B and C rows (AT_RAGGED 2 and 3).
constexpr bool k_raw = k_async || k_shift;
constexpr int k_lpc = k_nsplit;           // lanes per channel
constexpr int k_npl = k_n / k_nsplit;     // states per lane and channel
constexpr int k_cpl = AT_CPL;             // channels per lane
constexpr int k_cpw = 32 / k_lpc * k_cpl; // channels per warp
constexpr int k_warps = k_threads / 32;
constexpr int k_s = AT_TSPLIT;           // time slices of a chunk
constexpr int k_warps_c = k_warps / k_s; // warps per time slice (cover the block's channels)
constexpr int k_t = k_items;             // steps per chunk
constexpr int k_ts = k_t / k_s;          // steps per time slice
constexpr int k_tv = k_t / k_vec;        // vectors per channel row per chunk
// Rows of T floats padded by 4 words: consecutive rows start 4 banks apart, so the
// 16-byte reads of up to 8 distinct rows in one instruction hit distinct banks.
constexpr int k_row = k_t + 4;
// Rows from one lane slot's partial-y block to the next (>= CPB + 1): the 8 lanes of a
// quarter-warp store the rows l * stride + c of their (lane l of the channel, channel
// c); runtime/ops/selective_scan.cpp picks the stride that puts those in 8 distinct
// 4-bank groups.
#ifndef AT_PART_STRIDE
#define AT_PART_STRIDE (AT_CPB + 1)
#endif
constexpr int k_part_stride = AT_PART_STRIDE;
static_assert(k_part_stride > k_cpb, "a partial-y block holds CPB rows");

// Where the float4 of steps t..t+3 (t % 4 == 0) sits in a float row. An 8-wide
// vector spans 32 bytes, written and read as two float4: in 64-step rows the eight
// threads of a quarter-warp would hit banks 0-3, 8-11, 16-19, 24-27 twice (threads
// 0-3 and 4-7 of one row). Swapping the halves of the second 32-step half of every
// row spreads them over all 32 banks; rows of up to 32 steps are not changed.
__device__ __forceinline__ constexpr int swz(int t) {
  return t ^ (((t >> 5) & 1) << 2);
}

__device__ __forceinline__ constexpr bool x_t_is_bf16() {
  return at_is_bf16<x_t>::value;
}

// The silu(z) gate: one tanh.approx (at_silu_tanh) for 16-bit outputs, whose half
// ulp its error stays under; fp32 outputs keep the ex2 and reciprocal form.
__device__ __forceinline__ float silu_gate(float z) {
  if constexpr (sizeof(x_t) == 2) {
    return at_silu_tanh(z);
  } else {
    return at_silu_rcp(z);
  }
}

static_assert(k_threads % 32 == 0, "whole warps");
static_assert(32 % k_lpc == 0 && k_n % k_lpc == 0, "NSPLIT must divide 32 and N");
static_assert(k_warps % k_s == 0, "TSPLIT must divide the warps");
static_assert(k_cpb == k_warps_c * k_cpw, "CPB must equal warps / TSPLIT * 32 / NSPLIT * CPL");
static_assert(k_cpl == 1 || k_s == 1, "several channels per lane with one time slice only");
static_assert(k_ts % 4 == 0, "time slices of whole 4-step groups");
static_assert(k_vec % 4 == 0 && k_t % k_vec == 0 && k_t % 8 == 0,
              "T must be whole vectors of 4 or 8 and a multiple of 8");

// One VEC-element vector to global memory in one store instruction. (AT_RAGGED 3's
// out pointer is offset by the row's shift: built from the elements, at_vec::store
// came out of NVRTC as 4-byte stores.)
__device__ __forceinline__ void store_vec(x_t* p, const at_vec<x_t, k_vec>& w) {
  if constexpr (sizeof(w.words) == 16) {
    const unsigned* v = reinterpret_cast<const unsigned*>(w.words);
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v[0]), "r"(v[1]),
                 "r"(v[2]), "r"(v[3])
                 : "memory");
  } else {
    w.store(p);
  }
}

// VEC floats of a row from step t (swizzled float4 positions).
__device__ __forceinline__ void store_row(float* row, int t, const float (&v)[k_vec]) {
#pragma unroll
  for (int j = 0; j < k_vec; j += 4) {
    *reinterpret_cast<float4*>(row + swz(t + j)) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
  }
}
__device__ __forceinline__ void load_row(const float* row, int t, float (&v)[k_vec]) {
#pragma unroll
  for (int j = 0; j < k_vec; j += 4) {
    const float4 w = *reinterpret_cast<const float4*>(row + swz(t + j));
    v[j] = w.x, v[j + 1] = w.y, v[j + 2] = w.z, v[j + 3] = w.w;
  }
}
__device__ __forceinline__ float4 load4(const float* row, int t) {
  return *reinterpret_cast<const float4*>(row + swz(t));
}

// AT_BC_PAIR: variable 16-bit B and C are staged as they came, B_t and C_t of a
// state packed in one 32-bit word: the recurrence then reads a state's B and C for
// 4 steps with one 16-byte shared load -- half the shared-memory traffic of fp32
// rows, which bounds the scan when few states share a lane -- for two integer or
// convert instructions per (step, state).
#ifndef AT_BC_PAIR
#define AT_BC_PAIR 0
#endif
constexpr bool k_pack_bc = AT_BC_PAIR != 0;

// AT_YSTORE_DURING: the lane stores its partial y of 4 steps as soon as they are
// final, inside the recurrence, instead of after it (1 time slice only). Same
// instructions, another schedule: ptxas places the loads and stores of the unrolled
// chunk differently, and neither order is faster on every shape.
#ifndef AT_YSTORE_DURING
#define AT_YSTORE_DURING 0
#endif
constexpr bool k_ystore_during = AT_YSTORE_DURING != 0;
static_assert(!k_ystore_during || k_s == 1, "partials stored during the scan: one time slice");
static_assert(!k_pack_bc || (AT_VAR_B && AT_VAR_C && sizeof(x_t) == 2),
              "BC_PAIR packs 16-bit variable B and C (both variable)");
// Staged rows per state: B if variable, C if variable, or one row of packed pairs.
constexpr int k_bc_rows = k_pack_bc ? k_n : (AT_VAR_B + AT_VAR_C) * k_n;

// AT_YRED: shuffle levels that sum the lanes' partial y before they go to shared
// memory. Level 1 adds lane l and lane l ^ NSPLIT/2 (the same channel): of each 4
// steps one keeps steps 0-1, the other 2-3 (4 selects, 2 shuffles, 2 adds per lane);
// level 2 does the same with l ^ NSPLIT/4 for one step each. Each level halves the
// partial-y rows, their shared-memory wavefronts (stored as float4, float2 or float)
// and the finish's reads and adds, for shuffles and selects in the scan: it pays
// where the shared-memory pipe, not the issue slots, limits the scan (many lanes
// per channel).
#ifndef AT_YRED
#define AT_YRED 0
#endif
constexpr int k_yred = AT_YRED;
static_assert(k_yred >= 0 && k_yred <= 2 && (1 << k_yred) <= k_lpc,
              "YRED: at most 2 levels, 2^YRED lanes per channel or more");
constexpr int k_prows = k_lpc >> k_yred; // partial-y rows per channel

// This lane's partial y of steps t..t+3 (t % 4 == 0) into its partial-y row (of the
// row group l % k_prows), after YRED shuffle levels with the other lanes of its
// channel. All 32 lanes of the warp must call it together.
__device__ __forceinline__ void put_partials(float* row, int t, int l, float a0, float a1, float a2,
                                             float a3) {
  if constexpr (k_yred == 0) {
    *reinterpret_cast<float4*>(row + swz(t)) = make_float4(a0, a1, a2, a3);
  } else {
    constexpr int m1 = k_lpc / 2;
    const bool hi = (l & m1) != 0; // keeps steps 2-3
    const float s0 = hi ? a0 : a2, s1 = hi ? a1 : a3;
    const float k0 = hi ? a2 : a0, k1 = hi ? a3 : a1;
    const float v0 = k0 + __shfl_xor_sync(0xffffffffu, s0, m1);
    const float v1 = k1 + __shfl_xor_sync(0xffffffffu, s1, m1);
    if constexpr (k_yred == 1) {
      *reinterpret_cast<float2*>(row + swz(t) + 2 * hi) = make_float2(v0, v1);
    } else {
      constexpr int m2 = k_lpc / 4;
      const bool hi2 = (l & m2) != 0; // keeps the second of its two steps
      const float s = hi2 ? v0 : v1;
      const float k = hi2 ? v1 : v0;
      row[swz(t) + 2 * hi + hi2] = k + __shfl_xor_sync(0xffffffffu, s, m2);
    }
  }
}

// B and C of a packed (B, C) word (see pack_pair).
__device__ __forceinline__ void unpack_bc(unsigned w, float& b, float& c) {
  if constexpr (sizeof(x_t) == 2 && x_t_is_bf16()) {
    at_unpack2(w, b, c, at_bf16{});
  } else {
    at_unpack2(w, b, c, at_f16{});
  }
}

// (B, C) in one word, B in the low half (16-bit types only; fp32 is never packed).
__device__ __forceinline__ unsigned pack_pair(at_bf16 b, at_bf16 c) {
  return b.bits | (unsigned(c.bits) << 16);
}
__device__ __forceinline__ unsigned pack_pair(at_f16 b, at_f16 c) {
  return b.bits | (unsigned(c.bits) << 16);
}
__device__ __forceinline__ unsigned pack_pair(float, float) {
  return 0u;
}

typedef float (*row_ptr)[k_row];

// One chunk's inputs in flight: this thread's share of the (channel, vector) items
// of u, delta, z and of the (state, vector) items of B and C, as raw vectors.
//
// Element layout (AT_RAGGED): slot k of a thread holds element g = k * THREADS +
// tid of the chunk's [rows][T] tile, i.e. row g / T and step g % T (T and THREADS
// divide one another, so row and step split into a per-thread and a per-slot part):
// the lanes of a warp take 32 consecutive steps of a row, which is the same work at
// any alignment of the row. The next chunk is in flight during the scan either in
// registers, one per element (AT_RAGGED 1; packed two to a register as in the vector
// layout, each packing instruction would wait for its load before the scan), or in
// shared memory (AT_RAGGED 2): each row as cp.async copies of the 16-byte blocks that
// cover its T steps (one block more than T needs, since the row starts at its own
// offset in its first block), read from there by the staging. The finish runs in the
// same layout, with scalar shared-memory accesses (a warp's 32 steps of a row lie in
// 32 banks) and delta_bias and D from a table in shared memory.
struct Prefetch {
  static constexpr int k_items_x = k_cpb * k_tv; // (channel, vector) items
  static constexpr int k_iters_x = (k_items_x + k_threads - 1) / k_threads;
  // (B or C row, vector) items of the variable ones; packed: (state, vector) items
  // carrying both (kept at 2 rows per state when neither is variable: unused then)
  static constexpr int k_items_bc = (k_pack_bc || AT_VAR_B != AT_VAR_C ? 1 : 2) * k_n * k_tv;
  static constexpr int k_iters_bc = (k_items_bc + k_threads - 1) / k_threads;
  at_vec<x_t, k_vec> u[k_iters_x], delta[k_iters_x];
  [[maybe_unused]] at_vec<x_t, k_vec> u_cur[k_iters_x], z_cur[k_iters_x]; // the chunk staged
  // delta_bias and D of the item's channel: an item keeps its channel in every chunk.
  float bias[k_iters_x], dskip[k_iters_x];
#if AT_HAS_Z
  at_vec<x_t, k_vec> z[k_iters_x];
#endif
#if AT_VAR_ANY
  at_vec<x_t, k_vec> bc[k_iters_bc];
  at_vec<x_t, k_vec> bc_c[k_pack_bc ? k_iters_bc : 1]; // C when packed
#endif
  // Element layout: slots per thread, the elements of the chunk's tiles, and where
  // slot k lies relative to the thread's first element (row k * THREADS / T, step
  // (k * THREADS) % T: compile-time; T and THREADS divide one another).
  static constexpr int k_slots_x = k_iters_x * k_vec;
  static constexpr int k_tile_x = k_cpb * k_t;
  static constexpr int k_slots_bc = k_iters_bc * k_vec;
  static constexpr int k_tile_bc = k_items_bc / k_tv * k_t;
  static_assert(!(k_ragged || k_raw) || k_t % k_threads == 0 || k_threads % k_t == 0,
                "AT_RAGGED: ITEMS and THREADS must divide one another");
  static __device__ __forceinline__ constexpr int slot_row(int k) {
    return k * k_threads / k_t;
  }
  static __device__ __forceinline__ constexpr int slot_step(int k) {
    return (k * k_threads) % k_t;
  }
  // Whether slot k of this thread lies in a tile of TILE elements (ITEMS vectors).
  template <int TILE, int ITEMS> static __device__ __forceinline__ bool slot_in(int k) {
    return ITEMS % k_threads == 0 || k * k_threads + int(threadIdx.x) < TILE;
  }
  // The thread's first element: row threadIdx.x / T and step threadIdx.x % T of the
  // tile (or row 0, step threadIdx.x when T > THREADS).
  static __device__ __forceinline__ int first_row() {
    return k_t <= k_threads ? int(threadIdx.x) / k_t : 0;
  }
  static __device__ __forceinline__ int first_step() {
    return k_t <= k_threads ? int(threadIdx.x) % k_t : int(threadIdx.x);
  }
  // A stride, opaque to the compiler: the per-slot offsets slot_row(k) * stride are
  // then recomputed per chunk (one multiply-add each) instead of being hoisted out of
  // the chunk loop into two registers per slot and tensor.
  static __device__ __forceinline__ long long opaque(long long stride) {
    asm volatile("" : "+l"(stride));
    return stride;
  }
  // Raw rows (k_raw): u, delta (and z) of the block's channels, then the variable B
  // and/or C rows (packed pairs: the B rows, then the C rows), each k_bpr
  // 16-byte blocks; copy e of a chunk fills block e % k_bpr of raw row e / k_bpr, i.e.
  // the 16 bytes at 16 * e.
  static constexpr int k_e = 16 / int(sizeof(x_t)); // elements per 16-byte block
  static constexpr int k_bpr = k_t / k_e + 1;
  static constexpr int k_raw_row_bytes = 16 * k_bpr;
  static constexpr int k_raw_x = k_cpb * (AT_HAS_Z ? 3 : 2);
  static constexpr int k_raw_rows =
      k_raw_x + (AT_VAR_ANY ? k_items_bc / k_tv * (k_pack_bc ? 2 : 1) : 0);
  static constexpr int k_copies = k_raw_rows * k_bpr;
  // The offsets table: per channel the (u, delta, z) rows' as an int4, then per state
  // the (B, C) rows' as an int2 (packed pairs) or per B/C row one int.
  static constexpr int k_table = 4 * k_cpb + (k_raw_rows - k_raw_x);
  static __device__ __forceinline__ int table_index(int r) {
    if (r < k_raw_x) {
      return r % k_cpb * 4 + r / k_cpb;
    }
    r -= k_raw_x;
    return 4 * k_cpb + (k_pack_bc ? r % k_n * 2 + r / k_n : r);
  }
  static constexpr int k_copy_iters = (k_copies + k_threads - 1) / k_threads;
  // This thread's copies: the block for chunk 0, and the step (relative to the
  // chunk) of its first element; a block whose first element is at or past L, or of
  // a channel past D, is zero-filled instead of read.
  [[maybe_unused]] const char* cp_src[k_raw ? k_copy_iters : 1];
  [[maybe_unused]] int cp_first[k_raw ? k_copy_iters : 1];
  // AT_RAGGED 1: this thread's elements of the next chunk.
  [[maybe_unused]] x_t el_u[k_ragged ? k_slots_x : 1], el_delta[k_ragged ? k_slots_x : 1];
  [[maybe_unused]] x_t el_z[k_ragged && AT_HAS_Z ? k_slots_x : 1];
  [[maybe_unused]] x_t el_bc[k_ragged && AT_VAR_ANY ? k_slots_bc : 1];
  [[maybe_unused]] x_t el_bc_c[k_ragged && k_pack_bc ? k_slots_bc : 1];

  // VEC elements of a [.., L] row at t (zero past L; scalar reads unless vector_ok).
  // FULL: the caller knows the whole chunk is inside L and vector_ok holds, so the
  // vector is read with no checks (every chunk but the last: the checks and their
  // branches cost about as many instructions per chunk as 3 steps of a state).
  template <bool FULL>
  static __device__ __forceinline__ void fetch(at_vec<x_t, k_vec>& w, const x_t* row, int t,
                                               int length, bool vector_ok) {
    if (FULL) {
      w.load(row + t);
    } else if (vector_ok) {
      if (t < length) { // L % VEC == 0: the whole vector is inside
        w.load(row + t);
      } else {
#pragma unroll
        for (int j = 0; j < k_vec; ++j) {
          w.elem[j] = at_from_float<x_t>(0.0f);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        w.elem[j] = t + j < length ? row[t + j] : at_from_float<x_t>(0.0f);
      }
    }
  }

  // The rows this thread's items read (their channel, B/C state), fixed for the
  // kernel: the chunk loop only adds the chunk's start.
  const x_t* row_u[k_iters_x];
  const x_t* row_delta[k_iters_x];
  [[maybe_unused]] const x_t* row_z[k_iters_x];
  [[maybe_unused]] const x_t* row_bc[k_iters_bc];
  [[maybe_unused]] const x_t* row_c[k_pack_bc ? k_iters_bc : 1];
  int off_x[k_iters_x]; // the item's first step in a chunk
  [[maybe_unused]] int off_bc[k_iters_bc];

  // Block channel c is channel min(d_first + c * d_step, d_last); the rows start
  // `shift` elements early (AT_RAGGED 3: the block's timeline, 0 otherwise).
  __device__ __forceinline__ void init(const ScanArgs& args, int b, int d_first, int d_step,
                                       int d_last, int shift, const x_t* b_base,
                                       const x_t* c_base) {
#pragma unroll
    for (int i = 0; i < k_iters_x; ++i) {
      const int e = threadIdx.x + i * k_threads;
      const int d = min(d_first + e / k_tv * d_step, d_last);
      bias[i] = AT_HAS_BIAS ? args.delta_bias[d] : 0.0f;
      dskip[i] = AT_HAS_D ? args.D[d] : 0.0f;
      off_x[i] = (e % k_tv) * k_vec;
      row_u[i] = args.u + b * args.u_bs + d * args.u_ds - shift;
      row_delta[i] = args.delta + b * args.delta_bs + d * args.delta_ds - shift;
      row_z[i] = AT_HAS_Z ? args.z + b * args.z_bs + d * args.z_ds - shift : nullptr;
    }
#if AT_VAR_ANY
#pragma unroll
    for (int i = 0; i < (k_raw ? 0 : k_iters_bc); ++i) { // k_raw: B and C via the raw tile
      const int e = threadIdx.x + i * k_threads;
      if constexpr (k_pack_bc) {
        const int n = min(e / k_tv, k_n - 1);
        off_bc[i] = (e % k_tv) * k_vec;
        row_bc[i] = b_base + n * args.b_ns;
        row_c[i] = c_base + n * args.c_ns;
      } else {
        // The B rows (if variable) come first, then the C rows (if variable).
        const bool is_c = AT_VAR_B ? AT_VAR_C && e >= k_n * k_tv : true;
        const int r = AT_VAR_B && is_c ? e - k_n * k_tv : e;
        const int n = min(r / k_tv, k_n - 1);
        off_bc[i] = (r % k_tv) * k_vec;
        row_bc[i] = is_c ? c_base + n * args.c_ns : b_base + n * args.b_ns;
      }
    }
#else
    (void)b_base;
    (void)c_base;
#endif
  }

  template <bool FULL>
  __device__ __forceinline__ void load(int chunk_start, int length, bool vector_ok) {
#pragma unroll
    for (int i = 0; i < k_iters_x; ++i) {
      const int e = threadIdx.x + i * k_threads;
      if (k_items_x % k_threads == 0 || e < k_items_x) {
        const int t = chunk_start + off_x[i];
        fetch<FULL>(u[i], row_u[i], t, length, vector_ok);
        fetch<FULL>(delta[i], row_delta[i], t, length, vector_ok);
#if AT_HAS_Z
        fetch<FULL>(z[i], row_z[i], t, length, vector_ok);
#endif
      }
    }
#if AT_VAR_ANY
#pragma unroll
    for (int i = 0; i < (k_raw ? 0 : k_iters_bc); ++i) {
      const int e = threadIdx.x + i * k_threads;
      if (k_items_bc % k_threads == 0 || e < k_items_bc) {
        const int t = chunk_start + off_bc[i];
        fetch<FULL>(bc[i], row_bc[i], t, length, vector_ok);
        if constexpr (k_pack_bc) {
          fetch<FULL>(bc_c[i], row_c[i], t, length, vector_ok);
        }
      }
    }
#endif
  }

  // Converts and stages the chunk: dt = softplus(delta + bias) and dt*u as fp32 per
  // (channel, step); B and C as fp32 or packed pairs. u and z stay in registers
  // (u_cur, z_cur) for the finish, which the same thread runs on the same items:
  // through shared memory they would cost 4 of the ~34 shared-memory wavefronts per
  // (channel, step) of an 8-lane channel; in registers, the registers they hold.
  // Past L, u is 0 (the loads zero-fill), so dt*u adds nothing to h; dt is 0 there
  // too (decay 1) only when the final state is stored: otherwise the extra decay
  // reaches no output. AT_RAGGED 3 reads whole vectors across the row's ends: in the
  // first and the last chunk (EDGE) dt and dt*u are zero outside [lo, length).
  template <bool EDGE>
  __device__ __forceinline__ void stage(row_ptr s_dt, row_ptr s_du, row_ptr s_b, row_ptr s_c,
                                        int chunk_start, int length, [[maybe_unused]] int lo) {
#pragma unroll
    for (int i = 0; i < k_iters_x; ++i) {
      const int e = threadIdx.x + i * k_threads;
      if (k_items_x % k_threads == 0 || e < k_items_x) {
        const int c = e / k_tv;
        const int tt = (e % k_tv) * k_vec;
        [[maybe_unused]] const int t = chunk_start + tt; // masks dt past L
        float uv[k_vec], dv[k_vec];
        [[maybe_unused]] bool in[k_vec];
        u[i].to_float(uv);
        delta[i].to_float(dv);
#pragma unroll
        for (int j = 0; j < k_vec; ++j) {
          float x = dv[j] + bias[i];
#if AT_SOFTPLUS
          x = softplus(x);
#endif
          if constexpr (k_shift && EDGE) {
            in[j] = t + j >= lo && t + j < length;
            dv[j] = in[j] ? x : 0.0f;
          } else {
#if AT_LAST_STATE
            dv[j] = t + j < length ? x : 0.0f;
#else
            dv[j] = x;
#endif
          }
        }
        store_row(s_dt[c], tt, dv);
#pragma unroll
        for (int j = 0; j < k_vec; ++j) {
          if constexpr (k_shift && EDGE) { // u outside the row may be anything
            dv[j] = in[j] ? dv[j] * uv[j] : 0.0f;
          } else {
            dv[j] *= uv[j];
          }
        }
        store_row(s_du[c], tt, dv);
#if AT_HAS_D
        u_cur[i] = u[i];
#endif
#if AT_HAS_Z
        z_cur[i] = z[i];
#endif
      }
    }
#if AT_VAR_ANY
#pragma unroll
    for (int i = 0; i < (k_raw ? 0 : k_iters_bc); ++i) {
      const int e = threadIdx.x + i * k_threads;
      if constexpr (k_pack_bc) {
        if (k_items_bc % k_threads == 0 || e < k_items_bc) {
          const int n = e / k_tv;
          const int tt = (e % k_tv) * k_vec;
          unsigned* dst = reinterpret_cast<unsigned*>(s_b[n]);
#pragma unroll
          for (int j = 0; j < k_vec; j += 4) {
            uint4 w;
            w.x = pack_pair(bc[i].elem[j], bc_c[i].elem[j]);
            w.y = pack_pair(bc[i].elem[j + 1], bc_c[i].elem[j + 1]);
            w.z = pack_pair(bc[i].elem[j + 2], bc_c[i].elem[j + 2]);
            w.w = pack_pair(bc[i].elem[j + 3], bc_c[i].elem[j + 3]);
            *reinterpret_cast<uint4*>(dst + swz(tt + j)) = w;
          }
        }
      } else if (k_items_bc % k_threads == 0 || e < k_items_bc) {
        const bool is_c = AT_VAR_B ? AT_VAR_C && e >= k_n * k_tv : true;
        const int r = AT_VAR_B && is_c ? e - k_n * k_tv : e;
        const int n = r / k_tv;
        const int tt = (r % k_tv) * k_vec;
        float v[k_vec];
        bc[i].to_float(v);
        store_row(is_c ? s_c[n] : s_b[n], tt, v);
      }
    }
#endif
    (void)s_b;
    (void)s_c;
    (void)length;
  }

  // AT_RAGGED 1: this thread's elements of the chunk at chunk_start,
  // zero past L and for channels past D. Every address is formed whether or not the
  // element lies inside (at_load_or_zero: a predicated load, no branch).
  __device__ __forceinline__ void load_el(const ScanArgs& args, int b, int d_first,
                                          const x_t* b_base, const x_t* c_base, int chunk_start,
                                          int length) {
    const int r0 = first_row(), s0 = first_step();
    const int rows_in = args.dim - d_first - r0; // slot rows below this are inside D
    const long long uds = opaque(args.u_ds), dds = opaque(args.delta_ds);
    const x_t* pu = args.u + b * args.u_bs + (d_first + r0) * uds + chunk_start + s0;
    const x_t* pd = args.delta + b * args.delta_bs + (d_first + r0) * dds + chunk_start + s0;
#if AT_HAS_Z
    const long long zds = opaque(args.z_ds);
    const x_t* pz = args.z + b * args.z_bs + (d_first + r0) * zds + chunk_start + s0;
#endif
#pragma unroll
    for (int k = 0; k < k_slots_x; ++k) {
      if (slot_in<k_tile_x, k_items_x>(k)) {
        const int r = slot_row(k), s = slot_step(k);
        const bool in = r < rows_in && chunk_start + s0 + s < length;
        el_u[k] = at_load_or_zero(pu + r * uds + s, in);
        el_delta[k] = at_load_or_zero(pd + r * dds + s, in);
#if AT_HAS_Z
        el_z[k] = at_load_or_zero(pz + r * zds + s, in);
#endif
      }
    }
#if AT_VAR_ANY
    const int t0 = chunk_start + s0;
    [[maybe_unused]] const long long bns = opaque(args.b_ns), cns = opaque(args.c_ns);
#pragma unroll
    for (int k = 0; k < k_slots_bc; ++k) {
      if (slot_in<k_tile_bc, k_items_bc>(k)) {
        const int r = r0 + slot_row(k), t = t0 + slot_step(k);
        const bool in = t < length;
        if constexpr (k_pack_bc) {
          el_bc[k] = at_load_or_zero(b_base + r * bns + t, in);
          el_bc_c[k] = at_load_or_zero(c_base + r * cns + t, in);
        } else {
          // The B rows (if variable) come first, then the C rows (if variable).
          const bool is_c = AT_VAR_B ? AT_VAR_C && r >= k_n : true;
          const int n = AT_VAR_B && is_c ? r - k_n : r;
          const x_t* row = is_c ? c_base + n * cns : b_base + n * bns;
          el_bc[k] = at_load_or_zero(row + t, in);
        }
      }
    }
#else
    (void)b_base;
    (void)c_base;
#endif
  }

  // Element layout: stage() of one element, slot k of this thread at (channel r, step
  // s); dt is 0 where `in` is false and the final state is stored. z is unused
  // without AT_HAS_Z.
  __device__ __forceinline__ void stage_x(const float* s_bias, row_ptr s_dt, row_ptr s_du, int k,
                                          int r, int s, bool in, x_t u, x_t delta,
                                          [[maybe_unused]] x_t z) {
    float x = at_to_float(delta);
#if AT_HAS_BIAS
    x += s_bias[r];
#endif
#if AT_SOFTPLUS
    x = softplus(x);
#endif
#if AT_LAST_STATE
    x = in ? x : 0.0f;
#endif
    s_dt[r][swz(s)] = x;
    s_du[r][swz(s)] = x * at_to_float(u);
#if AT_HAS_D
    u_cur[k / k_vec].elem[k % k_vec] = u;
#endif
#if AT_HAS_Z
    z_cur[k / k_vec].elem[k % k_vec] = z;
#endif
    (void)s_bias;
    (void)in;
  }
  // Element layout: stage() of one B/C element at (row r, step s): the packed (b, c)
  // pair of state r, or b alone for B/C row r (the B rows first).
  static __device__ __forceinline__ void stage_bc(row_ptr s_b, row_ptr s_c, int r, int s, x_t b,
                                                  [[maybe_unused]] x_t c) {
    if constexpr (k_pack_bc) {
      reinterpret_cast<unsigned*>(s_b[r])[swz(s)] = pack_pair(b, c);
    } else {
      const bool is_c = AT_VAR_B ? AT_VAR_C && r >= k_n : true;
      const int n = AT_VAR_B && is_c ? r - k_n : r;
      (is_c ? s_c : s_b)[n][swz(s)] = at_to_float(b);
    }
  }

  // AT_RAGGED 1: stage() for this thread's elements (see stage()); delta_bias per
  // channel of the block from s_bias.
  __device__ __forceinline__ void stage_regs(const float* s_bias, row_ptr s_dt, row_ptr s_du,
                                             row_ptr s_b, row_ptr s_c, int chunk_start,
                                             int length) {
    const int r0 = first_row(), s0 = first_step();
#pragma unroll
    for (int k = 0; k < k_slots_x; ++k) {
      if (slot_in<k_tile_x, k_items_x>(k)) {
        const int r = r0 + slot_row(k), s = s0 + slot_step(k);
        stage_x(s_bias, s_dt, s_du, k, r, s, chunk_start + s < length, el_u[k], el_delta[k],
                el_z[AT_HAS_Z ? k : 0]);
      }
    }
#if AT_VAR_ANY
#pragma unroll
    for (int k = 0; k < k_slots_bc; ++k) {
      if (slot_in<k_tile_bc, k_items_bc>(k)) {
        stage_bc(s_b, s_c, r0 + slot_row(k), s0 + slot_step(k), el_bc[k],
                 el_bc_c[k_pack_bc ? k : 0]);
      }
    }
#endif
    (void)s_b;
    (void)s_c;
  }

  // AT_RAGGED 2: the row behind raw row r (at step 0), or null for a channel past D.
  static __device__ __forceinline__ const x_t* raw_source(const ScanArgs& args, int b, int d_first,
                                                          const x_t* b_base, const x_t* c_base,
                                                          int r) {
    if (r < k_raw_x) {
      const int d = d_first + r % k_cpb;
      if (d >= args.dim) {
        return nullptr;
      }
      switch (r / k_cpb) {
      case 0:
        return args.u + b * args.u_bs + d * args.u_ds;
      case 1:
        return args.delta + b * args.delta_bs + d * args.delta_ds;
      default:
        return args.z + b * args.z_bs + d * args.z_ds;
      }
    }
    r -= k_raw_x;
    if constexpr (k_pack_bc) {
      return r < k_n ? b_base + r * args.b_ns : c_base + (r - k_n) * args.c_ns;
    } else {
      // The B rows (if variable) come first, then the C rows (if variable).
      const bool is_c = AT_VAR_B ? AT_VAR_C && r >= k_n : true;
      const int n = AT_VAR_B && is_c ? r - k_n : r;
      return is_c ? c_base + n * args.c_ns : b_base + n * args.b_ns;
    }
  }

  // k_raw: this thread's copies, and the offsets table (s_off, 16-byte aligned): the
  // byte offset in the raw tile of each raw row's step 0 (its row start plus its
  // shift in its first block). The B/C rows start `shift` elements early (the block's
  // timeline of AT_RAGGED 3).
  __device__ __forceinline__ void init_raw(const ScanArgs& args, int b, int d_first,
                                           const x_t* b_base, const x_t* c_base, int* s_off,
                                           int shift) {
#pragma unroll
    for (int i = 0; i < k_copy_iters; ++i) {
      const int e = threadIdx.x + i * k_threads;
      if (k_copies % k_threads == 0 || e < k_copies) {
        const int r = e / k_bpr, j = e % k_bpr;
        const x_t* row = raw_source(args, b, d_first, b_base, c_base, r);
        if (r >= k_raw_x) {
          row -= shift;
        }
        const unsigned long long at = reinterpret_cast<unsigned long long>(row);
        const int shift = int(at % 16) / int(sizeof(x_t));
        cp_src[i] = reinterpret_cast<const char*>(at - at % 16) + 16 * j;
        cp_first[i] = row != nullptr ? j * k_e - shift : 0x7fffffff;
        if (j == 0) {
          s_off[table_index(r)] = r * k_raw_row_bytes + shift * int(sizeof(x_t));
        }
      }
    }
  }

  // k_raw: starts the copies of the chunk at chunk_start into the raw tile
  // (shared-state-space address raw) as one cp.async group, an empty one past L. A
  // block with no step in [lo, length) is zero-filled, not read. Without WITH_X only
  // the B/C rows (AT_RAGGED 3 with vectors), from the first pass over the copies that
  // reaches them.
  template <bool WITH_X>
  __device__ __forceinline__ void copy_raw(unsigned raw, int chunk_start, int length,
                                           int lo) const {
    const int left = length - chunk_start;
    const int below = lo - chunk_start - k_e; // a block's first step at or below it: all < lo
    const long long skip = static_cast<long long>(chunk_start) * sizeof(x_t);
    constexpr int k_first = WITH_X ? 0 : k_raw_x * k_bpr / k_threads;
    if (left > 0) {
#pragma unroll
      for (int i = k_first; i < k_copy_iters; ++i) {
        const int e = threadIdx.x + i * k_threads;
        if ((k_copies % k_threads == 0 || e < k_copies) && (WITH_X || e >= k_raw_x * k_bpr)) {
          cp_async_16(raw + 16 * e, cp_src[i] + skip, cp_first[i] < left && cp_first[i] > below);
        }
      }
    }
    cp_async_commit();
  }

  // AT_RAGGED 3 with vectors: stage() of the variable B and C rows of a chunk wholly
  // inside [lo, length), from the raw tile a VEC-element vector at a time, as stage()
  // stages vectors (the same items): the words that cover it, read aligned, and a funnel
  // shift by the row's offset in them (2 bytes or none). In place of stage_raw's one
  // element per access.
  __device__ __forceinline__ void stage_bc_vec(const char* raw, const int* s_off, row_ptr s_b,
                                               row_ptr s_c) const {
#if AT_VAR_ANY
    constexpr int k_words = k_vec * int(sizeof(x_t)) / 4;
    static_assert(k_words * 4 == k_vec * int(sizeof(x_t)), "whole words a vector");
    // The vector at byte offset a of the tile, as words.
    auto read = [&](int a, unsigned(&out)[k_words]) {
      const unsigned* w = reinterpret_cast<const unsigned*>(raw + (a & ~3));
      const unsigned sh = unsigned(a & 3) * 8;
      unsigned x[k_words + 1];
#pragma unroll
      for (int j = 0; j <= k_words; ++j) {
        x[j] = w[j];
      }
#pragma unroll
      for (int j = 0; j < k_words; ++j) {
        out[j] = __funnelshift_r(x[j], x[j + 1], sh);
      }
    };
    const int* off_bc = s_off + 4 * k_cpb;
#pragma unroll
    for (int i = 0; i < k_iters_bc; ++i) {
      const int e = threadIdx.x + i * k_threads;
      if (k_items_bc % k_threads == 0 || e < k_items_bc) {
        const int tt = (e % k_tv) * k_vec;
        if constexpr (k_pack_bc) {
          // Pairs: B of a step in the low half, C in the high half (pack_pair).
          const int n = e / k_tv;
          const int2 off = reinterpret_cast<const int2*>(off_bc)[n];
          unsigned bw[k_words], cw[k_words];
          read(off.x + tt * int(sizeof(x_t)), bw);
          read(off.y + tt * int(sizeof(x_t)), cw);
          unsigned* dst = reinterpret_cast<unsigned*>(s_b[n]);
#pragma unroll
          for (int j = 0; j < k_vec; j += 4) {
            uint4 q;
            q.x = __byte_perm(bw[j / 2], cw[j / 2], 0x5410);
            q.y = __byte_perm(bw[j / 2], cw[j / 2], 0x7632);
            q.z = __byte_perm(bw[j / 2 + 1], cw[j / 2 + 1], 0x5410);
            q.w = __byte_perm(bw[j / 2 + 1], cw[j / 2 + 1], 0x7632);
            *reinterpret_cast<uint4*>(dst + swz(tt + j)) = q;
          }
        } else {
          // The B rows (if variable) come first, then the C rows (if variable), in the
          // items as in the raw rows.
          const bool is_c = AT_VAR_B ? AT_VAR_C && e >= k_n * k_tv : true;
          const int r = AT_VAR_B && is_c ? e - k_n * k_tv : e;
          at_vec<x_t, k_vec> v;
          read(off_bc[e / k_tv] + tt * int(sizeof(x_t)),
               *reinterpret_cast<unsigned(*)[k_words]>(v.words));
          float f[k_vec];
          v.to_float(f);
          store_row(is_c ? s_c[r / k_tv] : s_b[r / k_tv], tt, f);
        }
      }
    }
#endif
    (void)raw, (void)s_off, (void)s_b, (void)s_c;
  }

  // k_raw: stage() for this thread's elements (see stage()), read from the raw tile
  // (zero outside [lo, length); FULL: the chunk is inside); delta_bias per channel of
  // the block from s_bias. Without X only B and C (AT_RAGGED 3 with vectors).
  template <bool FULL, bool X>
  __device__ __forceinline__ void stage_raw(const float* s_bias, const char* raw, const int* s_off,
                                            row_ptr s_dt, row_ptr s_du, row_ptr s_b, row_ptr s_c,
                                            int chunk_start, int length, int lo) {
    const int r0 = first_row(), s0 = first_step();
    const x_t zero = at_from_float<x_t>(0.0f);
    // Element s of the raw row at byte offset off, or zero where `in` is false.
    auto at = [&](int off, int s, bool in) {
      return FULL || in ? *reinterpret_cast<const x_t*>(raw + off + s * int(sizeof(x_t))) : zero;
    };
#pragma unroll
    for (int k = 0; k < (X ? k_slots_x : 0); ++k) {
      if (slot_in<k_tile_x, k_items_x>(k)) {
        const int r = r0 + slot_row(k), s = s0 + slot_step(k);
        const bool in = chunk_start + s < length;
        const int4 off = reinterpret_cast<const int4*>(s_off)[r]; // u, delta, z rows
        stage_x(s_bias, s_dt, s_du, k, r, s, FULL || in, at(off.x, s, in), at(off.y, s, in),
                AT_HAS_Z ? at(off.z, s, in) : zero);
      }
    }
#if AT_VAR_ANY
    const int* off_bc = s_off + 4 * k_cpb;
#pragma unroll
    for (int k = 0; k < k_slots_bc; ++k) {
      if (slot_in<k_tile_bc, k_items_bc>(k)) {
        const int r = r0 + slot_row(k), s = s0 + slot_step(k);
        const bool in = chunk_start + s >= lo && chunk_start + s < length;
        if constexpr (k_pack_bc) {
          const int2 off = reinterpret_cast<const int2*>(off_bc)[r]; // B, C rows of state r
          stage_bc(s_b, s_c, r, s, at(off.x, s, in), at(off.y, s, in));
        } else {
          stage_bc(s_b, s_c, r, s, at(off_bc[r], s, in), zero);
        }
      }
    }
#endif
    (void)s_b;
    (void)s_c;
  }
};

// TS steps of the recurrence from step t0 of the chunk for this lane's states of
// its CPL channels c_scan + k: h <- a h + dt*u*B, acc <- sum_j C h. With CORRECT
// (time slices after the first, which start from h = 0; CPL 1 only) it also keeps
// the running decay product p and qc[i][j] = C * p, the weights of the state
// entering the slice in y. With STORE each 4 steps of acc go to part[k] as soon
// as they are final (AT_YSTORE_DURING).
template <bool CORRECT, bool STORE>
__device__ __forceinline__ void
scan_slice(float (*part)[k_row], const row_ptr s_dt, const row_ptr s_du, const row_ptr s_b,
           const row_ptr s_c, int c_scan, int l, int t0, const float (&b_fixed)[k_cpl][k_npl],
           const float (&c_fixed)[k_cpl][k_npl], const float (&a2)[k_cpl][k_npl],
           float (&h)[k_cpl][k_npl], float (&acc)[k_cpl][k_ts], float* p, float (*qc)[k_npl]) {
#if AT_VAR_B
  (void)b_fixed;
#else
  (void)s_b;
#endif
#if AT_VAR_C
  (void)c_fixed;
#else
  (void)s_c;
#endif
#if !AT_VAR_ANY
  (void)l;
#endif
#pragma unroll
  for (int q = 0; q < k_ts; q += 4) {
    float dt[k_cpl][4], du[k_cpl][4];
#pragma unroll
    for (int k = 0; k < k_cpl; ++k) {
      const float4 dt4 = load4(s_dt[c_scan + k], t0 + q);
      const float4 du4 = load4(s_du[c_scan + k], t0 + q);
      dt[k][0] = dt4.x, dt[k][1] = dt4.y, dt[k][2] = dt4.z, dt[k][3] = dt4.w;
      du[k][0] = du4.x, du[k][1] = du4.y, du[k][2] = du4.z, du[k][3] = du4.w;
    }
#pragma unroll
    for (int j = 0; j < k_npl; ++j) {
#if AT_VAR_B && AT_VAR_C
      const int n = j * k_lpc + l;
      float bv[4], cv[4];
      if constexpr (k_pack_bc) {
        const uint4 w = *reinterpret_cast<const uint4*>(s_b[n] + swz(t0 + q));
        unpack_bc(w.x, bv[0], cv[0]);
        unpack_bc(w.y, bv[1], cv[1]);
        unpack_bc(w.z, bv[2], cv[2]);
        unpack_bc(w.w, bv[3], cv[3]);
      } else {
        const float4 b4 = load4(s_b[n], t0 + q);
        const float4 c4 = load4(s_c[n], t0 + q);
        bv[0] = b4.x, bv[1] = b4.y, bv[2] = b4.z, bv[3] = b4.w;
        cv[0] = c4.x, cv[1] = c4.y, cv[2] = c4.z, cv[3] = c4.w;
      }
#elif AT_VAR_B
      const float4 b4 = load4(s_b[j * k_lpc + l], t0 + q);
      const float bv[4] = {b4.x, b4.y, b4.z, b4.w};
#elif AT_VAR_C
      const float4 c4 = load4(s_c[j * k_lpc + l], t0 + q);
      const float cv[4] = {c4.x, c4.y, c4.z, c4.w};
#endif
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int k = 0; k < k_cpl; ++k) {
          // A fixed B or C: the lane's channel's value at every step.
#if !AT_VAR_B
          const float bv[4] = {b_fixed[k][j], b_fixed[k][j], b_fixed[k][j], b_fixed[k][j]};
#endif
#if !AT_VAR_C
          const float cv[4] = {c_fixed[k][j], c_fixed[k][j], c_fixed[k][j], c_fixed[k][j]};
#endif
          const float a = exp2_sel((q + i) % 8 < k_poly, dt[k][i] * a2[k][j]);
          h[k][j] = fmaf(a, h[k][j], du[k][i] * bv[i]);
          acc[k][q + i] = j == 0 ? cv[i] * h[k][j] : fmaf(cv[i], h[k][j], acc[k][q + i]);
          if constexpr (CORRECT) {
            p[j] *= a;
            qc[q + i][j] = cv[i] * p[j];
          }
        }
      }
    }
    if constexpr (STORE) {
      // These 4 steps' partials are final: stored now, they hold no registers
      // through the rest of the chunk.
#pragma unroll
      for (int k = 0; k < k_cpl; ++k) {
        put_partials(part[k], t0 + q, l, acc[k][q], acc[k][q + 1], acc[k][q + 2], acc[k][q + 3]);
      }
    }
  }
}

// What the chunk loop of the kernel below reads and updates (run_chunks).
struct ScanCtx {
  const ScanArgs& args;
  int b, d_first, d_step, d_last, shift, lo, length;
  bool vector_ok;
  const x_t *b_base, *c_base;
  float *s_bias, *s_dskip;
  int* s_off;
  const char* s_raw;
  unsigned raw_addr;
  row_ptr s_dt, s_du, s_b, s_c;
  float (*s_part)[k_part_stride][k_row];
  float (*s_xh)[k_cpb][k_n];
  float (*s_xp)[k_cpb][k_n];
  int c_scan, l, slice;
  const float (&a2)[k_cpl][k_npl];
  float (&h)[k_cpl][k_npl];
  const float (&b_fixed)[k_cpl][k_npl];
  const float (&c_fixed)[k_cpl][k_npl];
};

// The kernel's staging of the first chunk and its loop over the chunks, in the element
// layout (EL) or the vector layout; ctx as the kernel set it up.
template <bool EL> __device__ __forceinline__ void run_chunks(const ScanCtx& ctx) {
  const ScanArgs& args = ctx.args;
  const int b = ctx.b, d_first = ctx.d_first, d_step = ctx.d_step, d_last = ctx.d_last;
  const int shift = ctx.shift, lo = ctx.lo, length = ctx.length;
  const bool vector_ok = ctx.vector_ok;
  const x_t *b_base = ctx.b_base, *c_base = ctx.c_base;
  float *s_bias = ctx.s_bias, *s_dskip = ctx.s_dskip;
  int* s_off = ctx.s_off;
  const char* s_raw = ctx.s_raw;
  const unsigned raw_addr = ctx.raw_addr;
  const row_ptr s_dt = ctx.s_dt, s_du = ctx.s_du, s_b = ctx.s_b, s_c = ctx.s_c;
  float(*s_part)[k_part_stride][k_row] = ctx.s_part;
  [[maybe_unused]] float(*s_xh)[k_cpb][k_n] = ctx.s_xh;
  [[maybe_unused]] float(*s_xp)[k_cpb][k_n] = ctx.s_xp;
  const int c_scan = ctx.c_scan, l = ctx.l;
  [[maybe_unused]] const int slice = ctx.slice;
  const float(&a2)[k_cpl][k_npl] = ctx.a2;
  float(&h)[k_cpl][k_npl] = ctx.h;
  const float(&b_fixed)[k_cpl][k_npl] = ctx.b_fixed;
  const float(&c_fixed)[k_cpl][k_npl] = ctx.c_fixed;
  (void)d_last, (void)shift, (void)b_base, (void)c_base, (void)s_bias, (void)s_dskip;
  (void)s_off, (void)s_raw, (void)raw_addr;
  Prefetch pf;
  if constexpr (EL) {
    if constexpr (k_ragged || k_shift) {
      for (int c = threadIdx.x; c < k_cpb; c += k_threads) {
        const int d = min(d_first + c, args.dim - 1);
        s_bias[c] = AT_HAS_BIAS ? args.delta_bias[d] : 0.0f;
        s_dskip[c] = AT_HAS_D ? args.D[d] : 0.0f;
      }
      if constexpr (k_raw) {
        pf.init_raw(args, b, d_first, b_base, c_base, s_off, 0);
        pf.template copy_raw<true>(raw_addr, 0, length, 0);
        cp_async_wait<0>();
        __syncthreads(); // the tables and the raw rows
        pf.stage_raw<false, true>(s_bias, s_raw, s_off, s_dt, s_du, s_b, s_c, 0, length, 0);
      } else {
        pf.load_el(args, b, d_first, b_base, c_base, 0, length);
        __syncthreads(); // the table
        pf.stage_regs(s_bias, s_dt, s_du, s_b, s_c, 0, length);
      }
    }
  } else {
    pf.init(args, b, d_first, d_step, d_last, shift, b_base, c_base);
    if constexpr (k_raw) { // AT_RAGGED 3: B and C through the raw tile
      pf.init_raw(args, b, d_first, b_base, c_base, s_off, shift);
      pf.template copy_raw<false>(raw_addr, 0, length, lo);
    }
    if (vector_ok && k_t <= length && lo == 0) {
      pf.load<true>(0, length, vector_ok);
    } else {
      pf.load<false>(0, length, vector_ok);
    }
    if constexpr (k_raw) {
      cp_async_wait<0>();
      __syncthreads(); // the tables and the raw rows
      pf.stage_raw<false, false>(s_bias, s_raw, s_off, s_dt, s_du, s_b, s_c, 0, length, lo);
    }
    pf.stage<true>(s_dt, s_du, s_b, s_c, 0, length, lo);
  }
  __syncthreads();

  for (int chunk_start = 0; chunk_start < length; chunk_start += k_t) {
    const int next = chunk_start + k_t;
    if constexpr (k_raw) {
      pf.template copy_raw<EL>(raw_addr, next, length, lo);
    }
    if constexpr (EL) {
      if (k_ragged && !k_async && next < length) {
        pf.load_el(args, b, d_first, b_base, c_base, next, length);
      }
    } else if (vector_ok && next + k_t <= length) { // the next chunk, whole
      pf.load<true>(next, length, vector_ok);
    } else if (next < length) {
      pf.load<false>(next, length, vector_ok);
    }

    // 2. The recurrence over this lane's slice; acc[k][i] is its share of y at step
    // slice * TS + i.
    float acc[k_cpl][k_ts];
#if AT_TSPLIT == 1
    scan_slice<false, k_ystore_during>(s_part[l % k_prows] + c_scan, s_dt, s_du, s_b, s_c, c_scan,
                                       l, 0, b_fixed, c_fixed, a2, h, acc, nullptr, nullptr);
#else
    float p[k_npl], qc[k_ts][k_npl];
    if (slice == 0) {
      scan_slice<false, false>(nullptr, s_dt, s_du, s_b, s_c, c_scan, l, 0, b_fixed, c_fixed, a2, h,
                               acc, nullptr, nullptr);
    } else {
#pragma unroll
      for (int j = 0; j < k_npl; ++j) {
        h[0][j] = 0.0f;
        p[j] = 1.0f;
      }
      scan_slice<true, false>(nullptr, s_dt, s_du, s_b, s_c, c_scan, l, slice * k_ts, b_fixed,
                              c_fixed, a2, h, acc, p, qc);
    }
    // Publish each slice's end state (slice 0's is the true one, the others' start
    // from zero) and decay product; compose the states at the slice boundaries.
#pragma unroll
    for (int j = 0; j < k_npl; ++j) {
      s_xh[slice][c_scan][j * k_lpc + l] = h[0][j];
      s_xp[slice][c_scan][j * k_lpc + l] = slice == 0 ? 0.0f : p[j];
    }
    __syncthreads();
    if (slice > 0) {
      // y of this slice gains sum_j C P h_in, with h_in the true entering state.
      float h_in[k_npl];
#pragma unroll
      for (int j = 0; j < k_npl; ++j) {
        const int n = j * k_lpc + l;
        h_in[j] = s_xh[0][c_scan][n];
        for (int r = 1; r < slice; ++r) {
          h_in[j] = fmaf(s_xp[r][c_scan][n], h_in[j], s_xh[r][c_scan][n]);
        }
      }
#pragma unroll
      for (int i = 0; i < k_ts; ++i) {
#pragma unroll
        for (int j = 0; j < k_npl; ++j) {
          acc[0][i] = fmaf(qc[i][j], h_in[j], acc[0][i]);
        }
      }
    } else {
      // The true state at the chunk's end: the next chunk's starting state.
#pragma unroll
      for (int j = 0; j < k_npl; ++j) {
        const int n = j * k_lpc + l;
#pragma unroll
        for (int r = 1; r < k_s; ++r) {
          h[0][j] = fmaf(s_xp[r][c_scan][n], h[0][j], s_xh[r][c_scan][n]);
        }
      }
    }
#endif
    if constexpr (!k_ystore_during) { // (time slices: the corrected partials)
#pragma unroll
      for (int k = 0; k < k_cpl; ++k) {
#pragma unroll
        for (int q = 0; q < k_ts; q += 4) {
          put_partials(s_part[l % k_prows][c_scan + k], slice * k_ts + q, l, acc[k][q],
                       acc[k][q + 1], acc[k][q + 2], acc[k][q + 3]);
        }
      }
    }
    if constexpr (k_raw) {
      cp_async_wait<0>(); // the next chunk's raw rows, read by its staging below
    }
    __syncthreads();

    // 3. y = sum of the partials + D*u, gated, stored. The same (channel, vector)
    // assignment as the staging loop (or the same elements, AT_RAGGED): a thread
    // finishes the items whose u and z it staged and kept (pf.u_cur, pf.z_cur).
    const bool whole = vector_ok && (!k_shift || chunk_start >= lo) && next <= length;
    if constexpr (EL) {
      const int r0 = Prefetch::first_row(), s0 = Prefetch::first_step();
      const long long ods = Prefetch::opaque(args.out_ds);
      x_t* po = args.out + b * args.out_bs + (d_first + r0) * ods + chunk_start + s0;
      const int rows_in = args.dim - d_first - r0;
#pragma unroll
      for (int k = 0; k < Prefetch::k_slots_x; ++k) {
        if (Prefetch::slot_in<Prefetch::k_tile_x, Prefetch::k_items_x>(k)) {
          const int r = Prefetch::slot_row(k), s = Prefetch::slot_step(k);
          float y = s_part[0][r0 + r][swz(s0 + s)];
#pragma unroll
          for (int q = 1; q < k_prows; ++q) {
            y += s_part[q][r0 + r][swz(s0 + s)];
          }
#if AT_HAS_D
          y = fmaf(s_dskip[r0 + r], at_to_float(pf.u_cur[k / k_vec].elem[k % k_vec]), y);
#endif
#if AT_HAS_Z
          y *= silu_gate(at_to_float(pf.z_cur[k / k_vec].elem[k % k_vec]));
#endif
          if (r < rows_in && chunk_start + s0 + s < length) {
            po[r * ods + s] = at_from_float<x_t>(y);
          }
        }
      }
    }
    if constexpr (!EL) {
#pragma unroll
      for (int i = 0; i < (k_ragged ? 0 : Prefetch::k_iters_x); ++i) {
        const int e = threadIdx.x + i * k_threads;
        if (Prefetch::k_items_x % k_threads != 0 && e >= Prefetch::k_items_x) {
          break;
        }
        const int c = e / k_tv;
        const int tt = (e % k_tv) * k_vec;
        const int d = d_first + c * d_step;
        const int t = chunk_start + tt;
        float y[k_vec];
        load_row(s_part[0][c], tt, y);
#pragma unroll
        for (int r = 1; r < k_prows; ++r) {
          float part[k_vec];
          load_row(s_part[r][c], tt, part);
#pragma unroll
          for (int j = 0; j < k_vec; ++j) {
            y[j] += part[j];
          }
        }
        if (d < args.dim) {
#if AT_HAS_D
          float uf[k_vec];
          pf.u_cur[i].to_float(uf);
#pragma unroll
          for (int j = 0; j < k_vec; ++j) {
            y[j] = fmaf(pf.dskip[i], uf[j], y[j]);
          }
#endif
#if AT_HAS_Z
          float zf[k_vec];
          pf.z_cur[i].to_float(zf);
#pragma unroll
          for (int j = 0; j < k_vec; ++j) {
            y[j] *= silu_gate(zf[j]);
          }
#endif
          x_t* row = args.out + b * args.out_bs + d * args.out_ds - shift;
          at_vec<x_t, k_vec> w;
#pragma unroll
          for (int j = 0; j < k_vec; ++j) {
            w.elem[j] = at_from_float<x_t>(y[j]);
          }
          if (whole || (vector_ok && (k_shift ? t >= lo && t + k_vec <= length : t < length))) {
            if constexpr (k_shift) {
              store_vec(row + t, w);
            } else {
              w.store(row + t);
            }
          } else if (!vector_ok || k_shift) { // AT_RAGGED 3: a vector across a row's end
#pragma unroll
            for (int j = 0; j < k_vec; ++j) {
              if (t + j >= lo && t + j < length) {
                row[t + j] = w.elem[j];
              }
            }
          }
        }
      }
    }
    if (next < length) {
      if constexpr (EL) {
        if constexpr (k_ragged && !k_async) {
          pf.stage_regs(s_bias, s_dt, s_du, s_b, s_c, next, length);
        } else if (next + k_t <= length) {
          pf.stage_raw<true, true>(s_bias, s_raw, s_off, s_dt, s_du, s_b, s_c, next, length, 0);
        } else {
          pf.stage_raw<false, true>(s_bias, s_raw, s_off, s_dt, s_du, s_b, s_c, next, length, 0);
        }
      } else if (!k_shift || next + k_t <= length) {
        if constexpr (k_raw) {
          pf.stage_bc_vec(s_raw, s_off, s_b, s_c);
        }
        pf.stage<false>(s_dt, s_du, s_b, s_c, next, length, lo);
      } else { // AT_RAGGED 3, the last chunk
        if constexpr (k_raw) {
          pf.stage_raw<false, false>(s_bias, s_raw, s_off, s_dt, s_du, s_b, s_c, next, length, lo);
        }
        pf.stage<true>(s_dt, s_du, s_b, s_c, next, length, lo);
      }
    }
    __syncthreads();
  }
}

extern "C" __global__ void __launch_bounds__(k_threads, AT_MINB)
    selective_scan_fwd(const ScanArgs args) {
  // Dynamic shared memory (runtime/ops/selective_scan.cpp sizes it):
  //   dt, dt*u      fp32 [CPB][row] each
  //   B, C          fp32 [N][row] each if variable; 16-bit variable B and C with
  //                 BC_PAIR: one [N][row] of packed (B, C) pairs
  //   partial y     fp32 [NSPLIT >> YRED][PART_STRIDE][row] (the extra rows stagger banks)
  extern __shared__ __align__(16) float s_dyn[];
  float(*s_dt)[k_row] = reinterpret_cast<float(*)[k_row]>(s_dyn);
  float(*s_du)[k_row] = s_dt + k_cpb;
  float(*s_b)[k_row] = s_du + k_cpb;                             // or packed B/C pairs
  float(*s_c)[k_row] = s_b + (AT_VAR_B && !k_pack_bc ? k_n : 0); // unused when packed
  float(*s_part)[k_part_stride][k_row] =                         // [k_prows] blocks
      reinterpret_cast<float(*)[k_part_stride][k_row]>(s_b + k_bc_rows);
  // Slice boundary exchange: end state and decay product per (slice, channel, state).
  float(*s_xh)[k_cpb][k_n] = reinterpret_cast<float(*)[k_cpb][k_n]>(s_part + k_prows);
  [[maybe_unused]] float(*s_xp)[k_cpb][k_n] = s_xh + k_s;
  // AT_RAGGED: delta_bias and D of the block's channels, read per element; the raw
  // rows' offsets and, at the next 16-byte boundary, the raw tile (Prefetch).
  [[maybe_unused]] float* s_bias = reinterpret_cast<float*>(s_xh + 2 * k_s);
  [[maybe_unused]] float* s_dskip = s_bias + k_cpb;
  // Rounded up by pointer arithmetic on s_dyn (16-byte aligned), not through an
  // integer: the compiler then still knows these are shared memory and reads them
  // with LDS (a pointer rebuilt from an integer is read with generic loads, which
  // wait on the long scoreboard like global ones).
  auto align16 = [&](const void* p) {
    const char* base = reinterpret_cast<const char*>(s_dyn);
    const int off = static_cast<int>(reinterpret_cast<const char*>(p) - base);
    return base + ((off + 15) & ~15);
  };
  [[maybe_unused]] int* s_off = reinterpret_cast<int*>(const_cast<char*>(align16(s_dskip + k_cpb)));
  [[maybe_unused]] const char* s_raw = align16(s_off + Prefetch::k_table);
  [[maybe_unused]] const unsigned raw_addr = at_smem_addr(s_raw);

  // The block's channels: d_first + c * d_step for c < CPB, those past D computing on
  // d_last's data and never storing. AT_RAGGED 3 takes every ch_mod-th channel of one
  // residue class, so that the rows share their offset from a vector boundary; the
  // grid has room for VEC classes (runtime/ops/selective_scan.cpp, geometry), and a
  // block with no channel of its class leaves at once.
  const int per_batch_dim = k_shift ? (args.dim + k_vec - 1) / k_vec : args.dim;
  const int blocks_per_batch = (k_shift ? k_vec : 1) * ((per_batch_dim + k_cpb - 1) / k_cpb);
  const int b = blockIdx.x / blocks_per_batch;
  int d_first = (blockIdx.x % blocks_per_batch) * k_cpb;
  int d_step = 1, d_last = args.dim - 1;
  if constexpr (k_shift) {
    const int m = args.ch_mod;
    const int groups_per_class = ((args.dim + m - 1) / m + k_cpb - 1) / k_cpb;
    const int idx = blockIdx.x % blocks_per_batch;
    const int cls = idx / groups_per_class;
    d_first = cls + m * (idx % groups_per_class) * k_cpb;
    if (cls >= m || d_first >= args.dim) {
      return; // the whole block, before any barrier
    }
    d_step = m;
    d_last = cls + m * ((args.dim - 1 - cls) / m);
  }
  const bool vector_ok = args.vector_ok != 0;
  // AT_RAGGED 3: the rows' offset from a vector boundary; the block's timeline tau = t +
  // shift runs over [lo, length) (t over [0, L)), every chunk starting on a boundary.
  const int shift =
      k_shift && vector_ok
          ? int(reinterpret_cast<unsigned long long>(args.u + b * args.u_bs + d_first * args.u_ds) %
                (k_vec * sizeof(x_t)) / sizeof(x_t))
          : 0;
  const int lo = shift;
  const int length = args.length + shift;

  // This lane's channel and states in the scan phase. Channels past D (the last
  // block of a batch) compute on the last channel's data and never store.
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int slice = k_s == 1 ? 0 : warp / k_warps_c; // this lane's time slice
  // The lane's channels: c_scan .. c_scan + CPL - 1 of the block.
  const int c_scan = ((warp % k_warps_c) * (32 / k_lpc) + lane / k_lpc) * k_cpl;
  const int l = lane % k_lpc;
  float a2[k_cpl][k_npl], h[k_cpl][k_npl];
  float b_fixed[k_cpl][k_npl], c_fixed[k_cpl][k_npl]; // fixed B/C; unused with variable B/C
#pragma unroll
  for (int k = 0; k < k_cpl; ++k) {
    const long long d_scan = min(d_first + (c_scan + k) * d_step, d_last);
#pragma unroll
    for (int j = 0; j < k_npl; ++j) {
      const int n = j * k_lpc + l; // states n % NSPLIT == l, as in the time-parallel form
      a2[k][j] = args.A[d_scan * k_n + n] * k_log2e;
      h[k][j] = 0.0f;
#if AT_VAR_B
      b_fixed[k][j] = 0.0f;
#else
      b_fixed[k][j] = args.B[d_scan * k_n + n];
#endif
#if AT_VAR_C
      c_fixed[k][j] = 0.0f;
#else
      c_fixed[k][j] = args.C[d_scan * k_n + n];
#endif
    }
  }
#if AT_VAR_ANY
  // Every channel of the block is in one group (the op checks (D/G) % CPB == 0).
  const int bc_group = d_first / (args.dim / args.groups);
#endif
#if AT_VAR_B
  const x_t* b_base = args.B + b * args.b_bs + bc_group * args.b_gs;
#else
  const x_t* b_base = nullptr;
#endif
#if AT_VAR_C
  const x_t* c_base = args.C + b * args.c_bs + bc_group * args.c_gs;
#else
  const x_t* c_base = nullptr;
#endif

  // Chunk k+1's global loads are issued before chunk k's recurrence and land while
  // it runs; they are converted and staged after it (the loads' latency would
  // otherwise stall every warp of the block at the staging barrier).
  // The element layout (AT_RAGGED 1 and 2, and AT_RAGGED 3 where the call's rows do
  // not share their offsets: it then runs as AT_RAGGED 2). AT_RAGGED 3 builds the
  // chunk loop once per layout, so that neither carries the other's code.
  const ScanCtx ctx{args,      b,      d_first, d_step, d_last,  shift,  lo,    length,
                    vector_ok, b_base, c_base,  s_bias, s_dskip, s_off,  s_raw, raw_addr,
                    s_dt,      s_du,   s_b,     s_c,    s_part,  s_xh,   s_xp,  c_scan,
                    l,         slice,  a2,      h,      b_fixed, c_fixed};
  if constexpr (k_shift) {
    if (vector_ok) {
      run_chunks<false>(ctx);
    } else {
      run_chunks<true>(ctx);
    }
  } else {
    run_chunks<k_ragged>(ctx);
  }

#if AT_LAST_STATE
#pragma unroll
  for (int k = 0; k < k_cpl; ++k) {
    const int d = d_first + (c_scan + k) * d_step;
    if (slice == 0 && d < args.dim) {
      float* dst = args.last_state + (static_cast<long long>(b) * args.dim + d) * k_n;
#pragma unroll
      for (int j = 0; j < k_npl; ++j) {
        dst[j * k_lpc + l] = h[k][j];
      }
    }
  }
#endif
}
