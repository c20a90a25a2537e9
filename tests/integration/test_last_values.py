"""Last-value queues (docs/configuration.md, "Last-value queues"; docs/stomp.md, "Last-value queues"):
a queue whose address settings name last-value-key (or set last-value = true, Artemis's
_AMQ_LVQ_NAME) keeps one ready message per key value: a new message replaces the ready one with its
value in the batch that stores it. A message in flight, in a transaction or waiting out a
redelivery delay is never taken from its holder (the new one waits behind it). Transactions replace
at commit, never before; durable subscriptions of a topic each replace on their own. Durable across
SIGKILL and restart (the index is rebuilt from the stored messages), and a store that refuses the
replacing write changes nothing. Each test ends with `escrow check` (kill9 runs it)."""

import os
import random

import pytest

from conftest import Closed, RawStomp, check_store, frame_bytes, new_xid, unique
from test_address_limits import (bad_setting_stops_the_broker, config, durable_subscriptions_of, limit, name, ok,
                                 show, stored_bodies, try_send)
from test_failure_paths import faulty_broker, http_get
from test_reload import hangup, wait_log

KEYED = limit("lv.#", last_value_key="sym")
LEGACY = limit("lvq.#", last_value=True)
HTTP = '[http]\nlisten = "127.0.0.1:0"\n'


def lv_broker(broker_factory, *extra, **kwargs):
    return broker_factory(config=config(KEYED, LEGACY, *extra, head=HTTP), **kwargs)


def send_all(broker, stomp_client, destination, updates, header="sym", headers=None):
    """Sends (key, body) pairs in order, each answered by its RECEIPT; key None sends no key."""
    p = stomp_client(broker)
    for key, body in updates:
        h = dict(headers or {})
        if key is not None:
            h[header] = key
        p.send(destination, body, headers=h)
    p.close()


def consume(broker, stomp_client, destination, n):
    """The bodies of the first n messages a new consumer gets (auto ack)."""
    c = stomp_client(broker)
    sub = c.subscribe(destination)
    bodies = [m.body for m in c.wait_messages(n, subscription=sub)]
    c.close()
    return bodies


def replaced(broker, stomp_client, queue_name):
    return show(broker, stomp_client, queue_name)["replaced"]


def replaced_metric(broker, queue_name):
    status, body = http_get(broker, "/metrics")
    assert status == 200, body
    assert "# TYPE escrow_queue_messages_replaced_total counter" in body
    for line in body.splitlines():
        if line.startswith("escrow_queue_messages_replaced_total{") and f'queue="{queue_name}"' in line:
            return float(line.split()[-1])
    return 0.0


# --------------------------------------------------------------------------------------------
# The settings
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key,value,needle", [
    ("last-value-key", '""', "must be a header name (not empty, without ':' or a line break)"),
    ("last-value-key", '"a:b"', "must be a header name"),
    ("last-value-key", "1", "must be a string: the name of the header messages carry their key in"),
    ("default-last-value-key", '"x\\ny"', "must be a header name"),
    ("last-value", '"yes"', "must be true or false"),
    ("last-value-queue", "1", "must be true or false"),
], ids=["empty", "colon", "number", "newline", "text-bool", "int-bool"])
def test_bad_last_value_settings_stop_the_broker_naming_file_line_and_key(tmp_path, key, value, needle):
    bad_setting_stops_the_broker(tmp_path, key, value, needle)


