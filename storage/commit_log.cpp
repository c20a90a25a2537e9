// The commit log's file format: control blocks, records, the ring (commit_log.h).
#include "escrow/storage/commit_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "escrow/storage/coding.h"

namespace escrow::storage {
namespace {

constexpr std::uint32_t kControlMagic = 0x45534c43;  // "ESLC"
constexpr std::uint32_t kRecordMagic = 0x45534c52;   // "ESLR"
constexpr std::uint64_t kControlSlot = 4096;         // bytes of each control block slot
constexpr std::uint64_t kRingStart = 2 * kControlSlot;
constexpr std::size_t kHeaderSize = 32;
constexpr std::size_t kMetaSize = 152;     // an LMDB meta page's header and MDB_meta (lmdb_meta.h)
constexpr std::size_t kControlSize = 68 + kMetaSize;  // the encoded control block, checksum included
constexpr std::uint64_t kGrowStep = 4ull << 20;  // the ring is zero-filled ahead in steps of this
constexpr std::uint16_t kGroupRecord = 1;
constexpr std::uint16_t kWrapRecord = 2;

std::uint32_t crc_of(std::uint32_t crc, std::string_view bytes) {
  if (bytes.empty()) return crc;  // zlib answers a null buffer with the initial value, not `crc`
  return static_cast<std::uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

void put_u16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xff));
}

