"""HTML for the monitoring pages of the Airflow UI plugin, rendered on the server.

Pure functions from the snapshot dicts built by :mod:`include.monitor` to HTML
strings. The pages carry no JavaScript and load no CSS, fonts or scripts from
elsewhere: they are shown in an iframe of the Airflow UI on machines that
often have no internet, and charts are inline SVG for the same reason.

Every string taken from a snapshot is escaped, attributes included: pipeline
names, reasons, error messages, run ids and who-asked-for-what all come from
users. Unknown values (``None``) are shown as an em dash. Times are shown in UTC.
"""

from __future__ import annotations

import html
import math
from datetime import datetime, timedelta, timezone
from urllib.parse import quote

DASH = "—"

_STATES = ("ok", "warning", "failing", "unknown")
_OUTCOME_STATE = {"success": "ok", "failed": "failing", "skipped": "unknown"}
_CONTINUITY_STATE = {"CONTINUOUS": "ok", "BROKEN": "failing", "not checked": "unknown"}
# Mid-tone colours read on both the light and the dark page background; SVG presentation
# attributes cannot use the page's CSS variables.
_BEFORE_COLOUR = "#8c959f"
_AFTER_COLOUR = "#2f81f7"
_BAR_COLOURS = {"success": "#2f81f7", "failed": "#e5534b", "skipped": "#8c959f"}
_RANGES_SHOWN = 4

_CSS = """
:root{--fg:#1f2328;--muted:#656d76;--bg:#fff;--card:#f6f8fa;--line:#d0d7de;--link:#0969da;
--ok:#1a7f37;--warning:#9a6700;--failing:#cf222e;--unknown:#6e7781;--alert-bg:#ffebe9;--warn-bg:#fff8c5}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#8d96a0;--bg:#0d1117;--card:#161b22;
--line:#30363d;--link:#4493f8;--ok:#3fb950;--warning:#d29922;--failing:#f85149;--unknown:#8b949e;
--alert-bg:#3c1618;--warn-bg:#3a2d0b}}
*{box-sizing:border-box}
body{margin:0;padding:16px 20px 32px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--fg);background:var(--bg)}
a{color:var(--link);text-decoration:none}a:hover{text-decoration:underline}
h1{font-size:22px;margin:0 0 4px;display:flex;align-items:center;gap:10px;flex-wrap:wrap}
h2{font-size:16px;margin:24px 0 8px}
.box h2{margin-top:0}
.meta,.sub,.muted{color:var(--muted)}.meta{margin:0 0 12px}.sub{font-size:12px}
.desc{margin:4px 0 8px}
.crumbs{font-size:13px;margin-bottom:8px}
.badge{display:inline-block;border:1px solid currentColor;border-radius:999px;padding:0 8px;
font-size:12px;font-weight:600;line-height:18px;white-space:nowrap}
.st-ok{color:var(--ok)}.st-warning{color:var(--warning)}.st-failing{color:var(--failing)}
.st-unknown{color:var(--unknown)}
.reasons{margin:2px 0 0;padding-left:18px;font-size:12px;color:var(--muted)}
.alert{background:var(--alert-bg);color:var(--failing);border-left:3px solid var(--failing);
padding:4px 8px;margin:4px 0;border-radius:3px;font-size:13px;overflow-wrap:anywhere}
.alert .detail{font-size:12px}.alert ul{margin:2px 0;padding-left:18px}
.warn{color:var(--warning);font-weight:600}.bad{color:var(--failing);font-weight:600}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--muted);white-space:nowrap;background:var(--card)}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
time{white-space:nowrap;font-variant-numeric:tabular-nums}
tr.row-ok td:first-child{box-shadow:inset 3px 0 var(--ok)}
tr.row-warning td:first-child{box-shadow:inset 3px 0 var(--warning)}
tr.row-failing td:first-child{box-shadow:inset 3px 0 var(--failing)}
tr.row-unknown td:first-child{box-shadow:inset 3px 0 var(--unknown)}
tr.lost td{background:var(--alert-bg)}
.name{font-weight:600;font-size:14px}
td[data-col=pipeline]{min-width:220px;max-width:420px}
table.overview th{white-space:normal}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(135px,1fr));gap:8px;margin:12px 0}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:8px 10px}
.card .k{font-size:12px;color:var(--muted)}.card .v{font-size:15px;font-weight:600;overflow-wrap:anywhere}
.card time{white-space:normal}
.boxes{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:12px}
.box{border:1px solid var(--line);border-radius:6px;padding:10px 12px}
.box.down{border-color:var(--failing)}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0;font-size:13px}
dl.kv dt{color:var(--muted)}dl.kv dd{margin:0;overflow-wrap:anywhere}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(360px,1fr));gap:12px}
figure{margin:0;border:1px solid var(--line);border-radius:6px;padding:8px}
figcaption{font-size:13px;font-weight:600;margin-bottom:4px}
svg.chart{width:100%;height:auto;display:block;color:var(--fg)}
.empty{color:var(--muted);font-style:italic}
code{font-size:12px}
details summary{cursor:pointer;color:var(--link)}
"""


# --------------------------------------------------------------------------- small formatters


