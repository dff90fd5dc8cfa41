// GPU tests for attention: variants of the whole space (a rotating share per
// shape, so that every configuration runs somewhere) against a float64 CPU
// reference over dtypes, head dims, causal and not, Sq != Sk both ways, GQA/MQA,
// both layouts, LSE, and sizes that are not multiples of any tile; causal Sq > Sk
// (rows that see no key: O exactly 0, LSE -inf) for single and split-KV variants,
// launched repeatedly, through the GPU reference and through the runtime; the
// runtime with arbitrary strides; the tune -> store -> dispatch round trip; sliding
// windows, softcap, ALiBi and head dims off 64/128/256, through the op, the GPU
// reference and the runtime.
#include "attention_reference.hpp"
#include "gpu_support.hpp"

#include "cache/database.hpp"
#include "runtime/dispatch/autotune.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/attention.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"
#include "tuner/compile.hpp"
#include "tuner/progress.hpp"
#include "tuner/tuner.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <limits>

using namespace autotune;
using namespace autotune::test;
namespace fs = std::filesystem;

namespace {

// One shape with contiguous tensors in its problem's layout.
struct AttnCase {
  Problem problem;
  int B, Hq, Hkv, Sq, Sk, D;
  bool causal, lse;
  DType dtype;
  Layout qs, ks;
  HostTensor q, k, v;
  Reference ref;
  Features features;         // the call's window, softcap and slopes (none by default)
  std::vector<float> slopes; // ALiBi: [Hq] or [B, Hq]

  AttnCase(const std::string& shape, std::mt19937_64& rng)
      : problem(attn().make_problem(parse_fields(shape, "shape"))), B(int(problem.get_int("B"))),
        Hq(int(problem.get_int("Hq"))), Hkv(int(problem.get_int("Hkv"))),
        Sq(int(problem.get_int("Sq"))), Sk(int(problem.get_int("Sk"))),
        D(int(problem.get_int("D"))), causal(problem.get_int("causal") != 0),
        lse(problem.get_int("lse") != 0), dtype(parse_dtype(problem.get("dtype"), "dtype")),
        qs(layout(Hq, Sq)), ks(layout(Hkv, Sk)), q(dtype, size_t(B) * Hq * Sq * D),
        k(dtype, size_t(B) * Hkv * Sk * D), v(dtype, size_t(B) * Hkv * Sk * D) {
    q.randomize(rng, -2, 2);
    k.randomize(rng, -1, 1);
    v.randomize(rng, -1, 1);
    ref = attention_reference(q, k, v, qs, ks, ks, B, Hq, Hkv, Sq, Sk, D, causal,
                              1.0 / std::sqrt(double(D)));
  }

  // Scales key j by 1 + gain * (Sk - 1 - j) / Sk: the kernels visit key tiles from the
  // last to the first, so each row's scores rise across the tiles by far more than the
  // 2^8 that the lazy rescale lets P grow before it moves a row's reference max.
  void ramp_keys(double gain) {
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < Hkv; ++h) {
        for (int j = 0; j < Sk; ++j) {
          const double f = 1.0 + gain * double(Sk - 1 - j) / Sk;
          for (int d = 0; d < D; ++d) {
            const size_t i = size_t(b * ks.batch + h * ks.head + j * ks.seq + d);
            k.set(i, float(k.get(i) * f));
          }
        }
      }
    }
    ref = attention_reference(q, k, v, qs, ks, ks, B, Hq, Hkv, Sq, Sk, D, causal,
                              1.0 / std::sqrt(double(D)), features);
  }

  // The call's features (slope_form 0: no ALiBi, 1: slopes [Hq], 2: [B, Hq], drawn
  // from [0.02, 0.3]); the reference follows them.
  void set_features(int left, int right, double softcap, int slope_form, std::mt19937_64& rng) {
    features = Features{};
    features.left = left;
    features.right = right;
    features.softcap = softcap;
    slopes.clear();
    if (slope_form != 0) {
      std::uniform_real_distribution<float> u(0.02f, 0.3f);
      slopes.resize(size_t(slope_form == 2 ? B * Hq : Hq));
      for (float& x : slopes) {
        x = u(rng);
      }
      features.slopes = &slopes;
      features.slope_batch_stride = slope_form == 2 ? Hq : 0;
    }
    ref = attention_reference(q, k, v, qs, ks, ks, B, Hq, Hkv, Sq, Sk, D, causal,
                              1.0 / std::sqrt(double(D)), features);
  }

  // The features the tuner runs a problem with (runtime/ops/attention.cpp): a window of
  // Sk/4 keys left and Sk/8 right (0 when causal), softcap 5, slopes [Hq].
  void set_tuning_features(std::mt19937_64& rng) {
    const bool window = problem.fields.index("window") >= 0;
    const bool softcap = problem.fields.index("softcap") >= 0;
    const bool alibi = problem.fields.index("alibi") >= 0;
    set_features(window ? (Sk + 3) / 4 : -1, window ? (causal ? 0 : (Sk + 7) / 8) : -1,
                 softcap ? 5.0 : 0.0, alibi ? 1 : 0, rng);
  }

  // O elements of rows the reference gives no key (LSE -inf) that are not exactly 0.
  size_t empty_rows_nonzero(const std::vector<double>& o) const {
    size_t wrong = 0;
    for (size_t row = 0; row < ref.lse.size(); ++row) {
      if (std::isinf(ref.lse[row])) {
        for (int d = 0; d < D; ++d) {
          wrong += o[row * size_t(D) + size_t(d)] != 0.0;
        }
      }
    }
    return wrong;
  }

  Layout layout(long long heads, long long seq) const {
    AttentionOp::Strides s = AttentionOp::contiguous_strides(problem, heads, seq);
    return {s.batch, s.head, s.seq};
  }

  // Rows of each head that see no key: under the causal mask (bottom-right aligned)
  // query i sees keys j <= i + Sk - Sq, none when i < Sq - Sk.
  int rows_without_keys() const { return causal ? std::max(0, Sq - Sk) : 0; }

  // O elements (logical order) of the rows that see no key that are not exactly 0,
  // and LSE entries of those rows that are not -inf (lse_out may be null).
  size_t rows_without_keys_wrong(const std::vector<double>& o, const HostTensor* lse_out) const {
    size_t wrong = 0;
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < Hq; ++h) {
        for (int i = 0; i < rows_without_keys(); ++i) {
          const size_t row = (size_t(b) * Hq + h) * Sq + size_t(i);
          for (int d = 0; d < D; ++d) {
            wrong += o[row * D + size_t(d)] != 0.0;
          }
          if (lse_out) {
            wrong += lse_out->get(row) != -std::numeric_limits<float>::infinity();
          }
        }
      }
    }
    return wrong;
  }

  // The output (stored in the problem's layout) in the reference's logical order.
  std::vector<double> logical(const HostTensor& o) const {
    return logical_order(o, qs, B, Hq, Sq, D);
  }
};

