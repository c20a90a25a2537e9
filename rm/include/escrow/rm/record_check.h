// The branch decoder `escrow check` gives the store checker (storage/check.h): it reads a record of
// the `branches` table as the resource manager does at start (resource_manager::load), and says
// what the record means to the other tables. It lives in rm/ because storage must not use rm.
#pragma once

#include <string>
#include <string_view>

#include "escrow/storage/check.h"

namespace escrow::rm {

// Decodes the record stored under `key` (xid::encode()) into `out`: the xid's text, whether it is
// prepared or heuristically completed, and, as load() keeps them, only what was stored: the sends
// with a stored target (their message ids and stored target entries) and the stored consumed
// entries. Returns "" when key and record decode whole, else what is wrong.
std::string check_branch_record(std::string_view key, std::string_view value, storage::branch_refs& out);

}  // namespace escrow::rm
