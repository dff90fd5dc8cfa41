#include "report_html.hpp"

#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/ops/op.hpp"
#include "runtime/ops/selective_scan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace autotune {
namespace {

using cache::Outcome;
using cache::ResultRecord;

// Exponentials an SM retires per clock (MUFU.EX2 on the special-function units of
// sm_80..sm_90): the rate behind selective_scan's exponential floor, the same one
// bench/bench_selective_scan.py uses.
constexpr double k_exps_per_clock_per_sm = 16;

// Per-shape charts: at most this many pixels of rows (thinner rows past it, down to
// one pixel), and rows labelled with their variant id only when at least this tall.
constexpr double k_rows_height_px = 480;
constexpr double k_row_max_px = 16;
constexpr double k_labelled_row_px = 12;
// Charts fill the page's width (scaled down on a narrower screen); labels get this
// many pixels and characters (11 px monospace: 6.6 px each; the full text is in the
// row's tooltip and in the table).
constexpr double k_chart_width = 1180;
constexpr double k_chart_label_px = 470;
constexpr size_t k_chart_label_chars = 70;
// Tables of more measurements than this start folded (<details> without `open`).
constexpr size_t k_open_table_rows = 16;

// Paul Tol's "bright" colours, told apart with the common colour-vision
// deficiencies; every colour also comes with its outcome's name in text.
const char* outcome_colour(Outcome o) {
  switch (o) {
  case Outcome::ok:
    return "#228833";
  case Outcome::wrong:
    return "#EE6677";
  case Outcome::fault:
    return "#AA3377";
  case Outcome::timeout:
    return "#CCBB44";
  case Outcome::resource:
    return "#66CCEE";
  case Outcome::compile_fail:
    return "#BBBBBB";
  }
  return "#000000";
}
// Variant bars are #4477AA; k_style repeats both for the classes of chart rows.
constexpr const char* k_winner_colour = "#EE7733";

// Display order of outcomes: what ran correctly first, then how the others failed,
// from "ran, but wrong" to "never compiled".
constexpr Outcome k_outcome_order[] = {Outcome::ok,      Outcome::wrong,    Outcome::fault,
                                       Outcome::timeout, Outcome::resource, Outcome::compile_fail};
constexpr size_t k_outcomes = std::size(k_outcome_order);

size_t outcome_rank(Outcome o) {
  for (size_t i = 0; i < k_outcomes; ++i) {
    if (k_outcome_order[i] == o) {
      return i;
    }
  }
  return k_outcomes;
}

// The work of one problem that bounds its time from below, from the op's own
// accounting (runtime/ops): effective bytes, FLOPs, exponentials.
struct Work {
  bool known = false;
  bool memory_bound = true;
  double bytes = 0;
  double flops = 0;
  double exps = 0;
  std::string why_unknown; // the op is not built into this binary, or the key does not parse
};

Work work_of(const std::string& op_name, const std::string& problem) {
  Work w;
  try {
    const Op& op = find_op(op_name);
    Problem p = op.make_problem(parse_fields(problem, "stored problem"));
    w.bytes = op.bytes(p);
    w.flops = op.flops(p);
    w.memory_bound = op.memory_bound();
    if (const auto* scan = dynamic_cast<const SelectiveScanOp*>(&op)) {
      w.exps = scan->exponentials(p);
    }
    w.known = true;
  } catch (const Error& e) {
    w.why_unknown = e.what();
  }
  return w;
}

// The time no variant can beat: the largest of the floors whose rate is known.
struct Floor {
  double bytes_us = NAN;
  double flops_us = NAN;
  double exps_us = NAN;
  double us = NAN;
  std::string bound; // which work sets `us`
};

Floor floor_of(const Work& w, const FloorRates& rates, int sm_count, int sm_clock_mhz) {
  Floor f;
  if (!w.known) {
    return f;
  }
  if (rates.copy_gbps > 0 && w.bytes > 0) {
    f.bytes_us = w.bytes / (rates.copy_gbps * 1e3);
  }
  if (rates.peak_tflops > 0 && w.flops > 0) {
    f.flops_us = w.flops / (rates.peak_tflops * 1e6);
  }
  if (w.exps > 0 && sm_count > 0 && sm_clock_mhz > 0) {
    f.exps_us = w.exps / (double(sm_count) * k_exps_per_clock_per_sm * double(sm_clock_mhz));
  }
  const std::pair<double, const char*> candidates[] = {
      {f.bytes_us, "bytes"}, {f.flops_us, "FLOPs"}, {f.exps_us, "exponentials"}};
  for (const auto& [us, name] : candidates) {
    if (!std::isnan(us) && (std::isnan(f.us) || us > f.us)) {
      f.us = us;
      f.bound = name;
    }
  }
  return f;
}

// One problem of one database on one device: its winner (if any), and its
// measurements of the winner's template hash and NVRTC version.
struct Shape {
  std::string source;
  std::string device_key;
  std::optional<cache::DeviceRecord> device;
  std::string op;
  std::string problem;
  std::optional<cache::WinnerRecord> winner;
  std::vector<ResultRecord> results; // OK fastest first, then the others by outcome
  size_t other_builds = 0;           // results of another template hash / NVRTC version
  size_t counts[k_outcomes] = {};
  Work work;
  Floor floor;
  std::string anchor;

