// attention: O = softmax(scale * Q K^T + mask) V, optional LSE (fp32 [B, Hq, Sq]).
// Causal masks are bottom-right aligned (query i sees keys j <= i + Sk - Sq), as in
// FlashAttention; GQA/MQA when Hkv divides Hq (query head h reads kv head
// h / (Hq / Hkv)).
//
// Causal with Sq > Sk, the rows i < Sq - Sk see no key. Their O is exactly 0, as
// flash-attn defines it (its tests' reference zero-fills such rows), and their LSE is
// -inf, the log of an empty sum: merging this result with attention over other keys
// by log-sum-exp (LSE = log(e^LSE1 + e^LSE2), O = sum e^(LSEi - LSE) Oi) then weighs
// it 0. flash-attn 2 writes +inf there instead (flash_fwd_kernel.h, softmax.h);
// flash-attn 3 writes -inf for a block of such rows and from its split-KV combine.
//
// Features, as flash-attn 2 defines them (the logits of query i and key j are s_ij =
// scale q_i.k_j before them):
//   sliding window (left, right): query i sees key j iff i + Sk - Sq - left <= j <=
//     i + Sk - Sq + right, a bound of -1 unbounded; causal is right = 0 (and makes the
//     right bound 0 whatever the call says), so causal and a left bound combine. Rows
//     that see no key follow the convention above.
//   softcap c > 0: s_ij becomes c * tanh(s_ij / c).
//   ALiBi, fp32 slopes [Hq] or [B, Hq]: s_ij -= slope[b, h] * |i + Sk - Sq - j|, after
//     softcap. flash-attn 2 adds slope * j under causal instead, which gives the same
//     O; its LSE is then larger by slope * (i + Sk - Sq). Ours is that of the logits
//     defined here.
//
// Variable-length batches (varlen=1, flash-attn 2's flash_attn_varlen_func): the B
// sequences' tokens are packed, q and o [Tq, Hq, D], k and v [Tk, Hkv, D], lse fp32
// [Hq, Tq] (flash-attn's varlen LSE layout); int32 cu_seqlens_q / cu_seqlens_k [B + 1]
// on the GPU give each sequence's first token. One launch covers the batch: the grid
// is ceil(Sq / block_m) x Hq x B blocks, and a block reads its sequence's offsets and
// exits when its rows start past the sequence's length. Causal, the window and ALiBi
// are aligned to each sequence's own bottom-right corner (its lengths take Sq and Sk's
// place above); a sequence may be empty (no rows, or rows without keys: O = 0, LSE =
// -inf). The offsets are read, never checked (that would cost a synchronisation): they
// must start at 0, not decrease, stay within Tq (Tk), and no sequence may exceed
// max_seqlen_q (max_seqlen_k) -- rows past Sq are not computed.
//   Tuning bucket: a varlen problem's Sq and Sk are the call's max_seqlen_q and
// max_seqlen_k, and Tq and Tk its total tokens (q's and k's first dimension), each
// rounded up to a power of two (at least 16): calls of one bucket share a key (and the
// runtime's plan; the grid covers the bucket's Sq, blocks past a sequence exit at once).
// The fields varlen=1, Tq and Tk join the problem after the features, only for varlen
// problems. The tuner packs min(Tq, B * Sq) query tokens (likewise keys) into B
// sequences of pseudo-random lengths in [0, Sq], deterministic from (B, Sq, Tq), that
// sum to it; a shape without Tq (Tk) takes half of B * Sq (B * Sk).
//
// Decoding against a KV cache (paged=1 or kvcache=1, flash-attn 2's
// flash_attn_with_kvcache): q and o [B, Sq, Hq, D]; k and v the cache, paged
// [num_blocks, page, Hkv, D] with an int32 block_table [B, blocks_per_seq] (key j of
// sequence b is row j % page of page block_table[b][j / page]), or contiguous
// [B, Scache, Hkv, D]; int32 cache_seqlens [B] on the GPU. Sequence b's keys are its
// first cache_seqlens[b] cache rows, then the Snew rows of k_new / v_new when given;
// causal, the window and ALiBi are aligned to its bottom-right corner (Sk there is
// cache_seqlens[b] + Snew). The append happens inside the attention launch, not in a
// kernel of its own: key tiles read the new rows straight from k_new / v_new, and one
// block per (batch, kv head) copies them into the cache at cache_seqlens[b].. -- no block
// of the launch reads those cache rows, so nothing races, and the call stays one kernel
// that the tuner, the worker and the dispatcher launch like any other. A variant's
// block_n must divide page (a key tile lies in one page): check() refuses the others,
// and a page that is not a multiple of 16 is refused when the problem is made. The
// lengths and the table are read, never checked: lengths are clamped into the cache
// (blocks_per_seq * page, or Scache, less Snew) and table entries into [0, num_blocks).
//   cache_leftpad (flash-attn 2's; a contiguous cache only, refused with a block table as
// flash-attn refuses it): int32 [B] on the GPU, where sequence b's keys start in its
// cache. Its keys are then cache rows leftpad[b] .. cache_seqlens[b] - 1, followed by
// the new ones, which are still written at cache_seqlens[b].. (absolute rows); its key
// count -- the Sk of the bottom-right alignment -- is cache_seqlens[b] - leftpad[b] +
// Snew, and the masks and ALiBi index keys from leftpad[b] on (key j is cache row
// leftpad[b] + j), as flash-attn's kernel and its reference (attention_ref's key_leftpad)
// do. Read, not checked: leftpad[b] is clamped into [0, the clamped cache length]. Not a
// problem field (the kernel reads it at run time: no key, no variant changes).
//   cache_batch_idx (flash-attn 2's; a contiguous cache only, refused with a block table as
// flash-attn refuses it): int32 [B] on the GPU, the cache batch holding sequence b's keys;
// k and v are then [B_cache, Hkv, Scache, D] with any B_cache >= 1 (a pool of cache
// slots), and sequence b reads and appends to slot cache_batch_idx[b] while its length,
// left padding and new rows stay b's. Read, not checked: values are clamped into [0,
// B_cache). Not a problem field either.
//   Tuning bucket: Sk is one sequence's cache size (blocks_per_seq * page, or Scache)
// rounded up to a power of two (at least 16); page is kept as it is (it decides which
// variants run). The fields paged=1 and page=P (or kvcache=1 for a contiguous cache)
// join the problem after the features, only when on; num_blocks, blocks_per_seq and
// Snew are call values, not problem fields. The tuner builds a cache of B * ceil(Sk /
// page) pages dealt to the sequences by a shuffled block table, with cache lengths
// pseudo-random in [1, Sk] (the first one Sk), deterministic from the shape; it tunes
// without append. The Hopper family reads no cache.
//
// Problem fields: B, Hq, Hkv, Sq, Sk, D (a multiple of 8 in 32..256), causal, dtype,
// lse, layout, then window, softcap and alibi (0/1 each: whether the call has the
// feature; each is in the problem, and its key, only when 1, so a problem without
// them keeps the key it had before they existed). The layout ("bshd": [B, S, H, D],
// "bhsd": [B, H, S, D]) is the tuning bucket of the strides; a runtime call may pass
// any strides with a contiguous last dimension. The softmax scale, the window's
// bounds, the softcap value and the slopes are call arguments, not problem fields:
// they change no instruction. The tuner uses scale 1/sqrt(D), the window (Sk/4,
// Sk/8) (right 0 when causal), softcap 5 and slopes [Hq] drawn from [0.01, 0.1]. The
// Hopper family (family=wgmma) builds none of the features: problems with them tune
// and run the portable family=mma.
#pragma once

