#include "causal_conv1d.hpp"

#include "runtime/base/strings.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace autotune {
namespace {

using Dims = CausalConv1dShape;

Dims dims(const Problem& p) {
  return CausalConv1dShape::of(p);
}

struct Params {
  int threads, vec, items, cpb;
  bool smem;
  bool span; // load=span: the staged path (smem) with blocks' rows as one run (kernel.cuh)
};

Params params(const Config& c) {
  Params p{};
  bool have[5] = {};
  for (const auto& [k, v] : c) {
    if (k == "threads") {
      p.threads = int(parse_int(v, "threads")), have[0] = true;
    } else if (k == "vec") {
      p.vec = int(parse_int(v, "vec")), have[1] = true;
    } else if (k == "items") {
      p.items = int(parse_int(v, "items")), have[2] = true;
    } else if (k == "cpb") {
      p.cpb = int(parse_int(v, "cpb")), have[3] = true;
    } else if (k == "load") {
      if (v != "direct" && v != "smem" && v != "span") {
        throw Error(ErrorKind::config,
                    "causal_conv1d: parameter load='" + v + "' is not one of direct, smem, span");
      }
      p.smem = v != "direct";
      p.span = v == "span";
      have[4] = true;
    } else {
      throw Error(ErrorKind::config, "causal_conv1d: unknown parameter '" + k + "'");
    }
  }
  for (bool h : have) {
    if (!h) {
      throw Error(ErrorKind::config, "causal_conv1d: configuration '" + format_fields(c) +
                                         "' lacks one of threads, vec, items, cpb, load");
    }
  }
  return p;
}

long long tile_length(const Params& p) {
  return (long long)(p.threads / p.cpb) * p.vec * p.items;
}

// Largest static shared memory a kernel may declare without opting in.
constexpr long long k_static_smem_limit = 48 * 1024;
constexpr long long k_max_grid_y = 65535;

// Whether L leaves a partial vector at the end of each row: the kernel is then
// built with AT_RAGGED (its "Ragged rows"), aligned shapes without it.
bool ragged(const Dims& d, long long vec) {
  return d.L % vec != 0;
}

// Why load=span does not fit a problem (empty: it does). Its blocks' rows form one run
// only as one tile per row, and every block's run starts on a vector only when cpb * L
// is a multiple of it (kernel.cuh "Spans"; the call's strides and pointers are checked
// per call, conv_kernel_args).
std::string span_misfit(const Params& p, const Dims& d) {
  if (d.channel_last) {
    return "load=span is for channel-first x";
  }
  if ((long long)(p.threads / p.cpb) * p.vec * p.items < d.L) {
    return "load=span needs one tile per row (threads/cpb * vec * items >= L)";
  }
  if (d.L < p.vec) {
    return "load=span needs rows of at least one vector (L >= vec)";
  }
  if (p.cpb * d.L % p.vec != 0) {
    return "load=span needs cpb * L to be a multiple of vec (every block's run aligned)";
  }
  return {};
}

// config with p's values.
Config with_params(const Config& config, const Params& p) {
  Config c = with_values(
      config, {{"threads", p.threads}, {"vec", p.vec}, {"items", p.items}, {"cpb", p.cpb}});
  for (auto& [k, v] : c) {
    if (k == "load") {
      v = p.span ? "span" : p.smem ? "smem" : "direct";
    }
  }
  return c;
}

// Thread slots of one wave on the H100 (132 SMs x 2048): a grid under it leaves SMs
// idle however its threads load (bench/notes/causal_conv1d-long-rows.md).
constexpr long long k_wave_threads = 132LL * 2048;
constexpr long long k_max_block = 1024;

// One tile per row (up to k_max_block threads a row) with p's vector and load path, the
// block at least `block` threads: the most vectors a thread (4, 2, then 1) whose grid
// still fills a wave, each row getting the fewest threads (a power of two, at least
// min_row_threads) whose tile covers it; a grid under a wave even then loads directly.
Params one_tile_per_row(Params p, const Dims& d, long long min_row_threads, long long block) {
  const long long rows = d.B * d.C;
  for (int items : {4, 2, 1}) {
    long long row_threads = min_row_threads;
    while (row_threads * p.vec * items < d.L && row_threads < k_max_block) {
      row_threads *= 2;
    }
    const long long tile = row_threads * p.vec * items;
    p.items = items;
    p.threads = int(std::max(block, row_threads));
    p.cpb = int(p.threads / row_threads);
    if (rows * ((d.L + tile - 1) / tile) * row_threads >= k_wave_threads) {
      return p;
    }
  }
  // Still under a wave: every thread loads one vector, and the staged path's shared-
  // memory round trip only adds latency (B=2, C=2048, L=512: 8.1 us direct, 8.3 staged).
  if (p.threads / p.cpb % 32 == 0) {
    p.smem = false;
  }
  return p;
}

// Channel-last launch (channel_last.cuh): `lanes` threads along the channel vectors (a
// power of two covering C / vec, at most the block), the block's other threads on
// `groups` position chunks of `chunk` positions each. The chunk is the fewest steps of
// `items` positions that keep the grid within about two waves of thread slots (longer
// chunks re-read fewer halo inputs, W-1 a chunk), but at least k_min_ring_steps steps
// while the grid keeps half a wave: a thread's cp.async ring overlaps its loads with its
// compute only from one step to the next. H100, exhaustive, % of copy, two waves alone
// -> with the minimum: B=4,C=2560,L=2047 82.9 -> 92.7; B=8,C=1536,L=1001 79.8 -> 93.4;
// B=16,C=2048,L=333 81.8 -> 93.3; B=2,C=4096,L=3000 80.0 -> 86.1; B=8,C=4096,L=2048
// 92.3 -> 91.4 (bench/notes/causal_conv1d-channel-last.md).
constexpr long long k_min_ring_steps = 4;
struct ChannelLastGrid {
  long long lanes, groups, chunk, channel_blocks, position_blocks;
};

ChannelLastGrid channel_last_grid(const Params& p, const Dims& d) {
  ChannelLastGrid g{};
  const long long vectors = (d.C + p.vec - 1) / p.vec;
  g.lanes = 1;
  while (g.lanes < vectors && g.lanes < p.threads) {
    g.lanes *= 2;
  }
  g.groups = p.threads / g.lanes;
  g.channel_blocks = (vectors + g.lanes - 1) / g.lanes;
  const long long threads_at_one_step =
      d.B * g.channel_blocks * g.lanes * ((d.L + p.items - 1) / p.items);
  long long steps = std::max<long long>(1, threads_at_one_step / (2 * k_wave_threads));
  if (steps < k_min_ring_steps) {
    steps = std::max(
        steps, std::min<long long>(k_min_ring_steps, threads_at_one_step / (k_wave_threads / 2)));
  }
  g.chunk = p.items * steps;
  const long long fewest = (d.L + g.groups * k_max_grid_y - 1) / (g.groups * k_max_grid_y);
  if (g.chunk < fewest) {
    g.chunk = (fewest + p.items - 1) / p.items * p.items;
  }
  g.chunk = std::min<long long>(g.chunk, std::max<long long>(d.L, 1));
  g.position_blocks = (d.L + g.groups * g.chunk - 1) / (g.groups * g.chunk);
  return g;
}

} // namespace

