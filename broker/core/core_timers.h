// Internal to broker/core: the core's Asio timers, all bound to the core strand. Kept out of core.h so
// that only the files that arm timers pay for the Asio headers.
#pragma once

#include <boost/asio/steady_timer.hpp>

namespace escrow::broker {

struct core_timers {
  boost::asio::steady_timer branch_expiry;  // rolls back branches past their timeout, once a second
  boost::asio::steady_timer reaper;         // the expiry reaper, every message-expiry-scan-period
  boost::asio::steady_timer reaper_turn;    // the next turn of a reaper pass cut into turns
  boost::asio::steady_timer due;            // the earliest delayed redelivery or scheduled message
  boost::asio::steady_timer deferred_acks;  // submits acknowledgements no other write has taken
  boost::asio::steady_timer coordination;   // the recovery pass over the coordinated databases
};

}  // namespace escrow::broker
