// GPU tests for causal_conv1d_update (the decoding step of causal_conv1d against each
// sequence's rolling state, updated in place) through autotune::Runtime pinned to each
// block size: widths, state lengths, steps, dtypes and the four state forms (linear,
// circular, gathered rows, both) against a float64 CPU reference, the whole state after
// the call compared bit for bit; channel-last and unsqueezed views; mistakes refused
// before anything is written.
#include "gpu_support.hpp"

#include "runtime/base/error.hpp"
#include "runtime/dispatch/autotune.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace autotune;
using namespace autotune::test;
namespace fs = std::filesystem;

namespace {

constexpr int k_batch = 3;                      // B
constexpr int k_entries = 7;                    // E, the state's rows when indices select them
constexpr int k_threads[] = {32, 64, 128, 256}; // the op's space

enum class Mode { linear, circular, gather, circular_gather };
// How a [N, C, M] view lies in memory: row-major; channel-last ([N, M, C] memory,
// strides {M*C, 1, C}); [N, C] memory unsqueezed (M = 1, strides {C, 1, 1}).
enum class Layout { bcl, blc, bc };

bool is_circular(Mode m) {
  return m == Mode::circular || m == Mode::circular_gather;
}
bool is_gather(Mode m) {
  return m == Mode::gather || m == Mode::circular_gather;
}

struct Case {
  DType x = DType::bf16, w = DType::f32;
  int W = 4, S = 4, L = 1, C = 64;
  bool bias = true, silu = true;
  Mode mode = Mode::linear;
  Layout x_layout = Layout::bcl, out_layout = Layout::bcl, state_layout = Layout::bcl;
  int threads = 128;
};

struct Strides {
  long long n, c, m;
};

Strides strides_of(Layout l, long long C, long long M) {
  if (l == Layout::blc) {
    return {M * C, 1, C};
  }
  if (l == Layout::bc) {
    return {C, 1, 1};
  }
  return {C * M, M, 1};
}

ElementType element_type(DType t) {
  return t == DType::f32   ? ElementType::fp32
         : t == DType::f16 ? ElementType::fp16
                           : ElementType::bf16;
}

const void* ptr(CUdeviceptr p) {
  return reinterpret_cast<const void*>(p);
}

HostTensor random_tensor(DType t, size_t n, float lo, float hi, std::mt19937_64& rng) {
  HostTensor h(t, n);
  h.randomize(rng, lo, hi);
  return h;
}

HostTensor poisoned(DType t, size_t n) {
  HostTensor h(t, n);
  h.poison();
  return h;
}

// dst[i] = src[j], the bytes themselves.
void copy_element(HostTensor& dst, size_t i, const HostTensor& src, size_t j) {
  const size_t e = dtype_size(dst.type);
  std::memcpy(&dst.bytes[i * e], &src.bytes[j * e], e);
}

// Cache lengths spread over 0 .. 3S: one at most S, one past S, one past 2S (the ring's
// start wraps not at all, once, twice), varying with the case.
std::vector<int> seqlens_for(int i, int S) {
  return {i % (S + 1), S + 1 + i % S, 3 * S - i % (S + 1)};
}

// Rows of E = 7 for the B = 3 sequences: distinct valid rows mixed with padding (-1 and
// E, both outside [0, E)), and some rows that nobody selects.
std::vector<int> rows_for(int i) {
  static const int patterns[][k_batch] = {{5, -1, 2}, {7, 0, 6}, {3, 6, -1}, {-1, 7, 4}, {1, 4, 0}};
  const int* p = patterns[i % 5];
  return {p[0], p[1], p[2]};
}

RuntimeOptions pinned(int threads) {
  RuntimeOptions ro;
  ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
  ro.policy = Policy::pin;
  ro.pinned = "threads=" + std::to_string(threads);
  return ro;
}

// A runtime pinned to each block size.
struct PinnedRuntimes {
  std::vector<std::unique_ptr<Runtime>> runtimes;
  PinnedRuntimes() {
    for (int t : k_threads) {
      runtimes.push_back(std::make_unique<Runtime>(pinned(t)));
    }
  }
  Runtime& operator[](int threads) {
    for (size_t i = 0; i < std::size(k_threads); ++i) {
      if (k_threads[i] == threads) {
        return *runtimes[i];
      }
    }
    FAIL("no runtime pinned to threads=" << threads);
    return *runtimes[0];
  }
};

// One call: its tensors on the host and the GPU (random inputs, out poisoned with NaN),
// its arguments, and the checks of what the GPU holds after it.
struct Update {
  Case k;
  int E;
  Strides xs, os, ss; // x's, out's and the state's element strides
  HostTensor x, w, bias, state, out;
  std::vector<int> lens, rows;
  DeviceTensor dx, dw, dbias, dstate, dout;
  cuda::DeviceBuffer dlens, drows;
  CausalConv1dUpdateArgs a{};

