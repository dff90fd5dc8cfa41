// GPU tests for causal_conv1d: every valid variant against a float64 CPU
// reference over dtypes, widths, odd lengths and the optional parts; the tune ->
// store -> dispatch round trip; the runtime's handling of strides and misses.
#include "gpu_support.hpp"

#include "cache/database.hpp"
#include "runtime/dispatch/autotune.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/causal_conv1d.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"
#include "tuner/compile.hpp"
#include "tuner/progress.hpp"
#include "tuner/tuner.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <dlfcn.h>
#include <filesystem>
#include <type_traits>
#include <utility>
#include <vector>

using namespace autotune;
using namespace autotune::test;
namespace fs = std::filesystem;

namespace {

struct ConvCase {
  Problem problem;
  int B, C, L, W;
  bool bias, silu, init_states, final_states;
  HostTensor x, w, b, init;
  std::vector<int> seq; // the tuner's sequence ids (seq_idx=1), else empty
  std::vector<double> ref, ref_final;

  ConvCase(const std::string& shape, std::mt19937_64& rng)
      : problem(find_op("causal_conv1d").make_problem(parse_fields(shape, "shape"))),
        B(int(problem.get_int("B"))), C(int(problem.get_int("C"))), L(int(problem.get_int("L"))),
        W(int(problem.get_int("W"))), bias(problem.get_int("bias") != 0),
        silu(problem.get_int("silu") != 0), init_states(problem.get_int("init_states") != 0),
        final_states(problem.get_int("final_states") != 0),
        x(parse_dtype(problem.get("x"), "x"), size_t(B) * C * L),
        w(parse_dtype(problem.get("w"), "w"), size_t(C) * W),
        b(parse_dtype(problem.get("w"), "w"), size_t(C)),
        init(parse_dtype(problem.get("x"), "x"), size_t(B) * C * (W - 1)) {
    x.randomize(rng, -1, 1);
    w.randomize(rng, -0.5, 0.5);
    b.randomize(rng, -0.5, 0.5);
    init.randomize(rng, -1, 1);
    // The tuner's tensors in the problem's layout: [B, C, L], or channel-last [B, L, C].
    const bool channel_last = problem.get("layout") == "blc";
    for (const TensorSpec& t : find_op("causal_conv1d").tensors(problem)) {
      if (t.name == "seq_idx") {
        seq = t.values;
      }
    }
    ref = causal_conv1d_reference(x, w, bias ? &b : nullptr, B, C, L, W, silu, (long long)C * L,
                                  channel_last ? 1 : L, init_states ? &init : nullptr,
                                  final_states ? &ref_final : nullptr, channel_last ? C : 1,
                                  seq.empty() ? nullptr : &seq);
    if (channel_last) {
      std::vector<double> by_position(ref.size());
      for (size_t bc = 0; bc < size_t(B) * C; ++bc) {
        for (size_t t = 0; t < size_t(L); ++t) {
          by_position[(bc / C * L + t) * C + bc % C] = ref[bc * L + t];
        }
      }
      ref = std::move(by_position);
    }
  }
};

// t's elements from `offset` on (what a view starting there reads).
HostTensor from_offset(const HostTensor& t, size_t offset) {
  HostTensor r(t.type, t.n - offset);
  for (size_t i = 0; i < r.n; ++i) {
    r.set(i, t.get(i + offset));
  }
  return r;
}

// A channel-last [B, L, C] output laid out [B, C, L], as the references index it.
HostTensor channel_first(const HostTensor& out, int B, int C, int L) {
  HostTensor r(out.type, out.n);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < L; ++t) {
      for (int c = 0; c < C; ++c) {
        r.set((size_t(b) * C + c) * L + t, out.get((size_t(b) * L + t) * C + c));
      }
    }
  }
  return r;
}

fs::path temp_db() {
  return fs::temp_directory_path() /
         ("autotune-gpu-" + std::to_string(::getpid()) + "-" + std::to_string(rand()) + ".db");
}

} // namespace

