"""Failure paths of the store, seen from a client (DESIGN.md, "Durability points" 8 and 9): writes
refused through the fault-injection seam (ESCROW_FAULTS, test builds only: storage/include/escrow/
storage/fault_injection.h), a failed sync, a map that grows, and the storage.max-size cap. Each test
checks what a client relies on, and ends with `escrow check` on the data directory after SIGKILL.

Counting commits: a new store's first start commits once (the DLQ and ExpiryQueue records; the
broker submits that batch at open without waiting for it, so faulty_broker waits for it), and the
first client write is commit 2. Each test waits for every answer before the next write, so that
each write is a group commit of its own and the k-th commit is known."""

import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import SLOW, TIMEOUT, bodies, check_store, drain, frame_bytes, look, new_xid, tool, unique

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


def admin_frame_answer(client, command, **headers):
    """An ADMIN frame (broker/admin/admin.cpp) and the RECEIPT that answers it, whatever its admin-status."""
    rid = client.new_receipt()
    hdrs = {"admin-command": command, "receipt": rid}
    hdrs.update({k.replace("_", "-"): str(v) for k, v in headers.items()})
    client.conn.send_frame("ADMIN", hdrs)
    client.wait_receipt(rid)
    with client.listener.cond:
        return client.listener.receipt_frames[rid]


def admin(client, command, **headers):
    """An ADMIN frame answered with admin-status ok; returns its JSON body."""
    f = admin_frame_answer(client, command, **headers)
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
    assert bodies(look(b, stomp_client, q)) == ["kept"]
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
    assert bodies(look(b, stomp_client, q)) == ["kept"]
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

@pytest.mark.parametrize("crash", [False, True], ids=["committed at once", "SIGKILL before the commit"])
@pytest.mark.parametrize("other", [True, False], ids=["with another subscription", "alone"])
@pytest.mark.parametrize("how", ["unsubscribe", "escrow subscription delete"])
def test_commit_of_a_prepared_send_to_an_ended_durable_subscription(broker, stomp_client, how, other, crash):
    topic = f"/topic/{unique('xa')}"
    gone, stays = unique("gone"), unique("stays")
    for cid in (gone, stays) if other else (gone,):
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

    if crash:  # the branch comes back prepared, naming a subscription that no longer exists
        tm.close()
        crash_and_check(broker)
        tm = stomp_client(broker)
        assert [b["xid"] for b in branches(broker, stomp_client)] == [x]
    ok(tm, "COMMIT", x)
    tm.close()
    crash_and_check(broker)  # no entry for the ended subscription; alone: no message record either
    subs = durable_subscriptions(broker, stomp_client)
    assert (gone, "dur") not in subs
    assert branches(broker, stomp_client) == []
    if other:
        assert (stays, "dur") in subs
        d = stomp_client(broker, headers={"client-id": stays})
        sub = d.subscribe(topic, ack="client-individual", headers={"durable-subscription-name": "dur"})
        (m,) = d.wait_messages(1, subscription=sub)
        assert m.body == "prepared-send"
        d.ack(m, receipt=True)
        d.settle(1, subscription=sub)
        d.close()
    # Subscribing again under the ended name makes a new subscription: the commit left it nothing.
    d = stomp_client(broker, headers={"client-id": gone})
    sub = d.subscribe(topic, ack="client-individual", headers={"durable-subscription-name": "dur"})
    d.settle(0, subscription=sub)
    d.close()
    broker.kill9()
    check_store(broker.data_dir)  # the message record went with its last entry


# --------------------------------------------------------------------------------------------
# 5. A refused ACK: the message is unacknowledged again, at once
# --------------------------------------------------------------------------------------------

def ack_frame(client, msg, receipt=True, transaction=None):
    rid = client.new_receipt() if receipt else None
    client.conn.ack(msg.headers["ack"], transaction=transaction, receipt=rid)
    return rid


