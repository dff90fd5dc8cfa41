// `autotune regress`: compares stored winner timings of two databases (or the
// baseline's winners re-timed on this GPU with --retime) and reports regressions
// as a table, JUnit XML and Markdown. The comparison rule is in
// cache/maintenance.hpp (compare_timings) and SCHEMA.md.
#include "args.hpp"
#include "commands.hpp"
#include "report_html.hpp"

#include "cache/maintenance.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/op.hpp"
#include "runtime/ops/space.hpp"
#include "testbed.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace autotune {
namespace {

namespace fs = std::filesystem;
using cache::Comparison;
using cache::RegressReport;
using cache::TimedEntry;
using cache::Verdict;

// Small enough to catch a real slowdown of a tuned kernel, large enough that the
// clock and thermal drift between two CI runs on one GPU model stays below it.
constexpr double k_default_threshold_pct = 5.0;

// Re-timing seeds: fixed, so two nightly runs check against identical inputs.
constexpr unsigned long long k_retime_seed = 20250101;

struct RegressArgs {
  std::string baseline;
  std::string current;
  double threshold_pct = k_default_threshold_pct;
  std::string junit;
  std::string markdown;
  bool force = false; // overwrite existing --junit / --markdown files
  bool retime = false;
  cache::Selector selector;
};

// Whether two paths name one file: equal text, or both exist and are one inode.
bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) {
    return false;
  }
  std::error_code ec;
  return a == b || fs::equivalent(a, b, ec);
}

// Refuses, before anything is compared, a report path that would overwrite an
// existing file without --force, or an input database even with it.
void check_report_path(const RegressArgs& a, const std::string& path, const char* option) {
  if (path.empty()) {
    return;
  }
  if (same_file(path, a.baseline) || same_file(path, a.current)) {
    throw Error(ErrorKind::usage, std::string("autotune regress: ") + option + " " + path +
                                      " is an input database; refusing to write a report "
                                      "over it");
  }
  std::error_code ec;
  fs::file_status status = fs::symlink_status(path, ec);
  if (fs::is_directory(fs::status(path, ec))) {
    throw Error(ErrorKind::usage,
                std::string("autotune regress: ") + option + " " + path + " is a directory");
  }
  if (fs::exists(status) && !a.force) {
    throw Error(ErrorKind::usage, std::string("autotune regress: ") + option + " " + path +
                                      " exists; add --force to overwrite it");
  }
}

RegressArgs parse_regress_args(int argc, char** argv) {
  RegressArgs a;
  for (int i = 1; i < argc; ++i) {
    std::string o = argv[i];
    auto value = [&]() { return option_value(i, argc, argv); };
    if (o == "--baseline") {
      a.baseline = value();
    } else if (o == "--current") {
      a.current = value();
    } else if (o == "--threshold") {
      std::string text = value();
      char* end = nullptr;
      a.threshold_pct = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !(a.threshold_pct >= 0) ||
          !std::isfinite(a.threshold_pct)) {
        throw Error(ErrorKind::usage,
                    "--threshold: expected a non-negative percentage, got '" + text + "'");
      }
    } else if (o == "--junit") {
      a.junit = value();
    } else if (o == "--markdown") {
      a.markdown = value();
    } else if (o == "--retime") {
      a.retime = true;
    } else if (o == "--force") {
      a.force = true;
    } else if (o == "--op") {
      a.selector.op = value();
    } else if (o == "--device") {
      a.selector.device = value();
    } else if (o == "--shape") {
      a.selector.shape = value();
    } else {
      throw Error(ErrorKind::usage, "autotune regress: unknown option '" + o + "'");
    }
  }
  if (a.baseline.empty()) {
    throw Error(ErrorKind::usage, "autotune regress needs --baseline A.db");
  }
  if (a.retime == !a.current.empty()) {
    throw Error(ErrorKind::usage,
                "autotune regress needs either --current B.db or --retime (not both)");
  }
  check_report_path(a, a.junit, "--junit");
  check_report_path(a, a.markdown, "--markdown");
  if (!a.junit.empty() && same_file(a.junit, a.markdown)) {
    throw Error(ErrorKind::usage,
                "autotune regress: --junit and --markdown name the same file " + a.junit);
  }
  return a;
}

