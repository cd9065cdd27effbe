"""The monitoring snapshot's own logic: health verdicts, secrets masking, history and the last ingested record.

The last-ingested lookup runs on a real Delta table written with delta-rs; the
unreachable-broker case uses a port nothing listens on. The page against a
real broker and pipeline is in ``tests/integration/test_monitor_ui.py``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from include.config import load_pipeline
from include.monitoring import monitor
from include.monitoring.monitor_page import render_pipeline
from include.readers import run_ledger
from tests.include.monitoring.snapshots import snapshot

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def _snap(**changes) -> dict:
    base = {
        "kafka": {"ok": True, "error": None},
        "table": {"ok": True, "error": None},
        "ledger": {"ok": True, "error": None},
        "open_gaps": [],
        "last_run": {"outcome": "success", "reason": "", "continuity": "CONTINUOUS", "quarantined": 0},
        "paused": False,
        "lag": {"records": 0},
    }
    base.update(changes)
    return base


def test_health_is_ok_only_when_every_source_answers_and_the_last_run_was_clean():
    assert monitor._health(_snap()) == {"state": "ok", "reasons": [], "at_risk": False}


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"kafka": {"ok": False, "error": "x"}}, "Kafka unreachable"),
        ({"table": {"ok": False, "error": "x"}}, "bronze table unreadable"),
        ({"ledger": {"ok": False, "error": "x"}}, "run ledger unreadable"),
        ({"open_gaps": [{"records": 5}, {"records": 2}]}, "7 records deleted by Kafka before they were read"),
        ({"last_run": {"outcome": "failed", "reason": "failed at ingest", "continuity": "not checked",
                       "quarantined": None}}, "last run failed: failed at ingest"),  # fmt: skip
        ({"last_run": {"outcome": "success", "reason": "", "continuity": "BROKEN", "quarantined": 0}},
         "last run's continuity check found a break"),  # fmt: skip
    ],
)
def test_each_failure_makes_the_pipeline_failing_with_its_reason(changes, reason):
    health = monitor._health(_snap(**changes))
    assert health["state"] == "failing"
    assert reason in health["reasons"]


def test_quarantine_and_a_paused_dag_with_lag_are_warnings_and_no_runs_is_unknown():
    warned = monitor._health(_snap(last_run={"outcome": "success", "reason": "", "continuity": "CONTINUOUS",
                                             "quarantined": 3}, paused=True, lag={"records": 9}))  # fmt: skip
    assert warned == {"state": "warning", "reasons": ["3 records quarantined in the last run",
                                                      "DAG paused with 9 records waiting"], "at_risk": False}  # fmt: skip
    assert monitor._health(_snap(last_run=None))["state"] == "unknown"
    # A failure outranks warnings, which are still listed.
    both = monitor._health(_snap(kafka={"ok": False}, paused=True, lag={"records": 1}))
    assert both["state"] == "failing" and "DAG paused with 1 records waiting" in both["reasons"]


def _retention_lag(left_s: float | None, margin_s: float = 1200.0) -> dict:
    return {"records": 9, "retention_left_s": left_s, "retention_at": "orders[2]", "retention_bound": "retention.ms",
            "retention_margin_s": margin_s}  # fmt: skip


def test_retention_within_the_margin_puts_the_pipeline_at_risk_naming_the_partition_and_the_setting():
    health = monitor._health(_snap(lag=_retention_lag(600.0)))
    assert health["state"] == "warning" and health["at_risk"] is True
    (reason,) = health["reasons"]
    assert reason.startswith("at risk: Kafka's retention may delete unread records of orders[2] in 10 min")
    assert "(retention.ms)" in reason and "margin of 20 min" in reason and "proceeds at once" in reason
    # Beyond the margin, a scheduled pipeline is not at risk; unbounded or unknown never is.
    for left in (1300.0, None):
        assert monitor._health(_snap(lag=_retention_lag(left)))["at_risk"] is False


def test_a_paused_dag_is_at_risk_whenever_retention_bounds_what_waits():
    health = monitor._health(_snap(paused=True, lag=_retention_lag(7 * 86400.0)))
    assert health["at_risk"] is True
    assert "at risk: the DAG is paused and Kafka's retention may delete unread records of orders[2] in 7.0 days" \
        in " | ".join(health["reasons"])  # fmt: skip
    assert monitor._health(_snap(paused=True, lag=_retention_lag(None)))["at_risk"] is False


def test_redact_masks_secret_settings_and_keeps_the_rest():
    config = {"bootstrap.servers": "b:9092", "sasl.password": "hunter2", "sasl.username": "svc",
              "ssl.key.password": "k3y", "sasl.oauthbearer.client.secret": "abc"}  # fmt: skip
    text = "auth as svc with hunter2 and k3y / abc failed at b:9092"
    assert monitor.redact(text, config) == "auth as svc with *** and *** / *** failed at b:9092"
    assert monitor.redact(text, None) == text


def test_history_lists_gaps_and_manual_actions_newest_first():
    rows = [
        {"run_id": "r2", "finished_at": T0 + timedelta(hours=1), "action": "acknowledge_gap", "run_type": "manual",
         "requested_by": "ana", "request_reason": "retention cut", "outcome": "success",
         "gaps_json": [{"topic": "t", "partition": 1, "from": 10, "until": 15, "reason": "acknowledged"}]},
        {"run_id": "r1", "finished_at": T0, "action": None, "outcome": "success", "gaps_json": []},
    ]  # fmt: skip
    gaps, actions = monitor._history(rows)
    assert gaps == [{"run_id": "r2", "finished_at": (T0 + timedelta(hours=1)).isoformat(), "topic": "t",
                     "partition": 1, "from": 10, "until": 15, "lost": 5, "reason": "acknowledged"}]  # fmt: skip
    assert [(a["run_id"], a["action"], a["requested_by"], a["reason"]) for a in actions] == [
        ("r2", "acknowledge_gap", "ana", "retention cut")
    ]
    assert actions[0]["report"] is None


def test_a_dry_run_is_listed_among_manual_actions_with_its_report():
    rows = [{"run_id": "r3", "finished_at": T0, "action": "backfill_offsets", "run_type": "manual",
             "requested_by": "ana", "request_reason": "check first", "outcome": "dry_run",
             "reason": "dry run of backfill_offsets: would insert 5 records into bronze: ..."}]  # fmt: skip
    (action,) = monitor._history(rows)[1]
    assert (action["outcome"], action["report"]) == ("dry_run", rows[0]["reason"])
    page = render_pipeline(snapshot(manual_actions=[action], runs=[]), base="/kde-monitor")
    assert "dry_run" in page
    assert '<div class="sub" data-field="dry_run_report">dry run of backfill_offsets: would insert 5 records' in page


def test_run_view_keeps_only_partitions_that_got_rows_and_links_to_the_airflow_run():
    row = {"run_id": "manual__2026-11-01T12:00:00+00:00", "rows": 3, "started_at": T0, "finished_at": T0,
           "partitions_json": [{"topic": "t", "partition": 0, "from": 5, "until": 8, "rows": 3},
                               {"topic": "t", "partition": 1, "from": None, "until": None, "rows": 0}]}  # fmt: skip
    view = monitor._run_view(row, "dag/x")
    assert view["ranges"] == [{"topic": "t", "partition": 0, "from": 5, "until": 8, "rows": 3}]
    assert view["link"] == "/dags/dag%2Fx/runs/manual__2026-11-01T12%3A00%3A00%2B00%3A00"
    assert view["action"] == "normal" and view["started_at"] == T0.isoformat()


def _bronze(path, rows: list[tuple[str, int, int, datetime]]) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    table = pa.table({
        "topic": pa.array([r[0] for r in rows], pa.string()),
        "partition": pa.array([r[1] for r in rows], pa.int32()),
        "offset": pa.array([r[2] for r in rows], pa.int64()),
        "timestamp": pa.array([r[3] for r in rows], pa.timestamp("us", tz="UTC")),
    })  # fmt: skip
    write_deltalake(str(path), table, mode="append")


def test_last_ingested_is_the_newest_record_below_the_position_even_past_a_wide_hole(tmp_path):
    bronze = tmp_path / "bronze"
    rows = [("t", 0, o, T0 + timedelta(seconds=o)) for o in range(10)]
    # Partition 1: a hole of 5,000 offsets (compaction, aborted transactions) under its position.
    rows += [("t", 1, 3, T0 + timedelta(minutes=3)), ("t", 1, 5004, T0 + timedelta(minutes=9))]
    _bronze(bronze, rows)
    found = monitor.last_ingested(str(bronze), {("t", 0): 10, ("t", 1): 5004, ("t", 2): 0, ("u", 0): 7})
    assert found == {
        ("t", 0): T0 + timedelta(seconds=9),
        ("t", 1): T0 + timedelta(minutes=3),  # not 5004's: that one is at the position, not below it
        ("t", 2): None,
        ("u", 0): None,
    }


def test_snapshot_with_an_unreachable_broker_answers_in_bounded_time_from_the_table_and_ledger(tmp_path):
    lake = tmp_path / "lake"
    file = tmp_path / "p.yaml"
    file.write_text(f"name: p\nkafka: {{connection_id: k, topics: [t]}}\nschedule: null\n"
                    f"tables: {{lakehouse_root: '{lake}'}}\n")  # fmt: skip
    cfg = load_pipeline(file)
    run_ledger.append_run(cfg.tables.ledger_path, {
        "pipeline": "p", "run_id": "r1", "run_type": "manual", "outcome": "success", "rows": 4,
        "started_at": T0, "finished_at": T0 + timedelta(seconds=30), "continuity": "CONTINUOUS",
    })  # fmt: skip
    started = time.monotonic()
    snap = monitor.pipeline_snapshot(cfg, {"bootstrap.servers": "127.0.0.1:1", "sasl.password": "hunter2"},
                                     timeout_s=1.5)  # fmt: skip
    elapsed = time.monotonic() - started
    assert elapsed < 15, elapsed  # the 1.5 s timeout bounds it: ten times that, for a busy machine
    assert snap["kafka"]["ok"] is False and snap["kafka"]["error"].startswith("broker unreachable: ")
    assert "hunter2" not in str(snap)
    assert snap["health"]["state"] == "failing" and "Kafka unreachable" in snap["health"]["reasons"]
    assert snap["lag"]["records"] is None and snap["partitions"] == []
    assert [(r["run_id"], r["rows"]) for r in snap["runs"]] == [("r1", 4)]
    assert snap["table"] == {"ok": True, "error": None, "exists": False, "version": None, "epoch": None,
                             "position_from": None, "restored": None}


def test_snapshot_without_connection_settings_says_why(tmp_path):
    file = tmp_path / "q.yaml"
    file.write_text("name: q\nkafka: {connection_id: missing, topics: [t]}\nschedule: null\n"
                    f"tables: {{lakehouse_root: '{tmp_path}/lake'}}\n")  # fmt: skip
    snap = monitor.pipeline_snapshot(load_pipeline(file), None,
                                     kafka_error="Airflow connection 'missing' does not exist")  # fmt: skip
    assert snap["kafka"] == {"ok": False, "notes": [],
                             "error": "Kafka not asked: Airflow connection 'missing' does not exist"}  # fmt: skip
    assert snap["health"]["state"] == "failing"


def test_maintenance_view_counts_files_and_finds_each_tables_last_maintenance(tmp_path):
    from dataclasses import replace

    import pyarrow as pa
    from deltalake import write_deltalake

    from include.config import load_pipeline
    from include.monitoring.monitor import maintenance_view

    path = tmp_path / "p.yaml"
    path.write_text("name: p\nkafka: {connection_id: k, topics: [t]}\nschedule: null\nmaintenance: {every_runs: 10}\n")
    cfg = load_pipeline(path)
    cfg = replace(cfg, tables=replace(cfg.tables, bronze_path=str(tmp_path / "b"), ledger_path=str(tmp_path / "l")))
    for i in range(3):
        write_deltalake(str(tmp_path / "b"), pa.table({"x": [i]}), mode="append")
    done = {"tables": {"bronze": {"files_before": 9, "files_after": 1}, "ledger": {"path": "/l", "error": "x"}}}
    rows = [{"run_id": "r3", "finished_at": None, "maintenance_json": None},
            {"run_id": "r2", "finished_at": None, "maintenance_json": done},
            {"run_id": "r1", "finished_at": None, "maintenance_json": {"tables": {"bronze": {"files_before": 5,
                                                                                           "files_after": 1}}}}]  # fmt: skip
    view = maintenance_view(cfg, rows)
    assert view["policy"] == "every 10 runs"
    assert view["tables"] == [
        {"table": "bronze", "files": 3, "last": {"run_id": "r2", "at": None, "files_before": 9, "files_after": 1}},
        {"table": "ledger", "files": None, "last": None},  # no ledger yet; its failed maintenance is not "last"
    ]


def test_the_kafka_deadline_counts_from_the_first_kafka_call_not_from_the_tables_reads(tmp_path, monkeypatch):
    # A slow table side (a fresh API server's first use of delta-rs and pyarrow) must not spend the
    # time the Kafka calls are given. Kafka is stubbed: what is tested is the deadline's arithmetic.
    from include.readers import kafka_calls

    file = tmp_path / "p.yaml"
    file.write_text(f"name: p\nkafka: {{connection_id: k, topics: [t]}}\nschedule: null\n"
                    f"tables: {{lakehouse_root: '{tmp_path / 'lake'}'}}\n")  # fmt: skip
    cfg = load_pipeline(file)

    def slow_table(*args, **kwargs):
        time.sleep(1.0)

    given: list[float] = []

    def read_topics(config, *, topics=(), pattern=None, timeout_s=10.0):
        given.append(timeout_s)
        raise kafka_calls.KafkaUnavailableError("no broker in this test")

    monkeypatch.setattr(monitor.delta_progress, "read_progress", slow_table)
    monkeypatch.setattr(monitor.kafka_state, "read_topics", read_topics)
    snap = monitor.pipeline_snapshot(cfg, {"bootstrap.servers": "127.0.0.1:1"}, timeout_s=2.0)
    assert snap["kafka"]["ok"] is False
    assert len(given) == 1 and given[0] > 1.5, given


def _ledger_of(tmp_path, runs: int) -> str:
    path = str(tmp_path / "ledger")
    for i in range(runs):
        run_ledger.append_run(path, {
            "pipeline": "p", "run_id": f"r{i}", "run_type": "manual", "outcome": "success", "rows": i,
            "started_at": T0 + timedelta(minutes=i), "finished_at": T0 + timedelta(minutes=i, seconds=30),
            "action": "backfill_offsets" if i == 0 else "normal", "tasks_json": {"ingest": "success"},
        })  # fmt: skip
    return path


def test_the_page_reads_only_the_newest_runs_and_the_columns_it_shows(tmp_path, monkeypatch):
    monkeypatch.setattr(monitor, "HISTORY_RUNS", 3)
    path = _ledger_of(tmp_path, 5)
    rows = monitor.LedgerCache().recent_runs(path)
    assert [r["run_id"] for r in rows] == ["r4", "r3", "r2"]
    assert "tasks_json" not in rows[0] and rows[0]["rows"] == 4
    # r0's backfill lies beyond the runs searched, so the page no longer lists it.
    assert monitor._history(rows)[1] == []


def test_an_unchanged_ledger_is_not_read_again_and_a_new_run_shows_at_once(tmp_path, monkeypatch):
    path = _ledger_of(tmp_path, 2)
    reads = []
    real = run_ledger.newest_runs
    monkeypatch.setattr(run_ledger, "newest_runs", lambda *a, **k: reads.append(a) or real(*a, **k))
    cache = monitor.LedgerCache()
    first = cache.recent_runs(path)
    assert cache.recent_runs(path) is first and len(reads) == 1
    run_ledger.append_run(path, {"pipeline": "p", "run_id": "r9", "outcome": "failed",
                                 "finished_at": T0 + timedelta(hours=1)})  # fmt: skip
    assert [r["run_id"] for r in cache.recent_runs(path)] == ["r9", "r1", "r0"] and len(reads) == 2
    assert monitor.LedgerCache().recent_runs(str(tmp_path / "none")) == []


def test_the_cache_holds_a_bounded_number_of_ledgers(tmp_path):
    cache = monitor.LedgerCache(size=2)
    paths = [_ledger_of(tmp_path / str(i), 1) for i in range(3)]
    for path in paths:
        cache.recent_runs(path)
    assert list(cache._rows) == paths[1:]


def test_a_failed_runs_recorded_error_names_the_action_that_fixes_it():
    from include.contract.offsets import OffsetError

    error = OffsetError("refusing to write", topic="t", partition=1, action="rebuild_checkpoint")
    row = {"run_id": "r1", "outcome": "failed", "reason": "failed at ingest", "error_json": error.to_dict()}
    view = monitor._run_view(row, "orders")
    assert view["error"]["class"] == "OffsetError" and view["error"]["fields"]["partition"] == 1
    health = monitor._health(_snap(last_run={**view, "continuity": "not checked", "quarantined": None}))
    assert "to fix it, trigger the pipeline with action 'rebuild_checkpoint'" in health["reasons"]
    assert monitor._run_view({"run_id": "r2"}, "orders")["error"] is None


def test_silver_lag_is_a_warning_with_the_records_bronze_holds_and_silver_does_not():
    health = monitor._health(_snap(silver_lag={"records": 101, "error": None}))
    assert health["state"] == "warning"
    assert health["reasons"] == ["silver lag: 101 records in bronze not applied to silver yet; the next run's "
                                 "transform applies them"]  # fmt: skip
    assert monitor._health(_snap(silver_lag={"records": 0, "error": None}))["state"] == "ok"


def test_the_snapshot_reads_silver_lag_from_the_tables_even_with_kafka_down(tmp_path):
    from tests.include.readers.delta_commits import ingest

    lake = tmp_path / "lake"
    file = tmp_path / "orders.yaml"
    file.write_text(f"name: orders\nkafka: {{connection_id: k, topics: [t]}}\nschedule: null\n"
                    f"tables: {{lakehouse_root: '{lake}'}}\n"
                    "transform: {schema: {id: string, ts: timestamp}, key: id, ordering: ts}\n")  # fmt: skip
    cfg = load_pipeline(file)
    ingest(lake / "orders" / "bronze", 0, -1, 0, 0, 3, {0: 3})  # 3 records in bronze, no silver yet
    snap = monitor.pipeline_snapshot(cfg, {"bootstrap.servers": "127.0.0.1:1"}, timeout_s=1.0)
    assert snap["silver_lag"] == {"records": 3, "error": None}
    assert any(r.startswith("silver lag: 3 records") for r in snap["health"]["reasons"])