def one_delivered(broker, stomp_client, q, body):
    """Sends `body` to q (commit 2 on a new store) and returns (consumer, its MESSAGE)."""
    p = stomp_client(broker)
    p.send(q, body)
    p.close()
    c = stomp_client(broker)
    sub = c.subscribe(q, ack="client-individual")
    (m,) = c.wait_messages(1, subscription=sub)
    assert m.body == body and m.headers.get("redelivered", "false") == "false", dict(m.headers)
    return c, m


def redelivered_to_a_new_consumer(broker, stomp_client, q, body):
    """A new consumer (no restart) gets `body` again, redelivered; it acknowledges it (stored)."""
    c2 = stomp_client(broker)
    sub = c2.subscribe(q, ack="client-individual")
    (m,) = c2.wait_messages(1, subscription=sub)
    assert m.body == body and m.headers.get("redelivered") == "true", dict(m.headers)
    c2.ack(m, receipt=True)
    c2.close()
    return m


@pytest.mark.parametrize("receipt", [True, False], ids=["receipted ack", "deferred ack"])
def test_refused_ack_gives_an_error_and_the_message_back(broker_factory, stomp_client, receipt):
    b = faulty_broker(broker_factory, stomp_client, "commit:3:map_full")  # 2: the SEND, 3: the ACK
    q = f"/queue/{unique('ack')}"
    c, m = one_delivered(b, stomp_client, q, "acked-but-refused")
    rid = ack_frame(c, m, receipt=receipt)
    if receipt:
        expect_error(c, rid, "acknowledgement not stored", "MDB_MAP_FULL")
        assert rid not in c.listener.receipts
    else:
        # Deferred: stored with the next write, or within a few milliseconds by itself.
        err = c.wait_error()
        assert "acknowledgement not stored" in error_message(err), dict(err.headers)
    c.wait_disconnected()
    assert bodies(c.messages) == ["acked-but-refused"], "handed again to the connection the ERROR closes"
    again = redelivered_to_a_new_consumer(b, stomp_client, q, "acked-but-refused")
    crash_and_check(b)
    assert bodies(look(b, stomp_client, q)) == []
    b.kill9()
    check_store(b.data_dir)
    # It was delivered once before (the refused ACK ends that delivery without an acknowledgement):
    # this is its second delivery.
    assert again.headers.get("delivery-count") == "2", dict(again.headers)


@pytest.mark.parametrize("receipt", [True, False], ids=["receipted ack", "deferred ack"])
def test_disconnect_after_a_refused_ack_gets_no_receipt(broker_factory, stomp_client, raw, receipt):
    b = faulty_broker(broker_factory, stomp_client, "commit:3:map_full")
    q = f"/queue/{unique('disc')}"
    p = stomp_client(b)
    p.send(q, "m")
    p.close()
    r = raw(b)
    r.connect()
    r.send(frame_bytes("SUBSCRIBE", [("id", "s"), ("destination", q), ("ack", "client-individual"),
                                     ("receipt", "sub")]))
    frames = [r.read_frame(), r.read_frame()]
    (msg,) = [f for f in frames if f.command == "MESSAGE"]
    ack = [("id", msg.headers["ack"])] + ([("receipt", "ack")] if receipt else [])
    # One write: the DISCONNECT is handled in the same broker turn as the ACK.
    r.send(frame_bytes("ACK", ack) + frame_bytes("DISCONNECT", [("receipt", "bye")]))
    rest = r.read_until_closed()
    # Only the ACK's ERROR: no RECEIPT for the DISCONNECT, and the message the refused ACK puts
    # back is not handed to this closing connection again.
    assert [f.command for f in rest] == ["ERROR"], rest
    assert "acknowledgement not stored" in rest[0].headers["message"], rest
    redelivered_to_a_new_consumer(b, stomp_client, q, "m")
    crash_and_check(b)
    assert bodies(look(b, stomp_client, q)) == []
    b.kill9()
    check_store(b.data_dir)


