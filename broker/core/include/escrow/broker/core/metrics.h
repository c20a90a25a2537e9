// Metrics: the snapshot of the broker's counters that /metrics, /status and /health are made from
// (the writers that turn one into the Prometheus text format or JSON are admin/metrics_text.h).
//
// Threads: a metrics_snapshot is a plain value. The core strand builds it (broker::collect_metrics)
// and hands it to whoever asked.
// latency_histogram is not thread-safe: each one has a single owner (the core strand for the
// prepare and commit latencies).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace escrow::broker {

// A fixed-bucket histogram. counts[i] is the number of observations in bucket i alone (not
// cumulative): at most bounds[i] and above bounds[i-1]; counts.back() is the +Inf bucket.
struct histogram {
  std::vector<double> bounds;  // ascending upper bounds
  std::vector<std::uint64_t> counts;
  double sum = 0;
  std::uint64_t count = 0;
};

// Latency in seconds, owned by one thread.
class latency_histogram {
 public:
  latency_histogram();
  void observe(double seconds);
  const histogram& value() const { return h_; }

 private:
  histogram h_;
};

// The bounds used for latencies (seconds): 100 µs to 10 s.
std::vector<double> latency_bounds();

// What a queue has counted of its messages since escrowd started: kept by the queue, copied
// whole into its metrics and its ADMIN view.
struct message_counts {
  std::uint64_t enqueued = 0;       // messages made visible (sent, committed, moved in)
  std::uint64_t delivered = 0;      // handed to a consumer (redeliveries included)
  std::uint64_t acknowledged = 0;   // removed by an acknowledgement (or auto ack)
  std::uint64_t expired = 0;        // removed because they expired
  std::uint64_t dead_lettered = 0;  // removed after max-delivery-attempts
  std::uint64_t redelivered = 0;    // returned for redelivery (NACK, rollback, consumer gone)
  std::uint64_t dropped = 0;        // non-persistent, removed to keep the queue within max-memory-bytes-per-queue
  std::uint64_t replaced = 0;       // removed from a last-value queue by a newer message with its key
};

// One queue (or durable or non-durable topic subscription) as the core sees it.
struct queue_metrics : message_counts {
  std::string name;
  std::string kind;  // "queue", "durable-subscription", "subscription"
  std::uint64_t depth = 0;          // messages in the queue: ready, in flight or held
  std::uint64_t in_flight = 0;      // delivered, not yet acknowledged
  std::uint64_t consumers = 0;
};

struct store_metrics {
  bool writable = true;  // false after a failed sync (sticky until restart)
  std::uint64_t commits = 0;
  std::uint64_t batches = 0;
  histogram batches_per_commit;
  histogram fsync_seconds;
  std::uint64_t map_size_bytes = 0;  // the configured map (address space)
  std::uint64_t map_used_bytes = 0;  // pages in use up to the last one written
  std::uint64_t file_bytes = 0;      // data.mdb on disk
  std::uint64_t log_bytes = 0;       // the commit log on disk (its whole ring, allocated at start)
  std::uint64_t log_size_bytes = 0;  // the ring's size (storage.log-size)
  std::uint64_t log_used_bytes = 0;  // records after the last checkpoint (how full the ring is)
  std::uint64_t map_grows = 0;       // times the map grew because it was full
  std::uint64_t live_bytes = 0;      // pages the tables use (what storage.max-size limits)
  std::uint64_t disk_free_bytes = 0; // free space of the disk holding the store
  bool refusing_sends = false;       // storage.max-size or storage.min-free-disk reached
};

// Messages a full queue dropped since start (address settings: address-full-policy DROP and
// DROP-HEAD, ring-size; docs/operations.md), for one queue and reason: "address-full" (a new message
// not taken), "drop-head" or "ring" (its oldest message removed to make room).
struct dropped_series {
  std::string queue;
  std::string kind;
  std::string reason;
  std::uint64_t count = 0;
};

