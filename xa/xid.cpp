// xid text and byte forms, and the names of XA flags and codes (see xid.h).
#include "escrow/xid.h"

#include <array>
#include <charconv>
#include <cstring>
#include <utility>

#include "escrow/common/hex.h"

namespace escrow {
namespace {

bool fail(std::string* error, std::string message) {
  if (error) *error = std::move(message);
  return false;
}

constexpr std::array<std::pair<int, std::string_view>, 26> kResults{{
    {XA_OK, "XA_OK"},           {XA_RDONLY, "XA_RDONLY"},       {XA_RETRY, "XA_RETRY"},
    {XA_HEURMIX, "XA_HEURMIX"}, {XA_HEURRB, "XA_HEURRB"},       {XA_HEURCOM, "XA_HEURCOM"},
    {XA_HEURHAZ, "XA_HEURHAZ"}, {XA_NOMIGRATE, "XA_NOMIGRATE"}, {XA_RBROLLBACK, "XA_RBROLLBACK"},
    {XA_RBCOMMFAIL, "XA_RBCOMMFAIL"}, {XA_RBDEADLOCK, "XA_RBDEADLOCK"}, {XA_RBINTEGRITY, "XA_RBINTEGRITY"},
    {XA_RBOTHER, "XA_RBOTHER"}, {XA_RBPROTO, "XA_RBPROTO"},     {XA_RBTIMEOUT, "XA_RBTIMEOUT"},
    {XA_RBTRANSIENT, "XA_RBTRANSIENT"}, {XAER_ASYNC, "XAER_ASYNC"}, {XAER_RMERR, "XAER_RMERR"},
    {XAER_NOTA, "XAER_NOTA"},   {XAER_INVAL, "XAER_INVAL"},     {XAER_PROTO, "XAER_PROTO"},
    {XAER_RMFAIL, "XAER_RMFAIL"}, {XAER_DUPID, "XAER_DUPID"},   {XAER_OUTSIDE, "XAER_OUTSIDE"},
    {XA_RBBASE, "XA_RBBASE"}, {XA_RBEND, "XA_RBEND"},
}};

constexpr std::array<std::pair<long, std::string_view>, 12> kFlags{{
    {TMASYNC, "TMASYNC"},   {TMONEPHASE, "TMONEPHASE"},     {TMFAIL, "TMFAIL"},
    {TMNOWAIT, "TMNOWAIT"}, {TMRESUME, "TMRESUME"},         {TMSUCCESS, "TMSUCCESS"},
    {TMSUSPEND, "TMSUSPEND"}, {TMSTARTRSCAN, "TMSTARTRSCAN"}, {TMENDRSCAN, "TMENDRSCAN"},
    {TMMULTIPLE, "TMMULTIPLE"}, {TMJOIN, "TMJOIN"},          {TMMIGRATE, "TMMIGRATE"},
}};

}  // namespace

std::optional<xid> xid::parse(std::string_view text, std::string* error) {
  auto first = text.find(':');
  auto second = first == std::string_view::npos ? first : text.find(':', first + 1);
  if (second == std::string_view::npos || text.find(':', second + 1) != std::string_view::npos) {
    fail(error, "malformed xid '" + std::string(text.substr(0, 200)) + "': use formatID:gtrid-hex:bqual-hex");
    return std::nullopt;
  }
  std::string_view format = text.substr(0, first);
  std::int64_t format_id = 0;
  auto [end, ec] = std::from_chars(format.data(), format.data() + format.size(), format_id);
  if (format.empty() || ec != std::errc() || end != format.data() + format.size() || format_id < INT32_MIN ||
      format_id > INT32_MAX) {
    fail(error, "malformed xid: formatID '" + std::string(format.substr(0, 40)) + "' is not a 32-bit decimal integer");
    return std::nullopt;
  }
  if (format_id == -1) {
    fail(error, "xid with formatID -1 is the null XID and names no branch");
    return std::nullopt;
  }
  std::string gtrid, bqual;
  if (!hex::decode(text.substr(first + 1, second - first - 1), gtrid) || !hex::decode(text.substr(second + 1), bqual)) {
    fail(error, "malformed xid: gtrid and bqual must be hexadecimal with an even number of digits");
    return std::nullopt;
  }
  if (gtrid.empty() || gtrid.size() > MAXGTRIDSIZE) {
    fail(error, "xid gtrid is " + std::to_string(gtrid.size()) + " bytes; it must be 1 to 64");
    return std::nullopt;
  }
  if (bqual.size() > MAXBQUALSIZE) {
    fail(error, "xid bqual is " + std::to_string(bqual.size()) + " bytes; it must be at most 64");
    return std::nullopt;
  }
  return xid(format_id, std::move(gtrid), std::move(bqual));
}

std::string xid::to_string() const {
  std::string out = std::to_string(format_id_);
  out.push_back(':');
  hex::append(out, gtrid_.data(), gtrid_.size());
  out.push_back(':');
  hex::append(out, bqual_.data(), bqual_.size());
  return out;
}

std::optional<xid> xid::from_c(const XID& c) {
  if (c.formatID == -1 || c.gtrid_length < 1 || c.gtrid_length > MAXGTRIDSIZE || c.bqual_length < 0 ||
      c.bqual_length > MAXBQUALSIZE)
    return std::nullopt;
  return xid(c.formatID, std::string(c.data, static_cast<std::size_t>(c.gtrid_length)),
             std::string(c.data + c.gtrid_length, static_cast<std::size_t>(c.bqual_length)));
}

XID xid::to_c() const {
  XID c{};
  c.formatID = static_cast<long>(format_id_);
  c.gtrid_length = static_cast<long>(gtrid_.size());
  c.bqual_length = static_cast<long>(bqual_.size());
  std::memcpy(c.data, gtrid_.data(), gtrid_.size());
  std::memcpy(c.data + gtrid_.size(), bqual_.data(), bqual_.size());
  return c;
}

std::string xid::encode() const {
  std::string out;
  auto biased = static_cast<std::uint32_t>(static_cast<std::int64_t>(format_id_) + 0x80000000LL);
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((biased >> shift) & 0xff));
  out.push_back(static_cast<char>(gtrid_.size()));
  out += gtrid_;
  out += bqual_;
  return out;
}

