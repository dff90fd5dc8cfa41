// Progress of a tuning run on stderr, in one of three modes:
//  - terminal (stderr is a TTY): one status line, redrawn in place (\r) at most
//    k_redraw_interval_s apart, cut to the terminal's width and cleared at the end:
//    problem i/N, the stage and its count (variants measured of those to measure),
//    elapsed time and the ETA of the whole run, the best so far (µs, variant), the
//    problem;
//  - plain (a log file, CI): a line when a problem starts and one when it ends, and
//    between them at most one every k_plain_interval_s; never \r;
//  - quiet (--quiet): nothing.
//
// The ETA of the run is the current problem's remainder plus each problem left:
//   rate     = seconds per variant measured so far in this run (problems answered
//              from the database excluded);
//   overhead = what finished budgeted problems took beyond their budget (inputs,
//              reference, the winner's re-check), on average;
//   problem  = min(budget + overhead, rate * candidates) when a budget bounds its
//              search, else rate * candidates (a problem not started yet counts the
//              candidates of the last one started); 0 when the database answers it.
// It is unknown ("--") until something was measured, unless budgets bound every
// problem left.
#pragma once

#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace autotune {

// Terminal mode redraws at most this often: faster than the eye needs is only
// write traffic (a remote terminal pays for each redraw).
constexpr double k_redraw_interval_s = 0.1;
// Plain mode writes at most one line this often between a problem's first and last
// line, so that a CI log of a long run stays readable.
constexpr double k_plain_interval_s = 5.0;

// "0:07", "12:34", "1:02:03"; "--" for a negative (unknown) duration.
std::string format_duration(double seconds);

class Progress {
public:
  enum class Mode { quiet, plain, terminal };
  using Clock = std::function<double()>; // seconds, monotonic

  // On stderr: terminal when stderr is a TTY, plain otherwise, quiet unless enabled.
  explicit Progress(bool enabled);
  // On `out`, with `clock` (tests pass a fake one); `width` 0: the terminal's
  // columns (else $COLUMNS, else 100).
  Progress(Mode mode, std::FILE* out, Clock clock, int width = 0);

  struct Planned {
    bool cached = false; // a stored winner answers it: nothing is measured
    double budget_s = 0; // what bounds its search (0: nothing; it measures every candidate)
  };
  // A run of one op over `plan.size()` problems, in order.
  void start_run(const std::string& op, std::vector<Planned> plan);
  // Problem `index` (0-based) starts; it may measure up to `candidates` variants, first
  // `seeds` winners of tuned neighbours and `builtin` built-in points of the op.
  void start_problem(size_t index, const std::string& problem, size_t candidates, size_t seeds = 0,
                     size_t builtin = 0);
  void compiling(size_t done, size_t total);
  // `done` of the stage's `total` measurements are done; `measured`: distinct
  // variants measured in this problem so far.
  void measuring(const std::string& stage, size_t done, size_t total, size_t measured);
  // The fastest correct measurement so far in this problem.
  void best(const std::string& variant, double us);

  struct Finished {
    bool cached = false;
    std::string winner; // empty: no correct variant (or compile-only)
    double winner_us = 0;
    double seconds = 0; // the problem's wall time
    size_t measured = 0;
    size_t compiled = 0; // variants compiled for it
  };
  void finish_problem(const Finished& f);
  // A line of its own (the live line is cleared first and redrawn later).
  void message(const std::string& text);
  // Clears the live line (terminal mode); call before printing results.
  void finish();

  Mode mode() const { return m_mode; }
  // The ETA of the run in seconds, -1 when unknown.
  double eta_s() const;
  // The status as the terminal shows it (not cut to the width).
  std::string status() const;

private:
  double now() const { return m_clock(); }
  void draw(bool force);
  void line(const std::string& text);
  int width() const;
  std::string head() const;  // "[3/51] "
  std::string stage() const; // "explore 37/234", "final 1/4, 41/234 measured"
  std::string times() const; // "0:42 elapsed, ETA 2:10"
  double rate() const;       // seconds per measured variant, -1 when unknown
  double overhead() const;

  Mode m_mode;
  std::FILE* m_out;
  Clock m_clock;
  int m_width;
  bool m_open = false;     // a live line is on the terminal
  double m_last_draw = -1; // when the terminal line or the last plain line was written

  std::string m_op;
  std::vector<Planned> m_plan;
  double m_run_start = 0;
  // Finished problems that measured something.
  double m_done_seconds = 0;
  size_t m_done_measured = 0;
  double m_overhead_sum = 0;
  size_t m_overhead_count = 0;

  // The current problem (the last one started when none is running).
  bool m_started = false;
  bool m_in_problem = false;
  size_t m_index = 0;
  std::string m_problem;
  size_t m_candidates = 0;
  size_t m_last_candidates = 0;
  double m_problem_start = 0;
  std::string m_stage;
  size_t m_stage_done = 0;
  size_t m_stage_total = 0;
  size_t m_measured = 0;
  std::string m_best;
  double m_best_us = 0;
};

} // namespace autotune
