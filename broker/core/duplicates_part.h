// Internal to broker/core: what duplicate detection (duplicates.cpp; docs/stomp.md, "Duplicate
// detection") keeps in memory. The ids an address remembers are in the store (duplicate_ids and
// duplicate_order, storage/schema.h) and are read there, on the core strand; memory holds only
//  - the ids claimed by batches submitted and not yet completed, by address, with the address's
//    next sequence: an address has an entry only while one of its claims is in flight, so this is
//    bounded by the SENDs and commits in flight (each of which holds its message in memory anyway);
//  - the ids that prepared branches (and prepares being written) claim when they commit: bounded
//    by what prepared branches hold (limits.max-prepared-branches-per-user and
//    max-transaction-bytes), whose messages are in memory anyway.
// A member of broker::impl (`duplicates`), touched only on the core strand.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "escrow/storage/batch.h"

namespace escrow::storage {
class store;
}

namespace escrow::broker {

// (address, id) pairs: the ids one batch claims, or one branch holds.
using duplicate_ids = std::vector<std::pair<std::string, std::string>>;

struct duplicates_part {
  // Where an id stands at an address: free, among the address's last id-cache-size ids stored, claimed
  // by a batch in flight, or held by a prepared branch.
  enum class standing { free, stored, in_flight, held };
  // Where `id` stands at `address`, which remembers `size` ids. `existing`: the sequence of its
  // stored record, remembered or forgotten (older than the last `size`, not erased yet), else 0.
  standing standing_of(const storage::store& s, const std::string& address, const std::string& id,
                       std::uint32_t size, std::uint64_t& existing);
  // Adds to `b` the records of `id` (free, or held by the branch committing) as the address's
  // newest, the erasure of its `existing` record's place and of the ids now past the last `size`
  // (a few at a time); counts it in flight until release().
  void claim(const storage::store& s, const std::string& address, const std::string& id, std::uint32_t size,
             std::uint64_t existing, storage::batch& b);
  void release(const std::string& address, const std::string& id);  // its batch completed
  void hold(const duplicate_ids& ids, bool held_now);                // held_now false: released

  struct address_claims {
    std::uint64_t next_sequence = 0;                           // of the address's next id
    std::unordered_map<std::string, std::uint32_t> in_flight;  // id -> claims in batches in flight
  };
  std::unordered_map<std::string, address_claims> claiming;      // by address, while it has claims in flight
  std::map<std::pair<std::string, std::string>, std::uint32_t> held;  // (address, id) -> branches holding it
  std::uint64_t refused = 0;  // duplicate SENDs dropped, transactions rolled back for one (metrics)

 private:
  std::uint64_t newest(const storage::store& s, const std::string& address);  // its newest sequence, 0: none
  void evict(const storage::store& s, const std::string& address, std::uint64_t through, storage::batch& b);
};

}  // namespace escrow::broker
