// Sending ADMIN frames and turning their answers into JSON or exit codes (admin_call.h).
#include "admin_call.h"

#include <boost/json/parse.hpp>

#include "escrow/client.h"
#include "exit_codes.h"

namespace escrow::cli {

admin_answer admin_call(const settings& s, const std::string& command, const admin_args& args,
                        std::chrono::seconds timeout) {
  client::connect_options options = connect_options_for(s);
  std::unique_ptr<client::connection> c;
  try {
    c = client::connection::open(options);
  } catch (const client::error& e) {
    if (e.which() == client::error::kind::invalid_argument) throw failure(exit_usage, e.what());
    std::string why = e.which() == client::error::kind::broker_error ? "the broker refused the connection: " : "";
    throw failure(exit_cannot_connect, "cannot connect to " + s.url + ": " + why + e.what());
  }
  frame request{"ADMIN", {{"admin-command", command}}, {}};
  for (const auto& [name, value] : args) request.add(name, value);
  frame reply;
  try {
    reply = timeout.count() > 0 ? c->call(std::move(request), timeout) : c->call(std::move(request));
  } catch (const client::error& e) {
    if (e.which() == client::error::kind::timeout)
      throw failure(exit_failed, std::string(e.what()) + "; the operation may still complete: check with escrow status");
    throw failure(exit_failed, std::string("the broker refused ") + command + ": " + e.what());
  }
  c->close();
  std::string status(reply.get("admin-status"));
  std::string message(reply.get("message"));
  if (status == "not-found") throw failure(exit_not_found, message);
  if (status == "invalid") throw failure(exit_usage, message);
  if (status == "refused") throw failure(exit_failed, message);
  if (status != "ok")
    throw failure(exit_failed, "the broker's answer to " + command + " has no admin-status: is it older than this escrow?");
  admin_answer a;
  a.body = reply.body;
  boost::system::error_code ec;
  a.json = boost::json::parse(a.body, ec);
  if (ec) throw failure(exit_failed, "the broker's answer to " + command + " is not JSON: " + ec.message());
  return a;
}

}  // namespace escrow::cli
