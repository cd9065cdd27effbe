"""Hand-made monitoring snapshots and run records, shaped as include/monitoring/monitor.py builds them.

A test module is not a library: the page tests (test_monitor_page.py) and the plugin's tests
(tests/plugins/test_kde_monitor.py) both build their snapshots from here.
"""

from __future__ import annotations

#: When the hand-made snapshots were checked.
CHECKED = "2024-05-01T12:10:00+00:00"


def run(run_id="scheduled__2024-05-01T12:00:00+00:00", **over) -> dict:
    """A run-history record as the snapshot carries it: a scheduled run that ingested 1,500 rows; ``over``
    replaces fields."""
    record = {
        "run_id": run_id, "run_type": "scheduled", "action": "normal", "outcome": "success", "reason": None,
        "started_at": "2024-05-01T12:00:00+00:00", "finished_at": "2024-05-01T12:01:30+00:00",
        "duration_s": 90.0, "rows": 1500, "commits": 1, "lag_before": 1500, "lag_after": 0, "lost": 0,
        "continuity": "CONTINUOUS", "quarantined": 0, "bronze_version_after": 7, "requested_by": None,
        "request_reason": None, "link": f"/dags/demo_orders/runs/{run_id}",
        "ranges": [{"topic": "demo.orders", "partition": 0, "from": 100, "until": 1600, "rows": 1500}],
    }  # fmt: skip
    record.update(over)
    return record


def snapshot(**over) -> dict:
    """A healthy pipeline's snapshot as ``monitor.pipeline_snapshot`` returns it, checked at :data:`CHECKED`,
    its last run :func:`run`; ``over`` replaces top-level fields."""
    last = run()
    snap = {
        "pipeline": "demo_orders", "dag_id": "demo_orders", "description": "Orders from the shop",
        "source": {"connection_id": "kafka_default", "bootstrap_servers": "127.0.0.1:9092",
                   "topics": ["demo.orders"], "topic_pattern": None},
        "tables": {"bronze": "/lake/bronze", "silver": None, "ledger": "/lake/_runs"},
        "schedule": "*/10 * * * *", "paused": False, "next_run_at": "2024-05-01T12:20:00+00:00",
        "checked_at": CHECKED, "elapsed_s": 0.42,
        "kafka": {"ok": True, "error": None},
        "table": {"ok": True, "error": None, "exists": True, "version": 7, "epoch": 1},
        "ledger": {"ok": True, "error": None},
        "health": {"state": "ok", "reasons": []},
        "lag": {"records": 1234, "oldest_pending_at": "2024-05-01T12:06:48+00:00",
                "oldest_pending_age_s": 192.0, "partitions_behind": 1, "retention_left_s": 604608.0,
                "retention_at": "demo.orders[1]", "retention_bound": "retention.ms", "retention_margin_s": 1200.0,
                "retention_note": None},
        "partitions": [
            {"topic": "demo.orders", "partition": 1, "earliest": 0, "latest": 1234567, "next_offset": 1233333,
             "lag": 1234, "lost_now": 0, "last_ingested_at": "2024-05-01T12:01:00+00:00",
             "oldest_pending_at": "2024-05-01T12:06:48+00:00", "group_offset": 1233000,
             "retention_left_s": 604608.0, "retention_bound": "retention.ms"},
            {"topic": "demo.orders", "partition": 0, "earliest": 5, "latest": 1600, "next_offset": 1600,
             "lag": 0, "lost_now": 0, "last_ingested_at": "2024-05-01T12:01:00+00:00",
             "oldest_pending_at": None, "group_offset": None, "retention_left_s": None, "retention_bound": None},
        ],
        "open_gaps": [],
        "last_run": last,
        "runs": [last],
        "gaps": [],
        "manual_actions": [],
        "links": {"dag": "/dags/demo_orders", "last_run": last["link"]},
    }  # fmt: skip
    snap.update(over)
    return snap
