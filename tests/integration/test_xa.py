"""XA over STOMP, as docs/transactions.md specifies it: the XA frames and their answers, the
state rules (join, suspend and resume, fail, read-only, one-phase), recover scans, heuristic
decisions and forget, branch timeouts, bad input, and what a connection going away does."""

import json
import time

import pytest

from conftest import TIMEOUT, bodies, consume_all, frame_bytes, look, new_xid, preload, queue, unique

RB_CODES = {"XA_RBROLLBACK", "XA_RBCOMMFAIL", "XA_RBDEADLOCK", "XA_RBINTEGRITY", "XA_RBOTHER",
            "XA_RBPROTO", "XA_RBTIMEOUT", "XA_RBTRANSIENT"}


def call(c, verb, xid=None, flags=None, **headers):
    r = c.xa(verb, xid, flags, **headers)
    if verb.upper().endswith("ROLLBACK"):
        # XA_RETRY is no answer to xa_rollback (../shared/XA.md): checked at every rollback.
        assert r.result != "XA_RETRY", f"XA-ROLLBACK answered XA_RETRY: {r}"
    return r


def ok(c, verb, xid=None, flags=None, **headers):
    r = call(c, verb, xid, flags, **headers)
    assert r.result == "XA_OK", f"XA-{verb} {xid} flags={flags}: expected XA_OK, got {r}"
    return r


def expect(c, verb, xid, flags, result, **headers):
    r = call(c, verb, xid, flags, **headers)
    wanted = RB_CODES if result == "XA_RB*" else {result}
    assert r.result in wanted, f"XA-{verb} {xid} flags={flags}: expected {result}, got {r}"
    return r


def recover_all(c):
    r = ok(c, "RECOVER", None, "TMSTARTRSCAN|TMENDRSCAN", count=10000)
    assert r.count == len(r.xids), r
    return r.xids


def xa_list(c):
    """Every branch the broker has, as the ADMIN xa-list command shows them (dicts with xid, state,
    local, ...): what the tests wait on instead of sleeping."""
    rid = c.new_receipt()
    c.conn.send_frame("ADMIN", {"admin-command": "xa-list", "receipt": rid})
    c.wait_receipt(rid)
    with c.listener.cond:
        f = c.listener.receipt_frames[rid]
    assert f.headers.get("admin-status") == "ok", dict(f.headers)
    return json.loads(f.body)["branches"]


def wait_states(c, wanted, timeout=None):
    """Polls xa-list until every xid in `wanted` (xid -> state, as rm::to_string names it) is in that
    state; returns the list that showed it."""
    deadline = time.monotonic() + (timeout or TIMEOUT)
    while True:
        branches = xa_list(c)
        states = {b["xid"]: b["state"] for b in branches}
        if all(states.get(x) == state for x, state in wanted.items()):
            return branches
        assert time.monotonic() < deadline, f"waited for {wanted}; the broker has {states}"
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------
# The basic paths
# --------------------------------------------------------------------------------------------

def test_connected_lists_the_xa_frames(broker, stomp_client):
    c = stomp_client(broker)
    frames = c.listener.connected.headers.get("xa", "").split(",")
    for verb in ("XA-START", "XA-END", "XA-PREPARE", "XA-COMMIT", "XA-ROLLBACK", "XA-RECOVER", "XA-FORGET"):
        assert verb in frames, c.listener.connected.headers