std::optional<xid> xid::decode(std::string_view bytes) {
  if (bytes.size() < 5) return std::nullopt;
  std::uint32_t biased = 0;
  for (int i = 0; i < 4; ++i) biased = (biased << 8) | static_cast<unsigned char>(bytes[i]);
  std::size_t glen = static_cast<unsigned char>(bytes[4]);
  bytes.remove_prefix(5);
  if (glen < 1 || glen > MAXGTRIDSIZE || bytes.size() < glen || bytes.size() - glen > MAXBQUALSIZE) return std::nullopt;
  std::int64_t format_id = static_cast<std::int64_t>(biased) - 0x80000000LL;
  if (format_id == -1) return std::nullopt;  // the null XID names no branch
  return xid(format_id, std::string(bytes.substr(0, glen)),
             std::string(bytes.substr(glen)));
}

std::string xa_result_name(int code) {
  for (auto& [value, name] : kResults)
    if (value == code) return std::string(name);
  return "XA_UNKNOWN(" + std::to_string(code) + ")";
}

std::optional<int> xa_result_from_name(std::string_view name) {
  for (auto& [value, n] : kResults)
    if (n == name) return value;
  return std::nullopt;
}

std::optional<long> parse_xa_flags(std::string_view text, std::string* error) {
  long flags = TMNOFLAGS;
  if (text.empty() || text == "TMNOFLAGS") return flags;
  std::size_t pos = 0;
  for (;;) {
    std::size_t bar = text.find('|', pos);
    std::string_view name = text.substr(pos, bar == std::string_view::npos ? std::string_view::npos : bar - pos);
    bool known = false;
    for (auto& [value, n] : kFlags) {
      if (n == name) {
        flags |= value;
        known = true;
      }
    }
    if (!known && name != "TMNOFLAGS") {
      fail(error, "unknown XA flag '" + std::string(name.substr(0, 40)) + "'");
      return std::nullopt;
    }
    if (bar == std::string_view::npos) return flags;
    pos = bar + 1;
  }
}

std::string xa_flags_name(long flags) {
  std::string out;
  for (auto& [value, name] : kFlags) {
    if ((flags & value) == value) {
      if (!out.empty()) out.push_back('|');
      out += name;
    }
  }
  return out.empty() ? "TMNOFLAGS" : out;
}

}  // namespace escrow
