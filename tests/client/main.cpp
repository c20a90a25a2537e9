// The doctest main of the client library tests (tests/integration/test_client.py runs them
// against a real escrowd whose port is in ESCROW_PORT).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