TEST_CASE("every valid causal_conv1d variant matches a float64 reference") {
  context();
  const auto& op = static_cast<const CausalConv1dOp&>(find_op("causal_conv1d"));
  cuda::DeviceInfo dev = cuda::query_device(0);
  Space space = parse_space(template_file(op.space_path()), op.space_path());
  std::mt19937_64 rng(std::random_device{}());
  const char* shapes[] = {
      "B=2,C=40,L=1000,W=4,dtype=bf16,bias=1,silu=1", // L not a multiple of any vector
      "B=2,C=33,L=1024,W=3,dtype=fp16,wdtype=fp32,bias=0,silu=1",
      "B=1,C=16,L=37,W=2,dtype=fp32,wdtype=bf16,bias=1,silu=0", // shorter than one tile
      "B=3,C=64,L=4096,W=4,dtype=bf16,bias=1,silu=1",
      "B=2,C=8,L=2050,W=4,dtype=fp16,wdtype=fp16,bias=1,silu=0",
      "B=2,C=24,L=2048,W=4,dtype=bf16,init_states=1,final_states=1", // a decoder's carry
      "B=1,C=8,L=2,W=4,dtype=fp32,init_states=1,final_states=1",     // L shorter than the state
      "B=2,C=16,L=333,W=3,dtype=fp16,init_states=0,final_states=1",
      // Every length that leaves a partial vector (AT_RAGGED): 1, 2, 3 = W-1, odd,
      // primes, short rows with many channels; rows start at every shift.
      "B=3,C=20,L=1,W=4,dtype=bf16,bias=1,silu=1",
      "B=2,C=12,L=3,W=4,dtype=bf16,init_states=1,final_states=1",
      "B=2,C=10,L=2,W=3,dtype=fp16,wdtype=fp32,init_states=1,final_states=1",
      "B=2,C=6,L=13,W=4,dtype=fp16,init_states=1,final_states=1",
      "B=3,C=17,L=4095,W=3,dtype=bf16,bias=1,silu=1",
      "B=5,C=7,L=997,W=4,dtype=fp32,wdtype=fp32,init_states=1,final_states=1",
      "B=4,C=9,L=8191,W=2,dtype=bf16,bias=0,silu=0",
      "B=64,C=24,L=333,W=2,dtype=bf16,bias=1,silu=1",
      // Short ragged rows of many channels with states, fp32 rows of 16-byte vectors.
      "B=3,C=8,L=65,W=4,dtype=bf16,init_states=1,final_states=1",
      "B=2,C=16,L=67,W=3,dtype=fp32,wdtype=fp32,init_states=1,final_states=1",
      "B=4,C=32,L=1001,W=4,dtype=bf16,bias=1,silu=1,init_states=1",
      // Rows back to back as aligned runs (load=span, C * L a multiple of the vector):
      // a row start in nearly every vector (L = 9..13), a partial last block of rows,
      // states.
      "B=3,C=24,L=9,W=4,dtype=bf16,bias=1,silu=1",
      "B=2,C=16,L=11,W=4,dtype=fp16,init_states=1,final_states=1",
      "B=2,C=24,L=333,W=4,dtype=bf16,init_states=1,final_states=1",
      "B=2,C=12,L=67,W=3,dtype=fp32,wdtype=fp32,init_states=1,final_states=1",
      "B=2,C=40,L=13,W=2,dtype=bf16,wdtype=fp32,bias=1,silu=1",
      // Channel-last x and out (channel_last.cuh): channels that fill no vector (C=100
      // with 8-element vectors, odd C: element accesses), rows shorter than a step and
      // than the state, chunks of many steps, states in every dtype.
      "B=2,C=64,L=1000,W=4,dtype=bf16,bias=1,silu=1,layout=blc",
      "B=3,C=40,L=37,W=3,dtype=fp16,wdtype=fp32,bias=0,layout=blc,init_states=1,final_states=1",
      "B=2,C=12,L=2,W=4,dtype=fp32,layout=blc,init_states=1,final_states=1",
      "B=1,C=100,L=513,W=2,dtype=bf16,silu=0,layout=blc",
      "B=2,C=13,L=300,W=4,dtype=bf16,wdtype=fp32,layout=blc,final_states=1",
      "B=1,C=256,L=4096,W=4,dtype=bf16,layout=blc,init_states=1,final_states=1",
      "B=4,C=2048,L=77,W=4,dtype=bf16,layout=blc,init_states=1",
      "B=2,C=24,L=3,W=4,dtype=fp16,layout=blc,init_states=1,final_states=1",
      // Packed sequences (seq_idx, channel-last only): sequences of 1-2 positions, and
      // boundaries inside chunks and steps.
      "B=3,C=64,L=1000,W=4,dtype=bf16,layout=blc,seq_idx=1",
      "B=2,C=40,L=37,W=3,dtype=fp16,wdtype=fp32,bias=0,layout=blc,seq_idx=1",
      "B=2,C=13,L=300,W=2,dtype=fp32,layout=blc,seq_idx=1",
  };
  for (const char* shape : shapes) {
    ConvCase k(shape, rng);
    std::vector<Config> configs;
    std::vector<VariantSource> sources;
    for (const auto& c : space.enumerate()) {
      if (op.check(c, k.problem, dev.arch())) {
        configs.push_back(c);
        sources.push_back(describe_variant(op, c, k.problem, dev.arch()));
      }
    }
    REQUIRE(!configs.empty());
    std::vector<CompileJob> jobs;
    for (const auto& s : sources) {
      jobs.push_back({&s});
    }
    compile_all(jobs, default_jobs(), [](CompileJob&, size_t) {});
    DeviceTensor x(k.x), w(k.w), b(k.b), init(k.init);
    cuda::DeviceBuffer seq(std::max<size_t>(k.seq.size(), 1) * sizeof(int));
    if (!k.seq.empty()) {
      seq.upload(k.seq.data(), k.seq.size() * sizeof(int));
    }
    HostTensor out(k.x.type, k.x.n);
    HostTensor fin(k.x.type, k.init.n);
    size_t checked = 0;
    for (size_t i = 0; i < configs.size(); ++i) {
      CAPTURE(std::string(shape));
      CAPTURE(sources[i].config_id);
      REQUIRE_MESSAGE(jobs[i].output.ok(),
                      (jobs[i].output.ok() ? "" : jobs[i].output.failure().detail));
      cuda::Module m = cuda::load_module(jobs[i].output->binary);
      CUfunction f = cuda::get_function(m, op.kernel_name());
      out.poison();
      fin.poison();
      DeviceTensor o(out), f_out(fin);
      std::vector<CUdeviceptr> ptrs = {x.get(), w.get()};
      if (k.bias) {
        ptrs.push_back(b.get());
      }
      if (k.init_states) {
        ptrs.push_back(init.get());
      }
      ptrs.push_back(o.get());
      if (k.final_states) {
        ptrs.push_back(f_out.get());
      }
      if (!k.seq.empty()) {
        ptrs.push_back(seq.get());
      }
      ArgPack args;
      op.pack(configs[i], k.problem, ptrs, args);
      LaunchGeometry g = op.geometry(configs[i], k.problem);
      AUTOTUNE_CU(cuda::driver().cuLaunchKernel(f, g.grid[0], g.grid[1], g.grid[2], g.block[0],
                                                g.block[1], g.block[2], g.dynamic_smem, nullptr,
                                                args.pointers(), nullptr));
      AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
      o.download(out);
      double err = relative_error(out, k.ref);
      CHECK(err <= op.tolerance(k.problem));
      if (k.final_states) {
        f_out.download(fin);
        CHECK(relative_error(fin, k.ref_final) == 0.0); // a copy of the inputs: exact
      }
      ++checked;
    }
    MESSAGE(shape << ": " << checked << " variants checked");
  }
}

