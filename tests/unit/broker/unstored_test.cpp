// Back-pressure by share (unstored_part.h): a connection holding more than an eighth of
// limits.max-unstored-bytes stops reading; above the limit the connections (or users) holding more
// than their share too; above twice the limit, everyone.
#include <doctest/doctest.h>

#include "unstored_part.h"

using escrow::broker::unstored_part;

TEST_SUITE("broker/unstored") {
  TEST_CASE("a flood pauses its own connection, not a light producer's") {
    unstored_part u;
    const std::uint64_t limit = 1000;
    u.open(1, "bob");
    u.open(2, "alice");
    u.add(1, 1100);  // bob's pipelined sends
    u.add(2, 50);    // alice's one SEND waiting for its receipt
    CHECK_FALSE(u.paused(2, 900, limit));  // at or below the limit: only a connection over its cap
    CHECK(u.paused(1, 900, limit));         // bob holds more than an eighth of the limit
    CHECK(u.paused(1, 1150, limit));
    CHECK_FALSE(u.paused(2, 1150, limit));
    CHECK(u.paused(2, 2001, limit));  // the hard ceiling: everyone
    u.remove(2, 50);
    CHECK_FALSE(u.paused(2, 1100, limit));  // nothing held: never paused below the ceiling
    u.remove(1, 1100);
    CHECK_FALSE(u.paused(1, 1001, limit));
  }

  TEST_CASE("many connections of one user count as that user's share") {
    unstored_part u;
    const std::uint64_t limit = 1000;
    for (std::uint64_t id = 1; id <= 10; ++id) {
      u.open(id, "bob");
      u.add(id, 100);  // each below the per-connection share of 1000/11
    }
    u.open(11, "alice");
    u.add(11, 10);
    CHECK(u.paused(1, 1010, limit));  // bob holds 1000 > 1000/2
    CHECK(u.paused(10, 1010, limit));
    CHECK_FALSE(u.paused(11, 1010, limit));
    u.open(12, "bob");  // a fresh connection of bob's, holding nothing yet, waits too
    CHECK(u.paused(12, 1010, limit));
  }

  TEST_CASE("a closed connection's bytes count for nobody, and late removals are ignored") {
    unstored_part u;
    u.open(1, "bob");
    u.add(1, 5000);
    u.close(1);
    u.remove(1, 5000);
    CHECK(u.held_by(1) == 0);
    u.open(2, "bob");
    u.add(2, 10);
    CHECK_FALSE(u.paused(2, 1500, 1000));  // bob's old bytes are gone from his share
    CHECK_FALSE(u.paused(2, 100, 1000));   // below an eighth of the limit in all: nobody
    CHECK_FALSE(u.paused(99, 1500, 1000));  // unknown: not paused below the ceiling
  }
}
