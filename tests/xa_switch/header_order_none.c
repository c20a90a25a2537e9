/* escrow/xa_switch.h alone, without any xa.h, in C (most transaction managers are written in
 * C): it must compile with -Werror, and the switch must work through the TM's declarations.
 * tests/xa_switch/tm_include/xa.h is the TM's xa.h; header_order_main.cpp runs the check. */
#include "escrow/xa_switch.h" /* and no xa.h at all */

int header_order_none_c(void) {
  /* Without an xa.h, struct xa_switch_t is incomplete: its address is all there is. */
  const void *sw = &escrow_xa_switch;
  if (sw == 0) return 1;
  if (escrow_xa_last_error() == 0) return 2;
  return 0;
}