def test_two_phase_commit_with_a_send_and_an_ack(broker, stomp_client):
    qin, qout = queue(), queue()
    preload(broker, qin, ["in0", "in1"])
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    m0, m1 = c.wait_messages(2)
    x = new_xid()
    ok(c, "START", x)
    c.send(qout, "out")  # RECEIPT: it is in the branch
    c.ack(m0, receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    # Before prepare and commit: the send is invisible, the consumed message is held.
    assert bodies(look(broker, stomp_client, qout)) == []
    ok(c, "PREPARE", x)
    assert recover_all(c) == [x]
    assert bodies(look(broker, stomp_client, qout)) == []
    ok(c, "COMMIT", x)
    assert recover_all(c) == []
    expect(c, "COMMIT", x, None, "XAER_NOTA")  # finished and forgotten
    c.ack(m1, receipt=True)  # outside any branch
    c.close()
    assert bodies(consume_all(broker, qout)) == ["out"]
    assert consume_all(broker, qin) == []


def test_acked_message_in_branch_is_not_delivered_to_another_consumer(broker, stomp_client):
    q = queue()
    preload(broker, q, ["m"])
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    (m,) = c.wait_messages(1)
    x = new_xid()
    ok(c, "START", x)
    c.ack(m, receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    assert bodies(look(broker, stomp_client, q)) == []
    ok(c, "ROLLBACK", x)
    back = look(broker, stomp_client, q)
    # c's subscription may take it instead; then it is in c's messages.
    again = back + c.messages[1:]
    assert bodies(again) == ["m"]
    assert again[0].headers["redelivered"] == "true"
    assert again[0].headers["delivery-count"] == "2"


def test_two_phase_commit_survives_restart(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "m")
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    ok(c, "COMMIT", x)
    c.close()
    broker.kill9()
    broker.start()
    c = stomp_client(broker)
    assert recover_all(c) == []
    assert bodies(consume_all(broker, q)) == ["m"]


def test_rollback_of_prepared_branch(broker, stomp_client):
    qin, qout = queue(), queue()
    preload(broker, qin, ["in0"])
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    (m,) = c.wait_messages(1)
    x = new_xid()
    ok(c, "START", x)
    c.send(qout, "out")
    c.ack(m, receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    c.close()  # the prepared branch does not care
    d = stomp_client(broker)
    ok(d, "ROLLBACK", x)
    assert recover_all(d) == []
    back = consume_all(broker, qin)
    assert bodies(back) == ["in0"] and back[0].headers["redelivered"] == "true"
    assert consume_all(broker, qout) == []


def test_nack_in_branch_redelivers_at_commit(broker, stomp_client):
    q = queue()
    preload(broker, q, ["m"])
    c = stomp_client(broker)
    sub = c.subscribe(q, ack="client-individual")
    (m,) = c.wait_messages(1)
    x = new_xid()
    ok(c, "START", x)
    c.nack(m, receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    c.settle(1, subscription=sub)  # held by the branch
    ok(c, "PREPARE", x)
    ok(c, "COMMIT", x)
    got = c.wait_messages(2, subscription=sub)
    assert got[1].body == "m" and got[1].headers["redelivered"] == "true"
    assert got[1].headers["delivery-count"] == "2"


def test_one_phase_commit(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "one-phase")
    ok(c, "END", x, "TMSUCCESS")
    expect(c, "COMMIT", x, None, "XAER_PROTO")  # two-phase of an unprepared branch
    assert recover_all(c) == []  # no prepare record
    ok(c, "COMMIT", x, "TMONEPHASE")
    assert recover_all(c) == []
    expect(c, "COMMIT", x, "TMONEPHASE", "XAER_NOTA")
    assert bodies(consume_all(broker, q)) == ["one-phase"]


def test_one_phase_commit_of_prepared_branch_is_proto(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "m")
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    expect(c, "COMMIT", x, "TMONEPHASE", "XAER_PROTO")
    assert recover_all(c) == [x]
    ok(c, "COMMIT", x)
    assert bodies(consume_all(broker, q)) == ["m"]


def test_read_only_branch(broker, stomp_client):
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    ok(c, "END", x, "TMSUCCESS")
    expect(c, "PREPARE", x, None, "XA_RDONLY")
    assert recover_all(c) == []
    expect(c, "COMMIT", x, None, "XAER_NOTA")  # forgotten: the manager sends no commit
    ok(c, "START", x)  # the xid is free again
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "COMMIT", x, "TMONEPHASE")


def test_prepare_or_commit_while_associated_is_proto(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "m")
    expect(c, "PREPARE", x, None, "XAER_PROTO")
    expect(c, "COMMIT", x, "TMONEPHASE", "XAER_PROTO")
    expect(c, "ROLLBACK", x, None, "XAER_PROTO")
    d = stomp_client(broker)
    expect(d, "END", x, "TMSUCCESS", "XAER_PROTO")  # not d's branch
    expect(d, "PREPARE", x, None, "XAER_PROTO")
    # Nothing of that changed the branch.
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    ok(c, "COMMIT", x)
    assert bodies(consume_all(broker, q)) == ["m"]


def test_one_connection_one_association(broker, stomp_client):
    c = stomp_client(broker)
    x, y = new_xid(), new_xid()
    ok(c, "START", x)
    expect(c, "START", y, None, "XAER_PROTO")  # already associated
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "START", y)  # y was not created by the refused start
    ok(c, "END", y, "TMSUCCESS")
    expect(c, "PREPARE", y, None, "XA_RDONLY")
    expect(c, "PREPARE", x, None, "XA_RDONLY")


# --------------------------------------------------------------------------------------------
# Join, suspend and resume, fail
# --------------------------------------------------------------------------------------------

def test_join_across_two_connections(broker, stomp_client):
    q = queue()
    a = stomp_client(broker)
    b = stomp_client(broker)
    x = new_xid()
    ok(a, "START", x)
    a.send(q, "from-a")
    expect(b, "START", x, None, "XAER_DUPID")  # known xid without TMJOIN
    ok(b, "START", x, "TMJOIN")
    b.send(q, "from-b")
    ok(a, "END", x, "TMSUCCESS")
    # b is still associated: the branch is not idle yet.
    expect(a, "PREPARE", x, None, "XAER_PROTO")
    expect(b, "PREPARE", x, None, "XAER_PROTO")
    assert bodies(look(broker, stomp_client, q)) == []
    ok(b, "END", x, "TMSUCCESS")
    ok(a, "PREPARE", x)
    ok(b, "COMMIT", x)
    assert sorted(bodies(consume_all(broker, q))) == ["from-a", "from-b"]


def test_join_of_unknown_xid_is_nota(broker, stomp_client):
    c = stomp_client(broker)
    x = new_xid()
    expect(c, "START", x, "TMJOIN", "XAER_NOTA")
    expect(c, "START", x, "TMRESUME", "XAER_NOTA")
    ok(c, "START", x)  # nothing was created or associated


def test_join_an_idle_branch(broker, stomp_client):
    q = queue()
    a = stomp_client(broker)
    x = new_xid()
    ok(a, "START", x)
    a.send(q, "first")
    ok(a, "END", x, "TMSUCCESS")
    b = stomp_client(broker)
    ok(b, "START", x, "TMJOIN")
    b.send(q, "second")
    ok(b, "END", x, "TMSUCCESS")
    ok(a, "PREPARE", x)
    ok(a, "COMMIT", x)
    assert bodies(consume_all(broker, q)) == ["first", "second"]


def test_suspend_and_resume(broker, stomp_client):
    q, q2 = queue(), queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "s1")
    ok(c, "END", x, "TMSUSPEND")
    # Suspended: this connection's SENDs are its own again, visible at once.
    c.send(q2, "plain")
    assert bodies(consume_all(broker, q2)) == ["plain"]
    expect(c, "PREPARE", x, None, "XAER_PROTO")  # suspended is not idle
    other = stomp_client(broker)
    expect(other, "START", x, "TMRESUME", "XAER_PROTO")  # other has no suspended association
    ok(c, "START", x, "TMRESUME")
    c.send(q, "s2")
    ok(c, "END", x, "TMSUCCESS")
    assert bodies(look(broker, stomp_client, q)) == []
    ok(c, "PREPARE", x)
    ok(c, "COMMIT", x)
    assert bodies(consume_all(broker, q)) == ["s1", "s2"]


def test_suspended_connection_works_on_another_branch(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    x, y = new_xid(), new_xid()
    ok(c, "START", x)
    c.send(q, "x1")
    ok(c, "END", x, "TMSUSPEND")
    ok(c, "START", y)  # suspended is not associated: another branch may start
    c.send(q, "y1")
    ok(c, "END", y, "TMSUCCESS")
    ok(c, "START", x, "TMRESUME")
    c.send(q, "x2")
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "ROLLBACK", y)
    ok(c, "COMMIT", x, "TMONEPHASE")
    assert bodies(consume_all(broker, q)) == ["x1", "x2"]


def test_branch_with_a_suspended_association_is_not_idle(broker, stomp_client):
    q = queue()
    a = stomp_client(broker)
    b = stomp_client(broker)
    x = new_xid()
    ok(a, "START", x)
    a.send(q, "a")
    ok(a, "END", x, "TMSUSPEND")
    ok(b, "START", x, "TMJOIN")
    b.send(q, "b")
    ok(b, "END", x, "TMSUCCESS")
    expect(b, "PREPARE", x, None, "XAER_PROTO")  # a's association is only suspended
    ok(a, "START", x, "TMRESUME")
    ok(a, "END", x, "TMSUCCESS")
    ok(b, "PREPARE", x)
    ok(b, "COMMIT", x)
    assert sorted(bodies(consume_all(broker, q))) == ["a", "b"]


def test_end_tmsuccess_of_a_suspended_association(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "m")
    ok(c, "END", x, "TMSUSPEND")
    ok(c, "END", x, "TMSUCCESS")  # XA allows ending a suspended association directly
    ok(c, "PREPARE", x)
    ok(c, "COMMIT", x)
    assert bodies(consume_all(broker, q)) == ["m"]


def test_resume_without_suspend_is_proto(broker, stomp_client):
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    ok(c, "END", x, "TMSUCCESS")
    expect(c, "START", x, "TMRESUME", "XAER_PROTO")
    expect(c, "PREPARE", x, None, "XA_RDONLY")


def test_end_tmfail_then_prepare_rolls_back(broker, stomp_client):
    qin, qout = queue(), queue()
    preload(broker, qin, ["in"])
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    (m,) = c.wait_messages(1)
    x = new_xid()
    ok(c, "START", x)
    c.send(qout, "never")
    c.ack(m, receipt=True)
    r = call(c, "END", x, "TMFAIL")
    assert r.result in {"XA_OK"} | RB_CODES, r
    expect(c, "PREPARE", x, None, "XA_RB*")
    assert recover_all(c) == []
    c.close()
    assert consume_all(broker, qout) == []
    back = consume_all(broker, qin)
    assert bodies(back) == ["in"] and back[0].headers["redelivered"] == "true"


def test_end_tmfail_then_one_phase_commit_rolls_back(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "never")
    r = call(c, "END", x, "TMFAIL")
    assert r.result in {"XA_OK"} | RB_CODES, r
    expect(c, "COMMIT", x, "TMONEPHASE", "XA_RB*")
    assert consume_all(broker, q) == []


def test_rollback_only_branch_drops_work_of_still_associated_connection(broker, stomp_client):
    q, qin = queue(), queue()
    preload(broker, qin, ["in"])
    a = stomp_client(broker)
    b = stomp_client(broker)
    x = new_xid()
    ok(a, "START", x)
    ok(b, "START", x, "TMJOIN")
    r = call(b, "END", x, "TMFAIL")
    assert r.result in {"XA_OK"} | RB_CODES, r
    # a is still associated with a rollback-only branch: its SEND is dropped, its ACK returns
    # the message to the queue.
    a.send(q, "dropped")
    a.subscribe(qin, ack="client-individual")
    (m,) = a.wait_messages(1)
    a.ack(m, receipt=True)
    expect(a, "END", x, "TMSUCCESS", "XA_RB*")
    expect(a, "PREPARE", x, None, "XA_RB*")
    a.close()
    assert consume_all(broker, q) == []
    assert bodies(consume_all(broker, qin)) == ["in"]


@pytest.mark.parametrize("how", ["tmfail", "drop"])
def test_rollback_while_another_connection_is_associated_is_proto(broker, stomp_client, how):
    # b made the branch rollback-only (END TMFAIL, or its connection dropped) while a is still
    # associated. docs/transactions.md: XA-ROLLBACK answers XAER_PROTO while the branch is still
    # associated; a's SENDs are dropped until a's XA-END tells it the outcome.
    q = queue()
    a = stomp_client(broker)
    b = stomp_client(broker)
    tm = stomp_client(broker)
    x = new_xid()
    ok(a, "START", x)
    a.send(q, "a-before")
    ok(b, "START", x, "TMJOIN")
    if how == "tmfail":
        r = call(b, "END", x, "TMFAIL")
        assert r.result in {"XA_OK"} | RB_CODES, r
    else:
        b.drop()
        wait_states(tm, {x: "rollback-only"})  # the broker saw b go
    expect(tm, "START", x, "TMJOIN", "XA_RB*")  # nobody joins a rollback-only branch
    expect(tm, "PREPARE", x, None, "XAER_PROTO")  # a is still associated
    expect(tm, "ROLLBACK", x, None, "XAER_PROTO")  # ... for rollback too
    a.send(q, "a-after")  # rollback-only: dropped, never stored as a plain message
    expect(a, "END", x, "TMSUCCESS", "XA_RB*")
    # Nobody is associated any more: the rollback-only branch is rolled back now, as asked.
    expect(tm, "ROLLBACK", x, None, "XA_OK")
    expect(tm, "ROLLBACK", x, None, "XAER_NOTA")  # and forgotten
    assert consume_all(broker, q) == []


def test_timed_out_branch_is_not_forgotten_while_still_associated(broker_factory, stomp_client):
    # A connection still associated with a branch the broker timed out must not find itself
    # silently outside any branch, with its SENDs stored as plain messages: they are dropped, and
    # its XA-END answers XA_RBTIMEOUT. (The broker remembers a timed-out branch for ten minutes at
    # least, and longer while a connection is associated with it.)
    b = broker_factory(config=TIMEOUT_CONFIG)
    q = queue()
    c = stomp_client(b)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "before")
    wait_states(stomp_client(b), {x: "rolled back"})  # timed out after 1.5-2.5 s
    c.send(q, "after")
    expect(c, "END", x, "TMSUCCESS", "XA_RBTIMEOUT")
    assert consume_all(b, q) == []


