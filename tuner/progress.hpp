// Progress on stderr: a redrawn bar on a terminal, a few plain lines otherwise
// (so CI logs stay short). Silent with --quiet.
#pragma once

#include <cstddef>
#include <string>

namespace autotune {

class Progress {
public:
  explicit Progress(bool enabled);
  // `done` of `total` steps of `stage` for `what` (e.g. a problem key).
  void update(const std::string& stage, const std::string& what, size_t done, size_t total);
  void message(const std::string& text);
  void finish();

private:
  bool m_enabled;
  bool m_tty;
  bool m_open = false;
  int m_last_decile = -1;
  std::string m_last_stage;
};

} // namespace autotune
