// The JSON writer of the admin answers (admin_json.h).
#include "admin_json.h"

#include <fmt/format.h>

namespace escrow::broker {

namespace {

// The length of the UTF-8 sequence starting at text[i], or 0 when it is not a valid one.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  auto c = static_cast<unsigned char>(text[i]);
  std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return 0;
  if (n == 2 && c < 0xC2) return 0;  // overlong
  return n;
}

}  // namespace

bool is_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    std::size_t n = utf8_sequence(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void json_writer::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

json_writer& json_writer::begin_object() {
  separate();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

json_writer& json_writer::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}

json_writer& json_writer::begin_array() {
  separate();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

json_writer& json_writer::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}

json_writer& json_writer::key(std::string_view name) {
  value(name);
  out_ += ':';
  after_key_ = true;
  return *this;
}

json_writer& json_writer::value(std::string_view text) {
  separate();
  out_ += '"';
  for (std::size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    std::size_t n = utf8_sequence(text, i);
    if (n == 0) {
      out_ += "\\ufffd";
      ++i;
      continue;
    }
    if (n > 1) {
      out_.append(text.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '"': out_ += "\\\""; break;
      case '\\': out_ += "\\\\"; break;
      case '\n': out_ += "\\n"; break;
      case '\r': out_ += "\\r"; break;
      case '\t': out_ += "\\t"; break;
      default:
        if (c < 0x20) out_ += fmt::format("\\u{:04x}", c);
        else out_ += static_cast<char>(c);
    }
    ++i;
  }
  out_ += '"';
  return *this;
}

json_writer& json_writer::value(bool b) {
  separate();
  out_ += b ? "true" : "false";
  return *this;
}

json_writer& json_writer::value(double d) {
  separate();
  out_ += fmt::format("{:.3f}", d);
  return *this;
}

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
    : names_(std::move(arrays)), bodies_(names_.size()), counts_(names_.size(), 0), limit_(limit),
      max_bytes_(max_bytes) {
  // {"A":[],"B":[],"more":true,"next":""}
  fixed_ = 2 + std::string_view(",\"more\":true,\"next\":\"\"").size();
  for (std::size_t i = 0; i < names_.size(); ++i) fixed_ += (i ? 1 : 0) + names_[i].size() + 5;
}

bool json_page::add(std::size_t which, const std::string& entry, std::string cursor) {
  if (full_ || count_ >= limit_) {
    full_ = true;
    return false;
  }
  std::size_t grown = entries_bytes_ + (counts_[which] ? 1 : 0) + entry.size();
  if (count_ > 0 && fixed_ + grown + cursor.size() > max_bytes_) {
    full_ = true;
    return false;
  }
  if (counts_[which]) bodies_[which] += ',';
  bodies_[which] += entry;
  entries_bytes_ = grown;
  ++counts_[which];
  ++count_;
  last_cursor_ = std::move(cursor);
  if (count_ >= limit_) full_ = true;
  return true;
}

std::string json_page::finish(bool more) const {
  std::string out = "{";
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (i) out += ',';
    out += '"';
    out += names_[i];
    out += "\":[";
    out += bodies_[i];
    out += ']';
  }
  if (more && count_ > 0) {
    out += ",\"more\":true,\"next\":\"";
    out += last_cursor_;
    out += "\"}";
  } else {
    out += ",\"more\":false}";
  }
  return out;
}

json_writer& json_writer::null() {
  separate();
  out_ += "null";
  return *this;
}

}  // namespace escrow::broker
