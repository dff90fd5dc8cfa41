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

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

namespace autotune {
namespace worker_protocol {
namespace {

// The last enumerators: decoding accepts the values up to these. Keep them the
// enums' last members when the enums grow.
constexpr cache::Outcome k_last_outcome = cache::Outcome::wrong;
constexpr ErrorKind k_last_error_kind = ErrorKind::internal;

// Builds a body field by field in the wire format (worker.hpp).
class Writer {
public:
  template <typename T> void raw(const T& value) {
    m_bytes.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  void u8(uint8_t v) { raw(v); }
  void flag(bool v) { u8(v ? 1 : 0); }
  void u64(uint64_t v) { raw(v); }
  void i64(int64_t v) { raw(v); }
  void f64(double v) { raw(v); }
  void str(std::string_view s) {
    u64(s.size());
    m_bytes.append(s);
  }
  void fields(const Fields& f) {
    raw(uint32_t(f.size()));
    for (const auto& [name, value] : f) {
      str(name);
      str(value);
    }
  }
  void timing(const Timing& t) {
    f64(t.median_us);
    f64(t.p10_us);
    f64(t.p90_us);
    i64(t.samples);
  }
  void seconds(const WorkerSeconds& s) {
    for (double v :
         {s.context, s.modules, s.allocate, s.inputs, s.copy, s.module_load, s.check, s.timing}) {
      f64(v);
    }
  }
  void protocol(const TimingProtocol& p) {
    i64(p.warmup);
    i64(p.min_samples);
    i64(p.max_samples);
    f64(p.min_seconds);
    f64(p.max_seconds);
    f64(p.target_spread);
    i64(p.batch);
  }
  void doubles(const std::vector<double>& v) {
    u64(v.size());
    for (double x : v) {
      f64(x);
    }
  }
  std::string take() { return std::move(m_bytes); }

private:
  std::string m_bytes;
};

// Reads a body in the order Writer wrote it; every shortfall is an Error naming
// the message (`what`).
class Reader {
public:
  Reader(std::string_view bytes, std::string what) : m_bytes(bytes), m_what(std::move(what)) {}

  template <typename T> T raw() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, m_bytes.data() + m_at, sizeof v);
    m_at += sizeof v;
    return v;
  }
  uint8_t u8() { return raw<uint8_t>(); }
  bool flag() {
    uint8_t v = u8();
    if (v > 1) {
      bad("a flag of " + std::to_string(v));
    }
    return v == 1;
  }
  uint64_t u64() { return raw<uint64_t>(); }
  int64_t i64() { return raw<int64_t>(); }
  int i32_in_i64() {
    int64_t v = i64();
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      bad("an int out of range (" + std::to_string(v) + ")");
    }
    return int(v);
  }
  double f64() { return raw<double>(); }
  std::string str() {
    uint64_t n = u64();
    need(n);
    std::string s(m_bytes.substr(m_at, size_t(n)));
    m_at += size_t(n);
    return s;
  }
  Fields fields() {
    uint32_t n = raw<uint32_t>();
    Fields f;
    for (uint32_t i = 0; i < n; ++i) {
      std::string name = str();
      f.emplace_back(std::move(name), str());
    }
    return f;
  }
  Timing timing() {
    Timing t;
    t.median_us = f64();
    t.p10_us = f64();
    t.p90_us = f64();
    t.samples = i32_in_i64();
    return t;
  }
  WorkerSeconds seconds() {
    WorkerSeconds s;
    for (double* v : {&s.context, &s.modules, &s.allocate, &s.inputs, &s.copy, &s.module_load,
                      &s.check, &s.timing}) {
      *v = f64();
    }
    return s;
  }
  TimingProtocol protocol() {
    TimingProtocol p;
    p.warmup = i32_in_i64();
    p.min_samples = i32_in_i64();
    p.max_samples = i32_in_i64();
    p.min_seconds = f64();
    p.max_seconds = f64();
    p.target_spread = f64();
    p.batch = i32_in_i64();
    return p;
  }
  std::vector<double> doubles() {
    uint64_t n = u64();
    // Checked before allocating: a corrupt count must not ask for terabytes.
    if (n > (m_bytes.size() - m_at) / sizeof(double)) {
      bad("a list of " + std::to_string(n) + " doubles, truncated");
    }
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) {
      x = f64();
    }
    return v;
  }
  template <typename E> E enumerator(E last, const char* type) {
    uint8_t v = u8();
    if (v > uint8_t(last)) {
      bad(std::string("an unknown ") + type + " " + std::to_string(v));
    }
    return E(v);
  }
  // Every byte must have been read: a longer body is another format.
  void finish() const {
    if (m_at != m_bytes.size()) {
      bad(std::to_string(m_bytes.size() - m_at) + " bytes left over");
    }
  }

private:
  void need(uint64_t n) const {
    if (n > m_bytes.size() - m_at) {
      bad("truncated (" + std::to_string(m_bytes.size()) + " bytes)");
    }
  }
  [[noreturn]] void bad(const std::string& why) const {
    throw Error(ErrorKind::internal, "worker protocol: " + m_what + ": " + why);
  }

