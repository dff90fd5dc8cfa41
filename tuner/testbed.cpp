#include "testbed.hpp"

#include "runtime/base/error.hpp"
#include "runtime/dispatch/variant.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

namespace autotune {
namespace {

const char* suffix(DType t) {
  return t == DType::f32 ? "f32" : t == DType::f16 ? "f16" : "bf16";
}

// Modules shared by all testbeds of a process: the testing kernels per arch and
// each op's reference per arch. Loaded into the current context once.
struct SharedModule {
  cuda::Module module;
};

const cuda::Module& shared_module(const std::string& path, const std::string& arch) {
  static std::mutex mutex;
  static std::map<std::string, SharedModule> modules;
  std::lock_guard<std::mutex> lock(mutex);
  std::string key = path + "|" + arch;
  auto it = modules.find(key);
  if (it == modules.end()) {
    cuda::CompileRequest r;
    r.source = template_source(path);
    r.name = path;
    r.arch = arch;
    r.options = base_compile_options();
    auto out = cuda::compile(r);
    if (!out) {
      throw Error(ErrorKind::compile, out.failure().message + "\n" + out.failure().detail);
    }
    it = modules.emplace(key, SharedModule{cuda::load_module(out->binary)}).first;
  }
  return it->second.module;
}

void launch_geometry(CUfunction f, const LaunchGeometry& g, ArgPack& args, CUstream stream) {
  AUTOTUNE_CU(cuda::driver().cuLaunchKernel(f, g.grid[0], g.grid[1], g.grid[2], g.block[0],
                                            g.block[1], g.block[2], g.dynamic_smem, stream,
                                            args.pointers(), nullptr));
}

} // namespace

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  double pos = q * double(v.size() - 1);
  size_t lo = size_t(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

struct Testbed::Impl {
  const Op& op;
  Problem problem;
  cuda::DeviceInfo device;
  std::vector<TensorSpec> specs;
  std::vector<cuda::DeviceBuffer> buffers;
  std::vector<CUdeviceptr> pointers;
  std::vector<cuda::DeviceBuffer> references; // fp32, one per output
  std::vector<CUdeviceptr> reference_pointers;
  cuda::DeviceBuffer accumulators{4 * sizeof(double)};
  cuda::DeviceBuffer flush;              // 2x L2, written between samples
  cuda::DeviceBuffer copy_src, copy_dst; // for time_copy, allocated on demand
  bool flush_needed = false;
  cuda::Stream stream = cuda::create_stream();
  const cuda::Module* testing = nullptr;
  const cuda::Module* reference = nullptr;

  Impl(const Op& o, const Problem& p, const cuda::DeviceInfo& d) : op(o), problem(p), device(d) {}

  CUfunction testing_fn(const std::string& name) const {
    return cuda::get_function(*testing, name.c_str());
  }

  void sync() { AUTOTUNE_CU(cuda::driver().cuStreamSynchronize(stream.get())); }

  void run_elementwise(CUfunction f, ArgPack& args, size_t n) {
    LaunchGeometry g;
    g.block[0] = 256;
    g.grid[0] = unsigned(std::clamp<size_t>((n + 255) / 256, 1, size_t(device.sm_count) * 16));
    launch_geometry(f, g, args, stream.get());
  }

  void poison_outputs() {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!specs[i].output) {
        continue;
      }
      const auto& d = cuda::driver();
      // Quiet NaN in each format: fp32 0x7fc00000, fp16 0x7e00, bf16 0x7fc0.
      if (specs[i].dtype == DType::f32) {
        AUTOTUNE_CU(d.cuMemsetD32Async(pointers[i], 0x7fc00000u, specs[i].elements, stream.get()));
      } else {
        unsigned short nan = specs[i].dtype == DType::f16 ? 0x7e00 : 0x7fc0;
        AUTOTUNE_CU(d.cuMemsetD16Async(pointers[i], nan, specs[i].elements, stream.get()));
      }
    }
  }
};

WorkerSeconds& WorkerSeconds::operator+=(const WorkerSeconds& o) {
  context += o.context;
  modules += o.modules;
  allocate += o.allocate;
  inputs += o.inputs;
  copy += o.copy;
  module_load += o.module_load;
  check += o.check;
  timing += o.timing;
  return *this;
}

