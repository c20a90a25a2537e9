// Boost.JSON compiled into the `escrow` command (header-only mode: Debian has no libboost_json).
#include <boost/json/src.hpp>
