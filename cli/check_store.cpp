// escrow check DATA-DIR: the offline store checker (storage/check.h) with escrow's own branch
// decoder (rm/record_check.h), its summary and its problems printed, and the outcome as the exit
// code: exit_ok when consistent, exit_inconsistent (also when escrowd's recovery fails on the
// store), or exit_cannot_open_store. No broker needed, and safe next to a running one: the store is
// only read, in one LMDB read transaction. A store that was not closed cleanly is checked as
// escrowd will open it: a copy of it is recovered and checked (storage::check_as_opened).
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <iostream>

#include "commands.h"
#include "escrow/rm/record_check.h"
#include "escrow/storage/check.h"
#include "exit_codes.h"

namespace escrow::cli {
namespace {

using storage::check_report;

const char* outcome_name(check_report::result r) {
  switch (r) {
    case check_report::result::consistent: return "consistent";
    case check_report::result::inconsistent: return "inconsistent";
    case check_report::result::cannot_open: return "cannot-open";
    case check_report::result::unrecoverable: return "unrecoverable";
  }
  return "unknown";
}

const char* state_name(storage::recovery_report::state s) {
  switch (s) {
    case storage::recovery_report::state::as_is: return "as-is";
    case storage::recovery_report::state::in_use: return "in-use";
    case storage::recovery_report::state::recovered: return "recovered";
    case storage::recovery_report::state::unknown: return "unknown";
  }
  return "unknown";
}

bool recovered(const check_report& r) { return r.recovery.found == storage::recovery_report::state::recovered; }

// "LMDB commits 13 to 15 after the checkpoint (commit 12) set aside, 4 commits replayed from the
// commit log": what recovery did to the copy. (LMDB already at the checkpoint with records after
// it in the log: an earlier start set it back and died before its replay was committed.)
std::string recovery_text(const storage::recovery_report& v) {
  std::string out;
  if (v.set_aside == 0)
    out = "LMDB at the checkpoint (commit " + std::to_string(v.checkpoint) + "), where a start that died while "
          "recovering it left it";
  else
    out = (v.set_aside == 1 ? "LMDB commit " + std::to_string(v.latest_commit)
                            : "LMDB commits " + std::to_string(v.checkpoint + 1) + " to " + std::to_string(v.latest_commit)) +
          " after the checkpoint (commit " + std::to_string(v.checkpoint) + ") set aside";
  if (v.replayed >= 0)
    out += ", " + std::to_string(v.replayed) + (v.replayed == 1 ? " commit" : " commits") + " replayed from the commit log";
  return out;
}

void print_json(const std::string& dir, const check_report& r) {
  namespace json = boost::json;
  const storage::check_counts& c = r.counts;
  json::object counts{{"queues", c.queues},
                      {"durable_subscriptions", c.durable_subscriptions},
                      {"entries", c.entries},
                      {"inline_entries", c.inline_entries},
                      {"messages", c.messages},
                      {"message_refs", c.message_refs},
                      {"prepared_branches", c.prepared_branches},
                      {"heuristic_branches", c.heuristic_branches},
                      {"expiries", c.expiries},
                      {"scheduled", c.scheduled},
                      {"decisions", c.decisions},
                      {"duplicate_ids", c.duplicate_ids},
                      {"duplicate_addresses", c.duplicate_addresses},
                      {"next_message_id", c.next_message_id},
                      {"next_queue_id", c.next_queue_id}};
  json::object found;
  for (std::size_t i = 0; i < storage::kProblemKinds; ++i)
    found[storage::problem_kind_name(static_cast<storage::problem_kind>(i))] = r.found[i];
  json::array problems;
  for (const auto& p : r.problems) problems.emplace_back(p);
  json::array log;
  for (const auto& line : r.recovery.log) log.emplace_back(line);
  json::object recovery{{"state", state_name(r.recovery.found)},
                        {"latest_commit", r.recovery.latest_commit},
                        {"checkpoint", r.recovery.checkpoint},
                        {"set_aside_commits", r.recovery.set_aside},
                        {"log", std::move(log)}};
  if (r.recovery.replayed >= 0)
    recovery["replayed_commits"] = r.recovery.replayed;
  else
    recovery["replayed_commits"] = nullptr;
  json::object out{{"data_dir", dir},
                   {"recovery", std::move(recovery)},
                   {"outcome", outcome_name(r.outcome)},
                   {"error", r.open_error},
                   {"schema_version", r.schema_version},
                   {"counts", std::move(counts)},
                   {"problems_found", r.total_found()},
                   {"problems_by_kind", std::move(found)},
                   {"problems", std::move(problems)}};
  std::cout << json::serialize(out) << "\n";
}

void print_text(const std::string& dir, const check_report& r) {
  const storage::check_counts& c = r.counts;
  std::cout << "store           " << dir << " (schema version " << r.schema_version << ")\n";
  switch (r.recovery.found) {
    case storage::recovery_report::state::as_is: std::cout << "state           checked as it is on disk (nothing to recover)\n"; break;
    case storage::recovery_report::state::in_use:
      std::cout << "state           open in a running escrowd (escrow.lock is held): checked live, in one read transaction\n";
      break;
    case storage::recovery_report::state::recovered:
      std::cout << "state           not closed cleanly: checked a recovered copy, as escrowd will open the store ("
                << dir << " itself is unchanged)\n"
                << "recovery        " << recovery_text(r.recovery) << "\n";
      break;
    case storage::recovery_report::state::unknown:
      std::cout << "state           checked as it is on disk (escrow.lock or data.mdb's meta pages cannot be read: "
                   "whether it is in use or needs recovery is not known)\n";
      break;
  }
  std::cout << "queues          " << c.queues << " queues, " << c.durable_subscriptions << " durable subscriptions\n"
            << "entries         " << c.entries << " (" << c.inline_entries << " holding their message)\n"
            << "messages        " << c.messages << " shared by several entries, " << c.message_refs
            << " reference counts\n"
            << "branches        " << c.prepared_branches << " prepared, " << c.heuristic_branches
            << " heuristically completed\n"
            << "expiry records  " << c.expiries << "\n"
            << "scheduled       " << c.scheduled << "\n"
            << "decisions       " << c.decisions << " coordinated commits not yet done in their database\n"
            << "duplicate ids   " << c.duplicate_ids << " remembered for " << c.duplicate_addresses
            << (c.duplicate_addresses == 1 ? " address\n" : " addresses\n")
            << "next ids        message " << c.next_message_id << ", queue " << c.next_queue_id << "\n";
  if (r.outcome == check_report::result::consistent) {
    std::cout << (recovered(r) ? "store is consistent (as recovered: escrowd replays its commit log when it starts)\n"
                               : "store is consistent\n");
    return;
  }
  std::cout << r.total_found() << (r.total_found() == 1 ? " problem:\n" : " problems:\n");
  for (const auto& p : r.problems) std::cout << "  " << p << "\n";
  for (const auto& more : r.unlisted()) std::cout << "  " << more << "\n";
}

}  // namespace

int run_check_store(const std::string& dir, const std::string& scratch, const output_options& o) {
  storage::check_options options;
  options.path = dir;
  options.decode_branch = rm::check_branch_record;
  options.scratch = scratch;
  check_report r = storage::check_as_opened(options);
  if (o.json) print_json(dir, r);
  if (r.outcome == check_report::result::cannot_open || r.outcome == check_report::result::unrecoverable) {
    if (!o.json)
      for (const auto& line : r.recovery.log) std::cerr << "escrow: recovering a copy: " << line << "\n";
  }
  if (r.outcome == check_report::result::cannot_open) {
    std::cerr << "escrow: cannot check the store: " << r.open_error << "\n";
    return exit_cannot_open_store;
  }
  if (r.outcome == check_report::result::unrecoverable) {
    std::cerr << "escrow: the store in " << dir << " was not closed cleanly, and escrowd cannot recover it (its "
                 "recovery was tried on a copy): " << r.open_error
              << ". Keep the whole data directory (data.mdb and log) as it is to examine it\n";
    return exit_inconsistent;
  }
  if (!o.json) print_text(dir, r);
  if (r.outcome == check_report::result::consistent) return exit_ok;
  std::cerr << "escrow: the store in " << dir << (recovered(r) ? ", as escrowd recovers it (a recovered copy was checked)," : "")
            << " is inconsistent (" << r.total_found()
            << (r.total_found() == 1 ? " problem" : " problems") << (o.json ? "" : ", listed above")
            << "): escrowd may refuse to start on it, or mishandle the messages they name. "
               "Stop escrowd and restore the data directory from a backup (docs/storage.md, \"A corrupted "
               "store\"); keep this copy (data.mdb and log) to examine it\n";
  return exit_inconsistent;
}

}  // namespace escrow::cli