# --------------------------------------------------------------------------------------------
# 6. The rollback of a dropped connection's local transaction, refused by the store
# --------------------------------------------------------------------------------------------

def test_refused_rollback_of_a_dropped_local_transaction_returns_the_message(broker_factory, stomp_client):
    b = faulty_broker(broker_factory, stomp_client, "commit:3:map_full")  # 3: the rollback's counts
    q = f"/queue/{unique('local')}"
    c, m = one_delivered(b, stomp_client, q, "consumed-in-tx")
    c.begin("tx")
    c.ack(m, receipt=True, transaction="tx")
    assert [x["xid"] for x in branches(b, stomp_client)], "the local transaction is not listed"
    c.drop()
    b.wait_log("refusing writes until there is room")  # the rollback's write was refused
    redelivered_to_a_new_consumer(b, stomp_client, q, "consumed-in-tx")
    assert branches(b, stomp_client) == []
    crash_and_check(b)
    assert bodies(look(b, stomp_client, q)) == []
    assert branches(b, stomp_client) == []
    b.kill9()
    check_store(b.data_dir)


# --------------------------------------------------------------------------------------------
# 7. A failed sync (fsyncgate): the store refuses every write until escrowd restarts
# --------------------------------------------------------------------------------------------

HTTP = '[http]\nlisten = "127.0.0.1:0"\n'


def http_get(broker, path):
    port = int(broker.log.split("http listening on 127.0.0.1:")[-1].split()[0])
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=TIMEOUT) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def writable_metric(broker):
    status, body = http_get(broker, "/metrics")
    assert status == 200, body
    (line,) = [x for x in body.splitlines() if x.startswith("escrow_store_writable ")]
    return float(line.split()[1])


def send_outcome(broker, stomp_client, q, body):
    """Sends `body` on a new connection (an ERROR closes it): "RECEIPT" or the ERROR's message."""
    p = stomp_client(broker)
    got = outcome(p, p.send(q, body, wait=False))
    p.close()
    return got if got == "RECEIPT" else error_message(got)


def test_failed_page_write_refuses_that_send_only(broker_factory, stomp_client):
    # eio at a commit: LMDB's write of the group's pages fails (a short write comes back as EIO)
    # under MDB_NOSYNC. Nothing of it was reported and no sync failed, so that SEND is refused
    # and the store goes on: later SENDs, ACKs and the metric stay as before.
    b = faulty_broker(broker_factory, stomp_client, "commit:3:eio", config=HTTP)
    q = f"/queue/{unique('pagewrite')}"
    results = [(f"m{i}", send_outcome(b, stomp_client, q, f"m{i}")) for i in range(5)]
    refused = [body for body, r in results if r != "RECEIPT"]
    assert refused == ["m1"], results  # commit 2: m0, commit 3: m1
    message = dict(results)["m1"]
    assert message.startswith("message not stored: ") and "a write of data.mdb failed" in message, message
    assert "later writes go on" in message and "restart" not in message, message
    assert writable_metric(b) == 1
    assert bodies(look(b, stomp_client, q)) == ["m0", "m2", "m3", "m4"]
    c, p = stomp_client(b), stomp_client(b)
    got, _ = drain(c, q, p, ack="client-individual")
    c.ack(got[0], receipt=True)  # an ACK is a write too: it goes through (waits for its RECEIPT)
    for m in c.messages:
        if m.body.startswith("sentinel-"):
            c.ack(m, receipt=True)
    c.close()
    p.close()
    crash_and_check(b)
    assert bodies(look(b, stomp_client, q)) == ["m2", "m3", "m4"]
    b.kill9()
    check_store(b.data_dir)


