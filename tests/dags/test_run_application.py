"""One Spark application per run: what the ingest task submits, and what the transform task reports.

Unit tests of the operators' logic with the hook's submit replaced; the
application itself runs for real in ``tests/integration/test_transform_silver.py``
and in every DAG test with a transform.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from include import settings
from include.orchestration.ingest_operator import IngestOperator
from include.orchestration.step_operators import MaintainOperator, TransformOperator
from include.spark import jvm_deps, spark_submit
from spark_jobs import run_steps
from tests.fakes import FakeTI

RUN_ID = "manual__2026-03-01T10:00:00+00:00"
INGEST = {"rows": 3, "batches": [1], "epoch": 0, "bronze_version": 1, "duration_s": 1.0, "checkpoint_rebuilt": None}
TRANSFORM = {"run_id": RUN_ID, "read": 3, "upserted": 3, "deleted": 0, "quarantined": 0, "superseded": 0,
             "silver_version": 1, "epoch": 0, "duration_s": 1.0}  # fmt: skip


def tried(summary: dict, try_number: int = 1) -> dict:
    """A step's XCom: the job's summary with the try that reported it."""
    return {**summary, "try_number": try_number}


@pytest.fixture(autouse=True)
def _env(kafka_connection, monkeypatch):
    monkeypatch.delenv(settings.SPARK_LOG_LEVEL_ENV, raising=False)
    monkeypatch.setattr(jvm_deps, "spark_jars", lambda: [Path("/cache/jars/delta-spark.jar")])
    monkeypatch.setattr(spark_submit, "package_py_files", lambda *a, **k: Path("/cache/build/kde_jobs.zip"))


def _pipeline(make_pipeline, transform: bool = True):
    """Pipeline ``orders`` on topic ``orders.v1`` (the ``make_pipeline`` fixture), with a transform unless told."""
    data: dict[str, Any] = {"kafka": {"connection_id": "kafka_test", "topics": ["orders.v1"]}, "cluster": {"workers": 1}}
    if transform:
        data["transform"] = {"schema": {"id": {"type": "string", "required": True}, "ts": "timestamp"},
                             "key": "id", "ordering": "ts"}  # fmt: skip
    return make_pipeline("orders", **data)


def _ti(try_number: int = 1, maintenance: dict | None = None) -> FakeTI:
    return FakeTI(try_number, preflight={"job_file": {"topic_ids": {}, "accepted_gaps": []}, "maintenance": maintenance})


def _context(try_number: int = 1, maintenance: dict | None = None) -> dict[str, Any]:
    return {"run_id": RUN_ID, "ti": _ti(try_number, maintenance), "dag_run": SimpleNamespace(run_type="manual")}


def _submits(monkeypatch, outcome) -> list[list[str]]:
    """Replace the hook's submit: record the command, then ``outcome(cmd)`` plays the application."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    seen: list[list[str]] = []

    def submit(hook, application: str = "", **kwargs: Any) -> None:
        cmd = hook._build_spark_submit_command(application)
        seen.append(cmd)
        outcome(cmd)

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    return seen


def _steps(cmd: list[str]) -> dict:
    arg = next(a for a in cmd if a.startswith("--steps-file="))
    return json.loads(Path(arg.split("=", 1)[1]).read_text())


def _arg(args: list[str], name: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"--{name}="))


def test_with_a_transform_the_ingest_task_submits_both_steps_as_one_application(make_pipeline, monkeypatch):
    cfg = _pipeline(make_pipeline)

    def app(cmd):
        steps = _steps(cmd)["steps"]
        Path(_arg(steps[0]["args"], "summary-path")).write_text(json.dumps(INGEST))
        Path(_arg(steps[1]["args"], "summary-path")).write_text(json.dumps(TRANSFORM))

    seen = _submits(monkeypatch, app)
    op = IngestOperator(task_id="ingest", pipeline=cfg, master="spark://127.0.0.1:7077")
    assert op.execute(_context()) == tried(INGEST)
    (cmd,) = seen
    assert str(settings.PROJECT_ROOT / "spark_jobs" / "run_steps.py") in cmd
    steps = _steps(cmd)
    assert [s["job"] for s in steps["steps"]] == ["kafka_to_bronze", "bronze_to_silver"]
    # Each step gets exactly the arguments its job takes alone (the run_steps parser checks them too).
    assert _arg(steps["steps"][0]["args"], "pipeline") == "orders"
    assert _arg(steps["steps"][1]["args"], "summary-path").endswith("transform-summary.json")
    assert steps["steps"][1]["error_path"].endswith("transform-error.json")
    parsed = run_steps.read_steps(_arg(cmd, "steps-file"))
    assert parsed.pipeline == "orders" and len(parsed.steps) == 2

    # The transform task reports that step; it submits nothing.
    seen.clear()
    assert TransformOperator(task_id="transform", pipeline=cfg).execute(_context()) == tried(TRANSFORM)
    assert seen == []


