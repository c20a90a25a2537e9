// Orders in, rows and confirmations out, escrowd coordinating PostgreSQL (coordinated_workload.h).
#include "coordinated_workload.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "pg_participant.h"

namespace escrow::tm {
namespace {

using clock_type = std::chrono::steady_clock;

// A SQL string literal (standard_conforming_strings is on: only ' needs doubling).
std::string sql_literal(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

// One worker thread: its own STOMP connection and PostgreSQL session.
class coordinated_worker {
 public:
  coordinated_worker(const coordinated_options& o, workload_counts& counts, coordinated_counts& extra)
      : options_(o), counts_(counts), extra_(extra), pg_(o.conninfo) {}

  void run() {
    auto idle_since = clock_type::now();
    auto failing_since = std::optional<clock_type::time_point>();
    for (;;) {
      std::optional<client::message> order;
      try {
        connect();
        order = consumer_->receive(std::chrono::milliseconds(200));
        failing_since.reset();
      } catch (const std::exception& e) {
        // escrowd or PostgreSQL is down (or the connection broke while waiting): try again.
        if (!failing_since) failing_since = clock_type::now();
        if (clock_type::now() - *failing_since > std::chrono::minutes(2))
          throw failed(std::string("escrowd or PostgreSQL unreachable for two minutes: ") + e.what());
        note("connect", e.what());
        drop();
        idle_since = clock_type::now();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      if (!order) {
        if (clock_type::now() - idle_since >= options_.idle_exit) return;
        continue;
      }
      idle_since = clock_type::now();
      handle(*order);
    }
  }

 private:
  void connect() {
    if (!connection_ || !connection_->is_open()) {
      drop();
      connection_ = client::connection::open(options_.stomp);
      client::consumer_options in;
      in.destination = options_.input;
      in.mode = client::ack_mode::individual_acknowledge;
      in.prefetch = 1;  // one order at a time per worker, as in the two-phase workload
      consumer_ = connection_->create_consumer(in);
    }
    pg_.reopen();
  }

  void drop() {
    consumer_.reset();
    connection_.reset();
  }

  void note(const char* stage, const char* what) {
    if (++notes_ <= 3) std::fprintf(stderr, "escrow-tm: coordinated: %s: %s\n", stage, what);
  }

  frame request(std::string command, const std::string& transaction) {
    frame f;
    f.command = std::move(command);
    f.add("transaction", transaction);
    return f;
  }

  // One order, one coordinated transaction.
  void handle(const client::message& order) {
    std::string id(order.header("order-id"));
    if (id.empty())
      throw failed("message " + std::string(order.message_id()) + " on " + options_.input + " has no order-id header");
    std::string tx = "eo-" + std::to_string(++sequence_);
    enum class stage { begin, ack, insert, send, prepare, commit } at = stage::begin;
    bool pg_open = false;
    static constexpr const char* kStages[] = {"BEGIN", "ACK", "INSERT", "SEND", "PREPARE TRANSACTION", "COMMIT"};
    try {
      frame begin = request("BEGIN", tx);
      begin.add("coordinate", "postgresql/" + options_.database);
      frame receipt = connection_->call(std::move(begin));
      std::string gid(receipt.get("pg-gid"));
      if (gid.empty())
        throw failed("the RECEIPT of BEGIN has no pg-gid header: this escrowd does not coordinate transactions");

      at = stage::ack;
      frame ack = request("ACK", tx);
      ack.add("id", std::string(order.ack_id()));
      connection_->call(std::move(ack));

      at = stage::insert;
      pg_.begin();
      pg_open = true;
      pg_.execute("INSERT INTO orders (id, body, xid) VALUES ($1, $2, $3)", {id, order.body(), gid});

      at = stage::send;
      frame send = request("SEND", tx);
      send.body = "confirmed " + id;
      send.add("destination", options_.output).add("persistent", "true").add("order-id", id);
      send.add("content-length", std::to_string(send.body.size()));
      connection_->call(std::move(send));

      at = stage::prepare;
      pg_.execute("PREPARE TRANSACTION " + sql_literal(gid));
      pg_open = false;

      at = stage::commit;
      receipt = connection_->call(request("COMMIT", tx));
      ++counts_.committed;
      std::string_view database = receipt.get("database");
      if (database == "pending") {
        ++extra_.pending;
      } else if (database != "committed") {
        note("COMMIT", ("RECEIPT with database:'" + std::string(database) + "' (expected committed or pending)").c_str());
      }
    } catch (const duplicate_key& e) {
      std::fprintf(stderr, "escrow-tm: coordinated: DUPLICATE order %s (exactly-once broken): %s\n", id.c_str(),
                   e.what());
      throw;
    } catch (const std::exception& e) {
      ++extra_.failures;
      note(kStages[static_cast<int>(at)], e.what());
      if (pg_open) {
        try {
          pg_.execute("ROLLBACK");
        } catch (const std::exception&) {  // a lost session ends its transaction with it
        }
      }
      if (at == stage::commit) {
        // The COMMIT went out: escrowd decides, and finishes the GID itself.
        ++extra_.unknown;
        drop();
        return;
      }
      ++counts_.rolled_back;
      // Give the order back now (escrowd rolls back the GID if it was prepared). If escrowd sent
      // ERROR the connection is gone already and escrowd rolled T back with it.
      try {
        if (connection_ && connection_->is_open()) connection_->call(request("ABORT", tx));
      } catch (const std::exception&) {
        drop();
      }
    }
  }

  const coordinated_options& options_;
  workload_counts& counts_;
  coordinated_counts& extra_;
  pg_participant pg_;
  std::unique_ptr<client::connection> connection_;
  std::unique_ptr<client::consumer> consumer_;
  long sequence_ = 0;
  int notes_ = 0;
};

}  // namespace

bool parse_open_string(const std::string& text, client::connect_options& out, std::string* error) {
  std::istringstream in(text);
  std::string item;
  while (in >> item) {
    auto eq = item.find('=');
    if (eq == std::string::npos) {
      *error = "--escrow: '" + item + "' is not key=value";
      return false;
    }
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    try {
      if (key == "host") {
        out.host = value;
      } else if (key == "port") {
        out.port = static_cast<std::uint16_t>(std::stoul(value));
      } else if (key == "login") {
        out.login = value;
      } else if (key == "passcode") {
        out.passcode = value;
      } else if (key == "timeout") {
        out.timeout = std::chrono::milliseconds(std::stol(value));
      } else if (key != "resource" && key != "branch") {
        *error = "--escrow: unknown key '" + key + "'";
        return false;
      }
    } catch (const std::exception&) {
      *error = "--escrow: " + key + " '" + value + "' is not a number";
      return false;
    }
  }
  return true;
}

void run_coordinated_workers(const coordinated_options& options, workload_counts& counts, coordinated_counts& extra) {
  std::mutex mutex;
  std::exception_ptr first_failure;
  std::vector<std::thread> threads;
  for (int i = 0; i < options.threads; ++i) {
    threads.emplace_back([&] {
      try {
        coordinated_worker w(options, counts, extra);
        w.run();
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!first_failure) first_failure = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first_failure) std::rethrow_exception(first_failure);
}

void load_orders(const client::connect_options& stomp, const std::string& input, long count, std::size_t body_size) {
  auto c = client::connection::open(stomp);
  client::producer_options o;
  o.destination = input;
  o.persistent = true;
  o.wait_for_receipt = false;
  auto pipelined = c->create_producer(o);
  o.wait_for_receipt = true;
  auto last = c->create_producer(o);
  char id[32];
  for (long i = 1; i <= count; ++i) {
    std::snprintf(id, sizeof id, "order-%07ld", i);
    client::outgoing_message m("order " + std::to_string(i) + " ");
    if (m.body.size() < body_size) m.body.append(body_size - m.body.size(), 'x');
    m.header("order-id", id);
    // Frames of one connection are handled in order: the last RECEIPT covers every send before it.
    (i == count ? last : pipelined).send(m);
  }
  c->close();
}

}  // namespace escrow::tm
