"""The command line and the TOML configuration file: help, errors that name FILE:LINE and exit
with status 2, and settings that take effect."""

import subprocess

import pytest

from conftest import ESCROWD, TIMEOUT, unique


def run_escrowd(args, cwd):
    return subprocess.run([ESCROWD] + args, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=TIMEOUT, text=True)


def test_help_lists_the_options(tmp_path):
    r = run_escrowd(["--help"], tmp_path)
    assert r.returncode == 0, r
    out = r.stdout + r.stderr
    for option in ("--config", "--listen", "--data-dir", "--log-level"):
        assert option in out, f"{option} missing from --help:\n{out}"


@pytest.mark.parametrize("text,line,needle", [
    ("# comment\nlog-level = \"info\"\nbogus-key = 1\n", 3, "bogus-key"),
    ("[limits]\nmax-frame-size = 4096\nmax-frame-sise = 10\n", 3, "max-frame-sise"),
    ("[heartbeat]\nsend-ms = \"fast\"\n", 2, "send-ms"),
    ("[delivery]\nconsumer-window = -1\n", 2, "consumer-window"),
    ("[nosuchsection]\nx = 1\n", 1, "nosuchsection"),
    ("listen = \"127.0.0.1:0\"\n", 1, "listen"),
    ("listen = [\"nocolon\"]\n", 1, "listen"),
    ("\n\n[limits\nmax-frame-size = 1\n", 3, ""),  # TOML syntax error
    ("[heartbeat]\nmax-ms = 0\n", 2, "max-ms"),
    ("[heartbeat]\nmax-ms = 86400001\n", 2, "max-ms"),
    ("[heartbeat]\ngrace-ms = 86400001\n", 2, "grace-ms"),
], ids=["unknown-top-level", "unknown-in-section", "wrong-type", "negative", "unknown-section",
        "listen-not-array", "listen-bad-address", "syntax-error", "heartbeat-max-0", "heartbeat-max-over-a-day",
        "heartbeat-grace-over-a-day"])
def test_bad_config_exits_2_naming_file_and_line(tmp_path, text, line, needle):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    r = run_escrowd(["--config", str(path), "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d")], tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert f"{path}:{line}" in r.stderr, r.stderr
    assert needle in r.stderr, r.stderr
    assert "listening on" not in r.stderr


def test_missing_config_file_is_an_error(tmp_path):
    missing = tmp_path / "missing.toml"
    r = run_escrowd(["--config", str(missing), "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d")], tmp_path)
    assert r.returncode != 0
    assert str(missing) in r.stdout + r.stderr
    assert "listening on" not in r.stderr


@pytest.mark.parametrize("args", [["--listen", "localhost"], ["--listen", "127.0.0.1:99999"],
                                  ["--log-level", "loud"]], ids=["listen-no-port", "listen-bad-port", "log-level"])
def test_bad_command_line_value_exits_2(tmp_path, args):
    r = run_escrowd(args + ["--data-dir", str(tmp_path / "d")] + (["--listen", "127.0.0.1:0"] if args[0] != "--listen" else []),
                    tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert args[1] in r.stderr, r.stderr


def test_unknown_command_line_option_fails(tmp_path):
    r = run_escrowd(["--frobnicate"], tmp_path)
    assert r.returncode != 0
    assert "frobnicate" in r.stdout + r.stderr


def test_listen_and_data_dir_from_config_file(broker_factory, tmp_path, stomp_client):
    data = tmp_path / "from-config"
    config = f'listen = ["127.0.0.1:0"]\ndata-dir = "{data}"\nlog-level = "info"\n'
    b = broker_factory(config=config, listen=False, data_dir=False)  # neither --listen nor --data-dir
    assert b.port
    c = stomp_client(b)
    q = f"/queue/{unique()}"
    c.send(q, "stored")
    assert data.is_dir() and any(data.iterdir()), "the configured data-dir holds no store"


def test_command_line_overrides_config_file(broker_factory, tmp_path):
    from_config = tmp_path / "from-config"
    from_cli = tmp_path / "from-cli"
    b = broker_factory(config=f'data-dir = "{from_config}"\n', data_dir=from_cli)
    assert b.port
    assert from_cli.is_dir() and any(from_cli.iterdir())
    assert not from_config.exists()


def test_consumer_window_from_config(broker_factory, stomp_client):
    b = broker_factory(config="[delivery]\nconsumer-window = 2\n")
    q = f"/queue/{unique()}"
    p = stomp_client(b)
    for i in range(4):
        p.send(q, f"m{i}")
    c = stomp_client(b)
    c.subscribe(q, ack="client-individual")
    c.wait_messages(2)
    c.settle(2)
    c.ack(c.messages[0])
    c.wait_messages(3)
    c.settle(3)
    # An explicit prefetch-count still wins over the configured default.
    c2 = stomp_client(b)
    q2 = f"/queue/{unique()}"
    for i in range(4):
        p.send(q2, f"n{i}")
    c2.subscribe(q2, ack="client-individual", headers={"prefetch-count": "3"})
    c2.wait_messages(3)
    c2.settle(3)


def test_heartbeat_offer_from_config(broker_factory, raw):
    b = broker_factory(config="[heartbeat]\nsend-ms = 2500\nreceive-ms = 3500\n")
    s = raw(b)
    connected = s.connect("accept-version:1.2\nhost:localhost\nheart-beat:1000,1000\n")
    assert connected.headers["heart-beat"] == "2500,3500"


def test_all_documented_keys_are_accepted(broker_factory, stomp_client):
    config = """
listen = ["127.0.0.1:0"]
log-level = "debug"
io-threads = 2

[limits]
max-frame-size = 1048576
max-headers = 100
max-header-length = 4096
max-pending-bytes = 1048576
connect-timeout-ms = 5000

[delivery]
consumer-window = 10
queue-memory-window = 100

[heartbeat]
send-ms = 1000
receive-ms = 1000
grace-ms = 1000
"""
    b = broker_factory(config=config)
    c = stomp_client(b)
    q = f"/queue/{unique()}"
    c.subscribe(q)
    c.send(q, "works")
    c.wait_body("works")
    assert "debug" in b.log  # log-level took effect


def test_a_port_in_use_exits_1_naming_it_and_leaves_the_store_whole(tmp_path, broker_factory):
    # The first start on an empty data directory stores the built-in dead-letter and expiry
    # queues; a listener that then cannot bind must wait for that write before the core goes
    # (exit 1, not a crash at exit), and the next start on a free port opens the store.
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_escrowd(["--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "d")], tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 1, (r.returncode, out)
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in out, out
    b = broker_factory(data_dir=tmp_path / "d")
    assert "store open: 2 queues" in b.log, b.log  # DLQ and ExpiryQueue, stored by the first start
