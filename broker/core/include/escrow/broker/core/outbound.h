// What the core needs from a client connection's network side: hand it encoded frames, close it,
// and see how much it has not written yet (back-pressure). The session implements it; keeping the
// core behind this seam keeps Asio sockets out of the core's headers.
#pragma once

#include <cstddef>
#include <string>

namespace escrow::broker {

// Why a connection is closed after its last bytes: it is done (DISCONNECT's receipt, a graceful
// stop), or its last frame is an ERROR (a WebSocket then closes with 1008, policy violation).
enum class closing { done, after_error };

class outbound {
 public:
  virtual ~outbound() = default;
  // Queues already-encoded frames for writing. Safe from any thread.
  virtual void send(std::string bytes) = 0;
  // Queues `bytes` (usually an ERROR frame, or a RECEIPT for DISCONNECT), then closes the
  // connection once they are written; nothing more is read from it. Safe from any thread.
  virtual void send_and_close(std::string bytes, closing why) = 0;
  // Bytes queued but not yet written to the socket.
  virtual std::size_t pending_bytes() const = 0;
};

}  // namespace escrow::broker
