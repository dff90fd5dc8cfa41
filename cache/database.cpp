#include "cache/database.hpp"

#include "runtime/base/hash.hpp"
#include "runtime/base/log.hpp"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

namespace autotune::cache {
namespace {

namespace fs = std::filesystem;

// Written when the schema is created and checked on every open, so a SQLite file
// of another program that happens to use our table names is still refused.
// The bytes spell "ATUN".
constexpr int k_application_id = 0x4154554e;

// How long a connection waits for a lock another process holds before it gives
// up with an error. Writers hold the lock for one bounded transaction (a result
// row, a cubin, a chunk of an import: well under a second), so waits are short even
// with many peers queued; two minutes outlasts any such queue and still reports a
// wedged peer (a stopped process inside a transaction) instead of hanging forever.
constexpr auto k_lock_wait = std::chrono::seconds(120);
// Waits longer than this are logged once, so a user sees why nothing moves.
constexpr auto k_lock_wait_notice = std::chrono::seconds(10);
// Pause between lock attempts: doubling from 1 ms up to 100 ms, each scaled by a
// random factor in [0.5, 1.5) so that queued peers do not retry in lockstep.
constexpr auto k_min_lock_pause = std::chrono::microseconds(1000);
constexpr auto k_max_lock_pause = std::chrono::microseconds(100000);

// PRAGMA quick_check stops after this many problems: one is enough to refuse a
// file, a few help the user see how bad it is.
constexpr int k_quick_check_limit = 10;

// The first 16 bytes of every SQLite 3 file. Checked before SQLite touches the
// file, so garbage gets a clear message and is never opened for writing.
constexpr std::string_view k_sqlite_magic{"SQLite format 3\0", 16};

// Error messages quote the failing SQL, cut to keep them on one screen line.
constexpr size_t k_max_quoted_sql = 80;

constexpr std::array<const char*, 5> k_v1_tables = {"devices", "cubins", "variants", "results",
                                                    "winners"};

// Schema version 1. Never edit a released step: add a new step instead (SCHEMA.md).
constexpr std::array<std::string_view, 7> k_schema_v1 = {
    R"sql(CREATE TABLE devices (
  key TEXT PRIMARY KEY NOT NULL,
  name TEXT NOT NULL,
  arch TEXT NOT NULL,
  cc INTEGER NOT NULL,
  sm_count INTEGER NOT NULL,
  driver_version INTEGER NOT NULL
))sql",
    R"sql(CREATE TABLE cubins (
  sha256 TEXT PRIMARY KEY NOT NULL,
  size INTEGER NOT NULL,
  data BLOB NOT NULL
))sql",
    R"sql(CREATE TABLE variants (
  key TEXT PRIMARY KEY NOT NULL,
  op TEXT NOT NULL,
  arch TEXT NOT NULL,
  template_hash TEXT NOT NULL,
  nvrtc_version TEXT NOT NULL,
  options TEXT NOT NULL,
  config TEXT NOT NULL,
  kernel TEXT NOT NULL,
  cubin_sha256 TEXT NOT NULL REFERENCES cubins (sha256),
  compile_s REAL,
  registers INTEGER NOT NULL,
  static_smem INTEGER NOT NULL,
  created_at TEXT NOT NULL
))sql",
    // The child side of the cubin foreign key: without it, deleting a cubin (gc)
    // scans every variant.
    "CREATE INDEX variants_by_cubin ON variants (cubin_sha256)",
    R"sql(CREATE TABLE results (
  device_key TEXT NOT NULL,
  variant_key TEXT NOT NULL,
  op TEXT NOT NULL,
  problem TEXT NOT NULL,
  config TEXT NOT NULL,
  outcome TEXT NOT NULL,
  median_us REAL,
  p10_us REAL,
  p90_us REAL,
  samples INTEGER NOT NULL,
  sm_clock_mhz INTEGER NOT NULL,
  rel_err REAL,
  message TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (device_key, variant_key, problem)
))sql",
    // Database::results() lists every variant tried for one device, op and problem.
    "CREATE INDEX results_by_problem ON results (device_key, op, problem)",
    R"sql(CREATE TABLE winners (
  device_key TEXT NOT NULL,
  op TEXT NOT NULL,
  problem TEXT NOT NULL,
  template_hash TEXT NOT NULL,
  nvrtc_version TEXT NOT NULL,
  variant_key TEXT NOT NULL,
  config TEXT NOT NULL,
  kernel TEXT NOT NULL,
  median_us REAL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (device_key, op, problem, template_hash, nvrtc_version)
))sql",
};

// Schema version 2, part 1: the winner's content hash. Filled by rekey_winners()
// before part 2 makes it unique.
constexpr std::string_view k_schema_v2_add_key =
    "ALTER TABLE winners ADD COLUMN key TEXT NOT NULL DEFAULT ''";

// Schema version 2, part 2.
constexpr std::array<std::string_view, 2> k_schema_v2 = {
    // find_winner looks winners up by their content hash.
    "CREATE UNIQUE INDEX winners_by_key ON winners (key)",
    // Every field of the tuning key as a column, for queries and `cache ls`.
    R"sql(CREATE VIEW tuned AS SELECT
  w.key AS key, d.name AS gpu_name, d.arch AS arch, d.cc AS cc, d.sm_count AS sm_count,
  d.driver_version AS driver_version, w.op AS op, w.problem AS problem,
  w.template_hash AS template_hash, w.nvrtc_version AS nvrtc_version, v.options AS options,
  w.config AS config, w.kernel AS kernel, v.cubin_sha256 AS cubin_sha256,
  w.median_us AS median_us, r.p10_us AS p10_us, r.p90_us AS p90_us, r.samples AS samples,
  w.updated_at AS updated_at
FROM winners AS w
LEFT JOIN devices AS d ON d.key = w.device_key
LEFT JOIN variants AS v ON v.key = w.variant_key
LEFT JOIN results AS r
  ON r.device_key = w.device_key AND r.variant_key = w.variant_key AND r.problem = w.problem)sql",
};

// ISO 8601 UTC, so timestamps sort as text and read well in `autotune cache ls`.
constexpr const char* k_sql_now = "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')";

struct OutcomeName {
  Outcome outcome;
  const char* text;
};
constexpr OutcomeName k_outcome_names[] = {
    {Outcome::ok, "OK"},
    {Outcome::compile_fail, "COMPILE_FAIL"},
    {Outcome::resource, "RESOURCE"},
    {Outcome::fault, "FAULT"},
    {Outcome::timeout, "TIMEOUT"},
    {Outcome::wrong, "WRONG"},
};

[[noreturn]] void throw_database(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::database, "tuning database " + path + ": " + what);
}

