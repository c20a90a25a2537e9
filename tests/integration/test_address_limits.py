"""Queue limits of the address settings (docs/configuration.md, "Queue limits"; docs/stomp.md, "Full
queues"): max-size-messages and max-size-bytes per queue (a /queue/NAME's queue, each subscription of
a /topic/NAME on its own), address-full-policy FAIL, DROP, DROP-HEAD and BLOCK, dead-letter-on-drop
and ring-size, each at its edge (exactly N fit, the next does not); in local and XA transactions
(refused at SEND by making the transaction rollback-only, and checked again at prepare or commit, so
that transactions committing together never pass a limit); under 8 concurrent producers; across
SIGKILL, SIGHUP and a store that refuses a write. Each test ends with `escrow check`."""

import re
import threading
import time

import pytest

from conftest import SLOW, TIMEOUT, RawStomp, check_store, frame_bytes, new_xid, unique
from test_config import run_escrowd
from test_failure_paths import admin, error_message, expect_error, faulty_broker, http_get, outcome
from test_reload import hangup, wait_log
from test_undelivered import toml_value

HTTP = '[http]\nlisten = "127.0.0.1:0"\n'
BASE = {"match": "#", "dead-letter-address": "DLQ", "expiry-address": "ExpiryQueue"}


def config(*entries, head=""):
    """`head`, the usual "#" table, then one [[address-settings]] table per dict."""
    text = head
    for e in (BASE, *entries):
        text += "\n[[address-settings]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in e.items())
    return text


def limit(match, **keys):
    return {"match": match, **{k.replace("_", "-"): v for k, v in keys.items()}}


def name(prefix="lim"):
    """A queue name whose first word is `prefix` (patterns match it word by word)."""
    return f"{prefix}.{unique('q')}"


def try_send(broker, stomp_client, destination, body, headers=None):
    """Sends on a connection of its own (an ERROR closes it): "RECEIPT", or the ERROR's message."""
    p = stomp_client(broker)
    try:
        got = outcome(p, p.send(destination, body, headers=headers, wait=False))
        return got if got == "RECEIPT" else error_message(got)
    finally:
        p.close()


def fill(broker, stomp_client, destination, bodies):
    """Sends `bodies`, each answered by its RECEIPT."""
    p = stomp_client(broker)
    for body in bodies:
        p.send(destination, body)
    p.close()


def show(broker, stomp_client, queue_name):
    """ADMIN queue-show: depth, bytes, settings."""
    a = stomp_client(broker)
    try:
        return admin(a, "queue-show", name=queue_name)
    finally:
        a.close()


def stored(broker, stomp_client, queue_name):
    """The stored messages of a queue in queue order (ADMIN browse: reads, changes nothing), as
    (body, headers)."""
    a = stomp_client(broker)
    try:
        return [(m["body"], m["headers"]) for m in admin(a, "browse", name=queue_name, count=1000)["messages"]]
    finally:
        a.close()


def stored_bodies(broker, stomp_client, queue_name):
    return [body for body, _ in stored(broker, stomp_client, queue_name)]


def durable_subscriptions_of(broker, stomp_client, topic, n):
    """n durable subscriptions "s" of /topic/`topic`, by clients TOPIC-c0 ... (their consumers gone):
    their names as escrow shows them."""
    names = []
    for i in range(n):
        d = stomp_client(broker, headers={"client-id": f"{topic}-c{i}"})
        d.subscribe(f"/topic/{topic}", id=f"s{i}", headers={"durable-subscription-name": "s"})
        d.close()
        names.append(f"{topic}-c{i}.s")
    return names


def bad_setting_stops_the_broker(tmp_path, key, value, needle):
    """escrowd refuses an [[address-settings]] table with `key = value`, naming file, line and key."""
    path = tmp_path / "bad.toml"
    path.write_text(f'[[address-settings]]\nmatch = "#"\n{key} = {value}\n')
    r = run_escrowd(["--config", str(path), "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d")], tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert f"{path}:3: address-settings[1].{key} {needle}" in r.stderr, r.stderr


def full(queue_name, why, policy="FAIL", kind="queue"):
    return f"{kind} '{queue_name}' is full: {why} (address-full-policy {policy}); consume messages or raise the limit"


def dropped_metric(broker, queue_name, reason):
    status, body = http_get(broker, "/metrics")
    assert status == 200, body
    assert "# TYPE escrow_messages_dropped_total counter" in body
    for line in body.splitlines():
        if line.startswith("escrow_messages_dropped_total{") and f'queue="{queue_name}"' in line and \
                f'reason="{reason}"' in line:
            return float(line.split()[-1])
    return 0.0


def varint_size(n):
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def stored_size(destination, body, headers=(), sender=""):
    """storage::message_record::encoded_size() of a persistent SEND with these headers (the
    destination, receipt and content-length are the broker's own, not kept), as max-size-bytes counts
    it: flags, priority, expires, timestamp, destination, headers, body, sender."""
    def string(s):
        return varint_size(len(s)) + len(s)
    size = 3 + 8 + 8 + string(destination.encode()) + varint_size(len(headers)) + string(body.encode())
    for k, v in headers:
        size += string(k.encode()) + string(v.encode())
    return size + string(sender.encode())


def raw_send(broker, destination, body, headers=()):
    """One SEND on a raw connection of its own: "RECEIPT", or the ERROR's message."""
    s = RawStomp(broker.port)
    try:
        s.connect()
        s.send(frame_bytes("SEND", [("destination", destination), *headers, ("receipt", "r")], body))
        f = s.read_frame()
        return "RECEIPT" if f.command == "RECEIPT" else f.headers.get("message")
    finally:
        s.close()


