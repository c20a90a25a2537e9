// Tables and formatting for the `escrow` command's human output (output.h).
#include "output.h"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>

namespace escrow::cli {

namespace {

bool numeric(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

// Display width: UTF-8 continuation bytes take no column.
std::size_t width_of(const std::string& s) {
  return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

}  // namespace

void table::print(std::ostream& out) const {
  std::vector<std::size_t> widths(headings_.size());
  for (std::size_t i = 0; i < headings_.size(); ++i) widths[i] = width_of(headings_[i]);
  for (const auto& r : rows_)
    for (std::size_t i = 0; i < r.size() && i < widths.size(); ++i) widths[i] = std::max(widths[i], width_of(r[i]));
  auto line = [&](const std::vector<std::string>& cells, bool heading) {
    std::string s;
    for (std::size_t i = 0; i < widths.size(); ++i) {
      std::string cell = i < cells.size() ? cells[i] : "";
      std::string pad(widths[i] - width_of(cell), ' ');
      bool last = i + 1 == widths.size();
      if (!heading && numeric(cell)) s += pad + cell;
      else s += last ? cell : cell + pad;
      if (!last) s += "  ";
    }
    s.erase(s.find_last_not_of(' ') + 1);
    out << s << "\n";
  };
  line(headings_, true);
  for (const auto& r : rows_) line(r, false);
}

std::string text(const boost::json::value& v, std::string_view key) {
  const auto* o = v.if_object();
  if (!o) return {};
  auto it = o->find(key);
  if (it == o->end()) return {};
  const boost::json::value& x = it->value();
  if (x.is_string()) return std::string(x.get_string());
  if (x.is_uint64()) return std::to_string(x.get_uint64());
  if (x.is_int64()) return std::to_string(x.get_int64());
  if (x.is_double()) return fmt::format("{:.3f}", x.get_double());
  if (x.is_bool()) return x.get_bool() ? "yes" : "no";
  return {};
}

std::uint64_t number(const boost::json::value& v, std::string_view key) {
  const auto* o = v.if_object();
  if (!o) return 0;
  auto it = o->find(key);
  if (it == o->end()) return 0;
  if (it->value().is_uint64()) return it->value().get_uint64();
  if (it->value().is_int64()) return static_cast<std::uint64_t>(std::max<std::int64_t>(0, it->value().get_int64()));
  if (it->value().is_double()) return static_cast<std::uint64_t>(it->value().get_double());
  return 0;
}

const boost::json::array& array(const boost::json::value& v, std::string_view key) {
  static const boost::json::array none;
  const auto* o = v.if_object();
  if (!o) return none;
  auto it = o->find(key);
  return it != o->end() && it->value().is_array() ? it->value().get_array() : none;
}

std::string age_ms(std::uint64_t ms) {
  if (ms < 1000) return fmt::format("{}ms", ms);
  std::uint64_t s = ms / 1000;
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::string age(const boost::json::value& v, std::string_view key_ms) {
  const auto* o = v.if_object();
  if (!o) return "-";
  auto it = o->find(key_ms);
  if (it == o->end() || it->value().is_null()) return "-";
  return age_ms(number(v, key_ms));
}

std::string bytes(std::uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = -1;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string count_of(std::uint64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

std::string shorten(std::string s, std::size_t width) {
  for (auto& c : s)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  if (width_of(s) <= width) return s;
  std::string out;
  std::size_t w = 0;
  for (char c : s) {
    if ((c & 0xC0) != 0x80) {
      if (w + 1 == width) break;
      ++w;
    }
    out += c;
  }
  return out + "…";
}

}  // namespace escrow::cli
