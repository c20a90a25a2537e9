// The core's side of the metrics: the snapshot built on the core strand from its own state, the
// store's counters (atomics, any thread) and the resource manager's branches; and the per-queue
// depth counted from storage at open.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "escrow/broker/security/authenticator.h"
#include "core.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

namespace escrow::broker {

namespace {

histogram to_histogram(const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts, double sum) {
  histogram h;
  h.bounds = bounds;
  h.counts = counts;
  h.sum = sum;
  for (auto n : counts) h.count += n;
  return h;
}

}  // namespace

// Depth must be right after a restart, and the entries table is the truth; but start-up may not
// grow with the number of stored messages (DESIGN.md, invariant 7). So a read snapshot is taken at
// open, before any change, and a background thread walks its entry keys and counts them by queue;
// the core adds the counts to the depths it has been keeping since open (which may be negative
// meanwhile). Until then /metrics shows the changes since start only. The same pass counts each
// queue's stored bytes (queue_counters::bytes, what max-size-bytes limits). Queues with a limit were
// counted at open already (count_limited_queues, address_limits.cpp): they keep that count.
storage::status broker::impl::count_depths() {
  std::unique_ptr<storage::store::read_snapshot> at;
  if (storage::status s = store.snapshot(at); !s.ok()) return s;
  depth_counter = std::thread([this, at = std::shared_ptr<storage::store::read_snapshot>(std::move(at))] {
    auto started = std::chrono::steady_clock::now();
    auto counts = std::make_shared<std::unordered_map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>>>();
    std::uint64_t total = 0;
    // The same pass counts the bytes of each sender's stored records (limits.max-stored-bytes-per-
    // user): the messages stored inline in their entry here, those shared by several entries below.
    std::unordered_map<std::string, std::uint64_t> by_sender;
    auto count_sender = [&](storage::table t, std::string_view v) {
      std::string_view sender;
      std::size_t bytes = 0;
      if (storage::store::stored_sender(t, v, sender, bytes)) by_sender[std::string(sender)] += bytes;
      return !stopping.load(std::memory_order_relaxed);
    };
    storage::status s = store.scan(*at, storage::table::entries, {}, {}, [&](std::string_view k, std::string_view v) {
      storage::entry_key key;
      if (storage::entry_key::decode(k, key)) {
        auto& [n, bytes] = (*counts)[key.queue_id];
        ++n;
        ++total;
        // Its message's stored size: inline after the delivery count, or the record it shares.
        if (v.size() > 4) {
          bytes += v.size() - 4;
        } else {
          std::string mkey = storage::message_key(key.message_id);
          (void)store.scan(*at, storage::table::messages, mkey, mkey, [&](std::string_view, std::string_view record) {
            bytes += record.size();
            return false;
          });
        }
      }
      return count_sender(storage::table::entries, v);
    });
    // Scheduled messages are counted apart: they are not in the depth until due.
    auto scheduled = std::make_shared<std::unordered_map<std::uint32_t, std::uint64_t>>();
    if (s.ok() && !stopping.load())
      s = store.scan(*at, storage::table::scheduled, {}, {}, [&](std::string_view k, std::string_view v) {
        std::uint64_t due = 0;
        storage::entry_key key;
        if (storage::parse_scheduled_key(k, due, key)) ++(*scheduled)[key.queue_id];
        return count_sender(storage::table::scheduled, v);
      });
    if (s.ok() && !stopping.load())
      s = store.scan(*at, storage::table::messages, {}, {},
                     [&](std::string_view, std::string_view v) { return count_sender(storage::table::messages, v); });
    if (!s.ok() || stopping.load()) {
      if (!s.ok()) {
        spdlog::error("counting the stored messages of each queue: {}; depths and stored bytes per user count from start", s.message());
        // Queue limits take the depths as they are rather than wait for a count that will not come.
        post([this] {
          for (auto& [id, q] : topology.queues_by_id) q->room.counted = true;
          flush();  // SENDs waiting for a count (BLOCK) look again
        });
      }
      return;
    }
    std::uint64_t sender_bytes = 0;
    for (const auto& [sender, n] : by_sender) sender_bytes += n;
    store.add_stored_bytes({by_sender.begin(), by_sender.end()});
    spdlog::info("counted {} bytes of stored messages of {} senders (limits.max-stored-bytes-per-user)", sender_bytes,
                 by_sender.size());
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
    post([this, counts, scheduled, total, ms] {
      for (auto& [id, n] : *counts) {
        queue_ptr q = find_by_id(id);
        if (!q || q->room.counted) continue;  // counted at open (a limited queue), or made since
        q->counters.depth += static_cast<std::int64_t>(n.first);
        q->counters.bytes += static_cast<std::int64_t>(n.second);
      }
      // Every queue's depth is known now, those without stored messages too.
      for (auto& [id, q] : topology.queues_by_id) q->room.counted = true;
      for (auto& [id, n] : *scheduled)
        if (find_by_id(id)) schedule.count(id, static_cast<std::int64_t>(n));
      spdlog::info("counted {} stored messages in {} queues in {} ms (in the background)", total, counts->size(), ms);
      flush();  // SENDs waiting for a count (BLOCK) look again
    });
  });
  return {};
}

namespace {

// Branches by state, and the age of the oldest prepared one.
void collect_branches(const rm::resource_manager& rm, metrics_snapshot& s) {
  for (auto state : {rm::branch_state::active, rm::branch_state::idle, rm::branch_state::prepared,
                     rm::branch_state::rollback_only, rm::branch_state::heuristic_committed,
                     rm::branch_state::heuristic_rolled_back, rm::branch_state::heuristic_mixed,
                     rm::branch_state::rolled_back})
    s.branches_by_state[rm::to_string(state)] = 0;
  std::uint64_t now_ms = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                        std::chrono::system_clock::now().time_since_epoch())
                                                        .count());
  for (const auto& [id, b] : rm.branches()) {
    ++s.branches_by_state[rm::to_string(b->state)];
    if (b->state == rm::branch_state::prepared && b->created_ms < now_ms)
      s.oldest_prepared_age_seconds =
          std::max(s.oldest_prepared_age_seconds, static_cast<double>(now_ms - b->created_ms) / 1000.0);
  }
}

