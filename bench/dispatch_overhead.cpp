// Host cost of the runtime's warm path for each op: Runtime::<op> (bind the call's
// tensors, check them, look up the signature's plan, pack, launch) against a bare
// cuLaunchKernel of the same variant with pre-packed arguments, at a launch-bound
// size. Prints JSON rows for bench/results/<gpu>-tuning.json.
#include "runtime/cuda/device.hpp"
#include "runtime/dispatch/autotune.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/op.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

using namespace autotune;

namespace {

struct Buffers {
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> owned;
  std::vector<CUdeviceptr> pointers; // in Op::tensors() order
};

// The problem's tensors, contiguous, filled with 0.5 in their dtype (never zeros).
Buffers allocate(const Op& op, const Problem& p) {
  Buffers b;
  for (const TensorSpec& t : op.tensors(p)) {
    auto buffer = std::make_unique<cuda::DeviceBuffer>(std::max<size_t>(t.bytes(), 16));
    std::vector<unsigned char> host(buffer->size());
    for (size_t i = 0; i < t.elements; ++i) {
      if (t.name == "workspace") {
        break; // counters must start at zero
      }
      if (t.dtype == DType::f32) {
        const float half = 0.5f;
        std::memcpy(host.data() + 4 * i, &half, 4);
      } else {
        const uint16_t half = t.dtype == DType::f16 ? 0x3800 : 0x3f00;
        std::memcpy(host.data() + 2 * i, &half, 2);
      }
    }
    buffer->upload(host.data(), host.size());
    b.pointers.push_back(buffer->get());
    b.owned.push_back(std::move(buffer));
  }
  return b;
}

const void* at(const Buffers& b, size_t i) {
  return reinterpret_cast<const void*>(b.pointers.at(i));
}

struct Case {
  const char* op;
  const char* shape;
  std::function<void(Runtime&, const Buffers&, CUstream)> call;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main() {
  try {
    cuda::PrimaryContext ctx(0);
    RuntimeOptions o;
    o.database = "/nonexistent/autotune-dispatch-bench.db"; // default variants: no database
    Runtime rt(o);
    const auto bf16 = ElementType::bf16, fp32 = ElementType::fp32;
    // Tiny problems: the launch, not the GPU, is what is timed.
    std::vector<Case> cases = {
        {"causal_conv1d", "B=1,C=64,L=256,W=4",
         [&](Runtime& r, const Buffers& b, CUstream s) {
           CausalConv1dArgs a{};
           a.x = tensor(at(b, 0), bf16, {1, 64, 256});
           a.weight = tensor(at(b, 1), bf16, {64, 4});
           a.bias = tensor(at(b, 2), bf16, {64});
           a.out = tensor(at(b, 3), bf16, {1, 64, 256});
           a.silu = 1;
           r.causal_conv1d(a, s);
         }},
        {"attention", "B=1,H=4,S=128,D=64,layout=bhsd",
         [&](Runtime& r, const Buffers& b, CUstream s) {
           AttentionArgs a{};
           a.q = tensor(at(b, 0), bf16, {1, 4, 128, 64});
           a.k = tensor(at(b, 1), bf16, {1, 4, 128, 64});
           a.v = tensor(at(b, 2), bf16, {1, 4, 128, 64});
           a.o = tensor(at(b, 3), bf16, {1, 4, 128, 64});
           r.attention(a, s);
         }},
        {"selective_scan", "B=1,D=64,L=256,N=16",
         [&](Runtime& r, const Buffers& b, CUstream s) {
           SelectiveScanArgs a{};
           a.u = tensor(at(b, 0), bf16, {1, 64, 256});
           a.delta = tensor(at(b, 1), bf16, {1, 64, 256});
           a.A = tensor(at(b, 2), fp32, {64, 16});
           a.B = tensor(at(b, 3), bf16, {1, 1, 16, 256});
           a.C = tensor(at(b, 4), bf16, {1, 1, 16, 256});
           a.D = tensor(at(b, 5), fp32, {64});
           a.z = tensor(at(b, 6), bf16, {1, 64, 256});
           a.delta_bias = tensor(at(b, 7), fp32, {64});
           a.out = tensor(at(b, 8), bf16, {1, 64, 256});
           a.delta_softplus = 1;
           r.selective_scan(a, s);
         }},
    };
    cuda::Stream stream = cuda::create_stream();
    const std::string arch = cuda::query_device(0).arch();
    for (const Case& c : cases) {
      const Op& op = find_op(c.op);
      Problem p = op.make_problem(parse_fields(c.shape, "shape"));
      Buffers buffers = allocate(op, p);
      c.call(rt, buffers, stream.get()); // resolves, compiles and loads once

      // The same variant launched bare, its arguments packed once.
      Config config = parse_space(template_file(op.space_path()), op.space_path()).default_config;
      auto compiled = compile_variant(describe_variant(op, config, p, arch));
      if (!compiled) {
        std::fprintf(stderr, "%s\n", compiled.failure().message.c_str());
        return 1;
      }
      cuda::Module m = cuda::load_module(compiled->binary);
      CUfunction f = cuda::get_function(m, op.kernel_name());
      LaunchGeometry g = op.geometry(config, p);
      cuda::allow_dynamic_smem(f, g.dynamic_smem);
      ArgPack args;
      op.pack(config, p, buffers.pointers, args);
      void** ptrs = args.pointers();

      // Batches short enough never to fill the launch queue (launches would then
      // wait for the GPU and measure it), alternating between the two.
      constexpr int k_batch = 100;
      constexpr int k_rounds = 200;
      using Clock = std::chrono::steady_clock;
      auto sync = [&] { AUTOTUNE_CU(cuda::driver().cuStreamSynchronize(stream.get())); };
      auto raw_launch = [&] {
        AUTOTUNE_CU(cuda::driver().cuLaunchKernel(f, g.grid[0], g.grid[1], g.grid[2], g.block[0],
                                                  g.block[1], g.block[2], g.dynamic_smem,
                                                  stream.get(), ptrs, nullptr));
      };
      std::vector<double> runtime_samples, raw_samples;
      for (int r = 0; r < k_rounds; ++r) {
        sync();
        auto t0 = Clock::now();
        for (int i = 0; i < k_batch; ++i) {
          c.call(rt, buffers, stream.get());
        }
        runtime_samples.push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / k_batch);
        sync();
        t0 = Clock::now();
        for (int i = 0; i < k_batch; ++i) {
          raw_launch();
        }
        raw_samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                              k_batch);
      }
      sync();
      // Single calls, each timed alone (synchronized every k_single_batch calls, as
      // bench/python_call.py does from Python): the tail of each, to tell where a slow call
      // comes from (the warm path, or the driver's launch that both make).
      constexpr int k_single_batch = 50;
      constexpr int k_single_calls = 6000;
      std::vector<double> runtime_single, raw_single;
      for (int i = 0; i < k_single_calls; ++i) {
        if (i % k_single_batch == 0) {
          sync();
        }
        auto t0 = Clock::now();
        if (i % 2 == 0) {
          c.call(rt, buffers, stream.get());
          runtime_single.push_back(
              std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        } else {
          raw_launch();
          raw_single.push_back(
              std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
      }
      sync();
      auto quantile = [](std::vector<double> v, double q) {
        std::sort(v.begin(), v.end());
        return v[size_t(q * double(v.size() - 1))];
      };
      for (const auto& [name, v] :
           {std::pair{"dispatch_call", &runtime_single}, std::pair{"raw_launch", &raw_single}}) {
        std::printf("{\"name\": \"%s_p99_us\", \"op\": \"%s\", \"value\": %.3f, \"unit\": "
                    "\"us\", \"median_us\": %.3f, \"notes\": \"99th percentile of %zu single "
                    "calls, each timed alone (the stream synchronized every %d calls)\"}\n",
                    name, c.op, quantile(*v, 0.99), quantile(*v, 0.5), v->size(), k_single_batch);
      }
      const double runtime_us = median(runtime_samples), raw_us = median(raw_samples);
      std::printf("{\"name\": \"dispatch_call_us\", \"op\": \"%s\", \"value\": %.3f, \"unit\": "
                  "\"us\", \"notes\": \"host time per warm Runtime call (%s), launch included\"}\n",
                  c.op, runtime_us, c.shape);
      std::printf("{\"name\": \"raw_launch_us\", \"op\": \"%s\", \"value\": %.3f, \"unit\": "
                  "\"us\", \"notes\": \"host time per bare cuLaunchKernel of the same variant\"}\n",
                  c.op, raw_us);
      std::printf("{\"name\": \"dispatch_overhead_us\", \"op\": \"%s\", \"value\": %.3f, "
                  "\"unit\": \"us\", \"notes\": \"the difference: binding and checking the "
                  "tensors, the plan lookup, packing\"}\n",
                  c.op, runtime_us - raw_us);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "dispatch_overhead: %s\n", e.what());
    return exit_code_for(e.kind());
  }
}
