// Building the listeners' OpenSSL contexts and reading the peer's certificate. OpenSSL reports
// failures on a per-thread error queue; every failure here drains it into the message, so the user
// sees OpenSSL's own reason ("No such file or directory", "key values mismatch", "no cipher match").
#include "tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include "escrow/common/openssl_errors.h"

namespace escrow::broker {

namespace asio = boost::asio;

namespace {

// Where `key` of the listener was configured, for the start of an error message.
std::string where(const tls_listener_config& config, const std::string& key) {
  if (auto f = config.where.find(key); f != config.where.end()) return f->second;
  if (auto f = config.where.find(""); f != config.where.end()) return f->second + "." + key;
  return "tls-listener." + key;
}

// A key file that asks for a password is refused rather than prompting on the terminal.
int no_password(char*, int, int, void*) { return 0; }

}  // namespace

std::unique_ptr<asio::ssl::context> make_server_tls_context(const tls_listener_config& config, std::string* error) {
  ERR_clear_error();
  auto context = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  SSL_CTX* native = context->native_handle();
  auto fail = [&](const std::string& key, const std::string& what) {
    std::string reason = openssl_errors();
    *error = where(config, key) + " " + what + ": " + (reason.empty() ? "no reason given by OpenSSL" : reason);
    return nullptr;
  };

  // TLS 1.2 at the least; no maximum, so TLS 1.3 is chosen whenever the client speaks it.
  int min_version = config.min_version == "1.3" ? TLS1_3_VERSION : TLS1_2_VERSION;
  if (SSL_CTX_set_min_proto_version(native, min_version) != 1) return fail("min-version", "cannot be set");
  SSL_CTX_set_options(native, SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_default_passwd_cb(native, no_password);
  // No TLS 1.3 session tickets. Connections to a broker live long, so resumption saves little,
  // and tickets sent right after the handshake race with the client's first write in clients that
  // read and write one SSL object from two threads (python3-stomp over CPython's ssl module lost
  // its CONNECT that way, about one connection in twenty).
  SSL_CTX_set_num_tickets(native, 0);

  const std::string& chain = config.certificate_chain;
  if (SSL_CTX_use_certificate_chain_file(native, chain.c_str()) != 1)
    return fail("certificate-chain", "'" + chain + "': cannot load the certificate chain (PEM)");
  const std::string& key = config.private_key;
  if (SSL_CTX_use_PrivateKey_file(native, key.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
      return fail("private-key", "'" + key + "' is not the key of the certificate in '" + chain + "'");
    return fail("private-key", "'" + key + "': cannot load the private key (PEM, not encrypted)");
  }
  if (SSL_CTX_check_private_key(native) != 1)
    return fail("private-key", "'" + key + "' is not the key of the certificate in '" + chain + "'");

  std::string ciphers = config.ciphers.empty() ? kDefaultTls12Ciphers : config.ciphers;
  if (SSL_CTX_set_cipher_list(native, ciphers.c_str()) != 1)
    return fail("ciphers", "'" + ciphers + "' names no TLS 1.2 cipher OpenSSL knows");
  if (!config.ciphersuites.empty() && SSL_CTX_set_ciphersuites(native, config.ciphersuites.c_str()) != 1)
    return fail("ciphersuites", "'" + config.ciphersuites + "' names no TLS 1.3 cipher suite OpenSSL knows");

  if (!config.client_ca.empty()) {
    const std::string& ca = config.client_ca;
    if (SSL_CTX_load_verify_locations(native, ca.c_str(), nullptr) != 1)
      return fail("client-ca", "'" + ca + "': cannot load the CA certificates (PEM)");
    // Tell clients which CAs we accept, so one with several certificates can pick the right one.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(ca.c_str());
    if (!names) return fail("client-ca", "'" + ca + "': no CA certificate in it");
    SSL_CTX_set_client_CA_list(native, names);  // takes ownership
    SSL_CTX_set_verify(native, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    // Resumed sessions keep the verified client identity; OpenSSL needs a context id for that.
    static const unsigned char kSessionContext[] = "escrow";
    SSL_CTX_set_session_id_context(native, kSessionContext, sizeof kSessionContext - 1);
  }
  ERR_clear_error();
  return context;
}

std::string peer_certificate_subject(tls_stream& stream) {
  X509* certificate = SSL_get1_peer_certificate(stream.native_handle());
  if (!certificate) return "";
  std::string subject;
  if (BIO* bio = BIO_new(BIO_s_mem())) {
    if (X509_NAME_print_ex(bio, X509_get_subject_name(certificate), 0, XN_FLAG_RFC2253) >= 0) {
      char* data = nullptr;
      long length = BIO_get_mem_data(bio, &data);
      if (data && length > 0) subject.assign(data, static_cast<std::size_t>(length));
    }
    BIO_free(bio);
  }
  X509_free(certificate);
  return subject;
}

std::string handshake_failure_reason(tls_stream& stream, const boost::system::error_code& ec) {
  std::string reason = ec.message();
  long verify = SSL_get_verify_result(stream.native_handle());
  if (verify != X509_V_OK)
    reason += std::string(" (client certificate: ") + X509_verify_cert_error_string(verify) + ")";
  return reason;
}

}  // namespace escrow::broker
