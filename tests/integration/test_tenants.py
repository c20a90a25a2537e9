"""Tenants stay apart (docs/security.md, "Tenants"): with three users (alice may send and consume on
orders.#, bob on billing.#, ops is admin), bob cannot reach alice's XA branches, durable
subscriptions or identity. Each test is an attack that worked before the broker kept owners."""

import json
import re

import pytest

from conftest import Client, new_xid, unique
from test_security import escrow_cli, hash_password

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "ops": "ops-secret"}
ROLES = {"alice": "orders-app", "bob": "billing-app", "ops": "operator"}

SETTINGS = """
[security]
users-file = "users.toml"

[[security-settings]]
match = "#"
admin = ["operator"]
send = ["operator"]
consume = ["operator"]

[[security-settings]]
match = "orders.#"
send = ["orders-app"]
consume = ["orders-app"]
create-durable-subscription = ["orders-app"]

[[security-settings]]
match = "billing.#"
send = ["billing-app"]
consume = ["billing-app"]
create-durable-subscription = ["billing-app"]
"""


@pytest.fixture(scope="module")
def users_file():
    return "\n".join(f'[[user]]\nname = "{n}"\npassword = "{hash_password(p)}"\nroles = ["{ROLES[n]}"]\n'
                     for n, p in PASSWORDS.items())


@pytest.fixture
def tenants(broker_factory, users_file):
    b = broker_factory(config=SETTINGS, start=False)
    (b.workdir / "users.toml").write_text(users_file)
    b.start()
    return b


def login(broker, user, **headers):
    return Client(broker, headers={"login": user, "passcode": PASSWORDS[user], **headers})


def prepared_by_alice(broker, queue):
    """Alice's branch that sent one message to `queue`, prepared; returns (alice, xid)."""
    alice = login(broker, "alice")
    x = new_xid()
    assert alice.xa("START", x).result == "XA_OK"
    alice.send(queue, "alice's order")
    assert alice.xa("END", x, "TMSUCCESS").result == "XA_OK"
    assert alice.xa("PREPARE", x).result == "XA_OK"
    return alice, x


def recovered(client):
    reply = client.xa("RECOVER", flags="TMSTARTRSCAN|TMENDRSCAN", count=1000)
    assert reply.result == "XA_OK", reply
    return set(reply.body.split())


def test_another_users_branch_answers_xaer_nota_to_every_verb_and_changes_nothing(tenants):
    queue = f"/queue/orders.{unique()}"
    alice = login(tenants, "alice")
    x = new_xid()
    assert alice.xa("START", x).result == "XA_OK"
    alice.send(queue, "alice's order")
    bob = login(tenants, "bob")
    # While hers is active: he cannot join, resume or end it.
    for verb, flags in [("START", "TMJOIN"), ("START", "TMRESUME"), ("END", "TMSUCCESS"), ("END", "TMFAIL")]:
        assert bob.xa(verb, x, flags).result == "XAER_NOTA", (verb, flags)
    assert alice.xa("END", x, "TMSUCCESS").result == "XA_OK"
    # Idle: no one-phase commit, prepare or rollback by him.
    for verb, flags in [("COMMIT", "TMONEPHASE"), ("PREPARE", None), ("ROLLBACK", None), ("FORGET", None)]:
        assert bob.xa(verb, x, flags).result == "XAER_NOTA", (verb, flags)
    assert alice.xa("PREPARE", x).result == "XA_OK"
    # Prepared: no commit, rollback or forget; his recovery does not list it.
    for verb, flags in [("COMMIT", None), ("ROLLBACK", None), ("FORGET", None)]:
        assert bob.xa(verb, x, flags).result == "XAER_NOTA", (verb, flags)
    assert x not in recovered(bob)
    assert x in recovered(alice)
    # Joining and dropping the connection used to make her branch rollback-only: nothing now.
    bob.xa("START", x, "TMJOIN")
    bob.drop()
    # Her branch is as she left it: her commit makes her message visible.
    assert alice.xa("COMMIT", x).result == "XA_OK"
    consumer = login(tenants, "alice")
    consumer.subscribe(queue)
    assert [m.body for m in consumer.wait_messages(1)] == ["alice's order"]
    for c in (alice, consumer):
        c.close()


