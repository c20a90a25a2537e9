"""Backup with mdb_copy (docs/operations.md, "Backup and restore"): a hot copy of a running
escrowd's data directory, made by lmdb-utils' mdb_copy (plain and compacting) while the broker
serves, is a store a second escrowd starts on: it holds every message stored before the copy
(acknowledged ones excepted), not those sent after it, and the branch that was prepared is
prepared in the copy too."""

import shutil
import subprocess

import pytest

from conftest import TIMEOUT, drain, new_xid, unique

pytestmark = pytest.mark.skipif(shutil.which("mdb_copy") is None,
                                reason="mdb_copy is not installed (Debian: lmdb-utils; scripts/setup installs it)")


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "compacting"])
def test_mdb_copy_of_a_live_data_dir(broker_factory, stomp_client, tmp_path, compact):
    live = broker_factory()
    q, xa_q = f"/queue/{unique('backup')}", f"/queue/{unique('backup-xa')}"
    p = stomp_client(live)
    for i in range(50):
        p.send(q, f"m{i}")
    # Acknowledged before the copy: not in it. Delivered and unacknowledged: in it.
    c = stomp_client(live)
    c.subscribe(q, ack="client-individual", headers={"prefetch-count": "20"})
    got = c.wait_messages(20)
    for m in got[:10]:
        c.ack(m, receipt=True)
    x = new_xid()
    assert p.xa("START", x).result == "XA_OK"
    p.send(xa_q, "prepared")
    assert p.xa("END", x, "TMSUCCESS").result == "XA_OK"
    assert p.xa("PREPARE", x).result == "XA_OK"

    copy = tmp_path / "copy"
    copy.mkdir()
    r = subprocess.run(["mdb_copy"] + (["-c"] if compact else []) + [str(live.data_dir), str(copy)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    # The live broker goes on: a message sent now is not in the copy.
    p.send(q, "after-the-copy")

    restored = broker_factory(data_dir=copy)
    s, r2 = stomp_client(restored), stomp_client(restored)
    back, _ = drain(r2, q, s)
    assert [m.body for m in back] == [f"m{i}" for i in range(10, 50)]
    recovered = r2.xa("RECOVER", None, "TMSTARTRSCAN|TMENDRSCAN", count=100)
    assert recovered.xids == [x], recovered
    assert r2.xa("COMMIT", x).result == "XA_OK"
    committed, _ = drain(r2, xa_q, s)
    assert [m.body for m in committed] == ["prepared"]

    # The live broker is untouched by all this: its branch is still prepared.
    assert p.xa("ROLLBACK", x).result == "XA_OK"
