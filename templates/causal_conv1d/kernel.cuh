// Causal depthwise conv1d forward, channel-first [B, C, L] (channel-last x and out:
// channel_last.cuh, included below under AT_CHANNEL_LAST):
//   out[b,c,t] = act(bias[c] + sum_{k<W} w[c,k] * x[b,c,t-W+1+k]),
// where x before t = 0 is the initial state (x[b,c,-j] = initial_states[b,c,W-1-j])
// or zero. Optionally final_states[b,c,:] = the last W-1 inputs (a decoder's carry).
//
// The op is purely bandwidth-bound (about 2 FLOP per byte), so every parameter
// below trades how many bytes each thread keeps in flight against occupancy and
// how the W-1 element halo in front of each thread's vector is obtained.
//
// Compile-time parameters (NVRTC -D, set by runtime/ops/causal_conv1d.cpp):
//   AT_THREADS   threads per block: more threads hide latency per block, fewer
//                give the scheduler more, smaller blocks to balance short rows.
//   AT_VEC       elements per vector access: 16-byte accesses need 8 x 16-bit or
//                4 x fp32 elements; larger values issue two 16-byte accesses.
//   AT_ITEMS     vectors per thread per tile (the sequence chunk each thread
//                covers): more bytes in flight per thread, fewer blocks.
//   AT_CPB       channels (rows) per block: lets short rows fill a block.
//   AT_SMEM      0: direct vector loads, halo from the neighbouring lane by warp
//                shuffle; 1: the tile is staged through shared memory, which
//                keeps accesses coalesced when rows are not vector-aligned.
//   AT_SPAN      1 (with AT_SMEM): a block whose rows lie back to back in x and out
//                (the host's check: vector_mode 2) stages them as one aligned run of
//                vectors, whatever L; see "Spans" below. Other calls take the staged
//                path with the same parameters.
//   AT_RAGGED    0: L is a multiple of AT_VEC (every vector lies wholly inside or
//                wholly past a row). 1: it is not; each row is then read in aligned
//                vectors from its first aligned address, whatever L and the strides
//                (see "Ragged rows" below). Aligned shapes compile without it.
//   AT_WIDTH     filter width W (2..4); AT_HAS_BIAS, AT_SILU: 0/1.
//   AT_CHANNEL_LAST  1: x and out are channel-last (channel stride 1); the kernel is
//                channel_last.cuh's, which reads the parameters above its own way.
//   AT_X_T, AT_W_T  element types of x/out and of weight/bias.
//
// Ragged rows (AT_RAGGED=1). With an odd L the rows of a contiguous [B, C, L]
// tensor start at every possible offset from a 16-byte boundary, so no fixed split
// of a row into vectors is aligned for every row. Each row instead computes its
// shift, the number of elements between the aligned address at or before out's row
// start and that start, and its tiles cover positions [y * tile - shift, (y + 1) *
// tile - shift): every output vector of a tile begins at an aligned address. x's row
// has its own shift (a view such as mamba-ssm's x = xz[:, :C] against a contiguous
// out); its aligned vectors then begin `lag` positions before out's, and a vector of
// inputs is the end of one aligned x vector and the start of the next (from the
// next lane on the direct path, from the staged tile on the shared-memory one).
// Vectors wholly inside the row are single wide accesses; the (at most two) output
// vectors that straddle the row's ends write their in-row elements one at a time and
// never touch the neighbouring rows (which may belong to no tensor at all); input
// vectors that straddle them are read whole where they lie inside x's address range.
// Positions before 0 take the initial state (or zero), as the halo does. The last
// shift positions of a row may lie past the last tile; the last block of the row
// computes those few outputs with scalar accesses. bench/notes/causal_conv1d-unaligned.md
// weighs the alternatives.
//
// Spans (AT_SPAN=1, vector_mode 2). When the cpb rows of a block are consecutive in
// memory (channel stride L in x and out) and the block's first element is aligned (the
// host checks the pointers, the batch strides and that cpb * L is a multiple of the
// vector), the block's rows are one run of cpb * L elements: it is staged in aligned
// vectors, each row behind a gap that holds its initial state (or zeros), and each
// thread computes whole output vectors of the run, which may end one row and begin the
// next (such a vector is computed with each row's window and weights, and the halves
// kept). No partial vectors except the run's last, so short odd rows (L=333: 42 vectors
// a row, two of them partial) move at the rate of aligned ones. L >= AT_VEC (check()):
// a vector meets at most one row start.

