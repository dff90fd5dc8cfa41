#include "tuner.hpp"

#include "compile.hpp"
#include "progress.hpp"
#include "runtime/base/hash.hpp"
#include "runtime/base/log.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/distance.hpp"
#include "runtime/ops/heuristic.hpp"
#include "runtime/ops/templates.hpp"
#include "strategy.hpp"
#include "worker.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_set>

namespace autotune {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Adds the wall time of its scope to `phase` (a ProblemPhases member).
class PhaseTimer {
public:
  explicit PhaseTimer(double& phase) : m_phase(phase), m_t0(Clock::now()) {}
  ~PhaseTimer() { m_phase += since(m_t0); }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

private:
  double& m_phase;
  Clock::time_point m_t0;
};

// What every problem of a session shares.
struct Session {
  const Op& op;
  const SearchSpace& search;
  const std::string& arch;
  cache::Database& db;
  const TuneOptions& options;
  Progress& progress;
};

// A tuning session's GPU side, beside the Session (absent for --compile-only).
struct Device {
  cache::DeviceRecord record;
  std::string key; // record.key()
  Worker& worker;
};

struct Candidate {
  TypedConfig config;
  VariantSource source;     // its request.source is filled only while it compiles
  bool built = false;       // cubin loaded from the database or compiled (or failed to)
  std::string cubin;        // empty until built, or when compilation failed
  std::string cubin_sha256; // its content hash: the worker keeps its module under it
  std::string compile_error;
};

cache::DeviceRecord device_record(const cuda::DeviceInfo& d) {
  cache::DeviceRecord r;
  r.name = d.name;
  r.arch = d.arch();
  r.cc = d.cc_major * 10 + d.cc_minor;
  r.sm_count = d.sm_count;
  r.driver_version = d.driver_version;
  return r;
}

// The configurations of the space measured for a problem, in judge_space() order
// (random sampling depends on it); counts the others.
std::vector<Config> measured_configs(const Session& s, const Problem& problem,
                                     ProblemReport& report) {
  std::vector<Judged> judged = judge_space(
      s.op, s.search.priors, s.search.space, problem, s.arch, s.options.jobs,
      [](Verdict v) { return v == Verdict::measure; }, false, report.invalid);
  std::vector<Config> out;
  out.reserve(judged.size());
  for (Judged& j : judged) {
    out.push_back(std::move(j.config));
  }
  if (out.empty()) {
    // Nothing to measure (a --param or --space that leaves only variants this problem
    // cannot run, say): the walk again, with the reasons, for the report.
    size_t measured = 0;
    std::map<std::string, size_t> reasons;
    for (const Judged& j : judge_space(
             s.op, s.search.priors, s.search.space, problem, s.arch, s.options.jobs,
             [](Verdict v) { return v != Verdict::measure; }, true, measured)) {
      ++reasons[j.why];
    }
    report.why_none.assign(reasons.begin(), reasons.end());
    std::stable_sort(report.why_none.begin(), report.why_none.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    if (report.why_none.size() > k_why_none_reasons) {
      report.why_none_more = report.why_none.size() - k_why_none_reasons;
      report.why_none.resize(k_why_none_reasons);
    }
  }
  return out;
}

// Candidates described (keys computed), nothing loaded or compiled yet. The template
// source each request carries is dropped until it compiles: a space of thousands of
// variants would otherwise hold as many copies.
std::vector<Candidate> describe_candidates(const Session& s, std::vector<TypedConfig> configs,
                                           const Problem& problem) {
  std::vector<Candidate> candidates;
  candidates.reserve(configs.size());
  for (auto& c : configs) {
    VariantSource source = describe_variant(s.op, c, problem, s.arch);
    Candidate k{std::move(c), std::move(source), false, {}, {}, {}};
    k.source.request.source = std::string();
    candidates.push_back(std::move(k));
  }
  return candidates;
}

// Builds candidates `indices` not built yet: cubins from the database, the others
// compiled on all cores, each new cubin stored at once.
void build(const Session& s, std::vector<Candidate>& candidates, const std::vector<size_t>& indices,
           ProblemReport& report) {
  std::vector<CompileJob> work;
  std::vector<size_t> owner;
  for (size_t i : indices) {
    Candidate& c = candidates.at(i);
    if (c.built) {
      continue;
    }
    std::optional<cache::VariantRecord> stored;
    {
      PhaseTimer timer(report.phases.cubin_load);
      stored = s.db.find_variant(c.source.key);
      if (stored) {
        c.cubin = s.db.load_cubin(stored->cubin_sha256);
        c.cubin_sha256 = stored->cubin_sha256;
      }
    }
    if (stored) {
      c.built = true;
      ++report.cubins_reused;
    } else {
      c.source.request.source = template_source(s.op.template_path());
      work.push_back({&c.source});
      owner.push_back(i);
    }
  }
  if (work.empty()) {
    return;
  }
  auto t0 = Clock::now();
  s.progress.compiling(0, work.size());
  compile_all(work, s.options.jobs, [&](CompileJob& job, size_t finished) {
    s.progress.compiling(finished, work.size());
    const VariantSource& v = *job.variant;
    if (!job.output) {
      return;
    }
    if (!job.output->log.empty()) {
      log(LogLevel::info, "NVRTC log for " + v.op + " " + v.config_id + ":\n" + job.output->log);
    }
    cache::VariantRecord r;
    r.key = v.key;
    r.op = v.op;
    r.arch = v.arch;
    r.template_hash = v.template_hash;
    r.nvrtc_version = v.nvrtc_version;
    r.options = join(v.options, " ");
    r.config = v.config_id;
    r.kernel = v.kernel;
    r.cubin_sha256 = sha256_hex(job.output->binary);
    r.compile_s = job.output->seconds;
    s.db.put_variant(r, job.output->binary);
    candidates[owner[size_t(&job - work.data())]].cubin_sha256 = r.cubin_sha256;
  });
  report.compile_seconds += since(t0);
  for (size_t j = 0; j < work.size(); ++j) {
    Candidate& c = candidates[owner[j]];
    c.built = true;
    c.source.request.source = std::string();
    if (work[j].output) {
      c.cubin = std::move(work[j].output->binary);
      ++report.compiled;
    } else {
      c.compile_error = work[j].output.failure().message + "\n" + work[j].output.failure().detail;
      ++report.compile_failures;
    }
  }
}

unsigned long long fresh_seed() {
  std::random_device rd;
  return (static_cast<unsigned long long>(rd()) << 32) ^ rd();
}

VariantReport from_record(const cache::ResultRecord& r) {
  VariantReport v;
  v.config = r.config;
  v.variant_key = r.variant_key;
  v.outcome = r.outcome;
  v.timing.median_us = r.median_us;
  v.timing.p10_us = r.p10_us;
  v.timing.p90_us = r.p90_us;
  v.timing.samples = r.samples;
  v.rel_err = r.rel_err;
  v.sm_clock_mhz = r.sm_clock_mhz;
  v.message = r.message;
  v.reused_result = true;
  return v;
}

// The candidates of one problem as strategies measure them: built on demand, measured
// through the worker, each result stored under the problem's key as it becomes final.
class WorkerBench final : public Bench {
public:
  WorkerBench(const Session& s, const Device& d, const Problem& problem,
              std::vector<Candidate>& candidates, ProblemReport& report)
      : m_session(s), m_device(d), m_problem(problem), m_candidates(candidates), m_report(report),
        m_variants(candidates.size()), m_touched(candidates.size(), 0) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      m_variants[i].config = candidates[i].source.config_id;
      m_variants[i].variant_key = candidates[i].source.key;
    }
  }