def _e(value: object) -> str:
    """Escaped text of any value, for element content and attributes alike; None is an em dash."""
    if value is None:
        return DASH
    return html.escape(str(value), quote=True)


def _d(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _l(value: object) -> list:
    return list(value) if isinstance(value, list | tuple) else []


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
    return _e(value)


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
        # Python 3.10's fromisoformat rejects the "Z" suffix that JSON producers like to use.
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
        return parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc)


def _ts(value: object) -> str:
    """A ``<time>`` element in UTC; text that is not a timestamp is shown as it is, escaped."""
    parsed = _parse_ts(value)
    if parsed is None:
        return DASH if value is None or value == "" else _e(value)
    return f'<time datetime="{_e(parsed.isoformat())}" title="{_e(value)}">{parsed:%Y-%m-%d %H:%M:%S}</time>'


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


def _badge(text: object, state: str, *, title: str = "") -> str:
    tip = f' title="{_e(title)}"' if title else ""
    return f'<span class="badge st-{state}"{tip}>{_e(text)}</span>'


def _state(value: object) -> str:
    return value if isinstance(value, str) and value in _STATES else "unknown"


def _outcome_badge(outcome: object) -> str:
    if outcome is None:
        return DASH
    return _badge(outcome, _OUTCOME_STATE.get(outcome, "unknown") if isinstance(outcome, str) else "unknown")


def _continuity_badge(verdict: object) -> str:
    if verdict is None:
        return DASH
    return _badge(
        verdict, _CONTINUITY_STATE.get(verdict, "unknown") if isinstance(verdict, str) else "unknown"
    )


def _safe_href(url: object) -> str | None:
    """The URL if it may become an href: a same-origin path or http(s), so no ``javascript:`` gets in."""
    if not isinstance(url, str) or not url:
        return None
    # "//host" and "/\host" are protocol-relative in browsers: they leave the Airflow origin.
    if url.startswith("/") and not url.startswith(("//", "/\\")):
        return url
    if url.lower().startswith(("http://", "https://")):
        return url
    return None


def _airflow_link(url: object, text_html: str) -> str:
    """A link into the Airflow UI; ``_top`` because this page lives in an iframe of that UI."""
    href = _safe_href(url)
    if href is None:
        return text_html
    return f'<a href="{_e(href)}" target="_top">{text_html}</a>'


def _root(base: str) -> str:
    return (base or "").rstrip("/")


def _pipeline_url(base: str, name: object) -> str:
    return f"{_root(base)}/pipelines/{quote(str(name), safe='')}"


def _api_url(base: str, name: object = None) -> str:
    if name is None:
        return f"{_root(base)}/api/pipelines"
    return f"{_root(base)}/api/pipelines/{quote(str(name), safe='')}"


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )


def _name(snap: dict) -> object:
    return snap.get("pipeline") or snap.get("dag_id")


_PROBLEM_LABELS = {
    "kafka": "Kafka unreachable",
    "table": "Bronze table unreadable",
    "ledger": "Run ledger unreadable",
}


def _alert(key: str, error: object) -> str:
    """The label and the error on lines of their own: monitor errors often restate the label."""
    detail = f'<div class="detail">{_e(error)}</div>' if error else ""
    return f'<div class="alert" data-problem="{key}"><strong>{_PROBLEM_LABELS[key]}</strong>{detail}</div>'


def _problems(snap: dict) -> list[str]:
    """Visible alerts, error text included, for the parts of the snapshot that could not be read."""
    return [
        _alert(key, _d(snap.get(key)).get("error"))
        for key in _PROBLEM_LABELS
        if _d(snap.get(key)).get("ok") is False
    ]


def _reasons(snap: dict, *, shown_as_alerts: bool) -> list[str]:
    """Health reasons; those an alert already says in the same words are left out."""
    reasons = [str(r) for r in _l(_d(snap.get("health")).get("reasons")) if r not in (None, "")]
    if not shown_as_alerts:
        return reasons
    said = {
        label.casefold() for key, label in _PROBLEM_LABELS.items() if _d(snap.get(key)).get("ok") is False
    }
    return [r for r in reasons if r.casefold() not in said]


def _kafka_down(snap: dict) -> bool:
    return _d(snap.get("kafka")).get("ok") is False


def _ledger_down(snap: dict) -> bool:
    return _d(snap.get("ledger")).get("ok") is False


def _pending_age(lag: dict, now: object) -> float | None:
    age = _count(lag.get("oldest_pending_age_s"))
    if age is not None:
        return age
    oldest, ref = _parse_ts(lag.get("oldest_pending_at")), _parse_ts(now)
    return (ref - oldest).total_seconds() if oldest and ref else None


def _lag_html(snap: dict, now: object) -> str:
    lag = _d(snap.get("lag"))
    records = lag.get("records")
    # Without the broker the lag is unknown, whatever numbers the snapshot still carries.
    if _kafka_down(snap) or records is None:
        return DASH
    parts = [f"{_num(records)} records"]
    if records == 0:
        parts.append('<div class="sub">up to date</div>')
    else:
        age = _pending_age(lag, now)
        if age is not None:
            parts.append(f'<div class="sub">oldest pending {humanize_seconds(age)}</div>')
        behind = lag.get("partitions_behind")
        if behind is not None:
            parts.append(
                f'<div class="sub">{_num(behind)} partition{"" if behind == 1 else "s"} behind</div>'
            )
    return "".join(parts)


