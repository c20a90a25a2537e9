// Orders in, rows and confirmations out (workload.h).
#include "workload.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "escrow/client.h"
#include "escrow_participant.h"
#include "pg_participant.h"

namespace escrow::tm {
namespace {

using clock_type = std::chrono::steady_clock;

// One worker thread: its own Escrow connection (xa_open on this thread) and PostgreSQL session.
class worker {
 public:
  worker(const workload_options& o, coordinator& c, workload_counts& counts, std::atomic<long>& sequence)
      : options_(o),
        coordinator_(c),
        counts_(counts),
        sequence_(sequence),
        escrow_(o.xa_switch, o.rmid, o.open_string),
        pg_(o.conninfo) {}

  void run() {
    auto idle_since = clock_type::now();
    for (;;) {
      std::optional<client::message> order;
      try {
        connect();
        order = consumer_->receive(std::chrono::milliseconds(200));
      } catch (const std::exception& e) {
        // Escrow or PostgreSQL is down (or the connection broke while waiting): try again.
        note_outage(e.what());
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
  // Opens what is not open; (re)subscribes after Escrow reopened its connection.
  void connect() {
    auto deadline = clock_type::now() + std::chrono::minutes(2);
    for (;;) {
      try {
        escrow_.reopen();
        if (options_.use_database) pg_.reopen();
        break;
      } catch (const unavailable&) {
        if (clock_type::now() >= deadline) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    if (!consumer_ || escrow_.generation() != generation_) {
      consumer_.reset();
      producer_.reset();
      client::connection* c = escrow_.connection();
      if (!c) throw unavailable("the Escrow connection dropped again");
      client::consumer_options in;
      in.destination = options_.input;
      in.mode = client::ack_mode::individual_acknowledge;
      in.prefetch = 1;  // one order at a time per worker: the others stay for the other workers
      consumer_ = c->create_consumer(in);
      client::producer_options out;
      out.destination = options_.output;
      out.persistent = true;
      producer_.emplace(c->create_producer(out));
      generation_ = escrow_.generation();
    }
  }

  void note_outage(const char* what) {
    if (++outages_ <= 3) std::fprintf(stderr, "escrow-tm: waiting for the resources: %s\n", what);
  }

  xid next_xid() {
    long n = ++sequence_;
    return xid(options_.format_id, options_.gtrid_prefix + options_.run_id + ":" + std::to_string(n),
               std::string(1, '\x01'));
  }

  // One order, one distributed transaction.
  void handle(const client::message& order) {
    std::string id(order.header("order-id"));
    if (id.empty()) throw failed("message " + std::string(order.message_id()) + " on " + options_.input +
                                 " has no order-id header");
    xid x = next_xid();
    std::vector<participant*> workers{&escrow_};
    if (options_.use_database) workers.push_back(&pg_);
    try {
      escrow_.start(x);
      consumer_->acknowledge(order);  // inside the branch: consumed only if the branch commits
      if (options_.use_database) {
        pg_.begin();
        pg_.execute("INSERT INTO orders (id, body, xid) VALUES ($1, $2, $3)", {id, order.body(), x.to_string()});
      }
      client::outgoing_message confirmation("confirmed " + id);
      confirmation.header("order-id", id);
      producer_->send(confirmation);
      escrow_.end(x, true);
    } catch (const duplicate_key& e) {
      std::fprintf(stderr, "escrow-tm: DUPLICATE order %s (exactly-once broken): %s\n", id.c_str(), e.what());
      rollback(x, workers);
      throw;
    } catch (const std::exception& e) {
      note_outage(e.what());
      rollback(x, workers);
      return;
    }
    if (coordinator_.complete(x, workers) == outcome::committed)
      ++counts_.committed;
    else
      ++counts_.rolled_back;
  }

  void rollback(const xid& x, const std::vector<participant*>& workers) {
    coordinator_.abort(x, workers);
    ++counts_.rolled_back;
  }

  const workload_options& options_;
  coordinator& coordinator_;
  workload_counts& counts_;
  std::atomic<long>& sequence_;
  escrow_participant escrow_;
  pg_participant pg_;
  unsigned generation_ = 0;
  std::unique_ptr<client::consumer> consumer_;
  std::optional<client::producer> producer_;
  int outages_ = 0;
};

}  // namespace

void create_orders_table(pg_participant& pg) {
  pg.execute("CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, body text NOT NULL, xid text NOT NULL)");
}

void run_workers(const workload_options& options, coordinator& coordinator, workload_counts& counts) {
  std::atomic<long> sequence{0};
  std::mutex mutex;
  std::exception_ptr first_failure;
  std::vector<std::thread> threads;
  for (int i = 0; i < options.threads; ++i) {
    threads.emplace_back([&] {
      try {
        worker w(options, coordinator, counts, sequence);
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

}  // namespace escrow::tm
