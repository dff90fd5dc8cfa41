// GPU tests for selective_state_update (one decoding step of the Mamba selective scan
// against a state updated in place, mamba-ssm's selective_state_update) through
// autotune::Runtime pinned to (threads, lanes) variants: Mamba-1's form (no heads) and
// Mamba-2's (heads, groups), state sizes, dtypes, D, z, dt_bias and softplus against a
// float64 CPU reference; Mamba-2's broadcast views of stride 0, strided activations and
// strided states; rows selected by state_batch_indices with padding rows. The memory of
// out and of the state outside what the call writes is compared bit for bit, and every
// comparison is shown to reject kernels with a term missing or a wrong exponent.
// Mistakes are refused before anything is written.
#include "gpu_support.hpp"

#include "runtime/base/error.hpp"
#include "runtime/dispatch/autotune.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace autotune;
using namespace autotune::test;
namespace fs = std::filesystem;

namespace {

constexpr int k_batch = 3;   // B
constexpr int k_heads = 4;   // H of Mamba-2's form (Mamba-1's is 1)
constexpr int k_entries = 7; // E, the state's rows when state_batch_indices select them
constexpr int k_threads[] = {64, 128, 256};
constexpr int k_lanes[] = {1, 2, 4, 8, 16, 32};

// The lanes a row may take for N states: at most N, at most 32 states a lane.
std::vector<int> lanes_for(int N) {
  std::vector<int> out;
  for (int l : k_lanes) {
    if (l <= N && (N + l - 1) / l <= 32) {
      out.push_back(l);
    }
  }
  return out;
}

std::string variant_id(int threads, int lanes, bool words = false) {
  return "threads=" + std::to_string(threads) + ",lanes=" + std::to_string(lanes) +
         ",loads=" + (words ? "words" : "elements");
}

// How the state lies in memory: row-major; a slice of a larger buffer (starting 3
// elements in, each row of N states followed by 5 elements of padding, each head by 7
// more, each entry by 11 more); the states of a row strided by P (memory [E, H, N, P]).
enum class StateLayout { contiguous, padded, n_major };

struct Case {
  bool heads = false; // Mamba-2's form: x [B, H, P], state [B, H, P, N], B/C [B, G, N]
  int P = 64, N = 16, G = 1;
  DType x = DType::bf16, state = DType::bf16, bc = DType::f32; // A, D, dt_bias: fp32
  bool has_z = true, has_D = true, dt_bias = true, softplus = true;
  bool gather = false;    // E = 7 rows selected by state_batch_indices
  bool broadcast = false; // A, dt, D and dt_bias as Mamba-2's per-head views of stride 0
  bool strided = false;   // x, dt, z, out, B and C rows of larger buffers (a split projection)
  StateLayout layout = StateLayout::contiguous;
  int threads = 128, lanes = 4;
  bool words = false; // loads=words: A, B and C read as words in their own types

  int H() const { return heads ? k_heads : 1; }
  std::string variant() const { return variant_id(threads, lanes, words); }
};

ElementType element_type(DType t) {
  return t == DType::f32   ? ElementType::fp32
         : t == DType::f16 ? ElementType::fp16
                           : ElementType::bf16;
}

const void* ptr(CUdeviceptr p) {
  return reinterpret_cast<const void*>(p);
}

// v as the GPU stores it in dtype t (round to nearest even).
double rounded(DType t, double v) {
  const float f = float(v);
  if (t == DType::bf16) {
    return bf16_to_float(float_to_bf16(f));
  }
  if (t == DType::f16) {
    return double(float(_Float16(f)));
  }
  return f;
}

// Rows of E = 7 for the B = 3 sequences: distinct valid rows mixed with padding (-1 and
// E, both outside [0, E)), and rows that nobody selects.
std::vector<int> rows_for(int i) {
  static const int patterns[][k_batch] = {{5, -1, 2}, {7, 0, 6}, {3, 6, -1}, {-1, 7, 4}, {1, 4, 0}};
  const int* p = patterns[i % 5];
  return {p[0], p[1], p[2]};
}

RuntimeOptions pinned(int threads, int lanes, bool words = false) {
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::pin;
  ro.pinned = variant_id(threads, lanes, words);
  return ro;
}

// A runtime pinned to each (threads, lanes, loads) variant, made on first use.
struct PinnedRuntimes {
  std::map<std::string, std::unique_ptr<Runtime>> runtimes;
  Runtime& operator()(int threads, int lanes, bool words) {
    std::unique_ptr<Runtime>& rt = runtimes[variant_id(threads, lanes, words)];
    if (!rt) {
      rt = std::make_unique<Runtime>(pinned(threads, lanes, words));
    }
    return *rt;
  }
};

// One tensor of a call: its element view in the form with heads (shape, strides, and the
// element of the allocation where it starts), the host copy of its whole allocation
// (gaps included) and the GPU's.
struct Operand {
  DType type = DType::f32;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;
  int drop = -1; // the dimension Mamba-1's form leaves out (H; G of B and C)
  HostTensor host{DType::f32, 0};
  std::unique_ptr<DeviceTensor> dev;

