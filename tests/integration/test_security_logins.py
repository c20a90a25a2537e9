"""Logins cannot be starved (docs/security.md, "Failed logins"): a login that succeeded before is
answered without waiting behind other clients' checks; password checks from one address run one at
a time, with a bound on those waiting (per address and in all) beyond which a login is refused at
once; failures are counted per (address, user) and per user, and bob's success does not clear the
count on alice; the time a CONNECT waits for its check does not count against connect-timeout-ms; a
user without a password is checked like any other; a users file others may read is warned about.

Waiting logins are made to wait by a user whose hash has many iterations ('slow'): its check takes
seconds where every other step of these tests takes milliseconds. Each test synchronises on events
(log lines, answers), never on sleeps.
"""

import secrets
import select
import signal
import socket

import pytest

from conftest import TIMEOUT, Client, RawStomp
from test_security import PASSWORDS, SETTINGS, hashes, login, refused, users_toml  # noqa: F401 (fixture)

REFUSED = "login refused: unknown user or wrong passcode"
# No password matches it (its key is zeros); checking one costs about 7 times a default hash.
SLOW_USER = ('[[user]]\nname = "slow"\npassword = "pbkdf2-sha256:4000000:' + secrets.token_hex(16) + ":" + "00" * 32 +
             '"\nroles = ["app"]\n')


class Stomp(RawStomp):
    """A raw STOMP connection to 127.0.0.1 from a chosen loopback source address."""

    def __init__(self, port, source="127.0.0.1"):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT, source_address=(source, 0))
        self.buf, self.closed, self.eols, self.raw = b"", False, [], b""

    def connect_as(self, user, passcode):
        self.send(f"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:{user}\npasscode:{passcode}\n\n\0")
        return self

    def answered(self):
        """Whether anything (an answer, or the close) has arrived yet; does not wait."""
        return bool(self.buf) or self.closed or bool(select.select([self.sock], [], [], 0)[0])

    def answer(self):
        return self.read_frame()


@pytest.fixture
def conns():
    made = []

    def make(broker, source="127.0.0.1"):
        c = Stomp(broker.port, source)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def secured_broker(broker_factory, hashes, extra_security="", extra="", debug=False, users="", backoff_max_ms=2000):
    config = SETTINGS.replace("[security]\n", "[security]\n" + extra_security) + extra
    config = config.replace("login-backoff-max-ms = 2000\n", f"login-backoff-max-ms = {backoff_max_ms}\n")
    b = broker_factory(config=config, start=False, args=["--log-level", "debug"] if debug else [])
    path = b.workdir / "users.toml"
    path.write_text(users_toml(hashes) + users)
    path.chmod(0o600)
    b.start()
    return b


def refused_frame(frame):
    assert frame.command == "ERROR", frame
    assert frame.headers["message"] == REFUSED, frame
    return frame


def test_a_login_that_succeeded_before_does_not_wait_behind_bad_logins(broker_factory, hashes, conns):
    b = secured_broker(broker_factory, hashes)
    first = login(b, "alice")  # checked once: remembered from now on
    first.close()
    bad = [conns(b).connect_as(f"mallory-{i}", "guess") for i in range(8)]  # 1 checked, 7 waiting
    b.wait_log("failed login from 127.0.0.1: unknown user 'mallory-")  # the checks have begun
    again = login(b, "alice")
    assert again.listener.connected is not None
    # CONNECTED came while bad logins queued before it still waited for their checks.
    assert not all(c.answered() for c in bad), "the remembered login waited behind the bad ones"
    again.close()
    for c in bad:
        refused_frame(c.answer())


def test_bobs_success_does_not_clear_the_failures_against_alice(broker_factory, hashes):
    b = secured_broker(broker_factory, hashes, debug=True)
    for _ in range(3):
        refused(login(b, "alice", "guess", wait=False), r"login refused")
    # bob succeeds from the same address twice: through a real check, then remembered.
    for _ in range(2):
        bob = login(b, "bob")
        assert bob.listener.connected is not None
        bob.close()
    b.wait_log("login check of 'bob' from 127.0.0.1: 0 earlier failures")
    refused(login(b, "alice", "guess", wait=False), r"login refused")
    # The fourth guess at alice still counts the three before it, from this address and in all,
    # and so waits out their back-off.
    b.wait_log("login check of 'alice' from 127.0.0.1: 3 earlier failures of this user from this address, 3 in all;")


def test_failures_are_counted_per_user_across_addresses_and_cleared_per_pair(broker_factory, hashes, conns):
    b = secured_broker(broker_factory, hashes, debug=True)
    for _ in range(2):
        refused(login(b, "alice", "guess", wait=False), r"login refused")
    # From another address: nothing from there yet, but alice's two failures count.
    refused_frame(conns(b, "127.0.0.2").connect_as("alice", "guess").answer())
    b.wait_log("login check of 'alice' from 127.0.0.2: 0 earlier failures of this user from this address, 2 in all;")
    # alice's own success from 127.0.0.2 clears that pair only: 127.0.0.1 still counts its two.
    assert conns(b, "127.0.0.2").connect_as("alice", PASSWORDS["alice"]).answer().command == "CONNECTED"
    refused(login(b, "alice", "guess", wait=False), r"login refused")
    b.wait_log("login check of 'alice' from 127.0.0.1: 2 earlier failures of this user from this address, 3 in all;")
    # 127.0.0.2 logged in as alice: its checks of alice skip the per-user spacing (issue 23, N2).
    refused_frame(conns(b, "127.0.0.2").connect_as("alice", "guess").answer())
    b.wait_log("login check of 'alice' from 127.0.0.2: 0 earlier failures of this user from this address, 4 in all "
               "(this address logged in as this user before: no per-user spacing); waits 0 ms")


