"""The run ledger's reads and writes, on real Delta tables written with delta-rs under ``tmp_path``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from deltalake import DeltaTable, write_deltalake

from include.readers import run_ledger

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _run(i: int, **more) -> dict:
    return {"pipeline": "p", "run_id": f"r{i}", "outcome": "success", "rows": i,
            "finished_at": T0 + timedelta(minutes=i), **more}  # fmt: skip


def test_a_row_with_an_unknown_column_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match=r"run ledger: unknown columns \['rowz'\]"):
        run_ledger.append_run(tmp_path / "l", {**_run(1), "rowz": 3})
    assert run_ledger.ledger_version(tmp_path / "l") is None


def test_appended_runs_read_back_newest_first_with_json_decoded(tmp_path):
    path = tmp_path / "l"
    assert run_ledger.append_run(path, _run(1, gaps_json=[{"topic": "t", "from": 1, "until": 2}])) == 0
    assert run_ledger.append_run(path, _run(2)) == 1
    rows = run_ledger.read_runs(path)
    assert [r["run_id"] for r in rows] == ["r2", "r1"]
    assert rows[1]["gaps_json"] == [{"topic": "t", "from": 1, "until": 2}]
    assert run_ledger.ledger_version(path) == 1


def test_newest_runs_with_a_limit_reads_the_newest_rows_of_a_compacted_ledger(tmp_path):
    path = tmp_path / "l"
    # Three files of ten runs each, written out of order: the newest runs are in the middle file.
    for block in (0, 2, 1):
        write_deltalake(str(path), run_ledger.arrow_rows([_run(10 * block + i) for i in range(10)]), mode="append")
    rows = run_ledger.newest_runs(path, files=100, columns=["run_id", "rows"], limit=12)
    assert [r["run_id"] for r in rows] == [f"r{i}" for i in range(29, 17, -1)]
    assert set(rows[0]) == {"run_id", "rows", "finished_at"}


def test_newest_runs_without_a_limit_reads_the_newest_files_whole(tmp_path):
    path = tmp_path / "l"
    for i in range(5):
        run_ledger.append_run(path, _run(i))
    assert [r["run_id"] for r in run_ledger.newest_runs(path, files=2)] == ["r4", "r3"]
    assert len(DeltaTable(str(path)).file_uris()) == 5
