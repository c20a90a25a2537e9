// The durable form of a prepared or heuristically completed branch: one record in the `branches`
// table, keyed by its owner and xid (branch_key), holding the branch's whole work. Pure
// encode/decode.
//
// Key: xid::encode() for a branch without owner (anonymous broker, or stored before branches had
// owners); five zero bytes | string owner | xid::encode() otherwise. An xid's encoding has its
// gtrid length (1 to 64) in its fifth byte, never 0, so the two forms cannot be confused.
//
// Layout: u8 version (1) | u8 state (1 prepared, 2 heuristically committed, 3 heuristically rolled
// back, 4 heuristically mixed) | u64 created (epoch ms) | varint sends | per send: u64 message id,
// string message_record, varint targets, per target: string entry key, u8 stored | varint consumed
// | per consumed entry: string entry key, u32 delivery count, u8 flags (bit 0 stored, bit 1 negative)
#pragma once

#include <string>
#include <string_view>

#include "escrow/rm/branch.h"

namespace escrow::rm {

std::string branch_key(const std::string& owner, const xid& id);
// The owner and xid of a key; false if it is neither form.
bool decode_branch_key(std::string_view key, std::string& owner, xid& id);

std::string encode_record(const branch& b);
// Fills state, created_ms and work of `out` (not its id). False if the bytes are malformed.
bool decode_record(std::string_view bytes, branch& out);

}  // namespace escrow::rm
