// Policy::tune: the default tuner (the `autotune` CLI in a child process) and the
// tune-then-read-back step the runtime runs on a miss.
#include "tune.hpp"

#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

extern char** environ;

namespace autotune {
namespace fs = std::filesystem;

namespace {

// What the end of the child's output a failure message quotes: enough for the
// CLI's error line and the lines before it.
constexpr size_t k_output_tail = 4000;

bool is_executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// The directory of the shared object (libautotune.so) or executable this code was
// linked into.
std::string own_directory() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&find_tuner_cli), &info) == 0 || !info.dli_fname ||
      !*info.dli_fname) {
    return "";
  }
  std::error_code ec;
  fs::path self = fs::canonical(info.dli_fname, ec);
  if (ec) {
    self = fs::absolute(info.dli_fname, ec);
  }
  return self.parent_path().string();
}

std::string format_seconds(double s) {
  char text[64];
  std::snprintf(text, sizeof text, "%.10g", s);
  return text;
}

// CUDA_VISIBLE_DEVICES for a child that must see this process's GPU `device` as its
// device 0: the device-th entry of ours (the child inherits CUDA_DEVICE_ORDER, so the
// entries mean the same to it), else the ordinal itself.
std::string visible_device(int device) {
  const char* ours = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!ours) {
    return std::to_string(device);
  }
  std::vector<std::string> entries = split(ours, ',');
  if (device >= int(entries.size())) {
    throw Error(ErrorKind::not_tuned, "policy tune: GPU " + std::to_string(device) +
                                          " is not among CUDA_VISIBLE_DEVICES=" + ours);
  }
  return trim(entries[size_t(device)]);
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  const int code = WEXITSTATUS(status);
  std::string text = "exited with status " + std::to_string(code);
  switch (code) {
  case 1:
    return text + " (no variant passed the correctness check, or a check failed)";
  case 2:
    return text + " (a usage, configuration or database error)";
  case 3:
    return text + " (no GPU or driver)";
  default:
    return text;
  }
}

std::string read_tail(int fd) {
  std::string out;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size <= 0) {
    return out;
  }
  const off_t start = size > off_t(k_output_tail) ? size - off_t(k_output_tail) : 0;
  out.resize(size_t(size - start));
  ssize_t n = ::pread(fd, out.data(), out.size(), start);
  out.resize(n > 0 ? size_t(n) : 0);
  return trim(out);
}

} // namespace

std::string find_tuner_cli(const std::string& tuner_path) {
  if (!tuner_path.empty()) {
    if (!is_executable_file(tuner_path)) {
      throw Error(ErrorKind::not_tuned, "policy tune: tuner_path " + tuner_path +
                                            " is not an executable file (the autotune CLI)");
    }
    return tuner_path;
  }
  if (const char* env = std::getenv("AUTOTUNE_CLI"); env && *env) {
    if (!is_executable_file(env)) {
      throw Error(ErrorKind::not_tuned, std::string("policy tune: AUTOTUNE_CLI=") + env +
                                            " is not an executable file (the autotune CLI)");
    }
    return env;
  }
  std::vector<std::string> looked;
  if (std::string dir = own_directory(); !dir.empty()) {
    for (const char* relative : {"autotune", "../bin/autotune", "../../bin/autotune"}) {
      fs::path candidate = (fs::path(dir) / relative).lexically_normal();
      if (is_executable_file(candidate)) {
        return candidate.string();
      }
      if (std::find(looked.begin(), looked.end(), candidate.string()) == looked.end()) {
        looked.push_back(candidate.string());
      }
    }
  }
  throw Error(ErrorKind::not_tuned,
              "policy tune: the autotune CLI was not found (tuner_path is empty, AUTOTUNE_CLI "
              "is unset, and there is no executable at " +
                  (looked.empty() ? std::string("the library's directory (dladdr failed)")
                                  : join(looked, ", ")) +
                  "); set RuntimeOptions::tuner_path or AUTOTUNE_CLI to the autotune executable");
}