[[noreturn]] void throw_sqlite(sqlite3* db, const std::string& path, const std::string& what) {
  std::string message = what;
  if (db) {
    message += ": ";
    message += sqlite3_errmsg(db);
    message += " (SQLite code " + std::to_string(sqlite3_extended_errcode(db)) + ")";
  }
  throw_database(path, message);
}

std::string quote_sql(std::string_view sql) {
  std::string text(sql.substr(0, sql.find('\n')));
  if (text.size() > k_max_quoted_sql) {
    text = text.substr(0, k_max_quoted_sql) + "...";
  }
  return "\"" + text + "\"";
}

struct Finalizer {
  void operator()(sqlite3_stmt* stmt) const noexcept { sqlite3_finalize(stmt); }
};

// Owner of a connection private to this file (the in-memory schema builds).
struct ConnectionCloser {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};

// One prepared statement. Values only ever reach SQL through the bind_* calls.
class Statement {
public:
  Statement(sqlite3* db, const std::string& path, std::string_view sql) : m_db(db), m_path(path) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db, sql.data(), int(sql.size()), &raw, nullptr);
    m_stmt.reset(raw);
    if (rc != SQLITE_OK) {
      throw_sqlite(db, path, "cannot prepare " + quote_sql(sql));
    }
  }

  Statement& bind_text(int index, std::string_view value) {
    // A null data pointer would bind SQL NULL; an empty string must stay a string.
    const char* data = value.data() ? value.data() : "";
    check(sqlite3_bind_text64(m_stmt.get(), index, data, value.size(), SQLITE_TRANSIENT,
                              SQLITE_UTF8));
    return *this;
  }
  Statement& bind_blob(int index, std::string_view value) {
    const char* data = value.data() ? value.data() : "";
    check(sqlite3_bind_blob64(m_stmt.get(), index, data, value.size(), SQLITE_TRANSIENT));
    return *this;
  }
  Statement& bind_int(int index, int64_t value) {
    check(sqlite3_bind_int64(m_stmt.get(), index, value));
    return *this;
  }
  // SQLite stores a NaN as NULL anyway; doing it here makes that explicit, and
  // real() maps NULL back to NaN (a WRONG result's rel_err is often NaN).
  Statement& bind_real(int index, double value) {
    check(std::isnan(value) ? sqlite3_bind_null(m_stmt.get(), index)
                            : sqlite3_bind_double(m_stmt.get(), index, value));
    return *this;
  }

  // sqlite3_step's own result code, for callers that handle SQLITE_BUSY themselves.
  int try_step() { return sqlite3_step(m_stmt.get()); }

  // True when a row is ready, false when the statement has finished.
  bool step() {
    int rc = sqlite3_step(m_stmt.get());
    if (rc == SQLITE_ROW) {
      return true;
    }
    if (rc == SQLITE_DONE) {
      return false;
    }
    throw_sqlite(m_db, m_path, "cannot run " + quote_sql(sqlite3_sql(m_stmt.get())));
  }
  void run() {
    while (step()) {
    }
  }

  std::string text(int column) const {
    auto data = reinterpret_cast<const char*>(sqlite3_column_text(m_stmt.get(), column));
    int size = sqlite3_column_bytes(m_stmt.get(), column);
    return data ? std::string(data, size_t(size)) : std::string();
  }
  std::string blob(int column) const {
    auto data = static_cast<const char*>(sqlite3_column_blob(m_stmt.get(), column));
    int size = sqlite3_column_bytes(m_stmt.get(), column);
    return data ? std::string(data, size_t(size)) : std::string();
  }
  int64_t integer(int column) const { return sqlite3_column_int64(m_stmt.get(), column); }
  double real(int column) const {
    if (sqlite3_column_type(m_stmt.get(), column) == SQLITE_NULL) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    return sqlite3_column_double(m_stmt.get(), column);
  }

private:
  void check(int rc) {
    if (rc != SQLITE_OK) {
      throw_sqlite(m_db, m_path, "cannot bind a value of " + quote_sql(sqlite3_sql(m_stmt.get())));
    }
  }

  sqlite3* m_db;
  const std::string& m_path;
  std::unique_ptr<sqlite3_stmt, Finalizer> m_stmt;
};

void exec(sqlite3* db, const std::string& path, std::string_view sql) {
  Statement(db, path, sql).run();
}

// Pragmas take no bound parameters; `value` is always one of our own integer
// constants, never data from outside.
void set_pragma(sqlite3* db, const std::string& path, const char* name, int value) {
  exec(db, path, std::string("PRAGMA ") + name + " = " + std::to_string(value));
}

int64_t read_pragma(sqlite3* db, const std::string& path, const char* name) {
  Statement stmt(db, path, std::string("PRAGMA ") + name);
  return stmt.step() ? stmt.integer(0) : 0;
}

// What the file holds, read without writing anything.
struct SchemaState {
  int64_t user_version = 0;
  int64_t application_id = 0;
  std::set<std::string> tables;
  // Every schema object as (type, name), SQLite's own (sqlite_*) excluded.
  std::set<std::pair<std::string, std::string>> objects;
};

struct ReadFailure {
  int code = SQLITE_OK; // extended result code
  std::string message;
};

// Reads without throwing, so the caller can decide by the result code.
ReadFailure try_read_schema_state(sqlite3* db, SchemaState& state) {
  // One statement, so one read snapshot: read separately, a peer's schema
  // creation could commit between the version and the table list.
  constexpr std::string_view k_sql =
      "SELECT 'user_version', user_version FROM pragma_user_version "
      "UNION ALL SELECT 'application_id', application_id FROM pragma_application_id "
      "UNION ALL SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'";
  auto failure = [db] { return ReadFailure{sqlite3_extended_errcode(db), sqlite3_errmsg(db)}; };
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, k_sql.data(), int(k_sql.size()), &raw, nullptr);
  std::unique_ptr<sqlite3_stmt, Finalizer> stmt(raw);
  if (rc != SQLITE_OK) {
    return failure();
  }
  state = SchemaState{};
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    auto kind_text = reinterpret_cast<const char*>(sqlite3_column_text(stmt.get(), 0));
    std::string kind = kind_text ? kind_text : "";
    if (kind == "user_version") {
      state.user_version = sqlite3_column_int64(stmt.get(), 1);
    } else if (kind == "application_id") {
      state.application_id = sqlite3_column_int64(stmt.get(), 1);
    } else {
      auto name_text = reinterpret_cast<const char*>(sqlite3_column_text(stmt.get(), 1));
      std::string name = name_text ? name_text : "";
      if (kind == "table") {
        state.tables.insert(name);
      }
      state.objects.emplace(kind, name);
    }
  }
  if (rc != SQLITE_DONE) {
    return failure();
  }
  return {};
}

