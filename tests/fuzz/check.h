// Shared by the fuzz targets: CHECK(condition) aborts with the file, line and condition when a
// property does not hold, so libFuzzer records the input as a crash (assert() would vanish under
// NDEBUG builds).
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition)                                                                  \
  do {                                                                                         \
    if (!(condition)) {                                                                        \
      std::fprintf(stderr, "%s:%d: property does not hold: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)
