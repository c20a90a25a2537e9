// Duplicate detection, as Artemis does it (docs/stomp.md, "Duplicate detection"): a SEND carrying
// _AMQ_DUPL_ID whose id its address already remembers is not stored again. The ids live in the
// store, written in the batch that stores the message (or commits its transaction), so a crash
// never leaves one without the other:
//   duplicate_ids    address | id -> sequence      (is this id remembered?)
//   duplicate_order  address | ~sequence -> id     (which ids are the oldest?)
// Sequences count up per address. An id is remembered while it is among the address's last
// id-cache-size ids: its sequence is above the newest minus id-cache-size. Each new id erases the
// records that fall out of that window (a few per SEND, so a smaller id-cache-size after a reload
// is caught up with over the next SENDs; until then the window alone says what is remembered).
//
// What is only in memory (duplicates_part.h): ids claimed by batches in flight, which count as
// taken until their batch completes (a refused batch leaves its id free), and ids that prepared
// branches hold until they are decided.
//
// In a transaction the id is claimed when the transaction commits (one phase) or is prepared
// (two phases: the prepared branch holds it, its commit writes it): a taken id, or one sent twice
// in the transaction, rolls the transaction back there (XA_RBINTEGRITY).
#include <spdlog/spdlog.h>

#include <set>

#include "core.h"
#include "escrow/broker/security/names.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"
#include "escrow/xa.h"

