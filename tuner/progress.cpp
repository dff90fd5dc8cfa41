#include "progress.hpp"

#include <cstdio>
#include <unistd.h>

namespace autotune {

Progress::Progress(bool enabled) : m_enabled(enabled), m_tty(isatty(fileno(stderr)) != 0) {}

void Progress::update(const std::string& stage, const std::string& what, size_t done,
                      size_t total) {
  if (!m_enabled || total == 0) {
    return;
  }
  constexpr int k_width = 30;
  int filled = int(done * k_width / total);
  if (m_tty) {
    std::string bar(size_t(filled), '#');
    bar.append(size_t(k_width - filled), '.');
    std::fprintf(stderr, "\r\033[K%-8s [%s] %zu/%zu %s", stage.c_str(), bar.c_str(), done, total,
                 what.c_str());
    std::fflush(stderr);
    m_open = true;
    return;
  }
  int decile = int(done * 10 / total);
  if (stage != m_last_stage) {
    m_last_decile = -1;
    m_last_stage = stage;
  }
  if (decile != m_last_decile || done == total) {
    m_last_decile = decile;
    std::fprintf(stderr, "%s %zu/%zu %s\n", stage.c_str(), done, total, what.c_str());
  }
}

void Progress::message(const std::string& text) {
  if (!m_enabled) {
    return;
  }
  finish();
  std::fprintf(stderr, "%s\n", text.c_str());
}

void Progress::finish() {
  if (m_open) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    m_open = false;
  }
}

} // namespace autotune