[[noreturn]] void throw_read_failure(const ReadFailure& failure, const std::string& path) {
  int primary = failure.code & 0xff;
  // Truncated or damaged files fail here, on the first read.
  std::string what = primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT
                         ? "not an autotune database, or a damaged one"
                         : "cannot read it";
  throw_database(path, what + ": " + failure.message + " (SQLite code " +
                           std::to_string(failure.code) + ")");
}

SchemaState read_schema_state(sqlite3* db, const std::string& path) {
  SchemaState state;
  ReadFailure failure = try_read_schema_state(db, state);
  if (failure.code != SQLITE_OK) {
    throw_read_failure(failure, path);
  }
  return state;
}

// A read-only reader of a WAL file needs to create the -shm file next to it;
// in a read-only directory (a container image, a shared install) it cannot.
bool needs_immutable_open(const ReadFailure& failure, const std::string& path) {
  bool no_shm =
      failure.code == SQLITE_READONLY_DIRECTORY || (failure.code & 0xff) == SQLITE_CANTOPEN;
  // With a -wal present, immutable would silently ignore its committed rows.
  std::error_code ec;
  return no_shm && !fs::exists(path + "-wal", ec);
}

// "file:" URI for `path`, escaping what a URI parser would otherwise interpret.
std::string immutable_uri(const std::string& path) {
  std::string absolute = fs::absolute(path).string();
  std::string uri = "file:";
  for (char c : absolute) {
    if (c == '%' || c == '?' || c == '#') {
      static const char* k_hex = "0123456789ABCDEF";
      uri += '%';
      uri += k_hex[(unsigned char)c >> 4];
      uri += k_hex[(unsigned char)c & 15];
    } else {
      uri += c;
    }
  }
  return uri + "?immutable=1";
}

using ObjectSet = std::set<std::pair<std::string, std::string>>;

// The (type, name) of every object a database of `version` holds when this build
// created or migrated it.
ObjectSet expected_objects(int64_t version);

// "table 'notes'", for messages.
std::string describe_object(const std::pair<std::string, std::string>& object) {
  return object.first + " '" + object.second + "'";
}

// Throws unless `state` is an autotune database this build can use in `mode`;
// an empty file (version 0, no objects, no application_id) passes only in
// read_write mode. Nothing here writes: a refused file is left as it was.
void check_schema_state(const SchemaState& state, Database::Mode mode, const std::string& path) {
  // Another program's file, even one without tables yet: it chose its own id.
  if (state.application_id != 0 && state.application_id != k_application_id) {
    throw_database(path, "not an autotune database (application_id " +
                             std::to_string(state.application_id) +
                             " is another program's); refusing to touch it");
  }
  if (state.user_version > k_schema_version) {
    throw_database(path, "was written by a newer autotune (schema version " +
                             std::to_string(state.user_version) + ", this build knows up to " +
                             std::to_string(k_schema_version) +
                             "); use a newer autotune or another database");
  }
  if (state.user_version <= 0) {
    // Any object (a table, a view, an index, a trigger) means someone else's data.
    if (!state.objects.empty()) {
      throw_database(path, "not an autotune database (it holds " +
                               describe_object(*state.objects.begin()) +
                               " but no autotune schema version); refusing to touch it");
    }
    if (mode == Database::Mode::read_only) {
      throw_database(path, "not an autotune database (it is empty)");
    }
    return;
  }
  if (state.application_id != k_application_id) {
    throw_database(path, "not an autotune database (application_id " +
                             std::to_string(state.application_id) + "); refusing to touch it");
  }
  for (const char* table : k_v1_tables) {
    if (!state.tables.count(table)) {
      throw_database(path, std::string("not an autotune database (table '") + table +
                               "' is missing); refusing to touch it");
    }
  }
  if (mode == Database::Mode::read_write) {
    // Objects autotune does not create belong to someone else (or were added by
    // hand); writing, migrating or vacuuming could break them. Reading is still
    // allowed, so that `cache verify` can name them.
    ObjectSet expected = expected_objects(state.user_version);
    for (const auto& object : state.objects) {
      if (!expected.count(object)) {
        throw_database(path, "holds " + describe_object(object) +
                                 ", which autotune does not create: not an autotune database, "
                                 "or one changed by hand; refusing to write to it (autotune "
                                 "cache verify lists what differs)");
      }
    }
  }
  if (mode == Database::Mode::read_only && state.user_version < k_schema_version) {
    throw_database(path, "was written by an older autotune (schema version " +
                             std::to_string(state.user_version) +
                             "); open it read-write once to migrate it to version " +
                             std::to_string(k_schema_version));
  }
}

// Problems a checking pragma (quick_check, integrity_check) reports, one line
// each; empty when sound. A read error on the way (SQLITE_CORRUPT) is a problem
// too, never an exception.
std::vector<std::string> check_pragma_problems(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* raw = nullptr;
  std::vector<std::string> out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr) != SQLITE_OK) {
    out.push_back(sqlite3_errmsg(db));
    return out;
  }
  std::unique_ptr<sqlite3_stmt, Finalizer> stmt(raw);
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    auto text = reinterpret_cast<const char*>(sqlite3_column_text(stmt.get(), 0));
    // A row may hold several problems, one per line, under a "*** in database
    // main ***" heading.
    std::string row = text ? text : "";
    size_t start = 0;
    while (start <= row.size()) {
      size_t end = std::min(row.find('\n', start), row.size());
      std::string line = row.substr(start, end - start);
      if (!line.empty() && line != "ok" && line.rfind("*** in database", 0) != 0) {
        out.push_back(line);
      }
      start = end + 1;
    }
  }
  if (rc != SQLITE_DONE) {
    out.push_back(std::string(sqlite3_errmsg(db)) + " (SQLite code " +
                  std::to_string(sqlite3_extended_errcode(db)) + ")");
  }
  return out;
}

// PRAGMA quick_check: b-tree structure, page accounting, NOT NULL and CHECK
// constraints; not index contents. Reads the whole file once.
std::vector<std::string> quick_check_problems(sqlite3* db) {
  return check_pragma_problems(db,
                               "PRAGMA quick_check(" + std::to_string(k_quick_check_limit) + ")");
}

// Refuses a non-empty file that does not start with SQLite's magic, without
// handing it to SQLite at all.
void check_sqlite_header(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw_database(path, "cannot read the file");
  }
  std::string head(k_sqlite_magic.size(), '\0');
  file.read(head.data(), std::streamsize(head.size()));
  size_t got = size_t(file.gcount());
  if (got == 0) {
    return;
  }
  if (got < head.size() || head != k_sqlite_magic) {
    throw_database(path, "not an autotune database (not a SQLite file); refusing to touch it");
  }
}