CausalConv1dShape CausalConv1dShape::of(const Problem& p) {
  CausalConv1dShape d;
  d.B = p.get_int("B");
  d.C = p.get_int("C");
  d.L = p.get_int("L");
  d.W = p.get_int("W");
  d.x = parse_dtype(p.get("x"), "x");
  d.w = parse_dtype(p.get("w"), "w");
  d.bias = p.get_int("bias") != 0;
  d.silu = p.get_int("silu") != 0;
  d.init_states = p.get_int("init_states") != 0;
  d.final_states = p.get_int("final_states") != 0;
  d.channel_last = p.get("layout") == "blc";
  d.seq_idx = p.optional_flag("seq_idx");
  return d;
}

std::vector<std::string> CausalConv1dOp::default_shapes() const {
  // bench/shapes.toml [causal_conv1d]: Mamba block sizes, bf16, bias and SiLU on.
  return {"B=8,C=4096,L=2048,W=4", "B=4,C=5120,L=4096,W=4", "B=16,C=2048,L=1024,W=4",
          "B=1,C=4096,L=16384,W=4", "B=8,C=4096,L=2048,W=2"};
}

Problem CausalConv1dOp::make_problem(const Fields& shape) const {
  // x and w are the canonical keys' names for dtype and wdtype (accepted, not listed).
  const ShapeReader r(shape, "causal_conv1d",
                      {"B", "C", "L", "W", "dtype", "x", "w", "wdtype", "bias", "silu",
                       "init_states", "final_states", "layout", "seq_idx"},
                      {"B", "C", "L", "W", "dtype", "wdtype", "bias", "silu", "init_states",
                       "final_states", "layout", "seq_idx"});
  long long B = r.ranged("B", nullptr, 1 << 20);
  long long C = r.ranged("C", nullptr, 1 << 20);
  long long L = r.ranged("L", nullptr, (1ll << 31) - 1);
  long long W = parse_int(r.get("W", "4"), "causal_conv1d shape field W");
  if (W < 2 || W > 4) {
    r.fail("width W=" + std::to_string(W) + " is not supported (W must be 2, 3 or 4)");
  }
  if (ShapeReader::product_reaches({B, C, L}, 1ll << 40)) {
    r.fail("B*C*L is too large");
  }
  std::string xs = r.has("x") ? r.get("x", nullptr) : r.get("dtype", "bf16");
  DType x = parse_dtype(xs, "causal_conv1d shape field dtype");
  std::string ws = r.has("w") ? r.get("w", nullptr) : r.get("wdtype", to_string(x));
  DType w = parse_dtype(ws, "causal_conv1d shape field wdtype");
  std::string layout = r.get("layout", "bcl");
  if (layout != "bcl" && layout != "blc") {
    r.fail("layout '" + layout + "' is not one of bcl (channel-first), blc (channel-last)");
  }
  const bool seq_idx = r.flag("seq_idx", "0") == "1";
  if (seq_idx && layout != "blc") {
    r.fail("seq_idx (packed sequences) needs channel-last x (layout=blc), as in causal-conv1d");
  }
  if (seq_idx && (r.flag("init_states", "0") == "1" || r.flag("final_states", "0") == "1")) {
    r.fail("seq_idx (packed sequences) takes no initial or final states, as in causal-conv1d");
  }
  Problem p;
  p.op = name();
  p.fields = {{"B", std::to_string(B)},
              {"C", std::to_string(C)},
              {"L", std::to_string(L)},
              {"W", std::to_string(W)},
              {"x", to_string(x)},
              {"w", to_string(w)},
              {"bias", r.flag("bias", "1")},
              {"silu", r.flag("silu", "1")},
              {"init_states", r.flag("init_states", "0")},
              {"final_states", r.flag("final_states", "0")},
              {"layout", layout}};
  if (seq_idx) { // only when on: keys without it are what they were before it existed
    Fields f = p.fields.text();
    f.emplace_back("seq_idx", "1");
    p.fields = std::move(f);
  }
  return p;
}

