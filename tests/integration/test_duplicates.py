"""Duplicate detection (docs/stomp.md, "Duplicate detection"): a SEND carrying _AMQ_DUPL_ID whose id
its destination already remembers is not stored again, and its RECEIPT says duplicate:true. The ids
are written in the batch that stores the message, so they survive SIGKILL with it; an address
remembers id-cache-size of them ([[address-settings]]), the oldest forgotten first; in a
transaction a duplicate rolls the transaction back at COMMIT (XA: at XA-PREPARE, or a one-phase
XA-COMMIT) and the first transaction to commit an id wins; an id whose batch the store refused is
not taken. Every crash and fault test ends with `escrow check` (kill9 runs it, and check_store)."""

import json
import re
import threading
import time
import urllib.request

from conftest import TIMEOUT, bodies, check_store, consume_all, look, new_xid, queue, unique

ID = "_AMQ_DUPL_ID"

# Two address settings beside the default table: small.# remembers 3 ids, nodup.# none.
SMALL_CACHE = """
[[address-settings]]
match = "#"
dead-letter-address = "DLQ"
expiry-address = "ExpiryQueue"

[[address-settings]]
match = "small.#"
id-cache-size = 3

[[address-settings]]
match = "nodup.#"
id-cache-size = 0
"""


def receipt_of(client, rid):
    """The headers of RECEIPT `rid` (waited for)."""
    client.wait_receipt(rid)
    with client.listener.cond:
        return dict(client.listener.receipt_frames[rid].headers)


def send_id(client, destination, body, dupl_id, **headers):
    """A SEND with _AMQ_DUPL_ID, answered; returns True when its RECEIPT says duplicate:true."""
    rid = client.send(destination, body, headers={ID: dupl_id, **headers}, wait=False)
    answer = receipt_of(client, rid)
    assert answer.get("duplicate") in (None, "true"), answer
    return answer.get("duplicate") == "true"


def wait_outcome(client, rid):
    """"RECEIPT" once RECEIPT `rid` arrived, else the ERROR frame that closed the connection."""
    lis = client.listener
    lis.wait_for(lambda: rid in lis.receipts or lis.errors or lis.disconnected, TIMEOUT, f"RECEIPT {rid} or an ERROR")
    if rid in lis.receipts:
        return "RECEIPT"
    assert lis.errors, f"the connection closed without RECEIPT {rid} or an ERROR"
    return lis.errors[0]


def commit_error(client, transaction):
    """COMMIT of `transaction`, which must be refused: the ERROR's message."""
    rid = client.commit(transaction, wait=False)
    got = wait_outcome(client, rid)
    assert got != "RECEIPT", f"COMMIT of {transaction} was answered with a RECEIPT"
    assert got.headers.get("receipt-id") == rid, dict(got.headers)
    return got.headers.get("message", "")


def ok(c, verb, xid=None, flags=None, **headers):
    r = c.xa(verb, xid, flags, **headers)
    assert r.result == "XA_OK", f"XA-{verb} {xid}: expected XA_OK, got {r}"
    return r


def xa_branch(client, xid, sends):
    """XA-START, the SENDs (destination, body, id), XA-END TMSUCCESS."""
    ok(client, "START", xid)
    for destination, body, dupl_id in sends:
        client.send(destination, body, headers={ID: dupl_id})
    ok(client, "END", xid, "TMSUCCESS")


def check_counts(data_dir):
    """`escrow check --json`'s counts, the store consistent."""
    return json.loads(check_store(data_dir, "--json"))["counts"]


def metric(broker, name):
    """A broker-wide counter of /metrics (the broker needs [http] listen, as HTTP_CONFIG has it)."""
    m = re.search(r"http listening on 127\.0\.0\.1:(\d+)", broker.log)
    assert m, "no 'http listening on' line:\n" + broker.log
    url = f"http://127.0.0.1:{m.group(1)}/metrics"
    text = urllib.request.urlopen(url, timeout=TIMEOUT).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics:\n{text}")


HTTP_CONFIG = """
[http]
listen = "127.0.0.1:0"
"""


