// Runtime::selective_scan and friends: argument conversion and validation, then
// the shared variant cache of Runtime::Impl.
#include "runtime/ops/selective_scan.hpp"
#include "runtime_impl.hpp"

namespace autotune {
namespace {

struct ScanPrepared {
  Problem problem;
  SelectiveScanCall call;
};

ScanPrepared prepare(const SelectiveScanOp& op, const SelectiveScanArgs& a) {
  Fields shape = {{"B", std::to_string(a.batch)},
                  {"D", std::to_string(a.dim)},
                  {"L", std::to_string(a.length)},
                  {"N", std::to_string(a.dstate)},
                  {"G", std::to_string(a.groups)},
                  {"dtype", to_string(to_dtype(a.type))},
                  {"var_bc", a.variable_bc ? "1" : "0"},
                  {"delta_bias", a.delta_bias ? "1" : "0"},
                  {"softplus", a.delta_softplus ? "1" : "0"},
                  {"has_d", a.D ? "1" : "0"},
                  {"has_z", a.z ? "1" : "0"},
                  {"last_state", a.last_state ? "1" : "0"}};
  ScanPrepared p{op.make_problem(shape), {}};
  auto ptr = [](const void* q) { return reinterpret_cast<CUdeviceptr>(q); };
  auto& c = p.call;
  c.u = ptr(a.u);
  c.delta = ptr(a.delta);
  c.A = ptr(a.A);
  c.B = ptr(a.B);
  c.C = ptr(a.C);
  c.D = ptr(a.D);
  c.z = ptr(a.z);
  c.delta_bias = ptr(a.delta_bias);
  c.out = ptr(a.out);
  c.last_state = ptr(a.last_state);
  // [B, D, L] rows: negative strides mean contiguous.
  auto rows = [&](const int64_t(&s)[2], long long& bs, long long& ds) {
    ds = s[1] < 0 ? a.length : s[1];
    bs = s[0] < 0 ? a.dim * ds : s[0];
  };
  rows(a.u_strides, c.u_batch_stride, c.u_dim_stride);
  rows(a.delta_strides, c.delta_batch_stride, c.delta_dim_stride);
  rows(a.z_strides, c.z_batch_stride, c.z_dim_stride);
  rows(a.out_strides, c.out_batch_stride, c.out_dim_stride);
  // [B, G, N, L] variable B/C.
  auto bc = [&](const int64_t(&s)[3], long long& bs, long long& gs, long long& ns) {
    ns = s[2] < 0 ? a.length : s[2];
    gs = s[1] < 0 ? a.dstate * ns : s[1];
    bs = s[0] < 0 ? a.groups * gs : s[0];
  };
  bc(a.b_strides, c.b_batch_stride, c.b_group_stride, c.b_state_stride);
  bc(a.c_strides, c.c_batch_stride, c.c_group_stride, c.c_state_stride);
  op.validate_call(p.problem, c);
  return p;
}

const SelectiveScanOp& scan_op() {
  return static_cast<const SelectiveScanOp&>(find_op("selective_scan"));
}

} // namespace

Selection Runtime::select_selective_scan(const SelectiveScanArgs& args) {
  ScanPrepared p = prepare(scan_op(), args);
  return m_impl->get(scan_op(), p.problem).selection;
}

void Runtime::selective_scan(const SelectiveScanArgs& args, CUstream stream) {
  const SelectiveScanOp& op = scan_op();
  ScanPrepared p = prepare(op, args);
  const LoadedVariant& v = m_impl->get(op, p.problem);
  ArgPack pack;
  op.pack_call(v.config, p.problem, p.call, pack);
  m_impl->launch(op, p.problem, v, pack, stream);
}

} // namespace autotune
