"""Transactions across a SIGKILL of escrowd (docs/transactions.md, "What survives a crash"):
(a) a prepared branch survives with its whole work held, and the TM's later commit or rollback
applies it exactly once; (b) escrowd killed at random moments during a burst of two-phase commits
leaves every branch committed in full, prepared, or rolled back in full, never half; (c) a local
transaction (or an XA branch not yet prepared) killed before its commit leaves no trace."""

import os
import random
import subprocess
import threading
import time

import pytest

from conftest import ESCROWD, SLOW, TIMEOUT, bodies, consume_all, look, new_xid, preload, queue, unique


def ok(c, verb, xid=None, flags=None, **headers):
    r = c.xa(verb, xid, flags, **headers)
    assert r.result == "XA_OK", f"XA-{verb} {xid} flags={flags}: expected XA_OK, got {r}"
    return r


def recover_all(c):
    r = ok(c, "RECOVER", None, "TMSTARTRSCAN|TMENDRSCAN", count=100000)
    assert r.count == len(r.xids), r
    return r.xids


# --------------------------------------------------------------------------------------------
# (a) a prepared branch survives SIGKILL
# --------------------------------------------------------------------------------------------

def prepare_branch_then_kill(broker, stomp_client, qin, qout):
    """A branch that sent 3 messages and consumed (ACKed) 2 of 4 is prepared; escrowd is killed.
    Returns its xid; in2 and in3 were delivered but never acknowledged."""
    preload(broker, qin, ["in0", "in1", "in2", "in3"])
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    msgs = c.wait_messages(4)
    x = new_xid()
    ok(c, "START", x)
    for i in range(3):
        c.send(qout, f"out{i}")
    c.ack(msgs[0], receipt=True)
    c.ack(msgs[1], receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)  # durable from here on
    broker.kill9()
    c.close()
    broker.start()
    return x


def check_held_after_restart(broker, stomp_client, qin, qout, x):
    tm = stomp_client(broker)
    assert recover_all(tm) == [x]
    # The sends are invisible, the consumed messages are held: a consumer waiting a second gets
    # only the two messages nobody acknowledged (waited for first: the second is for the others).
    watcher = stomp_client(broker)
    sub = watcher.subscribe(qin, ack="client-individual")
    watcher.wait_messages(2, subscription=sub)
    time.sleep(1.0 * SLOW)
    got = [m for m in watcher.messages if m.headers.get("subscription") == sub]
    assert bodies(got) == ["in2", "in3"], "the prepared branch's consumed messages were redelivered"
    watcher.close()
    assert look(broker, stomp_client, qout) == []
    return tm


def test_prepared_branch_survives_sigkill_then_commit(broker, stomp_client):
    qin, qout = queue("in"), queue("out")
    x = prepare_branch_then_kill(broker, stomp_client, qin, qout)
    tm = check_held_after_restart(broker, stomp_client, qin, qout, x)
    # New messages after the restart must not reuse the branch's staged message ids.
    p = stomp_client(broker)
    p.send(qout, "after-restart")
    ok(tm, "COMMIT", x)
    assert recover_all(tm) == []
    out = look(broker, stomp_client, qout)
    assert sorted(bodies(out)) == ["after-restart", "out0", "out1", "out2"]
    assert len({m.headers["message-id"] for m in out}) == 4, [dict(m.headers) for m in out]
    assert bodies(look(broker, stomp_client, qin)) == ["in2", "in3"]
    p.close()
    tm.close()
    broker.kill9()
    broker.start()
    tm = stomp_client(broker)
    assert recover_all(tm) == []
    assert sorted(bodies(look(broker, stomp_client, qout))) == ["after-restart", "out0", "out1", "out2"]
    assert bodies(look(broker, stomp_client, qin)) == ["in2", "in3"]


def test_prepared_branch_survives_sigkill_then_rollback(broker, stomp_client):
    qin, qout = queue("in"), queue("out")
    x = prepare_branch_then_kill(broker, stomp_client, qin, qout)
    tm = check_held_after_restart(broker, stomp_client, qin, qout, x)
    ok(tm, "ROLLBACK", x)
    assert recover_all(tm) == []
    back = look(broker, stomp_client, qin)
    assert bodies(back) == ["in0", "in1", "in2", "in3"]  # back in their places
    assert all(m.headers["redelivered"] == "true" for m in back)
    assert look(broker, stomp_client, qout) == []
    tm.close()
    broker.kill9()
    broker.start()
    tm = stomp_client(broker)
    assert recover_all(tm) == []
    assert bodies(look(broker, stomp_client, qin)) == ["in0", "in1", "in2", "in3"]
    assert look(broker, stomp_client, qout) == []


