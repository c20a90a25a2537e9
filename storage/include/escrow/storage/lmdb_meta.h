// The two meta pages at the start of data.mdb: read, captured after a commit, and, at start after
// a crash, set back to a captured one (the last checkpoint). This is the one place that knows LMDB's file format (LMDB 0.9, data version 1: a
// 16-byte page header, then MDB_meta, whose last field is the id of the transaction that wrote
// it; LMDB opens the meta page with the higher id). Why the store may go back one commit, and why
// that one is always whole: docs/storage.md, "The commit log".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "escrow/storage/status.h"

namespace escrow::storage {

struct lmdb_metas {
  std::uint64_t latest_txnid = 0;  // the transaction LMDB would open at
  std::uint64_t other_txnid = 0;   // the one before it, in the other meta page
  int latest_page = 0;             // 0 or 1
  std::uint64_t latest_last_pgno = 0;  // the last page the latest commit uses (its mm_last_pg)
  std::uint32_t page_size = 0;
};

// Reads both meta pages of `data_file`. corrupt when either is not an LMDB meta page.
status read_lmdb_metas(const std::string& data_file, lmdb_metas& out);

// The first kLmdbMetaBytes of the meta page that LMDB's commit `txnid` wrote (page txnid mod 2),
// read through `fd` (LMDB's own, mdb_env_get_fd) before a later commit overwrites it. corrupt
// when that page does not hold that commit.
inline constexpr std::size_t kLmdbMetaBytes = 152;
status capture_lmdb_meta(int fd, std::uint32_t page_size, std::uint64_t txnid, std::string& out);

// Makes LMDB open at the commit whose meta page `meta` is (captured by capture_lmdb_meta): writes
// it back to its page and clears the transaction id of the other page when it is later, then
// syncs the file. The commit's pages must be on disk and unchanged since (the store keeps them).
status restore_lmdb_meta(const std::string& data_file, std::string_view meta);

}  // namespace escrow::storage
