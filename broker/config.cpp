// Reading the TOML configuration with toml++. Unknown keys and wrong types stop the broker at
// start with the file, line and key, rather than running with a setting the user did not get.
#include "config.h"

#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <map>
#include <toml++/toml.h>

namespace escrow::broker {

std::optional<listen_address> parse_listen_address(const std::string& text) {
  std::string host;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') return std::nullopt;
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) return std::nullopt;
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (host.empty() || port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port > 65535)
    return std::nullopt;
  return listen_address{host, static_cast<std::uint16_t>(port)};
}

namespace {

std::string where(const std::string& path, const toml::node& node, const std::string& key) {
  return fmt::format("{}:{}: {}", path, node.source().begin.line, key);
}

// Applies one key; returns an error or "".
using setter = std::function<std::string(const toml::node&)>;

template <typename T>
setter unsigned_field(T& field, std::uint64_t min = 0) {
  return [&field, min](const toml::node& n) -> std::string {
    auto v = n.value<std::int64_t>();
    if (!n.is_integer() || !v) return "must be an integer";
    if (*v < 0 || static_cast<std::uint64_t>(*v) < min) return fmt::format("must be at least {}", min);
    field = static_cast<T>(*v);
    return "";
  };
}

setter string_field(std::string& field) {
  return [&field](const toml::node& n) -> std::string {
    if (!n.is_string()) return "must be a string";
    field = *n.value<std::string>();
    return "";
  };
}

}  // namespace

std::string load_config_file(const std::string& path, broker_config& config) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return fmt::format("{}:{}: {}", path, e.source().begin.line, e.description());
  }

  std::map<std::string, setter> top{
      {"data-dir", string_field(config.data_dir)},
      {"log-level", string_field(config.log_level)},
      {"io-threads", unsigned_field(config.io_threads, 0)},
      {"listen", [&config](const toml::node& n) -> std::string {
         const toml::array* list = n.as_array();
         if (!list || list->empty()) return "must be a non-empty array of \"HOST:PORT\" strings";
         std::vector<listen_address> out;
         for (const auto& item : *list) {
           auto s = item.value<std::string>();
           auto a = s ? parse_listen_address(*s) : std::nullopt;
           if (!a) return "must be a non-empty array of \"HOST:PORT\" strings";
           out.push_back(*a);
         }
         config.listen = std::move(out);
         return "";
       }},
  };
  std::map<std::string, std::map<std::string, setter>> sections{
      {"storage",
       {{"map-size", unsigned_field(config.map_size, 1024 * 1024)},
        {"max-group-batches", unsigned_field(config.max_group_batches, 1)}}},
      {"limits",
       {{"max-frame-size", unsigned_field(config.frames.max_frame_size, 64)},
        {"max-headers", unsigned_field(config.frames.max_headers, 1)},
        {"max-header-length", unsigned_field(config.frames.max_header_length, 16)},
        {"max-pending-bytes", unsigned_field(config.max_pending_bytes, 4096)},
        {"connect-timeout-ms", unsigned_field(config.connect_timeout_ms, 1)}}},
      {"delivery",
       {{"consumer-window", unsigned_field(config.consumer_window, 1)},
        {"queue-memory-window", unsigned_field(config.queue_memory_window, 1)}}},
      {"transactions", {{"timeout-ms", unsigned_field(config.branch_timeout_ms, 1)}}},
      {"heartbeat",
       {{"send-ms", unsigned_field(config.heartbeat_send_ms)},
        {"receive-ms", unsigned_field(config.heartbeat_receive_ms)},
        {"grace-ms", unsigned_field(config.heartbeat_grace_ms)}}},
  };

  for (const auto& [key, node] : root) {
    std::string name(key.str());
    if (auto s = sections.find(name); s != sections.end()) {
      const toml::table* t = node.as_table();
      if (!t) return where(path, node, name) + " must be a table ([" + name + "])";
      for (const auto& [sub_key, sub_node] : *t) {
        std::string sub(sub_key.str());
        auto f = s->second.find(sub);
        if (f == s->second.end()) return where(path, sub_node, name + "." + sub) + ": unknown key";
        if (auto err = f->second(sub_node); !err.empty()) return where(path, sub_node, name + "." + sub) + " " + err;
      }
      continue;
    }
    auto f = top.find(name);
    if (f == top.end()) return where(path, node, name) + ": unknown key";
    if (auto err = f->second(node); !err.empty()) return where(path, node, name) + " " + err;
  }
  return "";
}

}  // namespace escrow::broker
