// `autotune report --html`: one self-contained HTML page of what tuning databases
// hold, for a person deciding whether a tuning run can be trusted. Per op, the
// winners across shapes against the op's floor; per shape, every measured variant
// (median with its p10..p90 range, outcome), the winner marked. Inline CSS and
// SVG only: no script, nothing fetched (a Content-Security-Policy of
// default-src 'none' makes any reference a browser error rather than a request).
#pragma once

#include "cache/database.hpp"
#include "cache/maintenance.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace autotune {

// Rates that turn an op's work into a floor time. Neither is in the database (the
// tuner's copy timing is not stored), so the caller supplies them; 0 leaves that
// floor out. The exponential floor of selective_scan needs none: it comes from the
// device's SM count and the clock stored with the winner's result.
struct FloorRates {
  double copy_gbps = 0;   // device-to-device copy bandwidth: floor of the bytes moved
  double peak_tflops = 0; // the kernels' arithmetic peak: floor of the FLOPs
};

// One database to report on, with the name the page shows for it.
struct HtmlSource {
  std::string label;
  const cache::Database* db = nullptr;
};

// What the page covers, for the CLI's one-line summary.
struct HtmlSummary {
  size_t ops = 0;
  size_t problems = 0; // problems measured, with or without a winner
  size_t winners = 0;
  size_t results = 0; // variant measurements shown
};

// The page for the problems of `sources` that `selector` picks: every problem with
// a stored winner, and every problem measured without one (no correct variant).
// Results measured for another template hash or NVRTC version than the winner's
// (an earlier tuning) are left out and counted. Deterministic: the same databases
// and options give the same bytes (no clock, no host name).
std::string render_html_report(const std::vector<HtmlSource>& sources,
                               const cache::Selector& selector, const FloorRates& rates,
                               HtmlSummary* summary = nullptr);

// Escapes text for HTML element content and quoted attribute values (also inside
// inline SVG): & < > " ' become references, control characters other than tab and
// newline become U+FFFD, so stored text of any bytes cannot change the markup.
std::string html_escape(std::string_view text);

} // namespace autotune
