// Fuzz target: the TOML configuration reader (broker/config/config.cpp, load_config_text) and the address
// settings it yields (broker/config/address_settings.cpp). The input is the text of a configuration file.
// Properties checked:
//  - a refused file gets an error that names the file ("fuzz.toml:LINE: ...");
//  - an accepted file holds only values the reference allows (docs/configuration.md): limits at
//    their minimums, valid patterns, multipliers of at least 1.0, avoidance factors in [0, 1],
//    [http] allowed-hosts entries that the Host check accepts as written;
//  - resolving settings and computing redelivery delays from it is defined behaviour.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "check.h"
#include "escrow/broker/config/config.h"
#include "escrow/broker/security/http_access.h"

using escrow::broker::broker_config;

namespace {

void check_accepted(const broker_config& c) {
  FUZZ_CHECK(c.frames.max_frame_size >= 64 && c.frames.max_headers >= 1 && c.frames.max_header_length >= 16);
  FUZZ_CHECK(c.max_group_batches >= 1 && c.consumer_window >= 1 && c.queue_memory_window >= 1);
  FUZZ_CHECK(c.message_expiry_scan_period_ms >= 1 || c.message_expiry_scan_period_ms == -1);
  for (const auto& e : c.address_settings) {
    FUZZ_CHECK(escrow::broker::check_pattern(e.match).empty());
    if (e.redelivery_multiplier) FUZZ_CHECK(std::isfinite(*e.redelivery_multiplier) && *e.redelivery_multiplier >= 1.0);
    if (e.collision_avoidance_factor)
      FUZZ_CHECK(*e.collision_avoidance_factor >= 0.0 && *e.collision_avoidance_factor <= 1.0);
    if (e.max_delivery_attempts) FUZZ_CHECK(*e.max_delivery_attempts >= 1 || *e.max_delivery_attempts == -1);
    if (e.expiry_delay_ms) FUZZ_CHECK(*e.expiry_delay_ms >= -1);
    if (e.id_cache_size) FUZZ_CHECK(*e.id_cache_size <= 10000000);
  }
  // [http] allowed-hosts holds only entries the Host check can use; a policy built from them and
  // asked about any of them is defined behaviour, and each entry's own name passes it.
  for (const auto& h : c.http_allowed_hosts) FUZZ_CHECK(escrow::broker::check_allowed_host(h).empty());
  auto access = escrow::broker::make_http_access(c.http_listen ? c.http_listen->host : "", 8161,
                                                 c.http_allowed_hosts, {});
  for (const auto& h : c.http_allowed_hosts)
    if (h != "*" && (h.front() == '[' || std::count(h.begin(), h.end(), ':') <= 1))  // not a bare IPv6
      FUZZ_CHECK(escrow::broker::host_allowed(access, h));
  // Short addresses only: a pattern of many '#' words backtracks (the file is the operator's).
  for (std::string_view address : {"orders", "orders.eu", "a.b.c", "DLQ"}) {
    auto s = escrow::broker::resolve_settings(c.address_settings, address);
    for (std::uint32_t count : {1u, 2u, 10u, 1000u})
      for (double unit : {-1.0, 0.0, 1.0}) (void)s.redelivery_delay_for(count, unit);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  broker_config config;
  std::string error = escrow::broker::load_config_text(text, "fuzz.toml", config);
  if (error.empty()) {
    check_accepted(config);
  } else {
    FUZZ_CHECK(error.rfind("fuzz.toml:", 0) == 0);
  }
  return 0;
}
