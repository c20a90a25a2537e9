// Messages as the client library sees them: outgoing_message (what a producer sends: a body,
// custom headers and optional per-message overrides of the producer's defaults) and message (a
// received MESSAGE frame with typed accessors for the headers the broker writes).
//
// Thread safety: both are plain values; a const message may be read from several threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "escrow/frame.h"

namespace escrow::client {

struct outgoing_message {
  std::string body{};
  std::string content_type{};  // sent as content-type when non-empty (e.g. "text/plain")
  // Application headers, passed through to the MESSAGE unchanged. Names the protocol reserves
  // (destination, receipt, transaction, content-length, message-id, subscription, ack, ...) are
  // refused with error::kind::invalid_argument.
  std::vector<std::pair<std::string, std::string>> headers{};

  // Per-message overrides of the producer's defaults (unset = use the producer's).
  std::optional<bool> persistent{};
  std::optional<int> priority{};                        // 0..9
  std::optional<std::chrono::milliseconds> time_to_live{};  // 0 = never expires
  // Absolute expiry in epoch milliseconds (the `expires` header); wins over time_to_live.
  std::optional<std::int64_t> expires_at_ms{};

  outgoing_message() = default;
  outgoing_message(std::string b) : body(std::move(b)) {}  // NOLINT: a body is a message
  outgoing_message(const char* b) : body(b) {}              // NOLINT
  outgoing_message& header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
    return *this;
  }
};

class message {
 public:
  message() = default;
  explicit message(frame f) : frame_(std::move(f)) {}

  const std::string& body() const { return frame_.body; }
  // The first header called `name` (application or broker header), or `fallback`.
  std::string_view header(std::string_view name, std::string_view fallback = {}) const {
    return frame_.get(name, fallback);
  }
  bool has_header(std::string_view name) const { return frame_.has(name); }
  // Every header in wire order, the broker's and the application's.
  const std::vector<std::pair<std::string, std::string>>& headers() const { return frame_.headers; }
  const frame& raw() const { return frame_; }

  std::string_view destination() const { return header("destination"); }
  std::string_view message_id() const { return header("message-id"); }
  std::string_view subscription() const { return header("subscription"); }
  std::string_view content_type() const { return header("content-type"); }
  // The value an ACK or NACK names (empty for NO_ACKNOWLEDGE subscriptions).
  std::string_view ack_id() const { return header("ack"); }
  // True when an earlier delivery of this message ended without an acknowledgement.
  bool redelivered() const { return header("redelivered") == "true"; }
  // 1 on the first delivery; 0 if the broker did not say.
  std::uint32_t delivery_count() const;
  // The sender's values (defaults when absent: 4, true, 0 = never).
  int priority() const;
  bool persistent() const { return header("persistent", "true") == "true"; }
  std::int64_t expires_at_ms() const;

 private:
  frame frame_;
};

}  // namespace escrow::client
