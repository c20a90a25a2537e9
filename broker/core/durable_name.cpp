// Durable subscription keys and names (durable_name.h).
#include "durable_name.h"

namespace escrow::broker {

std::string durable_key(const durable_id& d) {
  std::string key = "d/" + d.client_id;
  key.push_back('\0');
  key += d.name;
  if (!d.owner.empty()) {
    key.push_back('\0');
    key += d.owner;
  }
  return key;
}

std::optional<durable_id> parse_durable_key(std::string_view key) {
  if (key.size() < 3 || key.substr(0, 2) != "d/") return std::nullopt;
  key.remove_prefix(2);
  auto first = key.find('\0');
  if (first == std::string_view::npos) return std::nullopt;
  durable_id d;
  d.client_id = key.substr(0, first);
  std::string_view rest = key.substr(first + 1);
  auto second = rest.find('\0');
  d.name = rest.substr(0, second);
  if (second != std::string_view::npos) {
    d.owner = rest.substr(second + 1);
    if (d.owner.empty() || d.owner.find('\0') != std::string::npos) return std::nullopt;
  }
  return d;
}

std::string durable_display_name(const durable_id& d) {
  std::string name = d.client_id + "." + d.name;
  return d.owner.empty() ? name : name + "@" + d.owner;
}

}  // namespace escrow::broker