  // Fills in the results a killed session stored (unless --force) and returns what
  // is left to measure, and which of those results are correct.
  SearchInput resume() {
    SearchInput in;
    for (size_t i = 0; i < m_candidates.size(); ++i) {
      const Candidate& c = m_candidates[i];
      if (!m_session.options.force) {
        if (auto stored = m_session.db.find_result(m_device.key, c.source.key, m_problem.key())) {
          m_variants[i] = from_record(*stored);
          m_touched[i] = 1;
          if (m_variants[i].outcome == cache::Outcome::ok) {
            in.measured.push_back(i);
          }
          continue;
        }
      }
      in.pending.push_back(i);
    }
    return in;
  }

  void prepare(const std::vector<size_t>& indices) override {
    build(m_session, m_candidates, indices, m_report);
    for (size_t i : indices) {
      const Candidate& c = m_candidates[i];
      if (c.cubin.empty() && m_variants[i].outcome != cache::Outcome::compile_fail) {
        m_variants[i].outcome = cache::Outcome::compile_fail;
        m_variants[i].message = c.compile_error;
        m_touched[i] = 1;
        store(i);
      }
    }
  }

  void measure(size_t i, const TimingProtocol& protocol) override {
    const Candidate& c = m_candidates[i];
    MeasureResult m = timed(m_report.phases.measure, [&] {
      return m_device.worker.measure(c.config, c.source.kernel, c.cubin, protocol, false,
                                     c.cubin_sha256);
    });
    VariantReport& v = m_variants[i];
    v.outcome = m.outcome;
    v.timing = m.timing;
    m_last_samples = std::move(m.samples_us);
    v.rel_err = m.rel_err;
    v.sm_clock_mhz = m.sm_clock_mhz;
    v.message = m.message;
    if (!m_touched[i]) {
      m_touched[i] = 1;
      ++m_measured;
    }
    if (v.outcome == cache::Outcome::ok && v.timing.median_us > 0 &&
        (m_best_us == 0 || v.timing.median_us < m_best_us)) {
      m_best_us = v.timing.median_us;
      m_session.progress.best(v.config, m_best_us);
    }
  }

