// STOMP 1.2 frame codec. See frame.h for the interface and the STOMP 1.2 specification for the rules.
//
// Frame size accounting: a frame's size is every byte it occupies on the wire, from the first
// byte of its command line through the terminating NUL (EOLs and stripped CRs included, heart-beat
// EOLs before it excluded). A frame whose size equals max_frame_size is accepted.
#include "escrow/frame.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>

namespace escrow {

namespace {

// The commands a STOMP 1.2 client or server may send, plus Escrow's XA extension frames (and
// XA-HEURISTIC, an operator's decision on a prepared branch), and ADMIN (the `escrow` command).
constexpr std::array<std::string_view, 24> kCommands = {
    "CONNECT",   "STOMP",      "CONNECTED",   "SEND",     "SUBSCRIBE", "UNSUBSCRIBE",
    "ACK",       "NACK",       "BEGIN",       "COMMIT",   "ABORT",     "DISCONNECT",
    "MESSAGE",   "RECEIPT",    "ERROR",       "XA-START", "XA-END",    "XA-PREPARE",
    "XA-COMMIT", "XA-ROLLBACK", "XA-RECOVER", "XA-FORGET", "XA-HEURISTIC", "ADMIN",
};

// Error messages quote client input; keep them short enough for an ERROR frame's header.
constexpr std::size_t kMaxQuoted = 40;

bool is_known_command(std::string_view command) {
  return std::find(kCommands.begin(), kCommands.end(), command) != kCommands.end();
}

// The specification leaves the headers of these frames unescaped (passcodes may hold ':' or '\').
bool is_unescaped_command(std::string_view command) {
  return command == "CONNECT" || command == "STOMP" || command == "CONNECTED";
}

// 'text', truncated (without splitting a UTF-8 sequence) and with control bytes replaced by '?'.
std::string quoted(std::string_view text) {
  std::size_t n = std::min(text.size(), kMaxQuoted);
  while (n > 0 && n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  std::string out = "'";
  for (char c : text.substr(0, n)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7F) ? '?' : c;
  }
  if (n < text.size()) out += "...";
  out += '\'';
  return out;
}

// Whether `n` more bytes plus the frame's terminating NUL still fit, given `used` bytes so far.
bool room_for(std::size_t used, std::size_t n, std::size_t max) {
  return used < max && n < max - used;
}

// A non-empty run of decimal digits that fits in uint64 (no sign, no spaces).
std::optional<std::uint64_t> parse_decimal(std::string_view text) {
  if (text.empty()) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  std::uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

// STOMP 1.0 has no escapes: a CR or LF inside a header would end its line
// and start another, a header the sender wrote for the reader to take as the broker's, and a ':'
// in a name would move where the reader splits it. Each becomes a space.
void append_unescaped(std::string& out, std::string_view text, bool is_name) {
  const std::string_view unsafe = is_name ? std::string_view("\r\n:") : std::string_view("\r\n");
  if (text.find_first_of(unsafe) == std::string_view::npos) {
    out.append(text);
    return;
  }
  for (char c : text) out += unsafe.find(c) == std::string_view::npos ? c : ' ';
}

void append_escaped(std::string& out, std::string_view text, bool escape_cr) {
  // Most values need no escaping: append them whole.
  if (text.find_first_of(escape_cr ? std::string_view("\\\n:\r") : std::string_view("\\\n:")) ==
      std::string_view::npos) {
    out.append(text);
    return;
  }
  for (char c : text) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case ':': out += "\\c"; break;
      case '\r':
        // STOMP 1.1 has no \r escape; a CR there goes out as is.
        if (escape_cr) {
          out += "\\r";
        } else {
          out += c;
        }
        break;
      default: out += c;
    }
  }
}

}  // namespace

std::string_view to_string(stomp_version v) {
  switch (v) {
    case stomp_version::v1_0: return "1.0";
    case stomp_version::v1_1: return "1.1";
    case stomp_version::v1_2: return "1.2";
  }
  return "?";
}

// --- frame --------------------------------------------------------------------------------------

const std::string* frame::find(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return &v;
  }
  return nullptr;
}

std::string_view frame::get(std::string_view name, std::string_view fallback) const {
  const std::string* value = find(name);
  return value ? std::string_view(*value) : fallback;
}

frame& frame::add(std::string name, std::string value) {
  headers.emplace_back(std::move(name), std::move(value));
  return *this;
}

// --- frame_parser -------------------------------------------------------------------------------

frame_parser::frame_parser(frame_limits limits) : limits_(limits) {}

bool frame_parser::fail(std::string message) {
  error_ = std::move(message);
  // The broker answers with receipt-id when the failing frame already asked for a receipt.
  if (const std::string* receipt = current_.find("receipt")) error_receipt_ = *receipt;
  // A dead parser keeps nothing of the input.
  current_ = frame{};
  line_.clear();
  line_.shrink_to_fit();
  return false;
}

