// Login checks, the success cache, the login threads and the back-off (see authenticator.h).
#include "escrow/broker/security/authenticator.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include "escrow/common/hex.h"
#include "escrow/broker/security/names.h"
#include "escrow/broker/security/password_hash.h"

namespace escrow::broker {
namespace {

using clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::minutes kForgetAfter{15};  // a count quiet this long starts afresh
constexpr std::size_t kMaxRecords = 100000;       // failure counts remembered at once, per kind
constexpr std::size_t kMaxRemembered = 100000;    // successful logins remembered at once
const char* const kRefused = "login refused: unknown user or wrong passcode";
const char* const kBusy = "login refused unchecked: too many logins wait for their check; try again later";
const char* const kLater =
    "login refused unchecked: too many failed logins of this user lately; try again later";

// A hash that no password matches (its key is all zeros, its salt random) and that costs what the
// dearest of the users' own hashes costs, so that no user's check takes longer than an unknown
// name's: a user's existence does not show in the time of a refusal (docs/security.md). It is made
// at each load of the users file (start and SIGHUP), which is also when hashes cheaper than the
// default are warned about: their users' refusals come faster, and a stolen file is guessed faster.
std::string make_dummy_hash(const users_table* users) {
  std::uint32_t iterations = 0;
  std::size_t weak = 0;
  std::string named;  // the first few weak ones
  if (users)
    for (const auto& [name, u] : users->by_name) {
      std::uint32_t n = password_hash_iterations(u.password_hash);
      iterations = std::max(iterations, n);
      if (n == 0 || n >= kDefaultPasswordIterations || ++weak > 10) continue;
      named += (named.empty() ? "'" : ", '") + loggable(name) + "' (" + std::to_string(n) + ")";
    }
  if (weak > 0)
    spdlog::warn("users file: {} user(s) have password hashes of fewer than {} iterations: {}{}. Their logins are "
                 "refused faster than others' (which tells that they exist) and their passwords are cheaper to "
                 "guess from a copy of the file: make their hashes again with escrowd --hash-password",
                 weak, kDefaultPasswordIterations, named, weak > 10 ? ", ..." : "");
  if (iterations == 0) iterations = kDefaultPasswordIterations;  // no passwords: certificates only
  unsigned char salt[16];
  if (RAND_bytes(salt, sizeof salt) != 1) throw std::runtime_error("RAND_bytes failed");
  return "pbkdf2-sha256:" + std::to_string(iterations) + ":" + hex::encode(salt, sizeof salt) + ":" + std::string(64, '0');
}

login_result refused() {
  login_result r;
  r.problem = kRefused;
  return r;
}

}  // namespace

authenticator::authenticator(std::shared_ptr<const users_table> users, const login_limits& limits)
    : anonymous_(users == nullptr), limits_(limits), users_(std::move(users)) {
  cache_secret_.resize(32);
  if (RAND_bytes(reinterpret_cast<unsigned char*>(cache_secret_.data()), 32) != 1)
    throw std::runtime_error("RAND_bytes failed");
  if (anonymous_) return;
  dummy_hash_ = make_dummy_hash(users_.get());
  for (unsigned i = 0; i < std::max(1u, limits_.threads); ++i) threads_.emplace_back([this] { work(); });
}

authenticator::~authenticator() {
  std::vector<attempt> unanswered;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (due_map* queue : {&clean_due_, &due_})
      for (auto& [when, a] : *queue) unanswered.push_back(std::move(a));
    for (auto& [ip, line] : lines_)
      for (auto& a : line.waiting) unanswered.push_back(std::move(a));
    clean_due_.clear();
    due_.clear();
    scheduled_.clear();
    queued_ip_.clear();
    lines_.clear();
  }
  wake_.notify_all();
  for (auto& a : unanswered) a.done(refused());
  for (auto& t : threads_) t.join();
}

