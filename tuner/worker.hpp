// Crash isolation for tuning: every GPU step of a session runs in a worker
// process, so a variant that faults (illegal address, any sticky error) or hangs
// costs only that worker. The parent never creates a CUDA context while tuning;
// it compiles, talks to the worker over two pipes, enforces deadlines, records an
// outcome per variant, and replaces a worker that died or was killed.
//
// The worker is the same executable started as `EXE --autotune-worker IN OUT`
// (file descriptors); any program hosting a tuner calls maybe_run_worker() first
// thing in main().
#pragma once

#include "cache/database.hpp"
#include "testbed.hpp"

#include <string>
#include <sys/types.h>
#include <vector>

namespace autotune {

// If argv asks for a worker, serves requests until told to quit and returns the
// exit code through `exit_code` (then the caller returns it from main).
bool maybe_run_worker(int argc, char** argv, int& exit_code);

struct MeasureResult {
  cache::Outcome outcome = cache::Outcome::ok;
  Timing timing;
  double rel_err = 0;
  int sm_clock_mhz = 0;
  std::string message;
};

struct SetupResult {
  Timing copy;          // device-to-device copy of the problem's bytes
  bool has_copy = false;
  size_t device_bytes = 0;
};

class Worker {
public:
  // `setup_timeout_s`: allocation, random inputs and the reference;
  // `measure_timeout_s`: one variant's check and timing.
  Worker(double setup_timeout_s, double measure_timeout_s);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Prepares the problem in a (new, if needed) worker: buffers, inputs from
  // `seed`, reference. Throws Error on failure: a problem that cannot even be set
  // up is not a variant's fault.
  SetupResult setup(const std::string& op, const Problem& problem, unsigned long long seed,
                    const TimingProtocol& protocol);
  // Checks and (when correct) times one variant. A worker that dies or misses the
  // deadline yields FAULT or TIMEOUT, and the next call starts a fresh worker set
  // up for the same problem.
  MeasureResult measure(const std::string& config, const std::string& kernel,
                        const std::string& cubin, const TimingProtocol& protocol,
                        bool check_only = false);
  // Fresh random inputs (and reference) for a second correctness check.
  void reseed(unsigned long long seed);

  int restarts() const { return m_restarts; }

private:
  void spawn();
  void stop() noexcept;
  bool call(const std::vector<std::string>& request, double timeout_s,
            std::vector<std::string>& reply, std::string& failure);
  void ensure_ready();

  double m_setup_timeout;
  double m_measure_timeout;
  pid_t m_pid = -1;
  int m_to_worker = -1;
  int m_from_worker = -1;
  int m_restarts = 0;
  // What setup() was last asked, to set up a replacement worker the same way.
  std::vector<std::string> m_setup_request;
  bool m_ready = false;
};

} // namespace autotune
