// The transports on Boost.Asio (internal to libescrow: no public header includes this, so
// applications never see Asio or OpenSSL). asio_transport<Stream> is the byte stream of
// transport.h over an Asio stream: a TCP socket (tcp_transport.cpp) or an SSL stream over one
// (tls_transport.cpp).
//
// Threads. Each transport has an io_context of its own, and only one thread ever runs it: the
// session's reader, inside read_some() (before the reader starts, connect_*() run it on the
// caller's thread). So every operation on the stream, and every handler, runs on that thread,
// one at a time, as an SSL stream requires, without a lock around OpenSSL. A writer does not
// touch the stream: it posts its write to the io_context and waits on cv_ until the reader's
// thread has carried it out (or the transport is shut down and no thread will run the io_context
// again). mutex_ guards the flags below and is never held while running the io_context.
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
    {
      std::lock_guard lock(mutex_);
      if (shut_) {
        *error = kShutDown;
        return -1;
      }
      running_ = true;
      reader_ = std::this_thread::get_id();
    }
    bool done = false;
    boost::system::error_code ec;
    std::size_t n = 0;
    stream_.async_read_some(asio::buffer(buffer, size), [&](const boost::system::error_code& e, std::size_t count) {
      done = true;
      ec = e;
      n = count;
    });
    // Runs the writers' posted writes too while it waits.
    while (!done && io_.run_one() > 0) {
    }
    // And what is ready behind the read: a write that went out before the broker closed (a
    // CONNECT before the TLS alert that refuses it) completes, rather than failing as shut down.
    if (done && ec) io_.poll();
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
    write_request request{data, false, {}};
    std::unique_lock lock(mutex_);
    if (shut_) {
      *error = kShutDown;
      return false;
    }
    if (reader_ == std::this_thread::get_id()) {  // it would wait for itself
      *error = "cannot write to the broker on the connection's reader thread";
      return false;
    }
    asio::post(io_, [this, &request] { write_next(request); });
    // Once shut down with no thread in the io_context, none ever runs it again: the request is
    // never touched after that, and may go.
    cv_.wait(lock, [&] { return request.done || (shut_ && !running_); });
    if (!request.done) {
      *error = kShutDown;
      return false;
    }
    if (!request.error.empty()) {
      *error = std::move(request.error);
      return false;
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

  // On the io thread: whether a write failed or timed out (the stream is broken).
  bool write_failed() const { return !failure_.empty(); }
  // On the io thread: an error in words, for "reading from / writing to the broker failed: ...".
  virtual std::string describe(const boost::system::error_code& ec) { return ec.message(); }
  // On the io thread (or the only thread left): whether `ec` from a read is the broker closing.
  virtual bool is_end_of_stream(const boost::system::error_code& ec) { return ec == asio::error::eof; }
  // Ends the connection: the socket shut down and closed, pending operations cancelled. Runs on
  // the thread that owns the stream; idempotent.
  virtual void close_stream() {
    closed_ = true;
    boost::system::error_code ignored;
    timer_.cancel();
    stream_.lowest_layer().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    stream_.lowest_layer().close(ignored);
  }

 private:
  // A write_all() in progress; lives on the writer's stack. `data` shrinks as bytes go out.
  struct write_request {
    std::string_view data;
    bool done = false;   // guarded by mutex_
    std::string error;   // set before done
  };

  // On the io thread: writes some of the request, with the write timeout measured from here (a
  // broker that takes no byte for that long is not reading).
  void write_next(write_request& request) {
    if (closed_) {
      finish(request, failure_.empty() ? kShutDown : failure_);
      return;
    }
    std::uint64_t serial = ++write_serial_;
    if (write_timeout_.count() > 0) {
      timer_.expires_after(write_timeout_);
      timer_.async_wait([this, serial](const boost::system::error_code& ec) {
        if (ec || serial != write_serial_) return;  // cancelled, or that write finished
        if (failure_.empty()) failure_ = kWriteTimedOut;
        close_stream();  // the write completes with operation_aborted
      });
    }
    stream_.async_write_some(asio::buffer(request.data),
                             [this, &request](const boost::system::error_code& ec, std::size_t n) {
                               ++write_serial_;
                               timer_.cancel();
                               if (ec) {
                                 if (failure_.empty() && !closed_) failure_ = "writing to the broker failed: " + describe(ec);
                                 finish(request, failure_.empty() ? kShutDown : failure_);
                                 return;
                               }
                               request.data.remove_prefix(n);
                               if (request.data.empty()) finish(request, "");
                               else write_next(request);
                             });
  }

  // On the io thread: hands the request back to its writer, which may return at once.
  void finish(write_request& request, std::string error) {
    std::lock_guard lock(mutex_);
    request.error = std::move(error);
    request.done = true;
    cv_.notify_all();
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
  bool closed_ = false;             // close_stream() ran

  std::mutex mutex_;
  std::condition_variable cv_;
  bool shut_ = false;     // guarded by mutex_: shutdown() was called
  bool running_ = false;  // guarded by mutex_: read_some() is running the io_context
  std::thread::id reader_;  // guarded by mutex_: the thread that calls read_some()
};

}  // namespace escrow::client::detail
