// The exit codes of the `escrow` command (stable: scripts rely on them; docs/operations.md) and the
// one exception that carries a failure with its code up to main().
#pragma once

#include <stdexcept>
#include <string>

namespace escrow::cli {

enum exit_code : int {
  exit_ok = 0,
  exit_failed = 1,         // the broker refused or the operation failed (also: a bad configuration for check-config)
  exit_usage = 2,          // wrong options or arguments; nothing was sent
  exit_cannot_connect = 3, // no broker at the URL, TLS failed, or the login was refused
  exit_not_found = 4,      // no such queue, subscription or transaction branch
  exit_inconsistent = 5,   // check: the store has inconsistencies (each one printed)
  exit_cannot_open_store = 6,  // check: no store there, not an Escrow store, or another schema version
};

class failure : public std::runtime_error {
 public:
  failure(exit_code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  exit_code code() const { return code_; }

 private:
  exit_code code_;
};

}  // namespace escrow::cli
