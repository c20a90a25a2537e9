// Escrow through its XA switch (escrow_participant.h).
#include "escrow_participant.h"

#include <cstdio>
#include <vector>

namespace escrow::tm {

escrow_participant::escrow_participant(xa_switch_t* sw, int rmid, std::string open_string)
    : switch_(sw), rmid_(rmid), open_string_(std::move(open_string)) {}

escrow_participant::~escrow_participant() {
  switch_->xa_close_entry(open_string_.data(), rmid_, TMNOFLAGS);
}

void escrow_participant::raise(int code, const char* call, const xid* x) const {
  std::string what = std::string(call) + (x ? " " + x->to_string() : std::string()) + " on rmid " +
                     std::to_string(rmid_) + ": " + xa_result_name(code) + " (" + escrow_xa_last_error() + ")";
  if (code == XAER_RMFAIL) throw unavailable(what);
  throw failed(what);
}

void escrow_participant::reopen() {
  if (escrow_xa_connection(rmid_) != nullptr) return;
  associated_ = false;  // a dropped connection's association is gone with it
  int code = switch_->xa_open_entry(open_string_.data(), rmid_, TMNOFLAGS);
  // xa_open says XAER_RMERR when the broker cannot be reached (the only failure code the XA
  // specification gives it): a manager retries it later, as this one does.
  if (code == XAER_RMERR) throw unavailable(std::string("xa_open on rmid ") + std::to_string(rmid_) + ": XAER_RMERR (" +
                                            escrow_xa_last_error() + ")");
  if (code != XA_OK) raise(code, "xa_open", nullptr);
  ++generation_;
}

client::connection* escrow_participant::connection() const { return escrow_xa_connection(rmid_); }

void escrow_participant::start(const xid& x) {
  XID c = x.to_c();
  int code = switch_->xa_start_entry(&c, rmid_, TMNOFLAGS);
  if (code != XA_OK) raise(code, "xa_start", &x);
  associated_ = true;
}

void escrow_participant::end(const xid& x, bool success) {
  XID c = x.to_c();
  int code = switch_->xa_end_entry(&c, rmid_, success ? TMSUCCESS : TMFAIL);
  associated_ = false;  // whatever the answer, this thread is no longer associated with x
  if (code == XA_OK) return;
  if (code >= XA_RBBASE && code <= XA_RBEND && !success) return;  // asked to fail it: it failed
  raise(code, "xa_end", &x);
}

vote escrow_participant::prepare(const xid& x) {
  XID c = x.to_c();
  int code = switch_->xa_prepare_entry(&c, rmid_, TMNOFLAGS);
  if (code == XA_OK) return vote::prepared;
  if (code == XA_RDONLY) return vote::read_only;
  if ((code >= XA_RBBASE && code <= XA_RBEND) || code == XAER_NOTA) return vote::rolled_back;
  raise(code, "xa_prepare", &x);
}

void escrow_participant::heuristic(int code, const char* call, const xid& x) {
  std::fprintf(stderr, "escrow-tm: %s %s: heuristic outcome %s; forgetting the branch\n", call,
               x.to_string().c_str(), xa_result_name(code).c_str());
  XID c = x.to_c();
  int forgot = switch_->xa_forget_entry(&c, rmid_, TMNOFLAGS);
  if (forgot != XA_OK && forgot != XAER_NOTA) raise(forgot, "xa_forget", &x);
}

void escrow_participant::commit(const xid& x, bool one_phase) {
  XID c = x.to_c();
  int code = switch_->xa_commit_entry(&c, rmid_, one_phase ? TMONEPHASE : TMNOFLAGS);
  if (code == XA_OK) return;
  // Two-phase: unknown means an earlier attempt committed it before the answer was lost.
  if (code == XAER_NOTA && !one_phase) return;
  if (code == XA_HEURCOM) return heuristic(code, "xa_commit", x);
  if (code == XA_HEURRB || code == XA_HEURMIX || code == XA_HEURHAZ) {
    heuristic(code, "xa_commit", x);
    throw failed("xa_commit " + x.to_string() + ": heuristic damage " + xa_result_name(code));
  }
  raise(code, "xa_commit", &x);
}

void escrow_participant::rollback(const xid& x) {
  XID c = x.to_c();
  if (associated_) {
    int code = switch_->xa_end_entry(&c, rmid_, TMFAIL);
    associated_ = false;
    if (code == XAER_RMFAIL) raise(code, "xa_end", &x);
  }
  int code = switch_->xa_rollback_entry(&c, rmid_, TMNOFLAGS);
  if (code == XA_OK || code == XAER_NOTA || (code >= XA_RBBASE && code <= XA_RBEND)) return;
  if (code == XA_HEURRB) return heuristic(code, "xa_rollback", x);
  if (code == XA_HEURCOM || code == XA_HEURMIX || code == XA_HEURHAZ) {
    heuristic(code, "xa_rollback", x);
    throw failed("xa_rollback " + x.to_string() + ": heuristic damage " + xa_result_name(code));
  }
  raise(code, "xa_rollback", &x);
}

std::vector<xid> escrow_participant::recover(long format_id, const std::string& prefix) {
  std::vector<xid> out;
  std::vector<XID> page(50);
  long flags = TMSTARTRSCAN;
  for (;;) {
    int n = switch_->xa_recover_entry(page.data(), static_cast<long>(page.size()), rmid_, flags);
    if (n < 0) raise(n, "xa_recover", nullptr);
    for (int i = 0; i < n; ++i) {
      auto x = xid::from_c(page[static_cast<std::size_t>(i)]);
      if (x && x->format_id() == format_id && x->gtrid().starts_with(prefix)) out.push_back(*x);
    }
    if (n < static_cast<long>(page.size())) break;
    flags = TMNOFLAGS;
  }
  // Close the scan with a call of its own, as managers do.
  int code = switch_->xa_recover_entry(nullptr, 0, rmid_, TMENDRSCAN);
  if (code < 0) raise(code, "xa_recover(TMENDRSCAN)", nullptr);
  return out;
}

}  // namespace escrow::tm
