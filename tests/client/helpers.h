// Shared helpers of the client library tests: the broker under test (ESCROW_PORT), unique names,
// and timing. Header-only; used from one test thread at a time.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>

#include "escrow/client.h"

namespace escrow::client::test {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// Sanitizer builds run several times slower; ESCROW_SANITIZED stretches the waits.
inline int slow() { return std::getenv("ESCROW_SANITIZED") ? 3 : 1; }
inline std::chrono::milliseconds patience() { return 15000ms * slow(); }  // waits for what must come
inline std::chrono::milliseconds quiet() { return 300ms * slow(); }       // waits for what must not

// The port of the escrowd under test. A test without it fails loudly rather than skipping.
inline std::uint16_t broker_port() {
  const char* port = std::getenv("ESCROW_PORT");
  REQUIRE_MESSAGE(port != nullptr, "set ESCROW_PORT to the port of a running escrowd "
                                   "(tests/integration/test_client.py does)");
  return static_cast<std::uint16_t>(std::atoi(port));
}

inline connect_options broker_options() {
  connect_options o;
  o.port = broker_port();
  o.timeout = patience();
  return o;
}

inline std::unique_ptr<connection> connect() { return connection::open(broker_options()); }

// A name no other test (or earlier run on the same data) uses.
inline std::string unique(const std::string& prefix) {
  static std::mt19937_64 random(std::random_device{}() ^ static_cast<std::uint64_t>(::getpid()));
  static const char* digits = "0123456789abcdef";
  std::string s = prefix + "-";
  for (int i = 0; i < 10; ++i) s += digits[random() % 16];
  return s;
}

inline std::int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Receives exactly one message or fails the test.
inline message receive_one(consumer& c) {
  auto m = c.receive(patience());
  REQUIRE_MESSAGE(m.has_value(), "no message within the timeout on " << c.options().destination);
  return std::move(*m);
}

// Asserts that nothing arrives within quiet().
inline void expect_nothing(consumer& c) {
  auto m = c.receive(quiet());
  CHECK_MESSAGE(!m.has_value(), "unexpected message: " << (m ? m->body() : std::string()));
}

}  // namespace escrow::client::test
