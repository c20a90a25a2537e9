// broker/admin/admin_config.cpp: the answer of the `config` ADMIN command (`escrow config`): the
// configuration in force in the file's sections and key names, every key with its value, and no
// secret in it (the passwords of coordinated databases' conninfo strings hidden).
#include <doctest/doctest.h>

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <charconv>
#include <cstdint>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "admin_commands.h"
#include "escrow/broker/config/config.h"

using namespace escrow::broker;
namespace bj = boost::json;

namespace {

bj::value answer_of(const broker_config& config) { return bj::parse(config_answer(config)); }

std::string str(const bj::value& v) {
  const bj::string& s = v.as_string();
  return std::string(s.data(), s.size());
}

std::uint64_t num(const bj::value& v) { return v.to_number<std::uint64_t>(); }

template <typename Strings>
std::string join(const Strings& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + std::string(i);
  return out;
}

// A JSON value as a TOML value (strings: JSON's escapes are TOML's).
std::string toml_value(const bj::value& v) {
  switch (v.kind()) {
    case bj::kind::string: return bj::serialize(v);
    case bj::kind::bool_: return v.get_bool() ? "true" : "false";
    case bj::kind::int64: return std::to_string(v.get_int64());
    case bj::kind::uint64: return std::to_string(v.get_uint64());
    case bj::kind::double_: {
      char buffer[64];
      auto end = std::to_chars(buffer, buffer + sizeof buffer, v.get_double()).ptr;
      std::string s(buffer, end);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      return s;
    }
    case bj::kind::array: {
      std::string s;
      for (const auto& e : v.get_array()) s += (s.empty() ? "" : ", ") + toml_value(e);
      return "[" + s + "]";
    }
    default: return "unexpected";
  }
}

bool is_table_list(const bj::value& v) {
  return v.is_array() && !v.get_array().empty() &&
         std::all_of(v.get_array().begin(), v.get_array().end(), [](const bj::value& e) { return e.is_object(); });
}

// The answer's configuration written back as a configuration file: a table's keys, then its
// [tables] and [[lists of tables]]. Empty arrays are left out (an empty list of tables is not one
// in TOML); the configurations written here have none that matters.
void write_toml(const bj::object& o, const std::string& name, std::string& out) {
  for (const auto& kv : o) {
    const bj::value& v = kv.value();
    if (v.is_object() || is_table_list(v) || (v.is_array() && v.get_array().empty())) continue;
    out += std::string(kv.key()) + " = " + toml_value(v) + "\n";
  }
  for (const auto& kv : o) {
    std::string full = name.empty() ? std::string(kv.key()) : name + "." + std::string(kv.key());
    if (kv.value().is_object()) {
      out += "\n[" + full + "]\n";
      write_toml(kv.value().get_object(), full, out);
    } else if (is_table_list(kv.value())) {
      for (const auto& e : kv.value().get_array()) {
        out += "\n[[" + full + "]]\n";
        write_toml(e.get_object(), full, out);
      }
    }
  }
}

// Every key of the file, each away from its default.
constexpr const char* kEveryKey = R"toml(
listen = ["127.0.0.1:7001", "[::1]:7002"]
data-dir = "/srv/escrow"
log-level = "debug"
io-threads = 3

[storage]
map-size = 2097152
max-map-size = 4294967296
max-size = 1000000000
min-free-disk = 1000
max-group-batches = 7
log-size = 33554432
checkpoint-interval-ms = 250
backup-root = "/var/backups/escrow"

[limits]
max-frame-size = 65536
max-headers = 50
max-header-length = 2048
max-pending-bytes = 8192
connect-timeout-ms = 1234
slow-consumer-timeout-ms = 0
max-unstored-bytes = 2097152
max-connections = 99
max-connections-per-user = 9
max-unauthenticated-per-address = 3
max-unauthenticated-connections = 22
first-byte-timeout-ms = 777
max-subscriptions-per-connection = 8
max-consumer-window = 77
max-branches-per-connection = 6
max-branches-per-user = 66
max-prepared-branches-per-user = 55
max-transaction-bytes = 4096
max-transaction-bytes-per-user = 8192
max-queues-per-user = 44
max-subscriptions-per-user = 33
max-consumer-window-bytes = 1024
max-memory-bytes-per-queue = 2048
memory-full-policy = "drop-oldest"
max-memory-bytes-per-user = 4096
memory-high-watermark = 123456789
max-stored-bytes-per-user = 5555

[security]
users-file = "/etc/escrow/users.toml"
login-backoff-max-ms = 500
populate-validated-user = true
login-threads = 3
max-waiting-logins-per-address = 2
max-pending-logins = 100
max-waiting-logins-per-user = 4
reserved-pending-logins = 10
max-login-delay-ms = 900

[delivery]
consumer-window = 10
queue-memory-window = 20
queue-memory-bytes = 30000
message-expiry-scan-period = -1
persist-delivery-count-before-delivery = true

[transactions]
timeout-ms = 1111
local-timeout-ms = 2222

[coordinator]
max-transactions = 12
connections = 2
statement-timeout-ms = 150
recovery-interval-ms = 250

[[coordinator.postgresql]]
name = "shop"
conninfo = "host=db dbname=shop user=app"

[heartbeat]
send-ms = 0
receive-ms = 2000
grace-ms = 10
max-ms = 60000

[http]
listen = "127.0.0.1:9161"
websocket = false
allowed-origins = ["https://app.example.com"]
session-timeout-ms = 60000
max-sessions = 5
max-sessions-per-user = 3
allowed-hosts = ["metrics.example.com"]
token-file = "/etc/escrow/token"
max-queue-metrics = 5
max-connections = 3

[admin]
max-page-size = 10
max-page-bytes = 2048

[[address-settings]]
match = "#"
dead-letter-address = "DLQ2"
expiry-address = ""
expiry-delay = 60000
redelivery-delay = 500
redelivery-delay-multiplier = 2.5
max-redelivery-delay = 5000
max-delivery-attempts = 6
auto-delete-queues = false
auto-delete-queues-delay = 1000
id-cache-size = 0
redelivery-collision-avoidance-factor = 0.2

[[address-settings]]
match = "orders.*"
max-delivery-attempts = -1
max-size-messages = 1000
max-size-bytes = 1048576
address-full-policy = "drop-head"
dead-letter-on-drop = true
ring-size = 10

[[security-settings]]
match = "#"
send = ["app"]
consume = ["app", "audit"]
browse = ["ops"]
create-durable-subscription = ["app"]
admin = ["ops"]

[[security-settings]]
match = "orders.#"
send = ["shop"]

[[tls-listener]]
listen = "0.0.0.0:61614"
certificate-chain = "server.pem"
private-key = "server.key"
client-ca = "ca.pem"
min-version = "1.3"
ciphers = "ECDHE-RSA-AES128-GCM-SHA256"
ciphersuites = "TLS_AES_128_GCM_SHA256"

[[websocket-listener]]
listen = "127.0.0.1:61615"
allowed-origins = ["https://app.example.com"]

[[websocket-listener]]
listen = "127.0.0.1:61616"
certificate-chain = "server.pem"
private-key = "server.key"
min-version = "1.3"
)toml";

}  // namespace

