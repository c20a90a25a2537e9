// Connections that have not logged in yet (accepted, no successful CONNECT so far), counted per
// client address and in all, so that idle or slow sockets cannot take every connection
// (limits.max-unauthenticated-per-address and limits.max-unauthenticated-connections,
// docs/security.md "Limits"). The accept loops admit a connection here before its session exists;
// the session holds the prelogin_slot and gives it back when its CONNECT succeeds or it closes.
// Thread-safe: the accept strand admits, each session's strand releases.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace escrow::broker {

class prelogin_counts {
 public:
  enum class verdict { admitted, over_total, over_address };

  // Counts one more connection from `address` unless that would pass `per_address` for it or
  // `total` in all; says which.
  verdict admit(const std::string& address, std::uint32_t per_address, std::uint32_t total) {
    std::lock_guard lock(mutex_);
    if (total_ >= total) return verdict::over_total;
    std::uint32_t& n = by_address_[address];
    if (n >= per_address) {
      if (n == 0) by_address_.erase(address);
      return verdict::over_address;
    }
    ++n;
    ++total_;
    return verdict::admitted;
  }

  void release(const std::string& address) {
    std::lock_guard lock(mutex_);
    auto it = by_address_.find(address);
    if (it == by_address_.end()) return;
    if (--it->second == 0) by_address_.erase(it);
    --total_;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::uint32_t> by_address_;  // guarded by mutex_
  std::uint32_t total_ = 0;                                    // guarded by mutex_
};

// One admitted connection's place in prelogin_counts, given back once: by release() or at the end.
class prelogin_slot {
 public:
  prelogin_slot() = default;
  prelogin_slot(prelogin_counts& counts, std::string address) : counts_(&counts), address_(std::move(address)) {}
  prelogin_slot(prelogin_slot&& other) noexcept
      : counts_(std::exchange(other.counts_, nullptr)), address_(std::move(other.address_)) {}
  prelogin_slot& operator=(prelogin_slot&& other) noexcept {
    if (this != &other) {
      release();
      counts_ = std::exchange(other.counts_, nullptr);
      address_ = std::move(other.address_);
    }
    return *this;
  }
  prelogin_slot(const prelogin_slot&) = delete;
  prelogin_slot& operator=(const prelogin_slot&) = delete;
  ~prelogin_slot() { release(); }

  void release() {
    if (counts_) std::exchange(counts_, nullptr)->release(address_);
  }

 private:
  prelogin_counts* counts_ = nullptr;
  std::string address_;
};

}  // namespace escrow::broker
