// txgen: the transaction benchmark client that scripts/bench drives. N connections, one thread
// each, loop transactions against escrowd for --seconds (or --count transactions per connection):
//
//   xa2pc  XA-START a fresh xid; SEND one persistent message (no receipt) and ACK one message
//          received earlier from the same queue; XA-END TMSUCCESS; XA-PREPARE; XA-COMMIT.
//   xa1pc  the same, with XA-COMMIT TMONEPHASE and no prepare.
//   local  BEGIN; --sends SENDs carrying the transaction header; COMMIT with a receipt.
//
// Every XA frame waits for its RECEIPT, and a result other than XA_OK is a failure (counted,
// the first ones printed, the branch rolled back where that still makes sense). SEND, ACK and
// BEGIN carry no receipt: they are written together with the XA-END (or COMMIT) that follows
// them. In the XA modes each connection subscribes to the queue (ack client-individual, a small
// prefetch-count) and the queue is pre-filled (--prefill) before the timed run, so every
// transaction consumes one message and produces one: the queue's depth stays at the pre-fill.
//
// Latency is per transaction: from writing XA-START (or BEGIN) to the RECEIPT of the commit.
// Afterwards (--verify true) a separate connection drains the queue and checks it holds exactly
// the messages it should: the pre-fill plus every committed send minus every committed ACK, each
// once. Message bodies start with "m<run>-<id>|" to make that possible; the queue should be empty
// at the start (messages another run left are reported as not from this run).
//
// One TCP connection per thread, plain blocking POSIX sockets (as loadgen). The last line that
// starts with "RESULT " is machine-readable (key=value pairs).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bench_client.h"
#include "escrow/frame.h"

namespace {

using namespace escrow::bench;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// Options

struct options {
  std::string mode = "xa2pc";
  std::string host = "127.0.0.1";
  int port = 61613;
  int connections = 8;
  double seconds = 5;
  std::uint64_t count = 0;  // transactions per connection; 0 = run for --seconds
  std::size_t body_size = 1024;
  std::string queue = "txbench";
  std::int64_t prefill = -1;  // -1 = connections * (prefetch + 2) * 2 (XA modes), 0 (local)
  std::uint32_t prefetch = 4;
  int sends = 10;  // SENDs per local transaction
  std::uint32_t format_id = 4242;
  bool verify = true;
  double timeout = 30;  // seconds without an answer before giving up
};

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [options]\n"
               "  --mode xa2pc|xa1pc|local            (xa2pc)\n"
               "  --host ADDR                         (127.0.0.1)\n"
               "  --port N                            (61613)\n"
               "  --connections N  one thread each    (8)\n"
               "  --seconds S      duration of the timed run (5)\n"
               "  --count N        transactions per connection instead of --seconds (0: use --seconds)\n"
               "  --body-size B    bytes per message body (1024)\n"
               "  --queue NAME     destination /queue/NAME; should be empty at the start (txbench)\n"
               "  --prefill N      XA modes: messages put in the queue before the run\n"
               "                   (default connections x (prefetch + 2) x 2)\n"
               "  --prefetch P     XA modes: SUBSCRIBE prefetch-count of each connection (4)\n"
               "  --sends K        local mode: SENDs per transaction (10)\n"
               "  --format-id F    XA formatID of the xids (4242)\n"
               "  --verify true|false  drain the queue at the end and check its contents (true)\n"
               "  --timeout S      seconds without an answer before giving up (30)\n",
               argv0);
}

