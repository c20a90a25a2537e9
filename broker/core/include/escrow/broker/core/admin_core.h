// What the ADMIN frame handlers (broker/admin, docs/operations.md) may ask of the core: views of
// its queues, connections, subscriptions and branches, and the operations an operator starts (a
// purge or move in slices, ending a durable subscription, a heuristic decision, a backup on a
// thread of its own). The core implements admin_core (core/admin_core.cpp); broker::use_admin
// installs the handler it passes each ADMIN frame to, with the receipt check and the permission
// checks already done. Every call is made on the core strand, and every callback runs there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "escrow/broker/config/address_settings.h"
#include "escrow/broker/config/config.h"
#include "escrow/broker/core/metrics.h"
#include "escrow/frame.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/status.h"
#include "escrow/xid.h"

namespace escrow::storage {
class store;
}
namespace escrow::rm {
class resource_manager;
}

namespace escrow::broker {

// A scheduled message as `escrow scheduled` lists it, and where a listing resumes.
struct scheduled_view {
  std::uint64_t message_id = 0;
  std::uint64_t due = 0;   // epoch ms it leaves the schedule: its deliver_at, or its expiry if earlier
  bool stored = true;      // false: non-persistent (or for a non-durable subscription), in memory
  storage::message_record record;  // its headers and body (record.deliver_at: when it is delivered)
};
struct scheduled_cursor {  // the list's order: due time, priority (highest first), message id
  std::uint64_t due = 0;
  std::uint8_t priority = 4;
  std::uint64_t message_id = 0;
};

// The answer to one ADMIN frame: a RECEIPT with `admin-status` and, when ok, a JSON body;
// otherwise `message` says what went wrong and what to do (docs/operations.md).
struct admin_outcome {
  std::string status = "ok";  // ok, not-found, refused, invalid
  std::string message;        // set when status is not ok
  std::string json;           // the body when ok (a purge or move cut short also says what it did)
};
using admin_done = std::function<void(admin_outcome)>;

// A queue, durable subscription or non-durable subscription's queue, as it is now.
struct queue_view : message_counts {
  std::string key;         // in the queues table: "q/NAME", "d/CLIENT-ID\0NAME[\0USER]"
  std::uint32_t id = 0;
  std::string name;        // as operators see it ("orders", "CLIENT-ID.NAME@USER")
  std::string_view kind;   // "queue", "durable-subscription", "subscription"
  std::string topic;       // a subscription's topic; "" for a queue
  std::string address;     // what its settings are resolved by (a queue's name, a subscription's topic)
  bool dropping = false;   // its removal is being stored
  std::size_t consumers = 0;
  std::uint64_t in_flight = 0;  // delivered to its consumers, not yet acknowledged
  std::int64_t depth = 0;       // may be below 0 until the count at open has landed
  std::int64_t scheduled = 0;   // scheduled messages not yet due (not in depth); likewise
  std::int64_t bytes = 0;       // the stored size of what depth counts (max-size-bytes), the same way
  // A durable subscription's key, parsed (docs/security.md, "Tenants"); "" otherwise.
  std::string client_id, subscription, owner;
};

// One consumer of a queue.
struct consumer_view {
  std::uint64_t connection = 0;
  std::string subscription;  // its id
  std::string_view ack;      // "auto", "client", "client-individual"
  std::size_t in_flight = 0;
  std::int32_t priority = 0;  // activemq.priority / x-priority
  bool exclusive = false;     // it asked for activemq.exclusive
  bool receiving = true;      // false when an exclusive consumer other than it receives
  std::size_t groups = 0;             // message groups it holds
  std::vector<std::string> group_ids;  // the first kMaxGroupsShown of them
  static constexpr std::size_t kMaxGroupsShown = 100;
};

struct connection_view {
  std::uint64_t id = 0;
  std::string peer, user, login, client_id, version;
  std::size_t subscriptions = 0, in_flight = 0, transactions = 0;
  std::string xa_branch;  // the xid of the XA branch it is associated with; "" none
  std::string blocked_on;  // the queue its SEND waits for room in (address-full-policy BLOCK); "" none
};

struct subscription_view {
  std::uint64_t connection = 0;
  std::string id;
  std::string_view ack;
  std::size_t in_flight = 0;
  queue_view source;  // the queue it consumes from (in_flight left 0)
};

// A purge or move over a queue, slice by slice (docs/operations.md): what it has done so far, and
// when it is over, how it ended.
struct sweep_report {
  enum class ending {
    running,           // not over yet (the report of a sweep asked about while it runs)
    done,              // every entry present when it began was looked at
    queue_deleted,     // the queue went while it ran
    unreadable,        // reading the queue's entries failed (`store_message`)
    store_refused,     // the store refused a slice's batch (`store_message`)
    nothing_listening  // a move's destination topic has no subscription any more
  };
  bool purge = true;
  std::string queue;        // the queue it empties
  std::string destination;  // a move's destination as resolved ("/queue/NAME", "/topic/NAME")
  std::size_t handled = 0;  // purged or moved
  std::size_t held = 0;     // held when the cursor passed them: left alone
  std::size_t slices = 0;
  std::uint64_t depth_at_start = 0;
  double seconds = 0;       // since it began
  bool complete = false;    // the last slice has been read
  ending how = ending::running;
  std::string store_message;
};

// The branch an operator means by an xid (and the `user` header, when given): its owner. Several
// users' branches with that xid and no user named: `problem` says so (code XAER_RMERR).
struct operator_target {
  std::string user;
  std::string name;  // "XID" or "XID of user U", for logs and answers
  int code = 0;
  std::string problem;
};

// A coordinated PostgreSQL transaction as `escrow coordinator` lists it (docs/exactly-once.md).
struct coordinated_view {
  std::string gid;
  std::string database;
  std::string user;
  // live (begun), committing (its COMMIT is checking the database or writing the decision),
  // decided (committed here, COMMIT PREPARED not known done: pending), finishing (COMMIT PREPARED under way)
  std::string state;
  std::uint64_t since_ms = 0;  // wall clock: begun, or decided
};

class admin_core {
 public:
  virtual ~admin_core() = default;

