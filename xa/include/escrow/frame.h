// STOMP frames and the STOMP 1.2 codec: a pure, I/O-free parser that is fed arbitrary byte spans
// and an encoder. Used by the broker and by clients; knows nothing about sockets or the server.
//
// Thread safety: a frame_parser belongs to one connection and is used by one thread at a time.
// encode() is a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace escrow {

// The protocol versions the codec speaks; they change how headers are escaped.
enum class stomp_version { v1_0, v1_1, v1_2 };

// "1.0", "1.1" or "1.2".
std::string_view to_string(stomp_version v);

struct frame {
  std::string command;
  // In wire order. Repeated names are kept; the first occurrence is the one that counts.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  // The value of the first header called `name`, or nullptr.
  const std::string* find(std::string_view name) const;
  // The value of the first header called `name`, or `fallback`.
  std::string_view get(std::string_view name, std::string_view fallback = {}) const;
  bool has(std::string_view name) const { return find(name) != nullptr; }
  // Appends a header (does not replace an earlier one of the same name).
  frame& add(std::string name, std::string value);
};

// Limits that protect the broker from unbounded input. Every one is configurable.
struct frame_limits {
  std::size_t max_frame_size = 10 * 1024 * 1024;  // command + headers + body, in bytes
  std::size_t max_headers = 1000;                 // header lines per frame
  std::size_t max_header_length = 10 * 1024;      // one header line (name:value), in bytes
};

// Incremental STOMP frame parser: feed() it bytes as they arrive, any split, any number of frames
// per call; complete frames are appended to the output. Heart-beat EOLs between frames are skipped.
//
// Once feed() reports an error the parser is dead: the caller sends an ERROR frame naming
// error() and closes the connection.
class frame_parser {
 public:
  explicit frame_parser(frame_limits limits = {});

  // Escaping depends on the version; until set_version() is called, 1.2 rules apply (CONNECT and
  // STOMP frames are never unescaped, whatever the version).
  void set_version(stomp_version v) { version_ = v; }

  // Parses `data`, appending each complete frame to `out`. Returns false on a protocol error
  // (error() says which); bytes after the error are not examined.
  bool feed(std::string_view data, std::vector<frame>& out);

  const std::string& error() const { return error_; }
  // The `receipt` header of the frame being parsed when the error happened, if it had one by then.
  const std::optional<std::string>& error_receipt() const { return error_receipt_; }

 private:
  enum class state { between_frames, command, headers, body_by_length, body_to_nul, trailing_nul };
  bool fail(std::string message);
  // The steps of feed(), one per state; each consumes what it reads from the front of `data`.
  bool step(std::string_view& data, std::vector<frame>& out);
  void skip_heart_beat(std::string_view& data);
  bool take_line(std::string_view& data);
  void take_counted_body(std::string_view& data);
  bool take_trailing_nul(std::string_view& data, std::vector<frame>& out);
  bool take_body_to_nul(std::string_view& data, std::vector<frame>& out);
  void emit(std::vector<frame>& out);
  bool finish_line(std::string_view line);
  bool finish_headers();
  bool unescape(std::string_view in, std::string& out, bool is_name);

  frame_limits limits_;
  stomp_version version_ = stomp_version::v1_2;
  state state_ = state::between_frames;
  frame current_;
  std::string line_;
  std::size_t frame_bytes_ = 0;
  std::size_t body_remaining_ = 0;
  std::string error_;
  std::optional<std::string> error_receipt_;
};

// Serialises a frame. Header names and values are escaped as `v` requires, except in CONNECT,
// STOMP and CONNECTED frames, which the specification leaves unescaped. The caller supplies
// content-length if it wants one; the body is written as is, followed by NUL.
std::string encode(const frame& f, stomp_version v = stomp_version::v1_2);

// Appends the encoding of `f` to `out` (no intermediate string).
void encode_to(std::string& out, const frame& f, stomp_version v = stomp_version::v1_2);

// Writes a frame straight into `out`, for hot paths that should not first copy a body into a
// frame: the command line at construction, then header() calls in order, then finish(body) once.
// Escapes as encode_to() does. `size_hint`: the expected bytes of headers and body.
class frame_writer {
 public:
  frame_writer(std::string& out, std::string_view command, stomp_version v, std::size_t size_hint = 0);
  void header(std::string_view name, std::string_view value);
  void finish(std::string_view body);

 private:
  std::string& out_;
  bool escape_;
  bool escape_cr_;
  bool plain_only_;  // STOMP 1.0: no escapes, so CR, LF (and ':' in a name) go out as spaces
};

// Parses a heart-beat header value "cx,cy" (two non-negative decimal integers, milliseconds).
std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_heart_beat(std::string_view value);

// Negotiates one direction: 0 if either side is 0, else the larger of the two.
std::uint64_t negotiate_heart_beat(std::uint64_t can_send, std::uint64_t wants_to_receive);

}  // namespace escrow
