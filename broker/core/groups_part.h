// Internal to broker/core: a queue's message groups (JMSXGroupID, Artemis's _AMQ_GROUP_ID;
// docs/stomp.md, "Message groups"; broker/core/groups.cpp applies them). Per queue, a member of
// each queue: which consumer holds each group. A group is held from the first of its messages a
// consumer is handed until that consumer leaves, an operator resets it, or a message with
// JMSXGroupSeq -1 closes it. At most limits.max-groups-per-queue groups are held on their own;
// beyond that, new groups share that many buckets (each bucket held like a group) until the queue
// holds none. Core strand only.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>

namespace escrow::broker {

struct subscription;

struct group_index {
  std::unordered_map<std::string, subscription*> owner;  // by slot: "g"+id, "h"+hash of a long id, "b"+bucket
  bool bucketed = false;  // it reached the limit: new groups go to buckets until `owner` is empty
};

}  // namespace escrow::broker