std::string authenticator::keyed_hash(const std::string& domain, const std::string& a, const std::string& b) const {
  std::string input = domain;
  input.push_back('\0');
  input += a;
  input.push_back('\0');
  input += b;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), cache_secret_.data(), static_cast<int>(cache_secret_.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), out, &size);
  return std::string(reinterpret_cast<const char*>(out), size);
}

std::chrono::milliseconds authenticator::backoff(std::uint32_t failures) const {
  if (failures == 0) return std::chrono::milliseconds(0);
  auto shift = std::min<std::uint32_t>(failures - 1, 20);
  return std::min<std::chrono::milliseconds>(kFirstBackoff * (1u << shift),
                                             std::chrono::milliseconds(limits_.backoff_max_ms));
}

authenticator::failure_record* authenticator::find_record(std::map<std::string, failure_record>& records,
                                                          const std::string& key, clock::time_point now) {
  auto it = records.find(key);
  if (it == records.end()) return nullptr;
  if (now - it->second.last_failure > kForgetAfter && now >= it->second.next_turn) {
    records.erase(it);
    return nullptr;
  }
  return &it->second;
}

std::optional<login_result> authenticator::answer_at_once(const login_request& r) {
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
  // A verified client certificate: no secret to guess, nothing slow to check.
  if (!r.certificate_subject.empty()) {
    auto s = users->name_by_subject.find(r.certificate_subject);
    if (s != users->name_by_subject.end()) {
      const user_entry& user = users->by_name.at(s->second);
      if (!r.login.empty() && r.login != user.name) {
        failed_logins_.fetch_add(1, std::memory_order_relaxed);
        spdlog::warn("failed login from {}: the certificate belongs to user '{}', the login names '{}'", r.peer_ip,
                     user.name, loggable(r.login));
        return refused();
      }
      result.ok = true;
      result.user = user.name;
      result.roles = user.roles;
      return result;
    }
  }
  // A login and passcode that succeeded before (the cache is emptied when the users change).
  auto u = users->by_name.find(r.login);
  if (r.login.empty() || u == users->by_name.end() || u->second.password_hash.empty()) return std::nullopt;
  std::string key = keyed_hash("remembered", r.login, r.passcode);
  {
    std::lock_guard lock(mutex_);
    if (!remembered_.count(key) || users_ != users) return std::nullopt;
  }
  record_success(r);
  result.ok = true;
  result.user = u->second.name;
  result.roles = u->second.roles;
  return result;
}

void authenticator::refuse_at_once(attempt& a, const std::string& reason) {
  failed_logins_.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("failed login from {}: {}", a.request.peer_ip, reason);
  login_result r;
  r.problem = kBusy;
  a.done(std::move(r));
}

bool authenticator::recently_failed(const std::string& ip, clock::time_point now) {
  return find_record(address_failures_, ip, now) != nullptr;
}

