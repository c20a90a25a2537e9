// The broker core's entry points, connection lifecycle and frame dispatch. Every on_* call posts
// to the core strand; see core.h for the state it owns.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cstdlib>

#include "core.h"
#include "escrow/broker/selector/selector.h"
#include "escrow/broker/security/names.h"
#include "durable_name.h"
#include "core_timers.h"
#include "memory_alarm.h"
#include "escrow/storage/coding.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

namespace escrow::broker {

namespace asio = boost::asio;

std::uint64_t now_ms() {
  using namespace std::chrono;
  return static_cast<std::uint64_t>(duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

namespace {
constexpr std::string_view kServerName = "escrow/0.1.0";
}

broker::impl::impl(asio::io_context& io, storage::store& s, const broker_config& c)
    : store(s),
      config(c),
      transactions(std::chrono::milliseconds(c.branch_timeout_ms), std::chrono::milliseconds(c.local_timeout_ms)) {
  // A subscription being ended takes no more entries: if its end is stored they would be orphans
  // (and if it is refused, it misses them, as it misses the topic's messages meanwhile).
  transactions.rm.set_queue_exists([this](std::uint32_t id) {
    auto it = topology.queues_by_id.find(id);
    return it != topology.queues_by_id.end() && !it->second->dropping;
  });
  admin_view = make_admin_view();
  auto strand = asio::make_strand(io);
  post = [strand](std::function<void()> fn) { asio::post(strand, std::move(fn)); };
  timers.reset(new core_timers{asio::steady_timer(strand), asio::steady_timer(strand), asio::steady_timer(strand),
                               asio::steady_timer(strand), asio::steady_timer(strand), asio::steady_timer(strand)});
  alarm = std::make_unique<memory_alarm>(io, c.memory_high_watermark);
}

broker::impl::~impl() { stop_store_readers(); }

void broker::impl::stop_store_readers() {
  stopping = true;
  stop_coordination();  // its threads post to the core: joined before it goes
  if (depth_counter.joinable()) depth_counter.join();
  if (backup_worker.joinable()) backup_worker.join();  // a backup in progress is finished first
}

// Once a second, on the core strand: roll back branches past their timeout.
void broker::impl::schedule_expiry() {
  timers->branch_expiry.expires_after(std::chrono::seconds(1));
  timers->branch_expiry.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    expire_branches();
    // The address settings resolved per address are a cache: bounded, emptied here, where no
    // reference into it is held (settings_for's references live within one call).
    if (undelivered.settings_cache.size() > kMaxCachedAddresses) undelivered.settings_cache.clear();
    sweep_unused_queues();
    flush();
    schedule_expiry();
  });
}

void broker::impl::defer_ack(storage::batch b, std::function<void(const storage::status&)> done) {
  if (acks.deferred_acks.empty()) {
    timers->deferred_acks.expires_after(std::chrono::milliseconds(kDeferredAckMs));
    timers->deferred_acks.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) submit_deferred_acks();
    });
  }
  acks.deferred_acks.append(b);
  acks.deferred_ack_done.push_back(std::move(done));
}

void broker::impl::submit_deferred_acks() {
  if (acks.deferred_acks.empty()) return;
  auto [removals, removals_done] = take_deferred_acks();
  store.submit(std::move(removals), completion_for(std::move(removals_done)));
}

std::pair<storage::batch, std::function<void(const storage::status&)>> broker::impl::take_deferred_acks() {
  timers->deferred_acks.cancel();
  storage::batch removals = std::move(acks.deferred_acks);
  acks.deferred_acks = storage::batch{};
  std::function<void(const storage::status&)> done =
      [done = std::move(acks.deferred_ack_done)](const storage::status& s) {
        for (auto& d : done) d(s);
      };
  acks.deferred_ack_done.clear();
  return {std::move(removals), std::move(done)};
}

