// Writes the committed fixture databases of tests/fixtures (run through
// tests/fixtures/make_fixtures.sh). Each is tiny: fake cubins of a few bytes
// with correct checksums, small pages, rollback-journal mode.
//
//   regress_baseline.db  four causal_conv1d winners on an H100 with tight spreads
//   regress_clean.db     the same keys: one 3% slower (under the 5% threshold), one
//                        15% slower but within both sides' noise, one faster, one
//                        missing, one new -> `regress` exits 0
//   regress_planted.db   the same keys, one 30% slower with tight spreads -> exit 1
//   verify_corrupted.db  the baseline with one cubin byte flipped -> `cache verify`
//                        exits 1
#include "cache/database.hpp"
#include "runtime/base/hash.hpp"

#include <sqlite3.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace autotune;
using namespace autotune::cache;

namespace {

struct Row {
  std::string problem;
  std::string config;
  double median_us;
  double p10_us;
  double p90_us;
};

DeviceRecord h100() {
  DeviceRecord d;
  d.name = "NVIDIA H100 80GB HBM3";
  d.arch = "sm_90a";
  d.cc = 90;
  d.sm_count = 132;
  d.driver_version = 13000;
  return d;
}

const char* k_p1 = "B=8,C=4096,L=2048,W=4,x=bf16,w=bf16,bias=1,silu=1,layout=bcl";
const char* k_p2 = "B=1,C=8192,L=4096,W=4,x=bf16,w=bf16,bias=1,silu=1,layout=bcl";
const char* k_p3 = "B=4,C=2048,L=8192,W=4,x=fp16,w=fp16,bias=0,silu=1,layout=bcl";
const char* k_p4 = "B=2,C=1024,L=512,W=3,x=fp32,w=fp32,bias=1,silu=0,layout=bcl";
const char* k_p5 = "B=16,C=4096,L=1024,W=4,x=bf16,w=bf16,bias=1,silu=1,layout=bcl";

void run_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK ||
      sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), sqlite3_errmsg(db));
    sqlite3_close_v2(db);
    std::exit(1);
  }
  sqlite3_close_v2(db);
}

void write(const std::string& path, const std::vector<Row>& rows) {
  fs::remove(path);
  {
    Database db(path, Database::Mode::read_write);
    DeviceRecord device = h100();
    db.put_device(device);
    for (const Row& row : rows) {
      std::string cubin = "\x7f"
                          "ELF-autotune-fixture " +
                          row.config;
      VariantRecord v;
      v.op = "causal_conv1d";
      v.arch = device.arch;
      v.template_hash = "fixture-template";
      v.nvrtc_version = "13.0";
      v.options = "-arch=sm_90a -D" + row.config;
      v.config = row.config;
      v.kernel = "causal_conv1d_fwd";
      v.key = variant_key(v.op, v.template_hash, v.nvrtc_version, v.arch, v.options, v.kernel);
      v.cubin_sha256 = sha256_hex(cubin);
      v.registers = 40;
      v.static_smem = 0;
      db.put_variant(v, cubin);

      ResultRecord r;
      r.device_key = device.key();
      r.variant_key = v.key;
      r.op = v.op;
      r.problem = row.problem;
      r.config = row.config;
      r.median_us = row.median_us;
      r.p10_us = row.p10_us;
      r.p90_us = row.p90_us;
      r.samples = 100;
      r.sm_clock_mhz = 1980;
      r.rel_err = 1e-6;
      db.put_result(r);

      WinnerRecord w;
      w.device_key = r.device_key;
      w.op = v.op;
      w.problem = row.problem;
      w.template_hash = v.template_hash;
      w.nvrtc_version = v.nvrtc_version;
      w.variant_key = v.key;
      w.config = row.config;
      w.kernel = v.kernel;
      w.median_us = row.median_us;
      db.put_winner(w);
    }
    db.make_portable();
  }
  // Small pages keep the committed files a few kilobytes.
  run_sql(path, "PRAGMA page_size = 512; VACUUM;");
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: autotune_make_fixtures DIR\n");
    return 2;
  }
  fs::path dir = argv[1];
  std::vector<Row> baseline = {
      {k_p1, "threads=128,vec=8", 10.0, 9.9, 10.1},
      {k_p2, "threads=256,vec=8", 20.0, 19.8, 20.2},
      {k_p3, "threads=128,vec=4", 40.0, 39.5, 40.5},
      {k_p4, "threads=64,vec=4", 5.0, 4.9, 5.1},
  };
  write((dir / "regress_baseline.db").string(), baseline);
  write((dir / "regress_clean.db").string(),
        {
            {k_p1, "threads=128,vec=8", 10.3, 10.1, 10.5}, // +3%: under the threshold
            {k_p2, "threads=256,vec=8", 23.0, 19.0, 27.0}, // +15%, but within the noise
            {k_p3, "threads=256,vec=4", 36.0, 35.8, 36.2}, // faster
            {k_p5, "threads=128,vec=8", 30.0, 29.8, 30.2}, // new; k_p4 is missing
        });
  write((dir / "regress_planted.db").string(),
        {
            {k_p1, "threads=128,vec=8", 10.1, 10.0, 10.2},
            {k_p2, "threads=256,vec=4", 26.0, 25.8, 26.2}, // +30%, tight: the planted one
            {k_p3, "threads=128,vec=4", 40.2, 39.8, 40.6},
            {k_p4, "threads=64,vec=4", 5.0, 4.9, 5.1},
        });
  std::string corrupted = (dir / "verify_corrupted.db").string();
  write(corrupted, baseline);
  // Same size, one byte changed: only the checksum can tell.
  run_sql(corrupted, "UPDATE cubins SET data = substr(data, 1, 5) || CAST('#' AS BLOB) || "
                     "substr(data, 7) WHERE rowid = (SELECT min(rowid) FROM cubins)");
  std::printf("wrote the fixtures in %s\n", dir.string().c_str());
  return 0;
}