def test_each_spelling_makes_a_last_value_queue_and_false_turns_one_off(broker_factory, stomp_client):
    entries = [limit("a.#", last_value_key="k"), limit("b.#", default_last_value_key="k"),
               limit("c.#", last_value=True), limit("d.#", last_value_queue=True),
               limit("e.#", default_last_value_queue=True),
               limit("f.#", last_value=True), limit("f.off.#", last_value=False)]
    b = broker_factory(config=config(*entries))
    for prefix, header in (("a", "k"), ("b", "k"), ("c", "_AMQ_LVQ_NAME"), ("d", "_AMQ_LVQ_NAME"),
                           ("e", "_AMQ_LVQ_NAME")):
        q = name(prefix)
        send_all(b, stomp_client, f"/queue/{q}", [("x", "1"), ("x", "2")], header=header)
        assert stored_bodies(b, stomp_client, q) == ["2"], prefix
    q = name("f.off")
    send_all(b, stomp_client, f"/queue/{q}", [("x", "1"), ("x", "2")], header="_AMQ_LVQ_NAME")
    assert stored_bodies(b, stomp_client, q) == ["1", "2"]
    # Not a last-value queue: the header is an ordinary header.
    q = name("plain")
    send_all(b, stomp_client, f"/queue/{q}", [("x", "1"), ("x", "2")], header="_AMQ_LVQ_NAME")
    assert stored_bodies(b, stomp_client, q) == ["1", "2"]
    b.kill9()


# --------------------------------------------------------------------------------------------
# Replacing
# --------------------------------------------------------------------------------------------

def test_a_new_value_replaces_the_ready_one_and_keys_keep_their_order(broker_factory, stomp_client):
    b = lv_broker(broker_factory)
    q = name("lv")
    dest = f"/queue/{q}"
    send_all(b, stomp_client, dest, [("IBM", "ibm 1"), ("RHT", "rht 1"), ("IBM", "ibm 2"), (None, "news"),
                                     ("IBM", "ibm 3"), ("RHT", "rht 2"), (None, "news")])
    # Browsing is the non-destructive view of the latest values: it changes nothing.
    for _ in range(2):
        assert stored_bodies(b, stomp_client, q) == ["news", "ibm 3", "rht 2", "news"]
    info = show(b, stomp_client, q)
    assert (info["depth"], info["replaced"]) == (4, 3)
    assert replaced_metric(b, q) == 3
    # The key header stays on the message; messages without one are never replaced.
    assert consume(b, stomp_client, dest, 4) == ["news", "ibm 3", "rht 2", "news"]
    assert show(b, stomp_client, q)["depth"] == 0
    b.kill9()


def test_a_queue_keyed_on_its_own_header_falls_back_to_amq_lvq_name(broker_factory, stomp_client):
    b = lv_broker(broker_factory)
    q = name("lv")
    dest = f"/queue/{q}"
    send_all(b, stomp_client, dest, [("A", "by lvq name")], header="_AMQ_LVQ_NAME")
    send_all(b, stomp_client, dest, [("A", "by sym")], header="sym")
    assert stored_bodies(b, stomp_client, q) == ["by sym"]
    # A message carrying both is keyed by the queue's own header.
    send_all(b, stomp_client, dest, [("B", "both")], headers={"_AMQ_LVQ_NAME": "A"})
    assert stored_bodies(b, stomp_client, q) == ["by sym", "both"]
    b.kill9()


def test_priorities_do_not_change_which_message_is_newest(broker_factory, stomp_client):
    b = lv_broker(broker_factory)
    q = name("lv")
    dest = f"/queue/{q}"
    send_all(b, stomp_client, dest, [("A", "high")], headers={"priority": "9"})
    send_all(b, stomp_client, dest, [("A", "low")], headers={"priority": "1"})
    assert stored_bodies(b, stomp_client, q) == ["low"]
    b.kill9()
    b.start()  # the index rebuilt from storage picks the newest by arrival too
    send_all(b, stomp_client, dest, [("A", "mid")], headers={"priority": "4"})
    send_all(b, stomp_client, dest, [("A", "newest")], headers={"priority": "0"})
    assert stored_bodies(b, stomp_client, q) == ["newest"]
    b.kill9()


def test_non_persistent_values_replace_in_memory_and_across_persistence(broker_factory, stomp_client):
    b = lv_broker(broker_factory)
    q = name("lv")
    dest = f"/queue/{q}"
    np = {"persistent": "false"}
    send_all(b, stomp_client, dest, [("A", "a1"), ("A", "a2"), ("B", "b1")], headers=np)
    assert show(b, stomp_client, q)["depth"] == 2
    # A persistent message replaces a non-persistent one, and the other way round.
    send_all(b, stomp_client, dest, [("A", "a3 stored")])
    assert stored_bodies(b, stomp_client, q) == ["a3 stored"]
    send_all(b, stomp_client, dest, [("A", "a4 memory")], headers=np)
    assert stored_bodies(b, stomp_client, q) == []
    info = show(b, stomp_client, q)
    assert (info["depth"], info["replaced"]) == (2, 3)
    assert sorted(consume(b, stomp_client, dest, 2)) == ["a4 memory", "b1"]
    b.kill9()


