// The session: connect, the reader thread, receipts, heart-beats and failure. Why the shape:
// a single reader owns the parser and routes every frame, so a call() waiting for its RECEIPT and
// a consumer waiting for MESSAGEs never read the socket themselves and never starve each other;
// the first failure is recorded once and wakes everyone, so no call can hang on a dead socket.
#include "session.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace escrow::client::detail {
namespace {

// The session whose reader or heart-beat thread this is (null on any other thread): close() on
// one of its own threads must not join it, and the destructor must not run there.
thread_local const session* own_threads_session = nullptr;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count();
}

// The ERROR frame as an error: its message header, its body as the detail.
error broker_error_from(const frame& f) {
  std::string message(f.get("message"));
  if (message.empty()) message = f.body.empty() ? "the broker sent an ERROR frame without a message" : f.body;
  return error(error::kind::broker_error, message, f.body);
}

}  // namespace

std::string describe(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

session::session(connect_options options) : options_(std::move(options)) {}

session::~session() {
  if (own_threads_session == this) {
    // The thread would go on using this object once freed: stop here, loudly, instead.
    std::fputs("escrow client: the last reference to a connection (or to a producer, consumer or transaction "
               "of it) was released in its on_lost listener, on the connection's own thread, which client.h "
               "forbids; keep one alive until the listener has returned\n",
               stderr);
    std::abort();
  }
  close();
  // A second close() returns at once while the first may still be joining; join what is left.
  std::lock_guard lock(join_mutex_);
  for (std::thread* t : {&reader_, &heartbeat_})
    if (t->joinable()) t->join();
}

std::shared_ptr<session> session::open(const connect_options& options) {
  if (options.host.empty()) throw error(error::kind::invalid_argument, "connect_options.host is empty");
  if (options.timeout.count() <= 0)
    throw error(error::kind::invalid_argument, "connect_options.timeout must be positive");
  if (options.heartbeat_send.count() < 0 || options.heartbeat_receive.count() < 0)
    throw error(error::kind::invalid_argument, "connect_options heart-beats must not be negative (0 = off)");
  const tls_options& tls = options.tls;
  if (!tls.enabled && (!tls.ca_file.empty() || !tls.certificate_chain.empty() || !tls.private_key.empty() ||
                       !tls.server_name.empty()))
    throw error(error::kind::invalid_argument,
                "connect_options.tls has files or a server name but tls.enabled is false: set it to use TLS");
  std::string why;
  std::unique_ptr<transport> t;
  if (tls.enabled) {
    bool options_at_fault = false;
    t = connect_tls(options.host, options.port, tls, options.timeout, options.timeout, &why, &options_at_fault);
    if (!t) throw error(options_at_fault ? error::kind::invalid_argument : error::kind::connection_lost, why);
  } else {
    t = connect_tcp(options.host, options.port, options.timeout, options.timeout, &why);
    if (!t) throw error(error::kind::connection_lost, why);
  }

  std::shared_ptr<session> s(new session(options));
  s->start(std::move(t));

  frame connect;
  connect.command = "CONNECT";
  connect.add("accept-version", "1.2").add("host", options.host);
  if (!options.login.empty()) connect.add("login", options.login);
  if (!options.passcode.empty()) connect.add("passcode", options.passcode);
  if (!options.client_id.empty()) connect.add("client-id", options.client_id);
  connect.add("heart-beat",
              std::to_string(options.heartbeat_send.count()) + "," + std::to_string(options.heartbeat_receive.count()));
  std::string bytes = encode(connect);
  if (!s->write(bytes, &why)) {
    s->fail(error(error::kind::connection_lost, why), false);
    throw error(error::kind::connection_lost, why);
  }

  auto deadline = clock_type::now() + options.timeout;
  std::unique_lock lock(s->mutex_);
  s->wait_until(lock, deadline, [&] { return s->connected_seen_; });
  if (!s->connected_seen_) {
    std::optional<error> failure = s->failure_;
    lock.unlock();
    if (failure) throw *failure;  // s's destructor shuts the transport down and joins
    std::string where = options.host + ":" + std::to_string(options.port);
    throw error(error::kind::timeout, "no CONNECTED frame from " + where + " within " + describe(options.timeout) +
                                          ": is it a STOMP broker?");
  }
  // Heart-beats (STOMP 1.2): each direction is the larger of what one side offers and the other
  // asks, 0 on either side turning it off.
  auto hb = parse_heart_beat(s->connected_.get("heart-beat", "0,0")).value_or(std::pair<std::uint64_t, std::uint64_t>{0, 0});
  s->send_interval_ = std::chrono::milliseconds(
      negotiate_heart_beat(static_cast<std::uint64_t>(options.heartbeat_send.count()), hb.second));
  s->receive_interval_ = std::chrono::milliseconds(
      negotiate_heart_beat(hb.first, static_cast<std::uint64_t>(options.heartbeat_receive.count())));
  lock.unlock();
  if (s->send_interval_.count() > 0 || s->receive_interval_.count() > 0)
    s->heartbeat_ = std::thread([raw = s.get()] { raw->heartbeat_loop(); });
  return s;
}

void session::start(std::unique_ptr<transport> t) {
  transport_ = std::move(t);
  last_read_ns_ = last_write_ns_ = now_ns();
  reader_ = std::thread([this] { read_loop(); });
}

bool session::write(std::string_view bytes, std::string* why) {
  std::lock_guard lock(write_mutex_);
  if (!transport_->write_all(bytes, why)) return false;
  last_write_ns_ = now_ns();
  return true;
}

void session::read_loop() {
  own_threads_session = this;
  frame_parser parser;
  std::vector<frame> frames;
  std::string buffer(64 * 1024, '\0');
  for (;;) {
    std::string why;
    long n = transport_->read_some(buffer.data(), buffer.size(), &why);
    if (n <= 0) {
      if (n == 0) why = "the broker closed the connection";
      fail(error(error::kind::connection_lost, "connection to " + options_.host + ":" + std::to_string(options_.port) +
                                                   " lost: " + why));
      return;
    }
    last_read_ns_ = now_ns();
    frames.clear();
    bool ok = parser.feed(std::string_view(buffer.data(), static_cast<std::size_t>(n)), frames);
    for (auto& f : frames) dispatch(std::move(f));
    if (!ok) {
      fail(error(error::kind::connection_lost, "bad frame from the broker: " + parser.error()));
      return;
    }
  }
}

void session::dispatch(frame f) {
  std::unique_lock lock(mutex_);
  if (f.command == "MESSAGE") {
    auto it = inboxes_.find(std::string(f.get("subscription")));
    if (it == inboxes_.end() || it->second->closed) return;  // a late delivery after UNSUBSCRIBE
    it->second->messages.push_back(std::move(f));
  } else if (f.command == "RECEIPT") {
    auto it = pending_.find(std::string(f.get("receipt-id")));
    if (it == pending_.end()) return;  // its call timed out and gave up
    it->second = std::move(f);
  } else if (f.command == "ERROR") {
    // The broker closes the connection after ERROR: the call it answers gets it, every other
    // waiter the same error, and every later call a connection_lost that names it.
    error e = broker_error_from(f);
    auto it = pending_.find(std::string(f.get("receipt-id")));
    if (it != pending_.end()) it->second = std::move(f);
    lock.unlock();
    fail(std::move(e));
    return;
  } else if (f.command == "CONNECTED") {
    if (!connected_seen_) {
      connected_ = std::move(f);
      connected_seen_ = true;
    }
  } else {
    return;  // nothing else is a server frame; ignore rather than fail
  }
  cv_.notify_all();
}

void session::fail(error e, bool notify_listener) {
  std::function<void(const error&)> listener;
  {
    std::lock_guard lock(mutex_);
    if (failure_) return;
    failure_ = e;
    // Not after close() began: the broker closing the socket after DISCONNECT is no loss.
    if (!close_started_ && notify_listener) listener = lost_listener_;
  }
  if (transport_) transport_->shutdown();
  // The listener runs before the waiters are woken, so that an application that learns of the
  // failure from a call also finds its listener done.
  if (listener) {
    try {
      listener(e);
    } catch (...) {  // a listener's exception has nowhere to go
    }
  }
  cv_.notify_all();
}

std::optional<error> session::closed_error_locked() const {
  if (!failure_) return std::nullopt;
  std::string why = failure_->what();
  return error(error::kind::connection_lost, "the connection is closed (" + why + "); open a new one");
}

void session::throw_if_closed_locked() const {
  if (auto e = closed_error_locked()) throw *e;
}

std::string session::next_id(const char* prefix) { return prefix + std::to_string(++serial_); }

frame session::call(frame request, std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) throw error(error::kind::invalid_argument, "call(): the timeout must be positive");
  std::erase_if(request.headers, [](const auto& h) { return h.first == "receipt"; });
  std::string id = next_id("receipt-");
  request.add("receipt", id);
  {
    std::lock_guard lock(mutex_);
    throw_if_closed_locked();
    pending_.emplace(id, std::nullopt);
  }
  std::string why;
  if (!write(encode(request), &why)) {
    fail(error(error::kind::connection_lost, why));
    std::lock_guard lock(mutex_);
    pending_.erase(id);
    throw error(error::kind::connection_lost, why);
  }
  std::unique_lock lock(mutex_);
  auto it = pending_.find(id);
  wait_until(lock, clock_type::now() + timeout, [&] { return it->second.has_value(); });
  std::optional<frame> reply = std::move(it->second);
  pending_.erase(it);
  if (reply && reply->command == "RECEIPT") return std::move(*reply);
  if (reply && reply->command == "ERROR") throw broker_error_from(*reply);
  if (failure_) throw *failure_;
  throw error(error::kind::timeout, "no RECEIPT for " + request.command + " within " + describe(timeout) +
                                        " (the broker may still act on it)");
}

