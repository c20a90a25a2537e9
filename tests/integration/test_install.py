"""`meson install` (docs/operations.md, "Installing" and "Running as a service"): the build
directory is installed into a temporary --destdir, then the tree is checked: escrowd, the library,
headers and pkg-config file, the sample configuration, the systemd unit and its sysusers.d and
tmpfiles.d files. The unit is parsed (ExecStart names the installed binary and the installed
configuration, the user, the directories, stop and reload) and checked with `systemd-analyze
verify` when that is installed (there is no running systemd here). The installed escrowd starts on
the installed sample configuration (data-dir moved on the command line) and serves; the sample,
with every commented key switched on, loads too, and names every key configuration.md documents.

The build directory is ESCROW_BUILD_DIR, or the one ESCROWD's binary is in (build/ by default)."""

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ESCROWD, ROOT, TIMEOUT, Broker, Client, drain, unique

# `meson install` writes its log into the build directory: the tests that run it share one
# pytest-xdist worker (scripts/test), and the installed tree is made once for all of them.
pytestmark = pytest.mark.xdist_group("meson-install")

BUILD_DIR = Path(os.environ.get("ESCROW_BUILD_DIR") or Path(ESCROWD).resolve().parents[1])

# How long escrowd waits for connections to close at a stop (broker/net/graceful_stop.h).
CONNECTION_CLOSE_LIMIT_S = 10


class Installed:
    """A destdir holding one `meson install` of BUILD_DIR."""

    def __init__(self, destdir, options, files):
        self.destdir = destdir
        self.options = options  # meson option name -> value
        self.files = files  # every installed path (absolute, without the destdir)

    def path(self, installed_path):
        """Where an installed absolute path is inside the destdir."""
        return self.destdir / str(installed_path).lstrip("/")

    def dir(self, option):
        """prefix/OPTION (an absolute option value stays as it is)."""
        return Path(self.options["prefix"]) / self.options[option]


