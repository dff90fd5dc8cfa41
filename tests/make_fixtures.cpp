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
//   report_ops.db        what `autotune report --html` draws (see write_report_fixture):
//                        three ops and an unknown one, every outcome, a tie won by
//                        the smaller id, a 64-variant shape, a shape with no correct
//                        variant, an older template's result, and ids and problem keys
//                        with markup characters in them
#include "cache/database.hpp"
#include "runtime/base/hash.hpp"

#include <sqlite3.h>

#include <cmath>
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

// ---- report_ops.db ------------------------------------------------------------------

struct Measured {
  std::string config;
  Outcome outcome;
  double median_us;
  double spread_pct; // p10..p90 around the median
  std::string message;
};

// Stores one measurement (and, unless it failed to compile, its variant and cubin);
// returns the variant key.
std::string measure(Database& db, const DeviceRecord& device, const std::string& op,
                    const std::string& template_hash, const std::string& problem,
                    const Measured& m) {
  VariantRecord v;
  v.op = op;
  v.arch = device.arch;
  v.template_hash = template_hash;
  v.nvrtc_version = "13.0";
  v.options = "-arch=sm_90a -D" + m.config;
  v.config = m.config;
  v.kernel = op + "_fwd";
  v.key = variant_key(v.op, v.template_hash, v.nvrtc_version, v.arch, v.options, v.kernel);
  if (m.outcome != Outcome::compile_fail) {
    std::string cubin = "\x7f"
                        "ELF-autotune-fixture " +
                        op + " " + m.config;
    v.cubin_sha256 = sha256_hex(cubin);
    v.registers = 64;
    v.static_smem = 0;
    db.put_variant(v, cubin);
  }
  ResultRecord r;
  r.device_key = device.key();
  r.variant_key = v.key;
  r.op = op;
  r.problem = problem;
  r.config = m.config;
  r.outcome = m.outcome;
  if (m.outcome == Outcome::ok || m.outcome == Outcome::wrong) {
    r.median_us = m.median_us;
    r.p10_us = m.median_us * (1 - m.spread_pct / 200);
    r.p90_us = m.median_us * (1 + m.spread_pct / 200);
    r.samples = 60;
    r.sm_clock_mhz = 1980;
  }
  r.rel_err = m.outcome == Outcome::wrong ? 0.31 : m.outcome == Outcome::ok ? 1.7e-3 : NAN;
  r.message = m.message;
  db.put_result(r);
  return v.key;
}

void crown(Database& db, const DeviceRecord& device, const std::string& op,
           const std::string& template_hash, const std::string& problem, const std::string& variant,
           const Measured& m) {
  WinnerRecord w;
  w.device_key = device.key();
  w.op = op;
  w.problem = problem;
  w.template_hash = template_hash;
  w.nvrtc_version = "13.0";
  w.variant_key = variant;
  w.config = m.config;
  w.kernel = op + "_fwd";
  w.median_us = m.median_us;
  db.put_winner(w);
}

// A problem's measurements; `winner` indexes the one crowned (-1: none).
void problem(Database& db, const DeviceRecord& device, const std::string& op,
             const std::string& key, const std::vector<Measured>& measured, int winner) {
  const std::string template_hash = op + "-fixture-template";
  for (size_t i = 0; i < measured.size(); ++i) {
    std::string variant = measure(db, device, op, template_hash, key, measured[i]);
    if (int(i) == winner) {
      crown(db, device, op, template_hash, key, variant, measured[i]);
    }
  }
}

