#include "attention.hpp"

#include "runtime/base/strings.hpp"
#include "runtime/cuda/driver.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <mutex>
#include <tuple>
#include <vector>

namespace autotune {
namespace {

struct Dims {
  long long B, Hq, Hkv, Sq, Sk, D;
  bool causal, lse, bhsd;
  DType dtype;
  bool window = false, softcap = false, alibi = false;
  // bcast=1: q, k or v steps a batch, head or sequence dimension of several elements
  // with stride 0 (a tensor broadcast with expand), which tensor maps cannot.
  bool bcast = false;
  long long Dp = 0; // the head dim the portable kernel computes on (kernel.cuh)
  // varlen=1: packed sequences; Sq and Sk are then the (bucketed) longest ones and Tq,
  // Tk the (bucketed) totals of tokens. With paged=1 too (flash_attn_varlen_func's
  // block_table), the keys are pages of a KV cache, each sequence's count from
  // cu_seqlens_k; Tk is then not part of the problem (the tuner draws Sk * B / 2 keys).
  bool varlen = false;
  long long Tq = 0, Tk = 0;
  // paged=1 or kvcache=1: decoding against a KV cache (flash_attn_with_kvcache); Sk is
  // then the (bucketed) size of one sequence's cache, page its block size (paged) or 0
  // (one contiguous cache per sequence).
  bool kvcache = false;
  long long page = 0;
  // Decoding with grouped heads runs the g query heads that share a K/V head as g query
  // rows of that head (see dims()): g, or 0 when the problem runs as it is described.
  // Hq, Sq and causal then describe what the kernel runs (Hkv heads of g rows).
  long long heads_as_rows = 0;
  // With several queries per head (or a window): the described Sq, each of the g heads'
  // queries being rows of the K/V head (kernel.cuh's AT_GROUPED); 0 otherwise.
  long long grouped_sq = 0;
};

// The head dim kernel.cuh computes on: D rounded up to whole k=16 MMA steps.
long long padded_dim(long long D) {
  return (D + 15) / 16 * 16;
}

long long varlen_bucket(long long v);

// The problem as described: the shapes of the call's tensors.
Dims described_dims(const Problem& p) {
  Dims d{p.get_int("B"),
         p.get_int("Hq"),
         p.get_int("Hkv"),
         p.get_int("Sq"),
         p.get_int("Sk"),
         p.get_int("D"),
         p.get_int("causal") != 0,
         p.get_int("lse") != 0,
         p.get("layout") == "bhsd",
         parse_dtype(p.get("dtype"), "dtype")};
  d.window = p.optional_flag("window");
  d.softcap = p.optional_flag("softcap");
  d.alibi = p.optional_flag("alibi");
  d.bcast = p.optional_flag("bcast");
  d.Dp = padded_dim(d.D);
  d.varlen = p.optional_flag("varlen");
  if (p.optional_flag("paged")) {
    d.kvcache = true;
    d.page = p.get_int("page");
  }
  d.kvcache = d.kvcache || p.optional_flag("kvcache");
  if (d.varlen) {
    d.Tq = p.get_int("Tq");
    d.Tk = d.kvcache ? varlen_bucket(std::max(1LL, d.B * d.Sk / 2)) : p.get_int("Tk");
  }
  return d;
}

// Decoding steps of up to this many queries a head run their GQA/MQA groups' heads as
// rows (dims()): 16 is the most new queries flash_attn_with_kvcache's callers pass
// (speculative decoding's drafts); past it a head's own rows fill 16-row tiles.
constexpr long long k_grouped_max_sq = 16;

// The problem as the kernel runs it. One query row per head and g = Hq / Hkv > 1 query
// heads per K/V head (decoding with GQA/MQA): the group's heads become g rows of one head
// (flash-attn's seqlenq_ngroups_swapped), so that one block reads each K/V tile once for
// all g of them instead of g blocks reading it, and there are B * Hkv query blocks to
// split the keys of instead of B * Hq. Exact: q head h * g + i is row i of head h, at the
// same address (rows_from_heads rewrites the call's strides), the LSE [B, Hq, 1] is
// [B, Hkv, g], and a single row sees every key when causal (bottom-right aligned).
// With 2..k_grouped_max_sq queries a head (speculative decoding's check of its drafts,
// a few queries of chunked prefill), or one under a sliding window, the group's g * Sq
// queries become rows of the K/V head the same way, query s of head i being row
// i * Sq + s (AT_GROUPED: their addresses are not one stride apart, and the masks take
// each row's query index): the LSE [B, Hq, Sq] is [B, Hkv, g * Sq] again. Not with
// ALiBi (its slope depends on the q head) or varlen.
Dims dims(const Problem& p) {
  Dims d = described_dims(p);
  if (d.Hq == d.Hkv || d.alibi || d.varlen || d.Sq > k_grouped_max_sq) {
    return d;
  }
  d.heads_as_rows = d.Hq / d.Hkv;
  if (d.Sq == 1 && !d.window) {
    d.causal = false;
  } else {
    d.grouped_sq = d.Sq;
  }
  d.Sq *= d.heads_as_rows;
  d.Hq = d.Hkv;
  return d;
}

// The tuner's KV cache of a kvcache problem, deterministic from the shape: cache lengths
// pseudo-random in [1, Sk] (off every page and tile, one of them the full Sk), and a
// block table that deals each sequence's pages out of order (a shuffled permutation of
// the B * ceil(Sk / page) pages).
std::vector<int> kvcache_lengths(long long B, long long Sk) {
  std::vector<int> len(static_cast<size_t>(B));
  unsigned long long x = 0x2545f4914f6cdd1dull ^ (unsigned long long)(B * 1000003 + Sk * 7919);
  for (size_t b = 0; b < len.size(); ++b) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    len[b] = b == 0 ? int(Sk) : int(1 + (x >> 33) % (unsigned long long)Sk);
  }
  return len;
}

long long kvcache_pages_per_seq(const Dims& d) {
  return (d.Sk + d.page - 1) / d.page;
}

std::vector<int> kvcache_block_table(const Dims& d) {
  const long long n = d.B * kvcache_pages_per_seq(d);
  std::vector<int> table(static_cast<size_t>(n));
  for (long long i = 0; i < n; ++i) {
    table[size_t(i)] = int(i);
  }
  unsigned long long x = 0x9e3779b97f4a7c15ull ^ (unsigned long long)(n * 31 + d.page);
  for (long long i = n - 1; i > 0; --i) { // Fisher-Yates
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(table[size_t(i)], table[size_t((x >> 33) % (unsigned long long)(i + 1))]);
  }
  return table;
}

// The tuning bucket of a variable-length batch's sizes (longest sequences, total
// tokens): the next power of two, at least 16.
long long varlen_bucket(long long v) {
  long long b = 16;
  while (b < v) {
    b *= 2;
  }
  return b;
}

// The tokens the tuner packs for a varlen problem: the bucketed total, at most B
// sequences of the longest length.
long long varlen_tokens(long long total, long long B, long long longest) {
  return std::min(total, B * longest);
}

// The tuner's sequence lengths of a varlen problem, deterministic from (B, S, T): T
// tokens split evenly, then moved between neighbours by pseudo-random amounts, each
// length kept in [0, S] (so some are short, some long, some possibly empty; they sum
// to T exactly, so that every packed row belongs to a sequence).
std::vector<int> varlen_lengths(long long B, long long S, long long T) {
  std::vector<int> len(size_t(B), int(T / B));
  for (long long b = 0; b < T % B; ++b) {
    ++len[size_t(b)];
  }
  unsigned long long x = 0x9e3779b97f4a7c15ull ^ (unsigned long long)(B * 1000003 + S * 7919 + T);
  for (size_t b = 0; b + 1 < len.size(); ++b) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const long long room = std::min<long long>(len[b], S - len[b + 1]);
    const long long move = room > 0 ? (long long)((x >> 33) % (unsigned long long)(room + 1)) : 0;
    len[b] -= int(move);
    len[b + 1] += int(move);
  }
  return len;
}

// cu_seqlens of lengths: [0, l0, l0 + l1, ...].
std::vector<int> cumulative(const std::vector<int>& len) {
  std::vector<int> cu(len.size() + 1, 0);
  for (size_t b = 0; b < len.size(); ++b) {
    cu[b + 1] = cu[b] + len[b];
  }
  return cu;
}

// What the tuner runs a problem's features with (the call's values are not part of
// the problem): a window of Sk/4 keys to the left and Sk/8 to the right (0 when
// causal), softcap 5 (small enough that tanh bends the logits of its random inputs),
// and ALiBi slopes drawn from [0.01, 0.1] per head.
struct TuningFeatures {
  int left = -1, right = -1;
  double softcap = 0;
};
TuningFeatures tuning_features(const Dims& d) {
  TuningFeatures f;
  if (d.window) {
    f.left = int((d.Sk + 3) / 4);
    f.right = d.causal ? 0 : int((d.Sk + 7) / 8);
  }
  if (d.softcap) {
    f.softcap = 5.0;
  }
  return f;
}

struct Params {
  int block_m = 0, block_n = 0, warps = 0, stages = 0;
  bool swizzle = true, q_regs = false;
  int splits = 1; // key splits (flash-decoding); optional, 1 when absent
  // family=wgmma: templates/attention/hopper.cuh (sm_90a); optional, mma (the
  // portable kernel) when absent, so configurations stored before it existed stay valid.
  bool wgmma = false;
  // family=wgmma_pingpong: the wgmma kernel whose 2-3 consumer warpgroups take turns
  // issuing their products (one's softmax under another's GEMMs).
  bool pingpong = false;
  // family=wgmma_overlap: each consumer issues S = Q K^T of a tile before the previous
  // tile's O += P V, and runs the softmax of the one under the other.
  bool overlap = false;
  // family=wgmma_persistent, wgmma_overlap_persistent: one block per SM slot, each
  // looping over query tiles, so that one tile's loads run under the previous one's
  // epilogue.
  bool persistent = false;
  // family=wgmma_multicast, wgmma_overlap_multicast: blocks in clusters of two query blocks
  // of a head, each loading half of every K/V tile for both (TMA multicast).
  int cluster = 1;
};

// The kernel families (the `family` parameter) and the schedule each one sets; the
// first is the portable kernel, the others templates/attention/hopper.cuh's.
struct Family {
  const char* name;
  bool pingpong, overlap, persistent;
  int cluster;
};
constexpr Family k_families[] = {
    {"mma", false, false, false, 1},
    {"wgmma", false, false, false, 1},
    {"wgmma_pingpong", true, false, false, 1},
    {"wgmma_overlap", false, true, false, 1},
    {"wgmma_persistent", false, false, true, 1},
    {"wgmma_overlap_persistent", false, true, true, 1},
    {"wgmma_multicast", false, false, false, 2},
    {"wgmma_overlap_multicast", false, true, false, 2},
};

// Persistent Hopper blocks per SM slot: the grid is sized for 132 SMs (H100 SXM, H200);
// a GPU with fewer runs the extra blocks when the first ones finish (correct, a little
// less balanced).
constexpr long long k_persistent_sms = 132;

// Split-KV variants are for problems with few query blocks (decoding, small
// batch x heads); the tuner sizes one workspace for the most splits, which this
// bound keeps under 16 x 16384 rows x (D + 1) floats.
constexpr long long k_split_max_query_blocks = 256; // counted in 64-row blocks
constexpr int k_max_splits = 16;

bool split_eligible(const Dims& d) {
  return d.B * d.Hq * ((d.Sq + 63) / 64) <= k_split_max_query_blocks;
}

// The workspace of a split-KV variant: first the arrival counters, one per (batch,
// head, 16-row query block) -- the smallest query block, so that every variant's
// counters sit in the same words and a workspace shared between variants (as the
// tuner shares it) keeps them zero --, padded to 16 bytes; then partial O
// [splits][B][Hq][Sq][D] and LSE [splits][B][Hq][Sq], fp32.
long long split_counter_words(const Dims& d) {
  return (d.B * d.Hq * ((d.Sq + 15) / 16) + 3) / 4 * 4;
}

size_t split_workspace_bytes(const Params& p, const Dims& d) {
  if (p.splits <= 1) {
    return 0;
  }
  const long long rows = d.B * d.Hq * d.Sq;
  return size_t((split_counter_words(d) + p.splits * rows * (d.D + 1)) * 4);
}

// The tuner's one workspace for every variant of a problem: room for the most splits.
size_t tuner_workspace_bytes(const Dims& d) {
  Params most;
  most.splits = k_max_splits;
  return split_workspace_bytes(most, d);
}

