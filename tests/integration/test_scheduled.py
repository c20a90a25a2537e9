"""Scheduled delivery (docs/stomp.md, "Scheduled delivery"; Escrow issue 26): a SEND with
_AMQ_SCHED_DELIVERY or _HQ_SCHED_DELIVERY (epoch milliseconds), AMQ_SCHEDULED_DELAY or
_AMQ_SCHED_DELAY (milliseconds from now) is stored before its RECEIPT and delivered to no consumer
before its time, then as any other message. Its header errors; a time already past; due order;
local and XA transactions (the schedule starts at commit); SIGKILL with messages due during the
downtime; expiry before the delivery time; topics; `escrow scheduled` list / deliver / delete,
`escrow browse`, `escrow queues` and the metrics; refused writes through the fault seam (the SEND's,
and the due pass's); non-persistent scheduled messages; auto-delete; redelivery; 2,000 messages
due within 2 s.

Timing: a test that waits does so only to wait out a schedule, and then checks with wall-clock
arrival times (escrowd schedules by the wall clock) that nothing came before its time: a MESSAGE is
timed when python3-stomp's receiver thread parses it, after escrowd wrote it, so its time is an
upper bound of when escrowd released it; 5 ms of slack covers only the clocks' granularity. Every
test that touches the store ends with `escrow check` (kill9 runs it, or check_store)."""

import json
import random
import re
import threading
import time

import pytest
import stomp

from conftest import (SLOW, TIMEOUT, bodies, check_store, consume_all, frame_bytes, new_xid, queue,
                      unique)
from test_admin import escrow, ok_json, ok_text, queue_row
from test_duplicates import HTTP_CONFIG, metric
from test_failure_paths import admin, admin_frame_answer, expect_error, faulty_broker, store_status
from test_security import admin_frame, hashes, login, refused, secured  # noqa: F401  (hashes, secured: fixtures)
from test_undelivered import DEFAULTS, settings


ABSOLUTE = ("_AMQ_SCHED_DELIVERY", "_HQ_SCHED_DELIVERY")
RELATIVE = ("AMQ_SCHEDULED_DELAY", "_AMQ_SCHED_DELAY")
SLACK_MS = 5  # clock granularity only
HOUR = 3_600_000
# A delivery time far enough ahead that the SEND is stored and answered before it, also on a
# loaded machine: the tests then check that the RECEIPT came first and the MESSAGE not before it.
AHEAD_MS = int(800 * SLOW)


def now_ms():
    return int(time.time() * 1000)


def sleep_until(ms):
    """Waits out a schedule: until the epoch milliseconds `ms` (the wall clock, escrowd's clock)."""
    time.sleep(max(0.0, ms / 1000 - time.time()))


class Arrivals(stomp.ConnectionListener):
    """The wall-clock time (epoch ms, float) at which each MESSAGE and RECEIPT was parsed. A listener
    of its own, called after the Collector: the lookups wait for it."""

    def __init__(self):
        self.cond = threading.Condition()
        self.messages = []  # (ms, frame)
        self.receipts = {}  # receipt-id -> ms

    def on_message(self, frame):
        t = time.time() * 1000
        with self.cond:
            self.messages.append((t, frame))
            self.cond.notify_all()

    def on_receipt(self, frame):
        t = time.time() * 1000
        with self.cond:
            self.receipts[frame.headers.get("receipt-id")] = t
            self.cond.notify_all()

    def _wait(self, predicate, what):
        with self.cond:
            assert self.cond.wait_for(predicate, TIMEOUT), f"no {what} timed"

    def of(self, body):
        """When the one MESSAGE with this body arrived."""
        self._wait(lambda: any(f.body == body for _, f in self.messages), f"message {body!r}")
        with self.cond:
            times = [t for t, f in self.messages if f.body == body]
        assert len(times) == 1, f"{body!r} arrived {len(times)} times"
        return times[0]

    def receipt(self, rid):
        self._wait(lambda: rid in self.receipts, f"RECEIPT {rid}")
        with self.cond:
            return self.receipts[rid]

    def all(self, n):
        """The first n (time, frame) pairs, in arrival order."""
        self._wait(lambda: len(self.messages) >= n, f"{n} messages")
        with self.cond:
            return list(self.messages[:n])


def timed(client):
    """Adds an Arrivals listener to a conftest Client; returns it."""
    arrivals = Arrivals()
    client.conn.set_listener("arrivals", arrivals)
    return arrivals


def assert_not_early(arrived, due, what):
    assert arrived >= due - SLACK_MS, f"{what} arrived {due - arrived:.1f} ms before its time ({due})"


def check_counts(data_dir):
    """`escrow check --json`'s counts (the store consistent)."""
    return json.loads(check_store(data_dir, "--json"))["counts"]


def scheduled_list(broker, name):
    return ok_json(broker, "scheduled", "list", name, "--count", 10000)


def admin_answer(client, command, **headers):
    """An ADMIN frame answered by a RECEIPT (any admin-status): (status, message, JSON body or None)."""
    f = admin_frame_answer(client, command, **headers)
    status = f.headers.get("admin-status")
    return status, f.headers.get("message", ""), json.loads(f.body) if status == "ok" else None


def ok(client, verb, xid=None, flags=None, **headers):
    r = client.xa(verb, xid, flags, **headers)
    assert r.result == "XA_OK", f"XA-{verb} {xid}: expected XA_OK, got {r}"
    return r


