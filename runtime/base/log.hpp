// Diagnostics on stderr, filtered by AUTOTUNE_LOG=error|warn|info|debug (default warn).
#pragma once

#include <string_view>

namespace autotune {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

LogLevel log_level();
bool log_enabled(LogLevel level);
void log(LogLevel level, std::string_view message);

} // namespace autotune
