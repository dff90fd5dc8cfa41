// Attention forward (FlashAttention-2 structure, sm_80 and newer):
//   O = softmax(s + mask) V,  LSE = log sum_j exp(s_j)  (optional), with the logits
//   s_ij = scale * q_i.k_j                                   (plain), or
//   s_ij = softcap * tanh(scale * q_i.k_j / softcap)         (AT_SOFTCAP), then
//   s_ij -= slope_h * |i + Sk - Sq - j|                      (AT_ALIBI),
// as flash-attn defines them. The causal mask is bottom-right aligned (FlashAttention's
// convention): query i sees keys j <= i + Sk - Sq. A sliding window (AT_WINDOW, left
// and right bounds at run time, -1 unbounded) keeps keys i + Sk - Sq - left <= j <=
// i + Sk - Sq + right; causal is the right bound 0. A row that sees no key (causal or
// a right bound with Sq > Sk) gets O = 0, as flash-attn defines it, and LSE = -inf,
// the log of its empty sum (a log-sum-exp merge with other key ranges then weighs it
// 0); flash-attn 2 writes +inf there. A query block none of whose rows sees a key
// writes that and loads nothing; key tiles outside every row's window are never
// visited, and only tiles that cross a bound are masked.
//
// One block owns k_block_m query rows of one (batch, head); each warp owns
// k_block_m / k_warps of them (one to four 16-row MMA tiles), or, in a block of fewer
// than 16 rows per warp (decoding), 16 rows shared with k_key_warps - 1 other warps, each
// of which takes its own k_block_n / k_key_warps keys of every tile; those warps merge
// their softmax states (max, sum, O) through shared memory at the end. K and V tiles of
// k_block_n keys stream through shared memory with cp.async; S = Q K^T and O += P V
// run on mma.sync m16n8k16 with fp32 accumulators; the softmax is online, in fp32,
// with exp2 (scale folded with log2 e); P goes from the S accumulators straight into
// the A operand of the P V product (no shared-memory round trip); O is rescaled
// only when a row's max grows by more than 2^8 (lazily) and normalised once at the
// end. Key tiles are visited from the last to the first, so the tiles that need
// masking come first.
//
// Compile-time parameters (NVRTC -D, set by runtime/ops/attention.cpp):
//   AT_BLOCK_M   query rows per block: larger blocks reuse each K/V tile for more
//                rows (less shared-memory traffic per FLOP), smaller ones make more
//                blocks for small batch*heads and short sequences.
//   AT_BLOCK_N   keys per tile: larger tiles amortise the per-tile softmax work
//                and barriers, but cost registers (the S tile lives in registers).
//   AT_WARPS     warps per block (4 or 8): rows per warp = BLOCK_M / WARPS, 16 to 64;
//                32 rows per warp reuse each K/V fragment twice, 64 four times (less
//                shared-memory traffic per MMA, more registers). BLOCK_M of 16 or 32
//                (below 16 per warp) gives each 16 rows to WARPS * 16 / BLOCK_M warps
//                that split every key tile: in a decoding block, whose few rows would
//                leave all but one warp computing padding, every warp takes its share
//                of each tile's keys instead.
//   AT_STAGES    1: FlashAttention-2's schedule (one K and one V buffer; V of this
//                tile and K of the next load while the other product runs);
//                2 or 3: K and V of the next tiles prefetched as a ring of buffers.
//   AT_SWIZZLE   1: 16-byte chunks XOR-swizzled by row (no bank conflicts, no
//                padding); 0: rows padded by 16 bytes.
//   AT_Q_REGS    1: Q fragments loaded into registers once; 0: re-read from shared
//                memory with ldmatrix for every key tile (fewer registers).
//   AT_SPLITS    key splits (flash-decoding): 1, or 2..16 blocks per (query block,
//                batch, head), each over its share of the key tiles, for problems
//                with too few query blocks to fill the GPU. Each writes its O
//                (normalized, fp32) and LSE to the caller's workspace; the last of
//                them to finish (a counter per query block, which it returns to
//                zero) merges the splits into O and LSE.
//   AT_HEAD_DIM  D, any multiple of 8 in 32..256. The kernel computes on D rounded up
//                to a multiple of 16 (whole k=16 MMA steps): loads zero-fill the
//                columns from D on and stores skip them, so the numbers are those of
//                the unpadded product. D = 64, 128, 256 pad nothing.
//   AT_VARLEN    1: variable-length batches (flash-attn's varlen): sequence b's queries
//                are the packed rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1 (keys
//                likewise), its lengths take seq_q and seq_k's place in every mask
//                (each sequence's own bottom-right corner), LSE is [Hq, Tq]; seq_q and
//                seq_k of AttnArgs are then the grid's (bucketed) longest lengths, which
//                also index the split workspace. Blocks past their sequence exit.
//   AT_KVCACHE   1: decoding against a KV cache (flash-attn's flash_attn_with_kvcache):
//                sequence b's keys are the first cache_seqlens[b] rows of its cache, then
//                (append) the seq_new rows of k_new / v_new; its key count takes seq_k's
//                place in every mask (bottom-right aligned against it). The cache is
//                paged (block_table non-null: key j of sequence b is row j % page_size of
//                page block_table[b][j / page_size], the batch strides stepping pages;
//                page_size a multiple of AT_BLOCK_N, so a key tile lies in one page) or
//                contiguous (one [Scache] cache per sequence). With append, the tiles read
//                the new keys from k_new / v_new directly, and one block per (batch, kv
//                head) -- the first query head of the group, query block 0, split 0 --
//                copies them into the cache at cache_seqlens[b].. for the next call: no
//                block of the launch reads those cache rows, so nothing races. With
//                cache_leftpad (contiguous cache only), sequence b's cached keys are rows
//                cache_leftpad[b] .. cache_seqlens[b] - 1: key j is row cache_leftpad[b] + j,
//                the key count is cache_seqlens[b] - cache_leftpad[b] + seq_new, and the
//                new rows still go to cache_seqlens[b]..  With cache_batch_idx (contiguous
//                cache only), sequence b's cache is cache batch cache_batch_idx[b] of the
//                num_pages the cache holds (clamped into them); its lengths, left padding
//                and new rows are still indexed by b.
//                With AT_VARLEN (flash_attn_varlen_func's block_table): packed queries as
//                above against a paged cache whose sequence b holds the first
//                cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys of its pages (no
//                cache_seqlens, nothing appended).
//   AT_GROUPED   1: the G = Hq / Hkv query heads of a K/V head run as G * group_sq query
//                rows of that head (several new queries a step, decoding with GQA/MQA):
//                one block reads each K/V tile once for all G heads, not G blocks each.
//                Row r is query r % group_sq of the group's head r / group_sq (head-major,
//                so the LSE index and the split workspace of the rows are those of
//                [B, Hq, Sq]); heads_q is Hkv and seq_q G * group_sq, q_head_stride and
//                o_head_stride step a group, q_group_stride and o_group_stride one head in
//                it, and masks and the diagonal take the row's query index.
//   AT_CAUSAL, AT_LSE, AT_WINDOW, AT_SOFTCAP, AT_ALIBI: 0/1; AT_T: at_bf16 or at_f16.
#include "attention/mma.cuh"
#include "common/numeric.cuh"

