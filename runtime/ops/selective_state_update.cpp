#include "selective_state_update.hpp"

#include "runtime/base/strings.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace autotune {
namespace {

using Dims = SelectiveStateUpdateShape;

Dims dims(const Problem& p) {
  return SelectiveStateUpdateShape::of(p);
}

struct Params {
  int threads = 0, lanes = 0;
  bool words = false; // loads=words: A, B, C in their own types, read as words (kernel.cuh)
};

Params params(const Config& c) {
  Params p;
  for (const auto& [k, v] : c) {
    if (k == "threads") {
      p.threads = int(parse_int(v, "threads"));
    } else if (k == "lanes") {
      p.lanes = int(parse_int(v, "lanes"));
    } else if (k == "loads") {
      p.words = parse_choice("selective_state_update", k, v, "elements", "words");
    } else {
      throw Error(ErrorKind::config, "selective_state_update: unknown parameter '" + k + "'");
    }
  }
  if (p.threads == 0 || p.lanes == 0) {
    throw Error(ErrorKind::config, "selective_state_update: configuration '" + format_fields(c) +
                                       "' lacks threads or lanes");
  }
  return p;
}

// A lane keeps its share of a row's states (and their A, B and C) in registers: at most
// this many (kernel.cuh's static assertion; 64 spilled, ptxas sm_90), and N at most this.
constexpr long long k_max_per_lane = 32;
constexpr long long k_max_dstate = 256;
// A wave of 128-thread blocks, one on each of the H100's 132 SMs: fewer threads than this
// leave SMs idle.
constexpr long long k_wave_threads = 132 * 128;

// The tuner's inputs drawn as mamba-ssm's tests draw them: dt_bias in [-4, -3] (softplus
// of dt + dt_bias small and positive), A in [-2, -1].
constexpr float k_dt_bias_lo = -4.0f, k_dt_bias_hi = -3.0f;
constexpr float k_a_lo = -2.0f, k_a_hi = -1.0f;

long long rows_of(const Dims& d) {
  return d.B * d.H * d.P;
}

} // namespace

SelectiveStateUpdateShape SelectiveStateUpdateShape::of(const Problem& p) {
  Dims d;
  d.B = p.get_int("B");
  d.H = p.get_int("H");
  d.P = p.get_int("P");
  d.N = p.get_int("N");
  d.G = p.get_int("G");
  d.x = parse_dtype(p.get("dtype"), "dtype");
  d.state = parse_dtype(p.get("sdtype"), "sdtype");
  d.bc = parse_dtype(p.get("bcdtype"), "bcdtype");
  d.a = parse_dtype(p.get("adtype"), "adtype");
  d.p = parse_dtype(p.get("pdtype"), "pdtype");
  d.heads = p.get_int("heads") != 0;
  d.has_D = p.get_int("has_D") != 0;
  d.has_z = p.get_int("has_z") != 0;
  d.dt_bias = p.get_int("dt_bias") != 0;
  d.softplus = p.get_int("softplus") != 0;
  d.gather = p.get_int("gather") != 0;
  d.a_bcast = p.optional_flag("a_bcast");
  return d;
}

std::vector<std::string> SelectiveStateUpdateOp::default_shapes() const {
  // One decoding token: Mamba-1 2.8B (d_inner 5120, d_state 16, no heads) at batch 1 and
  // 64, and Mamba-2 2.7B (80 heads of 64 channels, d_state 128, one group) at batch 64.
  // Mamba-2's A is its per-head vector viewed over (P, N) with strides (1, 0, 0): a_bcast.
  return {"B=1,P=5120,N=16", "B=64,P=5120,N=16", "B=64,H=80,P=64,N=128,heads=1,has_z=0,a_bcast=1"};
}

