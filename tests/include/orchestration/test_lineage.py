"""Lineage of a run's tasks (include/orchestration/lineage.py): dataset names, and what each step's summary
becomes as OpenLineage datasets and facets, serialised by OpenLineage's own client."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
from openlineage.client.naming import dataset as naming
from openlineage.client.serde import Serde

from include import settings
from include.orchestration import lineage
from include.orchestration.lineage_facets import KEYS, SCHEMA_ID

ORDERS = {"schema": {"order_id": {"type": "string"}, "amount": {"type": "decimal(10,2)"},
                     "event_time": {"type": "timestamp"}}, "key": "order_id", "ordering": "event_time"}  # fmt: skip
SCHEMA = json.loads((settings.PROJECT_ROOT / "docs" / "lineage-facets.schema.json").read_text())


def _json(value) -> dict:
    return json.loads(Serde.to_json(value))


def _check_facet(key: str, facet: dict) -> None:
    """A custom facet matches its definition in docs/lineage-facets.schema.json, which its URL names."""
    name = KEYS[key].__name__
    assert facet["_schemaURL"] == f"{SCHEMA_ID}#/$defs/{name}" and facet["_producer"]
    jsonschema.validate(facet, {**SCHEMA, "$ref": f"#/$defs/{name}"})


@pytest.mark.parametrize(("servers", "namespace"), [
    ("b1:9092", "kafka://b1:9092"),
    ("b1:9093,b2:9093", "kafka://b1:9093"),
    (" SASL_SSL://broker.example:9094 , b2:9094", "kafka://broker.example:9094"),
    ("broker", "kafka://broker:9092"),
    ("[::1]:19092", "kafka://[::1]:19092"),
])  # fmt: skip
def test_a_topic_is_named_by_the_first_bootstrap_server_as_openlineage_names_it(servers, namespace):
    assert lineage.kafka_namespace(servers) == namespace
    host, port = namespace.removeprefix("kafka://").rsplit(":", 1)
    assert naming.Kafka(bootstrap_server_host=host, port=port, topic="t").get_namespace() == namespace


def test_no_bootstrap_server_is_an_error():
    with pytest.raises(ValueError, match="no bootstrap server"):
        lineage.kafka_namespace(" ,b2:9092")


def test_tables_are_named_by_their_store_as_openlineage_names_them(tmp_path, monkeypatch):
    assert lineage.table_dataset("s3a://lake/prod/orders/silver") == ("s3://lake", "prod/orders/silver")
    s3 = naming.S3(bucket_name="lake", object_key="prod/orders/silver")
    assert lineage.table_dataset("s3://lake/prod/orders/silver/") == (s3.get_namespace(), s3.get_name())
    local = naming.LocalFileSystem(path=str(tmp_path / "silver"))
    assert lineage.table_dataset(str(tmp_path / "silver")) == (local.get_namespace(), local.get_name())
    assert lineage.table_dataset(f"file://{tmp_path}/silver") == ("file", str(tmp_path / "silver"))
    monkeypatch.chdir(tmp_path)
    assert lineage.table_dataset("lake/bronze") == ("file", str(tmp_path / "lake" / "bronze"))
    with pytest.raises(ValueError, match="only local and S3"):
        lineage.table_dataset("abfss://c@account.dfs.core.windows.net/silver")


def test_ingest_reports_each_topic_it_read_with_its_offsets_and_bronzes_new_version(make_pipeline):
    cfg = make_pipeline(kafka={"connection_id": "kafka_test", "topic_pattern": "orders\\..*"})
    summary = {"run_id": "r1", "epoch": 2, "rows": 7, "commits": 2, "batches": [{}, {}], "bronze_version": 5,
               "duration_s": 1.0, "partitions": {"orders.eu": {"0": {"from": 10, "until": 14, "rows": 4},
                                                              "1": {"from": 0, "until": 2, "rows": 2}},
                                                 "orders.us": {"0": {"from": 3, "until": 4, "rows": 1}}}}  # fmt: skip
    got = lineage.ingest_lineage(cfg, "b1:9092,b2:9092", summary)
    inputs = [_json(d) for d in got.inputs]
    assert [(d["namespace"], d["name"], d["inputFacets"]["inputStatistics"]["rowCount"]) for d in inputs] == [
        ("kafka://b1:9092", "orders.eu", 6), ("kafka://b1:9092", "orders.us", 1)]  # fmt: skip
    (bronze,) = [_json(d) for d in got.outputs]
    assert (bronze["namespace"], bronze["name"]) == ("file", cfg.tables.bronze_path)
    assert bronze["facets"]["version"]["datasetVersion"] == "5"
    assert bronze["outputFacets"]["outputStatistics"]["rowCount"] == 7
    offsets = _json(got.run_facets["kde_kafkaOffsets"])
    _check_facet("kde_kafkaOffsets", offsets)
    assert (offsets["kind"], offsets["epoch"], offsets["rows"], offsets["commits"]) == ("ingest", 2, 7, 2)
    assert offsets["partitions"] == summary["partitions"]
    # starting: the topics the file names (none for a pattern), and bronze
    planned = lineage.ingest_lineage(cfg, "b1:9092", None)
    assert planned.inputs == [] and [d.name for d in planned.outputs] == [cfg.tables.bronze_path]
    assert [d.name for d in lineage.ingest_lineage(make_pipeline(), "b1:9092", None).inputs] == ["t"]


def test_a_backfill_is_reported_as_such_with_the_offsets_it_inserted(make_pipeline):
    summary = {"kind": "backfill", "run_id": "r1", "read": 5, "inserted": 3, "present": 2, "rows": 3, "commits": 1,
               "ranges": [{"topic": "t", "partition": 0, "from": 0, "until": 5}], "bronze_version": 9,
               "duration_s": 1.0, "partitions": {"t": {"0": {"from": 0, "until": 5, "rows": 3}}}}  # fmt: skip
    got = lineage.ingest_lineage(make_pipeline(), "b1:9092", summary)
    offsets = _json(got.run_facets["kde_kafkaOffsets"])
    _check_facet("kde_kafkaOffsets", offsets)
    assert (offsets["kind"], offsets["rows"], offsets.get("epoch"), offsets["partitions"]) == (
        "backfill", 3, None, summary["partitions"])  # fmt: skip
    assert [d.name for d in got.inputs] == ["t"]


def _transform_summary(**changes) -> dict:
    return {"run_id": "r1", "epoch": 1, "read": 10, "upserted": 5, "deleted": 1, "quarantined": 3, "superseded": 1,
            "silver_version": 7, "duration_s": 1.0, "quarantine_fields": {"amount": 2, "value": 1},
            "silver_columns": [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "decimal(10,2)"},
                               {"name": "_deleted", "type": "boolean"}], **changes}  # fmt: skip


def test_the_transform_reports_its_field_rules_as_assertions_silvers_schema_and_its_outcomes(make_pipeline):
    cfg = make_pipeline(transform=ORDERS)
    got = lineage.transform_lineage(cfg, _transform_summary())
    (bronze,) = [_json(d) for d in got.inputs]
    assert bronze["name"] == cfg.tables.bronze_path
    assertions = bronze["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert [(a["assertion"], a["column"], a["success"], a["actual"]) for a in assertions] == [
        ("field rules", "amount", False, "2"), ("field rules", "value", False, "1")]  # fmt: skip
    silver, quarantine = (_json(d) for d in got.outputs)
    assert (silver["name"], quarantine["name"]) == (cfg.tables.silver_path, cfg.tables.quarantine_path)
    assert [(f["name"], f["type"]) for f in silver["facets"]["schema"]["fields"]] == [
        ("order_id", "string"), ("amount", "decimal(10,2)"), ("_deleted", "boolean")]  # fmt: skip
    assert silver["facets"]["version"]["datasetVersion"] == "7"
    assert silver["outputFacets"]["outputStatistics"]["rowCount"] == 6  # upserted and deleted rows
    assert quarantine["outputFacets"]["outputStatistics"]["rowCount"] == 3
    outcome = _json(got.run_facets["kde_transformOutcome"])
    _check_facet("kde_transformOutcome", outcome)
    assert {k: outcome[k] for k in ("read", "upserted", "deleted", "quarantined", "superseded", "silverVersion")} == {
        "read": 10, "upserted": 5, "deleted": 1, "quarantined": 3, "superseded": 1, "silverVersion": 7}  # fmt: skip
    assert outcome["quarantineFields"] == {"amount": 2, "value": 1}


def test_a_transform_that_quarantined_nothing_passes_its_assertion(make_pipeline):
    got = lineage.transform_lineage(make_pipeline(transform=ORDERS), _transform_summary(quarantined=0, quarantine_fields={}))
    (assertion,) = _json(got.inputs[0])["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert (assertion["success"], assertion["actual"], assertion.get("column")) == (True, "0", None)


def test_the_continuity_verdict_is_an_assertion_on_bronze_and_its_report_a_facet(make_pipeline):
    cfg = make_pipeline(transform=ORDERS)
    report = {"ok": False, "run_id": "r1", "commits": 1, "rows": 4,
              "partitions": [{"topic": "t", "partition": 0, "from": 0, "until": 4, "rows": 4, "ranges": [],
                              "holes": [], "gaps": []}],
              "violations": ["t[0]: the run started at offset 4 but bronze ended at 2"], "notes": []}  # fmt: skip
    got = lineage.continuity_lineage(cfg, report)
    bronze, silver = (_json(d) for d in got.inputs)
    assert (bronze["name"], silver["name"]) == (cfg.tables.bronze_path, cfg.tables.silver_path)
    (verdict,) = bronze["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert (verdict["assertion"], verdict["success"], verdict["actual"]) == ("offset continuity", False, "1 violations")
    facet = _json(got.run_facets["kde_continuity"])
    _check_facet("kde_continuity", facet)
    assert (facet["continuous"], facet["violations"], facet["partitions"][0]["until"]) == (
        False, report["violations"], 4)  # fmt: skip
    assert (facet["earlierTriesRows"], facet["earlierTriesCommits"]) == (0, 0)
    ok = lineage.continuity_lineage(make_pipeline(), {**report, "ok": True, "violations": []})
    assert [d.name for d in ok.inputs] == [cfg.tables.bronze_path]  # no transform: bronze only
    assert _json(ok.inputs[0])["inputFacets"]["dataQualityAssertions"]["assertions"][0]["success"] is True


def test_the_continuity_facet_counts_what_earlier_tries_committed(make_pipeline):
    """A try that died after a commit sends only a FAIL event; its rows are counted in the check's facet."""
    report = {"ok": True, "run_id": "r1", "commits": 3, "rows": 4400, "earlier_tries_rows": 1600,
              "earlier_tries_commits": 2, "partitions": [], "violations": [], "notes": [],
              "backfill": {"earlier_tries_inserted": 7, "earlier_tries_commits": 1}}  # fmt: skip
    facet = _json(lineage.continuity_lineage(make_pipeline(), report).run_facets["kde_continuity"])
    _check_facet("kde_continuity", facet)
    assert (facet["rows"], facet["earlierTriesRows"], facet["earlierTriesCommits"]) == (4400, 1607, 3)