  size_t at(std::initializer_list<int64_t> index) const {
    int64_t i = offset;
    size_t d = 0;
    for (int64_t v : index) {
      i += v * strides[d++];
    }
    return size_t(i);
  }
  double get(std::initializer_list<int64_t> index) const { return host.get(at(index)); }
  const void* data() const { return ptr(dev->get() + CUdeviceptr(offset) * dtype_size(type)); }
  // The view as the call passes it: without `drop` in Mamba-1's form.
  Tensor view(bool heads) const {
    Tensor t{};
    t.data = data();
    t.dtype = int32_t(element_type(type));
    for (size_t d = 0; d < shape.size(); ++d) {
      if (!heads && int(d) == drop) {
        continue;
      }
      t.shape[t.ndim] = shape[d];
      t.strides[t.ndim] = strides[d];
      ++t.ndim;
    }
    return t;
  }
  void upload() { dev = std::make_unique<DeviceTensor>(host); }
};

// An operand of `shape` (row-major when `strides` is empty) starting `offset` elements
// into an allocation that ends `tail` elements past its last element; not filled.
Operand operand(DType t, std::vector<int64_t> shape, std::vector<int64_t> strides, int drop,
                int64_t offset = 0, int64_t tail = 0) {
  Operand o;
  o.type = t;
  o.drop = drop;
  o.offset = offset;
  if (strides.empty()) {
    strides.assign(shape.size(), 1);
    for (size_t d = shape.size() - 1; d > 0; --d) {
      strides[d - 1] = strides[d] * shape[d];
    }
  }
  int64_t last = offset;
  for (size_t d = 0; d < shape.size(); ++d) {
    last += (shape[d] - 1) * strides[d];
  }
  o.shape = std::move(shape);
  o.strides = std::move(strides);
  o.host = HostTensor(t, size_t(last + 1 + tail));
  return o;
}

void fill(Operand& o, std::mt19937_64& rng, float lo, float hi) {
  o.host.randomize(rng, lo, hi);
  o.upload();
}

// Kernels that a comparison must reject (each applies where the case has the term).
enum class Mutant {
  none,
  exp_of_A,       // exp(A): dt left out of the exponent
  exp_sign,       // exp(-dt A)
  no_decay,       // the old state not decayed
  no_dt_on_input, // B x without dt
  no_D,           // the skip term D x missing
  no_gate,        // out not multiplied by silu(z)
  no_softplus,    // dt + dt_bias used raw
  no_dt_bias,     // dt_bias left out
  wrong_group,    // head h reads group h % G instead of h / (H / G)
  row_b,          // sequence b reads state row b, not state_batch_indices[b]
};

const char* name_of(Mutant m) {
  static const char* names[] = {"none",
                                "exp(A) for exp(dt A)",
                                "exp(-dt A)",
                                "no decay of the state",
                                "B x without dt",
                                "no D x",
                                "no silu(z) gate",
                                "no softplus",
                                "no dt_bias",
                                "group h % G",
                                "state row b ignoring the indices"};
  return names[int(m)];
}

// The float64 reference: out at (b * H + h) * P + p (padding rows 0) and the new state
// row of sequence b at ((b * H + h) * P + p) * N + n, each with the sum of the magnitudes
// of its terms (the scale of the GPU's fp32 rounding).
struct Ref {
  std::vector<double> out, out_scale;
  std::vector<double> state, state_scale;
};

struct Tolerance {
  double rtol, atol;
};

// What rounding to the stored dtype may cost (out: bf16 as coarse as mamba-ssm's tests
// allow), plus k_arith of the terms' magnitudes for the kernel's fp32 arithmetic (exp2
// and reciprocal approximations, a sum of up to 128 products).
Tolerance state_tolerance(DType t) {
  return t == DType::f32   ? Tolerance{1e-5, 1e-6}
         : t == DType::f16 ? Tolerance{2e-3, 2e-3}
                           : Tolerance{1e-2, 1e-2};
}
Tolerance out_tolerance(DType t) {
  return t == DType::f32   ? Tolerance{1e-5, 1e-6}
         : t == DType::f16 ? Tolerance{5e-3, 5e-3}
                           : Tolerance{2e-2, 2e-2};
}
constexpr double k_arith = 1e-5;

// One call: its tensors on the host and the GPU (random inputs drawn as mamba-ssm's tests
// draw them, out poisoned with NaN), its arguments, and the checks of what the GPU holds
// after it.
struct Update {
  Case k;
  int E;
  std::vector<int> rows;
  cuda::DeviceBuffer drows;
  Operand x, dt, A, Bm, Cm, D, z, dt_bias, out, state;
  SelectiveStateUpdateArgs a{};

