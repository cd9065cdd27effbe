"""HTML for the monitoring pages of the Airflow UI plugin, rendered on the server with Jinja2.

Pure functions from the snapshot dicts built by :mod:`include.monitoring.monitor` to HTML
strings. This module turns a snapshot into *views*: plain values with the
numbers worked out (states chosen, reasons filtered, ages computed); the charts'
geometry is :mod:`include.monitoring.monitor_charts`, the formatters and the
Jinja2 environment :mod:`include.monitoring.monitor_format`. The templates in
``include/monitoring/templates/`` only turn views into markup.

The pages carry no JavaScript and load no CSS, fonts or scripts from
elsewhere: they are shown in an iframe of the Airflow UI on machines that
often have no internet, and charts are inline SVG for the same reason. The
overview and pipeline pages reload themselves every :data:`REFRESH_S` seconds
with a ``<meta http-equiv="refresh">``, which needs no script.

Escaping is Jinja's autoescape, on for every template (the SVG ones too):
pipeline names, topics, paths, reasons, error messages, run ids and
who-asked-for-what all come from users, and no markup is built from strings
here. Unknown values (``None``) are shown as an em dash. Times are shown in UTC.
"""

from __future__ import annotations

from typing import Any

from include.monitoring.monitor_charts import _lag_chart, _retention_chart, _rows_chart
from include.monitoring.monitor_format import (
    _STATES,
    _count,
    _d,
    _l,
    _name,
    _parse_ts,
    _pick,
    _relative,
    _render,
    _root,
    _state,
)

#: Seconds between the overview's and the pipeline page's reloads of themselves. A run lasts half a
#: minute at least (Spark's warm-up alone is 17-30 s) and schedules are minutes apart, so 30 s shows
#: a run start and finish while someone watches. Each reload asks Kafka about every pipeline shown,
#: for up to ``KDE_MONITOR_TIMEOUT_S`` (5 s) when a broker is down, so a tab left open costs the
#: brokers a few calls a minute and never spends most of its time loading.
REFRESH_S = 30
_RANGES_SHOWN = 4



# --------------------------------------------------------------------------- views shared by both pages

_PROBLEM_LABELS = {
    "kafka": "Kafka unreachable",
    "table": "Bronze table unreadable",
    "ledger": "Run ledger unreadable",
}


def _problem(key: str, snap: dict[str, Any]) -> dict[str, Any] | None:
    """An alert for a source of the snapshot that could not be read, or None when it could."""
    part = _d(snap.get(key))
    if part.get("ok") is not False:
        return None
    return {"key": key, "label": _PROBLEM_LABELS[key], "error": part.get("error")}


def _problems(snap: dict[str, Any]) -> list[dict[str, Any]]:
    return [problem for key in _PROBLEM_LABELS if (problem := _problem(key, snap))]


def _reasons(snap: dict[str, Any], *, shown_as_alerts: bool) -> list[str]:
    """Health reasons; those an alert already says in the same words are left out."""
    reasons = [str(r) for r in _l(_d(snap.get("health")).get("reasons")) if r not in (None, "")]
    if not shown_as_alerts:
        return reasons
    said = {problem["label"].casefold() for problem in _problems(snap)}
    return [r for r in reasons if r.casefold() not in said]


def _kafka_down(snap: dict[str, Any]) -> bool:
    return _d(snap.get("kafka")).get("ok") is False


def _ledger_down(snap: dict[str, Any]) -> bool:
    return _d(snap.get("ledger")).get("ok") is False


def _pending_age(lag: dict[str, Any], now: object) -> float | None:
    age = _count(lag.get("oldest_pending_age_s"))
    if age is not None:
        return age
    oldest, ref = _parse_ts(lag.get("oldest_pending_at")), _parse_ts(now)
    return (ref - oldest).total_seconds() if oldest and ref else None


def _lag(snap: dict[str, Any], now: object) -> dict[str, Any] | None:
    """Records waiting in Kafka, or None when unknown."""
    lag = _d(snap.get("lag"))
    records = lag.get("records")
    # Without the broker the lag is unknown, whatever numbers the snapshot still carries.
    if _kafka_down(snap) or records is None:
        return None
    return {"records": records, "age_s": _pending_age(lag, now), "behind": lag.get("partitions_behind")}


