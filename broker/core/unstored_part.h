// Internal to broker/core: who holds the bytes that wait for the core or for the disk
// (limits.max-unstored-bytes), so that back-pressure stops the connections holding the most, not
// everyone (docs/security.md, "Limits"). A connection holds the frames it handed to the core and
// not yet handled, and the batches of its frames (SEND, ACK with receipt, ...) submitted to the
// store and not yet completed. Sessions ask from their own strands and the core counts from its
// own, so this part has a lock of its own (docs/locking.md), held for a few map operations. It also
// says which connections' SENDs wait for room in a full queue (BLOCK), which their sessions poll.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace escrow::broker {

class unstored_part {
 public:
  // The session's CONNECT was accepted (before any of its frames): its bytes count for `user`.
  void open(std::uint64_t id, const std::string& user) {
    std::lock_guard lock(mutex_);
    by_connection_.try_emplace(id, account{user, 0});
  }
  // The connection is gone: what it still holds counts for nobody from now on (the broker-wide
  // figure still has it until it is handled or stored).
  void close(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    auto it = by_connection_.find(id);
    if (it == by_connection_.end()) return;
    change(it->second, -static_cast<std::int64_t>(it->second.bytes));
    if (it->second.blocked) blocked_.fetch_sub(1, std::memory_order_relaxed);
    by_connection_.erase(it);
  }
  void add(std::uint64_t id, std::uint64_t bytes) { adjust(id, static_cast<std::int64_t>(bytes)); }
  void remove(std::uint64_t id, std::uint64_t bytes) { adjust(id, -static_cast<std::int64_t>(bytes)); }

  // Whether connection `id` should stop reading while `total` bytes wait broker-wide, against
  // `limit`: a connection holding more than its cap (an eighth of the limit); above the limit also
  // one holding more than its fair share (the limit over the connections holding any), or whose
  // user holds more than the limit over the users holding any (so that many connections of one
  // user do not add up to more than one user's share); above twice the limit, everybody (memory
  // stays bounded).
  bool paused(std::uint64_t id, std::uint64_t total, std::uint64_t limit) const {
    if (total <= limit / kConnectionShare) return false;  // nobody can hold more than its cap
    if (total > 2 * limit) return true;
    std::lock_guard lock(mutex_);
    auto it = by_connection_.find(id);
    if (it == by_connection_.end()) return false;
    const account& a = it->second;
    if (a.bytes > limit / kConnectionShare) return true;
    if (total <= limit) return false;
    if (a.bytes > limit / std::max<std::size_t>(holding_, 1)) return true;
    auto u = by_user_.find(a.user);
    return u != by_user_.end() && u->second > limit / std::max<std::size_t>(by_user_.size(), 1);
  }

  // Whether connection `id`'s SEND waits for room in a full queue (address-full-policy BLOCK): its
  // session does not read it meanwhile (broker::sends_blocked). Set and cleared by the core.
  void set_blocked(std::uint64_t id, bool blocked) {
    std::lock_guard lock(mutex_);
    auto it = by_connection_.find(id);
    if (it == by_connection_.end() || it->second.blocked == blocked) return;
    it->second.blocked = blocked;
    blocked_.fetch_add(blocked ? 1 : -1, std::memory_order_relaxed);
  }
  bool blocked(std::uint64_t id) const {
    if (blocked_.load(std::memory_order_relaxed) == 0) return false;  // no lock while nobody waits
    std::lock_guard lock(mutex_);
    auto it = by_connection_.find(id);
    return it != by_connection_.end() && it->second.blocked;
  }

  // One connection alone never holds more than this fraction of the limit: what it holds is
  // written in the group commits ahead of every other connection's writes, so it is what another
  // producer's receipt waits behind (docs/performance.md, "Tenants").
  static constexpr std::uint64_t kConnectionShare = 8;

  std::uint64_t held_by(std::uint64_t id) const {  // for tests
    std::lock_guard lock(mutex_);
    auto it = by_connection_.find(id);
    return it == by_connection_.end() ? 0 : it->second.bytes;
  }

 private:
  struct account {
    std::string user;
    std::uint64_t bytes = 0;
    bool blocked = false;
  };
  void adjust(std::uint64_t id, std::int64_t delta) {
    std::lock_guard lock(mutex_);
    auto it = by_connection_.find(id);
    if (it != by_connection_.end()) change(it->second, delta);
  }
  void change(account& a, std::int64_t delta) {
    std::uint64_t before = a.bytes;
    a.bytes = delta < 0 ? a.bytes - std::min(a.bytes, static_cast<std::uint64_t>(-delta))
                        : a.bytes + static_cast<std::uint64_t>(delta);
    if (before == 0 && a.bytes > 0) ++holding_;
    if (before > 0 && a.bytes == 0) --holding_;
    if (a.bytes == before) return;
    std::uint64_t& u = by_user_[a.user];
    u = a.bytes > before ? u + (a.bytes - before) : u - std::min(u, before - a.bytes);
    if (u == 0) by_user_.erase(a.user);
  }

  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, account> by_connection_;
  std::unordered_map<std::string, std::uint64_t> by_user_;  // only users holding some
  std::size_t holding_ = 0;  // connections holding some
  std::atomic<std::int64_t> blocked_{0};  // connections blocked (BLOCK)
};

}  // namespace escrow::broker