  Update(const Case& c, int i, std::mt19937_64& rng)
      : k(c), E(c.gather ? k_entries : k_batch), rows(c.gather ? rows_for(i) : std::vector<int>{}),
        drows(int_buffer(rows)) {
    const int64_t B = k_batch, H = c.H(), P = c.P, N = c.N, G = c.G;
    // x, z and out (dt too unless broadcast): [B, H, P], rows of a larger buffer when strided.
    const int64_t row = c.strided ? H * P + 24 : H * P;
    const int64_t start = c.strided ? 5 : 0;
    auto activation = [&](DType t) {
      return operand(t, {B, H, P}, {row, P, 1}, 1, start, c.strided ? 3 : 0);
    };
    x = activation(c.x);
    fill(x, rng, -1, 1);
    dt = c.broadcast ? operand(c.x, {B, H, P}, {H, 1, 0}, 1) : activation(c.x);
    fill(dt, rng, -1, 1);
    z = activation(c.x);
    fill(z, rng, -1, 1);
    out = activation(c.x);
    out.host.poison();
    out.upload();
    // A in [-2, -1]; D and dt_bias [H, P]; per head only when broadcast.
    A = c.broadcast ? operand(DType::f32, {H, P, N}, {1, 0, 0}, 0)
                    : operand(DType::f32, {H, P, N}, {}, 0);
    fill(A, rng, -2, -1);
    auto param = [&] {
      return c.broadcast ? operand(DType::f32, {H, P}, {1, 0}, 0)
                         : operand(DType::f32, {H, P}, {}, 0);
    };
    D = param();
    fill(D, rng, -1, 1);
    dt_bias = param();
    if (c.softplus) {
      fill(dt_bias, rng, -4, -3); // softplus(dt + dt_bias) small and positive
    } else {
      fill(dt_bias, rng, -0.5f, 0.5f);
    }
    // B and C: [B, G, N] (Mamba-1: [B, N]).
    const int64_t bc_row = c.strided ? G * N + 8 : G * N;
    Bm = operand(c.bc, {B, G, N}, {bc_row, N, 1}, c.heads ? -1 : 1, c.strided ? 2 : 0);
    fill(Bm, rng, -1, 1);
    Cm = operand(c.bc, {B, G, N}, {bc_row, N, 1}, c.heads ? -1 : 1, c.strided ? 1 : 0);
    fill(Cm, rng, -1, 1);
    // The state: [E, H, P, N] (Mamba-1: [E, P, N]); gaps filled too (they must survive).
    if (c.layout == StateLayout::padded) {
      const int64_t pn = N + 5, ph = P * pn + 7, pe = H * ph + 11;
      state = operand(c.state, {E, H, P, N}, {pe, ph, pn, 1}, 1, 3, 9);
    } else if (c.layout == StateLayout::n_major) {
      state = operand(c.state, {E, H, P, N}, {H * N * P, N * P, 1, P}, 1);
    } else {
      state = operand(c.state, {E, H, P, N}, {}, 1);
    }
    fill(state, rng, -1, 1);

    a.state = state.view(c.heads);
    a.x = x.view(c.heads);
    a.dt = dt.view(c.heads);
    a.A = A.view(c.heads);
    a.B = Bm.view(c.heads);
    a.C = Cm.view(c.heads);
    if (c.has_D) {
      a.D = D.view(c.heads);
    }
    if (c.has_z) {
      a.z = z.view(c.heads);
    }
    if (c.dt_bias) {
      a.dt_bias = dt_bias.view(c.heads);
    }
    a.out = out.view(c.heads);
    if (c.gather) {
      a.state_batch_indices = tensor(ptr(drows.get()), ElementType::int32, {k_batch});
    }
    a.dt_softplus = c.softplus ? 1 : 0;
  }

