// Argument checks shared by producers and consumers (internal). Each throws client::error with
// kind invalid_argument and a sentence saying what to use instead.
#pragma once

#include <string>
#include <string_view>

#include "escrow/client_error.h"

namespace escrow::client::detail {

// /queue/NAME or /topic/NAME with a non-empty NAME.
inline void check_destination(const std::string& destination) {
  for (std::string_view prefix : {std::string_view("/queue/"), std::string_view("/topic/")})
    if (destination.size() > prefix.size() && destination.starts_with(prefix)) return;
  throw error(error::kind::invalid_argument,
              "destination '" + destination + "' is not valid: use /queue/NAME or /topic/NAME");
}

}  // namespace escrow::client::detail
