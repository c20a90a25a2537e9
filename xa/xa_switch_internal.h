// The pure parts of escrow_xa_switch (xa/xa_switch.cpp), apart so that they can be tested without
// a broker: the open-string parser and the mapping between a TM's XID and the broker's xid for an
// rmid (see "Branch identity" in include/escrow/xa_switch.h). No I/O, no state.
//
// Thread safety: pure functions; call them from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "escrow/xa.h"
#include "escrow/xid.h"

namespace escrow::xa_switch_detail {

// What an open string asks for. Defaults are the broker's embedded defaults.
struct open_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 61613;
  std::string login;
  std::string passcode;
  std::chrono::milliseconds timeout{10000};

  friend bool operator==(const open_options&, const open_options&) = default;
};

// Parses "host=H port=P login=L passcode=S timeout=MS" (any order, each key at most once, any
// run of blanks between pairs; empty = every default). On failure: nullopt and *error says what
// is wrong and what to write instead.
std::optional<open_options> parse_open_string(std::string_view text, std::string* error);

// The trailer the switch appends to a bqual: a marker byte and the rmid, 32-bit big-endian.
inline constexpr unsigned char kTrailerMarker = 0xE5;
inline constexpr std::size_t kTrailerSize = 5;

// The broker's xid for the TM's `x` on `rmid`. nullopt (and *error) for a null XID, bad lengths
// or a bqual longer than MAXBQUALSIZE - kTrailerSize.
std::optional<xid> to_broker_xid(const XID& x, int rmid, std::string* error);

// The TM's XID for a broker xid, if that branch was made through the switch by `rmid`.
std::optional<XID> from_broker_xid(const xid& x, int rmid);

}  // namespace escrow::xa_switch_detail
