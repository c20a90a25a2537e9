// libescrow: the C++ client library for the Escrow broker (STOMP 1.2). Start here.
//
//   auto c = escrow::client::connection::open({.port = 61613});
//   auto p = c->create_producer({.destination = "/queue/orders"});
//   p.send("order 42");                                   // waits until the broker stored it
//   auto q = c->create_consumer({.destination = "/queue/orders"});
//   if (auto m = q->receive(std::chrono::seconds(5))) use(m->body());
//
// A connection owns one transport (plain TCP, or TLS when connect_options::tls.enabled: both
// implement the internal interface xa/client/transport.h) and one background reader thread that
// dispatches what the broker sends: RECEIPT and ERROR frames to the call waiting for them, MESSAGE
// frames to their consumer. A heart-beat thread runs only when heart-beats are negotiated.
//
// Thread safety: a connection, and the producers, consumers and transactions made from it, may be
// used from several threads at once; every call is safe concurrently with every other, including
// call() while consumers receive. Every blocking call has a timeout (connect_options::timeout
// unless it takes one). When the connection breaks, every waiting call wakes at once with
// error::kind::connection_lost (or broker_error when the broker sent ERROR), and every later call
// fails the same way. Producers, consumers and transactions keep the connection's internals alive,
// so destroying the connection first is safe: they then fail with connection_lost.
//
// Errors: every failure is a client::error (client_error.h) carrying the broker's message.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "escrow/client_consumer.h"
#include "escrow/client_error.h"
#include "escrow/client_message.h"
#include "escrow/client_producer.h"
#include "escrow/client_transaction.h"
#include "escrow/frame.h"

namespace escrow::client {
namespace detail {
class session;
}

// TLS (OpenSSL). By default the broker's certificate must chain to a trusted CA (the system's, or
// ca_file) and name the host connected to (a DNS name, or an IP address in its subjectAltName);
// TLS 1.2 at the least, TLS 1.3 when the broker has it. All files are PEM.
struct tls_options {
  bool enabled = false;
  std::string ca_file{};            // CA certificates to trust; empty: the system's (/etc/ssl/certs)
  std::string certificate_chain{};  // a client certificate (then any intermediates), for mutual TLS
  std::string private_key{};        // its key, unencrypted; empty: read from certificate_chain
  bool verify_peer = true;          // false: no certificate or host name check (tests only: anyone
                                    // in the middle can read and change everything)
  std::string server_name{};        // the name to check the certificate against and send as SNI;
                                    // empty: host
};

struct connect_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 61613;
  std::string login{}, passcode{};  // sent when non-empty
  std::string client_id{};      // sent as client-id on CONNECT when non-empty (durable subscriptions)
  // What we offer to send / want to receive (STOMP heart-beat cx,cy); 0 = off. When the broker
  // is silent for twice the negotiated receive interval (at least one second more than it), the
  // connection counts as lost.
  std::chrono::milliseconds heartbeat_send{0}, heartbeat_receive{0};
  std::chrono::milliseconds timeout{10000};  // connect, and the default per-call timeout
  tls_options tls{};                          // TLS to a [[tls-listener]] of the broker; off by default
};

class connection {
 public:
  // TCP connect, the TLS handshake when options.tls.enabled, CONNECT, wait for CONNECTED, all
  // within options.timeout. Throws client::error: connection_lost (cannot connect, or the TLS
  // handshake failed: says where and why, e.g. "certificate verify failed: ..." or "host name
  // mismatch: ..."), broker_error (the broker refused the CONNECT), timeout, invalid_argument
  // (also: a TLS file that cannot be loaded).
  static std::unique_ptr<connection> open(const connect_options& options);

  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  // close(): DISCONNECT best-effort, then the socket is closed.
  ~connection();

  // Sends `request` with a fresh `receipt` header added (any receipt header it has is replaced),
  // waits for the matching RECEIPT and returns it. Throws client::error: broker_error on an ERROR
  // frame (its message; the connection is then gone), connection_lost, timeout (the request may
  // still take effect later; a late RECEIPT is ignored).
  frame call(frame request, std::chrono::milliseconds timeout);
  frame call(frame request);  // uses options().timeout

  // Sends a frame without asking for a receipt. Throws client::error (connection_lost).
  void send_frame(const frame& f);

  // A producer for one destination. Throws invalid_argument for a bad destination or priority.
  producer create_producer(producer_options options);
  // A consumer for synchronous receive(). Subscribes and waits for the broker's RECEIPT.
  // Throws client::error (invalid_argument: bad options, e.g. durable_name without client_id).
  std::unique_ptr<consumer> create_consumer(consumer_options options);
  // A consumer that hands each message to `on_message` on its own thread.
  std::unique_ptr<consumer> create_consumer(consumer_options options, consumer::callback on_message);

  // Ends the durable subscription `durable_name` of this connection's client_id for good (its
  // stored messages are deleted); it must have no active consumer. Waits for the RECEIPT.
  void unsubscribe(const std::string& durable_name);

  // BEGIN a local transaction (waits for the RECEIPT). Throws client::error.
  transaction begin();

  // Called once, on an internal thread, when the connection breaks (not after close()), before
  // the waiting calls wake. It must return quickly. It may close() the connection, but must not
  // release the last reference to it or to anything made from it (a producer, consumer or
  // transaction; beware a weak_ptr locked in the listener): that aborts the process.
  void on_lost(std::function<void(const error&)> listener);

  // False once the connection is lost or closed.
  bool is_open() const;
  // Flushes lazy acknowledgements, sends DISCONNECT with a receipt and waits for it (at most
  // options.timeout), then closes the socket. Idempotent; never throws.
  void close();

  const connect_options& options() const;
  // What the broker's CONNECTED frame said (version, server, session, heart-beat, xa, ...).
  const frame& connected() const;

 private:
  explicit connection(std::shared_ptr<detail::session> s);
  std::shared_ptr<detail::session> session_;
};

}  // namespace escrow::client
