// /status: a metrics snapshot as one JSON object (json.h). Pure: no I/O, no state.
// docs/operations.md shows an example.
#include "json.h"
#include "escrow/broker/admin/metrics_text.h"

namespace escrow::broker {

std::string write_status_json(const metrics_snapshot& s) {
  // Over every queue, whether or not it is listed below.
  std::uint64_t queue_count = 0;
  for (const auto& [kind, n] : s.totals.queues_by_kind) queue_count += n;
  json::object branches;
  for (const auto& [state, n] : s.branches_by_state) branches[state] = n;
  json::array queues;
  for (const auto& q : s.queues)
    queues.push_back(json::object{{"name", q.name}, {"kind", q.kind}, {"depth", q.depth}, {"in_flight", q.in_flight},
                                  {"consumers", q.consumers}, {"enqueued", q.enqueued}, {"delivered", q.delivered},
                                  {"acknowledged", q.acknowledged}, {"expired", q.expired},
                                  {"dead_lettered", q.dead_lettered}, {"redelivered", q.redelivered},
                                  {"dropped", q.dropped}, {"replaced", q.replaced}});
  json::object ws_events;
  for (const auto& [reason, n] : s.websocket_events) ws_events[reason] = n;
  return to_json(json::object{
             {"version", s.version},
             {"uptime_seconds", json_seconds(s.uptime_seconds)},
             {"listeners", json::array(s.listeners.begin(), s.listeners.end())},
             {"listeners_up", s.listeners_up},
             {"connections", s.connections},
             {"websocket", {{"accepted", s.websocket_accepted}, {"open", s.websocket_open}, {"events", std::move(ws_events)}}},
             {"store", {{"writable", s.store.writable}, {"commits", s.store.commits}, {"batches", s.store.batches},
                        {"map_size_bytes", s.store.map_size_bytes}, {"map_used_bytes", s.store.map_used_bytes},
                        {"file_bytes", s.store.file_bytes}, {"log_bytes", s.store.log_bytes},
                        {"log_size_bytes", s.store.log_size_bytes}, {"log_used_bytes", s.store.log_used_bytes}, {"live_bytes", s.store.live_bytes},
                        {"disk_free_bytes", s.store.disk_free_bytes}, {"refusing_sends", s.store.refusing_sends}}},
             {"totals", {{"queues", queue_count}, {"enqueued", s.totals.enqueued},
                         {"acknowledged", s.totals.acknowledged}, {"depth", s.totals.depth},
                         {"in_flight", s.totals.in_flight}, {"expired", s.expired},
                         {"expired_dropped", s.expired_dropped}, {"dead_lettered", s.dead_lettered},
                         {"dead_letters_dropped", s.dead_letters_dropped}, {"failed_logins", s.failed_logins}}},
             {"branches", std::move(branches)},
             {"coordinator", {{"live", s.coordinated_live}, {"pending_decisions", s.coordinated_decisions},
                              {"committed", s.coordinated_committed}, {"answered_pending", s.coordinated_pending},
                              {"rolled_back", s.coordinated_rolled_back}, {"unprepared", s.coordinated_unprepared},
                              {"recovered_commits", s.coordinated_recovered_commits},
                              {"recovered_rollbacks", s.coordinated_recovered_rollbacks}}},
             {"xa_oldest_prepared_age_seconds", json_seconds(s.oldest_prepared_age_seconds)},
             {"queues_omitted", s.queues_omitted},
             {"queues", std::move(queues)}}) +
         "\n";
}

}  // namespace escrow::broker
