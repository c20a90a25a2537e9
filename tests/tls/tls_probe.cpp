// tls_probe: connects to escrowd with the client library over TLS, as the options say, sends
// messages to a fresh queue and receives them back. tests/integration/test_tls.py runs it.
//
//   tls_probe --port P [--host H] [--ca FILE] [--cert FILE --key FILE] [--server-name NAME]
//             [--no-verify] [--messages N] [--size BYTES] [--plain]
//
// Prints "ok: N messages of B bytes" and exits 0, or prints "error: KIND: MESSAGE" and exits 1
// (KIND as client::to_string names it); 2 for bad arguments.
#include <escrow/client.h>

#include <cstdlib>
#include <iostream>
#include <random>
#include <string>

using namespace escrow::client;

int main(int argc, char** argv) {
  connect_options options;
  options.tls.enabled = true;
  options.timeout = std::chrono::milliseconds(std::getenv("ESCROW_SANITIZED") ? 30000 : 10000);
  int messages = 3;
  std::size_t size = 16;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "tls_probe: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--port") options.port = static_cast<std::uint16_t>(std::stoi(value()));
    else if (a == "--host") options.host = value();
    else if (a == "--ca") options.tls.ca_file = value();
    else if (a == "--cert") options.tls.certificate_chain = value();
    else if (a == "--key") options.tls.private_key = value();
    else if (a == "--server-name") options.tls.server_name = value();
    else if (a == "--no-verify") options.tls.verify_peer = false;
    else if (a == "--plain") options.tls.enabled = false;
    else if (a == "--messages") messages = std::stoi(value());
    else if (a == "--size") size = static_cast<std::size_t>(std::stoull(value()));
    else {
      std::cerr << "tls_probe: unknown argument " << a << "\n";
      return 2;
    }
  }
  try {
    auto c = connection::open(options);
    std::string queue = "/queue/tls-probe-" + std::to_string(std::random_device{}());
    auto consumer = c->create_consumer({.destination = queue});
    auto producer = c->create_producer({.destination = queue});
    for (int i = 0; i < messages; ++i) {
      std::string body = std::to_string(i) + ":" + std::string(size, static_cast<char>('a' + i % 26));
      producer.send(body);
      auto m = consumer->receive(options.timeout);
      if (!m) {
        std::cout << "error: timeout: message " << i << " did not come back" << std::endl;
        return 1;
      }
      if (m->body() != body) {
        std::cout << "error: mismatch: message " << i << " came back different" << std::endl;
        return 1;
      }
    }
    c->close();
    std::cout << "ok: " << messages << " messages of " << size << " bytes" << std::endl;
    return 0;
  } catch (const error& e) {
    std::cout << "error: " << to_string(e.which()) << ": " << e.what() << std::endl;
    return 1;
  }
}
