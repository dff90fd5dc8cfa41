// GPU tests of the runtime under threads and of policy tune: many threads meeting
// many new shapes at once get correct results (each problem resolved once, variants
// compiled in parallel); policy tune with the build's own CLI tunes a shape into a
// fresh database and runs its winner; a failed tune is an error shared by the threads
// that wanted it, never a fallback, and is tried again on the next call.
#include "gpu_support.hpp"

#include "runtime/base/error.hpp"
#include "runtime/dispatch/autotune.hpp"
#include "runtime/ops/op.hpp"
#include "runtime/ops/types.hpp"

#include <cstdlib>
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

using namespace autotune;
using namespace autotune::test;
namespace fs = std::filesystem;

namespace {

ElementType element_type(DType t) {
  return t == DType::f32   ? ElementType::fp32
         : t == DType::f16 ? ElementType::fp16
                           : ElementType::bf16;
}

// One causal_conv1d problem with its host inputs and float64 reference.
struct Conv {
  std::string shape;
  std::string key; // canonical problem key
  int B, C, L, W;
  bool bias, silu;
  DType type;
  HostTensor x, w, b;
  std::vector<double> ref;

  Conv(int B_, int C_, int L_, int W_, DType t, bool bias_, bool silu_, std::mt19937_64& rng)
      : B(B_), C(C_), L(L_), W(W_), bias(bias_), silu(silu_), type(t), x(t, size_t(B) * C * L),
        w(t, size_t(C) * W), b(t, size_t(C)) {
    shape = "B=" + std::to_string(B) + ",C=" + std::to_string(C) + ",L=" + std::to_string(L) +
            ",W=" + std::to_string(W) + ",dtype=" + to_string(t) +
            ",bias=" + std::to_string(int(bias)) + ",silu=" + std::to_string(int(silu));
    key = find_op("causal_conv1d").make_problem(parse_fields(shape, "shape")).key();
    x.randomize(rng, -1, 1);
    w.randomize(rng, -0.5, 0.5);
    b.randomize(rng, -0.5, 0.5);
    ref = causal_conv1d_reference(x, w, bias ? &b : nullptr, B, C, L, W, silu, (long long)C * L, L);
  }

  // Runs it through `rt` on this thread and returns the relative error against the
  // reference (and the selection it ran).
  double run(Runtime& rt, Selection* selection = nullptr) const {
    DeviceTensor xd(x), wd(w), bd(b);
    HostTensor out(type, x.n);
    out.poison();
    DeviceTensor od(out);
    CausalConv1dArgs a{};
    const ElementType e = element_type(type);
    a.x = tensor(reinterpret_cast<const void*>(xd.get()), e, {B, C, L});
    a.weight = tensor(reinterpret_cast<const void*>(wd.get()), e, {C, W});
    if (bias) {
      a.bias = tensor(reinterpret_cast<const void*>(bd.get()), e, {C});
    }
    a.out = tensor(reinterpret_cast<const void*>(od.get()), e, {B, C, L});
    a.silu = silu ? 1 : 0;
    if (selection) {
      *selection = rt.select_causal_conv1d(a);
    }
    rt.causal_conv1d(a);
    AUTOTUNE_CU(cuda::driver().cuStreamSynchronize(nullptr));
    od.download(out);
    return relative_error(out, ref);
  }