// 0 or an errno: the whole of `bytes` written at `offset`.
int write_all(int fd, std::string_view bytes, std::uint64_t offset) {
  while (!bytes.empty()) {
    ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return 0;
}

// Reads exactly `size` bytes at `offset`; false when the file is shorter or the read fails.
bool read_exact(int fd, std::string& out, std::size_t size, std::uint64_t offset) {
  out.resize(size);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::string encode_control(const commit_log::control& c) {
  std::string out;
  put_u32(out, kControlMagic);
  put_u32(out, kLogFormatVersion);
  for (std::uint64_t v : {c.sequence, c.salt, c.checkpoint, c.data_file, c.store_id, c.first_lsn, c.capacity})
    put_u64(out, v);
  std::string meta = c.checkpoint_meta;
  meta.resize(kMetaSize, '\0');
  out += meta;
  put_u32(out, crc_of(0, out));
  return out;
}

enum class control_read { valid, blank, invalid, other_version };

control_read decode_control(std::string_view in, commit_log::control& c, std::uint32_t& version) {
  if (std::all_of(in.begin(), in.end(), [](char ch) { return ch == 0; })) return control_read::blank;
  std::string_view body = in.substr(0, kControlSize - 4), rest = in.substr(kControlSize - 4);
  std::uint32_t magic = 0, crc = 0;
  std::string_view p = body;
  if (!get_u32(p, magic) || magic != kControlMagic || !get_u32(p, version)) return control_read::invalid;
  // Another version may lay out the rest differently: its number is all that is read of it.
  if (version != kLogFormatVersion) return control_read::other_version;
  if (!get_u32(rest, crc) || crc != crc_of(0, body)) return control_read::invalid;
  for (std::uint64_t* v : {&c.sequence, &c.salt, &c.checkpoint, &c.data_file, &c.store_id, &c.first_lsn, &c.capacity})
    if (!get_u64(p, *v)) return control_read::invalid;
  if (p.size() != kMetaSize) return control_read::invalid;
  c.checkpoint_meta.assign(p);
  return c.capacity >= 4 * kHeaderSize ? control_read::valid : control_read::invalid;
}

std::string record_header(std::uint16_t kind, std::uint64_t salt, std::uint64_t lsn, std::string_view payload) {
  std::string tail;  // everything the checksum covers before the payload
  put_u32(tail, static_cast<std::uint32_t>(payload.size()));
  put_u16(tail, kind);
  put_u16(tail, 0);
  put_u64(tail, salt);
  put_u64(tail, lsn);
  std::string header;
  put_u32(header, kRecordMagic);
  put_u32(header, crc_of(crc_of(0, tail), payload));
  return header + tail;
}

struct record_head {
  std::uint32_t crc = 0, length = 0;
  std::uint16_t kind = 0;
  std::uint64_t salt = 0, lsn = 0;
};

bool decode_header(std::string_view in, record_head& h) {
  std::uint32_t magic = 0, kind_and_pad = 0;
  if (!get_u32(in, magic) || magic != kRecordMagic) return false;
  if (!get_u32(in, h.crc) || !get_u32(in, h.length) || !get_u32(in, kind_and_pad)) return false;
  h.kind = static_cast<std::uint16_t>(kind_and_pad >> 16);
  return get_u64(in, h.salt) && get_u64(in, h.lsn);
}

std::uint64_t random_salt() {
  std::random_device device;
  std::uint64_t salt = 0;
  while (salt == 0) salt = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  return salt;
}

}  // namespace

std::string log_position::encode() const {
  std::string out;
  put_u64(out, salt);
  put_u64(out, lsn);
  put_u64(out, end);
  return out;
}

bool log_position::decode(std::string_view bytes, log_position& out) {
  return bytes.size() == 24 && get_u64(bytes, out.salt) && get_u64(bytes, out.lsn) && get_u64(bytes, out.end);
}

commit_log::~commit_log() {
  if (fd_ >= 0) ::close(fd_);
  if (control_fd_ >= 0) ::close(control_fd_);
}

status commit_log::open(const std::string& dir, std::unique_ptr<commit_log>& out) {
  std::unique_ptr<commit_log> log(new commit_log());
  log->path_ = dir + "/log";
  log->fd_ = ::open(log->path_.c_str(), O_RDWR | O_CLOEXEC);
  if (log->fd_ < 0) {
    if (errno == ENOENT) {
      out = std::move(log);
      return {};
    }
    return {status::code::io_error, "cannot open the commit log " + log->path_ + ": " + std::strerror(errno)};
  }
  log->control_fd_ = ::open(log->path_.c_str(), O_RDWR | O_CLOEXEC);
  if (log->control_fd_ < 0)
    return {status::code::io_error, "cannot open the commit log " + log->path_ + ": " + std::strerror(errno)};
  bool any_written = false;
  for (int slot = 0; slot < 2; ++slot) {
    std::string bytes;
    control c;
    std::uint32_t version = 0;
    control_read r = read_exact(log->fd_, bytes, kControlSize, slot * kControlSlot)
                         ? decode_control(bytes, c, version)
                         : control_read::blank;
    if (r == control_read::other_version)
      return {status::code::bad_schema, "the commit log " + log->path_ + " has format version " +
                                            std::to_string(version) + " but this escrowd understands version " +
                                            std::to_string(kLogFormatVersion) + "; run the escrowd release that wrote it"};
    any_written = any_written || r != control_read::blank;
    if (r == control_read::valid && (!log->found_ || c.sequence > log->control_.sequence)) {
      log->found_ = true;
      log->control_ = c;
      log->control_slot_ = slot;
    }
  }
  if (!log->found_ && any_written)
    return {status::code::corrupt,
            "the commit log " + log->path_ + " has no readable control block. Without it escrowd cannot tell which "
            "LMDB commit is whole on disk: check the disk (dmesg), keep a copy of the data directory, and restore "
            "the last backup; moving the file away starts the store as LMDB left it, which after a power cut may "
            "not be consistent (run escrow check)"};
  struct stat st {};
  if (::fstat(log->fd_, &st) == 0 && static_cast<std::uint64_t>(st.st_size) > kRingStart)
    log->file_ring_ = std::min<std::uint64_t>(static_cast<std::uint64_t>(st.st_size) - kRingStart,
                                              log->control_.capacity);
  out = std::move(log);
  return {};
}

commit_log::control commit_log::current() const {
  std::lock_guard lock(control_mutex_);
  return control_;
}

status commit_log::replay(const log_position& from, const record_visitor& visit) const {
  if (!found_) return {};
  const std::uint64_t cap = control_.capacity;
  std::uint64_t v = 0, lsn = control_.first_lsn;
  if (from.salt == control_.salt) {
    v = from.end;
    lsn = from.lsn + 1;
  }
  std::string header, payload;
  for (;;) {
    std::uint64_t room = cap - v % cap;
    if (room < kHeaderSize) {
      v += room;
      continue;
    }
    record_head h;
    if (!read_exact(fd_, header, kHeaderSize, kRingStart + v % cap) || !decode_header(header, h)) return {};
    if (h.salt != control_.salt || h.lsn != lsn) return {};
    if (h.kind == kWrapRecord) {
      if (h.length != 0 || h.crc != crc_of(0, std::string_view(header).substr(8))) return {};
      v += room;
      continue;
    }
    if (h.kind != kGroupRecord || kHeaderSize + h.length > room) return {};
    if (!read_exact(fd_, payload, h.length, kRingStart + v % cap + kHeaderSize)) return {};
    if (h.crc != crc_of(crc_of(0, std::string_view(header).substr(8)), payload)) return {};
    v += kHeaderSize + h.length;
    if (status s = visit(log_position{control_.salt, lsn, v}, payload); !s.ok()) return s;
    ++lsn;
  }
}

status commit_log::write_control(const control& next) {
  std::string block = encode_control(next);
  block.resize(kControlSlot, '\0');
  int slot = found_ ? 1 - control_slot_ : 0;
  int rc = write_all(control_fd_, block, slot * kControlSlot);
  if (rc == 0 && ::fdatasync(control_fd_) != 0) rc = errno;
  if (rc != 0)
    return {status::code::io_error, "cannot write the control block of the commit log " + path_ + ": " + std::strerror(rc)};
  control_ = next;
  control_slot_ = slot;
  found_ = true;
  return {};
}

status commit_log::start_generation(std::uint64_t checkpoint, std::string_view meta, std::uint64_t data_file,
                                    std::uint64_t store_id, std::uint64_t capacity) {
  bool created = false;
  if (fd_ < 0) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) return {status::code::io_error, "cannot create the commit log " + path_ + ": " + std::strerror(errno)};
    control_fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    if (control_fd_ < 0) return {status::code::io_error, "cannot open the commit log " + path_ + ": " + std::strerror(errno)};
    created = true;
  }
  capacity = std::max<std::uint64_t>(capacity, 4 * kGrowStep);
  std::lock_guard lock(control_mutex_);
  control next = control_;
  next.sequence = control_.sequence + 1;
  next.salt = random_salt();
  next.checkpoint = checkpoint;
  next.checkpoint_meta.assign(meta);
  next.data_file = data_file;
  next.store_id = store_id;
  next.first_lsn = 1;
  next.capacity = capacity;
  if (created) {
    // Both slots exist (blank) before the first is written, so a crash leaves a file open() reads.
    std::string blank(kRingStart, '\0');
    if (int rc = write_all(fd_, blank, 0); rc != 0)
      return {status::code::io_error, "cannot write the commit log " + path_ + ": " + std::strerror(rc)};
  }
  if (status s = allocate(capacity); !s.ok()) return s;
  if (status s = write_control(next); !s.ok()) return s;
  // A smaller ring only once the new generation is recorded: until then, a crash must still find
  // every record of the old one.
  if (file_ring_ > capacity) {
    if (::ftruncate(fd_, static_cast<off_t>(kRingStart + capacity)) != 0)
      return {status::code::io_error, "cannot shrink the commit log " + path_ + ": " + std::strerror(errno)};
    file_ring_ = capacity;
  }
  // Blocks allocated past the ring's end (a larger storage.log-size before, a fallocate that ran
  // out of disk half way) go back to the file system. Where punching holes is not supported they stay.
  (void)::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(kRingStart + capacity),
                    static_cast<off_t>(1) << 50);
  head_ = 0;
  keep_from_ = 0;
  next_lsn_ = next.first_lsn;
  salt_ = next.salt;
  capacity_ = next.capacity;
  // The file's directory entry is the store's to sync (store.cpp, sync_directories), at every start.
  return {};
}

