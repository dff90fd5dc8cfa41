// Schema versioning (migrations from every earlier version, the schema golden),
// the better-measured conflict rule, merge, verify, gc and the regress comparison.
#include <doctest/doctest.h>

#include "cache/database.hpp"
#include "cache/maintenance.hpp"
#include "runtime/base/hash.hpp"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>

using namespace autotune;
using namespace autotune::cache;
namespace fs = std::filesystem;

namespace {

const fs::path k_fixtures = fs::path(AUTOTUNE_SOURCE_DIR) / "tests" / "fixtures";

class TempDir {
public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device random;
    m_dir = fs::temp_directory_path() /
            ("autotune_test_maint_" + std::to_string(random()) + "_" + std::to_string(++counter));
    fs::create_directories(m_dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(m_dir, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& leaf) const { return (m_dir / leaf).string(); }
  const fs::path& path() const { return m_dir; }

private:
  fs::path m_dir;
};

std::string read_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

struct RawCloser {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};

void raw_exec(const std::string& path, const std::string& sql) {
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  std::unique_ptr<sqlite3, RawCloser> db(raw);
  char* error = nullptr;
  int rc = sqlite3_exec(db.get(), sql.c_str(), nullptr, nullptr, &error);
  std::string message = error ? error : "";
  sqlite3_free(error);
  INFO(message);
  REQUIRE(rc == SQLITE_OK);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& line : lines) {
    if (contains(line, part)) {
      return true;
    }
  }
  return false;
}

DeviceRecord gpu(const std::string& name = "NVIDIA H100 80GB HBM3") {
  DeviceRecord d;
  d.name = name;
  d.arch = "sm_90a";
  d.cc = 90;
  d.sm_count = 132;
  d.driver_version = 13000;
  return d;
}

// Stores a complete winner (device, variant, cubin, result) and returns it.
WinnerRecord put_entry(Database& db, const std::string& problem, const std::string& config,
                       double median, double p10, double p90, int samples,
                       const std::string& thash = "t1", const std::string& nvrtc = "13.0") {
  DeviceRecord device = gpu();
  db.put_device(device);
  std::string cubin = "\x7f"
                      "ELF " +
                      config + thash + nvrtc;
  VariantRecord v;
  v.op = "causal_conv1d";
  v.arch = "sm_90a";
  v.template_hash = thash;
  v.nvrtc_version = nvrtc;
  v.options = "-D" + config;
  v.config = config;
  v.kernel = "causal_conv1d_fwd";
  v.key = variant_key(v.op, thash, nvrtc, v.arch, v.options, v.kernel);
  v.cubin_sha256 = sha256_hex(cubin);
  db.put_variant(v, cubin);
  ResultRecord r;
  r.device_key = device.key();
  r.variant_key = v.key;
  r.op = v.op;
  r.problem = problem;
  r.config = config;
  r.median_us = median;
  r.p10_us = p10;
  r.p90_us = p90;
  r.samples = samples;
  db.put_result(r);
  WinnerRecord w;
  w.device_key = device.key();
  w.op = v.op;
  w.problem = problem;
  w.template_hash = thash;
  w.nvrtc_version = nvrtc;
  w.variant_key = v.key;
  w.config = config;
  w.kernel = v.kernel;
  w.median_us = median;
  db.put_winner(w);
  return w;
}

ResultRecord measurement(double median, double p10, double p90, int samples) {
  ResultRecord r;
  r.median_us = median;
  r.p10_us = p10;
  r.p90_us = p90;
  r.samples = samples;
  return r;
}

TimedEntry timed(const std::string& problem, double median, double p10, double p90) {
  TimedEntry t;
  t.match_key = match_key("GPU", 90, 132, "op", problem);
  t.op = "op";
  t.problem = problem;
  t.median_us = median;
  t.p10_us = p10;
  t.p90_us = p90;
  t.samples = 100;
  return t;
}

} // namespace

