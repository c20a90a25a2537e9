"""A full disk refuses new sends and harms nothing stored (issue 22, part 2; DESIGN.md invariant 8).

On a tmpfs of 20 to 32 MiB with storage.min-free-disk = 1 MiB and a 16 MiB commit log: the log's ring is
allocated whole when escrowd starts, so it never takes the space the floor keeps; SENDs are then
refused with "store full", acknowledgements and consumption go on, SENDs resume by themselves
once consuming freed room, nothing receipted is lost after a SIGKILL, and `escrow check` is clean.
Once with the ring not yet written once, once after it wrapped. (Before the ring was allocated
whole, its zero-filling took the disk to 0 bytes free, LMDB's next page write failed short, and
the store refused every write, ACKs included, until a restart.)
"""
import os
import subprocess
import time

import pytest

from conftest import SLOW, TIMEOUT, Closed, RawStomp, bodies, check_store, consume_all, frame_bytes, preload, unique

CONFIG = "[storage]\nmin-free-disk = 1048576\nlog-size = 16777216\n"
BODY = 4000
REFUSAL = "message not stored: store full"


@pytest.fixture
def small_disk(request, tmp_path):
    """A small tmpfs of its own, of request.param (needs root: scripts/test runs as root, as CI does)."""
    d = tmp_path / "disk"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={request.param},mode=0700", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs ({r.stderr.strip()}): this test needs root")
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


def send_batch(port, q, bodies_to_send):
    """Sends each body with a receipt, pipelined on one connection; returns (receipted bodies, the
    ERROR message or None). An ERROR closes the connection: SENDs after the refused one were never
    handled, and SENDs before it whose RECEIPT had not come yet (a refusal for room is answered at
    once, a receipt once its group is durable) may be stored or not: see in_doubt()."""
    s = RawStomp(port)
    receipted = []
    try:
        s.connect()
        s.send(b"".join(frame_bytes("SEND", [("destination", q), ("receipt", body[:12])], body)
                        for body in bodies_to_send))
        by_id = {body[:12]: body for body in bodies_to_send}
        while len(receipted) < len(bodies_to_send):
            try:
                f = s.read_frame(timeout=TIMEOUT * SLOW)
            except Closed:
                return receipted, "closed without an ERROR"
            if f.command == "ERROR":
                return receipted, f.headers.get("message", "")
            assert f.command == "RECEIPT", f
            receipted.append(by_id[f.headers["receipt-id"]])
        return receipted, None
    finally:
        s.close()


def in_doubt(sent, receipted):
    """The bodies of `sent` without a RECEIPT: stored or not (the ERROR that closed their connection
    came before their receipts)."""
    return set(sent) - set(receipted)


def check_consumed(consumed, receipted, doubtful):
    """Every receipted message exactly once, in order, and nothing but what may have been stored."""
    assert consumed == sorted(set(consumed)), "out of order or twice"
    missing = set(receipted) - set(consumed)
    assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:1]}"
    extra = set(consumed) - set(receipted) - doubtful
    assert not extra, f"{len(extra)} messages that were refused are stored, e.g. {sorted(extra)[:1]}"


def body(i):
    return f"m{i:010d}-" + "x" * (BODY - 12)


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


# Disk sizes where the old zero-filling of the ring, 4 MiB at a time, met the floor and took the
# disk to its last byte (20 and 26 MiB); the larger ones leave room to wrap the ring first.
@pytest.mark.parametrize("small_disk,wrapped", [("20m", False), ("26m", False), ("32m", True), ("36m", True)],
                         ids=["20 MiB, ring not yet written once", "26 MiB, ring not yet written once",
                              "32 MiB, ring wrapped", "36 MiB, ring wrapped"], indirect=["small_disk"])
def test_a_full_disk_refuses_sends_and_harms_nothing_stored(small_disk, broker_factory, wrapped):
    b = broker_factory(config=CONFIG, data_dir=small_disk / "data")
    log = small_disk / "data" / "log"
    assert log.stat().st_blocks * 512 >= 16 * 1024 * 1024, "the ring is not allocated whole at start"
    q = f"/queue/{unique('full')}"
    n = 0
    if wrapped:  # 20 MiB through the 16 MiB ring, consumed as it goes: the disk stays roomy
        for _ in range(10):
            preload(b, q, [body(i) for i in range(n, n + 500)])
            assert len(consume_all(b, q)) == 500
            n += 500
        assert "replayed" not in b.log

    stored, doubtful, refusal = [], set(), None
    while refusal is None:
        assert n < 20000, "a few MiB of disk took more than 80 MB of messages without a refusal"
        batch = [body(i) for i in range(n, n + 100)]
        got, refusal = send_batch(b.port, q, batch)
        stored += got
        doubtful |= in_doubt(batch, got)
        n += 100
    assert refusal.startswith(REFUSAL), refusal
    # The floor counts what is in flight, so one SEND alone may still fit: up to the next refusal.
    for _ in range(1000):
        got, refusal = send_batch(b.port, q, [body(n)])
        n += 1
        stored += got
        if refusal:
            doubtful.add(body(n - 1))  # refused: never stored, but the check needs no more
            break
    assert refusal and refusal.startswith(REFUSAL), refusal
    assert "refuses every write" not in b.log, "the full disk stopped the store"
    assert free_bytes(small_disk) > 0, "the disk filled to its last byte"

    # Consumption and its acknowledgements are writes too: they go on, and free the room.
    consumed = bodies(consume_all(b, q))
    check_consumed(consumed, stored, doubtful)
    deadline = time.monotonic() + TIMEOUT * SLOW
    resumed = []
    while True:  # sends resume by themselves
        got, refusal = send_batch(b.port, q, [body(n)])
        n += 1
        if got:
            resumed = got
            break
        assert time.monotonic() < deadline, f"sends did not resume after the queue was emptied: {refusal}"
        time.sleep(0.05)
    after, refusal = send_batch(b.port, q, [body(i) for i in range(n, n + 20)])
    assert refusal is None, refusal
    b.kill9()
    check_store(b.data_dir)
    b.start()
    # consume_all returned once its removals were durable: only what was sent since is left.
    assert bodies(consume_all(b, q)) == resumed + after
    b.kill9()
    check_store(b.data_dir)
