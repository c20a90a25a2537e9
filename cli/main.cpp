// escrow: the operator's command for a running escrowd (docs/operations.md, "The escrow command").
// It speaks ADMIN frames over the broker's STOMP port; this file is the command line (CLI11) and
// the mapping of failures to the documented exit codes (exit_codes.h).
#include <CLI/CLI.hpp>
#include <iostream>

#include "commands.h"
#include "exit_codes.h"

using namespace escrow::cli;

int main(int argc, char** argv) {
  CLI::App app{"escrow: look into and operate a running escrowd (queues, messages, connections, in-doubt\n"
               "transactions, backups), and check a store offline. Exit codes: 0 ok, 1 refused or failed,\n"
               "2 usage, 3 cannot connect, 4 not found, 5 store inconsistent, 6 cannot open the store.",
               "escrow"};
  app.fallthrough();
  app.require_subcommand(1);
  command_line given;
  output_options out;
  app.add_option("--url", given.url, "the broker: stomp://HOST:PORT or stomp+ssl://HOST:PORT (default stomp://127.0.0.1:61613)");
  app.add_option("--user", given.user, "login sent in CONNECT");
  app.add_option("--password", given.password, "passcode sent in CONNECT (better: the ESCROW_PASSWORD environment variable)");
  app.add_option("--ca-file", given.ca_file, "for stomp+ssl: CA certificates (PEM) to verify the broker with");
  app.add_option("--timeout", given.timeout_seconds, "seconds to wait for the broker (default 30)");
  app.add_option("--config", given.config_file,
                 "TOML file with url, user, password, ca-file, timeout (default ~/.config/escrow/escrow.toml)");
  app.add_flag("--json", out.json, "print the broker's JSON answer instead of a table");
  app.set_version_flag("--version", "escrow 0.1.0");

  std::function<void(const settings&)> action;
  auto on = [&](CLI::App* sub, std::function<void(const settings&)> f) {
    sub->callback([&action, f = std::move(f)] { action = f; });
  };

  on(app.add_subcommand("status", "version, uptime, listeners, store use, connections, totals, branches"),
     [&](const settings& s) { run_status(s, out); });
  on(app.add_subcommand("queues", "every queue and durable subscription: depth, in flight, consumers, counts, oldest message"),
     [&](const settings& s) { run_queues(s, out); });

  auto* queue = app.add_subcommand("queue", "one queue");
  queue->require_subcommand(1);
  std::string name;
  auto* show = queue->add_subcommand("show", "a queue's numbers, its address settings and its consumers");
  show->add_option("NAME", name, "queue (or durable subscription CLIENT-ID.NAME)")->required();
  on(show, [&](const settings& s) { run_queue_show(s, out, name); });

  std::size_t count = 20;
  auto* browse = app.add_subcommand("browse", "peek at stored messages without consuming them");
  browse->add_option("NAME", name, "queue")->required();
  browse->add_option("--count", count, "at most this many messages (default 20)");
  on(browse, [&](const settings& s) { run_browse(s, out, name, count); });

  bool yes = false;
  auto* purge = app.add_subcommand("purge", "delete every ready message of a queue (asks first)");
  purge->add_option("NAME", name, "queue")->required();
  purge->add_flag("-y,--yes", yes, "do not ask (required without a terminal)");
  on(purge, [&](const settings& s) { run_purge(s, out, name, yes); });

  std::string from, to, filter;
  auto* move = app.add_subcommand("move", "move stored messages to another queue, atomically per message");
  move->add_option("--from", from, "the queue to take them from, e.g. DLQ")->required();
  move->add_option("--to", to, "the queue (or /queue/NAME, /topic/NAME) to put them in")->required();
  move->add_option("--filter", filter, "only those whose _HQ_ORIG_ADDRESS is this (NAME or /queue/NAME)");
  on(move, [&](const settings& s) { run_move(s, out, from, to, filter); });

  on(app.add_subcommand("connections", "open STOMP connections"), [&](const settings& s) { run_connections(s, out); });
  on(app.add_subcommand("subscriptions", "consumers, and durable subscriptions with how far behind they are"),
     [&](const settings& s) { run_subscriptions(s, out); });
  auto* subscription = app.add_subcommand("subscription", "one durable subscription");
  subscription->require_subcommand(1);
  std::string client_id, owner;
  auto* sub_delete = subscription->add_subcommand("delete", "end a durable subscription (no active consumer) and drop its messages");
  sub_delete->add_option("CLIENT-ID", client_id, "its client-id")->required();
  sub_delete->add_option("NAME", name, "its subscription name")->required();
  sub_delete->add_option("--owner", owner, "the user whose subscription it is, when users of several have this client-id and name");
  on(sub_delete, [&](const settings& s) { run_subscription_delete(s, out, client_id, name, owner); });

  auto* xa = app.add_subcommand("xa", "transaction branches (in-doubt transactions)");
  xa->require_subcommand(1);
  on(xa->add_subcommand("list", "every branch: xid, state, age, the messages it sends and consumed"),
     [&](const settings& s) { run_xa_list(s, out); });
  std::string xid;
  for (const char* decision : {"commit", "rollback", "forget"}) {
    std::string help = std::string(decision) == "forget"
                           ? "forget a heuristically completed branch"
                           : std::string("heuristic ") + decision + " of a prepared branch (read the warning)";
    auto* sub = xa->add_subcommand(decision, help);
    sub->add_option("XID", xid, "formatID:gtrid-hex:bqual-hex, as escrow xa list prints it")->required();
    sub->add_option("--owner", owner, "the user whose branch it is, when several users have a branch with this xid");
    on(sub, [&, decision](const settings& s) { run_xa_decide(s, out, decision, xid, owner); });
  }

  std::string file;
  auto* check = app.add_subcommand("check-config", "validate an escrowd configuration file without starting a broker");
  check->add_option("FILE", file, "the TOML file")->required();
  int check_result = -1;
  check->callback([&] { check_result = 0; });

  std::string data_dir;
  auto* check_store = app.add_subcommand(
      "check", "verify a store offline (safe while escrowd runs): entries against queues, reference counts, "
               "the expiry index, prepared branches, next ids");
  check_store->add_option("DATA-DIR", data_dir, "escrowd's data directory (the one holding data.mdb)")->required();
  int check_store_result = -1;
  check_store->callback([&] { check_store_result = 0; });

  std::string user_name;
  std::vector<std::string> roles;
  auto* passwd = app.add_subcommand("passwd", "read a password (no echo) and print a [[user]] entry for the users file");
  passwd->add_option("NAME", user_name, "the user's name")->required();
  passwd->add_option("--role", roles, "a role of the user; repeat for several");
  int passwd_result = -1;
  passwd->callback([&] { passwd_result = 0; });

  std::string dir;
  bool compact = false;
  auto* backup = app.add_subcommand("backup", "hot copy of the store into DIR (on the broker's machine)");
  backup->add_option("DIR", dir, "an empty or new directory; the copy is DIR/data.mdb")->required();
  backup->add_flag("--compact", compact, "leave free pages out (smaller, slower)");
  on(backup, [&](const settings& s) { run_backup(s, out, dir, compact); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? exit_ok : exit_usage;
  }
  try {
    if (check_result == 0) return run_check_config(file, out);
    if (passwd_result == 0) return run_passwd(user_name, roles);
    if (check_store_result == 0) return run_check_store(data_dir, out);
    settings s = resolve_settings(given);
    action(s);
    return exit_ok;
  } catch (const failure& f) {
    std::cerr << "escrow: " << f.what() << "\n";
    return f.code();
  } catch (const std::exception& e) {
    std::cerr << "escrow: " << e.what() << "\n";
    return exit_failed;
  }
}
