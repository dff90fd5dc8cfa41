// The op descriptor: everything about one operation that both the dispatcher and
// the tuner need, and nothing about how it is searched or stored.
#pragma once

#include "call.hpp"
#include "runtime/base/error.hpp"
#include "space.hpp"
#include "types.hpp"

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace autotune {

// Room for a kernel's by-value argument struct (CallPlan::pack): the largest is the Hopper
// attention kernel's, three 128-byte tensor maps and the call's fields (about 530 bytes);
// the driver takes up to 4 KiB of parameters.
constexpr size_t k_kernel_args_capacity = 640;

// One variant's launch for one problem, built once per call signature by the
// runtime: everything a call needs besides its pointers and strides.
class CallPlan {
public:
  virtual ~CallPlan() = default;
  // Writes the kernel's by-value argument for a bound and checked call of the op's
  // C args struct into `out` (k_kernel_args_capacity bytes, 16-byte aligned) and
  // returns its size. Throws Error(usage) for what only the variant refuses.
  virtual size_t pack(const void* args, const BoundCall& call, void* out) const = 0;

  LaunchGeometry geometry;
  size_t workspace_bytes = 0; // caller-provided workspace the variant needs
};

class Op {
public:
  virtual ~Op() = default;

  virtual const char* name() const = 0;
  virtual const char* kernel_name() const = 0;
  virtual const char* template_path() const = 0;  // relative to templates/
  virtual const char* space_path() const = 0;     // the parameter space (TOML)
  virtual const char* reference_path() const = 0; // the reference kernels

  // Shapes tuned when the user names none (the benchmark's shapes).
  virtual std::vector<std::string> default_shapes() const = 0;
  // Validates a user's shape and fills defaults. Throws Error(usage) naming the field.
  virtual Problem make_problem(const Fields& shape) const = 0;

  // Whether a configuration can run the problem on `arch` ("sm_90a"). The failure
  // says why not (it is recorded for `autotune list`).
  virtual Result<bool> check(const Config& config, const Problem& problem,
                             const std::string& arch) const = 0;
  // Whether measuring the configuration on this problem is worth the time: a
  // heuristic for the tuner (e.g. most of every block idle). The runtime ignores it,
  // so a default variant runs every problem check() accepts.
  virtual Result<bool> worth_measuring(const Config& config, const Problem& problem) const {
    (void)config;
    (void)problem;
    return true;
  }
  // Parameters that cannot change the kernel built for this problem, each with the one
  // value the tuner measures: always (how ragged rows are loaded, for an aligned length)
  // or while another parameter holds some values (parameters only one kernel form
  // reads). check() must accept no other value where a rule applies; the tuner then
  // walks only that value (inert_parts) instead of judging every combination of the
  // others once per value.
  virtual std::vector<InertRule> inert_params(const Problem& problem) const {
    (void)problem;
    return {};
  }
  // A configuration chosen for another problem (the nearest tuned one, a heuristic
  // point), adjusted to this problem where the op's model says it would waste work
  // (e.g. a tile far longer than the sequence). The runtime checks the result.
  virtual Config adapt(const Config& config, const Problem& problem) const {
    (void)problem;
    return config;
  }
  // NVRTC options (-D...) that instantiate the template for config and problem.
  virtual std::vector<std::string> defines(const Config& config, const Problem& problem) const = 0;
  virtual LaunchGeometry geometry(const Config& config, const Problem& problem) const = 0;

  // The problem's tensors, inputs first; pack() and pack_reference() take device
  // pointers in this order (contiguous layout).
  virtual std::vector<TensorSpec> tensors(const Problem& problem) const = 0;
  virtual void pack(const Config& config, const Problem& problem,
                    const std::vector<CUdeviceptr>& tensors, ArgPack& args) const = 0;

  // The reference writes an fp32 copy of every output tensor, in tensors() order.
  virtual std::string reference_kernel(const Problem& problem) const = 0;
  virtual LaunchGeometry reference_geometry(const Problem& problem) const = 0;
  virtual void pack_reference(const Problem& problem, const std::vector<CUdeviceptr>& tensors,
                              const std::vector<CUdeviceptr>& reference_outputs,
                              ArgPack& args) const = 0;
  // Largest relative L2 error ||out - ref|| / ||ref|| a correct variant may show.
  virtual double tolerance(const Problem& problem) const = 0;

  // Effective bytes (each input read once, each output written once) and FLOPs.
  virtual double bytes(const Problem& problem) const = 0;

  // The op's call: its C args struct, tensor by tensor (runtime/ops/call.hpp). Ops
  // that only the tuner runs (tests, plugins) have none: the runtime refuses them.
  virtual const ArgsDesc& args_desc() const {
    throw Error(ErrorKind::usage, std::string("op ") + name() + " has no runtime entry point");
  }
  // The launch plan of a variant for a problem (the runtime's warm path).
  virtual std::unique_ptr<CallPlan> plan(const Config& config, const Problem& problem) const {
    (void)config;
    (void)problem;
    throw Error(ErrorKind::usage, std::string("op ") + name() + " has no runtime entry point");
  }
  virtual double flops(const Problem& problem) const { return 0.0 * problem.fields.size(); }
  virtual bool memory_bound() const { return true; }
};

const Op& find_op(const std::string& name); // throws Error(usage) listing the known ops
// Adds an op beside the built-in ones (tests, plugins); call before any tuning.
// The op must outlive every use.
void register_op(const Op* op);
std::vector<std::string> op_names();

// Options every template is compiled with, besides the op's defines.
std::vector<std::string> base_compile_options();

// The configuration with stable spelling, e.g. "threads=128,vec=8" (variant ids).
std::string config_id(const Config& config);

// Helpers the op descriptors share.

// A string parameter of an op's configuration with a fixed set of values: the index of
// `value` in `choices`. Throws Error(config) "OP: NAME must be 'A', 'B' or 'C', not
// 'VALUE'" for any other value.
size_t parse_one_of(const char* op, const std::string& name, const std::string& value,
                    std::initializer_list<const char*> choices);
// A two-valued one: whether `value` is `second` (parse_one_of of the two).
bool parse_choice(const char* op, const std::string& name, const std::string& value,
                  const char* first, const char* second);

// The block size every kernel takes: whole warps, 32..1024 threads.
Result<bool> check_block_threads(int threads);

// The configuration with the named integer parameters set to new values (a name the
// configuration lacks stays absent); the order of the parameters is kept.
Config with_values(const Config& config,
                   std::initializer_list<std::pair<const char*, long long>> values);

// Sets parameter `name` of the configuration to `value`, appending it where the
// configuration lacks it (an optional parameter).
void set_value(Config& config, const std::string& name, const std::string& value);

// Vector accesses of `vec` elements of `dtype`, at most 16 bytes each.
struct VectorAccess {
  VectorAccess(DType dtype, long long vec);
  // Whether a tensor's address and every stride (in elements) are multiples of one
  // access, so every row it starts starts aligned.
  bool aligned(CUdeviceptr base, std::initializer_list<long long> strides) const;

  long long esize; // bytes of one element
  long long bytes; // bytes of one access
};

// The name of a reference kernel instantiated per pair of element types, as the
// references' macros spell it: PREFIX_X_Y with f32, f16 or bf16 for X and Y.
std::string reference_kernel_name(const char* prefix, DType x, DType y);

// The tolerance of an op whose error is dominated by one rounding of its 16-bit
// output (bf16 keeps 8 significant bits, fp16 11); `f32` for fp32 outputs.
double output_rounding_tolerance(DType out, double f32);

} // namespace autotune
