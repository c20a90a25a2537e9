"""Users, roles and per-address permissions (docs/security.md): logins checked against a users file
of PBKDF2 hashes made by `escrowd --hash-password`, each permission granted and denied, the same
answer whether or not an address exists, the broker-wide admin permission, the back-off after
failed logins, the loopback rule for anonymous access, and SIGHUP reloading users and permissions.
"""

import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import ESCROWD, SLOW, TIMEOUT, Client, new_xid, tool, unique

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "olga": "olga-secret"}
ROLES = {"alice": ["app"], "bob": ["reader"], "olga": ["ops"]}

SETTINGS = """
[security]
users-file = "users.toml"
login-backoff-max-ms = 2000

[[security-settings]]
match = "#"
admin = ["ops"]
consume = ["ops"]

[[security-settings]]
match = "orders.#"
send = ["app"]
consume = ["app", "reader"]
browse = ["reader"]
create-durable-subscription = ["app"]

[[security-settings]]
match = "orders.secret"
consume = []
"""


def hash_password(password):
    r = subprocess.run([ESCROWD, "--hash-password"], input=password + "\n", capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.fixture(scope="module")
def hashes():
    return {name: hash_password(pw) for name, pw in PASSWORDS.items()}


def users_toml(hashes, names=None):
    out = []
    for name in names or PASSWORDS:
        roles = ", ".join(f'"{r}"' for r in ROLES.get(name, ["app"]))
        out.append(f'[[user]]\nname = "{name}"\npassword = "{hashes[name]}"\nroles = [{roles}]\n')
    return "\n".join(out)


@pytest.fixture
def secured(broker_factory, hashes):
    b = broker_factory(config=SETTINGS, start=False)
    (b.workdir / "users.toml").write_text(users_toml(hashes))
    b.start()
    return b


def login(broker, user, password=None, wait=True):
    headers = {"login": user, "passcode": PASSWORDS.get(user, "") if password is None else password}
    return Client(broker, headers=headers, wait=wait)


def refused(client, pattern):
    """The connection got an ERROR matching `pattern` and was closed."""
    err = client.wait_error()
    assert re.search(pattern, err.headers["message"]), err.headers["message"]
    client.wait_disconnected()
    return err.headers["message"]


def test_hash_password_prints_a_salted_pbkdf2_hash():
    first, second = hash_password("same password"), hash_password("same password")
    assert re.fullmatch(r"pbkdf2-sha256:600000:[0-9a-f]{32}:[0-9a-f]{64}", first), first
    assert first != second, "each hash has its own salt"
    r = subprocess.run([ESCROWD, "--hash-password"], input="", capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "no password" in r.stderr


def test_login_with_the_right_passcode_connects(secured):
    c = login(secured, "alice")
    assert c.listener.connected is not None and not c.listener.errors
    c.close()


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "anything"), ("", "")])
def test_bad_logins_get_the_same_error_and_are_logged_with_the_peer(secured, user, password):
    c = login(secured, user, password, wait=False)
    message = refused(c, r"login refused")
    # The client learns nothing about which users exist.
    assert message == "login refused: unknown user or wrong passcode"
    log = ""
    deadline = time.monotonic() + TIMEOUT
    while "failed login from 127.0.0.1" not in log and time.monotonic() < deadline:
        time.sleep(0.05)
        log = secured.log
    assert "failed login from 127.0.0.1" in log
    assert "wrong" not in log.split("failed login from 127.0.0.1")[1].split("\n")[0] or user == "alice"
    c.close()


def test_send_permission_granted_and_denied(secured):
    queue = "/queue/orders." + unique()
    alice = login(secured, "alice")
    alice.send(queue, "from alice")
    bob = login(secured, "bob")
    bob.send(queue, "from bob", wait=False)
    message = refused(bob, r"permission denied")
    assert message == f"permission denied: user 'bob' lacks the send permission on '{queue[7:]}'"
    reader = login(secured, "bob")
    reader.subscribe(queue)
    reader.wait_body("from alice")
    assert all(m.body != "from bob" for m in reader.messages)
    for c in (alice, bob, reader):
        c.close()


