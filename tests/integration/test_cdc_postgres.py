"""Change data capture from a real PostgreSQL, through Debezium's connector in Kafka Connect, into silver.

Nothing here writes an envelope by hand: SQL runs against a PostgreSQL server the test starts (Debian's,
with logical decoding), Debezium's PostgreSQL connector (in a Kafka Connect standalone worker) writes the
change events to the suite's broker, and the real ingest and transform jobs take them into bronze and
silver. After each run silver's live rows are compared with ``SELECT`` on the table, row for row.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from include.contract.transform_spec import FieldSpec, TransformSpec
from include.tooling import local_connect, local_postgres
from tests.integration.dag_helpers import assert_ok
from tests.integration.job_helpers import (
    assert_accounted,
    ingest,
    quarantine,
    silver_commits,
    transform,
)
from tests.spark_jobs.helpers import ACCOUNTS_SPEC as CAPTURED

pytestmark = [pytest.mark.integration, pytest.mark.full]

#: The table this test creates: the captured events' columns up to body, then its own note.
SPEC = replace(CAPTURED, fields=(*CAPTURED.fields[:4], FieldSpec("note", "string")))
COLUMNS = ("owner", "balance", "body", "note")
#: The table's rows as silver holds them: numeric as text with its scale.
SELECT = "SELECT id, owner, balance::text AS balance, body, note FROM accounts"
#: A text value larger than a page, stored out of line (TOASTed): PostgreSQL does not send it again
#: when an update leaves it unchanged.
BIG = "".join(f"{i:05d}" for i in range(3000))


@dataclass
class Capture:
    """A PostgreSQL server, its Connect worker and the topics the connector writes."""

    pg: local_postgres.LocalPostgres
    bootstrap: str
    folder: Path
    prefix: str
    connect: local_connect.LocalConnect | None = None
    table: str = "accounts"

    @property
    def topic(self) -> str:
        return f"{self.prefix}.public.{self.table}"

    def source(self, **extra: str) -> local_connect.PostgresSource:
        return local_connect.PostgresSource(port=self.pg.port, tables=(f"public.{self.table}",),
                                            topic_prefix=self.prefix, extra=dict(extra))  # fmt: skip

    def start(self, flush_interval_ms: int = 1000, **extra: str) -> None:
        self.connect = local_connect.start(self.folder, self.bootstrap, self.source(**extra),
                                           flush_interval_ms=flush_interval_ms)  # fmt: skip

    def drain(self, timeout_s: float = 90.0) -> None:
        """Return once every change committed so far is in Kafka: a transactional logical-decoding message
        is emitted after them, and the connector sends changes in commit order."""
        marker = uuid.uuid4().hex
        # The marker is the message's prefix, which Debezium writes as text (its content as base64).
        self.pg.psql(f"SELECT pg_logical_emit_message(true, 'kde-drain-{marker}', 'drain');")
        # The message topic is created by the connector with its first message: look for it every second.
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"drain-{marker}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "topic.metadata.refresh.interval.ms": 1000})  # fmt: skip
        try:
            consumer.subscribe([f"{self.prefix}.message"])
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and not m.error() and marker.encode() in (m.key() or b""):
                    break
            else:
                raise AssertionError(f"the connector did not send marker {marker} within {timeout_s:.0f}s; "
                                     f"see {self.folder / 'connect.log'}")  # fmt: skip
            # The message and the table's changes go to different topics: wait until the table's
            # topic stops growing as well.
            seen = None
            while (now := self.end_offsets(consumer)) != seen:
                seen = now
                time.sleep(1.0)
        finally:
            consumer.close()

    def end_offsets(self, consumer: Consumer) -> tuple[int, ...]:
        parts = consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions
        return tuple(consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1] for p in parts)

    def run(self, spark, lake, run_id: str, spec: TransformSpec = SPEC) -> dict:
        """One pipeline run: ingest the table's topic into bronze, then the transform."""
        ingest(spark, self.bootstrap, lake, self.prefix, self.topic)
        return transform(spark, lake, self.prefix, spec=spec, run_id=run_id)


@pytest.fixture
def capture(bootstrap, tmp_path) -> Iterator[Capture]:
    pg = local_postgres.start()
    cap = Capture(pg, bootstrap, tmp_path / "connect", f"cdc{uuid.uuid4().hex[:8]}")
    try:
        yield cap
    finally:
        if cap.connect is not None:
            cap.connect.stop()
        pg.stop()


def live_silver(spark, lake) -> dict[int, dict]:
    rows = spark.read.format("delta").load(str(lake / "silver")).where("NOT _deleted").collect()
    return {r["id"]: {c: (str(r[c]) if c == "balance" and r[c] is not None else r[c]) for c in COLUMNS}
            for r in rows}  # fmt: skip