def test_without_a_transform_the_ingest_task_submits_its_job_alone(make_pipeline, monkeypatch):
    cfg = _pipeline(make_pipeline, transform=False)
    seen = _submits(monkeypatch, lambda cmd: Path(_arg(cmd, "summary-path")).write_text(json.dumps(INGEST)))
    IngestOperator(task_id="ingest", pipeline=cfg, master="spark://127.0.0.1:7077").execute(_context())
    assert str(settings.PROJECT_ROOT / "spark_jobs" / "kafka_to_bronze.py") in seen[0]


def _failed(job: str, message: str) -> dict[str, Any]:
    """The failure envelope a later step of the run's application writes to its error file."""
    from include.contract.errors import PipelineError
    from include.contract.failure import Failure

    return Failure.of(PipelineError(message, pipeline="orders"), job=job, pipeline="orders", run_id=RUN_ID).to_json()


def test_transform_failure_in_the_application_fails_the_transform_task_not_ingest(make_pipeline, monkeypatch):
    cfg = _pipeline(make_pipeline)

    def app(cmd):
        steps = _steps(cmd)["steps"]
        Path(_arg(steps[0]["args"], "summary-path")).write_text(json.dumps(INGEST))
        Path(steps[1]["error_path"]).write_text(json.dumps(_failed("bronze_to_silver", "silver is odd")))

    seen = _submits(monkeypatch, app)
    assert IngestOperator(task_id="ingest", pipeline=cfg, master="spark://x:7077").execute(_context()) == tried(INGEST)
    from airflow.sdk.exceptions import AirflowException

    seen.clear()
    with pytest.raises(AirflowException, match="failed in the run's Spark application: silver is odd"):
        TransformOperator(task_id="transform", pipeline=cfg, master="spark://x:7077").execute(_context())
    assert seen == []

    # Its retry submits the transform alone.
    seen_retry = _submits(monkeypatch, lambda cmd: Path(_arg(cmd, "summary-path")).write_text(json.dumps(TRANSFORM)))
    op = TransformOperator(task_id="transform", pipeline=cfg, master="spark://x:7077")
    assert op.execute(_context(try_number=2)) == tried(TRANSFORM, 2)
    assert str(settings.PROJECT_ROOT / "spark_jobs" / "bronze_to_silver.py") in seen_retry[0]


def test_application_dying_after_ingest_keeps_ingest_and_the_transform_task_submits_alone(make_pipeline, monkeypatch):
    cfg = _pipeline(make_pipeline)

    def app(cmd):
        steps = _steps(cmd)["steps"]
        Path(_arg(steps[0]["args"], "summary-path")).write_text(json.dumps(INGEST))
        raise RuntimeError("Cannot execute: spark-submit ... Error code is: -9.")

    _submits(monkeypatch, app)
    assert IngestOperator(task_id="ingest", pipeline=cfg, master="spark://x:7077").execute(_context()) == tried(INGEST)
    alone = _submits(monkeypatch, lambda cmd: Path(_arg(cmd, "summary-path")).write_text(json.dumps(TRANSFORM)))
    assert TransformOperator(task_id="transform", pipeline=cfg, master="spark://x:7077").execute(_context()) == tried(TRANSFORM)
    assert len(alone) == 1 and str(settings.PROJECT_ROOT / "spark_jobs" / "bronze_to_silver.py") in alone[0]


def test_application_dying_before_ingest_finished_fails_the_ingest_task(make_pipeline, monkeypatch):
    cfg = _pipeline(make_pipeline)

    def app(cmd):
        raise RuntimeError("Cannot execute: spark-submit ... Error code is: -9.")

    _submits(monkeypatch, app)
    with pytest.raises(RuntimeError, match="Error code is: -9"):
        IngestOperator(task_id="ingest", pipeline=cfg, master="spark://x:7077").execute(_context())


