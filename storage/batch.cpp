// Batch encoding (layout in batch.h). Pure: no disk, no LMDB.
#include "escrow/storage/batch.h"

#include "escrow/storage/coding.h"

namespace escrow::storage {

const char* table_name(table t) {
  switch (t) {
    case table::meta: return "meta";
    case table::queues: return "queues";
    case table::messages: return "messages";
    case table::message_refs: return "message_refs";
    case table::entries: return "entries";
    case table::branches: return "branches";
    case table::expiries: return "expiries";
    case table::decisions: return "decisions";
    case table::duplicate_ids: return "duplicate_ids";
    case table::duplicate_order: return "duplicate_order";
    case table::scheduled: return "scheduled";
  }
  return "unknown";
}

void batch::put(table t, std::string_view key, std::string_view value) {
  rep_.push_back(static_cast<char>(op::put));
  rep_.push_back(static_cast<char>(t));
  put_string(rep_, key);
  put_string(rep_, value);
}

std::string& batch::put_in_place(table t, std::string_view key, std::size_t size) {
  rep_.push_back(static_cast<char>(op::put));
  rep_.push_back(static_cast<char>(t));
  put_string(rep_, key);
  put_varint(rep_, size);
  rep_.reserve(rep_.size() + size);
  return rep_;
}

void batch::erase(table t, std::string_view key) {
  rep_.push_back(static_cast<char>(op::erase));
  rep_.push_back(static_cast<char>(t));
  put_string(rep_, key);
}

void batch::release_message(std::string_view message_key) {
  rep_.push_back(static_cast<char>(op::release_message));
  rep_.push_back(static_cast<char>(table::messages));
  put_string(rep_, message_key);
}

void batch::set_delivery_count(std::string_view entry_key, std::uint32_t count) {
  rep_.push_back(static_cast<char>(op::set_delivery_count));
  rep_.push_back(static_cast<char>(table::entries));
  put_string(rep_, entry_key);
  std::string value;
  put_u32(value, count);
  put_string(rep_, value);
}

void batch::remove_entry(std::string_view entry_key) {
  rep_.push_back(static_cast<char>(op::remove_entry));
  rep_.push_back(static_cast<char>(table::entries));
  put_string(rep_, entry_key);
}

void batch::promote_scheduled(std::string_view scheduled_key) {
  rep_.push_back(static_cast<char>(op::promote_scheduled));
  rep_.push_back(static_cast<char>(table::scheduled));
  put_string(rep_, scheduled_key);
}

void batch::remove_scheduled(std::string_view scheduled_key) {
  rep_.push_back(static_cast<char>(op::remove_scheduled));
  rep_.push_back(static_cast<char>(table::scheduled));
  put_string(rep_, scheduled_key);
}

bool batch::decode(std::string_view rep, const visitor& visit) {
  while (!rep.empty()) {
    if (rep.size() < 2) return false;
    auto o = static_cast<std::uint8_t>(rep[0]);
    auto t = static_cast<std::uint8_t>(rep[1]);
    rep.remove_prefix(2);
    if (o < 1 || o > 7 || t >= kTableCount) return false;
    std::string_view key, value;
    if (!get_string(rep, key)) return false;
    bool has_value = static_cast<op>(o) == op::put || static_cast<op>(o) == op::set_delivery_count;
    if (has_value && !get_string(rep, value)) return false;
    visit(static_cast<op>(o), static_cast<table>(t), key, value);
  }
  return true;
}

}  // namespace escrow::storage