def test_the_same_xid_is_a_branch_of_each_user_and_reveals_nothing(tenants):
    alice, x = prepared_by_alice(tenants, f"/queue/orders.{unique()}")
    bob = login(tenants, "bob")
    # What an unknown xid gets: his own new branch, not XAER_DUPID.
    assert bob.xa("START", x).result == "XA_OK"
    bob.send(f"/queue/billing.{unique()}", "bob's invoice")
    assert bob.xa("END", x, "TMSUCCESS").result == "XA_OK"
    assert bob.xa("ROLLBACK", x).result == "XA_OK"
    # Hers is untouched by his rollback.
    assert x in recovered(alice)
    branches = json.loads(escrow_cli(tenants, "--json", "xa", "list", user="ops", password=PASSWORDS["ops"]).stdout)
    (mine,) = [b for b in branches["branches"] if b["xid"] == x]
    assert mine["user"] == "alice" and mine["state"] == "prepared"
    assert alice.xa("ROLLBACK", x).result == "XA_OK"
    for c in (alice, bob):
        c.close()


def test_an_admin_recovers_and_commits_another_users_prepared_branch_after_a_restart(tenants):
    queue = f"/queue/orders.{unique()}"
    alice, x = prepared_by_alice(tenants, queue)
    alice.close()
    tenants.kill9()  # the owner is stored with the prepared record
    tenants.restart()
    bob = login(tenants, "bob")
    assert bob.xa("COMMIT", x).result == "XAER_NOTA"
    bob.close()
    assert x in recovered(login(tenants, "alice"))
    ops = login(tenants, "ops")
    assert x in recovered(ops)
    assert ops.xa("COMMIT", x).result == "XA_OK"
    consumer = login(tenants, "alice")
    consumer.subscribe(queue)
    assert [m.body for m in consumer.wait_messages(1)] == ["alice's order"]
    consumer.close()
    ops.close()


def test_an_admin_names_the_user_when_two_have_prepared_the_same_xid(tenants):
    alice, x = prepared_by_alice(tenants, f"/queue/orders.{unique()}")
    bob = login(tenants, "bob")
    assert bob.xa("START", x).result == "XA_OK"
    bob.send(f"/queue/billing.{unique()}", "bob's invoice")
    assert bob.xa("END", x, "TMSUCCESS").result == "XA_OK"
    assert bob.xa("PREPARE", x).result == "XA_OK"
    ops = login(tenants, "ops")
    reply = ops.xa("COMMIT", x)
    assert reply.result == "XAER_RMERR" and "2 users" in reply.headers["message"], reply
    cli = escrow_cli(tenants, "xa", "rollback", x, user="ops", password=PASSWORDS["ops"])
    assert cli.returncode != 0 and "name the user" in cli.stderr, cli.stderr
    cli = escrow_cli(tenants, "xa", "rollback", x, "--owner", "bob", user="ops", password=PASSWORDS["ops"])
    assert cli.returncode == 0, cli.stderr
    # Bob's is decided heuristically, alice's is still hers to commit.
    assert bob.xa("ROLLBACK", x).result == "XA_HEURRB"
    assert alice.xa("COMMIT", x).result == "XA_OK"
    for c in (alice, bob, ops):
        c.close()


def durable(client, topic, name="audit"):
    return client.subscribe(topic, headers={"durable-subscription-name": name})


