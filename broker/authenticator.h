// Logging in (docs/security.md): checks a CONNECT's login and passcode, or the subject of a
// verified client certificate, against the users file. Password checks are slow on purpose
// (PBKDF2, password_hash.h), so they run on a thread of their own, never on an I/O thread or the
// core strand. After a failed login, every further attempt from the same IP address waits its
// turn: 100 ms after the first failure, doubling per failure up to [security]
// login-backoff-max-ms, one attempt at a time, so that guessing from one address is impractical;
// a success clears the address. A successful check is remembered (keyed by a keyed hash of the
// password, never the password) until the users file changes, so a reconnecting client pays the
// slow hash once.
//
// Thread-safe: sessions call it from I/O threads, SIGHUP replaces the users, metrics read the count.
#pragma once

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "security.h"

namespace escrow::broker {

struct login_request {
  std::string peer_ip;
  std::string login;     // CONNECT's login header ("" when absent)
  std::string passcode;  // CONNECT's passcode header
  std::string certificate_subject;  // verified client certificate (TLS), "" when none
};

struct login_result {
  bool ok = false;
  std::string user;                // "" : anonymous (no users file)
  std::vector<std::string> roles;  // the user's roles
  std::string problem;             // when refused: what the client is told (the same for every failure)
};

class authenticator {
 public:
  // `users` nullptr: no users file, everyone is anonymous with every permission.
  authenticator(std::shared_ptr<const users_table> users, std::uint64_t backoff_max_ms);
  ~authenticator();

  bool anonymous() const { return anonymous_; }

  // How long an attempt from `ip` waits before it is checked; reserves its turn, so concurrent
  // attempts from one address queue up behind each other.
  std::chrono::milliseconds wait_before_attempt(const std::string& ip);

  // Checks one login (slow: call it on pool()). Logs a failure with the peer, counts it and
  // lengthens the address's back-off.
  login_result check(const login_request& request);

  // SIGHUP: the users file was read again.
  void replace_users(std::shared_ptr<const users_table> users);

  std::uint64_t failed_logins() const { return failed_logins_.load(std::memory_order_relaxed); }
  boost::asio::thread_pool& pool() { return pool_; }

 private:
  struct address_record {
    std::uint32_t failures = 0;
    std::chrono::steady_clock::time_point next_turn{};
    std::chrono::steady_clock::time_point last_failure{};
  };
  void record_failure(const std::string& ip);
  void record_success(const std::string& ip);
  std::string remembered_key(const std::string& user, const std::string& password) const;

  const bool anonymous_;
  const std::chrono::milliseconds backoff_max_;
  std::string cache_secret_;  // random per process: the key of remembered_key's HMAC
  std::atomic<std::uint64_t> failed_logins_{0};

  std::mutex mutex_;  // guards everything below
  std::shared_ptr<const users_table> users_;
  std::set<std::string> remembered_;  // remembered_key() of logins that succeeded
  std::map<std::string, address_record> addresses_;  // by IP, only those with recent failures

  boost::asio::thread_pool pool_{1};
};

}  // namespace escrow::broker