def test_prepared_branch_survives_two_restarts(broker, stomp_client):
    qin, qout = queue("in"), queue("out")
    x = prepare_branch_then_kill(broker, stomp_client, qin, qout)
    broker.restart()  # SIGTERM this time
    broker.kill9()
    broker.start()
    check_held_after_restart(broker, stomp_client, qin, qout, x)
    tm = stomp_client(broker)
    ok(tm, "COMMIT", x)
    assert sorted(bodies(look(broker, stomp_client, qout))) == ["out0", "out1", "out2"]


def test_prepared_branch_with_nack_and_durable_fanout_survives_sigkill(broker, stomp_client):
    # A NACK held by a prepared branch, and a send fanned out to two durable subscriptions.
    t = f"/topic/{unique('fan')}"
    q = queue("nack")
    cids = [unique("cid") for _ in range(2)]
    for cid in cids:
        d = stomp_client(broker, headers={"client-id": cid})
        d.subscribe(t, ack="client-individual", headers={"durable-subscription-name": "dur"})
        d.disconnect()
    preload(broker, q, ["nackme"])
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    (m,) = c.wait_messages(1)
    x = new_xid()
    ok(c, "START", x)
    c.send(t, "fanout")
    c.nack(m, receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    broker.kill9()
    c.close()
    broker.start()
    w = stomp_client(broker)
    sub = w.subscribe(q, ack="client-individual")
    time.sleep(1.0 * SLOW)
    assert w.messages == [], "the NACK held by the prepared branch was redelivered before commit"
    tm = stomp_client(broker)
    assert recover_all(tm) == [x]
    ok(tm, "COMMIT", x)
    (again,) = w.wait_messages(1, subscription=sub)
    assert again.body == "nackme" and again.headers["redelivered"] == "true"
    assert int(again.headers["delivery-count"]) >= 2
    for cid in cids:
        d = stomp_client(broker, headers={"client-id": cid})
        dsub = d.subscribe(t, ack="client-individual", headers={"durable-subscription-name": "dur"})
        got = d.wait_messages(1, subscription=dsub)
        d.settle(1, subscription=dsub)
        assert bodies(got) == ["fanout"]
        d.ack(got[0], receipt=True)
        d.disconnect()
    broker.kill9()
    broker.start()
    for cid in cids:
        d = stomp_client(broker, headers={"client-id": cid})
        dsub = d.subscribe(t, ack="client-individual", headers={"durable-subscription-name": "dur"})
        d.settle(0, subscription=dsub)


# --------------------------------------------------------------------------------------------
# (b) SIGKILL during a burst of two-phase commits
# --------------------------------------------------------------------------------------------

ROUNDS = int(os.environ.get("XA_CRASH_ROUNDS", "20"))
THREADS = 4
PER_THREAD = 40


class Txn:
    def __init__(self, thread, index, consumed):
        self.xid = new_xid(format_id=77, bqual=f"{thread}-{index}".encode())
        self.sent = f"sent-{thread}-{index}-{unique('b')}"
        self.consumed = consumed  # the body of the pre-loaded message it acknowledges
        self.started = False
        self.prepare_sent = False
        self.prepared = False  # XA-PREPARE answered XA_OK
        self.commit_sent = False
        self.committed = False  # XA-COMMIT answered XA_OK
        self.answers = []


def worker(mode, client, qin, qout, thread, txns, stop, problems):
    """Runs transactions until told to stop: each consumes one pre-loaded message and sends one.
    mode: "2pc" (start, send, ack, end, prepare, commit), "1pc" (... end, commit TMONEPHASE) or
    "local" (BEGIN, SEND, ACK, COMMIT)."""

    def step(t, verb, xid, flags=None):
        r = client.xa(verb, xid, flags)
        t.answers.append((verb, r.result))
        if r.result != "XA_OK":
            problems.append(f"XA-{verb} {xid} flags={flags}: {r}")
            return False
        return True

    try:
        sub = client.subscribe(qin, ack="client-individual")
        for i in range(PER_THREAD):
            if stop.is_set():
                return
            msgs = client.wait_messages(i + 1, subscription=sub)
            m = msgs[i]
            t = Txn(thread, i, m.body)
            txns.append(t)
            if mode == "local":
                name = f"t{i}"
                client.begin(name)
                t.started = True
                client.send(qout, t.sent, headers={"transaction": name}, receipt=False)
                client.ack(m, transaction=name)
                t.commit_sent = True
                client.commit(name)
                t.answers.append(("COMMIT", "RECEIPT"))
                t.committed = True
                continue
            if not step(t, "START", t.xid):
                return
            t.started = True
            client.send(qout, t.sent, receipt=False)
            client.ack(m)
            if not step(t, "END", t.xid, "TMSUCCESS"):
                return
            if mode == "1pc":
                t.commit_sent = True
                if not step(t, "COMMIT", t.xid, "TMONEPHASE"):
                    return
                t.committed = True
                continue
            t.prepare_sent = True
            if not step(t, "PREPARE", t.xid):
                return
            t.prepared = True
            t.commit_sent = True
            if not step(t, "COMMIT", t.xid):
                return
            t.committed = True
    except Exception:  # the broker was killed under us: expected
        return


@pytest.mark.parametrize("mode,rounds", [("2pc", ROUNDS), ("1pc", max(ROUNDS // 2, 1)),
                                         ("local", max(ROUNDS // 2, 1))])
def test_sigkill_during_burst_of_commits(broker, stomp_client, mode, rounds):
    seed = int(os.environ.get("XA_CRASH_SEED", str(int(time.time() * 1000) % 1_000_000)))
    print(f"\nXA crash burst ({mode}): seed {seed} (XA_CRASH_SEED={seed} to replay), {rounds} rounds")
    rng = random.Random(seed)
    failures = []
    totals = {"committed": 0, "in-doubt": 0, "rolled back": 0, "commit answered": 0}
    for rnd in range(rounds):
        qins = [queue(f"r{rnd}-in{t}") for t in range(THREADS)]
        qout = queue(f"r{rnd}-out")
        for t, q in enumerate(qins):
            preload(broker, q, [f"pre-{rnd}-{t}-{i}" for i in range(PER_THREAD)])
        clients = [stomp_client(broker) for _ in range(THREADS)]
        txns = [[] for _ in range(THREADS)]
        problems = []
        stop = threading.Event()
        threads = [threading.Thread(target=worker, args=(mode, clients[t], qins[t], qout, t, txns[t], stop, problems),
                                    daemon=True) for t in range(THREADS)]
        delay = rng.uniform(0.02, 0.45)
        for th in threads:
            th.start()
        time.sleep(delay)
        broker.kill9()
        stop.set()
        for c in clients:
            c.close()
        for th in threads:
            th.join(TIMEOUT)
            assert not th.is_alive(), "a worker thread hung after the broker was killed"
        broker.start()

        where = f"{mode} round {rnd} (seed {seed}, killed after {delay:.3f} s)"
        failures += [f"{where}: {p}" for p in problems]
        every = [t for ts in txns for t in ts]
        by_xid = {t.xid: t for t in every}
        tm = stomp_client(broker)
        in_doubt = recover_all(tm)
        for x in in_doubt:
            if x not in by_xid:
                failures.append(f"{where}: recover lists {x}, a branch this round never made")
        for t in every:
            if t.prepared and not t.commit_sent and t.xid not in in_doubt:
                failures.append(f"{where}: {t.xid} answered XA_OK to prepare but is not listed by recover")
            if t.committed and t.xid in in_doubt:
                failures.append(f"{where}: {t.xid} answered XA_OK to commit but is still listed as prepared")
            if t.xid in in_doubt and not t.prepare_sent:
                failures.append(f"{where}: {t.xid} listed by recover but never prepared")
        # Finish the in-doubt branches the way a TM would: commit them.
        for x in in_doubt:
            r = tm.xa("COMMIT", x)
            if r.result != "XA_OK":
                failures.append(f"{where}: commit of in-doubt {x} after restart answered {r}")
        tm.close()

        out = bodies(consume_all(broker, qout))
        left = {}
        for t, q in enumerate(qins):
            for b in bodies(consume_all(broker, q)):
                left[b] = left.get(b, 0) + 1
        known_sent = {t.sent for t in every}
        for b in out:
            if b not in known_sent:
                failures.append(f"{where}: unexpected message {b!r} in the output queue")
        for b, n in left.items():
            if n != 1:
                failures.append(f"{where}: pre-loaded message {b!r} is in its queue {n} times")
        for t in every:
            n_sent = out.count(t.sent)
            consumed_back = t.consumed in left
            should_commit = t.committed or t.xid in in_doubt
            if n_sent > 1:
                failures.append(f"{where}: {t.xid}: its message is present {n_sent} times")
            if should_commit:
                if n_sent != 1 or consumed_back:
                    failures.append(f"{where}: {t.xid} (commit answered {t.committed}, in doubt "
                                    f"{t.xid in in_doubt}) is not committed in full: sent present {n_sent}, "
                                    f"consumed message back {consumed_back}; answers {t.answers}")
                totals["committed"] += 1
            elif n_sent == 1 and not consumed_back:
                # committed: only acceptable when the commit was sent (its answer lost in the crash)
                if not t.commit_sent:
                    failures.append(f"{where}: {t.xid} took effect without a commit; answers {t.answers}")
                totals["committed"] += 1
            elif n_sent == 0 and consumed_back:
                totals["rolled back"] += 1
            else:
                failures.append(f"{where}: {t.xid} is half done: sent present {n_sent}, consumed message "
                                f"back {consumed_back}; answers {t.answers}")
            if t.committed:
                totals["commit answered"] += 1
            if t.xid in in_doubt:
                totals["in-doubt"] += 1
        # Every pre-loaded message is either back or consumed by a committed branch.
        consumed_by_committed = {t.consumed for t in every if t.consumed not in left}
        for t in range(THREADS):
            for i in range(PER_THREAD):
                b = f"pre-{rnd}-{t}-{i}"
                if b not in left and b not in consumed_by_committed:
                    failures.append(f"{where}: pre-loaded message {b!r} is lost")
        if len(failures) > 30:
            break
    print(f"XA crash burst ({mode}) totals: {totals}")
    if mode != "2pc":
        assert totals["in-doubt"] == 0, "one-phase and local commits leave nothing in doubt"
    assert totals["commit answered"] > 0, "no commit was answered in any round: the burst did not run"
    assert not failures, f"seed {seed}:\n" + "\n".join(failures[:40])


# --------------------------------------------------------------------------------------------
# (c) killed before COMMIT
# --------------------------------------------------------------------------------------------

def test_local_transaction_killed_before_commit_leaves_no_trace(broker, stomp_client):
    qin, qout = queue("in"), queue("out")
    preload(broker, qin, ["in0", "in1", "in2", "in3"])
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    msgs = c.wait_messages(4)
    c.begin("t")
    for i in range(3):
        c.send(qout, f"out{i}", headers={"transaction": "t"})
    c.ack(msgs[0], receipt=True, transaction="t")
    c.ack(msgs[1], receipt=True, transaction="t")
    # in2 and in3: delivered, never acknowledged (the control group).
    broker.kill9()
    c.close()
    broker.start()
    assert look(broker, stomp_client, qout) == []
    back = look(broker, stomp_client, qin)
    assert bodies(back) == ["in0", "in1", "in2", "in3"]
    # "without a raised delivery count, as after any crash": like the control messages.
    control = back[2].headers
    for m in back[:2]:
        assert m.headers["delivery-count"] == control["delivery-count"], [dict(x.headers) for x in back]
        assert m.headers["redelivered"] == control["redelivered"], [dict(x.headers) for x in back]
    tm = stomp_client(broker)
    assert recover_all(tm) == []


@pytest.mark.parametrize("state", ["active", "idle", "rollback-only"])
def test_xa_branch_not_prepared_is_rolled_back_by_a_crash(broker, stomp_client, state):
    qin, qout = queue("in"), queue("out")
    preload(broker, qin, ["in0", "in1"])
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    msgs = c.wait_messages(2)
    x = new_xid()
    ok(c, "START", x)
    c.send(qout, "out0")
    c.ack(msgs[0], receipt=True)
    if state == "idle":
        ok(c, "END", x, "TMSUCCESS")
    elif state == "rollback-only":
        c.xa("END", x, "TMFAIL")
    broker.kill9()
    c.close()
    broker.start()
    tm = stomp_client(broker)
    assert recover_all(tm) == []
    r = tm.xa("PREPARE", x)
    assert r.result == "XAER_NOTA", r
    assert look(broker, stomp_client, qout) == []
    assert bodies(look(broker, stomp_client, qin)) == ["in0", "in1"]


def test_local_commit_answered_survives_sigkill_in_full(broker, stomp_client):
    # The other side of (c): once COMMIT's RECEIPT arrived, all of it stays after SIGKILL.
    qin, qout = queue("in"), queue("out")
    preload(broker, qin, ["in0", "in1", "in2"])
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    msgs = c.wait_messages(3)
    c.begin("t")
    for i in range(3):
        c.send(qout, f"out{i}", headers={"transaction": "t"})
    c.ack(msgs[0], transaction="t")
    c.ack(msgs[1], transaction="t")
    c.commit("t")
    broker.kill9()
    c.close()
    broker.start()
    assert bodies(look(broker, stomp_client, qout)) == ["out0", "out1", "out2"]
    assert bodies(look(broker, stomp_client, qin)) == ["in2"]


def storage_key_known(tmp_path, key):
    """Whether this escrowd has the configuration key [storage] `key`: given a value of the wrong
    type, it stops at once either way, saying "unknown key" only if it has none."""
    config = tmp_path / f"probe-{key}.toml"
    config.write_text(f'[storage]\n{key} = "?"\n')
    r = subprocess.run([ESCROWD, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "probe-data"), "--config",
                        str(config)], capture_output=True, text=True, timeout=60 * SLOW)
    assert r.returncode == 2, (r.returncode, r.stderr)
    return "unknown key" not in r.stderr


def fill_store(broker, stomp_client):
    """Sends 32 KiB messages to a queue of their own until the store refuses one (an ERROR, which
    closes that connection); returns how many it stored first."""
    f = stomp_client(broker)
    q = queue("filler")
    for stored in range(1000):
        rid = f.send(q, "f" * 32_768, wait=False)
        f.listener.wait_for(lambda: rid in f.listener.receipts or f.listener.errors or f.listener.disconnected,
                            TIMEOUT, f"RECEIPT {rid} or an ERROR")
        if rid not in f.listener.receipts:
            (e,) = f.errors
            assert "full" in e.headers.get("message", "").lower(), (dict(e.headers), e.body)
            return stored
    raise AssertionError("the store never refused a SEND")


def test_commit_refused_by_full_store_keeps_branch_prepared_across_restart(broker_factory, stomp_client, tmp_path):
    # The commit batch writes the branch's messages next to its prepare record: in a full store a
    # prepared branch is refused at commit (XAER_RMFAIL, "try again"). It must stay prepared,
    # whole, and commit exactly once when the store has room (here: a larger map after restart).
    # The store is full on purpose: a 1 MiB map that may not grow, filled after the prepare until
    # a SEND is refused. Where escrowd's map grows by itself, storage.max-map-size keeps it at 1 MiB
    # (storage.max-size would not do: it refuses new SENDs, never a commit); an escrowd without
    # that key has a map that never grows.
    cap = "max-map-size = 1048576\n" if storage_key_known(tmp_path, "max-map-size") else ""
    b = broker_factory(config="[storage]\nmap-size = 1048576\n" + cap)
    qin, qout = queue("in"), queue("out")
    preload(b, qin, ["in0", "in1"])
    c = stomp_client(b)
    c.subscribe(qin, ack="client-individual")
    msgs = c.wait_messages(2)
    x = new_xid()
    ok(c, "START", x)
    for i in range(3):
        c.send(qout, f"big{i}-" + "x" * 200_000)
    c.ack(msgs[0], receipt=True)
    ok(c, "END", x, "TMSUCCESS")
    ok(c, "PREPARE", x)
    fill_store(b, stomp_client)
    r = c.xa("COMMIT", x)
    assert r.result == "XAER_RMFAIL", r
    assert recover_all(c) == [x]
    c.close()
    b.kill9()
    b.config_path.write_text("[storage]\nmap-size = 16777216\n")
    b.start()
    tm = stomp_client(b)
    assert recover_all(tm) == [x]
    assert look(b, stomp_client, qout) == []
    assert bodies(look(b, stomp_client, qin)) == ["in1"]
    ok(tm, "COMMIT", x)
    out = look(b, stomp_client, qout)
    assert [m.body.split("-")[0] for m in out] == ["big0", "big1", "big2"]
    assert bodies(look(b, stomp_client, qin)) == ["in1"]