def ok(c, verb, xid=None, flags=None, **headers):
    r = c.xa(verb, xid, flags, **headers)
    assert r.result == "XA_OK", f"XA-{verb} {xid} flags={flags}: expected XA_OK, got {r}"
    return r


# --------------------------------------------------------------------------------------------
# The settings
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key,value,needle", [
    ("max-size-messages", "-2", "must be a count of messages (0 or more), or -1 for no limit"),
    ("max-size-messages", '"ten"', "must be a count of messages"),
    ("max-size-bytes", "1.5", "must be a size in bytes (0 or more), or -1 for no limit"),
    ("ring-size", "0", "must be a count of messages (at least 1), or -1 for no ring"),
    ("address-full-policy", '"PAGE"', 'must be "FAIL", "DROP", "DROP-HEAD" or "BLOCK"'),
    ("dead-letter-on-drop", "1", "must be true or false"),
], ids=["negative-messages", "text-messages", "float-bytes", "zero-ring", "paging", "int-bool"])
def test_bad_limits_stop_the_broker_naming_file_line_and_key(tmp_path, key, value, needle):
    bad_setting_stops_the_broker(tmp_path, key, value, needle)


def test_policy_names_are_case_insensitive_with_rabbitmqs_spellings(broker_factory, stomp_client):
    spellings = {"fail": "FAIL", "Drop": "DROP", "drop-head": "DROP-HEAD", "block": "BLOCK",
                 "reject-publish": "FAIL", "DROP-HEAD": "DROP-HEAD"}
    entries = [limit(f"p{i}.#", max_size_messages=10, address_full_policy=spelling)
               for i, spelling in enumerate(spellings)]
    b = broker_factory(config=config(*entries))
    for i, meant in enumerate(spellings.values()):
        q = name(f"p{i}")
        fill(b, stomp_client, f"/queue/{q}", ["x"])
        s = show(b, stomp_client, q)["settings"]
        assert (s["address_full_policy"], s["max_size_messages"], s["max_size_bytes"], s["ring_size"]) == \
            (meant, 10, -1, -1), s
    # Unlimited by default.
    q = name("other")
    fill(b, stomp_client, f"/queue/{q}", ["x"])
    s = show(b, stomp_client, q)["settings"]
    assert (s["address_full_policy"], s["max_size_messages"], s["max_size_bytes"], s["ring_size"],
            s["dead_letter_on_drop"]) == ("FAIL", -1, -1, -1, False), s
    b.kill9()


# --------------------------------------------------------------------------------------------
# FAIL
# --------------------------------------------------------------------------------------------

def test_fail_takes_exactly_max_size_messages_then_refuses_with_an_error(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("lim.#", max_size_messages=3)))
    q = name()
    fill(b, stomp_client, f"/queue/{q}", ["m0", "m1", "m2"])
    assert try_send(b, stomp_client, f"/queue/{q}", "m3") == full(q, "max-size-messages 3 reached")
    assert stored_bodies(b, stomp_client, q) == ["m0", "m1", "m2"]  # nothing of it was stored
    assert show(b, stomp_client, q)["depth"] == 3
    # A message in flight still counts; once acknowledged its place is free again.
    c = stomp_client(b)
    sub = c.subscribe(f"/queue/{q}", ack="client-individual", headers={"prefetch-count": "1"})
    (m,) = c.wait_messages(1, subscription=sub)
    assert try_send(b, stomp_client, f"/queue/{q}", "m3") == full(q, "max-size-messages 3 reached")
    c.ack(m, receipt=True)
    assert try_send(b, stomp_client, f"/queue/{q}", "m3") == "RECEIPT"
    assert try_send(b, stomp_client, f"/queue/{q}", "m4") == full(q, "max-size-messages 3 reached")
    c.close()
    b.kill9()


def test_max_size_bytes_counts_each_messages_stored_size(broker_factory, stomp_client):
    q = name()
    dest = f"/queue/{q}"
    one = stored_size(dest, "x" * 100)
    limit_bytes = 3 * one - 1  # two of them, and one a byte smaller
    b = broker_factory(config=config(limit("lim.#", max_size_bytes=limit_bytes)))
    assert raw_send(b, dest, "x" * 100) == "RECEIPT"
    assert raw_send(b, dest, "y" * 100) == "RECEIPT"
    assert show(b, stomp_client, q)["bytes"] == 2 * one
    assert raw_send(b, dest, "z" * 100) == full(
        q, f"max-size-bytes {limit_bytes} reached (it holds {2 * one} bytes, {one} more do not fit)")
    assert raw_send(b, dest, "w" * 99) == "RECEIPT"  # exactly up to the limit
    assert show(b, stomp_client, q)["bytes"] == limit_bytes
    assert raw_send(b, dest, "v").startswith(f"queue '{q}' is full: max-size-bytes {limit_bytes} reached")
    # A message larger than the limit can never fit.
    other = name()
    assert raw_send(b, f"/queue/{other}", "b" * limit_bytes) == (
        f"queue '{other}' cannot take this message: its {stored_size('/queue/' + other, 'b' * limit_bytes)} bytes "
        f"are more than max-size-bytes {limit_bytes} (address-full-policy FAIL); send a smaller message or raise "
        f"the limit")
    assert stored_bodies(b, stomp_client, q) == ["x" * 100, "y" * 100, "w" * 99]
    b.kill9()


