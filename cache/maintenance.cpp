#include "cache/maintenance.hpp"

#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <utility>

namespace autotune::cache {
namespace {

namespace fs = std::filesystem;

using FieldList = std::vector<std::pair<std::string, std::string>>;

// "k=v,k=v" (the canonical problem key and --shape) as pairs.
FieldList parse_pairs(const std::string& text, const std::string& what) {
  FieldList out;
  for (const std::string& part : split(text, ',')) {
    std::string item = trim(part);
    if (item.empty()) {
      continue;
    }
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error(ErrorKind::usage, what + ": '" + item + "' is not of the form key=value");
    }
    out.emplace_back(trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
  }
  return out;
}

bool shape_matches(const FieldList& wanted, const std::string& problem) {
  FieldList have = parse_pairs(problem, "stored problem");
  for (const auto& field : wanted) {
    if (std::find(have.begin(), have.end(), field) == have.end()) {
      return false;
    }
  }
  return true;
}

bool device_matches(const std::string& wanted, const WinnerRecord& w,
                    const std::optional<DeviceRecord>& d) {
  if (wanted.empty() || starts_with(w.device_key, wanted)) {
    return true;
  }
  return d && (d->name.find(wanted) != std::string::npos || d->arch == wanted);
}

Entry make_entry(const Database& db, const WinnerRecord& w) {
  Entry e;
  e.winner = w;
  e.device = db.find_device(w.device_key);
  e.variant = db.find_variant(w.variant_key);
  e.result = db.find_result(w.device_key, w.variant_key, w.problem);
  return e;
}

// A winner row's own median as a measurement, for a winner stored without its
// result row: it counts as less well measured than any measured result.
ResultRecord as_measurement(const Entry& e) {
  if (e.result) {
    return *e.result;
  }
  ResultRecord r;
  r.outcome = Outcome::ok;
  r.median_us = e.winner.median_us;
  r.p10_us = r.median_us;
  r.p90_us = r.median_us;
  r.samples = 0;
  return r;
}

// Relative uncertainty of a median: the relative p10..p90 spread shrunk by the
// square root of the sample count. Unknown (no samples, no median) is infinite.
double uncertainty(const ResultRecord& r) {
  if (r.samples <= 0 || !(r.median_us > 0) || std::isnan(r.p10_us) || std::isnan(r.p90_us)) {
    return INFINITY;
  }
  double spread = std::max(0.0, r.p90_us - r.p10_us) / r.median_us;
  return spread / std::sqrt(double(r.samples));
}

} // namespace

std::vector<Entry> select_entries(const Database& db, const Selector& selector) {
  FieldList shape = parse_pairs(selector.shape, "--shape");
  std::vector<Entry> out;
  for (const WinnerRecord& w : db.winners()) {
    if (!selector.op.empty() && w.op != selector.op) {
      continue;
    }
    if (!shape.empty() && !shape_matches(shape, w.problem)) {
      continue;
    }
    std::optional<DeviceRecord> device = db.find_device(w.device_key);
    if (!device_matches(selector.device, w, device)) {
      continue;
    }
    out.push_back(make_entry(db, w));
  }
  return out;
}

std::vector<Entry> find_entries(const Database& db, const std::string& prefix) {
  if (prefix.size() < 4) {
    throw Error(ErrorKind::usage, "a key prefix needs at least 4 characters, got '" + prefix + "'");
  }
  std::vector<Entry> out;
  for (const WinnerRecord& w : db.winners()) {
    if (starts_with(w.key, prefix)) {
      out.push_back(make_entry(db, w));
    }
  }
  return out;
}

bool better_measured(const ResultRecord& a, const ResultRecord& b) {
  bool a_ok = a.outcome == Outcome::ok;
  bool b_ok = b.outcome == Outcome::ok;
  if (a_ok != b_ok) {
    return a_ok;
  }
  if (!a_ok) {
    return false; // two failures: nothing to prefer, keep what is there
  }
  double ua = uncertainty(a);
  double ub = uncertainty(b);
  if (ua * k_quality_margin < ub) {
    return true;
  }
  if (ub * k_quality_margin < ua) {
    return false;
  }
  return a.median_us < b.median_us;
}

CheckedSource check_source(const Database& source, const Selector& selector) {
  auto refuse = [&](const std::string& what) {
    throw Error(ErrorKind::database, "tuning database " + source.path() + ": " + what +
                                         "; refusing to merge from it (run `autotune cache "
                                         "verify " +
                                         source.path() + "`)");
  };
  std::vector<std::string> damage = source.quick_check();
  if (!damage.empty()) {
    refuse("is damaged (quick_check: " + damage.front() + ")");
  }
  CheckedSource checked;
  checked.db = &source;
  checked.entries = select_entries(source, selector);
  std::set<std::string> cubins;
  for (const Entry& e : checked.entries) {
    const WinnerRecord& w = e.winner;
    if (w.key != winner_key(w.device_key, w.op, w.problem, w.template_hash, w.nvrtc_version)) {
      refuse("winner for " + w.op + " " + w.problem +
             " has a key that is not the hash of its "
             "fields");
    }
    if (!e.variant) {
      refuse("winner for " + w.op + " " + w.problem + " names variant " + w.variant_key +
             ", which is not stored");
    }
    if (cubins.insert(e.variant->cubin_sha256).second) {
      // load_cubin verifies size and checksum and throws on a mismatch; the bytes
      // are read again (and verified again) when they are written.
      source.load_cubin(e.variant->cubin_sha256);
      ++checked.cubins_checked;
    }
  }
  return checked;
}

std::vector<MergeStats> merge_checked(Database& target, const std::vector<CheckedSource>& sources) {
  std::vector<MergeStats> stats(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    stats[i].cubins_checked = sources[i].cubins_checked;
  }
  // Whether the source's entry beats what `target` holds for its key now.
  auto wins = [&](const Entry& e, std::optional<WinnerRecord>& existing) {
    const WinnerRecord& w = e.winner;
    existing = target.find_winner(w.device_key, w.op, w.problem, w.template_hash, w.nvrtc_version);
    return !existing ||
           better_measured(as_measurement(e), as_measurement(make_entry(target, *existing)));
  };

  // Variants and cubins first, in bounded transactions. Which entries will win is
  // judged against the target as it is now; the final transaction judges again
  // under the lock and writes a variant that is still missing then.
  struct Pending {
    size_t source;
    const VariantRecord* variant;
  };
  std::vector<Pending> pending;
  std::set<std::string> planned;
  for (size_t i = 0; i < sources.size(); ++i) {
    for (const Entry& e : sources[i].entries) {
      std::optional<WinnerRecord> existing;
      if (wins(e, existing) && !planned.count(e.variant->key) &&
          !target.find_variant(e.variant->key)) {
        planned.insert(e.variant->key);
        pending.push_back({i, &*e.variant});
      }
    }
  }
  for (size_t next = 0; next < pending.size();) {
    // Read (and verify) a chunk's cubins before taking the lock.
    std::vector<std::pair<const Pending*, std::string>> chunk;
    size_t bytes = 0;
    while (next < pending.size() && chunk.size() < k_merge_chunk_rows &&
           bytes < k_merge_chunk_bytes) {
      const Pending& p = pending[next++];
      chunk.emplace_back(&p, sources[p.source].db->load_cubin(p.variant->cubin_sha256));
      bytes += chunk.back().second.size();
    }
    target.transaction([&] {
      for (const auto& [p, cubin] : chunk) {
        if (!target.find_variant(p->variant->key)) {
          target.put_variant(*p->variant, cubin);
          ++stats[p->source].variants_added;
        }
      }
    });
  }

  // Then everything the runtime looks up, all sources in one transaction.
  target.transaction([&] {
    for (size_t i = 0; i < sources.size(); ++i) {
      const Database& source = *sources[i].db;
      for (const Entry& e : sources[i].entries) {
        const WinnerRecord& w = e.winner;
        if (e.device && !target.find_device(w.device_key)) {
          target.put_device(*e.device);
        }
        std::optional<WinnerRecord> existing;
        if (!wins(e, existing)) {
          ++stats[i].winners_kept;
          continue;
        }
        if (!target.find_variant(e.variant->key)) {
          // Judged a loser before, or removed since (cache gc by a peer).
          target.put_variant(*e.variant, source.load_cubin(e.variant->cubin_sha256));
          ++stats[i].variants_added;
        }
        if (e.result) {
          std::optional<ResultRecord> stored =
              target.find_result(w.device_key, w.variant_key, w.problem);
          if (!stored || better_measured(*e.result, *stored)) {
            target.put_result(*e.result);
            ++(stored ? stats[i].results_replaced : stats[i].results_added);
          }
        }
        target.put_winner(w);
        ++(existing ? stats[i].winners_replaced : stats[i].winners_added);
      }
    }
  });
  return stats;
}

MergeStats merge_into(Database& target, const Database& source, const Selector& selector) {
  return merge_checked(target, {check_source(source, selector)}).front();
}

Database open_source(const std::string& path, std::string& temp_copy) {
  temp_copy.clear();
  try {
    return Database(path, Database::Mode::read_only);
  } catch (const Error& e) {
    // Only an older schema is worth a migrated copy; anything else stands.
    if (std::string(e.what()).find("was written by an older autotune") == std::string::npos) {
      throw;
    }
  }
  static std::atomic<int> counter{0};
  std::random_device random;
  fs::path copy = fs::temp_directory_path() / ("autotune-migrate-" + std::to_string(random()) +
                                               "-" + std::to_string(++counter) + ".db");
  std::error_code ec;
  fs::copy_file(path, copy, ec);
  if (ec) {
    throw Error(ErrorKind::io,
                "cannot copy " + path + " to " + copy.string() + " to migrate it: " + ec.message());
  }
  temp_copy = copy.string();
  { Database migrate(temp_copy, Database::Mode::read_write); }
  return Database(temp_copy, Database::Mode::read_only);
}

VerifyReport verify(const Database& db) {
  VerifyReport report;
  report.problems = db.integrity_problems();
  for (const CubinProblem& p : db.cubin_problems()) {
    report.problems.push_back("cubin " + p.sha256 + ": " + p.what + "; it will not be loaded");
    ++report.cubins_bad;
  }
  for (std::string& p : db.schema_problems()) {
    report.problems.push_back(std::move(p));
  }
  report.winners = db.winners().size();
  report.variants = db.variants().size();
  return report;
}

std::string match_key(const std::string& gpu, int cc, int sm_count, const std::string& op,
                      const std::string& problem) {
  return gpu + "|cc" + std::to_string(cc) + "|" + std::to_string(sm_count) + "sm|" + op + "|" +
         problem;
}

std::vector<TimedEntry> stored_timings(const Database& db, const Selector& selector) {
  std::map<std::string, std::pair<std::string, TimedEntry>> latest; // key -> (updated_at, timing)
  for (const Entry& e : select_entries(db, selector)) {
    const WinnerRecord& w = e.winner;
    TimedEntry t;
    t.gpu = e.device ? e.device->name : "device " + w.device_key.substr(0, 12);
    t.match_key = e.device
                      ? match_key(e.device->name, e.device->cc, e.device->sm_count, w.op, w.problem)
                      : w.device_key + "|" + w.op + "|" + w.problem;
    t.op = w.op;
    t.problem = w.problem;
    t.config = w.config;
    t.template_hash = w.template_hash;
    t.nvrtc_version = w.nvrtc_version;
    t.variant_key = w.variant_key;
    t.median_us = w.median_us;
    t.p10_us = t.p90_us = w.median_us;
    if (e.result && e.result->outcome == Outcome::ok && e.result->samples > 0 &&
        !std::isnan(e.result->p10_us) && !std::isnan(e.result->p90_us)) {
      t.p10_us = std::min(e.result->p10_us, w.median_us);
      t.p90_us = std::max(e.result->p90_us, w.median_us);
      t.samples = e.result->samples;
    }
    std::string stamp = w.updated_at + w.key;
    auto it = latest.find(t.match_key);
    if (it == latest.end() || it->second.first < stamp) {
      latest[t.match_key] = {stamp, t};
    }
  }
  std::vector<TimedEntry> out;
  for (auto& [key, value] : latest) {
    out.push_back(std::move(value.second));
  }
  return out;
}

const char* to_string(Verdict v) {
  switch (v) {
  case Verdict::same:
    return "same";
  case Verdict::regression:
    return "REGRESSION";
  case Verdict::improvement:
    return "faster";
  case Verdict::failed:
    return "FAILED";
  }
  return "?";
}

size_t RegressReport::count(Verdict v) const {
  return size_t(std::count_if(compared.begin(), compared.end(),
                              [v](const Comparison& c) { return c.verdict == v; }));
}

RegressReport compare_timings(const std::vector<TimedEntry>& baseline,
                              const std::vector<TimedEntry>& current, double threshold_pct) {
  RegressReport report;
  report.threshold_pct = threshold_pct;
  std::map<std::string, const TimedEntry*> by_key;
  for (const TimedEntry& t : current) {
    by_key[t.match_key] = &t;
  }
  std::set<std::string> matched;
  for (const TimedEntry& base : baseline) {
    auto it = by_key.find(base.match_key);
    if (it == by_key.end()) {
      report.only_baseline.push_back(base);
      continue;
    }
    matched.insert(base.match_key);
    const TimedEntry& cur = *it->second;
    Comparison c;
    c.baseline = base;
    c.current = cur;
    if (!cur.failure.empty()) {
      c.verdict = Verdict::failed;
      report.compared.push_back(c);
      continue;
    }
    c.change_pct = base.median_us > 0 ? (cur.median_us - base.median_us) / base.median_us * 100 : 0;
    if (c.change_pct > threshold_pct && cur.p10_us > base.p90_us) {
      c.verdict = Verdict::regression;
    } else if (c.change_pct < -threshold_pct && cur.p90_us < base.p10_us) {
      c.verdict = Verdict::improvement;
    }
    report.compared.push_back(c);
  }
  for (const TimedEntry& t : current) {
    if (!matched.count(t.match_key)) {
      report.only_current.push_back(t);
    }
  }
  return report;
}

} // namespace autotune::cache