// The split-KV arrival counters (the workspace's first words) that are not zero.
size_t nonzero_counters(const DeviceTensor& ws, HostTensor& ws_host, const Problem& problem) {
  ws.download(ws_host);
  size_t nonzero = 0;
  for (size_t j = 0; j < AttentionOp::split_counter_bytes(problem) / 4; ++j) {
    uint32_t c;
    std::memcpy(&c, &ws_host.bytes[j * 4], 4);
    nonzero += c != 0;
  }
  return nonzero;
}

// Nonzero bytes anywhere in a split-KV workspace (every launch leaves all of it zero: the
// merge clears the partials it read as well as the counters).
size_t nonzero_bytes(const DeviceTensor& ws, HostTensor& ws_host) {
  ws.download(ws_host);
  return size_t(std::count_if(ws_host.bytes.begin(), ws_host.bytes.end(),
                              [](unsigned char b) { return b != 0; }));
}

fs::path temp_db() {
  return fs::temp_directory_path() /
         ("autotune-gpu-attn-" + std::to_string(::getpid()) + "-" + std::to_string(rand()) + ".db");
}

} // namespace

TEST_CASE("attention variants match a float64 reference over every feature") {
  context();
  cuda::DeviceInfo dev = cuda::query_device(0);
  Space space = parse_space(template_file(attn().space_path()), attn().space_path());
  std::mt19937_64 rng(std::random_device{}());
  // Which variants run on a shape: single-split ones, split-KV ones (where the keys
  // outnumber the queries), or both (causal Sq > Sk, where split-KV blocks and splits
  // may have no key at all); each shape takes every `share`-th candidate of its
  // family, rotating with the shape, plus the default variant.
  enum class Family { single, split, both };
  struct VariantShape {
    const char* shape;
    Family family;
    int share;
  };
  const VariantShape shapes[] = {
      {"B=2,H=3,S=200,D=64,dtype=bf16", Family::single, 4},                 // tails everywhere
      {"B=1,H=2,S=333,D=128,causal=1,dtype=fp16,lse=1", Family::single, 4}, // causal Sq = Sk
      {"B=2,Hq=4,Hkv=2,Sq=77,Sk=301,D=128,causal=1,dtype=bf16,layout=bhsd", Family::split,
       4}, // GQA, Sq < Sk
      {"B=1,Hq=4,Hkv=1,Sq=300,Sk=90,D=64,causal=1,dtype=fp16,lse=1", Family::both,
       8}, // MQA, Sq > Sk: 210 rows without keys, whole query blocks of them
      {"B=1,Hq=2,Hkv=2,Sq=129,Sk=513,D=64,dtype=fp16,layout=bhsd,lse=1", Family::single,
       4},                                                                // Sq != Sk, not causal
      {"B=1,H=2,S=130,D=256,causal=1,dtype=bf16", Family::single, 4},     // head dim 256
      {"B=3,Hq=6,Hkv=3,Sq=1,Sk=1000,D=128,dtype=bf16", Family::split, 4}, // decoding
      {"B=1,H=2,S=700,D=128,dtype=fp16,lse=1", Family::single,
       4}, // scores rising across tiles (ramp_keys)
      {"B=2,Hq=4,Hkv=2,Sq=300,Sk=100,D=128,causal=1,dtype=bf16,lse=1,layout=bhsd", Family::both,
       8}, // GQA, Sq > Sk
      {"B=1,Hq=2,Hkv=1,Sq=129,Sk=64,D=256,causal=1,dtype=bf16", Family::both,
       8}, // Sq > Sk at head dim 256, no LSE
      {"B=1,Hq=3,Hkv=1,Sq=1000,Sk=1,D=64,causal=1,dtype=fp16,lse=1", Family::both,
       8}, // one key: only the last row sees it
      {"B=2,H=2,Sq=200,Sk=199,D=64,causal=1,dtype=bf16,lse=1", Family::single,
       4}, // only row 0 sees no key, inside a block whose other rows do
      {"B=2,Hq=8,Hkv=2,Sq=5,Sk=700,D=64,causal=1,dtype=fp16,lse=1", Family::both,
       8}, // several queries, GQA: 4 heads x 5 queries as 20 rows of each K/V head
  };
  constexpr size_t k_ramp_shape = 7;
  std::vector<Config> all = space.enumerate();
  size_t shape_index = 0;
  for (const VariantShape& vs : shapes) {
    const char* shape = vs.shape;
    AttnCase k(shape, rng);
    if (shape_index == k_ramp_shape) {
      k.ramp_keys(12.0);
    }
    std::vector<Config> configs;
    std::vector<VariantSource> sources;
    size_t candidate = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string* sp = find_field(all[i], "splits");
      const bool split = sp && *sp != "1";
      const bool in_family = vs.family == Family::both || split == (vs.family == Family::split);
      const bool is_default = all[i] == space.default_config;
      if (!in_family && !is_default) {
        continue;
      }
      // A rotating share of the candidates per shape, plus the default variant.
      bool pick = (in_family && candidate++ % size_t(vs.share) == shape_index % size_t(vs.share)) ||
                  is_default;
      if (pick && attn().check(all[i], k.problem, dev.arch())) {
        configs.push_back(all[i]);
        sources.push_back(describe_variant(attn(), all[i], k.problem, dev.arch()));
      }
    }
    ++shape_index;
    REQUIRE(!configs.empty());
    std::vector<CompileJob> jobs;
    for (const auto& s : sources) {
      jobs.push_back({&s});
    }
    compile_all(jobs, default_jobs(), [](CompileJob&, size_t) {});
    DeviceTensor q(k.q), kk(k.k), v(k.v);
    HostTensor out(k.dtype, k.q.n);
    HostTensor lse(DType::f32, size_t(k.B) * k.Hq * k.Sq);
    // The split-KV workspace the op asks for, zero-filled once: every launch must
    // leave its counters at zero for the next variant.
    std::vector<TensorSpec> specs = attn().tensors(k.problem);
    HostTensor ws_host(DType::f32, specs.back().name == "workspace" ? specs.back().elements : 1);
    DeviceTensor ws(ws_host);
    size_t checked = 0;
    double worst = 0;
    for (size_t i = 0; i < configs.size(); ++i) {
      CAPTURE(std::string(shape));
      CAPTURE(sources[i].config_id);
      REQUIRE_MESSAGE(jobs[i].output.ok(),
                      (jobs[i].output.ok() ? "" : jobs[i].output.failure().detail));
      cuda::Module m = cuda::load_module(jobs[i].output->binary);
      CUfunction f = cuda::get_function(m, attn().kernel_name());
      out.poison();
      lse.poison();
      DeviceTensor o(out), l(lse);
      std::vector<CUdeviceptr> ptrs = {q.get(), kk.get(), v.get(), o.get()};
      if (k.lse) {
        ptrs.push_back(l.get());
      }
      if (specs.back().name == "workspace") {
        ptrs.push_back(ws.get());
      }
      ArgPack args;
      attn().pack(configs[i], k.problem, ptrs, args);
      launch_and_wait(f, attn().geometry(configs[i], k.problem), args,
                      k.problem.key() + " " + sources[i].config_id);
      o.download(out);
      const std::vector<double> got_o = k.logical(out);
      double err = rel_err(got_o, k.ref.o);
      if (const std::string* sp = find_field(configs[i], "splits"); sp && *sp != "1") {
        // Every split-KV launch leaves the workspace (shared by all variants) all zero
        // for the next one: the arrival counters and the partials.
        CHECK(nonzero_counters(ws, ws_host, k.problem) == 0);
        CHECK(nonzero_bytes(ws, ws_host) == 0);
      }
      CHECK(err <= attn().tolerance(k.problem));
      worst = std::max(worst, err);
      if (k.lse) {
        l.download(lse);
        std::vector<double> got = values(lse);
        CHECK(rel_err(got, k.ref.lse) <= 1e-4);
      }
      // Rows that see no key: O exactly 0 and LSE -inf, not merely close.
      CHECK(k.rows_without_keys_wrong(got_o, k.lse ? &lse : nullptr) == 0);
      ++checked;
    }
    MESSAGE(shape << ": " << checked << " variants checked, worst rel err " << worst);
  }
}

