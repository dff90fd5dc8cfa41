// Attention against a KV cache (flash-attn's flash_attn_with_kvcache): its problems and
// tuning buckets, the tuner's cache (lengths, shuffled block table), the variants a page
// size admits, and binding a call of the C ABI with a paged or contiguous cache and
// appended keys, with its refusals. No GPU.
#include "attention_call_support.hpp"
#include "call_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

using namespace autotune;
using namespace autotune::testing;

namespace {

// B = 3 sequences, Sq = 2 queries each, Hq = 8, Hkv = 2, D = 64; a paged cache of 40
// pages of 256 keys ([num_blocks, page, Hkv, D] seen as [num_blocks, Hkv, page, D]),
// block_table [3, 5].
autotune_attention_args paged_call() {
  autotune_attention_args a{};
  const int64_t B = 3, Sq = 2, Hq = 8, Hkv = 2, D = 64, NB = 40, P = 256;
  a.q = make(0x100000, AUTOTUNE_BF16, {B, Hq, Sq, D}, {Sq * Hq * D, D, Hq * D, 1});
  a.k = make(0x200000, AUTOTUNE_BF16, {NB, Hkv, P, D}, {P * Hkv * D, D, Hkv * D, 1});
  a.v = make(0x300000, AUTOTUNE_BF16, {NB, Hkv, P, D}, {P * Hkv * D, D, Hkv * D, 1});
  a.o = make(0x400000, AUTOTUNE_BF16, {B, Hq, Sq, D}, {Sq * Hq * D, D, Hq * D, 1});
  a.cache_seqlens = make(0x500000, AUTOTUNE_INT32, {B});
  a.block_table = make(0x600000, AUTOTUNE_INT32, {B, 5});
  a.causal = 1;
  return a;
}

} // namespace

TEST_CASE("KV cache problems: paged=1 with its page, kvcache=1, Sk bucketed, only when on") {
  CHECK(problem("B=8,Hq=32,Hkv=8,Sq=1,Sk=4096,D=128,paged=1,page=256").key() ==
        "B=8,Hq=32,Hkv=8,Sq=1,Sk=4096,D=128,causal=0,dtype=bf16,lse=0,layout=bshd,paged=1,"
        "page=256");
  CHECK(problem("B=2,Hq=4,Sq=5,Sk=1000,D=64,causal=1,paged=1").key() ==
        "B=2,Hq=4,Hkv=4,Sq=5,Sk=1024,D=64,causal=1,dtype=bf16,lse=0,layout=bshd,paged=1,"
        "page=256");
  CHECK(problem("B=2,Hq=4,Sq=1,Sk=300,D=64,kvcache=1").key() ==
        "B=2,Hq=4,Hkv=4,Sq=1,Sk=512,D=64,causal=0,dtype=bf16,lse=0,layout=bshd,kvcache=1");
  // Without a cache, the key is what it was.
  CHECK(problem("B=2,Hq=4,Sq=1,Sk=300,D=64").key() ==
        "B=2,Hq=4,Hkv=4,Sq=1,Sk=300,D=64,causal=0,dtype=bf16,lse=0,layout=bshd");
  CHECK_THROWS_WITH_AS(problem("B=2,H=4,S=64,D=64,paged=1,page=40"),
                       doctest::Contains("page=40 is not supported"), Error);
  CHECK_THROWS_WITH_AS(problem("B=2,H=4,S=64,D=64,page=64"),
                       doctest::Contains("page (a block size) is a field of paged=1"), Error);
  // Variable-length batches read a paged cache (flash_attn_varlen_func's block_table):
  // no Tk, no contiguous cache, no cache_seqlens, nothing appended.
  CHECK(problem("B=2,H=4,Sq=100,Sk=300,D=64,paged=1,varlen=1,Tq=150").key() ==
        "B=2,Hq=4,Hkv=4,Sq=128,Sk=512,D=64,causal=0,dtype=bf16,lse=0,layout=bshd,varlen=1,"
        "Tq=256,paged=1,page=256");
  CHECK_THROWS_WITH_AS(problem("B=2,H=4,S=64,D=64,kvcache=1,varlen=1"),
                       doctest::Contains("is not built: pass the cache as pages"), Error);
  CHECK_THROWS_WITH_AS(problem("B=2,H=4,S=64,D=64,paged=1,varlen=1,Tk=64"),
                       doctest::Contains("Tk (total keys) is not a field"), Error);
  CHECK_THROWS_WITH_AS(problem("B=2,H=4,S=64,D=64,paged=1,kvcache=1,varlen=1"),
                       doctest::Contains("cache_seqlens is given with cu_seqlens"), Error);
  CHECK_THROWS_WITH_AS(problem("B=2,H=4,S=64,D=64,paged=1,varlen=1,append=1"),
                       doctest::Contains("not taken with variable-length"), Error);
  CHECK_THROWS_WITH_AS(problem("B=2,H=4,S=64,D=64,paged=1,layout=bhsd"),
                       doctest::Contains("layout bshd"), Error);
}

