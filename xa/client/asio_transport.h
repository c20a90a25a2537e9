// The transports on Boost.Asio (internal to libescrow: no public header includes this, so
// applications never see Asio or OpenSSL). asio_transport<Stream> is the byte stream of
// transport.h over an Asio stream: a TCP socket (tcp_transport.cpp) or an SSL stream over one
// (tls_transport.cpp).
//
// Threads. Each transport has an io_context of its own, and only one thread ever runs it: the
// session's reader, inside read_some() (before the reader starts, connect_*() run it on the
// caller's thread). So every operation on the stream, and every handler, runs on that thread,
// one at a time, as an SSL stream requires, without a lock around OpenSSL. A writer does not
// touch the stream, with one exception (send_now: a TCP socket takes a non-blocking send from a
// writer while no write is under way); it appends its bytes to queued_ and, unless a write is
// under way already, posts one to the io_context; it returns at once, as a send() into the
// kernel's buffer would.
// The reader's thread writes what has queued up, all of it in one write, as the broker's sessions
// do. Only when more than kQueueLimit bytes wait does a writer wait for them to go (on cv_), so
// a broker that stops reading still holds senders up until the write timeout fails the
// connection. mutex_ guards the queue and the flags below and is never held while running the
// io_context.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "transport.h"

namespace escrow::client::detail {

namespace asio = boost::asio;

// Runs `io` on this thread until `done` is true or `timeout` passes; true if done. No other
// thread may be running `io`.
bool run_until(asio::io_context& io, const bool& done, std::chrono::milliseconds timeout);

// Connects `socket` (of `io`) to host:port within `timeout` per address, close-on-exec, with
// TCP_NODELAY. False with *error set ("cannot resolve HOST: ...", "cannot connect to HOST:PORT:
// reason (is escrowd running there?)").
bool connect_socket(asio::io_context& io, asio::ip::tcp::socket& socket, const std::string& host,
                    std::uint16_t port, std::chrono::milliseconds timeout, std::string* error);

inline constexpr const char* kShutDown = "the connection was shut down";
// Bytes a writer may leave queued before it waits for the reader's thread to write them.
inline constexpr std::size_t kQueueLimit = 1 << 20;
inline constexpr const char* kWriteTimedOut =
    "writing to the broker timed out: it is not reading (overloaded or hung)";

// Stream: asio::ip::tcp::socket or asio::ssl::stream<asio::ip::tcp::socket>.
template <typename Stream>
class asio_transport : public transport {
 public:
  ~asio_transport() override = default;

  asio::io_context& io() { return io_; }
  Stream& stream() { return stream_; }

  long read_some(char* buffer, std::size_t size, std::string* error) override {
    bool writes_waiting;
    {
      std::lock_guard lock(mutex_);
      if (shut_) {
        *error = kShutDown;
        return -1;
      }
      running_ = true;
      reader_ = std::this_thread::get_id();
      writes_waiting = writing_;
    }
    boost::system::error_code ec;
    std::size_t n = 0;
    // What has arrived already is read at once (one recv, no trip through the io_context), when
    // the stream allows it; writes posted meanwhile go out before this returns.
    bool done = read_now(buffer, size, n, ec);
    if (done && writes_waiting) io_.poll();
    if (!done) {
      stream_.async_read_some(asio::buffer(buffer, size), [&](const boost::system::error_code& e, std::size_t count) {
        done = true;
        ec = e;
        n = count;
      });
      // Runs the writers' posted writes too while it waits.
      while (!done && io_.run_one() > 0) {
      }
    }
    bool shut;
    {
      std::lock_guard lock(mutex_);
      running_ = false;
      shut = shut_;
      cv_.notify_all();
    }
    // shutdown() during the wait left the closing to this thread (see shutdown()).
    if (shut) close_stream();
    if (!done) {
      *error = kShutDown;
      return -1;
    }
    if (!ec) return static_cast<long>(n);
    if (is_end_of_stream(ec)) return 0;
    if (shut) *error = kShutDown;
    else if (!failure_.empty()) *error = failure_;  // a write failed first (and closed the stream)
    else *error = "reading from the broker failed: " + describe(ec);
    return -1;
  }

  bool write_all(std::string_view data, std::string* error) override {
    if (data.empty()) return true;
    std::unique_lock lock(mutex_);
    auto failed = [&] {
      if (!write_error_.empty()) *error = write_error_;  // the cause, also once shut down for it
      else if (shut_) *error = kShutDown;
      else return false;
      return true;
    };
    if (failed()) return false;
    if (queued_.size() >= kQueueLimit) {
      if (reader_ == std::this_thread::get_id()) {  // it would wait for itself
        *error = "cannot wait to write to the broker on the connection's reader thread";
        return false;
      }
      // Once shut down with no thread in the io_context, none ever runs it again.
      cv_.wait(lock, [&] { return queued_.size() < kQueueLimit || shut_ || !write_error_.empty(); });
      if (failed()) return false;
    }
    if (!writing_ && queued_.empty() && !closed_) {
      // Nothing waits to go and the reader's thread is not writing: the stream may take it now,
      // from this thread (a TCP socket can; see send_now).
      boost::system::error_code ec;
      data.remove_prefix(send_now(data, ec));
      if (ec) {
        *error = "writing to the broker failed: " + ec.message();
        return false;
      }
      if (data.empty()) return true;
    }
    queued_.append(data);
    if (!writing_) {
      writing_ = true;
      asio::post(io_, [this] { write_queued(); });
    }
    return true;
  }

