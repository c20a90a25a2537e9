// Batch encoding and the byte codings under it: pure functions, no disk.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "escrow/storage/batch.h"
#include "escrow/storage/coding.h"

using namespace escrow::storage;

namespace {

struct decoded_op {
  batch::op o;
  table t;
  std::string key;
  std::string value;
};

bool decode_all(std::string_view rep, std::vector<decoded_op>& out) {
  out.clear();
  return batch::decode(rep, [&](batch::op o, table t, std::string_view k, std::string_view v) {
    out.push_back({o, t, std::string(k), std::string(v)});
  });
}

std::string u32_bytes(std::uint32_t v) {
  std::string s;
  put_u32(s, v);
  return s;
}

std::string u64_bytes(std::uint64_t v) {
  std::string s;
  put_u64(s, v);
  return s;
}

}  // namespace

TEST_SUITE("storage/batch") {
  TEST_CASE("a new batch is empty and decodes to nothing") {
    batch b;
    CHECK(b.empty());
    CHECK(b.byte_size() == 0);
    std::vector<decoded_op> ops;
    CHECK(decode_all(b.rep(), ops));
    CHECK(ops.empty());
  }

  TEST_CASE("put, erase and release_message round trip in order") {
    const std::string nul_value("a\0b\0", 4);
    const std::string big_value(100000, 'x');
    batch b;
    b.put(table::queues, "orders", "record");
    b.erase(table::entries, "gone");
    b.release_message("12345678");
    b.put(table::messages, std::string_view("k\0y", 3), nul_value);
    b.put(table::meta, "empty-value", "");
    b.put(table::message_refs, "big", big_value);
    b.erase(table::meta, "");
    CHECK_FALSE(b.empty());

    std::vector<decoded_op> ops;
    REQUIRE(decode_all(b.rep(), ops));
    REQUIRE(ops.size() == 7);

    CHECK(ops[0].o == batch::op::put);
    CHECK(ops[0].t == table::queues);
    CHECK(ops[0].key == "orders");
    CHECK(ops[0].value == "record");

    CHECK(ops[1].o == batch::op::erase);
    CHECK(ops[1].t == table::entries);
    CHECK(ops[1].key == "gone");
    CHECK(ops[1].value.empty());

    CHECK(ops[2].o == batch::op::release_message);
    CHECK(ops[2].t == table::messages);
    CHECK(ops[2].key == "12345678");

    CHECK(ops[3].o == batch::op::put);
    CHECK(ops[3].t == table::messages);
    CHECK(ops[3].key == std::string("k\0y", 3));
    CHECK(ops[3].value == nul_value);

    CHECK(ops[4].key == "empty-value");
    CHECK(ops[4].value.empty());

    CHECK(ops[5].t == table::message_refs);
    CHECK(ops[5].value == big_value);

    CHECK(ops[6].o == batch::op::erase);
    CHECK(ops[6].t == table::meta);
    CHECK(ops[6].key.empty());
  }

  TEST_CASE("the byte layout is op, table, varint key, varint value") {
    batch b;
    b.put(table::entries, "ab", "xyz");
    b.erase(table::queues, "q");
    b.release_message("m");
    const std::string expected = std::string("\x01\x04\x02" "ab" "\x03" "xyz", 9) +
                                 std::string("\x02\x01\x01" "q", 4) + std::string("\x03\x02\x01" "m", 4);
    CHECK(b.rep() == expected);
    CHECK(b.byte_size() == expected.size());
  }

  TEST_CASE("append concatenates operations") {
    batch a, b;
    a.put(table::meta, "k1", "v1");
    b.erase(table::meta, "k2");
    b.release_message("m");
    a.append(b);
    std::vector<decoded_op> ops;
    REQUIRE(decode_all(a.rep(), ops));
    REQUIRE(ops.size() == 3);
    CHECK(ops[0].key == "k1");
    CHECK(ops[1].key == "k2");
    CHECK(ops[2].o == batch::op::release_message);
  }

  TEST_CASE("every truncation of a valid batch is rejected") {
    batch b;
    b.put(table::entries, "key", std::string(300, 'v'));  // 300 needs a two-byte varint
    b.erase(table::queues, "q");
    b.release_message("12345678");
    const std::string& rep = b.rep();
    // Cutting exactly at an operation boundary leaves a valid, shorter batch.
    const std::size_t first_end = 2 + 1 + 3 + 2 + 300;
    const std::size_t second_end = first_end + 2 + 1 + 1;
    for (std::size_t n = 1; n < rep.size(); ++n) {
      if (n == first_end || n == second_end) continue;
      std::vector<decoded_op> ops;
      INFO("length ", n);
      CHECK_FALSE(decode_all(std::string_view(rep).substr(0, n), ops));
    }
    std::vector<decoded_op> ops;
    CHECK(decode_all(std::string_view(rep).substr(0, first_end), ops));
    CHECK(ops.size() == 1);
    CHECK(decode_all(std::string_view(rep).substr(0, second_end), ops));
    CHECK(ops.size() == 2);
  }

  TEST_CASE("malformed bytes are rejected") {
    std::vector<decoded_op> ops;
    SUBCASE("unknown op") {
      CHECK_FALSE(decode_all(std::string("\x00\x01\x00", 3), ops));
      CHECK_FALSE(decode_all(std::string("\x08\x01\x00", 3), ops));
      CHECK_FALSE(decode_all(std::string("\xff\x01\x00", 3), ops));
    }
    SUBCASE("unknown table") {
      CHECK_FALSE(decode_all(std::string("\x02\x0b\x00", 3), ops));
      CHECK_FALSE(decode_all(std::string("\x02\xff\x00", 3), ops));
    }
    SUBCASE("lone op byte") { CHECK_FALSE(decode_all(std::string("\x01", 1), ops)); }
    SUBCASE("key length beyond the end") { CHECK_FALSE(decode_all(std::string("\x02\x01\x05" "abc", 6), ops)); }
    SUBCASE("varint that never ends") {
      CHECK_FALSE(decode_all(std::string("\x02\x01\x80\x80\x80", 5), ops));
    }
    SUBCASE("put without a value") { CHECK_FALSE(decode_all(std::string("\x01\x01\x01" "k", 4), ops)); }
    SUBCASE("huge length") {
      std::string rep("\x01\x01", 2);
      put_varint(rep, std::numeric_limits<std::uint64_t>::max());
      rep += "k";
      CHECK_FALSE(decode_all(rep, ops));
    }
    SUBCASE("valid batch followed by garbage") {
      batch b;
      b.put(table::meta, "k", "v");
      CHECK_FALSE(decode_all(b.rep() + "\x07", ops));
    }
  }

  TEST_CASE("table names") {
    CHECK(std::string(table_name(table::meta)) == "meta");
    CHECK(std::string(table_name(table::queues)) == "queues");
    CHECK(std::string(table_name(table::messages)) == "messages");
    CHECK(std::string(table_name(table::message_refs)) == "message_refs");
    CHECK(std::string(table_name(table::entries)) == "entries");
  }
}