  void store(size_t i) override {
    PhaseTimer timer(m_report.phases.store);
    const VariantReport& v = m_variants[i];
    cache::ResultRecord r;
    r.device_key = m_device.key;
    r.op = m_session.op.name();
    r.problem = m_problem.key();
    r.variant_key = v.variant_key;
    r.config = v.config;
    r.outcome = v.outcome;
    r.median_us = v.timing.median_us;
    r.p10_us = v.timing.p10_us;
    r.p90_us = v.timing.p90_us;
    r.samples = v.timing.samples;
    r.rel_err = v.rel_err;
    r.sm_clock_mhz = v.sm_clock_mhz;
    r.message = v.message;
    m_session.db.put_result(r);
  }

  std::vector<double> last_samples() const override { return m_last_samples; }

  VariantReport& variant(size_t i) override { return m_variants.at(i); }
  const TypedConfig& config(size_t i) const override { return m_candidates.at(i).config; }

  void progress(const std::string& stage, size_t done, size_t total) override {
    m_session.progress.measuring(stage, done, total, m_measured);
  }

  size_t measured() const { return m_measured; }

  // The winner: the first of the preference order that also passes on a second,
  // independent input set. Those that fail it get that outcome, stored.
  std::optional<size_t> recheck_winner() {
    std::vector<size_t> order = preference_order(m_variants);
    if (!order.empty()) {
      timed(m_report.phases.recheck, [&] {
        m_device.worker.reseed(fresh_seed());
        return 0;
      });
    }
    for (size_t i : order) {
      m_session.progress.measuring("re-check", 0, 1, m_measured);
      prepare({i}); // a stored result's cubin is loaded only now
      const Candidate& c = m_candidates[i];
      if (c.cubin.empty()) {
        continue;
      }
      MeasureResult again = timed(m_report.phases.recheck, [&] {
        return m_device.worker.measure(c.config, c.source.kernel, c.cubin,
                                       m_session.options.protocol, true, c.cubin_sha256);
      });
      if (again.outcome != cache::Outcome::ok) {
        m_variants[i].outcome = again.outcome;
        m_variants[i].message = "second input set: " + again.message;
        store(i);
        continue;
      }
      return i;
    }
    return std::nullopt;
  }

  // The variants with an outcome (measured, resumed or failed to compile), in
  // candidate order; `winner` becomes an index into them.
  std::vector<VariantReport> take_variants(std::optional<size_t>& winner) {
    std::vector<VariantReport> out;
    std::optional<size_t> mapped;
    for (size_t i = 0; i < m_variants.size(); ++i) {
      if (!m_touched[i]) {
        continue;
      }
      if (winner && *winner == i) {
        mapped = out.size();
      }
      out.push_back(std::move(m_variants[i]));
    }
    winner = mapped;
    return out;
  }

private:
  // Runs a call to the worker, adding its wall time to `phase`, less what starting a
  // replacement worker took (ProblemPhases::restart).
  template <typename Call> auto timed(double& phase, Call&& call) -> decltype(call()) {
    const double restarts = m_device.worker.restart_seconds();
    const Clock::time_point t0 = Clock::now();
    auto result = call();
    const double restart = m_device.worker.restart_seconds() - restarts;
    phase += since(t0) - restart;
    m_report.phases.restart += restart;
    return result;
  }