bool frame_parser::feed(std::string_view data, std::vector<frame>& out) {
  if (!error_.empty()) return false;
  while (!data.empty()) {
    if (!step(data, out)) return false;
  }
  return true;
}

// One step of the state machine: consumes a prefix of `data` (at least one byte, or the whole of
// it when a line or body goes on past it). False once the parser has failed.
bool frame_parser::step(std::string_view& data, std::vector<frame>& out) {
  switch (state_) {
    case state::between_frames: skip_heart_beat(data); return true;
    case state::command:
    case state::headers: return take_line(data);
    case state::body_by_length: take_counted_body(data); return true;
    case state::trailing_nul: return take_trailing_nul(data, out);
    case state::body_to_nul: return take_body_to_nul(data, out);
  }
  return true;
}

void frame_parser::skip_heart_beat(std::string_view& data) {
  // Heart-beats: bare LFs are skipped here; a CRLF becomes an empty command line.
  if (data.front() == '\n') data.remove_prefix(1);
  else state_ = state::command;
}

bool frame_parser::take_line(std::string_view& data) {
  // A line may hold max_header_length bytes plus the CR of a CRLF.
  const std::size_t line_cap = limits_.max_header_length == std::numeric_limits<std::size_t>::max()
                                   ? limits_.max_header_length
                                   : limits_.max_header_length + 1;
  const std::size_t lf = data.find('\n');
  const std::size_t take = lf == std::string_view::npos ? data.size() : lf;
  if (take > line_cap - line_.size()) {
    return fail((state_ == state::command ? "command line exceeds " : "header line exceeds ") +
                std::to_string(limits_.max_header_length) + " bytes");
  }
  line_.append(data.substr(0, take));
  data.remove_prefix(take);
  if (lf == std::string_view::npos) return true;  // the line goes on in the next feed()
  data.remove_prefix(1);
  return finish_line(line_);
}

void frame_parser::take_counted_body(std::string_view& data) {
  const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(body_remaining_, data.size()));
  current_.body.append(data.substr(0, take));
  data.remove_prefix(take);
  body_remaining_ -= take;
  frame_bytes_ += take;
  if (body_remaining_ == 0) state_ = state::trailing_nul;
}

bool frame_parser::take_trailing_nul(std::string_view& data, std::vector<frame>& out) {
  if (data.front() != '\0') return fail("frame body longer than content-length");
  data.remove_prefix(1);
  emit(out);
  return true;
}

bool frame_parser::take_body_to_nul(std::string_view& data, std::vector<frame>& out) {
  const std::size_t nul = data.find('\0');
  const std::size_t take = nul == std::string_view::npos ? data.size() : nul;
  // Fail as soon as the body cannot fit, without waiting for its NUL.
  if (!room_for(frame_bytes_, take, limits_.max_frame_size)) {
    return fail("frame exceeds " + std::to_string(limits_.max_frame_size) + " bytes");
  }
  current_.body.append(data.substr(0, take));
  data.remove_prefix(take);
  frame_bytes_ += take;
  if (nul == std::string_view::npos) return true;  // the body goes on in the next feed()
  data.remove_prefix(1);
  emit(out);
  return true;
}

void frame_parser::emit(std::vector<frame>& out) {
  out.push_back(std::move(current_));
  current_ = frame{};
  frame_bytes_ = 0;
  state_ = state::between_frames;
}

bool frame_parser::finish_line(std::string_view line) {
  const std::size_t wire_size = line.size() + 1;  // with its LF
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  if (state_ == state::command) {
    if (line.empty()) {  // an EOL between frames: a heart-beat
      line_.clear();
      state_ = state::between_frames;
      return true;
    }
    if (line.size() > limits_.max_header_length) {
      return fail("command line exceeds " + std::to_string(limits_.max_header_length) + " bytes");
    }
    if (!is_known_command(line)) return fail("unknown command " + quoted(line));
    if (!room_for(0, wire_size, limits_.max_frame_size)) {
      return fail("frame exceeds " + std::to_string(limits_.max_frame_size) + " bytes");
    }
    frame_bytes_ = wire_size;
    current_.command.assign(line);
    line_.clear();
    state_ = state::headers;
    return true;
  }

  // state::headers
  if (line.size() > limits_.max_header_length) {
    return fail("header line exceeds " + std::to_string(limits_.max_header_length) + " bytes");
  }
  if (!room_for(frame_bytes_, wire_size, limits_.max_frame_size)) {
    return fail("frame exceeds " + std::to_string(limits_.max_frame_size) + " bytes");
  }
  frame_bytes_ += wire_size;
  if (line.empty()) {
    line_.clear();
    return finish_headers();
  }
  if (current_.headers.size() >= limits_.max_headers) {
    return fail("frame has more than " + std::to_string(limits_.max_headers) + " headers");
  }
  // NUL ends a frame; inside a header it would let a name reach past itself (a key's separator).
  if (line.find('\0') != std::string_view::npos) return fail("header line holds a NUL byte: " + quoted(line));
  // Split at the first colon: values may hold more (1.2 tolerates them, CONNECT passcodes need them).
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return fail("header line without ':': " + quoted(line));
  if (colon == 0) return fail("empty header name in " + quoted(line));
  const std::string_view raw_name = line.substr(0, colon);
  const std::string_view raw_value = line.substr(colon + 1);

  std::string name;
  std::string value;
  if (version_ == stomp_version::v1_0 || is_unescaped_command(current_.command)) {
    name.assign(raw_name);
    value.assign(raw_value);
  } else if (!unescape(raw_name, name, true) || !unescape(raw_value, value, false)) {
    return false;
  }
  current_.headers.emplace_back(std::move(name), std::move(value));
  line_.clear();  // `line` views line_: cleared only once it is no longer read
  return true;
}

