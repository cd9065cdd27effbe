"""The per-pipeline run lock, with a fake Airflow (a ``run_state`` callable) and a tmp folder as its storage."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest

from include.orchestration import run_lock
from include.orchestration.run_lock import acquire, holder, release
from tests.lock_race import Rounds, assert_one_winner_per_round

DAG = "orders_dag"


class FakeAirflow:
    """``run_state`` of a few known runs; records every question asked."""

    def __init__(self, **states: str | None) -> None:
        self.states = states
        self.asked: list[tuple[str, str]] = []

    def __call__(self, dag_id: str, run_id: str) -> str | None:
        self.asked.append((dag_id, run_id))
        return self.states.get(run_id)


@pytest.fixture
def lock(tmp_path) -> Path:
    return tmp_path / "orders" / "_lock"


def _write_epoch(lock: Path, epoch: int, content: str | bytes) -> Path:
    """A holder's record as another writer (or a hand) left it."""
    lock.mkdir(parents=True, exist_ok=True)
    path = lock / f"{epoch:020d}.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def test_each_taking_is_a_new_epoch_file_and_a_release_a_marker_beside_it(lock):
    acquire(lock, dag_id=DAG, run_id="r1", run_state=FakeAirflow())
    assert sorted(p.name for p in lock.iterdir()) == ["00000000000000000001.json"]
    assert holder(lock)["epoch"] == 1
    release(lock, run_id="r1")
    acquire(lock, dag_id=DAG, run_id="r2", run_state=FakeAirflow())
    assert sorted(p.name for p in lock.iterdir()) == [
        "00000000000000000001.json", "00000000000000000001.released", "00000000000000000002.json"]
    assert holder(lock)["epoch"] == 2 and holder(lock)["run_id"] == "r2"


def test_epochs_sort_as_numbers_past_ten(lock):
    for n in range(1, 12):
        acquire(lock, dag_id=DAG, run_id=f"r{n}", run_state=FakeAirflow())
        release(lock, run_id=f"r{n}")
    acquire(lock, dag_id=DAG, run_id="r12", run_state=FakeAirflow(r11="running"))
    assert holder(lock)["epoch"] == 12


def test_old_epochs_are_pruned_by_the_run_that_takes_the_lock(lock):
    for n in range(1, run_lock.KEEP_EPOCHS + 6):
        acquire(lock, dag_id=DAG, run_id=f"r{n}", run_state=FakeAirflow())
        release(lock, run_id=f"r{n}")
    epochs = sorted({int(p.name.split(".")[0]) for p in lock.iterdir()})
    newest = run_lock.KEEP_EPOCHS + 5
    assert epochs == list(range(newest - run_lock.KEEP_EPOCHS + 1, newest + 1))


def test_the_record_names_the_worker_that_holds_it(lock):
    import socket

    acquire(lock, dag_id=DAG, run_id="r1", run_state=FakeAirflow())
    assert holder(lock)["host"] == socket.gethostname()


def test_free_lock_is_taken_and_names_the_run(lock):
    airflow = FakeAirflow()
    mine = acquire(lock, dag_id=DAG, run_id="r1", run_state=airflow)
    held = holder(lock)
    assert mine == held and held["epoch"] == 1
    assert (held["dag_id"], held["run_id"], held["pid"]) == (DAG, "r1", os.getpid())
    assert datetime.fromisoformat(held["since"]).utcoffset().total_seconds() == 0
    assert "took_over_from" not in held
    assert airflow.asked == []


def test_holder_of_a_missing_lock_is_none(lock):
    assert holder(lock) is None


@pytest.mark.parametrize("state", ["running", "queued"])
def test_second_run_waits_while_the_holder_is_active(lock, state):
    acquire(lock, dag_id=DAG, run_id="r1", run_state=FakeAirflow())
    airflow = FakeAirflow(r1=state)
    live = acquire(lock, dag_id=DAG, run_id="r2", run_state=airflow)
    assert live is not None and live["run_id"] == "r1"
    assert airflow.asked == [(DAG, "r1")]
    assert holder(lock)["run_id"] == "r1"


@pytest.mark.parametrize("state", ["success", "failed", None])
def test_second_run_takes_over_from_a_finished_or_unknown_holder(lock, state):
    acquire(lock, dag_id=DAG, run_id="r1", run_state=FakeAirflow())
    before = holder(lock)
    assert acquire(lock, dag_id=DAG, run_id="r2", run_state=FakeAirflow(r1=state))["epoch"] == 2
    now = holder(lock)
    assert now["run_id"] == "r2"
    assert now["took_over_from"] == before


