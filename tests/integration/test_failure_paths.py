"""Failure paths of the store, seen from a client (DESIGN.md, "Durability points" 8 and 9): writes
refused through the fault-injection seam (ESCROW_FAULTS, test builds only: storage/include/escrow/
storage/fault_injection.h), a failed sync, a map that grows, and the storage.max-size cap. Each test
checks what a client relies on, and ends with `escrow check` on the data directory after SIGKILL.

Counting commits: a new store's first start commits once (the DLQ and ExpiryQueue records) before
any client work, so the first client write is commit 2. Each test waits for every answer before the
next write, so that each write is a group commit of its own and the k-th commit is known."""

import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import SLOW, TIMEOUT, drain, frame_bytes, new_xid, tool, unique, check_store

ESCROW = tool("cli/escrow", "ESCROW_CLI")


def faults(spec):
    return {"ESCROW_FAULTS": spec}


def store_status(broker, stomp_client):
    a = stomp_client(broker)
    try:
        return admin(a, "status")["store"]
    finally:
        a.close()


def faulty_broker(broker_factory, stomp_client, spec, config=None):
    """A broker on a new store with ESCROW_FAULTS=spec, returned once its start-up commit (the DLQ
    and ExpiryQueue records, submitted at open without waiting) has gone through the committer, so
    that the first client write is commit 2 and never shares a group commit with it."""
    b = broker_factory(config=config, env=faults(spec))
    deadline = time.monotonic() + TIMEOUT
    while "cannot store the expiry and dead letter queues" not in b.log:
        if store_status(b, stomp_client)["commits"] >= 1:
            break
        assert time.monotonic() < deadline, "the start-up commit did not happen:\n" + b.log
        time.sleep(0.01)
    return b


def bodies(msgs):
    return [m.body for m in msgs]


def outcome(client, rid, timeout=None):
    """"RECEIPT" once the RECEIPT `rid` arrived, else the ERROR frame that closed the connection."""
    lis = client.listener
    lis.wait_for(lambda: rid in lis.receipts or lis.errors or lis.disconnected, timeout or TIMEOUT,
                 f"RECEIPT {rid} or an ERROR")
    if rid in lis.receipts:
        return "RECEIPT"
    assert lis.errors, f"the connection closed without RECEIPT {rid} or an ERROR"
    return lis.errors[0]


def error_message(frame):
    return frame.headers.get("message", "")


def expect_error(client, rid, *needles):
    got = outcome(client, rid)
    assert got != "RECEIPT", f"RECEIPT {rid}, expected an ERROR naming {needles}"
    message = error_message(got)
    for n in needles:
        assert n in message, f"ERROR {message!r} does not say {n!r}"
    assert got.headers.get("receipt-id") == rid, dict(got.headers)
    return message


def look(broker, stomp_client, q):
    """The bodies a fresh consumer finds in q, up to a sentinel, consuming none of them
    (client-individual; only the sentinel is acknowledged, with a receipt)."""
    p = stomp_client(broker)
    c = stomp_client(broker)
    before, _ = drain(c, q, p, ack="client-individual")
    for m in c.messages:
        if m.body.startswith("sentinel-"):
            c.ack(m, receipt=True)
    c.close()
    p.close()
    return bodies(before)


def admin(client, command, **headers):
    """An ADMIN frame (broker/admin.cpp) answered with admin-status ok; returns its JSON body."""
    rid = client.new_receipt()
    hdrs = {"admin-command": command, "receipt": rid}
    hdrs.update({k.replace("_", "-"): str(v) for k, v in headers.items()})
    client.conn.send_frame("ADMIN", hdrs)
    client.wait_receipt(rid)
    with client.listener.cond:
        f = client.listener.receipt_frames[rid]
    assert f.headers.get("admin-status") == "ok", (dict(f.headers), f.body)
    return json.loads(f.body)


def durable_subscriptions(broker, stomp_client):
    a = stomp_client(broker)
    try:
        return [(d["client_id"], d["subscription"]) for d in admin(a, "subscriptions")["durable"]]
    finally:
        a.close()


