// The TLS transport: OpenSSL over a TCP socket from connect_socket(). The handshake verifies the
// broker's certificate and host name unless told not to (tls_options), within the connect timeout.
//
// One SSL object is used by the reader thread and by writers, and OpenSSL does not allow two calls
// on it at once. So the socket is non-blocking and every SSL call runs under ssl_mutex_, which is
// never held while waiting: a call that needs the network (SSL_ERROR_WANT_READ / WANT_WRITE)
// releases the mutex and waits in poll(). A reader blocked for days therefore never stops a writer,
// and shutdown() wakes every waiter by shutting the socket down.
#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "escrow/common/openssl_errors.h"
#include "transport.h"

namespace escrow::client::detail {
namespace {

using steady = std::chrono::steady_clock;

// Waits until `fd` is ready for `events` or `timeout_ms` passes (-1: no limit). False on timeout.
bool wait_for(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    int n = ::poll(&p, 1, timeout_ms);
    if (n >= 0) return n > 0;
    if (errno != EINTR) return true;  // let the next SSL call report the error
  }
}

int no_password(char*, int, int, void*) { return 0; }

// OpenSSL's own socket BIO writes with write(), which raises SIGPIPE when the broker has gone and
// would kill an application that did not ignore it. This BIO uses send(MSG_NOSIGNAL), as the
// plain transport does, and recv(); the file descriptor is its data.
int socket_of(BIO* bio) { return static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(bio))); }

bool would_block(int code) { return code == EAGAIN || code == EWOULDBLOCK || code == EINTR; }

int bio_write(BIO* bio, const char* data, int length) {
  BIO_clear_retry_flags(bio);
  ssize_t n = ::send(socket_of(bio), data, static_cast<std::size_t>(length), MSG_NOSIGNAL);
  if (n < 0 && would_block(errno)) BIO_set_retry_write(bio);
  return static_cast<int>(n);
}

int bio_read(BIO* bio, char* data, int length) {
  BIO_clear_retry_flags(bio);
  ssize_t n = ::recv(socket_of(bio), data, static_cast<std::size_t>(length), 0);
  if (n < 0 && would_block(errno)) BIO_set_retry_read(bio);
  return static_cast<int>(n);  // 0: the broker closed
}

long bio_ctrl(BIO*, int command, long, void*) { return command == BIO_CTRL_FLUSH ? 1 : 0; }

int bio_create(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

// The method table, made once (thread-safe static initialisation); nullptr if OpenSSL refused.
BIO_METHOD* no_sigpipe_socket_method() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "escrow socket (MSG_NOSIGNAL)");
    if (m && BIO_meth_set_write(m, bio_write) == 1 && BIO_meth_set_read(m, bio_read) == 1 &&
        BIO_meth_set_ctrl(m, bio_ctrl) == 1 && BIO_meth_set_create(m, bio_create) == 1)
      return m;
    if (m) BIO_meth_free(m);
    return static_cast<BIO_METHOD*>(nullptr);
  }();
  return method;
}

bool is_ip_address(const std::string& name) {
  unsigned char address[16];
  return ::inet_pton(AF_INET, name.c_str(), address) == 1 || ::inet_pton(AF_INET6, name.c_str(), address) == 1;
}

// Owns what connect_tls builds until the transport takes it.
struct tls_parts {
  int fd = -1;
  SSL_CTX* context = nullptr;
  SSL* ssl = nullptr;
  ~tls_parts() {
    if (ssl) SSL_free(ssl);
    if (context) SSL_CTX_free(context);
    if (fd >= 0) ::close(fd);
  }
};

class tls_transport final : public transport {
 public:
  tls_transport(tls_parts& parts, std::chrono::milliseconds write_timeout)
      : fd_(parts.fd), context_(parts.context), ssl_(parts.ssl),
        write_timeout_ms_(write_timeout.count() > 0 ? static_cast<int>(std::min<long long>(write_timeout.count(), INT_MAX))
                                                    : -1) {
    parts.fd = -1;
    parts.context = nullptr;
    parts.ssl = nullptr;
  }
  ~tls_transport() override {
    SSL_free(ssl_);
    SSL_CTX_free(context_);
    ::close(fd_);
  }

  long read_some(char* buffer, std::size_t size, std::string* error) override {
    int chunk = static_cast<int>(std::min<std::size_t>(size, INT_MAX));
    for (;;) {
      if (shut_.load()) {
        *error = "the connection was shut down";
        return -1;
      }
      short events = 0;
      {
        std::lock_guard lock(ssl_mutex_);
        ERR_clear_error();
        int n = SSL_read(ssl_, buffer, chunk);
        if (n > 0) return n;
        int code = SSL_get_error(ssl_, n);
        if (code == SSL_ERROR_ZERO_RETURN) return 0;  // the broker closed (close_notify or EOF)
        if (code == SSL_ERROR_WANT_READ) events = POLLIN;
        else if (code == SSL_ERROR_WANT_WRITE) events = POLLOUT;
        else {
          *error = "reading from the broker failed: " + failure(code);
          return -1;
        }
      }
      wait_for(fd_, events, -1);
    }
  }

