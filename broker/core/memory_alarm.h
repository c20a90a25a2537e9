// The broker-wide memory watermark (docs/security.md, "Limits"), RabbitMQ's memory alarm: every
// 100 ms the process's anonymous resident memory (RssAnon: heap and stacks, not LMDB's map) is read; above limits.memory-high-watermark the alarm is
// set, and sessions stop reading from connections that have sent a SEND (producers) until it is
// below again, while every other connection goes on (consumers' ACKs are what frees memory).
// While it is set, freed heap is handed back to the system (malloc_trim) so that the measure can
// fall. Thread-safe to read; the timer runs on the I/O context.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>

namespace escrow::broker {

class memory_alarm {
 public:
  // `watermark` 0: 40% of the machine's physical memory (RabbitMQ's default).
  memory_alarm(boost::asio::io_context& io, std::uint64_t watermark);
  void start();  // the first measure now, then every 100 ms

  bool set() const { return set_.load(std::memory_order_relaxed); }

 private:
  void measure();

  boost::asio::steady_timer timer_;
  const std::uint64_t watermark_;
  std::atomic<bool> set_{false};
  std::chrono::steady_clock::time_point last_trim_{};  // the timer's own: malloc_trim at most once a second
};

// The process's resident memory that no file backs (RssAnon, from /proc/self/statm), in bytes; 0
// when it cannot be read.
std::uint64_t resident_memory_bytes();

}  // namespace escrow::broker
