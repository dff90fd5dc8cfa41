#include "runtime/base/error.hpp"
#include "runtime/cuda/nvrtc.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"

#include <doctest/doctest.h>

using namespace autotune;

TEST_CASE("NVRTC compiles the default causal_conv1d variant for sm_80 and sm_90a without a GPU") {
  const Op& op = find_op("causal_conv1d");
  Space space = parse_space(template_file(op.space_path()), op.space_path());
  for (const char* dtype : {"bf16", "fp16", "fp32"}) {
    Problem p =
        op.make_problem(parse_fields(std::string("B=2,C=64,L=1000,W=3,dtype=") + dtype, "t"));
    for (const char* arch : {"sm_80", "sm_90a"}) {
      CAPTURE(dtype);
      CAPTURE(arch);
      VariantSource v = describe_variant(op, space.default_config, p, arch);
      auto out = compile_variant(v);
      REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.failure().message + out.failure().detail));
      // An ELF image: cubins start with 0x7f 'E' 'L' 'F'.
      REQUIRE(out->binary.size() > 4);
      CHECK(out->binary.substr(1, 3) == "ELF");
    }
  }
}

TEST_CASE("variant keys change with everything that changes the binary") {
  const Op& op = find_op("causal_conv1d");
  Space space = parse_space(template_file(op.space_path()), op.space_path());
  Problem p = op.make_problem(parse_fields("B=2,C=64,L=1000", "t"));
  Problem p_f16 = op.make_problem(parse_fields("B=2,C=64,L=1000,dtype=fp16", "t"));
  Problem p_other_shape = op.make_problem(parse_fields("B=4,C=32,L=80", "t"));
  // A length that leaves a partial vector compiles the ragged-row kernel (AT_RAGGED).
  Problem p_ragged = op.make_problem(parse_fields("B=4,C=32,L=77", "t"));
  auto a = describe_variant(op, space.default_config, p, "sm_90a");
  CHECK(a.key == describe_variant(op, space.default_config, p, "sm_90a").key);
  CHECK(a.key != describe_variant(op, space.default_config, p, "sm_80").key);
  CHECK(a.key != describe_variant(op, space.default_config, p_f16, "sm_90a").key);
  Config other = space.at(1);
  CHECK(a.key != describe_variant(op, other, p, "sm_90a").key);
  // The shape is a launch argument, not a compile-time one: the same cubin serves it
  // (among lengths that are multiples of the vector).
  CHECK(a.key == describe_variant(op, space.default_config, p_other_shape, "sm_90a").key);
  CHECK(a.key != describe_variant(op, space.default_config, p_ragged, "sm_90a").key);
  CHECK(a.key_dump.find("nvrtc_version=") != std::string::npos);
}

TEST_CASE("compile errors carry the NVRTC log and the options") {
  cuda::CompileRequest r;
  r.source = "extern \"C\" __global__ void k() { undefined_thing(); }\n";
  r.name = "broken.cu";
  r.arch = "sm_90";
  r.options = {"-DFOO=1"};
  auto out = cuda::compile(r);
  REQUIRE_FALSE(out.ok());
  CHECK(out.failure().message.find("broken.cu") != std::string::npos);
  CHECK(out.failure().message.find("-DFOO=1") != std::string::npos);
  CHECK(out.failure().detail.find("undefined_thing") != std::string::npos);
}

TEST_CASE("templates need no toolkit headers") {
  // NVRTC has no include path here: if a template included <cuda_bf16.h> this would fail.
  cuda::CompileRequest r;
  r.source = template_source("common/testing.cuh");
  r.name = "testing.cuh";
  r.arch = "sm_80";
  r.options = base_compile_options();
  auto out = cuda::compile(r);
  CHECK_MESSAGE(out.ok(), (out.ok() ? "" : out.failure().detail));
}

TEST_CASE("every op's reference kernels compile with NVRTC for sm_80 and sm_90 without a GPU") {
  // The tuner's correctness gate launches these; a compile error would surface only on a
  // GPU machine, after every variant compiled.
  for (const char* name : {"causal_conv1d", "attention", "selective_scan"}) {
    const Op& op = find_op(name);
    for (const char* arch : {"sm_80", "sm_90"}) {
      CAPTURE(name);
      CAPTURE(arch);
      cuda::CompileRequest r;
      r.source = template_source(op.reference_path());
      r.name = op.reference_path();
      r.arch = arch;
      r.options = base_compile_options();
      auto out = cuda::compile(r);
      REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.failure().message + out.failure().detail));
      CHECK(out->binary.substr(1, 3) == "ELF");
    }
  }
}
