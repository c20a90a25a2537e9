// The broker's JSON: Boost.JSON values made valid UTF-8 and written, cursors and pages (json.h).
#include "json.h"

#include <fmt/format.h>

#include <boost/json/serialize.hpp>
#include <cmath>

#include "escrow/broker/security/names.h"

namespace escrow::broker {

namespace {

// `text` with U+FFFD for each byte that is not part of a well-formed UTF-8 sequence.
std::string repaired(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0, n = 0; i < text.size(); i += n) {
    n = decode_utf8(text.substr(i)).second;
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      n = 1;
    } else {
      out.append(text.substr(i, n));
    }
  }
  return out;
}

// Every string and key of `v` made valid UTF-8, in place.
void repair(json::value& v) {
  if (json::string* s = v.if_string()) {
    if (!is_utf8(*s)) *s = std::string_view(repaired(*s));
  } else if (json::array* a = v.if_array()) {
    for (json::value& e : *a) repair(e);
  } else if (json::object* o = v.if_object()) {
    bool keys_ok = true;
    for (json::key_value_pair& kv : *o) {
      repair(kv.value());
      keys_ok = keys_ok && is_utf8(kv.key());
    }
    if (keys_ok) return;
    json::object fixed;
    for (json::key_value_pair& kv : *o) fixed.emplace(repaired(kv.key()), std::move(kv.value()));
    *o = std::move(fixed);
  }
}

}  // namespace

namespace {

// As json::serialize, except that a fractional number is written as people write it (12.345,
// the shortest form that reads back the same), not in Boost's exponent notation (1.2345E1).
void write_text(const json::value& v, std::string& out) {
  switch (v.kind()) {
    case json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.get_object()) {
        if (!first) out += ',';
        first = false;
        out += json::serialize(json::string_view(key));
        out += ':';
        write_text(item, out);
      }
      out += '}';
      return;
    }
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v.get_array()) {
        if (!first) out += ',';
        first = false;
        write_text(item, out);
      }
      out += ']';
      return;
    }
    case json::kind::double_:
      if (std::isfinite(v.get_double())) {
        std::string number = fmt::format("{}", v.get_double());
        // Still a fraction to a reader that tells 5 from 5.0.
        if (number.find_first_of(".e") == std::string::npos) number += ".0";
        out += number;
        return;
      }
      [[fallthrough]];
    default: out += json::serialize(v); return;
  }
}

std::string text_of(const json::value& v) {
  std::string out;
  write_text(v, out);
  return out;
}

}  // namespace

std::string to_json(json::value v) {
  repair(v);
  return text_of(v);
}

double json_seconds(double seconds) { return std::round(seconds * 1000) / 1000; }

std::string cursor_escape(std::string_view raw, std::string_view also) {
  std::string out;
  out.reserve(raw.size());
  for (char ch : raw) {
    auto c = static_cast<unsigned char>(ch);
    if (c < 0x21 || c > 0x7e || c == '%' || c == '"' || c == '\\' || also.find(ch) != std::string_view::npos)
      out += fmt::format("%{:02X}", c);
    else
      out += ch;
  }
  return out;
}

std::optional<std::string> cursor_unescape(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    int hi = hex(text[i + 1]);
    int lo = hex(text[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

json_page::json_page(std::vector<std::string> arrays, std::size_t limit, std::size_t max_bytes)
    : names_(std::move(arrays)), arrays_(names_.size()), limit_(limit), max_bytes_(max_bytes) {
  // {"A":[],"B":[],"more":true,"next":""}: the array names are ours, plain ASCII.
  fixed_ = 2 + std::string_view(",\"more\":true,\"next\":\"\"").size();
  for (std::size_t i = 0; i < names_.size(); ++i) fixed_ += (i ? 1 : 0) + names_[i].size() + 5;
}

bool json_page::add(std::size_t which, json::value entry, std::string cursor) {
  if (full_ || count_ >= limit_) {
    full_ = true;
    return false;
  }
  repair(entry);
  std::size_t grown = entries_bytes_ + (arrays_[which].empty() ? 0 : 1) + text_of(entry).size();
  if (count_ > 0 && fixed_ + grown + cursor.size() > max_bytes_) {
    full_ = true;
    return false;
  }
  arrays_[which].push_back(std::move(entry));
  entries_bytes_ = grown;
  ++count_;
  last_cursor_ = std::move(cursor);
  if (count_ >= limit_) full_ = true;
  return true;
}

std::string json_page::finish(bool more) const {
  json::object out;
  for (std::size_t i = 0; i < names_.size(); ++i) out[names_[i]] = arrays_[i];
  out["more"] = more && count_ > 0;
  if (more && count_ > 0) out["next"] = last_cursor_;
  return text_of(out);
}

}  // namespace escrow::broker
