#include "commands.hpp"

#include "runtime/base/error.hpp"

namespace autotune {

int run_cache_command(int, char**) {
  throw Error(ErrorKind::usage, "'autotune cache' is not built yet");
}

} // namespace autotune