#include "common/numeric.cuh"

#ifndef AT_THREADS
#error "AT_THREADS must be defined"
#endif

typedef AT_X_T x_t;
typedef AT_W_T w_t;

constexpr int k_threads = AT_THREADS;
constexpr int k_vec = AT_VEC;
constexpr int k_items = AT_ITEMS;
constexpr int k_cpb = AT_CPB;
constexpr int k_width = AT_WIDTH;
constexpr int k_halo = k_width - 1;
constexpr int k_row_threads = k_threads / k_cpb;
constexpr int k_tile = k_row_threads * k_vec * k_items; // sequence positions per block and row

static_assert(k_threads % k_cpb == 0, "channels per block must divide the threads");
static_assert(k_width >= 2 && k_width <= 4, "width must be 2..4");
static_assert(k_vec >= k_halo, "a vector must cover the halo");
static_assert(AT_SMEM || k_row_threads % 32 == 0, "the shuffle path needs whole warps per row");

#ifndef AT_RAGGED
#define AT_RAGGED 0
#endif
#ifndef AT_SPAN
#define AT_SPAN 0
#endif
static_assert(!AT_SPAN || AT_SMEM, "spans are staged in the shared-memory path's tile");
constexpr bool k_ragged = AT_RAGGED != 0;
// Alignment (in elements) a vector access needs: its size, up to one 16-byte word.
constexpr int k_align =
    (k_vec * int(sizeof(x_t)) >= 16 ? 16 : k_vec * int(sizeof(x_t))) / int(sizeof(x_t));

struct ConvArgs {
  const x_t* x;
  const w_t* weight; // [C, W], contiguous
  const w_t* bias;   // [C] or null
  x_t* out;
  const x_t* initial_states; // [B, C, W-1] contiguous, or null: zeros before t = 0
  x_t* final_states;         // [B, C, W-1] contiguous, or null
  int batch;
  int channels;
  int length;
  long long x_batch_stride;
  long long x_channel_stride;
  long long out_batch_stride;
  long long out_channel_stride;
  // Without AT_RAGGED: 1 when every row of x and out starts aligned (vector loads
  // and stores), else 0 (one element per access). With it: 1 (vectors always; rows of
  // x and out at different shifts are realigned, see "Ragged rows"). With AT_SPAN: 2
  // when every block's rows form an aligned run in x and out (see "Spans").
  int vector_mode;
  // Channel-last (AT_CHANNEL_LAST=1, channel_last.cuh): the channel strides are 1, these
  // are the strides between positions, and each thread walks `chunk` positions. Unused
  // otherwise.
  long long x_length_stride;
  long long out_length_stride;
  int chunk;
  // Channel-last with AT_SEQ_IDX: int32 [B, L] sequence ids of packed sequences (x at s
  // counts for the output at t only when their ids are equal); null otherwise.
  const int* seq_idx;
  long long seq_idx_batch_stride;
};

__device__ __forceinline__ float conv_point(const float* win, const float (&w)[k_width], float b) {
  float acc = b;
#pragma unroll
  for (int k = 0; k < k_width; ++k) {
    acc = fmaf(w[k], win[k], acc);
  }
#if AT_SILU
  acc = at_silu_rcp(acc);
#endif
  return acc;
}

#ifndef AT_CHANNEL_LAST
#define AT_CHANNEL_LAST 0
#endif
#if AT_CHANNEL_LAST
#include "causal_conv1d/channel_last.cuh"
#else

