// The TOML configuration reader, through load_config_text (the same code as load_config_file
// without the file): regressions found by tests/fuzz/fuzz_config, and the error format.
#include <doctest/doctest.h>

#include <string>

#include "escrow/broker/config/config.h"

using namespace escrow::broker;

TEST_SUITE("broker/config") {
  TEST_CASE("a float where an integer belongs is refused, however large") {
    // Regression (corpus/config/regression-float-integer.toml): converting 5E99 to an integer was
    // undefined behaviour inside toml++.
    for (const char* text : {"[[address-settings]]\nmatch = \"a.*\"\nexpiry-delay = 5E99\n",
                             "[limits]\nmax-headers = 1e300\n", "io-threads = -1e19\n",
                             "[delivery]\nmessage-expiry-scan-period = 2.0\n"}) {
      INFO(text);
      broker_config config;
      std::string error = load_config_text(text, "t.toml", config);
      CHECK(error.rfind("t.toml:", 0) == 0);
      CHECK(error.find("must be") != std::string::npos);
    }
  }

  TEST_CASE("nan and inf are not numbers in range") {
    for (const char* text : {"[[address-settings]]\nmatch = \"#\"\nredelivery-delay-multiplier = nan\n",
                             "[[address-settings]]\nmatch = \"#\"\nredelivery-delay-multiplier = inf\n",
                             "[[address-settings]]\nmatch = \"#\"\nredelivery-collision-avoidance-factor = nan\n"}) {
      INFO(text);
      broker_config config;
      std::string error = load_config_text(text, "t.toml", config);
      CHECK(error.rfind("t.toml:3: address-settings[1].", 0) == 0);
    }
  }

  TEST_CASE("id-cache-size: Artemis's default, 0 turns duplicate detection off, and its edges") {
    CHECK(resolve_settings({}, "orders").id_cache_size == 20000);
    broker_config config;
    REQUIRE(load_config_text("[[address-settings]]\nmatch = \"#\"\n\n[[address-settings]]\nmatch = \"orders\"\n"
                             "id-cache-size = 3\n\n[[address-settings]]\nmatch = \"audit.*\"\nid-cache-size = 0\n",
                             "t.toml", config)
                .empty());
    CHECK(resolve_settings(config.address_settings, "orders").id_cache_size == 3);
    CHECK(resolve_settings(config.address_settings, "audit.eu").id_cache_size == 0);
    CHECK(resolve_settings(config.address_settings, "other").id_cache_size == 20000);
    for (const char* value : {"-1", "10000001", "2.5", "\"many\""}) {
      INFO(value);
      broker_config c;
      std::string error = load_config_text(std::string("[[address-settings]]\nmatch = \"#\"\nid-cache-size = ") + value +
                                               "\n",
                                           "t.toml", c);
      CHECK(error.rfind("t.toml:3: address-settings[1].id-cache-size must be a count of ids from 0", 0) == 0);
    }
  }

  TEST_CASE("last-value queues: last-value-key, default-last-value-key, last-value, last-value-queue") {
    broker_config config;
    REQUIRE(load_config_text("[[address-settings]]\nmatch = \"a.#\"\nlast-value-key = \"sym\"\n\n"
                             "[[address-settings]]\nmatch = \"b.#\"\ndefault-last-value-key = \"JMSXGroupID\"\n\n"
                             "[[address-settings]]\nmatch = \"c.#\"\nlast-value = true\n\n"
                             "[[address-settings]]\nmatch = \"d.#\"\nlast-value-queue = true\n\n"
                             "[[address-settings]]\nmatch = \"d.off\"\ndefault-last-value-queue = false\n",
                             "t.toml", config)
                .empty());
    CHECK(resolve_settings(config.address_settings, "a.x").last_value_key == "sym");
    CHECK(resolve_settings(config.address_settings, "b.x").last_value_key == "JMSXGroupID");
    CHECK(resolve_settings(config.address_settings, "c.x").last_value_key == "_AMQ_LVQ_NAME");
    CHECK(resolve_settings(config.address_settings, "d.x").last_value_key == "_AMQ_LVQ_NAME");
    CHECK(resolve_settings(config.address_settings, "d.off").last_value_key.empty());
    CHECK(resolve_settings(config.address_settings, "e").last_value_key.empty());
    for (const char* line : {"last-value-key = \"\"", "last-value-key = \"a:b\"", "last-value-key = \"a\\nb\"",
                             "default-last-value-key = \"x\\ry\""}) {
      INFO(line);
      broker_config c;
      std::string error = load_config_text(std::string("[[address-settings]]\nmatch = \"#\"\n") + line + "\n", "t.toml", c);
      CHECK(error.find("must be a header name (not empty, without ':' or a line break)") != std::string::npos);
    }
    broker_config c;
    CHECK(load_config_text("[[address-settings]]\nmatch = \"#\"\nlast-value = 1\n", "t.toml", c)
              .rfind("t.toml:3: address-settings[1].last-value must be true or false", 0) == 0);
  }

  TEST_CASE("exclusive queues: exclusive and Artemis's default-exclusive-queue, false by default") {
    broker_config config;
    REQUIRE(load_config_text("[[address-settings]]\nmatch = \"a.#\"\nexclusive = true\n\n"
                             "[[address-settings]]\nmatch = \"b.#\"\ndefault-exclusive-queue = true\n\n"
                             "[[address-settings]]\nmatch = \"b.off\"\nexclusive = false\n",
                             "t.toml", config)
                .empty());
    CHECK(resolve_settings(config.address_settings, "a.x").exclusive);
    CHECK(resolve_settings(config.address_settings, "b.x").exclusive);
    CHECK_FALSE(resolve_settings(config.address_settings, "b.off").exclusive);
    CHECK_FALSE(resolve_settings(config.address_settings, "c").exclusive);
    broker_config c;
    CHECK(load_config_text("[[address-settings]]\nmatch = \"#\"\nexclusive = \"yes\"\n", "t.toml", c)
              .rfind("t.toml:3: address-settings[1].exclusive must be true or false", 0) == 0);
  }

  TEST_CASE("queue limits: max-size-messages, max-size-bytes, ring-size, address-full-policy, dead-letter-on-drop") {
    broker_config config;
    REQUIRE(load_config_text("[[address-settings]]\nmatch = \"#\"\n\n[[address-settings]]\nmatch = \"orders.#\"\n"
                             "max-size-messages = 0\nmax-size-bytes = 10485760\nring-size = 1\n"
                             "address-full-policy = \"drop-head\"\ndead-letter-on-drop = true\n\n"
                             "[[address-settings]]\nmatch = \"orders.eu\"\nmax-size-messages = -1\n"
                             "address-full-policy = \"reject-publish\"\n",
                             "t.toml", config)
                .empty());
    auto s = resolve_settings(config.address_settings, "orders.us");
    CHECK(s.max_size_messages == 0);
    CHECK(s.max_size_bytes == 10485760);
    CHECK(s.ring_size == 1);
    CHECK(s.address_full_policy == full_policy::drop_head);
    CHECK(s.dead_letter_on_drop);
    auto eu = resolve_settings(config.address_settings, "orders.eu");
    CHECK(eu.max_size_messages == -1);
    CHECK(eu.max_size_bytes == 10485760);
    CHECK(eu.address_full_policy == full_policy::fail);
    CHECK_FALSE(resolve_settings(config.address_settings, "other").limited());
    struct bad {
      const char* line;
      const char* error;
    };
    for (bad b : {bad{"max-size-messages = -2", "max-size-messages must be a count of messages (0 or more), or -1 for no limit"},
                  bad{"max-size-messages = 2.0", "max-size-messages must be a count of messages"},
                  bad{"max-size-bytes = \"10MB\"", "max-size-bytes must be a size in bytes (0 or more), or -1 for no limit"},
                  bad{"max-size-bytes = 5E99", "max-size-bytes must be a size in bytes"},
                  bad{"ring-size = 0", "ring-size must be a count of messages (at least 1), or -1 for no ring"},
                  bad{"ring-size = -5", "ring-size must be a count of messages (at least 1)"},
                  bad{"address-full-policy = \"PAGE\"", "address-full-policy must be \"FAIL\", \"DROP\", \"DROP-HEAD\" or \"BLOCK\""},
                  bad{"address-full-policy = 1", "address-full-policy must be \"FAIL\""},
                  bad{"dead-letter-on-drop = \"yes\"", "dead-letter-on-drop must be true or false"}}) {
      INFO(b.line);
      broker_config c;
      std::string error = load_config_text(std::string("[[address-settings]]\nmatch = \"#\"\n") + b.line + "\n", "t.toml", c);
      CHECK(error.rfind(std::string("t.toml:3: address-settings[1].") + b.error, 0) == 0);
    }
  }

  TEST_CASE("text is read as a file is") {
    broker_config config;
    CHECK(load_config_text("[delivery]\nconsumer-window = 7\n", "t.toml", config).empty());
    CHECK(config.consumer_window == 7);
    CHECK(load_config_text("[delivery]\nconsumer-window = 0\n", "t.toml", config) ==
          "t.toml:2: delivery.consumer-window must be at least 1");
    CHECK(load_config_text("x = [", "t.toml", config).rfind("t.toml:1: ", 0) == 0);
  }

  TEST_CASE("the login keys: defaults and their edges") {
    broker_config config;
    CHECK(config.login_threads == 2);
    CHECK(config.max_waiting_logins_per_address == 8);
    CHECK(config.max_pending_logins == 256);
    CHECK(load_config_text("[security]\nlogin-threads = 64\nmax-waiting-logins-per-address = 0\n"
                           "max-pending-logins = 1\n", "t.toml", config).empty());
    CHECK(config.login_threads == 64);
    CHECK(config.max_waiting_logins_per_address == 0);
    CHECK(config.max_pending_logins == 1);
    CHECK(load_config_text("[security]\nlogin-threads = 65\n", "t.toml", config) ==
          "t.toml:2: security.login-threads must be from 1 to 64");
    CHECK(load_config_text("[security]\nlogin-threads = 0\n", "t.toml", config) ==
          "t.toml:2: security.login-threads must be from 1 to 64");
    CHECK(load_config_text("[security]\nmax-pending-logins = 0\n", "t.toml", config) ==
          "t.toml:2: security.max-pending-logins must be at least 1");
    // Issue 23, N1 and N2.
    broker_config fresh;
    CHECK(fresh.max_waiting_logins_per_user == 16);
    CHECK(fresh.reserved_pending_logins == 64);
    CHECK(fresh.max_login_delay_ms == 3000);
    CHECK(load_config_text("[security]\nmax-waiting-logins-per-user = 1\nreserved-pending-logins = 0\n"
                           "max-login-delay-ms = 0\n", "t.toml", fresh).empty());
    CHECK(fresh.max_waiting_logins_per_user == 1);
    CHECK(fresh.max_login_delay_ms == 0);
    CHECK(load_config_text("[security]\nmax-waiting-logins-per-user = 0\n", "t.toml", fresh) ==
          "t.toml:2: security.max-waiting-logins-per-user must be at least 1");
    CHECK(load_config_text("[security]\nmax-login-delay-ms = 86400001\n", "t.toml", fresh).find("must be") !=
          std::string::npos);
  }

  TEST_CASE("the byte budgets of memory: defaults and edges") {
    broker_config config;
    CHECK(config.max_subscriptions_per_user == 10000);
    CHECK(config.max_consumer_window_bytes == 16u << 20);
    CHECK(config.max_memory_bytes_per_queue == 64u << 20);
    CHECK(config.max_memory_bytes_per_user == 256u << 20);
    CHECK(config.memory_full_policy == "refuse");
    CHECK(config.queue_memory_bytes == 8u << 20);
    CHECK(config.memory_high_watermark == 0);
    CHECK(load_config_text("[limits]\nmax-subscriptions-per-user = 1\nmax-consumer-window-bytes = 1\n"
                           "max-memory-bytes-per-queue = 1\nmax-memory-bytes-per-user = 1\n"
                           "memory-full-policy = \"drop-oldest\"\nmemory-high-watermark = 1\n[delivery]\nqueue-memory-bytes = 1\n",
                           "t.toml", config).empty());
    CHECK(config.memory_full_policy == "drop-oldest");
    CHECK(config.queue_memory_bytes == 1);
    CHECK(config.memory_high_watermark == 1);
    for (const char* key : {"max-subscriptions-per-user", "max-consumer-window-bytes", "max-memory-bytes-per-queue",
                            "max-memory-bytes-per-user"}) {
      CAPTURE(key);
      CHECK(load_config_text(std::string("[limits]\n") + key + " = 0\n", "t.toml", config) ==
            std::string("t.toml:2: limits.") + key + " must be at least 1");
    }
    CHECK(load_config_text("[limits]\nmemory-full-policy = \"block\"\n", "t.toml", config) ==
          "t.toml:2: limits.memory-full-policy must be \"refuse\" or \"drop-oldest\"");
  }

  TEST_CASE("the coordinator's keys and databases: defaults, edges and the errors") {
    broker_config config;
    CHECK(config.coordinated_databases.empty());
    CHECK(config.max_coordinated_transactions == 1000);
    CHECK(config.coordinator_connections == 4);
    CHECK(config.coordinator_statement_timeout_ms == 5000);
    CHECK(config.coordinator_recovery_interval_ms == 5000);
    CHECK(load_config_text("[coordinator]\nmax-transactions = 1\nconnections = 64\nstatement-timeout-ms = 100\n"
                           "recovery-interval-ms = 100\n[[coordinator.postgresql]]\nname = \"shop\"\n"
                           "conninfo = \"dbname=shop\"\n[[coordinator.postgresql]]\nname = \"b.2-x_y\"\nconninfo = \"\"\n",
                           "t.toml", config)
              .empty());
    CHECK(config.max_coordinated_transactions == 1);
    CHECK(config.coordinator_connections == 64);
    REQUIRE(config.coordinated_databases.size() == 2);
    CHECK(config.coordinated_databases[0].name == "shop");
    CHECK(config.coordinated_databases[0].conninfo == "dbname=shop");
    CHECK(config.coordinated_databases[0].where == "t.toml:6: coordinator.postgresql[1]");
    CHECK(config.coordinated_databases[1].name == "b.2-x_y");
    CHECK(load_config_text("[coordinator]\nmax-transactions = 0\n", "t.toml", config) ==
          "t.toml:2: coordinator.max-transactions must be at least 1");
    CHECK(load_config_text("[coordinator]\nconnections = 65\n", "t.toml", config) ==
          "t.toml:2: coordinator.connections must be at most 64");
    CHECK(load_config_text("[coordinator]\nrecovery-interval-ms = 99\n", "t.toml", config).find("must be at least 100") !=
          std::string::npos);
    broker_config fresh;
    CHECK(load_config_text("[[coordinator.postgresql]]\nname = \"shop\"\n", "t.toml", fresh) ==
          "t.toml:1: coordinator.postgresql[1] needs both name and conninfo (a coordinated database is named and "
          "reached by them)");
    CHECK(load_config_text("[[coordinator.postgresql]]\nname = \"a/b\"\nconninfo = \"\"\n", "t.toml", fresh)
              .find("coordinator.postgresql[1].name must be a name of 1 to 64") != std::string::npos);
    CHECK(load_config_text("[[coordinator.postgresql]]\nname = \"a\"\nconninfo = \"\"\n[[coordinator.postgresql]]\n"
                           "name = \"a\"\nconninfo = \"x=1\"\n", "t.toml", fresh)
              .find("the name 'a' is already used by t.toml:1: coordinator.postgresql[1]") != std::string::npos);
    CHECK(load_config_text("[[coordinator.postgresql]]\nname = \"a\"\nconninfo = \"\"\nport = 5\n", "t.toml", fresh)
              .find("coordinator.postgresql[1].port: unknown key") != std::string::npos);
    CHECK(fresh.coordinated_databases.empty());  // a list that does not load changes nothing
  }

  TEST_CASE("the limits of paged admin answers and of per-queue metrics: defaults and edges") {
    broker_config config;
    CHECK(config.max_queue_metrics == 1000);
    CHECK(config.admin_max_page_size == 1000);
    CHECK(config.admin_max_page_bytes == 1048576);
    CHECK(load_config_text("[http]\nmax-queue-metrics = 0\n[admin]\nmax-page-size = 1\nmax-page-bytes = 1024\n",
                           "t.toml", config).empty());
    CHECK(config.max_queue_metrics == 0);
    CHECK(config.admin_max_page_size == 1);
    CHECK(config.admin_max_page_bytes == 1024);
    CHECK(load_config_text("[admin]\nmax-page-size = 100000\nmax-page-bytes = 8388608\n", "t.toml", config).empty());
    CHECK(load_config_text("[admin]\nmax-page-size = 0\n", "t.toml", config) ==
          "t.toml:2: admin.max-page-size must be at least 1");
    CHECK(load_config_text("[admin]\nmax-page-size = 100001\n", "t.toml", config) ==
          "t.toml:2: admin.max-page-size must be at most 100000");
    CHECK(load_config_text("[admin]\nmax-page-bytes = 1023\n", "t.toml", config) ==
          "t.toml:2: admin.max-page-bytes must be at least 1024");
    CHECK(load_config_text("[admin]\nmax-page-bytes = 8388609\n", "t.toml", config) ==
          "t.toml:2: admin.max-page-bytes must be at most 8388608");
    CHECK(load_config_text("[http]\nmax-queue-metrics = 1000001\n", "t.toml", config) ==
          "t.toml:2: http.max-queue-metrics must be at most 1000000");
    CHECK(load_config_text("[admin]\npage = 1\n", "t.toml", config) == "t.toml:2: admin.page: unknown key");
  }

  TEST_CASE("the limits of connections not logged in and of HTTP connections: defaults and edges") {
    broker_config config;
    CHECK(config.max_unauthenticated_per_address == 64);
    CHECK(config.max_unauthenticated_connections == 0);
    CHECK(config.first_byte_timeout_ms == 5000);
    CHECK(config.http_max_connections == 64);
    CHECK(unauthenticated_cap(config) == 5000);  // 0: half of max-connections (10000)
    CHECK(load_config_text("[limits]\nmax-unauthenticated-per-address = 1\nmax-unauthenticated-connections = 7\n"
                           "first-byte-timeout-ms = 1\n[http]\nmax-connections = 1\n", "t.toml", config).empty());
    CHECK(config.max_unauthenticated_per_address == 1);
    CHECK(unauthenticated_cap(config) == 7);
    CHECK(config.first_byte_timeout_ms == 1);
    CHECK(config.http_max_connections == 1);
    config.max_connections = 5;
    CHECK(unauthenticated_cap(config) == 5);  // never more than max-connections
    config.max_unauthenticated_connections = 0;
    CHECK(unauthenticated_cap(config) == 3);  // half, rounded up
    config.max_connections = 1;
    CHECK(unauthenticated_cap(config) == 1);
    CHECK(load_config_text("[limits]\nfirst-byte-timeout-ms = 86400000\n[http]\nmax-connections = 100000\n", "t.toml",
                           config).empty());
    CHECK(load_config_text("[limits]\nmax-unauthenticated-per-address = 0\n", "t.toml", config) ==
          "t.toml:2: limits.max-unauthenticated-per-address must be at least 1");
    CHECK(load_config_text("[limits]\nfirst-byte-timeout-ms = 0\n", "t.toml", config) ==
          "t.toml:2: limits.first-byte-timeout-ms must be at least 1");
    CHECK(load_config_text("[limits]\nfirst-byte-timeout-ms = 86400001\n", "t.toml", config) ==
          "t.toml:2: limits.first-byte-timeout-ms must be at most 86400000");
    CHECK(load_config_text("[limits]\nmax-unauthenticated-connections = 4294967296\n", "t.toml", config) ==
          "t.toml:2: limits.max-unauthenticated-connections must be at most 4294967295");
    CHECK(load_config_text("[http]\nmax-connections = 0\n", "t.toml", config) ==
          "t.toml:2: http.max-connections must be at least 1");
    CHECK(load_config_text("[http]\nmax-connections = 100001\n", "t.toml", config) ==
          "t.toml:2: http.max-connections must be at most 100000");
  }

  TEST_CASE("the commit log's keys: defaults and their edges") {
    broker_config config;
    CHECK(config.log_size == 64ull * 1024 * 1024);
    CHECK(config.checkpoint_interval_ms == 500);
    CHECK(load_config_text("[storage]\nlog-size = 16777216\ncheckpoint-interval-ms = 1\n", "t.toml", config).empty());
    CHECK(config.log_size == 16777216);
    CHECK(config.checkpoint_interval_ms == 1);
    CHECK(load_config_text("[storage]\nlog-size = 16777215\n", "t.toml", config) ==
          "t.toml:2: storage.log-size must be at least 16777216");
    CHECK(load_config_text("[storage]\ncheckpoint-interval-ms = 0\n", "t.toml", config) ==
          "t.toml:2: storage.checkpoint-interval-ms must be at least 1");
    CHECK(load_config_text("[storage]\ncheckpoint-interval-ms = 4294967296\n", "t.toml", config).rfind(
              "t.toml:2: storage.checkpoint-interval-ms must be", 0) == 0);
  }
}
