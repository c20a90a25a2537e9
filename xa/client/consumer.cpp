// consumer: one subscription, its inbox, and OpenMQ's acknowledgement modes on top of STOMP's.
// Why the bookkeeping: the broker answers an ACK naming a message that is no longer
// unacknowledged with an ERROR that closes the connection, so the consumer keeps the ack ids it
// handed out (inbox::unacked, in delivery order) and never sends an ACK that an earlier
// cumulative one already covered.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "session.h"
#include "validate.h"

namespace escrow::client {
namespace {

using detail::clock_type;

bool cumulative(ack_mode m) { return m == ack_mode::client_acknowledge || m == ack_mode::dups_ok_acknowledge; }

}  // namespace

const char* stomp_ack_header(ack_mode m) {
  switch (m) {
    case ack_mode::auto_acknowledge:
    case ack_mode::individual_acknowledge:
      return "client-individual";
    case ack_mode::client_acknowledge:
    case ack_mode::dups_ok_acknowledge:
      return "client";
    case ack_mode::no_acknowledge:
      return "auto";
  }
  return "auto";
}

consumer::consumer(std::shared_ptr<detail::session> s, consumer_options o, callback cb)
    : session_(std::move(s)), options_(std::move(o)), inbox_(std::make_shared<detail::inbox>()), callback_(std::move(cb)) {
  detail::check_destination(options_.destination);
  if (!options_.durable_name.empty()) {
    if (!options_.destination.starts_with("/topic/"))
      throw error(error::kind::invalid_argument, "a durable subscription needs a /topic/ destination, not '" +
                                                     options_.destination + "'");
    if (session_->options().client_id.empty())
      throw error(error::kind::invalid_argument,
                  "a durable subscription needs connect_options.client_id: the broker names it by client-id and "
                  "subscription name");
  }
  if (options_.dups_ok_batch == 0) throw error(error::kind::invalid_argument, "dups_ok_batch must be at least 1");
  inbox_->lazy = options_.mode == ack_mode::dups_ok_acknowledge;
  id_ = session_->next_id("sub-");
}

consumer::~consumer() {
  try {
    close();
  } catch (const error&) {  // best effort: the broker requeues what we did not acknowledge
  }
  if (callback_thread_.joinable()) {
    if (callback_thread_.get_id() == std::this_thread::get_id()) {
      // The callback thread would go on using this object once freed: stop here, loudly, instead.
      std::fputs("escrow client: a consumer was destroyed by its own message callback, which client_consumer.h "
                 "forbids; close() it there and destroy it elsewhere\n", stderr);
      std::abort();
    }
    callback_thread_.join();  // close() was called from the callback: it has stopped or is stopping
  }
}

void consumer::subscribe() {
  session_->add_inbox(id_, inbox_);
  frame f;
  f.command = "SUBSCRIBE";
  f.add("id", id_).add("destination", options_.destination).add("ack", stomp_ack_header(options_.mode));
  if (options_.prefetch > 0) f.add("prefetch-count", std::to_string(options_.prefetch));
  if (!options_.durable_name.empty()) f.add("durable-subscription-name", options_.durable_name);
  for (const auto& [name, value] : options_.headers) f.add(name, value);
  try {
    session_->call(std::move(f), session_->options().timeout);
  } catch (...) {
    {
      std::lock_guard lock(session_->mutex());
      inbox_->closed = true;
    }
    session_->remove_inbox(id_);
    throw;
  }
  if (callback_) callback_thread_ = std::thread([this] { run_callbacks(); });
}

std::optional<frame> consumer::take(clock_type::time_point deadline) {
  for (;;) {
    std::unique_lock lock(session_->mutex());
    const auto& failure = session_->failure_locked();
    // NO_ACKNOWLEDGE messages already count as consumed at the broker: hand them out even after
    // the connection broke. In the other modes they come back to another consumer anyway.
    if (!inbox_->closed && !inbox_->messages.empty() && (!failure || options_.mode == ack_mode::no_acknowledge)) {
      frame f = std::move(inbox_->messages.front());
      inbox_->messages.pop_front();
      if (options_.mode != ack_mode::no_acknowledge) inbox_->unacked.emplace_back(f.get("ack"));
      return f;
    }
    session_->throw_if_closed_locked();  // the connection is gone: connection_lost, whatever else
    if (inbox_->closed) throw error(error::kind::invalid_argument, "consumer " + id_ + " is closed");
    // About to wait: acknowledge what was taken so far (DUPS_OK), so a quiet consumer does not hold
    // its window (and its messages) forever.
    if (inbox_->lazy && !inbox_->unacked.empty()) {
      lock.unlock();
      session_->flush_lazy_ack(*inbox_);
      continue;
    }
    if (!session_->wait_until(lock, deadline, [&] { return !inbox_->messages.empty() || inbox_->closed; }))
      return std::nullopt;
  }
}

std::optional<message> consumer::receive(std::chrono::milliseconds timeout) {
  if (callback_)
    throw error(error::kind::invalid_argument,
                "consumer " + id_ + " hands its messages to a callback; receive() is for consumers made without one");
  if (timeout.count() < 0) throw error(error::kind::invalid_argument, "receive(): the timeout is negative");
  auto f = take(clock_type::now() + timeout);
  if (!f) return std::nullopt;
  message m(std::move(*f));
  processed(m);
  return m;
}

void consumer::processed(const message& m) {
  switch (options_.mode) {
    case ack_mode::auto_acknowledge:
      settle("ACK", std::string(m.ack_id()), nullptr);
      break;
    case ack_mode::dups_ok_acknowledge: {
      bool due;
      {
        std::lock_guard lock(session_->mutex());
        due = inbox_->unacked.size() >= options_.dups_ok_batch;
      }
      if (due) session_->flush_lazy_ack(*inbox_);
      break;
    }
    default:
      break;
  }
}

bool consumer::settle(const char* command, const std::string& ack_id, const std::string* transaction_id) {
  std::lock_guard ack_lock(inbox_->ack_mutex);
  {
    std::lock_guard lock(session_->mutex());
    auto& unacked = inbox_->unacked;
    auto it = std::find(unacked.begin(), unacked.end(), ack_id);
    if (it == unacked.end()) {
      if (cumulative(options_.mode)) return false;  // a later cumulative ACK or NACK covered it
      throw error(error::kind::invalid_argument, "the message with ack id '" + ack_id +
                                                     "' is not an unacknowledged message of consumer " + id_ +
                                                     " (already acknowledged, or from another consumer)");
    }
    if (cumulative(options_.mode))
      unacked.erase(unacked.begin(), it + 1);
    else
      unacked.erase(it);
  }
  frame f;
  f.command = command;
  f.add("id", ack_id);
  if (transaction_id) f.add("transaction", *transaction_id);
  session_->call(std::move(f), session_->options().timeout);
  return true;
}

void consumer::check_client_mode(const char* what) const {
  if (options_.mode != ack_mode::client_acknowledge && options_.mode != ack_mode::individual_acknowledge)
    throw error(error::kind::invalid_argument,
                std::string(what) + " is for client_acknowledge and individual_acknowledge consumers; consumer " +
                    id_ + " acknowledges by itself");
}

void consumer::acknowledge(const message& m) {
  check_client_mode("acknowledge()");
  settle("ACK", std::string(m.ack_id()), nullptr);
}

void consumer::acknowledge(const message& m, transaction& tx) {
  check_client_mode("acknowledge()");
  if (!tx.active())
    throw error(error::kind::invalid_argument, "transaction " + tx.id() + " was already committed or rolled back");
  settle("ACK", std::string(m.ack_id()), &tx.id());
}

void consumer::reject(const message& m) {
  check_client_mode("reject()");
  settle("NACK", std::string(m.ack_id()), nullptr);
}

std::size_t consumer::buffered() const {
  std::lock_guard lock(session_->mutex());
  return inbox_->messages.size();
}

void consumer::run_callbacks() {
  for (;;) {
    std::optional<frame> f;
    try {
      f = take(clock_type::now() + std::chrono::hours(24));
    } catch (const error&) {
      return;  // closed, or the connection is gone (the lost-listener tells the application)
    }
    if (!f) continue;
    message m(std::move(*f));
    try {
      callback_(m);
    } catch (...) {
      // Not processed: in the automatic modes the message goes back for redelivery. In the client
      // modes it stays unacknowledged, as the application left it.
      try {
        if (options_.mode == ack_mode::auto_acknowledge) settle("NACK", std::string(m.ack_id()), nullptr);
        if (options_.mode == ack_mode::dups_ok_acknowledge) reject_lazy(m);
      } catch (const error&) {
      }
      continue;
    }
    try {
      processed(m);
    } catch (const error&) {
      // The connection is gone, or closing; take() says which on the next turn.
    }
  }
}

void consumer::reject_lazy(const message& m) {
  // Acknowledge everything before m, then NACK m alone: both cumulative, in delivery order.
  std::string previous;
  {
    std::lock_guard lock(session_->mutex());
    auto& unacked = inbox_->unacked;
    auto it = std::find(unacked.begin(), unacked.end(), m.ack_id());
    if (it == unacked.end()) return;
    if (it != unacked.begin()) previous = *(it - 1);
  }
  if (!previous.empty()) settle("ACK", previous, nullptr);
  settle("NACK", std::string(m.ack_id()), nullptr);
}

void consumer::stop(bool durable_unsubscribe) {
  bool already;
  {
    std::lock_guard lock(session_->mutex());
    already = inbox_->closed;
    inbox_->closed = true;
  }
  session_->notify();
  // From the callback itself the thread cannot be joined here: it ends after the callback
  // returns, and the destructor joins it.
  // Only the call that closed the inbox joins, so two close() calls never join at once.
  if (!already && callback_thread_.joinable() && callback_thread_.get_id() != std::this_thread::get_id())
    callback_thread_.join();
  if (already && !durable_unsubscribe) return;
  if (!session_->is_open()) {
    session_->remove_inbox(id_);
    if (durable_unsubscribe)
      throw error(error::kind::connection_lost, "cannot end durable subscription '" + options_.durable_name +
                                                    "': the connection is closed");
    return;  // nothing to tell: the broker already returned our unacknowledged messages
  }
  if (!already && inbox_->lazy) session_->flush_lazy_ack(*inbox_);
  frame f;
  f.command = "UNSUBSCRIBE";
  f.add("id", id_);
  if (durable_unsubscribe) f.add("durable-subscription-name", options_.durable_name);
  try {
    session_->call(std::move(f), session_->options().timeout);
  } catch (...) {
    session_->remove_inbox(id_);
    throw;
  }
  session_->remove_inbox(id_);
}

void consumer::close() { stop(false); }

void consumer::unsubscribe_durable() {
  if (options_.durable_name.empty())
    throw error(error::kind::invalid_argument,
                "consumer " + id_ + " is not a durable subscription: use close() to stop it");
  stop(true);
}

}  // namespace escrow::client