  virtual const broker_config& config() const = 0;
  virtual const storage::store& store() const = 0;  // for short read transactions
  virtual const rm::resource_manager& branches() const = 0;
  // Coordinated transactions in gid order, from the first gid after `after` ("" from the start),
  // at most `limit` of them.
  virtual std::vector<coordinated_view> coordinated(std::string_view after, std::size_t limit) const = 0;

  // `escrow status`: the metrics snapshot (queue series included), the time since start, the
  // listeners as bound.
  virtual metrics_snapshot snapshot() const = 0;
  virtual double uptime_seconds() const = 0;
  virtual std::vector<std::string> listeners() const = 0;

  // The queues in the order of their keys, from the first key at or after `from` (`after`: the
  // first key after it), while `each` returns true.
  virtual void for_each_queue(std::string_view from, bool after,
                              const std::function<bool(const queue_view&)>& each) const = 0;
  // A queue or durable subscription by the name operators see; nullopt when there is none.
  virtual std::optional<queue_view> find_queue(std::string_view name) const = 0;
  // The name of the queue with id `id`; nullopt when it is gone.
  virtual std::optional<std::string> queue_name(std::uint32_t id) const = 0;
  virtual std::vector<consumer_view> consumers(std::uint32_t queue_id) const = 0;
  // Whether the queue's entry `key` is held (in flight, in a branch, waiting out a redelivery
  // delay, being moved).
  virtual bool is_held(std::uint32_t queue_id, const storage::entry_key& key) const = 0;
  // Releases the queue's message groups (all, or one): their next messages go to whichever
  // consumer the usual rule picks. How many were released; nullopt when the queue is gone.
  virtual std::optional<std::size_t> reset_groups(std::uint32_t queue_id, const std::optional<std::string>& group) = 0;
  virtual const address_settings& settings_for(const std::string& address) = 0;
  // The durable subscriptions `name` of client-id `client`: the one of `*user`, or with no user
  // given, those of every user.
  virtual std::vector<queue_view> durable_subscriptions(const std::string& client, const std::string& name,
                                                        const std::string* user) const = 0;