  bool is_winner(const ResultRecord& r) const {
    return winner && r.variant_key == winner->variant_key;
  }
  const ResultRecord* winner_result() const {
    for (const ResultRecord& r : results) {
      if (is_winner(r)) {
        return &r;
      }
    }
    return nullptr;
  }
  // The time the chart and the ratios are relative to: the winner's median, else (no
  // winner stored) the fastest correct variant's.
  double reference_us() const {
    if (const ResultRecord* r = winner_result(); r && r->median_us > 0) {
      return r->median_us;
    }
    if (winner && winner->median_us > 0) {
      return winner->median_us;
    }
    for (const ResultRecord& r : results) {
      if (r.outcome == Outcome::ok && r.median_us > 0) {
        return r.median_us;
      }
    }
    return NAN;
  }
  // The fastest correct variant other than the winner.
  const ResultRecord* runner_up() const {
    for (const ResultRecord& r : results) {
      if (r.outcome == Outcome::ok && !is_winner(r)) {
        return &r;
      }
    }
    return nullptr;
  }
  size_t ok_count() const { return counts[0]; }
};

void order_results(std::vector<ResultRecord>& results) {
  std::stable_sort(results.begin(), results.end(),
                   [](const ResultRecord& a, const ResultRecord& b) {
                     const size_t ra = outcome_rank(a.outcome);
                     const size_t rb = outcome_rank(b.outcome);
                     if (ra != rb) {
                       return ra < rb;
                     }
                     if (a.outcome == Outcome::ok && a.median_us != b.median_us) {
                       return a.median_us < b.median_us;
                     }
                     return std::tie(a.config, a.variant_key) < std::tie(b.config, b.variant_key);
                   });
}

using FieldPairs = std::vector<std::pair<std::string, std::string>>;

// "k=v,k=v" as pairs; never throws (a stored key may hold anything): an item without
// '=' is a key with an empty value.
FieldPairs pairs_of(const std::string& text) {
  FieldPairs out;
  for (const std::string& part : split(text, ',')) {
    std::string item = trim(part);
    if (item.empty()) {
      continue;
    }
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      out.emplace_back(item, "");
    } else {
      out.emplace_back(trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
    }
  }
  return out;
}

// The selector's rules (cache::select_entries) applied to a problem that has no
// winner row to select by.
bool selected(const cache::Selector& selector, const std::string& device_key,
              const std::optional<cache::DeviceRecord>& device, const std::string& op,
              const std::string& problem) {
  if (!selector.op.empty() && op != selector.op) {
    return false;
  }
  if (!selector.device.empty() && !starts_with(device_key, selector.device) &&
      !(device && (device->name.find(selector.device) != std::string::npos ||
                   device->arch == selector.device))) {
    return false;
  }
  const FieldPairs have = pairs_of(problem);
  for (const auto& field : pairs_of(selector.shape)) {
    if (std::find(have.begin(), have.end(), field) == have.end()) {
      return false;
    }
  }
  return true;
}

void finish(Shape& s, const FloorRates& rates) {
  order_results(s.results);
  for (const ResultRecord& r : s.results) {
    const size_t rank = outcome_rank(r.outcome);
    if (rank < k_outcomes) {
      ++s.counts[rank];
    }
  }
  s.work = work_of(s.op, s.problem);
  const ResultRecord* w = s.winner_result();
  s.floor = floor_of(s.work, rates, s.device ? s.device->sm_count : 0, w ? w->sm_clock_mhz : 0);
}

std::vector<Shape> collect(const HtmlSource& source, const cache::Selector& selector,
                           const FloorRates& rates) {
  const cache::Database& db = *source.db;
  // variant key -> (template hash, NVRTC version): which tuning a result belongs to.
  std::map<std::string, std::pair<std::string, std::string>> builds;
  for (const cache::VariantRecord& v : db.variants()) {
    builds[v.key] = {v.template_hash, v.nvrtc_version};
  }
  using Key = std::tuple<std::string, std::string, std::string>; // device, op, problem
  std::map<Key, std::vector<ResultRecord>> measured;
  for (ResultRecord& r : db.all_results()) {
    Key key{r.device_key, r.op, r.problem};
    measured[key].push_back(std::move(r));
  }
  std::set<Key> has_winner;
  for (const cache::WinnerRecord& w : db.winners()) {
    has_winner.insert({w.device_key, w.op, w.problem});
  }

  std::vector<Shape> out;
  for (const cache::Entry& e : cache::select_entries(db, selector)) {
    Shape s;
    s.source = source.label;
    s.device_key = e.winner.device_key;
    s.device = e.device;
    s.op = e.winner.op;
    s.problem = e.winner.problem;
    s.winner = e.winner;
    auto it = measured.find({s.device_key, s.op, s.problem});
    if (it != measured.end()) {
      for (const ResultRecord& r : it->second) {
        auto b = builds.find(r.variant_key);
        // A result without a variant row (a compile failure) cannot be placed: kept.
        if (b != builds.end() &&
            b->second != std::pair(e.winner.template_hash, e.winner.nvrtc_version)) {
          ++s.other_builds;
          continue;
        }
        s.results.push_back(r);
      }
    }
    finish(s, rates);
    out.push_back(std::move(s));
  }
  for (auto& [key, results] : measured) {
    if (has_winner.count(key)) {
      continue;
    }
    Shape s;
    s.source = source.label;
    std::tie(s.device_key, s.op, s.problem) = key;
    s.device = db.find_device(s.device_key);
    if (!selected(selector, s.device_key, s.device, s.op, s.problem)) {
      continue;
    }
    s.results = results;
    finish(s, rates);
    out.push_back(std::move(s));
  }
  return out;
}

// ---- text ------------------------------------------------------------------------

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string fixed(double v, int precision) {
  if (std::isnan(v) || std::isinf(v)) {
    return "–";
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

// Microseconds with the digits that matter at that size.
std::string micros(double us) {
  if (std::isnan(us) || std::isinf(us) || us <= 0) {
    return "–";
  }
  return fixed(us, us < 10 ? 2 : us < 1000 ? 1 : 0);
}

std::string si(double v, const char* unit) {
  if (!(v > 0)) {
    return "–";
  }
  const std::pair<double, const char*> scales[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& [scale, prefix] : scales) {
    if (v >= scale) {
      return fixed(v / scale, 2) + " " + prefix + unit;
    }
  }
  return fixed(v, 0) + " " + unit;
}

// "+2.5%", or "-0.4%" for a runner-up faster than a winner it tied with.
std::string signed_percent(double pct) {
  return (pct < 0 ? "" : "+") + fixed(pct, 1) + "%";
}

// At most `max` characters (code points) of UTF-8 text, with an ellipsis when cut.
std::string shorten(const std::string& text, size_t max) {
  size_t chars = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      if (chars == max - 1) {
        size_t rest = 0;
        for (size_t j = i; j < text.size(); ++j) {
          rest += (static_cast<unsigned char>(text[j]) & 0xC0) != 0x80;
        }
        if (rest > 1) {
          return text.substr(0, i) + "…";
        }
        return text;
      }
      ++chars;
    }
  }
  return text;
}

std::string first_line(const std::string& text) {
  const size_t nl = text.find('\n');
  return nl == std::string::npos ? text : text.substr(0, nl);
}

std::string device_text(const Shape& s) {
  if (!s.device) {
    return "device " + s.device_key.substr(0, 12);
  }
  return s.device->name + " (" + s.device->arch + ", " + std::to_string(s.device->sm_count) +
         " SMs, driver " + std::to_string(s.device->driver_version) + ")";
}

std::string outcome_counts_text(const Shape& s) {
  std::string out;
  for (size_t i = 0; i < k_outcomes; ++i) {
    if (!out.empty()) {
      out += ", ";
    }
    out.append(cache::to_string(k_outcome_order[i]))
        .append(" ")
        .append(std::to_string(s.counts[i]));
  }
  return out;
}

// The op's rate at a median: GB/s of effective traffic, TFLOP/s when it has FLOPs.
double gbps(const Work& w, double us) {
  return w.known && us > 0 ? w.bytes / (us * 1e3) : NAN;
}
double tflops(const Work& w, double us) {
  return w.known && w.flops > 0 && us > 0 ? w.flops / (us * 1e6) : NAN;
}

// Each "k=v,..." key reduced to the fields that are not the same in all of them;
// `common` receives those that are ("k=v,..."). A key with nothing left, or a lone
// key, stays whole (and `common` is then empty).
std::vector<std::string> distinct_fields(const std::vector<std::string>& keys,
                                         std::string& common) {
  std::vector<FieldPairs> fields;
  for (const std::string& key : keys) {
    fields.push_back(pairs_of(key));
  }
  FieldPairs shared = fields.empty() ? FieldPairs{} : fields.front();
  for (const FieldPairs& f : fields) {
    FieldPairs keep;
    for (const auto& field : shared) {
      if (std::find(f.begin(), f.end(), field) != f.end()) {
        keep.push_back(field);
      }
    }
    shared = keep;
  }
  if (keys.size() < 2) {
    shared.clear();
  }
  std::vector<std::string> labels;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<std::string> parts;
    for (const auto& field : fields[i]) {
      if (std::find(shared.begin(), shared.end(), field) == shared.end()) {
        parts.push_back(field.second.empty() ? field.first : field.first + "=" + field.second);
      }
    }
    labels.push_back(parts.empty() ? keys[i] : join(parts, ","));
  }
  std::vector<std::string> shared_text;
  for (const auto& field : shared) {
    shared_text.push_back(field.first + "=" + field.second);
  }
  common = join(shared_text, ",");
  return labels;
}

