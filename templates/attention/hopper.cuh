// Attention forward for Hopper (sm_90a; FlashAttention-3 structure), the `family=wgmma`
// variants of templates/attention/kernel.cuh. Same semantics as the portable kernel:
//   O = softmax(scale * Q K^T + mask) V,  LSE = log sum_j exp(scale * q.k_j)  (optional)
// causal masks bottom-right aligned (query i sees keys j <= i + Sk - Sq); with AT_SOFTCAP
// the logits become softcap * tanh(scale * q.k / softcap), then with AT_ALIBI lose
// slope_h * |i + Sk - Sq - j| (flash-attn's order, as the portable kernel); a row that
// sees no key gets O = 0 and LSE = -inf; GQA/MQA (query head h reads kv head
// h / (Hq / Hkv)); any strides the tensor maps accept (16-byte multiples).
//
// One block owns k_block_m = 64 x k_consumers query rows of one (batch, head) and is
// warp-specialised:
//   - warpgroup 0, the producer, gives most of its registers away (setmaxnreg) and
//     one of its threads issues tensor-memory-accelerator copies
//     (cp.async.bulk.tensor) of the Q tile once and of K and V tiles of k_block_n keys
//     into a ring of k_stages buffers, each completing on its own mbarrier ("full");
//     it refills a K or V buffer when every consumer warp has arrived on that buffer's
//     "empty" barrier. Copies past the tensor's rows read zeros.
//   - warpgroups 1..k_consumers, the consumers, take those registers and own 64
//     query rows each: S = Q K^T with wgmma.mma_async (Q and K from shared memory,
//     128-byte swizzled as TMA writes them), the online softmax in fp32 with exp2
//     (scale folded with log2 e), P rounded to 16 bits in registers as the A operand
//     of O += P V (wgmma with V read transposed from shared memory). The P V product
//     of tile n is issued together with S of tile n + 1 (one wait for both, the
//     tensor cores never idle between them); a stage is released (one arrival per
//     consumer warp) once its P V is done, or with 1-2 stages its K once its S is done
//     and its V after P V. At the end O is normalised once, staged
//     through the consumer's own rows of the Q tile and stored as 16-byte chunks; a
//     persistent block instead stores it from registers under the next tile's first
//     S = Q K^T.
// Causal blocks above the diagonal are never loaded; only tiles that cross the
// diagonal or the end of the keys are masked. Key tiles are visited first to last;
// causal query blocks start last-first (the longest first).
//
// Compile-time parameters (NVRTC -D, set by runtime/ops/attention.cpp):
//   AT_BLOCK_M   query rows per block, 64 per consumer warpgroup (64, 128, 192): more
//                consumers reuse each K/V tile for more rows and hide each other's
//                softmax, at fewer registers each (240 with 1-2, 160 with 3, 232
//                with one consumer at two blocks per SM).
//   AT_BLOCK_N   keys per tile (the N of S = Q K^T: 64, 80, 96, 112, 128, 176, 192):
//                larger tiles amortise barriers and softmax bookkeeping, but the S tile
//                lives in registers.
//   AT_STAGES    K/V buffers in the ring (1-4): deeper rings hide load latency at the
//                cost of shared memory.
//   AT_PINGPONG  1 (family=wgmma_pingpong, 2-3 consumers, 2+ stages): consumers take
//                turns issuing their products through named barriers, so that one's
//                softmax runs under another's GEMMs; 0: they issue as they are ready.
//   AT_OVERLAP   1 (family=wgmma_overlap*, 2+ stages): each consumer issues S = Q K^T of
//                tile n and O += P V of n - 1 together and softmaxes n under the second.
//   AT_ONE_P     1: the overlapped schedule keeps one P register set (FlashAttention-3's
//                order) because two do not fit beside O and S (D=256, wide key tiles);
//                0: two sets, P of n built while P V of n - 1 still reads the other.
//   AT_MIN_BLOCKS 2 (set by the op for one consumer whose shared memory fits twice):
//                registers split for two blocks per SM, one block's prologue and
//                epilogue under the other's products; else 1.
//   AT_PERSISTENT 1 (family=*_persistent): min(tiles, 132 x blocks per SM) blocks loop
//                over query tiles, the next tile's Q and first K/V loading under this
//                one's end, at a second Q buffer and the loop's registers. Causal tiles
//                are taken longest first from a per-launch counter (dynamic), others
//                by a fixed stride (all the same length).
//   AT_CLUSTER   2 (family=wgmma_multicast, wgmma_overlap_multicast; non-causal, no window,
//                not persistent): blocks run in clusters of two query blocks of one head,
//                each producer loading half the rows of every K and V tile and
//                multicasting them into both blocks' rings (half the L2-to-SM traffic for
//                K and V); a buffer is refilled once both blocks' consumers released it.
//                1: every block loads its own tiles.
//   AT_HEAD_DIM  D: a multiple of 8 in 32..256. Tiles hold D rounded up to 64, 128, 192
//                or 256 columns (k_pad_dim: whole 64-column slabs, and the m64nNk16 shapes
//                O += P V uses: N = 64, 128, 192, 256); the tensor maps' inner extent is
//                D, so TMA fills the columns from D on with zeros.
//                S = Q K^T takes ceil(D / 16) k=16 steps (the zero columns of the last
//                one add nothing); O += P V is one m64nPk16 per 16 keys with N = P =
//                k_pad_dim (V is read MN-major, whose 128-byte swizzle atom is 64
//                columns wide: N must be whole slabs, k_kv_slab_bytes apart), and the
//                epilogue stores D columns. At 256, O alone takes 128 registers a
//                consumer thread, so the tiles are FlashAttention-3's: 1-2 consumers,
//                block_n <= 96, 1-2 stages (Q 64 KiB + 512 bytes per key and stage),
//                one block per SM.
//   AT_VARLEN    1: packed sequences (flash-attn's varlen): q, o [Tq, Hq, D], k, v [Tk,
//                Hkv, D], sequence b's tokens from cu_seqlens_q/k[b] to [b + 1]. The tensor
//                maps span the packed tokens (batch extent 1); a tile loads rows from its
//                sequence's first token on (rows past the sequence belong to the next one
//                or, past the tensor, read zeros: its own length masks them), and a block
//                whose query rows all lie past its sequence's end exits at once. Not
//                persistent, no clusters.
//   AT_PAGED     1 (with AT_VARLEN; flash_attn_varlen_func's block_table): K and V are a
//                paged cache [num_blocks, page, Hkv, D]; the maps' batch coordinate is the
//                page and the sequence coordinate the row in it: key tile n of sequence b
//                is rows (n * block_n) % page of page block_table[b][n * block_n / page]
//                (page a multiple of block_n, so a tile lies in one page). Its keys count
//                from cu_seqlens_k as packed ones do.
//   AT_CAUSAL, AT_LSE, AT_SOFTCAP, AT_ALIBI: 0/1; AT_T: at_bf16 or at_f16 (AT_BF16 says
//                which to the wgmma instruction).
#pragma once

#include "common/hopper.cuh"
#include "common/numeric.cuh"

#if AT_BF16
#define AT_WGMMA_AB ".bf16.bf16"
#else
#define AT_WGMMA_AB ".f16.f16"
#endif
#include "common/wgmma.cuh"

typedef AT_T elem_t;