def meson_install(destdir):
    r = subprocess.run(["meson", "install", "-C", str(BUILD_DIR), "--no-rebuild", "--quiet", "--destdir",
                        str(destdir)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"meson install failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    assert (BUILD_DIR / "build.ninja").exists(), f"{BUILD_DIR} is not a configured meson build directory"
    destdir = tmp_path_factory.mktemp("destdir")
    meson_install(destdir)
    options = {o["name"]: o["value"] for o in json.loads(subprocess.run(
        ["meson", "introspect", str(BUILD_DIR), "--buildoptions"], capture_output=True, text=True,
        check=True).stdout)}
    files = list(json.loads(subprocess.run(["meson", "introspect", str(BUILD_DIR), "--installed"],
                                           capture_output=True, text=True, check=True).stdout).values())
    return Installed(destdir, options, files)


def parse_unit(text):
    """{section: {key: [values]}} of a systemd unit file (keys may repeat; no line continuations)."""
    sections, current = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def unit_text(installed):
    unit = installed.path(Path(installed.options["prefix"]) / "lib/systemd/system/escrowd.service")
    assert unit.exists(), f"no escrowd.service in {unit.parent}"
    return unit.read_text()


def test_every_installed_file_is_there(installed):
    bindir, sysconfdir = installed.dir("bindir"), installed.dir("sysconfdir")
    prefix = Path(installed.options["prefix"])
    expected = [
        bindir / "escrowd",
        bindir / "escrow",
        sysconfdir / "escrow/escrowd.toml",
        sysconfdir / "escrow/escrowd.toml.sample",
        prefix / "lib/systemd/system/escrowd.service",
        prefix / "lib/sysusers.d/escrow.conf",
        prefix / "lib/tmpfiles.d/escrow.conf",
        installed.dir("includedir") / "escrow/client.h",
        installed.dir("includedir") / "escrow/xa.h",
        installed.dir("libdir") / "pkgconfig/escrow.pc",
        installed.dir("datadir") / "doc/escrow/operations.md",
    ]
    for path in expected:
        assert installed.path(path).exists(), f"{path} was not installed (destdir {installed.destdir})"
    assert os.access(installed.path(bindir / "escrowd"), os.X_OK)
    libs = list(installed.path(installed.dir("libdir")).glob("libescrow.so*"))
    assert libs, "libescrow.so was not installed"
    for path in installed.files:  # everything meson says it installs
        assert installed.path(path).exists() or installed.path(path).is_symlink(), f"{path} is missing"


def test_installed_configuration_is_the_sample(installed):
    sysconfdir = installed.dir("sysconfdir")
    config = installed.path(sysconfdir / "escrow/escrowd.toml").read_text()
    assert config == (ROOT / "config/escrowd.toml.sample").read_text()
    assert installed.path(sysconfdir / "escrow/escrowd.toml.sample").read_text() == config


def test_reinstall_keeps_an_edited_configuration(installed, tmp_path):
    destdir = tmp_path / "destdir"
    shutil.copytree(installed.destdir, destdir, symlinks=True)
    again = Installed(destdir, installed.options, installed.files)
    config = again.path(installed.dir("sysconfdir") / "escrow/escrowd.toml")
    config.write_text('data-dir = "/srv/escrow"\n')
    sample = again.path(installed.dir("sysconfdir") / "escrow/escrowd.toml.sample")
    sample.write_text("stale\n")
    meson_install(destdir)
    assert config.read_text() == 'data-dir = "/srv/escrow"\n'
    assert sample.read_text() == (ROOT / "config/escrowd.toml.sample").read_text()


def test_unit_runs_the_installed_binary_on_the_installed_configuration(installed):
    unit = parse_unit(unit_text(installed))
    service = unit["Service"]
    (exec_start,) = service["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0] == str(installed.dir("bindir") / "escrowd"), argv
    assert os.access(installed.path(argv[0]), os.X_OK)
    config = argv[argv.index("--config") + 1]
    assert config == str(installed.dir("sysconfdir") / "escrow/escrowd.toml")
    assert installed.path(config).is_file()
    # The data directory: the sample configuration's data-dir, writable under ProtectSystem=strict,
    # created by tmpfiles.d for the unit's user, who comes from sysusers.d.
    data_dir = re.search(r'^data-dir = "([^"]+)"', installed.path(config).read_text(), re.M).group(1)
    assert data_dir == "/var/lib/escrow"
    assert service["User"] == ["escrow"] and service["Group"] == ["escrow"]
    assert service["ProtectSystem"] == ["strict"]
    assert data_dir in " ".join(service["ReadWritePaths"]).split()
    assert service["StateDirectory"] == ["escrow"]
    assert service["WorkingDirectory"] == [data_dir]
    prefix = Path(installed.options["prefix"])
    sysusers = installed.path(prefix / "lib/sysusers.d/escrow.conf").read_text()
    assert re.search(r"^u escrow - .* /var/lib/escrow", sysusers, re.M), sysusers
    tmpfiles = installed.path(prefix / "lib/tmpfiles.d/escrow.conf").read_text()
    # Both private: the store and its copies are every message (escrowd warns about an open one).
    assert re.search(r"^d /var/lib/escrow 0700 escrow escrow", tmpfiles, re.M), tmpfiles
    assert re.search(r"^d /var/backups/escrow 0700 escrow escrow", tmpfiles, re.M), tmpfiles
    assert service["StateDirectoryMode"] == ["0700"] and service["UMask"] == ["0077"]
    # The backups: the sample's backup-root, the one other directory the sandbox lets escrowd write.
    backup_root = re.search(r'^backup-root = "([^"]+)"', installed.path(config).read_text(), re.M).group(1)
    assert backup_root == "/var/backups/escrow"
    assert "-" + backup_root in " ".join(service["ReadWritePaths"]).split()
    # Stop, restart, reload, limits, hardening.
    assert service["KillSignal"] == ["SIGTERM"]
    assert int(service["TimeoutStopSec"][0]) > CONNECTION_CLOSE_LIMIT_S
    assert service["Restart"] == ["on-failure"]
    assert service["RestartPreventExitStatus"] == ["2"]  # a bad configuration: no restart loop
    assert service["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert int(service["LimitNOFILE"][0]) >= 65536
    for key, value in [("NoNewPrivileges", "yes"), ("PrivateTmp", "yes"), ("ProtectHome", "yes")]:
        assert service[key] == [value], key
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    for doc in unit["Unit"]["Documentation"][0].split():
        assert installed.path(doc.removeprefix("file:")).exists(), doc


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_passes_systemd_analyze_verify(installed, tmp_path):
    # verify checks that ExecStart's binary exists, and there is no booted systemd to install the
    # unit into: verify a copy whose ExecStart names the binary inside the destdir.
    binary = str(installed.dir("bindir") / "escrowd")
    text = unit_text(installed).replace(f"ExecStart={binary} ", f"ExecStart={installed.path(binary)} ")
    assert text != unit_text(installed)
    unit = tmp_path / "escrowd.service"
    unit.write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                       timeout=60)
    out = r.stdout + r.stderr
    # verify exits 0 after ignoring a key it cannot parse: any line about the unit is a failure.
    ours = [line for line in out.splitlines() if "escrowd.service" in line]
    assert r.returncode == 0 and not ours, f"systemd-analyze verify (exit {r.returncode}):\n{out}"


class InstalledBroker(Broker):
    """A Broker that runs the installed escrowd instead of the built one."""

    def __init__(self, binary, **kwargs):
        super().__init__(**kwargs)
        self.binary = binary

    def command(self):
        return [str(self.binary)] + super().command()[1:]


def test_installed_escrowd_serves_on_the_installed_sample(installed, tmp_path):
    binary = installed.path(installed.dir("bindir") / "escrowd")
    config = installed.path(installed.dir("sysconfdir") / "escrow/escrowd.toml")
    b = InstalledBroker(binary, workdir=tmp_path, args=["--config", str(config)])
    b.start()
    try:
        assert f"escrowd ready, data in {tmp_path / 'data'}" in b.log
        producer, consumer = Client(b), Client(b)
        q = f"/queue/{unique('install')}"
        producer.send(q, "hello")
        before, _ = drain(consumer, q, producer)
        assert [m.body for m in before] == ["hello"]
        producer.disconnect()
        consumer.disconnect()
        assert b.terminate() == 0, b.log
    finally:
        b.close()


def uncomment_every_key(sample):
    """The sample with every `#key = ...` and `#[section]` line switched on (explanations start with
    '# ', so they stay)."""
    return "\n".join(line[1:] if re.match(r"#[\[a-z]", line) else line for line in sample.splitlines()) + "\n"


def test_sample_with_every_key_switched_on_loads(tmp_path):
    text = uncomment_every_key((ROOT / "config/escrowd.toml.sample").read_text())
    assert "\nmap-size = 8589934592\n" in text and "\n[[address-settings]]\n" in text
    # The HTTP and WebSocket listeners the sample shows are fixed ports the suite's other brokers
    # may hold: any free port instead (a port set in the file that cannot be bound stops escrowd).
    assert '\nlisten = "127.0.0.1:8161"\n' in text and '\nlisten = "127.0.0.1:61614"\n' in text
    text = text.replace('"127.0.0.1:8161"', '"127.0.0.1:0"').replace('"127.0.0.1:61614"', '"127.0.0.1:0"')
    b = Broker(workdir=tmp_path, config=text)  # --listen and --data-dir override the sample's
    b.start()
    try:
        assert b.terminate() == 0, b.log
    finally:
        b.close()


def test_sample_names_every_documented_key():
    doc = (ROOT / "docs/configuration.md").read_text()
    block = re.search(r"## The file.*?```toml\n(.*?)```", doc, re.S).group(1)
    documented = set(re.findall(r"^#?\s*([a-z][a-z0-9-]*)\s*=", block, re.M))
    sample = (ROOT / "config/escrowd.toml.sample").read_text()
    named = set(re.findall(r"^#?\s*([a-z][a-z0-9-]*)\s*=", sample, re.M))
    missing = sorted(documented - named)
    assert not missing, f"config/escrowd.toml.sample lacks keys configuration.md documents: {missing}"