def test_the_most_specific_match_sets_the_limit(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("capped.#", max_size_messages=1), limit("capped.eu", max_size_messages=2)))
    assert [try_send(b, stomp_client, "/queue/capped.us", f"m{i}") for i in range(2)] == \
        ["RECEIPT", full("capped.us", "max-size-messages 1 reached")]
    assert [try_send(b, stomp_client, "/queue/capped.eu", f"m{i}") for i in range(3)] == \
        ["RECEIPT", "RECEIPT", full("capped.eu", "max-size-messages 2 reached")]
    free = name("free")
    fill(b, stomp_client, f"/queue/{free}", [f"m{i}" for i in range(5)])
    assert show(b, stomp_client, free)["depth"] == 5
    b.kill9()


def test_a_topic_under_fail_is_refused_when_any_subscription_is_full(broker_factory, stomp_client):
    topic = name("news")
    b = broker_factory(config=config(limit("news.#", max_size_messages=2)))
    slow, fast = stomp_client(b), stomp_client(b)
    slow_sub = slow.subscribe(f"/topic/{topic}", ack="client-individual")  # never acknowledges
    fast_sub = fast.subscribe(f"/topic/{topic}")
    fill(b, stomp_client, f"/topic/{topic}", ["m0", "m1"])
    slow.wait_messages(2, subscription=slow_sub)
    fast.wait_messages(2, subscription=fast_sub)
    got = try_send(b, stomp_client, f"/topic/{topic}", "m2")
    assert re.fullmatch(rf"subscription 'subscription-\d+-{slow_sub}' of topic '{re.escape(topic)}' is full: "
                        r"max-size-messages 2 reached \(address-full-policy FAIL\); consume messages or raise the "
                        r"limit", got), got
    time.sleep(0.2 * SLOW)
    assert [m.body for m in fast.messages] == ["m0", "m1"]  # the other subscription did not get it either
    slow.close()
    fast.close()
    b.kill9()


# --------------------------------------------------------------------------------------------
# FAIL in transactions
# --------------------------------------------------------------------------------------------

def test_fail_in_a_local_transaction_makes_it_rollback_only_and_its_commit_an_error(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("lim.#", max_size_messages=2)))
    q = name()
    dest = f"/queue/{q}"
    fill(b, stomp_client, dest, ["outside"])
    c = stomp_client(b)
    c.begin("t")
    c.send(dest, "fits", headers={"transaction": "t"})
    rid = c.send(dest, "does-not-fit", headers={"transaction": "t"})  # its own counts with the one staged
    with c.listener.cond:
        said = c.listener.receipt_frames[rid].headers.get("message", "")
    refusal = (f"queue '{q}' is full: max-size-messages 2 reached with the 1 message(s) this transaction sends to "
               f"it (address-full-policy FAIL): the transaction is rollback-only; nothing of it takes effect")
    assert said == refusal
    rid = c.commit("t", wait=False)
    assert expect_error(c, rid, "COMMIT of transaction 't' refused: ") == \
        "COMMIT of transaction 't' refused: " + refusal
    assert stored_bodies(b, stomp_client, q) == ["outside"]

    # At SEND it fitted; at COMMIT another producer had taken the place: refused then.
    c = stomp_client(b)
    c.begin("t2")
    c.send(dest, "staged", headers={"transaction": "t2"})
    fill(b, stomp_client, dest, ["second"])
    rid = c.commit("t2", wait=False)
    assert expect_error(c, rid) == (
        f"COMMIT of transaction 't2' refused: queue '{q}' is full: max-size-messages 2 reached for the 1 message(s) "
        f"the transaction sends to it (address-full-policy FAIL): rolled back; nothing of the transaction took effect")
    assert stored_bodies(b, stomp_client, q) == ["outside", "second"]
    # ABORT of a rollback-only transaction is an ordinary ABORT.
    c = stomp_client(b)
    c.begin("t3")
    c.send(dest, "no", headers={"transaction": "t3"})
    c.abort("t3")
    c.close()
    b.kill9()


def test_fail_in_an_xa_branch_answers_xa_rb_at_end_prepare_and_commit(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("lim.#", max_size_messages=1)))
    q = name()
    dest = f"/queue/{q}"
    c = stomp_client(b)
    # Refused at SEND: the branch is rollback-only, its end and prepare say so.
    x1 = new_xid(gtrid=unique("g").encode())
    ok(c, "START", x1)
    c.send(dest, "a")
    rid = c.send(dest, "b")
    with c.listener.cond:
        assert "is full: max-size-messages 1 reached" in c.listener.receipt_frames[rid].headers["message"]
    r = c.xa("END", x1, "TMSUCCESS")
    assert r.result == "XA_RBROLLBACK" and "rollback-only" in r.message, r
    r = c.xa("PREPARE", x1)
    assert r.result == "XA_RBROLLBACK", r
    assert c.xa("PREPARE", x1).result == "XAER_NOTA"  # rolled back and gone
    # Each fitted at SEND; full at prepare or one-phase commit (another producer filled it):
    # XA_RBOTHER, with the reason.
    x2, x3 = new_xid(gtrid=unique("g").encode()), new_xid(gtrid=unique("g").encode())
    for x in (x2, x3):
        ok(c, "START", x)
        c.send(dest, str(x))
        ok(c, "END", x, "TMSUCCESS")
    fill(b, stomp_client, dest, ["outside"])
    r = c.xa("PREPARE", x2)
    assert r.result == "XA_RBOTHER", r
    assert r.message == (f"queue '{q}' is full: max-size-messages 1 reached for the 1 message(s) the transaction "
                         f"sends to it (address-full-policy FAIL): rolled back; nothing of the transaction took effect")
    r = c.xa("COMMIT", x3, "TMONEPHASE")
    assert r.result == "XA_RBOTHER" and "is full: max-size-messages 1 reached" in r.message, r
    assert stored_bodies(b, stomp_client, q) == ["outside"]
    c.close()
    b.kill9()


