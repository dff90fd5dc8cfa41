// `autotune report`: what a tuning database holds, judged. One row per stored winner:
// its time and spread, the op's metric (effective GB/s for memory-bound ops, TFLOP/s
// for attention), how many variants were measured for that problem with their
// outcomes, and the margin to the fastest other correct variant -- the numbers a
// reviewer asks for before trusting a winner. Markdown on stdout, or JSON lines; or,
// with --html, a page with every measured variant (tuner/report_html.cpp).
#include "tuner/args.hpp"
#include "tuner/commands.hpp"

#include "cache/database.hpp"
#include "cache/maintenance.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/ops/op.hpp"
#include "tuner/report_html.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace autotune {
namespace {

constexpr const char* k_report_usage = R"(usage:
  autotune report [--db PATH]... [--op OP] [--device TEXT] [--shape "k=v,..."] [--json]
  autotune report --html FILE [--force] [--copy-gbps GBPS] [--peak-tflops TFLOPS]
                  [--db PATH]... [--op OP] [--device TEXT] [--shape "k=v,..."]

One row per stored winner: median and p10..p90 spread, the op's metric (GB/s of
effective traffic, or TFLOP/s for attention), the variants measured for the problem
with their outcomes, and how much slower the best other correct variant was.

--html FILE writes one self-contained page instead (inline CSS and SVG, no script,
nothing fetched): per op, the winners across shapes against the op's floor; per
shape, every measured variant's median with its p10..p90 range and its outcome, the
winner marked. FILE must not exist unless --force is given. A shape's floor is the
largest of: its effective bytes at --copy-gbps (the GPU's device-to-device copy
bandwidth), its FLOPs at --peak-tflops, and (selective_scan) its exponentials at 16
per clock per SM at the winner's measured SM clock; a rate not given leaves that
floor out.

--db may be given several times: the report covers every database (default: the
tuning database, $AUTOTUNE_DB or ~/.cache/autotune/tuning.db).
)";

struct ReportRow {
  cache::Entry entry;
  std::string metric; // "GB/s" or "TFLOP/s"; empty when the op or problem is unknown
  double metric_value = NAN;
  std::map<std::string, int> outcomes; // outcome name -> variants
  int measured = 0;
  std::optional<cache::ResultRecord> runner_up; // fastest other OK variant
};

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

void print_markdown(const std::vector<ReportRow>& rows, const std::vector<std::string>& paths) {
  std::printf("# Tuning report: %s\n\n", join(paths, ", ").c_str());
  std::printf("%zu winners. Spread = (p90 - p10) / median of the winner's samples; runner-up = "
              "the fastest other correct variant, slower by that much.\n\n",
              rows.size());
  std::printf("| op | problem | GPU | winner | median us | spread | metric | measured | "
              "runner-up |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const ReportRow& row : rows) {
    const cache::WinnerRecord& w = row.entry.winner;
    const double margin = margin_pct(row);
    const double spread = spread_pct(row.entry);
    const std::string spread_text = std::isnan(spread) ? "-" : fixed_or_dash(spread, 1).append("%");
    const std::string metric_text =
        row.metric.empty() ? "-"
                           : fixed_or_dash(row.metric_value, 1).append(" ").append(row.metric);
    // A tie can go to a variant slightly slower than the runner-up: then the margin is
    // negative and printed with its own sign.
    const std::string margin_text =
        std::isnan(margin)
            ? "-"
            : std::string(margin < 0 ? "" : "+").append(fixed_or_dash(margin, 1)).append("%");
    std::printf("| %s | `%s` | %s | `%s` | %s | %s | %s | %d (%s) | %s |\n", w.op.c_str(),
                w.problem.c_str(), row.entry.device ? row.entry.device->name.c_str() : "?",
                w.config.c_str(), fixed_or_dash(w.median_us, 2).c_str(), spread_text.c_str(),
                metric_text.c_str(), row.measured, outcome_text(row).c_str(), margin_text.c_str());
  }
}

std::string quoted(const std::string& text) {
  std::string s("\"");
  return s.append(text).append("\"");
}

void print_json(const std::vector<ReportRow>& rows) {
  auto number = [](double v, int precision) {
    return std::isnan(v) ? std::string("null") : fixed_or_dash(v, precision);
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
    const std::string runner_up =
        row.runner_up ? quoted(json_escape(row.runner_up->config)) : "null";
    std::printf("{\"key\":\"%s\",\"op\":\"%s\",\"problem\":\"%s\",\"gpu\":\"%s\",\"config\":\"%s\","
                "\"median_us\":%s,\"spread_pct\":%s,\"metric\":%s,\"metric_value\":%s,"
                "\"measured\":%d,\"outcomes\":{%s},\"runner_up_config\":%s,"
                "\"runner_up_margin_pct\":%s}\n",
                w.key.c_str(), json_escape(w.op).c_str(), json_escape(w.problem).c_str(),
                json_escape(row.entry.device ? row.entry.device->name : "").c_str(),
                json_escape(w.config).c_str(), number(w.median_us, 3).c_str(),
                number(spread_pct(row.entry), 2).c_str(), metric.c_str(),
                number(row.metric_value, 2).c_str(), row.measured, outcomes.c_str(),
                runner_up.c_str(), number(margin_pct(row), 2).c_str());
  }
}

