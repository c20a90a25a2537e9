// Internal to broker/core: the pure rules of when things happen to messages, kept apart from the
// core's state so that unit tests can check them one by one: a SEND's scheduled delivery time from
// its headers (schedule.cpp), and message-expiry-thread-priority as the share of the core a
// reaper pass takes (undelivered.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "escrow/frame.h"

namespace escrow::broker {

// A SEND's delivery time from its headers: `deliver_at` set (epoch ms) when it is later than
// `now`, 0 otherwise; the problem when the headers are wrong (the SEND's ERROR). docs/stomp.md,
// "Scheduled delivery".
std::optional<std::string> scheduled_delivery(const frame& f, std::uint64_t now, std::uint64_t& deliver_at);

// message-expiry-thread-priority (0-9) as the share of the core a reaper pass may take, and the
// pause after a turn that took `took` which keeps it to that share.
double reaper_share(unsigned priority);
std::chrono::steady_clock::duration reaper_pause(std::chrono::steady_clock::duration took, unsigned priority);

}  // namespace escrow::broker
