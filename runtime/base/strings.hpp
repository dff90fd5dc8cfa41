#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace autotune {

std::vector<std::string> split(std::string_view text, char sep);
std::string trim(std::string_view text);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
bool starts_with(std::string_view text, std::string_view prefix);
// Escapes a string for a JSON string literal (without the quotes).
std::string json_escape(std::string_view text);
// Parses a decimal integer; throws Error(usage) naming `what` when it is not one.
long long parse_int(std::string_view text, std::string_view what);
// `v` with `precision` decimals (printf's "%.*f"), or "-" for NaN: a number in the
// CLI's tables and reports, where NaN stands for a missing value.
std::string fixed_or_dash(double v, int precision = 2);

} // namespace autotune
