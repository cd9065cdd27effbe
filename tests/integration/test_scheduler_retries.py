"""Runs under a real scheduler with the pipeline's default retries: every try of a task counts.

``airflow standalone`` (scheduler, DAG processor, triggerer and API server; LocalExecutor, each task its
own process) runs the pipeline with its default ``retries: 2``, as users run it, instead of ``airflow
dags test`` with ``retries: 0``. The retry delay is shortened to 5 s (``KDE_RETRY_DELAY_S``; 30 s by
default) so the retry comes quickly; the retries themselves are the pipeline's.

Faults come from failpoints with a state folder (``KDE_FAILPOINT_STATE``): each fires once, and the
retried try, which runs in the same environment, gets past it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from include import ports
from include.readers.kafka_admin import create_topic
from include.tooling import airflow_local
from tests.integration.dag_helpers import ORDERS_TRANSFORM, Pipeline, assert_no_cluster_left, order_at_10h
from tests.kafka_helpers import produce

# One scheduler for the module's tests: on one xdist worker, in file order.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("real-scheduler")]

USER, PASSWORD = "operator", "retries-pw"


class Scheduler:
    """``airflow standalone`` on the pipeline's own Airflow home, and its REST API."""

    def __init__(self, p: Pipeline, **env: str) -> None:
        self.log = p.var / "standalone.log"
        port = ports.free_port()
        env = p.environment(**airflow_local.login_environment(p.var / "auth", USER, PASSWORD), **env)
        airflow_local.migrate(env)
        self.proc = airflow_local.start_standalone(env, port=port, log_file=self.log)
        airflow_local.wait_until_serving(self.proc, port, log_file=self.log)
        self.api = airflow_local.AirflowApi(port, USER, PASSWORD)

    def stop(self) -> None:
        airflow_local.stop_standalone(self.proc)

    def errors(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join([line for line in lines if "[error" in line or "ERROR" in line][:30])


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory, bootstrap) -> Iterator[tuple[Pipeline, Scheduler, Path]]:
    """A bronze + silver pipeline with the default retries, 1,500 orders waiting, and a real scheduler whose
    failpoints kill ingest's try 1 right after bronze batch 1 (800 rows) is committed, before Spark's
    checkpoint commit, and then try 2's application right after silver's batch 0 commit, before the
    transform's checkpoint commit (the transform task then submits the step alone)."""
    root = tmp_path_factory.mktemp("scheduled")
    name = f"retried_{uuid.uuid4().hex[:8]}"
    topic = f"{name}.events"
    create_topic(bootstrap, topic, 3)
    p = Pipeline(root, name, topic, bootstrap, root / "airflow-home")
    p.write(transform=ORDERS_TRANSFORM)
    text = (p.dir / f"{name}.yaml").read_text().replace("retries: 0\n", "")  # the pipeline's default retries
    (p.dir / f"{name}.yaml").write_text(text)
    produce(bootstrap, topic, [(i % 3, f"o{i}".encode(), order_at_10h(f"o{i}", i % 60, 1.0 + i % 7)) for i in range(1500)])
    fired = root / "failpoints"
    scheduler = Scheduler(p, KDE_FAILPOINT="kill-driver-after-bronze-commit:1,kill-driver-after-silver-commit:0",
                          KDE_FAILPOINT_STATE=str(fired), KDE_RETRY_DELAY_S="5")  # fmt: skip
    try:
        scheduler.api.wait_for_dag(name)
        scheduler.api.unpause(name)
        yield p, scheduler, fired
    finally:
        scheduler.stop()


def test_a_bad_trigger_config_is_refused_by_the_rest_api_before_a_run_exists(scheduled):
    p, scheduler, _ = scheduled
    status, answer = scheduler.api.trigger(p.name, {"actoin": "rebuild_checkpoint", "reason": "x"})
    assert status == 400, answer
    assert "'actoin': not a param of this DAG's trigger form (did you mean 'action'?)" in answer["detail"]
    status, answer = scheduler.api.trigger(p.name, {"action": "rebuild_checkpoint"})
    assert status == 400 and "reason: required for action 'rebuild_checkpoint'" in answer["detail"], answer
    status, answer = scheduler.api.trigger(p.name, {"action": "backfill_time", "reason": "late data",
                                                    "from_time": "2026-03-02T00:00:00Z",
                                                    "to_time": "2026-03-01T00:00:00Z"})  # fmt: skip
    assert status == 400 and "is not before to_time" in answer["detail"], answer
    assert scheduler.api.runs(p.name) == [], "a refused trigger creates no run"


def test_a_driver_killed_after_a_commit_is_retried_by_airflow_and_the_run_succeeds_with_every_try_counted(scheduled):
    p, scheduler, fired = scheduled
    name = p.name
    status, answer = scheduler.api.trigger(name, run_id="retried-run")
    assert status == 200, answer
    run = scheduler.api.wait_for_run(name, "retried-run")
    tis = scheduler.api.task_instances(name, "retried-run")
    assert sorted(f.name for f in fired.iterdir()) == ["kill-driver-after-bronze-commit@1.0",
                                                        "kill-driver-after-silver-commit@0.0"], "both faults hit"  # fmt: skip
    assert run["state"] == "success", scheduler.errors() or p.ledger()
    assert tis["ingest"]["try_number"] == 2 and tis["ingest"]["state"] == "success"
    assert all(ti["state"] in ("success", "skipped") for ti in tis.values()), tis

    (row,) = p.ledger()
    assert (row["outcome"], row["continuity"]) == ("success", "CONTINUOUS"), row["reason"]
    assert row["rows"] == 1500, "the rows of both tries of ingest"
    assert row["tries"] == 2 and row["tries_json"]["ingest"] == 2
    assert sum(part["rows"] for part in row["partitions_json"]) == 1500
    assert 400 < row["continuity_json"]["earlier_tries_rows"] <= 800, "try 1's two batches of at most 400"
    assert (row["silver_read"], row["silver_upserted"]) == (1500, 1500)
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 1500
    from deltalake import DeltaTable

    assert DeltaTable(str(p.lake / name / "silver")).to_pyarrow_table(columns=["order_id"]).num_rows == 1500
    assert_no_cluster_left(p)


def test_a_run_with_nothing_new_skips_every_task_up_to_record_run_in_one_request(scheduled):
    """After the run above (file order), Kafka holds nothing new: wait_for_lag skips, and it marks the tasks
    after it skipped itself (in its own task process, through the API server), so no scheduler loop waits on
    a skip passed on one level at a time."""
    p, scheduler, _ = scheduled
    status, answer = scheduler.api.trigger(p.name, run_id="nothing-new")
    assert status == 200, answer
    run = scheduler.api.wait_for_run(p.name, "nothing-new")
    tis = scheduler.api.task_instances(p.name, "nothing-new")
    assert run["state"] == "success", scheduler.errors() or tis
    assert tis["check_request"]["state"] == "success"
    assert {t: ti["state"] for t, ti in tis.items() if t != "check_request"} == dict.fromkeys(
        set(tis) - {"check_request"}, "skipped"), tis  # fmt: skip
    assert p.ledger()[0]["outcome"] == "skipped"
    log = scheduler.log.read_text(errors="replace")
    assert "Skipping downstream tasks" in log, scheduler.errors()
