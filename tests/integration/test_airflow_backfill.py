"""``airflow backfill create`` over two past days, run by a real scheduler (``airflow standalone``).

Backfill runs re-read the records of their data interval by Kafka timestamp and
insert only what bronze lacks; the unpaused DAG's own scheduled run goes
through the same per-pipeline lock.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from include.ports import free_port
from include.readers.kafka_admin import create_topic
from include.tooling import airflow_local
from include.tooling.warm_airflow import WarmAirflow
from tests.integration.dag_helpers import Pipeline, assert_no_cluster_left
from tests.kafka_helpers import produce_at

pytestmark = [pytest.mark.integration, pytest.mark.full]

DAY_MS = 86_400_000


def _airflow(warm: WarmAirflow, env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    # Forked from the warm command line: the test polls `dags list-runs` every few seconds.
    log = Path(tempfile.mkstemp(prefix="airflow-cli-", suffix=".log")[1])
    try:
        proc = warm.completed(args, env, log_file=log, timeout_s=300)
    finally:
        log.unlink(missing_ok=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"airflow {' '.join(args)} failed: {proc.stdout[-5000:]}")
    return proc


def _runs(warm: WarmAirflow, env: dict, dag_id: str) -> list[dict]:
    out = _airflow(warm, env, "dags", "list-runs", dag_id, "-o", "json").stdout
    found = [line for line in out.splitlines() if line.startswith("[{") or line.strip() == "[]"]
    return json.loads(found[-1]) if found else []


def test_airflow_backfill_create_over_two_past_days_reinserts_only_what_is_missing(tmp_path, unique_name, bootstrap):
    home = tmp_path / "airflow-home"
    airflow_local.migrate(airflow_local.environment(home))
    name = unique_name.replace("-", "_")
    topic = f"{unique_name}.events"
    create_topic(bootstrap, topic, 3)
    p = Pipeline(tmp_path, name, topic, bootstrap, home)
    p.write(schedule="0 0 * * *")

    today = int(time.time() * 1000) // DAY_MS * DAY_MS
    # Not yesterday: the unpaused DAG's own latest run (catchup off) has yesterday's logical date, and a
    # backfill run of the same date raced it in the scheduler (UNIQUE dag_id + logical_date, a crash loop).
    day1, day2 = today - 3 * DAY_MS, today - 2 * DAY_MS
    records = [
        (part, f"{part}-{i}".encode(), b"v", start + 3_600_000 + i * 60_000)
        for start, count in ((day1, 10), (day2, 10))
        for part in range(3)
        for i in range(count)
    ]  # fmt: skip
    produce_at(bootstrap, topic, sorted(records, key=lambda r: (r[0], r[3])))
    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    from deltalake import DeltaTable

    bronze = DeltaTable(str(p.lake / p.name / "bronze"))
    assert int(bronze.delete('"offset" < 10')["num_deleted_rows"]) == 30  # day 1's records, lost from bronze

    env = airflow_local.environment(
        home, kafka_bootstrap=bootstrap, pipelines_dir=p.dir,
        extra={"KDE_LAKEHOUSE_ROOT": str(p.lake), "KDE_VAR_DIR": str(p.var)},
    )  # fmt: skip
    warm = WarmAirflow(env)
    port, log = free_port(), p.var / "standalone.log"
    server = None
    try:
        # The backfill is created before the scheduler starts: SQLite answers a write that would wait on
        # the scheduler's open transaction with an immediate "database is locked" (a deadlock it breaks
        # without the busy timeout), and `backfill create` commits its backfill row before its runs, so
        # it cannot simply be retried. The DAG stays paused (its runs wait) until the API server answers:
        # a task the scheduler starts before that fails at once (the execution API refuses connections).
        _airflow(warm, env, "dags", "reserialize")
        fmt = "%Y-%m-%d"
        _airflow(warm, env, "backfill", "create", "--dag-id", name, "--max-active-runs", "1",
                 "--from-date", datetime.fromtimestamp(day1 / 1000, UTC).strftime(fmt),
                 "--to-date", datetime.fromtimestamp(day2 / 1000, UTC).strftime(fmt))  # fmt: skip
        server = airflow_local.start_standalone(env, port=port, log_file=log)
        airflow_local.wait_until_serving(server, port, log_file=log)
        deadline = time.monotonic() + 120
        while _airflow(warm, env, "dags", "unpause", name, check=False).returncode != 0:
            assert time.monotonic() < deadline, "the DAG could not be unpaused"
            time.sleep(2)
        deadline = time.monotonic() + 900
        while True:
            backfills = [r for r in _runs(warm, env, name) if r["run_id"].startswith("backfill__")]
            if len(backfills) == 2 and all(r["state"] in ("success", "failed") for r in backfills):
                break
            assert time.monotonic() < deadline, f"backfill runs did not finish: {backfills}"
            time.sleep(5)
    finally:
        warm.stop()
        if server is not None:
            airflow_local.stop_standalone(server)
    text = log.read_text(errors="replace")
    errors = [line for line in text.splitlines() if "[error" in line][:20]  # the first, not the last, say why
    assert [r["state"] for r in backfills] == ["success", "success"], "\n".join(errors) or text[-5000:]

    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 60, "day 1's records are back and nothing was ingested twice"
    ledger = [r for r in p.ledger() if r["run_type"] == "backfill"]
    assert sorted((r["action"], r["rows"], r["outcome"], r["continuity"]) for r in ledger) == [
        ("airflow_backfill", 0, "success", "CONTINUOUS"),  # day 2: all 30 records were there
        ("airflow_backfill", 30, "success", "CONTINUOUS"),  # day 1: the 30 deleted ones
    ]
    windows = sorted(r["request_json"]["time_range"]["from"][:10] for r in ledger)
    assert windows == [datetime.fromtimestamp(d / 1000, UTC).strftime("%Y-%m-%d") for d in (day1, day2)]
    assert_no_cluster_left(p)
