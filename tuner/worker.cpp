#include "worker.hpp"

#include "runtime/base/log.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/op.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>

namespace autotune {
namespace {

// ---- framing: a message is a list of byte strings -------------------------------
// [u32 field count] then per field [u64 length][bytes]; native endianness (both ends
// are the same executable on the same machine).

bool write_all(int fd, const void* data, size_t size) {
  auto p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    p += n;
    size -= size_t(n);
  }
  return true;
}

bool write_message(int fd, const std::vector<std::string>& fields) {
  std::string buf;
  uint32_t count = uint32_t(fields.size());
  buf.append(reinterpret_cast<const char*>(&count), sizeof count);
  for (const auto& f : fields) {
    uint64_t len = f.size();
    buf.append(reinterpret_cast<const char*>(&len), sizeof len);
    buf.append(f);
  }
  return write_all(fd, buf.data(), buf.size());
}

enum class ReadStatus { ok, timeout, closed };

using Clock = std::chrono::steady_clock;

// Reads exactly `size` bytes before `deadline` (no deadline when nullopt).
ReadStatus read_exact(int fd, void* data, size_t size, std::optional<Clock::time_point> deadline) {
  auto p = static_cast<char*>(data);
  while (size > 0) {
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left.count() <= 0) {
        return ReadStatus::timeout;
      }
      pollfd pfd{fd, POLLIN, 0};
      int r = ::poll(&pfd, 1, int(std::min<long long>(left.count(), 1 << 30)));
      if (r < 0 && errno == EINTR) {
        continue;
      }
      if (r == 0) {
        return ReadStatus::timeout;
      }
    }
    ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return ReadStatus::closed;
    }
    p += n;
    size -= size_t(n);
  }
  return ReadStatus::ok;
}

ReadStatus read_message(int fd, std::vector<std::string>& fields,
                        std::optional<Clock::time_point> deadline) {
  fields.clear();
  uint32_t count = 0;
  ReadStatus s = read_exact(fd, &count, sizeof count, deadline);
  if (s != ReadStatus::ok) {
    return s;
  }
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t len = 0;
    if ((s = read_exact(fd, &len, sizeof len, deadline)) != ReadStatus::ok) {
      return s;
    }
    std::string f(len, '\0');
    if (len && (s = read_exact(fd, f.data(), len, deadline)) != ReadStatus::ok) {
      return s;
    }
    fields.push_back(std::move(f));
  }
  return ReadStatus::ok;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::vector<std::string> encode(const TimingProtocol& p) {
  return {std::to_string(p.warmup),  std::to_string(p.min_samples), std::to_string(p.max_samples),
          num(p.min_seconds),        num(p.max_seconds),            num(p.target_spread)};
}

TimingProtocol decode_protocol(const std::vector<std::string>& f, size_t at) {
  TimingProtocol p;
  p.warmup = std::stoi(f.at(at));
  p.min_samples = std::stoi(f.at(at + 1));
  p.max_samples = std::stoi(f.at(at + 2));
  p.min_seconds = std::stod(f.at(at + 3));
  p.max_seconds = std::stod(f.at(at + 4));
  p.target_spread = std::stod(f.at(at + 5));
  return p;
}

// ---- the SM clock, from NVML when the driver ships it ------------------------------

class SmClock {
public:
  explicit SmClock(int ordinal) {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      return;
    }
    using Init = int (*)();
    using ByBus = int (*)(const char*, void**);
    Init init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    ByBus by_bus = reinterpret_cast<ByBus>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    m_clock = reinterpret_cast<Query>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    char bus[32] = {};
    CUdevice dev = 0;
    if (!init || !by_bus || !m_clock || init() != 0 ||
        cuda::driver().cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS) {
      m_clock = nullptr;
      return;
    }
    using BusId = CUresult (*)(char*, int, CUdevice);
    BusId bus_id = reinterpret_cast<BusId>(dlsym(RTLD_DEFAULT, "cuDeviceGetPCIBusId"));
    void* cuda_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!bus_id && cuda_lib) {
      bus_id = reinterpret_cast<BusId>(dlsym(cuda_lib, "cuDeviceGetPCIBusId"));
    }
    if (!bus_id || bus_id(bus, sizeof bus, dev) != CUDA_SUCCESS || by_bus(bus, &m_device) != 0) {
      m_clock = nullptr;
    }
  }
  // Current SM clock in MHz, 0 when unknown.
  int mhz() const {
    unsigned v = 0;
    constexpr int k_nvml_clock_sm = 1;
    return m_clock && m_clock(m_device, k_nvml_clock_sm, &v) == 0 ? int(v) : 0;
  }

