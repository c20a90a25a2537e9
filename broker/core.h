// Internal to broker/: the core's state and the helpers its frame handlers share. Everything here
// is touched only on the core strand. broker.cpp holds connection lifecycle and frame dispatch,
// send.cpp routing and SEND, subscribe.cpp SUBSCRIBE/UNSUBSCRIBE, delivery.cpp MESSAGE, ACK, NACK.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker.h"
#include "escrow/storage/batch.h"
#include "queue.h"

namespace escrow::broker {

enum class ack_mode { auto_ack, client, client_individual };

struct connection;

// A message handed to a consumer and not yet acknowledged.
struct delivery {
  queue_ptr source;
  queue_entry entry;
};

struct subscription {
  std::string id;
  connection* owner = nullptr;
  queue_ptr source;
  ack_mode mode = ack_mode::auto_ack;
  std::uint32_t window = 0;                // most unacknowledged messages at once
  std::map<std::uint64_t, delivery> unacked;  // by ack tag, in delivery order
};

struct connection {
  std::uint64_t id = 0;
  std::shared_ptr<outbound> out;
  connect_info info;
  std::map<std::string, std::unique_ptr<subscription>> subscriptions;  // by subscription id
  std::unordered_map<std::uint64_t, subscription*> tag_owner;         // ack tag -> subscription
  std::uint64_t next_tag = 1;
  bool input_closed = false;   // ERROR or DISCONNECT: later frames are ignored
  bool output_closed = false;  // ERROR sent or connection gone: nothing more is written
  std::string outbox;          // frames encoded during this core turn, sent at its end
};
using connection_ptr = std::shared_ptr<connection>;

// A topic: every subscription (durable or not) gets a copy of each message.
struct topic {
  std::vector<queue_ptr> subscriptions;
};

struct broker::impl {
  impl(boost::asio::io_context& io, storage::store& store, const broker_config& config);

  storage::store& store;
  broker_config config;
  std::atomic<std::uint64_t> next_connection_id{1};

  // --- core strand state ---
  std::map<std::string, queue_ptr> queues;  // by storage name ("q/NAME", "d/CLIENT\0SUB")
  std::map<std::string, topic> topics;      // by topic name
  std::unordered_map<std::uint64_t, connection_ptr> connections;
  std::vector<connection_ptr> dirty;  // connections with frames in their outbox
  std::uint64_t next_message_id = 1;
  std::uint32_t next_queue_id = 1;

  // Runs a function on the core strand; set up by broker.cpp, which owns the Asio strand.
  std::function<void(std::function<void()>)> post;
  // Submits a batch; `done` runs on the core strand with the outcome, then outboxes are flushed.
  void submit(storage::batch b, std::function<void(const storage::status&)> done);
  // Sends every outbox filled during this core turn.
  void flush();

  // Frame handlers (one per command family).
  void handle_frame(const connection_ptr& c, frame& f);
  void handle_send(const connection_ptr& c, frame& f);
  void handle_subscribe(const connection_ptr& c, const frame& f);
  void handle_unsubscribe(const connection_ptr& c, const frame& f);
  void handle_ack(const connection_ptr& c, const frame& f, bool positive);
  void handle_disconnect(const connection_ptr& c, const frame& f);

  // Output.
  void write(connection& c, const frame& f);
  void receipt(connection& c, const frame& request);
  void receipt_after(const connection_ptr& c, const frame& request, storage::batch b);
  // Sends ERROR naming `problem` (with receipt-id when `request` asked for one) and closes.
  void error(connection& c, const std::string& problem, const frame* request = nullptr,
             const std::string& detail = {});

  // Queues.
  queue_ptr find_or_create_queue(const std::string& name, storage::batch& b);
  void persist_queue_record(queue& q, storage::batch& b);
  void drop_durable_queue(const queue_ptr& q, storage::batch& b);

  // Delivery.
  void dispatch(const queue_ptr& q);
  bool load_message(queue_entry& e);
  // Returns a delivery to its queue for redelivery (delivery count raised, persisted when stored).
  void requeue(delivery d, storage::batch& b);
  void detach(subscription& s, storage::batch& b);
};

// Milliseconds since the epoch, the unit of `expires` and `timestamp`.
std::uint64_t now_ms();

}  // namespace escrow::broker
