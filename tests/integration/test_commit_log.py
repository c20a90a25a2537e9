"""The commit log in front of LMDB (docs/storage.md, "The commit log"), through a real escrowd:
killed between an LMDB commit and the log's write, killed during replay, after a failed checkpoint,
and with a ring that wrapped. Each run keeps every receipted message and nothing that
was not written to the log, and ends with `escrow check` on the store. A failed checkpoint (the
sync of data.mdb) stops the store and loses nothing receipted."""
import re

import pytest

from conftest import BrokerStartError, Closed, RawStomp, TIMEOUT, bodies, check_store, consume_all, frame_bytes, preload, queue
from test_failure_paths import faulty_broker, faults


def send_until_gone(broker, q, count):
    """Sends count messages one at a time, each waiting for its RECEIPT, until one gets an ERROR or
    the connection drops. Returns (the bodies receipted, the body that got no receipt or None)."""
    s = RawStomp(broker.port)
    receipted = []
    try:
        s.connect()
        for i in range(count):
            body = f"m{i}"
            try:
                s.send(frame_bytes("SEND", [("destination", q), ("receipt", body)], body))
                f = s.read_frame(timeout=TIMEOUT)
            except (Closed, OSError):
                return receipted, body
            if f.command != "RECEIPT":
                return receipted, body
            receipted.append(body)
        return receipted, None
    finally:
        s.close()


def wait_dead(broker):
    broker.expect_exit = True
    broker.proc.wait(TIMEOUT)
    broker._reader.join(5)
    return broker.proc.returncode


def test_killed_between_the_lmdb_commit_and_the_log_write(broker_factory, stomp_client):
    # Commit 1 is the start-up commit; message i is group i + 2. The 4th sync of the log is that
    # of m2: escrowd dies after LMDB's (unsynced) commit of m2 and before its log record.
    b = faulty_broker(broker_factory, stomp_client, "sync:4:kill")
    q = queue("cl")
    receipted, lost = send_until_gone(b, q, 10)
    assert receipted == ["m0", "m1"] and lost == "m2"
    assert wait_dead(b) == -9
    check_store(b.data_dir)
    b.restart(env={})
    b.wait_log("was not closed cleanly")
    # m2 was in LMDB's last commit, which recovery set aside: it never got a receipt, and it is
    # not delivered.
    assert bodies(consume_all(b, q)) == ["m0", "m1"]
    check_store(b.data_dir)


def test_killed_during_replay_then_started_again(broker_factory):
    b = broker_factory()
    q = queue("cl")
    preload(b, q, [f"m{i}" for i in range(50)])
    b.kill9()
    b.env = faults("replay:1:kill")
    with pytest.raises(BrokerStartError):
        b.start()
    check_store(b.data_dir)
    b.restart(env={})
    b.wait_log("replayed")
    assert bodies(consume_all(b, q)) == [f"m{i}" for i in range(50)]
    check_store(b.data_dir)
    # A clean stop leaves nothing to replay.
    b.restart()
    assert "not closed cleanly" not in b.log.split("----- escrowd run")[-1]


def test_failed_checkpoint_stops_writes_and_loses_nothing_receipted(broker_factory, stomp_client):
    # A checkpoint after every group (interval 1 ms); the 3rd one's sync of data.mdb fails. What was
    # receipted before is durable in the log; the store then refuses every write until a restart.
    b = faulty_broker(broker_factory, stomp_client, "data_sync:3:eio",
                      config="[storage]\ncheckpoint-interval-ms = 1\n")
    q = queue("cl")
    receipted, refused = send_until_gone(b, q, 200)
    assert refused is not None and len(receipted) >= 2, (receipted, refused)
    b.wait_log("the checkpoint of")
    b.kill9()
    b.restart(env={})
    found = bodies(consume_all(b, q))
    assert found in (receipted, receipted + [refused]), (found, receipted, refused)
    check_store(b.data_dir)


def test_a_refused_commit_then_a_lap_of_the_ring_loses_nothing_receipted(broker_factory, stomp_client):
    # Commit 1 is the start-up commit, commit 2 m0, commit 3 m1, refused as a full map: the store
    # checkpoints commit 2 at once (as a real full map does before it tries to grow). That
    # checkpoint once took the refused group's cancelled record for the last one, so the ring
    # could overwrite the records after it a lap later. Then every later checkpoint stalls a
    # second (a data disk slower than the log) while 20 MiB go through the 16 MiB ring, receipted,
    # and escrowd is killed: every receipted message is there after the restart.
    b = faulty_broker(broker_factory, stomp_client, "commit:3:map_full,data_sync:2+:stall",
                      config="[storage]\nlog-size = 16777216\ncheckpoint-interval-ms = 600000\n")
    q = queue("lap")
    assert send_until_gone(b, q, 2) == (["m0"], "m1")
    payloads = [f"p{i:06d}" + "x" * 4090 for i in range(5000)]
    preload(b, q, payloads)
    b.kill9()
    check_store(b.data_dir)
    b.restart(env={})
    assert bodies(consume_all(b, q)) == ["m0"] + payloads
    check_store(b.data_dir)


def test_a_log_that_wrapped_twice_replays_its_last_records(broker_factory):
    # A ring of 16 MiB and 40 MiB of messages: the log wraps twice before the kill, and the last
    # records it holds are replayed. No checkpoint by the clock (600 s): a checkpoint of every
    # commit before the kill would leave nothing to replay. A checkpoint also starts once a quarter
    # of the ring (4 MiB) is written since the last one, so the kill must come less than that
    # after a known one: a message larger than a quarter of the ring gets no record, and its group
    # is checkpointed (synced, waited for) before its receipt (docs/storage.md, "The commit log").
    # The 500 messages after it (2 MiB of records) are in the log only.
    b = broker_factory(config="[storage]\nlog-size = 16777216\ncheckpoint-interval-ms = 600000\n")
    q = queue("cl")
    payloads = [f"{i:06d}" + "x" * 4090 for i in range(9500)]
    for start in range(0, len(payloads), 1000):
        preload(b, q, payloads[start:start + 1000])
    checkpointed = "b" * (4 * 1024 * 1024 + 65536)
    tail = [f"{i:06d}" + "y" * 4090 for i in range(9500, 10000)]
    preload(b, q, [checkpointed])
    preload(b, q, tail)
    assert (b.data_dir / "log").stat().st_size <= 8192 + 16 * 1024 * 1024
    b.kill9()
    b.restart()
    # Logged while opening, before "escrowd ready".
    replayed = re.search(r"replayed (\d+) commits", b.log.split("----- escrowd run")[-1])
    assert replayed and int(replayed.group(1)) >= 1, b.log
    assert bodies(consume_all(b, q)) == payloads + [checkpointed] + tail
    check_store(b.data_dir)
