// Causal depthwise conv1d forward, channel-first [B, C, L]:
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
//   AT_RAGGED    0: L is a multiple of AT_VEC (every vector lies wholly inside or
//                wholly past a row). 1: it is not; each row is then read in aligned
//                vectors from its first aligned address, whatever L and the strides
//                (see "Ragged rows" below). Aligned shapes compile without it.
//   AT_WIDTH     filter width W (2..4); AT_HAS_BIAS, AT_SILU: 0/1.
//   AT_X_T, AT_W_T  element types of x/out and of weight/bias.
//
// Ragged rows (AT_RAGGED=1). With an odd L the rows of a contiguous [B, C, L]
// tensor start at every possible offset from a 16-byte boundary, so no fixed split
// of a row into vectors is aligned for every row. Each row instead computes its
// shift, the number of elements between the aligned address at or before its start
// and the start, and its tiles cover positions [y * tile - shift, (y + 1) * tile -
// shift): every vector of a tile begins at an aligned address. Vectors wholly inside
// the row are single wide accesses; the (at most two) vectors that straddle the
// row's ends read and write their in-row elements one at a time and never touch the
// neighbouring rows (which may belong to no tensor at all). Positions before 0 in
// the first vector take the initial state (or zero), as the halo does. The last
// shift positions of a row may lie past the last tile; the last block of the row
// computes those few outputs with scalar accesses. out is written with the same
// vectors when its rows have x's shift (vector_mode 1), else one element at a time
// (vector_mode 2). bench/notes/causal_conv1d-unaligned.md weighs the alternatives.
//
// Flat planes (AT_RAGGED, vector_mode 3). When the rows of each batch lie back to back
// (channel stride L, x and out alike: a contiguous tensor, or mamba-ssm's x = xz[:, :C]
// view) and every batch's plane of C*L elements starts aligned and holds whole vectors,
// the plane is read as one aligned array: the grid's blocks share the B*C*L/AT_VEC
// vectors evenly, consecutive threads taking consecutive vectors, and a vector may hold
// the end of one row and the start of the next. Its channel and position come from two
// divisions by launch constants (at_div_magic); only the vectors that hold a row's
// first W-1 positions mask their window (initial state or zero), and only those that
// cross a row's end weigh their elements with two channels' filters. No element is
// read or written one at a time and no row has a tail.
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
  // and stores), else 0 (one element per access). With it (loads are always
  // vectors): 1 when out's rows have x's shift (vector stores), else 2 (scalar), or 3
  // when x and out are flat planes (see "Flat planes").
  int vector_mode;
  // vector_mode 3 only: B*C*L / AT_VEC vectors in all, C*L / AT_VEC per plane, and the
  // multipliers of at_div_magic for dividing by the vectors per plane and by L.
  int flat_vectors;
  unsigned plane_vectors;
  unsigned plane_mul, plane_shr;
  unsigned length_mul, length_shr;
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
constexpr int k_row_slots = k_pad + k_tile + (k_ragged ? k_vec : 0);
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
__device__ __forceinline__ void realign(at_vec<x_t, k_vec>& o, const at_vec<x_t, k_vec>& a,
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
  case 7:
    take_lagged<7>(o, a, b);
    break;
  default:
    o = a;
    break;
  }
}
// The vector of the lane above (its 4-byte words shuffled down by one lane).
__device__ __forceinline__ at_vec<x_t, k_vec> from_next_lane(const at_vec<x_t, k_vec>& v) {
  constexpr int k_u32 = at_vec<x_t, k_vec>::k_bytes / 4;
  at_vec<x_t, k_vec> r;
  const unsigned* src = reinterpret_cast<const unsigned*>(&v);
  unsigned* dst = reinterpret_cast<unsigned*>(&r);
#pragma unroll
  for (int k = 0; k < k_u32; ++k) {
    dst[k] = __shfl_down_sync(0xffffffffu, src[k], 1);
  }
  return r;
}

#if AT_RAGGED
// Flat planes hold rows of at least this many positions (runtime/ops/causal_conv1d.cpp
// checks it), so a block's vectors span at most k_flat_channels channels.
constexpr int k_flat_min_length = 64;
constexpr int k_flat_channels = k_threads * k_items * k_vec / k_flat_min_length + 2;

