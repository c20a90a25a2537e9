// The byte stream under a client connection: the seam between the STOMP session and the network.
// Two implementations on Boost.Asio (asio_transport.h), chosen by connect_options::tls: plain TCP
// (tcp_transport.cpp) and TLS over asio::ssl (tls_transport.cpp); nothing above this interface
// knows which, and no Asio or OpenSSL type appears in it.
//
// Thread safety: one reader thread calls read_some(), and it carries out the writes too;
// writers serialise write_all() among themselves; shutdown() may be called from any thread at any
// time, also while the others block.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "escrow/client.h"

namespace escrow::client::detail {

class transport {
 public:
  virtual ~transport() = default;
  // Blocks until some bytes arrive, carrying out the writers' writes meanwhile. Returns their
  // number (> 0), 0 at the end of the stream, or -1 with *error set (also after shutdown()).
  virtual long read_some(char* buffer, std::size_t size, std::string* error) = 0;
  // Hands all of `data` to the reader's thread to write, in order, and returns at once unless
  // much is waiting to go already (not to be called on the reader's thread). False with *error
  // set once writing has failed, including a write that made no progress for the write timeout
  // (the broker is not reading); such a failure also ends read_some() with its reason.
  virtual bool write_all(std::string_view data, std::string* error) = 0;
  // Wakes a blocked read_some() and makes every later call fail. Idempotent.
  virtual void shutdown() = 0;
};

// Connects to host:port over TCP within `timeout`; writes time out after `write_timeout`.
// nullptr with *error set ("cannot connect to HOST:PORT: reason") on failure.
std::unique_ptr<transport> connect_tcp(const std::string& host, std::uint16_t port,
                                       std::chrono::milliseconds timeout,
                                       std::chrono::milliseconds write_timeout, std::string* error);

// Connects to host:port over TCP and completes a TLS handshake as `tls` says, all within
// `timeout`; writes time out after `write_timeout`. nullptr with *error set on failure and
// *invalid_argument telling whether the options were at fault (a file that does not load) rather
// than the network or the broker ("TLS handshake with HOST:PORT failed: certificate verify failed:
// ...", "... host name mismatch: ...").
std::unique_ptr<transport> connect_tls(const std::string& host, std::uint16_t port, const tls_options& tls,
                                       std::chrono::milliseconds timeout,
                                       std::chrono::milliseconds write_timeout, std::string* error,
                                       bool* invalid_argument);

}  // namespace escrow::client::detail