def test_another_user_with_the_same_client_id_cannot_end_or_take_a_durable_subscription(tenants):
    topic, client_id = f"/topic/orders.{unique()}", unique("app")
    alice = login(tenants, "alice", **{"client-id": client_id})
    sub = durable(alice, topic)
    alice.unsubscribe(sub)  # the consumer goes, the subscription stays
    alice.send(topic, "kept for alice")
    alice.disconnect()
    bob = login(tenants, "bob", **{"client-id": client_id})
    # His UNSUBSCRIBE of that name ends his own subscription of that name (there is none).
    bob.unsubscribe("x", headers={"durable-subscription-name": "audit"})
    # His SUBSCRIBE with the same client-id and name makes his own, on his own topic: the answer
    # neither refuses nor names her topic.
    billing = f"/topic/billing.{unique()}"
    durable(bob, billing)
    bob.send(billing, "bob's")
    assert [m.body for m in bob.wait_messages(1)] == ["bob's"]
    assert not bob.errors
    bob.disconnect()
    listed = json.loads(escrow_cli(tenants, "--json", "subscriptions", user="ops", password=PASSWORDS["ops"]).stdout)
    mine = {(d["user"], d["topic"]) for d in listed["durable"] if d["client_id"] == client_id}
    assert mine == {("alice", topic[len("/topic/"):]), ("bob", billing[len("/topic/"):])}
    # Alice's subscription kept its message.
    alice = login(tenants, "alice", **{"client-id": client_id})
    durable(alice, topic)
    assert [m.body for m in alice.wait_messages(1)] == ["kept for alice"]
    alice.close()


def test_an_operator_deletes_one_users_durable_subscription_by_naming_the_owner(tenants):
    client_id = unique("app")
    for user, topic in [("alice", f"/topic/orders.{unique()}"), ("bob", f"/topic/billing.{unique()}")]:
        c = login(tenants, user, **{"client-id": client_id})
        durable(c, topic)
        c.disconnect()
    ops = dict(user="ops", password=PASSWORDS["ops"])
    r = escrow_cli(tenants, "subscription", "delete", client_id, "audit", **ops)
    assert r.returncode != 0 and "2 users" in r.stderr and "--owner" in r.stderr, r.stderr
    r = escrow_cli(tenants, "subscription", "delete", client_id, "audit", "--owner", "bob", **ops)
    assert r.returncode == 0, r.stderr
    listed = json.loads(escrow_cli(tenants, "--json", "subscriptions", **ops).stdout)
    assert [d["user"] for d in listed["durable"] if d["client_id"] == client_id] == ["alice"]


def test_a_sender_cannot_forge_another_users_identity(tenants):
    queue = f"/queue/orders.{unique()}"
    alice = login(tenants, "alice")
    forged = {"JMSXUserID": "bob", "_AMQ_VALIDATED_USER": "bob", "_HQ_ORIG_ADDRESS": "billing.x",
              "_HQ_ORIG_MESSAGE_ID": "1", "xid": "1:aa:bb", "xa-result": "XA_OK", "escrow-anything": "x",
              # What clients set themselves stays.
              "_AMQ_DUPL_ID": "order-7", "JMSXGroupID": "g1", "x-app": "shop", "user-id": "alice"}
    alice.send(queue, "own identity", headers=forged)
    consumer = login(tenants, "alice")
    consumer.subscribe(queue)
    (m,) = consumer.wait_messages(1)
    for reserved in ("JMSXUserID", "_AMQ_VALIDATED_USER", "_HQ_ORIG_ADDRESS", "_HQ_ORIG_MESSAGE_ID", "xid",
                     "xa-result", "escrow-anything"):
        assert reserved not in m.headers, (reserved, m.headers)
    for kept in ("_AMQ_DUPL_ID", "JMSXGroupID", "x-app", "user-id"):
        assert m.headers[kept] == forged[kept], (kept, m.headers)
    # A user-id that is not hers is refused, and nothing is stored.
    rid = alice.new_receipt()
    alice.conn.send(queue, "as bob", headers={"user-id": "bob", "receipt": rid})
    err = alice.wait_error()
    assert re.search(r"user-id header 'bob' is not the user this connection logged in as \('alice'\)",
                     err.headers["message"]), err.headers["message"]
    alice.wait_disconnected()
    probe = login(tenants, "alice")
    probe.send(queue, "after")
    assert [m.body for m in consumer.wait_messages(2)][1] == "after"
    for c in (consumer, probe):
        c.close()