// Broker-wide sums over every queue and durable subscription, whether or not it has series of its
// own: exact however many there are.
struct queue_totals {
  std::map<std::string, std::uint64_t> queues_by_kind;  // "queue", "durable-subscription" (0 included)
  std::uint64_t depth = 0;
  std::uint64_t in_flight = 0;
  // Since start; queues deleted since (auto-delete, a durable subscription ended) included, so
  // that these only grow.
  std::uint64_t enqueued = 0;
  std::uint64_t delivered = 0;
  std::uint64_t acknowledged = 0;
};

struct metrics_snapshot {
  std::string version;
  double uptime_seconds = 0;
  std::vector<std::string> listeners;  // "HOST:PORT" (", tls" appended for TLS ones)
  bool listeners_up = false;
  std::uint64_t connections = 0;
  // STOMP over WebSocket (filled in by the HTTP endpoint from its counters, http_server.h).
  std::uint64_t websocket_accepted = 0;  // upgrades completed since start
  std::uint64_t websocket_open = 0;      // WebSocket connections open now
  std::vector<std::pair<std::string, std::uint64_t>> websocket_events;  // refused/closed by reason
  std::uint64_t failed_logins = 0;  // logins refused since start (docs/security.md)
  // Messages that left their queues unacknowledged, broker-wide (undelivered_counters).
  std::uint64_t expired = 0;
  std::uint64_t expired_dropped = 0;
  std::uint64_t dead_lettered = 0;
  std::uint64_t dead_letters_dropped = 0;
  // Scheduled delivery (docs/stomp.md): messages waiting for their time now, and since start those
  // made ready when due (or by an operator) and those an operator deleted.
  std::int64_t scheduled = 0;
  std::uint64_t scheduled_delivered = 0;
  std::uint64_t scheduled_deleted = 0;
  // SENDs whose _AMQ_DUPL_ID their address had taken: dropped (outside a transaction), or their
  // transaction rolled back at commit or prepare (once per transaction). docs/stomp.md.
  std::uint64_t duplicates = 0;
  std::map<std::string, std::uint64_t> branches_by_state;  // every state, 0 included
  // Seconds since the oldest branch in state prepared was started (XA-START; the start time is in
  // its prepared record, so it survives restarts); 0 when no branch is prepared.
  double oldest_prepared_age_seconds = 0;
  histogram prepare_seconds;
  histogram commit_seconds;
  // Coordinated PostgreSQL transactions (docs/exactly-once.md): in flight now, and counted since start.
  std::uint64_t coordinated_live = 0;        // begun, not yet decided or rolled back
  std::uint64_t coordinated_decisions = 0;   // committed here, COMMIT PREPARED not known done
  std::uint64_t coordinated_committed = 0;   // COMMITs answered database:committed
  std::uint64_t coordinated_pending = 0;     // COMMITs answered database:pending
  std::uint64_t coordinated_rolled_back = 0;
  std::uint64_t coordinated_unprepared = 0;  // COMMITs refused: the gid was not prepared
  std::uint64_t coordinated_recovered_commits = 0;
  std::uint64_t coordinated_recovered_rollbacks = 0;
  store_metrics store;
  queue_totals totals;
  // The queues with series of their own, in the order of their storage keys: all of them, or the
  // http.max-queue-metrics deepest (ties by name); queues_omitted counts the others.
  std::vector<queue_metrics> queues;
  std::uint64_t queues_omitted = 0;
  // The queues that dropped messages for their limits, by reason (at most http.max-queue-metrics
  // series, the largest counts), in order of queue name.
  std::vector<dropped_series> dropped;
};

// Which of the queues (depth, name) keep series of their own when at most `limit` may: every one
// when there are no more than `limit`, else the `limit` deepest, ties by name and then by position.
// Their positions, ascending.
std::vector<std::size_t> deepest_queues(const std::vector<std::pair<std::uint64_t, std::string_view>>& queues,
                                        std::size_t limit);

}  // namespace escrow::broker
