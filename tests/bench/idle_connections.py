#!/usr/bin/python3
"""What an idle connection costs escrowd: starts it on a fresh data directory, opens COUNT STOMP
connections (CONNECT, then nothing but heart-beats if asked), and prints escrowd's resident set
before and after, and per connection. Several loopback source addresses (127.0.0.2, ...) are used
so that more connections than one address has ports can be opened. Optionally runs a command
(e.g. a loadgen run) while they are open and prints its output. A benchmark, not a test
(docs/performance.md, "Idle connections"); run as root on this machine to raise the limit of open
files.

  idle_connections.py --escrowd build/broker/escrowd --count 10000 [--heartbeat-ms 10000]
                      [--while 'build/tests/loadgen --port {port} ...']
"""
import argparse
import os
import resource
import selectors
import shlex
import socket
import subprocess
import sys
import tempfile
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def raise_open_files(wanted):
    """Raises this process's limit of open files to `wanted`, or as far as the hard limit allows
    (a process without CAP_SYS_RESOURCE cannot go beyond it: then say so)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(wanted, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
        if wanted > hard:
            print(f"idle_connections: the hard limit of open files is {hard}; fewer than {wanted} will open",
                  file=sys.stderr)


def start_broker(binary, workdir, count):
    config = os.path.join(workdir, "escrowd.toml")
    with open(config, "w") as f:
        f.write(f"[limits]\nmax-connections = {count + 100}\nmax-connections-per-user = {count + 100}\n")
    log = open(os.path.join(workdir, "log"), "w+")
    def raise_limit():
        raise_open_files(count + 1000)

    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--data-dir", os.path.join(workdir, "data"),
                             "--config", config], stdout=log, stderr=subprocess.STDOUT, preexec_fn=raise_limit)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        log.seek(0)
        text = log.read()
        if "escrowd ready" in text:
            port = int(text.split("listening on 127.0.0.1:")[1].split()[0])
            return proc, port
        time.sleep(0.05)
    raise SystemExit(f"escrowd did not start:\n{text}")


# A batch is at most limits.max-unauthenticated-per-address (64 by default): its connections come
# from one address and have not logged in until their CONNECTED.
def open_connections(port, count, heartbeat_ms, batch=64):
    frame = (f"CONNECT\naccept-version:1.2\nhost:localhost\nheart-beat:{heartbeat_ms},{heartbeat_ms}\n\n\0").encode()
    sockets = []
    per_address = 25000
    while len(sockets) < count:
        n = min(batch, count - len(sockets))
        fresh = []
        for _ in range(n):
            s = socket.socket()
            s.bind((f"127.0.0.{2 + len(sockets) // per_address}", 0))
            s.connect(("127.0.0.1", port))
            s.sendall(frame)
            fresh.append(s)
            sockets.append(s)
        for s in fresh:  # each answers CONNECTED before the next batch
            s.settimeout(20)
            got = b""
            while b"\0" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    raise SystemExit(f"connection {len(sockets)} closed: {got!r}")
                got += chunk
            if not got.startswith(b"CONNECTED"):
                raise SystemExit(f"no CONNECTED: {got[:200]!r}")
            s.setblocking(False)
    return sockets


def answer_heartbeats(sockets, seconds):
    """Reads whatever the broker sends (heart-beats) for `seconds` and sends a newline back on each
    socket once in a while, so that heart-beating connections stay alive."""
    sel = selectors.DefaultSelector()
    for s in sockets:
        sel.register(s, selectors.EVENT_READ)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            try:
                if key.fileobj.recv(4096):
                    key.fileobj.send(b"\n")
            except (BlockingIOError, ConnectionError):
                pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--escrowd", required=True)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--heartbeat-ms", type=int, default=0)
    ap.add_argument("--while", dest="during", default="")
    args = ap.parse_args()
    raise_open_files(args.count + 1000)
    with tempfile.TemporaryDirectory(prefix="escrow-idle-") as workdir:
        proc, port = start_broker(os.path.abspath(args.escrowd), workdir, args.count)
        try:
            time.sleep(0.5)
            before = rss_kib(proc.pid)
            started = time.monotonic()
            sockets = open_connections(port, args.count, args.heartbeat_ms)
            opened_s = time.monotonic() - started
            time.sleep(1)
            after = rss_kib(proc.pid)
            output = ""
            if args.during:
                cmd = shlex.split(args.during.format(port=port))
                runner = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if args.heartbeat_ms:
                    while runner.poll() is None:
                        answer_heartbeats(sockets, 1)
                output = runner.communicate()[0]
            alive = rss_kib(proc.pid)
            print(f"RESULT connections={len(sockets)} rss_before_kib={before} rss_after_kib={after} "
                  f"per_connection_kib={(after - before) / len(sockets):.2f} opened_s={opened_s:.1f} "
                  f"rss_at_end_kib={alive}")
            if output:
                print(output.strip())
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    sys.exit(main())
