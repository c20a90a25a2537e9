// escrow queues, queue show, browse, purge, move.
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <iostream>

#include "admin_call.h"
#include "commands.h"
#include "exit_codes.h"
#include "output.h"

namespace escrow::cli {

namespace {
// How long purge and move wait for their answer: the broker answers once the whole queue is done.
constexpr std::chrono::seconds kSweepTimeout = std::chrono::hours(24);
}  // namespace

void run_queues(const settings& s, const output_options& o) {
  admin_answer a = admin_list(s, "queues", {"queues"});
  if (print_json(o, a)) return;
  table t({"NAME", "KIND", "DEPTH", "SCHEDULED", "IN-FLIGHT", "CONSUMERS", "ENQUEUED", "ACKED", "EXPIRED",
           "DEAD-LETTERED", "OLDEST"});
  for (const auto& q : array(a.json, "queues"))
    t.add({text(q, "name"), text(q, "kind"), text(q, "depth"), text(q, "scheduled"), text(q, "in_flight"),
           text(q, "consumers"),
           text(q, "enqueued"), text(q, "acknowledged"), text(q, "expired"), text(q, "dead_lettered"),
           age(q, "oldest_age_ms")});
  t.print(std::cout);
}

void run_queue_show(const settings& s, const output_options& o, const std::string& name) {
  admin_answer a = admin_call(s, "queue-show", {{"name", name}});
  if (print_json(o, a)) return;
  const auto& q = a.json;
  const auto& st = q.at("settings");
  std::cout << "name                   " << text(q, "name") << "\n"
            << "kind                   " << text(q, "kind") << (text(q, "topic").empty() ? "" : " of /topic/" + text(q, "topic")) << "\n"
            << "depth                  " << text(q, "depth") << "\n"
            << "bytes                  " << text(q, "bytes") << "\n"
            << "in flight              " << text(q, "in_flight") << "\n"
            << "consumers              " << text(q, "consumers") << "\n"
            << "oldest message         " << age(q, "oldest_age_ms") << "\n"
            << "since start            " << text(q, "enqueued") << " enqueued, " << text(q, "delivered")
            << " delivered, " << text(q, "acknowledged") << " acknowledged, " << text(q, "redelivered")
            << " redelivered, " << text(q, "expired") << " expired, " << text(q, "dead_lettered") << " dead-lettered\n"
            << "dead-letter-address    " << text(st, "dead_letter_address") << "\n"
            << "max-delivery-attempts  " << text(st, "max_delivery_attempts") << "\n"
            << "expiry-address         " << text(st, "expiry_address") << "\n"
            << "max-size-messages      " << text(st, "max_size_messages") << "\n"
            << "max-size-bytes         " << text(st, "max_size_bytes") << "\n"
            << "address-full-policy    " << text(st, "address_full_policy") << "\n"
            << "ring-size              " << text(st, "ring_size") << "\n";
  const auto& consumers = array(q, "consumers_detail");
  if (consumers.empty()) return;
  std::cout << "\n";
  table t({"CONNECTION", "SUBSCRIPTION", "ACK", "IN-FLIGHT", "PRIORITY", "EXCLUSIVE", "RECEIVING", "GROUPS"});
  for (const auto& c : consumers) {
    std::string groups = text(c, "groups");
    for (const auto& g : array(c, "group_ids")) groups += (groups.size() == text(c, "groups").size() ? " " : ",") + std::string(g.as_string());
    t.add({text(c, "connection"), text(c, "subscription"), text(c, "ack"), text(c, "in_flight"), text(c, "priority"),
           text(c, "exclusive"), text(c, "receiving"), groups});
  }
  t.print(std::cout);
}

void run_reset_groups(const settings& s, const output_options& o, const std::string& name, const std::string& group) {
  admin_args args{{"name", name}};
  if (!group.empty()) args.emplace_back("group", group);
  admin_answer a = admin_call(s, "group-reset", args);
  if (print_json(o, a)) return;
  std::cout << "released " << count_of(number(a.json, "released"), "message group") << " of " << text(a.json, "queue")
            << "\n";
}

namespace {

// "2026-12-02 14:05:00 UTC (in 3 min)": a scheduled delivery time, for people.
std::string delivery_time(std::uint64_t at_ms, std::uint64_t now_ms) {
  std::time_t t = static_cast<std::time_t>(at_ms / 1000);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
  std::string rel = at_ms > now_ms ? "in " + age_ms(at_ms - now_ms) : "due";
  return std::string(when) + " (" + rel + ")";
}

void print_scheduled(const boost::json::value& messages) {
  auto now = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  table t({"ID", "DELIVER AT", "PRIORITY", "STORED", "BYTES", "BODY"});
  for (const auto& m : messages.as_array()) {
    std::string when = delivery_time(number(m, "deliver_at"), now);
    if (m.as_object().contains("expires_first") && m.at("expires_first").as_bool())
      when += ", expires first";
    t.add({text(m, "message_id"), when, text(m, "priority"), text(m, "stored"), text(m, "body_bytes"),
           shorten(text(m, "body"), 40)});
  }
  t.print(std::cout);
}

}  // namespace

void run_browse(const settings& s, const output_options& o, const std::string& name, std::size_t count) {
  admin_answer a = admin_call(s, "browse", {{"name", name}, {"count", std::to_string(count)}});
  if (print_json(o, a)) return;
  table t({"ID", "PRIORITY", "DELIVERIES", "STATE", "AGE", "ORIGIN", "BYTES", "BODY"});
  auto now = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  for (const auto& m : array(a.json, "messages")) {
    std::uint64_t ts = number(m, "timestamp");
    std::string origin = m.is_object() && m.as_object().contains("headers") ? text(m.at("headers"), "_HQ_ORIG_ADDRESS") : "";
    t.add({text(m, "message_id"), text(m, "priority"), text(m, "delivery_count"), text(m, "state"),
           ts ? age_ms(now > ts ? now - ts : 0) : "-", origin, text(m, "body_bytes"), shorten(text(m, "body"), 40)});
  }
  t.print(std::cout);
  if (a.json.is_object() && a.json.as_object().contains("scheduled") && !a.json.at("scheduled").as_array().empty()) {
    std::cout << "\nscheduled (not delivered before their time):\n";
    print_scheduled(a.json.at("scheduled"));
  }
}


void run_scheduled_list(const settings& s, const output_options& o, const std::string& name, std::size_t count) {
  admin_answer a = admin_call(s, "scheduled", {{"name", name}, {"count", std::to_string(count)}});
  if (print_json(o, a)) return;
  std::cout << text(a.json, "queue") << ": " << count_of(number(a.json, "scheduled"), "scheduled message") << "\n";
  if (!array(a.json, "messages").empty()) print_scheduled(a.json.at("messages"));
}

void run_scheduled_end(const settings& s, const output_options& o, const std::string& name, bool deliver,
                       const std::string& ids, bool all) {
  if (ids.empty() && !all) throw failure(exit_usage, "give --id IDS or --all");
  admin_args args{{"name", name}, {"action", deliver ? "deliver" : "delete"}};
  if (all) args.emplace_back("all", "true");
  else args.emplace_back("id", ids);
  admin_answer a = admin_call(s, "scheduled", args);
  if (print_json(o, a)) return;
  std::cout << (deliver ? "delivered " : "deleted ")
            << count_of(number(a.json, deliver ? "delivered" : "deleted"), "scheduled message") << " of "
            << text(a.json, "queue");
  if (a.json.at("more").as_bool()) std::cout << "; more are scheduled (escrow scheduled list " << name << ")";
  std::cout << "\n";
}

void run_purge(const settings& s, const output_options& o, const std::string& name, bool yes) {
  if (!yes) {
    if (!isatty(STDIN_FILENO))
      throw failure(exit_usage, "purge deletes messages for good: add --yes to purge " + name +
                                    " without a terminal to ask on");
    std::cerr << "Delete every ready message of " << name << " for good? Type the queue name to confirm: ";
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != name) throw failure(exit_failed, "not confirmed: nothing was purged");
  }
  // A purge goes through the queue in slices and answers when it is done: on a long queue that
  // takes longer than the usual timeout.
  admin_answer a = admin_call(s, "purge", {{"name", name}}, kSweepTimeout);
  if (print_json(o, a)) return;
  std::cout << "purged " << count_of(number(a.json, "purged"), "message") << " from " << text(a.json, "queue");
  if (auto held = number(a.json, "held_left"))
    std::cout << "; " << held << " in flight or in a transaction stay (they return if not acknowledged)";
  std::cout << "\n";
}

void run_move(const settings& s, const output_options& o, const std::string& from, const std::string& to,
              const std::string& filter) {
  admin_args args{{"from", from}, {"to", to}};
  if (!filter.empty()) args.emplace_back("filter", filter);
  admin_answer a = admin_call(s, "move", args, kSweepTimeout);
  if (print_json(o, a)) return;
  std::cout << "moved " << count_of(number(a.json, "moved"), "message") << " from " << text(a.json, "from") << " to "
            << text(a.json, "to");
  if (auto held = number(a.json, "held_skipped")) std::cout << "; " << held << " in flight were skipped";
  std::cout << "\n";
}

}  // namespace escrow::cli
