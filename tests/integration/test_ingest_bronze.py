"""Ingestion into bronze against the real broker, real Spark and real Delta.

Every test compares bronze with an independent read of the topic by
confluent-kafka, so "exactly once" is checked record by record.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest

from include.contract.errors import TableOwnershipError
from include.contract.jobs import bronze_app_id
from include.contract.offsets import BronzeCommit
from include.ports import free_port
from include.readers import spark_checkpoint
from include.readers.delta_progress import read_progress
from spark_jobs.ingest_plan import NO_DICTIONARY_COLUMNS
from spark_jobs.kafka_to_bronze import KafkaSourceError, main, run
from spark_jobs.table_properties import OWNER_PROPERTY
from tests.integration.job_helpers import bronze_records, ingest_args, ingest_config, run_killed_by_failpoint
from tests.kafka_helpers import (
    add_partitions,
    produce,
    produce_numbered,
    produce_transactional,
    read_all,
)

pytestmark = pytest.mark.integration


def _assert_exactly_once(spark, lake, bootstrap, topic, expected_count):
    records = bronze_records(spark, lake / "bronze")
    assert len(records) == len(set(records)), "bronze holds duplicate records"
    reference = read_all(bootstrap, topic)
    assert len(reference) == expected_count
    assert set(records) == reference


def _bronze_commits(spark, lake):
    """Every bronze commit, oldest first, with Delta's own row count for it."""
    from delta.tables import DeltaTable

    hist = DeltaTable.forPath(spark, str(lake / "bronze")).history().orderBy("version").collect()
    result = []
    for h in hist:
        commit = BronzeCommit.from_user_metadata(h["userMetadata"], version=h["version"])
        if commit is not None:
            result.append((h["version"], commit, int(h["operationMetrics"].get("numOutputRows", 0))))
    return result


def test_two_runs_read_only_new_records_exactly_once(spark, bootstrap, make_topic, unique_name, lake):
    topic = make_topic(unique_name, partitions=3)
    produce_numbered(bootstrap, topic, 3, 300)
    first = run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    assert first.rows == 300

    produce_numbered(bootstrap, topic, 3, 150, start=300)
    second = run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    assert second.rows == 150
    assert second.epoch == first.epoch
    assert second.start_offsets == first.next_offsets

    _assert_exactly_once(spark, lake, bootstrap, topic, 450)
    progress = read_progress(str(lake / "bronze"), unique_name)
    assert progress.next_offsets == {topic: {0: 150, 1: 150, 2: 150}}

    third = run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    assert third.rows == 0 and third.batches == []


def test_bronze_keeps_kafka_metadata_and_headers(spark, bootstrap, make_topic, unique_name, lake):
    topic = make_topic(unique_name, partitions=1)
    produce(bootstrap, topic, [(0, b"k1", b"\x00\xffraw")], headers=[("trace", b"abc")])
    summary = run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--run-id", "run-42"))
    row = spark.read.format("delta").load(str(lake / "bronze")).collect()[0]
    assert (row["topic"], row["partition"], row["offset"]) == (topic, 0, 0)
    assert bytes(row["key"]) == b"k1" and bytes(row["value"]) == b"\x00\xffraw"
    assert [(h["key"], bytes(h["value"])) for h in row["headers"]] == [("trace", b"abc")]
    assert row["timestampType"] == 0 and row["timestamp"] is not None
    assert row["run_id"] == "run-42" and row["batch_id"] == 0 and row["epoch"] == summary.epoch
    assert row["ingested_at"] is not None


def test_distinct_valued_columns_are_written_plain_others_keep_the_dictionary(spark, bootstrap, make_topic,
                                                                               unique_name, lake):  # fmt: skip
    import pyarrow.parquet as pq

    topic = make_topic(unique_name, partitions=1)
    # One repeated value and key: Parquet would dictionary-encode both unless told otherwise.
    produce(bootstrap, topic, [(0, b"same-key", b"same value")] * 50)
    run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    files = sorted((lake / "bronze").glob("*.parquet"))
    assert files
    chunk = pq.ParquetFile(files[0]).metadata.row_group(0)
    encodings = {chunk.column(i).path_in_schema: set(chunk.column(i).encodings) for i in range(chunk.num_columns)}
    dictionary = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    for column in NO_DICTIONARY_COLUMNS:
        assert not encodings[column] & dictionary, (column, encodings[column])
    assert encodings["key"] & dictionary and encodings["topic"] & dictionary, encodings


