// loadgen: the STOMP 1.2 load generator that scripts/bench drives. It measures Escrow from the
// outside, over real TCP connections, the way an application sees it:
//
//   run    consumers subscribe, then producers send; measures the send rate (first SEND to last
//          RECEIPT), the end-to-end rate (first SEND to last MESSAGE received), the send-to-receipt
//          latency (p50/p99: with persistent messages this is the cost of one durable group
//          commit), and checks that every message arrived exactly once.
//   fill   producers only: loads a backlog into a queue (send rate and receipt latency).
//   drain  consumers only: reads --count messages back (drain rate) and checks that each
//          producer's sequence has no gaps or duplicates within what was received.
//   fsync  no broker: the disk's floor, 4 KiB pwrite + fdatasync in a loop, the price of one
//          durable point that group commit amortises. --pages N writes N pages at scattered
//          places of a 400 KiB file before each sync, and --meta-sync true then writes and syncs
//          120 bytes at its start: the shape of one LMDB commit (data pages, sync, meta page,
//          sync), the floor under a lone persistent SEND.
//   probe  connects until the broker answers CONNECTED (used to time a restart).
//   pingpong  no broker: the loopback round-trip floor, 64 bytes to and fro over one TCP
//          connection on 127.0.0.1 (TCP_NODELAY) in a loop for --seconds.
//
// The same runs work against other STOMP brokers (scripts/bench-peers drives RabbitMQ and
// ActiveMQ): --vhost sets the CONNECT host header (RabbitMQ's virtual host, "/"), --login and
// --passcode the credentials, --prefetch-header the SUBSCRIBE header that carries --prefetch
// (ActiveMQ: activemq.prefetchSize). --tx N makes each producer send local transactions of N
// SENDs (BEGIN, N SENDs, COMMIT with a receipt, in one write), one transaction in flight; the
// send-to-receipt latency is then BEGIN-to-COMMIT-receipt. --kill-pid P sends SIGKILL to P as soon
// as every producer has its last RECEIPT (the durability runs: restart, drain, count survivors).
//
// For the expiry benchmark, fill can make every Nth message expire at a given time
// (--expire-every, --expires-at; their bodies are not numbered, so a drain of the others sees no
// gaps), and drain can print its progress every few milliseconds (--timeline-ms).
//
// One TCP connection per producer and per consumer, one std::thread each, plain blocking POSIX
// sockets; every thread owns its socket and its frame_parser. Times are taken with steady_clock.
// The last line that starts with "RESULT " is machine-readable (key=value pairs).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_client.h"
#include "escrow/frame.h"

namespace {

using namespace escrow::bench;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// Options

struct options {
  std::string mode = "run";
  std::string host = "127.0.0.1";
  int port = 61613;
  int producers = 1;
  int consumers = 1;
  std::uint64_t count = 10000;  // per producer (run, fill); in total (drain)
  std::size_t body_size = 1024;
  bool persistent = true;
  std::uint32_t window = 64;  // receipts in flight per producer; 0 = fire-and-forget
  std::string ack = "client-individual";
  std::uint32_t prefetch = 1000;
  std::string queue = "bench";
  std::string dir = ".";
  double seconds = 3;
  std::uint32_t pages = 1;  // fsync: 4 KiB pages written (at scattered places when > 1) per sync
  bool meta_sync = false;   // fsync: then 120 bytes at offset 32 and a second sync
  double timeout = 30;  // seconds without progress before giving up
  std::uint64_t expire_every = 0;  // fill/run: every Nth message expires at expires_at (0: none)
  std::uint64_t expires_at = 0;    // epoch ms
  std::uint64_t deliver_at = 0;    // fill/run: every message is scheduled for this epoch ms (0: none)
  std::uint64_t timeline_ms = 0;   // drain: print "TIMELINE epoch_ms received" this often (0: no)
  std::string vhost = "localhost";  // CONNECT host header
  std::string login;
  std::string passcode;
  std::string prefetch_header = "prefetch-count";
  std::uint32_t tx = 0;   // > 0: local transactions of this many SENDs, receipted COMMIT
  int kill_pid = 0;       // > 0: SIGKILL this pid right after the last RECEIPT of every producer
  bool omit_persistent_false = false;  // non-persistent SENDs carry no persistent header at all
};

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [options]\n"
               "  --mode run|fill|drain|fsync|probe|pingpong   (run)\n"
               "  --host ADDR                         (127.0.0.1)\n"
               "  --port N                            (61613)\n"
               "  --producers N                       (1)\n"
               "  --consumers M                       (1)\n"
               "  --count N      messages per producer; in drain mode, in total (10000).\n"
               "                 drain checks gaps reliably when it drains the whole queue: when it\n"
               "                 stops early, messages still in flight to another consumer look missing\n"
               "  --body-size B  bytes per message body (1024)\n"
               "  --persistent true|false             (true)\n"
               "  --window W     un-receipted SENDs in flight per producer; 0 = no receipts (64)\n"
               "  --ack auto|client|client-individual (client-individual)\n"
               "  --prefetch P   SUBSCRIBE prefetch-count (1000)\n"
               "  --queue NAME   destination /queue/NAME (bench)\n"
               "  --timeout S    seconds without progress before giving up (30)\n"
               "  --dir D        fsync mode: directory of the test file (.)\n"
               "  --seconds S    fsync mode: duration (3)\n"
               "  --pages N      fsync mode: 4 KiB pages per sync, scattered over 400 KiB (1)\n"
               "  --meta-sync true|false  fsync mode: then 120 bytes and a second sync, as LMDB (false)\n"
               "  --expire-every N --expires-at MS   every Nth message sent expires at epoch ms MS\n"
               "  --deliver-at MS  every message sent is scheduled for epoch ms MS (_AMQ_SCHED_DELIVERY)\n"
               "  --timeline-ms T  drain mode: print TIMELINE <epoch ms> <received> every T ms\n"
               "  --vhost H      CONNECT host header (localhost; RabbitMQ: /)\n"
               "  --login L --passcode P   CONNECT credentials (none)\n"
               "  --prefetch-header NAME   SUBSCRIBE header carrying --prefetch (prefetch-count)\n"
               "  --tx N         producers send transactions of N SENDs with a receipted COMMIT (0: no)\n"
               "  --kill-pid P   SIGKILL pid P right after the last RECEIPT of every producer\n"
               "  --omit-persistent-false true|false  non-persistent SENDs without a persistent header\n"
               "                 (RabbitMQ takes persistent:false as durable:false and refuses to\n"
               "                 redeclare the durable queue the consumers declared) (false)\n",
               argv0);
}

