"""Issue 23's low findings, each an attack of one tenant on another (or on the operator) through a
real escrowd, that worked before its fix (docs/security.md, "Tenants"): users alice (orders.#),
bob (billing.#) and ops (admin), as in test_tenants.py."""

import json
import re
import signal
import time

import pytest

from conftest import Client, frame_bytes, unique
from test_security import escrow_cli
from test_tenants import PASSWORDS, SETTINGS, login, tenants, users_file  # noqa: F401 (fixtures)

OPS = dict(user="ops", password=PASSWORDS["ops"])


def wait_for(condition, what, broker, timeout=15):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s:\n{broker.log}"
        time.sleep(0.02)

# Both tenants may browse their own addresses, as an application's operator would.
BROWSE_SETTINGS = SETTINGS.replace('create-durable-subscription = ["orders-app"]\n',
                                   'create-durable-subscription = ["orders-app"]\nbrowse = ["orders-app"]\n') \
                          .replace('create-durable-subscription = ["billing-app"]\n',
                                   'create-durable-subscription = ["billing-app"]\nbrowse = ["billing-app"]\n')


def secured(broker_factory, users, config=BROWSE_SETTINGS):
    b = broker_factory(config=config, start=False)
    (b.workdir / "users.toml").write_text(users)
    b.start()
    return b


def bob_billing_subscription(b, client_id="orders", name="billing"):
    """Bob's durable subscription CLIENT-ID.NAME@bob on a billing topic, holding one stored message;
    returns its display name."""
    topic = f"/topic/billing.{unique()}"
    bob = login(b, "bob", **{"client-id": client_id})
    sub = bob.subscribe(topic, headers={"durable-subscription-name": name})
    bob.unsubscribe(sub)  # the consumer goes, the subscription and its messages stay
    bob.send(topic, "bob's invoice 4711")
    bob.disconnect()
    return f"{client_id}.{name}@bob"


# -- N9: browse by display name ---------------------------------------------------------------------

def test_n9_browse_of_another_users_durable_subscription_is_refused(broker_factory, users_file):
    # Bob's client-id `orders` made his subscription's name `orders.billing@bob`, which alice's
    # browse on orders.# once matched: she read his invoice.
    b = secured(broker_factory, users_file)
    name = bob_billing_subscription(b)
    r = escrow_cli(b, "--json", "browse", name, user="alice", password=PASSWORDS["alice"])
    assert "bob's invoice" not in r.stdout, r.stdout
    assert r.returncode != 0 and f"user 'alice' lacks the browse permission on '{name}'" in r.stderr, r.stderr
    # A name of the same form that exists nowhere reads the same.
    r = escrow_cli(b, "browse", "orders.nothing@bob", user="alice", password=PASSWORDS["alice"])
    assert r.returncode != 0 and "lacks the browse permission on 'orders.nothing@bob'" in r.stderr, r.stderr
    # Its owner browses it with browse on its topic (billing.#), and so does an operator.
    for who, password in [("bob", PASSWORDS["bob"]), ("ops", PASSWORDS["ops"])]:
        r = escrow_cli(b, "--json", "browse", name, user=who, password=password)
        assert r.returncode == 0, (who, r.stderr)
        assert [m["body"] for m in json.loads(r.stdout)["messages"]] == ["bob's invoice 4711"], r.stdout


@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE"])
def test_n9_a_queue_name_with_an_at_sign_is_refused(broker_factory, users_file, raw, command):
    # Alice's queue `orders.billing@bob` once stood in front of bob's subscription of that name:
    # the operator's purge emptied hers and left his.
    b = secured(broker_factory, users_file)
    r = raw(b)
    r.connect(f"accept-version:1.2\nhost:localhost\nlogin:alice\npasscode:{PASSWORDS['alice']}\n")
    r.send(frame_bytes(command, [("destination", "/queue/orders.billing@bob"), ("id", "1"), ("receipt", "r")], "x"))
    frames = r.read_until_closed()
    assert frames and frames[0].command == "ERROR", frames
    assert re.search(r"invalid destination '/queue/orders\.billing@bob': it contains '@' at byte 14, which only "
                     r"the names of durable subscriptions hold", frames[0].headers["message"]), frames[0].headers
    listed = json.loads(escrow_cli(b, "--json", "queues", **OPS).stdout)
    assert not [q for q in listed["queues"] if q["name"] == "orders.billing@bob"], listed