std::function<void(const storage::status&)> broker::impl::confirm_records(
    const storage::batch& b, std::function<void(const storage::status&)> done) {
  std::vector<queue_ptr> carried;
  // Queues whose record became durable meanwhile (another batch carried it) need no tracking.
  std::erase_if(topology.records_carried, [](const queue_ptr& q) { return q->record_durable; });
  if (topology.records_carried.empty()) return done;
  storage::batch::decode(b.rep(), [&](storage::batch::op o, storage::table t, std::string_view key, std::string_view) {
    if (o != storage::batch::op::put || t != storage::table::queues) return;
    auto it = std::find_if(topology.records_carried.begin(), topology.records_carried.end(),
                           [&](const queue_ptr& q) { return q->storage_key == key; });
    if (it == topology.records_carried.end()) return;
    carried.push_back(std::move(*it));
    topology.records_carried.erase(it);
  });
  if (carried.empty()) return done;
  return [carried = std::move(carried), done = std::move(done)](const storage::status& s) {
    if (s.ok())
      for (const auto& q : carried) q->record_durable = true;
    done(s);
  };
}

void broker::impl::submit(storage::batch b, std::function<void(const storage::status&)> done) {
  if (!topology.records_carried.empty()) done = confirm_records(b, std::move(done));
  if (acks.deferred_acks.empty()) return store.submit(std::move(b), completion_for(std::move(done)));
  // The deferred removals first (they were received before whatever `b` holds), as a batch of
  // their own: if `b` is refused (a full store), these, which free room, are still applied. Both
  // are queued at once, so that the same group commit takes both.
  auto [removals, removals_done] = take_deferred_acks();
  store.submit(std::move(removals), completion_for(std::move(removals_done)), std::move(b),
               completion_for(std::move(done)));
}

std::function<void(storage::status)> broker::impl::completion_for(std::function<void(const storage::status&)> done) {
  // Completions arrive on the committer thread, a group at a time. They are collected here and
  // run in one core turn (one post, one flush per connection) rather than one post each.
  return [this, done = std::move(done)](storage::status s) mutable {
    bool first;
    {
      std::lock_guard lock(completed_mutex);
      first = completed.empty();
      completed.emplace_back(std::move(done), std::move(s));
    }
    if (first) post([this] { run_completions(); });
  };
}

void broker::impl::run_completions() {
  std::vector<std::pair<std::function<void(const storage::status&)>, storage::status>> ready;
  {
    std::lock_guard lock(completed_mutex);
    ready.swap(completed);
  }
  for (auto& [done, s] : ready) {
    done(s);
    // Invariant 8: every completion looks at its status. One that did not is a defect: the test
    // builds stop on it, a release build says so once.
    if (!s.checked()) {
#ifdef ESCROW_FAULT_INJECTION
      spdlog::critical("a store completion ignored its status ({}); fix it (DESIGN.md invariant 8)", s.message());
      std::abort();
#else
      static bool said = false;
      if (!said) spdlog::error("a store completion ignored its status; please report this (DESIGN.md invariant 8)");
      said = true;
#endif
    }
  }
  flush();
}

void broker::impl::flush() {
  // Producers waiting for room (address-full-policy BLOCK) go on where this turn made some.
  if (!limits.waited_on.empty() && !limits.waking) wake_blocked();
  for (auto& c : clients.dirty) {
    c->last_outbox = c->outbox.size();
    if (!c->outbox.empty() && !c->output_closed) c->out->send(std::move(c->outbox));
    c->outbox.clear();
  }
  clients.dirty.clear();
}

