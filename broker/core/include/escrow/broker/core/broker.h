// The broker core: addresses (queues and topics), subscriptions, deliveries and acknowledgements.
// All of this state is owned by one strand (the core executor); nothing here takes a lock. The
// network side (sessions, on Asio I/O threads) calls the on_* entry points from any thread; each
// posts its work to the core strand. Durable changes go to the store's committer as batches, and
// their completions come back to the core strand before anything that depends on them is visible
// to a client (durability points 1 and 2 of DESIGN.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "escrow/broker/config/config.h"
#include "escrow/broker/core/admin_core.h"
#include "escrow/frame.h"
#include "escrow/storage/status.h"
#include "escrow/broker/core/outbound.h"

namespace boost::asio {
class io_context;
}
namespace escrow::storage {
class store;
}

namespace escrow::broker {

struct metrics_snapshot;

// What a session learned from CONNECT and negotiated with the client.
struct connect_info {
  stomp_version version = stomp_version::v1_2;
  std::string client_id;
  std::string login;
  std::uint64_t heartbeat_send_ms = 0;     // negotiated: server to client
  std::uint64_t heartbeat_receive_ms = 0;  // negotiated: client to server
  // TLS with client certificates: the verified certificate's subject (RFC 2253), "" otherwise.
  std::string peer_certificate_subject;
  std::string peer;                // "IP:PORT", for logs and the admin command
  std::string user;                // who logged in; "" when anonymous (no users file)
  std::vector<std::string> roles;  // the user's roles (security.h)
};

class authenticator;
struct users_table;

// The answer to an ADMIN command asked over HTTP (the console's API, broker/admin/console_api.cpp).
struct http_admin_answer {
  bool denied = false;    // the user lacks the permission the command needs: `message` says which
  std::string message;
  admin_outcome outcome;  // when not denied
};

class broker {
 public:
  broker(boost::asio::io_context& io, storage::store& store, const broker_config& config);
  ~broker();
  broker(const broker&) = delete;
  broker& operator=(const broker&) = delete;

  // Loads queues and durable subscriptions from storage (not their messages: those stay in LMDB
  // until a consumer needs them). Call once, before the first connection.
  storage::status open();
  // Stops and joins the broker's own threads that read the store (the depth count after open, a
  // running `escrow backup`, which is waited for). Call once the I/O pool has stopped and before
  // the store is closed: they must not outlive it.
  void stop_store_readers();

  // Logins are checked by `a` (which must outlive the broker); without one, everyone is anonymous
  // with every permission. Call before the first connection.
  void use_authenticator(authenticator* a);
  authenticator* authentication() const;  // null when anonymous. Thread-safe.

  // ADMIN frames are answered by `h` (broker/admin: handle_admin_command), which sees the core
  // through admin_core.h; without one every ADMIN frame is answered invalid. Call before the first
  // connection.
  void use_admin(admin_handler h);

  // Runs the ADMIN command `f` (its admin-command and argument headers) for a console user, with
  // the permission checks of an ADMIN frame from a connection logged in as `user` with `roles`;
  // `done` is called on the core strand and must not block. Thread-safe.
  void run_admin(std::string user, std::vector<std::string> roles, frame f,
                 std::function<void(http_admin_answer)> done);
  // Whether a user with `roles` holds the admin permission on the broker (what the console
  // offers an operator); `done` is called on the core strand and must not block. Thread-safe.
  void holds_admin(std::vector<std::string> roles, std::function<void(bool)> done);

  // A fresh id for a new connection. Thread-safe.
  std::uint64_t new_connection_id();

  // The session accepted CONNECT: the core answers CONNECTED through `out`.
  void on_connect(std::uint64_t connection_id, std::shared_ptr<outbound> out, connect_info info);
  // Whether the session of `connection_id` should stop reading for now: more than
  // limits.max-unstored-bytes of received frames wait for the core or for the disk, and this
  // connection (or its user) holds more than its share of them; above twice the limit, every
  // session stops (docs/security.md, "Limits"). Thread-safe.
  bool reading_paused(std::uint64_t connection_id) const;
  // The memory alarm (limits.memory-high-watermark) is set: sessions stop reading from the
  // connections that send (docs/security.md, "Limits"). Thread-safe.
  bool memory_alarm_set() const;
  // A SEND of `connection_id` waits for room in a full queue (address-full-policy BLOCK): its
  // session stops reading it until the SEND is taken (docs/stomp.md, "Full queues"). Thread-safe.
  bool sends_blocked(std::uint64_t connection_id) const;
  // The graceful stop: from now on no session hands the core another frame (what it reads is
  // dropped), so that the last writes and their receipts are a closed set. Thread-safe.
  void stop_input();
  bool input_stopped() const;

  // Frames after CONNECT, in arrival order (all those one read brought).
  void on_frames(std::uint64_t connection_id, std::vector<frame> frames);
  // The connection is gone: its unacknowledged messages return to their queues.
  void on_closed(std::uint64_t connection_id);
  // The connection's socket has drained what was pending: deliveries may resume.
  void on_writable(std::uint64_t connection_id);

  // Builds a metrics snapshot on the core strand and calls `done` there with it (the caller posts
  // it on to its own executor; `done` must not block). Thread-safe. Defined in metrics_collect.cpp.
  void collect_metrics(std::function<void(metrics_snapshot)> done);

  // Calls `done` (on the core strand; it must not block) once every write submitted before this
  // call has completed and the answers it brought (receipts, ERRORs) are handed to their sessions:
  // the graceful stop's last step before it closes the connections. Thread-safe.
  void after_stored(std::function<void()> done);

  // The listeners as bound ("HOST:PORT", " (tls)" appended), for `escrow status`. Thread-safe.
  void set_listeners(std::vector<std::string> listeners);

  // SIGHUP: takes what can change at run time from `fresh` (address settings, the reaper's period,
  // persist-delivery-count-before-delivery) and logs what changed. Thread-safe (posts to the core).
  void reload(const broker_config& fresh);
  // At start and at each SIGHUP, once the users file is read: warns about each user that is not in
  // `users` but still owns durable subscriptions or transaction branches, which a new user of that
  // name would own (ownership is by name). `when` starts each line ("SIGHUP", "at start").
  // Thread-safe (posts to the core).
  void warn_about_owners_gone(std::shared_ptr<const users_table> users, std::string when);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace escrow::broker
