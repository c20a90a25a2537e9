// TLS for the broker's listeners (OpenSSL through Asio): one server context per [[tls-listener]],
// built once at start from its configuration (certificate chain, key, optional client CA, minimum
// version, ciphers), and what a finished handshake says about the peer. A context is built on the
// main thread before the I/O threads start and is only read afterwards, which OpenSSL allows from
// any thread; each connection's SSL object lives on its session's strand.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/system/error_code.hpp>
#include <memory>
#include <string>

#include "escrow/broker/config/config.h"

namespace escrow::broker {

using tls_stream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;

// The TLS 1.2 cipher list of a listener that sets none: forward-secret AEAD suites only (the
// "intermediate" profile of Mozilla's server-side TLS guidance, without finite-field DHE).
inline constexpr const char* kDefaultTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

// Builds the server context of one listener: loads and checks its files, sets the versions and
// ciphers, and (with client-ca) requires and verifies client certificates. Returns nullptr with
// *error set when a file cannot be loaded or a setting is refused; the error names where the key
// was configured, the file and OpenSSL's reason, e.g.
//   escrowd.toml:9: tls-listener[1].private-key 'server.key': cannot load the private key: No such file or directory
std::unique_ptr<boost::asio::ssl::context> make_server_tls_context(const tls_listener_config& config,
                                                                   std::string* error);

// The subject of the certificate the peer presented in a finished handshake, one line in RFC 2253
// form ("CN=app1,O=Example"); "" when it presented none.
std::string peer_certificate_subject(tls_stream& stream);

// Why a handshake failed, in words: OpenSSL's reason, plus the certificate verification result
// when a client certificate was refused.
std::string handshake_failure_reason(tls_stream& stream, const boost::system::error_code& ec);

}  // namespace escrow::broker
