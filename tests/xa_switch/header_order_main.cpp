// xa-header-order: escrow/xa_switch.h compiles, in C and in C++, whether a transaction manager's
// spec-conforming xa.h (tm_include/xa.h, written from the XA specification's declarations) was
// included before it, after it, or not at all; and the switch works through the TM's declarations
// of xa_switch_t. escrow/xa.h likewise compiles before that xa.h (guarded by XA_H, as LIXA's is),
// after it and alone, and declares the same layouts and values (header_order_xa.inc). That it
// compiles (with -Werror) is most of the test; running it checks the rest. No broker needed.
#include <cstdio>
#include <string>
#include <vector>

extern "C" int header_order_before_c(void);
extern "C" int header_order_after_c(void);
extern "C" int header_order_none_c(void);
int header_order_before_cpp();
int header_order_after_cpp();
int header_order_none_cpp();
int header_order_escrow_xa_cpp();

// header_order_xa.inc, one pair per translation unit.
#define HEADER_ORDER_XA(name)                 \
  extern "C" int name(void);                  \
  extern "C" const long* name##_layout(int* count);
HEADER_ORDER_XA(header_order_xa_before_c)
HEADER_ORDER_XA(header_order_xa_after_c)
HEADER_ORDER_XA(header_order_xa_alone_c)
HEADER_ORDER_XA(header_order_xa_tm_alone_c)
HEADER_ORDER_XA(header_order_xa_before_cpp)
HEADER_ORDER_XA(header_order_xa_after_cpp)
HEADER_ORDER_XA(header_order_xa_alone_cpp)
HEADER_ORDER_XA(header_order_xa_tm_alone_cpp)

namespace {

std::vector<long> layout(const long* (*get)(int*)) {
  int n = 0;
  const long* p = get(&n);
  return {p, p + n};
}

// The declarations of a translation unit as numbers, against those of the TM's xa.h alone in C:
// 0 if every size, offset and value is the same, else 100 + the first index that differs.
int same_layout(const long* (*get)(int*)) {
  auto reference = layout(header_order_xa_tm_alone_c_layout), mine = layout(get);
  if (reference.size() != mine.size()) return 99;
  for (std::size_t i = 0; i < mine.size(); ++i)
    if (mine[i] != reference[i]) return 100 + static_cast<int>(i);
  return 0;
}

template <int (*check)(), const long* (*get)(int*)>
int check_and_compare() {
  if (int r = check()) return r;
  return same_layout(get);
}

}  // namespace

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
      {"C: TM's xa.h, then escrow/xa.h", check_and_compare<header_order_xa_before_c, header_order_xa_before_c_layout>},
      {"C: escrow/xa.h, then TM's xa.h", check_and_compare<header_order_xa_after_c, header_order_xa_after_c_layout>},
      {"C: escrow/xa.h alone", check_and_compare<header_order_xa_alone_c, header_order_xa_alone_c_layout>},
      {"C: TM's xa.h alone", check_and_compare<header_order_xa_tm_alone_c, header_order_xa_tm_alone_c_layout>},
      {"C++: TM's xa.h, then escrow/xa.h", check_and_compare<header_order_xa_before_cpp, header_order_xa_before_cpp_layout>},
      {"C++: escrow/xa.h, then TM's xa.h", check_and_compare<header_order_xa_after_cpp, header_order_xa_after_cpp_layout>},
      {"C++: escrow/xa.h alone", check_and_compare<header_order_xa_alone_cpp, header_order_xa_alone_cpp_layout>},
      {"C++: TM's xa.h alone", check_and_compare<header_order_xa_tm_alone_cpp, header_order_xa_tm_alone_cpp_layout>},
  };
  int failures = 0;
  for (const auto& c : checks) {
    int r = c.check();
    std::printf("%s %s%s\n", r == 0 ? "ok" : "FAIL", c.name, r == 0 ? "" : (" (check " + std::to_string(r) + ")").c_str());
    failures += r != 0;
  }
  return failures == 0 ? 0 : 1;
}
