#include "types.hpp"

#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"

namespace autotune {

const char* to_string(DType t) {
  switch (t) {
  case DType::f32: return "fp32";
  case DType::f16: return "fp16";
  case DType::bf16: return "bf16";
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

size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

const char* template_type(DType t) {
  switch (t) {
  case DType::f32: return "float";
  case DType::f16: return "at_f16";
  case DType::bf16: return "at_bf16";
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

const std::string& Problem::get(const std::string& name) const {
  const std::string* v = find_field(fields, name);
  if (!v) {
    throw Error(ErrorKind::internal, op + " problem has no field '" + name + "'");
  }
  return *v;
}

long long Problem::get_int(const std::string& name) const {
  return parse_int(get(name), op + " field " + name);
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

} // namespace autotune