  Update(const Case& c, int i, std::mt19937_64& rng)
      : k(c), E(is_gather(c.mode) ? k_entries : k_batch), xs(strides_of(c.x_layout, c.C, c.L)),
        os(strides_of(c.out_layout, c.C, c.L)), ss(strides_of(c.state_layout, c.C, c.S)),
        x(random_tensor(c.x, size_t(k_batch) * c.C * c.L, -1, 1, rng)),
        w(random_tensor(c.w, size_t(c.C) * c.W, -0.5f, 0.5f, rng)),
        bias(random_tensor(c.w, size_t(c.C), -0.5f, 0.5f, rng)),
        state(random_tensor(c.x, size_t(E) * c.C * c.S, -1, 1, rng)),
        out(poisoned(c.x, size_t(k_batch) * c.C * c.L)),
        lens(is_circular(c.mode) ? seqlens_for(i, c.S) : std::vector<int>{}),
        rows(is_gather(c.mode) ? rows_for(i) : std::vector<int>{}), dx(x), dw(w), dbias(bias),
        dstate(state), dout(out), dlens(int_buffer(lens)), drows(int_buffer(rows)) {
    const ElementType et = element_type(c.x);
    a.x = tensor(ptr(dx.get()), et, {k_batch, c.C, c.L}, {xs.n, xs.c, xs.m});
    a.conv_state = tensor(ptr(dstate.get()), et, {E, c.C, c.S}, {ss.n, ss.c, ss.m});
    a.weight = tensor(ptr(dw.get()), element_type(c.w), {c.C, c.W});
    if (c.bias) {
      a.bias = tensor(ptr(dbias.get()), element_type(c.w), {c.C});
    }
    a.out = tensor(ptr(dout.get()), et, {k_batch, c.C, c.L}, {os.n, os.c, os.m});
    if (is_circular(c.mode)) {
      a.cache_seqlens = tensor(ptr(dlens.get()), ElementType::int32, {k_batch});
    }
    if (is_gather(c.mode)) {
      a.conv_state_indices = tensor(ptr(drows.get()), ElementType::int32, {k_batch});
    }
    a.silu = c.silu ? 1 : 0;
  }

  std::string describe() const {
    static const char* modes[] = {"linear", "circular", "gather", "circular+gather"};
    static const char* layouts[] = {"bcl", "blc", "bc"};
    std::ostringstream s;
    s << "W=" << k.W << " S=" << k.S << " L=" << k.L << " C=" << k.C << " x=" << to_string(k.x)
      << " w=" << to_string(k.w) << " bias=" << k.bias << " silu=" << k.silu << " "
      << modes[int(k.mode)] << " x:" << layouts[int(k.x_layout)]
      << " out:" << layouts[int(k.out_layout)] << " state:" << layouts[int(k.state_layout)]
      << " threads=" << k.threads;
    for (size_t b = 0; b < lens.size(); ++b) {
      s << (b == 0 ? " cache_seqlens=" : ",") << lens[b];
    }
    for (size_t b = 0; b < rows.size(); ++b) {
      s << (b == 0 ? " indices=" : ",") << rows[b];
    }
    return s.str();
  }

  // The canonical problem the runtime should read off the call.
  std::string problem_key() const {
    return "B=" + std::to_string(k_batch) + ",C=" + std::to_string(k.C) +
           ",L=" + std::to_string(k.L) + ",W=" + std::to_string(k.W) + ",S=" + std::to_string(k.S) +
           ",dtype=" + to_string(k.x) + ",wdtype=" + to_string(k.w) +
           ",bias=" + (k.bias ? "1" : "0") + ",silu=" + (k.silu ? "1" : "0") +
           ",circular=" + (is_circular(k.mode) ? "1" : "0") +
           ",gather=" + (is_gather(k.mode) ? "1" : "0");
  }

