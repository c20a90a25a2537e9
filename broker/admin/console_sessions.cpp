// The web console's sessions (console_sessions.h).
#include "console_sessions.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <array>
#include <stdexcept>

#include "escrow/common/hex.h"

namespace escrow::broker {

namespace {

std::string random_hex() {
  std::array<unsigned char, 32> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1)
    throw std::runtime_error("OpenSSL's random generator failed: no console session can be made");
  return hex::encode(bytes.data(), bytes.size());
}

}  // namespace

console_session console_sessions::create(console_user user, bool admin) {
  console_session s{random_hex(), random_hex(), std::move(user), admin};
  std::lock_guard lock(mutex_);
  auto now = clock::now();
  expire(now);
  // The user's own oldest session first, when they hold their share already.
  std::size_t theirs = 0;
  for (const auto& id : by_use_) theirs += sessions_.at(id).session.user.user == s.user.user;
  for (auto it = by_use_.begin(); theirs >= max_per_user_ && it != by_use_.end();) {
    if (sessions_.at(*it).session.user.user != s.user.user) {
      ++it;
      continue;
    }
    sessions_.erase(*it);
    it = by_use_.erase(it);
    --theirs;
  }
  while (sessions_.size() >= max_ && !by_use_.empty()) {
    sessions_.erase(by_use_.front());
    by_use_.pop_front();
  }
  by_use_.push_back(s.id);
  sessions_.emplace(s.id, entry{s, now, std::prev(by_use_.end())});
  return s;
}

std::optional<console_session> console_sessions::find(std::string_view id) {
  std::lock_guard lock(mutex_);
  auto now = clock::now();
  expire(now);
  auto it = sessions_.find(std::string(id));
  if (it == sessions_.end()) return std::nullopt;
  it->second.last_used = now;
  by_use_.splice(by_use_.end(), by_use_, it->second.order);
  return it->second.session;
}

void console_sessions::end(std::string_view id) {
  std::lock_guard lock(mutex_);
  auto it = sessions_.find(std::string(id));
  if (it == sessions_.end()) return;
  by_use_.erase(it->second.order);
  sessions_.erase(it);
}

std::size_t console_sessions::size() {
  std::lock_guard lock(mutex_);
  expire(clock::now());
  return sessions_.size();
}

void console_sessions::expire(clock::time_point now) {
  while (!by_use_.empty()) {
    auto it = sessions_.find(by_use_.front());
    if (now - it->second.last_used < timeout_) return;
    sessions_.erase(it);
    by_use_.pop_front();
  }
}

bool same_secret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace escrow::broker