// Sets the option `name` to `value`.
option_value set_option(options& o, std::string_view name, const std::string& value) {
  bool ok = true;
  if (name == "--mode") {
    o.mode = value;
    ok = value == "run" || value == "fill" || value == "drain" || value == "fsync" || value == "probe" ||
         value == "pingpong";
  } else if (name == "--host") {
    o.host = value;
  } else if (name == "--port") {
    ok = parse_number(value, o.port) && o.port > 0 && o.port < 65536;
  } else if (name == "--producers") {
    ok = parse_number(value, o.producers) && o.producers >= 0;
  } else if (name == "--consumers") {
    ok = parse_number(value, o.consumers) && o.consumers >= 0;
  } else if (name == "--count") {
    ok = parse_number(value, o.count);
  } else if (name == "--body-size") {
    ok = parse_number(value, o.body_size);
  } else if (name == "--persistent") {
    ok = value == "true" || value == "false";
    o.persistent = value == "true";
  } else if (name == "--window") {
    ok = parse_number(value, o.window);
  } else if (name == "--ack") {
    o.ack = value;
    ok = value == "auto" || value == "client" || value == "client-individual";
  } else if (name == "--prefetch") {
    ok = parse_number(value, o.prefetch) && o.prefetch > 0;
  } else if (name == "--queue") {
    o.queue = value;
    ok = !value.empty();
  } else if (name == "--dir") {
    o.dir = value;
  } else if (name == "--seconds") {
    ok = parse_seconds(value, o.seconds);
  } else if (name == "--pages") {
    ok = parse_number(value, o.pages) && o.pages >= 1 && o.pages <= 100;
  } else if (name == "--meta-sync") {
    ok = value == "true" || value == "false";
    o.meta_sync = value == "true";
  } else if (name == "--timeout") {
    ok = parse_seconds(value, o.timeout);
  } else if (name == "--expire-every") {
    ok = parse_number(value, o.expire_every);
  } else if (name == "--expires-at") {
    ok = parse_number(value, o.expires_at);
  } else if (name == "--deliver-at") {
    ok = parse_number(value, o.deliver_at);
  } else if (name == "--timeline-ms") {
    ok = parse_number(value, o.timeline_ms);
  } else if (name == "--vhost") {
    o.vhost = value;
  } else if (name == "--login") {
    o.login = value;
  } else if (name == "--passcode") {
    o.passcode = value;
  } else if (name == "--prefetch-header") {
    o.prefetch_header = value;
    ok = !value.empty();
  } else if (name == "--tx") {
    ok = parse_number(value, o.tx);
  } else if (name == "--omit-persistent-false") {
    ok = value == "true" || value == "false";
    o.omit_persistent_false = value == "true";
  } else if (name == "--kill-pid") {
    ok = parse_number(value, o.kill_pid) && o.kill_pid > 1;
  } else {
    return option_value::unknown;
  }
  return ok ? option_value::ok : option_value::bad;
}

std::optional<options> parse_options(int argc, char** argv) {
  options o;
  auto set = [&](std::string_view name, const std::string& value) { return set_option(o, name, value); };
  if (!parse_option_pairs("loadgen", argc, argv, set)) return std::nullopt;
  return o;
}

// ---------------------------------------------------------------------------------------------
// Shared state of a run

struct shared_state {
  std::atomic<bool> go{false};           // producers start sending
  std::atomic<bool> stop{false};         // consumers stop
  std::atomic<std::uint64_t> received{0};  // MESSAGE frames so far, all consumers
  std::atomic<int> subscribed{0};        // consumers whose SUBSCRIBE has been confirmed
  std::atomic<int> producers_done{0};
  std::atomic<int> producers_receipted{0};  // producers that have every RECEIPT they asked for
  std::atomic<bool> failed{false};       // some connection failed
  std::mutex log_mutex;
  time_point t0;                         // set before go

