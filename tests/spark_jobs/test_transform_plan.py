"""Which checkpoint the transform resumes: silver is the source of truth, a damaged checkpoint heals."""

from __future__ import annotations

import pytest

from include.contract.errors import TransformError
from include.contract.silver_stand import BronzePosition, SilverCommit, SilverStand
from spark_jobs.bronze_to_silver import parse_config
from spark_jobs.silver_writer import check_rows_written, rows_written
from spark_jobs.transform_plan import DeltaCheckpointState, already_in_silver, plan_routed, plan_transform


def _last(epoch: int, batch: int, end: int) -> SilverStand:
    commit = SilverCommit("orders", "run", epoch, batch, BronzePosition(end - 1), BronzePosition(end), 1, {}, {})
    return SilverStand(epoch, batch, commit.bronze_end, "both", commit)


def test_the_newest_checkpoint_that_committed_silvers_last_batch_is_resumed():
    plan = plan_transform(_last(2, 4, 17), {1: DeltaCheckpointState(9, None), 2: DeltaCheckpointState(4, None)})
    assert (plan.epoch, plan.start.version, plan.rebuilt_reason) == (2, 17, None)


def test_a_damaged_newest_checkpoint_starts_a_new_epoch_where_silver_stands_naming_the_file():
    plan = plan_transform(_last(2, 4, 17), {2: None}, {2: "/c/epoch=2/commits/4: line 2 is not JSON"})
    assert (plan.epoch, plan.start.version, plan.previous_epoch) == (3, 17, 2)
    assert plan.rebuilt_reason == "checkpoint of epoch 2 is damaged: /c/epoch=2/commits/4: line 2 is not JSON"


def test_an_empty_checkpoint_is_not_called_damaged():
    plan = plan_transform(_last(2, 4, 17), {2: None}, {})
    assert plan.rebuilt_reason == "checkpoint of epoch 2 was never started or is empty"


@pytest.mark.parametrize(("state", "last", "expected"), [
    (DeltaCheckpointState(3, 4), _last(2, 4, 17), True),  # silver holds batch 4, the checkpoint never committed it
    (DeltaCheckpointState(4, None), _last(2, 4, 17), False),  # both committed it
    (DeltaCheckpointState(3, 4), _last(1, 4, 17), False),  # silver's batch is another epoch's
    (None, _last(2, 4, 17), False),
    (DeltaCheckpointState(3, 4), None, False),
])  # fmt: skip
def test_a_batch_in_silver_and_pending_in_the_resumed_checkpoint_is_recognised(state, last, expected):
    """With nothing new in bronze the stream does not start; this is how the run still reports the batch an
    earlier attempt of it committed to silver before it was killed."""
    plan = plan_transform(last, {2: state} if state else {})
    assert already_in_silver(last, plan, state.pending_batch if state else None) is expected


def test_rows_written_are_read_from_delta_merge_and_append_metrics():
    merge = {"numTargetRowsInserted": "3", "numTargetRowsUpdated": "4", "numTargetRowsDeleted": "0",
             "numTargetRowsCopied": "90"}  # fmt: skip
    assert rows_written("MERGE", merge) == 7
    assert rows_written("WRITE", {"numOutputRows": "5", "numFiles": "1"}) == 5
    assert rows_written("MERGE", {"numTargetRowsInserted": "3"}) is None  # metrics turned off
    assert rows_written("OPTIMIZE", {"numOutputRows": "5"}) is None


def _commit(upserted: int, deleted: int) -> SilverCommit:
    counts = {"upserted": upserted, "deleted": deleted, "quarantined": 0, "superseded": 1, "replayed": 0}
    return SilverCommit("orders", "run", 2, 5, BronzePosition(3), BronzePosition(4), upserted + deleted + 1, counts, {})


