#include <doctest/doctest.h>

#include "cache/database.hpp"
#include "env_support.hpp"
#include "runtime/base/hash.hpp"

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace autotune;
using namespace autotune::cache;
using autotune::testing::ScopedEnv;
namespace fs = std::filesystem;

namespace {

// A unique path under the temp directory; removes the file, its WAL companions
// and any directories it created when it goes out of scope.
class TempPath {
public:
  explicit TempPath(const std::string& leaf = "tuning.db") {
    static std::atomic<int> counter{0};
    std::random_device random;
    m_dir = fs::temp_directory_path() /
            ("autotune_test_cache_" + std::to_string(random()) + "_" + std::to_string(++counter));
    m_path = m_dir / leaf;
  }
  ~TempPath() {
    std::error_code ec;
    fs::remove_all(m_dir, ec);
  }
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;

  std::string str() const { return m_path.string(); }
  void make_dir() const { fs::create_directories(m_path.parent_path()); }

private:
  fs::path m_dir;
  fs::path m_path;
};

std::string read_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  REQUIRE(file);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary);
  REQUIRE(file);
  file.write(bytes.data(), std::streamsize(bytes.size()));
}

struct RawCloser {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};

// Runs SQL on the file directly, behind the Database's back (to damage it).
void raw_exec(const std::string& path, const std::string& sql) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  std::unique_ptr<sqlite3, RawCloser> db(raw);
  REQUIRE(rc == SQLITE_OK);
  char* error = nullptr;
  rc = sqlite3_exec(db.get(), sql.c_str(), nullptr, nullptr, &error);
  std::string message = error ? error : "";
  sqlite3_free(error);
  INFO(message);
  REQUIRE(rc == SQLITE_OK);
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

// The message of the Error(database) that `body` throws; fails the test otherwise.
template <typename F> std::string database_error(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::database);
    return e.what();
  }
  FAIL("expected an Error(database)");
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

DeviceRecord h100() {
  DeviceRecord d;
  d.name = "NVIDIA H100 80GB HBM3";
  d.arch = "sm_90a";
  d.cc = 90;
  d.sm_count = 132;
  d.driver_version = 13000;
  return d;
}

// A cubin-like blob with NUL bytes, so nothing treats it as a C string.
std::string fake_cubin(char seed) {
  std::string bytes(300, seed);
  bytes[0] = '\x7f';
  bytes.replace(1, 3, "ELF");
  bytes[4] = '\0';
  bytes[100] = '\0';
  return bytes;
}

VariantRecord make_variant(const std::string& cubin, const std::string& options) {
  VariantRecord v;
  v.op = "causal_conv1d";
  v.arch = "sm_90a";
  v.template_hash = "t1";
  v.nvrtc_version = "13.0";
  v.options = options;
  v.config = "threads=128,vec=8";
  v.kernel = "causal_conv1d_fwd";
  v.key = variant_key(v.op, v.template_hash, v.nvrtc_version, v.arch, v.options, v.kernel);
  v.cubin_sha256 = sha256_hex(cubin);
  v.compile_s = 0.042;
  v.registers = 64;
  v.static_smem = 4096;
  return v;
}

ResultRecord make_result(const std::string& variant, double median_us) {
  ResultRecord r;
  r.device_key = h100().key();
  r.op = "causal_conv1d";
  r.problem = "B=8,C=4096,L=2048,W=4";
  r.variant_key = variant;
  r.config = "threads=128";
  r.median_us = median_us;
  r.p10_us = median_us - 1;
  r.p90_us = median_us + 1;
  r.samples = 50;
  r.sm_clock_mhz = 1980;
  r.rel_err = 1e-6;
  return r;
}

WinnerRecord make_winner() {
  WinnerRecord w;
  w.device_key = h100().key();
  w.op = "causal_conv1d";
  w.problem = "B=8,C=4096,L=2048,W=4";
  w.template_hash = "t1";
  w.nvrtc_version = "13.0";
  w.variant_key = "v1";
  w.config = "threads=128";
  w.kernel = "causal_conv1d_fwd";
  w.median_us = 12.5;
  return w;
}

} // namespace