constexpr int k_head_dim = AT_HEAD_DIM;
constexpr int k_pad_dim = (k_head_dim + 63) / 64 * 64; // whole 64-column slabs
constexpr int k_block_m = AT_BLOCK_M;
constexpr int k_block_n = AT_BLOCK_N;
constexpr int k_stages = AT_STAGES;
constexpr bool k_causal = AT_CAUSAL != 0;
constexpr bool k_lse = AT_LSE != 0;
#ifndef AT_WINDOW
#define AT_WINDOW 0
#endif
// A sliding window (args.window_left/right keys around each row's diagonal, -1
// unbounded): key tiles wholly outside every row's window are neither loaded nor
// computed, those crossing its edges are masked.
constexpr bool k_window = AT_WINDOW != 0;
// Softcap and ALiBi act on each score before the mask and the max, in the softmax's
// registers: one more tanh (the exp unit's) per score with softcap, two integer and one
// FMA-pipe operation per score with ALiBi; the products and the loads do not change.
#ifndef AT_SOFTCAP
#define AT_SOFTCAP 0
#endif
#ifndef AT_ALIBI
#define AT_ALIBI 0
#endif
constexpr bool k_softcap = AT_SOFTCAP != 0;
constexpr bool k_alibi = AT_ALIBI != 0;
#ifndef AT_VARLEN
#define AT_VARLEN 0
#endif
constexpr bool k_varlen = AT_VARLEN != 0;
#ifndef AT_PAGED
#define AT_PAGED 0
#endif
constexpr bool k_paged = AT_PAGED != 0;
static_assert(!k_paged || k_varlen, "a paged cache with packed sequences only");
#ifndef AT_PINGPONG
#define AT_PINGPONG 0
#endif
constexpr bool k_pingpong = AT_PINGPONG != 0;
#ifndef AT_OVERLAP
#define AT_OVERLAP 0
#endif
constexpr bool k_overlap = AT_OVERLAP != 0;
// The overlapped schedule keeps one P register set where two do not fit beside O (over
// 192 columns always; runtime/ops/attention.cpp's wgmma_one_p decides and passes AT_ONE_P).
#ifndef AT_ONE_P
#define AT_ONE_P (AT_HEAD_DIM > 192)
#endif
constexpr bool k_one_p = k_overlap && AT_ONE_P != 0;
// With 1-2 stages a K buffer is released once S = Q K^T has read it, apart from its V
// (released after P V, a product later), so that the producer loads the next K under
// that P V: with one release per stage after P V the loads of a 2-stage ring waited a
// product too long (D=256, 128 x 80: 1009 -> 735 us). With 3+ stages the ring hides that
// wait already, and the split measured slower (bench/notes/attention-hopper.md).
constexpr bool k_split_release = k_stages <= 2;
static_assert(!(k_overlap && (k_pingpong || k_stages < 2)),
              "overlap: no ping-pong, and a second stage for the next K");
#ifndef AT_PERSISTENT
#define AT_PERSISTENT 0
#endif
constexpr bool k_persistent = AT_PERSISTENT != 0;
static_assert(!(k_persistent && k_pingpong), "persistent: no ping-pong");
// Causal persistent blocks take their tiles from a counter in the longest-first order
// (the first one is blockIdx.x): a block that finishes early takes the next longest tile
// left, where a fixed stride through that order leaves some blocks a long tile more than
// others at the end. The counters live in this module's global memory, one pair (tiles
// taken, blocks done) per launch slot; the host gives concurrent launches of a variant
// different slots (AttnArgs::sched_slot, cycling over k_sched_slots), and the last block
// of a launch leaves its pair zero for the slot's next launch.
constexpr bool k_dynamic = k_persistent && k_causal;
#ifndef AT_CLUSTER
#define AT_CLUSTER 1
#endif
constexpr int k_cluster = AT_CLUSTER;
static_assert(k_cluster == 1 || (k_cluster == 2 && !k_persistent && !k_causal && !k_window),
              "clusters of two: every block of a cluster reads the same key tiles");
constexpr int k_sched_slots = 64; // runtime/ops/attention.cpp's k_hopper_sched_slots
static_assert((k_sched_slots & (k_sched_slots - 1)) == 0, "slots: a power of two");
__device__ unsigned at_sched[2 * k_sched_slots];

#ifndef AT_MIN_BLOCKS
#define AT_MIN_BLOCKS 1
#endif
constexpr int k_consumers = k_block_m / 64;
constexpr int k_threads = 128 * (k_consumers + 1);
constexpr int k_min_blocks = AT_MIN_BLOCKS; // blocks per SM the registers are split for
// Registers per thread after reallocation: the producer keeps what issuing copies
// needs; consumers split the rest (kernel cap x threads = 64K / k_min_blocks).
constexpr int k_producer_regs = k_consumers == 3 ? 32 : 24;
constexpr int k_consumer_regs = k_min_blocks == 2 ? 232 : k_consumers == 3 ? 160 : 240;
static_assert(k_min_blocks == 1 || (k_min_blocks == 2 && k_consumers == 1),
              "two blocks per SM only with one consumer");
// m64n256k16 (D=256) needs ~158 registers at the entry cap: 256 threads x 2 blocks and
// 512 threads leave 128.
static_assert(k_pad_dim <= 128 || (k_min_blocks == 1 && k_consumers <= 2),
              "D over 128: one block per SM, 1-2 consumers");

// Shared memory: tiles as 64-column slabs (128 bytes per row, the TMA 128-byte swizzle
// span), each slab 1024-byte aligned: Q [d_slabs][block_m][64], then per stage K and V
// [d_slabs][block_n][64]; then the barriers.
constexpr int k_slabs = k_pad_dim / 64;
constexpr int k_q_slab_bytes = k_block_m * 128;
constexpr int k_kv_slab_bytes = k_block_n * 128;
constexpr int k_q_bytes = k_slabs * k_q_slab_bytes;
constexpr int k_kv_bytes = k_slabs * k_kv_slab_bytes;
// The rows of a K or V tile each block of a cluster loads (and multicasts): whole
// 8-row swizzle atoms, so each part starts 1024-byte aligned.
constexpr int k_kv_part_rows = k_block_n / k_cluster;
static_assert(k_kv_part_rows % 8 == 0, "a cluster's parts of a tile: whole swizzle atoms");
// Persistent blocks double-buffer Q: the next tile's Q loads while this one's is read.
constexpr int k_q_bufs = k_persistent ? 2 : 1;
constexpr int k_k_offset = k_q_bufs * k_q_bytes;
constexpr int k_v_offset = k_k_offset + k_stages * k_kv_bytes;
constexpr int k_bar_offset = k_v_offset + k_stages * k_kv_bytes;
// After the barriers, persistent blocks keep the tile index of each Q buffer (the
// producer writes it before the buffer's q_full arrival; k_dynamic only reads it).
constexpr int k_s_regs = k_block_n / 2; // S accumulator floats per thread
constexpr int k_o_regs = k_pad_dim / 2;

static_assert(k_block_m % 64 == 0 && k_consumers >= 1 && k_consumers <= 3, "1-3 consumers");
static_assert(k_block_n % 16 == 0 && k_block_n <= 256, "key tile");
static_assert(k_head_dim % 8 == 0 && k_head_dim >= 32 && k_head_dim <= 256,
              "head dim: a multiple of 8 in 32..256");
