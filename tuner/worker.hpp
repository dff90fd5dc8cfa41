// Crash isolation for tuning: every GPU step of a session runs in a worker
// process, so a variant that faults (illegal address, any sticky error) or hangs
// costs only that worker. The parent never creates a CUDA context while tuning;
// it compiles, talks to the worker over two pipes, enforces deadlines, records an
// outcome per variant, and replaces a worker that died or was killed.
//
// The worker is the same executable started as `EXE --autotune-worker IN OUT`
// (file descriptors); any program hosting a tuner calls maybe_run_worker() first
// thing in main().
//
// The two ends exchange typed messages (worker_protocol below): a request kind and
// a reply kind, an outcome as cache::Outcome and an error as ErrorKind, never as
// text to be matched. What the parent learns without a reply (it killed the worker
// on the deadline, or the worker died) is a WorkerLoss it records itself.
#pragma once

#include "cache/database.hpp"
#include "testbed.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <variant>
#include <vector>

namespace autotune {

// If argv asks for a worker, serves requests until told to quit and returns the
// exit code through `exit_code` (then the caller returns it from main).
bool maybe_run_worker(int argc, char** argv, int& exit_code);

namespace worker_protocol {

// Wire format. Both ends are this executable on one machine, so integers, doubles
// and enum values travel in native byte order and representation:
//   frame          = u32 body size, then the body
//   body           = u8 kind (RequestKind or ReplyKind), then the kind's fields in the
//                    order of its struct below
//   bool, enum     = u8 (an enum's underlying value; decoding rejects unknown ones)
//   integers       = fixed width (u64 seed and sizes, i64 counts)
//   double         = its 8 bytes (bit-exact, unlike a decimal rendering)
//   string         = u64 length, then the bytes
//   Fields/Config  = u32 count, then per field: string name, string value
//   Timing         = double median_us, p10_us, p90_us; i64 samples
//   TimingProtocol = i64 warmup, min_samples, max_samples; double min_seconds,
//                    max_seconds, target_spread; i64 batch
//   list of double = u64 count, then each double
//   WorkerSeconds  = double context, modules, allocate, inputs, copy, module_load,
//                    check, timing
// decode_* throw Error(internal) naming the message for an unknown kind or enum
// value, a truncated body or bytes left over: both ends are the same build, so a
// malformed message is a bug, never a variant's outcome.
enum class RequestKind : uint8_t { setup = 1, measure = 2, reseed = 3, quit = 4 };
enum class ReplyKind : uint8_t { setup_done = 1, measured = 2, reseeded = 3, error = 4 };

// Allocate the problem's buffers, draw inputs from `seed`, compute the reference.
struct SetupRequest {
  std::string op;
  Fields problem; // canonical fields (Problem::fields)
  unsigned long long seed = 0;
  TimingProtocol protocol; // for the device-to-device copy of memory-bound ops
  bool operator==(const SetupRequest&) const = default;
};

// Check one variant against the reference and, when correct and not check_only, time it.
struct MeasureRequest {
  Config config;
  std::string kernel;
  std::string cubin;
  bool check_only = false;
  TimingProtocol protocol;
  // The cubin's content hash (SHA-256): the worker keeps the loaded module under it for
  // later requests of the same cubin. Empty: loaded for this request only.
  std::string module_key;
  bool operator==(const MeasureRequest&) const = default;
};

// Fresh inputs (and reference) for the same problem.
struct ReseedRequest {
  unsigned long long seed = 0;
  bool operator==(const ReseedRequest&) const = default;
};

struct QuitRequest {
  bool operator==(const QuitRequest&) const = default;
};

using Request = std::variant<SetupRequest, MeasureRequest, ReseedRequest, QuitRequest>;

struct SetupDone {
  bool has_copy = false; // memory-bound ops: a timed copy of the same bytes
  Timing copy;
  uint64_t device_bytes = 0;
  WorkerSeconds seconds; // what this setup took in the worker, by part
  bool operator==(const SetupDone&) const = default;
};

// One variant's outcome. `exiting`: the worker's context may be poisoned (a sticky
// error), so it exits after this reply and the parent starts a new one.
struct Measured {
  cache::Outcome outcome = cache::Outcome::ok;
  Timing timing;
  double rel_err = 0;
  int64_t sm_clock_mhz = 0;
  std::string message;
  bool exiting = false;
  WorkerSeconds seconds; // what this measurement took in the worker, by part
  // Every sample `timing` summarises, in the order taken (empty when nothing was
  // timed): the final round pools the samples of its passes.
  std::vector<double> samples_us;
  bool operator==(const Measured&) const = default;
};

struct Reseeded {
  WorkerSeconds seconds; // the new inputs and reference
  bool operator==(const Reseeded&) const = default;
};

// The worker could not do what was asked at all (not a variant's outcome).
struct Failed {
  ErrorKind kind = ErrorKind::internal;
  std::string message;
  bool exiting = false; // as in Measured
  bool operator==(const Failed&) const = default;
};

using Reply = std::variant<SetupDone, Measured, Reseeded, Failed>;

// A body (kind byte and fields, without the frame's size).
std::string encode(const Request& request);
std::string encode(const Reply& reply);
Request decode_request(std::string_view body);
Reply decode_reply(std::string_view body);

const char* to_string(RequestKind kind);
const char* to_string(ReplyKind kind);

} // namespace worker_protocol

struct MeasureResult {
  cache::Outcome outcome = cache::Outcome::ok;
  Timing timing;
  std::vector<double> samples_us; // what `timing` summarises, in the order taken
  double rel_err = 0;
  int sm_clock_mhz = 0;
  std::string message;
};

struct SetupResult {
  Timing copy; // device-to-device copy of the problem's bytes
  bool has_copy = false;
  size_t device_bytes = 0;
};

// Why a request got no reply, as the parent saw it.
enum class WorkerLoss {
  deadline, // no reply in time: the parent killed the worker (a variant's TIMEOUT)
  died,     // the worker exited or was killed by a signal (a variant's FAULT)
};

class Worker {
public:
  // `setup_timeout_s`: allocation, random inputs and the reference;
  // `measure_timeout_s`: one variant's check and timing. `executable` is started as
  // the worker (`EXE --autotune-worker IN OUT`); empty: this executable.
  Worker(double setup_timeout_s, double measure_timeout_s, std::string executable = {});
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Prepares the problem in a (new, if needed) worker: buffers, inputs from
  // `seed`, reference. Throws Error on failure: a problem that cannot even be set
  // up is not a variant's fault (no_device when the worker finds no GPU, else cuda).
  // `meanwhile` (if any) runs here while the worker sets up, before its reply is
  // awaited (the deadline then starts); an exception from it stops the worker and
  // propagates.
  SetupResult setup(const std::string& op, const Problem& problem, unsigned long long seed,
                    const TimingProtocol& protocol, const std::function<void()>& meanwhile = {});
  // Checks and (when correct and not `check_only`) times one variant. A worker that
  // dies or misses the deadline yields FAULT or TIMEOUT, and the next call starts a
  // fresh worker set up for the same problem. `module_key`: the cubin's content hash,
  // under which the worker keeps it loaded (MeasureRequest).
  MeasureResult measure(const Config& config, const std::string& kernel, const std::string& cubin,
                        const TimingProtocol& protocol, bool check_only = false,
                        const std::string& module_key = {});
  // Fresh random inputs (and reference) for a second correctness check.
  void reseed(unsigned long long seed);

