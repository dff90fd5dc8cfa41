// The worker protocol: every message survives encode/decode unchanged, malformed
// bodies are errors, and the parent tells a timeout from a crash by what it saw
// (it killed the worker on the deadline; the worker died), never by message text.
// The last part runs stand-in workers (shell scripts) so it needs no GPU.
#include "tuner/worker.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

using namespace autotune;
namespace wp = autotune::worker_protocol;
namespace fs = std::filesystem;

namespace {

TimingProtocol odd_protocol() {
  TimingProtocol p;
  p.warmup = 1;
  p.min_samples = 7;
  p.max_samples = 123;
  p.min_seconds = 0.1 + 0.2; // not exactly 0.3: doubles must travel bit-exact
  p.max_seconds = 1e-300;
  p.target_spread = std::nextafter(0.02, 1.0);
  p.batch = 5;
  return p;
}

Timing odd_timing() {
  Timing t;
  t.median_us = 12.345678901234567;
  t.p10_us = 1.0 / 3.0;
  t.p90_us = std::numeric_limits<double>::max();
  t.samples = 300;
  return t;
}

// Every part distinct and not a short decimal, so a swapped or rounded field shows.
WorkerSeconds odd_seconds() {
  WorkerSeconds s;
  s.context = 0.1 + 0.2;
  s.modules = 1.0 / 3.0;
  s.allocate = 1e-9;
  s.inputs = 2.5;
  s.copy = std::nextafter(0.02, 1.0);
  s.module_load = 7e-4;
  s.check = 123.456;
  s.timing = std::numeric_limits<double>::max();
  return s;
}

template <typename T> void round_trip_request(const T& message) {
  wp::Request decoded = wp::decode_request(wp::encode(wp::Request{message}));
  REQUIRE(std::holds_alternative<T>(decoded));
  CHECK(std::get<T>(decoded) == message);
}

template <typename T> void round_trip_reply(const T& message) {
  wp::Reply decoded = wp::decode_reply(wp::encode(wp::Reply{message}));
  REQUIRE(std::holds_alternative<T>(decoded));
  CHECK(std::get<T>(decoded) == message);
}

} // namespace

TEST_CASE("every worker request survives encoding and decoding") {
  SUBCASE("setup") {
    round_trip_request(wp::SetupRequest{"causal_conv1d",
                                        {{"B", "8"}, {"C", "4096"}, {"dtype", "bf16"}},
                                        0xfedcba9876543210ull,
                                        odd_protocol()});
  }
  SUBCASE("measure, with a cubin holding every byte value") {
    std::string cubin;
    for (int i = 0; i < 512; ++i) {
      cubin.push_back(char(i));
    }
    round_trip_request(wp::MeasureRequest{{{"threads", "128"}, {"load", "smem"}, {"empty", ""}},
                                          "causal_conv1d_fwd",
                                          cubin,
                                          true,
                                          odd_protocol(),
                                          std::string(64, 'f')});
    round_trip_request(wp::MeasureRequest{{}, "", "", false, TimingProtocol{}});
  }
  SUBCASE("reseed and quit") {
    round_trip_request(wp::ReseedRequest{42});
    round_trip_request(wp::QuitRequest{});
  }
}

TEST_CASE("every worker reply survives encoding and decoding, outcome and error kind typed") {
  SUBCASE("setup done") {
    round_trip_reply(wp::SetupDone{true, odd_timing(), 3ull << 33, odd_seconds()});
    round_trip_reply(wp::SetupDone{});
  }
  SUBCASE("measured, for every outcome") {
    for (cache::Outcome o :
         {cache::Outcome::ok, cache::Outcome::compile_fail, cache::Outcome::resource,
          cache::Outcome::fault, cache::Outcome::timeout, cache::Outcome::wrong}) {
      CAPTURE(cache::to_string(o));
      round_trip_reply(wp::Measured{o,
                                    odd_timing(),
                                    2.5e-3,
                                    1980,
                                    "rel. error 0.25\nline 2",
                                    o == cache::Outcome::fault,
                                    odd_seconds(),
                                    {1.0 / 3.0, 12.345678901234567, 1e-300}});
    }
  }
  SUBCASE("reseeded") {
    round_trip_reply(wp::Reseeded{});
    round_trip_reply(wp::Reseeded{odd_seconds()});
  }
  SUBCASE("failed, for every error kind") {
    for (ErrorKind k : {ErrorKind::usage, ErrorKind::config, ErrorKind::database, ErrorKind::io,
                        ErrorKind::no_device, ErrorKind::cuda, ErrorKind::compile, ErrorKind::check,
                        ErrorKind::not_tuned, ErrorKind::internal}) {
      CAPTURE(to_string(k));
      round_trip_reply(wp::Failed{k, "what went wrong", k == ErrorKind::cuda});
    }
  }
}