// The golden: sha256 of the schema a new database gets, per schema version. A
// schema change (a column, an index, the view) without a version bump fails here;
// with a bump, add the new version's value and a migration (SCHEMA.md).
TEST_CASE("the schema is locked by a golden value per schema version") {
  const std::map<int, std::string> k_golden = {
      {2, "0f36c86b609c4aab8dc02af62a6c291d16cb51f39e0f9182e83591f8fa3d68f6"},
  };
  REQUIRE(k_golden.count(k_schema_version));
  std::string text = Database::expected_schema_text();
  INFO(text);
  CHECK(sha256_hex(text) == k_golden.at(k_schema_version));

  TempDir dir;
  Database db(dir.file("new.db"), Database::Mode::read_write);
  CHECK(db.schema_text() == text);
  CHECK(db.schema_problems().empty());
}

TEST_CASE("a schema version 1 database is migrated with its rows intact") {
  TempDir dir;
  std::string path = dir.file("v1.db");
  fs::copy_file(k_fixtures / "schema_v1.db", path);
  const std::string device = "287c06daa6b427559992ae6de874a33cc065a449b8db94c6393ac00659342ca4";
  const std::string problem = "B=8,C=4096,L=2048,W=4";

  SUBCASE("a read-only open refuses it and leaves it alone") {
    std::string before = read_bytes(path);
    CHECK_THROWS_WITH_AS(Database(path, Database::Mode::read_only),
                         doctest::Contains("older autotune"), Error);
    CHECK(read_bytes(path) == before);
  }
  SUBCASE("open_source reads a migrated copy and leaves the file alone") {
    std::string before = read_bytes(path);
    std::string copy;
    {
      Database db = open_source(path, copy);
      CHECK_FALSE(copy.empty());
      CHECK(db.schema_version() == k_schema_version);
      CHECK(db.winners().size() == 1);
    }
    CHECK(read_bytes(path) == before);
    for (const char* suffix : {"", "-wal", "-shm"}) { // a read-only close leaves the last two
      fs::remove(copy + suffix);
    }
  }
  SUBCASE("a read-write open migrates it") {
    Database db(path, Database::Mode::read_write);
    CHECK(db.schema_version() == k_schema_version);
    CHECK(db.schema_text() == Database::expected_schema_text());
    std::optional<WinnerRecord> w = db.find_winner(device, "causal_conv1d", problem, "t1", "13.0");
    REQUIRE(w);
    CHECK(w->variant_key == "v1-variant");
    CHECK(w->key == winner_key(device, "causal_conv1d", problem, "t1", "13.0"));
    CHECK(db.find_result(device, "v1-variant", problem)->samples == 120);
    std::optional<VariantRecord> v = db.find_variant("v1-variant");
    REQUIRE(v);
    CHECK(db.load_cubin(v->cubin_sha256).substr(0, 4) == "\x7f"
                                                         "ELF");
    CHECK(verify(db).problems.empty());
  }
}

TEST_CASE("a new (version 0) file is created at the current version") {
  TempDir dir;
  std::ofstream(dir.file("empty.db")).close();
  Database db(dir.file("empty.db"), Database::Mode::read_write);
  CHECK(db.schema_version() == k_schema_version);
  CHECK(db.schema_problems().empty());
}

TEST_CASE("better-measured: OK first, then lower uncertainty, then lower median") {
  ResultRecord tight = measurement(10.0, 9.9, 10.1, 100);
  ResultRecord loose = measurement(9.0, 7.0, 11.0, 100);
  CHECK(better_measured(tight, loose)); // slower, but far better measured
  CHECK_FALSE(better_measured(loose, tight));

  ResultRecord few = measurement(10.0, 9.9, 10.1, 4);
  CHECK(better_measured(tight, few)); // same spread, 25x the samples

  ResultRecord similar_faster = measurement(9.5, 9.4, 9.6, 100);
  CHECK(better_measured(similar_faster, tight)); // equal quality: the faster one
  CHECK_FALSE(better_measured(tight, similar_faster));
  CHECK_FALSE(better_measured(tight, tight)); // a tie keeps what is there

  ResultRecord wrong = tight;
  wrong.outcome = Outcome::wrong;
  CHECK(better_measured(loose, wrong));
  CHECK_FALSE(better_measured(wrong, loose));
  CHECK_FALSE(better_measured(wrong, wrong));

  ResultRecord unknown = measurement(5.0, NAN, NAN, 0);
  CHECK(better_measured(loose, unknown));
}

