// The socket-free parts of STOMP over WebSocket (websocket.h).
#include "websocket.h"

#include <array>

namespace escrow::broker {

std::optional<std::string> choose_subprotocol(std::optional<std::string_view> offered) {
  if (!offered) return std::string();
  constexpr std::array<std::string_view, 3> kBestFirst = {"v12.stomp", "v11.stomp", "v10.stomp"};
  std::vector<std::string_view> items;
  for (std::string_view rest = *offered; !rest.empty();) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    items.push_back(item);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  for (auto best : kBestFirst)
    for (auto item : items)
      if (item == best) return std::string(best);
  return std::nullopt;
}

bool valid_utf8(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto* end = p + bytes.size();
  while (p < end) {
    unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int extra;
    std::uint32_t code;
    if ((c & 0xe0) == 0xc0) {
      extra = 1;
      code = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2;
      code = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3;
      code = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= extra) return false;
    for (int i = 1; i <= extra; ++i) {
      if ((p[i] & 0xc0) != 0x80) return false;
      code = (code << 6) | (p[i] & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    constexpr std::array<std::uint32_t, 4> kMin = {0, 0x80, 0x800, 0x10000};
    if (code < kMin[extra] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    p += extra + 1;
  }
  return true;
}

}  // namespace escrow::broker