def test_a_login_waiting_for_its_check_is_not_closed_by_the_connect_timeout(broker_factory, hashes, conns):
    b = secured_broker(broker_factory, hashes, extra="\n[limits]\nconnect-timeout-ms = 300\n", users=SLOW_USER,
                       debug=True)
    slow = conns(b).connect_as("slow", "guess")  # its check takes seconds
    b.wait_log("login check of 'slow' from 127.0.0.1")
    waiting = conns(b).connect_as("alice", PASSWORDS["alice"])  # waits its turn behind it
    b.wait_log("login of 'alice' from 127.0.0.1 waits its turn behind 1")
    silent = conns(b)  # sends nothing: the timeout still closes it
    assert silent.answer().headers["message"] == "no CONNECT frame within 300 ms"
    assert not slow.answered() and not waiting.answered()
    refused_frame(slow.answer())
    assert waiting.answer().command == "CONNECTED"


@pytest.mark.parametrize("per_address,pending,key", [(2, 100, "max-waiting-logins-per-address"),
                                                     (100, 3, "max-pending-logins")])
def test_logins_beyond_the_waiting_bound_are_refused_at_once(broker_factory, hashes, conns, per_address, pending,
                                                             key):
    b = secured_broker(broker_factory, hashes, users=SLOW_USER, debug=True,
                       extra_security=f"max-waiting-logins-per-address = {per_address}\n"
                                      f"max-pending-logins = {pending}\n")
    slow = conns(b).connect_as("slow", "guess")
    b.wait_log("login check of 'slow' from 127.0.0.1")
    # Two wait behind it: the last of them is the last allowed (2 waiting; 3 pending in all).
    waiting = []
    for i in (1, 2):
        waiting.append(conns(b).connect_as(f"ghost-{i}", "guess"))
        b.wait_log(f"login of 'ghost-{i}' from 127.0.0.1 waits its turn")
    over = conns(b).connect_as("ghost-3", "guess").answer()
    assert over.command == "ERROR", over
    assert over.headers["message"] == "login refused unchecked: too many logins wait for their check; try again later"
    assert not slow.answered(), "refused at once: before the check ahead of it has finished"
    b.wait_log("failed login from 127.0.0.1: refused unchecked: ")
    reason = b.log.split("refused unchecked: ")[1].split("\n")[0]
    assert f"(security.{key} is {min(per_address, pending)})" in reason, reason
    if key == "max-waiting-logins-per-address":
        # Another address has a line of its own: checked (and admitted) while 127.0.0.1's queue is full.
        other = conns(b, "127.0.0.2").connect_as("alice", PASSWORDS["alice"])
        assert other.answer().command == "CONNECTED"
        assert not slow.answered()
    # The ones admitted are checked in their turn (not refused unchecked).
    refused_frame(slow.answer())
    for i, c in enumerate(waiting, 1):
        refused_frame(c.answer())
        b.wait_log(f"failed login from 127.0.0.1: unknown user 'ghost-{i}'")
    assert "unknown user 'ghost-3'" not in b.log


def test_a_certificate_only_user_is_refused_a_password_login_like_anyone(broker_factory, hashes):
    svc = '[[user]]\nname = "svc"\ncertificate-subject = "CN=svc,O=Escrow Tests"\nroles = ["app"]\n'
    b = secured_broker(broker_factory, hashes, users=svc)
    for user in ("svc", "nobody"):
        assert refused(login(b, user, "guess", wait=False), r"login refused") == REFUSED
    b.wait_log("failed login from 127.0.0.1: user 'svc' logs in only with a client certificate")


def test_a_users_file_others_may_read_is_warned_about(broker_factory, hashes):
    b = broker_factory(config=SETTINGS, start=False)
    path = b.workdir / "users.toml"
    path.write_text(users_toml(hashes))
    path.chmod(0o600)
    b.start()
    assert "users file" in b.log and "by others than its owner" not in b.log
    path.chmod(0o640)
    b.proc.send_signal(signal.SIGHUP)
    b.wait_log("SIGHUP: the users file users.toml may be read by others than its owner (mode 0640)")
    b.terminate()
    path.chmod(0o606)
    b.start()
    b.wait_log("the users file users.toml may be read and written by others than its owner (mode 0606)")


def test_a_stop_does_not_check_the_logins_still_waiting(broker_factory, hashes, conns):
    b = secured_broker(broker_factory, hashes, users=SLOW_USER, debug=True)
    slow = conns(b).connect_as("slow", "guess")
    b.wait_log("login check of 'slow' from 127.0.0.1")
    waiting = [conns(b).connect_as(f"ghost-{i}", "guess") for i in range(3)]
    for i in range(3):
        b.wait_log(f"login of 'ghost-{i}' from 127.0.0.1 waits its turn")
    assert b.terminate() == 0
    for c in [slow] + waiting:
        c.read_until_closed()
    assert "unknown user 'ghost-" not in b.log, "a login still waiting was checked during the stop"