// A new outbox starts with room for twice the connection's last one: a string grown frame by frame
// copies what it holds at every doubling, about one more copy of every byte sent
// (docs/performance.md, "bytes copied"). Under a load that varies by less than half from one core
// turn to the next it is allocated once and never moved. Its room is at most twice the size of the
// outbox before it (and at most 1 MiB more than it needs), so unwritten frames take bounded memory.
std::string& broker::impl::outbox_for(connection& c, std::size_t bytes) {
  if (c.outbox.empty()) {
    auto it = clients.connections.find(c.id);
    if (it != clients.connections.end()) clients.dirty.push_back(it->second);
    c.outbox.reserve(std::max(bytes, std::min<std::size_t>(2 * c.last_outbox, 1024 * 1024)));
  }
  return c.outbox;
}

void broker::impl::write(connection& c, const frame& f) {
  if (c.output_closed) return;
  std::size_t size = f.command.size() + f.body.size() + 2;
  for (const auto& [name, value] : f.headers) size += name.size() + value.size() + 2;
  encode_to(outbox_for(c, size), f, c.info.version);
}

void broker::impl::receipt(connection& c, const frame& request) {
  if (const std::string* id = request.find("receipt")) write_receipt(c, *id);
}

void broker::impl::write_receipt(connection& c, std::string_view receipt_id) {
  if (c.output_closed) return;
  frame_writer w(outbox_for(c, receipt_id.size() + 22), "RECEIPT", c.info.version, receipt_id.size() + 12);
  w.header("receipt-id", receipt_id);
  w.finish({});
}

void broker::impl::receipt_after(const connection_ptr& c, const frame& request, storage::batch b,
                                 std::string what, std::function<void(bool stored)> then) {
  if (b.empty()) {
    if (then) then(true);
    return receipt(*c, request);
  }
  const std::string* id = request.find("receipt");
  std::optional<std::string> receipt_id = id ? std::optional<std::string>(*id) : std::nullopt;
  std::string command = request.command;
  // Until stored, its bytes are the connection's in limits.max-unstored-bytes (unstored_part.h).
  std::uint64_t unstored_bytes = b.byte_size();
  unstored.add(c->id, unstored_bytes);
  submit(std::move(b), [this, c, receipt_id, command, unstored_bytes, what = std::move(what),
                        then = std::move(then)](const storage::status& s) {
    unstored.remove(c->id, unstored_bytes);
    if (!s.ok()) {
      // The ERROR first: it closes the connection, so that what `then` puts back is not handed
      // to this same connection again.
      frame request{command, {}, {}};
      if (receipt_id) request.add("receipt", *receipt_id);
      error(*c, what + " not stored: " + s.message(), &request);
      if (then) then(false);
      return;
    }
    if (then) then(true);
    if (receipt_id) write_receipt(*c, *receipt_id);
  });
}

void broker::impl::error(connection& c, const std::string& problem, const frame* request, const std::string& detail) {
  if (c.output_closed) return;
  frame e{"ERROR", {{"message", problem}}, {}};
  if (request) {
    if (const std::string* r = request->find("receipt")) e.add("receipt-id", *r);
  }
  e.body = detail.empty() ? problem + "\n" : detail;
  e.add("content-type", "text/plain");
  e.add("content-length", std::to_string(e.body.size()));
  std::string bytes = std::move(c.outbox);
  c.outbox.clear();
  encode_to(bytes, e, c.info.version);
  c.input_closed = c.output_closed = true;
  spdlog::info("connection {}: ERROR {}", c.id, loggable(problem));  // it may quote what the client sent
  c.out->send_and_close(std::move(bytes), closing::after_error);
}

// Every record read here must decode: a corrupted store stops escrowd at start (exit status 1)
// with the table and the key, rather than starting on a guess (docs/storage.md).
storage::status broker::impl::load_next_ids() {
  using storage::corrupt_record;
  using storage::table;
  storage::next_ids next;
  if (storage::status s = storage::read_next_ids(store, next); !s.ok()) return s;
  next_message_id = std::max(next_message_id, next.message);
  topology.next_queue_id = std::max(topology.next_queue_id, next.queue);
  std::string last;
  if (store.last_key(table::messages, last).ok()) {
    std::uint64_t id = 0;
    if (!storage::parse_message_key(last, id))
      return corrupt_record(table::messages, last, "a message key is a u64 message id (8 bytes)");
    next_message_id = std::max(next_message_id, id + 1);
  }
  return {};
}