struct TempFile {
  std::string path;
  ~TempFile() {
    if (!path.empty()) {
      std::error_code ec;
      for (const char* suffix : {"", "-wal", "-shm"}) {
        fs::remove(path + suffix, ec);
      }
    }
  }
};

std::vector<TimedEntry> timings_of(const std::string& path, const cache::Selector& selector) {
  TempFile migrated;
  cache::Database db = cache::open_source(path, migrated.path);
  return cache::stored_timings(db, selector);
}

// "12.30 [12.10..12.60]": the median and its p10..p90 range.
std::string timing_text(const TimedEntry& t) {
  std::string text = fixed_or_dash(t.median_us);
  if (t.samples > 0) {
    text += " [" + fixed_or_dash(t.p10_us) + ".." + fixed_or_dash(t.p90_us) + "]";
  }
  return text;
}

std::string describe(const TimedEntry& t) {
  return t.op + " " + t.problem + " on " + t.gpu;
}

std::string md_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else {
      out += c;
    }
  }
  return out;
}

std::string why(const Comparison& c, double threshold_pct) {
  switch (c.verdict) {
  case Verdict::regression:
    return "slower by " + fixed_or_dash(c.change_pct, 1) + "% (threshold " +
           fixed_or_dash(threshold_pct, 1) + "%) and beyond the noise of both sides (current p10 " +
           fixed_or_dash(c.current.p10_us) + " us > baseline p90 " +
           fixed_or_dash(c.baseline.p90_us) + " us)";
  case Verdict::failed:
    return "could not be re-timed: " + c.current.failure;
  case Verdict::improvement:
    return "faster by " + fixed_or_dash(-c.change_pct, 1) + "%";
  case Verdict::same:
    return "within threshold or noise";
  }
  return "";
}

void print_table(const RegressReport& r) {
  std::printf("%-10s  %-14s  %-60s  %-22s  %24s  %24s  %8s\n", "VERDICT", "OP", "PROBLEM", "GPU",
              "BASELINE_US [p10..p90]", "CURRENT_US [p10..p90]", "CHANGE");
  for (const Comparison& c : r.compared) {
    std::printf("%-10s  %-14s  %-60s  %-22s  %24s  %24s  %7s%%\n", cache::to_string(c.verdict),
                c.baseline.op.c_str(), c.baseline.problem.c_str(), c.baseline.gpu.c_str(),
                timing_text(c.baseline).c_str(),
                c.verdict == Verdict::failed ? "-" : timing_text(c.current).c_str(),
                c.verdict == Verdict::failed ? "-" : fixed_or_dash(c.change_pct, 1).c_str());
  }
  for (const TimedEntry& t : r.only_baseline) {
    std::printf("missing in current: %s\n", describe(t).c_str());
  }
  for (const TimedEntry& t : r.only_current) {
    std::printf("missing in baseline: %s\n", describe(t).c_str());
  }
  std::printf("%zu compared: %zu regressions, %zu failed, %zu faster, %zu same; %zu only in "
              "baseline, %zu only in current (threshold %s%%)\n",
              r.compared.size(), r.count(Verdict::regression), r.count(Verdict::failed),
              r.count(Verdict::improvement), r.count(Verdict::same), r.only_baseline.size(),
              r.only_current.size(), fixed_or_dash(r.threshold_pct, 1).c_str());
}

// Writes `text` to `path` through a file beside it, so that `path` is never
// half-written: renamed over an existing file with `force`, otherwise linked into
// place, which fails if a file appeared there since the arguments were checked.
void write_file(const std::string& path, const std::string& text, bool force) {
  std::random_device random;
  std::string staged = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(random());
  {
    std::ofstream out(staged, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(staged, ec);
      throw Error(ErrorKind::io, "cannot write " + path);
    }
  }
  std::error_code ec;
  if (force) {
    fs::rename(staged, path, ec);
  } else if (::link(staged.c_str(), path.c_str()) != 0) {
    ec = std::error_code(errno, std::generic_category());
  }
  std::error_code ignored;
  fs::remove(staged, ignored);
  if (ec) {
    throw Error(ErrorKind::io,
                "cannot write " + path + ": " + ec.message() +
                    (ec == std::errc::file_exists ? " (add --force to overwrite it)" : ""));
  }
}