WorkerSeconds& WorkerSeconds::operator-=(const WorkerSeconds& o) {
  context -= o.context;
  modules -= o.modules;
  allocate -= o.allocate;
  inputs -= o.inputs;
  copy -= o.copy;
  module_load -= o.module_load;
  check -= o.check;
  timing -= o.timing;
  return *this;
}

void Testbed::load_shared_modules(const Op& op, const cuda::DeviceInfo& device) {
  shared_module("common/testing.cuh", device.arch());
  shared_module(op.reference_path(), device.arch());
}

Testbed::Testbed(const Op& op, const Problem& problem, const cuda::DeviceInfo& device)
    : m_impl(std::make_unique<Impl>(op, problem, device)) {
  auto& m = *m_impl;
  m.specs = op.tensors(problem);
  for (const auto& s : m.specs) {
    m.buffers.emplace_back(s.bytes());
    m.pointers.push_back(m.buffers.back().get());
    if (s.output) {
      m.references.emplace_back(s.elements * sizeof(float));
      m.reference_pointers.push_back(m.references.back().get());
    }
  }
  size_t working_set = 0;
  for (const auto& s : m.specs) {
    working_set += s.bytes();
  }
  // A working set within a few L2 sizes would partly be served from L2 on
  // back-to-back launches; overwrite 2x L2 before each sample then.
  m.flush_needed = working_set < size_t(device.l2_bytes) * 4;
  if (m.flush_needed) {
    m.flush = cuda::DeviceBuffer(size_t(device.l2_bytes) * 2);
  }
  m.testing = &shared_module("common/testing.cuh", device.arch());
  m.reference = &shared_module(op.reference_path(), device.arch());
}

Testbed::~Testbed() = default;

size_t Testbed::device_bytes() const {
  size_t total = m_impl->accumulators.size() + m_impl->flush.size() + m_impl->copy_src.size() +
                 m_impl->copy_dst.size();
  for (const auto& b : m_impl->buffers) {
    total += b.size();
  }
  for (const auto& b : m_impl->references) {
    total += b.size();
  }
  return total;
}

void Testbed::randomize(unsigned long long seed) {
  auto& m = *m_impl;
  for (size_t i = 0; i < m.specs.size(); ++i) {
    const auto& s = m.specs[i];
    if (s.output) {
      continue;
    }
    if (!s.values.empty()) {
      // Index tensors (cu_seqlens, block tables): the op's fixed contents.
      m.sync();
      m.buffers[i].upload(s.values.data(), s.values.size() * sizeof(int));
      continue;
    }
    ArgPack args;
    args.add(m.pointers[i]);
    args.add((unsigned long long)s.elements);
    args.add((unsigned long long)(seed * 0x100000001b3ull + i));
    args.add(s.lo);
    args.add(s.hi);
    m.run_elementwise(m.testing_fn(std::string("at_fill_uniform_") + suffix(s.dtype)), args,
                      s.elements);
  }
  ArgPack ref;
  m.op.pack_reference(m.problem, m.pointers, m.reference_pointers, ref);
  launch_geometry(cuda::get_function(*m.reference, m.op.reference_kernel(m.problem).c_str()),
                  m.op.reference_geometry(m.problem), ref, m.stream.get());
  m.sync();
}

void Testbed::launch(CUfunction function, const Config& config) {
  auto& m = *m_impl;
  ArgPack args;
  m.op.pack(config, m.problem, m.pointers, args);
  launch_geometry(function, m.op.geometry(config, m.problem), args, m.stream.get());
}