storage::status broker::impl::load_queues(std::size_t& loaded) {
  using storage::corrupt_record;
  using storage::table;
  storage::status bad;
  storage::status s = store.scan(table::queues, {}, {}, [&](std::string_view k, std::string_view v) {
    storage::queue_record r;
    if (!storage::queue_record::decode(v, r)) {
      bad = corrupt_record(table::queues, k, "the queue record (u32 id, u8 kind, topic) does not decode");
      return false;
    }
    bool is_sub = r.type == storage::queue_record::kind::durable_subscription;
    std::string name(k);
    // "q/NAME" for a queue, "d/CLIENT-ID \0 NAME [\0 USER]" for a durable subscription (docs/storage.md).
    auto durable = is_sub ? parse_durable_key(name) : std::nullopt;
    bool key_fits = is_sub ? durable.has_value() : name.size() > 2 && name.compare(0, 2, "q/") == 0;
    if (!key_fits) {
      bad = corrupt_record(table::queues, k,
                           is_sub ? "a durable subscription's key is d/CLIENT-ID, NUL, NAME (then NUL, USER when it has an owner)"
                                  : "a queue's key is q/NAME");
      return false;
    }
    if (queue_ptr other = find_by_id(r.id)) {
      bad = corrupt_record(table::queues, k, "its queue id " + std::to_string(r.id) + " is also the id of " +
                                                 storage::printable_key(other->storage_key));
      return false;
    }
    // A durable subscription's selector: a text that no longer compiles is a record this build
    // cannot honour (it would keep messages the subscription never asked for).
    std::shared_ptr<const selector> filter;
    if (!r.selector.empty()) {
      auto parsed = selector::parse(r.selector);
      if (auto* problem = std::get_if<selector_error>(&parsed)) {
        bad = corrupt_record(table::queues, k, "its selector does not compile: " + problem->message);
        return false;
      }
      filter = std::make_shared<const selector>(std::move(std::get<selector>(parsed)));
    }
    std::string display = is_sub ? durable_display_name(*durable) : name.substr(2);
    auto q = std::make_shared<queue>(r.id, display, is_sub ? queue::kind::durable_subscription : queue::kind::queue,
                                     r.topic, &store, config.queue_memory_window,
                                   config.queue_memory_bytes);
    q->start_unloaded();
    q->room.counted = false;  // until its stored messages are counted (count_depths)
    q->storage_key = name;
    q->creator = r.creator;
    q->filter = std::move(filter);
    q->record_durable = true;
    add_queue(q);
    if (is_sub) topology.topics[r.topic].subscriptions.push_back(q);
    topology.next_queue_id = std::max(topology.next_queue_id, r.id + 1);
    ++loaded;
    return true;
  });
  if (!s.ok()) return s;
  return bad;
}

storage::status broker::impl::load_branches(std::size_t& prepared) {
  // Prepared and heuristically completed branches come back before any consumer: the entries they
  // consumed stay held (never delivered), their sends stay invisible until the manager decides.
  if (storage::status rs = transactions.rm.load(store); !rs.ok()) return rs;
  for (const auto& [id, b] : transactions.rm.branches()) {
    ++prepared;
    // What they hold counts in limits.max-transaction-bytes-per-user, as it did before the restart.
    for (const auto& send : b->work.sends) b->staged_bytes += send.msg->record.encoded_size();
    if (b->staged_bytes > 0) transactions.transaction_bytes_by_user[b->owner] += b->staged_bytes;
    hold_duplicate_ids(*b);  // the _AMQ_DUPL_ID values its commit claims (duplicates.cpp)
    for (const auto& c : b->work.consumed)
      if (queue_ptr q = find_by_id(c.key.queue_id)) q->hold(c.key);
    hold_prepared_room(*b);  // what it sends keeps its room in limited queues (address_limits.cpp)
  }
  next_message_id = std::max(next_message_id, transactions.rm.max_staged_message_id() + 1);
  return {};
}

