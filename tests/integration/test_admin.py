"""The `escrow` admin command (cli/, docs/operations.md) against a running escrowd with real
content: messages in queues, dead letters made with max-delivery-attempts, durable subscriptions,
prepared XA branches made through the XA frames. Every command runs the built binary (found like
the other built tools, tool("cli/escrow", "ESCROW_CLI")) and checks its exit code, its --json answer
and, where it matters, its table; then checks through STOMP that the broker did what it said."""

import json
import os
import re
import subprocess
import threading
import time

import pytest

from conftest import TIMEOUT, bodies, check_store, consume_all, frame_bytes, new_xid, preload, tool, unique
from pg import free_port
from test_tls import certs, listener, tls_config, tls_ports  # noqa: F401  (certs: the fixture)
from test_undelivered import settings

ESCROW = tool("cli/escrow", "ESCROW_CLI")

# One NACK makes a dead letter; dead letters go to DLQ.
DEAD_LETTERS = settings({"match": "#", "dead-letter-address": "DLQ", "expiry-address": "ExpiryQueue",
                         "max-delivery-attempts": 1})


@pytest.fixture(autouse=True)
def need_escrow():
    if not os.path.exists(ESCROW):
        pytest.fail(f"{ESCROW} not found: build it (ninja -C build cli/escrow) or set ESCROW_CLI")


def escrow(broker, *args, stdin=subprocess.DEVNULL, env=None, url=True):
    """Runs escrow against `broker` (None: no --url); returns the CompletedProcess (text)."""
    cmd = [ESCROW]
    if url and broker is not None:
        cmd += ["--url", f"stomp://127.0.0.1:{broker.port}"]
    full_env = dict(os.environ)
    full_env.pop("ESCROW_PASSWORD", None)
    full_env["HOME"] = "/nonexistent"  # no ~/.config/escrow/escrow.toml of whoever runs the tests
    full_env.update(env or {})
    return subprocess.run(cmd + [str(a) for a in args], stdin=stdin, capture_output=True, text=True,
                          timeout=4 * TIMEOUT, env=full_env)


def ok_json(broker, *args):
    r = escrow(broker, "--json", *args)
    assert r.returncode == 0, f"escrow {' '.join(map(str, args))}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout)


def ok_text(broker, *args):
    r = escrow(broker, *args)
    assert r.returncode == 0, f"escrow {' '.join(map(str, args))}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def queue_row(broker, name):
    rows = [q for q in ok_json(broker, "queues")["queues"] if q["name"] == name]
    assert len(rows) == 1, rows
    return rows[0]


# --------------------------------------------------------------------------------------------
# Looking: status, queues, queue show, browse, connections, subscriptions
# --------------------------------------------------------------------------------------------

def test_status_reports_version_listeners_store_and_totals(broker, stomp_client):
    q = unique("st")
    c = stomp_client(broker)
    for i in range(3):
        c.send(f"/queue/{q}", f"m{i}")
    s = ok_json(broker, "status")
    assert s["version"] == "0.1.0"
    assert f"127.0.0.1:{broker.port}" in s["listeners"]
    assert s["connections"] >= 2  # the client above and escrow itself
    assert s["store"]["writable"] is True
    assert 0 < s["store"]["map_used_bytes"] <= s["store"]["map_size_bytes"]
    assert s["totals"]["depth"] >= 3 and s["totals"]["enqueued"] >= 3
    assert s["branches"]["prepared"] == 0
    text = ok_text(broker, "status")
    assert "version      0.1.0" in text and "writable" in text and f"127.0.0.1:{broker.port}" in text


def test_queues_and_queue_show(broker, stomp_client):
    q = unique("qs")
    c = stomp_client(broker)
    for i in range(3):
        c.send(f"/queue/{q}", f"m{i}")
    row = queue_row(broker, q)
    assert row["kind"] == "queue"
    assert (row["depth"], row["in_flight"], row["consumers"], row["enqueued"]) == (3, 0, 0, 3)
    assert row["oldest_age_ms"] is not None and row["oldest_age_ms"] < 60_000

    # A consumer with one message in flight.
    sub = c.subscribe(f"/queue/{q}", ack="client-individual", headers={"prefetch-count": "1"})
    c.wait_messages(1, subscription=sub)
    shown = ok_json(broker, "queue", "show", q)
    assert (shown["depth"], shown["in_flight"], shown["consumers"]) == (3, 1, 1)
    assert shown["settings"]["dead_letter_address"] == "DLQ"
    assert shown["consumers_detail"][0]["subscription"] == sub

    table = ok_text(broker, "queues").splitlines()
    assert table[0].split()[:5] == ["NAME", "KIND", "DEPTH", "SCHEDULED", "IN-FLIGHT"]
    line = next(x for x in table if x.startswith(q + " "))
    assert line.split()[1:6] == ["queue", "3", "0", "1", "1"]
    assert "in flight              1" in ok_text(broker, "queue", "show", q)

    r = escrow(broker, "queue", "show", "no-such-queue")
    assert r.returncode == 4, r
    assert "no-such-queue" in r.stderr