  void complain(const std::string& who, const std::string& what) {
    std::lock_guard lock(log_mutex);
    std::fprintf(stderr, "loadgen: %s: %s\n", who.c_str(), what.c_str());
    failed = true;
  }
};

struct producer_result {
  std::uint64_t sent = 0;
  std::uint64_t receipted = 0;
  time_point first_send{};
  time_point last_send{};
  time_point last_receipt{};
  std::vector<std::int64_t> latency_us;  // send-to-receipt, one per receipted SEND
};

struct consumer_result {
  std::vector<std::uint64_t> got;  // (producer << 32) | seq, in arrival order
  std::uint64_t unparsable = 0;
  std::uint64_t out_of_order = 0;  // a producer's sequence going backwards on this connection
  time_point last_message{};
};

// ---------------------------------------------------------------------------------------------
// Producer

void run_producer(const options& o, int index, shared_state& st, producer_result& r) {
  std::string who = "producer " + std::to_string(index);
  stomp_connection c;
  if (!c.open(o.host, o.port, o.timeout, o.vhost, o.login, o.passcode)) {
    st.complain(who, c.error());
    ++st.producers_done;
    return;
  }
  while (!st.go.load()) std::this_thread::sleep_for(1ms);

  const std::string destination = "/queue/" + o.queue;
  const std::string padding(o.body_size, 'x');
  std::vector<time_point> sent_at(o.window > 0 ? o.count : 0);
  std::uint64_t outstanding = 0;
  r.latency_us.reserve(o.window > 0 ? o.count : 0);
  std::string wire;
  std::string body;  // reused: a SEND's body is written from here into `wire`, no frame in between
  const std::string expires_at = std::to_string(o.expires_at);
  const std::string deliver_at = std::to_string(o.deliver_at);
  auto timeout = to_duration(o.timeout);

  // Handles one frame from the broker: a RECEIPT closes an outstanding SEND.
  auto handle = [&](const escrow::frame& f) -> bool {
    if (f.command != "RECEIPT") {
      st.complain(who, "unexpected " + stomp_connection::describe(f));
      return false;
    }
    std::string_view id = f.get("receipt-id");
    std::uint64_t seq = 0;
    if (id.size() < 2 || id[0] != 's' || !parse_number(id.substr(1), seq) || seq >= sent_at.size() ||
        sent_at[seq] == time_point{}) {
      st.complain(who, "RECEIPT for an unknown receipt-id '" + std::string(id) + "'");
      return false;
    }
    auto now = clock_type::now();
    r.latency_us.push_back(micros(now - sent_at[seq]));
    sent_at[seq] = time_point{};
    r.last_receipt = now;
    ++r.receipted;
    --outstanding;
    return true;
  };
  // Waits for one frame (a receipt, normally), at most the timeout.
  auto wait_one = [&]() -> bool {
    auto f = c.next(clock_type::now() + timeout);
    if (!f) {
      st.complain(who, c.broken() ? c.error()
                                  : "stalled: no RECEIPT for " + std::to_string(o.timeout) + " s with " +
                                        std::to_string(outstanding) + " SENDs outstanding");
      return false;
    }
    return handle(*f);
  };

  bool ok = true;
  std::uint64_t numbered = 0;  // bodies of messages that do not expire are numbered without gaps
  if (o.tx > 0) {
    // Local transactions: BEGIN, tx SENDs, COMMIT with a receipt, one write; wait for the receipt.
    const std::uint64_t transactions = o.count / o.tx;
    r.latency_us.reserve(transactions);
    for (std::uint64_t t = 0; t < transactions && ok; ++t) {
      const std::string txid = "t" + std::to_string(index) + "-" + std::to_string(t);
      wire.clear();
      escrow::frame b;
      b.command = "BEGIN";
      b.add("transaction", txid);
      escrow::encode_to(wire, b);
      for (std::uint32_t i = 0; i < o.tx; ++i) {
        body = "p" + std::to_string(index) + "-" + std::to_string(numbered++) + "|";
        if (body.size() < o.body_size) body.append(padding, 0, o.body_size - body.size());
        escrow::frame_writer w(wire, "SEND", escrow::stomp_version::v1_2, body.size() + destination.size() + 96);
        w.header("destination", destination);
        if (o.persistent || !o.omit_persistent_false) w.header("persistent", o.persistent ? "true" : "false");
        w.header("transaction", txid);
        w.header("content-length", std::to_string(body.size()));
        w.finish(body);
      }
      escrow::frame cm;
      cm.command = "COMMIT";
      cm.add("transaction", txid).add("receipt", "c" + std::to_string(t));
      escrow::encode_to(wire, cm);
      auto now = clock_type::now();
      if (t == 0) r.first_send = now;
      if (!c.write_all(wire)) {
        st.complain(who, c.error());
        ok = false;
        break;
      }
      r.last_send = clock_type::now();
      r.sent += o.tx;
      auto g = c.next(clock_type::now() + timeout);
      if (!g) {
        st.complain(who, c.broken() ? c.error() : "stalled: no RECEIPT for COMMIT " + txid);
        ok = false;
        break;
      }
      if (g->command != "RECEIPT" || g->get("receipt-id") != "c" + std::to_string(t)) {
        st.complain(who, "expected the RECEIPT of COMMIT " + txid + ", got " + stomp_connection::describe(*g));
        ok = false;
        break;
      }
      auto done = clock_type::now();
      r.latency_us.push_back(micros(done - now));
      r.last_receipt = done;
      r.receipted += o.tx;
    }
  }
  for (std::uint64_t seq = 0; seq < o.count && ok && o.tx == 0; ++seq) {
    while (o.window > 0 && outstanding >= o.window && ok) ok = wait_one();
    if (!ok) break;
    bool expiring = o.expire_every > 0 && seq % o.expire_every == o.expire_every - 1;
    body = expiring ? "x|" : "p" + std::to_string(index) + "-" + std::to_string(numbered++) + "|";
    if (body.size() < o.body_size) body.append(padding, 0, o.body_size - body.size());
    wire.clear();
    {
      escrow::frame_writer w(wire, "SEND", escrow::stomp_version::v1_2, body.size() + destination.size() + 96);
      if (expiring) w.header("expires", expires_at);
      if (o.deliver_at != 0) w.header("_AMQ_SCHED_DELIVERY", deliver_at);
      w.header("destination", destination);
      if (o.persistent || !o.omit_persistent_false) w.header("persistent", o.persistent ? "true" : "false");
      w.header("content-length", std::to_string(body.size()));
      if (o.window > 0) w.header("receipt", "s" + std::to_string(seq));
      w.finish(body);
    }
    auto now = clock_type::now();
    if (seq == 0) r.first_send = now;
    if (o.window > 0) sent_at[seq] = now;
    if (!c.write_all(wire)) {
      st.complain(who, c.error());
      ok = false;
      break;
    }
    r.last_send = clock_type::now();
    ++r.sent;
    if (o.window > 0) {
      ++outstanding;
      // Take receipts as soon as they are here, so their latency is not inflated by our sending.
      while (ok) {
        auto g = c.poll_now();
        if (!g) {
          if (c.broken()) {
            st.complain(who, c.error());
            ok = false;
          }
          break;
        }
        ok = handle(*g);
      }
    }
  }
  while (ok && outstanding > 0) ok = wait_one();
  if (ok && o.kill_pid > 0 && ++st.producers_receipted == o.producers) {
    // The last producer with all its receipts: kill the broker now, before anything else.
    ::kill(o.kill_pid, SIGKILL);
    std::printf("killed pid %d with SIGKILL right after the last RECEIPT\n", o.kill_pid);
    ++st.producers_done;
    return;
  }
  if (ok) disconnect(c, o.timeout);
  ++st.producers_done;
}