// AT_VARLEN (both families): sequence b's packed rows [start, start + len) from int32
// offsets [B + 1], clamped into the tensor's `tokens` rows (start in [0, tokens], the end
// in [start, tokens]): a mistaken cu_seqlens shortens or empties sequences but never
// reaches past the tensors it indexes.
struct at_span {
  int start, len;
};
__device__ __forceinline__ at_span at_packed_span(const int* offsets, int b, int tokens) {
  const int start = min(max(offsets[b], 0), tokens);
  return {start, min(max(offsets[b + 1], start), tokens) - start};
}

// AT_WGMMA=1 (family=wgmma, sm_90a only): the Hopper kernel of attention/hopper.cuh
// instead of this one (same entry point and semantics).
#ifndef AT_WGMMA
#define AT_WGMMA 0
#endif
#if AT_WGMMA
#include "attention/hopper.cuh"
#else

#ifndef AT_BLOCK_M
#error "AT_BLOCK_M must be defined"
#endif

typedef AT_T elem_t;

#ifndef AT_WINDOW
#define AT_WINDOW 0
#endif
#ifndef AT_SOFTCAP
#define AT_SOFTCAP 0
#endif
#ifndef AT_ALIBI
#define AT_ALIBI 0
#endif
#ifndef AT_VARLEN
#define AT_VARLEN 0
#endif
#ifndef AT_KVCACHE
#define AT_KVCACHE 0
#endif
#ifndef AT_GROUPED
#define AT_GROUPED 0
#endif

constexpr int k_dim = AT_HEAD_DIM;                 // the tensors' head dim D
constexpr int k_head_dim = (k_dim + 15) / 16 * 16; // the head dim computed on
constexpr int k_block_m = AT_BLOCK_M;
constexpr int k_block_n = AT_BLOCK_N;
constexpr int k_warps = AT_WARPS;
constexpr int k_stages = AT_STAGES;
constexpr bool k_swizzle = AT_SWIZZLE != 0;
constexpr bool k_q_in_regs = AT_Q_REGS != 0;
constexpr bool k_causal = AT_CAUSAL != 0;
constexpr bool k_lse = AT_LSE != 0;
constexpr bool k_window = AT_WINDOW != 0;
constexpr bool k_softcap = AT_SOFTCAP != 0;
constexpr bool k_alibi = AT_ALIBI != 0;
constexpr bool k_varlen = AT_VARLEN != 0;
constexpr bool k_kvcache = AT_KVCACHE != 0;
constexpr bool k_grouped = AT_GROUPED != 0;
#ifndef AT_SPLITS
#define AT_SPLITS 1
#endif
constexpr int k_splits = AT_SPLITS;

constexpr int k_threads = 32 * k_warps;
// Warps sharing one 16-row MMA tile, each over its slice of the keys (1: none shared).
constexpr int k_key_warps = k_block_m >= 16 * k_warps ? 1 : 16 * k_warps / k_block_m;
constexpr int k_warp_m = k_block_m * k_key_warps / k_warps; // query rows per warp
constexpr int k_warp_n = k_block_n / k_key_warps;           // keys of a tile per warp
constexpr int k_m_tiles = k_warp_m / 16;                    // 16-row MMA tiles per warp
constexpr int k_n_tiles = k_warp_n / 8;                     // 8-key MMA tiles per warp
constexpr int k_d_tiles = k_head_dim / 8;                   // 8-column MMA tiles of O
constexpr int k_k_steps = k_head_dim / 16;                  // k=16 steps of Q K^T
constexpr int k_chunks = k_head_dim / 8;                    // 16-byte chunks per row
constexpr int k_valid_chunks = k_dim / 8; // ... of them holding the tensors' columns
// Loads give each thread one chunk column: a power of two of them per row, so that the
// threads split evenly; those past k_chunks load nothing.
constexpr int k_load_chunks = k_chunks <= 4 ? 4 : k_chunks <= 8 ? 8 : k_chunks <= 16 ? 16 : 32;
// The XOR swizzle permutes chunks within aligned groups of this many (8, or the largest
// power of two dividing k_chunks when that is less, so a row's chunks stay its own).
constexpr int k_swizzle_group = (k_chunks & -k_chunks) < 8 ? (k_chunks & -k_chunks) : 8;
constexpr int k_row_elems = k_swizzle ? k_head_dim : k_head_dim + 8;
constexpr int k_kv_tile_elems = k_block_n * k_row_elems;
// How far (log2 units) a row's scores may rise above its reference max before O is
// rescaled: P stays below 2^8.
constexpr float k_rescale_log2 = 8.0f;

static_assert(k_warp_m % 16 == 0 && k_warp_m <= 64, "each warp owns 16, 32, 48 or 64 query rows");
static_assert(k_block_m % 16 == 0 && k_warps % k_key_warps == 0 &&
                  k_warp_m * (k_warps / k_key_warps) == k_block_m,
              "warps sharing rows split the block's 16-row tiles evenly");
static_assert(k_warp_n % 16 == 0 && k_warp_n * k_key_warps == k_block_n,
              "each warp's keys are whole k=16 steps of P V");
static_assert(k_dim % 8 == 0 && k_dim >= 32 && k_dim <= 256, "head dim");
static_assert(k_stages >= 1 && k_stages <= 3, "pipeline stages");
static_assert(k_splits >= 1 && k_splits <= 16, "key splits");
static_assert(k_threads % k_load_chunks == 0, "each thread loads one chunk column");
static_assert(k_block_n % (k_threads / k_load_chunks) == 0 &&
                  k_block_m % (k_threads / k_load_chunks) == 0,
              "tiles split evenly over threads");