def test_max_offsets_per_trigger_splits_into_chained_commits(spark, bootstrap, make_topic, unique_name, lake):
    topic = make_topic(unique_name, partitions=3)
    produce_numbered(bootstrap, topic, 3, 300)
    summary = run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--max-offsets-per-trigger", "70"))
    assert len(summary.batches) >= 5

    commits = _bronze_commits(spark, lake)
    assert [c.batch_id for _, c, _ in commits] == list(range(len(summary.batches)))
    position: dict[tuple[str, int], int] = {}
    for version, commit, delta_rows in commits:
        assert commit.rows == delta_rows, f"version {version}: metadata rows != rows Delta wrote"
        assert 0 < commit.rows <= 70
        for r in commit.ranges:
            assert r.from_offset == position.get(r.topic_partition, 0), f"version {version}: {r} does not chain"
            assert r.rows == r.until_offset - r.from_offset  # plain topic: no holes
            position[r.topic_partition] = r.until_offset
        assert {(t, p): o for t, ps in commit.next_offsets.items() for p, o in ps.items()} == position
    assert position == {(topic, 0): 100, (topic, 1): 100, (topic, 2): 100}
    _assert_exactly_once(spark, lake, bootstrap, topic, 300)


def test_ranges_come_from_the_files_statistics_or_from_counting_the_files(spark, bootstrap, make_topic,
                                                                          unique_name, lake):  # fmt: skip
    """The batch is read once; its ranges come from Delta's file statistics, or, when the table collects
    none, from counting the batch's own written files: the same exact ranges either way."""
    import pyarrow as pa
    from deltalake import DeltaTable

    topic = make_topic(unique_name, partitions=3)
    produce_numbered(bootstrap, topic, 3, 120)
    run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--max-offsets-per-trigger", "60"))
    with_stats = pa.table(DeltaTable(str(lake / "bronze")).get_add_actions(flatten=True)).to_pylist()
    assert with_stats and all(a["num_records"] > 0 and a["min.offset"] is not None for a in with_stats)

    spark.sql(f"ALTER TABLE delta.`{lake / 'bronze'}` SET TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '0')")
    produce_numbered(bootstrap, topic, 3, 90, start=120)
    second = run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--max-offsets-per-trigger", "60"))
    assert second.rows == 90 and len(second.batches) >= 2
    actions = pa.table(DeltaTable(str(lake / "bronze")).get_add_actions(flatten=True)).to_pylist()
    without_min = [a for a in actions if a.get("min.offset") is None]
    assert without_min, "the table still collects offset statistics: the counting path was not exercised"

    commits = _bronze_commits(spark, lake)
    for version, commit, delta_rows in commits:
        assert commit.rows == delta_rows, f"version {version}: metadata rows != rows Delta wrote"
        for r in commit.ranges:
            assert r.rows == r.until_offset - r.from_offset
    assert read_progress(str(lake / "bronze"), unique_name).next_offsets == {topic: {0: 70, 1: 70, 2: 70}}
    _assert_exactly_once(spark, lake, bootstrap, topic, 210)


def test_new_partitions_arrive_from_their_first_offset(spark, bootstrap, make_topic, unique_name, lake):
    topic = make_topic(unique_name, partitions=2)
    produce_numbered(bootstrap, topic, 2, 40)
    run(spark, ingest_config(bootstrap, lake, unique_name, topic))

    add_partitions(bootstrap, topic, 4)
    produce_numbered(bootstrap, topic, 4, 80, start=40)
    second = run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    assert second.rows == 80
    new = [r for b in second.batches for r in b.ranges if r.partition in (2, 3)]
    assert sorted((r.partition, r.from_offset, r.until_offset) for r in new) == [(2, 0, 20), (3, 0, 20)]
    _assert_exactly_once(spark, lake, bootstrap, topic, 120)


def test_aborted_transactions_are_skipped_and_holes_are_not_failures(spark, bootstrap, make_topic, unique_name, lake):
    topic = make_topic(unique_name, partitions=1)
    produce_transactional(bootstrap, topic, [
        (True, [(0, b"committed-1"), (0, b"committed-2")]),
        (False, [(0, b"aborted-1"), (0, b"aborted-2"), (0, b"aborted-3")]),
        (True, [(0, b"committed-3")]),
    ])  # fmt: skip
    summary = run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    values = sorted(v for _, _, v in bronze_records(spark, lake / "bronze"))
    assert values == [b"committed-1", b"committed-2", b"committed-3"]
    # 3 committed + 3 aborted records + 3 transaction markers = offsets 0..8
    (partition,) = summary.to_json()["partitions"][topic].values()
    assert partition == {"from": 0, "until": 9, "rows": 3}
    _assert_exactly_once(spark, lake, bootstrap, topic, 3)