storage::status broker::open() {
  auto& m = *impl_;
  std::size_t loaded = 0, prepared = 0;
  if (storage::status s = m.load_next_ids(); !s.ok()) return s;
  if (storage::status s = m.load_queues(loaded); !s.ok()) return s;
  // Queues with a limit know their depth before any SEND (address_limits.cpp); the others are
  // counted in the background.
  if (storage::status s = m.count_limited_queues(); !s.ok()) return s;
  if (storage::status s = m.load_schedule(); !s.ok()) return s;
  if (storage::status ds = m.count_depths(); !ds.ok()) return ds;
  if (storage::status s = m.load_branches(prepared); !s.ok()) return s;
  if (storage::status s = m.load_coordination(); !s.ok()) return s;
  m.derive_store_quota();
  // The expiry and dead letter queues the settings name exist from the start, visible to browsers
  // and consumers before anything is moved there.
  storage::batch created;
  m.create_undelivered_queues(created);
  if (!created.empty()) m.submit(std::move(created), [](const storage::status& s) {
    if (!s.ok()) spdlog::error("cannot store the expiry and dead letter queues: {}", s.message());
  });
  spdlog::info("store open: {} queues and durable subscriptions, {} prepared or heuristic branches, next message id {}",
               loaded, prepared, m.next_message_id);
  m.post([p = impl_.get()] {
    p->schedule_expiry();
    p->schedule_reaper();
    p->arm_due_timer();  // scheduled messages stored before: those due while escrowd was down first
    p->coordination_pass();
  });
  m.alarm->start();
  return {};
}

// limits.max-stored-bytes-per-user when the file leaves it 0: with a users file, half of what the
// store may hold (storage.max-size, else its pages now and the disk's free space above
// storage.min-free-disk), so that one tenant leaves room for the others; without one, everyone is
// the one anonymous user, whom storage.max-size and storage.min-free-disk already bound.
void broker::impl::derive_store_quota() {
  store_quota = config.max_stored_bytes_per_user;
  if (store_quota != 0 || !auth) {
    if (store_quota != 0) spdlog::info("limits.max-stored-bytes-per-user: {} bytes", store_quota);
    return;
  }
  std::string of;
  if (config.max_size != 0) {
    store_quota = config.max_size / 2;
    of = "storage.max-size";
  } else {
    (void)store.send_room(true);  // measures the room now
    storage::commit_stats st = store.stats();
    std::uint64_t disk = st.disk_free_bytes > config.min_free_disk ? st.disk_free_bytes - config.min_free_disk : 0;
    store_quota = std::max<std::uint64_t>((st.live_bytes + disk) / 2, 1);
    of = "the store's pages and the free disk above storage.min-free-disk";
  }
  spdlog::info("limits.max-stored-bytes-per-user: {} bytes (half of {}; set it to choose)", store_quota, of);
}

broker::broker(asio::io_context& io, storage::store& store, const broker_config& config)
    : impl_(std::make_unique<impl>(io, store, config)) {}

broker::~broker() = default;

void broker::stop_store_readers() { impl_->stop_store_readers(); }

std::uint64_t broker::new_connection_id() { return impl_->next_connection_id.fetch_add(1); }