TEST_CASE("merging keeps the better-measured winner on a conflict") {
  TempDir dir;
  Database target(dir.file("target.db"), Database::Mode::read_write);
  Database source(dir.file("source.db"), Database::Mode::read_write);
  const std::string p1 = "B=1,C=64,L=128,W=4,x=bf16";
  const std::string p2 = "B=2,C=64,L=128,W=4,x=fp16";
  const std::string p3 = "B=3,C=64,L=128,W=4,x=bf16";
  put_entry(target, p1, "threads=128", 10.0, 9.9, 10.1, 100);
  put_entry(source, p1, "threads=256", 8.0, 5.0, 11.0, 100); // faster but noisy: kept out
  put_entry(target, p2, "threads=128", 10.0, 8.0, 12.0, 100);
  put_entry(source, p2, "threads=64", 11.0, 10.95, 11.05, 200); // better measured: taken
  put_entry(source, p3, "threads=32", 3.0, 2.9, 3.1, 50);       // new: added

  MergeStats stats = merge_into(target, source);
  CHECK(stats.winners_added == 1);
  CHECK(stats.winners_replaced == 1);
  CHECK(stats.winners_kept == 1);
  CHECK(stats.variants_added == 2);

  std::string dev = gpu().key();
  CHECK(target.find_winner(dev, "causal_conv1d", p1, "t1", "13.0")->config == "threads=128");
  std::optional<WinnerRecord> w2 = target.find_winner(dev, "causal_conv1d", p2, "t1", "13.0");
  REQUIRE(w2);
  CHECK(w2->config == "threads=64");
  CHECK(target.find_result(dev, w2->variant_key, p2)->samples == 200);
  std::optional<WinnerRecord> w3 = target.find_winner(dev, "causal_conv1d", p3, "t1", "13.0");
  REQUIRE(w3);
  // The new winner arrives loadable: variant and cubin came with it.
  CHECK_NOTHROW(target.load_cubin(target.find_variant(w3->variant_key)->cubin_sha256));
  CHECK(verify(target).problems.empty());

  SUBCASE("merging again changes nothing") {
    MergeStats again = merge_into(target, source);
    CHECK(again.winners_added == 0);
    CHECK(again.winners_replaced == 0);
    CHECK(again.winners_kept == 3);
  }
  SUBCASE("a selector limits what is merged") {
    TempDir other;
    Database fresh(other.file("fresh.db"), Database::Mode::read_write);
    Selector s;
    s.shape = "x=fp16";
    CHECK(merge_into(fresh, source, s).winners_added == 1);
    s = {};
    s.device = "A100";
    CHECK(merge_into(fresh, source, s).winners_added == 0);
    s.device = "H100";
    s.op = "attention";
    CHECK(merge_into(fresh, source, s).winners_added == 0);
    CHECK(fresh.winners().size() == 1);
  }
}

TEST_CASE("a source with a damaged cubin is refused and the target is unchanged") {
  TempDir dir;
  {
    Database source(dir.file("source.db"), Database::Mode::read_write);
    put_entry(source, "B=1", "threads=128", 10.0, 9.9, 10.1, 100);
    put_entry(source, "B=2", "threads=64", 10.0, 9.9, 10.1, 100);
  }
  raw_exec(dir.file("source.db"),
           "UPDATE cubins SET data = substr(data, 1, 3) || CAST('#' AS BLOB) || substr(data, 5) "
           "WHERE rowid = 2");
  Database target(dir.file("target.db"), Database::Mode::read_write);
  Database source(dir.file("source.db"), Database::Mode::read_only);
  CHECK_THROWS_WITH_AS(merge_into(target, source), doctest::Contains("checksum mismatch"), Error);
  CHECK(target.winners().empty());
  CHECK(target.variants().empty());
}