struct AttnArgs {
  const elem_t* q;
  const elem_t* k;
  const elem_t* v;
  elem_t* o;
  float* lse; // [B, Hq, Sq] contiguous, or null when AT_LSE is 0
  long long q_batch_stride, q_head_stride, q_seq_stride;
  long long k_batch_stride, k_head_stride, k_seq_stride;
  long long v_batch_stride, v_head_stride, v_seq_stride;
  long long o_batch_stride, o_head_stride, o_seq_stride;
  int heads_q;
  int heads_kv;
  int seq_q;
  int seq_k;
  // log2(e) times the factor from the accumulated scores to the logits: the softmax
  // scale, or softcap with AT_SOFTCAP (the scores are then tanh(scale * q.k / softcap)).
  float scale_log2;
  // AT_SPLITS > 1: the workspace (runtime/ops/attention.cpp lays it out): arrival
  // counters, one per (batch, head, query block), then partial O [splits][B][Hq][Sq][D]
  // and LSE [splits][B][Hq][Sq] in fp32; all zero before a launch, and every launch
  // leaves all of it zero (the merge clears what it read), so one buffer serves calls of
  // any shape that need no more.
  float* ws_o;
  float* ws_lse;
  unsigned* ws_count;
  int batch;
  // AT_WINDOW: the window's bounds, -1 unbounded (the right one is 0 under AT_CAUSAL,
  // whatever this says).
  int window_left, window_right;
  float softcap_scale; // AT_SOFTCAP: scale / softcap
  // AT_ALIBI: slopes[batch * alibi_batch_stride + head] times alibi_scale (1 / the
  // factor of scale_log2) is the slope in units of the accumulated scores.
  float alibi_scale;
  const float* alibi_slopes;
  long long alibi_batch_stride;
  // AT_VARLEN: the sequences' first tokens, int32 [B + 1] (the batch strides above are
  // 0); LSE is [Hq, Tq] with this head stride.
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  long long lse_head_stride;
  // AT_KVCACHE: int32 cache lengths [B]; the block table (int32 [B, blocks per
  // sequence] with this row stride; null: a contiguous cache per sequence, the batch
  // strides stepping sequences) with its page size and the pages in the cache (entries
  // are clamped into [0, num_pages)); the keys one sequence's cache holds (cache
  // lengths are clamped to kv_capacity - seq_new); seq_new rows of k_new / v_new
  // [B, Hkv, seq_new, D] (these strides) appended at each cache's end (0: none);
  // cache_leftpad after them.
  const int* cache_seqlens;
  const int* block_table;
  long long block_table_stride;
  int page_size;
  int num_pages;
  int kv_capacity;
  int seq_new;
  const elem_t* k_new;
  const elem_t* v_new;
  long long kn_batch_stride, kn_head_stride, kn_seq_stride;
  long long vn_batch_stride, vn_head_stride, vn_seq_stride;
  // AT_KVCACHE with a contiguous cache: int32 [B], the first cache row of each sequence's
  // keys (flash-attn's cache_leftpad), clamped into [0, its clamped cache length]; null:
  // 0. Ignored with a block table.
  const int* cache_leftpad;
  // AT_KVCACHE with a contiguous cache: int32 [B], the cache batch (of num_pages) that
  // holds each sequence's keys (flash-attn's cache_batch_idx), clamped into [0,
  // num_pages); null: sequence b's own. Ignored with a block table.
  const int* cache_batch_idx;
  // AT_GROUPED: the stride between two query heads of a group, and the queries of each.
  long long q_group_stride, o_group_stride;
  int group_sq;
  // AT_VARLEN: the rows q (and o, lse) and k (and v) hold, which bound each sequence's
  // offsets (at_packed_span); with a paged cache (AT_KVCACHE) cu_seqlens_k counts keys
  // only and tokens_k is the largest count, INT_MAX.
  int tokens_q, tokens_k;
};

// The query index of row `row` (AT_GROUPED: the rows hold group_sq queries of each head).
__device__ __forceinline__ int query_of(const AttnArgs& args, int row) {
  return k_grouped ? row % args.group_sq : row;
}

// Element offset of row `row` of a query block's head in q or o (seq and group strides).
__device__ __forceinline__ long long row_offset(const AttnArgs& args, int row, long long seq_stride,
                                                long long group_stride) {
  if (k_grouped) {
    return (row / args.group_sq) * group_stride + (row % args.group_sq) * seq_stride;
  }
  return row * seq_stride;
}
__device__ __forceinline__ long long o_row_offset(const AttnArgs& args, int row) {
  return row_offset(args, row, args.o_seq_stride, args.o_group_stride);
}

// AT_KVCACHE: element offset of cache row `key` of sequence `batch` in the cache (head
// 0): through the block table when there is one, else in the sequence's cache batch
// (cache_batch_idx[batch], or its own); a contiguous cache's row is the key's index plus
// the sequence's cache_leftpad: callers add it.
__device__ __forceinline__ long long cache_row(const AttnArgs& args, int batch, int key,
                                               long long batch_stride, long long seq_stride) {
  if (args.block_table != nullptr) {
    int page = args.block_table[batch * args.block_table_stride + key / args.page_size];
    page = min(max(page, 0), args.num_pages - 1);
    return page * batch_stride + (key % args.page_size) * seq_stride;
  }
  if (args.cache_batch_idx != nullptr) {
    batch = min(max(args.cache_batch_idx[batch], 0), args.num_pages - 1);
  }
  return batch * batch_stride + key * seq_stride;
}

// AT_KVCACHE with append: sequence `batch`'s new keys and values of kv head `kv_head`
// into its cache at rows row0.. (cache_seqlens[b], clamped), as 16-byte chunks over the
// block's threads.
__device__ __forceinline__ void append_new_kv(const AttnArgs& args, int batch, int kv_head,
                                              int row0) {
#pragma unroll 1
  for (int i = static_cast<int>(threadIdx.x); i < args.seq_new * k_valid_chunks; i += k_threads) {
    const int r = i / k_valid_chunks;
    const int c = (i % k_valid_chunks) * 8;
    const elem_t* ks = args.k_new + batch * args.kn_batch_stride + kv_head * args.kn_head_stride +
                       r * args.kn_seq_stride + c;
    const elem_t* vs = args.v_new + batch * args.vn_batch_stride + kv_head * args.vn_head_stride +
                       r * args.vn_seq_stride + c;
    elem_t* kd = const_cast<elem_t*>(args.k) + kv_head * args.k_head_stride +
                 cache_row(args, batch, row0 + r, args.k_batch_stride, args.k_seq_stride) + c;
    elem_t* vd = const_cast<elem_t*>(args.v) + kv_head * args.v_head_stride +
                 cache_row(args, batch, row0 + r, args.v_batch_stride, args.v_seq_stride) + c;
    *reinterpret_cast<uint4*>(kd) = *reinterpret_cast<const uint4*>(ks);
    *reinterpret_cast<uint4*>(vd) = *reinterpret_cast<const uint4*>(vs);
  }
}

// Where row `row` of sequence `batch`'s query rows (starting at packed row q_row0)
// keeps its LSE: [B, Hq, Sq], or [Hq, Tq] with AT_VARLEN.
__device__ __forceinline__ long long lse_offset(const AttnArgs& args, int batch, int head,
                                                long long q_row0, int row) {
  if (k_varlen) {
    return head * args.lse_head_stride + q_row0 + row;
  }
  return (static_cast<long long>(batch) * args.heads_q + head) * args.seq_q + row;
}

// Element offset of 16-byte chunk `chunk` of row `row` in a shared-memory tile.
__device__ __forceinline__ int tile_offset(int row, int chunk) {
  if (k_swizzle) {
    // ldmatrix reads one chunk column of 8 consecutive rows: XOR with row % 8 puts
    // those 8 chunks in 8 different 4-bank groups.
    return row * k_head_dim + ((chunk ^ (row & (k_swizzle_group - 1))) << 3);
  }
  return row * k_row_elems + (chunk << 3);
}