TEST_CASE("the tuner's paged cache: lengths in [1, Sk] off the pages, a shuffled block table") {
  const Problem p = problem("B=8,Hq=32,Hkv=8,Sq=1,Sk=4096,D=128,paged=1,page=256");
  const std::vector<TensorSpec> t = attn().tensors(p);
  const TensorSpec& lengths = t[t.size() - 2];
  const TensorSpec& table = t[t.size() - 1];
  REQUIRE(std::string(lengths.name) == "cache_seqlens");
  REQUIRE(std::string(table.name) == "block_table");
  CHECK(lengths.values.size() == 8);
  CHECK(lengths.values[0] == 4096);
  int off_page = 0;
  for (int len : lengths.values) {
    CHECK(len >= 1);
    CHECK(len <= 4096);
    off_page += len % 256 != 0;
  }
  CHECK(off_page >= 5);
  // A permutation of the 8 * 16 pages, not the identity.
  std::vector<int> sorted = table.values;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> iota(8 * 16);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(sorted == iota);
  CHECK(table.values != iota);
  // k and v hold every page.
  CHECK(t[1].elements == size_t(8 * 16 * 256 * 8 * 128));
  // Deterministic from the shape.
  CHECK(attn().tensors(p)[t.size() - 1].values == table.values);
  CHECK(attn().flops(p) > 0);
}

TEST_CASE("a page admits the variants whose block_n divides it; wgmma reads no cache") {
  const Problem p = problem("B=2,Hq=8,Hkv=2,Sq=1,Sk=2048,D=128,paged=1,page=64");
  auto ok = [&](const std::string& c) { return attn().check(config(c), p, "sm_90a").ok(); };
  CHECK(ok("block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem,splits=4"));
  CHECK(ok("block_m=64,block_n=32,warps=4,stages=2,swizzle=xor,q=smem"));
  CHECK_FALSE(ok("block_m=64,block_n=128,warps=4,stages=1,swizzle=xor,q=smem"));
  CHECK_FALSE(ok("block_m=64,block_n=48,warps=4,stages=1,swizzle=xor,q=smem"));
  const auto r = attn().check(config("block_m=64,block_n=128,warps=4,stages=1,swizzle=xor,q=smem"),
                              p, "sm_90a");
  CHECK(r.failure().message.find("does not divide the KV cache's block size 64") !=
        std::string::npos);
  CHECK_FALSE(
      ok("block_m=64,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma"));
  const std::vector<std::string> d =
      attn().defines(config("block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem"), p);
  CHECK(std::find(d.begin(), d.end(), "-DAT_KVCACHE=1") != d.end());
}

