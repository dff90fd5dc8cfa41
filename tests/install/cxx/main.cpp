// Creates a runtime through the installed C++ API. Includes nothing but the installed
// header, so it compiles only if that header is self-contained. Exit 0 when a GPU is
// present, 3 with the library's message when there is none.
#include <autotune/autotune.hpp>

#include <cstdio>
#include <exception>

int main() {
  try {
    autotune::Runtime runtime; // $AUTOTUNE_DB; a missing file is not an error
    std::printf("cxx_consumer: runtime ready, %zu variants loaded\n", runtime.loaded_variants());
    return 0;
  } catch (const std::exception& e) {
    // autotune::Error (a std::runtime_error) and its kind are not in the installed
    // headers, so every failure exits 3 here; run.sh checks the message is "no GPU".
    std::fprintf(stderr, "cxx_consumer: %s\n", e.what());
    return 3;
  }
}