void broker::on_connect(std::uint64_t id, std::shared_ptr<outbound> out, connect_info info) {
  impl_->unstored.open(id, info.user);  // before any of its frames (on_frames)
  impl_->post([m = impl_.get(), id, out = std::move(out), info = std::move(info)]() mutable {
    auto c = std::make_shared<connection>();
    c->id = id;
    c->out = std::move(out);
    c->info = std::move(info);
    m->clients.connections.emplace(id, c);
    if (auto problem = name_problem(c->info.client_id)) {
      m->error(*c, "invalid client-id '" + loggable(c->info.client_id) + "': " + *problem);
      return m->flush();
    }
    if (!m->client_id_free(*c) || !m->admit(*c)) return m->flush();
    c->admitted = true;
    frame connected{"CONNECTED",
                    {{"version", std::string(to_string(c->info.version))},
                     {"server", std::string(kServerName)},
                     {"session", "escrow-" + std::to_string(id)},
                     {"heart-beat", std::to_string(c->info.heartbeat_send_ms) + "," +
                                        std::to_string(c->info.heartbeat_receive_ms)},
                     // The XA extension frames this broker answers (docs/transactions.md).
                     {"xa", "XA-START,XA-END,XA-PREPARE,XA-COMMIT,XA-ROLLBACK,XA-RECOVER,XA-FORGET"}},
                    {}};
    m->write(*c, connected);
    m->flush();
  });
}

void broker::on_frames(std::uint64_t id, std::vector<frame> frames) {
  std::size_t bytes = 0;
  for (const auto& f : frames) bytes += f.body.size() + 64;
  impl_->inbound_bytes.fetch_add(bytes, std::memory_order_relaxed);
  impl_->unstored.add(id, bytes);
  impl_->post([m = impl_.get(), id, bytes, frames = std::move(frames)]() mutable {
    auto it = m->clients.connections.find(id);
    if (it != m->clients.connections.end()) {
      connection_ptr c = it->second;
      for (auto& f : frames) {
        if (c->input_closed) break;
        // Behind a SEND waiting for room (BLOCK), every later frame waits too, in order.
        if (c->parked) {
          m->park_behind(*c, std::move(f));
          continue;
        }
        m->handle_frame(c, f);
      }
      m->flush();
    }
    m->inbound_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    m->unstored.remove(id, bytes);
  });
}

bool broker::memory_alarm_set() const { return impl_->alarm->set(); }

bool broker::sends_blocked(std::uint64_t connection_id) const { return impl_->unstored.blocked(connection_id); }

void broker::stop_input() { impl_->input_stopped = true; }
bool broker::input_stopped() const { return impl_->input_stopped.load(std::memory_order_relaxed); }

bool broker::reading_paused(std::uint64_t connection_id) const {
  if (input_stopped()) return true;
  std::uint64_t total = impl_->inbound_bytes.load(std::memory_order_relaxed) + impl_->store.queued_bytes();
  return impl_->unstored.paused(connection_id, total, impl_->config.max_unstored_bytes);
}

void broker::on_closed(std::uint64_t id) {
  impl_->unstored.close(id);
  impl_->post([m = impl_.get(), id] {
    auto it = m->clients.connections.find(id);
    if (it == m->clients.connections.end()) return;
    connection_ptr c = it->second;
    m->clients.connections.erase(it);
    if (c->admitted) m->release(*c);
    m->forget_parked(*c);  // a SEND waiting for room, and the frames behind it, go with it
    c->input_closed = c->output_closed = true;
    storage::batch b;
    std::vector<queue_ptr> touched;
    for (auto& [sid, sub] : c->subscriptions) {
      touched.push_back(sub->source);
      m->detach(*sub, b);
    }
    m->count_subscriptions(*c, -static_cast<std::int64_t>(c->subscriptions.size()));
    c->subscriptions.clear();
    // The raised delivery counts of what it had unacknowledged: advisory (a refused write leaves
    // the old counts, and the messages are offered again either way).
    if (!b.empty())
      m->submit(std::move(b), [](const storage::status& s) {
        if (!s.ok()) spdlog::warn("delivery counts of a closed connection not stored: {}", s.message());
      });
    m->submit_deferred_acks();  // a graceful stop waits for connections to close, not for the timer
    // Open local transactions roll back; XA branches the connection was associated with become
    // rollback-only; idle and prepared branches stay for the transaction manager.
    // A queue its open transactions consumed from is offered again once their rollback gives those
    // messages back (apply_rollback), so that nothing newer overtakes them.
    std::vector<std::uint32_t> rolling_back;
    for (const auto& [name, branch] : c->transactions)
      for (const auto& consumed : branch->work.consumed) rolling_back.push_back(consumed.key.queue_id);
    m->roll_back_locals(*c);
    m->transactions.rm.connection_closed(id);
    for (auto& q : touched)
      if (std::find(rolling_back.begin(), rolling_back.end(), q->id()) == rolling_back.end()) m->dispatch(q);
    m->flush();
  });
}