private:
  using Query = int (*)(void*, int, unsigned*);
  Query m_clock = nullptr;
  void* m_device = nullptr;
};

// ---- the worker process ------------------------------------------------------------

struct Server {
  std::optional<cuda::PrimaryContext> context;
  cuda::DeviceInfo device;
  const Op* op = nullptr;
  Problem problem;
  std::unique_ptr<Testbed> bed;
  std::unique_ptr<SmClock> clock;

  std::vector<std::string> result(cache::Outcome o, const Timing& t, double rel_err, int mhz,
                                  const std::string& message, bool exiting) {
    return {"result",     cache::to_string(o), num(t.median_us), num(t.p10_us), num(t.p90_us),
            std::to_string(t.samples), num(rel_err), std::to_string(mhz), message,
            exiting ? "1" : "0"};
  }

  std::vector<std::string> setup(const std::vector<std::string>& f) {
    if (!context) {
      context.emplace(0);
      device = cuda::query_device(0);
      clock = std::make_unique<SmClock>(0);
    }
    op = &find_op(f.at(1));
    problem.op = f.at(1);
    problem.fields = parse_fields(f.at(2), "problem");
    unsigned long long seed = std::stoull(f.at(3));
    TimingProtocol protocol = decode_protocol(f, 4);
    bed.reset();
    bed = std::make_unique<Testbed>(*op, problem, device);
    bed->randomize(seed);
    std::vector<std::string> reply = {"ok", "0", "0", "0", "0", "0"};
    if (op->memory_bound()) {
      Timing t = bed->time_copy(protocol);
      reply = {"ok", num(t.median_us), num(t.p10_us), num(t.p90_us), std::to_string(t.samples)};
    } else {
      reply = {"ok", "0", "0", "0", "0"};
    }
    reply.push_back(std::to_string(bed->device_bytes()));
    return reply;
  }

  std::vector<std::string> measure(const std::vector<std::string>& f, bool& exit_after) {
    if (!bed) {
      throw Error(ErrorKind::internal, "worker: measure before setup");
    }
    Config config = parse_fields(f.at(1), "config");
    const std::string& kernel = f.at(2);
    const std::string& cubin = f.at(3);
    bool check_only = f.at(4) == "1";
    TimingProtocol protocol = decode_protocol(f, 5);
    Timing none;
    try {
      cuda::Module module = cuda::load_module(cubin);
      CUfunction fn = cuda::get_function(module, kernel.c_str());
      LaunchGeometry g = op->geometry(config, problem);
      int max_threads = 0;
      AUTOTUNE_CU(cuda::driver().cuFuncGetAttribute(&max_threads,
                                                    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn));
      unsigned threads = g.block[0] * g.block[1] * g.block[2];
      if (threads > unsigned(max_threads)) {
        return result(cache::Outcome::resource, none, 0, 0,
                      "needs " + std::to_string(threads) +
                          " threads per block; its register use allows " +
                          std::to_string(max_threads),
                      false);
      }
      if (g.dynamic_smem > unsigned(device.smem_per_block_optin)) {
        return result(cache::Outcome::resource, none, 0, 0,
                      "needs " + std::to_string(g.dynamic_smem) +
                          " bytes of shared memory; the device allows " +
                          std::to_string(device.smem_per_block_optin) + " per block",
                      false);
      }
      cuda::allow_dynamic_smem(fn, g.dynamic_smem);
      CheckResult check = bed->check(fn, config);
      if (!check.passed) {
        return result(cache::Outcome::wrong, none, check.rel_err, 0, check.message, false);
      }
      if (check_only) {
        return result(cache::Outcome::ok, none, check.rel_err, 0, "", false);
      }
      Timing t = bed->time(fn, config, protocol);
      return result(cache::Outcome::ok, t, check.rel_err, clock->mhz(), "", false);
    } catch (const cuda::CudaError& e) {
      if (e.resource()) {
        return result(cache::Outcome::resource, none, 0, 0, e.what(), false);
      }
      // Anything else may have poisoned the context: report, then let the parent
      // replace this process.
      exit_after = true;
      return result(cache::Outcome::fault, none, 0, 0, e.what(), true);
    }
  }
};