TEST_CASE("malformed worker messages are internal errors naming the problem") {
  std::string measure = wp::encode(
      wp::Request{wp::MeasureRequest{{{"a", "1"}}, "k", "bin", false, TimingProtocol{}}});
  SUBCASE("a truncated body") {
    CHECK_THROWS_WITH_AS(wp::decode_request(measure.substr(0, measure.size() - 1)),
                         doctest::Contains("worker protocol: request: truncated"), Error);
    CHECK_THROWS_AS(wp::decode_request(""), Error);
  }
  SUBCASE("bytes left over") {
    CHECK_THROWS_WITH_AS(wp::decode_request(measure + "x"), doctest::Contains("1 bytes left over"),
                         Error);
  }
  SUBCASE("an unknown kind") {
    CHECK_THROWS_WITH_AS(wp::decode_request(std::string(1, char(99))),
                         doctest::Contains("unknown kind 99"), Error);
    CHECK_THROWS_WITH_AS(wp::decode_reply(std::string(1, char(0))),
                         doctest::Contains("unknown kind 0"), Error);
  }
  SUBCASE("an unknown outcome or error kind") {
    std::string measured = wp::encode(wp::Reply{wp::Measured{}});
    measured[1] = char(200); // the outcome byte follows the kind
    CHECK_THROWS_WITH_AS(wp::decode_reply(measured), doctest::Contains("unknown outcome 200"),
                         Error);
    std::string failed = wp::encode(wp::Reply{wp::Failed{}});
    failed[1] = char(77);
    CHECK_THROWS_WITH_AS(wp::decode_reply(failed), doctest::Contains("unknown error kind 77"),
                         Error);
  }
  SUBCASE("a list of samples longer than the body") {
    wp::Measured m;
    m.samples_us = {1.5, 2.5};
    std::string measured = wp::encode(wp::Reply{m});
    // The count precedes the last two doubles.
    uint64_t huge = uint64_t(1) << 60;
    measured.replace(measured.size() - 24, sizeof huge,
                     std::string(reinterpret_cast<const char*>(&huge), sizeof huge));
    CHECK_THROWS_WITH_AS(wp::decode_reply(measured),
                         doctest::Contains("a list of 1152921504606846976 doubles, truncated"),
                         Error);
  }
  SUBCASE("a flag that is neither 0 nor 1") {
    std::string reseed_like = wp::encode(wp::Reply{wp::SetupDone{}});
    reseed_like[1] = char(2); // has_copy
    CHECK_THROWS_WITH_AS(wp::decode_reply(reseed_like), doctest::Contains("a flag of 2"), Error);
  }
}

namespace {

// A stand-in worker: a shell script that answers the setup request with a
// well-formed SetupDone frame, then does `then` (hang, crash).
class FakeWorker {
public:
  explicit FakeWorker(const std::string& then, const WorkerSeconds& seconds = {}) {
    m_dir = fs::temp_directory_path() / ("autotune-fake-worker-" + std::to_string(::getpid()));
    fs::create_directories(m_dir);
    std::string body = wp::encode(wp::Reply{wp::SetupDone{false, Timing{}, 4096, seconds}});
    uint32_t size = uint32_t(body.size());
    std::ofstream(m_dir / "setup_done.bin", std::ios::binary)
        << std::string(reinterpret_cast<const char*>(&size), sizeof size) << body;
    std::ofstream script(m_dir / "worker.sh");
    script << "#!/bin/sh\ncat '" << (m_dir / "setup_done.bin").string() << "' >&4\n"
           << then << "\n";
    script.close();
    fs::permissions(m_dir / "worker.sh", fs::perms::owner_all);
  }
  ~FakeWorker() {
    std::error_code ec;
    fs::remove_all(m_dir, ec);
  }
  std::string path() const { return (m_dir / "worker.sh").string(); }

private:
  fs::path m_dir;
};

Problem tiny_problem() {
  Problem p;
  p.op = "causal_conv1d";
  p.fields = {{"B", "1"}, {"C", "64"}, {"L", "256"}};
  return p;
}

} // namespace