# --------------------------------------------------------------------------------------------
# 1. The four spellings: RECEIPT first, no delivery before the time, the header kept
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("header", ABSOLUTE + RELATIVE)
def test_each_spelling_is_received_first_and_delivered_not_before_its_time(broker, stomp_client, header):
    q = queue("spell")
    c = stomp_client(broker)
    arrivals = timed(c)
    sub = c.subscribe(q)  # subscribed all along: an early delivery would be seen
    p = stomp_client(broker)
    sent = timed(p)
    before = now_ms()
    due = before + AHEAD_MS  # for a relative header: at least this, the broker's clock having moved on
    value = str(due) if header in ABSOLUTE else str(AHEAD_MS)
    rid = p.send(q, "later", headers={header: value, "color": "blue"}, wait=False)
    p.wait_receipt(rid)
    receipt_at = sent.receipt(rid)
    p.send(q, "plain")  # sent after it, not scheduled: the queue is not blocked behind it
    m_plain = c.wait_messages(1, subscription=sub)[0]
    assert m_plain.body == "plain"
    assert arrivals.of("plain") < due, "the unscheduled message waited for the scheduled one"
    m = c.wait_messages(2, subscription=sub)[1]
    got_at = arrivals.of("later")
    assert m.body == "later"
    assert receipt_at < due, f"the RECEIPT came {receipt_at - due:.0f} ms after the delivery time"
    assert receipt_at < got_at
    assert_not_early(got_at, due, f"a SEND with {header}:{value}")
    assert m.headers.get(header) == value, f"the MESSAGE lost {header}: {m.headers}"
    assert m.headers["color"] == "blue"
    assert (m.headers["redelivered"], m.headers["delivery-count"]) == ("false", "1")
    c.settle(2, subscription=sub)
    assert check_counts(broker.data_dir)["scheduled"] == 0


# --------------------------------------------------------------------------------------------
# 2. Header errors: an ERROR naming the problem, nothing stored
# --------------------------------------------------------------------------------------------

LAST_MS_OF_9999 = 253402300799999

BAD_HEADERS = [
    ({"_AMQ_SCHED_DELIVERY": "abc"}, ["invalid _AMQ_SCHED_DELIVERY header 'abc': use epoch milliseconds"]),
    ({"_HQ_SCHED_DELIVERY": "-5"}, ["invalid _HQ_SCHED_DELIVERY header '-5': use epoch milliseconds"]),
    ({"_AMQ_SCHED_DELIVERY": ""}, ["invalid _AMQ_SCHED_DELIVERY header '': use epoch milliseconds"]),
    ({"_AMQ_SCHED_DELIVERY": "99999999999999999999999"}, ["invalid _AMQ_SCHED_DELIVERY header", "epoch milliseconds"]),
    ({"AMQ_SCHEDULED_DELAY": "1.5"},
     ["invalid AMQ_SCHEDULED_DELAY header '1.5': use milliseconds from now (0 or more)"]),
    ({"_AMQ_SCHED_DELAY": "-1"}, ["invalid _AMQ_SCHED_DELAY header '-1': use milliseconds from now (0 or more)"]),
    ({"_AMQ_SCHED_DELIVERY": str(LAST_MS_OF_9999 + 1)},
     [f"invalid _AMQ_SCHED_DELIVERY header '{LAST_MS_OF_9999 + 1}': the delivery time is after the year 9999"]),
    ({"AMQ_SCHEDULED_DELAY": str(2 ** 63)},
     [f"invalid AMQ_SCHEDULED_DELAY header '{2 ** 63}': the delivery time is after the year 9999"]),
    ({"_AMQ_SCHED_DELIVERY": "1", "AMQ_SCHEDULED_DELAY": "5"},
     ["SEND has both ", "_AMQ_SCHED_DELIVERY", "AMQ_SCHEDULED_DELAY", "headers: give one delivery time"]),
    ({"_HQ_SCHED_DELIVERY": "1", "_AMQ_SCHED_DELAY": "5"},
     ["SEND has both ", "_HQ_SCHED_DELIVERY", "_AMQ_SCHED_DELAY", "give one delivery time"]),
    ({"AMQ_SCHEDULED_DELAY": "1000", "AMQ_SCHEDULED_REPEAT": "3"},
     ["SEND's AMQ_SCHEDULED_REPEAT header asks for repeated delivery, which Escrow does not do"]),
    ({"AMQ_SCHEDULED_DELAY": "1000", "AMQ_SCHEDULED_PERIOD": "60000"},
     ["SEND's AMQ_SCHEDULED_PERIOD header asks for repeated delivery, which Escrow does not do"]),
    ({"AMQ_SCHEDULED_CRON": "0 * * * *"},
     ["SEND's AMQ_SCHEDULED_CRON header asks for repeated delivery, which Escrow does not do"]),
]


@pytest.mark.parametrize("headers,needles", BAD_HEADERS,
                         ids=["letters", "negative", "empty", "overflow", "fraction", "negative-delay",
                              "year-10000", "delay-past-9999", "two-headers", "two-other-headers", "repeat",
                              "period", "cron"])
def test_a_bad_schedule_header_is_an_error_naming_it_and_stores_nothing(broker, stomp_client, headers, needles):
    q = queue("bad")
    p = stomp_client(broker)
    rid = p.send(q, "refused", headers=headers, wait=False)
    message = expect_error(p, rid, *needles)
    assert "\n" not in message
    p.close()
    assert consume_all(broker, q) == []
    assert check_counts(broker.data_dir)["scheduled"] == 0
    assert ok_json(broker, "scheduled", "list", q.removeprefix("/queue/"))["scheduled"] == 0


def test_no_repeat_headers_and_the_last_millisecond_of_9999_are_accepted(broker, stomp_client):
    q = queue("edge")
    p = stomp_client(broker)
    # ActiveMQ's clients send these empty or 0 when they ask for no repetition.
    p.send(q, "once", headers={"AMQ_SCHEDULED_DELAY": str(HOUR), "AMQ_SCHEDULED_REPEAT": "0",
                               "AMQ_SCHEDULED_PERIOD": "", "AMQ_SCHEDULED_CRON": ""})
    p.send(q, "late", headers={"_AMQ_SCHED_DELIVERY": str(LAST_MS_OF_9999)})
    listed = scheduled_list(broker, q.removeprefix("/queue/"))
    assert [(m["body"], m["deliver_at"] == LAST_MS_OF_9999) for m in listed["messages"]] == \
        [("once", False), ("late", True)]
    assert consume_all(broker, q) == []  # neither is due
    broker.kill9()  # checks the store
    broker.start()
    assert [m["deliver_at"] for m in scheduled_list(broker, q.removeprefix("/queue/"))["messages"]][1] == \
        LAST_MS_OF_9999
    assert check_counts(broker.data_dir)["scheduled"] == 2


