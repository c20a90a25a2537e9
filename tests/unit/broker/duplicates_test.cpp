// Duplicate detection's bookkeeping (broker/core/duplicates_part.h) over a real store: the window
// of the last id-cache-size ids, eviction oldest first, claims in flight counting as taken until
// released (a refused batch leaves the id free), prepared branches' holds, an id claimed again
// after it was forgotten, and a smaller cache after a reload. Every state it leaves passes
// `escrow check` (storage/check.h).
#include <doctest/doctest.h>

#include <future>
#include <memory>
#include <string>

#include "../temp_dir.h"
#include "duplicates_part.h"
#include "escrow/storage/check.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

using namespace escrow;
using namespace escrow::broker;
using standing = duplicates_part::standing;

namespace {

constexpr const char* kAddress = "/queue/orders";

struct fixture {
  testing::temp_dir dir;
  std::unique_ptr<storage::store> store;
  duplicates_part part;

  fixture() {
    storage::store_options options;
    options.path = dir.path();
    options.map_size = 64ull << 20;
    REQUIRE(storage::store::open(options, store).ok());
  }

  standing of(const std::string& id, std::uint32_t size, std::uint64_t* existing = nullptr) {
    std::uint64_t e = 0;
    standing s = part.standing_of(*store, kAddress, id, size, e);
    if (existing) *existing = e;
    return s;
  }

  // Claims `id` (free) in a batch of its own; stored unless `refused` (then the batch is dropped,
  // as a refused one leaves nothing). Released either way, as the SEND's completion does.
  void claim(const std::string& id, std::uint32_t size, bool refused = false) {
    std::uint64_t existing = 0;
    REQUIRE(part.standing_of(*store, kAddress, id, size, existing) != standing::stored);
    storage::batch b;
    part.claim(*store, kAddress, id, size, existing, b);
    CHECK(of(id, size) == standing::in_flight);
    if (!refused) apply(std::move(b));
    part.release(kAddress, id);
  }

  void apply(storage::batch b) {
    std::promise<storage::status> done;
    store->submit(std::move(b), [&](storage::status s) { done.set_value(std::move(s)); });
    storage::status s = done.get_future().get();
    INFO(s.message());
    REQUIRE(s.ok());
  }

  std::uint64_t records(storage::table t) {
    std::uint64_t n = 0;
    REQUIRE(store->scan(t, {}, {}, [&](std::string_view, std::string_view) { return ++n, true; }).ok());
    return n;
  }

  void require_consistent() {
    storage::check_options o;
    o.path = dir.path();
    storage::check_report r = storage::check_store(o);
    std::string problems;
    for (const auto& p : r.problems) problems += "\n  " + p;
    INFO(problems);
    CHECK(r.outcome == storage::check_report::result::consistent);
  }
};

}  // namespace

