#include "cli.hpp"

#include "commands.hpp"

#include "progress.hpp"
#include "report.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/cuda/nvrtc.hpp"
#include "runtime/dispatch/variant.hpp"
#include "tuner.hpp"

#define TOML_HEADER_ONLY 1
#include <toml++/toml.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace autotune {
namespace {

constexpr const char* k_usage = R"(usage:
  autotune --arch auto|sm_XY[a] --op OP [options]     tune and store winners
  autotune --arch sm_90a --op OP --compile-only       compile every valid variant (no GPU)
  autotune list --op OP --arch ARCH [--shape S]        valid variants, one JSON per line
  autotune cache ls|show|export|import|merge|verify|gc  inspect and maintain the tuning
                                                       database (autotune cache for details)
  autotune regress --baseline A.db --current B.db [--threshold PCT] [--junit FILE]
                   [--markdown FILE]                   compare stored timings; exit 1 on a
                                                       regression (--retime: re-time A.db's
                                                       winners on this GPU instead of B.db)
  autotune report [--db PATH] [--op OP] [--json]       the stored winners judged: time,
                                                       spread, GB/s or TFLOP/s, outcomes,
                                                       margin to the runner-up
  autotune --help | --version

options:
  --shape "k=v,..."   a problem, e.g. "B=8,C=4096,L=2048,W=4,dtype=bf16,silu=1" (repeatable);
                      default: the op's benchmark shapes
  --shapes FILE.toml  problems from a file: [OP] shapes = [{B=8, ...}, ...] plus shared
                      keys (dtype = "bf16", silu = true, ...) beside them
  --db PATH           tuning database (default $AUTOTUNE_DB, $XDG_CACHE_HOME/autotune/tuning.db,
                      ~/.cache/autotune/tuning.db)
  --jobs N            compile threads (default: one per core)
  --param NAME=V1|V2  restrict a parameter of the space (repeatable)
  --space FILE.toml   use this parameter space instead of the op's own
  --strategy S        exhaustive (default): measure every valid variant;
                      random: measure --samples N of them, drawn with --seed (default 1);
                      halving: successive halving within --budget-s
  --budget-s S        about S seconds of measurement per problem: every variant gets a
                      cheap measurement, the best quarter a longer one, and so on
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
};

std::string need_value(int& i, int argc, char** argv) {
  if (i + 1 >= argc) {
    throw Error(ErrorKind::usage, std::string(argv[i]) + " needs a value");
  }
  return argv[++i];
}

double parse_seconds(const std::string& text, const std::string& what) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0)) {
    throw Error(ErrorKind::usage, what + ": expected a positive number of seconds, got '" + text + "'");
  }
  return v;
}

std::string toml_value_text(const toml::node& n) {
  if (auto b = n.as_boolean()) {
    return b->get() ? "1" : "0";
  }
  if (auto i = n.as_integer()) {
    return std::to_string(i->get());
  }
  if (auto s = n.as_string()) {
    return s->get();
  }
  throw Error(ErrorKind::config, "unsupported value type");
}