def test_browse_leaves_the_queue_unchanged(broker, stomp_client):
    q = unique("br")
    c = stomp_client(broker)
    for i in range(5):
        c.send(f"/queue/{q}", f"body-{i}", headers={"color": "red" if i % 2 else "blue"})
    first = ok_json(broker, "browse", q, "--count", 3)["messages"]
    assert [m["body"] for m in first] == ["body-0", "body-1", "body-2"]
    assert [m["headers"]["color"] for m in first] == ["blue", "red", "blue"]
    assert all(m["delivery_count"] == 0 and m["state"] == "ready" for m in first)
    again = ok_json(broker, "browse", q)["messages"]
    assert [m["body"] for m in again] == [f"body-{i}" for i in range(5)]
    assert [m["message_id"] for m in again[:3]] == [m["message_id"] for m in first]
    text = ok_text(broker, "browse", q)
    assert "body-4" in text and text.splitlines()[0].split()[0] == "ID"
    assert queue_row(broker, q)["depth"] == 5
    # Consumers get every message, first delivery, in order.
    got = bodies(consume_all(broker, f"/queue/{q}"))
    assert got == [f"body-{i}" for i in range(5)]


def test_browse_pages_with_a_cursor_in_queue_order_to_the_end(broker, stomp_client, raw):
    """ADMIN browse's `next` and `after`: pages of a queue in delivery order (priority first), each
    starting after the last message of the one before, until `more` is false; a malformed cursor
    is `invalid`. The console pages queues deeper than one browse this way."""
    q = unique("pages")
    c = stomp_client(broker)
    for i in range(25):
        c.send(f"/queue/{q}", f"m{i}", headers={"priority": "9" if i % 5 == 0 else "4"})
    expected = [f"m{i}" for i in range(25) if i % 5 == 0] + [f"m{i}" for i in range(25) if i % 5]
    s = raw(broker)
    s.connect()

    def browse(*extra):
        s.send(frame_bytes("ADMIN", [("admin-command", "browse"), ("name", q), ("count", "7"), *extra,
                                     ("receipt", "b")]))
        f = s.read_frame()
        assert f.headers["admin-status"] == "ok", f.headers
        return json.loads(f.body)

    seen, page, pages = [], browse(), 1
    while True:
        seen += [m["body"] for m in page["messages"]]
        if not page["more"]:
            assert "next" not in page
            break
        last = page["messages"][-1]
        assert page["next"] == f'{last["priority"]}:{last["message_id"]}'
        page, pages = browse(("after", page["next"])), pages + 1
    assert seen == expected and pages == 4
    assert queue_row(broker, q)["depth"] == 25  # browsing changed nothing
    for bad in ("", "4", "x:1", "10:1", "4:", "4:1x"):
        s.send(frame_bytes("ADMIN", [("admin-command", "browse"), ("name", q), ("after", bad), ("receipt", "bad")]))
        f = s.read_frame()
        assert f.headers["admin-status"] == "invalid" and "invalid after" in f.headers["message"], (bad, f.headers)


def test_browse_answers_valid_json_for_bytes_that_are_not_utf8(broker, raw):
    """A header value and a body that are not UTF-8: each stray byte is U+FFFD in the JSON
    (docs/operations.md), body_utf8 says so, and the escrow command reads the answer."""
    q = unique("nu")
    s = raw(broker)
    s.connect()
    s.send(b"SEND\ndestination:/queue/" + q.encode() + b"\nx-bytes:a\xffb\xc0\x80\nreceipt:sent\n\n"
           b"caf\xc3\xa9 \xfe\0")
    f = s.read_frame()
    assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", "sent"), f
    (m,) = ok_json(broker, "browse", q)["messages"]
    assert m["headers"]["x-bytes"] == "a\ufffdb\ufffd\ufffd"
    assert m["body"] == "caf\u00e9 \ufffd" and m["body_utf8"] is False and m["body_bytes"] == 7