@pytest.mark.parametrize("spec", ["sync:3:eio"])
def test_failed_sync_refuses_every_write_until_restart(broker_factory, stomp_client, spec):
    b = faulty_broker(broker_factory, stomp_client, spec, config=HTTP)
    q = f"/queue/{unique('fsyncgate')}"
    assert writable_metric(b) == 1
    results = []
    for i in range(6):
        results.append((f"m{i}", send_outcome(b, stomp_client, q, f"m{i}")))
        if results[-1][1] != "RECEIPT":
            break
    hit = len(results) - 1
    assert results[hit][1] != "RECEIPT", f"no SEND met the failed sync: {results}"
    assert hit >= 1, f"the first SEND already failed: {results}"  # something got a RECEIPT before
    first = results[hit][1]
    assert first.startswith("message not stored: ") and "refuses every write until escrowd restarts" in first, first
    for i in range(hit + 1, hit + 4):  # every later SEND is refused as well
        later = send_outcome(b, stomp_client, q, f"m{i}")
        assert later != "RECEIPT" and "restart" in later, later
        results.append((f"m{i}", later))
    b.wait_log("the store refuses every write until escrowd restarts")
    assert writable_metric(b) == 0
    status, body = http_get(b, "/status")
    assert status == 200 and json.loads(body)["store"]["writable"] is False, body
    status, body = http_get(b, "/health")
    assert status == 503 and "not writable" in body, (status, body)

    crash_and_check(b)  # restart without faults
    assert writable_metric(b) == 1
    got = bodies(look(b, stomp_client, q))
    receipted = [body for body, r in results if r == "RECEIPT"]
    # The SEND that met the failed sync may or may not be on disk (that is what a failed sync
    # means); the ones after it were never written.
    assert got in (receipted, receipted + [results[hit][0]]), (got, results)
    assert send_outcome(b, stomp_client, q, "after-restart") == "RECEIPT"
    b.kill9()
    check_store(b.data_dir)


# --------------------------------------------------------------------------------------------
# 8. persist-delivery-count-before-delivery with the count's write refused
# --------------------------------------------------------------------------------------------

def count_in_log(broker, text):
    return broker.log.count(text)


def wait_count(broker, text, n, timeout=None):
    deadline = time.monotonic() + (timeout or TIMEOUT)
    while count_in_log(broker, text) < n:
        assert time.monotonic() < deadline, f"fewer than {n} {text!r} lines in escrowd's log:\n{broker.log}"
        time.sleep(0.02)


def test_refused_delivery_count_holds_the_delivery_until_the_store_takes_writes(broker_factory, stomp_client):
    config = "[delivery]\npersist-delivery-count-before-delivery = true\n"
    # 2: the SEND; 3 and 4: the raised delivery count, refused twice; 5: stored.
    b = faulty_broker(broker_factory, stomp_client, "commit:3-4:map_full", config=config)
    q = f"/queue/{unique('count')}"
    p = stomp_client(b)
    p.send(q, "counted")
    c = stomp_client(b)
    sub = c.subscribe(q, ack="client-individual")
    stopped = "deliveries stopped: their raised delivery counts were not stored"
    wait_count(b, stopped, 1)
    assert c.messages == [], "delivered although its delivery count was not stored"
    wait_count(b, stopped, 2)  # retried after about a second, refused again
    assert c.messages == [], "delivered although its delivery count was not stored"
    (m,) = c.wait_messages(1, subscription=sub)  # the third try is stored
    assert m.body == "counted"
    c.settle(1, subscription=sub)
    c.close()  # unacknowledged: it goes back, and its count was stored before it was delivered
    crash_and_check(b)
    c2 = stomp_client(b)
    sub2 = c2.subscribe(q, ack="client-individual")
    (m2,) = c2.wait_messages(1, subscription=sub2)
    assert m2.body == "counted" and m2.headers.get("redelivered") == "true", dict(m2.headers)
    c2.ack(m2, receipt=True)
    c2.close()
    b.kill9()
    check_store(b.data_dir)


# --------------------------------------------------------------------------------------------
# 9. The map grows by itself
# --------------------------------------------------------------------------------------------