  bool write_all(std::string_view data, std::string* error) override {
    while (!data.empty()) {
      if (shut_.load()) {
        *error = "the connection was shut down";
        return false;
      }
      short events = 0;
      {
        std::lock_guard lock(ssl_mutex_);
        ERR_clear_error();
        std::size_t written = 0;
        if (SSL_write_ex(ssl_, data.data(), data.size(), &written) == 1) {
          data.remove_prefix(written);
          continue;
        }
        int code = SSL_get_error(ssl_, 0);
        if (code == SSL_ERROR_WANT_WRITE) events = POLLOUT;
        else if (code == SSL_ERROR_WANT_READ) events = POLLIN;
        else {
          *error = "writing to the broker failed: " + failure(code);
          return false;
        }
      }
      if (events == POLLIN) {
        // The reader thread may take those bytes first; look again soon rather than wait here.
        wait_for(fd_, POLLIN, 50);
      } else if (!wait_for(fd_, POLLOUT, write_timeout_ms_)) {
        *error = "writing to the broker timed out: it is not reading (overloaded or hung)";
        return false;
      }
    }
    return true;
  }

  void shutdown() override {
    if (shut_.exchange(true)) return;
    {
      // Best effort, never waiting: tell the broker we close (close_notify) if the socket takes it.
      std::lock_guard lock(ssl_mutex_);
      if (!failed_) {
        ERR_clear_error();
        SSL_shutdown(ssl_);
        ERR_clear_error();
      }
    }
    ::shutdown(fd_, SHUT_RDWR);
  }

 private:
  // REQUIRES: ssl_mutex_ held. Describes a failed SSL call; after it the SSL object is not used
  // again for anything but freeing.
  // The first failure's text is kept: the reader and a writer both see a broken connection, and
  // only the one that read the broker's alert has its reason in OpenSSL's queue.
  std::string failure(int code) {
    if (failed_) return first_failure_;
    failed_ = true;
    first_failure_ = describe(code);
    return first_failure_;
  }
  std::string describe(int code) {
    int saved_errno = errno;
    if (code == SSL_ERROR_ZERO_RETURN) return "the broker closed the connection";
    if (code == SSL_ERROR_SYSCALL) {
      std::string queued = openssl_errors();
      if (!queued.empty()) return queued;
      return saved_errno ? std::strerror(saved_errno) : "the connection was closed";
    }
    std::string queued = openssl_errors();
    if (queued.empty()) return "TLS error " + std::to_string(code);
    // With TLS 1.3 the broker judges the client certificate after the client's side of the
    // handshake is done, so its refusal arrives here, on the first read.
    if (queued.find("alert certificate required") != std::string::npos)
      return "TLS: " + queued + " (the broker requires a client certificate: set tls.certificate_chain and tls.private_key)";
    if (queued.find("alert unknown ca") != std::string::npos || queued.find("alert bad certificate") != std::string::npos)
      return "TLS: " + queued + " (the broker does not accept the client certificate)";
    return "TLS: " + queued;
  }

  const int fd_;
  SSL_CTX* const context_;
  SSL* const ssl_;
  const int write_timeout_ms_;  // -1: none
  std::mutex ssl_mutex_;        // serialises every call on ssl_; never held while waiting
  bool failed_ = false;         // guarded by ssl_mutex_: a fatal error happened (no close_notify)
  std::string first_failure_;   // guarded by ssl_mutex_: what failure() said first
  std::atomic<bool> shut_{false};
};

// Loads the client's trust store and certificate into `context`. "" or what went wrong.
std::string configure(SSL_CTX* context, const tls_options& tls) {
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  SSL_CTX_set_options(context, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(context, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_default_passwd_cb(context, no_password);
  if (tls.verify_peer) {
    SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nullptr);
    if (!tls.ca_file.empty()) {
      if (SSL_CTX_load_verify_locations(context, tls.ca_file.c_str(), nullptr) != 1)
        return "tls.ca_file '" + tls.ca_file + "': cannot load the CA certificates (PEM): " + openssl_errors();
    } else if (SSL_CTX_set_default_verify_paths(context) != 1) {
      return "cannot load the system's CA certificates (set tls.ca_file): " + openssl_errors();
    }
  } else {
    SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nullptr);
  }
  if (!tls.certificate_chain.empty()) {
    const std::string& chain = tls.certificate_chain;
    const std::string& key = tls.private_key.empty() ? chain : tls.private_key;
    if (SSL_CTX_use_certificate_chain_file(context, chain.c_str()) != 1)
      return "tls.certificate_chain '" + chain + "': cannot load the certificate (PEM): " + openssl_errors();
    if (SSL_CTX_use_PrivateKey_file(context, key.c_str(), SSL_FILETYPE_PEM) != 1) {
      if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
        return "tls.private_key '" + key + "' is not the key of the certificate in '" + chain + "'";
      return "tls.private_key '" + key + "': cannot load the key (PEM, not encrypted): " + openssl_errors();
    }
    if (SSL_CTX_check_private_key(context) != 1)
      return "tls.private_key '" + key + "' is not the key of the certificate in '" + chain + "': " + openssl_errors();
  } else if (!tls.private_key.empty()) {
    return "tls.private_key is set without tls.certificate_chain";
  }
  return "";
}

