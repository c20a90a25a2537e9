// The store told "no": a map that grows by itself, the room checks that refuse new messages
// (max-size, min-free-disk), and the fault-injection loop that makes the k-th commit or sync fail
// (map full, disk full, I/O error) and then checks that every batch reported stored is there, that
// nothing refused is, and which failures stop the store for good (docs/storage.md).
#include <doctest/doctest.h>

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "small_store.h"
#include "escrow/storage/batch.h"
#include "escrow/storage/fault_injection.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

using namespace escrow::storage;

namespace {

using escrow::testing::open_or_fail;
using escrow::testing::small_store;
using escrow::testing::temp_dir;

std::future<status> submit(store& s, batch b) {
  auto p = std::make_shared<std::promise<status>>();
  auto f = p->get_future();
  s.submit(std::move(b), [p](status st) { p->set_value(std::move(st)); });
  return f;
}

std::map<std::string, std::string> contents(const store& s) {
  std::map<std::string, std::string> out;
  status st = s.scan(table::messages, "", "", [&](std::string_view k, std::string_view v) {
    out.emplace(k, v);
    return true;
  });
  REQUIRE(st.ok());
  return out;
}

// Batch i stores message i and removes message i - 3, like a queue with a consumer behind it.
batch workload_batch(int i) {
  batch b;
  b.put(table::messages, message_key(static_cast<std::uint64_t>(i)), std::string(200 + i, 'a' + i % 26));
  if (i >= 3) b.erase(table::messages, message_key(static_cast<std::uint64_t>(i - 3)));
  return b;
}

void apply_to(std::map<std::string, std::string>& model, const batch& b) {
  REQUIRE(batch::decode(b.rep(), [&](batch::op o, table, std::string_view k, std::string_view v) {
    if (o == batch::op::put) model[std::string(k)] = std::string(v);
    else model.erase(std::string(k));
  }));
}

}  // namespace

