"""A new store's directory entries are durable before its first receipt (DESIGN.md invariant 9).

LMDB syncs data.mdb, not the directory that names it: on a filesystem that does not commit a new
file's entry with the file's own fdatasync, a power cut could leave a store whose receipted
messages sit in a file nobody can find. escrowd fsyncs the data directory after creating data.mdb
and its parent on every start, and the parent of every directory it made. Seen here at the
system-call level, with strace.
"""

import os
import re
import shutil
import signal
from pathlib import Path

import pytest

from conftest import Broker, unique

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is missing (scripts/setup installs it)")

_CALL = re.compile(r"^(\d+) +(\w+)\((.*)\) += (-?\d+)")


class TracedBroker(Broker):
    """escrowd under strace -f, its directory opens and syncs written to `trace`."""

    def __init__(self, trace, **kwargs):
        # LeakSanitizer cannot run under ptrace: the sanitizer build checks leaks everywhere else.
        asan = os.environ.get("ASAN_OPTIONS", "")
        super().__init__(env={"ASAN_OPTIONS": (asan + ":" if asan else "") + "detect_leaks=0"}, **kwargs)
        self.trace = trace

    def terminate(self, timeout=None):
        # SIGTERM to strace would only detach it: stop escrowd itself, strace then exits with it.
        if self.running():
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            self.expect_exit = True
            for pid in children:
                os.kill(int(pid), signal.SIGTERM)
        return super().terminate(timeout)

    def command(self):
        return ["strace", "-f", "-qq", "-e", "trace=openat,fsync,fdatasync", "-o", str(self.trace)] + super().command()


def calls(trace):
    out = []
    for line in trace.read_text().splitlines():
        m = _CALL.match(line)
        if m:
            out.append((m.group(2), m.group(3), int(m.group(4))))
    return out


def synced_directories(events):
    """Paths of directories opened with O_DIRECTORY whose descriptor was then fsynced, in order,
    resolved as the kernel resolved them (escrowd opens "DIR/.." for the parent DIR names)."""
    open_dirs, synced = {}, []
    for name, args, result in events:
        if name == "openat" and "O_DIRECTORY" in args and result >= 0:
            open_dirs[result] = os.path.realpath(args.split('"')[1])
        elif name == "fsync" and result == 0:
            fd = int(args)
            if fd in open_dirs:
                synced.append(open_dirs.pop(fd))
    return synced


def send_first_and_stop(b, stomp_client):
    """Starts `b`, sends one message (waiting for its RECEIPT) and stops it cleanly."""
    try:
        b.start()
        c = stomp_client(b)
        c.send(f"/queue/{unique('dirsync')}", "first")
        c.close()
        assert b.terminate() == 0, b.log
    finally:
        b.close()


def test_a_new_store_syncs_its_directory_and_parent_before_the_first_receipt(tmp_path, stomp_client):
    trace = tmp_path / "trace"
    (tmp_path / "work").mkdir()
    b = TracedBroker(trace, workdir=tmp_path / "work")
    send_first_and_stop(b, stomp_client)
    events = calls(trace)
    data_dir = str(b.data_dir)
    created = [i for i, (name, args, result) in enumerate(events)
               if name == "openat" and args.split('"')[1].endswith("/data.mdb") and "O_CREAT" in args and result >= 0]
    assert created, "escrowd never created data.mdb?\n" + trace.read_text()[-3000:]
    synced = synced_directories(events[created[0]:])
    assert data_dir in synced, f"the data directory {data_dir} was not fsynced after data.mdb was created: {synced}"
    assert str(b.data_dir.parent) in synced, f"the new data directory's parent was not fsynced: {synced}"


def test_every_start_syncs_the_data_directory_and_its_parent(tmp_path, stomp_client):
    # A start killed after it created data.mdb or the log but before its directory sync left
    # entries that only a later sync makes durable: every start syncs them, before a receipt.
    (tmp_path / "work").mkdir()
    b = Broker(workdir=tmp_path / "work")
    try:
        b.start()
        assert b.terminate() == 0, b.log
    finally:
        b.close()
    trace = tmp_path / "trace"
    t = TracedBroker(trace, workdir=tmp_path / "work")
    try:
        t.start()
        assert t.terminate() == 0, t.log
    finally:
        t.close()
    synced = synced_directories(calls(trace))
    assert str(t.data_dir) in synced and str(t.data_dir.parent) in synced, synced


@pytest.mark.parametrize("spelling", ["trailing slash", "missing ancestors"])
def test_a_new_store_syncs_every_directory_it_made_and_the_real_parent(tmp_path, stomp_client, spelling):
    # "--data-dir .../data/" once took the directory itself for its parent, and the ancestors that
    # "--data-dir .../n1/n2/data" makes were never synced: a power cut lost every receipt.
    (tmp_path / "work").mkdir()
    base = tmp_path / "work"
    data_dir = f"{base}/data/" if spelling == "trailing slash" else f"{base}/n1/n2/data"
    trace = tmp_path / "trace"
    b = TracedBroker(trace, workdir=base, data_dir=data_dir)
    send_first_and_stop(b, stomp_client)
    synced = synced_directories(calls(trace))
    real = Path(data_dir.rstrip("/"))
    assert str(real) in synced, synced
    expected = [real.parent] if spelling == "trailing slash" else [real.parent, real.parent.parent, base]
    for d in expected:
        assert str(d) in synced, f"{d} (it holds a directory this start made) was not fsynced: {synced}"