def _open_gaps_html(snap: dict) -> str:
    gaps = snap.get("open_gaps")
    if _kafka_down(snap) or gaps is None:
        return DASH
    gaps = [g for g in _l(gaps) if isinstance(g, dict)]
    if not gaps:
        return '<span class="st-ok">none</span>'
    known = [g["records"] for g in gaps if _count(g.get("records")) is not None]
    text = f"{len(gaps)} gap{'' if len(gaps) == 1 else 's'}"
    if known:
        text += f" · {_num(sum(known))} records lost"
    return f'<span class="bad">{text}</span>'


def _next_run_html(snap: dict, now: object) -> str:
    schedule = snap.get("schedule")
    schedule_line = f'<div class="sub"><code>{_e(schedule)}</code></div>' if schedule else ""
    if snap.get("paused") is True:
        return f'<span class="warn">paused</span>{schedule_line}'
    if not schedule:
        return '<span class="muted">manual only</span>'
    next_at = snap.get("next_run_at")
    if next_at is None:
        return DASH + schedule_line
    rel = _relative(next_at, now)
    return _ts(next_at) + (f'<div class="sub">{_e(rel)}</div>' if rel else "") + schedule_line


def _runs_by_id(snap: dict) -> dict:
    return {r.get("run_id"): r for r in _l(snap.get("runs")) if isinstance(r, dict) and r.get("run_id")}


def _run_link(run_id: object, runs: dict) -> str:
    run = runs.get(run_id) if isinstance(run_id, str) else None
    return _airflow_link(run.get("link"), _e(run_id)) if run else _e(run_id)


# --------------------------------------------------------------------------- overview


def render_overview(
    snapshots: list[dict], *, base: str, checked_at: str, invalid_files: dict[str, str] | None = None
) -> str:
    """The overview page: one table row per pipeline, worst problems visible at a glance.

    Args:
        snapshots: one snapshot per pipeline (see :mod:`include.monitor`), in display order.
        base: URL prefix of the plugin's app, e.g. ``"/kde-monitor"``.
        checked_at: ISO time the snapshots were taken, shown in the header; also the
            reference for "ago" texts of snapshots without their own ``checked_at``.
        invalid_files: pipeline files that could not be loaded, path -> error; listed
            above the table because those pipelines have no row.

    Returns:
        A complete HTML document.
    """
    snapshots = [s for s in _l(snapshots) if isinstance(s, dict)]
    states = [_state(_d(s.get("health")).get("state")) for s in snapshots]
    tally = " · ".join(
        f'<span class="st-{state}">{states.count(state)} {state}</span>'
        for state in _STATES
        if state in states
    )
    header = (
        "<header><h1>Kafka → Delta pipelines</h1>"
        f'<p class="meta">checked at {_ts(checked_at)} UTC'
        f" · {len(snapshots)} pipeline{'' if len(snapshots) == 1 else 's'}{': ' + tally if tally else ''}"
        f' · <a href="{_e(_api_url(base))}">JSON</a></p></header>'
    )
    header += _invalid_files(invalid_files)
    if not snapshots:
        return _page("Kafka → Delta pipelines", header + '<p class="empty">No pipelines configured.</p>')
    head = "".join(
        f"<th{cls}>{title}</th>"
        for title, cls in (
            ("Pipeline", ""),
            ("Lag", ' class="num"'),
            ("Last run", ""),
            ("Continuity", ""),
            ("Open data-loss gaps", ' title="Records Kafka deleted before the table read them"'),
            ("Quarantined", ' class="num"'),
            ("Next run", ""),
            ("Links", ""),
        )
    )
    rows = "\n".join(_overview_row(s, base=base, checked_at=checked_at) for s in snapshots)
    table = f'<div class="scroll"><table class="overview"><thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody></table></div>'
    return _page("Kafka → Delta pipelines", header + table)


def _invalid_files(invalid_files: dict[str, str] | None) -> str:
    files = _d(invalid_files)
    if not files:
        return ""
    items = "".join(f"<li><code>{_e(path)}</code>: {_e(error)}</li>" for path, error in files.items())
    count = f"{len(files)} pipeline file{' was' if len(files) == 1 else 's were'} not loaded"
    return f'<div class="alert" data-problem="invalid_files"><strong>{count}</strong><ul>{items}</ul></div>'