void broker::after_stored(std::function<void()> done) {
  impl_->post([m = impl_.get(), done = std::move(done)]() mutable {
    // An empty batch completes after every batch submitted before it (deferred acks go first).
    m->submit(storage::batch{}, [m, done = std::move(done)](const storage::status& s) {
      if (!s.ok()) spdlog::warn("stopping: the store refused the last writes: {}", s.message());
      m->flush();  // the receipts of what just completed, before `done` closes the sockets
      done();
    });
    m->flush();
  });
}

void broker::set_listeners(std::vector<std::string> listeners) {
  impl_->post([m = impl_.get(), listeners = std::move(listeners)]() mutable { m->listeners = std::move(listeners); });
}

void broker::on_writable(std::uint64_t id) {
  impl_->post([m = impl_.get(), id] {
    auto it = m->clients.connections.find(id);
    if (it == m->clients.connections.end()) return;
    std::vector<queue_ptr> sources;
    for (auto& [sid, sub] : it->second->subscriptions) sources.push_back(sub->source);
    for (auto& q : sources) m->dispatch(q);
    m->flush();
  });
}

void broker::impl::handle_frame(const connection_ptr& c, frame& f) {
  const std::string& cmd = f.command;
  if (cmd == "SEND") return handle_send(c, f);
  if (cmd == "SUBSCRIBE") return handle_subscribe(c, f);
  if (cmd == "UNSUBSCRIBE") return handle_unsubscribe(c, f);
  if (cmd == "ACK") return handle_ack(c, f, true);
  if (cmd == "NACK") return handle_ack(c, f, false);
  if (cmd == "DISCONNECT") return handle_disconnect(c, f);
  if (cmd == "CONNECT" || cmd == "STOMP") return error(*c, "already connected: a second " + cmd + " frame", &f);
  if (cmd == "BEGIN" || cmd == "COMMIT" || cmd == "ABORT") return handle_transaction(c, f);
  if (cmd.rfind("XA-", 0) == 0) return handle_xa(c, f);
  if (cmd == "ADMIN") return handle_admin(c, f);
  error(*c, cmd + " is a server frame; a client may not send it", &f);
}

void broker::impl::handle_disconnect(const connection_ptr& c, const frame& f) {
  const std::string* r = f.find("receipt");
  std::optional<std::string> receipt_id = r ? std::optional<std::string>(*r) : std::nullopt;
  c->input_closed = true;  // nothing after DISCONNECT is processed
  // An empty batch completes after every batch submitted before it, and its completion runs after
  // theirs: all earlier work is durable and its receipts are written before this one.
  submit(storage::batch{}, [c, receipt_id](const storage::status& s) {
    // A refused earlier write (an ACK, say) has already sent its ERROR and closed the connection.
    bool stored = s.ok();
    if (c->output_closed || !stored) return;
    std::string bytes = std::move(c->outbox);
    c->outbox.clear();
    if (receipt_id) {
      frame_writer w(bytes, "RECEIPT", c->info.version);
      w.header("receipt-id", *receipt_id);
      w.finish({});
    }
    c->output_closed = true;
    c->out->send_and_close(std::move(bytes), closing::done);
  });
}

}  // namespace escrow::broker