TEST_CASE("variant keys hash every field and the schema version") {
  std::string dump;
  std::string base = variant_key("attention", "t", "13.0", "sm_90a", "-O3", "k", &dump);
  CHECK(base.size() == 64);
  CHECK(contains(dump, "schema_version=" + std::to_string(k_schema_version)));
  CHECK(contains(dump, "options=-O3"));
  CHECK(base == variant_key("attention", "t", "13.0", "sm_90a", "-O3", "k"));
  CHECK(base != variant_key("causal_conv1d", "t", "13.0", "sm_90a", "-O3", "k"));
  CHECK(base != variant_key("attention", "u", "13.0", "sm_90a", "-O3", "k"));
  CHECK(base != variant_key("attention", "t", "13.1", "sm_90a", "-O3", "k"));
  CHECK(base != variant_key("attention", "t", "13.0", "sm_80", "-O3", "k"));
  CHECK(base != variant_key("attention", "t", "13.0", "sm_90a", "-O2", "k"));
  CHECK(base != variant_key("attention", "t", "13.0", "sm_90a", "-O3", "k2"));

  DeviceRecord other = h100();
  other.driver_version = 12040;
  CHECK(h100().key() == h100().key());
  CHECK(h100().key() != other.key());
}

// Golden values: a change here silently turns every stored variant and winner
// into a miss, so it must come with a schema version bump (SCHEMA.md).
TEST_CASE("the key formats are locked by golden values") {
  std::string dump;
  CHECK(variant_key("attention", "t", "13.0", "sm_90a", "-O3", "k", &dump) ==
        "0bcb978acb1c368d3304d11ddf527d9b739f730a3a2081f174d6e58d3b89b969");
  CHECK(dump == "domain=autotune.variant\nschema_version=2\nop=attention\ntemplate_hash=t\n"
                "nvrtc_version=13.0\narch=sm_90a\noptions=-O3\nkernel=k\n");
  CHECK(h100().key(&dump) == "287c06daa6b427559992ae6de874a33cc065a449b8db94c6393ac00659342ca4");
  CHECK(dump == "domain=autotune.device.v1\nname=NVIDIA H100 80GB HBM3\narch=sm_90a\ncc=90\n"
                "sm_count=132\ndriver_version=13000\n");
  CHECK(winner_key("dev", "attention", "B=1,S=128", "t", "13.0", &dump) ==
        "4f00d6319fa8c359708232e6425b209fd7ea9ac43af45723233406c92dc9c4d3");
  CHECK(dump == "domain=autotune.winner\nschema_version=2\ndevice_key=dev\nop=attention\n"
                "problem=B=1,S=128\ntemplate_hash=t\nnvrtc_version=13.0\n");
}

TEST_CASE("the current schema has the documented tables and columns") {
  TempPath path;
  { Database db(path.str(), Database::Mode::read_write); }
  auto columns = [&](const std::string& table) {
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open_v2(path.str().c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    std::unique_ptr<sqlite3, RawCloser> db(raw);
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db.get(), "SELECT name FROM pragma_table_info(?1) ORDER BY cid", -1,
                               &stmt, nullptr) == SQLITE_OK);
    sqlite3_bind_text(stmt, 1, table.c_str(), -1, SQLITE_TRANSIENT);
    std::string names;
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      names += reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
      names += ' ';
    }
    sqlite3_finalize(stmt);
    return names;
  };
  CHECK(columns("devices") == "key name arch cc sm_count driver_version ");
  CHECK(columns("cubins") == "sha256 size data ");
  CHECK(columns("variants") == "key op arch template_hash nvrtc_version options config kernel "
                               "cubin_sha256 compile_s registers static_smem created_at ");
  CHECK(columns("results") == "device_key variant_key op problem config outcome median_us p10_us "
                              "p90_us samples sm_clock_mhz rel_err message created_at ");
  CHECK(columns("winners") == "device_key op problem template_hash nvrtc_version variant_key "
                              "config kernel median_us updated_at key ");
  CHECK(columns("tuned") == "key gpu_name arch cc sm_count driver_version op problem template_hash "
                            "nvrtc_version options config kernel cubin_sha256 median_us p10_us "
                            "p90_us samples updated_at ");
  // 0x4154554e, "ATUN": what tells an autotune file from any other SQLite file.
  CHECK(raw_count(path.str(), "pragma_application_id WHERE application_id = 1096045902") == 1);
}

