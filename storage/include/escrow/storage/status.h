// The result of a storage call: a code and, when not ok, a message that says what went wrong and
// what to do. LMDB's integer codes are translated once, in lmdb_env.cpp.
#pragma once

#include <string>
#include <utility>

namespace escrow::storage {

class [[nodiscard]] status {
 public:
  enum class code { ok, not_found, store_full, io_error, corrupt, bad_schema, failed };

  status() = default;
  status(code c, std::string message) : code_(c), message_(std::move(message)) {}
  static status ok_status() { return {}; }

  bool ok() const { return code_ == code::ok; }
  code which() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  code code_ = code::ok;
  std::string message_;
};

}  // namespace escrow::storage
