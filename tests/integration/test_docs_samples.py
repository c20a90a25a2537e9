"""The code samples of docs/*.md, run against a real escrowd, so that they cannot drift from it.

How a sample in docs/*.md is treated (the convention; write new samples to it):

- The fenced block's language tag says what it is.
    ```python    a program: run with this interpreter (/usr/bin/python3, which sees python3-stomp)
    ```sh        commands: run with `bash -e -o pipefail` in an empty temporary directory
    ```console   an operator's session: each line starting with `$ ` is a command, the lines after
                 it its output; the commands are run, in document order, against one escrowd per
                 file, and their output is compared with the documented one in shape (below)
  Every other tag is never run: toml, json and yaml (configuration snippets, answers), cpp (C++
  fragments without a main), and no tag at all (frames, log lines, synopses, other output).
- `<!-- docs-test: skip: REASON -->` on the line right before the opening fence (same indentation)
  skips a python, sh or console block; the reason is required and is shown in pytest's skip list
  (-rs). A marker anywhere else, or without a reason, fails test_markers.
- The port: in every block that runs, each `61613` becomes the port of the test's escrowd (the
  broker fixture starts it on 127.0.0.1:0), and `/var/backups/escrow` a directory of the test (the
  broker's [storage] backup-root). The `escrow` command finds the broker through
  ~/.config/escrow/escrow.toml, which the test writes (HOME is a temporary directory), so console
  commands run as documented. PATH starts with the directories of the escrowd and escrow under
  test, so `escrowd` and `escrow` are those.
- A python or sh sample checks what it gets and exits non-zero when it is not what it expects (a
  sample that prints a message asserts it got one): the test checks that it exits 0 within the
  timeout, and shows its output otherwise.
- A console command must be an `escrow` command (or the block skipped). Before the first one, the
  test gives the broker what the operations.md session shows (see world()): the queue orders with
  a client-individual consumer worker-1, a durable subscription audit-sub of client-id billing,
  and a prepared and an active XA branch with the documented xids. A command passes when: it exits
  non-zero if its documented output has a line starting `escrow: ` (which must then appear as it
  is in its standard error) and 0 otherwise; every table header of the documented output (a line
  of upper-case column names) is a line of its output (the same names in the same order); and the
  label of every documented `label   value` line outside a table starts a line of its output. The
  values themselves (ages, counts, sizes) are examples and are not compared.
"""

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ESCROWD, ROOT, TIMEOUT, Client, tool

DOCS = ROOT / "docs"
RUN_TAGS = ("python", "sh", "console")
DOC_PORT = "61613"
DOC_BACKUP_ROOT = "/var/backups/escrow"

_FENCE = re.compile(r"^( *)```(\S*)\s*$")
_MARKER = re.compile(r"<!--\s*docs-test\b")
_SKIP = re.compile(r"^ *<!-- docs-test: skip: (\S.*?) -->$")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    tag: str
    code: str
    skip: str | None  # the reason of a skip marker right before it

    @property
    def name(self):
        return f"{self.path.name}:{self.line}"


def parse(path):
    """Every fenced block of a markdown file, and the problems with its skip markers."""
    lines = path.read_text().split("\n")
    blocks, problems = [], []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if _MARKER.search(lines[i]):
            nxt = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
            indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
            if not _SKIP.match(lines[i]):
                problems.append(f"{path.name}:{i + 1}: not `<!-- docs-test: skip: REASON -->`: {lines[i]!r}")
            elif not nxt or nxt.group(2) not in RUN_TAGS or nxt.group(1) != indent:
                problems.append(f"{path.name}:{i + 1}: a skip marker must come right before the opening fence "
                                f"of a {'/'.join(RUN_TAGS)} block, at its indentation")
        if not m:
            i += 1
            continue
        indent, tag = m.group(1), m.group(2)
        start = i
        body = []
        i += 1
        while i < len(lines) and lines[i].rstrip() != indent + "```":
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        assert i < len(lines), f"{path.name}:{start + 1}: the block is not closed"
        i += 1
        skip = None
        if start > 0 and (s := _SKIP.match(lines[start - 1])):
            skip = s.group(1)
        blocks.append(Block(path, start + 1, tag, "\n".join(body) + "\n", skip))
    return blocks, problems