Result<bool> CausalConv1dOp::check(const Config& config, const Problem& problem,
                                   const std::string& arch) const {
  Params p = params(config);
  Dims d = dims(problem);
  (void)arch; // every variant runs on sm_80 and newer
  if (auto threads = check_block_threads(p.threads); !threads) {
    return threads;
  }
  if (p.span) {
    if (std::string why = span_misfit(p, d); !why.empty()) {
      return fail(why);
    }
  }
  if (d.channel_last) {
    if (p.cpb != 1 || p.smem) {
      return fail("channel-last x has one kernel form: cpb=1, load=direct");
    }
    if ((p.vec & (p.vec - 1)) != 0 || p.vec * (long long)dtype_size(d.x) < 8 || p.vec < d.W - 1) {
      return fail("channel-last vectors must be a power of two of at least 8 bytes and W-1 "
                  "elements (kernel.cuh's shared checks)");
    }
    // channel_last.cuh's ring: k_stages (3) steps of items vectors per thread
    const long long ring = 3LL * p.items * p.threads * p.vec * (long long)dtype_size(d.x);
    if (ring > k_static_smem_limit) {
      return fail("shared-memory ring of " + std::to_string(ring) + " bytes exceeds 48 KiB");
    }
    const ChannelLastGrid g = channel_last_grid(p, d);
    if (d.B * g.channel_blocks > 0x7fffffffll || g.position_blocks > k_max_grid_y) {
      return fail("grid too large");
    }
    // The kernel counts positions in 32-bit ints, up to a chunk start past L plus a step.
    if (g.position_blocks * g.groups * g.chunk + p.items > 0x7fffffffll) {
      return fail("positions past 2^31 - 1 (L too long for 32-bit positions)");
    }
    return true;
  }
  if (p.threads % p.cpb != 0) {
    return fail("cpb must divide threads");
  }
  int row_threads = p.threads / p.cpb;
  if (!p.smem && row_threads % 32 != 0) {
    return fail("the direct load path needs whole warps per channel (threads/cpb % 32 == 0)");
  }
  if (p.smem && row_threads < d.W - 1) {
    return fail("too few threads per channel to load the halo");
  }
  if (p.vec < d.W - 1 || (p.vec & (p.vec - 1)) != 0) {
    return fail("vec must be a power of two covering the W-1 halo");
  }
  long long vec_bytes = p.vec * (long long)dtype_size(d.x);
  if (vec_bytes < 8) {
    return fail("vector accesses under 8 bytes are not worth a variant");
  }
  long long tile = tile_length(p);
  if (p.smem) {
    long long pad = std::max<long long>(16 / (long long)dtype_size(d.x), d.W - 1);
    // (ragged rows and spans stage one vector more: kernel.cuh k_row_slots)
    const long long row = pad + tile + (ragged(d, p.vec) || p.span ? p.vec : 0);
    const long long smem = p.cpb * row * (long long)dtype_size(d.x);
    if (smem > k_static_smem_limit) {
      return fail("shared-memory tile of " + std::to_string(smem) + " bytes exceeds 48 KiB");
    }
  }
  if ((d.L + tile - 1) / tile > k_max_grid_y) {
    return fail("L needs more than 65535 tiles for this tile length");
  }
  if (d.B * ((d.C + p.cpb - 1) / p.cpb) > 0x7fffffffll) {
    return fail("grid too large");
  }
  return true;
}

Result<bool> CausalConv1dOp::worth_measuring(const Config& config, const Problem& problem) const {
  Params p = params(config);
  Dims d = dims(problem);
  if (d.channel_last) {
    if (p.items > 1 && channel_last_grid(p, d).chunk < p.items) {
      return fail("a row of L=" + std::to_string(d.L) + " positions is shorter than a step of " +
                  std::to_string(p.items) + " (fewer items per step do the same work)");
    }
    return true;
  }
  if (p.span && !ragged(d, p.vec)) {
    return fail("rows of L=" + std::to_string(d.L) + " are whole vectors: the row paths " +
                "already move them in aligned vectors (load=span is for ragged rows)");
  }
  long long tile = tile_length(p);
  if (tile / 2 >= d.L && p.items > 1) {
    return fail("tile of " + std::to_string(tile) + " positions leaves over half of each block " +
                "idle at L=" + std::to_string(d.L) + " (fewer items per thread do better)");
  }
  return true;
}