Problem SelectiveStateUpdateOp::make_problem(const Fields& shape) const {
  // E (the state's rows with state_batch_indices) comes with a call; it changes no kernel.
  const std::vector<std::string> listed = {
      "B",      "H",     "P",     "N",     "G",       "dtype",    "sdtype", "bcdtype", "adtype",
      "pdtype", "heads", "has_D", "has_z", "dt_bias", "softplus", "gather", "a_bcast"};
  std::vector<std::string> known = listed;
  known.push_back("E");
  const ShapeReader r(shape, "selective_state_update", known, listed);
  const long long B = r.ranged("B", nullptr, 1 << 20);
  const long long H = r.ranged("H", "1", 1 << 16);
  const long long P = r.ranged("P", nullptr, 1 << 24);
  const long long N = r.ranged("N", nullptr, k_max_dstate);
  const long long G = r.ranged("G", "1", 1 << 16);
  const std::string heads = r.flag("heads", H > 1 ? "1" : "0");
  if (heads == "0" && (H != 1 || G != 1)) {
    r.fail("without a head dimension (heads=0) H and G are 1, not H=" + std::to_string(H) +
           ", G=" + std::to_string(G));
  }
  if (H % G != 0) {
    r.fail("G=" + std::to_string(G) + " groups must divide the H=" + std::to_string(H) + " heads");
  }
  if (ShapeReader::product_reaches({B, H, P}, 1ll << 31)) {
    r.fail("B*H*P must stay below 2^31 rows");
  }
  const DType x = parse_dtype(r.get("dtype", "bf16"), "selective_state_update shape field dtype");
  const auto dtype_field = [&](const char* key, const std::string& fallback) {
    return to_string(parse_dtype(r.get(key, fallback.c_str()),
                                 std::string("selective_state_update shape field ") + key));
  };
  Problem p;
  p.op = name();
  p.fields = {{"B", std::to_string(B)},
              {"H", std::to_string(H)},
              {"P", std::to_string(P)},
              {"N", std::to_string(N)},
              {"G", std::to_string(G)},
              {"dtype", to_string(x)},
              {"sdtype", dtype_field("sdtype", to_string(x))},
              {"bcdtype", dtype_field("bcdtype", to_string(x))},
              {"adtype", dtype_field("adtype", "fp32")},
              {"pdtype", dtype_field("pdtype", "fp32")},
              {"heads", heads},
              {"has_D", r.flag("has_D", "1")},
              {"has_z", r.flag("has_z", "1")},
              {"dt_bias", r.flag("dt_bias", "1")},
              {"softplus", r.flag("softplus", "1")},
              {"gather", r.flag("gather", "0")}};
  if (r.flag("a_bcast", "0") == "1") { // only when on: keys without it are as they were
    Fields f = p.fields.text();
    f.emplace_back("a_bcast", "1");
    p.fields = std::move(f);
  }
  return p;
}

Result<bool> SelectiveStateUpdateOp::check(const Config& config, const Problem& problem,
                                           const std::string& arch) const {
  (void)arch; // plain loads, stores and shuffles: every GPU the runtime supports
  const Params p = params(config);
  if (auto ok = check_block_threads(p.threads); !ok) {
    return ok;
  }
  if (p.lanes < 1 || p.lanes > 32 || (p.lanes & (p.lanes - 1)) != 0) {
    return fail("lanes must be 1, 2, 4, 8, 16 or 32 (a power-of-two group of a warp)");
  }
  const Dims d = dims(problem);
  if (p.lanes > d.N) {
    return fail("more lanes than states in a row");
  }
  if ((d.N + p.lanes - 1) / p.lanes > k_max_per_lane) {
    return fail("more than " + std::to_string(k_max_per_lane) + " states a lane");
  }
  const long long rows_per_block = p.threads / p.lanes;
  if ((rows_of(d) + rows_per_block - 1) / rows_per_block > 0x7fffffffll) {
    return fail("grid too large");
  }
  return true;
}

Config SelectiveStateUpdateOp::adapt(const Config& config, const Problem& problem) const {
  // The H100's winners hold about 8 states a lane with A, B and C as fp32 registers and 16
  // with loads=words (the exhaustive runs in bench/notes/selective_state_update.md: N=16
  // 2 and 1 lanes, N=128 16 and 8), and at least a wave of threads: a row a lane is not
  // enough for one sequence (B=1, 5120 rows: 2-16 lanes tie, launch-bound).
  const Dims d = dims(problem);
  const long long N = d.N;
  const long long per_lane = params(config).words ? 16 : 8;
  long long lanes = 1;
  while (lanes < 32 && lanes * 2 <= N / per_lane) {
    lanes *= 2;
  }
  while (lanes < 32 && (N + lanes - 1) / lanes > k_max_per_lane) {
    lanes *= 2;
  }
  while (lanes < 32 && lanes * 2 <= N && rows_of(d) * lanes < k_wave_threads) {
    lanes *= 2;
  }
  return with_values(config, {{"lanes", std::min(lanes, N)}});
}

