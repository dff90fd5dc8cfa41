#include "templates.hpp"

#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

namespace autotune {

// Defined in the file CMake generates from templates/ (cmake/embed_templates.cmake).
extern const std::pair<const char*, const char*> k_embedded_templates[];
extern const size_t k_embedded_template_count;

std::vector<std::string> embedded_template_paths() {
  std::vector<std::string> out;
  for (size_t i = 0; i < k_embedded_template_count; ++i) {
    out.emplace_back(k_embedded_templates[i].first);
  }
  return out;
}

namespace {
std::map<std::string, std::string>& registered_templates() {
  static std::map<std::string, std::string> files;
  return files;
}
} // namespace

void register_template(const std::string& path, const std::string& text) {
  registered_templates()[path] = text;
}

std::string template_file(const std::string& path) {
  if (const char* dir = std::getenv("AUTOTUNE_TEMPLATE_DIR"); dir && *dir) {
    // An overlay: files it has replace the embedded ones, the others stay. A directory
    // that is not there (a typo) would silently leave every template embedded.
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      throw Error(ErrorKind::config, std::string("$AUTOTUNE_TEMPLATE_DIR='") + dir +
                                         "' is not a directory (it overlays the embedded "
                                         "templates; unset it to use them)");
    }
    std::ifstream in(std::string(dir) + "/" + path, std::ios::binary);
    if (in) {
      std::ostringstream s;
      s << in.rdbuf();
      return s.str();
    }
  }
  if (auto it = registered_templates().find(path); it != registered_templates().end()) {
    return it->second;
  }
  for (size_t i = 0; i < k_embedded_template_count; ++i) {
    if (path == k_embedded_templates[i].first) {
      return k_embedded_templates[i].second;
    }
  }
  throw Error(ErrorKind::config,
              "template file '" + path + "' is neither embedded nor in $AUTOTUNE_TEMPLATE_DIR");
}

namespace {

void expand(const std::string& path, std::set<std::string>& seen, std::string& out) {
  if (!seen.insert(path).second) {
    return;
  }
  std::string text = template_file(path);
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  out += "# 1 \"" + path + "\"\n";
  while (std::getline(lines, line)) {
    ++number;
    std::string t = trim(line);
    if (starts_with(t, "#include \"")) {
      auto end = t.find('"', 10);
      if (end == std::string::npos) {
        throw Error(ErrorKind::config,
                    path + ":" + std::to_string(number) + ": malformed #include");
      }
      expand(t.substr(10, end - 10), seen, out);
      out += "# " + std::to_string(number + 1) + " \"" + path + "\"\n";
      continue;
    }
    if (t == "#pragma once") {
      out += "\n";
      continue;
    }
    out += line;
    out += '\n';
  }
}

} // namespace

std::string expand_template(const std::string& path) {
  std::set<std::string> seen;
  std::string out;
  expand(path, seen, out);
  return out;
}

} // namespace autotune