def all_blocks():
    out = []
    for path in sorted(DOCS.glob("*.md")):
        out.extend(parse(path)[0])
    return out


BLOCKS = all_blocks()
SAMPLES = [b for b in BLOCKS if b.tag in ("python", "sh")]
CONSOLE_FILES = sorted({b.path for b in BLOCKS if b.tag == "console"})


def skip_list():
    return "\n".join(f"  {b.name} ({b.tag}): {b.skip}" for b in BLOCKS if b.skip)


def test_markers():
    """Every skip marker is well formed and belongs to a block that would run; and something runs."""
    problems = []
    for path in sorted(DOCS.glob("*.md")):
        problems += parse(path)[1]
    assert not problems, "\n".join(problems)
    runnable = [b.name for b in BLOCKS if b.tag in RUN_TAGS and not b.skip]
    assert any(b.tag == "python" and not b.skip for b in BLOCKS), "no python sample runs: is the parser broken?"
    assert runnable, "no sample runs"
    print(f"{len(runnable)} blocks run: {', '.join(runnable)}\nskipped:\n{skip_list()}")


# --------------------------------------------------------------------------------------------
# The environment of a sample
# --------------------------------------------------------------------------------------------

def backup_root(tmp_path):
    root = tmp_path / "backups"
    root.mkdir(exist_ok=True)
    return root


def start_broker(broker_factory, tmp_path):
    """An escrowd whose backup root stands in for /var/backups/escrow."""
    return broker_factory(config=f'[storage]\nbackup-root = "{backup_root(tmp_path)}"\n')


def substitute(text, broker, tmp_path):
    return text.replace(DOC_PORT, str(broker.port)).replace(DOC_BACKUP_ROOT, str(backup_root(tmp_path)))


def sample_env(broker, tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "escrow").mkdir(parents=True, exist_ok=True)
    (home / ".config" / "escrow" / "escrow.toml").write_text(f'url = "stomp://127.0.0.1:{broker.port}"\n')
    escrow = tool("cli/escrow", "ESCROW_CLI")
    assert os.path.exists(escrow), f"{escrow} not found: build it (ninja -C build cli/escrow) or set ESCROW_CLI"
    env = {k: v for k, v in os.environ.items() if k != "ESCROW_PASSWORD"}
    env["HOME"] = str(home)
    env["PATH"] = os.pathsep.join([str(Path(ESCROWD).parent), str(Path(escrow).parent),
                                   env.get("PATH", "/usr/bin:/bin")])
    return env


def run(args, env, cwd, what):
    try:
        return subprocess.run(args, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=4 * TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{what} did not finish within {4 * TIMEOUT:.0f} s; output so far:\n"
                             f"{e.stdout or ''}{e.stderr or ''}") from None


