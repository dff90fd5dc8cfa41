// GPU tests for attention: variants of the whole space (a rotating share per
// shape, so that every configuration runs somewhere) against a float64 CPU
// reference over dtypes, head dims, causal and not, Sq != Sk both ways, GQA/MQA,
// both layouts, LSE, and sizes that are not multiples of any tile; the runtime
// with arbitrary strides; the tune -> store -> dispatch round trip.
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

cuda::PrimaryContext& context() {
  static cuda::PrimaryContext ctx(0);
  ctx.make_current();
  return ctx;
}

const AttentionOp& attn() { return static_cast<const AttentionOp&>(find_op("attention")); }

struct Layout {
  long long batch, head, seq;
};

// O (in the logical order [B, Hq, Sq, D]) and LSE in float64 from the stored inputs.
struct Reference {
  std::vector<double> o, lse;
};

Reference attention_reference(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                              Layout qs, Layout ks, Layout vs, int B, int Hq, int Hkv, int Sq,
                              int Sk, int D, bool causal, double scale) {
  Reference r;
  r.o.assign(size_t(B) * Hq * Sq * D, 0.0);
  r.lse.assign(size_t(B) * Hq * Sq, -std::numeric_limits<double>::infinity());
  std::vector<double> s(static_cast<size_t>(Sk));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < Hq; ++h) {
      int hk = h / (Hq / Hkv);
      for (int i = 0; i < Sq; ++i) {
        int last = causal ? std::min(Sk - 1, i + Sk - Sq) : Sk - 1;
        if (last < 0) {
          continue;
        }
        double mx = -1e300;
        for (int j = 0; j <= last; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) {
            dot += double(q.get(size_t(b * qs.batch + h * qs.head + i * qs.seq + d))) *
                   double(k.get(size_t(b * ks.batch + hk * ks.head + j * ks.seq + d)));
          }
          s[size_t(j)] = dot * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (int j = 0; j <= last; ++j) {
          s[size_t(j)] = std::exp(s[size_t(j)] - mx);
          sum += s[size_t(j)];
        }
        double* o = &r.o[((size_t(b) * Hq + h) * Sq + i) * D];
        for (int j = 0; j <= last; ++j) {
          double p = s[size_t(j)] / sum;
          for (int d = 0; d < D; ++d) {
            o[d] += p * double(v.get(size_t(b * vs.batch + hk * vs.head + j * vs.seq + d)));
          }
        }
        r.lse[(size_t(b) * Hq + h) * Sq + i] = mx + std::log(sum);
      }
    }
  }
  return r;
}

// One shape with contiguous tensors in its problem's layout.
struct AttnCase {
  Problem problem;
  int B, Hq, Hkv, Sq, Sk, D;
  bool causal, lse;
  DType dtype;
  Layout qs, ks;
  HostTensor q, k, v;
  Reference ref;

  AttnCase(const std::string& shape, std::mt19937_64& rng)
      : problem(attn().make_problem(parse_fields(shape, "shape"))),
        B(int(problem.get_int("B"))), Hq(int(problem.get_int("Hq"))),
        Hkv(int(problem.get_int("Hkv"))), Sq(int(problem.get_int("Sq"))),
        Sk(int(problem.get_int("Sk"))), D(int(problem.get_int("D"))),
        causal(problem.get_int("causal") != 0), lse(problem.get_int("lse") != 0),
        dtype(parse_dtype(problem.get("dtype"), "dtype")), qs(layout(Hq, Sq)), ks(layout(Hkv, Sk)),
        q(dtype, size_t(B) * Hq * Sq * D), k(dtype, size_t(B) * Hkv * Sk * D),
        v(dtype, size_t(B) * Hkv * Sk * D) {
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
                              1.0 / std::sqrt(double(D)));
  }

  Layout layout(long long heads, long long seq) const {
    AttentionOp::Strides s = AttentionOp::contiguous_strides(problem, heads, seq);
    return {s.batch, s.head, s.seq};
  }

  // The output (stored in the problem's layout) in the reference's logical order.
  std::vector<double> logical(const HostTensor& o) const {
    std::vector<double> out(o.n);
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < Hq; ++h) {
        for (int i = 0; i < Sq; ++i) {
          for (int d = 0; d < D; ++d) {
            out[((size_t(b) * Hq + h) * Sq + i) * D + d] =
                o.get(size_t(b * qs.batch + h * qs.head + i * qs.seq + d));
          }
        }
      }
    }
    return out;
  }
};

double rel_err(const std::vector<double>& out, const std::vector<double>& ref) {
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(out[i])) {
      if (out[i] != ref[i]) {
        return INFINITY; // a row that sees no key must say so (LSE -inf)
      }
      continue;
    }
    if (!std::isfinite(out[i])) {
      return INFINITY;
    }
    d2 += (out[i] - ref[i]) * (out[i] - ref[i]);
    r2 += ref[i] * ref[i];
  }
  return std::sqrt(d2 / (r2 > 0 ? r2 : 1));
}

