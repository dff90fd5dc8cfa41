// The C ABI: runtime lifetime and errors. Per-op entry points live in c_api_<op>.cpp.
#include "c_api_impl.hpp"

#include <cstring>

namespace autotune::c_api {
namespace {
thread_local std::string t_last_error;
} // namespace

void set_last_error(const std::string& message) { t_last_error = message; }
const char* last_error() { return t_last_error.c_str(); }

int status_for(const autotune::Error& e) {
  using autotune::ErrorKind;
  switch (e.kind()) {
  case ErrorKind::usage:
  case ErrorKind::config: return AUTOTUNE_ERROR_INVALID_ARGUMENT;
  case ErrorKind::no_device: return AUTOTUNE_ERROR_NO_DEVICE;
  case ErrorKind::not_tuned: return AUTOTUNE_ERROR_NOT_TUNED;
  case ErrorKind::cuda:
  case ErrorKind::compile: return AUTOTUNE_ERROR_CUDA;
  case ErrorKind::database:
  case ErrorKind::io: return AUTOTUNE_ERROR_DATABASE;
  default: return AUTOTUNE_ERROR_INTERNAL;
  }
}

void write_selection(const autotune::Selection& s, char* buffer, uint64_t size) {
  const std::string text = s.source + " " + s.variant;
  if (!buffer || size < text.size() + 1) {
    throw autotune::Error(autotune::ErrorKind::usage,
                          "buffer too small: need " + std::to_string(text.size() + 1) + " bytes");
  }
  std::memcpy(buffer, text.c_str(), text.size() + 1);
}

autotune::ElementType element_type(int32_t code, const char* what) {
  if (code < AUTOTUNE_FP32 || code > AUTOTUNE_BF16) {
    throw autotune::Error(autotune::ErrorKind::usage,
                          std::string(what) + " has unknown dtype " + std::to_string(code));
  }
  return static_cast<autotune::ElementType>(code);
}

} // namespace autotune::c_api

using autotune::c_api::guarded;

extern "C" {

int autotune_runtime_create(const char* database, int require_tuned, autotune_runtime** out) {
  return guarded([&] {
    if (!out) {
      throw autotune::Error(autotune::ErrorKind::usage, "autotune_runtime_create: out is NULL");
    }
    autotune::RuntimeOptions o;
    o.database = database ? database : "";
    o.require_tuned = require_tuned != 0;
    *out = new autotune_runtime(o);
  });
}

void autotune_runtime_destroy(autotune_runtime* rt) { delete rt; }

const char* autotune_last_error(void) { return autotune::c_api::last_error(); }

} // extern "C"