def test_connections_and_subscriptions_durable_ones_with_depth(broker, stomp_client):
    topic, q = unique("tp"), unique("cq")
    client_id, name = unique("cid"), unique("dur")
    d = stomp_client(broker, headers={"client-id": client_id})
    d.subscribe(f"/topic/{topic}", headers={"durable-subscription-name": name})
    worker = stomp_client(broker, headers={"login": "worker"})
    worker.subscribe(f"/queue/{q}", ack="client")

    conns = ok_json(broker, "connections")["connections"]
    assert any(x["client_id"] == client_id and x["subscriptions"] == 1 for x in conns), conns
    # Without a users file nobody is authenticated: user is empty, CONNECT's login is kept apart.
    mine = [x for x in conns if x["login"] == "worker"]
    assert len(mine) == 1 and mine[0]["user"] == "" and re.fullmatch(r"127\.0\.0\.1:\d+", mine[0]["peer"]), conns
    text_out = ok_text(broker, "connections")
    assert "CLIENT-ID" in text_out and "PEER" in text_out and "127.0.0.1:" in text_out

    subs = ok_json(broker, "subscriptions")
    assert any(x["destination"] == f"/queue/{q}" and x["ack"] == "client" for x in subs["subscriptions"]), subs
    mine = [x for x in subs["durable"] if x["client_id"] == client_id]
    assert mine and mine[0]["subscription"] == name and mine[0]["active"] is True

    # Deleting an active durable subscription is refused.
    r = escrow(broker, "subscription", "delete", client_id, name)
    assert r.returncode == 1, r
    assert "active consumer" in r.stderr

    d.disconnect()
    p = stomp_client(broker)
    p.send(f"/topic/{topic}", "t1")
    p.send(f"/topic/{topic}", "t2")
    mine = [x for x in ok_json(broker, "subscriptions")["durable"] if x["client_id"] == client_id]
    assert mine[0]["active"] is False and mine[0]["depth"] == 2  # two messages behind
    text = ok_text(broker, "subscriptions")
    assert "durable subscriptions" in text and name in text

    deleted = ok_json(broker, "subscription", "delete", client_id, name)
    assert deleted["messages"] == 2
    assert not [x for x in ok_json(broker, "subscriptions")["durable"] if x["client_id"] == client_id]
    r = escrow(broker, "subscription", "delete", client_id, name)
    assert r.returncode == 4, r


# --------------------------------------------------------------------------------------------
# Changing: purge and move
# --------------------------------------------------------------------------------------------

def test_purge_asks_refuses_without_a_terminal_and_leaves_in_flight_messages(broker, stomp_client):
    q = unique("pg")
    c = stomp_client(broker)
    for i in range(4):
        c.send(f"/queue/{q}", f"m{i}")
    c.send(f"/queue/{q}", "np", headers={"persistent": "false"})
    r = escrow(broker, "purge", q)  # stdin is not a terminal, no --yes
    assert r.returncode == 2, r
    assert "--yes" in r.stderr
    assert queue_row(broker, q)["depth"] == 5

    holder = stomp_client(broker)
    sub = holder.subscribe(f"/queue/{q}", ack="client-individual", headers={"prefetch-count": "1"})
    (m0,) = holder.wait_messages(1, subscription=sub)
    assert m0.body == "m0"
    answer = ok_json(broker, "purge", q, "--yes")
    assert (answer["purged"], answer["held_left"]) == (4, 1)
    assert queue_row(broker, q)["depth"] == 1
    assert ok_json(broker, "browse", q)["messages"][0]["state"] == "held"
    # The message in flight was not purged: not acknowledged, it comes back.
    holder.drop()
    assert bodies(consume_all(broker, f"/queue/{q}")) == ["m0"]
    assert "purged 0 messages" in ok_text(broker, "purge", "--yes", q)
    assert escrow(broker, "purge", "--yes", "no-such-queue").returncode == 4


def make_dead_letters(broker, stomp_client, destination, payloads):
    """Sends `payloads` to `destination` and NACKs each once: with max-delivery-attempts 1 each
    becomes a dead letter in DLQ."""
    c = stomp_client(broker)
    for body in payloads:
        c.send(destination, body)
    sub = c.subscribe(destination, ack="client-individual")
    msgs = c.wait_messages(len(payloads), subscription=sub)
    for m in msgs:
        c.nack(m, receipt=True)
    c.unsubscribe(sub)