# --------------------------------------------------------------------------------------------
# 1. A resend with the same id: duplicate:true, one copy
# --------------------------------------------------------------------------------------------

def test_a_resend_with_the_same_id_is_answered_as_a_duplicate_and_stored_once(broker, stomp_client):
    q = queue("dup")
    p = stomp_client(broker)
    assert not send_id(p, q, "first", "order-1")
    assert send_id(p, q, "again", "order-1")
    assert send_id(p, q, "non-persistent copy", "order-1", persistent="false")
    # The id is the destination's: another queue, and the topic of the same name, have their own.
    other = queue("other")
    assert not send_id(p, other, "elsewhere", "order-1")
    assert not send_id(p, q.replace("/queue/", "/topic/"), "topic", "order-1")
    # Two quick resends: the second sees the first's claim while its batch is in flight.
    r1 = p.send(q, "quick", headers={ID: "order-2"}, wait=False)
    r2 = p.send(q, "quick again", headers={ID: "order-2"}, wait=False)
    assert receipt_of(p, r1).get("duplicate") is None
    assert receipt_of(p, r2).get("duplicate") == "true"
    # Without the header nothing is remembered.
    p.send(q, "plain")
    p.send(q, "plain")
    assert bodies(look(broker, stomp_client, q)) == ["first", "quick", "plain", "plain"]
    assert bodies(look(broker, stomp_client, other)) == ["elsewhere"]
    # The ids survive a restart (and a SIGKILL: kill9 checks the store).
    p.close()
    broker.restart(kill=True)
    p = stomp_client(broker)
    assert send_id(p, q, "after the restart", "order-1")
    assert send_id(p, q, "after the restart", "order-2")
    assert bodies(consume_all(broker, q)) == ["first", "quick", "plain", "plain"]
    counts = check_counts(broker.data_dir)
    assert counts["duplicate_ids"] == 4  # order-1 three times (two queues, a topic), order-2 once
    assert counts["duplicate_addresses"] == 3


def test_a_non_persistent_message_has_its_id_stored_before_it_is_delivered(broker, stomp_client):
    q = queue("np")
    c = stomp_client(broker)
    sub = c.subscribe(q)
    p = stomp_client(broker)
    assert not send_id(p, q, "np-1", "np-id", persistent="false")
    assert send_id(p, q, "np-1 again", "np-id", persistent="false")
    c.settle(1, subscription=sub)
    assert bodies(c.messages) == ["np-1"]
    p.close()
    c.close()
    broker.restart(kill=True)  # the message is gone (not persistent); its id is not
    p = stomp_client(broker)
    assert send_id(p, q, "np-1 after the restart", "np-id", persistent="false")
    assert not send_id(p, q, "np-2", "np-id-2", persistent="false")


def test_ids_that_cannot_be_ids_are_refused(broker, stomp_client, raw):
    from conftest import frame_bytes
    q = queue("bad")
    for value, needle in (("", "empty _AMQ_DUPL_ID"), ("x" * 300, "too long")):
        s = raw(broker)
        s.connect()
        s.send(frame_bytes("SEND", [("destination", q), (ID, value), ("receipt", "r")], "body"))
        f = s.read_frame()
        assert f.command == "ERROR", f
        assert needle in f.headers["message"], f
    assert bodies(look(broker, stomp_client, q)) == []


# --------------------------------------------------------------------------------------------
# 2. SIGKILL mid-stream, the producer resends what was not receipted: each message once
# --------------------------------------------------------------------------------------------

