// The metrics' values (metrics.h): latency histograms, and which queues keep series of their own.
#include "escrow/broker/core/metrics.h"

#include <algorithm>

namespace escrow::broker {

std::vector<double> latency_bounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

latency_histogram::latency_histogram() {
  h_.bounds = latency_bounds();
  h_.counts.assign(h_.bounds.size() + 1, 0);
}

void latency_histogram::observe(double seconds) {
  auto it = std::lower_bound(h_.bounds.begin(), h_.bounds.end(), seconds);  // first bound >= value
  ++h_.counts[static_cast<std::size_t>(it - h_.bounds.begin())];
  h_.sum += seconds;
  ++h_.count;
}

std::vector<std::size_t> deepest_queues(const std::vector<std::pair<std::uint64_t, std::string_view>>& queues,
                                        std::size_t limit) {
  std::vector<std::size_t> kept(queues.size());
  for (std::size_t i = 0; i < kept.size(); ++i) kept[i] = i;
  if (kept.size() <= limit) return kept;
  auto first = [&queues](std::size_t a, std::size_t b) {
    if (queues[a].first != queues[b].first) return queues[a].first > queues[b].first;
    if (queues[a].second != queues[b].second) return queues[a].second < queues[b].second;
    return a < b;
  };
  std::nth_element(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(limit), kept.end(), first);
  kept.resize(limit);
  std::sort(kept.begin(), kept.end());
  return kept;
}

}  // namespace escrow::broker
