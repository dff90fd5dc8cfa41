// InFlight (runtime/dispatch/inflight.hpp): one computation per key however many
// threads ask at once, different keys in parallel, errors shared but never kept.
#include "runtime/dispatch/inflight.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace autotune;
using namespace std::chrono_literals;

TEST_CASE("threads asking for the same key together share one computation") {
  InFlight<std::string, int> inflight;
  std::atomic<int> computed{0};
  std::atomic<int> started{0};
  std::vector<int> results(8, -1);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      ++started;
      results[t] = inflight.run("key", [&] {
        // Long enough for every thread to arrive while this one computes.
        while (started < int(results.size())) {
          std::this_thread::sleep_for(1ms);
        }
        std::this_thread::sleep_for(50ms);
        return ++computed * 10;
      });
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  CHECK(computed == 1);
  for (int r : results) {
    CHECK(r == 10);
  }
  CHECK(inflight.joined() == results.size() - 1);

  SUBCASE("a key asked for after its computation ended is computed again") {
    CHECK(inflight.run("key", [&] { return ++computed * 10; }) == 20);
  }
}

TEST_CASE("different keys are computed at the same time") {
  InFlight<int, int> inflight;
  std::mutex mutex;
  std::condition_variable cv;
  int inside = 0;
  int saw_the_other = 0;
  auto body = [&](int key) {
    return inflight.run(key, [&] {
      std::unique_lock lock(mutex);
      ++inside;
      cv.notify_all();
      // Each computation waits (bounded) for the other to start: both see it only
      // if the two run together.
      saw_the_other += cv.wait_for(lock, 5s, [&] { return inside == 2; }) ? 1 : 0;
      return key;
    });
  };
  int a = 0, b = 0;
  std::thread ta([&] { a = body(1); });
  std::thread tb([&] { b = body(2); });
  ta.join();
  tb.join();
  CHECK(a == 1);
  CHECK(b == 2);
  CHECK(saw_the_other == 2);
}

TEST_CASE("a failed computation's error reaches every waiting thread and is not kept") {
  InFlight<std::string, int> inflight;
  std::atomic<int> attempts{0};
  std::atomic<int> started{0};
  constexpr int k_threads = 6;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&] {
      ++started;
      try {
        inflight.run("bad", [&]() -> int {
          ++attempts;
          while (started < k_threads) {
            std::this_thread::sleep_for(1ms);
          }
          std::this_thread::sleep_for(50ms);
          throw std::runtime_error("NVRTC could not compile the variant");
        });
      } catch (const std::runtime_error& e) {
        if (std::string(e.what()) == "NVRTC could not compile the variant") {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  CHECK(attempts == 1);
  CHECK(failures == k_threads);
  // The next request tries again (a failure is not cached) and may succeed.
  CHECK(inflight.run("bad", [&] { return ++attempts; }) == 2);
}
