"""Which checkpoint the transform resumes: silver is the source of truth, a damaged checkpoint heals."""

from __future__ import annotations

from include.transform_spec import BronzePosition, SilverCommit, SilverStand
from spark_jobs.bronze_to_silver import DeltaCheckpointState, plan_transform


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
