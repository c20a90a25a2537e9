// Reserved header names (reserved_headers.h).
#include "reserved_headers.h"

#include <array>

namespace escrow::broker {

bool same_header_name(std::string_view a, std::string_view b) {
  auto lower = [](char ch) { return ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch; };
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

namespace {

// Case-insensitively (ASCII): STOMP's header names are case-sensitive, but many consumers (JMS
// property lookups, HTTP-minded code) read them without regard to case, so `_amq_validated_user`
// must not pass where `_AMQ_VALIDATED_USER` is dropped.
bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && same_header_name(s.substr(0, prefix.size()), prefix);
}

// Artemis headers that clients set: duplicate detection, scheduled delivery, message groups, last
// value queues. Left to the client (and to the features that will read them).
constexpr std::array<std::string_view, 6> kClientAmqHeaders = {"_AMQ_DUPL_ID",  "_AMQ_SCHED_DELIVERY",
                                                               "_AMQ_SCHED_DELAY", "_AMQ_GROUP_ID",
                                                               "_AMQ_GROUP_SEQUENCE", "_AMQ_LVQ_NAME"};

// JMS 2.0, 3.5.9: the JMSX properties the provider sets (JMSXGroupID and JMSXGroupSeq are the
// client's).
constexpr std::array<std::string_view, 7> kProviderJmsx = {"JMSXUserID",       "JMSXAppID",        "JMSXDeliveryCount",
                                                           "JMSXProducerTXID", "JMSXConsumerTXID", "JMSXRcvTimestamp",
                                                           "JMSXState"};

constexpr std::array<std::string_view, 5> kReplyHeaders = {"xid", "xa-result", "xa-count", "admin-status", "receipt-id"};

template <std::size_t N>
bool one_of(std::string_view name, const std::array<std::string_view, N>& names) {
  for (auto n : names)
    if (same_header_name(n, name)) return true;
  return false;
}

}  // namespace

bool is_reserved_header(std::string_view name) {
  // HornetQ's spelling of the scheduled delivery time is the one _HQ_ header a client sets.
  if (same_header_name(name, "_HQ_SCHED_DELIVERY")) return false;
  if (starts_with(name, "_HQ_") || starts_with(name, "escrow-")) return true;
  if (starts_with(name, "_AMQ_")) return !one_of(name, kClientAmqHeaders);
  return one_of(name, kProviderJmsx) || one_of(name, kReplyHeaders);
}

}  // namespace escrow::broker
