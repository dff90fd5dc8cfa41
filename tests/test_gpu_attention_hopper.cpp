// GPU tests of attention's Hopper family (family=wgmma, templates/attention/hopper.cuh):
// every valid wgmma variant of the space (plus the tiles the space leaves out, 176
// and 192 keys, 112 keys; ping-pong on and off) against a float64 CPU reference over both
// dtypes, D 64, 128 and 256, causal and not, Sq != Sk both ways (rows that see no key: O exactly 0,
// LSE -inf), GQA/MQA, both layouts, LSE, and sizes that are no multiple of any tile; then the
// runtime with a pinned wgmma variant on strided views (a packed QKV tensor), launched twice
// through the same plan (its cached tensor maps) and once more with new pointers. On GPUs that are
// not sm_90a the family is invalid and the tests say so.
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
#include <limits>

using namespace autotune;
using namespace autotune::test;
namespace fs = std::filesystem;

namespace {

bool on_hopper(const cuda::DeviceInfo& dev) {
  if (dev.arch() != "sm_90a") {
    MESSAGE("family=wgmma needs sm_90a; this GPU is " << dev.arch() << ": nothing to run");
    return false;
  }
  return true;
}

Config with(Config c, const std::string& key, const std::string& value) {
  for (auto& [k, v] : c) {
    if (k == key) {
      v = value;
    }
  }
  return c;
}

} // namespace

