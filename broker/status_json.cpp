// /status: a metrics snapshot as one JSON object, written by hand (a few fields, no parser needed).
// Pure: no I/O, no state. docs/operations.md shows an example.
#include <fmt/format.h>

#include "metrics.h"

namespace escrow::broker {

namespace {

std::string quoted(std::string_view v) {
  std::string out = "\"";
  for (unsigned char c : v) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);  // UTF-8 passes through as it is
    }
  }
  return out + "\"";
}

}  // namespace

std::string write_status_json(const metrics_snapshot& s) {
  std::string out = "{";
  out += fmt::format("\"version\":{},\"uptime_seconds\":{:.3f},", quoted(s.version), s.uptime_seconds);
  out += "\"listeners\":[";
  for (std::size_t i = 0; i < s.listeners.size(); ++i) out += (i ? "," : "") + quoted(s.listeners[i]);
  out += fmt::format("],\"listeners_up\":{},\"connections\":{},", s.listeners_up, s.connections);
  out += fmt::format(
      "\"store\":{{\"writable\":{},\"commits\":{},\"batches\":{},\"map_size_bytes\":{},\"map_used_bytes\":{},"
      "\"file_bytes\":{},\"live_bytes\":{},\"disk_free_bytes\":{},\"refusing_sends\":{}}},",
      s.store.writable, s.store.commits, s.store.batches, s.store.map_size_bytes, s.store.map_used_bytes,
      s.store.file_bytes, s.store.live_bytes, s.store.disk_free_bytes, s.store.refusing_sends);
  // Over every queue, whether or not it is listed below.
  std::uint64_t queue_count = 0;
  for (const auto& [kind, n] : s.totals.queues_by_kind) queue_count += n;
  out += fmt::format(
      "\"totals\":{{\"queues\":{},\"enqueued\":{},\"acknowledged\":{},\"depth\":{},\"in_flight\":{},"
      "\"expired\":{},\"expired_dropped\":{},\"dead_lettered\":{},\"dead_letters_dropped\":{},\"failed_logins\":{}}},",
      queue_count, s.totals.enqueued, s.totals.acknowledged, s.totals.depth, s.totals.in_flight, s.expired,
      s.expired_dropped, s.dead_lettered, s.dead_letters_dropped, s.failed_logins);
  out += "\"branches\":{";
  bool first = true;
  for (const auto& [state, n] : s.branches_by_state) {
    out += fmt::format("{}{}:{}", first ? "" : ",", quoted(state), n);
    first = false;
  }
  out += fmt::format("}},\"xa_oldest_prepared_age_seconds\":{:.3f},\"queues_omitted\":{},\"queues\":[",
                     s.oldest_prepared_age_seconds, s.queues_omitted);
  for (std::size_t i = 0; i < s.queues.size(); ++i) {
    const auto& q = s.queues[i];
    out += fmt::format(
        "{}{{\"name\":{},\"kind\":{},\"depth\":{},\"in_flight\":{},\"consumers\":{},\"enqueued\":{},"
        "\"delivered\":{},\"acknowledged\":{},\"expired\":{},\"dead_lettered\":{},\"redelivered\":{}}}",
        i ? "," : "", quoted(q.name), quoted(q.kind), q.depth, q.in_flight, q.consumers, q.enqueued, q.delivered,
        q.acknowledged, q.expired, q.dead_lettered, q.redelivered);
  }
  out += "]}\n";
  return out;
}

}  // namespace escrow::broker