def test_rollback_of_timed_out_branch_while_still_associated(broker_factory, stomp_client):
    # The TM rolls back a branch the broker timed out while a connection is still associated
    # with it: the answer is XA_RBTIMEOUT (the broker rolled it back already; rm/state_machine.cpp,
    # rollback of a rolled-back branch), the branch stays remembered for the associated
    # connection, whose SENDs are dropped and whose XA-END tells it the branch was rolled back.
    b = broker_factory(config=TIMEOUT_CONFIG)
    q = queue()
    a = stomp_client(b)
    tm = stomp_client(b)
    x = new_xid()
    ok(a, "START", x)
    a.send(q, "before")
    wait_states(tm, {x: "rolled back"})  # timed out after 1.5-2.5 s
    expect(tm, "ROLLBACK", x, None, "XA_RBTIMEOUT")
    a.send(q, "after")
    expect(a, "END", x, "TMSUCCESS", "XA_RBTIMEOUT")
    assert consume_all(b, q) == []


def test_one_phase_commit_of_timed_out_branch(broker_factory, stomp_client):
    b = broker_factory(config=TIMEOUT_CONFIG)
    q = queue()
    c = stomp_client(b)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "never")
    ok(c, "END", x, "TMSUCCESS")
    wait_states(c, {x: "rolled back"})  # timed out after 1.5-2.5 s
    expect(c, "COMMIT", x, "TMONEPHASE", "XA_RBTIMEOUT")
    expect(c, "COMMIT", x, "TMONEPHASE", "XAER_NOTA")  # forgotten once told
    assert consume_all(b, q) == []