static_assert(k_stages >= 1 && k_stages <= 4, "stages");
static_assert(k_kv_slab_bytes % 1024 == 0, "slabs keep 1024-byte alignment");

// The host side is AttentionHopperKernelArgs in runtime/ops/attention.hpp (checked field
// for field by tests/test_runtime_ops_kernel_args.cpp).
// Each map is 4-d with D innermost and B outermost; the sequence and head dimensions
// come in the order of their strides (a map's strides must grow), which *_seq_inner
// says: 1: {D, S, H, B} with box {64, rows, 1, 1}; 0: {D, H, S, B}, box {64, 1, rows, 1}.
struct AttnArgs {
  at_tensor_map q_map; // Q, rows of k_block_m
  at_tensor_map k_map; // K, rows of k_block_n
  at_tensor_map v_map; // V, rows of k_block_n
  elem_t* o;
  float* lse; // [B, Hq, Sq] contiguous, or null when AT_LSE is 0
  long long o_batch_stride, o_head_stride, o_seq_stride;
  int heads_q;
  int heads_kv;
  int seq_q;
  int seq_k;
  float scale_log2; // softmax scale * log2(e)
  int batch;
  int q_seq_inner, k_seq_inner, v_seq_inner;
  int window_left, window_right; // AT_WINDOW: keys before / after the diagonal, -1 unbounded
  int sched_slot;                // k_dynamic: this launch's pair of at_sched counters
  int sched_group;               // persistent causal: (batch, head) pairs per tile group
  // log2(e) times scale_log2's factor is scale, or softcap with AT_SOFTCAP: S then holds
  // tanh(scale * q.k / softcap), scale / softcap being softcap_scale.
  float softcap_scale;
  // AT_ALIBI: slopes[batch * alibi_batch_stride + head] times alibi_scale (1 / the
  // factor of scale_log2) is the slope in units of S.
  float alibi_scale;
  const float* alibi_slopes;
  long long alibi_batch_stride;
  // AT_VARLEN: the sequences' first tokens, int32 [B + 1] (o_batch_stride is 0); LSE is
  // [Hq, Tq] with this head stride.
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  long long lse_head_stride;
  // AT_PAGED: int32 [B, block_table_stride] pages of page_size keys, kv_capacity keys a
  // sequence's row of the table holds (its key count is clamped to it).
  const int* block_table;
  long long block_table_stride;
  int page_size;
  int kv_capacity;
  // AT_VARLEN: the rows q (and o, lse) and k (and v) hold, which bound each sequence's
  // offsets (at_packed_span, kernel.cuh); INT_MAX for a paged cache's key counts.
  int tokens_q, tokens_k;
};

// One box of `rows` rows from sequence position `seq` of (head, batch), all 64-column
// slabs of the head dim, completing on `bar`.
__device__ __forceinline__ void load_rows(unsigned dst, unsigned slab_bytes,
                                          const at_tensor_map* map, int seq_inner, unsigned bar,
                                          int seq, int head, int batch) {
#pragma unroll
  for (int d = 0; d < k_slabs; ++d) {
    if (seq_inner) {
      tma_load_4d(dst + d * slab_bytes, map, bar, d * 64, seq, head, batch);
    } else {
      tma_load_4d(dst + d * slab_bytes, map, bar, d * 64, head, seq, batch);
    }
  }
}

// A cluster block's part of a K or V tile (k_kv_part_rows rows from `seq`, every
// 64-column slab) into the same offset of every block in `mask`, completing on `bar`
// in each.
__device__ __forceinline__ void load_part(unsigned dst, const at_tensor_map* map, int seq_inner,
                                          unsigned bar, int seq, int head, int batch,
                                          unsigned short mask) {
#pragma unroll
  for (int d = 0; d < k_slabs; ++d) {
    if (seq_inner) {
      tma_load_4d_multicast(dst + d * k_kv_slab_bytes, map, bar, d * 64, seq, head, batch, mask);
    } else {
      tma_load_4d_multicast(dst + d * k_kv_slab_bytes, map, bar, d * 64, head, seq, batch, mask);
    }
  }
}

// S = Q K^T for one consumer's 64 rows and one key tile.
__device__ __forceinline__ void qk_product(float (&s)[k_s_regs], unsigned q_tile, unsigned k_tile) {
#pragma unroll
  for (int ks = 0; ks < (k_head_dim + 15) / 16; ++ks) {
    const unsigned slab = static_cast<unsigned>(ks / 4);
    const unsigned col = static_cast<unsigned>(ks % 4) * 32;
    const unsigned long long a = wgmma_desc(q_tile + slab * k_q_slab_bytes + col, 16, 1024);
    const unsigned long long b = wgmma_desc(k_tile + slab * k_kv_slab_bytes + col, 16, 1024);
#if AT_BLOCK_N == 64
    wgmma_ss_n64(s, a, b, ks > 0);
#elif AT_BLOCK_N == 80
    wgmma_ss_n80(s, a, b, ks > 0);
#elif AT_BLOCK_N == 96
    wgmma_ss_n96(s, a, b, ks > 0);
#elif AT_BLOCK_N == 112
    wgmma_ss_n112(s, a, b, ks > 0);
#elif AT_BLOCK_N == 128
    wgmma_ss_n128(s, a, b, ks > 0);
#elif AT_BLOCK_N == 176
    wgmma_ss_n176(s, a, b, ks > 0);
#elif AT_BLOCK_N == 192
    wgmma_ss_n192(s, a, b, ks > 0);
#else
#error "AT_BLOCK_N must be 64, 80, 96, 112, 128, 176 or 192 for family=wgmma"
#endif
  }
}

// O += P V: k=16 steps down the key tile; V is read MN-major (keys are its rows).
__device__ __forceinline__ void
pv_product(float (&o)[k_o_regs], const unsigned (&p)[k_block_n / 16][4], unsigned v_tile) {
#pragma unroll
  for (int kk = 0; kk < k_block_n / 16; ++kk) {
    const unsigned long long b =
        wgmma_desc(v_tile + static_cast<unsigned>(kk) * 16 * 128, k_kv_slab_bytes, 1024);
#if AT_HEAD_DIM <= 64
    wgmma_rs_n64(o, p[kk], b, 1);
#elif AT_HEAD_DIM <= 128
    wgmma_rs_n128(o, p[kk], b, 1);
#elif AT_HEAD_DIM <= 192
    wgmma_rs_n192(o, p[kk], b, 1); // 3 slabs of V, k_kv_slab_bytes apart (the lbo)
#else
    wgmma_rs_n256(o, p[kk], b, 1); // 4 slabs of V, k_kv_slab_bytes apart (the lbo)
#endif
  }
}

// A consumer warp is done with a stage (its products waited): one arrival per warp.
__device__ __forceinline__ void release_stage(unsigned bar, int lane) {
  __syncwarp();
  if (lane == 0) {
    mbar_arrive(bar);
  }
}