TEST_CASE("tuning stores a winner that the runtime then dispatches") {
  context();
  fs::path db = temp_db();
  TuneOptions o;
  o.op = "causal_conv1d";
  o.shapes = {"B=2,C=256,L=1000,W=4,dtype=bf16,bias=1,silu=1"};
  o.db_path = db.string();
  o.param_overrides = {{"threads", "64|128"}, {"items", "1|2"}, {"cpb", "1|2"}};
  Progress quiet(false);
  TuneReport first = tune(o, quiet);
  REQUIRE(first.problems.size() == 1);
  const ProblemReport& p = first.problems[0];
  REQUIRE(p.winner.has_value());
  CHECK(p.compiled + p.cubins_reused > 0);
  size_t ok = 0;
  for (const auto& v : p.variants) {
    ok += v.outcome == cache::Outcome::ok;
    CHECK_MESSAGE(v.outcome == cache::Outcome::ok, v.config << ": " << v.message);
  }
  CHECK(ok == p.variants.size());

  SUBCASE("a second run finds the winner and compiles nothing") {
    TuneReport again = tune(o, quiet);
    CHECK(again.problems[0].cached);
    CHECK(again.problems[0].compiled == 0);
    CHECK(again.problems[0].winner_config == p.winner_config);
  }

  SUBCASE("the runtime runs the stored winner and it is correct") {
    std::mt19937_64 rng(std::random_device{}());
    ConvCase k("B=2,C=256,L=1000,W=4,dtype=bf16,bias=1,silu=1", rng);
    RuntimeOptions ro;
    ro.database = db.string();
    ro.require_tuned = true;
    Runtime rt(ro);
    DeviceTensor x(k.x), w(k.w), b(k.b);
    HostTensor out(k.x.type, k.x.n);
    out.poison();
    DeviceTensor o2(out);
    CausalConv1dArgs a{};
    a.x = tensor(reinterpret_cast<const void*>(x.get()), ElementType::bf16, {2, 256, 1000});
    a.weight = tensor(reinterpret_cast<const void*>(w.get()), ElementType::bf16, {256, 4});
    a.bias = tensor(reinterpret_cast<const void*>(b.get()), ElementType::bf16, {256});
    a.out = tensor(reinterpret_cast<const void*>(o2.get()), ElementType::bf16, {2, 256, 1000});
    a.silu = 1;
    Selection s = rt.select_causal_conv1d(a);
    CHECK(s.source == "tuned");
    CHECK(s.variant == p.winner_config);
    rt.causal_conv1d(a);
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
    o2.download(out);
    CHECK(relative_error(out, k.ref) <= 1e-2);
    CHECK(rt.loaded_variants() == 1);

    a.x.shape[2] = a.out.shape[2] = 999; // not tuned: require_tuned refuses, no fallback
    CHECK_THROWS_WITH_AS(rt.causal_conv1d(a), doctest::Contains("nothing tuned"), Error);
  }

  SUBCASE("an untuned shape runs the winner of the nearest tuned one, and is correct") {
    std::mt19937_64 rng(std::random_device{}());
    ConvCase k("B=3,C=192,L=777,W=4,dtype=bf16,bias=1,silu=1", rng);
    RuntimeOptions ro;
    ro.database = db.string(); // policy nearest: the default
    Runtime rt(ro);
    DeviceTensor x(k.x), w(k.w), b(k.b);
    HostTensor out(k.x.type, k.x.n);
    out.poison();
    DeviceTensor o2(out);
    CausalConv1dArgs a{};
    a.x = tensor(reinterpret_cast<const void*>(x.get()), ElementType::bf16, {3, 192, 777});
    a.weight = tensor(reinterpret_cast<const void*>(w.get()), ElementType::bf16, {192, 4});
    a.bias = tensor(reinterpret_cast<const void*>(b.get()), ElementType::bf16, {192});
    a.out = tensor(reinterpret_cast<const void*>(o2.get()), ElementType::bf16, {3, 192, 777});
    a.silu = 1;
    Selection s = rt.select_causal_conv1d(a);
    CHECK(s.source == "nearest B=2,C=256,L=1000,W=4,x=bf16,w=bf16,bias=1,silu=1,init_states=0,"
                      "final_states=0,layout=bcl");
    // The winner as the op adapts it to this problem (576 rows: under one wave).
    CHECK(s.variant ==
          format_fields(
              find_op("causal_conv1d").adapt(parse_fields(p.winner_config, "winner"), k.problem)));
    rt.causal_conv1d(a);
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
    o2.download(out);
    CHECK(relative_error(out, k.ref) <= 1e-2);

    SUBCASE("other flags are not comparable: the nearest built-in point of the GPU runs") {
      a.silu = 0;
      CHECK(rt.select_causal_conv1d(a).source.rfind("nearest built-in sm_90a point ", 0) == 0);
    }
  }
  fs::remove(db);
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
}

