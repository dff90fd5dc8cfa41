#include "call.hpp"

#include "runtime/base/error.hpp"

#include <algorithm>
#include <cstring>

namespace autotune {
namespace {

constexpr int64_t k_unbound = INT64_MIN;

const TensorArg& tensor_at(const void* args, size_t offset) {
  return *reinterpret_cast<const TensorArg*>(static_cast<const char*>(args) + offset);
}

std::string shape_text(const TensorArg& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim && i < AUTOTUNE_MAX_DIMS; ++i) {
    if (i) {
      s += ", ";
    }
    s += std::to_string(t.shape[i]);
  }
  return s + "]";
}

std::string dim_text(const ArgsDesc& desc, const DimRule& d) {
  std::string s = desc.fields[size_t(d.field)].name;
  if (d.offset > 0) {
    s += '+';
  }
  if (d.offset != 0) {
    s += std::to_string(d.offset);
  }
  return s;
}

std::string rule_text(const ArgsDesc& desc, const TensorRule& r) {
  std::string s = "[";
  for (size_t i = 0; i < r.dims.size(); ++i) {
    if (i) {
      s += ", ";
    }
    s += dim_text(desc, r.dims[i]);
  }
  return s + "]";
}

const char* dtype_name(int64_t code) {
  if (code == AUTOTUNE_INT32) {
    return "int32";
  }
  return code >= 0 && code <= 2 ? to_string(DType(code)) : "an unknown dtype";
}

std::string allowed_text(uint8_t mask) {
  std::string s;
  for (int c = 0; c < 3; ++c) {
    if (mask & (1 << c)) {
      if (!s.empty()) {
        s += "/";
      }
      s += to_string(DType(c));
    }
  }
  return s;
}

class Binder {
public:
  Binder(const ArgsDesc& desc, BoundCall& out) : m_desc(desc), m_out(out) {
    m_out.values.fill(k_unbound);
    m_from.fill(nullptr);
  }

  [[noreturn]] void fail(const std::string& message) const {
    throw Error(ErrorKind::usage, std::string(m_desc.op) + ": " + message);
  }

  // Sets field f to v, or checks it equals what an earlier argument set.
  void set(int8_t f, int64_t v, const char* by) {
    int64_t& slot = m_out.values[size_t(f)];
    if (slot == k_unbound) {
      slot = v;
      m_from[size_t(f)] = by;
      return;
    }
    if (slot != v) {
      const FieldDesc& fd = m_desc.fields[size_t(f)];
      fail(std::string(by) + " implies " + fd.name + "=" + std::to_string(v) + ", but " +
           m_from[size_t(f)] + " gives " + fd.name + "=" + std::to_string(slot));
    }
  }