# --------------------------------------------------------------------------------------------
# 3. A time already past is no schedule; due order; priority among messages due together
# --------------------------------------------------------------------------------------------

def test_a_time_already_past_or_no_delay_is_delivered_at_once(broker, stomp_client):
    q = queue("past")
    name = q.removeprefix("/queue/")
    p = stomp_client(broker)
    past = str(now_ms() - 60_000)
    p.send(q, "past", headers={"_AMQ_SCHED_DELIVERY": past})
    p.send(q, "hq-past", headers={"_HQ_SCHED_DELIVERY": "1"})
    p.send(q, "no delay", headers={"AMQ_SCHEDULED_DELAY": "0"})
    p.send(q, "no delay either", headers={"_AMQ_SCHED_DELAY": "0"})
    # Ready once the RECEIPT is there: in the depth, not in the schedule, and stored with no
    # delivery time (browse would show deliver_at for a message that had one).
    row = queue_row(broker, name)
    assert (row["depth"], row["scheduled"]) == (4, 0), row
    browsed = ok_json(broker, "browse", name)
    assert [m["body"] for m in browsed["messages"]] == ["past", "hq-past", "no delay", "no delay either"]
    assert all("deliver_at" not in m for m in browsed["messages"]), browsed
    assert browsed["scheduled"] == []
    assert check_counts(broker.data_dir)["scheduled"] == 0
    got = consume_all(broker, q)
    assert bodies(got) == ["past", "hq-past", "no delay", "no delay either"]
    assert got[0].headers["_AMQ_SCHED_DELIVERY"] == past
    assert got[2].headers["AMQ_SCHEDULED_DELAY"] == "0"


def test_messages_arrive_in_due_order_and_by_priority_when_due_together(broker, stomp_client):
    q = queue("order")
    c = stomp_client(broker)
    arrivals = timed(c)
    sub = c.subscribe(q)
    p = stomp_client(broker)
    base = now_ms() + AHEAD_MS
    dues = {"+300": base + 300, "+100": base + 100, "+200": base + 200, "low": base + 400, "high": base + 400}
    for body in ("+300", "+100", "+200"):  # sent out of due order: the lowest message id is due last
        p.send(q, body, headers={"_AMQ_SCHED_DELIVERY": str(dues[body])})
    p.send(q, "low", headers={"_AMQ_SCHED_DELIVERY": str(dues["low"]), "priority": "1"})
    p.send(q, "high", headers={"_AMQ_SCHED_DELIVERY": str(dues["high"]), "priority": "8"})
    c.settle(0, subscription=sub)
    msgs = c.wait_messages(5, timeout=TIMEOUT + AHEAD_MS / 1000, subscription=sub)
    assert bodies(msgs) == ["+100", "+200", "+300", "high", "low"]
    for body, due in dues.items():
        assert_not_early(arrivals.of(body), due, body)
    c.settle(5, subscription=sub)
    assert check_counts(broker.data_dir)["scheduled"] == 0


# --------------------------------------------------------------------------------------------
# 4. Transactions: nothing before the commit, nothing after an abort, the time still holds
# --------------------------------------------------------------------------------------------

def test_local_transactions_schedule_at_commit_and_an_abort_leaves_nothing(broker, stomp_client):
    q = queue("tx")
    name = q.removeprefix("/queue/")
    c = stomp_client(broker)
    arrivals = timed(c)
    sub = c.subscribe(q)
    p = stomp_client(broker)

    # Aborted: never scheduled, never delivered.
    aborted_due = now_ms() + 300
    p.begin("aborted")
    p.send(q, "aborted", headers={"_AMQ_SCHED_DELIVERY": str(aborted_due), "transaction": "aborted"})
    assert scheduled_list(broker, name)["scheduled"] == 0  # in the transaction only
    p.abort("aborted")
    assert scheduled_list(broker, name)["scheduled"] == 0

    # Committed before its time: scheduled from the commit, delivered at its time, not before.
    due = now_ms() + int(1500 * SLOW)
    p.begin("committed")
    p.send(q, "committed", headers={"AMQ_SCHEDULED_DELAY": str(int(1500 * SLOW)), "transaction": "committed"})
    assert scheduled_list(broker, name)["scheduled"] == 0
    p.commit("committed")
    listed = scheduled_list(broker, name)
    assert [m["body"] for m in listed["messages"]] == ["committed"] and listed["messages"][0]["stored"]
    assert listed["messages"][0]["deliver_at"] >= due
    (m,) = c.wait_messages(1, timeout=TIMEOUT + 1.5 * SLOW, subscription=sub)
    assert m.body == "committed"
    assert_not_early(arrivals.of("committed"), due, "a committed scheduled message")
    assert now_ms() > aborted_due
    c.settle(1, subscription=sub)  # the aborted one never came

    # Its time passed while the transaction was open: delivered at the commit, not before it. A
    # delay counts from the SEND, not from the COMMIT.
    other = queue("txdelay")
    sent_at = now_ms()
    passed_due = sent_at + 200
    p.begin("late")
    p.send(q, "late commit", headers={"_AMQ_SCHED_DELIVERY": str(passed_due), "transaction": "late"})
    p.send(other, "delayed in a transaction", headers={"_AMQ_SCHED_DELAY": "200", "transaction": "late"})
    sleep_until(passed_due + 300)
    c.settle(1, subscription=sub)
    committed_at = now_ms()
    p.commit("late")
    c.wait_messages(2, subscription=sub)
    assert arrivals.of("late commit") >= committed_at
    c.settle(2, subscription=sub)
    browsed = ok_json(broker, "browse", other.removeprefix("/queue/"))
    (delayed,) = browsed["messages"] + browsed["scheduled"]  # ready, or about to be
    assert sent_at + 200 <= delayed["deliver_at"] < committed_at, (sent_at, committed_at, delayed)
    assert bodies(consume_all(broker, other)) == ["delayed in a transaction"]
    assert check_counts(broker.data_dir)["scheduled"] == 0