TEST_CASE("the runtime's default variant handles strided inputs") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  const int B = 2, C = 24, L = 512, W = 3, pad = 40;
  HostTensor xs(DType::bf16, size_t(B) * C * (L + pad));
  xs.randomize(rng, -1, 1);
  HostTensor w(DType::f32, size_t(C) * W);
  w.randomize(rng, -0.5, 0.5);
  auto ref =
      causal_conv1d_reference(xs, w, nullptr, B, C, L, W, true, (long long)C * (L + pad), L + pad);
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::default_variant; // the [default] variant itself
  Runtime rt(ro);
  DeviceTensor x(xs), wd(w);
  HostTensor out(DType::bf16, size_t(B) * C * L);
  out.poison();
  DeviceTensor o(out);
  CausalConv1dArgs a{};
  a.x = tensor(reinterpret_cast<const void*>(x.get()), ElementType::bf16, {B, C, L},
               {(long long)C * (L + pad), L + pad, 1});
  a.weight = tensor(reinterpret_cast<const void*>(wd.get()), ElementType::fp32, {C, W});
  a.out = tensor(reinterpret_cast<const void*>(o.get()), ElementType::bf16, {B, C, L});
  a.silu = 1;
  CHECK(rt.select_causal_conv1d(a).source == "default");
  rt.causal_conv1d(a);
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  o.download(out);
  CHECK(relative_error(out, ref) <= 1e-2);

  SUBCASE("bad arguments are refused before launching, and the context stays healthy") {
    CausalConv1dArgs bad = a;
    SUBCASE("a missing output") {
      bad.out.data = nullptr;
      CHECK_THROWS_WITH_AS(rt.causal_conv1d(bad), doctest::Contains("out is required"), Error);
    }
    SUBCASE("host memory (a CPU tensor passed by mistake)") {
      std::vector<uint16_t> host(size_t(B) * C * L);
      bad.out.data = host.data();
      CHECK_THROWS_WITH_AS(rt.causal_conv1d(bad), doctest::Contains("out is not GPU memory"),
                           Error);
    }
    SUBCASE("an output larger than its allocation") {
      bad.out.strides[0] = 100LL * C * L; // batch 1 lies far past the allocation
      CHECK_THROWS_WITH_AS(rt.causal_conv1d(bad), doctest::Contains("into its allocation"), Error);
    }
    SUBCASE("a weight with fewer channels than x") {
      bad.weight.shape[0] = C / 2;
      CHECK_THROWS_WITH_AS(rt.causal_conv1d(bad), doctest::Contains("weight has shape"), Error);
    }
    SUBCASE("a strided last dimension") {
      bad.x.strides[2] = 2;
      CHECK_THROWS_WITH_AS(rt.causal_conv1d(bad), doctest::Contains("contiguous last dimension"),
                           Error);
    }
    SUBCASE("an output of another dtype") {
      bad.out.dtype = AUTOTUNE_FP16;
      CHECK_THROWS_WITH_AS(rt.causal_conv1d(bad), doctest::Contains("must have the dtype of x"),
                           Error);
    }
    rt.causal_conv1d(a); // the context is healthy: the good call still runs
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  }
}

namespace {

// The driver's virtual memory management calls (libcuda is loaded by then), for memory
// mapped as PyTorch's expandable segments map it.
struct Vmm {
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) free_range = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  CUmemAllocationProp prop{};
  Vmm() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(lib != nullptr);
    auto get = [&](auto& fn, const char* symbol) {
      void* found = dlsym(lib, symbol);
      REQUIRE_MESSAGE(found != nullptr, symbol);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(found);
    };
    get(reserve, "cuMemAddressReserve");
    get(free_range, "cuMemAddressFree");
    get(create, "cuMemCreate");
    get(release, "cuMemRelease");
    get(map, "cuMemMap");
    get(unmap, "cuMemUnmap");
    get(set_access, "cuMemSetAccess");
    get(granularity, "cuMemGetAllocationGranularity");
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
  }
};

