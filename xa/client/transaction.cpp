// Local transactions: BEGIN (in connection::begin), COMMIT and ABORT, each waiting for its RECEIPT.
#include "session.h"

namespace escrow::client {

transaction::transaction(std::shared_ptr<detail::session> s, std::string id)
    : session_(std::move(s)), id_(std::move(id)), active_(true) {}

transaction::transaction(transaction&& other) noexcept
    : session_(std::move(other.session_)), id_(std::move(other.id_)), active_(std::exchange(other.active_, false)) {}

transaction& transaction::operator=(transaction&& other) noexcept {
  if (this != &other) {
    abort_quietly();
    session_ = std::move(other.session_);
    id_ = std::move(other.id_);
    active_ = std::exchange(other.active_, false);
  }
  return *this;
}

transaction::~transaction() { abort_quietly(); }

void transaction::abort_quietly() noexcept {
  if (!active_ || !session_) return;
  // Rolled back without waiting: a destructor must not block; the broker also rolls back every
  // open transaction when the connection goes away.
  active_ = false;
  try {
    frame f;
    f.command = "ABORT";
    f.add("transaction", id_);
    session_->send(f);
  } catch (const error&) {
  }
}

void transaction::finish(const char* command) {
  if (!active_)
    throw error(error::kind::invalid_argument,
                "transaction " + id_ + " is no longer active: it was already committed or rolled back");
  active_ = false;
  frame f;
  f.command = command;
  f.add("transaction", id_);
  session_->call(std::move(f), session_->options().timeout);
}

void transaction::commit() { finish("COMMIT"); }

void transaction::rollback() { finish("ABORT"); }

}  // namespace escrow::client