// Sets the option `name` to `value`.
option_value set_option(options& o, std::string_view name, const std::string& value) {
  bool ok = true;
  if (name == "--mode") {
    o.mode = value;
    ok = value == "xa2pc" || value == "xa1pc" || value == "local";
  } else if (name == "--host") {
    o.host = value;
  } else if (name == "--port") {
    ok = parse_number(value, o.port) && o.port > 0 && o.port < 65536;
  } else if (name == "--connections") {
    ok = parse_number(value, o.connections) && o.connections > 0;
  } else if (name == "--seconds") {
    ok = parse_seconds(value, o.seconds) && o.seconds > 0;
  } else if (name == "--count") {
    ok = parse_number(value, o.count);
  } else if (name == "--body-size") {
    ok = parse_number(value, o.body_size);
  } else if (name == "--queue") {
    o.queue = value;
    ok = !value.empty();
  } else if (name == "--prefill") {
    ok = parse_number(value, o.prefill) && o.prefill >= 0;
  } else if (name == "--prefetch") {
    ok = parse_number(value, o.prefetch) && o.prefetch > 0;
  } else if (name == "--sends") {
    ok = parse_number(value, o.sends) && o.sends > 0;
  } else if (name == "--format-id") {
    ok = parse_number(value, o.format_id) && o.format_id != 1163084626u;  // reserved for local transactions
  } else if (name == "--verify") {
    ok = value == "true" || value == "false";
    o.verify = value == "true";
  } else if (name == "--timeout") {
    ok = parse_seconds(value, o.timeout) && o.timeout > 0;
  } else {
    return option_value::unknown;
  }
  return ok ? option_value::ok : option_value::bad;
}

std::optional<options> parse_options(int argc, char** argv) {
  options o;
  auto set = [&](std::string_view name, const std::string& value) { return set_option(o, name, value); };
  if (!parse_option_pairs("txgen", argc, argv, set)) return std::nullopt;
  if (o.prefill < 0) o.prefill = o.mode == "local" ? 0 : static_cast<std::int64_t>(o.connections) * (o.prefetch + 2) * 2;
  return o;
}

// ---------------------------------------------------------------------------------------------
// Messages: the body is "m<run>-<id>|" then padding. <run> is random per txgen run, so that
// messages another run left in the queue are told apart. Ids: (source << 40) | seq, source 0 for
// the pre-fill and 1 + index for connection `index`.

std::uint32_t run_nonce = 0;

std::uint64_t message_id(std::uint64_t source, std::uint64_t seq) { return source << 40 | seq; }

std::string describe_id(std::uint64_t id) {
  std::uint64_t source = id >> 40, seq = id & ((std::uint64_t{1} << 40) - 1);
  if (source == 0) return "prefill #" + std::to_string(seq);
  return "connection " + std::to_string(source - 1) + " #" + std::to_string(seq);
}

// False for a body this run did not write.
bool parse_body(std::string_view body, std::uint64_t& id) {
  if (body.empty() || body[0] != 'm') return false;
  auto dash = body.find('-');
  auto bar = body.find('|');
  std::uint32_t run = 0;
  return dash != std::string_view::npos && bar != std::string_view::npos && dash < bar &&
         parse_number(body.substr(1, dash - 1), run) && run == run_nonce &&
         parse_number(body.substr(dash + 1, bar - dash - 1), id);
}

void append_send(std::string& wire, const options& o, const std::string& destination, std::uint64_t id,
                 const std::string* transaction, const std::string* receipt = nullptr) {
  std::string body = "m" + std::to_string(run_nonce) + "-" + std::to_string(id) + "|";
  if (body.size() < o.body_size) body.append(o.body_size - body.size(), 'x');
  escrow::frame_writer w(wire, "SEND", escrow::stomp_version::v1_2, body.size() + destination.size() + 128);
  w.header("destination", destination);
  w.header("persistent", "true");
  if (transaction) w.header("transaction", *transaction);
  if (receipt) w.header("receipt", *receipt);
  w.header("content-length", std::to_string(body.size()));
  w.finish(body);
}

