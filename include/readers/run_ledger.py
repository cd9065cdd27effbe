"""The run ledger: one Delta table row per DAG run of a pipeline, written without a JVM.

Each row says what the run was (pipeline, run id, run type, cluster profile),
what it found and did (lag before and after, per-partition ranges and rows,
recorded gaps, preflight findings, continuity verdict) and how it ended. The
ledger is what people read when they ask "what happened to my data on
Tuesday"; the bronze table's commits remain the source of truth for offsets.

Nested parts are JSON strings, so the schema stays flat and any Delta reader
(Spark, delta-rs, DuckDB) can query it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from include.contract.errors import ContractError

if TYPE_CHECKING:
    import pyarrow
    from deltalake import DeltaTable

#: Column name -> arrow type name; the order is the table's column order.
COLUMNS: dict[str, str] = {
    "pipeline": "string",
    "run_id": "string",
    "run_type": "string",
    "dag_id": "string",
    # what the run was asked to do (include/contract/manual_ops.py), by whom and why
    "action": "string",  # normal | backfill_offsets | backfill_time | airflow_backfill | rebuild_checkpoint | ...
    "requested_by": "string",
    "request_reason": "string",
    "outcome": "string",  # success | failed | skipped
    "reason": "string",
    "started_at": "timestamp",
    "finished_at": "timestamp",
    "duration_s": "double",
    "cluster_profile": "string",
    "master_url": "string",
    # where the run's Spark application ran and why (cluster.local_max_records, records_per_worker)
    "cluster_choice": "string",
    "epoch": "int64",
    "bronze_version_before": "int64",
    "bronze_version_after": "int64",
    "rows": "int64",
    "commits": "int64",
    "lag_before": "int64",
    "lag_after": "int64",
    "lost": "int64",
    # before the run, the least time, in seconds, left before Kafka's retention may delete records the table had
    # not read (include/contract/retention.py); null when nothing was unread or no retention bounds it
    "retention_left_s": "double",
    "continuity": "string",  # CONTINUOUS | BROKEN | not checked
    # how many of Airflow's tries the run's steps took: the most any step took, and per step
    "tries": "int64",
    "tries_json": "string",
    # the transform (null for pipelines without one): where the bronze records it read went
    "silver_read": "int64",
    "silver_upserted": "int64",
    "silver_deleted": "int64",
    "quarantined": "int64",
    "superseded": "int64",
    "silver_version_after": "int64",
    "transform_json": "string",
    "partitions_json": "string",
    "gaps_json": "string",
    "findings_json": "string",
    "continuity_json": "string",
    "topic_ids_json": "string",
    # where the run set the table's position rather than reached it (starting_offsets latest, a position action)
    "position_set_json": "string",
    # what the run's table maintenance did (include/contract/maintenance.py): per table, files and bytes
    # before and after, each operation and its seconds; null when none was due
    "maintenance_json": "string",
    "tasks_json": "string",
    "params_json": "string",
    "request_json": "string",
    # the failed job's error as data (include/contract/errors.py): class, message, fields (pipeline, topic,
    # partition, offsets, table, version, action); null when no job failed
    "error_json": "string",
}


def _schema() -> pyarrow.Schema:
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "double": pa.float64(),
             "timestamp": pa.timestamp("us", tz="UTC")}  # fmt: skip
    return pa.schema([pa.field(name, types[kind]) for name, kind in COLUMNS.items()])


def _cell(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name.endswith("_json"):
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    if COLUMNS[name] == "timestamp" and isinstance(value, str):
        return datetime.fromisoformat(value)
    return value


def arrow_rows(records: Sequence[dict[str, Any]]) -> pyarrow.Table:
    """Runs' rows as a pyarrow table in the ledger's schema and encoding (missing columns are null).

    Unknown keys are an error, so a typo in a caller never silently drops a field.
    """
    import pyarrow as pa

    for record in records:
        _check_known(record)
    columns = {name: [_cell(name, r.get(name)) for r in records] for name in COLUMNS}
    return pa.Table.from_pydict(columns, schema=_schema())


def append_run(path: str | Path, record: dict[str, Any], *, storage_options: dict[str, str] | None = None,
               properties: dict[str, str] | None = None) -> int:  # fmt: skip
    """Append one run's row (missing columns are null); returns the ledger's new Delta version.

    Unknown keys are an error, so a typo in a caller never silently drops a field.
    ``properties`` (Delta table properties, e.g. the pipeline's retention) are
    set in their own commit first when the ledger does not carry them yet.
    """
    from deltalake import DeltaTable, write_deltalake

    table = arrow_rows([record])
    if properties and DeltaTable.is_deltatable(str(path), storage_options=storage_options):
        ledger = DeltaTable(str(path), storage_options=storage_options)
        if any(ledger.metadata().configuration.get(k) != v for k, v in properties.items()):
            ledger.alter.set_table_properties(properties)
    # "merge": a ledger written before a column was added gets it (null in the older rows).
    write_deltalake(str(path), table, mode="append", schema_mode="merge", storage_options=storage_options,
                    configuration=properties or None)  # fmt: skip
    return DeltaTable(str(path), storage_options=storage_options).version()


def newest_runs(path: str | Path, *, files: int = 20, columns: Sequence[str] | None = None,
                limit: int | None = None, storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The rows of the ledger's ``files`` newest data files, newest first: the latest runs, at a cost
    that does not grow with the ledger (each run appends one file).

    ``columns`` (``None``: all) are the only ones read and decoded, with
    ``finished_at`` always among them: a run's row can name thousands of
    commits, which a caller that wants one field should not pay for.
    ``limit`` keeps that many of the newest rows, and only those are decoded:
    a compacted ledger holds all its runs in a few files.
    """
    import pyarrow as pa
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path), storage_options=storage_options):
        return []
    table = DeltaTable(str(path), storage_options=storage_options)
    wanted = _wanted(columns)
    adds = pa.table(table.get_add_actions(flatten=True))
    if "min.finished_at" not in adds.column_names or None in adds.column("min.finished_at").to_pylist():
        return _decoded(_read(table, wanted, None, limit), wanted)  # no statistics to skip files with
    # The files holding the newest runs by their finished_at statistics, read whole: Delta skips the rest.
    spans = sorted(zip(adds.column("max.finished_at").to_pylist(), adds.column("min.finished_at").to_pylist(),
                       adds.column("num_records").to_pylist(), strict=True), reverse=True)[:files]  # fmt: skip
    if limit is not None:  # no more files than hold the newest ``limit`` rows
        held, kept = 0, 0
        while kept < len(spans) and held < limit:
            held, kept = held + int(spans[kept][2] or 0), kept + 1
        spans = spans[:kept]
    since = min(low for _, low, _ in spans)
    return _decoded(_read(table, wanted, [("finished_at", ">=", since)], limit), wanted)


