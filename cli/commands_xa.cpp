// escrow xa list, xa commit, xa rollback, xa forget: in-doubt transaction branches.
#include <iostream>

#include "admin_call.h"
#include "commands.h"
#include "output.h"

namespace escrow::cli {

namespace {

constexpr const char* kHeuristicWarning =
    "warning: this is a heuristic decision, taken without the transaction manager. If the manager\n"
    "decided the other way, this branch and the transaction's other resources now disagree and you\n"
    "must repair the data by hand. The decision is recorded durably; the manager's own commit or\n"
    "rollback of this xid will then answer XA_HEURCOM (committed), XA_HEURRB (rolled back) or\n"
    "XA_HEURMIX, and the branch stays listed until the manager (or escrow xa forget) forgets it.\n";

}  // namespace

void run_xa_list(const settings& s, const output_options& o) {
  admin_answer a = admin_list(s, "xa-list", {"branches"});
  if (o.json) {
    std::cout << a.body << "\n";
    return;
  }
  table t({"XID", "USER", "STATE", "AGE", "SENT", "CONSUMED"});
  std::vector<std::string> details;
  for (const auto& b : array(a.json, "branches")) {
    std::string xid = text(b, "xid");
    if (b.at("local").as_bool()) xid += " (local)";
    t.add({xid, text(b, "user"), text(b, "state"), age(b, "age_ms"), std::to_string(array(b, "sent").size()),
           std::to_string(array(b, "consumed").size())});
    for (const auto& m : array(b, "sent")) {
      std::string queues;
      for (const auto& q : array(m, "queues")) queues += (queues.empty() ? "" : ", ") + std::string(q.as_string());
      details.push_back(text(b, "xid") + ": sends message " + text(m, "message_id") + " to " + queues);
    }
    for (const auto& m : array(b, "consumed"))
      details.push_back(text(b, "xid") + ": " + (m.at("nack").as_bool() ? "returns (NACK) message " : "consumed message ") +
                        text(m, "message_id") + " of " + text(m, "queue"));
  }
  t.print(std::cout);
  if (!details.empty()) std::cout << "\n";
  for (const auto& d : details) std::cout << d << "\n";
}

void run_coordinator_list(const settings& s, const output_options& o) {
  admin_answer a = admin_list(s, "coordinator", {"transactions"});
  if (o.json) {
    std::cout << a.body << "\n";
    return;
  }
  table t({"PG-GID", "DATABASE", "USER", "STATE", "AGE"});
  for (const auto& x : array(a.json, "transactions"))
    t.add({text(x, "gid"), text(x, "database"), text(x, "user"), text(x, "state"), age(x, "age_ms")});
  t.print(std::cout);
}

void run_xa_decide(const settings& s, const output_options& o, const std::string& decision, const std::string& xid,
                   const std::string& owner) {
  admin_args headers{{"xid", xid}};
  if (!owner.empty()) headers.emplace_back("user", owner);
  admin_answer a = admin_call(s, "xa-" + decision, headers);
  if (decision != "forget") std::cerr << kHeuristicWarning;
  if (o.json) {
    std::cout << a.body << "\n";
    return;
  }
  if (decision == "forget") std::cout << "branch " << xid << " forgotten\n";
  else
    std::cout << "branch " << xid << (decision == "commit" ? " committed" : " rolled back")
              << " heuristically; forget it (escrow xa forget) once the transaction manager has been told\n";
}

}  // namespace escrow::cli