  const Session& m_session;
  const Device& m_device;
  const Problem& m_problem;
  std::vector<Candidate>& m_candidates;
  ProblemReport& m_report;
  std::vector<VariantReport> m_variants;
  std::vector<char> m_touched; // has an outcome: measured, resumed or a compile failure
  size_t m_measured = 0;       // measured by this session
  double m_best_us = 0;
  std::vector<double> m_last_samples; // of the latest measure()
};

// A stored winner for the problem's tuning key answers it (unless --force).
bool answer_from_store(const Session& s, const Device& d, const Problem& problem,
                       ProblemReport& report) {
  if (s.options.force) {
    return false;
  }
  auto w = s.db.find_winner(d.key, s.op.name(), problem.key(), template_hash(s.op.template_path()),
                            cuda::nvrtc_version());
  if (!w) {
    return false;
  }
  report.cached = true;
  report.winner_config = w->config;
  report.winner_us = w->median_us;
  return true;
}

} // namespace

std::vector<TransferSeed> nearest_winners(const cache::Database& db, const Op& op,
                                          const std::string& device_key, const Problem& problem,
                                          size_t k) {
  if (k == 0) {
    return {};
  }
  static const ArgsDesc k_no_sizes{};
  const ArgsDesc* desc = &k_no_sizes;
  try {
    desc = &op.args_desc();
  } catch (const Error&) {
    // A tuner-only op describes no call: every field then counts as differing.
  }
  const std::string& thash = template_hash(op.template_path());
  const std::string nvrtc = cuda::nvrtc_version();
  struct Ranked {
    int differing;
    double size;
    const cache::WinnerRecord* winner;
  };
  const std::vector<cache::WinnerRecord> winners = db.winners();
  std::vector<Ranked> ranked;
  for (const cache::WinnerRecord& w : winners) {
    if (w.device_key != device_key || w.op != op.name() || w.nvrtc_version != nvrtc) {
      continue;
    }
    Problem other;
    other.op = problem.op;
    try {
      other.fields = parse_fields(w.problem, "stored problem");
    } catch (const Error&) {
      continue;
    }
    ProblemDistance pd = compare_problems(*desc, problem, other);
    if (pd.comparable) {
      ranked.push_back({pd.differing, pd.size + (w.template_hash == thash ? 0.0 : 0.01), &w});
    }
  }
  std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.differing != b.differing) {
      return a.differing < b.differing;
    }
    if (a.size != b.size) {
      return a.size < b.size;
    }
    return a.winner->problem < b.winner->problem;
  });
  std::vector<TransferSeed> out;
  for (const Ranked& r : ranked) {
    if (out.size() >= k) {
      break;
    }
    bool seen = false;
    for (const TransferSeed& x : out) {
      seen = seen || x.config == r.winner->config;
    }
    if (!seen) {
      out.push_back({r.winner->config, r.winner->problem, r.differing, r.size});
    }
  }
  return out;
}

std::vector<TransferSeed> valid_seeds(const Op& op, const Space& space, const Problem& problem,
                                      const std::vector<Config>& valid,
                                      std::vector<TransferSeed> nearest, size_t k) {
  std::unordered_set<std::string> ids;
  for (const Config& c : valid) {
    ids.insert(config_id(c));
  }
  std::vector<TransferSeed> out;
  std::unordered_set<std::string> taken;
  for (TransferSeed& seed : nearest) {
    if (out.size() >= k) {
      break;
    }
    std::string adapted;
    try {
      const Config stored = order_config(space, parse_fields(seed.config, "stored configuration"),
                                         true, "stored configuration");
      seed.config = config_id(stored);
      adapted = config_id(op.adapt(stored, problem));
    } catch (const Error&) {
      continue; // a configuration of another space (a parameter since removed)
    }
    if (ids.count(adapted)) {
      seed.config = adapted;
    } else if (!ids.count(seed.config)) {
      continue;
    }
    if (taken.insert(seed.config).second) {
      out.push_back(std::move(seed));
    }
  }
  return out;
}

