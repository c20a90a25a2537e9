// Admin commands for transaction branches: the list an operator resolves in-doubt transactions
// from (xid, state, age, what each branch holds), and the operator's decisions: a heuristic commit
// or rollback of a prepared branch (the path of the XA-HEURISTIC frame, recorded durably), and
// forgetting a heuristically completed one. docs/operations.md, "Resolving in-doubt transactions".
#include <spdlog/spdlog.h>

#include "admin_commands.h"
#include "escrow/rm/resource_manager.h"
#include "escrow/xa.h"
#include "json.h"

namespace escrow::broker {

// Branches by owner, then xid; the cursor is OWNER:XID (the owner escaped, ':' included).
admin_outcome admin_xa_list(const admin_core& core, const frame& f) {
  page_request p;
  if (auto bad = page_asked(core, f, p)) return *bad;
  const rm::resource_manager& rm = core.branches();
  auto it = rm.branches().begin();
  if (p.after) {
    std::string_view a = *p.after;
    auto colon = a.find(':');
    auto owner = colon == std::string_view::npos ? std::nullopt : cursor_unescape(a.substr(0, colon));
    auto x = colon == std::string_view::npos ? std::nullopt : xid::parse(a.substr(colon + 1));
    if (!owner || !x)
      return {"invalid", "after '" + std::string(a) + "' is not a cursor of xa-list: pass the next field of the previous page as it came", {}};
    it = rm.branches().upper_bound(rm::branch_id{*owner, *x});
  }
  std::uint64_t now = now_ms();
  auto queue_name = [&core](std::uint32_t id) {
    std::optional<std::string> name = core.queue_name(id);
    return name ? *name : "(queue id " + std::to_string(id) + ", gone)";
  };
  json_page page({"branches"}, p.limit, p.max_bytes);
  bool more = false;
  for (; it != rm.branches().end(); ++it) {
    const auto& [id, b] = *it;
    if (page.full()) {
      more = true;
      break;
    }
    json::array sent, consumed;
    for (const auto& s : b->work.sends) {
      json::array queues;
      for (const auto& t : s.targets) queues.push_back(json::string(queue_name(t.key.queue_id)));
      sent.push_back(json::object{{"message_id", s.msg ? s.msg->id : 0}, {"queues", std::move(queues)}});
    }
    for (const auto& c : b->work.consumed)
      consumed.push_back(json::object{
          {"message_id", c.key.message_id}, {"queue", queue_name(c.key.queue_id)}, {"nack", c.negative}});
    json::object j{{"xid", id.second.to_string()},
                   {"user", b->owner},
                   {"state", rm::to_string(b->state)},
                   {"local", b->local},
                   {"created_ms", b->created_ms},
                   {"age_ms", now > b->created_ms ? now - b->created_ms : 0},
                   {"sent", std::move(sent)},
                   {"consumed", std::move(consumed)}};
    if (!page.add(0, std::move(j), cursor_escape(id.first, ":") + ":" + id.second.to_string())) {
      more = true;
      break;
    }
  }
  return {"ok", {}, page.finish(more)};
}

// `escrow coordinator`: coordinated PostgreSQL transactions in flight and decisions not yet done in
// their database, by gid; the cursor is the gid.
admin_outcome admin_coordinated(const admin_core& core, const frame& f) {
  page_request p;
  if (auto bad = page_asked(core, f, p)) return *bad;
  std::vector<coordinated_view> list = core.coordinated(p.after ? *p.after : std::string(), p.limit + 1);
  std::uint64_t now = now_ms();
  json_page page({"transactions"}, p.limit, p.max_bytes);
  bool more = false;
  for (const auto& t : list) {
    json::object j{{"gid", t.gid},
                   {"database", t.database},
                   {"user", t.user},
                   {"state", t.state},
                   {"since_ms", t.since_ms},
                   {"age_ms", now > t.since_ms ? now - t.since_ms : 0}};
    if (page.full() || !page.add(0, std::move(j), t.gid)) {
      more = true;
      break;
    }
  }
  return {"ok", {}, page.finish(more)};
}

void admin_xa_decide(admin_core& core, std::uint64_t connection_id, const frame& f, admin_done done) {
  std::string command(f.get("admin-command"));
  std::string xid_error;
  auto x = xid::parse(f.get("xid"), &xid_error);
  if (!x)
    return done({"invalid", f.has("xid") ? xid_error : command + " needs the xid header", {}});
  auto target = core.owner_for_operator(*x, f.find("user"));
  if (!target.problem.empty()) return done({"invalid", target.problem, {}});
  const rm::resource_manager& rm = core.branches();
  auto it = rm.branches().find(rm::branch_id{target.user, *x});
  if (it == rm.branches().end())
    return done({"not-found", "no branch " + target.name + " (escrow xa list shows the branches the broker has)", {}});
  rm::branch_ptr b = it->second;
  std::string state = rm::to_string(b->state);
  auto answer = [done = std::move(done), id = x->to_string(), command](int code, const std::string& refusal) {
    if (code != XA_OK) return done({"refused", refusal + " (" + xa_result_name(code) + ")", {}});
    done({"ok", {}, to_json(json::object{{"xid", id}, {"done", command}})});
  };
  if (command == "xa-forget") {
    if (!rm::is_heuristic(b->state))
      return answer(XAER_PROTO, "branch " + x->to_string() + " is " + state +
                                    ": only a heuristically completed branch can be forgotten");
    spdlog::warn("operator forgets heuristically completed branch {}", target.name);
    return core.xa_forget(connection_id, *x, target.user,
                          [answer, id = x->to_string()](int code) { answer(code, "forgetting " + id + " failed"); });
  }
  bool commit = command == "xa-commit";
  if (b->state != rm::branch_state::prepared || b->busy)
    return answer(XAER_PROTO, "branch " + x->to_string() + " is " + state +
                                  (b->busy ? " (a decision is being written)" : "") +
                                  ": only a prepared branch can be committed or rolled back heuristically");
  spdlog::warn("operator decision: heuristic {} of prepared branch {}", commit ? "commit" : "rollback", target.name);
  core.xa_heuristic(*x, commit, target.user, [answer, id = x->to_string()](int code) {
    answer(code, "the decision on " + id + " was not stored; the branch stays prepared");
  });
}

}  // namespace escrow::broker
