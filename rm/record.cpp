// Prepared-branch records (layout in record.h).
#include "escrow/rm/record.h"

#include <memory>

#include "escrow/storage/coding.h"

namespace escrow::rm {
namespace {

using namespace escrow::storage;

std::uint8_t state_code(branch_state s) {
  switch (s) {
    case branch_state::heuristic_committed: return 2;
    case branch_state::heuristic_rolled_back: return 3;
    case branch_state::heuristic_mixed: return 4;
    default: return 1;
  }
}

bool get_u8(std::string_view& in, std::uint8_t& v) {
  if (in.empty()) return false;
  v = static_cast<std::uint8_t>(in.front());
  in.remove_prefix(1);
  return true;
}

}  // namespace

namespace {

// Five zero bytes: where an xid's encoding has its gtrid length, which is 1 to 64, this is 0, so
// no xid's encoding starts with it (whatever its formatID).
constexpr std::string_view kOwnedPrefix{"\0\0\0\0\0", 5};

}  // namespace

std::string branch_key(const std::string& owner, const xid& id) {
  if (owner.empty()) return id.encode();
  std::string key(kOwnedPrefix);
  put_string(key, owner);
  return key + id.encode();
}

bool decode_branch_key(std::string_view key, std::string& owner, xid& id) {
  owner.clear();
  if (key.substr(0, kOwnedPrefix.size()) == kOwnedPrefix) {
    key.remove_prefix(kOwnedPrefix.size());
    std::string_view name;
    if (!get_string(key, name) || name.empty()) return false;
    owner = name;
  }
  auto x = xid::decode(key);
  if (!x) return false;
  id = *x;
  return true;
}

std::string encode_record(const branch& b) {
  std::string out;
  out.push_back(1);
  out.push_back(static_cast<char>(state_code(b.state)));
  put_u64(out, b.created_ms);
  put_varint(out, b.work.sends.size());
  for (const auto& s : b.work.sends) {
    put_u64(out, s.msg->id);
    put_string(out, s.msg->record.encode());
    put_varint(out, s.targets.size());
    for (const auto& t : s.targets) {
      put_string(out, t.key.encode());
      out.push_back(t.stored ? 1 : 0);
    }
  }
  put_varint(out, b.work.consumed.size());
  for (const auto& c : b.work.consumed) {
    put_string(out, c.key.encode());
    put_u32(out, c.delivery_count);
    out.push_back(static_cast<char>((c.stored ? 1 : 0) | (c.negative ? 2 : 0)));
  }
  return out;
}

bool decode_record(std::string_view in, branch& out) {
  std::uint8_t version = 0, state = 0;
  if (!get_u8(in, version) || version != 1 || !get_u8(in, state) || !get_u64(in, out.created_ms)) return false;
  switch (state) {
    case 1: out.state = branch_state::prepared; break;
    case 2: out.state = branch_state::heuristic_committed; break;
    case 3: out.state = branch_state::heuristic_rolled_back; break;
    case 4: out.state = branch_state::heuristic_mixed; break;
    default: return false;
  }
  out.work = {};
  std::uint64_t sends = 0;
  if (!get_varint(in, sends) || sends > in.size()) return false;
  for (std::uint64_t i = 0; i < sends; ++i) {
    auto m = std::make_shared<message>();
    std::string_view record;
    std::uint64_t targets = 0;
    if (!get_u64(in, m->id) || !get_string(in, record) || !message_record::decode(record, m->record) ||
        !get_varint(in, targets) || targets > in.size())
      return false;
    staged_send s{m, {}};
    for (std::uint64_t t = 0; t < targets; ++t) {
      std::string_view key;
      std::uint8_t stored = 0;
      send_target target;
      if (!get_string(in, key) || !entry_key::decode(key, target.key) || !get_u8(in, stored)) return false;
      target.stored = stored != 0;
      s.targets.push_back(target);
    }
    out.work.sends.push_back(std::move(s));
  }
  std::uint64_t consumed = 0;
  if (!get_varint(in, consumed) || consumed > in.size()) return false;
  for (std::uint64_t i = 0; i < consumed; ++i) {
    std::string_view key;
    std::uint8_t flags = 0;
    consumed_entry c;
    if (!get_string(in, key) || !entry_key::decode(key, c.key) || !get_u32(in, c.delivery_count) || !get_u8(in, flags))
      return false;
    c.stored = (flags & 1) != 0;
    c.negative = (flags & 2) != 0;
    out.work.consumed.push_back(std::move(c));
  }
  return in.empty();
}

}  // namespace escrow::rm
