// One client connection's network side, on its own strand of the I/O pool: a reading coroutine
// that parses frames and hands them to the core, a writing coroutine that sends whatever the core
// queued in one gather write (and heart-beats when it has been quiet), and a watchdog that closes
// a connection that says nothing (no CONNECT in time, or heart-beats missed). The session handles
// CONNECT itself (version and heart-beat negotiation); every later frame goes to the core in order.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <string>

#include "broker.h"
#include "config.h"
#include "outbound.h"

namespace escrow::broker {

class session : public outbound, public std::enable_shared_from_this<session> {
 public:
  session(boost::asio::ip::tcp::socket socket, broker& core, const broker_config& config);

  // Starts the coroutines. The session keeps itself alive until all of them end.
  void start();
  // Closes the connection now (server shutdown). Thread-safe.
  void stop();

  void send(std::string bytes) override;
  void send_and_close(std::string bytes) override;
  std::size_t pending_bytes() const override { return pending_bytes_.load(std::memory_order_relaxed); }

 private:
  using clock = std::chrono::steady_clock;
  boost::asio::awaitable<void> read_loop();
  boost::asio::awaitable<void> write_loop();
  boost::asio::awaitable<void> watchdog();
  // Handles a frame on the session's strand; returns false when the connection must stop reading.
  bool on_frame(frame& f);
  bool on_connect(const frame& f);
  void fail(const std::string& problem, const std::optional<std::string>& receipt);
  void enqueue(std::string bytes, bool close_after);
  void coroutine_done();

  boost::asio::ip::tcp::socket socket_;
  broker& core_;
  const broker_config& config_;
  std::uint64_t id_;
  std::string peer_;
  frame_parser parser_;

  // Strand state.
  std::deque<std::string> outgoing_;
  boost::asio::steady_timer wake_writer_;
  boost::asio::steady_timer watchdog_timer_;
  bool connected_ = false;
  bool closing_ = false;  // stop reading; write what is queued, then close
  bool reported_closed_ = false;
  int live_coroutines_ = 0;
  std::uint64_t heartbeat_send_ms_ = 0;
  std::uint64_t heartbeat_receive_ms_ = 0;
  clock::time_point started_ = clock::now();
  clock::time_point last_read_ = clock::now();
  std::size_t written_since_notice_ = 0;

  std::atomic<std::size_t> pending_bytes_{0};
};

}  // namespace escrow::broker