  std::string describe() const {
    static const char* layouts[] = {"contiguous", "padded", "n-major"};
    std::ostringstream s;
    s << (k.heads ? "Mamba-2" : "Mamba-1") << " B=" << k_batch << " H=" << k.H() << " P=" << k.P
      << " N=" << k.N << " G=" << k.G << " x=" << to_string(k.x) << " state=" << to_string(k.state)
      << " bc=" << to_string(k.bc) << " z=" << k.has_z << " D=" << k.has_D
      << " dt_bias=" << k.dt_bias << " softplus=" << k.softplus
      << " state:" << layouts[int(k.layout)] << (k.broadcast ? " broadcast" : "")
      << (k.strided ? " strided" : "") << " " << k.variant();
    for (size_t b = 0; b < rows.size(); ++b) {
      s << (b == 0 ? " indices=" : ",") << rows[b];
    }
    return s.str();
  }

  // The canonical problem the runtime should read off the call (E is not part of it).
  std::string problem_key() const {
    const auto flag = [](bool on) { return on ? "1" : "0"; };
    return "B=" + std::to_string(k_batch) + ",H=" + std::to_string(k.H()) +
           ",P=" + std::to_string(k.P) + ",N=" + std::to_string(k.N) + ",G=" + std::to_string(k.G) +
           ",dtype=" + to_string(k.x) + ",sdtype=" + to_string(k.state) +
           ",bcdtype=" + to_string(k.bc) + ",adtype=fp32,pdtype=fp32,heads=" + flag(k.heads) +
           ",has_D=" + flag(k.has_D) + ",has_z=" + flag(k.has_z) + ",dt_bias=" + flag(k.dt_bias) +
           ",softplus=" + flag(k.softplus) + ",gather=" + flag(k.gather) +
           (k.broadcast ? ",a_bcast=1" : ""); // A's state stride 0: one A a row
  }

  // Sequence b's state row, or -1 for padding.
  int row_of(int b) const {
    const int r = k.gather ? rows[size_t(b)] : b;
    return r >= 0 && r < E ? r : -1;
  }

  std::vector<Mutant> mutants() const {
    std::vector<Mutant> m = {Mutant::exp_of_A, Mutant::exp_sign, Mutant::no_decay,
                             Mutant::no_dt_on_input};
    if (k.has_D) {
      m.push_back(Mutant::no_D);
    }
    if (k.has_z) {
      m.push_back(Mutant::no_gate);
    }
    if (k.softplus) {
      m.push_back(Mutant::no_softplus);
    }
    if (k.dt_bias) {
      m.push_back(Mutant::no_dt_bias);
    }
    if (k.G > 1) {
      m.push_back(Mutant::wrong_group);
    }
    if (k.gather) {
      m.push_back(Mutant::row_b);
    }
    return m;
  }

  // The reference from the host copies of the inputs (of the kernel `m` when given).
  Ref reference(Mutant m = Mutant::none) const {
    const int H = k.H(), P = k.P, N = k.N;
    const size_t n_rows = size_t(k_batch) * size_t(H) * size_t(P);
    Ref ref;
    ref.out.assign(n_rows, 0.0);
    ref.out_scale.assign(n_rows, 0.0);
    ref.state.assign(n_rows * size_t(N), 0.0);
    ref.state_scale.assign(n_rows * size_t(N), 0.0);
    for (int b = 0; b < k_batch; ++b) {
      int e = row_of(b);
      if (e < 0) {
        continue; // padding: out 0, no state written
      }
      if (m == Mutant::row_b) {
        e = b;
      }
      for (int h = 0; h < H; ++h) {
        const int g = m == Mutant::wrong_group ? h % k.G : h / (H / k.G);
        for (int p = 0; p < P; ++p) {
          const size_t r = (size_t(b) * size_t(H) + size_t(h)) * size_t(P) + size_t(p);
          const double xv = x.get({b, h, p});
          double dtv = dt.get({b, h, p});
          if (k.dt_bias && m != Mutant::no_dt_bias) {
            dtv += dt_bias.get({h, p});
          }
          if (k.softplus && m != Mutant::no_softplus) {
            dtv = dtv <= 20.0 ? std::log1p(std::exp(dtv)) : dtv;
          }
          double acc = 0.0, acc_scale = 0.0;
          for (int n = 0; n < N; ++n) {
            const double an = A.get({h, p, n});
            const double s0 = state.get({e, h, p, n});
            const double exponent = m == Mutant::exp_of_A   ? an
                                    : m == Mutant::exp_sign ? -dtv * an
                                                            : dtv * an;
            const double decayed = m == Mutant::no_decay ? s0 : s0 * std::exp(exponent);
            const double input = (m == Mutant::no_dt_on_input ? 1.0 : dtv) * Bm.get({b, g, n}) * xv;
            const double s = decayed + input;
            const size_t i = r * size_t(N) + size_t(n);
            ref.state[i] = s;
            ref.state_scale[i] = std::fabs(decayed) + std::fabs(input);
            // out reads the state as stored (the kernel's and mamba-ssm's order)
            const double sc = rounded(k.state, s) * Cm.get({b, g, n});
            acc += sc;
            acc_scale += std::fabs(sc);
          }
          if (k.has_D && m != Mutant::no_D) {
            const double skip = D.get({h, p}) * xv;
            acc += skip;
            acc_scale += std::fabs(skip);
          }
          if (k.has_z && m != Mutant::no_gate) {
            const double zv = z.get({b, h, p});
            const double gate = zv / (1.0 + std::exp(-zv));
            acc *= gate;
            acc_scale *= std::fabs(gate);
          }
          ref.out[r] = acc;
          ref.out_scale[r] = acc_scale;
        }
      }
    }
    return ref;
  }