  std::string_view m_bytes;
  size_t m_at = 0;
  std::string m_what;
};

} // namespace

const char* to_string(RequestKind kind) {
  switch (kind) {
  case RequestKind::setup:
    return "setup";
  case RequestKind::measure:
    return "measure";
  case RequestKind::reseed:
    return "reseed";
  case RequestKind::quit:
    return "quit";
  }
  return "unknown request";
}

const char* to_string(ReplyKind kind) {
  switch (kind) {
  case ReplyKind::setup_done:
    return "setup done";
  case ReplyKind::measured:
    return "measured";
  case ReplyKind::reseeded:
    return "reseeded";
  case ReplyKind::error:
    return "error";
  }
  return "unknown reply";
}

std::string encode(const Request& request) {
  Writer w;
  if (auto* r = std::get_if<SetupRequest>(&request)) {
    w.u8(uint8_t(RequestKind::setup));
    w.str(r->op);
    w.fields(r->problem);
    w.u64(r->seed);
    w.protocol(r->protocol);
  } else if (auto* m = std::get_if<MeasureRequest>(&request)) {
    w.u8(uint8_t(RequestKind::measure));
    w.fields(m->config);
    w.str(m->kernel);
    w.str(m->cubin);
    w.flag(m->check_only);
    w.protocol(m->protocol);
    w.str(m->module_key);
  } else if (auto* s = std::get_if<ReseedRequest>(&request)) {
    w.u8(uint8_t(RequestKind::reseed));
    w.u64(s->seed);
  } else {
    w.u8(uint8_t(RequestKind::quit));
  }
  return w.take();
}

std::string encode(const Reply& reply) {
  Writer w;
  if (auto* s = std::get_if<SetupDone>(&reply)) {
    w.u8(uint8_t(ReplyKind::setup_done));
    w.flag(s->has_copy);
    w.timing(s->copy);
    w.u64(s->device_bytes);
    w.seconds(s->seconds);
  } else if (auto* m = std::get_if<Measured>(&reply)) {
    w.u8(uint8_t(ReplyKind::measured));
    w.u8(uint8_t(m->outcome));
    w.timing(m->timing);
    w.f64(m->rel_err);
    w.i64(m->sm_clock_mhz);
    w.str(m->message);
    w.flag(m->exiting);
    w.seconds(m->seconds);
    w.doubles(m->samples_us);
  } else if (auto* r = std::get_if<Reseeded>(&reply)) {
    w.u8(uint8_t(ReplyKind::reseeded));
    w.seconds(r->seconds);
  } else {
    const Failed& f = std::get<Failed>(reply);
    w.u8(uint8_t(ReplyKind::error));
    w.u8(uint8_t(f.kind));
    w.str(f.message);
    w.flag(f.exiting);
  }
  return w.take();
}

