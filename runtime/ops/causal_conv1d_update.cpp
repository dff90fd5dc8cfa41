#include "causal_conv1d_update.hpp"

#include "runtime/base/strings.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace autotune {
namespace {

using Dims = CausalConv1dUpdateShape;

Dims dims(const Problem& p) {
  return CausalConv1dUpdateShape::of(p);
}

int threads_of(const Config& c) {
  int threads = 0;
  for (const auto& [k, v] : c) {
    if (k == "threads") {
      threads = int(parse_int(v, "threads"));
    } else {
      throw Error(ErrorKind::config, "causal_conv1d_update: unknown parameter '" + k + "'");
    }
  }
  if (threads == 0) {
    throw Error(ErrorKind::config,
                "causal_conv1d_update: configuration '" + format_fields(c) + "' lacks threads");
  }
  return threads;
}

// The kernel keeps a state row in registers: S is a compile-time constant up to this.
constexpr long long k_max_state_len = 64;
constexpr long long k_max_grid_y = 65535;

// The tuner's cache lengths: spread over 0 .. 3S, so that the circular buffer's start
// wraps once, twice or not at all, and differs between neighbouring sequences.
int tuner_cache_seqlen(long long b, long long S) {
  return int((b * 7 + 3) % (3 * S + 1));
}

} // namespace

CausalConv1dUpdateShape CausalConv1dUpdateShape::of(const Problem& p) {
  Dims d;
  d.B = p.get_int("B");
  d.C = p.get_int("C");
  d.L = p.get_int("L");
  d.W = p.get_int("W");
  d.S = p.get_int("S");
  d.x = parse_dtype(p.get("dtype"), "dtype");
  d.w = parse_dtype(p.get("wdtype"), "wdtype");
  d.bias = p.get_int("bias") != 0;
  d.silu = p.get_int("silu") != 0;
  d.circular = p.get_int("circular") != 0;
  d.gather = p.get_int("gather") != 0;
  return d;
}

std::vector<std::string> CausalConv1dUpdateOp::default_shapes() const {
  // One decoding token of Mamba blocks (d_inner 2048-5120, d_conv 4 with mamba-ssm's
  // state of 4 inputs), batch 1 to 64.
  return {"B=1,C=5120,L=1,W=4,S=4", "B=16,C=4096,L=1,W=4,S=4", "B=64,C=5120,L=1,W=4,S=4",
          "B=64,C=2048,L=1,W=4,S=3"};
}

Problem CausalConv1dUpdateOp::make_problem(const Fields& shape) const {
  // E (the state's rows with conv_state_indices) comes with a call; it changes no kernel.
  const ShapeReader r(
      shape, "causal_conv1d_update",
      {"B", "C", "L", "W", "S", "E", "dtype", "wdtype", "bias", "silu", "circular", "gather"},
      {"B", "C", "L", "W", "S", "dtype", "wdtype", "bias", "silu", "circular", "gather"});
  const long long B = r.ranged("B", nullptr, k_max_grid_y);
  const long long C = r.ranged("C", nullptr, 1 << 24);
  const long long L = r.ranged("L", "1", 1 << 20);
  const long long W = parse_int(r.get("W", "4"), "causal_conv1d_update shape field W");
  if (W < 2 || W > 4) {
    r.fail("width W=" + std::to_string(W) + " is not supported (W must be 2, 3 or 4)");
  }
  const long long S =
      parse_int(r.get("S", std::to_string(W - 1).c_str()), "causal_conv1d_update shape field S");
  if (S < W - 1 || S > k_max_state_len) {
    r.fail("state length S=" + std::to_string(S) + " is not supported (S must be in W-1=" +
           std::to_string(W - 1) + ".." + std::to_string(k_max_state_len) + ")");
  }
  if (ShapeReader::product_reaches({B, C, L}, 1ll << 40)) {
    r.fail("B*C*L is too large");
  }
  const DType x = parse_dtype(r.get("dtype", "bf16"), "causal_conv1d_update shape field dtype");
  const DType w =
      parse_dtype(r.get("wdtype", to_string(x)), "causal_conv1d_update shape field wdtype");
  Problem p;
  p.op = name();
  p.fields = {{"B", std::to_string(B)},         {"C", std::to_string(C)},
              {"L", std::to_string(L)},         {"W", std::to_string(W)},
              {"S", std::to_string(S)},         {"dtype", to_string(x)},
              {"wdtype", to_string(w)},         {"bias", r.flag("bias", "1")},
              {"silu", r.flag("silu", "1")},    {"circular", r.flag("circular", "0")},
              {"gather", r.flag("gather", "0")}};
  return p;
}