def test_local_transactions_have_no_timeout(broker_factory, stomp_client):
    b = broker_factory(config=TIMEOUT_CONFIG)
    q, qin = queue(), queue()
    preload(b, qin, ["in"])
    c = stomp_client(b)
    c.subscribe(qin, ack="client-individual")
    (m,) = c.wait_messages(1)
    c.begin("t")
    c.send(q, "late", headers={"transaction": "t"})
    c.ack(m, receipt=True, transaction="t")
    # An XA branch started after the local transaction times out: the local transaction, older,
    # would have been rolled back by then (or in the same pass) if it had a timeout.
    d = stomp_client(b)
    y = new_xid()
    ok(d, "START", y)
    branches = wait_states(d, {y: "rolled back"})
    assert [br["state"] for br in branches if br["local"]] == ["idle"], branches
    c.commit("t")
    assert bodies(consume_all(b, q)) == ["late"]
    assert consume_all(b, qin) == []


# --------------------------------------------------------------------------------------------
# Recover scans
# --------------------------------------------------------------------------------------------

def prepare_branches(c, n, q=None):
    xids = []
    for i in range(n):
        x = new_xid(bqual=bytes([i + 1]))
        ok(c, "START", x)
        if q:
            c.send(q, f"p{i}")
        else:
            c.send(f"/queue/{unique('rec')}", f"p{i}")
        ok(c, "END", x, "TMSUCCESS")
        ok(c, "PREPARE", x)
        xids.append(x)
    return xids


def test_recover_whole_scan_lists_every_prepared_branch(broker, stomp_client):
    c = stomp_client(broker)
    assert recover_all(c) == []
    xids = prepare_branches(c, 5)
    # An idle and an active branch are not listed.
    idle, active = new_xid(), new_xid()
    ok(c, "START", idle)
    c.send(queue(), "i")
    ok(c, "END", idle, "TMSUCCESS")
    d = stomp_client(broker)
    ok(d, "START", active)
    r = ok(c, "RECOVER", None, "TMSTARTRSCAN|TMENDRSCAN", count=100)
    assert r.count == 5
    assert sorted(r.xids) == sorted(xids)
    assert "text/plain" in r.headers.get("content-type", "")


def test_recover_pages(broker, stomp_client):
    c = stomp_client(broker)
    xids = prepare_branches(c, 5)
    pages = [ok(c, "RECOVER", None, "TMSTARTRSCAN", count=2)]
    pages.append(ok(c, "RECOVER", None, None, count=2))
    pages.append(ok(c, "RECOVER", None, None, count=2))
    assert [p.count for p in pages] == [2, 2, 1]  # the short page ends the scan
    seen = [x for p in pages for x in p.xids]
    assert sorted(seen) == sorted(xids) and len(set(seen)) == 5
    r = ok(c, "RECOVER", None, "TMENDRSCAN", count=0)
    assert r.count == 0 and r.xids == []


def test_recover_pages_exact_multiple(broker, stomp_client):
    c = stomp_client(broker)
    xids = prepare_branches(c, 4)
    p1 = ok(c, "RECOVER", None, "TMSTARTRSCAN", count=2)
    p2 = ok(c, "RECOVER", None, None, count=2)
    p3 = ok(c, "RECOVER", None, "TMENDRSCAN", count=2)
    assert [p1.count, p2.count, p3.count] == [2, 2, 0]
    assert sorted(p1.xids + p2.xids) == sorted(xids)


def test_recover_scan_is_a_snapshot(broker, stomp_client):
    c = stomp_client(broker)
    xids = prepare_branches(c, 3)
    p1 = ok(c, "RECOVER", None, "TMSTARTRSCAN", count=1)
    later = prepare_branches(c, 1)
    rest = ok(c, "RECOVER", None, "TMENDRSCAN", count=10)
    seen = p1.xids + rest.xids
    assert sorted(seen) == sorted(xids)
    assert later[0] not in seen
    assert sorted(recover_all(c)) == sorted(xids + later)


def test_recover_continuation_without_scan_is_proto(broker, stomp_client):
    c = stomp_client(broker)
    prepare_branches(c, 2)
    expect(c, "RECOVER", None, None, "XAER_PROTO", count=10)
    # After a whole scan there is no open scan either.
    recover_all(c)
    expect(c, "RECOVER", None, None, "XAER_PROTO", count=10)


def test_recover_count_zero_endrscan_alone(broker, stomp_client):
    c = stomp_client(broker)
    prepare_branches(c, 2)
    r = ok(c, "RECOVER", None, "TMENDRSCAN", count=0)  # no scan open: just answers 0
    assert r.count == 0 and r.xids == []
    ok(c, "RECOVER", None, "TMSTARTRSCAN", count=1)
    r = ok(c, "RECOVER", None, "TMENDRSCAN", count=0)  # closes the open scan
    assert r.count == 0
    expect(c, "RECOVER", None, None, "XAER_PROTO", count=1)


def test_recover_scans_are_per_connection(broker, stomp_client):
    a = stomp_client(broker)
    xids = prepare_branches(a, 3)
    b = stomp_client(broker)
    expect(b, "RECOVER", None, None, "XAER_PROTO", count=10)  # a's scan is not b's
    pa = ok(a, "RECOVER", None, "TMSTARTRSCAN", count=1)
    pb = ok(b, "RECOVER", None, "TMSTARTRSCAN|TMENDRSCAN", count=10)
    assert sorted(pb.xids) == sorted(xids)
    rest = ok(a, "RECOVER", None, "TMENDRSCAN", count=10)
    assert sorted(pa.xids + rest.xids) == sorted(xids)


# --------------------------------------------------------------------------------------------
# Heuristic decisions and forget
# --------------------------------------------------------------------------------------------