// Flat planes (vector_mode 3; see the header): block g of the grid's G owns vectors
// [g * per, (g + 1) * per) of all B*C*L/AT_VEC, per = ceil(all / G) <= the block's
// k_threads * k_items (the grid is sized for rows, which cover at least as much).
__device__ __forceinline__ void conv_flat(const ConvArgs& args) {
  const int blocks = static_cast<int>(gridDim.x * gridDim.y);
  const int block = static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x);
  const int per = (args.flat_vectors + blocks - 1) / blocks;
  const int first = block * per;
  const int end = min(first + per, args.flat_vectors);
  const int lane = threadIdx.x % 32;
  const int length = args.length;
  const int channels = args.channels;
  // Vector idx: its batch b and element e within the plane.
  auto locate = [&](int idx, unsigned& b, unsigned& e) {
    const unsigned n = idx < end ? unsigned(idx) : 0u;
    b = at_div_magic(n, args.plane_mul, args.plane_shr);
    e = (n - b * args.plane_vectors) * k_vec;
  };
  // Loads first: k_items vectors in flight.
  at_vec<x_t, k_vec> v[k_items];
  x_t left[k_items][k_halo];
#pragma unroll
  for (int i = 0; i < k_items; ++i) {
    const int idx = first + i * k_threads + static_cast<int>(threadIdx.x);
    const bool in = idx < end;
    unsigned b, e;
    locate(idx, b, e);
    const x_t* xp = args.x + b * args.x_batch_stride + e;
    if (in) {
      v[i].load(xp);
    } else {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        v[i].elem[j] = at_from_float<x_t>(0.0f);
      }
    }
    // Lane 0's halo: the plane's k_halo elements in front (a plane's first vector has
    // none: its window is masked).
#pragma unroll
    for (int h = 0; h < k_halo; ++h) {
      left[i][h] = at_load_or_zero(xp - k_halo + h, lane == 0 && in && e > 0);
    }
  }
  // The filters (taps, then bias) of the block's channels, from its first vector's
  // channel on (past the plane's last channel, the next plane's first): staged while
  // the vectors load, so a vector's filter is a shared-memory read.
  __shared__ float filters[k_flat_channels][k_width + 1];
  unsigned b_first, e_first;
  locate(first, b_first, e_first);
  const int c_first = int(at_div_magic(e_first, args.length_mul, args.length_shr));
  const int span = min(channels, (per * k_vec) / length + 2);
  for (int s = static_cast<int>(threadIdx.x); s < span; s += k_threads) {
    const int c = c_first + s < channels ? c_first + s : c_first + s - channels;
#pragma unroll
    for (int k = 0; k < k_width; ++k) {
      filters[s][k] = at_to_float(args.weight[c * k_width + k]);
    }
    filters[s][k_width] = AT_HAS_BIAS ? at_to_float(args.bias[c]) : 0.0f;
  }
  __syncthreads();
  auto load_filter = [&](int c, float(&w)[k_width], float& bias) {
    const int s = c >= c_first ? c - c_first : c + channels - c_first;
#pragma unroll
    for (int k = 0; k < k_width; ++k) {
      w[k] = filters[s][k];
    }
    bias = filters[s][k_width];
  };
#pragma unroll
  for (int i = 0; i < k_items; ++i) {
    float win[k_halo + k_vec];
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      win[k_halo + j] = at_to_float(v[i].elem[j]);
    }
#pragma unroll
    for (int h = 0; h < k_halo; ++h) {
      const float from_left = __shfl_up_sync(0xffffffffu, win[k_vec + h], 1);
      win[h] = lane == 0 ? at_to_float(left[i][h]) : from_left;
    }
    const int idx = first + i * k_threads + static_cast<int>(threadIdx.x);
    if (idx >= end) {
      continue;
    }
    unsigned b, e;
    locate(idx, b, e);
    const int c = int(at_div_magic(e, args.length_mul, args.length_shr));
    const int t = int(e) - c * length;
    // Elements j >= split belong to channel c + 1 (a vector crosses at most one row
    // end: L >= AT_VEC), at position j - split.
    const int split = min(length - t, k_vec);
    float w0[k_width], b0;
    load_filter(c, w0, b0);
    at_vec<x_t, k_vec> o;
    if (t >= k_halo && split == k_vec) {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        o.elem[j] = at_from_float<x_t>(conv_point(win + j, w0, b0));
      }
    } else {
      float w1[k_width], b1;
      load_filter(split < k_vec ? c + 1 : c, w1, b1);
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        const bool next = j >= split;
        const int tj = next ? j - split : t + j;
        const long long state_row =
            (static_cast<long long>(b) * channels + c + (next ? 1 : 0)) * k_halo;
        float tap[k_width], wj[k_width];
#pragma unroll
        for (int k = 0; k < k_width; ++k) {
          // Input position tj - k_halo + k of the element's own row: before 0 it is
          // the initial state (or zero), not the previous row's tail in the window.
          const int q = tj - k_halo + k;
          const bool init = q < 0 && args.initial_states != nullptr;
          tap[k] = q >= 0
                       ? win[j + k]
                       : at_to_float(at_load_or_zero(
                             init ? args.initial_states + state_row + k_halo + q : args.x, init));
          wj[k] = next ? w1[k] : w0[k];
        }
        o.elem[j] = at_from_float<x_t>(conv_point(tap, wj, next ? b1 : b0));
      }
    }
    o.store(args.out + b * args.out_batch_stride + e);
    if (args.final_states != nullptr) {
      // The last k_halo inputs of each row this vector ends.
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        const bool next = j >= split;
        const int tj = next ? j - split : t + j;
        if (tj >= length - k_halo) {
          args.final_states[(static_cast<long long>(b) * args.channels + c + (next ? 1 : 0)) *
                                k_halo +
                            tj - (length - k_halo)] = v[i].elem[j];
        }
      }
    }
  }
}
#endif

