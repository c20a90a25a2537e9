/* The TM's xa.h first, then escrow/xa_switch.h, in C (most transaction managers are written in
 * C): it must compile with -Werror, and the switch must work through the TM's declarations.
 * tests/xa_switch/tm_include/xa.h is the TM's xa.h; header_order_main.cpp runs the check. */
#include "xa.h" /* the TM's, first */
#include "escrow/xa_switch.h"

#include <string.h>

int header_order_before_c(void) {
  char bad[] = "hots=1";
  if (strcmp(escrow_xa_switch.name, "escrow") != 0) return 1;
  if (escrow_xa_switch.flags != TMNOMIGRATE || escrow_xa_switch.version != 0) return 2;
  /* Called through the TM's declaration of the switch: a bad open string is XAER_INVAL. */
  if (escrow_xa_switch.xa_open_entry(bad, 1, TMNOFLAGS) != XAER_INVAL) return 3;
  if (escrow_xa_last_error()[0] == '\0') return 4;
  return 0;
}
