// The `escrow` subcommands. Each talks to the broker through admin_call() or, for the lists that
// come in pages, admin_list() (except check-config, check and passwd), prints a table or a summary
// (or, with --json, the broker's JSON answer as it came; for a paged list, the pages merged) on
// stdout, and returns exit_ok or throws failure (exit_codes.h). Warnings go to stderr.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "settings.h"

namespace escrow::cli {

struct output_options {
  bool json = false;
};

// commands_broker.cpp
struct admin_answer;
// With --json: prints the broker's answer as it came and returns true; otherwise false.
bool print_json(const output_options& o, const admin_answer& a);

void run_status(const settings& s, const output_options& o);
// escrow config: the configuration in force, as the file writes it (secrets hidden).
void run_config(const settings& s, const output_options& o);
void run_connections(const settings& s, const output_options& o);
void run_subscriptions(const settings& s, const output_options& o);
// `owner` "": the one subscription with that client-id and name, whoever owns it.
void run_subscription_delete(const settings& s, const output_options& o, const std::string& client_id,
                             const std::string& name, const std::string& owner);
void run_backup(const settings& s, const output_options& o, const std::string& dir, bool compact);

// commands_queues.cpp
void run_queues(const settings& s, const output_options& o);
void run_queue_show(const settings& s, const output_options& o, const std::string& name);
// group-reset: every group of the queue, or only `group` when it is not empty.
void run_reset_groups(const settings& s, const output_options& o, const std::string& name, const std::string& group);
void run_browse(const settings& s, const output_options& o, const std::string& name, std::size_t count);
// escrow scheduled list / deliver / delete (commands_queues.cpp); `ids` comma-separated, or `all`.
void run_scheduled_list(const settings& s, const output_options& o, const std::string& name, std::size_t count);
void run_scheduled_end(const settings& s, const output_options& o, const std::string& name, bool deliver,
                       const std::string& ids, bool all);
// Asks on a terminal unless `yes`; without a terminal and without `yes`: failure(exit_usage).
void run_purge(const settings& s, const output_options& o, const std::string& name, bool yes);
void run_move(const settings& s, const output_options& o, const std::string& from, const std::string& to,
              const std::string& filter);

// commands_xa.cpp
void run_xa_list(const settings& s, const output_options& o);
// escrow coordinator: coordinated PostgreSQL transactions in flight and decisions pending.
void run_coordinator_list(const settings& s, const output_options& o);
// `decision`: "commit", "rollback" or "forget".
// `owner` "": the broker picks the one branch with that xid (or says that several users have one).
void run_xa_decide(const settings& s, const output_options& o, const std::string& decision, const std::string& xid,
                   const std::string& owner);

// check_config.cpp: no broker needed. Returns exit_ok or exit_failed.
int run_check_config(const std::string& file, const output_options& o);
// check_store.cpp: escrow check DATA-DIR, no broker needed (safe while one runs). Returns exit_ok,
// exit_inconsistent or exit_cannot_open_store.
int run_check_store(const std::string& data_dir, const std::string& scratch, const output_options& o);
// escrow passwd NAME [--role R]...: reads a password and prints a [[user]] entry (no broker needed).
int run_passwd(const std::string& name, const std::vector<std::string>& roles);

}  // namespace escrow::cli