// Writes k_vec outputs at position p of one row from a window of k_halo + k_vec inputs.
// vector_ok: the store may be one vector where all k_vec positions lie in the row.
__device__ __forceinline__ void emit(x_t* out_row, int p, int length, bool vector_ok,
                                     const float* win, const float (&w)[k_width], float b) {
  at_vec<x_t, k_vec> o;
#pragma unroll
  for (int j = 0; j < k_vec; ++j) {
    o.elem[j] = at_from_float<x_t>(conv_point(win + j, w, b));
  }
  if constexpr (k_ragged) {
    if (vector_ok && p >= 0 && p + k_vec <= length) {
      o.store(out_row + p);
    } else {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        if (p + j >= 0 && p + j < length) {
          out_row[p + j] = o.elem[j];
        }
      }
    }
  } else if (vector_ok) {
    if (p < length) {
      o.store(out_row + p);
    }
  } else {
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      if (p + j < length) {
        out_row[p + j] = o.elem[j];
      }
    }
  }
}

#if AT_SMEM
// Shared-memory row: k_pad slots in front (the halo lives in the last k_halo of
// them) keep the tile body 16-byte aligned for vector stores into shared memory.
constexpr int k_pad = 16 / sizeof(x_t) >= k_halo ? 16 / sizeof(x_t) : k_halo;
// Ragged rows: one vector more, for rows whose x and out start at different shifts.
// Spans: a gap of one vector in front of each row instead of the pad (conv_span).
constexpr int k_row_slots = k_pad + k_tile + (k_ragged || AT_SPAN ? k_vec : 0);
#endif

// Ragged rows whose x and out have different shifts: the k_vec inputs at an aligned
// output position are elements lag.. of x's aligned vector a there and the first lag of
// the next one, b (lag < k_align, the same for the whole row).
template <int LAG>
__device__ __forceinline__ void take_lagged(at_vec<x_t, k_vec>& o, const at_vec<x_t, k_vec>& a,
                                            const at_vec<x_t, k_vec>& b) {
  if constexpr (LAG < k_align) {
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      o.elem[j] = j + LAG < k_vec ? a.elem[j + LAG] : b.elem[j + LAG - k_vec];
    }
  }
}
// take_lagged for a lag known at run time (0 < lag < k_align): the moves of each lag
// are their own branch (the same for a warp's row), no indexing of registers.
__device__ __forceinline__ void take_lagged(at_vec<x_t, k_vec>& o, const at_vec<x_t, k_vec>& a,
                                            const at_vec<x_t, k_vec>& b, int lag) {
  switch (lag) {
  case 1:
    take_lagged<1>(o, a, b);
    break;
  case 2:
    take_lagged<2>(o, a, b);
    break;
  case 3:
    take_lagged<3>(o, a, b);
    break;
  case 4:
    take_lagged<4>(o, a, b);
    break;
  case 5:
    take_lagged<5>(o, a, b);
    break;
  case 6:
    take_lagged<6>(o, a, b);
    break;
  default:
    take_lagged<7>(o, a, b);
    break;
  }
}

// A vector moved between lanes, its 4-byte words each through `shuffle` (one warp
// shuffle: every lane of the warp takes part).
template <typename Shuffle>
__device__ __forceinline__ at_vec<x_t, k_vec> shuffled(const at_vec<x_t, k_vec>& v,
                                                       Shuffle shuffle) {
  constexpr int k_u32 = at_vec<x_t, k_vec>::k_bytes / 4;
  at_vec<x_t, k_vec> r;
  const unsigned* in = reinterpret_cast<const unsigned*>(&v);
  unsigned* out = reinterpret_cast<unsigned*>(&r);
#pragma unroll
  for (int k = 0; k < k_u32; ++k) {
    out[k] = shuffle(in[k]);
  }
  return r;
}
// The vector of the lane above.
__device__ __forceinline__ at_vec<x_t, k_vec> from_next_lane(const at_vec<x_t, k_vec>& v) {
  return shuffled(v, [](unsigned w) { return __shfl_down_sync(0xffffffffu, w, 1); });
}
// Lane src's vector, to every lane.
__device__ __forceinline__ at_vec<x_t, k_vec> from_lane(const at_vec<x_t, k_vec>& v, int src) {
  return shuffled(v, [src](unsigned w) { return __shfl_sync(0xffffffffu, w, src); });
}

