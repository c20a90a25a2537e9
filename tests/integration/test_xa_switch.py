"""escrow_xa_switch against a real escrowd, driven the way a transaction manager drives it, by the
C++ program tests/xa_switch/xa_switch_check.cpp (one scenario per run): open strings (bad ones
answer XAER_INVAL), start/end/prepare/commit, one phase, read-only, suspend/resume, rollback,
unknown xids (XAER_NOTA), recover paging with TMSTARTRSCAN / TMENDRSCAN and the lone TMENDRSCAN,
recovery and commit from another process under another rmid of the same resource (across a SIGKILL
of the broker), a branch prepared with the rmid trailer of earlier switches, a dropped connection
(XAER_RMFAIL, then xa_open reopens), xa_open before the broker runs (XAER_RMERR, then XA_OK on the
same thread), the same XID on two rmids (branch=), many threads at once.

The program is found next to the broker's build (build/broker/escrowd ->
build/tests/xa_switch/xa-switch-check) or in XA_SWITCH_CHECK. Under ESCROW_SANITIZED=1 the normal
build's program is used when it exists (the point of that run is the sanitized broker).
"""

import os
import subprocess

import pytest

from conftest import SLOW, TIMEOUT, tool, unique
from pg import free_port


CHECK = tool("tests/xa_switch/xa-switch-check", "XA_SWITCH_CHECK")


@pytest.fixture(autouse=True)
def need_check():
    if not os.path.exists(CHECK):
        pytest.fail(f"{CHECK} not found: build it (ninja -C build tests/xa_switch/xa-switch-check) "
                    f"or set XA_SWITCH_CHECK")


def run_check(*args, timeout=None):
    r = subprocess.run([CHECK, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, timeout=timeout or 4 * TIMEOUT)
    out = r.stdout.decode(errors="replace")
    assert r.returncode == 0, f"xa-switch-check {' '.join(map(str, args))} exited {r.returncode}:\n{out}"
    return out


def test_switch_fields_and_open_strings(broker):
    run_check("open-strings", broker.port)


def test_two_phase_one_phase_read_only_suspend_rollback(broker):
    run_check("branches", broker.port, f"/queue/{unique('switch')}")


def test_unknown_xid_answers_xaer_nota(broker):
    run_check("unknown-xid", broker.port)


def test_recover_pages_and_lone_endrscan(broker):
    run_check("recover-paging", broker.port)


def test_same_xid_on_two_rmids_is_two_branches(broker):
    run_check("same-xid", broker.port, f"/queue/{unique('same')}")


def test_recovery_and_commit_from_another_process_after_broker_crash(broker, tmp_path):
    queue = f"/queue/{unique('other')}"
    xid_file = tmp_path / "xid"
    run_check("prepare-and-die", broker.port, queue, xid_file, 3)
    broker.kill9()
    broker.start()
    run_check("recover-and-commit", broker.port, queue, xid_file, 3)


def test_prepared_under_rmid_1_is_recovered_and_committed_under_rmid_0(broker, tmp_path):
    """The TM renumbered its resource managers between the prepare and the recovery: the branch's
    identity is the open string's resource (here the default, host:port), not the rmid."""
    queue = f"/queue/{unique('renumbered')}"
    xid_file = tmp_path / "xid"
    run_check("prepare-and-die", broker.port, queue, xid_file, 1)
    run_check("recover-and-commit", broker.port, queue, xid_file, 0)


def test_branch_with_the_old_rmid_trailer_is_recovered_after_an_upgrade(broker):
    run_check("legacy-trailer", broker.port, f"/queue/{unique('legacy')}")


def test_xa_open_before_the_broker_runs_then_once_it_is_back(broker_factory):
    """A TM-style driver opens the switch while no broker runs: XAER_RMERR (the code the XA
    specification gives xa_open for "cannot open"), then XA_OK on the same thread once it runs."""
    port = free_port()
    b = broker_factory(start=False, listen=False, args=["--listen", f"127.0.0.1:{port}"])
    p = subprocess.Popen([CHECK, "open-before-broker", str(port), f"/queue/{unique('late')}"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    try:
        for raw in iter(p.stdout.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            lines.append(line)
            if line == "ready-for-broker":
                break
        assert lines and lines[-1] == "ready-for-broker", "\n".join(lines)
        b.start()
        p.stdin.write(b"go\n")
        p.stdin.flush()
        rest, _ = p.communicate(timeout=4 * TIMEOUT)
        lines += rest.decode(errors="replace").splitlines()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, "xa-switch-check open-before-broker failed:\n" + "\n".join(lines)


def test_dropped_connection_answers_rmfail_then_xa_open_reopens(broker_factory):
    port = free_port()
    b = broker_factory(listen=False, args=["--listen", f"127.0.0.1:{port}"])
    p = subprocess.Popen([CHECK, "drop", str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    lines = []

    def wait_for(word):
        for raw in iter(p.stdout.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            lines.append(line)
            if line == word:
                return
        raise AssertionError(f"xa-switch-check ended before '{word}':\n" + "\n".join(lines))

    try:
        wait_for("ready-to-drop")
        b.kill9()
        p.stdin.write(b"go\n")
        p.stdin.flush()
        wait_for("ready-to-reopen")
        b.start()
        p.stdin.write(b"go\n")
        p.stdin.flush()
        rest, _ = p.communicate(timeout=4 * TIMEOUT)
        lines += rest.decode(errors="replace").splitlines()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, "xa-switch-check drop failed:\n" + "\n".join(lines)


def test_many_threads_open_and_start_at_once(broker):
    run_check("threads", broker.port, 16, f"/queue/{unique('threads')}", timeout=8 * TIMEOUT * SLOW)