def test_a_message_in_flight_is_not_replaced_under_its_consumer(broker_factory, stomp_client):
    b = lv_broker(broker_factory)
    q = name("lv")
    dest = f"/queue/{q}"
    c = stomp_client(b)
    sub = c.subscribe(dest, ack="client-individual", headers={"prefetch-count": "1"})
    send_all(b, stomp_client, dest, [("A", "a1")])
    (m1,) = c.wait_messages(1, subscription=sub)
    assert m1.body == "a1"
    # a1 is in flight: a2 waits behind it; a3 replaces the ready a2.
    send_all(b, stomp_client, dest, [("A", "a2"), ("A", "a3")])
    assert stored_bodies(b, stomp_client, q) == ["a1", "a3"]
    assert replaced(b, stomp_client, q) == 1
    c.ack(m1, receipt=True)
    (m2,) = c.wait_messages(2, subscription=sub)[1:]
    assert m2.body == "a3"
    # A NACKed message comes back and is delivered again, newer value or not (no message a consumer
    # was given is deleted without its acknowledgement); the newer one follows.
    c.ack(m2, receipt=True)
    send_all(b, stomp_client, dest, [("B", "b1")])
    (m3,) = c.wait_messages(3, subscription=sub)[2:]
    send_all(b, stomp_client, dest, [("B", "b2")])
    c.nack(m3, receipt=True)
    (again,) = c.wait_messages(4, subscription=sub)[3:]
    assert (again.body, again.headers.get("redelivered")) == ("b1", "true")
    c.ack(again, receipt=True)
    (m5,) = c.wait_messages(5, subscription=sub)[4:]
    assert m5.body == "b2"
    c.close()
    b.kill9()


def test_pipelined_updates_of_few_keys_leave_exactly_the_last_of_each(broker_factory, stomp_client):
    """Sends without waiting for receipts: writes of one key are under way together and chain."""
    b = lv_broker(broker_factory)
    q = name("lv")
    dest = f"/queue/{q}"
    keys = ["A", "B", "C", "D", "E"]
    s = RawStomp(b.port)
    s.connect()
    data = b""
    n = 500
    for i in range(n):
        headers = [("destination", dest), ("sym", keys[i % len(keys)])]
        if i == n - 1:
            headers.append(("receipt", "last"))
        if i % 3 == 0:
            headers.append(("persistent", "false"))
        data += frame_bytes("SEND", headers, f"{keys[i % len(keys)]} {i}".encode())
    s.send(data)
    f = s.read_frame()
    assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", "last"), f
    s.close()
    info = show(b, stomp_client, q)
    assert (info["depth"], info["replaced"]) == (len(keys), n - len(keys)), info
    last = {k: f"{k} {i}" for i, k in ((i, keys[i % len(keys)]) for i in range(n))}
    assert sorted(consume(b, stomp_client, dest, len(keys))) == sorted(last.values())
    b.kill9()


# --------------------------------------------------------------------------------------------
# Transactions
# --------------------------------------------------------------------------------------------

def test_a_local_transaction_replaces_at_commit_and_an_abort_replaces_nothing(broker_factory, stomp_client):
    b = lv_broker(broker_factory)
    q = name("lv")
    dest = f"/queue/{q}"
    send_all(b, stomp_client, dest, [("A", "a1"), ("B", "b1")])
    c = stomp_client(b)
    c.begin("t1")
    c.send(dest, "a2", headers={"sym": "A", "transaction": "t1"})
    c.send(dest, "a3", headers={"sym": "A", "transaction": "t1"})
    assert stored_bodies(b, stomp_client, q) == ["a1", "b1"]  # nothing before commit
    c.commit("t1")
    # Within the transaction too, the later message of a key replaces the earlier one.
    assert stored_bodies(b, stomp_client, q) == ["b1", "a3"]
    assert replaced(b, stomp_client, q) == 2
    c.begin("t2")
    c.send(dest, "b2", headers={"sym": "B", "transaction": "t2"})
    c.abort("t2")
    assert stored_bodies(b, stomp_client, q) == ["b1", "a3"]
    c.close()
    b.kill9()