def prepared_branch_with_work(broker, stomp_client, qin, qout):
    preload(broker, qin, ["in"])
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    (m,) = c.wait_messages(1)
    x = new_xid()
    ok(c, "START", x)
    c.send(qout, "out")
    c.ack(m, receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    c.close()
    return x


def test_heuristic_commit(broker, stomp_client):
    qin, qout = queue(), queue()
    x = prepared_branch_with_work(broker, stomp_client, qin, qout)
    op = stomp_client(broker)
    ok(op, "XA-HEURISTIC", x, outcome="commit")
    # Applied at once.
    assert bodies(consume_all(broker, qout)) == ["out"]
    assert consume_all(broker, qin) == []
    tm = stomp_client(broker)
    assert recover_all(tm) == [x]
    expect(tm, "COMMIT", x, None, "XA_HEURCOM")
    assert recover_all(tm) == [x]  # still listed until forget
    ok(tm, "FORGET", x)
    assert recover_all(tm) == []
    expect(tm, "FORGET", x, None, "XAER_NOTA")
    expect(tm, "COMMIT", x, None, "XAER_NOTA")
    assert consume_all(broker, qout) == []  # consumed above; nothing new appeared


def test_heuristic_rollback(broker, stomp_client):
    qin, qout = queue(), queue()
    x = prepared_branch_with_work(broker, stomp_client, qin, qout)
    op = stomp_client(broker)
    ok(op, "XA-HEURISTIC", x, outcome="rollback")
    back = look(broker, stomp_client, qin)
    assert bodies(back) == ["in"] and back[0].headers["redelivered"] == "true"
    assert consume_all(broker, qout) == []
    tm = stomp_client(broker)
    assert recover_all(tm) == [x]
    expect(tm, "COMMIT", x, None, "XA_HEURRB")
    assert recover_all(tm) == [x]
    expect(tm, "ROLLBACK", x, None, "XA_HEURRB")
    ok(tm, "FORGET", x)
    assert recover_all(tm) == []
    assert consume_all(broker, qout) == []


def test_heuristic_outcome_survives_restart(broker, stomp_client):
    qin, qout = queue(), queue()
    x = prepared_branch_with_work(broker, stomp_client, qin, qout)
    op = stomp_client(broker)
    ok(op, "XA-HEURISTIC", x, outcome="commit")
    op.close()
    broker.kill9()
    broker.start()
    tm = stomp_client(broker)
    assert recover_all(tm) == [x]
    expect(tm, "ROLLBACK", x, None, "XA_HEURCOM")
    ok(tm, "FORGET", x)
    assert bodies(consume_all(broker, qout)) == ["out"]
    assert consume_all(broker, qin) == []
    tm.close()
    broker.kill9()
    broker.start()
    tm = stomp_client(broker)
    assert recover_all(tm) == []


def test_heuristic_on_branch_not_prepared_is_proto(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "m")
    op = stomp_client(broker)
    expect(op, "XA-HEURISTIC", x, None, "XAER_PROTO", outcome="commit")  # active
    ok(c, "END", x, "TMSUCCESS")
    expect(op, "XA-HEURISTIC", x, None, "XAER_PROTO", outcome="commit")  # idle
    expect(op, "XA-HEURISTIC", x, None, "XAER_PROTO", outcome="rollback")
    expect(op, "XA-HEURISTIC", new_xid(), None, "XAER_NOTA", outcome="commit")
    expect(op, "XA-HEURISTIC", x, None, "XAER_INVAL", outcome="maybe")
    expect(op, "XA-HEURISTIC", x, None, "XAER_INVAL")  # no outcome
    assert bodies(look(broker, stomp_client, q)) == []
    ok(c, "PREPARE", x)
    ok(c, "COMMIT", x)
    assert bodies(consume_all(broker, q)) == ["m"]


def test_forget_of_prepared_branch_is_nota_and_harmless(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "m")
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    expect(c, "FORGET", x, None, "XAER_NOTA")
    assert recover_all(c) == [x]
    ok(c, "COMMIT", x)
    assert bodies(consume_all(broker, q)) == ["m"]


# --------------------------------------------------------------------------------------------
# Timeout
# --------------------------------------------------------------------------------------------

TIMEOUT_CONFIG = "[transactions]\ntimeout-ms = 1500\n"


def test_branch_timeout(broker_factory, stomp_client):
    b = broker_factory(config=TIMEOUT_CONFIG)
    qin, qout, qa, qp = queue(), queue(), queue(), queue()
    preload(b, qin, ["in"])

    # idle: started, consumed a message, sent one, ended; never prepared.
    c = stomp_client(b)
    sub = c.subscribe(qin, ack="client-individual")
    (m,) = c.wait_messages(1)
    x = new_xid()
    ok(c, "START", x)
    c.send(qout, "never")
    c.ack(m, receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    c.unsubscribe(sub)  # the branch holds the message, not the subscription

    # active: still associated when the timeout strikes.
    a = stomp_client(b)
    y = new_xid()
    ok(a, "START", y)
    a.send(qa, "a1")

    # prepared: never rolled back by the broker.
    p = stomp_client(b)
    z = new_xid()
    ok(p, "START", z)
    p.send(qp, "kept")
    ok(p, "END", z, "TMSUCCESS")
    ok(p, "PREPARE", z)

    # A last branch, started after z: once it has timed out, z's timeout has passed too.
    s = stomp_client(b)
    w = new_xid()
    ok(s, "START", w)
    branches = wait_states(s, {x: "rolled back", y: "rolled back", w: "rolled back"})
    assert {br["xid"]: br["state"] for br in branches}[z] == "prepared", branches

    expect(c, "PREPARE", x, None, "XA_RBTIMEOUT")
    back = consume_all(b, qin)
    assert bodies(back) == ["in"], "the consumed message of the timed-out branch is back"
    assert back[0].headers["redelivered"] == "true"
    assert consume_all(b, qout) == []

    a.send(qa, "a2")  # associated with a rolled-back branch: dropped
    expect(a, "END", y, "TMSUCCESS", "XA_RBTIMEOUT")
    expect(a, "ROLLBACK", y, None, "XA_RBTIMEOUT")
    expect(a, "ROLLBACK", y, None, "XAER_NOTA")  # forgotten after telling
    assert consume_all(b, qa) == []

    assert recover_all(p) == [z]
    ok(p, "COMMIT", z)
    assert bodies(consume_all(b, qp)) == ["kept"]


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

BAD_XIDS = [
    "zz",                        # not three parts
    "",                          # empty
    "1:00",                      # two parts
    "1:00:00:00",                # four parts
    "x:00:00",                   # formatID not decimal
    "-1:00:00",                  # the null xid
    "1:zz:00",                   # gtrid not hex
    "1:abc:00",                  # odd number of hex digits
    "1:00:0g",                   # bqual not hex
    "1::00",                     # empty gtrid
    "1:" + "ab" * 65 + ":00",    # gtrid 65 bytes
    "1:00:" + "cd" * 65,         # bqual 65 bytes
]


@pytest.mark.parametrize("verb", ["START", "END", "PREPARE", "COMMIT", "ROLLBACK", "FORGET"])
def test_malformed_xid_is_inval_and_changes_nothing(broker, stomp_client, verb):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "m")
    flags = {"END": "TMSUCCESS"}.get(verb)
    for bad in BAD_XIDS:
        expect(c, verb, bad, flags, "XAER_INVAL")
    r = call(c, verb, None, flags)  # no xid header at all
    assert r.result == "XAER_INVAL", r
    assert not c.errors
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    ok(c, "COMMIT", x)
    assert bodies(consume_all(broker, q)) == ["m"]


def test_longest_gtrid_and_bqual_are_accepted(broker, stomp_client):
    c = stomp_client(broker)
    for x in ("7:" + "ab" * 64 + ":" + "cd" * 64, "7:" + "ab" * 64 + ":", "0:01:"):
        ok(c, "START", x)
        c.send(queue(), "m")
        ok(c, "END", x, "TMSUCCESS")
        ok(c, "PREPARE", x)
    listed = recover_all(c)
    assert sorted(listed) == sorted(["7:" + "ab" * 64 + ":" + "cd" * 64, "7:" + "ab" * 64 + ":", "0:01:"])
    for x in listed:
        ok(c, "COMMIT", x)


def test_xid_text_round_trips_through_recover(broker, stomp_client):
    c = stomp_client(broker)
    x = new_xid(format_id=123456789, gtrid=bytes(range(0, 64)), bqual=bytes(range(200, 256)))
    ok(c, "START", x)
    c.send(queue(), "m")
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    assert recover_all(c) == [x]
    ok(c, "COMMIT", x)


def test_unknown_and_misplaced_flags_are_inval_and_change_nothing(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    d = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "m")
    z = new_xid()
    for flags in ("TMBOGUS", "TMSUSPEND", "TMSUCCESS", "TMFAIL", "TMSTARTRSCAN", "TMONEPHASE",
                  "TMJOIN|TMRESUME", "TMJOIN|TMBOGUS", "tmjoin"):
        expect(d, "START", z, flags, "XAER_INVAL")
    # active branch x, associated with c: END takes exactly one of TMSUCCESS, TMFAIL, TMSUSPEND.
    for flags in ("TMJOIN", "TMRESUME", "TMONEPHASE", "TMSUCCESS|TMFAIL", "TMSUCCESS|TMSUSPEND",
                  "TMBOGUS", "TMSUCCESS|TMBOGUS", None):
        expect(c, "END", x, flags, "XAER_INVAL")
    ok(c, "END", x, "TMSUCCESS")  # x was still active and associated
    # idle branch x.
    for verb, flags in (("PREPARE", "TMONEPHASE"), ("PREPARE", "TMJOIN"), ("PREPARE", "TMSUCCESS"),
                        ("COMMIT", "TMFAIL"), ("COMMIT", "TMJOIN"), ("COMMIT", "TMBOGUS"),
                        ("ROLLBACK", "TMONEPHASE"), ("ROLLBACK", "TMSUSPEND"),
                        ("FORGET", "TMJOIN"), ("FORGET", "TMONEPHASE")):
        expect(c, verb, x, flags, "XAER_INVAL")
    for flags in ("TMSUCCESS", "TMJOIN", "TMONEPHASE", "TMBOGUS", "TMSTARTRSCAN|TMBOGUS"):
        expect(c, "RECOVER", None, flags, "XAER_INVAL", count=10)
    for count in ("abc", "-1", "1.5", ""):
        expect(c, "RECOVER", None, "TMSTARTRSCAN|TMENDRSCAN", "XAER_INVAL", count=count)
    assert not c.errors and not d.errors
    ok(d, "START", z)  # z was never created
    ok(d, "END", z, "TMSUCCESS")
    ok(c, "PREPARE", x)
    expect(c, "COMMIT", x, "TMONEPHASE|TMBOGUS", "XAER_INVAL")
    assert recover_all(c) == [x]
    ok(c, "COMMIT", x)
    assert bodies(consume_all(broker, q)) == ["m"]


def test_tmnowait_on_start_is_ignored(broker, stomp_client):
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x, "TMNOWAIT")
    ok(c, "END", x, "TMSUCCESS")
    expect(c, "PREPARE", x, None, "XA_RDONLY")


