"""The log-only reader gives what delta-rs gives, on bronze tables Spark wrote (real broker, Spark, Delta), and the
job's own reader of the newest commits what Spark's Delta gives.

Through Spark's own log checkpoints, a multi-part checkpoint, a RESTORE and
the log cleanup of old commits; every read of the position goes through it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from include.contract import table_stand
from include.contract.jobs import bronze_app_id
from include.readers import delta_log
from include.readers.delta_progress import read_progress
from spark_jobs.kafka_to_bronze import run
from tests.delta_helpers import age_log
from tests.integration.job_helpers import ingest_config
from tests.kafka_helpers import produce_numbered

pytestmark = [pytest.mark.integration, pytest.mark.full]


def _app_ids(pipeline: str, topic: str, partitions: int) -> list[str]:
    """Every txn app id a bronze commit of ``pipeline`` writes for ``topic`` (epochs 0 to 2)."""
    return [
        table_stand.epoch_app_id(pipeline), table_stand.batch_app_id(pipeline),
        table_stand.commit_version_app_id(pipeline), table_stand.partitions_app_id(pipeline, topic),
        table_stand.topic_id_app_id(pipeline, topic),
        *(bronze_app_id(pipeline, e) for e in range(3)),
        *(table_stand.next_app_id(pipeline, topic, p) for p in range(partitions)),
    ]  # fmt: skip


def _assert_same_as_delta_rs(path: Path, app_ids: list[str], spark) -> delta_log.LogView:
    _assert_job_history_same_as_sparks(spark, path)
    view = delta_log.read(path)
    assert view is not None, f"the log reader declined {path}: {sorted(p.name for p in (path / '_delta_log').iterdir())}"
    table = DeltaTable(str(path))
    assert view.version() == table.version()
    probed = {a: (view.transaction_version(a), table.transaction_version(a)) for a in app_ids}
    assert all(mine == theirs for mine, theirs in probed.values()), probed
    assert view.transaction_version("kafka-delta-elt:no-such-app") is None
    for limit in (1, 4, 50):
        assert view.history(limit) == table.history(limit), limit
    return view


def _assert_job_history_same_as_sparks(spark, path: Path) -> None:
    """The job's own reader of the newest commits (where the table stands, without a Spark job) gives what
    Spark's ``DeltaTable.history`` gives, a widening read included."""
    from delta.tables import DeltaTable as SparkDeltaTable

    from spark_jobs.delta_commits import LogHistory, delta_snapshot, history_rows

    log = LogHistory(spark, str(path), delta_snapshot(spark, str(path)))
    for limit in (1, 4, 50):
        theirs = [{**r, "operationParameters": dict(r["operationParameters"])}
                  for r in history_rows(SparkDeltaTable.forPath(spark, str(path)), limit)]  # fmt: skip
        assert log.rows(limit) == theirs, limit


def test_the_log_reader_reads_what_delta_rs_reads_through_checkpoints_restore_and_log_cleanup(
        spark, bootstrap, make_topic, unique_name, lake):  # fmt: skip
    topic = make_topic(unique_name, partitions=2)
    bronze = lake / "bronze"
    cfg = ingest_config(bootstrap, lake, unique_name, topic, "--max-offsets-per-trigger", "10")
    produce_numbered(bootstrap, topic, 2, 130)
    assert run(spark, cfg).rows == 130  # 13 micro-batches: Spark's log checkpoint at version 10, commits after it
    ids = _app_ids(unique_name, topic, 2)
    names = {p.name for p in (bronze / "_delta_log").iterdir()}
    assert "00000000000000000010.checkpoint.parquet" in names
    view = _assert_same_as_delta_rs(bronze, ids, spark)
    stand = [a for a in ids if view.transaction_version(a) is not None]
    # epoch, batch, commit version, partitions, this epoch's, 2 partitions (a topic id only from a DAG's preflight)
    assert len(stand) == 7, stand
    assert view.transaction_version(table_stand.next_app_id(unique_name, topic, 0)) == 65

    # A multi-part checkpoint (Spark writes one when a checkpoint holds more actions than its part size).
    spark.conf.set("spark.databricks.delta.checkpoint.partSize", "5")
    try:
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(bronze)).checkpoint()
    finally:
        spark.conf.unset("spark.databricks.delta.checkpoint.partSize")
    parts = sorted(p.name for p in (bronze / "_delta_log").iterdir() if ".checkpoint.0000000001." in p.name)
    assert parts, "Spark wrote no multi-part checkpoint"
    _assert_same_as_delta_rs(bronze, ids, spark)

    # A RESTORE brings the files back, not the txn state: both readers agree on what the state is after it.
    spark.sql(f"RESTORE TABLE delta.`{bronze}` TO VERSION AS OF 3")
    restored_at = _assert_same_as_delta_rs(bronze, ids, spark).version()

    # A month later, Delta's own log cleanup (delta-rs's, which follows the protocol's rules) removes the commits
    # before the newest checkpoint: history shrinks, the state stays.
    log = [p for p in (bronze / "_delta_log").iterdir() if p.name[:20].isdigit()]  # not Hadoop's hidden .crc files
    newest = max(int(p.name[:20]) for p in log if ".checkpoint." in p.name)
    age_log(bronze, 31)
    DeltaTable(str(bronze)).cleanup_metadata()
    assert not (bronze / "_delta_log" / f"{newest - 1:020d}.json").exists(), "the cleanup removed nothing"
    after = _assert_same_as_delta_rs(bronze, ids, spark)
    assert [e["version"] for e in after.history(50)][-1] == newest
    progress = read_progress(bronze, unique_name, {topic: [0, 1]})
    assert progress is not None and progress.next_offsets == {topic: {0: 65, 1: 65}}
    assert progress.restore is not None and progress.restore.version == restored_at  # still seen, and refused