  void tensor(const TensorRule* const* forms, int count, int slot, const void* args) {
    const TensorRule& first = *forms[0];
    const TensorArg& t = tensor_at(args, first.offset);
    if (!t.data) {
      if (first.presence < 0) {
        fail(std::string(first.name) + " is required (its data pointer is NULL)");
      }
      set(first.presence, 0, first.name);
      return;
    }
    const TensorRule* rule = nullptr;
    for (int i = 0; i < count; ++i) {
      if (int(forms[i]->dims.size()) == t.ndim &&
          (forms[i]->when_given == SIZE_MAX || tensor_at(args, forms[i]->when_given).data)) {
        rule = forms[i];
      }
    }
    if (!rule) {
      std::string expected;
      for (int i = 0; i < count; ++i) {
        const TensorRule* f = forms[i];
        if (!expected.empty()) {
          expected += " or ";
        }
        expected += rule_text(m_desc, *f);
        if (f->form) {
          expected += std::string(" (") + f->form + ")";
        }
      }
      fail(std::string(first.name) + " has " + std::to_string(t.ndim) + " dimensions " +
           (t.ndim >= 1 && t.ndim <= AUTOTUNE_MAX_DIMS ? shape_text(t) : std::string()) +
           "; expected " + expected);
    }
    m_out.tensors[size_t(slot)] = &t;
    m_out.rules[size_t(slot)] = rule;
    if (rule->presence >= 0) {
      set(rule->presence, 1, rule->name);
    }
    for (const auto& [f, v] : rule->sets) {
      set(f, v, rule->name);
    }
    // dtype
    if (rule->dtype_field < 0) {
      if (t.dtype != rule->fixed_dtype) {
        fail(std::string(rule->name) + " is " + dtype_name(t.dtype) + "; it must be " +
             dtype_name(rule->fixed_dtype));
      }
    } else {
      int64_t& bound = m_out.values[size_t(rule->dtype_field)];
      if (bound == k_unbound) {
        if (t.dtype < 0 || t.dtype > 2 || !(rule->dtypes & (1 << t.dtype))) {
          fail(std::string(rule->name) + " is " + dtype_name(t.dtype) + "; expected " +
               allowed_text(rule->dtypes));
        }
        bound = t.dtype;
        m_from[size_t(rule->dtype_field)] = rule->name;
      } else if (bound != t.dtype) {
        fail(std::string(rule->name) + " is " + dtype_name(t.dtype) +
             " but must have the dtype of " + m_from[size_t(rule->dtype_field)] + " (" +
             dtype_name(bound) + ")");
      }
    }
    // sizes
    for (size_t i = 0; i < rule->dims.size(); ++i) {
      const DimRule& d = rule->dims[i];
      const int64_t v = t.shape[i];
      int64_t& bound = m_out.values[size_t(d.field)];
      if (v < 1) {
        fail(std::string(rule->name) + " has shape " + shape_text(t) +
             ": every dimension must be at least 1");
      }
      if (bound == k_unbound && v - d.offset >= 1) {
        // An unbound field binds here; through an offset (cu_seqlens [B+1] binds B) when
        // no dimension without one did.
        bound = v - d.offset;
        m_from[size_t(d.field)] = rule->name;
        continue;
      }
      if (bound == k_unbound || bound + d.offset != v) {
        std::string expected = "[";
        for (size_t j = 0; j < rule->dims.size(); ++j) {
          const DimRule& e = rule->dims[j];
          const int64_t ev = m_out.values[size_t(e.field)];
          if (j) {
            expected += ", ";
          }
          expected += dim_text(m_desc, e);
          if (ev != k_unbound) {
            expected += '=';
            expected += std::to_string(ev + e.offset);
          }
        }
        fail(std::string(rule->name) + " has shape " + shape_text(t) + "; expected " + expected +
             "]" +
             (bound == k_unbound ? std::string()
                                 : std::string(" (") + m_desc.fields[size_t(d.field)].name +
                                       " from " + m_from[size_t(d.field)] + ")"));
      }
    }
  }

  void scalar(const ScalarRule& s, const void* args) {
    if (s.field < 0) {
      return;
    }
    int32_t v;
    std::memcpy(&v, static_cast<const char*>(args) + s.offset, sizeof v);
    if (m_desc.fields[size_t(s.field)].kind == FieldKind::size) {
      if (v < 0) {
        fail(std::string(s.name) + " must be >= 0 (0: not given), not " + std::to_string(v));
      }
      if (v > 0) {
        set(s.field, v, s.name);
      }
      return;
    }
    if (v != 0 && v != 1) {
      fail(std::string(s.name) + " must be 0 or 1, not " + std::to_string(v));
    }
    set(s.field, v, s.name);
  }

  void finish() {
    for (size_t f = 0; f < m_desc.fields.size(); ++f) {
      if (m_out.values[f] == k_unbound) {
        if (m_desc.fields[f].fallback < 0) {
          fail(std::string("no argument gives field ") + m_desc.fields[f].name);
        }
        m_out.values[f] = m_desc.fields[f].fallback;
      }
    }
  }

private:
  const ArgsDesc& m_desc;
  BoundCall& m_out;
  std::array<const char*, k_max_call_fields> m_from;
};

} // namespace