// ---------------------------------------------------------------------------------------------
// Consumer

// "p<producer>-<seq>|..." -> (producer, seq)
bool parse_body(std::string_view body, std::uint32_t& producer, std::uint32_t& seq) {
  if (body.empty() || body[0] != 'p') return false;
  auto dash = body.find('-');
  auto bar = body.find('|');
  if (dash == std::string_view::npos || bar == std::string_view::npos || bar < dash) return false;
  return parse_number(body.substr(1, dash - 1), producer) && parse_number(body.substr(dash + 1, bar - dash - 1), seq);
}

void run_consumer(const options& o, int index, shared_state& st, consumer_result& r) {
  std::string who = "consumer " + std::to_string(index);
  stomp_connection c;
  if (!c.open(o.host, o.port, o.timeout, o.vhost, o.login, o.passcode)) {
    st.complain(who, c.error());
    ++st.subscribed;
    return;
  }
  escrow::frame sub;
  sub.command = "SUBSCRIBE";
  sub.add("id", "0").add("destination", "/queue/" + o.queue).add("ack", o.ack);
  sub.add(o.prefetch_header, std::to_string(o.prefetch)).add("receipt", "sub");
  if (!c.send(sub)) {
    st.complain(who, c.error());
    ++st.subscribed;
    return;
  }
  const bool acking = o.ack != "auto";
  std::map<std::uint32_t, std::uint32_t> last_seq;  // per producer, on this connection
  std::string acks;
  bool confirmed = false;
  const auto started = clock_type::now();
  while (!st.stop.load()) {
    auto f = c.next(clock_type::now() + 50ms);
    if (!f) {
      if (c.broken()) {
        st.complain(who, c.error());
        break;
      }
      if (!confirmed && seconds_between(started, clock_type::now()) > o.timeout) {
        st.complain(who, "no RECEIPT for SUBSCRIBE within the timeout");
        break;
      }
      continue;
    }
    // Handle this frame and the others parsed from the same read, then send their ACKs in one
    // write (one ACK frame per message all the same).
    acks.clear();
    for (; f; f = c.pop_parsed()) {
      if (f->command == "RECEIPT" && f->get("receipt-id") == "sub") {
        confirmed = true;
        ++st.subscribed;
        continue;
      }
      if (f->command != "MESSAGE") {
        st.complain(who, "unexpected " + stomp_connection::describe(*f));
        st.stop = true;
        break;
      }
      r.last_message = clock_type::now();
      std::uint32_t producer = 0, seq = 0;
      if (parse_body(f->body, producer, seq)) {
        r.got.push_back(static_cast<std::uint64_t>(producer) << 32 | seq);
        auto [it, fresh] = last_seq.try_emplace(producer, seq);
        if (!fresh) {
          if (seq < it->second) ++r.out_of_order;
          it->second = seq;
        }
      } else {
        ++r.unparsable;
      }
      if (acking) {
        escrow::frame_writer ack(acks, "ACK", escrow::stomp_version::v1_2, f->get("ack").size() + 8);
        ack.header("id", f->get("ack"));
        ack.finish({});
      }
      ++st.received;
    }
    if (c.broken()) {
      st.complain(who, c.error());
      break;
    }
    if (!acks.empty() && !c.write_all(acks)) {
      st.complain(who, c.error());
      break;
    }
  }
  if (!confirmed) ++st.subscribed;  // do not leave the main thread waiting
  disconnect(c, o.timeout);
}

