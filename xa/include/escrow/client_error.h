// escrow::client::error, the one exception type of the client library. Every failure an
// application can see is one of these: an ERROR frame from the broker (its `message` header and
// body), a lost or closed connection, a timeout, or an argument the library refused before
// sending anything. Nothing fails silently.
//
// Thread safety: an error is an immutable value; copy it freely between threads.
#pragma once

#include <stdexcept>
#include <string>

namespace escrow::client {

class error : public std::runtime_error {
 public:
  enum class kind {
    broker_error,      // the broker answered with an ERROR frame (it then closes the connection)
    connection_lost,   // the connection broke, was closed, or the broker stopped answering heart-beats
    timeout,           // no answer within the call's timeout; the connection may still be usable
    invalid_argument,  // refused by the library before anything was sent; fix the call
  };

  // `what` is the broker's `message` header for broker_error, else a sentence saying what failed
  // and what to do. `detail` is the ERROR frame's body (may be empty).
  error(kind which, std::string what, std::string detail = {})
      : std::runtime_error(std::move(what)), which_(which), detail_(std::move(detail)) {}

  kind which() const { return which_; }
  // The body of the broker's ERROR frame (often a longer explanation); empty for other kinds.
  const std::string& detail() const { return detail_; }

 private:
  kind which_;
  std::string detail_;
};

// "broker_error", "connection_lost", "timeout" or "invalid_argument".
const char* to_string(error::kind k);

}  // namespace escrow::client