std::vector<std::string> SelectiveStateUpdateOp::defines(const Config& config,
                                                         const Problem& problem) const {
  const Params p = params(config);
  const Dims d = dims(problem);
  const auto flag = [](const char* name, bool on) {
    return std::string("-D") + name + (on ? "=1" : "=0");
  };
  return {"-DAT_THREADS=" + std::to_string(p.threads),
          "-DAT_LANES=" + std::to_string(p.lanes),
          "-DAT_NSTATE=" + std::to_string(d.N),
          flag("AT_WORDS", p.words),
          flag("AT_HAS_D", d.has_D),
          flag("AT_HAS_Z", d.has_z),
          flag("AT_HAS_DT_BIAS", d.dt_bias),
          flag("AT_SOFTPLUS", d.softplus),
          flag("AT_GATHER", d.gather),
          flag("AT_A_BCAST", d.a_bcast),
          std::string("-DAT_X_T=") + template_type(d.x),
          std::string("-DAT_S_T=") + template_type(d.state),
          std::string("-DAT_BC_T=") + template_type(d.bc),
          std::string("-DAT_A_T=") + template_type(d.a),
          std::string("-DAT_P_T=") + template_type(d.p)};
}

LaunchGeometry SelectiveStateUpdateOp::geometry(const Config& config,
                                                const Problem& problem) const {
  const Params p = params(config);
  const long long rows_per_block = p.threads / p.lanes;
  LaunchGeometry g;
  g.block[0] = unsigned(p.threads);
  g.grid[0] = unsigned((rows_of(dims(problem)) + rows_per_block - 1) / rows_per_block);
  return g;
}

std::vector<TensorSpec> SelectiveStateUpdateOp::tensors(const Problem& problem) const {
  const Dims d = dims(problem);
  const size_t rows = size_t(rows_of(d));
  const size_t params_n = size_t(d.H * d.P);
  const size_t bc = size_t(d.B * d.G * d.N);
  const size_t states = rows * size_t(d.N); // the tuner's state has E = B rows
  std::vector<TensorSpec> t;
  t.push_back({"x", d.x, rows, false, -1.0f, 1.0f});
  t.push_back({"dt", d.x, rows, false, -1.0f, 1.0f});
  if (d.dt_bias) {
    t.push_back({"dt_bias", d.p, params_n, false, k_dt_bias_lo, k_dt_bias_hi});
  }
  t.push_back({"A", d.a, params_n * size_t(d.a_bcast ? 1 : d.N), false, k_a_lo, k_a_hi});
  t.push_back({"B", d.bc, bc, false, -1.0f, 1.0f});
  t.push_back({"C", d.bc, bc, false, -1.0f, 1.0f});
  if (d.has_D) {
    t.push_back({"D", d.p, params_n, false, -1.0f, 1.0f});
  }
  if (d.has_z) {
    t.push_back({"z", d.x, rows, false, -1.0f, 1.0f});
  }
  t.push_back({"state", d.state, states, false, -1.0f, 1.0f});
  if (d.gather) {
    // Every row selected once (the reference then defines the whole new state).
    TensorSpec sel{"state_batch_indices", DType::f32, size_t(d.B), false};
    for (long long b = 0; b < d.B; ++b) {
      sel.values.push_back(int(d.B - 1 - b));
    }
    t.push_back(std::move(sel));
  }
  t.push_back({"out", d.x, rows, true});
  t.push_back({"new_state", d.state, states, true});
  return t;
}

