// A TM's xa.h first, then Escrow's C++ headers that carry the XA declarations themselves
// (escrow/xid.h includes escrow/xa.h): escrow/xa.h then defines nothing, and escrow::xid converts
// to and from the TM's XID.
#include "xa.h"  // the TM's, first

#include "escrow/xa.h"
#include "escrow/xa_switch.h"
#include "escrow/xid.h"

int header_order_escrow_xa_cpp() {
  XID c = escrow::xid(7, "gtrid", "b").to_c();
  if (c.formatID != 7 || c.gtrid_length != 5 || c.bqual_length != 1) return 1;
  auto back = escrow::xid::from_c(c);
  if (!back || back->gtrid() != "gtrid") return 2;
  return XA_RBCOMMFAIL == 101 && XAER_ASYNC == -2 ? 0 : 3;
}
