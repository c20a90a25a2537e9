// header_order_cpp.inc with ORDER 1 (before): see there.
#define ORDER 1
#define HEADER_ORDER_FUNCTION header_order_before_cpp
#include "header_order_cpp.inc"
