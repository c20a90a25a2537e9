// The text of OpenSSL's error queue, for the broker's listeners (broker/tls.cpp) and the client
// library's TLS transport (xa/client/tls_transport.cpp). Only for code that links OpenSSL.
#pragma once

#include <openssl/err.h>

#include <cstring>
#include <string>

namespace escrow {

// Drains this thread's OpenSSL error queue: "reason (library); reason (library)", each reason once;
// "" if the queue is empty.
inline std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    const char* library = ERR_lib_error_string(e);
    // A system error (a file that cannot be opened) carries errno as its reason.
    std::string one = ERR_SYSTEM_ERROR(e) ? std::strerror(ERR_GET_REASON(e))
                      : reason            ? reason
                                          : "error " + std::to_string(e);
    if (library && !ERR_SYSTEM_ERROR(e)) one += std::string(" (") + library + ")";
    if (out.find(one) != std::string::npos) continue;
    if (!out.empty()) out += "; ";
    out += one;
  }
  return out;
}

}  // namespace escrow
