"""Where `escrow backup` may write (docs/security.md, "Backups"): only into directories under
[storage] backup-root, resolved with `..` and symbolic links, never over an existing file, with
private modes (directories 0700, data.mdb 0600); refused with a precise message otherwise, with
nothing written outside the root. Each case runs the built `escrow backup` (or a raw ADMIN frame,
for a path the command would have normalised) against a real escrowd."""

import os
import stat

import pytest

from conftest import check_store, frame_bytes, unique
from test_admin import escrow, ok_json
from test_reload import hangup, wait_log


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def rooted(broker_factory, tmp_path):
    """(broker, root, outside): escrowd with backup-root = root (an existing 0700 directory), and a
    directory next to the root where nothing may be written."""
    root = tmp_path / "backups"
    root.mkdir(mode=0o700)
    outside = tmp_path / "outside"
    outside.mkdir()
    b = broker_factory(config=f'[storage]\nbackup-root = "{root}"\n')
    return b, root, outside


def refused(broker, target, *needles):
    r = escrow(broker, "backup", target)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    for needle in needles:
        assert needle in r.stderr, r.stderr
    return r.stderr


def test_without_a_backup_root_backups_are_refused_saying_how_to_configure_one(broker, tmp_path):
    target = tmp_path / "copy"
    refused(broker, target, "backups are off", "[storage] backup-root", "not set", "/var/backups/escrow")
    assert not target.exists()


def test_a_backup_inside_the_root_is_written_with_private_modes(rooted, stomp_client):
    b, root, _ = rooted
    c = stomp_client(b)
    q = f"/queue/{unique('kept')}"
    c.send(q, "kept")  # with a receipt: stored before the copy begins
    target = root / "2026" / "11" / "30"
    answer = ok_json(b, "backup", target)
    assert answer["path"] == str(target) and answer["bytes"] > 0
    assert mode(target / "data.mdb") == 0o600
    for d in (root / "2026", root / "2026" / "11", target):
        assert mode(d) == 0o700, d
    assert mode(root) == 0o700  # the root itself is the operator's: left as it was
    assert os.listdir(target) == ["data.mdb"]
    check_store(target)
    assert b"kept" in (target / "data.mdb").read_bytes()
    # A second one into the same directory is refused: never over an existing copy.
    before = (target / "data.mdb").read_bytes()
    refused(b, target, f"{target} already holds a data.mdb")
    assert (target / "data.mdb").read_bytes() == before


def test_a_path_outside_the_root_is_refused_and_nothing_is_written(rooted, tmp_path):
    b, root, outside = rooted
    for target in (outside / "x", tmp_path / "backups-evil" / "x", tmp_path / "x", root.parent,
                   "/etc/escrow-backup-test", "/"):
        refused(b, target, f"is not inside the backup root {root} (storage.backup-root)")
    # The command makes `..` absolute lexically; the broker resolves it too (test below).
    refused(b, f"{root}/../outside/y", f"{outside / 'y'} is not inside the backup root")
    refused(b, root, f"{root} is the backup root itself: name a directory under it, e.g. {root}/2026-11-30")
    assert os.listdir(outside) == [] and not (tmp_path / "backups-evil").exists() and not (tmp_path / "x").exists()
    assert not os.path.exists("/etc/escrow-backup-test")
    assert os.listdir(root) == []
    assert "backup to" in b.log and "refused: " in b.log  # logged, at warn level


def test_dot_dot_in_the_frame_itself_is_resolved_by_the_broker(rooted, raw):
    b, root, outside = rooted
    s = raw(b)
    s.connect()
    s.send(frame_bytes("ADMIN", [("admin-command", "backup"), ("path", f"{root}/a/../../outside/z"), ("receipt", "r")]))
    f = s.read_frame()
    assert f.headers["admin-status"] == "refused", f.headers
    message = f.headers["message"]
    assert f"{root}/a/../../outside/z (it resolves to {outside / 'z'}) is not inside the backup root" in message
    assert os.listdir(outside) == [] and os.listdir(root) == []


def test_symbolic_links_cannot_lead_a_backup_out_of_the_root(rooted):
    b, root, outside = rooted
    # A link to a directory outside: resolved, then refused.
    (root / "link").symlink_to(outside)
    refused(b, root / "link" / "x", f"(it resolves to {outside / 'x'}) is not inside the backup root")
    # A dangling link to a directory that does not exist yet: never followed to make it.
    (root / "dangling").symlink_to(outside / "made-by-escrowd")
    refused(b, root / "dangling", f"{root / 'dangling'} is a symbolic link or not a directory")
    refused(b, root / "dangling" / "deeper", "is a symbolic link or not a directory")
    # A data.mdb that is a link to a file elsewhere (say /etc/...): never written through.
    victim = outside / "victim"
    victim.write_text("precious")
    (root / "trap").mkdir()
    (root / "trap" / "data.mdb").symlink_to(victim)
    refused(b, root / "trap", f"{root / 'trap'} already holds a data.mdb")
    assert victim.read_text() == "precious"
    # A file where a directory would go.
    (root / "file").write_text("x")
    refused(b, root / "file" / "x", "is a symbolic link or not a directory")
    assert sorted(os.listdir(outside)) == ["victim"]


def test_a_missing_root_is_refused_naming_it(broker_factory, tmp_path):
    b = broker_factory(config=f'[storage]\nbackup-root = "{tmp_path / "nope"}"\n')
    refused(b, tmp_path / "nope" / "x", f"the backup root {tmp_path / 'nope'} (storage.backup-root) is not an "
                                        "existing directory")
    assert not (tmp_path / "nope").exists()


def test_a_relative_root_is_relative_to_the_working_directory_and_sighup_sets_it(broker_factory):
    b = broker_factory(config="")
    root = b.workdir / "copies"
    root.mkdir(mode=0o700)
    refused(b, root / "one", "backups are off")
    mark = hangup(b, '[storage]\nbackup-root = "copies"\n')
    wait_log(b, "SIGHUP: reloaded", mark)
    assert "storage.backup-root 'copies'" in b.log[mark:]
    assert ok_json(b, "backup", root / "one")["path"] == str(root / "one")
    assert mode(root / "one" / "data.mdb") == 0o600
    # And unset again: refused again.
    mark = hangup(b, "")
    wait_log(b, "SIGHUP: reloaded", mark)
    refused(b, root / "two", "backups are off")
    assert not (root / "two").exists()
