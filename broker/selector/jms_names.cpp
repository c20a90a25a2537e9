// The JMS names and their STOMP headers (jms_names.h).
#include "jms_names.h"

#include <array>

namespace escrow::broker::selector_detail {

namespace {

struct field_info {
  std::string_view jms_name;
  std::string_view stomp_header;
  kind type;
};

constexpr std::array<field_info, 8> kFields{{
    {"JMSMessageID", "message-id", kind::string},
    {"JMSPriority", "priority", kind::exact},
    {"JMSTimestamp", "timestamp", kind::exact},
    {"JMSDeliveryMode", "persistent", kind::string},
    {"JMSType", "type", kind::string},
    {"JMSCorrelationID", "correlation-id", kind::string},
    {"JMSExpiration", "expires", kind::exact},
    {"JMSRedelivered", "redelivered", kind::boolean},
}};

const field_info& info(jms_field f) { return kFields[static_cast<std::size_t>(f)]; }

// JMS's numeric header fields always have a value: a message without the header has the value JMS
// gives it then (priority 4, no expiration 0, no timestamp 0).
value number_or(std::optional<std::string_view> text, std::int64_t missing) {
  if (!text) return value::of_exact(missing);
  auto n = read_number(*text);
  return n ? *n : value::null();
}

}  // namespace

std::optional<jms_field> find_jms_field(std::string_view identifier) {
  if (!identifier.starts_with("JMS")) return std::nullopt;
  for (std::size_t i = 0; i < kFields.size(); ++i)
    if (kFields[i].jms_name == identifier) return static_cast<jms_field>(i);
  return std::nullopt;
}

std::string_view stomp_header(jms_field f) { return info(f).stomp_header; }

kind jms_type(jms_field f) { return info(f).type; }

value jms_value(jms_field f, std::optional<std::string_view> text) {
  switch (f) {
    case jms_field::priority: return number_or(text, 4);
    case jms_field::timestamp:
    case jms_field::expiration: return number_or(text, 0);
    case jms_field::delivery_mode:
      // STOMP's default is persistent, as the broker stores it (broker/core/send.cpp).
      if (!text || *text == "true") return value::of_string(kind::string, "PERSISTENT");
      if (*text == "false") return value::of_string(kind::string, "NON_PERSISTENT");
      return value::null();
    case jms_field::redelivered: {
      if (!text) return value::of(false);
      auto b = read_boolean(*text);
      return b ? value::of(*b) : value::null();
    }
    case jms_field::message_id:
    case jms_field::type:
    case jms_field::correlation_id: return text ? value::of_string(kind::string, *text) : value::null();
  }
  return value::null();
}

}  // namespace escrow::broker::selector_detail
