// Human-readable output of the `escrow` command: aligned tables, ages and sizes, and reading the
// fields of the broker's JSON answers without caring whether a field is missing.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace escrow::cli {

// A table printed with its columns aligned: numbers right, text left; two spaces between.
class table {
 public:
  explicit table(std::vector<std::string> headings) : headings_(std::move(headings)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> headings_;
  std::vector<std::vector<std::string>> rows_;
};

// A field as text ("" when missing); numbers in decimal, booleans as yes/no.
std::string text(const boost::json::value& v, std::string_view key);
std::uint64_t number(const boost::json::value& v, std::string_view key);
const boost::json::array& array(const boost::json::value& v, std::string_view key);
// "850ms", "12s", "3m04s", "2h05m", "3d04h"; "-" for a missing value.
std::string age(const boost::json::value& v, std::string_view key_ms);
std::string age_ms(std::uint64_t ms);
// "512 B", "1.5 MiB", ...
std::string bytes(std::uint64_t n);
// "1 message", "2 messages".
std::string count_of(std::uint64_t n, std::string_view noun);
// Cuts `s` to `width` characters (an ellipsis marks the cut) and shows control characters as spaces.
std::string shorten(std::string s, std::size_t width);

}  // namespace escrow::cli
