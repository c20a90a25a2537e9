// The queue's in-memory window over LMDB: queue order (priority, then arrival) across memory and
// storage, the bounded window, refills through the cursor, eviction when higher-priority entries
// arrive, and holds that keep a refill from handing out an entry twice.
#include <doctest/doctest.h>

#include <future>
#include <memory>
#include <vector>

#include "../temp_dir.h"
#include "escrow/broker/selector/selector.h"
#include "escrow/storage/store.h"
#include "queue.h"

using namespace escrow;
using namespace escrow::broker;

namespace {

struct fixture {
  testing::temp_dir dir;
  std::unique_ptr<storage::store> store;

  fixture() {
    storage::store_options options;
    options.path = dir.path();
    options.map_size = 64ull << 20;
    REQUIRE(storage::store::open(options, store).ok());
  }

  // Writes entries for `ids` (priority 4 unless given) of queue 1, waiting for durability.
  void store_entries(const std::vector<std::pair<std::uint64_t, std::uint8_t>>& ids) {
    storage::batch b;
    for (auto [id, priority] : ids) b.put(storage::table::entries, storage::entry_key{1, priority, id}.encode(),
                                          storage::encode_delivery_count(0));
    std::promise<bool> done;
    store->submit(std::move(b), [&](storage::status s) { done.set_value(s.ok()); });
    REQUIRE(done.get_future().get());
  }
};

queue_entry stored_entry(std::uint64_t id, std::uint8_t priority = 4) {
  return queue_entry{storage::entry_key{1, priority, id}, 0, true, nullptr};
}
queue_entry memory_entry(std::uint64_t id, std::uint8_t priority = 4) {
  return queue_entry{storage::entry_key{1, priority, id}, 0, false, std::make_shared<message>()};
}

storage::message_record colored(const char* color) {
  storage::message_record r;
  r.destination = "/queue/q";
  r.headers = {{"color", color}};
  return r;
}

// Stores messages `ids` of queue 1 inline in their entries, red when red(id), else blue.
template <typename Red>
void store_colored(fixture& f, std::uint64_t first, std::uint64_t last, Red red) {
  storage::batch b;
  for (std::uint64_t id = first; id <= last; ++id)
    storage::put_message(b, id, colored(red(id) ? "red" : "blue"), {storage::entry_key{1, 4, id}});
  std::promise<bool> done;
  f.store->submit(std::move(b), [&](storage::status s) { done.set_value(s.ok()); });
  REQUIRE(done.get_future().get());
}

std::shared_ptr<const selector> selector_of(const char* text) {
  auto parsed = selector::parse(text);
  REQUIRE(std::holds_alternative<selector>(parsed));
  return std::make_shared<const selector>(std::get<selector>(parsed));
}

std::vector<std::uint64_t> drain_matches(queue& q, selector_index& ix, std::size_t budget = SIZE_MAX) {
  std::vector<std::uint64_t> ids;
  while (auto e = q.take_match(ix, budget)) ids.push_back(e->key.message_id);
  return ids;
}

std::vector<std::uint64_t> drain(queue& q) {
  std::vector<std::uint64_t> ids;
  while (auto e = q.pop()) ids.push_back(e->key.message_id);
  return ids;
}

}  // namespace

