// What one connection and one user may hold (docs/security.md, "Tenants" and "Limits"): connections
// per user, open and prepared branches per connection and per user, the bytes of SENDs held in open
// transactions, the queues a user's frames create and the bytes of persistent messages its SENDs
// keep stored. Every refusal names the limit's key. Core strand only.
#include <spdlog/spdlog.h>

#include "core.h"
#include "escrow/storage/store.h"
#include "escrow/xa.h"

namespace escrow::broker {
namespace {

// Branch states that hold a place in max-branches-per-connection and max-branches-per-user.
constexpr std::initializer_list<rm::branch_state> kOpen = {rm::branch_state::active, rm::branch_state::idle,
                                                           rm::branch_state::rollback_only};

}  // namespace

bool broker::impl::admit(connection& c) {
  auto& n = clients.connections_per_user[c.info.user];
  if (n >= config.max_connections_per_user) {
    if (n == 0) clients.connections_per_user.erase(c.info.user);
    error(c, "too many connections: " + who(c) + " already has " + std::to_string(n) +
                 " (limits.max-connections-per-user)");
    return false;
  }
  ++n;
  return true;
}

bool broker::impl::may_subscribe(connection& c, const frame& f) {
  auto it = clients.subscriptions_per_user.find(c.info.user);
  std::uint32_t n = it == clients.subscriptions_per_user.end() ? 0 : it->second;
  if (n < config.max_subscriptions_per_user) return true;
  error(c, "too many subscriptions: " + who(c) + " already has " + std::to_string(n) +
               " over all its connections (limits.max-subscriptions-per-user)", &f);
  return false;
}

void broker::impl::count_subscriptions(const connection& c, std::int64_t delta) {
  if (delta == 0) return;
  auto& n = clients.subscriptions_per_user[c.info.user];
  n = static_cast<std::uint32_t>(std::max<std::int64_t>(0, static_cast<std::int64_t>(n) + delta));
  if (n == 0) clients.subscriptions_per_user.erase(c.info.user);
}

void broker::impl::release(connection& c) {
  auto it = clients.connections_per_user.find(c.info.user);
  if (it == clients.connections_per_user.end()) return;
  if (--it->second == 0) clients.connections_per_user.erase(it);
}

bool broker::impl::may_start_branch(connection& c, const frame* request) {
  std::erase_if(c.started_branches, [](const std::weak_ptr<rm::branch>& w) {
    auto b = w.lock();
    return !b || (b->state != rm::branch_state::active && b->state != rm::branch_state::idle &&
                  b->state != rm::branch_state::rollback_only);
  });
  std::size_t open = c.started_branches.size() + c.transactions.size();
  if (open >= config.max_branches_per_connection) {
    error(c, "too many open transactions on this connection: " + std::to_string(open) +
                 " begun or started and not yet prepared or finished (limits.max-branches-per-connection)",
          request);
    return false;
  }
  std::size_t by_user = transactions.rm.count(c.info.user, kOpen);
  if (by_user >= config.max_branches_per_user) {
    error(c, "too many open transactions: " + who(c) + " has " + std::to_string(by_user) +
                 " begun or started and not yet prepared or finished, over all connections "
                 "(limits.max-branches-per-user)",
          request);
    return false;
  }
  return true;
}

std::optional<std::string> broker::impl::prepare_refusal(const connection& c) const {
  // Prepares still being written count too: answers not yet sent must not let a burst through.
  std::size_t prepared =
      transactions.rm.count(c.info.user, {rm::branch_state::prepared}) + transactions.rm.preparing(c.info.user);
  if (prepared < config.max_prepared_branches_per_user) return std::nullopt;
  return who(c) + " already has " + std::to_string(prepared) +
         " prepared branches waiting for their commit or rollback (limits.max-prepared-branches-per-user); "
         "the branch stays idle: roll it back, or prepare it once others are decided";
}

bool broker::impl::may_stage(connection& c, rm::branch& b, std::uint64_t bytes, const frame& f) {
  if (b.staged_bytes + bytes > config.max_transaction_bytes) {
    error(c, "SEND refused: the transaction would hold " + std::to_string(b.staged_bytes + bytes) +
                 " bytes of messages, above limits.max-transaction-bytes (" +
                 std::to_string(config.max_transaction_bytes) + "); commit in smaller transactions",
          &f);
    return false;
  }
  std::uint64_t& held = transactions.transaction_bytes_by_user[b.owner];
  if (held + bytes > config.max_transaction_bytes_per_user) {
    if (held == 0) transactions.transaction_bytes_by_user.erase(b.owner);
    error(c, "SEND refused: " + who(c) + "'s open transactions would hold " + std::to_string(held + bytes) +
                 " bytes of messages, above limits.max-transaction-bytes-per-user (" +
                 std::to_string(config.max_transaction_bytes_per_user) + "); commit or roll back some first",
          &f);
    return false;
  }
  held += bytes;
  b.staged_bytes += bytes;
  return true;
}

void broker::impl::release_staged(rm::branch& b) {
  if (b.staged_bytes == 0) return;
  auto it = transactions.transaction_bytes_by_user.find(b.owner);
  if (it != transactions.transaction_bytes_by_user.end()) {
    it->second -= std::min(it->second, b.staged_bytes);
    if (it->second == 0) transactions.transaction_bytes_by_user.erase(it);
  }
  b.staged_bytes = 0;
}

bool broker::impl::may_create_queue(connection& c, const std::string& storage_key, const frame* request) {
  if (topology.queues.count(storage_key)) return true;
  auto it = queues_by_user.find(c.info.user);
  std::uint32_t n = it == queues_by_user.end() ? 0 : it->second;
  if (n < config.max_queues_per_user) return true;
  error(c, "no new queue: " + who(c) + " has created " + std::to_string(n) +
               " queues and durable subscriptions (limits.max-queues-per-user); use an existing one, or ask an "
               "operator to delete unused ones",
        request);
  return false;
}

void broker::impl::count_queue(const queue& q, int delta) {
  if (q.type() == queue::kind::subscription || !q.creator) return;
  auto& n = queues_by_user[*q.creator];
  n = delta > 0 ? n + 1 : (n > 0 ? n - 1 : 0);
  if (n == 0) queues_by_user.erase(*q.creator);
}

}  // namespace escrow::broker

namespace escrow::broker {

bool broker::impl::may_store(connection& c, std::uint64_t bytes, bool in_transaction, const frame& f) {
  if (store_quota == 0) return true;
  const std::string& user = c.info.user;
  std::uint64_t stored = store.stored_bytes_of(user);
  auto storing = storing_by_user.find(user);
  std::uint64_t held = stored + (storing == storing_by_user.end() ? 0 : storing->second);
  auto staged = transactions.transaction_bytes_by_user.find(user);
  if (staged != transactions.transaction_bytes_by_user.end()) held += staged->second;
  std::uint64_t after = in_transaction ? held : held + bytes;
  if (after <= store_quota) return true;
  error(c, "message not stored: " + who(c) + " has " + std::to_string(in_transaction ? held - std::min(held, bytes) : held) +
               " bytes of persistent messages stored, being stored or in open transactions, and this one of " +
               std::to_string(bytes) + " bytes would take them above limits.max-stored-bytes-per-user (" +
               std::to_string(store_quota) + "); consume some of them first",
        &f);
  return false;
}

void broker::impl::count_storing(const std::string& user, std::uint64_t bytes, bool done) {
  std::uint64_t& n = storing_by_user[user];
  n = done ? n - std::min(n, bytes) : n + bytes;
  if (n == 0) storing_by_user.erase(user);
}

}  // namespace escrow::broker