TEST_CASE("Hopper attention variants (family=wgmma) match a float64 reference over every "
          "feature") {
  context();
  cuda::DeviceInfo dev = cuda::query_device(0);
  if (!on_hopper(dev)) {
    return;
  }
  Space space = parse_space(template_file(attn().space_path()), attn().space_path());
  std::vector<Config> wgmma;
  for (const Config& c : space.enumerate()) {
    const std::string* f = find_field(c, "family");
    if (f && f->rfind("wgmma", 0) == 0) { // every wgmma family, plain and persistent
      wgmma.push_back(c);
    }
  }
  REQUIRE(!wgmma.empty());
  // Tiles the space does not list but check() accepts (FlashAttention-3's 176 and 192;
  // 112).
  const Config base = wgmma.front();
  for (const char* bn : {"112", "176", "192"}) {
    for (const char* bm : {"64", "128"}) {
      wgmma.push_back(with(with(with(base, "block_n", bn), "block_m", bm), "stages", "2"));
    }
  }
  wgmma.push_back(with(with(with(with(base, "block_n", "176"), "block_m", "128"), "stages", "2"),
                       "family", "wgmma_pingpong"));
  // The multicast families, which the space leaves out of the default search: every plain
  // and overlapped tile again in clusters of two (check() keeps them to non-causal,
  // windowless problems with two or more query blocks).
  const size_t listed = wgmma.size();
  for (size_t i = 0; i < listed; ++i) {
    const std::string family = *find_field(wgmma[i], "family");
    if (family == "wgmma" || family == "wgmma_overlap") {
      wgmma.push_back(with(wgmma[i], "family", family + "_multicast"));
    }
  }
  std::mt19937_64 rng(std::random_device{}());
  // share: every share-th valid variant (rotating with the shape) runs on the shape.
  struct Shape {
    const char* text;
    int share;
    bool ramp = false; // keys scaled up along the sequence (see below)
  };
  const Shape shapes[] = {
      {"B=2,H=3,S=200,D=64,dtype=bf16", 2},                                     // tails
      {"B=1,H=2,S=333,D=128,causal=1,dtype=fp16,lse=1", 2},                     // causal
      {"B=2,Hq=4,Hkv=2,Sq=77,Sk=301,D=128,causal=1,dtype=bf16,layout=bhsd", 2}, // GQA, Sq < Sk
      {"B=1,Hq=4,Hkv=1,Sq=300,Sk=90,D=64,causal=1,dtype=fp16,lse=1", 2},        // MQA, Sq > Sk
      {"B=1,Hq=2,Hkv=2,Sq=129,Sk=513,D=64,dtype=fp16,layout=bhsd,lse=1", 2},    // not causal
      {"B=2,Hq=4,Hkv=2,Sq=300,Sk=100,D=128,causal=1,dtype=bf16,lse=1,layout=bhsd", 2},
      {"B=1,Hq=3,Hkv=1,Sq=1000,Sk=1,D=64,causal=1,dtype=fp16,lse=1", 4}, // one key
      {"B=2,H=2,Sq=200,Sk=199,D=64,causal=1,dtype=bf16,lse=1", 2},       // row 0 sees none
      {"B=1,H=2,S=700,D=128,dtype=fp16,lse=1", 2},                       // many key tiles
      // Scores rising across the key tiles, which these kernels visit first to last, by far
      // more than the 2^8 the lazy rescale lets P grow before it moves a row's max.
      {"B=1,H=2,S=700,D=128,dtype=bf16,lse=1", 2, true},
      {"B=2,Hq=4,Hkv=2,Sq=500,Sk=600,D=64,causal=1,dtype=fp16,lse=1", 2, true},
      {"B=3,Hq=6,Hkv=3,Sq=1,Sk=1000,D=128,dtype=bf16", 4}, // decoding
      // More query tiles than persistent blocks (132 per SM slot): each persistent
      // block runs several, carrying its K/V ring and Q buffers from one to the next.
      {"B=8,H=20,S=200,D=64,causal=1,dtype=bf16,lse=1", 2},
      {"B=4,Hq=24,Hkv=8,Sq=150,Sk=300,D=128,dtype=fp16,layout=bhsd", 2},
      // D=256: O += P V as m64n256k16 over 4 slabs of V, S = Q K^T over 16 k-steps.
      {"B=1,H=2,S=300,D=256,dtype=bf16", 1},                                           // tails
      {"B=1,Hq=4,Hkv=2,Sq=200,Sk=333,D=256,causal=1,dtype=fp16,lse=1,layout=bhsd", 1}, // GQA
      {"B=1,Hq=4,Hkv=1,Sq=257,Sk=100,D=256,causal=1,dtype=bf16,lse=1", 2}, // MQA, Sq > Sk
      {"B=2,H=2,Sq=65,Sk=1000,D=256,dtype=fp16,lse=1", 2}, // many key tiles, ring wraps
      // Sliding windows (the tuner's: Sk/4 keys to the left, Sk/8 to the right or 0 when
      // causal): blocks start past key tile 0 and mask both edges.
      {"B=1,H=2,S=700,D=128,window=1,dtype=bf16,lse=1", 2},
      {"B=2,Hq=4,Hkv=2,Sq=300,Sk=900,D=64,causal=1,window=1,dtype=fp16,lse=1", 2},
      {"B=8,H=20,S=600,D=64,causal=1,window=1,dtype=bf16", 4}, // persistent: many tiles
      // Head dims between 64 and 128: tiles of 128 columns, those from D on zero-filled by
      // TMA; S = Q K^T over ceil(D / 16) k-steps, D columns stored.
      {"B=2,Hq=6,Hkv=2,Sq=300,Sk=333,D=96,causal=1,dtype=bf16,lse=1", 2},
      {"B=1,H=3,S=257,D=72,dtype=fp16,layout=bhsd", 2}, // the last k-step half past D
      {"B=4,H=10,S=400,D=112,causal=1,window=1,dtype=bf16", 4},
      // Head dims under 64 (tiles of 64 columns) and between 128 and 256 (tiles of 256):
      // the columns past D zero-filled by TMA, whole slabs of them at D=136..192.
      {"B=2,H=3,S=200,D=32,causal=1,dtype=bf16,lse=1", 4},
      {"B=1,Hq=4,Hkv=2,Sq=150,Sk=301,D=40,dtype=fp16,layout=bhsd", 4},
      {"B=1,H=2,S=257,D=160,causal=1,dtype=bf16,lse=1", 1},
      {"B=2,Hq=4,Hkv=1,Sq=100,Sk=333,D=200,dtype=fp16,lse=1", 1},
      // Softcap (the tuner's cap, 5: it bends the logits) and ALiBi (slopes [Hq]) on the
      // scores before the mask, alone, together, with GQA, a window, Sq != Sk, persistent.
      {"B=1,H=2,S=333,D=128,causal=1,softcap=1,dtype=bf16,lse=1", 2},
      {"B=2,Hq=4,Hkv=2,Sq=150,Sk=301,D=64,alibi=1,dtype=fp16,lse=1,layout=bhsd", 2},
      {"B=2,Hq=6,Hkv=2,Sq=300,Sk=200,D=96,causal=1,softcap=1,alibi=1,dtype=bf16,lse=1", 2},
      {"B=8,H=20,S=300,D=64,causal=1,window=1,softcap=1,alibi=1,dtype=fp16", 4},
      {"B=1,H=2,S=300,D=256,causal=1,softcap=1,alibi=1,dtype=bf16,lse=1", 1},
  };
  size_t shape_index = 0;
  for (const Shape& sh : shapes) {
    CAPTURE(std::string(sh.text));
    const Problem problem = attn().make_problem(parse_fields(sh.text, "shape"));
    const int B = int(problem.get_int("B")), Hq = int(problem.get_int("Hq")),
              Hkv = int(problem.get_int("Hkv")), Sq = int(problem.get_int("Sq")),
              Sk = int(problem.get_int("Sk")), D = int(problem.get_int("D"));
    const bool causal = problem.get_int("causal") != 0, has_lse = problem.get_int("lse") != 0;
    const DType dtype = parse_dtype(problem.get("dtype"), "dtype");
    AttentionOp::Strides qs = AttentionOp::contiguous_strides(problem, Hq, Sq);
    AttentionOp::Strides ks = AttentionOp::contiguous_strides(problem, Hkv, Sk);
    const Layout q3{qs.batch, qs.head, qs.seq}, k3{ks.batch, ks.head, ks.seq};
    HostTensor q(dtype, size_t(B) * Hq * Sq * D), k(dtype, size_t(B) * Hkv * Sk * D),
        v(dtype, size_t(B) * Hkv * Sk * D);
    q.randomize(rng, -2, 2);
    k.randomize(rng, -1, 1);
    v.randomize(rng, -1, 1);
    if (sh.ramp) {
      // Key j scaled by 1 + 12 j / Sk.
      for (int b = 0; b < B; ++b) {
        for (int h = 0; h < Hkv; ++h) {
          for (int j = 0; j < Sk; ++j) {
            for (int d = 0; d < D; ++d) {
              const size_t i = size_t(b * k3.batch + h * k3.head + j * k3.seq + d);
              k.set(i, float(k.get(i) * (1.0 + 12.0 * j / Sk)));
            }
          }
        }
      }
    }
    // The tuner's window and softcap (AttentionOp's tuning_features), slopes drawn here.
    auto flag = [&](const char* name) {
      return problem.fields.index(name) >= 0 && problem.get_int(name) != 0;
    };
    Features features;
    if (flag("window")) {
      features.left = (Sk + 3) / 4;
      features.right = causal ? 0 : (Sk + 7) / 8;
    }
    features.softcap = flag("softcap") ? 5.0 : 0.0;
    std::vector<float> slopes;
    HostTensor slopes_host(DType::f32, size_t(Hq));
    if (flag("alibi")) {
      std::uniform_real_distribution<float> slope(0.01f, 0.1f);
      for (int h = 0; h < Hq; ++h) {
        slopes.push_back(slope(rng));
        slopes_host.set(size_t(h), slopes.back());
      }
      features.slopes = &slopes;
    }
    const Reference ref = attention_reference(q, k, v, q3, k3, k3, B, Hq, Hkv, Sq, Sk, D, causal,
                                              1.0 / std::sqrt(double(D)), features);
    const std::vector<double>& ref_o = ref.o;
    const std::vector<double>& ref_lse = ref.lse;

    std::vector<Config> configs;
    std::vector<VariantSource> sources;
    size_t candidate = 0;
    for (const Config& c : wgmma) {
      if (!attn().check(c, problem, dev.arch())) {
        continue;
      }
      if (candidate++ % size_t(sh.share) != shape_index % size_t(sh.share)) {
        continue;
      }
      configs.push_back(c);
      sources.push_back(describe_variant(attn(), c, problem, dev.arch()));
    }
    ++shape_index;
    REQUIRE(!configs.empty());
    std::vector<CompileJob> jobs;
    for (const auto& s : sources) {
      jobs.push_back({&s});
    }
    compile_all(jobs, default_jobs(), [](CompileJob&, size_t) {});
    DeviceTensor qd(q), kd(k), vd(v), slopes_d(slopes_host);
    HostTensor out(dtype, q.n), lse(DType::f32, size_t(B) * Hq * Sq);
    std::vector<TensorSpec> specs = attn().tensors(problem);
    size_t ws_elements = 1;
    for (const TensorSpec& spec : specs) {
      if (spec.name == "workspace") {
        ws_elements = spec.elements;
      }
    }
    HostTensor ws_host(DType::f32, ws_elements);
    DeviceTensor ws(ws_host);
    double worst = 0;
    for (size_t i = 0; i < configs.size(); ++i) {
      CAPTURE(sources[i].config_id);
      REQUIRE_MESSAGE(jobs[i].output.ok(),
                      (jobs[i].output.ok() ? "" : jobs[i].output.failure().detail));
      cuda::Module m = cuda::load_module(jobs[i].output->binary);
      CUfunction f = cuda::get_function(m, attn().kernel_name());
      // Twice per variant, outputs poisoned each time: nothing carries over between
      // launches (barrier phases, stages).
      for (int launch = 0; launch < 2; ++launch) {
        out.poison();
        lse.poison();
        DeviceTensor o(out), l(lse);
        std::vector<CUdeviceptr> ptrs = {qd.get(), kd.get(), vd.get(), o.get()};
        if (has_lse) {
          ptrs.push_back(l.get());
        }
        for (const TensorSpec& spec : specs) { // after q, k, v, o and lse, as tensors() orders
          if (spec.name == "workspace") {
            ptrs.push_back(ws.get());
          } else if (spec.name == "alibi_slopes") {
            ptrs.push_back(slopes_d.get());
          }
        }
        ArgPack args;
        attn().pack(configs[i], problem, ptrs, args);
        const LaunchGeometry g = attn().geometry(configs[i], problem);
        cuda::allow_dynamic_smem(f, g.dynamic_smem);
        AUTOTUNE_CU(cuda::driver().cuLaunchKernel(f, g.grid[0], g.grid[1], g.grid[2], g.block[0],
                                                  g.block[1], g.block[2], g.dynamic_smem, nullptr,
                                                  args.pointers(), nullptr));
        synchronize_within(problem.key() + " " + sources[i].config_id);
        o.download(out);
        const std::vector<double> got = logical_order(out, q3, B, Hq, Sq, D);
        const double err = rel_err(got, ref_o);
        CHECK(err <= attn().tolerance(problem));
        worst = std::max(worst, err);
        // Rows that see no key: O exactly 0.
        size_t nonzero = 0;
        const int empty_rows = causal ? std::max(0, Sq - Sk) : 0;
        for (int b = 0; b < B; ++b) {
          for (int h = 0; h < Hq; ++h) {
            for (int r = 0; r < empty_rows; ++r) {
              for (int d = 0; d < D; ++d) {
                nonzero += got[((size_t(b) * Hq + h) * Sq + r) * D + d] != 0.0;
              }
            }
          }
        }
        CHECK(nonzero == 0);
        if (has_lse) {
          l.download(lse);
          std::vector<double> got_lse = values(lse);
          // tanh.approx (softcap) moves each logit by up to 2^-11 of itself.
          CHECK(rel_err(got_lse, ref_lse) <= (features.softcap > 0 ? 1e-3 : 1e-4));
        }
      }
    }
    MESSAGE(std::string(sh.text) << ": " << configs.size()
                                 << " wgmma variants checked, worst rel err " << worst);
  }
}