#include "op.hpp"

namespace autotune {

// Device pointers and strides of one call, in elements. lse is 0 unless the
// problem has lse=1.
struct AttentionCall {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0, lse = 0;
  long long q_batch_stride = 0, q_head_stride = 0, q_seq_stride = 0;
  long long k_batch_stride = 0, k_head_stride = 0, k_seq_stride = 0;
  long long v_batch_stride = 0, v_head_stride = 0, v_seq_stride = 0;
  long long o_batch_stride = 0, o_head_stride = 0, o_seq_stride = 0;
  double scale = 0; // 0: 1/sqrt(D)
  // Problems with window=1: the bounds, keys before and after each query's diagonal
  // (-1: unbounded; causal makes the right one 0).
  int window_left = -1, window_right = -1;
  double softcap = 0; // problems with softcap=1: > 0
  // Problems with alibi=1: fp32 slopes, [B, Hq] (batch stride Hq) or [Hq] (stride 0).
  CUdeviceptr alibi_slopes = 0;
  long long alibi_batch_stride = 0;
  // Split-KV variants only: zero-filled before the first call (each call leaves all of
  // it zero-filled); AttentionOp::workspace_bytes says how much.
  CUdeviceptr workspace = 0;
  size_t workspace_bytes = 0;
  // Problems with varlen=1: int32 offsets [B + 1] (the batch strides are then 0 and the
  // sequence strides step over packed tokens), and lse's head stride (Tq).
  CUdeviceptr cu_seqlens_q = 0, cu_seqlens_k = 0;
  long long lse_head_stride = 0;
  // ... and the packed tokens q (and o) and k (and v) hold: the Hopper family's tensor
  // maps span them (a map past a tensor's end would read what is not its memory).
  long long tokens_q = 0, tokens_k = 0;
  // Problems with paged=1 or kvcache=1: int32 cache lengths [B]; the block table (int32
  // [B, blocks per sequence], row stride block_table_stride; 0 for a contiguous cache,
  // whose batch strides then step sequences, else they step pages) and its page size;
  // the pages in the cache (num_blocks, or B) and the keys one sequence's cache holds;
  // seq_new rows of k_new / v_new [B, Hkv, Snew, D] to append (0: none).
  CUdeviceptr cache_seqlens = 0, block_table = 0;
  long long block_table_stride = 0;
  int page_size = 0, num_pages = 0, kv_capacity = 0, seq_new = 0;
  CUdeviceptr k_new = 0, v_new = 0;
  long long kn_batch_stride = 0, kn_head_stride = 0, kn_seq_stride = 0;
  long long vn_batch_stride = 0, vn_head_stride = 0, vn_seq_stride = 0;
  // A contiguous KV cache only: int32 [B], the first cache row of each sequence's keys
  // (flash-attn's cache_leftpad; 0: none).
  CUdeviceptr cache_leftpad = 0;
  // A contiguous KV cache only: int32 [B], the cache batch holding each sequence's keys
  // (flash-attn's cache_batch_idx, clamped into [0, num_pages); 0: sequence b's own).
  CUdeviceptr cache_batch_idx = 0;
  // Problems whose query heads run as rows of their K/V head with several queries each
  // (AT_GROUPED; set when the call is packed): the stride between two query heads of a
  // group in q and in o.
  long long q_group_stride = 0, o_group_stride = 0;
};

// The portable kernel's by-value argument: struct AttnArgs of templates/attention/kernel.cuh,
// field for field (tests/test_runtime_ops_kernel_args.cpp compiles the kernel with NVRTC
// and checks every offset and the size against this).
struct AttentionKernelArgs {
  CUdeviceptr q, k, v, o, lse;
  long long q_batch_stride, q_head_stride, q_seq_stride;
  long long k_batch_stride, k_head_stride, k_seq_stride;
  long long v_batch_stride, v_head_stride, v_seq_stride;
  long long o_batch_stride, o_head_stride, o_seq_stride;
  int heads_q, heads_kv, seq_q, seq_k;
  float scale_log2;
  CUdeviceptr ws_o, ws_lse, ws_count;
  int batch;
  int window_left, window_right;
  float softcap_scale, alibi_scale;
  CUdeviceptr alibi_slopes;
  long long alibi_batch_stride;
  CUdeviceptr cu_seqlens_q, cu_seqlens_k;
  long long lse_head_stride;
  CUdeviceptr cache_seqlens, block_table;
  long long block_table_stride;
  int page_size, num_pages, kv_capacity, seq_new;
  CUdeviceptr k_new, v_new;
  long long kn_batch_stride, kn_head_stride, kn_seq_stride;
  long long vn_batch_stride, vn_head_stride, vn_seq_stride;
  CUdeviceptr cache_leftpad;
  CUdeviceptr cache_batch_idx;
  long long q_group_stride, o_group_stride;
  int group_sq;
  int tokens_q, tokens_k;
};

// The Hopper kernel's by-value argument: struct AttnArgs of templates/attention/hopper.cuh
// (family=wgmma), checked the same way.
struct AttentionHopperKernelArgs {
  CUtensorMap q_map, k_map, v_map;
  CUdeviceptr o, lse;
  long long o_batch_stride, o_head_stride, o_seq_stride;
  int heads_q, heads_kv, seq_q, seq_k;
  float scale_log2;
  int batch;
  int q_seq_inner, k_seq_inner, v_seq_inner;
  int window_left, window_right; // keys before / after the diagonal (-1 unbounded)
  int sched_slot;                // causal persistent variants: the launch's tile counters (0..63)
  int sched_group;     // causal persistent variants: (batch, head) pairs per group of tiles
  float softcap_scale; // softcap problems: scale / softcap
  float alibi_scale;   // ALiBi problems: the slopes times this are in units of the scores
  CUdeviceptr alibi_slopes;
  long long alibi_batch_stride;
  CUdeviceptr cu_seqlens_q, cu_seqlens_k; // varlen problems: int32 [B + 1]
  long long lse_head_stride;              // varlen problems: LSE [Hq, Tq], Tq
  CUdeviceptr block_table;                // varlen problems with a paged cache: int32
  long long block_table_stride;           // [B, block_table_stride]
  int page_size;                          // keys a page
  int kv_capacity;                        // keys a row of the table holds
  int tokens_q, tokens_k; // varlen problems: the rows bounding each sequence's offsets
};

class AttentionOp final : public Op {
public:
  const char* name() const override { return "attention"; }
  const char* kernel_name() const override { return "attention_fwd"; }
  const char* template_path() const override { return "attention/kernel.cuh"; }
  const char* space_path() const override { return "attention/space.toml"; }
  const char* reference_path() const override { return "attention/reference.cuh"; }