def test_start_twice_with_same_xid_is_dupid(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    d = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "m")
    expect(d, "START", x, None, "XAER_DUPID")
    ok(c, "END", x, "TMSUCCESS")
    expect(c, "START", x, None, "XAER_DUPID")  # idle
    expect(d, "START", x, None, "XAER_DUPID")
    ok(c, "PREPARE", x)
    expect(d, "START", x, None, "XAER_DUPID")  # prepared
    # d was never associated: it can start its own branch.
    y = new_xid()
    ok(d, "START", y)
    ok(d, "END", y, "TMSUCCESS")
    ok(c, "COMMIT", x)
    assert bodies(consume_all(broker, q)) == ["m"]


def test_rollback_or_forget_of_unknown_xid_disturbs_nothing(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    other = stomp_client(broker)
    # Another connection's idle branch, and a prepared one.
    x = new_xid()
    ok(other, "START", x)
    other.send(q, "xa-idle")
    ok(other, "END", x, "TMSUCCESS")
    y = new_xid()
    ok(other, "START", y)
    other.send(q, "xa-prepared")
    ok(other, "END", y, "TMSUCCESS")
    ok(other, "PREPARE", y)
    # A local transaction on c, and then c's own XA branch.
    c.begin("local")
    c.send(q, "local", headers={"transaction": "local"})
    w = new_xid()
    unknown = new_xid()
    expect(c, "ROLLBACK", unknown, None, "XAER_NOTA")
    expect(c, "FORGET", unknown, None, "XAER_NOTA")
    # xids that differ from real ones only in the bqual or the formatID are unknown too.
    fmt, gtrid, bqual = x.split(":")
    expect(c, "ROLLBACK", f"{fmt}:{gtrid}:ff", None, "XAER_NOTA")
    expect(c, "ROLLBACK", f"{int(fmt) + 1}:{gtrid}:{bqual}", None, "XAER_NOTA")
    ok(c, "START", w)
    c.send(q, "xa-active")
    expect(c, "ROLLBACK", unknown, None, "XAER_NOTA")
    expect(c, "FORGET", unknown, None, "XAER_NOTA")
    c.send(q, "xa-active-2")  # still associated with w
    ok(c, "END", w, "TMSUCCESS")
    assert not c.errors and not other.errors
    c.send(q, "local-2", headers={"transaction": "local"})
    c.commit("local")
    ok(other, "PREPARE", x)
    ok(other, "COMMIT", x)
    ok(other, "COMMIT", y)
    ok(c, "COMMIT", w, "TMONEPHASE")
    got = bodies(consume_all(broker, q))
    assert sorted(got) == sorted(["xa-idle", "xa-prepared", "local", "local-2", "xa-active", "xa-active-2"])


def test_xa_frames_cannot_reach_a_local_transaction(broker, stomp_client):
    # Local transactions are branches with broker-made xids (formatID 0x45534352, "ESCR"); the XA
    # frames refuse that form (XAER_NOTA: not an XA branch, or XAER_INVAL: a reserved formatID)
    # and leave them alone (the names below are the broker's form for the first connections;
    # whichever matches must be refused all the same).
    q = queue()
    c = stomp_client(broker)
    c.begin("t")
    c.send(q, "local", headers={"transaction": "t"})
    for conn in range(1, 5):
        for n in range(1, 3):
            x = new_xid(format_id=0x45534352, gtrid=f"local-{conn}-{n}", bqual=b"")
            for verb, flags in (("ROLLBACK", None), ("COMMIT", "TMONEPHASE"), ("END", "TMSUCCESS"),
                                ("START", "TMJOIN"), ("PREPARE", None), ("FORGET", None)):
                r = call(c, verb, x, flags)
                assert r.result in {"XAER_NOTA", "XAER_INVAL"}, f"XA-{verb} {x}: {r}"
    assert recover_all(c) == []
    c.commit("t")
    assert bodies(consume_all(broker, q)) == ["local"]


@pytest.mark.parametrize("command", ["XA-START", "XA-RECOVER", "XA-PREPARE"])
def test_xa_frame_without_receipt_is_error(broker, stomp_client, raw, command):
    s = raw(broker)
    s.connect()
    x = new_xid()
    headers = [("xid", x.replace(":", "\\c"))]
    if command == "XA-RECOVER":
        headers = [("flags", "TMSTARTRSCAN|TMENDRSCAN"), ("count", "10")]
    s.send(frame_bytes(command, headers))
    frames = s.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], frames
    # Nothing was started.
    c = stomp_client(broker)
    ok(c, "START", x)


