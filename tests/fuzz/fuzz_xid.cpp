// Fuzz target: the xid text form "formatID:gtrid-hex:bqual-hex" and byte form (the key of the
// branches table), and the XA flag and result names (xa/xid.cpp). The whole input is tried as each.
// Properties checked:
//  - parse -> to_string -> parse gives the same xid and the same text (hex in lower case);
//  - a decoded key encodes back to the same bytes; every xid survives encode -> decode and the
//    C struct (to_c -> from_c);
//  - parsed flags survive xa_flags_name -> parse_xa_flags; a result name maps back to its code.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "check.h"
#include "escrow/xid.h"

namespace {

void check_forms(const escrow::xid& x) {
  FUZZ_CHECK(!x.gtrid().empty() && x.gtrid().size() <= MAXGTRIDSIZE && x.bqual().size() <= MAXBQUALSIZE);
  std::string text = x.to_string();
  std::string error;
  auto parsed = escrow::xid::parse(text, &error);
  FUZZ_CHECK(parsed && *parsed == x && parsed->to_string() == text);
  auto decoded = escrow::xid::decode(x.encode());
  FUZZ_CHECK(decoded && *decoded == x);
  auto from_c = escrow::xid::from_c(x.to_c());
  FUZZ_CHECK(from_c && *from_c == x);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  std::string error;
  if (auto x = escrow::xid::parse(input, &error)) {
    check_forms(*x);
  } else {
    FUZZ_CHECK(!error.empty() && error.size() < 400);  // it goes into a header: kept short
  }

  if (auto x = escrow::xid::decode(input)) {
    FUZZ_CHECK(x->encode() == input);
    check_forms(*x);
  }

  if (auto flags = escrow::parse_xa_flags(input, &error)) {
    auto again = escrow::parse_xa_flags(escrow::xa_flags_name(*flags));
    FUZZ_CHECK(again && *again == *flags);
  }
  if (auto code = escrow::xa_result_from_name(input)) {
    FUZZ_CHECK(escrow::xa_result_from_name(escrow::xa_result_name(*code)) == code);
  }
  return 0;
}