TEST_CASE("the runtime runs a pinned Hopper attention variant on strided views, reusing and "
          "renewing its tensor maps") {
  context();
  cuda::DeviceInfo dev = cuda::query_device(0);
  if (!on_hopper(dev)) {
    return;
  }
  std::mt19937_64 rng(std::random_device{}());
  // Q, K, V interleaved in one packed [B, S, 3, H, D] tensor; O contiguous [B, H, S, D].
  const int B = 2, H = 4, S = 150, D = 128;
  HostTensor qkv(DType::bf16, size_t(B) * S * 3 * H * D);
  qkv.randomize(rng, -1.5, 1.5);
  const Layout l{(long long)S * 3 * H * D, D, 3LL * H * D};
  HostTensor qh(DType::bf16, size_t(B) * H * S * D), kh(qh), vh(qh);
  for (int b = 0; b < B; ++b) {
    for (int s = 0; s < S; ++s) {
      for (int h = 0; h < H; ++h) {
        for (int d = 0; d < D; ++d) {
          const size_t src = size_t(b * l.batch + s * l.seq + h * D + d);
          const size_t dst = ((size_t(b) * H + h) * S + s) * D + d;
          qh.set(dst, qkv.get(src));
          kh.set(dst, qkv.get(src + size_t(H) * D));
          vh.set(dst, qkv.get(src + 2 * size_t(H) * D));
        }
      }
    }
  }
  const Layout c{(long long)H * S * D, (long long)S * D, D};
  const Reference ref = attention_reference(qh, kh, vh, c, c, c, B, H, H, S, S, D, true, 0.1);
  const std::vector<double>& ref_o = ref.o;
  const std::vector<double>& ref_lse = ref.lse;

  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::pin;
  ro.pinned = "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma";
  Runtime rt(ro);
  DeviceTensor packed(qkv), packed2(qkv);
  HostTensor out(DType::bf16, size_t(B) * H * S * D), lse(DType::f32, size_t(B) * H * S);
  DeviceTensor o(out), ld(lse);
  auto run = [&](CUdeviceptr base) {
    out.poison();
    lse.poison();
    o.buffer.upload(out.bytes.data(), out.bytes.size());
    ld.buffer.upload(lse.bytes.data(), lse.bytes.size());
    auto view = [&](CUdeviceptr p) {
      return tensor(reinterpret_cast<const void*>(p), ElementType::bf16, {B, H, S, D},
                    {l.batch, l.head, l.seq, 1});
    };
    AttentionArgs a{};
    a.q = view(base);
    a.k = view(base + size_t(H) * D * 2);
    a.v = view(base + 2 * size_t(H) * D * 2);
    a.o = tensor(reinterpret_cast<const void*>(o.get()), ElementType::bf16, {B, H, S, D});
    a.lse = tensor(reinterpret_cast<const void*>(ld.get()), ElementType::fp32, {B, H, S});
    a.causal = 1;
    a.scale = 0.1;
    CHECK(rt.select_attention(a).source == "pinned");
    rt.attention(a);
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
    o.download(out);
    ld.download(lse);
    std::vector<double> got(out.n), got_lse(lse.n);
    for (size_t i = 0; i < out.n; ++i) {
      got[i] = out.get(i);
    }
    for (size_t i = 0; i < lse.n; ++i) {
      got_lse[i] = lse.get(i);
    }
    CHECK(rel_err(got, ref_o) <= 1e-2);
    CHECK(rel_err(got_lse, ref_lse) <= 1e-4);
  };
  run(packed.get());
  run(packed.get());  // the plan's cached maps
  run(packed2.get()); // new pointers: new maps

  SUBCASE("strides that are no multiple of 16 bytes are refused by name") {
    // K's sequence stride of 3*H*D + 4 elements (8 bytes off) cannot be a tensor map.
    const size_t row = 3 * size_t(H) * D + 4;
    HostTensor odd(DType::bf16, size_t(B) * S * row);
    DeviceTensor oddd(odd);
    AttentionArgs a{};
    a.q = tensor(reinterpret_cast<const void*>(packed.get()), ElementType::bf16, {B, H, S, D},
                 {l.batch, l.head, l.seq, 1});
    a.k = tensor(reinterpret_cast<const void*>(oddd.get()), ElementType::bf16, {B, H, S, D},
                 {(long long)(S * row), D, (long long)row, 1});
    a.v = a.k;
    a.o = tensor(reinterpret_cast<const void*>(o.get()), ElementType::bf16, {B, H, S, D});
    a.causal = 1;
    CHECK_THROWS_WITH_AS(rt.attention(a), doctest::Contains("k"), Error);
  }
}

