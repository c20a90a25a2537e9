// The web console's logins (docs/operations.md, "The web console"): sessions held in memory (a
// restart logs everyone out), each named by a random 256-bit id that the browser keeps in an
// HttpOnly, SameSite=Strict cookie, with a CSRF token of its own that every state-changing request
// must repeat in a header. A session ends after [http] session-timeout-ms without a request, at
// logout, or when [http] max-sessions are held and a new login needs the room of the one used
// least recently; one user holds at most [http] max-sessions-per-user (a new login of theirs ends
// their own oldest), so that one account cannot log every operator out by logging in over and over.
// Thread-safe: HTTP connections on any strand use one instance (a mutex).
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "escrow/broker/admin/http_server.h"

namespace escrow::broker {

struct console_session {
  std::string id;    // the cookie's value: 64 hex digits
  std::string csrf;  // what X-Escrow-CSRF must carry: 64 hex digits
  console_user user;
  bool admin = false;  // holds the admin permission (what the console offers)
};

class console_sessions {
 public:
  using clock = std::chrono::steady_clock;
  console_sessions(std::chrono::milliseconds timeout, std::size_t max, std::size_t max_per_user)
      : timeout_(timeout), max_(max), max_per_user_(max_per_user) {}

  console_session create(console_user user, bool admin);
  // The live session of `id` (its idle time starts again), or nullopt.
  std::optional<console_session> find(std::string_view id);
  void end(std::string_view id);
  std::size_t size();
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct entry {
    console_session session;
    clock::time_point last_used;
    std::list<std::string>::iterator order;  // its place in by_use_
  };
  void expire(clock::time_point now);  // under mutex_

  std::chrono::milliseconds timeout_;
  std::size_t max_;
  std::size_t max_per_user_;
  std::mutex mutex_;
  std::unordered_map<std::string, entry> sessions_;  // by id; guarded by mutex_
  std::list<std::string> by_use_;                    // ids, least recently used first
};

// Whether two secrets are equal, in time that does not depend on where they differ.
bool same_secret(std::string_view a, std::string_view b);

}  // namespace escrow::broker
