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

// A list command whose answer comes in pages (queues, connections, subscriptions, xa-list;
// docs/operations.md, "Paged answers"): asks for page after page on one connection, each with
// `after` set to the previous page's `next`, until one says "more":false. Returns one object: the
// first page's, with the entries of every page in its arrays `arrays` and without more and next;
// `body` is that object serialized (what --json prints).
admin_answer admin_list(const settings& s, const std::string& command, const std::vector<std::string>& arrays);

}  // namespace escrow::cli