def test_two_local_transactions_committing_together_into_room_for_one(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("lim.#", max_size_messages=1)))
    q = name()
    dest = f"/queue/{q}"
    c1, c2 = stomp_client(b), stomp_client(b)
    for c, t in ((c1, "t1"), (c2, "t2")):
        c.begin(t)
        c.send(dest, t, headers={"transaction": t})  # each fits alone
    r1, r2 = c1.commit("t1", wait=False), c2.commit("t2", wait=False)
    results = [outcome(c1, r1), outcome(c2, r2)]
    assert sorted(r == "RECEIPT" for r in results) == [False, True], results
    loser = next(r for r in results if r != "RECEIPT")
    assert "is full: max-size-messages 1 reached" in error_message(loser), error_message(loser)
    winner = "t1" if results[0] == "RECEIPT" else "t2"
    assert stored_bodies(b, stomp_client, q) == [winner]
    b.kill9()


def test_a_prepared_branch_holds_its_room_until_decided_across_a_restart(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("lim.#", max_size_messages=1)))
    q = name()
    dest = f"/queue/{q}"
    c1, c2 = stomp_client(b), stomp_client(b)
    x1, x2 = new_xid(gtrid=unique("g").encode()), new_xid(gtrid=unique("g").encode())
    for c, x in ((c1, x1), (c2, x2)):
        ok(c, "START", x)
        c.send(dest, str(x))
        ok(c, "END", x, "TMSUCCESS")
    ok(c1, "PREPARE", x1)
    r = c2.xa("PREPARE", x2)
    assert r.result == "XA_RBOTHER" and "is full: max-size-messages 1 reached" in r.message, r
    c1.close()
    c2.close()
    b.kill9()
    b.start()
    # The recovered prepared branch still holds the place: a SEND is refused, and so is a prepare.
    assert try_send(b, stomp_client, dest, "outside") == full(q, "max-size-messages 1 reached")
    c = stomp_client(b)
    x3 = new_xid(gtrid=unique("g").encode())
    ok(c, "START", x3)
    c.send(dest, "x3")  # refused at SEND: the branch is rollback-only
    assert c.xa("END", x3, "TMSUCCESS").result == "XA_RBROLLBACK"
    assert c.xa("PREPARE", x3).result == "XA_RBROLLBACK"
    ok(c, "COMMIT", x1)
    assert stored_bodies(b, stomp_client, q) == [str(x1)]
    assert try_send(b, stomp_client, dest, "outside") == full(q, "max-size-messages 1 reached")
    # Rolled back instead, a prepared branch gives its place back.
    consumer = stomp_client(b)
    sub = consumer.subscribe(dest, ack="client-individual")
    (m,) = consumer.wait_messages(1, subscription=sub)
    consumer.ack(m, receipt=True)
    x4 = new_xid(gtrid=unique("g").encode())
    ok(c, "START", x4)
    c.send(dest, "x4")
    ok(c, "END", x4, "TMSUCCESS")
    ok(c, "PREPARE", x4)
    assert try_send(b, stomp_client, dest, "outside") == full(q, "max-size-messages 1 reached")
    ok(c, "ROLLBACK", x4)
    consumer.close()
    assert try_send(b, stomp_client, dest, "outside") == "RECEIPT"
    c.close()
    b.kill9()


# --------------------------------------------------------------------------------------------
# Concurrency
# --------------------------------------------------------------------------------------------

def test_eight_concurrent_producers_fill_the_queue_exactly_to_its_limit(broker_factory, stomp_client):
    n, producers, attempts = 40, 8, 10
    b = broker_factory(config=config(limit("lim.#", max_size_messages=n)))
    q = name()
    dest = f"/queue/{q}"
    start = threading.Barrier(producers)
    results = [[] for _ in range(producers)]

    def produce(i):
        s = RawStomp(b.port)
        s.connect()
        start.wait()
        for k in range(attempts):
            s.send(frame_bytes("SEND", [("destination", dest), ("receipt", f"{i}-{k}")], f"p{i}-{k}"))
            f = s.read_frame()
            if f.command == "RECEIPT":
                assert f.headers["receipt-id"] == f"{i}-{k}", f
                results[i].append("RECEIPT")
                continue
            assert f.command == "ERROR" and f.headers.get("receipt-id") == f"{i}-{k}", f
            results[i].append(f.headers["message"])
            s.close()  # an ERROR closes the connection: a new one for the next attempt
            s = RawStomp(b.port)
            s.connect()
        s.close()

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(8 * TIMEOUT)
    outcomes = [r for rs in results for r in rs]
    assert len(outcomes) == producers * attempts, results
    assert outcomes.count("RECEIPT") == n, results
    assert set(outcomes) == {"RECEIPT", full(q, f"max-size-messages {n} reached")}, set(outcomes)
    assert show(b, stomp_client, q)["depth"] == n
    assert len(stored_bodies(b, stomp_client, q)) == n
    b.kill9()


# --------------------------------------------------------------------------------------------
# DROP, DROP-HEAD, ring-size
# --------------------------------------------------------------------------------------------

def test_drop_answers_the_receipt_counts_and_logs_the_dropped_messages(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("lim.#", max_size_messages=2, address_full_policy="DROP"), head=HTTP))
    q = name()
    fill(b, stomp_client, f"/queue/{q}", [f"m{i}" for i in range(5)])  # every one answered by its RECEIPT
    assert stored_bodies(b, stomp_client, q) == ["m0", "m1"]
    assert dropped_metric(b, q, "address-full") == 3
    line = f"queue '{q}' is full: a new message was dropped (1 drop(s) since the last such line; " \
           f"max-size-messages 2, address-full-policy DROP)"
    b.wait_log(line)
    assert b.log.count(f"queue '{q}' is full") == 1  # at most a line every few seconds per queue
    b.kill9()