TEST_CASE("causal persistent Hopper variants take their tiles from per-launch counters: "
          "launches back to back and on two streams at once are all correct") {
  context();
  cuda::DeviceInfo dev = cuda::query_device(0);
  if (!on_hopper(dev)) {
    return;
  }
  std::mt19937_64 rng(std::random_device{}());
  // 8 query blocks x 2 x 40 heads = 640 tiles: about five a block.
  const int B = 2, H = 40, S = 1000, D = 64;
  const Layout c{(long long)H * S * D, (long long)S * D, D};
  HostTensor qh(DType::bf16, size_t(B) * H * S * D), kh(qh), vh(qh);
  qh.randomize(rng, -2, 2);
  kh.randomize(rng, -1, 1);
  vh.randomize(rng, -1, 1);
  const Reference ref = attention_reference(qh, kh, vh, c, c, c, B, H, H, S, S, D, true, 0.125);
  DeviceTensor q(qh), k(kh), v(vh);

  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::pin;
  ro.pinned = "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
              "family=wgmma_persistent";
  Runtime rt(ro);
  auto view = [&](CUdeviceptr p) {
    return tensor(reinterpret_cast<const void*>(p), ElementType::bf16, {B, H, S, D});
  };
  // Every launch writes into an output poisoned on its stream just before (0xff bytes:
  // bf16 NaN), so a tile a launch skips shows. 70 launches back to back use every one of
  // the 64 counter slots and then some again; then two streams at once, each with its
  // own output, 20 launches each.
  const size_t bytes = qh.n * 2;
  cuda::DeviceBuffer o1(bytes), o2(bytes);
  auto launch = [&](const cuda::DeviceBuffer& o, CUstream stream) {
    AUTOTUNE_CU(cuda::driver().cuMemsetD8Async(o.get(), 0xff, bytes, stream));
    AttentionArgs a{};
    a.q = view(q.get());
    a.k = view(k.get());
    a.v = view(v.get());
    a.o = view(o.get());
    a.causal = 1;
    a.scale = 0.125;
    rt.attention(a, stream);
  };
  HostTensor out(DType::bf16, qh.n);
  auto check = [&](const cuda::DeviceBuffer& o, const std::string& what) {
    CAPTURE(what);
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
    o.download(out.bytes.data(), bytes);
    std::vector<double> got(out.n);
    for (size_t i = 0; i < out.n; ++i) {
      got[i] = out.get(i);
    }
    CHECK(rel_err(got, ref.o) <= 1e-2);
  };
  for (int i = 0; i < 70; ++i) {
    launch(o1, nullptr);
    if (i < 2 || i == 63 || i == 64 || i == 69) {
      check(o1, "launch " + std::to_string(i) + " on one stream");
    }
  }
  cuda::Stream s1 = cuda::create_stream(), s2 = cuda::create_stream();
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 20; ++i) {
      launch(o1, s1.get());
      launch(o2, s2.get());
    }
    check(o1, "stream 1, beside stream 2");
    check(o2, "stream 2, beside stream 1");
  }
}