def test_deleted_checkpoint_resumes_at_table_offsets_with_new_epoch(spark, bootstrap, make_topic, unique_name, lake):
    topic = make_topic(unique_name, partitions=3)
    produce_numbered(bootstrap, topic, 3, 90)
    first = run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    shutil.rmtree(lake / "checkpoints")

    produce_numbered(bootstrap, topic, 3, 60, start=90)
    second = run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    assert second.epoch == first.epoch + 1
    assert second.checkpoint_rebuilt["reason"] == "no checkpoint found"
    assert second.rows == 60

    progress = read_progress(str(lake / "bronze"), unique_name)
    assert progress.epoch == second.epoch  # the new epoch's writes landed, not skipped
    assert progress.commit.extra["checkpoint_rebuilt"]["reason"] == "no checkpoint found"
    from deltalake import DeltaTable

    assert DeltaTable(str(lake / "bronze")).transaction_version(bronze_app_id(unique_name, second.epoch)) == 0
    _assert_exactly_once(spark, lake, bootstrap, topic, 150)

    produce_numbered(bootstrap, topic, 3, 30, start=150)
    third = run(spark, ingest_config(bootstrap, lake, unique_name, topic))
    assert (third.epoch, third.rows, third.checkpoint_rebuilt) == (second.epoch, 30, None)
    _assert_exactly_once(spark, lake, bootstrap, topic, 180)


@pytest.mark.full
def test_kill_after_delta_commit_before_checkpoint_commit(spark, bootstrap, make_topic, unique_name, lake):
    topic = make_topic(unique_name, partitions=3)
    produce_numbered(bootstrap, topic, 3, 300)
    run_killed_by_failpoint("spark_jobs/kafka_to_bronze.py",
                            ingest_args(bootstrap, lake, unique_name, topic, "--max-offsets-per-trigger", "100"),
                            "kill-after-bronze-commit:1")  # fmt: skip

    # The crash window: batch 1 is in the table, Spark never committed it.
    progress = read_progress(str(lake / "bronze"), unique_name)
    assert (progress.epoch, progress.commit.batch_id) == (1, 1)
    state = spark_checkpoint.read_state(spark_checkpoint.epoch_dir(lake / "checkpoints", 1))
    assert (state.last_committed_batch, state.pending_batch) == (0, 1)

    before = len(bronze_records(spark, lake / "bronze"))
    assert 0 < before < 300

    rerun = run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--max-offsets-per-trigger", "100"))
    assert rerun.epoch == 1 and rerun.checkpoint_rebuilt is None
    assert [b.skipped_replay for b in rerun.batches][0] is True
    assert rerun.rows == 300 - before
    _assert_exactly_once(spark, lake, bootstrap, topic, 300)


def _owner(spark, path) -> str | None:
    rows = spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
    return {r["key"]: r["value"] for r in rows}.get(OWNER_PROPERTY)


def _versions(spark, path) -> int:
    return spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count()


def test_a_table_is_one_pipelines_and_a_new_one_takes_only_an_empty_location(
    spark, bootstrap, make_topic, unique_name, lake, tmp_path
):
    topic = make_topic(unique_name, partitions=1)
    produce_numbered(bootstrap, topic, 1, 20)
    assert run(spark, ingest_config(bootstrap, lake, unique_name, topic)).rows == 20
    bronze = str(lake / "bronze")
    assert _owner(spark, bronze) == unique_name
    # Another pipeline pointed at the same table (the loader refuses two files that name one location at
    # once; not a file changed between runs, or one on another deployment): refused, nothing written.
    versions = _versions(spark, bronze)
    with pytest.raises(TableOwnershipError, match=f"belongs to pipeline '{unique_name}'.*not to 'other'"):
        run(spark, ingest_config(bootstrap, lake, "other", topic))
    assert _versions(spark, bronze) == versions

    # A table an earlier version made names no owner: the next run adopts it.
    spark.sql(f"ALTER TABLE delta.`{bronze}` UNSET TBLPROPERTIES ('{OWNER_PROPERTY}')")
    assert _owner(spark, bronze) is None
    produce_numbered(bootstrap, topic, 1, 5, start=20)
    assert run(spark, ingest_config(bootstrap, lake, unique_name, topic)).rows == 5
    assert _owner(spark, bronze) == unique_name

    # A folder that holds other files and no table: refused before anything is written, its files untouched.
    folder = tmp_path / "var"
    folder.mkdir()
    (folder / "secret.key").write_text("keep me")
    with pytest.raises(TableOwnershipError, match=r"holds secret\.key and no Delta table.*an empty location"):
        run(spark, ingest_config(bootstrap, tmp_path, "third", topic, bronze="var", checkpoints="third-checkpoints"))
    assert sorted(p.name for p in folder.iterdir()) == ["secret.key"]
    assert (folder / "secret.key").read_text() == "keep me"


