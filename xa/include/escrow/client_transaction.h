// A local transaction on one connection (STOMP BEGIN / COMMIT / ABORT). Sends made with
// producer::send(msg, tx) and acknowledgements made with consumer::acknowledge(msg, tx) take
// effect together at commit(), or not at all after rollback() (the consumed messages then return
// to their queue with `redelivered` set). Obtained from connection::begin().
//
// Thread safety: a transaction may be used from several threads, but its work is one unit: the
// application decides when everything that belongs in it has been done.
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace escrow::client {
namespace detail {
class session;
}

class transaction {
 public:
  transaction(transaction&&) noexcept;
  transaction& operator=(transaction&&) noexcept;
  transaction(const transaction&) = delete;
  transaction& operator=(const transaction&) = delete;
  // An open transaction is rolled back (ABORT sent best-effort, without waiting).
  ~transaction();

  // COMMIT, waiting for the broker's RECEIPT (sent once the commit is durable).
  // Throws client::error (broker_error, connection_lost, timeout). REQUIRES: active().
  void commit();
  // ABORT, waiting for the RECEIPT. Throws client::error. REQUIRES: active().
  void rollback();
  // True until commit() or rollback() has been called.
  bool active() const { return active_; }
  // The `transaction` header value (unique on its connection).
  const std::string& id() const { return id_; }

 private:
  friend class connection;
  transaction(std::shared_ptr<detail::session> s, std::string id);
  void finish(const char* command);
  void abort_quietly() noexcept;

  std::shared_ptr<detail::session> session_;
  std::string id_;
  bool active_ = false;
};

}  // namespace escrow::client
