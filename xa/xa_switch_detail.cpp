// The open-string parser, the branch identity, the xid mapping and the per-call code table of
// escrow_xa_switch (xa_switch_internal.h).
#include <charconv>
#include <cstring>
#include <set>

#include "escrow/common/hex.h"
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
  } else if (key == "resource" || key == "branch") {
    if (value.empty() || value.size() > kMaxNameSize)
      return fail(error, "invalid " + std::string(key) + " " + quoted(value) + " in open string: give a name of 1 to " +
                             std::to_string(kMaxNameSize) + " characters");
    for (char c : value)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F)
        return fail(error, "invalid " + std::string(key) + " in open string: a control character in the name");
    (key == "resource" ? o.resource : o.branch) = value;
  } else if (key == "timeout") {
    long long ms = 0;
    if (!whole_number(value, ms) || ms < 1 || ms > 3600000)
      return fail(error, "invalid timeout " + quoted(value) +
                             " in open string: use milliseconds from 1 to 3600000");
    o.timeout = std::chrono::milliseconds(ms);
  } else {
    return fail(error, "unknown key " + quoted(key) +
                           " in open string: the keys are host, port, login, passcode, timeout, resource and branch");
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

std::string resource_name(const open_options& o) {
  if (!o.resource.empty()) return o.resource;
  return o.login.empty() ? std::string("default") : o.login;
}

std::uint32_t identity_hash(std::string_view resource, std::string_view branch) {
  std::uint32_t h = 2166136261u;
  auto mix = [&h](unsigned char byte) {
    h ^= byte;
    h *= 16777619u;
  };
  for (char c : resource) mix(static_cast<unsigned char>(c));
  mix(0);
  for (char c : branch) mix(static_cast<unsigned char>(c));
  return h;
}

trailer identity_trailer(const open_options& o) {
  return trailer{kIdentityMarker, identity_hash(resource_name(o), o.branch)};
}

trailer legacy_trailer(int rmid) { return trailer{kLegacyMarker, static_cast<std::uint32_t>(rmid)}; }

std::string trailer_hex(const trailer& t) {
  const unsigned char bytes[] = {t.marker, static_cast<unsigned char>(t.value >> 24),
                                 static_cast<unsigned char>(t.value >> 16), static_cast<unsigned char>(t.value >> 8),
                                 static_cast<unsigned char>(t.value)};
  return hex::encode(bytes, sizeof bytes);
}

std::optional<xid> to_broker_xid(const XID& x, const trailer& t, std::string* error) {
  if (x.formatID == -1) {
    fail(error, "the null XID (formatID -1) names no branch");
    return std::nullopt;
  }
  if (x.gtrid_length < 1 || x.gtrid_length > MAXGTRIDSIZE || x.bqual_length < 0 ||
      x.bqual_length > MAXBQUALSIZE - static_cast<long>(kTrailerSize)) {
    fail(error, "XID with gtrid_length " + std::to_string(x.gtrid_length) + " and bqual_length " +
                    std::to_string(x.bqual_length) + ": the switch takes gtrids of 1 to 64 bytes and bquals of 0 to " +
                    std::to_string(MAXBQUALSIZE - kTrailerSize) + " bytes (it appends a " +
                    std::to_string(kTrailerSize) + "-byte branch trailer)");
    return std::nullopt;
  }
  std::string gtrid(x.data, static_cast<std::size_t>(x.gtrid_length));
  std::string bqual(x.data + x.gtrid_length, static_cast<std::size_t>(x.bqual_length));
  bqual.push_back(static_cast<char>(t.marker));
  for (int shift = 24; shift >= 0; shift -= 8) bqual.push_back(static_cast<char>((t.value >> shift) & 0xFF));
  return xid(x.formatID, std::move(gtrid), std::move(bqual));
}

std::optional<XID> from_broker_xid(const xid& x, const trailer& t) {
  const std::string& b = x.bqual();
  if (b.size() < kTrailerSize) return std::nullopt;
  std::size_t at = b.size() - kTrailerSize;
  if (static_cast<unsigned char>(b[at]) != t.marker) return std::nullopt;
  std::uint32_t value = 0;
  for (std::size_t k = 1; k < kTrailerSize; ++k) value = (value << 8) | static_cast<unsigned char>(b[at + k]);
  if (value != t.value) return std::nullopt;
  XID out{};
  out.formatID = static_cast<long>(x.format_id());
  out.gtrid_length = static_cast<long>(x.gtrid().size());
  out.bqual_length = static_cast<long>(at);
  std::memcpy(out.data, x.gtrid().data(), x.gtrid().size());
  std::memcpy(out.data + x.gtrid().size(), b.data(), at);
  return out;
}

const char* entry_name(entry e) {
  switch (e) {
    case entry::open: return "xa_open";
    case entry::close: return "xa_close";
    case entry::start: return "xa_start";
    case entry::end: return "xa_end";
    case entry::rollback: return "xa_rollback";
    case entry::prepare: return "xa_prepare";
    case entry::commit: return "xa_commit";
    case entry::recover: return "xa_recover";
    case entry::forget: return "xa_forget";
    case entry::complete: return "xa_complete";
  }
  return "xa_?";
}

bool may_return(entry e, int code, long flags) {
  const bool rollback = code >= XA_RBBASE && code <= XA_RBEND;
  const bool heuristic = code == XA_HEURHAZ || code == XA_HEURCOM || code == XA_HEURRB || code == XA_HEURMIX;
  // Every branch call but xa_complete: the errors of a resource manager that can fail.
  const bool branch_errors = code == XAER_RMERR || code == XAER_RMFAIL || code == XAER_NOTA || code == XAER_INVAL ||
                             code == XAER_PROTO;
  switch (e) {
    case entry::open:
    case entry::close: return code == XA_OK || code == XAER_RMERR || code == XAER_INVAL || code == XAER_PROTO;
    case entry::start:
      return code == XA_OK || rollback || code == XA_RETRY || branch_errors || code == XAER_DUPID ||
             code == XAER_OUTSIDE;
    case entry::end: return code == XA_OK || code == XA_NOMIGRATE || rollback || branch_errors;
    case entry::prepare: return code == XA_OK || code == XA_RDONLY || rollback || branch_errors;
    case entry::commit:
      return code == XA_OK || heuristic || code == XA_RETRY || (rollback && (flags & TMONEPHASE)) || branch_errors;
    case entry::rollback: return code == XA_OK || heuristic || rollback || branch_errors;
    case entry::recover: return code >= 0 || code == XAER_RMERR || code == XAER_RMFAIL || code == XAER_INVAL || code == XAER_PROTO;
    case entry::forget: return code == XA_OK || branch_errors;
    case entry::complete: return code == XA_OK || code == XA_RETRY || code == XAER_PROTO || code == XAER_INVAL;
  }
  return false;
}

}  // namespace escrow::xa_switch_detail