// This thread's part of a tile load: chunk column `chunk`, rows row0, row0 + k_row_step,
// ...; `active` false when the tile has no such column, `column_valid` false for a
// padding column past D (zero-filled).
constexpr int k_row_step = k_threads / k_load_chunks;
struct LoadLane {
  int chunk, row0;
  bool active, column_valid;
};
__device__ __forceinline__ LoadLane load_lane() {
  const int chunk = static_cast<int>(threadIdx.x) % k_load_chunks;
  return {chunk, static_cast<int>(threadIdx.x) / k_load_chunks,
          k_load_chunks == k_chunks || chunk < k_chunks,
          k_valid_chunks == k_chunks || chunk < k_valid_chunks};
}

// ROWS x head_dim elements from global (row stride in elements) into a tile, as
// cp.async 16-byte chunks; rows at or past rows_valid and the padding columns from D
// on are zero-filled. Each thread keeps one chunk column and steps down the rows, so
// its addresses are one base plus multiples of a stride (few registers live across
// the main loop).
template <int ROWS>
__device__ __forceinline__ void load_tile(unsigned tile, const elem_t* src, long long row_stride,
                                          int rows_valid) {
  constexpr int k_per_thread = ROWS / k_row_step;
  const auto [chunk, row0, active, column_valid] = load_lane();
  if (!active) {
    return; // no such column in the tile
  }
  const elem_t* p = src + row0 * row_stride + chunk * 8;
  const long long step = k_row_step * row_stride;
#pragma unroll
  for (int i = 0; i < k_per_thread; ++i) {
    const int row = row0 + i * k_row_step;
    // A zero-filled chunk reads nothing, so p may point past the tensor there.
    cp_async_16(tile + tile_offset(row, chunk) * static_cast<int>(sizeof(elem_t)), p,
                column_valid && row < rows_valid);
    p += step;
  }
}

// load_tile of Q's rows m0.. with AT_GROUPED: each row at its own offset from the
// group's first head (row_offset), not one stride apart.
__device__ __forceinline__ void load_q_grouped(unsigned tile, const elem_t* q_head,
                                               const AttnArgs& args, int m0, int rows_valid) {
  const auto [chunk, row0, active, column_valid] = load_lane();
  if (!active) {
    return; // no such column in the tile
  }
#pragma unroll
  for (int row = row0; row < k_block_m; row += k_row_step) {
    const bool valid = column_valid && row < rows_valid;
    const long long at =
        valid ? row_offset(args, m0 + row, args.q_seq_stride, args.q_group_stride) : 0;
    cp_async_16(tile + tile_offset(row, chunk) * static_cast<int>(sizeof(elem_t)),
                q_head + at + chunk * 8, valid);
  }
}

// load_tile from two sources (AT_KVCACHE with append): rows before rows_first from src,
// the rest from src2 (its own row stride; src2 points where row 0 would be).
template <int ROWS>
__device__ __forceinline__ void load_tile2(unsigned tile, const elem_t* src, long long row_stride,
                                           int rows_first, const elem_t* src2,
                                           long long row_stride2, int rows_valid) {
  constexpr int k_per_thread = ROWS / k_row_step;
  const auto [chunk, row0, active, column_valid] = load_lane();
  if (!active) {
    return; // no such column in the tile
  }
  const elem_t* p = src + row0 * row_stride + chunk * 8;
  const elem_t* p2 = src2 + row0 * row_stride2 + chunk * 8;
  const long long step = k_row_step * row_stride;
  const long long step2 = k_row_step * row_stride2;
#pragma unroll
  for (int i = 0; i < k_per_thread; ++i) {
    const int row = row0 + i * k_row_step;
    cp_async_16(tile + tile_offset(row, chunk) * static_cast<int>(sizeof(elem_t)),
                row < rows_first ? p : p2, column_valid && row < rows_valid);
    p += step;
    p2 += step2;
  }
}

// A fragments (16 rows x 16 columns) of the rows [row0, row0+16) of a tile at k step
// ks. Addresses are 32-bit shared-window offsets from the tile's base, so most of
// them fold into the instruction's immediate.
__device__ __forceinline__ void load_a_fragment(unsigned (&a)[4], unsigned tile, int row0, int ks,
                                                int lane) {
  const int row = row0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int chunk = 2 * ks + (lane >> 4);
  ldmatrix_x4(a, tile + tile_offset(row, chunk) * static_cast<int>(sizeof(elem_t)));
}

// A row's softmax sum: the four threads of a quad hold its shares.
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ln(sum exp(scale*s)) = ln 2 * (max * scale_log2 + log2(sum of the exp2 terms)); -inf
// for a row that saw no key.
__device__ __forceinline__ float row_lse(float row_max, float sum, float scale_log2) {
  return sum > 0.0f ? (row_max * scale_log2 + at_log2_approx(sum)) * 0.6931471805599453f
                    : at_neg_inf();
}

// O = 0 and LSE = -inf for every row of a query block that sees no key (a right bound
// with Sq > Sk), stored directly: 16-byte chunks of zeros, whole rows over the block's threads.
// The loops stay rolled: unrolled, this cold path changed how ptxas allocates the
// registers of the whole kernel (bench/notes/attention.md).
__device__ __forceinline__ void store_rows_without_keys(const AttnArgs& args, int batch, int head,
                                                        int m0, int seq_q, long long q_row0) {
  elem_t* o_g =
      args.o + batch * args.o_batch_stride + head * args.o_head_stride + q_row0 * args.o_seq_stride;
#pragma unroll 1
  for (int i = static_cast<int>(threadIdx.x); i < k_block_m * k_valid_chunks; i += k_threads) {
    const int row = m0 + i / k_valid_chunks;
    if (row < seq_q) {
      *reinterpret_cast<uint4*>(o_g + o_row_offset(args, row) + (i % k_valid_chunks) * 8) =
          make_uint4(0u, 0u, 0u, 0u);
    }
  }
  if (k_lse) {
#pragma unroll 1
    for (int r = static_cast<int>(threadIdx.x); r < k_block_m; r += k_threads) {
      if (m0 + r < seq_q) {
        args.lse[lse_offset(args, batch, head, q_row0, m0 + r)] = at_neg_inf();
      }
    }
  }
}