def table(capture: Capture) -> dict[int, dict]:
    return {r["id"]: {c: r[c] for c in COLUMNS} for r in capture.pg.rows(SELECT)}


def assert_same(spark, lake, capture: Capture) -> None:
    expected, found = table(capture), live_silver(spark, lake)
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    differ = sorted(k for k in set(expected) & set(found) if expected[k] != found[k])
    assert not (missing or extra or differ), (
        f"silver differs from the table: missing {missing[:10]}, extra {extra[:10]}, "
        f"differ {[(k, expected[k], found[k]) for k in differ[:3]]}"
    )


def test_silver_follows_the_table_through_snapshot_streaming_restarts_a_resnapshot_and_a_truncate(
    spark, capture, lake
):
    pg = capture.pg
    pg.psql(f"""
        CREATE TABLE accounts(id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), body text, note text);
        ALTER TABLE accounts ALTER COLUMN body SET STORAGE EXTERNAL;
        INSERT INTO accounts SELECT i, 'owner-' || i, i * 1.25, 'short', NULL FROM generate_series(1, 40) i;
        UPDATE accounts SET body = '{BIG}' WHERE id IN (7, 8);
    """)
    # 1. The snapshot of the pre-existing rows (op r).
    capture.start()
    capture.drain()
    first = capture.run(spark, lake, "run-1")
    assert (first["read"], first["upserted"], first["quarantined"]) == (40, 40, 0)
    assert_same(spark, lake, capture)

    # 2. Streaming: inserts, updates, a multi-row transaction, deletes, a primary-key change, and an
    # update that leaves a TOASTed value unchanged (Debezium sends a placeholder for it).
    pg.psql("""
        INSERT INTO accounts SELECT i, 'owner-' || i, i, NULL, 'new' FROM generate_series(41, 60) i;
        UPDATE accounts SET balance = balance + 100 WHERE id <= 10;
        BEGIN;
          UPDATE accounts SET note = 'tx' WHERE id BETWEEN 11 AND 20;
          DELETE FROM accounts WHERE id = 12;
          INSERT INTO accounts VALUES (61, 'in-tx', 0, 'x', 'tx');
        COMMIT;
        DELETE FROM accounts WHERE id IN (3, 4);
        UPDATE accounts SET id = 105 WHERE id = 5;
        UPDATE accounts SET note = 'toast kept' WHERE id = 7;
        UPDATE accounts SET balance = 1, note = 'twice' WHERE id = 8;
        UPDATE accounts SET note = 'twice, again' WHERE id = 8;
        INSERT INTO accounts VALUES (4, 'back', 4, 'again', NULL);
    """)
    capture.drain()
    second = capture.run(spark, lake, "run-2")
    assert second["quarantined"] == 0, quarantine(spark, lake)
    assert second["skipped"] >= 4  # the tombstones after the four deletes (3, 4, 5's old key, 12)
    assert_same(spark, lake, capture)
    assert live_silver(spark, lake)[7]["body"] == BIG  # kept from the snapshot, not the placeholder

    # 3. A worker killed before it records its offsets sends its changes again after the restart: the
    # copies carry positions silver holds and change nothing.
    capture.connect.stop()
    capture.start(flush_interval_ms=600_000)
    pg.psql("""
        UPDATE accounts SET balance = 7 WHERE id BETWEEN 20 AND 30;
        DELETE FROM accounts WHERE id = 30;
        UPDATE accounts SET note = 'after kill' WHERE id = 7;
    """)
    capture.drain()
    third = capture.run(spark, lake, "run-3")
    assert_same(spark, lake, capture)
    capture.connect.kill()
    pg.psql("UPDATE accounts SET note = 'newest' WHERE id = 21;")
    capture.start()
    capture.drain()
    fourth = capture.run(spark, lake, "run-4")
    assert fourth["read"] > 13, "the restarted connector sent the unrecorded changes again"
    assert fourth["upserted"] == 1 and fourth["deleted"] == 0, fourth
    assert_same(spark, lake, capture)

    # 4. A re-snapshot (snapshot.mode always) of a table changed while the connector was down.
    capture.connect.stop()
    pg.psql("UPDATE accounts SET owner = 'while down' WHERE id BETWEEN 31 AND 35;")
    capture.start(**{"snapshot.mode": "always"})
    capture.drain()
    fifth = capture.run(spark, lake, "run-5")
    assert fifth["quarantined"] == 0
    assert_same(spark, lake, capture)

    # 5. A truncate, and a row inserted after it: silver's rows written before it are deleted.
    live = len(table(capture))
    pg.psql("TRUNCATE accounts; INSERT INTO accounts VALUES (500, 'after truncate', 5, 'b', NULL);")
    capture.drain()
    sixth = capture.run(spark, lake, "run-6")
    assert (sixth["truncated_rows"], sixth["upserted"], sixth["quarantined"]) == (live, 1, 0), sixth
    assert_same(spark, lake, capture)
    assert third["read"] > 0
    assert_accounted(spark, lake)
    commits = silver_commits(spark, lake)
    assert sum(c.counts.get("skipped", 0) for c in commits) >= 4


