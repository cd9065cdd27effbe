"""The spark-submit command of each cluster profile, as the Spark provider's hook builds it, and the
``cluster`` keys of pipeline files that choose it.

No Spark, broker or Kubernetes: the operator runs ``execute`` with the hook's
``submit`` replaced by a recorder of ``_build_spark_submit_command`` (the
exact list the hook would hand to ``Popen``). Connections come from
``AIRFLOW_CONN_*`` variables. The Kafka connection carries a fake SASL
password that must appear nowhere in any command.

Profile ``kubernetes`` is unit-tested only: nothing here talks to a cluster.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from include import settings
from include.config import PipelineConfigError
from include.contract.errors import PipelineError
from include.orchestration import dag_factory, run_folder
from include.orchestration.ingest_operator import IngestOperator
from include.orchestration.profiles import profile_of
from include.orchestration.profiles.kubernetes import K8S_PIPELINE_LABEL, K8S_RUN_LABEL, k8s_pod_base
from include.orchestration.step_operators import TransformOperator
from include.spark import jvm_deps, spark_submit
from tests.fakes import FakeTI

RUN_ID = "manual__2026-03-01T10:00:00+00:00"
FAKE_SASL_PASSWORD = "FAKE-sasl-pw-7731"
FAKE_JARS = ["/cache/jars/spark-sql-kafka.jar", "/cache/jars/delta-spark.jar"]
FAKE_PY_FILES = "/cache/build/kde_jobs.zip"
K8S_MASTER = "k8s://https://api.example:6443"
K8S = {
    "image": "registry.example/kafka-delta-elt:1.4",
    "namespace": "data",
    "service_account": "spark-driver",
    "shared_volume_claim": "kde-shared",
    "kafka_options_secret": "kde-kafka",
}
#: What the Spark connection's owner allows pipeline files to ask of Kubernetes (include/orchestration/kubernetes_allowlist.py).
K8S_ALLOWED = {"images": ["registry.example/kafka-delta-elt:*"], "namespaces": ["data"],
               "service_accounts": ["spark-driver"], "volume_claims": ["kde-shared"],
               "secrets": ["kde-kafka", "kde-registry"]}  # fmt: skip
SUMMARY = {"rows": 3, "batches": [1], "epoch": 0, "bronze_version": 1, "duration_s": 1.0,
           "checkpoint_rebuilt": None}  # fmt: skip


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    """Connections as the task would see them; run folders under ``tmp_path``; no jar resolution."""
    monkeypatch.delenv("KDE_LAKEHOUSE_ROOT", raising=False)
    monkeypatch.setattr(settings, "VAR_DIR", tmp_path / "var")
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": "b1:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.username": "svc", "sasl.password": FAKE_SASL_PASSWORD}}))  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE", json.dumps(
        {"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077, "extra": {"deploy-mode": "cluster"}}))  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps(
        {"conn_type": "spark", "host": "yarn", "extra": {"queue": "etl", "deploy-mode": "cluster"}}))  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_K8S", json.dumps(
        {"conn_type": "spark", "host": K8S_MASTER, "extra": {"namespace": "from-connection",
                                                             "kubernetes_allowed": K8S_ALLOWED}}))  # fmt: skip
    monkeypatch.setattr(jvm_deps, "spark_jars", lambda: [Path(j) for j in FAKE_JARS])
    monkeypatch.setattr(spark_submit, "package_py_files", lambda *a, **k: Path(FAKE_PY_FILES))


@pytest.fixture
def kube_client(monkeypatch):
    """Stands in for the cncf.kubernetes provider, without which the Spark hook refuses k8s:// masters."""
    from airflow.providers.apache.spark.hooks import spark_submit as hook_module

    monkeypatch.setattr(hook_module, "kube_client", object(), raising=False)


def _pipeline(make_pipeline, cluster: dict, **top: Any):
    """Pipeline ``orders`` on two topics with ``cluster`` (the ``make_pipeline`` fixture)."""
    kafka = {"connection_id": "kafka_test", "topics": ["orders.v1", "refunds"], "max_offsets_per_trigger": 50}
    return make_pipeline("orders", **{"kafka": kafka, "cluster": cluster, **top})


def _kubernetes(make_pipeline, tmp_path: Path, **k8s: Any):
    shared = tmp_path / "shared"
    return _pipeline(
        make_pipeline,
        {"profile": "kubernetes", "master_connection_id": "spark_k8s", "workers": 3, "worker_cores": 2,
         "worker_memory": "2g", "kubernetes": {**K8S, "shared_dir": str(shared), **k8s}},
        tables={"lakehouse_root": str(shared / "lake")},
    )  # fmt: skip


def _context(**xcoms: Any) -> dict[str, Any]:
    xcoms.setdefault("preflight", {"job_file": {"topic_ids": {}, "accepted_gaps": []}})
    return {"run_id": RUN_ID, "ti": FakeTI(**xcoms), "dag_run": SimpleNamespace(run_type="manual")}


