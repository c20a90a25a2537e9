// Fuzz target: the decoders of the store's keys and values (storage/schema.cpp): entry keys,
// message keys, expiry index keys, queue records, message records (alone and inline in an entry)
// and delivery counts. Every decoder gets the whole input, as a corrupted table would give it.
// Properties checked:
//  - fixed-size keys that decode encode back to the same bytes;
//  - records that decode survive encode -> decode unchanged, and their encoding is canonical
//    (encoding the decoded record again gives the same bytes);
//  - peek_expires agrees with a full decode; decode_inline_message is the record after 4 bytes;
//  - printable_key (how an error names a key) prints only printable characters.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "check.h"
#include "escrow/storage/schema.h"

using namespace escrow::storage;

namespace {

bool same(const message_record& a, const message_record& b) {
  return a.persistent == b.persistent && a.priority == b.priority && a.expires == b.expires &&
         a.timestamp == b.timestamp && a.destination == b.destination && a.headers == b.headers && a.body == b.body;
}

void check_message(std::string_view bytes) {
  message_record r;
  if (!message_record::decode(bytes, r)) return;
  FUZZ_CHECK(r.priority <= 9);
  FUZZ_CHECK(peek_expires(bytes) == r.expires);
  std::string encoded = r.encode();
  message_record again;
  FUZZ_CHECK(message_record::decode(encoded, again));
  FUZZ_CHECK(same(r, again));
  FUZZ_CHECK(again.encode() == encoded);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  entry_key key;
  if (entry_key::decode(in, key)) {
    FUZZ_CHECK(key.priority <= 9);
    FUZZ_CHECK(key.encode() == in);
  }
  std::uint64_t id = 0;
  if (parse_message_key(in, id)) FUZZ_CHECK(message_key(id) == in);
  std::uint64_t expires = 0;
  entry_key expiring;
  if (parse_expiry_key(in, expires, expiring)) FUZZ_CHECK(expiry_key(expires, expiring) == in);

  queue_record q;
  if (queue_record::decode(in, q)) {
    queue_record again;
    FUZZ_CHECK(queue_record::decode(q.encode(), again));
    FUZZ_CHECK(again.id == q.id && again.type == q.type && again.topic == q.topic);
  }

  check_message(in);
  message_record inline_record, direct;
  bool inline_ok = decode_inline_message(in, inline_record);
  FUZZ_CHECK(inline_ok == (in.size() > 4 && message_record::decode(in.substr(4), direct)));
  if (inline_ok) FUZZ_CHECK(same(inline_record, direct));
  (void)decode_delivery_count(in);
  // How a corrupt record's key is named in messages: text or hex, never the raw bytes.
  std::string shown = printable_key(in);
  for (char c : shown) FUZZ_CHECK(c >= 0x20 && c < 0x7f);
  return 0;
}
