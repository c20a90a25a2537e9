// Internal to broker/admin: the ADMIN commands, one per admin-command header value (admin.cpp
// dispatches; admin_messages.cpp has browse, purge and move, admin_xa.cpp the in-doubt branches,
// admin_backup.cpp the hot copy of the store, admin_config.cpp the configuration in force), and
// what the paged lists share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "escrow/broker/core/admin_core.h"
#include "json.h"

namespace escrow::broker {

// A message's record as browse and scheduled show it: destination, times, headers, body
// (admin_messages.cpp); and one scheduled message, with its delivery time (admin_scheduled.cpp).
void add_record_json(json::object& m, const storage::message_record& r);
json::object scheduled_json(const scheduled_view& s);

// The page a list command (queues, connections, subscriptions, xa-list) is asked for: the ADMIN
// frame's `limit` (at most admin.max-page-size, its default) and `after` (the `next` cursor of the
// previous page; absent: from the start) headers (docs/operations.md, "Paged answers").
struct page_request {
  std::size_t limit = 0;
  std::size_t max_bytes = 0;  // admin.max-page-bytes
  std::optional<std::string> after;  // as sent: each list reads its own form
};

// The page `f` asks for; an invalid outcome when its limit header is malformed.
std::optional<admin_outcome> page_asked(const admin_core& core, const frame& f, page_request& out);

admin_outcome admin_browse(admin_core& core, const frame& f);
// scheduled: list, deliver now or delete a queue's scheduled messages (admin_scheduled.cpp).
void admin_scheduled(admin_core& core, const frame& f, admin_done done);
void admin_purge(admin_core& core, const frame& f, admin_done done);
void admin_move(admin_core& core, const frame& f, admin_done done);
admin_outcome admin_xa_list(const admin_core& core, const frame& f);
admin_outcome admin_coordinated(const admin_core& core, const frame& f);
// xa-commit, xa-rollback, xa-forget
void admin_xa_decide(admin_core& core, std::uint64_t connection_id, const frame& f, admin_done done);
void admin_backup(admin_core& core, const frame& f, admin_done done);

// config: the configuration in force as JSON, secrets hidden (admin_config.cpp).
admin_outcome admin_config(const admin_core& core, const frame& f);
// The body of that answer for `config` (tests/unit/broker/admin_config_test.cpp):
// {"config_file":PATH or null,"command_line_keys":[...],"reloadable":[KEY...],"config":{...}}, the
// last every key of the configuration file in its section, with its value in force.
std::string config_answer(const broker_config& config);
// A conninfo (libpq's KEY=VALUE form or a postgresql:// URI) as written, but each password
// (password, sslpassword; a URI's user:PASSWORD@) as ***; "***" for one libpq cannot read.
std::string hide_conninfo_password(std::string_view conninfo);

}  // namespace escrow::broker
