// Prints the PTX of one variant: emit_ptx OP ARCH SHAPE CONFIG (sm_XY is turned
// into compute_XY so NVRTC emits PTX). Used by the FileCheck tests.
#include "runtime/base/error.hpp"
#include "runtime/dispatch/variant.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  using namespace autotune;
  if (argc != 5) {
    std::fprintf(stderr, "usage: emit_ptx OP ARCH SHAPE CONFIG\n");
    return 2;
  }
  try {
    const Op& op = find_op(argv[1]);
    std::string arch = argv[2];
    Problem problem = op.make_problem(parse_fields(argv[3], "shape"));
    Config config = parse_fields(argv[4], "config");
    auto ok = op.check(config, problem, arch);
    if (!ok) {
      std::fprintf(stderr, "invalid configuration: %s\n", ok.failure().message.c_str());
      return 2;
    }
    VariantSource v = describe_variant(op, config, problem, arch);
    v.request.arch = "compute_" + arch.substr(3);
    auto out = compile_variant(v);
    if (!out) {
      std::fprintf(stderr, "%s\n%s\n", out.failure().message.c_str(), out.failure().detail.c_str());
      return 1;
    }
    std::fwrite(out->binary.data(), 1, out->binary.size(), stdout);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "emit_ptx: %s\n", e.what());
    return exit_code_for(e.kind());
  }
}
