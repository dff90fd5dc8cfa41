// Host cost of the runtime's warm path: Runtime::causal_conv1d (validate the call,
// build the problem key, look up the loaded variant, pack, launch) against a bare
// cuLaunchKernel of the same function with pre-packed arguments. Prints JSON rows
// for bench/results/<gpu>-tuning.json.
#include "runtime/dispatch/autotune.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/causal_conv1d.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

using namespace autotune;

int main() {
  try {
    cuda::PrimaryContext ctx(0);
    const int64_t B = 1, C = 64, L = 256, W = 4; // tiny: launch cost dominates
    cuda::DeviceBuffer x(B * C * L * 2), w(C * W * 2), b(C * 2), out(B * C * L * 2);
    std::vector<uint16_t> ones(size_t(B * C * L), 0x3f80);
    x.upload(ones.data(), x.size());
    w.upload(ones.data(), w.size());
    b.upload(ones.data(), b.size());
    RuntimeOptions o;
    o.database = "/nonexistent/autotune-dispatch-bench.db"; // default variant: no database needed
    Runtime rt(o);
    CausalConv1dArgs a;
    a.x = reinterpret_cast<const void*>(x.get());
    a.weight = reinterpret_cast<const void*>(w.get());
    a.bias = reinterpret_cast<const void*>(b.get());
    a.out = reinterpret_cast<void*>(out.get());
    a.batch = B;
    a.channels = C;
    a.length = L;
    a.width = W;
    cuda::Stream stream = cuda::create_stream();
    rt.causal_conv1d(a, stream.get()); // resolves and loads once

    const auto& op = static_cast<const CausalConv1dOp&>(find_op("causal_conv1d"));
    Problem p = op.make_problem(parse_fields("B=1,C=64,L=256,W=4", "shape"));
    Config config = parse_space(template_file(op.space_path()), op.space_path()).default_config;
    auto compiled = compile_variant(describe_variant(op, config, p, cuda::query_device(0).arch()));
    if (!compiled) {
      std::fprintf(stderr, "%s\n", compiled.failure().message.c_str());
      return 1;
    }
    cuda::Module m = cuda::load_module(compiled->binary);
    CUfunction f = cuda::get_function(m, op.kernel_name());
    ArgPack args;
    op.pack(config, p, {x.get(), w.get(), b.get(), out.get()}, args);
    LaunchGeometry g = op.geometry(config, p);
    void** ptrs = args.pointers();

    // Batches short enough never to fill the launch queue (launches would then wait
    // for the GPU and measure it), alternating between the two, medians of each.
    constexpr int k_batch = 100;
    constexpr int k_rounds = 200;
    using Clock = std::chrono::steady_clock;
    auto sync = [&] { AUTOTUNE_CU(cuda::driver().cuStreamSynchronize(stream.get())); };
    std::vector<double> runtime_samples, raw_samples;
    for (int r = 0; r < k_rounds; ++r) {
      sync();
      auto t0 = Clock::now();
      for (int i = 0; i < k_batch; ++i) {
        rt.causal_conv1d(a, stream.get());
      }
      runtime_samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                                k_batch);
      sync();
      t0 = Clock::now();
      for (int i = 0; i < k_batch; ++i) {
        AUTOTUNE_CU(cuda::driver().cuLaunchKernel(f, g.grid[0], g.grid[1], g.grid[2], g.block[0],
                                                  g.block[1], g.block[2], 0, stream.get(), ptrs,
                                                  nullptr));
      }
      raw_samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                            k_batch);
    }
    sync();
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    double runtime_us = median(runtime_samples);
    double raw_us = median(raw_samples);
    std::printf("{\"name\": \"dispatch_call_us\", \"op\": \"causal_conv1d\", \"value\": %.3f, \"unit\": \"us\", "
                "\"notes\": \"host time per Runtime::causal_conv1d call, warm, launch included\"}\n",
                runtime_us);
    std::printf("{\"name\": \"raw_launch_us\", \"op\": \"causal_conv1d\", \"value\": %.3f, \"unit\": \"us\", "
                "\"notes\": \"host time per bare cuLaunchKernel of the same function\"}\n",
                raw_us);
    std::printf("{\"name\": \"dispatch_overhead_us\", \"op\": \"causal_conv1d\", \"value\": %.3f, \"unit\": \"us\", "
                "\"notes\": \"the difference: validation, key, lookup, packing\"}\n",
                runtime_us - raw_us);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "dispatch_overhead: %s\n", e.what());
    return exit_code_for(e.kind());
  }
}
