// Address settings: the per-address rules for messages that cannot be delivered (HornetQ's
// chapters on expiry and undelivered messages): where expired messages and dead letters go, the
// default time to live, the redelivery delay and the delivery attempts before a dead letter; how
// many duplicate ids an address remembers (Artemis's id-cache-size); and how much a queue may hold
// and what happens to a message that does not fit (Artemis's max-size-messages, max-size-bytes,
// address-full-policy and ring-size; broker/core/address_limits.cpp applies them); and which header
// makes a queue a last-value queue (Artemis's last-value-key; broker/core/last_values.cpp).
//
// Settings are written per address pattern (address_pattern.h: the HornetQ/Artemis wildcards).
// An address is a destination without its prefix ("/queue/orders.eu" -> "orders.eu"; a topic subscription's address is its topic).
// When several patterns match, each key takes its value from the most specific pattern that sets
// it (docs/configuration.md states the order); keys no pattern sets keep their defaults.
//
// Pure values and functions; no I/O. The core strand owns the table it resolves from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "escrow/broker/security/address_pattern.h"

namespace escrow::broker {

// What a SEND meets at a queue that is full (docs/configuration.md, "Queue limits"): refused with
// an ERROR, dropped for that queue (the RECEIPT still comes), the queue's oldest ready message
// removed to make room, or the SEND waits until there is room.
enum class full_policy { fail, drop, drop_head, block };
// "FAIL", "DROP", "DROP-HEAD", "BLOCK".
const char* to_string(full_policy p);
// The policy a name means, case-insensitively: FAIL, DROP, DROP-HEAD, BLOCK, and RabbitMQ's
// x-overflow names reject-publish (FAIL) and drop-head (DROP-HEAD). nullopt for anything else.
std::optional<full_policy> parse_full_policy(std::string_view name);

// The settings in force for one address, every key resolved.
struct address_settings {
  std::string expiry_address;                    // "" : expired messages are dropped (logged, counted)
  std::int64_t expiry_delay_ms = -1;             // time to live given to messages without one; -1: none
  std::uint64_t redelivery_delay_ms = 0;         // wait before a returned message is offered again
  double redelivery_multiplier = 1.0;            // the delay grows by this factor per attempt
  std::optional<std::uint64_t> max_redelivery_delay_ms;  // cap; unset: 10 x redelivery_delay_ms
  std::int64_t max_delivery_attempts = 10;       // unsuccessful deliveries before a dead letter; -1: never
  std::string dead_letter_address;               // "" : dead letters are dropped (logged, counted)
  double collision_avoidance_factor = 0.0;       // 0.0 to 1.0: random spread of the delay
  bool auto_delete_queues = true;                // an empty queue nobody uses goes (Artemis's default)
  std::uint64_t auto_delete_queues_delay_ms = 60000;  // after this long empty and unused
  // _AMQ_DUPL_ID values the address remembers, oldest forgotten first (Artemis's default); 0: the
  // header is not looked at (docs/stomp.md, "Duplicate detection").
  std::uint32_t id_cache_size = 20000;
  // Queue limits, per queue (a /queue/NAME's queue, each subscription of a /topic/NAME on its own):
  // the messages (ready, in flight, being stored, waiting out a redelivery delay) and their stored
  // bytes (storage::message_record::encoded_size()) a queue may hold; -1: unbounded.
  std::int64_t max_size_messages = -1;
  std::int64_t max_size_bytes = -1;
  full_policy address_full_policy = full_policy::fail;
  // DROP-HEAD and ring-size: the removed oldest message goes to dead-letter-address instead.
  bool dead_letter_on_drop = false;
  // A ring queue (Artemis): a new message beyond ring-size removes the oldest ready one; -1: none.
  std::int64_t ring_size = -1;
  // A last-value queue (Artemis): a new message whose header of this name (or, without it, whose
  // _AMQ_LVQ_NAME) has the value of a ready message's replaces that message; "": not one.
  std::string last_value_key;
  // An exclusive queue (Artemis's exclusive queues): one consumer receives at a time; the next
  // takes over when it leaves.
  bool exclusive = false;

  // Whether the queue has a limit of either kind (max-size-messages, max-size-bytes, ring-size).
  bool limited() const { return max_size_messages >= 0 || max_size_bytes >= 0 || ring_size >= 0; }

  // The wait before redelivering a message that has had `count` (>= 1) unsuccessful deliveries:
  // redelivery_delay x multiplier^(count-1), capped, then moved by up to the avoidance factor.
  // `random_unit` is uniform in [-1, 1] (the caller's randomness; tests pass fixed values).
  std::uint64_t redelivery_delay_for(std::uint32_t count, double random_unit) const;
};

// One `[[address-settings]]` table as the configuration wrote it: only the keys it sets.
struct address_setting_entry {
  std::string match;
  int line = 0;  // in the configuration file, for messages
  std::optional<std::string> expiry_address;
  std::optional<std::int64_t> expiry_delay_ms;
  std::optional<std::uint64_t> redelivery_delay_ms;
  std::optional<double> redelivery_multiplier;
  std::optional<std::uint64_t> max_redelivery_delay_ms;
  std::optional<std::int64_t> max_delivery_attempts;
  std::optional<std::string> dead_letter_address;
  std::optional<double> collision_avoidance_factor;
  std::optional<bool> auto_delete_queues;
  std::optional<std::uint64_t> auto_delete_queues_delay_ms;
  std::optional<std::uint32_t> id_cache_size;
  std::optional<std::int64_t> max_size_messages;
  std::optional<std::int64_t> max_size_bytes;
  std::optional<full_policy> address_full_policy;
  std::optional<bool> dead_letter_on_drop;
  std::optional<std::int64_t> ring_size;
  std::optional<std::string> last_value_key;  // last-value-key (default-last-value-key)
  std::optional<bool> last_value;             // last-value (last-value-queue): true is _AMQ_LVQ_NAME
  std::optional<bool> exclusive;              // exclusive (default-exclusive-queue)
};

// The header Artemis's last-value queues key on when the queue names none (last-value = true).
inline constexpr std::string_view kLastValueHeader = "_AMQ_LVQ_NAME";

// Resolves the settings of `address` from `entries` (in file order; a later entry wins a tie).
address_settings resolve_settings(const std::vector<address_setting_entry>& entries, std::string_view address);

}  // namespace escrow::broker
