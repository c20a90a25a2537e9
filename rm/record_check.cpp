// The store checker's view of a prepared branch record (record_check.h).
#include "escrow/rm/record_check.h"

#include "escrow/rm/record.h"
#include "escrow/xid.h"

namespace escrow::rm {

std::string check_branch_record(std::string_view key, std::string_view value, storage::branch_refs& out) {
  std::string owner;
  xid id;
  if (!decode_branch_key(key, owner, id))
    return "the key is not a branch key (an xid: u32 formatID + 2^31, u8 gtrid length 1-64, gtrid, bqual 0-64 "
           "bytes; or five zero bytes, the owner's name, the xid)";
  std::string name = owner.empty() ? id.to_string() : id.to_string() + " of user " + owner;
  branch b;
  if (!decode_record(value, b))
    return "the prepared branch record of xid " + name +
           " does not decode (rm/record.h has its layout); escrowd refuses to start with it";
  out = {};
  out.name = name;
  out.prepared = b.state == branch_state::prepared;
  // What was not stored is dropped at load (resource_manager::load), and so is not checked here:
  // copies for non-durable subscriptions, non-persistent messages.
  for (const auto& s : b.work.sends) {
    bool stored = false;
    for (const auto& t : s.targets) {
      if (!t.stored) continue;
      stored = true;
      out.targets.push_back(t.key);
    }
    if (stored) out.sent_message_ids.push_back(s.msg->id);
  }
  for (const auto& c : b.work.consumed)
    if (c.stored) out.consumed.push_back(c.key);
  return {};
}

}  // namespace escrow::rm
