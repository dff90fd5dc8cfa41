#include "cli.hpp"

#include "args.hpp"
#include "commands.hpp"
#include "compile.hpp"

#include "progress.hpp"
#include "report.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/cuda/nvrtc.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/op.hpp"
#include "tuner.hpp"

#define TOML_HEADER_ONLY 1
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace autotune {
namespace {

constexpr const char* k_usage = R"(usage:
  autotune --arch auto|sm_XY[a] --op OP [options]     tune and store winners
  autotune --arch sm_90a --op OP --compile-only       compile every valid variant (no GPU)
  autotune list --op OP --arch ARCH [--shape S]        valid variants, one JSON per line
               [--pruned]                              (also those tuning skips on ARCH,
                                                       with "pruned": why)
  autotune cache ls|show|export|import|merge|verify|gc  inspect and maintain the tuning
                                                       database (autotune cache for details)
  autotune regress --baseline A.db --current B.db [--threshold PCT] [--junit FILE]
                   [--markdown FILE] [--force]         compare stored timings; exit 1 on a
                                                       regression (--retime: re-time A.db's
                                                       winners on this GPU instead of B.db)
  autotune report [--db PATH] [--op OP] [--json]       the stored winners judged: time,
                                                       spread, GB/s or TFLOP/s, outcomes,
                                                       margin to the runner-up
  autotune report --html FILE [--copy-gbps GBPS]       one self-contained page: every
                  [--peak-tflops TFLOPS] [--force]     measured variant per shape, the
                                                       winners against the op's floor
  autotune --help | --version

options:
  --shape "k=v,..."   a problem, e.g. "B=8,C=4096,L=2048,W=4,dtype=bf16,silu=1" (repeatable);
                      default: the op's benchmark shapes
  --shapes FILE.toml  problems from a file: [OP] shapes = [{B=8, ...}, ...] plus shared
                      keys (dtype = "bf16", silu = true, ...) beside them
  --db PATH           tuning database (default $AUTOTUNE_DB, $XDG_CACHE_HOME/autotune/tuning.db,
                      ~/.cache/autotune/tuning.db)
  --jobs N            compile threads (default: one per core)
  --param NAME=V1|V2  restrict a parameter of the space (repeatable); values must lie
                      within the op's [limits] (templates/OP/space.toml)
  --space FILE.toml   use this parameter space instead of the op's own (checked against
                      the op's [limits])
  --strategy S        halving (default): within --budget-s per problem, the winners of the
                      nearest tuned problems first, then cheap measurements of the variants
                      nearest the best so far, the best few measured in full;
                      exhaustive: measure every valid variant in full (no budget);
                      random: measure --samples N of them, drawn with --seed (default 1)
  --budget-s S        halving: about S seconds of compiling and measuring per problem that
                      has tuned neighbours (default 2), 10x S for one with none
  --transfer K        halving: start from the winners of the K nearest tuned problems of
                      the op on this GPU (default 4; 0: start from nothing)
  --timeout-s S       a variant that runs longer than S s (+ its timing cap) is killed
                      and recorded as TIMEOUT (default 10)
  --force             re-measure even when a winner is stored
  --top N             rows per problem in the table (default 10)
  --json              print the full report as JSON instead of the table
  --quiet             no progress on stderr

ops: causal_conv1d, attention, selective_scan
exit codes: 0 ok, 1 failed check, 2 usage or configuration error, 3 no GPU or driver
)";

struct Args {
  std::string command = "tune";
  TuneOptions tune;
  bool json = false;
  bool quiet = false;
  size_t top = 10;
  std::string shapes_file;
  bool pruned = false; // list: also the variants tuning would skip, with the reason
};

// An option's value (empty ones are checked by what reads them: need_path, the parsers).
std::string need_value(int& i, int argc, char** argv) {
  return option_value(i, argc, argv, "", true);
}

// A path option's value: an empty string would silently mean "the default".
std::string need_path(int& i, int argc, char** argv) {
  std::string option = argv[i];
  std::string value = need_value(i, argc, argv);
  if (value.empty()) {
    throw Error(ErrorKind::usage, option + " needs a path, got an empty string");
  }
  return value;
}

// An integer option in [min, max], checked before any narrowing (4294967297 must
// not become 1).
long long parse_bounded(const std::string& text, const std::string& what, long long min,
                        long long max) {
  long long v = parse_int(text, what);
  if (v < min || v > max) {
    throw Error(ErrorKind::usage, what + ": " + text + " is out of range (" + std::to_string(min) +
                                      ".." + std::to_string(max) + ")");
  }
  return v;
}

// More compile threads than this is a typo: NVRTC compiles are CPU-bound and
// memory-hungry (hundreds of MB each), so no machine runs this many usefully.
constexpr long long k_max_jobs = 1024;

// Seeds per problem: each is compiled and measured in full, so hundreds would be an
// exhaustive search by another name.
constexpr long long k_max_transfer = 64;

// A week: longer budgets or timeouts are typos (or `inf`), and the tuner converts
// them to clock durations that must not overflow.
constexpr double k_max_seconds = 7 * 24 * 3600.0;

double parse_seconds(const std::string& text, const std::string& what) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    throw Error(ErrorKind::usage,
                what + ": expected a positive number of seconds, got '" + text + "'");
  }
  if (v > k_max_seconds) {
    throw Error(ErrorKind::usage, what + ": " + text + " seconds is more than a week (" +
                                      std::to_string(int(k_max_seconds)) + " s)");
  }
  return v;
}