  // The outputs and new state rows (reference order) outside the tolerance of `ref`:
  // padding rows' outputs must be exactly 0; NaN is never within it. The first one is
  // described in `first` when given.
  size_t mismatches(const Ref& ref, const std::vector<double>& got_out,
                    const std::vector<double>& got_state, std::ostringstream* first) const {
    const int H = k.H(), P = k.P, N = k.N;
    const Tolerance to = out_tolerance(k.x), ts = state_tolerance(k.state);
    size_t wrong = 0;
    for (int b = 0; b < k_batch; ++b) {
      const bool padding = row_of(b) < 0;
      for (int h = 0; h < H; ++h) {
        for (int p = 0; p < P; ++p) {
          const size_t r = (size_t(b) * size_t(H) + size_t(h)) * size_t(P) + size_t(p);
          const double o = got_out[r], want = ref.out[r];
          const bool ok = padding ? o == 0.0
                                  : std::fabs(o - want) <= to.atol + to.rtol * std::fabs(want) +
                                                               k_arith * ref.out_scale[r];
          if (!ok && wrong++ == 0 && first) {
            *first << "out[" << b << "," << h << "," << p << "] = " << o << ", expected "
                   << (padding ? 0.0 : want) << (padding ? " (padding)" : "");
          }
          if (padding) {
            continue;
          }
          for (int n = 0; n < N; ++n) {
            const size_t i = r * size_t(N) + size_t(n);
            const double s = got_state[i], want_s = ref.state[i];
            if (!(std::fabs(s - want_s) <=
                  ts.atol + ts.rtol * std::fabs(want_s) + k_arith * ref.state_scale[i]) &&
                wrong++ == 0 && first) {
              *first << "state[" << row_of(b) << "," << h << "," << p << "," << n << "] = " << s
                     << ", expected " << want_s
                     << " (before the call: " << state.get({row_of(b), h, p, n}) << ")";
            }
          }
        }
      }
    }
    return wrong;
  }