TEST_CASE("verify finds damaged cubins, tampered keys and schema drift") {
  TempDir dir;
  std::string path = dir.file("db.db");
  {
    Database db(path, Database::Mode::read_write);
    put_entry(db, "B=1", "threads=128", 10.0, 9.9, 10.1, 100);
  }
  {
    Database db(path, Database::Mode::read_only);
    CHECK(verify(db).problems.empty());
  }
  std::string expect;
  SUBCASE("a cubin of the wrong size") {
    raw_exec(path, "UPDATE cubins SET data = substr(data, 1, 5)");
    expect = "size column says";
  }
  SUBCASE("a flipped cubin byte") {
    raw_exec(path, "UPDATE cubins SET data = CAST('X' AS BLOB) || substr(data, 2)");
    expect = "checksum mismatch";
  }
  SUBCASE("a winner edited behind autotune's back") {
    raw_exec(path, "UPDATE winners SET problem = 'B=2'");
    expect = "is not the hash of its fields";
  }
  SUBCASE("a winner naming a missing variant") {
    raw_exec(path, "UPDATE winners SET variant_key = 'gone'");
    expect = "which is not stored";
  }
  SUBCASE("a winner naming a variant of another template") {
    raw_exec(path, "UPDATE variants SET template_hash = 't0'");
    expect = "which is not what the winner's key says";
  }
  SUBCASE("a variant compiled for another arch than the device's") {
    raw_exec(path, "UPDATE variants SET arch = 'sm_80'");
    expect = "was compiled for sm_80";
  }
  SUBCASE("a dropped index") {
    raw_exec(path, "DROP INDEX winners_by_key");
    expect = "schema: missing or changed";
  }
  SUBCASE("an extra table") {
    raw_exec(path, "CREATE TABLE extra (x)");
    expect = "schema: unexpected";
  }
  Database db(path, Database::Mode::read_only);
  VerifyReport report = verify(db);
  INFO(report.problems.size());
  CHECK(any_contains(report.problems, expect));
}

TEST_CASE("gc drops entries of stale templates and NVRTC versions, and their cubins") {
  TempDir dir;
  Database db(dir.file("db.db"), Database::Mode::read_write);
  put_entry(db, "B=1", "threads=128", 10.0, 9.9, 10.1, 100, "t-old", "13.0");
  put_entry(db, "B=1", "threads=128", 9.0, 8.9, 9.1, 100, "t-new", "13.0");
  put_entry(db, "B=2", "threads=64", 9.0, 8.9, 9.1, 100, "t-new", "12.8");
  put_entry(db, "B=3", "threads=32", 9.0, 8.9, 9.1, 100, "t-new", "13.0");
  REQUIRE(db.winners().size() == 4);

  GcStats stats = db.remove_stale({{"causal_conv1d", "t-new"}}, "13.0");
  CHECK(stats.winners == 2);
  CHECK(stats.variants == 2);
  CHECK(stats.results == 2);
  CHECK(stats.cubins == 2);
  std::vector<WinnerRecord> left = db.winners();
  REQUIRE(left.size() == 2);
  for (const WinnerRecord& w : left) {
    CHECK(w.template_hash == "t-new");
    CHECK(w.nvrtc_version == "13.0");
  }
  CHECK(verify(db).problems.empty());

  SUBCASE("ops this build does not know keep their entries") {
    put_entry(db, "B=9", "threads=32", 9.0, 8.9, 9.1, 100, "t-other", "13.0");
    CHECK(db.remove_stale({{"attention", "t-a"}}, "13.0").winners == 0);
  }
}