void session::send(const frame& f) {
  {
    std::lock_guard lock(mutex_);
    throw_if_closed_locked();
  }
  std::string why;
  if (!write(encode(f), &why)) {
    fail(error(error::kind::connection_lost, why));
    throw error(error::kind::connection_lost, why);
  }
}

void session::add_inbox(const std::string& id, std::shared_ptr<inbox> box) {
  std::lock_guard lock(mutex_);
  inboxes_[id] = std::move(box);
}

void session::remove_inbox(const std::string& id) {
  std::lock_guard lock(mutex_);
  inboxes_.erase(id);
}

void session::set_lost_listener(std::function<void(const error&)> listener) {
  std::lock_guard lock(mutex_);
  lost_listener_ = std::move(listener);
}

bool session::is_open() const {
  std::lock_guard lock(mutex_);
  return !failure_ && !close_started_;
}

void session::heartbeat_loop() {
  own_threads_session = this;
  auto send_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(send_interval_).count();
  // Silence longer than twice the interval (and at least a second more than it) means the broker
  // or the network is gone: the broker itself allows a grace period on top of the interval.
  auto silence = receive_interval_ + std::max(receive_interval_, std::chrono::milliseconds(1000));
  auto silence_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(silence).count();
  auto tick = std::chrono::milliseconds(std::max<std::int64_t>(
      10, std::min(send_interval_.count() > 0 ? send_interval_.count() / 2 : 1000,
                   receive_interval_.count() > 0 ? receive_interval_.count() / 2 : 1000)));
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (cv_.wait_for(lock, tick, [&] { return failure_.has_value() || closing_; })) return;
    }
    std::int64_t now = now_ns();
    if (receive_interval_.count() > 0 && now - last_read_ns_.load() > silence_ns) {
      fail(error(error::kind::connection_lost, "connection to " + options_.host + ":" + std::to_string(options_.port) +
                                                   " lost: nothing from the broker for " + describe(silence) +
                                                   " (heart-beats missed)"));
      return;
    }
    if (send_interval_.count() > 0 && now - last_write_ns_.load() >= send_ns) {
      std::string why;
      if (!write("\n", &why)) {
        fail(error(error::kind::connection_lost, why));
        return;
      }
    }
  }
}

