"""The monitoring page's charts, as inline SVG: each run's lag before and after it, the rows it ingested, and the
least time left before Kafka's retention could delete records the table had not read.

Pure functions from a snapshot's runs to chart views (frame, axes, legend, marks laid out in viewBox
coordinates); ``templates/lag_chart.svg`` and ``rows_chart.svg`` turn them into markup, with no script.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from include.monitoring.monitor_format import _count, _f, _l, _num, _parse_ts, _render, humanize_seconds

# Mid-tone colours read on both the light and the dark page background; SVG presentation
# attributes cannot use the page's CSS variables.
_BEFORE_COLOUR = "#8c959f"
_AFTER_COLOUR = "#2f81f7"
_BAR_COLOURS = {"success": "#2f81f7", "failed": "#e5534b", "skipped": "#8c959f"}

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


#: The lag chart's lines: ledger column, legend text, colour, shape.
_LAG_SERIES = [
    ("lag_before", "lag before", _BEFORE_COLOUR, "dash"),
    ("lag_after", "lag after", _AFTER_COLOUR, "line"),
]
#: The retention chart's line.
_RETENTION_SERIES = [("retention_left_s", "time left before the run", _AFTER_COLOUR, "line")]


def _lag_chart(runs: list[dict[str, Any]], *, width: int = 720, height: int = 220) -> dict[str, Any]:
    return _line_chart(runs, _LAG_SERIES, label="Consumer lag before and after each run", unit="records",
                       width=width, height=height)  # fmt: skip


def _retention_chart(runs: list[dict[str, Any]], *, width: int = 720, height: int = 220) -> dict[str, Any]:
    return _line_chart(runs, _RETENTION_SERIES, width=width, height=height, unit="hours", scale=3600,
                       text=humanize_seconds,
                       label="Least time left before Kafka's retention may delete unread records")  # fmt: skip


def _line_chart(runs: list[dict[str, Any]], series: list[tuple[str, str, str, str]], *, label: str, unit: str,
                width: int, height: int, scale: float = 1.0,
                text: Callable[[Any], str] = _num) -> dict[str, Any]:  # fmt: skip
    """A line per ``series`` (ledger column, legend text, colour, ``line`` or ``dash``) over the runs, each
    value divided by ``scale`` for the y axis and shown in its tooltip as ``text`` writes it."""
    width, height = max(int(width), 240), max(int(height), 120)
    points = _plottable(runs)
    if not points:
        return _empty_chart(width, height, label)

    def value_of(run: dict[str, Any], key: str) -> float | None:
        value = _count(run.get(key))
        return None if value is None else value / scale

    values = [value_of(run, key) for _, run in points for key, *_ in series]
    chart, frame = _chart(points, values, width=width, height=height, label=label, unit=unit,
                          legend=[(name, colour, shape) for _, name, colour, shape in series])  # fmt: skip
    lines = []
    for key, _, colour, shape in series:
        segment: list[str] = []
        # A missing value ends the line there instead of being drawn as zero.
        for i, (_, run) in enumerate([*points, (None, {})]):
            value = value_of(run, key)
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
            "title": _run_title(when, run, [f"{name}: {text(run.get(key))}" for key, name, *_ in series]),
            "x": frame.x(i),
            "column_x": frame.x(i) - frame.slot / 2,
            "dots": [{"series": key, "y": frame.y(value), "colour": colour}
                     for key, _, colour, _ in series if (value := value_of(run, key)) is not None],  # fmt: skip
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
