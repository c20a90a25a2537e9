// Internal to broker/core: what a last-value queue keeps in memory (address setting last-value-key;
// docs/configuration.md, "Last-value queues"; broker/core/last_values.cpp applies it). Per queue,
// a member of each queue:
//  - newest: for each key value, its newest entry once nothing of that value is being written;
//  - chains: for a value with writes under way, the entries those writes remove and the writes
//    themselves. Each write removes every member of its value's chain in its own batch (removing
//    what is already gone is a no-op), so a refused write in the middle never leaves an older
//    message behind a newer one: a member is gone once any write removing it is stored, and is
//    offered again only when every write removing it was refused (at most one can be: each
//    later write removes every earlier member).
// Rebuilt from the queue's messages when first needed after open or after a reload changed the
// key; bounded by the queue's depth (stale values are pruned) and the writes under way.
// Core strand only.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "queue_entry.h"

namespace escrow::broker {

struct last_value_member {
  enum class state {
    taken,    // was ready; held in its queue while writes remove it
    writing,  // a write under way (its own batch not done)
    arrived,  // its write is done; held back while later writes that remove it are under way
  };
  state now = state::writing;
  // Which member it is: an entry key comes back when a refused commit is tried again, and a write
  // planned against the first attempt must not remove the second.
  std::uint64_t serial = 0;
  int removers = 0;      // writes under way that remove it
  // While a write removes it, it no longer counts in its queue's limits (queue_room::dropping),
  // as DROP-HEAD's oldest message does: the write takes its place. Its size, counted; -1: not.
  std::int64_t dropping_bytes = -1;
  bool removed = false;  // one of them is stored: it is gone
  queue_entry entry;     // (writing: the key, stored flag and message)
};

struct last_value_index {
  // The header the index was built for; "" while it is not built (or the queue is no longer one).
  std::string key;
  // Each value's newest entry; it may be gone by now (acknowledged, expired): whoever looks it up
  // checks that it is still there.
  std::unordered_map<std::string, storage::entry_key> newest;
  // Values with writes under way, and their members by entry key.
  std::unordered_map<std::string, std::map<storage::entry_key, last_value_member>> chains;
  // The value each member of a chain belongs to.
  std::map<storage::entry_key, std::string> value_of;
  std::uint64_t next_serial = 1;

  bool active() const { return !key.empty(); }
};

}  // namespace escrow::broker