def test_maintenance_reports_the_tables_it_rewrote_and_nothing_before_it_knows(make_pipeline):
    cfg = make_pipeline(transform=ORDERS)
    tables = {"bronze": {"files_before": 9, "files_after": 1}, "silver": {"skipped": "no commit since"}}
    got = lineage.maintain_lineage(cfg, {"run_id": "r1", "tables": tables})
    assert [d.name for d in got.outputs] == [cfg.tables.bronze_path, cfg.tables.silver_path]
    facet = _json(got.run_facets["kde_maintenance"])
    _check_facet("kde_maintenance", facet)
    assert facet["tables"] == tables
    none = lineage.maintain_lineage(cfg, None)
    assert (none.inputs, none.outputs, none.run_facets) == ([], [], {})


def test_the_schema_file_is_the_one_the_facets_name():
    assert SCHEMA["$id"] == SCHEMA_ID and set(SCHEMA["$defs"]) >= {c.__name__ for c in KEYS.values()}
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_dag_files_and_operators_import_no_openlineage_module():
    """Lineage costs nothing until a transport asks for it: parsing DAGs imports neither OpenLineage's
    client nor the provider's extractors (Airflow itself reads every provider's package metadata)."""
    code = ("import sys; import include.orchestration.dag_factory, include.orchestration.ingest_operator; "
            "print(sorted(m for m in sys.modules if m.startswith('openlineage') or m.startswith("
            "'airflow.providers.openlineage.') and not m.endswith('.get_provider_info')))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=settings.PROJECT_ROOT).stdout  # fmt: skip
    assert out.strip() == "[]"


def test_each_operator_reports_its_steps_summary_once_it_has_one(make_pipeline, kafka_connection, capsys, monkeypatch):
    from include.orchestration import tasks
    from include.orchestration.ingest_operator import IngestOperator
    from include.orchestration.step_operators import MaintainOperator, TransformOperator
    from include.orchestration.tasks import ContinuityOperator

    cfg = make_pipeline(transform=ORDERS)
    ingest = IngestOperator(task_id="ingest", pipeline=cfg)
    # before the step: the pipeline file's datasets, the bootstrap server from the pipeline's connection
    assert [(d.namespace, d.name) for d in ingest.get_openlineage_facets_on_start().inputs] == [("kafka://b1:9092", "t")]
    summary = {"run_id": "r1", "epoch": 0, "rows": 2, "commits": 1, "batches": [{}], "bronze_version": 1,
               "duration_s": 1.0, "partitions": {"t": {"0": {"from": 0, "until": 2, "rows": 2}}}}  # fmt: skip
    assert ingest._finish(summary) == {**summary, "try_number": 1}  # the try that reported it
    assert "SUMMARY ingest: 2 rows" in capsys.readouterr().out
    done = ingest.get_openlineage_facets_on_complete(None)
    assert done.run_facets["kde_kafkaOffsets"].partitions == summary["partitions"]
    assert ingest.get_openlineage_facets_on_failure(None).run_facets == {}

    transform = TransformOperator(task_id="transform", pipeline=cfg)
    assert transform.get_openlineage_facets_on_complete(None).run_facets == {}  # no summary: nothing claimed
    transform._finish(_transform_summary())
    assert transform.get_openlineage_facets_on_complete(None).run_facets["kde_transformOutcome"].upserted == 5

    maintain = MaintainOperator(task_id="maintain", pipeline=cfg)
    maintain._finish({"run_id": "r1", "tables": {"bronze": {"files_before": 3, "files_after": 1, "bytes_before": 10,
                                                            "bytes_after": 9, "seconds": 1.0}}})  # fmt: skip
    assert [d.name for d in maintain.get_openlineage_facets_on_complete(None).outputs] == [cfg.tables.bronze_path]

    continuity = ContinuityOperator(task_id="check_continuity", pipeline=cfg)
    assert [d.name for d in continuity.get_openlineage_facets_on_start().inputs] == [
        cfg.tables.bronze_path, cfg.tables.silver_path]  # fmt: skip
    # a broken chain fails the task, and its report still reaches the FAIL event
    report = {"ok": False, "commits": 1, "rows": 2, "partitions": [], "violations": ["broken"], "notes": []}

    def broken(cfg, **kwargs):
        raise tasks.FailTask("continuity check failed: broken", key="failed_report", report=report)

    monkeypatch.setattr(tasks, "check_continuity", broken)
    with pytest.raises(tasks.FailTask, match="broken"):
        continuity._check(cfg, run_id="r1")
    failed = continuity.get_openlineage_facets_on_failure(None)
    assert failed.run_facets["kde_continuity"].violations == ["broken"]
    assert failed.inputs[0].inputFacets["dataQualityAssertions"].assertions[0].success is False
