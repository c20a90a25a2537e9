// Internal to broker/core: the core's state and the helpers its frame handlers share. Everything here
// is touched only on the core strand. broker.cpp holds connection lifecycle and frame dispatch,
// send.cpp routing and SEND, subscribe.cpp SUBSCRIBE/UNSUBSCRIBE, delivery.cpp MESSAGE, ACK, NACK.
// Most of the state is in parts, members of broker::impl each in a header of its own: topology
// (topology_part.h), clients (connections_part.h), transactions (transactions_part.h), acks
// (acks_part.h), undelivered (undelivered_part.h).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "escrow/broker/config/address_settings.h"
#include "escrow/broker/core/admin_core.h"
#include "escrow/broker/core/broker.h"
#include "escrow/rm/resource_manager.h"
#include "escrow/broker/core/metrics.h"
#include "escrow/storage/batch.h"
#include "connections_part.h"
#include "delivery_times.h"
#include "coordination_part.h"
#include "duplicates_part.h"
#include "acks_part.h"
#include "queue.h"
#include "schedule_part.h"
#include "transactions_part.h"
#include "topology_part.h"
#include "undelivered_part.h"
#include "unstored_part.h"
#include "escrow/broker/security/security.h"

namespace escrow::broker {

class memory_alarm;

// Timers that need Asio; defined in broker.cpp.
struct core_timers;


// An `escrow purge` or `escrow move` under way over one queue (sweeps.cpp). It goes through
// the queue's stored entries in key order, one slice per core turn, and starts the next slice only
// once the previous one's batch is stored, so memory stays bounded and other connections are
// served between slices.
struct queue_sweep {
  enum class kind { purge, move };
  kind what = kind::purge;
  queue_ptr from;                // the queue emptied
  std::uint64_t id_limit = 0;    // only messages with a lower id (in the queue when it began)
  std::string next;              // the encoded entry key the next slice reads from
  bool at_end = false;           // the last slice has been read
  std::uint64_t depth_at_start = 0;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  // A move's destination as resolve_destination() takes it, and its optional _HQ_ORIG_ADDRESS filter.
  std::string destination;
  std::optional<std::string> filter;
  // Totals of the slices stored so far.
  std::size_t handled = 0;  // purged or moved
  std::size_t held = 0;     // held when the cursor passed them (in flight, in a branch): left alone
  std::size_t slices = 0;   // slices read
  std::function<void(const sweep_report&)> done;  // the operator's answer, once the sweep ends
};
using sweep_ptr = std::shared_ptr<queue_sweep>;

// One stored entry a slice of a sweep read: its key, its stored delivery count and, for a move,
// its whole stored value (the message, when it is stored inline).
struct sweep_page_entry {
  storage::entry_key key;
  std::uint32_t delivery_count = 0;
  std::string value;
  std::uint64_t size = 0;  // a purge's: the stored size of its message (queue_counters::bytes)
};

// A SEND, validated and routed: the message and its entry in each target queue.
struct routed_message {
  message_ptr msg;
  std::vector<std::pair<queue_ptr, queue_entry>> entries;
};

// The oldest ready messages a full DROP-HEAD or ring queue loses to make room (address_limits.cpp),
// in the batch that stores what replaces them: deleted, or moved to the dead letter address
// (dead-letter-on-drop). Once that batch is stored they are gone; if it is refused they go back.
struct room_plan {
  std::vector<move_plan> drops;
  std::vector<bool> by_ring;  // per drop: ring-size removed it (else DROP-HEAD)
  bool empty() const { return drops.empty(); }
};

// A write's replacements in last-value queues (last_values.cpp), finished once its batch is done.
struct last_value_plan {
  struct write {  // a new entry of a last-value queue
    queue_ptr q;
    std::string value;
    storage::entry_key key;
    std::uint64_t serial = 0;                   // its own member's
    std::optional<storage::entry_key> previous;  // its value's newest before it
    // The members of its value's chain it removes (key, serial).
    std::vector<std::pair<storage::entry_key, std::uint64_t>> removes;
  };
  std::vector<write> writes;
  // Queues where a write of this plan takes the place of a message it removes (their limits:
  // such a write adds nothing).
  std::vector<std::uint32_t> replacing_in;
  bool removes_stored = false;  // it removes a stored entry: it must go through the store
};

struct broker::impl {
  impl(boost::asio::io_context& io, storage::store& store, const broker_config& config);
  ~impl();  // stop_store_readers()
  void stop_store_readers();  // broker::stop_store_readers

  storage::store& store;
  broker_config config;
  std::atomic<std::uint64_t> next_connection_id{1};
  std::atomic<std::size_t> inbound_bytes{0};  // frames handed to the core and not yet handled
  std::atomic<bool> input_stopped{false};     // broker::stop_input (graceful stop)

