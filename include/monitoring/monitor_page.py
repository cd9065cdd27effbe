"""HTML for the monitoring pages of the Airflow UI plugin, rendered on the server with Jinja2.

Pure functions from the snapshot dicts built by :mod:`include.monitoring.monitor` to HTML
strings. This module turns a snapshot into *views*: plain values with the
numbers worked out (states chosen, reasons filtered, ages computed, chart
geometry laid out). The templates in ``include/monitoring/templates/`` only turn
views into markup.

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

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, StrictUndefined

DASH = "—"
#: Seconds between the overview's and the pipeline page's reloads of themselves. A run lasts half a
#: minute at least (Spark's warm-up alone is 17-30 s) and schedules are minutes apart, so 30 s shows
#: a run start and finish while someone watches. Each reload asks Kafka about every pipeline shown,
#: for up to ``KDE_MONITOR_TIMEOUT_S`` (5 s) when a broker is down, so a tab left open costs the
#: brokers a few calls a minute and never spends most of its time loading.
REFRESH_S = 30
#: The templates, found from this file so that the working directory of the API server (or of a
#: test) does not matter.
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"

_STATES = ("ok", "warning", "failing", "unknown")
_OUTCOME_STATE = {"success": "ok", "failed": "failing", "skipped": "unknown"}
_CONTINUITY_STATE = {"CONTINUOUS": "ok", "BROKEN": "failing", "not checked": "unknown"}
# Mid-tone colours read on both the light and the dark page background; SVG presentation
# attributes cannot use the page's CSS variables.
_BEFORE_COLOUR = "#8c959f"
_AFTER_COLOUR = "#2f81f7"
_BAR_COLOURS = {"success": "#2f81f7", "failed": "#e5534b", "skipped": "#8c959f"}
_RANGES_SHOWN = 4


# --------------------------------------------------------------------------- small formatters


def _d(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _pick(item: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``item`` with exactly ``keys`` (missing ones None), so templates never meet an undefined field."""
    return {key: item.get(key) for key in keys}