int serve(int in_fd, int out_fd) {
  Server server;
  std::vector<std::string> request;
  while (read_message(in_fd, request, std::nullopt) == ReadStatus::ok) {
    if (request.empty() || request[0] == "quit") {
      return 0;
    }
    std::vector<std::string> reply;
    bool exit_after = false;
    try {
      if (request[0] == "setup") {
        reply = server.setup(request);
      } else if (request[0] == "measure") {
        reply = server.measure(request, exit_after);
      } else if (request[0] == "reseed") {
        server.bed->randomize(std::stoull(request.at(1)));
        reply = {"ok"};
      } else {
        reply = {"error", "internal", "unknown request " + request[0]};
      }
    } catch (const cuda::CudaError& e) {
      reply = {"error", "cuda", e.what()};
      exit_after = e.sticky();
    } catch (const Error& e) {
      reply = {"error", to_string(e.kind()), e.what()};
    } catch (const std::exception& e) {
      reply = {"error", "internal", e.what()};
    }
    if (!write_message(out_fd, reply)) {
      return 1;
    }
    if (exit_after) {
      return 0;
    }
  }
  return 0;
}

} // namespace

bool maybe_run_worker(int argc, char** argv, int& exit_code) {
  if (argc != 4 || std::strcmp(argv[1], "--autotune-worker") != 0) {
    return false;
  }
  // The parent may be killed while we write; a closed pipe must end us quietly.
  signal(SIGPIPE, SIG_IGN);
  exit_code = serve(std::atoi(argv[2]), std::atoi(argv[3]));
  return true;
}

Worker::Worker(double setup_timeout_s, double measure_timeout_s)
    : m_setup_timeout(setup_timeout_s), m_measure_timeout(measure_timeout_s) {
  signal(SIGPIPE, SIG_IGN);
}

Worker::~Worker() {
  if (m_pid > 0) {
    write_message(m_to_worker, {"quit"});
  }
  stop();
}

void Worker::stop() noexcept {
  if (m_to_worker >= 0) {
    ::close(m_to_worker);
  }
  if (m_from_worker >= 0) {
    ::close(m_from_worker);
  }
  m_to_worker = m_from_worker = -1;
  if (m_pid > 0) {
    // Give a worker that was told to quit a moment, then make sure it is gone.
    for (int i = 0; i < 50; ++i) {
      if (waitpid(m_pid, nullptr, WNOHANG) == m_pid) {
        m_pid = -1;
        break;
      }
      usleep(10000);
    }
    if (m_pid > 0) {
      kill(m_pid, SIGKILL);
      waitpid(m_pid, nullptr, 0);
    }
  }
  m_pid = -1;
  m_ready = false;
}

void Worker::spawn() {
  int to[2];
  int from[2];
  if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) {
    throw Error(ErrorKind::internal, std::string("pipe: ") + std::strerror(errno));
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    throw Error(ErrorKind::internal, "cannot find this executable (/proc/self/exe)");
  }
  exe[n] = '\0';
  pid_t pid = fork();
  if (pid < 0) {
    throw Error(ErrorKind::internal, std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec. The pipes move to fds 3 and 4.
    if (dup2(to[0], 3) < 0 || dup2(from[1], 4) < 0) {
      _exit(127);
    }
    char in_fd[] = "3";
    char out_fd[] = "4";
    char flag[] = "--autotune-worker";
    char* args[] = {exe, flag, in_fd, out_fd, nullptr};
    execv(exe, args);
    _exit(127);
  }
  ::close(to[0]);
  ::close(from[1]);
  m_pid = pid;
  m_to_worker = to[1];
  m_from_worker = from[0];
}

bool Worker::call(const std::vector<std::string>& request, double timeout_s,
                  std::vector<std::string>& reply, std::string& failure) {
  if (m_pid <= 0) {
    spawn();
  }
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s));
  if (!write_message(m_to_worker, request)) {
    failure = "the worker process is gone";
  } else {
    ReadStatus s = read_message(m_from_worker, reply, deadline);
    if (s == ReadStatus::ok) {
      return true;
    }
    failure = s == ReadStatus::timeout
                  ? "no answer within " + num(timeout_s) + " s: the worker was killed"
                  : "the worker process died";
  }
  if (m_pid > 0 && failure != "" && failure.find("killed") == std::string::npos) {
    int status = 0;
    if (waitpid(m_pid, &status, 0) == m_pid) {
      m_pid = -1;
      if (WIFSIGNALED(status)) {
        failure += std::string(" (signal ") + strsignal(WTERMSIG(status)) + ")";
      } else if (WIFEXITED(status)) {
        failure += " (exit code " + std::to_string(WEXITSTATUS(status)) + ")";
      }
    }
  }
  if (m_pid > 0) {
    kill(m_pid, SIGKILL);
  }
  stop();
  ++m_restarts;
  return false;
}