def _run(monkeypatch, op, *, fail: bool = False) -> tuple[list[str], list[list[str]]]:
    """``op.execute`` with the hook's submit recording its command; (the command, the kill commands run)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from include.orchestration.profiles import kubernetes as kubernetes_profile

    commands: list[list[str]] = []
    kills: list[list[str]] = []

    def submit(hook, application: str = "", **kwargs: Any) -> None:
        cmd = hook._build_spark_submit_command(application)
        commands.append(cmd)
        # Client modes: the Kafka settings (secrets included) are in a file only
        # its owner can read, there while spark-submit runs.
        for arg in cmd:
            if arg.startswith("--kafka-options-file=") and not arg.startswith("--kafka-options-file=/etc/"):
                assert Path(arg.split("=", 1)[1]).stat().st_mode & 0o777 == 0o600
        if (scratch := (hook._env_vars or {}).get("SPARK_LOCAL_DIRS")) and Path(scratch).parent.name == "scratch":
            # What a killed driver leaves behind: its copy of the jars and files.
            (Path(scratch) / "spark-1" / "userFiles-1").mkdir(parents=True)
            (Path(scratch) / "spark-1" / "userFiles-1" / "kde_jobs.zip").write_bytes(b"x" * 100)
        if fail:
            raise RuntimeError("spark-submit failed")
        summary = next(a.split("=", 1)[1] for a in cmd if a.startswith("--summary-path="))
        Path(summary).write_text(json.dumps(SUMMARY))

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    monkeypatch.setattr(kubernetes_profile.subprocess, "run",
                        lambda cmd, **kw: kills.append(cmd) or SimpleNamespace(returncode=0, stdout="", stderr=""))  # fmt: skip
    if fail:
        with pytest.raises(RuntimeError, match="spark-submit failed"):
            op.execute(_context())
    else:
        assert op.execute(_context()) == {**SUMMARY, "try_number": 1}
    (cmd,) = commands
    return cmd, kills


def _flag(cmd: list[str], flag: str) -> str | None:
    return cmd[cmd.index(flag) + 1] if flag in cmd else None


def _confs(cmd: list[str]) -> dict[str, str]:
    confs = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--conf"]
    return dict(c.split("=", 1) for c in confs)


def _app_args(cmd: list[str], application: str) -> list[str]:
    return cmd[cmd.index(application) + 1 :]


def _assert_no_secret(cmd: list[str], hook_env: Any = None) -> None:
    text = " ".join(cmd) + json.dumps(hook_env or {})
    assert FAKE_SASL_PASSWORD not in text
    assert "sasl.password" not in text and "sasl.username" not in text


# --------------------------------------------------------------------------- the commands


def test_local_standalone_submits_to_the_runs_master_with_one_executor_per_worker(tmp_path, make_pipeline, monkeypatch):
    cfg = _pipeline(make_pipeline, {"workers": 2, "worker_cores": 1, "worker_memory": "512m"})
    op = IngestOperator(task_id="ingest", pipeline=cfg, master="spark://127.0.0.1:41234")
    cmd, kills = _run(monkeypatch, op)
    application = str(settings.PROJECT_ROOT / "spark_jobs" / "kafka_to_bronze.py")
    assert cmd[0] == spark_submit.spark_submit_binary()
    assert _flag(cmd, "--master") == "spark://127.0.0.1:41234" and "--deploy-mode" not in cmd
    conf = _confs(cmd)
    assert (conf["spark.cores.max"], conf["spark.executor.cores"], conf["spark.executor.memory"]) == ("2", "1", "512m")
    assert conf["spark.scheduler.minRegisteredResourcesRatio"] == "1.0"
    assert conf["spark.driver.host"] == "127.0.0.1" and conf["spark.pyspark.python"] == sys.executable
    assert "spark.executor.instances" not in conf
    assert _flag(cmd, "--jars") == ",".join(FAKE_JARS) and _flag(cmd, "--py-files") == FAKE_PY_FILES
    folder = settings.VAR_DIR / "runs" / "orders" / run_folder.run_folder_name(RUN_ID)
    args = _app_args(cmd, application)
    assert args[:3] == ["--pipeline=orders", "--bootstrap-servers=b1:9092", "--topics=orders.v1,refunds"]
    assert f"--run-id={RUN_ID}" in args and "--max-offsets-per-trigger=50" in args
    assert f"--summary-path={folder / 'ingest-summary.json'}" in args
    assert f"--kafka-options-file={folder / 'secrets' / 'kafka-options.json'}" in args
    assert not (folder / "secrets").exists(), "the private options file outlives the submit"
    assert kills == []
    _assert_no_secret(cmd, op._hook._env_vars)
    # The driver's scratch is in the run folder, and gone once spark-submit ended.
    assert op._hook._env_vars["SPARK_LOCAL_DIRS"] == str(folder / "scratch" / "ingest")
    assert not (folder / "scratch").exists()


@pytest.mark.parametrize("fail", [False, True])
def test_the_drivers_scratch_is_removed_after_a_failed_submit_and_a_workers_own_choice_is_kept(
    tmp_path, make_pipeline, monkeypatch, fail
):
    cfg = _pipeline(make_pipeline, {"workers": 1})
    folder = settings.VAR_DIR / "runs" / "orders" / run_folder.run_folder_name(RUN_ID)
    left = folder / "scratch" / "ingest" / "spark-0" / "kde_jobs.zip"  # from a try killed with its task process
    left.parent.mkdir(parents=True)
    left.write_bytes(b"x")
    op = IngestOperator(task_id="ingest", pipeline=cfg, master="spark://127.0.0.1:41234")
    _run(monkeypatch, op, fail=fail)
    assert not (folder / "scratch").exists()

    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "fast-disk"))
    again = IngestOperator(task_id="ingest", pipeline=cfg, master="spark://127.0.0.1:41234")
    _run(monkeypatch, again)
    # The hook lays its variables over the worker's environment: not naming it keeps the worker's choice.
    assert "SPARK_LOCAL_DIRS" not in again._hook._env_vars and again._hook._env_vars["SPARK_LOCAL_IP"]


def test_existing_standalone_master_is_client_mode_whatever_the_connection_says(tmp_path, make_pipeline, monkeypatch):
    cfg = _pipeline(make_pipeline, {"profile": "existing_master", "master_connection_id": "spark_standalone",
                               "workers": 2, "worker_cores": 2})  # fmt: skip
    cmd, _ = _run(monkeypatch, IngestOperator(task_id="ingest", pipeline=cfg))
    assert _flag(cmd, "--master") == "spark://10.0.0.5:7077"
    # The connection asks for cluster mode; the summary file is read here, so the driver runs here.
    assert _flag(cmd, "--deploy-mode") == "client"
    conf = _confs(cmd)
    assert (conf["spark.executor.instances"], conf["spark.executor.cores"]) == ("2", "2")
    assert "spark.cores.max" not in conf and "spark.driver.host" not in conf
    assert _flag(cmd, "--jars") == ",".join(FAKE_JARS)
    _assert_no_secret(cmd)


FAKE_S3_SECRET = "FAKE-s3-secret-4410"
FAKE_S3_JARS = ["/cache/jars/hadoop-aws.jar", "/cache/jars/s3.jar"]


def _on_s3(monkeypatch, **extra: Any) -> dict[str, str]:
    """An ``aws`` connection to an S3-compatible store, and S3A's jars; the lakehouse URI to use."""
    monkeypatch.setenv("AIRFLOW_CONN_AWS_LAKE", json.dumps({"conn_type": "aws", "login": "AKIA-lake",
        "password": FAKE_S3_SECRET, "extra": {"endpoint_url": "http://store:9000", "region_name": "eu-west-1",
                                               **extra}}))  # fmt: skip
    monkeypatch.setattr(jvm_deps, "s3_jars", lambda: [Path(j) for j in FAKE_S3_JARS])
    return {"lakehouse_root": "s3a://lake/prod", "storage_connection_id": "aws_lake"}


