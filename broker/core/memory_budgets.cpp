// What non-persistent messages may hold in memory (docs/security.md, "Limits"): per user, the
// messages its SENDs keep only in memory in queues (limits.max-memory-bytes-per-user), charged when the
// message is made and released by the message's own deleter when its last holder lets it go; per
// queue, the ready ones (limits.max-memory-bytes-per-queue), refused at SEND or made room for by
// dropping the oldest (limits.memory-full-policy; always for subscriptions, so that no subscriber
// can refuse a publisher's messages). Core strand, but for the deleter (atomic).
#include <spdlog/spdlog.h>

#include "core.h"

namespace escrow::broker {

std::shared_ptr<message> broker::impl::charged_message(connection& c, storage::message_record record,
                                                       const std::vector<std::pair<queue_ptr, bool>>& targets,
                                                       const frame& f) {
  const std::uint64_t bytes = memory_bytes(record);
  // Charged to the sender: a message kept only in memory that reaches a queue. One that reaches
  // only topic subscriptions is not: each subscription is bounded by the per-queue budget (it drops
  // its oldest), and a subscriber that does not acknowledge must not use up the publisher's budget.
  bool memory_only = !targets.empty(), in_a_queue = false;
  for (const auto& [q, stored] : targets) {
    memory_only = memory_only && !stored;
    in_a_queue = in_a_queue || q->type() == queue::kind::queue;
    if (stored) continue;
    if (bytes > config.max_memory_bytes_per_queue)
      return error(c, "SEND refused: the message takes " + std::to_string(bytes) +
                          " bytes of memory, more than limits.max-memory-bytes-per-queue (" +
                          std::to_string(config.max_memory_bytes_per_queue) + "); send it persistent", &f),
             nullptr;
    // Scheduled messages waiting in memory count with the ready ones, and are never made room
    // for by dropping ready ones: over the budget, a queue refuses a new one whatever its policy.
    const bool scheduled = record.deliver_at != 0;
    auto w = schedule.waiting_bytes.find(q->id());
    const std::uint64_t held = q->unstored_bytes() + (w == schedule.waiting_bytes.end() ? 0 : w->second);
    bool refuses = q->type() == queue::kind::queue && (config.memory_full_policy == "refuse" || scheduled);
    if (refuses && held + bytes > config.max_memory_bytes_per_queue)
      return error(c, "SEND refused: queue '" + q->name() + "' holds " + std::to_string(held) +
                          " bytes of non-persistent messages waiting for a consumer; this one of " +
                          std::to_string(bytes) + " would pass limits.max-memory-bytes-per-queue (" +
                          std::to_string(config.max_memory_bytes_per_queue) +
                          "). Consume them, send persistent messages, or set limits.memory-full-policy = "
                          "\"drop-oldest\"", &f),
             nullptr;
  }
  if (!memory_only || !in_a_queue) {
    auto m = std::make_shared<message>();
    m->record = std::move(record);
    return m;
  }
  auto& account = memory_by_user[c.info.user];
  if (!account) account = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::uint64_t held = account->load(std::memory_order_relaxed);
  if (held + bytes > config.max_memory_bytes_per_user)
    return error(c, "SEND refused: " + who(c) + "'s non-persistent messages hold " + std::to_string(held) +
                        " bytes of memory; this one of " + std::to_string(bytes) +
                        " would pass limits.max-memory-bytes-per-user (" +
                        std::to_string(config.max_memory_bytes_per_user) +
                        "). Let consumers take them, or send persistent messages", &f),
           nullptr;
  account->fetch_add(bytes, std::memory_order_relaxed);
  std::shared_ptr<message> m(new message{0, std::move(record)}, [account, bytes](message* gone) {
    account->fetch_sub(bytes, std::memory_order_relaxed);
    delete gone;
  });
  return m;
}

void broker::impl::make_room(queue& q, const queue_entry& e) {
  if (q.type() == queue::kind::queue && config.memory_full_policy == "refuse") return;
  std::uint64_t bytes = e.msg ? memory_bytes(*e.msg) : 0;
  if (q.unstored_bytes() + bytes <= config.max_memory_bytes_per_queue) return;
  auto dropped = q.take_oldest_unstored(q.unstored_bytes() + bytes - config.max_memory_bytes_per_queue);
  for (auto& d : dropped) {
    q.counters.removed(q.counters.dropped, stored_size(d));
    q.release_hold(d.key);
  }
  spdlog::debug("{} '{}': dropped its {} oldest non-persistent messages (limits.max-memory-bytes-per-queue)",
                queue::kind_name(q.type()), q.name(), dropped.size());
}

}  // namespace escrow::broker
