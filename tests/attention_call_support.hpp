// Helpers of the CPU tests that bind attention calls of the C ABI (varlen, KV cache):
// the op, problems and configurations from text, tensors at made-up addresses (binding
// reads no memory), binding a call and the usage error it raises.
#pragma once

#include "runtime/base/error.hpp"
#include "runtime/dispatch/autotune.hpp"
#include "runtime/ops/attention.hpp"
#include "runtime/ops/call.hpp"
#include "runtime/ops/templates.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace autotune::testing {

inline const AttentionOp& attn() {
  return static_cast<const AttentionOp&>(find_op("attention"));
}
inline Problem problem(const std::string& shape) {
  return attn().make_problem(parse_fields(shape, "t"));
}
inline Config config(const std::string& text) {
  return parse_fields(text, "config");
}

inline Tensor make(uintptr_t address, int32_t dtype, std::initializer_list<int64_t> shape,
                   std::initializer_list<int64_t> strides = {}) {
  return tensor(reinterpret_cast<const void*>(address), ElementType(dtype), shape, strides);
}

inline BoundCall bind(const autotune_attention_args& a) {
  BoundCall b;
  bind_call(attn().args_desc(), &a, b);
  check_layout(attn().args_desc(), b);
  return b;
}

// The problem key a call binds to.
inline std::string problem_of(const autotune_attention_args& a) {
  return attn().make_problem(call_fields(attn().args_desc(), bind(a))).key();
}

// The call is refused, binding it or making its problem, with a usage error saying
// `message`.
inline void refused(const autotune_attention_args& a, const std::string& message) {
  std::string what;
  try {
    problem_of(a);
  } catch (const Error& e) {
    what = e.what();
    CHECK(e.kind() == ErrorKind::usage);
  }
  CHECK_MESSAGE(what.find(message) != std::string::npos,
                "expected '" << message << "' in '" << what << "'");
}

// The portable kernel's arguments the tuner packs for its own call of problem p (every
// tensor at 0x1000).
inline AttentionKernelArgs tuner_args(const Config& c, const Problem& p) {
  const std::vector<CUdeviceptr> tensors(attn().tensors(p).size(), CUdeviceptr(0x1000));
  ArgPack args;
  attn().pack(c, p, tensors, args);
  REQUIRE(args.size() == 1);
  AttentionKernelArgs k;
  std::memcpy(&k, args.pointers()[0], sizeof k);
  return k;
}

} // namespace autotune::testing