// A reserved address range with chunks of physical memory mapped one after another
// from its start, each its own allocation.
struct MappedRange {
  const Vmm& vmm;
  size_t reserved;
  CUdeviceptr va = 0;
  std::vector<std::pair<CUmemGenericAllocationHandle, size_t>> chunks;
  size_t mapped = 0;
  MappedRange(const Vmm& v, size_t bytes) : vmm(v), reserved(bytes) {
    AUTOTUNE_CU(vmm.reserve(&va, reserved, 0, 0, 0));
  }
  void map_chunk(size_t bytes) {
    CUmemGenericAllocationHandle h;
    AUTOTUNE_CU(vmm.create(&h, bytes, &vmm.prop, 0));
    AUTOTUNE_CU(vmm.map(va + mapped, bytes, 0, h, 0));
    CUmemAccessDesc access{};
    access.location = vmm.prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    AUTOTUNE_CU(vmm.set_access(va + mapped, bytes, &access, 1));
    chunks.emplace_back(h, bytes);
    mapped += bytes;
  }
  void unmap_all() {
    size_t at = 0;
    for (const auto& [h, bytes] : chunks) {
      vmm.unmap(va + at, bytes);
      vmm.release(h);
      at += bytes;
    }
    chunks.clear();
    mapped = 0;
  }
  ~MappedRange() {
    unmap_all();
    vmm.free_range(va, reserved);
  }
};

} // namespace

