// Typed accessors of a received message and the names of error kinds.
#include <charconv>

#include "escrow/client_error.h"
#include "escrow/client_message.h"

namespace escrow::client {
namespace {

template <typename T>
T number_or(std::string_view text, T fallback) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size() ? value : fallback;
}

}  // namespace

std::uint32_t message::delivery_count() const { return number_or<std::uint32_t>(header("delivery-count"), 0); }

int message::priority() const { return number_or<int>(header("priority"), 4); }

std::int64_t message::expires_at_ms() const { return number_or<std::int64_t>(header("expires"), 0); }

const char* to_string(error::kind k) {
  switch (k) {
    case error::kind::broker_error:
      return "broker_error";
    case error::kind::connection_lost:
      return "connection_lost";
    case error::kind::timeout:
      return "timeout";
    case error::kind::invalid_argument:
      return "invalid_argument";
  }
  return "unknown";
}

}  // namespace escrow::client
