// GPU tests for variable-length attention batches (varlen=1, flash-attn's varlen):
// packed sequences of lengths off every tile (an empty one, one without keys, one of a
// single token), causal and not, GQA, LSE [Hq, Tq], split-KV, windows/softcap/ALiBi,
// offsets outside the tensors (clamped; nothing written past o or lse),
// through the op's variants, the GPU reference as the tuner runs it, the runtime from
// the C struct (bucketed signatures) and the tuner.
#include "attention_reference.hpp"
#include "gpu_support.hpp"

#include "runtime/dispatch/autotune.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/attention.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"
#include "tuner/compile.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>

using namespace autotune;
using namespace autotune::test;
namespace fs = std::filesystem;

namespace {

std::vector<int> cumulative(const std::vector<int>& len) {
  std::vector<int> cu(len.size() + 1, 0);
  for (size_t b = 0; b < len.size(); ++b) {
    cu[b + 1] = cu[b] + len[b];
  }
  return cu;
}

// One varlen batch: packed inputs, the offsets on the device, and the reference.
struct VarlenCase {
  std::vector<int> cu_q, cu_k;
  int B, Hq, Hkv, D, max_q, max_k, Tq, Tk;
  bool causal;
  DType dtype;
  Problem problem;
  HostTensor q, k, v;
  cuda::DeviceBuffer cu_q_dev, cu_k_dev;
  Features features;
  std::vector<float> slopes;
  Reference ref;

  VarlenCase(const std::vector<int>& len_q, const std::vector<int>& len_k, int hq, int hkv, int d,
             bool is_causal, DType t, std::mt19937_64& rng, const std::string& extra = "")
      : cu_q(cumulative(len_q)), cu_k(cumulative(len_k)), B(int(len_q.size())), Hq(hq), Hkv(hkv),
        D(d), max_q(std::max(1, *std::max_element(len_q.begin(), len_q.end()))),
        max_k(std::max(1, *std::max_element(len_k.begin(), len_k.end()))), Tq(cu_q.back()),
        Tk(cu_k.back()), causal(is_causal), dtype(t),
        problem(attn().make_problem(parse_fields(
            "B=" + std::to_string(B) + ",Hq=" + std::to_string(Hq) + ",Hkv=" + std::to_string(Hkv) +
                ",Sq=" + std::to_string(max_q) + ",Sk=" + std::to_string(max_k) + ",D=" +
                std::to_string(D) + ",causal=" + (causal ? "1" : "0") + ",dtype=" + to_string(t) +
                ",lse=1,varlen=1,Tq=" + std::to_string(Tq) + ",Tk=" + std::to_string(Tk) + extra,
            "shape"))),
        q(t, size_t(Tq) * Hq * D), k(t, size_t(Tk) * Hkv * D), v(t, size_t(Tk) * Hkv * D),
        cu_q_dev(cu_q.size() * 4), cu_k_dev(cu_k.size() * 4) {
    q.randomize(rng, -2, 2);
    k.randomize(rng, -1, 1);
    v.randomize(rng, -1, 1);
    cu_q_dev.upload(cu_q.data(), cu_q.size() * 4);
    cu_k_dev.upload(cu_k.data(), cu_k.size() * 4);
    reference();
  }

  void reference() {
    ref = attention_reference_varlen(q, k, v, cu_q, cu_k, Hq, Hkv, D, causal,
                                     1.0 / std::sqrt(double(D)), features);
  }

  // The call of packed contiguous tensors.
  AttentionCall call(CUdeviceptr qp, CUdeviceptr kp, CUdeviceptr vp, CUdeviceptr op,
                     CUdeviceptr lp) const {
    AttentionCall c;
    c.q = qp;
    c.k = kp;
    c.v = vp;
    c.o = op;
    c.lse = lp;
    c.q_head_stride = c.o_head_stride = c.k_head_stride = c.v_head_stride = D;
    c.q_seq_stride = c.o_seq_stride = Hq * D;
    c.k_seq_stride = c.v_seq_stride = Hkv * D;
    c.cu_seqlens_q = cu_q_dev.get();
    c.cu_seqlens_k = cu_k_dev.get();
    c.lse_head_stride = Tq;
    c.tokens_q = Tq;
    c.tokens_k = Tk;
    return c;
  }