TEST_CASE("causal attention with Sq > Sk: rows that see no key are exactly 0, every launch") {
  // FlashAttention's bottom-right causal mask: query i sees keys j <= i + Sk - Sq, so
  // rows i < Sq - Sk see none; flash-attn gives them O = 0 (its tests' attention_ref
  // zero-fills them) and the op documents LSE = -inf. Whole query blocks of such rows
  // take the kernel's early exit (split 0 alone, with key splits); a block that
  // straddles Sq - Sk goes through the key loop. Each variant runs several times
  // with its outputs poisoned on the device before each launch, so that a write
  // racing another (a block's rows are stored by other warps) shows up.
  context();
  cuda::DeviceInfo dev = cuda::query_device(0);
  std::mt19937_64 rng(std::random_device{}());
  const char* shapes[] = {
      "B=1,Hq=4,Hkv=2,Sq=300,Sk=100,D=64,causal=1,dtype=bf16,lse=1",
      "B=2,Hq=2,Hkv=1,Sq=129,Sk=64,D=128,causal=1,dtype=fp16,lse=1,layout=bhsd",
      "B=1,Hq=2,Sq=1000,Sk=1,D=256,causal=1,dtype=bf16",
      "B=1,Hq=8,Hkv=2,Sq=77,Sk=13,D=128,causal=1,dtype=bf16,lse=1",
      "B=2,H=2,Sq=1024,Sk=1023,D=64,causal=1,dtype=fp16,lse=1", // row 0 alone
      "B=1,Hq=4,Hkv=2,Sq=300,Sk=100,D=64,dtype=bf16,lse=1",     // not causal: all keys
  };
  // The default variant, each warp shape (16, 32, 48 and 64 rows), every stage count,
  // Q in registers, padded rows, and 2, 4 and 8 key splits.
  const char* configs[] = {
      "block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem,splits=1",
      "block_m=128,block_n=32,warps=4,stages=2,swizzle=pad,q=regs,splits=1",
      "block_m=128,block_n=64,warps=8,stages=3,swizzle=xor,q=smem,splits=1",
      "block_m=192,block_n=48,warps=4,stages=2,swizzle=xor,q=smem,splits=1",
      "block_m=256,block_n=32,warps=4,stages=1,swizzle=xor,q=smem,splits=1",
      "block_m=64,block_n=32,warps=4,stages=1,swizzle=xor,q=regs,splits=2",
      "block_m=128,block_n=64,warps=8,stages=2,swizzle=pad,q=smem,splits=4",
      "block_m=64,block_n=16,warps=4,stages=3,swizzle=xor,q=smem,splits=8",
  };
  constexpr int k_launches = 8;
  for (const char* shape : shapes) {
    CAPTURE(std::string(shape));
    AttnCase k(shape, rng);
    std::vector<Config> runnable;
    std::vector<VariantSource> sources;
    for (const char* c : configs) {
      Config config = parse_fields(c, "config");
      if (attn().check(config, k.problem, dev.arch())) {
        runnable.push_back(config);
        sources.push_back(describe_variant(attn(), config, k.problem, dev.arch()));
      }
    }
    // Single-split and split-KV variants on every shape.
    size_t split_variants = 0;
    for (const Config& c : runnable) {
      split_variants += *find_field(c, "splits") != "1";
    }
    REQUIRE(split_variants >= 1);
    REQUIRE(runnable.size() > split_variants);
    std::vector<CompileJob> jobs;
    for (const auto& src : sources) {
      jobs.push_back({&src});
    }
    compile_all(jobs, default_jobs(), [](CompileJob&, size_t) {});
    DeviceTensor q(k.q), kk(k.k), v(k.v);
    HostTensor out(k.dtype, k.q.n);
    HostTensor lse(DType::f32, size_t(k.B) * k.Hq * k.Sq);
    DeviceTensor o(out), l(lse);
    std::vector<TensorSpec> specs = attn().tensors(k.problem);
    REQUIRE(specs.back().name == "workspace");
    HostTensor ws_host(DType::f32, specs.back().elements);
    DeviceTensor ws(ws_host);
    for (size_t i = 0; i < runnable.size(); ++i) {
      CAPTURE(sources[i].config_id);
      REQUIRE_MESSAGE(jobs[i].output.ok(),
                      (jobs[i].output.ok() ? "" : jobs[i].output.failure().detail));
      cuda::Module m = cuda::load_module(jobs[i].output->binary);
      CUfunction f = cuda::get_function(m, attn().kernel_name());
      std::vector<CUdeviceptr> ptrs = {q.get(), kk.get(), v.get(), o.get()};
      if (k.lse) {
        ptrs.push_back(l.get());
      }
      ptrs.push_back(ws.get());
      ArgPack args;
      attn().pack(runnable[i], k.problem, ptrs, args);
      const auto& d = cuda::driver();
      size_t wrong_rows = 0;
      double worst = 0, worst_lse = 0;
      for (int launch_index = 0; launch_index < k_launches; ++launch_index) {
        // Quiet NaN in every element of O and LSE.
        const unsigned short nan16 = k.dtype == DType::f16 ? 0x7e00 : 0x7fc0;
        AUTOTUNE_CU(d.cuMemsetD16Async(o.get(), nan16, out.n, nullptr));
        AUTOTUNE_CU(d.cuMemsetD32Async(l.get(), 0x7fc00000u, lse.n, nullptr));
        launch_and_wait(f, attn().geometry(runnable[i], k.problem), args,
                        k.problem.key() + " " + config_id(runnable[i]));
        o.download(out);
        l.download(lse);
        const std::vector<double> got_o = k.logical(out);
        worst = std::max(worst, rel_err(got_o, k.ref.o));
        if (k.lse) {
          std::vector<double> got = values(lse);
          worst_lse = std::max(worst_lse, rel_err(got, k.ref.lse));
        }
        wrong_rows += k.rows_without_keys_wrong(got_o, k.lse ? &lse : nullptr);
      }
      CHECK(worst <= attn().tolerance(k.problem));
      CHECK(worst_lse <= 1e-4);
      CHECK(wrong_rows == 0);
      // The arrival counters are back at zero (blocks without keys never touch them).
      CHECK(nonzero_counters(ws, ws_host, k.problem) == 0);
    }
    MESSAGE(shape << ": " << runnable.size() << " variants x " << k_launches << " launches, "
                  << k.rows_without_keys() << " rows per head without keys");
  }
}