// ---------------------------------------------------------------------------------------------
// Checking what arrived

struct tally {
  std::uint64_t unique = 0;
  std::uint64_t duplicates = 0;
  std::uint64_t missing = 0;  // run: of what was sent; drain: gaps within each producer's range
  std::uint64_t unparsable = 0;
  std::uint64_t out_of_order = 0;
  std::vector<std::string> examples;  // a few missing / duplicated messages, for the report
};

// `sent_per_producer` empty: drain mode, each producer's expected range is 0..highest seq seen.
tally check(const std::vector<consumer_result>& consumers, const std::vector<std::uint64_t>& sent_per_producer) {
  std::map<std::uint32_t, std::vector<std::uint8_t>> seen;
  tally t;
  for (std::size_t p = 0; p < sent_per_producer.size(); ++p)
    seen[static_cast<std::uint32_t>(p)].assign(sent_per_producer[p], 0);
  for (const auto& c : consumers) {
    t.unparsable += c.unparsable;
    t.out_of_order += c.out_of_order;
    for (std::uint64_t v : c.got) {
      auto producer = static_cast<std::uint32_t>(v >> 32);
      auto seq = static_cast<std::uint32_t>(v);
      auto& marks = seen[producer];
      if (seq >= marks.size()) {
        if (!sent_per_producer.empty()) {  // never sent: count it as a duplicate of nothing
          ++t.duplicates;
          if (t.examples.size() < 5) t.examples.push_back("unexpected p" + std::to_string(producer) + "-" + std::to_string(seq));
          continue;
        }
        marks.resize(seq + 1, 0);
      }
      if (marks[seq]++ == 0) {
        ++t.unique;
      } else {
        ++t.duplicates;
        if (t.examples.size() < 5) t.examples.push_back("duplicate p" + std::to_string(producer) + "-" + std::to_string(seq));
      }
    }
  }
  for (const auto& [producer, marks] : seen)
    for (std::size_t seq = 0; seq < marks.size(); ++seq)
      if (marks[seq] == 0) {
        ++t.missing;
        if (t.examples.size() < 10) t.examples.push_back("missing p" + std::to_string(producer) + "-" + std::to_string(seq));
      }
  return t;
}

// ---------------------------------------------------------------------------------------------
// Modes

struct producer_summary {
  std::uint64_t sent = 0;
  std::uint64_t receipted = 0;
  time_point end{};  // last receipt or last send
  std::int64_t p50 = 0, p99 = 0;
};

producer_summary summarize(std::vector<producer_result>& results, const options& o) {
  producer_summary s;
  std::vector<std::int64_t> all;
  for (auto& r : results) {
    s.sent += r.sent;
    s.receipted += r.receipted;
    s.end = std::max({s.end, r.last_send, r.last_receipt});
    all.insert(all.end(), r.latency_us.begin(), r.latency_us.end());
  }
  if (o.window > 0 || o.tx > 0) {
    s.p50 = quantile(all, 0.50);
    s.p99 = quantile(all, 0.99);
  }
  return s;
}

double rate(std::uint64_t n, time_point from, time_point to) {
  double s = seconds_between(from, to);
  return s > 0 ? static_cast<double>(n) / s : 0.0;
}

// Waits until every consumer has its subscription confirmed (or failed).
void wait_subscribed(const options& o, shared_state& st) {
  while (st.subscribed.load() < o.consumers) std::this_thread::sleep_for(1ms);
}

// Stops the consumers when `expected` messages have arrived, or when nothing has arrived for the
// timeout once the producers are done (`producers_running` says whether they still are).
void wait_consumers(const options& o, shared_state& st, std::uint64_t expected, bool producers_running) {
  std::uint64_t last_count = st.received.load();
  auto last_progress = clock_type::now();
  auto timeout = to_duration(o.timeout);
  auto next_timeline = clock_type::now();
  while (!st.stop.load()) {
    std::this_thread::sleep_for(o.timeline_ms > 0 ? 1ms : 5ms);
    std::uint64_t n = st.received.load();
    auto now = clock_type::now();
    if (o.timeline_ms > 0 && now >= next_timeline) {
      auto epoch_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch()).count();
      std::printf("TIMELINE %lld %llu\n", static_cast<long long>(epoch_ms), static_cast<unsigned long long>(n));
      next_timeline = now + std::chrono::milliseconds(o.timeline_ms);
    }
    if (n != last_count) {
      last_count = n;
      last_progress = now;
    }
    bool producing = producers_running && st.producers_done.load() < o.producers;
    if (producing) last_progress = now;
    if (n >= expected) {
      // A short grace to catch duplicates that trail the last expected message.
      std::this_thread::sleep_for(200ms);
      break;
    }
    if (now - last_progress > timeout) {
      std::fprintf(stderr, "loadgen: no message for %.0f s with %llu of %llu received; giving up\n", o.timeout,
                   static_cast<unsigned long long>(n), static_cast<unsigned long long>(expected));
      break;
    }
  }
  st.stop = true;
}

