"""The C++ client library (libescrow) against a real escrowd: runs the doctest program
tests/client (built as <build>/tests/client_tests) with ESCROW_PORT naming the broker, kills the
broker under a client that waits, and builds an application against an installed copy of the
library with pkg-config.

The build directory is ESCROW_BUILD, or the one ESCROWD lives in (build/broker/escrowd -> build)."""

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import ESCROWD, SLOW, TIMEOUT

BUILD = Path(os.environ.get("ESCROW_BUILD") or Path(ESCROWD).resolve().parent.parent)
CLIENT_TESTS = BUILD / "tests" / "client_tests"


def client_env(broker):
    env = dict(os.environ, ESCROW_PORT=str(broker.port))
    if SLOW > 1:
        env["ESCROW_SANITIZED"] = "1"
    return env


def run_client_tests(broker, *args, timeout=None):
    assert CLIENT_TESTS.exists(), f"{CLIENT_TESTS} is missing: build it (ninja -C {BUILD})"
    r = subprocess.run([str(CLIENT_TESTS), *args], env=client_env(broker), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout or 300 * SLOW)
    out = r.stdout.decode(errors="replace")
    assert r.returncode == 0, f"client_tests {' '.join(args)} failed (exit {r.returncode}):\n{out}"
    assert "test cases:" in out and "0 failed" in out, out
    return out


# One fresh broker per source file of the client tests, so a failure names its area.
@pytest.mark.parametrize("source", ["acknowledge_test.cpp", "messaging_test.cpp", "transaction_error_test.cpp",
                                    "fake_broker_test.cpp"])
def test_client_library(broker, source):
    out = run_client_tests(broker, f"--source-file=*{source}")
    assert "| 0 passed |" not in out, f"no test case of {source} ran:\n{out}"


def test_lost_connection_wakes_every_waiting_call(broker):
    """The broker dies (SIGKILL) while two threads wait in receive(): both wake with
    connection_lost at once; nothing hangs."""
    assert CLIENT_TESTS.exists(), f"{CLIENT_TESTS} is missing: build it (ninja -C {BUILD})"
    proc = subprocess.Popen([str(CLIENT_TESTS), "--test-case=lost connection*", "--no-skip"], env=client_env(broker),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    ready = threading.Event()

    def read():
        for line in iter(proc.stdout.readline, b""):
            lines.append(line.decode(errors="replace"))
            if line.strip() == b"READY":
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(TIMEOUT) and proc.poll() is None, "the client did not get ready:\n" + "".join(lines)
        broker.kill9()
        status = proc.wait(timeout=30 * SLOW)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(5)
    out = "".join(lines)
    assert status == 0, f"client_tests exited {status}:\n{out}"
    assert out.count("woke with connection_lost") == 2, out


def _sanitize_option(build):
    """The build's -Dsanitize value ('' when not sanitized)."""
    options = json.loads((build / "meson-info" / "intro-buildoptions.json").read_text())
    return next((o["value"] for o in options if o["name"] == "sanitize"), "")


APP = r"""
#include <escrow/client.h>
#include <cstdio>
#include <cstdlib>
int main(int, char** argv) {
  escrow::client::connect_options o;
  o.port = static_cast<std::uint16_t>(std::atoi(argv[1]));
  auto c = escrow::client::connection::open(o);
  c->create_producer({.destination = "/queue/pkg-config"}).send("hello from an installed libescrow");
  auto q = c->create_consumer({.destination = "/queue/pkg-config"});
  auto m = q->receive(std::chrono::seconds(10));
  std::printf("%s\n", m ? m->body().c_str() : "nothing");
  return m ? 0 : 1;
}
"""


@pytest.mark.xdist_group("meson-install")  # with test_install.py: one meson install at a time
def test_installed_library_builds_an_application_with_pkg_config(broker, tmp_path):
    """meson install into a staging directory, then pkg-config --cflags --libs escrow compiles and
    links a small application, which talks to the broker."""
    for tool in ("meson", "pkg-config", "c++"):
        assert shutil.which(tool), f"{tool} is not installed"
    dest = tmp_path / "stage"
    r = subprocess.run(["meson", "install", "-C", str(BUILD), "--no-rebuild", "--quiet", "--destdir", str(dest)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0, r.stdout.decode(errors="replace")
    pcs = list(dest.rglob("escrow.pc"))
    assert len(pcs) == 1, f"expected one escrow.pc under {dest}, found {pcs}"
    pc = pcs[0]
    prefix = next(line.split("=", 1)[1] for line in pc.read_text().splitlines() if line.startswith("prefix="))
    staged_prefix = str(dest) + prefix
    headers = Path(staged_prefix) / "include" / "escrow"
    for h in ("client.h", "client_consumer.h", "client_error.h", "frame.h", "xa.h", "xid.h"):
        assert (headers / h).exists(), f"{h} not installed under {headers}"

    env = dict(os.environ, PKG_CONFIG_PATH=str(pc.parent))

    def pkg_config(*args):
        out = subprocess.run(["pkg-config", f"--define-variable=prefix={staged_prefix}", *args, "escrow"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        assert out.returncode == 0, out.stdout.decode(errors="replace")
        return out.stdout.decode().split()

    flags = pkg_config("--cflags", "--libs")
    libdir = pkg_config("--variable=libdir")[0]
    assert any(f == "-lescrow" for f in flags), flags
    assert list(Path(libdir).glob("libescrow.so.0*")), f"no versioned libescrow.so.0 in {libdir}"

    source = tmp_path / "app.cpp"
    source.write_text(APP)
    sanitize = _sanitize_option(BUILD)
    extra = [f"-fsanitize={sanitize}"] if sanitize else []
    app = tmp_path / "app"
    cc = subprocess.run(["c++", "-std=c++20", *extra, str(source), "-o", str(app), *flags], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, timeout=300)
    assert cc.returncode == 0, "compiling against the installed library failed:\n" + cc.stdout.decode(errors="replace")
    run = subprocess.run([str(app), str(broker.port)], env=dict(os.environ, LD_LIBRARY_PATH=libdir),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60 * SLOW)
    out = run.stdout.decode(errors="replace")
    assert run.returncode == 0 and "hello from an installed libescrow" in out, out