std::vector<InertRule> CausalConv1dOp::inert_params(const Problem& problem) const {
  if (dims(problem).channel_last) {
    return {{"", {}, {{"cpb", "1"}, {"load", "direct"}}}};
  }
  return {};
}

Config CausalConv1dOp::adapt_long_rows(const Config& config, const Problem& problem) const {
  // Rows at least half a tile long. The H100's exhaustive sweeps of such shapes
  // (bench/notes/causal_conv1d-long-rows.md: L of 512-8192, 3-130 MB) share three
  // traits, which the grid's winners (all at L = their tile) do not carry to other
  // lengths:
  // - one tile per row: row threads x vec x items >= L, the fewest threads doing it;
  // - the widest aligned vector: 16 bytes where L is a multiple of it, else the
  //   widest that divides L; an odd L takes 16 bytes on the direct path (the staged
  //   path's ragged rows ran 15% slower at L=2047, every top-8 variant was direct);
  // - 4 vectors a thread, fewer when the grid would then hold under one wave of
  //   thread slots (132 SMs x 2048 = 270336 on the H100): B=2, C=2048, L=512 ran best
  //   at 1 vector a thread (8.1 us, against 10.5 for 4), B=4, C=2560, L=2047 at 4.
  // A configuration that already has all three keeps its own vector and items (the
  // grid's L=2048 winners load 8 bytes per vector at 98% of copy bandwidth). Otherwise
  // the block keeps the tuned size (more threads when a row needs them, packing rows
  // otherwise) and the tuned load path unless the rows are odd.
  Dims d = dims(problem);
  const Params src = params(config);
  const long long rows = d.B * d.C;
  const long long src_row_threads = src.threads / src.cpb;
  if (tile_length(src) >= d.L && !(src.smem && ragged(d, src.vec)) &&
      rows * src_row_threads >= k_wave_threads) {
    return config;
  }
  const long long esize = (long long)dtype_size(d.x);
  Params p = src;
  p.vec = int(16 / esize);
  bool direct = !src.smem;
  if (ragged(d, p.vec)) {
    if (p.vec > 4 && !ragged(d, 4) && 4 * esize >= 8) {
      p.vec = 4;
    } else {
      direct = true;
    }
  }
  p.smem = !direct;
  p = one_tile_per_row(p, d, 32, src.threads);
  const Config c = with_params(config, p);
  return fits(c, problem) ? c : config; // else the tuned configuration
}

bool CausalConv1dOp::fits(const Config& config, const Problem& problem) const {
  try {
    return check(config, problem, "sm_80").ok();
  } catch (const Error&) {
    return false; // a configuration this problem refuses outright
  }
}

Config CausalConv1dOp::adapt(const Config& config, const Problem& problem) const {
  // The rules for the row paths below choose the tile; a staged tile of ragged rows then
  // runs as spans where they fit (kernel.cuh "Spans"): H100, B=64, L=333, the staged
  // winners against the same tiles as spans, bench/notes/causal_conv1d-unaligned.md.
  Params src = params(config);
  const Dims d = dims(problem);
  if (src.span && ragged(d, src.vec) && tile_length(src) < 2 * d.L && fits(config, problem)) {
    return config; // spans whose one tile a row fits this row too
  }
  Config base = config;
  if (src.span) {
    src.span = false;
    base = with_params(config, src);
  }
  const Config rows = adapt_rows(base, problem);
  Params p = params(rows);
  if (!p.smem || d.channel_last || !ragged(d, p.vec)) {
    return rows;
  }
  // The staged tile as spans; where cpb rows do not end on a vector (cpb * L), with 2, 4
  // or 8 times the rows and threads (the same threads a row).
  p.span = true;
  for (int m = 1; m <= 8 && p.threads * m <= k_max_block; m *= 2) {
    Params q = p;
    q.threads *= m;
    q.cpb *= m;
    const Config spans = with_params(rows, q);
    if (fits(spans, problem)) {
      return spans;
    }
  }
  return rows; // the staged rows
}