  int restarts() const { return m_restarts; }
  // What the worker processes reported spending, by part, summed over every reply
  // (replacement workers' setups included); callers take differences.
  const WorkerSeconds& seconds() const { return m_seconds; }
  // Wall seconds spent starting and setting up replacement workers (after a FAULT or
  // TIMEOUT), inside measure() and reseed().
  double restart_seconds() const { return m_restart_seconds; }

private:
  struct Lost {
    WorkerLoss why;
    std::string message;
  };

  void spawn();
  void stop() noexcept;
  // Sends `request`, runs `meanwhile` (if any), then waits up to `timeout_s` for the
  // reply. Without a reply the worker is gone (killed on the deadline or dead) and
  // counted as a restart.
  std::variant<worker_protocol::Reply, Lost> call(const worker_protocol::Request& request,
                                                  double timeout_s,
                                                  const std::function<void()>& meanwhile = {});
  // A worker that announced its exit (`exiting`) is reaped; the next call starts anew.
  void retire();
  // The reply in `answer`; no reply or a Failed one throws Error(cuda) `what` and the
  // reason (a worker that announced its exit is retired first).
  const worker_protocol::Reply& answered(const std::variant<worker_protocol::Reply, Lost>& answer,
                                         const std::string& what);
  void ensure_ready();

  double m_setup_timeout;
  double m_measure_timeout;
  std::string m_executable;
  pid_t m_pid = -1;
  int m_to_worker = -1;
  int m_from_worker = -1;
  int m_restarts = 0;
  WorkerSeconds m_seconds;
  double m_restart_seconds = 0;
  // What setup() was last asked, to set up a replacement worker the same way.
  std::optional<worker_protocol::SetupRequest> m_setup_request;
  bool m_ready = false;
};

} // namespace autotune