TEST_CASE("outcomes round-trip through their text and unknown text is refused") {
  for (Outcome o : {Outcome::ok, Outcome::compile_fail, Outcome::resource, Outcome::fault,
                    Outcome::timeout, Outcome::wrong}) {
    CHECK(parse_outcome(to_string(o)) == o);
  }
  CHECK(std::string(to_string(Outcome::compile_fail)) == "COMPILE_FAIL");
  CHECK(contains(database_error([] { parse_outcome("ok"); }), "unknown result outcome"));
}

TEST_CASE("a new database gets the current schema version and keeps it on reopen") {
  TempPath path("nested/dirs/tuning.db");
  {
    Database db(path.str(), Database::Mode::read_write);
    CHECK(db.schema_version() == k_schema_version);
    CHECK(db.path() == path.str());
  }
  CHECK(fs::exists(path.str()));

  SUBCASE("read-write") {
    Database db(path.str(), Database::Mode::read_write);
    CHECK(db.schema_version() == k_schema_version);
  }
  SUBCASE("read-only") {
    Database db(path.str(), Database::Mode::read_only);
    CHECK(db.schema_version() == k_schema_version);
    CHECK(db.winners().empty());
  }
  SUBCASE("after a move") {
    Database db(path.str(), Database::Mode::read_write);
    Database moved(std::move(db));
    CHECK(moved.schema_version() == k_schema_version);
  }
}

TEST_CASE("a variant and its cubin round-trip") {
  TempPath path;
  Database db(path.str(), Database::Mode::read_write);
  db.put_device(h100());
  std::string cubin = fake_cubin('a');
  VariantRecord v = make_variant(cubin, "-O3 -DTHREADS=128");
  db.put_variant(v, cubin);

  std::optional<VariantRecord> found = db.find_variant(v.key);
  REQUIRE(found);
  CHECK(found->key == v.key);
  CHECK(found->op == v.op);
  CHECK(found->arch == v.arch);
  CHECK(found->template_hash == v.template_hash);
  CHECK(found->nvrtc_version == v.nvrtc_version);
  CHECK(found->options == v.options);
  CHECK(found->config == v.config);
  CHECK(found->kernel == v.kernel);
  CHECK(found->cubin_sha256 == v.cubin_sha256);
  CHECK(found->compile_s == doctest::Approx(v.compile_s));
  CHECK(found->registers == 64);
  CHECK(found->static_smem == 4096);
  CHECK(db.load_cubin(v.cubin_sha256) == cubin);

  CHECK_FALSE(db.find_variant("no such key"));
  CHECK(contains(database_error([&] { db.load_cubin(sha256_hex("nothing")); }), "not stored"));

  SUBCASE("putting it again replaces the row") {
    v.registers = 96;
    db.put_variant(v, cubin);
    CHECK(db.find_variant(v.key)->registers == 96);
    CHECK(raw_count(path.str(), "variants") == 1);
  }
  SUBCASE("bytes that do not match the cubin address are refused") {
    VariantRecord wrong = make_variant(fake_cubin('b'), "-O2");
    CHECK_THROWS_AS(db.put_variant(wrong, cubin), Error);
    CHECK_FALSE(db.find_variant(wrong.key));
  }
}

TEST_CASE("a cubin shared by two variants is stored once") {
  TempPath path;
  Database db(path.str(), Database::Mode::read_write);
  std::string cubin = fake_cubin('c');
  VariantRecord first = make_variant(cubin, "-O3 -DVEC=4");
  VariantRecord second = make_variant(cubin, "-O3 -DVEC=8");
  REQUIRE(first.key != second.key);
  db.put_variant(first, cubin);
  db.put_variant(second, cubin);

  CHECK(raw_count(path.str(), "variants") == 2);
  CHECK(raw_count(path.str(), "cubins") == 1);
  CHECK(db.load_cubin(first.cubin_sha256) == cubin);
}

