"""What both monitoring pages share: the small formatters, the Jinja2 environment and its filters.

:mod:`include.monitoring.monitor_page` builds the pages' views and :mod:`include.monitoring.monitor_charts`
the charts' geometry from these; the templates in ``include/monitoring/templates/`` turn views into markup.
Escaping is Jinja's autoescape, on for every template (the SVG ones too); unknown values (``None``) print
as an em dash. Times are shown in UTC.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, StrictUndefined

DASH = "—"
#: The templates, found from this file so that the working directory of the API server (or of a
#: test) does not matter.
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"

_STATES = ("ok", "warning", "failing", "unknown")
_OUTCOME_STATE = {"success": "ok", "failed": "failing", "skipped": "unknown", "dry_run": "unknown"}
_CONTINUITY_STATE = {"CONTINUOUS": "ok", "BROKEN": "failing", "not checked": "unknown"}


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
