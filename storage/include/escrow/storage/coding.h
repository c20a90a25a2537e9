// Byte encodings shared by every table: big-endian integers (so LMDB's byte order is numeric
// order) and varint-prefixed strings. Pure functions; decoders return false on short input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace escrow::storage {

inline void put_u32(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}
inline void put_u64(std::string& out, std::uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}
inline bool get_u32(std::string_view& in, std::uint32_t& v) {
  if (in.size() < 4) return false;
  v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  in.remove_prefix(4);
  return true;
}
inline bool get_u64(std::string_view& in, std::uint64_t& v) {
  if (in.size() < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  in.remove_prefix(8);
  return true;
}
inline void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
inline std::size_t varint_size(std::uint64_t v) {
  std::size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}
inline std::size_t string_size(std::string_view s) { return varint_size(s.size()) + s.size(); }
inline bool get_varint(std::string_view& in, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    auto byte = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}
inline void put_string(std::string& out, std::string_view s) {
  put_varint(out, s.size());
  out.append(s);
}
inline bool get_string(std::string_view& in, std::string_view& s) {
  std::uint64_t n = 0;
  if (!get_varint(in, n) || n > in.size()) return false;
  s = in.substr(0, n);
  in.remove_prefix(n);
  return true;
}

}  // namespace escrow::storage
