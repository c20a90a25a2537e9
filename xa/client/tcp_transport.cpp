// The plain TCP transport: a blocking socket with a connect deadline (non-blocking connect and
// poll) and a send timeout (SO_SNDTIMEO), so that no write can hang forever on a broker that
// stopped reading.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "transport.h"

namespace escrow::client::detail {
namespace {

std::string system_message(int code) { return std::strerror(code); }

class tcp_transport final : public transport {
 public:
  explicit tcp_transport(int fd) : fd_(fd) {}
  ~tcp_transport() override { ::close(fd_); }

  long read_some(char* buffer, std::size_t size, std::string* error) override {
    for (;;) {
      if (shut_.load()) {
        *error = "the connection was shut down";
        return -1;
      }
      ssize_t n = ::recv(fd_, buffer, size, 0);
      if (n >= 0) return static_cast<long>(n);
      if (errno == EINTR) continue;
      *error = "reading from the broker failed: " + system_message(errno);
      return -1;
    }
  }

  bool write_all(std::string_view data, std::string* error) override {
    while (!data.empty()) {
      if (shut_.load()) {
        *error = "the connection was shut down";
        return false;
      }
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
          *error = "writing to the broker timed out: it is not reading (overloaded or hung)";
        else
          *error = "writing to the broker failed: " + system_message(errno);
        return false;
      }
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  void shutdown() override {
    if (!shut_.exchange(true)) ::shutdown(fd_, SHUT_RDWR);
  }

 private:
  int fd_;
  std::atomic<bool> shut_{false};
};

// Connects `fd` to `address` within `timeout_ms`; 0 or an errno value.
int connect_within(int fd, const sockaddr* address, socklen_t length, int timeout_ms) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return errno;
  int rc = ::connect(fd, address, length);
  int result = 0;
  if (rc < 0 && errno != EINPROGRESS) {
    result = errno;
  } else if (rc < 0) {
    pollfd p{fd, POLLOUT, 0};
    int n;
    do {
      n = ::poll(&p, 1, timeout_ms);
    } while (n < 0 && errno == EINTR);
    if (n == 0) {
      result = ETIMEDOUT;
    } else if (n < 0) {
      result = errno;
    } else {
      socklen_t len = sizeof result;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &result, &len) < 0) result = errno;
    }
  }
  if (result == 0 && ::fcntl(fd, F_SETFL, flags) < 0) result = errno;
  return result;
}

}  // namespace

int connect_socket(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout,
                   std::string* error) {
  std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    *error = "cannot resolve " + host + ": " + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  int last = ECONNREFUSED;
  auto timeout_ms = static_cast<int>(std::max<std::chrono::milliseconds::rep>(timeout.count(), 1));
  for (addrinfo* a = found; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = errno;
      continue;
    }
    last = connect_within(fd, a->ai_addr, a->ai_addrlen, timeout_ms);
    if (last == 0) break;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    *error = "cannot connect to " + where + ": " + system_message(last) + " (is escrowd running there?)";
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

std::unique_ptr<transport> connect_tcp(const std::string& host, std::uint16_t port,
                                       std::chrono::milliseconds timeout,
                                       std::chrono::milliseconds write_timeout, std::string* error) {
  int fd = connect_socket(host, port, timeout, error);
  if (fd < 0) return nullptr;
  if (write_timeout.count() > 0) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(write_timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((write_timeout.count() % 1000) * 1000);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  return std::make_unique<tcp_transport>(fd);
}

}  // namespace escrow::client::detail