def _overview_row(snap: dict, *, base: str, checked_at: str) -> str:
    name = _name(snap)
    now = snap.get("checked_at") or checked_at
    health = _d(snap.get("health"))
    state = _state(health.get("state"))
    reasons = _reasons(snap, shown_as_alerts=True)
    reason_list = "".join(f"<li>{_e(r)}</li>" for r in reasons)
    title = f'<a class="name" href="{_e(_pipeline_url(base, name))}">{_e(name)}</a>' if name else DASH
    pipeline = (
        f"{title} "
        + _badge(
            health.get("state") or "unknown", state, title="\n".join(_reasons(snap, shown_as_alerts=False))
        )
        + (f'<ul class="reasons">{reason_list}</ul>' if reasons else "")
        + "".join(_problems(snap))
    )

    last = snap.get("last_run")
    if isinstance(last, dict):
        when = last.get("finished_at") or last.get("started_at")
        rel = _relative(when, now)
        last_html = (
            _airflow_link(last.get("link"), _ts(when))
            + f" {_outcome_badge(last.get('outcome'))}"
            + f'<div class="sub">{_num(last.get("rows"))} rows{" · " + _e(rel) if rel else ""}</div>'
        )
        continuity = _continuity_badge(last.get("continuity"))
        quarantined = last.get("quarantined")
        quarantined_html = _num(quarantined)
        if _count(quarantined):
            quarantined_html = f'<span class="warn">{quarantined_html}</span>'
    else:
        last_html = DASH if _ledger_down(snap) else '<span class="muted">no runs yet</span>'
        continuity = quarantined_html = DASH

    links = _d(snap.get("links"))
    dag_link = _airflow_link(links.get("dag"), "DAG") if _safe_href(links.get("dag")) else ""
    json_link = f'<a href="{_e(_api_url(base, name))}">JSON</a>' if name else ""
    return (
        f'<tr class="row-{state}" data-pipeline="{_e(name)}">'
        f'<td data-col="pipeline">{pipeline}</td>'
        f'<td class="num" data-col="lag">{_lag_html(snap, now)}</td>'
        f'<td data-col="last_run">{last_html}</td>'
        f'<td data-col="continuity">{continuity}</td>'
        f'<td data-col="open_gaps">{_open_gaps_html(snap)}</td>'
        f'<td class="num" data-col="quarantined">{quarantined_html}</td>'
        f'<td data-col="next_run">{_next_run_html(snap, now)}</td>'
        f'<td data-col="links">{" · ".join(x for x in (dag_link, json_link) if x)}</td>'
        "</tr>"
    )


# --------------------------------------------------------------------------- pipeline page


def render_pipeline(snap: dict, *, base: str) -> str:
    """The page of one pipeline: health, Kafka and table status, partitions, charts and history.

    Args:
        snap: the pipeline's snapshot (see :mod:`include.monitor`).
        base: URL prefix of the plugin's app, e.g. ``"/kde-monitor"``.

    Returns:
        A complete HTML document.
    """
    snap = _d(snap)
    name = _name(snap)
    now = snap.get("checked_at")
    health = _d(snap.get("health"))
    state = _state(health.get("state"))
    # The boxes below show Kafka, table and ledger failures with their errors.
    reasons = _reasons(snap, shown_as_alerts=True)
    links = _d(snap.get("links"))
    runs = [r for r in _l(snap.get("runs")) if isinstance(r, dict)]
    runs_by_id = _runs_by_id(snap)

    meta_links = [f'<a href="{_e(_api_url(base, name))}">JSON</a>']
    if _safe_href(links.get("dag")):
        meta_links.insert(0, _airflow_link(links.get("dag"), "DAG in Airflow"))
    if _safe_href(links.get("last_run")):
        meta_links.insert(1, _airflow_link(links.get("last_run"), "last run in Airflow"))
    elapsed = _count(snap.get("elapsed_s"))
    took = f" (took {elapsed:.2f}s)" if elapsed is not None else ""
    description = snap.get("description")
    header = (
        f'<nav class="crumbs"><a href="{_e(_root(base))}/">← All pipelines</a></nav>'
        f"<header><h1>{_e(name)} {_badge(health.get('state') or 'unknown', state)}</h1>"
        + (f'<p class="desc">{_e(description)}</p>' if description else "")
        + (
            '<ul class="reasons">' + "".join(f"<li>{_e(r)}</li>" for r in reasons) + "</ul>"
            if reasons
            else ""
        )
        + f'<p class="meta">checked at {_ts(now)} UTC{took} · {" · ".join(meta_links)}</p></header>'
    )
    body = [
        header,
        _summary_cards(snap, now),
        f'<div class="boxes">{_kafka_box(snap)}{_table_box(snap)}</div>',
        "<h2>Partitions</h2>",
        _partition_table(snap, now),
        "<h2>Open data-loss gaps</h2>",
        _open_gaps_table(snap),
        "<h2>Lag and rows per run</h2>",
        '<div class="charts">'
        f"<figure>{lag_chart_svg(runs)}<figcaption>Lag before and after each run (records)</figcaption></figure>"
        f"<figure>{rows_chart_svg(runs)}<figcaption>Rows ingested per run</figcaption></figure>"
        "</div>",
        "<h2>Recent runs</h2>",
        _runs_table(snap, runs),
        "<h2>Recorded gaps</h2>",
        _recorded_gaps_table(snap, runs_by_id),
        "<h2>Manual actions</h2>",
        _manual_actions_table(snap, runs_by_id),
    ]
    return _page(f"{name} · Kafka → Delta", "\n".join(part for part in body if part))