def test_move_dead_letters_back_with_a_filter(broker_factory, stomp_client):
    broker = broker_factory(config=DEAD_LETTERS)
    qa, qb = unique("a"), unique("b")
    make_dead_letters(broker, stomp_client, f"/queue/{qa}", ["a1", "a2"])
    make_dead_letters(broker, stomp_client, f"/queue/{qb}", ["b1"])
    dlq = ok_json(broker, "browse", "DLQ", "--count", 100)["messages"]
    origins = sorted(m["headers"]["_HQ_ORIG_ADDRESS"] for m in dlq)
    assert origins == sorted([f"/queue/{qa}", f"/queue/{qa}", f"/queue/{qb}"])
    assert queue_row(broker, qa)["dead_lettered"] == 2
    assert f"/queue/{qa}" in ok_text(broker, "browse", "DLQ")

    moved = ok_json(broker, "move", "--from", "DLQ", "--to", qa, "--filter", f"/queue/{qa}")
    assert (moved["moved"], moved["held_skipped"], moved["to"]) == (2, 0, f"/queue/{qa}")
    left = ok_json(broker, "browse", "DLQ")["messages"]
    assert [m["headers"]["_HQ_ORIG_ADDRESS"] for m in left] == [f"/queue/{qb}"]
    assert queue_row(broker, "DLQ")["depth"] == 1
    # Back in their queue as fresh messages (no _HQ_ headers, first delivery), in their order.
    back = ok_json(broker, "browse", qa)["messages"]
    assert [m["body"] for m in back] == ["a1", "a2"]
    assert all(m["delivery_count"] == 0 and not any(h.startswith("_HQ_") for h in m["headers"]) for m in back)
    assert bodies(consume_all(broker, f"/queue/{qa}")) == ["a1", "a2"]

    # A filter by bare name works too; the human answer says what happened.
    assert f"moved 1 message from DLQ to /queue/{qb}" in ok_text(broker, "move", "--from", "DLQ", "--to", qb,
                                                                   "--filter", qb)
    assert queue_row(broker, "DLQ")["depth"] == 0
    assert bodies(consume_all(broker, f"/queue/{qb}")) == ["b1"]
    assert escrow(broker, "move", "--from", "no-such-dlq", "--to", qa).returncode == 4
    assert escrow(broker, "move", "--from", "DLQ").returncode == 2  # --to missing: usage


def test_move_and_purge_answered_survive_sigkill(broker, stomp_client):
    # An operator's answer means the change is stored (one batch, committed before the reply):
    # SIGKILL right after it takes nothing back and half-applies nothing. A message held by a
    # consumer is neither moved nor purged, and comes back to its own queue.
    src, dst, pq = unique("mv-from"), unique("mv-to"), unique("pg")
    c = stomp_client(broker)
    for i in range(5):
        c.send(f"/queue/{src}", f"s{i}")
    for i in range(3):
        c.send(f"/queue/{pq}", f"p{i}")
    c.send(f"/queue/{dst}", "already")
    holder = stomp_client(broker)
    sub = holder.subscribe(f"/queue/{src}", ack="client-individual", headers={"prefetch-count": "1"})
    (held,) = holder.wait_messages(1, subscription=sub)
    assert held.body == "s0"

    moved = ok_json(broker, "move", "--from", src, "--to", dst)
    assert (moved["moved"], moved["held_skipped"]) == (4, 1)
    assert ok_json(broker, "purge", pq, "--yes")["purged"] == 3
    broker.kill9()
    broker.start()

    assert bodies(consume_all(broker, f"/queue/{dst}")) == ["already", "s1", "s2", "s3", "s4"]
    assert bodies(consume_all(broker, f"/queue/{pq}")) == []
    assert bodies(consume_all(broker, f"/queue/{src}")) == ["s0"]  # held: not moved, redelivered


# --------------------------------------------------------------------------------------------
# Purge and move of large queues: in slices (broker/core/sweeps.cpp), other connections served
# between them, a refused slice stopping the operation with nothing of it lost
# --------------------------------------------------------------------------------------------

SLICE = 1000  # kSweepSlice in broker/core/sweeps.cpp: stored entries per slice


def test_purge_and_move_of_a_large_queue_account_for_every_message_after_sigkill(broker, stomp_client):
    n = 20 * SLICE
    src, dst, pq = unique("big-from"), unique("big-to"), unique("big-pg")
    preload(broker, f"/queue/{src}", [f"s{i}" for i in range(n)])
    preload(broker, f"/queue/{pq}", [f"p{i}" for i in range(n)])
    # One message in flight to a consumer: held, neither moved nor purged.
    holder = stomp_client(broker)
    sub = holder.subscribe(f"/queue/{src}", ack="client-individual", headers={"prefetch-count": "1"})
    (held,) = holder.wait_messages(1, subscription=sub)
    assert held.body == "s0"

    moved = ok_json(broker, "move", "--from", src, "--to", dst)
    assert (moved["moved"], moved["held_skipped"], moved["complete"]) == (n - 1, 1, True), moved
    assert moved["slices"] > n // SLICE, moved  # one core turn per slice, never the whole queue
    purged = ok_json(broker, "purge", pq, "--yes")
    assert (purged["queue"], purged["purged"], purged["held_left"], purged["complete"]) == (pq, n, 0, True), purged
    assert purged["slices"] > n // SLICE, purged
    assert [queue_row(broker, q)["depth"] for q in (src, dst, pq)] == [1, n - 1, 0]

    broker.kill9()
    check_store(broker.data_dir)
    broker.start()
    assert bodies(consume_all(broker, f"/queue/{dst}")) == [f"s{i}" for i in range(1, n)]
    assert bodies(consume_all(broker, f"/queue/{pq}")) == []
    assert bodies(consume_all(broker, f"/queue/{src}")) == ["s0"]  # held: not moved, redelivered
    broker.kill9()
    check_store(broker.data_dir)


