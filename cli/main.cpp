// escrow: the operator's command for a running escrowd (docs/operations.md, "The escrow command").
// It speaks ADMIN frames over the broker's STOMP port; this file is the command line (CLI11) and
// the mapping of failures to the documented exit codes (exit_codes.h).
#include <CLI/CLI.hpp>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "exit_codes.h"

using namespace escrow::cli;

namespace {

// Every value the command line can set, and what it asked for: a command against the broker
// (`action`, run once the connection settings are resolved) or an offline one (`offline`).
struct command_choices {
  command_line given;
  output_options out;
  std::function<void(const settings&)> action;
  std::function<int()> offline;
  std::string name, from, to, filter, client_id, owner, xid, file, data_dir, scratch, user_name, dir, group;
  std::size_t count = 20;
  bool yes = false, compact = false, all = false;
  std::vector<std::string> roles;
};

// `sub`, when chosen, runs `f` against the broker.
void on(CLI::App* sub, command_choices& c, std::function<void(const settings&)> f) {
  sub->callback([&c, f = std::move(f)] { c.action = f; });
}

void add_connection_options(CLI::App& app, command_choices& c) {
  app.add_option("--url", c.given.url, "the broker: stomp://HOST:PORT or stomp+ssl://HOST:PORT (default stomp://127.0.0.1:61613)");
  app.add_option("--user", c.given.user, "login sent in CONNECT");
  app.add_option("--password", c.given.password, "passcode sent in CONNECT (better: the ESCROW_PASSWORD environment variable)");
  app.add_option("--ca-file", c.given.ca_file, "for stomp+ssl: CA certificates (PEM) to verify the broker with");
  app.add_option("--timeout", c.given.timeout_seconds, "seconds to wait for the broker (default 30)");
  app.add_option("--config", c.given.config_file,
                 "TOML file with url, user, password, ca-file, timeout (default ~/.config/escrow/escrow.toml)");
  app.add_flag("--json", c.out.json, "print the broker's JSON answer instead of a table");
  app.set_version_flag("--version", "escrow 0.1.0");
}

// status, config, queues, queue show, browse, purge, move.
void add_queue_commands(CLI::App& app, command_choices& c) {
  on(app.add_subcommand("status", "version, uptime, listeners, store use, connections, totals, branches"), c,
     [&c](const settings& s) { run_status(s, c.out); });
  on(app.add_subcommand("config", "the configuration escrowd runs with: every key and its value in force, as "
                                  "the file writes it (passwords hidden)"),
     c, [&c](const settings& s) { run_config(s, c.out); });
  on(app.add_subcommand("queues", "every queue and durable subscription: depth, in flight, consumers, counts, oldest message"),
     c, [&c](const settings& s) { run_queues(s, c.out); });

  auto* queue = app.add_subcommand("queue", "one queue");
  queue->require_subcommand(1);
  auto* show = queue->add_subcommand("show", "a queue's numbers, its address settings and its consumers");
  show->add_option("NAME", c.name, "queue (or durable subscription CLIENT-ID.NAME)")->required();
  on(show, c, [&c](const settings& s) { run_queue_show(s, c.out, c.name); });
  auto* reset = queue->add_subcommand("reset-groups", "release a queue's message groups: their next messages go "
                                                      "to whichever consumer is picked as for a new group");
  reset->add_option("NAME", c.name, "queue (or durable subscription CLIENT-ID.NAME)")->required();
  reset->add_option("--group", c.group, "only this group (JMSXGroupID); default: every group");
  on(reset, c, [&c](const settings& s) { run_reset_groups(s, c.out, c.name, c.group); });

  auto* browse = app.add_subcommand("browse", "peek at stored messages without consuming them");
  browse->add_option("NAME", c.name, "queue")->required();
  browse->add_option("--count", c.count, "at most this many messages (default 20)");
  on(browse, c, [&c](const settings& s) { run_browse(s, c.out, c.name, c.count); });

  auto* scheduled = app.add_subcommand("scheduled", "a queue's scheduled messages: list, deliver now, delete");
  scheduled->require_subcommand(1);
  auto* sched_list = scheduled->add_subcommand("list", "the scheduled messages in the order they come due");
  sched_list->add_option("NAME", c.name, "queue (or durable subscription CLIENT-ID.NAME)")->required();
  sched_list->add_option("--count", c.count, "at most this many messages (default 20)");
  on(sched_list, c, [&c](const settings& s) { run_scheduled_list(s, c.out, c.name, c.count); });
  for (const char* action : {"deliver", "delete"}) {
    bool deliver = std::string_view(action) == "deliver";
    auto* cmd = scheduled->add_subcommand(action, deliver ? "deliver scheduled messages now, before their time"
                                                          : "delete scheduled messages for good");
    cmd->add_option("NAME", c.name, "queue (or durable subscription CLIENT-ID.NAME)")->required();
    auto* ids = cmd->add_option("--id", c.xid, "message ids, separated by commas (escrow scheduled list shows them)");
    cmd->add_flag("--all", c.all, "every scheduled message of the queue (up to 10000 per call)")->excludes(ids);
    on(cmd, c, [&c, deliver](const settings& s) { run_scheduled_end(s, c.out, c.name, deliver, c.xid, c.all); });
  }

  auto* purge = app.add_subcommand("purge", "delete every ready message of a queue (asks first)");
  purge->add_option("NAME", c.name, "queue")->required();
  purge->add_flag("-y,--yes", c.yes, "do not ask (required without a terminal)");
  on(purge, c, [&c](const settings& s) { run_purge(s, c.out, c.name, c.yes); });

  auto* move = app.add_subcommand("move", "move stored messages to another queue, atomically per message");
  move->add_option("--from", c.from, "the queue to take them from, e.g. DLQ")->required();
  move->add_option("--to", c.to, "the queue (or /queue/NAME, /topic/NAME) to put them in")->required();
  move->add_option("--filter", c.filter, "only those whose _HQ_ORIG_ADDRESS is this (NAME or /queue/NAME)");
  on(move, c, [&c](const settings& s) { run_move(s, c.out, c.from, c.to, c.filter); });
}

// connections, subscriptions, subscription delete, xa list/commit/rollback/forget, backup.
void add_session_commands(CLI::App& app, command_choices& c) {
  on(app.add_subcommand("connections", "open STOMP connections"), c,
     [&c](const settings& s) { run_connections(s, c.out); });
  on(app.add_subcommand("subscriptions", "consumers, and durable subscriptions with how far behind they are"), c,
     [&c](const settings& s) { run_subscriptions(s, c.out); });
  auto* subscription = app.add_subcommand("subscription", "one durable subscription");
  subscription->require_subcommand(1);
  auto* sub_delete = subscription->add_subcommand("delete", "end a durable subscription (no active consumer) and drop its messages");
  sub_delete->add_option("CLIENT-ID", c.client_id, "its client-id")->required();
  sub_delete->add_option("NAME", c.name, "its subscription name")->required();
  sub_delete->add_option("--owner", c.owner, "the user whose subscription it is, when users of several have this client-id and name");
  on(sub_delete, c, [&c](const settings& s) { run_subscription_delete(s, c.out, c.client_id, c.name, c.owner); });

  auto* xa = app.add_subcommand("xa", "transaction branches (in-doubt transactions)");
  xa->require_subcommand(1);
  on(xa->add_subcommand("list", "every branch: xid, state, age, the messages it sends and consumed"), c,
     [&c](const settings& s) { run_xa_list(s, c.out); });
  for (const char* decision : {"commit", "rollback", "forget"}) {
    std::string help = std::string(decision) == "forget"
                           ? "forget a heuristically completed branch"
                           : std::string("heuristic ") + decision + " of a prepared branch (read the warning)";
    auto* sub = xa->add_subcommand(decision, help);
    sub->add_option("XID", c.xid, "formatID:gtrid-hex:bqual-hex, as escrow xa list prints it")->required();
    sub->add_option("--owner", c.owner, "the user whose branch it is, when several users have a branch with this xid");
    on(sub, c, [&c, decision](const settings& s) { run_xa_decide(s, c.out, decision, c.xid, c.owner); });
  }

  on(app.add_subcommand("coordinator", "coordinated PostgreSQL transactions: in flight, and decisions whose "
                                       "COMMIT PREPARED is not done yet (docs/exactly-once.md)"),
     c, [&c](const settings& s) { run_coordinator_list(s, c.out); });

  auto* backup = app.add_subcommand("backup", "hot copy of the store into DIR (on the broker's machine)");
  backup->add_option("DIR", c.dir, "an empty or new directory; the copy is DIR/data.mdb")->required();
  backup->add_flag("--compact", c.compact, "leave free pages out (smaller, slower)");
  on(backup, c, [&c](const settings& s) { run_backup(s, c.out, c.dir, c.compact); });
}

// check-config, check, passwd: no broker needed.
void add_offline_commands(CLI::App& app, command_choices& c) {
  auto* check = app.add_subcommand("check-config", "validate an escrowd configuration file without starting a broker");
  check->add_option("FILE", c.file, "the TOML file")->required();
  check->callback([&c] { c.offline = [&c] { return run_check_config(c.file, c.out); }; });

  auto* check_store = app.add_subcommand(
      "check", "verify a store offline (safe while escrowd runs): entries against queues, reference counts, "
               "the expiry index, prepared branches, next ids; a store not closed cleanly is checked on a copy "
               "recovered as escrowd will recover it");
  check_store->add_option("DATA-DIR", c.data_dir, "escrowd's data directory (the one holding data.mdb)")->required();
  check_store->add_option("--scratch", c.scratch,
                          "where to recover a copy of a store that was not closed cleanly (default $TMPDIR, else /tmp); "
                          "it needs room for data.mdb and log, and is removed afterwards");
  check_store->callback([&c] { c.offline = [&c] { return run_check_store(c.data_dir, c.scratch, c.out); }; });

  auto* passwd = app.add_subcommand("passwd", "read a password (no echo) and print a [[user]] entry for the users file");
  passwd->add_option("NAME", c.user_name, "the user's name")->required();
  passwd->add_option("--role", c.roles, "a role of the user; repeat for several");
  passwd->callback([&c] { c.offline = [&c] { return run_passwd(c.user_name, c.roles); }; });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"escrow: look into and operate a running escrowd (queues, messages, connections, in-doubt\n"
               "transactions, backups), and check a store offline. Exit codes: 0 ok, 1 refused or failed,\n"
               "2 usage, 3 cannot connect, 4 not found, 5 store inconsistent, 6 cannot open the store.",
               "escrow"};
  app.fallthrough();
  app.require_subcommand(1);
  command_choices c;
  add_connection_options(app, c);
  add_queue_commands(app, c);
  add_session_commands(app, c);
  add_offline_commands(app, c);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? exit_ok : exit_usage;
  }
  try {
    if (c.offline) return c.offline();
    settings s = resolve_settings(c.given);
    c.action(s);
    return exit_ok;
  } catch (const failure& f) {
    std::cerr << "escrow: " << f.what() << "\n";
    return f.code();
  } catch (const std::exception& e) {
    std::cerr << "escrow: " << e.what() << "\n";
    return exit_failed;
  }
}
