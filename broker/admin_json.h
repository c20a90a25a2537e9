// A small streaming JSON writer for the answers to ADMIN frames (the `escrow` command): objects,
// arrays, strings (escaped; bytes that are not UTF-8 are replaced by U+FFFD), integers, booleans.
// Pure; no I/O.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace escrow::broker {

class json_writer {
 public:
  json_writer& begin_object();
  json_writer& end_object();
  json_writer& begin_array();
  json_writer& end_array();
  json_writer& key(std::string_view name);
  json_writer& value(std::string_view text);
  json_writer& value(const char* text) { return value(std::string_view(text)); }
  json_writer& value(const std::string& text) { return value(std::string_view(text)); }
  json_writer& value(bool b);
  json_writer& value(double d);
  template <std::integral T>
  json_writer& value(T n) {
    separate();
    out_ += std::to_string(n);
    return *this;
  }
  json_writer& null();
  // key(name).value(v) in one call.
  template <typename T>
  json_writer& field(std::string_view name, const T& v) {
    return key(name).value(v);
  }
  const std::string& str() const { return out_; }

 private:
  void separate();  // a comma before every element but the first of its container
  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

// Whether `text` is well-formed UTF-8.
bool is_utf8(std::string_view text);

}  // namespace escrow::broker