def send_all(client, destination, payloads, window=64):
    outstanding = []
    for body in payloads:
        outstanding.append(client.send(destination, body, wait=False))
        if len(outstanding) >= window:
            client.wait_receipt(outstanding.pop(0))
    for rid in outstanding:
        client.wait_receipt(rid)


def test_a_small_map_grows_and_keeps_every_receipted_message(broker_factory, stomp_client):
    b = broker_factory(config="[storage]\nmap-size = 1048576\n")
    q = f"/queue/{unique('grow')}"
    n = 8192  # 8 MiB of 1 KiB messages in a 1 MiB map
    payloads = [f"{i:05d}-" + "x" * 1018 for i in range(n)]
    p = stomp_client(b)
    send_all(p, q, payloads)  # every one gets its RECEIPT (wait_receipt fails on an ERROR)
    p.close()
    b.wait_log("grew from 1 MiB to 2 MiB")
    crash_and_check(b)
    c = stomp_client(b)
    sub = c.subscribe(q, ack="auto", headers={"prefetch-count": "10000"})
    got = c.wait_messages(n, timeout=4 * TIMEOUT, subscription=sub)
    assert len(got) == n and bodies(got) == payloads
    c.settle(n, subscription=sub)
    c.close()
    b.kill9()
    check_store(b.data_dir)


# --------------------------------------------------------------------------------------------
# 10. storage.max-size refuses sends, not acknowledgements or commits; sends resume by themselves
# --------------------------------------------------------------------------------------------

def test_max_size_refuses_sends_but_not_acks_or_commits_and_sends_resume(broker_factory, stomp_client):
    b = broker_factory(config="[storage]\nmax-size = 4194304\n")
    q, q2 = f"/queue/{unique('cap')}", f"/queue/{unique('capxa')}"
    tm = stomp_client(b)
    x = new_xid()
    ok(tm, "START", x)
    tm.send(q2, "prepared-before-full")
    ok(tm, "END", x, "TMSUCCESS")
    ok(tm, "PREPARE", x)

    p = stomp_client(b)
    stored, refusal = [], None
    for i in range(4000):  # 16 MB at most: far past the cap
        body = f"{i:05d}-" + "y" * 4090
        got = outcome(p, p.send(q, body, wait=False))
        if got != "RECEIPT":
            refusal = error_message(got)
            break
        stored.append(body)
    assert refusal is not None, f"{len(stored)} messages of 4 KiB stored under a 4 MiB cap"
    assert "store full" in refusal and "storage.max-size" in refusal, refusal
    assert refusal.startswith("message not stored: "), refusal
    assert 100 < len(stored) < 1100, len(stored)

    # Still full: a new SEND is refused, but an acknowledgement and a commit are stored.
    assert "store full" in send_outcome(b, stomp_client, q, "refused-too")
    c = stomp_client(b)
    sub = c.subscribe(q, ack="client", headers={"prefetch-count": "10000"})
    msgs = c.wait_messages(len(stored), subscription=sub)
    assert bodies(msgs) == stored
    c.ack(msgs[0], receipt=True)
    ok(tm, "COMMIT", x)
    c.ack(msgs[-1], receipt=True)  # cumulative: the queue is drained
    c.close()

    # Sends resume by themselves once the live pages are below the cap (measured every few ms).
    deadline = time.monotonic() + TIMEOUT
    while (r := send_outcome(b, stomp_client, q, "resumed")) != "RECEIPT":
        assert "store full" in r, r
        assert time.monotonic() < deadline, f"sends did not resume after draining: {r}"
        time.sleep(0.05)
    crash_and_check(b)
    assert bodies(look(b, stomp_client, q)) == ["resumed"]
    assert bodies(look(b, stomp_client, q2)) == ["prepared-before-full"]
    b.kill9()
    check_store(b.data_dir)


# --------------------------------------------------------------------------------------------
# 11. The fault loop: one workload, the k-th commit refused or failed, then what survives
# --------------------------------------------------------------------------------------------

