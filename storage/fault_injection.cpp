// Parsing and counting of fault plans (fault_injection.h). The committer consults the plan only
// in builds with ESCROW_FAULT_INJECTION defined; this file is compiled into every build so that a
// plan can still be validated and refused with a clear message where the seam is missing.
#include "escrow/storage/fault_injection.h"

#include <charconv>
#include <limits>

namespace escrow::storage {
namespace {

bool parse_u64(std::string_view text, std::uint64_t& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size() && out > 0;
}

}  // namespace

bool fault_injection_compiled() {
#ifdef ESCROW_FAULT_INJECTION
  return true;
#else
  return false;
#endif
}

bool fault_plan::parse(std::string_view spec, fault_plan& out, std::string& error) {
  out = fault_plan{};
  while (!spec.empty()) {
    std::size_t comma = spec.find(',');
    std::string_view text = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    std::size_t a = text.find(':');
    std::size_t b = a == std::string_view::npos ? a : text.find(':', a + 1);
    if (b == std::string_view::npos) {
      error = "fault rule '" + std::string(text) + "' is not POINT:RANGE:FAULT (e.g. commit:3:enospc)";
      return false;
    }
    std::string_view where = text.substr(0, a), range = text.substr(a + 1, b - a - 1), what = text.substr(b + 1);
    rule r;
    if (where == "commit") {
      r.at = point::commit;
    } else if (where == "sync") {
      r.at = point::sync;
    } else if (where == "data_sync") {
      r.at = point::data_sync;
    } else if (where == "replay") {
      r.at = point::replay;
    } else if (where == "decided") {
      r.at = point::decided;
    } else if (where == "db_committed") {
      r.at = point::db_committed;
    } else {
      error = "fault rule '" + std::string(text) +
              "': the point is commit, sync, data_sync, replay, decided or db_committed";
      return false;
    }
    bool ranged = true;
    if (!range.empty() && range.back() == '+') {
      ranged = parse_u64(range.substr(0, range.size() - 1), r.first);
      r.last = std::numeric_limits<std::uint64_t>::max();
    } else if (std::size_t dash = range.find('-'); dash != std::string_view::npos) {
      ranged = parse_u64(range.substr(0, dash), r.first) && parse_u64(range.substr(dash + 1), r.last) && r.last >= r.first;
    } else {
      ranged = parse_u64(range, r.first);
      r.last = r.first;
    }
    if (!ranged) {
      error = "fault rule '" + std::string(text) + "': the range is K, K-L or K+ with K, L from 1";
      return false;
    }
    if (what == "map_full") {
      r.what = fault::map_full;
    } else if (what == "enospc") {
      r.what = fault::enospc;
    } else if (what == "eio") {
      r.what = fault::eio;
    } else if (what == "kill") {
      r.what = fault::kill;
    } else if (what == "stall") {
      r.what = fault::stall;
    } else {
      error = "fault rule '" + std::string(text) + "': the fault is map_full, enospc, eio, kill or stall";
      return false;
    }
    out.rules_.push_back(r);
  }
  return true;
}

fault_plan::fault fault_plan::next(point p) {
  std::uint64_t n = ++counts_[static_cast<int>(p)];
  for (const rule& r : rules_)
    if (r.at == p && n >= r.first && n <= r.last) return r.what;
  return fault::none;
}

}  // namespace escrow::storage