def _num(value: object, *, grouped: bool = True) -> str:
    """A count for display: thousands separators unless ``grouped`` is False; None is an em dash."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return DASH
        if value.is_integer():
            value = int(value)
        else:
            return f"{value:,.1f}" if grouped else f"{value:.1f}"
    if isinstance(value, int):
        return f"{value:,}" if grouped else str(value)
    return str(value)


def _f(value: float) -> str:
    """A chart coordinate: one decimal is finer than a pixel and keeps the SVG short."""
    return f"{value:.1f}"


def _count(value: object) -> float | None:
    """A plottable number, or None for anything that is not one (bools included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _parse_ts(value: object) -> datetime | None:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        # fromisoformat takes "Z" but not the lowercase "z" RFC 3339 also allows.
        if text[-1] in "Zz":
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
    else:
        return None
    # Naive times are taken as UTC, as Airflow stores them, so they compare with aware ones.
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def humanize_seconds(seconds: float | None) -> str:
    """A duration in its two largest units: ``192`` -> ``"3m 12s"``, ``7500`` -> ``"2h 5m"``.

    Negative durations (clock skew between hosts) count as zero; None and
    non-numbers are an em dash.
    """
    value = _count(seconds)
    if value is None:
        return DASH
    value = max(value, 0.0)
    if 0 < value < 1:
        return "<1s"
    days, rest = divmod(int(value), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    for i, (amount, unit) in enumerate(units):
        if amount:
            text = f"{amount}{unit}"
            if i + 1 < len(units) and units[i + 1][0]:
                text += f" {units[i + 1][0]}{units[i + 1][1]}"
            return text
    return "0s"


def _relative(value: object, now: object) -> str:
    """``"5m ago"`` or ``"in 4m"`` from ``now``; empty when either time is unknown."""
    when, ref = _parse_ts(value), _parse_ts(now)
    if when is None or ref is None:
        return ""
    delta = (ref - when).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"{humanize_seconds(delta)} ago" if delta > 0 else f"in {humanize_seconds(-delta)}"


def _state(value: object) -> str:
    return value if isinstance(value, str) and value in _STATES else "unknown"


def _outcome_state(outcome: object) -> str:
    return _OUTCOME_STATE.get(outcome, "unknown") if isinstance(outcome, str) else "unknown"


def _continuity_state(verdict: object) -> str:
    return _CONTINUITY_STATE.get(verdict, "unknown") if isinstance(verdict, str) else "unknown"


def _allowed_href(url: object) -> str | None:
    """The URL if it may become an href: a same-origin path or http(s), so no ``javascript:`` gets in.

    Autoescape makes any string safe inside the attribute, but not safe to follow.
    """
    if not isinstance(url, str) or not url:
        return None
    # "//host" and "/\host" are protocol-relative in browsers: they leave the Airflow origin.
    if url.startswith("/") and not url.startswith(("//", "/\\")):
        return url
    if url.lower().startswith(("http://", "https://")):
        return url
    return None


def _path_segment(value: object) -> str:
    """``value`` as one URL path segment.

    Jinja's own ``urlencode`` leaves ``/`` as it is, so a name holding one
    (``a</td>``) would become two segments and another route.
    """
    return quote(str(value), safe="")


def _root(base: str) -> str:
    return (base or "").rstrip("/")


def _name(snap: dict[str, Any]) -> object:
    return snap.get("pipeline") or snap.get("dag_id")


# --------------------------------------------------------------------------- templates


def _dash_for_none(value: object) -> object:
    """Every ``{{ ... }}`` that comes out None prints the em dash the pages use for unknown values."""
    return DASH if value is None else value


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATE_DIR),
        # On for every template, not by file name: select_autoescape's defaults leave .svg unescaped.
        autoescape=True,
        # A misspelt field fails the render, and so the tests, instead of printing nothing.
        undefined=StrictUndefined,
        finalize=_dash_for_none,
        # Block tags on lines of their own leave no blank lines or indentation in the page.
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        num=_num,
        duration=humanize_seconds,
        utc=_parse_ts,
        allowed_href=_allowed_href,
        path_segment=_path_segment,
        outcome_state=_outcome_state,
        continuity_state=_continuity_state,
        coord=_f,
    )
    return env


_ENV = _environment()