int ArgsDesc::field(const char* name) const {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (std::strcmp(fields[i].name, name) == 0) {
      return int(i);
    }
  }
  throw Error(ErrorKind::internal, std::string(op) + ": no call field '" + name + "'");
}

void bind_call(const ArgsDesc& desc, const void* args, BoundCall& out) {
  if (!args) {
    throw Error(ErrorKind::usage, std::string(desc.op) + ": args is NULL");
  }
  Binder b(desc, out);
  out.tensors.fill(nullptr);
  out.rules.fill(nullptr);
  std::array<const TensorRule*, 4> forms{};
  int count = 0;
  int slot = 0;
  for (size_t i = 0; i < desc.tensors.size(); ++i) {
    forms[size_t(count++)] = &desc.tensors[i];
    if (i + 1 == desc.tensors.size() || desc.tensors[i + 1].offset != desc.tensors[i].offset) {
      b.tensor(forms.data(), count, slot++, args);
      count = 0;
    }
  }
  out.slots = slot;
  for (const ScalarRule& s : desc.scalars) {
    b.scalar(s, args);
  }
  if (desc.derive) {
    desc.derive(args, out.values);
  }
  b.finish();
}

size_t element_bytes(int32_t code) {
  return code == AUTOTUNE_INT32 ? 4 : dtype_size(DType(code));
}

size_t tensor_extent_bytes(const TensorArg& t) {
  int64_t last = 0;
  for (int i = 0; i < t.ndim; ++i) {
    last += (t.shape[i] - 1) * t.strides[i];
  }
  return size_t(last + 1) * element_bytes(t.dtype);
}