def branches(broker, stomp_client):
    a = stomp_client(broker)
    try:
        return admin(a, "xa-list")["branches"]
    finally:
        a.close()


def escrow_cli(broker, *args):
    env = dict(os.environ)
    env.pop("ESCROW_PASSWORD", None)
    env["HOME"] = "/nonexistent"
    return subprocess.run([ESCROW, "--url", f"stomp://127.0.0.1:{broker.port}", *map(str, args)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=4 * TIMEOUT, env=env)


def ok(c, verb, xid=None, flags=None, **headers):
    r = c.xa(verb, xid, flags, **headers)
    assert r.result == "XA_OK", f"XA-{verb} {xid} flags={flags}: expected XA_OK, got {r}"
    return r


def durable(cid, name):
    return {"durable-subscription-name": name}


def crash_and_check(broker, env=None):
    """SIGKILL, `escrow check` on the data directory, and a restart (without faults)."""
    broker.kill9()
    check_store(broker.data_dir)
    broker.env = dict(env or {})
    broker.start()


# --------------------------------------------------------------------------------------------
# 1. A refused first SEND to a new queue must not leave the queue's record "stored"
# --------------------------------------------------------------------------------------------

def test_refused_first_send_to_a_new_queue_then_a_receipted_send_survives_sigkill(broker_factory, stomp_client):
    b = faulty_broker(broker_factory, stomp_client, "commit:2:map_full")  # commit 1: the start-up queues
    q = f"/queue/{unique('first')}"
    p = stomp_client(b)
    rid = p.send(q, "refused", wait=False)
    message = expect_error(p, rid, "message not stored")
    assert "MDB_MAP_FULL" in message, message
    p2 = stomp_client(b)
    p2.send(q, "kept")  # waits for its RECEIPT: commit 3, which carries the queue's record again
    p2.close()
    crash_and_check(b)
    assert look(b, stomp_client, q) == ["kept"]
    b.kill9()
    check_store(b.data_dir)


def test_refused_record_of_a_queue_made_by_a_non_persistent_send_then_a_receipted_send_survives(broker_factory,
                                                                                                stomp_client):
    b = faulty_broker(broker_factory, stomp_client, "commit:2:map_full")
    q = f"/queue/{unique('np')}"
    p = stomp_client(b)
    # A non-persistent message is memory only: its RECEIPT does not wait for the queue's record,
    # whose batch (commit 2) is refused.
    p.send(q, "memory-only", headers={"persistent": "false"})
    b.wait_log("a new queue's record was not stored")
    p.send(q, "kept")
    p.close()
    crash_and_check(b)
    assert look(b, stomp_client, q) == ["kept"]
    b.kill9()
    check_store(b.data_dir)


# --------------------------------------------------------------------------------------------
# 2. A durable subscription whose record is refused never exists
# --------------------------------------------------------------------------------------------

def test_refused_durable_subscription_does_not_exist_before_or_after_a_restart(broker_factory, stomp_client):
    b = faulty_broker(broker_factory, stomp_client, "commit:2:map_full")
    topic = f"/topic/{unique('dur')}"
    cid, name = unique("cid"), unique("name")
    d = stomp_client(b, headers={"client-id": cid})
    rid = d.new_receipt()
    d.conn.subscribe(topic, "s1", ack="client-individual",
                     headers={"durable-subscription-name": name, "receipt": rid})
    expect_error(d, rid, "durable subscription not stored", "MDB_MAP_FULL")
    p = stomp_client(b)
    p.send(topic, "nobody-listens")  # no subscription: nothing is stored for it
    assert (cid, name) not in durable_subscriptions(b, stomp_client)
    p.close()
    crash_and_check(b)
    assert (cid, name) not in durable_subscriptions(b, stomp_client)
    # Subscribing with the same name makes a new, empty subscription.
    d2 = stomp_client(b, headers={"client-id": cid})
    sub = d2.subscribe(topic, ack="client-individual", headers={"durable-subscription-name": name})
    d2.settle(0, subscription=sub)
    assert (cid, name) in durable_subscriptions(b, stomp_client)
    p2 = stomp_client(b)
    p2.send(topic, "after")
    (m,) = d2.wait_messages(1, subscription=sub)
    assert m.body == "after"
    d2.close()
    b.kill9()
    check_store(b.data_dir)


# --------------------------------------------------------------------------------------------
# 3. A durable UNSUBSCRIBE in the same broker turn as a SEND to its topic
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("subscriptions", [1, 2])
def test_durable_unsubscribe_in_the_same_turn_as_a_send_leaves_no_orphan(broker, stomp_client, raw, subscriptions):
    topic = f"/topic/{unique('race')}"
    cids = [unique("cid") for _ in range(subscriptions)]
    for cid in cids:
        d = stomp_client(broker, headers={"client-id": cid})
        d.subscribe(topic, ack="client-individual", headers={"durable-subscription-name": "dur"})
        d.disconnect()  # no consumer attached from here on
    r = raw(broker)
    r.connect(f"accept-version:1.2\nhost:localhost\nclient-id:{cids[0]}\n")
    r.send(frame_bytes("SEND", [("destination", topic), ("receipt", "send")], "raced") +
           frame_bytes("UNSUBSCRIBE", [("durable-subscription-name", "dur"), ("receipt", "unsub")]))
    frames = [r.read_frame(), r.read_frame()]
    assert [(f.command, f.headers.get("receipt-id")) for f in frames] == [("RECEIPT", "send"), ("RECEIPT", "unsub")], \
        frames
    r.close()
    assert (cids[0], "dur") not in durable_subscriptions(broker, stomp_client)
    crash_and_check(broker)
    subs = durable_subscriptions(broker, stomp_client)
    assert (cids[0], "dur") not in subs
    for cid in cids[1:]:  # the other subscription kept the message
        assert (cid, "dur") in subs
        d = stomp_client(broker, headers={"client-id": cid})
        sub = d.subscribe(topic, ack="client-individual", headers={"durable-subscription-name": "dur"})
        (m,) = d.wait_messages(1, subscription=sub)
        assert m.body == "raced"
        d.ack(m, receipt=True)
        d.settle(1, subscription=sub)
        d.close()
    broker.kill9()
    check_store(broker.data_dir)  # no entry, message record or reference left behind


# --------------------------------------------------------------------------------------------
# 4. A prepared branch's send to a durable subscription that ends before the commit
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["unsubscribe", "escrow subscription delete"])
def test_commit_of_a_prepared_send_to_an_ended_durable_subscription(broker, stomp_client, how):
    topic = f"/topic/{unique('xa')}"
    gone, stays = unique("gone"), unique("stays")
    for cid in (gone, stays):
        d = stomp_client(broker, headers={"client-id": cid})
        d.subscribe(topic, ack="client-individual", headers={"durable-subscription-name": "dur"})
        d.disconnect()
    tm = stomp_client(broker)
    x = new_xid()
    ok(tm, "START", x)
    tm.send(topic, "prepared-send")
    ok(tm, "END", x, "TMSUCCESS")
    ok(tm, "PREPARE", x)

    if how == "unsubscribe":
        d = stomp_client(broker, headers={"client-id": gone})
        d.unsubscribe("none", headers={"durable-subscription-name": "dur"})
        d.disconnect()
    else:
        r = escrow_cli(broker, "--json", "subscription", "delete", gone, "dur")
        assert r.returncode == 0, (r.stdout, r.stderr)
    assert (gone, "dur") not in durable_subscriptions(broker, stomp_client)

    ok(tm, "COMMIT", x)
    tm.close()
    crash_and_check(broker)  # no entry for the ended subscription
    subs = durable_subscriptions(broker, stomp_client)
    assert (gone, "dur") not in subs and (stays, "dur") in subs
    assert branches(broker, stomp_client) == []
    d = stomp_client(broker, headers={"client-id": stays})
    sub = d.subscribe(topic, ack="client-individual", headers={"durable-subscription-name": "dur"})
    (m,) = d.wait_messages(1, subscription=sub)
    assert m.body == "prepared-send"
    d.ack(m, receipt=True)
    d.settle(1, subscription=sub)
    d.close()
    broker.kill9()
    check_store(broker.data_dir)  # the message record went with the last entry