TEST_CASE("a regression needs the threshold and both sides' noise") {
  std::vector<TimedEntry> base = {timed("a", 10, 9.9, 10.1), timed("b", 10, 9.9, 10.1),
                                  timed("c", 10, 9.0, 11.0), timed("d", 10, 9.9, 10.1),
                                  timed("e", 10, 9.9, 10.1)};
  std::vector<TimedEntry> cur = {timed("a", 10.4, 10.3, 10.5), // +4%: under 5%
                                 timed("b", 13, 12.9, 13.1),   // +30%: a regression
                                 timed("c", 12, 10.5, 13.5),   // +20%, overlapping noise
                                 timed("d", 8, 7.9, 8.1),      // faster
                                 timed("f", 1, 1, 1)};         // only in current
  RegressReport r = compare_timings(base, cur, 5.0);
  REQUIRE(r.compared.size() == 4);
  std::map<std::string, Verdict> verdicts;
  for (const Comparison& c : r.compared) {
    verdicts[c.baseline.problem] = c.verdict;
  }
  CHECK(verdicts["a"] == Verdict::same);
  CHECK(verdicts["b"] == Verdict::regression);
  CHECK(verdicts["c"] == Verdict::same);
  CHECK(verdicts["d"] == Verdict::improvement);
  REQUIRE(r.only_baseline.size() == 1);
  CHECK(r.only_baseline[0].problem == "e");
  REQUIRE(r.only_current.size() == 1);
  CHECK(r.only_current[0].problem == "f");
  CHECK(r.count(Verdict::regression) == 1);

  SUBCASE("a threshold above the change hides it") {
    CHECK(compare_timings(base, cur, 40.0).count(Verdict::regression) == 0);
  }
  SUBCASE("a re-timing failure is its own verdict") {
    cur[0].failure = "wrong result";
    CHECK(compare_timings(base, cur, 5.0).count(Verdict::failed) == 1);
  }
}

TEST_CASE("stored timings take the latest winner per GPU model, op and problem") {
  TempDir dir;
  Database db(dir.file("db.db"), Database::Mode::read_write);
  put_entry(db, "B=1", "threads=128", 10.0, 9.9, 10.1, 100, "t-old");
  raw_exec(dir.file("db.db"), "UPDATE winners SET updated_at = '2020-01-01T00:00:00Z'");
  put_entry(db, "B=1", "threads=64", 12.0, 11.9, 12.1, 100, "t-new");
  std::vector<TimedEntry> t = stored_timings(db);
  REQUIRE(t.size() == 1);
  CHECK(t[0].template_hash == "t-new");
  CHECK(t[0].median_us == 12.0);
  CHECK(t[0].p10_us == 11.9);
  CHECK(t[0].samples == 100);
}

TEST_CASE("a database anyone may write is reported as insecure") {
  TempDir dir;
  std::string path = dir.file("db.db");
  fs::permissions(dir.path(), fs::perms::owner_all, fs::perm_options::replace);
  std::ofstream(path).close();
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  CHECK(insecure_permissions(path).empty());
  fs::permissions(path, fs::perms::others_write, fs::perm_options::add);
  CHECK(contains(insecure_permissions(path), "writable by all users"));
  fs::permissions(path, fs::perms::others_write, fs::perm_options::remove);
  fs::permissions(path, fs::perms::group_write, fs::perm_options::add);
  CHECK(contains(insecure_permissions(path), "its group"));
  fs::permissions(path, fs::perms::group_write, fs::perm_options::remove);
  fs::permissions(dir.path(), fs::perms::others_write | fs::perms::others_exec,
                  fs::perm_options::add);
  CHECK(contains(insecure_permissions(path), "its directory"));
  fs::permissions(dir.path(), fs::perms::sticky_bit, fs::perm_options::add);
  CHECK(insecure_permissions(path).empty()); // like /tmp: others cannot replace the file
}

TEST_CASE("a source whose winner was edited behind autotune's back is refused") {
  TempDir dir;
  {
    Database source(dir.file("source.db"), Database::Mode::read_write);
    put_entry(source, "B=1", "threads=128", 10.0, 9.9, 10.1, 100);
  }
  // Re-pointing a winner at another problem keeps its old key: merging it with
  // put_winner would quietly give it a valid one.
  raw_exec(dir.file("source.db"), "UPDATE winners SET problem = 'B=2'");
  Database target(dir.file("target.db"), Database::Mode::read_write);
  Database source(dir.file("source.db"), Database::Mode::read_only);
  CHECK_THROWS_WITH_AS(merge_into(target, source), doctest::Contains("not the hash of its fields"),
                       Error);
  CHECK(target.winners().empty());
}