namespace escrow::broker {
namespace {

constexpr std::string_view kIdHeader = "_AMQ_DUPL_ID";
constexpr std::string_view kQueuePrefix = "/queue/";
constexpr std::string_view kTopicPrefix = "/topic/";
// Records past the window erased by one new id: one in the steady state; more after the
// id-cache-size of an address was lowered, or when more SENDs were in flight than it holds.
constexpr std::size_t kEvictionsPerClaim = 64;

bool is_address(std::string_view destination) {
  return destination.size() > kQueuePrefix.size() &&
         (destination.rfind(kQueuePrefix, 0) == 0 || destination.rfind(kTopicPrefix, 0) == 0);
}

// The id a staged message carries: its first _AMQ_DUPL_ID header, when it could be one.
const std::string* id_in(const storage::message_record& r) {
  for (const auto& [name, value] : r.headers)
    if (name == kIdHeader)
      return !value.empty() && value.size() <= storage::kMaxDuplicateIdBytes &&
                     storage::duplicate_key_fits(r.destination, value)
                 ? &value
                 : nullptr;
  return nullptr;
}

// Every (address, id) the sends of `work` carry, in order, repeats included.
duplicate_ids ids_of(const rm::branch_work& work) {
  duplicate_ids out;
  for (const auto& s : work.sends)
    if (const std::string* id = id_in(s.msg->record)) out.emplace_back(s.msg->record.destination, *id);
  return out;
}

std::string quoted(std::string_view id) { return "'" + loggable(id) + "'"; }

void warn_read(const storage::status& s, const std::string& address) {
  spdlog::error("duplicate detection: cannot read the ids of {}: {}; the id is taken as new", loggable(address),
                s.message());
}

}  // namespace

// --- the ids in the store, and the claims in flight (duplicates_part) ---

std::uint64_t duplicates_part::newest(const storage::store& s, const std::string& address) {
  auto it = claiming.find(address);
  if (it != claiming.end()) return it->second.next_sequence - 1;
  std::uint64_t sequence = 0;
  storage::status st = s.scan(storage::table::duplicate_order, {}, storage::duplicate_address_prefix(address),
                              [&](std::string_view key, std::string_view) {
                                std::string_view a;
                                if (!storage::parse_duplicate_order_key(key, a, sequence)) sequence = 0;
                                return false;  // newest first: the first record is the one
                              });
  if (!st.ok()) warn_read(st, address);
  return sequence;
}

duplicates_part::standing duplicates_part::standing_of(const storage::store& s, const std::string& address,
                                                       const std::string& id, std::uint32_t size,
                                                       std::uint64_t& existing) {
  existing = 0;
  if (auto it = claiming.find(address); it != claiming.end() && it->second.in_flight.count(id))
    return standing::in_flight;
  std::string value;
  storage::status st = s.get(storage::table::duplicate_ids, storage::duplicate_id_key(address, id), value);
  bool found = st.ok();
  if (!found && st.which() != storage::status::code::not_found) warn_read(st, address);
  if (found && !storage::decode_duplicate_sequence(value, existing)) existing = 0;
  if (held.count({address, id})) return standing::held;
  // Remembered while among the last `size`; an older record is forgotten, not erased yet.
  return existing != 0 && existing + size > newest(s, address) ? standing::stored : standing::free;
}

void duplicates_part::claim(const storage::store& s, const std::string& address, const std::string& id,
                            std::uint32_t size, std::uint64_t existing, storage::batch& b) {
  std::uint64_t sequence = newest(s, address) + 1;
  address_claims& a = claiming[address];
  a.next_sequence = sequence + 1;
  ++a.in_flight[id];  // before evict(), which must not erase the id record this batch writes
  // Its record stored before (forgotten, or the id is a prepared branch's): its old place goes.
  if (existing != 0) b.erase(storage::table::duplicate_order, storage::duplicate_order_key(address, existing));
  if (sequence > size) evict(s, address, sequence - size, b);
  storage::put_duplicate_id(b, address, id, sequence);
}

// Erases the address's ids numbered `through` and below, as far as the store has them (a few at a
// time): their order record, and their id record unless it names a later number; an id claimed
// again by a batch in flight is left to that batch.
void duplicates_part::evict(const storage::store& s, const std::string& address, std::uint64_t through,
                            storage::batch& b) {
  const address_claims& a = claiming[address];
  std::vector<std::pair<std::uint64_t, std::string>> old;
  storage::status st = s.scan(storage::table::duplicate_order, storage::duplicate_order_key(address, through),
                              storage::duplicate_address_prefix(address), [&](std::string_view key, std::string_view id) {
                                std::string_view k;
                                std::uint64_t sequence = 0;
                                if (storage::parse_duplicate_order_key(key, k, sequence))
                                  old.emplace_back(sequence, std::string(id));
                                return old.size() < kEvictionsPerClaim;
                              });
  if (!st.ok()) warn_read(st, address);
  for (const auto& [sequence, id] : old) {
    // Claimed again by a batch in flight, which erases this place itself (or, if refused, leaves
    // the pair whole for a later eviction).
    if (a.in_flight.count(id)) continue;
    b.erase(storage::table::duplicate_order, storage::duplicate_order_key(address, sequence));
    std::string value;
    std::uint64_t stored = 0;
    std::string key = storage::duplicate_id_key(address, id);
    if (s.get(storage::table::duplicate_ids, key, value).ok() && storage::decode_duplicate_sequence(value, stored) &&
        stored == sequence)
      b.erase(storage::table::duplicate_ids, key);
  }
}

void duplicates_part::release(const std::string& address, const std::string& id) {
  auto a = claiming.find(address);
  if (a == claiming.end()) return;
  auto c = a->second.in_flight.find(id);
  if (c != a->second.in_flight.end() && --c->second == 0) a->second.in_flight.erase(c);
  // Nothing in flight: the store has the address's newest number again (a refused last batch's
  // number is handed out again).
  if (a->second.in_flight.empty()) claiming.erase(a);
}

void duplicates_part::hold(const duplicate_ids& ids, bool held_now) {
  for (const auto& key : ids) {
    if (held_now) {
      ++held[key];
      continue;
    }
    auto it = held.find(key);
    if (it != held.end() && --it->second == 0) held.erase(it);
  }
}

// --- SEND outside a transaction ---

bool broker::impl::duplicate_id_of(connection& c, const frame& f, std::optional<std::string>& id) {
  const std::string* value = f.find(kIdHeader);
  if (!value) return true;
  const std::string* destination = f.find("destination");
  if (!destination || !is_address(*destination)) return true;  // route() refuses the SEND
  if (settings_for(destination->substr(kQueuePrefix.size())).id_cache_size == 0) return true;
  if (value->empty())
    return error(c, "empty _AMQ_DUPL_ID header: give the message an id (a UUID, say), or leave the header out", &f),
           false;
  if (value->size() > storage::kMaxDuplicateIdBytes || !storage::duplicate_key_fits(*destination, *value))
    return error(c, "_AMQ_DUPL_ID of " + std::to_string(value->size()) + " bytes is too long for destination '" +
                        loggable(*destination) + "': an id and its destination take at most " +
                        std::to_string(storage::kMaxDuplicateKeyBytes) + " bytes, an id at most " +
                        std::to_string(storage::kMaxDuplicateIdBytes) + "; use a shorter id (a UUID takes 36)",
                 &f),
           false;
  id = *value;
  return true;
}

bool broker::impl::claim_send_id(const connection_ptr& c, const frame& f, const std::string& address,
                                 const std::string& id, storage::batch& b, duplicate_ids& claims) {
  std::uint32_t size = settings_for(address.substr(kQueuePrefix.size())).id_cache_size;
  std::uint64_t existing = 0;
  // A store that stopped taking writes refuses this SEND's batch anyway; what it shows of ids
  // whose groups failed is not known to be durable, so it is not taken for a duplicate.
  auto standing = store.writable() ? duplicates.standing_of(store, address, id, size, existing)
                                   : duplicates_part::standing::free;
  if (standing == duplicates_part::standing::free) {
    duplicates.claim(store, address, id, size, existing, b);
    claims.emplace_back(address, id);
    return true;
  }
  ++duplicates.refused;
  // New queues' records: nothing waits for them (the next write carries them again if refused).
  if (!b.empty())
    submit(std::move(b), [](const storage::status& s) {
      if (!s.ok()) spdlog::warn("a new queue's record was not stored: {}", s.message());
    });
  const std::string* r = f.find("receipt");
  std::optional<std::string> receipt_id = r ? std::optional<std::string>(*r) : std::nullopt;
  auto answer = [this, c, receipt_id] {
    if (receipt_id) write(*c, frame{"RECEIPT", {{"receipt-id", *receipt_id}, {"duplicate", "true"}}, {}});
  };
  if (standing != duplicates_part::standing::in_flight) {
    answer();
    return false;
  }
  // Claimed by a batch in flight: answered once that batch is done (an empty batch completes after
  // every earlier one), as a duplicate if it stored the id, else with an ERROR: nothing was stored.
  submit(storage::batch{}, [this, c, receipt_id, answer, address, id, size](const storage::status& s) {
    std::uint64_t existing = 0;
    if (s.ok() && duplicates.standing_of(store, address, id, size, existing) != duplicates_part::standing::free)
      return answer();
    frame request{"SEND", {}, {}};
    if (receipt_id) request.add("receipt", *receipt_id);
    error(*c, "message with _AMQ_DUPL_ID " + quoted(id) + " for " + address + " not stored: " +
                  (s.ok() ? std::string("the SEND that claimed the id first was refused by the store; send it again")
                          : s.message()),
          &request);
  });
  return false;
}

void broker::impl::release_duplicate_ids(const duplicate_ids& claims) {
  for (const auto& [address, id] : claims) duplicates.release(address, id);
}

// --- transactions ---

bool broker::impl::gate_duplicate_ids(rm::resource_manager::reply& r, std::function<void(int)>& done) {
  using rm::action;
  const bool prepares = r.act == action::prepare;
  const bool checks = prepares || r.act == action::commit_one_phase;
  const bool writes = r.act == action::commit_one_phase || r.act == action::commit_prepared ||
                      r.act == action::heuristic_commit;
  const bool ends_hold = r.had_record && (r.act == action::commit_prepared || r.act == action::heuristic_commit ||
                                          r.act == action::roll_back || r.act == action::heuristic_rollback);
  if (!r.target || (!checks && !writes && !ends_hold)) return true;
  duplicate_ids ids = ids_of(prepares ? r.target->work : r.work);
  if (ids.empty()) return true;

  // (A store that stopped taking writes refuses the write anyway: XAER_RMFAIL, not a duplicate.)
  if (checks && store.writable()) {
    std::set<std::pair<std::string, std::string>> seen;
    for (const auto& key : ids) {
      const auto& [address, id] = key;
      std::uint32_t size = settings_for(address.substr(kQueuePrefix.size())).id_cache_size;
      if (size == 0) continue;
      std::uint64_t existing = 0;
      bool twice = !seen.insert(key).second;
      if (!twice && duplicates.standing_of(store, address, id, size, existing) == duplicates_part::standing::free)
        continue;
      // Refused as a whole: the branch is as before the call (its work given back), then rolled back.
      ++duplicates.refused;
      rm::branch_ptr b = r.target;
      b->refusal = "message with _AMQ_DUPL_ID " + quoted(id) + " is a duplicate for " + address +
                   (twice ? " (the transaction sends it twice)" : "") +
                   ": rolled back; nothing of the transaction took effect";
      (void)transactions.rm.finish(r, storage::status{storage::status::code::failed, b->refusal});
      carry_out(transactions.rm.call(rm::xa_verb::rollback, 0, b->id, TMNOFLAGS, rm::caller{b->owner}),
                [done = std::move(done)](int) { done(XA_RBINTEGRITY); });
      return false;
    }
  }
  duplicate_ids claims;
  if (writes) {
    for (const auto& [address, id] : ids) {
      std::uint32_t size = settings_for(address.substr(kQueuePrefix.size())).id_cache_size;
      std::uint64_t existing = 0;
      // A prepared branch's ids are its own (held): nobody else claimed them meanwhile.
      if (size == 0 || duplicates.standing_of(store, address, id, size, existing) == duplicates_part::standing::in_flight)
        continue;
      duplicates.claim(store, address, id, size, existing, r.write);
      claims.emplace_back(address, id);
    }
  }
  if (prepares) duplicates.hold(ids, true);
  done = [this, done = std::move(done), prepares, ends_hold, ids = std::move(ids), claims = std::move(claims)](int code) {
    release_duplicate_ids(claims);
    bool stored = code != XAER_RMFAIL;  // what finish() answers when the store refused the write
    if ((prepares && !stored) || (ends_hold && stored)) duplicates.hold(ids, false);
    done(code);
  };
  return true;
}

void broker::impl::hold_duplicate_ids(const rm::branch& b) {
  if (b.state == rm::branch_state::prepared) duplicates.hold(ids_of(b.work), true);
}

}  // namespace escrow::broker