Request decode_request(std::string_view body) {
  Reader r(body, "request");
  uint8_t kind = r.u8();
  Request out;
  switch (RequestKind(kind)) {
  case RequestKind::setup: {
    SetupRequest s;
    s.op = r.str();
    s.problem = r.fields();
    s.seed = r.u64();
    s.protocol = r.protocol();
    out = std::move(s);
    break;
  }
  case RequestKind::measure: {
    MeasureRequest m;
    m.config = r.fields();
    m.kernel = r.str();
    m.cubin = r.str();
    m.check_only = r.flag();
    m.protocol = r.protocol();
    m.module_key = r.str();
    out = std::move(m);
    break;
  }
  case RequestKind::reseed:
    out = ReseedRequest{r.u64()};
    break;
  case RequestKind::quit:
    out = QuitRequest{};
    break;
  default:
    throw Error(ErrorKind::internal,
                "worker protocol: request: unknown kind " + std::to_string(unsigned(kind)));
  }
  r.finish();
  return out;
}

Reply decode_reply(std::string_view body) {
  Reader r(body, "reply");
  uint8_t kind = r.u8();
  Reply out;
  switch (ReplyKind(kind)) {
  case ReplyKind::setup_done: {
    SetupDone s;
    s.has_copy = r.flag();
    s.copy = r.timing();
    s.device_bytes = r.u64();
    s.seconds = r.seconds();
    out = s;
    break;
  }
  case ReplyKind::measured: {
    Measured m;
    m.outcome = r.enumerator(k_last_outcome, "outcome");
    m.timing = r.timing();
    m.rel_err = r.f64();
    m.sm_clock_mhz = r.i64();
    m.message = r.str();
    m.exiting = r.flag();
    m.seconds = r.seconds();
    m.samples_us = r.doubles();
    out = std::move(m);
    break;
  }
  case ReplyKind::reseeded:
    out = Reseeded{r.seconds()};
    break;
  case ReplyKind::error: {
    Failed f;
    f.kind = r.enumerator(k_last_error_kind, "error kind");
    f.message = r.str();
    f.exiting = r.flag();
    out = std::move(f);
    break;
  }
  default:
    throw Error(ErrorKind::internal,
                "worker protocol: reply: unknown kind " + std::to_string(unsigned(kind)));
  }
  r.finish();
  return out;
}

} // namespace worker_protocol

namespace {

namespace wp = worker_protocol;

using Clock = std::chrono::steady_clock;

// ---- framing: u32 body size, then the body (worker.hpp) -----------------------------

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

bool write_frame(int fd, const std::string& body) {
  if (body.size() > std::numeric_limits<uint32_t>::max()) {
    throw Error(ErrorKind::internal, "worker protocol: a message of " +
                                         std::to_string(body.size()) + " bytes exceeds 4 GiB");
  }
  uint32_t size = uint32_t(body.size());
  std::string frame(reinterpret_cast<const char*>(&size), sizeof size);
  frame += body;
  return write_all(fd, frame.data(), frame.size());
}

enum class ReadStatus { ok, timeout, closed };

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

ReadStatus read_frame(int fd, std::string& body, std::optional<Clock::time_point> deadline) {
  uint32_t size = 0;
  ReadStatus s = read_exact(fd, &size, sizeof size, deadline);
  if (s != ReadStatus::ok) {
    return s;
  }
  body.assign(size, '\0');
  return size ? read_exact(fd, body.data(), size, deadline) : ReadStatus::ok;
}

// Seconds since `t`, which moves on to now.
double lap(Clock::time_point& t) {
  const Clock::time_point now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - t).count();
  t = now;
  return seconds;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
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

// Modules a worker keeps loaded. A problem measures a few hundred variants at most
// (attention: up to about 430 valid ones), those it measures again (round 2, the final
// round, the re-check) soon after the first time, and the next problems mostly its
// winners (seeds): 256 covers them, at tens to hundreds of KiB of device memory each.
constexpr size_t k_cached_modules = 256;

struct Server {
  std::optional<cuda::PrimaryContext> context;
  cuda::DeviceInfo device;
  const Op* op = nullptr;
  Problem problem;
  std::unique_ptr<Testbed> bed;
  std::unique_ptr<SmClock> clock;
  // Loaded variants by their cubin's content hash, least recently used first (after
  // `context`: unloaded before it is released). The templates declare no module-scope
  // device variables (a kernel's state lives in the buffers the testbed passes), so a
  // variant launched again from a kept module runs as on a fresh load, as the runtime's
  // once-loaded winners and every timing sample already do.
  std::vector<std::pair<std::string, cuda::Module>> modules;