TEST_CASE("the attention GPU reference kernel agrees with the float64 CPU reference, rows "
          "without keys included") {
  // The tuner checks every variant against this kernel: it must define causal Sq > Sk
  // as the CPU reference does (O = 0 and LSE = -inf where a row sees no key).
  context();
  cuda::DeviceInfo dev = cuda::query_device(0);
  cuda::CompileRequest r;
  r.source = template_source(attn().reference_path());
  r.name = attn().reference_path();
  r.arch = dev.arch();
  r.options = base_compile_options();
  auto compiled = cuda::compile(r);
  REQUIRE_MESSAGE(compiled.ok(), (compiled.ok() ? "" : compiled.failure().detail));
  cuda::Module m = cuda::load_module(compiled->binary);
  std::mt19937_64 rng(std::random_device{}());
  for (const char* shape : {"B=1,Hq=4,Hkv=2,Sq=300,Sk=100,D=64,causal=1,dtype=bf16,lse=1",
                            "B=2,Hq=2,Hkv=1,Sq=129,Sk=64,D=256,causal=1,dtype=fp16,lse=1,"
                            "layout=bhsd",
                            "B=1,Hq=2,Sq=100,Sk=1,D=128,causal=1,dtype=bf16,lse=1",
                            "B=1,Hq=2,Sq=77,Sk=301,D=128,causal=1,dtype=fp16,lse=1",
                            "B=1,Hq=2,Sq=300,Sk=100,D=64,dtype=bf16,lse=1"}) {
    CAPTURE(std::string(shape));
    AttnCase k(shape, rng);
    DeviceTensor q(k.q), kk(k.k), v(k.v);
    HostTensor o_ref(DType::f32, k.q.n), lse_ref(DType::f32, size_t(k.B) * k.Hq * k.Sq);
    o_ref.poison();
    lse_ref.poison();
    DeviceTensor o(o_ref), l(lse_ref);
    ArgPack args;
    attn().pack_reference(k.problem, {q.get(), kk.get(), v.get()}, {o.get(), l.get()}, args);
    launch_and_wait(cuda::get_function(m, attn().reference_kernel(k.problem).c_str()),
                    attn().reference_geometry(k.problem), args, "reference " + k.problem.key());
    o.download(o_ref);
    l.download(lse_ref);
    const std::vector<double> got_o = k.logical(o_ref);
    CHECK(rel_err(got_o, k.ref.o) <= 1e-4);
    std::vector<double> got_lse = values(lse_ref);
    CHECK(rel_err(got_lse, k.ref.lse) <= 1e-5);
    CHECK(k.rows_without_keys_wrong(got_o, &lse_ref) == 0);
  }
}

TEST_CASE("the runtime runs causal attention with Sq > Sk as flash-attn defines it") {
  // As PyTorch callers of flash_attn_func pass it: [B, S, H, D], GQA, LSE; through the
  // default variant and through a pinned split-KV variant with its workspace.
  context();
  std::mt19937_64 rng(std::random_device{}());
  const char* shape = "B=2,Hq=4,Hkv=2,Sq=300,Sk=100,D=128,causal=1,dtype=bf16,lse=1";
  AttnCase k(shape, rng);
  DeviceTensor q(k.q), kk(k.k), v(k.v);
  HostTensor out(DType::bf16, k.q.n), lse(DType::f32, size_t(k.B) * k.Hq * k.Sq);
  DeviceTensor o(out), l(lse);
  AttentionArgs a{};
  // AttnCase's layout=bshd: contiguous [B, S, H, D], viewed as [B, H, S, D].
  auto view = [](CUdeviceptr p, int64_t b, int64_t h, int64_t s, int64_t d) {
    return tensor(reinterpret_cast<const void*>(p), ElementType::bf16, {b, h, s, d},
                  {s * h * d, d, h * d, 1});
  };
  a.q = view(q.get(), k.B, k.Hq, k.Sq, k.D);
  a.k = view(kk.get(), k.B, k.Hkv, k.Sk, k.D);
  a.v = view(v.get(), k.B, k.Hkv, k.Sk, k.D);
  a.o = view(o.get(), k.B, k.Hq, k.Sq, k.D);
  a.lse = tensor(reinterpret_cast<const void*>(l.get()), ElementType::fp32, {k.B, k.Hq, k.Sq});
  a.causal = 1;
  auto run_and_check = [&](Runtime& rt) {
    const uint64_t need = rt.attention_workspace_size(a);
    HostTensor ws_host(DType::f32, size_t(need / 4) + 1);
    DeviceTensor ws(ws_host);
    a.workspace = need ? reinterpret_cast<void*>(ws.get()) : nullptr;
    a.workspace_bytes = need;
    for (int i = 0; i < 4; ++i) {
      out.poison();
      lse.poison();
      o.buffer.upload(out.bytes.data(), out.bytes.size());
      l.buffer.upload(lse.bytes.data(), lse.bytes.size());
      rt.attention(a);
      AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
      o.download(out);
      l.download(lse);
      const std::vector<double> got_o = k.logical(out);
      CHECK(rel_err(got_o, k.ref.o) <= attn().tolerance(k.problem));
      std::vector<double> got_lse = values(lse);
      CHECK(rel_err(got_lse, k.ref.lse) <= 1e-4);
      CHECK(k.rows_without_keys_wrong(got_o, &lse) == 0);
    }
    a.workspace = nullptr;
    a.workspace_bytes = 0;
  };
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  SUBCASE("the default variant") {
    ro.policy = Policy::default_variant;
    Runtime rt(ro);
    CHECK(rt.select_attention(a).source == "default");
    run_and_check(rt);
  }
  SUBCASE("a split-KV variant") {
    ro.policy = Policy::pin;
    ro.pinned = "block_m=64,block_n=32,warps=4,stages=2,swizzle=xor,q=smem,splits=2";
    Runtime rt(ro);
    CHECK(rt.select_attention(a).source == "pinned");
    CHECK(rt.attention_workspace_size(a) > 0);
    run_and_check(rt);
  }
}