def test_a_denial_does_not_reveal_whether_the_address_exists(secured):
    existing = "orders." + unique()
    alice = login(secured, "alice")
    alice.send("/queue/" + existing, "x")
    answers = []
    for name in (existing, "orders." + unique("never-made")):
        olga = login(secured, "olga")  # admin and consume, but no send on orders.#
        olga.send("/queue/" + name, "y", wait=False)
        answers.append(refused(olga, r"permission denied").replace(name, "NAME"))
        olga.close()
    assert answers[0] == answers[1]
    alice.close()


def test_consume_permission_follows_the_most_specific_pattern(secured):
    alice = login(secured, "alice")
    alice.subscribe("/queue/orders.eu")  # orders.# grants consume to app
    secret = login(secured, "alice")
    secret.subscribe("/queue/orders.secret", receipt=False)  # orders.secret sets consume = []
    refused(secret, r"lacks the consume permission on 'orders.secret'")
    other = login(secured, "alice")
    other.subscribe("/queue/payments", receipt=False)  # only '#' matches: consume for ops alone
    refused(other, r"lacks the consume permission on 'payments'")
    for c in (alice, secret, other):
        c.close()


def test_durable_subscription_needs_its_own_permission(secured):
    topic = "/topic/orders." + unique()
    headers = {"login": "alice", "passcode": PASSWORDS["alice"], "client-id": unique("app")}
    alice = Client(secured, headers=headers)
    alice.subscribe(topic, headers={"durable-subscription-name": "audit"})
    bob = Client(secured, headers={"login": "bob", "passcode": PASSWORDS["bob"], "client-id": unique("rd")})
    bob.subscribe(topic, headers={"durable-subscription-name": "audit"}, receipt=False)
    refused(bob, r"lacks the create-durable-subscription permission on 'orders\.")
    plain = login(secured, "bob")
    plain.subscribe(topic)  # a non-durable subscription needs consume only
    alice.close()
    bob.close()
    plain.close()


def test_xa_heuristic_needs_admin_on_the_whole_broker_and_recover_lists_a_users_own(secured):
    alice = login(secured, "alice")
    # XA-RECOVER lists her own branches (test_tenants.py: only those), so a transaction manager
    # can recover under the login it works with.
    assert alice.xa("XA-RECOVER", flags="TMSTARTRSCAN|TMENDRSCAN", count=10).result == "XA_OK"
    rid = alice.new_receipt()
    alice.conn.send_frame("XA-HEURISTIC", {"receipt": rid, "xid": new_xid(), "outcome": "commit"})
    refused(alice, r"lacks the admin permission on the broker")
    olga = login(secured, "olga")
    reply = olga.xa("XA-RECOVER", flags="TMSTARTRSCAN|TMENDRSCAN", count=10)
    assert reply.result == "XA_OK"
    # XA work itself needs no admin: alice starts, ends and prepares a branch of her own.
    worker = login(secured, "alice")
    x = new_xid()
    assert worker.xa("XA-START", x).result == "XA_OK"
    assert worker.xa("XA-END", x, flags="TMSUCCESS").result == "XA_OK"
    assert worker.xa("XA-PREPARE", x).result == "XA_RDONLY"  # the branch did nothing
    for c in (alice, olga, worker):
        c.close()


def test_failed_logins_from_one_address_are_slowed_down(secured):
    # The first failure costs the address 100 ms, then 200, 400 ...: the fourth attempt waits
    # at least 400 ms before its passcode is even checked.
    for _ in range(3):
        refused(login(secured, "alice", "guess", wait=False), r"login refused")
    started = time.monotonic()
    c = login(secured, "alice", "guess", wait=False)
    refused(c, r"login refused")
    assert time.monotonic() - started >= 0.4
    # The right passcode still gets in (after its turn); it clears the count of (this address,
    # alice), not alice's own (test_security_logins.py).
    ok = login(secured, "alice")
    assert ok.listener.connected is not None
    ok.close()