  // The module of r's cubin: the one kept under r.module_key, else loaded (and kept
  // under it, or into `once` for this request when it names none).
  const cuda::Module& module_for(const wp::MeasureRequest& r, cuda::Module& once) {
    if (r.module_key.empty()) {
      once = cuda::load_module(r.cubin);
      return once;
    }
    for (auto it = modules.begin(); it != modules.end(); ++it) {
      if (it->first == r.module_key) {
        std::rotate(it, it + 1, modules.end());
        return modules.back().second;
      }
    }
    cuda::Module loaded = cuda::load_module(r.cubin);
    if (modules.size() >= k_cached_modules) {
      modules.erase(modules.begin());
    }
    modules.emplace_back(r.module_key, std::move(loaded));
    return modules.back().second;
  }

  wp::SetupDone setup(const wp::SetupRequest& r) {
    wp::SetupDone done;
    Clock::time_point t = Clock::now();
    if (!context) {
      context.emplace(0);
      device = cuda::query_device(0);
      clock = std::make_unique<SmClock>(0);
      done.seconds.context = lap(t);
    }
    op = &find_op(r.op);
    problem.op = r.op;
    problem.fields = r.problem;
    bed.reset();
    done.seconds.allocate = lap(t);
    Testbed::load_shared_modules(*op, device);
    done.seconds.modules = lap(t);
    bed = std::make_unique<Testbed>(*op, problem, device);
    done.seconds.allocate += lap(t);
    bed->randomize(r.seed);
    done.seconds.inputs = lap(t);
    if (op->memory_bound()) {
      done.copy = bed->time_copy(r.protocol);
      done.has_copy = done.copy.samples > 0;
      done.seconds.copy = lap(t);
    }
    done.device_bytes = bed->device_bytes();
    return done;
  }

  wp::Measured measure(const wp::MeasureRequest& r) {
    if (!bed) {
      throw Error(ErrorKind::internal, "worker: measure before setup");
    }
    Clock::time_point t = Clock::now();
    WorkerSeconds seconds; // filled as the steps finish; every reply carries it
    auto outcome = [&seconds](cache::Outcome o, std::string message) {
      wp::Measured m;
      m.outcome = o;
      m.message = std::move(message);
      m.seconds = seconds;
      return m;
    };
    try {
      cuda::Module once;
      CUfunction fn = cuda::get_function(module_for(r, once), r.kernel.c_str());
      seconds.module_load = lap(t);
      LaunchGeometry g = op->geometry(r.config, problem);
      int max_threads = 0;
      AUTOTUNE_CU(cuda::driver().cuFuncGetAttribute(&max_threads,
                                                    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn));
      unsigned threads = g.block[0] * g.block[1] * g.block[2];
      if (threads > unsigned(max_threads)) {
        return outcome(cache::Outcome::resource,
                       "needs " + std::to_string(threads) +
                           " threads per block; its register use allows " +
                           std::to_string(max_threads));
      }
      if (g.dynamic_smem > unsigned(device.smem_per_block_optin)) {
        return outcome(cache::Outcome::resource, "needs " + std::to_string(g.dynamic_smem) +
                                                     " bytes of shared memory; the device allows " +
                                                     std::to_string(device.smem_per_block_optin) +
                                                     " per block");
      }
      cuda::allow_dynamic_smem(fn, g.dynamic_smem);
      CheckResult check = bed->check(fn, r.config);
      seconds.check = lap(t);
      if (!check.passed) {
        wp::Measured m = outcome(cache::Outcome::wrong, check.message);
        m.rel_err = check.rel_err;
        return m;
      }
      wp::Measured m = outcome(cache::Outcome::ok, "");
      m.rel_err = check.rel_err;
      if (!r.check_only) {
        m.timing = bed->time(fn, r.config, r.protocol, &m.samples_us);
        m.sm_clock_mhz = clock->mhz();
        m.seconds.timing = lap(t);
      }
      return m;
    } catch (const cuda::CudaError& e) {
      if (e.resource()) {
        return outcome(cache::Outcome::resource, e.what());
      }
      // Anything else may have poisoned the context: report, then let the parent
      // replace this process.
      wp::Measured m = outcome(cache::Outcome::fault, e.what());
      m.exiting = true;
      return m;
    }
  }