def _summary_cards(snap: dict, now: object) -> str:
    lag = _d(snap.get("lag"))
    down = _kafka_down(snap)
    last = _d(snap.get("last_run"))
    last_when = last.get("finished_at") or last.get("started_at")
    cards = [
        ("Lag", DASH if down else f"{_num(lag.get('records'))} records"),
        ("Oldest pending", DASH if down else humanize_seconds(_pending_age(lag, now))),
        ("Partitions behind", DASH if down else _num(lag.get("partitions_behind"))),
        (
            "Last run",
            f"{_outcome_badge(last.get('outcome'))} {_e(_relative(last_when, now))}" if last else DASH,
        ),
        ("Continuity", _continuity_badge(last.get("continuity")) if last else DASH),
        ("Open gaps", _open_gaps_html(snap)),
        ("Next run", _next_run_html(snap, now)),
    ]
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{k}</div><div class="v">{v}</div></div>' for k, v in cards
    ) + "</div>"  # fmt: skip


def _kafka_box(snap: dict) -> str:
    kafka, source = _d(snap.get("kafka")), _d(snap.get("source"))
    topics = [t for t in _l(source.get("topics")) if t is not None]
    if topics:
        what = ", ".join(f"<code>{_e(t)}</code>" for t in topics)
    elif source.get("topic_pattern"):
        what = f"pattern <code>{_e(source.get('topic_pattern'))}</code>"
    else:
        what = DASH
    if kafka.get("ok") is False:
        status = _alert("kafka", kafka.get("error"))
    elif kafka.get("ok") is True:
        status = '<p class="st-ok">reachable</p>'
        # Reachable, yet a later call failed: the offsets are good, some extras are missing.
        if kafka.get("error"):
            status += f'<p class="warn">{_e(kafka.get("error"))}</p>'
    else:
        status = '<p class="st-unknown">not checked</p>'
    notes = [n for n in _l(kafka.get("notes")) if n]
    if notes:
        status += '<ul class="reasons">' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>"
    rows = (("Source", what), ("Connection id", f"<code>{_e(source.get('connection_id'))}</code>"),
            ("Bootstrap servers", f"<code>{_e(source.get('bootstrap_servers'))}</code>"))  # fmt: skip
    down = " down" if kafka.get("ok") is False else ""
    return f'<section class="box{down}" data-box="kafka"><h2>Kafka</h2>{status}{_kv(rows)}</section>'


def _table_box(snap: dict) -> str:
    table, paths, ledger = _d(snap.get("table")), _d(snap.get("tables")), _d(snap.get("ledger"))
    if table.get("ok") is False:
        status = _alert("table", table.get("error"))
    elif table.get("exists") is False:
        status = '<p class="muted">not created yet: the first run creates it</p>'
    elif table.get("ok") is True:
        status = '<p class="st-ok">readable</p>'
    else:
        status = ""
    # A readable table can still carry an error about an extra, e.g. the last-ingested times.
    if table.get("ok") is not False and table.get("error"):
        status += f'<p class="warn">{_e(table.get("error"))}</p>'
    if ledger.get("ok") is False:
        status += _alert("ledger", ledger.get("error"))
    rows = [("Bronze", f"<code>{_e(paths.get('bronze'))}</code>")]
    if paths.get("silver"):
        rows.append(("Silver", f"<code>{_e(paths.get('silver'))}</code>"))
    rows += [("Run ledger", f"<code>{_e(paths.get('ledger'))}</code>"),
             ("Version", _num(table.get("version"), grouped=False)), ("Epoch", _num(table.get("epoch"), grouped=False))]  # fmt: skip
    return f'<section class="box" data-box="table"><h2>Delta table</h2>{status}{_kv(rows)}</section>'


def _kv(rows: tuple | list) -> str:
    return '<dl class="kv">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _table(head: list[tuple[str, bool]], rows: list[str], *, cls: str) -> str:
    ths = "".join(f'<th class="num">{t}</th>' if numeric else f"<th>{t}</th>" for t, numeric in head)
    body = "\n".join(rows)
    return f'<div class="scroll"><table class="{cls}"><thead><tr>{ths}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>'


_PARTITION_HEAD = [
    ("Topic", False),
    ("Partition", True),
    ("Kafka earliest", True),
    ("Kafka latest", True),
    ("Table next offset", True),
    ("Lag", True),
    ("Last ingested (Kafka time)", False),
    ("Oldest pending", False),
    ("Consumer group offset", True),
]


def _partition_table(snap: dict, now: object) -> str:
    parts = [p for p in _l(snap.get("partitions")) if isinstance(p, dict)]
    if not parts:
        why = " while Kafka is unreachable" if _kafka_down(snap) else ""
        return f'<p class="empty">No partitions known{why}.</p>'
    parts.sort(key=lambda p: (str(p.get("topic")), _count(p.get("partition")) or 0))
    rows = []
    for p in parts:
        # Browser tests read offsets back from these cells, so no thousands separators here.
        def cell(field: str, p: dict = p) -> str:
            return f'<td class="num" data-field="{field}">{_num(p.get(field), grouped=False)}</td>'

        lost = _count(p.get("lost_now"))
        lost_attr = ""
        if lost:
            lost_attr = (
                f' class="lost" data-lost-now="{int(lost)}"'
                f' title="Kafka already deleted {_num(p.get("lost_now"))} records this table never read"'
            )
        pending = p.get("oldest_pending_at")
        rel = _relative(pending, now)
        rows.append(
            f'<tr data-topic="{_e(p.get("topic"))}" data-partition="{_e(p.get("partition"))}"{lost_attr}>'
            f'<td data-field="topic">{_e(p.get("topic"))}</td>'
            + cell("partition")
            + cell("earliest")
            + cell("latest")
            + cell("next_offset")
            + cell("lag")
            + f'<td data-field="last_ingested_at">{_ts(p.get("last_ingested_at"))}</td>'
            + f'<td data-field="oldest_pending_at">{_ts(pending)}'
            + (f' <span class="sub">{_e(rel)}</span>' if rel and pending else "")
            + "</td>"
            + cell("group_offset")
            + "</tr>"
        )
    return _table(_PARTITION_HEAD, rows, cls="partitions")


