#include "report.hpp"

#include "runtime/base/strings.hpp"

#include <cmath>

#include <algorithm>

namespace autotune {
namespace {

double gbps(double bytes, double us) {
  return us > 0 ? bytes / (us * 1e3) : 0;
}

std::vector<size_t> ranked(const ProblemReport& p) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < p.variants.size(); ++i) {
    idx.push_back(i);
  }
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const auto& x = p.variants[a];
    const auto& y = p.variants[b];
    bool xo = x.outcome == cache::Outcome::ok;
    bool yo = y.outcome == cache::Outcome::ok;
    if (xo != yo) {
      return xo;
    }
    return xo && x.timing.median_us < y.timing.median_us;
  });
  return idx;
}

std::string first_line(const std::string& text) {
  auto nl = text.find('\n');
  return nl == std::string::npos ? text : text.substr(0, nl);
}

// A problem's wall time no phase accounts for (bookkeeping between them).
double other_seconds(const ProblemReport& p) {
  return std::max(0.0, p.seconds - p.phases.sum() - p.compile_seconds);
}

} // namespace

void print_table(const TuneReport& report, std::FILE* out, size_t top) {
  bool compile_only = report.device.empty() || report.problems.empty() ||
                      (!report.problems.front().cached && !report.problems.front().copy &&
                       !report.problems.front().winner);
  std::fprintf(out, "op %s, arch %s%s%s, database %s\n", report.op.c_str(), report.arch.c_str(),
               report.device.empty() ? "" : ", ", report.device.c_str(), report.database.c_str());
  for (const auto& p : report.problems) {
    std::fprintf(out, "\n%s %s\n", report.op.c_str(), p.problem.key().c_str());
    if (p.cached) {
      std::fprintf(out,
                   "  stored winner: %s  %.2f us  %.0f GB/s (found in the database; "
                   "nothing compiled or measured, --force re-tunes)\n",
                   p.winner_config.c_str(), p.winner_us, gbps(p.bytes, p.winner_us));
      continue;
    }
    size_t counts[int(cache::Outcome::wrong) + 1] = {};
    for (const auto& v : p.variants) {
      counts[int(v.outcome)]++;
    }
    std::fprintf(out,
                 "  %zu variants in the space, %zu invalid for this problem, %zu compiled now "
                 "(%.1f s), %zu cubins from the database, %zu compile failures\n",
                 p.space_size, p.invalid, p.compiled, p.compile_seconds, p.cubins_reused,
                 p.compile_failures);
    if (!p.why_none.empty()) {
      std::fputs("  no variant of the space runs this problem; why (variants dropped):\n", out);
      for (const auto& [why, count] : p.why_none) {
        std::fprintf(out, "    %zu: %s\n", count, why.c_str());
      }
      if (p.why_none_more) {
        std::fprintf(out, "    and %zu more reasons\n", p.why_none_more);
      }
    }
    for (const auto& v : p.variants) {
      if (v.outcome == cache::Outcome::compile_fail) {
        std::fprintf(out, "  COMPILE_FAIL %s\n%s\n", v.config.c_str(), v.message.c_str());
      }
    }
    if (compile_only && !p.copy) {
      continue;
    }
    std::fprintf(out,
                 "  outcomes: OK %zu, WRONG %zu, RESOURCE %zu, FAULT %zu, TIMEOUT %zu, "
                 "COMPILE_FAIL %zu; %d worker restarts; %.0f MiB of GPU memory\n",
                 counts[int(cache::Outcome::ok)], counts[int(cache::Outcome::wrong)],
                 counts[int(cache::Outcome::resource)], counts[int(cache::Outcome::fault)],
                 counts[int(cache::Outcome::timeout)], counts[int(cache::Outcome::compile_fail)],
                 p.worker_restarts, double(p.device_bytes) / (1 << 20));
    if (p.sampled) {
      std::fprintf(out, "  random search: %zu configurations sampled\n", p.sampled);
    }
    if (p.budget_exhausted) {
      std::fprintf(out,
                   "  budget spent: only the best %d survivors of the cheap rounds were measured "
                   "in full\n",
                   k_halving_eta);
    }
    double copy_gbps = p.copy ? gbps(p.bytes, p.copy->median_us) : 0;
    if (p.copy) {
      std::fprintf(out, "  copy ceiling: %.2f us, %.0f GB/s (device-to-device copy, same bytes)\n",
                   p.copy->median_us, copy_gbps);
    }
    const bool by_flops = p.flops > 0;
    std::fprintf(out, "  %-4s %-48s %-12s %10s %10s %9s %7s %9s\n", "rank", "variant", "status",
                 "median_us", "p10-p90", by_flops ? "TFLOP/s" : "GB/s", by_flops ? "" : "%copy",
                 "rel_err");
    size_t shown = 0;
    for (size_t i : ranked(p)) {
      const auto& v = p.variants[i];
      if (shown++ >= top) {
        break;
      }
      bool ok = v.outcome == cache::Outcome::ok;
      char spread[32] = "-";
      char rate[32] = "-";
      char pct[32] = "-";
      char med[32] = "-";
      if (ok) {
        std::snprintf(med, sizeof med, "%.2f", v.timing.median_us);
        std::snprintf(spread, sizeof spread, "%.1f%%",
                      100.0 * (v.timing.p90_us - v.timing.p10_us) / v.timing.median_us);
        if (by_flops) {
          std::snprintf(rate, sizeof rate, "%.1f", p.flops / (v.timing.median_us * 1e6));
        } else {
          std::snprintf(rate, sizeof rate, "%.0f", gbps(p.bytes, v.timing.median_us));
        }
        if (copy_gbps > 0) {
          std::snprintf(pct, sizeof pct, "%.1f",
                        100.0 * gbps(p.bytes, v.timing.median_us) / copy_gbps);
        }
      }
      std::string status = cache::to_string(v.outcome);
      if (v.eliminated_in_round) {
        status += "/cut" + std::to_string(v.eliminated_in_round);
      }
      if (p.winner && *p.winner == i) {
        status += "*";
      }
      std::fprintf(out, "  %-4zu %-48s %-12s %10s %10s %9s %7s %9.2g\n", shown, v.config.c_str(),
                   status.c_str(), med, spread, rate, pct, v.rel_err);
      if (!ok && !v.message.empty()) {
        std::fprintf(out, "       %s\n", first_line(v.message).c_str());
      }
    }
    const ProblemPhases& t = p.phases;
    std::fprintf(out,
                 "  time: setup %.2f s, compile %.2f, cubins loaded %.2f, measure %.2f (worker: "
                 "loads %.2f, checks %.2f, timing %.2f), restarts %.2f, store %.2f, re-check "
                 "%.2f, other %.2f",
                 t.setup, p.compile_seconds, t.cubin_load, t.measure, p.worker.module_load,
                 p.worker.check, p.worker.timing, t.restart, t.store, t.recheck, other_seconds(p));
    if (p.budget_s > 0) {
      std::fprintf(out, "; search %.2f s of a %.2f s budget", p.search_seconds, p.budget_s);
    }
    std::fprintf(out, "\n");
    if (p.winner) {
      std::fprintf(out, "  winner (*): %s, stored; %.1f s for this problem\n",
                   p.winner_config.c_str(), p.seconds);
    } else {
      std::fprintf(out, "  no correct variant: nothing stored\n");
    }
  }
}

