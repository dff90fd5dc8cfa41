// How far apart two problems of one op are: what a tuned problem's winner is worth
// to another problem. The runtime's `nearest` policy runs the winner of the nearest
// tuned problem; the tuner measures the winners of the nearest ones first (transfer).
//
// Size fields (FieldKind::size in the op's args_desc()) count by how many doublings
// they differ, weighted by FieldDesc::distance (fields a kernel is instantiated for,
// such as a head dim or a filter width, weigh more):
//
//   size distance = sum over size fields of weight * |log2(a) - log2(b)|
//
// Every other field (dtypes, flags, layout) is not a size: problems that differ in
// one are counted as differing, never as near.
#pragma once

#include "call.hpp"
#include "types.hpp"

#include <optional>

namespace autotune {

struct ProblemDistance {
  // The same fields in the same order (canonical problems of one op), every size a
  // positive number. Problems that are not comparable have no distance.
  bool comparable = false;
  int differing = 0; // fields that are not sizes and differ
  double size = 0;   // the weighted size distance above
};

ProblemDistance compare_problems(const ArgsDesc& desc, const Problem& a, const Problem& b);

// The runtime's distance (nearest policy): the size distance between problems whose
// other fields are all equal, else nullopt.
std::optional<double> problem_distance(const ArgsDesc& desc, const Problem& a, const Problem& b);

// The distance from a partial description `point` (a heuristic point: some fields of
// a problem) to `problem`: the size distance over the size fields `point` names,
// nullopt when a field it names that is not a size differs from the problem's, or a
// size is not a positive number. Fields the problem lacks are skipped.
std::optional<double> point_distance(const ArgsDesc& desc, const Fields& point,
                                     const Problem& problem);

// Whether `name` is a size field of the op (FieldKind::size).
bool is_size_field(const ArgsDesc& desc, const std::string& name);

} // namespace autotune