#: A table keyed on two columns, with a body stored out of line.
ITEMS = TransformSpec(
    fields=(FieldSpec("order_id", "int", required=True), FieldSpec("item_id", "int", required=True),
            FieldSpec("body", "string"), FieldSpec("note", "string")),
    key=("order_id", "item_id"), ordering=None, tombstones="delete", envelope="debezium", source="postgresql",
)  # fmt: skip


def _items(spark, lake) -> dict[tuple[int, int], tuple]:
    rows = spark.read.format("delta").load(str(lake / "silver")).where("NOT _deleted").collect()
    return {(r["order_id"], r["item_id"]): (r["body"], r["note"]) for r in rows}


def _items_table(pg) -> dict[tuple[int, int], tuple]:
    return {(r["order_id"], r["item_id"]): (r["body"], r["note"])
            for r in pg.rows("SELECT order_id, item_id, body, note FROM items")}  # fmt: skip


def test_a_primary_key_change_keeps_the_unchanged_toasted_value_and_one_nothing_holds_goes_to_quarantine(
    spark, capture, lake, tmp_path
):
    """UPDATE of a key column leaves an out-of-line value unsent: Debezium writes a delete of the old key and a
    create of the new one with the placeholder and the old key in a header. Silver takes the value from the
    old key's row; where silver never held that row, the create goes to quarantine naming the column, and
    silver holds no row for the new key rather than a null."""
    pg = capture.pg
    capture.table = "items"
    pg.psql(f"""
        CREATE TABLE items(order_id int, item_id int, body text, note text, PRIMARY KEY (order_id, item_id));
        ALTER TABLE items ALTER COLUMN body SET STORAGE EXTERNAL;
        INSERT INTO items SELECT i, 1, '{BIG}' || i, NULL FROM generate_series(1, 20) i;
    """)
    capture.start()
    capture.drain()
    first = capture.run(spark, lake, "run-1", ITEMS)
    assert (first["upserted"], first["quarantined"]) == (20, 0)

    # Key changes that leave the body unchanged: alone, with another column, right after the body changed in
    # the same run, and a key moved onto one deleted earlier.
    pg.psql("""
        UPDATE items SET item_id = 2 WHERE order_id <= 5;
        UPDATE items SET item_id = 3, note = 'moved' WHERE order_id = 6;
        UPDATE items SET body = 'changed-7' || repeat('x', 9000) WHERE order_id = 7;
        UPDATE items SET item_id = 4 WHERE order_id = 7;
        DELETE FROM items WHERE order_id = 8;
        UPDATE items SET order_id = 8 WHERE order_id = 9;
    """)
    capture.drain()
    second = capture.run(spark, lake, "run-2", ITEMS)
    assert second["quarantined"] == 0, quarantine(spark, lake)
    expected = _items_table(pg)
    assert expected[(1, 2)][0].startswith(BIG) and expected[(7, 4)][0].startswith("changed-7")
    assert _items(spark, lake) == expected

    # A second connector that never took a snapshot: its silver lacks every row from before it started.
    capture.connect.stop()
    late = Capture(pg, capture.bootstrap, tmp_path / "connect-late", f"late{uuid.uuid4().hex[:8]}", table="items")
    late.start(**{"snapshot.mode": "no_data"})
    try:
        pg.psql("INSERT INTO items VALUES (100, 1, 'small', NULL); UPDATE items SET item_id = 9 WHERE order_id = 10;")
        late.drain()
        other = tmp_path / "late-lake"
        third = late.run(spark, other, "run-3", ITEMS)
    finally:
        late.connect.stop()
    assert (third["upserted"], third["quarantined"], third["quarantine_fields"]) == (1, 1, {"body": 1}), third
    (bad,) = quarantine(spark, other).values()
    assert bad["fields"] == ["body"]
    assert "primary-key change from key" in bad["reason"] and "REPLICA IDENTITY FULL" in bad["reason"], bad["reason"]
    assert _items(spark, other) == {(100, 1): ("small", None)}  # no row with a null body for (10, 9)