  // out against the reference (padding rows exactly 0) and the state rows written; every
  // other element of out's and the state's allocations bit for bit as uploaded (out's
  // gaps NaN, unselected and padding rows unchanged). Then each mutant kernel's results,
  // rounded as the GPU would store them, must fail the same comparison.
  void check() {
    const int H = k.H(), P = k.P, N = k.N;
    const Ref ref = reference();
    HostTensor got_out(out.type, out.host.n);
    out.dev->download(got_out);
    HostTensor got_state(state.type, state.host.n);
    state.dev->download(got_state);

    std::vector<double> out_values(ref.out.size(), 0.0), state_values(ref.state.size(), 0.0);
    std::vector<char> out_written(out.host.n, 0), state_written(state.host.n, 0);
    for (int b = 0; b < k_batch; ++b) {
      const int e = row_of(b);
      for (int h = 0; h < H; ++h) {
        for (int p = 0; p < P; ++p) {
          const size_t r = (size_t(b) * size_t(H) + size_t(h)) * size_t(P) + size_t(p);
          out_values[r] = got_out.get(out.at({b, h, p}));
          out_written[out.at({b, h, p})] = 1;
          for (int n = 0; e >= 0 && n < N; ++n) {
            state_values[r * size_t(N) + size_t(n)] = got_state.get(state.at({e, h, p, n}));
            state_written[state.at({e, h, p, n})] = 1;
          }
        }
      }
    }
    std::ostringstream first;
    const size_t wrong = mismatches(ref, out_values, state_values, &first);
    CHECK_MESSAGE(wrong == 0, wrong << " of " << ref.out.size() << " outputs and their new states "
                                    << "wrong; first " << first.str());

    const auto changed = [](const HostTensor& got, const HostTensor& before,
                            const std::vector<char>& written) {
      const size_t esize = dtype_size(got.type);
      size_t count = 0;
      for (size_t i = 0; i < got.n; ++i) {
        count +=
            !written[i] && std::memcmp(&got.bytes[i * esize], &before.bytes[i * esize], esize) != 0;
      }
      return count;
    };
    const size_t out_stray = changed(got_out, out.host, out_written);
    CHECK_MESSAGE(out_stray == 0, out_stray << " elements of out's allocation outside the view "
                                            << "were written");
    const size_t state_stray = changed(got_state, state.host, state_written);
    CHECK_MESSAGE(state_stray == 0,
                  state_stray << " state elements outside the rows selected were written");

    for (Mutant m : mutants()) {
      Ref mr = reference(m);
      for (double& v : mr.out) {
        v = rounded(k.x, v);
      }
      for (double& v : mr.state) {
        v = rounded(k.state, v);
      }
      CHECK_MESSAGE(mismatches(ref, mr.out, mr.state, nullptr) > 0,
                    "the comparison would pass a kernel with " << name_of(m));
    }
  }

  // Nothing written: out's allocation still all NaN, the state as uploaded.
  void check_untouched() {
    HostTensor got_out(out.type, out.host.n);
    out.dev->download(got_out);
    size_t written = 0;
    for (size_t i = 0; i < got_out.n; ++i) {
      written += !std::isnan(got_out.get(i));
    }
    CHECK_MESSAGE(written == 0, written << " outputs written");
    HostTensor got_state(state.type, state.host.n);
    state.dev->download(got_state);
    CHECK_MESSAGE(got_state.bytes == state.host.bytes, "the state was written");
  }
};

// One call through the runtime pinned to k's variant, with A, B and C read element by
// element and as words (fresh inputs each): the selection it reports, then the call
// against the reference.
void run_and_check(PinnedRuntimes& rts, Case k, int i, std::mt19937_64& rng) {
  for (bool words : {false, true}) {
    k.words = words;
    Update u(k, i, rng);
    const std::string what = u.describe() + " " + k.variant();
    CAPTURE(what);
    Runtime& rt = rts(k.threads, k.lanes, k.words);
    const Selection sel = rt.select_selective_state_update(u.a);
    CHECK(sel.source == "pinned");
    CHECK(sel.variant == k.variant());
    CHECK(sel.problem == u.problem_key());
    rt.selective_state_update(u.a);
    synchronize_within("selective_state_update " + what);
    u.check();
  }
}

// The thrown Error (kind usage, naming `message`), with nothing launched.
void refused(Runtime& rt, const SelectiveStateUpdateArgs& a, const std::string& message) {
  check_refused([&] { rt.selective_state_update(a); }, message, "selective_state_update");
}

Case make_case(bool heads, int P, int N, int G, DType x, DType s, DType bc) {
  Case k;
  k.heads = heads;
  k.P = P;
  k.N = N;
  k.G = G;
  k.x = x;
  k.state = s;
  k.bc = bc;
  return k;
}

} // namespace

