// SIGHUP, the core's part (reload_configuration in net/reload.cpp reads the file and calls it): the
// keys the core applies at run time, taken on the core strand, then what they change put in force.
#include <spdlog/spdlog.h>

#include <map>

#include "core.h"
#include "core_timers.h"
#include "durable_name.h"
#include "escrow/broker/security/names.h"

namespace escrow::broker {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

// What one user no longer in the users file still owns.
struct owned {
  std::size_t subscriptions = 0;
  std::size_t branches = 0;
};

}  // namespace

void broker::warn_about_owners_gone(std::shared_ptr<const users_table> users, std::string when) {
  impl_->post([m = impl_.get(), users = std::move(users), when = std::move(when)] {
    std::map<std::string, owned> gone;
    auto known = [&](const std::string& owner) { return owner.empty() || users->by_name.count(owner) != 0; };
    for (const auto& [key, q] : m->topology.queues)
      if (auto d = parse_durable_key(key); d && !known(d->owner)) ++gone[d->owner].subscriptions;
    for (const auto& [id, b] : m->transactions.rm.branches())
      if (!known(b->owner)) ++gone[b->owner].branches;
    for (const auto& [owner, n] : gone)
      spdlog::warn("{}: user '{}' is no longer in the users file but still owns {} durable subscription(s) "
                   "and {} transaction branch(es): a new user named '{}' would own them. End them before the name "
                   "is given again (escrow subscriptions and escrow xa list show them; escrow subscription delete "
                   "CLIENT-ID NAME --owner {}, escrow xa rollback XID --owner {})",
                   when, loggable(owner), n.subscriptions, n.branches, loggable(owner), loggable(owner),
                   loggable(owner));
  });
}

void broker::reload(const broker_config& fresh) {
  impl_->post([m = impl_.get(), fresh] {
    broker_config& c = m->config;
    bool reaper = c.message_expiry_scan_period_ms != fresh.message_expiry_scan_period_ms;
    std::vector<std::string> changed = apply_reloadable_keys(c, fresh);
    if (reaper) {
      m->timers->reaper.cancel();
      m->schedule_reaper();
    }
    m->undelivered.settings_cache.clear();
    storage::batch created;
    m->create_undelivered_queues(created);
    if (!created.empty())
      m->submit(std::move(created), [](const storage::status& s) {
        if (!s.ok()) spdlog::warn("SIGHUP: new undelivered queues' records not stored yet: {}", s.message());
      });
    m->grants_cache.clear();
    spdlog::info("SIGHUP: reloaded {}: {}", c.config_file, join(changed));
    // Messages that waited for a setting (e.g. a lower max-delivery-attempts) move on their next
    // delivery; queues are offered again so that this happens now where consumers wait.
    for (auto& [id, q] : m->topology.queues_by_id) m->dispatch(q);
    m->flush();
  });
}

}  // namespace escrow::broker
