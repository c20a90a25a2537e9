// The TLS transport: asio_transport over asio::ssl::stream (OpenSSL), as the broker's listeners
// use it. The handshake verifies the broker's certificate and host name unless told not to
// (tls_options), within the connect timeout. One thread at a time runs the stream's io_context
// (asio_transport.h), so the SSL object needs no lock of its own; Asio's sockets send with
// MSG_NOSIGNAL, so a broker that went away raises no SIGPIPE.
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>

#include <cstring>
#include <optional>

#include "asio_transport.h"
#include "escrow/common/openssl_errors.h"

namespace escrow::client::detail {
namespace {

using ssl_stream = asio::ssl::stream<asio::ip::tcp::socket>;

int no_password(char*, int, int, void*) { return 0; }

bool is_ip_address(const std::string& name) {
  unsigned char address[16];
  return ::inet_pton(AF_INET, name.c_str(), address) == 1 || ::inet_pton(AF_INET6, name.c_str(), address) == 1;
}

// An OpenSSL error from Asio (the first of the queue, which Asio takes) as openssl_errors()
// writes one: "reason (library)", or the system error's text.
std::string openssl_error_text(const boost::system::error_code& ec) {
  auto e = static_cast<unsigned long>(static_cast<unsigned int>(ec.value()));
  if (ERR_SYSTEM_ERROR(e)) return std::strerror(ERR_GET_REASON(e));
  const char* reason = ERR_reason_error_string(e);
  const char* library = ERR_lib_error_string(e);
  std::string text = reason ? reason : "error " + std::to_string(e);
  if (library) text += std::string(" (") + library + ")";
  return text;
}

bool is_openssl_error(const boost::system::error_code& ec) {
  return ec.category() == asio::error::get_ssl_category();
}

// The broker closed: close_notify (eof) or, as escrowd does, a TCP close without it.
bool is_closed(const boost::system::error_code& ec) {
  return ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
}

// The context comes first: the SSL stream of the transport refers to it.
struct tls_context {
  asio::ssl::context context;
};

class tls_transport final : private tls_context, public asio_transport<ssl_stream> {
 public:
  // `context` configured already: the stream's SSL object copies its settings when it is made.
  tls_transport(asio::ssl::context context, std::chrono::milliseconds write_timeout)
      : tls_context{std::move(context)}, asio_transport(write_timeout, tls_context::context) {}

 private:
  bool is_end_of_stream(const boost::system::error_code& ec) override { return is_closed(ec); }

  // The first failure's text is kept: the reader and a writer both see a broken connection, and
  // only the one that read the broker's alert has its reason.
  std::string describe(const boost::system::error_code& ec) override {
    if (!first_failure_) first_failure_ = describe_first(ec);
    return *first_failure_;
  }
  static std::string describe_first(const boost::system::error_code& ec) {
    if (is_closed(ec)) return "the broker closed the connection";
    if (!is_openssl_error(ec)) return ec.message();
    std::string queued = openssl_error_text(ec);
    // With TLS 1.3 the broker judges the client certificate after the client's side of the
    // handshake is done, so its refusal arrives here, on the first read.
    if (queued.find("alert certificate required") != std::string::npos)
      return "TLS: " + queued + " (the broker requires a client certificate: set tls.certificate_chain and tls.private_key)";
    if (queued.find("alert unknown ca") != std::string::npos || queued.find("alert bad certificate") != std::string::npos)
      return "TLS: " + queued + " (the broker does not accept the client certificate)";
    return "TLS: " + queued;
  }

  // Best effort, never waiting: tell the broker we close (close_notify) if the socket takes it at
  // once (Asio tries the send before it waits), unless the connection failed (a write that timed
  // out may have stopped in the middle of a record).
  void close_stream() override {
    if (!closing_ && !first_failure_ && !write_has_failed() && stream_.lowest_layer().is_open()) {
      closing_ = true;
      stream_.async_shutdown([](const boost::system::error_code&) {});
    }
    asio_transport::close_stream();
  }