def test_one_users_limits_leave_another_user_alone(broker_factory, users_file):
    b = broker_factory(config=SETTINGS + "\n[limits]\nmax-queues-per-user = 2\nmax-branches-per-user = 1\n",
                       start=False)
    (b.workdir / "users.toml").write_text(users_file)
    b.start()
    alice = login(b, "alice")
    for _ in range(2):
        alice.send(f"/queue/orders.{unique()}", "x")
    assert alice.xa("START", new_xid()).result == "XA_OK"
    # At both limits, alice is refused ...
    extra = login(b, "alice")
    extra.conn.send(f"/queue/orders.{unique()}", "x", headers={"receipt": "r"})
    assert "user 'alice' has created 2 queues" in extra.wait_error().headers["message"]
    extra = login(b, "alice")
    extra.conn.send_frame("BEGIN", {"transaction": "t", "receipt": "b"})
    assert "user 'alice' has 1 begun or started" in extra.wait_error().headers["message"]
    # ... and bob is not.
    bob = login(b, "bob")
    bob.send(f"/queue/billing.{unique()}", "x")
    bob.begin("t")
    bob.abort("t")
    assert not bob.errors
    for c in (alice, bob):
        c.close()


@pytest.mark.parametrize("header,value,expected", [
    # A header value escaped per STOMP 1.2 (\n) arrives as a real newline in the name.
    ("destination", "/queue/orders.a\\n[error] forged", r"invalid destination '/queue/orders\.a\\n\[error\] forged': "
                                                        r"it contains U\+000A, a control character, at byte 8"),
    ("destination", "/topic/orders.\u200bx", r"U\+200B, a zero-width or direction-changing character"),
])
def test_a_name_that_shows_differently_is_refused_and_cannot_forge_a_log_line(broker, raw, header, value, expected):
    from conftest import frame_bytes
    r = raw(broker)
    r.send(frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "x")]))
    assert r.read_frame().command == "CONNECTED"
    command = "SEND" if value.startswith("/queue/") else "SUBSCRIBE"
    r.send(frame_bytes(command, [(header, value), ("id", "1"), ("receipt", "r")], "x"))
    frames = r.read_until_closed()
    assert frames and frames[0].command == "ERROR" and re.search(expected, frames[0].headers["message"]), frames
    assert "\n[error] forged" not in broker.log


def test_a_client_id_with_a_hidden_character_is_refused(broker, raw):
    from conftest import frame_bytes
    r = raw(broker)
    r.send(frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "x"), ("client-id", "app\u202eppa")]))
    f = r.read_frame()
    assert f.command == "ERROR" and "invalid client-id" in f.headers["message"] and "U+202E" in f.headers["message"], f


def test_populate_validated_user_stamps_the_sender_and_cannot_be_forged(broker_factory, users_file):
    b = broker_factory(config=SETTINGS.replace("[security]\n", "[security]\npopulate-validated-user = true\n"),
                       start=False)
    (b.workdir / "users.toml").write_text(users_file)
    b.start()
    queue = f"/queue/orders.{unique()}"
    alice = login(b, "alice")
    alice.send(queue, "signed", headers={"_AMQ_VALIDATED_USER": "bob"})
    alice.subscribe(queue)
    (m,) = alice.wait_messages(1)
    assert m.headers["_AMQ_VALIDATED_USER"] == "alice"
    alice.close()


def test_a_nul_in_a_durable_subscription_name_cannot_reach_another_users_subscription(tenants, raw):
    from conftest import frame_bytes
    topic, client_id = f"/topic/orders.{unique()}", unique("app")
    alice = login(tenants, "alice", **{"client-id": client_id})
    sub = durable(alice, topic, "N")
    alice.unsubscribe(sub)
    alice.send(topic, "kept for alice")
    alice.disconnect()
    # Bob names "N<NUL>alice", which once made the key of alice's own subscription.
    r = raw(tenants)
    r.send(frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "x"), ("login", "bob"),
                                   ("passcode", PASSWORDS["bob"]), ("client-id", client_id)]))
    assert r.read_frame().command == "CONNECTED"
    r.send(b"UNSUBSCRIBE\ndurable-subscription-name:N\x00alice\nreceipt:u1\n\n\x00")
    frames = r.read_until_closed()
    assert frames[0].command == "ERROR" and "header line holds a NUL byte" in frames[0].headers["message"], frames
    alice = login(tenants, "alice", **{"client-id": client_id})
    durable(alice, topic, "N")
    assert [m.body for m in alice.wait_messages(1)] == ["kept for alice"]
    alice.close()