std::string junit_xml(const RegressReport& r) {
  size_t failures = r.count(Verdict::regression) + r.count(Verdict::failed);
  size_t skipped = r.only_baseline.size() + r.only_current.size();
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += "<testsuites>\n<testsuite name=\"autotune.regress\" tests=\"" +
       std::to_string(r.compared.size() + skipped) + "\" failures=\"" + std::to_string(failures) +
       "\" skipped=\"" + std::to_string(skipped) + "\">\n";
  auto testcase = [&](const TimedEntry& t) {
    return "  <testcase classname=\"" + html_escape(t.op) + "\" name=\"" +
           html_escape(t.problem + " on " + t.gpu) + "\"";
  };
  for (const Comparison& c : r.compared) {
    x += testcase(c.baseline);
    if (c.verdict == Verdict::regression || c.verdict == Verdict::failed) {
      x += ">\n    <failure message=\"" + html_escape(why(c, r.threshold_pct)) + "\">baseline " +
           html_escape(timing_text(c.baseline)) + " us, current " +
           html_escape(timing_text(c.current)) + " us</failure>\n  </testcase>\n";
    } else {
      x += "/>\n";
    }
  }
  for (const TimedEntry& t : r.only_baseline) {
    x += testcase(t) + ">\n    <skipped message=\"missing in current\"/>\n  </testcase>\n";
  }
  for (const TimedEntry& t : r.only_current) {
    x += testcase(t) + ">\n    <skipped message=\"missing in baseline\"/>\n  </testcase>\n";
  }
  x += "</testsuite>\n</testsuites>\n";
  return x;
}

std::string markdown(const RegressReport& r) {
  std::string m = "## autotune regress\n\n";
  m += std::to_string(r.compared.size()) + " compared: **" +
       std::to_string(r.count(Verdict::regression)) + " regressions**, " +
       std::to_string(r.count(Verdict::failed)) + " failed, " +
       std::to_string(r.count(Verdict::improvement)) + " faster; threshold " +
       fixed_or_dash(r.threshold_pct, 1) +
       "%, and a change counts only beyond both sides' p10..p90.\n\n";
  m += "| verdict | op | problem | GPU | baseline µs [p10..p90] | current µs [p10..p90] | change "
       "|\n";
  m += "|---|---|---|---|---:|---:|---:|\n";
  for (const Comparison& c : r.compared) {
    bool failed = c.verdict == Verdict::failed;
    m += "| " + std::string(cache::to_string(c.verdict)) + " | " + md_escape(c.baseline.op) +
         " | `" + md_escape(c.baseline.problem) + "` | " + md_escape(c.baseline.gpu) + " | " +
         timing_text(c.baseline) + " | " + (failed ? "-" : timing_text(c.current)) + " | " +
         (failed ? md_escape(c.current.failure) : fixed_or_dash(c.change_pct, 1) + "%") + " |\n";
  }
  if (!r.only_baseline.empty() || !r.only_current.empty()) {
    m += "\nMissing entries:\n\n";
    for (const TimedEntry& t : r.only_baseline) {
      m += "- in current: " + md_escape(t.op) + " `" + md_escape(t.problem) + "` on " +
           md_escape(t.gpu) + "\n";
    }
    for (const TimedEntry& t : r.only_current) {
      m += "- in baseline: " + md_escape(t.op) + " `" + md_escape(t.problem) + "` on " +
           md_escape(t.gpu) + "\n";
    }
  }
  return m;
}