Config CausalConv1dOp::adapt_rows(const Config& config, const Problem& problem) const {
  // A short sequence (a row filling at most half of one tile of threads / cpb x
  // vec x items positions, the tiles worth_measuring() rejects) leaves the lanes
  // past L idle, and the op is bandwidth-bound: what a block is worth is the bytes
  // it keeps in flight for the row. The rule keeps the block size and load path
  // (what the tuning chose) and picks the channels per block (cpb), the vector
  // width (at most 16 bytes) and the vectors per thread (items) that maximise
  //
  //   useful(c) = L / (tiles(c) * tile(c)) * min(vec * items * esize, cap)
  //
  // among the choices with the fewest tiles per row (one, for a row this short:
  // every further tile is another block that re-reads the W-1 halo, and splitting
  // L=333 into 3 tiles of 128 ran 1.7x slower than one tile of 512 on the H100),
  // the fraction of lanes with positions of the row times the bytes each thread
  // loads at once, capped at cap = max(the tuned configuration's, 64 bytes). Packing
  // rows (cpb up) shortens the tile without shrinking the bytes per thread, e.g.
  // B=64,L=333 from threads=128,vec=4,items=4,cpb=1 (tile 2048, 16% of the lanes
  // busy) to vec=8,cpb=8 (16 threads a row, one tile of 512: 65% busy, 64 bytes per
  // thread), the shape of that shape's own tuned winner (threads=64,vec=8,items=4,
  // cpb=4; bench/results/h100-unseen.md). A row keeps at least 64 contiguous bytes
  // per access (two sectors), the direct path whole warps per row; the source stays
  // unless another choice is worth 10% more. Ties go to more busy lanes, then wider
  // vectors, fewer channels per block and more items. Ragged short rows take the staged
  // path: each row is a few partial warps there, and the direct path pays for whole
  // warps per row (and for the registers of realigning rows, kernel.cuh). H100, every
  // block of 128 threads of 8-element vectors, fastest staged / fastest direct (us):
  // B=64,C=1536,L=333,W=2 61.9 / 73.2; B=64,C=3072,L=333,W=2 111.8 / 138.2;
  // B=16,C=2048,L=333,W=4 27.5 / 31.0; the tuned winners of the first two are staged.
  Dims d = dims(problem);
  Params src = params(config);
  if (d.channel_last) {
    // Its one kernel form; threads and vector carry over (channel_last_grid fits the
    // chunk to the problem), and the step too unless a row is shorter than it: fewer
    // items per step then do the same work (worth_measuring), halved until one fits.
    src.cpb = 1;
    src.smem = false;
    while (src.items > 1 && channel_last_grid(src, d).chunk < src.items) {
      src.items /= 2;
    }
    return with_params(config, src);
  }
  if (tile_length(src) < 2 * d.L) {
    return adapt_long_rows(config, problem);
  }
  src.smem = src.smem || ragged(d, src.vec);
  const Config from = with_params(config, src);
  const long long esize = (long long)dtype_size(d.x);
  constexpr long long k_max_vector_bytes = 16;
  constexpr long long k_min_cap_bytes = 64;
  const long long cap = std::max<long long>(src.vec * src.items * esize, k_min_cap_bytes);
  auto tiles_of = [&](const Params& p) {
    const long long tile = tile_length(p);
    return (d.L + tile - 1) / tile;
  };
  auto useful = [&](const Params& p) {
    return double(d.L) / double(tiles_of(p) * tile_length(p)) *
           double(std::min<long long>(p.vec * p.items * esize, cap));
  };
  constexpr long long k_min_row_bytes = 64;
  Params best = src;
  double best_useful = 0;
  long long best_tiles = 0;
  double best_busy = 0;
  // Vector widths of the space's [params] (4 and 8 elements), widest first.
  for (int vec : {8, 4}) {
    if (vec * esize > k_max_vector_bytes) {
      continue;
    }
    for (int cpb = 1; cpb <= src.threads; cpb *= 2) {
      const int row_threads = src.threads / cpb;
      if (src.threads % cpb != 0 || (!src.smem && row_threads % 32 != 0) ||
          row_threads * vec * esize < k_min_row_bytes) {
        break;
      }
      for (int items : {4, 2, 1}) { // the space's [params] values
        Params p = src;
        p.vec = vec;
        p.cpb = cpb;
        p.items = items;
        const double u = useful(p);
        const long long tiles = tiles_of(p);
        const double busy = double(d.L) / double(tiles * tile_length(p));
        const bool better =
            best_useful == 0 || tiles < best_tiles ||
            (tiles == best_tiles &&
             (u > best_useful * (1 + 1e-9) || (u > best_useful * (1 - 1e-9) && busy > best_busy)));
        if (better && check(with_params(config, p), problem, "sm_80")) {
          best = p;
          best_useful = u;
          best_tiles = tiles;
          best_busy = busy;
        }
      }
    }
  }
  // The source stays on a tie only where the tuner would measure it: a tile twice the
  // row with several items a thread is one worth_measuring leaves out (an fp32 row under
  // a bf16 point's 8-element vector, 32 bytes, ties on `useful` with a 16-byte vector
  // over a tile of the row).
  const bool keep = best_tiles >= tiles_of(src) && best_useful <= 1.1 * useful(src) &&
                    check(from, problem, "sm_80") && worth_measuring(from, problem).ok();
  const Params chosen = keep ? src : best;
  if (d.B * d.C * (chosen.threads / chosen.cpb) < k_wave_threads) {
    // Under one wave of thread slots, fewer vectors a thread and more threads a row (as
    // for long rows): B=2, C=2048, L=512 from 16 threads a row of 4 vectors (10.4 us)
    // to 64 of 1 (8.3).
    const Params filled = one_tile_per_row(chosen, d, chosen.smem ? 4 : 32, chosen.threads);
    const Config c = with_params(config, filled);
    if (fits(c, problem)) {
      return c;
    }
  }
  return keep ? from : with_params(config, best);
}