Params params(const Config& c) {
  Params p;
  bool have[6] = {};
  // Whether v is the first of a two-valued parameter's values.
  auto pick = [](const std::string& key, const std::string& v, const char* a, const char* b) {
    return !parse_choice("attention", key, v, a, b);
  };
  for (const auto& [k, v] : c) {
    if (k == "block_m") {
      p.block_m = int(parse_int(v, "block_m")), have[0] = true;
    } else if (k == "block_n") {
      p.block_n = int(parse_int(v, "block_n")), have[1] = true;
    } else if (k == "warps") {
      p.warps = int(parse_int(v, "warps")), have[2] = true;
    } else if (k == "stages") {
      p.stages = int(parse_int(v, "stages")), have[3] = true;
    } else if (k == "swizzle") {
      p.swizzle = pick(k, v, "xor", "pad"), have[4] = true;
    } else if (k == "q") {
      p.q_regs = pick(k, v, "regs", "smem"), have[5] = true;
    } else if (k == "splits") {
      p.splits = int(parse_int(v, "splits"));
    } else if (k == "family") {
      const auto f = std::find_if(std::begin(k_families), std::end(k_families),
                                  [&](const Family& x) { return v == x.name; });
      if (f == std::end(k_families)) {
        std::string names;
        for (size_t i = 0; i < std::size(k_families); ++i) {
          names += std::string(i == 0                          ? ""
                               : i + 1 < std::size(k_families) ? ", "
                                                               : " or ") +
                   "'" + k_families[i].name + "'";
        }
        throw Error(ErrorKind::config, "attention: family must be " + names + ", not '" + v + "'");
      }
      p.wgmma = f != std::begin(k_families);
      p.pingpong = f->pingpong;
      p.overlap = f->overlap;
      p.persistent = f->persistent;
      p.cluster = f->cluster;
    } else {
      throw Error(ErrorKind::config, "attention: unknown parameter '" + k + "'");
    }
  }
  for (bool h : have) {
    if (!h) {
      throw Error(ErrorKind::config, "attention: configuration '" + format_fields(c) +
                                         "' lacks one of block_m, block_n, warps, stages, "
                                         "swizzle, q");
    }
  }
  return p;
}

// family=wgmma (templates/attention/hopper.cuh) holds the head dim in whole 64-column
// slabs (the columns past D zero-filled).
long long wgmma_pad_dim(const Dims& d) {
  return (d.D + 63) / 64 * 64; // hopper.cuh's k_pad_dim: whole 64-column slabs
}

// What its tiles and barriers take, plus 1 KiB to align the 128-byte-swizzled tiles to
// 1024 bytes. Persistent blocks hold two Q tiles (the next one loads while this one is
// read) and each one's tile index.
long long wgmma_smem_bytes(const Params& p, const Dims& d) {
  const long long q_bufs = p.persistent ? 2 : 1;
  long long tiles = (q_bufs * p.block_m + 2LL * p.stages * p.block_n) * wgmma_pad_dim(d) * 2;
  const long long tile_slots = p.persistent ? 4 * q_bufs : 0;
  // Barriers: Q full/empty per Q buffer; K full, V full, K empty, V empty per stage.
  return tiles + 8 * (2 * q_bufs + 4LL * p.stages) + tile_slots + 1024;
}

// Causal persistent Hopper blocks take tiles from a pair of counters in the module's
// global memory (templates/attention/hopper.cuh, k_sched_slots). Launches take the slots
// in turn, counted over the process (plans of different problems may share a module),
// so that up to this many launches of one variant may run at once (on different
// streams) without sharing counters.
constexpr unsigned k_hopper_sched_slots = 64;

// Causal persistent Hopper blocks run the (batch, head) pairs in groups, longest query
// blocks first within a group: a group's K and V take at most this much of the L2 (a
// third of an H100's 50 MB), so that the blocks running at once, all in one or two
// groups, read each head's K and V from HBM about once. Longest first over every head
// instead read them once per query block at S = 512-1024, D = 128 (21-28% slower than
// the plain grid, which runs a head's blocks together; H100, 2026-11-26).
constexpr long long k_causal_group_bytes = 16LL << 20;

int causal_sched_group(const Dims& d) {
  const long long per_head = std::max(1LL, d.Sk * d.D * 2 * 2 / std::max(1LL, d.Hq / d.Hkv));
  return int(std::clamp(k_causal_group_bytes / per_head, 1LL, std::max(1LL, d.Hq * d.B)));
}

int next_sched_slot() {
  static std::atomic<unsigned> launches{0};
  return int(launches.fetch_add(1, std::memory_order_relaxed) % k_hopper_sched_slots);
}

// The tile loop of a persistent block keeps its position and counters live (about 24
// more; every tile that spilled with them is over this). At D=256 every persistent tile
// spilled (block_n 64-112, 68-156 bytes; 232 by the rule without this term).
long long wgmma_loop_regs(const Params& p, const Dims& d) {
  return p.persistent ? (wgmma_pad_dim(d) > 128 ? 48 : 24) : 0;
}

// Softcap's factor and ALiBi's slope, row and diagonal, live through the key loop: at 3
// consumers (160 registers) the overlapped 192 x 64-80 tiles spilled 4-60 bytes with them
// (ptxas, CUDA 13.0, D=96 with both and a window); with 16 more counted (24 overlapped,
// whose softmax runs beside a product in flight) no tile that fits spills.
long long wgmma_feature_regs(const Params& p, const Dims& d) {
  return d.softcap || d.alibi ? (p.overlap ? 24 : 16) : 0;
}

// What a consumer thread keeps live: O (padded D/2 floats), S (block_n/2), P as 16-bit pairs
// (block_n/4), plus softmax state and addressing. Overlapped, two P sets may be live (the
// next is built while the last is read) and the softmax temporaries overlap them: 32
// more is the margin below which ptxas did not spill on sm_90a (CUDA 13.0, every tile).
long long wgmma_one_set_regs(const Params& p, const Dims& d) {
  return wgmma_pad_dim(d) / 2 + p.block_n / 2 + p.block_n / 4 + 32 + wgmma_loop_regs(p, d) +
         wgmma_feature_regs(p, d);
}

long long wgmma_two_set_regs(const Params& p, const Dims& d) {
  return wgmma_one_set_regs(p, d) + p.block_n / 4 + 32;
}

// The overlapped schedule keeps one P set (hopper.cuh's AT_ONE_P) where two exceed the
// registers the consumers get (240 with 1-2 consumer warpgroups, 160 with 3), and at
// D over 192 (tiles of 256 columns) always.
bool wgmma_one_p(const Params& p, const Dims& d) {
  return p.overlap &&
         (wgmma_pad_dim(d) == 256 || wgmma_two_set_regs(p, d) > (p.block_m / 64 == 3 ? 160 : 240));
}

long long wgmma_register_estimate(const Params& p, const Dims& d) {
  return p.overlap && !wgmma_one_p(p, d) ? wgmma_two_set_regs(p, d) : wgmma_one_set_regs(p, d);
}

// Not at D=256: two blocks of 256 threads cap the kernel at 128 registers on entry, and
// ptxas needs about 158 to compile m64n256k16 (128 accumulators), setmaxnreg or not.
int wgmma_min_blocks(const Params& p, const Dims& d) {
  const bool two = p.block_m == 64 && d.D <= 128 && wgmma_smem_bytes(p, d) <= 113 * 1024 &&
                   wgmma_register_estimate(p, d) <= 232;
  return two ? 2 : 1;
}

long long smem_bytes(const Params& p, const Dims& d) {
  if (p.wgmma) {
    return wgmma_smem_bytes(p, d);
  }
  long long row = p.swizzle ? d.Dp : d.Dp + 8;
  return (p.block_m + 2LL * p.stages * p.block_n) * row * (long long)dtype_size(d.dtype);
}

// Per-block opt-in shared memory of an arch ("sm_90a" -> 227 KiB).
long long smem_limit(const std::string& arch) {
  std::string digits;
  for (char ch : arch) {
    if (ch >= '0' && ch <= '9') {
      digits += ch;
    }
  }
  long long cc = digits.empty() ? 0 : parse_int(digits, "arch");
  switch (cc) {
  case 80:
  case 87:
    return 163 * 1024;
  case 90:
  case 100:
    return 227 * 1024;
  default:
    return 99 * 1024; // sm_86, sm_89, sm_120 and unknown: the smallest of them
  }
}

// Query tiles of block_m rows over every (batch, head): the blocks of a plain grid without
// key splits, the tiles a persistent one loops over.
long long query_tiles(const Params& p, const Dims& d) {
  return (d.Sq + p.block_m - 1) / p.block_m * d.Hq * d.B;
}

// Key tiles of block_n keys over one sequence's keys.
long long key_tiles(const Params& p, const Dims& d) {
  return (d.Sk + p.block_n - 1) / p.block_n;
}

// A ring of three stages over fewer than four key tiles: one stage is never refilled.
bool ring_past_keys(const Params& p, const Dims& d) {
  return p.stages == 3 && key_tiles(p, d) < 4;
}

// A persistent Hopper grid that launches as the plain one (worth_measuring says why).
bool persistent_is_plain(const Params& p, const Dims& d) {
  return p.persistent && !d.causal &&
         query_tiles(p, d) <= k_persistent_sms * wgmma_min_blocks(p, d);
}

// The portable kernel's warps sharing one 16-row tile, each over its slice of every key
// tile (kernel.cuh's k_key_warps): more than one in a block of fewer than 16 rows per warp.
int key_warps(const Params& p) {
  return p.block_m >= 16 * p.warps ? 1 : 16 * p.warps / std::max(p.block_m, 1);
}

// Registers per thread the accumulators need (O and S tiles in fp32, Q fragments
// when kept) plus what addressing, softmax state and fragments in flight take.
long long register_estimate(const Params& p, const Dims& d) {
  const long long m_tiles = std::max(1, p.block_m / p.warps / 16);
  const long long regs = m_tiles * (d.Dp / 2 + p.block_n / key_warps(p) / 2) + 48;
  return p.q_regs ? regs + m_tiles * d.Dp / 4 : regs;
}

constexpr long long k_max_grid_yz = 65535;
// Query blocks that fill the GPU once (about one per SM of an H100 or A100).
constexpr long long k_fill_blocks = 128;

// The Hopper family's consumer warpgroups and their registers after setmaxnreg (the
// values hopper.cuh uses).
int wgmma_consumers(const Params& p) {
  return p.block_m / 64;
}
// One consumer warpgroup: two blocks per SM when their shared memory fits (half of
// the 228 KiB an SM has, less the 1 KiB each block reserves), so one block's
// prologue and epilogue hide under the other's products; hopper.cuh's AT_MIN_BLOCKS.
int wgmma_min_blocks(const Params& p, const Dims& d);
int wgmma_consumer_regs(const Params& p, int min_blocks) {
  if (min_blocks == 2) {
    return 232; // (64K / 2 - 128 x 24 for the producer) / 128
  }
  return wgmma_consumers(p) == 3 ? 160 : 240;
}

// A paged cache's key tiles each lie in one page: block_n divides the page.
Result<bool> key_tiles_fit_pages(const Params& p, const Dims& d) {
  if (d.page > 0 && d.page % p.block_n != 0) {
    return fail("block_n=" + std::to_string(p.block_n) +
                " does not divide the KV cache's block size " + std::to_string(d.page) +
                " (a key tile must lie in one page)");
  }
  return true;
}

Result<bool> check_wgmma(const Params& p, const Dims& d, const std::string& arch) {
  if (arch != "sm_90a") {
    return fail("family=wgmma needs sm_90a (wgmma, setmaxnreg), not " + arch);
  }
  if (p.warps != 4 || !p.swizzle || p.q_regs) {
    return fail("family=wgmma takes warps=4, swizzle=xor, q=smem (its layout is fixed; other "
                "values would repeat the same kernel)");
  }
  if (p.splits != 1) {
    return fail("family=wgmma does not split the keys (splits=1)");
  }
  if (d.bcast) {
    return fail("family=wgmma loads q, k and v with tensor maps, which cannot step a stride of "
                "0 (bcast=1: a tensor broadcast with expand; family=mma reads it)");
  }
  if (p.block_m != 64 && p.block_m != 128 && p.block_m != 192) {
    return fail("family=wgmma: block_m is 64 per consumer warpgroup (64, 128 or 192)");
  }
  // The block_n that templates/common/wgmma.cuh has an S = Q K^T instruction for.
  if (p.block_n != 64 && p.block_n != 80 && p.block_n != 96 && p.block_n != 112 &&
      p.block_n != 128 && p.block_n != 176 && p.block_n != 192) {
    return fail("family=wgmma: block_n must be 64, 80, 96, 112, 128, 176 or 192");
  }
  if (p.stages < 1 || p.stages > 4) {
    return fail("family=wgmma: stages must be 1 to 4");
  }
  if (p.pingpong && (wgmma_consumers(p) < 2 || p.stages < 2)) {
    return fail("family=wgmma_pingpong needs 2 or 3 consumer warpgroups (block_m 128 or 192) "
                "and 2+ stages");
  }
  if (p.overlap && p.stages < 2) {
    return fail("family=wgmma_overlap needs 2+ stages (the next K lands while the last V is "
                "read)");
  }
  if (p.cluster > 1) {
    // Both blocks of a cluster read every key tile of their head, in the same order.
    if (d.causal || d.window) {
      return fail("family=*_multicast shares every key tile between two query blocks: not "
                  "for causal or windowed attention, whose blocks read different key tiles");
    }
    if ((d.Sq + p.block_m - 1) / p.block_m < 2) {
      return fail("family=*_multicast: one query block per head, no second to share with");
    }
  }
  long long regs = wgmma_register_estimate(p, d);
  const int available = wgmma_consumer_regs(p, wgmma_min_blocks(p, d));
  if (regs > available) {
    return fail("needs about " + std::to_string(regs) +
                " registers per consumer thread (O, S and P tiles): over the " +
                std::to_string(available) + " that " + std::to_string(wgmma_consumers(p)) +
                " consumer warpgroups get");
  }
  long long smem = wgmma_smem_bytes(p, d);
  if (smem > smem_limit(arch)) {
    return fail(std::to_string(smem) + " bytes of shared memory exceed the " + arch +
                " per-block limit of " + std::to_string(smem_limit(arch)));
  }
  if ((d.Sq + p.block_m - 1) / p.block_m > 0x7fffffffLL) {
    return fail("grid too large");
  }
  return true;
}

} // namespace

