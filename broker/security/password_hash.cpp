// PBKDF2-HMAC-SHA256 password hashes: making, checking the text form, verifying in constant time.
#include "escrow/broker/security/password_hash.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <charconv>
#include <stdexcept>
#include <vector>

#include "escrow/common/hex.h"

namespace escrow::broker {
namespace {

constexpr std::string_view kScheme = "pbkdf2-sha256";
constexpr std::size_t kSaltBytes = 16;
constexpr std::size_t kKeyBytes = 32;

struct parsed_hash {
  std::uint32_t iterations = 0;
  std::vector<unsigned char> salt;
  std::vector<unsigned char> key;
};

std::string parse(std::string_view stored, parsed_hash& out) {
  std::vector<std::string_view> parts;
  std::size_t pos = 0;
  while (true) {
    std::size_t colon = stored.find(':', pos);
    parts.push_back(stored.substr(pos, colon == std::string_view::npos ? std::string_view::npos : colon - pos));
    if (colon == std::string_view::npos) break;
    pos = colon + 1;
  }
  if (parts.size() != 4 || parts[0] != kScheme)
    return "a password hash has the form pbkdf2-sha256:ITERATIONS:SALT-HEX:HASH-HEX (make one with "
           "escrowd --hash-password)";
  auto [end, ec] = std::from_chars(parts[1].data(), parts[1].data() + parts[1].size(), out.iterations);
  if (ec != std::errc() || end != parts[1].data() + parts[1].size())
    return "the iteration count '" + std::string(parts[1]) + "' is not a number";
  if (out.iterations < kMinPasswordIterations)
    return "the iteration count " + std::to_string(out.iterations) + " is below " +
           std::to_string(kMinPasswordIterations) + ": such a hash is too fast to guess against";
  if (!hex::decode(parts[2], out.salt) || out.salt.size() < 8)
    return "the salt is not hexadecimal of at least 8 bytes";
  if (!hex::decode(parts[3], out.key) || out.key.size() != kKeyBytes)
    return "the hash is not 32 bytes in hexadecimal";
  return "";
}

std::vector<unsigned char> derive(std::string_view password, const std::vector<unsigned char>& salt,
                                  std::uint32_t iterations) {
  std::vector<unsigned char> key(kKeyBytes);
  if (PKCS5_PBKDF2_HMAC(password.data(), static_cast<int>(password.size()), salt.data(), static_cast<int>(salt.size()),
                        static_cast<int>(iterations), EVP_sha256(), static_cast<int>(key.size()), key.data()) != 1)
    throw std::runtime_error("PKCS5_PBKDF2_HMAC failed");
  return key;
}

}  // namespace

std::string make_password_hash(std::string_view password, std::uint32_t iterations) {
  if (iterations < kMinPasswordIterations)
    throw std::invalid_argument("at least " + std::to_string(kMinPasswordIterations) + " iterations");
  std::vector<unsigned char> salt(kSaltBytes);
  if (RAND_bytes(salt.data(), static_cast<int>(salt.size())) != 1) throw std::runtime_error("RAND_bytes failed");
  auto key = derive(password, salt, iterations);
  return std::string(kScheme) + ":" + std::to_string(iterations) + ":" + hex::encode(salt.data(), salt.size()) + ":" +
         hex::encode(key.data(), key.size());
}

std::string check_password_hash(std::string_view stored) {
  parsed_hash h;
  return parse(stored, h);
}

std::uint32_t password_hash_iterations(std::string_view stored) {
  parsed_hash h;
  return parse(stored, h).empty() ? h.iterations : 0;
}

bool verify_password(std::string_view password, std::string_view stored) {
  parsed_hash h;
  if (!parse(stored, h).empty()) return false;
  auto key = derive(password, h.salt, h.iterations);
  return CRYPTO_memcmp(key.data(), h.key.data(), kKeyBytes) == 0;
}

}  // namespace escrow::broker