std::vector<std::string> CausalConv1dOp::defines(const Config& config,
                                                 const Problem& problem) const {
  Params p = params(config);
  Dims d = dims(problem);
  std::vector<std::string> out = {"-DAT_THREADS=" + std::to_string(p.threads),
                                  "-DAT_VEC=" + std::to_string(p.vec),
                                  "-DAT_ITEMS=" + std::to_string(p.items),
                                  "-DAT_CPB=" + std::to_string(p.cpb),
                                  std::string("-DAT_SMEM=") + (p.smem ? "1" : "0"),
                                  "-DAT_WIDTH=" + std::to_string(d.W),
                                  std::string("-DAT_HAS_BIAS=") + (d.bias ? "1" : "0"),
                                  std::string("-DAT_SILU=") + (d.silu ? "1" : "0"),
                                  std::string("-DAT_X_T=") + template_type(d.x),
                                  std::string("-DAT_W_T=") + template_type(d.w)};
  if (d.seq_idx) {
    out.push_back("-DAT_SEQ_IDX=1");
  }
  if (d.channel_last) {
    out.push_back("-DAT_CHANNEL_LAST=1");
    out.push_back("-DAT_CL_LANES=" + std::to_string(channel_last_grid(p, d).lanes));
  } else if (ragged(d, p.vec)) {
    out.push_back("-DAT_RAGGED=1");
  }
  if (p.span) {
    out.push_back("-DAT_SPAN=1");
  }
  return out;
}

LaunchGeometry CausalConv1dOp::geometry(const Config& config, const Problem& problem) const {
  Params p = params(config);
  Dims d = dims(problem);
  LaunchGeometry g;
  g.block[0] = unsigned(p.threads);
  if (d.channel_last) {
    const ChannelLastGrid cl = channel_last_grid(p, d);
    g.grid[0] = unsigned(d.B * cl.channel_blocks);
    g.grid[1] = unsigned(cl.position_blocks);
    return g;
  }
  long long tile = tile_length(p);
  g.grid[0] = unsigned(d.B * ((d.C + p.cpb - 1) / p.cpb));
  g.grid[1] = unsigned((d.L + tile - 1) / tile);
  return g;
}

std::vector<TensorSpec> CausalConv1dOp::tensors(const Problem& problem) const {
  Dims d = dims(problem);
  std::vector<TensorSpec> t;
  size_t n = size_t(d.B * d.C * d.L);
  t.push_back({"x", d.x, n, false, -1.0f, 1.0f});
  t.push_back({"weight", d.w, size_t(d.C * d.W), false, -0.5f, 0.5f});
  if (d.bias) {
    t.push_back({"bias", d.w, size_t(d.C), false, -0.5f, 0.5f});
  }
  size_t states = size_t(d.B * d.C * (d.W - 1));
  if (d.init_states) {
    t.push_back({"initial_states", d.x, states, false, -1.0f, 1.0f});
  }
  t.push_back({"out", d.x, n, true});
  if (d.final_states) {
    t.push_back({"final_states", d.x, states, true});
  }
  if (d.seq_idx) {
    // int32 ids (TensorSpec::values), per row four packed sequences, one of them 1-2
    // positions long (shorter than the filter), their boundaries moving with b; odd rows
    // end in padding (id -1, whose outputs are 0) over their last eighth.
    TensorSpec seq{"seq_idx", DType::f32, size_t(d.B * d.L), false};
    seq.values.reserve(seq.elements);
    for (long long b = 0; b < d.B; ++b) {
      const long long p1 = std::min(d.L, d.L / 5 + b % 3 + 1);
      const long long p2 = std::min(d.L, p1 + 1 + b % 2);
      const long long p3 = std::max(p2, 3 * d.L / 4);
      const long long pad = b % 2 == 1 ? std::max(p3, d.L - d.L / 8) : d.L;
      for (long long t2 = 0; t2 < d.L; ++t2) {
        seq.values.push_back(t2 < p1 ? 0 : t2 < p2 ? 1 : t2 < p3 ? 2 : t2 < pad ? 3 : -1);
      }
    }
    t.push_back(std::move(seq));
  }
  return t;
}

CausalConv1dKernelArgs conv_kernel_args(const CausalConv1dPlan& plan, const CausalConv1dCall& call);

namespace {

// Whether a [B, C, L] tensor is channel-last: its channel dimension is the contiguous
// one and its length dimension is not (a tensor with one channel or one position reads
// the same either way, and is channel-first).
bool is_channel_last(const autotune_tensor& t) {
  return t.ndim == 3 && t.shape[1] > 1 && t.shape[2] > 1 && t.strides[1] == 1 && t.strides[2] != 1;
}

// args_desc()'s field 10, "layout": x's layout, which out must share.
constexpr size_t k_layout_field = 10;
void derive_layout(const void* args, CallValues& values) {
  const auto& a = *static_cast<const autotune_causal_conv1d_args*>(args);
  const bool x_last = is_channel_last(a.x);
  if (a.out.data && is_channel_last(a.out) != x_last) { // (out's shape is x's: bound)
    throw Error(ErrorKind::usage, std::string("causal_conv1d: out must have x's layout: x is ") +
                                      (x_last ? "channel-last (x.stride(1) == 1), out is not"
                                              : "channel-first (x.stride(2) == 1), out is not"));
  }
  values[k_layout_field] = x_last ? 1 : 0;
}

} // namespace

