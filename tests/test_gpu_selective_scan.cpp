// GPU tests for selective_scan: a spread of variants against a float64 CPU
// reference over dtypes, N in {4..64}, groups, lengths that are no multiple of any
// chunk, B and C each fixed or variable and the optional parts on and off; the GPU
// reference kernel against the same CPU reference; the tune -> store -> dispatch
// round trip; strided calls through the runtime's default variant; one fixed and
// one variable B/C through the runtime as mamba-ssm passes them; pinned state-form
// variants over ragged L and rows that no vector access could align.
#include "gpu_support.hpp"

#include "runtime/dispatch/autotune.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/selective_scan.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"
#include "tuner/compile.hpp"
#include "tuner/progress.hpp"
#include "tuner/tuner.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <memory>

using namespace autotune;
using namespace autotune::test;
namespace fs = std::filesystem;

namespace {

const SelectiveScanOp& scan_op() {
  return static_cast<const SelectiveScanOp&>(find_op("selective_scan"));
}

// A runtime that runs `config` for every call (no database).
RuntimeOptions pinned_options(const std::string& config) {
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::pin;
  ro.pinned = config;
  return ro;
}

struct ScanReference {
  std::vector<double> out;  // [B, D, L]
  std::vector<double> last; // [B, D, N]
};

// The recurrence in float64, in order, over contiguous host tensors named as in
// SelectiveScanOp::tensors().
ScanReference scan_reference(const Problem& p, const std::map<std::string, const HostTensor*>& t) {
  const long long B = p.get_int("B"), D = p.get_int("D"), L = p.get_int("L"), N = p.get_int("N"),
                  G = p.get_int("G");
  const std::string& var_bc = p.get("var_bc"); // 0, 1, B or C (only that one variable)
  const bool var_b = var_bc == "1" || var_bc == "B", var_c = var_bc == "1" || var_bc == "C";
  const bool softplus = p.get_int("softplus") != 0;
  auto opt = [&](const char* name) -> const HostTensor* {
    auto it = t.find(name);
    return it == t.end() ? nullptr : it->second;
  };
  const HostTensor &u = *t.at("u"), &delta = *t.at("delta"), &A = *t.at("A"), &Bt = *t.at("B"),
                   &Ct = *t.at("C");
  const HostTensor* Dt = p.get_int("has_d") ? opt("D") : nullptr;
  const HostTensor* z = p.get_int("has_z") ? opt("z") : nullptr;
  const HostTensor* bias = p.get_int("delta_bias") ? opt("delta_bias") : nullptr;
  ScanReference r;
  r.out.resize(size_t(B * D * L));
  r.last.resize(size_t(B * D * N));
  std::vector<double> h(static_cast<size_t>(N));
  for (long long b = 0; b < B; ++b) {
    for (long long d = 0; d < D; ++d) {
      const long long g = d / (D / G);
      std::fill(h.begin(), h.end(), 0.0);
      for (long long t0 = 0; t0 < L; ++t0) {
        const size_t row = size_t((b * D + d) * L + t0);
        double x = double(delta.get(row)) + (bias ? double(bias->get(size_t(d))) : 0.0);
        if (softplus) {
          x = x > 20.0 ? x : std::log1p(std::exp(x));
        }
        const double uu = u.get(row);
        double y = 0;
        for (long long n = 0; n < N; ++n) {
          const size_t var = size_t(((b * G + g) * N + n) * L + t0), fixed = size_t(d * N + n);
          h[size_t(n)] = std::exp(x * double(A.get(size_t(d * N + n)))) * h[size_t(n)] +
                         x * double(Bt.get(var_b ? var : fixed)) * uu;
          y += double(Ct.get(var_c ? var : fixed)) * h[size_t(n)];
        }
        if (Dt) {
          y += double(Dt->get(size_t(d))) * uu;
        }
        if (z) {
          const double zz = z->get(row);
          y *= zz / (1.0 + std::exp(-zz));
        }
        r.out[row] = y;
      }
      for (long long n = 0; n < N; ++n) {
        r.last[size_t((b * D + d) * N + n)] = h[size_t(n)];
      }
    }
  }
  return r;
}

// One problem's tensors on host and device (inputs random in the op's ranges,
// outputs NaN), with the float64 reference.
struct ScanCase {
  Problem problem;
  std::vector<TensorSpec> specs;
  std::vector<HostTensor> host;
  std::vector<std::unique_ptr<DeviceTensor>> device;
  ScanReference ref;

  ScanCase(const std::string& shape, std::mt19937_64& rng)
      : problem(scan_op().make_problem(parse_fields(shape, "shape"))),
        specs(scan_op().tensors(problem)) {
    std::map<std::string, const HostTensor*> named;
    host.reserve(specs.size());
    for (const auto& s : specs) {
      host.emplace_back(s.dtype, s.elements);
      if (s.output) {
        host.back().poison();
      } else {
        host.back().randomize(rng, s.lo, s.hi);
      }
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      named[specs[i].name] = &host[i];
      device.push_back(std::make_unique<DeviceTensor>(host[i]));
    }
    ref = scan_reference(problem, named);
  }

