"""When maintenance is due, from the run ledger's rows (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from include.contract.maintenance import Window, due, maintained

NOW = datetime(2026, 3, 10, 3, 0, tzinfo=UTC)


def _row(i: int, *, tables: dict | None = None, minutes_ago: int | None = None) -> dict:
    return {"run_id": f"r{i}", "finished_at": NOW - timedelta(minutes=minutes_ago if minutes_ago is not None else i),
            "maintenance_json": {"tables": tables} if tables is not None else None}  # fmt: skip


DONE = {"bronze": {"files_before": 9, "files_after": 1}}


def test_every_runs_counts_this_run_and_the_runs_since_the_last_maintenance():
    rows = [_row(i) for i in range(1, 4)] + [_row(4, tables=DONE)] + [_row(i) for i in range(5, 9)]
    assert due("tables", rows, every_runs=5, window=None, now=NOW) is None  # 3 since + this = 4
    assert due("tables", [_row(0), *rows], every_runs=5, window=None, now=NOW) == (
        "every_runs 5: this is run 5 since run 'r4'"
    )
    assert due("tables", [_row(i) for i in range(3)], every_runs=5, window=None, now=NOW) is None
    assert due("tables", [_row(i) for i in range(3)], every_runs=4, window=None, now=NOW) == (
        "every_runs 4: this is run 4 and it was never done"
    )
    assert due("tables", [], every_runs=1, window=None, now=NOW) is not None
    assert due("tables", [_row(0, tables=DONE)], every_runs=1, window=None, now=NOW) is not None


def test_each_part_counts_its_own_maintenance_and_a_failed_one_does_not_count():
    ledger_only = {"ledger": {"files_before": 3, "files_after": 1}}
    rows = [_row(0, tables=ledger_only), _row(1, tables={"bronze": {"path": "/b", "error": "disk full"}})]
    assert due("tables", rows, every_runs=3, window=None, now=NOW) == "every_runs 3: this is run 3 and it was never done"
    assert due("ledger", rows, every_runs=3, window=None, now=NOW) is None
    assert maintained({"maintenance_json": {"tables": {"silver": {}}}}, "tables")
    assert not maintained({"maintenance_json": None}, "tables")
    with pytest.raises(ValueError, match="unknown maintenance part 'gold'"):
        due("gold", rows, every_runs=3, window=None, now=NOW)


@pytest.mark.parametrize(("window", "now", "opened"), [
    ("02:00-05:00", datetime(2026, 3, 10, 3, 0, tzinfo=UTC), datetime(2026, 3, 10, 2, 0, tzinfo=UTC)),
    ("02:00-05:00", datetime(2026, 3, 10, 5, 0, tzinfo=UTC), None),  # the end is outside
    ("02:00-05:00", datetime(2026, 3, 10, 1, 59, tzinfo=UTC), None),
    ("22:00-02:00", datetime(2026, 3, 10, 1, 0, tzinfo=UTC), datetime(2026, 3, 9, 22, 0, tzinfo=UTC)),
    ("22:00-02:00", datetime(2026, 3, 10, 23, 0, tzinfo=UTC), datetime(2026, 3, 10, 22, 0, tzinfo=UTC)),
    ("22:00-02:00", datetime(2026, 3, 10, 12, 0, tzinfo=UTC), None),
])  # fmt: skip
def test_a_daily_window_may_pass_midnight(window, now, opened):
    assert Window.parse(window).opened(now) == opened


@pytest.mark.parametrize("text", ["2:00-05:00", "02:00-24:00", "02:00-02:00", "02:00", "noon"])
def test_a_window_is_two_different_24_hour_times(text):
    with pytest.raises(ValueError, match="expected"):
        Window.parse(text)


def test_in_the_window_maintenance_is_due_once_until_the_window_opens_again():
    window = Window.parse("02:00-05:00")
    old = [_row(1, tables=DONE, minutes_ago=60 * 20)]  # yesterday
    assert due("tables", old, every_runs=None, window=window, now=NOW) == (
        "daily_window 02:00-05:00 (UTC) opened at 2026-03-10 02:00 and this part was not done since"
    )
    today = [_row(1), _row(2, tables=DONE, minutes_ago=30)]
    assert due("tables", today, every_runs=None, window=window, now=NOW) is None
    assert due("tables", old, every_runs=None, window=window, now=NOW.replace(hour=12)) is None
