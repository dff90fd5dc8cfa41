// The C ABI: runtime lifetime and errors. Per-op entry points live in c_api_<op>.cpp.
#include "c_api_impl.hpp"

#include <cstring>

namespace autotune::c_api {
namespace {
thread_local std::string t_last_error;
} // namespace

void set_last_error(const std::string& message) {
  t_last_error = message;
}
const char* last_error() {
  return t_last_error.c_str();
}

int status_for(const autotune::Error& e) {
  using autotune::ErrorKind;
  switch (e.kind()) {
  case ErrorKind::usage:
  case ErrorKind::config:
    return AUTOTUNE_ERROR_INVALID_ARGUMENT;
  case ErrorKind::no_device:
    return AUTOTUNE_ERROR_NO_DEVICE;
  case ErrorKind::not_tuned:
    return AUTOTUNE_ERROR_NOT_TUNED;
  case ErrorKind::cuda:
  case ErrorKind::compile:
    return AUTOTUNE_ERROR_CUDA;
  case ErrorKind::database:
  case ErrorKind::io:
    return AUTOTUNE_ERROR_DATABASE;
  default:
    return AUTOTUNE_ERROR_INTERNAL;
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

} // namespace autotune::c_api

using autotune::c_api::args_of;
using autotune::c_api::guarded;
using autotune::c_api::runtime_of;
using autotune::c_api::write_selection;

extern "C" {

int autotune_runtime_create(const char* database, int require_tuned, autotune_runtime** out) {
  return guarded([&] {
    if (!out) {
      throw autotune::Error(autotune::ErrorKind::usage, "autotune_runtime_create: out is NULL");
    }
    *out = nullptr; // stays NULL when creating fails
    autotune::RuntimeOptions o;
    o.database = database ? database : "";
    o.require_tuned = require_tuned != 0;
    *out = new autotune_runtime(o);
  });
}

int autotune_runtime_create_with_policy(const char* database, const char* policy,
                                        autotune_runtime** out) {
  return autotune_runtime_create_on_device(database, policy, 0, out);
}

int autotune_runtime_create_on_device(const char* database, const char* policy, int device,
                                      autotune_runtime** out) {
  return autotune_runtime_create_tuning(database, policy, device, 0, nullptr, out);
}

int autotune_runtime_create_tuning(const char* database, const char* policy, int device,
                                   double tune_budget_s, const char* tuner_path,
                                   autotune_runtime** out) {
  return guarded([&] {
    if (!out || !policy) {
      throw autotune::Error(autotune::ErrorKind::usage,
                            "autotune_runtime_create: out or policy is NULL");
    }
    *out = nullptr; // stays NULL when creating fails
    autotune::RuntimeOptions o;
    o.database = database ? database : "";
    if (device < 0) {
      throw autotune::Error(autotune::ErrorKind::usage,
                            "device must be a GPU ordinal (0, 1, ...), not " +
                                std::to_string(device));
    }
    o.device = device;
    const std::string p = policy;
    if (p == "nearest") {
      o.policy = autotune::Policy::nearest;
    } else if (p == "default") {
      o.policy = autotune::Policy::default_variant;
    } else if (p == "error") {
      o.policy = autotune::Policy::error;
    } else if (p.rfind("pin:", 0) == 0 && p.size() > 4) {
      o.policy = autotune::Policy::pin;
      o.pinned = p.substr(4);
    } else if (p == "heuristic") {
      o.policy = autotune::Policy::heuristic;
    } else if (p == "tune") {
      o.policy = autotune::Policy::tune;
    } else {
      throw autotune::Error(autotune::ErrorKind::usage,
                            "unknown policy '" + p +
                                "' (expected nearest, heuristic, default, error, tune or "
                                "pin:CONFIG)");
    }
    if (tune_budget_s != 0) { // 0: the default; anything else is checked by the runtime
      o.tune_budget_s = tune_budget_s;
    }
    o.tuner_path = tuner_path ? tuner_path : "";
    *out = new autotune_runtime(o);
  });
}

void autotune_runtime_destroy(autotune_runtime* rt) {
  delete rt;
}

const char* autotune_last_error(void) {
  return autotune::c_api::last_error();
}

void autotune_forget_device_memory(void) {
  autotune::forget_device_memory();
}

int autotune_describe_args(const char* op, char* buffer, uint64_t size) {
  return guarded([&] {
    if (!op) {
      throw autotune::Error(autotune::ErrorKind::usage, "autotune_describe_args: op is NULL");
    }
    const std::string text = autotune::describe_args(op);
    if (!buffer || size < text.size() + 1) {
      throw autotune::Error(autotune::ErrorKind::usage,
                            "buffer too small: need " + std::to_string(text.size() + 1) + " bytes");
    }
    std::memcpy(buffer, text.c_str(), text.size() + 1);
  });
}

int autotune_causal_conv1d(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                           void* stream) {
  return guarded([&] {
    runtime_of(rt).causal_conv1d(args_of(args, "causal_conv1d"), static_cast<CUstream>(stream));
  });
}

int autotune_causal_conv1d_variant(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                                   char* buffer, uint64_t size) {
  return guarded([&] {
    write_selection(runtime_of(rt).select_causal_conv1d(args_of(args, "causal_conv1d")), buffer,
                    size);
  });
}

int autotune_causal_conv1d_update(autotune_runtime* rt,
                                  const autotune_causal_conv1d_update_args* args, void* stream) {
  return guarded([&] {
    runtime_of(rt).causal_conv1d_update(args_of(args, "causal_conv1d_update"),
                                        static_cast<CUstream>(stream));
  });
}

int autotune_causal_conv1d_update_variant(autotune_runtime* rt,
                                          const autotune_causal_conv1d_update_args* args,
                                          char* buffer, uint64_t size) {
  return guarded([&] {
    write_selection(
        runtime_of(rt).select_causal_conv1d_update(args_of(args, "causal_conv1d_update")), buffer,
        size);
  });
}

int autotune_selective_state_update(autotune_runtime* rt,
                                    const autotune_selective_state_update_args* args,
                                    void* stream) {
  return guarded([&] {
    runtime_of(rt).selective_state_update(args_of(args, "selective_state_update"),
                                          static_cast<CUstream>(stream));
  });
}

int autotune_selective_state_update_variant(autotune_runtime* rt,
                                            const autotune_selective_state_update_args* args,
                                            char* buffer, uint64_t size) {
  return guarded([&] {
    write_selection(
        runtime_of(rt).select_selective_state_update(args_of(args, "selective_state_update")),
        buffer, size);
  });
}

int autotune_attention(autotune_runtime* rt, const autotune_attention_args* args, void* stream) {
  return guarded(
      [&] { runtime_of(rt).attention(args_of(args, "attention"), static_cast<CUstream>(stream)); });
}

int autotune_attention_workspace_size(autotune_runtime* rt, const autotune_attention_args* args,
                                      uint64_t* bytes) {
  return guarded([&] {
    if (!bytes) {
      throw autotune::Error(autotune::ErrorKind::usage, "attention: bytes is NULL");
    }
    *bytes = runtime_of(rt).attention_workspace_size(args_of(args, "attention"));
  });
}

int autotune_attention_variant(autotune_runtime* rt, const autotune_attention_args* args,
                               char* buffer, uint64_t size) {
  return guarded([&] {
    write_selection(runtime_of(rt).select_attention(args_of(args, "attention")), buffer, size);
  });
}

int autotune_selective_scan(autotune_runtime* rt, const autotune_selective_scan_args* args,
                            void* stream) {
  return guarded([&] {
    runtime_of(rt).selective_scan(args_of(args, "selective_scan"), static_cast<CUstream>(stream));
  });
}

int autotune_selective_scan_variant(autotune_runtime* rt, const autotune_selective_scan_args* args,
                                    char* buffer, uint64_t size) {
  return guarded([&] {
    write_selection(runtime_of(rt).select_selective_scan(args_of(args, "selective_scan")), buffer,
                    size);
  });
}

} // extern "C"
