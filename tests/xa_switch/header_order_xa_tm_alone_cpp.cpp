// header_order_xa.inc in C++ with ORDER 4 (the TM's xa.h alone: the reference): see there.
#define ORDER 4
#define HEADER_ORDER_CHECK header_order_xa_tm_alone_cpp
#define HEADER_ORDER_LAYOUT header_order_xa_tm_alone_cpp_layout
#include "header_order_xa.inc"
