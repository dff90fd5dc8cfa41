// Kernel template sources. The files under templates/ are embedded into the
// binaries at build time; AUTOTUNE_TEMPLATE_DIR points at a directory that
// overrides them (a file there wins over the embedded one of the same path).
#pragma once

#include <string>
#include <vector>

namespace autotune {

// A template file by its path relative to templates/, e.g. "causal_conv1d/kernel.cuh".
// Throws Error(config) naming the path when it exists nowhere.
std::string template_file(const std::string& path);

// The file with its quoted #include "..." lines replaced by the files' text (each
// file once), which is what NVRTC compiles and what the template hash covers.
std::string expand_template(const std::string& path);

std::vector<std::string> embedded_template_paths();

// Adds a template file at run time (tests' fault-injection templates, plugins);
// it is found like an embedded one.
void register_template(const std::string& path, const std::string& text);

} // namespace autotune
