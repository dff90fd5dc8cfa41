// The tuning database (SQLite; no CUDA here). Stores devices, compiled variants
// with their cubins (content-addressed, one blob per distinct cubin, SHA-256
// checksum verified on every read), timing results, and the winner per device,
// op and problem. See SCHEMA.md for the tables and the versioning rules.
//
// Concurrency: WAL journal, a busy handler that waits (with jittered backoff) up
// to two minutes for another process's lock, and every write in one IMMEDIATE
// transaction, so several tuning processes can share one file.
#pragma once

#include "runtime/base/error.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace autotune::cache {

// Version 2 added winners.key (the content hash of a winner's whole lookup key)
// and the `tuned` view; see SCHEMA.md.
constexpr int k_schema_version = 2;

struct DeviceRecord {
  std::string name; // "NVIDIA H100 80GB HBM3"
  std::string arch; // "sm_90a"
  int cc = 0;       // 90
  int sm_count = 0;
  int driver_version = 0; // 13000
  // sha256 over the fields above, the device part of every tuning key; `dump`
  // receives what was hashed.
  std::string key(std::string* dump = nullptr) const;
};

// A compiled instantiation of a template. Its key hashes everything that changes
// the binary: schema version, op, template hash, NVRTC version, arch, options,
// kernel name (see variant_key()).
struct VariantRecord {
  std::string key;
  std::string op;
  std::string arch;
  std::string template_hash;
  std::string nvrtc_version;
  std::string options;      // all NVRTC options, space-separated
  std::string config;       // "threads=128,vec=8,..."
  std::string kernel;       // entry point name
  std::string cubin_sha256; // content address of the cubin
  double compile_s = 0;
  int registers = -1; // from the loaded function, -1 when not yet known
  int static_smem = -1;
};

std::string variant_key(const std::string& op, const std::string& template_hash,
                        const std::string& nvrtc_version, const std::string& arch,
                        const std::string& options, const std::string& kernel,
                        std::string* dump = nullptr);

enum class Outcome { ok, compile_fail, resource, fault, timeout, wrong };
const char* to_string(Outcome o);
Outcome parse_outcome(const std::string& text);

struct ResultRecord {
  std::string device_key;
  std::string op;
  std::string problem; // canonical problem key, "B=8,C=4096,..."
  std::string variant_key;
  std::string config;
  Outcome outcome = Outcome::ok;
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  int samples = 0;
  int sm_clock_mhz = 0; // 0 when unknown
  double rel_err = 0;
  std::string message; // NVRTC log, fault text, check failure
};

// The content hash of a winner's lookup key: schema version, device key (GPU
// name, arch, compute capability, SM count, driver), op, problem (shape, dtypes,
// layout), template hash and NVRTC version. Stored in winners.key; find_winner
// looks winners up by it, so any differing field is a miss.
std::string winner_key(const std::string& device_key, const std::string& op,
                       const std::string& problem, const std::string& template_hash,
                       const std::string& nvrtc_version, std::string* dump = nullptr);

struct WinnerRecord {
  std::string device_key;
  std::string op;
  std::string problem;
  std::string template_hash;
  std::string nvrtc_version;
  std::string variant_key;
  std::string config;
  std::string kernel;
  double median_us = 0;
  std::string key;        // winner_key(), filled on read (put_winner computes it)
  std::string updated_at; // filled on read
};

// A stored cubin that fails its checksum (verify).
struct CubinProblem {
  std::string sha256;
  std::string what;
};

// What `cache gc` removed.
struct GcStats {
  size_t winners = 0;
  size_t variants = 0;
  size_t results = 0;
  size_t cubins = 0;
};

class Database {
public:
  enum class Mode { read_write, read_only };

  // Opens (and for read_write, creates and migrates) the database at `path`.
  // Throws Error(database) naming the path on any problem; a read_only open never
  // changes the file. Refused in any mode: a file that is not SQLite, a damaged
  // one SQLite cannot read, another program's (its own application_id, or any
  // object without an autotune schema version), one of a newer schema. Refused
  // for read_write besides: a file holding objects autotune does not create, and
  // one PRAGMA quick_check finds damaged; both before anything is written.
  Database(const std::string& path, Mode mode);
  Database(Database&&) noexcept;
  Database& operator=(Database&&) = delete;
  Database(const Database&) = delete;
  ~Database();

  const std::string& path() const { return m_path; }
  int schema_version() const;

  void put_device(const DeviceRecord& device);
  // Stores the cubin (if new) and the variant row in one transaction.
  void put_variant(const VariantRecord& variant, const std::string& cubin);
  std::optional<VariantRecord> find_variant(const std::string& key) const;
  // The cubin with its checksum verified; throws Error(database) on a mismatch.
  std::string load_cubin(const std::string& sha256) const;

