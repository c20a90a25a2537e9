// broker/admin/metrics_text.cpp and status_json.cpp: the Prometheus text format and the /status JSON.
#include <doctest/doctest.h>

#include <boost/json/parse.hpp>
#include <cmath>
#include <limits>
#include <string>

#include "escrow/broker/admin/metrics_text.h"

using namespace escrow::broker;

namespace {

bool contains(const std::string& text, const std::string& line) { return text.find(line) != std::string::npos; }

metrics_snapshot sample_snapshot() {
  metrics_snapshot s;
  s.version = "0.1.0";
  s.connections = 3;
  s.branches_by_state = {{"prepared", 2}, {"active", 0}};
  queue_metrics q;
  q.name = "orders";
  q.kind = "queue";
  q.enqueued = 10;
  q.acknowledged = 7;
  q.depth = 3;
  s.queues.push_back(q);
  queue_metrics odd;
  odd.name = "a\"b\\c\nd";
  odd.kind = "durable-subscription";
  s.queues.push_back(odd);
  return s;
}

}  // namespace

TEST_CASE("label values escape backslash, double quote and newline") {
  CHECK(escape_label_value("plain") == "plain");
  CHECK(escape_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
}

TEST_CASE("sample values: integers plain, infinities and NaN as Prometheus spells them") {
  CHECK(format_value(0) == "0");
  CHECK(format_value(42) == "42");
  CHECK(format_value(0.25) == "0.25");
  CHECK(format_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(format_value(std::nan("")) == "NaN");
}

TEST_CASE("a histogram's buckets are cumulative and end with +Inf, then _sum and _count") {
  histogram h;
  h.bounds = {1, 2, 4};
  h.counts = {1, 0, 2, 3};  // per bucket; the last is above 4
  h.sum = 30;
  h.count = 6;
  std::string out;
  append_histogram(out, "x", "", h);
  CHECK(out ==
        "x_bucket{le=\"1\"} 1\n"
        "x_bucket{le=\"2\"} 1\n"
        "x_bucket{le=\"4\"} 3\n"
        "x_bucket{le=\"+Inf\"} 6\n"
        "x_sum 30\n"
        "x_count 6\n");
  std::string labelled;
  append_histogram(labelled, "y", "queue=\"q\"", h);
  CHECK(contains(labelled, "y_bucket{queue=\"q\",le=\"+Inf\"} 6\n"));
  CHECK(contains(labelled, "y_sum{queue=\"q\"} 30\n"));
}

TEST_CASE("latency_histogram puts a value in the first bucket whose bound is at least it") {
  latency_histogram h;
  h.observe(0.0001);  // exactly the first bound
  h.observe(0.003);
  h.observe(100);  // above every bound
  const histogram& v = h.value();
  CHECK(v.count == 3);
  CHECK(v.counts.front() == 1);
  CHECK(v.counts.back() == 1);
  CHECK(v.counts.size() == v.bounds.size() + 1);
  CHECK(v.sum == doctest::Approx(100.0031));
}

TEST_CASE("the exposition has HELP and TYPE for every family and one sample per queue") {
  std::string out = write_prometheus(sample_snapshot());
  CHECK(contains(out, "# HELP escrow_connections "));
  CHECK(contains(out, "# TYPE escrow_connections gauge\nescrow_connections 3\n"));
  CHECK(contains(out, "# TYPE escrow_queue_messages_enqueued_total counter\n"));
  CHECK(contains(out, "escrow_queue_messages_enqueued_total{queue=\"orders\",kind=\"queue\"} 10\n"));
  CHECK(contains(out, "escrow_queue_depth{queue=\"orders\",kind=\"queue\"} 3\n"));
  CHECK(contains(out, "escrow_queue_depth{queue=\"a\\\"b\\\\c\\nd\",kind=\"durable-subscription\"} 0\n"));
  CHECK(contains(out, "escrow_branches{state=\"prepared\"} 2\n"));
  CHECK(contains(out, "# TYPE escrow_prepare_seconds histogram\n"));
  CHECK(contains(out, "escrow_prepare_seconds_bucket{le=\"+Inf\"} 0\n"));
  CHECK(contains(out, "escrow_failed_logins_total 0\n"));
  // Every line is a comment or `name{labels} value`, and ends with a newline.
  REQUIRE(!out.empty());
  CHECK(out.back() == '\n');
  std::size_t start = 0;
  while (start < out.size()) {
    std::size_t end = out.find('\n', start);
    std::string line = out.substr(start, end - start);
    start = end + 1;
    CAPTURE(line);
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    CHECK(line.rfind("escrow_", 0) == 0);
    CHECK(line.find(' ') != std::string::npos);
  }
  // Each TYPE is declared once.
  CHECK(out.find("# TYPE escrow_queue_depth ") == out.rfind("# TYPE escrow_queue_depth "));
}

TEST_CASE("/status JSON escapes names and lists every queue") {
  std::string json = write_status_json(sample_snapshot());
  CHECK(json.front() == '{');
  CHECK(contains(json, "\"name\":\"orders\",\"kind\":\"queue\",\"depth\":3"));
  CHECK(contains(json, "\"name\":\"a\\\"b\\\\c\\nd\""));
  CHECK(contains(json, "\"connections\":3"));
  CHECK(contains(json, "\"prepared\":2"));
}

TEST_CASE("/status JSON stays valid for a queue name that is not UTF-8 (one stored before names were checked)") {
  metrics_snapshot s = sample_snapshot();
  s.queues[0].name = "bad\xff\xc0\x80name\xe2\x82";  // a stray byte, an overlong NUL, a cut-short sequence
  s.uptime_seconds = 12.3456;
  boost::json::value v = boost::json::parse(write_status_json(s));  // throws on invalid UTF-8
  CHECK(v.at("queues").at(0).at("name") == "bad\uFFFD\uFFFD\uFFFDname\uFFFD\uFFFD");
  CHECK(v.at("queues").at(0).at("depth") == 3);
  CHECK(v.at("uptime_seconds") == 12.346);
  CHECK(v.at("listeners_up") == false);
}

TEST_CASE("the queues kept for their own series: all up to the limit, then the deepest, ties by name") {
  std::vector<std::pair<std::uint64_t, std::string_view>> q{{1, "a0"}, {1, "a1"}, {1, "a2"}, {3, "b"}, {0, "c"}};
  CHECK(deepest_queues(q, 5) == std::vector<std::size_t>{0, 1, 2, 3, 4});
  CHECK(deepest_queues(q, 9) == std::vector<std::size_t>{0, 1, 2, 3, 4});
  CHECK(deepest_queues(q, 4) == std::vector<std::size_t>{0, 1, 2, 3});
  CHECK(deepest_queues(q, 3) == std::vector<std::size_t>{0, 1, 3});
  CHECK(deepest_queues(q, 1) == std::vector<std::size_t>{3});
  CHECK(deepest_queues(q, 0).empty());
  // The same name twice (a durable subscription and a queue can look alike): by position.
  std::vector<std::pair<std::uint64_t, std::string_view>> same{{2, "x"}, {2, "x"}, {2, "x"}};
  CHECK(deepest_queues(same, 2) == std::vector<std::size_t>{0, 1});
}

TEST_CASE("the broker-wide queue totals and the omitted count are in the exposition and /status") {
  metrics_snapshot s = sample_snapshot();
  s.totals.queues_by_kind = {{"queue", 7}, {"durable-subscription", 1}};
  s.totals.depth = 40;
  s.totals.enqueued = 90;
  s.queues_omitted = 6;
  std::string out = write_prometheus(s);
  CHECK(contains(out, "escrow_queues{kind=\"queue\"} 7\n"));
  CHECK(contains(out, "escrow_queues{kind=\"durable-subscription\"} 1\n"));
  CHECK(contains(out, "# TYPE escrow_queue_metrics_omitted gauge\nescrow_queue_metrics_omitted 6\n"));
  CHECK(contains(out, "escrow_messages_depth 40\n"));
  CHECK(contains(out, "# TYPE escrow_messages_enqueued_total counter\nescrow_messages_enqueued_total 90\n"));
  std::string json = write_status_json(s);
  CHECK(contains(json, "\"totals\":{\"queues\":8,\"enqueued\":90,\"acknowledged\":0,\"depth\":40,"));
  CHECK(contains(json, "\"queues_omitted\":6,\"queues\":["));
}