  size_t x_at(int b, int c, int t) const { return size_t(b * xs.n + c * xs.c + t * xs.m); }
  size_t out_at(int b, int c, int t) const { return size_t(b * os.n + c * os.c + t * os.m); }
  size_t state_at(int e, int c, int j) const { return size_t(e * ss.n + c * ss.c + j * ss.m); }
  // Sequence b's state row, or -1 for padding.
  int row_of(int b) const {
    const int r = is_gather(k.mode) ? rows[size_t(b)] : b;
    return r >= 0 && r < E ? r : -1;
  }

  // The float64 reference from the host copies of the inputs: out[b, c, t] at
  // (b * C + c) * L + t (padding 0), and the state's memory after the call (the new rows
  // built by copying elements; rows no sequence selects left as they were).
  void reference(std::vector<double>& ref, HostTensor& next) const {
    const int C = k.C, L = k.L, W = k.W, S = k.S;
    ref.assign(size_t(k_batch) * C * L, 0.0);
    next = state;
    for (int b = 0; b < k_batch; ++b) {
      const int e = row_of(b);
      if (e < 0) {
        continue; // padding: out 0, no state row written
      }
      const int head = is_circular(k.mode) ? (lens[size_t(b)] % S + S) % S : 0;
      for (int c = 0; c < C; ++c) {
        // in(i): x for i >= 0; the state's inputs before x for -W < i < 0 (linear: its end;
        // circular: the positions before head, mod S).
        auto in = [&](int i) -> double {
          if (i >= 0) {
            return x.get(x_at(b, c, i));
          }
          return state.get(state_at(e, c, is_circular(k.mode) ? (head + i + S) % S : S + i));
        };
        for (int t = 0; t < L; ++t) {
          double acc = k.bias ? double(bias.get(size_t(c))) : 0.0;
          for (int j = 0; j < W; ++j) {
            acc += double(w.get(size_t(c) * W + size_t(j))) * in(t - (W - 1) + j);
          }
          if (k.silu) {
            acc = acc / (1.0 + std::exp(-acc));
          }
          ref[(size_t(b) * C + size_t(c)) * L + size_t(t)] = acc;
        }
        if (is_circular(k.mode)) {
          // x's last min(L, S) inputs from head on; the rest of the ring kept.
          for (int t = std::max(0, L - S); t < L; ++t) {
            copy_element(next, state_at(e, c, (head + t) % S), x, x_at(b, c, t));
          }
        } else {
          // Position j + L of "old state, then x": shifted left by L.
          for (int j = 0; j < S; ++j) {
            const int q = j + L;
            if (q < S) {
              copy_element(next, state_at(e, c, j), state, state_at(e, c, q));
            } else {
              copy_element(next, state_at(e, c, j), x, x_at(b, c, q - S));
            }
          }
        }
      }
    }
  }

  // out against the reference (padding exactly 0) and the whole state bit for bit.
  void check() {
    std::vector<double> ref;
    HostTensor next(k.x, state.n);
    reference(ref, next);
    dout.download(out);
    HostTensor got(k.x, state.n);
    dstate.download(got);

    const double rtol = k.x == DType::f32 ? 1e-5 : k.x == DType::f16 ? 2e-3 : 1e-2;
    const double atol = k.x == DType::f32 ? 1e-6 : k.x == DType::f16 ? 1e-4 : 1e-3;
    size_t wrong = 0;
    std::ostringstream first;
    for (int b = 0; b < k_batch; ++b) {
      for (int c = 0; c < k.C; ++c) {
        for (int t = 0; t < k.L; ++t) {
          const double o = out.get(out_at(b, c, t));
          const double r = ref[(size_t(b) * k.C + size_t(c)) * k.L + size_t(t)];
          const bool ok = row_of(b) < 0 ? o == 0.0 : std::fabs(o - r) <= atol + rtol * std::fabs(r);
          if (!ok && wrong++ == 0) {
            first << "out[" << b << "," << c << "," << t << "] = " << o << ", expected " << r
                  << (row_of(b) < 0 ? " (padding)" : "");
          }
        }
      }
    }
    CHECK_MESSAGE(wrong == 0,
                  wrong << " of " << ref.size() << " outputs wrong; first " << first.str());

    const size_t esize = dtype_size(k.x);
    size_t differ = 0;
    std::ostringstream where;
    for (int e = 0; e < E; ++e) {
      for (int c = 0; c < k.C; ++c) {
        for (int j = 0; j < k.S; ++j) {
          const size_t i = state_at(e, c, j);
          if (std::memcmp(&got.bytes[i * esize], &next.bytes[i * esize], esize) != 0 &&
              differ++ == 0) {
            where << "conv_state[" << e << "," << c << "," << j << "] = " << got.get(i)
                  << ", expected " << next.get(i) << " (before the call: " << state.get(i) << ")";
          }
        }
      }
    }
    CHECK_MESSAGE(differ == 0,
                  differ << " of " << state.n << " state elements differ; first " << where.str());
  }