TEST_CASE("the runtime's default attention variant takes arbitrary strides") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  // Q, K, V interleaved in one packed [B, S, 3, H, D] tensor (a fused QKV
  // projection's output), O in [B, H, S, D]: neither is a plain layout.
  const int B = 2, H = 4, S = 150, D = 128;
  HostTensor qkv(DType::bf16, size_t(B) * S * 3 * H * D);
  qkv.randomize(rng, -1.5, 1.5);
  Layout l{(long long)S * 3 * H * D, D, 3LL * H * D};
  auto ref = attention_reference(qkv, qkv, qkv, l, l, l, B, H, H, S, S, D, true, 0.1);
  // The reference above read Q, K and V at the same offsets; shift K and V by one
  // and two H*D blocks through the base pointers below, so recompute with views.
  HostTensor qh(DType::bf16, size_t(B) * H * S * D), kh(qh), vh(qh);
  for (int b = 0; b < B; ++b) {
    for (int s = 0; s < S; ++s) {
      for (int h = 0; h < H; ++h) {
        for (int d = 0; d < D; ++d) {
          size_t src = size_t(b * l.batch + s * l.seq + h * D + d);
          size_t dst = ((size_t(b) * H + h) * S + s) * D + d;
          qh.set(dst, qkv.get(src));
          kh.set(dst, qkv.get(src + size_t(H) * D));
          vh.set(dst, qkv.get(src + 2 * size_t(H) * D));
        }
      }
    }
  }
  Layout c{(long long)H * S * D, (long long)S * D, D};
  ref = attention_reference(qh, kh, vh, c, c, c, B, H, H, S, S, D, true, 0.1);
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::default_variant; // the [default] variant itself
  Runtime rt(ro);
  DeviceTensor packed(qkv);
  HostTensor out(DType::bf16, size_t(B) * H * S * D);
  out.poison();
  DeviceTensor o(out);
  HostTensor lse(DType::f32, size_t(B) * H * S);
  lse.poison();
  DeviceTensor ld(lse);
  AttentionArgs a{};
  const size_t esize = 2;
  auto view = [&](CUdeviceptr base, std::initializer_list<int64_t> strides) {
    return tensor(reinterpret_cast<const void*>(base), ElementType::bf16, {B, H, S, D}, strides);
  };
  a.q = view(packed.get(), {l.batch, l.head, l.seq, 1});
  a.k = view(packed.get() + size_t(H) * D * esize, {l.batch, l.head, l.seq, 1});
  a.v = view(packed.get() + 2 * size_t(H) * D * esize, {l.batch, l.head, l.seq, 1});
  a.o = view(o.get(), {}); // contiguous [B, H, S, D]
  a.lse = tensor(reinterpret_cast<const void*>(ld.get()), ElementType::fp32, {B, H, S});
  a.causal = 1;
  a.scale = 0.1;
  CHECK(rt.select_attention(a).source == "default");
  rt.attention(a);
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  o.download(out);
  std::vector<double> got = values(out);
  CHECK(rel_err(got, ref.o) <= 1e-2);
  ld.download(lse);
  std::vector<double> got_lse = values(lse);
  CHECK(rel_err(got_lse, ref.lse) <= 1e-4);

  SUBCASE("bad arguments are refused before launching") {
    AttentionArgs bad = a;
    SUBCASE("a missing output") {
      bad.o.data = nullptr;
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("o is required"), Error);
    }
    SUBCASE("k with another head dim") {
      bad.k.shape[3] = D / 2;
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("k has shape"), Error);
    }
    SUBCASE("v shorter than k") {
      bad.v.shape[2] = S - 1;
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("v has shape"), Error);
    }
    SUBCASE("k and v of different dtypes") {
      bad.v.dtype = AUTOTUNE_FP16;
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("must have the dtype of q"), Error);
    }
    SUBCASE("a strided head dimension") {
      bad.q.strides[3] = 2;
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("contiguous last dimension"),
                           Error);
    }
    SUBCASE("host memory") {
      std::vector<uint16_t> host(size_t(B) * H * S * D);
      bad.q.data = host.data();
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("q is not GPU memory"), Error);
    }
    rt.attention(a); // the context is healthy
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  }
}

TEST_CASE("the runtime runs K and V broadcast by a zero stride (expand) as the bcast=1 problem, "
          "on a family that reads them") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  const int B = 3, Hq = 8, Hkv = 4, S = 300, D = 128;
  HostTensor qh(DType::bf16, size_t(B) * S * Hq * D);
  qh.randomize(rng, -1.5, 1.5);
  // K and V: one [S, Hkv, D] sequence expanded over the batch (batch stride 0), or one
  // head of [B, S, 1, D] expanded over the Hkv heads (head stride 0).
  for (const bool over_batch : {true, false}) {
    CAPTURE(over_batch);
    const size_t kv_elems = over_batch ? size_t(S) * Hkv * D : size_t(B) * S * D;
    HostTensor kh(DType::bf16, kv_elems), vh(DType::bf16, kv_elems);
    kh.randomize(rng, -1.5, 1.5);
    vh.randomize(rng, -1.5, 1.5);
    const Layout lq{(long long)S * Hq * D, D, (long long)Hq * D};
    const Layout lkv =
        over_batch ? Layout{0, D, (long long)Hkv * D} : Layout{(long long)S * D, 0, D};
    const auto ref = attention_reference(qh, kh, vh, lq, lkv, lkv, B, Hq, Hkv, S, S, D, true, 0.09);
    RuntimeOptions ro;
    ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
    ro.policy = Policy::heuristic; // what an untuned call takes on this GPU
    Runtime rt(ro);
    DeviceTensor qd(qh), kd(kh), vd(vh);
    HostTensor out(DType::bf16, size_t(B) * Hq * S * D);
    out.poison();
    DeviceTensor o(out);
    AttentionArgs a{};
    auto view = [](CUdeviceptr base, int64_t heads, const Layout& l) {
      return tensor(reinterpret_cast<const void*>(base), ElementType::bf16, {B, heads, S, D},
                    {l.batch, l.head, l.seq, 1});
    };
    a.q = view(qd.get(), Hq, lq);
    a.k = view(kd.get(), Hkv, lkv);
    a.v = view(vd.get(), Hkv, lkv);
    a.o = view(o.get(), Hq, lq);
    a.causal = 1;
    a.scale = 0.09;
    const Selection sel = rt.select_attention(a);
    CAPTURE(sel.variant);
    CHECK(sel.problem.find("bcast=1") != std::string::npos);
    CHECK(sel.variant.find("family=wgmma") == std::string::npos);
    rt.attention(a);
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
    o.download(out);
    CHECK(rel_err(logical_order(out, lq, B, Hq, S, D), ref.o) <= 1e-2);
  }
}

TEST_CASE("tuning attention stores a winner that the runtime then dispatches, with its workspace") {
  context();
  fs::path db = temp_db();
  const char* shape = "B=2,Hq=8,Hkv=2,Sq=300,Sk=300,D=64,causal=1,dtype=fp16,layout=bhsd";
  TuneOptions o;
  o.op = "attention";
  o.shapes = {shape};
  o.db_path = db.string();
  // Split-KV only, so that the winner needs the caller's workspace.
  o.param_overrides = {
      {"block_n", "32|64"}, {"stages", "1|2"}, {"swizzle", "xor"}, {"splits", "2"}};
  Progress quiet(false);
  TuneReport first = tune(o, quiet);
  REQUIRE(first.problems.size() == 1);
  const ProblemReport& p = first.problems[0];
  REQUIRE(p.winner.has_value());
  for (const auto& v : p.variants) {
    CHECK_MESSAGE(v.outcome == cache::Outcome::ok, v.config << ": " << v.message);
  }
  std::mt19937_64 rng(std::random_device{}());
  AttnCase k(shape, rng);
  RuntimeOptions ro;
  ro.database = db.string();
  ro.require_tuned = true;
  Runtime rt(ro);
  DeviceTensor q(k.q), kk(k.k), v(k.v);
  HostTensor out(DType::f16, k.q.n);
  out.poison();
  DeviceTensor od(out);
  AttentionArgs a{};
  // AttnCase's layout=bhsd: contiguous [B, H, S, D].
  a.q = tensor(reinterpret_cast<const void*>(q.get()), ElementType::fp16, {2, 8, 300, 64});
  a.k = tensor(reinterpret_cast<const void*>(kk.get()), ElementType::fp16, {2, 2, 300, 64});
  a.v = tensor(reinterpret_cast<const void*>(v.get()), ElementType::fp16, {2, 2, 300, 64});
  a.o = tensor(reinterpret_cast<const void*>(od.get()), ElementType::fp16, {2, 8, 300, 64});
  a.causal = 1;
  Selection s = rt.select_attention(a);
  CHECK(s.source == "tuned");
  CHECK(s.variant == p.winner_config);
  const uint64_t need = rt.attention_workspace_size(a);
  CHECK(need > 0);
  CHECK_THROWS_WITH_AS(rt.attention(a), doctest::Contains("zero-filled workspace of"), Error);
  HostTensor ws_host(DType::f32, size_t(need / 4));
  DeviceTensor ws(ws_host);
  a.workspace = reinterpret_cast<void*>(ws.get());
  a.workspace_bytes = need;
  rt.attention(a);
  rt.attention(a); // the workspace is left ready for the next call
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  od.download(out);
  CHECK(rel_err(k.logical(out), k.ref.o) <= attn().tolerance(k.problem));
  a.q.shape[2] = a.o.shape[2] = 299; // not tuned: require_tuned refuses, no fallback
  CHECK_THROWS_WITH_AS(rt.attention(a), doctest::Contains("nothing tuned"), Error);
  fs::remove(db);
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
}