TEST_CASE("allocation checks on memory mapped by cuMemMap: a tensor spanning chunks runs, "
          "views past the mapping or past memory re-mapped smaller are refused") {
  // PyTorch's expandable segments map 2 or 20 MB chunks one after another into a range
  // reserved up front; the driver reports the whole reservation as the allocation of any
  // address in it. The runtime checks the mapped chunk holding a view, follows the
  // chunks mapped right after it, remembers how far views of a range were checked, and
  // asks the driver again past that (forget_device_memory() drops what it remembers).
  context();
  Vmm vmm;
  size_t granularity = 0;
  AUTOTUNE_CU(vmm.granularity(&granularity, &vmm.prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  std::mt19937_64 rng(std::random_device{}());
  const int B = 2, C = 256, L = 4096, W = 4;
  const size_t out_bytes = size_t(B) * C * L * 2; // 4 MiB
  REQUIRE_MESSAGE(out_bytes % (2 * granularity) == 0, "granularity " << granularity);
  HostTensor xs(DType::bf16, size_t(B) * C * L);
  xs.randomize(rng, -1, 1);
  HostTensor w(DType::f32, size_t(C) * W);
  w.randomize(rng, -0.5, 0.5);
  const std::vector<double> ref =
      causal_conv1d_reference(xs, w, nullptr, B, C, L, W, true, (long long)C * L, L);
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::default_variant;
  Runtime rt(ro);
  DeviceTensor x(xs), wd(w);
  CausalConv1dArgs a{};
  a.x = tensor(reinterpret_cast<const void*>(x.get()), ElementType::bf16, {B, C, L});
  a.weight = tensor(reinterpret_cast<const void*>(wd.get()), ElementType::fp32, {C, W});
  a.silu = 1;
  // Batch 1 of the output `spread` batches' worth of elements after batch 0.
  auto out_view = [&](CUdeviceptr p, long long spread) {
    return tensor(reinterpret_cast<const void*>(p), ElementType::bf16, {B, C, L},
                  {spread * C * L, L, 1});
  };
  auto run_and_check = [&](CUdeviceptr p) {
    a.out = out_view(p, 1);
    rt.causal_conv1d(a);
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
    HostTensor out(DType::bf16, size_t(B) * C * L);
    AUTOTUNE_CU(cuda::driver().cuMemcpyDtoH(out.bytes.data(), p, out_bytes));
    CHECK(relative_error(out, ref) <= 1e-2);
  };
  MappedRange range(vmm, 8 * out_bytes);
  // The output in two chunks (each its own allocation to the driver): runs, and right.
  range.map_chunk(out_bytes / 2);
  range.map_chunk(out_bytes / 2);
  run_and_check(range.va);
  // A view past the mapped chunks is refused.
  a.out = out_view(range.va, 2);
  CHECK_THROWS_WITH_AS(rt.causal_conv1d(a), doctest::Contains("into its allocation"), Error);
  // Re-mapped larger: a view of 2.5 outputs runs; re-mapped smaller at the same address,
  // a view reaching further than any checked before is refused, and after
  // forget_device_memory() one as far as before is too.
  range.unmap_all();
  range.map_chunk(4 * out_bytes);
  a.out = out_view(range.va, 4);
  rt.causal_conv1d(a);
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  range.unmap_all();
  range.map_chunk(out_bytes);
  a.out = out_view(range.va, 8);
  CHECK_THROWS_WITH_AS(rt.causal_conv1d(a), doctest::Contains("into its allocation"), Error);
  forget_device_memory();
  a.out = out_view(range.va, 4);
  CHECK_THROWS_WITH_AS(rt.causal_conv1d(a), doctest::Contains("into its allocation"), Error);
  // A view starting in the reserved but unmapped part of the range is not memory at all.
  a.out = out_view(range.va + 6 * out_bytes, 1);
  CHECK_THROWS_WITH_AS(rt.causal_conv1d(a), doctest::Contains("is not GPU memory"), Error);
  run_and_check(range.va);
}

TEST_CASE("causal_conv1d reads x as mamba-ssm's mixer passes it: a view of the in_proj output") {
  // xz = in_proj(...) laid out [2C, B, L] and viewed as [B, 2C, L]: x = xz[:, :C] has
  // batch stride L, below its channel stride B*L.
  context();
  std::mt19937_64 rng(std::random_device{}());
  const int B = 3, C = 40, L = 777, W = 4;
  HostTensor xz(DType::bf16, size_t(2) * C * B * L);
  xz.randomize(rng, -1, 1);
  HostTensor w(DType::bf16, size_t(C) * W), bias(DType::bf16, size_t(C));
  w.randomize(rng, -0.5, 0.5);
  bias.randomize(rng, -0.5, 0.5);
  auto ref = causal_conv1d_reference(xz, w, &bias, B, C, L, W, true, L, (long long)B * L);
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  Runtime rt(ro);
  DeviceTensor x(xz), wd(w), bd(bias);
  HostTensor out(DType::bf16, size_t(B) * C * L);
  out.poison();
  DeviceTensor o(out);
  CausalConv1dArgs a{};
  a.x = tensor(reinterpret_cast<const void*>(x.get()), ElementType::bf16, {B, C, L},
               {L, (long long)B * L, 1});
  a.weight = tensor(reinterpret_cast<const void*>(wd.get()), ElementType::bf16, {C, W});
  a.bias = tensor(reinterpret_cast<const void*>(bd.get()), ElementType::bf16, {C});
  a.out = tensor(reinterpret_cast<const void*>(o.get()), ElementType::bf16, {B, C, L});
  a.silu = 1;
  rt.causal_conv1d(a);
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  o.download(out);
  CHECK(relative_error(out, ref) <= 1e-2);
}

TEST_CASE("ragged rows at every offset and stride read and write only their own elements") {
  // x is a view at an element offset with padded channels (each row at another
  // shift from a 16-byte boundary) or padded batches; out is contiguous at its own
  // offset: ragged rows are tiled by out's shift and read x realigned by the difference
  // (lags of every size), an aligned length whose rows are not aligned runs
  // element by element (vector_mode 0). The elements of out's allocation outside the
  // view must stay poisoned.
  context();
  const auto& op = static_cast<const CausalConv1dOp&>(find_op("causal_conv1d"));
  cuda::DeviceInfo dev = cuda::query_device(0);
  std::mt19937_64 rng(std::random_device{}());
  const char* configs[] = {
      "threads=128,vec=8,items=2,cpb=1,load=direct", "threads=64,vec=4,items=4,cpb=2,load=direct",
      "threads=64,vec=16,items=2,cpb=1,load=direct", "threads=128,vec=8,items=1,cpb=4,load=smem",
      "threads=128,vec=4,items=4,cpb=16,load=smem",  "threads=512,vec=8,items=4,cpb=1,load=smem",
      "threads=128,vec=8,items=4,cpb=8,load=span",   "threads=64,vec=4,items=4,cpb=4,load=span",
  };
  for (auto [C, L] : {std::pair{5, 1},
                      {5, 3},
                      {5, 5},
                      {5, 8},
                      {5, 333},
                      {5, 1000},
                      {5, 4095},
                      {8, 9},
                      {8, 333},
                      {8, 1000},
                      {8, 4095}}) {
    // fp16 and fp32 (16-byte vectors of 8 and 4 elements: lags up to 7 and 3) on two lengths
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      if (dt != DType::bf16 && L != 333 && L != 4095) {
        continue;
      }
      const long long esize = (long long)dtype_size(dt);
      const int B = 2, W = 4;
      const std::string shape = "B=2,C=" + std::to_string(C) + ",L=" + std::to_string(L) +
                                ",W=4,dtype=" + to_string(dt) + ",init_states=1,final_states=1";
      Problem problem = op.make_problem(parse_fields(shape, "shape"));
      for (const char* text : configs) {
        Config config = parse_fields(text, "config");
        if (!op.check(config, problem, dev.arch())) {
          continue;
        }
        VariantSource source = describe_variant(op, config, problem, dev.arch());
        auto binary = compile_variant(source);
        REQUIRE_MESSAGE(binary.ok(), (binary.ok() ? "" : binary.failure().detail));
        cuda::Module m = cuda::load_module(binary->binary);
        CUfunction f = cuda::get_function(m, op.kernel_name());
        for (auto [pad, batch_pad] : {std::pair{0, 0}, {3, 0}, {0, 8}, {0, 5}}) {
          for (auto [x_off, out_off] : {std::pair{0, 0}, {1, 1}, {1, 0}, {3, 6}, {7, 7}}) {
            CAPTURE(std::string(shape));
            CAPTURE(std::string(text));
            CAPTURE(pad);
            CAPTURE(batch_pad);
            CAPTURE(x_off);
            CAPTURE(out_off);
            const long long S = L + pad;
            const long long BS = C * S + batch_pad; // x's batch stride
            HostTensor xs(dt, size_t(x_off) + size_t(B) * BS);
            xs.randomize(rng, -1, 1);
            HostTensor xv(dt, size_t(B) * BS); // the view, for the reference
            for (size_t i = 0; i < xv.n; ++i) {
              xv.set(i, xs.get(size_t(x_off) + i));
            }
            HostTensor w(dt, size_t(C) * W), bias(dt, size_t(C));
            HostTensor init(dt, size_t(B) * C * (W - 1));
            w.randomize(rng, -0.5, 0.5);
            bias.randomize(rng, -0.5, 0.5);
            init.randomize(rng, -1, 1);
            std::vector<double> ref_final;
            auto ref =
                causal_conv1d_reference(xv, w, &bias, B, C, L, W, true, BS, S, &init, &ref_final);
            HostTensor outs(dt, size_t(out_off) + size_t(B) * C * L + 8);
            outs.poison();
            HostTensor fin(dt, init.n);
            fin.poison();
            DeviceTensor xd(xs), wd(w), bd(bias), id(init), od(outs), fd(fin);
            CausalConv1dCall call;
            call.x = xd.get() + CUdeviceptr(x_off * esize);
            call.weight = wd.get();
            call.bias = bd.get();
            call.initial_states = id.get();
            call.out = od.get() + CUdeviceptr(out_off * esize);
            call.final_states = fd.get();
            call.x_batch_stride = BS;
            call.x_channel_stride = S;
            call.out_batch_stride = (long long)C * L;
            call.out_channel_stride = L;
            ArgPack args;
            args.add(op.kernel_args(op.conv_plan(config, problem), call));
            LaunchGeometry g = op.geometry(config, problem);
            AUTOTUNE_CU(cuda::driver().cuLaunchKernel(
                f, g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2],
                g.dynamic_smem, nullptr, args.pointers(), nullptr));
            AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
            od.download(outs);
            HostTensor out(dt, size_t(B) * C * L);
            for (size_t i = 0; i < out.n; ++i) {
              out.set(i, outs.get(size_t(out_off) + i));
            }
            CHECK(relative_error(out, ref) <= op.tolerance(problem));
            for (size_t i = 0; i < outs.n; ++i) {
              if (i < size_t(out_off) || i >= size_t(out_off) + out.n) {
                CHECK_MESSAGE(std::isnan(outs.get(i)), "out element " << i << " written");
              }
            }
            fd.download(fin);
            CHECK(relative_error(fin, ref_final) == 0.0);
          }
        }
      }
    }
  }
}

