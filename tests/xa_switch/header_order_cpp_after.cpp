// header_order_cpp.inc with ORDER 2 (after): see there.
#define ORDER 2
#define HEADER_ORDER_FUNCTION header_order_after_cpp
#include "header_order_cpp.inc"