TEST_SUITE("storage/coding") {
  TEST_CASE("integers are big-endian") {
    CHECK(u32_bytes(0x01020304) == std::string("\x01\x02\x03\x04", 4));
    CHECK(u64_bytes(0x0102030405060708ull) == std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  }

  TEST_CASE("encoded byte order equals numeric order") {
    const std::vector<std::uint64_t> values = {0,          1,          2,          0x7f,        0x80,
                                               0xff,       0x100,      0x1234,     0xfffe,      0xffff,
                                               0x10000,    0xffffff,   0x1000000,  0x7fffffff,  0x80000000,
                                               0xfffffffe, 0xffffffff, 0x100000000, 0xffffffffffull,
                                               0x8000000000000000ull, 0xfffffffffffffffeull,
                                               0xffffffffffffffffull};
    for (std::size_t i = 0; i < values.size(); ++i) {
      for (std::size_t j = 0; j < values.size(); ++j) {
        const std::uint64_t a = values[i], b = values[j];
        INFO(a, " vs ", b);
        CHECK((u64_bytes(a) < u64_bytes(b)) == (a < b));
        CHECK((u64_bytes(a) == u64_bytes(b)) == (a == b));
        if (a <= 0xffffffff && b <= 0xffffffff) {
          const auto a32 = static_cast<std::uint32_t>(a), b32 = static_cast<std::uint32_t>(b);
          CHECK((u32_bytes(a32) < u32_bytes(b32)) == (a32 < b32));
        }
      }
    }
  }

  TEST_CASE("u32 and u64 round trip and reject short input") {
    for (std::uint32_t v : {0u, 1u, 0x80u, 0xdeadbeefu, 0xffffffffu}) {
      std::string s = u32_bytes(v) + "tail";
      std::string_view in = s;
      std::uint32_t out = 0;
      REQUIRE(get_u32(in, out));
      CHECK(out == v);
      CHECK(in == "tail");
    }
    for (std::uint64_t v : {0ull, 1ull, 0x0123456789abcdefull, 0xffffffffffffffffull}) {
      std::string s = u64_bytes(v);
      std::string_view in = s;
      std::uint64_t out = 0;
      REQUIRE(get_u64(in, out));
      CHECK(out == v);
      CHECK(in.empty());
    }
    std::string_view short_in("\x01\x02\x03", 3);
    std::uint32_t v32 = 0;
    CHECK_FALSE(get_u32(short_in, v32));
    CHECK(short_in.size() == 3);
    std::string_view short_in64("\x01\x02\x03\x04\x05\x06\x07", 7);
    std::uint64_t v64 = 0;
    CHECK_FALSE(get_u64(short_in64, v64));
    CHECK(short_in64.size() == 7);
  }

  TEST_CASE("varints round trip") {
    const std::vector<std::uint64_t> values = {0,          1,           0x7f,       0x80,
                                               0x3fff,     0x4000,      300,        0xffffffff,
                                               1ull << 56, (1ull << 63) - 1, 1ull << 63,
                                               0xffffffffffffffffull};
    std::string all;
    for (auto v : values) {
      std::string s;
      put_varint(s, v);
      std::string_view in = s;
      std::uint64_t out = 0;
      REQUIRE(get_varint(in, out));
      CHECK(out == v);
      CHECK(in.empty());
      put_varint(all, v);
    }
    std::string_view in = all;
    for (auto v : values) {
      std::uint64_t out = 0;
      REQUIRE(get_varint(in, out));
      CHECK(out == v);
    }
    CHECK(in.empty());
  }

  TEST_CASE("varint lengths") {
    auto length = [](std::uint64_t v) {
      std::string s;
      put_varint(s, v);
      return s.size();
    };
    CHECK(length(0) == 1);
    CHECK(length(0x7f) == 1);
    CHECK(length(0x80) == 2);
    CHECK(length(0x3fff) == 2);
    CHECK(length(0x4000) == 3);
    CHECK(length(0xffffffffffffffffull) == 10);
  }

  TEST_CASE("truncated varints are rejected") {
    std::string s;
    put_varint(s, 0xffffffffffffull);
    for (std::size_t n = 0; n < s.size(); ++n) {
      std::string_view in = std::string_view(s).substr(0, n);
      std::uint64_t out = 0;
      CHECK_FALSE(get_varint(in, out));
    }
    std::string endless(11, '\x80');
    std::string_view in = endless;
    std::uint64_t out = 0;
    CHECK_FALSE(get_varint(in, out));
  }

  TEST_CASE("strings round trip, including NUL bytes and empty strings") {
    const std::vector<std::string> values = {"", "a", std::string("\0\0x\0", 4), std::string(127, 'y'),
                                             std::string(128, 'z'), std::string(70000, '\xff')};
    std::string all;
    for (const auto& v : values) put_string(all, v);
    std::string_view in = all;
    for (const auto& v : values) {
      std::string_view out;
      REQUIRE(get_string(in, out));
      CHECK(out == v);
    }
    CHECK(in.empty());
  }

  TEST_CASE("strings shorter than their length are rejected") {
    std::string s;
    put_string(s, "hello");
    for (std::size_t n = 0; n < s.size(); ++n) {
      std::string_view in = std::string_view(s).substr(0, n);
      std::string_view out;
      CHECK_FALSE(get_string(in, out));
    }
  }
}