void collect_store(const storage::commit_stats& st, metrics_snapshot& s) {
  s.store.writable = st.writable;
  s.store.commits = st.commits;
  s.store.batches = st.batches;
  s.store.batches_per_commit = to_histogram(st.batches_per_commit_bounds, st.batches_per_commit,
                                            static_cast<double>(st.batches_per_commit_sum));
  s.store.fsync_seconds = to_histogram(st.fsync_bounds_seconds, st.fsync, st.fsync_seconds_sum);
  s.store.map_size_bytes = st.map_size_bytes;
  s.store.map_used_bytes = st.map_used_bytes;
  s.store.file_bytes = st.file_bytes;
  s.store.log_bytes = st.log_bytes;
  s.store.log_size_bytes = st.log_size_bytes;
  s.store.log_used_bytes = st.log_used_bytes;
  s.store.map_grows = st.map_grows;
  s.store.live_bytes = st.live_bytes;
  s.store.disk_free_bytes = st.disk_free_bytes;
  s.store.refusing_sends = st.refusing_sends;

}

}  // namespace

void broker::impl::collect_queues(metrics_snapshot& s) const {
  // In flight: every unacknowledged delivery, by the queue it came from.
  std::unordered_map<const queue*, std::uint64_t> in_flight;
  for (const auto& [cid, c] : clients.connections)
    for (const auto& [sid, sub] : c->subscriptions)
      for (const auto& [tag, d] : sub->unacked) ++in_flight[d.source.get()];
  auto in_flight_of = [&in_flight](const queue* q) {
    auto f = in_flight.find(q);
    return f == in_flight.end() ? std::uint64_t{0} : f->second;
  };
  // The totals over every queue; the series of the deepest http.max-queue-metrics only, so that a
  // broker with 100,000 queues still answers a scrape in a few hundred KiB.
  queue_totals& t = s.totals;
  t.queues_by_kind = {{queue::kind_name(queue::kind::queue), 0},
                      {queue::kind_name(queue::kind::durable_subscription), 0}};
  t.enqueued = topology.retired.enqueued;
  t.delivered = topology.retired.delivered;
  t.acknowledged = topology.retired.acknowledged;
  std::vector<const queue*> all;
  std::vector<std::pair<std::uint64_t, std::string_view>> depths;
  all.reserve(topology.queues.size());
  depths.reserve(topology.queues.size());
  for (const auto& [key, q] : topology.queues) {
    const queue_counters& n = q->counters;
    std::uint64_t depth = n.depth > 0 ? static_cast<std::uint64_t>(n.depth) : 0;
    ++t.queues_by_kind[queue::kind_name(q->type())];
    t.depth += depth;
    t.in_flight += in_flight_of(q.get());
    t.enqueued += n.enqueued;
    t.delivered += n.delivered;
    t.acknowledged += n.acknowledged;
    all.push_back(q.get());
    depths.emplace_back(depth, q->name());
  }
  std::vector<std::size_t> kept = deepest_queues(depths, config.max_queue_metrics);
  s.queues_omitted = all.size() - kept.size();
  s.queues.reserve(kept.size());
  for (std::size_t i : kept) {
    const queue& q = *all[i];
    queue_metrics m;
    m.name = q.name();
    m.kind = queue::kind_name(q.type());
    static_cast<message_counts&>(m) = q.counters;
    m.depth = depths[i].first;
    m.in_flight = in_flight_of(&q);
    m.consumers = q.consumers().size();
    s.queues.push_back(std::move(m));
  }
}

metrics_snapshot broker::impl::snapshot() const {
  metrics_snapshot s;
  s.connections = clients.connections.size();
  s.expired = undelivered.counters.expired;
  s.expired_dropped = undelivered.counters.expired_dropped;
  s.dead_lettered = undelivered.counters.dead_lettered;
  s.dead_letters_dropped = undelivered.counters.dead_letters_dropped;
  s.scheduled = schedule.total();
  s.scheduled_delivered = schedule.delivered;
  s.scheduled_deleted = schedule.deleted;
  s.duplicates = duplicates.refused;
  s.failed_logins = auth ? auth->failed_logins() : 0;
  s.coordinated_live = coordination.live.size();
  s.coordinated_decisions = coordination.decisions.size();
  s.coordinated_committed = coordination.committed;
  s.coordinated_pending = coordination.answered_pending;
  s.coordinated_rolled_back = coordination.rolled_back;
  s.coordinated_unprepared = coordination.refused_unprepared;
  s.coordinated_recovered_commits = coordination.recovered_commits;
  s.coordinated_recovered_rollbacks = coordination.recovered_rollbacks;
  collect_branches(transactions.rm, s);
  s.prepare_seconds = transactions.prepare_latency.value();
  s.commit_seconds = transactions.commit_latency.value();
  collect_store(store.stats(), s);
  collect_queues(s);
  collect_drops(s);
  return s;
}

void broker::collect_metrics(std::function<void(metrics_snapshot)> done) {
  impl_->post([m = impl_.get(), done = std::move(done)] { done(m->snapshot()); });
}

}  // namespace escrow::broker