// Why the handshake failed, in words: the certificate check first (the usual case), then OpenSSL.
std::string handshake_failure(SSL* ssl, int code, const std::string& name, const std::string& where) {
  long verify = SSL_get_verify_result(ssl);
  if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH)
    return "host name mismatch: the broker's certificate is not valid for '" + name +
           "' (connect by a name its certificate lists, or set tls.server_name to one)";
  if (verify != X509_V_OK)
    return std::string("certificate verify failed: ") + X509_verify_cert_error_string(verify) +
           " (does tls.ca_file hold the CA that signed the broker's certificate?)";
  int saved_errno = errno;
  std::string queued = openssl_errors();
  if (queued.find("wrong version number") != std::string::npos ||
      queued.find("packet length too long") != std::string::npos)
    return queued + " (is " + where + " a TLS listener, not a plain one?)";
  if (!queued.empty()) return queued;
  if (code == SSL_ERROR_SYSCALL)
    return saved_errno ? std::strerror(saved_errno) : "the broker closed the connection during the handshake";
  return "TLS error " + std::to_string(code);
}

}  // namespace

std::unique_ptr<transport> connect_tls(const std::string& host, std::uint16_t port, const tls_options& tls,
                                       std::chrono::milliseconds timeout,
                                       std::chrono::milliseconds write_timeout, std::string* error,
                                       bool* invalid_argument) {
  *invalid_argument = false;
  auto deadline = steady::now() + timeout;
  std::string where = host + ":" + std::to_string(port);
  ERR_clear_error();
  tls_parts parts;
  parts.context = SSL_CTX_new(TLS_client_method());
  if (!parts.context) {
    *error = "cannot create a TLS context: " + openssl_errors();
    return nullptr;
  }
  if (std::string problem = configure(parts.context, tls); !problem.empty()) {
    *error = problem;
    *invalid_argument = true;
    return nullptr;
  }

  parts.fd = connect_socket(host, port, timeout, error);
  if (parts.fd < 0) return nullptr;
  int flags = ::fcntl(parts.fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(parts.fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    *error = "cannot connect to " + where + ": " + std::strerror(errno);
    return nullptr;
  }
  parts.ssl = SSL_new(parts.context);
  BIO_METHOD* method = no_sigpipe_socket_method();
  BIO* bio = parts.ssl && method ? BIO_new(method) : nullptr;
  if (!bio) {
    *error = "cannot create a TLS connection: " + openssl_errors();
    return nullptr;
  }
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<std::intptr_t>(parts.fd)));
  SSL_set_bio(parts.ssl, bio, bio);  // the SSL object owns it now
  const std::string& name = tls.server_name.empty() ? host : tls.server_name;
  bool ip = is_ip_address(name);
  // SNI carries host names only (RFC 6066 forbids addresses).
  if (!ip && SSL_set_tlsext_host_name(parts.ssl, name.c_str()) != 1) {
    *error = "tls.server_name '" + name + "' cannot be sent as SNI: " + openssl_errors();
    *invalid_argument = true;
    return nullptr;
  }
  if (tls.verify_peer) {
    X509_VERIFY_PARAM* param = SSL_get0_param(parts.ssl);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) : SSL_set1_host(parts.ssl, name.c_str());
    if (ok != 1) {
      *error = "cannot check the broker's certificate against '" + name + "': " + openssl_errors();
      *invalid_argument = true;
      return nullptr;
    }
  }

  for (;;) {
    ERR_clear_error();
    int rc = SSL_connect(parts.ssl);
    if (rc == 1) break;
    int code = SSL_get_error(parts.ssl, rc);
    short events = code == SSL_ERROR_WANT_READ ? POLLIN : code == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    if (events == 0) {
      *error = "TLS handshake with " + where + " failed: " + handshake_failure(parts.ssl, code, name, where);
      return nullptr;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
    if (left <= 0 || !wait_for(parts.fd, events, static_cast<int>(std::min<long long>(left, INT_MAX)))) {
      *error = "TLS handshake with " + where + " did not finish within " + std::to_string(timeout.count()) +
               " ms (is it a TLS listener?)";
      return nullptr;
    }
  }
  return std::make_unique<tls_transport>(parts, write_timeout);
}

}  // namespace escrow::client::detail
