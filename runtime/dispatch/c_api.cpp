// The C ABI over autotune::Runtime: exceptions become status codes plus a
// thread-local message; nothing throws across the boundary.
#include "autotune.h"
#include "autotune.hpp"

#include "runtime/base/error.hpp"

#include <cstring>
#include <string>

struct autotune_runtime {
  autotune::Runtime runtime;
  explicit autotune_runtime(const autotune::RuntimeOptions& o) : runtime(o) {}
};

namespace {

thread_local std::string t_last_error;

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

template <typename F> int guarded(F&& body) {
  try {
    body();
    t_last_error.clear();
    return AUTOTUNE_OK;
  } catch (const autotune::Error& e) {
    t_last_error = e.what();
    return status_for(e);
  } catch (const std::exception& e) {
    t_last_error = e.what();
    return AUTOTUNE_ERROR_INTERNAL;
  } catch (...) {
    t_last_error = "unknown exception";
    return AUTOTUNE_ERROR_INTERNAL;
  }
}

autotune::CausalConv1dArgs convert(const autotune_causal_conv1d_args* a) {
  if (!a) {
    throw autotune::Error(autotune::ErrorKind::usage, "causal_conv1d: args is NULL");
  }
  auto type = [](int32_t t, const char* what) {
    if (t < AUTOTUNE_FP32 || t > AUTOTUNE_BF16) {
      throw autotune::Error(autotune::ErrorKind::usage,
                            std::string("causal_conv1d: ") + what + " has unknown dtype " +
                                std::to_string(t));
    }
    return static_cast<autotune::ElementType>(t);
  };
  autotune::CausalConv1dArgs c;
  c.x = a->x;
  c.weight = a->weight;
  c.bias = a->bias;
  c.out = a->out;
  c.batch = a->batch;
  c.channels = a->channels;
  c.length = a->length;
  c.width = a->width;
  c.x_type = type(a->x_dtype, "x_dtype");
  c.weight_type = type(a->weight_dtype, "weight_dtype");
  c.silu = a->silu != 0;
  c.x_batch_stride = a->x_batch_stride;
  c.x_channel_stride = a->x_channel_stride;
  c.out_batch_stride = a->out_batch_stride;
  c.out_channel_stride = a->out_channel_stride;
  return c;
}

autotune::Runtime& runtime_of(autotune_runtime* rt) {
  if (!rt) {
    throw autotune::Error(autotune::ErrorKind::usage, "runtime handle is NULL");
  }
  return rt->runtime;
}

} // namespace

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

const char* autotune_last_error(void) { return t_last_error.c_str(); }

int autotune_causal_conv1d(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                           void* stream) {
  return guarded(
      [&] { runtime_of(rt).causal_conv1d(convert(args), static_cast<CUstream>(stream)); });
}

int autotune_causal_conv1d_variant(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                                   char* buffer, uint64_t size) {
  return guarded([&] {
    auto s = runtime_of(rt).select_causal_conv1d(convert(args));
    std::string text = s.source + " " + s.variant;
    if (!buffer || size < text.size() + 1) {
      throw autotune::Error(autotune::ErrorKind::usage,
                            "buffer too small: need " + std::to_string(text.size() + 1) + " bytes");
    }
    std::memcpy(buffer, text.c_str(), text.size() + 1);
  });
}

} // extern "C"
