// Unit tests for the STOMP frame codec (xa/frame.cpp).
#include "escrow/frame.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

using namespace std::string_literals;
using escrow::encode;
using escrow::frame;
using escrow::frame_limits;
using escrow::frame_parser;
using escrow::stomp_version;

namespace {

struct parse_result {
  bool ok = false;
  std::vector<frame> frames;
  std::string error;
  std::optional<std::string> receipt;
};

// Feeds `input` in pieces of `chunk` bytes (0: all at once).
parse_result parse(std::string_view input, std::size_t chunk = 0, frame_limits limits = {},
                   stomp_version version = stomp_version::v1_2) {
  frame_parser parser(limits);
  parser.set_version(version);
  parse_result r;
  r.ok = true;
  if (chunk == 0) chunk = input.size() == 0 ? 1 : input.size();
  for (std::size_t i = 0; i < input.size() && r.ok; i += chunk) {
    r.ok = parser.feed(input.substr(i, chunk), r.frames);
  }
  r.error = parser.error();
  r.receipt = parser.error_receipt();
  return r;
}

bool same_frame(const frame& a, const frame& b) {
  return a.command == b.command && a.headers == b.headers && a.body == b.body;
}

bool same_frames(const std::vector<frame>& a, const std::vector<frame>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!same_frame(a[i], b[i])) return false;
  }
  return true;
}

using header_list = std::vector<std::pair<std::string, std::string>>;

}  // namespace

TEST_CASE("to_string names every version") {
  CHECK(escrow::to_string(stomp_version::v1_0) == "1.0");
  CHECK(escrow::to_string(stomp_version::v1_1) == "1.1");
  CHECK(escrow::to_string(stomp_version::v1_2) == "1.2");
}

TEST_CASE("frame find/get/has/add: the first occurrence counts") {
  frame f;
  f.add("a", "1").add("b", "2").add("a", "3");
  REQUIRE(f.headers.size() == 3);
  REQUIRE(f.find("a") != nullptr);
  CHECK(*f.find("a") == "1");
  CHECK(f.find("A") == nullptr);  // case-sensitive
  CHECK(f.find("c") == nullptr);
  CHECK(f.get("b") == "2");
  CHECK(f.get("c", "fallback") == "fallback");
  CHECK(f.get("c").empty());
  CHECK(f.has("a"));
  CHECK_FALSE(f.has("c"));
  CHECK(f.headers[2] == std::pair<std::string, std::string>{"a", "3"});
}

TEST_CASE("a simple frame") {
  const auto r = parse("SEND\ndestination:/queue/a\nreceipt:7\n\nhello\0"s);
  REQUIRE(r.ok);
  REQUIRE(r.frames.size() == 1);
  const frame& f = r.frames[0];
  CHECK(f.command == "SEND");
  CHECK(f.headers == header_list{{"destination", "/queue/a"}, {"receipt", "7"}});
  CHECK(f.body == "hello");
}

TEST_CASE("a NUL byte inside a header line is refused, naming the line") {
  const auto r = parse("UNSUBSCRIBE\ndurable-subscription-name:N\0alice\nreceipt:u1\n\n\0"s);
  CHECK_FALSE(r.ok);
  CHECK(r.error == "header line holds a NUL byte: 'durable-subscription-name:N?alice'");
}

TEST_CASE("an incomplete frame produces nothing yet") {
  frame_parser p;
  std::vector<frame> out;
  CHECK(p.feed("", out));
  CHECK(p.feed("SEND\ndestination:/q\n\nbody", out));
  CHECK(out.empty());
  CHECK(p.feed(std::string_view("\0", 1), out));
  REQUIRE(out.size() == 1);
  CHECK(out[0].body == "body");
  CHECK(p.error().empty());
}