def test_client_text_in_an_error_cannot_forge_a_log_line(broker, raw):
    from conftest import frame_bytes
    r = raw(broker)
    r.send(frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "x")]))
    assert r.read_frame().command == "CONNECTED"
    # The escape \n (STOMP 1.2) is a newline in the transaction's name once the broker reads it.
    r.send(frame_bytes("COMMIT", [("transaction", "x\\n[error] FORGED LINE"), ("receipt", "c")]))
    frames = r.read_until_closed()
    assert frames[0].command == "ERROR", frames
    broker.wait_log("ERROR COMMIT of transaction 'x\\n[error] FORGED LINE'")
    assert "\n[error] FORGED LINE" not in broker.log


def test_a_prepared_branch_whose_xid_starts_like_an_owned_key_survives_a_restart(broker, stomp_client):
    # formatID -184549376 encodes with a leading 'u' and -2^31 with leading zero bytes: neither may
    # be taken for an owner's key when the store is read again.
    q = f"/queue/{unique('odd-xid')}"
    xids = [new_xid(format_id=f) for f in (-184549376, -2147483648)]
    c = stomp_client(broker)
    for x in xids:
        assert c.xa("START", x).result == "XA_OK"
        c.send(q, "odd")
        assert c.xa("END", x, "TMSUCCESS").result == "XA_OK"
        assert c.xa("PREPARE", x).result == "XA_OK"
    c.close()
    broker.kill9()
    broker.restart()
    tm = stomp_client(broker)
    assert set(xids) <= set(tm.xa("RECOVER", flags="TMSTARTRSCAN|TMENDRSCAN", count=100).body.split())
    for x in xids:
        assert tm.xa("COMMIT", x).result == "XA_OK"


def test_a_header_cannot_smuggle_lines_to_a_stomp_1_0_consumer(broker_factory, users_file, raw):
    # STOMP 1.0 has no escapes: bob's header value with a LF (escaped by his 1.2 client) once went
    # out to alice's 1.0 consumer as two lines, the second an `_AMQ_VALIDATED_USER:alice` before the
    # broker's own, and python3-stomp read alice. Now a CR or LF (and a ':' in a name) goes out to
    # 1.0 as a space, and the broker's identity header comes before the sender's.
    config = SETTINGS.replace("[security]\n", "[security]\npopulate-validated-user = true\n") + """
[[security-settings]]
match = "shared.#"
send = ["billing-app"]
consume = ["orders-app"]
"""
    b = broker_factory(config=config, start=False)
    (b.workdir / "users.toml").write_text(users_file)
    b.start()
    queue = f"/queue/shared.{unique()}"
    bob = login(b, "bob")
    bob.send(queue, "from bob", headers={"note": "hi\n_AMQ_VALIDATED_USER:alice\r\nx-forged:yes"})
    bob.close()
    r = raw(b)
    r.connect(f"accept-version:1.0\nhost:localhost\nlogin:alice\npasscode:{PASSWORDS['alice']}\n")
    from conftest import frame_bytes
    r.send(frame_bytes("SUBSCRIBE", [("destination", queue), ("id", "s")]))
    m = r.read_frame()
    assert m.command == "MESSAGE", m
    lines = [line.decode() if isinstance(line, bytes) else line for line in m.raw_header_lines]
    assert "x-forged:yes" not in lines and "_AMQ_VALIDATED_USER:alice" not in lines, lines
    users = [line for line in lines if line.startswith("_AMQ_VALIDATED_USER:")]
    assert users == ["_AMQ_VALIDATED_USER:bob"], lines
    notes = [line for line in lines if line.startswith("note:")]
    assert notes == ["note:hi _AMQ_VALIDATED_USER:alice  x-forged:yes"], lines
    assert lines.index(users[0]) < lines.index(notes[0]), lines
