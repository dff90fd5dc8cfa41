// `autotune report`, run as a user would: the stored winners judged (metric, outcomes,
// runner-up margin), as Markdown and JSON, and bad input.
#include "cache/database.hpp"
#include "runtime/base/hash.hpp"
#include "tests/cli_support.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <random>
#include <string>

namespace fs = std::filesystem;
using namespace autotune;
using namespace autotune::testing;

namespace {

// One causal_conv1d problem with three measured variants: the winner (100 us), an OK
// one 25% slower, and a WRONG one that was faster (it may not win).
void make_database(const std::string& path, const std::string& problem) {
  cache::Database db(path, cache::Database::Mode::read_write);
  cache::DeviceRecord device;
  device.name = "NVIDIA H100 80GB HBM3";
  device.arch = "sm_90a";
  device.cc = 90;
  device.sm_count = 132;
  device.driver_version = 13000;
  db.put_device(device);
  db.transaction([&] {
    struct Measured {
      const char* config;
      double median_us;
      cache::Outcome outcome;
    };
    const Measured measured[] = {{"threads=128", 100.0, cache::Outcome::ok},
                                 {"threads=256", 125.0, cache::Outcome::ok},
                                 {"threads=512", 50.0, cache::Outcome::wrong}};
    for (const Measured& m : measured) {
      std::string cubin = std::string("\x7f"
                                      "ELF ")
                              .append(m.config);
      cache::VariantRecord v;
      v.op = "causal_conv1d";
      v.arch = "sm_90a";
      v.template_hash = "template-a";
      v.nvrtc_version = "13.0";
      v.options = std::string("-D").append(m.config);
      v.config = m.config;
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
      r.outcome = m.outcome;
      r.median_us = m.median_us;
      r.p10_us = m.median_us * 0.99;
      r.p90_us = m.median_us * 1.01;
      r.samples = 40;
      db.put_result(r);
      if (m.median_us == 100.0) {
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
    }
  });
}

} // namespace

TEST_CASE("report judges each winner: metric, outcomes and the margin to the runner-up") {
  fs::path dir = fs::temp_directory_path() /
                 std::to_string(std::random_device{}()).insert(0, "autotune_report_");
  fs::create_directories(dir);
  const std::string db = (dir / "t.db").string();
  // bf16 x and out, 8 x 4096 x 2048 each, plus 4096 x (4 weights + 1 bias) in bf16:
  // 268,476,416 bytes in 100 us.
  make_database(db, "B=8,C=4096,L=2048,W=4,x=bf16,w=bf16,bias=1,silu=1,layout=bcl");

  Run r = run("report --db " + db);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "| causal_conv1d | `B=8,C=4096,L=2048,W=4"));
  CHECK(has(r.output, "`threads=128` | 100.00 | 2.0% | 2684.8 GB/s | 3 (OK 2 WRONG 1) | +25.0% |"));

  r = run("report --json --db " + db);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "\"metric\":\"GB/s\",\"metric_value\":2684.76"));
  CHECK(has(r.output, "\"outcomes\":{\"OK\":2,\"WRONG\":1}"));
  CHECK(has(r.output, "\"runner_up_config\":\"threads=256\",\"runner_up_margin_pct\":25.00"));

  SUBCASE("selectors narrow it, bad input exits 2") {
    r = run("report --op attention --db " + db);
    CHECK(r.code == 0);
    CHECK(has(r.output, "0 winners"));
    CHECK(run("report --db " + db + " --frobnicate").code == 2);
    CHECK(run("report --db " + (dir / "missing.db").string()).code == 2);
  }
  fs::remove_all(dir);
}
