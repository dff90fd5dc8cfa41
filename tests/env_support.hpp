// Environment variables set for one test scope, for the unit tests that read them.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace autotune::testing {

// Sets (or unsets, with nullptr) an environment variable for one scope; the destructor
// restores what was there, also when the test throws.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) {
      m_saved = old;
    }
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (m_saved) {
      setenv(m_name, m_saved->c_str(), 1);
    } else {
      unsetenv(m_name);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
  const char* m_name;
  std::optional<std::string> m_saved;
};

} // namespace autotune::testing
