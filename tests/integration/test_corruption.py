"""A corrupted store (docs/storage.md, "A corrupted store"): a record that does not decode stops
escrowd at start (exit status 1) with the table and the key, or, for a message found while serving,
is never delivered and stays stored; it never crashes the broker or serves garbage.

Each test builds a store with a real escrowd (queue messages and a prepared XA branch), stops it,
and corrupts one record in a copy of the data directory with the LMDB tools (mdb_dump, one value
edited, mdb_load into a fresh environment), so that LMDB's own structure stays valid and only the
record is wrong. The original store must still work afterwards.
"""

import shutil
import subprocess
import time

import pytest

from conftest import ESCROWD, TIMEOUT, new_xid, unique

pytestmark = pytest.mark.skipif(shutil.which("mdb_dump") is None or shutil.which("mdb_load") is None,
                                reason="needs mdb_dump and mdb_load (Debian package lmdb-utils)")

FIX = "restore the data directory from a backup"


# --------------------------------------------------------------------------------------------
# mdb_dump's default format: each key and value a line of hex digits after one space. (Its -p
# "printable" format is not used: mdb_dump 0.9.24 writes a backslash byte unescaped, which
# mdb_load then reads as the start of a hex escape, so a record holding a 0x5c byte, such as a
# random xid, came back altered.)
# --------------------------------------------------------------------------------------------

def _unprint(text):
    return bytes.fromhex(text)


def _print(data):
    return " " + data.hex()


def corrupt_copy(src, dst, table, edit):
    """Copies the store in `src` to a fresh environment in `dst`, passing every (key, value) of
    `table` through edit(key, value) -> new value or None (unchanged). Returns the edited keys."""
    dump = subprocess.run(["mdb_dump", "-a", str(src)], check=True, capture_output=True, text=True,
                          encoding="latin-1").stdout.splitlines()
    out, edited, database, in_data, i = [], [], None, False, 0
    while i < len(dump):
        line = dump[i]
        if line.startswith("database="):
            database = line[len("database="):]
        if line == "HEADER=END":
            in_data = True
        elif line == "DATA=END":
            in_data = False
        elif in_data and database == table:
            key, value = _unprint(dump[i][1:]), _unprint(dump[i + 1][1:])
            new = edit(key, value)
            out.append(line)
            out.append(_print(new) if new is not None else dump[i + 1])
            if new is not None:
                edited.append(key)
            i += 2
            continue
        out.append(line)
        i += 1
    assert edited, f"nothing edited in table {table}"
    dst.mkdir()
    subprocess.run(["mdb_load", str(dst)], input="\n".join(out) + "\n", check=True, text=True,
                   encoding="latin-1", capture_output=True)
    return edited


def xid_key(xid_text):
    """The branches table key of an xid (xid::encode): u32 formatID + 2^31, u8 gtrid length,
    gtrid, bqual."""
    format_id, gtrid, bqual = xid_text.split(":")
    g, b = bytes.fromhex(gtrid), bytes.fromhex(bqual)
    return ((int(format_id) + 2 ** 31) % 2 ** 32).to_bytes(4, "big") + bytes([len(g)]) + g + b


