#include "distance.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace autotune {
namespace {

// The weight of a size field, or nullopt for a field that is not a size.
std::optional<double> size_weight(const ArgsDesc& desc, const std::string& name) {
  for (const FieldDesc& f : desc.fields) {
    if (f.kind == FieldKind::size && name == f.name) {
      return f.distance;
    }
  }
  return std::nullopt;
}

// A size field's value as a positive number; nullopt for anything else (a stored
// problem of an older schema, a damaged key).
std::optional<double> positive(const std::string& text) {
  if (text.empty()) {
    return std::nullopt;
  }
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

} // namespace

ProblemDistance compare_problems(const ArgsDesc& desc, const Problem& a, const Problem& b) {
  ProblemDistance d;
  if (a.fields.size() != b.fields.size()) {
    return d;
  }
  for (size_t i = 0; i < a.fields.size(); ++i) {
    const auto& [name, value] = a.fields[i];
    if (b.fields[i].first != name) {
      return d;
    }
    const std::string& other = b.fields[i].second;
    if (auto weight = size_weight(desc, name)) {
      auto x = positive(value);
      auto y = positive(other);
      if (!x || !y) {
        return d;
      }
      d.size += *weight * std::abs(std::log2(*x) - std::log2(*y));
    } else if (value != other) {
      ++d.differing;
    }
  }
  d.comparable = true;
  return d;
}

std::optional<double> point_distance(const ArgsDesc& desc, const Fields& point,
                                     const Problem& problem) {
  double size = 0;
  for (const auto& [name, value] : point) {
    const std::string* theirs = find_field(problem.fields, name);
    if (!theirs) {
      continue;
    }
    if (auto weight = size_weight(desc, name)) {
      auto x = positive(value);
      auto y = positive(*theirs);
      if (!x || !y) {
        return std::nullopt;
      }
      size += *weight * std::abs(std::log2(*x) - std::log2(*y));
    } else if (value != *theirs) {
      return std::nullopt;
    }
  }
  return size;
}

bool is_size_field(const ArgsDesc& desc, const std::string& name) {
  return size_weight(desc, name).has_value();
}

std::optional<double> problem_distance(const ArgsDesc& desc, const Problem& a, const Problem& b) {
  ProblemDistance d = compare_problems(desc, a, b);
  if (!d.comparable || d.differing != 0) {
    return std::nullopt;
  }
  return d.size;
}

} // namespace autotune
