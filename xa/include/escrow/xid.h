// The XA vocabulary in C++: the transaction branch identifier (xid) as a value type with its text
// form "formatID:gtrid-hex:bqual-hex" (what XA frames carry and the admin command prints), and the
// names of XA flags and return codes as they travel in `flags` and `xa-result` headers.
// Pure functions; no I/O, no server code.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "escrow/xa.h"

namespace escrow {

class xid {
 public:
  xid() = default;
  // REQUIRES: gtrid 1..64 bytes, bqual 0..64 bytes, format_id != -1 (use parse() for input).
  xid(std::int64_t format_id, std::string gtrid, std::string bqual)
      : format_id_(format_id), gtrid_(std::move(gtrid)), bqual_(std::move(bqual)) {}

  std::int64_t format_id() const { return format_id_; }
  const std::string& gtrid() const { return gtrid_; }  // raw bytes
  const std::string& bqual() const { return bqual_; }  // raw bytes

  // Parses "formatID:gtrid-hex:bqual-hex" (formatID decimal, hex in either case). On failure
  // returns nullopt and says why in *error: the caller answers XAER_INVAL.
  static std::optional<xid> parse(std::string_view text, std::string* error = nullptr);
  // The text form, hex in lower case.
  std::string to_string() const;

  // From and to the C struct. from_c fails (nullopt) for the null XID or bad lengths.
  static std::optional<xid> from_c(const XID& c);
  XID to_c() const;

  // A compact byte key for storage: u32 format id (big-endian, offset), u8 length, gtrid, bqual.
  std::string encode() const;
  static std::optional<xid> decode(std::string_view bytes);

  friend auto operator<=>(const xid&, const xid&) = default;
  friend bool operator==(const xid&, const xid&) = default;

 private:
  std::int64_t format_id_ = 0;
  std::string gtrid_;
  std::string bqual_;
};

// "XA_OK", "XAER_NOTA", ... for a return code; "XA_UNKNOWN(n)" for anything else.
std::string xa_result_name(int code);
// The code for a name; nullopt if unknown.
std::optional<int> xa_result_from_name(std::string_view name);

// Parses "TMJOIN|TMSUCCESS" (empty = TMNOFLAGS). Unknown names: nullopt and *error names it.
std::optional<long> parse_xa_flags(std::string_view text, std::string* error = nullptr);
// "TMJOIN|TMSUCCESS", or "TMNOFLAGS".
std::string xa_flags_name(long flags);

}  // namespace escrow
