// Whole-database operations behind `autotune cache ...` and `autotune regress`:
// selecting entries, export / import / merge with the "better-measured" conflict
// rule, verification, and the comparison of stored timings. No CUDA here; the CLI
// (tuner/cache_cli.cpp, tuner/regress.cpp) does presentation and GPU re-timing.
// The rules are documented in SCHEMA.md ("Maintenance").
#pragma once

#include "cache/database.hpp"

#include <optional>
#include <string>
#include <vector>

namespace autotune::cache {

// Which winners a command works on; an empty field selects everything.
struct Selector {
  std::string op;
  // A substring of the GPU name ("H100"), an arch ("sm_90a") or a device key prefix.
  std::string device;
  // "k=v,...": every field must appear, with that value, in the problem key.
  std::string shape;

  bool empty() const { return op.empty() && device.empty() && shape.empty(); }
};

// A winner with everything needed to show, load and judge it.
struct Entry {
  WinnerRecord winner;
  std::optional<DeviceRecord> device;
  std::optional<VariantRecord> variant;
  std::optional<ResultRecord> result; // the winning variant's measurement
};

// The winners `selector` picks, in (device, op, problem) order. Throws
// Error(usage) for a malformed shape.
std::vector<Entry> select_entries(const Database& db, const Selector& selector);

// The winner(s) whose key starts with `prefix` (at least 4 hex digits).
std::vector<Entry> find_entries(const Database& db, const std::string& prefix);

// Whether measurement `a` is better than `b` of the same key (SCHEMA.md,
// "Conflicts between databases"): an OK measurement beats anything else; then
// the lower relative uncertainty (p90 - p10) / median / sqrt(samples) when it is
// lower by a factor of more than k_quality_margin; then the lower median. Equal: false.
bool better_measured(const ResultRecord& a, const ResultRecord& b);
// How many times lower an uncertainty must be to count as better measured; below
// it, two measurements are of equal quality and the faster one wins. 2x keeps a
// slower kernel whose spread merely looks smaller relative to its longer median
// (same absolute noise) from displacing a faster one.
constexpr double k_quality_margin = 2.0;

struct MergeStats {
  size_t winners_added = 0;
  size_t winners_replaced = 0; // the source's was better measured
  size_t winners_kept = 0;     // the target's was at least as good
  size_t results_added = 0;
  size_t results_replaced = 0;
  size_t variants_added = 0;
  size_t cubins_checked = 0;
};

// A merge source that passed check_source: its selected winners, each with its
// device, variant and result rows.
struct CheckedSource {
  const Database* db = nullptr;
  std::vector<Entry> entries;
  size_t cubins_checked = 0;
};

// Phase 1 of a merge; writes nothing anywhere. Reads the winners `selector` picks
// and checks the source: PRAGMA quick_check, every winner's stored key against the
// hash of its fields (put_winner would otherwise launder a row edited behind
// autotune's back), its variant stored, and the size and SHA-256 of every cubin
// they use. Throws Error(database) naming the source on the first problem.
CheckedSource check_source(const Database& source, const Selector& selector = {});

// Phase 2: copies every checked source's winners into `target`, each with its
// device, variant, cubin and the winning variant's result row, applying
// better_measured() on conflicts (sources in order, so a later source competes
// with what an earlier one brought). Returns one MergeStats per source.
//
// Atomic for what the runtime dispatches: the winners, results and devices of
// all sources are written in one transaction. Before it, the variants and cubins
// those winners need are written in transactions of at most k_merge_chunk_rows
// variants or k_merge_chunk_bytes of cubins, so that no import holds the write
// lock for long (peers, tuners included, wait a bounded time). Those rows are
// content-addressed and unused until a winner names them: a merge that fails
// before its last transaction leaves at most such unused variants behind.
std::vector<MergeStats> merge_checked(Database& target, const std::vector<CheckedSource>& sources);

// Rows and bytes of one variant-writing transaction of merge_checked: a few tens
// of milliseconds of writing, so eight importers and a tuner share the lock
// smoothly.
constexpr size_t k_merge_chunk_rows = 256;
constexpr size_t k_merge_chunk_bytes = size_t(16) << 20;

// check_source, then merge_checked, for one source.
MergeStats merge_into(Database& target, const Database& source, const Selector& selector = {});

// Opens a database to read from (import/merge/export/regress sources). A file
// of an older schema version is migrated in a private temporary copy, never in
// place; `temp_copy` receives that copy's path for the caller to delete.
Database open_source(const std::string& path, std::string& temp_copy);

struct VerifyReport {
  std::vector<std::string> problems; // empty: the database is sound
  size_t winners = 0;
  size_t variants = 0;
  size_t cubins_bad = 0;
};

// integrity_check, foreign keys, every cubin's size and checksum, the schema
// against this build's, winner keys and references.
VerifyReport verify(const Database& db);

// ---- regress -------------------------------------------------------------------

// One stored (or re-timed) winner timing, keyed for comparison across databases.
struct TimedEntry {
  // GPU name, compute capability, SM count, op and problem: what a regression
  // check compares across. Template hash, NVRTC and driver may differ between
  // the sides: those changes are what the check is for.
  std::string match_key;
  std::string op;
  std::string problem;
  std::string gpu;
  std::string config;
  std::string template_hash;
  std::string nvrtc_version;
  std::string variant_key;
  double median_us = 0;
  double p10_us = 0; // = median when the spread is unknown
  double p90_us = 0;
  int samples = 0;     // 0: the spread is unknown
  std::string failure; // set when re-timing could not measure it (wrong, fault)
};

std::string match_key(const std::string& gpu, int cc, int sm_count, const std::string& op,
                      const std::string& problem);

// One timing per match key: the most recently updated winner when several are
// stored (an old template hash beside a new one).
std::vector<TimedEntry> stored_timings(const Database& db, const Selector& selector = {});

enum class Verdict { same, regression, improvement, failed };
const char* to_string(Verdict v);

struct Comparison {
  TimedEntry baseline;
  TimedEntry current;
  double change_pct = 0; // (current - baseline) / baseline * 100
  Verdict verdict = Verdict::same;
};

struct RegressReport {
  double threshold_pct = 0;
  std::vector<Comparison> compared;
  std::vector<TimedEntry> only_baseline;
  std::vector<TimedEntry> only_current;
  size_t count(Verdict v) const;
};

// Slower counts as a regression only when it is beyond the threshold AND beyond
// the noise of both sides: the current p10 lies above the baseline p90 (their
// p10..p90 ranges do not overlap). Faster likewise counts as an improvement. A
// current timing that could not be measured is `failed`.
RegressReport compare_timings(const std::vector<TimedEntry>& baseline,
                              const std::vector<TimedEntry>& current, double threshold_pct);

} // namespace autotune::cache