def start_fails(data_dir):
    """Runs escrowd on data_dir, expecting it to refuse to start; returns its output."""
    p = subprocess.run([ESCROWD, "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=TIMEOUT)
    output = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert p.returncode == 1, f"escrowd exited with {p.returncode}, expected 1:\n{output}"
    assert "escrowd ready" not in output, output
    return output


# --------------------------------------------------------------------------------------------
# The store every test corrupts a copy of
# --------------------------------------------------------------------------------------------

class Store:
    def __init__(self, broker, queue, prepared_queue, xid):
        self.broker, self.queue, self.prepared_queue, self.xid = broker, queue, prepared_queue, xid

    @property
    def data_dir(self):
        return self.broker.data_dir


@pytest.fixture
def store(broker_factory, stomp_client):
    """Three messages m0..m2 in a queue, a prepared branch that sent one message to a second queue;
    escrowd stopped cleanly."""
    broker = broker_factory()
    name, prepared_name = unique("corrupt"), unique("corrupt-xa")
    c = stomp_client(broker)
    for i in range(3):
        c.send(f"/queue/{name}", f"m{i}")
    x = new_xid()
    assert c.xa("START", x).result == "XA_OK"
    c.send(f"/queue/{prepared_name}", "in-doubt")
    assert c.xa("END", x, "TMSUCCESS").result == "XA_OK"
    assert c.xa("PREPARE", x).result == "XA_OK"
    c.close()
    assert broker.terminate() == 0
    return Store(broker, name, prepared_name, x)


def check_original_still_works(store, stomp_client):
    """The original store, untouched by the corruption of its copy, serves everything."""
    store.broker.start()
    c = stomp_client(store.broker)
    r = c.xa("RECOVER", None, "TMSTARTRSCAN|TMENDRSCAN", count=100)
    assert store.xid in r.xids
    c.subscribe(f"/queue/{store.queue}")
    assert [m.body for m in c.wait_messages(3)] == ["m0", "m1", "m2"]
    assert c.xa("COMMIT", store.xid).result == "XA_OK"
    c.subscribe(f"/queue/{store.prepared_queue}")
    c.wait_body("in-doubt")


# --------------------------------------------------------------------------------------------
# At start: the broker stops, naming the table and the key
# --------------------------------------------------------------------------------------------

def test_undecodable_queue_record_stops_the_broker(store, stomp_client, tmp_path):
    copy = tmp_path / "copy"
    key = f"q/{store.queue}".encode()
    corrupt_copy(store.data_dir, copy, "queues", lambda k, v: b"\xff\x01" if k == key else None)
    output = start_fails(copy)
    assert f"the queues table holds a record that cannot be decoded, key 'q/{store.queue}'" in output
    assert FIX in output
    check_original_still_works(store, stomp_client)


def test_queue_record_under_a_malformed_key_stops_the_broker(store, stomp_client, tmp_path):
    # A durable subscription's record under a queue's key: "q/" with kind 2.
    copy = tmp_path / "copy"
    key = f"q/{store.queue}".encode()
    corrupt_copy(store.data_dir, copy, "queues", lambda k, v: v[:4] + b"\x02\x01t" if k == key else None)
    output = start_fails(copy)
    assert f"key 'q/{store.queue}': a durable subscription's key is d/CLIENT-ID, NUL, NAME" in output


def test_undecodable_prepared_branch_stops_the_broker(store, stomp_client, tmp_path):
    copy = tmp_path / "copy"
    key = xid_key(store.xid)
    corrupt_copy(store.data_dir, copy, "branches", lambda k, v: v[:-3] if k == key else None)
    output = start_fails(copy)
    assert f"the branches table holds a record that cannot be decoded, key 0x{key.hex()}" in output
    assert f"the prepared branch record of xid {store.xid} does not decode" in output
    assert FIX in output
    check_original_still_works(store, stomp_client)


@pytest.mark.parametrize("key, problem", [
    ("next-message-id", "a u64 is 8 bytes, this value is 3"),
    ("next-queue-id", "a u32 is 4 bytes, this value is 3"),
    ("schema-version", "the schema version is a u32 (4 bytes), found 3 bytes"),
])
def test_meta_value_of_the_wrong_size_stops_the_broker(store, tmp_path, key, problem):
    copy = tmp_path / "copy"
    corrupt_copy(store.data_dir, copy, "meta", lambda k, v: v[:3] if k == key.encode() else None)
    output = start_fails(copy)
    assert f"the meta table holds a record that cannot be decoded, key '{key}': {problem}" in output
    assert FIX in output


# --------------------------------------------------------------------------------------------
# While serving: the message is never delivered, stays stored, and the queue flows on
# --------------------------------------------------------------------------------------------

def test_undecodable_message_is_never_delivered(store, broker_factory, stomp_client, tmp_path):
    copy = tmp_path / "copy"

    def garble_m1(k, v):
        # An entry whose inline message is m1 (the body, then the sender: "" for anonymous): keep
        # the delivery count, break the record's version.
        if v.endswith(b"\x02m1\x00") and f"/queue/{store.queue}".encode() in v:
            return v[:4] + b"\x07" + v[5:]
        return None

    (key,) = corrupt_copy(store.data_dir, copy, "entries", garble_m1)
    b = broker_factory(data_dir=copy)  # starts: nothing read at start is corrupt
    c = stomp_client(b)
    c.subscribe(f"/queue/{store.queue}")
    assert [m.body for m in c.wait_messages(2)] == ["m0", "m2"]
    c.settle(2)  # and nothing else comes
    assert "m1" not in [m.body for m in c.messages]
    b.wait_log("is not delivered and stays stored")
    b.wait_log(f"the entries table holds a record that cannot be decoded, key 0x{key.hex()}")
    b.wait_log("the message stored in it does not decode")
    c.close()

    # It stays stored, and is refused again after a restart (never delivered as garbage).
    b.restart()
    c = stomp_client(b)
    c.subscribe(f"/queue/{store.queue}")
    c.settle(0)
    deadline = time.monotonic() + TIMEOUT  # the line may still be in escrowd's output pipe
    while b.log.count(f"key 0x{key.hex()}") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert b.log.count(f"key 0x{key.hex()}") == 2
    check_original_still_works(store, stomp_client)