// "file:line:column" of a TOML node, for messages.
std::string toml_where(const std::string& path, const toml::node& n) {
  return path + ":" + std::to_string(n.source().begin.line) + ":" +
         std::to_string(n.source().begin.column);
}

std::string toml_value_text(const toml::node& n, const std::string& path, const std::string& key) {
  if (auto b = n.as_boolean()) {
    return b->get() ? "1" : "0";
  }
  if (auto i = n.as_integer()) {
    return std::to_string(i->get());
  }
  if (auto s = n.as_string()) {
    return s->get();
  }
  throw Error(ErrorKind::config,
              toml_where(path, n) + ": " + key + " must be an integer, a string or a boolean");
}

std::vector<std::string> shapes_from_file(const std::string& path, const std::string& op) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(ErrorKind::io, "--shapes " + path + " is a directory, not a TOML file");
  }
  if (!std::filesystem::exists(path, ec)) {
    throw Error(ErrorKind::io, "--shapes " + path + " does not exist");
  }
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw Error(ErrorKind::config, path + ":" + std::to_string(e.source().begin.line) + ":" +
                                       std::to_string(e.source().begin.column) + ": " +
                                       std::string(e.description()));
  }
  // Every top-level entry is one op's table: a misspelled op name would otherwise
  // be skipped without a word.
  const std::vector<std::string> ops = op_names();
  for (const auto& [k, v] : root) {
    std::string key(k.str());
    if (!v.is_table() || std::find(ops.begin(), ops.end(), key) == ops.end()) {
      throw Error(ErrorKind::config, toml_where(path, v) + ": '" + key +
                                         "' is not an op's table (expected [" + join(ops, "], [") +
                                         "])");
    }
  }
  const toml::table* t = root[op].as_table();
  if (!t) {
    throw Error(ErrorKind::config, path + ": no [" + op + "] table");
  }
  const toml::array* shapes = (*t)["shapes"].as_array();
  if (!shapes) {
    throw Error(ErrorKind::config,
                toml_where(path, *t) + ": [" + op + "] has no shapes = [...] array");
  }
  if (shapes->empty()) {
    // Tuning the op's default shapes instead would do what nobody asked for.
    throw Error(ErrorKind::config,
                toml_where(path, *shapes) + ": [" + op + "] shapes = [] lists no shape");
  }
  Fields shared;
  for (const auto& [k, v] : *t) {
    std::string key(k.str());
    if (key == "shapes") {
      continue;
    }
    if (v.is_array() || v.is_table()) {
      throw Error(ErrorKind::config, toml_where(path, v) + ": [" + op + "] " + key +
                                         " is a list or table; besides shapes = [...] only "
                                         "shared shape fields (key = value) belong here");
    }
    shared.emplace_back(key, toml_value_text(v, path, "[" + op + "] " + key));
  }
  std::vector<std::string> out;
  for (const auto& s : *shapes) {
    const toml::table* st = s.as_table();
    if (!st) {
      throw Error(ErrorKind::config,
                  toml_where(path, s) + ": each shape must be an inline table {B = 8, ...}");
    }
    if (st->empty()) {
      throw Error(ErrorKind::config, toml_where(path, s) + ": an empty shape {}");
    }
    Fields f;
    for (const auto& [k, v] : *st) {
      std::string key(k.str());
      f.emplace_back(key, toml_value_text(v, path, "shape field " + key));
    }
    for (const auto& [k, v] : shared) {
      if (!find_field(f, k)) {
        f.emplace_back(k, v);
      }
    }
    out.push_back(format_fields(f));
  }
  return out;
}

// NVRTC targets autotune's kernels support: sm_80 (cp.async, bf16 mma) and newer.
constexpr int k_min_arch = 80;

