// The pure parts of escrow_xa_switch (xa/xa_switch.cpp), apart so that they can be tested without
// a broker: the open-string parser, the branch identity and the mapping between a TM's XID and
// the broker's xid (see "Branch identity" in docs/xa.md), and the codes each entry point may
// return. No I/O, no state.
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
  std::string resource;  // resource=NAME; empty: the default, default_resource()
  std::string branch;    // branch=NAME; empty: none

  friend bool operator==(const open_options&, const open_options&) = default;
};

// Longest resource= and branch= values, in bytes.
inline constexpr std::size_t kMaxNameSize = 64;

// Parses "host=H port=P login=L passcode=S timeout=MS resource=NAME branch=NAME" (any order, each
// key at most once, any run of blanks between pairs; empty = every default). On failure: nullopt
// and *error says what is wrong and what to write instead.
std::optional<open_options> parse_open_string(std::string_view text, std::string* error);

// The resource name of `o`: its resource= value, else the login ("default" without one). Never
// the rmid, nor the host or port: those change while the broker stays the same (another port, a
// name for an address, a failover address), and they tell no branches apart, since every broker
// keeps its own. The login is in the default so that an admin's rmid, which recovers every
// user's branches, does not take other logins' branches for its own.
std::string resource_name(const open_options& o);

// The branch trailer the switch appends to a TM's bqual, so that the broker's xid says which
// resource (and branch qualifier) made the branch: a marker byte and a 32-bit big-endian value.
//   kIdentityMarker (0xE6): value = identity_hash(resource, branch), the current trailer;
//   kLegacyMarker   (0xE5): value = the rmid, the trailer of switches before issue 16 (read by
//                           xa_recover and tried by xa_commit/xa_rollback/xa_forget after an
//                           XAER_NOTA, so that branches prepared before an upgrade are finished).
inline constexpr unsigned char kIdentityMarker = 0xE6;
inline constexpr unsigned char kLegacyMarker = 0xE5;
inline constexpr std::size_t kTrailerSize = 5;

struct trailer {
  unsigned char marker = kIdentityMarker;
  std::uint32_t value = 0;

  friend bool operator==(const trailer&, const trailer&) = default;
};

// FNV-1a, 32 bits, over the bytes of `resource`, one 0x00 byte, then the bytes of `branch`
// (docs/xa.md shows how to compute it by hand).
std::uint32_t identity_hash(std::string_view resource, std::string_view branch);

// The trailer of the branches an rmid opened with `o` makes, and the one of older switches.
trailer identity_trailer(const open_options& o);
trailer legacy_trailer(int rmid);

// "e6" + 8 hex digits: the trailer as the broker's listings show it at the end of the bqual.
std::string trailer_hex(const trailer& t);

// The broker's xid for the TM's `x` with trailer `t`. nullopt (and *error) for a null XID, bad
// lengths or a bqual longer than MAXBQUALSIZE - kTrailerSize.
std::optional<xid> to_broker_xid(const XID& x, const trailer& t, std::string* error);

// The TM's XID for a broker xid whose bqual ends in trailer `t`; nullopt for any other.
std::optional<XID> from_broker_xid(const xid& x, const trailer& t);

// The switch's entry points, for the table of what each may return.
enum class entry { open, close, start, end, rollback, prepare, commit, recover, forget, complete };
const char* entry_name(entry e);

// Whether entry point `e`, called with `flags`, may return `code` (XA.md, "What each call may
// return", narrowed where the switch is stricter than the specification: XAER_ASYNC never, as the
// switch never runs a call asynchronously; XA_RB* from xa_commit only with TMONEPHASE; xa_recover
// returns a count >= 0 for XA_OK). xa_complete, which XA.md does not list: the XA specification's
// XA_OK, XA_RETRY, XAER_PROTO, XAER_INVAL.
bool may_return(entry e, int code, long flags);

}  // namespace escrow::xa_switch_detail
