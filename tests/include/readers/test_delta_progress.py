"""Tests of include/readers/delta_progress.py: where a bronze table stands, read from its Delta log.

Real Delta tables written with delta-rs under ``tmp_path``, carrying what the
ingestion job's commits carry: a :class:`BronzeCommit` as ``userMetadata`` and
the stand's txn actions (:func:`include.contract.table_stand.stand_actions`).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from include.contract.offsets import BackfillCommit, BackfillRange
from include.contract.table_stand import PositionUnknownError
from include.readers import delta_progress
from tests.include.readers.delta_commits import PIPELINE as P
from tests.include.readers.delta_commits import ingest, offset_rows


@pytest.fixture
def bronze(tmp_path) -> Path:
    """Two ingestion commits: partition 0 offsets 0-2 (version 0), then partition 1 offsets 3-4 (version 1)."""
    path = tmp_path / "bronze"
    ingest(path, 0, -1, 0, 0, 3, {0: 3})
    ingest(path, 1, 0, 1, 3, 5, {0: 3, 1: 5})
    return path


def test_no_table_yet_reads_as_no_progress_everywhere(tmp_path):
    path = tmp_path / "none"
    assert delta_progress.read_progress(path, P) is None
    assert delta_progress.table_version(path) is None and delta_progress.file_count(path) is None
    assert delta_progress.positions_from_rows(path) == {}
    assert delta_progress.commits_since(path, None) == (None, [])
    assert delta_progress.bronze_data_version(path) is None
    assert delta_progress.bronze_rows_by_version(path, 0) == (None, {})
    assert delta_progress.silver_commits_since(path, None) == (None, [])
    assert delta_progress.silver_stand(path, P) is None
    assert delta_progress.opened(path) == path  # nothing to open: the path stands in for it


def test_the_progress_is_the_newest_commits_position_read_from_the_log(bronze):
    progress = delta_progress.read_progress(bronze, P)
    assert (progress.table_version, progress.commit_version, progress.epoch) == (1, 1, 0)
    assert progress.next_offsets == {"t": {0: 3, 1: 5}}
    assert (progress.commit.batch_id, progress.commit.rows, progress.restore) == (1, 2, None)
    assert progress.path == str(bronze)
    # Read once for several checks: the same answer.
    assert delta_progress.read_progress(delta_progress.opened(bronze), P).next_offsets == {"t": {0: 3, 1: 5}}
    # Another pipeline's progress is not this one's: its stand is not in the table, the rows are.
    with pytest.raises(PositionUnknownError):
        delta_progress.read_progress(bronze, "refunds")


def test_commits_since_a_version_are_ours_only_and_oldest_first(bronze):
    write_deltalake(str(bronze), offset_rows("t", 0, [99]), mode="append")  # another writer: no metadata
    current, found = delta_progress.commits_since(bronze, None)
    assert current == 2 and [(v, c.batch_id) for v, c in found] == [(0, 0), (1, 1)]
    assert [v for v, _ in delta_progress.commits_since(bronze, 0)[1]] == [1]
    assert delta_progress.commits_since(bronze, 2) == (2, [])
    # The other writer's commit moved the table, not the position.
    progress = delta_progress.read_progress(bronze, P)
    assert (progress.table_version, progress.commit_version) == (2, 1)


def test_rows_without_a_recorded_position_are_refused_and_their_position_read_from_the_rows(tmp_path):
    path = tmp_path / "bronze"
    write_deltalake(str(path), offset_rows("t", 0, [0, 1, 7]), mode="append")
    write_deltalake(str(path), offset_rows("u", 2, [40]), mode="append")
    with pytest.raises(PositionUnknownError):
        delta_progress.read_progress(path, P)
    assert delta_progress.positions_from_rows(path) == {"t": {0: 8}, "u": {2: 41}}


def test_maintenance_commits_are_left_out_of_where_readers_of_bronze_end(bronze):
    assert delta_progress.file_count(bronze) == 2
    DeltaTable(str(bronze)).optimize.compact()
    assert delta_progress.table_version(bronze) == 2 and delta_progress.file_count(bronze) == 1
    assert delta_progress.bronze_data_version(bronze) == 1
    assert delta_progress.bronze_rows_by_version(bronze, 0) == (1, {0: 3, 1: 2})
    assert delta_progress.bronze_rows_by_version(bronze, 1) == (1, {1: 2})
    # The position is unchanged by a rewrite of the same rows.
    assert delta_progress.read_progress(bronze, P).next_offsets == {"t": {0: 3, 1: 5}}


def test_backfill_commits_carry_what_they_inserted_and_count_as_rows_but_not_progress(bronze):
    backfill = BackfillCommit(P, "r2", "manual", "backfill_offsets", "INC-7", "ops",
                              (BackfillRange("t", 0, 0, 3, read=3, inserted=1),))  # fmt: skip
    write_deltalake(str(bronze), offset_rows("t", 0, [1]), mode="append",
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": backfill.to_user_metadata()}))
    found = delta_progress.backfill_commits_since(bronze, 1)
    assert [(v, c) for v, c, _ in found] == [(2, backfill)]
    assert delta_progress.backfill_commits_since(bronze, 2) == []
    assert delta_progress.bronze_rows_by_version(bronze, 1) == (2, {1: 2, 2: 1})
    assert delta_progress.commits_since(bronze, 1) == (2, [])
    assert delta_progress.read_progress(bronze, P).commit_version == 1


def test_silver_lag_is_the_rows_of_bronzes_commits_after_where_the_transform_stands(bronze):
    from include.contract.silver_stand import BronzePosition, SilverStand

    # No transform commit yet: every ingested row is pending; a stand past bronze's last version, none.
    assert delta_progress.silver_pending(bronze, None) == 5
    stand = SilverStand(epoch=0, batch_id=0, bronze_end=BronzePosition(1), source="state")  # 0 applied, 1 not
    assert delta_progress.silver_pending(bronze, stand) == 2
    assert delta_progress.silver_pending(bronze, SilverStand(0, 1, BronzePosition(2), "state")) == 0
    # a stand inside version 1 (a batch that ended between its files) counts the version whole: an upper bound
    assert delta_progress.silver_pending(bronze, SilverStand(0, 1, BronzePosition(1, 0), "state")) == 2
    assert delta_progress.silver_pending(bronze.parent / "none", None) == 0


def test_the_replay_count_reads_the_quarantine_a_batch_at_a_time(tmp_path, monkeypatch):
    from datetime import UTC, datetime

    from include.contract.replay import ReplaySelection

    path = tmp_path / "quarantine"
    n = 2_500
    write_deltalake(str(path), pa.table({
        "reason": pa.array(["currency: expected one of 'EUR'" if i % 5 == 0 else "amount: expected decimal"
                            for i in range(n)]),
        "fields": pa.array([["currency"] if i % 5 == 0 else ["amount"] for i in range(n)], pa.list_(pa.string())),
        "timestamp": pa.array([datetime(2026, 3, 1, tzinfo=UTC)] * n, pa.timestamp("us", tz="UTC")),
    }))  # fmt: skip
    monkeypatch.setattr(delta_progress, "QUARANTINE_BATCH_ROWS", 100)  # 25 batches, as a large quarantine's
    selected, total = delta_progress.quarantine_selected(path, ReplaySelection(field="currency"))
    assert (selected, total) == (500, 2_500)
    assert delta_progress.quarantine_selected(tmp_path / "none", ReplaySelection()) == (0, 0)