void session::flush_lazy_ack(inbox& box) {
  std::lock_guard ack_lock(box.ack_mutex);
  frame ack;
  ack.command = "ACK";
  {
    std::lock_guard lock(mutex_);
    if (box.unacked.empty()) return;
    ack.add("id", std::move(box.unacked.back()));
    box.unacked.clear();
  }
  send(ack);
}

void session::flush_lazy_acks() {
  std::vector<std::shared_ptr<inbox>> lazy;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, box] : inboxes_)
      if (box->lazy) lazy.push_back(box);
  }
  for (const auto& box : lazy) {
    try {
      flush_lazy_ack(*box);
    } catch (const error&) {
      return;  // the connection is gone: the broker redelivers them (DUPS_OK allows that)
    }
  }
}

void session::close() {
  bool was_usable;
  {
    std::lock_guard lock(mutex_);
    if (close_started_) return;
    close_started_ = true;
    was_usable = !failure_.has_value() && connected_seen_;
  }
  if (was_usable) {
    flush_lazy_acks();
    // DISCONNECT with a receipt: once it comes, everything sent before it has been processed
    // (acknowledgements durable, unacknowledged messages back in their queues).
    frame disconnect;
    disconnect.command = "DISCONNECT";
    try {
      call(std::move(disconnect), options_.timeout);
    } catch (const error&) {  // best effort: we close either way
    }
  }
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
    for (auto& [id, box] : inboxes_) box->closed = true;
  }
  fail(error(error::kind::connection_lost, "the connection was closed by the application"), false);
  // close() from the lost-listener, on one of our own threads: it cannot join itself, and must not
  // wait for the join lock a destructor on another thread may hold while joining it. The threads
  // end by themselves; the destructor joins them.
  if (own_threads_session == this) return;
  std::lock_guard lock(join_mutex_);
  for (std::thread* t : {&reader_, &heartbeat_})
    if (t->joinable()) t->join();
}

}  // namespace escrow::client::detail
