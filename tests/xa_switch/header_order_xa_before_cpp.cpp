// header_order_xa.inc in C++ with ORDER 1 (the TM's xa.h, then escrow/xa.h): see there.
#define ORDER 1
#define HEADER_ORDER_CHECK header_order_xa_before_cpp
#define HEADER_ORDER_LAYOUT header_order_xa_before_cpp_layout
#include "header_order_xa.inc"
