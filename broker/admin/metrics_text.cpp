// The Prometheus text exposition format (0.0.4) of a metrics snapshot. Pure: no I/O, no state.
// Every family gets its HELP and TYPE lines even when it has no samples, so that a dashboard sees
// the name from the first scrape. docs/operations.md lists each metric with its meaning.
#include "escrow/broker/admin/metrics_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace escrow::broker {

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{}", v);
}

void append_histogram(std::string& out, std::string_view name, std::string_view labels, const histogram& h) {
  std::string sep = labels.empty() ? "" : std::string(labels) + ",";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.bounds.size(); ++i) {
    if (i < h.counts.size()) cumulative += h.counts[i];
    out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, sep, format_value(h.bounds[i]), cumulative);
  }
  // The +Inf bucket is the total count by definition, whatever the per-bucket counts say.
  out += fmt::format("{}_bucket{{{}le=\"+Inf\"}} {}\n", name, sep, h.count);
  std::string braces = labels.empty() ? "" : "{" + std::string(labels) + "}";
  out += fmt::format("{}_sum{} {}\n", name, braces, format_value(h.sum));
  out += fmt::format("{}_count{} {}\n", name, braces, h.count);
}

namespace {

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void sample(std::string& out, std::string_view name, double v) {
  out += fmt::format("{} {}\n", name, format_value(v));
}

// A family of one sample without labels.
void single(std::string& out, std::string_view name, std::string_view type, std::string_view help, double v) {
  family(out, name, type, help);
  sample(out, name, v);
}

// One family with a sample per queue, labelled by queue name and kind.
template <typename Field>
void per_queue(std::string& out, const metrics_snapshot& s, std::string_view name, std::string_view type,
               std::string_view help, Field field) {
  family(out, name, type, help);
  for (const auto& q : s.queues)
    out += fmt::format("{}{{queue=\"{}\",kind=\"{}\"}} {}\n", name, escape_label_value(q.name), q.kind,
                       field(q));
}


// The running escrowd and its connections.
void write_broker(std::string& out, const metrics_snapshot& s) {
  family(out, "escrow_build_info", "gauge", "Always 1; the version label names the running escrowd.");
  out += fmt::format("escrow_build_info{{version=\"{}\"}} 1\n", escape_label_value(s.version));
  single(out, "escrow_uptime_seconds", "gauge", "Seconds since escrowd started.", s.uptime_seconds);
  single(out, "escrow_connections", "gauge", "STOMP connections open now.", static_cast<double>(s.connections));
  single(out, "escrow_websocket_upgrades_total", "counter",
         "STOMP over WebSocket upgrades completed since start.", static_cast<double>(s.websocket_accepted));
  single(out, "escrow_websocket_connections", "gauge", "STOMP over WebSocket connections open now.",
         static_cast<double>(s.websocket_open));
  out += "# HELP escrow_websocket_refused_total WebSocket upgrades refused and WebSocket connections closed for bad "
         "input, by reason.\n# TYPE escrow_websocket_refused_total counter\n";
  for (const auto& [reason, n] : s.websocket_events)
    out += fmt::format("escrow_websocket_refused_total{{reason=\"{}\"}} {}\n", reason, n);
  single(out, "escrow_failed_logins_total", "counter",
         "CONNECT frames refused for their credentials (always 0 until users exist).",
         static_cast<double>(s.failed_logins));
}

// Coordinated PostgreSQL transactions (docs/exactly-once.md).
void write_coordinator(std::string& out, const metrics_snapshot& s) {
  auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  single(out, "escrow_coordinated_transactions", "gauge",
         "Coordinated transactions begun and not yet decided or rolled back.", d(s.coordinated_live));
  single(out, "escrow_coordinator_pending_decisions", "gauge",
         "Coordinated transactions committed here whose COMMIT PREPARED in the database is not known done.",
         d(s.coordinated_decisions));
  single(out, "escrow_coordinated_commits_total", "counter",
         "COMMITs of coordinated transactions answered with both sides committed.", d(s.coordinated_committed));
  single(out, "escrow_coordinated_commits_pending_total", "counter",
         "COMMITs of coordinated transactions answered database:pending (the database commit finished later).",
         d(s.coordinated_pending));
  single(out, "escrow_coordinated_rollbacks_total", "counter",
         "Coordinated transactions rolled back (ABORT, a refused COMMIT, a timeout, a lost connection).",
         d(s.coordinated_rolled_back));
  single(out, "escrow_coordinated_unprepared_total", "counter",
         "COMMITs refused because the pg-gid was not prepared in the database.", d(s.coordinated_unprepared));
  single(out, "escrow_coordinator_recovered_commits_total", "counter",
         "Decided transactions whose COMMIT PREPARED the recovery pass ran.", d(s.coordinated_recovered_commits));
  single(out, "escrow_coordinator_recovered_rollbacks_total", "counter",
         "Prepared transactions of this broker the recovery pass rolled back (no decision: presumed abort).",
         d(s.coordinated_recovered_rollbacks));
}

// Per queue (the deepest max-queue-metrics), then every queue broker-wide.
void write_queues(std::string& out, const metrics_snapshot& s) {
  // Per queue.
  using q = const queue_metrics&;
  per_queue(out, s, "escrow_queue_messages_enqueued_total", "counter",
            "Messages made visible in the queue (sent, committed, moved in).", [](q m) { return m.enqueued; });
  per_queue(out, s, "escrow_queue_messages_delivered_total", "counter",
            "Messages handed to a consumer, redeliveries included.", [](q m) { return m.delivered; });
  per_queue(out, s, "escrow_queue_messages_acknowledged_total", "counter",
            "Messages removed from the queue by an acknowledgement.", [](q m) { return m.acknowledged; });
  per_queue(out, s, "escrow_queue_messages_expired_total", "counter",
            "Messages removed from the queue because they expired.", [](q m) { return m.expired; });
  per_queue(out, s, "escrow_queue_messages_dead_lettered_total", "counter",
            "Messages removed from the queue after max-delivery-attempts.", [](q m) { return m.dead_lettered; });
  per_queue(out, s, "escrow_queue_messages_redelivered_total", "counter",
            "Messages returned to the queue for redelivery (NACK, rollback, consumer gone).",
            [](q m) { return m.redelivered; });
  per_queue(out, s, "escrow_queue_messages_dropped_total", "counter",
            "Non-persistent messages dropped, oldest first, to keep the queue within limits.max-memory-bytes-per-queue.",
            [](q m) { return m.dropped; });
  per_queue(out, s, "escrow_queue_messages_replaced_total", "counter",
            "Messages removed from a last-value queue by a newer message with the same key.",
            [](q m) { return m.replaced; });
  family(out, "escrow_messages_dropped_total", "counter",
         "Messages dropped by a full queue (address settings): reason address-full, a new message not taken "
         "(address-full-policy DROP); drop-head or ring, its oldest message removed (DROP-HEAD, ring-size).");
  for (const auto& d : s.dropped)
    out += fmt::format("escrow_messages_dropped_total{{queue=\"{}\",kind=\"{}\",reason=\"{}\"}} {}\n",
                       escape_label_value(d.queue), d.kind, d.reason, d.count);
  per_queue(out, s, "escrow_queue_depth", "gauge",
            "Messages in the queue: ready, in flight or held by a transaction.", [](q m) { return m.depth; });
  per_queue(out, s, "escrow_queue_in_flight", "gauge", "Messages delivered and not yet acknowledged.",
            [](q m) { return m.in_flight; });
  per_queue(out, s, "escrow_queue_consumers", "gauge", "Subscriptions consuming from the queue.",
            [](q m) { return m.consumers; });

  // Every queue, broker-wide: exact whether or not its series are above.
  family(out, "escrow_queues", "gauge",
         "Queues and durable subscriptions the broker holds, with per-queue series or not.");
  for (const auto& [kind, n] : s.totals.queues_by_kind)
    out += fmt::format("escrow_queues{{kind=\"{}\"}} {}\n", escape_label_value(kind), n);
  single(out, "escrow_queue_metrics_omitted", "gauge",
         "Queues left out of the per-queue series (http.max-queue-metrics; the deepest are kept).",
         static_cast<double>(s.queues_omitted));
  single(out, "escrow_messages_depth", "gauge",
         "Messages in every queue: ready, in flight or held.",
         static_cast<double>(s.totals.depth));
  single(out, "escrow_messages_in_flight", "gauge",
         "Messages delivered and not yet acknowledged, every queue.",
         static_cast<double>(s.totals.in_flight));
  single(out, "escrow_messages_enqueued_total", "counter",
         "Messages made visible in any queue (sent, committed, moved in), deleted queues included.",
         static_cast<double>(s.totals.enqueued));
  single(out, "escrow_messages_delivered_total", "counter",
         "Messages handed to a consumer, redeliveries included, deleted queues included.",
         static_cast<double>(s.totals.delivered));
  single(out, "escrow_messages_acknowledged_total", "counter",
         "Messages removed by an acknowledgement, deleted queues included.",
         static_cast<double>(s.totals.acknowledged));
}

// Messages that left their queues unacknowledged, broker-wide.
void write_undelivered(std::string& out, const metrics_snapshot& s) {
  // Undelivered, broker-wide.
  single(out, "escrow_messages_expired_total", "counter",
         "Expired messages moved to an expiry address.",
         static_cast<double>(s.expired));
  single(out, "escrow_messages_expired_dropped_total", "counter",
         "Expired messages dropped: no expiry address, or nothing listening to it.",
         static_cast<double>(s.expired_dropped));
  single(out, "escrow_messages_dead_lettered_total", "counter",
         "Messages moved to a dead letter address.",
         static_cast<double>(s.dead_lettered));
  single(out, "escrow_messages_dead_letters_dropped_total", "counter",
         "Dead letters dropped: no dead letter address, or nothing listening to it.",
         static_cast<double>(s.dead_letters_dropped));
  single(out, "escrow_scheduled_messages", "gauge",
         "Scheduled messages waiting for their delivery time (not in the queues' depth until due).",
         static_cast<double>(s.scheduled));
  single(out, "escrow_scheduled_delivered_total", "counter",
         "Scheduled messages made ready in their queue: due, or delivered now by an operator.",
         static_cast<double>(s.scheduled_delivered));
  single(out, "escrow_scheduled_deleted_total", "counter", "Scheduled messages an operator deleted.",
         static_cast<double>(s.scheduled_deleted));
  single(out, "escrow_duplicates_total", "counter",
         "SENDs whose _AMQ_DUPL_ID was taken: dropped, or their transaction rolled back (once each).",
         static_cast<double>(s.duplicates));
}

// Branches by state and the latency of prepares and commits.
void write_transactions(std::string& out, const metrics_snapshot& s) {
  // Transactions.
  family(out, "escrow_branches", "gauge", "Transaction branches (XA and local) by state.");
  for (const auto& [state, n] : s.branches_by_state)
    out += fmt::format("escrow_branches{{state=\"{}\"}} {}\n", escape_label_value(state), n);
  single(out, "escrow_xa_oldest_prepared_age_seconds", "gauge",
         "Seconds since the oldest prepared (in-doubt) branch was started; 0 when none is prepared.",
         s.oldest_prepared_age_seconds);
  family(out, "escrow_prepare_seconds", "histogram",
         "Time from an XA-PREPARE frame to its answer, the prepared record durable.");
  append_histogram(out, "escrow_prepare_seconds", "", s.prepare_seconds);
  family(out, "escrow_commit_seconds", "histogram",
         "Time from a commit (XA-COMMIT, one-phase, local COMMIT) to its answer, the work applied.");
  append_histogram(out, "escrow_commit_seconds", "", s.commit_seconds);
}

// The store: commits, syncs, the map and the disk.
void write_store(std::string& out, const metrics_snapshot& s) {
  // Storage.
  single(out, "escrow_store_writable", "gauge",
         "1 while the store takes writes; 0 after a failed sync (until restart).",
         s.store.writable ? 1 : 0);
  single(out, "escrow_store_commits_total", "counter",
         "LMDB write transactions committed (group commits).",
         static_cast<double>(s.store.commits));
  single(out, "escrow_store_batches_total", "counter",
         "Batches stored (each a durable change).",
         static_cast<double>(s.store.batches));
  family(out, "escrow_store_batches_per_commit", "histogram", "Batches merged into one group commit.");
  append_histogram(out, "escrow_store_batches_per_commit", "", s.store.batches_per_commit);
  family(out, "escrow_store_fsync_seconds", "histogram",
         "Duration of each durable sync: an LMDB commit (data pages) or an explicit meta page sync.");
  append_histogram(out, "escrow_store_fsync_seconds", "", s.store.fsync_seconds);
  single(out, "escrow_store_map_size_bytes", "gauge",
         "The LMDB map size (storage.map-size).",
         static_cast<double>(s.store.map_size_bytes));
  single(out, "escrow_store_map_used_bytes", "gauge",
         "Bytes of the map in use (up to the last page written).",
         static_cast<double>(s.store.map_used_bytes));
  single(out, "escrow_store_file_bytes", "gauge",
         "Size of data.mdb on disk.",
         static_cast<double>(s.store.file_bytes));
  single(out, "escrow_store_log_bytes", "gauge",
         "Bytes of the commit log on disk (its whole ring, allocated when escrowd starts).",
         static_cast<double>(s.store.log_bytes));
  single(out, "escrow_store_log_used_bytes", "gauge",
         "Bytes of commit-log records after the last checkpoint: how full the ring is (of escrow_store_log_size_bytes).",
         static_cast<double>(s.store.log_used_bytes));
  single(out, "escrow_store_log_size_bytes", "gauge", "The commit log's ring size (storage.log-size).",
         static_cast<double>(s.store.log_size_bytes));
  single(out, "escrow_store_map_grows_total", "counter",
         "Times the map grew because it was full.",
         static_cast<double>(s.store.map_grows));
  single(out, "escrow_store_live_bytes", "gauge",
         "Bytes of the pages the tables use (what storage.max-size caps).",
         static_cast<double>(s.store.live_bytes));
  single(out, "escrow_store_disk_free_bytes", "gauge",
         "Free space of the disk holding the store.",
         static_cast<double>(s.store.disk_free_bytes));
  single(out, "escrow_store_refusing_sends", "gauge",
         "1 while new messages are refused (storage.max-size or storage.min-free-disk reached).",
         s.store.refusing_sends ? 1 : 0);
}

}  // namespace

std::string write_prometheus(const metrics_snapshot& s) {
  std::string out;
  out.reserve(4096 + 1024 * s.queues.size());
  write_broker(out, s);
  write_queues(out, s);
  write_undelivered(out, s);
  write_transactions(out, s);
  write_coordinator(out, s);
  write_store(out, s);
  return out;
}

}  // namespace escrow::broker