TEST_CASE("a damaged cubin is refused on load and repaired by putting it again") {
  TempPath path;
  std::string cubin = fake_cubin('d');
  VariantRecord v = make_variant(cubin, "-O3");
  {
    Database db(path.str(), Database::Mode::read_write);
    db.put_variant(v, cubin);
  }

  SUBCASE("same size, one byte changed") {
    raw_exec(path.str(), "UPDATE cubins SET data = CAST(x'00' AS BLOB) || substr(data, 2)");
  }
  SUBCASE("truncated blob") {
    raw_exec(path.str(), "UPDATE cubins SET data = substr(data, 1, 10)");
  }
  SUBCASE("size column disagrees with the blob") {
    raw_exec(path.str(), "UPDATE cubins SET size = size + 1");
  }

  Database db(path.str(), Database::Mode::read_write);
  std::string message = database_error([&] { db.load_cubin(v.cubin_sha256); });
  CHECK(
      contains(message, "checksum mismatch for cubin " + v.cubin_sha256 + ": refusing to load it"));
  CHECK(contains(message, path.str()));

  db.put_variant(v, cubin);
  CHECK(db.load_cubin(v.cubin_sha256) == cubin);
  CHECK(raw_count(path.str(), "cubins") == 1);
}

TEST_CASE("results are keyed by device, variant and problem") {
  TempPath path;
  Database db(path.str(), Database::Mode::read_write);
  ResultRecord fast = make_result("v-fast", 10.0);
  ResultRecord slow = make_result("v-slow", 20.0);
  ResultRecord wrong = make_result("v-wrong", 5.0);
  wrong.outcome = Outcome::wrong;
  wrong.rel_err = std::nan("");
  wrong.message = "max rel err NaN at out[0,0,0]";
  db.put_result(slow);
  db.put_result(wrong);
  db.put_result(fast);

  std::optional<ResultRecord> found = db.find_result(fast.device_key, "v-fast", fast.problem);
  REQUIRE(found);
  CHECK(found->op == fast.op);
  CHECK(found->config == fast.config);
  CHECK(found->outcome == Outcome::ok);
  CHECK(found->median_us == 10.0);
  CHECK(found->p10_us == 9.0);
  CHECK(found->p90_us == 11.0);
  CHECK(found->samples == 50);
  CHECK(found->sm_clock_mhz == 1980);
  CHECK(found->rel_err == doctest::Approx(1e-6));

  std::optional<ResultRecord> bad = db.find_result(wrong.device_key, "v-wrong", wrong.problem);
  REQUIRE(bad);
  CHECK(bad->outcome == Outcome::wrong);
  CHECK(std::isnan(bad->rel_err));
  CHECK(bad->message == wrong.message);

  CHECK_FALSE(db.find_result(fast.device_key, "v-fast", "B=1,C=64,L=8,W=4"));
  CHECK_FALSE(db.find_result("another device", "v-fast", fast.problem));

  std::vector<ResultRecord> all = db.results(fast.device_key, fast.op, fast.problem);
  REQUIRE(all.size() == 3);
  CHECK(all[0].variant_key == "v-fast");
  CHECK(all[1].variant_key == "v-slow");
  CHECK(all[2].variant_key == "v-wrong");
  CHECK(db.results(fast.device_key, "attention", fast.problem).empty());

  SUBCASE("a second result for the same key replaces the first") {
    fast.median_us = 8.0;
    db.put_result(fast);
    CHECK(db.find_result(fast.device_key, "v-fast", fast.problem)->median_us == 8.0);
    CHECK(db.results(fast.device_key, fast.op, fast.problem).size() == 3);
  }
  SUBCASE("an unknown outcome written by someone else is an error on read") {
    raw_exec(path.str(), "UPDATE results SET outcome = 'MAYBE' WHERE variant_key = 'v-slow'");
    CHECK(contains(database_error([&] { db.find_result(slow.device_key, "v-slow", slow.problem); }),
                   "MAYBE"));
  }
}