// Switching a new file to WAL needs an exclusive lock, and SQLite reports
// SQLITE_BUSY at once rather than through the busy handler while peers opening the
// same new file hold it; so wait here, as long as the busy handler would.
void enable_wal(sqlite3* db, const std::string& path) {
  constexpr auto k_retry_pause = std::chrono::milliseconds(10);
  auto deadline = std::chrono::steady_clock::now() + k_lock_wait;
  for (;;) {
    Statement journal(db, path, "PRAGMA journal_mode = WAL");
    int rc = journal.try_step();
    if (rc == SQLITE_ROW) {
      std::string mode = journal.text(0);
      if (mode != "wal") {
        // E.g. a network file system without shared memory: still correct, but
        // readers then block writers.
        log(LogLevel::warn, "tuning database " + path + ": journal mode is '" + mode +
                                "', not WAL; concurrent tuning processes will wait on each other");
      }
      return;
    }
    if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() >= deadline) {
      throw_sqlite(db, path, "cannot switch to WAL journal mode");
    }
    std::this_thread::sleep_for(k_retry_pause);
  }
}

// Recomputes winners.key from each row's columns. Keys hash the schema version,
// so every migration step that reaches the current version ends with this.
void rekey_winners(sqlite3* db, const std::string& path) {
  struct Row {
    int64_t rowid;
    std::string key;
  };
  std::vector<Row> rows;
  Statement select(
      db, path, "SELECT rowid, device_key, op, problem, template_hash, nvrtc_version FROM winners");
  while (select.step()) {
    rows.push_back({select.integer(0), winner_key(select.text(1), select.text(2), select.text(3),
                                                  select.text(4), select.text(5))});
  }
  for (const Row& row : rows) {
    Statement(db, path, "UPDATE winners SET key = ?1 WHERE rowid = ?2")
        .bind_text(1, row.key)
        .bind_int(2, row.rowid)
        .run();
  }
}

void apply_migration(sqlite3* db, const std::string& path, int64_t from_version) {
  switch (from_version) {
  case 0:
    for (std::string_view sql : k_schema_v1) {
      exec(db, path, sql);
    }
    return;
  case 1:
    exec(db, path, k_schema_v2_add_key);
    rekey_winners(db, path);
    for (std::string_view sql : k_schema_v2) {
      exec(db, path, sql);
    }
    return;
  default:
    throw Error(ErrorKind::internal, "tuning database " + path +
                                         ": no migration from schema version " +
                                         std::to_string(from_version));
  }
}

// An in-memory database taken through the migrations up to `version`, the same steps
// a new file goes through; errors name it `name`.
std::unique_ptr<sqlite3, ConnectionCloser> migrated_in_memory(int64_t version,
                                                              const std::string& name) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(":memory:", &raw, SQLITE_OPEN_READWRITE, nullptr);
  std::unique_ptr<sqlite3, ConnectionCloser> db(raw);
  if (rc != SQLITE_OK) {
    throw_sqlite(raw, name, "cannot open an in-memory database");
  }
  for (int64_t v = 0; v < version; ++v) {
    apply_migration(db.get(), name, v);
  }
  return db;
}

ObjectSet expected_objects(int64_t version) {
  const std::string name = "(expected schema)";
  auto db = migrated_in_memory(version, name);
  return read_schema_state(db.get(), name).objects;
}

constexpr const char* k_savepoint = "autotune_nested";

VariantRecord read_variant(const Statement& stmt) {
  VariantRecord v;
  v.key = stmt.text(0);
  v.op = stmt.text(1);
  v.arch = stmt.text(2);
  v.template_hash = stmt.text(3);
  v.nvrtc_version = stmt.text(4);
  v.options = stmt.text(5);
  v.config = stmt.text(6);
  v.kernel = stmt.text(7);
  v.cubin_sha256 = stmt.text(8);
  v.compile_s = stmt.real(9);
  v.registers = int(stmt.integer(10));
  v.static_smem = int(stmt.integer(11));
  return v;
}

constexpr const char* k_result_columns =
    "device_key, variant_key, op, problem, config, outcome, median_us, p10_us, p90_us, samples, "
    "sm_clock_mhz, rel_err, message";

ResultRecord read_result(const Statement& stmt) {
  ResultRecord r;
  r.device_key = stmt.text(0);
  r.variant_key = stmt.text(1);
  r.op = stmt.text(2);
  r.problem = stmt.text(3);
  r.config = stmt.text(4);
  r.outcome = parse_outcome(stmt.text(5));
  r.median_us = stmt.real(6);
  r.p10_us = stmt.real(7);
  r.p90_us = stmt.real(8);
  r.samples = int(stmt.integer(9));
  r.sm_clock_mhz = int(stmt.integer(10));
  r.rel_err = stmt.real(11);
  r.message = stmt.text(12);
  return r;
}

constexpr const char* k_winner_columns =
    "device_key, op, problem, template_hash, nvrtc_version, variant_key, config, kernel, "
    "median_us, key, updated_at";

WinnerRecord read_winner(const Statement& stmt) {
  WinnerRecord w;
  w.device_key = stmt.text(0);
  w.op = stmt.text(1);
  w.problem = stmt.text(2);
  w.template_hash = stmt.text(3);
  w.nvrtc_version = stmt.text(4);
  w.variant_key = stmt.text(5);
  w.config = stmt.text(6);
  w.kernel = stmt.text(7);
  w.median_us = stmt.real(8);
  w.key = stmt.text(9);
  w.updated_at = stmt.text(10);
  return w;
}

constexpr const char* k_device_columns = "key, name, arch, cc, sm_count, driver_version";

DeviceRecord read_device(const Statement& stmt) {
  DeviceRecord d;
  d.name = stmt.text(1);
  d.arch = stmt.text(2);
  d.cc = int(stmt.integer(3));
  d.sm_count = int(stmt.integer(4));
  d.driver_version = int(stmt.integer(5));
  return d;
}

// Every row `stmt` yields, each read with `read`.
template <typename Read> auto read_rows(Statement& stmt, Read read) {
  std::vector<decltype(read(stmt))> out;
  while (stmt.step()) {
    out.push_back(read(stmt));
  }
  return out;
}

// The first row `stmt` yields, read with `read`; nullopt when it yields none.
template <typename Read>
auto read_first(Statement& stmt, Read read) -> std::optional<decltype(read(stmt))> {
  if (!stmt.step()) {
    return std::nullopt;
  }
  return read(stmt);
}

constexpr const char* k_variant_columns =
    "key, op, arch, template_hash, nvrtc_version, options, config, kernel, cubin_sha256, "
    "compile_s, registers, static_smem";

// Every schema object with its SQL, one line each, in a stable order.
std::string read_schema_text(sqlite3* db, const std::string& path) {
  Statement stmt(db, path,
                 "SELECT type, name, tbl_name, ifnull(sql, '') FROM sqlite_master "
                 "WHERE name NOT LIKE 'sqlite_%' ORDER BY name, type");
  std::string text;
  while (stmt.step()) {
    // One line per object, so verify can name the objects that differ.
    std::string sql = stmt.text(3);
    std::replace(sql.begin(), sql.end(), '\n', ' ');
    text += stmt.text(0) + " " + stmt.text(1) + " on " + stmt.text(2) + ": " + sql + "\n";
  }
  return text;
}