// Re-times the baseline's winners that were tuned on this GPU model, each from
// its stored cubin (checksum verified), checked against the reference first.
std::vector<TimedEntry> retime(const std::string& baseline_path, const cache::Selector& selector,
                               std::vector<TimedEntry>& baseline) {
  TempFile migrated;
  cache::Database db = cache::open_source(baseline_path, migrated.path);
  baseline = cache::stored_timings(db, selector);

  std::optional<cuda::PrimaryContext> context;
  cuda::DeviceInfo device;
  try {
    context.emplace(0);
    device = cuda::query_device(0);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::no_device) {
      throw;
    }
    throw Error(ErrorKind::no_device,
                std::string("regress --retime re-times stored winners and needs a GPU: ") +
                    e.what() + " (compare two databases with --current B.db instead)");
  }
  int cc = device.cc_major * 10 + device.cc_minor;
  TimingProtocol protocol;
  std::vector<TimedEntry> current;
  for (const cache::Entry& e : cache::select_entries(db, selector)) {
    if (!e.device || e.device->name != device.name || e.device->cc != cc ||
        e.device->sm_count != device.sm_count) {
      continue; // tuned on another GPU model: listed as missing in current
    }
    const cache::WinnerRecord& w = e.winner;
    TimedEntry t;
    t.match_key = cache::match_key(device.name, cc, device.sm_count, w.op, w.problem);
    // Only the winner stored_timings chose for this key is re-timed.
    bool chosen = false;
    for (const TimedEntry& b : baseline) {
      chosen = chosen || (b.match_key == t.match_key && b.variant_key == w.variant_key &&
                          b.template_hash == w.template_hash);
    }
    if (!chosen) {
      continue;
    }
    t.op = w.op;
    t.problem = w.problem;
    t.gpu = device.name;
    t.config = w.config;
    t.template_hash = w.template_hash;
    t.nvrtc_version = w.nvrtc_version;
    t.variant_key = w.variant_key;
    std::fprintf(stderr, "re-timing %s %s ...\n", w.op.c_str(), w.problem.c_str());
    try {
      if (!e.variant) {
        throw Error(ErrorKind::database, "variant " + w.variant_key + " is not stored");
      }
      const Op& op = find_op(w.op);
      Problem problem = op.make_problem(parse_fields(w.problem, "stored problem"));
      Config config = parse_fields(w.config, "stored configuration");
      // The op computes launch geometry from these values: a stored 0 would divide
      // by zero. Checked against the op's limits like any --param.
      check_config(op_space(op), config, "stored configuration " + w.config);
      std::string cubin = db.load_cubin(e.variant->cubin_sha256);
      cuda::Module module = cuda::load_module(cubin);
      CUfunction fn = cuda::get_function(module, e.variant->kernel.c_str());
      cuda::allow_dynamic_smem(fn, op.geometry(config, problem).dynamic_smem);
      Testbed bed(op, problem, device);
      bed.randomize(k_retime_seed);
      CheckResult check = bed.check(fn, config);
      if (!check.passed) {
        throw Error(ErrorKind::check, "wrong result: " + check.message);
      }
      Timing timing = bed.time(fn, config, protocol);
      t.median_us = timing.median_us;
      t.p10_us = timing.p10_us;
      t.p90_us = timing.p90_us;
      t.samples = timing.samples;
    } catch (const cuda::CudaError& error) {
      if (error.sticky()) {
        throw; // the context is gone; nothing after this can be measured
      }
      t.failure = error.what();
    } catch (const Error& error) {
      if (error.kind() == ErrorKind::no_device) {
        throw;
      }
      t.failure = error.what();
    }
    current.push_back(t);
  }
  return current;
}

} // namespace

int run_regress_command(int argc, char** argv) {
  RegressArgs a = parse_regress_args(argc, argv);
  std::vector<TimedEntry> baseline;
  std::vector<TimedEntry> current;
  if (a.retime) {
    current = retime(a.baseline, a.selector, baseline);
  } else {
    baseline = timings_of(a.baseline, a.selector);
    current = timings_of(a.current, a.selector);
  }
  RegressReport report = cache::compare_timings(baseline, current, a.threshold_pct);
  print_table(report);
  if (!a.junit.empty()) {
    write_file(a.junit, junit_xml(report), a.force);
  }
  if (!a.markdown.empty()) {
    write_file(a.markdown, markdown(report), a.force);
  }
  for (const Comparison& c : report.compared) {
    if (c.verdict == Verdict::regression || c.verdict == Verdict::failed) {
      std::fprintf(stderr, "%s: %s: %s\n", cache::to_string(c.verdict),
                   describe(c.baseline).c_str(), why(c, a.threshold_pct).c_str());
    }
  }
  return report.count(Verdict::regression) + report.count(Verdict::failed) > 0 ? 1 : 0;
}

} // namespace autotune