std::uint64_t authenticator::submit(login_request request, callback done) {
  attempt a{std::move(request), std::move(done), 0, {}, false, std::nullopt};
  std::string reason;
  std::vector<attempt> later;
  {
    std::lock_guard lock(mutex_);
    auto now = clock::now();
    const std::string& ip = a.request.peer_ip;
    a.user_key = keyed_hash("user", a.request.login);
    a.trusted = trusted_pairs_.count(keyed_hash("trusted", ip, a.request.login)) > 0;
    auto line = lines_.find(ip);
    std::size_t of_user = a.trusted ? 0 : waiting_by_user_[a.user_key];
    // Addresses with a recent failure share what is left when reserved_pending is set aside.
    bool tainted = recently_failed(ip, now);
    std::size_t room = tainted ? limits_.max_pending - limits_.reserved_pending : limits_.max_pending;
    if (stopping_) {
      reason = "escrowd is stopping";
    } else if (pending_ >= room) {
      reason = "refused unchecked: " + std::to_string(pending_) +
               " logins already wait for their check or are being checked (security.max-pending-logins is " +
               std::to_string(limits_.max_pending) +
               (tainted ? ", of which security.reserved-pending-logins " + std::to_string(limits_.reserved_pending) +
                              " are kept for addresses with no failed login in the last 15 minutes"
                        : std::string()) +
               ")";
    } else if (line != lines_.end() && line->second.waiting.size() >= limits_.max_waiting_per_address) {
      reason = "refused unchecked: " + std::to_string(line->second.waiting.size()) +
               " logins from this address already wait behind the one being checked "
               "(security.max-waiting-logins-per-address is " + std::to_string(limits_.max_waiting_per_address) + ")";
    } else if (of_user >= limits_.max_waiting_per_user) {
      reason = "refused unchecked: " + std::to_string(of_user) + " logins of user '" + loggable(a.request.login) +
               "' already wait for their check or are being checked (security.max-waiting-logins-per-user is " +
               std::to_string(limits_.max_waiting_per_user) + ")";
    } else {
      ++pending_;
      if (!a.trusted) ++waiting_by_user_[a.user_key];  // a trusted pair is not counted
      a.ticket = next_ticket_++;
      std::uint64_t ticket = a.ticket;
      if (line != lines_.end()) {
        spdlog::debug("login of '{}' from {} waits its turn behind {} from this address", loggable(a.request.login),
                      ip, line->second.waiting.size() + 1);
        queued_ip_.emplace(ticket, ip);
        line->second.waiting.push_back(std::move(a));
        return ticket;
      }
      lines_[ip];
      if (schedule(a)) return ticket;
      // Its delay is too long: refused below; the line it opened is empty.
      finished(a);
      lines_.erase(ip);
      later.push_back(std::move(a));
    }
    if (of_user == 0 && !a.trusted) waiting_by_user_.erase(a.user_key);
  }
  if (!later.empty())
    try_again_later(later);
  else
    refuse_at_once(a, reason);
  return 0;
}

void authenticator::finished(const attempt& a) {
  if (pending_ > 0) --pending_;
  if (a.trusted) return;
  auto n = waiting_by_user_.find(a.user_key);
  if (n != waiting_by_user_.end() && --n->second == 0) waiting_by_user_.erase(n);
}

void authenticator::try_again_later(std::vector<attempt>& refusals) {
  for (auto& a : refusals) {
    failed_logins_.fetch_add(1, std::memory_order_relaxed);
    login_result r;
    r.problem = kLater;
    a.done(std::move(r));
  }
}

bool authenticator::schedule(attempt& a) {
  auto now = clock::now();
  auto due = now;
  const auto& r = a.request;
  std::uint32_t pair_failures = 0, user_failures = 0;
  if (failure_record* p = find_record(pair_failures_, keyed_hash("pair", r.peer_ip, r.login), now)) {
    pair_failures = p->failures;
    due = std::max(due, p->last_failure + backoff(p->failures));
  }
  failure_record* u = find_record(user_failures_, a.user_key, now);
  if (u) user_failures = u->failures;
  if (a.trusted) u = nullptr;  // its address logged in as this user before: no per-user spacing
  if (u) {
    // Checks of a failing user are spaced out whatever address they come from: each takes a turn.
    due = std::max({due, u->last_failure + backoff(u->failures), u->next_turn});
  }
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(due - now);
  if (wait > std::chrono::milliseconds(limits_.max_delay_ms)) {
    spdlog::warn("failed login from {}: refused unchecked: the check of '{}' would wait {} ms for the back-off of "
                 "{} earlier failures of this user ({} from this address), more than security.max-login-delay-ms "
                 "({}); the client is told to try again later",
                 r.peer_ip, loggable(r.login), wait.count(), user_failures, pair_failures, limits_.max_delay_ms);
    return false;
  }
  if (u) {
    a.turn = std::pair{u->next_turn, due + backoff(u->failures)};
    u->next_turn = a.turn->second;
  }
  spdlog::debug("login check of '{}' from {}: {} earlier failures of this user from this address, {} in all{}; "
                "waits {} ms",
                loggable(r.login), r.peer_ip, pair_failures, user_failures,
                a.trusted ? " (this address logged in as this user before: no per-user spacing)" : "", wait.count());
  due_map& queue = recently_failed(r.peer_ip, now) ? due_ : clean_due_;
  std::uint64_t ticket = a.ticket;
  auto it = queue.emplace(due, std::move(a));
  scheduled_[ticket] = {&queue, it};
  wake_.notify_one();
  return true;
}

