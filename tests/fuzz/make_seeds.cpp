// Writes the binary and framed seeds of the fuzz corpus (tests/fuzz/corpus/<target>/), made with
// the real encoders so that they are valid inputs the fuzzers mutate from:
//
//   build-fuzz/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
//
// The configuration seeds (corpus/config/*.toml) are written by hand. Rerun after a layout change;
// the files are small and committed.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "escrow/frame.h"
#include "escrow/rm/record.h"
#include "escrow/storage/batch.h"
#include "escrow/storage/schema.h"
#include "escrow/xid.h"

namespace fs = std::filesystem;
using namespace escrow;

namespace {

fs::path root;

void write(const std::string& target, const std::string& name, std::string_view bytes) {
  fs::create_directories(root / target);
  std::ofstream out(root / target / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "fuzz_make_seeds: cannot write %s\n", (root / target / name).c_str());
    std::exit(1);
  }
}

// fuzz_frame input: mode byte (version, limits), split seed byte, then the stream.
void frame_seed(const std::string& name, std::uint8_t mode, std::uint8_t split, std::string_view stream) {
  std::string bytes;
  bytes.push_back(static_cast<char>(mode));
  bytes.push_back(static_cast<char>(split));
  bytes.append(stream);
  write("frame", name, bytes);
}

storage::message_record sample_message(bool with_expiry) {
  storage::message_record r;
  r.priority = 7;
  r.expires = with_expiry ? 1893456000000 : 0;
  r.timestamp = 1700000000000;
  r.destination = "/queue/orders";
  r.headers = {{"content-type", "text/plain"}, {"correlation-id", "c:1\\2"}};
  r.body = "hello";
  return r;
}

void frames() {
  using namespace std::string_view_literals;
  frame_seed("connect", 0, 0, "CONNECT\naccept-version:1.0,1.1,1.2\nhost:localhost\nlogin:a\npasscode:p:w\\x\nheart-beat:1000,1000\n\n\0"sv);
  frame_seed("send-escapes", 0, 3, "SEND\ndestination:/queue/a\\cb\nx\\\\y:line\\none\\r\nreceipt:r1\n\nbody\0\n\n"sv);
  frame_seed("send-content-length", 0, 1, "SEND\r\ndestination:/queue/a\r\ncontent-length:5\r\n\r\na\0b\0c\0"sv);
  frame_seed("two-frames", 1, 7, "SUBSCRIBE\nid:0\ndestination:/topic/t\nack:client-individual\n\n\0\nACK\nid:12\n\n\0"sv);
  frame_seed("xa", 0, 2, "XA-START\nxid:1:0a0b:01\nflags:TMJOIN|TMRESUME\nreceipt:x\n\n\0XA-RECOVER\nflags:TMSTARTRSCAN|TMENDRSCAN\ncount:10\n\n\0"sv);
  frame_seed("v10-small-limits", 6, 0, "SEND\ndestination:/queue/\\q\ncontent-length:2\n\nhi\0DISCONNECT\nreceipt:bye\n\n\0"sv);
  frame_seed("bad-escape", 0, 5, "SEND\ndestination:/queue/a\\t\n\n\0"sv);
  frame_seed("tiny-limits", 8, 0, "SEND\ndestination:/queue/a-long-name-beyond-limits\n\n\0"sv);
}

void xids() {
  write("xid", "text", "1:0a0B:ff");
  write("xid", "text-no-bqual", "-42:00:");
  write("xid", "flags", "TMSTARTRSCAN|TMENDRSCAN");
  write("xid", "result", "XAER_NOTA");
  write("xid", "key", xid(7, std::string("gtrid\0x", 7), "bq").encode());
}

void schema() {
  storage::entry_key key{3, 7, 42};
  write("schema", "entry-key", key.encode());
  write("schema", "expiry-key", storage::expiry_key(1893456000000, key));
  write("schema", "message-key", storage::message_key(42));
  storage::queue_record q{5, storage::queue_record::kind::durable_subscription, "prices.eu"};
  write("schema", "queue-record", q.encode());
  write("schema", "message-record", sample_message(true).encode());
  write("schema", "inline-entry", storage::encode_delivery_count(2) + sample_message(false).encode());
  write("schema", "delivery-count", storage::encode_delivery_count(9));
}

void batches() {
  storage::batch b;
  storage::put_message(b, 42, sample_message(true), {{3, 7, 42}});
  write("batch", "put-inline", b.rep());
  storage::batch shared;
  storage::put_message(shared, 43, sample_message(false), {{3, 4, 43}, {4, 4, 43}});
  shared.put(storage::table::meta, storage::kNextMessageIdKey, storage::message_key(44));
  write("batch", "put-shared", shared.rep());
  storage::batch changes;
  changes.set_delivery_count(storage::entry_key{3, 4, 43}.encode(), 2);
  changes.remove_entry(storage::entry_key{4, 4, 43}.encode());
  changes.release_message(storage::message_key(43));
  changes.erase(storage::table::queues, "q/orders");
  write("batch", "changes", changes.rep());
}

void branch_records() {
  rm::branch b;
  b.state = rm::branch_state::prepared;
  b.created_ms = 1700000000000;
  auto m = std::make_shared<storage::message>();
  m->id = 42;
  m->record = sample_message(true);
  b.work.sends.push_back({m, {{{3, 7, 42}, true}, {{9, 7, 42}, false}}});
  b.work.consumed.push_back({{3, 4, 17}, 1, true, false, nullptr});
  b.work.consumed.push_back({{3, 4, 18}, 0, true, true, nullptr});
  write("branch_record", "prepared", rm::encode_record(b));
  rm::branch h;
  h.state = rm::branch_state::heuristic_mixed;
  h.created_ms = 1;
  write("branch_record", "heuristic-empty", rm::encode_record(h));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS-DIR (tests/fuzz/corpus)\n");
    return 2;
  }
  root = argv[1];
  frames();
  xids();
  schema();
  batches();
  branch_records();
  return 0;
}