  // --- core strand state ---
  topology_part topology;  // queues, durable subscriptions and topics (topology_part.h)
  connections_part clients;  // connections, their subscriptions and outboxes (connections_part.h)
  transactions_part transactions;  // the branches, their latencies, staged bytes (transactions_part.h)
  acks_part acks;  // acknowledgements waiting for the next write (acks_part.h)
  limits_part limits;  // prepared branches' room, queues producers wait on (address_limits_part.h)
  std::uint64_t next_message_id = 1;
  std::unique_ptr<core_timers> timers;
  std::unique_ptr<memory_alarm> alarm;  // limits.memory-high-watermark (memory_alarm.h)
  undelivered_part undelivered;  // expiry, redelivery delays, dead letters (undelivered_part.h)
  std::mt19937_64 random{std::random_device{}()};
  // Addresses whose settings and grants are cached at most (each cache is emptied beyond it).
  static constexpr std::size_t kMaxCachedAddresses = 10000;

  // Users and permissions (permissions.cpp). `auth` null: anonymous, every permission.
  authenticator* auth = nullptr;
  std::unordered_map<std::string, address_grants> grants_cache;  // by address; cleared on reload
  bool holds_on(const connection& c, permission p, std::string_view address);
  bool holds_globally(const connection& c, permission p) const;  // granted by the "#" table
  // Whether `c` holds `p` on `address`; if not, ERROR naming the permission (connection closes).
  bool permitted(connection& c, permission p, std::string_view address, const frame* request);
  // The same for operations on the broker as a whole (XA-RECOVER, XA-HEURISTIC, ADMIN): `p`
  // granted by the [[security-settings]] table whose match is "#".
  bool permitted_globally(connection& c, permission p, const frame* request);
  // ADMIN browse of the queue `f` names (admin_core.cpp); if not allowed, ERROR as permitted().
  bool may_browse(connection& c, const frame& f);
  // A new connection: false (after an ERROR) when its user has limits.max-connections-per-user.
  bool admit(connection& c);
  // False (after an ERROR) when another live connection of c's user has its client-id (subscribe.cpp).
  bool client_id_free(connection& c);
  void release(connection& c);  // the connection is gone
  // Per-user limits (tenant_limits.cpp). Each refusal but prepare_refusal's sends the ERROR.
  // XA-START of a new branch or BEGIN: false when `c` has max-branches-per-connection open, or its
  // user max-branches-per-user.
  bool may_start_branch(connection& c, const frame* request);
  // limits.max-subscriptions-per-user, and the count it checks (SUBSCRIBE +1, UNSUBSCRIBE and close -n).
  bool may_subscribe(connection& c, const frame& f);
  void count_subscriptions(const connection& c, std::int64_t delta);
  // Why c's user may not prepare another branch (max-prepared-branches-per-user), if so.
  std::optional<std::string> prepare_refusal(const connection& c) const;
  // A SEND of `bytes` staged in `b`: within max-transaction-bytes and, over all of its owner's
  // transactions, max-transaction-bytes-per-user; counted then, until release_staged.
  bool may_stage(connection& c, rm::branch& b, std::uint64_t bytes, const frame& f);
  void release_staged(rm::branch& b);  // its transaction is committed or rolled back
  // A frame of `c` that would create the queue `storage_key`: within max-queues-per-user.
  bool may_create_queue(connection& c, const std::string& storage_key, const frame* request);
  void count_queue(const queue& q, int delta);  // in or out of queues_by_user
  std::unordered_map<std::string, std::uint32_t> queues_by_user;  // queues their frames created
  // limits.max-stored-bytes-per-user: a persistent SEND whose stored bytes (`bytes`) would take its
  // user's above the quota gets the ERROR. What counts: the store's bytes by sender, what is being
  // stored (storing_by_user) and what the user's open transactions hold (in_transaction: this
  // SEND's bytes are among them already).
  bool may_store(connection& c, std::uint64_t bytes, bool in_transaction, const frame& f);
  void count_storing(const std::string& user, std::uint64_t bytes, bool done);
  std::unordered_map<std::string, std::uint64_t> storing_by_user;  // submitted SENDs, not yet completed
  std::uint64_t store_quota = 0;  // the quota in force (broker::open derives the default)
  void derive_store_quota();     // broker.cpp, at open
  // Who holds the bytes waiting for the core or the disk (unstored_part.h); any thread.
  unstored_part unstored;