TEST_SUITE("broker/admin config") {
  TEST_CASE("a default configuration: every key with its default, in the file's sections") {
    broker_config config;
    bj::value a = answer_of(config);
    CHECK(a.at("config_file").is_null());
    CHECK(a.at("command_line_keys").as_array().empty());
    const bj::value& c = a.at("config");
    REQUIRE(c.at("listen").as_array().size() == 1);
    CHECK(str(c.at("listen").as_array().at(0)) == "127.0.0.1:61613");
    CHECK(str(c.at("data-dir")) == "./escrow-data");
    CHECK(str(c.at("log-level")) == "info");
    CHECK(num(c.at("io-threads")) == 0);
    CHECK(num(c.at("storage").at("map-size")) == 8589934592ull);
    CHECK(num(c.at("storage").at("log-size")) == 67108864);
    CHECK(num(c.at("storage").at("min-free-disk")) == 268435456);
    CHECK(str(c.at("storage").at("backup-root")) == "");
    CHECK(num(c.at("limits").at("max-frame-size")) == 10485760);
    CHECK(num(c.at("limits").at("max-headers")) == 1000);
    CHECK(num(c.at("limits").at("max-connections")) == 10000);
    CHECK(str(c.at("limits").at("memory-full-policy")) == "refuse");
    CHECK(str(c.at("security").at("users-file")) == "");
    CHECK(num(c.at("security").at("login-threads")) == 2);
    CHECK(c.at("security").at("populate-validated-user").as_bool() == false);
    CHECK(num(c.at("delivery").at("consumer-window")) == 1000);
    CHECK(c.at("delivery").at("message-expiry-scan-period").to_number<std::int64_t>() == 30000);
    CHECK(num(c.at("transactions").at("timeout-ms")) == 300000);
    CHECK(num(c.at("coordinator").at("max-transactions")) == 1000);
    CHECK(num(c.at("coordinator").at("connections")) == 4);
    CHECK(c.at("coordinator").at("postgresql").as_array().empty());
    CHECK(num(c.at("heartbeat").at("send-ms")) == 1000);
    CHECK(num(c.at("heartbeat").at("max-ms")) == 3600000);
    CHECK(num(c.at("http").at("max-connections")) == 64);
    CHECK(str(c.at("http").at("token-file")) == "");
    CHECK(num(c.at("admin").at("max-page-size")) == 1000);
    CHECK(num(c.at("admin").at("max-page-bytes")) == 1048576);
    CHECK(c.at("tls-listener").as_array().empty());
    CHECK(c.at("security-settings").as_array().empty());
    // The embedded address settings: one table, for every address.
    const bj::array& settings = c.at("address-settings").as_array();
    REQUIRE(settings.size() == 1);
    CHECK(str(settings.at(0).at("match")) == "#");
    CHECK(str(settings.at(0).at("dead-letter-address")) == "DLQ");
    CHECK(str(settings.at(0).at("expiry-address")) == "ExpiryQueue");
    CHECK(settings.at(0).as_object().size() == 3);  // only what the table sets

    config.config_file = "/etc/escrow/escrowd.toml";
    config.command_line_keys = {"listen", "data-dir"};
    a = answer_of(config);
    CHECK(str(a.at("config_file")) == "/etc/escrow/escrowd.toml");
    REQUIRE(a.at("command_line_keys").as_array().size() == 2);
    CHECK(str(a.at("command_line_keys").as_array().at(1)) == "data-dir");
  }

  TEST_CASE("every key comes back: the answer written as a file is read as the same configuration") {
    broker_config original;
    REQUIRE(load_config_text(kEveryKey, "every.toml", original) == "");
    bj::value a = answer_of(original);
    std::string text;
    write_toml(a.at("config").as_object(), "", text);
    INFO(text);
    broker_config reread;
    REQUIRE(load_config_text(text, "answer.toml", reread) == "");
    bj::value again = answer_of(reread);
    CHECK(again.at("config") == a.at("config"));
    // A key the answer left out would have its default in `reread`, away from `original`'s value.
    CHECK(join(changes_needing_restart(original, reread)) == "");
    broker_config running = original;
    std::vector<std::string> applied;
    for (const std::string& changed : apply_reloadable_keys(running, reread)) {
      std::string key = changed.substr(0, changed.find(' '));
      if (key != "address-settings" && key != "security-settings") applied.push_back(changed);  // applied every time
    }
    CHECK(join(applied) == "");
    CHECK(reread.log_level == "debug");
    CHECK(reread.http_allowed_hosts == original.http_allowed_hosts);
    CHECK(reread.http_token_file == original.http_token_file);
    CHECK(reread.address_settings.size() == 2);
    CHECK(reread.security_settings.size() == 2);
    // The paths of the TLS files, not what they hold; IPv6 listeners as the file writes them.
    CHECK(str(a.at("config").at("tls-listener").as_array().at(0).at("private-key")) == "server.key");
    CHECK(str(a.at("config").at("listen").as_array().at(1)) == "[::1]:7002");
    CHECK_FALSE(a.at("config").at("websocket-listener").as_array().at(0).as_object().contains("private-key"));
  }

  TEST_CASE("reloadable names the keys SIGHUP applies") {
    bj::value a = answer_of(broker_config{});
    std::set<std::string> listed;
    for (const auto& k : a.at("reloadable").as_array()) listed.insert(str(k));
    // Each key the core applies at SIGHUP changed, and nothing that needs a restart.
    broker_config running, fresh;
    fresh.message_expiry_scan_period_ms = -1;
    fresh.backup_root = "/elsewhere";
    fresh.persist_delivery_count_before_delivery = true;
    fresh.max_queue_metrics = 1;
    fresh.admin_max_page_size = 2;
    fresh.admin_max_page_bytes = 4096;
    CHECK(join(changes_needing_restart(running, fresh)) == "");
    std::set<std::string> applied;
    for (const auto& changed : apply_reloadable_keys(running, fresh)) applied.insert(changed.substr(0, changed.find(' ')));
    CHECK(applied.size() == 8);
    for (const auto& key : applied) {
      INFO(key);
      CHECK(listed.count(key) == 1);
    }
    // The rest: what the SIGHUP handler applies itself (broker/net/reload.cpp).
    std::vector<std::string> rest;
    std::set_difference(listed.begin(), listed.end(), applied.begin(), applied.end(), std::back_inserter(rest));
    CHECK(join(rest) == "http.allowed-hosts, http.token-file, log-level");
  }

  TEST_CASE("a coordinated database's password never shows") {
    broker_config config;
    REQUIRE(load_config_text(R"toml(
[[coordinator.postgresql]]
name = "shop"
conninfo = "host=127.0.0.1 dbname=shop user=app password=secret"

[[coordinator.postgresql]]
name = "billing"
conninfo = "postgresql://app:secret@db.example.com:5432/billing?sslpassword=secret&sslmode=require"
)toml",
                             "t.toml", config) == "");
    std::string text = config_answer(config);
    CHECK(text.find("secret") == std::string::npos);
    bj::value a = bj::parse(text);
    const bj::array& databases = a.at("config").at("coordinator").at("postgresql").as_array();
    REQUIRE(databases.size() == 2);
    CHECK(str(databases.at(0).at("name")) == "shop");
    CHECK(str(databases.at(0).at("conninfo")) == "host=127.0.0.1 dbname=shop user=app password=***");
    CHECK(str(databases.at(1).at("conninfo")) ==
          "postgresql://app:***@db.example.com:5432/billing?sslpassword=***&sslmode=require");
  }

  TEST_CASE("hide_conninfo_password: libpq's two forms, quoting and escapes, nested connection strings") {
    struct example {
      const char* conninfo;
      const char* shown;
    };
    for (const example& e : std::vector<example>{
             {"host=db dbname=shop password=secret", "host=db dbname=shop password=***"},
             {"host=db dbname=shop", "host=db dbname=shop"},
             {"", ""},
             {"  password = 'se cret \\' x'  host=db ", "  password = ***  host=db "},
             {"password=sec\\ ret host=db", "password=*** host=db"},
             {"host=db sslpassword=secret", "host=db sslpassword=***"},
             {"host=db PassWord=secret", "host=db PassWord=***"},
             {"password= host=db", "password= ***"},  // libpq too skips the spaces after '=': host=db is the value
             {"dbname='host=db password=secret' user=app", "dbname='host=db password=***' user=app"},
             {"dbname=postgresql://app:secret@db/shop", "dbname='postgresql://app:***@db/shop'"},
             {"postgresql://app:secret@db:5432/shop?sslmode=require&password=secret",
              "postgresql://app:***@db:5432/shop?sslmode=require&password=***"},
             {"postgres://app@db:5432/shop", "postgres://app@db:5432/shop"},
             {"postgresql://app:sec?ret@db/shop", "postgresql://app:***@db/shop"},  // '?' left unencoded
             {"postgresql://app:sec@ret@db/shop", "postgresql://app:***@db/shop"},
             {"postgresql://db/shop?password=secret&user=app@example", "postgresql://db/shop?password=***&user=app@example"},
             {"postgresql://db/shop?pass%77ord=secret", "postgresql://db/shop?pass%77ord=***"},
             {"postgresql://db/shop?dbname=host%3Ddb%20password%3Dsecret", "postgresql://db/shop?dbname=***"},
             // What libpq cannot read either (escrowd refuses to start with it): hidden whole.
             {"host=db password='secret", "***"},
             {"host=db secret", "***"},
         }) {
      INFO(e.conninfo);
      std::string shown = hide_conninfo_password(e.conninfo);
      CHECK(shown == e.shown);
      CHECK(shown.find("secret") == std::string::npos);
    }
  }
}
