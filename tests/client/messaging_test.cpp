// Producers and consumers against a real escrowd: message headers, priority, expiry, durable
// subscriptions, the prefetch window, receive timeouts and callbacks.
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "helpers.h"

namespace escrow::client::test {

TEST_CASE("call() returns the RECEIPT of an XA frame") {
  auto c = connect();
  CHECK(c->is_open());
  CHECK(c->connected().get("version") == "1.2");
  frame recover;
  recover.command = "XA-RECOVER";
  recover.add("flags", "TMSTARTRSCAN|TMENDRSCAN").add("count", "100");
  recover.add("receipt", "ignored-and-replaced");
  frame reply = c->call(recover);
  CHECK(reply.command == "RECEIPT");
  CHECK(reply.get("xa-result") == "XA_OK");
  CHECK(reply.has("xa-count"));
}

TEST_CASE("persistent, priority, expires and custom headers arrive") {
  std::string q = "/queue/" + unique("headers");
  auto c = connect();
  auto p = c->create_producer({.destination = q, .persistent = false, .priority = 6,
                               .time_to_live = std::chrono::minutes(10), .headers = {{"x-app", "billing"}}});
  std::int64_t before = epoch_ms();
  p.send(outgoing_message("one").header("x-order", "42").header("x-colon", "a:b\\c"));
  outgoing_message two("two");
  two.persistent = true;
  two.priority = 2;
  two.expires_at_ms = before + 3'600'000;
  two.content_type = "text/plain";
  p.send(two);

  auto consumer = c->create_consumer({.destination = q});
  message m1 = receive_one(*consumer);
  CHECK(m1.body() == "one");
  CHECK(!m1.persistent());
  CHECK(m1.priority() == 6);
  CHECK(m1.expires_at_ms() >= before + 600'000);
  CHECK(m1.expires_at_ms() <= epoch_ms() + 600'000);
  CHECK(m1.header("x-order") == "42");
  CHECK(m1.header("x-colon") == "a:b\\c");
  CHECK(m1.header("x-app") == "billing");
  CHECK(m1.destination() == q);
  CHECK(!m1.message_id().empty());
  CHECK(m1.subscription() == consumer->id());
  CHECK(m1.delivery_count() == 1);

  message m2 = receive_one(*consumer);
  CHECK(m2.body() == "two");
  CHECK(m2.persistent());
  CHECK(m2.priority() == 2);
  CHECK(m2.expires_at_ms() == before + 3'600'000);
  CHECK(m2.content_type() == "text/plain");
}

TEST_CASE("bad producer arguments are refused before anything is sent") {
  auto c = connect();
  CHECK_THROWS_AS(c->create_producer({.destination = "orders"}), error);
  CHECK_THROWS_AS(c->create_producer({.destination = "/queue/x", .priority = 10}), error);
  auto p = c->create_producer({.destination = "/queue/" + unique("bad")});
  try {
    p.send(outgoing_message("x").header("destination", "/queue/elsewhere"));
    FAIL("a reserved header was accepted");
  } catch (const error& e) {
    CHECK(e.which() == error::kind::invalid_argument);
  }
  outgoing_message m("x");
  m.priority = -1;
  CHECK_THROWS_AS(p.send(m), error);
  CHECK(c->is_open());
}

TEST_CASE("higher priority first; an expired message is never delivered") {
  std::string q = "/queue/" + unique("priority");
  auto c = connect();
  auto p = c->create_producer({.destination = q});
  outgoing_message low("low"), high("high"), expired("expired");
  low.priority = 1;
  high.priority = 9;
  expired.expires_at_ms = epoch_ms() - 1000;
  p.send(low);
  p.send(expired);
  p.send(high);
  auto consumer = c->create_consumer({.destination = q});
  CHECK(receive_one(*consumer).body() == "high");
  CHECK(receive_one(*consumer).body() == "low");
  expect_nothing(*consumer);
}

TEST_CASE("receive() with a timeout returns no message, in time") {
  auto c = connect();
  auto consumer = c->create_consumer({.destination = "/queue/" + unique("empty")});
  auto start = clock_type::now();
  auto m = consumer->receive(200ms);
  auto took = clock_type::now() - start;
  CHECK(!m.has_value());
  CHECK(took >= 200ms);
  CHECK(took < 200ms + 2000ms * slow());
  CHECK(!consumer->receive(0ms).has_value());
}

TEST_CASE("durable subscription keeps messages while its consumer is away") {
  std::string topic = "/topic/" + unique("durable");
  connect_options o = broker_options();
  o.client_id = unique("client");
  {
    auto c = connection::open(o);
    auto sub = c->create_consumer({.destination = topic, .durable_name = "audit"});
    auto p = c->create_producer({.destination = topic});
    p.send("while here");
    CHECK(receive_one(*sub).body() == "while here");
    sub->close();  // detaches; the subscription stays
    p.send("while away 1");
    p.send("while away 2");
  }
  {
    auto c = connection::open(o);
    auto sub = c->create_consumer({.destination = topic, .durable_name = "audit"});
    CHECK(receive_one(*sub).body() == "while away 1");
    CHECK(receive_one(*sub).body() == "while away 2");
    sub->unsubscribe_durable();  // ends it for good
    c->create_producer({.destination = topic}).send("nobody listens");
  }
  auto c = connection::open(o);
  auto sub = c->create_consumer({.destination = topic, .durable_name = "audit"});
  expect_nothing(*sub);
  sub->close();
  c->unsubscribe("audit");

  // Without a client_id the library refuses before the broker would.
  auto plain = connect();
  CHECK_THROWS_AS(plain->create_consumer({.destination = topic, .durable_name = "x"}), error);
}

TEST_CASE("the prefetch window bounds unacknowledged deliveries") {
  std::string q = "/queue/" + unique("window");
  auto c = connect();
  auto consumer = c->create_consumer({.destination = q, .mode = ack_mode::individual_acknowledge, .prefetch = 2});
  auto p = c->create_producer({.destination = q});
  for (int i = 0; i < 5; ++i) p.send(std::to_string(i));
  auto deadline = clock_type::now() + patience();
  while (consumer->buffered() < 2 && clock_type::now() < deadline) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(quiet());
  CHECK(consumer->buffered() == 2);  // not 5: the window is full
  message m0 = receive_one(*consumer);
  message m1 = receive_one(*consumer);
  std::this_thread::sleep_for(quiet());
  CHECK(consumer->buffered() == 0);  // taken but not acknowledged: still in the window
  consumer->acknowledge(m0);
  CHECK(receive_one(*consumer).body() == "2");  // one slot freed, one more delivery
  std::this_thread::sleep_for(quiet());
  CHECK(consumer->buffered() == 0);
  (void)m1;
}

TEST_CASE("callback mode hands every message to the callback, acknowledged after it returns") {
  std::string q = "/queue/" + unique("callback");
  auto c = connect();
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::string> got;
  std::atomic<bool> threw{false};
  auto consumer = c->create_consumer({.destination = q}, [&](const message& m) {
    if (m.body() == "fail-once" && !threw.exchange(true)) throw std::runtime_error("not processed");
    std::lock_guard lock(mutex);
    got.push_back(m.body());
    cv.notify_all();
  });
  CHECK_THROWS_AS(consumer->receive(10ms), error);
  auto p = c->create_producer({.destination = q});
  for (const char* body : {"a", "b", "fail-once", "c"}) p.send(body);
  {
    std::unique_lock lock(mutex);
    CHECK(cv.wait_for(lock, patience(), [&] { return got.size() >= 4; }));
  }
  consumer->close();
  std::lock_guard lock(mutex);
  // The message whose callback threw was NACKed and redelivered.
  CHECK(std::count(got.begin(), got.end(), "fail-once") == 1);
  CHECK(got.size() == 4);
  auto c2 = connect();
  auto other = c2->create_consumer({.destination = q});
  expect_nothing(*other);
}

}  // namespace escrow::client::test

namespace escrow::client::test {

TEST_CASE("call() and sends from several threads while a consumer receives on the same connection") {
  std::string q = "/queue/" + unique("threads");
  auto c = connect();
  auto consumer = c->create_consumer({.destination = q, .mode = ack_mode::client_acknowledge});
  constexpr int kPerThread = 20;
  std::vector<std::string> got;
  std::thread receiver([&] {
    while (got.size() < 2 * kPerThread) {
      auto m = consumer->receive(patience());
      if (!m) break;
      got.push_back(m->body());
      consumer->acknowledge(*m);
    }
  });
  auto work = [&](const std::string& name) {
    auto p = c->create_producer({.destination = q});
    for (int i = 0; i < kPerThread; ++i) {
      p.send(name + std::to_string(i));
      frame recover;
      recover.command = "XA-RECOVER";
      recover.add("flags", "TMSTARTRSCAN|TMENDRSCAN").add("count", "10");
      CHECK(c->call(recover).get("xa-result") == "XA_OK");
    }
  };
  std::thread a([&] { work("a"); });
  work("b");
  a.join();
  receiver.join();
  CHECK(got.size() == 2 * kPerThread);
}

TEST_CASE("a callback may close its own consumer") {
  std::string q = "/queue/" + unique("self-close");
  auto c = connect();
  std::atomic<int> calls{0};
  std::unique_ptr<consumer> consumer;
  std::mutex mutex;
  std::condition_variable cv;
  bool closed = false;
  consumer = c->create_consumer({.destination = q, .mode = ack_mode::individual_acknowledge}, [&](const message& m) {
    ++calls;
    consumer->acknowledge(m);
    consumer->close();
    std::lock_guard lock(mutex);
    closed = true;
    cv.notify_all();
  });
  auto p = c->create_producer({.destination = q});
  p.send("one");
  p.send("two");
  {
    std::unique_lock lock(mutex);
    CHECK(cv.wait_for(lock, patience(), [&] { return closed; }));
  }
  consumer.reset();  // joins the callback thread
  CHECK(calls.load() == 1);
  auto other = c->create_consumer({.destination = q});
  CHECK(receive_one(*other).body() == "two");
  expect_nothing(*other);
}

}  // namespace escrow::client::test
