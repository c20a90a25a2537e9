// The ADMIN frames of the `escrow` command (docs/operations.md): each names its command in
// `admin-command` and its arguments in further headers; the answer is an admin_outcome (the core
// writes it as a RECEIPT with `admin-status` and a JSON body, or a `message`). The handlers see the
// core only through admin_core (escrow/broker/core/admin_core.h); escrowd installs this one with
// broker::use_admin. Runs on the core strand.
#pragma once

#include <cstdint>

#include "escrow/broker/core/admin_core.h"

namespace escrow::broker {

// Answers one ADMIN frame of connection `connection_id` (its receipt and permissions already checked).
void handle_admin_command(admin_core& core, std::uint64_t connection_id, const frame& f, admin_done done);

}  // namespace escrow::broker