std::string hex(std::string_view bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char ch : bytes) {
    out.push_back(digits[ch >> 4]);
    out.push_back(digits[ch & 15]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Shared state of a run

struct shared_state {
  std::atomic<int> ready{0};      // connections subscribed (or failed) and waiting for go
  std::atomic<bool> go{false};
  std::atomic<bool> failed{false};  // a connection broke or stalled
  std::mutex log_mutex;
  std::atomic<int> failures_printed{0};
  time_point t0{};
  time_point deadline{};

  void complain(const std::string& who, const std::string& what) {
    std::lock_guard lock(log_mutex);
    std::fprintf(stderr, "txgen: %s: %s\n", who.c_str(), what.c_str());
    failed = true;
  }
  // An XA (or COMMIT) answer other than the expected one: the first 20 are printed.
  void report_failure(const std::string& who, const std::string& what) {
    if (failures_printed.fetch_add(1) >= 20) return;
    std::lock_guard lock(log_mutex);
    std::fprintf(stderr, "txgen: %s: %s\n", who.c_str(), what.c_str());
  }
};

struct worker_result {
  std::uint64_t committed = 0;
  std::uint64_t failures = 0;     // transactions with an answer other than XA_OK (or no answer)
  std::uint64_t rolled_back = 0;  // failed transactions rolled back afterwards
  std::vector<std::int64_t> latency_us;
  std::vector<std::uint64_t> sent;      // message ids sent by committed transactions
  std::vector<std::uint64_t> consumed;  // message ids ACKed by committed transactions
  std::vector<std::uint64_t> uncertain;  // ids of transactions whose outcome is unknown
  time_point last_end{};
};

// ---------------------------------------------------------------------------------------------
// A worker: one connection, one thread.

class worker {
 public:
  worker(const options& o, int index, shared_state& st, worker_result& r)
      : o_(o), index_(index), st_(st), r_(r), who_("connection " + std::to_string(index)),
        destination_("/queue/" + o.queue), timeout_(to_duration(o.timeout)) {}

  void run() {
    bool ok = c_.open(o_.host, o_.port, o_.timeout);
    if (!ok) st_.complain(who_, c_.error());
    if (ok && o_.mode != "local") ok = subscribe();
    ++st_.ready;
    while (!st_.go.load()) std::this_thread::sleep_for(1ms);
    if (!ok) return;
    std::uint64_t seq = 0;
    while (o_.count > 0 ? seq < o_.count : clock_type::now() < st_.deadline) {
      bool alive = o_.mode == "local" ? local_tx(seq) : xa_tx(seq);
      ++seq;
      if (!alive) {
        st_.complain(who_, c_.error());
        return;
      }
    }
    disconnect(c_, o_.timeout);
  }

 private:
  // SUBSCRIBE (client-individual, small prefetch) and wait for its RECEIPT.
  bool subscribe() {
    escrow::frame sub;
    sub.command = "SUBSCRIBE";
    sub.add("id", "0").add("destination", destination_).add("ack", "client-individual");
    sub.add("prefetch-count", std::to_string(o_.prefetch)).add("receipt", "sub");
    if (!c_.send(sub)) return st_.complain(who_, c_.error()), false;
    if (!await_receipt("sub")) return st_.complain(who_, c_.error()), false;
    return true;
  }

  // Reads frames until the RECEIPT `id`; MESSAGE frames on the way go to the inbox. False (and
  // the connection marked broken) on anything else or on the timeout.
  std::optional<escrow::frame> await_receipt(const std::string& id) {
    for (;;) {
      auto f = c_.next(clock_type::now() + timeout_);
      if (!f) {
        c_.fail("no RECEIPT " + id + " within " + std::to_string(o_.timeout) + " s");
        return std::nullopt;
      }
      if (f->command == "MESSAGE") {
        take_message(*f);
        continue;
      }
      if (f->command == "RECEIPT" && f->get("receipt-id") == id) return f;
      c_.fail("unexpected " + stomp_connection::describe(*f) + " while waiting for RECEIPT " + id);
      return std::nullopt;
    }
  }

  void take_message(const escrow::frame& f) {
    std::uint64_t id = 0;
    if (!parse_body(f.body, id)) id = ~std::uint64_t{0};
    inbox_.push_back({std::string(f.get("ack")), id});
  }

  // Waits until the inbox has a message to ACK.
  bool await_message() {
    while (inbox_.empty()) {
      auto f = c_.next(clock_type::now() + timeout_);
      if (!f) {
        c_.fail("no MESSAGE to consume within " + std::to_string(o_.timeout) + " s (queue empty? raise --prefill)");
        return false;
      }
      if (f->command != "MESSAGE") {
        c_.fail("unexpected " + stomp_connection::describe(*f) + " while waiting for a MESSAGE");
        return false;
      }
      take_message(*f);
    }
    return true;
  }

  // Writes `wire` followed by the XA frame `verb`; returns its xa-result, "" if the connection
  // failed (then the caller gives up on the connection).
  std::string xa(std::string& wire, const char* verb, const std::string& xid, const char* flags) {
    escrow::frame f;
    f.command = verb;
    f.add("xid", xid);
    if (flags && *flags) f.add("flags", flags);
    std::string rid = "r" + std::to_string(++receipt_seq_);
    f.add("receipt", rid);
    escrow::encode_to(wire, f);
    bool written = c_.write_all(wire);
    wire.clear();
    if (!written) return {};
    auto r = await_receipt(rid);
    if (!r) return {};
    last_message_ = std::string(r->get("message"));
    std::string result(r->get("xa-result"));
    return result.empty() ? "(no xa-result)" : result;
  }

  void failure(const std::string& verb, const std::string& xid, const std::string& result) {
    ++r_.failures;
    st_.report_failure(who_, verb + " " + xid + ": " + result + (last_message_.empty() ? "" : " (" + last_message_ + ")"));
  }

  // After a failed step: XA-ROLLBACK. An XA_OK, XA_RB* or XAER_NOTA answer means the branch is
  // gone and took nothing with it (its consumed message is back in the queue).
  bool rollback(const std::string& xid, std::uint64_t sent_id, std::uint64_t acked_id) {
    std::string wire;
    std::string res = xa(wire, "XA-ROLLBACK", xid, "");
    if (res.empty()) return uncertain(sent_id, acked_id), false;
    if (res == "XA_OK" || res.rfind("XA_RB", 0) == 0 || res == "XAER_NOTA") {
      ++r_.rolled_back;
    } else {
      st_.report_failure(who_, "XA-ROLLBACK " + xid + " after a failure: " + res);
      uncertain(sent_id, acked_id);
    }
    return true;
  }

  void uncertain(std::uint64_t sent_id, std::uint64_t acked_id) {
    r_.uncertain.push_back(sent_id);
    r_.uncertain.push_back(acked_id);
  }

  // One XA transaction. False when the connection is lost.
  bool xa_tx(std::uint64_t seq) {
    if (!await_message()) return false;
    auto [ack_id, acked] = inbox_.front();
    inbox_.pop_front();
    std::uint64_t sent = message_id(static_cast<std::uint64_t>(index_) + 1, seq);
    std::string gtrid = "txgen-" + std::to_string(::getpid()) + "-" + std::to_string(index_) + "-" + std::to_string(seq);
    std::string xid = std::to_string(o_.format_id) + ":" + hex(gtrid) + ":01";
    const bool two_phase = o_.mode == "xa2pc";
    std::string wire;
    auto start = clock_type::now();

    std::string res = xa(wire, "XA-START", xid, "");
    if (res.empty()) return false;
    if (res != "XA_OK") {
      failure("XA-START", xid, res);
      inbox_.push_front({ack_id, acked});  // still ours, unacknowledged
      return true;
    }
    append_send(wire, o_, destination_, sent, nullptr);
    escrow::frame ack;
    ack.command = "ACK";
    ack.add("id", ack_id);
    escrow::encode_to(wire, ack);
    res = xa(wire, "XA-END", xid, "TMSUCCESS");
    if (res.empty()) return uncertain(sent, acked), false;
    if (res != "XA_OK") return failure("XA-END", xid, res), rollback(xid, sent, acked);
    if (two_phase) {
      res = xa(wire, "XA-PREPARE", xid, "");
      if (res.empty()) return uncertain(sent, acked), false;
      if (res != "XA_OK") return failure("XA-PREPARE", xid, res), rollback(xid, sent, acked);
    }
    res = xa(wire, "XA-COMMIT", xid, two_phase ? "" : "TMONEPHASE");
    if (res.empty()) return uncertain(sent, acked), false;
    if (res != "XA_OK") {
      failure("XA-COMMIT", xid, res);
      uncertain(sent, acked);
      return true;
    }
    auto end = clock_type::now();
    r_.latency_us.push_back(micros(end - start));
    r_.last_end = end;
    ++r_.committed;
    r_.sent.push_back(sent);
    r_.consumed.push_back(acked);
    return true;
  }

  // One local transaction: BEGIN, K SENDs, COMMIT (receipt), written at once.
  bool local_tx(std::uint64_t seq) {
    const std::string name = "t" + std::to_string(seq);
    const std::uint64_t first = message_id(static_cast<std::uint64_t>(index_) + 1, seq * static_cast<std::uint64_t>(o_.sends));
    std::string wire;
    escrow::frame begin;
    begin.command = "BEGIN";
    begin.add("transaction", name);
    escrow::encode_to(wire, begin);
    for (int i = 0; i < o_.sends; ++i) append_send(wire, o_, destination_, first + static_cast<std::uint64_t>(i), &name);
    escrow::frame commit;
    commit.command = "COMMIT";
    commit.add("transaction", name);
    std::string rid = "r" + std::to_string(++receipt_seq_);
    commit.add("receipt", rid);
    escrow::encode_to(wire, commit);
    auto start = clock_type::now();
    bool ok = c_.write_all(wire) && await_receipt(rid).has_value();
    if (!ok) {
      // An ERROR (a refused commit) or a lost connection: the outcome of this one is unknown.
      ++r_.failures;
      for (int i = 0; i < o_.sends; ++i) r_.uncertain.push_back(first + static_cast<std::uint64_t>(i));
      return false;
    }
    auto end = clock_type::now();
    r_.latency_us.push_back(micros(end - start));
    r_.last_end = end;
    ++r_.committed;
    for (int i = 0; i < o_.sends; ++i) r_.sent.push_back(first + static_cast<std::uint64_t>(i));
    return true;
  }

  struct delivered {
    std::string ack;
    std::uint64_t id;
  };

  const options& o_;
  int index_;
  shared_state& st_;
  worker_result& r_;
  std::string who_;
  std::string destination_;
  clock_type::duration timeout_;
  stomp_connection c_;
  std::deque<delivered> inbox_;
  std::uint64_t receipt_seq_ = 0;
  std::string last_message_;
};

// ---------------------------------------------------------------------------------------------
// Pre-fill and verification

// Sends `n` persistent messages (ids 0..n-1 of source 0), at most 64 receipts outstanding.
bool prefill(const options& o, std::uint64_t n) {
  stomp_connection c;
  if (!c.open(o.host, o.port, o.timeout)) {
    std::fprintf(stderr, "txgen: prefill: %s\n", c.error().c_str());
    return false;
  }
  const std::string destination = "/queue/" + o.queue;
  std::uint64_t outstanding = 0;
  auto wait_one = [&]() {
    auto f = c.next(clock_type::now() + to_duration(o.timeout));
    if (!f || f->command != "RECEIPT") {
      std::fprintf(stderr, "txgen: prefill: %s\n",
                   f ? ("unexpected " + stomp_connection::describe(*f)).c_str()
                     : (c.broken() ? c.error().c_str() : "no RECEIPT within the timeout"));
      return false;
    }
    --outstanding;
    return true;
  };
  for (std::uint64_t i = 0; i < n; ++i) {
    while (outstanding >= 64)
      if (!wait_one()) return false;
    std::string wire, receipt = "p" + std::to_string(i);
    append_send(wire, o, destination, message_id(0, i), nullptr, &receipt);
    if (!c.write_all(wire)) {
      std::fprintf(stderr, "txgen: prefill: %s\n", c.error().c_str());
      return false;
    }
    ++outstanding;
  }
  while (outstanding > 0)
    if (!wait_one()) return false;
  return true;
}

struct verdict {
  bool done = false;
  std::uint64_t expected = 0;  // messages that must be in the queue
  std::uint64_t found = 0;     // messages drained
  std::uint64_t missing = 0, unexpected = 0, duplicates = 0;
  std::uint64_t foreign = 0;  // bodies this run did not write (left by another run, or mangled)
  std::vector<std::string> examples;
};

// Drains the queue (ack auto) and compares it with `expected` (each id once); ids in `maybe`
// may be there or not.
verdict verify(const options& o, const std::unordered_set<std::uint64_t>& expected,
               const std::unordered_set<std::uint64_t>& maybe) {
  verdict v;
  v.expected = expected.size();
  stomp_connection c;
  if (!c.open(o.host, o.port, o.timeout)) {
    std::fprintf(stderr, "txgen: verify: %s\n", c.error().c_str());
    return v;
  }
  escrow::frame sub;
  sub.command = "SUBSCRIBE";
  sub.add("id", "0").add("destination", "/queue/" + o.queue).add("ack", "auto").add("prefetch-count", "1000");
  if (!c.send(sub)) {
    std::fprintf(stderr, "txgen: verify: %s\n", c.error().c_str());
    return v;
  }
  std::unordered_map<std::uint64_t, std::uint32_t> seen;
  seen.reserve(expected.size() * 2 + 16);
  std::uint64_t counted = 0;  // expected ids seen at least once
  // Stop 300 ms after the last expected message arrived (to catch extras), or after 3 s of
  // silence (something is missing).
  auto quiet = 3000ms;
  for (;;) {
    auto f = c.next(clock_type::now() + (counted >= expected.size() ? clock_type::duration(300ms) : quiet));
    if (!f) {
      if (c.broken()) std::fprintf(stderr, "txgen: verify: %s\n", c.error().c_str());
      break;
    }
    if (f->command != "MESSAGE") {
      std::fprintf(stderr, "txgen: verify: unexpected %s\n", stomp_connection::describe(*f).c_str());
      break;
    }
    ++v.found;
    std::uint64_t id = 0;
    if (!parse_body(f->body, id)) {
      if (v.foreign++ == 0 && v.examples.size() < 10)
        v.examples.push_back("not from this run: " + f->body.substr(0, std::min<std::size_t>(f->body.size(), 40)));
      continue;
    }
    if (++seen[id] == 1 && expected.count(id)) ++counted;
  }
  for (auto& [id, n] : seen) {
    if (n > 1) {
      v.duplicates += n - 1;
      if (v.examples.size() < 10) v.examples.push_back("duplicate: " + describe_id(id) + " x" + std::to_string(n));
    }
    if (!expected.count(id) && !maybe.count(id)) {
      ++v.unexpected;
      if (v.examples.size() < 10) v.examples.push_back("unexpected (rolled back or consumed): " + describe_id(id));
    }
  }
  for (std::uint64_t id : expected)
    if (!seen.count(id)) {
      ++v.missing;
      if (v.examples.size() < 10) v.examples.push_back("missing: " + describe_id(id));
    }
  v.done = true;
  disconnect(c, 5);
  return v;
}

// ---------------------------------------------------------------------------------------------

int run(const options& o) {
  if (o.mode != "local" && o.prefill > 0 && !prefill(o, static_cast<std::uint64_t>(o.prefill))) return 1;
  if (o.mode != "local" && o.prefill < o.connections)
    std::fprintf(stderr, "txgen: warning: --prefill %lld is below --connections %d; some will starve\n",
                 static_cast<long long>(o.prefill), o.connections);

  shared_state st;
  std::vector<worker_result> results(static_cast<std::size_t>(o.connections));
  std::vector<std::thread> threads;
  for (int i = 0; i < o.connections; ++i)
    threads.emplace_back([&, i] { worker(o, i, st, results[static_cast<std::size_t>(i)]).run(); });
  while (st.ready.load() < o.connections) std::this_thread::sleep_for(1ms);
  st.t0 = clock_type::now();
  st.deadline = st.t0 + to_duration(o.seconds);
  st.go = true;
  for (auto& t : threads) t.join();

  std::uint64_t committed = 0, failures = 0, rolled_back = 0, uncertain_tx = 0;
  std::vector<std::int64_t> latency;
  time_point end = st.t0;
  std::unordered_set<std::uint64_t> expected, maybe;
  for (std::uint64_t i = 0; i < static_cast<std::uint64_t>(o.prefill) && o.mode != "local"; ++i)
    expected.insert(message_id(0, i));
  for (auto& r : results) {
    committed += r.committed;
    failures += r.failures;
    rolled_back += r.rolled_back;
    latency.insert(latency.end(), r.latency_us.begin(), r.latency_us.end());
    end = std::max(end, r.last_end);
    for (auto id : r.sent) expected.insert(id);
    for (auto id : r.uncertain) maybe.insert(id);
  }
  for (auto& r : results)
    for (auto id : r.consumed) expected.erase(id);
  for (auto id : maybe) expected.erase(id);
  uncertain_tx = o.mode == "local" ? maybe.size() / static_cast<std::size_t>(o.sends) : maybe.size() / 2;
  double elapsed = seconds_between(st.t0, end);
  double rate = elapsed > 0 ? static_cast<double>(committed) / elapsed : 0.0;
  std::int64_t p50 = quantile(latency, 0.50), p99 = quantile(latency, 0.99);

  verdict v;
  if (o.verify) v = verify(o, expected, maybe);

  std::string what = o.mode == "xa2pc"   ? "XA-START, SEND, ACK, XA-END, XA-PREPARE, XA-COMMIT"
                     : o.mode == "xa1pc" ? "XA-START, SEND, ACK, XA-END, XA-COMMIT TMONEPHASE"
                                         : "BEGIN, " + std::to_string(o.sends) + " x SEND, COMMIT";
  std::printf("%s: %d connection(s), %s, /queue/%s, persistent %zu B\n", o.mode.c_str(), o.connections, what.c_str(),
              o.queue.c_str(), o.body_size);
  std::printf("  %llu committed in %.2f s: %.0f tx/s; latency p50 %lld us, p99 %lld us; %llu failure(s) "
              "(%llu rolled back, %llu outcome unknown)\n",
              static_cast<unsigned long long>(committed), elapsed, rate, static_cast<long long>(p50),
              static_cast<long long>(p99), static_cast<unsigned long long>(failures),
              static_cast<unsigned long long>(rolled_back), static_cast<unsigned long long>(uncertain_tx));
  const char* verified = "skipped";
  if (o.verify) {
    bool good = v.done && v.missing == 0 && v.unexpected == 0 && v.duplicates == 0 && v.foreign == 0;
    verified = !v.done ? "failed" : good ? "yes" : "no";
    std::printf("  queue check: %llu expected, %llu drained: %llu missing, %llu unexpected, %llu duplicate(s), "
                "%llu not from this run%s\n",
                static_cast<unsigned long long>(v.expected), static_cast<unsigned long long>(v.found),
                static_cast<unsigned long long>(v.missing), static_cast<unsigned long long>(v.unexpected),
                static_cast<unsigned long long>(v.duplicates), static_cast<unsigned long long>(v.foreign),
                v.done ? "" : " (could not drain)");
    for (const auto& e : v.examples) std::printf("    %s\n", e.c_str());
  }
  std::printf("RESULT mode=%s connections=%d tx=%llu tx_per_s=%.1f p50_us=%lld p99_us=%lld failures=%llu "
              "rolled_back=%llu uncertain=%llu elapsed_s=%.3f verified=%s queue_expected=%llu queue_found=%llu "
              "missing=%llu unexpected=%llu duplicates=%llu foreign=%llu\n",
              o.mode.c_str(), o.connections, static_cast<unsigned long long>(committed), rate,
              static_cast<long long>(p50), static_cast<long long>(p99), static_cast<unsigned long long>(failures),
              static_cast<unsigned long long>(rolled_back), static_cast<unsigned long long>(uncertain_tx), elapsed,
              verified, static_cast<unsigned long long>(v.expected), static_cast<unsigned long long>(v.found),
              static_cast<unsigned long long>(v.missing), static_cast<unsigned long long>(v.unexpected),
              static_cast<unsigned long long>(v.duplicates), static_cast<unsigned long long>(v.foreign));
  bool ok = !st.failed && failures == 0 && (!o.verify || std::string_view(verified) == "yes");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  auto o = parse_options(argc, argv);
  if (!o) {
    usage(argv[0]);
    return 2;
  }
  run_nonce = static_cast<std::uint32_t>(std::random_device{}());
  return run(*o);
}