def test_a_prepared_xa_branch_replaces_when_committed_after_a_restart(broker_factory, stomp_client):
    b = lv_broker(broker_factory)
    q = name("lv")
    dest = f"/queue/{q}"
    send_all(b, stomp_client, dest, [("A", "a1"), ("B", "b1")])
    c = stomp_client(b)
    x = new_xid(gtrid=unique("g").encode())
    ok(c, "START", x)
    c.send(dest, "a2 xa", headers={"sym": "A"})
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    c.close()
    # Meanwhile outside it: a newer b, and an a that the commit will replace.
    send_all(b, stomp_client, dest, [("B", "b2"), ("A", "a1 bis")])
    b.kill9()
    b.start()
    assert stored_bodies(b, stomp_client, q) == ["b2", "a1 bis"]
    c = stomp_client(b)
    ok(c, "COMMIT", x)
    # (In queue order: a transaction's message takes its place when it was sent.)
    assert stored_bodies(b, stomp_client, q) == ["a2 xa", "b2"]
    # One-phase too.
    x2 = new_xid(gtrid=unique("g").encode())
    ok(c, "START", x2)
    c.send(dest, "b3 xa", headers={"sym": "B"})
    ok(c, "END", x2, "TMSUCCESS")
    ok(c, "COMMIT", x2, "TMONEPHASE")
    assert stored_bodies(b, stomp_client, q) == ["a2 xa", "b3 xa"]  # b2 replaced
    c.close()
    b.kill9()


def test_a_message_a_transaction_consumed_is_not_replaced_until_it_ends(broker_factory, stomp_client):
    b = lv_broker(broker_factory)
    q = name("lv")
    dest = f"/queue/{q}"
    send_all(b, stomp_client, dest, [("A", "a1")])
    c = stomp_client(b)
    sub = c.subscribe(dest, ack="client-individual", headers={"prefetch-count": "1"})
    (m,) = c.wait_messages(1, subscription=sub)
    c.begin("t")
    c.ack(m, transaction="t")
    send_all(b, stomp_client, dest, [("A", "a2")])
    assert stored_bodies(b, stomp_client, q) == ["a1", "a2"]
    # The abort gives a1 back, and it is delivered again (it was the consumer's: never replaced),
    # and a2 too.
    c.abort("t")
    for n in (2, 3):
        got = c.wait_messages(n, subscription=sub)
        c.ack(got[-1], receipt=True)
    assert sorted(x.body for x in got) == ["a1", "a1", "a2"], got
    c.close()
    b.kill9()


# --------------------------------------------------------------------------------------------
# Topics, restarts, reloads and the store refusing
# --------------------------------------------------------------------------------------------

def test_each_durable_subscription_keeps_its_own_last_values(broker_factory, stomp_client):
    topic = name("lvt")
    b = lv_broker(broker_factory, limit("lvt.#", last_value_key="sym"))
    subs = durable_subscriptions_of(b, stomp_client, topic, 2)
    send_all(b, stomp_client, f"/topic/{topic}", [("A", "a1"), ("B", "b1")])
    # The first subscriber takes b1 away; the next b only replaces in the other one.
    d = stomp_client(b, headers={"client-id": f"{topic}-c0"})
    sub = d.subscribe(f"/topic/{topic}", id="s0", ack="client-individual",
                      headers={"durable-subscription-name": "s", "prefetch-count": "2"})
    got = d.wait_messages(2, subscription=sub)
    for m in got:
        d.ack(m, receipt=True)
    d.close()
    send_all(b, stomp_client, f"/topic/{topic}", [("A", "a2"), ("B", "b2")])
    assert stored_bodies(b, stomp_client, subs[0]) == ["a2", "b2"]
    assert stored_bodies(b, stomp_client, subs[1]) == ["a2", "b2"]
    assert [replaced(b, stomp_client, s) for s in subs] == [0, 2]
    b.kill9()
    b.start()
    send_all(b, stomp_client, f"/topic/{topic}", [("A", "a3")])
    assert [stored_bodies(b, stomp_client, s) for s in subs] == [["b2", "a3"]] * 2
    b.kill9()