  std::vector<CUdeviceptr> pointers() const {
    std::vector<CUdeviceptr> out;
    for (const auto& d : device) {
      out.push_back(d->get());
    }
    return out;
  }
  void* ptr(const std::string& name) const {
    return reinterpret_cast<void*>(device[index(name)]->get());
  }
  size_t index(const std::string& name) const {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].name == name) {
        return i;
      }
    }
    throw Error(ErrorKind::internal, "no tensor " + name);
  }
  void poison_outputs() {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].output) {
        host[i].poison();
        device[i]->buffer.upload(host[i].bytes.data(), host[i].bytes.size());
      }
    }
  }
  // Largest relative error over the outputs after a launch.
  double error() {
    size_t o = index("out");
    device[o]->download(host[o]);
    double err = relative_error(host[o], ref.out);
    if (problem.get_int("last_state")) {
      size_t l = index("last_state");
      device[l]->download(host[l]);
      err = std::max(err, relative_error(host[l], ref.last));
    }
    return err;
  }
};

// Completes a call of k's problem with its fp32 parameters (A, D, delta_bias) and softplus,
// runs it through rt's pinned variant and waits for it.
void run_pinned(const ScanCase& k, Runtime& rt, SelectiveScanArgs& a) {
  const long long D = k.problem.get_int("D"), N = k.problem.get_int("N");
  a.A = tensor(k.ptr("A"), ElementType::fp32, {D, N});
  a.D = tensor(k.ptr("D"), ElementType::fp32, {D});
  a.delta_bias = tensor(k.ptr("delta_bias"), ElementType::fp32, {D});
  a.delta_softplus = 1;
  Selection s = rt.select_selective_scan(a);
  CHECK(s.source == "pinned");
  rt.selective_scan(a);
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
}

fs::path temp_db() {
  return fs::temp_directory_path() /
         ("autotune-gpu-scan-" + std::to_string(::getpid()) + "-" + std::to_string(rand()) + ".db");
}

void launch(CUfunction f, const LaunchGeometry& g, ArgPack& args) {
  if (g.dynamic_smem > 48 * 1024) {
    cuda::allow_dynamic_smem(f, g.dynamic_smem);
  }
  AUTOTUNE_CU(cuda::driver().cuLaunchKernel(f, g.grid[0], g.grid[1], g.grid[2], g.block[0],
                                            g.block[1], g.block[2], g.dynamic_smem, nullptr,
                                            args.pointers(), nullptr));
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
}

// Configurations that between them take every path of the template: one to four
// warps per scan group, state splits, both scans, items without padding (2, 4),
// scalar and vector accesses, no / some / all exponentials on the polynomial,
// register caps (minblocks), 16 channels per block, static + dynamic shared memory
// over 48 KiB; then the state-parallel form.
const char* k_configs[] = {
    "threads=32,items=16,cpb=1,nsplit=1,scan=shfl,vec=8,poly=0,minblocks=1",
    "threads=128,items=16,cpb=4,nsplit=1,scan=shfl,vec=8,poly=2,minblocks=1",
    "threads=128,items=8,cpb=2,nsplit=1,scan=shfl,vec=4,poly=8,minblocks=1",
    "threads=128,items=8,cpb=1,nsplit=2,scan=shfl,vec=2,poly=1,minblocks=1",
    "threads=256,items=4,cpb=2,nsplit=2,scan=shfl,vec=4,poly=0,minblocks=1",
    "threads=128,items=4,cpb=1,nsplit=1,scan=shfl,vec=4,poly=3,minblocks=1",
    "threads=64,items=16,cpb=1,nsplit=1,scan=smem,vec=8,poly=0,minblocks=1",
    "threads=128,items=8,cpb=2,nsplit=2,scan=smem,vec=8,poly=3,minblocks=1",
    "threads=64,items=2,cpb=2,nsplit=1,scan=shfl,vec=2,poly=4,minblocks=1",
    "threads=32,items=16,cpb=1,nsplit=1,scan=shfl,vec=1,poly=0,minblocks=1",
    "threads=256,items=8,cpb=8,nsplit=1,scan=shfl,vec=8,poly=1,minblocks=2",
    "threads=512,items=8,cpb=16,nsplit=1,scan=shfl,vec=8,poly=0,minblocks=1",
    "threads=256,items=16,cpb=4,nsplit=2,scan=shfl,vec=8,poly=0,minblocks=2",
    // The state-parallel form: 1 to 32 lanes per channel (1 to 16 states per lane),
    // chunks of 16 to 64 steps, 4- and 8-wide vectors, a block wider than D (idle
    // channels), 3 warps, one channel per block (groups of one channel).
    "threads=128,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=1",
    "threads=64,items=16,cpb=16,nsplit=4,scan=state,vec=4,poly=3,minblocks=1",
    "threads=32,items=64,cpb=2,nsplit=16,scan=state,vec=8,poly=8,minblocks=1",
    "threads=256,items=16,cpb=64,nsplit=4,scan=state,vec=8,poly=1,minblocks=2",
    "threads=96,items=24,cpb=3,nsplit=32,scan=state,vec=8,poly=2,minblocks=1",
    "threads=32,items=16,cpb=32,nsplit=1,scan=state,vec=4,poly=0,minblocks=1",
    "threads=32,items=32,cpb=4,nsplit=8,scan=state,vec=4,poly=0,minblocks=1",
    "threads=32,items=16,cpb=1,nsplit=32,scan=state,vec=8,poly=1,minblocks=1",
    "threads=64,items=32,cpb=2,nsplit=32,scan=state,vec=8,poly=0,minblocks=1",
    // Time slices: 2 and 4 per chunk, with 1 to 4 warps per slice.
    "threads=256,items=32,cpb=32,nsplit=4,scan=state,vec=8,poly=0,minblocks=1,tsplit=2",
    "threads=128,items=64,cpb=8,nsplit=4,scan=state,vec=8,poly=1,minblocks=1,tsplit=4",
    "threads=128,items=16,cpb=2,nsplit=16,scan=state,vec=4,poly=0,minblocks=1,tsplit=4",
    "threads=64,items=32,cpb=1,nsplit=32,scan=state,vec=8,poly=0,minblocks=1,tsplit=2",
    "threads=256,items=32,cpb=4,nsplit=16,scan=state,vec=8,poly=0,minblocks=1,tsplit=4",
    // Packed 16-bit (B, C) pairs (skipped where B/C are fp32 or fixed), with slices.
    "threads=128,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=1,bc=pair",
    "threads=64,items=16,cpb=1,nsplit=32,scan=state,vec=4,poly=1,minblocks=1,tsplit=2,bc=pair",
    // Several channels per lane: 2 and 4, 1 to 8 lanes per channel, blocks wider than
    // D (a lane whose second channel is past D), packed pairs.
    "threads=64,items=32,cpb=32,nsplit=4,scan=state,vec=8,poly=0,minblocks=1,cpl=2",
    "threads=32,items=16,cpb=32,nsplit=4,scan=state,vec=4,poly=1,minblocks=1,cpl=4",
    "threads=64,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=1,cpl=2,bc=pair",
    "threads=32,items=64,cpb=8,nsplit=8,scan=state,vec=8,poly=2,minblocks=1,cpl=2",
    "threads=32,items=16,cpb=64,nsplit=1,scan=state,vec=8,poly=0,minblocks=1,cpl=2",
    "threads=32,items=32,cpb=8,nsplit=8,scan=state,vec=8,poly=0,minblocks=1,cpl=2",
    // Partial y stored during the recurrence: 1, 2, 4 and 8 states per lane, 4- and
    // 8-wide vectors, packed pairs, 2 channels per lane.
    "threads=64,items=64,cpb=8,nsplit=8,scan=state,vec=8,poly=0,minblocks=1,ystore=during",
    "threads=64,items=32,cpb=16,nsplit=4,scan=state,vec=8,poly=1,minblocks=1,bc=pair,"
    "ystore=during",
    "threads=32,items=16,cpb=16,nsplit=2,scan=state,vec=4,poly=0,minblocks=1,ystore=during",
    "threads=32,items=16,cpb=2,nsplit=16,scan=state,vec=8,poly=0,minblocks=1,ystore=during",
    "threads=64,items=32,cpb=32,nsplit=4,scan=state,vec=8,poly=0,minblocks=1,cpl=2,"
    "ystore=during",
    // Partial y summed by 1 or 2 shuffle levels: 2 to 32 lanes per channel, stored after
    // and during the scan, packed pairs, several channels per lane, time slices.
    "threads=64,items=64,cpb=8,nsplit=8,scan=state,vec=8,poly=0,minblocks=1,bc=pair,yred=1",
    "threads=128,items=64,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=1,bc=pair,yred=2",
    "threads=64,items=32,cpb=32,nsplit=2,scan=state,vec=8,poly=1,minblocks=1,yred=1",
    "threads=64,items=16,cpb=16,nsplit=4,scan=state,vec=4,poly=0,minblocks=1,yred=2,"
    "ystore=during",
    "threads=32,items=16,cpb=1,nsplit=32,scan=state,vec=8,poly=0,minblocks=1,yred=2",
    "threads=64,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=1,cpl=2,yred=1",
    "threads=256,items=32,cpb=32,nsplit=4,scan=state,vec=8,poly=0,minblocks=1,tsplit=2,"
    "yred=1",
};

} // namespace

