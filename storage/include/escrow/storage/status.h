// The result of a storage call: a code and, when not ok, a message that says what went wrong and
// what to do. LMDB's integer codes are translated once, in store.cpp (from_lmdb).
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

  bool ok() const {
    checked_ = true;
    return code_ == code::ok;
  }
  code which() const {
    checked_ = true;
    return code_;
  }
  const std::string& message() const { return message_; }
  // Whether anyone asked ok() or which(): the broker checks that every store completion looked at
  // its status (one that ignores it fails the test builds: broker::impl::run_completions).
  bool checked() const { return checked_; }

 private:
  code code_ = code::ok;
  std::string message_;
  mutable bool checked_ = false;
};

}  // namespace escrow::storage