std::optional<TransferSeed> builtin_seed(const Op& op, const Space& space, const Problem& problem,
                                         const std::string& arch) {
  auto point = heuristic_config(op, problem, arch);
  if (!point) {
    return std::nullopt;
  }
  TransferSeed seed;
  try {
    seed.config = config_id(order_config(space, point->first, false, "built-in point"));
  } catch (const Error&) {
    return std::nullopt; // a --space file without one of the op's parameters
  }
  seed.problem = "built-in " + point->second;
  seed.builtin = true;
  return seed;
}

namespace {

void store_winner(const Session& s, const Device& d, const Problem& problem,
                  ProblemReport& report) {
  PhaseTimer timer(report.phases.store);
  const VariantReport& w = report.variants[*report.winner];
  cache::WinnerRecord r;
  r.device_key = d.key;
  r.op = s.op.name();
  r.problem = problem.key();
  r.template_hash = template_hash(s.op.template_path());
  r.nvrtc_version = cuda::nvrtc_version();
  r.variant_key = w.variant_key;
  r.config = w.config;
  r.kernel = s.op.kernel_name();
  r.median_us = w.timing.median_us;
  s.db.put_winner(r);
  report.winner_config = w.config;
  report.winner_us = w.timing.median_us;
}

// How many of the nearest winners are looked at for the --transfer seeds that are valid
// for a problem (a D=128 problem whose nearest tuned problems are D=64 ones may find
// none valid among the first few).
constexpr size_t k_transfer_candidates = 64;

// Tunes a problem no stored winner answers.
void tune_problem(const Session& s, const Device& d, const Strategy& strategy, size_t index,
                  const Problem& problem, ProblemReport& report) {
  const Clock::time_point t0 = Clock::now();
  const int restarts = d.worker.restarts();
  const WorkerSeconds worker = d.worker.seconds();
  std::vector<Config> valid = measured_configs(s, problem, report);
  std::vector<TransferSeed> seeds;
  size_t neighbours = 0;
  if (strategy.transfers() && s.options.transfer > 0) {
    std::vector<TransferSeed> nearest =
        nearest_winners(s.db, s.op, d.key, problem, k_transfer_candidates);
    neighbours = nearest.size();
    seeds = valid_seeds(s.op, s.search.space, problem, valid, std::move(nearest),
                        size_t(s.options.transfer));
    // The op's built-in tuning point for this GPU family (what the heuristic policy
    // runs) is measured too: where the database holds little near this problem it is
    // often the better start (on unseen selective_scan shapes it ran up to 1.49x the
    // winner a transfer from the benchmark grid alone found; with it, the new shapes'
    // winners came out up to 2.1x faster: bench/notes/untuned-shapes.md).
    if (auto seed = builtin_seed(s.op, s.search.space, problem, d.record.arch)) {
      const bool known = std::any_of(seeds.begin(), seeds.end(), [&](const TransferSeed& t) {
        return t.config == seed->config;
      });
      if (!known) {
        seeds.push_back(std::move(*seed));
      }
    }
  }
  std::vector<Config> selection = strategy.select(valid, report);
  // Parsed once here; from now on a configuration is compared by its id (key()).
  std::vector<TypedConfig> configs(selection.begin(), selection.end());
  selection.clear();
  // A seed the selection left out (a sample) is measured anyway; one that is not valid
  // here (another space, --param, the op's limits for this problem) is dropped.
  std::vector<std::string> seed_ids;
  std::vector<bool> seed_builtin;
  for (const TransferSeed& seed : seeds) {
    bool selected = false;
    for (const TypedConfig& c : configs) {
      selected = selected || c.key() == seed.config;
    }
    if (!selected) {
      for (const Config& c : valid) {
        TypedConfig typed(c);
        if (typed.key() == seed.config) {
          configs.push_back(std::move(typed));
          selected = true;
          break;
        }
      }
    }
    if (selected) {
      seed_ids.push_back(seed.config);
      seed_builtin.push_back(seed.builtin);
      report.transferred_from.push_back(seed.problem);
    }
  }
  valid.clear();
  std::vector<Candidate> candidates = describe_candidates(s, std::move(configs), problem);
  const size_t builtin_seeds = size_t(std::count(seed_builtin.begin(), seed_builtin.end(), true));
  s.progress.start_problem(index, problem.key(), candidates.size(), seed_ids.size() - builtin_seeds,
                           builtin_seeds);
  WorkerBench bench(s, d, problem, candidates, report);
  SearchInput input = bench.resume();
  input.neighbours = neighbours;
  for (size_t k = 0; k < seed_ids.size(); ++k) {
    for (size_t i : input.pending) {
      if (candidates[i].source.config_id == seed_ids[k]) {
        input.seeds.push_back(i);
        input.builtin_seeds += seed_builtin[k] ? 1 : 0;
      }
    }
  }
  report.phases.select += since(t0);

  // While the worker draws the inputs and computes the reference (and, for the first
  // problem, starts: CUDA context, reference kernels through NVRTC), this process builds
  // the seeds the search measures first (NVRTC or the database): independent work that
  // used to wait for the setup. It is the search's own work and counts against its
  // budget (input.spent_s), as it did inside the search.
  const Clock::time_point setup_t0 = Clock::now();
  SetupResult setup = d.worker.setup(s.op.name(), problem, fresh_seed(), s.options.protocol, [&] {
    const Clock::time_point build_t0 = Clock::now();
    bench.prepare(input.seeds);
    input.spent_s = since(build_t0);
  });
  report.phases.setup += since(setup_t0) - input.spent_s;
  if (setup.has_copy) {
    report.copy = setup.copy;
  }
  report.device_bytes = setup.device_bytes;
  report.search_seconds += input.spent_s;
  {
    PhaseTimer timer(report.search_seconds);
    strategy.measure(bench, input, report);
  }
  std::optional<size_t> winner = bench.recheck_winner();
  size_t measured = bench.measured();
  report.variants = bench.take_variants(winner);
  report.winner = winner;
  report.worker_restarts = d.worker.restarts() - restarts;
  if (report.winner) {
    store_winner(s, d, problem, report);
  }
  report.worker = d.worker.seconds();
  report.worker -= worker;
  report.seconds = since(t0);
  Progress::Finished f;
  f.winner = report.winner_config;
  f.winner_us = report.winner_us;
  f.seconds = report.seconds;
  f.measured = measured;
  f.compiled = report.compiled;
  s.progress.finish_problem(f);
}

void compile_problem(const Session& s, size_t index, const Problem& problem,
                     ProblemReport& report) {
  const Clock::time_point t0 = Clock::now();
  std::vector<Config> configs = measured_configs(s, problem, report);
  std::vector<Candidate> candidates =
      describe_candidates(s, std::vector<TypedConfig>(configs.begin(), configs.end()), problem);
  s.progress.start_problem(index, problem.key(), candidates.size());
  report.phases.select += since(t0);
  std::vector<size_t> all(candidates.size());
  for (size_t i = 0; i < all.size(); ++i) {
    all[i] = i;
  }
  build(s, candidates, all, report);
  for (auto& c : candidates) {
    VariantReport v;
    v.config = c.source.config_id;
    v.variant_key = c.source.key;
    if (c.cubin.empty()) {
      v.outcome = cache::Outcome::compile_fail;
      v.message = c.compile_error;
    }
    report.variants.push_back(std::move(v));
  }
  report.seconds = since(t0);
  Progress::Finished f;
  f.seconds = report.seconds;
  f.compiled = report.compiled;
  s.progress.finish_problem(f);
}

} // namespace

