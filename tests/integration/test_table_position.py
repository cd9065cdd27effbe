"""Where bronze stands survives Delta's log cleanup and notices a RESTORE (real broker, Spark, Delta).

Time is made to pass the way Delta measures it: the modification times of
the ``_delta_log`` files, aged in version order, each later than the one
before (Spark's cleanup adjusts equal times and would then keep everything).
Every test compares bronze with an independent read of the topic.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from include.contract.offsets import BronzeCommit, OffsetError, positions_to_json
from include.contract.table_stand import PositionUnknownError
from include.readers.delta_progress import positions_from_rows, read_progress
from spark_jobs.kafka_to_bronze import run
from tests.delta_helpers import age_log
from tests.integration.job_helpers import bronze_records, ingest_config
from tests.kafka_helpers import produce_numbered, read_all

pytestmark = pytest.mark.integration


def _with_reset(lake: Path, positions: dict, action: str, **more) -> str:
    path = lake / f"preflight-{action}.json"
    reset = {"action": action, "reason": f"{action} by the test", "positions": positions_to_json(positions), **more}
    path.write_text(json.dumps({"position_reset": reset}))
    return str(path)


def _assert_exactly(spark, path: Path, expected: set) -> None:
    rows = bronze_records(spark, path)
    assert len(rows) == len(set(rows)), f"bronze holds {len(rows) - len(set(rows))} duplicates"
    assert set(rows) == expected


def _other_writer_commits(spark, path: Path, count: int, start: int = 0) -> None:
    """Commits with no progress, as OPTIMIZE, VACUUM or the maintenance step write them."""
    for i in range(start, start + count):
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('test.note' = '{i}')")


def _log_versions(path: Path) -> set[int]:
    return {int(f.name[:20]) for f in (path / "_delta_log").glob("*.json")}


@pytest.mark.parametrize("cleanup", [pytest.param("delta-rs", marks=pytest.mark.full), "spark"])
def test_after_log_cleanup_a_run_reads_exactly_the_new_records(spark, bootstrap, make_topic, unique_name, lake,
                                                                 cleanup):  # fmt: skip
    topic = make_topic(unique_name, partitions=3)
    bronze = lake / "bronze"
    produce_numbered(bootstrap, topic, 3, 900)
    first = run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--max-offsets-per-trigger", "300"))
    assert first.rows == 900 and len(first.batches) == 3  # versions 0-2 carry the offsets

    _other_writer_commits(spark, bronze, 8)  # versions 3-10; Delta's log checkpoint at 10
    age_log(bronze, 31)
    if cleanup == "delta-rs":
        from deltalake import DeltaTable

        DeltaTable(str(bronze)).cleanup_metadata()
    else:  # Spark's Delta cleans up at its next checkpoint (version 20); the Spark checkpoint goes too
        _other_writer_commits(spark, bronze, 10, start=8)
        shutil.rmtree(lake / "checkpoints")
    assert _log_versions(bronze).isdisjoint({0, 1, 2}), "the commits that carried the offsets are still there"

    progress = read_progress(str(bronze), unique_name, {topic: [0, 1, 2]})  # delta-rs, no JVM
    assert progress.stand.source == "state"
    assert progress.next_offsets == {topic: {0: 300, 1: 300, 2: 300}}

    produce_numbered(bootstrap, topic, 3, 300, start=900)
    second = run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    assert second.rows == 300
    assert second.start_offsets == {topic: {0: 300, 1: 300, 2: 300}}
    _assert_exactly(spark, bronze, read_all(bootstrap, topic))


def test_restore_is_refused_then_reread_brings_back_exactly_what_it_undid(spark, bootstrap, make_topic, unique_name,
                                                                         lake):  # fmt: skip
    from delta.tables import DeltaTable

    topic = make_topic(unique_name, partitions=3)
    bronze = lake / "bronze"
    produce_numbered(bootstrap, topic, 3, 900)
    run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--max-offsets-per-trigger", "300"))
    DeltaTable.forPath(spark, str(bronze)).restoreToVersion(0)  # undoes batches 1 and 2
    restored_rows = len(bronze_records(spark, bronze))
    assert 0 < restored_rows < 900
    produce_numbered(bootstrap, topic, 3, 300, start=900)

    progress = read_progress(str(bronze), unique_name, {topic: [0, 1, 2]})
    assert progress.restore is not None and progress.restore.restored_to == "version 0"
    version, back = progress.restore.restored_commit
    assert version == 0 and sum(back.next_offsets[topic].values()) == restored_rows

    # The restore is Delta version 4: after the three batches and the run's table-property commit (its owner).
    with pytest.raises(OffsetError, match=r"was restored \(version 0, Delta version 4\)"):
        run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    assert len(bronze_records(spark, bronze)) == restored_rows  # refused: nothing written

    preflight = _with_reset(lake, back.next_offsets, "reread_after_restore")
    again = run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--preflight-file", preflight))
    assert again.rows == 1200 - restored_rows
    assert again.checkpoint_rebuilt["reason"] == "reread_after_restore by the test"
    _assert_exactly(spark, bronze, read_all(bootstrap, topic))

    produce_numbered(bootstrap, topic, 3, 30, start=1200)
    after = run(spark, ingest_config(bootstrap, lake, unique_name, topic))  # the restore is behind the stand now
    assert (after.rows, after.epoch, after.checkpoint_rebuilt) == (30, again.epoch, None)
    _assert_exactly(spark, bronze, read_all(bootstrap, topic))


@pytest.mark.full
def test_restore_kept_position_records_what_it_undid(spark, bootstrap, make_topic, unique_name, lake):
    from delta.tables import DeltaTable

    topic = make_topic(unique_name, partitions=3)
    bronze = lake / "bronze"
    produce_numbered(bootstrap, topic, 3, 900)
    run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--max-offsets-per-trigger", "300"))
    DeltaTable.forPath(spark, str(bronze)).restoreToVersion(0)
    kept = set(bronze_records(spark, bronze))
    produce_numbered(bootstrap, topic, 3, 300, start=900)

    progress = read_progress(str(bronze), unique_name, {topic: [0, 1, 2]})
    undone = [{"topic": topic, "partition": p, "from": o, "until": 300}
              for p, o in progress.restore.restored_commit[1].next_offsets[topic].items()]  # fmt: skip
    preflight = _with_reset(lake, progress.next_offsets, "keep_position_after_restore", undone=undone)
    summary = run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--preflight-file", preflight))
    assert summary.rows == 300
    new = {r for r in read_all(bootstrap, topic) if r[1] >= 300}
    _assert_exactly(spark, bronze, kept | new)

    marks = [
        BronzeCommit.from_user_metadata(h["userMetadata"])
        for h in DeltaTable.forPath(spark, str(bronze)).history().collect()
    ]  # fmt: skip
    recorded = [m.extra["position_set"] for m in marks if m is not None and "position_set" in m.extra]
    assert recorded[0]["action"] == "keep_position_after_restore" and recorded[0]["undone"] == undone


def test_rows_without_a_readable_position_are_refused_until_reestablished(spark, bootstrap, make_topic, unique_name,
                                                                         lake):  # fmt: skip
    topic = make_topic(unique_name, partitions=2)
    produce_numbered(bootstrap, topic, 2, 400)
    run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    # Another tool copies the table: rows come along, the log's state and history do not.
    spark.read.format("delta").load(str(lake / "bronze")).write.format("delta").save(str(lake / "copy"))
    shutil.rmtree(lake / "checkpoints")
    produce_numbered(bootstrap, topic, 2, 100, start=400)

    with pytest.raises(PositionUnknownError, match=r"copy holds rows but neither its state nor"):
        read_progress(str(lake / "copy"), unique_name, {topic: [0, 1]})
    with pytest.raises(PositionUnknownError):
        run(spark, ingest_config(bootstrap, lake, unique_name, topic, bronze="copy"))

    positions = positions_from_rows(str(lake / "copy"))
    assert positions == {topic: {0: 200, 1: 200}}
    preflight = _with_reset(lake, positions, "reestablish_position")
    summary = run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--preflight-file", preflight, bronze="copy"))
    assert summary.rows == 100
    _assert_exactly(spark, lake / "copy", read_all(bootstrap, topic))
    assert read_progress(str(lake / "copy"), unique_name, {topic: [0, 1]}).next_offsets == {topic: {0: 250, 1: 250}}