// A positive finite number given to `flag`; Error(usage) naming both otherwise.
double positive_number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || !(v > 0)) {
    throw Error(ErrorKind::usage,
                "autotune report: " + flag + " expects a positive number, got '" + text + "'");
  }
  return v;
}

std::string exists_message(const std::string& path) {
  return "autotune report: " + path + " exists; pass --force to overwrite it";
}

// Writes `text` to `path` through a temporary file beside it, so that a reader never
// sees half a page and a failure leaves nothing behind. Without `force`, link(2)
// publishes it only if `path` still does not exist (no check-then-write race).
void write_page(const std::string& path, const std::string& text, bool force) {
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  auto io_error = [&](const std::string& what) {
    const std::string reason = std::strerror(errno);
    std::error_code ec;
    std::filesystem::remove(temp, ec);
    return Error(ErrorKind::io, "autotune report: cannot " + what + " " + path + ": " + reason);
  };
  std::FILE* f = std::fopen(temp.c_str(), "wb");
  if (!f) {
    throw io_error("write");
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written) {
    throw io_error("write");
  }
  if (force) {
    if (std::rename(temp.c_str(), path.c_str()) != 0) {
      throw io_error("replace");
    }
    return;
  }
  if (::link(temp.c_str(), path.c_str()) != 0) {
    if (errno == EEXIST) {
      std::error_code ec;
      std::filesystem::remove(temp, ec);
      throw Error(ErrorKind::usage, exists_message(path));
    }
    throw io_error("create");
  }
  std::error_code ec;
  std::filesystem::remove(temp, ec);
}

} // namespace

int run_report_command(int argc, char** argv) {
  std::vector<std::string> db_paths;
  cache::Selector selector;
  bool json = false;
  std::string html_path;
  bool force = false;
  FloorRates rates;
  std::vector<std::string> html_only; // options that mean nothing without --html
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    auto value = [&]() { return option_value(i, argc, argv, "autotune report: "); };
    if (o == "--db") {
      db_paths.push_back(value());
    } else if (o == "--op") {
      selector.op = value();
    } else if (o == "--device") {
      selector.device = value();
    } else if (o == "--shape") {
      selector.shape = value();
    } else if (o == "--json") {
      json = true;
    } else if (o == "--html") {
      html_path = value();
    } else if (o == "--force") {
      force = true;
      html_only.push_back(o);
    } else if (o == "--copy-gbps") {
      rates.copy_gbps = positive_number(o, value());
      html_only.push_back(o);
    } else if (o == "--peak-tflops") {
      rates.peak_tflops = positive_number(o, value());
      html_only.push_back(o);
    } else if (o == "--help" || o == "-h") {
      std::fputs(k_report_usage, stdout);
      return 0;
    } else {
      throw Error(ErrorKind::usage,
                  "autotune report: unexpected argument '" + o + "' (see autotune report --help)");
    }
  }
  if (html_path.empty() && !html_only.empty()) {
    throw Error(ErrorKind::usage,
                "autotune report: " + html_only.front() + " goes with --html FILE");
  }
  if (!html_path.empty() && json) {
    throw Error(ErrorKind::usage, "autotune report: --json and --html are two outputs; give one");
  }
  // Refused before any database is read: an existing page is not overwritten by accident.
  if (!html_path.empty() && !force && std::filesystem::exists(html_path)) {
    throw Error(ErrorKind::usage, exists_message(html_path));
  }
  if (db_paths.empty()) {
    db_paths.push_back(cache::default_database_path());
  }
  std::vector<std::string> migrated; // older schemas are read from migrated temporary copies
  auto remove_migrated = [&] {
    for (const std::string& path : migrated) {
      std::error_code ec;
      for (const char* suffix : {"", "-wal", "-shm"}) {
        std::filesystem::remove(path + suffix, ec);
      }
    }
  };
  std::vector<ReportRow> rows;
  std::string page;
  HtmlSummary summary;
  try {
    std::vector<cache::Database> dbs;
    for (const std::string& path : db_paths) {
      migrated.emplace_back();
      dbs.push_back(cache::open_source(path, migrated.back()));
    }
    if (!html_path.empty()) {
      std::vector<HtmlSource> sources;
      for (size_t i = 0; i < dbs.size(); ++i) {
        sources.push_back({db_paths[i], &dbs[i]});
      }
      page = render_html_report(sources, selector, rates, &summary);
    } else {
      for (const cache::Database& db : dbs) {
        for (const cache::Entry& e : cache::select_entries(db, selector)) {
          rows.push_back(make_row(db, e));
        }
      }
    }
  } catch (...) {
    remove_migrated();
    throw;
  }
  remove_migrated();
  if (!html_path.empty()) {
    write_page(html_path, page, force);
    std::printf("wrote %s: %zu problems of %zu ops, %zu with a winner, %zu variant measurements\n",
                html_path.c_str(), summary.problems, summary.ops, summary.winners, summary.results);
  } else if (json) {
    print_json(rows);
  } else {
    print_markdown(rows, db_paths);
  }
  return 0;
}

} // namespace autotune