def test_resends_after_a_sigkill_mid_stream_store_each_message_exactly_once(broker, stomp_client):
    q = queue("crash")
    n = 400
    p = stomp_client(broker)
    rids = {}
    stop = threading.Event()

    def produce():
        for i in range(n):
            if stop.is_set():
                return
            try:
                rids[i] = p.send(q, f"m-{i}", headers={ID: f"id-{i}"}, wait=False)
            except Exception:  # the connection died with the broker
                return
            time.sleep(0.002)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    p.listener.wait_for(lambda: len(p.listener.receipts) >= 60, TIMEOUT, "60 receipts")
    broker.kill9()  # and `escrow check` on what it left
    stop.set()
    producer.join(TIMEOUT)
    with p.listener.cond:
        receipted = set(p.listener.receipts)
    p.close()
    assert len(receipted) < n, "every message was receipted before the SIGKILL: no mid-stream crash"

    broker.start()
    p = stomp_client(broker)
    duplicates = 0
    for i in range(n):
        if rids.get(i) not in receipted:
            duplicates += send_id(p, q, f"m-{i}", f"id-{i}")
    got = bodies(consume_all(broker, q))
    assert sorted(got) == sorted(f"m-{i}" for i in range(n)), \
        f"{len(got)} messages for {n}; twice: {sorted({b for b in got if got.count(b) > 1})}"
    # Sent but not receipted, and stored all the same: the resend was a duplicate (not asserted
    # above 0: the kill may have come between batches).
    print(f"{len(receipted)} receipted before the SIGKILL, {duplicates} resends answered as duplicates")
    broker.kill9()


# --------------------------------------------------------------------------------------------
# 3. id-cache-size: the oldest id is forgotten first
# --------------------------------------------------------------------------------------------

def test_an_address_remembers_id_cache_size_ids_and_forgets_the_oldest_first(broker_factory, stomp_client):
    b = broker_factory(config=SMALL_CACHE)
    q = f"/queue/small.{unique('evict')}"
    p = stomp_client(b)
    for dupl_id in ("a", "b", "c", "d"):
        assert not send_id(p, q, dupl_id, dupl_id)
    # Remembered: b, c, d (a duplicate changes nothing); a, the 4th-oldest, is forgotten.
    for dupl_id in ("d", "c", "b"):
        assert send_id(p, q, dupl_id + " again", dupl_id)
    assert not send_id(p, q, "a again", "a")
    # Now c, d, a: b is the oldest and forgotten.
    assert not send_id(p, q, "b again", "b")
    assert bodies(look(b, stomp_client, q)) == ["a", "b", "c", "d", "a again", "b again"]
    # What the store holds is the window, no more: three ids, their order records beside them.
    counts = check_counts(b.data_dir)
    assert (counts["duplicate_ids"], counts["duplicate_addresses"]) == (3, 1)
    p.close()
    b.restart(kill=True)
    p = stomp_client(b)
    assert send_id(p, q, "d after the restart", "d")
    assert not send_id(p, q, "c after the restart", "c")  # forgotten when b came back
    # id-cache-size = 0: the header is not looked at.
    none = f"/queue/nodup.{unique('off')}"
    assert not send_id(p, none, "one", "same")
    assert not send_id(p, none, "two", "same")
    assert bodies(look(b, stomp_client, none)) == ["one", "two"]
    b.kill9()


# --------------------------------------------------------------------------------------------
# 4. Transactions: a duplicate rolls the transaction back at COMMIT; the first commit wins
# --------------------------------------------------------------------------------------------

def test_a_duplicate_in_a_local_transaction_refuses_its_commit_and_nothing_takes_effect(broker, stomp_client):
    q, work = queue("tx"), queue("work")
    p = stomp_client(broker)
    assert not send_id(p, q, "stored before", "X")
    p.send(work, "job")
    c = stomp_client(broker)
    c.subscribe(work, ack="client-individual")
    (job,) = c.wait_messages(1)
    c.begin("T")
    c.send(q, "fresh in T", headers={ID: "Y", "transaction": "T"})
    c.send(q, "duplicate in T", headers={ID: "X", "transaction": "T"})
    c.ack(job, transaction="T")
    message = commit_error(c, "T")
    assert message == (f"COMMIT of transaction 'T' refused: message with _AMQ_DUPL_ID 'X' is a duplicate for {q}: "
                       "rolled back; nothing of the transaction took effect"), message
    c.close()
    # Nothing of T: no send, the acknowledged job is back (redelivered), and Y is still free.
    assert bodies(look(broker, stomp_client, q)) == ["stored before"]
    assert bodies(consume_all(broker, work)) == ["job"]
    assert not send_id(p, q, "Y outside", "Y")

    # The same id twice in one transaction counts too.
    c = stomp_client(broker)
    c.begin("T2")
    c.send(q, "z1", headers={ID: "Z", "transaction": "T2"})
    c.send(q, "z2", headers={ID: "Z", "transaction": "T2"})
    message = commit_error(c, "T2")
    assert "_AMQ_DUPL_ID 'Z' is a duplicate for " + q in message and "sends it twice" in message, message
    c.close()
    assert not send_id(p, q, "Z outside", "Z")
    assert bodies(consume_all(broker, q)) == ["stored before", "Y outside", "Z outside"]
    check_store(broker.data_dir)