  wp::Reseeded reseed(const wp::ReseedRequest& r) {
    if (!bed) {
      throw Error(ErrorKind::internal, "worker: reseed before setup");
    }
    Clock::time_point t = Clock::now();
    bed->randomize(r.seed);
    wp::Reseeded done;
    done.seconds.inputs = lap(t);
    return done;
  }
};

bool exiting(const wp::Reply& reply) {
  if (auto* m = std::get_if<wp::Measured>(&reply)) {
    return m->exiting;
  }
  if (auto* f = std::get_if<wp::Failed>(&reply)) {
    return f->exiting;
  }
  return false;
}

int serve(int in_fd, int out_fd) {
  Server server;
  std::string body;
  while (read_frame(in_fd, body, std::nullopt) == ReadStatus::ok) {
    wp::Reply reply;
    try {
      wp::Request request = wp::decode_request(body);
      if (std::holds_alternative<wp::QuitRequest>(request)) {
        return 0;
      }
      if (auto* s = std::get_if<wp::SetupRequest>(&request)) {
        reply = server.setup(*s);
      } else if (auto* m = std::get_if<wp::MeasureRequest>(&request)) {
        reply = server.measure(*m);
      } else {
        reply = server.reseed(std::get<wp::ReseedRequest>(request));
      }
    } catch (const cuda::CudaError& e) {
      reply = wp::Failed{ErrorKind::cuda, e.what(), e.sticky()};
    } catch (const Error& e) {
      reply = wp::Failed{e.kind(), e.what(), false};
    } catch (const std::exception& e) {
      reply = wp::Failed{ErrorKind::internal, e.what(), false};
    }
    if (!write_frame(out_fd, wp::encode(reply))) {
      return 1;
    }
    if (exiting(reply)) {
      return 0;
    }
  }
  return 0;
}

// The reply a request expects; any other is a bug in one of the two ends.
template <typename T> const T& expect(const wp::Reply& reply, wp::ReplyKind kind) {
  if (auto* r = std::get_if<T>(&reply)) {
    return *r;
  }
  throw Error(ErrorKind::internal, std::string("worker protocol: expected a '") +
                                       wp::to_string(kind) + "' reply, got another kind");
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

Worker::Worker(double setup_timeout_s, double measure_timeout_s, std::string executable)
    : m_setup_timeout(setup_timeout_s), m_measure_timeout(measure_timeout_s),
      m_executable(std::move(executable)) {
  signal(SIGPIPE, SIG_IGN);
}

Worker::~Worker() {
  if (m_pid > 0) {
    write_frame(m_to_worker, wp::encode(wp::QuitRequest{}));
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
  std::string exe = m_executable;
  if (exe.empty()) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
      throw Error(ErrorKind::internal, "cannot find this executable (/proc/self/exe)");
    }
    exe.assign(self, size_t(n));
  }
  int to[2];
  int from[2];
  if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) {
    throw Error(ErrorKind::internal, std::string("pipe: ") + std::strerror(errno));
  }
  pid_t pid = fork();
  if (pid < 0) {
    throw Error(ErrorKind::internal, std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec. The pipes move to fds 3 and 4,
    // first above 4, so that neither dup2 closes the other end or keeps O_CLOEXEC
    // (dup2 onto the same fd changes nothing) in a process with few open files.
    int in = to[0] > 4 ? to[0] : fcntl(to[0], F_DUPFD, 5);
    int out = from[1] > 4 ? from[1] : fcntl(from[1], F_DUPFD, 5);
    if (in < 0 || out < 0 || dup2(in, 3) < 0 || dup2(out, 4) < 0) {
      _exit(127);
    }
    char in_fd[] = "3";
    char out_fd[] = "4";
    char flag[] = "--autotune-worker";
    char* args[] = {exe.data(), flag, in_fd, out_fd, nullptr};
    execv(exe.c_str(), args);
    _exit(127);
  }
  ::close(to[0]);
  ::close(from[1]);
  m_pid = pid;
  m_to_worker = to[1];
  m_from_worker = from[0];
}

std::variant<wp::Reply, Worker::Lost> Worker::call(const wp::Request& request, double timeout_s,
                                                   const std::function<void()>& meanwhile) {
  if (m_pid <= 0) {
    spawn();
  }
  Lost lost{WorkerLoss::died, "the worker process is gone"};
  if (write_frame(m_to_worker, wp::encode(request))) {
    if (meanwhile) {
      try {
        meanwhile();
      } catch (...) {
        // The worker is mid-request and its reply would answer the wrong call.
        if (m_pid > 0) {
          kill(m_pid, SIGKILL);
        }
        stop();
        throw;
      }
    }
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(timeout_s));
    std::string body;
    ReadStatus s = read_frame(m_from_worker, body, deadline);
    if (s == ReadStatus::ok) {
      return wp::decode_reply(body);
    }
    lost = s == ReadStatus::timeout
               ? Lost{WorkerLoss::deadline,
                      "no answer within " + num(timeout_s) + " s: the worker was killed"}
               : Lost{WorkerLoss::died, "the worker process died"};
  }
  if (m_pid > 0 && lost.why == WorkerLoss::died) {
    // It ended on its own: say how.
    int status = 0;
    if (waitpid(m_pid, &status, 0) == m_pid) {
      m_pid = -1;
      if (WIFSIGNALED(status)) {
        lost.message += std::string(" (signal ") + strsignal(WTERMSIG(status)) + ")";
      } else if (WIFEXITED(status)) {
        lost.message += " (exit code " + std::to_string(WEXITSTATUS(status)) + ")";
      }
    }
  }
  if (m_pid > 0) {
    kill(m_pid, SIGKILL);
  }
  stop();
  ++m_restarts;
  return lost;
}

