// The JMS header names a selector may use and the STOMP headers they read (docs/stomp.md,
// "Selectors", has the table): JMSPriority reads `priority` as a number, 4 when the message has
// none; JMSDeliveryMode reads `persistent` as 'PERSISTENT' or 'NON_PERSISTENT'; and so on. A JMS
// name has the type JMS gives it (JMSMessageID a string, JMSPriority a number, JMSRedelivered a
// boolean), where a plain header's text has none until an operator asks for one.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "values.h"

namespace escrow::broker::selector_detail {

enum class jms_field : std::uint8_t {
  message_id,      // JMSMessageID      message-id       string
  priority,        // JMSPriority       priority         number, 4 when missing
  timestamp,       // JMSTimestamp      timestamp        number, 0 when missing
  delivery_mode,   // JMSDeliveryMode   persistent       'PERSISTENT' / 'NON_PERSISTENT'
  type,            // JMSType           type             string
  correlation_id,  // JMSCorrelationID  correlation-id   string
  expiration,      // JMSExpiration     expires          number, 0 when missing
  redelivered,     // JMSRedelivered    redelivered      boolean, FALSE when missing
};

// The field a selector identifier names, if it is one of the JMS names above (case-sensitive).
std::optional<jms_field> find_jms_field(std::string_view identifier);
// The STOMP header the field reads.
std::string_view stomp_header(jms_field f);
// What the selector sees, given that header's text (nullopt: the message has no such header).
// A text the field's type cannot hold (a priority "high") is NULL.
value jms_value(jms_field f, std::optional<std::string_view> header_text);
// The field's type as the parser checks operands against: kind::string, exact or boolean.
kind jms_type(jms_field f);

}  // namespace escrow::broker::selector_detail