@pytest.mark.parametrize("profile", [
    {"profile": "local_standalone"},
    {"profile": "existing_master", "master_connection_id": "spark_standalone"},
])  # fmt: skip
def test_tables_on_s3_add_s3as_jars_and_settings_and_hand_the_key_pair_over_in_an_owner_only_file(
    tmp_path, make_pipeline, monkeypatch, profile
):
    from include.orchestration import job_operator

    files: list[dict] = []
    real_submit_hook = job_operator.submit_hook

    def recording(*args: Any, **kwargs: Any):
        hook, app = real_submit_hook(*args, **kwargs)
        secrets = Path(hook._env_vars[settings.STORAGE_SECRETS_FILE_ENV])
        assert secrets.stat().st_mode & 0o777 == 0o600
        files.append(json.loads(secrets.read_text()))
        return hook, app

    monkeypatch.setattr(job_operator, "submit_hook", recording)
    cfg = _pipeline(make_pipeline, profile, tables=_on_s3(monkeypatch))
    run_master = "spark://127.0.0.1:41234" if profile["profile"] == "local_standalone" else None
    op = IngestOperator(task_id="ingest", pipeline=cfg, master=run_master)
    cmd, _ = _run(monkeypatch, op)
    assert _flag(cmd, "--jars") == ",".join(FAKE_JARS + FAKE_S3_JARS)
    conf = _confs(cmd)
    assert {k: v for k, v in conf.items() if k.startswith("spark.hadoop.")} == {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.endpoint": "http://store:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
    }
    assert files == [{"fs.s3a.access.key": "AKIA-lake", "fs.s3a.secret.key": FAKE_S3_SECRET}]
    assert FAKE_S3_SECRET not in " ".join(cmd) + json.dumps(op._hook._env_vars or {})
    assert not list((tmp_path / "var").rglob("object-store.json")), "the key pair outlived the submit"


def test_tables_on_disk_read_no_storage_connection_and_add_no_s3_jar(tmp_path, make_pipeline, monkeypatch):
    monkeypatch.setattr(jvm_deps, "s3_jars", lambda: pytest.fail("S3A's jars resolved for a local lakehouse"))
    cfg = _pipeline(make_pipeline, {"profile": "existing_master", "master_connection_id": "spark_standalone"},
                    tables={"lakehouse_root": str(tmp_path / "lake"), "storage_connection_id": "no_such_conn"})  # fmt: skip
    cmd, _ = _run(monkeypatch, IngestOperator(task_id="ingest", pipeline=cfg))
    assert _flag(cmd, "--jars") == ",".join(FAKE_JARS)
    assert not [k for k in _confs(cmd) if k.startswith("spark.hadoop.fs.s3")]