TEST_CASE("a winner is found only for its exact key") {
  TempPath path;
  Database db(path.str(), Database::Mode::read_write);
  WinnerRecord w = make_winner();
  db.put_winner(w);

  std::optional<WinnerRecord> hit =
      db.find_winner(w.device_key, w.op, w.problem, w.template_hash, w.nvrtc_version);
  REQUIRE(hit);
  CHECK(hit->variant_key == "v1");
  CHECK(hit->config == w.config);
  CHECK(hit->kernel == w.kernel);
  CHECK(hit->median_us == 12.5);

  SUBCASE("another template hash is a miss") {
    CHECK_FALSE(db.find_winner(w.device_key, w.op, w.problem, "t2", w.nvrtc_version));
  }
  SUBCASE("another NVRTC version is a miss") {
    CHECK_FALSE(db.find_winner(w.device_key, w.op, w.problem, w.template_hash, "12.8"));
  }
  SUBCASE("another device, op or problem is a miss") {
    CHECK_FALSE(db.find_winner("other", w.op, w.problem, w.template_hash, w.nvrtc_version));
    CHECK_FALSE(
        db.find_winner(w.device_key, "attention", w.problem, w.template_hash, w.nvrtc_version));
    CHECK_FALSE(db.find_winner(w.device_key, w.op, "B=1", w.template_hash, w.nvrtc_version));
  }
  SUBCASE("the last winner put for a key replaces the earlier one") {
    WinnerRecord newer = w;
    newer.variant_key = "v2";
    newer.median_us = 14.0;
    db.put_winner(newer);
    CHECK(db.find_winner(w.device_key, w.op, w.problem, w.template_hash, w.nvrtc_version)
              ->variant_key == "v2");
    CHECK(db.winners().size() == 1);
  }
  SUBCASE("winners for other template hashes live side by side") {
    WinnerRecord other = w;
    other.template_hash = "t2";
    other.variant_key = "v3";
    db.put_winner(other);
    std::vector<WinnerRecord> all = db.winners();
    REQUIRE(all.size() == 2);
    CHECK(all[0].template_hash == "t1");
    CHECK(all[1].template_hash == "t2");
  }
}

TEST_CASE("a read-only open never creates or writes") {
  SUBCASE("a missing file throws and stays missing") {
    TempPath path("missing/tuning.db");
    CHECK(contains(database_error([&] { Database db(path.str(), Database::Mode::read_only); }),
                   "does not exist"));
    CHECK_FALSE(fs::exists(path.str()));
    CHECK_FALSE(fs::exists(fs::path(path.str()).parent_path()));
  }
  SUBCASE("an empty file is not an autotune database") {
    TempPath path;
    path.make_dir();
    write_bytes(path.str(), "");
    CHECK(contains(database_error([&] { Database db(path.str(), Database::Mode::read_only); }),
                   "not an autotune database"));
    CHECK(read_bytes(path.str()).empty());
  }
  SUBCASE("writes are refused") {
    TempPath path;
    { Database db(path.str(), Database::Mode::read_write); }
    std::string before = read_bytes(path.str());
    Database db(path.str(), Database::Mode::read_only);
    CHECK(contains(database_error([&] { db.put_winner(make_winner()); }), "read-only"));
    CHECK(contains(database_error([&] { db.put_device(h100()); }), "read-only"));
    CHECK(db.winners().empty());
    CHECK(read_bytes(path.str()) == before);
  }
}

TEST_CASE("a read-only open reads a database in a directory it cannot write") {
  if (geteuid() == 0) {
    MESSAGE("skipped: directory permissions do not apply to root");
    return;
  }
  TempPath path("shipped/tuning.db");
  {
    Database db(path.str(), Database::Mode::read_write);
    db.put_winner(make_winner());
  }
  fs::path dir = fs::path(path.str()).parent_path();
  fs::permissions(dir, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                  fs::perm_options::remove);
  std::string before = read_bytes(path.str());
  {
    Database db(path.str(), Database::Mode::read_only);
    CHECK(db.winners().size() == 1);
  }
  fs::permissions(dir, fs::perms::owner_write, fs::perm_options::add);
  CHECK(read_bytes(path.str()) == before);
}

TEST_CASE("a database written by a newer autotune is refused and left unchanged") {
  TempPath path;
  {
    Database db(path.str(), Database::Mode::read_write);
    db.put_winner(make_winner());
  }
  raw_exec(path.str(), "PRAGMA user_version = " + std::to_string(k_schema_version + 1));
  std::string before = read_bytes(path.str());

  for (Database::Mode mode : {Database::Mode::read_write, Database::Mode::read_only}) {
    CAPTURE(int(mode));
    std::string message = database_error([&] { Database db(path.str(), mode); });
    CHECK(contains(message, "was written by a newer autotune"));
    CHECK(contains(message, path.str()));
    CHECK(read_bytes(path.str()) == before);
  }
}