void check_layout(const ArgsDesc& desc, const BoundCall& call) {
  auto fail = [&](const TensorRule& r, const TensorArg& t, const std::string& message) {
    std::string strides = "(";
    for (int i = 0; i < t.ndim; ++i) {
      if (i) {
        strides += ", ";
      }
      strides += std::to_string(t.strides[i]);
    }
    throw Error(ErrorKind::usage, std::string(desc.op) + ": " + r.name + " (shape " +
                                      shape_text(t) + ", strides " + strides + ")) " + message);
  };
  for (int s = 0; s < call.slots; ++s) {
    const TensorArg* tp = call.tensors[size_t(s)];
    if (!tp) {
      continue;
    }
    const TensorArg& t = *tp;
    const TensorRule& r = *call.rules[size_t(s)];
    const int n = t.ndim;
    const int64_t esize = int64_t(element_bytes(t.dtype));
    const auto address = reinterpret_cast<uintptr_t>(t.data);
    if (address % uintptr_t(esize * r.stride_multiple) != 0) {
      fail(r, t, "is not aligned to " + std::to_string(esize * r.stride_multiple) + " bytes");
    }
    int64_t expected = 1; // the contiguous stride of dimension i
    for (int i = n - 1; i >= 0; --i) {
      const int64_t st = t.strides[i];
      if (t.shape[i] > 1) {
        if (st < 0) {
          fail(r, t, "has a negative stride");
        }
        const bool channel_last = r.strides == StrideRule::rows_or_channels && n == 3 &&
                                  t.shape[1] > 1 && t.strides[1] == 1;
        if (i == n - 1 && st != 1 && !channel_last && r.strides != StrideRule::any) {
          fail(r, t,
               r.strides == StrideRule::rows_or_channels
                   ? "must have a contiguous last dimension (stride 1) or, channel-last, a "
                     "contiguous channel dimension (stride(1) == 1)"
                   : "must have a contiguous last dimension (stride 1)");
        }
        if (r.strides == StrideRule::contiguous && st != expected) {
          fail(r, t, "must be contiguous (row-major)");
        }
        if (st % r.stride_multiple != 0 && i != n - 1) {
          fail(r, t,
               "needs strides that are multiples of " + std::to_string(r.stride_multiple) +
                   " elements");
        }
      }
      expected *= t.shape[i];
    }
    if (r.output && r.strides != StrideRule::contiguous) {
      // Ordered by stride, every dimension must step over the span of the smaller
      // ones, or two elements share an address and blocks would race on it.
      std::array<std::pair<int64_t, int64_t>, AUTOTUNE_MAX_DIMS> dims{};
      for (int i = 0; i < n && i < AUTOTUNE_MAX_DIMS; ++i) {
        // size-1 dimensions sort last with an unreachable stride
        dims[size_t(i)] = {t.shape[i] > 1 ? t.strides[i] : INT64_MAX, t.shape[i]};
      }
      std::sort(dims.begin(), dims.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      int64_t span = 1;
      for (const auto& [stride, extent] : dims) {
        if (extent <= 1) {
          continue;
        }
        if (stride < span) {
          fail(r, t,
               "is an output whose elements overlap (a stride smaller than the span of "
               "the dimensions inside it)");
        }
        span = stride * (extent - 1) + span;
      }
    }
  }
}

Fields call_fields(const ArgsDesc& desc, const BoundCall& call) {
  Fields f;
  for (size_t i = 0; i < desc.fields.size(); ++i) {
    const FieldDesc& d = desc.fields[i];
    const int64_t v = call.values[i];
    switch (d.kind) {
    case FieldKind::dtype:
      f.emplace_back(d.name, to_string(DType(v)));
      break;
    case FieldKind::choice:
      f.emplace_back(d.name, d.choices.at(size_t(v)));
      break;
    default:
      f.emplace_back(d.name, std::to_string(v));
      break;
    }
  }
  return f;
}

std::string describe_args(const ArgsDesc& desc) {
  // In struct order: a tensor appended to a struct later follows its scalars.
  std::vector<std::pair<size_t, std::string>> lines;
  size_t last_offset = SIZE_MAX;
  for (const TensorRule& r : desc.tensors) {
    if (r.offset != last_offset) {
      lines.emplace_back(r.offset, std::string(r.name) + " tensor " + std::to_string(r.offset));
      last_offset = r.offset;
    }
  }
  for (const ScalarRule& sc : desc.scalars) {
    static const char* const kinds[] = {"i32", "f64", "ptr", "u64"};
    lines.emplace_back(sc.offset, std::string(sc.name) + " " + kinds[int(sc.kind)] + " " +
                                      std::to_string(sc.offset));
  }
  std::stable_sort(lines.begin(), lines.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string s;
  for (const auto& line : lines) {
    s += line.second + "\n";
  }
  s += "size " + std::to_string(desc.size) + "\nrules\n";
  for (const TensorRule& r : desc.tensors) {
    s += std::string(r.name) + " " + rule_text(desc, r) + " " +
         (r.dtype_field < 0
              ? std::string(dtype_name(r.fixed_dtype))
              : allowed_text(r.dtypes) + " as " + desc.fields[size_t(r.dtype_field)].name) +
         (r.presence >= 0 ? " optional" : "") + (r.output ? " output" : "") +
         (r.strides == StrideRule::contiguous ? " contiguous"
          : r.strides == StrideRule::rows     ? " rows"
          : r.strides == StrideRule::any      ? " any"
                                              : " rows_or_channels") +
         (r.form ? std::string(" form=") + r.form : std::string()) + "\n";
  }
  return s;
}

int tensor_slot(const ArgsDesc& desc, const char* name) {
  int slot = -1;
  size_t last_offset = SIZE_MAX;
  for (const TensorRule& r : desc.tensors) {
    if (r.offset != last_offset) {
      ++slot;
      last_offset = r.offset;
    }
    if (std::strcmp(r.name, name) == 0) {
      return slot;
    }
  }
  throw Error(ErrorKind::internal, std::string(desc.op) + ": no tensor '" + name + "'");
}

} // namespace autotune
