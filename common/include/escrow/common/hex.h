// Hexadecimal text of bytes and back: xids, password hashes' salt and key, storage keys in errors,
// the XA switch's branch trailer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace escrow::hex {

// Appends the lower-case hex digits of `size` bytes at `data` to `out`.
inline void append(std::string& out, const void* data, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (const auto* b = static_cast<const unsigned char*>(data); size-- > 0; ++b) {
    out.push_back(kDigits[*b >> 4]);
    out.push_back(kDigits[*b & 15]);
  }
}

inline std::string encode(const void* data, std::size_t size) {
  std::string out;
  out.reserve(size * 2);
  append(out, data, size);
  return out;
}

inline std::string encode(std::string_view bytes) { return encode(bytes.data(), bytes.size()); }

// Decodes an even number of hex digits (either case) into `out`, a std::string or a
// std::vector<unsigned char>; false for any other text (`out` then unspecified).
template <typename Bytes>
bool decode(std::string_view text, Bytes& out) {
  auto value = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (text.size() % 2 != 0) return false;
  out.clear();
  for (std::size_t i = 0; i < text.size(); i += 2) {
    int hi = value(text[i]), lo = value(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<typename Bytes::value_type>(hi * 16 + lo));
  }
  return true;
}

}  // namespace escrow::hex