TEST_CASE("a file that is not an autotune database is refused and left unchanged") {
  TempPath path;
  path.make_dir();

  SUBCASE("random bytes") {
    std::mt19937 random(42);
    std::string bytes(8192, '\0');
    for (char& c : bytes) {
      c = char(random());
    }
    write_bytes(path.str(), bytes);
  }
  SUBCASE("a text file") {
    write_bytes(path.str(), "[tuning]\nbudget_s = 60\n");
  }
  SUBCASE("a file shorter than SQLite's magic") {
    write_bytes(path.str(), "SQLite");
  }
  SUBCASE("a truncated autotune database") {
    TempPath whole;
    {
      Database db(whole.str(), Database::Mode::read_write);
      std::string cubin(200000, 'x');
      db.put_variant(make_variant(cubin, "-O3"), cubin);
    }
    std::string bytes = read_bytes(whole.str());
    REQUIRE(bytes.size() > 8192);
    size_t keep = 0;
    SUBCASE("inside the header") {
      keep = 50;
    }
    SUBCASE("inside the first page") {
      keep = 1000;
    }
    SUBCASE("after a few pages") {
      keep = 8192;
    }
    SUBCASE("half of it") {
      keep = bytes.size() / 2;
    }
    write_bytes(path.str(), bytes.substr(0, keep));
  }
  SUBCASE("an SQLite database of another program") {
    raw_exec(path.str(), "CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('hello')");
  }
  SUBCASE("an SQLite database with our version but not our tables") {
    raw_exec(path.str(), "CREATE TABLE winners (x); PRAGMA user_version = 1");
  }
  std::string before = read_bytes(path.str());

  for (Database::Mode mode : {Database::Mode::read_write, Database::Mode::read_only}) {
    CAPTURE(int(mode));
    std::string message = database_error([&] { Database db(path.str(), mode); });
    CHECK(contains(message, path.str()));
    CHECK(contains(message, "not an autotune database"));
    CHECK(read_bytes(path.str()) == before);
  }
}

TEST_CASE("transactions nest and roll back as a whole") {
  TempPath path;
  Database db(path.str(), Database::Mode::read_write);
  WinnerRecord outer = make_winner();
  WinnerRecord inner = make_winner();
  inner.problem = "B=1,C=64,L=8,W=4";

  SUBCASE("an exception through both levels leaves nothing") {
    CHECK_THROWS_AS(db.transaction([&] {
      db.put_winner(outer);
      db.transaction([&] {
        db.put_winner(inner);
        throw std::runtime_error("tuning interrupted");
      });
    }),
                    std::runtime_error);
    CHECK(db.winners().empty());
  }
  SUBCASE("an inner failure caught by the outer level undoes only the inner work") {
    db.transaction([&] {
      db.put_winner(outer);
      try {
        db.transaction([&] {
          db.put_winner(inner);
          throw std::runtime_error("variant failed");
        });
      } catch (const std::runtime_error&) {
      }
    });
    std::vector<WinnerRecord> all = db.winners();
    REQUIRE(all.size() == 1);
    CHECK(all[0].problem == outer.problem);
  }
  SUBCASE("a committed nest keeps everything") {
    db.transaction([&] {
      db.put_winner(outer);
      db.transaction([&] { db.put_winner(inner); });
    });
    CHECK(db.winners().size() == 2);
  }
  // The connection is usable afterwards in every case.
  db.put_device(h100());
  CHECK(raw_count(path.str(), "devices") == 1);
}

TEST_CASE("a second writer waits for the first instead of failing") {
  TempPath path;
  Database first(path.str(), Database::Mode::read_write);
  Database second(path.str(), Database::Mode::read_write);
  std::atomic<bool> holding{false};

  std::thread holder([&] {
    first.transaction([&] {
      first.put_winner(make_winner());
      holding = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    });
  });
  while (!holding) {
    std::this_thread::yield();
  }
  WinnerRecord other = make_winner();
  other.problem = "B=2";
  CHECK_NOTHROW(second.put_winner(other));
  holder.join();
  CHECK(second.winners().size() == 2);
}