void authenticator::advance_line(const std::string& ip, std::vector<attempt>& refusals) {
  auto line = lines_.find(ip);
  if (line == lines_.end()) return;
  while (!line->second.waiting.empty()) {
    attempt next = std::move(line->second.waiting.front());
    line->second.waiting.pop_front();
    queued_ip_.erase(next.ticket);
    if (schedule(next)) return;
    finished(next);
    refusals.push_back(std::move(next));
  }
  lines_.erase(line);
}

void authenticator::cancel(std::uint64_t ticket) {
  if (ticket == 0) return;
  std::vector<attempt> dropped, refusals;
  {
    std::lock_guard lock(mutex_);
    if (auto q = queued_ip_.find(ticket); q != queued_ip_.end()) {
      auto& waiting = lines_[q->second].waiting;
      for (auto it = waiting.begin(); it != waiting.end(); ++it)
        if (it->ticket == ticket) {
          dropped.push_back(std::move(*it));
          waiting.erase(it);
          break;
        }
      queued_ip_.erase(q);
    } else if (auto s = scheduled_.find(ticket); s != scheduled_.end()) {
      dropped.push_back(std::move(s->second.second->second));
      s->second.first->erase(s->second.second);
      scheduled_.erase(s);
      // Its per-user turn goes back, unless a later check has taken the next one meanwhile.
      const attempt& gone = dropped.back();
      if (gone.turn)
        if (auto u = user_failures_.find(gone.user_key); u != user_failures_.end() && u->second.next_turn == gone.turn->second)
          u->second.next_turn = gone.turn->first;
      advance_line(dropped.back().request.peer_ip, refusals);  // it held its address's turn
    }
    for (auto& a : dropped) finished(a);
  }
  for (auto& a : dropped) {
    abandoned_logins_.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("login of '{}' from {} dropped before its check: the client closed the connection",
                  loggable(a.request.login), a.request.peer_ip);
    login_result r;
    r.problem = "login dropped unchecked: the client closed the connection while its check waited";
    a.done(std::move(r));
  }
  try_again_later(refusals);
}

std::pair<authenticator::due_map*, authenticator::due_map::iterator> authenticator::first_due(
    clock::time_point now, clock::time_point& next) {
  next = clock::time_point::max();
  for (due_map* queue : {&clean_due_, &due_}) {
    if (queue->empty()) continue;
    auto first = queue->begin();
    if (first->first <= now) return {queue, first};
    next = std::min(next, first->first);
  }
  return {nullptr, {}};
}

void authenticator::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (stopping_) return;
    clock::time_point next;
    auto [queue, first] = first_due(clock::now(), next);
    if (!queue) {
      if (next == clock::time_point::max())
        wake_.wait(lock);
      else
        wake_.wait_until(lock, next);
      continue;
    }
    attempt a = std::move(first->second);
    scheduled_.erase(a.ticket);
    queue->erase(first);
    lock.unlock();
    login_result verdict = check(a.request);
    lock.lock();
    // The outcome is recorded: the address's next check may take its turn, with its back-off.
    finished(a);
    std::vector<attempt> refusals;
    advance_line(a.request.peer_ip, refusals);
    lock.unlock();
    a.done(std::move(verdict));
    try_again_later(refusals);
    lock.lock();
  }
}