// Labels for variant ids in a chart: the parameters that tell them apart (the shared
// ones go to `common`), as values only under a `header` of their names when every id
// names the same parameters in the same order (the canonical spelling does), else
// as name=value with an empty header.
std::vector<std::string> value_labels(const std::vector<std::string>& configs, std::string& header,
                                      std::string& common) {
  std::vector<std::string> labels = distinct_fields(configs, common);
  std::vector<std::string> names;
  std::vector<std::string> values;
  for (size_t i = 0; i < labels.size(); ++i) {
    std::vector<std::string> row_names;
    std::vector<std::string> row_values;
    for (const auto& [name, value] : pairs_of(labels[i])) {
      row_names.push_back(name);
      row_values.push_back(value);
    }
    if (i == 0) {
      names = row_names;
    } else if (row_names != names) {
      header.clear();
      return labels;
    }
    values.push_back(join(row_values, ","));
  }
  if (labels.size() < 2 || names.empty()) {
    header.clear();
    return labels;
  }
  header = join(names, ",");
  return values;
}

// Labels for an op's shapes: the fields that differ between them, and the GPU when
// the shapes come from more than one (database, device).
std::vector<std::string> short_labels(const std::vector<const Shape*>& shapes,
                                      std::string& common) {
  std::vector<std::string> keys;
  std::set<std::string> devices;
  for (const Shape* s : shapes) {
    keys.push_back(s->problem);
    devices.insert(s->source + "\n" + s->device_key);
  }
  std::vector<std::string> labels = distinct_fields(keys, common);
  if (devices.size() > 1) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      labels[i] += " · " + (shapes[i]->device ? shapes[i]->device->name
                                              : shapes[i]->device_key.substr(0, 8));
    }
  }
  return labels;
}

// ---- SVG ---------------------------------------------------------------------------

std::string px(double v) {
  return format("%.1f", v);
}

std::string svg_text(double x, double y, const std::string& text, const char* attrs = "") {
  std::string out = "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\"";
  if (*attrs) {
    out.append(" ").append(attrs);
  }
  return out + ">" + html_escape(text) + "</text>";
}

// The position attributes of a rect.
std::string box(double x, double y, double w, double h) {
  return " x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(std::max(w, 0.0)) +
         "\" height=\"" + px(std::max(h, 0.0)) + "\"";
}

std::string svg_rect(double x, double y, double w, double h, const std::string& fill,
                     const char* attrs = "") {
  std::string out = "<rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" +
                    px(std::max(w, 0.0)) + "\" height=\"" + px(std::max(h, 0.0)) + "\" fill=\"" +
                    fill + "\"";
  if (*attrs) {
    out.append(" ").append(attrs);
  }
  return out + "/>";
}

std::string svg_vline(double x, double y0, double y1, const char* stroke, const char* attrs = "") {
  std::string out = "<line x1=\"" + px(x) + "\" x2=\"" + px(x) + "\" y1=\"" + px(y0) + "\" y2=\"" +
                    px(y1) + "\" stroke=\"" + stroke + "\"";
  if (*attrs) {
    out.append(" ").append(attrs);
  }
  return out + "/>";
}

