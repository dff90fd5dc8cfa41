#include "tuner.hpp"

#include "compile.hpp"
#include "progress.hpp"
#include "worker.hpp"
#include "runtime/base/hash.hpp"
#include "runtime/base/log.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/templates.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

namespace autotune {
namespace {

using Clock = std::chrono::steady_clock;

// Spaces with more valid configurations than this are sampled, never enumerated.
constexpr size_t k_max_exhaustive = 4096;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Candidate {
  Config config;
  VariantSource source;
  std::string cubin; // empty when compilation failed
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

// Valid configurations of the space for a problem; counts the invalid ones.
std::vector<Config> valid_configs(const Op& op, const Space& space, const Problem& problem,
                                  const std::string& arch, size_t& invalid) {
  std::vector<Config> out;
  invalid = 0;
  for (auto& c : space.enumerate()) {
    if (op.check(c, problem, arch) && op.worth_measuring(c, problem)) {
      out.push_back(std::move(c));
    } else {
      ++invalid;
    }
  }
  return out;
}

// Compiles what the database does not hold yet; stores each new cubin at once.
void build_candidates(const Op& op, const std::vector<Config>& configs, const Problem& problem,
                      const std::string& arch, cache::Database& db, int jobs, Progress& progress,
                      std::vector<Candidate>& candidates, ProblemReport& report) {
  candidates.clear();
  for (const auto& c : configs) {
    candidates.push_back({c, describe_variant(op, c, problem, arch), {}, {}});
  }
  std::vector<CompileJob> work;
  std::vector<size_t> owner;
  for (size_t i = 0; i < candidates.size(); ++i) {
    auto stored = db.find_variant(candidates[i].source.key);
    if (stored) {
      candidates[i].cubin = db.load_cubin(stored->cubin_sha256);
      ++report.cubins_reused;
    } else {
      work.push_back({&candidates[i].source});
      owner.push_back(i);
    }
  }
  if (work.empty()) {
    return;
  }
  auto t0 = Clock::now();
  std::string what = problem.key();
  compile_all(work, jobs, [&](CompileJob& job, size_t finished) {
    progress.update("compile", what, finished, work.size());
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
    db.put_variant(r, job.output->binary);
  });
  progress.finish();
  report.compile_seconds = since(t0);
  for (size_t j = 0; j < work.size(); ++j) {
    Candidate& c = candidates[owner[j]];
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

cache::ResultRecord to_record(const std::string& device_key, const Op& op, const Problem& problem,
                              const VariantReport& v) {
  cache::ResultRecord r;
  r.device_key = device_key;
  r.op = op.name();
  r.problem = problem.key();
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
  return r;
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

// Successive halving (k_halving_eta, tuner.hpp): every candidate gets a cheap
// measurement, the best quarter a four times longer one, and so on until one is left
// or the budget is spent.
TimingProtocol round_protocol(const TimingProtocol& full, int round, int rounds) {
  if (round + 1 >= rounds) {
    return full;
  }
  TimingProtocol p = full;
  double scale = std::pow(double(k_halving_eta), double(rounds - 1 - round));
  p.warmup = 1;
  p.min_samples = std::max(3, int(full.min_samples / scale));
  p.max_samples = std::max(p.min_samples, int(full.max_samples / scale));
  p.min_seconds = full.min_seconds / scale;
  p.max_seconds = std::max(0.005, full.max_seconds / scale);
  return p;
}

void tune_problem(const Op& op, const Space& space, const Problem& problem,
                  const cuda::DeviceInfo& device, const cache::DeviceRecord& dev,
                  cache::Database& db, const TuneOptions& options, Worker& worker,
                  Progress& progress, ProblemReport& report) {
  auto t0 = Clock::now();
  const std::string arch = device.arch();
  const std::string& thash = template_hash(op.template_path());
  const std::string nvrtc = cuda::nvrtc_version();
  if (!options.force) {
    if (auto w = db.find_winner(dev.key(), op.name(), problem.key(), thash, nvrtc)) {
      report.cached = true;
      report.winner_config = w->config;
      report.winner_us = w->median_us;
      report.seconds = since(t0);
      return;
    }
  }
  auto configs = valid_configs(op, space, problem, arch, report.invalid);
  configs = select_strategy(configs, options, report);
  std::vector<Candidate> candidates;
  build_candidates(op, configs, problem, arch, db, options.jobs, progress, candidates, report);

  SetupResult setup = worker.setup(op.name(), problem, fresh_seed(), options.protocol);
  if (setup.has_copy) {
    report.copy = setup.copy;
  }
  report.device_bytes = setup.device_bytes;

  // Outcomes known without measuring: resumed results and compile failures.
  std::vector<VariantReport> reports(candidates.size());
  std::vector<size_t> pending;
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    VariantReport& v = reports[i];
    v.config = c.source.config_id;
    v.variant_key = c.source.key;
    if (!options.force) {
      if (auto stored = db.find_result(dev.key(), c.source.key, problem.key())) {
        v = from_record(*stored);
        continue;
      }
    }
    if (c.cubin.empty()) {
      v.outcome = cache::Outcome::compile_fail;
      v.message = c.compile_error;
      db.put_result(to_record(dev.key(), op, problem, v));
      continue;
    }
    pending.push_back(i);
  }

  auto measure = [&](size_t i, const TimingProtocol& protocol) {
    Candidate& c = candidates[i];
    MeasureResult m = worker.measure(c.source.config_id, c.source.kernel, c.cubin, protocol);
    VariantReport& v = reports[i];
    v.outcome = m.outcome;
    v.timing = m.timing;
    v.rel_err = m.rel_err;
    v.sm_clock_mhz = m.sm_clock_mhz;
    v.message = m.message;
  };

  int rounds = 1;
  if (options.budget_s > 0) {
    while (std::pow(double(k_halving_eta), double(rounds)) < double(pending.size())) {
      ++rounds;
    }
  }
  auto measure_start = Clock::now();
  for (int round = 0; round < rounds && !pending.empty(); ++round) {
    TimingProtocol protocol = round_protocol(options.protocol, round, rounds);
    bool last = round + 1 == rounds;
    std::string stage = rounds > 1 ? "round " + std::to_string(round + 1) : "measure";
    for (size_t k = 0; k < pending.size(); ++k) {
      progress.update(stage, problem.key(), k + 1, pending.size());
      measure(pending[k], protocol);
      const VariantReport& v = reports[pending[k]];
      // Failures are final in any round; timings only from the last.
      if (last || v.outcome != cache::Outcome::ok) {
        db.put_result(to_record(dev.key(), op, problem, v));
      }
    }
    progress.finish();
    if (last) {
      break;
    }
    // Keep the best 1/eta of the correct ones for a longer measurement.
    std::vector<size_t> ok;
    for (size_t i : pending) {
      if (reports[i].outcome == cache::Outcome::ok) {
        ok.push_back(i);
      }
    }
    std::sort(ok.begin(), ok.end(), [&](size_t a, size_t b) {
      return reports[a].timing.median_us < reports[b].timing.median_us;
    });
    size_t keep = std::max<size_t>(1, (ok.size() + k_halving_eta - 1) / k_halving_eta);
    for (size_t k = keep; k < ok.size(); ++k) {
      // Measured only cheaply: kept for the report, never a winner, not stored
      // (a resumed session measures it again).
      reports[ok[k]].eliminated_in_round = round + 1;
    }
    ok.resize(std::min(keep, ok.size()));
    double spent = since(measure_start);
    double per_candidate = spent / double(std::max<size_t>(1, pending.size()));
    double next_cost = per_candidate * k_halving_eta * double(ok.size());
    if (spent + next_cost > options.budget_s && round + 2 < rounds) {
      // No time for the intermediate rounds: go straight to the final one.
      round = rounds - 2;
    }
    if (spent + next_cost > options.budget_s * 1.5) {
      // Over budget: skip to the final round with only the best eta survivors. Their
      // cheap timings cannot pick the winner: one noisy cheap median of the fastest
      // widens the tie band (preference_order) over variants a few percent slower.
      const size_t finalists = std::min<size_t>(ok.size(), k_halving_eta);
      for (size_t k = finalists; k < ok.size(); ++k) {
        reports[ok[k]].eliminated_in_round = round + 1;
      }
      ok.resize(finalists);
      report.budget_exhausted = true;
      round = rounds - 2;
    }
    pending = ok;
  }

  // The winner must also pass on a second, independent input set.
  std::vector<size_t> order = preference_order(reports);
  if (!order.empty()) {
    worker.reseed(fresh_seed());
  }
  for (size_t i : order) {
    Candidate& c = candidates[i];
    if (c.cubin.empty()) {
      continue;
    }
    MeasureResult again =
        worker.measure(c.source.config_id, c.source.kernel, c.cubin, options.protocol, true);
    if (again.outcome != cache::Outcome::ok) {
      reports[i].outcome = again.outcome;
      reports[i].message = "second input set: " + again.message;
      db.put_result(to_record(dev.key(), op, problem, reports[i]));
      continue;
    }
    report.winner = i;
    break;
  }
  report.variants = std::move(reports);
  report.worker_restarts = worker.restarts();
  if (report.winner) {
    const VariantReport& w = report.variants[*report.winner];
    cache::WinnerRecord r;
    r.device_key = dev.key();
    r.op = op.name();
    r.problem = problem.key();
    r.template_hash = thash;
    r.nvrtc_version = nvrtc;
    r.variant_key = w.variant_key;
    r.config = w.config;
    r.kernel = op.kernel_name();
    r.median_us = w.timing.median_us;
    db.put_winner(r);
    report.winner_config = w.config;
    report.winner_us = w.timing.median_us;
  }
  report.seconds = since(t0);
}

void compile_problem(const Op& op, const Space& space, const Problem& problem,
                     const std::string& arch, cache::Database& db, const TuneOptions& options,
                     Progress& progress, ProblemReport& report) {
  auto t0 = Clock::now();
  auto configs = valid_configs(op, space, problem, arch, report.invalid);
  std::vector<Candidate> candidates;
  build_candidates(op, configs, problem, arch, db, options.jobs, progress, candidates, report);
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
}

} // namespace

// The winner among correct measurements: the lowest median, except that variants
// whose medians lie within the noise of the fastest (at most 1% slower) count as tied, and a tie goes
// to the smallest variant id. Every process measuring the same candidates thus
// picks the same winner unless their measurements differ by more than the noise.
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
  double band = std::clamp(0.5 * (best.p90_us - best.p10_us), 0.005 * best.median_us,
                           0.01 * best.median_us);
  auto tied_end = std::find_if(ok.begin(), ok.end(), [&](size_t i) {
    return v[i].timing.median_us > best.median_us + band;
  });
  std::sort(ok.begin(), tied_end, [&](size_t a, size_t b) { return v[a].config < v[b].config; });
  return ok;
}

// Exhaustive search measures every valid configuration. Random sampling picks
// `samples` of them (seeded, so every rank samples the same ones); spaces larger
// than k_max_exhaustive are sampled even when exhaustive search was asked for.
std::vector<Config> select_strategy(std::vector<Config> configs, const TuneOptions& o,
                                    ProblemReport& report) {
  bool random = o.strategy == "random" || configs.size() > k_max_exhaustive;
  if (!random) {
    return configs;
  }
  size_t n = o.samples > 0 ? size_t(o.samples) : std::min(configs.size(), k_max_exhaustive);
  if (n >= configs.size()) {
    return configs;
  }
  std::mt19937_64 rng(o.sample_seed);
  std::shuffle(configs.begin(), configs.end(), rng);
  configs.resize(n);
  report.sampled = n;
  return configs;
}

bool TuneReport::compile_failed() const {
  for (const auto& p : problems) {
    if (p.compile_failures) {
      return true;
    }
  }
  return false;
}

Space load_space(const Op& op, const TuneOptions& options) {
  Space space;
  if (!options.space_file.empty()) {
    std::ifstream in(options.space_file, std::ios::binary);
    if (!in) {
      throw Error(ErrorKind::io, "cannot read the space file " + options.space_file);
    }
    std::ostringstream s;
    s << in.rdbuf();
    space = parse_space(s.str(), options.space_file);
  } else {
    space = parse_space(template_file(op.space_path()), std::string("templates/") + op.space_path());
  }
  restrict_space(space, options.param_overrides);
  return space;
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
  const Op& op = find_op(options.op);
  Space space = load_space(op, options);
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
                  why + (options.compile_only
                             ? "; name the target instead, e.g. --arch sm_90a --compile-only"
                             : "; tuning needs a GPU (--compile-only --arch sm_90a works without)"));
    }
    device = cuda::query_device(0);
    report.device = device.summary();
  }
  report.arch = options.arch == "auto" ? device.arch() : options.arch;
  if (!options.compile_only && options.arch != "auto" && options.arch != device.arch()) {
    throw Error(ErrorKind::usage, "--arch " + options.arch + " does not match the GPU (" +
                                      device.arch() + "); use --arch auto to tune, or add "
                                      "--compile-only to cross-compile");
  }
  cache::Database db(report.database, cache::Database::Mode::read_write);
  if (options.compile_only) {
    for (const auto& p : problems) {
      ProblemReport r;
      r.problem = p;
      r.space_size = space.size();
      r.bytes = op.bytes(p);
      compile_problem(op, space, p, report.arch, db, opts, progress, r);
      report.problems.push_back(std::move(r));
    }
    return report;
  }
  // The parent holds no CUDA context: all GPU work happens in the worker process.
  Worker worker(options.setup_timeout_s, options.measure_timeout_s);
  cache::DeviceRecord dev = device_record(device);
  db.put_device(dev);
  for (const auto& p : problems) {
    ProblemReport r;
    r.problem = p;
    r.space_size = space.size();
    r.bytes = op.bytes(p);
    r.flops = op.flops(p);
    tune_problem(op, space, p, device, dev, db, opts, worker, progress, r);
    report.problems.push_back(std::move(r));
  }
  return report;
}

} // namespace autotune