def test_xa_frame_with_escaped_xid_over_raw_socket(broker, raw):
    # The xid travels escaped (':' is '\c' in a STOMP 1.2 header value).
    s = raw(broker)
    s.connect()
    x = new_xid()
    s.send(frame_bytes("XA-START", [("xid", x.replace(":", "\\c")), ("receipt", "r1")]))
    f = s.read_frame()
    assert f.command == "RECEIPT" and f.headers["receipt-id"] == "r1", f
    assert f.headers["xa-result"] == "XA_OK", f
    s.send(frame_bytes("XA-END", [("xid", x.replace(":", "\\c")), ("flags", "TMSUCCESS"), ("receipt", "r2")]))
    f = s.read_frame()
    assert f.headers["xa-result"] == "XA_OK", f


def test_send_with_transaction_header_while_associated_is_error(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    c.begin("t")
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "in-branch")
    c.send(q, "bad", headers={"transaction": "t"}, wait=False)
    c.wait_error()
    c.wait_disconnected()
    # The connection went away while associated: the branch is rollback-only.
    d = stomp_client(broker)
    expect(d, "PREPARE", x, None, "XA_RB*")
    assert consume_all(broker, q) == []


def test_ack_with_transaction_header_while_associated_is_error(broker, stomp_client):
    q = queue()
    preload(broker, q, ["m"])
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    (m,) = c.wait_messages(1)
    c.begin("t")
    x = new_xid()
    ok(c, "START", x)
    c.ack(m, transaction="t")
    c.wait_error()
    c.wait_disconnected()
    assert bodies(consume_all(broker, q)) == ["m"]


# --------------------------------------------------------------------------------------------
# Connections going away
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("state", ["associated", "suspended"])
def test_drop_while_associated_makes_branch_rollback_only(broker, stomp_client, state):
    qin, qout = queue(), queue()
    preload(broker, qin, ["in"])
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    (m,) = c.wait_messages(1)
    x = new_xid()
    ok(c, "START", x)
    c.send(qout, "never")
    c.ack(m, receipt=True)
    if state == "suspended":
        ok(c, "END", x, "TMSUSPEND")
    c.drop()
    d = stomp_client(broker)
    wait_states(d, {x: "rollback-only"})  # the broker saw c go
    # Not idle: whoever asks first gets the rollback.
    expect(d, "PREPARE", x, None, "XA_RB*")
    assert recover_all(d) == []
    assert consume_all(broker, qout) == []
    back = consume_all(broker, qin)
    assert bodies(back) == ["in"] and back[0].headers["redelivered"] == "true"


def test_drop_while_associated_then_rollback_from_another_connection(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "never")
    c.drop()
    d = stomp_client(broker)
    wait_states(d, {x: "rollback-only"})  # the broker saw c go
    r = call(d, "ROLLBACK", x)
    assert r.result in {"XA_OK"} | RB_CODES, r
    assert consume_all(broker, q) == []


