"""The switch as transaction managers load it, from what `meson install` puts on disk and
`pkg-config` names (docs/xa.md, "Loaders"): LIXA's switch file (`lixa_get_xa_switch()` in
switch_escrow_stareg.so) and the Tuxedo-style symbol (`escrow_xa_switch` in libescrow.so.0). A
fresh Python process plays the TM: it loads the installed library with ctypes, gets the switch
both ways (the same structure), and drives it against a running escrowd: xa_open to a port
without a broker answers XAER_RMERR, then xa_open, branches (read-only, one phase), xa_recover and
xa_close answer as they do when the TM links libescrow.

The build installed is the one ESCROWD lives in (the normal build under ESCROW_SANITIZED=1: a
sanitized library cannot be loaded into Python), into a temporary DESTDIR.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TIMEOUT, tool, unique
from pg import free_port


BUILD = Path(tool("xa/libescrow.so.0", "ESCROW_LIBESCROW")).parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """DESTDIR with the build installed in it, and pkg-config's answers about it."""
    if not (BUILD / "build.ninja").exists():
        pytest.fail(f"no meson build directory at {BUILD}")
    dest = tmp_path_factory.mktemp("destdir")
    r = subprocess.run(["meson", "install", "-C", str(BUILD), "--no-rebuild", "--quiet", "--destdir", str(dest)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0, r.stdout.decode(errors="replace")
    pcs = list(dest.rglob("pkgconfig/escrow.pc"))
    assert len(pcs) == 1, f"escrow.pc installed {len(pcs)} times under {dest}"
    env = dict(os.environ, PKG_CONFIG_PATH=str(pcs[0].parent))

    def variable(name):
        out = subprocess.run(["pkg-config", f"--variable={name}", "escrow"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=30)
        assert out.returncode == 0, out.stdout.decode(errors="replace")
        return out.stdout.decode().strip()

    # pkg-config names the installed paths; under DESTDIR they are below `dest`.
    return {
        "dest": dest,
        "lixa_switch_file": dest / variable("lixa_switch_file").lstrip("/"),
        "xa_switch_library": dest / variable("xa_switch_library").lstrip("/"),
        "xa_switch_symbol": variable("xa_switch_symbol"),
        "xa_switch_name": variable("xa_switch_name"),
    }


# The TM: loads the library, finds the switch both ways, drives it. argv: library, switch file,
# symbol, port of a broker, a port without one, a queue.
TM_SCRIPT = r"""
import ctypes, sys
library, switch_file, symbol, port, dead_port = sys.argv[1:6]
XA_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_long)
XID_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_long)

class XaSwitch(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 32), ("flags", ctypes.c_long), ("version", ctypes.c_long),
                ("xa_open", XA_FN), ("xa_close", XA_FN), ("xa_start", XID_FN), ("xa_end", XID_FN),
                ("xa_rollback", XID_FN), ("xa_prepare", XID_FN), ("xa_commit", XID_FN),
                ("xa_recover", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_long, ctypes.c_int,
                                                ctypes.c_long)),
                ("xa_forget", XID_FN),
                ("xa_complete", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                                 ctypes.c_long))]

class Xid(ctypes.Structure):
    _fields_ = [("formatID", ctypes.c_long), ("gtrid_length", ctypes.c_long), ("bqual_length", ctypes.c_long),
                ("data", ctypes.c_char * 128)]

# The library first (RTLD_GLOBAL), as the application links it; the switch file's dependency on
# libescrow.so.0 then resolves to it (one library, one set of thread-local connections).
escrow = ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
lixa = ctypes.CDLL(switch_file)
lixa.lixa_get_xa_switch.restype = ctypes.POINTER(XaSwitch)
sw = lixa.lixa_get_xa_switch().contents
by_symbol = XaSwitch.in_dll(escrow, symbol)
assert ctypes.addressof(sw) == ctypes.addressof(by_symbol), "two different switches"
print("name", sw.name.decode(), "flags", sw.flags, "version", sw.version)
last_error = escrow.escrow_xa_last_error
last_error.restype = ctypes.c_char_p

code = sw.xa_open(f"host=127.0.0.1 port={dead_port} timeout=2000".encode(), 0, 0)
print("xa_open-without-broker", code)
print("# " + last_error().decode())
code = sw.xa_open(f"host=127.0.0.1 port={port} timeout=10000 resource=loader".encode(), 0, 0)
print("xa_open", code)
print("# " + last_error().decode())
x = Xid(4242, 5, 1)
x.data = b"gtridb"
TMSUCCESS, TMSTARTRSCAN, TMENDRSCAN, TMONEPHASE = 0x04000000, 0x01000000, 0x00800000, 0x40000000
# A branch that did nothing prepares read-only; the next one commits in one phase.
for name, call, flags in [("xa_start", sw.xa_start, 0), ("xa_end", sw.xa_end, TMSUCCESS),
                          ("xa_prepare", sw.xa_prepare, 0)]:
    print(name, call(ctypes.byref(x), 0, flags))
found = (Xid * 4)()
print("xa_recover", sw.xa_recover(found, 4, 0, TMSTARTRSCAN | TMENDRSCAN))
x.data = b"gtridc"
for name, call, flags in [("xa_start", sw.xa_start, 0), ("xa_end", sw.xa_end, TMSUCCESS),
                          ("xa_commit", sw.xa_commit, TMONEPHASE)]:
    print(name, call(ctypes.byref(x), 0, flags))
print("xa_close", sw.xa_close(b"", 0, 0))
"""


def test_installed_switch_file_and_symbol_load_the_same_switch(installed, broker):
    assert installed["xa_switch_symbol"] == "escrow_xa_switch"
    assert installed["xa_switch_name"] == "escrow"
    for key in ("lixa_switch_file", "xa_switch_library"):
        assert installed[key].exists(), f"pkg-config's {key} {installed[key]} is not installed"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASAN_", "UBSAN_", "LD_PRELOAD"))}
    r = subprocess.run([sys.executable, "-c", TM_SCRIPT, str(installed["xa_switch_library"]),
                        str(installed["lixa_switch_file"]), installed["xa_switch_symbol"], str(broker.port),
                        str(free_port()), f"/queue/{unique('loader')}"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=4 * TIMEOUT)
    out = r.stdout.decode(errors="replace")
    assert r.returncode == 0, out
    lines = [line for line in out.splitlines() if not line.startswith("#")]
    assert lines[0] == "name escrow flags 2 version 0", out  # TMNOMIGRATE
    assert lines[1:] == ["xa_open-without-broker -3",  # XAER_RMERR, never XAER_RMFAIL
                         "xa_open 0", "xa_start 0", "xa_end 0", "xa_prepare 3",  # XA_RDONLY
                         "xa_recover 0", "xa_start 0", "xa_end 0", "xa_commit 0", "xa_close 0"], out