SetupResult Worker::setup(const std::string& op, const Problem& problem, unsigned long long seed,
                          const TimingProtocol& protocol) {
  m_setup_request = {"setup", op, problem.key(), std::to_string(seed)};
  for (auto& f : encode(protocol)) {
    m_setup_request.push_back(std::move(f));
  }
  m_ready = false;
  std::vector<std::string> reply;
  std::string failure;
  if (!call(m_setup_request, m_setup_timeout, reply, failure)) {
    throw Error(ErrorKind::cuda, "setting up " + op + " " + problem.key() + " failed: " + failure);
  }
  if (reply.at(0) == "error") {
    ErrorKind kind = reply.at(1) == "no GPU" ? ErrorKind::no_device : ErrorKind::cuda;
    throw Error(kind, "setting up " + op + " " + problem.key() + ": " + reply.at(2));
  }
  m_ready = true;
  SetupResult r;
  r.copy.median_us = std::stod(reply.at(1));
  r.copy.p10_us = std::stod(reply.at(2));
  r.copy.p90_us = std::stod(reply.at(3));
  r.copy.samples = std::stoi(reply.at(4));
  r.has_copy = r.copy.samples > 0;
  r.device_bytes = size_t(std::stoull(reply.at(5)));
  return r;
}

void Worker::ensure_ready() {
  if (m_ready && m_pid > 0) {
    return;
  }
  if (m_setup_request.empty()) {
    throw Error(ErrorKind::internal, "Worker used before setup()");
  }
  std::vector<std::string> reply;
  std::string failure;
  if (!call(m_setup_request, m_setup_timeout, reply, failure) || reply.at(0) != "ok") {
    throw Error(ErrorKind::cuda, "a replacement worker could not be set up: " +
                                     (failure.empty() ? reply.at(2) : failure));
  }
  m_ready = true;
}

MeasureResult Worker::measure(const std::string& config, const std::string& kernel,
                              const std::string& cubin, const TimingProtocol& protocol,
                              bool check_only) {
  ensure_ready();
  std::vector<std::string> request = {"measure", config, kernel, cubin, check_only ? "1" : "0"};
  for (auto& f : encode(protocol)) {
    request.push_back(std::move(f));
  }
  // The deadline covers the check plus the timing protocol's own cap.
  double timeout = m_measure_timeout + protocol.max_seconds;
  std::vector<std::string> reply;
  std::string failure;
  MeasureResult r;
  if (!call(request, timeout, reply, failure)) {
    r.outcome = failure.find("killed") != std::string::npos ? cache::Outcome::timeout
                                                            : cache::Outcome::fault;
    r.message = failure;
    return r;
  }
  if (reply.at(0) == "error") {
    // Not a variant's outcome: the worker could not do its job at all.
    throw Error(reply.at(1) == "cuda" ? ErrorKind::cuda : ErrorKind::internal,
                "worker: " + reply.at(2));
  }
  r.outcome = cache::parse_outcome(reply.at(1));
  r.timing.median_us = std::stod(reply.at(2));
  r.timing.p10_us = std::stod(reply.at(3));
  r.timing.p90_us = std::stod(reply.at(4));
  r.timing.samples = std::stoi(reply.at(5));
  r.rel_err = std::stod(reply.at(6));
  r.sm_clock_mhz = std::stoi(reply.at(7));
  r.message = reply.at(8);
  if (reply.at(9) == "1") {
    // The worker reported a fault and exits; the next call starts a new one.
    int status = 0;
    waitpid(m_pid, &status, 0);
    m_pid = -1;
    stop();
    ++m_restarts;
  }
  return r;
}

void Worker::reseed(unsigned long long seed) {
  ensure_ready();
  std::vector<std::string> reply;
  std::string failure;
  if (!call({"reseed", std::to_string(seed)}, m_setup_timeout, reply, failure) ||
      reply.at(0) != "ok") {
    throw Error(ErrorKind::cuda, "worker: new inputs failed: " +
                                     (failure.empty() ? reply.at(2) : failure));
  }
  // A replacement worker must draw the same inputs.
  m_setup_request.at(3) = std::to_string(seed);
}

} // namespace autotune