TEST_SUITE("storage/failure") {
  TEST_CASE("the map grows by itself: 8 MiB of messages in a 1 MiB map, all there after reopen") {
    temp_dir dir;
    auto s = open_or_fail(small_store(dir.path()));
    for (int i = 0; i < 8 * 1024; ++i) {
      batch b;
      b.put(table::messages, message_key(static_cast<std::uint64_t>(i)), std::string(1024, 'g'));
      status st = submit(*s, std::move(b)).get();
      INFO(st.message());
      REQUIRE(st.ok());
    }
    CHECK(s->stats().map_grows > 0);
    CHECK(s->stats().map_size_bytes > (8ull << 20));
    s.reset();
    s = open_or_fail(small_store(dir.path()));
    CHECK(contents(*s).size() == 8u * 1024u);
  }

  TEST_CASE("max-size refuses new messages until room returns") {
    temp_dir dir;
    store_options o = small_store(dir.path());
    o.max_size = 2ull << 20;
    auto s = open_or_fail(o);
    CHECK(s->send_room(true).ok());
    int i = 0;
    while (s->send_room(true).ok()) {
      REQUIRE(i < 10000);
      batch b;
      b.put(table::messages, message_key(static_cast<std::uint64_t>(i++)), std::string(4000, 'm'));
      REQUIRE(submit(*s, std::move(b)).get().ok());
    }
    status refused = s->send_room(true);
    CHECK(refused.which() == status::code::store_full);
    CHECK(refused.message().find("storage.max-size") != std::string::npos);
    CHECK(s->stats().refusing_sends);
    // Writes themselves still work (acknowledgements free room): remove everything.
    batch drain;
    for (int k = 0; k < i; ++k) drain.erase(table::messages, message_key(static_cast<std::uint64_t>(k)));
    REQUIRE(submit(*s, std::move(drain)).get().ok());
    status back = s->send_room(true);
    INFO(back.message());
    CHECK(back.ok());
  }

  TEST_CASE("min-free-disk refuses new messages with a message naming it") {
    temp_dir dir;
    store_options o = small_store(dir.path());
    o.min_free_disk = 1ull << 60;  // more than any disk has
    auto s = open_or_fail(o);
    status refused = s->send_room(true);
    CHECK(refused.which() == status::code::store_full);
    CHECK(refused.message().find("storage.min-free-disk") != std::string::npos);
  }

  TEST_CASE("a malformed fault plan is refused with the rule it cannot read") {
    fault_plan p;
    std::string error;
    CHECK_FALSE(fault_plan::parse("commit:0:eio", p, error));
    CHECK(error.find("commit:0:eio") != std::string::npos);
    CHECK_FALSE(fault_plan::parse("write:1:eio", p, error));
    CHECK_FALSE(fault_plan::parse("sync:1:melt", p, error));
    CHECK(fault_plan::parse("commit:2-4:enospc,sync:3+:eio", p, error));
    CHECK(p.next(fault_plan::point::commit) == fault_plan::fault::none);
    CHECK(p.next(fault_plan::point::commit) == fault_plan::fault::enospc);
    CHECK(p.next(fault_plan::point::commit) == fault_plan::fault::enospc);
    CHECK(p.next(fault_plan::point::commit) == fault_plan::fault::enospc);
    CHECK(p.next(fault_plan::point::commit) == fault_plan::fault::none);
    CHECK(p.next(fault_plan::point::sync) == fault_plan::fault::none);
    CHECK(p.next(fault_plan::point::sync) == fault_plan::fault::none);
    CHECK(p.next(fault_plan::point::sync) == fault_plan::fault::eio);
    CHECK(p.next(fault_plan::point::sync) == fault_plan::fault::eio);
  }

  // The loop of LevelDB's and SQLite's fault tests: fail the k-th commit for every k, and check.
  // eio at a commit is a failed write of LMDB's pages (a short write comes back as EIO): under
  // MDB_NOSYNC nothing of it was reported and no sync failed, so it refuses that batch only.
  TEST_CASE("the k-th commit refused (map full, disk full, a failed page write): that batch only, and writes go on") {
    if (!fault_injection_compiled()) return;  // a release build has no seam
    const int kBatches = 12;
    for (const char* fault : {"map_full", "enospc", "eio"}) {
      for (int k = 1; k <= kBatches; ++k) {
        CAPTURE(fault);
        CAPTURE(k);
        temp_dir dir;
        auto s = open_or_fail(small_store(dir.path(), "commit:" + std::to_string(k) + ":" + fault));
        std::map<std::string, std::string> model;
        for (int i = 0; i < kBatches; ++i) {
          batch b = workload_batch(i);
          status st = submit(*s, b).get();
          if (i + 1 == k) {
            CHECK(st.which() == (std::string_view(fault) == "eio" ? status::code::io_error : status::code::store_full));
            CHECK_FALSE(st.message().empty());
          } else {
            INFO(st.message());
            CHECK(st.ok());
            if (st.ok()) apply_to(model, b);
          }
        }
        CHECK(s->writable());
        CHECK(contents(*s) == model);
        s.reset();
        s = open_or_fail(small_store(dir.path()));
        CHECK(contents(*s) == model);
      }
    }
  }

  TEST_CASE("the k-th sync fails with an I/O error: nothing after it is reported stored") {
    if (!fault_injection_compiled()) return;
    const int kBatches = 8;
    for (const char* point : {"sync"}) {
      for (int k = 1; k <= kBatches; ++k) {
        CAPTURE(point);
        CAPTURE(k);
        temp_dir dir;
        auto s = open_or_fail(small_store(dir.path(), std::string(point) + ":" + std::to_string(k) + ":eio"));
        std::map<std::string, std::string> model;
        std::vector<batch> failed_batches;
        bool failed = false;
        for (int i = 0; i < kBatches; ++i) {
          batch b = workload_batch(i);
          status st = submit(*s, b).get();
          if (!st.ok()) {
            CHECK(st.which() == status::code::failed);
            failed = true;
            failed_batches.push_back(b);
            continue;
          }
          CHECK_FALSE(failed);  // once failed, never "stored" again (sticky: fsyncgate)
          apply_to(model, b);
        }
        CHECK(failed);
        CHECK_FALSE(s->writable());
        s.reset();
        // After a restart the store holds every batch reported stored, and perhaps the one whose
        // sync failed (its pages may have reached the disk), but nothing submitted after it.
        s = open_or_fail(small_store(dir.path()));
        auto after = contents(*s);
        auto with_failed = model;
        apply_to(with_failed, failed_batches.front());
        CHECK((after == model || after == with_failed));
        batch next = workload_batch(100);
        CHECK(submit(*s, next).get().ok());  // a restart clears the failure
      }
    }
  }

  TEST_CASE("a failed sync also fails the groups committed after it that still waited for theirs") {
    if (!fault_injection_compiled()) return;
    // One sync may cover many groups: the first batch alone, then a burst, is sure of two.
    for (int k = 1; k <= 2; ++k) {
      CAPTURE(k);
      temp_dir dir;
      store_options o = small_store(dir.path(), "sync:" + std::to_string(k) + ":eio");
      o.max_group_batches = 8;  // many commits, each while the one before waits for its sync
      auto s = open_or_fail(o);
      std::vector<std::future<status>> results;
      results.push_back(submit(*s, workload_batch(0)));
      results.front().wait();  // a sync of its own: the burst after it is at least the second
      for (int i = 1; i < 200; ++i) results.push_back(submit(*s, workload_batch(i)));
      bool failed = false;
      std::map<std::string, std::string> model;
      for (int i = 0; i < 200; ++i) {
        status st = results[static_cast<std::size_t>(i)].get();
        if (st.ok()) {
          CHECK_FALSE(failed);  // the answers are a run of "stored" and then only failures
          apply_to(model, workload_batch(i));
        } else {
          failed = true;
        }
      }
      CHECK(failed);
      s.reset();
      s = open_or_fail(small_store(dir.path()));
      // Everything reported stored is there (what is there beyond it was reported failed).
      auto after = contents(*s);
      for (const auto& [key, value] : model) {
        auto it = after.find(key);
        if (it != after.end()) CHECK(it->second == value);
      }
    }
  }
}