def test_a_topic_under_drop_leaves_the_full_subscription_out(broker_factory, stomp_client):
    topic = name("feed")
    b = broker_factory(config=config(limit("feed.#", max_size_messages=2, address_full_policy="DROP"), head=HTTP))
    slow, fast = stomp_client(b), stomp_client(b)
    slow_sub = slow.subscribe(f"/topic/{topic}", ack="client-individual")
    fast_sub = fast.subscribe(f"/topic/{topic}")
    fill(b, stomp_client, f"/topic/{topic}", [f"m{i}" for i in range(4)])
    fast.wait_messages(4, subscription=fast_sub)
    assert [m.body for m in slow.wait_messages(2, subscription=slow_sub)] == ["m0", "m1"]
    time.sleep(0.2 * SLOW)
    assert [m.body for m in slow.messages] == ["m0", "m1"]
    status, body = http_get(b, "/metrics")
    (line,) = [x for x in body.splitlines() if x.startswith("escrow_messages_dropped_total{")
               and 'kind="subscription"' in x]
    assert line.endswith(" 2") and 'reason="address-full"' in line, line
    slow.close()
    fast.close()
    b.kill9()


@pytest.mark.parametrize("dead_letter", [False, True], ids=["deleted", "dead-lettered"])
def test_drop_head_removes_the_oldest_ready_message_in_the_same_batch(broker_factory, stomp_client, dead_letter):
    dlq = name("dropped")
    keys = dict(max_size_messages=3, address_full_policy="DROP-HEAD")
    if dead_letter:
        keys.update(dead_letter_on_drop=True, dead_letter_address=dlq)
    b = broker_factory(config=config(limit("lim.#", **keys), head=HTTP))
    q = name()
    fill(b, stomp_client, f"/queue/{q}", [f"m{i}" for i in range(6)])
    assert stored_bodies(b, stomp_client, q) == ["m3", "m4", "m5"]
    assert show(b, stomp_client, q)["depth"] == 3
    assert dropped_metric(b, q, "drop-head") == 3
    if dead_letter:
        moved = stored(b, stomp_client, dlq)
        assert [body for body, _ in moved] == ["m0", "m1", "m2"]
        for _, headers in moved:
            assert (headers["_HQ_REASON"], headers["_HQ_ORIG_QUEUE"], headers["_HQ_ORIG_ADDRESS"]) == \
                ("address-full", q, f"/queue/{q}"), headers
    else:
        b.wait_log(f"queue '{q}' is full: its oldest message")
        assert "was deleted (DROP-HEAD)" in b.log
    # A message in flight is never taken from its consumer: the oldest ready one goes instead.
    c = stomp_client(b)
    sub = c.subscribe(f"/queue/{q}", ack="client-individual", headers={"prefetch-count": "1"})
    (m,) = c.wait_messages(1, subscription=sub)
    assert m.body == "m3"
    fill(b, stomp_client, f"/queue/{q}", ["m6"])
    assert stored_bodies(b, stomp_client, q) == ["m3", "m5", "m6"]
    c.close()
    b.kill9()


def test_ring_size_keeps_the_newest_and_never_takes_from_a_consumer(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("ring.#", ring_size=3), limit("ring2.#", ring_size=2), head=HTTP))
    q = name("ring")
    fill(b, stomp_client, f"/queue/{q}", [f"m{i}" for i in range(6)])
    assert stored_bodies(b, stomp_client, q) == ["m3", "m4", "m5"]
    assert dropped_metric(b, q, "ring") == 3
    # m0 in flight stays; the ready ones make room.
    q2 = name("ring2")
    c = stomp_client(b)
    sub = c.subscribe(f"/queue/{q2}", ack="client-individual", headers={"prefetch-count": "1"})
    fill(b, stomp_client, f"/queue/{q2}", ["m0"])
    (first,) = c.wait_messages(1, subscription=sub)
    fill(b, stomp_client, f"/queue/{q2}", ["m1", "m2", "m3"])
    assert stored_bodies(b, stomp_client, q2) == ["m0", "m3"]
    c.ack(first, receipt=True)
    assert [m.body for m in c.wait_messages(2, subscription=sub)] == ["m0", "m3"]
    c.close()
    # Every message in flight: the ring holds more until they are acknowledged.
    q3 = name("ring2")
    c = stomp_client(b)
    sub = c.subscribe(f"/queue/{q3}", ack="client-individual", headers={"prefetch-count": "5"})
    fill(b, stomp_client, f"/queue/{q3}", ["a", "b", "c"])
    assert [m.body for m in c.wait_messages(3, subscription=sub)] == ["a", "b", "c"]
    assert show(b, stomp_client, q3)["depth"] == 3
    c.close()
    b.kill9()


# --------------------------------------------------------------------------------------------
# BLOCK
# --------------------------------------------------------------------------------------------