  // Runs a function on the core strand; set up by broker.cpp, which owns the Asio strand.
  std::function<void(std::function<void()>)> post;
  // Submits a batch; `done` runs on the core strand with the outcome, then outboxes are flushed.
  // Acknowledgements waiting in acks.deferred_acks go first, as a batch of their own queued with it.
  void submit(storage::batch b, std::function<void(const storage::status&)> done);
  // An acknowledgement nobody asked a receipt for promises nothing about when it is on disk: its
  // removals wait here for the next write that has to happen anyway, or at most kDeferredAckMs
  // (docs/storage.md, "Acknowledgements without a receipt"). `done` runs when they are stored.
  void defer_ack(storage::batch b, std::function<void(const storage::status&)> done);
  void submit_deferred_acks();  // now, as a batch of their own (the timer, a closing connection)
  // Empties acks.deferred_acks and acks.deferred_ack_done into a batch and one completion for them all.
  std::pair<storage::batch, std::function<void(const storage::status&)>> take_deferred_acks();
  // The store's completion for `done`: collected and run on the core in one turn (run_completions).
  std::function<void(storage::status)> completion_for(std::function<void(const storage::status&)> done);
  static constexpr int kDeferredAckMs = 5;
  // A delivery stopped because its raised count was refused is offered again after this long.
  static constexpr std::uint64_t kRefusedCountRetryMs = 1000;
  void run_completions();
  std::mutex completed_mutex;  // the one lock: committer thread -> core strand hand-off
  std::vector<std::pair<std::function<void(const storage::status&)>, storage::status>> completed;
  // Sends every outbox filled during this core turn.
  void flush();

  // Frame handlers (one per command family).
  void handle_frame(const connection_ptr& c, frame& f);
  void handle_send(const connection_ptr& c, frame& f);
  void handle_subscribe(const connection_ptr& c, const frame& f);
  // SUBSCRIBE's steps (subscribe.cpp); each sends the ERROR and returns null when the frame is
  // refused. The subscription as its headers ask (ack mode, window):
  std::unique_ptr<subscription> new_subscription(const connection_ptr& c, const frame& f, const std::string& id);
  // The queue it consumes from: a queue, a durable subscription (`created` when new) or a
  // non-durable subscription's own queue; new queues' records go into `b`.
  // `filter`: its selector, if it has one (a durable subscription keeps it in its record).
  queue_ptr subscription_source(const connection_ptr& c, const frame& f, const std::string& id,
                                const std::shared_ptr<const selector>& filter, storage::batch& b, queue_ptr& created);
  queue_ptr durable_source(const connection_ptr& c, const frame& f, const std::string& topic_name,
                           const std::string& name, const std::shared_ptr<const selector>& filter, storage::batch& b,
                           queue_ptr& created);
  void handle_unsubscribe(const connection_ptr& c, const frame& f);
  void handle_ack(const connection_ptr& c, const frame& f, bool positive);
  // The subscription and ack tag an ACK or NACK names (by id in STOMP 1.2, by message-id before);
  // null after the ERROR when it names none of this connection's unacknowledged messages.
  subscription* acked_subscription(const connection_ptr& c, const frame& f, std::uint64_t& tag);
  // The stored entries an ACK removed, once its batch is done: gone for good, or (refused) offered again.
  void finish_acks(std::vector<delivery>& removed, bool stored);
  void handle_disconnect(const connection_ptr& c, const frame& f);
  void handle_transaction(const connection_ptr& c, const frame& f);  // BEGIN, COMMIT, ABORT
  void handle_xa(const connection_ptr& c, const frame& f);           // XA-* frames
  // ADMIN frames (the `escrow` command): every one enters here (admin_core.cpp), which checks the
  // receipt header and the permissions and hands the frame to `admin` (broker/admin, installed
  // by broker::use_admin) with `admin_view`, the core as admin_core.h lets it be seen.
  void handle_admin(const connection_ptr& c, const frame& f);
  bool admin_permitted(connection& c, const frame& f);
  admin_handler admin;
  class core_admin;  // admin_core.cpp
  std::unique_ptr<admin_core> admin_view;
  std::unique_ptr<admin_core> make_admin_view();
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::vector<std::string> listeners;  // "HOST:PORT" as bound (broker::set_listeners)
  std::thread backup_worker;           // the running (or last) `escrow backup`, joined at exit
  bool backup_running = false;
  // Purges and moves in slices (sweeps.cpp). At most one runs per queue, by source queue id.
  std::unordered_map<std::uint32_t, sweep_ptr> sweeps;
  std::optional<sweep_report> sweep_running(std::uint32_t queue_id) const;
  void start_sweep(sweep_ptr s);               // registers it and runs its first slice now
  void sweep_slice(const sweep_ptr& s);        // reads the next page, submits its batch
  void purge_slice(const sweep_ptr& s, std::vector<sweep_page_entry> page);
  void move_slice(const sweep_ptr& s, std::vector<sweep_page_entry> page);
  void next_sweep_slice(const sweep_ptr& s);   // posts the next slice, or ends the sweep
  // Unregisters it and gives the operator's handler its report.
  void end_sweep(const sweep_ptr& s, sweep_report::ending how, std::string store_message = {});
  // A queue or durable subscription by the name operators see ("orders", "CLIENT-ID.NAME").
  queue_ptr find_by_name(std::string_view name) const;

