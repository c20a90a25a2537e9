// The acknowledgement modes against a real escrowd: what each mode leaves for the next consumer
// once the connection has gone (DISCONNECT with receipt: everything before it is processed).
#include "helpers.h"

namespace escrow::client::test {
namespace {

// Sends bodies "0".."n-1" to `destination`.
void send_numbers(connection& c, const std::string& destination, int n) {
  auto p = c.create_producer({.destination = destination});
  for (int i = 0; i < n; ++i) p.send(std::to_string(i));
}

// What a fresh consumer finds on the queue (auto-acknowledged, so it also empties it).
std::vector<std::string> remaining(const std::string& destination) {
  auto c = connect();
  auto q = c->create_consumer({.destination = destination, .mode = ack_mode::no_acknowledge});
  std::vector<std::string> bodies;
  while (auto m = q->receive(quiet() * 2)) bodies.push_back(m->body());
  return bodies;
}

}  // namespace

TEST_CASE("stomp ack headers of each mode") {
  CHECK(std::string(stomp_ack_header(ack_mode::auto_acknowledge)) == "client-individual");
  CHECK(std::string(stomp_ack_header(ack_mode::client_acknowledge)) == "client");
  CHECK(std::string(stomp_ack_header(ack_mode::individual_acknowledge)) == "client-individual");
  CHECK(std::string(stomp_ack_header(ack_mode::dups_ok_acknowledge)) == "client");
  CHECK(std::string(stomp_ack_header(ack_mode::no_acknowledge)) == "auto");
}

TEST_CASE("auto_acknowledge: every received message is acknowledged") {
  std::string q = "/queue/" + unique("auto");
  {
    auto c = connect();
    send_numbers(*c, q, 3);
    auto consumer = c->create_consumer({.destination = q, .mode = ack_mode::auto_acknowledge});
    CHECK(receive_one(*consumer).body() == "0");
    CHECK(receive_one(*consumer).body() == "1");
    CHECK_THROWS_AS(consumer->acknowledge(message()), error);  // not a client mode
  }
  CHECK(remaining(q) == std::vector<std::string>{"2"});
}

TEST_CASE("client_acknowledge is cumulative; an unacknowledged message comes back after close") {
  std::string q = "/queue/" + unique("client");
  {
    auto c = connect();
    send_numbers(*c, q, 4);
    auto consumer = c->create_consumer({.destination = q, .mode = ack_mode::client_acknowledge});
    message m0 = receive_one(*consumer);
    message m1 = receive_one(*consumer);
    message m2 = receive_one(*consumer);
    CHECK(m2.body() == "2");
    CHECK(!m0.ack_id().empty());
    consumer->acknowledge(m1);  // covers m0 and m1
    consumer->acknowledge(m0);  // already covered: nothing is sent (the broker would refuse it)
    CHECK(c->is_open());
  }
  // m2 was delivered but not acknowledged: it comes back, redelivered, before "3".
  auto c = connect();
  auto consumer = c->create_consumer({.destination = q, .mode = ack_mode::client_acknowledge});
  message again = receive_one(*consumer);
  CHECK(again.body() == "2");
  CHECK(again.redelivered());
  CHECK(again.delivery_count() == 2);
  message next = receive_one(*consumer);
  CHECK(next.body() == "3");
  consumer->acknowledge(next);
  consumer->close();
  CHECK(remaining(q).empty());
}

TEST_CASE("individual_acknowledge acknowledges one message only") {
  std::string q = "/queue/" + unique("individual");
  {
    auto c = connect();
    send_numbers(*c, q, 3);
    auto consumer = c->create_consumer({.destination = q, .mode = ack_mode::individual_acknowledge});
    message m0 = receive_one(*consumer);
    message m1 = receive_one(*consumer);
    message m2 = receive_one(*consumer);
    consumer->acknowledge(m1);
    CHECK_THROWS_AS(consumer->acknowledge(m1), error);  // twice: refused before it reaches the broker
    consumer->reject(m2);                               // NACK: back to the queue
    (void)m0;                                           // left unacknowledged
  }
  auto back = remaining(q);
  std::sort(back.begin(), back.end());
  CHECK(back == std::vector<std::string>{"0", "2"});
}

TEST_CASE("dups_ok_acknowledge acknowledges lazily, in batches and at close") {
  std::string q = "/queue/" + unique("dupsok");
  {
    auto c = connect();
    send_numbers(*c, q, 25);
    auto consumer = c->create_consumer({.destination = q, .mode = ack_mode::dups_ok_acknowledge, .dups_ok_batch = 10});
    for (int i = 0; i < 25; ++i) CHECK(receive_one(*consumer).body() == std::to_string(i));
    // The last 5 are acknowledged when receive() is about to wait, or at close at the latest.
    expect_nothing(*consumer);
  }
  CHECK(remaining(q).empty());

  // Across a batch boundary, with a window smaller than the batch: waiting flushes, so a quiet
  // consumer never holds its window forever.
  std::string q2 = "/queue/" + unique("dupsok-window");
  auto c = connect();
  auto consumer = c->create_consumer(
      {.destination = q2, .mode = ack_mode::dups_ok_acknowledge, .prefetch = 2, .dups_ok_batch = 10});
  send_numbers(*c, q2, 6);
  for (int i = 0; i < 6; ++i) CHECK(receive_one(*consumer).body() == std::to_string(i));
}

TEST_CASE("no_acknowledge: a delivered message counts as consumed") {
  std::string q = "/queue/" + unique("noack");
  {
    auto c = connect();
    send_numbers(*c, q, 2);
    auto consumer = c->create_consumer({.destination = q, .mode = ack_mode::no_acknowledge});
    message m = receive_one(*consumer);
    CHECK(m.body() == "0");
    CHECK(m.ack_id().empty());
    // Wait until "1" has been delivered too (buffered), then drop the connection with it unread.
    auto deadline = clock_type::now() + patience();
    while (consumer->buffered() < 1 && clock_type::now() < deadline) std::this_thread::sleep_for(10ms);
    CHECK(consumer->buffered() == 1);
  }
  CHECK(remaining(q).empty());
}

}  // namespace escrow::client::test