def test_a_key_pair_cannot_reach_a_yarn_driver_so_it_is_refused_naming_the_fix(tmp_path, make_pipeline, monkeypatch):
    cfg = _pipeline(make_pipeline, {"profile": "existing_master", "master_connection_id": "spark_yarn"},
                    tables=_on_s3(monkeypatch))  # fmt: skip
    with pytest.raises(PipelineError, match="leave the connection's login and password empty"):
        _run(monkeypatch, IngestOperator(task_id="ingest", pipeline=cfg))
    assert not list((tmp_path / "var").rglob("object-store.json")), "the key pair outlived the refusal"


def test_existing_yarn_master_takes_the_queue_and_sends_no_local_environment(tmp_path, make_pipeline, monkeypatch):
    cfg = _pipeline(make_pipeline, {"profile": "existing_master", "master_connection_id": "spark_yarn"})
    op = IngestOperator(task_id="ingest", pipeline=cfg)
    cmd, _ = _run(monkeypatch, op)
    assert _flag(cmd, "--master") == "yarn" and _flag(cmd, "--queue") == "etl"
    assert _flag(cmd, "--deploy-mode") == "client"
    assert not [k for k in _confs(cmd) if k.startswith("spark.yarn.appMasterEnv.")]
    assert op._hook._env is None, "this machine's SPARK_HOME would reach the YARN application master"
    _assert_no_secret(cmd)


def test_existing_k8s_master_in_client_mode_needs_the_image_from_the_pipeline_file(
    tmp_path, make_pipeline, monkeypatch, kube_client
):
    cfg = _pipeline(make_pipeline, {"profile": "existing_master", "master_connection_id": "spark_k8s",
                               "kubernetes": {"image": K8S["image"]}})  # fmt: skip
    cmd, kills = _run(monkeypatch, IngestOperator(task_id="ingest", pipeline=cfg))
    assert _flag(cmd, "--master") == K8S_MASTER and _flag(cmd, "--deploy-mode") == "client"
    conf = _confs(cmd)
    assert conf["spark.kubernetes.container.image"] == K8S["image"]
    assert conf["spark.kubernetes.namespace"] == "from-connection"  # the connection's extra, read by the hook
    # Executors run the image's Python; the local driver runs this one.
    assert "spark.pyspark.python" not in conf and conf["spark.pyspark.driver.python"] == sys.executable
    assert not [k for k in conf if k.startswith("spark.kubernetes.driverEnv.")]
    assert kills == [] and "spark.kubernetes.driver.pod.name" not in conf
    _assert_no_secret(cmd)


def test_existing_k8s_master_without_an_image_is_refused_before_submitting(tmp_path, make_pipeline, monkeypatch, kube_client):
    cfg = _pipeline(make_pipeline, {"profile": "existing_master", "master_connection_id": "spark_k8s"})
    with pytest.raises(ValueError, match=r"'spark_k8s' is a Kubernetes master .* set cluster.kubernetes.image"):
        _run(monkeypatch, IngestOperator(task_id="ingest", pipeline=cfg))


@pytest.mark.parametrize(("changes", "key", "value"), [
    ({"image": "attacker.example/miner:latest"}, "image", "attacker.example/miner:latest"),
    ({"namespace": "kube-system"}, "namespace", "kube-system"),
    ({"service_account": "cluster-admin"}, "service_account", "cluster-admin"),
    ({"shared_volume_claim": "other-teams-data"}, "shared_volume_claim", "other-teams-data"),
    ({"kafka_options_secret": "payments-db-password"}, "kafka_options_secret", "payments-db-password"),
])  # fmt: skip
def test_a_pipeline_file_may_ask_kubernetes_only_for_what_the_spark_connection_allows(
    tmp_path, make_pipeline, monkeypatch, kube_client, changes, key, value
):
    # The image is code that runs with the Kafka credentials, the secrets are secrets: not the author's call.
    cfg = _kubernetes(make_pipeline, tmp_path, **changes)
    with pytest.raises(PipelineError, match=rf"cluster.kubernetes.{key} '{value}' is not allowed by Airflow "
                                            rf"connection 'spark_k8s' \(extra kubernetes_allowed\."):  # fmt: skip
        _run(monkeypatch, IngestOperator(task_id="ingest", pipeline=cfg))
    # existing_master on k8s:// runs executors of the file's image too
    other = _pipeline(make_pipeline, {"profile": "existing_master", "master_connection_id": "spark_k8s",
                                      "kubernetes": {"image": "attacker.example/miner:latest"}})  # fmt: skip
    with pytest.raises(PipelineError, match="cluster.kubernetes.image 'attacker.example/miner:latest' is not allowed"):
        _run(monkeypatch, IngestOperator(task_id="ingest", pipeline=other))


def test_a_spark_connection_without_an_allowlist_allows_nothing_and_a_malformed_one_is_refused():
    from include.config import KubernetesConfig
    from include.orchestration.kubernetes_allowlist import KubernetesNotAllowed, check_allowed

    k8s = KubernetesConfig(image="registry.example/kafka-delta-elt:1.4")
    with pytest.raises(KubernetesNotAllowed, match=r"extra kubernetes_allowed.images allows nothing"):
        check_allowed("p", k8s, "spark_k8s", {})
    with pytest.raises(KubernetesNotAllowed, match=r"unknown keys \['imagez'\]"):
        check_allowed("p", k8s, "spark_k8s", {"kubernetes_allowed": {"imagez": ["x"]}})
    check_allowed("p", k8s, "spark_k8s", {"kubernetes_allowed": {"images": ["registry.example/*"]}})