TEST_SUITE("broker/queue") {
  TEST_CASE("a queue opened from storage reads its entries in order through a small window") {
    fixture f;
    std::vector<std::pair<std::uint64_t, std::uint8_t>> ids;
    for (std::uint64_t i = 1; i <= 10; ++i) ids.emplace_back(i, 4);
    f.store_entries(ids);
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 3);
    q.start_unloaded();
    CHECK(q.has_ready());
    CHECK(q.ready_in_memory() == 3);  // only the window is in memory
    CHECK(drain(q) == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  }

  TEST_CASE("a corrupt entry is never handed out: a bad key is passed over, a short value stays held") {
    fixture f;
    f.store_entries({{1, 4}, {3, 4}});
    storage::batch b;
    b.put(storage::table::entries, storage::entry_key{1, 4, 2}.encode(), "\x01");  // no delivery count
    b.put(storage::table::entries, storage::queue_prefix(1) + "\x0c", "");           // not an entry key
    std::promise<bool> done;
    f.store->submit(std::move(b), [&](storage::status s) { done.set_value(s.ok()); });
    REQUIRE(done.get_future().get());
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 2);
    q.start_unloaded();
    CHECK(drain(q) == std::vector<std::uint64_t>{1, 3});
    CHECK(q.is_held(storage::entry_key{1, 4, 2}));
  }

  TEST_CASE("priority order holds across storage and memory") {
    fixture f;
    f.store_entries({{1, 4}, {2, 4}, {3, 9}, {4, 0}});
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 2);
    q.start_unloaded();
    q.push(memory_entry(5, 9));  // non-persistent, priority 9, newer than 3
    q.push(memory_entry(6, 4));  // non-persistent, after 1 and 2
    CHECK(drain(q) == std::vector<std::uint64_t>{3, 5, 1, 2, 6, 4});
  }

  TEST_CASE("a stored entry beyond the window stays in storage until the cursor reaches it") {
    fixture f;
    f.store_entries({{1, 4}, {2, 4}, {3, 4}, {4, 4}});
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 2);
    q.start_unloaded();
    REQUIRE(q.has_ready());
    CHECK(q.ready_in_memory() == 2);
    // A new entry arrives after being written: it sorts after the window, so memory is untouched.
    f.store_entries({{5, 4}});
    q.push(stored_entry(5));
    CHECK(q.ready_in_memory() == 2);
    CHECK(drain(q) == std::vector<std::uint64_t>{1, 2, 3, 4, 5});
  }

  TEST_CASE("higher-priority arrivals evict the tail of a full window, which is read again later") {
    fixture f;
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 2);  // a new, empty, fully loaded queue
    f.store_entries({{1, 4}, {2, 4}});
    q.push(stored_entry(1));
    q.push(stored_entry(2));
    f.store_entries({{3, 9}, {4, 9}});
    q.push(stored_entry(3, 9));
    q.push(stored_entry(4, 9));
    CHECK(q.ready_in_memory() == 2);
    CHECK(drain(q) == std::vector<std::uint64_t>{3, 4, 1, 2});
  }

  TEST_CASE("held entries are never handed out by a refill") {
    fixture f;
    f.store_entries({{1, 4}, {2, 4}, {3, 4}});
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 10);
    q.start_unloaded();
    q.hold(storage::entry_key{1, 4, 2});  // e.g. its write completed but the core has not seen it yet
    CHECK(drain(q) == std::vector<std::uint64_t>{1, 3});
    // The completion then releases the hold and pushes it: delivered exactly once.
    q.release_hold(storage::entry_key{1, 4, 2});
    q.push(stored_entry(2));
    CHECK(drain(q) == std::vector<std::uint64_t>{2});
  }

  TEST_CASE("a popped entry pushed back returns to its place, with its delivery count") {
    fixture f;
    f.store_entries({{1, 4}, {2, 4}});
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 10);
    q.start_unloaded();
    auto first = q.pop();
    REQUIRE(first);
    CHECK(first->key.message_id == 1);
    first->delivery_count = 1;
    q.release_hold(first->key);
    q.push(std::move(*first));
    auto again = q.pop();
    REQUIRE(again);
    CHECK(again->key.message_id == 1);
    CHECK(again->delivery_count == 1);
  }

  TEST_CASE("non-stored entries of a non-durable queue live in memory only") {
    queue q(7, "sub", queue::kind::subscription, "news", nullptr, 2);
    CHECK_FALSE(q.durable());
    for (std::uint64_t i = 1; i <= 5; ++i)
      q.push(queue_entry{storage::entry_key{7, 4, i}, 0, false, std::make_shared<message>()});
    CHECK(q.ready_in_memory() == 5);  // the window bounds stored entries, not these
    std::vector<std::uint64_t> ids;
    while (auto e = q.pop()) ids.push_back(e->key.message_id);
    CHECK(ids == std::vector<std::uint64_t>{1, 2, 3, 4, 5});
  }
}

