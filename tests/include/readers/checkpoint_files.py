"""Fake Structured Streaming checkpoints: the files Spark writes for a Kafka source, without Spark.

The layout is described in tests/include/readers/test_spark_checkpoint.py. A test module is not a library:
that module and the Hadoop file-system tests (tests/spark_jobs/test_hadoop_files.py) both write their
checkpoints with :class:`FakeCheckpoint` from here.
"""

from __future__ import annotations

import json
from pathlib import Path

#: The batch metadata line of an ``offsets/N`` file, as Spark writes it.
BATCH_METADATA = {
    "batchWatermarkMs": 0,
    "batchTimestampMs": 1700000000000,
    "conf": {
        "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.multipleWatermarkPolicy": "min",
    },
}


def _offsets_json(positions: dict) -> str:
    return json.dumps(positions, separators=(",", ":"))


class FakeCheckpoint:
    """Writes checkpoint files exactly as Spark lays them out: ``metadata`` on creation, then each call
    one log entry (and its ``.crc``); the calls chain."""

    def __init__(self, path: Path | str) -> None:
        self.path = path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "metadata").write_text('{"id":"9a3c1f52-6b7e-4c1d-8f0a-2b5e7d9c4a11"}\n')

    def initial(self, positions: dict) -> FakeCheckpoint:
        """``sources/0/0``: the query's starting offsets, ``{topic: {"partition": offset}}``."""
        d = self.path / "sources" / "0"
        d.mkdir(parents=True, exist_ok=True)
        (d / "0").write_bytes(b"\x00" + b"v1\n" + _offsets_json(positions).encode())
        (d / ".0.crc").write_bytes(b"crc\x00\x01\x02")
        return self

    def offsets(self, batch: int, positions: dict) -> FakeCheckpoint:
        """``offsets/<batch>``: the end offsets a batch planned to read."""
        d = self.path / "offsets"
        d.mkdir(exist_ok=True)
        text = "v1\n" + json.dumps(BATCH_METADATA, separators=(",", ":")) + "\n" + _offsets_json(positions)
        (d / str(batch)).write_text(text)
        (d / f".{batch}.crc").write_bytes(b"crc\x00\x01\x02")
        return self

    def commit(self, batch: int) -> FakeCheckpoint:
        """``commits/<batch>``: the batch finished."""
        d = self.path / "commits"
        d.mkdir(exist_ok=True)
        (d / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (d / f".{batch}.crc").write_bytes(b"crc\x00\x01\x02")
        return self
