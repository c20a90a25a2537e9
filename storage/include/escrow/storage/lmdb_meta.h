// The two meta pages at the start of data.mdb, read and, at start after a crash, set back by one
// commit. This is the one place that knows LMDB's file format (LMDB 0.9, data version 1: a
// 16-byte page header, then MDB_meta, whose last field is the id of the transaction that wrote
// it; LMDB opens the meta page with the higher id). Why the store may go back one commit, and why
// that one is always whole: docs/storage.md, "The commit log".
#pragma once

#include <cstdint>
#include <string>

#include "escrow/storage/status.h"

namespace escrow::storage {

struct lmdb_metas {
  std::uint64_t latest_txnid = 0;  // the transaction LMDB would open at
  std::uint64_t other_txnid = 0;   // the one before it, in the other meta page
  int latest_page = 0;             // 0 or 1
  std::uint32_t page_size = 0;
};

// Reads both meta pages of `data_file`. corrupt when either is not an LMDB meta page.
status read_lmdb_metas(const std::string& data_file, lmdb_metas& out);

// Makes LMDB open at the other meta page (the commit before the latest) by clearing the latest
// page's transaction id, then syncs the file. The next commit writes that page again.
status discard_latest_lmdb_commit(const std::string& data_file, const lmdb_metas& metas);

}  // namespace escrow::storage
