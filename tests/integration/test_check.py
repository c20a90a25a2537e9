"""`escrow check DATA-DIR`, the offline store checker (docs/operations.md), on stores a real escrowd
wrote: persistent messages in a queue (some expiring), a topic with two durable subscriptions (a
message stored once with a reference count), a prepared XA branch that sent and consumed. After a
SIGKILL the store must check consistent, with the summary counting exactly that; on a running
escrowd too, also while producers write; and the exit codes for a store that cannot be checked
(6) and for one with inconsistencies (5). A store SIGKILLed with commits after the commit log's
checkpoint is checked as escrowd will open it: a copy is recovered and checked, the store itself
left byte for byte as it was."""

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from conftest import TIMEOUT, Client, bodies, check_store, consume_all, new_xid, tool, unique

ESCROW = tool("cli/escrow", "ESCROW_CLI")


def run_check(data_dir, *args, after=(), env=None):
    return subprocess.run([ESCROW, *args, "check", str(data_dir), *after], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=4 * TIMEOUT,
                          env={**os.environ, **env} if env else None)


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ok(c, verb, xid=None, flags=None, **headers):
    r = c.xa(verb, xid, flags, **headers)
    assert r.result == "XA_OK", f"XA-{verb} {xid} flags={flags}: expected XA_OK, got {r}"
    return r


def fill(broker, stomp_client):
    """Writes the store every test checks; returns the names used. Stored afterwards:
    queue q: 5 entries (2 expiring); topic t, durable subscriptions a and b: 2 messages stored once
    each in `messages` (1 expiring), 4 entries; queue qin: 2 entries, one consumed by a prepared
    branch that also sends one message to queue qout (written at commit, not yet stored)."""
    q, t, qin, qout = unique("q"), unique("t"), unique("qin"), unique("qout")
    later = str(int(time.time() * 1000) + 3_600_000)
    cid = unique("cid")
    subscriber = stomp_client(broker, headers={"client-id": cid})
    for name in ("a", "b"):
        subscriber.subscribe(f"/topic/{t}", ack="client-individual", headers={"durable-subscription-name": name})
    subscriber.disconnect()  # the durable subscriptions stay, and keep what is sent to the topic

    p = stomp_client(broker)
    for i in range(5):
        p.send(f"/queue/{q}", f"q{i}", headers={"expires": later} if i < 2 else None)
    p.send(f"/topic/{t}", "t0", headers={"expires": later})
    p.send(f"/topic/{t}", "t1")
    p.send(f"/queue/{qin}", "in0")
    p.send(f"/queue/{qin}", "in1")

    c = stomp_client(broker)
    c.subscribe(f"/queue/{qin}", ack="client-individual")
    msgs = c.wait_messages(2)
    x = new_xid()
    ok(c, "START", x)
    c.send(f"/queue/{qout}", "out0")
    c.ack(msgs[0], receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    return {"q": q, "t": t, "qin": qin, "qout": qout, "xid": x, "consumer": c, "producer": p}


# What fill() leaves, as `escrow --json check` counts it. The queues: q, qin, qout (its record is
# written when the branch's SEND names it) and the default DLQ and ExpiryQueue.
EXPECTED = {"queues": 5, "durable_subscriptions": 2, "entries": 5 + 4 + 2, "inline_entries": 5 + 2,
            "messages": 2, "message_refs": 2, "prepared_branches": 1, "heuristic_branches": 0,
            "expiries": 2 + 2}


def test_check_after_sigkill_is_consistent_and_counts_the_store(broker, stomp_client):
    fill(broker, stomp_client)
    broker.kill9()

    out = check_store(broker.data_dir)
    assert "store is consistent" in out, out
    assert "5 queues, 2 durable subscriptions" in out, out
    assert "entries         11 (7 holding their message)" in out, out
    assert "messages        2 shared by several entries, 2 reference counts" in out, out
    assert "branches        1 prepared, 0 heuristically completed" in out, out
    assert "expiry records  4" in out, out

    report = json.loads(check_store(broker.data_dir, "--json"))
    assert report["outcome"] == "consistent", report
    assert report["problems"] == [] and report["problems_found"] == 0, report
    assert {k: report["counts"][k] for k in EXPECTED} == EXPECTED, report
    # The prepare did not write next-message-id; the checker, like escrowd, counts the branch's
    # message: 9 messages were stored and 1 staged, ids from 1.
    assert report["counts"]["next_message_id"] == 11, report

    # And escrowd agrees: it starts on the store, with the branch prepared.
    broker.start()
    c = stomp_client(broker)
    r = c.xa("RECOVER", None, "TMSTARTRSCAN|TMENDRSCAN", count=100)
    assert r.result == "XA_OK" and len(r.xids) == 1, r


def test_check_on_a_running_broker(broker, stomp_client):
    names = fill(broker, stomp_client)
    assert broker.running()
    # escrowd holds escrow.lock; the checker needs only LMDB's reader table.
    report = json.loads(check_store(broker.data_dir, "--json"))
    assert {k: report["counts"][k] for k in EXPECTED} == EXPECTED, report

    # While producers write and a consumer acknowledges, every check sees one committed snapshot.
    stop = threading.Event()
    errors = []
    sent = [0, 0]

    def produce(n, dest):
        try:
            p = stomp_client(broker)
            i = 0
            while not stop.is_set():
                headers = {"expires": str(int(time.time() * 1000) + 3_600_000)} if i % 2 else None
                p.send(dest, f"load{i}", headers=headers, receipt=(i % 10 == 0))
                i += 1
                sent[n] = i
        except Exception as e:  # noqa: BLE001 (reported by the test)
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(0, f"/queue/{names['q']}"), daemon=True),
               threading.Thread(target=produce, args=(1, f"/topic/{names['t']}"), daemon=True)]
    consumer = stomp_client(broker)
    consumer.subscribe(f"/queue/{names['q']}", ack="auto")  # and removes from the queue meanwhile
    for th in threads:
        th.start()
    checks = 0
    deadline = time.monotonic() + 4 * TIMEOUT
    try:
        # At least 3 checks, and until each producer has sent 300 messages while they ran.
        while checks < 3 or min(sent) < 300:
            assert time.monotonic() < deadline, f"{checks} checks, sent {sent}, errors {errors}"
            check_store(broker.data_dir)
            checks += 1
    finally:
        stop.set()
        for th in threads:
            th.join(TIMEOUT)
    assert not errors, errors
    broker.terminate()
    check_store(broker.data_dir)


