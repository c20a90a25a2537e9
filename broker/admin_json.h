// A small streaming JSON writer for the answers to ADMIN frames (the `escrow` command): objects,
// arrays, strings (escaped; bytes that are not UTF-8 are replaced by U+FFFD), integers, booleans.
// Pure; no I/O.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
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

// Paged list answers (docs/operations.md, "Paged answers"). A cursor names the last entry of a
// page; the next page starts after it. Its parts are percent-encoded: every byte outside 0x21-0x7E,
// and % " \ and the bytes of `also`, become %XX, so that a cursor is printable ASCII that needs no
// escape in JSON, and `also` can hold a separator.
std::string cursor_escape(std::string_view raw, std::string_view also = {});
// The bytes back; nullopt when a % is not followed by two hex digits.
std::optional<std::string> cursor_unescape(std::string_view text);

// One page of a list answer: entries (JSON values) appended in the list's order to one of its
// arrays until the page holds `limit` entries or its JSON would grow past `max_bytes` (the first
// entry is always taken, however large). finish() writes
// {"ARRAY":[...],...,"more":true,"next":"CURSOR"} (or "more":false without next), CURSOR being
// the cursor of the last entry taken.
class json_page {
 public:
  json_page(std::vector<std::string> arrays, std::size_t limit, std::size_t max_bytes);
  // Whether the page takes no more entries (`limit` reached, or an entry did not fit).
  bool full() const { return full_; }
  // Appends `entry` to array `which` of the page, or returns false (and the page is full) when it
  // has `limit` entries already or the entry would take its JSON past `max_bytes`.
  bool add(std::size_t which, const std::string& entry, std::string cursor);
  std::size_t size() const { return count_; }
  // The answer; `more`: an entry was left out (the caller saw one more after the last taken).
  std::string finish(bool more) const;

 private:
  std::vector<std::string> names_;
  std::vector<std::string> bodies_;  // the entries of each array, joined by commas
  std::vector<std::size_t> counts_;
  std::size_t limit_;
  std::size_t max_bytes_;
  std::size_t fixed_ = 0;  // the bytes of finish(true) with no entries and an empty cursor
  std::size_t entries_bytes_ = 0;
  std::size_t count_ = 0;
  bool full_ = false;
  std::string last_cursor_;
};

}  // namespace escrow::broker
