// The header names a client may not set on SEND because they are the broker's to write: what a
// consumer reads in them must come from the broker, not from another tenant (docs/security.md,
// "Tenants"). A SEND's copies of them, in any case, are dropped; `user-id` is checked instead.
#pragma once

#include <string_view>

namespace escrow::broker {

// The broker's namespaces: _HQ_* (where a moved message came from), _AMQ_* except the ones Artemis
// clients set themselves (_AMQ_DUPL_ID, _AMQ_SCHED_*, _AMQ_GROUP_*, _AMQ_LVQ_NAME), the JMSX
// properties a JMS provider sets (JMSXUserID, JMSXDeliveryCount, ...), escrow-*, and the headers of
// the broker's own replies (xid, xa-result, xa-count, admin-status, receipt-id).
// Without regard to ASCII case: `User-Id` and `_amq_validated_user` are the broker's too.
bool is_reserved_header(std::string_view name);

// Whether two header names are the same without regard to ASCII case, as consumers that read
// headers case-insensitively take them.
bool same_header_name(std::string_view a, std::string_view b);

}  // namespace escrow::broker