const ArgsDesc& CausalConv1dOp::args_desc() const {
  using A = autotune_causal_conv1d_args;
  enum : int8_t { B, C, L, W, x, w, bias, silu, init, fin, layout, seq };
  static const ArgsDesc desc{
      "causal_conv1d",
      sizeof(A),
      {{"B", FieldKind::size},
       {"C", FieldKind::size},
       {"L", FieldKind::size},
       {"W", FieldKind::size, -1, {}, 4.0},
       {"dtype", FieldKind::dtype},
       {"wdtype", FieldKind::dtype},
       {"bias", FieldKind::flag},
       {"silu", FieldKind::flag},
       {"init_states", FieldKind::flag},
       {"final_states", FieldKind::flag},
       {"layout", FieldKind::choice, 0, {"bcl", "blc"}},
       {"seq_idx", FieldKind::flag}},
      {{"x",
        offsetof(A, x),
        {{B}, {C}, {L}},
        x,
        k_any_float,
        -1,
        false,
        StrideRule::rows_or_channels},
       {"weight",
        offsetof(A, weight),
        {{C}, {W}},
        w,
        k_any_float,
        -1,
        false,
        StrideRule::contiguous},
       {"bias", offsetof(A, bias), {{C}}, w, k_any_float, bias, false, StrideRule::contiguous},
       {"initial_states",
        offsetof(A, initial_states),
        {{B}, {C}, {W, -1}},
        x,
        k_any_float,
        init,
        false,
        StrideRule::contiguous},
       {"out",
        offsetof(A, out),
        {{B}, {C}, {L}},
        x,
        k_any_float,
        -1,
        true,
        StrideRule::rows_or_channels},
       {"final_states",
        offsetof(A, final_states),
        {{B}, {C}, {W, -1}},
        x,
        k_any_float,
        fin,
        true,
        StrideRule::contiguous},
       // (after silu in the struct: appended later)
       {"seq_idx",
        offsetof(A, seq_idx),
        {{B}, {L}},
        -1,
        0,
        seq,
        false,
        StrideRule::rows,
        1,
        {},
        nullptr,
        AUTOTUNE_INT32}},
      {{"silu", offsetof(A, silu), ScalarKind::i32, silu}},
      derive_layout};
  static_assert(layout == k_layout_field, "derive_layout's field");
  return desc;
}

size_t CausalConv1dPlan::pack(const void* args, const BoundCall& call, void* out) const {
  (void)call;
  const auto& a = *static_cast<const autotune_causal_conv1d_args*>(args);
  CausalConv1dCall c;
  c.x = device_ptr(a.x);
  c.weight = device_ptr(a.weight);
  c.bias = device_ptr(a.bias);
  c.out = device_ptr(a.out);
  c.initial_states = device_ptr(a.initial_states);
  c.final_states = device_ptr(a.final_states);
  c.x_batch_stride = a.x.strides[0];
  c.x_channel_stride = a.x.strides[1];
  c.out_batch_stride = a.out.strides[0];
  c.out_channel_stride = a.out.strides[1];
  c.x_length_stride = a.x.strides[2];
  c.out_length_stride = a.out.strides[2];
  c.seq_idx = device_ptr(a.seq_idx);
  c.seq_idx_batch_stride = a.seq_idx.strides[0];
  CausalConv1dKernelArgs k = conv_kernel_args(*this, c);
  std::memcpy(out, &k, sizeof k);
  return sizeof k;
}

CausalConv1dPlan CausalConv1dOp::conv_plan(const Config& config, const Problem& problem) const {
  CausalConv1dPlan p;
  p.shape = dims(problem);
  const Params params_of = params(config);
  p.vec = params_of.vec;
  p.cpb = params_of.cpb;
  p.span = params_of.span;
  p.chunk = p.shape.channel_last ? int(channel_last_grid(params_of, p.shape).chunk) : 0;
  p.geometry = geometry(config, problem);
  return p;
}

std::unique_ptr<CallPlan> CausalConv1dOp::plan(const Config& config, const Problem& problem) const {
  return std::make_unique<CausalConv1dPlan>(conv_plan(config, problem));
}

CausalConv1dKernelArgs CausalConv1dOp::kernel_args(const CausalConv1dPlan& plan,
                                                   const CausalConv1dCall& call) const {
  return conv_kernel_args(plan, call);
}

