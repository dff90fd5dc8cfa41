// One declarative description per op of its call: the C ABI struct's tensors and
// scalars (runtime/dispatch/autotune.h), each tensor's shape in terms of the
// problem's fields, its dtype rule, whether it is optional or an output, the
// strides the kernel can read. From it, generically: binding a call (the problem's
// fields read off the tensors, every size checked against the others), layout
// checks, the call's signature (the warm path's key), the problem handed to
// make_problem, the layout text Python builds its ctypes structs from
// (autotune_describe_args), and the build-time check that the C struct and the
// description agree (runtime/dispatch/c_api_*.cpp).
//
// autotune.h is plain C with no dependencies; it is the one header of the dispatch
// folder this layer includes, because the descriptions name its fields.
#pragma once

#include "runtime/dispatch/autotune.h"
#include "types.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace autotune {

using TensorArg = autotune_tensor;

static_assert(int(DType::f32) == AUTOTUNE_FP32 && int(DType::f16) == AUTOTUNE_FP16 &&
                  int(DType::bf16) == AUTOTUNE_BF16,
              "DType and autotune_dtype share their codes");

// What a BoundCall holds (attention's description has 24 fields); every op's description
// is checked against these (tests/test_runtime_ops_call.cpp).
constexpr int k_max_call_fields = 32;
constexpr int k_max_call_tensors = 16;

// Allowed dtypes, as a bit mask of 1 << DType.
constexpr uint8_t k_fp32 = 1;
constexpr uint8_t k_fp16_bf16 = 2 | 4;
constexpr uint8_t k_any_float = 1 | 2 | 4;

enum class FieldKind : uint8_t {
  size,   // a positive extent read off a tensor dimension (or an i32 scalar, 0: not given)
  dtype,  // an autotune_dtype code read off a tensor
  flag,   // 0/1: an optional tensor's presence, a form, or an i32 scalar
  choice, // an index into FieldDesc::choices (set by ArgsDesc::derive)
};

struct FieldDesc {
  const char* name; // the problem field (make_problem's key)
  FieldKind kind;
  int64_t fallback = -1;                 // when nothing binds it; -1: must be bound
  std::vector<const char*> choices = {}; // kind choice: spelling of each value
  // kind size: the weight of |log2 ratio| of this field in the runtime's distance
  // between problems (nearest policy); fields a kernel is instantiated for weigh more.
  double distance = 1.0;
};

// One dimension of a tensor: the value of field `field` plus `offset` (W-1 is
// {W, -1}). A dimension with offset 0 binds its field when still unbound.
struct DimRule {
  int8_t field;
  int8_t offset = 0;
};

enum class StrideRule : uint8_t {
  rows,       // any non-negative strides with a contiguous last dimension
  contiguous, // row-major contiguous
  // rows, or a 3-d [B, C, L] tensor whose middle (channel) dimension is the contiguous
  // one instead (channel-last; the op's layout field tells the two apart)
  rows_or_channels,
  any, // any non-negative strides (a decoding step's few elements: no vector access)
};

// A tensor of the call. Rules sharing an offset are alternative forms, told apart
// by ndim (selective_scan's fixed [D, N] or variable [B, G, N, L] B and C).
struct TensorRule {
  const char* name;
  size_t offset; // in the op's C args struct
  std::vector<DimRule> dims;
  int8_t dtype_field; // the dtype field it binds or must match; -1: always fixed_dtype
  uint8_t dtypes;     // allowed dtypes when it binds dtype_field
  int8_t presence;    // -1: required; else the flag field set to whether it is given
  bool output;
  StrideRule strides;
  int stride_multiple = 1; // strides and address a multiple of this many elements
  // Fields this form sets (a form's flag, a size the form implies), as {field, value}.
  std::vector<std::pair<int8_t, int8_t>> sets = {};
  const char* form = nullptr;         // the form's name in messages ("fixed", "variable")
  int8_t fixed_dtype = AUTOTUNE_FP32; // the dtype when dtype_field is -1 (AUTOTUNE_INT32: indices)
  // A form that applies only when the struct's tensor at this offset is given
  // (attention's paged k/v with block_table); SIZE_MAX: whatever is given. Forms of one
  // ndim are then told apart by it: the last applicable one matches.
  size_t when_given = SIZE_MAX;
};

enum class ScalarKind : uint8_t { i32, f64, ptr, u64 };

struct ScalarRule {
  const char* name;
  size_t offset;
  ScalarKind kind;
  // An i32 bound to this problem field: a 0/1 flag, or a size field's value (0: not
  // given, the field comes from elsewhere); -1: not in the problem.
  int8_t field = -1;
};

using CallValues = std::array<int64_t, k_max_call_fields>;

struct ArgsDesc {
  const char* op;
  size_t size; // sizeof the C args struct
  std::vector<FieldDesc> fields;
  std::vector<TensorRule> tensors; // in struct order
  std::vector<ScalarRule> scalars; // in struct order (a tensor appended later may follow them)
  // Fields that depend on strides (attention's layout bucket), set after binding.
  void (*derive)(const void* args, CallValues& values) = nullptr;

  int field(const char* name) const; // index; throws for an unknown name (a bug)
};

// A call bound to its description: every field's value (the signature of the warm
// path: equal values mean the same problem and plan) and, per tensor slot, the
// tensor given and the form that matched it (null when absent).
struct BoundCall {
  CallValues values{};
  std::array<const TensorArg*, k_max_call_tensors> tensors{};
  std::array<const TensorRule*, k_max_call_tensors> rules{};
  int slots = 0;
};

// Binds a call: reads the fields off the tensors and checks every size, dtype,
// presence and 0/1 flag against the description and the other tensors. Throws
// Error(usage) naming the argument and what was expected. Integer work only.
void bind_call(const ArgsDesc& desc, const void* args, BoundCall& out);

// Checks what the signature does not cover, per call: addresses (element and
// stride_multiple alignment), strides (non-negative, contiguous last dimension,
// the stride rule), and that no output overlaps itself. Throws Error(usage).
void check_layout(const ArgsDesc& desc, const BoundCall& call);

// Bytes of one element of an autotune_dtype code (AUTOTUNE_INT32 included, which DType
// does not name: index tensors are read, never computed).
size_t element_bytes(int32_t code);

// A tensor's address as the driver's device pointer (0 for an absent tensor).
inline CUdeviceptr device_ptr(const TensorArg& t) {
  return reinterpret_cast<CUdeviceptr>(t.data);
}

// Bytes from a tensor's address to one past its last element.
size_t tensor_extent_bytes(const TensorArg& t);

// The problem fields of a bound call, for Op::make_problem.
Fields call_fields(const ArgsDesc& desc, const BoundCall& call);

// The struct layout and rules as text (autotune_describe_args).
std::string describe_args(const ArgsDesc& desc);

// The tensor's slot (position among the struct's tensors) in a bound call.
int tensor_slot(const ArgsDesc& desc, const char* name);

} // namespace autotune