def _open_gaps_table(snap: dict) -> str:
    if _kafka_down(snap):
        return '<p class="empty">Unknown while Kafka is unreachable.</p>'
    gaps = [g for g in _l(snap.get("open_gaps")) if isinstance(g, dict)]
    if not gaps:
        return '<p class="empty">No open gaps: Kafka still holds every record the table has not read.</p>'
    rows = [
        f'<tr><td>{_e(g.get("topic"))}</td><td class="num">{_num(g.get("partition"), grouped=False)}</td>'
        f'<td class="num">{_num(g.get("from"), grouped=False)}</td>'
        f'<td class="num">{_num(g.get("until"), grouped=False)}</td>'
        f'<td class="num bad">{_num(g.get("records"))}</td></tr>'
        for g in gaps
    ]
    head = [("Topic", False), ("Partition", True), ("From offset", True), ("Until offset", True),
            ("Records deleted unread", True)]  # fmt: skip
    return _table(head, rows, cls="open-gaps")


def _range_text(r: dict) -> str:
    return (
        f"{_e(r.get('topic'))}[{_num(r.get('partition'), grouped=False)}] "
        f"{_num(r.get('from'), grouped=False)}–{_num(r.get('until'), grouped=False)} ({_num(r.get('rows'))})"
    )


def _ranges_html(ranges: list) -> str:
    items = [_range_text(r) for r in ranges if isinstance(r, dict)]
    if not items:
        return DASH
    shown = "<br>".join(items[:_RANGES_SHOWN])
    if len(items) <= _RANGES_SHOWN:
        return shown
    # <details> folds long range lists without any script.
    rest = "<br>".join(items[_RANGES_SHOWN:])
    return f"{shown}<details><summary>{len(items) - _RANGES_SHOWN} more</summary>{rest}</details>"


def _kind(run: dict) -> str:
    run_type, action = run.get("run_type"), run.get("action")
    if action and action != "normal":
        return f"{_e(run_type)} · {_e(action)}"
    return _e(run_type)


def _runs_table(snap: dict, runs: list[dict]) -> str:
    if not runs:
        if _ledger_down(snap):
            return '<p class="empty">Run history unavailable: the run ledger could not be read.</p>'
        return '<p class="empty">No runs recorded yet.</p>'
    rows = []
    for run in runs:
        requested = ""
        if run.get("requested_by") or run.get("request_reason"):
            requested = (
                f'<div class="sub">by {_e(run.get("requested_by"))}'
                + (f": {_e(run.get('request_reason'))}" if run.get("request_reason") else "")
                + "</div>"
            )
        notes = []
        if _count(run.get("quarantined")):
            notes.append(f'<div class="sub warn">{_num(run.get("quarantined"))} quarantined</div>')
        if _count(run.get("lost")):
            notes.append(f'<div class="sub bad">{_num(run.get("lost"))} lost</div>')
        reason = f'<div class="sub">{_e(run.get("reason"))}</div>' if run.get("reason") else ""
        rows.append(
            f'<tr data-run="{_e(run.get("run_id"))}">'
            f'<td>{_kind(run)}<div class="sub"><code>{_e(run.get("run_id"))}</code></div>{requested}</td>'
            f"<td>{_ts(run.get('started_at'))}</td>"
            f'<td class="num">{humanize_seconds(run.get("duration_s"))}</td>'
            f"<td>{_ranges_html(_l(run.get('ranges')))}</td>"
            f'<td class="num">{_num(run.get("rows"))}{"".join(notes)}</td>'
            f'<td class="num">{_num(run.get("lag_before"))} → {_num(run.get("lag_after"))}</td>'
            f"<td>{_continuity_badge(run.get('continuity'))}</td>"
            f"<td>{_outcome_badge(run.get('outcome'))}{reason}</td>"
            f"<td>{_airflow_link(run.get('link'), 'Airflow') if _safe_href(run.get('link')) else DASH}</td>"
            "</tr>"
        )
    head = [("Run", False), ("Started", False), ("Duration", True), ("Ranges", False), ("Rows", True),
            ("Lag before → after", True), ("Continuity", False), ("Outcome", False), ("Link", False)]  # fmt: skip
    return _table(head, rows, cls="runs")