TEST_CASE("selective_scan variants match a float64 reference across dtypes, N, G and options") {
  context();
  const auto& op = scan_op();
  cuda::DeviceInfo dev = cuda::query_device(0);
  std::mt19937_64 rng(std::random_device{}());
  const char* shapes[] = {
      "B=2,D=8,L=1000,N=16,dtype=bf16", // the Mamba defaults; L no multiple of a chunk
      "B=1,D=6,L=777,N=4,dtype=fp16,has_z=0,last_state=1", // odd L: scalar accesses
      "B=2,D=8,L=1536,N=8,G=2,dtype=fp32,delta_bias=0,softplus=0,has_d=0,last_state=1",
      "B=1,D=4,L=2100,N=32,G=4,dtype=bf16,last_state=1",
      "B=1,D=3,L=300,N=64,var_bc=0,dtype=fp32,last_state=1",
      "B=2,D=4,L=37,N=16,var_bc=0,dtype=bf16,softplus=0", // shorter than one chunk
      "B=1,D=2,L=4096,N=16,dtype=fp32,last_state=1",      // many chunks: the carry in fp32
      "B=1,D=4,L=512,N=64,G=2,dtype=fp16,last_state=1",
      // One fixed and one variable B/C (mamba-ssm's is_variable_B != is_variable_C):
      // with z, D, delta_bias and softplus (the defaults), groups, L no multiple of a
      // chunk, without the optional parts.
      "B=2,D=8,L=1000,N=16,var_bc=B,dtype=bf16,last_state=1",
      "B=2,D=8,L=1000,N=16,var_bc=C,dtype=bf16",
      "B=2,D=8,L=777,N=16,G=2,var_bc=C,dtype=fp16,last_state=1",
      "B=1,D=8,L=1536,N=8,G=2,var_bc=B,dtype=fp32,last_state=1",
      "B=2,D=4,L=300,N=32,var_bc=B,dtype=fp32,delta_bias=0,softplus=0,has_d=0,has_z=0",
      "B=1,D=4,L=2100,N=64,G=2,var_bc=C,dtype=bf16,softplus=0,last_state=1",
      // Ragged rows (the state form's element layout): one step, fewer steps than a
      // vector, a long odd row.
      "B=2,D=5,L=1,N=16,dtype=bf16,last_state=1",
      "B=1,D=6,L=5,N=16,dtype=fp32,var_bc=B,last_state=1",
      "B=1,D=6,L=2047,N=16,dtype=fp16,last_state=1",
  };
  for (const char* shape : shapes) {
    ScanCase k(shape, rng);
    std::vector<Config> configs;
    std::vector<VariantSource> sources;
    for (const char* text : k_configs) {
      Config c = parse_fields(text, "config");
      if (op.check(c, k.problem, dev.arch())) {
        configs.push_back(c);
        sources.push_back(describe_variant(op, c, k.problem, dev.arch()));
      }
    }
    REQUIRE(configs.size() >= 5);
    std::vector<CompileJob> jobs;
    for (const auto& s : sources) {
      jobs.push_back({&s});
    }
    compile_all(jobs, default_jobs(), [](CompileJob&, size_t) {});
    for (size_t i = 0; i < configs.size(); ++i) {
      CAPTURE(std::string(shape));
      CAPTURE(sources[i].config_id);
      REQUIRE_MESSAGE(jobs[i].output.ok(),
                      (jobs[i].output.ok() ? "" : jobs[i].output.failure().detail));
      cuda::Module m = cuda::load_module(jobs[i].output->binary);
      CUfunction f = cuda::get_function(m, op.kernel_name());
      k.poison_outputs();
      ArgPack args;
      op.pack(configs[i], k.problem, k.pointers(), args);
      launch(f, op.geometry(configs[i], k.problem), args);
      double err = k.error();
      CHECK(err <= op.tolerance(k.problem));
    }
    MESSAGE(shape << ": " << configs.size() << " variants checked");
  }
}

