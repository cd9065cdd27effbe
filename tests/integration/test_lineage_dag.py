"""OpenLineage events of a real DAG run, read back from the provider's file transport (docs/lineage.md).

The run is a real ``airflow dags test`` process with a transport configured (the warm
server refuses other Airflow settings, so it is not forked from it); the events are
what a consumer such as Marquez would receive, checked against what the run did:
its ledger row and its tables. A transport that cannot send costs the run nothing.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.dag_helpers import ORDERS_TRANSFORM, order_at_10h
from tests.kafka_helpers import produce

pytestmark = pytest.mark.integration

NAMESPACE = "kde-lineage-test"


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _task_events(events: list[dict], dag_id: str, task_id: str) -> dict[str, dict]:
    """The task's events by type (START, COMPLETE, FAIL)."""
    return {e["eventType"]: e for e in events if e["job"]["name"] == f"{dag_id}.{task_id}"}


def _dag_run_id(home: Path, dag_id: str, monkeypatch) -> str:
    """The OpenLineage run id of the DAG's one run, computed as the provider computes it."""
    from airflow.providers.openlineage.plugins.adapter import OpenLineageAdapter

    with sqlite3.connect(home / "airflow.db") as db:
        (logical, after, clear), = db.execute(
            "SELECT logical_date, run_after, clear_number FROM dag_run WHERE dag_id = ?", (dag_id,)).fetchall()  # fmt: skip
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", NAMESPACE)  # the id hashes the namespace in
    instant = datetime.fromisoformat(logical or after).replace(tzinfo=UTC)
    return OpenLineageAdapter.build_dag_run_id(dag_id=dag_id, logical_date=instant, clear_number=clear or 0)


def test_a_run_reports_what_each_task_read_and_wrote_with_its_offsets_counts_and_schema(
    pipeline, bootstrap, airflow_home, monkeypatch
):
    p = pipeline
    p.write(transform=ORDERS_TRANSFORM)
    good = [(i % 3, f"o{i}".encode(), order_at_10h(f"o{i}", i % 50, i)) for i in range(30)]
    bad = [(0, b"x1", b"{not json"), (1, b"x2", b'{"order_id": "x2", "amount": -1, "event_time": "2026-03-01T10:00:00Z"}')]
    produce(bootstrap, p.topic, good + bad)
    events_file = p.var / "lineage" / "events.jsonl"
    events_file.parent.mkdir(parents=True)
    transport = {"type": "file", "log_file_path": str(events_file), "append": True}

    proc, log = p.run(AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(transport),
                      AIRFLOW__OPENLINEAGE__NAMESPACE=NAMESPACE, AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD="True")  # fmt: skip
    assert proc.returncode == 0, log[-5000:]
    (run,) = p.ledger()
    assert (run["rows"], run["silver_upserted"], run["quarantined"]) == (32, 30, 2)
    events = _events(events_file)
    assert "Failed to emit OpenLineage" not in log and "OpenLineage method failed" not in log, log[-5000:]

    ingest = _task_events(events, p.name, "ingest")
    assert set(ingest) >= {"START", "COMPLETE"}, sorted(e["job"]["name"] for e in events)
    done = ingest["COMPLETE"]
    (topic,) = done["inputs"]
    assert (topic["namespace"], topic["name"]) == (f"kafka://{bootstrap}", p.topic)
    assert topic["inputFacets"]["inputStatistics"]["rowCount"] == 32
    (bronze,) = done["outputs"]
    assert (bronze["namespace"], bronze["name"]) == ("file", str(p.lake / p.name / "bronze"))
    assert bronze["outputFacets"]["outputStatistics"]["rowCount"] == 32
    offsets = done["run"]["facets"]["kde_kafkaOffsets"]["partitions"][p.topic]
    # the offsets the ingest step reported are those the continuity check read back from bronze's log
    checked = {str(x["partition"]): (x["from"], x["until"], x["rows"]) for x in run["continuity_json"]["partitions"]}
    assert {k: (v["from"], v["until"], v["rows"]) for k, v in offsets.items()} == checked
    assert sum(v[2] for v in checked.values()) == 32

    transform = _task_events(events, p.name, "transform")["COMPLETE"]
    (read,) = transform["inputs"]
    assert read["name"] == str(p.lake / p.name / "bronze")
    failed = {a["column"]: a["actual"] for a in read["inputFacets"]["dataQualityAssertions"]["assertions"]
              if not a["success"]}  # fmt: skip
    assert failed == {f: str(n) for f, n in run["transform_json"]["job"]["quarantine_fields"].items()}, failed
    silver, quarantine = transform["outputs"]
    assert (silver["name"], quarantine["name"]) == (str(p.lake / p.name / "silver"), str(p.lake / p.name / "quarantine"))
    from deltalake import DeltaTable

    table = DeltaTable(silver["name"])
    columns = [f["name"] for f in silver["facets"]["schema"]["fields"]]
    assert columns == [f.name for f in table.schema().fields]  # the facet is silver's real schema
    # the version is silver's last data commit (table properties may follow it in the same task)
    version = int(silver["facets"]["version"]["datasetVersion"])
    assert version == run["silver_version_after"]
    assert {h["version"]: h["operation"] for h in table.history()}[version] in ("MERGE", "WRITE")  # WRITE: into an empty silver
    assert quarantine["outputFacets"]["outputStatistics"]["rowCount"] == 2
    outcome = transform["run"]["facets"]["kde_transformOutcome"]
    assert {k: outcome[k] for k in ("read", "upserted", "quarantined")} == {
        "read": run["silver_read"], "upserted": run["silver_upserted"], "quarantined": run["quarantined"]}  # fmt: skip

    continuity = _task_events(events, p.name, "check_continuity")["COMPLETE"]
    assert continuity["run"]["facets"]["kde_continuity"]["continuous"] is True
    (verdict,) = continuity["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert verdict["success"] is True

    # every task event names the DAG run as its parent, as the provider identifies it
    parent = _dag_run_id(airflow_home, p.name, monkeypatch)
    task_events = [e for e in events if e["job"]["name"].startswith(f"{p.name}.")]
    assert {e["run"]["facets"]["parent"]["run"]["runId"] for e in task_events} == {parent}
    assert {e["run"]["facets"]["parent"]["job"]["name"] for e in task_events} == {p.name}
    assert {e["job"]["namespace"] for e in task_events} == {NAMESPACE}

    # a transport that cannot send costs a warning in the task logs, never the run
    produce(bootstrap, p.topic, [(0, b"o99", order_at_10h("o99", 1, 1))])
    gone = {**transport, "log_file_path": str(p.var / "no-such-folder" / "events.jsonl")}
    proc, log = p.run(AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(gone), AIRFLOW__OPENLINEAGE__NAMESPACE=NAMESPACE,
                      AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD="True")  # fmt: skip
    assert proc.returncode == 0, log[-5000:]
    assert p.ledger()[0]["rows"] == 1 and p.ledger()[0]["continuity"] == "CONTINUOUS"
    assert "Failed to emit OpenLineage `COMPLETE` event" in log and _events(events_file) == events