CheckResult Testbed::check(CUfunction function, const Config& config) {
  auto& m = *m_impl;
  m.poison_outputs();
  launch(function, config);
  m.sync();
  CheckResult r;
  size_t out_index = 0;
  for (size_t i = 0; i < m.specs.size(); ++i) {
    const auto& s = m.specs[i];
    if (!s.output) {
      continue;
    }
    double zero[4] = {0, 0, 0, 0};
    m.accumulators.upload(zero, sizeof zero);
    ArgPack args;
    args.add(m.pointers[i]);
    args.add(m.reference_pointers[out_index++]);
    args.add((unsigned long long)s.elements);
    args.add(m.accumulators.get());
    m.run_elementwise(m.testing_fn(std::string("at_compare_") + suffix(s.dtype)), args, s.elements);
    m.sync();
    double acc[4];
    m.accumulators.download(acc, sizeof acc);
    double rel = acc[1] > 0 ? std::sqrt(acc[0] / acc[1]) : std::sqrt(acc[0]);
    r.rel_err = std::max(r.rel_err, rel);
    r.max_abs_err = std::max(r.max_abs_err, acc[2]);
    r.non_finite += (long long)acc[3];
  }
  double tol = m.op.tolerance(m.problem);
  r.passed = r.non_finite == 0 && r.rel_err <= tol;
  if (!r.passed) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "relative error %.3g (tolerance %.3g), max abs error %.3g, %lld outputs not "
                  "finite or never written",
                  r.rel_err, tol, r.max_abs_err, r.non_finite);
    r.message = buf;
  }
  return r;
}

namespace {

template <typename LaunchOnce>
Timing time_with(Testbed::Impl& m, const TimingProtocol& p, LaunchOnce&& launch_once,
                 std::vector<double>* samples_out = nullptr) {
  const auto& d = cuda::driver();
  for (int i = 0; i < p.warmup; ++i) {
    launch_once();
  }
  m.sync();
  const int batch = std::max(1, p.batch);
  std::vector<cuda::Event> start, stop;
  for (int i = 0; i < batch; ++i) {
    start.push_back(cuda::create_event());
    stop.push_back(cuda::create_event());
  }
  std::vector<double> samples;
  auto t0 = std::chrono::steady_clock::now();
  while (true) {
    for (int i = 0; i < batch; ++i) {
      if (m.flush_needed) {
        AUTOTUNE_CU(d.cuMemsetD32Async(m.flush.get(), unsigned(samples.size() + i),
                                       m.flush.size() / 4, m.stream.get()));
      }
      AUTOTUNE_CU(d.cuEventRecord(start[i].get(), m.stream.get()));
      launch_once();
      AUTOTUNE_CU(d.cuEventRecord(stop[i].get(), m.stream.get()));
    }
    m.sync();
    for (int i = 0; i < batch; ++i) {
      float ms = 0;
      AUTOTUNE_CU(d.cuEventElapsedTime(&ms, start[i].get(), stop[i].get()));
      samples.push_back(double(ms) * 1000.0);
    }
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int n = int(samples.size());
    if (n >= p.max_samples || elapsed >= p.max_seconds) {
      break;
    }
    if (n >= p.min_samples && elapsed >= p.min_seconds) {
      double med = percentile(samples, 0.5);
      double spread = (percentile(samples, 0.9) - percentile(samples, 0.1)) / med;
      if (spread <= p.target_spread) {
        break;
      }
    }
  }
  Timing t;
  t.median_us = percentile(samples, 0.5);
  t.p10_us = percentile(samples, 0.1);
  t.p90_us = percentile(samples, 0.9);
  t.samples = int(samples.size());
  if (samples_out) {
    *samples_out = std::move(samples);
  }
  return t;
}

} // namespace

Timing Testbed::time(CUfunction function, const Config& config, const TimingProtocol& protocol,
                     std::vector<double>* samples_us) {
  auto& m = *m_impl;
  ArgPack args;
  m.op.pack(config, m.problem, m.pointers, args);
  LaunchGeometry g = m.op.geometry(config, m.problem);
  return time_with(
      m, protocol, [&] { launch_geometry(function, g, args, m.stream.get()); }, samples_us);
}

Timing Testbed::time_copy(const TimingProtocol& protocol) {
  auto& m = *m_impl;
  size_t half = size_t(m.op.bytes(m.problem) / 2);
  half = (half + 15) / 16 * 16;
  if (m.copy_src.size() < half) {
    m.copy_src = cuda::DeviceBuffer(half);
    m.copy_dst = cuda::DeviceBuffer(half);
    AUTOTUNE_CU(cuda::driver().cuMemsetD8Async(m.copy_src.get(), 0x3c, half, m.stream.get()));
  }
  return time_with(m, protocol, [&] {
    AUTOTUNE_CU(
        cuda::driver().cuMemcpyDtoDAsync(m.copy_dst.get(), m.copy_src.get(), half, m.stream.get()));
  });
}

} // namespace autotune