// Throws Error(usage) unless `arch` is "auto" or sm_<digits>[a|f] of a real
// architecture: sm_80 or newer and, when NVRTC is loadable, one it can target (a
// typo would otherwise compile every variant to COMPILE_FAIL and exit 1).
void check_arch(const std::string& arch) {
  if (arch == "auto") {
    return;
  }
  const Error not_arch(ErrorKind::usage,
                       "--arch '" + arch + "' is not 'auto' or an sm_XY[a] target (e.g. sm_90a)");
  if (!starts_with(arch, "sm_")) {
    throw not_arch;
  }
  size_t digits_end = 3;
  while (digits_end < arch.size() && std::isdigit((unsigned char)arch[digits_end])) {
    ++digits_end;
  }
  std::string digits = arch.substr(3, digits_end - 3);
  std::string suffix = arch.substr(digits_end);
  if (digits.size() < 2 || digits.size() > 3 || (suffix != "" && suffix != "a" && suffix != "f")) {
    throw not_arch;
  }
  if (std::stoi(digits) < k_min_arch) {
    throw Error(ErrorKind::usage, "--arch " + arch + ": autotune's kernels need sm_" +
                                      std::to_string(k_min_arch) + " or newer");
  }
  if (!cuda::nvrtc_available()) {
    return; // compile-only fails later with the reason; list needs no NVRTC
  }
  std::vector<std::string> known = cuda::nvrtc_supported_archs();
  if (!known.empty() && std::find(known.begin(), known.end(), "sm_" + digits) == known.end()) {
    throw Error(ErrorKind::usage, "--arch " + arch + ": NVRTC " + cuda::nvrtc_version() +
                                      " cannot target sm_" + digits + " (it knows " +
                                      join(known, ", ") + ")");
  }
}

Args parse(int argc, char** argv) {
  Args a;
  int i = 1;
  if (argc > 1 && argv[1][0] != '-') {
    a.command = argv[1];
    i = 2;
  }
  bool have_arch = false;
  for (; i < argc; ++i) {
    std::string o = argv[i];
    if (o == "--arch") {
      a.tune.arch = need_value(i, argc, argv);
      have_arch = true;
    } else if (o == "--op") {
      a.tune.op = need_value(i, argc, argv);
    } else if (o == "--shape") {
      a.tune.shapes.push_back(need_value(i, argc, argv));
    } else if (o == "--shapes") {
      a.shapes_file = need_path(i, argc, argv);
    } else if (o == "--db") {
      a.tune.db_path = need_path(i, argc, argv);
    } else if (o == "--jobs") {
      a.tune.jobs = int(parse_bounded(need_value(i, argc, argv), "--jobs", 1, k_max_jobs));
    } else if (o == "--param") {
      for (auto& f : parse_fields(need_value(i, argc, argv), "--param")) {
        a.tune.param_overrides.push_back(f);
      }
    } else if (o == "--space") {
      a.tune.space_file = need_path(i, argc, argv);
    } else if (o == "--compile-only") {
      a.tune.compile_only = true;
    } else if (o == "--pruned") {
      a.pruned = true;
    } else if (o == "--force") {
      a.tune.force = true;
    } else if (o == "--json") {
      a.json = true;
    } else if (o == "--quiet") {
      a.quiet = true;
    } else if (o == "--top") {
      a.top = size_t(parse_bounded(need_value(i, argc, argv), "--top", 1, INT_MAX));
    } else if (o == "--budget-s") {
      a.tune.budget_s = parse_seconds(need_value(i, argc, argv), "--budget-s");
    } else if (o == "--strategy") {
      a.tune.strategy = need_value(i, argc, argv);
      if (a.tune.strategy != "exhaustive" && a.tune.strategy != "random" &&
          a.tune.strategy != "halving") {
        throw Error(ErrorKind::usage, "--strategy must be halving, exhaustive or random, not '" +
                                          a.tune.strategy + "'");
      }
    } else if (o == "--transfer") {
      a.tune.transfer =
          int(parse_bounded(need_value(i, argc, argv), "--transfer", 0, k_max_transfer));
    } else if (o == "--samples") {
      a.tune.samples = int(parse_bounded(need_value(i, argc, argv), "--samples", 1, INT_MAX));
    } else if (o == "--seed") {
      a.tune.sample_seed =
          (unsigned long long)parse_bounded(need_value(i, argc, argv), "--seed", 0, LLONG_MAX);
    } else if (o == "--timeout-s") {
      a.tune.measure_timeout_s = parse_seconds(need_value(i, argc, argv), "--timeout-s");
    } else {
      throw Error(ErrorKind::usage, "unknown option '" + o + "' (see autotune --help)");
    }
  }
  if (a.tune.op.empty()) {
    throw Error(ErrorKind::usage, "--op is required (see autotune --help)");
  }
  if (!have_arch) {
    throw Error(ErrorKind::usage, "--arch is required: --arch auto to tune on this GPU, or "
                                  "--arch sm_90a (etc.) with --compile-only");
  }
  check_arch(a.tune.arch);
  if (a.tune.budget_s > 0 && a.tune.strategy == "exhaustive") {
    throw Error(ErrorKind::usage, "--budget-s bounds the halving search; --strategy exhaustive "
                                  "measures every variant (drop one of them)");
  }
  if (!a.shapes_file.empty()) {
    for (auto& s : shapes_from_file(a.shapes_file, a.tune.op)) {
      a.tune.shapes.push_back(std::move(s));
    }
  }
  return a;
}