// The key's hex digest, its hashed fields in `dump` when given.
std::string key_text(KeyHasher& hasher, std::string* dump) {
  if (dump) {
    *dump = hasher.dump();
  }
  return hasher.hex();
}

} // namespace

std::string DeviceRecord::key(std::string* dump) const {
  KeyHasher hasher("autotune.device.v1");
  hasher.field("name", name)
      .field("arch", arch)
      .field("cc", int64_t(cc))
      .field("sm_count", int64_t(sm_count))
      .field("driver_version", int64_t(driver_version));
  return key_text(hasher, dump);
}

std::string winner_key(const std::string& device_key, const std::string& op,
                       const std::string& problem, const std::string& template_hash,
                       const std::string& nvrtc_version, std::string* dump) {
  KeyHasher hasher("autotune.winner");
  hasher.field("schema_version", int64_t(k_schema_version))
      .field("device_key", device_key)
      .field("op", op)
      .field("problem", problem)
      .field("template_hash", template_hash)
      .field("nvrtc_version", nvrtc_version);
  return key_text(hasher, dump);
}

std::string variant_key(const std::string& op, const std::string& template_hash,
                        const std::string& nvrtc_version, const std::string& arch,
                        const std::string& options, const std::string& kernel, std::string* dump) {
  KeyHasher hasher("autotune.variant");
  hasher.field("schema_version", int64_t(k_schema_version))
      .field("op", op)
      .field("template_hash", template_hash)
      .field("nvrtc_version", nvrtc_version)
      .field("arch", arch)
      .field("options", options)
      .field("kernel", kernel);
  return key_text(hasher, dump);
}

const char* to_string(Outcome o) {
  for (const auto& entry : k_outcome_names) {
    if (entry.outcome == o) {
      return entry.text;
    }
  }
  return "UNKNOWN";
}

Outcome parse_outcome(const std::string& text) {
  for (const auto& entry : k_outcome_names) {
    if (text == entry.text) {
      return entry.outcome;
    }
  }
  throw Error(ErrorKind::database,
              "unknown result outcome '" + text +
                  "' in the tuning database (expected OK, COMPILE_FAIL, RESOURCE, FAULT, TIMEOUT "
                  "or WRONG)");
}

// Waiting for a lock held by another connection; see k_lock_wait.
struct Database::BusyState {
  std::string path;
  std::chrono::steady_clock::time_point first_try;
  bool announced = false;
  std::minstd_rand random{std::random_device{}()};
};

namespace {

// SQLite's busy handler: called with the number of earlier calls for this wait;
// returning 0 gives up (the statement then fails with SQLITE_BUSY).
int wait_for_lock(void* data, int calls) noexcept {
  auto* state = static_cast<Database::BusyState*>(data);
  auto now = std::chrono::steady_clock::now();
  if (calls == 0) {
    state->first_try = now;
    state->announced = false;
  }
  auto waited = now - state->first_try;
  if (waited >= k_lock_wait) {
    return 0;
  }
  if (waited >= k_lock_wait_notice && !state->announced) {
    state->announced = true;
    try {
      log(LogLevel::info,
          "tuning database " + state->path + ": waiting for another process's lock on it");
    } catch (...) {
    }
  }
  auto pause = k_min_lock_pause * (1LL << std::min(calls, 10));
  pause = std::min<decltype(pause)>(pause, k_max_lock_pause);
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  std::this_thread::sleep_for(
      std::chrono::duration_cast<std::chrono::microseconds>(pause * jitter(state->random)));
  return 1;
}

} // namespace

void Database::Closer::operator()(sqlite3* db) const noexcept {
  // close_v2 never fails for a live handle: anything still pending is released
  // when its last statement is finalized.
  sqlite3_close_v2(db);
}

Database::Database(const std::string& path, Mode mode)
    : m_busy(std::make_unique<BusyState>()), m_path(path), m_mode(mode) {
  m_busy->path = path;
  if (path.empty()) {
    throw Error(ErrorKind::database, "the tuning database path is empty");
  }
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  bool exists = fs::exists(status);
  if (!exists && mode == Mode::read_only) {
    throw_database(path, "does not exist");
  }
  if (exists) {
    if (!fs::is_regular_file(status)) {
      throw_database(path, "is not a regular file");
    }
    check_sqlite_header(path);
  } else {
    fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) {
      fs::create_directories(parent, ec);
      if (ec) {
        throw_database(path, "cannot create directory " + parent.string() + ": " + ec.message());
      }
    }
  }

  int flags =
      mode == Mode::read_write ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
  open_connection(path, flags);

  // Everything up to here only reads, so a refused file is left as it was.
  SchemaState state;
  ReadFailure failure = try_read_schema_state(m_db.get(), state);
  if (failure.code != SQLITE_OK && mode == Mode::read_only && needs_immutable_open(failure, path)) {
    // Safe while nobody writes the file, which a read-only directory suggests;
    // a concurrent writer would show up as SQLITE_CORRUPT or a checksum error.
    log(LogLevel::info,
        "tuning database " + path + ": its directory is read-only; reading it as immutable");
    open_connection(immutable_uri(path), flags | SQLITE_OPEN_URI);
    failure = try_read_schema_state(m_db.get(), state);
  }
  if (failure.code != SQLITE_OK) {
    throw_read_failure(failure, path);
  }
  check_schema_state(state, mode, path);
  if (mode == Mode::read_only) {
    return;
  }
  if (state.user_version > 0) {
    // A damaged b-tree is often readable in parts; writing into it spreads the
    // damage and may lose what is still there. Checked before the first write.
    std::vector<std::string> damage = quick_check_problems(m_db.get());
    if (!damage.empty()) {
      throw_database(
          path, "is damaged (quick_check: " + damage.front() +
                    (damage.size() > 1 ? "; " + std::to_string(damage.size() - 1) + " more" : "") +
                    "); refusing to write to it (autotune cache verify " + path +
                    " lists the problems; restore it from a copy)");
    }
  }
  enable_wal(m_db.get(), path);
  exec(m_db.get(), path, "PRAGMA foreign_keys = ON");
  migrate();
}

void Database::open_connection(const std::string& filename, int flags) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(filename.c_str(), &raw, flags, nullptr);
  // Owned before checking: a failed open still allocates a handle.
  m_db.reset(raw);
  if (rc != SQLITE_OK) {
    throw_sqlite(raw, m_path, "cannot open");
  }
  sqlite3_extended_result_codes(raw, 1);
  // Instead of busy_timeout: a longer wait with jittered backoff (k_lock_wait).
  sqlite3_busy_handler(raw, wait_for_lock, m_busy.get());
  // Files may come from other machines (`cache import`): never let their schema
  // run functions or let SQL corrupt them through writable_schema.
  if (sqlite3_db_config(raw, SQLITE_DBCONFIG_DEFENSIVE, 1, static_cast<int*>(nullptr)) !=
      SQLITE_OK) {
    throw_sqlite(raw, m_path, "cannot enable defensive mode");
  }
  exec(raw, m_path, "PRAGMA trusted_schema = OFF");
}

