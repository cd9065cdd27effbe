"""Bronze commits written with delta-rs as the ingestion job writes them, for tests of where a table stands.

A test module is not a library: the Delta progress tests (test_delta_progress.py) and the monitoring
snapshot's tests (tests/include/monitoring/test_monitor.py) both write their bronze tables with
:func:`ingest` from here.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from include.contract.offsets import BronzeCommit, OffsetRange
from include.contract.table_stand import stand_actions

#: The pipeline the commits are written for.
PIPELINE = "orders"


def offset_rows(topic: str, partition: int, offsets: list[int]) -> pa.Table:
    """Bronze rows of one partition, only the columns a position is read from: topic, partition, offset."""
    return pa.table({"topic": pa.array([topic] * len(offsets), pa.string()),
                     "partition": pa.array([partition] * len(offsets), pa.int32()),
                     "offset": pa.array(offsets, pa.int64())})  # fmt: skip


def ingest(path: Path, batch_id: int, read_version: int, partition: int, start: int, until: int,
           next_offsets: dict[int, int]) -> BronzeCommit:  # fmt: skip
    """One ingestion commit of :data:`PIPELINE` to topic ``t`` as the job writes it: the rows of offsets
    ``start`` to ``until`` (exclusive) of ``partition``, the commit's metadata, the stand's txn actions."""
    ranges = (OffsetRange("t", partition, start, until, until - start),)
    commit = BronzeCommit(PIPELINE, "r1", "scheduled", 0, batch_id, ranges, {"t": next_offsets})
    actions = stand_actions(pipeline=PIPELINE, epoch=0, batch_id=batch_id, read_version=read_version,
                            next_offsets={"t": next_offsets}, topic_ids={})  # fmt: skip
    write_deltalake(str(path), offset_rows("t", partition, list(range(start, until))), mode="append",
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": commit.to_user_metadata()},
                                                       app_transactions=[Transaction(a, v) for a, v in actions]))  # fmt: skip
    return commit