def test_failed_logins_are_counted_in_metrics(broker_factory, hashes):
    b = broker_factory(config=SETTINGS + '\n[http]\nlisten = "127.0.0.1:0"\n', start=False)
    (b.workdir / "users.toml").write_text(users_toml(hashes))
    b.start()
    m = re.search(r"http listening on 127\.0\.0\.1:(\d+)", b.log)
    assert m, b.log
    for _ in range(2):
        refused(login(b, "bob", "nope", wait=False), r"login refused")
    port = int(m.group(1))
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert re.search(rb"\nescrow_failed_logins_total 2(\.0)?\n", data), data[-2000:]


def test_anonymous_access_is_refused_on_a_listener_that_is_not_loopback(tmp_path):
    # escrowd refuses before it binds anything: no socket is opened on 0.0.0.0.
    r = subprocess.run([ESCROWD, "--listen", "0.0.0.0:0", "--data-dir", str(tmp_path / "d")], capture_output=True,
                       text=True, timeout=60 * SLOW)
    assert r.returncode == 2
    assert "not on a loopback address" in r.stderr and "users-file" in r.stderr
    assert not (tmp_path / "d").exists(), "the store must not even be opened"


def test_without_a_users_file_loopback_is_anonymous_with_every_permission(broker, stomp_client):
    c = stomp_client(broker)
    c.send("/queue/" + unique(), "x")
    assert c.xa("XA-RECOVER", flags="TMSTARTRSCAN|TMENDRSCAN", count=10).result == "XA_OK"


@pytest.mark.parametrize("users,expected", [
    ('[[user]]\nname = "a"\npassword = "plain-text"\nroles = ["app"]\n', r"users\.toml:\d+: user\[1\]\.password: a password hash has the form"),
    ('[[user]]\nname = "a"\npassword = "pbkdf2-sha256:1000:00112233445566778899aabbccddeeff:' + "00" * 32 + '"\n',
     r"iteration count 1000 is below 10000"),
    ('[[user]]\nname = "a"\nroles = ["app"]\n', r"neither a password nor a certificate-subject"),
    ('[[user]]\nname = "a"\npassword = "HASH"\ncolour = "red"\n', r"user\[1\]\.colour: unknown key"),
    ('[[user]]\nname = "a"\npassword = "HASH"\n[[user]]\nname = "a"\npassword = "HASH"\n', r"already defined at line 1"),
])
def test_a_bad_users_file_stops_escrowd_naming_the_line(tmp_path, hashes, users, expected):
    (tmp_path / "users.toml").write_text(users.replace("HASH", hashes["alice"]))
    (tmp_path / "escrowd.toml").write_text('[security]\nusers-file = "users.toml"\n')
    r = subprocess.run([ESCROWD, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), "--config",
                        "escrowd.toml"], cwd=tmp_path, capture_output=True, text=True, timeout=60 * SLOW)
    assert r.returncode == 2, r.stderr
    assert re.search(expected, r.stderr), r.stderr


@pytest.mark.parametrize("settings,expected", [
    ('[[security-settings]]\nmatch = "a.#"\nsend = "app"\n', r"security-settings\[1\]\.send must be an array"),
    ('[[security-settings]]\nmatch = "a.#"\npublish = ["app"]\n', r"security-settings\[1\]\.publish: unknown key"),
    ('[[security-settings]]\nsend = ["app"]\n', r"has no match key"),
    ('[[security-settings]]\nmatch = "a..b"\nsend = ["app"]\n', r"security-settings\[1\]\.match 'a\.\.b'"),
])
def test_bad_security_settings_stop_escrowd(tmp_path, settings, expected):
    (tmp_path / "escrowd.toml").write_text(settings)
    r = subprocess.run([ESCROWD, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), "--config",
                        "escrowd.toml"], cwd=tmp_path, capture_output=True, text=True, timeout=60 * SLOW)
    assert r.returncode == 2, r.stderr
    assert re.search(expected, r.stderr), r.stderr