@pytest.mark.parametrize("crash", [False, True], ids=["committed", "SIGKILL while prepared"])
def test_an_xa_branch_schedules_at_commit(broker, stomp_client, crash):
    q = queue("xa")
    name = q.removeprefix("/queue/")
    p = stomp_client(broker)
    due = now_ms() + int((3000 if crash else 1500) * SLOW)
    x = new_xid()
    ok(p, "START", x)
    p.send(q, "xa", headers={"_AMQ_SCHED_DELIVERY": str(due), "kind": "xa"})
    ok(p, "END", x, "TMSUCCESS")
    ok(p, "PREPARE", x)
    assert scheduled_list(broker, name)["scheduled"] == 0  # prepared: nothing scheduled yet
    assert check_counts(broker.data_dir)["scheduled"] == 0
    # A rolled-back branch schedules nothing.
    y = new_xid()
    ok(p, "START", y)
    p.send(q, "rolled back", headers={"_AMQ_SCHED_DELIVERY": str(now_ms() + 200)})
    ok(p, "END", y, "TMSUCCESS")
    ok(p, "PREPARE", y)
    ok(p, "ROLLBACK", y)
    if crash:
        p.close()
        broker.kill9()  # checks the store: the prepared branch holds the scheduled send
        broker.start()
        p = stomp_client(broker)
    ok(p, "COMMIT", x)
    listed = scheduled_list(broker, name)
    assert [(m["body"], m["deliver_at"]) for m in listed["messages"]] == [("xa", due)]
    c = stomp_client(broker)
    arrivals = timed(c)
    sub = c.subscribe(q)
    (m,) = c.wait_messages(1, timeout=TIMEOUT + 3 * SLOW, subscription=sub)
    assert m.body == "xa" and m.headers["kind"] == "xa"
    assert_not_early(arrivals.of("xa"), due, "a committed XA send")
    c.settle(1, subscription=sub)  # the rolled-back one never came
    broker.kill9()
    assert check_counts(broker.data_dir)["scheduled"] == 0


# --------------------------------------------------------------------------------------------
# 5. SIGKILL: the schedule survives; what came due while escrowd was down comes soon after start
# --------------------------------------------------------------------------------------------

def test_sigkill_keeps_the_schedule_and_delivers_what_came_due_while_down(broker, stomp_client):
    q = queue("restart")
    name = q.removeprefix("/queue/")
    p = stomp_client(broker)
    t0 = now_ms()
    dues = {"during": t0 + int(600 * SLOW), "later": t0 + int(3500 * SLOW), "last": t0 + int(4000 * SLOW)}
    p.send(q, "during", headers={"_AMQ_SCHED_DELIVERY": str(dues["during"])})
    p.send(q, "later", headers={"AMQ_SCHEDULED_DELAY": str(int(3500 * SLOW))})
    p.send(q, "last", headers={"_HQ_SCHED_DELIVERY": str(dues["last"]), "priority": "9"})
    p.close()
    times = {m["body"]: m["deliver_at"] for m in scheduled_list(broker, name)["messages"]}
    assert times["during"] == dues["during"] and times["last"] == dues["last"] and times["later"] >= dues["later"]
    broker.kill9()  # `escrow check` of the store it left
    text = check_store(broker.data_dir)
    assert re.search(r"^scheduled +3$", text, re.M), text
    assert check_counts(broker.data_dir)["scheduled"] == 3
    sleep_until(dues["during"] + 200)  # "during" comes due while escrowd is down
    broker.start()
    started = now_ms()
    after = {m["body"]: m["deliver_at"] for m in scheduled_list(broker, name)["messages"]}
    assert after.items() <= times.items(), f"times changed across the restart: {times} then {after}"
    assert {"later", "last"} <= after.keys() or now_ms() >= dues["later"], after
    c = stomp_client(broker)
    arrivals = timed(c)
    sub = c.subscribe(q)
    c.wait_messages(1, subscription=sub)
    during_at = arrivals.of("during")
    if started + 1000 < dues["later"]:
        # soon after the start, well before the next one's time
        assert during_at < dues["later"], "what came due during the downtime waited for a later message"
    msgs = c.wait_messages(3, timeout=TIMEOUT + 4 * SLOW, subscription=sub)
    assert bodies(msgs) == ["during", "later", "last"]
    for body, due in dues.items():
        assert_not_early(arrivals.of(body), due, body)
    assert msgs[2].headers["priority"] == "9"
    c.settle(3, subscription=sub)
    c.disconnect()
    broker.kill9()
    assert check_counts(broker.data_dir)["scheduled"] == 0


# --------------------------------------------------------------------------------------------
# 6. Expiry before the delivery time: to the expiry address (or dropped), never to a consumer
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("expiry_address", ["ExpiryQueue", ""], ids=["to ExpiryQueue", "dropped"])
def test_a_message_that_expires_before_its_time_never_reaches_a_consumer(broker_factory, stomp_client,
                                                                          expiry_address):
    b = broker_factory(config=settings({**DEFAULTS, "expiry-address": expiry_address}))
    q = queue("expfirst")
    name = q.removeprefix("/queue/")
    c = stomp_client(b)
    sub = c.subscribe(q)  # a consumer all along
    p = stomp_client(b)
    expires = now_ms() + AHEAD_MS
    due = expires + int(700 * SLOW)
    p.send(q, "expires first", headers={"_AMQ_SCHED_DELIVERY": str(due), "expires": str(expires)})
    (listed,) = scheduled_list(b, name)["messages"]
    assert (listed["due"], listed["deliver_at"], listed["expires"]) == (expires, due, expires)
    assert listed["expires_first"] is True
    if expiry_address:
        (moved,) = consume_all(b, "/queue/ExpiryQueue", 1, timeout=TIMEOUT + AHEAD_MS / 1000)
        assert moved.body == "expires first"
        assert moved.headers["_AMQ_SCHED_DELIVERY"] == str(due)  # kept, and the copy is not scheduled
        assert moved.headers["_HQ_REASON"] == "expired" and moved.headers["_HQ_ORIG_QUEUE"] == name
        assert int(moved.headers["_HQ_ACTUAL_EXPIRY"]) >= expires
    else:
        b.wait_log("expired; dropped", timeout=TIMEOUT + AHEAD_MS / 1000)
        assert consume_all(b, "/queue/ExpiryQueue") == []
    sleep_until(due + 300)  # past its delivery time too
    c.settle(0, subscription=sub)
    assert scheduled_list(b, name)["scheduled"] == 0
    assert check_counts(b.data_dir)["scheduled"] == 0


