// header_order_xa.inc in C++ with ORDER 3 (escrow/xa.h alone): see there.
#define ORDER 3
#define HEADER_ORDER_CHECK header_order_xa_alone_cpp
#define HEADER_ORDER_LAYOUT header_order_xa_alone_cpp_layout
#include "header_order_xa.inc"