int mode_run_or_fill(const options& o) {
  const bool run = o.mode == "run";
  const int consumers = run ? o.consumers : 0;
  shared_state st;
  std::vector<producer_result> presults(static_cast<std::size_t>(o.producers));
  std::vector<consumer_result> cresults(static_cast<std::size_t>(consumers));
  std::vector<std::thread> threads;
  options copt = o;
  copt.consumers = consumers;
  for (int i = 0; i < consumers; ++i)
    threads.emplace_back(run_consumer, std::cref(copt), i, std::ref(st), std::ref(cresults[static_cast<std::size_t>(i)]));
  wait_subscribed(copt, st);
  for (int i = 0; i < o.producers; ++i)
    threads.emplace_back(run_producer, std::cref(o), i, std::ref(st), std::ref(presults[static_cast<std::size_t>(i)]));
  // Producers connect first; then all start together.
  std::this_thread::sleep_for(50ms);
  st.t0 = clock_type::now();
  st.go = true;
  const std::uint64_t expected = o.count * static_cast<std::uint64_t>(o.producers);
  if (consumers > 0) {
    wait_consumers(copt, st, expected, true);
  }
  for (auto& t : threads) t.join();
  auto end_all = clock_type::now();

  producer_summary ps = summarize(presults, o);
  time_point first_send = time_point::max();
  for (auto& r : presults)
    if (r.first_send != time_point{}) first_send = std::min(first_send, r.first_send);
  if (first_send == time_point::max()) first_send = st.t0;
  double send_rate = rate(ps.sent, first_send, ps.end);
  double elapsed = seconds_between(st.t0, end_all);

  if (!run) {
    std::printf("fill: %llu of %llu sent to /queue/%s (%s, %zu B, window %u), %llu receipted; %.0f msgs/s; "
                "send-to-receipt p50 %lld us, p99 %lld us; %.2f s\n",
                static_cast<unsigned long long>(ps.sent), static_cast<unsigned long long>(expected), o.queue.c_str(),
                o.persistent ? "persistent" : "non-persistent", o.body_size, o.window,
                static_cast<unsigned long long>(ps.receipted), send_rate, static_cast<long long>(ps.p50),
                static_cast<long long>(ps.p99), elapsed);
    std::printf("RESULT mode=fill sent=%llu receipted=%llu send_rate=%.1f p50_us=%lld p99_us=%lld elapsed_s=%.3f\n",
                static_cast<unsigned long long>(ps.sent), static_cast<unsigned long long>(ps.receipted), send_rate,
                static_cast<long long>(ps.p50), static_cast<long long>(ps.p99), elapsed);
    bool complete = ps.sent == expected && ((o.window == 0 && o.tx == 0) || ps.receipted == ps.sent);
    return complete && !st.failed ? 0 : 1;
  }

  std::vector<std::uint64_t> sent_per_producer;
  for (auto& r : presults) sent_per_producer.push_back(r.sent);
  tally t = check(cresults, sent_per_producer);
  time_point last_message{};
  std::uint64_t received = 0;
  for (auto& c : cresults) {
    last_message = std::max(last_message, c.last_message);
    received += c.got.size() + c.unparsable;
  }
  double e2e_rate = last_message == time_point{} ? 0.0 : rate(t.unique, first_send, last_message);

  std::printf("run: %d producer(s) x %llu, %d consumer(s), /queue/%s, %s, %zu B, window %u, ack %s, prefetch %u\n",
              o.producers, static_cast<unsigned long long>(o.count), consumers, o.queue.c_str(),
              o.persistent ? "persistent" : "non-persistent", o.body_size, o.window, o.ack.c_str(), o.prefetch);
  std::printf("  sent %llu (receipted %llu), received %llu: %llu duplicate(s), %llu missing, %llu unparsable, "
              "%llu out of order on a connection\n",
              static_cast<unsigned long long>(ps.sent), static_cast<unsigned long long>(ps.receipted),
              static_cast<unsigned long long>(received), static_cast<unsigned long long>(t.duplicates),
              static_cast<unsigned long long>(t.missing), static_cast<unsigned long long>(t.unparsable),
              static_cast<unsigned long long>(t.out_of_order));
  std::printf("  send %.0f msgs/s, end-to-end %.0f msgs/s", send_rate, e2e_rate);
  if (o.window > 0 || o.tx > 0)
    std::printf(", send-to-receipt p50 %lld us, p99 %lld us", static_cast<long long>(ps.p50), static_cast<long long>(ps.p99));
  std::printf(", %.2f s\n", elapsed);
  for (const auto& e : t.examples) std::printf("  %s\n", e.c_str());
  std::printf("RESULT mode=run sent=%llu received=%llu duplicates=%llu missing=%llu send_rate=%.1f e2e_rate=%.1f "
              "p50_us=%lld p99_us=%lld elapsed_s=%.3f out_of_order=%llu\n",
              static_cast<unsigned long long>(ps.sent), static_cast<unsigned long long>(received),
              static_cast<unsigned long long>(t.duplicates), static_cast<unsigned long long>(t.missing), send_rate,
              e2e_rate, static_cast<long long>(ps.p50), static_cast<long long>(ps.p99), elapsed,
              static_cast<unsigned long long>(t.out_of_order));
  bool ok = !st.failed && t.missing == 0 && t.duplicates == 0 && t.unparsable == 0 && ps.sent == expected;
  return ok ? 0 : 1;
}