# --------------------------------------------------------------------------------------------
# 7. Topics: a durable and a non-durable subscription each get their copy after its time
# --------------------------------------------------------------------------------------------

def test_durable_and_non_durable_topic_subscriptions_each_get_it_after_its_time(broker, stomp_client):
    topic = f"/topic/{unique('sched')}"
    cid = unique("cid")
    d = stomp_client(broker, headers={"client-id": cid})
    d_arrivals = timed(d)
    dsub = d.subscribe(topic, ack="client-individual", headers={"durable-subscription-name": "dur"})
    n = stomp_client(broker)
    n_arrivals = timed(n)
    nsub = n.subscribe(topic)
    p = stomp_client(broker)
    due = now_ms() + AHEAD_MS
    p.send(topic, "fan-out", headers={"_AMQ_SCHED_DELIVERY": str(due)})
    (stored,) = scheduled_list(broker, f"{cid}.dur")["messages"]  # the durable copy is stored
    assert stored["body"] == "fan-out" and stored["stored"] is True
    assert check_counts(broker.data_dir)["scheduled"] == 1  # the non-durable copy is in memory
    (dm,) = d.wait_messages(1, subscription=dsub)
    (nm,) = n.wait_messages(1, subscription=nsub)
    assert_not_early(d_arrivals.of("fan-out"), due, "the durable subscription's copy")
    assert_not_early(n_arrivals.of("fan-out"), due, "the non-durable subscription's copy")
    assert dm.headers["_AMQ_SCHED_DELIVERY"] == nm.headers["_AMQ_SCHED_DELIVERY"] == str(due)
    d.ack(dm, receipt=True)
    d.settle(1, subscription=dsub)
    n.settle(1, subscription=nsub)
    # Ending the durable subscription takes its scheduled copies with it.
    p.send(topic, "never", headers={"AMQ_SCHEDULED_DELAY": str(HOUR)})
    assert scheduled_list(broker, f"{cid}.dur")["scheduled"] == 1
    assert (queue_row(broker, f"{cid}.dur")["depth"], queue_row(broker, f"{cid}.dur")["scheduled"]) == (0, 1)
    (durable,) = [s for s in admin(p, "subscriptions")["durable"] if s["client_id"] == cid]
    assert (durable["depth"], durable["scheduled"]) == (0, 1), durable
    d.unsubscribe(dsub, headers={"durable-subscription-name": "dur"})
    assert check_counts(broker.data_dir)["scheduled"] == 0


# --------------------------------------------------------------------------------------------
# 8. escrow scheduled list / deliver / delete, browse, queues, metrics; permissions
# --------------------------------------------------------------------------------------------