TEST_CASE("causal_conv1d reads channel-last x as Mamba-2 passes it: xBC.transpose(1, 2)") {
  // zxbcdt = in_proj(u) is [B, L, P]; xBC = zxbcdt[..., off:off + C] is passed as
  // xBC.transpose(1, 2): [B, C, L] with channel stride 1, length stride P, batch stride
  // L*P. out is channel-last [B, L, C] (what causal-conv1d's empty_like gives).
  context();
  std::mt19937_64 rng(std::random_device{}());
  const int B = 3, C = 48, L = 555, W = 4, P = 136, off = 40;
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    CAPTURE(to_string(dt));
    HostTensor zx(dt, size_t(B) * L * P);
    zx.randomize(rng, -1, 1);
    HostTensor w(DType::f32, size_t(C) * W), bias(DType::f32, size_t(C));
    HostTensor init(dt, size_t(B) * C * (W - 1));
    w.randomize(rng, -0.5, 0.5);
    bias.randomize(rng, -0.5, 0.5);
    init.randomize(rng, -1, 1);
    // the reference reads the same memory from the slice's start
    const HostTensor xs = from_offset(zx, off);
    std::vector<double> ref_final;
    auto ref = causal_conv1d_reference(xs, w, &bias, B, C, L, W, true, (long long)L * P, 1, &init,
                                       &ref_final, P);
    RuntimeOptions ro;
    ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
    Runtime rt(ro);
    DeviceTensor x(zx), wd(w), bd(bias), id(init);
    HostTensor out(dt, size_t(B) * L * C), fin(dt, init.n);
    out.poison();
    fin.poison();
    DeviceTensor o(out), f(fin);
    const ElementType et = dt == DType::bf16  ? ElementType::bf16
                           : dt == DType::f16 ? ElementType::fp16
                                              : ElementType::fp32;
    CausalConv1dArgs a{};
    a.x = tensor(reinterpret_cast<const char*>(x.get()) + off * dtype_size(dt), et, {B, C, L},
                 {(long long)L * P, 1, P});
    a.weight = tensor(reinterpret_cast<const void*>(wd.get()), ElementType::fp32, {C, W});
    a.bias = tensor(reinterpret_cast<const void*>(bd.get()), ElementType::fp32, {C});
    a.initial_states = tensor(reinterpret_cast<const void*>(id.get()), et, {B, C, W - 1});
    a.out = tensor(reinterpret_cast<const void*>(o.get()), et, {B, C, L}, {(long long)L * C, 1, C});
    a.final_states = tensor(reinterpret_cast<const void*>(f.get()), et, {B, C, W - 1});
    a.silu = 1;
    rt.causal_conv1d(a);
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
    o.download(out);
    f.download(fin);
    const HostTensor by_channel = channel_first(out, B, C, L);
    const Selection sel = rt.select_causal_conv1d(a);
    CHECK(sel.problem.find("layout=blc") != std::string::npos);
    const Op& op = find_op("causal_conv1d");
    CHECK(relative_error(by_channel, ref) <=
          op.tolerance(op.make_problem(parse_fields(sel.problem, "problem"))));
    CHECK(relative_error(fin, ref_final) == 0.0);
    SUBCASE("an out of the other layout is refused before launching") {
      CausalConv1dArgs bad = a;
      bad.out.strides[0] = (long long)C * L;
      bad.out.strides[1] = L;
      bad.out.strides[2] = 1;
      CHECK_THROWS_WITH_AS(rt.causal_conv1d(bad), doctest::Contains("out must have x's layout"),
                           Error);
      rt.causal_conv1d(a); // the context is healthy
      AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
    }
  }
}

