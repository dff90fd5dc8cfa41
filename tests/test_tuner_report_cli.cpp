// `autotune report`, run as a user would: the stored winners judged (metric, outcomes,
// runner-up margin), as Markdown and JSON, the HTML page (--html) over the committed
// fixture tests/fixtures/report_ops.db, and bad input.
#include "cache/database.hpp"
#include "runtime/base/hash.hpp"
#include "tests/cli_support.hpp"
#include "tuner/report_html.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>

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

namespace {

const std::string k_report_fixture = AUTOTUNE_SOURCE_DIR "/tests/fixtures/report_ops.db";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) {
    ++n;
  }
  return n;
}

fs::path temp_dir() {
  fs::path dir = fs::temp_directory_path() /
                 std::to_string(std::random_device{}()).insert(0, "autotune_report_html_");
  fs::create_directories(dir);
  return dir;
}

} // namespace

TEST_CASE("html_escape leaves no markup and no control characters") {
  CHECK(html_escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&#39;");
  CHECK(html_escape("tab\tand\nnewline") == "tab\tand\nnewline");
  CHECK(html_escape(std::string("nul\0bell\a", 9)) == "nul\xEF\xBF\xBD"
                                                      "bell\xEF\xBF\xBD");
  CHECK(html_escape("µs ×") == "µs ×");
}

TEST_CASE("report --html draws every measured shape of the fixture, winners marked") {
  const fs::path dir = temp_dir();
  const fs::path page = dir / "report.html";
  Run r = run("report --html " + page.string() + " --db " + k_report_fixture +
              " --copy-gbps 2860 --peak-tflops 660");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r.output, "wrote " + page.string() + ": 7 problems of 4 ops, 6 with a winner"));
  const std::string html = read_file(page);
  REQUIRE(!html.empty());

  // Every (op, problem) measured in the database has its section, winner or not, and
  // every stored winner is marked in its table.
  cache::Database db(k_report_fixture, cache::Database::Mode::read_only);
  std::set<std::pair<std::string, std::string>> shapes;
  for (const cache::ResultRecord& result : db.all_results()) {
    shapes.insert({result.op, result.problem});
  }
  CHECK(shapes.size() == 7);
  for (const auto& [op, problem] : shapes) {
    INFO(op << " " << problem);
    CHECK(has(html, "<h3>" + html_escape(op + " " + problem) + "</h3>"));
  }
  const std::vector<cache::WinnerRecord> winners = db.winners();
  CHECK(winners.size() == 6);
  CHECK(count(html, "<tr class=\"win\">") == winners.size());
  for (const cache::WinnerRecord& w : winners) {
    INFO(w.config);
    CHECK(has(html, "<code>★ " + html_escape(w.config) + "</code>"));
  }
  // The 64-variant shape's winner is second by median (a tie won by the smaller id).
  CHECK(has(html, "<tr class=\"win\"><td>2</td><td><code>★ "
                  "threads=32,vec=4,items=1,cpb=1,load=smem</code>"));

  SUBCASE("a tie won by the slower variant shows a negative margin, in the page and in Markdown") {
    CHECK(has(html, "<td class=\"num\">-0.1%</td>"));
    CHECK(has(html, "0.1% faster (within the winner's p10..p90 range: a tie within the noise)"));
    Run markdown = run("report --op causal_conv1d --db " + k_report_fixture);
    CHECK(markdown.code == 0);
    CHECK(has(markdown.output, "| -0.1% |"));
    CHECK_FALSE(has(markdown.output, "+-"));
  }
  SUBCASE("outcome counts, the older template's result, the shape without a winner") {
    CHECK(has(html, "14 variants: OK 9, WRONG 1, FAULT 1, TIMEOUT 1, RESOURCE 1, COMPILE_FAIL 1; "
                    "1 older measurements (another template or NVRTC) not shown"));
    CHECK(has(html, "<span class=\"badge o-TIMEOUT\">TIMEOUT</span>"));
    CHECK(has(html, "2 variants: OK 0, WRONG 1, FAULT 1, TIMEOUT 0, RESOURCE 0, COMPILE_FAIL 0"));
    CHECK(has(html, "no correct variant"));
    CHECK(has(html, "no variant ran correctly: nothing to time"));
  }
  SUBCASE("floors: bytes at --copy-gbps, exponentials at the stored clock, unknown work") {
    // causal_conv1d B=8,C=4096,L=2048: 268,476,416 bytes at 2860 GB/s = 93.87 us;
    // the winner's 96.3 us is 97.5% of it.
    CHECK(has(html, "93.9 µs, set by the bytes; the winner runs at 97.5% of it"));
    // selective_scan B=8,D=2048,L=2048,N=16: 2^29 exps at 132 SMs x 16 x 1980 MHz =
    // 128.4 us, 62.7% of 204.6 us.
    CHECK(has(html, "128.4 µs, set by the exponentials; the winner runs at 62.7% of it"));
    CHECK(has(html, "unknown: unknown op &#39;future_op&#39;"));
  }
  SUBCASE("stored text is escaped wherever it appears") {
    CHECK_FALSE(has(html, "<script"));
    CHECK_FALSE(has(html, "alert(\""));
    CHECK(has(html, "note=&lt;script&gt;alert(&quot;x&amp;y&quot;)&lt;/script&gt;"));
    CHECK(has(html, "tag=&lt;i&gt;&amp;amp;&#39;&quot;&lt;/i&gt;"));
    CHECK_FALSE(has(html, "<i>"));
  }
  SUBCASE("self-contained: nothing is fetched") {
    CHECK(has(html, "content=\"default-src 'none'; style-src 'unsafe-inline'\""));
    for (const char* reference : {"src=", "href=\"http", "href='http", "url(", "@import", "<link",
                                  "<script", "<iframe", "<object", "<img"}) {
      INFO(reference);
      CHECK_FALSE(has(html, reference));
    }
    CHECK(count(html, "<svg ") >= 8); // one chart per op and per shape
    CHECK(count(html, "<svg ") == count(html, "</svg>"));
  }
  SUBCASE("the same database renders the same bytes") {
    const fs::path again = dir / "again.html";
    REQUIRE(run("report --html " + again.string() + " --db " + k_report_fixture +
                " --copy-gbps 2860 --peak-tflops 660")
                .code == 0);
    CHECK(read_file(again) == html);
  }
  SUBCASE("an existing file is kept unless --force") {
    Run again = run("report --html " + page.string() + " --db " + k_report_fixture);
    CHECK(again.code == 2);
    CHECK(has(again.output, page.string() + " exists; pass --force to overwrite it"));
    CHECK(read_file(page) == html);
    again = run("report --html " + page.string() + " --force --db " + k_report_fixture);
    CHECK(again.code == 0);
    CHECK(read_file(page) != html); // without rates: no bytes floor
    CHECK(has(read_file(page), "give the GPU's copy bandwidth"));
  }
  SUBCASE("selectors narrow the page; bad input exits 2 and writes nothing") {
    const fs::path only = dir / "attention.html";
    REQUIRE(
        run("report --html " + only.string() + " --op attention --db " + k_report_fixture).code ==
        0);
    const std::string text = read_file(only);
    CHECK(has(text, "<h3>attention B=1,Hq=32,Hkv=8,Sq=1,Sk=8192"));
    CHECK(has(text, "<h3>attention B=32,Hq=32"));
    CHECK_FALSE(has(text, "<h3>causal_conv1d"));
    const fs::path bad = dir / "bad.html";
    CHECK(
        run("report --html " + bad.string() + " --copy-gbps fast --db " + k_report_fixture).code ==
        2);
    CHECK(run("report --html " + bad.string() + " --json --db " + k_report_fixture).code == 2);
    CHECK(run("report --force --db " + k_report_fixture).code == 2);
    CHECK(run("report --html " + bad.string() + " --db " + (dir / "missing.db").string()).code ==
          2);
    CHECK(run("report --html " + (dir / "no-such-dir" / "x.html").string() + " --db " +
              k_report_fixture)
              .code == 2);
    CHECK_FALSE(fs::exists(bad));
  }
  fs::remove_all(dir);
}