  double tolerance() const { return type == DType::f32 ? 1e-4 : 1e-2; }
};

fs::path temp_path(const std::string& what) {
  return fs::temp_directory_path() /
         ("autotune-gpu-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(rand()));
}

void remove_db(const fs::path& db) {
  std::error_code ec;
  fs::remove(db, ec);
  fs::remove(db.string() + "-wal", ec);
  fs::remove(db.string() + "-shm", ec);
}

} // namespace

// The CLI the tune tests run: $AUTOTUNE_CLI when set (a bundle carried to the GPU machine
// lies elsewhere than the build tree), else the build's own.
std::string tuner_cli() {
  const char* env = std::getenv("AUTOTUNE_CLI");
  return env && *env ? env : AUTOTUNE_CLI;
}

TEST_CASE("8 threads resolving 32 new causal_conv1d shapes at once all get correct results") {
  context();
  std::mt19937_64 rng(7);
  const DType types[] = {DType::bf16, DType::f16, DType::f32};
  std::vector<std::unique_ptr<Conv>> convs;
  for (int i = 0; i < 32; ++i) {
    convs.push_back(std::make_unique<Conv>(1 + i % 3, 64 * (1 + i % 4), 100 + 37 * i, 2 + i % 3,
                                           types[i % 3], i % 2 == 0, (i / 2) % 2 == 0, rng));
  }
  RuntimeOptions ro;
  ro.database = temp_path("none").string() + ".db"; // nothing tuned: every shape a miss
  ro.policy = Policy::heuristic;
  Runtime rt(ro);

  // Every thread runs every shape, starting at its own offset: different shapes are
  // resolved together, and each shape is wanted by several threads at once.
  constexpr int k_threads = 8;
  std::mutex mutex;
  std::vector<std::string> failures;
  std::vector<Selection> selections(convs.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      try {
        context();
        for (size_t k = 0; k < convs.size(); ++k) {
          const size_t i = (k + size_t(t) * 4) % convs.size();
          Selection s;
          const double error = convs[i]->run(rt, &s);
          std::lock_guard lock(mutex);
          if (!(error <= convs[i]->tolerance())) {
            failures.push_back(convs[i]->key + ": relative error " + std::to_string(error) +
                               " with " + s.source + " " + s.variant);
          }
          if (!selections[i].variant.empty() && selections[i].variant != s.variant) {
            failures.push_back(convs[i]->key + ": two threads got different variants");
          }
          selections[i] = s;
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        failures.push_back(std::string("thread ") + std::to_string(t) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  for (const std::string& f : failures) {
    FAIL_CHECK(f);
  }
  CHECK(failures.empty());
  CHECK(rt.loaded_variants() == convs.size()); // one entry per problem, however many asked
  for (size_t i = 0; i < convs.size(); ++i) {
    CHECK_MESSAGE(selections[i].source.rfind("heuristic ", 0) == 0, selections[i].source);
    CHECK(selections[i].problem == convs[i]->key);
  }
}

TEST_CASE("policy tune tunes a new shape with the build's CLI, stores it and runs it") {
  context();
  std::mt19937_64 rng(11);
  Conv conv(2, 128, 1000, 4, DType::bf16, true, true, rng);
  const fs::path db = temp_path("tune").string() + ".db";
  RuntimeOptions ro;
  ro.database = db.string(); // does not exist yet: the first tune creates it
  ro.policy = Policy::tune;
  ro.tuner_path = tuner_cli();
  std::vector<TuneRequest> requests;
  ro.tuner = [&](const TuneRequest& r) {
    requests.push_back(r);
    run_tuner_cli(r, tuner_cli());
  };
  {
    Runtime rt(ro);
    Selection s;
    const double error = conv.run(rt, &s);
    CHECK(error <= conv.tolerance());
    CHECK(s.source == "tuned (policy tune)");
    CHECK(s.problem == conv.key);
    REQUIRE(requests.size() == 1);
    CHECK(requests[0].op == "causal_conv1d");
    CHECK(requests[0].problem == conv.key);
    CHECK(requests[0].database == fs::absolute(db).lexically_normal().string());
    CHECK(requests[0].budget_s == 2.0);
    CHECK(requests[0].device == 0);

    conv.run(rt); // warm: no second tune
    CHECK(requests.size() == 1);
  }
  SUBCASE("the winner is stored: a runtime that requires tuned shapes runs it") {
    RuntimeOptions strict;
    strict.database = db.string();
    strict.policy = Policy::error;
    Runtime rt(strict);
    Selection s;
    CHECK(conv.run(rt, &s) <= conv.tolerance());
    CHECK(s.source == "tuned");
  }
  SUBCASE("the default tuner (the CLI at tuner_path) tunes another shape") {
    Conv other(1, 64, 333, 3, DType::f16, false, true, rng);
    RuntimeOptions plain = ro;
    plain.tuner = nullptr;
    Runtime rt(plain);
    Selection s;
    CHECK(other.run(rt, &s) <= other.tolerance());
    CHECK(s.source == "tuned (policy tune)");
  }
  remove_db(db);
}

TEST_CASE("a failed tune is an error for every thread that wanted the shape, and is retried") {
  context();
  std::mt19937_64 rng(13);
  Conv conv(1, 64, 500, 4, DType::bf16, true, false, rng);
  const fs::path dir = temp_path("fake-cli");
  fs::create_directories(dir);
  const fs::path db = dir / "tuning.db";

  SUBCASE("the CLI exits 1: the error names it; nothing falls back") {
    const fs::path cli = dir / "autotune";
    std::ofstream(cli) << "#!/bin/sh\necho 'error: nothing passed the check' >&2\nexit 1\n";
    fs::permissions(cli, fs::perms::owner_all);
    RuntimeOptions ro;
    ro.database = db.string();
    ro.policy = Policy::tune;
    ro.tuner_path = cli.string();
    Runtime rt(ro);
    CHECK_THROWS_WITH_AS(conv.run(rt), doctest::Contains("exited with status 1"), Error);
    CHECK_THROWS_WITH_AS(conv.run(rt), doctest::Contains("error: nothing passed the check"), Error);
    CHECK(rt.loaded_variants() == 0);
  }
  SUBCASE("four threads at once: one tune, its error for all; the next call tunes again") {
    std::atomic<int> tunes{0};
    RuntimeOptions ro;
    ro.database = db.string();
    ro.policy = Policy::tune;
    ro.tuner = [&](const TuneRequest&) {
      ++tunes;
      std::this_thread::sleep_for(std::chrono::milliseconds(1000)); // the others arrive
      throw Error(ErrorKind::not_tuned, "fake tuner: no GPU time today");
    };
    Runtime rt(ro);
    std::atomic<int> errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        context();
        try {
          conv.run(rt);
        } catch (const Error& e) {
          errors += e.kind() == ErrorKind::not_tuned &&
                    std::string(e.what()).find("no GPU time today") != std::string::npos;
        }
      });
    }
    for (auto& t : threads) {
      t.join();
    }
    CHECK(errors == 4);
    CHECK(tunes == 1);
    CHECK_THROWS_AS(conv.run(rt), Error);
    CHECK(tunes == 2);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}