std::string svg_open(double width, double height, const std::string& label) {
  // Inline SVG in HTML needs no xmlns (and the page then names no URL at all).
  return "<svg class=\"chart\" width=\"" + px(width) + "\" height=\"" + px(height) +
         "\" viewBox=\"0 0 " + px(width) + " " + px(height) + "\" role=\"img\" aria-label=\"" +
         html_escape(label) + "\">";
}

// A round step for about `parts` ticks up to `max`.
double nice_step(double max, int parts) {
  const double raw = max / parts;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * magnitude >= raw) {
      return m * magnitude;
    }
  }
  return 10 * magnitude;
}

// Per op: each shape's winner as a bar, its share of the floor (100% = at the floor)
// when the op's shapes have floors, else its GB/s or TFLOP/s.
std::string op_chart(const std::vector<const Shape*>& shapes,
                     const std::vector<std::string>& labels) {
  bool all_floors = false; // any shape has one; those without say so
  bool by_flops = false;
  for (const Shape* s : shapes) {
    all_floors = all_floors || (s->winner && !std::isnan(s->floor.us));
    by_flops = by_flops || (s->work.known && !s->work.memory_bound && s->work.flops > 0);
  }
  std::vector<double> values;
  double max_value = 0;
  for (const Shape* s : shapes) {
    const double us = s->winner ? s->reference_us() : NAN;
    double v = NAN;
    if (!std::isnan(us)) {
      v = all_floors ? 100 * s->floor.us / us : by_flops ? tflops(s->work, us) : gbps(s->work, us);
    }
    values.push_back(v);
    if (!std::isnan(v)) {
      max_value = std::max(max_value, v);
    }
  }
  const std::string unit = all_floors ? "% of floor" : by_flops ? "TFLOP/s" : "GB/s";
  double axis_max = all_floors ? std::max(100.0, max_value) : max_value * 1.1;
  if (!(axis_max > 0)) {
    axis_max = 1;
  }
  const double step = all_floors ? 25 : nice_step(axis_max, 5);
  axis_max = std::ceil(axis_max / step - 1e-9) * step;

  const double label_w = k_chart_label_px;
  const double x0 = label_w + 10;
  const double x1 = k_chart_width - 130;
  const double row = 22;
  const double top = 30;
  const double height = top + row * double(shapes.size()) + 28;
  auto x = [&](double v) { return x0 + (x1 - x0) * std::clamp(v / axis_max, 0.0, 1.0); };

  std::string out = svg_open(k_chart_width, height, "winners of each shape, " + unit);
  out +=
      svg_text(x0, 16,
               all_floors ? "winner's share of the floor (floor time / median; 100% = at the floor)"
                          : "winner's " + unit + " at its median (no floor: see the note above)",
               "class=\"axis-title\"");
  for (double t = 0; t <= axis_max + 1e-9; t += step) {
    out += svg_vline(x(t), top - 4, top + row * double(shapes.size()), "#dddddd");
    out += svg_text(x(t), height - 10, fixed(t, step < 1 ? 1 : 0),
                    "text-anchor=\"middle\" class=\"tick\"");
  }
  if (all_floors) {
    out += svg_vline(x(100), top - 4, top + row * double(shapes.size()), "#000000",
                     "stroke-dasharray=\"4 3\"");
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = *shapes[i];
    const double y = top + row * double(i);
    out += "<g><title>" + html_escape(s.problem + "\n" + device_text(s)) + "</title>";
    out += "<a href=\"#" + s.anchor + "\">" +
           svg_text(label_w, y + 15, shorten(labels[i], k_chart_label_chars),
                    "text-anchor=\"end\" class=\"mono\"") +
           "</a>";
    if (std::isnan(values[i])) {
      out += svg_text(x0 + 4, y + 15,
                      !s.winner       ? "no correct variant"
                      : !s.work.known ? "work unknown to this build (see its section)"
                      : all_floors    ? "no floor: no rate given for its work"
                                      : "no rate known",
                      "class=\"missing\"");
    } else {
      out += svg_rect(x0, y + 4, x(values[i]) - x0, row - 8, k_winner_colour);
      std::string value_text =
          fixed(values[i], values[i] < 10 ? 2 : 1) + (all_floors ? "%" : " " + unit);
      if (all_floors) {
        value_text += " (" + s.floor.bound + ")";
      }
      out += svg_text(x(values[i]) + 5, y + 15, value_text, "class=\"value\"");
    }
    out += "</g>";
  }
  return out + "</svg>";
}

