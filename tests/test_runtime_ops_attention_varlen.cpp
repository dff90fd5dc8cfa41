// Variable-length attention batches (varlen=1, flash-attn's flash_attn_varlen_func):
// their problems and tuning buckets, the tuner's packed inputs, the token counts that bound
// the offsets in the kernel arguments, and binding a call of the C ABI with packed q/k/v and
// int32 cu_seqlens. No GPU.
#include "attention_call_support.hpp"

#include "runtime/ops/heuristic.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <string>

using namespace autotune;
using namespace autotune::testing;

namespace {

// B = 3 sequences packed: Tq = 1000 query tokens, Tk = 1500 keys, Hq = 8, Hkv = 2.
autotune_attention_args varlen_call() {
  autotune_attention_args a{};
  const int64_t Tq = 1000, Tk = 1500, Hq = 8, Hkv = 2, D = 64, B = 3;
  a.q = make(0x100000, AUTOTUNE_BF16, {Tq, Hq, D});
  a.k = make(0x200000, AUTOTUNE_BF16, {Tk, Hkv, D});
  a.v = make(0x300000, AUTOTUNE_BF16, {Tk, Hkv, D});
  a.o = make(0x400000, AUTOTUNE_BF16, {Tq, Hq, D});
  a.cu_seqlens_q = make(0x500000, AUTOTUNE_INT32, {B + 1});
  a.cu_seqlens_k = make(0x600000, AUTOTUNE_INT32, {B + 1});
  a.max_seqlen_q = 500;
  a.max_seqlen_k = 700;
  a.causal = 1;
  return a;
}

} // namespace

TEST_CASE("varlen attention problems bucket the longest sequences and the totals") {
  CHECK(problem("B=4,H=8,S=1000,D=128,varlen=1").key() ==
        "B=4,Hq=8,Hkv=8,Sq=1024,Sk=1024,D=128,causal=0,dtype=bf16,lse=0,layout=bshd,varlen=1,"
        "Tq=2048,Tk=2048");
  CHECK(problem("B=2,Hq=8,Hkv=2,Sq=3,Sk=300,D=64,causal=1,varlen=1,Tq=5,Tk=513").key() ==
        "B=2,Hq=8,Hkv=2,Sq=16,Sk=512,D=64,causal=1,dtype=bf16,lse=0,layout=bshd,varlen=1,Tq=16,"
        "Tk=1024");
  // Canonical: the key's own fields give the same key.
  const Problem p = problem("B=4,H=8,S=1000,D=128,varlen=1,alibi=1");
  CHECK(problem(p.key()).key() == p.key());
  CHECK(p.key().find(",alibi=1,varlen=1,Tq=") != std::string::npos);
  // Without varlen: the key it always had; Tq/Tk of 0 (what a call without varlen binds)
  // are no fields.
  CHECK(problem("B=4,H=8,S=1000,D=128,varlen=0,Tq=0,Tk=0").key() ==
        "B=4,Hq=8,Hkv=8,Sq=1000,Sk=1000,D=128,causal=0,dtype=bf16,lse=0,layout=bshd");
  CHECK_THROWS_WITH_AS(problem("B=4,H=8,S=1000,D=128,Tq=100"),
                       doctest::Contains("Tq (total tokens) is a field of varlen=1"), Error);
  CHECK_THROWS_WITH_AS(problem("B=4,H=8,S=1000,D=128,varlen=1,layout=bhsd"),
                       doctest::Contains("varlen=1 packs tokens as [T, H, D]"), Error);
  CHECK_THROWS_WITH_AS(problem("B=4,H=8,S=1000,D=128,varlen=2"),
                       doctest::Contains("varlen=2 must be 0 or 1"), Error);
}

