// A producer sends messages to one destination (`/queue/NAME` or `/topic/NAME`) with defaults for
// persistence, priority, time to live and application headers that each message may override.
// By default every send waits for the broker's RECEIPT (producer acknowledgement: a persistent
// message is durable when send() returns). Obtained from connection::create_producer().
//
// Thread safety: a producer may be used from several threads at once.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "escrow/client_message.h"

namespace escrow::client {
namespace detail {
class session;
}
class transaction;

struct producer_options {
  std::string destination{};  // required: /queue/NAME or /topic/NAME
  bool persistent = true;   // the `persistent` header (as in JMS, persistent by default)
  int priority = 4;         // 0..9, higher is delivered first
  std::chrono::milliseconds time_to_live{0};  // 0 = never expires; else expires = now + ttl
  // Wait for the RECEIPT of each send (the broker has stored it). false: fire and forget; a
  // refused send then surfaces as an error on a later call, because the broker closes the
  // connection with an ERROR frame.
  bool wait_for_receipt = true;
  std::vector<std::pair<std::string, std::string>> headers{};  // added to every message
};

class producer {
 public:
  producer(producer&&) noexcept = default;
  producer& operator=(producer&&) noexcept = default;

  // Sends one message. Throws client::error: invalid_argument (bad priority, reserved header
  // name), broker_error (the broker refused it: its message), connection_lost, timeout.
  void send(const outgoing_message& m);
  // The same, inside a local transaction: nobody sees the message until tx.commit().
  void send(const outgoing_message& m, transaction& tx);

  const producer_options& options() const { return options_; }

 private:
  friend class connection;
  producer(std::shared_ptr<detail::session> s, producer_options o);
  void send(const outgoing_message& m, const std::string* transaction_id);

  std::shared_ptr<detail::session> session_;
  producer_options options_;
};

}  // namespace escrow::client