  std::optional<std::string> first_failure_;  // on the io thread
  bool closing_ = false;                      // on the io thread: close_notify was tried
};

// Loads the client's trust store and certificate into `context`. "" or what went wrong.
std::string configure(SSL_CTX* context, const tls_options& tls) {
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  SSL_CTX_set_options(context, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
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
std::string handshake_failure(SSL* ssl, const boost::system::error_code& ec, const std::string& name,
                              const std::string& where) {
  long verify = SSL_get_verify_result(ssl);
  if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH)
    return "host name mismatch: the broker's certificate is not valid for '" + name +
           "' (connect by a name its certificate lists, or set tls.server_name to one)";
  if (verify != X509_V_OK)
    return std::string("certificate verify failed: ") + X509_verify_cert_error_string(verify) +
           " (does tls.ca_file hold the CA that signed the broker's certificate?)";
  if (is_closed(ec)) return "the broker closed the connection during the handshake";
  if (!is_openssl_error(ec)) return ec.message();
  std::string queued = openssl_error_text(ec);
  if (queued.find("wrong version number") != std::string::npos ||
      queued.find("packet length too long") != std::string::npos)
    return queued + " (is " + where + " a TLS listener, not a plain one?)";
  return queued;
}

}  // namespace

std::unique_ptr<transport> connect_tls(const std::string& host, std::uint16_t port, const tls_options& tls,
                                       std::chrono::milliseconds timeout,
                                       std::chrono::milliseconds write_timeout, std::string* error,
                                       bool* invalid_argument) {
  *invalid_argument = false;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string where = host + ":" + std::to_string(port);
  ERR_clear_error();
  std::optional<asio::ssl::context> context;
  try {
    context.emplace(asio::ssl::context::tls_client);
  } catch (const boost::system::system_error& e) {  // SSL_CTX_new refused
    *error = "cannot create a TLS context: " + std::string(e.what());
    return nullptr;
  }
  if (std::string problem = configure(context->native_handle(), tls); !problem.empty()) {
    *error = problem;
    *invalid_argument = true;
    return nullptr;
  }
  std::unique_ptr<tls_transport> t;
  try {
    t = std::make_unique<tls_transport>(std::move(*context), write_timeout);
  } catch (const boost::system::system_error& e) {  // SSL_new refused
    *error = "cannot create a TLS connection: " + std::string(e.what());
    return nullptr;
  }

  SSL* ssl = t->stream().native_handle();
  const std::string& name = tls.server_name.empty() ? host : tls.server_name;
  bool ip = is_ip_address(name);
  // SNI carries host names only (RFC 6066 forbids addresses).
  if (!ip && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    *error = "tls.server_name '" + name + "' cannot be sent as SNI: " + openssl_errors();
    *invalid_argument = true;
    return nullptr;
  }
  if (tls.verify_peer) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) : SSL_set1_host(ssl, name.c_str());
    if (ok != 1) {
      *error = "cannot check the broker's certificate against '" + name + "': " + openssl_errors();
      *invalid_argument = true;
      return nullptr;
    }
  }

  if (!connect_socket(t->io(), t->stream().next_layer(), host, port, timeout, error)) return nullptr;
  bool done = false;
  boost::system::error_code ec;
  t->stream().async_handshake(asio::ssl::stream_base::client, [&](const boost::system::error_code& e) {
    done = true;
    ec = e;
  });
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (!run_until(t->io(), done, left)) {
    boost::system::error_code ignored;
    t->stream().lowest_layer().close(ignored);
    run_until(t->io(), done, std::chrono::hours(1));  // the cancelled handshake's handler, at once
    *error = "TLS handshake with " + where + " did not finish within " + std::to_string(timeout.count()) +
             " ms (is it a TLS listener?)";
    return nullptr;
  }
  if (ec) {
    *error = "TLS handshake with " + where + " failed: " + handshake_failure(ssl, ec, name, where);
    return nullptr;
  }
  return t;
}

}  // namespace escrow::client::detail