TEST_CASE("writers opening the same new file at once all succeed") {
  TempPath path("fresh/tuning.db");
  constexpr int k_writers = 8;
  constexpr int k_rows = 20;
  std::mutex mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> writers;
  for (int i = 0; i < k_writers; ++i) {
    writers.emplace_back([&, i] {
      try {
        Database db(path.str(), Database::Mode::read_write);
        for (int j = 0; j < k_rows; ++j) {
          // Appended, not `"v" + std::to_string(i)`: GCC 12 -O2 reports a false
          // -Wrestrict on that form, which -Werror builds turn into a failure.
          std::string variant = std::to_string(i).insert(0, 1, 'v');
          ResultRecord r = make_result(variant, 1.0 + j);
          r.problem = std::to_string(j).insert(0, "B=");
          db.put_result(r);
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back(e.what());
      }
    });
  }
  for (std::thread& t : writers) {
    t.join();
  }
  CHECK(failures.empty());
  for (const std::string& failure : failures) {
    MESSAGE(failure);
  }
  CHECK(raw_count(path.str(), "results") == k_writers * k_rows);
}

TEST_CASE("the default database path follows AUTOTUNE_DB, XDG_CACHE_HOME, then HOME") {
  ScopedEnv autotune_db("AUTOTUNE_DB", nullptr);
  ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", nullptr);

  SUBCASE("AUTOTUNE_DB wins") {
    setenv("AUTOTUNE_DB", "/data/my.db", 1);
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    setenv("HOME", "/home/u", 1);
    CHECK(default_database_path() == "/data/my.db");
  }
  SUBCASE("then XDG_CACHE_HOME") {
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    setenv("HOME", "/home/u", 1);
    CHECK(default_database_path() == "/xdg/autotune/tuning.db");
  }
  SUBCASE("a relative XDG_CACHE_HOME is ignored") {
    setenv("XDG_CACHE_HOME", "relative", 1);
    setenv("HOME", "/home/u", 1);
    CHECK(default_database_path() == "/home/u/.cache/autotune/tuning.db");
  }
  SUBCASE("then HOME") {
    setenv("HOME", "/home/u", 1);
    CHECK(default_database_path() == "/home/u/.cache/autotune/tuning.db");
  }
  SUBCASE("nothing set is an error") {
    CHECK(contains(database_error([] { default_database_path(); }), "AUTOTUNE_DB"));
  }
}

namespace {

// Reads one integer pragma of the file directly.
long long raw_pragma(const std::string& path, const std::string& name) {
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  std::unique_ptr<sqlite3, RawCloser> db(raw);
  sqlite3_stmt* stmt = nullptr;
  std::string sql = "PRAGMA " + name;
  REQUIRE(sqlite3_prepare_v2(db.get(), sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
  long long value = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  return value;
}

// Overwrites the b-tree page header of `table`'s root page (the file stays a
// readable SQLite file whose schema opens; the table itself is damaged).
void damage_table(const std::string& path, const std::string& table) {
  long long page_size = raw_pragma(path, "page_size");
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  std::unique_ptr<sqlite3, RawCloser> db(raw);
  sqlite3_stmt* stmt = nullptr;
  std::string sql = "SELECT rootpage FROM sqlite_master WHERE name = '" + table + "'";
  REQUIRE(sqlite3_prepare_v2(db.get(), sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
  long long root = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  db.reset();
  std::string bytes = read_bytes(path);
  size_t offset = size_t((root - 1) * page_size);
  REQUIRE(offset + 100 < bytes.size());
  bytes.replace(offset + 8, 92, std::string(92, '\xff'));
  write_bytes(path, bytes);
}

} // namespace

// Issue 18: a file with another program's application_id and no tables, or with
// only a view, was given our schema, our application_id and a WAL journal.
TEST_CASE("another program's SQLite file is refused in every mode and never taken over") {
  TempPath path;
  path.make_dir();
  std::string expect;
  SUBCASE("its own application_id and no tables") {
    raw_exec(path.str(), "PRAGMA application_id = 1234");
    expect = "application_id 1234 is another program's";
  }
  SUBCASE("its own application_id and our schema version") {
    raw_exec(path.str(), "PRAGMA application_id = 1234; PRAGMA user_version = 2");
    expect = "application_id 1234";
  }
  SUBCASE("only a view") {
    raw_exec(path.str(), "CREATE VIEW answer AS SELECT 42");
    expect = "it holds view 'answer'";
  }
  SUBCASE("a table and a trigger") {
    raw_exec(path.str(), "CREATE TABLE log (x); CREATE TRIGGER t AFTER INSERT ON log BEGIN "
                         "SELECT 1; END");
    expect = "but no autotune schema version";
  }
  SUBCASE("our application_id, nothing else of ours") {
    raw_exec(path.str(), "PRAGMA application_id = 1096045902; CREATE VIEW v AS SELECT 1");
    expect = "it holds view 'v'";
  }
  std::string before = read_bytes(path.str());
  for (Database::Mode mode : {Database::Mode::read_write, Database::Mode::read_only}) {
    CAPTURE(int(mode));
    std::string message = database_error([&] { Database db(path.str(), mode); });
    CHECK(contains(message, path.str()));
    CHECK(contains(message, "not an autotune database"));
    CHECK(contains(message, expect));
    CHECK(read_bytes(path.str()) == before);
    CHECK_FALSE(fs::exists(path.str() + "-wal"));
  }
}

TEST_CASE("a database holding objects autotune does not create is read, never written") {
  TempPath path;
  {
    Database db(path.str(), Database::Mode::read_write);
    db.put_winner(make_winner());
  }
  std::string expect;
  SUBCASE("a table") {
    raw_exec(path.str(), "CREATE TABLE notes (text TEXT)");
    expect = "holds table 'notes'";
  }
  SUBCASE("a view") {
    raw_exec(path.str(), "CREATE VIEW fast AS SELECT * FROM winners WHERE median_us < 10");
    expect = "holds view 'fast'";
  }
  SUBCASE("an index") {
    raw_exec(path.str(), "CREATE INDEX winners_by_op ON winners (op)");
    expect = "holds index 'winners_by_op'";
  }
  SUBCASE("a trigger") {
    raw_exec(path.str(), "CREATE TRIGGER t AFTER INSERT ON winners BEGIN SELECT 1; END");
    expect = "holds trigger 't'";
  }
  std::string before = read_bytes(path.str());
  std::string message =
      database_error([&] { Database db(path.str(), Database::Mode::read_write); });
  CHECK(contains(message, expect));
  CHECK(contains(message, "refusing to write to it"));
  CHECK(read_bytes(path.str()) == before);
  Database db(path.str(), Database::Mode::read_only);
  CHECK(db.winners().size() == 1);
}

// Issue 18: a database with a damaged b-tree page was written to by
// --compile-only, cache import and cache gc.
TEST_CASE("a damaged database is refused for writing before anything is written") {
  TempPath path;
  {
    Database db(path.str(), Database::Mode::read_write);
    for (int i = 0; i < 50; ++i) {
      ResultRecord r = make_result(std::to_string(i).insert(0, 1, 'v'), 10.0 + i);
      db.put_result(r);
    }
    db.make_portable(); // one file, so that the damage is in it
  }
  damage_table(path.str(), "results");
  std::string before = read_bytes(path.str());
  std::string message =
      database_error([&] { Database db(path.str(), Database::Mode::read_write); });
  CHECK(contains(message, path.str()));
  CHECK(contains(message, "is damaged (quick_check: "));
  CHECK(contains(message, "refusing to write to it"));
  CHECK(read_bytes(path.str()) == before);
  CHECK_FALSE(fs::exists(path.str() + "-wal"));
  // A read-only open still reads what it can (cache verify reports the damage).
  Database db(path.str(), Database::Mode::read_only);
  CHECK_FALSE(db.quick_check().empty());
  CHECK_FALSE(db.integrity_problems().empty());
}

TEST_CASE("a sound database passes quick_check") {
  TempPath path;
  Database db(path.str(), Database::Mode::read_write);
  db.put_winner(make_winner());
  CHECK(db.quick_check().empty());
}