// Key splits: this block's O (normalized by its own sum) and LSE go to the
// workspace; the block that finishes last for its query block merges all splits:
//   LSE = log sum_s exp(LSE_s),  O = sum_s exp(LSE_s - LSE) O_s.
// A split with no key tile (more splits than the block has tiles), or none that a
// row sees, stores that row's O_s = 0 and LSE_s = -inf: it weighs exactly 0. A row
// that no split saw gets O = 0 and LSE = -inf, as without splits. Only warps that
// own_rows store them (the others shared their keys' state with one that does); every
// thread of the block must call this.
__device__ __forceinline__ void
store_split_and_merge(const AttnArgs& args, const float (&o)[k_m_tiles][k_d_tiles][4],
                      const float (&row_max)[k_m_tiles][2], const float (&row_sum)[k_m_tiles][2],
                      int batch, int head, int m_blocks, int m_block, int m0, int split,
                      int warp_row0, int g, int t, bool owns_rows, unsigned* flag_smem, int seq_q,
                      long long q_row0) {
  const long long rows = static_cast<long long>(args.batch) * args.heads_q * args.seq_q;
  const long long bh_row = (static_cast<long long>(batch) * args.heads_q + head) * args.seq_q;
#pragma unroll
  for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float sum = quad_sum(row_sum[mt][h]);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      const int row = m0 + warp_row0 + mt * 16 + g + h * 8;
      if (owns_rows && row < seq_q) {
        float* dst = args.ws_o + (split * rows + bh_row + row) * k_dim;
#pragma unroll
        for (int dt = 0; dt < k_valid_chunks; ++dt) {
          *reinterpret_cast<float2*>(dst + dt * 8 + 2 * t) =
              make_float2(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
        }
        if (t == 0) {
          args.ws_lse[split * rows + bh_row + row] = row_lse(row_max[mt][h], sum, args.scale_log2);
        }
      }
    }
  }
  // Publish, then count arrivals: the last block of this query block merges.
  __threadfence();
  __syncthreads();
  unsigned* counter =
      args.ws_count + (static_cast<long long>(batch) * args.heads_q + head) * m_blocks + m_block;
  if (threadIdx.x == 0) {
    const unsigned arrived = atomicAdd(counter, 1u);
    const bool last = arrived == k_splits - 1;
    if (last) {
      *counter = 0; // every split has arrived: ready for the next launch
    }
    *flag_smem = last ? 1u : 0u;
  }
  __syncthreads();
  if (*flag_smem == 0u) {
    return;
  }
  __threadfence(); // see the other splits' partials
  // One warp per row at a time; lanes over the head dim (one or more columns each).
  constexpr int k_cols = (k_dim + 31) / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  elem_t* o_g =
      args.o + batch * args.o_batch_stride + head * args.o_head_stride + q_row0 * args.o_seq_stride;
  for (int r = warp; r < k_block_m; r += k_warps) {
    const int row = m0 + r;
    if (row >= seq_q) {
      break;
    }
    float lse_s[k_splits];
    float lse_max = at_neg_inf();
#pragma unroll
    for (int s = 0; s < k_splits; ++s) {
      lse_s[s] = __ldcg(args.ws_lse + s * rows + bh_row + row);
      lse_max = fmaxf(lse_max, lse_s[s]);
    }
    float acc[k_cols];
#pragma unroll
    for (int c = 0; c < k_cols; ++c) {
      acc[c] = 0.0f;
    }
    float wsum = 0.0f;
#pragma unroll
    for (int s = 0; s < k_splits; ++s) {
      const float w = lse_max == at_neg_inf() ? 0.0f : at_exp(lse_s[s] - lse_max);
      wsum += w;
      float* src = args.ws_o + (s * rows + bh_row + row) * k_dim;
#pragma unroll
      for (int c = 0; c < k_cols; ++c) {
        if (k_dim % 32 == 0 || c * 32 + lane < k_dim) {
          acc[c] = fmaf(w, __ldcg(src + c * 32 + lane), acc[c]);
          __stcg(src + c * 32 + lane, 0.0f); // read: the workspace is left all zero
        }
      }
    }
    __syncwarp(); // every lane read the splits' LSE
    if (lane < k_splits) {
      __stcg(args.ws_lse + lane * rows + bh_row + row, 0.0f);
    }
    const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
    elem_t* dst = o_g + o_row_offset(args, row);
#pragma unroll
    for (int c = 0; c < k_cols; ++c) {
      if (k_dim % 32 == 0 || c * 32 + lane < k_dim) {
        dst[c * 32 + lane] = at_from_float<elem_t>(acc[c] * inv);
      }
    }
    if (k_lse && lane == 0) {
      args.lse[lse_offset(args, batch, head, q_row0, row)] =
          wsum > 0.0f ? lse_max + at_log2_approx(wsum) * 0.6931471805599453f : at_neg_inf();
    }
  }
}

// Warps sharing rows (k_key_warps > 1): after the key loop, each of them holds the
// softmax state of its own slice of the keys, against its own reference max. The first
// warp of each group takes the others' states from shared memory (`buf`, free once every
// warp is done with the K/V tiles) and merges them into its own:
//   M = max_w M_w,  sum = sum_w 2^(scale_log2 (M_w - M)) sum_w,  O likewise.
// Lane l of every warp holds the same rows and O columns, so it merges with lane l of
// the others; a warp whose slice saw no key of a row (M_w = -inf) weighs 0 there.
// Every thread of the block must call this (two barriers).
constexpr int k_merge_floats = k_m_tiles * (4 + 4 * k_d_tiles); // per lane and warp
static_assert(k_key_warps == 1 || (k_warps - k_warps / k_key_warps) * k_merge_floats * 32 <=
                                      k_stages * k_kv_tile_elems * 2 * int(sizeof(elem_t)) / 4,
              "the merge of the key warps' states fits where the K/V tiles were");
__device__ __forceinline__ void merge_key_warps(float (&o)[k_m_tiles][k_d_tiles][4],
                                                float (&row_max)[k_m_tiles][2],
                                                float (&row_sum)[k_m_tiles][2], float* buf,
                                                int warp, int lane, float scale_log2) {
  const int slice = warp % k_key_warps;
  // The group's other warps take slots 0 .. k_key_warps - 2 of its region.
  float* group = buf + warp / k_key_warps * (k_key_warps - 1) * k_merge_floats * 32 + lane;
  __syncthreads(); // every warp is done reading K and V
  if (slice != 0) {
    float* dst = group + (slice - 1) * k_merge_floats * 32;
#pragma unroll
    for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        dst[((mt * 2 + h) * 2) * 32] = row_max[mt][h];
        dst[((mt * 2 + h) * 2 + 1) * 32] = row_sum[mt][h];
      }
#pragma unroll
      for (int dt = 0; dt < k_d_tiles; ++dt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          dst[(k_m_tiles * 4 + (mt * k_d_tiles + dt) * 4 + e) * 32] = o[mt][dt][e];
        }
      }
    }
  }
  __syncthreads();
  if (slice != 0) {
    return;
  }