  // Transactions.
  // The branch a SEND, ACK or NACK belongs to: its `transaction` header's local transaction, or
  // the XA branch the connection is associated with. Sends ERROR (and returns false) for a
  // transaction this connection does not have.
  bool branch_for(const connection_ptr& c, const frame& f, rm::branch_ptr& out);
  // Whether a branch still takes work (active XA branch, or an open local transaction).
  static bool takes_work(const rm::branch& b);
  // Submits a resource manager reply's write; once durable, applies its work to the queues and
  // calls `done` with the final XA code.
  // `decision`: what a coordinated transaction's commit writes with it (coordination.cpp).
  void carry_out(rm::resource_manager::reply r, std::function<void(int code)> done, storage::batch decision = {});
  void apply_commit(const rm::branch_work& work);
  void apply_rollback(const rm::branch_work& work);
  void roll_back_locals(connection& c);
  // The durable subscription `name` of c's client-id that c's user may resume or end: its own, or
  // one without owner whose topic the user may consume (subscribe.cpp); null when none.
  queue_ptr find_durable(const connection& c, const std::string& name);
  // Who makes the XA calls of `c`: its user, and whether it may decide others' prepared branches.
  rm::caller caller_of(const connection& c) const;
  // The branch an operator means by `x` (and the `user` header, when given): admin_core.h.
  operator_target owner_for_operator(const xid& x, const std::string* user) const;
  // An XA frame's user header into `caller` (transactions.cpp); false after answering XAER_INVAL.
  bool take_named_owner(const connection& c, const frame& f, rm::xa_verb verb, rm::caller& caller,
                        const std::function<void(int, const std::string&)>& answer) const;
  void expire_branches();

  // Coordinated PostgreSQL transactions (coordination.cpp, docs/exactly-once.md).
  coordination_part coordination;
  // At open: the gid prefix from the store id, the decisions stored, a pg_database per configured one.
  storage::status load_coordination();
  // BEGIN with a coordinate header: the transaction named `name`, its gid on the RECEIPT.
  void begin_coordinated(const connection_ptr& c, const frame& f, const std::string& name);
  // COMMIT of the coordinated local transaction `b` (taken out of the connection's list): checks
  // the database side is prepared, commits with the decision in the batch, then COMMIT PREPARED.
  void commit_coordinated(const connection_ptr& c, const rm::branch_ptr& b, std::optional<std::string> receipt_id,
                          const std::string& name);
  // The coordinated transaction `b` ended without a decision: ROLLBACK PREPARED of its gid.
  void end_coordinated(const rm::branch& b);
  // COMMIT PREPARED of a decided gid; once done, the decision is erased. `then` gets the answer.
  void finish_decision(const std::string& gid, std::function<void(const coordinator::pg_answer&)> then = {});
  // At start and every coordinator.recovery-interval-ms: each database's prepared gids of this
  // broker are committed (decided) or rolled back (neither decided nor live: presumed abort).
  void coordination_pass();
  void recover_database(const std::string& name, std::uint64_t listed_seq, coordinator::pg_answer listed);
  void stop_coordination();

  // A local transaction rolled back at transactions.local-timeout-ms: its connection gets an ERROR.
  void time_out_local(const rm::branch_ptr& b);
  void schedule_expiry();

  // Output.
  // The connection's outbox with room for `bytes` more; the first write of a core turn marks the
  // connection for flush().
  std::string& outbox_for(connection& c, std::size_t bytes);
  void write(connection& c, const frame& f);
  void write_message(connection& c, const subscription& s, std::uint64_t tag, const queue_entry& e);
  void receipt(connection& c, const frame& request);
  void write_receipt(connection& c, std::string_view receipt_id);
  // Submits `b` (when not empty); once it is durable runs `then(stored)` and answers `request`:
  // its RECEIPT, or, if the store refused, ERROR "<what> not stored: ...".
  void receipt_after(const connection_ptr& c, const frame& request, storage::batch b,
                     std::string what = "the frame's work", std::function<void(bool stored)> then = {});
  // Sends ERROR naming `problem` (with receipt-id when `request` asked for one) and closes.
  void error(connection& c, const std::string& problem, const frame* request = nullptr,
             const std::string& detail = {});

  // SEND.
  // The queues a destination reaches: /queue/NAME (created if missing, its record added to
  // `records`, made by `creator` when given) or every subscription of /topic/NAME. False when it is
  // neither form.
  bool resolve_destination(std::string_view destination, storage::batch& records, std::vector<queue_ptr>& out,
                           const std::optional<std::string>& creator = std::nullopt);
  bool route(const connection_ptr& c, frame& f, routed_message& out, storage::batch& records);
  void publish(std::vector<std::pair<queue_ptr, queue_entry>>& entries);
  // A SEND outside a transaction, routed and within the user's limits: checked against its queues'
  // limits, then stored (its RECEIPT once durable) and published. `f` keeps its receipt header.
  void send_routed(const connection_ptr& c, frame& f, routed_message routed, storage::batch b, std::uint64_t storing,
                   std::optional<std::string> duplicate_id);

