// Fuzz target: the batch decoder (storage/batch.cpp), the committer's view of a batch's bytes.
// Properties checked: decoding never reads past the input and reports only known operations and
// tables; the operations it reports, built again with batch's own calls (where those calls can
// express them), decode to the same operations.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "check.h"
#include "escrow/storage/batch.h"
#include "escrow/storage/coding.h"

using namespace escrow::storage;

namespace {

using operation = std::tuple<batch::op, table, std::string, std::string>;

bool decode_all(std::string_view rep, std::vector<operation>& out) {
  return batch::decode(rep, [&](batch::op o, table t, std::string_view k, std::string_view v) {
    out.emplace_back(o, t, std::string(k), std::string(v));
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<operation> ops;
  if (!decode_all(in, ops)) return 0;

  batch rebuilt;
  std::vector<operation> expressible;
  for (const auto& [o, t, k, v] : ops) {
    FUZZ_CHECK(static_cast<int>(t) < kTableCount);
    switch (o) {
      case batch::op::put: rebuilt.put(t, k, v); break;
      case batch::op::erase: rebuilt.erase(t, k); break;
      case batch::op::release_message:
        if (t != table::messages) continue;
        rebuilt.release_message(k);
        break;
      case batch::op::set_delivery_count: {
        std::string_view count_bytes = v;
        std::uint32_t count = 0;
        if (t != table::entries || v.size() != 4 || !get_u32(count_bytes, count)) continue;
        rebuilt.set_delivery_count(k, count);
        break;
      }
      case batch::op::remove_entry:
        if (t != table::entries) continue;
        rebuilt.remove_entry(k);
        break;
      case batch::op::promote_scheduled:
        if (t != table::scheduled) continue;
        rebuilt.promote_scheduled(k);
        break;
      case batch::op::remove_scheduled:
        if (t != table::scheduled) continue;
        rebuilt.remove_scheduled(k);
        break;
      default: FUZZ_CHECK(false && "unknown operation reported");
    }
    expressible.emplace_back(o, t, k, v);
  }
  std::vector<operation> again;
  FUZZ_CHECK(decode_all(rebuilt.rep(), again));
  FUZZ_CHECK(again == expressible);
  return 0;
}