TEST_CASE("selective_state_update matches a float64 reference in Mamba-1's and Mamba-2's forms "
          "at every (threads, lanes) variant") {
  context();
  PinnedRuntimes rts;
  bool heads = false;
  SUBCASE("Mamba-1: x [B, P], state [B, P, N], A [P, N], B and C [B, N], D and dt_bias [P]") {
    heads = false;
  }
  SUBCASE("Mamba-2: x [B, H, P], state [B, H, P, N], A [H, P, N], B and C [B, G, N], D and "
          "dt_bias [H, P]") {
    heads = true;
  }
  // N in {16, 64, 128} by P in {64, 100} (Mamba-1) or G in {1, 2} (Mamba-2): 6 shapes of
  // 8 calls. In each, z, D and softplus take all 8 combinations (dt_bias alternating with
  // their parity and the shape), one call is all fp32 or all fp16, the others bf16 x
  // with a bf16 (4) or fp32 (3) state, B and C bf16 or fp32. The variants cycle through
  // every (threads, lanes) pair valid for N, continuing from one form to the other.
  std::mt19937_64 rng(heads ? 2002 : 1001);
  std::map<int, int> calls_per_n;
  int shape = 0;
  for (int N : {16, 64, 128}) {
    for (int second : {0, 1}) {
      for (int j = 0; j < 8; ++j) {
        Case k = make_case(heads, heads || second == 0 ? 64 : 100, N, heads ? 1 + second : 1,
                           DType::bf16, DType::bf16, DType::f32);
        k.has_z = (j & 1) != 0;
        k.has_D = (j & 2) != 0;
        k.softplus = (j & 4) != 0;
        k.dt_bias = ((j ^ (j >> 1) ^ (j >> 2) ^ shape) & 1) != 0;
        const int d = (j * 3 + shape) % 8;
        if (d == 7) {
          k.x = k.state = k.bc = shape % 2 ? DType::f16 : DType::f32;
        } else {
          k.state = d < 4 ? DType::bf16 : DType::f32;
          k.bc = (j + shape) % 3 == 0 ? DType::bf16 : DType::f32;
        }
        const std::vector<int> lanes = lanes_for(N);
        const size_t v = size_t(calls_per_n[N]++ + (heads ? 16 : 0)) % (3 * lanes.size());
        k.lanes = lanes[v % lanes.size()];
        k.threads = k_threads[v / lanes.size()];
        run_and_check(rts, k, j, rng);
      }
      ++shape;
    }
  }
}

TEST_CASE("selective_state_update reads Mamba-2's broadcast views, strided activations and "
          "strided states in place") {
  context();
  PinnedRuntimes rts;
  std::mt19937_64 rng(77);
  const auto f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  const auto with = [](Case k, bool broadcast, bool strided, StateLayout layout, bool has_z,
                       bool softplus = true) {
    k.broadcast = broadcast;
    k.strided = strided;
    k.layout = layout;
    k.has_z = has_z;
    k.softplus = softplus;
    return k;
  };
  const auto contiguous = StateLayout::contiguous, padded = StateLayout::padded,
             n_major = StateLayout::n_major;
  std::vector<Case> cases;
  SUBCASE("Mamba-2's views: A {1, 0, 0} over [H, P, N], dt {H, 1, 0} over [B, H, P], D and "
          "dt_bias {1, 0} over [H, P], only H (B * H) values allocated") {
    cases = {with(make_case(true, 64, 128, 1, bf16, f32, bf16), true, false, contiguous, false),
             with(make_case(true, 64, 64, 2, bf16, bf16, f32), true, true, contiguous, true),
             with(make_case(true, 64, 16, 2, f32, f32, f32), true, false, contiguous, false, false),
             with(make_case(true, 64, 128, 2, f16, f16, f16), true, true, padded, true)};
  }
  SUBCASE("a state sliced from a larger buffer (padded rows, heads and entries, 3 elements in) "
          "or strided by P (memory [.., N, P]); x, dt, z, out, B and C rows of larger buffers") {
    cases = {with(make_case(false, 100, 16, 1, bf16, bf16, f32), false, true, padded, true),
             with(make_case(false, 64, 64, 1, bf16, f32, bf16), false, false, n_major, true),
             with(make_case(true, 64, 128, 2, bf16, f32, bf16), false, true, padded, false),
             with(make_case(true, 64, 64, 1, bf16, bf16, bf16), true, false, n_major, true),
             with(make_case(true, 64, 16, 2, f32, f32, f32), false, true, n_major, false, false)};
  }
  int i = 0;
  for (Case k : cases) {
    const std::vector<int> lanes = lanes_for(k.N);
    for (int t : k_threads) {
      k.threads = t;
      k.lanes = lanes[size_t(3 * i + 1) % lanes.size()];
      run_and_check(rts, k, i++, rng);
    }
  }
}