  std::vector<std::string> default_shapes() const override;
  Problem make_problem(const Fields& shape) const override;
  Result<bool> check(const Config& config, const Problem& problem,
                     const std::string& arch) const override;
  Result<bool> worth_measuring(const Config& config, const Problem& problem) const override;
  // A configuration of warps sharing 16-row tiles (a decoding winner: block_m below 16
  // per warp) borrowed by a problem with more query rows than one block holds: each warp
  // gets its own 16 rows instead (block_m = 16 * warps), the layout the tuner measures
  // for such problems. Everything else is kept.
  Config adapt(const Config& config, const Problem& problem) const override;
  std::vector<std::string> defines(const Config& config, const Problem& problem) const override;
  LaunchGeometry geometry(const Config& config, const Problem& problem) const override;
  std::vector<TensorSpec> tensors(const Problem& problem) const override;
  void pack(const Config& config, const Problem& problem, const std::vector<CUdeviceptr>& tensors,
            ArgPack& args) const override;
  std::string reference_kernel(const Problem& problem) const override;
  LaunchGeometry reference_geometry(const Problem& problem) const override;
  void pack_reference(const Problem& problem, const std::vector<CUdeviceptr>& tensors,
                      const std::vector<CUdeviceptr>& reference_outputs,
                      ArgPack& args) const override;
  double tolerance(const Problem& problem) const override;
  double bytes(const Problem& problem) const override;
  double flops(const Problem& problem) const override;
  bool memory_bound() const override { return false; }

  // Contiguous strides of the problem's layout (elements), for tensors of `heads`.
  struct Strides {
    long long batch, head, seq;
  };
  static Strides contiguous_strides(const Problem& problem, long long heads, long long seq);

  // Bytes of workspace a variant needs for a problem (0 unless it splits the keys).
  size_t workspace_bytes(const Config& config, const Problem& problem) const;
  // Bytes at the front of a split-KV workspace that hold the arrival counters (one per
  // query block as the kernel runs the problem): every launch leaves them zero.
  static size_t split_counter_bytes(const Problem& problem);

  const ArgsDesc& args_desc() const override;
  std::unique_ptr<CallPlan> plan(const Config& config, const Problem& problem) const override;
  void pack_call(const Config& config, const Problem& problem, const AttentionCall& call,
                 ArgPack& args) const;
};

} // namespace autotune
