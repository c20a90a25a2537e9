// Message groups (docs/stomp.md, "Message groups"): every message of a group (JMSXGroupID, or
// Artemis's _AMQ_GROUP_ID) goes to the consumer that holds the group, in queue order, one consumer
// at a time. A new group goes to the consumer the usual rule picks for its first message (priority,
// then round robin among those with room), so groups spread over consumers as they come. A message
// whose group's consumer is full waits in its place while the messages behind it, of other groups
// or none, go on (dispatch looks up to kGroupLookahead messages ahead).
#include <spdlog/spdlog.h>

#include <functional>

#include "core.h"

namespace escrow::broker {
const std::string* broker::impl::group_of(const message& m) {
  if (const std::string* g = m.record.find_header("JMSXGroupID")) return g;
  return m.record.find_header("_AMQ_GROUP_ID");
}

std::string broker::impl::group_slot(queue& q, const std::string& group) {
  group_index& gi = q.groups;
  if (gi.owner.empty()) gi.bucketed = false;
  // Slots never collide with a client's text: "g" + the id (a long id by its hash, so that memory
  // is bounded by the count of groups, not their ids' length), or "b" + a bucket number.
  std::string own = group.size() <= kMaxGroupIdKept
                        ? "g" + group
                        : "h" + std::to_string(std::hash<std::string>{}(group)) + ":" + group.substr(0, 64);
  if (gi.owner.count(own)) return own;
  if (!gi.bucketed && gi.owner.size() < config.max_groups_per_queue) return own;
  if (!gi.bucketed)
    spdlog::warn("{} '{}' holds {} message groups (limits.max-groups-per-queue): new groups share {} buckets until "
                 "its groups are released",
                 queue::kind_name(q.type()), q.name(), gi.owner.size(), config.max_groups_per_queue);
  gi.bucketed = true;
  return "b" + std::to_string(std::hash<std::string>{}(group) % config.max_groups_per_queue);
}

subscription* broker::impl::group_target(queue& q, const std::string& group, subscription& chosen,
                                         const queue_entry& e, bool& held) {
  std::string slot = group_slot(q, group);
  held = false;
  if (auto it = q.groups.owner.find(slot); it != q.groups.owner.end()) {
    subscription* owner = it->second;
    if (!accepts(*owner, e)) return &chosen;
    held = true;
    return has_room_for(*owner) ? owner : nullptr;
  }
  q.groups.owner.emplace(std::move(slot), &chosen);
  return &chosen;
}

void broker::impl::after_group_message(queue& q, const std::string& group, const message& m) {
  // JMSXGroupSeq -1 (Artemis's _AMQ_GROUP_SEQUENCE -1) closes the group once it is handed out.
  const std::string* seq = m.record.find_header("JMSXGroupSeq");
  if (!seq) seq = m.record.find_header("_AMQ_GROUP_SEQUENCE");
  if (seq && *seq == "-1") {
    std::string slot = group_slot(q, group);
    if (slot[0] != 'b') q.groups.owner.erase(slot);  // a bucket holds other groups too
  }
}

void broker::impl::forget_groups(queue& q, const subscription& s) {
  std::erase_if(q.groups.owner, [&s](const auto& g) { return g.second == &s; });
}

std::size_t broker::impl::reset_groups(queue& q, const std::optional<std::string>& group) {
  if (!group) {
    std::size_t n = q.groups.owner.size();
    q.groups.owner.clear();
    return n;
  }
  return q.groups.owner.erase(group_slot(q, *group));
}

}  // namespace escrow::broker