def test_check_exit_codes_for_what_cannot_be_checked(tmp_path):
    missing = run_check(tmp_path / "nothing-here")
    assert missing.returncode == 6, missing
    assert "is not a directory" in missing.stderr, missing.stderr
    assert not (tmp_path / "nothing-here").exists()

    empty = run_check(tmp_path)
    assert empty.returncode == 6, empty
    assert "no data.mdb" in empty.stderr, empty.stderr
    assert not (tmp_path / "data.mdb").exists()


@pytest.mark.skipif(shutil.which("mdb_load") is None,
                    reason="mdb_load is not installed (Debian: lmdb-utils; scripts/setup installs it)")
def test_check_reports_each_inconsistency_with_exit_code_5(broker):
    """Records added behind escrowd's back (after a SIGKILL, with lmdb-utils' mdb_load): a queue
    record that does not decode, and an expiry record pointing at an entry that does not exist.
    tests/unit/storage/check_test.cpp makes every kind of inconsistency; this is the command's end.
    escrowd sets aside every LMDB commit after its commit log's checkpoint, a hand edit's too (and
    so does the check, on its recovered copy): the store is recovered and its log moved away first,
    so that escrowd, and the check, read the edits."""
    p = Client(broker)
    try:
        p.send(f"/queue/{unique('q')}", "one")
    finally:
        p.close()
    broker.kill9()
    check_store(broker.data_dir)
    broker.start()
    broker.terminate()
    (broker.data_dir / "log").unlink()

    def load(table, text):
        r = subprocess.run(["mdb_load", "-T", "-s", table, str(broker.data_dir)], input=text.encode(),
                           capture_output=True, timeout=TIMEOUT)
        assert r.returncode == 0, r

    load("queues", "q/broken\nxx\n")
    # u64 expires, then the entry key u32 queue id 1, u8 9-4, u64 message id 7 (never stored)
    key = (1).to_bytes(8, "big") + (1).to_bytes(4, "big") + bytes([5]) + (7).to_bytes(8, "big")
    load("expiries", "".join(f"\\{b:02x}" for b in key) + "\n\n")

    r = run_check(broker.data_dir)
    assert r.returncode == 5, r
    assert "2 problems:" in r.stdout, r.stdout
    assert "queues 'q/broken': the queue record (u32 id, u8 kind, topic) does not decode" in r.stdout, r.stdout
    assert "expiries 0x0000000000000001000000010500000000000000" in r.stdout, r.stdout
    assert "which is not in entries" in r.stdout, r.stdout
    assert "is inconsistent (2 problems, listed above)" in r.stderr, r.stderr
    report = json.loads(run_check(broker.data_dir, "--json").stdout)
    assert report["outcome"] == "inconsistent" and report["problems_found"] == 2, report
    assert report["problems_by_kind"]["undecodable"] == 1 and report["problems_by_kind"]["expiry"] == 1, report


