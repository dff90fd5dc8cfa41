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
  // Samples recorded between two synchronisations: the host reads the events and
  // tests the stopping rule after each batch, so a measurement takes whole batches.
  // The final round's passes (HalvingSearch::pass_protocol) take smaller ones, so
  // that their samples add up to a full measurement's.
  int batch = 16;
  bool operator==(const TimingProtocol&) const = default;
};

// The q-quantile (0..1) of `v` (not empty), interpolated linearly between its order
// statistics: what Timing's median and percentiles are.
double percentile(std::vector<double> v, double q);

struct Timing {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  int samples = 0;
  bool operator==(const Timing&) const = default;
};

// Where a worker process's time went, in seconds, as it measured it: its part of the
// tuning session's setup, measure and re-check phases (ProblemPhases, tuner.hpp).
struct WorkerSeconds {
  double context = 0;     // CUDA context, device query and NVML: once per worker process
  double modules = 0;     // the testing and reference kernels compiled (NVRTC) and loaded:
                          // once per worker process
  double allocate = 0;    // a problem's buffers (and the L2 flush buffer)
  double inputs = 0;      // random inputs and the reference outputs (setup and re-check)
  double copy = 0;        // the device-to-device copy timing of memory-bound ops
  double module_load = 0; // variants' cubins loaded into the context
  double check = 0;       // NaN-poisoned runs compared with the reference
  double timing = 0;      // the timing protocol (warm-up, samples)
  WorkerSeconds& operator+=(const WorkerSeconds& other);
  WorkerSeconds& operator-=(const WorkerSeconds& other);
  bool operator==(const WorkerSeconds&) const = default;
};

class Testbed {
public:
  // Compiles and loads the testing kernels and the op's reference for the current
  // context's device, once per process (every Testbed shares them). A Testbed does it
  // itself when needed; a caller that times its steps does it first.
  static void load_shared_modules(const Op& op, const cuda::DeviceInfo& device);

  // Allocates the problem's tensors on the current context's device.
  Testbed(const Op& op, const Problem& problem, const cuda::DeviceInfo& device);
  ~Testbed();

  // Draws fresh random inputs from `seed` and recomputes the reference outputs.
  void randomize(unsigned long long seed);

  // Poisons outputs with NaN, runs the function once, compares with the reference.
  CheckResult check(CUfunction function, const Config& config);

  // `samples_us` (if given) receives every sample, in the order taken: a caller pools
  // the samples of several timings of one variant (the final round's passes).
  Timing time(CUfunction function, const Config& config, const TimingProtocol& protocol,
              std::vector<double>* samples_us = nullptr);

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