namespace {

// The tuner's tensors (tensors() order) as the kernel's argument: every tensor contiguous
// in its head form, the new state into its own buffer.
SelectiveStateUpdateKernelArgs tuner_args(const Dims& d, const std::vector<CUdeviceptr>& t) {
  SelectiveStateUpdateKernelArgs k{};
  size_t i = 0;
  k.x = t.at(i++);
  k.dt = t.at(i++);
  k.dt_bias = d.dt_bias ? t.at(i++) : 0;
  k.A = t.at(i++);
  k.B = t.at(i++);
  k.C = t.at(i++);
  k.D = d.has_D ? t.at(i++) : 0;
  k.z = d.has_z ? t.at(i++) : 0;
  k.state_in = t.at(i++);
  k.state_indices = d.gather ? t.at(i++) : 0;
  k.out = t.at(i++);
  k.state_out = t.at(i++);
  k.batch = int(d.B);
  k.heads = int(d.H);
  k.dim = int(d.P);
  k.groups = int(d.G);
  k.entries = int(d.B);
  for (long long* s : {k.x_stride, k.dt_stride, k.z_stride, k.out_stride}) {
    s[0] = d.H * d.P, s[1] = d.P, s[2] = 1;
  }
  for (long long* s : {k.dt_bias_stride, k.D_stride}) {
    s[0] = d.P, s[1] = 1;
  }
  if (d.a_bcast) { // [H, P] viewed over N
    k.A_stride[0] = d.P, k.A_stride[1] = 1, k.A_stride[2] = 0;
  } else {
    k.A_stride[0] = d.P * d.N, k.A_stride[1] = d.N, k.A_stride[2] = 1;
  }
  for (long long* s : {k.B_stride, k.C_stride}) {
    s[0] = d.G * d.N, s[1] = d.N, s[2] = 1;
  }
  k.state_stride[0] = d.H * d.P * d.N, k.state_stride[1] = d.P * d.N;
  k.state_stride[2] = d.N, k.state_stride[3] = 1;
  return k;
}

} // namespace

void SelectiveStateUpdateOp::pack(const Config& config, const Problem& problem,
                                  const std::vector<CUdeviceptr>& tensors, ArgPack& args) const {
  (void)config;
  args.add(tuner_args(dims(problem), tensors));
}

std::string SelectiveStateUpdateOp::reference_kernel(const Problem& problem) const {
  const Dims d = dims(problem);
  return reference_kernel_name("selective_state_update_ref", d.x, d.state);
}

LaunchGeometry SelectiveStateUpdateOp::reference_geometry(const Problem& problem) const {
  LaunchGeometry g;
  g.block[0] = 256;
  g.grid[0] = unsigned(std::min<long long>((rows_of(dims(problem)) + 255) / 256, 65536));
  return g;
}

void SelectiveStateUpdateOp::pack_reference(const Problem& problem,
                                            const std::vector<CUdeviceptr>& t,
                                            const std::vector<CUdeviceptr>& ref,
                                            ArgPack& args) const {
  const Dims d = dims(problem);
  const SelectiveStateUpdateKernelArgs k = tuner_args(d, t);
  for (CUdeviceptr p : {k.x, k.dt, k.dt_bias, k.A, k.B, k.C, k.D, k.z, k.state_in, k.state_indices,
                        ref.at(0), ref.at(1)}) {
    args.add(p);
  }
  for (long long v : {d.B, d.H, d.P, d.N, d.G, d.B, (long long)d.softplus, (long long)d.bc,
                      (long long)d.a, (long long)d.p, (long long)d.a_bcast}) {
    args.add(int(v));
  }
  for (long long s : {k.x_stride[0], k.x_stride[1], k.x_stride[2], k.state_stride[0],
                      k.state_stride[1], k.state_stride[2], k.state_stride[3]}) {
    args.add(s);
  }
}

double SelectiveStateUpdateOp::tolerance(const Problem& problem) const {
  // One rounding of out and of the new state dominates: the coarser of the two dtypes.
  const Dims d = dims(problem);
  const DType coarser = (d.x == DType::bf16 || d.state == DType::bf16) ? DType::bf16
                        : (d.x == DType::f16 || d.state == DType::f16) ? DType::f16
                                                                       : DType::f32;
  return output_rounding_tolerance(coarser, 1e-5);
}

double SelectiveStateUpdateOp::bytes(const Problem& problem) const {
  const Dims d = dims(problem);
  // The state read and written once; x, dt, z and out; B and C; the parameters.
  const double rows = double(rows_of(d));
  const double xs = double(dtype_size(d.x));
  return 2.0 * rows * double(d.N) * double(dtype_size(d.state)) +
         rows * xs * (3.0 + (d.has_z ? 1.0 : 0.0)) +
         2.0 * double(d.B * d.G * d.N) * double(dtype_size(d.bc)) +
         double(d.H * d.P) * (double(d.N) * double(dtype_size(d.a)) +
                              double(int(d.has_D) + int(d.dt_bias)) * double(dtype_size(d.p))) +
         (d.gather ? 4.0 * double(d.B) : 0.0);
}