TEST_CASE("every STOMP and XA command is accepted") {
  for (const char* command :
       {"CONNECT", "STOMP", "CONNECTED", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK",
        "BEGIN", "COMMIT", "ABORT", "DISCONNECT", "MESSAGE", "RECEIPT", "ERROR", "XA-START",
        "XA-END", "XA-PREPARE", "XA-COMMIT", "XA-ROLLBACK", "XA-RECOVER", "XA-FORGET"}) {
    CAPTURE(command);
    const auto r = parse(std::string(command) + "\n\n" + '\0');
    REQUIRE(r.ok);
    REQUIRE(r.frames.size() == 1);
    CHECK(r.frames[0].command == command);
  }
}

TEST_CASE("unknown commands are errors") {
  SUBCASE("made up") {
    const auto r = parse("FOO\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error == "unknown command 'FOO'");
  }
  SUBCASE("commands are case-sensitive") {
    const auto r = parse("send\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error == "unknown command 'send'");
  }
  SUBCASE("no trimming of the command line") {
    CHECK_FALSE(parse("SEND \n\n\0"s).ok);
    CHECK_FALSE(parse(" SEND\n\n\0"s).ok);
  }
  SUBCASE("long names are truncated in the message") {
    const std::string name(500, 'X');
    const auto r = parse(name + "\n\n" + '\0');
    CHECK_FALSE(r.ok);
    CHECK(r.error.rfind("unknown command 'XXXX", 0) == 0);
    CHECK(r.error.find("...") != std::string::npos);
    CHECK(r.error.size() < 100);
  }
  SUBCASE("control bytes are not echoed") {
    const auto r = parse("\x01\x02Z\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error == "unknown command '??Z'");
  }
}

TEST_CASE("header lines") {
  SUBCASE("without a colon") {
    const auto r = parse("SEND\ndestination\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error.find("without ':'") != std::string::npos);
    CHECK(r.error.find("'destination'") != std::string::npos);
  }
  SUBCASE("without a colon, long line truncated in the message") {
    const auto r = parse("SEND\n" + std::string(1000, 'h') + "\n\n" + '\0');
    CHECK_FALSE(r.ok);
    CHECK(r.error.find("without ':'") != std::string::npos);
    CHECK(r.error.size() < 120);
  }
  SUBCASE("empty name") {
    const auto r = parse("SEND\n:value\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error.find("empty header name") != std::string::npos);
  }
  SUBCASE("split at the first colon, never trimmed, empty value allowed") {
    const auto r = parse("SEND\nkey:a:b:c\n name : v \nempty:\n\n\0"s);
    REQUIRE(r.ok);
    REQUIRE(r.frames.size() == 1);
    CHECK(r.frames[0].headers == header_list{{"key", "a:b:c"}, {" name ", " v "}, {"empty", ""}});
  }
  SUBCASE("repeated headers are kept in order, the first wins") {
    const auto r = parse("MESSAGE\nfoo:1\nbar:x\nfoo:2\n\n\0"s);
    REQUIRE(r.ok);
    const frame& f = r.frames.at(0);
    CHECK(f.headers == header_list{{"foo", "1"}, {"bar", "x"}, {"foo", "2"}});
    CHECK(f.get("foo") == "1");
  }
}

TEST_CASE("escaping") {
  SUBCASE("1.2 decodes \\r \\n \\c \\\\ in names and values") {
    const auto r = parse("SEND\na\\cb\\\\:x\\ny\\rz\\c\\\\\n\n\0"s);
    REQUIRE(r.ok);
    CHECK(r.frames.at(0).headers == header_list{{"a:b\\", "x\ny\rz:\\"}});
  }
  SUBCASE("1.1 decodes too") {
    const auto r = parse("SEND\nk:a\\nb\\cc\\\\d\n\n\0"s, 0, {}, stomp_version::v1_1);
    REQUIRE(r.ok);
    CHECK(r.frames.at(0).headers == header_list{{"k", "a\nb:c\\d"}});
  }
  SUBCASE("an unknown escape is an error") {
    const auto r = parse("SEND\nk:a\\tb\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error.rfind("invalid escape sequence", 0) == 0);
    CHECK(r.error.find("\\t") != std::string::npos);
  }
  SUBCASE("an unknown escape in a name is an error") {
    const auto r = parse("SEND\nk\\x:v\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error.rfind("invalid escape sequence", 0) == 0);
  }
  SUBCASE("a lone trailing backslash is an error") {
    const auto r = parse("SEND\nk:abc\\\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error.rfind("invalid escape sequence", 0) == 0);
  }
  SUBCASE("a lone backslash with CRLF: the CR is stripped first") {
    const auto r = parse("SEND\r\nk:abc\\\r\n\r\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error.rfind("invalid escape sequence", 0) == 0);
  }
  SUBCASE("a raw colon in a 1.2 value is accepted") {
    const auto r = parse("SEND\nk:a:b\n\n\0"s);
    REQUIRE(r.ok);
    CHECK(r.frames.at(0).get("k") == "a:b");
  }
  SUBCASE("CONNECT, STOMP and CONNECTED headers are literal") {
    for (const char* command : {"CONNECT", "STOMP", "CONNECTED"}) {
      CAPTURE(command);
      const auto r = parse(std::string(command) + "\nlogin:a\\cb\npasscode:p:a\\s\\t\\\n\n" + '\0');
      REQUIRE(r.ok);
      CHECK(r.frames.at(0).headers == header_list{{"login", "a\\cb"}, {"passcode", "p:a\\s\\t\\"}});
    }
  }
  SUBCASE("1.0: nothing is unescaped, invalid escapes pass") {
    const auto r = parse("SEND\nk\\c:a\\nb\\t\\\n\n\0"s, 0, {}, stomp_version::v1_0);
    REQUIRE(r.ok);
    CHECK(r.frames.at(0).headers == header_list{{"k\\c", "a\\nb\\t\\"}});
  }
  SUBCASE("the version can change between frames") {
    frame_parser p;
    std::vector<frame> out;
    REQUIRE(p.feed("SEND\nk:a\\nb\n\n\0"s, out));
    p.set_version(stomp_version::v1_0);
    REQUIRE(p.feed("SEND\nk:a\\nb\n\n\0"s, out));
    REQUIRE(out.size() == 2);
    CHECK(out[0].get("k") == "a\nb");
    CHECK(out[1].get("k") == "a\\nb");
  }
}

TEST_CASE("encoding") {
  frame f;
  f.command = "MESSAGE";
  f.add("a:b", "x\r\ny:\\z").add("plain", "v");
  f.body = "bo\0dy"s;

  SUBCASE("1.2 escapes CR, LF, colon and backslash") {
    CHECK(encode(f) == "MESSAGE\na\\cb:x\\r\\ny\\c\\\\z\nplain:v\n\nbo\0dy\0"s);
    CHECK(encode(f, stomp_version::v1_2) == encode(f));
  }
  SUBCASE("1.1 leaves CR as is") {
    CHECK(encode(f, stomp_version::v1_1) == "MESSAGE\na\\cb:x\r\\ny\\c\\\\z\nplain:v\n\nbo\0dy\0"s);
  }
  SUBCASE("1.0 has no escapes: a CR or LF, and a colon in a name, go out as spaces (never a line of their own)") {
    CHECK(encode(f, stomp_version::v1_0) == "MESSAGE\na b:x  y:\\z\nplain:v\n\nbo\0dy\0"s);
  }
  SUBCASE("CONNECT, STOMP and CONNECTED are not escaped") {
    for (const char* command : {"CONNECT", "STOMP", "CONNECTED"}) {
      frame c;
      c.command = command;
      c.add("passcode", "a:b\\c");
      CHECK(encode(c) == std::string(command) + "\npasscode:a:b\\c\n\n" + '\0');
    }
  }
  SUBCASE("no content-length is added") {
    CHECK(encode(f).find("content-length") == std::string::npos);
  }
  SUBCASE("encode_to appends") {
    std::string out = "prefix";
    escrow::encode_to(out, f);
    CHECK(out == "prefix" + encode(f));
  }
  SUBCASE("1.2 round trip, including a trailing CR in a value") {
    frame g = f;
    g.add("cr", "end\r").add("content-length", std::to_string(g.body.size()));
    const auto r = parse(encode(g));
    REQUIRE(r.ok);
    REQUIRE(r.frames.size() == 1);
    CHECK(same_frame(r.frames[0], g));
  }
  SUBCASE("CONNECT round trip keeps literal values") {
    frame c;
    c.command = "CONNECT";
    c.add("accept-version", "1.2").add("login", "u\\ser").add("passcode", "p:w\\nd");
    const auto r = parse(encode(c));
    REQUIRE(r.ok);
    CHECK(same_frame(r.frames.at(0), c));
  }
}

TEST_CASE("bodies") {
  SUBCASE("content-length reads NULs") {
    const auto r = parse("SEND\ncontent-length:5\n\na\0b\0c\0"s);
    REQUIRE(r.ok);
    REQUIRE(r.frames.size() == 1);
    CHECK(r.frames[0].body == "a\0b\0c"s);
  }
  SUBCASE("content-length:0 is an empty body") {
    const auto r = parse("SEND\ncontent-length:0\n\n\0SEND\n\nx\0"s);
    REQUIRE(r.ok);
    REQUIRE(r.frames.size() == 2);
    CHECK(r.frames[0].body.empty());
    CHECK(r.frames[1].body == "x");
  }
  SUBCASE("leading zeros are still decimal") {
    const auto r = parse("SEND\ncontent-length:003\n\nabc\0"s);
    REQUIRE(r.ok);
    CHECK(r.frames.at(0).body == "abc");
  }
  SUBCASE("without content-length the body ends at the first NUL") {
    const auto r = parse("SEND\n\nab\0SEND\n\ncd\0"s);
    REQUIRE(r.ok);
    REQUIRE(r.frames.size() == 2);
    CHECK(r.frames[0].body == "ab");
    CHECK(r.frames[1].body == "cd");
  }
  SUBCASE("only the first content-length counts") {
    const auto r = parse("SEND\ncontent-length:2\ncontent-length:5\n\nab\0"s);
    REQUIRE(r.ok);
    CHECK(r.frames.at(0).body == "ab");
    CHECK(r.frames.at(0).headers.size() == 2);
  }
  SUBCASE("an invalid first content-length fails even if a later one is valid") {
    const auto r = parse("SEND\ncontent-length:x\ncontent-length:1\n\na\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error.rfind("invalid content-length", 0) == 0);
  }
  SUBCASE("invalid content-length values") {
    for (const char* value : {"", "-1", "+1", " 1", "1 ", "0x10", "abc", "1.5", "1e3",
                              "18446744073709551616", "99999999999999999999999"}) {
      CAPTURE(value);
      const auto r = parse("SEND\ncontent-length:" + std::string(value) + "\n\n" + '\0');
      CHECK_FALSE(r.ok);
      CHECK(r.error.rfind("invalid content-length", 0) == 0);
    }
  }
  SUBCASE("content-length is checked after unescaping") {
    const auto r = parse("SEND\ncontent-\\\\length:1\ncontent-length:2\n\nab\0"s);
    REQUIRE(r.ok);
    CHECK(r.frames.at(0).body == "ab");
  }
  SUBCASE("no NUL after the content-length body") {
    const auto r = parse("SEND\ncontent-length:2\n\nabc\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error == "frame body longer than content-length");
    CHECK(r.frames.empty());
  }
  SUBCASE("a big body in one piece and byte by byte") {
    std::string body(300000, 'x');
    body[1000] = '\n';
    const std::string wire = "SEND\n\n" + body + '\0';
    for (std::size_t chunk : {std::size_t{0}, std::size_t{1}, std::size_t{4096}}) {
      CAPTURE(chunk);
      const auto r = parse(wire, chunk);
      REQUIRE(r.ok);
      REQUIRE(r.frames.size() == 1);
      CHECK(r.frames[0].body == body);
    }
  }
}

TEST_CASE("line endings and heart-beats") {
  SUBCASE("CRLF everywhere") {
    const auto r = parse("\r\nSEND\r\ndestination:/q\r\nk:v\r\n\r\nbody\0\r\n"s);
    REQUIRE(r.ok);
    REQUIRE(r.frames.size() == 1);
    CHECK(r.frames[0].command == "SEND");
    CHECK(r.frames[0].headers == header_list{{"destination", "/q"}, {"k", "v"}});
    CHECK(r.frames[0].body == "body");
  }
  SUBCASE("only one CR is stripped") {
    const auto r = parse("SEND\nk:v\r\r\n\n\0"s);
    REQUIRE(r.ok);
    CHECK(r.frames.at(0).get("k") == "v\r");
  }
  SUBCASE("heart-beats alone produce no frames and no error") {
    const auto r = parse("\n\r\n\n\r\n\r\n\n"s, 1);
    CHECK(r.ok);
    CHECK(r.frames.empty());
    CHECK(r.error.empty());
  }
  SUBCASE("many frames and heart-beats in one feed") {
    const auto r =
        parse("\n\r\nCONNECT\naccept-version:1.2\n\n\0\n\nSEND\nd:1\n\none\0\r\n\r\nSEND\ncontent-length:3\n\nt\0o\0\nDISCONNECT\r\nreceipt:9\r\n\r\n\0\n"s);
    REQUIRE(r.ok);
    REQUIRE(r.frames.size() == 4);
    CHECK(r.frames[0].command == "CONNECT");
    CHECK(r.frames[1].body == "one");
    CHECK(r.frames[2].body == "t\0o"s);
    CHECK(r.frames[3].command == "DISCONNECT");
    CHECK(r.frames[3].get("receipt") == "9");
  }
  SUBCASE("a lone CR before a command is not an EOL") {
    const auto r = parse("\rSEND\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.error == "unknown command '?SEND'");
  }
}

TEST_CASE("any split of the stream gives identical frames") {
  std::string wire = "\r\n\n";
  {
    frame f;
    f.command = "SEND";
    f.add("destination", "/queue/a").add("k:ey", "v\nal\\ue\r").add("k:ey", "second");
    f.body = "payload with \n newlines";
    wire += encode(f) + "\n";
  }
  wire += "SEND\r\ncontent-length:6\r\n\r\n\0ab\0cd\0\r\n"s;
  wire += "CONNECT\r\npasscode:a:b\\c\r\n\r\n\0"s;
  wire += "ACK\nid:1\ncontent-length:0\n\n\0"s;
  wire += "XA-PREPARE\nxid:abc\n\n\0\n\n"s;

  const auto whole = parse(wire);
  REQUIRE(whole.ok);
  REQUIRE(whole.frames.size() == 5);
  CHECK(whole.frames[0].get("k:ey") == "v\nal\\ue\r");
  CHECK(whole.frames[1].body == "\0ab\0cd"s);
  CHECK(whole.frames[2].get("passcode") == "a:b\\c");
  CHECK(whole.frames[3].command == "ACK");
  CHECK(whole.frames[4].command == "XA-PREPARE");

  SUBCASE("one byte at a time") {
    const auto bytes = parse(wire, 1);
    REQUIRE(bytes.ok);
    CHECK(same_frames(bytes.frames, whole.frames));
  }
  SUBCASE("fixed chunk sizes") {
    for (std::size_t chunk = 2; chunk < 40; ++chunk) {
      CAPTURE(chunk);
      const auto r = parse(wire, chunk);
      REQUIRE(r.ok);
      CHECK(same_frames(r.frames, whole.frames));
    }
  }
  SUBCASE("random splits") {
    std::mt19937 rng(12345);
    for (int round = 0; round < 200; ++round) {
      frame_parser p;
      std::vector<frame> out;
      std::size_t pos = 0;
      while (pos < wire.size()) {
        const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 25)(rng);
        REQUIRE(p.feed(std::string_view(wire).substr(pos, n), out));
        pos += n;
      }
      CHECK(same_frames(out, whole.frames));
    }
  }
}

TEST_CASE("random streams: the outcome never depends on how the input is split") {
  // Mostly well-formed frames built from pieces that hit every state, with random junk mixed in,
  // under small limits so that every limit is reached too.
  const std::vector<std::string> commands = {"SEND\n", "MESSAGE\r\n", "CONNECT\n", "FOO\n", "\r"};
  const std::vector<std::string> headers = {
      "k:v\n", "a\\cb:c\\nd\r\n", "k:\\t\n", "receipt:r\n", "content-length:2\n",
      "content-length:0\n", "content-length:x\n", "nocolon\n", ":v\n", "long:xxxxxxxxxxxxxxxxxxxx\n"};
  const std::vector<std::string> bodies = {"", "ab", "a\0b"s, "\n", std::string(50, 'x')};
  const std::vector<std::string> junk = {"\n", "\r\n", "\r", "\0"s, ":", "\\", "zz"};
  frame_limits limits;
  limits.max_frame_size = 64;
  limits.max_headers = 3;
  limits.max_header_length = 24;
  std::mt19937 rng(4242);
  const auto one_of = [&](const std::vector<std::string>& v) -> const std::string& {
    return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
  };
  const auto chance = [&](int percent) {
    return std::uniform_int_distribution<int>(0, 99)(rng) < percent;
  };
  int ok_runs = 0;
  int failed_runs = 0;
  std::size_t frames = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string wire;
    const int count = std::uniform_int_distribution<int>(1, 6)(rng);
    for (int i = 0; i < count; ++i) {
      if (chance(30)) wire += one_of(junk);
      wire += one_of(commands);
      const int n = std::uniform_int_distribution<int>(0, 4)(rng);
      for (int h = 0; h < n; ++h) wire += chance(75) ? headers[h % 2 == 0 ? 0 : 3] : one_of(headers);
      wire += chance(50) ? "\n" : "\r\n";
      wire += one_of(bodies);
      wire += '\0';
    }
    const auto whole = parse(wire, 0, limits);
    const auto bytes = parse(wire, 1, limits);
    const auto split = parse(wire, std::uniform_int_distribution<std::size_t>(2, 9)(rng), limits);
    CAPTURE(wire);
    for (const auto* r : {&bytes, &split}) {
      CHECK(r->ok == whole.ok);
      CHECK(r->error == whole.error);
      CHECK(r->receipt == whole.receipt);
      CHECK(same_frames(r->frames, whole.frames));
    }
    (whole.ok ? ok_runs : failed_runs)++;
    frames += whole.frames.size();
  }
  // The generator must exercise both outcomes for the comparison to mean anything.
  CHECK(ok_runs > 60);
  CHECK(failed_runs > 100);
  CHECK(frames > 500);
}

TEST_CASE("limits: header line length") {
  frame_limits limits;
  limits.max_header_length = 16;
  const std::string exact = "k:" + std::string(14, 'v');  // 16 bytes
  const std::string over = "k:" + std::string(15, 'v');   // 17 bytes

  SUBCASE("exactly at the limit passes, LF or CRLF, whole or byte by byte") {
    for (std::size_t chunk : {std::size_t{0}, std::size_t{1}}) {
      CHECK(parse("SEND\n" + exact + "\n\n" + '\0', chunk, limits).ok);
      CHECK(parse("SEND\r\n" + exact + "\r\n\r\n" + '\0', chunk, limits).ok);
    }
  }
  SUBCASE("one over fails") {
    for (std::size_t chunk : {std::size_t{0}, std::size_t{1}}) {
      for (const char* eol : {"\n", "\r\n"}) {
        const auto r = parse("SEND\n" + over + eol + "\n" + '\0', chunk, limits);
        CHECK_FALSE(r.ok);
        CHECK(r.error == "header line exceeds 16 bytes");
      }
    }
  }
  SUBCASE("an endless line fails before its end arrives") {
    frame_parser p(limits);
    std::vector<frame> out;
    REQUIRE(p.feed("SEND\n", out));
    CHECK(p.feed(std::string(17, 'a'), out));  // could still be 16 bytes + CR
    CHECK_FALSE(p.feed("a", out));
    CHECK(p.error() == "header line exceeds 16 bytes");
  }
  SUBCASE("the command line is bounded too") {
    limits.max_header_length = 4;
    CHECK(parse("SEND\n\n\0"s, 0, limits).ok);
    CHECK(parse("SEND\r\n\n\0"s, 1, limits).ok);
    const auto r = parse("ABORT\n\n\0"s, 0, limits);
    CHECK_FALSE(r.ok);
    CHECK(r.error == "command line exceeds 4 bytes");
    const auto endless = parse(std::string(100, 'A'), 1, limits);
    CHECK_FALSE(endless.ok);
    CHECK(endless.error == "command line exceeds 4 bytes");
  }
}

TEST_CASE("limits: header count") {
  frame_limits limits;
  limits.max_headers = 3;
  CHECK(parse("SEND\na:1\nb:2\nc:3\n\n\0"s, 0, limits).ok);
  const auto r = parse("SEND\na:1\nb:2\nc:3\nd:4\n\n\0"s, 0, limits);
  CHECK_FALSE(r.ok);
  CHECK(r.error == "frame has more than 3 headers");
  CHECK(parse("SEND\n\n\0"s, 0, frame_limits{1024, 0, 1024}).ok);
  CHECK_FALSE(parse("SEND\na:1\n\n\0"s, 0, frame_limits{1024, 0, 1024}).ok);
}

TEST_CASE("limits: frame size counts every wire byte through the NUL") {
  frame f;
  f.command = "SEND";
  f.add("destination", "/queue/a");
  f.body = std::string(100, 'b');
  const std::string to_nul = encode(f);
  frame g = f;
  g.add("content-length", "100");
  const std::string by_length = encode(g);

  for (const std::string* wire : {&to_nul, &by_length}) {
    frame_limits limits;
    limits.max_frame_size = wire->size();
    for (std::size_t chunk : {std::size_t{0}, std::size_t{1}, std::size_t{7}}) {
      CAPTURE(chunk);
      const auto ok = parse(*wire + *wire, chunk, limits);  // the count restarts per frame
      CHECK(ok.ok);
      CHECK(ok.frames.size() == 2);
      limits.max_frame_size = wire->size() - 1;
      const auto over = parse(*wire, chunk, limits);
      CHECK_FALSE(over.ok);
      CHECK(over.error == "frame exceeds " + std::to_string(wire->size() - 1) + " bytes");
      limits.max_frame_size = wire->size();
    }
  }

  SUBCASE("heart-beats before a frame do not count") {
    frame_limits limits;
    limits.max_frame_size = to_nul.size();
    CHECK(parse("\r\n\n\r\n" + to_nul, 1, limits).ok);
  }
  SUBCASE("a declared content-length over the limit fails at once") {
    frame_limits limits;
    limits.max_frame_size = 1000;
    frame_parser p(limits);
    std::vector<frame> out;
    CHECK_FALSE(p.feed("SEND\ncontent-length:1000\n\n", out));
    CHECK(p.error() == "frame exceeds 1000 bytes");
    frame_parser q(limits);
    CHECK_FALSE(q.feed("SEND\ncontent-length:18446744073709551615\n\n", out));
    CHECK(q.error() == "frame exceeds 1000 bytes");
  }
  SUBCASE("a body without NUL fails as soon as it cannot fit") {
    frame_limits limits;
    limits.max_frame_size = 100;
    frame_parser p(limits);
    std::vector<frame> out;
    REQUIRE(p.feed("SEND\n\n", out));                   // 6 bytes
    CHECK(p.feed(std::string(93, 'x'), out));           // 99: the NUL would make 100
    CHECK_FALSE(p.feed("x", out));                      // 100 with no room for the NUL
    CHECK(p.error() == "frame exceeds 100 bytes");
  }
  SUBCASE("headers count towards the frame size") {
    frame_limits limits;
    limits.max_frame_size = 20;
    // 5 + 13 + 1 + 1 = 20 bytes
    CHECK(parse("SEND\nk:" + std::string(10, 'v') + "\n\n" + '\0', 0, limits).ok);
    const auto r = parse("SEND\nk:" + std::string(11, 'v') + "\n\n" + '\0', 0, limits);
    CHECK_FALSE(r.ok);
    CHECK(r.error == "frame exceeds 20 bytes");
  }
  SUBCASE("a flood of header lines fails within the frame limit") {
    frame_limits limits;
    limits.max_frame_size = 1000;
    limits.max_headers = 1000000;
    frame_parser p(limits);
    std::vector<frame> out;
    REQUIRE(p.feed("SEND\n", out));
    bool ok = true;
    int lines = 0;
    while (ok && lines < 10000) {
      ok = p.feed("a:b\n", out);
      ++lines;
    }
    CHECK_FALSE(ok);
    CHECK(lines < 300);
    CHECK(p.error() == "frame exceeds 1000 bytes");
  }
}

TEST_CASE("error_receipt") {
  SUBCASE("an error after the headers reports the receipt") {
    const auto r = parse("SEND\nreceipt:r-1\ncontent-length:x\n\n\0"s);
    CHECK_FALSE(r.ok);
    REQUIRE(r.receipt.has_value());
    CHECK(*r.receipt == "r-1");
  }
  SUBCASE("a body error reports it, unescaped, first one") {
    const auto r = parse("SEND\nreceipt:r\\c2\nreceipt:other\ncontent-length:1\n\nab\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.receipt == std::optional<std::string>("r:2"));
  }
  SUBCASE("a header line error reports the receipt seen so far") {
    const auto r = parse("SEND\nreceipt:r-3\nbroken\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.receipt == std::optional<std::string>("r-3"));
  }
  SUBCASE("a receipt after the failing line is not seen") {
    const auto r = parse("SEND\nbroken\nreceipt:r-4\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK_FALSE(r.receipt.has_value());
  }
  SUBCASE("a receipt of an earlier, complete frame does not leak") {
    const auto r = parse("SEND\nreceipt:r-5\n\n\0FOO\n\n\0"s);
    CHECK_FALSE(r.ok);
    CHECK(r.frames.size() == 1);
    CHECK_FALSE(r.receipt.has_value());
  }
  SUBCASE("no error, no receipt") {
    const auto r = parse("SEND\nreceipt:r-6\n\n\0"s);
    CHECK(r.ok);
    CHECK_FALSE(r.receipt.has_value());
  }
}

TEST_CASE("a parser is dead after an error") {
  frame_parser p;
  std::vector<frame> out;
  REQUIRE(p.feed("SEND\n\nok\0"s, out));
  CHECK_FALSE(p.feed("BOGUS\n\n\0SEND\n\nlater\0"s, out));
  const std::string error = p.error();
  CHECK(error == "unknown command 'BOGUS'");
  CHECK_FALSE(p.feed("SEND\n\nagain\0"s, out));
  CHECK_FALSE(p.feed("", out));
  CHECK(p.error() == error);
  REQUIRE(out.size() == 1);
  CHECK(out[0].body == "ok");
}

TEST_CASE("parse_heart_beat") {
  using hb = std::pair<std::uint64_t, std::uint64_t>;
  CHECK(escrow::parse_heart_beat("0,0") == hb{0, 0});
  CHECK(escrow::parse_heart_beat("1000,2500") == hb{1000, 2500});
  CHECK(escrow::parse_heart_beat("007,10") == hb{7, 10});
  CHECK(escrow::parse_heart_beat("18446744073709551615,0") == hb{UINT64_MAX, 0});
  for (const char* bad : {"", ",", "1,", ",1", "1", "1,2,3", " 1,2", "1, 2", "1,2 ", "-1,2",
                          "+1,2", "a,b", "1;2", "18446744073709551616,0", "0,99999999999999999999",
                          "1.5,2"}) {
    CAPTURE(bad);
    CHECK_FALSE(escrow::parse_heart_beat(bad).has_value());
  }
}

TEST_CASE("negotiate_heart_beat") {
  CHECK(escrow::negotiate_heart_beat(0, 0) == 0);
  CHECK(escrow::negotiate_heart_beat(0, 5000) == 0);
  CHECK(escrow::negotiate_heart_beat(5000, 0) == 0);
  CHECK(escrow::negotiate_heart_beat(1000, 2000) == 2000);
  CHECK(escrow::negotiate_heart_beat(3000, 2000) == 3000);
  CHECK(escrow::negotiate_heart_beat(7, 7) == 7);
}
