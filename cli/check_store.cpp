// escrow check DATA-DIR: the offline store checker (storage/check.h) with escrow's own branch
// decoder (rm/record_check.h), its summary and its problems printed, and the outcome as the exit
// code: exit_ok when consistent, exit_inconsistent, or exit_cannot_open_store. No broker needed,
// and safe next to a running one: the store is only read, in one LMDB read transaction.
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
  }
  return "unknown";
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
                      {"next_message_id", c.next_message_id},
                      {"next_queue_id", c.next_queue_id}};
  json::object found;
  for (std::size_t i = 0; i < storage::kProblemKinds; ++i)
    found[storage::problem_kind_name(static_cast<storage::problem_kind>(i))] = r.found[i];
  json::array problems;
  for (const auto& p : r.problems) problems.emplace_back(p);
  json::object out{{"data_dir", dir},
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
  std::cout << "store           " << dir << " (schema version " << r.schema_version << ")\n"
            << "queues          " << c.queues << " queues, " << c.durable_subscriptions << " durable subscriptions\n"
            << "entries         " << c.entries << " (" << c.inline_entries << " holding their message)\n"
            << "messages        " << c.messages << " shared by several entries, " << c.message_refs
            << " reference counts\n"
            << "branches        " << c.prepared_branches << " prepared, " << c.heuristic_branches
            << " heuristically completed\n"
            << "expiry records  " << c.expiries << "\n"
            << "next ids        message " << c.next_message_id << ", queue " << c.next_queue_id << "\n";
  if (r.outcome == check_report::result::consistent) {
    std::cout << "store is consistent\n";
    return;
  }
  std::cout << r.total_found() << (r.total_found() == 1 ? " problem:\n" : " problems:\n");
  for (const auto& p : r.problems) std::cout << "  " << p << "\n";
  for (const auto& more : r.unlisted()) std::cout << "  " << more << "\n";
}

}  // namespace

int run_check_store(const std::string& dir, const output_options& o) {
  storage::check_options options;
  options.path = dir;
  options.decode_branch = rm::check_branch_record;
  check_report r = storage::check_store(options);
  if (o.json) print_json(dir, r);
  if (r.outcome == check_report::result::cannot_open) {
    std::cerr << "escrow: cannot check the store: " << r.open_error << "\n";
    return exit_cannot_open_store;
  }
  if (!o.json) print_text(dir, r);
  if (r.outcome == check_report::result::consistent) return exit_ok;
  std::cerr << "escrow: the store in " << dir << " is inconsistent (" << r.total_found()
            << (r.total_found() == 1 ? " problem" : " problems") << (o.json ? "" : ", listed above")
            << "): escrowd may refuse to start on it, or mishandle the messages they name. "
               "Stop escrowd and restore the data directory from a backup (docs/storage.md, \"A corrupted "
               "store\"); keep this copy to examine it\n";
  return exit_inconsistent;
}

}  // namespace escrow::cli