Database::Database(Database&& other) noexcept
    : m_busy(std::move(other.m_busy)), m_db(std::move(other.m_db)), m_path(std::move(other.m_path)),
      m_mode(other.m_mode), m_depth(std::exchange(other.m_depth, 0)) {}

Database::~Database() = default;

sqlite3* Database::handle() const {
  if (!m_db) {
    throw Error(ErrorKind::internal, "a moved-from tuning Database was used");
  }
  return m_db.get();
}

void Database::migrate() {
  if (read_schema_state(handle(), m_path).user_version == k_schema_version) {
    return;
  }
  transaction([&] {
    // Another process may have created or migrated the file since the check
    // above; under the write lock the state is final.
    SchemaState state = read_schema_state(handle(), m_path);
    check_schema_state(state, m_mode, m_path);
    if (state.user_version == k_schema_version) {
      return;
    }
    for (int64_t version = state.user_version; version < k_schema_version; ++version) {
      apply_migration(handle(), m_path, version);
    }
    set_pragma(handle(), m_path, "application_id", k_application_id);
    set_pragma(handle(), m_path, "user_version", k_schema_version);
  });
}

int Database::schema_version() const {
  return int(read_pragma(handle(), m_path, "user_version"));
}

void Database::begin() {
  if (m_mode == Mode::read_only) {
    throw_database(m_path, "opened read-only; cannot write to it");
  }
  if (m_depth > 0) {
    exec(handle(), m_path, std::string("SAVEPOINT ") + k_savepoint);
    ++m_depth;
    return;
  }
  // IMMEDIATE takes the write lock now, while the busy handler can still wait for
  // it; a deferred transaction that upgrades later fails with SQLITE_BUSY at once.
  Statement begin(handle(), m_path, "BEGIN IMMEDIATE");
  int rc = begin.try_step();
  if ((rc & 0xff) == SQLITE_BUSY) {
    throw_database(m_path, "another process has held its write lock for over " +
                               std::to_string(k_lock_wait.count()) +
                               " s (a stopped or hung autotune?); try again when it is done");
  }
  if (rc != SQLITE_DONE) {
    throw_sqlite(handle(), m_path, "cannot run \"BEGIN IMMEDIATE\"");
  }
  ++m_depth;
}

void Database::commit() {
  try {
    exec(handle(), m_path,
         m_depth == 1 ? std::string("COMMIT") : std::string("RELEASE ") + k_savepoint);
  } catch (...) {
    rollback();
    throw;
  }
  --m_depth;
}

void Database::rollback() noexcept {
  if (m_depth == 0) {
    return;
  }
  --m_depth;
  sqlite3* db = m_db.get();
  // After some errors (I/O, disk full) SQLite has already rolled the whole
  // transaction back; the outer levels then fail on COMMIT/RELEASE, as they must.
  if (!db || sqlite3_get_autocommit(db)) {
    return;
  }
  try {
    if (m_depth == 0) {
      exec(db, m_path, "ROLLBACK");
    } else {
      exec(db, m_path, std::string("ROLLBACK TO ") + k_savepoint);
      exec(db, m_path, std::string("RELEASE ") + k_savepoint);
    }
  } catch (const std::exception& e) {
    try {
      log(LogLevel::warn, std::string("rollback failed: ") + e.what());
    } catch (...) {
    }
  }
}