  // Nothing written: out still all NaN, the state as uploaded.
  void check_untouched() {
    dout.download(out);
    size_t written = 0;
    for (size_t i = 0; i < out.n; ++i) {
      written += !std::isnan(out.get(i));
    }
    CHECK_MESSAGE(written == 0, written << " outputs written");
    HostTensor got(k.x, state.n);
    dstate.download(got);
    CHECK_MESSAGE(got.bytes == state.bytes, "the state was written");
  }
};

// One call through `rt` (pinned to k.threads): the selection it reports, then the call
// against the reference.
void run_and_check(Runtime& rt, const Case& k, int i, std::mt19937_64& rng) {
  Update u(k, i, rng);
  const std::string what = u.describe();
  CAPTURE(what);
  const Selection sel = rt.select_causal_conv1d_update(u.a);
  CHECK(sel.source == "pinned");
  CHECK(sel.variant == "threads=" + std::to_string(k.threads));
  CHECK(sel.problem == u.problem_key());
  rt.causal_conv1d_update(u.a);
  synchronize_within("causal_conv1d_update " + what);
  u.check();
}

// The thrown Error (kind usage, naming `message`), with nothing launched.
void refused(Runtime& rt, const CausalConv1dUpdateArgs& a, const std::string& message) {
  check_refused([&] { rt.causal_conv1d_update(a); }, message, "causal_conv1d_update");
}

} // namespace

TEST_CASE("causal_conv1d_update matches a float64 reference at every block size and writes "
          "exactly the new state rows") {
  context();
  PinnedRuntimes rts;
  Mode mode = Mode::linear;
  SUBCASE("a linear state: the inputs before x are its end, and it shifts left by L") {
    mode = Mode::linear;
  }
  SUBCASE("a circular state positioned by cache_seqlens, up to 3S") {
    mode = Mode::circular;
  }
  SUBCASE("rows gathered by conv_state_indices, with padding rows -1 and E") {
    mode = Mode::gather;
  }
  SUBCASE("gathered rows of a circular state") {
    mode = Mode::circular_gather;
  }
  // Every width, state length (W-1, W, 13) and step (1, 3 and 5: longer than some
  // states); dtypes, channels (100: a partial block), bias and SiLU drawn per case, each
  // block size in turn: 27 calls per form.
  std::mt19937_64 rng(1000 + uint64_t(mode));
  std::mt19937 pick(17 + unsigned(mode));
  int i = 0;
  for (int W : {2, 3, 4}) {
    for (int S : {W - 1, W, 13}) {
      for (int L : {1, 3, 5}) {
        Case k;
        k.W = W;
        k.S = S;
        k.L = L;
        k.mode = mode;
        k.x = i % 9 == 4 ? DType::f16 : i % 2 ? DType::bf16 : DType::f32;
        k.w = k.x == DType::f16 ? DType::f16 : DType::f32;
        k.C = pick() % 2 ? 100 : 64;
        k.bias = pick() % 2;
        k.silu = pick() % 2;
        k.threads = k_threads[size_t(i) % std::size(k_threads)];
        run_and_check(rts[k.threads], k, i + 27 * int(mode), rng);
        ++i;
      }
    }
  }
}

