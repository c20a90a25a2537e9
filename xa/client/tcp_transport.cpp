// Connecting on Asio, and the plain TCP transport: asio_transport over a TCP socket. The connect
// has a deadline per address (an async_connect run for at most the timeout); writes have the
// write timeout of asio_transport, so that none can hang forever on a broker that stopped reading.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>

#include <algorithm>
#include <cerrno>

#include "asio_transport.h"

namespace escrow::client::detail {
namespace {

class tcp_transport final : public asio_transport<asio::ip::tcp::socket> {
 public:
  explicit tcp_transport(std::chrono::milliseconds write_timeout) : asio_transport(write_timeout) {}

 private:
  // A non-blocking receive (the socket is in non-blocking mode, connect_tcp): a reader that keeps
  // up with a busy broker reads with one system call per read, as before Asio.
  bool read_now(char* buffer, std::size_t size, std::size_t& n, boost::system::error_code& ec) override {
    n = stream_.read_some(asio::buffer(buffer, size), ec);
    return ec != asio::error::would_block && ec != asio::error::try_again;
  }

  // The kernel's send on the descriptor, never waiting: it is safe beside the reader's receive,
  // and close_stream() cannot close the descriptor meanwhile (both hold the transport's mutex).
  std::size_t send_now(std::string_view data, boost::system::error_code& ec) override {
    std::size_t sent = 0;
    while (sent < data.size()) {
      ssize_t n = ::send(stream_.native_handle(), data.data() + sent, data.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n >= 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) ec.assign(errno, boost::system::system_category());
      break;
    }
    return sent;
  }
};

// A failed look-up in getaddrinfo's words ("Name or service not known"), as before Asio: Asio
// turns its codes into its own, with texts of its own.
std::string resolve_failure(const boost::system::error_code& ec) {
  if (ec == asio::error::host_not_found) return ::gai_strerror(EAI_NONAME);
  if (ec == asio::error::host_not_found_try_again) return ::gai_strerror(EAI_AGAIN);
  if (ec == asio::error::no_recovery) return ::gai_strerror(EAI_FAIL);
  if (ec == asio::error::service_not_found) return ::gai_strerror(EAI_SERVICE);
  return ec.message();
}

}  // namespace

bool run_until(asio::io_context& io, const bool& done, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  io.restart();
  while (!done) {
    auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) break;
    if (io.run_one_for(left) == 0 && io.stopped()) io.restart();  // out of work for a moment
  }
  io.restart();
  return done;
}

bool connect_socket(asio::io_context& io, asio::ip::tcp::socket& socket, const std::string& host,
                    std::uint16_t port, std::chrono::milliseconds timeout, std::string* error) {
  std::string where = host + ":" + std::to_string(port);
  boost::system::error_code ec;
  asio::ip::tcp::resolver resolver(io);
  auto found = resolver.resolve(host, std::to_string(port), ec);
  if (ec) {
    *error = "cannot resolve " + host + ": " + resolve_failure(ec);
    return false;
  }
  boost::system::error_code last = asio::error::connection_refused;
  timeout = std::max(timeout, std::chrono::milliseconds(1));
  for (const auto& entry : found) {
    asio::ip::tcp::endpoint endpoint = entry.endpoint();
    // Close-on-exec from the start (Asio's own open() leaves it off): a TM that forks and execs
    // must not hand the connection to the child.
    int fd = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, endpoint.protocol().protocol());
    if (fd < 0) {
      last.assign(errno, boost::system::system_category());
      continue;
    }
    boost::system::error_code ignored;
    socket.assign(endpoint.protocol(), fd, ec);
    if (ec) {
      ::close(fd);
      last = ec;
      continue;
    }
    bool done = false;
    socket.async_connect(endpoint, [&](const boost::system::error_code& e) {
      done = true;
      ec = e;
    });
    if (!run_until(io, done, timeout)) {
      socket.close(ignored);
      run_until(io, done, std::chrono::hours(1));  // the cancelled connect's handler, at once
      ec = asio::error::timed_out;
    }
    if (!ec) {
      socket.set_option(asio::ip::tcp::no_delay(true), ignored);
      return true;
    }
    last = ec;
    socket.close(ignored);
  }
  *error = "cannot connect to " + where + ": " + last.message() + " (is escrowd running there?)";
  return false;
}

std::unique_ptr<transport> connect_tcp(const std::string& host, std::uint16_t port,
                                       std::chrono::milliseconds timeout,
                                       std::chrono::milliseconds write_timeout, std::string* error) {
  auto t = std::make_unique<tcp_transport>(write_timeout);
  if (!connect_socket(t->io(), t->stream(), host, port, timeout, error)) return nullptr;
  boost::system::error_code ec;
  t->stream().non_blocking(true, ec);
  if (ec) {
    *error = "cannot connect to " + host + ":" + std::to_string(port) + ": " + ec.message();
    return nullptr;
  }
  return t;
}

}  // namespace escrow::client::detail
