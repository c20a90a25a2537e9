// Password hashes for the users file (docs/security.md): PBKDF2-HMAC-SHA256 through OpenSSL with a
// random 16-byte salt, written as one line of text
//
//   pbkdf2-sha256:ITERATIONS:SALT-HEX:HASH-HEX
//
// so that a file made today still verifies after the default iteration count is raised. Checking a
// password costs about as much as making its hash (0.3 s at the default): call it off the I/O
// threads. Thread-safe; no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace escrow::broker {

inline constexpr std::uint32_t kDefaultPasswordIterations = 600000;  // OWASP's figure for PBKDF2-SHA256
inline constexpr std::uint32_t kMinPasswordIterations = 10000;       // below this a file is refused

// A new hash of `password` with a fresh random salt.
std::string make_password_hash(std::string_view password, std::uint32_t iterations = kDefaultPasswordIterations);

// "" when `stored` is a well-formed hash, else what is wrong with it.
std::string check_password_hash(std::string_view stored);

// The iteration count of `stored`, what checking a password against it costs; 0 when it is not a
// well-formed hash.
std::uint32_t password_hash_iterations(std::string_view stored);

// Whether `password` matches `stored` (a well-formed hash; false otherwise). The comparison of
// the derived keys takes the same time wherever they differ.
bool verify_password(std::string_view password, std::string_view stored);

}  // namespace escrow::broker
