// Login checks, the success cache and the per-address back-off (see authenticator.h).
#include "authenticator.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

#include "password_hash.h"

namespace escrow::broker {
namespace {

using clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::minutes kForgetAfter{15};      // an address quiet this long starts afresh
constexpr std::size_t kMaxAddresses = 100000;         // failing addresses remembered at once
constexpr std::size_t kMaxRemembered = 100000;        // successful logins remembered at once
const char* const kRefused = "login refused: unknown user or wrong passcode";

}  // namespace

authenticator::authenticator(std::shared_ptr<const users_table> users, std::uint64_t backoff_max_ms)
    : anonymous_(users == nullptr), backoff_max_(backoff_max_ms), users_(std::move(users)) {
  cache_secret_.resize(32);
  if (RAND_bytes(reinterpret_cast<unsigned char*>(cache_secret_.data()), 32) != 1)
    throw std::runtime_error("RAND_bytes failed");
}

authenticator::~authenticator() { pool_.join(); }

std::chrono::milliseconds authenticator::wait_before_attempt(const std::string& ip) {
  std::lock_guard lock(mutex_);
  auto it = addresses_.find(ip);
  if (it == addresses_.end()) return std::chrono::milliseconds(0);
  auto now = clock::now();
  if (now - it->second.last_failure > kForgetAfter) {
    addresses_.erase(it);
    return std::chrono::milliseconds(0);
  }
  auto& a = it->second;
  auto shift = std::min<std::uint32_t>(a.failures - 1, 20);
  auto backoff = std::min<std::chrono::milliseconds>(kFirstBackoff * (1u << shift), backoff_max_);
  auto turn = std::max(now, a.next_turn);
  a.next_turn = turn + backoff;
  return std::chrono::duration_cast<std::chrono::milliseconds>(turn + backoff - now);
}

std::string authenticator::remembered_key(const std::string& user, const std::string& password) const {
  std::string input = user;
  input.push_back('\0');
  input += password;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), cache_secret_.data(), static_cast<int>(cache_secret_.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), out, &size);
  return std::string(reinterpret_cast<const char*>(out), size);
}

login_result authenticator::check(const login_request& r) {
  login_result result;
  if (anonymous_) {
    result.ok = true;
    return result;
  }
  std::shared_ptr<const users_table> users;
  {
    std::lock_guard lock(mutex_);
    users = users_;
  }
  const user_entry* user = nullptr;
  std::string reason;
  if (!r.certificate_subject.empty()) {
    auto s = users->name_by_subject.find(r.certificate_subject);
    if (s != users->name_by_subject.end()) {
      user = &users->by_name.at(s->second);
      if (!r.login.empty() && r.login != user->name) {
        reason = "the certificate belongs to user '" + user->name + "', the login names '" + r.login + "'";
        user = nullptr;
      }
    }
  }
  if (!user && reason.empty()) {
    auto u = users->by_name.find(r.login);
    if (r.login.empty()) {
      reason = "no login header (this broker requires a user)";
    } else if (u == users->by_name.end()) {
      reason = "unknown user '" + r.login + "'";
      // As slow as a wrong password, so that timing does not tell which users exist.
      static const std::string dummy = make_password_hash("no such user");
      verify_password(r.passcode, dummy);
    } else if (u->second.password_hash.empty()) {
      reason = "user '" + r.login + "' logs in only with a client certificate";
    } else {
      std::string key = remembered_key(r.login, r.passcode);
      bool known;
      {
        std::lock_guard lock(mutex_);
        known = remembered_.count(key) > 0;
      }
      if (known || verify_password(r.passcode, u->second.password_hash)) {
        user = &u->second;
        std::lock_guard lock(mutex_);
        if (remembered_.size() >= kMaxRemembered) remembered_.clear();
        remembered_.insert(key);
      } else {
        reason = "wrong passcode for user '" + r.login + "'";
      }
    }
  }
  if (!user) {
    record_failure(r.peer_ip);
    spdlog::warn("failed login from {}: {}", r.peer_ip, reason);
    result.problem = kRefused;
    return result;
  }
  record_success(r.peer_ip);
  result.ok = true;
  result.user = user->name;
  result.roles = user->roles;
  return result;
}

void authenticator::record_failure(const std::string& ip) {
  failed_logins_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  if (addresses_.size() >= kMaxAddresses && !addresses_.count(ip)) {
    auto cutoff = clock::now() - kForgetAfter;
    std::erase_if(addresses_, [cutoff](const auto& a) { return a.second.last_failure < cutoff; });
    if (addresses_.size() >= kMaxAddresses) addresses_.erase(addresses_.begin());
  }
  auto& a = addresses_[ip];
  a.failures++;
  a.last_failure = clock::now();
}

void authenticator::record_success(const std::string& ip) {
  std::lock_guard lock(mutex_);
  addresses_.erase(ip);
}

void authenticator::replace_users(std::shared_ptr<const users_table> users) {
  if (anonymous_ || !users) return;
  std::lock_guard lock(mutex_);
  users_ = std::move(users);
  remembered_.clear();
}

}  // namespace escrow::broker
