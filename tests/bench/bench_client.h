// What the benchmark clients (loadgen, txgen) share: option-parsing and timing helpers, and
// stomp_connection, a blocking-socket STOMP 1.2 client connection built on escrow::frame_parser
// and escrow::encode_to. Header-only; a connection belongs to one thread.
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "escrow/frame.h"

namespace escrow::bench {

using clock_type = std::chrono::steady_clock;
using time_point = clock_type::time_point;

// ---------------------------------------------------------------------------------------------
// Options

// The whole of `text` as a number.
template <typename T>
inline bool parse_number(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

// The whole of `text` as a non-negative number of seconds.
inline bool parse_seconds(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size() && out >= 0;
}

// What a program's option setter made of one "--name value" pair.
enum class option_value { ok, bad, unknown };

// Walks argv as "--name value" pairs, handing each to `set(name, value)` (which returns an
// option_value). False, after saying why on stderr (prefixed "<program>: "), on -h/--help, a
// name without a value, an unknown name or a bad value.
template <typename Set>
inline bool parse_option_pairs(const char* program, int argc, char** argv, Set&& set) {
  for (int i = 1; i < argc; ++i) {
    std::string_view name = argv[i];
    if (name == "-h" || name == "--help") return false;
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", program, argv[i]);
      return false;
    }
    std::string value = argv[++i];
    option_value r = set(name, value);
    if (r == option_value::unknown) {
      std::fprintf(stderr, "%s: unknown option %s\n", program, argv[i - 1]);
      return false;
    }
    if (r == option_value::bad) {
      std::fprintf(stderr, "%s: bad value '%s' for %s\n", program, value.c_str(), argv[i - 1]);
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Time

inline double seconds_between(time_point a, time_point b) { return std::chrono::duration<double>(b - a).count(); }

inline clock_type::duration to_duration(double seconds) {
  return std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
}

inline std::int64_t micros(clock_type::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

// The q-th quantile (0..1) of `v`, which it sorts; 0 when empty.
inline std::int64_t quantile(std::vector<std::int64_t>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// ---------------------------------------------------------------------------------------------
// One STOMP connection, owned by one thread.

class stomp_connection {
 public:
  stomp_connection() = default;
  stomp_connection(const stomp_connection&) = delete;
  stomp_connection& operator=(const stomp_connection&) = delete;
  ~stomp_connection() {
    if (fd_ >= 0) ::close(fd_);
  }

  // TCP connect, CONNECT, wait for CONNECTED (at most `timeout_s`). `vhost` is the CONNECT host
  // header (RabbitMQ takes it as its virtual host: "/"); `login`/`passcode` are sent when not
  // empty. On failure returns false and sets error().
  bool open(const std::string& host, int port_number, double timeout_s, const std::string& vhost = "localhost",
            const std::string& login = "", const std::string& passcode = "") {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    std::string port = std::to_string(port_number);
    if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
      error_ = std::string("cannot resolve ") + host + ": " + ::gai_strerror(rc);
      return false;
    }
    for (addrinfo* a = res; a; a = a->ai_next) {
      fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd_ < 0) continue;
      if (::connect(fd_, a->ai_addr, a->ai_addrlen) == 0) break;
      ::close(fd_);
      fd_ = -1;
    }
    ::freeaddrinfo(res);
    if (fd_ < 0) {
      error_ = "cannot connect to " + host + ":" + port + ": " + std::strerror(errno);
      return false;
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    escrow::frame connect;
    connect.command = "CONNECT";
    connect.add("accept-version", "1.2").add("host", vhost).add("heart-beat", "0,0");
    if (!login.empty()) connect.add("login", login).add("passcode", passcode);
    if (!send(connect)) return false;
    auto f = next(clock_type::now() + to_duration(timeout_s));
    if (!f) {
      if (error_.empty()) error_ = "no CONNECTED within the timeout";
      return false;
    }
    if (f->command != "CONNECTED") {
      error_ = "expected CONNECTED, got " + describe(*f);
      return false;
    }
    return true;
  }

  bool send(const escrow::frame& f) {
    std::string out;
    escrow::encode_to(out, f);
    return write_all(out);
  }

  bool write_all(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        error_ = std::string("send failed: ") + std::strerror(errno);
        return false;
      }
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // The next frame, waiting until `deadline`. nullopt on timeout (error() empty) or on a broken
  // connection or protocol error (error() says which).
  std::optional<escrow::frame> next(time_point deadline) {
    while (ready_.empty()) {
      auto left = deadline - clock_type::now();
      int ms = left <= clock_type::duration::zero()
                   ? 0
                   : static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
      pollfd p{fd_, POLLIN, 0};
      int rc = ::poll(&p, 1, ms);
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) {
        error_ = std::string("poll failed: ") + std::strerror(errno);
        return std::nullopt;
      }
      if (rc == 0) return std::nullopt;
      if (!read_some(false)) return std::nullopt;
    }
    return pop();
  }

  // A frame that has already arrived, without blocking; nullopt if none (check error()).
  std::optional<escrow::frame> poll_now() {
    if (ready_.empty() && !read_some(true)) return std::nullopt;
    return pop_parsed();
  }

  // A frame already parsed from what earlier reads brought; never touches the socket.
  std::optional<escrow::frame> pop_parsed() {
    if (ready_.empty()) return std::nullopt;
    return pop();
  }

  bool broken() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  // Marks the connection broken for `why`, unless it already is.
  void fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }

  static std::string describe(const escrow::frame& f) {
    std::string s = f.command;
    if (const std::string* m = f.find("message")) s += " (" + *m + ")";
    if (f.command == "ERROR" && !f.body.empty()) s += ": " + f.body.substr(0, 200);
    return s;
  }

 private:
  escrow::frame pop() {
    escrow::frame f = std::move(ready_.front());
    ready_.pop_front();
    return f;
  }

  // Reads what the socket has (one recv); parses every complete frame in it. With `nonblocking`,
  // returns true with nothing read when the socket has nothing.
  bool read_some(bool nonblocking) {
    char buf[64 * 1024];
    ssize_t n;
    do {
      n = ::recv(fd_, buf, sizeof buf, nonblocking ? MSG_DONTWAIT : 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (nonblocking && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      error_ = std::string("recv failed: ") + std::strerror(errno);
      return false;
    }
    if (n == 0) {
      error_ = "the broker closed the connection";
      return false;
    }
    scratch_.clear();
    if (!parser_.feed(std::string_view(buf, static_cast<std::size_t>(n)), scratch_)) {
      error_ = "bad frame from the broker: " + parser_.error();
      return false;
    }
    for (auto& f : scratch_) ready_.push_back(std::move(f));
    return true;
  }

  int fd_ = -1;
  escrow::frame_parser parser_;
  std::vector<escrow::frame> scratch_;
  std::deque<escrow::frame> ready_;
  std::string error_;
};

// DISCONNECT with a receipt, waiting for it at most `timeout_s`, so that every frame sent before
// it has been processed (acks made durable; messages still delivered to us back in the queue)
// before we close. Frames that arrive in between are dropped. Nothing on a broken connection.
inline void disconnect(stomp_connection& c, double timeout_s) {
  if (c.broken()) return;
  escrow::frame d;
  d.command = "DISCONNECT";
  d.add("receipt", "bye");
  if (!c.send(d)) return;
  auto deadline = clock_type::now() + to_duration(timeout_s);
  while (auto f = c.next(deadline))
    if (f->command == "RECEIPT" && f->get("receipt-id") == "bye") return;
}

}  // namespace escrow::bench