  // Queue limits (address_limits.cpp; docs/configuration.md, "Queue limits"): max-size-messages,
  // max-size-bytes, address-full-policy, dead-letter-on-drop and ring-size, per queue.
  enum class admission { admitted, refused, parked };
  // The address settings of a routed SEND's queues (they share one address).
  const address_settings& settings_of(const routed_message& routed);
  // Whether a SEND outside a transaction fits in each of its queues: FAIL answers the ERROR
  // (refused); BLOCK leaves it to wait for `wait_on` (parked: the caller parks it); DROP takes the
  // full queues out of routed.entries (counted, logged). Changes nothing else.
  admission admit_send(const connection_ptr& c, const frame& f, routed_message& routed, std::uint32_t& wait_on);
  // DROP-HEAD and ring-size: the oldest ready messages of routed's queues that must go for it to
  // fit, their removal (or dead-letter move) added to `b` and `drops`.
  void make_room_for_send(routed_message& routed, storage::batch& b, room_plan& drops);
  // Removes q's oldest ready messages into `b` and `drops` until `messages` more of `bytes` fit
  // (`reserved`: they hold their room already) under its ring-size and (DROP-HEAD) its max-size
  // limits, or none is ready (in flight ones stay); at most one per new message when q was over
  // its limits before (a lowered limit).
  void drop_oldest(const queue_ptr& q, const address_settings& s, std::int64_t messages, std::int64_t bytes,
                   bool reserved, storage::batch& b, room_plan& drops);
  // The batch of `drops` is done: stored (gone, counted, copies published) or refused (back).
  void finish_room_plan(room_plan& drops, bool stored);
  // Last-value queues (last_values.cpp; docs/configuration.md, "Last-value queues").
  // m's key value in q when q is a last-value queue (its index rebuilt first if the key changed),
  // else nullptr.
  const std::string* last_value_of(const queue_ptr& q, const message& m);
  // Rebuilds q's index for `key` ("": none) from its stored messages and those in memory.
  void index_last_values(queue& q, const std::string& key);
  // New entry `e` of q (its write about to be submitted in `b`): the ready message of its key
  // value, or one whose write is under way, is removed in `b`; `plan` says what to finish.
  void plan_last_value(const queue_ptr& q, const queue_entry& e, storage::batch& b, last_value_plan& plan);
  void plan_last_values(std::vector<std::pair<queue_ptr, queue_entry>>& entries, storage::batch& b,
                        last_value_plan& plan);
  // The batch of `plan` is done: stored (the replaced ones gone, counted) or refused (back).
  void finish_last_values(last_value_plan& plan, bool stored);
  // enqueue's check, for a new entry whose write is done: true when writes under way remove it
  // (it is held back until they are done) or one already did (dropped); the caller then does
  // nothing more with it.
  bool hold_back_superseded(const queue_ptr& q, const queue_entry& e);
  // A chain member after one of its removers is done: dropped, offered again, or left waiting.
  void settle_member(const queue_ptr& q, const std::string& value, storage::entry_key key, std::uint64_t serial,
                     std::vector<queue_ptr>& touched);
  void prune_last_values(queue& q);
  // How many of work's messages to q will replace one of their key (before planning: the commit's
  // ring and DROP-HEAD room).
  std::int64_t last_values_replacing(const queue_ptr& q, const rm::branch_work& work);
  // carry_out's gate: a commit's messages replace what their key values name, in r.write.
  void gate_last_values(rm::resource_manager::reply& r, std::function<void(int)>& done);

