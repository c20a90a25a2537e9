// SEND: validating the frame, routing it to queues (anycast) or topic subscriptions (multicast),
// and storing a persistent message once, with an entry per durable target, before any consumer
// sees it and before its RECEIPT (durability point 1).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

#include "core.h"
#include "escrow/broker/selector/selector.h"
#include "escrow/broker/security/names.h"
#include "reserved_headers.h"
#include "escrow/storage/coding.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

namespace escrow::broker {
namespace {

constexpr std::string_view kQueuePrefix = "/queue/";
constexpr std::string_view kTopicPrefix = "/topic/";

// "/queue/NAME" or "/topic/NAME" with a non-empty name.
bool is_destination(std::string_view dest) {
  return dest.size() > kQueuePrefix.size() &&
         (dest.substr(0, kQueuePrefix.size()) == kQueuePrefix || dest.substr(0, kTopicPrefix.size()) == kTopicPrefix);
}

// Headers the server writes on MESSAGE itself; a SEND's own copies of them are not kept.
// In any case: a `Message-Id` a sender set must not stand beside the broker's `message-id` for a
// consumer that reads names without regard to case.
bool is_server_header(std::string_view name) {
  for (std::string_view h : {"destination", "receipt", "transaction", "content-length", "message-id", "subscription",
                             "ack", "redelivered", "delivery-count"})
    if (same_header_name(name, h)) return true;
  return false;
}

template <typename T>
bool parse_number(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

// Until a batch carrying the queue's record has completed, every batch that writes for the queue
// carries it again (a put of the same value): a refused batch must not leave the queue's entries
// stored without the record that says whose they are (DESIGN.md invariant 8). submit() marks the
// record durable when a batch carrying it completes (confirm_records).
void broker::impl::persist_queue_record(const queue_ptr& qp, storage::batch& b) {
  queue& q = *qp;
  if (q.record_durable || !q.durable()) return;
  storage::queue_record r;
  r.id = q.id();
  r.type = q.type() == queue::kind::durable_subscription ? storage::queue_record::kind::durable_subscription
                                                          : storage::queue_record::kind::queue;
  r.topic = q.topic();
  r.creator = q.creator;
  if (q.filter) r.selector = q.filter->text();
  b.put(storage::table::queues, q.storage_key, r.encode());
  storage::put_next_queue_id(b, topology.next_queue_id);
  if (std::find(topology.records_carried.begin(), topology.records_carried.end(), qp) == topology.records_carried.end())
    topology.records_carried.push_back(qp);
}

queue_ptr broker::impl::find_by_id(std::uint32_t id) const {
  auto it = topology.queues_by_id.find(id);
  return it == topology.queues_by_id.end() ? nullptr : it->second;
}

void broker::impl::add_queue(const queue_ptr& q) {
  if (q->durable()) topology.queues.emplace(q->storage_key, q);
  topology.queues_by_id.emplace(q->id(), q);
  count_queue(*q, 1);
}

void broker::impl::remove_queue(const queue_ptr& q) {
  auto it = topology.queues.find(q->storage_key);
  if (it != topology.queues.end() && it->second == q) {
    topology.retire(*q);  // its counters stay in the broker-wide totals
    topology.queues.erase(it);
  }
  auto by_id = topology.queues_by_id.find(q->id());
  if (by_id == topology.queues_by_id.end() || by_id->second != q) return;
  topology.queues_by_id.erase(by_id);
  count_queue(*q, -1);
}

queue_ptr broker::impl::find_or_create_queue(const std::string& name, storage::batch& b,
                                             const std::optional<std::string>& creator) {
  std::string key = "q/" + name;
  auto it = topology.queues.find(key);
  if (it != topology.queues.end()) {
    queue_ptr& q = it->second;
    q->unused_since_ms = 0;
    q->dropping = false;           // an auto-delete in flight: the queue stays (auto_delete.cpp)
    persist_queue_record(q, b);  // a no-op once its record is durable
    return q;
  }
  auto q = std::make_shared<queue>(topology.next_queue_id++, name, queue::kind::queue, "", &store,
                                   config.queue_memory_window, config.queue_memory_bytes);
  q->storage_key = key;
  q->creator = creator;
  add_queue(q);
  persist_queue_record(q, b);
  return q;
}

bool broker::impl::resolve_destination(std::string_view dest, storage::batch& records, std::vector<queue_ptr>& out,
                                       const std::optional<std::string>& creator) {
  if (dest.substr(0, kQueuePrefix.size()) == kQueuePrefix && dest.size() > kQueuePrefix.size()) {
    out.push_back(find_or_create_queue(std::string(dest.substr(kQueuePrefix.size())), records, creator));
    return true;
  }
  if (dest.substr(0, kTopicPrefix.size()) == kTopicPrefix && dest.size() > kTopicPrefix.size()) {
    auto t = topology.topics.find(std::string(dest.substr(kTopicPrefix.size())));
    if (t != topology.topics.end()) out = t->second.subscriptions;
    for (const auto& q : out) persist_queue_record(q, records);
    return true;
  }
  return false;
}

bool broker::impl::route(const connection_ptr& c, frame& f, routed_message& out, storage::batch& records) {
  const std::string* destination = f.find("destination");
  if (!destination) return error(*c, "SEND frame has no destination header", &f), false;

  storage::message_record record;
  std::string_view persistent = f.get("persistent", "true");
  if (persistent != "true" && persistent != "false")
    return error(*c, "invalid persistent header '" + std::string(persistent) + "': use true or false", &f), false;
  record.persistent = persistent == "true";
  if (const std::string* p = f.find("priority")) {
    unsigned priority = 0;
    if (!parse_number(*p, priority) || priority > 9)
      return error(*c, "invalid priority header '" + *p + "': use an integer from 0 to 9", &f), false;
    record.priority = static_cast<std::uint8_t>(priority);
  }
  if (const std::string* e = f.find("expires")) {
    if (!parse_number(*e, record.expires))
      return error(*c, "invalid expires header '" + *e + "': use epoch milliseconds, 0 for never", &f), false;
  }
  if (auto problem = scheduled_delivery(f, now_ms(), record.deliver_at)) return error(*c, *problem, &f), false;

  std::vector<queue_ptr> targets;
  if (is_destination(*destination))
    if (auto problem = name_problem(destination->substr(kQueuePrefix.size())))
      return error(*c, "invalid destination '" + loggable(*destination) + "': " + *problem, &f), false;
  if (destination->rfind(kQueuePrefix, 0) == 0)
    if (auto problem = queue_name_problem(destination->substr(kQueuePrefix.size())))
      return error(*c, "invalid destination '" + loggable(*destination) + "': " + *problem, &f), false;
  if (is_destination(*destination) && !permitted(*c, permission::send, destination->substr(kQueuePrefix.size()), &f))
    return false;
  if (destination->rfind(kQueuePrefix, 0) == 0 && !may_create_queue(*c, "q/" + destination->substr(kQueuePrefix.size()), &f))
    return false;
  if (!resolve_destination(*destination, records, targets, c->info.user))
    return error(*c, "invalid destination '" + *destination + "': use /queue/NAME or /topic/NAME", &f), false;
  // A message sent without a time to live gets its address's expiry-delay, if one is set.
  if (record.expires == 0) {
    std::string address = destination->substr(kQueuePrefix.size());  // "/queue/" and "/topic/" are as long
    std::int64_t delay = settings_for(address).expiry_delay_ms;
    if (delay >= 0) record.expires = now_ms() + static_cast<std::uint64_t>(delay);
  }

  record.destination = *destination;
  record.timestamp = now_ms();
  if (record.persistent) record.sender = c->info.user;  // limits.max-stored-bytes-per-user
  for (auto& [name, value] : f.headers) {
    // What the broker writes itself, and what another tenant could forge, is not the sender's.
    if (is_server_header(name) || is_reserved_header(name)) continue;
    bool seen = false;  // a repeated header: the first occurrence wins
    for (auto& h : record.headers) seen = seen || h.first == name;
    if (!seen) record.headers.emplace_back(std::move(name), std::move(value));
  }
  // First, so that a reader of repeated headers that takes the first (STOMP 1.2's rule) sees the
  // broker's and not one a sender smuggled in.
  if (config.populate_validated_user && auth)
    record.headers.insert(record.headers.begin(), {"_AMQ_VALIDATED_USER", c->info.user});
  record.body = std::move(f.body);
  // Topic subscriptions with a selector get only what matches (nothing is kept for the others).
  if (std::any_of(targets.begin(), targets.end(), [](const queue_ptr& q) { return q->filter != nullptr; }))
    std::erase_if(targets, [&](const queue_ptr& q) { return q->filter && !selects(*q->filter, record, next_message_id); });

  std::vector<std::pair<queue_ptr, bool>> stored_in;
  for (auto& q : targets) stored_in.emplace_back(q, record.persistent && q->durable());
  auto msg = charged_message(*c, std::move(record), stored_in, f);
  if (!msg) return false;
  msg->id = next_message_id++;
  out.msg = msg;
  for (auto& [q, stored] : stored_in)
    out.entries.emplace_back(q, queue_entry{storage::entry_key{q->id(), msg->record.priority, msg->id}, 0, stored, msg});
  return true;
}

void broker::impl::publish(std::vector<std::pair<queue_ptr, queue_entry>>& entries) {
  for (auto& [q, e] : entries) {
    // (A scheduled message does not go into the ready ones yet: schedule_entry keeps its budget.)
    if (!e.stored && e.msg->record.deliver_at == 0) make_room(*q, e);
    enqueue(q, std::move(e));
  }
  for (auto& [q, e] : entries) dispatch(q);
}

void broker::impl::handle_send(const connection_ptr& c, frame& f) {
  rm::branch_ptr branch;
  if (!branch_for(c, f, branch)) return;
  // The SEND's _AMQ_DUPL_ID, when its address remembers ids (duplicates.cpp).
  std::optional<std::string> duplicate_id;
  if (!duplicate_id_of(*c, f, duplicate_id)) return;
  // storage.max-size and storage.min-free-disk refuse new persistent messages before the disk is
  // full; acknowledgements and commits go on, and sends resume by themselves once there is room.
  // A SEND with an id writes the id, persistent or not.
  if (f.get("persistent", "true") != "false" || duplicate_id) {
    if (storage::status room = store.send_room(); !room.ok())
      return error(*c, "message not stored: " + room.message(), &f);
  }
  // RabbitMQ's rule: a user-id header names the user that logged in, or the SEND is refused (before
  // anything, a new queue say, is made for it).
  if (auth)
    for (const auto& [name, value] : f.headers)
      if (same_header_name(name, "user-id") && value != c->info.user)
        return error(*c, "SEND's " + name + " header '" + value + "' is not the user this connection logged in as ('" +
                             c->info.user + "'): leave it out or give your own login", &f);
  // What a transaction holds in memory until it ends is bounded, per transaction and per user.
  const bool in_transaction = branch && takes_work(*branch);
  std::uint64_t staged = 0;
  if (in_transaction) {
    staged = f.body.size();
    for (const auto& [name, value] : f.headers) staged += name.size() + value.size() + 2;
    if (!may_stage(*c, *branch, staged, f)) return;
  }
  storage::batch b;
  routed_message routed;
  if (!route(c, f, routed, b)) return;
  // What the user's SENDs keep stored is bounded too (limits.max-stored-bytes-per-user).
  std::uint64_t storing = 0;
  if (std::any_of(routed.entries.begin(), routed.entries.end(), [](const auto& e) { return e.second.stored; })) {
    storing = in_transaction ? staged : routed.msg->record.encoded_size();
    if (!may_store(*c, storing, in_transaction, f)) return;
  }

  if (branch) {
    // Inside a transaction the message waits in the branch; nothing is visible before commit. A
    // branch that no longer takes work (rolled back, rollback-only) drops it: its end, prepare or
    // commit answers XA_RB*.
    if (takes_work(*branch)) {
      // A full queue under FAIL makes the transaction rollback-only; under DROP it takes no copy
      // (address_limits.cpp). Its commit checks again.
      std::string refusal;
      if (!admit_staged(*branch, routed, refusal)) return refuse_in_transaction(c, f, *branch, std::move(b), refusal);
      rm::staged_send staged{routed.msg, {}};
      for (auto& [q, e] : routed.entries) staged.targets.push_back(rm::send_target{e.key, e.stored});
      branch->work.sends.push_back(std::move(staged));
    }
    return receipt_after(c, f, std::move(b));  // b holds only new queues' records
  }
  send_routed(c, f, std::move(routed), std::move(b), storing, std::move(duplicate_id));
}

void broker::impl::send_routed(const connection_ptr& c, frame& f, routed_message routed, storage::batch b,
                               std::uint64_t storing, std::optional<std::string> duplicate_id) {
  // Queue limits (address_limits.cpp): a full queue refuses the SEND (FAIL), makes it wait (BLOCK)
  // or takes no copy (DROP); DROP-HEAD and ring queues make room below.
  std::uint32_t wait_on = 0;
  switch (admit_send(c, f, routed, wait_on)) {
    case admission::refused: return;
    case admission::parked: {
      // A connection that holds messages of that queue unacknowledged (or consumed in one of its
      // transactions) would wait for itself: its ACK or COMMIT waits behind the SEND.
      if (std::string why = waits_for_itself(*c, wait_on); !why.empty()) return error(*c, why, &f);
      std::int64_t bytes = static_cast<std::int64_t>(routed.msg->record.encoded_size());
      std::uint64_t held = routed.msg->record.body.size() + 64;  // as on_frames counted the frame
      // (The connection holds this closure: it holds the connection only weakly.)
      auto resume = [this, weak = std::weak_ptr<connection>(c), request = std::make_shared<frame>(std::move(f)),
                     routed = std::move(routed), b = std::move(b), storing,
                     duplicate_id = std::move(duplicate_id)]() mutable {
        connection_ptr c = weak.lock();
        if (!c) return;
        // Queues that went away meanwhile (a durable subscription ended) take nothing.
        std::erase_if(routed.entries,
                      [this](const auto& e) { return find_by_id(e.first->id()) != e.first || e.first->dropping; });
        send_routed(c, *request, std::move(routed), std::move(b), storing, std::move(duplicate_id));
      };
      return park(c, wait_on, bytes, held, std::move(resume));
    }
    case admission::admitted: break;
  }

  // Outside a transaction an id already taken drops the SEND here (answered as a duplicate); a new
  // one is written in the message's batch. In a transaction it is claimed at commit (carry_out).
  duplicate_ids claims;
  if (duplicate_id && !claim_send_id(c, f, routed.msg->record.destination, *duplicate_id, b, claims)) return;
  // A full DROP-HEAD or ring queue loses its oldest ready messages in this SEND's batch.
  // A last-value queue's ready message of the same key goes in this batch (last_values.cpp); it
  // no longer counts for the queue's limits, so a ring or DROP-HEAD queue makes room only for
  // what grows it.
  last_value_plan replacing;
  plan_last_values(routed.entries, b, replacing);
  room_plan drops;
  make_room_for_send(routed, b, drops);

  std::vector<storage::entry_key> stored;
  b.reserve(routed.msg->record.body.size() + 256 + 32 * routed.entries.size());
  for (auto& [q, e] : routed.entries) {
    if (!e.stored) continue;
    q->hold(e.key);
    stored.push_back(e.key);
  }
  if (stored.empty() && claims.empty() && drops.empty() && !replacing.removes_stored) {
    // Only new queues' records: nothing waits for them (the next write carries them again if refused).
    if (!b.empty())
      submit(std::move(b), [](const storage::status& s) {
        if (!s.ok()) spdlog::warn("a new queue's record was not stored: {}", s.message());
      });
    publish(routed.entries);
    finish_last_values(replacing, true);
    return receipt(*c, f);
  }
  if (!stored.empty()) {
    storage::put_message(b, routed.msg->id, routed.msg->record, stored);
    storage::put_next_message_id(b, next_message_id);
  }

  // Nobody sees the message until it is durable (a message stored nowhere: until its id is):
  // consumers get it from the completion. Until then it holds its room in each queue.
  std::int64_t size = static_cast<std::int64_t>(routed.msg->record.encoded_size());
  for (auto& [q, e] : routed.entries) reserve_room(*q, 1, size);
  count_storing(c->info.user, storing, false);
  receipt_after(c, f, std::move(b), "message",
                [this, user = c->info.user, storing, size, entries = std::move(routed.entries),
                 claims = std::move(claims), drops = std::move(drops),
                 replacing = std::move(replacing)](bool stored) mutable {
                  release_duplicate_ids(claims);
                  count_storing(user, storing, true);
                  for (auto& [q, e] : entries) reserve_room(*q, -1, -size);
                  finish_room_plan(drops, stored);
                  if (stored) {
                    publish(entries);
                  } else {
                    for (auto& [q, e] : entries)
                      if (e.stored) q->release_hold(e.key);
                  }
                  finish_last_values(replacing, stored);
                });
}

}  // namespace escrow::broker