namespace {

// args_desc()'s field 17, "a_bcast": A's last (state) stride is 0, as in Mamba-2's view of
// its per-head A over (P, N). The kernel then reads one A a row (AT_A_BCAST).
constexpr size_t k_a_bcast_field = 17;
void derive_a_bcast(const void* args, CallValues& values) {
  const auto& a = *static_cast<const autotune_selective_state_update_args*>(args);
  values[k_a_bcast_field] = a.A.data && a.A.ndim >= 1 && a.A.strides[a.A.ndim - 1] == 0 ? 1 : 0;
}

} // namespace

const ArgsDesc& SelectiveStateUpdateOp::args_desc() const {
  using A = autotune_selective_state_update_args;
  enum : int8_t {
    B,
    H,
    P,
    N,
    G,
    E,
    x,
    s,
    bc,
    a,
    p,
    heads,
    has_D,
    has_z,
    dt_bias,
    softplus,
    gather,
    a_bcast
  };
  const size_t indices = offsetof(A, state_batch_indices);
  // A tensor with and without the head dimension (the Mamba-1 form sets H = 1).
  const auto headed = [](const char* name, size_t offset, std::vector<DimRule> plain,
                         std::vector<DimRule> with_heads, int8_t dtype, int8_t presence,
                         bool output) {
    return std::vector<TensorRule>{{name,
                                    offset,
                                    std::move(plain),
                                    dtype,
                                    k_any_float,
                                    presence,
                                    output,
                                    StrideRule::any,
                                    1,
                                    {{H, 1}, {heads, 0}},
                                    "without heads"},
                                   {name,
                                    offset,
                                    std::move(with_heads),
                                    dtype,
                                    k_any_float,
                                    presence,
                                    output,
                                    StrideRule::any,
                                    1,
                                    {{heads, 1}},
                                    "with heads"}};
  };
  static const std::vector<TensorRule> tensors = [&] {
    std::vector<TensorRule> t;
    const auto add = [&t](std::vector<TensorRule> forms) {
      t.insert(t.end(), forms.begin(), forms.end());
    };
    // Read and written in place (an output: its elements may not overlap). One row per
    // sequence, or E rows that state_batch_indices select from.
    add(headed("state", offsetof(A, state), {{B}, {P}, {N}}, {{B}, {H}, {P}, {N}}, s, -1, true));
    t.push_back({"state",
                 offsetof(A, state),
                 {{E}, {P}, {N}},
                 s,
                 k_any_float,
                 -1,
                 true,
                 StrideRule::any,
                 1,
                 {{H, 1}, {heads, 0}},
                 "rows selected by state_batch_indices",
                 AUTOTUNE_FP32,
                 indices});
    t.push_back({"state",
                 offsetof(A, state),
                 {{E}, {H}, {P}, {N}},
                 s,
                 k_any_float,
                 -1,
                 true,
                 StrideRule::any,
                 1,
                 {{heads, 1}},
                 "rows selected by state_batch_indices, with heads",
                 AUTOTUNE_FP32,
                 indices});
    add(headed("x", offsetof(A, x), {{B}, {P}}, {{B}, {H}, {P}}, x, -1, false));
    add(headed("dt", offsetof(A, dt), {{B}, {P}}, {{B}, {H}, {P}}, x, -1, false));
    add(headed("A", offsetof(A, A), {{P}, {N}}, {{H}, {P}, {N}}, a, -1, false));
    for (const auto& [name, offset] : {std::pair{"B", offsetof(A, B)}, {"C", offsetof(A, C)}}) {
      t.push_back({name,
                   offset,
                   {{B}, {N}},
                   bc,
                   k_any_float,
                   -1,
                   false,
                   StrideRule::any,
                   1,
                   {{G, 1}},
                   "one group"});
      t.push_back({name,
                   offset,
                   {{B}, {G}, {N}},
                   bc,
                   k_any_float,
                   -1,
                   false,
                   StrideRule::any,
                   1,
                   {},
                   "groups"});
    }
    add(headed("D", offsetof(A, D), {{P}}, {{H}, {P}}, p, has_D, false));
    add(headed("z", offsetof(A, z), {{B}, {P}}, {{B}, {H}, {P}}, x, has_z, false));
    add(headed("dt_bias", offsetof(A, dt_bias), {{P}}, {{H}, {P}}, p, dt_bias, false));
    add(headed("out", offsetof(A, out), {{B}, {P}}, {{B}, {H}, {P}}, x, -1, true));
    t.push_back({"state_batch_indices",
                 indices,
                 {{B}},
                 -1,
                 0,
                 gather,
                 false,
                 StrideRule::contiguous,
                 1,
                 {},
                 nullptr,
                 AUTOTUNE_INT32});
    return t;
  }();
  static const ArgsDesc desc{"selective_state_update",
                             sizeof(A),
                             {{"B", FieldKind::size},
                              {"H", FieldKind::size},
                              {"P", FieldKind::size},
                              {"N", FieldKind::size, -1, {}, 4.0},
                              {"G", FieldKind::size},
                              {"E", FieldKind::size, 0},
                              {"dtype", FieldKind::dtype},
                              {"sdtype", FieldKind::dtype},
                              {"bcdtype", FieldKind::dtype},
                              {"adtype", FieldKind::dtype},
                              {"pdtype", FieldKind::dtype, AUTOTUNE_FP32},
                              {"heads", FieldKind::flag},
                              {"has_D", FieldKind::flag},
                              {"has_z", FieldKind::flag},
                              {"dt_bias", FieldKind::flag},
                              {"softplus", FieldKind::flag},
                              {"gather", FieldKind::flag, 0},
                              {"a_bcast", FieldKind::flag, 0}},
                             tensors,
                             {{"dt_softplus", offsetof(A, dt_softplus), ScalarKind::i32, softplus}},
                             derive_a_bcast};
  static_assert(a_bcast == k_a_bcast_field, "derive_a_bcast's field");
  return desc;
}