int mode_drain(const options& o) {
  shared_state st;
  std::vector<consumer_result> cresults(static_cast<std::size_t>(o.consumers));
  std::vector<std::thread> threads;
  st.t0 = clock_type::now();
  for (int i = 0; i < o.consumers; ++i)
    threads.emplace_back(run_consumer, std::cref(o), i, std::ref(st), std::ref(cresults[static_cast<std::size_t>(i)]));
  wait_consumers(o, st, o.count, false);
  for (auto& t : threads) t.join();
  auto end_all = clock_type::now();

  tally t = check(cresults, {});
  time_point last_message{};
  std::uint64_t received = 0;
  for (auto& c : cresults) {
    last_message = std::max(last_message, c.last_message);
    received += c.got.size() + c.unparsable;
  }
  double drain_rate = last_message == time_point{} ? 0.0 : rate(received, st.t0, last_message);
  double elapsed = seconds_between(st.t0, end_all);
  std::printf("drain: %llu of %llu received from /queue/%s by %d consumer(s) (ack %s, prefetch %u): %llu duplicate(s), "
              "%llu gap(s), %llu out of order on a connection; %.0f msgs/s; %.2f s\n",
              static_cast<unsigned long long>(received), static_cast<unsigned long long>(o.count), o.queue.c_str(),
              o.consumers, o.ack.c_str(), o.prefetch, static_cast<unsigned long long>(t.duplicates),
              static_cast<unsigned long long>(t.missing), static_cast<unsigned long long>(t.out_of_order), drain_rate,
              elapsed);
  for (const auto& e : t.examples) std::printf("  %s\n", e.c_str());
  std::printf("RESULT mode=drain received=%llu unique=%llu duplicates=%llu missing=%llu drain_rate=%.1f elapsed_s=%.3f "
              "out_of_order=%llu\n",
              static_cast<unsigned long long>(received), static_cast<unsigned long long>(t.unique),
              static_cast<unsigned long long>(t.duplicates),
              static_cast<unsigned long long>(t.missing), drain_rate, elapsed,
              static_cast<unsigned long long>(t.out_of_order));
  bool ok = !st.failed && received >= o.count && t.duplicates == 0 && t.missing == 0 && t.unparsable == 0;
  return ok ? 0 : 1;
}

int mode_fsync(const options& o) {
  std::string path = o.dir + "/loadgen-fsync-" + std::to_string(::getpid()) + ".tmp";
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "loadgen: cannot create %s: %s\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  alignas(4096) static char block[4096];
  std::memset(block, 'f', sizeof block);
  constexpr off_t kFilePages = 100;  // --pages > 1 scatters them over this many (400 KiB, written first)
  int rc = 0;
  if (o.pages > 1) {
    for (off_t p = 0; p < kFilePages && rc == 0; ++p)
      if (::pwrite(fd, block, sizeof block, p * 4096) != static_cast<ssize_t>(sizeof block)) rc = 1;
    if (rc == 0 && ::fdatasync(fd) != 0) rc = 1;
  }
  std::mt19937 random(12345);
  std::vector<off_t> all_pages(kFilePages);
  for (off_t p = 0; p < kFilePages; ++p) all_pages[p] = p;
  auto write_and_sync = [&] {
    if (o.pages == 1) return ::pwrite(fd, block, sizeof block, 0) == static_cast<ssize_t>(sizeof block) && ::fdatasync(fd) == 0;
    std::shuffle(all_pages.begin(), all_pages.end(), random);
    for (std::uint32_t i = 0; i < o.pages; ++i)
      if (::pwrite(fd, block, sizeof block, all_pages[i] * 4096) != static_cast<ssize_t>(sizeof block)) return false;
    return ::fdatasync(fd) == 0;
  };
  std::vector<std::int64_t> latency_us;
  auto start = clock_type::now();
  auto until = start + to_duration(o.seconds);
  while (rc == 0) {
    auto before = clock_type::now();
    bool ok = write_and_sync() && (!o.meta_sync || (::pwrite(fd, block, 120, 32) == 120 && ::fdatasync(fd) == 0));
    if (!ok) {
      rc = 1;
      break;
    }
    latency_us.push_back(micros(clock_type::now() - before));
    if (clock_type::now() >= until) break;
  }
  if (rc != 0) std::fprintf(stderr, "loadgen: write/fdatasync of %s failed: %s\n", path.c_str(), std::strerror(errno));
  double elapsed = seconds_between(start, clock_type::now());
  ::close(fd);
  ::unlink(path.c_str());
  std::size_t n = latency_us.size();
  double per_s = elapsed > 0 ? static_cast<double>(n) / elapsed : 0;
  std::int64_t p50 = quantile(latency_us, 0.50), p99 = quantile(latency_us, 0.99);
  std::printf("fsync: %zu x (%u x 4 KiB pwrite + fdatasync%s) in %s over %.2f s: %.0f/s, p50 %lld us, p99 %lld us\n",
              n, o.pages, o.meta_sync ? ", 120 B pwrite + fdatasync" : "", o.dir.c_str(), elapsed, per_s,
              static_cast<long long>(p50), static_cast<long long>(p99));
  std::printf("RESULT mode=fsync pages=%u meta_sync=%s fsync_per_s=%.1f p50_us=%lld p99_us=%lld count=%zu "
              "elapsed_s=%.3f\n",
              o.pages, o.meta_sync ? "true" : "false", per_s, static_cast<long long>(p50), static_cast<long long>(p99),
              n, elapsed);
  return rc;
}