def test_holders_state_is_asked_under_the_holders_own_dag(lock):
    acquire(lock, dag_id="orders_backfill_dag", run_id="r1", run_state=FakeAirflow())
    airflow = FakeAirflow(r1="running")
    assert acquire(lock, dag_id=DAG, run_id="r2", run_state=airflow)["dag_id"] == "orders_backfill_dag"
    assert airflow.asked == [("orders_backfill_dag", "r1")]


def test_holder_without_dag_id_is_asked_under_the_callers_dag(lock):
    _write_epoch(lock, 1, json.dumps({"run_id": "r1"}))
    airflow = FakeAirflow(r1="queued")
    assert acquire(lock, dag_id=DAG, run_id="r2", run_state=airflow) == {"run_id": "r1", "epoch": 1}
    assert airflow.asked == [(DAG, "r1")]


def test_same_run_takes_its_lock_again(lock):
    acquire(lock, dag_id=DAG, run_id="r1", run_state=FakeAirflow())
    airflow = FakeAirflow(r1="running")
    assert acquire(lock, dag_id=DAG, run_id="r1", run_state=airflow)["epoch"] == 1
    assert airflow.asked == []
    held = holder(lock)
    assert held["run_id"] == "r1"
    assert "took_over_from" not in held


def test_take_over_records_only_the_last_holder(lock):
    acquire(lock, dag_id=DAG, run_id="r1", run_state=FakeAirflow())
    acquire(lock, dag_id=DAG, run_id="r2", run_state=FakeAirflow(r1="failed"))
    acquire(lock, dag_id=DAG, run_id="r3", run_state=FakeAirflow(r2="success"))
    previous = holder(lock)["took_over_from"]
    assert previous["run_id"] == "r2"
    assert "took_over_from" not in previous


def test_release_by_the_holder_frees_the_lock(lock):
    acquire(lock, dag_id=DAG, run_id="r1", run_state=FakeAirflow())
    assert release(lock, run_id="r1") is True
    assert holder(lock) is None and (lock / "00000000000000000001.released").is_file()
    assert release(lock, run_id="r1") is False
    airflow = FakeAirflow(r1="running")
    assert acquire(lock, dag_id=DAG, run_id="r2", run_state=airflow)["run_id"] == "r2"
    assert "took_over_from" not in holder(lock)
    assert airflow.asked == []


def test_release_by_another_run_leaves_the_lock(lock):
    acquire(lock, dag_id=DAG, run_id="r1", run_state=FakeAirflow())
    assert release(lock, run_id="r2") is False
    assert holder(lock)["run_id"] == "r1"


def test_release_of_a_missing_lock_is_false(lock):
    assert release(lock, run_id="r1") is False


@pytest.mark.parametrize("content", [b"{not json", b"", b"\xff\xfe\x00garbage"], ids=["broken", "empty", "binary"])
def test_unreadable_lock_is_taken_over(lock, content, monkeypatch):
    monkeypatch.setattr(run_lock, "_WRITE_WAIT_S", 0.2)  # an empty record is waited for, briefly here
    _write_epoch(lock, 1, content)
    assert holder(lock)["run_id"] is None
    assert "unreadable" in holder(lock)
    airflow = FakeAirflow()
    assert acquire(lock, dag_id=DAG, run_id="r2", run_state=airflow)["run_id"] == "r2"
    assert holder(lock)["run_id"] == "r2" and holder(lock)["epoch"] == 2
    assert airflow.asked == []  # nobody to ask about


def test_unreadable_lock_shows_its_text(lock):
    path = _write_epoch(lock, 1, "{half a lock")
    assert holder(lock) == {"run_id": None, "unreadable": "{half a lock", "epoch": 1}
    assert release(lock, run_id="r1") is False
    assert path.exists()


def test_lock_holding_a_json_array_is_taken_over(lock):
    _write_epoch(lock, 1, "[1, 2]")
    assert acquire(lock, dag_id=DAG, run_id="r2", run_state=FakeAirflow())["run_id"] == "r2"
    assert holder(lock)["run_id"] == "r2"


# --------------------------------------------------------------------------- two processes


def test_two_processes_racing_never_both_win(tmp_path):
    rounds = 10
    assert_one_winner_per_round(Rounds(str(tmp_path)), rounds=rounds, attempts=40)