TEST_CASE("the selective_scan GPU reference kernel agrees with the float64 CPU reference") {
  context();
  const auto& op = scan_op();
  cuda::DeviceInfo dev = cuda::query_device(0);
  cuda::CompileRequest r;
  r.source = template_source(op.reference_path());
  r.name = op.reference_path();
  r.arch = dev.arch();
  r.options = base_compile_options();
  auto compiled = cuda::compile(r);
  REQUIRE_MESSAGE(compiled.ok(), (compiled.ok() ? "" : compiled.failure().detail));
  cuda::Module m = cuda::load_module(compiled->binary);
  std::mt19937_64 rng(std::random_device{}());
  for (const char* shape : {"B=2,D=8,L=1000,N=16,dtype=bf16,last_state=1",
                            "B=1,D=4,L=600,N=64,G=2,dtype=fp32,softplus=0,has_z=0,last_state=1",
                            "B=2,D=3,L=100,N=4,var_bc=0,dtype=fp16,has_d=0,last_state=1",
                            "B=2,D=4,L=300,N=16,G=2,var_bc=B,dtype=bf16,last_state=1",
                            "B=1,D=6,L=200,N=8,var_bc=C,dtype=fp32,softplus=0,last_state=1"}) {
    CAPTURE(std::string(shape));
    ScanCase k(shape, rng);
    std::vector<cuda::DeviceBuffer> refs;
    std::vector<CUdeviceptr> ref_ptrs;
    refs.emplace_back(k.ref.out.size() * 4);
    refs.emplace_back(k.ref.last.size() * 4);
    ref_ptrs = {refs[0].get(), refs[1].get()};
    ArgPack args;
    op.pack_reference(k.problem, k.pointers(), ref_ptrs, args);
    CUfunction f = cuda::get_function(m, op.reference_kernel(k.problem).c_str());
    launch(f, op.reference_geometry(k.problem), args);
    HostTensor out(DType::f32, k.ref.out.size()), last(DType::f32, k.ref.last.size());
    refs[0].download(out.bytes.data(), out.bytes.size());
    refs[1].download(last.bytes.data(), last.bytes.size());
    CHECK(relative_error(out, k.ref.out) <= 1e-5);
    CHECK(relative_error(last, k.ref.last) <= 1e-5);
  }
}

TEST_CASE("tuning selective_scan stores a winner that the runtime then dispatches") {
  context();
  fs::path db = temp_db();
  const std::string shape = "B=2,D=64,L=2048,N=16,dtype=bf16";
  TuneOptions o;
  o.op = "selective_scan";
  o.shapes = {shape};
  o.db_path = db.string();
  o.param_overrides = {{"threads", "32|128"}, {"items", "8|16"}, {"poly", "0|2"}};
  Progress quiet(false);
  TuneReport first = tune(o, quiet);
  REQUIRE(first.problems.size() == 1);
  const ProblemReport& p = first.problems[0];
  REQUIRE(p.winner.has_value());
  for (const auto& v : p.variants) {
    CHECK_MESSAGE(v.outcome == cache::Outcome::ok, v.config << ": " << v.message);
  }

  std::mt19937_64 rng(std::random_device{}());
  ScanCase k(shape, rng);
  RuntimeOptions ro;
  ro.database = db.string();
  ro.require_tuned = true;
  Runtime rt(ro);
  auto vp = [&](const char* name) {
    return reinterpret_cast<void*>(k.device[k.index(name)]->get());
  };
  const int64_t B = 2, D = 64, L = 2048, N = 16;
  auto bf16 = [&](const char* name, std::initializer_list<int64_t> dims) {
    return tensor(vp(name), ElementType::bf16, dims);
  };
  auto f32 = [&](const char* name, std::initializer_list<int64_t> dims) {
    return tensor(vp(name), ElementType::fp32, dims);
  };
  SelectiveScanArgs a{};
  a.u = bf16("u", {B, D, L});
  a.delta = bf16("delta", {B, D, L});
  a.A = f32("A", {D, N});
  a.B = bf16("B", {B, N, L}); // mamba-ssm's [batch, N, L]: one group
  a.C = bf16("C", {B, 1, N, L});
  a.D = f32("D", {D});
  a.z = bf16("z", {B, D, L});
  a.delta_bias = f32("delta_bias", {D});
  a.out = bf16("out", {B, D, L});
  a.delta_softplus = 1;
  Selection s = rt.select_selective_scan(a);
  CHECK(s.source == "tuned");
  CHECK(s.variant == p.winner_config);
  rt.selective_scan(a);
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  CHECK(k.error() <= 1e-2);

  for (Tensor* t : {&a.u, &a.delta, &a.z, &a.out}) {
    t->shape[2] = 2047; // not tuned: require_tuned refuses, no fallback
  }
  a.B.shape[2] = a.C.shape[3] = 2047;
  CHECK_THROWS_WITH_AS(rt.selective_scan(a), doctest::Contains("nothing tuned"), Error);
  fs::remove(db);
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
}