def test_two_transactions_with_one_id_the_first_commit_wins(broker_factory, stomp_client):
    broker = broker_factory(config=HTTP_CONFIG)
    q = queue("race")
    a, b = stomp_client(broker), stomp_client(broker)
    a.begin("A")
    b.begin("B")
    a.send(q, "from A", headers={ID: "W", "transaction": "A"})
    b.send(q, "from B", headers={ID: "W", "transaction": "B"})  # both may carry it until one commits
    a.commit("A")
    message = commit_error(b, "B")
    assert f"_AMQ_DUPL_ID 'W' is a duplicate for {q}" in message, message
    a.close()
    b.close()
    assert bodies(consume_all(broker, q)) == ["from A"]
    # The id is taken for SENDs outside a transaction too.
    p = stomp_client(broker)
    assert send_id(p, q, "W again", "W")
    assert metric(broker, "escrow_duplicates_total") == 2
    broker.kill9()


def test_xa_a_duplicate_answers_xa_rbintegrity_at_prepare_and_one_phase_commit(broker, stomp_client):
    q = queue("xa")
    p = stomp_client(broker)
    assert not send_id(p, q, "stored", "V")
    c = stomp_client(broker)
    x = new_xid()
    xa_branch(c, x, [(q, "dup at prepare", "V")])
    r = c.xa("PREPARE", x)
    assert r.result == "XA_RBINTEGRITY", r
    assert r.message == f"message with _AMQ_DUPL_ID 'V' is a duplicate for {q}: rolled back; nothing of the " \
                        "transaction took effect", r
    assert c.xa("COMMIT", x).result == "XAER_NOTA"  # rolled back and forgotten, as XA_RB* from prepare says
    y = new_xid()
    xa_branch(c, y, [(q, "dup at one-phase commit", "V")])
    r = c.xa("COMMIT", y, "TMONEPHASE")
    assert r.result == "XA_RBINTEGRITY", r
    assert "'V'" in r.message, r

    # A prepared branch holds its ids until it is decided: another branch's prepare, and a SEND
    # outside any, see them taken; across a SIGKILL too; its commit then stores them.
    first, second = new_xid(), new_xid()
    xa_branch(c, first, [(q, "prepared", "U")])
    ok(c, "PREPARE", first)
    xa_branch(c, second, [(q, "second", "U")])
    assert c.xa("PREPARE", second).result == "XA_RBINTEGRITY"
    assert send_id(p, q, "U outside", "U")
    p.close()
    c.close()
    broker.restart(kill=True)
    p, c = stomp_client(broker), stomp_client(broker)
    assert send_id(p, q, "U after the restart", "U")
    ok(c, "COMMIT", first)
    assert send_id(p, q, "U after the commit", "U")
    # A rolled-back prepared branch gives its id back.
    third = new_xid()
    xa_branch(c, third, [(q, "rolled back", "R")])
    ok(c, "PREPARE", third)
    ok(c, "ROLLBACK", third)
    assert not send_id(p, q, "R outside", "R")
    assert bodies(consume_all(broker, q)) == ["stored", "prepared", "R outside"]
    broker.kill9()


# --------------------------------------------------------------------------------------------
# 5. A batch the store refuses leaves its id free
# --------------------------------------------------------------------------------------------

