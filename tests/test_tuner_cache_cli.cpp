// `autotune cache ...` run as a user would: listings, export/import/merge,
// verify, bad input (exit 2, or 1 for verify, and the file unchanged), and eight
// processes writing one database at once.
#include "cache/database.hpp"
#include "runtime/base/hash.hpp"
#include "runtime/cuda/nvrtc.hpp"
#include "tests/cli_support.hpp"

#include <doctest/doctest.h>

#include <sqlite3.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace autotune;

using namespace autotune::testing;

namespace {

const fs::path k_fixtures = fs::path(AUTOTUNE_SOURCE_DIR) / "tests" / "fixtures";

class TempDir {
public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device random;
    m_dir = fs::temp_directory_path() / ("autotune_test_cache_cli_" + std::to_string(random()) +
                                         "_" + std::to_string(++counter));
    fs::create_directories(m_dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(m_dir, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& leaf) const { return (m_dir / leaf).string(); }

private:
  fs::path m_dir;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

struct RawCloser {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};

void raw_exec(const std::string& path, const std::string& sql) {
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  std::unique_ptr<sqlite3, RawCloser> db(raw);
  REQUIRE(sqlite3_exec(db.get(), sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
}

long long raw_count(const std::string& path, const std::string& table) {
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  std::unique_ptr<sqlite3, RawCloser> db(raw);
  sqlite3_stmt* stmt = nullptr;
  std::string sql = "SELECT count(*) FROM " + table;
  REQUIRE(sqlite3_prepare_v2(db.get(), sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
  long long count = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  return count;
}

std::string fixture(const std::string& name) {
  return (k_fixtures / name).string();
}

// A database of `count` winners for problems B=first..first+count-1.
void make_source(const std::string& path, int first, int count,
                 const std::string& op = "causal_conv1d") {
  cache::Database db(path, cache::Database::Mode::read_write);
  cache::DeviceRecord device;
  device.name = "NVIDIA H100 80GB HBM3";
  device.arch = "sm_90a";
  device.cc = 90;
  device.sm_count = 132;
  device.driver_version = 13000;
  db.put_device(device);
  db.transaction([&] {
    for (int i = first; i < first + count; ++i) {
      // Appended, not `"B=" + std::to_string(i)`: GCC 12 -O2 reports a false
      // -Wrestrict on that form.
      std::string problem = std::to_string(i).insert(0, "B=").append(",C=64,L=128");
      std::string cubin = std::string("\x7f"
                                      "ELF ")
                              .append(problem);
      cache::VariantRecord v;
      v.op = op;
      v.arch = "sm_90a";
      v.template_hash = "template-a";
      v.nvrtc_version = "13.0";
      v.options = "-D" + problem;
      v.config = "threads=128";
      v.kernel = "kernel";
      v.key = cache::variant_key(v.op, "template-a", "13.0", "sm_90a", v.options, "kernel");
      v.cubin_sha256 = sha256_hex(cubin);
      db.put_variant(v, cubin);
      cache::ResultRecord r;
      r.device_key = device.key();
      r.variant_key = v.key;
      r.op = v.op;
      r.problem = problem;
      r.config = v.config;
      r.median_us = 10 + i;
      r.p10_us = 9.9 + i;
      r.p90_us = 10.1 + i;
      r.samples = 50;
      db.put_result(r);
      cache::WinnerRecord w;
      w.device_key = device.key();
      w.op = v.op;
      w.problem = problem;
      w.template_hash = "template-a";
      w.nvrtc_version = "13.0";
      w.variant_key = v.key;
      w.config = v.config;
      w.kernel = "kernel";
      w.median_us = r.median_us;
      db.put_winner(w);
    }
  });
}

} // namespace

TEST_CASE("cache ls and show describe the stored winners") {
  Run r = run("cache ls --db " + fixture("regress_baseline.db"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "B=8,C=4096,L=2048,W=4,x=bf16"));
  CHECK(has(r.output, "NVIDIA H100 80GB HBM3"));
  CHECK(has(r.output, "4 of 4 winners"));

  r = run("cache ls --json --shape x=fp16 --db " + fixture("regress_baseline.db"));
  CHECK(r.code == 0);
  CHECK(has(r.output, "\"problem\":\"B=4,C=2048,L=8192,W=4,x=fp16"));
  CHECK_FALSE(has(r.output, "x=bf16"));

  cache::Database db(fixture("regress_baseline.db"), cache::Database::Mode::read_only);
  std::string key = db.winners().front().key;
  r = run("cache show " + key.substr(0, 10) + " --db " + fixture("regress_baseline.db"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "winner " + key));
  CHECK(has(r.output, "hashed into the key:"));
  CHECK(has(r.output, "template_hash=fixture-template"));
  CHECK(has(r.output, "sm_count       132"));

  r = run("cache show ffffffffff --db " + fixture("regress_baseline.db"));
  CHECK(r.code == 2);
  CHECK(has(r.output, "no winner key starts with"));
}

TEST_CASE("cache ls reads a schema version 1 file without changing it") {
  std::string before = slurp(fixture("schema_v1.db"));
  Run r = run("cache ls --db " + fixture("schema_v1.db"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "B=8,C=4096,L=2048,W=4"));
  CHECK(slurp(fixture("schema_v1.db")) == before);
}

TEST_CASE("export selects entries, import and merge bring them back") {
  TempDir dir;
  std::string out = dir.file("bf16.db");
  Run r = run("cache export " + out + " --shape x=bf16 --db " + fixture("regress_baseline.db"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(raw_count(out, "winners") == 2);
  CHECK(raw_count(out, "cubins") == 2);
  CHECK_FALSE(fs::exists(out + "-wal")); // portable: one file
  CHECK(run("cache verify " + out).code == 0);

  SUBCASE("export refuses to overwrite and to write nothing") {
    std::string before = slurp(out);
    r = run("cache export " + out + " --db " + fixture("regress_baseline.db"));
    CHECK(r.code == 2);
    CHECK(slurp(out) == before);
    r = run("cache export " + dir.file("none.db") + " --op attention --db " +
            fixture("regress_baseline.db"));
    CHECK(r.code == 2);
    CHECK_FALSE(fs::exists(dir.file("none.db")));
  }
  SUBCASE("import adds them to a database") {
    std::string target = dir.file("target.db");
    r = run("cache import " + out + " " + fixture("regress_planted.db") + " --db " + target);
    INFO(r.output);
    CHECK(r.code == 0);
    CHECK(raw_count(target, "winners") == 4);
    // The planted p2 (26 us, 100 samples, tight) and the baseline's (20 us, same
    // quality) conflict: equal quality, so the faster one stays.
    cache::Database db(target, cache::Database::Mode::read_only);
    bool found = false;
    for (const cache::WinnerRecord& w : db.winners()) {
      if (w.problem.rfind("B=1,C=8192", 0) == 0) {
        CHECK(w.median_us == 20.0);
        found = true;
      }
    }
    CHECK(found);
  }
  SUBCASE("merge writes the union into OUT") {
    std::string merged = dir.file("merged.db");
    r = run("cache merge " + merged + " " + fixture("regress_baseline.db") + " " +
            fixture("regress_clean.db"));
    INFO(r.output);
    CHECK(r.code == 0);
    CHECK(raw_count(merged, "winners") == 5);
    CHECK(run("cache verify " + merged).code == 0);
  }
}

TEST_CASE("cache verify exits 1 on the corrupted fixture and 0 on a sound one") {
  Run r = run("cache verify " + fixture("verify_corrupted.db"));
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(has(r.output, "checksum mismatch"));
  r = run("cache verify " + fixture("regress_baseline.db"));
  CHECK(r.code == 0);
  CHECK(has(r.output, "ok (4 winners"));
}

TEST_CASE("bad database files get a clear error and stay unchanged") {
  TempDir dir;
  std::string bad = dir.file("bad.db");
  std::string good = fixture("regress_baseline.db");
  std::string expect;
  bool opens = false; // the file opens; only its cubins are bad
  SUBCASE("a truncated file") {
    std::string bytes = slurp(good);
    write_bytes(bad, bytes.substr(0, bytes.size() / 3));
    expect = "damaged";
  }
  SUBCASE("not a database") {
    write_bytes(bad, std::string(5000, '\x42'));
    expect = "not a SQLite file";
  }
  SUBCASE("a newer schema version") {
    fs::copy_file(good, bad);
    raw_exec(bad, "PRAGMA user_version = 99");
    expect = "newer autotune";
  }
  SUBCASE("a missing table") {
    fs::copy_file(good, bad);
    raw_exec(bad, "DROP VIEW tuned; DROP TABLE results");
    expect = "table 'results' is missing";
  }
  SUBCASE("a cubin blob of the wrong size") {
    fs::copy_file(good, bad);
    raw_exec(bad, "UPDATE cubins SET data = substr(data, 1, 7) WHERE rowid = 1");
    expect = "checksum mismatch";
    opens = true;
  }
  std::string before = slurp(bad);
  std::string target = dir.file("target.db");
  make_source(target, 1, 2);
  std::string target_before = slurp(target);

  Run r = run("cache import " + bad + " --db " + target);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, expect));
  CHECK(has(r.output, bad));
  CHECK(slurp(target) == target_before);

  r = run("cache export " + dir.file("out.db") + " --db " + bad);
  CHECK(r.code == 2);
  CHECK_FALSE(fs::exists(dir.file("out.db")));

  r = run("cache verify " + bad);
  CHECK(r.code == 1);
  r = run("regress --baseline " + bad + " --current " + good);
  CHECK(r.code == (opens ? 0 : 2)); // regress reads timings, never cubins
  if (!opens) {
    CHECK(run("cache ls --db " + bad).code == 2);
  }
  CHECK(slurp(bad) == before);
}

TEST_CASE("bad command lines exit 2") {
  CHECK(run("cache").code == 2);
  CHECK(run("cache frobnicate").code == 2);
  CHECK(run("cache ls --bogus").code == 2);
  CHECK(run("cache import").code == 2);
  CHECK(run("cache merge out.db").code == 2);
  CHECK(run("cache show").code == 2);
  CHECK(run("cache ls --shape B --db " + fixture("regress_baseline.db")).code == 2);
}

// Eight processes at once: six import distinct databases into one target while
// two tune (compile-only) into it. Nothing may be lost and nobody may see BUSY.
TEST_CASE("eight processes writing one database at once lose no rows") {
  TempDir dir;
  std::string target = dir.file("shared.db");
  constexpr int k_importers = 6;
  constexpr int k_rows = 40;
  for (int i = 0; i < k_importers; ++i) {
    make_source(dir.file("src" + std::to_string(i) + ".db"), i * k_rows, k_rows);
  }
  std::vector<FILE*> running;
  for (int i = 0; i < k_importers; ++i) {
    running.push_back(
        start("cache import " + dir.file("src" + std::to_string(i) + ".db") + " --db " + target));
  }
  for (int i = 0; i < 2; ++i) {
    running.push_back(start("--arch sm_90a --op causal_conv1d --compile-only --quiet --param "
                            "threads=128 --param vec=8 --param items=2 --shape \"B=1,C=64,L=" +
                            std::to_string(256 * (i + 1)) + "\" --db " + target));
  }
  for (FILE* p : running) {
    Run r = finish(p);
    INFO(r.output);
    CHECK(r.code == 0);
    CHECK_FALSE(has(r.output, "busy"));
    CHECK_FALSE(has(r.output, "locked"));
  }
  CHECK(raw_count(target, "winners") == k_importers * k_rows);
  CHECK(raw_count(target, "results") == k_importers * k_rows);
  CHECK(raw_count(target, "variants") > k_importers * k_rows);
  CHECK(run("cache verify " + target).code == 0);
}

TEST_CASE("cache gc drops entries of templates that are no longer current") {
  std::string why;
  if (!cuda::nvrtc_available(&why)) {
    MESSAGE("skipped: no NVRTC (" << why << ")");
    return;
  }
  TempDir dir;
  std::string db = dir.file("old.db");
  fs::copy_file(fixture("regress_baseline.db"), db);
  make_source(dir.file("unknown.db"), 1, 1, "future_op");
  REQUIRE(run("cache import " + dir.file("unknown.db") + " --db " + db).code == 0);

  // The fixture's template hash is "fixture-template": stale for this build.
  Run r = run("cache gc --db " + db);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "removed 4 winners, 4 variants, 4 results, 4 cubins"));
  // future_op's entry stays: this build cannot tell whether its template is current.
  CHECK(raw_count(db, "winners") == 1);
  CHECK(raw_count(db, "variants") == 1);
  CHECK(run("cache verify " + db).code == 0);
}

namespace {

// Overwrites the b-tree page header of `table`'s root page: the schema still
// opens, the table is damaged.
void damage_table(const std::string& path, const std::string& table) {
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  std::unique_ptr<sqlite3, RawCloser> db(raw);
  // One file: the damage must not sit in a -wal that a later open replays.
  REQUIRE(sqlite3_exec(db.get(), "PRAGMA journal_mode = DELETE", nullptr, nullptr, nullptr) ==
          SQLITE_OK);
  auto integer = [&](const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db.get(), sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
    long long value = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    return value;
  };
  long long page_size = integer("PRAGMA page_size");
  long long root = integer("SELECT rootpage FROM sqlite_master WHERE name = '" + table + "'");
  db.reset();
  std::string bytes = slurp(path);
  size_t offset = size_t((root - 1) * page_size);
  REQUIRE(offset + 100 < bytes.size());
  bytes.replace(offset + 8, 92, std::string(92, '\xff'));
  write_bytes(path, bytes);
}

// A bad source of each kind the issue names, at `path`.
std::string make_bad_source(const std::string& path, int kind) {
  switch (kind) {
  case 0:
    make_source(path, 900, 3);
    raw_exec(path, "UPDATE cubins SET data = CAST('X' AS BLOB) || substr(data, 2) WHERE rowid = 2");
    return "checksum mismatch";
  case 1:
    write_bytes(path, std::string(4096, 'x'));
    return "not a SQLite file";
  case 2:
    raw_exec(path, "PRAGMA application_id = 1234; PRAGMA user_version = 2");
    return "application_id 1234";
  default:
    make_source(path, 900, 30);
    raw_exec(path, "PRAGMA journal_mode = DELETE");
    damage_table(path, "results");
    return "is damaged";
  }
}

} // namespace

// Issue 18: `cache import a.db bad.db` committed a.db's entries before failing on
// bad.db, and `cache merge OUT a.db bad.db` left a half-filled OUT.
TEST_CASE("cache import and merge of several files are all or nothing") {
  for (int kind = 0; kind < 4; ++kind) {
    CAPTURE(kind);
    TempDir dir;
    std::string good = dir.file("a.db");
    make_source(good, 1, 5);
    std::string bad = dir.file("bad.db");
    if (kind == 2) {
      std::ofstream(bad).close();
    }
    std::string expect = make_bad_source(bad, kind);
    std::string bad_before = slurp(bad);

    // An existing target is left byte for byte as it was.
    std::string target = dir.file("target.db");
    make_source(target, 100, 2);
    std::string target_before = slurp(target);
    Run r = run("cache import " + good + " " + bad + " --db " + target);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, expect));
    CHECK(has(r.output, bad));
    CHECK(slurp(target) == target_before);

    // A missing target is not created.
    r = run("cache import " + good + " " + bad + " --db " + dir.file("new.db"));
    CHECK(r.code == 2);
    CHECK_FALSE(fs::exists(dir.file("new.db")));

    // merge into a new OUT leaves no OUT; into an existing one, OUT unchanged.
    r = run("cache merge " + dir.file("out.db") + " " + good + " " + bad);
    CHECK(r.code == 2);
    CHECK_FALSE(fs::exists(dir.file("out.db")));
    r = run("cache merge " + target + " " + good + " " + bad);
    CHECK(r.code == 2);
    CHECK(slurp(target) == target_before);
    CHECK(slurp(bad) == bad_before);
    for (const fs::directory_entry& e : fs::directory_iterator(fs::path(target).parent_path())) {
      CHECK_FALSE(has(e.path().filename().string(), ".tmp-")); // no staging file left behind
    }
  }
}

TEST_CASE("cache merge into a new OUT builds it whole, beside it") {
  TempDir dir;
  make_source(dir.file("a.db"), 1, 5);
  make_source(dir.file("b.db"), 6, 5);
  std::string out = dir.file("sub/out.db");
  Run r = run("cache merge " + out + " " + dir.file("a.db") + " " + dir.file("b.db"));
  INFO(r.output);
  CHECK(r.code == 0);
  // Only OUT: no staging file, no -wal (checked before anything reads OUT).
  size_t files = 0;
  for ([[maybe_unused]] const fs::directory_entry& e : fs::directory_iterator(dir.file("sub"))) {
    ++files;
  }
  CHECK(files == 1);
  CHECK(raw_count(out, "winners") == 10);
  CHECK(run("cache verify " + out).code == 0);
}

// Issue 18: a tune, `cache import` and `cache gc` wrote our schema into another
// program's file and into a damaged one.
TEST_CASE("a foreign or damaged target is refused by every writer and left unchanged") {
  TempDir dir;
  std::string target = dir.file("target.db");
  std::string expect;
  SUBCASE("another program's, without tables") {
    std::ofstream(target).close();
    raw_exec(target, "PRAGMA application_id = 1234");
    expect = "application_id 1234 is another program's";
  }
  SUBCASE("only a view") {
    std::ofstream(target).close();
    raw_exec(target, "CREATE VIEW v AS SELECT 1");
    expect = "holds view 'v'";
  }
  SUBCASE("ours with another program's table") {
    make_source(target, 1, 2);
    raw_exec(target, "PRAGMA journal_mode = DELETE; CREATE TABLE notes (x)");
    expect = "holds table 'notes'";
  }
  SUBCASE("a damaged b-tree page") {
    make_source(target, 1, 40);
    damage_table(target, "results");
    expect = "is damaged";
  }
  std::string before = slurp(target);
  std::string source = dir.file("source.db");
  make_source(source, 500, 2);
  std::vector<std::string> commands = {
      "--arch sm_90a --op causal_conv1d --compile-only --quiet --param threads=128 --param vec=8 "
      "--param items=2 --param cpb=1 --param load=direct --shape \"B=1,C=64,L=256\" --db " +
          target,
      "cache import " + source + " --db " + target, "cache merge " + target + " " + source};
  std::string why;
  if (cuda::nvrtc_available(&why)) {
    commands.push_back("cache gc --db " + target);
  }
  for (const std::string& command : commands) {
    Run r = run(command);
    INFO(command);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, expect));
    CHECK(has(r.output, target));
    CHECK(slurp(target) == before);
    CHECK_FALSE(fs::exists(target + "-wal"));
  }
}

// Issue 18: of 8 concurrent `cache import`s of 2,500-winner databases, 4 exited
// with "database is locked".
TEST_CASE("eight concurrent imports of 2,500-winner databases all finish") {
  TempDir dir;
  constexpr int k_importers = 8;
  constexpr int k_rows = 2500;
  for (int i = 0; i < k_importers; ++i) {
    make_source(dir.file("big" + std::to_string(i) + ".db"), i * k_rows, k_rows);
  }
  std::string target = dir.file("shared.db");
  make_source(target, 1000000, 1); // an existing file, as in the issue
  std::vector<FILE*> running;
  for (int i = 0; i < k_importers; ++i) {
    running.push_back(
        start("cache import " + dir.file("big" + std::to_string(i) + ".db") + " --db " + target));
  }
  for (FILE* p : running) {
    Run r = finish(p);
    INFO(r.output);
    CHECK(r.code == 0);
    CHECK_FALSE(has(r.output, "locked"));
    CHECK_FALSE(has(r.output, "busy"));
  }
  CHECK(raw_count(target, "winners") == k_importers * k_rows + 1);
  CHECK(raw_count(target, "variants") == k_importers * k_rows + 1);
  CHECK(raw_count(target, "results") == k_importers * k_rows + 1);
}