  // O elements of rows without keys (reference LSE -inf) that are not exactly 0.
  size_t empty_rows_nonzero(const std::vector<double>& o) const {
    size_t wrong = 0;
    for (int h = 0; h < Hq; ++h) {
      for (int row = 0; row < Tq; ++row) {
        if (std::isinf(ref.lse[size_t(h) * Tq + size_t(row)])) {
          for (int d = 0; d < D; ++d) {
            wrong += o[(size_t(row) * Hq + size_t(h)) * D + size_t(d)] != 0.0;
          }
        }
      }
    }
    return wrong;
  }
};

// A host tensor's bytes on the device between two guards of k_guard_bytes of 0xA5, so
// that a store a little past either end of the tensor is seen (guards_intact).
constexpr size_t k_guard_bytes = 64 * 1024;
struct GuardedTensor {
  cuda::DeviceBuffer buffer;
  size_t bytes;
  explicit GuardedTensor(const HostTensor& h)
      : buffer(h.bytes.size() + 2 * k_guard_bytes), bytes(h.bytes.size()) {
    std::vector<unsigned char> image(buffer.size(), 0xA5);
    std::copy(h.bytes.begin(), h.bytes.end(), image.begin() + k_guard_bytes);
    buffer.upload(image.data(), image.size());
  }
  CUdeviceptr get() const { return buffer.get() + k_guard_bytes; }
  // The tensor into h; false when a guard byte changed.
  bool download(HostTensor& h) const {
    std::vector<unsigned char> image(buffer.size());
    buffer.download(image.data(), image.size());
    std::copy_n(image.begin() + k_guard_bytes, bytes, h.bytes.begin());
    const auto guard = [](auto first, auto last) {
      return std::all_of(first, last, [](unsigned char b) { return b == 0xA5; });
    };
    return guard(image.begin(), image.begin() + k_guard_bytes) &&
           guard(image.end() - k_guard_bytes, image.end());
  }
};

// Runs every config on the case and checks O (rows without keys exactly 0) and LSE, and
// that nothing just outside o and lse was written; `adjust` edits each call (another K/V
// source, other offsets) before it is packed.
void check_variants(VarlenCase& c, const std::vector<Config>& configs,
                    const std::function<void(AttentionCall&)>& adjust = {}) {
  cuda::DeviceInfo dev = cuda::query_device(0);
  std::vector<Config> valid;
  std::vector<VariantSource> sources;
  for (const Config& cfg : configs) {
    if (attn().check(cfg, c.problem, dev.arch())) {
      valid.push_back(cfg);
      sources.push_back(describe_variant(attn(), cfg, c.problem, dev.arch()));
    }
  }
  REQUIRE(!valid.empty());
  std::vector<CompileJob> jobs;
  for (const auto& s : sources) {
    jobs.push_back({&s});
  }
  compile_all(jobs, default_jobs(), [](CompileJob&, size_t) {});
  DeviceTensor q(c.q), k(c.k), v(c.v);
  HostTensor out(c.dtype, c.q.n), lse(DType::f32, size_t(c.Hq) * c.Tq);
  for (size_t i = 0; i < valid.size(); ++i) {
    CAPTURE(sources[i].config_id);
    REQUIRE_MESSAGE(jobs[i].output.ok(),
                    (jobs[i].output.ok() ? "" : jobs[i].output.failure().detail));
    cuda::Module m = cuda::load_module(jobs[i].output->binary);
    CUfunction f = cuda::get_function(m, attn().kernel_name());
    const size_t ws_bytes = std::max<size_t>(16, attn().workspace_bytes(valid[i], c.problem));
    HostTensor ws_host(DType::f32, ws_bytes / 4);
    DeviceTensor ws(ws_host);
    for (int repeat = 0; repeat < 2; ++repeat) { // split counters back at zero
      out.poison();
      lse.poison();
      GuardedTensor o(out), l(lse);
      AttentionCall call = c.call(q.get(), k.get(), v.get(), o.get(), l.get());
      call.window_left = c.features.left;
      call.window_right = c.features.right;
      call.softcap = c.features.softcap;
      HostTensor sh(DType::f32, std::max<size_t>(1, c.slopes.size()));
      for (size_t j = 0; j < c.slopes.size(); ++j) {
        sh.set(j, c.slopes[j]);
      }
      DeviceTensor slopes(sh);
      if (!c.slopes.empty()) {
        call.alibi_slopes = slopes.get();
        call.alibi_batch_stride = c.features.slope_batch_stride;
      }
      call.workspace = ws.get();
      call.workspace_bytes = ws_bytes;
      if (adjust) {
        adjust(call);
      }
      ArgPack args;
      attn().pack_call(valid[i], c.problem, call, args);
      launch_and_wait(f, attn().geometry(valid[i], c.problem), args,
                      c.problem.key() + " " + config_id(valid[i]));
      CHECK(o.download(out));
      CHECK(l.download(lse));
      const std::vector<double> got_o = values(out);
      CHECK(rel_err(got_o, c.ref.o) <= attn().tolerance(c.problem));
      CHECK(rel_err(values(lse), c.ref.lse) <= 1e-4);
      CHECK(c.empty_rows_nonzero(got_o) == 0);
    }
  }
}

std::vector<Config> varlen_configs() {
  std::vector<Config> out;
  for (const char* text : {"block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem,splits=1",
                           "block_m=128,block_n=64,warps=4,stages=2,swizzle=xor,q=regs,splits=1",
                           "block_m=128,block_n=32,warps=8,stages=3,swizzle=pad,q=smem,splits=1",
                           "block_m=64,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1",
                           "block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem,splits=2",
                           "block_m=64,block_n=32,warps=4,stages=2,swizzle=xor,q=smem,splits=4"}) {
    out.push_back(parse_fields(text, "config"));
  }
  // The Hopper family's schedules (check() keeps them to sm_90a; block_n 80 and 64 leave
  // key tiles past a sequence's end inside the packed tensor).
  for (const char* text :
       {"block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma",
        "block_m=64,block_n=80,warps=4,stages=3,swizzle=xor,q=smem,splits=1,family=wgmma",
        "block_m=128,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma_overlap",
        "block_m=192,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
        "family=wgmma_overlap",
        "block_m=128,block_n=96,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
        "family=wgmma_pingpong"}) {
    out.push_back(parse_fields(text, "config"));
  }
  return out;
}

} // namespace