void Database::put_device(const DeviceRecord& device) {
  transaction([&] {
    Statement(handle(), m_path,
              "INSERT OR REPLACE INTO devices (key, name, arch, cc, sm_count, driver_version) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
        .bind_text(1, device.key())
        .bind_text(2, device.name)
        .bind_text(3, device.arch)
        .bind_int(4, device.cc)
        .bind_int(5, device.sm_count)
        .bind_int(6, device.driver_version)
        .run();
  });
}

void Database::put_variant(const VariantRecord& variant, const std::string& cubin) {
  std::string sha = sha256_hex(cubin);
  if (sha != variant.cubin_sha256) {
    throw Error(ErrorKind::internal, "tuning database " + m_path + ": variant " + variant.key +
                                         " names cubin " + variant.cubin_sha256 +
                                         " but the bytes given hash to " + sha);
  }
  transaction([&] {
    // Content-addressed: a cubin shared by many variants is stored once. A stored
    // copy that differs from these bytes can only be damaged, so it is repaired
    // rather than kept.
    Statement(handle(), m_path,
              "INSERT INTO cubins (sha256, size, data) VALUES (?1, ?2, ?3) "
              "ON CONFLICT (sha256) DO UPDATE SET size = excluded.size, data = excluded.data "
              "WHERE cubins.size <> excluded.size OR cubins.data <> excluded.data")
        .bind_text(1, sha)
        .bind_int(2, int64_t(cubin.size()))
        .bind_blob(3, cubin)
        .run();
    Statement(
        handle(), m_path,
        std::string("INSERT OR REPLACE INTO variants (key, op, arch, template_hash, nvrtc_version, "
                    "options, config, kernel, cubin_sha256, compile_s, registers, static_smem, "
                    "created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ") +
            k_sql_now + ")")
        .bind_text(1, variant.key)
        .bind_text(2, variant.op)
        .bind_text(3, variant.arch)
        .bind_text(4, variant.template_hash)
        .bind_text(5, variant.nvrtc_version)
        .bind_text(6, variant.options)
        .bind_text(7, variant.config)
        .bind_text(8, variant.kernel)
        .bind_text(9, variant.cubin_sha256)
        .bind_real(10, variant.compile_s)
        .bind_int(11, variant.registers)
        .bind_int(12, variant.static_smem)
        .run();
  });
}

std::optional<VariantRecord> Database::find_variant(const std::string& key) const {
  Statement stmt(handle(), m_path,
                 std::string("SELECT ") + k_variant_columns + " FROM variants WHERE key = ?1");
  stmt.bind_text(1, key);
  return read_first(stmt, read_variant);
}

std::string Database::load_cubin(const std::string& sha256) const {
  Statement stmt(handle(), m_path, "SELECT size, data FROM cubins WHERE sha256 = ?1");
  stmt.bind_text(1, sha256);
  if (!stmt.step()) {
    throw_database(m_path, "cubin " + sha256 + " is not stored");
  }
  int64_t size = stmt.integer(0);
  std::string data = stmt.blob(1);
  // A damaged cubin loaded into the driver can fault or compute garbage silently.
  if (int64_t(data.size()) != size || sha256_hex(data) != sha256) {
    throw_database(m_path, "checksum mismatch for cubin " + sha256 + ": refusing to load it");
  }
  return data;
}

void Database::put_result(const ResultRecord& result) {
  transaction([&] {
    Statement(handle(), m_path,
              std::string("INSERT OR REPLACE INTO results (") + k_result_columns +
                  ", created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
                  "?13, " +
                  k_sql_now + ")")
        .bind_text(1, result.device_key)
        .bind_text(2, result.variant_key)
        .bind_text(3, result.op)
        .bind_text(4, result.problem)
        .bind_text(5, result.config)
        .bind_text(6, to_string(result.outcome))
        .bind_real(7, result.median_us)
        .bind_real(8, result.p10_us)
        .bind_real(9, result.p90_us)
        .bind_int(10, result.samples)
        .bind_int(11, result.sm_clock_mhz)
        .bind_real(12, result.rel_err)
        .bind_text(13, result.message)
        .run();
  });
}

std::optional<ResultRecord> Database::find_result(const std::string& device_key,
                                                  const std::string& variant_key,
                                                  const std::string& problem) const {
  Statement stmt(handle(), m_path,
                 std::string("SELECT ") + k_result_columns +
                     " FROM results WHERE device_key = ?1 AND variant_key = ?2 AND problem = ?3");
  stmt.bind_text(1, device_key).bind_text(2, variant_key).bind_text(3, problem);
  return read_first(stmt, read_result);
}

std::vector<ResultRecord> Database::results(const std::string& device_key, const std::string& op,
                                            const std::string& problem) const {
  // Fastest OK result first, then the failures; variant_key makes the order total.
  Statement stmt(handle(), m_path,
                 std::string("SELECT ") + k_result_columns +
                     " FROM results WHERE device_key = ?1 AND op = ?2 AND problem = ?3"
                     " ORDER BY outcome <> 'OK', median_us IS NULL, median_us, variant_key");
  stmt.bind_text(1, device_key).bind_text(2, op).bind_text(3, problem);
  return read_rows(stmt, read_result);
}

void Database::put_winner(const WinnerRecord& winner) {
  transaction([&] {
    Statement(handle(), m_path,
              std::string("INSERT OR REPLACE INTO winners (") + k_winner_columns +
                  ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, " + k_sql_now + ")")
        .bind_text(1, winner.device_key)
        .bind_text(2, winner.op)
        .bind_text(3, winner.problem)
        .bind_text(4, winner.template_hash)
        .bind_text(5, winner.nvrtc_version)
        .bind_text(6, winner.variant_key)
        .bind_text(7, winner.config)
        .bind_text(8, winner.kernel)
        .bind_real(9, winner.median_us)
        .bind_text(10, winner_key(winner.device_key, winner.op, winner.problem,
                                  winner.template_hash, winner.nvrtc_version))
        .run();
  });
}

std::optional<WinnerRecord> Database::find_winner(const std::string& device_key,
                                                  const std::string& op, const std::string& problem,
                                                  const std::string& template_hash,
                                                  const std::string& nvrtc_version) const {
  return find_winner(device_key, op, problem, template_hash, nvrtc_version, nullptr);
}

std::optional<WinnerRecord> Database::find_winner(const std::string& device_key,
                                                  const std::string& op, const std::string& problem,
                                                  const std::string& template_hash,
                                                  const std::string& nvrtc_version,
                                                  std::string* dump) const {
  std::string key = winner_key(device_key, op, problem, template_hash, nvrtc_version, dump);
  Statement stmt(handle(), m_path,
                 std::string("SELECT ") + k_winner_columns + " FROM winners WHERE key = ?1");
  stmt.bind_text(1, key);
  return read_first(stmt, read_winner);
}

std::vector<WinnerRecord> Database::winners() const {
  Statement stmt(
      handle(), m_path,
      std::string("SELECT ") + k_winner_columns +
          " FROM winners ORDER BY device_key, op, problem, template_hash, nvrtc_version");
  return read_rows(stmt, read_winner);
}

std::vector<DeviceRecord> Database::devices() const {
  Statement stmt(handle(), m_path,
                 std::string("SELECT ") + k_device_columns + " FROM devices ORDER BY key");
  return read_rows(stmt, read_device);
}

std::optional<DeviceRecord> Database::find_device(const std::string& key) const {
  Statement stmt(handle(), m_path,
                 std::string("SELECT ") + k_device_columns + " FROM devices WHERE key = ?1");
  stmt.bind_text(1, key);
  return read_first(stmt, read_device);
}

std::vector<VariantRecord> Database::variants() const {
  Statement stmt(handle(), m_path,
                 std::string("SELECT ") + k_variant_columns + " FROM variants ORDER BY key");
  return read_rows(stmt, read_variant);
}

std::vector<ResultRecord> Database::all_results() const {
  Statement stmt(handle(), m_path,
                 std::string("SELECT ") + k_result_columns +
                     " FROM results ORDER BY device_key, op, problem, variant_key");
  return read_rows(stmt, read_result);
}

std::vector<std::string> Database::integrity_problems() const {
  std::vector<std::string> out;
  for (const std::string& problem : check_pragma_problems(handle(), "PRAGMA integrity_check")) {
    out.push_back("integrity_check: " + problem);
  }
  if (!out.empty()) {
    return out; // foreign_key_check would read the same damaged pages
  }
  Statement foreign(handle(), m_path, "PRAGMA foreign_key_check");
  while (foreign.step()) {
    out.push_back("foreign_key_check: row " + std::to_string(foreign.integer(1)) + " of " +
                  foreign.text(0) + " names a missing " + foreign.text(2) + " row");
  }
  return out;
}

std::vector<std::string> Database::quick_check() const {
  return quick_check_problems(handle());
}

std::vector<CubinProblem> Database::cubin_problems() const {
  // One blob at a time: a database may hold gigabytes of cubins.
  Statement stmt(handle(), m_path, "SELECT sha256, size, data FROM cubins ORDER BY sha256");
  std::vector<CubinProblem> out;
  while (stmt.step()) {
    std::string sha = stmt.text(0);
    int64_t size = stmt.integer(1);
    std::string data = stmt.blob(2);
    if (int64_t(data.size()) != size) {
      out.push_back({sha, "size column says " + std::to_string(size) + " bytes, the blob has " +
                              std::to_string(data.size())});
    } else if (sha256_hex(data) != sha) {
      out.push_back({sha, "checksum mismatch: the blob hashes to " + sha256_hex(data)});
    }
  }
  return out;
}

std::vector<std::string> Database::schema_problems() const {
  std::vector<std::string> out;
  std::string have = schema_text();
  std::string want = expected_schema_text();
  if (have != want) {
    std::set<std::string> have_lines;
    std::set<std::string> want_lines;
    for (std::string* text : {&have, &want}) {
      std::set<std::string>& lines = text == &have ? have_lines : want_lines;
      size_t start = 0;
      for (size_t end; (end = text->find('\n', start)) != std::string::npos; start = end + 1) {
        lines.insert(text->substr(start, end - start));
      }
    }
    for (const std::string& line : want_lines) {
      if (!have_lines.count(line)) {
        out.push_back("schema: missing or changed: " + quote_sql(line));
      }
    }
    for (const std::string& line : have_lines) {
      if (!want_lines.count(line)) {
        out.push_back("schema: unexpected: " + quote_sql(line));
      }
    }
  }
  for (const WinnerRecord& w : winners()) {
    std::string key = winner_key(w.device_key, w.op, w.problem, w.template_hash, w.nvrtc_version);
    std::string what = "winner " + w.op + " " + w.problem;
    if (w.key != key) {
      out.push_back(what + ": stored key " + w.key + " is not the hash of its fields (" + key +
                    ")");
    }
    std::optional<VariantRecord> v = find_variant(w.variant_key);
    if (!v) {
      out.push_back(what + ": names variant " + w.variant_key + ", which is not stored");
      continue;
    }
    // The runtime loads the variant the winner names; one compiled from another
    // template, NVRTC or op would run a binary the key does not describe.
    if (v->op != w.op || v->template_hash != w.template_hash ||
        v->nvrtc_version != w.nvrtc_version || v->kernel != w.kernel) {
      out.push_back(what + ": names variant " + w.variant_key + " of op " + v->op + ", template " +
                    v->template_hash + ", NVRTC " + v->nvrtc_version + ", kernel " + v->kernel +
                    ", which is not what the winner's key says");
    }
    std::optional<DeviceRecord> d = find_device(w.device_key);
    if (d && d->arch != v->arch) {
      out.push_back(what + ": variant " + w.variant_key + " was compiled for " + v->arch +
                    ", the device is " + d->arch);
    }
  }
  return out;
}

std::string Database::schema_text() const {
  return read_schema_text(handle(), m_path);
}

std::string Database::expected_schema_text() {
  const std::string name = "(expected schema)";
  // The same steps a new file goes through, so this is what a read-write open
  // of this build leaves in any file it created or migrated.
  auto db = migrated_in_memory(k_schema_version, name);
  return read_schema_text(db.get(), name);
}

GcStats Database::remove_stale(const std::map<std::string, std::string>& template_hashes,
                               const std::string& nvrtc_version) {
  if (nvrtc_version.empty()) {
    throw Error(ErrorKind::internal, "remove_stale needs the current NVRTC version");
  }
  GcStats stats;
  auto stale = [&](const std::string& op, const std::string& thash, const std::string& nvrtc) {
    if (nvrtc != nvrtc_version) {
      return true;
    }
    auto it = template_hashes.find(op);
    return it != template_hashes.end() && it->second != thash;
  };
  transaction([&] {
    for (const WinnerRecord& w : winners()) {
      if (stale(w.op, w.template_hash, w.nvrtc_version)) {
        Statement(handle(), m_path, "DELETE FROM winners WHERE key = ?1").bind_text(1, w.key).run();
        stats.winners += size_t(sqlite3_changes(handle()));
      }
    }
    for (const VariantRecord& v : variants()) {
      if (!stale(v.op, v.template_hash, v.nvrtc_version)) {
        continue;
      }
      Statement(handle(), m_path, "DELETE FROM results WHERE variant_key = ?1")
          .bind_text(1, v.key)
          .run();
      stats.results += size_t(sqlite3_changes(handle()));
      Statement(handle(), m_path, "DELETE FROM variants WHERE key = ?1").bind_text(1, v.key).run();
      stats.variants += size_t(sqlite3_changes(handle()));
    }
    exec(handle(), m_path,
         "DELETE FROM cubins WHERE sha256 NOT IN (SELECT cubin_sha256 FROM variants)");
    stats.cubins = size_t(sqlite3_changes(handle()));
  });
  if (stats.cubins + stats.results + stats.variants + stats.winners > 0 && m_depth == 0) {
    // Deleted pages only become free space; VACUUM gives them back to the disk.
    exec(handle(), m_path, "VACUUM");
  }
  return stats;
}

void Database::make_portable() {
  if (m_mode == Mode::read_only || m_depth != 0) {
    throw_database(m_path, "make_portable needs a read-write database outside a transaction");
  }
  exec(handle(), m_path, "PRAGMA wal_checkpoint(TRUNCATE)");
  Statement journal(handle(), m_path, "PRAGMA journal_mode = DELETE");
  if (!journal.step() || journal.text(0) != "delete") {
    throw_database(m_path, "cannot leave WAL mode (is another process using the file?)");
  }
}

std::string insecure_permissions(const std::string& path) {
  struct stat file_stat {};
  if (::stat(path.c_str(), &file_stat) != 0) {
    return {};
  }
  uid_t me = ::geteuid();
  if (file_stat.st_mode & (S_IWGRP | S_IWOTH)) {
    return "the file is writable by " +
           std::string(file_stat.st_mode & S_IWOTH ? "all users" : "its group");
  }
  if (file_stat.st_uid != me && file_stat.st_uid != 0) {
    return "the file is owned by another user (uid " + std::to_string(file_stat.st_uid) + ")";
  }
  // Whoever may write the directory may replace the file with their own.
  fs::path dir = fs::absolute(path).parent_path();
  struct stat dir_stat {};
  if (::stat(dir.c_str(), &dir_stat) == 0) {
    bool sticky = dir_stat.st_mode & S_ISVTX;
    if ((dir_stat.st_mode & (S_IWGRP | S_IWOTH)) && !sticky) {
      return "its directory " + dir.string() + " is writable by " +
             std::string(dir_stat.st_mode & S_IWOTH ? "all users" : "its group");
    }
    if (dir_stat.st_uid != me && dir_stat.st_uid != 0 && !sticky) {
      return "its directory " + dir.string() + " is owned by another user (uid " +
             std::to_string(dir_stat.st_uid) + ")";
    }
  }
  return {};
}

std::string default_database_path() {
  auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value ? value : "");
  };
  if (std::string db = env("AUTOTUNE_DB"); !db.empty()) {
    return db;
  }
  // The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty() && fs::path(xdg).is_absolute()) {
    return (fs::path(xdg) / "autotune" / "tuning.db").string();
  }
  if (std::string home = env("HOME"); !home.empty()) {
    return (fs::path(home) / ".cache" / "autotune" / "tuning.db").string();
  }
  throw Error(ErrorKind::database,
              "no place for the tuning database: set AUTOTUNE_DB, XDG_CACHE_HOME or HOME");
}

} // namespace autotune::cache