CausalConv1dKernelArgs conv_kernel_args(const CausalConv1dPlan& plan,
                                        const CausalConv1dCall& call) {
  const Dims& d = plan.shape;
  CausalConv1dKernelArgs a{};
  a.x = call.x;
  a.weight = call.weight;
  a.bias = call.bias;
  a.out = call.out;
  a.initial_states = call.initial_states;
  a.final_states = call.final_states;
  a.batch = int(d.B);
  a.channels = int(d.C);
  a.length = int(d.L);
  a.x_batch_stride = call.x_batch_stride;
  a.x_channel_stride = call.x_channel_stride;
  a.out_batch_stride = call.out_batch_stride;
  a.out_channel_stride = call.out_channel_stride;
  if (d.channel_last) {
    a.x_length_stride = call.x_length_stride;
    a.out_length_stride = call.out_length_stride;
    a.chunk = plan.chunk;
    a.seq_idx = call.seq_idx;
    a.seq_idx_batch_stride = call.seq_idx_batch_stride;
    const VectorAccess vector(d.x, plan.vec);
    a.vector_mode = vector.aligned(call.x, {call.x_batch_stride, call.x_length_stride}) &&
                    vector.aligned(call.out, {call.out_batch_stride, call.out_length_stride});
    return a;
  }
  const VectorAccess vector(d.x, plan.vec);
  if (plan.span && call.x_channel_stride == d.L && call.out_channel_stride == d.L &&
      vector.aligned(call.x, {call.x_batch_stride}) &&
      vector.aligned(call.out, {call.out_batch_stride})) {
    // Every block's rows are one aligned run in x and out (check() made cpb * L a
    // multiple of the vector): the kernel's "Spans".
    a.vector_mode = 2;
    return a;
  }
  if (ragged(d, plan.vec)) {
    // Every row is tiled from out's first aligned address and x read realigned (the
    // kernel's "Ragged rows"): vectors whatever the strides.
    a.vector_mode = 1;
    return a;
  }
  a.vector_mode = vector.aligned(call.x, {call.x_batch_stride, call.x_channel_stride}) &&
                  vector.aligned(call.out, {call.out_batch_stride, call.out_channel_stride});
  return a;
}

void CausalConv1dOp::pack(const Config& config, const Problem& problem,
                          const std::vector<CUdeviceptr>& t, ArgPack& args) const {
  Dims d = dims(problem);
  CausalConv1dCall call;
  size_t i = 0;
  call.x = t.at(i++);
  call.weight = t.at(i++);
  call.bias = d.bias ? t.at(i++) : 0;
  call.initial_states = d.init_states ? t.at(i++) : 0;
  call.out = t.at(i++);
  call.final_states = d.final_states ? t.at(i++) : 0;
  call.seq_idx = d.seq_idx ? t.at(i++) : 0;
  call.seq_idx_batch_stride = d.L;
  if (d.channel_last) { // [B, L, C] in memory
    call.x_channel_stride = call.out_channel_stride = 1;
    call.x_length_stride = call.out_length_stride = d.C;
  } else {
    call.x_channel_stride = call.out_channel_stride = d.L;
  }
  call.x_batch_stride = call.out_batch_stride = d.C * d.L;
  args.add(kernel_args(conv_plan(config, problem), call));
}

std::string CausalConv1dOp::reference_kernel(const Problem& problem) const {
  Dims d = dims(problem);
  return reference_kernel_name("causal_conv1d_ref", d.x, d.w);
}

LaunchGeometry CausalConv1dOp::reference_geometry(const Problem& problem) const {
  Dims d = dims(problem);
  LaunchGeometry g;
  g.block[0] = 256;
  g.grid[0] = unsigned(std::min<long long>((d.B * d.C * d.L + 255) / 256, 65536));
  return g;
}

void CausalConv1dOp::pack_reference(const Problem& problem, const std::vector<CUdeviceptr>& t,
                                    const std::vector<CUdeviceptr>& ref, ArgPack& args) const {
  Dims d = dims(problem);
  size_t i = 2;
  args.add(t.at(0));
  args.add(t.at(1));
  args.add(d.bias ? t.at(i++) : CUdeviceptr(0));
  args.add(d.init_states ? t.at(i++) : CUdeviceptr(0));
  args.add(ref.at(0));
  args.add(d.final_states ? ref.at(1) : CUdeviceptr(0));
  args.add(int(d.B));
  args.add(int(d.C));
  args.add(int(d.L));
  args.add(int(d.W));
  args.add(int(d.silu));
  // x's and out's strides (batch, channel, length): the tuner's tensors are packed in
  // the problem's layout, and the reference writes its output in the same order.
  const long long channel = d.channel_last ? 1 : d.L;
  const long long length = d.channel_last ? d.C : 1;
  args.add((long long)(d.C * d.L));
  args.add(channel);
  args.add(length);
  // seq_idx is the last tensor (tensors())
  args.add(d.seq_idx ? t.back() : CUdeviceptr(0));
  args.add((long long)d.L);
}

double CausalConv1dOp::tolerance(const Problem& problem) const {
  // One rounding of the output dominates: bf16 keeps 8 significant bits
  // (relative error up to 2^-9), fp16 11; fp32 outputs see only ex2.approx.
  return output_rounding_tolerance(dims(problem).x, 1e-5);
}

double CausalConv1dOp::bytes(const Problem& problem) const {
  Dims d = dims(problem);
  // x read once, out written once; weights, bias and states are small beside them.
  double states = double(d.B * d.C * (d.W - 1)) * double(dtype_size(d.x)) *
                  double(int(d.init_states) + int(d.final_states));
  const double seq_ids = d.seq_idx ? 4.0 * double(d.B * d.L) : 0.0;
  return 2.0 * double(d.B * d.C * d.L) * double(dtype_size(d.x)) +
         double(d.C * (d.W + (d.bias ? 1 : 0))) * double(dtype_size(d.w)) + states + seq_ids;
}

} // namespace autotune
