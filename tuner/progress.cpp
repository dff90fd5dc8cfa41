#include "progress.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <sys/ioctl.h>
#include <unistd.h>

namespace autotune {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The width of a terminal status line when the terminal does not say.
constexpr int k_default_width = 100;
// The best variant's id in the status line is cut to this many characters: the
// line must keep room for the elapsed time and ETA.
constexpr size_t k_best_chars = 48;

// Concatenation by append: GCC 12 reports a false -Wrestrict on `"text" + string`.
template <typename... Parts> std::string cat(const Parts&... parts) {
  std::string s;
  (s.append(parts), ...);
  return s;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string microseconds(double us) {
  return cat(fixed(us, us < 100 ? 2 : 1), " us");
}

std::string seconds_text(double s) {
  return cat(fixed(s, s < 10 ? 1 : 0), " s");
}

std::string cut(const std::string& text, size_t chars) {
  if (text.size() <= chars) {
    return text;
  }
  return chars > 3 ? cat(text.substr(0, chars - 3), "...") : text.substr(0, chars);
}

} // namespace

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) {
    return "--";
  }
  long long s = (long long)std::llround(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

Progress::Progress(bool enabled)
    : Progress(!enabled                      ? Mode::quiet
               : isatty(fileno(stderr)) != 0 ? Mode::terminal
                                             : Mode::plain,
               stderr, steady_seconds) {}

Progress::Progress(Mode mode, std::FILE* out, Clock clock, int width)
    : m_mode(mode), m_out(out), m_clock(clock ? std::move(clock) : Clock(steady_seconds)),
      m_width(width) {
  m_run_start = now();
}

int Progress::width() const {
  if (m_width > 0) {
    return m_width;
  }
  winsize ws{};
  if (ioctl(fileno(m_out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    return ws.ws_col;
  }
  if (const char* columns = std::getenv("COLUMNS")) {
    int c = std::atoi(columns);
    if (c > 0) {
      return c;
    }
  }
  return k_default_width;
}

void Progress::start_run(const std::string& op, std::vector<Planned> plan) {
  m_op = op;
  m_plan = std::move(plan);
  m_run_start = now();
  m_done_seconds = 0;
  m_done_measured = 0;
  m_overhead_sum = 0;
  m_overhead_count = 0;
  m_last_candidates = 0;
  m_started = false;
  m_in_problem = false;
}

void Progress::start_problem(size_t index, const std::string& problem, size_t candidates,
                             size_t seeds, size_t builtin) {
  m_in_problem = true;
  m_started = true;
  m_index = index;
  m_problem = problem;
  m_candidates = candidates;
  if (candidates > 0) {
    m_last_candidates = candidates;
  }
  m_problem_start = now();
  m_stage = "setup";
  m_stage_done = 0;
  m_stage_total = candidates;
  m_measured = 0;
  m_best.clear();
  m_best_us = 0;
  const bool cached = index < m_plan.size() && m_plan[index].cached;
  if (m_mode == Mode::plain && !cached) {
    std::string text =
        cat(head(), m_op, " ", problem, ": ", std::to_string(candidates), " candidates");
    if (index < m_plan.size() && m_plan[index].budget_s > 0) {
      text.append(", budget ").append(seconds_text(m_plan[index].budget_s));
    }
    if (seeds > 0 || builtin > 0) {
      text.append(", starting from ");
      if (seeds > 0) {
        text.append(std::to_string(seeds))
            .append(seeds == 1 ? " tuned neighbour's winner" : " tuned neighbours' winners")
            .append(builtin > 0 ? " and " : "");
      }
      if (builtin > 0) {
        text.append("the op's built-in point");
      }
    }
    line(text);
  } else if (m_mode == Mode::terminal) {
    draw(true);
  }
}

void Progress::compiling(size_t done, size_t total) {
  m_stage = "compile";
  m_stage_done = done;
  m_stage_total = total;
  draw(done == total);
}

void Progress::measuring(const std::string& stage, size_t done, size_t total, size_t measured) {
  bool new_stage = stage != m_stage;
  m_stage = stage;
  m_stage_done = done;
  m_stage_total = total;
  m_measured = measured;
  draw(new_stage && m_mode == Mode::terminal);
}

void Progress::best(const std::string& variant, double us) {
  m_best = variant;
  m_best_us = us;
}

void Progress::finish_problem(const Finished& f) {
  double seconds = now() - m_problem_start;
  if (!f.cached && f.measured > 0) {
    m_done_seconds += seconds;
    m_done_measured += f.measured;
    if (m_index < m_plan.size() && m_plan[m_index].budget_s > 0) {
      m_overhead_sum += std::max(0.0, seconds - m_plan[m_index].budget_s);
      ++m_overhead_count;
    }
  }
  m_in_problem = false;
  if (m_mode == Mode::plain) {
    std::string text;
    if (f.cached) {
      text = cat(head(), m_op, " ", m_problem, ": stored winner ", f.winner, " ",
                 microseconds(f.winner_us));
    } else {
      text = cat(head(), "done in ", seconds_text(f.seconds));
      if (f.compiled > 0) {
        text.append(", ").append(std::to_string(f.compiled)).append(" compiled");
      }
      if (f.measured > 0 || f.compiled == 0) {
        text.append(", ").append(std::to_string(f.measured)).append(" variants measured");
      }
      if (!f.winner.empty()) {
        text.append(": ").append(f.winner).append(" ").append(microseconds(f.winner_us));
      }
      text.append("; ").append(times());
    }
    line(text);
  } else {
    draw(true);
  }
}

void Progress::message(const std::string& text) {
  if (m_mode == Mode::quiet) {
    return;
  }
  finish();
  line(text);
}

void Progress::finish() {
  if (m_open) {
    std::fprintf(m_out, "\r\033[K");
    std::fflush(m_out);
    m_open = false;
  }
}

void Progress::line(const std::string& text) {
  std::fprintf(m_out, "%s\n", text.c_str());
  std::fflush(m_out);
  m_last_draw = now();
}

double Progress::rate() const {
  double seconds = m_done_seconds;
  size_t measured = m_done_measured;
  if (m_in_problem && m_measured > 0) {
    seconds += now() - m_problem_start;
    measured += m_measured;
  }
  return measured > 0 ? seconds / double(measured) : -1;
}

double Progress::overhead() const {
  return m_overhead_count ? m_overhead_sum / double(m_overhead_count) : 0;
}

double Progress::eta_s() const {
  const double r = rate();
  const double extra = overhead();
  // A problem's time from its start: bounded by its budget, else by its candidates.
  auto estimate = [&](const Planned& p, size_t candidates) -> double {
    if (p.cached) {
      return 0;
    }
    double by_rate = r >= 0 ? r * double(candidates) : -1;
    if (p.budget_s > 0) {
      return by_rate >= 0 ? std::min(p.budget_s + extra, by_rate) : p.budget_s + extra;
    }
    return by_rate;
  };
  double total = 0;
  const size_t next = m_started ? m_index + 1 : 0;
  if (m_in_problem) {
    Planned p = m_index < m_plan.size() ? m_plan[m_index] : Planned{};
    double elapsed = now() - m_problem_start;
    double whole;
    if (p.budget_s > 0) {
      whole = estimate(p, m_candidates);
    } else {
      whole = r >= 0 ? elapsed + r * double(m_candidates - std::min(m_candidates, m_measured)) : -1;
    }
    if (whole < 0) {
      return -1;
    }
    total += std::max(0.0, whole - elapsed);
  }
  for (size_t j = next; j < m_plan.size(); ++j) {
    double e = estimate(m_plan[j], m_last_candidates);
    if (e < 0) {
      return -1;
    }
    total += e;
  }
  return total;
}

std::string Progress::head() const {
  return cat("[", std::to_string(m_index + 1), "/", std::to_string(m_plan.size()), "] ");
}

std::string Progress::stage() const {
  std::string s = m_stage;
  if (m_stage != "setup") {
    s.append(" ")
        .append(std::to_string(m_stage_done))
        .append("/")
        .append(std::to_string(m_stage_total));
  }
  // A stage over part of the candidates (a compile batch, the final round) also says
  // how far the problem is.
  if (m_stage_total != m_candidates) {
    s.append(", ")
        .append(std::to_string(m_measured))
        .append("/")
        .append(std::to_string(m_candidates))
        .append(" measured");
  }
  return s;
}

std::string Progress::times() const {
  return cat(format_duration(now() - m_run_start), " elapsed, ETA ", format_duration(eta_s()));
}

std::string Progress::status() const {
  // Most important first: a narrow terminal cuts the end of the line.
  std::string s = head();
  s.append(m_in_problem ? stage() : "done").append(" | ").append(times());
  if (m_in_problem) {
    if (!m_best.empty()) {
      s.append(" | best ")
          .append(microseconds(m_best_us))
          .append(" ")
          .append(cut(m_best, k_best_chars));
    }
    s.append(" | ").append(m_problem);
  }
  return s;
}

void Progress::draw(bool force) {
  if (m_mode == Mode::quiet) {
    return;
  }
  double t = now();
  if (m_mode == Mode::plain) {
    // Between a problem's first and last line: one line per k_plain_interval_s.
    if (!m_in_problem || (m_last_draw >= 0 && t - m_last_draw < k_plain_interval_s)) {
      return;
    }
    std::string text = cat(head(), stage());
    if (!m_best.empty()) {
      text.append(", best ")
          .append(microseconds(m_best_us))
          .append(" (")
          .append(m_best)
          .append(")");
    }
    text.append(", ").append(times());
    line(text);
    return;
  }
  if (!force && m_last_draw >= 0 && t - m_last_draw < k_redraw_interval_s) {
    return;
  }
  // One character short of the width: a full line would wrap on some terminals.
  std::string text = cut(status(), size_t(std::max(10, width() - 1)));
  std::fprintf(m_out, "\r\033[K%s", text.c_str());
  std::fflush(m_out);
  m_open = true;
  m_last_draw = t;
}

} // namespace autotune