const wp::Reply& Worker::answered(const std::variant<wp::Reply, Lost>& answer,
                                  const std::string& what) {
  if (auto* lost = std::get_if<Lost>(&answer)) {
    throw Error(ErrorKind::cuda, what + lost->message);
  }
  const wp::Reply& reply = std::get<wp::Reply>(answer);
  if (auto* f = std::get_if<wp::Failed>(&reply)) {
    if (f->exiting) {
      retire();
    }
    throw Error(ErrorKind::cuda, what + f->message);
  }
  return reply;
}

void Worker::retire() {
  if (m_pid > 0) {
    waitpid(m_pid, nullptr, 0);
    m_pid = -1;
  }
  stop();
  ++m_restarts;
}

SetupResult Worker::setup(const std::string& op, const Problem& problem, unsigned long long seed,
                          const TimingProtocol& protocol, const std::function<void()>& meanwhile) {
  m_setup_request = wp::SetupRequest{op, problem.fields, seed, protocol};
  m_ready = false;
  auto answer = call(*m_setup_request, m_setup_timeout, meanwhile);
  if (auto* lost = std::get_if<Lost>(&answer)) {
    throw Error(ErrorKind::cuda,
                "setting up " + op + " " + problem.key() + " failed: " + lost->message);
  }
  const wp::Reply& reply = std::get<wp::Reply>(answer);
  if (auto* f = std::get_if<wp::Failed>(&reply)) {
    if (f->exiting) {
      retire();
    }
    // No GPU is the user's situation (exit 3); anything else is a CUDA failure.
    throw Error(f->kind == ErrorKind::no_device ? ErrorKind::no_device : ErrorKind::cuda,
                "setting up " + op + " " + problem.key() + ": " + f->message);
  }
  const wp::SetupDone& done = expect<wp::SetupDone>(reply, wp::ReplyKind::setup_done);
  m_ready = true;
  m_seconds += done.seconds;
  SetupResult r;
  r.copy = done.copy;
  r.has_copy = done.has_copy;
  r.device_bytes = size_t(done.device_bytes);
  return r;
}

