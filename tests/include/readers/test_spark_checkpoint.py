"""Unit tests of include/readers/spark_checkpoint.py against fake checkpoint folders in Spark's on-disk format.

Layout written by Spark's Structured Streaming for a Kafka source::

    metadata        {"id":"<query uuid>"}
    sources/0/0     NUL byte, "v1\\n", Kafka offsets JSON   (KafkaSourceInitialOffsetWriter)
    offsets/N       "v1\\n", batch metadata JSON, "\\n", Kafka offsets JSON
    commits/N       "v1\\n{\\"nextBatchWatermarkMs\\":0}"

plus ``.N.crc`` checksum files next to each log entry on a local file system.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from include.readers.spark_checkpoint import (
    CheckpointError,
    CheckpointState,
    batch_offsets,
    epoch_dir,
    epoch_dirs,
    initial_offsets,
    read_state,
)
from tests.include.readers.checkpoint_files import BATCH_METADATA, FakeCheckpoint


@pytest.fixture
def ckpt(tmp_path) -> FakeCheckpoint:
    return FakeCheckpoint(tmp_path / "checkpoints" / "orders" / "epoch=1")


# --------------------------------------------------------------------------- read_state


def test_missing_folder_is_none(tmp_path):
    assert read_state(tmp_path / "nowhere") is None


def test_folder_without_metadata_is_none(tmp_path):
    path = tmp_path / "epoch=1"
    (path / "offsets").mkdir(parents=True)
    (path / "offsets" / "0").write_text("v1\n{}\n" + '{"t1":{"0":1}}')
    assert read_state(path) is None


def test_metadata_only(ckpt):
    state = read_state(ckpt.path)
    assert state == CheckpointState(
        path=str(ckpt.path), initial=None, last_committed_batch=None, committed=None,
        pending_batch=None, pending=None,
    )  # fmt: skip
    assert state.position is None


def test_initial_offsets_only(ckpt):
    ckpt.initial({"t1": {"0": 0, "1": 5}})
    state = read_state(ckpt.path)
    assert state.initial == {"t1": {0: 0, 1: 5}}
    assert state.last_committed_batch is None
    assert state.committed is None
    assert state.pending_batch is None
    assert state.pending is None
    assert state.position == {"t1": {0: 0, 1: 5}}


def test_accepts_str_path(ckpt):
    ckpt.initial({"t1": {"0": 3}})
    state = read_state(str(ckpt.path))
    assert state.path == str(ckpt.path)
    assert state.initial == {"t1": {0: 3}}


def test_committed_batches(ckpt):
    ckpt.initial({"t1": {"0": 0, "1": 0}})
    ckpt.offsets(0, {"t1": {"0": 5, "1": 7}}).commit(0)
    ckpt.offsets(1, {"t1": {"0": 13, "1": 13}}).commit(1)
    state = read_state(ckpt.path)
    assert state.initial == {"t1": {0: 0, 1: 0}}
    assert state.last_committed_batch == 1
    assert state.committed == {"t1": {0: 13, 1: 13}}
    assert state.pending_batch is None
    assert state.pending is None
    assert state.position == {"t1": {0: 13, 1: 13}}


def test_batch_ids_sort_numerically(ckpt):
    ckpt.initial({"t1": {"0": 0}})
    for b in range(12):
        ckpt.offsets(b, {"t1": {"0": b + 1}}).commit(b)
    state = read_state(ckpt.path)
    assert state.last_committed_batch == 11  # not 9 (lexical order of "10", "11", "9")
    assert state.committed == {"t1": {0: 12}}


def test_pending_batch(ckpt):
    ckpt.initial({"t1": {"0": 0, "1": 0}})
    ckpt.offsets(0, {"t1": {"0": 5, "1": 7}}).commit(0)
    ckpt.offsets(1, {"t1": {"0": 13, "1": 13}})  # written before the batch ran; never committed
    state = read_state(ckpt.path)
    assert state.last_committed_batch == 0
    assert state.committed == {"t1": {0: 5, 1: 7}}
    assert state.pending_batch == 1
    assert state.pending == {"t1": {0: 13, 1: 13}}
    # The next new batch starts where the last committed one ended, not at the pending end.
    assert state.position == {"t1": {0: 5, 1: 7}}


def test_uncommitted_batch_older_than_last_commit_is_not_pending(ckpt):
    # Spark resumes after the newest commit; an older hole in commits/ is not replayed.
    ckpt.initial({"t1": {"0": 0}})
    ckpt.offsets(0, {"t1": {"0": 3}}).commit(0)
    ckpt.offsets(1, {"t1": {"0": 6}})
    ckpt.offsets(2, {"t1": {"0": 9}}).commit(2)
    state = read_state(ckpt.path)
    assert state.last_committed_batch == 2
    assert state.committed == {"t1": {0: 9}}
    assert state.pending_batch is None
    assert state.pending is None


def test_pending_first_batch(ckpt):
    ckpt.initial({"t1": {"0": 2}})
    ckpt.offsets(0, {"t1": {"0": 9}})
    state = read_state(ckpt.path)
    assert state.last_committed_batch is None
    assert state.committed is None
    assert state.pending_batch == 0
    assert state.pending == {"t1": {0: 9}}
    assert state.position == {"t1": {0: 2}}


def test_several_topics(ckpt):
    ckpt.initial({"a": {"0": 0}, "b": {"0": 0, "2": 4}})
    ckpt.offsets(0, {"a": {"0": 3}, "b": {"0": 1, "2": 8}}).commit(0)
    state = read_state(ckpt.path)
    assert state.committed == {"a": {0: 3}, "b": {0: 1, 2: 8}}


def test_ignores_non_numeric_entries_in_log_folders(ckpt):
    ckpt.initial({"t1": {"0": 0}})
    ckpt.offsets(0, {"t1": {"0": 4}}).commit(0)
    # Spark's temp files and checksums must not be mistaken for batches.
    (ckpt.path / "offsets" / ".1.9f1e2d.tmp").write_text("garbage")
    (ckpt.path / "offsets" / "1.compact").write_text("garbage")
    (ckpt.path / "commits" / "README").write_text("garbage")
    state = read_state(ckpt.path)
    assert state.last_committed_batch == 0
    assert state.pending_batch is None


def test_commit_without_offsets_is_ignored(ckpt):
    ckpt.initial({"t1": {"0": 0}})
    ckpt.offsets(0, {"t1": {"0": 4}}).commit(0)
    ckpt.commit(1)
    state = read_state(ckpt.path)
    assert state.last_committed_batch == 0
    assert state.committed == {"t1": {0: 4}}


def test_sources_file_without_leading_nul_is_read(ckpt):
    d = ckpt.path / "sources" / "0"
    d.mkdir(parents=True)
    (d / "0").write_text('v1\n{"t1":{"0":6}}')
    assert read_state(ckpt.path).initial == {"t1": {0: 6}}


def test_offsets_file_with_trailing_newline_is_read(ckpt):
    d = ckpt.path / "offsets"
    d.mkdir()
    (d / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"t1":{"0":6}}\n')
    assert batch_offsets(ckpt.path, 0) == {"t1": {0: 6}}


# --------------------------------------------------------------------------- batch_offsets / initial_offsets


def test_batch_offsets_and_initial_offsets(ckpt):
    ckpt.initial({"t1": {"0": 1}})
    ckpt.offsets(0, {"t1": {"0": 4}}).offsets(1, {"t1": {"0": 9}})
    assert initial_offsets(ckpt.path) == {"t1": {0: 1}}
    assert batch_offsets(ckpt.path, 0) == {"t1": {0: 4}}
    assert batch_offsets(ckpt.path, 1) == {"t1": {0: 9}}
    assert batch_offsets(ckpt.path, 2) is None


def test_initial_offsets_absent(ckpt):
    assert initial_offsets(ckpt.path) is None
    assert batch_offsets(ckpt.path, 0) is None


# --------------------------------------------------------------------------- malformed files


def _write_offsets(ckpt: FakeCheckpoint, batch: int, content: bytes) -> Path:
    d = ckpt.path / "offsets"
    d.mkdir(exist_ok=True)
    f = d / str(batch)
    f.write_bytes(content)
    return f


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"v1\n", id="version-only"),
        pytest.param(b"v1\n" + json.dumps(BATCH_METADATA).encode() + b"\n-", id="source-without-offsets"),
        pytest.param(b'v1\n{"batchWatermarkMs":0}\n{"t1":{"0":', id="truncated-json"),
        pytest.param(b'v1\n{"batchWatermarkMs":0}\n{"t1":5}', id="topic-not-an-object"),
        pytest.param(b'v1\n{"batchWatermarkMs":0}\n{"t1":{"zero":5}}', id="partition-not-a-number"),
        pytest.param(b'v1\n{"batchWatermarkMs":0}\n{"t1":{"0":null}}', id="offset-null"),
        pytest.param(b'v1\n{"batchWatermarkMs":0}\n{"t1":{"0":[1]}}', id="offset-list"),
        pytest.param(b'v1\n{"batchWatermarkMs":0}\n["t1"]', id="not-an-object"),
    ],
)
def test_malformed_offsets_file_names_the_file(ckpt, content):
    ckpt.initial({"t1": {"0": 0}})
    ckpt.offsets(0, {"t1": {"0": 4}}).commit(0)
    bad = _write_offsets(ckpt, 1, content)
    ckpt.commit(1)
    with pytest.raises(CheckpointError) as exc:
        read_state(ckpt.path)
    assert str(bad) in str(exc.value)
    with pytest.raises(CheckpointError) as exc:
        batch_offsets(ckpt.path, 1)
    assert str(bad) in str(exc.value)


def test_malformed_pending_offsets_file_names_the_file(ckpt):
    ckpt.initial({"t1": {"0": 0}})
    bad = _write_offsets(ckpt, 0, b"v1\n{not json}\n{not json either")
    with pytest.raises(CheckpointError) as exc:
        read_state(ckpt.path)
    assert str(exc.value).startswith(f"{bad}: malformed Kafka offsets")


def test_malformed_sources_file_names_the_file(ckpt):
    d = ckpt.path / "sources" / "0"
    d.mkdir(parents=True)
    bad = d / "0"
    bad.write_bytes(b"\x00v1\n")
    with pytest.raises(CheckpointError) as exc:
        read_state(ckpt.path)
    assert str(bad) in str(exc.value)
    assert "not a Kafka offsets log entry" in str(exc.value)
    with pytest.raises(CheckpointError) as exc:
        initial_offsets(ckpt.path)
    assert str(bad) in str(exc.value)


def test_unreadable_offsets_entry_names_the_file(ckpt):
    ckpt.initial({"t1": {"0": 0}})
    bad = ckpt.path / "offsets" / "0"
    bad.mkdir(parents=True)  # a folder where a file should be
    ckpt.commit(0)
    with pytest.raises(CheckpointError) as exc:
        read_state(ckpt.path)
    assert str(bad) in str(exc.value)
    assert "cannot read" in str(exc.value)


def test_checkpoint_error_is_not_an_offset_error():
    # A broken checkpoint is a runtime-cache problem, not a broken offset invariant.
    from include.contract.offsets import OffsetError

    assert not issubclass(CheckpointError, OffsetError)


# --------------------------------------------------------------------------- position


def test_position_prefers_committed_over_initial(tmp_path):
    state = CheckpointState(tmp_path, {"t": {0: 1}}, 3, {"t": {0: 9}}, 4, {"t": {0: 12}})
    assert state.position == {"t": {0: 9}}


def test_position_falls_back_to_initial(tmp_path):
    state = CheckpointState(tmp_path, {"t": {0: 1}}, None, None, 0, {"t": {0: 12}})
    assert state.position == {"t": {0: 1}}


def test_position_empty_committed_map_is_not_replaced_by_initial(tmp_path):
    state = CheckpointState(tmp_path, {"t": {0: 1}}, 0, {}, None, None)
    assert state.position == {}


# --------------------------------------------------------------------------- epochs


def test_epoch_dirs(tmp_path):
    root = tmp_path / "orders"
    for name in ("epoch=1", "epoch=2", "epoch=10"):
        (root / name).mkdir(parents=True)
    (root / "epoch=3").write_text("a file, not a checkpoint")
    (root / "epoch=x").mkdir()
    (root / "epoch=").mkdir()
    (root / "old-epoch=4").mkdir()
    (root / "epoch=5.bak").mkdir()
    assert epoch_dirs(root) == {1: f"{root}/epoch=1", 2: f"{root}/epoch=2", 10: f"{root}/epoch=10"}


def test_epoch_dirs_missing_root(tmp_path):
    assert epoch_dirs(tmp_path / "missing") == {}
    (tmp_path / "file").write_text("x")
    assert epoch_dirs(tmp_path / "file") == {}


def test_epoch_dirs_empty_root(tmp_path):
    assert epoch_dirs(tmp_path) == {}


def test_epoch_dir(tmp_path):
    assert epoch_dir(tmp_path, 3) == f"{tmp_path}/epoch=3"
    assert epoch_dir(str(tmp_path) + "/", 12) == f"{tmp_path}/epoch=12"
    assert epoch_dir("s3a://lake/orders/_checkpoints/bronze", 2) == "s3a://lake/orders/_checkpoints/bronze/epoch=2"


def test_epoch_dir_round_trips_through_epoch_dirs(tmp_path):
    for e in (1, 7, 42):
        Path(epoch_dir(tmp_path, e)).mkdir()
    assert epoch_dirs(tmp_path) == {e: epoch_dir(tmp_path, e) for e in (1, 7, 42)}


def test_read_state_of_each_epoch(tmp_path):
    FakeCheckpoint(epoch_dir(tmp_path, 1)).initial({"t": {"0": 0}}).offsets(0, {"t": {"0": 5}}).commit(0)
    FakeCheckpoint(epoch_dir(tmp_path, 2)).initial({"t": {"0": 5}})
    Path(epoch_dir(tmp_path, 3)).mkdir()  # created, query never started
    states = {e: read_state(p) for e, p in epoch_dirs(tmp_path).items()}
    assert states[1].position == {"t": {0: 5}}
    assert states[1].last_committed_batch == 0
    assert states[2].position == {"t": {0: 5}}
    assert states[2].last_committed_batch is None
    assert states[3] is None


# --------------------------------------------------------------------------- damage and read_epochs


def _whole(ckpt: FakeCheckpoint) -> FakeCheckpoint:
    return ckpt.initial({"t": {"0": 0}}).offsets(0, {"t": {"0": 5}}).commit(0).offsets(1, {"t": {"0": 9}}).commit(1)


def test_a_whole_checkpoint_has_no_damage(ckpt):
    from include.readers.spark_checkpoint import damage

    assert damage(_whole(ckpt).path) is None


@pytest.mark.parametrize(
    ("file", "cut", "expected"),
    [
        ("offsets/1", 30, r"offsets/1: line 2 is not JSON .*truncated or garbled"),
        ("offsets/0", 2, r"offsets/0: holds only its version line"),
        ("commits/1", 8, r"commits/1: line 2 is not JSON"),
        ("commits/1", 0, r"commits/1: expected a version line \('v1'\) first, found '' \(0 bytes\)"),
        ("sources/0/0", 10, r"sources/0/0: line 2 is not JSON"),
        ("metadata", 5, r"metadata: not the query's JSON metadata"),
    ],
)
def test_a_truncated_file_is_named_with_what_is_wrong(ckpt, file, cut, expected):
    from include.readers.spark_checkpoint import damage

    path = _whole(ckpt).path / file
    path.write_bytes(path.read_bytes()[:cut])
    assert re.search(expected, damage(ckpt.path) or "")


def test_an_older_damaged_file_spark_does_not_read_is_not_damage(ckpt):
    from include.readers.spark_checkpoint import damage

    _whole(ckpt).offsets(2, {"t": {"0": 12}}).commit(2)
    (ckpt.path / "commits" / "0").write_text("v1\n{")
    assert damage(ckpt.path) is None


def test_read_epochs_reads_the_whole_ones_and_names_the_damaged(tmp_path):
    from include.readers.spark_checkpoint import read_epochs

    root = tmp_path / "checkpoints"
    _whole(FakeCheckpoint(root / "epoch=1"))
    bad = _whole(FakeCheckpoint(root / "epoch=2")).path / "offsets" / "1"
    bad.write_text(bad.read_text()[:50])
    states, damaged = read_epochs(root, read_state)
    assert states[1] is not None and states[1].committed == {"t": {0: 9}}
    assert states[2] is None and list(damaged) == [2] and "epoch=2/offsets/1: line 2 is not JSON" in damaged[2]
