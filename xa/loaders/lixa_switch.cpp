// switch_escrow_stareg.so: the switch file LIXA loads for Escrow. LIXA's profiles name a switch
// file per resource manager (lixac_conf.xml: <rsrmgr switch_file="..."/>); it dlopen()s it and
// calls lixa_get_xa_switch() for the switch. This one returns libescrow's escrow_xa_switch (static
// registration, hence "stareg" in LIXA's naming), so the switch LIXA drives and the
// escrow_xa_connection() the application calls are the same library and the same thread-local
// connections. Installed in LIBDIR/escrow; `pkg-config --variable=lixa_switch_file escrow` names
// it. docs/xa.md, "Loaders".
#include "escrow/xa.h"
#include "escrow/xa_switch.h"

extern "C" __attribute__((visibility("default"))) struct xa_switch_t* lixa_get_xa_switch(void) {
  return &escrow_xa_switch;
}
