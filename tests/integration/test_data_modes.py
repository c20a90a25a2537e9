"""The store is every message, so its files are private (docs/security.md, "Files"): a data
directory escrowd makes is 0700 and the files in it 0600, whatever the umask; a data directory
that others may enter (made by hand, or by an older release) is left as it is and warned about at
start, naming the mode and the fix."""

import os
import stat

import pytest

from conftest import Broker


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def start_with_umask(broker_factory, umask, **kwargs):
    """A broker started while the test process (whose umask escrowd inherits) has `umask`."""
    old = os.umask(umask)
    try:
        return broker_factory(**kwargs)
    finally:
        os.umask(old)


def test_a_new_data_directory_and_its_files_are_private_whatever_the_umask(broker_factory, stomp_client):
    b = start_with_umask(broker_factory, 0)  # nothing masked: every mode below is escrowd's own choice
    stomp_client(b).send("/queue/modes", "x")
    data = b.data_dir
    assert mode(data) == 0o700
    for name in ("data.mdb", "lock.mdb", "escrow.lock"):
        assert mode(data / name) == 0o600, name
    assert "is open to" not in b.log
    # Its parents, made too when missing, get the usual modes (they hold nothing of the store).
    nested = b.workdir / "a" / "b" / "data"
    c = start_with_umask(broker_factory, 0o022, data_dir=nested)
    assert mode(nested) == 0o700 and mode(nested.parent) == 0o755
    assert "is open to" not in c.log


@pytest.mark.parametrize("dir_mode,who,writable", [
    (0o755, "its group and others", False),
    (0o750, "its group", False),
    (0o701, "others", False),
    (0o770, "its group", True),
    (0o777, "its group and others", True),
])
def test_an_open_data_directory_is_warned_about_at_start_and_left_alone(broker_factory, tmp_path, dir_mode, who,
                                                                         writable):
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(dir_mode)
    b = broker_factory(data_dir=data)
    line = [l for l in b.log.splitlines() if "is open to" in l]
    assert len(line) == 1, b.log
    assert "warning" in line[0]
    assert (f"data directory {data} is open to {who} (mode {dir_mode:04o}): they may read every stored message"
            in line[0])
    assert ("and change or remove the store" in line[0]) == writable
    assert f"chmod 0700 {data}" in line[0]
    assert mode(data) == dir_mode  # the operator's directory: not changed behind their back
    # The store's files are private even in it.
    assert mode(data / "data.mdb") == 0o600
    assert b.terminate() == 0, b.log
    data.chmod(0o700)
    b.start()
    assert len([l for l in b.log.splitlines() if "is open to" in l]) == 1  # only the first run's


def test_a_broker_without_data_dir_option_makes_its_default_directory_private(tmp_path):
    b = Broker(data_dir=False, workdir=tmp_path)  # the built-in ./escrow-data
    try:
        b.start()
        assert mode(tmp_path / "escrow-data") == 0o700
        assert b.terminate() == 0, b.log
    finally:
        b.close()