#if AT_SMEM
// The shared-memory path's compute loop over a thread's k_items vectors of the staged
// row srow, for a row whose x vectors lag out's by `lag` positions (the inputs of the
// output at base + off start lag slots further). LAGGED = false: lag is 0, and the
// loop of an ordinary call keeps its aligned shared-memory reads.
template <bool LAGGED>
__device__ __forceinline__ void compute_staged(const x_t* srow, int lag, int base, int t,
                                               int length, x_t* out_row, bool vector_ok,
                                               const float (&w)[k_width], float bias) {
  const int first = k_pad - k_halo + (LAGGED ? lag : 0);
#pragma unroll
  for (int i = 0; i < k_items; ++i) {
    const int off = (i * k_row_threads + t) * k_vec;
    const int p = base + off;
    if (p >= length) {
      break;
    }
    float win[k_halo + k_vec];
#pragma unroll
    for (int j = 0; j < k_halo + k_vec; ++j) {
      win[j] = at_to_float(srow[first + off + j]);
    }
    emit(out_row, p, length, vector_ok, win, w, bias);
  }
}
#endif

#if AT_SPAN
// The block's rows as one run (see "Spans"). In shared memory each row r gets a gap of
// k_vec slots in front, holding its initial state (or zeros) in the last k_halo:
//   buf[r * (L + k_vec) + k_vec + t] = x[row r, t],  t in [-k_halo, L)
// so every output's window is contiguous there. Gaps of k_vec slots keep every vector
// of the run aligned in shared memory too: a vector that ends one row and begins the
// next is stored twice, once at each row's place (its other half lands in a gap, which
// the states then overwrite).
__device__ __forceinline__ void conv_span(const ConvArgs& args, x_t* buf,
                                          float (*sw)[k_width + 1]) {
  const int rows_per_batch = (args.channels + k_cpb - 1) / k_cpb;
  const int b = blockIdx.x / rows_per_batch;
  const int c0 = (blockIdx.x % rows_per_batch) * k_cpb;
  const int rows = min(k_cpb, args.channels - c0);
  const int length = args.length;    // at least k_vec (check()): a vector meets one row start
  const int stride = length + k_vec; // a row and its gap in buf
  const int n = rows * length;       // at most k_cpb * k_tile = k_threads * k_items * k_vec
  const long long first = static_cast<long long>(c0) * length;
  const x_t* xs = args.x + b * args.x_batch_stride + first;
  x_t* os = args.out + b * args.out_batch_stride + first;
  const int full = n / k_vec; // whole vectors; the run's last n % k_vec elements one by one
  const float inv_length = 1.0f / float(length);
  // The row of element e < 2^24 (the float quotient is off by at most one).
  auto row_of = [&](int e) {
    int r = static_cast<int>(float(e) * inv_length);
    r -= r * length > e ? 1 : 0;
    r += (r + 1) * length <= e ? 1 : 0;
    return r;
  };
  at_vec<x_t, k_vec> v[k_items];
  int row[k_items];
#pragma unroll
  for (int i = 0; i < k_items; ++i) {
    const int w = i * k_threads + threadIdx.x;
    row[i] = row_of(w * k_vec);
    if (w < full) {
      v[i].load(xs + w * k_vec);
    }
  }
  if (threadIdx.x < n - full * k_vec) {
    const int e = full * k_vec + threadIdx.x;
    buf[e + (row_of(e) + 1) * k_vec] = xs[e];
  }
  for (int k = threadIdx.x; k < rows * (k_width + 1); k += k_threads) {
    const int r = k / (k_width + 1);
    const int j = k - r * (k_width + 1);
    float value = 0.0f;
    if (j < k_width) {
      value = at_to_float(args.weight[(c0 + r) * k_width + j]);
    } else {
#if AT_HAS_BIAS
      value = at_to_float(args.bias[c0 + r]);
#endif
    }
    sw[r][j] = value;
  }
  // A row's inputs before position 0 go to the last k_halo slots of its gap, written by
  // the thread whose vector holds the row's start, after that vector's own stores (the
  // only ones that reach the gap): no barrier between the two.
  const long long state_base = (static_cast<long long>(b) * args.channels + c0) * k_halo;
  auto fill_gap = [&](int r) {
#pragma unroll
    for (int h = 0; h < k_halo; ++h) {
      buf[r * stride + k_vec - k_halo + h] = args.initial_states
                                                 ? args.initial_states[state_base + r * k_halo + h]
                                                 : at_from_float<x_t>(0.0f);
    }
  };
#pragma unroll
  for (int i = 0; i < k_items; ++i) {
    const int w = i * k_threads + threadIdx.x;
    if (w < full) {
      const int e0 = w * k_vec;
      const int r = row[i];
      v[i].store(buf + e0 + (r + 1) * k_vec);
      if (e0 == r * length) { // row r begins here
        fill_gap(r);
      }
      if ((r + 1) * length < e0 + k_vec) { // row r + 1 begins inside (and is in the run)
        v[i].store(buf + e0 + (r + 2) * k_vec);
        fill_gap(r + 1);
      }
    }
  }
  __syncthreads();
  if (args.final_states) {
    for (int k = threadIdx.x; k < rows * k_halo; k += k_threads) {
      const int r = k / k_halo;
      args.final_states[state_base + k] =
          buf[r * stride + k_vec + length - k_halo + (k - r * k_halo)];
    }
  }
  // One output vector from the window at buf + at (its first input at at - k_halo).
  auto convolve = [&](int at, int r, at_vec<x_t, k_vec>& o) {
    at_vec<x_t, k_vec> before, cur;
    before.load(buf + at - k_vec);
    cur.load(buf + at);
    float win[k_halo + k_vec];
    float vals[k_vec];
    cur.to_float(vals);
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      win[k_halo + j] = vals[j];
    }
#pragma unroll
    for (int h = 0; h < k_halo; ++h) {
      win[h] = at_to_float(before.elem[k_vec - k_halo + h]);
    }
    float w[k_width];
#pragma unroll
    for (int k = 0; k < k_width; ++k) {
      w[k] = sw[r][k];
    }
    const float bias = sw[r][k_width];
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      o.elem[j] = at_from_float<x_t>(conv_point(win + j, w, bias));
    }
  };
