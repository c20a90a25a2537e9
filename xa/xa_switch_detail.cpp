// The open-string parser and the xid mapping of escrow_xa_switch (xa_switch_internal.h).
#include <charconv>
#include <cstring>
#include <set>

#include "xa_switch_internal.h"

namespace escrow::xa_switch_detail {
namespace {

bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

template <typename T>
bool whole_number(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

bool fail(std::string* error, std::string message) {
  if (error) *error = std::move(message);
  return false;
}

bool apply(open_options& o, std::string_view key, std::string_view value, std::string* error) {
  auto quoted = [](std::string_view v) { return "'" + std::string(v.substr(0, 60)) + "'"; };
  if (key == "host") {
    if (value.empty()) return fail(error, "empty host in open string: write host=NAME-OR-ADDRESS");
    o.host = value;
  } else if (key == "port") {
    unsigned port = 0;
    if (!whole_number(value, port) || port == 0 || port > 65535)
      return fail(error, "invalid port " + quoted(value) + " in open string: use a number from 1 to 65535");
    o.port = static_cast<std::uint16_t>(port);
  } else if (key == "login") {
    o.login = value;
  } else if (key == "passcode") {
    o.passcode = value;
  } else if (key == "timeout") {
    long long ms = 0;
    if (!whole_number(value, ms) || ms < 1 || ms > 3600000)
      return fail(error, "invalid timeout " + quoted(value) +
                             " in open string: use milliseconds from 1 to 3600000");
    o.timeout = std::chrono::milliseconds(ms);
  } else {
    return fail(error, "unknown key " + quoted(key) +
                           " in open string: the keys are host, port, login, passcode and timeout");
  }
  return true;
}

}  // namespace

std::optional<open_options> parse_open_string(std::string_view text, std::string* error) {
  if (text.size() >= MAXINFOSIZE) {
    fail(error, "open string of " + std::to_string(text.size()) + " characters: at most " +
                    std::to_string(MAXINFOSIZE - 1) + " are allowed");
    return std::nullopt;
  }
  open_options o;
  std::set<std::string_view> seen;
  std::size_t i = 0;
  while (i < text.size()) {
    if (blank(text[i])) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && !blank(text[end])) ++end;
    std::string_view pair = text.substr(i, end - i);
    i = end;
    auto eq = pair.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      fail(error, "malformed item '" + std::string(pair.substr(0, 60)) +
                      "' in open string: write key=value pairs separated by spaces, e.g. "
                      "\"host=127.0.0.1 port=61613 timeout=10000\"");
      return std::nullopt;
    }
    std::string_view key = pair.substr(0, eq);
    if (!seen.insert(key).second) {
      fail(error, "key '" + std::string(key.substr(0, 60)) + "' given twice in open string: give each key once");
      return std::nullopt;
    }
    if (!apply(o, key, pair.substr(eq + 1), error)) return std::nullopt;
  }
  return o;
}

std::optional<xid> to_broker_xid(const XID& x, int rmid, std::string* error) {
  if (x.formatID == -1) {
    fail(error, "the null XID (formatID -1) names no branch");
    return std::nullopt;
  }
  if (x.gtrid_length < 1 || x.gtrid_length > MAXGTRIDSIZE || x.bqual_length < 0 ||
      x.bqual_length > MAXBQUALSIZE - static_cast<long>(kTrailerSize)) {
    fail(error, "XID with gtrid_length " + std::to_string(x.gtrid_length) + " and bqual_length " +
                    std::to_string(x.bqual_length) + ": the switch takes gtrids of 1 to 64 bytes and bquals of 0 to " +
                    std::to_string(MAXBQUALSIZE - kTrailerSize) + " bytes (it appends a " +
                    std::to_string(kTrailerSize) + "-byte rmid trailer)");
    return std::nullopt;
  }
  std::string gtrid(x.data, static_cast<std::size_t>(x.gtrid_length));
  std::string bqual(x.data + x.gtrid_length, static_cast<std::size_t>(x.bqual_length));
  auto id = static_cast<std::uint32_t>(rmid);
  bqual.push_back(static_cast<char>(kTrailerMarker));
  for (int shift = 24; shift >= 0; shift -= 8) bqual.push_back(static_cast<char>((id >> shift) & 0xFF));
  return xid(x.formatID, std::move(gtrid), std::move(bqual));
}

std::optional<XID> from_broker_xid(const xid& x, int rmid) {
  const std::string& b = x.bqual();
  if (b.size() < kTrailerSize) return std::nullopt;
  std::size_t at = b.size() - kTrailerSize;
  if (static_cast<unsigned char>(b[at]) != kTrailerMarker) return std::nullopt;
  std::uint32_t id = 0;
  for (std::size_t k = 1; k < kTrailerSize; ++k) id = (id << 8) | static_cast<unsigned char>(b[at + k]);
  if (id != static_cast<std::uint32_t>(rmid)) return std::nullopt;
  XID out{};
  out.formatID = static_cast<long>(x.format_id());
  out.gtrid_length = static_cast<long>(x.gtrid().size());
  out.bqual_length = static_cast<long>(at);
  std::memcpy(out.data, x.gtrid().data(), x.gtrid().size());
  std::memcpy(out.data + x.gtrid().size(), b.data(), at);
  return out;
}

}  // namespace escrow::xa_switch_detail