def test_block_parks_the_producer_until_a_consumer_elsewhere_makes_room(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("blk.#", max_size_messages=2, address_full_policy="BLOCK")))
    q, other = name("blk"), name("free")
    # The producer promises heart-beats every 200 ms (and sends them): while blocked it is not read,
    # and must not be timed out for the silence.
    p = RawStomp(b.port)
    p.connect("accept-version:1.2\nhost:localhost\nheart-beat:200,0\n")
    stop = threading.Event()

    def beat():
        while not stop.wait(0.1):
            p.send(b"\n")

    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    p.send(b"".join(frame_bytes("SEND", [("destination", f"/queue/{q}"), ("receipt", f"r{i}")], f"m{i}")
                    for i in range(5)) +
           frame_bytes("SEND", [("destination", f"/queue/{other}"), ("receipt", "behind")], "behind"))
    got = [p.read_frame().headers.get("receipt-id") for _ in range(2)]
    assert got == ["r0", "r1"]
    assert [f.command for f in p.pump(1.0 * SLOW)] == []  # blocked, and what it sent after waits too
    # Another producer, to another address, is not blocked; nor is a consumer on another connection.
    assert try_send(b, stomp_client, f"/queue/{other}", "elsewhere") == "RECEIPT"
    time.sleep(2.5)  # blocked well past the heart-beat timeout (1 s, escrowd's minimum, + the 1 s grace)
    c = stomp_client(b)
    sub = c.subscribe(f"/queue/{q}", ack="client-individual")
    seen = []
    while len(seen) < 5:
        msgs = c.wait_messages(len(seen) + 1, subscription=sub)
        m = msgs[len(seen)]
        seen.append(m.body)
        c.ack(m, receipt=True)
    assert seen == [f"m{i}" for i in range(5)]
    receipts = []
    while len(receipts) < 4:
        f = p.read_frame()
        assert f.command == "RECEIPT", f
        receipts.append(f.headers["receipt-id"])
    assert receipts == ["r2", "r3", "r4", "behind"]  # in order, the frame behind them last
    stop.set()
    beater.join()
    assert not p.closed
    p.close()
    assert stored_bodies(b, stomp_client, other) == ["elsewhere", "behind"]
    b.kill9()


def test_a_blocked_connection_that_closes_leaves_nothing_behind(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("blk.#", max_size_messages=1, address_full_policy="BLOCK")))
    q = name("blk")
    p = RawStomp(b.port)
    p.connect()
    p.send(b"".join(frame_bytes("SEND", [("destination", f"/queue/{q}"), ("receipt", f"r{i}")], f"m{i}")
                    for i in range(3)))
    assert p.read_frame().headers.get("receipt-id") == "r0"
    assert p.pump(0.3 * SLOW) == []
    p.close()
    c = stomp_client(b)
    sub = c.subscribe(f"/queue/{q}", ack="client-individual")
    (m,) = c.wait_messages(1, subscription=sub)
    c.ack(m, receipt=True)
    time.sleep(0.3 * SLOW)
    assert [x.body for x in c.messages] == ["m0"]  # the parked SENDs went with their connection
    assert try_send(b, stomp_client, f"/queue/{q}", "next") == "RECEIPT"
    c.close()
    b.kill9()


def test_block_inside_a_transaction_is_refused_at_commit(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("blk.#", max_size_messages=1, address_full_policy="BLOCK")))
    q = name("blk")
    fill(b, stomp_client, f"/queue/{q}", ["there"])
    c = stomp_client(b)
    c.begin("t")
    c.send(f"/queue/{q}", "staged", headers={"transaction": "t"})  # a transaction's SEND does not wait
    rid = c.commit("t", wait=False)
    assert expect_error(c, rid) == (
        f"COMMIT of transaction 't' refused: queue '{q}' is full: max-size-messages 1 reached for the 1 message(s) "
        f"the transaction sends to it (address-full-policy BLOCK, which a transaction's commit does not wait for): "
        f"rolled back; nothing of the transaction took effect")
    assert stored_bodies(b, stomp_client, q) == ["there"]
    b.kill9()


# --------------------------------------------------------------------------------------------
# Restart, reload, a refused write
# --------------------------------------------------------------------------------------------

def test_sigkill_and_restart_keep_the_limit_exact(broker_factory, stomp_client):
    topic = name("tk")
    b = broker_factory(config=config(limit("lim.#", max_size_messages=3),
                                     limit("tk.#", max_size_bytes=10 * stored_size(f"/topic/{topic}", "t0"))))
    q = name()
    fill(b, stomp_client, f"/queue/{q}", ["m0", "m1", "m2"])
    # Two durable subscriptions share each message (stored once): each counts its bytes.
    subs = durable_subscriptions_of(b, stomp_client, topic, 2)
    fill(b, stomp_client, f"/topic/{topic}", ["t0", "t1"])
    before = [show(b, stomp_client, s)["bytes"] for s in subs]
    assert before == [2 * stored_size(f"/topic/{topic}", "t0")] * 2, before
    b.kill9()  # escrow check included
    b.start()
    assert try_send(b, stomp_client, f"/queue/{q}", "m3") == full(q, "max-size-messages 3 reached")
    assert show(b, stomp_client, q)["depth"] == 3
    assert [show(b, stomp_client, s)["bytes"] for s in subs] == before
    c = stomp_client(b)
    sub = c.subscribe(f"/queue/{q}", ack="client-individual", headers={"prefetch-count": "1"})
    (m,) = c.wait_messages(1, subscription=sub)
    c.ack(m, receipt=True)
    c.close()
    assert try_send(b, stomp_client, f"/queue/{q}", "m3") == "RECEIPT"
    assert try_send(b, stomp_client, f"/queue/{q}", "m4") == full(q, "max-size-messages 3 reached")
    b.kill9()


