// Fuzz target: the STOMP frame parser and encoder (xa/frame.cpp).
//
// Input: byte 0 picks the protocol version (bits 0-1) and the limits (bits 2-3: defaults, small,
// tiny); byte 1 seeds the split points; the rest is the byte stream a connection would carry.
// Properties checked:
//  - feeding the stream in pieces (sizes drawn from byte 1) gives exactly what one feed gives:
//    the same frames, the same outcome and the same error;
//  - every parsed frame, encoded again (STOMP 1.2) and parsed by a fresh parser, comes back equal
//    (but for the one thing the unescaped CONNECT frames cannot carry: see encodable()).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "check.h"
#include "escrow/frame.h"

namespace {

using escrow::frame;
using escrow::frame_limits;
using escrow::frame_parser;
using escrow::stomp_version;

stomp_version version_from(std::uint8_t bits) {
  switch (bits & 3) {
    case 1: return stomp_version::v1_1;
    case 2: return stomp_version::v1_0;
    default: return stomp_version::v1_2;
  }
}

frame_limits limits_from(std::uint8_t bits) {
  switch (bits & 3) {
    case 1: return {4096, 16, 256};
    case 2: return {64, 2, 16};  // the configured minimums
    default: return {};
  }
}

bool same(const frame& a, const frame& b) {
  return a.command == b.command && a.headers == b.headers && a.body == b.body;
}

// CONNECT, STOMP and CONNECTED headers are never escaped, so a value that ends in CR (sent as
// "name:value\r\r\n") cannot be written again: its CR would read as part of the EOL.
bool encodable(const frame& f) {
  if (f.command != "CONNECT" && f.command != "STOMP" && f.command != "CONNECTED") return true;
  for (const auto& [name, value] : f.headers)
    if (!value.empty() && value.back() == '\r') return false;
  return true;
}

struct outcome {
  bool ok = true;
  std::vector<frame> frames;
  std::string error;
  std::optional<std::string> error_receipt;
};

outcome parse_in_pieces(std::string_view stream, stomp_version v, frame_limits limits, std::uint8_t seed) {
  frame_parser parser(limits);
  parser.set_version(v);
  outcome out;
  // A small xorshift: piece sizes 1..(seed % 64 + 1), never empty, reproducible from the seed.
  std::uint32_t state = 0x9e3779b9u ^ seed;
  const std::size_t max_piece = seed % 64 + 1;
  while (!stream.empty() && out.ok) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    std::size_t n = std::min<std::size_t>(stream.size(), state % max_piece + 1);
    out.ok = parser.feed(stream.substr(0, n), out.frames);
    stream.remove_prefix(n);
  }
  out.error = parser.error();
  out.error_receipt = parser.error_receipt();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::uint8_t mode = data[0];
  const std::uint8_t seed = data[1];
  const std::string_view stream(reinterpret_cast<const char*>(data) + 2, size - 2);
  const stomp_version v = version_from(mode);
  const frame_limits limits = limits_from(mode >> 2);

  outcome whole;
  {
    frame_parser parser(limits);
    parser.set_version(v);
    whole.ok = parser.feed(stream, whole.frames);
    whole.error = parser.error();
    whole.error_receipt = parser.error_receipt();
    FUZZ_CHECK(whole.ok == whole.error.empty());
    // A dead parser stays dead.
    std::vector<frame> more;
    if (!whole.ok) FUZZ_CHECK(!parser.feed("SEND\n\n\0", more) && more.empty());
  }

  const outcome pieces = parse_in_pieces(stream, v, limits, seed);
  FUZZ_CHECK(pieces.ok == whole.ok);
  FUZZ_CHECK(pieces.error == whole.error);
  FUZZ_CHECK(pieces.error_receipt == whole.error_receipt);
  FUZZ_CHECK(pieces.frames.size() == whole.frames.size());
  for (std::size_t i = 0; i < whole.frames.size(); ++i) FUZZ_CHECK(same(pieces.frames[i], whole.frames[i]));

  // Re-encoding may grow a frame (an unescaped CR becomes "\r"), so the second parse has no limits.
  constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();
  for (const frame& f : whole.frames) {
    if (!encodable(f)) continue;
    std::string bytes = escrow::encode(f, stomp_version::v1_2);
    frame_parser again(frame_limits{kNoLimit, kNoLimit, kNoLimit});
    std::vector<frame> back;
    FUZZ_CHECK(again.feed(bytes, back));
    FUZZ_CHECK(back.size() == 1);
    FUZZ_CHECK(same(back[0], f));
  }
  return 0;
}
