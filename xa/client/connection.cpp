// connection: the public face of a session, and the factory of producers, consumers and
// transactions, each of which shares the session.
#include "session.h"

namespace escrow::client {

std::unique_ptr<connection> connection::open(const connect_options& options) {
  return std::unique_ptr<connection>(new connection(detail::session::open(options)));
}

connection::connection(std::shared_ptr<detail::session> s) : session_(std::move(s)) {}

connection::~connection() { close(); }

frame connection::call(frame request, std::chrono::milliseconds timeout) {
  return session_->call(std::move(request), timeout);
}

frame connection::call(frame request) { return session_->call(std::move(request), session_->options().timeout); }

void connection::send_frame(const frame& f) { session_->send(f); }

producer connection::create_producer(producer_options options) { return producer(session_, std::move(options)); }

std::unique_ptr<consumer> connection::create_consumer(consumer_options options) {
  return create_consumer(std::move(options), nullptr);
}

std::unique_ptr<consumer> connection::create_consumer(consumer_options options, consumer::callback on_message) {
  std::unique_ptr<consumer> c(new consumer(session_, std::move(options), std::move(on_message)));
  c->subscribe();
  return c;
}

void connection::unsubscribe(const std::string& durable_name) {
  if (durable_name.empty()) throw error(error::kind::invalid_argument, "unsubscribe(): the durable name is empty");
  if (session_->options().client_id.empty())
    throw error(error::kind::invalid_argument, "unsubscribe(): durable subscriptions need connect_options.client_id");
  frame f;
  f.command = "UNSUBSCRIBE";
  f.add("id", session_->next_id("unsubscribe-"));
  f.add("durable-subscription-name", durable_name);
  session_->call(std::move(f), session_->options().timeout);
}

transaction connection::begin() {
  std::string id = session_->next_id("tx-");
  frame f;
  f.command = "BEGIN";
  f.add("transaction", id);
  session_->call(std::move(f), session_->options().timeout);
  return transaction(session_, std::move(id));
}

void connection::on_lost(std::function<void(const error&)> listener) {
  session_->set_lost_listener(std::move(listener));
}

bool connection::is_open() const { return session_->is_open(); }

void connection::close() { session_->close(); }

const connect_options& connection::options() const { return session_->options(); }

const frame& connection::connected() const { return session_->connected(); }

}  // namespace escrow::client
