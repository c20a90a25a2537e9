// Fuzz target: the prepared branch record decoder (rm/record.cpp), what escrowd reads from the
// branches table at start. Properties checked: a record that decodes encodes to bytes that decode
// again, to a branch that encodes to the very same bytes (nothing lost or invented on the way).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "check.h"
#include "escrow/rm/record.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  escrow::rm::branch b;
  if (!escrow::rm::decode_record(in, b)) return 0;
  std::string encoded = escrow::rm::encode_record(b);
  escrow::rm::branch again;
  FUZZ_CHECK(escrow::rm::decode_record(encoded, again));
  FUZZ_CHECK(again.state == b.state && again.created_ms == b.created_ms);
  FUZZ_CHECK(again.work.sends.size() == b.work.sends.size() && again.work.consumed.size() == b.work.consumed.size());
  FUZZ_CHECK(escrow::rm::encode_record(again) == encoded);
  return 0;
}
