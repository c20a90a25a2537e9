// The JSON the broker writes (ADMIN answers for the `escrow` command, /status): values built with
// Boost.JSON and written by to_json, which makes every string valid UTF-8 first (each byte that is
// not part of a well-formed sequence becomes U+FFFD, docs/operations.md). Also the cursors and
// pages of the paged list answers. Pure; no I/O. Included by the admin and status files only.
#pragma once

#include <boost/json/value.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace escrow::broker {

namespace json = boost::json;

// `v` as JSON text, strings and keys that are not UTF-8 repaired.
std::string to_json(json::value v);
// A duration in seconds to the millisecond, as the answers give it (written as 12.345).
double json_seconds(double seconds);

// Paged list answers (docs/operations.md, "Paged answers"). A cursor names the last entry of a
// page; the next page starts after it. Its parts are percent-encoded: every byte outside 0x21-0x7E,
// and % " \ and the bytes of `also`, become %XX, so that a cursor is printable ASCII that needs no
// escape in JSON, and `also` can hold a separator.
std::string cursor_escape(std::string_view raw, std::string_view also = {});
// The bytes back; nullopt when a % is not followed by two hex digits.
std::optional<std::string> cursor_unescape(std::string_view text);

// One page of a list answer: entries appended in the list's order to one of its arrays until the
// page holds `limit` entries or its JSON would grow past `max_bytes` (the first entry is always
// taken, however large). finish() gives {"ARRAY":[...],...,"more":true,"next":"CURSOR"} (or
// "more":false without next), CURSOR being the cursor of the last entry taken.
class json_page {
 public:
  json_page(std::vector<std::string> arrays, std::size_t limit, std::size_t max_bytes);
  // Whether the page takes no more entries (`limit` reached, or an entry did not fit).
  bool full() const { return full_; }
  // Appends `entry` to array `which` of the page, or returns false (and the page is full) when it
  // has `limit` entries already or the entry would take its JSON past `max_bytes`.
  bool add(std::size_t which, json::value entry, std::string cursor);
  std::size_t size() const { return count_; }
  // The answer; `more`: an entry was left out (the caller saw one more after the last taken).
  std::string finish(bool more) const;

 private:
  std::vector<std::string> names_;
  std::vector<json::array> arrays_;
  std::size_t limit_;
  std::size_t max_bytes_;
  std::size_t fixed_ = 0;  // the bytes of finish(true) with no entries and an empty cursor
  std::size_t entries_bytes_ = 0;
  std::size_t count_ = 0;
  bool full_ = false;
  std::string last_cursor_;
};

}  // namespace escrow::broker