def test_a_purge_gives_the_bytes_back_and_unlimited_queues_count_theirs_across_a_restart(broker_factory,
                                                                                          stomp_client):
    q, free = name(), name("free")
    one = stored_size(f"/queue/{q}", "x" * 50)
    b = broker_factory(config=config(limit("lim.#", max_size_bytes=2 * one)))
    for dest in (f"/queue/{q}", f"/queue/{free}"):
        assert [raw_send(b, dest, "x" * 50) for _ in range(2)] == ["RECEIPT"] * 2
    assert raw_send(b, f"/queue/{q}", "x" * 50).startswith(f"queue '{q}' is full: max-size-bytes {2 * one} reached")
    free_bytes = show(b, stomp_client, free)["bytes"]
    assert free_bytes == 2 * stored_size(f"/queue/{free}", "x" * 50)
    b.kill9()
    mark = len(b.log)
    b.start()
    wait_log(b, "(in the background)", since=mark)  # the count of the queues without limits
    assert show(b, stomp_client, free)["bytes"] == free_bytes
    assert show(b, stomp_client, q)["bytes"] == 2 * one
    a = stomp_client(b)
    assert admin(a, "purge", name=q)["purged"] == 2
    a.close()
    assert (show(b, stomp_client, q)["depth"], show(b, stomp_client, q)["bytes"]) == (0, 0)
    assert [raw_send(b, f"/queue/{q}", "y" * 50) for _ in range(2)] == ["RECEIPT"] * 2
    assert raw_send(b, f"/queue/{q}", "y" * 50).startswith(f"queue '{q}' is full")
    b.kill9()


def test_sighup_raises_and_lowers_a_limit_without_deleting_anything(broker_factory, stomp_client):
    text = lambda n, policy="FAIL": config(limit("lim.#", max_size_messages=n, address_full_policy=policy))  # noqa
    b = broker_factory(config=text(2))
    q = name()
    dest = f"/queue/{q}"
    fill(b, stomp_client, dest, ["m0", "m1"])
    assert try_send(b, stomp_client, dest, "m2") == full(q, "max-size-messages 2 reached")
    wait_log(b, "SIGHUP: reloaded", hangup(b, text(4)))
    fill(b, stomp_client, dest, ["m2", "m3"])
    assert try_send(b, stomp_client, dest, "m4") == full(q, "max-size-messages 4 reached")
    wait_log(b, "SIGHUP: reloaded", hangup(b, text(1)))
    assert try_send(b, stomp_client, dest, "m4") == full(q, "max-size-messages 1 reached")
    assert stored_bodies(b, stomp_client, q) == ["m0", "m1", "m2", "m3"]  # lowering deletes nothing
    # A producer blocked on the queue goes on once a reload gives it room.
    wait_log(b, "SIGHUP: reloaded", hangup(b, text(4, "BLOCK")))
    p = RawStomp(b.port)
    p.connect()
    p.send(frame_bytes("SEND", [("destination", dest), ("receipt", "blocked")], "m4"))
    assert p.pump(0.5 * SLOW) == []
    wait_log(b, "SIGHUP: reloaded", hangup(b, text(5, "BLOCK")))
    f = p.read_frame()
    assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", "blocked"), f
    p.close()
    assert stored_bodies(b, stomp_client, q) == ["m0", "m1", "m2", "m3", "m4"]
    # DROP-HEAD under a lowered limit: one out for each new one, never a purge.
    wait_log(b, "SIGHUP: reloaded", hangup(b, text(2, "DROP-HEAD")))
    fill(b, stomp_client, dest, ["m5"])
    assert stored_bodies(b, stomp_client, q) == ["m1", "m2", "m3", "m4", "m5"]
    b.kill9()


def test_a_refused_send_frees_its_place(broker_factory, stomp_client):
    # Commit 1: the start-up queues; 2: a; 3: b (refused); 4: c.
    b = faulty_broker(broker_factory, stomp_client, "commit:3:map_full",
                      config=config(limit("lim.#", max_size_messages=2)))
    q = name()
    dest = f"/queue/{q}"
    assert try_send(b, stomp_client, dest, "a") == "RECEIPT"
    assert try_send(b, stomp_client, dest, "b").startswith("message not stored: ")
    assert try_send(b, stomp_client, dest, "c") == "RECEIPT"  # b's place was given back
    assert try_send(b, stomp_client, dest, "d") == full(q, "max-size-messages 2 reached")
    assert stored_bodies(b, stomp_client, q) == ["a", "c"]
    b.kill9()
    b.env = {}
    b.start()
    assert stored_bodies(b, stomp_client, q) == ["a", "c"]
    assert try_send(b, stomp_client, dest, "e") == full(q, "max-size-messages 2 reached")
    b.kill9()


def test_a_refused_drop_head_batch_keeps_the_oldest_and_drops_nothing(broker_factory, stomp_client):
    # Commit 2: a, 3: b, 4: c with a's removal (refused), 5: d with a's removal.
    b = faulty_broker(broker_factory, stomp_client, "commit:4:map_full",
                      config=config(limit("lim.#", max_size_messages=2, address_full_policy="DROP-HEAD"), head=HTTP))
    q = name()
    dest = f"/queue/{q}"
    assert [try_send(b, stomp_client, dest, body) for body in ("a", "b")] == ["RECEIPT"] * 2
    assert try_send(b, stomp_client, dest, "c").startswith("message not stored: ")
    assert stored_bodies(b, stomp_client, q) == ["a", "b"]  # neither lost nor both
    assert show(b, stomp_client, q)["depth"] == 2
    assert dropped_metric(b, q, "drop-head") == 0
    assert try_send(b, stomp_client, dest, "d") == "RECEIPT"
    assert stored_bodies(b, stomp_client, q) == ["b", "d"]
    assert dropped_metric(b, q, "drop-head") == 1
    b.kill9()
    b.env = {}
    b.start()
    assert stored_bodies(b, stomp_client, q) == ["b", "d"]
    check_store(b.data_dir)
    b.kill9()


