// The project's two error channels (STYLE.md rule 3):
//  - expected failures (a variant that does not compile, a shape a variant cannot
//    run) are values: Result<T> holding either a T or a Failure;
//  - everything else throws autotune::Error, whose kind maps to a CLI exit code.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace autotune {

enum class ErrorKind {
  usage,     // bad command line, bad shape string, unsupported problem: exit 2
  config,    // TOML / search-space errors (with file:line): exit 2
  database,  // SQLite errors, corrupt or foreign database: exit 2
  io,        // files that cannot be read or written: exit 2
  no_device, // no driver, no GPU: exit 3
  cuda,      // driver API failure while running: exit 1
  compile,   // NVRTC failure outside tuning (where it is not a value): exit 1
  check,     // a correctness or regression check failed: exit 1
  not_tuned, // the runtime was told to require a tuned variant and none is stored: exit 1
  internal,  // a bug in autotune: exit 1
};

int exit_code_for(ErrorKind kind);
const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), m_kind(kind) {}
  ErrorKind kind() const { return m_kind; }

private:
  ErrorKind m_kind;
};

// Why an expected operation did not produce a value.
struct Failure {
  std::string message;
  std::string detail; // e.g. the NVRTC log
};

template <typename T> class Result {
public:
  Result(T value) : m_data(std::move(value)) {}
  Result(Failure failure) : m_data(std::move(failure)) {}

  bool ok() const { return m_data.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() {
    if (!ok()) {
      throw Error(ErrorKind::internal, "Result::value() on a failure: " + failure().message);
    }
    return std::get<0>(m_data);
  }
  const T& value() const { return const_cast<Result*>(this)->value(); }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }
  const Failure& failure() const { return std::get<1>(m_data); }

private:
  std::variant<T, Failure> m_data;
};

inline Failure fail(std::string message, std::string detail = {}) {
  return Failure{std::move(message), std::move(detail)};
}

} // namespace autotune

// Propagates a failure out of a function returning Result<U>.
#define AUTOTUNE_TRY(var, expr)                                                                    \
  auto var##_result_ = (expr);                                                                     \
  if (!var##_result_.ok()) {                                                                       \
    return var##_result_.failure();                                                                \
  }                                                                                                \
  auto& var = var##_result_.value()