TEST_CASE("packed sequences (seq_idx) run through the runtime on Mamba-2's channel-last view") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  const int B = 2, C = 48, L = 300, W = 4, P = 136, off = 40;
  HostTensor zx(DType::bf16, size_t(B) * L * P);
  zx.randomize(rng, -1, 1);
  HostTensor w(DType::bf16, size_t(C) * W), bias(DType::bf16, size_t(C));
  w.randomize(rng, -0.5, 0.5);
  bias.randomize(rng, -0.5, 0.5);
  const HostTensor xs = from_offset(zx, off);
  // sequences of 7, 1, 2 and the rest of each row (ids need not start at 0)
  std::vector<int> ids(size_t(B) * L);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < L; ++t) {
      ids[size_t(b) * L + t] = 5 + (t >= 7) + (t >= 8) + (t >= 10 + b);
    }
  }
  auto ref = causal_conv1d_reference(xs, w, &bias, B, C, L, W, true, (long long)L * P, 1, nullptr,
                                     nullptr, P, &ids);
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  Runtime rt(ro);
  DeviceTensor x(zx), wd(w), bd(bias);
  cuda::DeviceBuffer seq(ids.size() * sizeof(int));
  seq.upload(ids.data(), ids.size() * sizeof(int));
  HostTensor out(DType::bf16, size_t(B) * L * C);
  out.poison();
  DeviceTensor o(out);
  CausalConv1dArgs a{};
  a.x = tensor(reinterpret_cast<const char*>(x.get()) + off * 2, ElementType::bf16, {B, C, L},
               {(long long)L * P, 1, P});
  a.weight = tensor(reinterpret_cast<const void*>(wd.get()), ElementType::bf16, {C, W});
  a.bias = tensor(reinterpret_cast<const void*>(bd.get()), ElementType::bf16, {C});
  a.out = tensor(reinterpret_cast<const void*>(o.get()), ElementType::bf16, {B, C, L},
                 {(long long)L * C, 1, C});
  a.seq_idx = tensor(reinterpret_cast<const void*>(seq.get()), ElementType::int32, {B, L});
  a.silu = 1;
  rt.causal_conv1d(a);
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  o.download(out);
  const HostTensor by_channel = channel_first(out, B, C, L);
  const Selection sel = rt.select_causal_conv1d(a);
  CHECK(sel.problem.find("layout=blc,seq_idx=1") != std::string::npos);
  CHECK(relative_error(by_channel, ref) <= 1e-2);
  SUBCASE("mistakes are refused before launching") {
    CausalConv1dArgs bad = a;
    SUBCASE("seq_idx of another dtype") {
      bad.seq_idx.dtype = AUTOTUNE_FP32;
      CHECK_THROWS_WITH_AS(rt.causal_conv1d(bad), doctest::Contains("seq_idx"), Error);
    }
    SUBCASE("seq_idx of another length") {
      bad.seq_idx.shape[1] = L - 1;
      CHECK_THROWS_WITH_AS(rt.causal_conv1d(bad), doctest::Contains("seq_idx has shape"), Error);
    }
    SUBCASE("seq_idx with final states") {
      HostTensor fin(DType::bf16, size_t(B) * C * (W - 1));
      DeviceTensor f(fin);
      bad.final_states =
          tensor(reinterpret_cast<const void*>(f.get()), ElementType::bf16, {B, C, W - 1});
      CHECK_THROWS_WITH_AS(rt.causal_conv1d(bad), doctest::Contains("no initial or final states"),
                           Error);
    }
    rt.causal_conv1d(a); // the context is healthy
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  }
}