// A consumer warp is done with a K or V buffer (the products that read it waited): one
// arrival per warp on its "empty" barrier, where `valid`; in a cluster, on the buffer of
// every block (each block's producer writes into all of them). Predicated, not
// branched: a K buffer is released between the P V still in flight and its wait.
__device__ __forceinline__ void release_kv(unsigned bar, int lane, bool valid = true) {
  __syncwarp();
  const bool arrive = valid && lane == 0;
  if (k_cluster == 1) {
    mbar_arrive_if(bar, arrive);
    return;
  }
#pragma unroll
  for (int r = 0; r < k_cluster; ++r) {
    mbar_arrive_cluster_if(bar, static_cast<unsigned>(r), arrive);
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Moves a row's reference max to mx (>= it): alpha is the factor the row's O and sum must
// be scaled by (0 for a row that had seen no key), and the result is the scaled max the
// exponents subtract. A row that still has seen no key keeps max -inf and subtracts 0, so
// that its exponents stay exp2(-inf) = 0 instead of exp2(-inf - -inf) = NaN.
__device__ __forceinline__ float move_max(float& row_max, float mx, float& alpha,
                                          float scale_log2) {
  const float max_scaled = mx == at_neg_inf() ? 0.0f : mx * scale_log2;
  alpha = row_max == at_neg_inf() ? 0.0f : at_exp2_approx(row_max * scale_log2 - max_scaled);
  row_max = mx;
  return max_scaled;
}

// One consumer thread's part of a key tile's softmax (of a sequence of seq_q queries and
// seq_k keys): applies softcap and ALiBi (`slope`, in units of S) to S, masks it where the
// tile crosses
// the end of the keys, (causal) the diagonal or (window) an edge of the window, turns S
// into exponentials against each row's reference max and adds them to the row's running
// sum. With k_lazy_rescale the reference max moves only when some row of the warp saw a
// score more than 2^8 above it (in exp2 units), else on every tile (the same arithmetic
// in one pass per row): then it becomes the true running max, the sums are rescaled, alpha holds
// the factor the rows' O must be scaled by and the function returns true (the same on every lane of
// the warp); otherwise O keeps its scale and the caller skips the rescale. The first tile with a
// key always moves it (from -inf).
__device__ __forceinline__ bool softmax_tile(float (&sc)[k_s_regs], float (&row_max)[2],
                                             float (&row_sum)[2], float (&alpha)[2],
                                             const AttnArgs& args, int n0, int m0, int row0, int t,
                                             float slope, int seq_q, int seq_k) {
  // Lazy rescaling pays where O is large: 64+ registers a thread (tiles of 128 or 256
  // columns). At 64 columns O is rescaled on every tile, in one pass per row, which
  // measured faster there (bench/notes/attention-hopper.md).
  constexpr bool k_lazy_rescale = k_pad_dim >= 128;
  // How far (log2 units) a row's scores may rise above its reference max before O is
  // rescaled: P stays below 2^8 (fine in fp32 sums and 16-bit P).
  constexpr float k_rescale_log2 = 8.0f;
  const int diag = seq_k - seq_q; // query i sees keys j <= i + diag
  // The window around the diagonal: keys [i + diag - left, i + diag + right].
  const int right = k_causal ? 0 : (k_window ? args.window_right : -1);
  const int left = k_window ? args.window_left : -1;
  // The key column and query row of this thread's accumulator i (the wgmma D layout).
  auto col_of = [&](int i) { return n0 + (i / 4) * 8 + 2 * t + (i % 2); };
  auto row_of = [&](int i) { return row0 + ((i / 2) % 2) * 8; };
  if constexpr (k_softcap || k_alibi) {
#pragma unroll
    for (int i = 0; i < k_s_regs; ++i) {
      if (k_softcap) {
        sc[i] = at_tanh_approx(sc[i] * args.softcap_scale);
      }
      if (k_alibi) {
        sc[i] -= slope * static_cast<float>(abs(row_of(i) + diag - col_of(i)));
      }
    }
  }
  const bool past_end = n0 + k_block_n > seq_k;
  const bool crosses_right = right >= 0 && n0 + k_block_n - 1 > m0 + diag + right;
  const bool crosses_left = left >= 0 && n0 < m0 + k_block_m - 1 + diag - left;
  if (past_end || crosses_right || crosses_left) {
#pragma unroll
    for (int i = 0; i < k_s_regs; ++i) {
      const int col = col_of(i);
      const int row = row_of(i);
      if (col >= seq_k || (right >= 0 && col > row + diag + right) ||
          (left >= 0 && col < row + diag - left)) {
        sc[i] = at_neg_inf();
      }
    }
  }
  if constexpr (!k_lazy_rescale) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[h];
#pragma unroll
      for (int i = 0; i < k_s_regs / 4; ++i) {
        mx = fmaxf(mx, fmaxf(sc[4 * i + 2 * h], sc[4 * i + 2 * h + 1]));
      }
      const float max_scaled = move_max(row_max[h], quad_max(mx), alpha[h], args.scale_log2);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < k_s_regs / 4; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float e2 =
              at_exp2_approx(fmaf(sc[4 * i + 2 * h + e], args.scale_log2, -max_scaled));
          sc[4 * i + 2 * h + e] = e2;
          sum += e2;
        }
      }
      row_sum[h] = row_sum[h] * alpha[h] + sum;
    }
    return true;
  }
  float tile_max[2];
  bool grow = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = at_neg_inf();
#pragma unroll
    for (int i = 0; i < k_s_regs / 4; ++i) {
      mx = fmaxf(mx, fmaxf(sc[4 * i + 2 * h], sc[4 * i + 2 * h + 1]));
    }
    tile_max[h] = quad_max(mx);
    // -inf compares false on both sides: a row with no key here never grows.
    grow |= tile_max[h] * args.scale_log2 > fmaf(row_max[h], args.scale_log2, k_rescale_log2);
  }
  const bool rescale = __any_sync(0xffffffffu, grow);
  if (rescale) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      move_max(row_max[h], fmaxf(row_max[h], tile_max[h]), alpha[h], args.scale_log2);
      row_sum[h] *= alpha[h];
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float max_scaled = row_max[h] == at_neg_inf() ? 0.0f : row_max[h] * args.scale_log2;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < k_s_regs / 4; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float e2 = at_exp2_approx(fmaf(sc[4 * i + 2 * h + e], args.scale_log2, -max_scaled));
        sc[4 * i + 2 * h + e] = e2;
        sum += e2;
      }
    }
    row_sum[h] += sum;
  }
  return rescale;
}

// P as wgmma A fragments: k=16 step kk holds the S accumulators of key columns
// 16 kk .. 16 kk + 15 (n8 tiles 2 kk and 2 kk + 1), rounded to 16 bits.
__device__ __forceinline__ void pack_p(unsigned (&p)[k_block_n / 16][4],
                                       const float (&sc)[k_s_regs]) {
#pragma unroll
  for (int kk = 0; kk < k_block_n / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      p[kk][r] = at_pack2(sc[8 * kk + 2 * r], sc[8 * kk + 2 * r + 1], elem_t{});
    }
  }
}

__device__ __forceinline__ void rescale_o(float (&o)[k_o_regs], const float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int i = 0; i < k_o_regs / 4; ++i) {
      o[4 * i + 2 * h] *= alpha[h];
      o[4 * i + 2 * h + 1] *= alpha[h];
    }
  }
}

