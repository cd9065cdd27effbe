"""Ingestion into bronze against the real broker, real Spark and real Delta."""

from __future__ import annotations

import pytest

from include.delta_progress import read_progress
from spark_jobs.ingest_plan import parse_config
from spark_jobs.kafka_to_bronze import run
from tests.kafka_helpers import produce_numbered, read_all

pytestmark = pytest.mark.integration


def _cfg(bootstrap, lake, pipeline, topic, *extra):
    return parse_config([
        "--pipeline", pipeline, "--bootstrap-servers", bootstrap, "--topics", topic,
        "--bronze-path", str(lake / "bronze"), "--checkpoint-root", str(lake / "checkpoints"),
        *extra,
    ])  # fmt: skip


def _bronze_records(spark, lake):
    rows = spark.read.format("delta").load(str(lake / "bronze")).select("partition", "offset", "value").collect()
    return [(r["partition"], r["offset"], bytes(r["value"])) for r in rows]


def test_two_runs_read_only_new_records_exactly_once(spark, bootstrap, make_topic, unique_name, lake):
    topic = make_topic(unique_name, partitions=3)
    produce_numbered(bootstrap, topic, 3, 300)
    first = run(spark, _cfg(bootstrap, lake, unique_name, topic))
    assert first.rows == 300

    produce_numbered(bootstrap, topic, 3, 150, start=300)
    second = run(spark, _cfg(bootstrap, lake, unique_name, topic))
    assert second.rows == 150
    assert second.epoch == first.epoch
    assert second.start_offsets == first.next_offsets

    records = _bronze_records(spark, lake)
    assert len(records) == len(set(records)) == 450
    assert set(records) == read_all(bootstrap, topic)
    progress = read_progress(str(lake / "bronze"))
    assert progress.next_offsets == {topic: {0: 150, 1: 150, 2: 150}}
