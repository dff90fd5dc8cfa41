// One computation per key at a time: the runtime resolves a problem (and compiles a
// variant) once however many threads meet it together, while different keys run
// in parallel.
#pragma once

#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <utility>

namespace autotune {

template <typename Key, typename Value> class InFlight {
public:
  // The value of `compute()` for `key`. The first caller of a key computes it with no
  // lock held; callers arriving meanwhile wait for that result and get its value, or
  // its exception rethrown. Nothing is kept once the computation ends: a key asked
  // for again later is computed again (so a failure is never cached here), and
  // `compute` looks in the caller's own cache first to find what a previous round
  // stored there.
  template <typename Compute> Value run(const Key& key, Compute&& compute) {
    std::unique_lock lock(m_mutex);
    if (auto it = m_running.find(key); it != m_running.end()) {
      std::shared_future<Value> pending = it->second;
      ++m_joined;
      lock.unlock();
      return pending.get();
    }
    std::promise<Value> promise;
    m_running.emplace(key, promise.get_future().share());
    lock.unlock();
    try {
      Value value = compute();
      finish(key);
      promise.set_value(value);
      return value;
    } catch (...) {
      finish(key);
      promise.set_exception(std::current_exception());
      throw;
    }
  }

  // How many calls waited for another thread's computation (for tests and logs).
  size_t joined() const {
    std::lock_guard lock(m_mutex);
    return m_joined;
  }

private:
  void finish(const Key& key) {
    std::lock_guard lock(m_mutex);
    m_running.erase(key);
  }

  mutable std::mutex m_mutex;
  std::map<Key, std::shared_future<Value>> m_running;
  size_t m_joined = 0;
};

} // namespace autotune