TEST_CASE("selective_state_update writes exactly the state rows state_batch_indices select; "
          "padding rows (-1, E) give out 0") {
  context();
  PinnedRuntimes rts;
  bool heads = false;
  SUBCASE("Mamba-1: state [E, P, N]") {
    heads = false;
  }
  SUBCASE("Mamba-2: state [E, H, P, N], every other call with broadcast views") {
    heads = true;
  }
  // E = 7 rows, the 5 patterns of valid, padding and unselected rows twice; N, P or G,
  // dtypes, the state's layout, the flags and the variant varying.
  std::mt19937_64 rng(heads ? 32 : 31);
  static const DType dtypes[][3] = {{DType::bf16, DType::bf16, DType::f32},
                                    {DType::bf16, DType::f32, DType::bf16},
                                    {DType::f32, DType::f32, DType::f32},
                                    {DType::bf16, DType::bf16, DType::bf16},
                                    {DType::f16, DType::f16, DType::f16}};
  static const int sizes[] = {16, 64, 128};
  for (int i = 0; i < 10; ++i) {
    const DType* t = dtypes[i % 5];
    const int N = sizes[i % 3];
    Case k = make_case(heads, heads || i % 2 == 0 ? 64 : 100, N, heads ? 1 + i % 2 : 1, t[0], t[1],
                       t[2]);
    k.gather = true;
    k.layout = StateLayout((i / 2) % 3);
    k.broadcast = heads && i % 2 == 0;
    k.has_z = (i + 1) % 3 != 0;
    k.has_D = i % 3 != 2;
    k.dt_bias = i % 4 != 3;
    k.softplus = i % 5 != 2;
    const std::vector<int> lanes = lanes_for(N);
    k.lanes = lanes[size_t(i + (heads ? 2 : 0)) % lanes.size()];
    k.threads = k_threads[size_t(i) % std::size(k_threads)];
    run_and_check(rts, k, i, rng);
  }
}

TEST_CASE("selective_state_update refuses mistakes before launching: nothing is written and the "
          "context stays healthy") {
  context();
  Runtime rt(pinned(128, 4));
  std::mt19937_64 rng(5);
  Case k = make_case(true, 64, 64, 2, DType::bf16, DType::f32, DType::bf16);
  k.gather = true;
  k.broadcast = true;
  k.layout = StateLayout::padded;
  k.threads = 128;
  k.lanes = 4;
  Update u(k, 1, rng);
  SelectiveStateUpdateArgs bad = u.a;
  std::vector<unsigned char> host = u.state.host.bytes; // the state's bytes in host memory
  const size_t state_start = size_t(u.state.offset) * dtype_size(k.state);
  Operand b3, c3; // B and C of 3 groups
  std::string expected;
  SUBCASE("dt of another dtype than x") {
    bad.dt.dtype = AUTOTUNE_FP16;
    expected = "dt is fp16 but must have the dtype of x";
  }
  SUBCASE("groups that do not divide the heads (G = 3, H = 4)") {
    b3 = operand(k.bc, {k_batch, 3, k.N}, {}, -1);
    fill(b3, rng, -1, 1);
    c3 = operand(k.bc, {k_batch, 3, k.N}, {}, -1);
    fill(c3, rng, -1, 1);
    bad.B = b3.view(true);
    bad.C = c3.view(true);
    expected = "G=3 groups must divide the H=4 heads";
  }
  SUBCASE("x without heads beside a state with them") {
    bad.x = u.x.view(false);
    expected = "x implies H=1, but state gives H=4";
  }
  SUBCASE("state_batch_indices of dtype fp32") {
    bad.state_batch_indices.dtype = AUTOTUNE_FP32;
    expected = "state_batch_indices is fp32";
  }
  SUBCASE("host memory for the state (a CPU tensor passed by mistake)") {
    bad.state.data = host.data() + state_start;
    expected = "state is not GPU memory";
  }
  SUBCASE("a problem the pinned variant cannot take (N = 2 states for 4 lanes)") {
    bad.state.shape[3] = 2;
    bad.A.shape[2] = 2;
    bad.B.shape[2] = 2;
    bad.C.shape[2] = 2;
    expected = "more lanes than states in a row";
  }
  refused(rt, bad, expected);
  u.check_untouched();
  CHECK(host == u.state.host.bytes);

  // Selecting launches nothing; the correct call then runs and is right, and the
  // selection names the pinned variant.
  const Selection sel = rt.select_selective_state_update(u.a);
  CHECK(sel.source == "pinned");
  CHECK(sel.variant == variant_id(128, 4));
  CHECK(sel.problem == u.problem_key());
  synchronize_within("select_selective_state_update " + u.describe());
  u.check_untouched();
  rt.selective_state_update(u.a);
  synchronize_within("selective_state_update " + u.describe());
  u.check();

  // A host pointer is refused on the warm path too (the signature's plan exists now).
  SelectiveStateUpdateArgs warm = u.a;
  warm.state.data = host.data() + state_start;
  HostTensor after(k.state, u.state.host.n);
  u.state.dev->download(after);
  refused(rt, warm, "state is not GPU memory");
  HostTensor still(k.state, u.state.host.n);
  u.state.dev->download(still);
  CHECK(still.bytes == after.bytes);
  CHECK(host == u.state.host.bytes);
}