def test_replacements_survive_sigkill_and_the_index_is_rebuilt_at_restart(broker_factory, stomp_client):
    b = lv_broker(broker_factory)
    q = name("lvq")
    dest = f"/queue/{q}"
    send_all(b, stomp_client, dest, [(k, f"{k}{i}") for i in range(5) for k in "XYZ"], header="_AMQ_LVQ_NAME")
    assert stored_bodies(b, stomp_client, q) == ["X4", "Y4", "Z4"]
    b.kill9()
    b.start()
    assert stored_bodies(b, stomp_client, q) == ["X4", "Y4", "Z4"]
    assert show(b, stomp_client, q)["depth"] == 3
    send_all(b, stomp_client, dest, [("Y", "Y5")], header="_AMQ_LVQ_NAME")
    assert stored_bodies(b, stomp_client, q) == ["X4", "Z4", "Y5"]
    assert show(b, stomp_client, q)["depth"] == 3
    b.kill9()


def test_sighup_makes_a_queue_a_last_value_queue_over_its_stored_messages(broker_factory, stomp_client):
    b = broker_factory(config=config(head=HTTP))
    q = name("later")
    dest = f"/queue/{q}"
    send_all(b, stomp_client, dest, [("A", "a1"), ("A", "a2"), ("B", "b1")])
    mark = hangup(b, config(limit("later.#", last_value_key="sym"), head=HTTP))
    wait_log(b, "SIGHUP: reloaded", mark)
    # What it held stays; the newest of each key is the one a new message replaces.
    send_all(b, stomp_client, dest, [("A", "a3")])
    assert stored_bodies(b, stomp_client, q) == ["a1", "b1", "a3"]
    mark = hangup(b, config(head=HTTP))
    wait_log(b, "SIGHUP: reloaded", mark)
    send_all(b, stomp_client, dest, [("A", "a4")])
    assert stored_bodies(b, stomp_client, q) == ["a1", "b1", "a3", "a4"]
    b.kill9()


def test_a_refused_replacing_send_keeps_the_old_value_and_replaces_nothing(broker_factory, stomp_client):
    # Commit 2: a1; 3: a2 with a1's removal (refused); 4: a3 with a1's removal.
    b = faulty_broker(broker_factory, stomp_client, "commit:3:map_full", config=config(KEYED, head=HTTP))
    q = name("lv")
    dest = f"/queue/{q}"
    assert try_send(b, stomp_client, dest, "a1", {"sym": "A"}) == "RECEIPT"
    assert try_send(b, stomp_client, dest, "a2", {"sym": "A"}).startswith("message not stored: ")
    assert stored_bodies(b, stomp_client, q) == ["a1"]
    assert replaced(b, stomp_client, q) == 0
    assert try_send(b, stomp_client, dest, "a3", {"sym": "A"}) == "RECEIPT"
    assert stored_bodies(b, stomp_client, q) == ["a3"]
    assert replaced(b, stomp_client, q) == 1
    b.kill9()
    b.env = {}
    b.start()
    assert stored_bodies(b, stomp_client, q) == ["a3"]
    b.kill9()