def test_a_second_purge_or_move_of_a_queue_is_refused_while_one_runs(broker, raw):
    q = unique("busy")
    n = 5 * SLICE
    preload(broker, f"/queue/{q}", [f"m{i}" for i in range(n)])
    # Three ADMIN frames in one write: the second and third arrive while the first purge has
    # stored at most its first slice of five.
    s = raw(broker)
    s.connect()
    s.send(frame_bytes("ADMIN", [("admin-command", "purge"), ("name", q), ("receipt", "first")]) +
           frame_bytes("ADMIN", [("admin-command", "purge"), ("name", q), ("receipt", "second")]) +
           frame_bytes("ADMIN", [("admin-command", "move"), ("from", q), ("to", unique("other")),
                                 ("receipt", "third")]))
    answers = {}
    while len(answers) < 3:
        f = s.read_frame(timeout=4 * TIMEOUT)
        assert f.command == "RECEIPT", f
        answers[f.headers["receipt-id"]] = f
    first = answers["first"]
    assert first.headers["admin-status"] == "ok", first
    assert json.loads(first.body)["purged"] == n
    for late in (answers["second"], answers["third"]):
        assert late.headers["admin-status"] == "refused", late
        assert f"a purge of {q} is already running" in late.headers["message"], late
        assert "wait for its answer" in late.headers["message"]
    # Once it has answered, the queue takes the next one.
    assert ok_json(broker, "purge", q, "--yes")["purged"] == 0