TEST_CASE("tuning causal attention with Sq > Sk measures every variant correct and dispatches the "
          "winner") {
  // The tuner's check compares each variant with the GPU reference, rows without keys
  // included (O = 0 there). LSE is left out: the tuner's comparison counts its -inf
  // entries as not finite.
  context();
  fs::path db = temp_db();
  const char* shape = "B=1,Hq=4,Hkv=2,Sq=300,Sk=100,D=64,causal=1,dtype=bf16";
  TuneOptions o;
  o.op = "attention";
  o.shapes = {shape};
  o.db_path = db.string();
  o.param_overrides = {{"block_m", "64|128"}, {"block_n", "32|64"}, {"warps", "4"},
                       {"stages", "1|2"},     {"swizzle", "xor"},   {"q", "smem"},
                       {"splits", "1|2"}};
  Progress quiet(false);
  TuneReport report = tune(o, quiet);
  REQUIRE(report.problems.size() == 1);
  const ProblemReport& p = report.problems[0];
  REQUIRE(p.winner.has_value());
  size_t split_variants = 0;
  for (const auto& v : p.variants) {
    CHECK_MESSAGE(v.outcome == cache::Outcome::ok, v.config << ": " << v.message);
    split_variants += v.config.find("splits=2") != std::string::npos;
  }
  CHECK(split_variants > 0);
  std::mt19937_64 rng(std::random_device{}());
  AttnCase k(shape, rng);
  RuntimeOptions ro;
  ro.database = db.string();
  ro.require_tuned = true;
  Runtime rt(ro);
  DeviceTensor q(k.q), kk(k.k), v(k.v);
  HostTensor out(DType::bf16, k.q.n);
  out.poison();
  DeviceTensor od(out);
  AttentionArgs a{};
  // AttnCase's layout=bshd: contiguous [B, S, H, D], viewed as [B, H, S, D].
  auto view = [](CUdeviceptr ptr, int64_t b, int64_t h, int64_t s, int64_t d) {
    return tensor(reinterpret_cast<const void*>(ptr), ElementType::bf16, {b, h, s, d},
                  {s * h * d, d, h * d, 1});
  };
  a.q = view(q.get(), k.B, k.Hq, k.Sq, k.D);
  a.k = view(kk.get(), k.B, k.Hkv, k.Sk, k.D);
  a.v = view(v.get(), k.B, k.Hkv, k.Sk, k.D);
  a.o = view(od.get(), k.B, k.Hq, k.Sq, k.D);
  a.causal = 1;
  CHECK(rt.select_attention(a).source == "tuned");
  const uint64_t need = rt.attention_workspace_size(a);
  HostTensor ws_host(DType::f32, size_t(need / 4) + 1);
  DeviceTensor ws(ws_host);
  a.workspace = need ? reinterpret_cast<void*>(ws.get()) : nullptr;
  a.workspace_bytes = need;
  rt.attention(a);
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  od.download(out);
  const std::vector<double> got_o = k.logical(out);
  CHECK(rel_err(got_o, k.ref.o) <= attn().tolerance(k.problem));
  CHECK(k.rows_without_keys_wrong(got_o, nullptr) == 0);
  fs::remove(db);
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
}

