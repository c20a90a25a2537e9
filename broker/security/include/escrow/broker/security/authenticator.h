// Logging in (docs/security.md): checks a CONNECT's login and passcode, or the subject of a
// verified client certificate, against the users file.
//
// What is cheap is answered at once, on the caller's thread (answer_at_once): anonymous access, a
// client certificate that maps to a user, and a login and passcode that already succeeded (a
// successful check is remembered, keyed by a keyed hash of the password, never the password, until
// the users file changes), so a reconnecting client never waits behind anyone's slow check.
//
// Everything else is a password check, slow on purpose (PBKDF2, password_hash.h), run by a small
// pool of login threads of the authenticator's own (submit), never on an I/O thread or the core
// strand. Unknown users, users without a password (certificate only) and missing logins are checked
// against a dummy hash of the same cost, so that timing does not tell them apart. Checks are
// scheduled so that one address cannot starve the others:
//   - one check per IP address at a time: the others from that address wait their turn behind it,
//     at most max_waiting_per_address of them, and at most max_pending checks waiting or running
//     over all addresses; a login beyond either bound is refused at once (not counted as a guess);
//   - failures are counted per (address, user) and per user; each failure delays the next check
//     of the same (address, user), and of the same user from any address, by 100 ms after the
//     first, doubling per failure up to backoff_max_ms. The delay is computed when the check's
//     turn comes, after the check before it from the same address has recorded its outcome.
//     Checks of one user that is failing are spaced by that delay, from whatever address they
//     come. A success clears its own (address, user) count only; counts quiet for 15 minutes are
//     forgotten.
//
// Thread-safe: sessions call it from I/O threads, SIGHUP replaces the users, metrics read the counts.
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
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "escrow/broker/security/security.h"

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

// The [security] keys that shape the login checks (docs/configuration.md).
struct login_limits {
  std::uint64_t backoff_max_ms = 10000;      // login-backoff-max-ms
  unsigned threads = 2;                      // login-threads
  std::size_t max_waiting_per_address = 8;   // max-waiting-logins-per-address
  std::size_t max_pending = 256;             // max-pending-logins
};

class authenticator {
 public:
  using callback = std::function<void(login_result)>;

  // `users` nullptr: no users file, everyone is anonymous with every permission (no threads).
  authenticator(std::shared_ptr<const users_table> users, const login_limits& limits);
  // Answers every check still waiting with a refusal, lets the running ones finish, joins the threads.
  ~authenticator();

  bool anonymous() const { return anonymous_; }

  // The answer when it needs no password check (see above); nullopt: submit() it. Cheap.
  std::optional<login_result> answer_at_once(const login_request& request);

  // Queues the password check of `request`. `done` is called once with the verdict: on a login
  // thread, or on the caller's thread before submit returns when the login is refused at once
  // (over a bound, or the authenticator is stopping). Failures are logged with the peer and counted.
  void submit(login_request request, callback done);

  // SIGHUP: the users file was read again.
  void replace_users(std::shared_ptr<const users_table> users);

  std::uint64_t failed_logins() const { return failed_logins_.load(std::memory_order_relaxed); }
  // Slow hashes computed so far, real or dummy (tests: every password check costs exactly one).
  std::uint64_t password_hashes() const { return password_hashes_.load(std::memory_order_relaxed); }

 private:
  using clock = std::chrono::steady_clock;
  struct attempt {
    login_request request;
    callback done;
  };
  struct address_line {              // an address with a check in its turn (scheduled or running)
    std::deque<attempt> waiting;     // behind it, in order of arrival
  };
  struct failure_record {
    std::uint32_t failures = 0;
    clock::time_point last_failure{};
    clock::time_point next_turn{};   // per user: checks of a failing user are spaced this far apart
  };

  void work();
  login_result check(const login_request& request);
  void schedule(attempt a);  // mutex_ held: the address's turn has come; queue it for its back-off
  void record_failure(const login_request& request);
  void record_success(const login_request& request);
  void refuse_at_once(attempt& a, const std::string& reason);
  std::chrono::milliseconds backoff(std::uint32_t failures) const;
  failure_record* find_record(std::map<std::string, failure_record>& records, const std::string& key,
                              clock::time_point now);
  std::string keyed_hash(const std::string& domain, const std::string& a, const std::string& b = {}) const;

  const bool anonymous_;
  const login_limits limits_;
  std::string cache_secret_;  // random per process: the key of keyed_hash's HMAC
  std::atomic<std::uint64_t> failed_logins_{0};
  std::atomic<std::uint64_t> password_hashes_{0};

  std::mutex mutex_;  // guards everything below
  std::shared_ptr<const users_table> users_;
  std::string dummy_hash_;            // as costly as the users' own hashes; matches no password
  std::set<std::string> remembered_;  // keyed_hash() of logins that succeeded
  std::map<std::string, failure_record> pair_failures_;  // by keyed_hash(address, user)
  std::map<std::string, failure_record> user_failures_;  // by keyed_hash(user)
  std::map<std::string, address_line> lines_;            // by IP: addresses with a check in its turn
  std::multimap<clock::time_point, attempt> due_;        // checks whose turn has come, by when they may run
  std::size_t pending_ = 0;                              // checks waiting or running, all addresses
  bool stopping_ = false;
  std::condition_variable wake_;  // a check became due, or stopping_

  std::vector<std::thread> threads_;  // last: started when everything above exists
};

}  // namespace escrow::broker