std::vector<std::string> shapes_from_file(const std::string& path, const std::string& op) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw Error(ErrorKind::config, path + ":" + std::to_string(e.source().begin.line) + ":" +
                                       std::to_string(e.source().begin.column) + ": " +
                                       std::string(e.description()));
  }
  const toml::table* t = root[op].as_table();
  if (!t) {
    throw Error(ErrorKind::config, path + ": no [" + op + "] table");
  }
  const toml::array* shapes = (*t)["shapes"].as_array();
  if (!shapes) {
    throw Error(ErrorKind::config, path + ": [" + op + "] has no shapes = [...] array");
  }
  Fields shared;
  for (const auto& [k, v] : *t) {
    if (k.str() != "shapes" && !v.is_array() && !v.is_table()) {
      std::string key(k.str());
      shared.emplace_back(key, toml_value_text(v));
    }
  }
  std::vector<std::string> out;
  for (const auto& s : *shapes) {
    const toml::table* st = s.as_table();
    if (!st) {
      throw Error(ErrorKind::config, path + ":" + std::to_string(s.source().begin.line) +
                                         ": each shape must be an inline table {B = 8, ...}");
    }
    Fields f;
    for (const auto& [k, v] : *st) {
      try {
        f.emplace_back(std::string(k.str()), toml_value_text(v));
      } catch (const Error&) {
        throw Error(ErrorKind::config, path + ":" + std::to_string(v.source().begin.line) +
                                           ": " + std::string(k.str()) +
                                           " must be an integer, string or boolean");
      }
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
      a.shapes_file = need_value(i, argc, argv);
    } else if (o == "--db") {
      a.tune.db_path = need_value(i, argc, argv);
    } else if (o == "--jobs") {
      a.tune.jobs = int(parse_int(need_value(i, argc, argv), "--jobs"));
      if (a.tune.jobs < 1) {
        throw Error(ErrorKind::usage, "--jobs must be at least 1");
      }
    } else if (o == "--param") {
      for (auto& f : parse_fields(need_value(i, argc, argv), "--param")) {
        a.tune.param_overrides.push_back(f);
      }
    } else if (o == "--space") {
      a.tune.space_file = need_value(i, argc, argv);
    } else if (o == "--compile-only") {
      a.tune.compile_only = true;
    } else if (o == "--force") {
      a.tune.force = true;
    } else if (o == "--json") {
      a.json = true;
    } else if (o == "--quiet") {
      a.quiet = true;
    } else if (o == "--top") {
      a.top = size_t(parse_int(need_value(i, argc, argv), "--top"));
    } else if (o == "--budget-s") {
      a.tune.budget_s = parse_seconds(need_value(i, argc, argv), "--budget-s");
    } else if (o == "--strategy") {
      a.tune.strategy = need_value(i, argc, argv);
      if (a.tune.strategy != "exhaustive" && a.tune.strategy != "random" &&
          a.tune.strategy != "halving") {
        throw Error(ErrorKind::usage, "--strategy must be exhaustive, random or halving, not '" +
                                          a.tune.strategy + "'");
      }
    } else if (o == "--samples") {
      a.tune.samples = int(parse_int(need_value(i, argc, argv), "--samples"));
      if (a.tune.samples < 1) {
        throw Error(ErrorKind::usage, "--samples must be at least 1");
      }
    } else if (o == "--seed") {
      a.tune.sample_seed = (unsigned long long)parse_int(need_value(i, argc, argv), "--seed");
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
  const std::string& arch = a.tune.arch;
  if (arch != "auto" && !(starts_with(arch, "sm_") && arch.size() >= 5)) {
    throw Error(ErrorKind::usage, "--arch '" + arch + "' is not 'auto' or an sm_XY[a] target");
  }
  if (a.tune.strategy == "halving" && a.tune.budget_s <= 0) {
    throw Error(ErrorKind::usage, "--strategy halving needs --budget-s SECONDS");
  }
  if (a.tune.budget_s > 0 && a.tune.strategy == "exhaustive") {
    a.tune.strategy = "halving";
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
  Space space = load_space(op, a.tune);
  auto problems = load_problems(op, a.tune.shapes);
  const Problem& p = problems.front();
  for (const auto& c : space.enumerate()) {
    if (!op.check(c, p, a.tune.arch) || !op.worth_measuring(c, p)) {
      continue;
    }
    std::string params;
    for (const auto& [k, v] : c) {
      bool numeric = !v.empty() && v.find_first_not_of("-0123456789") == std::string::npos;
      if (!params.empty()) {
        params += ',';
      }
      params.append("\"").append(json_escape(k)).append("\":");
      if (numeric) {
        params.append(v);
      } else {
        params.append("\"").append(json_escape(v)).append("\"");
      }
    }
    std::printf("{\"op\":\"%s\",\"arch\":\"%s\",\"variant\":\"%s\",\"params\":{%s},\"problem\":\"%s\"}\n",
                op.name(), a.tune.arch.c_str(), json_escape(config_id(c)).c_str(), params.c_str(),
                json_escape(p.key()).c_str());
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
    std::fprintf(stderr, "all %zu problems were already tuned in %s: nothing compiled or measured\n",
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
