// producer: builds SEND frames from the producer's defaults and the message's overrides, checks
// them before anything goes on the wire, and waits for the RECEIPT unless told not to.
#include <array>

#include "validate.h"
#include "session.h"

namespace escrow::client {
namespace {

std::int64_t epoch_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void check_priority(int priority) {
  if (priority < 0 || priority > 9)
    throw error(error::kind::invalid_argument,
                "priority " + std::to_string(priority) + " is out of range: use 0 (lowest) to 9 (highest)");
}

// Names the protocol or the broker owns; an application header by one of them would be dropped
// or, worse, change what the frame means.
void check_header_name(const std::string& name) {
  static constexpr std::array<std::string_view, 14> kReserved = {
      "destination", "receipt",      "transaction",    "content-length", "message-id", "subscription", "ack",
      "redelivered", "delivery-count", "persistent", "priority",     "expires",        "content-type", "id"};
  if (name.empty()) throw error(error::kind::invalid_argument, "a message header has an empty name");
  for (auto r : kReserved)
    if (name == r)
      throw error(error::kind::invalid_argument,
                  "header '" + name + "' is set by the library: use the producer or outgoing_message field for it");
}

}  // namespace

producer::producer(std::shared_ptr<detail::session> s, producer_options o)
    : session_(std::move(s)), options_(std::move(o)) {
  detail::check_destination(options_.destination);
  check_priority(options_.priority);
  if (options_.time_to_live.count() < 0)
    throw error(error::kind::invalid_argument, "producer time_to_live is negative: use 0 for never");
  for (const auto& [name, value] : options_.headers) check_header_name(name);
}

void producer::send(const outgoing_message& m) { send(m, static_cast<const std::string*>(nullptr)); }

void producer::send(const outgoing_message& m, transaction& tx) {
  if (!tx.active())
    throw error(error::kind::invalid_argument, "transaction " + tx.id() + " was already committed or rolled back");
  send(m, &tx.id());
}

void producer::send(const outgoing_message& m, const std::string* transaction_id) {
  int priority = m.priority.value_or(options_.priority);
  check_priority(priority);
  auto ttl = m.time_to_live.value_or(options_.time_to_live);
  if (ttl.count() < 0) throw error(error::kind::invalid_argument, "time_to_live is negative: use 0 for never");
  std::int64_t expires = 0;
  if (m.expires_at_ms) {
    if (*m.expires_at_ms < 0) throw error(error::kind::invalid_argument, "expires_at_ms is negative: use 0 for never");
    expires = *m.expires_at_ms;
  } else if (ttl.count() > 0) {
    expires = epoch_ms_now() + ttl.count();
  }

  frame f;
  f.command = "SEND";
  f.add("destination", options_.destination);
  if (transaction_id) f.add("transaction", *transaction_id);
  f.add("persistent", m.persistent.value_or(options_.persistent) ? "true" : "false");
  f.add("priority", std::to_string(priority));
  if (expires != 0) f.add("expires", std::to_string(expires));
  if (!m.content_type.empty()) f.add("content-type", m.content_type);
  // The message's own headers first: the first occurrence of a name wins.
  for (const auto& [name, value] : m.headers) {
    check_header_name(name);
    f.add(name, value);
  }
  for (const auto& [name, value] : options_.headers) f.add(name, value);
  f.add("content-length", std::to_string(m.body.size()));
  f.body = m.body;
  if (options_.wait_for_receipt)
    session_->call(std::move(f), session_->options().timeout);
  else
    session_->send(f);
}

}  // namespace escrow::client
