#include "selective_scan.hpp"

#include "runtime/base/strings.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>

namespace autotune {
namespace {

// The problem field var_bc: which of B and C vary with (batch, time). mamba-ssm takes
// is_variable_B and is_variable_C independently; "0" and "1" (both fixed, both
// variable) keep the spelling of the stored problems from before the mixes.
constexpr const char* k_var_bc_names[] = {"0", "1", "B", "C"};
enum class VarBC { none = 0, both = 1, b_only = 2, c_only = 3 };

struct Dims {
  long long B, D, L, N, G;
  DType x;
  bool var_b, var_c, bias, softplus, has_d, has_z, last_state;
  bool any_var() const { return var_b || var_c; }
  int var_rows() const { return (var_b ? 1 : 0) + (var_c ? 1 : 0); } // variable tensors
};

VarBC parse_var_bc(const std::string& v) {
  for (int i = 0; i < 4; ++i) {
    if (v == k_var_bc_names[i]) {
      return VarBC(i);
    }
  }
  throw Error(ErrorKind::usage, "selective_scan: var_bc=" + v + " must be 0, 1, B or C");
}

Dims dims(const Problem& p) {
  const VarBC v = parse_var_bc(p.get("var_bc"));
  return Dims{p.get_int("B"),
              p.get_int("D"),
              p.get_int("L"),
              p.get_int("N"),
              p.get_int("G"),
              parse_dtype(p.get("dtype"), "dtype"),
              v == VarBC::both || v == VarBC::b_only,
              v == VarBC::both || v == VarBC::c_only,
              p.get_int("delta_bias") != 0,
              p.get_int("softplus") != 0,
              p.get_int("has_d") != 0,
              p.get_int("has_z") != 0,
              p.get_int("last_state") != 0};
}

// How the recurrence is parallelized (templates/selective_scan/kernel.cuh AT_SCAN):
// across time with a warp-shuffle scan (0) or a shared-memory block scan (1), or
// across states with each lane walking time in order (2, state_parallel.cuh).
enum class ScanForm { shfl = 0, smem = 1, state = 2 };

struct Params {
  int threads, items, cpb, nsplit, vec, poly, minblocks;
  int tsplit = 1;             // time slices per chunk (state form); optional, 1 when absent
  int cpl = 1;                // channels per lane (state form); optional, 1 when absent
  bool bc_pair = false;       // 16-bit variable B/C staged as packed pairs (state form)
  bool ystore_during = false; // partial y stored per 4 steps during the scan (state form)
  int yred = 0;               // state form: shuffle levels summing the lanes' partial y (0..2)
  // State form, L no multiple of vec (state_parallel.cuh AT_RAGGED): the element layout
  // with the next chunk in registers (regs) or copied by cp.async (async), or the vector
  // layout on each block's own timeline (shift).
  enum class Ragged { regs = 1, async = 2, shift = 3 } ragged = Ragged::regs;
  ScanForm form;
  bool smem_scan;
  bool state() const { return form == ScanForm::state; }
  int tpc() const { return threads / (cpb * nsplit); } // time lanes per (channel, state group)
  long long chunk() const { return (long long)tpc() * items; }
};

Params params(const Config& c) {
  Params p{};
  bool have[8] = {};
  const char* names[8] = {"threads", "items", "cpb", "nsplit", "vec", "poly", "minblocks", "scan"};
  int* ints[7] = {&p.threads, &p.items, &p.cpb, &p.nsplit, &p.vec, &p.poly, &p.minblocks};
  for (const auto& [k, v] : c) {
    bool known = false;
    for (int i = 0; i < 7; ++i) {
      if (k == names[i]) {
        *ints[i] = int(parse_int(v, std::string("selective_scan parameter ") + names[i]));
        have[i] = known = true;
      }
    }
    if (k == "bc") {
      p.bc_pair = parse_choice("selective_scan", k, v, "f32", "pair");
      known = true;
    }
    if (k == "ystore") {
      p.ystore_during = parse_choice("selective_scan", k, v, "after", "during");
      known = true;
    }
    if (k == "ragged") {
      // regs, async, shift: Ragged 1, 2, 3.
      p.ragged =
          Params::Ragged(1 + parse_one_of("selective_scan", k, v, {"regs", "async", "shift"}));
      known = true;
    }
    if (k == "yred") {
      p.yred = int(parse_int(v, "selective_scan parameter yred"));
      known = true;
    }
    if (k == "tsplit") {
      p.tsplit = int(parse_int(v, "selective_scan parameter tsplit"));
      known = true;
    }
    if (k == "cpl") {
      p.cpl = int(parse_int(v, "selective_scan parameter cpl"));
      known = true;
    }
    if (k == "scan") {
      const ScanForm forms[] = {ScanForm::shfl, ScanForm::smem, ScanForm::state};
      p.form = forms[parse_one_of("selective_scan", k, v, {"shfl", "smem", "state"})];
      p.smem_scan = p.form == ScanForm::smem;
      have[7] = known = true;
    }
    if (!known) {
      throw Error(ErrorKind::config, "selective_scan: unknown parameter '" + k + "'");
    }
  }
  for (bool h : have) {
    if (!h) {
      throw Error(ErrorKind::config, "selective_scan: configuration '" + format_fields(c) +
                                         "' lacks one of threads, items, cpb, nsplit, scan, vec, "
                                         "poly, minblocks");
    }
  }
  return p;
}

// Shared memory a block may use without the driver opt-in (the runtime and the
// tuner opt in only when the dynamic part alone exceeds it).
constexpr long long k_default_smem_limit = 48 * 1024;
// Dynamic shared memory the staged B/C may take: 96 KiB fits every sm_80+ GPU's
// per-block opt-in (99 KiB on sm_86/89/120) and leaves room for two blocks per SM
// on sm_80 / sm_90.
constexpr long long k_staging_budget = 96 * 1024;
constexpr long long k_max_n = 64; // templates/selective_scan/reference.cuh AT_REF_MAX_N

// Largest shared memory per block with the opt-in, by architecture.
long long opt_in_limit(const std::string& arch) {
  if (arch.rfind("sm_80", 0) == 0 || arch.rfind("sm_87", 0) == 0) {
    return 163 * 1024;
  }
  if (arch.rfind("sm_90", 0) == 0 || arch.rfind("sm_100", 0) == 0) {
    return 227 * 1024;
  }
  return 99 * 1024;
}

// Shared-memory words of one staged row (thread-major, 4 words of padding per
// thread when items >= 8): must match k_slots in kernel.cuh.
long long row_slots(const Params& p) {
  return (long long)p.tpc() * (p.items + (p.items >= 8 ? 4 : 0));
}

// Static shared memory: the scan exchange (the state-parallel form has none).
long long static_smem(const Params& p) {
  if (p.state()) {
    return 0;
  }
  long long groups = (long long)p.cpb * p.nsplit;
  return p.smem_scan ? 2 * groups * p.tpc() * 8 : 2 * groups * (p.tpc() / 32) * 8;
}

// Dynamic shared memory besides the staged B/C: the partial y of state groups 1...
long long partial_y_smem(const Params& p) {
  return p.nsplit > 1 ? (long long)p.cpb * (p.nsplit - 1) * row_slots(p) * 4 : 0;
}

// Rows from one partial-y block to the next in the state form (AT_PART_STRIDE), rows
// ITEMS + 4 words long. Lane l of a channel in channel slot c stores 4 steps to row
// (l % (nsplit >> yred)) * stride + c * cpl: a float4 per lane without shuffle levels
// (a pass serves 8 lanes), a float2 at word 2 * (l & nsplit/2 ? 1 : 0) of the 4 with
// one level (16 lanes), one word with two (32 lanes). The smallest stride above CPB
// that gives the lanes of one pass distinct banks stores them in one wavefront (CPB + 1
// did not for nsplit 2 and 4: lanes (1, c) and (0, c + 1) collided).
long long part_stride(const Params& p) {
  const int words = 4 >> p.yred; // stored per lane
  const int pass = 8 << p.yred;  // lanes per wavefront
  const long long rows = p.nsplit >> p.yred;
  for (long long stride = p.cpb + 1; stride <= p.cpb + 8; ++stride) {
    bool used[32] = {};
    bool distinct = true;
    for (int lane = 0; lane < pass; ++lane) {
      const int l = lane % p.nsplit;
      const long long row = (l % rows) * stride + (lane / p.nsplit) * p.cpl;
      int word = 0;
      if (p.yred >= 1) {
        word += (l & (p.nsplit / 2)) ? 2 : 0;
      }
      if (p.yred >= 2) {
        word += (l & (p.nsplit / 4)) ? 1 : 0;
      }
      for (int w = 0; w < words; ++w) {
        const int bank = int((row * (p.items + 4) + word + w) % 32);
        distinct = distinct && !used[bank];
        used[bank] = true;
      }
    }
    if (distinct) {
      return stride;
    }
  }
  return p.cpb + 1; // none (several channels per lane): as before
}

// Whether the state form is built with AT_RAGGED (state_parallel.cuh): L leaves a
// partial vector at the end of each row, so the rows of one tensor start at
// different offsets from an aligned address and the kernel moves single elements,
// consecutive lanes on consecutive steps. Aligned shapes compile without it.
bool ragged(const Params& p, const Dims& d) {
  return p.state() && d.L % p.vec != 0;
}

// Dynamic shared memory of the state-parallel form, as laid out in
// templates/selective_scan/state_parallel.cuh: rows of ITEMS + 4 words (dt and dt*u
// per channel, per state a row of B if variable and one of C if variable -- one row
// of packed pairs when both are variable and 16-bit --, (NSPLIT >> YRED) x
// PART_STRIDE rows of partial y), then the time slices' exchange. u and z stay in
// registers. AT_RAGGED adds delta_bias and D per channel; with ragged=async also the
// raw tile the chunk is copied into (Prefetch in state_parallel.cuh): a table of the raw rows'
// offsets (4 ints per channel, one per variable B/C row) and per raw row (u, delta, z, then the
// variable B and C rows) ITEMS * element size / 16 + 1 blocks of 16 bytes; the table and the tile
// each at a 16-byte boundary. ragged=shift lays out the same (its calls whose rows do not
// share their offsets run as ragged=async).
long long state_form_smem(const Params& p, long long n, const Dims& d) {
  // bc=pair stages 16-bit variable B/C as packed (B, C) pairs: one row per state.
  const long long bc_rows = p.bc_pair && d.var_b && d.var_c ? n : d.var_rows() * n;
  const long long part_rows = (long long)(p.nsplit >> p.yred) * part_stride(p);
  const long long rows = 2LL * p.cpb + bc_rows + part_rows;
  const long long exchange = 2LL * p.tsplit * p.cpb * n * 4;   // slice end states and decays
  long long ragged_extra = ragged(p, d) ? 2LL * p.cpb * 4 : 0; // delta_bias and D
  if (ragged(p, d) && p.ragged != Params::Ragged::regs) {
    const long long raw_rows = p.cpb * (d.has_z ? 3LL : 2LL) + d.var_rows() * n;
    const long long row_bytes = 16 * (p.items * (long long)dtype_size(d.x) / 16 + 1);
    const long long table = 4LL * p.cpb + d.var_rows() * n; // offsets (ints)
    ragged_extra += 15 + table * 4 + 15 + raw_rows * row_bytes;
  }
  return rows * (p.items + 4) * 4 + exchange + ragged_extra;
}

std::string flag_of(bool b) {
  return b ? "1" : "0";
}

} // namespace

std::vector<std::string> SelectiveScanOp::default_shapes() const {
  // bench/shapes.toml [selective_scan]: Mamba-1 usage, bf16, variable B/C with one
  // group, D skip, z gate, delta_bias and softplus (the problem defaults).
  return {"B=8,D=2048,L=2048,N=16", "B=4,D=5120,L=2048,N=16", "B=1,D=4096,L=16384,N=16",
          "B=16,D=1536,L=1024,N=16"};
}

Problem SelectiveScanOp::make_problem(const Fields& shape) const {
  const ShapeReader r(shape, "selective_scan",
                      {"B", "D", "L", "N", "G", "dtype", "var_bc", "delta_bias", "softplus",
                       "has_d", "has_z", "last_state"});
  long long B = r.ranged("B", nullptr, 1 << 20);
  long long D = r.ranged("D", nullptr, 1 << 20);
  long long L = r.ranged("L", nullptr, (1ll << 31) - 1);
  long long N = r.ranged("N", nullptr, k_max_n);
  long long G = r.ranged("G", "1", D);
  if (D % G != 0) {
    r.fail("G=" + std::to_string(G) + " must divide D=" + std::to_string(D));
  }
  if (ShapeReader::product_reaches({B, D, L}, 1ll << 40) ||
      ShapeReader::product_reaches({B, G, N, L}, 1ll << 40)) {
    r.fail("B*D*L is too large");
  }
  DType x = parse_dtype(r.get("dtype", "bf16"), "selective_scan shape field dtype");
  // var_bc: 0 both fixed, 1 both variable, B or C only that one variable.
  std::string var_bc = r.get("var_bc", "1");
  if (var_bc == "true" || var_bc == "false") {
    var_bc = var_bc == "true" ? "1" : "0";
  } else if (var_bc == "b" || var_bc == "c") {
    var_bc = var_bc == "b" ? "B" : "C";
  }
  if (var_bc != "0" && var_bc != "1" && var_bc != "B" && var_bc != "C") {
    r.fail("var_bc=" + var_bc +
           " must be 0 (B and C fixed), 1 (both variable), B or C (only that one variable)");
  }
  if (var_bc == "0" && G != 1) {
    r.fail("G=" + std::to_string(G) +
           " needs a variable B or C (var_bc=1, B or C); fixed B/C are [D, N]");
  }
  Problem p;
  p.op = name();
  p.fields = {{"B", std::to_string(B)},
              {"D", std::to_string(D)},
              {"L", std::to_string(L)},
              {"N", std::to_string(N)},
              {"G", std::to_string(G)},
              {"dtype", to_string(x)},
              {"var_bc", var_bc},
              {"delta_bias", r.flag("delta_bias", "1")},
              {"softplus", r.flag("softplus", "1")},
              {"has_d", r.flag("has_d", "1")},
              {"has_z", r.flag("has_z", "1")},
              {"last_state", r.flag("last_state", "0")}};
  return p;
}

int SelectiveScanOp::state_slice(const Config& config, const Problem& problem) const {
  Params p = params(config);
  Dims d = dims(problem);
  if (d.N % p.nsplit != 0) {
    return 0;
  }
  if (!d.any_var() || p.state()) {
    return int(d.N); // nothing is staged
  }
  long long budget = k_staging_budget - partial_y_smem(p);
  for (long long s = d.N; s >= p.nsplit; --s) {
    if (d.N % s == 0 && s % p.nsplit == 0 && d.var_rows() * s * row_slots(p) * 4 <= budget) {
      return int(s);
    }
  }
  return 0;
}

namespace {
// What every valid variant must also satisfy: its shared memory fits the arch's
// per-block opt-in limit, and its grid (B * ceil(D / cpb) blocks) fits the launch.
Result<bool> fits_block(const Params& p, const Dims& d, long long smem, const std::string& arch) {
  if (smem > opt_in_limit(arch)) {
    return fail("shared memory of " + std::to_string(smem) + " bytes exceeds what " + arch +
                " allows per block");
  }
  if (d.B * ((d.D + p.cpb - 1) / p.cpb) > 0x7fffffffll) {
    return fail("grid too large");
  }
  return true;
}

Result<bool> check_state_form(const Params& p, const Dims& d, const std::string& arch) {
  if (p.nsplit < 1 || 32 % p.nsplit != 0 || d.N % p.nsplit != 0) {
    return fail("scan=state: nsplit (lanes per channel) must divide 32 and N");
  }
  if (p.cpl != 1 && p.cpl != 2 && p.cpl != 4) {
    return fail("scan=state: cpl (channels per lane) must be 1, 2 or 4");
  }
  if (p.cpl > 1 && p.tsplit != 1) {
    return fail("scan=state: several channels per lane (cpl > 1) need tsplit=1");
  }
  if (d.N / p.nsplit * p.cpl > 16) {
    return fail("scan=state: at most 16 (channel, state) pairs per lane (cpl * N / nsplit)");
  }
  if (p.ystore_during && p.tsplit != 1) {
    return fail("scan=state: ystore=during needs tsplit=1 (time slices correct their partials "
                "after the slice exchange)");
  }
  if (p.yred < 0 || p.yred > 2 || (1 << p.yred) > p.nsplit) {
    return fail("scan=state: yred (shuffle levels over the partial y) must be 0..2 with "
                "2^yred <= nsplit");
  }
  if (p.bc_pair && (!d.var_b || !d.var_c || dtype_size(d.x) != 2)) {
    return fail("scan=state: bc=pair packs 16-bit variable B and C (both variable) only");
  }
  if (p.tsplit < 1 || (p.threads / 32) % p.tsplit != 0) {
    return fail("scan=state: tsplit must divide the warps");
  }
  if (p.cpb != (p.threads / 32 / p.tsplit) * (32 / p.nsplit) * p.cpl) {
    return fail("scan=state: cpb must equal warps / tsplit * 32 / nsplit * cpl (" +
                std::to_string((p.threads / 32 / p.tsplit) * (32 / p.nsplit) * p.cpl) + ")");
  }
  if ((p.vec != 4 && p.vec != 8) || p.items % p.vec != 0 || p.items % 8 != 0 || p.items > 64) {
    return fail("scan=state: vec must be 4 or 8 and items a multiple of 8 and of vec, at most 64");
  }
  if (ragged(p, d) && p.items % p.threads != 0 && p.threads % p.items != 0) {
    return fail("scan=state: with L no multiple of vec (the element layout) items and threads "
                "must divide one another");
  }
  if (p.items % (4 * p.tsplit) != 0) {
    return fail("scan=state: items must split into tsplit slices of whole 4-step groups");
  }
  if (p.poly < 0 || p.poly > 8) {
    return fail("poly counts steps out of 8 (0..8)");
  }
  if (d.any_var() && d.G > 1 && (d.D / d.G) % p.cpb != 0) {
    return fail("the channels of a block must share one B/C group: cpb must divide D/G");
  }
  if (p.minblocks < 1 || p.minblocks > 8 || p.threads * p.minblocks > 2048) {
    return fail("minblocks must be 1..8 with threads * minblocks <= 2048");
  }
  return fits_block(p, d, state_form_smem(p, d.N, d), arch);
}
} // namespace

Result<bool> SelectiveScanOp::check(const Config& config, const Problem& problem,
                                    const std::string& arch) const {
  Params p = params(config);
  Dims d = dims(problem);
  (void)arch; // every variant runs on sm_80 and newer
  if (auto threads = check_block_threads(p.threads); !threads) {
    return threads;
  }
  if (p.state()) {
    return check_state_form(p, d, arch);
  }
  if (p.tsplit != 1 || p.cpl != 1 || p.bc_pair || p.ystore_during || p.yred != 0 ||
      p.ragged != Params::Ragged::regs) {
    return fail("tsplit, cpl, bc=pair, ystore=during, yred and ragged=async|shift apply to "
                "scan=state only");
  }
  if (p.cpb < 1 || p.nsplit < 1 || p.threads % (p.cpb * p.nsplit) != 0 || p.tpc() % 32 != 0) {
    return fail("each (channel, state group) needs whole warps: threads / (cpb * nsplit) % 32 "
                "== 0");
  }
  if (p.items < 1 || p.vec < 1 || (p.vec & (p.vec - 1)) != 0 || p.items % p.vec != 0) {
    return fail("vec must be a power of two dividing items");
  }
  if (p.poly < 0 || p.poly > 8) {
    return fail("poly counts states out of 8 (0..8)");
  }
  if (d.N % p.nsplit != 0) {
    return fail("nsplit must divide N");
  }
  if (d.any_var() && d.G > 1 && (d.D / d.G) % p.cpb != 0) {
    return fail("the channels of a block must share one B/C group: cpb must divide D/G");
  }
  if (p.minblocks < 1 || p.minblocks > 8) {
    return fail("minblocks must be 1..8");
  }
  if (p.threads * p.minblocks > 2048) {
    return fail("threads * minblocks exceeds 2048 threads per SM");
  }
  int slice = state_slice(config, problem);
  if (slice == 0) {
    return fail("the staged B/C of one state exceed the 96 KiB staging budget");
  }
  return fits_block(p, d, static_smem(p) + geometry(config, problem).dynamic_smem, arch);
}

// Models of every GPU only (the register file, barriers per step, steps left idle).
// What measurements on one GPU taught (which ystore/yred/cpl schedules win, block
// counts, the ranges the time-parallel scans are searched in) are search priors for
// that GPU's arch in templates/selective_scan/space.toml ([[prune]]).
Result<bool> SelectiveScanOp::worth_measuring(const Config& config, const Problem& problem) const {
  Params p = params(config);
  Dims d = dims(problem);
  if (p.state()) {
    if (p.ragged != Params::Ragged::regs && !ragged(p, d)) {
      return fail("ragged=async|shift build the same kernel as ragged=regs where L is a "
                  "multiple of vec");
    }
    // Registers (measured with ptxas): per channel of the lane, ITEMS partial sums
    // plus as many staged reads in flight and 4 per state (h, A, B, C); the next
    // chunk's loads in flight and this chunk's u and z; ~32 more.
    const long long vec_regs = std::max<long long>(1, p.vec * (long long)dtype_size(d.x) / 4);
    const long long tv = p.items / p.vec;
    const long long iters_x = (p.cpb * tv + p.threads - 1) / p.threads;
    const long long bc_rows = p.bc_pair && d.var_b && d.var_c ? d.N : d.var_rows() * d.N;
    const long long iters_bc = bc_rows > 0 ? (bc_rows * tv + p.threads - 1) / p.threads : 0;
    // u, delta, z in flight, and the staged chunk's u and z kept for the finish
    const long long kept = (d.has_d ? 1 : 0) + (d.has_z ? 1 : 0);
    const long long prefetch = vec_regs * (iters_x * ((d.has_z ? 3 : 2) + kept) + iters_bc);
    const long long slice = p.items / p.tsplit;
    const long long npl = d.N / p.nsplit;
    const long long correction = p.tsplit > 1 ? slice * npl + npl : 0; // C*P per step, P
    const long long regs =
        std::min<long long>(255, p.cpl * (2LL * slice + 4LL * npl) + correction + prefetch + 32);
    if (regs * p.threads * p.minblocks > 65536) {
      return fail("scan=state: about " + std::to_string(regs) +
                  " registers per thread do not fit minblocks blocks per SM");
    }
    if (p.items < 16) {
      return fail("scan=state: chunks under 16 steps spend more on barriers than on the scan");
    }
    return true;
  }
  // 64K registers per SM on every target: more than 512 threads per SM leave under
  // 128 per thread.
  if (p.threads * p.minblocks > 512) {
    return fail("under 128 registers per thread: the state arrays would spill");
  }
  if (p.chunk() >= 2 * d.L && (p.items > 8 || p.tpc() > 32)) {
    return fail("a chunk of " + std::to_string(p.chunk()) + " steps leaves over half of each " +
                "block idle at L=" + std::to_string(d.L));
  }
  return true;
}

std::vector<InertRule> SelectiveScanOp::inert_params(const Problem& problem) const {
  // The time-parallel forms read none of the state form's parameters; check() accepts
  // them there only at these values.
  std::vector<InertRule> rules{{"scan",
                                {"shfl", "smem"},
                                {{"tsplit", "1"},
                                 {"bc", "f32"},
                                 {"cpl", "1"},
                                 {"ystore", "after"},
                                 {"yred", "0"},
                                 {"ragged", "regs"}}}};
  // Every state-form vec (4 or 8) divides a length that 8 divides: no ragged build.
  if (dims(problem).L % 8 == 0) {
    rules.push_back({"", {}, {{"ragged", "regs"}}});
  }
  return rules;
}

Config SelectiveScanOp::adapt(const Config& config, const Problem& problem) const {
  // A state-form configuration chosen for more channels (B * D) leaves this problem
  // few blocks or few warps: each block owns cpb channels of one batch, each channel
  // nsplit lanes, and the scan hides its latencies with resident warps. On the H100
  // the tuned winners of small batches (bench/notes/selective_scan-ragged.md) keep at
  // least 256 blocks and 768 warps in all (e.g. B=4, D=2048: cpb=32, nsplit=4 ran
  // 121 us against 131 for the B=8, D=2048 point's cpb=64, nsplit=2; B=2, D=2048,
  // L=512: cpb=16, nsplit=8 22 us against 38). Below that the rule doubles the lanes
  // per channel: with too few blocks it halves cpb (same threads), with enough blocks
  // but too few warps it doubles the threads up to 128 (same cpb, so the staged B/C
  // still serve as many channels), until both hold or nsplit reaches 32 or N.
  constexpr long long k_min_blocks = 256;
  constexpr long long k_min_warps = 768;
  Dims d = dims(problem);
  Params p = params(config);
  if (!p.state()) {
    return config;
  }
  // Variable B and C staged as 16-bit pairs need both variable and 16-bit inputs; for
  // another problem the same configuration stages them as fp32 (the tuned points are
  // bf16: without this a point nearest in shape was passed over for a farther one, e.g.
  // fixed B/C at B=4, D=5120, L=2048 ran the B=8, D=2048 point at 313 us against 249
  // for the B=4, D=5120 point's lanes with fp32 staging, H100).
  const bool pairs_fit = d.var_b && d.var_c && dtype_size(d.x) == 2;
  Config current = config;
  if (p.bc_pair && !pairs_fit) {
    set_value(current, "bc", "f32");
    p.bc_pair = false;
  }
  for (int step = 0; step < 5; ++step) {
    const long long blocks = d.B * ((d.D + p.cpb - 1) / p.cpb);
    const long long warps = blocks * (p.threads / 32);
    if (blocks >= k_min_blocks && warps >= k_min_warps) {
      break;
    }
    if (p.nsplit * 2 > 32 || d.N % (p.nsplit * 2) != 0) {
      break;
    }
    Params next = p;
    next.nsplit = p.nsplit * 2;
    if (blocks >= k_min_blocks && p.threads < 128) {
      next.threads = p.threads * 2;
    } else if (p.cpb % 2 == 0) {
      next.cpb = p.cpb / 2;
    } else {
      break;
    }
    Config c = with_values(current,
                           {{"nsplit", next.nsplit}, {"threads", next.threads}, {"cpb", next.cpb}});
    try {
      if (!check(c, problem, "sm_80")) {
        break;
      }
    } catch (const Error&) {
      break;
    }
    current = std::move(c);
    p = next;
  }
  // Small batches (B * D <= 16384 channels): the H100's tuned winner of every such
  // shape measured (bench/notes/selective_scan-small-batch.md: 11 shapes, ragged and
  // aligned, L 333-8191) holds 16 channels a block with variable B/C staged as pairs,
  // and one of two lane shapes by the channel count: up to 6144 channels (384 blocks)
  // 128 threads of 64 steps with 8 lanes a channel, above that 64 threads of 32 steps
  // with 4 lanes a channel -- both about 1000 warps in all. Configurations sized for the
  // grid's larger batches (cpb 32-64, 32 steps, fp32 rows) ran up to 1.5x slower there
  // (B=8, D=1536, L=1500: 259 us against 175).
  // That lane shape of 128 threads and 8 lanes was measured with pairs (or fixed B/C,
  // in registers); with variable B/C staged as fp32 (fp32 inputs) its 64-step rows cost
  // more than its lanes gain at long L: fp32 B=2, D=2560, L=3000 ran 251 us against 183
  // for the 64-thread shape (fp16 with fp32 staging 216 against 167), while at L=512-2048
  // the 64-thread shape was at most 6% slower (bench/notes/selective_scan-small-batch.md).
  constexpr long long k_small_channels = 16384;
  constexpr long long k_few_channels = 6144;
  const long long channels = d.B * d.D;
  if (channels <= k_small_channels) {
    const bool f32_rows = (d.var_b || d.var_c) && !pairs_fit;
    const bool few = channels <= k_few_channels && !f32_rows;
    // The partial y summed over 2 shuffle levels after the recurrence with 8 lanes (1 with
    // 4), one block an SM by the registers: with ragged=shift the lane shape of 128 threads
    // ran 112 us with yred=2 and 133 with yred=1 at B=1, D=5120, L=2047, and a grid point's
    // ystore=during, yred=0 162 against 143 at B=4, D=2048, L=2047 (H100, unseen shapes at
    // 5df4aed; bench/notes/selective_scan-ragged.md).
    Config c = with_values(current, {{"threads", few ? 128 : 64},
                                     {"items", few ? 64 : 32},
                                     {"cpb", 16},
                                     {"nsplit", few ? 8 : 4},
                                     {"tsplit", 1},
                                     {"cpl", 1},
                                     {"minblocks", 1}});
    set_value(c, "yred", few ? "2" : "1");
    set_value(c, "ystore", "after");
    if (pairs_fit) {
      set_value(c, "bc", "pair");
    }
    try {
      if (check(c, problem, "sm_80")) {
        current = std::move(c);
      }
    } catch (const Error&) {
      // keep the sized configuration
    }
  }
  // Ragged rows (L no multiple of vec): whole vectors on each block's shifted timeline
  // (ragged=shift) beat both element layouts on every ragged shape measured on the H100,
  // B = 1-32, L = 333-8191, bf16, fp16 and fp32 (bench/notes/selective_scan-ragged.md: B=1,
  // D=5120, L=2047 105 us against 129 / 134 for regs / async; B=32, D=2048, L=1001 433
  // against 630 / 572).
  if (ragged(params(current), d) && params(current).ragged != Params::Ragged::shift) {
    Config c = current;
    set_value(c, "ragged", "shift");
    try {
      if (check(c, problem, "sm_80")) {
        current = std::move(c);
      }
    } catch (const Error&) {
      // keep the element layout
    }
  }
  return current;
}

std::vector<std::string> SelectiveScanOp::defines(const Config& config,
                                                  const Problem& problem) const {
  Params p = params(config);
  Dims d = dims(problem);
  std::vector<std::string> out = {"-DAT_THREADS=" + std::to_string(p.threads),
                                  "-DAT_ITEMS=" + std::to_string(p.items),
                                  "-DAT_CPB=" + std::to_string(p.cpb),
                                  "-DAT_NSPLIT=" + std::to_string(p.nsplit),
                                  "-DAT_SCAN=" + std::to_string(int(p.form)),
                                  "-DAT_VEC=" + std::to_string(p.vec),
                                  "-DAT_POLY=" + std::to_string(p.poly),
                                  "-DAT_MINB=" + std::to_string(p.minblocks),
                                  "-DAT_TSPLIT=" + std::to_string(p.tsplit),
                                  "-DAT_CPL=" + std::to_string(p.cpl),
                                  "-DAT_PART_STRIDE=" + std::to_string(part_stride(p)),
                                  std::string("-DAT_BC_PAIR=") + (p.bc_pair ? "1" : "0"),
                                  std::string("-DAT_YSTORE_DURING=") +
                                      (p.ystore_during ? "1" : "0"),
                                  "-DAT_YRED=" + std::to_string(p.yred),
                                  "-DAT_N=" + std::to_string(d.N),
                                  "-DAT_NSLICE=" + std::to_string(state_slice(config, problem)),
                                  "-DAT_VAR_B=" + flag_of(d.var_b),
                                  "-DAT_VAR_C=" + flag_of(d.var_c),
                                  "-DAT_HAS_BIAS=" + flag_of(d.bias),
                                  "-DAT_SOFTPLUS=" + flag_of(d.softplus),
                                  "-DAT_HAS_D=" + flag_of(d.has_d),
                                  "-DAT_HAS_Z=" + flag_of(d.has_z),
                                  "-DAT_LAST_STATE=" + flag_of(d.last_state),
                                  std::string("-DAT_X_T=") + template_type(d.x)};
  if (ragged(p, d)) {
    out.push_back("-DAT_RAGGED=" + std::to_string(int(p.ragged)));
  }
  return out;
}

LaunchGeometry SelectiveScanOp::geometry(const Config& config, const Problem& problem) const {
  Params p = params(config);
  Dims d = dims(problem);
  LaunchGeometry g;
  g.block[0] = unsigned(p.threads);
  // ragged=shift: room for vec residue classes of channels (state_parallel.cuh); at
  // least the blocks any smaller class count needs.
  const bool shift = ragged(p, d) && p.ragged == Params::Ragged::shift;
  const long long per_class = shift ? (d.D + p.vec - 1) / p.vec : d.D;
  g.grid[0] = unsigned(d.B * (shift ? p.vec : 1) * ((per_class + p.cpb - 1) / p.cpb));
  long long slice = state_slice(config, problem);
  long long dyn = p.state() ? state_form_smem(p, d.N, d)
                            : d.var_rows() * slice * row_slots(p) * 4 + partial_y_smem(p);
  // The launchers opt in only when the dynamic part alone exceeds 48 KiB; a block
  // whose static + dynamic total exceeds it asks for just over 48 KiB instead.
  if (dyn <= k_default_smem_limit && dyn + static_smem(p) > k_default_smem_limit) {
    dyn = k_default_smem_limit + 16;
  }
  g.dynamic_smem = unsigned(dyn);
  return g;
}

std::vector<TensorSpec> SelectiveScanOp::tensors(const Problem& problem) const {
  Dims d = dims(problem);
  std::vector<TensorSpec> t;
  size_t row = size_t(d.B * d.D * d.L);
  size_t dn = size_t(d.D * d.N);
  // Ranges like a trained Mamba layer: softplus(delta + bias) in about [0.02, 0.7];
  // decays exp(delta * A) from 0.25 to 0.9998, so some states remember thousands of
  // steps and errors in the chunk-to-chunk carry show.
  t.push_back({"u", d.x, row, false, -1.0f, 1.0f});
  if (d.softplus) {
    t.push_back({"delta", d.x, row, false, -3.0f, 0.0f});
  } else {
    t.push_back({"delta", d.x, row, false, 0.0f, 0.5f});
  }
  t.push_back({"A", DType::f32, dn, false, -2.0f, -0.01f});
  // Variable: [B, G, N, L] of u's type; fixed: [D, N] fp32.
  const size_t var_elems = size_t(d.B * d.G * d.N * d.L);
  t.push_back({"B", d.var_b ? d.x : DType::f32, d.var_b ? var_elems : dn, false, -1.0f, 1.0f});
  t.push_back({"C", d.var_c ? d.x : DType::f32, d.var_c ? var_elems : dn, false, -1.0f, 1.0f});
  if (d.has_d) {
    t.push_back({"D", DType::f32, size_t(d.D), false, -1.0f, 1.0f});
  }
  if (d.has_z) {
    t.push_back({"z", d.x, row, false, -2.0f, 2.0f});
  }
  if (d.bias) {
    if (d.softplus) {
      t.push_back({"delta_bias", DType::f32, size_t(d.D), false, -1.0f, 0.0f});
    } else {
      t.push_back({"delta_bias", DType::f32, size_t(d.D), false, 0.0f, 0.5f});
    }
  }
  t.push_back({"out", d.x, row, true});
  if (d.last_state) {
    t.push_back({"last_state", DType::f32, size_t(d.B * d.D * d.N), true});
  }
  return t;
}

namespace {

using ScanArgs = SelectiveScanKernelArgs;

// ragged=shift (state_parallel.cuh AT_RAGGED 3): a block takes channels d, d + m, d + 2m,
// ... whose rows of u, delta, z and out all start at one offset from a vec-element
// boundary. That holds for every row when the four tensors agree modulo vec in their
// start (in elements), batch stride and channel stride; m is the least count with m *
// the channel stride a multiple of vec, and with groups > 1 such a block must stay in
// one B/C group. Returns m, or 0 where the call does not allow it (the kernel then
// runs as ragged=async).
int shift_classes(const Params& p, const Dims& d, const SelectiveScanCall& call) {
  const long long vec = p.vec, size = (long long)dtype_size(d.x);
  auto agrees = [&](CUdeviceptr ptr, long long bs, long long ds) {
    const long long gap = (long long)(ptr - call.u); // bytes, possibly negative
    return gap % size == 0 && (gap / size) % vec == 0 &&
           (d.B == 1 || (bs - call.u_batch_stride) % vec == 0) &&
           (ds - call.u_dim_stride) % vec == 0;
  };
  if (call.u % size != 0 || !agrees(call.delta, call.delta_batch_stride, call.delta_dim_stride) ||
      !agrees(call.out, call.out_batch_stride, call.out_dim_stride) ||
      (d.has_z && !agrees(call.z, call.z_batch_stride, call.z_dim_stride))) {
    return 0;
  }
  const long long rem = ((call.u_dim_stride % vec) + vec) % vec;
  const int m = int(vec / std::gcd(rem, vec)); // gcd(0, vec) = vec: one class
  if (d.any_var() && d.G > 1 && (d.D / d.G) % (m * (long long)p.cpb) != 0) {
    return 0;
  }
  return m;
}

ScanArgs scan_kernel_args(const Params& p, const Dims& d, const SelectiveScanCall& call) {
  ScanArgs a{};
  a.u = call.u;
  a.delta = call.delta;
  a.A = call.A;
  a.B = call.B;
  a.C = call.C;
  a.D = call.D;
  a.z = call.z;
  a.delta_bias = call.delta_bias;
  a.out = call.out;
  a.last_state = call.last_state;
  a.batch = int(d.B);
  a.dim = int(d.D);
  a.length = int(d.L);
  a.groups = int(d.G);
  a.u_bs = call.u_batch_stride;
  a.u_ds = call.u_dim_stride;
  a.delta_bs = call.delta_batch_stride;
  a.delta_ds = call.delta_dim_stride;
  a.z_bs = call.z_batch_stride;
  a.z_ds = call.z_dim_stride;
  a.out_bs = call.out_batch_stride;
  a.out_ds = call.out_dim_stride;
  a.b_bs = call.b_batch_stride;
  a.b_gs = call.b_group_stride;
  a.b_ns = call.b_state_stride;
  a.c_bs = call.c_batch_stride;
  a.c_gs = call.c_group_stride;
  a.c_ns = call.c_state_stride;
  const VectorAccess vector(d.x, p.vec);
  bool vector_ok = d.L % p.vec == 0 && vector.aligned(call.u, {a.u_bs, a.u_ds}) &&
                   vector.aligned(call.delta, {a.delta_bs, a.delta_ds}) &&
                   vector.aligned(call.out, {a.out_bs, a.out_ds});
  if (d.has_z) {
    vector_ok = vector_ok && vector.aligned(call.z, {a.z_bs, a.z_ds});
  }
  if (d.var_b) {
    vector_ok = vector_ok && vector.aligned(call.B, {a.b_bs, a.b_gs, a.b_ns});
  }
  if (d.var_c) {
    vector_ok = vector_ok && vector.aligned(call.C, {a.c_bs, a.c_gs, a.c_ns});
  }
  a.ch_mod = 1;
  if (ragged(p, d) && p.ragged == Params::Ragged::shift) {
    const int m = shift_classes(p, d, call);
    vector_ok = m > 0;
    a.ch_mod = std::max(m, 1);
  }
  a.vector_ok = vector_ok ? 1 : 0;
  return a;
}

struct ScanPlan final : CallPlan {
  Params params;
  Dims dims;
  size_t pack(const void* args, const BoundCall& call, void* out) const override {
    (void)call;
    const auto& a = *static_cast<const autotune_selective_scan_args*>(args);
    SelectiveScanCall c;
    c.u = device_ptr(a.u);
    c.delta = device_ptr(a.delta);
    c.A = device_ptr(a.A);
    c.B = device_ptr(a.B);
    c.C = device_ptr(a.C);
    c.D = device_ptr(a.D);
    c.z = device_ptr(a.z);
    c.delta_bias = device_ptr(a.delta_bias);
    c.out = device_ptr(a.out);
    c.last_state = device_ptr(a.last_state);
    c.u_batch_stride = a.u.strides[0];
    c.u_dim_stride = a.u.strides[1];
    c.delta_batch_stride = a.delta.strides[0];
    c.delta_dim_stride = a.delta.strides[1];
    if (c.z) {
      c.z_batch_stride = a.z.strides[0];
      c.z_dim_stride = a.z.strides[1];
    }
    c.out_batch_stride = a.out.strides[0];
    c.out_dim_stride = a.out.strides[1];
    // Variable B/C: [B, G, N, L], or [B, N, L] with one group (group stride unused).
    auto bc = [](const TensorArg& t, long long& bs, long long& gs, long long& ns) {
      if (t.ndim == 4) {
        bs = t.strides[0], gs = t.strides[1], ns = t.strides[2];
      } else if (t.ndim == 3) {
        bs = t.strides[0], gs = 0, ns = t.strides[1];
      }
    };
    bc(a.B, c.b_batch_stride, c.b_group_stride, c.b_state_stride);
    bc(a.C, c.c_batch_stride, c.c_group_stride, c.c_state_stride);
    ScanArgs k = scan_kernel_args(params, dims, c);
    std::memcpy(out, &k, sizeof k);
    return sizeof k;
  }
};

} // namespace

const ArgsDesc& SelectiveScanOp::args_desc() const {
  using A = autotune_selective_scan_args;
  enum : int8_t { B, D, L, N, G, dtype, var_bc, bias, softplus, has_d, has_z, last };
  auto rows = StrideRule::rows;
  auto dense = StrideRule::contiguous;
  // The tensors in struct order. B and C take the same three forms: fixed [D, N]
  // fp32, variable [B, N, L] (one group) and variable, grouped [B, G, N, L] of u's
  // dtype.
  auto tensors = [&] {
    std::vector<TensorRule> t = {
        {"u", offsetof(A, u), {{B}, {D}, {L}}, dtype, k_any_float, -1, false, rows},
        {"delta", offsetof(A, delta), {{B}, {D}, {L}}, dtype, k_any_float, -1, false, rows},
        {"A", offsetof(A, A), {{D}, {N}}, -1, k_fp32, -1, false, dense}};
    for (const auto& [name, offset] : {std::pair{"B", offsetof(A, B)}, {"C", offsetof(A, C)}}) {
      t.push_back({name, offset, {{D}, {N}}, -1, k_fp32, -1, false, dense, 1, {}, "fixed"});
      t.push_back({name,
                   offset,
                   {{B}, {N}, {L}},
                   dtype,
                   k_any_float,
                   -1,
                   false,
                   rows,
                   1,
                   {{G, 1}},
                   "variable"});
      t.push_back({name,
                   offset,
                   {{B}, {G}, {N}, {L}},
                   dtype,
                   k_any_float,
                   -1,
                   false,
                   rows,
                   1,
                   {},
                   "variable, grouped"});
    }
    t.insert(
        t.end(),
        {{"D", offsetof(A, D), {{D}}, -1, k_fp32, has_d, false, dense},
         {"z", offsetof(A, z), {{B}, {D}, {L}}, dtype, k_any_float, has_z, false, rows},
         {"delta_bias", offsetof(A, delta_bias), {{D}}, -1, k_fp32, bias, false, dense},
         {"out", offsetof(A, out), {{B}, {D}, {L}}, dtype, k_any_float, -1, true, rows},
         {"last_state", offsetof(A, last_state), {{B}, {D}, {N}}, -1, k_fp32, last, true, dense}});
    return t;
  };
  static const ArgsDesc desc{
      "selective_scan",
      sizeof(A),
      {{"B", FieldKind::size},
       {"D", FieldKind::size},
       {"L", FieldKind::size},
       {"N", FieldKind::size, -1, {}, 4.0},
       {"G", FieldKind::size, 1},
       {"dtype", FieldKind::dtype},
       // Set by derive from the forms of B and C (k_var_bc_names).
       {"var_bc", FieldKind::choice, -1, {"0", "1", "B", "C"}},
       {"delta_bias", FieldKind::flag},
       {"softplus", FieldKind::flag},
       {"has_d", FieldKind::flag},
       {"has_z", FieldKind::flag},
       {"last_state", FieldKind::flag}},
      tensors(),
      {{"delta_softplus", offsetof(A, delta_softplus), ScalarKind::i32, softplus}},
      // var_bc from the forms that bound B and C ([D, N] fixed, 3 or 4 dimensions
      // variable): the two are independent, as in mamba-ssm.
      [](const void* args, CallValues& values) {
        const auto& a = *static_cast<const A*>(args);
        const bool vb = a.B.ndim != 2, vc = a.C.ndim != 2;
        const VarBC v = vb && vc ? VarBC::both
                        : vb     ? VarBC::b_only
                        : vc     ? VarBC::c_only
                                 : VarBC::none;
        values[size_t(var_bc)] = int64_t(v);
      }};
  return desc;
}

std::unique_ptr<CallPlan> SelectiveScanOp::plan(const Config& config,
                                                const Problem& problem) const {
  auto p = std::make_unique<ScanPlan>();
  p->params = params(config);
  p->dims = dims(problem);
  p->geometry = geometry(config, problem);
  return p;
}

void SelectiveScanOp::pack_call(const Config& config, const Problem& problem,
                                const SelectiveScanCall& call, ArgPack& args) const {
  args.add(scan_kernel_args(params(config), dims(problem), call));
}

void SelectiveScanOp::pack(const Config& config, const Problem& problem,
                           const std::vector<CUdeviceptr>& t, ArgPack& args) const {
  Dims d = dims(problem);
  SelectiveScanCall c;
  size_t i = 0;
  c.u = t.at(i++);
  c.delta = t.at(i++);
  c.A = t.at(i++);
  c.B = t.at(i++);
  c.C = t.at(i++);
  c.D = d.has_d ? t.at(i++) : 0;
  c.z = d.has_z ? t.at(i++) : 0;
  c.delta_bias = d.bias ? t.at(i++) : 0;
  c.out = t.at(i++);
  c.last_state = d.last_state ? t.at(i++) : 0;
  c.u_dim_stride = c.delta_dim_stride = c.z_dim_stride = c.out_dim_stride = d.L;
  c.u_batch_stride = c.delta_batch_stride = c.z_batch_stride = c.out_batch_stride = d.D * d.L;
  c.b_state_stride = c.c_state_stride = d.L;
  c.b_group_stride = c.c_group_stride = d.N * d.L;
  c.b_batch_stride = c.c_batch_stride = d.G * d.N * d.L;
  pack_call(config, problem, c, args);
}

std::string SelectiveScanOp::reference_kernel(const Problem& problem) const {
  switch (dims(problem).x) {
  case DType::f32:
    return "selective_scan_ref_f32";
  case DType::f16:
    return "selective_scan_ref_f16";
  case DType::bf16:
    return "selective_scan_ref_bf16";
  }
  return "";
}

LaunchGeometry SelectiveScanOp::reference_geometry(const Problem& problem) const {
  Dims d = dims(problem);
  LaunchGeometry g;
  g.block[0] = 128; // templates/selective_scan/reference.cuh indexes with 128
  g.grid[0] = unsigned((d.B * d.D + 127) / 128);
  return g;
}

void SelectiveScanOp::pack_reference(const Problem& problem, const std::vector<CUdeviceptr>& t,
                                     const std::vector<CUdeviceptr>& ref, ArgPack& args) const {
  Dims d = dims(problem);
  size_t i = 0;
  CUdeviceptr u = t.at(i++), delta = t.at(i++), A = t.at(i++), B = t.at(i++), C = t.at(i++);
  CUdeviceptr D = d.has_d ? t.at(i++) : 0;
  CUdeviceptr z = d.has_z ? t.at(i++) : 0;
  CUdeviceptr bias = d.bias ? t.at(i++) : 0;
  args.add(u);
  args.add(delta);
  args.add(A);
  args.add(d.var_b ? B : CUdeviceptr(0));
  args.add(d.var_c ? C : CUdeviceptr(0));
  args.add(d.var_b ? CUdeviceptr(0) : B);
  args.add(d.var_c ? CUdeviceptr(0) : C);
  args.add(D);
  args.add(z);
  args.add(bias);
  args.add(ref.at(0));
  args.add(d.last_state ? ref.at(1) : CUdeviceptr(0));
  args.add(int(d.B));
  args.add(int(d.D));
  args.add(int(d.L));
  args.add(int(d.N));
  args.add(int(d.G));
  args.add(int(d.softplus));
}

double SelectiveScanOp::tolerance(const Problem& problem) const {
  // The output's rounding dominates for 16-bit outputs (bf16 keeps 8 significant
  // bits, fp16 11). fp32 sees ex2.approx / the polynomial (about 1e-7 per step),
  // compounded over the steps a slowly decaying state remembers.
  return output_rounding_tolerance(dims(problem).x, 1e-4);
}

double SelectiveScanOp::bytes(const Problem& problem) const {
  Dims d = dims(problem);
  const double row = double(d.B * d.D * d.L) * double(dtype_size(d.x));
  double total = row * (3.0 + (d.has_z ? 1.0 : 0.0)); // u, delta, out (+ z)
  const double var_bytes = double(d.B * d.G * d.N * d.L) * double(dtype_size(d.x));
  const double fixed_bytes = double(d.D * d.N) * 4.0;
  total += (d.var_b ? var_bytes : fixed_bytes) + (d.var_c ? var_bytes : fixed_bytes);
  total += double(d.D * d.N) * 4.0;                                            // A
  total += double(d.D) * 4.0 * ((d.has_d ? 1.0 : 0.0) + (d.bias ? 1.0 : 0.0)); // D, bias
  if (d.last_state) {
    total += double(d.B * d.D * d.N) * 4.0;
  }
  return total;
}

double SelectiveScanOp::exponentials(const Problem& problem) const {
  Dims d = dims(problem);
  return double(d.B * d.D * d.L) * double(d.N);
}

} // namespace autotune