TEST_CASE("the runtime's default selective_scan variant handles strided tensors") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  // Contiguous case for the reference; the device copies get padded rows.
  const long long B = 2, D = 6, L = 640, N = 8, G = 2, pad = 24;
  ScanCase k("B=2,D=6,L=640,N=8,G=2,dtype=fp16,last_state=1", rng);
  auto padded = [&](const HostTensor& h, long long rows) {
    HostTensor p(h.type, size_t(rows * (L + pad)));
    p.poison();
    for (long long r = 0; r < rows; ++r) {
      for (long long t = 0; t < L; ++t) {
        p.set(size_t(r * (L + pad) + t), h.get(size_t(r * L + t)));
      }
    }
    return p;
  };
  HostTensor u = padded(k.host[k.index("u")], B * D);
  HostTensor delta = padded(k.host[k.index("delta")], B * D);
  HostTensor z = padded(k.host[k.index("z")], B * D);
  HostTensor bm = padded(k.host[k.index("B")], B * G * N);
  HostTensor cm = padded(k.host[k.index("C")], B * G * N);
  HostTensor out(DType::f16, size_t(B * D * L));
  out.poison();
  DeviceTensor du(u), dd(delta), dz(z), db(bm), dc(cm), dout(out);
  HostTensor last(DType::f32, size_t(B * D * N));
  last.poison();
  DeviceTensor dlast(last);
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::default_variant; // the [default] variant itself
  Runtime rt(ro);
  auto vp = [&](const char* name) {
    return reinterpret_cast<void*>(k.device[k.index(name)]->get());
  };
  auto ptr = [](const DeviceTensor& t) { return reinterpret_cast<void*>(t.get()); };
  const long long row = L + pad;
  auto rows = [&](const DeviceTensor& t) {
    return tensor(ptr(t), ElementType::fp16, {B, D, L}, {D * row, row, 1});
  };
  auto groups = [&](const DeviceTensor& t) {
    return tensor(ptr(t), ElementType::fp16, {B, G, N, L}, {G * N * row, N * row, row, 1});
  };
  SelectiveScanArgs a{};
  a.u = rows(du);
  a.delta = rows(dd);
  a.z = rows(dz);
  a.B = groups(db);
  a.C = groups(dc);
  a.A = tensor(vp("A"), ElementType::fp32, {D, N});
  a.D = tensor(vp("D"), ElementType::fp32, {D});
  a.delta_bias = tensor(vp("delta_bias"), ElementType::fp32, {D});
  a.out = tensor(ptr(dout), ElementType::fp16, {B, D, L});
  a.last_state = tensor(ptr(dlast), ElementType::fp32, {B, D, N});
  a.delta_softplus = 1;
  CHECK(rt.select_selective_scan(a).source == "default");
  rt.selective_scan(a);
  AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  dout.download(out);
  dlast.download(last);
  CHECK(relative_error(out, k.ref.out) <= 2e-3);
  CHECK(relative_error(last, k.ref.last) <= 1e-4);

  SUBCASE("bad arguments are refused before launching") {
    SelectiveScanArgs bad = a;
    SUBCASE("a missing output") {
      bad.out.data = nullptr;
      CHECK_THROWS_WITH_AS(rt.selective_scan(bad), doctest::Contains("out is required"), Error);
    }
    SUBCASE("a bf16 A") {
      bad.A.dtype = AUTOTUNE_BF16;
      CHECK_THROWS_WITH_AS(rt.selective_scan(bad), doctest::Contains("A is bf16; it must be fp32"),
                           Error);
    }
    SUBCASE("fp32 variable B with fp16 u") {
      bad.B.dtype = AUTOTUNE_FP32;
      CHECK_THROWS_WITH_AS(rt.selective_scan(bad), doctest::Contains("must have the dtype of u"),
                           Error);
    }
    SUBCASE("a fixed C that is not fp32") {
      bad.C = a.A; // [D, N]: the fixed form
      bad.C.dtype = AUTOTUNE_FP16;
      CHECK_THROWS_WITH_AS(rt.selective_scan(bad), doctest::Contains("C is fp16; it must be fp32"),
                           Error);
    }
    SUBCASE("a last state of the wrong shape") {
      bad.last_state.shape[2] = N + 1;
      CHECK_THROWS_WITH_AS(rt.selective_scan(bad), doctest::Contains("last_state has shape"),
                           Error);
    }
    SUBCASE("a strided last dimension") {
      bad.u.strides[2] = 2;
      CHECK_THROWS_WITH_AS(rt.selective_scan(bad), doctest::Contains("contiguous last dimension"),
                           Error);
    }
    rt.selective_scan(a); // the context is healthy
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
  }
}

