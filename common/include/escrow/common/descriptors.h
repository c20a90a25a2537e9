// What an accept loop needs when the process runs out of file descriptors (EMFILE, ENFILE): a
// spare descriptor, held from the start, which it gives up for a moment to accept the connections
// that wait and close them at once (each peer sees a close, or a short refusal, instead of hanging
// in the listen queue), and a throttle that lets a message through once per interval. POSIX only,
// header-only: the STOMP listeners (broker/net/server.cpp) and the HTTP endpoint
// (broker/admin/http_server.cpp) each keep one spare_descriptor, used on their accept strand.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace escrow {

// True for the errors that say the process or the system has no descriptor (or no memory) for a
// new socket: an accept loop must pause on them, not retry at once (it would spin on the same error).
inline bool out_of_descriptors(int error) {
  return error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM;
}

// One descriptor (/dev/null) kept open so that, with none left, one can still be freed for accept.
class spare_descriptor {
 public:
  spare_descriptor() { reopen(); }
  ~spare_descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  spare_descriptor(const spare_descriptor&) = delete;
  spare_descriptor& operator=(const spare_descriptor&) = delete;

  // Gives the spare up, accepts up to `most` connections waiting on the listening socket `listener`
  // and closes each at once, after writing `farewell` to it if the socket takes it without waiting;
  // then takes the spare back (when a descriptor is free again). Returns how many it closed.
  // Call it only from the thread or strand that accepts on `listener`, with no accept under way.
  int shed(int listener, std::string_view farewell, int most) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    int closed = 0;
    while (closed < most && readable(listener)) {
      int s = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (s < 0) break;  // EMFILE again (another thread took the descriptor), or nothing waits
      if (!farewell.empty()) (void)!::send(s, farewell.data(), farewell.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      // What the peer already sent is read first: closing with unread bytes would reset the
      // connection, and the peer might lose the farewell.
      char sink[4096];
      while (::recv(s, sink, sizeof sink, MSG_DONTWAIT) > 0) {
      }
      ::close(s);
      ++closed;
    }
    reopen();
    return closed;
  }

  bool held() const { return fd_ >= 0; }

 private:
  void reopen() {
    if (fd_ < 0) fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  // A connection waits (accept would not block, whatever the socket's mode).
  static bool readable(int listener) {
    pollfd p{listener, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
  }
  int fd_ = -1;
};

// Lets one event through per interval, counting the others: due() is true for the first event and
// then for the first after each `interval`; suppressed() is how many it held back before that one.
// Thread-safe (the refusals of sessions on different strands share one).
class log_throttle {
 public:
  explicit log_throttle(std::chrono::steady_clock::duration interval) : interval_(interval.count()) {}

  // Whether this event should be logged; when true, `held_back` is how many were not since the last.
  bool due(std::uint64_t& held_back) {
    auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    auto last = last_.load();
    if (last != kNever && now - last < interval_) {
      held_back_.fetch_add(1);
      return false;
    }
    if (!last_.compare_exchange_strong(last, now)) {
      held_back_.fetch_add(1);
      return false;
    }
    held_back = held_back_.exchange(0);
    return true;
  }

 private:
  static constexpr std::int64_t kNever = INT64_MIN;
  std::int64_t interval_;
  std::atomic<std::int64_t> last_{kNever};
  std::atomic<std::uint64_t> held_back_{0};
};

}  // namespace escrow
