// What `autotune` prints on stdout: a table per problem, or JSON with --json.
#pragma once

#include "tuner.hpp"

#include <cstdio>

namespace autotune {

void print_table(const TuneReport& report, std::FILE* out, size_t top = 10);
void print_json(const TuneReport& report, std::FILE* out);

} // namespace autotune
