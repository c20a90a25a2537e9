// The core of a client connection (internal): the transport, the reader thread that parses what
// the broker sends and dispatches it (RECEIPT and ERROR to waiting calls, MESSAGE to inboxes),
// the optional heart-beat thread, receipts in flight, and the first failure, which wakes every
// waiter. The public classes (connection, producer, consumer, transaction) are thin wrappers that
// share one session through a shared_ptr.
//
// Thread safety: every member function may be called from any thread. Two mutexes:
//   write_mutex_ serialises writes to the transport;
//   mutex_ guards everything else (the members marked below) and goes with the one condition
//     variable cv_, notified on every change a waiter might wait for.
// Lock order: write_mutex_ before mutex_; nothing ever writes while holding mutex_ (a write may
// block, and the reader must stay free to drain the socket).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "escrow/client.h"
#include "transport.h"

namespace escrow::client::detail {

using clock_type = std::chrono::steady_clock;

// The messages delivered to one subscription and not yet taken, and the acknowledgement ids of
// those taken but not yet acknowledged, in delivery order. Guarded by the session's mutex_,
// except ack_mutex, which a consumer holds from choosing an ACK to writing it, so that ACKs go on
// the wire in delivery order (a cumulative ACK followed by an older one would be an ERROR).
// Lock order: ack_mutex, then write_mutex_ / mutex_.
struct inbox {
  std::deque<frame> messages;
  std::deque<std::string> unacked;
  bool closed = false;  // the consumer closed: receive() and the callback thread stop
  bool lazy = false;    // DUPS_OK: the session flushes unacked at close
  std::mutex ack_mutex;
};

class session {
 public:
  // Connects and waits for CONNECTED. Throws client::error.
  static std::shared_ptr<session> open(const connect_options& options);
  ~session();

  const connect_options& options() const { return options_; }
  const frame& connected() const { return connected_; }

  // Adds a fresh receipt header, sends, waits for the RECEIPT. Throws client::error.
  frame call(frame request, std::chrono::milliseconds timeout);
  // Sends without a receipt. Throws client::error (connection_lost).
  void send(const frame& f);

  // A connection-unique name: prefix + serial number.
  std::string next_id(const char* prefix);

  // Registers the inbox for subscription `id` before SUBSCRIBE is sent (so no MESSAGE is lost).
  void add_inbox(const std::string& id, std::shared_ptr<inbox> box);
  void remove_inbox(const std::string& id);

  // Waits until `ready()` is true, the connection fails, or `deadline`; called with `lock` held
  // on mutex(). Returns ready().
  template <typename Ready>
  bool wait_until(std::unique_lock<std::mutex>& lock, clock_type::time_point deadline, Ready ready) {
    return cv_.wait_until(lock, deadline, [&] { return ready() || failure_.has_value(); });
  }
  std::mutex& mutex() { return mutex_; }
  void notify() { cv_.notify_all(); }

  // REQUIRES: mutex() held. The error a new call gets now, if the connection is gone.
  std::optional<error> closed_error_locked() const;
  // Throws closed_error_locked() if there is one. REQUIRES: mutex() held.
  void throw_if_closed_locked() const;
  // REQUIRES: mutex() held. The failure that woke waiters (broker_error or connection_lost).
  const std::optional<error>& failure_locked() const { return failure_; }

  void set_lost_listener(std::function<void(const error&)> listener);
  bool is_open() const;
  // DUPS_OK: a cumulative ACK (no receipt) of the newest id in box.unacked, if any. Takes
  // box.ack_mutex. Throws client::error (connection_lost).
  void flush_lazy_ack(inbox& box);
  // DUPS_OK acknowledgements, DISCONNECT with receipt, shutdown, join. Idempotent, no throw.
  void close();

 private:
  explicit session(connect_options options);
  void start(std::unique_ptr<transport> t);
  void read_loop();
  void heartbeat_loop();
  void dispatch(frame f);
  // Records the first failure, wakes every waiter, shuts the transport down, tells the listener.
  void fail(error e, bool notify_listener = true);
  bool write(std::string_view bytes, std::string* why);
  void flush_lazy_acks();

  const connect_options options_;
  std::unique_ptr<transport> transport_;  // set before the threads start, reset after they end
  frame connected_;                       // written once before open() returns

  std::mutex write_mutex_;
  std::atomic<std::int64_t> last_write_ns_{0};
  std::atomic<std::int64_t> last_read_ns_{0};
  std::atomic<std::uint64_t> serial_{0};

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  // Guarded by mutex_:
  bool connected_seen_ = false;
  bool close_started_ = false;                              // close() was called
  bool closing_ = false;                                    // close() is past DISCONNECT
  std::optional<error> failure_;                           // the first failure; set once
  std::map<std::string, std::optional<frame>> pending_;    // receipt id -> RECEIPT or ERROR
  std::map<std::string, std::shared_ptr<inbox>> inboxes_;  // subscription id -> inbox
  std::function<void(const error&)> lost_listener_;
  std::chrono::milliseconds send_interval_{0}, receive_interval_{0};  // negotiated heart-beats

  std::mutex join_mutex_;  // serialises joining the threads (close() and the destructor)
  std::thread reader_;
  std::thread heartbeat_;
};

// Milliseconds, for messages.
std::string describe(std::chrono::milliseconds d);

}  // namespace escrow::client::detail