def _recorded_gaps_table(snap: dict, runs_by_id: dict) -> str:
    gaps = [g for g in _l(snap.get("gaps")) if isinstance(g, dict)]
    if not gaps:
        return '<p class="empty">No gaps recorded.</p>'
    rows = [
        "<tr>"
        f'<td>{_ts(g.get("finished_at"))}<div class="sub"><code>{_run_link(g.get("run_id"), runs_by_id)}</code></div></td>'
        f"<td>{_e(g.get('topic'))}[{_num(g.get('partition'), grouped=False)}]</td>"
        f'<td class="num">{_num(g.get("from"), grouped=False)}–{_num(g.get("until"), grouped=False)}</td>'
        f'<td class="num bad">{_num(g.get("lost"))}</td>'
        f"<td>{_e(g.get('reason'))}</td></tr>"
        for g in gaps
    ]
    head = [
        ("Run", False),
        ("Partition", False),
        ("Offsets", True),
        ("Records lost", True),
        ("Reason", False),
    ]
    return _table(head, rows, cls="recorded-gaps")


def _manual_actions_table(snap: dict, runs_by_id: dict) -> str:
    actions = [a for a in _l(snap.get("manual_actions")) if isinstance(a, dict)]
    if not actions:
        return '<p class="empty">No manual actions recorded.</p>'
    rows = [
        "<tr>"
        f'<td>{_ts(a.get("finished_at"))}<div class="sub"><code>{_run_link(a.get("run_id"), runs_by_id)}</code></div></td>'
        f"<td>{_e(a.get('requested_by'))}</td>"
        f"<td>{_kind(a)}</td>"
        f"<td>{_e(a.get('reason'))}</td>"
        f"<td>{_outcome_badge(a.get('outcome'))}</td></tr>"
        for a in actions
    ]
    head = [("Run", False), ("Who", False), ("Action", False), ("Reason", False), ("Outcome", False)]
    return _table(head, rows, cls="manual-actions")


# --------------------------------------------------------------------------- error page


def render_error(title: str, message: str, *, base: str, status_hint: str = "") -> str:
    """A small page for problems such as an unknown pipeline, with a way back to the overview.

    Args:
        title: heading, e.g. ``"Unknown pipeline"``.
        message: what went wrong, e.g. which name was asked for.
        base: URL prefix of the plugin's app, e.g. ``"/kde-monitor"``.
        status_hint: optional short note such as ``"404"``, shown under the message.

    Returns:
        A complete HTML document.
    """
    hint = f'<p class="meta">{_e(status_hint)}</p>' if status_hint else ""
    body = (
        f'<nav class="crumbs"><a href="{_e(_root(base))}/">← All pipelines</a></nav>'
        f'<h1>{_e(title)}</h1><div class="alert">{_e(message)}</div>{hint}'
        f'<p class="meta"><a href="{_e(_api_url(base))}">JSON of all pipelines</a></p>'
    )
    return _page(f"{title} · Kafka → Delta", body)


# --------------------------------------------------------------------------- charts

_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 14, 28, 34


def _plottable(runs: list[dict]) -> list[tuple[datetime, dict]]:
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


def _f(value: float) -> str:
    return f"{value:.1f}"


def _svg_open(width: int, height: int, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-label="{_e(label)}" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif" font-size="11">'
    )


def _empty_chart(width: int, height: int, label: str) -> str:
    # A short strip rather than a tall empty frame; large text because the chart scales down.
    height = min(height, 80)
    return (
        _svg_open(width, height, f"{label}: no runs to plot yet")
        + f'<text x="{_f(width / 2)}" y="{_f(height / 2)}" dy="0.32em" text-anchor="middle" '
        'fill="currentColor" fill-opacity="0.6" font-size="18">No runs to plot yet.</text></svg>'
    )


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


def _axes(frame: _Frame, times: list[datetime], unit: str) -> str:
    parts = []
    for tick in frame.ticks:
        y = _f(frame.y(tick))
        parts.append(
            f'<line x1="{_LEFT}" x2="{_f(_LEFT + frame.plot_w)}" y1="{y}" y2="{y}" stroke="currentColor" '
            f'stroke-opacity="{0.35 if tick == 0 else 0.12}"/>'
            f'<text class="ytick" x="{_LEFT - 6}" y="{y}" dy="0.32em" text-anchor="end" fill="currentColor" '
            f'fill-opacity="0.75">{_compact(tick)}</text>'
        )
    parts.append(
        f'<text x="{_LEFT - 6}" y="{_TOP - 12}" text-anchor="end" fill="currentColor" fill-opacity="0.6">{_e(unit)}</text>'
    )
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
    for n, index in enumerate(indices):
        x = frame.x(index)
        anchor = "middle"
        if len(indices) > 1 and n == 0:
            anchor = "start"
        elif len(indices) > 1 and n == len(indices) - 1:
            anchor = "end"
        parts.append(
            f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{_f(frame.baseline)}" y2="{_f(frame.baseline + 4)}" '
            'stroke="currentColor" stroke-opacity="0.35"/>'
            f'<text class="xtick" x="{_f(x)}" y="{_f(frame.baseline + 16)}" text-anchor="{anchor}" '
            f'fill="currentColor" fill-opacity="0.75">{times[index]:{fmt}}</text>'
        )
    parts.append(
        f'<text x="{frame.width - _RIGHT}" y="{frame.height - 2}" text-anchor="end" fill="currentColor" '
        'fill-opacity="0.5" font-size="10">UTC</text>'
    )
    return "".join(parts)