def test_missing_topic_fails_fast_and_writes_nothing(spark, bootstrap, unique_name, lake):
    started = time.monotonic()
    with pytest.raises(KafkaSourceError, match=f"{unique_name}-absent.*do not exist on {bootstrap}"):
        run(spark, ingest_config(bootstrap, lake, unique_name, f"{unique_name}-absent"))
    assert time.monotonic() - started < 30
    assert not (lake / "bronze").exists() and not (lake / "checkpoints").exists()


def test_unreachable_broker_fails_in_bounded_time_naming_the_address(spark, unique_name, lake):
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(KafkaSourceError, match=f"Kafka at {address} did not answer within 3s"):
        run(spark, ingest_config(address, lake, unique_name, "orders", "--admin-timeout-s", "3"))
    assert time.monotonic() - started < 20
    assert not (lake / "bronze").exists()


def test_wrong_config_type_names_the_field_and_writes_nothing(bootstrap, unique_name, lake, capsys):
    code = main(ingest_args(bootstrap, lake, unique_name, "orders", "--max-offsets-per-trigger", "lots"))
    assert code == 2
    assert "--max-offsets-per-trigger: expected a positive integer, got 'lots'" in capsys.readouterr().err
    assert not lake.exists()


@pytest.mark.full
def test_summary_file_is_written_for_the_orchestrator(spark, bootstrap, make_topic, unique_name, lake, tmp_path):
    topic = make_topic(unique_name, partitions=2)
    produce_numbered(bootstrap, topic, 2, 10)
    out = tmp_path / "summary.json"
    run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--summary-path", str(out), "--run-id", "r1"))
    summary = json.loads(out.read_text())
    assert summary["run_id"] == "r1" and summary["rows"] == 10
    assert summary["partitions"][topic] == {"0": {"from": 0, "until": 5, "rows": 5},
                                            "1": {"from": 0, "until": 5, "rows": 5}}  # fmt: skip
    assert summary["next_offsets"] == {topic: {"0": 5, "1": 5}}
    assert summary["bronze_version"] == 0


@pytest.mark.full
def test_progress_skips_other_writers_commits_and_survives_log_checkpoints(
    spark, bootstrap, make_topic, unique_name, lake
):
    from delta.tables import DeltaTable

    topic = make_topic(unique_name, partitions=2)
    produce_numbered(bootstrap, topic, 2, 240)
    first = run(spark, ingest_config(bootstrap, lake, unique_name, topic, "--max-offsets-per-trigger", "20"))
    assert len(first.batches) == 12  # past Delta's log checkpoint interval of 10 commits
    assert (lake / "bronze" / "_delta_log" / "00000000000000000010.checkpoint.parquet").exists()

    DeltaTable.forPath(spark, str(lake / "bronze")).optimize().executeCompaction()
    progress = read_progress(str(lake / "bronze"), unique_name)  # delta-rs, no JVM
    # Versions 0-11 are the batches, 12 the run's table-property commit (the owner), 13 the OPTIMIZE.
    assert progress.table_version == 13 and progress.commit_version == 11
    assert progress.next_offsets == {topic: {0: 120, 1: 120}}

    produce_numbered(bootstrap, topic, 2, 10, start=240)
    second = run(spark, ingest_config(bootstrap, lake, unique_name, topic))  # the job skips OPTIMIZE too
    assert second.rows == 10 and second.start_offsets == {topic: {0: 120, 1: 120}}
    _assert_exactly_once(spark, lake, bootstrap, topic, 250)