def test_escrow_scheduled_list_deliver_delete_with_browse_queues_and_metrics(broker_factory, stomp_client):
    b = broker_factory(config=HTTP_CONFIG)
    name = unique("ops")
    q = f"/queue/{name}"
    p = stomp_client(b)
    t0 = now_ms()
    p.send(q, "in 3 h", headers={"_AMQ_SCHED_DELIVERY": str(t0 + 3 * HOUR), "kind": "late"})
    p.send(q, "in 1 h", headers={"AMQ_SCHEDULED_DELAY": str(HOUR)})
    p.send(q, "in 2 h", headers={"_AMQ_SCHED_DELIVERY": str(t0 + 2 * HOUR), "priority": "7"})
    p.send(q, "ready now")
    sent = now_ms()

    listed = ok_json(b, "scheduled", "list", name)
    assert (listed["queue"], listed["scheduled"], listed["more"]) == (name, 3, False) and "next" not in listed
    msgs = listed["messages"]
    assert [m["body"] for m in msgs] == ["in 1 h", "in 2 h", "in 3 h"]  # due order
    late = msgs[2]
    assert late["deliver_at"] == late["due"] == t0 + 3 * HOUR
    assert (late["expires_first"], late["stored"], late["persistent"], late["priority"]) == (False, True, True, 4)
    assert (late["destination"], late["expires"], late["body_bytes"], late["body_utf8"]) == (q, 0, 6, True)
    assert late["headers"]["kind"] == "late" and late["headers"]["_AMQ_SCHED_DELIVERY"] == str(t0 + 3 * HOUR)
    assert t0 <= late["timestamp"] <= sent
    assert t0 + HOUR <= msgs[0]["deliver_at"] <= sent + HOUR and msgs[1]["priority"] == 7
    ids = {m["body"]: m["message_id"] for m in msgs}
    assert len(set(ids.values())) == 3

    # Pages: --count, then ADMIN's after with the page's next.
    page = ok_json(b, "scheduled", "list", name, "--count", 2)
    assert [m["body"] for m in page["messages"]] == ["in 1 h", "in 2 h"] and page["more"] is True
    assert str(msgs[1]["due"]) in page["next"] and str(msgs[1]["message_id"]) in page["next"], page
    a = stomp_client(b)
    rest = admin(a, "scheduled", name=name, after=page["next"])
    assert [m["body"] for m in rest["messages"]] == ["in 3 h"] and rest["more"] is False
    assert [m["body"] for m in admin(a, "scheduled", name=name, count=1)["messages"]] == ["in 1 h"]
    text = ok_text(b, "scheduled", "list", name)
    assert f"{name}: 3 scheduled messages" in text, text
    header = next(line for line in text.splitlines() if line.split()[:1] == ["ID"])
    assert header.split() == ["ID", "DELIVER", "AT", "PRIORITY", "STORED", "BYTES", "BODY"], text
    assert "in 3 h" in text and str(ids["in 3 h"]) in text

    # browse shows them beside the ready messages; queues and metrics count them apart from the depth.
    browsed = ok_json(b, "browse", name)
    assert [m["body"] for m in browsed["messages"]] == ["ready now"]
    assert [m["body"] for m in browsed["scheduled"]] == ["in 1 h", "in 2 h", "in 3 h"]
    assert browsed["scheduled"][2]["deliver_at"] == t0 + 3 * HOUR and "deliver_at" not in browsed["messages"][0]
    assert "scheduled (not delivered before their time)" in ok_text(b, "browse", name)
    row = queue_row(b, name)
    assert (row["depth"], row["scheduled"]) == (1, 3), row
    assert ok_json(b, "queue", "show", name)["scheduled"] == 3
    assert metric(b, "escrow_scheduled_messages") == 3
    assert metric(b, "escrow_scheduled_delivered_total") == 0
    assert metric(b, "escrow_scheduled_deleted_total") == 0

    # deliver --id: ready at once, with its priority; browse shows its delivery time.
    assert ok_json(b, "scheduled", "deliver", name, "--id", ids["in 2 h"]) == \
        {"queue": name, "delivered": 1, "more": True}
    assert ok_json(b, "scheduled", "deliver", name, "--id", 999_999_999)["delivered"] == 0  # not scheduled
    browsed = ok_json(b, "browse", name)
    assert [m["body"] for m in browsed["messages"]] == ["in 2 h", "ready now"]
    assert browsed["messages"][0]["deliver_at"] == t0 + 2 * HOUR
    assert [m["body"] for m in browsed["scheduled"]] == ["in 1 h", "in 3 h"]
    assert (queue_row(b, name)["depth"], queue_row(b, name)["scheduled"]) == (2, 2)
    got = consume_all(b, q)
    assert bodies(got) == ["in 2 h", "ready now"] and got[0].headers["priority"] == "7"
    assert metric(b, "escrow_scheduled_messages") == 2
    assert metric(b, "escrow_scheduled_delivered_total") == 1

    # delete --id, then --all: gone for good, across a SIGKILL too.
    assert ok_json(b, "scheduled", "delete", name, "--id", ids["in 1 h"]) == {"queue": name, "deleted": 1, "more": True}
    assert ok_json(b, "scheduled", "delete", name, "--all") == {"queue": name, "deleted": 1, "more": False}
    assert ok_json(b, "scheduled", "list", name) == {"queue": name, "scheduled": 0, "messages": [], "more": False}
    assert "deleted 0 scheduled messages of" in ok_text(b, "scheduled", "delete", name, "--all")
    assert metric(b, "escrow_scheduled_messages") == 0
    assert metric(b, "escrow_scheduled_deleted_total") == 2
    assert check_counts(b.data_dir)["scheduled"] == 0

    # A purge takes the queue's messages, not its scheduled ones; then deliver --all, in the text form.
    p.send(q, "a", headers={"AMQ_SCHEDULED_DELAY": str(HOUR)})
    p.send(q, "b", headers={"AMQ_SCHEDULED_DELAY": str(2 * HOUR)})
    p.send(q, "purged")
    assert ok_json(b, "purge", name, "--yes")["purged"] == 1
    assert [m["body"] for m in scheduled_list(b, name)["messages"]] == ["a", "b"]
    assert f"delivered 2 scheduled messages of {name}" in ok_text(b, "scheduled", "deliver", name, "--all")
    assert bodies(consume_all(b, q)) == ["a", "b"]
    assert metric(b, "escrow_scheduled_delivered_total") == 3

    # Mistakes: usage (2), no such queue (4), and the ADMIN frame's own checks.
    r = escrow(b, "scheduled", "deliver", name)
    assert r.returncode == 2 and "--id" in r.stderr and "--all" in r.stderr, r
    r = escrow(b, "scheduled", "delete", name, "--id", "1", "--all")
    assert r.returncode == 2, r
    r = escrow(b, "scheduled", "list", "no-such-queue")
    assert r.returncode == 4 and "no-such-queue" in r.stderr, r
    for headers, needle in [({"count": 0}, "invalid count '0': use 1 to 10000"),
                            ({"count": 10001}, "invalid count '10001'"),
                            ({"after": "tomorrow"}, "invalid after 'tomorrow'"),
                            ({"action": "postpone"}, "invalid action 'postpone': use list, deliver or delete"),
                            ({"action": "deliver"}, "deliver needs the id header"),
                            ({"action": "delete", "id": "1,,2"}, "invalid id '1,,2'"),
                            ({"action": "delete", "id": "1", "all": "true"}, "not both")]:
        status, message, _ = admin_answer(a, "scheduled", name=name, **headers)
        assert status == "invalid" and needle in message, (headers, status, message)
    assert admin_answer(a, "scheduled", name="no-such-queue")[0] == "not-found"

    b.kill9()
    b.start()
    assert ok_json(b, "scheduled", "list", name)["scheduled"] == 0
    assert consume_all(b, q) == []
    b.kill9()


def test_listing_takes_browse_and_delivering_takes_admin(secured):
    name = "orders." + unique()
    q = f"/queue/{name}"
    alice = login(secured, "alice")  # app: sends to orders.#
    alice.send(q, "planned", headers={"AMQ_SCHEDULED_DELAY": str(HOUR)})
    bob = login(secured, "bob")  # reader: browse and consume on orders.#
    rid = admin_frame(bob, "scheduled", name=name)
    bob.wait_receipt(rid)
    answer = bob.listener.receipt_frames[rid]
    assert answer.headers["admin-status"] == "ok"
    assert [m["body"] for m in json.loads(answer.body)["messages"]] == ["planned"]
    admin_frame(bob, "scheduled", name=name, action="deliver", all="true")
    refused(bob, r"user 'bob' lacks the admin permission on the broker")
    admin_frame(alice, "scheduled", name=name)
    refused(alice, rf"user 'alice' lacks the browse permission on '{re.escape(name)}'")
    olga = login(secured, "olga")  # ops: admin
    rid = admin_frame(olga, "scheduled", name=name, action="deliver", all="true")
    olga.wait_receipt(rid)
    answer = olga.listener.receipt_frames[rid]
    assert answer.headers["admin-status"] == "ok" and json.loads(answer.body)["delivered"] == 1
    reader = login(secured, "bob")
    sub = reader.subscribe(q)
    (m,) = reader.wait_messages(1, subscription=sub)
    assert m.body == "planned"
    for c in (alice, bob, olga, reader):
        c.close()
    secured.kill9()


