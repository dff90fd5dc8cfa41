// The tuning database (SQLite; no CUDA here). Stores devices, compiled variants
// with their cubins (content-addressed, one blob per distinct cubin, SHA-256
// checksum verified on every read), timing results, and the winner per device,
// op and problem. See SCHEMA.md for the tables and the versioning rules.
//
// Concurrency: WAL journal, busy_timeout, and every write in one IMMEDIATE
// transaction, so several tuning processes can share one file.
#pragma once

#include "runtime/base/error.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace autotune::cache {

constexpr int k_schema_version = 1;

struct DeviceRecord {
  std::string name;          // "NVIDIA H100 80GB HBM3"
  std::string arch;          // "sm_90a"
  int cc = 0;                // 90
  int sm_count = 0;
  int driver_version = 0;    // 13000
  // sha256 over the fields above, the device part of every tuning key
  std::string key() const;
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
  std::string options;       // all NVRTC options, space-separated
  std::string config;        // "threads=128,vec=8,..."
  std::string kernel;        // entry point name
  std::string cubin_sha256;  // content address of the cubin
  double compile_s = 0;
  int registers = -1;        // from the loaded function, -1 when not yet known
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
  std::string problem;        // canonical problem key, "B=8,C=4096,..."
  std::string variant_key;
  std::string config;
  Outcome outcome = Outcome::ok;
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  int samples = 0;
  int sm_clock_mhz = 0;       // 0 when unknown
  double rel_err = 0;
  std::string message;        // NVRTC log, fault text, check failure
};

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
};

class Database {
public:
  enum class Mode { read_write, read_only };

  // Opens (and for read_write, creates and migrates) the database at `path`.
  // Throws Error(database) naming the path on any problem; a read_only open never
  // changes the file.
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
  std::vector<WinnerRecord> winners() const;

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
  // settings every connection gets: busy_timeout, defensive, untrusted schema.
  void open_connection(const std::string& filename, int flags);

  std::unique_ptr<sqlite3, Closer> m_db;
  std::string m_path;
  Mode m_mode;
  int m_depth = 0;
};

// $AUTOTUNE_DB, else $XDG_CACHE_HOME/autotune/tuning.db, else ~/.cache/autotune/tuning.db.
std::string default_database_path();

} // namespace autotune::cache
