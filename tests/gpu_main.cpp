// GPU tests exit 77 (ctest: skipped) with the reason when no GPU is usable.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "runtime/cuda/driver.hpp"
#include "tuner/worker.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  // Tuning from a test starts workers from this executable.
  int code = 0;
  if (autotune::maybe_run_worker(argc, argv, code)) {
    return code;
  }
  std::string why;
  if (!autotune::cuda::gpu_available(&why)) {
    std::printf("SKIPPED: GPU tests need a GPU: %s\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
