// `autotune report`: what a tuning database holds, judged. One row per stored winner:
// its time and spread, the op's metric (effective GB/s for memory-bound ops, TFLOP/s
// for attention), how many variants were measured for that problem with their
// outcomes, and the margin to the fastest other correct variant -- the numbers a
// reviewer asks for before trusting a winner. Markdown on stdout, or JSON lines.
#include "tuner/commands.hpp"

#include "cache/database.hpp"
#include "cache/maintenance.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/ops/op.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace autotune {
namespace {

constexpr const char* k_report_usage = R"(usage:
  autotune report [--db PATH] [--op OP] [--device TEXT] [--shape "k=v,..."] [--json]

One row per stored winner: median and p10..p90 spread, the op's metric (GB/s of
effective traffic, or TFLOP/s for attention), the variants measured for the problem
with their outcomes, and how much slower the best other correct variant was.
)";

struct ReportRow {
  cache::Entry entry;
  std::string metric;      // "GB/s" or "TFLOP/s"; empty when the op or problem is unknown
  double metric_value = NAN;
  std::map<std::string, int> outcomes; // outcome name -> variants
  int measured = 0;
  std::optional<cache::ResultRecord> runner_up; // fastest other OK variant
};

std::string fixed(double v, int precision) {
  if (std::isnan(v)) {
    return "-";
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

// The op's metric at the winner's median; NAN when the op is not built into this
// binary or the stored problem no longer parses (an old key format).
void judge(ReportRow& row) {
  const cache::WinnerRecord& w = row.entry.winner;
  if (!(w.median_us > 0)) {
    return;
  }
  try {
    const Op& op = find_op(w.op);
    Problem p = op.make_problem(parse_fields(w.problem, "stored problem"));
    if (op.memory_bound()) {
      row.metric = "GB/s";
      row.metric_value = op.bytes(p) / (w.median_us * 1e-6) / 1e9;
    } else {
      row.metric = "TFLOP/s";
      row.metric_value = op.flops(p) / (w.median_us * 1e-6) / 1e12;
    }
  } catch (const Error&) {
    row.metric.clear();
  }
}

ReportRow make_row(const cache::Database& db, const cache::Entry& e) {
  ReportRow row{e, "", NAN, {}, 0, std::nullopt};
  judge(row);
  for (const cache::ResultRecord& r :
       db.results(e.winner.device_key, e.winner.op, e.winner.problem)) {
    ++row.measured;
    ++row.outcomes[cache::to_string(r.outcome)];
    if (r.outcome == cache::Outcome::ok && r.variant_key != e.winner.variant_key &&
        (!row.runner_up || r.median_us < row.runner_up->median_us)) {
      row.runner_up = r;
    }
  }
  return row;
}

std::string outcome_text(const ReportRow& row) {
  // Appended piece by piece: GCC 12 -O3 reports a false -Wrestrict on `"x" + str`.
  std::string s;
  for (const auto& [name, count] : row.outcomes) {
    if (!s.empty()) {
      s.append(" ");
    }
    s.append(name).append(" ").append(std::to_string(count));
  }
  return s.empty() ? "-" : s;
}

double margin_pct(const ReportRow& row) {
  const double winner = row.entry.winner.median_us;
  if (!row.runner_up || !(winner > 0)) {
    return NAN;
  }
  return (row.runner_up->median_us - winner) / winner * 100;
}

double spread_pct(const cache::Entry& e) {
  if (!e.result || e.result->samples <= 0 || !(e.result->median_us > 0)) {
    return NAN;
  }
  return (e.result->p90_us - e.result->p10_us) / e.result->median_us * 100;
}

void print_markdown(const std::vector<ReportRow>& rows, const std::string& path) {
  std::printf("# Tuning report: %s\n\n", path.c_str());
  std::printf("%zu winners. Spread = (p90 - p10) / median of the winner's samples; runner-up = "
              "the fastest other correct variant, slower by that much.\n\n",
              rows.size());
  std::printf("| op | problem | GPU | winner | median us | spread | metric | measured | "
              "runner-up |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const ReportRow& row : rows) {
    const cache::WinnerRecord& w = row.entry.winner;
    const double margin = margin_pct(row);
    const double spread = spread_pct(row.entry);
    const std::string spread_text = std::isnan(spread) ? "-" : fixed(spread, 1).append("%");
    const std::string metric_text =
        row.metric.empty() ? "-" : fixed(row.metric_value, 1).append(" ").append(row.metric);
    const std::string margin_text =
        std::isnan(margin) ? "-" : std::string("+").append(fixed(margin, 1)).append("%");
    std::printf("| %s | `%s` | %s | `%s` | %s | %s | %s | %d (%s) | %s |\n", w.op.c_str(),
                w.problem.c_str(), row.entry.device ? row.entry.device->name.c_str() : "?",
                w.config.c_str(), fixed(w.median_us, 2).c_str(), spread_text.c_str(),
                metric_text.c_str(), row.measured, outcome_text(row).c_str(),
                margin_text.c_str());
  }
}

std::string quoted(const std::string& text) {
  std::string s("\"");
  return s.append(text).append("\"");
}

void print_json(const std::vector<ReportRow>& rows) {
  auto number = [](double v, int precision) {
    return std::isnan(v) ? std::string("null") : fixed(v, precision);
  };
  for (const ReportRow& row : rows) {
    const cache::WinnerRecord& w = row.entry.winner;
    std::string outcomes;
    for (const auto& [name, count] : row.outcomes) {
      if (!outcomes.empty()) {
        outcomes.append(",");
      }
      outcomes.append("\"").append(name).append("\":").append(std::to_string(count));
    }
    const std::string metric = row.metric.empty() ? "null" : quoted(row.metric);
    const std::string runner_up = row.runner_up ? quoted(json_escape(row.runner_up->config)) : "null";
    std::printf("{\"key\":\"%s\",\"op\":\"%s\",\"problem\":\"%s\",\"gpu\":\"%s\",\"config\":\"%s\","
                "\"median_us\":%s,\"spread_pct\":%s,\"metric\":%s,\"metric_value\":%s,"
                "\"measured\":%d,\"outcomes\":{%s},\"runner_up_config\":%s,"
                "\"runner_up_margin_pct\":%s}\n",
                w.key.c_str(), json_escape(w.op).c_str(), json_escape(w.problem).c_str(),
                json_escape(row.entry.device ? row.entry.device->name : "").c_str(),
                json_escape(w.config).c_str(), number(w.median_us, 3).c_str(),
                number(spread_pct(row.entry), 2).c_str(),
                metric.c_str(),
                number(row.metric_value, 2).c_str(), row.measured, outcomes.c_str(),
                runner_up.c_str(),
                number(margin_pct(row), 2).c_str());
  }
}

} // namespace

int run_report_command(int argc, char** argv) {
  std::string db_path;
  cache::Selector selector;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        throw Error(ErrorKind::usage, "autotune report: " + o + " needs a value");
      }
      return argv[++i];
    };
    if (o == "--db") {
      db_path = value();
    } else if (o == "--op") {
      selector.op = value();
    } else if (o == "--device") {
      selector.device = value();
    } else if (o == "--shape") {
      selector.shape = value();
    } else if (o == "--json") {
      json = true;
    } else if (o == "--help" || o == "-h") {
      std::fputs(k_report_usage, stdout);
      return 0;
    } else {
      throw Error(ErrorKind::usage, "autotune report: unexpected argument '" + o +
                                        "' (see autotune report --help)");
    }
  }
  if (db_path.empty()) {
    db_path = cache::default_database_path();
  }
  std::string migrated; // an older schema is read from a migrated temporary copy
  std::vector<ReportRow> rows;
  {
    cache::Database db = cache::open_source(db_path, migrated);
    for (const cache::Entry& e : cache::select_entries(db, selector)) {
      rows.push_back(make_row(db, e));
    }
  }
  if (!migrated.empty()) {
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::filesystem::remove(migrated + suffix, ec);
    }
  }
  if (json) {
    print_json(rows);
  } else {
    print_markdown(rows, db_path);
  }
  return 0;
}

} // namespace autotune
