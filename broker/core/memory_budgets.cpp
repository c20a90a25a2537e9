// What non-persistent messages may hold in memory (docs/security.md, "Limits"): per user, the
// messages its SENDs keep only in memory (limits.max-memory-bytes-per-user), charged when the
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
  auto* made = new message();
  made->record = std::move(record);
  std::unique_ptr<message> guard(made);
  const std::uint64_t bytes = memory_bytes(*made);
  bool memory_only = !targets.empty();
  for (const auto& [q, stored] : targets) {
    memory_only = memory_only && !stored;
    if (stored) continue;
    if (bytes > config.max_memory_bytes_per_queue)
      return error(c, "SEND refused: the message takes " + std::to_string(bytes) +
                          " bytes of memory, more than limits.max-memory-bytes-per-queue (" +
                          std::to_string(config.max_memory_bytes_per_queue) + "); send it persistent", &f),
             nullptr;
    bool refuses = q->type() == queue::kind::queue && config.memory_full_policy == "refuse";
    if (refuses && q->unstored_bytes() + bytes > config.max_memory_bytes_per_queue)
      return error(c, "SEND refused: queue '" + q->name() + "' holds " + std::to_string(q->unstored_bytes()) +
                          " bytes of non-persistent messages waiting for a consumer; this one of " +
                          std::to_string(bytes) + " would pass limits.max-memory-bytes-per-queue (" +
                          std::to_string(config.max_memory_bytes_per_queue) +
                          "). Consume them, send persistent messages, or set limits.memory-full-policy = "
                          "\"drop-oldest\"", &f),
             nullptr;
  }
  if (!memory_only) return std::shared_ptr<message>(guard.release());
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
  return std::shared_ptr<message>(guard.release(), [account, bytes](message* m) {
    account->fetch_sub(bytes, std::memory_order_relaxed);
    delete m;
  });
}

void broker::impl::make_room(queue& q, const queue_entry& e) {
  if (q.type() == queue::kind::queue && config.memory_full_policy == "refuse") return;
  std::uint64_t bytes = e.msg ? memory_bytes(*e.msg) : 0;
  if (q.unstored_bytes() + bytes <= config.max_memory_bytes_per_queue) return;
  auto dropped = q.take_oldest_unstored(q.unstored_bytes() + bytes - config.max_memory_bytes_per_queue);
  for (auto& d : dropped) {
    q.counters.removed(q.counters.dropped);
    q.release_hold(d.key);
  }
  spdlog::debug("{} '{}': dropped its {} oldest non-persistent messages (limits.max-memory-bytes-per-queue)",
                queue::kind_name(q.type()), q.name(), dropped.size());
}

}  // namespace escrow::broker