TEST_CASE("varlen attention: causal GQA sequences of lengths off the tiles, an empty one, one "
          "without keys, match the float64 reference per sequence") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  // Sequence 1 is empty; sequence 3 has queries but no keys (O = 0, LSE = -inf); 4 has
  // more queries than keys (causal: its first rows see none); 5 has one token.
  const std::vector<int> len_q = {37, 0, 130, 20, 100, 1, 257};
  const std::vector<int> len_k = {37, 0, 130, 0, 60, 1, 300};
  for (bool causal : {true, false}) {
    for (DType t : {DType::bf16, DType::f16}) {
      CAPTURE(causal);
      CAPTURE(to_string(t));
      VarlenCase c(len_q, len_k, 8, 2, 80, causal, t, rng);
      check_variants(c, varlen_configs());
    }
  }
  SUBCASE("head dims over 128 (the Hopper family's tiles of 256 columns)") {
    std::vector<Config> wide;
    for (const char* text :
         {"block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem,splits=1",
          "block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma",
          "block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
          "family=wgmma_overlap",
          "block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
          "family=wgmma_pingpong",
          "block_m=64,block_n=96,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma"}) {
      wide.push_back(parse_fields(text, "config"));
    }
    for (int d : {192, 224, 256}) {
      CAPTURE(d);
      VarlenCase c({113, 60, 7, 100}, {203, 150, 190, 3}, 4, 4, d, false, DType::f16, rng);
      check_variants(c, wide);
      VarlenCase cc({1024, 700}, {1024, 900}, 2, 2, d, true, DType::f16, rng);
      check_variants(cc, wide);
    }
  }
  SUBCASE("head dim 128, MQA") {
    VarlenCase c({65, 64, 1, 129}, {65, 200, 17, 129}, 4, 1, 128, true, DType::bf16, rng);
    check_variants(c, varlen_configs());
  }
}