  // The connections by id from `from_id` on, while `each` returns true.
  virtual void for_each_connection(std::uint64_t from_id,
                                   const std::function<bool(const connection_view&)>& each) const = 0;
  // The consumers' subscriptions by connection id from `from_connection` on, then by subscription
  // id (for `from_connection` itself, those after `after` when given), while `each` returns true.
  virtual void for_each_subscription(std::uint64_t from_connection, const std::optional<std::string>& after,
                                     const std::function<bool(const subscription_view&)>& each) const = 0;

  // Purges (`destination` empty) or moves to `destination` (as resolve_move_destination took it;
  // `filter`: only messages whose _HQ_ORIG_ADDRESS it names) the messages of queue `queue_id` that
  // were there when it began, slice by slice; `done` gets the report once it is over. One runs at a
  // time per queue: check sweep_running first.
  virtual void start_sweep(std::uint32_t queue_id, std::string destination, std::optional<std::string> filter,
                           std::function<void(const sweep_report&)> done) = 0;
  // The purge or move running over the queue, if one is.
  virtual std::optional<sweep_report> sweep_running(std::uint32_t queue_id) const = 0;
  // The queues a move to `destination` (/queue/NAME, created if missing, or /topic/NAME) reaches
  // now; nullopt when it is neither form.
  virtual std::optional<std::size_t> resolve_move_destination(const std::string& destination) = 0;
  // Ends the durable subscription whose key is `key` (no consumer, not being ended): its record
  // and messages go; `done` gets the store's answer.
  virtual void end_durable_subscription(const std::string& key, std::function<void(const storage::status&)> done) = 0;

  // `escrow scheduled`: the scheduled messages of queue `queue_id` in due order, after `after`,
  // at most `limit`; and delivering now (`deliver`) or deleting those of `ids` (empty: the first
  // `limit`), `done` getting the store's answer and how many it handled.
  virtual std::vector<scheduled_view> scheduled(std::uint32_t queue_id, std::optional<scheduled_cursor> after,
                                                std::size_t limit) = 0;
  virtual void end_schedule(std::uint32_t queue_id, bool deliver, std::vector<std::uint64_t> ids, std::size_t limit,
                            std::function<void(const storage::status&, std::size_t)> done) = 0;

  virtual operator_target owner_for_operator(const xid& x, const std::string* user) const = 0;
  // Forgets the heuristically completed branch `x` of `user` for connection `connection_id`, or
  // decides the prepared one (commit or roll back); `done` gets the XA code once it is stored.
  virtual void xa_forget(std::uint64_t connection_id, const xid& x, const std::string& user,
                         std::function<void(int)> done) = 0;
  virtual void xa_heuristic(const xid& x, bool commit, const std::string& user, std::function<void(int)> done) = 0;

  // The backup thread (one at a time; joined before the store closes): whether one runs, and
  // running `work` on it. What `work` returns runs on the core strand when it is over.
  virtual bool backup_running() const = 0;
  virtual void run_backup(std::function<std::function<void()>()> work) = 0;
};

// Milliseconds since the epoch, the unit of `expires` and `timestamp` (core/broker.cpp).
std::uint64_t now_ms();

// A destination from what an operator typed: "orders" is /queue/orders (`escrow move`'s to and
// filter).
inline std::string destination_named(const std::string& name) {
  if (name.rfind("/queue/", 0) == 0 || name.rfind("/topic/", 0) == 0) return name;
  return "/queue/" + name;
}

// Turns one ADMIN frame of connection `connection_id` into its answer, through `core` (broker/admin
// installs its handler with broker::use_admin).
using admin_handler =
    std::function<void(admin_core& core, std::uint64_t connection_id, const frame& f, admin_done done)>;

}  // namespace escrow::broker
