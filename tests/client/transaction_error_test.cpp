// Local transactions and errors against a real escrowd: commit and rollback of sends and acks,
// an ERROR frame surfaced with the broker's message, and a broker killed under a waiting receive()
// (run on its own by test_client.py, which kills the broker).
#include <cstdio>

#include "helpers.h"

namespace escrow::client::test {

TEST_CASE("local transaction: sends are invisible until commit, gone after rollback") {
  std::string q = "/queue/" + unique("tx-send");
  auto c = connect();
  auto p = c->create_producer({.destination = q});
  auto consumer = c->create_consumer({.destination = q});

  transaction tx = c->begin();
  CHECK(tx.active());
  p.send("first", tx);
  p.send("second", tx);
  expect_nothing(*consumer);
  tx.commit();
  CHECK(!tx.active());
  CHECK(receive_one(*consumer).body() == "first");
  CHECK(receive_one(*consumer).body() == "second");
  CHECK_THROWS_AS(tx.commit(), error);  // already finished

  transaction rolled = c->begin();
  p.send("never", rolled);
  rolled.rollback();
  p.send("after");
  CHECK(receive_one(*consumer).body() == "after");

  {
    transaction abandoned = c->begin();
    p.send("abandoned", abandoned);
  }  // destroyed while active: rolled back
  p.send("last");
  CHECK(receive_one(*consumer).body() == "last");
}

TEST_CASE("local transaction: acknowledgements take effect at commit, rollback redelivers") {
  std::string q = "/queue/" + unique("tx-ack");
  auto c = connect();
  auto p = c->create_producer({.destination = q});
  p.send("m");
  auto consumer = c->create_consumer({.destination = q, .mode = ack_mode::individual_acknowledge});

  message m = receive_one(*consumer);
  transaction tx = c->begin();
  consumer->acknowledge(m, tx);
  tx.rollback();
  message again = receive_one(*consumer);  // back in the queue, to this consumer
  CHECK(again.body() == "m");
  CHECK(again.redelivered());

  transaction tx2 = c->begin();
  consumer->acknowledge(again, tx2);
  tx2.commit();
  consumer->close();
  auto c2 = connect();
  auto other = c2->create_consumer({.destination = q});
  expect_nothing(*other);
}

TEST_CASE("a broker ERROR is a client::error carrying the broker's message") {
  auto c = connect();
  auto p = c->create_producer({.destination = "/queue/" + unique("err")});
  frame bad;
  bad.command = "SEND";
  bad.add("destination", "/nowhere/x");
  try {
    c->call(bad);
    FAIL("the broker accepted an invalid destination");
  } catch (const error& e) {
    CHECK(e.which() == error::kind::broker_error);
    CHECK(std::string(e.what()).find("invalid destination") != std::string::npos);
  }
  CHECK(!c->is_open());
  try {
    p.send("after the error");
    FAIL("a send on a closed connection succeeded");
  } catch (const error& e) {
    CHECK(e.which() == error::kind::connection_lost);
    CHECK(std::string(e.what()).find("invalid destination") != std::string::npos);  // says why
  }

  // An ERROR answering a frame sent without a receipt surfaces on the next call.
  auto c2 = connect();
  frame unknown;
  unknown.command = "ACK";
  unknown.add("id", "no-such-ack");
  c2->send_frame(unknown);
  auto consumer_deadline = clock_type::now() + patience();
  while (c2->is_open() && clock_type::now() < consumer_deadline) std::this_thread::sleep_for(10ms);
  CHECK(!c2->is_open());
  CHECK_THROWS_AS(c2->begin(), error);
}

TEST_CASE("a refused connection says where and why") {
  connect_options o = broker_options();
  o.port = 1;  // nothing listens on port 1
  o.timeout = 2000ms;
  try {
    connection::open(o);
    FAIL("connected to port 1");
  } catch (const error& e) {
    CHECK(e.which() == error::kind::connection_lost);
    CHECK(std::string(e.what()).find("127.0.0.1:1") != std::string::npos);
  }
}

TEST_CASE("close() wakes a receive() waiting on another thread with connection_lost") {
  auto c = connect();
  auto consumer = c->create_consumer({.destination = "/queue/" + unique("closing")});
  std::atomic<bool> lost{false};
  std::thread waiter([&] {
    try {
      consumer->receive(std::chrono::minutes(2));
    } catch (const error& e) {
      lost = e.which() == error::kind::connection_lost;
    }
  });
  std::this_thread::sleep_for(100ms);
  auto start = clock_type::now();
  c->close();
  waiter.join();
  CHECK(lost.load());
  CHECK(clock_type::now() - start < patience());
  CHECK(!c->is_open());
  consumer.reset();  // after its connection closed: no error, nothing to tell the broker
}

// Run by test_client.py alone: it waits for READY, kills the broker with SIGKILL, and expects
// this to end promptly, with every waiting call woken by connection_lost.
TEST_CASE("lost connection: waiting calls wake when the broker dies" * doctest::skip()) {
  auto c = connect();
  std::atomic<int> lost_calls{0};
  c->on_lost([&](const error&) { ++lost_calls; });
  auto first = c->create_consumer({.destination = "/queue/" + unique("lost")});
  auto second = c->create_consumer({.destination = "/queue/" + unique("lost")});
  std::atomic<int> woken{0};
  auto wait = [&](consumer& q) {
    try {
      q.receive(std::chrono::minutes(2));
    } catch (const error& e) {
      if (e.which() == error::kind::connection_lost) ++woken;
      std::printf("woke with %s: %s\n", to_string(e.which()), e.what());
    }
  };
  auto start = clock_type::now();
  std::thread other([&] { wait(*second); });
  std::printf("READY\n");
  std::fflush(stdout);
  wait(*first);
  other.join();
  CHECK(woken.load() == 2);
  CHECK(clock_type::now() - start < 60s);
  CHECK(!c->is_open());
  CHECK(lost_calls.load() == 1);
  try {
    c->begin();
    FAIL("BEGIN on a lost connection succeeded");
  } catch (const error& e) {
    CHECK(e.which() == error::kind::connection_lost);
  }
}

}  // namespace escrow::client::test