login_result authenticator::check(const login_request& r) {
  std::shared_ptr<const users_table> users;
  std::string dummy;
  {
    std::lock_guard lock(mutex_);
    users = users_;
    dummy = dummy_hash_;
  }
  const user_entry* user = nullptr;
  auto u = r.login.empty() ? users->by_name.end() : users->by_name.find(r.login);
  if (u != users->by_name.end() && !u->second.password_hash.empty()) user = &u->second;
  std::string key = keyed_hash("remembered", r.login, r.passcode);
  bool known = false;
  if (user) {
    // An earlier check (perhaps the one just before this in the same queue) may have succeeded.
    std::lock_guard lock(mutex_);
    known = remembered_.count(key) > 0 && users_ == users;
  }
  bool match = known;
  if (!known) {
    // Exactly one slow hash whatever the case: an unknown user, one without a password and a
    // missing login cost what a wrong password costs, so timing does not tell them apart.
    password_hashes_.fetch_add(1, std::memory_order_relaxed);
    match = verify_password(r.passcode, user ? user->password_hash : dummy) && user != nullptr;
  }
  if (match) {
    {
      std::lock_guard lock(mutex_);
      if (users_ == users) {
        if (remembered_.size() >= kMaxRemembered) remembered_.clear();
        remembered_.insert(key);
      }
    }
    record_success(r);
    login_result result;
    result.ok = true;
    result.user = user->name;
    result.roles = user->roles;
    return result;
  }
  std::string reason;
  if (r.login.empty())
    reason = "no login header (this broker requires a user)";
  else if (u == users->by_name.end())
    reason = "unknown user '" + loggable(r.login) + "'";
  else if (!user)
    reason = "user '" + loggable(r.login) + "' logs in only with a client certificate";
  else
    reason = "wrong passcode for user '" + loggable(r.login) + "'";
  record_failure(r);
  spdlog::warn("failed login from {}: {}", r.peer_ip, reason);
  return refused();
}

void authenticator::record_failure(const login_request& r) {
  failed_logins_.fetch_add(1, std::memory_order_relaxed);
  auto now = clock::now();
  auto count = [now](std::map<std::string, failure_record>& records, const std::string& key) {
    if (records.size() >= kMaxRecords && !records.count(key)) {
      auto cutoff = now - kForgetAfter;
      std::erase_if(records, [cutoff, now](const auto& e) {
        return e.second.last_failure < cutoff && e.second.next_turn <= now;
      });
      if (records.size() >= kMaxRecords) records.erase(records.begin());
    }
    auto& record = records[key];
    record.failures++;
    record.last_failure = now;
  };
  std::string pair = keyed_hash("pair", r.peer_ip, r.login), user = keyed_hash("user", r.login);
  std::lock_guard lock(mutex_);
  count(pair_failures_, pair);
  count(user_failures_, user);
  count(address_failures_, r.peer_ip);
}

void authenticator::record_success(const login_request& r) {
  // Its own (address, user) only: bob's success says nothing about guesses at alice's password,
  // and alice's from one address nothing about guesses from others.
  // It is trusted from now on: its checks skip the per-user spacing (authenticator.h).
  std::string pair = keyed_hash("pair", r.peer_ip, r.login), trusted = keyed_hash("trusted", r.peer_ip, r.login);
  std::lock_guard lock(mutex_);
  pair_failures_.erase(pair);
  if (trusted_pairs_.size() >= kMaxRemembered && !trusted_pairs_.count(trusted)) trusted_pairs_.clear();
  trusted_pairs_.insert(trusted);
}

void authenticator::replace_users(std::shared_ptr<const users_table> users) {
  if (anonymous_ || !users) return;
  std::string dummy = make_dummy_hash(users.get());
  std::lock_guard lock(mutex_);
  users_ = std::move(users);
  dummy_hash_ = std::move(dummy);
  remembered_.clear();
}

}  // namespace escrow::broker