// Per shape: every correct variant as a row, fastest first, its p10..p90 range as a
// bar and its median as a tick, on a log axis of "times the winner's median"; the
// winner highlighted, the floor as a dashed line, the outcomes as a strip on top.
std::string shape_chart(const Shape& s) {
  std::vector<const ResultRecord*> rows;
  for (const ResultRecord& r : s.results) {
    if (r.outcome == Outcome::ok && r.median_us > 0) {
      rows.push_back(&r);
    }
  }
  const double ref = s.reference_us();
  const size_t n = rows.size();
  std::vector<std::string> configs;
  for (const ResultRecord* r : rows) {
    configs.push_back(r->config);
  }
  std::string header;
  std::string shared_params;
  const std::vector<std::string> row_labels = value_labels(configs, header, shared_params);
  const double row_h =
      n <= 30 ? k_row_max_px : std::clamp(k_rows_height_px / double(n), 1.0, k_row_max_px);
  const bool labelled = row_h >= k_labelled_row_px;
  const double label_w = labelled ? k_chart_label_px : 60;
  const double x0 = label_w + 10;
  const double x1 = k_chart_width - 20;

  // Ratios to the reference; a range unknown (no samples) is the median alone.
  auto lo_of = [](const ResultRecord& r) {
    return r.p10_us > 0 ? std::min(r.p10_us, r.median_us) : r.median_us;
  };
  auto hi_of = [](const ResultRecord& r) {
    return r.p90_us > 0 ? std::max(r.p90_us, r.median_us) : r.median_us;
  };
  double lo = 1;
  double hi = 1;
  for (const ResultRecord* r : rows) {
    lo = std::min(lo, lo_of(*r) / ref);
    hi = std::max(hi, hi_of(*r) / ref);
  }
  const bool floor_shown = !std::isnan(s.floor.us) && !std::isnan(ref);
  if (floor_shown) {
    lo = std::min(lo, s.floor.us / ref);
  }
  lo = std::min(lo * 0.97, 0.95);
  hi = std::max(hi * 1.03, 1.05);
  auto x = [&](double ratio) {
    return x0 + (x1 - x0) * (std::log(ratio) - std::log(lo)) / (std::log(hi) - std::log(lo));
  };

  const double strip_y = 6;
  const double legend_y = 40;
  const double top = 74;
  const double plot_h = n == 0 ? 24 : row_h * double(n);
  const double height = top + plot_h + 40;
  std::string out =
      svg_open(k_chart_width, height, "measured variants of " + s.op + " " + s.problem);

  // Outcome strip: one segment per outcome, as wide as its share of the measurements.
  const double total = double(s.results.size());
  double sx = x0;
  for (size_t i = 0; i < k_outcomes; ++i) {
    if (s.counts[i] == 0) {
      continue;
    }
    const double w = (x1 - x0) * double(s.counts[i]) / total;
    out += "<g><title>" + std::string(cache::to_string(k_outcome_order[i])) + ": " +
           std::to_string(s.counts[i]) + " of " + std::to_string(s.results.size()) + "</title>" +
           svg_rect(sx, strip_y, w, 16, outcome_colour(k_outcome_order[i])) + "</g>";
    sx += w;
  }
  out += svg_text(x0 - 8, strip_y + 13, "outcomes", "text-anchor=\"end\" class=\"tick\"");
  double lx = x0;
  for (size_t i = 0; i < k_outcomes; ++i) {
    const std::string text =
        std::string(cache::to_string(k_outcome_order[i])) + " " + std::to_string(s.counts[i]);
    out += svg_rect(lx, legend_y - 10, 10, 10, outcome_colour(k_outcome_order[i]));
    out += svg_text(lx + 14, legend_y, text,
                    s.counts[i] ? "class=\"legend\"" : "class=\"legend zero\"");
    lx += 14 + 7.5 * double(text.size()) + 18;
  }

  if (n == 0) {
    out += svg_text(x0, top + 16, "no variant ran correctly: nothing to time", "class=\"missing\"");
    return out + "</svg>";
  }

  // Grid and axis: ratio ticks, 1x always, others kept 44 px apart.
  const double candidates[] = {0.05, 0.1, 0.2, 0.3,  0.5, 0.6, 0.7, 0.8, 0.9,  0.95, 0.98, 1.02,
                               1.05, 1.1, 1.2, 1.25, 1.5, 2,   3,   4,   5,    7,    10,   15,
                               20,   30,  50,  70,   100, 200, 300, 500, 1000, 2000, 5000, 10000};
  std::vector<double> ticks = {1};
  for (int direction : {-1, 1}) {
    double last = x(1);
    std::vector<double> side;
    for (double c : candidates) {
      if ((direction < 0 ? c < 1 : c > 1) && c >= lo && c <= hi) {
        side.push_back(c);
      }
    }
    if (direction < 0) {
      std::reverse(side.begin(), side.end());
    }
    for (double c : side) {
      if (std::abs(x(c) - last) >= 44) {
        ticks.push_back(c);
        last = x(c);
      }
    }
  }
  const double bottom = top + plot_h;
  for (double t : ticks) {
    out += svg_vline(x(t), top, bottom, "#e4e4e4");
    out += svg_text(x(t), bottom + 16, format(t < 1 ? "%.2g×" : "%g×", t),
                    "text-anchor=\"middle\" class=\"tick\"");
  }
  std::string axis_title = "median ÷ " + std::string(s.winner ? "winner's" : "fastest") +
                           " median (" + micros(ref) + " µs), log scale; bar: p10..p90";
  if (labelled && !shared_params.empty()) {
    axis_title += "; every variant has " + shared_params;
  }
  if (labelled && !header.empty()) {
    out += svg_text(label_w, top - 6, shorten(header, k_chart_label_chars),
                    "text-anchor=\"end\" class=\"mono header\"");
  }
  out += svg_text(x0, bottom + 34, shorten(axis_title, 130), "class=\"axis-title\"");

  // The winner's own p10..p90 band: variants whose median falls inside it are tied
  // within the noise.
  const ResultRecord* w = s.winner_result();
  if (w) {
    out += "<g><title>winner's p10..p90 range</title>" +
           svg_rect(x(lo_of(*w) / ref), top, x(hi_of(*w) / ref) - x(lo_of(*w) / ref), plot_h,
                    k_winner_colour, "fill-opacity=\"0.15\"") +
           "</g>";
  }
  if (floor_shown) {
    const double fx = x(s.floor.us / ref);
    out += "<g><title>floor " + micros(s.floor.us) + " µs, set by the " + s.floor.bound +
           "</title>" + svg_vline(fx, top - 6, bottom, "#000000", "stroke-dasharray=\"4 3\"") +
           "</g>";
    out += svg_text(fx, top - 9, "floor", "text-anchor=\"middle\" class=\"tick\"");
  }

  for (size_t i = 0; i < n; ++i) {
    const ResultRecord& r = *rows[i];
    const bool win = s.is_winner(r);
    const double y = top + row_h * double(i);
    const double bar_h = std::max(1.0, row_h * 0.5);
    const double tick_h = std::max(1.0, row_h * 0.9);
    out += "<g><title>" +
           html_escape("#" + std::to_string(i + 1) + (win ? " (winner) " : " ") + r.config +
                       "\nmedian " + micros(r.median_us) + " µs, p10..p90 " + micros(r.p10_us) +
                       ".." + micros(r.p90_us) + " µs, " + fixed(r.median_us / ref, 3) + "× the " +
                       (s.winner ? "winner" : "fastest") + ", " + std::to_string(r.samples) +
                       " samples") +
           "</title>";
    if (win) {
      out += svg_rect(x0 - label_w, y, x1 - x0 + label_w + 10, row_h, k_winner_colour,
                      "fill-opacity=\"0.18\"");
    }
    // Rows are styled by class (k_style), not attributes: a page can hold tens of
    // thousands of them.
    const std::string win_class = win ? " win" : "";
    if (labelled) {
      // A guide from the axis to the range, so a row reads across to its label.
      out += "<line class=\"guide\" x1=\"" + px(x0) + "\" x2=\"" + px(x(lo_of(r) / ref)) +
             "\" y1=\"" + px(y + row_h / 2) + "\" y2=\"" + px(y + row_h / 2) + "\"/>";
    }
    out += "<rect class=\"range" + win_class + "\"" +
           box(x(lo_of(r) / ref), y + (row_h - bar_h) / 2,
               std::max(1.0, x(hi_of(r) / ref) - x(lo_of(r) / ref)), bar_h) +
           "/>";
    out += "<rect class=\"mid" + win_class + "\"" +
           box(x(r.median_us / ref) - 1, y + (row_h - tick_h) / 2, 2, tick_h) + "/>";
    if (labelled) {
      out += svg_text(label_w, y + row_h - 4,
                      (win ? "★ " : "") + shorten(row_labels[i], k_chart_label_chars),
                      win ? "class=\"label win\"" : "class=\"label\"");
    }
    out += "</g>";
  }
  if (!labelled) {
    // Rank ticks at the left, and the winner named once.
    const double step = nice_step(double(n), 5);
    for (double rank = 1; rank <= double(n); rank = rank == 1 && step > 1 ? step : rank + step) {
      out += svg_text(x0 - 8, top + row_h * (rank - 1) + std::max(row_h, 9.0) - 1,
                      "#" + fixed(rank, 0), "text-anchor=\"end\" class=\"tick\"");
    }
    for (size_t i = 0; i < n; ++i) {
      if (s.is_winner(*rows[i])) {
        const double y = top + row_h * double(i);
        out += svg_text(x(hi_of(*rows[i]) / ref) + 6, y + row_h / 2 + 4,
                        "★ winner (#" + std::to_string(i + 1) + ")", "class=\"win\"");
      }
    }
  }
  return out + "</svg>";
}