  void shutdown() override {
    std::unique_lock lock(mutex_);
    if (shut_) return;
    shut_ = true;
    cv_.notify_all();
    if (running_) {
      // The reader's thread owns the stream now: it closes it, either in this handler or, should
      // its read end first, on its way out of read_some().
      asio::post(io_, [this] { close_stream(); });
      return;
    }
    // No thread runs the io_context, and none will (read_some() sees shut_): this one may close.
    lock.unlock();
    close_stream();
  }

 protected:
  template <typename... Args>
  explicit asio_transport(std::chrono::milliseconds write_timeout, Args&&... args)
      : stream_(io_, std::forward<Args>(args)...), timer_(io_), write_timeout_(write_timeout) {}

  // On the reader's thread: reads what has arrived without waiting, if the stream can; false
  // when nothing has (or it cannot), and read_some() waits in the io_context.
  virtual bool read_now(char*, std::size_t, std::size_t&, boost::system::error_code&) { return false; }
  // On a writer's thread, holding mutex_, while the reader's thread may be reading but is not
  // writing: sends what the stream takes without waiting; the rest is queued. An error other
  // than "would block" in *ec. A stream that cannot (TLS: its SSL object is the reader's) sends
  // nothing.
  virtual std::size_t send_now(std::string_view, boost::system::error_code&) { return 0; }
  // On the io thread: whether a write failed or timed out (the stream is broken).
  bool write_has_failed() const { return !failure_.empty(); }
  // On the io thread: an error in words, for "reading from / writing to the broker failed: ...".
  virtual std::string describe(const boost::system::error_code& ec) { return ec.message(); }
  // On the io thread (or the only thread left): whether `ec` from a read is the broker closing.
  virtual bool is_end_of_stream(const boost::system::error_code& ec) { return ec == asio::error::eof; }
  // Ends the connection: the socket shut down and closed, pending operations cancelled. Runs on
  // the thread that owns the stream; idempotent.
  virtual void close_stream() {
    boost::system::error_code ignored;
    timer_.cancel();
    std::lock_guard lock(mutex_);  // not while a writer is in send_now(): its descriptor stays
    closed_ = true;
    stream_.lowest_layer().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    stream_.lowest_layer().close(ignored);
  }

 private:
  // On the io thread: takes what the writers queued and writes it; again until the queue is
  // empty, then it is idle until a writer posts this again.
  void write_queued() {
    {
      std::lock_guard lock(mutex_);
      sending_.clear();
      sending_.swap(queued_);  // both keep their capacity: no allocation once warm
      if (sending_.empty() || closed_ || !write_error_.empty()) {
        writing_ = false;
        sending_.clear();
        cv_.notify_all();
        return;
      }
      cv_.notify_all();  // room in the queue again
    }
    write_next(0);
  }

  // On the io thread: writes sending_ from `offset`, with the write timeout measured from here
  // (a broker that takes no byte for that long is not reading).
  void write_next(std::size_t offset) {
    std::uint64_t serial = ++write_serial_;
    if (write_timeout_.count() > 0) {
      timer_.expires_after(write_timeout_);
      timer_.async_wait([this, serial](const boost::system::error_code& ec) {
        if (ec || serial != write_serial_) return;  // cancelled, or that write finished
        fail_writing(kWriteTimedOut);
      });
    }
    stream_.async_write_some(asio::buffer(sending_.data() + offset, sending_.size() - offset),
                             [this, offset](const boost::system::error_code& ec, std::size_t n) {
                               ++write_serial_;
                               timer_.cancel();
                               if (ec) {
                                 fail_writing(closed_ ? std::string(kShutDown)
                                                      : "writing to the broker failed: " + describe(ec));
                                 return;
                               }
                               if (offset + n < sending_.size()) write_next(offset + n);
                               else write_queued();
                             });
  }

  // On the io thread: the first write failure ends the connection. Later writes get `why`, the
  // reader (its read cut off by the close) too, so that whichever reports it names the cause.
  void fail_writing(std::string why) {
    if (failure_.empty()) failure_ = why;
    {
      std::lock_guard lock(mutex_);
      if (write_error_.empty()) write_error_ = failure_;
      writing_ = false;
      queued_.clear();
      cv_.notify_all();
    }
    close_stream();
  }

  // Declared first: destroyed last, after the stream and the timer that belong to it.
  asio::io_context io_;
  // An io_context whose work runs out stops itself until restart(); this keeps it going between
  // one read and the next.
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};

 protected:
  Stream stream_;

 private:
  asio::steady_timer timer_;  // the write timeout
  const std::chrono::milliseconds write_timeout_;  // 0: none
  // On the io thread only:
  std::uint64_t write_serial_ = 0;  // tells a timer expiry of an earlier write from the current one
  std::string failure_;             // why the stream failed first (a write's timeout or error)
  bool closed_ = false;             // close_stream() ran (written under mutex_ too: send_now reads it)
  std::string sending_;             // the bytes being written, taken from queued_

  std::mutex mutex_;
  std::condition_variable cv_;
  bool shut_ = false;     // guarded by mutex_: shutdown() was called
  bool running_ = false;  // guarded by mutex_: read_some() is running the io_context
  std::thread::id reader_;  // guarded by mutex_: the thread that calls read_some()
  std::string queued_;      // guarded by mutex_: bytes written by write_all(), not yet taken
  bool writing_ = false;    // guarded by mutex_: write_queued() is posted or under way
  std::string write_error_;  // guarded by mutex_: why writing failed (then every write fails)
};

}  // namespace escrow::client::detail