Result<bool> CausalConv1dUpdateOp::check(const Config& config, const Problem& problem,
                                         const std::string& arch) const {
  (void)arch; // plain loads and stores: every GPU the runtime supports
  const int threads = threads_of(config);
  if (auto ok = check_block_threads(threads); !ok) {
    return ok;
  }
  const Dims d = dims(problem);
  // The state row lives in registers: above 256 threads a block's register budget
  // spills rows longer than 16 (ptxas, sm_90: from S = 24 at 1024 threads).
  if (threads > 256 && d.S > 16) {
    return fail("more than 256 threads spill a state row longer than 16");
  }
  if ((d.C + threads - 1) / threads > 0x7fffffffll) {
    return fail("grid too large");
  }
  return true;
}

std::vector<std::string> CausalConv1dUpdateOp::defines(const Config& config,
                                                       const Problem& problem) const {
  const Dims d = dims(problem);
  return {"-DAT_THREADS=" + std::to_string(threads_of(config)),
          "-DAT_WIDTH=" + std::to_string(d.W),
          "-DAT_STATE_LEN=" + std::to_string(d.S),
          std::string("-DAT_SILU=") + (d.silu ? "1" : "0"),
          std::string("-DAT_HAS_BIAS=") + (d.bias ? "1" : "0"),
          std::string("-DAT_CIRCULAR=") + (d.circular ? "1" : "0"),
          std::string("-DAT_GATHER=") + (d.gather ? "1" : "0"),
          std::string("-DAT_X_T=") + template_type(d.x),
          std::string("-DAT_W_T=") + template_type(d.w)};
}

LaunchGeometry CausalConv1dUpdateOp::geometry(const Config& config, const Problem& problem) const {
  const Dims d = dims(problem);
  const int threads = threads_of(config);
  LaunchGeometry g;
  g.block[0] = unsigned(threads);
  g.grid[0] = unsigned((d.C + threads - 1) / threads);
  g.grid[1] = unsigned(d.B);
  return g;
}

std::vector<TensorSpec> CausalConv1dUpdateOp::tensors(const Problem& problem) const {
  const Dims d = dims(problem);
  std::vector<TensorSpec> t;
  const size_t n = size_t(d.B * d.C * d.L);
  const size_t states = size_t(d.B * d.C * d.S); // the tuner's state has E = B rows
  t.push_back({"x", d.x, n, false, -1.0f, 1.0f});
  t.push_back({"weight", d.w, size_t(d.C * d.W), false, -0.5f, 0.5f});
  if (d.bias) {
    t.push_back({"bias", d.w, size_t(d.C), false, -0.5f, 0.5f});
  }
  t.push_back({"conv_state", d.x, states, false, -1.0f, 1.0f});
  if (d.circular) {
    TensorSpec lens{"cache_seqlens", DType::f32, size_t(d.B), false};
    for (long long b = 0; b < d.B; ++b) {
      lens.values.push_back(tuner_cache_seqlen(b, d.S));
    }
    t.push_back(std::move(lens));
  }
  if (d.gather) {
    // Every row selected once (the reference then defines the whole new state): the
    // sequences in reverse order.
    TensorSpec rows{"conv_state_indices", DType::f32, size_t(d.B), false};
    for (long long b = 0; b < d.B; ++b) {
      rows.values.push_back(int(d.B - 1 - b));
    }
    t.push_back(std::move(rows));
  }
  t.push_back({"out", d.x, n, true});
  t.push_back({"new_state", d.x, states, true});
  return t;
}

