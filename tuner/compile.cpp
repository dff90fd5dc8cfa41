#include "compile.hpp"

#include <atomic>
#include <mutex>
#include <thread>

namespace autotune {

int default_jobs() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

void compile_all(std::vector<CompileJob>& jobs, int threads,
                 const std::function<void(CompileJob&, size_t)>& done) {
  std::atomic<size_t> next{0};
  std::mutex mutex;
  size_t finished = 0;
  std::exception_ptr error;
  auto worker = [&] {
    while (true) {
      size_t i = next.fetch_add(1);
      if (i >= jobs.size()) {
        return;
      }
      try {
        jobs[i].output = compile_variant(*jobs[i].variant);
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) {
          done(jobs[i], ++finished);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) {
          error = std::current_exception();
        }
        next = jobs.size(); // stop the other workers early
      }
    }
  };
  int n = std::max(1, std::min<int>(threads, int(jobs.size())));
  std::vector<std::thread> pool;
  for (int i = 0; i < n; ++i) {
    pool.emplace_back(worker);
  }
  for (auto& t : pool) {
    t.join();
  }
  if (error) {
    std::rethrow_exception(error);
  }
}

} // namespace autotune
