"""Where the table stands, through real DAG runs: ``starting_offsets: latest``, a RESTORE, a table
replaced by an older copy. Real broker, Spark and Delta; bronze is compared with Kafka record by record.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from include.readers.kafka_admin import create_topic
from include.readers.kafka_state import read_topics
from tests.integration.dag_helpers import assert_no_cluster_left
from tests.kafka_helpers import produce_numbered, read_all

pytestmark = pytest.mark.integration


def _latest(bootstrap: str, topic: str) -> dict[int, int]:
    state = read_topics({"bootstrap.servers": bootstrap}, topics=(topic,), pattern=None, timeout_s=20)[topic]
    return {p: s.latest for p, s in state.partitions.items()}


@pytest.mark.full
def test_latest_ingests_what_is_produced_after_the_first_run_and_new_topics_from_earliest(pipeline, bootstrap):
    p = pipeline
    prefix = p.topic.rsplit(".", 1)[0]
    p.write(kafka={"connection_id": "kafka_default", "topic_pattern": re.escape(prefix) + r"\..*",
                   "starting_offsets": "latest", "max_offsets_per_trigger": 400})  # fmt: skip
    produce_numbered(bootstrap, p.topic, 3, 60)  # before the pipeline: never read
    at_setup = _latest(bootstrap, p.topic)

    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    (first,) = p.ledger()
    assert (first["outcome"], first["rows"]) == ("success", 0)
    assert first["position_set_json"]["action"] == "starting_offsets"
    assert first["position_set_json"]["positions"] == {p.topic: {str(k): v for k, v in at_setup.items()}}
    assert first["continuity"] == "CONTINUOUS"

    produce_numbered(bootstrap, p.topic, 3, 200, start=60)
    later = f"{prefix}.later"
    create_topic(bootstrap, later, 2)
    produce_numbered(bootstrap, later, 2, 30)  # a topic the pattern gains: read from its earliest offset
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    second = p.ledger()[0]
    assert (second["outcome"], second["rows"], second["continuity"]) == ("success", 230, "CONTINUOUS")
    assert second["position_set_json"] is None

    produce_numbered(bootstrap, p.topic, 3, 100, start=260)
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    third = p.ledger()[0]
    assert (third["outcome"], third["rows"], third["continuity"]) == ("success", 100, "CONTINUOUS")

    from deltalake import DeltaTable

    table = DeltaTable(str(p.lake / p.name / "bronze")).to_pyarrow_table(columns=["topic", "partition", "offset"])
    got = list(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))
    expected = {(p.topic, part, off) for part, off, _ in read_all(bootstrap, p.topic) if off >= at_setup[part]}
    expected |= {(later, part, off) for part, off, _ in read_all(bootstrap, later)}
    assert len(got) == len(set(got)) == 330 and set(got) == expected
    assert_no_cluster_left(p)


def test_restore_is_refused_before_a_cluster_then_reread_and_an_older_copy_is_refused_by_the_ledger(
    pipeline, bootstrap, spark
):
    from delta.tables import DeltaTable

    p = pipeline
    bronze = p.lake / p.name / "bronze"
    p.write(kafka={"connection_id": "kafka_default", "topics": [p.topic], "max_offsets_per_trigger": 300})
    produce_numbered(bootstrap, p.topic, 3, 900)
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    backup = p.lake / "bronze-backup"
    shutil.copytree(bronze, backup)  # a file-level backup: rows, log and state as they are now

    DeltaTable.forPath(spark, str(bronze)).restoreToVersion(1)  # undoes the last of the three batches
    produce_numbered(bootstrap, p.topic, 3, 300, start=900)
    folders = p.run_dirs()
    proc, log = p.run()
    assert proc.returncode == 1
    refused = p.ledger()[0]
    assert refused["outcome"] == "failed" and "was restored to version 1" in refused["reason"]
    assert "'reread_after_restore' (airflow dags trigger " + p.name in refused["reason"]
    assert "'keep_position_after_restore'" in refused["reason"]
    assert p.run_dirs() == folders, "no cluster may start"

    proc, log = p.run({"action": "reread_after_restore", "reason": "the restore undid good batches"})
    assert proc.returncode == 0, log[-5000:]
    reread = p.ledger()[0]
    assert (reread["outcome"], reread["continuity"], reread["action"]) == ("success", "CONTINUOUS",
                                                                            "reread_after_restore")  # fmt: skip
    assert reread["position_set_json"]["action"] == "reread_after_restore"
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 1200
    assert set(keys) == {(part, off) for part, off, _ in read_all(bootstrap, p.topic)}

    # The table replaced by the older backup: it stands at 300 per partition, the ledger says 400.
    shutil.rmtree(bronze)
    shutil.copytree(backup, bronze)
    proc, log = p.run()
    assert proc.returncode == 1
    ahead = p.ledger()[0]
    assert ahead["outcome"] == "failed"
    for part in range(3):
        assert f"{p.topic}-{part} table 300 < ledger 400" in ahead["reason"], ahead["reason"]
    assert "'reestablish_position'" in ahead["reason"]
    assert len(p.bronze_keys()) == 900
    assert_no_cluster_left(p)


def _newest(folder, kind: str):
    from include.readers import spark_checkpoint

    epochs = spark_checkpoint.epoch_dirs(folder)
    newest = Path(epochs[max(epochs)]) / kind
    return newest / str(spark_checkpoint.batch_ids(newest)[-1])


@pytest.mark.full
def test_damaged_or_lost_checkpoints_heal_from_the_tables_exactly_once(pipeline, bootstrap):
    from deltalake import DeltaTable

    from include.tooling import airflow_local
    from tests.integration.dag_helpers import ORDERS_TRANSFORM, order_at_10h
    from tests.kafka_helpers import produce

    p = pipeline
    p.write(transform=ORDERS_TRANSFORM)
    checkpoints = p.lake / p.name / "_checkpoints"
    produce(bootstrap, p.topic, [(i % 3, f"o{i}".encode(), order_at_10h(f"o{i}", i % 50, i)) for i in range(90)])
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]

    offsets, commits = _newest(checkpoints / "bronze", "offsets"), _newest(checkpoints / "silver", "commits")
    offsets.write_bytes(offsets.read_bytes()[:40])  # a full disk: the newest entries cut short
    commits.write_bytes(b"")
    produce(bootstrap, p.topic, [(i % 3, f"o{i}".encode(), order_at_10h(f"o{i}", i % 50, i)) for i in range(90, 150)])
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    healed = p.ledger()[0]
    assert (healed["outcome"], healed["rows"], healed["continuity"]) == ("success", 60, "CONTINUOUS")
    lines = airflow_local.summary_lines(log)
    assert any(f"checkpoint rebuilt: checkpoint of epoch 1 is damaged: {offsets}: line 2 is not JSON" in line
               for line in lines), lines  # fmt: skip
    assert healed["transform_json"]["job"]["checkpoint_rebuilt"]["reason"].startswith(
        f"checkpoint of epoch 0 is damaged: {commits}: expected a version line"
    )

    commits = _newest(checkpoints / "bronze", "commits")
    commits.write_bytes(commits.read_bytes()[:4])
    shutil.rmtree(checkpoints / "silver")
    produce(bootstrap, p.topic, [(i % 3, f"o{i}".encode(), order_at_10h(f"o{i}", i % 50, i)) for i in range(150, 180)])
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    third = p.ledger()[0]
    assert (third["outcome"], third["rows"], third["continuity"]) == ("success", 30, "CONTINUOUS")
    lines = airflow_local.summary_lines(log)
    assert any(f"checkpoint rebuilt: checkpoint of epoch 2 is damaged: {commits}: line 2 is not JSON" in line
               for line in lines), lines  # fmt: skip
    assert third["transform_json"]["job"]["checkpoint_rebuilt"]["reason"] == "no checkpoint found"

    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 180
    assert set(keys) == {(part, off) for part, off, _ in read_all(bootstrap, p.topic)}
    silver = DeltaTable(str(p.lake / p.name / "silver")).to_pyarrow_table(columns=["order_id"]).column(0).to_pylist()
    assert sorted(silver) == sorted(f"o{i}" for i in range(180))
    assert_no_cluster_left(p)