# A failed sync (or a full disk met while an earlier group waits for its sync) leaves what is on
# disk unknown: the broker's ERROR for the writes concerned says the store now "refuses every write
# until escrowd restarts". Their outcome may go either way; every other ERROR means not stored.
UNKNOWN = "refuses every write until escrowd restarts"


class Workload:
    """Receipted sends (a connection each), client-individual ACKs with receipts and a local
    transaction (a SEND and an ACK, then COMMIT) on one consumer connection, reconnecting after
    each ERROR (it closes the connection). Records every outcome: "RECEIPT" or the ERROR's message."""

    def __init__(self, broker, stomp_client, q):
        self.b, self.stomp_client, self.q = broker, stomp_client, q
        self.sent = {}  # body -> outcome of its (non-transactional) SEND
        self.acked = {}  # body -> outcome of its ACK
        self.tx = None  # (sent body, acked body or None, outcome of COMMIT)
        self.c = None
        self.sub = None

    def op(self, client, send_frame):
        rid = client.new_receipt()
        send_frame(rid)
        got = outcome(client, rid)
        return got if got == "RECEIPT" else error_message(got)

    def consumer(self):
        """The consumer connection, subscribed (a SUBSCRIBE may write a queue's record)."""
        for _ in range(2):
            if self.c is not None:
                return self.c
            c = self.stomp_client(self.b)
            sub = unique("sub")
            r = self.op(c, lambda rid: c.conn.subscribe(self.q, sub, ack="client-individual",
                                                        headers={"receipt": rid}))
            if r == "RECEIPT":
                self.c, self.sub = c, sub
            else:
                c.close()
        return self.c

    def lost_consumer(self):
        self.c.close()
        self.c = None

    def delivered(self, body):
        """The latest MESSAGE with this body on the consumer connection (stored, so it comes)."""
        c = self.c
        c.listener.wait_for(lambda: any(m.body == body for m in c.listener.messages) or c.listener.errors
                            or c.listener.disconnected, TIMEOUT, f"message {body!r}")
        msgs = [m for m in c.messages if m.body == body and m.headers.get("subscription") == self.sub]
        return msgs[-1] if msgs else None

    def run(self):
        for i in range(4):
            self.sent[f"m{i}"] = send_outcome(self.b, self.stomp_client, self.q, f"m{i}")
        stored = [body for body, r in self.sent.items() if r == "RECEIPT"]
        for body in stored[:2]:
            if self.consumer() is None:
                return
            m = self.delivered(body)
            if m is None:  # an ERROR closed the connection meanwhile
                self.lost_consumer()
                continue
            self.acked[body] = r = self.op(self.c, lambda rid: self.c.conn.ack(m.headers["ack"], receipt=rid))
            if r != "RECEIPT":
                self.lost_consumer()
        self.transaction(stored[2] if len(stored) > 2 else None)
        self.sent["m5"] = send_outcome(self.b, self.stomp_client, self.q, "m5")

    def transaction(self, to_ack):
        c = self.consumer()
        if c is None:
            return
        steps = [lambda rid: c.conn.begin("tx", headers={"receipt": rid}),
                 lambda rid: c.conn.send(self.q, "m4", transaction="tx", headers={"receipt": rid})]
        for step in steps:
            if self.op(c, step) != "RECEIPT":
                self.tx = ("m4", None, "not begun")
                return self.lost_consumer()
        if to_ack is not None:
            m = self.delivered(to_ack)
            if m is None or self.op(c, lambda rid: c.conn.ack(m.headers["ack"], transaction="tx",
                                                              receipt=rid)) != "RECEIPT":
                self.tx = ("m4", None, "not begun")
                return self.lost_consumer()
        r = self.op(c, lambda rid: c.conn.commit("tx", headers={"receipt": rid}))
        self.tx = ("m4", to_ack, r)
        if r != "RECEIPT":
            self.lost_consumer()

    def check(self, present):
        """`present`: the bodies in the queue after the restart."""
        problems = []
        acked_in_tx = None
        if self.tx is not None and self.tx[2] == "RECEIPT":
            acked_in_tx = self.tx[1]
        for body, r in self.sent.items():
            ack = self.acked.get(body)
            if r == "RECEIPT":
                if ack == "RECEIPT" or body == acked_in_tx:
                    if body in present:
                        problems.append(f"{body}: its ACK got a RECEIPT, yet it is still there")
                elif ack is None or UNKNOWN not in ack:
                    if body not in present:
                        problems.append(f"{body}: its SEND got a RECEIPT and no ACK did, yet it is gone")
            elif UNKNOWN not in r and body in present:
                problems.append(f"{body}: its SEND got an ERROR ({r}), yet it is there")
        if self.tx is not None:
            body, to_ack, r = self.tx
            if r == "RECEIPT" and body not in present:
                problems.append(f"{body}: its transaction's COMMIT got a RECEIPT, yet it is missing")
            elif r != "RECEIPT" and UNKNOWN not in r and body in present:
                problems.append(f"{body}: its transaction was not committed ({r}), yet it is there")
            elif r != "RECEIPT" and to_ack is not None and (body in present) == (to_ack in present):
                problems.append(f"half a commit: {body} there {body in present}, {to_ack} there {to_ack in present}")
        assert sorted(present) == sorted(set(present)), f"duplicates: {present}"
        return problems