#pragma unroll 1
  for (int w = 1; w < k_key_warps; ++w) {
    const float* src = group + (w - 1) * k_merge_floats * 32;
#pragma unroll
    for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float max_w = src[((mt * 2 + h) * 2) * 32];
        const float mx = fmaxf(row_max[mt][h], max_w);
        if (mx == at_neg_inf()) {
          continue; // neither saw a key of this row
        }
        // exp2 of -inf is 0: a side that saw no key weighs nothing.
        const float a = at_exp2_approx((row_max[mt][h] - mx) * scale_log2);
        const float b = at_exp2_approx((max_w - mx) * scale_log2);
        row_max[mt][h] = mx;
        row_sum[mt][h] = row_sum[mt][h] * a + src[((mt * 2 + h) * 2 + 1) * 32] * b;
#pragma unroll
        for (int dt = 0; dt < k_d_tiles; ++dt) {
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            o[mt][dt][e] = fmaf(o[mt][dt][e], a,
                                src[(k_m_tiles * 4 + (mt * k_d_tiles + dt) * 4 + e) * 32] * b);
          }
        }
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(k_threads) attention_fwd(const AttnArgs args) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  elem_t* q_s = reinterpret_cast<elem_t*>(smem_raw);
  elem_t* k_s = q_s + k_block_m * k_row_elems;
  elem_t* v_s = k_s + k_stages * k_kv_tile_elems;
  constexpr unsigned k_kv_tile_bytes = k_kv_tile_elems * sizeof(elem_t);
  const unsigned q_base = at_smem_addr(q_s);
  const unsigned k_base = at_smem_addr(k_s);
  const unsigned v_base = at_smem_addr(v_s);

  // Blocks of the last query rows see the most keys under the causal mask: launch
  // them first so that the short ones fill the tail. With key splits, the splits
  // of one query block are neighbours.
  const int m_blocks = static_cast<int>(gridDim.x) / k_splits;
  const int m_block = m_blocks - 1 - static_cast<int>(blockIdx.x) / k_splits;
  const int split = k_splits == 1 ? 0 : static_cast<int>(blockIdx.x) % k_splits;
  const int head = static_cast<int>(blockIdx.y);
  const int batch = static_cast<int>(blockIdx.z);
  const int kv_head = head / (args.heads_q / args.heads_kv);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane >> 2; // row within an 8-row group of an MMA fragment
  const int t = lane & 3;  // column pair within an MMA fragment
  const int m0 = m_block * k_block_m;
  // This sequence's lengths and first packed rows (AT_VARLEN), else the problem's.
  int seq_q = args.seq_q;
  int seq_k = args.seq_k;
  long long q_row0 = 0, k_row0 = 0;
  if (k_varlen) {
    const at_span qs = at_packed_span(args.cu_seqlens_q, batch, args.tokens_q);
    const at_span ks = at_packed_span(args.cu_seqlens_k, batch, args.tokens_k);
    q_row0 = qs.start;
    seq_q = qs.len;
    k_row0 = ks.start;
    seq_k = ks.len;
    if (m0 >= seq_q) {
      return; // past this sequence's queries (an empty one included): nothing to do
    }
  }
  // AT_KVCACHE: the sequence's cached keys (cache rows cache_first .. cache_first +
  // cache_len - 1), then the appended ones (copied into the cache after the cached rows by
  // one block per (batch, kv head), before any return).
  int cache_len = 0;
  int cache_first = 0; // cache_leftpad[batch], clamped (contiguous caches only)
  if (k_kvcache) {
    // With AT_VARLEN the cache is paged and cu_seqlens_k counts each sequence's keys.
    const int listed = k_varlen ? seq_k : args.cache_seqlens[batch];
    const int cached = min(max(listed, 0), args.kv_capacity - args.seq_new);
    if (args.cache_leftpad != nullptr && args.block_table == nullptr) {
      cache_first = min(max(args.cache_leftpad[batch], 0), cached);
    }
    cache_len = cached - cache_first;
    seq_k = cache_len + args.seq_new;
    if (args.seq_new > 0 && m_block == 0 && split == 0 &&
        head % (args.heads_q / args.heads_kv) == 0) {
      append_new_kv(args, batch, kv_head, cached);
    }
  }
  // Query i's diagonal key is i + diag. The block's rows hold queries q_lo..q_hi (with
  // AT_GROUPED every query of the group's heads may be there: 0..group_sq - 1).
  const int diag = seq_k - (k_grouped ? args.group_sq : seq_q);
  const int q_lo = k_grouped ? 0 : m0;
  const int q_hi = k_grouped ? args.group_sq - 1 : m0 + k_block_m - 1;
  // The window around it: keys [i + diag - left, i + diag + right]; -1 is unbounded.
  const int right = k_causal ? 0 : (k_window ? args.window_right : -1);
  const int left = k_window ? args.window_left : -1;

  int n_end = (seq_k + k_block_n - 1) / k_block_n; // key tiles [n_start, n_end)
  int n_start = 0;
  if (k_causal || k_window) {
    if (right >= 0) {
      const int last_key = q_hi + diag + right; // the last key any row sees
      if (last_key < 0) {
        // Sq > Sk and no row of this block sees a key: no key loop, no workspace, no
        // arrival counter (with key splits, split 0 alone writes the rows).
        if (split == 0) {
          store_rows_without_keys(args, batch, head, m0, seq_q, q_row0);
        }
        return;
      }
      n_end = min(n_end, last_key / k_block_n + 1);
    }
    if (left >= 0) {
      // The first key any row sees; at most Sk - 1 (m0 < Sq) and at most the last one
      // (left, right >= 0), so the range is never empty.
      const int first_key = q_lo + diag - left;
      n_start = first_key > 0 ? first_key / k_block_n : 0;
    }
  }
  if ((k_varlen || k_kvcache) && n_end <= n_start) {
    // A sequence without keys (seq_k = 0): every row gets O = 0 and LSE = -inf.
    if (split == 0) {
      store_rows_without_keys(args, batch, head, m0, seq_q, q_row0);
    }
    return;
  }
  // This split's key tiles: [n_first, n_first + n_blocks), visited last to first.
  const int n_range = n_end - n_start;
  const int per_split = (n_range + k_splits - 1) / k_splits;
  const int n_first = n_start + min(n_range, split * per_split);
  const int n_blocks = min(n_range, n_first - n_start + per_split) - (n_first - n_start);
  float alibi_slope = 0.0f; // in units of the accumulated scores
  if (k_alibi) {
    alibi_slope = args.alibi_slopes[batch * args.alibi_batch_stride + head] * args.alibi_scale;
  }

  // Q's rows of this block (AT_GROUPED: of the group's first head, rows at row_offset).
  const elem_t* q_g = args.q + batch * args.q_batch_stride + head * args.q_head_stride +
                      (q_row0 + (k_grouped ? 0 : m0)) * args.q_seq_stride;
  const elem_t* k_g = args.k + batch * args.k_batch_stride + kv_head * args.k_head_stride +
                      k_row0 * args.k_seq_stride;
  const elem_t* v_g = args.v + batch * args.v_batch_stride + kv_head * args.v_head_stride +
                      k_row0 * args.v_seq_stride;

  auto load_k = [&](int n_block, int buffer) {
    const int n0 = n_block * k_block_n;
    if (k_kvcache) {
      // The tile's cached keys lie in one page (page_size % block_n == 0); the new ones
      // (rows from cache_len - n0 on) come from k_new.
      const elem_t* cache = args.k + kv_head * args.k_head_stride +
                            (n0 < cache_len ? cache_row(args, batch, cache_first + n0,
                                                        args.k_batch_stride, args.k_seq_stride)
                                            : 0);
      const elem_t* fresh = (args.k_new != nullptr ? args.k_new : args.k) +
                            batch * args.kn_batch_stride + kv_head * args.kn_head_stride +
                            (n0 - cache_len) * args.kn_seq_stride;
      load_tile2<k_block_n>(k_base + buffer * k_kv_tile_bytes, cache, args.k_seq_stride,
                            cache_len - n0, fresh, args.kn_seq_stride, seq_k - n0);
      return;
    }
    load_tile<k_block_n>(k_base + buffer * k_kv_tile_bytes, k_g + n0 * args.k_seq_stride,
                         args.k_seq_stride, seq_k - n0);
  };
  auto load_v = [&](int n_block, int buffer) {
    const int n0 = n_block * k_block_n;
    if (k_kvcache) {
      const elem_t* cache = args.v + kv_head * args.v_head_stride +
                            (n0 < cache_len ? cache_row(args, batch, cache_first + n0,
                                                        args.v_batch_stride, args.v_seq_stride)
                                            : 0);
      const elem_t* fresh = (args.v_new != nullptr ? args.v_new : args.v) +
                            batch * args.vn_batch_stride + kv_head * args.vn_head_stride +
                            (n0 - cache_len) * args.vn_seq_stride;
      load_tile2<k_block_n>(v_base + buffer * k_kv_tile_bytes, cache, args.v_seq_stride,
                            cache_len - n0, fresh, args.vn_seq_stride, seq_k - n0);
      return;
    }
    load_tile<k_block_n>(v_base + buffer * k_kv_tile_bytes, v_g + n0 * args.v_seq_stride,
                         args.v_seq_stride, seq_k - n0);
  };

  // Prologue: Q, then the first key tiles (the last ones in key order).
  if (k_grouped) {
    load_q_grouped(q_base, q_g, args, m0, seq_q - m0);
  } else {
    load_tile<k_block_m>(q_base, q_g, args.q_seq_stride, seq_q - m0);
  }
  if (k_stages == 1) {
    if (n_blocks > 0) {
      load_k(n_first + n_blocks - 1, 0);
    }
    cp_async_commit();
  } else {
#pragma unroll
    for (int s = 0; s < k_stages - 1; ++s) {
      if (s < n_blocks) {
        load_k(n_first + n_blocks - 1 - s, s);
        load_v(n_first + n_blocks - 1 - s, s);
      }
      cp_async_commit(); // empty groups keep the group count uniform
    }
  }

  float o[k_m_tiles][k_d_tiles][4];
  float row_max[k_m_tiles][2]; // reference max M of the raw scores, rows g and g + 8
  float row_sum[k_m_tiles][2]; // this thread's share of the running sum
