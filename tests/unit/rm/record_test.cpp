// The durable form of a prepared or heuristically completed branch (rm/record.h): what a broker
// restarted after a crash rebuilds from, so every field must come back exactly, and damaged bytes
// must be refused rather than half-read.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "escrow/rm/record.h"
#include "escrow/storage/coding.h"

using namespace escrow;
using namespace escrow::rm;

namespace {

storage::message_ptr make_message(std::uint64_t id, std::string destination, std::string body,
                                  std::vector<std::pair<std::string, std::string>> headers) {
  auto m = std::make_shared<storage::message>();
  m->id = id;
  m->record.persistent = id % 2 == 0;
  m->record.priority = static_cast<std::uint8_t>(id % 10);
  m->record.expires = 1700000000000ull + id;
  m->record.timestamp = 1600000000000ull + id;
  m->record.destination = std::move(destination);
  m->record.headers = std::move(headers);
  m->record.body = std::move(body);
  return m;
}

// A branch with several sends (one to several queues, stored and not) and consumed entries with
// every combination of the stored and negative flags.
branch sample_branch(branch_state state) {
  branch b;
  b.id = xid(1, "gtrid", "bqual");
  b.state = state;
  b.created_ms = 0x0102030405060708ull;
  b.work.sends.push_back({make_message(7, "/queue/orders", std::string("a\0b\0\0c", 6),
                                       {{"content-type", "text/plain"}, {"x-empty", ""}, {"dup", "1"}, {"dup", "2"}}),
                          {{{3, 4, 7}, true}}});
  b.work.sends.push_back({make_message(0xfffffffffffffff0ull, "/topic/prices", "", {}),
                          {{{10, 0, 0xfffffffffffffff0ull}, true},
                           {{11, 9, 0xfffffffffffffff0ull}, false},
                           {{0xffffffffu, 5, 0xfffffffffffffff0ull}, true}}});
  b.work.sends.push_back({make_message(9, "/queue/volatile", std::string(1000, '\0'), {{"h\0x", std::string("v\0", 2)}}),
                          {{{4, 4, 9}, false}}});
  b.work.consumed.push_back({{3, 4, 100}, 1, true, false, nullptr});
  b.work.consumed.push_back({{3, 7, 101}, 0, true, true, nullptr});
  b.work.consumed.push_back({{5, 0, 102}, 0xffffffffu, false, false, nullptr});
  b.work.consumed.push_back({{5, 9, 103}, 42, false, true, nullptr});
  return b;
}

void check_same_message(const storage::message& a, const storage::message& b) {
  CHECK(a.id == b.id);
  CHECK(a.record.persistent == b.record.persistent);
  CHECK(a.record.priority == b.record.priority);
  CHECK(a.record.expires == b.record.expires);
  CHECK(a.record.timestamp == b.record.timestamp);
  CHECK(a.record.destination == b.record.destination);
  CHECK(a.record.headers == b.record.headers);
  CHECK(a.record.body == b.record.body);
}

void check_same_work(const branch_work& a, const branch_work& b) {
  REQUIRE(a.sends.size() == b.sends.size());
  for (std::size_t i = 0; i < a.sends.size(); ++i) {
    CAPTURE(i);
    REQUIRE(b.sends[i].msg != nullptr);
    check_same_message(*a.sends[i].msg, *b.sends[i].msg);
    REQUIRE(a.sends[i].targets.size() == b.sends[i].targets.size());
    for (std::size_t t = 0; t < a.sends[i].targets.size(); ++t) {
      CHECK(a.sends[i].targets[t].key == b.sends[i].targets[t].key);
      CHECK(a.sends[i].targets[t].stored == b.sends[i].targets[t].stored);
    }
  }
  REQUIRE(a.consumed.size() == b.consumed.size());
  for (std::size_t i = 0; i < a.consumed.size(); ++i) {
    CAPTURE(i);
    CHECK(a.consumed[i].key == b.consumed[i].key);
    CHECK(a.consumed[i].delivery_count == b.consumed[i].delivery_count);
    CHECK(a.consumed[i].stored == b.consumed[i].stored);
    CHECK(a.consumed[i].negative == b.consumed[i].negative);
  }
}

const branch_state kDurableStates[] = {branch_state::prepared, branch_state::heuristic_committed,
                                       branch_state::heuristic_rolled_back, branch_state::heuristic_mixed};

}  // namespace