namespace {

// Element strides of a call's tensor as the kernel indexes it: `rank` dimensions, the
// tensor's own missing the head dimension at `head_at` (-1: it has them all).
template <size_t R> void strides_of(const TensorArg& t, long long (&out)[R], int head_at) {
  int j = 0;
  for (int i = 0; i < int(R); ++i) {
    if (t.ndim < int(R) && i == head_at) {
      out[i] = 0;
      continue;
    }
    out[i] = t.data ? t.strides[j] : 0;
    ++j;
  }
}

} // namespace

size_t SelectiveStateUpdatePlan::pack(const void* args, const BoundCall& call, void* out) const {
  (void)call;
  const auto& a = *static_cast<const autotune_selective_state_update_args*>(args);
  SelectiveStateUpdateKernelArgs k{};
  k.x = device_ptr(a.x);
  k.dt = device_ptr(a.dt);
  k.dt_bias = device_ptr(a.dt_bias);
  k.A = device_ptr(a.A);
  k.B = device_ptr(a.B);
  k.C = device_ptr(a.C);
  k.D = device_ptr(a.D);
  k.z = device_ptr(a.z);
  k.out = device_ptr(a.out);
  k.state_in = k.state_out = device_ptr(a.state); // in place
  k.state_indices = device_ptr(a.state_batch_indices);
  const bool heads = a.x.ndim == 3;
  k.batch = int(a.x.shape[0]);
  k.heads = heads ? int(a.x.shape[1]) : 1;
  k.dim = int(a.x.shape[heads ? 2 : 1]);
  k.groups = a.B.ndim == 3 ? int(a.B.shape[1]) : 1;
  k.entries = int(a.state.shape[0]);
  strides_of(a.x, k.x_stride, 1);
  strides_of(a.dt, k.dt_stride, 1);
  strides_of(a.z, k.z_stride, 1);
  strides_of(a.out, k.out_stride, 1);
  strides_of(a.dt_bias, k.dt_bias_stride, 0);
  strides_of(a.D, k.D_stride, 0);
  strides_of(a.A, k.A_stride, 0);
  strides_of(a.B, k.B_stride, 1);
  strides_of(a.C, k.C_stride, 1);
  strides_of(a.state, k.state_stride, 1);
  std::memcpy(out, &k, sizeof k);
  return sizeof k;
}

std::unique_ptr<CallPlan> SelectiveStateUpdateOp::plan(const Config& config,
                                                       const Problem& problem) const {
  auto p = std::make_unique<SelectiveStateUpdatePlan>();
  p->geometry = geometry(config, problem);
  return p;
}

} // namespace autotune