def test_a_summary_left_by_a_former_try_is_never_taken_for_this_ones(make_pipeline, monkeypatch):
    cfg = _pipeline(make_pipeline)
    left: dict[str, Path] = {}

    def app(cmd):
        steps = _steps(cmd)["steps"]
        left["transform"] = Path(_arg(steps[1]["args"], "summary-path"))
        assert not left["transform"].exists(), "the former try's transform summary is still there"
        raise RuntimeError("Error code is: 1")

    folder = settings.VAR_DIR / "runs" / "orders"
    folder.mkdir(parents=True)
    _submits(monkeypatch, app)
    op = IngestOperator(task_id="ingest", pipeline=cfg, master="spark://x:7077")
    run_folder = op.run_folder(_context())
    run_folder.mkdir(parents=True, exist_ok=True)
    (run_folder / "transform-summary.json").write_text(json.dumps(TRANSFORM))
    (run_folder / "ingest-summary.json").write_text(json.dumps(INGEST))
    with pytest.raises(RuntimeError, match="Error code is: 1"):
        op.execute(_context())
    # the application was submitted, and neither former summary was left for this try to report
    assert left["transform"] == run_folder / "transform-summary.json"
    assert not (run_folder / "transform-summary.json").exists() and not (run_folder / "ingest-summary.json").exists()


MAINTAINED = {"run_id": RUN_ID, "duration_s": 2.0, "tables": {
    "bronze": {"files_before": 12, "files_after": 1, "bytes_before": 2_000_000, "bytes_after": 1_500_000, "seconds": 1.0},
    "silver": {"path": "/x", "skipped": "no table yet"}}}  # fmt: skip


@pytest.mark.parametrize("transform", [True, False])
def test_maintenance_due_is_the_last_step_of_the_runs_application_and_its_task_reports_it(make_pipeline, monkeypatch,
                                                                                         transform, capsys):  # fmt: skip
    cfg = _pipeline(make_pipeline, transform=transform)
    due = {"due": "every_runs 50: this is run 50 since run 'r1'"}

    def app(cmd):
        for step in _steps(cmd)["steps"]:
            out = {"kafka_to_bronze": INGEST, "bronze_to_silver": TRANSFORM, "maintain_tables": MAINTAINED}[step["job"]]
            Path(_arg(step["args"], "summary-path")).write_text(json.dumps(out))

    seen = _submits(monkeypatch, app)
    IngestOperator(task_id="ingest", pipeline=cfg, master="spark://127.0.0.1:7077").execute(_context(maintenance=due))
    steps = _steps(seen[0])["steps"]
    assert [s["job"] for s in steps] == ["kafka_to_bronze", *(["bronze_to_silver"] if transform else []), "maintain_tables"]
    maintain = steps[-1]
    tables = [a.split("=", 1)[1] for a in maintain["args"] if a.startswith("--table=")]
    assert [t.split("=")[0] for t in tables] == (["bronze", "silver", "quarantine"] if transform else ["bronze"])
    assert maintain["error_path"].endswith("maintain-error.json")
    assert run_steps.read_steps(_arg(seen[0], "steps-file")).steps[-1].job == "maintain_tables"

    seen.clear()
    assert MaintainOperator(task_id="maintain", pipeline=cfg).execute(_context(maintenance=due)) == tried(MAINTAINED)
    assert seen == []
    assert "SUMMARY maintain: bronze files 12 -> 1, 2.0 -> 1.5 MB in 1.0s; silver no table yet" in capsys.readouterr().out


def test_maintenance_not_due_adds_no_step_and_its_task_is_skipped(make_pipeline, monkeypatch):
    from airflow.sdk.exceptions import AirflowSkipException

    cfg = _pipeline(make_pipeline, transform=False)
    seen = _submits(monkeypatch, lambda cmd: Path(_arg(cmd, "summary-path")).write_text(json.dumps(INGEST)))
    IngestOperator(task_id="ingest", pipeline=cfg, master="spark://127.0.0.1:7077").execute(_context())
    assert str(settings.PROJECT_ROOT / "spark_jobs" / "kafka_to_bronze.py") in seen[0]
    with pytest.raises(AirflowSkipException, match="not due"):
        MaintainOperator(task_id="maintain", pipeline=cfg).execute(_context())
    assert len(seen) == 1


