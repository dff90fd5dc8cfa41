#include "error.hpp"

namespace autotune {

int exit_code_for(ErrorKind kind) {
  switch (kind) {
  case ErrorKind::usage:
  case ErrorKind::config:
  case ErrorKind::database:
  case ErrorKind::io:
    return 2;
  case ErrorKind::no_device:
    return 3;
  case ErrorKind::cuda:
  case ErrorKind::compile:
  case ErrorKind::check:
  case ErrorKind::not_tuned:
  case ErrorKind::internal:
    return 1;
  }
  return 1;
}

const char* to_string(ErrorKind kind) {
  switch (kind) {
  case ErrorKind::usage:
    return "usage error";
  case ErrorKind::config:
    return "configuration error";
  case ErrorKind::database:
    return "database error";
  case ErrorKind::io:
    return "I/O error";
  case ErrorKind::no_device:
    return "no GPU";
  case ErrorKind::cuda:
    return "CUDA error";
  case ErrorKind::compile:
    return "compile error";
  case ErrorKind::check:
    return "check failed";
  case ErrorKind::not_tuned:
    return "not tuned";
  case ErrorKind::internal:
    return "internal error";
  }
  return "error";
}

} // namespace autotune