TEST_CASE("a paged call binds its cache, buckets Sk from the block table, and keys paged=1") {
  autotune_attention_args a = paged_call();
  CHECK(problem_of(a) == "B=3,Hq=8,Hkv=2,Sq=2,Sk=2048,D=64,causal=1,dtype=bf16,lse=0,"
                         "layout=bshd,paged=1,page=256");
  // A contiguous cache [B, Scache, Hkv, D].
  autotune_attention_args c = paged_call();
  c.block_table = Tensor{};
  c.k = make(0x200000, AUTOTUNE_BF16, {3, 2, 1000, 64}, {1000 * 2 * 64, 64, 2 * 64, 1});
  c.v = make(0x300000, AUTOTUNE_BF16, {3, 2, 1000, 64}, {1000 * 2 * 64, 64, 2 * 64, 1});
  CHECK(problem_of(c) == "B=3,Hq=8,Hkv=2,Sq=2,Sk=1024,D=64,causal=1,dtype=bf16,lse=0,"
                         "layout=bshd,kvcache=1");
  // Appended keys change no key.
  autotune_attention_args n = paged_call();
  n.k_new = make(0x700000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  n.v_new = make(0x800000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  CHECK(problem_of(n) == problem_of(a));
}

TEST_CASE("KV cache calls are refused with the argument named") {
  autotune_attention_args a = paged_call();
  a.block_table.dtype = AUTOTUNE_FP32;
  refused(a, "block_table is fp32; it must be int32");
  a = paged_call();
  a.cache_seqlens.dtype = AUTOTUNE_BF16;
  refused(a, "cache_seqlens is bf16; it must be int32");
  a = paged_call();
  a.cache_seqlens = make(0x500000, AUTOTUNE_INT32, {4});
  refused(a, "cache_seqlens has shape");
  a = paged_call();
  a.block_table = make(0x600000, AUTOTUNE_INT32, {2, 5});
  refused(a, "block_table has shape");
  a = paged_call();
  a.cache_seqlens = Tensor{};
  refused(a, "block_table is given without cache_seqlens");
  a = paged_call();
  a.k = make(0x200000, AUTOTUNE_BF16, {40, 2, 40, 64}, {40 * 2 * 64, 64, 2 * 64, 1});
  a.v = make(0x300000, AUTOTUNE_BF16, {40, 2, 40, 64}, {40 * 2 * 64, 64, 2 * 64, 1});
  refused(a, "page=40 is not supported");
  a = paged_call();
  a.v = make(0x300000, AUTOTUNE_BF16, {40, 2, 128, 64}, {128 * 2 * 64, 64, 2 * 64, 1});
  refused(a, "v has shape");
  a = paged_call();
  a.k_new = make(0x700000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  refused(a, "v_new implies append=0");
  a = paged_call();
  a.k_new = make(0x700000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  a.v_new = make(0x800000, AUTOTUNE_FP16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  refused(a, "v_new is fp16");
  a = paged_call();
  a.block_table = Tensor{};
  a.cache_seqlens = Tensor{};
  a.k_new = make(0x700000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  a.v_new = make(0x800000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  a.k = make(0x200000, AUTOTUNE_BF16, {3, 2, 100, 64}, {100 * 2 * 64, 64, 2 * 64, 1});
  a.v = make(0x300000, AUTOTUNE_BF16, {3, 2, 100, 64}, {100 * 2 * 64, 64, 2 * 64, 1});
  refused(a, "k_new / v_new (append) are given without cache_seqlens");
}

TEST_CASE("the packed kernel arguments of a paged call: Snew past the cache is refused") {
  autotune_attention_args a = paged_call();
  a.k_new = make(0x700000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  a.v_new = make(0x800000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  const BoundCall b = bind(a);
  const Problem p = attn().make_problem(call_fields(attn().args_desc(), b));
  const Config c = config("block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem");
  auto plan = attn().plan(c, p);
  alignas(16) unsigned char out[k_kernel_args_capacity];
  CHECK(plan->pack(&a, b, out) > 0);
  // 2000 new rows do not fit 5 pages of 256 keys.
  autotune_attention_args big = a;
  big.k_new = make(0x700000, AUTOTUNE_BF16, {3, 2, 2000, 64}, {2000 * 2 * 64, 64, 2 * 64, 1});
  big.v_new = make(0x800000, AUTOTUNE_BF16, {3, 2, 2000, 64}, {2000 * 2 * 64, 64, 2 * 64, 1});
  const BoundCall bb = bind(big);
  CHECK_THROWS_WITH_AS(plan->pack(&big, bb, out), doctest::Contains("Snew=2000"), Error);
}

namespace {

// paged_call's sequences with a contiguous cache of `slots` batches [slots, Hkv,
// Scache=1000, D] instead of pages.
autotune_attention_args contiguous_cache_call(int64_t slots) {
  autotune_attention_args a = paged_call();
  a.block_table = Tensor{};
  a.k = make(0x200000, AUTOTUNE_BF16, {slots, 2, 1000, 64}, {1000 * 2 * 64, 64, 2 * 64, 1});
  a.v = make(0x300000, AUTOTUNE_BF16, {slots, 2, 1000, 64}, {1000 * 2 * 64, 64, 2 * 64, 1});
  return a;
}

// A cache per sequence (B=3) and cache_leftpad [B].
autotune_attention_args leftpad_call() {
  autotune_attention_args a = contiguous_cache_call(3);
  a.cache_leftpad = make(0x900000, AUTOTUNE_INT32, {3});
  return a;
}

} // namespace

namespace {

// paged_call's cache read by 3 packed sequences of 300 query tokens in all
// (flash_attn_varlen_func with block_table): q, o [300, Hq, D], cu_seqlens_q/k [4].
autotune_attention_args varlen_paged_call() {
  autotune_attention_args a = paged_call();
  const int64_t T = 300, Hq = 8, D = 64;
  a.q = make(0x100000, AUTOTUNE_BF16, {T, Hq, D}, {Hq * D, D, 1});
  a.o = make(0x400000, AUTOTUNE_BF16, {T, Hq, D}, {Hq * D, D, 1});
  a.cache_seqlens = Tensor{};
  a.cu_seqlens_q = make(0x500000, AUTOTUNE_INT32, {4});
  a.cu_seqlens_k = make(0x580000, AUTOTUNE_INT32, {4});
  a.max_seqlen_q = 200;
  a.max_seqlen_k = 900;
  return a;
}

} // namespace

TEST_CASE("a varlen call with a paged cache keys varlen=1 and paged=1 and packs both") {
  autotune_attention_args a = varlen_paged_call();
  CHECK(problem_of(a) == "B=3,Hq=8,Hkv=2,Sq=256,Sk=1024,D=64,causal=1,dtype=bf16,lse=0,"
                         "layout=bshd,varlen=1,Tq=512,paged=1,page=256");
  const BoundCall b = bind(a);
  const Problem p = attn().make_problem(call_fields(attn().args_desc(), b));
  const Config c = config("block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem");
  auto plan = attn().plan(c, p);
  alignas(16) unsigned char out[k_kernel_args_capacity];
  REQUIRE(plan->pack(&a, b, out) == sizeof(AttentionKernelArgs));
  AttentionKernelArgs k;
  std::memcpy(&k, out, sizeof k);
  // Packed queries: token and head strides; the cache's pages: page, head, row strides.
  CHECK(k.q_batch_stride == 0);
  CHECK(k.q_seq_stride == 8 * 64);
  CHECK(k.q_head_stride == 64);
  CHECK(k.k_batch_stride == 256 * 2 * 64);
  CHECK(k.k_seq_stride == 2 * 64);
  CHECK(k.k_head_stride == 64);
  CHECK(k.cu_seqlens_q == 0x500000u);
  CHECK(k.cu_seqlens_k == 0x580000u);
  CHECK(k.cache_seqlens == 0u);
  CHECK(k.block_table == 0x600000u);
  CHECK(k.page_size == 256);
  CHECK(k.kv_capacity == 5 * 256);
  // The tuner's call of the same problem: its offsets, then its block table.
  const AttentionKernelArgs t = tuner_args(c, p);
  CHECK(t.cache_seqlens == 0u);
  CHECK(t.block_table != 0u);
  CHECK(t.page_size == 256);
  CHECK(t.k_batch_stride == 256 * 2 * 64);
  // Refused: a contiguous cache, cache_seqlens beside cu_seqlens, appended keys.
  autotune_attention_args r = varlen_paged_call();
  r.block_table = Tensor{};
  r.k = make(0x200000, AUTOTUNE_BF16, {3, 2, 1000, 64}, {1000 * 2 * 64, 64, 2 * 64, 1});
  r.v = make(0x300000, AUTOTUNE_BF16, {3, 2, 1000, 64}, {1000 * 2 * 64, 64, 2 * 64, 1});
  CHECK_THROWS_AS(problem_of(r), Error);
  r = varlen_paged_call();
  r.cache_seqlens = make(0x500000, AUTOTUNE_INT32, {3});
  refused(r, "cache_seqlens is given with cu_seqlens");
  r = varlen_paged_call();
  r.k_new = make(0x700000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  r.v_new = make(0x800000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  refused(r, "not taken with variable-length");
}

TEST_CASE("cache_leftpad: a contiguous cache binds it, the key unchanged, and packs it") {
  autotune_attention_args a = leftpad_call();
  // A run-time value, like the lengths: the problem (and the variant) is the one without.
  CHECK(problem_of(a) == "B=3,Hq=8,Hkv=2,Sq=2,Sk=1024,D=64,causal=1,dtype=bf16,lse=0,"
                         "layout=bshd,kvcache=1");
  a.k_new = make(0x700000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  a.v_new = make(0x800000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  const BoundCall b = bind(a);
  // The signature tells a call with leftpad from one without (the warm path's key).
  autotune_attention_args none = a;
  none.cache_leftpad = Tensor{};
  CHECK(bind(none).values != b.values);
  const Problem p = attn().make_problem(call_fields(attn().args_desc(), b));
  const Config c = config("block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem");
  auto plan = attn().plan(c, p);
  AttentionKernelArgs k = packed_args<AttentionKernelArgs>(*plan, &a, b);
  CHECK(k.cache_leftpad == CUdeviceptr(0x900000));
  CHECK(k.cache_seqlens == CUdeviceptr(0x500000));
  CHECK(k.block_table == 0);
  CHECK(k.seq_new == 2);
  CHECK(k.kv_capacity == 1000);
  // Without it, the kernel reads none.
  k = packed_args<AttentionKernelArgs>(*plan, &none, bind(none));
  CHECK(k.cache_leftpad == 0);
  // The tuner's own calls have none.
  k = tuner_args(c, p);
  CHECK(k.cache_seqlens == CUdeviceptr(0x1000));
  CHECK(k.cache_leftpad == 0);
}

TEST_CASE("a decoding step of several queries packs its GQA group's query heads as rows") {
  // B=3, Hq=8, Hkv=2, Sq=2, q and o [B, Sq, Hq, D] in memory: each K/V head runs the
  // 4 x 2 queries of its group as 8 rows, row i * 2 + s being query s of head i.
  autotune_attention_args a = leftpad_call();
  a.cache_leftpad = Tensor{};
  const BoundCall b = bind(a);
  const Problem p = attn().make_problem(call_fields(attn().args_desc(), b));
  const Config c = config("block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem");
  const std::vector<std::string> defines = attn().defines(c, p);
  CHECK(std::find(defines.begin(), defines.end(), "-DAT_GROUPED=1") != defines.end());
  CHECK(std::find(defines.begin(), defines.end(), "-DAT_CAUSAL=1") != defines.end());
  AttentionKernelArgs k = packed_args<AttentionKernelArgs>(*attn().plan(c, p), &a, b);
  CHECK(k.heads_q == 2);
  CHECK(k.heads_kv == 2);
  CHECK(k.seq_q == 8);
  CHECK(k.group_sq == 2);
  for (const auto& [head, group, seq] :
       {std::tuple{k.q_head_stride, k.q_group_stride, k.q_seq_stride},
        std::tuple{k.o_head_stride, k.o_group_stride, k.o_seq_stride}}) {
    CHECK(head == 4 * 64); // a K/V head's group: 4 query heads of D=64
    CHECK(group == 64);    // one query head
    CHECK(seq == 8 * 64);  // one query: Hq heads
  }
  CHECK(k.q_batch_stride == 2 * 8 * 64);
  // The tuner's own call of the problem: its contiguous q and o get the same strides.
  k = tuner_args(c, p);
  CHECK(k.q_head_stride == 4 * 64);
  CHECK(k.q_group_stride == 64);
  CHECK(k.q_seq_stride == 8 * 64);
  CHECK(k.group_sq == 2);
  // One query (no window): rows one stride apart, no AT_GROUPED, group_sq 0.
  autotune_attention_args one = paged_call();
  const int64_t D = 64, Hq = 8;
  one.q = make(0x100000, AUTOTUNE_BF16, {3, Hq, 1, D}, {Hq * D, D, Hq * D, 1});
  one.o = make(0x400000, AUTOTUNE_BF16, {3, Hq, 1, D}, {Hq * D, D, Hq * D, 1});
  const BoundCall b1 = bind(one);
  const Problem p1 = attn().make_problem(call_fields(attn().args_desc(), b1));
  k = packed_args<AttentionKernelArgs>(*attn().plan(c, p1), &one, b1);
  CHECK(k.seq_q == 4);
  CHECK(k.group_sq == 0);
  CHECK(k.q_seq_stride == D);
  CHECK(k.q_head_stride == 4 * D);
}

namespace {

// A paged call's plan packing the same call with `field` set, as a call that slipped past
// binding would reach it: refused with `message`.
void refused_when_packed_with_pages(Tensor autotune_attention_args::*field, const char* message) {
  autotune_attention_args paged = paged_call();
  const BoundCall b = bind(paged);
  const Problem p = attn().make_problem(call_fields(attn().args_desc(), b));
  auto plan = attn().plan(config("block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem"), p);
  paged.*field = make(0x900000, AUTOTUNE_INT32, {3});
  alignas(16) unsigned char out[k_kernel_args_capacity];
  CHECK_THROWS_WITH_AS(plan->pack(&paged, b, out), doctest::Contains(message), Error);
}

} // namespace

TEST_CASE("cache_leftpad is refused with the argument named") {
  autotune_attention_args a = leftpad_call();
  a.cache_leftpad.dtype = AUTOTUNE_FP32;
  refused(a, "cache_leftpad is fp32; it must be int32");
  a = leftpad_call();
  a.cache_leftpad.dtype = AUTOTUNE_BF16;
  refused(a, "cache_leftpad is bf16; it must be int32");
  a = leftpad_call();
  a.cache_leftpad = make(0x900000, AUTOTUNE_INT32, {4});
  refused(a, "cache_leftpad has shape [4]");
  a = leftpad_call();
  a.cache_leftpad = make(0x900000, AUTOTUNE_INT32, {3, 1});
  refused(a, "cache_leftpad");
  a = leftpad_call();
  a.cache_leftpad = make(0x900000, AUTOTUNE_INT32, {3}, {2});
  refused(a, "cache_leftpad");
  // flash-attn refuses it with a paged cache, and so do we.
  a = paged_call();
  a.cache_leftpad = make(0x900000, AUTOTUNE_INT32, {3});
  refused(a, "cache_leftpad is not supported with a paged KV cache (block_table)");
  // Without a cache.
  a = leftpad_call();
  a.cache_seqlens = Tensor{};
  refused(a, "cache_leftpad is given without cache_seqlens");
  CHECK_THROWS_WITH_AS(problem("B=2,Hq=4,Sq=1,Sk=300,D=64,paged=1,leftpad=1"),
                       doctest::Contains("not supported with a paged KV cache"), Error);
  CHECK_THROWS_WITH_AS(problem("B=2,Hq=4,Sq=1,Sk=300,D=64,leftpad=1"),
                       doctest::Contains("cache_leftpad is given without cache_seqlens"), Error);
  // A call that slips past binding (packing alone) is refused too.
  refused_when_packed_with_pages(&autotune_attention_args::cache_leftpad,
                                 "cache_leftpad is not supported with a paged KV cache");
}

namespace {

// The 3 sequences reading a pool of 5 cache slots through cache_batch_idx [B=3].
autotune_attention_args batch_idx_call() {
  autotune_attention_args a = contiguous_cache_call(5);
  a.cache_batch_idx = make(0xa00000, AUTOTUNE_INT32, {3});
  return a;
}

} // namespace

TEST_CASE("cache_batch_idx: a pool of cache slots binds, the key unchanged, and packs it") {
  autotune_attention_args a = batch_idx_call();
  // A run-time value: the problem (and the variant) is the one of a cache per sequence.
  CHECK(problem_of(a) == "B=3,Hq=8,Hkv=2,Sq=2,Sk=1024,D=64,causal=1,dtype=bf16,lse=0,"
                         "layout=bshd,kvcache=1");
  // Fewer slots than sequences, appended rows and left padding bind too.
  autotune_attention_args few = a;
  few.k = make(0x200000, AUTOTUNE_BF16, {1, 2, 1000, 64}, {1000 * 2 * 64, 64, 2 * 64, 1});
  few.v = make(0x300000, AUTOTUNE_BF16, {1, 2, 1000, 64}, {1000 * 2 * 64, 64, 2 * 64, 1});
  few.k_new = make(0x700000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  few.v_new = make(0x800000, AUTOTUNE_BF16, {3, 2, 2, 64}, {2 * 2 * 64, 64, 2 * 64, 1});
  few.cache_leftpad = make(0x900000, AUTOTUNE_INT32, {3});
  CHECK(problem_of(few) == problem_of(a));
  const BoundCall b = bind(a);
  // The signature tells a call with slots from one without (the warm path's key).
  CHECK(bind(leftpad_call()).values != b.values);
  const Problem p = attn().make_problem(call_fields(attn().args_desc(), b));
  const Config c = config("block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem");
  auto plan = attn().plan(c, p);
  AttentionKernelArgs k = packed_args<AttentionKernelArgs>(*plan, &a, b);
  CHECK(k.cache_batch_idx == CUdeviceptr(0xa00000));
  CHECK(k.num_pages == 5); // the slots the kernel clamps an index into
  CHECK(k.block_table == 0);
  CHECK(k.kv_capacity == 1000);
  CHECK(k.k_batch_stride == 1000 * 2 * 64);
  const BoundCall bf = bind(few);
  k = packed_args<AttentionKernelArgs>(*plan, &few, bf);
  CHECK(k.num_pages == 1);
  CHECK(k.cache_leftpad == CUdeviceptr(0x900000));
  CHECK(k.seq_new == 2);
  // Without it, the kernel reads none; the tuner's own calls have none.
  k = packed_args<AttentionKernelArgs>(*plan, &a, b);
  autotune_attention_args none = leftpad_call();
  none.cache_leftpad = Tensor{};
  k = packed_args<AttentionKernelArgs>(*plan, &none, bind(none));
  CHECK(k.cache_batch_idx == 0);
  CHECK(k.num_pages == 3);
  CHECK(tuner_args(c, p).cache_batch_idx == 0);
}

TEST_CASE("cache_batch_idx is refused with the argument named") {
  autotune_attention_args a = batch_idx_call();
  a.cache_batch_idx.dtype = AUTOTUNE_FP32;
  refused(a, "cache_batch_idx is fp32; it must be int32");
  a = batch_idx_call();
  a.cache_batch_idx = make(0xa00000, AUTOTUNE_INT32, {5});
  refused(a, "cache_batch_idx has shape [5]");
  a = batch_idx_call();
  a.cache_batch_idx = make(0xa00000, AUTOTUNE_INT32, {3}, {2});
  refused(a, "cache_batch_idx");
  // k and v with different slot counts, or another cache size.
  a = batch_idx_call();
  a.v = make(0x300000, AUTOTUNE_BF16, {4, 2, 1000, 64}, {1000 * 2 * 64, 64, 2 * 64, 1});
  refused(a, "v has shape");
  a = batch_idx_call();
  a.v = make(0x300000, AUTOTUNE_BF16, {5, 2, 999, 64}, {999 * 2 * 64, 64, 2 * 64, 1});
  refused(a, "v has shape");
  // Without slots, a cache of another batch than q's is still refused.
  a = batch_idx_call();
  a.cache_batch_idx = Tensor{};
  refused(a, "k has shape");
  // flash-attn refuses it with a paged cache, and so do we.
  a = paged_call();
  a.cache_batch_idx = make(0xa00000, AUTOTUNE_INT32, {3});
  refused(a, "cache_batch_idx is not supported with a paged KV cache (block_table)");
  // Without a cache.
  a = batch_idx_call();
  a.cache_seqlens = Tensor{};
  refused(a, "cache_batch_idx is given without cache_seqlens");
  CHECK_THROWS_WITH_AS(problem("B=2,Hq=4,Sq=1,Sk=300,D=64,paged=1,batch_idx=1"),
                       doctest::Contains("not supported with a paged KV cache"), Error);
  // A call that slips past binding (packing alone) is refused too.
  refused_when_packed_with_pages(&autotune_attention_args::cache_batch_idx,
                                 "cache_batch_idx is not supported with a paged KV cache");
}

TEST_CASE("the C struct's scale: 0 is 1/sqrt(D), a positive one is used, a negative one is "
          "refused (never replaced by the default)") {
  autotune_attention_args a = paged_call();
  const BoundCall b = bind(a);
  const Problem p = attn().make_problem(call_fields(attn().args_desc(), b));
  auto plan = attn().plan(config("block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem"), p);
  alignas(16) unsigned char out[k_kernel_args_capacity];
  const double log2e = 1.4426950408889634;
  a.scale = 0;
  CHECK(packed_args<AttentionKernelArgs>(*plan, &a, b).scale_log2 ==
        doctest::Approx(log2e / 8.0)); // D = 64
  a.scale = 0.5;
  CHECK(packed_args<AttentionKernelArgs>(*plan, &a, b).scale_log2 == doctest::Approx(0.5 * log2e));
  for (double bad : {-0.125, std::nan(""), HUGE_VAL}) {
    CAPTURE(bad);
    a.scale = bad;
    CHECK_THROWS_WITH_AS(plan->pack(&a, b, out),
                         doctest::Contains("scale must be positive and finite"), Error);
  }
}