Verdict judge(const Op& op, const Priors& priors, const Config& config, const Problem& problem,
              const std::string& arch, std::string* why) {
  auto verdict = [&](const Result<bool>& r, Verdict no) {
    if (!r && why) {
      *why = r.failure().message;
    }
    return r ? Verdict::measure : no;
  };
  Verdict v = verdict(op.check(config, problem, arch), Verdict::invalid);
  if (v == Verdict::measure) {
    v = verdict(op.worth_measuring(config, problem), Verdict::pruned);
  }
  if (v == Verdict::measure) {
    v = verdict(priors.allow(op, config, problem, arch), Verdict::pruned);
  }
  return v;
}

std::vector<Judged> judge_space(const Op& op, const Priors& priors, const Space& space,
                                const Problem& problem, const std::string& arch, int threads,
                                const std::function<bool(Verdict)>& keep, bool with_why,
                                size_t& skipped) {
  if (space.size() > k_max_space_size) {
    // parse_space and restrict_space refuse such spaces; one built by hand is a bug.
    throw Error(ErrorKind::internal,
                space.source + ": a walk of " + std::to_string(space.size()) + " combinations");
  }
  // Ranges of about 16K combinations (a few ms each), taken in turn by the threads; each
  // keeps its own results, joined in range order, so the order does not depend on timing.
  constexpr size_t k_range = size_t(1) << 14;
  struct Range {
    const Space* part;
    size_t begin, end;
    std::vector<Judged> out;
  };
  const std::vector<Space> parts = inert_parts(space, op.inert_params(problem));
  std::vector<Range> ranges;
  for (const Space& part : parts) {
    for (size_t b = 0; b < part.size(); b += k_range) {
      ranges.push_back({&part, b, std::min(part.size(), b + k_range), {}});
    }
  }
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::exception_ptr error;
  auto work = [&] {
    for (size_t r = next++; r < ranges.size(); r = next++) {
      Range& range = ranges[r];
      try {
        range.part->for_each(range.begin, range.end, [&](const Config& c) {
          std::string why;
          Verdict v = judge(op, priors, c, problem, arch, with_why ? &why : nullptr);
          if (keep(v)) {
            range.out.push_back({c, v, std::move(why)});
          }
        });
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        error = error ? error : std::current_exception();
        next = ranges.size();
      }
    }
  };
  std::vector<std::thread> pool;
  const size_t n = std::min(ranges.size(), size_t(std::max(1, threads)));
  for (size_t t = 1; t < n; ++t) {
    pool.emplace_back(work);
  }
  work();
  for (std::thread& t : pool) {
    t.join();
  }
  if (error) {
    std::rethrow_exception(error);
  }
  std::vector<Judged> out;
  for (Range& range : ranges) {
    std::move(range.out.begin(), range.out.end(), std::back_inserter(out));
  }
  skipped = space.size() - out.size();
  return out;
}

