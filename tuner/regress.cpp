#include "commands.hpp"

#include "runtime/base/error.hpp"

namespace autotune {

int run_regress_command(int, char**) {
  throw Error(ErrorKind::usage, "'autotune regress' is not built yet");
}

} // namespace autotune