namespace {

// A JSON number, or null for NaN and infinities (a WRONG variant's error, a problem
// without a winner): printf would write "nan", which no JSON parser reads.
std::string json_number(double v, const char* format = "%.4f") {
  if (!std::isfinite(v)) {
    return "null";
  }
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, v);
  return buffer;
}

} // namespace

void print_json(const TuneReport& report, std::FILE* out) {
  std::fprintf(out,
               "{\"op\":\"%s\",\"arch\":\"%s\",\"device\":\"%s\",\"database\":\"%s\","
               "\"seconds\":%.4f,\"start_s\":%.4f,\"problems\":[",
               json_escape(report.op).c_str(), json_escape(report.arch).c_str(),
               json_escape(report.device).c_str(), json_escape(report.database).c_str(),
               report.seconds, report.start_seconds);
  for (size_t pi = 0; pi < report.problems.size(); ++pi) {
    const auto& p = report.problems[pi];
    std::fprintf(out,
                 "%s{\"problem\":\"%s\",\"cached\":%s,\"space\":%zu,\"invalid\":%zu,"
                 "\"compiled\":%zu,\"cubins_reused\":%zu,\"compile_failures\":%zu,"
                 "\"compile_s\":%.4f,\"seconds\":%.4f,\"bytes\":%.0f,\"flops\":%.0f,"
                 "\"device_bytes\":%zu,\"sampled\":%zu,\"budget_exhausted\":%s,"
                 "\"worker_restarts\":%d,",
                 pi ? "," : "", json_escape(p.problem.key()).c_str(), p.cached ? "true" : "false",
                 p.space_size, p.invalid, p.compiled, p.cubins_reused, p.compile_failures,
                 p.compile_seconds, p.seconds, p.bytes, p.flops, p.device_bytes, p.sampled,
                 p.budget_exhausted ? "true" : "false", p.worker_restarts);
    if (!p.why_none.empty()) {
      std::fputs("\"why_none\":[", out);
      for (size_t i = 0; i < p.why_none.size(); ++i) {
        std::fprintf(out, "%s{\"reason\":\"%s\",\"variants\":%zu}", i ? "," : "",
                     json_escape(p.why_none[i].first).c_str(), p.why_none[i].second);
      }
      std::fputs("],", out);
    }
    const ProblemPhases& t = p.phases;
    std::fprintf(
        out,
        "\"search_s\":%.4f,\"budget_s\":%.4f,"
        "\"phases_s\":{\"select\":%.4f,\"setup\":%.4f,\"compile\":%.4f,\"cubin_load\":%.4f,"
        "\"measure\":%.4f,\"restart\":%.4f,\"store\":%.4f,\"recheck\":%.4f,\"other\":%.4f},",
        p.search_seconds, p.budget_s, t.select, t.setup, p.compile_seconds, t.cubin_load, t.measure,
        t.restart, t.store, t.recheck, other_seconds(p));
    const WorkerSeconds& w = p.worker;
    std::fprintf(out,
                 "\"worker_s\":{\"context\":%.4f,\"modules\":%.4f,\"allocate\":%.4f,"
                 "\"inputs\":%.4f,\"copy\":%.4f,\"module_load\":%.4f,\"check\":%.4f,"
                 "\"timing\":%.4f},",
                 w.context, w.modules, w.allocate, w.inputs, w.copy, w.module_load, w.check,
                 w.timing);
    if (p.copy) {
      std::fprintf(out, "\"copy_us\":%s,", json_number(p.copy->median_us).c_str());
    }
    std::fprintf(out, "\"winner\":\"%s\",\"winner_us\":%s,\"variants\":[",
                 json_escape(p.winner_config).c_str(), json_number(p.winner_us).c_str());
    for (size_t i = 0; i < p.variants.size(); ++i) {
      const auto& v = p.variants[i];
      std::fprintf(out,
                   "%s{\"variant\":\"%s\",\"outcome\":\"%s\",\"median_us\":%s,\"p10_us\":%s,"
                   "\"p90_us\":%s,\"samples\":%d,\"sm_clock_mhz\":%d,\"rel_err\":%s,"
                   "\"resumed\":%s,\"eliminated_in_round\":%d,\"timed_in\":\"%s\","
                   "\"message\":\"%s\"}",
                   i ? "," : "", json_escape(v.config).c_str(), cache::to_string(v.outcome),
                   json_number(v.timing.median_us).c_str(), json_number(v.timing.p10_us).c_str(),
                   json_number(v.timing.p90_us).c_str(), v.timing.samples, v.sm_clock_mhz,
                   json_number(v.rel_err, "%.4g").c_str(), v.reused_result ? "true" : "false",
                   v.eliminated_in_round, v.timed_in, json_escape(v.message).c_str());
    }
    std::fprintf(out, "]}");
  }
  std::fprintf(out, "]}\n");
}

} // namespace autotune
