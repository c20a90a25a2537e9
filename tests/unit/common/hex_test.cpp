// The hex codec (common/include/escrow/common/hex.h).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "escrow/common/hex.h"

namespace hex = escrow::hex;

TEST_SUITE("common/hex") {
  TEST_CASE("every byte encodes as two lower-case digits and decodes back, from either case") {
    std::string all, back;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    std::string text = hex::encode(all);
    CHECK(text.substr(0, 6) == "000102");
    CHECK(text.substr(506) == "fdfeff");
    REQUIRE(hex::decode(text, back));
    CHECK(back == all);
    std::vector<unsigned char> bytes{1};
    REQUIRE(hex::decode("DeAd0f", bytes));
    CHECK(bytes == std::vector<unsigned char>{0xde, 0xad, 0x0f});
    REQUIRE(hex::decode("", back));
    CHECK(back.empty());
    std::string out = "0x";
    hex::append(out, bytes.data(), bytes.size());
    CHECK(out == "0xdead0f");
  }

  TEST_CASE("an odd number of digits or a character that is not a digit is refused") {
    std::string out;
    for (const char* bad : {"0", "abc", "0g", "g0", "+1", "-1", " 1", "1 ", "0x", "\xff" "0"})
      CHECK_MESSAGE(!hex::decode(bad, out), bad);
  }
}