std::vector<std::string> AttentionOp::default_shapes() const {
  // bench/shapes.toml [attention]: the FlashAttention grid (B*S = 16k tokens,
  // Hq*D = 2048, layout [B,S,H,D]) in bf16 and fp16, then the extra shapes (fp16,
  // [B,H,S,D]).
  std::vector<std::string> out;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (int d : {64, 128}) {
      for (int causal : {0, 1}) {
        for (int s : {512, 1024, 2048, 4096, 8192, 16384}) {
          out.push_back("B=" + std::to_string(16384 / s) + ",H=" + std::to_string(2048 / d) +
                        ",S=" + std::to_string(s) + ",D=" + std::to_string(d) +
                        ",causal=" + std::to_string(causal) + ",dtype=" + dtype + ",layout=bshd");
        }
      }
    }
  }
  out.push_back("B=16,H=96,S=512,D=64,dtype=fp16,layout=bhsd");
  out.push_back("B=16,H=16,S=2048,D=64,dtype=fp16,layout=bhsd");
  out.push_back("B=4,Hq=32,Hkv=8,S=4096,D=128,causal=1,dtype=fp16,layout=bhsd");
  return out;
}

Problem AttentionOp::make_problem(const Fields& shape) const {
  const ShapeReader r(shape, "attention",
                      {"B",
                       "H",
                       "Hq",
                       "Hkv",
                       "S",
                       "Sq",
                       "Sk",
                       "D",
                       "causal",
                       "dtype",
                       "lse",
                       "layout",
                       "window",
                       "softcap",
                       "alibi",
                       "varlen",
                       "Tq",
                       "Tk",
                       "kvcache",
                       "paged",
                       "page",
                       "num_blocks",
                       "blocks_per_seq",
                       "append",
                       "Snew",
                       "leftpad",
                       "bcast",
                       "B_cache",
                       "batch_idx"});
  // Hq and Sq/Sk may be given as H and S; a missing field is named by its own key.
  auto number = [&](const char* key, const char* alias, long long max) {
    if (alias && r.has(key) && r.has(alias) &&
        r.ranged(key, nullptr, max) != r.ranged(alias, nullptr, max)) {
      r.fail(std::string(key) + " and " + alias + " disagree (" + r.get(key, nullptr) + " and " +
             r.get(alias, nullptr) + "); give one");
    }
    return r.ranged(!r.has(key) && alias && r.has(alias) ? alias : key, nullptr, max);
  };
  long long B = number("B", nullptr, k_max_grid_yz);
  long long Hq = number("Hq", "H", k_max_grid_yz);
  long long Hkv = r.has("Hkv") ? number("Hkv", nullptr, k_max_grid_yz) : Hq;
  long long Sq = number("Sq", "S", 1 << 24);
  long long Sk = number("Sk", "S", 1 << 24);
  // Variable-length batches: Sq, Sk the longest sequences and Tq, Tk the totals, each
  // bucketed (the next power of two, at least 16); Tq defaults to half of B * Sq.
  const bool varlen = r.flag("varlen", "0") == "1";
  const bool paged = r.flag("paged", "0") == "1";
  long long Tq = 0, Tk = 0;
  if (varlen) {
    Sq = varlen_bucket(Sq);
    Sk = varlen_bucket(Sk);
    Tq =
        varlen_bucket(r.has("Tq") ? r.ranged("Tq", nullptr, 1LL << 31) : std::max(1LL, B * Sq / 2));
    // With a paged cache the keys are pages, not packed tokens: no Tk (0 is "not given").
    if (!paged) {
      Tk = varlen_bucket(r.has("Tk") ? r.ranged("Tk", nullptr, 1LL << 31)
                                     : std::max(1LL, B * Sk / 2));
    } else if (r.has("Tk") && r.get("Tk", nullptr) != "0") {
      r.fail("Tk (total keys) is not a field of varlen=1 problems with a paged KV cache "
             "(paged=1): each sequence's keys are pages of the cache");
    }
  } else {
    for (const char* key : {"Tq", "Tk"}) {
      if (r.has(key) && r.get(key, nullptr) != "0") {
        r.fail(std::string(key) + " (total tokens) is a field of varlen=1 problems");
      }
    }
  }
  // A KV cache: kvcache=1 (contiguous) or paged=1 with page (the block size, default
  // 256); Sk, one sequence's cache, is bucketed like varlen's lengths. A runtime call
  // also gives num_blocks, blocks_per_seq, append, Snew, leftpad (cache_leftpad given),
  // B_cache and batch_idx (cache_batch_idx given), which are not part of the problem
  // (the kernel reads them at run time).
  const bool kvcache = paged || r.flag("kvcache", "0") == "1";
  long long page = 0;
  if (paged) {
    page = r.has("page") ? r.ranged("page", nullptr, 1 << 20) : 256;
    if (page % 16 != 0) {
      r.fail("KV cache block size page=" + std::to_string(page) +
             " is not supported: it must be a multiple of 16 (of a variant's block_n)");
    }
    Sk = varlen_bucket(Sk);
  } else if (kvcache) {
    Sk = varlen_bucket(Sk);
    if (r.has("page") && r.get("page", nullptr) != "0") {
      r.fail("page (a block size) is a field of paged=1 problems (block_table given)");
    }
  } else {
    if (r.has("page") && r.get("page", nullptr) != "0") {
      r.fail("page (a block size) is a field of paged=1 problems (block_table given)");
    }
    if (r.has("append") && r.get("append", nullptr) == "1") {
      r.fail("k_new / v_new (append) are given without cache_seqlens");
    }
  }
  // Variable-length batches read a paged cache as flash_attn_varlen_func's block_table
  // does: sequence b's keys are the first cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys of
  // its pages; no cache_seqlens, rows to append or cache_leftpad.
  if (varlen && kvcache) {
    if (!paged) {
      r.fail("a contiguous KV cache (cache_seqlens without block_table) with variable-length "
             "batches (cu_seqlens) is not built: pass the cache as pages with a block_table");
    }
    if (r.flag("kvcache", "0") == "1") {
      r.fail("cache_seqlens is given with cu_seqlens: a varlen batch with a paged cache takes "
             "each sequence's key count from cu_seqlens_k");
    }
    if (r.flag("append", "0") == "1" || r.flag("leftpad", "0") == "1") {
      r.fail("k_new / v_new (append) and cache_leftpad are not taken with variable-length "
             "batches (cu_seqlens)");
    }
  }
  if (paged && !varlen && r.has("kvcache") && r.flag("kvcache", "0") == "0") {
    r.fail("block_table is given without cache_seqlens");
  }
  // A contiguous cache's per-sequence index tensors, refused as flash-attn refuses them.
  for (const auto& [flag, tensor] :
       {std::pair{"batch_idx", "cache_batch_idx"}, std::pair{"leftpad", "cache_leftpad"}}) {
    if (r.flag(flag, "0") != "1") {
      continue;
    }
    const std::string name = tensor;
    if (paged) {
      r.fail(name +
             " is not supported with a paged KV cache (block_table), as in flash-attn: "
             "pass a contiguous cache or no " +
             name);
    } else if (!kvcache || (r.has("kvcache") && r.flag("kvcache", "0") == "0")) {
      r.fail(name + " is given without cache_seqlens");
    }
  }
  long long D = number("D", nullptr, 256);
  if (D < 32 || D % 8 != 0) {
    r.fail("head dim D=" + std::to_string(D) + " is not supported (a multiple of 8 in 32..256)");
  }
  if (Hq % Hkv != 0) {
    r.fail("Hq=" + std::to_string(Hq) + " is not a multiple of Hkv=" + std::to_string(Hkv));
  }
  if (ShapeReader::product_reaches({B, Hq, std::max(Sq, Sk), D}, 1LL << 40) ||
      ShapeReader::product_reaches({std::max(Tq, Tk) + 1, Hq, D}, 1LL << 40)) {
    r.fail("tensors are too large");
  }
  DType dtype = parse_dtype(r.get("dtype", "bf16"), "attention shape field dtype");
  if (dtype == DType::f32) {
    r.fail("dtype fp32 is not supported (fp16, bf16)");
  }
  std::string layout = r.get("layout", "bshd");
  if (layout != "bshd" && layout != "bhsd") {
    r.fail("layout '" + layout + "' is not one of bshd, bhsd");
  }
  if (varlen && layout != "bshd") {
    r.fail("varlen=1 packs tokens as [T, H, D] (layout bshd), not " + layout);
  }
  if (kvcache && layout != "bshd") {
    r.fail(std::string(paged ? "paged=1" : "kvcache=1") +
           " tunes flash-attn's cache layout [.., S, H, D] (layout bshd), not " + layout);
  }
  Problem p;
  p.op = name();
  p.fields = {{"B", std::to_string(B)},          {"Hq", std::to_string(Hq)},
              {"Hkv", std::to_string(Hkv)},      {"Sq", std::to_string(Sq)},
              {"Sk", std::to_string(Sk)},        {"D", std::to_string(D)},
              {"causal", r.flag("causal", "0")}, {"dtype", to_string(dtype)},
              {"lse", r.flag("lse", "0")},       {"layout", layout}};
  // The features join the problem only when on, so that the key of a problem without
  // them is what it was before they existed.
  Fields f = p.fields.text();
  for (const char* feature : {"window", "softcap", "alibi", "bcast"}) {
    if (r.flag(feature, "0") == "1") {
      f.emplace_back(feature, "1");
    }
  }
  if (varlen) {
    f.emplace_back("varlen", "1");
    f.emplace_back("Tq", std::to_string(Tq));
    if (!paged) {
      f.emplace_back("Tk", std::to_string(Tk));
    }
  }
  if (paged) {
    f.emplace_back("paged", "1");
    f.emplace_back("page", std::to_string(page));
  } else if (kvcache) {
    f.emplace_back("kvcache", "1");
  }
  p.fields = std::move(f);
  return p;
}