  // `messages` of `bytes` more (or fewer, negative) are on their way into q (queue_room::reserved).
  void reserve_room(queue& q, std::int64_t messages, std::int64_t bytes);
  void reserve_room(const std::vector<room_held>& held, int sign);
  // A SEND in the open transaction `b`: false with the reason when a FAIL queue is full (the caller
  // makes `b` rollback-only); DROP queues that are full are taken out of routed.entries.
  bool admit_staged(const rm::branch& b, routed_message& routed, std::string& refusal);
  // That refusal's answer: `b` rollback-only, the SEND's RECEIPT saying so (`records` submitted).
  void refuse_in_transaction(const connection_ptr& c, const frame& f, rm::branch& b, storage::batch records,
                             const std::string& refusal);
  // carry_out's gate: a prepare or one-phase commit whose sends do not fit in a FAIL or BLOCK queue
  // is rolled back instead (XA_RBOTHER, branch::refusal saying which limit; false then); DROP
  // queues take what fits; room is reserved at prepare until the branch is decided, and for a
  // commit until it is done; DROP-HEAD and ring queues lose their oldest in the commit's batch.
  bool gate_limits(rm::resource_manager::reply& r, std::function<void(int)>& done);
  void hold_prepared_room(const rm::branch& b);  // a prepared branch recovered at open
  // Why `c` may not wait for room in `queue_id` (it holds messages of it unacknowledged or in a
  // transaction, which only its own frames, waiting behind, would give back); "" when it may.
  std::string waits_for_itself(const connection& c, std::uint32_t queue_id) const;
  // BLOCK: `c` waits with its SEND (`resume` takes it up again) for room in `queue_id`; the frames
  // it sends meanwhile wait behind it (park_behind) and its session stops reading it.
  void park(const connection_ptr& c, std::uint32_t queue_id, std::int64_t bytes, std::uint64_t held,
            std::function<void()> resume);
  void park_behind(connection& c, frame f);
  // At the end of a core turn: each waiting SEND that fits now is taken up, then the frames behind it.
  void wake_blocked();
  void resume_parked(const connection_ptr& c);  // its SEND fits now: taken up, then what waited behind it
  void forget_parked(connection& c);  // it closed
  // At open, before anything is served: the stored messages and bytes of each queue with a limit.
  storage::status count_limited_queues();

  // Duplicate detection (duplicates.cpp; docs/stomp.md, "Duplicate detection"): a SEND's
  // _AMQ_DUPL_ID is remembered for its destination (the address: /queue/x and /topic/x are two) in
  // the batch that stores the message or commits its transaction; what memory holds is bounded
  // (duplicates_part.h). Nothing here runs for a SEND without the header.
  duplicates_part duplicates;
  // The SEND's id, when it has one and its address remembers ids (id-cache-size above 0); false
  // after the ERROR when it cannot be one (empty, too long).
  bool duplicate_id_of(connection& c, const frame& f, std::optional<std::string>& id);
  // A SEND outside a transaction, routed to `address`: false when `id` is taken there (the SEND is
  // answered, RECEIPT duplicate:true, and dropped; new queues' records in `b` are still
  // submitted); else its records are added to `b` and `claims` holds them until
  // release_duplicate_ids, once b's batch completed.
  bool claim_send_id(const connection_ptr& c, const frame& f, const std::string& address, const std::string& id,
                     storage::batch& b, duplicate_ids& claims);
  void release_duplicate_ids(const duplicate_ids& claims);
  // carry_out's gate for a branch's ids: a one-phase commit or prepare whose sends carry an id
  // taken (or twice) is rolled back instead, answering XA_RBINTEGRITY with branch::refusal saying
  // which id; false then. Otherwise true: a commit's ids go into r.write, a prepare holds its ids
  // until the branch is decided, and `done` is wrapped to release them.
  bool gate_duplicate_ids(rm::resource_manager::reply& r, std::function<void(int)>& done);
  void hold_duplicate_ids(const rm::branch& b);  // a prepared branch recovered at open

  // Memory of non-persistent messages (memory_budgets.cpp; docs/security.md, "Limits").
  // A message for `targets` (stored: whether each entry is stored) from `c`: when no entry is
  // stored and one is in a queue, it is charged to its user (limits.max-memory-bytes-per-user)
  // while it exists. nullptr, with the ERROR sent, when over that or over a queue's
  // limits.max-memory-bytes-per-queue with memory-full-policy "refuse".
  std::shared_ptr<message> charged_message(connection& c, storage::message_record record,
                                           const std::vector<std::pair<queue_ptr, bool>>& targets, const frame& f);
  // Before `e` (not stored) enters `q`: drops q's oldest messages not stored to keep it within
  // max-memory-bytes-per-queue, when its policy is "drop-oldest" or it is a subscription.
  void make_room(queue& q, const queue_entry& e);
  std::unordered_map<std::string, std::shared_ptr<std::atomic<std::uint64_t>>> memory_by_user;

  // Queues.
  queue_ptr find_by_id(std::uint32_t id) const;
  void add_queue(const queue_ptr& q);     // known by key and id; counted for its creator
  void remove_queue(const queue_ptr& q);  // forgotten (when `topology.queues` still names this one)
  queue_ptr find_or_create_queue(const std::string& name, storage::batch& b,
                                 const std::optional<std::string>& creator = std::nullopt);
  void persist_queue_record(const queue_ptr& q, storage::batch& b);
  std::function<void(const storage::status&)> confirm_records(const storage::batch& b,
                                                              std::function<void(const storage::status&)> done);
  // Ending a durable subscription: it leaves its topic now (new messages are not copied to it), its
  // record and entries go in `b`; once `b` is stored the queue is forgotten, and if the store
  // refuses it joins its topic again as it was (finish_drop).
  void drop_durable_queue(const queue_ptr& q, storage::batch& b);
  void finish_drop(const queue_ptr& q, bool stored);
  // Auto-delete of empty, unused queues (auto_delete.cpp), once a second.
  void sweep_unused_queues();
  bool in_use(const queue_ptr& q);
  void finish_auto_delete(const queue_ptr& q, const storage::status& s);

