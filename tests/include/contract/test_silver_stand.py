"""Where the transform stands: one txn action per silver commit, read back after log cleanup."""

from __future__ import annotations

import pytest

from include.contract.jobs import silver_app_id
from include.contract.silver_stand import (
    MAX_BATCH_ID,
    BronzePosition,
    SilverCommit,
    SilverRestore,
    SilverStand,
    resolve_silver_stand,
    silver_epochs,
    silver_history_covered,
    silver_txn_version,
)


def _commit(epoch: int, batch: int, end: BronzePosition, version: int = 30) -> SilverCommit:
    return SilverCommit("orders", "run", epoch, batch, BronzePosition(end.version - 1), end, 1, {}, {},
                        version=version)  # fmt: skip


def test_the_txn_version_only_grows_within_an_epoch_and_reads_back():
    batches = [(0, 0), (3, 1), (3, 2), (4, 3), (900, MAX_BATCH_ID)]
    versions = [silver_txn_version(v, b) for v, b in batches]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    for (bronze, batch), packed in zip(batches, versions, strict=True):
        assert SilverStand.from_txn(2, packed) == SilverStand(2, batch, BronzePosition(bronze), "state")


def test_a_batch_id_that_does_not_fit_names_the_action():
    with pytest.raises(ValueError, match=r"move the transform's checkpoint folder \(tables.transform_checkpoint_root\) aside"):
        silver_txn_version(5, MAX_BATCH_ID + 1)


def test_only_this_pipelines_silver_epochs_are_read_from_the_txn_actions():
    txns = {silver_app_id("orders", 0): 7, silver_app_id("orders", 12): 9, silver_app_id("orders2", 1): 5,
            "kde-quarantine.orders.e0": 3, "kde-silver.orders.eX": 1}  # fmt: skip
    assert silver_epochs(txns, "orders") == {0: 7, 12: 9}


def test_state_alone_after_log_cleanup_gives_the_newest_epochs_stand():
    state = {0: silver_txn_version(10, 4), 1: silver_txn_version(17, 2)}
    assert resolve_silver_stand(state, None) == SilverStand(1, 2, BronzePosition(17), "state")


def test_state_and_commit_naming_the_same_batch_keep_the_commits_detail():
    end = BronzePosition(17, 3)
    stand = resolve_silver_stand({1: silver_txn_version(17, 2)}, _commit(1, 2, end))
    assert (stand.source, stand.bronze_end, stand.commit.version) == ("both", end, 30)


def test_history_ahead_of_state_is_a_table_written_before_positions_lived_in_state():
    assert resolve_silver_stand({}, _commit(0, 5, BronzePosition(9))).source == "history"
    assert resolve_silver_stand({0: silver_txn_version(4, 1)}, _commit(0, 5, BronzePosition(9))).batch_id == 5


def test_state_ahead_of_the_newest_commit_in_the_log_wins():
    stand = resolve_silver_stand({2: silver_txn_version(40, 0)}, _commit(1, 9, BronzePosition(30)))
    assert (stand.epoch, stand.batch_id, stand.bronze_end, stand.source) == (2, 0, BronzePosition(40), "state")


def test_state_and_commit_disagreeing_on_the_same_batch_are_refused():
    with pytest.raises(ValueError, match="state says epoch 1 batch 2 ended at bronze version 18, its commit"):
        resolve_silver_stand({1: silver_txn_version(18, 2)}, _commit(1, 2, BronzePosition(17)))


def test_the_stand_travels_as_json():
    stand = SilverStand(3, 8, BronzePosition(12, 4), "both")
    assert SilverStand.from_json(stand.to_json()) == stand


def _entry(at: int, operation: str, meta: str | None = None, **params: str) -> dict:
    return {"version": at, "operation": operation, "operationParameters": params, "userMetadata": meta}


def _history(*restores: dict) -> list[dict]:
    batches = [_entry(v, "MERGE", _commit(0, b, BronzePosition(end), version=v).to_user_metadata())
               for v, b, end in ((3, 0, 2), (4, 1, 4), (6, 2, 7))]  # fmt: skip
    return [*batches, _entry(5, "OPTIMIZE"), *restores]


def test_a_restore_that_undid_batches_sends_the_transform_back_to_where_silver_stood():
    newest = _commit(0, 2, BronzePosition(7), version=6)
    history = _history(_entry(8, "RESTORE", version="4"))
    assert silver_history_covered(history)
    stand = resolve_silver_stand({0: silver_txn_version(7, 2)}, newest, history)
    assert stand.restore == SilverRestore(8, "version 4", BronzePosition(4))
    # Restored to a version that still holds the last batch (e.g. undoing a user's UPDATE): nothing to redo.
    later = resolve_silver_stand({0: silver_txn_version(7, 2)}, newest, _history(_entry(8, "RESTORE", version="7")))
    assert later.restore is None
    # A RESTORE before the last batch was followed by batches already: it is history.
    earlier = [e for e in _history() if e["operation"] != "OPTIMIZE"] + [_entry(5, "RESTORE", version="3")]
    assert resolve_silver_stand({0: silver_txn_version(7, 2)}, newest, earlier).restore is None


def test_a_restore_whose_target_the_log_cannot_place_gives_no_start():
    newest = _commit(0, 2, BronzePosition(7), version=6)
    by_time = resolve_silver_stand({}, newest, _history(_entry(8, "RESTORE", timestamp="2026-11-01")))
    assert by_time.restore == SilverRestore(8, "timestamp 2026-11-01", None)
    history = _history(_entry(8, "RESTORE", version="1"))
    assert not silver_history_covered(history)  # the reader fetches more of the log first
    assert resolve_silver_stand({}, newest, history).restore.bronze_from is None