bool frame_parser::finish_headers() {
  const std::string* length = current_.find("content-length");  // the first one counts
  if (length == nullptr) {
    state_ = state::body_to_nul;
    return true;
  }
  const std::optional<std::uint64_t> n = parse_decimal(*length);
  if (!n) return fail("invalid content-length " + quoted(*length));
  // Refuse an oversized body before any of it arrives.
  if (*n > std::numeric_limits<std::size_t>::max() ||
      !room_for(frame_bytes_, static_cast<std::size_t>(*n), limits_.max_frame_size)) {
    return fail("frame exceeds " + std::to_string(limits_.max_frame_size) + " bytes");
  }
  body_remaining_ = static_cast<std::size_t>(*n);
  state_ = body_remaining_ == 0 ? state::trailing_nul : state::body_by_length;
  return true;
}

bool frame_parser::unescape(std::string_view in, std::string& out, bool is_name) {
  const char* what = is_name ? "header name" : "header value";
  out.clear();
  // Most headers have no escapes: copy runs between backslashes in bulk.
  std::size_t i = 0;
  for (;;) {
    std::size_t slash = in.find('\\', i);
    out.append(in.substr(i, slash == std::string_view::npos ? std::string_view::npos : slash - i));
    if (slash == std::string_view::npos) return true;
    i = slash;
    if (++i == in.size()) {
      return fail(std::string("invalid escape sequence: lone '\\' at the end of a ") + what);
    }
    switch (in[i]) {
      case 'r': out += '\r'; break;
      case 'n': out += '\n'; break;
      case 'c': out += ':'; break;
      case '\\': out += '\\'; break;
      default:
        return fail("invalid escape sequence " + quoted(in.substr(i - 1, 2)) + " in a " + what);
    }
    ++i;
  }
}

// --- encoding -----------------------------------------------------------------------------------

frame_writer::frame_writer(std::string& out, std::string_view command, stomp_version v, std::size_t size_hint)
    : out_(out),
      escape_(v != stomp_version::v1_0 && !is_unescaped_command(command)),
      escape_cr_(v == stomp_version::v1_2),
      plain_only_(v == stomp_version::v1_0) {
  // Growth stays geometric when `out` collects many frames.
  const std::size_t needed = out.size() + command.size() + size_hint + 3;
  if (needed > out.capacity()) out.reserve(std::max(needed, 2 * out.capacity()));
  out_ += command;
  out_ += '\n';
}

void frame_writer::header(std::string_view name, std::string_view value) {
  if (escape_) {
    append_escaped(out_, name, escape_cr_);
    out_ += ':';
    append_escaped(out_, value, escape_cr_);
  } else if (plain_only_) {
    append_unescaped(out_, name, true);
    out_ += ':';
    append_unescaped(out_, value, false);
  } else {  // CONNECT and CONNECTED in 1.1 and 1.2: their headers are not escaped
    out_ += name;
    out_ += ':';
    out_ += value;
  }
  out_ += '\n';
}

void frame_writer::finish(std::string_view body) {
  out_ += '\n';
  out_ += body;
  out_ += '\0';
}

void encode_to(std::string& out, const frame& f, stomp_version v) {
  std::size_t size = f.body.size();
  for (const auto& [name, value] : f.headers) size += name.size() + value.size() + 2;
  frame_writer w(out, f.command, v, size);
  for (const auto& [name, value] : f.headers) w.header(name, value);
  w.finish(f.body);
}

std::string encode(const frame& f, stomp_version v) {
  std::string out;
  encode_to(out, f, v);
  return out;
}

// --- heart-beats --------------------------------------------------------------------------------

std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_heart_beat(std::string_view value) {
  const std::size_t comma = value.find(',');
  if (comma == std::string_view::npos) return std::nullopt;
  const auto cx = parse_decimal(value.substr(0, comma));
  const auto cy = parse_decimal(value.substr(comma + 1));  // a second comma is not a digit
  if (!cx || !cy) return std::nullopt;
  return std::pair{*cx, *cy};
}

std::uint64_t negotiate_heart_beat(std::uint64_t can_send, std::uint64_t wants_to_receive) {
  if (can_send == 0 || wants_to_receive == 0) return 0;
  return std::max(can_send, wants_to_receive);
}

}  // namespace escrow