def test_k8s_master_without_the_kubernetes_provider_is_a_clear_error(tmp_path, make_pipeline, monkeypatch):
    from airflow.providers.apache.spark.hooks import spark_submit as hook_module

    monkeypatch.delattr(hook_module, "kube_client", raising=False)
    cfg = _kubernetes(make_pipeline, tmp_path)
    with pytest.raises(RuntimeError, match="apache-airflow-providers-cncf-kubernetes"):
        _run(monkeypatch, IngestOperator(task_id="ingest", pipeline=cfg))


def test_kubernetes_cluster_mode_command(tmp_path, make_pipeline, monkeypatch, kube_client):
    cfg = _kubernetes(make_pipeline, tmp_path)
    op = IngestOperator(task_id="ingest", pipeline=cfg)
    cmd, kills = _run(monkeypatch, op)
    application = "local:///opt/kafka-delta-elt/spark_jobs/kafka_to_bronze.py"
    assert _flag(cmd, "--master") == K8S_MASTER and _flag(cmd, "--deploy-mode") == "cluster"
    assert _flag(cmd, "--py-files") == "local:///opt/kafka-delta-elt/kde_jobs.zip" and "--jars" not in cmd
    conf = _confs(cmd)
    pod = conf["spark.kubernetes.driver.pod.name"]
    base = k8s_pod_base("orders", "ingest", RUN_ID, 1)
    assert pod == f"{base}-driver" and conf["spark.kubernetes.executor.podNamePrefix"] == base
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", pod) and len(pod) <= 63 and len(base) <= 38
    # The hook finds the pod to delete on kill by this shape of name in spark-submit's log.
    assert re.search(r"\s*pod name: ((.+?)-([a-z0-9]+)-driver$)", f"pod name: {pod}")
    shared = str(tmp_path / "shared")
    expected = {
        "spark.kubernetes.container.image": K8S["image"],
        "spark.kubernetes.namespace": "data",  # the file's, not the connection's
        "spark.kubernetes.authenticate.driver.serviceAccountName": "spark-driver",
        "spark.executor.instances": "3", "spark.executor.cores": "2", "spark.executor.memory": "2g",
        "spark.kubernetes.executor.deleteOnTermination": "true",
        "spark.kubernetes.submission.waitAppCompletion": "true",
        f"spark.kubernetes.driver.label.{K8S_PIPELINE_LABEL}": "orders",
        f"spark.kubernetes.executor.label.{K8S_PIPELINE_LABEL}": "orders",
        f"spark.kubernetes.driver.label.{K8S_RUN_LABEL}": "manual__2026-03-01T10_00_00_00_00",
        "spark.kubernetes.driver.annotation.kafka-delta-elt/run-id": RUN_ID,
        "spark.kubernetes.driver.volumes.persistentVolumeClaim.kde-shared.options.claimName": "kde-shared",
        "spark.kubernetes.driver.volumes.persistentVolumeClaim.kde-shared.mount.path": shared,
        "spark.kubernetes.executor.volumes.persistentVolumeClaim.kde-shared.mount.path": shared,
        "spark.kubernetes.driver.secrets.kde-kafka": "/etc/kafka-delta-elt/kafka",
    }  # fmt: skip
    assert {k: conf.get(k) for k in expected} == expected
    assert not [k for k in conf if k.startswith("spark.kubernetes.executor.secrets.")], "executors need no secret"
    # Nothing of this machine reaches the pods: no interpreter, no SPARK_HOME, no project path.
    assert "spark.pyspark.python" not in conf and "spark.pyspark.driver.python" not in conf
    assert not [k for k in conf if k.startswith("spark.kubernetes.driverEnv.")]
    assert str(settings.PROJECT_ROOT) not in " ".join(cmd[1:]) and sys.executable not in " ".join(cmd[1:])
    folder = f"{shared}/runs/orders/{run_folder.run_folder_name(RUN_ID)}"
    args = _app_args(cmd, application)
    assert args[:3] == ["--pipeline=orders", "--bootstrap-servers=b1:9092", "--topics=orders.v1,refunds"]
    assert f"--bronze-path={shared}/lake/orders/bronze" in args
    assert f"--checkpoint-root={shared}/lake/orders/_checkpoints/bronze" in args
    assert f"--summary-path={folder}/ingest-summary.json" in args
    assert f"--preflight-file={folder}/preflight.json" in args and Path(folder, "preflight.json").is_file()
    assert "--kafka-options-file=/etc/kafka-delta-elt/kafka/kafka-options.json" in args
    assert not Path(folder, "secrets").exists(), "Airflow must not hold the pod's Kafka settings"
    _assert_no_secret(cmd, op._hook._env_vars)
    # The finished driver pod is deleted by Spark's own --kill, in the file's namespace.
    assert kills == [[spark_submit.spark_submit_binary(), "--master", K8S_MASTER, "--conf",
                      "spark.kubernetes.namespace=data", "--kill", f"data:{pod}"]]  # fmt: skip


@pytest.mark.parametrize(("policy", "fail", "deleted"), [
    ("on_success", False, True), ("on_success", True, False), ("always", True, True), ("never", False, False),
])  # fmt: skip
def test_kubernetes_driver_pod_deletion_policy(tmp_path, make_pipeline, monkeypatch, kube_client, policy, fail, deleted):
    cfg = _kubernetes(make_pipeline, tmp_path, delete_driver_pod=policy)
    _, kills = _run(monkeypatch, IngestOperator(task_id="ingest", pipeline=cfg), fail=fail)
    assert bool(kills) is deleted