// One fixed and one variable B/C through the C ABI, in the shapes mamba-ssm passes
// ([D, N] fp32 with [B, N, L] or [B, G, N, L]), with padded rows, under the default
// variant and the heuristic policy (whose packed-pair points need both variable).
TEST_CASE("the runtime takes selective_scan calls with one fixed and one variable B/C") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  const long long B = 2, D = 8, L = 1000, N = 16, pad = 24;
  for (const char* mix : {"B", "C"}) {
    for (long long G : {1, 2}) {
      for (Policy policy : {Policy::default_variant, Policy::heuristic}) {
        const std::string shape = "B=2,D=8,L=1000,N=16,G=" + std::to_string(G) + ",var_bc=" + mix +
                                  ",dtype=bf16,last_state=1";
        CAPTURE(std::string(shape));
        CAPTURE(int(policy));
        ScanCase k(shape, rng);
        const bool var_b = std::string(mix) == "B";
        const HostTensor& var_host = k.host[k.index(var_b ? "B" : "C")];
        HostTensor padded(DType::bf16, size_t(B * G * N * (L + pad)));
        padded.poison();
        for (long long r = 0; r < B * G * N; ++r) {
          for (long long t = 0; t < L; ++t) {
            padded.set(size_t(r * (L + pad) + t), var_host.get(size_t(r * L + t)));
          }
        }
        DeviceTensor dvar(padded);
        HostTensor out(DType::bf16, size_t(B * D * L)), last(DType::f32, size_t(B * D * N));
        out.poison();
        last.poison();
        DeviceTensor dout(out), dlast(last);
        RuntimeOptions ro;
        ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
        ro.policy = policy;
        Runtime rt(ro);
        auto vp = [&](const char* name) {
          return reinterpret_cast<void*>(k.device[k.index(name)]->get());
        };
        const long long row = L + pad;
        Tensor variable = G == 1 ? tensor(reinterpret_cast<void*>(dvar.get()), ElementType::bf16,
                                          {B, N, L}, {N * row, row, 1})
                                 : tensor(reinterpret_cast<void*>(dvar.get()), ElementType::bf16,
                                          {B, G, N, L}, {G * N * row, N * row, row, 1});
        Tensor fixed = tensor(vp(var_b ? "C" : "B"), ElementType::fp32, {D, N});
        SelectiveScanArgs a{};
        a.u = tensor(vp("u"), ElementType::bf16, {B, D, L});
        a.delta = tensor(vp("delta"), ElementType::bf16, {B, D, L});
        a.A = tensor(vp("A"), ElementType::fp32, {D, N});
        a.B = var_b ? variable : fixed;
        a.C = var_b ? fixed : variable;
        a.D = tensor(vp("D"), ElementType::fp32, {D});
        a.z = tensor(vp("z"), ElementType::bf16, {B, D, L});
        a.delta_bias = tensor(vp("delta_bias"), ElementType::fp32, {D});
        a.out = tensor(reinterpret_cast<void*>(dout.get()), ElementType::bf16, {B, D, L});
        a.last_state = tensor(reinterpret_cast<void*>(dlast.get()), ElementType::fp32, {B, D, N});
        a.delta_softplus = 1;
        Selection s = rt.select_selective_scan(a);
        MESSAGE(shape << ": " << s.source << " " << s.variant);
        rt.selective_scan(a);
        AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
        dout.download(out);
        dlast.download(last);
        CHECK(relative_error(out, k.ref.out) <= 1e-2);
        CHECK(relative_error(last, k.ref.last) <= 1e-4);
      }
    }
  }
}

TEST_CASE("tuning a selective_scan with fixed B and variable C verifies and stores a winner") {
  context();
  fs::path db = temp_db();
  TuneOptions o;
  o.op = "selective_scan";
  o.shapes = {"B=2,D=64,L=1000,N=16,G=2,var_bc=C,dtype=bf16,last_state=1"};
  o.db_path = db.string();
  // Both families, a few variants each: the tuner checks each against the reference.
  o.param_overrides = {{"threads", "32|128"}, {"items", "16|32"},  {"scan", "shfl|state"},
                       {"minblocks", "1"},    {"tsplit", "1"},     {"bc", "f32"},
                       {"cpl", "1"},          {"ystore", "after"}, {"yred", "0|1"}};
  Progress quiet(false);
  TuneReport r = tune(o, quiet);
  REQUIRE(r.problems.size() == 1);
  const ProblemReport& p = r.problems[0];
  REQUIRE(p.winner.has_value());
  CHECK(p.variants.size() >= 2);
  for (const auto& v : p.variants) {
    CHECK_MESSAGE(v.outcome == cache::Outcome::ok, v.config << ": " << v.message);
  }
  fs::remove(db);
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
}

