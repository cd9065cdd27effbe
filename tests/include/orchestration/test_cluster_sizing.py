"""A run's cluster sized to its backlog: local mode up to a bound, then as many workers as needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from include.config import ClusterConfig, PipelineConfigError, load_pipeline
from include.contract.handoffs import PreflightResult, RequestPlan
from include.orchestration.cluster_sizing import choose
from include.orchestration.request_plan import run_backlog
from include.orchestration.spark_conf import job_spark_conf


def test_by_default_a_backlog_up_to_200000_records_runs_in_the_driver():
    c = ClusterConfig(workers=3)
    assert c.local_max_records == 200_000
    for records in (0, 1, 200_000):
        assert choose(c, records, cpu_count=2).mode == "local"
    for records in (200_001, None):
        assert (choose(c, records, cpu_count=2).mode, choose(c, records, cpu_count=2).workers) == ("cluster", 3)


def test_with_local_mode_off_every_run_gets_the_configured_cluster():
    c = ClusterConfig(workers=3, local_max_records=0)
    for records in (0, 1, 10**9, None):
        choice = choose(c, records, cpu_count=2)
        assert (choice.mode, choice.workers) == ("cluster", 3)
    assert "cluster.workers 3" in choose(c, 5, 2).reason


def test_a_backlog_up_to_the_bound_runs_in_the_driver_on_at_most_the_machines_cores():
    c = ClusterConfig(workers=2, worker_cores=2, local_max_records=1000)
    choice = choose(c, 1000, cpu_count=2)
    assert (choice.mode, choice.local_master) == ("local", "local[2]")
    assert choice.reason == "local[2] in the driver: backlog 1000 records <= cluster.local_max_records 1000"
    assert choose(ClusterConfig(local_max_records=10), 0, cpu_count=8).local_master == "local[1]"
    above = choose(c, 1001, cpu_count=2)
    assert above.mode == "cluster" and "backlog 1001 records > cluster.local_max_records 1000" in above.reason
    # Not knowing the backlog is never a reason to skip the cluster.
    assert choose(c, None, cpu_count=2).mode == "cluster"


@pytest.mark.parametrize(("records", "workers"), [(1, 1), (5000, 1), (5001, 2), (14_000, 3), (10**9, 4)])
def test_workers_follow_the_backlog_up_to_the_maximum(records, workers):
    choice = choose(ClusterConfig(workers=4, records_per_worker=5000, local_max_records=0), records, cpu_count=2)
    assert (choice.mode, choice.workers, choice.cores) == ("cluster", workers, workers)
    assert f"{workers} of at most 4 worker(s) at cluster.records_per_worker 5000" in choice.reason


def test_the_backlog_is_a_backfills_offsets_or_else_the_preflights_lag():
    lag = PreflightResult.from_xcom({"lag": {"total_lag": 7}})
    assert run_backlog(RequestPlan.from_xcom({"action": "backfill_offsets", "offsets": 120}), lag) == 120
    assert run_backlog(RequestPlan.from_xcom({"action": "normal"}), lag) == 7
    assert run_backlog(RequestPlan.from_xcom({}), None) is None


def test_the_job_asks_for_the_cores_of_the_workers_that_started(make_pipeline):
    cfg = make_pipeline("p", kafka={"connection_id": "k", "topics": ["t"]}, cluster={"workers": 4, "worker_cores": 2, "records_per_worker": 10})
    # The scheduler waits for spark.cores.max cores: asking for 4 workers' cores with 1 started waits 30 s.
    assert job_spark_conf(cfg, transient=True, workers=1)["spark.cores.max"] == "2"
    assert job_spark_conf(cfg, transient=True)["spark.cores.max"] == "8"


@pytest.mark.parametrize("key", ["local_max_records", "records_per_worker"])
def test_sizing_needs_the_runs_own_cluster(tmp_path, key):
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps({"name": "p", "schedule": None, "kafka": {"connection_id": "k", "topics": ["t"]},
                                "cluster": {"profile": "existing_master", "master_connection_id": "spark_x",
                                            key: 100}}))  # fmt: skip
    with pytest.raises(PipelineConfigError, match=f"cluster.{key}.*0 or no value with profile existing_master") as e:
        load_pipeline(Path(path))
    assert str(path) in str(e.value)


def test_every_run_driver_gets_the_short_job_flags_the_benchmarks_plain_submit_does_not(make_pipeline, monkeypatch):
    from include import settings
    from include.spark import jvm_cds
    from include.tooling.job_submit import submit_command

    monkeypatch.delenv(settings.CDS_ENV, raising=False)
    cfg = make_pipeline("p", kafka={"connection_id": "k", "topics": ["t"]})
    # A run's driver plans on a cluster, or processes a backlog the sizing judged small in local mode.
    run_driver = job_spark_conf(cfg, transient=True)["spark.driver.extraJavaOptions"]
    assert jvm_cds.SHORT_JOB_FLAGS in run_driver
    assert "-Dlog4j.configurationFile=" in run_driver
    # The benchmark submits both of its jobs with Java's defaults, so their drains compare like for like.
    plain = next(c for c in submit_command("x.py", [], master="local[2]") if c.startswith("spark.driver.extraJavaOptions="))
    assert "TieredStopAtLevel" not in plain and "UseSerialGC" not in plain


def test_executors_of_a_clusters_small_backlog_stop_at_c1_a_large_or_unknown_one_keeps_the_full_jit(make_pipeline):
    from include.spark import jvm_cds

    cfg = make_pipeline("p", kafka={"connection_id": "k", "topics": ["t"]})
    limit = jvm_cds.SHORT_JOB_MAX_RECORDS
    small = job_spark_conf(cfg, transient=True, backlog=20_000)
    at_limit = job_spark_conf(cfg, transient=True, backlog=limit)
    no_providers = "-Dorg.apache.kafka.automatic.config.providers=none"
    short = f"{no_providers} -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
    assert small["spark.executor.extraJavaOptions"] == at_limit["spark.executor.extraJavaOptions"] == short
    for conf in (job_spark_conf(cfg, transient=True, backlog=limit + 1), job_spark_conf(cfg, transient=True),
                 job_spark_conf(cfg, transient=False, backlog=20_000)):  # fmt: skip
        assert conf["spark.executor.extraJavaOptions"] == no_providers


def test_no_driver_or_executor_enables_a_kafka_config_provider(make_pipeline):
    cfg = make_pipeline("p")
    for conf in (job_spark_conf(cfg, transient=True), job_spark_conf(cfg, transient=False)):
        for role in ("driver", "executor"):
            assert "-Dorg.apache.kafka.automatic.config.providers=none" in conf[f"spark.{role}.extraJavaOptions"]
