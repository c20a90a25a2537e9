// Shared by the storage tests that open real stores: a store of a 1 MiB first map with no disk
// floor, optionally with a fault plan (fault_injection.h), opened or the test fails.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <string_view>

#include "escrow/storage/fault_injection.h"
#include "escrow/storage/store.h"

namespace escrow::testing {

inline storage::store_options small_store(const std::string& path, std::string_view faults = {}) {
  storage::store_options o;
  o.path = path;
  o.map_size = 1ull << 20;
  o.min_free_disk = 0;
  if (!faults.empty()) {
    std::string error;
    REQUIRE_MESSAGE(storage::fault_plan::parse(faults, o.faults, error), error);
  }
  return o;
}

inline std::unique_ptr<storage::store> open_or_fail(const storage::store_options& options) {
  std::unique_ptr<storage::store> s;
  storage::status st = storage::store::open(options, s);
  INFO(st.message());
  REQUIRE(st.ok());
  return s;
}

}  // namespace escrow::testing
