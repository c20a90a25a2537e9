// header_order_cpp.inc with ORDER 3 (none): see there.
#define ORDER 3
#define HEADER_ORDER_FUNCTION header_order_none_cpp
#include "header_order_cpp.inc"