def test_a_refused_commit_keeps_the_old_value_and_the_transaction(broker_factory, stomp_client):
    # Commit 2: a1; 3: the transaction's commit with a1's removal (refused); 4: the retry.
    b = faulty_broker(broker_factory, stomp_client, "commit:3:map_full", config=config(KEYED, head=HTTP))
    q = name("lv")
    dest = f"/queue/{q}"
    assert try_send(b, stomp_client, dest, "a1", {"sym": "A"}) == "RECEIPT"
    c = stomp_client(b)
    x = new_xid(gtrid=unique("g").encode())
    ok(c, "START", x)
    c.send(dest, "a2", headers={"sym": "A"})
    ok(c, "END", x, "TMSUCCESS")
    r = c.xa("COMMIT", x, "TMONEPHASE")
    assert r.result == "XAER_RMFAIL", r
    assert stored_bodies(b, stomp_client, q) == ["a1"]
    ok(c, "COMMIT", x, "TMONEPHASE")  # the branch is as it was: the retry goes through
    assert stored_bodies(b, stomp_client, q) == ["a2"]
    assert replaced(b, stomp_client, q) == 1
    c.close()
    b.kill9()
    b.env = {}
    b.start()
    assert stored_bodies(b, stomp_client, q) == ["a2"]
    check_store(b.data_dir)
    b.kill9()


def test_escrow_config_shows_the_last_value_keys(broker_factory, stomp_client):
    b = lv_broker(broker_factory)
    from test_failure_paths import admin
    a = stomp_client(b)
    settings = admin(a, "config")["config"]["address-settings"]
    a.close()
    assert {"match": "lv.#", "last-value-key": "sym"}.items() <= next(s for s in settings if s["match"] == "lv.#").items()
    assert next(s for s in settings if s["match"] == "lvq.#")["last-value"] is True
    b.kill9()


@pytest.mark.parametrize("seed", range(int(os.environ.get("ESCROW_LAST_VALUE_ROUNDS", "8"))))
def test_pipelined_updates_with_a_refused_write_in_a_random_place_keep_one_value_per_key(broker_factory,
                                                                                       stomp_client, seed):
    """Writes of one key under way together chain (the later removes the earlier in its own batch);
    the store refuses one group commit somewhere in the stream. Whatever it refused: each key that
    had a RECEIPT still has exactly one message, no older than its last receipted one; nothing is
    held for ever (the depth is what a consumer gets); and so after a SIGKILL and restart."""
    rnd = random.Random(seed)
    refused = rnd.randint(2, 12)
    b = faulty_broker(broker_factory, stomp_client, f"commit:{refused}:map_full", config=config(KEYED, head=HTTP))
    q = name("lv")
    dest = f"/queue/{q}"
    keys = ["A", "B", "C"]
    sent, receipted = [], set()
    s = RawStomp(b.port)
    s.connect()
    # Bursts of 1 to 8 SENDs without waiting (those chain), each burst's RECEIPTs awaited: so the
    # stream spans a dozen group commits or more, and the refused one falls inside it.
    closed = False
    while len(sent) < 60 and not closed:
        burst = []
        for _ in range(rnd.randint(1, 8)):
            i, k = len(sent), rnd.choice(keys)
            headers = [("destination", dest), ("sym", k), ("receipt", str(i))]
            if rnd.random() < 0.3:
                headers.append(("persistent", "false"))
            sent.append((k, i))
            burst.append(i)
            s.send(frame_bytes("SEND", headers, f"{k} {i}".encode()))
        try:
            while not set(burst) <= receipted:
                f = s.read_frame()
                if f.command != "RECEIPT":
                    assert f.command == "ERROR" and f.headers.get("message", "").startswith("message not stored"), f
                    closed = True
                    break
                receipted.add(int(f.headers["receipt-id"]))
        except Closed:
            closed = True  # it closed after the ERROR
    s.close()

    def latest():
        """What a consumer gets (as many as the depth says, left unacknowledged), by key."""
        n = show(b, stomp_client, q)["depth"]
        c = stomp_client(b)
        sub = c.subscribe(dest, ack="client-individual", headers={"prefetch-count": "1000"})
        bodies = [m.body for m in c.wait_messages(n, subscription=sub)] if n else []
        c.close()
        by_key = {}
        for body in bodies:
            k, i = body.split()
            assert k not in by_key, f"two messages of key {k}: {bodies}"
            by_key[k] = int(i)
        return by_key

    got = latest()
    for k in keys:
        last = max((i for kk, i in sent if kk == k and i in receipted), default=None)
        if last is not None:
            assert k in got and got[k] >= last, (k, last, got, sorted(receipted))
    b.kill9()
    b.env = {}
    b.start()
    latest()  # the stored ones: still at most one per key
    b.kill9()