void Worker::ensure_ready() {
  if (m_ready && m_pid > 0) {
    return;
  }
  if (!m_setup_request) {
    throw Error(ErrorKind::internal, "Worker used before setup()");
  }
  const Clock::time_point t0 = Clock::now();
  auto answer = call(*m_setup_request, m_setup_timeout);
  m_restart_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  const wp::SetupDone& done = expect<wp::SetupDone>(
      answered(answer, "a replacement worker could not be set up: "), wp::ReplyKind::setup_done);
  m_seconds += done.seconds;
  m_ready = true;
}

MeasureResult Worker::measure(const Config& config, const std::string& kernel,
                              const std::string& cubin, const TimingProtocol& protocol,
                              bool check_only, const std::string& module_key) {
  ensure_ready();
  // The deadline covers the check plus the timing protocol's own cap.
  double timeout = m_measure_timeout + protocol.max_seconds;
  auto answer =
      call(wp::MeasureRequest{config, kernel, cubin, check_only, protocol, module_key}, timeout);
  MeasureResult r;
  if (auto* lost = std::get_if<Lost>(&answer)) {
    r.outcome = lost->why == WorkerLoss::deadline ? cache::Outcome::timeout : cache::Outcome::fault;
    r.message = lost->message;
    return r;
  }
  const wp::Reply& reply = std::get<wp::Reply>(answer);
  if (auto* f = std::get_if<wp::Failed>(&reply)) {
    if (f->exiting) {
      retire();
    }
    // Not a variant's outcome: the worker could not do its job at all.
    throw Error(f->kind == ErrorKind::cuda ? ErrorKind::cuda : ErrorKind::internal,
                "worker: " + f->message);
  }
  const wp::Measured& m = expect<wp::Measured>(reply, wp::ReplyKind::measured);
  m_seconds += m.seconds;
  r.outcome = m.outcome;
  r.timing = m.timing;
  r.samples_us = m.samples_us;
  r.rel_err = m.rel_err;
  r.sm_clock_mhz = int(m.sm_clock_mhz);
  r.message = m.message;
  if (m.exiting) {
    // The worker reported a fault and exits; the next call starts a new one.
    retire();
  }
  return r;
}

void Worker::reseed(unsigned long long seed) {
  ensure_ready();
  auto answer = call(wp::ReseedRequest{seed}, m_setup_timeout);
  m_seconds +=
      expect<wp::Reseeded>(answered(answer, "worker: new inputs failed: "), wp::ReplyKind::reseeded)
          .seconds;
  // A replacement worker must draw the same inputs.
  m_setup_request->seed = seed;
}

} // namespace autotune