def test_a_scheduled_message_counts_in_its_queue_only_once_due(broker_factory, stomp_client):
    """A full FAIL queue still takes a scheduled SEND; once due it joins the queue past the limit
    (as a move does), and counts then: the next plain SEND is refused."""
    b = broker_factory(config=config(limit("lim.#", max_size_messages=1)))
    q = name()
    fill(b, stomp_client, f"/queue/{q}", ["m0"])
    due = int(time.time() * 1000) + 400
    assert try_send(b, stomp_client, f"/queue/{q}", "later", headers={"_AMQ_SCHED_DELIVERY": str(due)}) == "RECEIPT"
    assert show(b, stomp_client, q)["depth"] == 1
    deadline = time.time() + 10
    while show(b, stomp_client, q)["depth"] < 2:
        assert time.time() < deadline, "the scheduled message never joined its queue"
        time.sleep(0.05)
    assert int(time.time() * 1000) >= due - 5, "joined before its time"
    assert try_send(b, stomp_client, f"/queue/{q}", "m2") == full(q, "max-size-messages 1 reached")
    assert stored_bodies(b, stomp_client, q) == ["m0", "later"]
    b.kill9()


def test_block_refuses_a_send_that_would_wait_for_its_own_connections_acknowledgements(broker_factory, stomp_client):
    """A connection holding a full BLOCK queue's messages unacknowledged would wait for itself (its
    ACK waits behind the parked SEND): its SEND gets an ERROR instead, and the queue goes on."""
    b = broker_factory(config=config(limit("blk.#", max_size_messages=2, address_full_policy="BLOCK")))
    q = name("blk")
    fill(b, stomp_client, f"/queue/{q}", ["m0", "m1"])
    c = stomp_client(b)
    sub = c.subscribe(f"/queue/{q}", ack="client-individual")
    c.wait_messages(2, subscription=sub)
    got = outcome(c, c.send(f"/queue/{q}", "m2", wait=False))
    assert got != "RECEIPT"
    message = error_message(got)
    assert f"queue '{q}' is full (address-full-policy BLOCK) and this connection holds 2 of its messages" in message
    assert "send on another connection" in message
    # Its deliveries came back with the closed connection; another connection drains them.
    assert sorted(stored_bodies(b, stomp_client, q)) == ["m0", "m1"]
    b.kill9()


def blocked_on(b, stomp_client):
    """Each connection's queue its SEND waits for room in (ADMIN connections), by connection id."""
    a = stomp_client(b)
    try:
        return {c["id"]: c["blocked_on"] for c in admin(a, "connections")["connections"]}
    finally:
        a.close()


def wait_blocked(b, stomp_client, expected):
    """Waits until the connections named in `expected` (id -> queue) wait there."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        now = blocked_on(b, stomp_client)
        if all(now.get(i) == q for i, q in expected.items()):
            return
        assert time.monotonic() < deadline, (now, expected)
        time.sleep(0.02)


def test_block_keeps_first_come_first_served_across_a_topics_subscriptions(broker_factory, stomp_client):
    """Two producers wait on one subscription; when it has room the first goes on to wait on the
    other subscription (still full), and the second, taken up after it, queues behind it there
    instead of passing it. Once that one has room, the first is stored first."""
    topic = name("tblk")
    b = broker_factory(config=config(limit("tblk.#", max_size_messages=1, address_full_policy="BLOCK")))
    subs = durable_subscriptions_of(b, stomp_client, topic, 2)
    fill(b, stomp_client, f"/topic/{topic}", ["t0"])  # both full
    producers, ids = [], []
    for body in ("p1", "p2"):
        s = RawStomp(b.port)
        s.connect()
        s.send(frame_bytes("SEND", [("destination", f"/topic/{topic}"), ("receipt", body)], body.encode()))
        producers.append(s)
        deadline = time.monotonic() + TIMEOUT
        while len(waiting := [i for i, q in blocked_on(b, stomp_client).items() if q]) < len(producers):
            assert time.monotonic() < deadline, "the SEND did not wait"
            time.sleep(0.02)
        ids.append(next(i for i in waiting if i not in ids))
    p1_id, p2_id = ids
    # The first waits on one subscription (whichever routing meets first); the second behind it.
    first = blocked_on(b, stomp_client)[p1_id]
    wait_blocked(b, stomp_client, {p2_id: first})
    order = [subs.index(first), 1 - subs.index(first)]
    second = subs[order[1]]

    def take_one(i):
        d = stomp_client(b, headers={"client-id": f"{topic}-c{i}"})
        sub = d.subscribe(f"/topic/{topic}", id=f"s{i}", ack="client-individual",
                          headers={"durable-subscription-name": "s", "prefetch-count": "1"})
        (m,) = d.wait_messages(1, subscription=sub)
        d.ack(m, receipt=True)
        d.close()
        return m.body

    assert take_one(order[0]) == "t0"
    wait_blocked(b, stomp_client, {p1_id: second, p2_id: second})
    assert take_one(order[1]) == "t0"
    f = producers[0].read_frame()
    assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", "p1"), f
    assert [stored_bodies(b, stomp_client, s) for s in subs] == [["p1"], ["p1"]]
    assert blocked_on(b, stomp_client)[p2_id] in subs  # still waiting, behind p1
    assert take_one(0) == "p1" and take_one(1) == "p1"
    f = producers[1].read_frame()
    assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", "p2"), f
    assert [stored_bodies(b, stomp_client, s) for s in subs] == [["p2"], ["p2"]]
    for s in producers:
        s.close()
    b.kill9()