def test_n9_purge_and_move_reach_the_subscription_not_a_look_alike_queue(broker_factory, users_file):
    b = secured(broker_factory, users_file)
    name = bob_billing_subscription(b)
    alice = login(b, "alice")
    alice.conn.send(f"/queue/{name}", "alice's decoy", headers={"receipt": "decoy"})
    assert "'@'" in alice.wait_error().headers["message"]
    # move may not make a queue of that name either.
    r = escrow_cli(b, "move", "--from", name, "--to", "orders.copy@bob", **OPS)
    assert r.returncode != 0 and "cannot move to 'orders.copy@bob': it contains '@'" in r.stderr, r.stderr
    r = escrow_cli(b, "--json", "purge", "--yes", name, **OPS)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["purged"] == 1, r.stdout
    r = escrow_cli(b, "--json", "browse", name, user="bob", password=PASSWORDS["bob"])
    assert json.loads(r.stdout)["messages"] == [], r.stdout


# -- N14: the dummy hash's cost ---------------------------------------------------------------------

def weak_hash(password, iterations=10000):
    """A users-file hash of `password` at `iterations` (the least a users file takes is 10,000)."""
    import hashlib
    import os
    salt = os.urandom(16)
    key = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations, dklen=32)
    return f"pbkdf2-sha256:{iterations}:{salt.hex()}:{key.hex()}"


def escrowd_cpu_seconds(b):
    """The CPU time escrowd has used so far (user + system), from /proc."""
    import os
    fields = open(f"/proc/{b.proc.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def refused_login(b, raw, user, passcode):
    r = raw(b)
    r.send(frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "x"), ("login", user), ("passcode", passcode)]))
    f = r.read_frame()
    assert f.command == "ERROR" and "login refused" in f.headers["message"], f
    r.close()


def test_n14_an_unknown_user_costs_what_the_dearest_hash_costs(broker_factory, raw):
    # alice and bob have hashes of 10,000 iterations, ops one of 600,000: the dummy hash once took
    # the most common count (10,000), so an unknown name was refused 20 times faster than a wrong
    # passcode for ops, which told that ops exists.
    from test_security import hash_password
    users = "".join(f'[[user]]\nname = "{n}"\npassword = "{h}"\nroles = ["{r}"]\n' for n, h, r in [
        ("alice", weak_hash(PASSWORDS["alice"]), "orders-app"), ("bob", weak_hash(PASSWORDS["bob"]), "billing-app"),
        ("ops", hash_password(PASSWORDS["ops"]), "operator")])
    b = secured(broker_factory, users)
    # CPU, not wall-clock time: the checks' cost, whatever the machine's noise and the back-off
    # between ops's failures.
    start = escrowd_cpu_seconds(b)
    for i in range(3):
        refused_login(b, raw, unique("nobody"), "guess")
    unknown = escrowd_cpu_seconds(b) - start
    start = escrowd_cpu_seconds(b)
    for i in range(3):
        refused_login(b, raw, "ops", f"guess-{i}")
    known = escrowd_cpu_seconds(b) - start
    assert unknown >= 0.5 * known, f"3 unknown users cost {unknown:.3f} s of CPU, 3 wrong passcodes of ops {known:.3f} s"
    # The users with weak hashes are named at start, and again at every reload of the file.
    b.wait_log("users file: 2 user(s) have password hashes of fewer than 600000 iterations: 'alice' (10000), "
               "'bob' (10000)")
    b.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: b.log.count("have password hashes of fewer than 600000 iterations") == 2, "a second warning", b)


# -- N13: client text in the log ----------------------------------------------------------------------

