#include "log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace autotune {

LogLevel log_level() {
  static const LogLevel level = [] {
    const char* env = std::getenv("AUTOTUNE_LOG");
    if (!env) {
      return LogLevel::warn;
    }
    if (!std::strcmp(env, "debug"))
      return LogLevel::debug;
    if (!std::strcmp(env, "info"))
      return LogLevel::info;
    if (!std::strcmp(env, "error"))
      return LogLevel::error;
    return LogLevel::warn;
  }();
  return level;
}

bool log_enabled(LogLevel level) {
  return level <= log_level();
}

void log(LogLevel level, std::string_view message) {
  if (!log_enabled(level)) {
    return;
  }
  static std::mutex mutex;
  static const char* k_names[] = {"error", "warning", "info", "debug"};
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "autotune: %s: %.*s\n", k_names[int(level)], int(message.size()),
               message.data());
}

} // namespace autotune