def test_maintenance_failure_in_the_application_fails_the_maintain_task_and_a_retry_submits_it_alone(make_pipeline,
                                                                                                      monkeypatch):  # fmt: skip
    from airflow.sdk.exceptions import AirflowException

    cfg = _pipeline(make_pipeline)
    due = {"due": "every_runs 2: this is run 2 since run 'r1'"}

    def app(cmd):
        steps = _steps(cmd)["steps"]
        Path(_arg(steps[0]["args"], "summary-path")).write_text(json.dumps(INGEST))
        Path(_arg(steps[1]["args"], "summary-path")).write_text(json.dumps(TRANSFORM))
        Path(steps[2]["error_path"]).write_text(json.dumps(_failed("maintain_tables", "disk full")))

    seen = _submits(monkeypatch, app)
    assert IngestOperator(task_id="ingest", pipeline=cfg, master="local[1]").execute(_context(maintenance=due)) == tried(INGEST)
    assert TransformOperator(task_id="transform", pipeline=cfg).execute(_context(maintenance=due)) == tried(TRANSFORM)
    with pytest.raises(AirflowException, match="maintain of pipeline 'orders' failed in the run's Spark application: "
                                               "disk full .the run's data stands as committed"):  # fmt: skip
        MaintainOperator(task_id="maintain", pipeline=cfg).execute(_context(maintenance=due))

    seen.clear()
    retry = _submits(monkeypatch, lambda cmd: Path(_arg(cmd, "summary-path")).write_text(json.dumps(MAINTAINED)))
    assert MaintainOperator(task_id="maintain", pipeline=cfg, master="local[1]").execute(
        _context(try_number=2, maintenance=due)) == tried(MAINTAINED, 2)  # fmt: skip
    assert str(settings.PROJECT_ROOT / "spark_jobs" / "maintain_tables.py") in retry[0]
    assert "--table=quarantine=" in " ".join(retry[0])


def test_with_a_registry_the_transform_step_gets_a_private_file_of_its_connection_deleted_after(make_pipeline,
                                                                                                monkeypatch):  # fmt: skip
    cfg = make_pipeline(
        "payments", kafka={"connection_id": "kafka_test", "topics": ["payments"]}, cluster={"workers": 1},
        transform={"format": "avro", "value_schema": {"registry": "registry_test", "version": 2},
                   "schema": {"id": {"type": "string", "required": True}, "ts": "timestamp"},
                   "key": "id", "ordering": "ts"},
    )  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_REGISTRY_TEST", json.dumps(
        {"conn_type": "http", "host": "registry", "port": 8081, "login": "elt", "password": "s3cret"}))  # fmt: skip
    seen_file: dict[str, Any] = {}

    def app(cmd):
        steps = _steps(cmd)["steps"]
        registry_file = Path(_arg(steps[1]["args"], "registry-file"))
        seen_file.update(text=json.loads(registry_file.read_text()), mode=registry_file.stat().st_mode & 0o777,
                         path=registry_file)  # fmt: skip
        spec = json.loads(Path(_arg(steps[1]["args"], "spec-file")).read_text())
        seen_file["spec"] = spec["value_schema"]
        Path(_arg(steps[0]["args"], "summary-path")).write_text(json.dumps(INGEST))
        Path(_arg(steps[1]["args"], "summary-path")).write_text(json.dumps(
            {**TRANSFORM, "value_schema": {"subject": "payments-value", "version": 2, "id": 7, "type": "AVRO"}}))

    _submits(monkeypatch, app)
    IngestOperator(task_id="ingest", pipeline=cfg, master="spark://127.0.0.1:7077").execute(_context())
    assert seen_file["text"] == {"url": "http://registry:8081", "username": "elt", "password": "s3cret"}
    assert seen_file["mode"] == 0o600 and not seen_file["path"].exists()  # deleted after the submit
    assert (seen_file["spec"]["subject"], seen_file["spec"]["version"]) == ("payments-value", 2)
    assert "s3cret" not in json.dumps(seen_file["spec"])
    op = TransformOperator(task_id="transform", pipeline=cfg)
    assert "values read with subject payments-value version 2 (schema id 7)" in op.summary_line(op.execute(_context()))


def test_a_submission_that_fails_half_way_leaves_no_credentials_file(make_pipeline, monkeypatch):
    # The Kafka options are written before the transform's registry connection is looked up; that
    # lookup fails (no such connection), and nothing with a credential may stay in the run folder.
    cfg = make_pipeline(
        "payments", kafka={"connection_id": "kafka_test", "topics": ["payments"]}, cluster={"workers": 1},
        transform={"format": "avro", "value_schema": {"registry": "registry_missing", "version": 2},
                   "schema": {"id": {"type": "string", "required": True}, "ts": "timestamp"},
                   "key": "id", "ordering": "ts"},
    )  # fmt: skip
    submitted = _submits(monkeypatch, lambda cmd: None)
    with pytest.raises(Exception, match="registry_missing"):
        IngestOperator(task_id="ingest", pipeline=cfg, master="spark://127.0.0.1:7077").execute(_context())
    assert submitted == []
    left = [p for p in settings.VAR_DIR.rglob("*") if p.name in ("kafka-options.json", "schema-registry.json")]
    assert left == [], left