def _render(template: str, *, refresh_s: int | None = None, **view: Any) -> str:
    """``template`` rendered from ``view``; a page with ``refresh_s`` reloads itself that often."""
    return _ENV.get_template(template).render(refresh_s=refresh_s, **view)


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
        snapshots: one snapshot per pipeline (see :mod:`include.monitoring.monitor`), in display order.
        base: URL prefix of the plugin's app, e.g. ``"/kde-monitor"``.
        checked_at: ISO time the snapshots were taken, shown in the header; also the
            reference for "ago" texts of snapshots without their own ``checked_at``.
        invalid_files: pipeline files that could not be loaded, path -> error; listed
            above the table because those pipelines have no row.

    Returns:
        A complete HTML document.
    """
    rows = [_overview_row(s, checked_at=checked_at) for s in _l(snapshots) if isinstance(s, dict)]
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
        "last_run": {**_pick(last, "outcome", "continuity"), "relative": _relative(last_when, now)} if last else None,
        "open_gaps": _open_gaps(snap),
        "next_run": _next_run(snap, now),
        "kafka": _kafka_box(snap),
        "table": _table_box(snap),
        "partitions": _partition_rows(snap, now),
        "open_gap_rows": [_pick(g, "topic", "partition", "from", "until", "records")
                          for g in _l(snap.get("open_gaps")) if isinstance(g, dict)],  # fmt: skip
        "lag_chart": _lag_chart(runs),
        "rows_chart": _rows_chart(runs),
        "runs": [_run_row(run) for run in runs],
        "recorded_gaps": _history_rows(snap.get("gaps"), runs_by_id, "topic", "partition", "from", "until",
                                       "lost", "reason"),  # fmt: skip
        "manual_actions": _history_rows(snap.get("manual_actions"), runs_by_id, "requested_by", "run_type",
                                        "action", "reason", "outcome"),  # fmt: skip
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
    }


def _partition_rows(snap: dict[str, Any], now: object) -> list[dict[str, Any]]:
    parts = [p for p in _l(snap.get("partitions")) if isinstance(p, dict)]
    parts.sort(key=lambda p: (str(p.get("topic")), _count(p.get("partition")) or 0))
    rows = []
    for p in parts:
        lost = _count(p.get("lost_now"))
        pending = p.get("oldest_pending_at")
        rows.append({
            **_pick(p, "topic", "partition", "earliest", "latest", "next_offset", "lag", "group_offset",
                    "last_ingested_at", "oldest_pending_at", "lost_now"),
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


# --------------------------------------------------------------------------- charts

_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 14, 28, 34


def _plottable(runs: list[dict[str, Any]]) -> list[tuple[datetime, dict[str, Any]]]:
    """Runs that have a time, oldest first; runs come newest first, so equal times keep run order."""
    points = []
    for run in reversed(_l(runs)):
        if not isinstance(run, dict):
            continue
        when = _parse_ts(run.get("finished_at")) or _parse_ts(run.get("started_at"))
        if when is not None:
            points.append((when, run))
    points.sort(key=lambda point: point[0])
    return points


def _nice_ticks(top: float, target: int = 4) -> list[int]:
    """Round y ticks from 0 covering ``top``: steps of 1, 2 or 5 times a power of ten, at least 1."""
    if not math.isfinite(top) or top <= 0:
        top = 1.0
    raw = top / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    step = max(int(round(step)), 1)
    count = math.ceil(top / step - 1e-9)
    return [i * step for i in range(count + 1)]


def _compact(value: int) -> str:
    for limit, suffix in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if value >= limit:
            text = f"{value / limit:.1f}".rstrip("0").rstrip(".")
            return f"{text}{suffix}"
    return str(value)


class _Frame:
    """Plot area geometry: runs sit in equal slots in time order, the y axis starts at zero."""

    def __init__(self, width: int, height: int, count: int, ticks: list[int]) -> None:
        self.width, self.height = width, height
        self.plot_w = width - _LEFT - _RIGHT
        self.plot_h = height - _TOP - _BOTTOM
        self.count = count
        self.ticks = ticks
        self.slot = self.plot_w / count

    def x(self, index: int) -> float:
        return _LEFT + (index + 0.5) * self.slot

    def y(self, value: float) -> float:
        # Negative values cannot be plotted on a zero-based axis; they sit on the baseline.
        return _TOP + self.plot_h * (1 - max(value, 0.0) / self.ticks[-1])

    @property
    def baseline(self) -> float:
        return _TOP + self.plot_h


def _empty_chart(width: int, height: int, label: str) -> dict[str, Any]:
    # A short strip rather than a tall empty frame; the template writes its text large because the
    # chart scales down.
    return {"empty": True, "width": width, "height": min(height, 80), "label": f"{label}: no runs to plot yet"}


def _x_ticks(frame: _Frame, times: list[datetime]) -> list[dict[str, Any]]:
    # Labels need room: at most one per ~110 px and never more than six, whatever the run count.
    count = len(times)
    labels = max(1, min(count, 6, int(frame.plot_w // 110)))
    if labels == 1:
        indices = [count // 2] if count > 1 else [0]
    else:
        indices = sorted({round(j * (count - 1) / (labels - 1)) for j in range(labels)})
    span = times[-1] - times[0]
    if span < timedelta(minutes=5):
        fmt = "%H:%M:%S"
    elif times[0].date() == times[-1].date():
        fmt = "%H:%M"
    else:
        fmt = "%m-%d %H:%M"
    ticks = []
    for n, index in enumerate(indices):
        anchor = "middle"
        if len(indices) > 1 and n == 0:
            anchor = "start"
        elif len(indices) > 1 and n == len(indices) - 1:
            anchor = "end"
        ticks.append({"x": frame.x(index), "label": f"{times[index]:{fmt}}", "anchor": anchor})
    return ticks


def _legend(items: list[tuple[str, str, str]], width: int) -> list[dict[str, Any]]:
    """Legend entries (label, colour, shape) right-aligned above the plot, rightmost first."""
    entries, x = [], width - _RIGHT
    for label, colour, shape in reversed(items):
        x -= 7 * len(label) + 26
        entries.append({"label": label, "colour": colour, "shape": shape, "x": x})
    return entries


def _chart(points: list[tuple[datetime, dict[str, Any]]], values: list[float | None], *, width: int,
           height: int, label: str, unit: str,
           legend: list[tuple[str, str, str]]) -> tuple[dict[str, Any], _Frame]:  # fmt: skip
    """What every chart has: frame, axes and legend; the caller adds its marks."""
    frame = _Frame(width, height, len(points), _nice_ticks(max((v for v in values if v is not None), default=0)))
    chart = {
        "empty": False,
        "width": width,
        "height": height,
        "label": f"{label}, {len(points)} run{'' if len(points) == 1 else 's'}",
        "left": _LEFT,
        "top": _TOP,
        "plot_right": _LEFT + frame.plot_w,
        "plot_h": frame.plot_h,
        "baseline": frame.baseline,
        "slot": frame.slot,
        "unit": unit,
        "y_ticks": [{"y": frame.y(tick), "label": _compact(tick), "opacity": 0.35 if tick == 0 else 0.12}
                    for tick in frame.ticks],  # fmt: skip
        "x_ticks": _x_ticks(frame, [when for when, _ in points]),
        "legend": _legend(legend, width),
        # Where the "UTC" note under the time axis ends.
        "utc_x": width - _RIGHT,
        "utc_y": height - 2,
    }
    return chart, frame


def _run_title(when: datetime, run: dict[str, Any], lines: list[str]) -> str:
    head = [str(run.get("run_id") or "run"), f"{when:%Y-%m-%d %H:%M:%S} UTC"]
    if run.get("outcome"):
        head.append(f"outcome: {run.get('outcome')}")
    return "\n".join(head + lines)


def _lag_chart(runs: list[dict[str, Any]], *, width: int = 720, height: int = 220) -> dict[str, Any]:
    width, height = max(int(width), 240), max(int(height), 120)
    label = "Consumer lag before and after each run"
    points = _plottable(runs)
    if not points:
        return _empty_chart(width, height, label)
    series = [
        ("lag_before", "lag before", _BEFORE_COLOUR, "dash"),
        ("lag_after", "lag after", _AFTER_COLOUR, "line"),
    ]
    values = [_count(run.get(key)) for _, run in points for key, *_ in series]
    chart, frame = _chart(points, values, width=width, height=height, label=label, unit="records",
                          legend=[(text, colour, shape) for _, text, colour, shape in series])  # fmt: skip
    lines = []
    for key, _, colour, shape in series:
        segment: list[str] = []
        # A missing value ends the line there instead of being drawn as zero.
        for i, (_, run) in enumerate([*points, (None, {})]):
            value = _count(run.get(key))
            if value is not None:
                segment.append(f"{_f(frame.x(i))},{_f(frame.y(value))}")
                continue
            if len(segment) > 1:
                lines.append({"series": key, "points": " ".join(segment), "colour": colour,
                              "dashed": shape == "dash"})  # fmt: skip
            segment = []
    chart["lines"] = lines
    chart["radius"] = 3.5 if frame.slot >= 8 else 2
    chart["runs"] = [
        {
            "run_id": run.get("run_id"),
            "title": _run_title(when, run, [f"{text}: {_num(run.get(key))}" for key, text, *_ in series]),
            "x": frame.x(i),
            "column_x": frame.x(i) - frame.slot / 2,
            "dots": [{"series": key, "y": frame.y(value), "colour": colour}
                     for key, _, colour, _ in series if (value := _count(run.get(key))) is not None],  # fmt: skip
        }
        for i, (when, run) in enumerate(points)
    ]
    return chart


def _rows_chart(runs: list[dict[str, Any]], *, width: int = 720, height: int = 220) -> dict[str, Any]:
    width, height = max(int(width), 240), max(int(height), 120)
    label = "Rows ingested per run"
    points = _plottable(runs)
    if not points:
        return _empty_chart(width, height, label)
    values = [_count(run.get("rows")) for _, run in points]
    chart, frame = _chart(points, values, width=width, height=height, label=label, unit="rows",
                          legend=[(o, c, "box") for o, c in _BAR_COLOURS.items()])  # fmt: skip
    bar_w = min(max(frame.slot * 0.7, 1.0), 36.0)
    bars = []
    for i, ((when, run), value) in enumerate(zip(points, values, strict=True)):
        if value is None:
            continue
        # A run with zero rows keeps a 1 px stub, so it can still be seen and hovered.
        bar_h = max(frame.baseline - frame.y(value), 1.0)
        outcome = run.get("outcome")
        lines = [f"rows: {_num(run.get('rows'))}"]
        if _count(run.get("quarantined")):
            lines.append(f"quarantined: {_num(run.get('quarantined'))}")
        bars.append({
            "run_id": run.get("run_id"),
            "title": _run_title(when, run, lines),
            "x": frame.x(i) - bar_w / 2, "y": frame.baseline - bar_h, "width": bar_w, "height": bar_h,
            "colour": _BAR_COLOURS.get(outcome, _BEFORE_COLOUR) if isinstance(outcome, str) else _BEFORE_COLOUR,
        })  # fmt: skip
    chart["bars"] = bars
    return chart


def lag_chart_svg(runs: list[dict[str, Any]], *, width: int = 720, height: int = 220) -> str:
    """Inline SVG of each run's lag before and after it, oldest run on the left.

    Runs are placed in equal slots in time order (``finished_at``, else
    ``started_at``; runs with neither are left out), with time labels under the
    axis. Each run is a ``<g data-run=...>`` with a ``<title>`` tooltip and one
    marker per known value; a missing value breaks its line instead of being
    drawn as zero.

    Args:
        runs: run dicts as in a snapshot's ``runs``, in any order.
        width: viewBox width; the chart scales to its container.
        height: viewBox height.

    Returns:
        An ``<svg class="chart" role="img">`` element, saying "No runs to plot yet." when
        no run has a time.
    """
    return _render("lag_chart.svg", chart=_lag_chart(runs, width=width, height=height))


def rows_chart_svg(runs: list[dict[str, Any]], *, width: int = 720, height: int = 220) -> str:
    """Inline SVG bar chart of the rows each run ingested, oldest run on the left.

    One ``<rect class="bar" data-run=...>`` with a ``<title>`` per run whose row
    count is known, coloured by outcome; runs without a time are left out, as in
    :func:`lag_chart_svg`. A run with zero rows gets a 1 px stub so it can still
    be seen and hovered.

    Args:
        runs: run dicts as in a snapshot's ``runs``, in any order.
        width: viewBox width; the chart scales to its container.
        height: viewBox height.

    Returns:
        An ``<svg class="chart" role="img">`` element, saying "No runs to plot yet." when
        no run has a time.
    """
    return _render("rows_chart.svg", chart=_rows_chart(runs, width=width, height=height))