@pytest.mark.parametrize("state", ["idle", "prepared"])
@pytest.mark.parametrize("how", ["drop", "disconnect"])
def test_connection_going_away_leaves_idle_or_prepared_branch_alone(broker, stomp_client, state, how):
    qin, qout = queue(), queue()
    preload(broker, qin, ["in0", "in1"])
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    m0, m1 = c.wait_messages(2)
    x = new_xid()
    ok(c, "START", x)
    c.send(qout, "out")
    c.ack(m0, receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    if state == "prepared":
        ok(c, "PREPARE", x)
    if how == "drop":
        c.drop()
    else:
        c.disconnect()
    # The held message is not given back with the connection (in1, unacknowledged, is): waited for
    # until the broker has seen the connection go, which gives back both at once if it gives m0.
    deadline = time.monotonic() + TIMEOUT
    while not (left := look(broker, stomp_client, qin)):
        assert time.monotonic() < deadline, "in1 did not come back after its connection went"
        time.sleep(0.05)
    assert bodies(left) == ["in1"]
    d = stomp_client(broker)
    if state == "idle":
        ok(d, "PREPARE", x)
    assert recover_all(d) == [x]
    ok(d, "COMMIT", x)
    assert bodies(consume_all(broker, qout)) == ["out"]
    assert bodies(consume_all(broker, qin)) == ["in1"]


# --------------------------------------------------------------------------------------------
# Calls that arrive while a branch's write is in flight
# --------------------------------------------------------------------------------------------

def pipelined(c, calls):
    """Sends XA frames, (verb, xid, flags) each, in one write: on loopback they arrive together, the
    broker reads them in one read and its core handles them in one turn, before any store write
    of theirs has completed. Returns their answers, in order."""
    data, rids = b"", []
    for verb, x, flags in calls:
        rid = c.new_receipt()
        rids.append(rid)
        headers = [("xid", x), ("receipt", rid)] + ([("flags", flags)] if flags else [])
        data += frame_bytes("XA-" + verb, headers)
    c.conn.transport.send(data)
    return [c.xa_reply(rid) for rid in rids]


@pytest.mark.parametrize("second", ["COMMIT", "ROLLBACK", "PREPARE", "FORGET"])
def test_call_pipelined_behind_prepare(broker, stomp_client, second):
    # The second call arrives while the prepare record is still on its way to disk: it answers
    # XAER_PROTO (a write of the branch is in flight; rm/resource_manager.cpp checks that before
    # anything else) and changes nothing; the branch is prepared, whole.
    qin, qout = queue(), queue()
    preload(broker, qin, ["in"])
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    (m,) = c.wait_messages(1)
    x = new_xid()
    ok(c, "START", x)
    c.send(qout, "out")
    c.ack(m, receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    a1, a2 = pipelined(c, [("PREPARE", x, None), (second, x, None)])
    assert a1.result == "XA_OK", a1
    assert a2.result == "XAER_PROTO", a2
    c.close()
    d = stomp_client(broker)
    assert recover_all(d) == [x]
    ok(d, "COMMIT", x)
    assert bodies(consume_all(broker, qout)) == ["out"]
    assert consume_all(broker, qin) == []


@pytest.mark.parametrize("second", ["COMMIT", "ROLLBACK", "COMMIT-1PC"])
def test_call_pipelined_behind_commit(broker, stomp_client, second):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "once")
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    r1 = c.xa("COMMIT", x, wait=False)
    verb, flags = (second, None) if second != "COMMIT-1PC" else ("COMMIT", "TMONEPHASE")
    r2 = c.xa(verb, x, flags, wait=False)
    a1, a2 = c.xa_reply(r1), c.xa_reply(r2)
    assert a1.result == "XA_OK", a1
    assert a2.result in {"XAER_PROTO", "XAER_NOTA"}, a2
    assert recover_all(c) == []
    assert bodies(consume_all(broker, q)) == ["once"]


def test_one_phase_commit_pipelined_with_rollback(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "m")
    ok(c, "END", x, "TMSUCCESS")
    r1 = c.xa("COMMIT", x, "TMONEPHASE", wait=False)
    r2 = c.xa("ROLLBACK", x, wait=False)
    a1, a2 = c.xa_reply(r1), c.xa_reply(r2)
    assert a1.result == "XA_OK", a1
    assert a2.result in {"XAER_PROTO", "XAER_NOTA"}, a2
    assert bodies(consume_all(broker, q)) == ["m"]


# --------------------------------------------------------------------------------------------
# The store refuses the write
# --------------------------------------------------------------------------------------------

def test_prepare_refused_by_full_store_is_rmfail_and_can_be_retried(broker_factory, stomp_client):
    b = broker_factory(config="[storage]\nmap-size = 1048576\nmax-map-size = 1048576\n")
    q, filler = queue(), queue()
    p = stomp_client(b)
    # One big filler value: consuming it frees one contiguous run of pages (the prepare record
    # is a single value holding every message of the branch, so it needs contiguous room).
    p.send(filler, "fill-" + "f" * 700_000)
    c = stomp_client(b)
    x = new_xid()
    ok(c, "START", x)
    for i in range(2):
        c.send(q, f"big{i}-" + "x" * 200_000)
    ok(c, "END", x, "TMSUCCESS")
    expect(c, "PREPARE", x, None, "XAER_RMFAIL")
    assert recover_all(c) == []
    expect(c, "COMMIT", x, "TMONEPHASE", "XAER_RMFAIL")
    assert consume_all(b, q) == []
    # Make room; the branch is as before the refused calls: prepare again.
    drainer = stomp_client(b)
    drainer.subscribe(filler)
    drainer.wait_messages(1)
    drainer.disconnect()
    # XAER_RMFAIL means "try again later": LMDB reuses freed pages only once a later write has
    # committed and no reader still sees them (the last checkpoint's pin, renewed every 500 ms), so
    # a TM's retry loop (here with another client's small writes) gets through: one that retries
    # for a while, not a set number of times.
    answers = []
    deadline = time.monotonic() + TIMEOUT
    while True:
        answers.append(call(c, "PREPARE", x).result)
        if answers[-1] != "XAER_RMFAIL" or time.monotonic() > deadline:
            break
        p.send(filler, "tick")
        time.sleep(0.2)
    assert answers[-1] == "XA_OK", answers
    assert recover_all(c) == [x]
    ok(c, "COMMIT", x)
    got = consume_all(b, q)
    assert [m.body.split("-")[0] for m in got] == ["big0", "big1"]


def test_rollback_after_refused_prepare(broker_factory, stomp_client):
    b = broker_factory(config="[storage]\nmap-size = 1048576\nmax-map-size = 1048576\n")
    q, qin = queue(), queue()
    preload(b, qin, ["in"])
    c = stomp_client(b)
    c.subscribe(qin, ack="client-individual")
    (m,) = c.wait_messages(1)
    x = new_xid()
    ok(c, "START", x)
    c.ack(m, receipt=True)
    for i in range(6):
        c.send(q, f"big{i}-" + "x" * 200_000)
    ok(c, "END", x, "TMSUCCESS")
    expect(c, "PREPARE", x, None, "XAER_RMFAIL")
    ok(c, "ROLLBACK", x)
    c.close()
    assert consume_all(b, q) == []
    back = consume_all(b, qin)
    assert bodies(back) == ["in"]


# --------------------------------------------------------------------------------------------
# Rollback in every state
# --------------------------------------------------------------------------------------------

def test_xa_retry_is_never_an_answer_to_rollback(broker, stomp_client):
    # Rollback in every state a branch can be in, each with its answer; never XA_RETRY (call()
    # checks that at every XA-ROLLBACK of this module, too).
    q = queue()
    c = stomp_client(broker)
    answers = []

    def rb(conn, x):
        r = call(conn, "ROLLBACK", x)
        answers.append(r.result)
        return r

    rb(c, new_xid())  # unknown
    x = new_xid()
    ok(c, "START", x)
    c.send(q, "m")
    rb(c, x)  # active, associated
    ok(c, "END", x, "TMSUCCESS")
    rb(c, x)  # idle
    rb(c, x)  # gone
    y = new_xid()
    ok(c, "START", y)
    c.send(q, "m")
    ok(c, "END", y, "TMSUCCESS")
    ok(c, "PREPARE", y)
    rb(c, y)  # prepared
    z = new_xid()
    ok(c, "START", z)
    c.send(q, "m")
    call(c, "END", z, "TMFAIL")
    rb(c, z)  # rollback-only
    s = new_xid()
    ok(c, "START", s)
    ok(c, "END", s, "TMSUSPEND")
    rb(c, s)  # suspended
    ok(c, "START", s, "TMRESUME")
    ok(c, "END", s, "TMSUCCESS")
    rb(c, s)
    h = new_xid()
    ok(c, "START", h)
    c.send(q, "m")
    ok(c, "END", h, "TMSUCCESS")
    ok(c, "PREPARE", h)
    ok(c, "XA-HEURISTIC", h, outcome="rollback")
    rb(c, h)  # heuristically rolled back
    ok(c, "FORGET", h)
    assert "XA_RETRY" not in answers, answers
    # unknown, active (associated here), idle, gone, prepared, rollback-only, suspended, idle again
    # (resumed and ended), heuristically rolled back (rm/state_machine.cpp, rollback()).
    assert answers == ["XAER_NOTA", "XAER_PROTO", "XA_OK", "XAER_NOTA", "XA_OK", "XA_OK", "XAER_PROTO", "XA_OK",
                       "XA_HEURRB"], answers
    assert consume_all(broker, q) == []