def faulty_broker(broker_factory, stomp_client, spec):
    """A broker on a new store with ESCROW_FAULTS=spec, once its start-up commit (the DLQ and
    ExpiryQueue records) is done: the first client write is commit 2 (test_failure_paths.py)."""
    b = broker_factory(env={"ESCROW_FAULTS": spec})
    deadline = time.monotonic() + TIMEOUT
    while True:
        a = stomp_client(b)
        rid = a.new_receipt()
        a.conn.send_frame("ADMIN", {"admin-command": "status", "receipt": rid})
        a.wait_receipt(rid)
        with a.listener.cond:
            status = json.loads(a.listener.receipt_frames[rid].body)
        a.close()
        if status["store"]["commits"] >= 1:
            return b
        assert time.monotonic() < deadline, "the start-up commit did not happen:\n" + b.log
        time.sleep(0.01)


def test_a_refused_send_leaves_its_id_free(broker_factory, stomp_client):
    b = faulty_broker(broker_factory, stomp_client, "commit:2:map_full")
    q = queue("refused")
    p = stomp_client(b)
    rid = p.send(q, "refused", headers={ID: "F"}, wait=False)
    got = wait_outcome(p, rid)
    assert got != "RECEIPT" and "message not stored" in got.headers["message"], got
    p2 = stomp_client(b)
    assert not send_id(p2, q, "resent", "F")
    assert send_id(p2, q, "resent again", "F")
    p2.close()
    b.kill9()
    b.env = {}
    b.start()
    assert bodies(consume_all(b, q)) == ["resent"]
    b.kill9()


def test_a_resend_while_the_first_is_in_flight_waits_for_its_outcome(broker_factory, stomp_client):
    # Commit 2 (a message of A's) stalls a second; A's SEND with the id is then in flight behind
    # it, and refused (commit 3). B's resend meanwhile is not answered as a duplicate.
    b = faulty_broker(broker_factory, stomp_client, "commit:2:stall,commit:3:map_full")
    q = queue("inflight")
    a = stomp_client(b)
    r0 = a.send(queue("slow"), "slow", wait=False)
    time.sleep(0.2)
    r1 = a.send(q, "first", headers={ID: "G"}, wait=False)
    time.sleep(0.2)
    bc = stomp_client(b)
    rb = bc.send(q, "resend", headers={ID: "G"}, wait=False)
    a.wait_receipt(r0)
    got = wait_outcome(a, r1)
    assert got != "RECEIPT" and "message not stored" in got.headers["message"], got
    got = wait_outcome(bc, rb)
    assert got != "RECEIPT", "the resend was answered while the first SEND was refused"
    assert "_AMQ_DUPL_ID 'G'" in got.headers["message"], got
    c = stomp_client(b)
    assert not send_id(c, q, "third", "G")
    assert bodies(look(b, stomp_client, q)) == ["third"]
    b.kill9()


def test_a_refused_commit_or_prepare_leaves_its_ids_free(broker_factory, stomp_client):
    # Commit 2: the queue's record (the transactional SEND's); commit 3: the COMMIT, refused;
    # commit 4: the XA branch's prepare (its SEND wrote nothing), refused.
    b = faulty_broker(broker_factory, stomp_client, "commit:3:map_full,commit:4:map_full")
    q = queue("txrefused")
    c = stomp_client(b)
    c.begin("T")
    c.send(q, "in T", headers={ID: "H", "transaction": "T"})
    message = commit_error(c, "T")
    assert "XAER_RMFAIL" in message and "store refused" in message, message
    x = new_xid()
    d = stomp_client(b)
    xa_branch(d, x, [(q, "in the branch", "K")])
    assert d.xa("PREPARE", x).result == "XAER_RMFAIL"
    p = stomp_client(b)
    assert not send_id(p, q, "H outside", "H")
    assert not send_id(p, q, "K outside", "K")  # a refused prepare holds nothing
    ok(d, "ROLLBACK", x)
    assert bodies(look(b, stomp_client, q)) == ["H outside", "K outside"]
    b.kill9()
