"""The jobs' checkpoint reads through Hadoop's filesystem (what an object-store checkpoint takes) against the
local reads, on the same checkpoint folder, with a real Spark session."""

from __future__ import annotations

from dataclasses import replace

import pytest

from include.readers import spark_checkpoint
from spark_jobs.hadoop_files import HadoopFiles
from tests.include.readers.checkpoint_files import FakeCheckpoint

pytestmark = pytest.mark.integration


def test_hadoop_reads_a_checkpoint_as_the_local_reads_do(spark, tmp_path):
    root = tmp_path / "checkpoints"
    FakeCheckpoint(root / "epoch=1").initial({"t": {"0": 0}}).offsets(0, {"t": {"0": 5}}).commit(0) \
        .offsets(1, {"t": {"0": 9}})  # fmt: skip
    FakeCheckpoint(root / "epoch=2")
    hadoop = HadoopFiles(spark)
    uri = f"file://{root}"
    local = spark_checkpoint.read_state(root / "epoch=1")
    assert local is not None and local.pending_batch == 1
    states, damaged = spark_checkpoint.read_epochs(uri, spark_checkpoint.read_state, hadoop)
    assert damaged == {} and sorted(states) == [1, 2]
    assert replace(states[1], path=local.path) == local and states[1].path == f"{uri}/epoch=1"
    assert spark_checkpoint.batch_offsets(f"{uri}/epoch=1", 1, hadoop) == {"t": {0: 9}}
    # A missing file is FileNotFoundError as locally, so a missing batch reads as None in one request.
    assert spark_checkpoint.batch_offsets(f"{uri}/epoch=1", 2, hadoop) is None
    assert spark_checkpoint.initial_offsets(f"{uri}/epoch=2", hadoop) is None
    with pytest.raises(FileNotFoundError, match="epoch=9"):
        hadoop.read_bytes(f"{uri}/epoch=9/metadata")
    assert hadoop.children(f"{uri}/epoch=9") == [] and not hadoop.exists(f"{uri}/epoch=9")
