// One admin command over the STOMP port: connect (CONNECT with login/passcode), send an ADMIN frame
// with `admin-command` and its argument headers, wait for the RECEIPT and return its JSON body.
// Every failure becomes a cli::failure with the exit code it stands for (exit_codes.h).
#pragma once

#include <boost/json/value.hpp>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "settings.h"

namespace escrow::cli {

struct admin_answer {
  std::string body;         // the JSON text as the broker sent it (--json prints it)
  boost::json::value json;  // the same, parsed
};

using admin_args = std::vector<std::pair<std::string, std::string>>;

// Throws failure: exit_cannot_connect, exit_not_found, exit_failed (refused, or no answer in time),
// exit_usage (the broker found the arguments invalid).
admin_answer admin_call(const settings& s, const std::string& command, const admin_args& args = {},
                        std::chrono::seconds timeout = std::chrono::seconds(0));

}  // namespace escrow::cli