TEST_CASE("causal_conv1d_update reads and writes channel-last views and an unsqueezed [B, C] x "
          "in place") {
  context();
  PinnedRuntimes rts;
  std::mt19937_64 rng(77);
  auto make = [](DType x, DType w, int W, int S, int L, int C, Mode mode, Layout xl, Layout ol,
                 Layout sl) {
    Case k;
    k.x = x;
    k.w = w;
    k.W = W;
    k.S = S;
    k.L = L;
    k.C = C;
    k.mode = mode;
    k.x_layout = xl;
    k.out_layout = ol;
    k.state_layout = sl;
    k.bias = W != 3;
    k.silu = C != 64 || L != 1;
    return k;
  };
  const auto f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  const auto bcl = Layout::bcl, blc = Layout::blc, bc = Layout::bc;
  std::vector<Case> cases;
  SUBCASE("x, out and the state channel-last (causal-conv1d's tests)") {
    cases = {make(bf16, f32, 4, 4, 5, 100, Mode::linear, blc, blc, blc),
             make(f32, f32, 3, 13, 3, 64, Mode::circular_gather, blc, blc, blc),
             make(bf16, f32, 4, 3, 5, 100, Mode::circular, blc, bcl, bcl),
             make(f16, f16, 2, 2, 3, 64, Mode::gather, bcl, blc, blc)};
  }
  SUBCASE("x [B, C] unsqueezed to [B, C, 1] (one token of a Mamba block)") {
    cases = {make(bf16, f32, 4, 4, 1, 100, Mode::linear, bc, bc, bcl),
             make(bf16, f32, 4, 3, 1, 64, Mode::circular_gather, bc, bcl, blc),
             make(f32, f32, 2, 13, 1, 100, Mode::gather, bc, bc, blc)};
  }
  int i = 0;
  for (Case k : cases) {
    for (int t : k_threads) {
      k.threads = t;
      run_and_check(rts[t], k, i++, rng);
    }
  }
}

TEST_CASE("causal_conv1d_update refuses mistakes before launching: nothing is written and the "
          "context stays healthy") {
  context();
  Runtime rt(pinned(64));
  std::mt19937_64 rng(5);
  Case k;
  k.x = DType::bf16;
  k.w = DType::f32;
  k.W = 4;
  k.S = 4;
  k.L = 3;
  k.C = 100;
  k.mode = Mode::circular_gather;
  k.threads = 64;
  Update u(k, 1, rng);
  CausalConv1dUpdateArgs bad = u.a;
  std::vector<uint16_t> host(u.state.n); // the state's bf16 bits in host memory
  std::memcpy(host.data(), u.state.bytes.data(), u.state.bytes.size());
  std::string expected;
  SUBCASE("a state of another dtype than x") {
    bad.conv_state.dtype = AUTOTUNE_FP16;
    expected = "conv_state is fp16 but must have the dtype of x";
  }
  SUBCASE("a state shorter than the filter's window (S = W - 2)") {
    bad.conv_state.shape[2] = k.W - 2;
    expected = "state length S=2 is not supported";
  }
  SUBCASE("indices that are not int32") {
    bad.conv_state_indices.dtype = AUTOTUNE_FP32;
    expected = "conv_state_indices is fp32";
  }
  SUBCASE("host memory for the state (a CPU tensor passed by mistake)") {
    bad.conv_state.data = host.data();
    expected = "conv_state is not GPU memory";
  }
  refused(rt, bad, expected);
  u.check_untouched();
  CHECK(std::memcmp(host.data(), u.state.bytes.data(), u.state.bytes.size()) == 0);

  // The correct call still runs and is right; the selection names the pinned variant.
  const Selection sel = rt.select_causal_conv1d_update(u.a);
  CHECK(sel.source == "pinned");
  CHECK(sel.variant == "threads=64");
  CHECK(sel.problem == u.problem_key());
  rt.causal_conv1d_update(u.a);
  synchronize_within("causal_conv1d_update " + u.describe());
  u.check();

  // A host pointer is refused on the warm path too (the signature's plan exists now).
  CausalConv1dUpdateArgs warm = u.a;
  warm.conv_state.data = host.data();
  HostTensor after(k.x, u.state.n);
  u.dstate.download(after);
  refused(rt, warm, "conv_state is not GPU memory");
  HostTensor still(k.x, u.state.n);
  u.dstate.download(still);
  CHECK(still.bytes == after.bytes);
}
