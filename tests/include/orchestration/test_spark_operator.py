"""Tests of the Spark job operators' pure parts: Spark settings (spark_conf), the profiles' names and paths
(include/orchestration/profiles/), arguments (job_args), summaries (job_summaries) and what the operators read
of their DAG run (run_context).

The operators' ``execute`` (with the hook's submit replaced) is tested in
tests/dags/test_run_application.py (one application per run) and
tests/dags/test_cluster_profiles.py (the command of each cluster profile).
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from include.contract.handoffs import request_plan
from include.orchestration.job_args import maintain_job_args, transform_job_args
from include.orchestration.job_operator import lost_lock
from include.orchestration.job_summaries import maintain_summary_text, transform_summary_text
from include.orchestration.profiles.kubernetes import (
    K8S_PIPELINE_LABEL,
    K8S_RUN_LABEL,
    _k8s_label_value,
    driver_pod_kill_command,
    image_uri,
    k8s_pod_base,
    kafka_options_path,
    kubernetes_conf,
)
from include.orchestration.profiles.local_standalone import LocalStandalone, _hook_class
from include.orchestration.run_context import job_run_type, maintenance_reason
from include.orchestration.spark_conf import job_spark_conf
from include.spark import spark_submit

RUN_ID = "manual__2026-03-01T10:00:00+00:00"


@pytest.fixture
def cfg(make_pipeline):
    return make_pipeline(cluster={"workers": 2, "worker_cores": 2, "worker_memory": "768m"})


def _kubernetes(make_pipeline, tmp_path: Path, **k8s):
    shared = tmp_path / "shared"
    return make_pipeline(
        cluster={"profile": "kubernetes", "master_connection_id": "spark_k8s",
                 "kubernetes": {"image": "registry.example/kde:1.4", "namespace": "data",
                                "service_account": "spark-driver", "shared_volume_claim": "kde-shared",
                                "shared_dir": str(shared), **k8s}},
        tables={"lakehouse_root": str(shared / "lake")},
    )  # fmt: skip


def test_run_cluster_hook_returns_the_same_keys_as_the_provider_hook():
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    base = SparkSubmitHook(conn_id="no_such_connection")._connection
    hook = _hook_class()(master="spark://127.0.0.1:7077", conn_id="unused", spark_binary="spark-submit")
    assert set(hook._connection) == set(base)
    assert hook._connection["master"] == "spark://127.0.0.1:7077"
    cmd = hook._build_spark_submit_command("job.py")
    assert cmd[cmd.index("--master") + 1] == "spark://127.0.0.1:7077"


def test_job_conf_per_profile(cfg):
    transient = job_spark_conf(cfg, transient=True)
    assert (transient["spark.cores.max"], transient["spark.executor.cores"], transient["spark.executor.memory"]) == (
        "4", "2", "768m")  # fmt: skip
    assert transient["spark.driver.host"] == "127.0.0.1"
    existing = job_spark_conf(cfg, transient=False)
    assert existing["spark.executor.instances"] == "2" and "spark.cores.max" not in existing


@pytest.mark.parametrize("run_type,expected", [
    ("scheduled", "scheduled"), ("DagRunType.BACKFILL_JOB", "manual"), ("backfill", "backfill"),
    ("manual", "manual"), ("asset_triggered", "manual"),
])  # fmt: skip
def test_job_run_type(run_type, expected):
    assert job_run_type({"dag_run": SimpleNamespace(run_type=run_type)}) == expected


def test_pod_names_fit_kubernetes_for_any_pipeline_name_and_differ_per_try():
    long_name = "Orders_EU.v2-" + "x" * 180
    base = k8s_pod_base(long_name, "ingest", RUN_ID, 1)
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", base) and len(base) <= 38
    assert base.startswith("kde-orders-eu-v2-")
    assert base != k8s_pod_base(long_name, "ingest", RUN_ID, 2), "a retry would collide with a kept pod"
    assert base != k8s_pod_base(long_name, "transform", RUN_ID, 1)


# --------------------------------------------------------------------------- names and paths


@pytest.mark.parametrize(("text", "label"), [
    ("orders", "orders"),
    ("manual__2026-03-01T10:00:00+00:00", "manual__2026-03-01T10_00_00_00_00"),
    ("--x--", "x"),
    ("é", "x"),
    ("a" * 70, "a" * 63),
])  # fmt: skip
def test_label_values_keep_only_what_kubernetes_takes(text, label):
    assert _k8s_label_value(text) == label


def test_kubernetes_pods_are_labelled_with_the_pipeline_and_run_and_annotated_with_the_exact_run_id(
    make_pipeline, tmp_path
):
    cfg = _kubernetes(make_pipeline, tmp_path, kafka_options_secret="kde-kafka")
    conf = kubernetes_conf(cfg, pod_base="kde-orders-ingest-abc", run_id=RUN_ID)
    for role in ("driver", "executor"):
        assert conf[f"spark.kubernetes.{role}.label.{K8S_PIPELINE_LABEL}"] == "orders"
        assert conf[f"spark.kubernetes.{role}.label.{K8S_RUN_LABEL}"] == "manual__2026-03-01T10_00_00_00_00"
        assert conf[f"spark.kubernetes.{role}.annotation.kafka-delta-elt/run-id"] == RUN_ID
    # The Kafka secret is mounted in the driver only: executors get the settings inside the query plan.
    assert conf["spark.kubernetes.driver.secrets.kde-kafka"] == "/etc/kafka-delta-elt/kafka"
    assert not [k for k in conf if k.startswith("spark.kubernetes.executor.secrets.")]
    assert conf["spark.kubernetes.driver.pod.name"] == "kde-orders-ingest-abc-driver"


def test_kubernetes_conf_is_refused_for_another_profile(cfg):
    with pytest.raises(ValueError, match="pipeline 'orders': kubernetes_conf is for cluster.profile kubernetes"):
        kubernetes_conf(cfg, pod_base="x", run_id=RUN_ID)


def test_the_pods_read_the_project_and_the_kafka_options_from_the_image_and_the_secret(make_pipeline, tmp_path):
    k8s = _kubernetes(make_pipeline, tmp_path).cluster.kubernetes
    assert image_uri(k8s, "spark_jobs/kafka_to_bronze.py") == "local:///opt/kafka-delta-elt/spark_jobs/kafka_to_bronze.py"
    assert kafka_options_path(k8s) is None  # no secret: a plaintext broker
    with_secret = _kubernetes(make_pipeline, tmp_path, kafka_options_secret="kde-kafka", kafka_options_key="k.json",
                              app_dir="/srv/app").cluster.kubernetes  # fmt: skip
    assert kafka_options_path(with_secret) == "/etc/kafka-delta-elt/kafka/k.json"
    assert image_uri(with_secret, "kde_jobs.zip") == "local:///srv/app/kde_jobs.zip"


def test_a_drivers_scratch_is_a_folder_per_task_in_the_run_folder(tmp_path):
    scratch = LocalStandalone().driver_scratch
    assert scratch(tmp_path / "run", "ingest") == tmp_path / "run" / "scratch" / "ingest"
    assert scratch(tmp_path / "run", "transform") != scratch(tmp_path / "run", "ingest")


def test_a_driver_pod_is_killed_with_spark_submits_own_kill_in_its_namespace():
    assert driver_pod_kill_command("k8s://https://api:6443", "data", "kde-orders-ingest-1-driver") == [
        spark_submit.spark_submit_binary(), "--master", "k8s://https://api:6443",
        "--conf", "spark.kubernetes.namespace=data", "--kill", "data:kde-orders-ingest-1-driver"]  # fmt: skip


# --------------------------------------------------------------------------- maintenance


def test_maintenance_reason_is_the_preflights_or_none(fake_ti):
    due = {"due": "every_runs 2: this is run 2"}
    assert maintenance_reason({"ti": fake_ti(preflight={"maintenance": due})}, "preflight") == "every_runs 2: this is run 2"
    assert maintenance_reason({"ti": fake_ti(preflight={"maintenance": None})}, "preflight") is None
    assert maintenance_reason({"ti": fake_ti()}, "preflight") is None  # preflight failed or never ran
    assert maintenance_reason({"ti": fake_ti(preflight="not a dict")}, "preflight") is None
    assert maintenance_reason({}, "preflight") is None


def test_maintain_job_args_name_the_pipelines_tables_and_what_its_maintenance_turns_off(make_pipeline, tmp_path):
    cfg = make_pipeline(maintenance={"every_runs": 5, "vacuum": False, "zorder_by": {"bronze": ["topic", "partition"]}})
    args = maintain_job_args(cfg, "r1", tmp_path / "maintain-summary.json")
    # Without a transform section, bronze is the only table (silver and quarantine: test_run_application.py).
    assert [a for a in args if a.startswith("--table=")] == [f"--table=bronze={cfg.tables.bronze_path}"]
    assert [a for a in args if a.startswith("--zorder-by=")] == ["--zorder-by=bronze=topic,partition"]
    assert "--no-vacuum" in args and "--no-optimize" not in args and "--no-checkpoint" not in args
    assert args[0] == "--pipeline=orders" and "--run-id=r1" in args
    assert f"--summary-path={tmp_path / 'maintain-summary.json'}" in args


def test_every_job_carries_the_lock_epoch_check_request_took_and_a_job_failing_on_a_stale_one_is_not_retried(
    make_pipeline, tmp_path, fake_ti
):
    from include.contract.errors import IngestionError, StaleLockError, TransformError
    from include.contract.jobs import MaintainArgs, TransformArgs

    cfg = make_pipeline()
    context = {"ti": fake_ti(check_request={"action": "normal", "lock_epoch": 7}), "run_id": "r1"}
    assert request_plan(context).lock_epoch == 7
    assert request_plan({"ti": fake_ti()}).lock_epoch is None  # check_request never finished: no epoch, no fence
    maintain = MaintainArgs.from_args(maintain_job_args(cfg, "r1", tmp_path / "m.json", request_plan(context).lock_epoch))
    assert maintain.lock_epoch == 7
    transform_cfg = make_pipeline(name="orders_t", transform={
        "schema": {"id": {"type": "string"}, "at": {"type": "timestamp"}}, "key": "id", "ordering": "at"})
    transform = TransformArgs.from_args(transform_job_args(transform_cfg, tmp_path, "r1", tmp_path / "t.json", 7))
    assert transform.lock_epoch == 7

    stale = StaleLockError("refused", pipeline="orders")
    assert lost_lock(stale)
    wrapped = IngestionError("ingestion failed", pipeline="orders")
    wrapped.cause = stale
    assert lost_lock(wrapped)
    assert not lost_lock(TransformError("a batch failed", pipeline="orders"))


def test_the_ingest_task_reads_the_runs_plan_once_however_often_it_asks(make_pipeline, fake_ti):
    from include.orchestration.ingest_operator import IngestOperator
    from include.orchestration.job_args import BACKFILL_APPLICATION

    class Counting(fake_ti):
        pulls = 0

        def xcom_pull(self, task_ids, key="return_value"):
            Counting.pulls += 1
            return super().xcom_pull(task_ids, key)

    op = IngestOperator(task_id="ingest", pipeline=make_pipeline())
    context = {"ti": Counting(check_request={"action": "backfill_offsets", "lock_epoch": 3}), "run_id": "r1"}
    assert op.application_for(context) == BACKFILL_APPLICATION
    assert [op._plan(context).lock_epoch for _ in range(3)] == [3, 3, 3] and Counting.pulls == 1
    again = {"ti": Counting(check_request={"action": "normal"}), "run_id": "r2"}  # another run: read anew
    assert op._plan(again).to_xcom()["action"] == "normal" and Counting.pulls == 2


def test_the_maintain_summary_line_gives_each_tables_files_and_megabytes_or_why_not():
    summary = {"run_id": "r1", "tables": {
        "bronze": {"files_before": 12, "files_after": 1, "bytes_before": 2_000_000, "bytes_after": 1_500_000,
                   "seconds": 1.25},
        "silver": {"path": "/x", "skipped": "no table yet"},
        "ledger": {"path": "/l", "error": "OSError: disk full"}}}  # fmt: skip
    assert maintain_summary_text(summary) == (
        "bronze files 12 -> 1, 2.0 -> 1.5 MB in 1.2s; silver no table yet; ledger OSError: disk full")
    assert maintain_summary_text({"run_id": "r1", "tables": {}}) == "no table"


def test_the_transform_summary_line_says_where_the_records_went():
    summary = {"run_id": RUN_ID, "read": 10, "upserted": 6, "deleted": 1, "quarantined": 3, "superseded": 0,
               "silver_version": 4, "epoch": 1, "duration_s": 2.04,
               "quarantine_fields": {"ts": 1, "id": 2}}  # fmt: skip
    assert transform_summary_text(summary) == (
        "read 10 from bronze: 6 upserted, 1 deleted, 3 quarantined (2 id, 1 ts), 0 superseded by newer; "
        "silver version 4, epoch 1, 2.0s in the job")
    more = {**summary, "quarantine_fields": {}, "replayed": 2, "fields_ignored": {"z": "not in the schema", "a": "a reserved name"},
            "fields_added": [{"name": "note", "type": "string"}], "checkpoint_rebuilt": {"reason": "lost"}}
    assert transform_summary_text(more) == (
        "read 10 from bronze: 6 upserted, 1 deleted, 3 quarantined, 0 superseded by newer, 2 already applied; "
        "silver version 4, epoch 1, 2.0s in the job; fields added: note string; fields ignored: a, z; "
        "checkpoint rebuilt: lost")
