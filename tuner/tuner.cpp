#include "tuner.hpp"

#include "compile.hpp"
#include "progress.hpp"
#include "runtime/base/hash.hpp"
#include "runtime/base/log.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/templates.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

namespace autotune {
namespace {

using Clock = std::chrono::steady_clock;

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

// Measures one candidate: resource limits, reference check, timing.
VariantReport measure(const Op& op, const Problem& problem, const cuda::DeviceInfo& device,
                      Candidate& c, Testbed& bed, const TimingProtocol& protocol) {
  VariantReport v;
  v.config = c.source.config_id;
  v.variant_key = c.source.key;
  cuda::Module module = cuda::load_module(c.cubin);
  CUfunction f = cuda::get_function(module, c.source.kernel.c_str());
  LaunchGeometry g = op.geometry(c.config, problem);
  int max_threads = 0;
  AUTOTUNE_CU(cuda::driver().cuFuncGetAttribute(&max_threads,
                                                CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
  unsigned threads = g.block[0] * g.block[1] * g.block[2];
  if (threads > unsigned(max_threads)) {
    v.outcome = cache::Outcome::resource;
    v.message = "needs " + std::to_string(threads) + " threads per block, the compiled kernel " +
                "allows " + std::to_string(max_threads) + " (registers)";
    return v;
  }
  if (g.dynamic_smem > unsigned(device.smem_per_block_optin)) {
    v.outcome = cache::Outcome::resource;
    v.message = "needs " + std::to_string(g.dynamic_smem) + " bytes of shared memory";
    return v;
  }
  CheckResult check = bed.check(f, c.config);
  v.rel_err = check.rel_err;
  if (!check.passed) {
    v.outcome = cache::Outcome::wrong;
    v.message = check.message;
    return v;
  }
  v.timing = bed.time(f, c.config, protocol);
  v.outcome = cache::Outcome::ok;
  return v;
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
  v.message = r.message;
  v.reused_result = true;
  return v;
}

// Order of preference: lower median; equal medians are broken by the variant id
// so every process picks the same winner from the same measurements.
bool better(const VariantReport& a, const VariantReport& b) {
  if (a.timing.median_us != b.timing.median_us) {
    return a.timing.median_us < b.timing.median_us;
  }
  return a.config < b.config;
}

void tune_problem(const Op& op, const Space& space, const Problem& problem,
                  const cuda::DeviceInfo& device, const cache::DeviceRecord& dev,
                  cache::Database& db, const TuneOptions& options, Progress& progress,
                  ProblemReport& report) {
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
  std::vector<Candidate> candidates;
  build_candidates(op, configs, problem, arch, db, options.jobs, progress, candidates, report);

  Testbed bed(op, problem, device);
  bed.randomize(fresh_seed());
  if (op.memory_bound()) {
    report.copy = bed.time_copy(options.protocol);
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    progress.update("measure", problem.key(), i + 1, candidates.size());
    if (!options.force) {
      if (auto stored = db.find_result(dev.key(), c.source.key, problem.key())) {
        report.variants.push_back(from_record(*stored));
        continue;
      }
    }
    VariantReport v;
    if (c.cubin.empty()) {
      v.config = c.source.config_id;
      v.variant_key = c.source.key;
      v.outcome = cache::Outcome::compile_fail;
      v.message = c.compile_error;
    } else {
      try {
        v = measure(op, problem, device, c, bed, options.protocol);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::cuda) {
          throw;
        }
        // A fault leaves the context unusable. Record it so that a rerun skips this
        // variant and resumes after it, then stop.
        v.config = c.source.config_id;
        v.variant_key = c.source.key;
        v.outcome = cache::Outcome::fault;
        v.message = e.what();
        db.put_result(to_record(dev.key(), op, problem, v));
        progress.finish();
        throw Error(ErrorKind::cuda, "variant " + v.config + " faulted (" + e.what() +
                                         "); its result is recorded, rerun the same command "
                                         "to resume after it");
      }
    }
    db.put_result(to_record(dev.key(), op, problem, v));
    report.variants.push_back(std::move(v));
  }
  progress.finish();

  // The best correct variant must also pass on a second, independent input set.
  std::vector<size_t> order;
  for (size_t i = 0; i < report.variants.size(); ++i) {
    if (report.variants[i].outcome == cache::Outcome::ok) {
      order.push_back(i);
    }
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return better(report.variants[a], report.variants[b]); });
  bed.randomize(fresh_seed());
  for (size_t i : order) {
    VariantReport& v = report.variants[i];
    auto it = std::find_if(candidates.begin(), candidates.end(),
                           [&](const Candidate& c) { return c.source.key == v.variant_key; });
    if (it == candidates.end() || it->cubin.empty()) {
      continue;
    }
    cuda::Module module = cuda::load_module(it->cubin);
    CheckResult again = bed.check(cuda::get_function(module, it->source.kernel.c_str()), it->config);
    if (!again.passed) {
      v.outcome = cache::Outcome::wrong;
      v.message = "second input set: " + again.message;
      db.put_result(to_record(dev.key(), op, problem, v));
      continue;
    }
    report.winner = i;
    break;
  }
  report.device_bytes = bed.device_bytes();
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

  std::optional<cuda::PrimaryContext> context;
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
  context.emplace(0);
  cache::DeviceRecord dev = device_record(device);
  db.put_device(dev);
  for (const auto& p : problems) {
    ProblemReport r;
    r.problem = p;
    r.space_size = space.size();
    r.bytes = op.bytes(p);
    r.flops = op.flops(p);
    tune_problem(op, space, p, device, dev, db, opts, progress, r);
    report.problems.push_back(std::move(r));
  }
  return report;
}

} // namespace autotune