#pragma unroll
  for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < k_d_tiles; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        o[mt][dt][e] = 0.0f;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[mt][h] = at_neg_inf();
      row_sum[mt][h] = 0.0f;
    }
  }
  unsigned q_frag[k_q_in_regs ? k_m_tiles : 1][k_q_in_regs ? k_k_steps : 1][4];
  const int warp_row0 = warp / k_key_warps * k_warp_m; // this warp's first row in the block
  const int warp_key0 = warp % k_key_warps * k_warp_n; // ... and first key of each tile

  for (int it = 0; it < n_blocks; ++it) {
    const int n_block = n_first + n_blocks - 1 - it;
    const int n0 = n_block * k_block_n;
    const int buffer = k_stages == 1 ? 0 : it % k_stages;
    const unsigned k_tile = k_base + buffer * k_kv_tile_bytes;
    const unsigned v_tile = v_base + buffer * k_kv_tile_bytes;

    if (k_stages == 1) {
      cp_async_wait<0>(); // K of this tile (and Q) landed
      __syncthreads();    // ... for every thread; and everyone is done with the last V
      load_v(n_block, 0);
      cp_async_commit();
    } else {
      cp_async_wait<(k_stages >= 2 ? k_stages - 2 : 0)>();
      __syncthreads(); // this tile landed; everyone is done with the buffer refilled next
      const int ahead = it + k_stages - 1;
      if (ahead < n_blocks) {
        load_k(n_first + n_blocks - 1 - ahead, ahead % k_stages);
        load_v(n_first + n_blocks - 1 - ahead, ahead % k_stages);
      }
      cp_async_commit();
    }

    if (k_q_in_regs && it == 0) {
#pragma unroll
      for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
        for (int ks = 0; ks < k_k_steps; ++ks) {
          load_a_fragment(q_frag[k_q_in_regs ? mt : 0][k_q_in_regs ? ks : 0], q_base,
                          warp_row0 + mt * 16, ks, lane);
        }
      }
    }

    // S = Q K^T for this warp's rows and the tile's keys.
    float s[k_m_tiles][k_n_tiles][4];
#pragma unroll
    for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < k_n_tiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[mt][nt][e] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int ks = 0; ks < k_k_steps; ++ks) {
      unsigned qa[k_m_tiles][4];
#pragma unroll
      for (int mt = 0; mt < k_m_tiles; ++mt) {
        if (k_q_in_regs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            qa[mt][e] = q_frag[k_q_in_regs ? mt : 0][k_q_in_regs ? ks : 0][e];
          }
        } else {
          load_a_fragment(qa[mt], q_base, warp_row0 + mt * 16, ks, lane);
        }
      }
#pragma unroll
      for (int np = 0; np < k_n_tiles / 2; ++np) {
        // Two 8-key tiles x (k 0..7, k 8..15) of K rows as B fragments.
        unsigned kb[4];
        const int row = warp_key0 + np * 16 + (lane & 7) + (lane >> 4) * 8;
        const int chunk = 2 * ks + ((lane >> 3) & 1);
        ldmatrix_x4(kb, k_tile + tile_offset(row, chunk) * static_cast<int>(sizeof(elem_t)));
#pragma unroll
        for (int mt = 0; mt < k_m_tiles; ++mt) {
          mma_m16n8k16(s[mt][2 * np], qa[mt], kb[0], kb[1], elem_t{});
          mma_m16n8k16(s[mt][2 * np + 1], qa[mt], kb[2], kb[3], elem_t{});
        }
      }
    }

    // Softcap, then ALiBi, on the accumulated scores (flash-attn's order): the logits
    // are scale_log2 / log2(e) times what s holds after this.
    if (k_softcap || k_alibi) {
#pragma unroll
      for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
        for (int nt = 0; nt < k_n_tiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (k_softcap) {
              s[mt][nt][e] = at_tanh_approx(s[mt][nt][e] * args.softcap_scale);
            }
            if (k_alibi) {
              const int row = query_of(args, m0 + warp_row0 + mt * 16 + g + (e >> 1) * 8);
              const int col = n0 + warp_key0 + nt * 8 + 2 * t + (e & 1);
              s[mt][nt][e] -= alibi_slope * static_cast<float>(abs(row + diag - col));
            }
          }
        }
      }
    }

    // Keys past the end, and keys outside each row's window (causal: after its
    // diagonal). Only tiles that cross a bound pay for the mask.
    const bool need_mask =
        n0 + k_block_n > seq_k ||
        ((k_causal || k_window) && right >= 0 && n0 + k_block_n - 1 > q_lo + diag + right) ||
        (k_window && left >= 0 && n0 < q_hi + diag - left);
    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
        for (int nt = 0; nt < k_n_tiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = query_of(args, m0 + warp_row0 + mt * 16 + g + (e >> 1) * 8);
            const int col = n0 + warp_key0 + nt * 8 + 2 * t + (e & 1);
            if (col >= seq_k ||
                ((k_causal || k_window) && right >= 0 && col > row + diag + right) ||
                (k_window && left >= 0 && col < row + diag - left)) {
              s[mt][nt][e] = at_neg_inf();
            }
          }
        }
      }
    }

    if (k_stages == 1) {
      // Before the softmax, as FlashAttention-2 does: the next K load then overlaps
      // the softmax as well as P V.
      cp_async_wait<0>(); // V of this tile landed
      __syncthreads();    // ... for every thread; and everyone is done with K
      if (it + 1 < n_blocks) {
        load_k(n_block - 1, 0);
      }
      cp_async_commit();
    }

    // Online softmax, rescaling lazily (as FlashAttention-4 does): P = exp2(scale_log2 *
    // (S - M)) against a reference max M per row that moves only when some row of the
    // warp saw a score more than 2^8 above it (in exp2 units); then M becomes the true
    // running max and O and the sum are rescaled by exp2(scale_log2 * (old M - new M)).
    // Otherwise P stays below 2^8 (fine in fp32 sums and 16-bit P) and the tile skips
    // the rescale of O. The first tile with a key always moves M (from -inf).
    float tile_max[k_m_tiles][2];
    bool grow = false;