# --------------------------------------------------------------------------------------------
# python and sh samples
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("block", SAMPLES, ids=[b.name for b in SAMPLES])
def test_sample(block, broker_factory, tmp_path):
    if block.skip:
        pytest.skip(f"{block.name}: {block.skip}")
    broker = start_broker(broker_factory, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    code = substitute(block.code, broker, tmp_path)
    if block.tag == "python":
        script = tmp_path / "sample.py"
        script.write_text(code)
        args = [sys.executable, str(script)]
    else:
        script = tmp_path / "sample.sh"
        script.write_text(code)
        args = ["bash", "-e", "-o", "pipefail", str(script)]
    r = run(args, sample_env(broker, tmp_path), work, f"the {block.tag} sample {block.name}")
    assert r.returncode == 0, (f"the {block.tag} sample {block.name} exited with {r.returncode}:\n"
                               f"--- stdout\n{r.stdout}--- stderr\n{r.stderr}--- the sample, as run\n{code}")
    assert broker.running(), f"escrowd died while {block.name} ran:\n{broker.log}"


# --------------------------------------------------------------------------------------------
# console sessions
# --------------------------------------------------------------------------------------------

def world(broker):
    """What the operations.md session shows, so that every command has something to list. Returns
    the connections to keep open while the commands run."""
    kept = []
    worker = Client(broker)
    for i in range(1, 10):
        worker.send("/queue/orders", f"order {i}")
    worker.subscribe("/queue/orders", id="worker-1", ack="client-individual", headers={"prefetch-count": "2"})
    worker.wait_messages(2)
    kept.append(worker)

    billing = Client(broker, headers={"client-id": "billing"})
    billing.subscribe("/topic/billing.events", id="audit", headers={"durable-subscription-name": "audit-sub"})
    billing.close()  # detaches; the durable subscription stays
    producer = Client(broker)
    for i in range(3):
        producer.send("/topic/billing.events", f"event {i}")
    producer.close()

    shop = Client(broker)
    prepared, active = "4242:6f726465722d3432:01", "4242:6f726465722d3433:01"  # gtrids order-42, order-43
    for verb, xid, flags in (("START", prepared, None), ("END", prepared, "TMSUCCESS"),
                             ("PREPARE", prepared, None), ("START", active, None)):
        if verb == "END":
            shop.send("/queue/confirmations", "confirmed 42")
        r = shop.xa(verb, xid, flags)
        assert r.result == "XA_OK", f"XA-{verb} {xid}: {r}"
    kept.append(shop)
    return kept


_HEADER = re.compile(r"[A-Z][A-Z0-9-]*")
_LABEL = re.compile(r"^([a-z][a-z-]*(?: [a-z-]+)*) {2,}\S")


def is_header(line):
    words = line.split()
    return len(words) >= 2 and all(_HEADER.fullmatch(w) for w in words)


def shape_problems(expected, rc, stdout, stderr):
    """What the actual output lacks of the documented one (see the module's docstring)."""
    problems = []
    errors = [line for line in expected if line.startswith("escrow: ")]
    if errors:
        if rc == 0:
            problems.append("exited 0, but the documented output is an error")
        for line in errors:
            if line not in stderr.split("\n"):
                problems.append(f"no line {line!r} in its standard error")
    elif rc != 0:
        problems.append(f"exited with {rc}")
    actual = (stdout + stderr).split("\n")
    headers = {" ".join(a.split()) for a in actual if is_header(a)}
    labels = {m.group(1) for a in actual if (m := _LABEL.match(a))}
    in_table = False
    for line in expected:
        if not line.strip():
            in_table = False
        elif is_header(line):
            in_table = True
            if " ".join(line.split()) not in headers:
                problems.append(f"no table header {' '.join(line.split())!r}")
        elif not in_table and (m := _LABEL.match(line)) and m.group(1) not in labels:
            problems.append(f"no line starting with {m.group(1)!r}")
    return problems


def session(block):
    """The (command, documented output lines) of a console block."""
    steps = []
    for line in block.code.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"{block.name}: output before the first `$ ` command: {line!r}"
            steps[-1][1].append(line)
    assert steps, f"{block.name}: a console block without a `$ ` command"
    return steps


@pytest.mark.parametrize("path", CONSOLE_FILES, ids=[p.name for p in CONSOLE_FILES])
def test_console(path, broker_factory, tmp_path):
    broker = start_broker(broker_factory, tmp_path)
    kept = world(broker)
    env = sample_env(broker, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    failures, ran = [], 0
    try:
        for block in parse(path)[0]:
            if block.tag != "console" or block.skip:
                continue
            for command, expected in session(block):
                assert command.startswith("escrow "), \
                    f"{block.name}: {command!r} is not an escrow command: skip the block (docs-test: skip: REASON)"
                args = shlex.split(substitute(command, broker, tmp_path))
                expected = [substitute(line, broker, tmp_path) for line in expected]
                r = run(args, env, work, f"{block.name}: $ {command}")
                ran += 1
                problems = shape_problems(expected, r.returncode, r.stdout, r.stderr)
                if problems:
                    failures.append(f"{block.name}: $ {command}\n  " + "\n  ".join(problems) +
                                    f"\n--- its output (exit {r.returncode})\n{r.stdout}{r.stderr}--- documented\n" +
                                    "\n".join(expected))
    finally:
        for c in kept:
            c.close()
    assert ran, f"no console command of {path.name} ran"
    assert not failures, "\n\n".join(failures)
    assert broker.running(), f"escrowd died during the session:\n{broker.log}"
