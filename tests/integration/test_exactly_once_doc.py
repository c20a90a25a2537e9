"""The Python example of docs/exactly-once.md, run as it is written against escrowd and a real
PostgreSQL: the one sample test_docs_samples.py skips (it needs the database), so that it cannot
drift from the broker. Only the port (61613) and the conninfo ("host=127.0.0.1 dbname=shop")
are replaced by the test's.
"""

import subprocess
import sys

from conftest import ROOT, TIMEOUT, unique
from pg import postgres  # noqa: F401  (the session fixture)

sys.path.insert(0, str(ROOT / "tests/integration"))
from test_docs_samples import parse  # noqa: E402


def example():
    blocks = [b for b in parse(ROOT / "docs/exactly-once.md")[0] if b.tag == "python"]
    assert len(blocks) == 1, "docs/exactly-once.md should have exactly one python example"
    return blocks[0].code


def test_the_documented_example_runs_exactly_once(broker_factory, stomp_client, postgres, tmp_path):
    db = unique("shop").replace("-", "_")
    postgres.sql(f"CREATE DATABASE {db}")
    postgres.sql("CREATE TABLE orders (id text PRIMARY KEY, body text)", dbname=db)
    conninfo = postgres.conninfo(db)
    broker = broker_factory(config=f'[[coordinator.postgresql]]\nname = "shop"\nconninfo = "{conninfo}"\n')
    producer = stomp_client(broker)
    producer.send("/queue/orders", "two apples", headers={"order-id": "o-1"})
    code = example()
    assert "61613" in code and "host=127.0.0.1 dbname=shop" in code
    code = code.replace("61613", str(broker.port)).replace("host=127.0.0.1 dbname=shop", conninfo)
    script = tmp_path / "example.py"
    script.write_text(code)
    run = subprocess.run(["/usr/bin/python3", str(script)], capture_output=True, text=True, timeout=TIMEOUT * 3)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "order o-1 database committed" in run.stdout, run.stdout
    assert postgres.sql("SELECT id, body FROM orders", dbname=db) == [["o-1", "two apples"]]
    assert postgres.sql("SELECT gid FROM pg_prepared_xacts") == []
    consumer = stomp_client(broker)
    consumer.subscribe("/queue/confirmations")
    consumer.wait_body("confirmed two apples")
    # The order was consumed for good: a marker sent after it is the first thing the queue holds.
    producer.send("/queue/orders", "marker")
    consumer.subscribe("/queue/orders")
    consumer.wait_body("marker")
    assert [m.body for m in consumer.messages] == ["confirmed two apples", "marker"]