def test_the_teardown_removes_credentials_a_killed_submit_left(make_pipeline):
    from include.orchestration import run_folder, tasks

    cfg = _pipeline(make_pipeline)
    folder = run_folder.run_dir(cfg, "manual__killed")
    written = run_folder.write_secret(folder, "kafka-options.json", '{"sasl.jaas.config": "x"}')
    assert written.stat().st_mode & 0o777 == 0o600 and (folder / "secrets").stat().st_mode & 0o777 == 0o700
    tasks.stop_cluster(cfg, run_id="manual__killed")
    assert not (folder / "secrets").exists()


def test_a_jobs_error_reaches_the_task_as_the_same_class_with_its_fields(make_pipeline, monkeypatch):
    from airflow.sdk.exceptions import AirflowException

    from include.contract.failure import Failure
    from include.contract.offsets import OffsetError

    cfg = _pipeline(make_pipeline, transform=False)
    error = OffsetError("batch 1 starts at 5 but the bronze table stands at 4", pipeline="orders", topic="orders.v1",
                        partition=2, offsets=(5, 4), action="rebuild_checkpoint")  # fmt: skip

    def job(cmd):
        Path(_arg(cmd, "summary-path")).write_text(json.dumps(
            Failure.of(error, job="kafka_to_bronze", pipeline="orders", run_id=RUN_ID).to_json()))
        raise AirflowException("Cannot execute: spark-submit ... Error code is: 1.")

    _submits(monkeypatch, job)
    context = _context()
    context["ti"] = _ti()
    with pytest.raises(OffsetError) as caught:
        IngestOperator(task_id="ingest", pipeline=cfg, master="spark://x:7077").execute(context)
    assert (caught.value.partition, caught.value.offsets, caught.value.action) == (2, (5, 4), "rebuild_checkpoint")
    assert str(caught.value) == str(error)
    assert isinstance(caught.value.__cause__, AirflowException)
    assert context["ti"].pushed["error"]["fields"]["partition"] == 2


def test_a_failed_ingest_step_is_not_taken_for_done_when_later_steps_follow(make_pipeline, monkeypatch):
    from airflow.sdk.exceptions import AirflowException

    from include.contract.errors import KafkaSourceError
    from include.contract.failure import Failure

    cfg = _pipeline(make_pipeline)

    def app(cmd):
        steps = _steps(cmd)["steps"]
        Path(_arg(steps[0]["args"], "summary-path")).write_text(json.dumps(Failure.of(
            KafkaSourceError("topic(s) orders.v1 do not exist"), pipeline="orders", run_id=RUN_ID, job="kafka_to_bronze",
        ).to_json()))  # fmt: skip
        raise AirflowException("exit 1")

    _submits(monkeypatch, app)
    with pytest.raises(KafkaSourceError, match="do not exist"):
        IngestOperator(task_id="ingest", pipeline=cfg, master="spark://x:7077").execute(_context())


def test_a_later_steps_error_file_carries_the_error_as_data(make_pipeline, monkeypatch):
    from airflow.sdk.exceptions import AirflowException

    from include.contract.errors import TransformError
    from include.contract.failure import Failure

    cfg = _pipeline(make_pipeline)
    error = TransformError("transform of pipeline 'orders' failed: boom", pipeline="orders", table="/lake/silver")

    def app(cmd):
        steps = _steps(cmd)["steps"]
        Path(_arg(steps[0]["args"], "summary-path")).write_text(json.dumps(INGEST))
        Path(steps[1]["error_path"]).write_text(json.dumps(
            Failure.of(error, job="bronze_to_silver", pipeline="orders", run_id=RUN_ID).to_json()))

    _submits(monkeypatch, app)
    IngestOperator(task_id="ingest", pipeline=cfg, master="spark://x:7077").execute(_context())
    context = _context()
    context["ti"] = _ti()
    with pytest.raises(AirflowException, match="failed in the run's Spark application: transform of") as caught:
        TransformOperator(task_id="transform", pipeline=cfg, master="spark://x:7077").execute(context)
    assert type(caught.value.__cause__) is TransformError and caught.value.__cause__.table == "/lake/silver"
    assert context["ti"].pushed["error"]["class"] == "TransformError"
