// Names clients choose, and client text in logs (names.h).
#include "escrow/broker/security/names.h"

#include <cstdint>
#include <fmt/format.h>

namespace escrow::broker {

std::pair<char32_t, std::size_t> decode_utf8(std::string_view s) {
  auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char c = b(0);
  if (c < 0x80) return {c, 1};
  std::size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
  if (n == 0 || c > 0xf4 || s.size() < n) return {0, 0};
  char32_t cp = c & (0x7f >> n);
  for (std::size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xc0) != 0x80) return {0, 0};
    cp = (cp << 6) | (b(i) & 0x3f);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return {0, 0};
  return {cp, n};
}

bool is_utf8(std::string_view text) {
  for (std::size_t i = 0, n = 0; i < text.size(); i += n)
    if ((n = decode_utf8(text.substr(i)).second) == 0) return false;
  return true;
}

namespace {

// Characters that do not show as themselves: C0 and C1 controls, DEL, and the invisible and
// bidirectional formatting characters (Unicode category Cf that renders as nothing).
const char* hidden_kind(char32_t cp) {
  if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) return "a control character";
  if (cp == 0xad || cp == 0x34f || cp == 0x61c || cp == 0x115f || cp == 0x1160 || cp == 0x180e ||
      (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f) ||
      cp == 0x3164 || (cp >= 0xfe00 && cp <= 0xfe0f) || cp == 0xfeff || cp == 0xffa0 || (cp >= 0xfff9 && cp <= 0xfffb) ||
      (cp >= 0x1bca0 && cp <= 0x1bca3) || (cp >= 0x1d173 && cp <= 0x1d17a) || (cp >= 0xe0000 && cp <= 0xe0fff))
    return "a zero-width or direction-changing character";
  return nullptr;
}

}  // namespace

std::optional<std::string> name_problem(std::string_view name) {
  for (std::size_t i = 0; i < name.size();) {
    auto [cp, n] = decode_utf8(name.substr(i));
    if (n == 0) return fmt::format("it is not UTF-8 (byte {})", i);
    if (const char* kind = hidden_kind(cp)) return fmt::format("it contains U+{:04X}, {}, at byte {}", static_cast<std::uint32_t>(cp), kind, i);
    i += n;
  }
  return std::nullopt;
}

std::optional<std::string> queue_name_problem(std::string_view name) {
  auto at = name.find('@');
  if (at == std::string_view::npos) return std::nullopt;
  return fmt::format("it contains '@' at byte {}, which only the names of durable subscriptions hold "
                     "(CLIENT-ID.NAME@USER): name the queue without it", at);
}

std::string loggable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    auto [cp, n] = decode_utf8(text.substr(i));
    if (n == 0) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (cp == '\\') out += "\\\\";
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (hidden_kind(cp)) out += cp < 0x80 ? fmt::format("\\x{:02x}", static_cast<std::uint32_t>(cp))
                                               : fmt::format("\\u{{{:04x}}}", static_cast<std::uint32_t>(cp));
    else out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace escrow::broker
