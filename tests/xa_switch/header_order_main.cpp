// xa-header-order: escrow/xa_switch.h compiles, in C and in C++, whether a transaction manager's
// spec-conforming xa.h (tm_include/xa.h, written from the XA specification's declarations) was
// included before it, after it, or not at all; and the switch works through the TM's declarations
// of xa_switch_t. That it compiles (with -Werror) is most of the test; running it checks the rest.
// No broker needed.
#include <cstdio>
#include <string>

extern "C" int header_order_before_c(void);
extern "C" int header_order_after_c(void);
extern "C" int header_order_none_c(void);
int header_order_before_cpp();
int header_order_after_cpp();
int header_order_none_cpp();
int header_order_escrow_xa_cpp();

int main() {
  struct {
    const char* name;
    int (*check)();
  } checks[] = {
      {"C: TM's xa.h, then escrow/xa_switch.h", header_order_before_c},
      {"C: escrow/xa_switch.h, then TM's xa.h", header_order_after_c},
      {"C: escrow/xa_switch.h alone", header_order_none_c},
      {"C++: TM's xa.h, then escrow/xa_switch.h", header_order_before_cpp},
      {"C++: escrow/xa_switch.h, then TM's xa.h", header_order_after_cpp},
      {"C++: escrow/xa_switch.h alone", header_order_none_cpp},
      {"C++: TM's xa.h, then escrow/xa.h and escrow/xid.h", header_order_escrow_xa_cpp},
  };
  int failures = 0;
  for (const auto& c : checks) {
    int r = c.check();
    std::printf("%s %s%s\n", r == 0 ? "ok" : "FAIL", c.name, r == 0 ? "" : (" (check " + std::to_string(r) + ")").c_str());
    failures += r != 0;
  }
  return failures == 0 ? 0 : 1;
}