TEST_CASE("the parent records a worker it killed on the deadline as TIMEOUT") {
  FakeWorker fake("exec sleep 30");
  Worker worker(10, 0.2, fake.path());
  TimingProtocol protocol;
  protocol.max_seconds = 0.1;
  SetupResult setup = worker.setup("causal_conv1d", tiny_problem(), 1, protocol);
  CHECK(setup.device_bytes == 4096);
  CHECK_FALSE(setup.has_copy);
  MeasureResult r = worker.measure({{"threads", "128"}}, "kernel", "cubin", protocol);
  CHECK(r.outcome == cache::Outcome::timeout);
  CHECK(r.message.find("no answer within") != std::string::npos);
  CHECK(worker.restarts() == 1);
}

TEST_CASE("the parent records a worker that died as FAULT, with the signal") {
  FakeWorker fake("kill -SEGV $$");
  Worker worker(10, 5, fake.path());
  TimingProtocol protocol;
  worker.setup("causal_conv1d", tiny_problem(), 1, protocol);
  MeasureResult r = worker.measure({{"threads", "128"}}, "kernel", "cubin", protocol);
  CHECK(r.outcome == cache::Outcome::fault);
  CHECK(r.message.find("Segmentation fault") != std::string::npos);
  CHECK(worker.restarts() == 1);
}

TEST_CASE("the parent sums what the workers report and times the replacement of a lost one") {
  WorkerSeconds setup;
  setup.context = 0.25;
  setup.inputs = 0.5;
  FakeWorker fake("exec sleep 30", setup);
  Worker worker(10, 0.2, fake.path());
  TimingProtocol protocol;
  protocol.max_seconds = 0.1;
  worker.setup("causal_conv1d", tiny_problem(), 1, protocol);
  CHECK(worker.seconds() == setup);
  CHECK(worker.restart_seconds() == 0);
  CHECK(worker.measure({{"threads", "128"}}, "kernel", "cubin", protocol).outcome ==
        cache::Outcome::timeout);
  CHECK(worker.restart_seconds() == 0); // the lost worker is replaced by the next call
  CHECK(worker.measure({{"threads", "128"}}, "kernel", "cubin", protocol).outcome ==
        cache::Outcome::timeout);
  CHECK(worker.restarts() == 2);
  CHECK(worker.restart_seconds() > 0);
  CHECK(worker.restart_seconds() < 5);
  WorkerSeconds twice = setup;
  twice += setup; // the replacement's setup reported the same
  CHECK(worker.seconds() == twice);
}

TEST_CASE("the parent's own work runs while the worker sets up, and its failure stops the worker") {
  FakeWorker fake("exec sleep 30");
  Worker worker(10, 0.2, fake.path());
  TimingProtocol protocol;
  protocol.max_seconds = 0.1;
  bool ran = false;
  SetupResult setup =
      worker.setup("causal_conv1d", tiny_problem(), 1, protocol, [&] { ran = true; });
  CHECK(ran);
  CHECK(setup.device_bytes == 4096);
  CHECK_THROWS_WITH_AS(worker.setup("causal_conv1d", tiny_problem(), 2, protocol,
                                    [] { throw Error(ErrorKind::database, "planted"); }),
                       "planted", Error);
  // The next call sets up a new worker for the last problem asked for, then measures.
  CHECK(worker.measure({{"threads", "128"}}, "kernel", "cubin", protocol).outcome ==
        cache::Outcome::timeout);
}

TEST_CASE("a worker that finds no GPU fails setup as no_device, whatever its message says") {
  // The real worker (the autotune CLI) on this machine: without a GPU it replies
  // Failed{no_device}; with one, setup succeeds.
  Worker worker(120, 10, AUTOTUNE_CLI);
  try {
    worker.setup("causal_conv1d", tiny_problem(), 1, TimingProtocol{});
    MESSAGE("a GPU is present: the no-GPU setup failure is not exercised here");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::no_device);
  }
}
