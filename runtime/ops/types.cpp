#include "types.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"

namespace autotune {

const char* to_string(DType t) {
  switch (t) {
  case DType::f32:
    return "fp32";
  case DType::f16:
    return "fp16";
  case DType::bf16:
    return "bf16";
  }
  return "?";
}

DType parse_dtype(const std::string& text, const std::string& what) {
  if (text == "fp32" || text == "f32" || text == "float32" || text == "float") {
    return DType::f32;
  }
  if (text == "fp16" || text == "f16" || text == "float16" || text == "half") {
    return DType::f16;
  }
  if (text == "bf16" || text == "bfloat16") {
    return DType::bf16;
  }
  throw Error(ErrorKind::usage,
              what + ": unknown dtype '" + text + "' (expected fp32, fp16 or bf16)");
}

size_t dtype_size(DType t) {
  return t == DType::f32 ? 4 : 2;
}

const char* template_type(DType t) {
  switch (t) {
  case DType::f32:
    return "float";
  case DType::f16:
    return "at_f16";
  case DType::bf16:
    return "at_bf16";
  }
  return "?";
}

Fields parse_fields(const std::string& text, const std::string& what) {
  Fields out;
  if (trim(text).empty()) {
    throw Error(ErrorKind::usage, what + ": empty");
  }
  for (const auto& part : split(text, ',')) {
    std::string item = trim(part);
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      throw Error(ErrorKind::usage,
                  what + ": '" + item + "' is not of the form key=value (in \"" + text + "\")");
    }
    std::string key = trim(item.substr(0, eq));
    std::string value = trim(item.substr(eq + 1));
    if (find_field(out, key)) {
      throw Error(ErrorKind::usage, what + ": '" + key + "' given twice (in \"" + text + "\")");
    }
    out.emplace_back(key, value);
  }
  return out;
}

std::string format_fields(const Fields& fields) {
  std::string out;
  for (const auto& [k, v] : fields) {
    if (!out.empty()) {
      out += ',';
    }
    out += k + "=" + v;
  }
  return out;
}

const std::string* find_field(const Fields& fields, const std::string& key) {
  for (const auto& [k, v] : fields) {
    if (k == key) {
      return &v;
    }
  }
  return nullptr;
}

ShapeReader::ShapeReader(const Fields& shape, std::string op, const std::vector<std::string>& known,
                         const std::vector<std::string>& shown)
    : m_shape(shape), m_op(std::move(op)) {
  for (const auto& [k, v] : shape) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      fail("unknown field '" + k + "' (known: " + join(shown.empty() ? known : shown, ", ") + ")");
    }
  }
}

std::string ShapeReader::get(const char* key, const char* fallback) const {
  if (const std::string* v = find_field(m_shape, key)) {
    return *v;
  }
  if (!fallback) {
    fail(std::string("missing field '") + key + "' (in \"" + format_fields(m_shape) + "\")");
  }
  return fallback;
}

long long ShapeReader::ranged(const char* key, const char* fallback, long long max) const {
  long long v = parse_int(get(key, fallback), m_op + " shape field " + key);
  if (v < 1 || v > max) {
    fail(std::string(key) + "=" + std::to_string(v) + " is out of range 1.." + std::to_string(max));
  }
  return v;
}

std::string ShapeReader::flag(const char* key, const char* fallback) const {
  std::string v = get(key, fallback);
  if (v == "1" || v == "true") {
    return "1";
  }
  if (v == "0" || v == "false") {
    return "0";
  }
  fail(std::string(key) + "=" + v + " must be 0 or 1");
}

void ShapeReader::fail(const std::string& message) const {
  throw Error(ErrorKind::usage, m_op + " shape: " + message);
}

namespace {

// parse_int's reading (leading and trailing blanks ignored, base 10, the whole text),
// without its error: a field that is not an integer is a word.
bool integer_text(const std::string& text, long long& out) {
  std::string s = trim(text);
  if (s.empty()) {
    return false;
  }
  errno = 0;
  char* end = nullptr;
  out = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && *end == '\0';
}

} // namespace

FieldList::FieldList(Fields fields) : m_fields(std::move(fields)) {
  parse();
}

FieldList& FieldList::operator=(Fields fields) {
  m_fields = std::move(fields);
  parse();
  return *this;
}

void FieldList::parse() {
  m_values.assign(m_fields.size(), Value{});
  for (size_t i = 0; i < m_fields.size(); ++i) {
    const std::string& text = m_fields[i].second;
    Value& v = m_values[i];
    if (integer_text(text, v.number)) {
      v.kind = Kind::integer;
    } else {
      for (DType t : {DType::f32, DType::f16, DType::bf16}) {
        if (text == to_string(t)) {
          v.kind = Kind::dtype;
          v.number = int(t);
        }
      }
    }
  }
  m_key = format_fields(m_fields);
}

int FieldList::index(std::string_view name) const {
  for (size_t i = 0; i < m_fields.size(); ++i) {
    if (m_fields[i].first == name) {
      return int(i);
    }
  }
  return -1;
}

const std::string& Problem::get(const std::string& name) const {
  int i = fields.index(name);
  if (i < 0) {
    throw Error(ErrorKind::internal, op + " problem has no field '" + name + "'");
  }
  return fields[size_t(i)].second;
}

long long Problem::get_int(const std::string& name) const {
  int i = fields.index(name);
  if (i >= 0 && fields.kind(size_t(i)) == FieldList::Kind::integer) {
    return fields.integer(size_t(i));
  }
  return parse_int(get(name), op + " field " + name); // throws the error it always did
}

bool Problem::optional_flag(const std::string& name) const {
  const int i = fields.index(name);
  return i >= 0 && fields.integer(size_t(i)) != 0;
}

DType Problem::get_dtype(const std::string& name) const {
  int i = fields.index(name);
  if (i >= 0 && fields.kind(size_t(i)) == FieldList::Kind::dtype) {
    return fields.dtype(size_t(i));
  }
  return parse_dtype(get(name), op + " field " + name);
}

void ArgPack::add_bytes(const void* data, size_t size) {
  std::vector<unsigned char> blob(size);
  std::memcpy(blob.data(), data, size);
  m_args.push_back(std::move(blob));
}

void** ArgPack::pointers() {
  m_pointers.clear();
  for (auto& arg : m_args) {
    m_pointers.push_back(arg.data());
  }
  return m_pointers.data();
}

bool ShapeReader::product_reaches(std::initializer_list<long long> factors, long long limit) {
  long long product = 1;
  for (long long f : factors) {
    if (__builtin_mul_overflow(product, f, &product) || product >= limit) {
      return true;
    }
  }
  return false;
}

} // namespace autotune