def test_sighup_reloads_users_and_permissions(broker_factory, hashes):
    b = broker_factory(config=SETTINGS, start=False)
    (b.workdir / "users.toml").write_text(users_toml(hashes, ["alice", "olga"]))
    b.start()
    refused(login(b, "bob", wait=False), r"login refused")
    # bob is added, and reader is given send on orders.#.
    (b.workdir / "users.toml").write_text(users_toml(hashes))
    b.config_path.write_text(SETTINGS.replace('send = ["app"]', 'send = ["app", "reader"]'))
    b.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + TIMEOUT
    while "security-settings (3 tables)" not in b.log and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "users file users.toml: 3 users" in b.log
    # The back-off the failed login earned still applies; the login then succeeds.
    bob = login(b, "bob")
    assert bob.listener.connected is not None, bob.listener.errors
    bob.send("/queue/orders." + unique(), "bob may send now")
    bob.close()


def tls_stomp(port, certs, cert, key, *steps):
    """Over TLS with a client certificate, sends each frame of `steps` (bytes) after the answer to
    the one before has come (a frame up to its NUL); returns the answers."""
    from test_tls import python_tls
    answers = []
    with python_tls(port, certs, cert=cert, key=key) as sock:
        data = b""
        for step in steps:
            sock.sendall(step)
            while b"\0" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    return answers
                data += chunk
            answer, data = data.split(b"\0", 1)
            answers.append(answer)
    return answers


@pytest.fixture(scope="module")
def tls_certs(tmp_path_factory):
    import test_tls
    return test_tls.certs.__wrapped__(tmp_path_factory)


def test_mutual_tls_subject_maps_to_a_user(broker_factory, hashes, tls_certs):
    from test_tls import listener, tls_config, tls_ports
    certs = tls_certs
    users = users_toml(hashes) + '\n[[user]]\nname = "svc"\ncertificate-subject = "CN=test-client,O=Escrow Tests"\n' \
        'roles = ["app"]\n'
    b = broker_factory(config=tls_config(listener(certs.server, certs.server_key, **{"client-ca": certs.ca}),
                                         extra=SETTINGS), start=False)
    (b.workdir / "users.toml").write_text(users)
    b.start()
    [port] = tls_ports(b)
    allowed, denied = "orders." + unique(), "payments." + unique()
    answers = tls_stomp(port, certs, certs.client, certs.client_key,
                        b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\0",
                        f"SEND\ndestination:/queue/{allowed}\nreceipt:r1\n\nok\0".encode(),
                        f"SEND\ndestination:/queue/{denied}\nreceipt:r2\n\nno\0".encode())
    assert answers[0].startswith(b"CONNECTED\n"), answers
    assert answers[1].startswith(b"RECEIPT\nreceipt-id:r1"), answers
    assert f"permission denied: user 'svc' lacks the send permission on '{denied}'".encode() in answers[2], answers
    # The certificate is svc's: a login naming someone else is refused, even with their passcode.
    [answer] = tls_stomp(port, certs, certs.client, certs.client_key,
                         b"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:alice\npasscode:alice-secret\n\n\0")
    assert answer.startswith(b"ERROR\n") and b"login refused" in answer, answer
    b.wait_log("the certificate belongs to user 'svc', the login names 'alice'")


def admin_frame(client, command, **headers):
    rid = client.new_receipt()
    client.conn.send_frame("ADMIN", dict({"receipt": rid, "admin-command": command}, **headers))
    return rid