def _retention(snap: dict[str, Any]) -> dict[str, Any] | None:
    """The least time left before Kafka's retention may delete unread records, where and by which setting,
    whether that is a risk, and why it is unknown; ``None`` while the broker is unreachable."""
    if _kafka_down(snap):
        return None
    lag = _d(snap.get("lag"))
    return {**_pick(lag, "retention_left_s", "retention_at", "retention_bound", "retention_margin_s",
                    "retention_note"),
            "unread": lag.get("records"), "at_risk": _d(snap.get("health")).get("at_risk") is True}  # fmt: skip


def _retention_order(row: dict[str, Any]) -> tuple[bool, float]:
    """The overview's order: the least time left first; pipelines without a bound (or unknown) after."""
    left = _count((row.get("retention") or {}).get("retention_left_s"))
    return (left is None, left if left is not None else 0.0)


def _open_gaps(snap: dict[str, Any]) -> dict[str, Any] | None:
    """How many open data-loss gaps and the records they lost (None if not known), or None when unknown."""
    gaps = snap.get("open_gaps")
    if _kafka_down(snap) or gaps is None:
        return None
    gaps = [g for g in _l(gaps) if isinstance(g, dict)]
    known = [g["records"] for g in gaps if _count(g.get("records")) is not None]
    return {"count": len(gaps), "lost": sum(known) if known else None}


def _next_run(snap: dict[str, Any], now: object) -> dict[str, Any]:
    next_at = snap.get("next_run_at")
    return {"paused": snap.get("paused") is True, "schedule": snap.get("schedule"), "at": next_at,
            "relative": _relative(next_at, now)}  # fmt: skip


def _runs_by_id(snap: dict[str, Any]) -> dict[object, dict[str, Any]]:
    return {r.get("run_id"): r for r in _l(snap.get("runs")) if isinstance(r, dict) and r.get("run_id")}


def _history_rows(items: object, runs_by_id: dict[object, dict[str, Any]],
                  *keys: str) -> list[dict[str, Any]]:  # fmt: skip
    """Recorded gaps or manual actions, each with the Airflow link of the run that recorded it if listed."""
    rows = []
    for item in _l(items):
        if isinstance(item, dict):
            run_id = item.get("run_id")
            run = runs_by_id.get(run_id) if isinstance(run_id, str) else None
            rows.append({**_pick(item, "finished_at", "run_id", *keys), "run_href": run.get("link") if run else None})
    return rows


# --------------------------------------------------------------------------- overview


def render_overview(
    snapshots: list[dict[str, Any]],
    *,
    base: str,
    checked_at: str,
    invalid_files: dict[str, str] | None = None,
) -> str:
    """The overview page: one table row per pipeline, worst problems visible at a glance.

    Args:
        snapshots: one snapshot per pipeline (see :mod:`include.monitoring.monitor`); shown by the least
            time left before Kafka's retention may delete unread records, then in the order given.
        base: URL prefix of the plugin's app, e.g. ``"/kde-monitor"``.
        checked_at: ISO time the snapshots were taken, shown in the header; also the
            reference for "ago" texts of snapshots without their own ``checked_at``.
        invalid_files: pipeline files that could not be loaded, path -> error; listed
            above the table because those pipelines have no row.

    Returns:
        A complete HTML document.
    """
    rows = [_overview_row(s, checked_at=checked_at) for s in _l(snapshots) if isinstance(s, dict)]
    # Stable: pipelines with the same (or no) time left keep the order they were given in.
    rows.sort(key=_retention_order)
    states = [row["state"] for row in rows]
    return _render(
        "overview.html",
        refresh_s=REFRESH_S,
        root=_root(base),
        checked_at=checked_at,
        rows=rows,
        tally=[(state, states.count(state)) for state in _STATES if state in states],
        invalid_files=list(_d(invalid_files).items()),
    )