void write_report_fixture(const std::string& path) {
  fs::remove(path);
  {
    Database db(path, Database::Mode::read_write);
    DeviceRecord device = h100();
    db.put_device(device);
    const Outcome ok = Outcome::ok;

    // Every outcome; a fast WRONG variant that may not win; an id with markup in it.
    const std::string conv = "B=8,C=4096,L=2048,W=4,x=bf16,w=bf16,bias=1,silu=1,init_states=0,"
                             "final_states=0,layout=bcl";
    problem(db, device, "causal_conv1d", conv,
            {{"threads=128,vec=4,items=4,cpb=1,load=smem", ok, 96.3, 0.9, ""},
             {"threads=128,vec=8,items=4,cpb=1,load=smem", ok, 96.9, 1.1, ""},
             {"threads=256,vec=4,items=4,cpb=1,load=smem", ok, 98.0, 1.4, ""},
             {"threads=256,vec=8,items=2,cpb=1,load=direct", ok, 101.2, 2.0, ""},
             {"threads=64,vec=4,items=2,cpb=2,load=direct", ok, 110.5, 2.5, ""},
             {"threads=512,vec=8,items=4,cpb=1,load=smem", ok, 130.0, 3.0, ""},
             {"threads=64,vec=4,items=1,cpb=1,load=direct", ok, 181.0, 4.0, ""},
             {"threads=32,vec=4,items=1,cpb=1,load=direct", ok, 262.0, 6.0, ""},
             {"threads=128,vec=8,note=<script>alert(\"x&y\")</script>", ok, 150.0, 2.0, ""},
             {"threads=1024,vec=8,items=4,cpb=2,load=smem", Outcome::wrong, 80.0, 1.0,
              "relative L2 error 3.1e-01 > 1.0e-02 (bf16)"},
             {"threads=512,vec=8,items=8,cpb=2,load=smem", Outcome::fault, 0, 0,
              "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"},
             {"threads=32,vec=8,items=8,cpb=4,load=direct", Outcome::timeout, 0, 0,
              "killed after 10 s"},
             {"threads=1024,vec=8,items=8,cpb=4,load=smem", Outcome::resource, 0, 0,
              "needs 72 KiB of shared memory per block; the GPU gives 48 KiB without opt-in"},
             {"threads=96,vec=3,items=1,cpb=1,load=smem", Outcome::compile_fail, 0, 0,
              "kernel.cuh(41): error: vec must divide 16 bytes\n1 error detected in the "
              "compilation of \"causal_conv1d\"."}},
            0);
    // A result of an earlier template of the same problem: counted, not drawn.
    measure(db, device, "causal_conv1d", "causal_conv1d-old-template", conv,
            {"threads=128,vec=4,items=4,cpb=1,load=direct", ok, 120.0, 1.0, ""});

    // 64 variants (a dense chart); the winner is the second fastest, tied within the
    // noise with the fastest and chosen for its smaller id.
    std::vector<Measured> many;
    for (int i = 0; i < 64; ++i) {
      const double median = 98.6 * (1 + 0.004 * i + 0.0009 * i * i);
      many.push_back({"threads=" + std::to_string(32 * (1 + i % 8)) + ",vec=" +
                          std::to_string(i % 2 ? 8 : 4) + ",items=" + std::to_string(1 + i / 16) +
                          ",cpb=" + std::to_string(1 + (i / 8) % 2) + ",load=smem",
                      ok, i == 1 ? 98.5 : median, 1.5 + 0.05 * i, ""});
    }
    problem(db, device, "causal_conv1d",
            "B=1,C=4096,L=16384,W=4,x=bf16,w=bf16,bias=1,silu=1,init_states=0,final_states=0,"
            "layout=bcl",
            many, 0);

    // A problem key this build cannot parse, with markup characters in it.
    problem(db, device, "causal_conv1d", "B=2,C=64,L=128,W=4,x=bf16,tag=<i>&amp;'\"</i>",
            {{"threads=64,vec=4,items=1,cpb=1,load=direct", ok, 4.1, 2.0, ""},
             {"threads=128,vec=4,items=1,cpb=1,load=direct", ok, 4.4, 2.0, ""}},
            0);

    problem(db, device, "selective_scan",
            "B=8,D=2048,L=2048,N=16,G=1,dtype=bf16,var_bc=1,delta_bias=1,softplus=1,has_d=1,"
            "has_z=1,last_state=0",
            {{"threads=64,items=32,cpb=32,nsplit=2,scan=state,vec=8,poly=0,minblocks=8,tsplit=1,"
              "bc=pair,cpl=2,ystore=after,yred=2",
              ok, 204.6, 0.8, ""},
             {"threads=64,items=32,cpb=32,nsplit=2,scan=state,vec=8,poly=0,minblocks=8,tsplit=1,"
              "bc=pair,cpl=2,ystore=during,yred=1",
              ok, 209.0, 0.9, ""},
             {"threads=128,items=16,cpb=4,nsplit=1,scan=shfl,vec=8,poly=0,minblocks=1,tsplit=1,"
              "bc=f32,cpl=1,ystore=after,yred=1",
              ok, 412.0, 1.5, ""},
             {"threads=256,items=8,cpb=4,nsplit=1,scan=smem,vec=4,poly=1,minblocks=1,tsplit=1,"
              "bc=f32,cpl=1,ystore=after,yred=1",
              ok, 530.0, 2.5, ""},
             {"threads=64,items=32,cpb=32,nsplit=4,scan=state,vec=8,poly=2,minblocks=8,tsplit=2,"
              "bc=pair,cpl=4,ystore=after,yred=2",
              Outcome::wrong, 190.0, 1.0, "relative L2 error 2.4e-02 > 1.0e-02 (bf16)"}},
            0);

    problem(
        db, device, "attention",
        "B=32,Hq=32,Hkv=32,Sq=512,Sk=512,D=64,causal=0,dtype=bf16,lse=0,layout=bshd",
        {{"block_m=128,block_n=64,warps=4,stages=2,swizzle=xor,q=regs,splits=1", ok, 262.0, 0.7,
          ""},
         {"block_m=128,block_n=64,warps=8,stages=2,swizzle=xor,q=regs,splits=1", ok, 268.5, 0.8,
          ""},
         {"block_m=64,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=1", ok, 301.0, 1.0, ""},
         {"block_m=64,block_n=32,warps=4,stages=1,swizzle=pad,q=smem,splits=1", ok, 395.0, 1.2, ""},
         {"block_m=128,block_n=128,warps=8,stages=3,swizzle=xor,q=regs,splits=1", Outcome::resource,
          0, 0, "needs 288 KiB of shared memory per block"}},
        0);
    // Nothing correct: no winner stored.
    problem(db, device, "attention",
            "B=1,Hq=32,Hkv=8,Sq=1,Sk=8192,D=128,causal=0,dtype=bf16,lse=0,layout=bshd",
            {{"block_m=64,block_n=64,warps=4,stages=2,swizzle=xor,q=regs,splits=8", Outcome::wrong,
              21.0, 2.0, "relative L2 error 1.0e+00 > 1.0e-02 (bf16)"},
             {"block_m=64,block_n=64,warps=4,stages=2,swizzle=xor,q=regs,splits=4", Outcome::fault,
              0, 0, "CUDA_ERROR_MISALIGNED_ADDRESS: misaligned address"}},
            -1);

    // An op this build does not know.
    problem(db, device, "future_op", "M=4096,N=4096,dtype=fp8",
            {{"tile=128x128", ok, 51.0, 1.0, ""}, {"tile=64x64", ok, 77.0, 1.0, ""}}, 0);
    db.make_portable();
  }
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
  write_report_fixture((dir / "report_ops.db").string());
  std::printf("wrote the fixtures in %s\n", dir.string().c_str());
  return 0;
}