#: The table's pipeline file section, as a user writes it (the same columns as :data:`SPEC`).
TRANSFORM = {
    "envelope": "debezium",
    "source": "postgresql",
    "key": "id",
    "schema": {"id": {"type": "int", "required": True}, "owner": {"type": "string", "required": True},
               "balance": "decimal(12,2)", "body": "string", "note": "string"},
}  # fmt: skip


def test_dag_runs_follow_thousands_of_changes_exactly_through_a_driver_killed_inside_a_transform_batch(
    spark, capture, tmp_path, make_dag_pipeline
):
    """The real DAG on the connector's topic: a snapshot, then over two thousand streamed changes (bulk and
    single-row transactions, deletes, primary-key changes, TOAST kept) in a run whose driver is SIGKILLed after
    a batch's silver commit and before Spark's checkpoint records it, then more changes; silver equals the
    table after every run, no batch is applied twice, and every run's counts reconcile."""
    pg = capture.pg
    pg.psql(f"""
        CREATE TABLE accounts(id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), body text, note text);
        ALTER TABLE accounts ALTER COLUMN body SET STORAGE EXTERNAL;
        INSERT INTO accounts SELECT i, 'owner-' || i, i * 1.25, 'short', NULL FROM generate_series(1, 400) i;
        UPDATE accounts SET body = '{BIG}' WHERE id IN (7, 8, 9);
    """)
    capture.start()
    capture.drain()
    p = make_dag_pipeline(name=capture.prefix, topic=capture.topic, new_topic=False, bootstrap=capture.bootstrap,
                          root=tmp_path / "dag")  # fmt: skip
    p.write(transform=TRANSFORM)
    lake = p.lake / p.name
    assert_ok(*p.run())
    assert_same(spark, lake, capture)

    # Over 1,400 changes: one bulk insert, one bulk update, 200 single-row transactions, deletes, primary-key
    # changes, a mixed transaction and updates that leave the TOASTed bodies unchanged.
    single = "\n".join(f"UPDATE accounts SET note = 'single {i}' WHERE id = {i};" for i in range(100, 300))
    pg.psql(f"""
        INSERT INTO accounts SELECT i, 'owner-' || i, i, NULL, 'new' FROM generate_series(401, 1000) i;
        UPDATE accounts SET balance = balance + 1 WHERE id % 2 = 0;
        {single}
        DELETE FROM accounts WHERE id % 25 = 0;
        UPDATE accounts SET id = id + 5000 WHERE id BETWEEN 31 AND 60;
        BEGIN;
          UPDATE accounts SET note = 'tx' WHERE id BETWEEN 61 AND 70;
          DELETE FROM accounts WHERE id = 62;
          INSERT INTO accounts VALUES (1001, 'in-tx', 0, 'x', 'tx');
        COMMIT;
        UPDATE accounts SET note = 'toast kept' WHERE id IN (7, 8, 9);
    """)
    capture.drain()
    before = silver_commits(spark, lake)[-1].batch_id
    # The run's Spark application is killed after the batch's silver commit, before Spark's checkpoint
    # records it; the transform task then submits its step alone, which finds that batch in silver.
    proc, log = p.run(KDE_FAILPOINT=f"kill-driver-after-silver-commit:{before + 1}")
    assert f"failpoint kill-driver-after-silver-commit:{before + 1}" in log, "the failpoint did not fire"
    assert_ok(proc, log)
    assert f"batch {before + 1} of epoch 0 is already in silver" in log
    assert_same(spark, lake, capture)
    assert live_silver(spark, lake)[7]["body"] == BIG
    batch_ids = [c.batch_id for c in silver_commits(spark, lake)]
    assert batch_ids == sorted(set(batch_ids)), f"a batch was applied twice: {batch_ids}"

    # Another thousand changes, in ten transactions of a hundred rows each, then inserts and deletes.
    ranges = "\n".join(f"UPDATE accounts SET balance = balance * 2, note = 'r{k}' WHERE id > {k * 100} "
                       f"AND id <= {(k + 1) * 100};" for k in range(10))  # fmt: skip
    pg.psql(f"""
        {ranges}
        INSERT INTO accounts SELECT i, 'late-' || i, i, NULL, NULL FROM generate_series(2001, 2100) i;
        DELETE FROM accounts WHERE id % 7 = 0 AND id > 2000;
    """)
    capture.drain()
    assert_ok(*p.run())
    assert_same(spark, lake, capture)
    assert_accounted(spark, lake)
    changes = spark.read.format("delta").load(str(lake / "bronze")).where("value IS NOT NULL").count()
    assert changes >= 2_400, f"only {changes} change events were captured"
    assert [r["outcome"] for r in p.ledger()] == ["success"] * 3
