#include "cli.hpp"
#include "worker.hpp"

int main(int argc, char** argv) {
  int code = 0;
  if (autotune::maybe_run_worker(argc, argv, code)) {
    return code;
  }
  return autotune::run_cli(argc, argv);
}