TEST_CASE("attention with sliding windows, softcap, ALiBi and head dims off 64/128/256 matches "
          "the float64 reference") {
  // Each case: a shape naming its features, the call's values, and how many of its valid
  // variants run it (evenly spread over the space, rotating between cases, plus the
  // default variant): every valid variant of every case compiles and runs in ~20 min on
  // the H100, a sample of ~50 per case in under 2.
  // Launched through pack_call with the call's values (the tuner's pack uses its own).
  context();
  cuda::DeviceInfo dev = cuda::query_device(0);
  Space space = parse_space(template_file(attn().space_path()), attn().space_path());
  std::mt19937_64 rng(std::random_device{}());
  struct FeatureCase {
    const char* shape;
    int left, right;
    double softcap;
    int slope_form; // 0: none, 1: [Hq], 2: [B, Hq]
    int sample;
  };
  const FeatureCase cases[] = {
      // window + causal + GQA: the left bound alone (right is causal's 0)
      {"B=2,Hq=4,Hkv=2,Sq=300,Sk=300,D=64,causal=1,window=1,dtype=bf16,lse=1", 37, -1, 0, 0, 48},
      // both bounds, Sq < Sk, [B, H, S, D]
      {"B=1,Hq=4,Hkv=1,Sq=200,Sk=333,D=128,window=1,dtype=fp16,lse=1,layout=bhsd", 50, 20, 0, 0,
       48},
      // left bound only, D=96
      {"B=1,H=2,S=257,D=96,window=1,dtype=bf16", 16, -1, 0, 0, 48},
      // right bound only with Sq > Sk: the first rows see no key
      {"B=1,Hq=2,Hkv=1,Sq=300,Sk=90,D=64,window=1,dtype=fp16,lse=1", -1, 5, 0, 0, 48},
      // a window of one key (the diagonal)
      {"B=1,H=2,Sq=100,Sk=130,D=64,window=1,dtype=bf16,lse=1", 0, 0, 0, 0, 36},
      // decoding with a window: split-KV variants among them, D=80
      {"B=2,Hq=4,Hkv=2,Sq=1,Sk=1000,D=80,window=1,dtype=bf16,lse=1", 100, -1, 0, 0, 64},
      // several queries a head with a window, GQA as rows, [B, H, S, D]
      {"B=2,Hq=6,Hkv=2,Sq=3,Sk=500,D=128,causal=1,window=1,dtype=bf16,lse=1,layout=bhsd", 40, -1, 0,
       0, 48},
      // softcap + causal, a cap small enough to bend the logits
      {"B=1,H=2,S=200,D=128,causal=1,softcap=1,dtype=bf16,lse=1", -1, -1, 3.0, 0, 48},
      {"B=1,H=2,Sq=150,Sk=250,D=64,softcap=1,dtype=fp16", -1, -1, 30.0, 0, 36},
      // ALiBi [Hq], not causal, Sq != Sk
      {"B=2,H=4,Sq=150,Sk=250,D=64,alibi=1,dtype=bf16,lse=1", -1, -1, 0, 1, 48},
      // ALiBi [B, Hq], causal, GQA, D=80
      {"B=2,Hq=4,Hkv=2,S=190,D=80,causal=1,alibi=1,dtype=fp16,lse=1", -1, -1, 0, 2, 48},
      // everything at once
      {"B=1,Hq=4,Hkv=1,Sq=100,Sk=400,D=112,causal=1,window=1,softcap=1,alibi=1,dtype=bf16,lse=1",
       64, -1, 20.0, 2, 48},
      // head dims off 64/128/256, sizes off every tile, Sq != Sk both ways
      {"B=1,Hq=2,Hkv=1,Sq=77,Sk=201,D=40,causal=1,dtype=bf16,lse=1", -1, -1, 0, 0, 48},
      {"B=1,H=2,Sq=130,Sk=99,D=80,dtype=fp16,lse=1", -1, -1, 0, 0, 48},
      {"B=1,H=2,Sq=201,Sk=77,D=96,causal=1,dtype=bf16,lse=1", -1, -1, 0, 0, 48},
      {"B=2,Hq=2,Hkv=1,Sq=65,Sk=190,D=112,dtype=fp16,layout=bhsd", -1, -1, 0, 0, 48},
      {"B=1,H=2,Sq=99,Sk=130,D=160,causal=1,dtype=bf16,lse=1", -1, -1, 0, 0, 48},
      {"B=1,H=2,Sq=70,Sk=150,D=200,dtype=fp16,lse=1", -1, -1, 0, 0, 48},
      {"B=1,H=2,Sq=130,Sk=70,D=256,causal=1,dtype=bf16,lse=1", -1, -1, 0, 0, 48},
      {"B=1,H=2,Sq=50,Sk=90,D=32,causal=1,dtype=fp16,lse=1", -1, -1, 0, 0, 48},
      // split-KV merges at a head dim that is not a multiple of 32
      {"B=1,H=2,Sq=1,Sk=777,D=200,dtype=bf16,lse=1", -1, -1, 0, 0, 64},
  };
  std::vector<Config> all = space.enumerate();
  size_t case_index = 0;
  for (const FeatureCase& fc : cases) {
    const std::string shape = fc.shape;
    CAPTURE(std::string(shape));
    AttnCase k(fc.shape, rng);
    k.set_features(fc.left, fc.right, fc.softcap, fc.slope_form, rng);
    std::vector<const Config*> valid;
    for (const Config& c : all) {
      if (attn().check(c, k.problem, dev.arch())) {
        valid.push_back(&c);
      }
    }
    const size_t stride = std::max<size_t>(1, valid.size() / size_t(fc.sample));
    std::vector<Config> configs;
    std::vector<VariantSource> sources;
    for (size_t i = 0; i < valid.size(); ++i) {
      const bool is_default = *valid[i] == space.default_config;
      if (is_default || i % stride == case_index % stride) {
        configs.push_back(*valid[i]);
        sources.push_back(describe_variant(attn(), *valid[i], k.problem, dev.arch()));
      }
    }
    ++case_index;
    REQUIRE(!configs.empty());
    std::vector<CompileJob> jobs;
    for (const auto& src : sources) {
      jobs.push_back({&src});
    }
    compile_all(jobs, default_jobs(), [](CompileJob&, size_t) {});
    DeviceTensor q(k.q), kk(k.k), v(k.v);
    HostTensor slopes_host(DType::f32, std::max<size_t>(1, k.slopes.size()));
    for (size_t i = 0; i < k.slopes.size(); ++i) {
      slopes_host.set(i, k.slopes[i]);
    }
    DeviceTensor slopes(slopes_host);
    HostTensor out(k.dtype, k.q.n);
    HostTensor lse(DType::f32, size_t(k.B) * k.Hq * k.Sq);
    size_t ws_elements = 1;
    for (const TensorSpec& spec : attn().tensors(k.problem)) {
      if (spec.name == "workspace") {
        ws_elements = spec.elements;
      }
    }
    HostTensor ws_host(DType::f32, ws_elements); // zero-filled once, left zero by each launch
    DeviceTensor ws(ws_host);
    double worst = 0;
    for (size_t i = 0; i < configs.size(); ++i) {
      CAPTURE(sources[i].config_id);
      REQUIRE_MESSAGE(jobs[i].output.ok(),
                      (jobs[i].output.ok() ? "" : jobs[i].output.failure().detail));
      cuda::Module m = cuda::load_module(jobs[i].output->binary);
      CUfunction f = cuda::get_function(m, attn().kernel_name());
      out.poison();
      lse.poison();
      DeviceTensor o(out), l(lse);
      AttentionCall call;
      call.q = q.get();
      call.k = kk.get();
      call.v = v.get();
      call.o = o.get();
      call.lse = k.lse ? l.get() : 0;
      call.q_batch_stride = call.o_batch_stride = k.qs.batch;
      call.q_head_stride = call.o_head_stride = k.qs.head;
      call.q_seq_stride = call.o_seq_stride = k.qs.seq;
      call.k_batch_stride = call.v_batch_stride = k.ks.batch;
      call.k_head_stride = call.v_head_stride = k.ks.head;
      call.k_seq_stride = call.v_seq_stride = k.ks.seq;
      call.window_left = fc.left;
      call.window_right = fc.right;
      call.softcap = fc.softcap;
      call.alibi_slopes = fc.slope_form ? slopes.get() : 0;
      call.alibi_batch_stride = k.features.slope_batch_stride;
      call.workspace = ws.get();
      call.workspace_bytes = ws_elements * 4;
      ArgPack args;
      attn().pack_call(configs[i], k.problem, call, args);
      launch_and_wait(f, attn().geometry(configs[i], k.problem), args,
                      k.problem.key() + " " + sources[i].config_id);
      o.download(out);
      const std::vector<double> got_o = k.logical(out);
      const double err = rel_err(got_o, k.ref.o);
      CHECK(err <= attn().tolerance(k.problem));
      worst = std::max(worst, err);
      CHECK(k.empty_rows_nonzero(got_o) == 0);
      CHECK(nonzero_bytes(ws, ws_host) == 0); // the workspace all zero again
      if (k.lse) {
        l.download(lse);
        std::vector<double> got = values(lse);
        // tanh.approx (softcap) moves each logit by up to 2^-11 of itself.
        CHECK(rel_err(got, k.ref.lse) <= (fc.softcap > 0 ? 1e-3 : 1e-4));
      }
    }
    MESSAGE(shape << ": " << configs.size() << " of " << valid.size()
                  << " valid variants checked, worst rel err " << worst);
  }
}