TEST_SUITE("broker/queue/expiry") {
  TEST_CASE("take: from memory, from storage beyond the window, never a held or gone entry") {
    fixture f;
    f.store_entries({{1, 4}, {2, 4}, {3, 4}, {4, 4}});
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 2);
    q.start_unloaded();
    REQUIRE(q.has_ready());  // loads 1 and 2; 3 and 4 stay in storage

    auto in_memory = q.take(storage::entry_key{1, 4, 2});
    REQUIRE(in_memory);
    CHECK(q.is_held(in_memory->key));
    CHECK_FALSE(q.take(storage::entry_key{1, 4, 2}));  // held now

    auto in_storage = q.take(storage::entry_key{1, 4, 4});
    REQUIRE(in_storage);
    CHECK(in_storage->stored);
    CHECK(in_storage->msg == nullptr);

    auto first = q.pop();
    REQUIRE(first);
    CHECK(first->key.message_id == 1);
    q.release_hold(first->key);  // acknowledged: gone from the queue
    CHECK_FALSE(q.take(first->key));

    // The taken entries are not handed out by a refill.
    CHECK(drain(q) == std::vector<std::uint64_t>{3});
  }

  TEST_CASE("expired entries kept only in memory are taken by expiry time") {
    fixture f;
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 10);
    auto with_expiry = [](std::uint64_t id, std::uint64_t expires) {
      auto e = memory_entry(id);
      auto m = std::make_shared<message>();
      m->id = id;
      m->record.expires = expires;
      e.msg = m;
      return e;
    };
    q.push(with_expiry(1, 100));
    q.push(with_expiry(2, 0));  // never
    q.push(with_expiry(3, 300));
    q.push(with_expiry(4, 200));
    auto taken = q.take_expired_in_memory(250);
    REQUIRE(taken.size() == 2);
    CHECK(taken[0].key.message_id == 1);
    CHECK(taken[1].key.message_id == 4);
    // A popped (delivered) entry leaves the index: it is not taken later.
    auto next = q.pop();
    REQUIRE(next);
    CHECK(next->key.message_id == 2);
    auto three = q.pop();
    REQUIRE(three);
    CHECK(q.take_expired_in_memory(1000).empty());
  }

  TEST_CASE("a selector's index finds its matches in storage in order, past its key limit") {
    fixture f;
    const std::uint64_t n = 3 * selector_index::kMaxMatched;
    store_colored(f, 1, n, [](std::uint64_t id) { return id % 3 != 0; });  // two thirds red: beyond the limit
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 4);
    q.start_unloaded();
    selector_index& ix = q.attach_selector(selector_of("color = 'red'"));
    std::vector<std::uint64_t> want;
    for (std::uint64_t id = 1; id <= n; ++id)
      if (id % 3 != 0) want.push_back(id);
    CHECK(drain_matches(q, ix) == want);
    CHECK(ix.matched.empty());
    CHECK_FALSE(ix.scanned.has_value());  // classified to the end
    // What it passed over is the queue's, in order.
    std::vector<std::uint64_t> rest;
    for (std::uint64_t id = 3; id <= n; id += 3) rest.push_back(id);
    CHECK(drain(q) == rest);
  }

  TEST_CASE("a scan stops at its budget and goes on where it stopped") {
    fixture f;
    store_colored(f, 1, 100, [](std::uint64_t id) { return id > 90; });
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 4);
    q.start_unloaded();
    selector_index& ix = q.attach_selector(selector_of("color = 'red'"));
    std::size_t budget = 40;
    CHECK_FALSE(q.take_match(ix, budget).has_value());
    CHECK(budget == 0);
    REQUIRE(ix.scanned.has_value());
    CHECK(ix.scanned->message_id == 41);
    budget = 40;
    CHECK_FALSE(q.take_match(ix, budget).has_value());
    budget = 40;
    auto e = q.take_match(ix, budget);
    REQUIRE(e.has_value());
    CHECK(e->key.message_id == 91);
  }

  TEST_CASE("entries pushed, taken by others and returned keep the index exact") {
    fixture f;
    store_colored(f, 1, 6, [](std::uint64_t id) { return id % 2 == 1; });
    queue q(1, "q", queue::kind::queue, "", f.store.get(), 100);
    q.start_unloaded();
    selector_index& ix = q.attach_selector(selector_of("color = 'red'"));
    selector_index& same = q.attach_selector(selector_of("color = 'red'"));
    CHECK(&ix == &same);  // one index per text
    std::size_t budget = SIZE_MAX;
    auto first = q.take_match(ix, budget);
    REQUIRE(first.has_value());
    CHECK(first->key.message_id == 1);
    // Another consumer takes the head (2, blue) and then 3 (red): 3 leaves the index.
    auto two = q.pop();
    auto three = q.pop();
    REQUIRE((two && three));
    CHECK(three->key.message_id == 3);
    CHECK(ix.matched.count(three->key) == 0);
    // A new red message in memory, and 1 coming back: classified as they are pushed, in order.
    auto m = std::make_shared<message>();
    m->record = colored("red");
    m->id = 7;
    q.push(queue_entry{storage::entry_key{1, 4, 7}, 0, false, m});
    q.release_hold(first->key);
    q.push(std::move(*first));  // without its message: the scan reads from its key again
    CHECK(drain_matches(q, ix) == std::vector<std::uint64_t>{1, 5, 7});
    q.detach_selector(same);
    q.detach_selector(ix);
  }
}