int list_variants(const Args& a) {
  const Op& op = find_op(a.tune.op);
  if (a.tune.arch == "auto") {
    throw Error(ErrorKind::usage, "list needs a concrete --arch (e.g. sm_90a)");
  }
  SearchSpace search = load_search_space(op, a.tune);
  auto problems = load_problems(op, a.tune.shapes);
  const Problem& p = problems.front();
  const std::string problem = json_escape(p.key());
  // Each listed configuration is parsed once, for its id and its typed values.
  size_t skipped = 0;
  const std::vector<Judged> listed = judge_space(
      op, search.priors, search.space, p, a.tune.arch, default_jobs(),
      [&](Verdict v) { return v == Verdict::measure || (v == Verdict::pruned && a.pruned); },
      a.pruned, skipped);
  for (const Judged& j : listed) {
    const TypedConfig typed(j.config);
    std::string params;
    for (size_t i = 0; i < typed.size(); ++i) {
      const auto& [k, v] = typed[i];
      if (!params.empty()) {
        params += ',';
      }
      params.append("\"").append(json_escape(k)).append("\":");
      if (typed.kind(i) == FieldList::Kind::integer) {
        params.append(v);
      } else {
        params.append("\"").append(json_escape(v)).append("\"");
      }
    }
    // A pruned variant says why (a heuristic of the op, or a search prior for the arch).
    std::string pruned =
        j.verdict == Verdict::pruned ? ",\"pruned\":\"" + json_escape(j.why) + "\"" : "";
    std::printf(
        "{\"op\":\"%s\",\"arch\":\"%s\",\"variant\":\"%s\",\"params\":{%s},\"problem\":\"%s\"%s}\n",
        op.name(), a.tune.arch.c_str(), json_escape(typed.key()).c_str(), params.c_str(),
        problem.c_str(), pruned.c_str());
  }
  return 0;
}

int tune_command(const Args& a) {
  Progress progress(!a.quiet);
  TuneReport report = tune(a.tune, progress);
  progress.finish();
  if (a.json) {
    print_json(report, stdout);
  } else {
    print_table(report, stdout, a.top);
  }
  if (a.tune.compile_only) {
    size_t total = 0;
    size_t failed = 0;
    for (const auto& p : report.problems) {
      total += p.variants.size();
      failed += p.compile_failures;
    }
    std::fprintf(stderr, "compile-only: %zu variants for %s, %zu failed\n", total,
                 report.arch.c_str(), failed);
    return failed ? 1 : 0;
  }
  for (const auto& p : report.problems) {
    if (!p.cached && !p.winner) {
      return 1; // no correct variant for a problem
    }
  }
  size_t cached = 0;
  for (const auto& p : report.problems) {
    cached += p.cached ? 1 : 0;
  }
  if (cached == report.problems.size()) {
    std::fprintf(stderr,
                 "all %zu problems were already tuned in %s: nothing compiled or measured\n",
                 cached, report.database.c_str());
  }
  return 0;
}

} // namespace

int run_cli(int argc, char** argv) {
  try {
    for (int i = 1; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
        std::fputs(k_usage, stdout);
        return 0;
      }
      if (!std::strcmp(argv[i], "--version")) {
        std::printf("autotune 0.1.0\n");
        return 0;
      }
    }
    if (argc < 2) {
      std::fputs(k_usage, stderr);
      return 2;
    }
    std::string first = argv[1];
    if (first == "cache") {
      return run_cache_command(argc - 1, argv + 1);
    }
    if (first == "regress") {
      return run_regress_command(argc - 1, argv + 1);
    }
    if (first == "report") {
      return run_report_command(argc - 1, argv + 1);
    }
    Args a = parse(argc, argv);
    if (a.command == "list") {
      return list_variants(a);
    }
    if (a.command != "tune") {
      throw Error(ErrorKind::usage, "unknown command '" + a.command + "' (see autotune --help)");
    }
    return tune_command(a);
  } catch (const Error& e) {
    std::fprintf(stderr, "autotune: %s: %s\n", to_string(e.kind()), e.what());
    return exit_code_for(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autotune: internal error: %s\n", e.what());
    return 1;
  }
}

} // namespace autotune
