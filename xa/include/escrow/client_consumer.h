// A consumer is one STOMP subscription: a queue, a topic, or a durable topic subscription, with
// an acknowledgement mode (OpenMQ's modes mapped onto STOMP's, see ack_mode) and a flow-control
// window. Messages are taken either synchronously with receive(timeout) or by a callback that
// runs on the consumer's own thread. Obtained from connection::create_consumer().
//
// Thread safety: all calls may be made from several threads at once (two threads receiving from
// one consumer each get different messages). A callback runs on the consumer's thread, one
// message at a time, in order; it may call anything in the library, including close() of its own
// consumer (which then stops after the callback returns), but it must not destroy its consumer.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "escrow/client_message.h"

namespace escrow::client {
namespace detail {
class session;
struct inbox;
}  // namespace detail
class transaction;

// OpenMQ's acknowledgement modes and the STOMP `ack` mode each uses.
enum class ack_mode {
  // Each message is acknowledged once processed (sync: before receive() returns it; callback:
  // after the callback returns), and the library waits for the broker's RECEIPT.
  // STOMP client-individual.
  auto_acknowledge,
  // The application calls acknowledge(m): every message this consumer received up to m is
  // acknowledged (cumulative), waiting for the RECEIPT. STOMP client.
  client_acknowledge,
  // The application calls acknowledge(m): only m is acknowledged, waiting for the RECEIPT.
  // STOMP client-individual.
  individual_acknowledge,
  // Acknowledged lazily, in batches of dups_ok_batch messages (and whenever receive() is about
  // to wait, and at close), without waiting for receipts: fast, never loses a message, but a
  // broken connection may redeliver up to a batch. STOMP client.
  dups_ok_acknowledge,
  // The broker counts a message as acknowledged when it writes it: fastest, a message in flight
  // when the connection breaks is lost. STOMP auto.
  no_acknowledge,
};

// "auto", "client", "client-individual": the STOMP ack header a mode subscribes with.
const char* stomp_ack_header(ack_mode m);

struct consumer_options {
  std::string destination{};  // required: /queue/NAME or /topic/NAME
  ack_mode mode = ack_mode::auto_acknowledge;
  // On a /topic/: a durable subscription with this name (together with connect_options::
  // client_id, which must then be set). Sent as durable-subscription-name.
  std::string durable_name{};
  // Most unacknowledged messages the broker hands this consumer at once (prefetch-count);
  // 0 = the broker's default window.
  std::uint32_t prefetch = 0;
  std::size_t dups_ok_batch = 10;  // for dups_ok_acknowledge: acknowledge every N messages
  std::vector<std::pair<std::string, std::string>> headers{};  // extra SUBSCRIBE headers
};

class consumer {
 public:
  using callback = std::function<void(const message&)>;

  consumer(const consumer&) = delete;
  consumer& operator=(const consumer&) = delete;
  // close(), best-effort (errors swallowed).
  ~consumer();

  // The next message, waiting at most `timeout`; nullopt when none came in time. Throws
  // client::error: connection_lost (the connection broke or closed: waiting calls wake at once),
  // broker_error, timeout (of the acknowledgement in auto_acknowledge mode), invalid_argument
  // (this is a callback consumer, or it is closed).
  std::optional<message> receive(std::chrono::milliseconds timeout);

  // For client_acknowledge (cumulative) and individual_acknowledge (just m): ACK with a receipt
  // and wait for it. Throws client::error; invalid_argument in the other modes.
  void acknowledge(const message& m);
  // The same inside a local transaction: takes effect at tx.commit(); tx.rollback() returns the
  // message to its queue with `redelivered` set.
  void acknowledge(const message& m, transaction& tx);
  // NACK (client modes): the message goes back to its queue for redelivery (for client_acknowledge
  // with every earlier unacknowledged one). Waits for the RECEIPT.
  void reject(const message& m);

  // Messages delivered by the broker but not yet handed to the application.
  std::size_t buffered() const;

  // Sends outstanding lazy acknowledgements, UNSUBSCRIBE (a durable subscription stays, only
  // detached) and waits for its RECEIPT; stops the callback thread. Unacknowledged messages
  // return to the queue. Idempotent. Throws client::error if the broker could not be told.
  void close();
  // Ends a durable subscription for good (its stored messages are deleted), then closes.
  // REQUIRES: durable_name set.
  void unsubscribe_durable();

  const consumer_options& options() const { return options_; }
  const std::string& id() const { return id_; }  // the STOMP subscription id

 private:
  friend class connection;
  consumer(std::shared_ptr<detail::session> s, consumer_options o, callback cb);
  void subscribe();
  // The next delivered message (recording its ack id), or nullopt at `deadline`.
  std::optional<frame> take(std::chrono::steady_clock::time_point deadline);
  void processed(const message& m);  // the mode's acknowledgement once m has been processed
  // Sends ACK or NACK for `ack_id` with a receipt and waits; false if an earlier cumulative one
  // already covered it.
  bool settle(const char* command, const std::string& ack_id, const std::string* transaction_id);
  void reject_lazy(const message& m);
  void check_client_mode(const char* what) const;
  void run_callbacks();
  void stop(bool durable_unsubscribe);

  std::shared_ptr<detail::session> session_;
  consumer_options options_;
  std::string id_;
  std::shared_ptr<detail::inbox> inbox_;
  callback callback_;
  std::thread callback_thread_;
};

}  // namespace escrow::client
