"""The log-only reader on hand-written Delta logs: the replay rule, and every layout it leaves to delta-rs.

What it reads from tables Spark wrote is compared with delta-rs in
``tests/integration/test_delta_log.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from include.readers import delta_log


def _commit(table: Path, version: int, *actions: dict, operation: str = "WRITE") -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    lines = [{"commitInfo": {"operation": operation, "timestamp": 1000 + version}}, *actions]
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in lines) + "\n")


def _txn(app: str, version: int) -> dict:
    return {"txn": {"appId": app, "version": version, "lastUpdated": 1}}


def _table(tmp_path: Path, commits: int = 3) -> Path:
    table = tmp_path / "t"
    _commit(table, 0, {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, _txn("a", 1))
    for v in range(1, commits):
        _commit(table, v, _txn("a", v + 1), _txn(f"only-{v}", v))
    return table


def test_the_newest_txn_of_each_app_wins_and_history_is_newest_first(tmp_path):
    view = delta_log.read(_table(tmp_path))
    assert view is not None and view.version() == 2
    assert (view.transaction_version("a"), view.transaction_version("only-1"), view.transaction_version("b")) == (3, 1, None)
    assert [(e["version"], e["timestamp"]) for e in view.history(2)] == [(2, 1002), (1, 1001)]
    assert [e["version"] for e in view.history()] == [2, 1, 0]


def test_a_gap_in_the_log_without_a_checkpoint_is_left_to_delta_rs(tmp_path):
    table = _table(tmp_path)
    (table / "_delta_log" / f"{1:020d}.json").unlink()
    assert delta_log.read(table) is None


def test_an_incomplete_multi_part_checkpoint_is_not_read(tmp_path):
    table = _table(tmp_path)
    # Part 1 of 2 only (its writer died): not a checkpoint, so the commits are replayed from 0.
    (table / "_delta_log" / f"{1:020d}.checkpoint.{1:010d}.{2:010d}.parquet").write_bytes(b"not read")
    view = delta_log.read(table)
    assert view is not None and view.transaction_version("a") == 3


def test_layouts_it_does_not_take_are_left_to_delta_rs(tmp_path):
    v2 = _table(tmp_path / "v2")
    (v2 / "_delta_log" / f"{2:020d}.checkpoint.0f5e3b8e-8c1e-4c7a-9b1e-2d3f4a5b6c7d.json").write_text("{}")
    assert delta_log.read(v2) is None
    managed = _table(tmp_path / "managed")
    _commit(managed, 3, {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                      "readerFeatures": ["catalogManaged"], "writerFeatures": ["catalogManaged"]}})
    assert delta_log.read(managed) is None
    unreadable = _table(tmp_path / "unreadable")
    (unreadable / "_delta_log" / f"{2:020d}.checkpoint.parquet").write_bytes(b"not parquet")
    assert delta_log.read(unreadable) is None
    assert delta_log.read("s3://bucket/table") is None
    assert delta_log.read(tmp_path / "no-table") is None
    assert delta_log.read(f"file://{_table(tmp_path / 'uri')}") is not None