def test_check_of_a_store_not_closed_cleanly_recovers_a_copy_and_leaves_the_store_as_it_was(
        broker_factory, stomp_client, tmp_path):
    # No checkpoint for a minute: every commit of fill() is after the log's checkpoint, so LMDB's
    # latest commits are what recovery sets aside, and the log's records what it replays.
    b = broker_factory(config="[storage]\ncheckpoint-interval-ms = 60000\n")
    names = fill(b, stomp_client)
    p = names["producer"]
    later = [f"late{i}" for i in range(5)]
    for body in later:
        p.send(f"/queue/{names['q']}", body)
    b.kill9(check=False)
    files = [b.data_dir / "data.mdb", b.data_dir / "log"]
    before = {f.name: digest(f) for f in files}
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    r = run_check(b.data_dir, "--json", after=("--scratch", str(scratch)))
    assert r.returncode == 0, r
    report = json.loads(r.stdout)
    assert report["outcome"] == "consistent", report
    recovery = report["recovery"]
    assert recovery["state"] == "recovered", report
    assert recovery["latest_commit"] > recovery["checkpoint"], report
    assert recovery["set_aside_commits"] == recovery["latest_commit"] - recovery["checkpoint"], report
    # One group per receipted SEND, ACK and PREPARE at least: fill() and the 5 late sends.
    assert recovery["replayed_commits"] >= 9 + 2 + 5, report
    assert any("was not closed cleanly" in line for line in recovery["log"]), report
    # The copy holds what the store holds once recovered: what fill() leaves, and the late 5.
    expected = dict(EXPECTED, entries=EXPECTED["entries"] + 5, inline_entries=EXPECTED["inline_entries"] + 5)
    assert {k: report["counts"][k] for k in expected} == expected, report

    # In text, through $TMPDIR; the copy is gone afterwards, and nothing of the store changed.
    r = run_check(b.data_dir, env={"TMPDIR": str(scratch)})
    assert r.returncode == 0, r
    assert "state           not closed cleanly: checked a recovered copy, as escrowd will open the store" in r.stdout, r.stdout
    first, last, checkpoint = recovery["checkpoint"] + 1, recovery["latest_commit"], recovery["checkpoint"]
    assert (f"recovery        LMDB commits {first} to {last} after the checkpoint (commit {checkpoint}) set aside, "
            f"{recovery['replayed_commits']} commits replayed from the commit log") in r.stdout, r.stdout
    assert "store is consistent (as recovered" in r.stdout, r.stdout
    assert list(scratch.iterdir()) == []
    assert {f.name: digest(f) for f in files} == before

    # escrowd then recovers the store itself, as the check did with its copy: nothing receipted lost.
    b.start()
    b.wait_log("was not closed cleanly")
    b.wait_log(f"replayed {recovery['replayed_commits']} commits")
    c = stomp_client(b)
    x = c.xa("RECOVER", None, "TMSTARTRSCAN|TMENDRSCAN", count=100)
    assert x.result == "XA_OK" and len(x.xids) == 1, x
    assert bodies(consume_all(b, f"/queue/{names['q']}")) == [f"q{i}" for i in range(5)] + later
    # Open in escrowd now: checked live, as before.
    live = json.loads(check_store(b.data_dir, "--json"))
    assert live["recovery"]["state"] == "in-use", live
    b.terminate()
    clean = json.loads(check_store(b.data_dir, "--json"))
    assert clean["recovery"]["state"] == "as-is", clean