def _overview_row(snap: dict[str, Any], *, checked_at: str) -> dict[str, Any]:
    now = snap.get("checked_at") or checked_at
    health = _d(snap.get("health"))
    last = snap.get("last_run")
    last_run = None
    if isinstance(last, dict):
        when = last.get("finished_at") or last.get("started_at")
        last_run = {**_pick(last, "link", "outcome", "rows", "continuity", "quarantined"),
                    "when": when, "relative": _relative(when, now),
                    "quarantined_any": bool(_count(last.get("quarantined")))}  # fmt: skip
    return {
        "name": _name(snap),
        "state": _state(health.get("state")),
        "health": health.get("state") or "unknown",
        # The badge's tooltip has every reason; the list under it leaves out what the alerts say.
        "tooltip": "\n".join(_reasons(snap, shown_as_alerts=False)),
        "reasons": _reasons(snap, shown_as_alerts=True),
        "problems": _problems(snap),
        "lag": _lag(snap, now),
        "retention": _retention(snap),
        "last_run": last_run,
        "ledger_down": _ledger_down(snap),
        "open_gaps": _open_gaps(snap),
        "next_run": _next_run(snap, now),
        "dag_link": _d(snap.get("links")).get("dag"),
    }


# --------------------------------------------------------------------------- pipeline page


def render_pipeline(snap: dict[str, Any], *, base: str) -> str:
    """The page of one pipeline: health, Kafka and table status, partitions, charts and history.

    Args:
        snap: the pipeline's snapshot (see :mod:`include.monitoring.monitor`).
        base: URL prefix of the plugin's app, e.g. ``"/kde-monitor"``.

    Returns:
        A complete HTML document.
    """
    snap = _d(snap)
    now = snap.get("checked_at")
    health = _d(snap.get("health"))
    links = _d(snap.get("links"))
    runs = [r for r in _l(snap.get("runs")) if isinstance(r, dict)]
    runs_by_id = _runs_by_id(snap)
    last = _d(snap.get("last_run"))
    last_when = last.get("finished_at") or last.get("started_at")
    lag = _d(snap.get("lag"))
    page = {
        "name": _name(snap),
        "state": _state(health.get("state")),
        "health": health.get("state") or "unknown",
        "description": snap.get("description"),
        # The boxes below show Kafka, table and ledger failures with their errors.
        "reasons": _reasons(snap, shown_as_alerts=True),
        "checked_at": now,
        "elapsed_s": _count(snap.get("elapsed_s")),
        "dag_link": links.get("dag"),
        "last_run_link": links.get("last_run"),
        "kafka_down": _kafka_down(snap),
        "ledger_down": _ledger_down(snap),
        "lag": _pick(lag, "records", "partitions_behind"),
        "silver_lag": _d(snap.get("silver_lag")) if snap.get("silver_lag") is not None else None,
        "pending_age_s": _pending_age(lag, now),
        "retention": _retention(snap),
        "last_run": {**_pick(last, "outcome", "continuity"), "relative": _relative(last_when, now)} if last else None,
        "open_gaps": _open_gaps(snap),
        "next_run": _next_run(snap, now),
        "kafka": _kafka_box(snap),
        "table": _table_box(snap),
        "partitions": _partition_rows(snap, now),
        "open_gap_rows": [_pick(g, "topic", "partition", "from", "until", "records")
                          for g in _l(snap.get("open_gaps")) if isinstance(g, dict)],  # fmt: skip
        "lag_chart": _lag_chart(runs),
        "retention_chart": _retention_chart(runs),
        "rows_chart": _rows_chart(runs),
        "runs": [_run_row(run) for run in runs],
        "recorded_gaps": _history_rows(snap.get("gaps"), runs_by_id, "topic", "partition", "from", "until",
                                       "lost", "reason"),  # fmt: skip
        "manual_actions": _history_rows(snap.get("manual_actions"), runs_by_id, "requested_by", "run_type",
                                        "action", "reason", "outcome", "report"),  # fmt: skip
    }
    return _render("pipeline.html", refresh_s=REFRESH_S, root=_root(base), page=page)