#pragma unroll
  for (int i = 0; i < k_items; ++i) {
    const int e0 = (i * k_threads + threadIdx.x) * k_vec;
    if (e0 >= n) {
      break;
    }
    const int r = row[i];
    at_vec<x_t, k_vec> o;
    convolve(e0 + (r + 1) * k_vec, r, o);
    const int next = (r + 1) * length - e0; // where row r + 1 begins in the vector
    if (next < k_vec && r + 1 < rows) {
      at_vec<x_t, k_vec> o2;
      convolve(e0 + (r + 2) * k_vec, r + 1, o2);
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        if (j >= next) {
          o.elem[j] = o2.elem[j];
        }
      }
    }
    if (e0 + k_vec <= n) {
      o.store(os + e0);
    } else {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        if (e0 + j < n) {
          os[e0 + j] = o.elem[j];
        }
      }
    }
  }
}
#endif

#if !AT_SMEM
// The direct path's compute loop over a thread's k_items vectors v (vector i at p0 + i *
// 32 * k_vec; lane 0's first halo in left; lane 31's vector after its last in tail),
// for a row whose x vectors lag out's by `lag` positions. LAGGED = false: lag is 0, and
// the loop of an ordinary call keeps its own registers.
template <bool LAGGED>
__device__ __forceinline__ void
compute_direct(at_vec<x_t, k_vec> (&v)[k_items], const x_t (&left)[k_halo],
               const at_vec<x_t, k_vec>& tail, int lag, int p0, int lane, int length, x_t* out_row,
               bool vector_ok, const float (&w)[k_width], float bias) {
  float carry[k_halo]; // the previous vector's last k_halo inputs, from lane 31
#pragma unroll
  for (int i = 0; i < k_items; ++i) {
    const int p = p0 + i * 32 * k_vec;
    if constexpr (LAGGED) {
      // The inputs are the end of this lane's x vector and the start of the next
      // lane's; for lane 31, lane 0's next vector (or, after the last, its own load).
      at_vec<x_t, k_vec> b = from_next_lane(v[i]);
      const int next = i + 1 < k_items ? i + 1 : i; // (a valid index when unused)
      const at_vec<x_t, k_vec> after = i + 1 < k_items ? from_lane(v[next], 0) : tail;
      if (lane == 31) {
        b = after;
      }
      take_lagged(v[i], v[i], b, lag); // (o[j] reads a[j + lag], not yet overwritten)
    }
    float win[k_halo + k_vec];
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      win[k_halo + j] = at_to_float(v[i].elem[j]);
    }
    // The halo is the tail of the previous lane's vector; lane 0's, of lane 31's
    // previous vector (loaded for the first).
#pragma unroll
    for (int h = 0; h < k_halo; ++h) {
      const float from_left = __shfl_up_sync(0xffffffffu, win[k_vec + h], 1);
      win[h] = lane != 0 ? from_left : i == 0 ? at_to_float(left[h]) : carry[h];
    }
#pragma unroll
    for (int h = 0; h < k_halo; ++h) {
      carry[h] = __shfl_sync(0xffffffffu, win[k_vec + h], 31);
    }
    if (p < length) {
      emit(out_row, p, length, vector_ok, win, w, bias);
    }
  }
}
#endif