def test_n13_a_heart_beat_header_cannot_write_control_characters_into_the_log(broker, raw):
    # CONNECT's headers are not unescaped: a raw CR and an ESC went into the log line as they came,
    # so a terminal showing the log ran the escape sequence and the CR overwrote the line.
    r = raw(broker)
    r.send(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:1\r[error] FORGED\x1b[2J,0\n\n\0")
    frames = r.read_until_closed()
    assert frames and frames[0].command == "ERROR" and "invalid heart-beat header" in frames[0].headers["message"], \
        frames
    broker.wait_log("invalid heart-beat header '1\\r[error] FORGED\\x1b[2J,0'")
    assert "\x1b" not in broker.log and "\r[error] FORGED" not in broker.log


def test_n13_a_backup_path_cannot_write_a_line_into_the_log(broker_factory, raw, tmp_path):
    root = tmp_path / "backups"
    root.mkdir(mode=0o700)
    b = broker_factory(config=f'[storage]\nbackup-root = "{root}"\n')
    r = raw(b)
    r.connect()
    # \n is the STOMP 1.2 escape of a LF: escrowd reads a path with a newline in it, once written
    # as is into "backup to ... started" and "... done".
    for path in (f"{root}/x\\n[error] FORGED LINE", f"/elsewhere\\n[error] FORGED LINE"):
        r.send(frame_bytes("ADMIN", [("admin-command", "backup"), ("path", path), ("receipt", "b")]))
        reply = r.read_frame()
        assert reply.command == "RECEIPT", reply
    b.wait_log("backup to /elsewhere\\n[error] FORGED LINE refused")
    b.wait_log(f"backup to {root}/x\\n[error] FORGED LINE done")
    assert "\n[error] FORGED LINE" not in b.log, b.log


# -- N15b: reserved header names in another case -------------------------------------------------------

def test_n15b_reserved_headers_are_dropped_and_user_id_checked_in_any_case(tenants):
    # `_amq_validated_user:bob` and `User-Id:bob` once went through to consumers, some of which
    # read header names without regard to case.
    queue = f"/queue/orders.{unique()}"
    alice = login(tenants, "alice")
    forged = {"_amq_validated_user": "bob", "jmsxuserid": "bob", "_Hq_Orig_Address": "billing.x",
              "Escrow-Anything": "x", "XA-Result": "XA_OK", "Message-Id": "forged-7", "Subscription": "s-forged",
              "x-app": "shop", "USER-ID": "alice"}
    alice.send(queue, "lower case", headers=forged)
    consumer = login(tenants, "alice")
    consumer.subscribe(queue)
    (m,) = consumer.wait_messages(1)
    names = {n.lower() for n in m.headers}
    for reserved in ("_amq_validated_user", "jmsxuserid", "_hq_orig_address", "escrow-anything", "xa-result"):
        assert reserved not in names, (reserved, m.headers)
    assert m.headers["message-id"] != "forged-7" and "Message-Id" not in m.headers, m.headers
    assert "Subscription" not in m.headers, m.headers
    assert m.headers["x-app"] == "shop" and m.headers["USER-ID"] == "alice", m.headers
    # A user-id in another case that is not hers is refused like user-id.
    alice.conn.send(queue, "as bob", headers={"User-Id": "bob", "receipt": "r"})
    err = alice.wait_error()
    assert "SEND's User-Id header 'bob' is not the user this connection logged in as ('alice')" in \
        err.headers["message"], err.headers
    consumer.close()


# -- N15a: one live connection per client-id ------------------------------------------------------------

def test_n15a_a_second_live_connection_with_a_client_id_in_use_is_refused(tenants):
    # Two live connections with one client-id were both accepted: the second could end or resume
    # the first one's durable subscriptions while it ran.
    client_id = unique("app")
    first = login(tenants, "alice", **{"client-id": client_id})
    second = Client(tenants, wait=False,
                    headers={"login": "alice", "passcode": PASSWORDS["alice"], "client-id": client_id})
    err = second.wait_error()
    assert re.search(rf"client-id '{client_id}' is in use by connection \d+ from 127\.0\.0\.1:\d+ of user 'alice': "
                     r"a client-id names one client at a time", err.headers["message"]), err.headers
    # Another user's client-id of the same name is theirs: nobody keeps alice out by taking hers.
    bob = login(tenants, "bob", **{"client-id": client_id})
    assert not bob.errors
    # Once the first has gone, the client-id is free again.
    first.disconnect()
    again = login(tenants, "alice", **{"client-id": client_id})
    assert not again.errors
    for c in (bob, again):
        c.close()


# -- N15c: a bad token file at SIGHUP ---------------------------------------------------------------------

def test_n15c_a_bad_token_file_at_sighup_keeps_the_token_and_reloads_the_users_file(broker_factory, users_file,
                                                                                     raw, tmp_path):
    # The users file loses bob while the token file is broken by mistake: the whole reload used to
    # stop at the token file, and bob, removed, went on logging in.
    from test_http import http_port
    from test_http_access import TOKEN, bearer, hangup, status_of
    token_file = tmp_path / "http-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    b = secured(broker_factory, users_file,
                config=BROWSE_SETTINGS + f'\n[http]\nlisten = "127.0.0.1:0"\ntoken-file = "{token_file}"\n')
    port = http_port(b)
    login(b, "bob").close()
    without_bob = [entry for entry in users_file.split("[[user]]") if entry.strip() and 'name = "bob"' not in entry]
    (b.workdir / "users.toml").write_text("".join("[[user]]" + entry for entry in without_bob))
    token_file.write_text("")
    text = hangup(b)
    refused_login(b, raw, "bob", PASSWORDS["bob"])
    login(b, "alice").close()
    assert status_of(port, host=f"127.0.0.1:{port}", headers=bearer(TOKEN)) == 200
    assert status_of(port, host=f"127.0.0.1:{port}") == 401
    assert "SIGHUP: http: the bearer tokens and allowed-hosts in force stay, the token file was not read" in text \
        and "holds no token" in text, text
    assert "SIGHUP: users file" in text and ": 2 users" in text, text


# -- N11: what a removed user still owns -----------------------------------------------------------------

def test_n11_sighup_warns_about_what_a_removed_user_still_owns(broker_factory, users_file):
    # Ownership is by name: bob's subscription and prepared branch pass to whoever is next given
    # the name bob. Removing him now says so, at the SIGHUP that removes him.
    from test_tenants import new_xid
    b = secured(broker_factory, users_file)
    bob_billing_subscription(b, client_id=unique("bob-app"))
    bob = login(b, "bob")
    x = new_xid()
    assert bob.xa("START", x).result == "XA_OK"
    bob.send(f"/queue/billing.{unique()}", "bob's invoice")
    assert bob.xa("END", x, "TMSUCCESS").result == "XA_OK"
    assert bob.xa("PREPARE", x).result == "XA_OK"
    bob.close()
    without_bob = [entry for entry in users_file.split("[[user]]") if entry.strip() and 'name = "bob"' not in entry]
    (b.workdir / "users.toml").write_text("".join("[[user]]" + entry for entry in without_bob))
    b.proc.send_signal(signal.SIGHUP)
    b.wait_log("SIGHUP: user 'bob' is no longer in the users file but still owns 1 durable subscription(s) and 1 "
               "transaction branch(es): a new user named 'bob' would own them")
    assert "user 'alice' is no longer" not in b.log and "user 'ops' is no longer" not in b.log
    # And at start, for a user removed while escrowd was not running.
    b.restart()
    b.wait_log("at start: user 'bob' is no longer in the users file but still owns 1 durable subscription(s) "
               "and 1 transaction branch(es)")


# -- N12: an operator names the owner in XA frames -----------------------------------------------------

def test_n12_an_operator_names_the_owner_of_a_xid_two_users_prepared(tenants):
    # A xid bob prepared too made the operator login's recovery answer XAER_RMERR for alice's
    # branch, with no way for a transaction manager to say which one it meant.
    from test_tenants import new_xid
    x = new_xid()
    queues = {}
    for user in ("alice", "bob"):
        c = login(tenants, user)
        assert c.xa("START", x).result == "XA_OK"
        queues[user] = f"/queue/{'orders' if user == 'alice' else 'billing'}.{unique()}"
        c.send(queues[user], f"{user}'s work")
        assert c.xa("END", x, "TMSUCCESS").result == "XA_OK"
        assert c.xa("PREPARE", x).result == "XA_OK"
        c.close()
    ops = login(tenants, "ops")
    assert ops.xa("COMMIT", x).result == "XAER_RMERR"
    assert ops.xa("COMMIT", x, user="alice").result == "XA_OK"
    assert ops.xa("ROLLBACK", x, user="bob").result == "XA_OK"
    assert ops.xa("COMMIT", x, user="bob").result == "XAER_NOTA"  # decided: gone
    reader = login(tenants, "alice")
    reader.subscribe(queues["alice"])
    assert [m.body for m in reader.wait_messages(1)] == ["alice's work"]
    # Only an operator's user header counts, and only on the verbs that decide.
    bob = login(tenants, "bob")
    reply = bob.xa("COMMIT", x, user="alice")
    assert reply.result == "XAER_INVAL" and "the user header is for operators" in reply.message, reply
    reply = ops.xa("START", new_xid(), user="alice")
    assert reply.result == "XAER_INVAL" and "XA-START takes none" in reply.message, reply
    for c in (ops, reader, bob):
        c.close()