TEST_CASE("varlen attention clamps offsets outside the packed tensors: a negative first "
          "offset, a last one past the tokens (near and far), nothing written past o or lse") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  const int int_max = std::numeric_limits<int>::max();
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    VarlenCase c({37, 0, 50, 20}, {45, 12, 61, 30}, 4, 2, 64, causal, DType::bf16, rng);
    // Clamped into [0, Tq] and [0, Tk] these are the case's own offsets, so its reference
    // holds; unclamped, the last sequence's rows would reach past q, o, lse, k and v.
    for (const auto& [bad_q, bad_k] :
         {std::pair{std::vector<int>{-30, 37, 37, 87, c.Tq + 40},
                    std::vector<int>{-5, 45, 57, 118, c.Tk + 1000}},
          std::pair{std::vector<int>{std::numeric_limits<int>::min(), 37, 37, 87, int_max},
                    std::vector<int>{0, 45, 57, 118, 2000000000}}}) {
      CAPTURE(bad_q.back());
      cuda::DeviceBuffer q_dev = int_buffer(bad_q), k_dev = int_buffer(bad_k);
      check_variants(c, varlen_configs(), [&](AttentionCall& call) {
        call.cu_seqlens_q = q_dev.get();
        call.cu_seqlens_k = k_dev.get();
      });
    }
  }
}

TEST_CASE("varlen attention reading a paged KV cache (flash_attn_varlen_func's block_table): "
          "shuffled pages, GQA, causal and not, split-KV") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  // Sequence 1 has no queries, 3 more keys than a page holds and queries off the tiles;
  // sequence 2 has a single key.
  const std::vector<int> len_q = {100, 0, 1, 257, 33};
  const std::vector<int> len_k = {300, 17, 1, 600, 33};
  for (int page : {256, 128}) {
    for (bool causal : {true, false}) {
      CAPTURE(page);
      CAPTURE(causal);
      VarlenCase c(len_q, len_k, 8, 2, 128, causal, DType::bf16, rng);
      c.problem = attn().make_problem(parse_fields(
          "B=5,Hq=8,Hkv=2,Sq=" + std::to_string(c.max_q) + ",Sk=" + std::to_string(c.max_k) +
              ",D=128,causal=" + (causal ? "1" : "0") + ",dtype=bf16,lse=1,varlen=1,Tq=" +
              std::to_string(c.Tq) + ",paged=1,page=" + std::to_string(page),
          "shape"));
      // Each sequence's keys dealt into pages out of order (3 spare pages hold noise).
      const int per_seq = (c.max_k + page - 1) / page;
      const int pages = c.B * per_seq + 3;
      std::vector<int> order(static_cast<size_t>(pages));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      const std::vector<int> table(order.begin(), order.begin() + c.B * per_seq);
      const size_t row = size_t(c.Hkv) * c.D;
      HostTensor kp(c.dtype, size_t(pages) * page * row), vp(c.dtype, size_t(pages) * page * row);
      kp.randomize(rng, -1, 1);
      vp.randomize(rng, -1, 1);
      for (int b = 0; b < c.B; ++b) {
        for (int j = 0; j < len_k[size_t(b)]; ++j) {
          const size_t to =
              (size_t(table[size_t(b * per_seq + j / page)]) * page + size_t(j % page)) * row;
          const size_t from = size_t(c.cu_k[size_t(b)] + j) * row;
          for (size_t e = 0; e < row; ++e) {
            kp.set(to + e, c.k.get(from + e));
            vp.set(to + e, c.v.get(from + e));
          }
        }
      }
      DeviceTensor kd(kp), vd(vp);
      cuda::DeviceBuffer table_dev = int_buffer(table);
      check_variants(c, varlen_configs(), [&](AttentionCall& call) {
        call.k = kd.get();
        call.v = vd.get();
        call.k_batch_stride = call.v_batch_stride = (long long)page * (long long)row;
        call.k_seq_stride = call.v_seq_stride = (long long)row;
        call.k_head_stride = call.v_head_stride = c.D;
        call.tokens_k = 0;
        call.block_table = table_dev.get();
        call.block_table_stride = per_seq;
        call.page_size = page;
        call.num_pages = pages;
        call.kv_capacity = per_seq * page;
      });
    }
  }
}

TEST_CASE("varlen attention with a window, softcap and ALiBi [B, Hq] per sequence") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  VarlenCase c({90, 0, 200, 33}, {90, 10, 250, 40}, 4, 2, 64, true, DType::bf16, rng,
               ",window=1,softcap=1,alibi=1");
  c.features.left = 30;
  c.features.right = -1;
  c.features.softcap = 10.0;
  std::uniform_real_distribution<float> u(0.02f, 0.3f);
  c.slopes.resize(size_t(c.B * c.Hq));
  for (float& x : c.slopes) {
    x = u(rng);
  }
  c.features.slopes = &c.slopes;
  c.features.slope_batch_stride = c.Hq;
  c.reference();
  check_variants(c, varlen_configs());
}