// Threads an SM must hold for ragged rows of vectors up to 16 bytes: what each path
// holds without the realignment of lagging rows (the shared-memory path 1536, at most 42
// registers; the direct one 1536, 1280 and 1024 for 1, 2 and 4 or more items, at most 42,
// 51 and 64). With the realignment, ptxas would take more (48, 48-68) for every call,
// lagging or not, and lose occupancy.
constexpr int k_min_threads = AT_SMEM ? 1536 : k_items == 1 ? 1536 : k_items == 2 ? 1280 : 1024;
constexpr int k_min_blocks =
    k_ragged && k_vec * int(sizeof(x_t)) <= 16 && k_threads <= k_min_threads
        ? k_min_threads / k_threads
        : 1;
extern "C" __global__ void __launch_bounds__(k_threads, k_min_blocks)
    causal_conv1d_fwd(const ConvArgs args) {
#if AT_SMEM
  __shared__ __align__(16) x_t tile[k_cpb][k_row_slots];
#endif
#if AT_SPAN
  __shared__ float span_weights[k_cpb][k_width + 1];
  if (args.vector_mode == 2) {
    conv_span(args, &tile[0][0], span_weights);
    return;
  }
#endif
  const int rows_per_batch = (args.channels + k_cpb - 1) / k_cpb;
  const int b = blockIdx.x / rows_per_batch;
  const int row_in_block = threadIdx.x / k_row_threads;
  const int t = threadIdx.x % k_row_threads;
  const int c = (blockIdx.x % rows_per_batch) * k_cpb + row_in_block;
  const bool active = c < args.channels;
  const int tile_start = blockIdx.y * k_tile;
  // Vector loads and stores (ragged rows: always, realigned where x and out differ).
  const bool vector_ok = k_ragged || args.vector_mode != 0;

  float w[k_width];
  float bias = 0.0f;
  const int cc = active ? c : 0;
#pragma unroll
  for (int k = 0; k < k_width; ++k) {
    w[k] = at_to_float(args.weight[cc * k_width + k]);
  }
#if AT_HAS_BIAS
  bias = at_to_float(args.bias[cc]);
#endif
  const x_t* x_row = args.x + b * args.x_batch_stride + cc * args.x_channel_stride;
  x_t* out_row = args.out + b * args.out_batch_stride + cc * args.out_channel_stride;
  const long long state_row = (static_cast<long long>(b) * args.channels + cc) * k_halo;
  const x_t* init_row = args.initial_states ? args.initial_states + state_row : nullptr;
  // Input at any position q: x inside the row, the initial state (or zero) before 0,
  // zero past the row's end and, for ragged tiles, before -k_halo (no output reads
  // those). One predicated load (or none where `want` is false), no branch: vectors
  // that straddle a row's ends take this for each element.
  auto input_at = [&](int q, bool want = true) -> x_t {
    const bool from_x = q >= 0 && q < args.length;
    const bool from_init = q < 0 && q >= -k_halo && init_row != nullptr;
    const x_t* src = from_x ? x_row + q : (from_init ? init_row + (k_halo + q) : x_row);
    return at_load_or_zero(src, want && (from_x || from_init));
  };
  if (args.final_states && active && blockIdx.y == gridDim.y - 1 && t < k_halo) {
    args.final_states[state_row + t] = input_at(args.length - k_halo + t);
  }
  // The row's shift and lag (see "Ragged rows"): this tile's outputs are [base, base +
  // k_tile), aligned for out; x's aligned vectors start lag positions before them.
  int shift = 0;
  int lag = 0;
  if constexpr (k_ragged) {
    const int x_shift = int((reinterpret_cast<unsigned long long>(x_row) / sizeof(x_t)) % k_align);
    shift = int((reinterpret_cast<unsigned long long>(out_row) / sizeof(x_t)) % k_align);
    lag = (x_shift - shift + k_align) % k_align;
  }
  const int base = tile_start - shift;
  // The tensor's address range: x's first element to one past its last (strides are
  // non-negative). A vector that straddles an end of a row but lies inside this range
  // is read whole: its elements outside the row belong to the neighbouring rows (or to
  // the gaps of a view, in the same allocation) and are never used, except those just
  // before the row's start, which the halo reads and which take the initial state (or
  // zero) instead. Only the vectors reaching outside the tensor (the first row's front,
  // the last row's end) are read element by element.
  [[maybe_unused]] const x_t* x_lo = args.x;
  [[maybe_unused]] const x_t* x_hi = args.x + (args.batch - 1) * args.x_batch_stride +
                                     (args.channels - 1) * args.x_channel_stride + args.length;
  // The inputs at positions p .. p + k_vec - 1 (p < length, p aligned): one vector
  // access, or element by element where the vector reaches outside the tensor.
  auto load_vector = [&](at_vec<x_t, k_vec>& v, int p) {
    if constexpr (k_ragged) {
      if ((p >= 0 && p + k_vec <= args.length) ||
          (x_row + p >= x_lo && x_row + p + k_vec <= x_hi)) {
        v.load(x_row + p);
        if (p < 0) {
#pragma unroll
          for (int j = 0; j < k_vec; ++j) {
            if (p + j < 0) {
              v.elem[j] = input_at(p + j);
            }
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < k_vec; ++j) {
          v.elem[j] = input_at(p + j);
        }
      }
    } else {
      v.load(x_row + p);
    }
  };
  // Ragged rows: the last shift positions of the row can lie past the last tile;
  // the row's last block computes them from scalar reads (cache hits).
  auto ragged_tail = [&]() {
    if constexpr (k_ragged) {
      if (blockIdx.y == gridDim.y - 1) {
        for (int q = int(gridDim.y) * k_tile - shift + t; q < args.length; q += k_row_threads) {
          float win[k_width];
#pragma unroll
          for (int k = 0; k < k_width; ++k) {
            win[k] = at_to_float(input_at(q - k_halo + k));
          }
          out_row[q] = at_from_float<x_t>(conv_point(win, w, bias));
        }
      }
    }
  };

#if AT_SMEM
  x_t* srow = tile[row_in_block];
  // The tile holds x from base_x = base - lag on (aligned for x; slot k_pad is position
  // base_x), one vector more when lag > 0: the output at base + off reads it lag slots
  // further.
  const int base_x = base - lag;
  if (active) {
    // Halo: the k_halo inputs in front of the tile (zeros before t = 0).
    if (t < k_halo) {
      const int p = base_x - k_halo + t;
      srow[k_pad - k_halo + t] = input_at(p);
    }
#pragma unroll
    for (int i = 0; i < k_items; ++i) {
      const int off = (i * k_row_threads + t) * k_vec;
      const int p = base_x + off;
      if (vector_ok) {
        at_vec<x_t, k_vec> v;
        if (p < args.length) {
          load_vector(v, p);
          v.store(srow + k_pad + off);
        }
      } else {
        // Scalar but still coalesced: consecutive threads read consecutive elements.
#pragma unroll
        for (int j = 0; j < k_vec; ++j) {
          const int q = i * k_row_threads * k_vec + j * k_row_threads + t;
          if (tile_start + q < args.length) {
            srow[k_pad + q] = x_row[tile_start + q];
          }
        }
      }
    }
    if (k_ragged && lag != 0 && t == 0 && base_x + k_tile < args.length) {
      at_vec<x_t, k_vec> v;
      load_vector(v, base_x + k_tile);
      v.store(srow + k_pad + k_tile);
    }
  }
  __syncthreads();
  if (!active) {
    return;
  }
  if (lag == 0) { // (the same for the row; 0 without ragged rows)
    compute_staged<false>(srow, 0, base, t, args.length, out_row, vector_ok, w, bias);
  } else {
    compute_staged<true>(srow, lag, base, t, args.length, out_row, vector_ok, w, bias);
  }
  ragged_tail();
#else
  if (!active) {
    return; // whole warps: k_row_threads is a multiple of 32
  }
  const int lane = threadIdx.x % 32;
  // Each warp takes a chunk of 32 * k_items vectors of the row's tile, its vector i at
  // p0 + i * 32 * k_vec: the vector after lane 31's is lane 0's next one (a shuffle),
  // and so is the halo of lane 0's. All loads first, so that k_items vectors per thread
  // are in flight at once, with the first halo of lane 0 and, where x's vectors lag
  // out's (ragged rows), the vector after lane 31's last.
  const int p0 = base + ((t / 32 * k_items) * 32 + lane) * k_vec;
  at_vec<x_t, k_vec> v[k_items];
  x_t left[k_halo];
  at_vec<x_t, k_vec> tail;
#pragma unroll
  for (int h = 0; h < k_halo; ++h) {
    left[h] = input_at(p0 - k_halo + h, lane == 0);
  }
#pragma unroll
  for (int i = 0; i < k_items; ++i) {
    const int p = p0 + i * 32 * k_vec;
    if (vector_ok) {
      // (the lane below reads this vector's first lag inputs when they are in the row)
      if (p - lag < args.length) {
        load_vector(v[i], p - lag);
      }
    } else {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        v[i].elem[j] = p + j < args.length ? x_row[p + j] : at_from_float<x_t>(0.0f);
      }
    }
  }
  if constexpr (k_ragged) {
    const int p = p0 + (k_items - 1) * 32 * k_vec;
    if (lag != 0 && lane == 31 && p < args.length) {
      load_vector(tail, p - lag + k_vec);
    }
  }
  if (lag == 0) { // (the same for the warp's row; 0 without ragged rows)
    compute_direct<false>(v, left, tail, 0, p0, lane, args.length, out_row, vector_ok, w, bias);
  } else {
    compute_direct<true>(v, left, tail, lag, p0, lane, args.length, out_row, vector_ok, w, bias);
  }
  ragged_tail();
#endif
}
#endif // AT_CHANNEL_LAST
