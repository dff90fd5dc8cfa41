// Helper of the CPU tests that pack calls of the C ABI through an op's plan.
#pragma once

#include "runtime/ops/op.hpp"

#include <doctest/doctest.h>

#include <cstring>

namespace autotune::testing {

// The kernel argument struct K that `plan` packs for the call `args` bound as `call`;
// the packed size must be K's.
template <typename K> K packed_args(const CallPlan& plan, const void* args, const BoundCall& call) {
  alignas(16) unsigned char out[k_kernel_args_capacity];
  REQUIRE(plan.pack(args, call, out) == sizeof(K));
  K k;
  std::memcpy(&k, out, sizeof k);
  return k;
}

} // namespace autotune::testing
