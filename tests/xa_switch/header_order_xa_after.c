/* header_order_xa.inc in C with ORDER 2 (escrow/xa.h, then the TM's xa.h): see there. */
#define ORDER 2
#define HEADER_ORDER_CHECK header_order_xa_after_c
#define HEADER_ORDER_LAYOUT header_order_xa_after_c_layout
#include "header_order_xa.inc"
