// How a durable subscription is named: by the client-id, the subscription name and the user that
// created it, so each user has a client-id namespace of their own (docs/security.md, "Tenants").
// Its key in the `queues` table is d/CLIENT-ID NUL NAME NUL USER; a subscription without owner (an
// anonymous broker, or one stored before subscriptions had owners) is d/CLIENT-ID NUL NAME.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace escrow::broker {

struct durable_id {
  std::string client_id;
  std::string name;
  std::string owner;  // "" : none
};

std::string durable_key(const durable_id& d);
// The parts of a durable subscription's key; nullopt when it is not one.
std::optional<durable_id> parse_durable_key(std::string_view key);
// The name operators see: CLIENT-ID.NAME, with @USER when it has an owner.
std::string durable_display_name(const durable_id& d);

}  // namespace escrow::broker