void run_tuner_cli(const TuneRequest& request, const std::string& tuner_path) {
  const std::string cli = find_tuner_cli(tuner_path);
  std::vector<std::string> args = {cli,
                                   "--arch",
                                   "auto",
                                   "--op",
                                   request.op,
                                   "--shape",
                                   request.problem,
                                   "--db",
                                   request.database,
                                   "--budget-s",
                                   format_seconds(request.budget_s),
                                   "--quiet"};
  std::string command;
  for (const std::string& a : args) {
    command += (command.empty() ? "" : " ") +
               (a.find_first_of(" \"'") == std::string::npos ? a : "\"" + a + "\"");
  }

  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    if (request.device == 0 || std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0) {
      env.emplace_back(*e);
    }
  }
  if (request.device != 0) {
    env.push_back("CUDA_VISIBLE_DEVICES=" + visible_device(request.device));
  }

  // The child's stdout (its result table) and stderr go to an unlinked temporary
  // file, not to this process's streams; a file rather than a pipe, so that a
  // worker process outliving the CLI cannot keep this call waiting.
  fs::path dir = fs::temp_directory_path();
  std::string pattern = (dir / "autotune-tune-XXXXXX").string();
  int out_fd = ::mkostemp(pattern.data(), O_CLOEXEC);
  if (out_fd < 0) {
    throw Error(ErrorKind::not_tuned, "policy tune: cannot create a temporary file in " +
                                          dir.string() + ": " + std::strerror(errno));
  }
  ::unlink(pattern.c_str());
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{out_fd};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 2);
  std::vector<char*> argv;
  for (std::string& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& e : env) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, cli.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    throw Error(ErrorKind::not_tuned,
                "policy tune: cannot start " + command + ": " + std::strerror(spawned));
  }
  int status = 0;
  pid_t waited = 0;
  do {
    waited = ::waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  if (waited < 0) {
    throw Error(ErrorKind::not_tuned, "policy tune: cannot wait for " + command + ": " +
                                          std::strerror(errno) +
                                          " (is SIGCHLD ignored in this process?)");
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    return;
  }
  std::string output = read_tail(out_fd);
  throw Error(ErrorKind::not_tuned, "policy tune: " + command + " " + describe_status(status) +
                                        (output.empty() ? std::string(", printing nothing")
                                                        : ";\nits output ends with:\n" + output));
}

void check_tune_options(const RuntimeOptions& options, std::string& database_path) {
  const double budget = options.tune_budget_s;
  if (!(budget > 0) || !std::isfinite(budget) || budget > k_max_tune_budget_s) {
    throw Error(ErrorKind::usage,
                "tune_budget_s must be a positive number of seconds up to a week (" +
                    format_seconds(k_max_tune_budget_s) + "), not " + format_seconds(budget));
  }
  std::string path = options.database;
  if (path.empty()) {
    try {
      path = cache::default_database_path();
    } catch (const Error& e) {
      throw Error(ErrorKind::usage,
                  std::string("policy tune stores each winner in the runtime's database, and "
                              "this runtime has none: ") +
                      e.what() + " (or pass a database path)");
    }
  }
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    throw Error(ErrorKind::usage, "policy tune: the database " + path + " is a directory");
  }
  fs::path absolute = fs::absolute(path, ec);
  database_path = ec ? path : absolute.lexically_normal().string();
}

cache::WinnerRecord tune_problem(const Tuner& tuner, const TuneRequest& request,
                                 const std::string& device_key, const std::string& template_hash,
                                 const std::string& nvrtc_version) {
  const std::string what = request.op + " " + request.problem;
  try {
    tuner(request);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::not_tuned) {
      throw;
    }
    throw Error(ErrorKind::not_tuned, "policy tune of " + what + " failed: " + e.what());
  } catch (const std::exception& e) {
    throw Error(ErrorKind::not_tuned, "policy tune of " + what + " failed: " + e.what());
  }
  std::error_code ec;
  if (!fs::exists(request.database, ec)) {
    throw Error(ErrorKind::not_tuned, "policy tune: the tuner finished, but no winner is "
                                      "stored for " +
                                          what + ": the database " + request.database +
                                          " does not exist");
  }
  std::optional<cache::WinnerRecord> winner;
  try {
    cache::Database db(request.database, cache::Database::Mode::read_only);
    winner = db.find_winner(device_key, request.op, request.problem, template_hash, nvrtc_version);
  } catch (const Error& e) {
    throw Error(ErrorKind::not_tuned,
                "policy tune: the tuner finished, but its database cannot be read: " +
                    std::string(e.what()));
  }
  if (!winner) {
    throw Error(ErrorKind::not_tuned,
                "policy tune: the tuner finished, but no winner is stored for " + what + " in " +
                    request.database +
                    " for this GPU, template and NVRTC version (a tuner of another build?)");
  }
  return *winner;
}

} // namespace autotune