// The state form over ragged and misaligned rows, through the runtime with a pinned
// variant: every [.., L] tensor (u, delta, z, variable B/C, out) is a strided view
// whose rows start one element past an odd row pitch, so no row is 16-byte aligned;
// L is ragged (the AT_RAGGED build: the element layout), a multiple of 8 (the aligned
// build's one-element fallback) and shorter than a chunk; D = 40 leaves channels past
// D in the last block. Each ragged run takes its next chunk in registers and through
// shared memory (ragged=regs|async), and whole vectors on shifted timelines
// (ragged=shift: the pitch makes 2, 8 or 4 classes of rows by their offset). The
// padding of out must stay untouched.
TEST_CASE("pinned state-form selective_scan variants take ragged and misaligned strided rows") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  const long long B = 2, D = 40, N = 16, pad = 3, shift = 1;
  const char* k_pair =
      "threads=128,items=64,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=1,tsplit=1,"
      "bc=pair,cpl=1,ystore=after,yred=1";
  const char* k_f32 = "threads=64,items=32,cpb=16,nsplit=4,scan=state,vec=8,poly=0,minblocks=1,"
                      "tsplit=1,bc=f32,cpl=1,ystore=after,yred=1";
  const char* k_wide = "threads=128,items=32,cpb=64,nsplit=2,scan=state,vec=8,poly=0,minblocks=1,"
                       "tsplit=1,bc=f32,cpl=1,ystore=after,yred=1";
  struct Run {
    const char* dtype;
    const char* extra; // problem fields besides B, D, L, N
    const char* config;
  };
  const Run runs[] = {
      {"bf16", "last_state=1", k_pair},         {"bf16", "", k_wide},
      {"fp16", "has_z=0,last_state=1", k_f32},  {"fp32", "last_state=1", k_f32},
      {"bf16", "var_bc=C,last_state=1", k_f32},
  };
  for (long long L : {641LL, 640LL, 7LL}) {
    for (const Run& run : runs) {
      for (const char* mode : {"regs", "async", "shift"}) {
        const std::string config = std::string(run.config) + ",ragged=" + mode;
        const std::string shape = "B=2,D=40,L=" + std::to_string(L) + ",N=16,dtype=" + run.dtype +
                                  (*run.extra ? std::string(",") + run.extra : std::string());
        CAPTURE(std::string(shape));
        CAPTURE(config);
        ScanCase k(shape, rng);
        const Problem& p = k.problem;
        const DType dt = parse_dtype(run.dtype, "dtype");
        const ElementType et = dt == DType::f32   ? ElementType::fp32
                               : dt == DType::f16 ? ElementType::fp16
                                                  : ElementType::bf16;
        const long long row = L + pad;
        auto padded = [&](const HostTensor& h, long long rows) {
          HostTensor q(h.type, size_t(shift + rows * row));
          q.poison();
          for (long long r = 0; r < rows; ++r) {
            for (long long t = 0; t < L; ++t) {
              q.set(size_t(shift + r * row + t), h.get(size_t(r * L + t)));
            }
          }
          return q;
        };
        const bool var_b = p.get("var_bc") == "1" || p.get("var_bc") == "B";
        const bool var_c = p.get("var_bc") == "1" || p.get("var_bc") == "C";
        const bool has_z = p.get_int("has_z") != 0;
        HostTensor u = padded(k.host[k.index("u")], B * D);
        HostTensor delta = padded(k.host[k.index("delta")], B * D);
        HostTensor z = has_z ? padded(k.host[k.index("z")], B * D) : HostTensor(dt, 1);
        HostTensor bm = var_b ? padded(k.host[k.index("B")], B * N) : HostTensor(dt, 1);
        HostTensor cm = var_c ? padded(k.host[k.index("C")], B * N) : HostTensor(dt, 1);
        HostTensor out(dt, size_t(shift + B * D * row));
        out.poison();
        HostTensor last(DType::f32, size_t(B * D * N));
        last.poison();
        DeviceTensor du(u), dd(delta), dz(z), db(bm), dc(cm), dout(out), dlast(last);
        Runtime rt(pinned_options(config));
        auto vp = [&](const char* name) { return k.ptr(name); };
        const size_t esize = dtype_size(dt);
        auto at = [&](const DeviceTensor& t) {
          return reinterpret_cast<void*>(t.get() + shift * esize);
        };
        auto rows = [&](const DeviceTensor& t) {
          return tensor(at(t), et, {B, D, L}, {D * row, row, 1});
        };
        SelectiveScanArgs a{};
        a.u = rows(du);
        a.delta = rows(dd);
        if (has_z) {
          a.z = rows(dz);
        }
        a.B = var_b ? tensor(at(db), et, {B, N, L}, {N * row, row, 1})
                    : tensor(vp("B"), ElementType::fp32, {D, N});
        a.C = var_c ? tensor(at(dc), et, {B, N, L}, {N * row, row, 1})
                    : tensor(vp("C"), ElementType::fp32, {D, N});
        a.out = rows(dout);
        if (p.get_int("last_state")) {
          a.last_state = tensor(reinterpret_cast<void*>(dlast.get()), ElementType::fp32, {B, D, N});
        }
        run_pinned(k, rt, a);
        dout.download(out);
        HostTensor dense(dt, size_t(B * D * L));
        bool pad_kept = std::isnan(out.get(0));
        for (long long r = 0; r < B * D; ++r) {
          for (long long t = 0; t < row; ++t) {
            const float v = out.get(size_t(shift + r * row + t));
            if (t < L) {
              dense.set(size_t(r * L + t), v);
            } else {
              pad_kept = pad_kept && std::isnan(v);
            }
          }
        }
        CHECK(pad_kept);
        CHECK(relative_error(dense, k.ref.out) <= scan_op().tolerance(p));
        if (p.get_int("last_state")) {
          dlast.download(last);
          CHECK(relative_error(last, k.ref.last) <= 1e-4);
        }
      }
    }
  }
}