// Every block of the ring exists from the start (fallocate, the file's size unchanged: reserve()
// zero-fills ahead of the head on the first lap, so that records overwrite written blocks), so
// the log never needs disk space after escrowd started: a full disk cannot stop it. A file system
// without fallocate gets the whole ring zero-filled now instead.
status commit_log::allocate(std::uint64_t capacity) {
  if (capacity <= file_ring_) return {};
  const std::uint64_t from = kRingStart + file_ring_, length = capacity - file_ring_;
  int rc = ::fallocate(fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(from), static_cast<off_t>(length)) == 0 ? 0 : errno;
  if (rc == EOPNOTSUPP) {
    static const std::string zeros(1 << 20, '\0');
    for (rc = 0; rc == 0 && file_ring_ < capacity;) {
      std::uint64_t n = std::min<std::uint64_t>(zeros.size(), capacity - file_ring_);
      rc = write_all(fd_, std::string_view(zeros).substr(0, n), kRingStart + file_ring_);
      if (rc == 0) file_ring_ += n;
    }
  }
  if (rc == ENOSPC || rc == EDQUOT)
    return {status::code::store_full, "the commit log " + path_ + " needs " + std::to_string(length >> 20) +
                                          " MiB more of the disk (storage.log-size is " + std::to_string(capacity >> 20) +
                                          " MiB) and the disk has less free: free disk space or lower storage.log-size"};
  if (rc != 0) return {status::code::io_error, "cannot allocate the commit log " + path_ + ": " + std::strerror(rc)};
  return {};
}

