"""The ``schedule`` key: Airflow's presets, or a 5-field cron expression cron and croniter both accept."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from croniter import CroniterBadTypeRangeError, CroniterError, croniter

from include.config.errors import _invalid

#: Airflow's cron presets (``airflow.utils.dates.cron_presets``). ``@once`` and
#: ``@continuous`` are left out: a pipeline runs on a cron or by hand (null).
SCHEDULE_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
_SCHEDULE_EXPECTED = (
    "a 5-field cron expression (minute hour day-of-month month day-of-week), "
    f"one of {', '.join(SCHEDULE_PRESETS)}, or null for manual runs only"
)
#: Cron's five fields: name, lowest and highest value, and names standing for low, low + 1, ...
_CRON_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    ("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
    # 0 and 7 are both Sunday, as in cron.
    ("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)


def _check_schedule(value: Any) -> str:
    """A preset, or a 5-field cron expression both croniter (what Airflow runs it with) and cron accept."""
    if not isinstance(value, str) or not value.strip():
        raise _invalid(_SCHEDULE_EXPECTED, value)
    text = value.strip()
    if text.startswith("@"):
        if text not in SCHEDULE_PRESETS:
            raise _invalid(_SCHEDULE_EXPECTED, value)
        return text
    parts = text.split()
    if len(parts) != 5:  # croniter also takes seconds and years, which Airflow's cron does not
        raise _invalid(_SCHEDULE_EXPECTED, value, f": it has {len(parts)} fields")
    for i, part in enumerate(parts):
        problem = _cron_field_problem(i, part)
        if problem:
            raise _invalid(_SCHEDULE_EXPECTED, value, f": {_CRON_FIELDS[i][0]} {part!r}: {problem}")
    expression = " ".join(parts)
    problem = _croniter_problem(expression, expression)
    if problem:
        raise _invalid(_SCHEDULE_EXPECTED, value, f": {problem}")
    return expression


def _cron_field_problem(index: int, part: str) -> str | None:
    """Why field ``index`` of a cron expression is invalid, or ``None``.

    The syntax is an allowlist, as croniter takes more than cron means: it
    runs ``*/70`` in the minute field hourly, wraps ``5-1`` around and takes
    ``0-0`` as a day of the month, ``L1`` as a day of the week and ``W1``.
    Allowed: ``*``, values and names, ``a-b`` ranges forwards, ``/step`` up to
    the field's highest value, lists; ``?``, ``L`` and ``nW`` in
    day-of-month, ``?`` and ``d#n`` in day-of-week. croniter (what Airflow
    runs the schedule with) then has the last word on the field.
    """
    name, low, high, names = _CRON_FIELDS[index]
    for item in part.split(","):
        problem = _cron_item_problem(item, name, low, high, names)
        if problem:
            return problem
    # The field alone, so that croniter's verdict is about this field.
    problem = _croniter_problem(" ".join(part if i == index else "*" for i in range(5)), part)
    return problem and f"{problem}; the field takes {_cron_values(low, high, names)}"


def _cron_item_problem(item: str, name: str, low: int, high: int, names: tuple[str, ...]) -> str | None:
    """Why one comma-separated item of a cron field is outside the allowed syntax, or ``None``."""
    if item == "?" and name in ("day-of-month", "day-of-week"):  # "no specific value"
        return None
    if name == "day-of-month" and (item.upper() == "L" or re.fullmatch(r"\d+[Ww]", item)):
        # L: the month's last day; nW: the weekday nearest day n.
        if item.upper() == "L" or 1 <= int(item[:-1]) <= 31:
            return None
        return f"{item!r} needs a day from 1 to 31"
    if name == "day-of-week" and "#" in item:  # d#n: the n-th such day of the month
        day, _, nth = item.partition("#")
        if _cron_value(day, low, names) not in range(low, high + 1) or nth not in ("1", "2", "3", "4", "5"):
            return f"{item!r} must be a day of the week, '#' and 1-5"
        return None
    base, slash, step = item.partition("/")
    if slash and not (step.isdigit() and 1 <= int(step) <= high):
        return f"step {step!r} must be an integer from 1 to {high}"
    if base == "*":
        return None
    first, dash, last = base.partition("-")
    values: list[int] = []
    for text in (first, last) if dash else (first,):
        value = _cron_value(text, low, names)
        if value is None or value not in range(low, high + 1):
            return f"{text!r} is not one of the {_cron_values(low, high, names)}"
        values.append(value)
    if dash and values[1] < values[0]:
        return f"range {base!r} runs backwards"
    return None


def _cron_value(text: str, low: int, names: tuple[str, ...]) -> int | None:
    if text.isdigit():
        return int(text)
    if text.lower() in names:
        return low + names.index(text.lower())
    return None


def _cron_values(low: int, high: int, names: tuple[str, ...]) -> str:
    return f"values {low}-{high}" + (f" or names like {names[1]!r}" if names else "")


def _croniter_problem(expression: str, shown: str) -> str | None:
    """What croniter says against ``expression``, naming ``shown`` where it names the expression."""
    try:
        croniter(expression)
    except (CroniterError, CroniterBadTypeRangeError) as exc:
        return "croniter refuses it: " + re.sub(r"^\[.*?\]", lambda _: repr(shown), str(exc))
    return None


#: Airflow's presets croniter does not take, as the cron expressions Airflow runs them with.
_PRESET_CRON = {"@quarterly": "0 0 1 */3 *"}
#: The ticks after a moment whose gaps :func:`schedule_interval_s` compares.
_TICKS = 8


def schedule_interval_s(schedule: str, after: datetime) -> float:
    """The longest gap, in seconds, between the next few runs of a checked ``schedule`` after ``after``
    (UTC, as Airflow runs a DAG without a time zone): for a weekday schedule, the weekend's."""
    ticks = croniter(_PRESET_CRON.get(schedule, schedule), after)
    times: list[datetime] = [ticks.get_next(datetime) for _ in range(_TICKS + 1)]
    return max((b - a).total_seconds() for a, b in zip(times, times[1:], strict=False))