TEST_SUITE("rm/record") {
  TEST_CASE("a branch with sends and consumed entries round trips in every durable state") {
    for (auto state : kDurableStates) {
      CAPTURE(to_string(state));
      branch in = sample_branch(state);
      std::string bytes = encode_record(in);
      branch out;
      out.state = branch_state::none;  // decode must set it
      out.work.consumed.push_back({});  // and replace, not append to, whatever work was there
      REQUIRE(decode_record(bytes, out));
      CHECK(out.state == state);
      CHECK(out.created_ms == in.created_ms);
      check_same_work(in.work, out.work);
      // decode fills state, created and work, never the id (the key carries it).
      CHECK(out.id == xid());
    }
  }

  TEST_CASE("the states are told apart in the bytes") {
    // A heuristic outcome decoded as prepared would be committed again by the manager.
    std::string prepared = encode_record(sample_branch(branch_state::prepared));
    for (auto state : kDurableStates) {
      if (state == branch_state::prepared) continue;
      CHECK(encode_record(sample_branch(state)) != prepared);
    }
  }

  TEST_CASE("an idle branch is written as prepared") {
    // prepare encodes the branch while it is still idle; the record must read back as prepared.
    branch b = sample_branch(branch_state::idle);
    branch out;
    REQUIRE(decode_record(encode_record(b), out));
    CHECK(out.state == branch_state::prepared);
  }

  TEST_CASE("empty work round trips") {
    for (auto state : kDurableStates) {
      branch in;
      in.state = state;
      in.created_ms = 12345;
      branch out = sample_branch(branch_state::prepared);  // full work, to be replaced
      REQUIRE(decode_record(encode_record(in), out));
      CHECK(out.state == state);
      CHECK(out.created_ms == 12345);
      CHECK(out.work.empty());
    }
  }

  TEST_CASE("every truncation is rejected") {
    for (auto state : {branch_state::prepared, branch_state::heuristic_mixed}) {
      std::string bytes = encode_record(sample_branch(state));
      for (std::size_t n = 0; n < bytes.size(); ++n) {
        CAPTURE(n);
        branch out;
        CHECK_FALSE(decode_record(std::string_view(bytes).substr(0, n), out));
      }
    }
    std::string empty_work = encode_record(branch{});
    for (std::size_t n = 0; n < empty_work.size(); ++n) {
      branch out;
      CHECK_FALSE(decode_record(std::string_view(empty_work).substr(0, n), out));
    }
  }

  TEST_CASE("trailing garbage is rejected") {
    branch out;
    std::string bytes = encode_record(sample_branch(branch_state::prepared));
    REQUIRE(decode_record(bytes, out));
    CHECK_FALSE(decode_record(bytes + '\0', out));
    CHECK_FALSE(decode_record(bytes + "garbage", out));
    std::string empty_work = encode_record(branch{});
    REQUIRE(decode_record(empty_work, out));
    CHECK_FALSE(decode_record(empty_work + '\x01', out));
  }

  TEST_CASE("a bad version or state is rejected") {
    std::string bytes = encode_record(sample_branch(branch_state::prepared));
    branch out;
    REQUIRE(decode_record(bytes, out));
    for (int version : {0, 2, 255}) {
      std::string bad = bytes;
      bad[0] = static_cast<char>(version);
      CAPTURE(version);
      CHECK_FALSE(decode_record(bad, out));
    }
    for (int state : {0, 5, 255}) {
      std::string bad = bytes;
      bad[1] = static_cast<char>(state);
      CAPTURE(state);
      CHECK_FALSE(decode_record(bad, out));
    }
    // The valid states 1..4 are the four durable ones.
    for (int state = 1; state <= 4; ++state) {
      std::string good = bytes;
      good[1] = static_cast<char>(state);
      CHECK(decode_record(good, out));
    }
  }

  TEST_CASE("a damaged entry key or message record inside is rejected") {
    // Hand-built records: one consumed entry whose key is not 13 bytes, and one send whose message
    // record is not a message record. Both would otherwise pass the length checks.
    auto header = [] {
      std::string r;
      r.push_back(1);  // version
      r.push_back(1);  // prepared
      storage::put_u64(r, 0);
      return r;
    };
    std::string bad_key = header();
    storage::put_varint(bad_key, 0);  // no sends
    storage::put_varint(bad_key, 1);  // one consumed entry
    storage::put_string(bad_key, "short");
    storage::put_u32(bad_key, 0);
    bad_key.push_back(1);
    branch out;
    CHECK_FALSE(decode_record(bad_key, out));

    std::string bad_message = header();
    storage::put_varint(bad_message, 1);  // one send
    storage::put_u64(bad_message, 5);
    storage::put_string(bad_message, "not a message record");
    storage::put_varint(bad_message, 0);  // no targets
    storage::put_varint(bad_message, 0);  // no consumed entries
    CHECK_FALSE(decode_record(bad_message, out));

    // The same record with a real message record is accepted, so the rejection above is the
    // message record's and not the framing's.
    std::string good = header();
    storage::put_varint(good, 1);
    storage::put_u64(good, 5);
    storage::put_string(good, storage::message_record{}.encode());
    storage::put_varint(good, 0);
    storage::put_varint(good, 0);
    REQUIRE(decode_record(good, out));
    REQUIRE(out.work.sends.size() == 1);
    CHECK(out.work.sends[0].msg->id == 5);
  }
}