void launch(CUfunction f, const LaunchGeometry& g, ArgPack& args) {
  cuda::allow_dynamic_smem(f, g.dynamic_smem);
  AUTOTUNE_CU(cuda::driver().cuLaunchKernel(f, g.grid[0], g.grid[1], g.grid[2], g.block[0],
                                            g.block[1], g.block[2], g.dynamic_smem, nullptr,
                                            args.pointers(), nullptr));
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
}

fs::path temp_db() {
  return fs::temp_directory_path() / ("autotune-gpu-attn-" + std::to_string(::getpid()) + "-" +
                                      std::to_string(rand()) + ".db");
}

} // namespace

TEST_CASE("attention variants match a float64 reference over every feature") {
  context();
  cuda::DeviceInfo dev = cuda::query_device(0);
  Space space = parse_space(template_file(attn().space_path()), attn().space_path());
  std::mt19937_64 rng(std::random_device{}());
  const char* shapes[] = {
      "B=2,H=3,S=200,D=64,dtype=bf16",                                    // tails everywhere
      "B=1,H=2,S=333,D=128,causal=1,dtype=fp16,lse=1",                    // causal Sq = Sk
      "B=2,Hq=4,Hkv=2,Sq=77,Sk=301,D=128,causal=1,dtype=bf16,layout=bhsd", // GQA, Sq < Sk
      "B=1,Hq=4,Hkv=1,Sq=300,Sk=90,D=64,causal=1,dtype=fp16,lse=1",       // MQA, Sq > Sk: empty rows
      "B=1,Hq=2,Hkv=2,Sq=129,Sk=513,D=64,dtype=fp16,layout=bhsd,lse=1",   // Sq != Sk, not causal
      "B=1,H=2,S=130,D=256,causal=1,dtype=bf16",                          // head dim 256
      "B=3,Hq=6,Hkv=3,Sq=1,Sk=1000,D=128,dtype=bf16",                     // decoding
      "B=1,H=2,S=700,D=128,dtype=fp16,lse=1", // scores rising across tiles (ramp_keys)
  };
  std::vector<Config> all = space.enumerate();
  size_t shape_index = 0;
  for (const char* shape : shapes) {
    AttnCase k(shape, rng);
    if (shape_index == 7) {
      k.ramp_keys(12.0);
    }
    std::vector<Config> configs;
    std::vector<VariantSource> sources;
    // Split-KV variants on the GQA and the decoding shapes (where the keys outnumber
    // the queries), single-split ones elsewhere.
    const bool splits_here = shape_index == 2 || shape_index == 6;
    size_t candidate = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string* sp = find_field(all[i], "splits");
      if ((sp && *sp != "1") != splits_here && !(splits_here && all[i] == space.default_config)) {
        continue;
      }
      // A rotating quarter of the candidates per shape, plus the default variant.
      bool pick = candidate++ % 4 == shape_index % 4 || all[i] == space.default_config;
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
      CAPTURE(shape);
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
      launch(f, attn().geometry(configs[i], k.problem), args);
      o.download(out);
      double err = rel_err(k.logical(out), k.ref.o);
      if (const std::string* sp = find_field(configs[i], "splits"); sp && *sp != "1") {
        // Every split-KV launch leaves the arrival counters (the workspace's first
        // words, shared by all variants) at zero for the next one.
        const size_t counters = size_t(k.B) * k.Hq * ((size_t(k.Sq) + 63) / 64);
        ws.download(ws_host);
        size_t nonzero = 0;
        for (size_t j = 0; j < counters; ++j) {
          uint32_t c;
          std::memcpy(&c, &ws_host.bytes[j * 4], 4);
          nonzero += c != 0;
        }
        CHECK(nonzero == 0);
      }
      CHECK(err <= attn().tolerance(k.problem));
      worst = std::max(worst, err);
      if (k.lse) {
        l.download(lse);
        std::vector<double> got(lse.n);
        for (size_t j = 0; j < lse.n; ++j) {
          got[j] = lse.get(j);
        }
        CHECK(rel_err(got, k.ref.lse) <= 1e-4);
      }
      ++checked;
    }
    MESSAGE(shape << ": " << checked << " variants checked, worst rel err " << worst);
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
  std::vector<double> got(out.n);
  for (size_t i = 0; i < out.n; ++i) {
    got[i] = out.get(i);
  }
  CHECK(rel_err(got, ref.o) <= 1e-2);
  ld.download(lse);
  std::vector<double> got_lse(lse.n);
  for (size_t i = 0; i < lse.n; ++i) {
    got_lse[i] = lse.get(i);
  }
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
      CHECK_THROWS_WITH_AS(rt.attention(bad), doctest::Contains("must have the dtype of q"),
                           Error);
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