Result<bool> AttentionOp::check(const Config& config, const Problem& problem,
                                const std::string& arch) const {
  Params p = params(config);
  Dims d = dims(problem);
  if (p.wgmma && d.varlen && (p.persistent || p.cluster > 1)) {
    return fail("family=wgmma runs variable-length batches one query block per block: not "
                "persistent, no clusters (family=wgmma, wgmma_overlap, wgmma_pingpong do)");
  }
  if (p.wgmma && d.kvcache && !d.varlen) {
    return fail("family=wgmma reads no KV cache but a varlen batch's paged one (family=mma "
                "does)");
  }
  if (p.wgmma && d.page > 0) {
    if (Result<bool> fits = key_tiles_fit_pages(p, d); !fits.ok()) {
      return fits;
    }
  }
  if (p.wgmma && d.grouped_sq > 0) {
    return fail("family=wgmma runs no query heads as rows of their K/V head with several "
                "queries or a window (family=mma does)");
  }
  if (p.wgmma) {
    return check_wgmma(p, d, arch);
  }
  if (p.warps != 4 && p.warps != 8) {
    return fail("warps must be 4 or 8");
  }
  if (p.block_m < 16 * p.warps) {
    // Warps share 16-row tiles and split each key tile (kernel.cuh's k_key_warps).
    if (p.block_m % 16 != 0 || (16 * p.warps) % p.block_m != 0) {
      return fail("block_m=" + std::to_string(p.block_m) +
                  " with warps=" + std::to_string(p.warps) +
                  ": fewer than 16 query rows per warp (warps sharing 16-row tiles) need "
                  "block_m a multiple of 16 dividing 16 * warps");
    }
  } else if (p.block_m % p.warps != 0 || (p.block_m / p.warps) % 16 != 0 ||
             p.block_m / p.warps > 64) {
    return fail("each warp must own 16, 32, 48 or 64 query rows (block_m / warps)");
  }
  if (p.block_n < 16 || p.block_n % 16 != 0 || p.block_n > 256) {
    return fail("block_n must be a multiple of 16 in 16..256");
  }
  if (p.block_n % (16 * key_warps(p)) != 0) {
    return fail("block_n=" + std::to_string(p.block_n) + " does not split into whole 16-key " +
                "steps over the " + std::to_string(key_warps(p)) + " warps sharing each row");
  }
  if (Result<bool> fits = key_tiles_fit_pages(p, d); !fits.ok()) {
    return fits;
  }
  if (p.stages < 1 || p.stages > 3) {
    return fail("stages must be 1, 2 or 3");
  }
  // kernel.cuh's loads: a power of two of chunk columns per row, the rows over the rest.
  const long long chunks = d.Dp / 8;
  const long long load_chunks = chunks <= 4 ? 4 : chunks <= 8 ? 8 : chunks <= 16 ? 16 : 32;
  const long long row_step = 32LL * p.warps / load_chunks;
  if (p.block_n % row_step != 0 || p.block_m % row_step != 0) {
    return fail("tiles do not split evenly into 16-byte chunks per thread (block_m and block_n "
                "must be multiples of " +
                std::to_string(row_step) + " at D=" + std::to_string(d.D) + ")");
  }
  long long regs = register_estimate(p, d);
  if (regs > 255) {
    return fail("needs about " + std::to_string(regs) +
                " registers per thread (O, S and Q tiles): over 255");
  }
  long long smem = smem_bytes(p, d);
  if (smem > smem_limit(arch)) {
    return fail(std::to_string(smem) + " bytes of shared memory exceed the " + arch +
                " per-block limit of " + std::to_string(smem_limit(arch)));
  }
  if (key_warps(p) > 1) {
    // kernel.cuh's merge_key_warps: each warp that does not own its rows leaves its
    // max, sum and O (fp32, per lane) where the K/V tiles were.
    const long long merge = (p.warps - p.warps / key_warps(p)) * (4 + 4 * d.Dp / 8) * 32 * 4;
    const long long kv =
        2LL * p.stages * p.block_n * (p.swizzle ? d.Dp : d.Dp + 8) * (long long)dtype_size(d.dtype);
    if (merge > kv) {
      return fail("the merge of the warps sharing rows (" + std::to_string(merge) +
                  " bytes) does not fit the K/V tiles' " + std::to_string(kv) +
                  " bytes of shared memory");
    }
  }
  if ((d.Sq + p.block_m - 1) / p.block_m * p.splits > 0x7fffffffLL) {
    return fail("grid too large");
  }
  if (p.splits < 1 || p.splits > k_max_splits || (p.splits & (p.splits - 1)) != 0) {
    return fail("splits must be 1, 2, 4, 8 or 16");
  }
  if (p.splits > 1 && !split_eligible(d)) {
    return fail("split-KV is for problems of at most " + std::to_string(k_split_max_query_blocks) +
                " query blocks of 64 rows (B * Hq * ceil(Sq / 64))");
  }
  return true;
}

Result<bool> AttentionOp::worth_measuring(const Config& config, const Problem& problem) const {
  Params p = params(config);
  Dims d = dims(problem);
  if (p.block_m == 128 && d.Sq <= 64) {
    return fail("block_m=128 leaves over half of each block idle at Sq=" + std::to_string(d.Sq));
  }
  if (!p.wgmma && key_warps(p) > 1 && d.Sq > p.block_m) {
    return fail("warps share rows (splitting the keys) only where one block holds every query "
                "row (decoding); Sq=" +
                std::to_string(d.Sq) + " > block_m=" + std::to_string(p.block_m));
  }
  // With no more tiles than its grid holds (k_persistent_sms x min blocks), a persistent
  // variant launches one block per tile, each running one tile: the plain kernel's
  // blocks, with a second Q buffer and the tile loop's registers on top. Without a
  // causal mask its tile order (query block fastest, then head, then batch) is the
  // plain grid's block order too, whatever the GPU's SM count: the same launch. A
  // causal one orders the longest query blocks of all heads first, where the plain grid
  // goes head by head; that differs wherever the blocks do not all run at once (an
  // sm_90a GPU with fewer than 132 SMs), so it is measured.
  if (persistent_is_plain(p, d)) {
    return fail("a persistent schedule with no more tiles than blocks, and no causal order, "
                "is the plain one");
  }
  if (ring_past_keys(p, d)) {
    return fail("three stages for fewer than four key tiles");
  }
  if (p.splits > 1 && key_tiles(p, d) < 2 * p.splits) {
    return fail("fewer than two key tiles per split");
  }
  // 128 or more query blocks fill the GPU once; two splits may still hide more of the
  // memory latency of blocks with few rows (decoding), more do not.
  if (p.splits > 2 && query_tiles(p, d) >= k_fill_blocks) {
    return fail("enough query blocks to fill the GPU with at most two key splits");
  }
  return true;
}

Config AttentionOp::adapt(const Config& config, const Problem& problem) const {
  const Params p = params(config);
  const Dims d = dims(problem);
  // A ring of three stages for fewer than four key tiles (what worth_measuring leaves
  // out: a tuned long problem's ring borrowed by a short one) keeps two.
  auto short_ring = [&](Config c) {
    return ring_past_keys(params(c), d) ? with_values(c, {{"stages", 2}}) : c;
  };
  if (p.wgmma) {
    // A Hopper tile of 2-3 consumer warpgroups borrowed by a problem with fewer query
    // tiles than fill the GPU once (short Sq, few heads): one consumer, twice the blocks
    // (H100, B=2,Hq=8,Hkv=1,Sq=100,Sk=1023,D=64 causal: the grid's 128 x 128 point ran
    // 17.4 us, its 64-row tiles 13.3-13.7).
    // So does a problem of at most 64 query rows a head, whatever its grid (what
    // worth_measuring leaves out: a 128-row block over half idle). Ping-pong alternates
    // two consumers: with one, the plain schedule.
    Config out = config;
    if (wgmma_pad_dim(d) > 128 && d.D != 256 &&
        (p.block_m > 128 || p.block_n > 96 || p.stages > 2)) {
      // A tile tuned at a head dim up to 128 borrowed by one between 128 and 256, which no
      // built-in point names (O then takes 96-128 registers a thread): FlashAttention-3's
      // D=256 tile, 128 x 80 in 2 stages, which the D=256 grid's winners are
      // (bench/notes/attention-hopper.md), the schedule kept. (D=256 itself has points of
      // its own, which stay nearer.)
      out = with_values(out, {{"block_m", std::min(p.block_m, 128)},
                              {"block_n", 80},
                              {"stages", std::min(p.stages, 2)}});
    }
    if (p.block_m > 64 && (d.Sq <= 64 || query_tiles(p, d) < k_fill_blocks)) {
      out = with_values(out, {{"block_m", 64}});
      if (p.pingpong) {
        set_value(out, "family", "wgmma");
      }
    }
    out = short_ring(out);
    // A persistent grid that is the plain one (what worth_measuring leaves out), a
    // persistent or cluster tile borrowed by packed sequences (which take one query block
    // a block), or a persistent tile whose loop registers do not fit beside O: the plain
    // family of the same schedule.
    const Params a = params(out);
    const bool loop_too_big = a.persistent && wgmma_register_estimate(a, d) >
                                                  wgmma_consumer_regs(a, wgmma_min_blocks(a, d));
    if (persistent_is_plain(a, d) || (d.varlen && (a.persistent || a.cluster > 1)) ||
        loop_too_big) {
      for (size_t i = 1; i < std::size(k_families); ++i) { // [0] is the portable kernel
        const Family& f = k_families[i];
        if (!f.persistent && f.pingpong == a.pingpong && f.overlap == a.overlap &&
            f.cluster == (d.varlen ? 1 : a.cluster)) {
          set_value(out, "family", f.name);
          break;
        }
      }
    }
    return out;
  }
  Config out = config;
  if (key_warps(p) > 1 && d.Sq > p.block_m) {
    // Warps sharing rows: a decoding point borrowed by more rows than its block holds.
    out = with_values(out, {{"block_m", 16 * p.warps}});
  } else if (p.block_m == 128 && d.Sq <= 64) {
    // A 128-row block over at most 64 rows a head, over half idle (worth_measuring).
    out = with_values(out, {{"block_m", 64}});
  }
  const Params a = params(out);
  // The key splits that fill this problem's grid: doubled while it stays within two
  // blocks an SM and every split keeps two key tiles or more.
  const long long tiles = key_tiles(a, d);
  const long long blocks = query_tiles(a, d);
  int fill = 1;
  if (split_eligible(d)) {
    while (fill * 2 <= k_max_splits && blocks * fill * 2 <= 2 * k_fill_blocks &&
           tiles >= 4LL * fill) {
      fill *= 2;
    }
  }
  // Every query row of a (batch, head) in one block (decoding, a few new queries): the
  // grid is B x heads blocks whatever the point was tuned on, so the splits are this
  // problem's own, and so are the stages: a grid within one fill has each block alone
  // on its SM, whose shared memory holds a second stage at no cost (two at least); where
  // blocks share SMs, a split of at most three key tiles has no loop to pipeline and
  // takes one (the second stage's shared memory would cost a block). H100,
  // bench/notes/attention-features.md ("Decoding shapes nobody tuned"). A longer
  // problem keeps the point's splits up to the fill.
  const int splits = d.Sq <= a.block_m ? fill : std::min(a.splits, fill);
  if (splits != a.splits) {
    set_value(out, "splits", std::to_string(splits)); // optional: absent is 1
  }
  if (d.Sq <= a.block_m) {
    const long long split_tiles = (tiles + splits - 1) / splits;
    long long stages = a.stages;
    if (blocks * splits <= k_fill_blocks) {
      stages = std::min(split_tiles, std::max(stages, 2LL));
    } else if (split_tiles <= 3) {
      stages = 1;
    }
    if (split_tiles < 4) {
      stages = std::min(stages, 2LL);
    }
    if (stages != a.stages) {
      out = with_values(out, {{"stages", std::max(1LL, stages)}});
    }
  }
  return short_ring(out);
}

std::vector<std::string> AttentionOp::defines(const Config& config, const Problem& problem) const {
  Params p = params(config);
  Dims d = dims(problem);
  if (p.wgmma) {
    std::vector<std::string> out = {"-DAT_WGMMA=1",
                                    "-DAT_BLOCK_M=" + std::to_string(p.block_m),
                                    "-DAT_BLOCK_N=" + std::to_string(p.block_n),
                                    "-DAT_STAGES=" + std::to_string(p.stages),
                                    "-DAT_HEAD_DIM=" + std::to_string(d.D),
                                    std::string("-DAT_CAUSAL=") + (d.causal ? "1" : "0"),
                                    std::string("-DAT_LSE=") + (d.lse ? "1" : "0"),
                                    std::string("-DAT_BF16=") +
                                        (d.dtype == DType::bf16 ? "1" : "0"),
                                    std::string("-DAT_PINGPONG=") + (p.pingpong ? "1" : "0"),
                                    std::string("-DAT_OVERLAP=") + (p.overlap ? "1" : "0"),
                                    std::string("-DAT_ONE_P=") + (wgmma_one_p(p, d) ? "1" : "0"),
                                    std::string("-DAT_PERSISTENT=") + (p.persistent ? "1" : "0"),
                                    "-DAT_MIN_BLOCKS=" + std::to_string(wgmma_min_blocks(p, d)),
                                    std::string("-DAT_T=") + template_type(d.dtype)};
    if (p.cluster > 1) { // only when on: the other variants compile what they did before
      out.push_back("-DAT_CLUSTER=" + std::to_string(p.cluster));
    }
    // The features' flags only when on, as below.
    for (const auto& [on, define] :
         {std::pair{d.window, "-DAT_WINDOW=1"}, std::pair{d.softcap, "-DAT_SOFTCAP=1"},
          std::pair{d.alibi, "-DAT_ALIBI=1"}, std::pair{d.varlen, "-DAT_VARLEN=1"},
          std::pair{d.page > 0, "-DAT_PAGED=1"}}) {
      if (on) {
        out.push_back(define);
      }
    }
    return out;
  }
  std::vector<std::string> out = {"-DAT_BLOCK_M=" + std::to_string(p.block_m),
                                  "-DAT_BLOCK_N=" + std::to_string(p.block_n),
                                  "-DAT_WARPS=" + std::to_string(p.warps),
                                  "-DAT_STAGES=" + std::to_string(p.stages),
                                  std::string("-DAT_SWIZZLE=") + (p.swizzle ? "1" : "0"),
                                  std::string("-DAT_Q_REGS=") + (p.q_regs ? "1" : "0"),
                                  "-DAT_HEAD_DIM=" + std::to_string(d.D),
                                  std::string("-DAT_CAUSAL=") + (d.causal ? "1" : "0"),
                                  std::string("-DAT_LSE=") + (d.lse ? "1" : "0"),
                                  "-DAT_SPLITS=" + std::to_string(p.splits),
                                  std::string("-DAT_T=") + template_type(d.dtype)};
  // The features' flags only when on: a problem without them compiles what it did
  // before they existed.
  for (const auto& [on, define] :
       {std::pair{d.window, "-DAT_WINDOW=1"}, std::pair{d.softcap, "-DAT_SOFTCAP=1"},
        std::pair{d.alibi, "-DAT_ALIBI=1"}, std::pair{d.varlen, "-DAT_VARLEN=1"},
        std::pair{d.kvcache, "-DAT_KVCACHE=1"}, std::pair{d.grouped_sq > 0, "-DAT_GROUPED=1"}}) {
    if (on) {
      out.push_back(define);
    }
  }
  return out;
}