def test_a_producer_gets_its_receipts_during_a_purge_of_a_large_queue(broker, stomp_client):
    # The purge runs a slice per core turn: the producer's SENDs are handled between slices. The
    # longest gap between its receipts is printed, not asserted (speed is for scripts/bench-sweep).
    q = unique("stall")
    n = 50 * SLICE
    preload(broker, f"/queue/{q}", [f"old{i}" for i in range(n)])
    producer = stomp_client(broker)
    sent, receipted_at = [], []
    stop = threading.Event()

    def produce():
        i = 0
        while not stop.is_set():
            producer.send(f"/queue/{q}", f"new{i}")  # waits for its receipt
            receipted_at.append(time.monotonic())
            sent.append(f"new{i}")
            i += 1

    thread = threading.Thread(target=produce, name="producer", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(sent) < 20:
            assert thread.is_alive() and time.monotonic() < deadline, "the producer got no receipts"
            time.sleep(0.01)
        began = time.monotonic()
        answer = ok_json(broker, "purge", q, "--yes")
        ended = time.monotonic()
        during = len(sent)
        while len(sent) < during + 20:
            assert thread.is_alive() and time.monotonic() < ended + TIMEOUT, "the producer stopped"
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(TIMEOUT)
    times = [t for t in receipted_at if began <= t <= ended]
    gaps = [b - a for a, b in zip([began] + times, times + [ended])]
    print(f"\npurge of {n} messages: {ended - began:.2f} s, {answer['slices']} slices; the producer got "
          f"{len(times)} receipts meanwhile, longest gap {max(gaps) * 1000:.1f} ms")
    assert len(times) > 0, "no receipt at all while the purge ran"
    # Every message is accounted for: the old ones and the producer's first k are purged (sent
    # before the purge began), the rest of the producer's stay, in order.
    left = bodies(consume_all(broker, f"/queue/{q}"))
    k = len(sent) - len(left)
    assert left == sent[k:], left[:5]
    assert (answer["purged"], answer["held_left"], answer["complete"]) == (n + k, 0, True), (answer, k)
    check_store(broker.data_dir)


def test_a_refused_slice_stops_the_purge_and_loses_or_hides_nothing(broker_factory):
    broker = broker_factory()
    q = unique("refused")
    n = 5 * SLICE
    preload(broker, f"/queue/{q}", [f"m{i}" for i in range(n)])
    # From the restart on, the store refuses its third commit as if the map were full: the purge's
    # slices are the only writes, so one of its first three slices is refused.
    broker.restart(env={"ESCROW_FAULTS": "commit:3:map_full"})
    broker.wait_log(f"counted {n} stored messages")
    r = escrow(broker, "purge", q, "--yes")
    assert r.returncode == 1, r
    m = re.search(rf"purged (\d+) of the {n} messages in {q} when the purge began; the store refused the rest: ",
                  r.stderr)
    assert m, r.stderr
    done = int(m.group(1))
    assert done % SLICE == 0 and done < 3 * SLICE, r.stderr
    assert "Nothing of the refused slice was purged" in r.stderr and "purge again" in r.stderr
    # Nothing of the refused slice is lost or hidden: without a restart, a consumer gets the rest.
    assert queue_row(broker, q)["depth"] == n - done
    assert bodies(consume_all(broker, f"/queue/{q}")) == [f"m{i}" for i in range(done, n)]
    check_store(broker.data_dir)
    broker.kill9()
    check_store(broker.data_dir)
    broker.restart(env={})
    assert bodies(consume_all(broker, f"/queue/{q}")) == []


# --------------------------------------------------------------------------------------------
# In-doubt transactions
# --------------------------------------------------------------------------------------------

def prepared_branch(broker, stomp_client, qin, qout):
    """A prepared branch that consumed one message of qin and sent one to qout; returns (xid, tm),
    tm being the transaction manager's connection."""
    p = stomp_client(broker)
    p.send(qin, "order-1")
    tm = stomp_client(broker)
    sub = tm.subscribe(qin, ack="client-individual")
    (m,) = tm.wait_messages(1, subscription=sub)
    x = new_xid()
    assert tm.xa("START", x).result == "XA_OK"
    tm.send(qout, "confirmation-1")
    tm.ack(m, receipt=True)
    assert tm.xa("END", x, "TMSUCCESS").result == "XA_OK"
    assert tm.xa("PREPARE", x).result == "XA_OK"
    tm.unsubscribe(sub)
    return x, tm


def test_xa_list_and_heuristic_commit_then_the_managers_commit_gets_heurcom(broker, stomp_client):
    qin, qout = f"/queue/{unique('in')}", f"/queue/{unique('out')}"
    started = time.monotonic()
    x, tm = prepared_branch(broker, stomp_client, qin, qout)
    branches = ok_json(broker, "xa", "list")["branches"]
    (b,) = [b for b in branches if b["xid"] == x]
    assert b["state"] == "prepared" and b["local"] is False
    # age_ms counts from the branch's XA-START: not more than the test has run since just before it
    # (a few ms of slack: the broker's clock is the wall clock, whole milliseconds) ...
    first = b["age_ms"]
    assert first <= (time.monotonic() - started) * 1000 + 10, (first, time.monotonic() - started)
    # ... and it grows while the branch stays prepared.
    deadline = time.monotonic() + TIMEOUT
    while True:
        (again,) = [b for b in ok_json(broker, "xa", "list")["branches"] if b["xid"] == x]
        if again["age_ms"] > first:
            break
        assert time.monotonic() < deadline, f"age_ms stayed at {first}: {again}"
    assert again["age_ms"] <= (time.monotonic() - started) * 1000 + 10, (again, time.monotonic() - started)
    assert [s["queues"] for s in b["sent"]] == [[qout[len("/queue/"):]]]
    assert [c["queue"] for c in b["consumed"]] == [qin[len("/queue/"):]]
    text = ok_text(broker, "xa", "list")
    assert x in text and "prepared" in text and "sends message" in text and "consumed message" in text

    r = escrow(broker, "xa", "commit", x)
    assert r.returncode == 0, r
    assert "heuristic" in r.stderr and "XA_HEURCOM" in r.stderr  # the warning
    (b,) = [b for b in ok_json(broker, "xa", "list")["branches"] if b["xid"] == x]
    assert b["state"] == "heuristically committed"
    assert bodies(consume_all(broker, qout)) == ["confirmation-1"]
    assert bodies(consume_all(broker, qin)) == []

    # The manager comes back and commits: it learns what the operator did.
    assert tm.xa("COMMIT", x).result == "XA_HEURCOM"
    assert tm.xa("COMMIT", x).result == "XA_HEURCOM"  # until it forgets
    # A heuristic decision on a branch that is not prepared is refused.
    r = escrow(broker, "xa", "rollback", x)
    assert r.returncode == 1 and "only a prepared branch" in r.stderr, r
    assert "forgotten" in ok_text(broker, "xa", "forget", x)
    assert [b for b in ok_json(broker, "xa", "list")["branches"] if b["xid"] == x] == []
    assert tm.xa("COMMIT", x).result == "XAER_NOTA"
    assert escrow(broker, "xa", "commit", x).returncode == 4
    assert escrow(broker, "xa", "forget", x).returncode == 4


def test_heuristic_rollback_then_the_managers_commit_gets_heurrb_and_it_forgets(broker, stomp_client):
    qin, qout = f"/queue/{unique('in')}", f"/queue/{unique('out')}"
    x, tm = prepared_branch(broker, stomp_client, qin, qout)
    r = escrow(broker, "xa", "rollback", x)
    assert r.returncode == 0, r
    assert "XA_HEURRB" in r.stderr
    (b,) = [b for b in ok_json(broker, "xa", "list")["branches"] if b["xid"] == x]
    assert b["state"] == "heuristically rolled back"
    assert tm.xa("COMMIT", x).result == "XA_HEURRB"
    assert tm.xa("FORGET", x).result == "XA_OK"  # the manager forgets
    assert [b for b in ok_json(broker, "xa", "list")["branches"] if b["xid"] == x] == []
    # Rolled back: the send vanished, the consumed order is back.
    assert bodies(consume_all(broker, qout)) == []
    assert bodies(consume_all(broker, qin)) == ["order-1"]


def test_heuristic_decision_refused_for_a_branch_that_is_not_prepared(broker, stomp_client):
    c = stomp_client(broker)
    x = new_xid()
    assert c.xa("START", x).result == "XA_OK"
    c.send(f"/queue/{unique('x')}", "in a branch")
    assert c.xa("END", x, "TMSUCCESS").result == "XA_OK"
    (b,) = [b for b in ok_json(broker, "xa", "list")["branches"] if b["xid"] == x]
    assert b["state"] == "idle"
    for decision in ("commit", "rollback", "forget"):
        r = escrow(broker, "xa", decision, x)
        assert r.returncode == 1, r
        assert "idle" in r.stderr, r.stderr
    assert c.xa("ROLLBACK", x).result == "XA_OK"
    r = escrow(broker, "xa", "commit", "not-an-xid")
    assert r.returncode == 2, r


# --------------------------------------------------------------------------------------------
# Backup, check-config, connecting and exit codes
# --------------------------------------------------------------------------------------------

def test_backup_is_a_copy_another_escrowd_serves(broker_factory, stomp_client, tmp_path):
    broker = broker_factory(config=f'[storage]\nbackup-root = "{tmp_path}"\n')  # test_backup_root.py
    q = unique("bk")
    c = stomp_client(broker)
    for i in range(3):
        c.send(f"/queue/{q}", f"kept-{i}")
    target = tmp_path / "backup"
    answer = ok_json(broker, "backup", target)
    assert answer["path"] == str(target) and answer["bytes"] > 0
    assert (target / "data.mdb").exists()
    assert escrow(broker, "backup", target).returncode == 1  # never over an existing copy
    compacted = tmp_path / "compacted"
    assert "compacted" in ok_text(broker, "backup", "--compact", compacted)

    for copy in (target, compacted):
        second = broker_factory(data_dir=copy)
        assert bodies(consume_all(second, f"/queue/{q}")) == [f"kept-{i}" for i in range(3)]
        second.terminate()
    # The original still has them too.
    assert queue_row(broker, q)["depth"] == 3


def test_check_config_good_and_bad_files(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('log-level = "info"\n[delivery]\nmessage-expiry-scan-period = 1000\n')
    r = escrow(None, "check-config", good)
    assert r.returncode == 0, r
    assert f"{good}: ok" in r.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('# comment\nlog-level = "info"\nbogus-key = 1\n')
    r = escrow(None, "check-config", bad)
    assert r.returncode == 1, r
    assert f"{bad}:3" in r.stderr and "bogus-key" in r.stderr
    r = escrow(None, "--json", "check-config", bad)
    assert r.returncode == 1 and json.loads(r.stdout)["ok"] is False
    assert escrow(None, "check-config", tmp_path / "missing.toml").returncode == 1


def test_exit_codes_connecting_and_the_config_file(broker, tmp_path):
    # Nobody listens: 3.
    r = escrow(None, "--url", f"stomp://127.0.0.1:{free_port()}", "status", url=False)
    assert r.returncode == 3, r
    assert "cannot connect" in r.stderr
    # Usage errors: 2.
    assert escrow(broker, "no-such-command").returncode == 2
    assert escrow(broker).returncode == 2
    assert escrow(None, "--url", "http://127.0.0.1:1", "status", url=False).returncode == 2
    # The config file gives the URL (and credentials, sent as login/passcode).
    conf = tmp_path / "escrow.toml"
    conf.write_text(f'url = "stomp://127.0.0.1:{broker.port}"\nuser = "ops"\npassword = "pw"\ntimeout = 20\n')
    r = escrow(None, "--config", conf, "--json", "connections", env={"ESCROW_PASSWORD": "from-env"}, url=False)
    assert r.returncode == 0, r
    assert any(c["login"] == "ops" for c in json.loads(r.stdout)["connections"])
    conf.write_text('url = "stomp://127.0.0.1:1"\nbogus = 1\n')
    r = escrow(None, "--config", conf, "status", url=False)
    assert r.returncode == 2 and f"{conf}:2" in r.stderr, r
    # --help is not an error.
    r = escrow(None, "--help", url=False)
    assert r.returncode == 0 and "xa" in r.stdout


def test_over_tls_with_stomp_ssl_url(broker_factory, certs):
    broker = broker_factory(config=tls_config(listener(certs.server, certs.server_key)))
    [port] = tls_ports(broker)
    r = escrow(None, "--url", f"stomp+ssl://127.0.0.1:{port}", "--ca-file", certs.ca, "--json", "status", url=False)
    assert r.returncode == 0, r
    assert any(listener.endswith("(tls)") for listener in json.loads(r.stdout)["listeners"])
    # A certificate the command cannot verify: it does not connect.
    r = escrow(None, "--url", f"stomp+ssl://127.0.0.1:{port}", "--ca-file", certs.untrusted, "status", url=False)
    assert r.returncode == 3, r


def test_admin_frame_answers_and_errors(broker, raw):
    s = raw(broker)
    s.connect()
    s.send(frame_bytes("ADMIN", [("admin-command", "no-such"), ("receipt", "r1")]))
    f = s.read_frame()
    assert (f.command, f.headers["receipt-id"], f.headers["admin-status"]) == ("RECEIPT", "r1", "invalid")
    assert "unknown admin-command 'no-such'" in f.headers["message"]
    # A failure is an answer: the connection stays open for the next frame.
    s.send(frame_bytes("ADMIN", [("admin-command", "queues"), ("receipt", "r2")]))
    f = s.read_frame()
    assert f.headers["admin-status"] == "ok" and f.headers["content-type"] == "application/json"
    assert "queues" in json.loads(f.body)
    s.send(frame_bytes("ADMIN", [("admin-command", "status")]))
    f = s.read_frame()
    assert f.command == "ERROR" and "no receipt header" in f.headers["message"]


# --------------------------------------------------------------------------------------------
# The configuration in force
# --------------------------------------------------------------------------------------------

def test_config_shows_the_configuration_in_force_and_hides_passwords(broker_factory):
    """escrow config: every key with its value (the file's, a default, the command line's), in the
    file's sections and names; a coordinated database's password never shows. The database need
    not be reachable: escrowd connects to it only when it needs it (nothing listens on its port)."""
    port = free_port()
    secret = "hunter2-not-for-operators"
    broker = broker_factory(listen=False, config=(
        f'listen = ["127.0.0.1:{port}"]\n'
        '[limits]\nmax-headers = 500\n'
        '[[coordinator.postgresql]]\nname = "shop"\n'
        f'conninfo = "host=127.0.0.1 port={free_port()} dbname=shop user=app password={secret} connect_timeout=1"\n'))

    answer = ok_json(broker, "config")
    assert answer["config_file"] == str(broker.config_path)
    assert "data-dir" in answer["command_line_keys"] and "listen" not in answer["command_line_keys"]
    assert "address-settings" in answer["reloadable"] and "listen" not in answer["reloadable"]
    config = answer["config"]
    assert config["listen"] == [f"127.0.0.1:{port}"]
    assert config["data-dir"] == str(broker.data_dir)
    assert config["limits"]["max-headers"] == 500
    assert config["limits"]["max-frame-size"] == 10485760  # the default
    assert config["address-settings"][0]["dead-letter-address"] == "DLQ"
    [database] = config["coordinator"]["postgresql"]
    assert database["name"] == "shop"
    assert "user=app password=*** connect_timeout=1" in database["conninfo"]

    text = ok_text(broker, "config")
    assert f"# file: {broker.config_path}" in text
    assert f'listen = ["127.0.0.1:{port}"]' in text
    assert "\n[limits]\n" in text and "\nmax-headers = 500\n" in text
    assert "\n[[coordinator.postgresql]]\n" in text and 'name = "shop"' in text
    for shown in (json.dumps(answer), text, broker.log):
        assert secret not in shown