// The winner among correct measurements: the lowest median, except that variants
// whose medians lie within the noise of the fastest (at most 1% slower) count as tied, and a tie
// goes to the smallest variant id. Every process measuring the same candidates thus picks the same
// winner unless their measurements differ by more than the noise.
std::vector<size_t> preference_order(const std::vector<VariantReport>& v) {
  std::vector<size_t> ok;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].outcome == cache::Outcome::ok && v[i].timing.median_us > 0 &&
        v[i].eliminated_in_round == 0) {
      ok.push_back(i);
    }
  }
  std::sort(ok.begin(), ok.end(), [&](size_t a, size_t b) {
    if (v[a].timing.median_us != v[b].timing.median_us) {
      return v[a].timing.median_us < v[b].timing.median_us;
    }
    return v[a].config < v[b].config;
  });
  if (ok.empty()) {
    return ok;
  }
  const Timing& best = v[ok.front()].timing;
  // Half the p10-p90 spread of the fastest, never less than 0.5% and never more than
  // 1%: a noisy fastest must not hand the win to a clearly slower variant.
  double band =
      std::clamp(0.5 * (best.p90_us - best.p10_us), 0.005 * best.median_us, 0.01 * best.median_us);
  auto tied_end = std::find_if(ok.begin(), ok.end(), [&](size_t i) {
    return v[i].timing.median_us > best.median_us + band;
  });
  std::sort(ok.begin(), tied_end, [&](size_t a, size_t b) { return v[a].config < v[b].config; });
  return ok;
}

std::vector<Config> select_strategy(std::vector<Config> configs, const TuneOptions& o,
                                    ProblemReport& report) {
  return make_strategy(o)->select(std::move(configs), report);
}

bool TuneReport::compile_failed() const {
  for (const auto& p : problems) {
    if (p.compile_failures) {
      return true;
    }
  }
  return false;
}

