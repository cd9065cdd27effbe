"""The soak's independent reference and plan (pure logic): if these were wrong the soak would judge wrongly."""

from __future__ import annotations

import json

import pytest

from tests.soak.soak import (
    CLUSTER_FAULTS,
    ENDS_RUN,
    FAULTS,
    FaultResult,
    is_bad,
    newest_per_key,
    retry_missed,
    rounds,
    smoke_rounds,
)


def _event(key: str, when: str, amount: float = 1.0) -> bytes:
    return json.dumps({"order_id": key, "amount": amount, "event_time": f"2026-03-01T10:{when}Z"}).encode()


def test_newest_per_key_follows_the_readmes_rules():
    records = [
        (0, 0, b"a", _event("a", "05:00")),
        (0, 1, b"a", _event("a", "03:00")),  # late: superseded
        (0, 2, b"b", _event("b", "01:00")),
        (0, 3, b"b", None),  # tombstone: deletes b at 01:00
        (0, 4, b"b", _event("b", "00:30")),  # older than the delete: b stays deleted
        (1, 0, b"c", None),  # tombstone of a key never seen: a deleted row without an ordering value
        (1, 1, b"d", _event("d", "02:00")),
        (1, 2, b"d", _event("d", "02:00", 9)),  # same ordering value, later in the log: wins
        (1, 3, b"e", b"not json"),  # bad: ignored
        (1, 4, b"e", _event("e", "01:00", -1)),  # bad: negative amount
        (1, 5, b"c", _event("c", "00:01")),  # c's row: any event beats a null ordering
    ]
    assert newest_per_key(records) == {
        "a": (False, "2026-03-01T10:05:00Z", 0, 0),
        "b": (True, "2026-03-01T10:01:00Z", 0, 3),
        "c": (False, "2026-03-01T10:00:01Z", 1, 5),
        "d": (False, "2026-03-01T10:02:00Z", 1, 2),
    }


@pytest.mark.parametrize(("value", "bad"), [
    (b'{"order_id": "k", "amount": ', True), (b"not json at all", True),
    (json.dumps({"order_id": "k", "amount": -1, "event_time": "2026-03-01T10:00:00Z"}).encode(), True),
    (json.dumps({"order_id": "k", "amount": 0, "event_time": "2026-03-01T10:00:00Z"}).encode(), False),
])  # fmt: skip
def test_is_bad(value, bad):
    assert is_bad(value) is bad


def test_rounds_end_each_run_once_and_cover_every_kind():
    plan = rounds(20261124, 30)
    assert sum(map(len, plan)) >= 30
    assert {kind for run in plan for kind in run} == set(FAULTS)
    for run in plan:
        # The lock holder's kill has its runs to itself; any other run has one fault that ends it, first,
        # and three to five it may live through (a kind may repeat).
        assert run == ["lock_holder"] or (run[0] in ENDS_RUN and 3 <= len(run) - 1 <= 5
                                          and not set(run[1:]) & (ENDS_RUN | {"lock_holder"}))  # fmt: skip
    assert any(len(set(run[1:])) < len(run[1:]) for run in plan), "a companion kind may come twice in a run"
    assert rounds(20261124, 30) == plan, "a seed replays the same faults"
    only = rounds(7, 6, ["broker", "driver"])
    assert only and all(run[0] == "driver" and set(run[1:]) == {"broker"} for run in only)
    assert sum(map(len, only)) >= 6
    with pytest.raises(ValueError, match="unknown fault kinds"):
        rounds(1, 1, ["meteor"])


def test_the_smoke_hits_each_kind_once_in_as_few_runs_as_the_kinds_allow():
    plan = smoke_rounds(20261124)
    kinds = [kind for run in plan for kind in run]
    assert sorted(kinds) == sorted(FAULTS), "each kind exactly once"
    assert len(plan) == len(ENDS_RUN) + 1, "one run per run-ending kind, plus the lock holder's round"
    assert all(run[0] in ENDS_RUN | {"lock_holder"} for run in plan)
    (broker,) = [run for run in plan if "broker" in run]
    (executor,) = [run for run in plan if "executor" in run]
    assert broker[0] in ENDS_RUN - CLUSTER_FAULTS and executor[0] in CLUSTER_FAULTS
    assert smoke_rounds(20261124) == plan and smoke_rounds(7) != plan, "the seed fixes the order"


def test_a_run_ending_fault_that_missed_is_tried_again_next_until_its_kind_hits():
    plan = [["worker", "broker", "executor"], ["driver", "broker", "broker"]]
    missed = [FaultResult("worker", 0, injected=False, detail="the run ended first"),
              FaultResult("broker", 0, injected=True, detail=""), FaultResult("executor", 0, injected=True, detail="")]
    assert retry_missed(plan, 0, missed, wanted={"worker", "driver"})
    assert plan == [["worker", "broker", "executor"], ["worker"], ["driver", "broker", "broker"]]
    # The kind has hit before (not wanted any more), or it hit now: the plan goes on as drawn.
    assert not retry_missed(plan, 1, missed, wanted={"driver"})
    hit = [FaultResult("worker", 1, injected=True, detail="")] + missed[1:]
    assert not retry_missed(plan, 1, hit, wanted={"worker"})
    assert len(plan) == 3
    # A companion that missed and never hit is tried alone too, after the run-ending one.
    both = [FaultResult("worker", 0, injected=False, detail=""), FaultResult("executor", 0, injected=False, detail=""),
            FaultResult("broker", 0, injected=False, detail="", during="recovery run")]
    plan = [["worker", "executor"], ["driver"]]
    assert retry_missed(plan, 0, both, wanted={"worker", "executor", "broker"})
    assert plan == [["worker", "executor"], ["worker"], ["executor"], ["driver"]], "a recovery-run bounce is no retry"
