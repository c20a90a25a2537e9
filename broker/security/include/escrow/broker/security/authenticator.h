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
//     at most max_waiting_per_address of them, at most max_waiting_per_user of one login name
//     over all addresses, and at most max_pending checks waiting or running over all addresses,
//     of which reserved_pending are kept for addresses with no recent failure (they also go first
//     when several checks are due); a login beyond a bound is refused at once (not a guess);
//   - a check that waits for the session whose client has closed the connection is dropped at once
//     (cancel), its place freed: a CONNECT sent by a client that closes does not hold a place;
//   - failures are counted per (address, user) and per user; each failure delays the next check
//     of the same (address, user), and of the same user from any address, by 100 ms after the
//     first, doubling per failure up to backoff_max_ms. The delay is computed when the check's
//     turn comes, after the check before it from the same address has recorded its outcome.
//     Checks of one user that is failing are spaced by that delay, from whatever address they
//     come. A success clears its own (address, user) count only; counts quiet for 15 minutes are
//     forgotten. A check whose delay would be over max_delay_ms is not queued: the client is told
//     to try again later. An (address, user) that logged in successfully before is trusted: its
//     checks skip the per-user spacing and the per-user bound (only its own pair's delay
//     applies), so guesses at alice from elsewhere do not lock alice out of her usual address.
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
  std::size_t max_waiting_per_user = 16;     // max-waiting-logins-per-user
  std::size_t reserved_pending = 64;         // reserved-pending-logins (less than max_pending)
  std::uint64_t max_delay_ms = 3000;         // max-login-delay-ms
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
  // (over a bound, a delay over max_delay_ms, or the authenticator is stopping), or on the thread
  // that cancels it. Failures are logged with the peer and counted. Returns the check's ticket
  // for cancel() (0: already answered).
  std::uint64_t submit(login_request request, callback done);

  // The client of check `ticket` is gone: if the check still waits, it is dropped (its place is
  // freed, `done` gets a refusal); one already running finishes. Cheap; any thread.
  void cancel(std::uint64_t ticket);

  // SIGHUP: the users file was read again.
  void replace_users(std::shared_ptr<const users_table> users);

  std::uint64_t failed_logins() const { return failed_logins_.load(std::memory_order_relaxed); }
  // Slow hashes computed so far, real or dummy (tests: every password check costs exactly one).
  std::uint64_t password_hashes() const { return password_hashes_.load(std::memory_order_relaxed); }
  // Checks dropped because their client closed the connection while they waited.
  std::uint64_t abandoned_logins() const { return abandoned_logins_.load(std::memory_order_relaxed); }

 private:
  using clock = std::chrono::steady_clock;
  struct attempt {
    login_request request;
    callback done;
    std::uint64_t ticket = 0;
    std::string user_key;  // keyed_hash("user", login): its per-user count of waiting checks
    bool trusted = false;  // its (address, user) logged in successfully before
    // The per-user turn it took when scheduled, and the one before: a cancelled check gives its
    // turn back, so that checks dropped before they ran do not push the user's next turn away.
    std::optional<std::pair<clock::time_point, clock::time_point>> turn;
  };
  struct address_line {              // an address with a check in its turn (scheduled or running)
    std::deque<attempt> waiting;     // behind it, in order of arrival
  };
  struct failure_record {
    std::uint32_t failures = 0;
    clock::time_point last_failure{};
    clock::time_point next_turn{};   // per user: checks of a failing user are spaced this far apart
  };

  using due_map = std::multimap<clock::time_point, attempt>;
  void work();
  login_result check(const login_request& request);
  // mutex_ held: the address's turn has come; queue it for its back-off. False: its delay is over
  // max_delay_ms; `a` is left for the caller to refuse (after unlocking) and the line goes on.
  bool schedule(attempt& a);
  // mutex_ held: the check ahead in `ip`'s line is over; schedule the next (those refused go to
  // `refusals`), or forget the line when none waits.
  void advance_line(const std::string& ip, std::vector<attempt>& refusals);
  void finished(const attempt& a);  // mutex_ held: `a` no longer waits or runs
  // mutex_ held: the check to run now, clean addresses first ({nullptr, _}: none; `next` is when one is due)
  std::pair<due_map*, due_map::iterator> first_due(clock::time_point now, clock::time_point& next);
  bool recently_failed(const std::string& ip, clock::time_point now);              // mutex_ held
  void try_again_later(std::vector<attempt>& refusals);  // calls done of each, mutex_ not held
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
  std::atomic<std::uint64_t> abandoned_logins_{0};

  std::mutex mutex_;  // guards everything below
  std::shared_ptr<const users_table> users_;
  std::string dummy_hash_;            // as costly as the users' own hashes; matches no password
  std::set<std::string> remembered_;  // keyed_hash() of logins that succeeded
  std::map<std::string, failure_record> pair_failures_;  // by keyed_hash(address, user)
  std::map<std::string, failure_record> user_failures_;  // by keyed_hash(user)
  std::map<std::string, failure_record> address_failures_;  // by IP
  std::set<std::string> trusted_pairs_;                  // keyed_hash("trusted", address, user) that succeeded
  std::map<std::string, std::size_t> waiting_by_user_;   // by keyed_hash(user): checks waiting or running
  std::map<std::string, address_line> lines_;            // by IP: addresses with a check in its turn
  // Checks whose turn has come, by when they may run: those from addresses with no recent failure
  // go first (clean_due_), then the others (due_).
  due_map clean_due_;
  due_map due_;
  std::size_t pending_ = 0;                              // checks waiting or running, all addresses
  std::uint64_t next_ticket_ = 1;
  std::map<std::uint64_t, std::string> queued_ip_;       // ticket -> IP, for checks in a line's waiting
  std::map<std::uint64_t, std::pair<due_map*, due_map::iterator>> scheduled_;  // ticket -> its due entry
  bool stopping_ = false;
  std::condition_variable wake_;  // a check became due, or stopping_

  std::vector<std::thread> threads_;  // last: started when everything above exists
};

}  // namespace escrow::broker