status commit_log::set_checkpoint(std::uint64_t checkpoint, std::string_view meta) {
  std::lock_guard lock(control_mutex_);
  control next = control_;
  next.sequence = control_.sequence + 1;
  next.checkpoint = checkpoint;
  next.checkpoint_meta.assign(meta);
  return write_control(next);
}

std::uint64_t commit_log::disk_bytes() const {
  struct stat st {};
  return fd_ >= 0 && ::fstat(fd_, &st) == 0 ? static_cast<std::uint64_t>(st.st_blocks) * 512 : 0;
}

std::size_t commit_log::max_payload() const { return capacity_ / 4 - kHeaderSize; }

status commit_log::reserve(std::size_t payload_size, log_slot& slot, bool& behind) {
  const std::uint64_t cap = capacity_;
  const std::uint64_t total = kHeaderSize + payload_size;
  std::uint64_t v = head_;
  std::uint64_t wrap_at = UINT64_MAX;
  if (v % cap + total > cap) {
    if (cap - v % cap >= kHeaderSize) wrap_at = v;
    v += cap - v % cap;
  }
  behind = v + total > keep_from_ + cap;  // it would overwrite records after the checkpoint
  if (behind) return {};
  // The ring's first writing: zero it ahead of the head, so that records overwrite written blocks
  // (cheaper to sync than blocks the file system must allocate, and no full disk later).
  std::uint64_t needed = std::max(v % cap + total, wrap_at == UINT64_MAX ? 0 : wrap_at % cap + kHeaderSize);
  if (needed > file_ring_) {
    std::uint64_t target = std::min(cap, (needed + kGrowStep - 1) / kGrowStep * kGrowStep);
    static const std::string zeros(1 << 20, '\0');
    while (file_ring_ < target) {
      std::uint64_t n = std::min<std::uint64_t>(zeros.size(), target - file_ring_);
      if (int rc = write_all(fd_, std::string_view(zeros).substr(0, n), kRingStart + file_ring_); rc != 0)
        return {rc == ENOSPC || rc == EDQUOT ? status::code::store_full : status::code::io_error,
                "cannot grow the commit log " + path_ + ": " + std::strerror(rc) +
                    (rc == ENOSPC || rc == EDQUOT ? " (the disk is full: free disk space or consume messages)" : "")};
      file_ring_ += n;
    }
  }
  slot = log_slot{log_position{salt_, next_lsn_, v + total}, head_, wrap_at};
  head_ = v + total;
  ++next_lsn_;
  return {};
}

void commit_log::cancel(const log_slot& slot) {
  head_ = slot.head_before;
  next_lsn_ = slot.at.lsn;
}

int commit_log::write(const log_slot& slot, std::string_view payload) const {
  const std::uint64_t cap = capacity_;
  const log_position& at = slot.at;
  const std::uint64_t start = at.end - kHeaderSize - payload.size();
  if (slot.wrap_at != UINT64_MAX) {
    std::string wrap = record_header(kWrapRecord, at.salt, at.lsn, {});
    if (int rc = write_all(fd_, wrap, kRingStart + slot.wrap_at % cap); rc != 0) return rc;
  }
  std::string header = record_header(kGroupRecord, at.salt, at.lsn, payload);
  iovec parts[2] = {{header.data(), header.size()}, {const_cast<char*>(payload.data()), payload.size()}};
  std::uint64_t offset = kRingStart + start % cap;
  std::size_t left = header.size() + payload.size();
  int index = 0;
  while (left > 0) {
    ssize_t n = ::pwritev(fd_, parts + index, 2 - index, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    offset += static_cast<std::uint64_t>(n);
    left -= static_cast<std::size_t>(n);
    for (auto written = static_cast<std::size_t>(n); written > 0 && index < 2;) {
      std::size_t step = std::min(written, parts[index].iov_len);
      parts[index].iov_base = static_cast<char*>(parts[index].iov_base) + step;
      parts[index].iov_len -= step;
      written -= step;
      if (parts[index].iov_len == 0) ++index;
    }
  }
  return 0;
}

int commit_log::sync() const { return ::fdatasync(fd_) == 0 ? 0 : errno; }

int commit_log::append(const log_slot& slot, std::string_view payload) const {
  int rc = write(slot, payload);
  return rc != 0 ? rc : sync();
}

}  // namespace escrow::storage