# --------------------------------------------------------------------------------------------
# 9. Refused writes (ESCROW_FAULTS): the SEND's, and the due pass's
# --------------------------------------------------------------------------------------------

def test_a_scheduled_send_the_store_refuses_gets_an_error_and_schedules_nothing(broker_factory, stomp_client):
    b = faulty_broker(broker_factory, stomp_client, "commit:2:map_full")  # commit 1: the start-up queues
    q = queue("refused")
    name = q.removeprefix("/queue/")
    p = stomp_client(b)
    due = now_ms() + 300
    rid = p.send(q, "refused", headers={"_AMQ_SCHED_DELIVERY": str(due)}, wait=False)
    message = expect_error(p, rid, "message not stored")
    assert "MDB_MAP_FULL" in message, message
    c = stomp_client(b)
    sub = c.subscribe(q)
    assert scheduled_list(b, name)["scheduled"] == 0
    assert queue_row(b, name)["scheduled"] == 0
    sleep_until(due + 300)
    c.settle(0, subscription=sub)
    c.close()
    b.kill9()  # checks the store
    assert check_counts(b.data_dir)["scheduled"] == 0
    b.env = {}
    b.start()
    assert consume_all(b, q) == []


def test_a_due_pass_the_store_refuses_leaves_the_message_scheduled_until_a_pass_is_stored(broker_factory,
                                                                                         stomp_client):
    # The seam counts commits from the start, so the due pass's commit is named by its number:
    # commit 1 is the start-up's, 2 the SEND's; nothing else writes (no ACK, the consumer's queue
    # exists already), so the due pass is commit 3 and its retry a second later commit 4. Both are
    # refused; the pass after them (commit 5) is stored.
    b = faulty_broker(broker_factory, stomp_client, "commit:3-4:map_full")
    q = queue("duepass")
    name = q.removeprefix("/queue/")
    p = stomp_client(b)
    due = now_ms() + AHEAD_MS
    p.send(q, "kept", headers={"_AMQ_SCHED_DELIVERY": str(due)})
    c = stomp_client(b)
    arrivals = timed(c)
    sub = c.subscribe(q)
    assert store_status(b, stomp_client)["commits"] == 2, "a write other than the SEND's: commit 3 is not the pass"
    b.wait_log("scheduled delivery: 1 messages that came due were not made ready", timeout=TIMEOUT + AHEAD_MS / 1000)
    c.settle(0, subscription=sub)
    (still,) = scheduled_list(b, name)["messages"]  # still in the schedule, as the store says
    assert (still["body"], still["stored"], still["due"]) == ("kept", True, due)
    (m,) = c.wait_messages(1, timeout=TIMEOUT + 3 * SLOW, subscription=sub)
    assert m.body == "kept"
    got_at = arrivals.of("kept")
    assert got_at >= due + 1900, f"delivered {got_at - due:.0f} ms after its time: before the seam's two refusals"
    assert len(re.findall("1 messages that came due were not made ready", b.log)) == 2, b.log
    c.settle(1, subscription=sub)
    assert scheduled_list(b, name)["scheduled"] == 0
    c.close()
    b.kill9()
    assert check_counts(b.data_dir)["scheduled"] == 0


@pytest.mark.parametrize("action", ["deliver", "delete"])
def test_an_operators_deliver_or_delete_the_store_refuses_changes_nothing(broker_factory, stomp_client, action):
    # Commit 1: the start-up queues; 2: the SEND; 3: the operator's batch (refused); 4: the retry.
    b = faulty_broker(broker_factory, stomp_client, "commit:3:map_full")
    q = queue("oprefused")
    name = q.removeprefix("/queue/")
    p = stomp_client(b)
    due = now_ms() + 3_600_000
    p.send(q, "later", headers={"_AMQ_SCHED_DELIVERY": str(due)})
    (m,) = scheduled_list(b, name)["messages"]
    a = stomp_client(b)
    status, message, _ = admin_answer(a, "scheduled", name=name, action=action, id=str(m["message_id"]))
    assert status == "refused" and f"the store refused to {action} the scheduled messages of {name}" in message, \
        (status, message)
    assert [x["body"] for x in scheduled_list(b, name)["messages"]] == ["later"]  # as it was
    assert queue_row(b, name)["scheduled"] == 1 and queue_row(b, name)["depth"] == 0
    # Taken up again, it goes through: nothing of the refused attempt is left holding it.
    status, message, answer = admin_answer(a, "scheduled", name=name, action=action, id=str(m["message_id"]))
    assert status == "ok", (status, message)
    assert scheduled_list(b, name)["scheduled"] == 0
    assert [f.body for f in consume_all(b, q)] == (["later"] if action == "deliver" else [])
    a.close()
    p.close()
    b.kill9()
    assert check_counts(b.data_dir)["scheduled"] == 0


# --------------------------------------------------------------------------------------------
# 10. Non-persistent scheduled messages: delivered after their time, gone after a restart
# --------------------------------------------------------------------------------------------

def test_a_non_persistent_scheduled_message_waits_in_memory_and_a_sigkill_loses_it(broker, stomp_client):
    q = queue("np")
    name = q.removeprefix("/queue/")
    c = stomp_client(broker)
    arrivals = timed(c)
    sub = c.subscribe(q)
    p = stomp_client(broker)
    due = now_ms() + AHEAD_MS
    p.send(q, "volatile", headers={"_AMQ_SCHED_DELIVERY": str(due), "persistent": "false"})
    (listed,) = scheduled_list(broker, name)["messages"]
    assert (listed["stored"], listed["persistent"]) == (False, False)
    assert check_counts(broker.data_dir)["scheduled"] == 0  # in memory only
    (m,) = c.wait_messages(1, subscription=sub)
    assert m.body == "volatile"
    assert_not_early(arrivals.of("volatile"), due, "a non-persistent scheduled message")
    c.settle(1, subscription=sub)
    c.close()

    # A SIGKILL: the stored one comes after its time, the non-persistent one never.
    t0 = now_ms()
    p.send(q, "lost", headers={"AMQ_SCHEDULED_DELAY": str(int(1500 * SLOW)), "persistent": "false"})
    p.send(q, "kept", headers={"AMQ_SCHEDULED_DELAY": str(int(1000 * SLOW))})
    assert scheduled_list(broker, name)["scheduled"] == 2
    assert queue_row(broker, name)["scheduled"] == 2
    p.close()
    broker.kill9()
    assert check_counts(broker.data_dir)["scheduled"] == 1
    broker.start()
    sleep_until(t0 + int(1500 * SLOW) + 300)  # past both times
    got = consume_all(broker, q)
    assert bodies(got) == ["kept"]
    assert scheduled_list(broker, name)["scheduled"] == 0
    broker.kill9()
    assert check_counts(broker.data_dir)["scheduled"] == 0


