// Boost.JSON compiled once, for the broker's answers and the `escrow` command that reads them
// (header-only mode: Debian has no libboost_json). common/meson.build: boost_json_dep.
#include <boost/json/src.hpp>
