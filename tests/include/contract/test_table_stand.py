"""Where the table stands: the txn actions a commit writes, read back, and the one resolver of both sides."""

from __future__ import annotations

import pytest

from include.contract import table_stand
from include.contract.jobs import bronze_app_id
from include.contract.offsets import BronzeCommit, OffsetRange
from include.contract.table_stand import (
    HistoryEntry,
    PositionUnknownError,
    read_state,
    resolve,
    stand_actions,
)

P = "orders"


def _commit(epoch: int, batch: int, nxt: dict, **extra) -> BronzeCommit:
    ranges = tuple(OffsetRange(t, p, 0, o, o) for t, parts in nxt.items() for p, o in parts.items() if o)
    return BronzeCommit(P, "run", "scheduled", epoch, batch, ranges, nxt, extra)


def _entry(
    version: int, commit: BronzeCommit | None = None, operation: str = "WRITE", **params
) -> HistoryEntry:
    """A history row; ``restored_to`` becomes a RESTORE's ``version`` parameter."""
    if "restored_to" in params:
        params = {"version": params.pop("restored_to"), **params}
    return HistoryEntry(version, operation, params, commit.to_user_metadata() if commit else None)


def _state(actions: list[tuple[str, int]]) -> dict[str, int]:
    """The table's state after these actions: the newest version per app id wins, as in Delta's log replay."""
    return dict(actions)


def test_actions_round_trip_through_the_state():
    actions = stand_actions(pipeline=P, epoch=3, batch_id=7, read_version=41,
                            next_offsets={"t": {0: 10, 1: 20}, "u": {0: 5}}, topic_ids={"t": "abc"})  # fmt: skip
    state = read_state(_state(actions).get, P, {"t": [0, 1], "u": [0]})
    assert (state.epoch, state.batch_id, state.commit_version) == (3, 7, 41)
    assert state.next_offsets == {"t": {0: 10, 1: 20}, "u": {0: 5}}
    assert state.topic_id_fingerprints == {"t": table_stand.topic_id_fingerprint("abc")}
    assert _state(actions)[bronze_app_id(P, 3)] == 7  # Delta's own idempotency still sees the batch


def test_partitions_kafka_no_longer_has_are_read_from_the_recorded_count():
    actions = stand_actions(pipeline=P, epoch=1, batch_id=0, read_version=0,
                            next_offsets={"t": {0: 4, 1: 9, 2: 1}}, topic_ids={})  # fmt: skip
    state = read_state(_state(actions).get, P, {"t": [0]})  # Kafka shows one partition now
    assert state.next_offsets == {"t": {0: 4, 1: 9, 2: 1}}


def test_a_position_commit_has_no_batch_and_no_epoch_txn():
    actions = dict(stand_actions(pipeline=P, epoch=2, batch_id=-1, read_version=-1, next_offsets={"t": {0: 50}},
                                 topic_ids={}))  # fmt: skip
    assert bronze_app_id(P, 2) not in actions
    state = read_state(actions.get, P, {"t": [0]})
    assert (state.batch_id, state.commit_version, state.next_offsets) == (-1, -1, {"t": {0: 50}})


def test_other_pipelines_state_is_not_read():
    actions = stand_actions(pipeline="other", epoch=1, batch_id=0, read_version=0, next_offsets={"t": {0: 4}},
                            topic_ids={})  # fmt: skip
    assert read_state(_state(actions).get, P, {"t": [0]}) is None


def test_recorded_partitions_come_from_the_app_ids():
    ids = [a for a, _ in stand_actions(pipeline=P, epoch=1, batch_id=0, read_version=0,
                                       next_offsets={"a.b-c": {0: 1, 11: 2}}, topic_ids={})]  # fmt: skip
    assert table_stand.recorded_partitions(ids, P) == [("a.b-c", 0), ("a.b-c", 11)]


def _resolve(state_actions, history, has_rows=True):
    state = read_state(_state(state_actions).get, P, {"t": [0, 1]}) if state_actions else None
    return resolve(
        pipeline=P, state=state, history=history, has_rows=has_rows, txn_seen=lambda c: True, path="/b"
    )