def ledger_version(path: str | Path, *, storage_options: dict[str, str] | None = None) -> int | None:
    """The ledger's current Delta version, read without its list of files; ``None`` when there is no ledger yet.

    Cheap enough to ask on every page view: a reader that keeps what it read
    at a version knows from this alone whether it must read again.
    """
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path), storage_options=storage_options):
        return None
    return DeltaTable(str(path), storage_options=storage_options, without_files=True).version()


def _check_known(names: Iterable[str]) -> None:
    unknown = sorted(set(names) - set(COLUMNS))
    if unknown:
        raise ContractError(f"run ledger: unknown columns {unknown}; expected some of {list(COLUMNS)}")


def _wanted(columns: Sequence[str] | None) -> list[str]:
    if columns is None:
        return list(COLUMNS)
    _check_known(columns)
    return ["finished_at", *(c for c in columns if c != "finished_at")]


def _read(table: DeltaTable, wanted: list[str], filters: list[tuple[str, str, Any]] | None = None,
          limit: int | None = None) -> list[dict[str, Any]]:  # fmt: skip
    # A ledger written before a column was added lacks it until its next append: read those it has.
    present = {f.name for f in table.schema().fields}
    rows = table.to_pyarrow_table(columns=[c for c in wanted if c in present], filters=filters)
    if limit is not None:  # the newest rows only, cut in Arrow before any becomes a Python dict
        rows = rows.sort_by([("finished_at", "descending")]).slice(0, limit)
    # pyarrow is untyped; a table's to_pylist() is a list of {column: value} dicts.
    return cast(list[dict[str, Any]], rows.to_pylist())