TEST_CASE("the attention GPU reference kernel follows windows, softcap and ALiBi as the tuner "
          "runs them") {
  context();
  cuda::DeviceInfo dev = cuda::query_device(0);
  cuda::CompileRequest r;
  r.source = template_source(attn().reference_path());
  r.name = attn().reference_path();
  r.arch = dev.arch();
  r.options = base_compile_options();
  auto compiled = cuda::compile(r);
  REQUIRE_MESSAGE(compiled.ok(), (compiled.ok() ? "" : compiled.failure().detail));
  cuda::Module m = cuda::load_module(compiled->binary);
  std::mt19937_64 rng(std::random_device{}());
  for (const char* shape :
       {"B=1,Hq=4,Hkv=2,Sq=300,Sk=100,D=64,causal=1,window=1,dtype=bf16,lse=1",
        "B=1,Hq=2,Sq=77,Sk=301,D=80,window=1,softcap=1,alibi=1,dtype=fp16,lse=1",
        "B=2,Hq=2,Hkv=1,Sq=129,Sk=64,D=200,causal=1,alibi=1,dtype=bf16,lse=1,layout=bhsd",
        "B=1,Hq=2,Sq=100,Sk=130,D=40,softcap=1,dtype=bf16,lse=1"}) {
    CAPTURE(std::string(shape));
    AttnCase k(shape, rng);
    DeviceTensor q(k.q), kk(k.k), v(k.v);
    // The tuner's inputs: the slopes come from its random draw; use the case's instead.
    k.set_tuning_features(rng);
    HostTensor slopes_host(DType::f32, std::max<size_t>(1, k.slopes.size()));
    for (size_t i = 0; i < k.slopes.size(); ++i) {
      slopes_host.set(i, k.slopes[i]);
    }
    DeviceTensor slopes(slopes_host);
    // pack_reference reads the slopes at their index in tensors(): fill the others.
    std::vector<CUdeviceptr> t;
    for (const TensorSpec& spec : attn().tensors(k.problem)) {
      t.push_back(spec.name == "q"              ? q.get()
                  : spec.name == "k"            ? kk.get()
                  : spec.name == "v"            ? v.get()
                  : spec.name == "alibi_slopes" ? slopes.get()
                                                : CUdeviceptr(0));
    }
    HostTensor o_ref(DType::f32, k.q.n), lse_ref(DType::f32, size_t(k.B) * k.Hq * k.Sq);
    o_ref.poison();
    lse_ref.poison();
    DeviceTensor o(o_ref), l(lse_ref);
    ArgPack args;
    attn().pack_reference(k.problem, t, {o.get(), l.get()}, args);
    launch_and_wait(cuda::get_function(m, attn().reference_kernel(k.problem).c_str()),
                    attn().reference_geometry(k.problem), args, "reference " + k.problem.key());
    o.download(o_ref);
    l.download(lse_ref);
    const std::vector<double> got_o = k.logical(o_ref);
    CHECK(rel_err(got_o, k.ref.o) <= 1e-4);
    std::vector<double> got_lse = values(lse_ref);
    CHECK(rel_err(got_lse, k.ref.lse) <= 1e-5);
    CHECK(k.empty_rows_nonzero(got_o) == 0);
  }
}

TEST_CASE("the runtime runs windows, softcap and ALiBi from the C struct, and refuses bad "
          "values naming them") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  const char* shape = "B=2,Hq=4,Hkv=2,Sq=300,Sk=200,D=80,causal=1,window=1,softcap=1,alibi=1,"
                      "dtype=bf16,lse=1";
  AttnCase k(shape, rng);
  k.set_features(40, -1, 10.0, 2, rng);
  DeviceTensor q(k.q), kk(k.k), v(k.v);
  HostTensor slopes_host(DType::f32, k.slopes.size());
  for (size_t i = 0; i < k.slopes.size(); ++i) {
    slopes_host.set(i, k.slopes[i]);
  }
  DeviceTensor slopes(slopes_host);
  HostTensor out(DType::bf16, k.q.n), lse(DType::f32, size_t(k.B) * k.Hq * k.Sq);
  DeviceTensor o(out), l(lse);
  auto view = [](CUdeviceptr p, int64_t b, int64_t h, int64_t s, int64_t d) {
    return tensor(reinterpret_cast<const void*>(p), ElementType::bf16, {b, h, s, d},
                  {s * h * d, d, h * d, 1});
  };
  AttentionArgs a{};
  a.q = view(q.get(), k.B, k.Hq, k.Sq, k.D);
  a.k = view(kk.get(), k.B, k.Hkv, k.Sk, k.D);
  a.v = view(v.get(), k.B, k.Hkv, k.Sk, k.D);
  a.o = view(o.get(), k.B, k.Hq, k.Sq, k.D);
  a.lse = tensor(reinterpret_cast<const void*>(l.get()), ElementType::fp32, {k.B, k.Hq, k.Sq});
  a.causal = 1;
  a.window = 1;
  a.window_left = 40;
  a.window_right = -1;
  a.softcap = 10.0;
  a.alibi_slopes =
      tensor(reinterpret_cast<const void*>(slopes.get()), ElementType::fp32, {k.B, k.Hq});
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::default_variant;
  Runtime rt(ro);
  CHECK(rt.select_attention(a).source == "default");
  auto run_and_check = [&] {
    out.poison();
    lse.poison();
    o.buffer.upload(out.bytes.data(), out.bytes.size());
    l.buffer.upload(lse.bytes.data(), lse.bytes.size());
    rt.attention(a);
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
    o.download(out);
    l.download(lse);
    const std::vector<double> got_o = k.logical(out);
    CHECK(rel_err(got_o, k.ref.o) <= attn().tolerance(k.problem));
    std::vector<double> got_lse = values(lse);
    CHECK(rel_err(got_lse, k.ref.lse) <= 1e-3);
    CHECK(k.empty_rows_nonzero(got_o) == 0);
  };
  run_and_check();
  SUBCASE("slopes per head serve every batch") {
    // The first Hq floats on the device, now read for every batch.
    k.slopes.resize(size_t(k.Hq));
    k.features.slope_batch_stride = 0;
    k.ref = attention_reference(k.q, k.k, k.v, k.qs, k.ks, k.ks, k.B, k.Hq, k.Hkv, k.Sq, k.Sk, k.D,
                                true, 1.0 / std::sqrt(double(k.D)), k.features);
    a.alibi_slopes = tensor(reinterpret_cast<const void*>(slopes.get()), ElementType::fp32, {k.Hq});
    run_and_check();
  }
  SUBCASE("bad values are refused before launching") {
    AttentionArgs bad = a;
    SUBCASE("a window bound below -1") {
      bad.window_left = -2;
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("window_left must be -1"), Error);
    }
    SUBCASE("a negative softcap") {
      bad.softcap = -1.0;
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("softcap must be positive"), Error);
    }
    SUBCASE("window not 0 or 1") {
      bad.window = 2;
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("window must be 0 or 1"), Error);
    }
    SUBCASE("slopes of another shape") {
      bad.alibi_slopes.shape[1] = k.Hq + 1;
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("alibi_slopes has shape"), Error);
    }
    SUBCASE("slopes that are not fp32") {
      bad.alibi_slopes.dtype = AUTOTUNE_BF16;
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("alibi_slopes is bf16"), Error);
    }
    rt.attention(a); // the context is healthy
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  }
}