TEST_CASE("check_source refuses a bad source before anything is written") {
  TempDir dir;
  std::string path = dir.file("source.db");
  {
    Database source(path, Database::Mode::read_write);
    put_entry(source, "B=1", "threads=128", 10.0, 9.9, 10.1, 100);
    put_entry(source, "B=2", "threads=64", 10.0, 9.9, 10.1, 100);
    source.make_portable();
  }
  std::string expect;
  SUBCASE("a damaged cubin") {
    raw_exec(path, "UPDATE cubins SET data = CAST('X' AS BLOB) || substr(data, 2) WHERE rowid = 2");
    expect = "checksum mismatch";
  }
  SUBCASE("a winner edited behind autotune's back") {
    raw_exec(path, "UPDATE winners SET problem = 'B=3' WHERE problem = 'B=2'");
    expect = "not the hash of its fields";
  }
  SUBCASE("a winner naming a missing variant") {
    raw_exec(path, "PRAGMA foreign_keys = OFF; DELETE FROM variants WHERE config = 'threads=64'");
    expect = "which is not stored";
  }
  Database source(path, Database::Mode::read_only);
  CHECK_THROWS_WITH_AS(check_source(source), doctest::Contains(expect.c_str()), Error);
}

TEST_CASE("merge_checked writes every source, a later one competing with an earlier one") {
  TempDir dir;
  {
    Database a(dir.file("a.db"), Database::Mode::read_write);
    put_entry(a, "B=1", "threads=128", 10.0, 9.9, 10.1, 100);
    put_entry(a, "B=2", "threads=128", 10.0, 9.9, 10.1, 100);
    Database b(dir.file("b.db"), Database::Mode::read_write);
    put_entry(b, "B=2", "threads=64", 8.0, 7.9, 8.1, 100); // faster, same quality
    put_entry(b, "B=3", "threads=64", 8.0, 7.9, 8.1, 100);
  }
  Database a(dir.file("a.db"), Database::Mode::read_only);
  Database b(dir.file("b.db"), Database::Mode::read_only);
  Database target(dir.file("target.db"), Database::Mode::read_write);
  std::vector<MergeStats> stats = merge_checked(target, {check_source(a), check_source(b)});
  REQUIRE(stats.size() == 2);
  CHECK(stats[0].winners_added == 2);
  CHECK(stats[1].winners_added == 1);
  CHECK(stats[1].winners_replaced == 1);
  CHECK(stats[0].cubins_checked == 1);
  std::vector<WinnerRecord> all = target.winners();
  REQUIRE(all.size() == 3);
  for (const WinnerRecord& w : all) {
    if (w.problem == "B=2") {
      CHECK(w.config == "threads=64");
    }
  }
  CHECK(verify(target).problems.empty());
}

TEST_CASE("a merge larger than one chunk arrives whole") {
  TempDir dir;
  constexpr int k_entries = int(k_merge_chunk_rows) + 50;
  {
    Database source(dir.file("source.db"), Database::Mode::read_write);
    source.transaction([&] {
      for (int i = 0; i < k_entries; ++i) {
        put_entry(source, std::to_string(i).insert(0, "B="), std::to_string(i).insert(0, "t="),
                  10.0, 9.9, 10.1, 100);
      }
    });
  }
  Database source(dir.file("source.db"), Database::Mode::read_only);
  Database target(dir.file("target.db"), Database::Mode::read_write);
  MergeStats stats = merge_into(target, source);
  CHECK(stats.winners_added == size_t(k_entries));
  CHECK(stats.variants_added == size_t(k_entries));
  CHECK(target.variants().size() == size_t(k_entries));
  CHECK(verify(target).problems.empty());
  // Again: everything is there, nothing is written twice.
  MergeStats again = merge_into(target, source);
  CHECK(again.winners_kept == size_t(k_entries));
  CHECK(again.variants_added == 0);
}