SearchSpace load_search_space(const Op& op, const TuneOptions& options) {
  SearchSpace search;
  // Priors are checked against the file's own values, before --param narrows or
  // replaces them.
  search.space = load_op_space(op, options.space_file, {});
  std::string text;
  if (options.space_file.empty()) {
    text = template_file(op.space_path());
  } else {
    std::ifstream in(options.space_file, std::ios::binary);
    if (!in) {
      throw Error(ErrorKind::io, "cannot read the space file " + options.space_file);
    }
    std::ostringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  search.priors = parse_priors(text, search.space.source, search.space);
  restrict_space(search.space, options.param_overrides);
  return search;
}

std::vector<Problem> load_problems(const Op& op, const std::vector<std::string>& shapes) {
  std::vector<Problem> out;
  const auto& list = shapes.empty() ? op.default_shapes() : shapes;
  for (const auto& s : list) {
    out.push_back(op.make_problem(parse_fields(s, "--shape")));
  }
  return out;
}

TuneReport tune(const TuneOptions& options, Progress& progress) {
  const Clock::time_point t0 = Clock::now();
  const Op& op = find_op(options.op);
  SearchSpace search = load_search_space(op, options);
  std::vector<Problem> problems = load_problems(op, options.shapes);
  TuneReport report;
  report.op = op.name();
  report.database = options.db_path.empty() ? cache::default_database_path() : options.db_path;
  TuneOptions opts = options;
  if (opts.jobs <= 0) {
    opts.jobs = default_jobs();
  }

  cuda::DeviceInfo device;
  if (options.arch == "auto" || !options.compile_only) {
    std::string why;
    if (!cuda::gpu_available(&why)) {
      throw Error(ErrorKind::no_device,
                  why +
                      (options.compile_only
                           ? "; name the target instead, e.g. --arch sm_90a --compile-only"
                           : "; tuning needs a GPU (--compile-only --arch sm_90a works without)"));
    }
    device = cuda::query_device(0);
    report.device = device.summary();
  }
  report.arch = options.arch == "auto" ? device.arch() : options.arch;
  if (!options.compile_only && options.arch != "auto" && options.arch != device.arch()) {
    throw Error(ErrorKind::usage, "--arch " + options.arch + " does not match the GPU (" +
                                      device.arch() +
                                      "); use --arch auto to tune, or add "
                                      "--compile-only to cross-compile");
  }
  cache::Database db(report.database, cache::Database::Mode::read_write);
  const Session session{op, search, report.arch, db, opts, progress};
  auto new_problem = [&](const Problem& p) {
    ProblemReport r;
    r.problem = p;
    r.space_size = search.space.size();
    r.bytes = op.bytes(p);
    return r;
  };
  if (options.compile_only) {
    progress.start_run(op.name(), std::vector<Progress::Planned>(problems.size()));
    report.start_seconds = since(t0);
    for (size_t i = 0; i < problems.size(); ++i) {
      ProblemReport r = new_problem(problems[i]);
      compile_problem(session, i, problems[i], r);
      report.problems.push_back(std::move(r));
    }
    report.seconds = since(t0);
    return report;
  }
  std::unique_ptr<Strategy> strategy = make_strategy(opts);
  // The parent holds no CUDA context: all GPU work happens in the worker process.
  Worker worker(options.setup_timeout_s, options.measure_timeout_s);
  cache::DeviceRecord record = device_record(device);
  db.put_device(record);
  const Device gpu{record, record.key(), worker};

  // What the ETA knows in advance: which problems the database answers, and the
  // budget of the others. A problem is expected to start from tuned neighbours when
  // the database holds a winner of the op on this GPU, or an earlier problem of this
  // run is tuned first.
  std::vector<ProblemReport> reports;
  std::vector<Progress::Planned> plan;
  bool neighbours = false;
  if (strategy->transfers() && opts.transfer > 0) {
    for (const auto& w : db.winners()) {
      neighbours = neighbours || (w.device_key == gpu.key && w.op == op.name());
    }
  }
  for (const auto& p : problems) {
    reports.push_back(new_problem(p));
    Progress::Planned planned;
    planned.cached = answer_from_store(session, gpu, p, reports.back());
    if (!planned.cached) {
      planned.budget_s = strategy->budget_s(neighbours);
      neighbours = neighbours || (strategy->transfers() && opts.transfer > 0);
    }
    plan.push_back(planned);
  }
  progress.start_run(op.name(), plan);
  report.start_seconds = since(t0);
  for (size_t i = 0; i < problems.size(); ++i) {
    ProblemReport& r = reports[i];
    r.flops = op.flops(problems[i]);
    // Asked again: another process may have stored it meanwhile.
    if (r.cached || answer_from_store(session, gpu, problems[i], r)) {
      progress.start_problem(i, problems[i].key(), 0);
      Progress::Finished f;
      f.cached = true;
      f.winner = r.winner_config;
      f.winner_us = r.winner_us;
      progress.finish_problem(f);
      report.problems.push_back(std::move(r));
      continue;
    }
    tune_problem(session, gpu, *strategy, i, problems[i], r);
    report.problems.push_back(std::move(r));
  }
  report.seconds = since(t0);
  return report;
}

} // namespace autotune