LaunchGeometry AttentionOp::geometry(const Config& config, const Problem& problem) const {
  Params p = params(config);
  Dims d = dims(problem);
  LaunchGeometry g;
  g.block[0] = p.wgmma ? unsigned(128 * (wgmma_consumers(p) + 1)) : unsigned(32 * p.warps);
  // Clusters take whole pairs of query blocks: an odd count gets one more block, whose
  // rows are all past Sq (it loads its share of K and V and stores nothing).
  const long long m_blocks = (d.Sq + p.block_m - 1) / p.block_m;
  g.grid[0] = unsigned((m_blocks + p.cluster - 1) / p.cluster * p.cluster * p.splits);
  g.grid[1] = unsigned(d.Hq);
  g.grid[2] = unsigned(d.B);
  if (p.persistent) {
    g.grid[0] = unsigned(std::min(query_tiles(p, d), k_persistent_sms * wgmma_min_blocks(p, d)));
    g.grid[1] = g.grid[2] = 1;
  }
  g.dynamic_smem = unsigned(smem_bytes(p, d));
  return g;
}

AttentionOp::Strides AttentionOp::contiguous_strides(const Problem& problem, long long heads,
                                                     long long seq) {
  Dims d = dims(problem);
  if (d.bhsd) {
    return {heads * seq * d.D, seq * d.D, d.D};
  }
  return {seq * heads * d.D, d.D, heads * d.D};
}

std::vector<TensorSpec> AttentionOp::tensors(const Problem& problem) const {
  Dims d = dims(problem);
  // varlen: q, o [Tq, Hq, D], k, v [Tk, Hkv, D], lse [Hq, Tq] over the packed tokens.
  const long long rows_q = d.varlen ? varlen_tokens(d.Tq, d.B, d.Sq) : d.B * d.Sq;
  // kvcache: the cache, B * ceil(Sk / page) pages of page keys (paged), else B * Sk keys.
  const long long rows_k = d.page > 0 ? d.B * kvcache_pages_per_seq(d) * d.page
                           : d.varlen ? varlen_tokens(d.Tk, d.B, d.Sk)
                                      : d.B * d.Sk;
  size_t nq = size_t(rows_q * d.Hq * d.D);
  size_t nk = size_t(rows_k * d.Hkv * d.D);
  // Q drawn wider than K so that the softmax is far from flat (a check that
  // averages V uniformly would hide indexing errors).
  std::vector<TensorSpec> t = {{"q", d.dtype, nq, false, -2.0f, 2.0f},
                               {"k", d.dtype, nk, false, -1.0f, 1.0f},
                               {"v", d.dtype, nk, false, -1.0f, 1.0f},
                               {"o", d.dtype, nq, true}};
  if (d.lse) {
    t.push_back({"lse", DType::f32, size_t(rows_q * d.Hq), true});
  }
  if (split_eligible(d)) {
    // For split-KV variants, zero-filled (the counters must start at zero).
    t.push_back({"workspace", DType::f32, tuner_workspace_bytes(d) / 4, false, 0.0f, 0.0f});
  }
  if (d.alibi) {
    t.push_back({"alibi_slopes", DType::f32, size_t(d.Hq), false, 0.01f, 0.1f});
  }
  if (d.varlen) {
    // int32 offsets in 4-byte elements (TensorSpec::values); with a paged cache the keys'
    // count each sequence's keys in its pages.
    const long long keys = varlen_tokens(d.Tk, d.B, d.Sk);
    for (const auto& [name, rows, longest] :
         {std::tuple{"cu_seqlens_q", rows_q, d.Sq}, std::tuple{"cu_seqlens_k", keys, d.Sk}}) {
      TensorSpec s{name, DType::f32, size_t(d.B + 1), false};
      s.values = cumulative(varlen_lengths(d.B, longest, rows));
      t.push_back(std::move(s));
    }
  }
  if (d.kvcache) {
    if (!d.varlen) {
      TensorSpec lengths{"cache_seqlens", DType::f32, size_t(d.B), false};
      lengths.values = kvcache_lengths(d.B, d.Sk);
      t.push_back(std::move(lengths));
    }
    if (d.page > 0) {
      TensorSpec table{"block_table", DType::f32, size_t(d.B * kvcache_pages_per_seq(d)), false};
      table.values = kvcache_block_table(d);
      t.push_back(std::move(table));
    }
  }
  return t;
}

size_t AttentionOp::workspace_bytes(const Config& config, const Problem& problem) const {
  return split_workspace_bytes(params(config), dims(problem));
}

size_t AttentionOp::split_counter_bytes(const Problem& problem) {
  return size_t(split_counter_words(dims(problem))) * 4;
}

