// LMDB's meta pages (lmdb_meta.h). Offsets are those of LMDB 0.9's MDB_page and MDB_meta on a
// 64-bit machine; read_lmdb_metas checks the magic number and the version before trusting them.
#include "escrow/storage/lmdb_meta.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace escrow::storage {
namespace {

constexpr std::uint32_t kMagic = 0xBEEFC0DE;     // MDB_MAGIC
constexpr std::uint32_t kDataVersion = 1;        // MDB_DATA_VERSION
constexpr std::uint16_t kMetaPageFlag = 0x08;    // P_META
constexpr std::size_t kFlagsAt = 10;             // MDB_page.mp_flags
constexpr std::size_t kMetaAt = 16;              // PAGEHDRSZ: MDB_meta follows the page header
constexpr std::size_t kPageSizeAt = kMetaAt + 24;  // mm_dbs[FREE_DBI].md_pad, LMDB's mm_psize
constexpr std::size_t kTxnidAt = kMetaAt + 128;  // mm_txnid, after magic, version, address,
                                                 // mapsize, two MDB_db (48 bytes each), last_pg
constexpr std::size_t kLastPageAt = kTxnidAt - 8;  // mm_last_pg
constexpr std::size_t kMetaBytes = kTxnidAt + 8;

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // LMDB writes them in the machine's byte order
  return v;
}

status read_page(int fd, std::uint64_t offset, unsigned char (&page)[kMetaBytes], const std::string& file) {
  static_assert(kMetaBytes == kLmdbMetaBytes);
  ssize_t n = ::pread(fd, page, kMetaBytes, static_cast<off_t>(offset));
  if (n != static_cast<ssize_t>(kMetaBytes))
    return {n < 0 ? status::code::io_error : status::code::corrupt,
            "cannot read the meta pages of " + file + (n < 0 ? std::string(": ") + std::strerror(errno) : ": too short")};
  if ((load<std::uint16_t>(page + kFlagsAt) & kMetaPageFlag) == 0 || load<std::uint32_t>(page + kMetaAt) != kMagic ||
      load<std::uint32_t>(page + kMetaAt + 4) != kDataVersion)
    return {status::code::corrupt, file + " does not start with two LMDB meta pages (data version 1)"};
  return {};
}

}  // namespace

status read_lmdb_metas(const std::string& data_file, lmdb_metas& out) {
  int fd = ::open(data_file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {status::code::io_error, "cannot open " + data_file + ": " + std::strerror(errno)};
  unsigned char first[kMetaBytes], second[kMetaBytes];
  status s = read_page(fd, 0, first, data_file);
  if (s.ok()) {
    out.page_size = load<std::uint32_t>(first + kPageSizeAt);
    s = out.page_size >= kMetaBytes ? read_page(fd, out.page_size, second, data_file)
                                    : status(status::code::corrupt, data_file + " names an impossible page size");
  }
  ::close(fd);
  if (!s.ok()) return s;
  auto a = load<std::uint64_t>(first + kTxnidAt), b = load<std::uint64_t>(second + kTxnidAt);
  out.latest_page = b > a ? 1 : 0;  // LMDB's mdb_env_pick_meta: the higher id; page 0 on a tie
  out.latest_txnid = b > a ? b : a;
  out.latest_last_pgno = load<std::uint64_t>((b > a ? second : first) + kLastPageAt);
  out.other_txnid = b > a ? a : b;
  return {};
}

status capture_lmdb_meta(int fd, std::uint32_t page_size, std::uint64_t txnid, std::string& out) {
  unsigned char page[kMetaBytes];
  status s = read_page(fd, (txnid % 2) * page_size, page, "data.mdb");
  if (!s.ok()) return s;
  if (load<std::uint64_t>(page + kTxnidAt) != txnid)
    return {status::code::corrupt, "the meta page of LMDB commit " + std::to_string(txnid) + " was overwritten"};
  out.assign(reinterpret_cast<const char*>(page), kMetaBytes);
  return {};
}

status restore_lmdb_meta(const std::string& data_file, std::string_view meta) {
  if (meta.size() != kMetaBytes) return {status::code::corrupt, "a captured LMDB meta page has the wrong size"};
  const auto* bytes = reinterpret_cast<const unsigned char*>(meta.data());
  if ((load<std::uint16_t>(bytes + kFlagsAt) & kMetaPageFlag) == 0 || load<std::uint32_t>(bytes + kMetaAt) != kMagic)
    return {status::code::corrupt, "a captured LMDB meta page is not one"};
  lmdb_metas metas;
  if (status s = read_lmdb_metas(data_file, metas); !s.ok()) return s;
  const std::uint64_t txnid = load<std::uint64_t>(bytes + kTxnidAt);
  const std::uint64_t page = txnid % 2, other = 1 - page;
  int fd = ::open(data_file.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return {status::code::io_error, "cannot open " + data_file + ": " + std::strerror(errno)};
  int rc = ::pwrite(fd, meta.data(), meta.size(), static_cast<off_t>(page * metas.page_size)) ==
                   static_cast<ssize_t>(meta.size())
               ? 0
               : (errno ? errno : EIO);
  std::uint64_t other_txnid = other == static_cast<std::uint64_t>(metas.latest_page) ? metas.latest_txnid : metas.other_txnid;
  if (rc == 0 && other_txnid > txnid) {
    const std::uint64_t zero = 0;
    off_t at = static_cast<off_t>(other * metas.page_size + kTxnidAt);
    rc = ::pwrite(fd, &zero, sizeof zero, at) == static_cast<ssize_t>(sizeof zero) ? 0 : (errno ? errno : EIO);
  }
  if (rc == 0 && ::fdatasync(fd) != 0) rc = errno;
  ::close(fd);
  if (rc != 0)
    return {status::code::io_error, "cannot set " + data_file + " back to its last checkpoint: " + std::strerror(rc)};
  return {};
}

}  // namespace escrow::storage