TEST_CASE("varlen attention: AT_VARLEN compiled in, packed inputs; the Hopper family one query "
          "block a block") {
  const Problem p = problem("B=5,Hq=4,Hkv=2,S=300,D=72,causal=1,lse=1,varlen=1,Tq=1000,Tk=900");
  const Config mma = config("block_m=64,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=1");
  CHECK(attn().check(mma, p, "sm_90a"));
  const auto defs = attn().defines(mma, p);
  CHECK(std::find(defs.begin(), defs.end(), "-DAT_VARLEN=1") != defs.end());
  const auto plain = attn().defines(mma, problem("B=5,Hq=4,Hkv=2,S=300,D=72"));
  CHECK(std::find(plain.begin(), plain.end(), "-DAT_VARLEN=1") == plain.end());
  // The Hopper family: its plain, overlapped and ping-pong schedules (a block per query
  // block, the grid as the portable one's); not persistent, no clusters.
  for (const char* family : {"wgmma", "wgmma_overlap", "wgmma_pingpong"}) {
    CAPTURE(family);
    const Config wg = config(std::string("block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,"
                                         "q=smem,splits=1,family=") +
                             family);
    CHECK(attn().check(wg, p, "sm_90a"));
    const auto wd = attn().defines(wg, p);
    CHECK(std::find(wd.begin(), wd.end(), "-DAT_VARLEN=1") != wd.end());
    const LaunchGeometry wgeo = attn().geometry(wg, p);
    CHECK(wgeo.grid[0] == 512 / 128);
    CHECK(wgeo.grid[2] == 5);
  }
  for (const char* family : {"wgmma_persistent", "wgmma_overlap_persistent", "wgmma_multicast"}) {
    CAPTURE(family);
    const auto r = attn().check(config(std::string("block_m=128,block_n=128,warps=4,stages=2,"
                                                   "swizzle=xor,q=smem,splits=1,family=") +
                                       family),
                                p, "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("not persistent, no clusters") != std::string::npos);
  }
  CHECK_FALSE(attn().check(config("block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,"
                                  "splits=1,family=wgmma"),
                           p, "sm_80"));
  // The grid covers the bucketed longest sequence (512 rows) for every batch and head.
  const LaunchGeometry g = attn().geometry(mma, p);
  CHECK(g.grid[0] == 512 / 64);
  CHECK(g.grid[1] == 4);
  CHECK(g.grid[2] == 5);
  // Tensors: Tq = 1024 and Tk = 1024 tokens (at most B * Sq = 2560), lse [Hq, Tq], then
  // the offsets, which start at 0, never decrease, keep every length within Sq and end
  // at the total.
  const auto t = attn().tensors(p);
  REQUIRE(t.size() >= 7);
  CHECK(t[0].name == "q");
  CHECK(t[0].elements == size_t(1024 * 4 * 72));
  CHECK(t[1].elements == size_t(1024 * 2 * 72));
  CHECK(t[4].name == "lse");
  CHECK(t[4].elements == size_t(4 * 1024));
  const TensorSpec& cq = t[t.size() - 2];
  const TensorSpec& ck = t[t.size() - 1];
  CHECK(cq.name == "cu_seqlens_q");
  CHECK(ck.name == "cu_seqlens_k");
  for (const TensorSpec* cu : {&cq, &ck}) {
    REQUIRE(cu->values.size() == 6);
    CHECK(cu->elements == 6);
    CHECK(cu->values.front() == 0);
    CHECK(cu->values.back() == 1024);
    int longest = 0;
    for (size_t b = 0; b + 1 < cu->values.size(); ++b) {
      CHECK(cu->values[b + 1] >= cu->values[b]);
      longest = std::max(longest, cu->values[b + 1] - cu->values[b]);
    }
    CHECK(longest <= 512);
  }
  CHECK(attn().flops(p) > 0);
  // Deterministic from the shape.
  CHECK(attn().tensors(p)[t.size() - 2].values == cq.values);
}

TEST_CASE("varlen attention on sm_90a takes a Hopper point's tile, one query block a block") {
  // The nearest sm_90a points are persistent tiles, which packed sequences refuse: adapt
  // gives the plain schedule of the same tile (not the portable family).
  for (const char* shape :
       {"B=6,Hq=16,Hkv=16,Sq=3710,Sk=3710,D=128,causal=1,varlen=1,Tq=16384,Tk=16384",
        "B=2,Hq=32,Hkv=8,Sq=1000,Sk=1000,D=128,varlen=1,Tq=1500,Tk=1500",
        "B=4,H=8,S=4096,D=256,causal=1,varlen=1,Tq=8000,Tk=8000"}) {
    CAPTURE(shape);
    const Problem p = problem(shape);
    const auto h = heuristic_config(attn(), p, "sm_90a");
    REQUIRE(h);
    const std::string* family = find_field(h->first, "family");
    REQUIRE(family != nullptr);
    CHECK(family->rfind("wgmma", 0) == 0);
    CHECK(family->find("persistent") == std::string::npos);
    CHECK(family->find("multicast") == std::string::npos);
    CHECK(attn().check(h->first, p, "sm_90a"));
  }
}

TEST_CASE("varlen attention calls bind packed tensors and int32 offsets, bucketed") {
  autotune_attention_args a = varlen_call();
  CHECK(problem_of(a) == "B=3,Hq=8,Hkv=2,Sq=512,Sk=1024,D=64,causal=1,dtype=bf16,lse=0,"
                         "layout=bshd,varlen=1,Tq=1024,Tk=2048");
  SUBCASE("calls of one bucket share a signature") {
    autotune_attention_args b = varlen_call();
    b.q.shape[0] = b.o.shape[0] = 990;
    b.max_seqlen_q = 400;
    CHECK(bind(a).values == bind(b).values);
    b.max_seqlen_q = 600;
    CHECK(bind(a).values != bind(b).values);
  }
  SUBCASE("lse is [Hq, Tq]") {
    a.lse = make(0x700000, AUTOTUNE_FP32, {8, 1000});
    CHECK(problem_of(a).find("lse=1") != std::string::npos);
    a.lse = make(0x700000, AUTOTUNE_FP32, {3, 8, 500});
    refused(a, "varlen");
  }
  SUBCASE("cu_seqlens must be int32 [B + 1], both or neither") {
    a.cu_seqlens_k = make(0x600000, AUTOTUNE_FP32, {4});
    refused(a, "cu_seqlens_k is fp32; it must be int32");
    a.cu_seqlens_k = make(0x600000, AUTOTUNE_INT32, {5});
    refused(a, "cu_seqlens_k has shape [5]; expected [B+1=4]");
    a.cu_seqlens_k = Tensor{};
    refused(a, "cu_seqlens_k implies varlen=0, but q gives varlen=1");
  }
  SUBCASE("packed and padded tensors do not mix") {
    a.k = make(0x200000, AUTOTUNE_BF16, {3, 2, 700, 64});
    refused(a, "k implies varlen=0, but q gives varlen=1");
    autotune_attention_args padded{};
    padded.q = make(0x100000, AUTOTUNE_BF16, {2, 8, 64, 64});
    padded.k = padded.v = make(0x200000, AUTOTUNE_BF16, {2, 8, 64, 64});
    padded.o = make(0x400000, AUTOTUNE_BF16, {2, 8, 64, 64});
    padded.cu_seqlens_q = padded.cu_seqlens_k = make(0x500000, AUTOTUNE_INT32, {3});
    refused(padded, "cu_seqlens_q implies varlen=1, but q gives varlen=0");
  }
  SUBCASE("the longest sequences are required, and not negative") {
    a.max_seqlen_q = 0;
    refused(a, "no argument gives field Sq");
    a.max_seqlen_q = -1;
    refused(a, "max_seqlen_q must be >= 0");
  }
  SUBCASE("packed tensors keep the strides rules: contiguous last dim, 8-element rows") {
    a.q = make(0x100000, AUTOTUNE_BF16, {1000, 8, 64}, {8 * 68, 68, 1});
    refused(a, "multiples of 8 elements");
    a.q = make(0x100000, AUTOTUNE_BF16, {1000, 8, 64}, {8 * 64, 1, 8});
    refused(a, "contiguous last dimension");
  }
  SUBCASE("a call without varlen may give max_seqlen, if it agrees") {
    autotune_attention_args padded{};
    padded.q = make(0x100000, AUTOTUNE_BF16, {2, 8, 64, 64});
    padded.k = padded.v = make(0x200000, AUTOTUNE_BF16, {2, 8, 64, 64});
    padded.o = make(0x400000, AUTOTUNE_BF16, {2, 8, 64, 64});
    padded.max_seqlen_q = 64;
    CHECK(problem_of(padded).find("varlen") == std::string::npos);
    padded.max_seqlen_q = 65;
    refused(padded, "max_seqlen_q implies Sq=65, but q gives Sq=64");
  }
  CHECK(describe_args(attn().args_desc()).find("cu_seqlens_q [B+1] int32 optional contiguous") !=
        std::string::npos);
}

TEST_CASE("varlen kernel arguments carry the token counts that bound each sequence's offsets") {
  const Config mma = config("block_m=64,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=1");
  // The tuner's own tensors: Tq = Tk = 1024 rows (the bucketed totals).
  const AttentionKernelArgs k =
      tuner_args(mma, problem("B=5,Hq=4,Hkv=2,S=300,D=64,varlen=1,Tq=1000,Tk=900"));
  CHECK(k.tokens_q == 1024);
  CHECK(k.tokens_k == 1024);
  // A paged cache counts its keys through cu_seqlens_k: no row bound there.
  const AttentionKernelArgs paged =
      tuner_args(mma, problem("B=5,Hq=4,Hkv=2,S=300,D=64,varlen=1,Tq=1000,paged=1,page=256"));
  CHECK(paged.tokens_q == 1024);
  CHECK(paged.tokens_k == std::numeric_limits<int>::max());
  // A call that does not give them is refused: the kernels clamp the offsets into them.
  const Problem p = problem("B=5,Hq=4,Hkv=2,S=300,D=64,varlen=1,Tq=1000");
  AttentionCall call;
  call.q = call.k = call.v = call.o = 0x1000;
  call.cu_seqlens_q = call.cu_seqlens_k = 0x2000;
  call.tokens_k = 900;
  ArgPack args;
  CHECK_THROWS_WITH_AS(attn().pack_call(mma, p, call, args),
                       doctest::Contains("needs the packed token counts of q and k"), Error);
}