// ---- HTML ----------------------------------------------------------------------------

constexpr const char* k_style = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:#1f2328;margin:0;background:#fff}
main{max-width:1240px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:24px;margin:8px 0}h2{font-size:20px;margin:36px 0 8px;border-bottom:2px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:28px 0 6px;font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;word-break:break-all}
p{margin:6px 0}.note{color:#57606a}.mono,code{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace}
code{word-break:break-all}
table{border-collapse:collapse;margin:8px 0;font-size:13px}th,td{border:1px solid #d0d7de;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.win td{background:#fde7d6;font-weight:600}
td code{overflow-wrap:anywhere}td.id,table.m td:nth-child(2){min-width:18em}
table.m td{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.m td:nth-child(2),table.m td:nth-child(3),table.m td:nth-child(11){text-align:left;white-space:normal}td.shape{min-width:12em;max-width:24em;overflow-wrap:anywhere}
.scroll{overflow-x:auto}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;color:#000;white-space:nowrap}
.o-OK{background:#cfe9d4}.o-WRONG{background:#f9d0d5}.o-FAULT{background:#e6c6db}.o-TIMEOUT{background:#efe9c6}
.o-RESOURCE{background:#d1effa}.o-COMPILE_FAIL{background:#e4e4e4}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0 10px}
.facts dt{color:#57606a}.facts dd{margin:0}
svg.chart{display:block;margin:8px 0;max-width:100%;height:auto}
svg text{font-size:12px;fill:#1f2328}svg .mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:11px}
svg .tick{fill:#57606a;font-size:11px}svg .guide{stroke:#c8ced6;stroke-dasharray:1 3}
svg rect.range{fill:#4477AA;fill-opacity:.55}svg rect.range.win{fill:#EE7733;fill-opacity:1}
svg rect.mid{fill:#223F66}svg rect.mid.win{fill:#A04000}
svg text.label{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:11px;text-anchor:end}svg .header{fill:#57606a;font-weight:700}svg .axis-title{fill:#57606a}svg .value{font-size:11px}
svg .missing{fill:#b4232f;font-style:italic}svg .win{fill:#A04000;font-weight:700}svg .legend.zero{fill:#8c959f}
svg a text{fill:#0b57d0}
details{margin:6px 0}summary{cursor:pointer;color:#0b57d0}
nav ul{margin:4px 0;padding-left:20px}
)";

std::string anchor_link(const std::string& anchor, const std::string& text) {
  return "<a href=\"#" + anchor + "\">" + html_escape(text) + "</a>";
}

std::string badge(Outcome o) {
  const std::string name = cache::to_string(o);
  return "<span class=\"badge o-" + name + "\">" + name + "</span>";
}

void fact(std::string& out, const std::string& term, const std::string& html) {
  out += "<dt>" + html_escape(term) + "</dt><dd>" + html + "</dd>";
}

std::string shape_section(const Shape& s, size_t sources) {
  std::string out =
      "<section id=\"" + s.anchor + "\"><h3>" + html_escape(s.op + " " + s.problem) + "</h3>";
  out += "<dl class=\"facts\">";
  if (sources > 1) {
    fact(out, "database", "<code>" + html_escape(s.source) + "</code>");
  }
  fact(out, "GPU", html_escape(device_text(s)));
  const ResultRecord* w = s.winner_result();
  const double ref = s.reference_us();
  if (s.winner) {
    std::string text = "<code>" + html_escape(s.winner->config) + "</code>: " + micros(ref) + " µs";
    if (w) {
      text += ", p10..p90 " + micros(w->p10_us) + ".." + micros(w->p90_us) + " µs (" +
              fixed(100 * (w->p90_us - w->p10_us) / w->median_us, 1) + "% spread), " +
              std::to_string(w->samples) + " samples";
      if (w->sm_clock_mhz > 0) {
        text += " at " + std::to_string(w->sm_clock_mhz) + " MHz";
      }
    } else {
      text += " (its measurement is not in this database)";
    }
    fact(out, "winner ★", text);
  } else {
    fact(out, "winner",
         "<strong>none stored</strong>: no variant passed the correctness check twice, "
         "or the tuning was interrupted before it chose one");
  }
  if (const ResultRecord* r = s.runner_up(); r && !std::isnan(ref)) {
    const double change = 100 * (r->median_us - ref) / ref;
    std::string text = "<code>" + html_escape(r->config) + "</code>: " + micros(r->median_us) +
                       " µs, " + fixed(std::abs(change), 1) +
                       (change < 0 ? "% faster" : "% slower");
    if (w && r->median_us <= w->p90_us) {
      text += " (within the winner's p10..p90 range: a tie within the noise)";
    }
    fact(out, "runner-up", text);
  }
  if (s.work.known) {
    std::string text = si(s.work.bytes, "B");
    if (s.work.flops > 0) {
      text += ", " + si(s.work.flops, "FLOP");
    }
    if (s.work.exps > 0) {
      text += ", " + si(s.work.exps, "exp");
    }
    if (!std::isnan(ref)) {
      text += " → " + fixed(gbps(s.work, ref), 0) + " GB/s";
      if (s.work.flops > 0) {
        text += ", " + fixed(tflops(s.work, ref), 1) + " TFLOP/s";
      }
    }
    fact(out, "work", text);
  } else {
    fact(out, "work", "unknown: " + html_escape(s.work.why_unknown));
  }
  if (!std::isnan(s.floor.us)) {
    std::string text = micros(s.floor.us) + " µs, set by the " + s.floor.bound;
    if (!std::isnan(ref)) {
      text += "; the winner runs at " + fixed(100 * s.floor.us / ref, 1) + "% of it";
    }
    fact(out, "floor", text);
  }
  fact(out, "measured",
       std::to_string(s.results.size()) + " variants: " + html_escape(outcome_counts_text(s)) +
           (s.other_builds ? "; " + std::to_string(s.other_builds) +
                                 " older measurements (another template or NVRTC) not shown"
                           : ""));
  out += "</dl>";
  out += shape_chart(s);

  out += s.results.size() <= k_open_table_rows ? "<details open>" : "<details>";
  out +=
      "<summary>all " + std::to_string(s.results.size()) +
      " measurements, fastest correct first</summary><div class=\"scroll\"><table "
      "class=\"m\"><thead><tr>"
      "<th>#</th><th>variant</th><th>outcome</th><th>median µs</th><th>p10..p90 µs</th>"
      "<th>spread</th><th>× " +
      std::string(s.winner ? "winner" : "fastest") +
      "</th><th>samples</th><th>SM MHz</th><th>rel. error</th><th>message</th></tr></thead><tbody>";
  // Rows carry no classes (a page can hold tens of thousands): table.m's CSS aligns
  // the columns by position.
  size_t rank = 0;
  for (const ResultRecord& r : s.results) {
    const bool ok = r.outcome == Outcome::ok;
    const bool win = s.is_winner(r);
    out += win ? "<tr class=\"win\">" : "<tr>";
    out += "<td>" + (ok ? std::to_string(++rank) : std::string("–")) + "</td>";
    out += "<td><code>" + (win ? std::string("★ ") : std::string()) + html_escape(r.config) +
           "</code></td>";
    out += "<td>" + badge(r.outcome) + "</td>";
    if (ok) {
      out += "<td>" + micros(r.median_us) + "</td><td>" + micros(r.p10_us) + ".." +
             micros(r.p90_us) + "</td><td>" + fixed(100 * (r.p90_us - r.p10_us) / r.median_us, 1) +
             "%</td><td>" + fixed(r.median_us / ref, 3) + "</td><td>" + std::to_string(r.samples) +
             "</td>";
    } else {
      out += "<td>–</td><td>–</td><td>–</td><td>–</td><td>–</td>";
    }
    out += "<td>" + (r.sm_clock_mhz > 0 ? std::to_string(r.sm_clock_mhz) : "–") + "</td>";
    out +=
        "<td>" + (std::isnan(r.rel_err) ? std::string("NaN") : format("%.2g", r.rel_err)) + "</td>";
    if (r.message.empty()) {
      out += "<td></td></tr>";
    } else {
      out += "<td title=\"" + html_escape(shorten(r.message, 2000)) + "\">" +
             html_escape(shorten(first_line(r.message), 160)) + "</td></tr>";
    }
  }
  out += "</tbody></table></div></details></section>";
  return out;
}

std::string op_section(const std::string& op, const std::vector<const Shape*>& shapes,
                       const FloorRates& rates, size_t sources) {
  std::string common;
  const std::vector<std::string> labels = short_labels(shapes, common);
  size_t winners = 0;
  bool has_flops = false;
  bool has_floor = false;
  for (const Shape* s : shapes) {
    winners += s->winner ? 1 : 0;
    has_flops = has_flops || (s->work.known && s->work.flops > 0);
    has_floor = has_floor || !std::isnan(s->floor.us);
  }
  std::string out = "<section id=\"op-" + html_escape(shapes.front()->anchor) + "\"><h2>" +
                    html_escape(op) + "</h2>";
  out += "<p>" + std::to_string(shapes.size()) + (shapes.size() == 1 ? " shape, " : " shapes, ") +
         std::to_string(winners) + " with a winner.";
  if (!common.empty()) {
    out += " Fields all of them share: <code>" + html_escape(common) + "</code>.";
  }
  out += "</p>";
  if (!has_floor) {
    out += "<p class=\"note\">No floor for these shapes: ";
    out += rates.copy_gbps > 0 || rates.peak_tflops > 0
               ? "the op's work has no rate given for it."
               : "give the GPU's copy bandwidth (<code>--copy-gbps</code>) and arithmetic peak "
                 "(<code>--peak-tflops</code>) to place the winners against one.";
    out += "</p>";
  }
  out += op_chart(shapes, labels);
  out += "<div class=\"scroll\"><table><thead><tr><th>shape</th><th>winner</th><th>median µs</th>"
         "<th>p10..p90 µs</th><th>measured</th><th>runner-up</th><th>GB/s</th>";
  if (has_flops) {
    out += "<th>TFLOP/s</th>";
  }
  out += "<th>floor µs</th><th>% of floor</th></tr></thead><tbody>";
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = *shapes[i];
    const ResultRecord* w = s.winner_result();
    const double ref = s.winner ? s.reference_us() : NAN;
    out += "<tr><td class=\"mono shape\">" + anchor_link(s.anchor, labels[i]) + "</td>";
    out += s.winner ? "<td class=\"id\"><code>" + html_escape(s.winner->config) + "</code></td>"
                    : std::string("<td><strong>no correct variant</strong></td>");
    out += "<td class=\"num\">" + micros(ref) + "</td><td class=\"num\">" +
           (w ? micros(w->p10_us) + ".." + micros(w->p90_us) : std::string("–")) + "</td>";
    std::string measured = std::to_string(s.results.size());
    for (size_t o = 1; o < k_outcomes; ++o) {
      if (s.counts[o]) {
        measured += " " + badge(k_outcome_order[o]) + " " + std::to_string(s.counts[o]);
      }
    }
    out += "<td>" + measured + "</td>";
    const ResultRecord* r = s.runner_up();
    out += "<td class=\"num\">" +
           (r && !std::isnan(ref) ? signed_percent(100 * (r->median_us - ref) / ref)
                                  : std::string("–")) +
           "</td>";
    out += "<td class=\"num\">" + fixed(gbps(s.work, ref), 0) + "</td>";
    if (has_flops) {
      out += "<td class=\"num\">" + fixed(tflops(s.work, ref), 1) + "</td>";
    }
    out += "<td class=\"num\">" +
           (std::isnan(s.floor.us) ? std::string("–")
                                   : micros(s.floor.us) + " (" + s.floor.bound + ")") +
           "</td><td class=\"num\">" +
           (std::isnan(s.floor.us) || std::isnan(ref) ? std::string("–")
                                                      : fixed(100 * s.floor.us / ref, 1)) +
           "</td></tr>";
  }
  out += "</tbody></table></div>";
  for (const Shape* s : shapes) {
    out += shape_section(*s, sources);
  }
  return out + "</section>";
}

} // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
        out += "\xEF\xBF\xBD"; // U+FFFD
      } else {
        out += c;
      }
    }
  }
  return out;
}

std::string render_html_report(const std::vector<HtmlSource>& sources,
                               const cache::Selector& selector, const FloorRates& rates,
                               HtmlSummary* summary) {
  std::vector<Shape> shapes;
  for (const HtmlSource& source : sources) {
    std::vector<Shape> more = collect(source, selector, rates);
    std::move(more.begin(), more.end(), std::back_inserter(shapes));
  }
  std::stable_sort(shapes.begin(), shapes.end(), [](const Shape& a, const Shape& b) {
    return std::tie(a.op, a.source, a.device_key, a.problem) <
           std::tie(b.op, b.source, b.device_key, b.problem);
  });
  std::map<std::string, std::vector<const Shape*>> by_op;
  HtmlSummary totals;
  for (size_t i = 0; i < shapes.size(); ++i) {
    shapes[i].anchor = "s" + std::to_string(i + 1);
    by_op[shapes[i].op].push_back(&shapes[i]);
    totals.winners += shapes[i].winner ? 1 : 0;
    totals.results += shapes[i].results.size();
  }
  totals.ops = by_op.size();
  totals.problems = shapes.size();

  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                    "style-src 'unsafe-inline'\">\n"
                    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                    "<title>autotune tuning report</title>\n<style>";
  out += k_style;
  out += "</style></head>\n<body><main>\n<h1>autotune tuning report</h1>\n";
  out += "<p>" + std::to_string(totals.problems) + " problems of " + std::to_string(totals.ops) +
         " ops, " + std::to_string(totals.winners) + " with a winner; " +
         std::to_string(totals.results) + " variant measurements. From ";
  for (size_t i = 0; i < sources.size(); ++i) {
    out += (i ? ", " : "") + std::string("<code>") + html_escape(sources[i].label) + "</code>";
  }
  if (!selector.empty()) {
    out += ", selected by";
    if (!selector.op.empty()) {
      out += " op <code>" + html_escape(selector.op) + "</code>";
    }
    if (!selector.device.empty()) {
      out += " device <code>" + html_escape(selector.device) + "</code>";
    }
    if (!selector.shape.empty()) {
      out += " shape <code>" + html_escape(selector.shape) + "</code>";
    }
  }
  out += ".</p>\n<p class=\"note\">Each variant was checked against a float64 reference on "
         "fresh random inputs, then timed with CUDA events (L2 flushed between samples); "
         "median and p10..p90 are of those samples. Outcomes: OK (correct, timed), WRONG "
         "(failed the check), FAULT (crashed its worker), TIMEOUT, RESOURCE (needs more "
         "registers, threads or shared memory than the GPU has), COMPILE_FAIL. The floor "
         "of a problem is the largest of: its effective bytes at the copy bandwidth";
  out += rates.copy_gbps > 0 ? " (" + fixed(rates.copy_gbps, 0) + " GB/s, given)" : " (not given)";
  out += ", its FLOPs at the arithmetic peak";
  out += rates.peak_tflops > 0 ? " (" + fixed(rates.peak_tflops, 1) + " TFLOP/s, given)"
                               : " (not given)";
  out += ", and its exponentials at " + fixed(k_exps_per_clock_per_sm, 0) +
         " per clock per SM at the winner's measured SM clock (selective_scan).</p>\n";
  if (shapes.empty()) {
    out += "<p><strong>Nothing to report:</strong> no measured problem matches.</p>";
  } else {
    out += "<nav><strong>Ops</strong><ul>";
    for (const auto& [op, list] : by_op) {
      out += "<li>" + anchor_link("op-" + list.front()->anchor, op) + ": " +
             std::to_string(list.size()) + (list.size() == 1 ? " shape</li>" : " shapes</li>");
    }
    out += "</ul></nav>\n";
  }
  for (const auto& [op, list] : by_op) {
    out += op_section(op, list, rates, sources.size());
    out += "\n";
  }
  out += "</main></body></html>\n";
  if (summary) {
    *summary = totals;
  }
  return out;
}

} // namespace autotune
