// Failure paths no healthy broker produces, against a scripted fake server on a loopback port:
// a call waiting for a RECEIPT when the server closes, a RECEIPT that never comes, a server that
// stops sending heart-beats, a server that never answers CONNECT. No escrowd needed.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "helpers.h"

namespace escrow::client::test {
namespace {

// Accepts one connection and runs `script(fd)` on it on its own thread.
class fake_server {
 public:
  template <typename Script>
  explicit fake_server(Script script) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener_, 4) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, script] {
      int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      script(fd);
      ::close(fd);
    });
  }
  ~fake_server() {
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }
  std::uint16_t port() const { return port_; }

 private:
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

// Reads until a NUL (the end of a frame without content-length) or the end of the stream.
bool read_frame(int fd) {
  char ch;
  for (;;) {
    ssize_t n = ::recv(fd, &ch, 1, 0);
    if (n <= 0) return false;
    if (ch == '\0') return true;
  }
}

// Writes `text` and the NUL that ends a frame.
void write_frame(int fd, std::string text) {
  text.push_back('\0');
  (void)::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
}

connect_options fake_options(std::uint16_t port) {
  connect_options o;
  o.port = port;
  o.timeout = 5000ms * slow();
  return o;
}

constexpr const char* kConnected = "CONNECTED\nversion:1.2\nheart-beat:0,0\n\n";

}  // namespace

TEST_CASE("a call waiting for its RECEIPT wakes with connection_lost when the server closes") {
  fake_server server([](int fd) {
    if (!read_frame(fd)) return;
    write_frame(fd, kConnected);
    read_frame(fd);  // the BEGIN; then close without answering
    std::this_thread::sleep_for(100ms);
  });
  auto c = connection::open(fake_options(server.port()));
  auto start = clock_type::now();
  try {
    c->begin();
    FAIL("BEGIN returned without a RECEIPT");
  } catch (const error& e) {
    CHECK(e.which() == error::kind::connection_lost);
    CHECK(std::string(e.what()).find("closed") != std::string::npos);
  }
  CHECK(clock_type::now() - start < 4000ms * slow());
  CHECK(!c->is_open());
}

TEST_CASE("a RECEIPT that never comes is a timeout, and a late one is ignored") {
  fake_server server([](int fd) {
    if (!read_frame(fd)) return;
    write_frame(fd, kConnected);
    read_frame(fd);  // the first call: never answered in time
    std::this_thread::sleep_for(400ms);
    write_frame(fd, "RECEIPT\nreceipt-id:receipt-1\n\n");
    // The second call: answered (its receipt id is receipt-2: ids are per connection serials).
    read_frame(fd);
    write_frame(fd, "RECEIPT\nreceipt-id:receipt-2\n\n");
    read_frame(fd);  // DISCONNECT
  });
  auto c = connection::open(fake_options(server.port()));
  frame ping;
  ping.command = "BEGIN";
  ping.add("transaction", "t");
  auto start = clock_type::now();
  try {
    c->call(ping, 150ms);
    FAIL("call() returned without a RECEIPT");
  } catch (const error& e) {
    CHECK(e.which() == error::kind::timeout);
    CHECK(std::string(e.what()).find("BEGIN") != std::string::npos);
  }
  CHECK(clock_type::now() - start < 150ms + 2000ms * slow());
  CHECK(c->is_open());
  std::this_thread::sleep_for(400ms);  // the late RECEIPT arrives and is dropped
  frame reply = c->call(ping, 5000ms * slow());
  CHECK(reply.get("receipt-id") == "receipt-2");
}

TEST_CASE("a server that stops sending heart-beats counts as lost") {
  fake_server server([](int fd) {
    if (!read_frame(fd)) return;
    // Promise a heart-beat every 200 ms, then stay silent.
    write_frame(fd, "CONNECTED\nversion:1.2\nheart-beat:200,0\n\n");
    char buffer[256];
    while (::recv(fd, buffer, sizeof buffer, 0) > 0) {
    }
  });
  connect_options o = fake_options(server.port());
  o.heartbeat_receive = 100ms;
  o.heartbeat_send = 100ms;
  auto c = connection::open(o);
  std::atomic<bool> told{false};
  c->on_lost([&](const error&) { told = true; });
  auto start = clock_type::now();
  try {
    // SUBSCRIBE gets no RECEIPT from this server; the missed heart-beats end the wait.
    c->create_consumer({.destination = "/queue/hb", .mode = ack_mode::no_acknowledge});
    FAIL("SUBSCRIBE returned without a RECEIPT");
  } catch (const error& e) {
    CHECK(e.which() == error::kind::connection_lost);
    CHECK(std::string(e.what()).find("heart-beat") != std::string::npos);
  }
  CHECK(clock_type::now() - start < 4000ms * slow());
  CHECK(told.load());
  CHECK(!c->is_open());
}

TEST_CASE("a server that never answers CONNECT is a timeout") {
  fake_server server([](int fd) {
    read_frame(fd);
    char buffer[256];
    while (::recv(fd, buffer, sizeof buffer, 0) > 0) {
    }
  });
  connect_options o = fake_options(server.port());
  o.timeout = 200ms;
  auto start = clock_type::now();
  try {
    connection::open(o);
    FAIL("open() returned without CONNECTED");
  } catch (const error& e) {
    CHECK(e.which() == error::kind::timeout);
  }
  CHECK(clock_type::now() - start < 200ms + 2000ms * slow());
}

TEST_CASE("a CONNECT the server refuses is a broker_error with its message") {
  fake_server server([](int fd) {
    if (!read_frame(fd)) return;
    write_frame(fd, "ERROR\nmessage:no common protocol version\ncontent-type:text/plain\n\nspeak 1.2");
    std::this_thread::sleep_for(50ms);
  });
  try {
    connection::open(fake_options(server.port()));
    FAIL("open() succeeded against an ERROR");
  } catch (const error& e) {
    CHECK(e.which() == error::kind::broker_error);
    CHECK(std::string(e.what()) == "no common protocol version");
    CHECK(e.detail() == "speak 1.2");
  }
}

TEST_CASE("close() from the on_lost listener is allowed: the connection is then destroyed elsewhere") {
  // The listener runs on the reader thread; close() there must not join that thread nor wait
  // for the destructor's join, and the connection destroyed meanwhile on this thread must wait
  // for the reader to end.
  std::promise<void> listening;
  std::shared_future<void> installed = listening.get_future().share();
  fake_server server([installed](int fd) {
    if (!read_frame(fd)) return;
    write_frame(fd, kConnected);
    installed.wait_for(patience());
  });  // then closes: the connection is lost
  auto c = connection::open(fake_options(server.port()));
  std::promise<std::string> lost;
  c->on_lost([&](const error& e) {
    c->close();
    lost.set_value(e.what());
    // Still on the reader thread while the connection is destroyed below. (Before the fix the
    // reader was detached here and went on with the freed session; its only use of it then, a
    // condition variable's broadcast, is one ASan does not see, so this cannot show that bug.)
    std::this_thread::sleep_for(quiet());
  });
  listening.set_value();
  auto reason = lost.get_future();
  REQUIRE(reason.wait_for(4000ms * slow()) == std::future_status::ready);
  CHECK(reason.get().find("closed") != std::string::npos);
  c.reset();  // while the reader thread is still in the listener: this waits for it to end
}

}  // namespace escrow::client::test
