// Shared pieces of the C ABI files (c_api*.cpp): exceptions become status codes
// plus a thread-local message; nothing throws across the boundary.
#pragma once

#include "autotune.h"
#include "autotune.hpp"

#include "runtime/base/error.hpp"

#include <exception>
#include <string>

struct autotune_runtime {
  autotune::Runtime runtime;
  explicit autotune_runtime(const autotune::RuntimeOptions& o) : runtime(o) {}
};

namespace autotune::c_api {

void set_last_error(const std::string& message);
const char* last_error();
int status_for(const autotune::Error& e);

template <typename F> int guarded(F&& body) {
  try {
    body();
    set_last_error("");
    return AUTOTUNE_OK;
  } catch (const autotune::Error& e) {
    set_last_error(e.what());
    return status_for(e);
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return AUTOTUNE_ERROR_INTERNAL;
  } catch (...) {
    set_last_error("unknown exception");
    return AUTOTUNE_ERROR_INTERNAL;
  }
}

inline autotune::Runtime& runtime_of(autotune_runtime* rt) {
  if (!rt) {
    throw autotune::Error(autotune::ErrorKind::usage, "runtime handle is NULL");
  }
  return rt->runtime;
}

// Writes "SOURCE VARIANT" and its NUL into the caller's buffer (the *_variant entry
// points); throws Error(usage) with the size it needs when the buffer is too small.
void write_selection(const autotune::Selection& s, char* buffer, uint64_t size);

// The args struct of a C call; throws Error(usage) when it is NULL.
template <typename T> const T& args_of(const T* args, const char* op) {
  if (!args) {
    throw autotune::Error(autotune::ErrorKind::usage, std::string(op) + ": args is NULL");
  }
  return *args;
}

} // namespace autotune::c_api
