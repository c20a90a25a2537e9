// Sending ADMIN frames and turning their answers into JSON or exit codes (admin_call.h).
#include "admin_call.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "escrow/client.h"
#include "exit_codes.h"

namespace escrow::cli {

namespace {

// One connection to the broker, for one command or for the pages of a list.
class admin_session {
 public:
  explicit admin_session(const settings& s) {
    client::connect_options options = connect_options_for(s);
    try {
      c_ = client::connection::open(options);
    } catch (const client::error& e) {
      if (e.which() == client::error::kind::invalid_argument) throw failure(exit_usage, e.what());
      std::string why = e.which() == client::error::kind::broker_error ? "the broker refused the connection: " : "";
      throw failure(exit_cannot_connect, "cannot connect to " + s.url + ": " + why + e.what());
    }
  }

  admin_answer call(const std::string& command, const admin_args& args, std::chrono::seconds timeout) {
    frame request{"ADMIN", {{"admin-command", command}}, {}};
    for (const auto& [name, value] : args) request.add(name, value);
    frame reply;
    try {
      reply = timeout.count() > 0 ? c_->call(std::move(request), timeout) : c_->call(std::move(request));
    } catch (const client::error& e) {
      if (e.which() == client::error::kind::timeout)
        throw failure(exit_failed, std::string(e.what()) + "; the operation may still complete: check with escrow status");
      throw failure(exit_failed, std::string("the broker refused ") + command + ": " + e.what());
    }
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

  void close() { c_->close(); }

 private:
  std::unique_ptr<client::connection> c_;
};

}  // namespace

admin_answer admin_call(const settings& s, const std::string& command, const admin_args& args,
                        std::chrono::seconds timeout) {
  admin_session session(s);
  admin_answer a = session.call(command, args, timeout);
  session.close();
  return a;
}

admin_answer admin_list(const settings& s, const std::string& command, const std::vector<std::string>& arrays) {
  admin_session session(s);
  admin_args args;
  boost::json::object merged;
  for (bool first = true;; first = false) {
    admin_answer page = session.call(command, args, std::chrono::seconds(0));
    if (!page.json.is_object())
      throw failure(exit_failed, "the broker's answer to " + command + " is not a JSON object");
    boost::json::object& o = page.json.as_object();
    const boost::json::value* more = o.if_contains("more");
    const boost::json::value* next = o.if_contains("next");
    bool again = more && more->is_bool() && more->as_bool();
    if (first) {
      merged = o;
    } else {
      for (const auto& name : arrays) {
        const boost::json::value* entries = o.if_contains(name);
        boost::json::value* into = merged.if_contains(name);
        if (entries && entries->is_array() && into && into->is_array())
          for (const auto& e : entries->as_array()) into->as_array().push_back(e);
      }
    }
    if (!again) break;
    if (!next || !next->is_string())
      throw failure(exit_failed, "the broker's answer to " + command + " says there is more but has no next cursor");
    std::string cursor(next->as_string());
    // Each page starts after the last entry of the one before: a cursor that does not move would
    // ask for the same page for ever.
    if (!args.empty() && args.front().second == cursor)
      throw failure(exit_failed, "the broker's answer to " + command + " repeats the cursor '" + cursor + "'");
    args = {{"after", cursor}};
  }
  session.close();
  merged.erase("more");
  merged.erase("next");
  admin_answer a;
  a.json = std::move(merged);
  a.body = boost::json::serialize(a.json);
  return a;
}

}  // namespace escrow::cli