#pragma unroll
    for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = at_neg_inf();
#pragma unroll
        for (int nt = 0; nt < k_n_tiles; ++nt) {
          mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        }
        // The four threads of a quad hold one row between them.
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        tile_max[mt][h] = mx;
        // -inf compares false on both sides: a row with no key here never grows.
        grow |= mx * args.scale_log2 > fmaf(row_max[mt][h], args.scale_log2, k_rescale_log2);
      }
    }
    if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
      for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float mx = fmaxf(row_max[mt][h], tile_max[mt][h]);
          // A row that has seen no key yet keeps max -inf: subtract 0 so that every
          // exponent stays -inf (giving 0) instead of -inf - -inf = NaN.
          const float max_scaled = mx == at_neg_inf() ? 0.0f : mx * args.scale_log2;
          const float alpha = at_exp2_approx(row_max[mt][h] * args.scale_log2 - max_scaled);
          row_max[mt][h] = mx;
          row_sum[mt][h] *= alpha;
#pragma unroll
          for (int dt = 0; dt < k_d_tiles; ++dt) {
            o[mt][dt][2 * h] *= alpha;
            o[mt][dt][2 * h + 1] *= alpha;
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float max_scaled =
            row_max[mt][h] == at_neg_inf() ? 0.0f : row_max[mt][h] * args.scale_log2;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < k_n_tiles; ++nt) {
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            const float p = at_exp2_approx(fmaf(s[mt][nt][e], args.scale_log2, -max_scaled));
            s[mt][nt][e] = p;
            sum += p;
          }
        }
        row_sum[mt][h] += sum;
      }
    }

    // O += P V, P taken from the S accumulators as 16-bit A fragments.
#pragma unroll
    for (int kc = 0; kc < k_warp_n / 16; ++kc) {
      unsigned pa[k_m_tiles][4];
#pragma unroll
      for (int mt = 0; mt < k_m_tiles; ++mt) {
        pa[mt][0] = at_pack2(s[mt][2 * kc][0], s[mt][2 * kc][1], elem_t{});
        pa[mt][1] = at_pack2(s[mt][2 * kc][2], s[mt][2 * kc][3], elem_t{});
        pa[mt][2] = at_pack2(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1], elem_t{});
        pa[mt][3] = at_pack2(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3], elem_t{});
      }
#pragma unroll
      for (int dp = 0; dp < k_d_tiles / 2; ++dp) {
        // Keys kc*16 .. +15 x two 8-column tiles of V, transposed into B fragments.
        unsigned vb[4];
        const int row = warp_key0 + kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int chunk = 2 * dp + (lane >> 4);
        ldmatrix_x4_trans(vb, v_tile + tile_offset(row, chunk) * static_cast<int>(sizeof(elem_t)));
#pragma unroll
        for (int mt = 0; mt < k_m_tiles; ++mt) {
          mma_m16n8k16(o[mt][2 * dp], pa[mt], vb[0], vb[1], elem_t{});
          mma_m16n8k16(o[mt][2 * dp + 1], pa[mt], vb[2], vb[3], elem_t{});
        }
      }
    }
  }
  cp_async_wait<0>(); // nothing may still write into shared memory we reuse below

  if constexpr (k_key_warps > 1) {
    merge_key_warps(o, row_max, row_sum, reinterpret_cast<float*>(k_s), warp, lane,
                    args.scale_log2);
  }
  // The first warp of a group holds its rows' state; the others are done with them.
  const bool owns_rows = warp % k_key_warps == 0;
  if constexpr (k_splits > 1) {
    store_split_and_merge(args, o, row_max, row_sum, batch, head, m_blocks, m_block, m0, split,
                          warp_row0, g, t, owns_rows, reinterpret_cast<unsigned*>(q_s), seq_q,
                          q_row0);
    return;
  }
  if (!owns_rows) {
    return;
  }

  // Epilogue: O / sum, staged through this warp's own rows of the Q tile (only this
  // warp ever reads them) so that global stores are whole 16-byte chunks. Other
  // threads' cp.async filled those rows: the key loop's barrier (it ran at least once:
  // a block without keys returned above) is what orders their Q copies before this.
#pragma unroll
  for (int mt = 0; mt < k_m_tiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float sum = quad_sum(row_sum[mt][h]);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      const int local_row = warp_row0 + mt * 16 + g + h * 8;
#pragma unroll
      for (int dt = 0; dt < k_d_tiles; ++dt) {
        const unsigned packed =
            at_pack2(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv, elem_t{});
        *reinterpret_cast<unsigned*>(q_s + tile_offset(local_row, dt) + 2 * t) = packed;
      }
      if (k_lse && t == 0 && m0 + local_row < seq_q) {
        const float lse = row_lse(row_max[mt][h], sum, args.scale_log2);
        args.lse[lse_offset(args, batch, head, q_row0, m0 + local_row)] = lse;
      }
    }
  }
  __syncwarp();
  elem_t* o_g =
      args.o + batch * args.o_batch_stride + head * args.o_head_stride + q_row0 * args.o_seq_stride;
#pragma unroll
  for (int i = lane; i < k_warp_m * k_valid_chunks; i += 32) {
    const int local_row = warp_row0 + i / k_valid_chunks;
    const int chunk = i % k_valid_chunks;
    const int row = m0 + local_row;
    if (row < seq_q) {
      *reinterpret_cast<uint4*>(o_g + o_row_offset(args, row) + chunk * 8) =
          *reinterpret_cast<const uint4*>(q_s + tile_offset(local_row, chunk));
    }
  }
}

#endif // AT_WGMMA