// ragged=shift through the runtime on the layouts models pass: u, delta, z and out as
// Mamba lays them out ([D, B, L] memory, z the second half of an xz buffer: the rows
// share their offsets, the shifted timelines run), as contiguous [B, D, L] tensors,
// and mixed (u contiguous, delta in Mamba's layout, z one element off: the kernel
// runs as ragged=async), with two B/C groups whose blocks can or cannot keep to one
// group. Positions of out's buffer outside the call's rows (mixed: a padded out) stay
// untouched.
TEST_CASE("ragged=shift takes Mamba's layouts and falls back where rows disagree") {
  context();
  std::mt19937_64 rng(std::random_device{}());
  const char* k_configs[] = {
      "threads=128,items=64,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=1,tsplit=1,"
      "bc=pair,cpl=1,ystore=after,yred=2,ragged=shift",
      "threads=64,items=32,cpb=16,nsplit=4,scan=state,vec=8,poly=0,minblocks=1,tsplit=1,"
      "bc=f32,cpl=1,ystore=after,yred=1,ragged=shift"};
  struct Layout {
    long long base, bs, ds, size; // element (b, d, t) at base + b * bs + d * ds + t
  };
  for (const char* shape :
       {"B=3,D=40,L=1001,N=16,last_state=1", "B=2,D=256,G=2,L=1002,N=16",
        "B=2,D=96,G=2,L=333,N=16,dtype=fp16", "B=3,D=40,L=5,N=16,dtype=fp32,last_state=1"}) {
    for (const char* layout : {"mamba", "contiguous", "mixed"}) {
      for (const char* config : k_configs) {
        if (std::string(shape).find("fp32") != std::string::npos &&
            std::string(config).find("bc=pair") != std::string::npos) {
          continue; // pairs pack 16-bit B and C
        }
        CAPTURE(std::string(shape));
        CAPTURE(std::string(layout));
        CAPTURE(std::string(config));
        ScanCase k(shape, rng);
        const Problem& p = k.problem;
        const long long B = p.get_int("B"), D = p.get_int("D"), L = p.get_int("L"),
                        N = p.get_int("N"), G = p.get_int("G");
        const DType dt = parse_dtype(p.get("dtype"), "dtype");
        const ElementType et = dt == DType::f32   ? ElementType::fp32
                               : dt == DType::f16 ? ElementType::fp16
                                                  : ElementType::bf16;
        const Layout dense{0, D * L, L, B * D * L};
        const Layout mamba{0, L, B * L, B * D * L};
        const Layout xz_half{D * B * L, L, B * L, 2 * B * D * L}; // z of Mamba's xz
        const bool is_mamba = std::string(layout) == "mamba";
        const bool mixed = std::string(layout) == "mixed";
        const Layout lu = is_mamba ? mamba : dense;
        const Layout ldelta = is_mamba || mixed ? mamba : dense;
        const Layout lz = is_mamba ? xz_half : mixed ? Layout{1, D * L, L, B * D * L + 1} : dense;
        const Layout lout = is_mamba ? mamba
                            : mixed  ? Layout{3, D * (L + 2), L + 2, 3 + B * D * (L + 2)}
                                     : dense;
        auto place = [&](const HostTensor& h, const Layout& at) {
          HostTensor q(h.type, size_t(at.size));
          q.poison();
          for (long long b = 0; b < B; ++b) {
            for (long long d = 0; d < D; ++d) {
              for (long long t = 0; t < L; ++t) {
                q.set(size_t(at.base + b * at.bs + d * at.ds + t),
                      h.get(size_t((b * D + d) * L + t)));
              }
            }
          }
          return q;
        };
        HostTensor u = place(k.host[k.index("u")], lu);
        HostTensor delta = place(k.host[k.index("delta")], ldelta);
        HostTensor z = place(k.host[k.index("z")], lz);
        HostTensor out(dt, size_t(lout.size));
        out.poison();
        DeviceTensor du(u), dd(delta), dz(z), dout(out);
        Runtime rt(pinned_options(config));
        auto vp = [&](const char* name) { return k.ptr(name); };
        const size_t esize = dtype_size(dt);
        auto view = [&](const DeviceTensor& t, const Layout& at) {
          return tensor(reinterpret_cast<void*>(t.get() + at.base * esize), et, {B, D, L},
                        {at.bs, at.ds, 1});
        };
        SelectiveScanArgs a{};
        a.u = view(du, lu);
        a.delta = view(dd, ldelta);
        a.z = view(dz, lz);
        a.out = view(dout, lout);
        a.B = tensor(vp("B"), et, {B, G, N, L});
        a.C = tensor(vp("C"), et, {B, G, N, L});
        if (p.get_int("last_state")) {
          a.last_state = tensor(vp("last_state"), ElementType::fp32, {B, D, N});
        }
        run_pinned(k, rt, a);
        dout.download(out);
        HostTensor got(dt, size_t(B * D * L));
        std::vector<bool> inside(size_t(lout.size), false);
        for (long long b = 0; b < B; ++b) {
          for (long long d = 0; d < D; ++d) {
            for (long long t = 0; t < L; ++t) {
              const size_t at = size_t(lout.base + b * lout.bs + d * lout.ds + t);
              got.set(size_t((b * D + d) * L + t), out.get(at));
              inside[at] = true;
            }
          }
        }
        bool untouched = true;
        for (size_t i = 0; i < inside.size(); ++i) {
          untouched = untouched && (inside[i] || std::isnan(out.get(i)));
        }
        CHECK(untouched);
        CHECK(relative_error(got, k.ref.out) <= scan_op().tolerance(p));
        if (p.get_int("last_state")) {
          HostTensor last(DType::f32, size_t(B * D * N));
          k.device[k.index("last_state")]->download(last);
          CHECK(relative_error(last, k.ref.last) <= 1e-4);
        }
      }
    }
  }
}
