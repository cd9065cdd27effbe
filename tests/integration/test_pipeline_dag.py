"""Real DAG runs (``airflow dags test``) of a pipeline against the real broker, Spark and Delta.

Each test writes its own pipeline file (unique topic, DAG id and lakehouse) into
its own pipelines folder and runs the project's DAG folder on one shared
SQLite Airflow home.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from include.readers.kafka_admin import create_topic, delete_topic
from include.readers.kafka_state import epoch_ms
from include.tooling import airflow_local
from tests.integration.dag_helpers import (
    ORDERS_TRANSFORM,
    STANDALONE,
    assert_no_cluster_left,
    group_lags,
    order_at_10h,
)
from tests.kafka_helpers import (
    delete_records,
    produce,
    produce_at,
    produce_numbered,
    produce_transactional,
    read_all,
)

pytestmark = pytest.mark.integration


def test_full_run_then_no_data_then_transactional_data(pipeline, bootstrap):
    p = pipeline
    p.write(cluster=STANDALONE)  # the run on the transient cluster, start to teardown
    produce_numbered(bootstrap, p.topic, 3, 900)

    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    (first,) = p.ledger()
    assert (first["outcome"], first["rows"], first["lag_before"], first["lag_after"]) == ("success", 900, 900, 0)
    assert first["commits"] >= 3  # max_offsets_per_trigger=400 splits the backlog
    assert first["continuity"] == "CONTINUOUS"
    assert first["cluster_profile"] == "local_standalone" and first["master_url"].startswith("spark://127.0.0.1:")
    assert first["cluster_choice"] == "standalone cluster: backlog 900 records; cluster.workers 1"
    lines = airflow_local.summary_lines(log)
    assert any(line.startswith("continuity: CONTINUOUS") for line in lines), lines
    assert any(line.startswith("ingest: 900 rows") for line in lines), lines
    assert group_lags(bootstrap, f"kafka-delta-elt.{p.name}") == {0: "0", 1: "0", 2: "0"}
    assert_no_cluster_left(p)
    assert sorted(p.bronze_keys()) == sorted((part, off) for part, off, _ in read_all(bootstrap, p.topic))

    # Nothing new: the run is skipped by the lag sensor and starts no cluster.
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    skipped = p.ledger()[0]
    assert (skipped["outcome"], skipped["rows"], skipped["lag_before"]) == ("skipped", 0, 0)
    assert len(p.run_dirs()) == 1, "a run with nothing to do starts no cluster and no job"
    assert "start_cluster" not in [t for t, s in skipped["tasks_json"].items() if s == "success"]
    # wait_for_lag skipped the tasks after it at once: the run did not wait for Airflow to pass the skip
    # on one level per loop (dags test says "No tasks to run" on each such loop).
    assert "Skipping downstream tasks" in log and "No tasks to run" not in log, log[-4000:]

    # Transactions leave offset holes (markers, an aborted batch): continuity verifies them with Kafka.
    produce_transactional(bootstrap, p.topic, [
        (True, [(0, b"a"), (1, b"b")]), (False, [(0, b"aborted")]), (True, [(0, b"c"), (2, b"d")]),
    ])  # fmt: skip
    # A backlog this small runs in local mode inside the driver: no cluster starts.
    p.write(cluster={**STANDALONE, "local_max_records": 100})
    dirs = len(p.run_dirs())
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    third = p.ledger()[0]
    assert (third["outcome"], third["rows"], third["continuity"]) == ("success", 4, "CONTINUOUS")
    assert third["master_url"] == "local[1]"
    assert third["cluster_choice"].startswith("local[1] in the driver: backlog ")
    assert third["cluster_choice"].endswith(" records <= cluster.local_max_records 100")
    assert any(line.startswith("start_cluster: no cluster: local[1] in the driver")
               for line in airflow_local.summary_lines(log))  # fmt: skip
    assert not (p.run_dirs()[-1] / "cluster").exists() and len(p.run_dirs()) == dirs + 1
    holes = sum(part["holes"] for part in third["continuity_json"]["partitions"])
    assert holes >= 4  # three commit markers + an aborted record + its abort marker
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 904
    assert group_lags(bootstrap, f"kafka-delta-elt.{p.name}") == {0: "0", 1: "0", 2: "0"}
    assert_no_cluster_left(p)


def test_transform_in_the_dag_applies_newest_per_key_quarantines_bad_records_and_reconciles(pipeline, bootstrap):
    p = pipeline
    p.write(transform=ORDERS_TRANSFORM, cluster=STANDALONE)  # the transform's code on a cluster's executor
    good = [(i % 3, f"o{i}".encode(), order_at_10h(f"o{i}", i % 50, i)) for i in range(60)]
    bad = [
        (0, b"x1", b"{not json"), (1, b"x2", b'{"order_id": "x2", "amount": "ten", '
                                              b'"event_time": "2026-03-01T10:00:00Z"}'),
        (2, b"x3", b'{"amount": 1, "event_time": "2026-03-01T10:00:00Z"}'), (0, b"x4", b"\xc3\x28"),
    ]  # fmt: skip
    produce(bootstrap, p.topic, good + bad)

    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    (first,) = p.ledger()
    assert (first["outcome"], first["rows"], first["continuity"]) == ("success", 64, "CONTINUOUS")
    assert first["master_url"].startswith("spark://127.0.0.1:"), first["cluster_choice"]
    assert (first["silver_read"], first["silver_upserted"], first["quarantined"]) == (64, 60, 4)
    assert first["transform_json"]["check"]["ok"] is True
    lines = airflow_local.summary_lines(log)
    assert any(line.startswith("transform: read 64 from bronze: 60 upserted, 0 deleted, 4 quarantined") for line in lines), lines

    # second run: late (older) and newer events, a tombstone, a new field
    late = [(1, b"o1", order_at_10h("o1", 0, 999)), (0, b"o3", order_at_10h("o3", 59, 33, channel="web")), (2, b"o5", None)]
    produce(bootstrap, p.topic, late)
    # ... run by one application (ingest, then transform, then the maintenance now due) in local mode
    assert first["maintenance_json"] is None and first["tasks_json"]["maintain"] == "skipped"
    p.write(transform=ORDERS_TRANSFORM, cluster={**STANDALONE, "local_max_records": 10}, maintenance={"every_runs": 2})
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    second = p.ledger()[0]
    assert second["master_url"] == "local[1]", second["cluster_choice"]
    # the continuity check reads the log after the maintenance commits: they are not progress
    assert second["continuity"] == "CONTINUOUS", second["continuity_json"]
    done = second["maintenance_json"]
    assert done["due"] == "every_runs 2: this is run 2 and it was never done", done
    assert {n: done["tables"][n]["files_after"] for n in ("bronze", "silver", "quarantine", "ledger")} == {
        "bronze": 1, "silver": 1, "quarantine": 1, "ledger": 1}, done  # fmt: skip
    assert done["tables"]["bronze"]["files_before"] > 1 and second["tasks_json"]["maintain"] == "success"
    assert any(line.startswith("maintain: bronze files ") for line in airflow_local.summary_lines(log)), log[-3000:]
    assert (second["silver_read"], second["silver_upserted"], second["silver_deleted"], second["superseded"]) == (
        3, 1, 1, 1,
    )  # fmt: skip
    assert second["silver_read"] == sum(second[k] for k in ("silver_upserted", "silver_deleted", "quarantined",
                                                             "superseded"))  # fmt: skip
    assert second["transform_json"]["job"]["fields_added"][0]["name"] == "channel"

    from deltalake import DeltaTable

    silver = {r["order_id"]: r for r in DeltaTable(str(p.lake / p.name / "silver")).to_pyarrow_table().to_pylist()}
    assert len(silver) == 60
    assert float(silver["o1"]["amount"]) == 1.0  # the late event at 10:00 lost to 10:01
    assert (float(silver["o3"]["amount"]), silver["o3"]["channel"]) == (33.0, "web")
    assert silver["o5"]["_deleted"] is True
    quarantine = DeltaTable(str(p.lake / p.name / "quarantine")).to_pyarrow_table().to_pylist()
    assert sorted(bytes(r["key"]) for r in quarantine) == [b"x1", b"x2", b"x3", b"x4"]
    assert sorted(r["fields"][0] for r in quarantine) == ["amount", "order_id", "value", "value"]
    assert_no_cluster_left(p)


@pytest.mark.full
def test_retention_loss_fails_before_the_cluster_then_is_recorded_with_record_and_continue(pipeline, bootstrap):
    p = pipeline
    produce_numbered(bootstrap, p.topic, 3, 60)
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    produce_numbered(bootstrap, p.topic, 3, 30, start=60)  # offsets 20..29 of each partition
    delete_records(bootstrap, p.topic, 1, 25)

    folders = p.run_dirs()
    proc, log = p.run()
    assert proc.returncode == 1
    failed = p.ledger()[0]
    assert failed["outcome"] == "failed"
    assert f"partition {p.topic}-1: 5 records (offsets 20 to 24) were deleted" in failed["reason"]
    assert f"partition {p.topic}-1: 5 records" in log
    assert p.run_dirs() == folders, "preflight must stop the run before any cluster starts"
    assert len(p.bronze_keys()) == 60

    p.write(data_loss_policy="record_and_continue")
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    ok = p.ledger()[0]
    assert (ok["outcome"], ok["rows"], ok["lost"], ok["continuity"]) == ("success", 25, 5, "CONTINUOUS")
    assert ok["gaps_json"] == [{"topic": p.topic, "partition": 1, "from": 20, "until": 25,
                                "reason": "deleted by Kafka before it was read"}]  # fmt: skip
    gaps = [part["gaps"] for part in ok["continuity_json"]["partitions"] if part["gaps"]]
    assert gaps == [[{"topic": p.topic, "partition": 1, "from": 20, "until": 25,
                      "reason": "deleted by Kafka before it was read"}]]  # fmt: skip
    keys = set(p.bronze_keys())
    assert len(keys) == 85 and not {(1, o) for o in range(20, 25)} & keys


@pytest.mark.full
def test_a_run_under_min_records_goes_at_once_when_retention_may_soon_delete_what_waits(make_dag_pipeline, bootstrap,
                                                                                          unique_name):  # fmt: skip
    topic = f"{unique_name}.events"
    create_topic(bootstrap, topic, 1, **{"retention.ms": str(2 * 3600 * 1000)})
    p = make_dag_pipeline(topic=topic, new_topic=False)
    # Far from min_records and from max_wait: only the retention margin lets this run go now (without it,
    # the sensor would wait for ten hours and the test time out).
    p.write(lag={"min_records": 1_000_000, "max_wait_minutes": 600, "retention_margin_minutes": 30})
    written = datetime.now(UTC) - timedelta(minutes=105)  # 15 minutes before retention.ms lets Kafka delete it
    produce_at(bootstrap, topic, [(0, str(i).encode(), b"v", epoch_ms(written)) for i in range(30)])

    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    (row,) = p.ledger()
    assert (row["outcome"], row["rows"], row["continuity"]) == ("success", 30, "CONTINUOUS")
    assert 0 < row["retention_left_s"] <= 15 * 60
    assert [part["retention_left_s"] for part in row["partitions_json"]] == [row["retention_left_s"]]
    (line,) = [x for x in airflow_local.summary_lines(log) if x.startswith("wait_for_lag: ")]
    assert (f"; proceed: lag 30 < min_records 1000000, but Kafka's retention (retention.ms) may delete unread "
            f"records of {topic} partition 0 in ") in line and line.endswith("within the retention margin of 30 min")


@pytest.mark.full
def test_topic_recreated_between_runs_fails_and_writes_nothing(pipeline, bootstrap):
    p = pipeline
    produce_numbered(bootstrap, p.topic, 3, 30)
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    delete_topic(bootstrap, p.topic)
    for _ in range(30):
        try:
            create_topic(bootstrap, p.topic, 3)
            break
        except Exception:  # noqa: BLE001 - the deletion completes asynchronously
            import time

            time.sleep(1)
    produce_numbered(bootstrap, p.topic, 3, 90)  # more offsets than before: only the topic id tells

    folders = p.run_dirs()
    proc, log = p.run()
    assert proc.returncode == 1
    failed = p.ledger()[0]
    assert failed["outcome"] == "failed" and "was deleted and recreated" in failed["reason"]
    assert len(p.bronze_keys()) == 30
    assert p.run_dirs() == folders, "no cluster may start"


@pytest.mark.full
def test_job_killed_mid_run_tears_down_and_rerun_completes_exactly_once(pipeline, bootstrap):
    p = pipeline
    p.write(cluster=STANDALONE)  # the teardown of a cluster whose driver was killed
    produce_numbered(bootstrap, p.topic, 3, 1500)  # 4 batches of at most 400
    proc, log = p.run(KDE_FAILPOINT="kill-driver-after-bronze-commit:1")
    assert proc.returncode == 1
    failed = p.ledger()[0]
    assert failed["outcome"] == "failed" and failed["reason"].startswith("failed at ingest")
    assert failed["master_url"].startswith("spark://127.0.0.1:"), failed["cluster_choice"]
    assert failed["tasks_json"]["stop_cluster"] == "success"
    assert_no_cluster_left(p)
    assert 0 < len(p.bronze_keys()) < 1500  # two batches landed before the kill

    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    ok = p.ledger()[0]
    assert ok["outcome"] == "success" and ok["continuity"] == "CONTINUOUS"
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 1500
    assert group_lags(bootstrap, f"kafka-delta-elt.{p.name}") == {0: "0", 1: "0", 2: "0"}
    assert_no_cluster_left(p)


def test_dag_integrity_and_a_bad_pipeline_file(tmp_path, airflow_home):
    """Parsing imports no Kafka/Spark/Delta module and reads no connection; a bad file is reported alone."""
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    good = {"kafka": {"connection_id": "kafka_default", "topics": ["t"]}, "schedule": "*/5 * * * *"}
    (pipelines / "good_one.yaml").write_text(yaml.safe_dump(good))
    bad = {"kafka": {"connection_id": "kafka_default", "topics": ["t2"], "max_offsets_per_trigger": "lots"},
           "schedule": None}  # fmt: skip
    (pipelines / "bad_one.yaml").write_text(yaml.safe_dump(bad))
    script = tmp_path / "parse.py"
    script.write_text(PARSE_SCRIPT)
    env = airflow_local.environment(airflow_home, pipelines_dir=pipelines)
    env.pop("AIRFLOW_CONN_KAFKA_DEFAULT", None)
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]
    result = yaml.safe_load(proc.stdout.strip().splitlines()[-1])
    assert result["dag_ids"] == ["good_one"]
    assert result["heavy_modules"] == [] and result["connection_reads"] == 0
    (error_file, message), = result["import_errors"].items()
    assert error_file.endswith("pipeline_file_errors.py")
    assert re.search(r"bad_one\.yaml: kafka\.max_offsets_per_trigger: expected a positive integer", message)
    dag = result["dags"]["good_one"]
    assert dag["max_active_runs"] == 1 and "kafka-delta-elt" in dag["tags"]
    assert {"action", "reason", "offset_ranges", "from_time", "to_time"} <= set(dag["params"])
    assert dag["doc_md"] and "*/5 * * * *" in dag["schedule"]
    assert set(dag["tasks"]) == {"check_request", "wait_for_lag", "preflight", "start_cluster", "ingest", "stop_cluster",
                                 "maintain", "check_continuity", "mirror_offsets", "record_run"}  # fmt: skip
    assert dag["teardowns"] == ["stop_cluster"] and dag["setups"] == ["start_cluster"]


PARSE_SCRIPT = """
import json, sys
from airflow.sdk import BaseHook, Variable
calls = []
def refuse(*a, **k):
    calls.append(a)
    raise RuntimeError("read at parse time")
BaseHook.get_connection = classmethod(refuse)
Variable.get = staticmethod(refuse)
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=__import__("os").environ["AIRFLOW__CORE__DAGS_FOLDER"])
heavy = sorted({m.split(".")[0] for m in sys.modules
                if m.split(".")[0] in ("confluent_kafka", "pyspark", "deltalake", "pyarrow", "py4j")})
dags = {}
for dag_id, dag in bag.dags.items():
    dags[dag_id] = {
        "max_active_runs": dag.max_active_runs, "tags": sorted(dag.tags), "params": sorted(dag.params.keys()),
        "doc_md": dag.doc_md, "schedule": str(dag.schedule),
        "tasks": sorted(t.task_id for t in dag.tasks),
        "setups": sorted(t.task_id for t in dag.tasks if t.is_setup),
        "teardowns": sorted(t.task_id for t in dag.tasks if t.is_teardown),
    }
print(json.dumps({"dag_ids": sorted(bag.dag_ids), "import_errors": bag.import_errors,
                  "heavy_modules": heavy, "connection_reads": len(calls), "dags": dags}))
"""