def test_admin_commands_need_admin_and_browse_needs_browse(secured):
    queue = "orders." + unique()
    alice = login(secured, "alice")
    alice.send("/queue/" + queue, "look at me")
    admin_frame(alice, "status")
    refused(alice, r"user 'alice' lacks the admin permission on the broker")
    olga = login(secured, "olga")
    rid = admin_frame(olga, "status")
    olga.wait_receipt(rid)
    assert olga.listener.receipt_frames[rid].headers["admin-status"] == "ok"
    # bob (reader) may browse orders.# but not payments, and not run anything else.
    bob = login(secured, "bob")
    rid = admin_frame(bob, "browse", name=queue)
    bob.wait_receipt(rid)
    assert b"look at me" in bob.listener.receipt_frames[rid].body.encode() \
        if isinstance(bob.listener.receipt_frames[rid].body, str) else b"look at me" in bob.listener.receipt_frames[rid].body
    admin_frame(bob, "browse", name="payments")
    refused(bob, r"user 'bob' lacks the browse permission on 'payments'")
    for c in (alice, olga, bob):
        c.close()


def escrow_cli(broker, *args, user=None, password=None, input=None):
    cmd = [tool("cli/escrow", "ESCROW_CLI"), "--url", f"stomp://127.0.0.1:{broker.port}"] if broker else \
        [tool("cli/escrow", "ESCROW_CLI")]
    if user:
        cmd += ["--user", user]
    env = dict(os.environ, ESCROW_PASSWORD=password) if password else None
    return subprocess.run(cmd + list(args), capture_output=True, text=True, input=input, env=env, timeout=60 * SLOW)


def test_escrow_command_logs_in_and_is_refused_without_admin(secured):
    ok = escrow_cli(secured, "status", user="olga", password=PASSWORDS["olga"])
    assert ok.returncode == 0, ok.stderr
    # escrow connections names the authenticated user (its own connection is one of them).
    conns = escrow_cli(secured, "--json", "connections", user="olga", password=PASSWORDS["olga"])
    assert conns.returncode == 0, conns.stderr
    assert any(c["user"] == "olga" and c["peer"].startswith("127.0.0.1:")
               for c in json.loads(conns.stdout)["connections"]), conns.stdout
    denied = escrow_cli(secured, "status", user="alice", password=PASSWORDS["alice"])
    assert denied.returncode != 0
    assert "lacks the admin permission" in denied.stderr, denied.stderr
    wrong = escrow_cli(secured, "status", user="olga", password="nope")
    assert wrong.returncode == 3 and "login refused" in wrong.stderr, wrong.stderr


def test_escrow_passwd_makes_an_entry_that_logs_in(broker_factory, hashes):
    r = escrow_cli(None, "passwd", "carol", "--role", "app", "--role", "ops", input="carol-secret\n")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r'\[\[user\]\]\nname = "carol"\npassword = "pbkdf2-sha256:600000:[0-9a-f]{32}:[0-9a-f]{64}"\n'
                        r'roles = \["app", "ops"\]\n', r.stdout), r.stdout
    b = broker_factory(config=SETTINGS, start=False)
    (b.workdir / "users.toml").write_text(r.stdout)
    b.start()
    carol = Client(b, headers={"login": "carol", "passcode": "carol-secret"})
    carol.send("/queue/orders." + unique(), "from carol")
    carol.close()
    empty = escrow_cli(None, "passwd", "dave", input="")
    assert empty.returncode == 2 and "no password" in empty.stderr


def test_check_config_checks_the_users_file_too(tmp_path):
    (tmp_path / "escrowd.toml").write_text('[security]\nusers-file = "users.toml"\n')
    (tmp_path / "users.toml").write_text('[[user]]\nname = "x"\npassword = "plain"\n')
    r = subprocess.run([tool("cli/escrow", "ESCROW_CLI"), "check-config", "escrowd.toml"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "users.toml:3: user[1].password" in r.stderr, r.stderr