def test_kubernetes_without_a_kafka_secret_passes_no_options_file(tmp_path, make_pipeline, monkeypatch, kube_client):
    cfg = _kubernetes(make_pipeline, tmp_path, kafka_options_secret=None)
    cmd, _ = _run(monkeypatch, IngestOperator(task_id="ingest", pipeline=cfg))
    assert not [a for a in cmd if a.startswith("--kafka-options-file")]
    assert not [k for k in _confs(cmd) if k.startswith("spark.kubernetes.driver.secrets.")]


def test_kubernetes_transform_job_reads_its_spec_from_the_shared_volume(tmp_path, make_pipeline, monkeypatch,
                                                                        kube_client):  # fmt: skip
    transform = {"schema": {"id": {"type": "string", "required": True}, "ts": "timestamp"},
                 "key": "id", "ordering": "ts"}  # fmt: skip
    shared = tmp_path / "shared"
    cfg = _pipeline(
        make_pipeline, {"profile": "kubernetes", "master_connection_id": "spark_k8s",
                        "kubernetes": {**K8S, "shared_dir": str(shared)}},
        tables={"lakehouse_root": str(shared / "lake")}, transform=transform,
    )  # fmt: skip
    op = TransformOperator(task_id="transform", pipeline=cfg)
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    seen: list[list[str]] = []

    def submit(hook, application: str = "", **kwargs: Any) -> None:
        seen.append(hook._build_spark_submit_command(application))
        summary = next(a.split("=", 1)[1] for a in seen[0] if a.startswith("--summary-path="))
        Path(summary).write_text(json.dumps({"read": 0, "upserted": 0, "deleted": 0, "quarantined": 0,
                                             "superseded": 0, "silver_version": 0, "epoch": 0, "duration_s": 1}))  # fmt: skip

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    from include.orchestration.profiles import kubernetes as kubernetes_profile

    monkeypatch.setattr(kubernetes_profile.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0))
    op.execute(_context())
    (cmd,) = seen
    args = _app_args(cmd, "local:///opt/kafka-delta-elt/spark_jobs/bronze_to_silver.py")
    spec = next(a.split("=", 1)[1] for a in args if a.startswith("--spec-file="))
    assert spec.startswith(f"{shared}/runs/orders/") and json.loads(Path(spec).read_text())["key"] == ["id"]
    assert _confs(cmd)["spark.kubernetes.driver.pod.name"].startswith("kde-orders-transform-")


def test_kubernetes_transform_reads_the_registrys_settings_from_its_secret_never_the_shared_volume(
        tmp_path, make_pipeline, monkeypatch, kube_client):  # fmt: skip
    transform = {"format": "avro", "value_schema": {"registry": "registry_test", "version": 2, "subject": "orders-value"},
                 "schema": {"id": {"type": "string", "required": True}, "ts": "timestamp"},
                 "key": "id", "ordering": "ts"}  # fmt: skip
    shared = tmp_path / "shared"
    cluster = {"profile": "kubernetes", "master_connection_id": "spark_k8s",
               "kubernetes": {**K8S, "shared_dir": str(shared), "registry_secret": "kde-registry"}}  # fmt: skip
    cfg = _pipeline(make_pipeline, cluster, tables={"lakehouse_root": str(shared / "lake")}, transform=transform)
    monkeypatch.setenv("AIRFLOW_CONN_REGISTRY_TEST", json.dumps(
        {"conn_type": "http", "host": "registry", "port": 8081, "login": "elt", "password": "s3cret"}))  # fmt: skip
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    seen: list[list[str]] = []

    def submit(hook, application: str = "", **kwargs: Any) -> None:
        seen.append(hook._build_spark_submit_command(application))
        summary = next(a.split("=", 1)[1] for a in seen[0] if a.startswith("--summary-path="))
        Path(summary).write_text(json.dumps({"read": 0, "upserted": 0, "deleted": 0, "quarantined": 0,
                                             "superseded": 0, "silver_version": 0, "epoch": 0, "duration_s": 1}))  # fmt: skip

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    from include.orchestration.profiles import kubernetes as kubernetes_profile

    monkeypatch.setattr(kubernetes_profile.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0))
    TransformOperator(task_id="transform", pipeline=cfg).execute(_context())
    (cmd,) = seen
    args = _app_args(cmd, "local:///opt/kafka-delta-elt/spark_jobs/bronze_to_silver.py")
    assert "--registry-file=/etc/kafka-delta-elt/registry/schema-registry.json" in args
    assert _confs(cmd)["spark.kubernetes.driver.secrets.kde-registry"] == "/etc/kafka-delta-elt/registry"
    written = [p for p in shared.rglob("*") if p.is_file() and "s3cret" in p.read_text(errors="replace")]
    assert written == [] and "s3cret" not in " ".join(cmd)