def test_after_log_cleanup_the_state_alone_gives_the_position():
    actions = stand_actions(pipeline=P, epoch=1, batch_id=2, read_version=2, next_offsets={"t": {0: 300, 1: 300}},
                            topic_ids={"t": "id1"})  # fmt: skip
    history = [_entry(v, operation="SET TBLPROPERTIES") for v in range(17, 9, -1)]  # versions 0-9 cleaned up
    stand = _resolve(actions, history)
    assert stand.source == "state" and stand.restore is None
    assert stand.next_offsets == {"t": {0: 300, 1: 300}}
    assert (stand.commit.epoch, stand.commit.batch_id) == (1, 2)
    assert table_stand.recorded_topic_ids(stand.commit, {"t": "id1"}) == {"t": "id1"}
    assert table_stand.recorded_topic_ids(stand.commit, {"t": "id2"})["t"] != "id2"


def test_history_gives_detail_when_it_agrees_with_the_state():
    commit = _commit(1, 2, {"t": {0: 300, 1: 300}})
    actions = stand_actions(pipeline=P, epoch=1, batch_id=2, read_version=2, next_offsets=commit.next_offsets,
                            topic_ids={})  # fmt: skip
    stand = _resolve(actions, [_entry(4, operation="OPTIMIZE"), _entry(3, commit)])
    assert (stand.source, stand.commit_version, stand.commit) == ("history", 3, commit)


def test_state_and_history_that_disagree_are_refused():
    commit = _commit(1, 2, {"t": {0: 300, 1: 300}})
    actions = stand_actions(pipeline=P, epoch=1, batch_id=2, read_version=2, next_offsets={"t": {0: 300, 1: 299}},
                            topic_ids={})  # fmt: skip
    with pytest.raises(PositionUnknownError, match=r"t-1 commit 300 vs state 299"):
        _resolve(actions, [_entry(3, commit)])


def test_rows_with_no_position_anywhere_are_refused_never_read_from_the_start():
    history = [_entry(v, operation="SET TBLPROPERTIES") for v in range(20, 10, -1)]
    with pytest.raises(PositionUnknownError, match=r"bronze table /b holds rows but neither its state"):
        _resolve([], history, has_rows=True)
    assert _resolve([], history, has_rows=False) is None


def test_a_table_written_before_stands_were_kept_is_read_from_history():
    commit = _commit(2, 5, {"t": {0: 10}})
    stand = _resolve([], [_entry(8, operation="OPTIMIZE"), _entry(7, commit)])
    assert (stand.source, stand.commit_version, stand.commit) == ("history", 7, commit)


def test_a_restore_after_the_last_progress_is_seen_with_where_it_went_back_to():
    old = _commit(1, 0, {"t": {0: 100, 1: 100}})
    newest = _commit(1, 2, {"t": {0: 300, 1: 300}})
    actions = stand_actions(pipeline=P, epoch=1, batch_id=2, read_version=2, next_offsets=newest.next_offsets,
                            topic_ids={})  # fmt: skip
    history = [_entry(4, operation="RESTORE", restored_to="1"), _entry(3, newest), _entry(2, _commit(1, 1, {"t": {0: 200, 1: 200}})),
               _entry(1, old), _entry(0)]  # fmt: skip
    stand = _resolve(actions, history)
    assert stand.restore is not None
    assert (stand.restore.version, stand.restore.restored_to) == (4, "version 1")
    assert stand.restore.restored_commit == (1, old)
    assert stand.next_offsets == newest.next_offsets  # the state is not moved by the restore


def test_a_restore_before_the_last_progress_is_history():
    newest = _commit(2, 0, {"t": {0: 300}})
    actions = stand_actions(pipeline=P, epoch=2, batch_id=0, read_version=4, next_offsets=newest.next_offsets,
                            topic_ids={})  # fmt: skip
    stand = _resolve(actions, [_entry(5, newest), _entry(4, operation="RESTORE", restored_to="1")])
    assert stand.restore is None


def test_a_restore_whose_target_history_is_gone_has_no_restored_commit():
    actions = stand_actions(pipeline=P, epoch=1, batch_id=9, read_version=30, next_offsets={"t": {0: 9}},
                            topic_ids={})  # fmt: skip
    stand = _resolve(actions, [_entry(40, operation="RESTORE", restored_to="12")])
    assert stand.restore is not None and stand.restore.restored_commit is None