namespace {

// The tuner's tensors (tensors() order) as the kernel's argument: contiguous x, out and
// state, the new state into its own buffer.
CausalConv1dUpdateKernelArgs tuner_args(const Dims& d, const std::vector<CUdeviceptr>& t) {
  CausalConv1dUpdateKernelArgs k{};
  size_t i = 0;
  k.x = t.at(i++);
  k.weight = t.at(i++);
  k.bias = d.bias ? t.at(i++) : 0;
  k.state_in = t.at(i++);
  k.cache_seqlens = d.circular ? t.at(i++) : 0;
  k.state_indices = d.gather ? t.at(i++) : 0;
  k.out = t.at(i++);
  k.state_out = t.at(i++);
  k.batch = int(d.B);
  k.channels = int(d.C);
  k.length = int(d.L);
  k.entries = int(d.B);
  k.x_batch_stride = k.out_batch_stride = d.C * d.L;
  k.x_channel_stride = k.out_channel_stride = d.L;
  k.x_length_stride = k.out_length_stride = 1;
  k.state_entry_stride = d.C * d.S;
  k.state_channel_stride = d.S;
  k.state_pos_stride = 1;
  return k;
}

} // namespace

void CausalConv1dUpdateOp::pack(const Config& config, const Problem& problem,
                                const std::vector<CUdeviceptr>& tensors, ArgPack& args) const {
  (void)config;
  args.add(tuner_args(dims(problem), tensors));
}

std::string CausalConv1dUpdateOp::reference_kernel(const Problem& problem) const {
  const Dims d = dims(problem);
  return reference_kernel_name("causal_conv1d_update_ref", d.x, d.w);
}

LaunchGeometry CausalConv1dUpdateOp::reference_geometry(const Problem& problem) const {
  const Dims d = dims(problem);
  LaunchGeometry g;
  g.block[0] = 256;
  g.grid[0] = unsigned(std::min<long long>((d.B * d.C + 255) / 256, 65536));
  return g;
}

void CausalConv1dUpdateOp::pack_reference(const Problem& problem, const std::vector<CUdeviceptr>& t,
                                          const std::vector<CUdeviceptr>& ref,
                                          ArgPack& args) const {
  const Dims d = dims(problem);
  const CausalConv1dUpdateKernelArgs k = tuner_args(d, t);
  args.add(k.x);
  args.add(k.weight);
  args.add(k.bias);
  args.add(k.state_in);
  args.add(k.cache_seqlens);
  args.add(k.state_indices);
  args.add(ref.at(0));
  args.add(ref.at(1));
  args.add(int(d.B));
  args.add(int(d.C));
  args.add(int(d.L));
  args.add(int(d.W));
  args.add(int(d.S));
  args.add(int(d.B));
  args.add(int(d.silu));
  args.add(k.x_batch_stride);
  args.add(k.x_channel_stride);
  args.add(k.x_length_stride);
}

double CausalConv1dUpdateOp::tolerance(const Problem& problem) const {
  // One rounding of the output, as causal_conv1d; the new state is copied, not computed.
  return output_rounding_tolerance(dims(problem).x, 1e-5);
}

double CausalConv1dUpdateOp::bytes(const Problem& problem) const {
  const Dims d = dims(problem);
  // x read and out written once, the state read and written once, the filter read.
  const double e = double(dtype_size(d.x));
  return 2.0 * double(d.B * d.C * d.L) * e + 2.0 * double(d.B * d.C * d.S) * e +
         double(d.C * (d.W + (d.bias ? 1 : 0))) * double(dtype_size(d.w)) +
         4.0 * double(d.B) * double(int(d.circular) + int(d.gather));
}