def _legend(items: list[tuple[str, str, str]], width: int) -> str:
    """Legend entries (label, colour, shape) right-aligned above the plot."""
    parts, x = [], width - _RIGHT
    for label, colour, shape in reversed(items):
        x -= 7 * len(label) + 26
        if shape == "dash":
            swatch = f'<line x1="{x}" x2="{x + 16}" y1="10" y2="10" stroke="{colour}" stroke-width="2" stroke-dasharray="4 3"/>'
        elif shape == "line":
            swatch = f'<line x1="{x}" x2="{x + 16}" y1="10" y2="10" stroke="{colour}" stroke-width="2"/>'
        else:
            swatch = f'<rect x="{x + 3}" y="5" width="10" height="10" fill="{colour}"/>'
        parts.append(
            f'<g class="legend">{swatch}<text x="{x + 20}" y="10" dy="0.32em" fill="currentColor">{_e(label)}</text></g>'
        )
    return "".join(parts)


def _run_title(when: datetime, run: dict, lines: list[str]) -> str:
    head = [str(run.get("run_id") or "run"), f"{when:%Y-%m-%d %H:%M:%S} UTC"]
    if run.get("outcome"):
        head.append(f"outcome: {run.get('outcome')}")
    return f"<title>{_e(chr(10).join(head + lines))}</title>"


def lag_chart_svg(runs: list[dict], *, width: int = 720, height: int = 220) -> str:
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
    frame = _Frame(
        width, height, len(points), _nice_ticks(max((v for v in values if v is not None), default=0))
    )
    parts = [_svg_open(width, height, f"{label}, {len(points)} run{'' if len(points) == 1 else 's'}")]
    parts.append(_axes(frame, [when for when, _ in points], "records"))
    parts.append(_legend([(text, colour, shape) for _, text, colour, shape in series], width))
    for key, _, colour, shape in series:
        dash = ' stroke-dasharray="4 3"' if shape == "dash" else ""
        segment: list[str] = []
        for i, (_, run) in enumerate([*points, (None, {})]):
            value = _count(run.get(key))
            if value is not None:
                segment.append(f"{_f(frame.x(i))},{_f(frame.y(value))}")
                continue
            if len(segment) > 1:
                parts.append(
                    f'<polyline class="series" data-series="{key}" points="{" ".join(segment)}" fill="none" '
                    f'stroke="{colour}" stroke-width="2" stroke-linejoin="round"{dash}/>'
                )
            segment = []
    radius = 3.5 if frame.slot >= 8 else 2
    for i, (when, run) in enumerate(points):
        x = frame.x(i)
        values_text = [f"{text}: {_num(run.get(key))}" for key, text, *_ in series]
        markers = "".join(
            f'<circle class="pt" data-series="{key}" cx="{_f(x)}" cy="{_f(frame.y(value))}" r="{radius}" '
            f'fill="{colour}"/>'
            for key, _, colour, _ in series
            if (value := _count(run.get(key))) is not None
        )
        # The transparent column makes the tooltip easy to hit, even for runs without values.
        parts.append(
            f'<g class="run" data-run="{_e(run.get("run_id"))}">{_run_title(when, run, values_text)}'
            f'<rect x="{_f(x - frame.slot / 2)}" y="{_TOP}" width="{_f(frame.slot)}" height="{_f(frame.plot_h)}" '
            f'fill="transparent"/>{markers}</g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def rows_chart_svg(runs: list[dict], *, width: int = 720, height: int = 220) -> str:
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
    width, height = max(int(width), 240), max(int(height), 120)
    label = "Rows ingested per run"
    points = _plottable(runs)
    if not points:
        return _empty_chart(width, height, label)
    values = [_count(run.get("rows")) for _, run in points]
    frame = _Frame(
        width, height, len(points), _nice_ticks(max((v for v in values if v is not None), default=0))
    )
    parts = [_svg_open(width, height, f"{label}, {len(points)} run{'' if len(points) == 1 else 's'}")]
    parts.append(_axes(frame, [when for when, _ in points], "rows"))
    parts.append(_legend([(o, c, "box") for o, c in _BAR_COLOURS.items()], width))
    bar_w = min(max(frame.slot * 0.7, 1.0), 36.0)
    for i, ((when, run), value) in enumerate(zip(points, values, strict=True)):
        if value is None:
            continue
        top = frame.y(value)
        bar_h = max(frame.baseline - top, 1.0)
        outcome = run.get("outcome")
        colour = _BAR_COLOURS.get(outcome, _BEFORE_COLOUR) if isinstance(outcome, str) else _BEFORE_COLOUR
        lines = [f"rows: {_num(run.get('rows'))}"]
        if _count(run.get("quarantined")):
            lines.append(f"quarantined: {_num(run.get('quarantined'))}")
        parts.append(
            f'<rect class="bar" data-run="{_e(run.get("run_id"))}" x="{_f(frame.x(i) - bar_w / 2)}" '
            f'y="{_f(frame.baseline - bar_h)}" width="{_f(bar_w)}" height="{_f(bar_h)}" fill="{colour}">'
            f"{_run_title(when, run, lines)}</rect>"
        )
    parts.append("</svg>")
    return "".join(parts)