  // Delivery (delivery.cpp). dispatch hands out what it can of q to its consumers with room, in
  // turn, then submits what that pass writes:
  struct dispatch_writes {
    storage::batch auto_acks;  // removals of auto-acknowledged stored entries
    std::vector<storage::entry_key> auto_acked;
    storage::batch moves;  // expired messages and dead letters found on the way
    std::vector<move_plan> plans;
    // persist-delivery-count-before-delivery: the raised counts, and the deliveries that wait for
    // them, by (connection id, ack tag)
    storage::batch counts;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> after_counts;
  };
  void dispatch(const queue_ptr& q);
  // Posts another dispatch of q (once at a time): its selective consumers' scan goes on.
  void continue_scan(const queue_ptr& q);
  // The next consumer of q, in turn, with room for another message: of the highest priority that
  // has one with room; on an exclusive queue only its owner (`exclusive` says which). Consumers in
  // `idle` (selective ones that found nothing this pass) are passed over.
  subscription* consumer_with_room(queue& q, bool& exclusive, const std::vector<subscription*>& idle);
  // Entries a dispatch pass may classify for its queue's selective consumers before it yields the
  // core (a later pass, posted, goes on): a deep queue's scan never holds up other connections.
  static constexpr std::size_t kSelectorScanPerPass = 4096;
  // Whether s takes the message: it has no selector, or its selector picks it.
  static bool accepts(const subscription& s, const queue_entry& e);
  // Whether q serves one consumer at a time: its address settings say exclusive, or a consumer
  // asked for it. exclusive_owner_of: its owner, or the consumer that becomes it with the next
  // message handed out.
  bool exclusive_queue(queue& q);
  bool has_room_for(const subscription& s) const;  // for one more message now
  // Message groups (groups.cpp; docs/stomp.md, "Message groups").
  static constexpr std::size_t kGroupLookahead = 1024;  // messages a pass looks past a full group's
  static constexpr std::size_t kMaxGroupIdKept = 256;   // a longer group id is held by its hash
  const std::string* group_of(const message& m);  // its JMSXGroupID (or _AMQ_GROUP_ID), or null
  // The slot `group` is held under in q: itself, or a bucket once q holds max-groups-per-queue.
  std::string group_slot(queue& q, const std::string& group);
  // The consumer that gets message e of `group` now, `chosen` being the one whose turn it is: the
  // group's holder if it has room (else null: the message waits), or for a group nobody holds
  // `chosen`, which holds it from now on (`held`: it was held already). A holder whose selector
  // does not pick e leaves e to `chosen` (the group stays with the holder).
  subscription* group_target(queue& q, const std::string& group, subscription& chosen, const queue_entry& e,
                             bool& held);
  void after_group_message(queue& q, const std::string& group, const message& m);  // JMSXGroupSeq -1
  void forget_groups(queue& q, const subscription& s);  // s left: its groups move
  std::size_t reset_groups(queue& q, const std::optional<std::string>& group);  // an operator's reset
  subscription* exclusive_owner_of(queue& q);
  void hand_out(const queue_ptr& q, subscription& chosen, queue_entry e, dispatch_writes& w);
  void submit_auto_acks(const queue_ptr& q, storage::batch b, std::vector<storage::entry_key> keys);
  void submit_delivery_counts(storage::batch b, std::vector<std::pair<std::uint64_t, std::uint64_t>> deliveries);
  bool load_message(queue_entry& e);
  // persist-delivery-count-before-delivery: writes s's deliveries in order, up to the first whose
  // raised count is not stored yet.
  void write_unwritten(connection& c, subscription& s);
  // Returns a delivery to its queue for redelivery (delivery count raised, persisted in `b` when
  // stored), then offer_again().
  // `at_once`: without the redelivery delay (a leaving consumer's messages of an exclusive queue or
  // of a group, which must come back before anything newer goes to the next one).
  void requeue(delivery d, storage::batch& b, bool at_once = false);
  void requeue(const queue_ptr& q, queue_entry e, storage::batch& b, bool at_once = false);
  // A held entry whose (raised, already persisted) delivery count ended a delivery: dead-letters
  // it after max-delivery-attempts, else makes it ready again now or after the redelivery delay.
  void offer_again(const queue_ptr& q, queue_entry e, bool at_once = false);
  void detach(subscription& s, storage::batch& b);