namespace {

// The fields both kernel families' argument structs share: o's strides, the sizes and
// the softmax scale in log2 units (scale 0: 1/sqrt(D)).
template <typename Args>
void fill_output_and_sizes(Args& a, const Dims& d, const AttentionCall& call) {
  a.o_batch_stride = call.o_batch_stride;
  a.o_head_stride = call.o_head_stride;
  a.o_seq_stride = call.o_seq_stride;
  a.heads_q = int(d.Hq);
  a.heads_kv = int(d.Hkv);
  a.seq_q = int(d.Sq);
  a.seq_k = int(d.Sk);
  const double scale = call.scale > 0 ? call.scale : 1.0 / std::sqrt(double(d.D));
  a.scale_log2 = float(scale * 1.4426950408889634);
}

// The varlen fields both families' argument structs share. Each sequence's offsets are
// clamped on the GPU into the rows of q and of k (at_packed_span in kernel.cuh), which the
// call must therefore give; a paged cache's cu_seqlens_k counts keys (bounded by the
// table's row instead), so its bound is INT_MAX.
template <typename Args> void fill_varlen(Args& a, const Dims& d, const AttentionCall& call) {
  if (!d.varlen) {
    return;
  }
  const bool counted_keys = d.page > 0 || d.kvcache;
  if (call.tokens_q <= 0 || (call.tokens_k <= 0 && !counted_keys)) {
    throw Error(ErrorKind::usage, "attention: a varlen call needs the packed token counts of "
                                  "q and k (AttentionCall::tokens_q/tokens_k)");
  }
  constexpr long long k_int_max = std::numeric_limits<int>::max();
  a.cu_seqlens_q = call.cu_seqlens_q;
  a.cu_seqlens_k = call.cu_seqlens_k;
  a.lse_head_stride = call.lse_head_stride;
  a.tokens_q = int(std::min(call.tokens_q, k_int_max));
  a.tokens_k = int(counted_keys ? k_int_max : std::min(call.tokens_k, k_int_max));
}

// The window, softcap and ALiBi fields both families' argument structs share (after
// fill_output_and_sizes, whose scale_log2 softcap replaces): softcap's tanh takes scale /
// softcap per score and the logits are softcap times it.
template <typename Args> void fill_features(Args& a, const Dims& d, const AttentionCall& call) {
  const double scale = call.scale > 0 ? call.scale : 1.0 / std::sqrt(double(d.D));
  double logit_factor = scale;
  a.window_left = a.window_right = -1;
  if (d.window) {
    a.window_left = call.window_left;
    a.window_right = call.window_right;
  }
  if (d.softcap) {
    a.softcap_scale = float(scale / call.softcap);
    logit_factor = call.softcap;
    a.scale_log2 = float(call.softcap * 1.4426950408889634);
  }
  if (d.alibi) {
    a.alibi_slopes = call.alibi_slopes;
    a.alibi_batch_stride = call.alibi_batch_stride;
    a.alibi_scale = float(1.0 / logit_factor);
  }
}

using AttnArgs = AttentionKernelArgs;
static_assert(sizeof(AttnArgs) <= k_kernel_args_capacity, "AttnArgs fits CallPlan::pack");

// Refuses feature values the problem's kernel cannot take: a bad window bound, a
// softcap that is not positive, no slopes for an ALiBi problem.
void check_features(const Dims& d, const AttentionCall& call) {
  if (d.window) {
    for (const auto& [value, name] : {std::pair{call.window_left, "window_left"},
                                      std::pair{call.window_right, "window_right"}}) {
      if (value < -1) {
        throw Error(ErrorKind::usage, std::string("attention: ") + name +
                                          " must be -1 (unbounded) "
                                          "or a number of keys >= 0, not " +
                                          std::to_string(value));
      }
    }
  }
  if (d.softcap && (!(call.softcap > 0) || !std::isfinite(call.softcap))) {
    throw Error(ErrorKind::usage, "attention: softcap must be positive and finite (0: off), not " +
                                      std::to_string(call.softcap));
  }
  if (d.alibi && !call.alibi_slopes) {
    throw Error(ErrorKind::usage, "attention: the problem has alibi=1 but alibi_slopes is NULL");
  }
  if (d.varlen && (!call.cu_seqlens_q || !call.cu_seqlens_k)) {
    throw Error(ErrorKind::usage,
                "attention: the problem has varlen=1 but cu_seqlens_q or cu_seqlens_k is NULL");
  }
  if (d.kvcache) {
    if (!call.cache_seqlens && !d.varlen) {
      throw Error(ErrorKind::usage, "attention: a KV cache problem needs cache_seqlens");
    }
    if (d.page > 0 && !call.block_table) {
      throw Error(ErrorKind::usage, "attention: the problem has paged=1 but block_table is NULL");
    }
    if (call.block_table && call.page_size != d.page) {
      throw Error(ErrorKind::usage, "attention: the KV cache's block size is " +
                                        std::to_string(call.page_size) + ", the problem's page " +
                                        std::to_string(d.page));
    }
    if (call.kv_capacity < 1 || call.num_pages < 1) {
      throw Error(ErrorKind::usage, "attention: the KV cache holds no keys");
    }
    if (call.cache_leftpad && call.block_table) {
      throw Error(ErrorKind::usage,
                  "attention: cache_leftpad is not supported with a paged KV cache (block_table)");
    }
    if (call.cache_batch_idx && call.block_table) {
      throw Error(ErrorKind::usage, "attention: cache_batch_idx is not supported with a paged "
                                    "KV cache (block_table)");
    }
    if (call.seq_new < 0 || call.seq_new > call.kv_capacity ||
        (call.seq_new > 0) != bool(call.k_new) || bool(call.k_new) != bool(call.v_new)) {
      throw Error(ErrorKind::usage, "attention: k_new and v_new (given together) append Snew=" +
                                        std::to_string(call.seq_new) + " rows, at most the " +
                                        std::to_string(call.kv_capacity) +
                                        " keys a sequence's cache holds");
    }
  }
}

AttnArgs attention_kernel_args(const Params& p, const Dims& d, const Config& config,
                               const AttentionCall& call) {
  if (!(call.scale >= 0) || !std::isfinite(call.scale)) {
    throw Error(ErrorKind::usage, "attention: scale must be positive and finite (0: 1/sqrt(D))");
  }
  check_features(d, call);
  const size_t need = split_workspace_bytes(p, d);
  if (need > 0 && (!call.workspace || call.workspace_bytes < need || call.workspace % 16 != 0)) {
    throw Error(ErrorKind::usage, "attention: variant '" + format_fields(config) +
                                      "' splits the keys " + std::to_string(p.splits) +
                                      " ways and needs a 16-byte aligned, zero-filled "
                                      "workspace of " +
                                      std::to_string(need) + " bytes (given " +
                                      std::to_string(call.workspace_bytes) +
                                      "); Runtime::attention_workspace_size reports it");
  }
  AttnArgs a{};
  a.q = call.q;
  a.k = call.k;
  a.v = call.v;
  a.o = call.o;
  a.lse = call.lse;
  a.q_batch_stride = call.q_batch_stride;
  a.q_head_stride = call.q_head_stride;
  a.q_seq_stride = call.q_seq_stride;
  a.k_batch_stride = call.k_batch_stride;
  a.k_head_stride = call.k_head_stride;
  a.k_seq_stride = call.k_seq_stride;
  a.v_batch_stride = call.v_batch_stride;
  a.v_head_stride = call.v_head_stride;
  a.v_seq_stride = call.v_seq_stride;
  fill_output_and_sizes(a, d, call);
  if (need > 0) {
    const long long rows = d.B * d.Hq * d.Sq;
    a.ws_count = call.workspace;
    a.ws_o = a.ws_count + CUdeviceptr(split_counter_words(d) * 4);
    a.ws_lse = a.ws_o + CUdeviceptr(p.splits * rows * d.D * 4);
  }
  a.batch = int(d.B);
  a.group_sq = int(d.grouped_sq);
  a.q_group_stride = call.q_group_stride;
  a.o_group_stride = call.o_group_stride;
  fill_features(a, d, call);
  fill_varlen(a, d, call);
  if (d.kvcache) {
    a.cache_seqlens = call.cache_seqlens;
    a.block_table = call.block_table;
    a.block_table_stride = call.block_table_stride;
    a.page_size = call.block_table ? call.page_size : 0;
    a.num_pages = call.num_pages;
    a.kv_capacity = call.kv_capacity;
    a.seq_new = call.seq_new;
    a.k_new = call.k_new;
    a.v_new = call.v_new;
    a.kn_batch_stride = call.kn_batch_stride;
    a.kn_head_stride = call.kn_head_stride;
    a.kn_seq_stride = call.kn_seq_stride;
    a.vn_batch_stride = call.vn_batch_stride;
    a.vn_head_stride = call.vn_head_stride;
    a.vn_seq_stride = call.vn_seq_stride;
    a.cache_leftpad = call.cache_leftpad;
    a.cache_batch_idx = call.cache_batch_idx;
  }
  return a;
}

using HopperArgs = AttentionHopperKernelArgs;
static_assert(sizeof(HopperArgs) <= k_kernel_args_capacity, "HopperArgs fits CallPlan::pack");

// A tensor's tensor map: what it was built from, and the map.
struct TensorMap {
  CUdeviceptr ptr = 0;
  long long batch = 0, head = 0, seq = 0;
  long long seq_len = 0; // the rows it spans (a varlen plan serves several token counts)
  long long batches = 0; // its batch extent (a paged cache's pages)
  CUtensorMap map{};
  int seq_inner = 1;
};

// The 4-d tensor map of a [B, H, S, D] tensor (strides in elements, D contiguous) for
// boxes of `rows` rows and 64 columns, 128-byte swizzled (hopper.cuh's AttnArgs says
// how the dimensions are ordered).
TensorMap encode_map(const char* name, CUdeviceptr ptr, const Dims& d, long long heads,
                     long long seq_len, long long batch_stride, long long head_stride,
                     long long seq_stride, int rows) {
  TensorMap t;
  t.ptr = ptr;
  t.seq_len = seq_len;
  t.batches = d.B;
  t.batch = batch_stride;
  t.head = head_stride;
  t.seq = seq_stride;
  const long long e = dtype_size(d.dtype);
  // An extent-1 dimension's stride is never stepped: any valid value will do.
  const long long span = (heads * seq_len * d.D * e + 15) / 16 * 16;
  auto bytes = [&](long long stride, long long extent) { return extent == 1 ? span : stride * e; };
  const long long sb = bytes(batch_stride, d.B);
  const long long sh = bytes(head_stride, heads);
  const long long ss = bytes(seq_stride, seq_len);
  for (long long v : {sb, sh, ss}) {
    if (v <= 0 || v % 16 != 0 || v >= (1LL << 40)) {
      throw Error(ErrorKind::usage,
                  std::string("attention: family=wgmma loads ") + name +
                      " with tensor maps, which need its batch, head and sequence strides to be "
                      "positive multiples of 16 bytes (8 elements); got " +
                      std::to_string(batch_stride) + ", " + std::to_string(head_stride) + ", " +
                      std::to_string(seq_stride) + " elements");
    }
  }
  if (ptr % 16 != 0) {
    throw Error(ErrorKind::usage,
                std::string("attention: family=wgmma needs ") + name + " 16-byte aligned");
  }
  t.seq_inner = ss <= sh ? 1 : 0;
  const cuuint64_t dims4[4] = {cuuint64_t(d.D), cuuint64_t(t.seq_inner ? seq_len : heads),
                               cuuint64_t(t.seq_inner ? heads : seq_len), cuuint64_t(d.B)};
  const cuuint64_t strides[3] = {cuuint64_t(t.seq_inner ? ss : sh),
                                 cuuint64_t(t.seq_inner ? sh : ss), cuuint64_t(sb)};
  const cuuint32_t box[4] = {64, cuuint32_t(t.seq_inner ? rows : 1),
                             cuuint32_t(t.seq_inner ? 1 : rows), 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const std::string what = std::string("attention: cuTensorMapEncodeTiled of ") + name;
  cuda::encode_tensor_map_tiled(&t.map,
                                d.dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                4, reinterpret_cast<void*>(ptr), dims4, strides, box, unit,
                                CU_TENSOR_MAP_SWIZZLE_128B, what.c_str());
  return t;
}

// The last tensor maps a plan built, per tensor: a warm call with the same pointer,
// strides and rows reuses them (encoding costs about a microsecond of host time). The rows
// count: calls of one varlen bucket share a plan, and a buffer the caching allocator hands
// out again at the same address may hold another number of tokens (a map of the old
// extent would read the new rows past it as zeros).
class MapCache {
public:
  const TensorMap& get(int slot, const char* name, CUdeviceptr ptr, const Dims& d, long long heads,
                       long long seq_len, long long sb, long long sh, long long ss, int rows) {
    TensorMap& t = m_maps[slot];
    if (!m_valid[slot] || t.ptr != ptr || t.batch != sb || t.head != sh || t.seq != ss ||
        t.seq_len != seq_len || t.batches != d.B) {
      t = encode_map(name, ptr, d, heads, seq_len, sb, sh, ss, rows);
      m_valid[slot] = true;
    }
    return t;
  }

private:
  TensorMap m_maps[3];
  bool m_valid[3] = {false, false, false};
};

HopperArgs hopper_kernel_args(const Params& p, const Dims& d, const AttentionCall& call,
                              MapCache& maps) {
  if (!(call.scale >= 0) || !std::isfinite(call.scale)) {
    throw Error(ErrorKind::usage, "attention: scale must be positive and finite (0: 1/sqrt(D))");
  }
  check_features(d, call);
  HopperArgs a{};
  fill_varlen(a, d, call);
  // Packed sequences: maps over all the tokens of one batch (the rows a tile loads count
  // from its sequence's first token).
  Dims md = d;
  long long rows_q = d.Sq, rows_k = d.Sk;
  if (d.varlen) {
    md.B = 1;
    rows_q = call.tokens_q;
    rows_k = call.tokens_k;
  }
  // K and V's maps: as q's, or (a paged cache) pages of page_size rows, the page the batch.
  Dims kd = md;
  if (d.varlen && d.page > 0) {
    if (call.page_size != d.page || call.num_pages < 1 || !call.block_table) {
      throw Error(ErrorKind::usage, "attention: a paged varlen call of family=wgmma needs its "
                                    "block table, pages and page size " +
                                        std::to_string(d.page));
    }
    kd.B = call.num_pages;
    rows_k = call.page_size;
  }
  const TensorMap& q = maps.get(0, "q", call.q, md, d.Hq, rows_q, call.q_batch_stride,
                                call.q_head_stride, call.q_seq_stride, p.block_m);
  a.q_map = q.map;
  a.q_seq_inner = q.seq_inner;
  // A cluster's blocks each load 1 / cluster of every K and V tile.
  const TensorMap& k = maps.get(1, "k", call.k, kd, d.Hkv, rows_k, call.k_batch_stride,
                                call.k_head_stride, call.k_seq_stride, p.block_n / p.cluster);
  a.k_map = k.map;
  a.k_seq_inner = k.seq_inner;
  const TensorMap& v = maps.get(2, "v", call.v, kd, d.Hkv, rows_k, call.v_batch_stride,
                                call.v_head_stride, call.v_seq_stride, p.block_n / p.cluster);
  a.v_map = v.map;
  a.v_seq_inner = v.seq_inner;
  a.o = call.o;
  a.lse = call.lse;
  fill_output_and_sizes(a, d, call);
  fill_features(a, d, call);
  a.batch = int(d.B);
  a.sched_group = causal_sched_group(d);
  if (d.varlen && d.page > 0) {
    a.block_table = call.block_table;
    a.block_table_stride = call.block_table_stride;
    a.page_size = call.page_size;
    a.kv_capacity = call.kv_capacity;
  }
  return a;
}

// A call of a problem whose query heads run as rows (Dims::heads_as_rows = g): q and o
// [B, Hq, 1, D] seen as [B, Hkv, g, D], row i of head h being q head h * g + i; with
// several queries (Dims::grouped_sq), a head steps g q heads and the group stride one.
void rows_from_heads(AttentionCall& c, const Dims& d) {
  if (d.heads_as_rows == 0) {
    return;
  }
  if (d.grouped_sq > 0) {
    c.q_group_stride = c.q_head_stride;
    c.o_group_stride = c.o_head_stride;
  } else {
    c.q_seq_stride = c.q_head_stride;
    c.o_seq_stride = c.o_head_stride;
  }
  c.q_head_stride *= d.heads_as_rows;
  c.o_head_stride *= d.heads_as_rows;
}

struct AttentionPlan final : CallPlan {
  Params params;
  Dims dims;
  Config config;
  mutable std::mutex maps_mutex; // plans are shared between calling threads
  mutable MapCache maps;
  size_t pack(const void* args, const BoundCall& call, void* out) const override {
    (void)call;
    const auto& a = *static_cast<const autotune_attention_args*>(args);
    AttentionCall c;
    c.q = device_ptr(a.q);
    c.k = device_ptr(a.k);
    c.v = device_ptr(a.v);
    c.o = device_ptr(a.o);
    c.lse = device_ptr(a.lse);
    // A [batch, head, seq, D] tensor's three outer strides.
    const auto strides = [](const TensorArg& t, long long& batch, long long& head, long long& seq) {
      batch = t.strides[0];
      head = t.strides[1];
      seq = t.strides[2];
    };
    strides(a.q, c.q_batch_stride, c.q_head_stride, c.q_seq_stride);
    strides(a.k, c.k_batch_stride, c.k_head_stride, c.k_seq_stride);
    strides(a.v, c.v_batch_stride, c.v_head_stride, c.v_seq_stride);
    strides(a.o, c.o_batch_stride, c.o_head_stride, c.o_seq_stride);
    c.scale = a.scale; // 0: 1/sqrt(D); a negative or NaN scale is refused by the check
    c.workspace = reinterpret_cast<CUdeviceptr>(a.workspace);
    c.workspace_bytes = size_t(a.workspace_bytes);
    c.window_left = a.window_left;
    c.window_right = a.window_right;
    c.softcap = a.softcap;
    c.alibi_slopes = device_ptr(a.alibi_slopes);
    // [B, Hq] steps Hq floats per batch (contiguous); [Hq] serves every batch.
    c.alibi_batch_stride =
        a.alibi_slopes.ndim == 2 && a.alibi_slopes.shape[0] > 1 ? a.alibi_slopes.strides[0] : 0;
    if (dims.varlen) {
      // Packed [T, H, D] tensors: token and head strides; the sequences' offsets say where
      // each batch starts. lse [Hq, Tq]: its head stride is Tq.
      // (K and V of a paged cache keep their page strides, below.)
      for (auto [t, batch, head, seq] :
           {std::tuple{&a.q, &c.q_batch_stride, &c.q_head_stride, &c.q_seq_stride},
            std::tuple{&a.k, &c.k_batch_stride, &c.k_head_stride, &c.k_seq_stride},
            std::tuple{&a.v, &c.v_batch_stride, &c.v_head_stride, &c.v_seq_stride},
            std::tuple{&a.o, &c.o_batch_stride, &c.o_head_stride, &c.o_seq_stride}}) {
        if (t->ndim == 3) {
          *batch = 0;
          *seq = t->strides[0];
          *head = t->strides[1];
        }
      }
      c.cu_seqlens_q = device_ptr(a.cu_seqlens_q);
      c.cu_seqlens_k = device_ptr(a.cu_seqlens_k);
      c.lse_head_stride = a.lse.data ? a.lse.shape[1] : 0;
      c.tokens_q = a.q.shape[0];
      c.tokens_k = dims.kvcache ? 0 : a.k.shape[0];
    }
    if (dims.kvcache) {
      // k, v: [num_blocks, Hkv, page, D] with a block table (the batch strides step
      // pages), else [B, Hkv, Scache, D]; k_new, v_new [B, Hkv, Snew, D].
      c.cache_seqlens = device_ptr(a.cache_seqlens);
      c.cache_leftpad = device_ptr(a.cache_leftpad);
      c.cache_batch_idx = device_ptr(a.cache_batch_idx);
      c.num_pages = int(a.k.shape[0]);
      if (a.block_table.data) {
        c.block_table = device_ptr(a.block_table);
        c.block_table_stride = a.block_table.strides[0];
        c.page_size = int(a.k.shape[2]);
        const long long capacity = a.block_table.shape[1] * a.k.shape[2];
        c.kv_capacity = int(std::min<long long>(capacity, 0x7fffffff));
      } else {
        c.kv_capacity = int(a.k.shape[2]);
      }
      if (a.k_new.data && a.v_new.data) {
        c.k_new = device_ptr(a.k_new);
        c.v_new = device_ptr(a.v_new);
        c.seq_new = int(a.k_new.shape[2]);
        strides(a.k_new, c.kn_batch_stride, c.kn_head_stride, c.kn_seq_stride);
        strides(a.v_new, c.vn_batch_stride, c.vn_head_stride, c.vn_seq_stride);
      }
    }
    rows_from_heads(c, dims);
    if (params.wgmma) {
      std::lock_guard<std::mutex> lock(maps_mutex);
      HopperArgs k = hopper_kernel_args(params, dims, c, maps);
      if (params.persistent && dims.causal) {
        k.sched_slot = next_sched_slot();
      }
      std::memcpy(out, &k, sizeof k);
      return sizeof k;
    }
    AttnArgs k = attention_kernel_args(params, dims, config, c);
    std::memcpy(out, &k, sizeof k);
    return sizeof k;
  }
};

// The layout bucket of a call: Q's head stride above its sequence stride is the
// [B, H, S, D] family. And the softcap flag: whether the call gives one (a negative or
// NaN softcap is on, and refused when the call is packed). 9, 11: the indices of
// "layout" and "softcap" in args_desc()'s fields.
constexpr size_t k_layout_field = 9;
constexpr size_t k_softcap_field = 11;
// A varlen call's longest sequences (3, 4) and totals (14, 15) are bucketed here, so
// that calls of one bucket share a signature (and a plan) as they share a tuning key.
constexpr size_t k_sq_field = 3, k_sk_field = 4, k_varlen_field = 13, k_tq_field = 14,
                 k_tk_field = 15;
// A KV cache's size per sequence (Sk) is bucketed the same way: the block table's
// blocks_per_seq (20) times the page (18) when paged (17), else the cache's Scache.
constexpr size_t k_kvcache_field = 16, k_paged_field = 17, k_page_field = 18,
                 k_blocks_per_seq_field = 20;
// Whether q, k or v of a plain or varlen call steps a dimension of several elements
// with stride 0 (24: "bcast").
constexpr size_t k_bcast_field = 24;
void derive_layout(const void* args, CallValues& values) {
  const auto& a = *static_cast<const autotune_attention_args*>(args);
  values[k_layout_field] = a.q.data && a.q.ndim == 4 && a.q.strides[1] > a.q.strides[2] ? 1 : 0;
  values[k_softcap_field] = a.softcap != 0 ? 1 : 0;
  values[k_bcast_field] = 0;
  if (values[k_kvcache_field] != 1) {
    for (const autotune_tensor* t : {&a.q, &a.k, &a.v}) {
      for (int i = 0; t->data && i + 1 < t->ndim && i + 1 < AUTOTUNE_MAX_DIMS; ++i) {
        if (t->shape[i] > 1 && t->strides[i] == 0) {
          values[k_bcast_field] = 1;
        }
      }
    }
  }
  if (values[k_varlen_field] == 1) {
    for (size_t f : {k_sq_field, k_sk_field, k_tq_field, k_tk_field}) {
      if (values[f] > 0) { // unbound fields are refused after this
        values[f] = varlen_bucket(values[f]);
      }
    }
  }
  if (values[k_varlen_field] == 1) {
    // A paged cache's keys per sequence come from cu_seqlens_k (bucketed with Sk above).
  } else if (values[k_paged_field] == 1 && values[k_page_field] > 0 &&
             values[k_blocks_per_seq_field] > 0) {
    values[k_sk_field] = varlen_bucket(values[k_blocks_per_seq_field] * values[k_page_field]);
  } else if (values[k_kvcache_field] == 1 && values[k_sk_field] > 0) {
    values[k_sk_field] = varlen_bucket(values[k_sk_field]);
  }
}

} // namespace

const ArgsDesc& AttentionOp::args_desc() const {
  using A = autotune_attention_args;
  enum : int8_t {
    B,
    Hq,
    Hkv,
    Sq,
    Sk,
    D,
    causal,
    dtype,
    lse,
    layout,
    window,
    softcap,
    alibi,
    varlen,
    Tq,
    Tk,
    kvcache,
    paged,
    page,
    num_blocks,
    blocks_per_seq,
    append,
    Snew,
    leftpad,
    bcast,
    B_cache,
    batch_idx
  };
  // Rows move as 16-byte chunks (cp.async, vector stores): 8 elements of 16 bits.
  constexpr int chunk = 8;
  // q, k, v, o: [B, heads, seq, D], or packed [tokens, heads, D] when varlen.
  const auto rows = [&](const char* name, size_t offset, int8_t heads, int8_t seq, int8_t tokens,
                        bool output) {
    return std::vector<TensorRule>{{name,
                                    offset,
                                    {{B}, {heads}, {seq}, {D}},
                                    dtype,
                                    k_fp16_bf16,
                                    -1,
                                    output,
                                    StrideRule::rows,
                                    chunk,
                                    {{varlen, 0}}},
                                   {name,
                                    offset,
                                    {{tokens}, {heads}, {D}},
                                    dtype,
                                    k_fp16_bf16,
                                    -1,
                                    output,
                                    StrideRule::rows,
                                    chunk,
                                    {{varlen, 1}},
                                    "varlen"}};
  };
  // k, v of a KV cache in a form that applies when the struct's tensor at `given` is:
  // a paged cache [num_blocks, Hkv, page, D] (block_table given), or a contiguous cache
  // read through cache_batch_idx, a pool of slots [B_cache, Hkv, Scache, D].
  const auto cache_form = [&](const char* name, size_t offset, int8_t batch, int8_t seq,
                              const char* form, size_t given) {
    return TensorRule{name,
                      offset,
                      {{batch}, {Hkv}, {seq}, {D}},
                      dtype,
                      k_fp16_bf16,
                      -1,
                      false,
                      StrideRule::rows,
                      chunk,
                      {},
                      form,
                      AUTOTUNE_FP32,
                      given};
  };
  const auto pages = [&](const char* name, size_t offset) {
    return cache_form(name, offset, num_blocks, page, "paged", offsetof(A, block_table));
  };
  const auto slots = [&](const char* name, size_t offset) {
    return cache_form(name, offset, B_cache, Sk, "cache slots", offsetof(A, cache_batch_idx));
  };
  // int32 tensors of varlen and the KV cache (appended after the features' scalars).
  const auto int32 = [&](const char* name, size_t offset, std::vector<DimRule> dims,
                         int8_t presence, StrideRule strides) {
    return TensorRule{name, offset,  std::move(dims), -1, 0, presence, false, strides, 1,
                      {},   nullptr, AUTOTUNE_INT32};
  };
  // k_new, v_new [B, Hkv, Snew, D]: the rows appended to the cache.
  const auto appended = [&](const char* name, size_t offset) {
    return TensorRule{name,   offset, {{B}, {Hkv}, {Snew}, {D}}, dtype, k_fp16_bf16,
                      append, false,  StrideRule::rows,          chunk};
  };
  static const std::vector<TensorRule> tensors = [&] {
    std::vector<TensorRule> t;
    const auto add = [&t](std::vector<TensorRule> forms) {
      t.insert(t.end(), forms.begin(), forms.end());
    };
    add(rows("q", offsetof(A, q), Hq, Sq, Tq, false));
    add(rows("k", offsetof(A, k), Hkv, Sk, Tk, false));
    t.push_back(slots("k", offsetof(A, k)));
    // After slots: with a block table and cache_batch_idx both given, the pages form
    // binds and the problem refuses the pair by name.
    t.push_back(pages("k", offsetof(A, k)));
    add(rows("v", offsetof(A, v), Hkv, Sk, Tk, false));
    t.push_back(slots("v", offsetof(A, v)));
    t.push_back(pages("v", offsetof(A, v)));
    add(rows("o", offsetof(A, o), Hq, Sq, Tq, true));
    add({{"lse",
          offsetof(A, lse),
          {{B}, {Hq}, {Sq}},
          -1,
          k_fp32,
          lse,
          true,
          StrideRule::contiguous,
          1,
          {{varlen, 0}}},
         {"lse",
          offsetof(A, lse),
          {{Hq}, {Tq}},
          -1,
          k_fp32,
          lse,
          true,
          StrideRule::contiguous,
          1,
          {{varlen, 1}},
          "varlen"}});
    // After the scalars in the struct (appended later); two forms.
    add({{"alibi_slopes",
          offsetof(A, alibi_slopes),
          {{Hq}},
          -1,
          k_fp32,
          alibi,
          false,
          StrideRule::contiguous,
          1,
          {},
          "per head"},
         {"alibi_slopes",
          offsetof(A, alibi_slopes),
          {{B}, {Hq}},
          -1,
          k_fp32,
          alibi,
          false,
          StrideRule::contiguous,
          1,
          {},
          "per batch and head"}});
    t.push_back(
        int32("cu_seqlens_q", offsetof(A, cu_seqlens_q), {{B, 1}}, varlen, StrideRule::contiguous));
    t.push_back(
        int32("cu_seqlens_k", offsetof(A, cu_seqlens_k), {{B, 1}}, varlen, StrideRule::contiguous));
    // Appended after max_seqlen_k: the KV cache's lengths and block table and the rows to
    // append.
    t.push_back(
        int32("cache_seqlens", offsetof(A, cache_seqlens), {{B}}, kvcache, StrideRule::contiguous));
    t.push_back(int32("block_table", offsetof(A, block_table), {{B}, {blocks_per_seq}}, paged,
                      StrideRule::rows));
    t.push_back(appended("k_new", offsetof(A, k_new)));
    t.push_back(appended("v_new", offsetof(A, v_new)));
    // Appended after v_new: where each sequence's keys start in a contiguous cache.
    t.push_back(
        int32("cache_leftpad", offsetof(A, cache_leftpad), {{B}}, leftpad, StrideRule::contiguous));
    // Appended after cache_leftpad: the cache slot of each sequence.
    t.push_back(int32("cache_batch_idx", offsetof(A, cache_batch_idx), {{B}}, batch_idx,
                      StrideRule::contiguous));
    return t;
  }();
  static const ArgsDesc desc{"attention",
                             sizeof(A),
                             {{"B", FieldKind::size},
                              {"Hq", FieldKind::size},
                              {"Hkv", FieldKind::size},
                              {"Sq", FieldKind::size},
                              {"Sk", FieldKind::size},
                              {"D", FieldKind::size, -1, {}, 4.0},
                              {"causal", FieldKind::flag},
                              {"dtype", FieldKind::dtype},
                              {"lse", FieldKind::flag},
                              {"layout", FieldKind::choice, 0, {"bshd", "bhsd"}},
                              {"window", FieldKind::flag},
                              {"softcap", FieldKind::flag, 0},
                              {"alibi", FieldKind::flag},
                              {"varlen", FieldKind::flag, 0},
                              {"Tq", FieldKind::size, 0},
                              {"Tk", FieldKind::size, 0},
                              {"kvcache", FieldKind::flag, 0},
                              {"paged", FieldKind::flag, 0},
                              {"page", FieldKind::size, 0},
                              {"num_blocks", FieldKind::size, 0},
                              {"blocks_per_seq", FieldKind::size, 0},
                              {"append", FieldKind::flag, 0},
                              {"Snew", FieldKind::size, 0},
                              {"leftpad", FieldKind::flag, 0},
                              {"bcast", FieldKind::flag, 0},
                              {"B_cache", FieldKind::size, 0},
                              {"batch_idx", FieldKind::flag, 0}},
                             tensors,
                             {{"causal", offsetof(A, causal), ScalarKind::i32, causal},
                              {"scale", offsetof(A, scale), ScalarKind::f64},
                              {"workspace", offsetof(A, workspace), ScalarKind::ptr},
                              {"workspace_bytes", offsetof(A, workspace_bytes), ScalarKind::u64},
                              {"window", offsetof(A, window), ScalarKind::i32, window},
                              {"window_left", offsetof(A, window_left), ScalarKind::i32},
                              {"window_right", offsetof(A, window_right), ScalarKind::i32},
                              {"softcap", offsetof(A, softcap), ScalarKind::f64},
                              {"max_seqlen_q", offsetof(A, max_seqlen_q), ScalarKind::i32, Sq},
                              {"max_seqlen_k", offsetof(A, max_seqlen_k), ScalarKind::i32, Sk}},
                             derive_layout};
  static const bool layout_index_ok =
      desc.field("layout") == int(k_layout_field) &&
      desc.field("softcap") == int(k_softcap_field) && desc.field("Sq") == int(k_sq_field) &&
      desc.field("Sk") == int(k_sk_field) && desc.field("varlen") == int(k_varlen_field) &&
      desc.field("Tq") == int(k_tq_field) && desc.field("Tk") == int(k_tk_field) &&
      desc.field("kvcache") == int(k_kvcache_field) && desc.field("paged") == int(k_paged_field) &&
      desc.field("page") == int(k_page_field) &&
      desc.field("blocks_per_seq") == int(k_blocks_per_seq_field) &&
      desc.field("bcast") == int(k_bcast_field);
  if (!layout_index_ok) {
    throw Error(ErrorKind::internal, "attention: derive_layout's field indices do not match "
                                     "args_desc()'s fields");
  }
  return desc;
}

std::unique_ptr<CallPlan> AttentionOp::plan(const Config& config, const Problem& problem) const {
  auto p = std::make_unique<AttentionPlan>();
  p->params = params(config);
  p->dims = dims(problem);
  p->config = config;
  p->geometry = geometry(config, problem);
  p->workspace_bytes = split_workspace_bytes(p->params, p->dims);
  return p;
}

void AttentionOp::pack_call(const Config& config, const Problem& problem,
                            const AttentionCall& described, ArgPack& args) const {
  const Params p = params(config);
  const Dims d = dims(problem);
  AttentionCall call = described;
  rows_from_heads(call, d);
  if (p.wgmma) {
    MapCache maps;
    args.add(hopper_kernel_args(p, d, call, maps));
    return;
  }
  args.add(attention_kernel_args(p, d, config, call));
}

namespace {

// The tuner's k and v strides: contiguous in the problem's layout, or pages of
// [num_blocks, page, Hkv, D] (the batch stride steps pages) for a paged cache.
AttentionOp::Strides kvcache_strides(const Problem& problem) {
  const Dims d = dims(problem);
  if (d.page > 0) {
    return {d.page * d.Hkv * d.D, d.D, d.Hkv * d.D};
  }
  return AttentionOp::contiguous_strides(problem, d.Hkv, d.Sk);
}

// The tuner's block table (paged problems): B * ceil(Sk / page) pages of page keys, each
// sequence's row of the table ceil(Sk / page) long.
void tuner_pages(AttentionCall& call, const Dims& d, CUdeviceptr table) {
  call.block_table = table;
  call.block_table_stride = kvcache_pages_per_seq(d);
  call.page_size = int(d.page);
  call.num_pages = int(d.B * kvcache_pages_per_seq(d));
  call.kv_capacity = int(kvcache_pages_per_seq(d) * d.page);
}

} // namespace

void AttentionOp::pack(const Config& config, const Problem& problem,
                       const std::vector<CUdeviceptr>& t, ArgPack& args) const {
  Dims d = dims(problem);
  AttentionCall call;
  call.q = t.at(0);
  call.k = t.at(1);
  call.v = t.at(2);
  call.o = t.at(3);
  size_t next = 4; // tensors() after q, k, v, o: lse, workspace, alibi_slopes when present
  call.lse = d.lse ? t.at(next++) : 0;
  if (split_eligible(d)) {
    call.workspace = t.at(next++);
    call.workspace_bytes = tuner_workspace_bytes(d);
  }
  const TuningFeatures f = tuning_features(d);
  call.window_left = f.left;
  call.window_right = f.right;
  call.softcap = f.softcap;
  if (d.alibi) {
    call.alibi_slopes = t.at(next++);
  }
  if (d.varlen) {
    // Packed [T, H, D]: token stride H * D, head stride D.
    call.cu_seqlens_q = t.at(next++);
    call.cu_seqlens_k = t.at(next++);
    call.lse_head_stride = varlen_tokens(d.Tq, d.B, d.Sq);
    call.tokens_q = call.lse_head_stride;
    call.tokens_k = varlen_tokens(d.Tk, d.B, d.Sk);
    call.q_batch_stride = call.o_batch_stride = call.k_batch_stride = call.v_batch_stride = 0;
    call.q_head_stride = call.o_head_stride = call.k_head_stride = call.v_head_stride = d.D;
    call.q_seq_stride = call.o_seq_stride = d.Hq * d.D;
    call.k_seq_stride = call.v_seq_stride = d.Hkv * d.D;
    if (d.page > 0) {
      // K and V are pages of a cache (flash_attn_varlen_func's block_table).
      const Strides ks = kvcache_strides(problem);
      call.k_batch_stride = call.v_batch_stride = ks.batch;
      call.k_head_stride = call.v_head_stride = ks.head;
      call.k_seq_stride = call.v_seq_stride = ks.seq;
      call.tokens_k = 0;
      tuner_pages(call, d, t.at(next++));
    }
    pack_call(config, problem, call, args);
    return;
  }
  // q and o as described ([B, Hq, 1, D] when the kernel runs heads as rows: pack_call
  // rewrites their strides as it does a user's call).
  const Dims described = described_dims(problem);
  Strides qs = contiguous_strides(problem, described.Hq, described.Sq);
  Strides ks = kvcache_strides(problem);
  if (d.kvcache) {
    call.cache_seqlens = t.at(next++);
    call.num_pages = int(d.B);
    call.kv_capacity = int(d.Sk);
    if (d.page > 0) {
      tuner_pages(call, d, t.at(next++));
    }
  }
  call.q_batch_stride = call.o_batch_stride = qs.batch;
  call.q_head_stride = call.o_head_stride = qs.head;
  call.q_seq_stride = call.o_seq_stride = qs.seq;
  call.k_batch_stride = call.v_batch_stride = ks.batch;
  call.k_head_stride = call.v_head_stride = ks.head;
  call.k_seq_stride = call.v_seq_stride = ks.seq;
  pack_call(config, problem, call, args);
}

std::string AttentionOp::reference_kernel(const Problem& problem) const {
  return dims(problem).dtype == DType::bf16 ? "attention_ref_bf16" : "attention_ref_f16";
}

LaunchGeometry AttentionOp::reference_geometry(const Problem& problem) const {
  Dims d = dims(problem);
  constexpr long long k_rows_per_block = 8; // k_ref_warps in reference.cuh
  LaunchGeometry g;
  g.block[0] = 256;
  g.grid[0] = unsigned(std::min<long long>(
      (d.B * d.Hq * d.Sq + k_rows_per_block - 1) / k_rows_per_block, 1LL << 24));
  return g;
}

void AttentionOp::pack_reference(const Problem& problem, const std::vector<CUdeviceptr>& t,
                                 const std::vector<CUdeviceptr>& ref, ArgPack& args) const {
  // The reference computes the problem as described, whatever the kernel runs.
  Dims d = described_dims(problem);
  Strides qs = contiguous_strides(problem, d.Hq, d.Sq);
  Strides ks = kvcache_strides(problem);
  if (d.varlen) {
    qs = {0, d.D, d.Hq * d.D};
    if (d.page == 0) {
      ks = {0, d.D, d.Hkv * d.D};
    }
  }
  args.add(t.at(0));
  args.add(t.at(1));
  args.add(t.at(2));
  args.add(ref.at(0));
  args.add(d.lse ? ref.at(1) : CUdeviceptr(0));
  args.add(int(d.B));
  args.add(int(d.Hq));
  args.add(int(d.Hkv));
  args.add(int(d.Sq));
  args.add(int(d.Sk));
  args.add(int(d.D));
  args.add(int(d.causal));
  args.add(float(1.0 / std::sqrt(double(d.D))));
  for (const Strides& s : {qs, ks, ks, qs}) {
    args.add(s.batch);
    args.add(s.head);
    args.add(s.seq);
  }
  const TuningFeatures f = tuning_features(d);
  args.add(f.left);
  args.add(f.right);
  args.add(float(f.softcap));
  size_t slopes = 4 + (d.lse ? 1 : 0) + (split_eligible(dims(problem)) ? 1 : 0); // as tensors()
  args.add(d.alibi ? t.at(slopes) : CUdeviceptr(0));
  args.add(0LL); // the slopes' batch stride: [Hq]
  const size_t cu = slopes + (d.alibi ? 1 : 0);
  args.add(d.varlen ? t.at(cu) : CUdeviceptr(0));
  args.add(d.varlen ? t.at(cu + 1) : CUdeviceptr(0));
  args.add(d.varlen ? varlen_tokens(d.Tq, d.B, d.Sq) : 0LL); // lse [Hq, Tq]: head stride
  // A KV cache: its lengths (none with varlen: cu_seqlens_k counts the keys), then
  // (paged) the block table, after the offsets' place.
  const size_t cache = cu + (d.varlen ? 2 : 0);
  const bool lengths = d.kvcache && !d.varlen;
  args.add(lengths ? t.at(cache) : CUdeviceptr(0));
  args.add(d.page > 0 ? t.at(cache + (lengths ? 1 : 0)) : CUdeviceptr(0));
  args.add(d.page > 0 ? kvcache_pages_per_seq(d) : 0LL);
  args.add(int(d.page));
}

double AttentionOp::tolerance(const Problem& problem) const {
  // P and O are rounded to 16 bits once each: bf16 keeps 8 significant bits,
  // fp16 11; the fp32 accumulation and ex2.approx add far less.
  return dims(problem).dtype == DType::bf16 ? 1e-2 : 3e-3;
}

double AttentionOp::bytes(const Problem& problem) const {
  Dims d = described_dims(problem);
  double e = double(dtype_size(d.dtype));
  const long long rows_q = d.varlen ? varlen_tokens(d.Tq, d.B, d.Sq) : d.B * d.Sq;
  long long rows_k = d.varlen ? varlen_tokens(d.Tk, d.B, d.Sk) : d.B * d.Sk;
  if (d.kvcache && !d.varlen) {
    // The keys the tuner's cache lengths cover, each read once.
    rows_k = 0;
    for (int len : kvcache_lengths(d.B, d.Sk)) {
      rows_k += len;
    }
  }
  double q = double(rows_q * d.Hq * d.D) * e;
  double kv = 2.0 * double(rows_k * d.Hkv * d.D) * e;
  double lse = d.lse ? double(rows_q * d.Hq) * 4.0 : 0.0;
  return 2.0 * q + kv + lse; // Q read, O written
}

double AttentionOp::flops(const Problem& problem) const {
  Dims d = described_dims(problem);
  if (d.kvcache && !d.varlen) {
    // The tuner's cache lengths, each sequence as a problem of its own Sk.
    double total = 0;
    for (int len : kvcache_lengths(d.B, d.Sk)) {
      Problem one = problem;
      Fields f;
      for (const auto& [k, v] : problem.fields.text()) {
        if (k == "B") {
          f.emplace_back(k, "1");
        } else if (k == "Sk") {
          f.emplace_back(k, std::to_string(len));
        } else if (k != "paged" && k != "page" && k != "kvcache") {
          f.emplace_back(k, v);
        }
      }
      one.fields = std::move(f);
      total += flops(one);
    }
    return total;
  }
  if (d.varlen) {
    // The tuner's sequences (varlen_lengths), each as a problem of its own lengths.
    const std::vector<int> lq = varlen_lengths(d.B, d.Sq, varlen_tokens(d.Tq, d.B, d.Sq));
    const std::vector<int> lk = varlen_lengths(d.B, d.Sk, varlen_tokens(d.Tk, d.B, d.Sk));
    double total = 0;
    for (size_t b = 0; b < lq.size(); ++b) {
      if (lq[b] == 0 || lk[b] == 0) {
        continue;
      }
      Problem one = problem;
      Fields f;
      for (const auto& [k, v] : problem.fields.text()) {
        if (k == "B") {
          f.emplace_back(k, "1");
        } else if (k == "Sq" || k == "Sk") {
          f.emplace_back(k, std::to_string(k == "Sq" ? lq[b] : lk[b]));
        } else if (k != "varlen" && k != "Tq" && k != "Tk" && k != "paged" && k != "page") {
          f.emplace_back(k, v);
        }
      }
      one.fields = std::move(f);
      total += flops(one);
    }
    return total;
  }
  double pairs = double(d.Sq) * double(d.Sk);
  if (d.window) {
    // Query i sees the keys of [i + Sk - Sq - left, i + Sk - Sq + right] in [0, Sk).
    const TuningFeatures f = tuning_features(d);
    const long long right = d.causal ? 0 : f.right;
    pairs = 0;
    for (long long i = 0; i < d.Sq; ++i) {
      const long long lo = f.left < 0 ? 0 : std::max(0LL, i + d.Sk - d.Sq - f.left);
      const long long hi = right < 0 ? d.Sk - 1 : std::min(d.Sk - 1, i + d.Sk - d.Sq + right);
      pairs += double(std::max(0LL, hi - lo + 1));
    }
  } else if (d.causal) {
    if (d.Sq == d.Sk) {
      pairs /= 2; // the FlashAttention papers' convention
    } else {
      // Query i sees min(Sk, max(0, i + Sk - Sq + 1)) keys.
      pairs = 0;
      for (long long i = 0; i < d.Sq; ++i) {
        pairs += double(std::clamp(i + d.Sk - d.Sq + 1, 0LL, d.Sk));
      }
    }
  }
  return 4.0 * double(d.B * d.Hq) * pairs * double(d.D);
}

} // namespace autotune