def test_kubernetes_with_a_registry_needs_its_secret(tmp_path, make_pipeline):
    transform = {"format": "avro", "value_schema": {"registry": "registry_test", "version": 2, "subject": "orders-value"},
                 "schema": {"id": {"type": "string", "required": True}, "ts": "timestamp"},
                 "key": "id", "ordering": "ts"}  # fmt: skip
    shared = tmp_path / "shared"
    cluster = {"profile": "kubernetes", "master_connection_id": "spark_k8s",
               "kubernetes": {**K8S, "shared_dir": str(shared)}}  # fmt: skip
    with pytest.raises(PipelineConfigError) as err:
        _pipeline(make_pipeline, cluster, tables={"lakehouse_root": str(shared / "lake")}, transform=transform)
    assert err.value.field == "cluster.kubernetes.registry_secret"
    assert "schema registry 'registry_test'" in err.value.problem


# --------------------------------------------------------------------------- the DAG


@pytest.mark.parametrize(("profile", "cluster_tasks", "words"), [
    ("local_standalone", True, "start_cluster"),
    ("existing_master", False, "client mode"),
    ("kubernetes", False, "Kubernetes in cluster mode"),
])  # fmt: skip
def test_dag_has_cluster_tasks_only_for_the_transient_profile(tmp_path, make_pipeline, profile, cluster_tasks, words):
    if profile == "kubernetes":
        cfg = _kubernetes(make_pipeline, tmp_path)
    elif profile == "existing_master":
        cfg = _pipeline(make_pipeline, {"profile": profile, "master_connection_id": "spark_yarn"})
    else:
        cfg = _pipeline(make_pipeline, {"workers": 2})
    dag = dag_factory.build_dag(cfg)
    assert {"start_cluster", "stop_cluster"} <= set(dag.task_ids) if cluster_tasks else \
        not {"start_cluster", "stop_cluster"} & set(dag.task_ids)  # fmt: skip
    assert words in dag.doc_md
    after_preflight = dag.get_task("preflight").downstream_task_ids
    assert ("start_cluster" in after_preflight) is cluster_tasks and ("ingest" in after_preflight) is not cluster_tasks


# --------------------------------------------------------------------------- the pipeline file


def _error(make_pipeline, cluster: dict, **top: Any) -> PipelineConfigError:
    with pytest.raises(PipelineConfigError) as info:
        _pipeline(make_pipeline, cluster, **top)
    assert info.value.file.endswith("orders.yaml")
    return info.value


def _k8s_cluster(tmp_path: Path, **k8s: Any) -> dict:
    return {"profile": "kubernetes", "master_connection_id": "spark_k8s",
            "kubernetes": {**K8S, "shared_dir": str(tmp_path / "shared"), **k8s}}  # fmt: skip


def _lake(tmp_path: Path) -> dict:
    return {"lakehouse_root": str(tmp_path / "shared" / "lake")}


def test_kubernetes_profile_loads_with_defaults(tmp_path, make_pipeline):
    cfg = _kubernetes(make_pipeline, tmp_path)
    k8s = cfg.cluster.kubernetes
    assert (cfg.cluster.profile, profile_of(cfg.cluster).transient) == ("kubernetes", False)
    assert (k8s.image, k8s.namespace, k8s.service_account) == (K8S["image"], "data", "spark-driver")
    assert (k8s.app_dir, k8s.kafka_options_key, k8s.delete_driver_pod) == (
        "/opt/kafka-delta-elt", "kafka-options.json", "on_success")  # fmt: skip
    assert k8s.shared_dir == str(tmp_path / "shared") and k8s.kafka_options_secret == "kde-kafka"


@pytest.mark.parametrize("key", ["image", "namespace", "service_account", "shared_volume_claim", "shared_dir"])
def test_kubernetes_profile_requires_each_key(tmp_path, make_pipeline, key):
    cluster = _k8s_cluster(tmp_path)
    del cluster["kubernetes"][key]
    err = _error(make_pipeline, cluster, tables=_lake(tmp_path))
    assert err.field == f"cluster.kubernetes.{key}"
    assert err.problem == "expected a value (required with profile kubernetes), got nothing (the key is missing)"


@pytest.mark.parametrize(("changes", "field", "expected", "got"), [
    ({"namespace": "Data_NS"}, "namespace", "a Kubernetes namespace name", "'Data_NS' (str)"),
    ({"namespace": "n" * 64}, "namespace", "a Kubernetes namespace name", "(str)"),
    ({"service_account": "Spark Driver"}, "service_account", "a Kubernetes object name", "'Spark Driver' (str)"),
    ({"shared_volume_claim": 7}, "shared_volume_claim", "a Kubernetes object name", "7 (int)"),
    ({"kafka_options_secret": "kde_kafka"}, "kafka_options_secret", "a Kubernetes object name", "'kde_kafka'"),
    ({"kafka_options_key": "a/b.json"}, "kafka_options_key", "a secret key", "'a/b.json' (str)"),
    ({"image": "my image"}, "image", "a container image reference", "'my image' (str)"),
    ({"app_dir": "opt/kde"}, "app_dir", "an absolute path", "'opt/kde' (str)"),
    # A space would split spark.driver.extraJavaOptions into a second JVM option.
    ({"app_dir": "/opt/app -Dlog4j2.configurationFile=/x.xml"}, "app_dir", "an absolute path without spaces",
     "'/opt/app -Dlog4j2.configurationFile=/x.xml' (str)"),
    ({"shared_dir": "/mnt/kde\tshared"}, "shared_dir", "an absolute path without spaces", "(str)"),
    ({"shared_dir": "s3a://bucket/x"}, "shared_dir", "an absolute path", "'s3a://bucket/x' (str)"),
    ({"delete_driver_pod": "sometimes"}, "delete_driver_pod", "one of 'on_success', 'always', 'never'",
     "'sometimes' (str)"),
    ({"kafka_password": "x"}, "kafka_password", "no broker addresses or security settings", "'kafka_password'"),
    ({"imagee": "x"}, "imagee", "one of image, namespace", "unknown key 'imagee'; did you mean 'image'?"),
])  # fmt: skip
def test_kubernetes_keys_are_validated_with_file_field_and_expectation(tmp_path, make_pipeline, changes, field, expected, got):
    err = _error(make_pipeline, _k8s_cluster(tmp_path, **changes), tables=_lake(tmp_path))
    assert err.field == f"cluster.kubernetes.{field}"
    assert expected in err.problem and got in err.problem, err.problem
    assert "hunter" not in err.problem