TEST_CASE("the attention GPU reference kernel reads varlen offsets as the tuner packs them") {
  context();
  cuda::DeviceInfo dev = cuda::query_device(0);
  const Problem p = attn().make_problem(
      parse_fields("B=5,Hq=4,Hkv=2,S=300,D=72,causal=1,lse=1,varlen=1,Tq=900,Tk=900", "shape"));
  const std::vector<TensorSpec> specs = attn().tensors(p);
  // The tuner's own inputs (testbed): random q/k/v, the offsets as the op gives them.
  std::vector<cuda::DeviceBuffer> buffers;
  std::vector<CUdeviceptr> ptrs;
  std::mt19937_64 rng(7);
  std::vector<HostTensor> hosts;
  for (const TensorSpec& s : specs) {
    buffers.emplace_back(s.bytes());
    ptrs.push_back(buffers.back().get());
    HostTensor h(s.dtype, s.elements);
    if (!s.values.empty()) {
      std::memcpy(h.bytes.data(), s.values.data(), s.values.size() * 4);
    } else if (!s.output) {
      h.randomize(rng, s.lo, s.hi);
    }
    buffers.back().upload(h.bytes.data(), h.bytes.size());
    hosts.push_back(std::move(h));
  }
  const std::vector<int>& cu_q = specs[specs.size() - 2].values;
  const std::vector<int>& cu_k = specs[specs.size() - 1].values;
  const Reference ref = attention_reference_varlen(hosts[0], hosts[1], hosts[2], cu_q, cu_k, 4, 2,
                                                   72, true, 1.0 / std::sqrt(72.0));
  cuda::DeviceBuffer ro(ref.o.size() * 4), rl(ref.lse.size() * 4);
  cuda::CompileRequest r;
  r.source = template_source(attn().reference_path());
  r.name = attn().reference_path();
  r.arch = dev.arch();
  r.options = base_compile_options();
  auto compiled = cuda::compile(r);
  REQUIRE_MESSAGE(compiled.ok(), (compiled.ok() ? "" : compiled.failure().detail));
  cuda::Module m = cuda::load_module(compiled->binary);
  ArgPack args;
  attn().pack_reference(p, ptrs, {ro.get(), rl.get()}, args);
  launch_and_wait(cuda::get_function(m, attn().reference_kernel(p).c_str()),
                  attn().reference_geometry(p), args, "reference " + p.key());
  HostTensor o(DType::f32, ref.o.size()), l(DType::f32, ref.lse.size());
  ro.download(o.bytes.data(), o.bytes.size());
  rl.download(l.bytes.data(), l.bytes.size());
  const std::vector<double> got_o = values(o), got_l = values(l);
  CHECK(rel_err(got_o, ref.o) <= 1e-5);
  CHECK(rel_err(got_l, ref.lse) <= 1e-5);
}