  void put_result(const ResultRecord& result);
  std::optional<ResultRecord> find_result(const std::string& device_key,
                                          const std::string& variant_key,
                                          const std::string& problem) const;
  std::vector<ResultRecord> results(const std::string& device_key, const std::string& op,
                                    const std::string& problem) const;

  void put_winner(const WinnerRecord& winner);
  // The winner for exactly this key, or nothing: a stale template hash or NVRTC
  // version is a miss.
  std::optional<WinnerRecord> find_winner(const std::string& device_key, const std::string& op,
                                          const std::string& problem,
                                          const std::string& template_hash,
                                          const std::string& nvrtc_version) const;
  // `dump`, when given, receives what was hashed (for AUTOTUNE_LOG=debug on a miss).
  std::optional<WinnerRecord> find_winner(const std::string& device_key, const std::string& op,
                                          const std::string& problem,
                                          const std::string& template_hash,
                                          const std::string& nvrtc_version,
                                          std::string* dump) const;
  std::vector<WinnerRecord> winners() const;

  // Whole-table listings for maintenance (export, merge, verify), in key order.
  std::vector<DeviceRecord> devices() const;
  std::optional<DeviceRecord> find_device(const std::string& key) const;
  std::vector<VariantRecord> variants() const;
  std::vector<ResultRecord> all_results() const;

  // Integrity checks for `cache verify`; each returns one line per problem found.
  // SQLite's integrity_check and foreign_key_check:
  std::vector<std::string> integrity_problems() const;
  // PRAGMA quick_check alone (what a read-write open checks): damaged b-tree pages,
  // without the index cross-checks of integrity_check. Empty when sound.
  std::vector<std::string> quick_check() const;
  // Every cubin whose size or SHA-256 disagrees with its row:
  std::vector<CubinProblem> cubin_problems() const;
  // Schema objects that differ from what this build creates, winners whose
  // stored key is not winner_key() of their columns, and dangling references:
  std::vector<std::string> schema_problems() const;

  // The schema as SQLite stores it (type, name, table, SQL of every object), one
  // line each in name order; the golden test hashes it.
  std::string schema_text() const;
  // schema_text() of a new database of this build (built in memory).
  static std::string expected_schema_text();

  // Deletes winners and variants whose template hash (per op, for the ops in
  // `template_hashes`) or NVRTC version is not current, the results of deleted
  // variants and the cubins no variant uses any more; then compacts the file.
  GcStats remove_stale(const std::map<std::string, std::string>& template_hashes,
                       const std::string& nvrtc_version);

  // Checkpoints the WAL and switches the file to rollback-journal mode, so it is
  // one self-contained file that readers can open without creating -shm files.
  void make_portable();

  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT (ROLLBACK on exception).
  template <typename F> void transaction(F&& body) {
    begin();
    try {
      body();
    } catch (...) {
      rollback();
      throw;
    }
    commit();
  }

private:
  // The connection's one owner; closing never throws.
  struct Closer {
    void operator()(sqlite3* db) const noexcept;
  };

  // Outermost level: BEGIN IMMEDIATE / COMMIT / ROLLBACK. Inner levels use a
  // savepoint, so an inner failure the caller catches undoes only the inner work.
  void begin();
  void commit();
  void rollback() noexcept;
  // Brings a read_write database to k_schema_version under the write lock.
  void migrate();
  // The open connection; Error(internal) on a moved-from Database.
  sqlite3* handle() const;
  // Opens `filename` (a path, or a URI with SQLITE_OPEN_URI) into m_db with the
  // settings every connection gets: the busy handler, defensive, untrusted schema.
  void open_connection(const std::string& filename, int flags);

public:
  // The busy handler's state (database.cpp); heap-allocated so that its address,
  // which SQLite holds, survives moving the Database.
  struct BusyState;

private:
  // Declared before m_db: the connection (which points to it) closes first.
  std::unique_ptr<BusyState> m_busy;
  std::unique_ptr<sqlite3, Closer> m_db;
  std::string m_path;
  Mode m_mode;
  int m_depth = 0;
};

// Why the file at `path`, holding executable code, could be changed by another
// user: it or its directory is group/other writable (a directory with the sticky
// bit excepted), or it is owned by someone other than this user or root. Empty
// when it is safe (or does not exist).
std::string insecure_permissions(const std::string& path);

// $AUTOTUNE_DB, else $XDG_CACHE_HOME/autotune/tuning.db, else ~/.cache/autotune/tuning.db.
std::string default_database_path();

} // namespace autotune::cache