def _kafka_box(snap: dict[str, Any]) -> dict[str, Any]:
    kafka, source = _d(snap.get("kafka")), _d(snap.get("source"))
    return {
        "ok": kafka.get("ok"),
        "problem": _problem("kafka", snap),
        # Reachable, yet a later call failed: the offsets are good, some extras are missing.
        "error": kafka.get("error") if kafka.get("ok") is True else None,
        "notes": [n for n in _l(kafka.get("notes")) if n],
        "topics": [t for t in _l(source.get("topics")) if t is not None],
        **_pick(source, "topic_pattern", "connection_id", "bootstrap_servers"),
    }


def _table_box(snap: dict[str, Any]) -> dict[str, Any]:
    table, paths = _d(snap.get("table")), _d(snap.get("tables"))
    return {
        **_pick(table, "ok", "exists", "version", "epoch"),
        "problem": _problem("table", snap),
        # A readable table can still carry an error about an extra, e.g. the last-ingested times.
        "error": table.get("error") if table.get("ok") is not False else None,
        "ledger_problem": _problem("ledger", snap),
        **_pick(paths, "bronze", "silver", "ledger"),
        "maintenance": _d(snap.get("maintenance")),
        "routes": _route_rows(snap),
        "unrouted": _d(snap.get("unrouted")) if snap.get("unrouted") else None,
    }


def _route_rows(snap: dict[str, Any]) -> list[dict[str, Any]]:
    """A routed pipeline's routes: each one's match, tables and silver lag (records bronze holds it has not
    applied; ``None`` when the lag could not be read)."""
    lags = _d(_d(snap.get("silver_lag")).get("routes"))
    return [{**_pick(r, "route", "match", "silver", "quarantine"), "lag": _count(lags.get(str(r.get("route"))))}
            for r in _l(snap.get("routes")) if isinstance(r, dict)]  # fmt: skip


def _partition_rows(snap: dict[str, Any], now: object) -> list[dict[str, Any]]:
    parts = [p for p in _l(snap.get("partitions")) if isinstance(p, dict)]
    parts.sort(key=lambda p: (str(p.get("topic")), _count(p.get("partition")) or 0))
    rows = []
    for p in parts:
        lost = _count(p.get("lost_now"))
        pending = p.get("oldest_pending_at")
        rows.append({
            **_pick(p, "topic", "partition", "earliest", "latest", "next_offset", "lag", "group_offset",
                    "last_ingested_at", "oldest_pending_at", "lost_now", "retention_left_s", "retention_bound"),
            "lost": int(lost) if lost else None,
            "pending_relative": _relative(pending, now) if pending else "",
        })  # fmt: skip
    return rows


def _run_row(run: dict[str, Any]) -> dict[str, Any]:
    ranges = [_pick(r, "topic", "partition", "from", "until", "rows") for r in _l(run.get("ranges"))
              if isinstance(r, dict)]  # fmt: skip
    return {
        **_pick(run, "run_id", "run_type", "action", "requested_by", "request_reason", "started_at",
                "duration_s", "rows", "quarantined", "lost", "lag_before", "lag_after", "continuity",
                "outcome", "reason", "link"),
        "quarantined_any": bool(_count(run.get("quarantined"))),
        "lost_any": bool(_count(run.get("lost"))),
        # Long range lists are folded into a <details>, which needs no script.
        "ranges_shown": ranges[:_RANGES_SHOWN],
        "ranges_folded": ranges[_RANGES_SHOWN:],
    }


# --------------------------------------------------------------------------- error page


def render_error(title: str, message: str, *, base: str, status_hint: str = "") -> str:
    """A small page for problems such as an unknown pipeline, with a way back to the overview.

    It does not reload itself: a reload would only ask again for the same
    unknown or forbidden pipeline.

    Args:
        title: heading, e.g. ``"Unknown pipeline"``.
        message: what went wrong, e.g. which name was asked for.
        base: URL prefix of the plugin's app, e.g. ``"/kde-monitor"``.
        status_hint: optional short note such as ``"404"``, shown under the message.

    Returns:
        A complete HTML document.
    """
    return _render("error.html", root=_root(base), title=title, message=message, status_hint=status_hint)