const ArgsDesc& CausalConv1dUpdateOp::args_desc() const {
  using A = autotune_causal_conv1d_update_args;
  enum : int8_t { B, C, L, W, S, E, x, w, bias, silu, circular, gather };
  const auto int32 = [](const char* name, size_t offset, int8_t presence) {
    return TensorRule{name, offset,   {{B}},   -1,
                      0,    presence, false,   StrideRule::contiguous,
                      1,    {},       nullptr, AUTOTUNE_INT32};
  };
  static const ArgsDesc desc{
      "causal_conv1d_update",
      sizeof(A),
      {{"B", FieldKind::size},
       {"C", FieldKind::size},
       {"L", FieldKind::size},
       {"W", FieldKind::size, -1, {}, 4.0},
       {"S", FieldKind::size, -1, {}, 4.0},
       {"E", FieldKind::size, 0},
       {"dtype", FieldKind::dtype},
       {"wdtype", FieldKind::dtype},
       {"bias", FieldKind::flag},
       {"silu", FieldKind::flag},
       {"circular", FieldKind::flag, 0},
       {"gather", FieldKind::flag, 0}},
      {{"x", offsetof(A, x), {{B}, {C}, {L}}, x, k_any_float, -1, false, StrideRule::any},
       // Read and written in place (an output: its elements may not overlap). One row per
       // sequence, or with conv_state_indices E rows that the indices select from.
       {"conv_state",
        offsetof(A, conv_state),
        {{B}, {C}, {S}},
        x,
        k_any_float,
        -1,
        true,
        StrideRule::any,
        1,
        {},
        "one row per sequence"},
       {"conv_state",
        offsetof(A, conv_state),
        {{E}, {C}, {S}},
        x,
        k_any_float,
        -1,
        true,
        StrideRule::any,
        1,
        {},
        "rows selected by conv_state_indices",
        AUTOTUNE_FP32,
        offsetof(A, conv_state_indices)},
       {"weight",
        offsetof(A, weight),
        {{C}, {W}},
        w,
        k_any_float,
        -1,
        false,
        StrideRule::contiguous},
       {"bias", offsetof(A, bias), {{C}}, w, k_any_float, bias, false, StrideRule::contiguous},
       {"out", offsetof(A, out), {{B}, {C}, {L}}, x, k_any_float, -1, true, StrideRule::any},
       int32("cache_seqlens", offsetof(A, cache_seqlens), circular),
       int32("conv_state_indices", offsetof(A, conv_state_indices), gather)},
      {{"silu", offsetof(A, silu), ScalarKind::i32, silu}}};
  return desc;
}

size_t CausalConv1dUpdatePlan::pack(const void* args, const BoundCall& call, void* out) const {
  (void)call;
  const auto& a = *static_cast<const autotune_causal_conv1d_update_args*>(args);
  CausalConv1dUpdateKernelArgs k{};
  k.x = device_ptr(a.x);
  k.weight = device_ptr(a.weight);
  k.bias = device_ptr(a.bias);
  k.out = device_ptr(a.out);
  k.state_in = k.state_out = device_ptr(a.conv_state); // in place
  k.cache_seqlens = device_ptr(a.cache_seqlens);
  k.state_indices = device_ptr(a.conv_state_indices);
  k.batch = int(a.x.shape[0]);
  k.channels = int(a.x.shape[1]);
  k.length = int(a.x.shape[2]);
  k.entries = int(a.conv_state.shape[0]);
  k.x_batch_stride = a.x.strides[0];
  k.x_channel_stride = a.x.strides[1];
  k.x_length_stride = a.x.strides[2];
  k.out_batch_stride = a.out.strides[0];
  k.out_channel_stride = a.out.strides[1];
  k.out_length_stride = a.out.strides[2];
  k.state_entry_stride = a.conv_state.strides[0];
  k.state_channel_stride = a.conv_state.strides[1];
  k.state_pos_stride = a.conv_state.strides[2];
  std::memcpy(out, &k, sizeof k);
  return sizeof k;
}

std::unique_ptr<CallPlan> CausalConv1dUpdateOp::plan(const Config& config,
                                                     const Problem& problem) const {
  auto p = std::make_unique<CausalConv1dUpdatePlan>();
  p->geometry = geometry(config, problem);
  return p;
}

} // namespace autotune