def test_the_index_rebuilt_at_restart_takes_the_newest_of_two_stored_messages_of_a_key(broker_factory,
                                                                                        stomp_client):
    b = lv_broker(broker_factory)
    q = name("lv")
    dest = f"/queue/{q}"
    c = stomp_client(b)
    sub = c.subscribe(dest, ack="client-individual", headers={"prefetch-count": "1"})
    send_all(b, stomp_client, dest, [("A", "a1")], headers={"priority": "9"})
    c.wait_messages(1, subscription=sub)  # in flight: a2 waits behind it, both stored
    send_all(b, stomp_client, dest, [("A", "a2")], headers={"priority": "1"})
    b.kill9()
    b.start()
    assert stored_bodies(b, stomp_client, q) == ["a1", "a2"]
    # a2 arrived last: it is the one a3 replaces, although a1 sorts first.
    send_all(b, stomp_client, dest, [("A", "a3")], headers={"priority": "5"})
    assert stored_bodies(b, stomp_client, q) == ["a1", "a3"]
    b.kill9()


def test_a_refused_send_while_the_newest_is_in_flight_leaves_it_replaceable(broker_factory, stomp_client):
    # Commit 2: a1; 3: a2 (refused); 4: the NACK's delivery count; 5: a3, which replaces a1.
    b = faulty_broker(broker_factory, stomp_client, "commit:3:map_full", config=config(KEYED, head=HTTP))
    q = name("lv")
    dest = f"/queue/{q}"
    assert try_send(b, stomp_client, dest, "a1", {"sym": "A"}) == "RECEIPT"
    c = stomp_client(b)
    sub = c.subscribe(dest, ack="client-individual", headers={"prefetch-count": "1"})
    (m,) = c.wait_messages(1, subscription=sub)
    assert try_send(b, stomp_client, dest, "a2", {"sym": "A"}).startswith("message not stored: ")
    c.unsubscribe(sub)  # a1 goes back, ready
    assert try_send(b, stomp_client, dest, "a3", {"sym": "A"}) == "RECEIPT"
    assert stored_bodies(b, stomp_client, q) == ["a3"]
    assert show(b, stomp_client, q)["depth"] == 1
    c.close()
    b.kill9()


@pytest.mark.parametrize("policy", ["ring", "drop-head"])
def test_a_ring_or_drop_head_last_value_queue_makes_room_only_for_what_grows_it(broker_factory, stomp_client,
                                                                                policy):
    keys = dict(ring_size=3) if policy == "ring" else dict(max_size_messages=3, address_full_policy="DROP-HEAD")
    b = broker_factory(config=config(limit("lvr.#", last_value_key="sym", **keys), head=HTTP))
    q = name("lvr")
    dest = f"/queue/{q}"
    send_all(b, stomp_client, dest, [("B", "b0"), ("C", "c0"), ("A", "a0")])
    send_all(b, stomp_client, dest, [("A", "a1")])
    assert stored_bodies(b, stomp_client, q) == ["b0", "c0", "a1"]
    # Pipelined: the second replaces the first while it is still being written.
    s = RawStomp(b.port)
    s.connect()
    s.send(frame_bytes("SEND", [("destination", dest), ("sym", "A")], b"a2") +
           frame_bytes("SEND", [("destination", dest), ("sym", "A"), ("receipt", "r")], b"a3"))
    assert s.read_frame().command == "RECEIPT"
    s.close()
    assert stored_bodies(b, stomp_client, q) == ["b0", "c0", "a3"]
    # At commit too.
    c = stomp_client(b)
    c.begin("t")
    c.send(dest, "c1", headers={"sym": "C", "transaction": "t"})
    c.commit("t")
    assert stored_bodies(b, stomp_client, q) == ["b0", "a3", "c1"]
    # A new key grows it: the oldest goes.
    send_all(b, stomp_client, dest, [("D", "d0")])
    assert stored_bodies(b, stomp_client, q) == ["a3", "c1", "d0"]
    c.close()
    b.kill9()
