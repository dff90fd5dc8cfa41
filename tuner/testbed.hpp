// The GPU side of tuning one problem: the problem's buffers filled with fresh
// random inputs, the fp32 reference outputs, NaN-poisoned outputs before every
// check, and the timing protocol (CUDA events; L2 flushed between samples when
// the working set would otherwise stay in L2).
#pragma once

#include "runtime/cuda/device.hpp"
#include "runtime/ops/op.hpp"

#include <memory>
#include <string>
#include <vector>

namespace autotune {

struct CheckResult {
  double rel_err = 0; // max over outputs of ||out - ref|| / ||ref||
  double max_abs_err = 0;
  long long non_finite = 0; // outputs left NaN (unwritten) or overflowed
  bool passed = false;
  std::string message;
};

struct TimingProtocol {
  int warmup = 3;
  int min_samples = 20;
  int max_samples = 300;
  double min_seconds = 0.02;   // keep sampling at least this long
  double max_seconds = 0.5;    // and never longer
  double target_spread = 0.02; // stop once (p90 - p10) / median is below this
  bool operator==(const TimingProtocol&) const = default;
};

struct Timing {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  int samples = 0;
  bool operator==(const Timing&) const = default;
};

class Testbed {
public:
  // Allocates the problem's tensors on the current context's device.
  Testbed(const Op& op, const Problem& problem, const cuda::DeviceInfo& device);
  ~Testbed();

  // Draws fresh random inputs from `seed` and recomputes the reference outputs.
  void randomize(unsigned long long seed);

  // Poisons outputs with NaN, runs the function once, compares with the reference.
  CheckResult check(CUfunction function, const Config& config);

  Timing time(CUfunction function, const Config& config, const TimingProtocol& protocol);

  // A device-to-device copy of the problem's effective byte count (read + write),
  // timed with the same protocol: the ceiling memory-bound ops are measured against.
  Timing time_copy(const TimingProtocol& protocol);

  size_t device_bytes() const; // GPU memory this testbed holds

  void launch(CUfunction function, const Config& config);

  struct Impl; // public so the timing helpers in testbed.cpp can name it

private:
  std::unique_ptr<Impl> m_impl;
};

} // namespace autotune
