// What every op descriptor speaks: dtypes, the user's shape string, the canonical
// problem (the tuning key's shape part), a configuration (one point of a search
// space), launch geometry and kernel-argument packing. Problem description,
// compile-time configuration and launch arguments stay apart (STYLE.md rule 8).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace autotune {

enum class DType { f32, f16, bf16 };

const char* to_string(DType t);
DType parse_dtype(const std::string& text, const std::string& what);
size_t dtype_size(DType t);
const char* template_type(DType t); // the element type name in templates/common/numeric.cuh

// Ordered key=value pairs, as in --shape "B=8,C=4096,L=2048,dtype=bf16".
using Fields = std::vector<std::pair<std::string, std::string>>;

Fields parse_fields(const std::string& text, const std::string& what);
std::string format_fields(const Fields& fields);
const std::string* find_field(const Fields& fields, const std::string& key);

// Reads a user's shape in an op's make_problem. Every error is a usage error that
// names the op and the field ("selective_scan shape: missing field 'N' (in ...)").
class ShapeReader {
public:
  // Rejects fields outside `known`; the message lists `shown` (default: known).
  ShapeReader(const Fields& shape, std::string op, const std::vector<std::string>& known,
              const std::vector<std::string>& shown = {});
  bool has(const char* key) const { return find_field(m_shape, key) != nullptr; }
  // The field's text, else the fallback; a null fallback makes the field required.
  std::string get(const char* key, const char* fallback) const;
  // An integer field in 1..max.
  long long ranged(const char* key, const char* fallback, long long max) const;
  // A 0/1 flag (also false/true), canonical "0" or "1".
  std::string flag(const char* key, const char* fallback) const;
  // A usage error "OP shape: MESSAGE".
  [[noreturn]] void fail(const std::string& message) const;
  // Whether the product of the factors (each >= 1) reaches `limit`, without overflow.
  static bool product_reaches(std::initializer_list<long long> factors, long long limit);

private:
  const Fields& m_shape;
  std::string m_op;
};

// Ordered name=value fields parsed once: each value's text as given, its type
// (an integer, a dtype, or another word: a layout, a parameter's string value) and
// the canonical text "name=value,..." computed when the fields are set, never again.
// Read-only but for assigning a whole new list, so the parsed values and the text
// cannot drift apart. Converts to `const Fields&` for code that reads the text.
class FieldList {
public:
  enum class Kind : unsigned char { integer, dtype, word };

  FieldList() = default;
  FieldList(Fields fields); // NOLINT(google-explicit-constructor): Problem{op, fields}
  FieldList& operator=(Fields fields);

  const Fields& text() const { return m_fields; }
  operator const Fields&() const { return m_fields; } // NOLINT(google-explicit-constructor)
  size_t size() const { return m_fields.size(); }
  bool empty() const { return m_fields.empty(); }
  Fields::const_iterator begin() const { return m_fields.begin(); }
  Fields::const_iterator end() const { return m_fields.end(); }
  const std::pair<std::string, std::string>& operator[](size_t i) const { return m_fields[i]; }
  // "name=value,..." (format_fields), computed once.
  const std::string& key() const { return m_key; }

  // Index of the field `name`, or -1.
  int index(std::string_view name) const;
  Kind kind(size_t i) const { return m_values[i].kind; }
  // The value of field i as an integer (kind integer) or a dtype (kind dtype).
  long long integer(size_t i) const { return m_values[i].number; }
  DType dtype(size_t i) const { return DType(m_values[i].number); }

  bool operator==(const FieldList& other) const { return m_key == other.m_key; }
  bool operator!=(const FieldList& other) const { return m_key != other.m_key; }

private:
  struct Value {
    Kind kind = Kind::word;
    long long number = 0; // the integer, or the DType's code
  };
  void parse();

  Fields m_fields;
  std::vector<Value> m_values; // one per field
  std::string m_key;
};

// A validated problem in canonical form: every field present, in the op's order,
// with canonical spellings. key() is the shape part of a tuning key. The fields are
// parsed when the op sets them (make_problem), so reading a size or dtype parses
// nothing.
struct Problem {
  std::string op;
  FieldList fields;
  const std::string& key() const { return fields.key(); }
  long long get_int(const std::string& name) const;
  // A 0/1 field that keys carry only when on (features added after keys existed): absent
  // is off.
  bool optional_flag(const std::string& name) const;
  DType get_dtype(const std::string& name) const;
  const std::string& get(const std::string& name) const;
};

// One point of a search space: parameter name -> value, in the space's order. The
// text form the Op interface takes (ops read and adjust it by name); the tuner
// holds a TypedConfig beside it.
using Config = Fields;

// A configuration parsed once (integers and words typed, its id computed once).
using TypedConfig = FieldList;

struct LaunchGeometry {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_smem = 0;
};

// Kernel arguments with stable addresses for cuLaunchKernel's void** array. Each
// argument lives in its own heap block (aligned for any fundamental type), so
// scalars and by-value structs (kernels taking `const Args args`) mix freely.
class ArgPack {
public:
  template <typename T> void add(const T& value) { add_bytes(&value, sizeof(T)); }
  void add_bytes(const void* data, size_t size);
  void** pointers();
  size_t size() const { return m_args.size(); }

private:
  std::vector<std::vector<unsigned char>> m_args;
  std::vector<void*> m_pointers;
};

struct TensorSpec {
  std::string name;
  DType dtype;
  size_t elements;
  bool output;
  float lo = -1.0f; // random inputs are drawn uniformly from [lo, hi]
  float hi = 1.0f;
  // Inputs with fixed contents instead of random ones: index tensors (attention's
  // cu_seqlens), int32 values in a buffer of `elements` 4-byte elements (dtype f32 for
  // its size: DType names only the types kernels compute in), uploaded as they are.
  std::vector<int> values = {};
  size_t bytes() const { return elements * dtype_size(dtype); }
};

} // namespace autotune
