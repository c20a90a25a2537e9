// The rules of broker/core/delivery_times.h: a SEND's scheduled delivery time from each of its
// header spellings, the refusals, and the reaper's share of the core by priority.
#include <doctest/doctest.h>

#include "delivery_times.h"

using namespace escrow;
using namespace escrow::broker;

namespace {
std::optional<std::string> when(std::vector<std::pair<std::string, std::string>> headers, std::uint64_t now,
                                std::uint64_t& at) {
  frame f{"SEND", std::move(headers), {}};
  return scheduled_delivery(f, now, at);
}
}  // namespace

TEST_SUITE("broker/delivery_times") {
  TEST_CASE("absolute and relative spellings") {
    std::uint64_t at = 1;
    CHECK_FALSE(when({{"_AMQ_SCHED_DELIVERY", "5000"}}, 1000, at));
    CHECK(at == 5000);
    CHECK_FALSE(when({{"_HQ_SCHED_DELIVERY", "5000"}}, 1000, at));
    CHECK(at == 5000);
    CHECK_FALSE(when({{"AMQ_SCHEDULED_DELAY", "250"}}, 1000, at));
    CHECK(at == 1250);
    CHECK_FALSE(when({{"_AMQ_SCHED_DELAY", "250"}}, 1000, at));
    CHECK(at == 1250);
    CHECK_FALSE(when({{"destination", "/queue/a"}}, 1000, at));
    CHECK(at == 0);
  }

  TEST_CASE("a time already past, or no delay, is no schedule") {
    std::uint64_t at = 1;
    CHECK_FALSE(when({{"_AMQ_SCHED_DELIVERY", "999"}}, 1000, at));
    CHECK(at == 0);
    CHECK_FALSE(when({{"_AMQ_SCHED_DELIVERY", "1000"}}, 1000, at));
    CHECK(at == 0);
    CHECK_FALSE(when({{"AMQ_SCHEDULED_DELAY", "0"}}, 1000, at));
    CHECK(at == 0);
  }

  TEST_CASE("ten years out is fine, the year 10000 is not") {
    std::uint64_t at = 0, now = 1'800'000'000'000;
    CHECK_FALSE(when({{"AMQ_SCHEDULED_DELAY", std::to_string(10ull * 365 * 86400 * 1000)}}, now, at));
    CHECK(at == now + 10ull * 365 * 86400 * 1000);
    auto late = when({{"_AMQ_SCHED_DELIVERY", "253402300800001"}}, now, at);
    REQUIRE(late);
    CHECK(late->find("after the year 9999") != std::string::npos);
    CHECK(when({{"AMQ_SCHEDULED_DELAY", "18446744073709551615"}}, now, at));  // no overflow into the past
  }

  TEST_CASE("malformed values and two spellings are refused, naming the header") {
    std::uint64_t at = 0;
    auto bad = when({{"_AMQ_SCHED_DELIVERY", "soon"}}, 1000, at);
    REQUIRE(bad);
    CHECK(*bad == "invalid _AMQ_SCHED_DELIVERY header 'soon': use epoch milliseconds");
    bad = when({{"AMQ_SCHEDULED_DELAY", "-5"}}, 1000, at);
    REQUIRE(bad);
    CHECK(*bad == "invalid AMQ_SCHEDULED_DELAY header '-5': use milliseconds from now (0 or more)");
    CHECK(when({{"AMQ_SCHEDULED_DELAY", ""}}, 1000, at));
    auto two = when({{"_AMQ_SCHED_DELIVERY", "5000"}, {"AMQ_SCHEDULED_DELAY", "5"}}, 1000, at);
    REQUIRE(two);
    CHECK(two->find("both _AMQ_SCHED_DELIVERY and AMQ_SCHEDULED_DELAY") != std::string::npos);
  }

  TEST_CASE("repeated deliveries are refused; a zero repeat is not a repeat") {
    std::uint64_t at = 0;
    auto repeat = when({{"AMQ_SCHEDULED_DELAY", "5"}, {"AMQ_SCHEDULED_REPEAT", "3"}}, 1000, at);
    REQUIRE(repeat);
    CHECK(repeat->find("AMQ_SCHEDULED_REPEAT header asks for repeated delivery") != std::string::npos);
    CHECK(when({{"AMQ_SCHEDULED_CRON", "* * * * *"}}, 1000, at));
    CHECK(when({{"AMQ_SCHEDULED_PERIOD", "100"}}, 1000, at));
    CHECK_FALSE(when({{"AMQ_SCHEDULED_DELAY", "5"}, {"AMQ_SCHEDULED_REPEAT", "0"}}, 1000, at));
    CHECK(at == 1005);
  }

  TEST_CASE("the reaper's share grows with its priority, 9 runs without pauses") {
    for (unsigned p = 1; p <= 9; ++p) CHECK(reaper_share(p) > reaper_share(p - 1));
    CHECK(reaper_share(3) == doctest::Approx(0.25));
    using namespace std::chrono;
    CHECK(reaper_pause(milliseconds(10), 9) == steady_clock::duration::zero());
    CHECK(duration_cast<milliseconds>(reaper_pause(milliseconds(10), 3)).count() == 30);  // three times the turn
    CHECK(duration_cast<microseconds>(reaper_pause(milliseconds(10), 0)).count() == doctest::Approx(190000).epsilon(0.001));
    CHECK(reaper_pause(nanoseconds(1), 5) >= microseconds(100));  // never a busy loop
    CHECK(reaper_share(12) == reaper_share(9));
  }
}