def test_a_commit_whose_metrics_disagree_with_the_batch_counts_fails_naming_the_version_and_the_fix():
    agree = {"numTargetRowsInserted": "1", "numTargetRowsUpdated": "2", "numTargetRowsDeleted": "0"}
    check_rows_written("/lake/silver", 9, "MERGE", agree, _commit(2, 1))
    short = {"numTargetRowsInserted": "0", "numTargetRowsUpdated": "2", "numTargetRowsDeleted": "0"}
    with pytest.raises(TransformError) as err:
        check_rows_written("/lake/silver", 9, "MERGE", short, _commit(2, 1))
    message = str(err.value)
    assert "batch 5 of epoch 2 committed version 9" in message and "say 2 rows" in message
    assert "classified 3" in message and "TO VERSION AS OF 8" in message


# --------------------------------------------------------------------------- arguments


def _transform_args(**overrides: str) -> list[str]:
    given = {"pipeline": "orders", "bronze-path": "/lake/b", "silver-path": "/lake/s", "quarantine-path": "/lake/q",
             "checkpoint-root": "/lake/c", "spec-file": "/nowhere/spec.json", "run-id": "r1", **overrides}  # fmt: skip
    return [f"--{k}={v}" for k, v in given.items()]


@pytest.mark.parametrize(("argv", "expected"), [
    (["--pipeline=orders"], "the following arguments are required: --bronze-path, --silver-path"),
    ([*_transform_args(), "--bogus=1"], "unrecognized arguments: --bogus=1"),
    (_transform_args(**{"max-files-per-trigger": "0"}), "argument --max-files-per-trigger: expected a positive integer, got 0"),
])  # fmt: skip
def test_a_bad_argument_is_refused_naming_it_and_what_was_expected(argv, expected):
    # argparse would exit 2 on its own; the job must get the message (it was "bad arguments: 2").
    with pytest.raises(TransformError) as err:
        parse_config(argv)
    assert expected in str(err.value) and "--help lists the arguments of bronze_to_silver" in str(err.value)


def test_routes_that_agree_with_the_checkpoint_resume_it_each_from_where_it_stands():
    # Route b's silver lacks batch 5, which route a committed before the driver died: the checkpoint's pending
    # batch 5 is replayed, a skips it (already in its silver), b applies it.
    plans = plan_routed({"a": _last(2, 5, 20), "b": _last(2, 4, 17)}, {2: DeltaCheckpointState(4, 5)})
    assert {n: (p.epoch, p.start.version, p.rebuilt_reason) for n, p in plans.items()} == {
        "a": (2, 20, None), "b": (2, 17, None)}  # fmt: skip
    assert already_in_silver(_last(2, 5, 20), plans["a"], 5) and not already_in_silver(_last(2, 4, 17), plans["b"], 5)


def test_a_route_added_later_moves_every_route_to_a_new_epoch_from_bronzes_start():
    plans = plan_routed({"a": _last(2, 5, 20), "new": None}, {2: DeltaCheckpointState(5, None)})
    assert {(p.epoch, p.start) for p in plans.values()} == {(3, BronzePosition(0))}
    reason = plans["a"].rebuilt_reason or ""
    assert reason.startswith("route new: checkpoint of epoch 2 committed batches that silver does not hold")
    assert "every route re-reads bronze from version 0" in reason and plans["a"].previous_epoch == 2


def test_a_lost_checkpoint_restarts_every_route_at_the_least_of_their_stands():
    plans = plan_routed({"a": _last(2, 5, 20), "b": _last(2, 4, 17)}, {})
    assert {(p.epoch, p.start.version) for p in plans.values()} == {(3, 17)}
    assert "route a: no checkpoint found; route b: no checkpoint found" in (plans["b"].rebuilt_reason or "")


def test_routes_of_a_first_run_start_at_epoch_0():
    plans = plan_routed({"a": None, "b": None}, {})
    assert {(p.epoch, p.start.version, p.rebuilt_reason) for p in plans.values()} == {(0, 0, None)}