@pytest.mark.parametrize("fault,ks", [("enospc", range(1, 9)), ("eio", range(2, 6))])
def test_fault_loop(broker_factory, stomp_client, fault, ks):
    started = time.monotonic()
    failures = []
    for k in ks:
        spec = f"commit:{k}:{fault}"
        b = faulty_broker(broker_factory, stomp_client, spec)
        q = f"/queue/{unique('loop')}"
        w = Workload(b, stomp_client, q)
        w.run()
        b.kill9()
        b.env = {}
        b.start()
        present = bodies(look(b, stomp_client, q))
        problems = w.check(present)
        if problems:
            failures.append(f"{spec}: {problems}; sends {w.sent}, acks {w.acked}, transaction {w.tx}, "
                            f"found {present}")
        b.kill9()
        check_store(b.data_dir)
        b.close()
    assert not failures, "\n".join(failures)
    assert time.monotonic() - started < 30 * SLOW


def test_durable_subscription_ended_before_its_record_is_stored_takes_no_messages(broker, stomp_client, raw):
    # SUBSCRIBE of a new durable subscription and its UNSUBSCRIBE in one write: both batches are in
    # flight at once. The subscription must not join its topic when the SUBSCRIBE's batch completes
    # (it is being ended), or later SENDs would store entries for a queue whose record is gone.
    topic = f"/topic/{unique('short')}"
    cid = unique("cid")
    r = raw(broker)
    r.connect(f"accept-version:1.2\nhost:localhost\nclient-id:{cid}\n")
    r.send(frame_bytes("SUBSCRIBE", [("id", "s"), ("destination", topic), ("durable-subscription-name", "dur"),
                                     ("receipt", "sub")]) +
           frame_bytes("UNSUBSCRIBE", [("id", "s"), ("durable-subscription-name", "dur"), ("receipt", "unsub")]))
    frames = [r.read_frame(), r.read_frame()]
    assert [(f.command, f.headers.get("receipt-id")) for f in frames] == [("RECEIPT", "sub"), ("RECEIPT", "unsub")], \
        frames
    r.close()
    p = stomp_client(broker)
    for i in range(3):
        p.send(topic, f"after-{i}")  # receipted: stored for nobody
    assert (cid, "dur") not in durable_subscriptions(broker, stomp_client)
    broker.kill9()  # and escrow check: no entry of a queue that does not exist
    check_store(broker.data_dir)
