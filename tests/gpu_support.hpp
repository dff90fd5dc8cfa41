// Host-side helpers for the GPU tests: tensors in fp32/fp16/bf16 with random
// contents, and the float64 CPU references the kernels are checked against.
#pragma once

#include "runtime/base/error.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/types.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace autotune::test {

// cuCtxSynchronize under a watchdog: GPU work that does not finish within `seconds` (a
// kernel that hangs) ends the process with a message naming `what` (the case and the
// variant), where it would otherwise stall the run until an outer timeout killed it
// without saying where.
inline void synchronize_within(const std::string& what, double seconds = 120) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(m);
    if (!cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done; })) {
      std::fprintf(stderr, "\nGPU work did not finish within %.0f s: %s\n", seconds, what.c_str());
      std::fflush(stderr);
      std::fflush(stdout);
      std::_Exit(3);
    }
  });
  const CUresult r = cuda::driver().cuCtxSynchronize();
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_one();
  watchdog.join();
  AUTOTUNE_CU(r);
}

// One launch of `f` with `g`'s grid and shared memory on the default stream, waited for
// under synchronize_within; `what` names the shape and the variant.
inline void launch_and_wait(CUfunction f, const LaunchGeometry& g, ArgPack& args,
                            const std::string& what) {
  cuda::allow_dynamic_smem(f, g.dynamic_smem);
  AUTOTUNE_CU(cuda::driver().cuLaunchKernel(f, g.grid[0], g.grid[1], g.grid[2], g.block[0],
                                            g.block[1], g.block[2], g.dynamic_smem, nullptr,
                                            args.pointers(), nullptr));
  synchronize_within(what);
}

// A call the runtime must refuse before launching anything: an Error of kind usage whose
// message holds `message`; the context stays usable (the stream synchronizes after it).
template <typename Call>
void check_refused(Call&& call, const std::string& message, const std::string& what) {
  std::string text = "no error";
  bool usage = false;
  try {
    call();
  } catch (const Error& e) {
    text = e.what();
    usage = e.kind() == ErrorKind::usage;
  }
  synchronize_within("a refused " + what);
  CHECK_MESSAGE(usage, "expected a usage error, got: " << text);
  CHECK_MESSAGE(text.find(message) != std::string::npos,
                "expected '" << message << "' in '" << text << "'");
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1); // round to nearest even
  return uint16_t(u >> 16);
}
inline float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct HostTensor {
  DType type;
  size_t n;
  std::vector<unsigned char> bytes;

  HostTensor(DType t, size_t count) : type(t), n(count), bytes(count * dtype_size(t)) {}

  float get(size_t i) const {
    if (type == DType::f32) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[i * 2], 2);
    if (type == DType::bf16) {
      return bf16_to_float(h);
    }
    _Float16 x;
    std::memcpy(&x, &h, 2);
    return float(x);
  }
  void set(size_t i, float v) {
    if (type == DType::f32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else if (type == DType::bf16) {
      uint16_t h = float_to_bf16(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      _Float16 x = _Float16(v);
      std::memcpy(&bytes[i * 2], &x, 2);
    }
  }
  void randomize(std::mt19937_64& rng, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    for (size_t i = 0; i < n; ++i) {
      set(i, d(rng));
    }
  }
  // Fills with NaN so that an output nobody writes is caught.
  void poison() {
    for (size_t i = 0; i < n; ++i) {
      set(i, std::nanf(""));
    }
  }
};

struct DeviceTensor {
  cuda::DeviceBuffer buffer;
  explicit DeviceTensor(const HostTensor& h) : buffer(h.bytes.size()) {
    buffer.upload(h.bytes.data(), h.bytes.size());
  }
  CUdeviceptr get() const { return buffer.get(); }
  void download(HostTensor& h) const { buffer.download(h.bytes.data(), h.bytes.size()); }
};

// int32 values on the device (index tensors: cache lengths, row indices); at least one
// element is allocated, so an empty list still has an address.
inline cuda::DeviceBuffer int_buffer(const std::vector<int>& v) {
  cuda::DeviceBuffer d(std::max<size_t>(v.size(), 1) * sizeof(int));
  if (!v.empty()) {
    d.upload(v.data(), v.size() * sizeof(int));
  }
  return d;
}

// ||out - ref|| / ||ref|| over the elements; NaN anywhere gives +inf.
inline double relative_error(const HostTensor& out, const std::vector<double>& ref) {
  double d2 = 0;
  double r2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double o = out.get(i);
    if (!std::isfinite(o)) {
      return INFINITY;
    }
    d2 += (o - ref[i]) * (o - ref[i]);
    r2 += ref[i] * ref[i];
  }
  return std::sqrt(d2 / (r2 > 0 ? r2 : 1));
}

// out[b,c,t] (at (b * C + c) * L + t) for x with channel stride xcs, batch stride xbs
// and position stride xls (elements; channel-last x: xcs = 1); inputs before t = 0 come
// from `init` ([B, C, W-1]) or are zero. `final_states`, when given, receives the last
// W-1 inputs of each row. `seq` ([B, L] sequence ids, when given): the input at s counts
// for the output at t only when seq[b][s] == seq[b][t], and the output is 0 where
// seq[b][t] < 0 (padding).
inline std::vector<double> causal_conv1d_reference(const HostTensor& x, const HostTensor& w,
                                                   const HostTensor* bias, int B, int C, int L,
                                                   int W, bool silu, long long xbs, long long xcs,
                                                   const HostTensor* init = nullptr,
                                                   std::vector<double>* final_states = nullptr,
                                                   long long xls = 1,
                                                   const std::vector<int>* seq = nullptr) {
  std::vector<double> out(size_t(B) * C * L);
  auto input = [&](int b, int c, int s) -> double {
    if (s >= 0) {
      return x.get(size_t(b * xbs + c * xcs + s * xls));
    }
    return init ? init->get((size_t(b) * C + c) * (W - 1) + size_t(W - 1 + s)) : 0.0;
  };
  if (final_states) {
    final_states->assign(size_t(B) * C * (W - 1), 0.0);
    for (int b = 0; b < B; ++b) {
      for (int c = 0; c < C; ++c) {
        for (int k = 0; k < W - 1; ++k) {
          (*final_states)[(size_t(b) * C + c) * (W - 1) + k] = input(b, c, L - (W - 1) + k);
        }
      }
    }
  }
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < C; ++c) {
      for (int t = 0; t < L; ++t) {
        double acc = bias ? bias->get(size_t(c)) : 0.0;
        for (int k = 0; k < W; ++k) {
          const int s = t - (W - 1) + k;
          if (seq && s >= 0 && (*seq)[size_t(b) * L + s] != (*seq)[size_t(b) * L + t]) {
            continue; // another sequence's input
          }
          acc += double(w.get(size_t(c) * W + k)) * input(b, c, s);
        }
        if (silu) {
          acc = acc / (1.0 + std::exp(-acc));
        }
        if (seq && (*seq)[size_t(b) * L + t] < 0) {
          acc = 0.0;
        }
        out[(size_t(b) * C + c) * L + t] = acc;
      }
    }
  }
  return out;
}

// Device 0's primary context, made current on the calling thread (the GPU tests run on
// device 0; threads of a test call it too).
inline cuda::PrimaryContext& context() {
  static cuda::PrimaryContext ctx(0);
  ctx.make_current();
  return ctx;
}

} // namespace autotune::test