  // Undelivered messages (undelivered.cpp): address settings, expiry, redelivery, dead letters.
  const address_settings& settings_for(const std::string& address);
  bool expired(const queue_entry& e, std::uint64_t now) const {
    return e.msg->record.expires != 0 && e.msg->record.expires <= now;
  }
  bool dead_letter_due(const queue_ptr& q, const queue_entry& e);
  // Adds to `b` the move of held entry `e` (message loaded) out of `q` for `reason`, and its plan.
  void plan_move(const queue_ptr& q, queue_entry e, move_reason reason, storage::batch& b,
                 std::vector<move_plan>& plans, bool in_bulk = false);
  // The same to the queues `targets` (not empty): removes the entry and stores one copy for them.
  void plan_copy(const queue_ptr& q, queue_entry e, move_reason reason, const std::vector<queue_ptr>& targets,
                 const std::string& destination, storage::batch& b, std::vector<move_plan>& plans, bool in_bulk);
  // Submits `b` and carries out `plans` once it is durable (or undoes them if refused); then
  // `then(status)` when given, with the store's answer (ok when there was nothing to write).
  void submit_moves(storage::batch b, std::vector<move_plan> plans,
                    std::function<void(const storage::status&)> then = {});
  // One pass of the expiry reaper from index key `from`; continues in a later turn if cut short.
  void reap(std::string from = {});
  void schedule_reaper();
  void delay_redelivery(const queue_ptr& q, queue_entry e, std::uint64_t delay_ms);
  void redeliver_due();

  // Scheduled delivery (schedule.cpp; docs/stomp.md, "Scheduled delivery").
  schedule_part schedule;
  // A new entry of `q` (a SEND or commit stored it, or it needs no storing): ready at once, or
  // scheduled when its message has a delivery time (counted as enqueued either way).
  void enqueue(const queue_ptr& q, queue_entry e);
  void schedule_entry(const queue_ptr& q, queue_entry e);
  // The one timer of delayed redeliveries and scheduled messages, armed for the earliest of them.
  void arm_due_timer();
  std::optional<std::chrono::steady_clock::time_point> armed_due;  // what it waits for, if armed
  void release_waiting();  // scheduled messages not stored whose time has come
  // One pass over the stored schedule: what is due, up to a batch, becomes queue entries once the
  // batch is stored; the next pass follows its completion.
  void promote_due();
  struct promoted_entry {
    queue_ptr q;
    storage::entry_key key;
    std::uint64_t size;  // what it counts for in the queue's bytes (max-size-bytes)
  };
  // That size for a `scheduled` record with value `value`: its message's stored size.
  std::uint64_t scheduled_size(const storage::entry_key& key, std::string_view value) const;
  storage::status load_schedule();  // broker::open: each queue's earliest due time
  // A queue that is gone (a durable subscription dropped, a subscription ended): its waiting
  // messages and counts are forgotten, and scheduled records stored after the drop read the
  // table are removed. A drop the store refused: its schedule is read again.
  void forget_schedule(const queue_ptr& q);
  void reload_schedule(const queue_ptr& q);
  // The earliest due time of the queue's stored scheduled messages (none being stored), if any.
  std::optional<std::uint64_t> first_due(std::uint32_t queue_id, storage::status& s) const;
  std::vector<scheduled_view> list_scheduled(std::uint32_t queue_id, std::optional<scheduled_cursor> after,
                                             std::size_t limit);
  // Delivers now (`deliver`) or deletes the scheduled messages `ids` of the queue (empty: the first
  // `limit` in due order); `done` gets the store's answer and how many it handled.
  void end_schedule(std::uint32_t queue_id, bool deliver, const std::vector<std::uint64_t>& ids, std::size_t limit,
                    std::function<void(const storage::status&, std::size_t)> done);
  // The queues named by every expiry and dead letter address in the settings, created if missing.
  void create_undelivered_queues(storage::batch& b);

  // broker::open's steps (broker.cpp): the next ids, the queues and durable subscriptions (their
  // count in `loaded`), the prepared and heuristic branches (their count in `prepared`, their
  // consumed entries held).
  storage::status load_next_ids();
  storage::status load_queues(std::size_t& loaded);
  storage::status load_branches(std::size_t& prepared);

  // Metrics (metrics_collect.cpp). Sets each queue's depth from the entries in storage: one
  // key-only pass over the entries table at open.
  storage::status count_depths();  // starts the background count (metrics_collect.cpp)
  std::thread depth_counter;
  std::atomic<bool> stopping{false};
  metrics_snapshot snapshot() const;
  // The queues' part of it: broker-wide totals, the series of the deepest max-queue-metrics.
  void collect_queues(metrics_snapshot& s) const;
  void collect_drops(metrics_snapshot& s) const;  // what full queues dropped (address_limits.cpp)
};


// "user 'NAME'", or "anonymous": who a connection is, in errors (permissions.cpp).
std::string who(const connection& c);

}  // namespace escrow::broker