def _decoded(rows: list[dict[str, Any]], wanted: Sequence[str] = tuple(COLUMNS)) -> list[dict[str, Any]]:
    epoch = datetime.min.replace(tzinfo=UTC)
    rows.sort(key=lambda r: r["finished_at"] or epoch, reverse=True)
    for r in rows:
        for name in wanted:
            # A ledger written before a column was added lacks it until its next append.
            value = r.setdefault(name, None)
            if name.endswith("_json") and value is not None:
                r[name] = json.loads(value)
    return rows


def runs_since(path: str | Path, since: datetime, *, columns: Sequence[str] | None = None,
               storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The rows of runs that finished at or after ``since``, newest first (Delta skips the older files);
    only ``columns`` as in :func:`newest_runs`."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path), storage_options=storage_options):
        return []
    table = DeltaTable(str(path), storage_options=storage_options)
    wanted = _wanted(columns)
    return _decoded(_read(table, wanted, [("finished_at", ">=", since)]), wanted)


def maintain(path: str | Path, *, storage_options: dict[str, str] | None = None) -> dict[str, Any]:
    """Compact the ledger's files, VACUUM it with its own retention and write a log checkpoint (delta-rs).

    The ledger gains one small file per run; this keeps its readers' cost
    flat. Returns what it did, as :mod:`spark_jobs.maintain_tables` does for
    the Spark tables; ``{"skipped": ...}`` when there is no ledger yet.
    """
    import time

    import pyarrow as pa
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path), storage_options=storage_options):
        return {"path": str(path), "skipped": "no table yet"}
    started = time.monotonic()

    def files_and_bytes(table: DeltaTable) -> tuple[int, int]:
        sizes = pa.table(table.get_add_actions(flatten=True)).column("size_bytes").to_pylist()
        return len(sizes), int(sum(sizes))

    table = DeltaTable(str(path), storage_options=storage_options)
    version_before = table.version()
    files_before, bytes_before = files_and_bytes(table)
    t = time.monotonic()
    metrics = table.optimize.compact()
    optimized = {"files_removed": int(metrics.get("numFilesRemoved", 0)), "files_added": int(metrics.get("numFilesAdded", 0)),
                 "zorder_by": [], "seconds": round(time.monotonic() - t, 3)}  # fmt: skip
    t = time.monotonic()
    # retention_hours=None: the table's delta.deletedFileRetentionDuration (the pipeline's
    # tables.deleted_file_retention_days); enforce_retention_duration refuses less than a week.
    deleted = table.vacuum(retention_hours=None, dry_run=False, enforce_retention_duration=True)
    vacuumed = {"files_deleted": len(deleted), "seconds": round(time.monotonic() - t, 3)}
    t = time.monotonic()
    table.create_checkpoint()
    table.cleanup_metadata()  # commit files older than delta.logRetentionDuration, before the checkpoint
    checkpoint = {"version": table.version(), "seconds": round(time.monotonic() - t, 3)}
    files_after, bytes_after = files_and_bytes(DeltaTable(str(path), storage_options=storage_options))
    return {
        "path": str(path), "version_before": version_before, "files_before": files_before,
        "bytes_before": bytes_before, "optimize": optimized, "vacuum": vacuumed, "checkpoint": checkpoint,
        "files_after": files_after, "bytes_after": bytes_after, "seconds": round(time.monotonic() - started, 3),
    }  # fmt: skip


def read_runs(path: str | Path, *, limit: int | None = None,
              storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The ledger's rows, newest first (JSON columns decoded); empty when there is no ledger yet."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path), storage_options=storage_options):
        return []
    rows = _decoded(DeltaTable(str(path), storage_options=storage_options).to_pyarrow_table().to_pylist())
    return rows[:limit] if limit is not None else rows