def test_kubernetes_profile_needs_its_section_and_a_master_connection(tmp_path, make_pipeline):
    err = _error(make_pipeline, {"profile": "kubernetes", "master_connection_id": "spark_k8s"})
    assert err.field == "cluster.kubernetes" and "required with profile kubernetes" in err.problem
    cluster = _k8s_cluster(tmp_path)
    del cluster["master_connection_id"]
    err = _error(make_pipeline, cluster, tables=_lake(tmp_path))
    assert err.field == "cluster.master_connection_id"
    assert "(required with profile kubernetes), got nothing" in err.problem


def test_kubernetes_section_is_refused_where_it_does_not_apply(tmp_path, make_pipeline):
    err = _error(make_pipeline, {"kubernetes": {"image": "i"}})
    assert err.field == "cluster.kubernetes" and "no kubernetes section with profile local_standalone" in err.problem
    err = _error(make_pipeline, {"profile": "existing_master", "master_connection_id": "spark_k8s",
                            "kubernetes": {"image": "i", "shared_dir": "/mnt/kde"}})  # fmt: skip
    assert err.field == "cluster.kubernetes.shared_dir"
    assert "expected only image, namespace with profile existing_master" in err.problem
    err = _error(make_pipeline, {"profile": "existing_master", "master_connection_id": "spark_k8s",
                            "kubernetes": {"namespace": "data"}})  # fmt: skip
    assert err.field == "cluster.kubernetes.image" and "required with profile existing_master" in err.problem
    ok = _pipeline(make_pipeline, {"profile": "existing_master", "master_connection_id": "spark_k8s",
                              "kubernetes": {"image": "i", "namespace": "data"}})  # fmt: skip
    assert (ok.cluster.kubernetes.image, ok.cluster.kubernetes.namespace) == ("i", "data")


def test_kubernetes_tables_must_be_reachable_from_the_pods(tmp_path, make_pipeline):
    # Default lakehouse (this machine's var/ folder): the pods cannot see it.
    err = _error(make_pipeline, _k8s_cluster(tmp_path))
    assert err.field == "tables.bronze_path"
    assert f"inside cluster.kubernetes.shared_dir {str(tmp_path / 'shared')!r}" in err.problem
    # Tables and checkpoints may be URIs (the jobs read checkpoints through Hadoop's filesystem).
    ok = _pipeline(make_pipeline, _k8s_cluster(tmp_path), tables={**_lake(tmp_path), "bronze_path": "s3a://b/bronze",
                                                                  "checkpoint_root": "s3a://b/ckpt"})  # fmt: skip
    assert (ok.tables.bronze_path, ok.tables.checkpoint_root) == ("s3a://b/bronze", "s3a://b/ckpt")
    err = _error(make_pipeline, _k8s_cluster(tmp_path), tables={**_lake(tmp_path), "checkpoint_root": "/elsewhere"})
    assert err.field == "tables.checkpoint_root" and "expected a URI or a path inside" in err.problem


def test_kubernetes_refuses_kafka_options_the_pod_could_not_receive(tmp_path, make_pipeline):
    data_kafka = {"connection_id": "kafka_test", "topics": ["t"], "options": {"max.poll.records": "500"}}
    err = _error(make_pipeline, _k8s_cluster(tmp_path), tables=_lake(tmp_path), kafka=data_kafka)
    assert err.field == "kafka.options" and "kafka_options_secret" in err.problem and "max.poll.records" in err.problem


def test_local_standalone_still_refuses_a_master_connection(tmp_path, make_pipeline):
    err = _error(make_pipeline, {"master_connection_id": "spark_k8s"})
    assert err.field == "cluster.master_connection_id"
    assert "existing_master or kubernetes" in err.problem


def test_every_cluster_profile_has_its_rules_and_its_runtime_part_under_one_name():
    """A profile is two parts in two registries (include/config/profiles, include/orchestration/profiles):
    neither may miss the other, and only a profile whose runs start their own cluster sizes it to the backlog."""
    from include.config.profiles import CLUSTER_PROFILES
    from include.orchestration.profiles import PROFILES

    assert list(CLUSTER_PROFILES) == list(PROFILES)
    for name, profile in PROFILES.items():
        assert profile.name == CLUSTER_PROFILES[name].name == name
        assert CLUSTER_PROFILES[name].sizes_to_backlog == profile.transient