// The loopback round trip: a thread echoes 64-byte pings on 127.0.0.1; one ping in flight.
int mode_pingpong(const options& o) {
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(lfd, 1) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::fprintf(stderr, "loadgen: cannot listen on 127.0.0.1: %s\n", std::strerror(errno));
    return 1;
  }
  constexpr std::size_t size = 64;
  auto read_full = [](int fd, char* p, std::size_t n) {
    while (n > 0) {
      ssize_t k = ::recv(fd, p, n, 0);
      if (k <= 0) return false;
      p += k;
      n -= static_cast<std::size_t>(k);
    }
    return true;
  };
  std::thread echo([&] {
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[size];
    while (read_full(fd, buf, size))
      if (::send(fd, buf, size, MSG_NOSIGNAL) != static_cast<ssize_t>(size)) break;
    ::close(fd);
  });
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int rc = 0;
  std::vector<std::int64_t> latency_us;
  auto start = clock_type::now();
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::fprintf(stderr, "loadgen: cannot connect to the echo thread: %s\n", std::strerror(errno));
    rc = 1;
  } else {
    char buf[size];
    std::memset(buf, 'p', size);
    start = clock_type::now();
    auto until = start + to_duration(o.seconds);
    do {
      auto before = clock_type::now();
      if (::send(fd, buf, size, MSG_NOSIGNAL) != static_cast<ssize_t>(size) || !read_full(fd, buf, size)) {
        std::fprintf(stderr, "loadgen: ping failed: %s\n", std::strerror(errno));
        rc = 1;
        break;
      }
      latency_us.push_back(micros(clock_type::now() - before));
    } while (clock_type::now() < until);
  }
  double elapsed = seconds_between(start, clock_type::now());
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  ::shutdown(lfd, SHUT_RDWR);
  echo.join();
  ::close(lfd);
  std::size_t n = latency_us.size();
  double per_s = elapsed > 0 ? static_cast<double>(n) / elapsed : 0;
  std::int64_t p50 = quantile(latency_us, 0.50), p99 = quantile(latency_us, 0.99);
  std::printf("pingpong: %zu round trips of 64 bytes over 127.0.0.1 in %.2f s: %.0f/s, p50 %lld us, p99 %lld us\n", n,
              elapsed, per_s, static_cast<long long>(p50), static_cast<long long>(p99));
  std::printf("RESULT mode=pingpong rt_per_s=%.1f p50_us=%lld p99_us=%lld count=%zu elapsed_s=%.3f\n", per_s,
              static_cast<long long>(p50), static_cast<long long>(p99), n, elapsed);
  return rc;
}

// Tries to connect (and get CONNECTED) until it works or the timeout passes.
int mode_probe(const options& o) {
  auto start = clock_type::now();
  auto until = start + to_duration(o.timeout);
  std::string last_error;
  int attempts = 0;
  while (clock_type::now() < until) {
    ++attempts;
    stomp_connection c;
    if (c.open(o.host, o.port, 5, o.vhost, o.login, o.passcode)) {
      disconnect(c, 5);
      double s = seconds_between(start, clock_type::now());
      std::printf("RESULT mode=probe connected_after_s=%.4f attempts=%d\n", s, attempts);
      return 0;
    }
    last_error = c.error();
    std::this_thread::sleep_for(2ms);
  }
  std::fprintf(stderr, "loadgen: no CONNECTED within %.0f s (%d attempts): %s\n", o.timeout, attempts,
               last_error.c_str());
  std::printf("RESULT mode=probe connected_after_s=-1 attempts=%d\n", attempts);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  auto o = parse_options(argc, argv);
  if (!o) {
    usage(argv[0]);
    return 2;
  }
  if (o->mode == "fsync") return mode_fsync(*o);
  if (o->mode == "probe") return mode_probe(*o);
  if (o->mode == "pingpong") return mode_pingpong(*o);
  if (o->tx > 0 && o->count % o->tx != 0) {
    std::fprintf(stderr, "loadgen: --count must be a multiple of --tx\n");
    return 2;
  }
  if (o->mode == "drain") {
    if (o->consumers < 1) {
      std::fprintf(stderr, "loadgen: drain needs --consumers >= 1\n");
      return 2;
    }
    return mode_drain(*o);
  }
  if (o->producers < 1 || (o->mode == "run" && o->consumers < 1)) {
    std::fprintf(stderr, "loadgen: %s needs --producers >= 1%s\n", o->mode.c_str(),
                 o->mode == "run" ? " and --consumers >= 1" : "");
    return 2;
  }
  return mode_run_or_fill(*o);
}