extern "C" __global__ void __launch_bounds__(k_threads) causal_conv1d_fwd(const ConvArgs args) {
#if AT_RAGGED
  if (args.vector_mode == 3) {
    conv_flat(args);
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
  // Vector loads (and, without AT_RAGGED, stores); ragged rows always load vectors.
  const bool vector_ok = k_ragged || args.vector_mode != 0;
  const bool vector_store = vector_ok;

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
  // The row's shift (see "Ragged rows"): this tile covers [base, base + k_tile).
  // Ragged rows follow out's shift, so that every store is a vector; x's aligned
  // vectors then start `lag` positions before out's (see "Ragged rows").
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
  __shared__ __align__(16) x_t tile[k_cpb][k_row_slots];
  x_t* srow = tile[row_in_block];
  // The tile holds x from base_x = base - lag on (aligned for x), one vector more
  // when lag > 0; the output at base + off reads it lag slots further.
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
#pragma unroll
  for (int i = 0; i < k_items; ++i) {
    const int off = (i * k_row_threads + t) * k_vec;
    const int p = base + off;
    if (p >= args.length) {
      break;
    }
    float win[k_halo + k_vec];
#pragma unroll
    for (int j = 0; j < k_halo + k_vec; ++j) {
      win[j] = at_to_float(srow[k_pad - k_halo + lag + off + j]);
    }
    emit(out_row, p, args.length, vector_store, win, w, bias);
  }
  ragged_tail();
#else
  if (!active) {
    return; // whole warps: k_row_threads is a multiple of 32
  }
  const int lane = threadIdx.x % 32;
  // All loads first so that k_items vectors per thread are in flight at once, with
  // lane 0's halo: the tail of the previous warp's vector (a cache hit).
  // With lag > 0 (ragged rows, see the smem path) a lane's inputs are the end of its
  // x vector and the start of the next lane's; lane 31 loads that one itself.
  at_vec<x_t, k_vec> v[k_items];
  [[maybe_unused]] at_vec<x_t, k_vec> next[k_items];
  x_t left[k_items][k_halo];
#pragma unroll
  for (int i = 0; i < k_items; ++i) {
    const int p = base + (i * k_row_threads + t) * k_vec;
#pragma unroll
    for (int h = 0; h < k_halo; ++h) {
      const int q = p - k_halo + h;
      left[i][h] = input_at(q, lane == 0);
    }
    if (vector_ok) {
      // (the lane below reads this vector's first lag inputs when they are in the row)
      if (p - lag < args.length) {
        load_vector(v[i], p - lag);
      }
      if (k_ragged && lag != 0 && lane == 31 && p < args.length) {
        load_vector(next[i], p - lag + k_vec);
      }
    } else {
#pragma unroll
      for (int j = 0; j < k_vec; ++j) {
        v[i].elem[j] = p + j < args.length ? x_row[p + j] : at_from_float<x_t>(0.0f);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < k_items; ++i) {
    const int p = base + (i * k_row_threads + t) * k_vec;
    if constexpr (k_ragged) {
      if (lag != 0) { // the same for the warp's row
        at_vec<x_t, k_vec> b = from_next_lane(v[i]);
        if (lane == 31) {
          b = next[i];
        }
        const at_vec<x_t, k_vec> a = v[i];
        realign(v[i], a, b, lag);
      }
    }
    float win[k_halo + k_vec];
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      win[k_halo + j] = at_to_float(v[i].elem[j]);
    }
    // The halo is the tail of the previous lane's vector; lane 0's was loaded above.
#pragma unroll
    for (int h = 0; h < k_halo; ++h) {
      const float from_left = __shfl_up_sync(0xffffffffu, win[k_vec + h], 1);
      win[h] = lane == 0 ? at_to_float(left[i][h]) : from_left;
    }
    if (p < args.length) {
      emit(out_row, p, args.length, vector_store, win, w, bias);
    }
  }
  ragged_tail();
#endif
}