#if AT_CLUSTER > 1
#define AT_CLUSTER_DIMS __attribute__((cluster_dims(AT_CLUSTER, 1, 1)))
#else
#define AT_CLUSTER_DIMS
#endif
extern "C" __global__ void __launch_bounds__(k_threads, k_min_blocks) AT_CLUSTER_DIMS
    attention_fwd(const __grid_constant__ AttnArgs args) {
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzle atoms must start 1024-byte aligned (the op asks for 1 KiB more).
  const unsigned base = (at_smem_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned q_full = base + k_bar_offset;    // [k_q_bufs]
  const unsigned q_empty = q_full + 8 * k_q_bufs; // [k_q_bufs]
  const unsigned k_full = q_empty + 8 * k_q_bufs; // [k_stages]
  const unsigned v_full = k_full + 8 * k_stages;  // [k_stages]
  // k_split_release: a K buffer is free once S = Q K^T has read it (k_empty), a V buffer
  // once P V has (v_empty); else the stage is free once P V has read V (v_empty only).
  const unsigned k_empty = v_full + 8 * k_stages;    // [k_stages]
  const unsigned v_empty = k_empty + 8 * k_stages;   // [k_stages]
  const unsigned tile_slot = v_empty + 8 * k_stages; // [k_q_bufs] ints, persistent

  const int m_blocks = (args.seq_q + k_block_m - 1) / k_block_m;
  // The work of one tile: its query block, head, batch, and how many key tiles it reads.
  // (AT_VARLEN: its sequence's lengths and the packed rows where its queries and keys
  // start; else the problem's lengths, rows from 0.)
  struct Tile {
    int m0, head, batch, n_begin, n_end; // key tiles [n_begin, n_end)
    int seq_q, seq_k, q_start, k_start;
  };
  auto tile_at = [&](int index) {
    Tile w;
    int m_block;
    if (k_persistent) {
      // Causal: the (batch, head) pairs in groups of args.sched_group, whose K and V fit
      // a share of the L2 (the host sizes it), and within a group the query blocks from
      // the last (the longest) down, over the group's heads: blocks running together
      // share their heads' K and V in L2, and the short tiles fill each group's end.
      // Else the query blocks of one head one after another, for the same sharing.
      const int heads = args.heads_q * args.batch;
      if (k_causal) {
        const int per_group = args.sched_group * m_blocks;
        const int group = index / per_group;
        const int r = index - group * per_group;
        const int first = group * args.sched_group;
        const int in_group = min(args.sched_group, heads - first);
        m_block = m_blocks - 1 - r / in_group;
        const int pair = first + r % in_group;
        w.head = pair % args.heads_q;
        w.batch = pair / args.heads_q;
      } else {
        m_block = index % m_blocks;
        w.head = index / m_blocks % args.heads_q;
        w.batch = index / m_blocks / args.heads_q;
      }
    } else {
      // Causal: the last query blocks see the most keys; they go first so that the short
      // ones fill the tail of the grid (blocks start roughly in index order).
      m_block =
          k_causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
      w.head = static_cast<int>(blockIdx.y);
      w.batch = static_cast<int>(blockIdx.z);
    }
    w.m0 = m_block * k_block_m;
    w.seq_q = args.seq_q;
    w.seq_k = args.seq_k;
    w.q_start = w.k_start = 0;
    if (k_varlen) {
      const at_span qs = at_packed_span(args.cu_seqlens_q, w.batch, args.tokens_q);
      // A paged cache's keys are counted (tokens_k INT_MAX), never past the table's row.
      const at_span ks = at_packed_span(args.cu_seqlens_k, w.batch, args.tokens_k);
      w.q_start = qs.start;
      w.seq_q = qs.len;
      w.k_start = ks.start;
      w.seq_k = k_paged ? min(ks.len, args.kv_capacity) : ks.len;
    }
    // Causal (right = 0) or a window's right edge: the last key any row of this block
    // sees is (m0 + block_m - 1) + Sk - Sq + right; a window's left edge: the first is
    // m0 + Sk - Sq - left.
    const long long diag = static_cast<long long>(w.seq_k) - w.seq_q;
    const int right = k_causal ? 0 : (k_window ? args.window_right : -1);
    const int left = k_window ? args.window_left : -1;
    w.n_end = (w.seq_k + k_block_n - 1) / k_block_n;
    if (k_varlen && w.m0 >= w.seq_q) {
      w.n_end = 0; // no query row of the sequence here
    }
    if (right >= 0) {
      const long long last = static_cast<long long>(w.m0) + k_block_m - 1 + diag + right;
      w.n_end = last < 0
                    ? 0
                    : static_cast<int>(min(static_cast<long long>(w.n_end), last / k_block_n + 1));
    }
    w.n_begin = 0;
    if (left >= 0) {
      const long long first = static_cast<long long>(w.m0) + diag - left;
      w.n_begin = first <= 0
                      ? 0
                      : static_cast<int>(min(first / k_block_n, static_cast<long long>(w.n_end)));
    }
    return w;
  };
  // Persistent: this block takes tiles blockIdx.x, then + gridDim.x, ... (static) or the
  // next from the launch's counter (k_dynamic); else the one tile of its grid position.
  // A dynamic block's consumers learn each index from tile_slot; an index past the
  // last tile ends the block.
  const int tiles = k_persistent ? m_blocks * args.heads_q * args.batch : 1;
  const int first_tile = k_persistent ? static_cast<int>(blockIdx.x) : 0;
  const int tile_step = k_persistent ? static_cast<int>(gridDim.x) : 1;

  if (k_varlen && !k_persistent) {
    // A block past its sequence's last query: nothing to load, compute or store (every
    // thread reads the same offsets and leaves before any barrier).
    const Tile w = tile_at(0);
    if (w.m0 >= w.seq_q) {
      return;
    }
  }

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  const unsigned rank = k_cluster > 1 ? cluster_rank() : 0u; // in this block's cluster
  if (threadIdx.x == 0) {
#pragma unroll
    for (int b = 0; b < k_q_bufs; ++b) {
      mbar_init(q_full + 8 * b, 1);
      mbar_init(q_empty + 8 * b, 4 * k_consumers); // one arrival per consumer warp
    }
#pragma unroll
    for (int s = 0; s < k_stages; ++s) {
      mbar_init(k_full + 8 * s, 1);
      mbar_init(v_full + 8 * s, 1);
      // One arrival per consumer warp of every block of the cluster.
      mbar_init(k_empty + 8 * s, 4 * k_consumers * k_cluster);
      mbar_init(v_empty + 8 * s, 4 * k_consumers * k_cluster);
    }
    mbar_fence_init();
  }
  // A cluster's blocks complete copies and arrive on each other's barriers: all of them
  // initialised first.
  if (k_cluster > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }

  if (warpgroup == 0) {
    // Producer. Key tiles are counted over all of this block's tiles (it), so that the
    // ring's stages and barrier phases run on from one tile to the next: the first K/V
    // of the next tile load while the consumers finish this one.
    setmaxnreg_dec<k_producer_regs>();
    if (threadIdx.x == 0) {
      int it = 0;
      int index = first_tile;
      for (int local = 0; k_dynamic || index < tiles; ++local) {
        const int qb = local % k_q_bufs;
        mbar_wait(q_empty + 8 * qb, (static_cast<unsigned>(local / k_q_bufs) & 1u) ^ 1u);
        if (k_dynamic) {
          st_shared_u32(tile_slot + 4 * qb, static_cast<unsigned>(index));
          if (index >= tiles) {
            mbar_arrive(q_full + 8 * qb); // no copy: the consumers read the end
            break;
          }
        }
        const Tile w = tile_at(index);
        const int kv_head = w.head / (args.heads_q / args.heads_kv);
        mbar_arrive_expect_tx(q_full + 8 * qb, k_q_bytes);
        // The maps' batch coordinate (0 for packed sequences, whose rows count from the
        // sequence's first token).
        const int map_batch = k_varlen ? 0 : w.batch;
        load_rows(base + qb * k_q_bytes, k_q_slab_bytes, &args.q_map, args.q_seq_inner,
                  q_full + 8 * qb, w.q_start + w.m0, w.head, map_batch);
#pragma unroll 1
        for (int n = w.n_begin; n < w.n_end; ++n, ++it) {
          const int s = it % k_stages;
          const unsigned parity = static_cast<unsigned>(it / k_stages) & 1u;
          const unsigned k_tile = base + k_k_offset + s * k_kv_bytes;
          const unsigned v_tile = base + k_v_offset + s * k_kv_bytes;
          // Without the split, V's release frees the whole stage.
          const unsigned k_free = (k_split_release ? k_empty : v_empty) + 8 * s;
          if (k_cluster == 1) {
            // The tile's rows: packed from the sequence's first key, or a page's.
            int kv_row = w.k_start + n * k_block_n;
            int kv_batch = map_batch;
            if (k_paged) {
              kv_batch = args.block_table[w.batch * args.block_table_stride +
                                          n * k_block_n / args.page_size];
              kv_row = n * k_block_n % args.page_size;
            }
            mbar_wait(k_free, parity ^ 1u);
            mbar_arrive_expect_tx(k_full + 8 * s, k_kv_bytes);
            load_rows(k_tile, k_kv_slab_bytes, &args.k_map, args.k_seq_inner, k_full + 8 * s,
                      kv_row, kv_head, kv_batch);
            if (k_split_release) {
              mbar_wait(v_empty + 8 * s, parity ^ 1u);
            }
            mbar_arrive_expect_tx(v_full + 8 * s, k_kv_bytes);
            load_rows(v_tile, k_kv_slab_bytes, &args.v_map, args.v_seq_inner, v_full + 8 * s,
                      kv_row, kv_head, kv_batch);
          } else {
            // This block's part of the tile into every block of the cluster; its own
            // barriers expect the whole tile (the other parts come from the others).
            mbar_wait(k_free, parity ^ 1u);
            const int row0 = n * k_block_n + static_cast<int>(rank) * k_kv_part_rows;
            const unsigned part = rank * k_kv_part_rows * 128;
            constexpr unsigned short all = (1u << k_cluster) - 1;
            mbar_arrive_expect_tx(k_full + 8 * s, k_kv_bytes);
            load_part(k_tile + part, &args.k_map, args.k_seq_inner, k_full + 8 * s, row0, kv_head,
                      w.batch, all);
            if (k_split_release) {
              mbar_wait(v_empty + 8 * s, parity ^ 1u);
            }
            mbar_arrive_expect_tx(v_full + 8 * s, k_kv_bytes);
            load_part(v_tile + part, &args.v_map, args.v_seq_inner, v_full + 8 * s, row0, kv_head,
                      w.batch, all);
          }
        }
        // The next tile is taken once this one's copies are all issued: the consumers
        // are still a ring's depth of key tiles from its end.
        index = k_dynamic
                    ? static_cast<int>(
                          gridDim.x +
                          atomicAdd(at_sched + 2 * (args.sched_slot & (k_sched_slots - 1)), 1u))
                    : index + tile_step;
      }
      if (k_dynamic) {
        // Every take of this block precedes its count; the last block to count sees all
        // takes done and leaves the pair zero for the slot's next launch.
        unsigned* const sched = at_sched + 2 * (args.sched_slot & (k_sched_slots - 1));
        __threadfence();
        if (atomicAdd(sched + 1, 1u) == gridDim.x - 1) {
          atomicExch(sched, 0u);
          atomicExch(sched + 1, 0u);
        }
      }
    }
  } else {
    // Consumers.
    setmaxnreg_inc<k_consumer_regs>();
    const int consumer = warpgroup - 1;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
    const int g = lane / 4;
    const int t = lane % 4;
    // The ring position of a key tile (counted over this block's tiles, as the producer
    // counts them) and the phase its barriers complete in.
    auto stage = [](int i) { return i % k_stages; };
    auto phase = [](int i) { return static_cast<unsigned>(i / k_stages) & 1u; };
    // This warp is done with key tile i's K (its S waited) or V (its P V waited).
    auto release_k = [&](int i, bool valid) {
      if (k_split_release) {
        release_kv(k_empty + 8 * stage(i), lane, valid);
      }
    };
    auto release_v = [&](int i) { release_kv(v_empty + 8 * stage(i), lane); };
    int it0 = 0; // key tiles of this block's earlier tiles
    int index = first_tile;
    // O and each row's running max and sum, kept over the tile loop: a persistent block
    // writes a tile's O at the start of its next tile (below).
    float o[k_o_regs];
    float row_max[2];
    float row_sum[2]; // this thread's share; the quad's sum at the end
    // A row's log-sum-exp (natural log; -inf for a row that saw no key) and where it goes.
    auto row_lse = [&](float mx, float sum) {
      return sum > 0.0f ? (mx * args.scale_log2 + at_log2_approx(sum)) * 0.6931471805599453f
                        : at_neg_inf();
    };
    auto lse_at = [&](const Tile& w, int row) {
      if (k_varlen) {
        return args.lse + w.head * args.lse_head_stride + w.q_start + row;
      }
      return args.lse + (static_cast<long long>(w.batch) * args.heads_q + w.head) * args.seq_q +
             row;
    };
    // Epilogue of tile w, whose Q sat in buffer qb: O / sum, staged through this
    // consumer's own rows of that Q buffer (its products are done; no other warpgroup
    // reads them) in the same 128-byte swizzle, then stored as whole 16-byte chunks of
    // rows below Sq; the buffer is then released to the producer.
    auto write_o = [&](const Tile& w, int qb) {
      const unsigned my_q =
          base + static_cast<unsigned>(qb * k_q_bytes) + static_cast<unsigned>(consumer) * 64 * 128;
      const int row0 = w.m0 + consumer * 64 + warp * 16 + g;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float sum = quad_sum(row_sum[h]);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        const int r = warp * 16 + g + 8 * h; // row within this consumer's 64
#pragma unroll
        for (int i = 0; i < k_o_regs / 4; ++i) {
          // Columns 8 i + 2 t, + 1: slab i / 8, 16-byte chunk i % 8, bytes 4 t.
          const unsigned addr = my_q + static_cast<unsigned>(i / 8) * k_q_slab_bytes +
                                static_cast<unsigned>(r * 128 + (((i % 8) ^ (r % 8)) * 16) + 4 * t);
          st_shared_u32(addr,
                        at_pack2(o[4 * i + 2 * h] * inv, o[4 * i + 2 * h + 1] * inv, elem_t{}));
        }
        const int row = row0 + 8 * h;
        if (k_lse && t == 0 && row < w.seq_q) {
          *lse_at(w, row) = row_lse(row_max[h], sum);
        }
      }
      named_barrier_sync(1 + k_consumers + consumer, 128);
      elem_t* o_g = args.o + w.batch * args.o_batch_stride + w.head * args.o_head_stride +
                    w.q_start * args.o_seq_stride;
      constexpr int k_chunks = k_head_dim / 8; // 16-byte chunks per row
      const int tid = static_cast<int>(threadIdx.x) % 128;
#pragma unroll
      for (int i = tid; i < 64 * k_chunks; i += 128) {
        const int r = i / k_chunks;
        const int c = i % k_chunks;
        const int row = w.m0 + consumer * 64 + r;
        if (row < w.seq_q) {
          const unsigned addr = my_q + static_cast<unsigned>(c / 8) * k_q_slab_bytes +
                                static_cast<unsigned>(r * 128 + (((c % 8) ^ (r % 8)) * 16));
          st_global_16(o_g + row * args.o_seq_stride + c * 8, ld_shared_16(addr));
        }
      }
      // This warp has read its rows of the Q buffer: the producer may refill it.
      release_stage(q_empty + 8 * qb, lane);
    };
    // Persistent blocks: O of tile w (when `valid`), straight from registers, written at
    // the start of the block's next tile while that tile's first S = Q K^T runs. Nothing
    // in it branches or touches shared memory: ptxas would wait for that product first (it
    // orders shared-memory stores after wgmma reads, and serialises products around
    // divergent code). A quad holds 4 bytes of each 16-byte chunk of its row; two
    // butterfly exchanges (lanes ^1, then ^2) give each thread whole chunks (chunk 4 j + t
    // of each group of 4), stored as 16-byte writes.
    auto store_o = [&](const Tile& w, bool valid) {
      elem_t* o_g = args.o + w.batch * args.o_batch_stride + w.head * args.o_head_stride +
                    w.q_start * args.o_seq_stride;
      const bool bit0 = (t & 1) != 0, bit1 = (t & 2) != 0;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float sum = quad_sum(row_sum[h]);
        const float inv = sum > 0.0f ? at_rcp_approx(sum) : 0.0f;
        const int row = w.m0 + consumer * 64 + warp * 16 + g + 8 * h;
        const bool in = valid && row < w.seq_q;
        if (k_lse) {
          st_global_u32_if(lse_at(w, row), __float_as_uint(row_lse(row_max[h], sum)), in && t == 0);
        }
        elem_t* dst = o_g + row * args.o_seq_stride;
#pragma unroll
        for (int j = 0; j < k_o_regs / 16; ++j) {
          // a[u]: this thread's word (columns 2 t, 2 t + 1) of chunk 4 j + u.
          unsigned a[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int i = 4 * j + u;
            a[u] = at_pack2(o[4 * i + 2 * h] * inv, o[4 * i + 2 * h + 1] * inv, elem_t{});
          }
          // Lanes ^1: keep chunks u with u % 2 == bit0, hand over the others; x0, x1 are
          // words 2 (t / 2), + 1 of chunks bit0 and bit0 + 2.
          const unsigned r0 = __shfl_xor_sync(0xffffffffu, bit0 ? a[0] : a[1], 1);
          const unsigned r1 = __shfl_xor_sync(0xffffffffu, bit0 ? a[2] : a[3], 1);
          const unsigned own0 = bit0 ? a[1] : a[0], own1 = bit0 ? a[3] : a[2];
          const uint2 x0 = bit0 ? make_uint2(r0, own0) : make_uint2(own0, r0);
          const uint2 x1 = bit0 ? make_uint2(r1, own1) : make_uint2(own1, r1);
          // Lanes ^2: keep chunk bit0 + 2 bit1 (= t), hand over the other.
          const uint2 give = bit1 ? x0 : x1;
          const uint2 keep = bit1 ? x1 : x0;
          const uint2 got = make_uint2(__shfl_xor_sync(0xffffffffu, give.x, 2),
                                       __shfl_xor_sync(0xffffffffu, give.y, 2));
          const uint4 chunk = bit1 ? make_uint4(got.x, got.y, keep.x, keep.y)
                                   : make_uint4(keep.x, keep.y, got.x, got.y);
          const int c = 4 * j + t; // this thread's chunk
          st_global_16_if(dst + 8 * c, chunk, in && 8 * c < k_head_dim);
        }
      }
    };
    Tile done{}; // a persistent block's tile whose O is not written yet
    bool pending = false;
    for (int local = 0;; ++local) {
      const int qb = local % k_q_bufs;
      if (k_dynamic) {
        mbar_wait(q_full + 8 * qb, static_cast<unsigned>(local / k_q_bufs) & 1u);
        index = static_cast<int>(ld_shared_u32(tile_slot + 4 * qb));
      }
      if (index >= tiles) {
        break;
      }
      const Tile w = tile_at(index);
      const int m0 = w.m0;
      const float slope =
          k_alibi ? args.alibi_slopes[w.batch * args.alibi_batch_stride + w.head] * args.alibi_scale
                  : 0.0f;
      // Key tiles n_first .. n_first + n_count - 1, counted from 0 for the ring.
      const int n_first = w.n_begin;
      const int n_count = w.n_end - w.n_begin;
      const int row0 = m0 + consumer * 64 + warp * 16 + g; // rows row0 and row0 + 8
      const unsigned my_q =
          base + static_cast<unsigned>(qb * k_q_bytes) + static_cast<unsigned>(consumer) * 64 * 128;

      mbar_wait(q_full + 8 * qb, static_cast<unsigned>(local / k_q_bufs) & 1u);
      // S = Q K^T of the tile's first key tile. A persistent block issues it before it
      // writes the previous tile's O, so that the epilogue runs under this product.
      float s0[k_s_regs];
      if (k_persistent) {
        // Issued (and waited) even for a tile with no key tile, whose S goes unused: no
        // branch may separate the product from its wait.
        if (n_count > 0) {
          mbar_wait(k_full + 8 * stage(it0), phase(it0));
        }
        wgmma_fence();
        qk_product(s0, my_q, base + k_k_offset + stage(it0) * k_kv_bytes);
        wgmma_commit();
        store_o(done, pending);
        wgmma_wait<0>();
        wgmma_pin(s0);
        release_k(it0, n_count > 0);
      }
#pragma unroll
      for (int i = 0; i < k_o_regs; ++i) {
        o[i] = 0.0f;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max[h] = at_neg_inf();
        row_sum[h] = 0.0f;
      }
      if (k_pingpong && consumer == k_consumers - 1 && n_count > 0) {
        // The first turn is consumer 0's: the last consumer opens it.
        named_barrier_arrive(1, 256);
      }
      // P of the previous key tile (its O += P V is issued with the next S = Q K^T).
      unsigned p[k_block_n / 16][4];
      if (k_overlap) {
        // Tile n: S = Q K^T of n and O += P V of n - 1 go out as two groups; the softmax
        // of n starts when the first is done and runs under the second. P alternates
        // between two register sets (p, p2), since the P V in flight still reads the
        // last one: the loop runs two tiles per trip so that each set keeps its
        // registers (a copy between them would let the compiler merge the two, and
        // ptxas then serialises the products). The first tile has no P V and is peeled.
        unsigned p2[k_block_n / 16][4];
        if (n_count > 0) {
          float alpha[2];
          if (!k_persistent) {
            mbar_wait(k_full + 8 * stage(it0), phase(it0));
            wgmma_fence();
            qk_product(s0, my_q, base + k_k_offset + stage(it0) * k_kv_bytes);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_pin(s0);
            release_k(it0, true);
          }
          softmax_tile(s0, row_max, row_sum, alpha, args, n_first * k_block_n, m0, row0, t, slope,
                       w.seq_q, w.seq_k);
          pack_p(p, s0);
        }
        if constexpr (k_one_p) {
          // Two P sets do not fit beside O (AT_ONE_P). One set, in
          // FlashAttention-3's order: P of n is written once the P V that read P of n - 1
          // is done, and O is rescaled (by the factor tile n - 1 moved the max by) after
          // S of n is issued and before P V of n - 1, under that first product. The
          // rescale is unconditional (alpha is 1 where the max stayed): a branch between a
          // product and its wait serialises the products.
          float alpha[2] = {1.0f, 1.0f};
          for (int n = 1; n < n_count; ++n) {
            const int i = it0 + n;
            mbar_wait(k_full + 8 * stage(i), phase(i));
            float sc[k_s_regs];
            wgmma_fence();
            qk_product(sc, my_q, base + k_k_offset + stage(i) * k_kv_bytes);
            wgmma_commit();
            rescale_o(o, alpha);
            mbar_wait(v_full + 8 * stage(i - 1), phase(i - 1));
            wgmma_fence();
            pv_product(o, p, base + k_v_offset + stage(i - 1) * k_kv_bytes);
            wgmma_commit();
            wgmma_wait<1>();
            wgmma_pin(sc);
            release_k(i, true);
            const bool moved =
                softmax_tile(sc, row_max, row_sum, alpha, args, (n_first + n) * k_block_n, m0, row0,
                             t, slope, w.seq_q, w.seq_k);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              alpha[h] = moved ? alpha[h] : 1.0f;
            }
            wgmma_wait<0>();
            wgmma_pin(o);
            release_v(i - 1);
            pack_p(p, sc);
          }
          if (n_count > 0) {
            const int i = it0 + n_count - 1;
            rescale_o(o, alpha);
            mbar_wait(v_full + 8 * stage(i), phase(i));
            wgmma_fence();
            pv_product(o, p, base + k_v_offset + stage(i) * k_kv_bytes);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_pin(o);
            release_v(i);
          }
        } else {
          auto step = [&](int n, const unsigned(&p_last)[k_block_n / 16][4],
                          unsigned(&p_new)[k_block_n / 16][4]) {
            const int i = it0 + n;
            mbar_wait(k_full + 8 * stage(i), phase(i));
            mbar_wait(v_full + 8 * stage(i - 1), phase(i - 1));
            float sc[k_s_regs];
            wgmma_pin(o);
            wgmma_fence();
            qk_product(sc, my_q, base + k_k_offset + stage(i) * k_kv_bytes);
            wgmma_commit();
            pv_product(o, p_last, base + k_v_offset + stage(i - 1) * k_kv_bytes);
            wgmma_commit();
            wgmma_wait<1>();
            wgmma_pin(sc);
            release_k(i, true);
            float alpha[2];
            const bool rescale =
                softmax_tile(sc, row_max, row_sum, alpha, args, (n_first + n) * k_block_n, m0, row0,
                             t, slope, w.seq_q, w.seq_k);
            pack_p(p_new, sc);
            wgmma_wait<0>();
            wgmma_pin(o);
            release_v(i - 1);
            if (rescale) {
              rescale_o(o, alpha); // O held P V of n - 1 at the max before tile n
            }
          };
          int n = 1;
          for (; n + 1 < n_count; n += 2) {
            step(n, p, p2);
            step(n + 1, p2, p);
          }
          const bool last_in_p2 = n < n_count;
          if (last_in_p2) {
            step(n, p, p2);
          }
          if (n_count > 0) {
            // The last tile's O += P V.
            const int i = it0 + n_count - 1;
            mbar_wait(v_full + 8 * stage(i), phase(i));
            wgmma_pin(o);
            wgmma_fence();
            if (last_in_p2) {
              pv_product(o, p2, base + k_v_offset + stage(i) * k_kv_bytes);
            } else {
              pv_product(o, p, base + k_v_offset + stage(i) * k_kv_bytes);
            }
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_pin(o);
            release_v(i);
          }
        }
      } else {
        // A persistent block's first key tile: its S was issued above.
        if (k_persistent && n_count > 0) {
          float alpha[2];
          softmax_tile(s0, row_max, row_sum, alpha, args, n_first * k_block_n, m0, row0, t, slope,
                       w.seq_q, w.seq_k);
          pack_p(p, s0);
        }
        for (int n = k_persistent ? 1 : 0; n < n_count; ++n) {
          const int i = it0 + n;
          const unsigned k_tile = base + k_k_offset + stage(i) * k_kv_bytes;
          const unsigned pv_tile = base + k_v_offset + stage(i - 1) * k_kv_bytes;

          float sc[k_s_regs];
          if (k_stages == 1 && n > 0) {
            // One buffer: the previous tile's P V must finish before this K can land.
            mbar_wait(v_full + 8 * stage(i - 1), phase(i - 1));
            wgmma_fence();
            pv_product(o, p, pv_tile);
            wgmma_commit();
            wgmma_wait<0>();
            release_v(i - 1);
          }
          mbar_wait(k_full + 8 * stage(i), phase(i));
          if (k_stages > 1 && n > 0) {
            mbar_wait(v_full + 8 * stage(i - 1), phase(i - 1));
          }
          if (k_pingpong) {
            named_barrier_sync(1 + consumer, 256); // this consumer's turn on the tensor cores
          }
          wgmma_fence();
          if (k_stages > 1 && n > 0) {
            pv_product(o, p, pv_tile); // the previous tile's O += P V, then this S
          }
          qk_product(sc, my_q, k_tile);
          wgmma_commit();
          if (k_pingpong) {
            // The next one's turn, on every tile: an arrival skipped on the last consumer's
            // last tile put it on a divergent path between the products and their wait, and
            // ptxas then serialised every wgmma (C7520). Consumer 0 takes that last one below.
            named_barrier_arrive(1 + (consumer + 1) % k_consumers, 256);
          }
          wgmma_wait<0>();
          release_k(i, true);
          if (k_stages > 1 && n > 0) {
            release_v(i - 1);
          }
          // O already holds the previous tile's P V, so its rescale comes after it.
          float alpha[2];
          if (softmax_tile(sc, row_max, row_sum, alpha, args, (n_first + n) * k_block_n, m0, row0,
                           t, slope, w.seq_q, w.seq_k)) {
            rescale_o(o, alpha);
          }
          pack_p(p, sc);
        }
        if (n_count > 0) {
          // The last tile's O += P V.
          const int i = it0 + n_count - 1;
          mbar_wait(v_full + 8 * stage(i), phase(i));
          wgmma_fence();
          pv_product(o, p, base + k_v_offset + stage(i) * k_kv_bytes);
          wgmma_commit();
          wgmma_wait<0>();
          release_v(i);
          if (k_pingpong && consumer == 0) {
            named_barrier_sync(1, 256); // the last consumer's turn-passing after its last tile
          }
        }
      }
      it0 += n_count;
      if (k_persistent) {
        // This warp's products are done with the Q buffer: the producer may refill it.
        release_stage(q_empty + 8 * qb, lane);
        done = w;
        pending = true;
      } else {
        write_o(w, qb);
      }
      index += tile_step; // static; a dynamic block reads its next index from tile_slot
    }
    store_o(done, pending);
  }
  // No block of a cluster exits while the others may still arrive on its barriers.
  if (k_cluster > 1) {
    cluster_sync();
  }
}