TEST_CASE("the runtime runs varlen attention from the C struct; calls of one bucket share a plan") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  VarlenCase c({50, 0, 120, 7}, {50, 3, 160, 0}, 8, 2, 64, true, DType::f16, rng);
  DeviceTensor q(c.q), k(c.k), v(c.v);
  HostTensor out(c.dtype, c.q.n), lse(DType::f32, size_t(c.Hq) * c.Tq);
  DeviceTensor o(out), l(lse);
  auto packed = [&](CUdeviceptr p, int64_t tokens, int64_t heads) {
    return tensor(reinterpret_cast<const void*>(p), ElementType::fp16, {tokens, heads, c.D});
  };
  AttentionArgs a{};
  a.q = packed(q.get(), c.Tq, c.Hq);
  a.k = packed(k.get(), c.Tk, c.Hkv);
  a.v = packed(v.get(), c.Tk, c.Hkv);
  a.o = packed(o.get(), c.Tq, c.Hq);
  a.lse = tensor(reinterpret_cast<const void*>(l.get()), ElementType::fp32, {c.Hq, c.Tq});
  a.causal = 1;
  a.cu_seqlens_q = tensor(reinterpret_cast<const void*>(c.cu_q_dev.get()), ElementType::int32,
                          {int64_t(c.cu_q.size())});
  a.cu_seqlens_k = tensor(reinterpret_cast<const void*>(c.cu_k_dev.get()), ElementType::int32,
                          {int64_t(c.cu_k.size())});
  a.max_seqlen_q = c.max_q;
  a.max_seqlen_k = c.max_k;
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::default_variant;
  Runtime rt(ro);
  CHECK(rt.select_attention(a).source == "default");
  rt.attention(a);
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  o.download(out);
  l.download(lse);
  const std::vector<double> got_o = values(out);
  CHECK(rel_err(got_o, c.ref.o) <= attn().tolerance(c.problem));
  CHECK(rel_err(values(lse), c.ref.lse) <= 1e-3);
  CHECK(c.empty_rows_nonzero(got_o) == 0);
  SUBCASE("a bad offsets dtype is refused before launching") {
    AttentionArgs bad = a;
    bad.cu_seqlens_k.dtype = AUTOTUNE_FP32;
    CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("cu_seqlens_k is fp32"), Error);
    bad = a;
    bad.cu_seqlens_k = Tensor{};
    CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("cu_seqlens_k implies varlen=0"),
                         Error);
  }
}

TEST_CASE("a Hopper varlen plan reads each call's own token count: one buffer, two totals in "
          "one bucket") {
  // The plan of a bucket keeps its tensor maps while the pointer and strides stay: a buffer
  // the caching allocator hands out again may hold another number of tokens, whose rows
  // past the first call's extent a stale map would read as zeros.
  context();
  if (cuda::query_device(0).arch() != "sm_90a") {
    MESSAGE("skipped: not a Hopper GPU (the family=wgmma kernels need sm_90a)");
    return;
  }
  std::mt19937_64 rng(std::random_device{}());
  // Both in the bucket B = 3, Sq = Sk = 256, Tq = Tk = 512 (totals 300 and 460 tokens).
  VarlenCase small({100, 200, 0}, {100, 200, 0}, 4, 4, 128, false, DType::bf16, rng);
  VarlenCase large({200, 230, 30}, {200, 230, 30}, 4, 4, 128, false, DType::bf16, rng);
  REQUIRE(small.problem.key() == large.problem.key());
  // One set of buffers, sized for the larger call.
  DeviceTensor q(large.q), k(large.k), v(large.v);
  HostTensor out(large.dtype, large.q.n), lse(DType::f32, size_t(large.Hq) * large.Tq);
  DeviceTensor o(out), l(lse);
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::pin;
  ro.pinned = "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
              "family=wgmma_overlap";
  Runtime rt(ro);
  for (VarlenCase* c : {&small, &large, &small, &large}) {
    CAPTURE(c->Tq);
    // This call's inputs into the shared buffers' first rows.
    q.buffer.upload(c->q.bytes.data(), c->q.bytes.size());
    k.buffer.upload(c->k.bytes.data(), c->k.bytes.size());
    v.buffer.upload(c->v.bytes.data(), c->v.bytes.size());
    auto packed = [&](CUdeviceptr p, int64_t tokens, int64_t heads) {
      return tensor(reinterpret_cast<const void*>(p), ElementType::bf16, {tokens, heads, c->D});
    };
    AttentionArgs a{};
    a.q = packed(q.get(), c->Tq, c->Hq);
    a.k = packed(k.get(), c->Tk, c->Hkv);
    a.v = packed(v.get(), c->Tk, c->Hkv);
    a.o = packed(o.get(), c->Tq, c->Hq);
    a.cu_seqlens_q = tensor(reinterpret_cast<const void*>(c->cu_q_dev.get()), ElementType::int32,
                            {int64_t(c->cu_q.size())});
    a.cu_seqlens_k = tensor(reinterpret_cast<const void*>(c->cu_k_dev.get()), ElementType::int32,
                            {int64_t(c->cu_k.size())});
    a.max_seqlen_q = c->max_q;
    a.max_seqlen_k = c->max_k;
    rt.attention(a);
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
    HostTensor got(c->dtype, c->q.n);
    o.download(out);
    for (size_t i = 0; i < got.n; ++i) {
      got.set(i, out.get(i));
    }
    CHECK(rel_err(values(got), c->ref.o) <= attn().tolerance(c->problem));
  }
}
