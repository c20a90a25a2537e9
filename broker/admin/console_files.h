// The web console's files (the repository's console/ folder), embedded into escrowd when it is
// built (scripts/embed_files.py writes console_files.cpp), so that the console needs no path to
// find and always matches the broker it comes with. Served by console_api.cpp at /console/NAME.
#pragma once

#include <string_view>
#include <vector>

namespace escrow::broker {

struct embedded_file {
  std::string_view name;          // "index.html"
  std::string_view content_type;  // "text/html; charset=utf-8"
  std::string_view bytes;
};

// Every file of console/ (console/meson.build lists them).
const std::vector<embedded_file>& console_files();

}  // namespace escrow::broker
