// Internal to broker/core: the part of the core's state that holds acknowledgements nobody asked
// a receipt for (docs/storage.md, "Acknowledgements without a receipt"): their removals, gathered
// into one batch that goes with the next write that has to happen anyway or at most
// broker::impl::kDeferredAckMs later, and the completions waiting for it (broker.cpp: defer_ack,
// take_deferred_acks). A member of broker::impl (`acks`), touched only on the core strand.
#pragma once

#include <functional>
#include <vector>

#include "escrow/storage/batch.h"
#include "escrow/storage/status.h"

namespace escrow::broker {

struct acks_part {
  storage::batch deferred_acks;
  std::vector<std::function<void(const storage::status&)>> deferred_ack_done;
};

}  // namespace escrow::broker