# --------------------------------------------------------------------------------------------
# 11. Auto-delete keeps a queue that holds scheduled messages
# --------------------------------------------------------------------------------------------

AUTO_DELETE = """
[[address-settings]]
match = "#"
dead-letter-address = "DLQ"
expiry-address = "ExpiryQueue"
auto-delete-queues-delay = 200
"""


@pytest.mark.parametrize("restart", [False, True], ids=["running", "after SIGKILL"])
def test_auto_delete_keeps_a_queue_whose_only_message_is_scheduled(broker_factory, stomp_client, restart):
    b = broker_factory(config=AUTO_DELETE)
    name = unique("autodel")
    q = f"/queue/{name}"
    p = stomp_client(b)
    # Swept once a second: by its time the queue has been empty and unused (its depth is 0, it has
    # no consumer) for several sweeps, each past auto-delete-queues-delay.
    due = now_ms() + int(3000 * SLOW)
    p.send(q, "keeps the queue", headers={"_AMQ_SCHED_DELIVERY": str(due)})
    p.close()
    if restart:
        b.kill9()
        b.start()
    sleep_until(due - 200)
    assert f"queue {name} deleted" not in b.log
    assert queue_row(b, name)["scheduled"] == 1
    sleep_until(due + 100)
    got = consume_all(b, q)
    assert bodies(got) == ["keeps the queue"]
    assert f"queue {name} deleted" not in b.log
    # Empty and unused now: it goes (auto-delete is on for it).
    b.wait_log(f"queue {name} deleted: empty and unused", timeout=10 * SLOW)
    b.kill9()
    assert check_counts(b.data_dir)["scheduled"] == 0


# --------------------------------------------------------------------------------------------
# Redelivery of a delivered scheduled message
# --------------------------------------------------------------------------------------------

def test_a_delivered_scheduled_message_is_redelivered_as_any_other(broker, stomp_client):
    q = queue("redeliver")
    c = stomp_client(broker)
    arrivals = timed(c)
    sub = c.subscribe(q, ack="client-individual")
    p = stomp_client(broker)
    due = now_ms() + AHEAD_MS
    p.send(q, "again", headers={"_AMQ_SCHED_DELIVERY": str(due)})
    first = c.wait_messages(1, subscription=sub)[0]
    first_at = arrivals.of("again")
    assert_not_early(first_at, due, "the first delivery")
    nacked_at = now_ms()
    c.nack(first, receipt=True)  # back at once: its time has passed, it is not scheduled again
    second = c.wait_messages(2, subscription=sub)[1]
    assert (second.body, second.headers["redelivered"], second.headers["delivery-count"]) == ("again", "true", "2")
    assert second.headers["message-id"] == first.headers["message-id"]
    second_at = arrivals.all(2)[1][0]
    assert second_at - nacked_at < 1000 * SLOW
    c.drop()  # gone without acknowledging: the next consumer gets it
    (third,) = consume_all(broker, q)
    assert (third.body, third.headers["delivery-count"]) == ("again", "3")
    broker.kill9()
    assert check_counts(broker.data_dir)["scheduled"] == 0


# --------------------------------------------------------------------------------------------
# 12. 2,000 scheduled messages due within 2 s: each once, in due order
# --------------------------------------------------------------------------------------------

def test_two_thousand_scheduled_messages_come_once_each_in_due_order(broker, stomp_client, raw):
    q = queue("many")
    slots, per_slot, spacing = 10, 200, 200  # due times base, base + 200 ms, ... base + 1800 ms
    order = [slot for slot in range(slots) for _ in range(per_slot)]
    random.Random(26).shuffle(order)  # message ids do not follow due order
    c = stomp_client(broker)
    arrivals = timed(c)
    sub = c.subscribe(q)
    base = now_ms() + int(2000 * SLOW)
    frames = [frame_bytes("SEND", [("destination", q), ("_AMQ_SCHED_DELIVERY", str(base + slot * spacing))],
                          f"{i}:{slot}") for i, slot in enumerate(order)]
    frames[-1] = frame_bytes("SEND", [("destination", q), ("_AMQ_SCHED_DELIVERY", str(base + order[-1] * spacing)),
                                      ("receipt", "all-sent")], f"{len(order) - 1}:{order[-1]}")
    s = raw(broker)
    s.connect()
    s.send(b"".join(frames))
    f = s.read_frame(timeout=8 * TIMEOUT)
    assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", "all-sent"), f
    assert now_ms() < base, "storing 2,000 messages took longer than the margin before the first came due"
    c.settle(0, subscription=sub)
    assert queue_row(broker, q.removeprefix("/queue/"))["scheduled"] == 2000
    got = arrivals.all(len(order))
    msgs = c.wait_messages(len(order), timeout=TIMEOUT + 4 * SLOW, subscription=sub)
    c.settle(len(order), subscription=sub)  # none twice
    assert sorted(bodies(msgs)) == sorted(f"{i}:{slot}" for i, slot in enumerate(order))
    seen = [tuple(int(x) for x in frame.body.split(":")) for _, frame in got]
    slots_seen = [slot for _, slot in seen]
    assert slots_seen == sorted(slots_seen), "not in due order"
    for slot in range(slots):
        sent_order = [i for i, s_ in seen if s_ == slot]
        assert sent_order == sorted(sent_order), f"due together (slot {slot}) but not in queue order"
    for t, frame in got:
        slot = int(frame.body.split(":")[1])
        assert_not_early(t, base + slot * spacing, frame.body)
    assert check_counts(broker.data_dir)["scheduled"] == 0