TEST_SUITE("broker/duplicates") {
  TEST_CASE("an address remembers its last id-cache-size ids; the oldest is forgotten and erased first") {
    fixture f;
    for (const char* id : {"a", "b", "c"}) f.claim(id, 3);
    CHECK(f.of("a", 3) == standing::stored);
    f.claim("d", 3);
    CHECK(f.of("a", 3) == standing::free);
    for (const char* id : {"b", "c", "d"}) CHECK(f.of(id, 3) == standing::stored);
    CHECK(f.records(storage::table::duplicate_ids) == 3);
    CHECK(f.records(storage::table::duplicate_order) == 3);
    // Another address, and the topic of the same name, are other caches.
    std::uint64_t existing = 0;
    CHECK(f.part.standing_of(*f.store, "/topic/orders", "b", 3, existing) == standing::free);
    // A forgotten id comes back as the newest: then b is the oldest and goes.
    f.claim("a", 3);
    CHECK(f.of("b", 3) == standing::free);
    CHECK(f.of("a", 3) == standing::stored);
    CHECK(f.records(storage::table::duplicate_ids) == 3);
    CHECK(f.part.claiming.empty());  // nothing in flight, nothing in memory
    f.require_consistent();
  }

  TEST_CASE("a claim in flight is taken; a refused one leaves the id free and the number is handed out again") {
    fixture f;
    f.claim("a", 10);
    std::uint64_t existing = 0;
    storage::batch b;
    REQUIRE(f.part.standing_of(*f.store, kAddress, "x", 10, existing) == standing::free);
    f.part.claim(*f.store, kAddress, "x", 10, existing, b);
    CHECK(f.of("x", 10) == standing::in_flight);
    CHECK(f.part.claiming.at(kAddress).next_sequence == 3);
    f.part.release(kAddress, "x");  // its batch refused: never applied
    CHECK(f.of("x", 10) == standing::free);
    CHECK(f.part.claiming.empty());
    f.claim("y", 10);
    std::string value;
    REQUIRE(f.store->get(storage::table::duplicate_ids, storage::duplicate_id_key(kAddress, "y"), value).ok());
    std::uint64_t sequence = 0;
    REQUIRE(storage::decode_duplicate_sequence(value, sequence));
    CHECK(sequence == 2);  // the refused claim's number
    f.require_consistent();
  }

  TEST_CASE("ids a prepared branch holds are taken until released") {
    fixture f;
    duplicate_ids ids{{kAddress, "p"}, {kAddress, "p"}, {"/topic/t", "q"}};
    f.part.hold(ids, true);
    CHECK(f.of("p", 10) == standing::held);
    f.part.hold({{kAddress, "p"}}, false);
    CHECK(f.of("p", 10) == standing::held);  // held twice, released once
    f.part.hold(ids, false);
    CHECK(f.of("p", 10) == standing::free);
    CHECK(f.part.held.empty());
  }

  TEST_CASE("a forgotten id claimed again erases its old place; its evictor leaves an id in flight alone") {
    fixture f;
    for (const char* id : {"a", "b", "c"}) f.claim(id, 2);  // a forgotten, its records erased
    // Lowered to 1 (a reload): b is forgotten at once, its records still there.
    std::uint64_t existing = 0;
    CHECK(f.of("b", 1, &existing) == standing::free);
    CHECK(existing == 2);
    // b claimed again: it comes back as number 4, its place 2 goes, and c (3) is evicted.
    storage::batch b;
    f.part.claim(*f.store, kAddress, "b", 1, existing, b);
    // Another claim while b's is in flight evicts through 4: it must not touch b's records.
    std::uint64_t none = 0;
    REQUIRE(f.part.standing_of(*f.store, kAddress, "d", 1, none) == standing::free);
    storage::batch d;
    f.part.claim(*f.store, kAddress, "d", 1, none, d);
    f.apply(std::move(b));
    f.apply(std::move(d));
    f.part.release(kAddress, "b");
    f.part.release(kAddress, "d");
    CHECK(f.of("d", 1) == standing::stored);
    CHECK(f.of("b", 1) == standing::free);
    CHECK(f.of("b", 2) == standing::stored);  // b (4) is the one before d (5)
    f.require_consistent();
  }

  TEST_CASE("after a smaller id-cache-size the records past it are erased a few at each new id") {
    fixture f;
    for (int i = 1; i <= 200; ++i) f.claim("id-" + std::to_string(i), 1000);
    CHECK(f.records(storage::table::duplicate_ids) == 200);
    f.claim("new-1", 10);  // erases up to 64 of the 191 past the last 10
    CHECK(f.of("id-150", 10) == standing::free);  // forgotten at once, whether erased or not
    CHECK(f.of("id-195", 10) == standing::stored);
    CHECK(f.records(storage::table::duplicate_ids) == 201 - 64);
    for (int i = 2; i <= 4; ++i) f.claim("new-" + std::to_string(i), 10);
    CHECK(f.records(storage::table::duplicate_ids) == 10);
    CHECK(f.records(storage::table::duplicate_order) == 10);
    f.require_consistent();
  }
}
