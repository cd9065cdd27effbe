"""The bronze table's progress, read from the Delta log (no JVM).

Where the table stands comes from its state (txn actions, see
:mod:`include.contract.table_stand`) and the newest commits' ``userMetadata``
(``history(limit)``), so the answer survives Delta's log cleanup. Those are
read from the log alone (:mod:`include.readers.delta_log`: the last log
checkpoint's ``txn`` column and the commits after it), so the cost does not
grow with the table's files or history; a table that reader does not take is
opened with delta-rs, which reads the same state. Nothing here reads data files
but :func:`positions_from_rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from include.contract import table_stand
from include.contract.errors import PipelineError
from include.contract.history import FIRST_READ, Verdict, read_until
from include.contract.jobs import bronze_app_id, silver_app_id
from include.contract.offsets import BackfillCommit, BronzeCommit, PositionMap
from include.contract.replay import ReplaySelection
from include.contract.routes import unrouted_batch
from include.contract.silver_stand import (
    SilverCommit,
    SilverStand,
    newest_silver_commit,
    resolve_silver_stand,
    silver_history_covered,
)
from include.contract.table_stand import HistoryEntry, Restore, Stand, history_entries
from include.readers import delta_log

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: A table's path, or the table :func:`opened` once for several reads.
TableRef: TypeAlias = "str | Path | DeltaTable | delta_log.LogView"
#: The key a caller names each of several silver tables by (:func:`silver_lags`): a route, or ``None``.
K = TypeVar("K")


def _open(path: TableRef, storage_options: dict[str, str] | None) -> DeltaTable | None:
    """The Delta table at ``path`` with its files (delta-rs), or ``None`` when there is none yet."""
    from deltalake import DeltaTable

    if isinstance(path, DeltaTable):
        return path
    if isinstance(path, delta_log.LogView):
        path = path.table_uri
    if not DeltaTable.is_deltatable(str(path), storage_options=storage_options):
        return None
    return DeltaTable(str(path), storage_options=storage_options)


def _log(path: TableRef, storage_options: dict[str, str] | None) -> DeltaTable | delta_log.LogView | None:
    """The table at ``path`` for reads of its version, history and txn state only (``None``: no table).

    From the log alone where :func:`include.readers.delta_log.read` takes the
    table, else opened with delta-rs; a table already opened as is.
    """
    if not isinstance(path, (str, Path)):
        return path
    view = delta_log.read(path) if storage_options is None else None
    return view if view is not None else _open(path, storage_options)


def _where(path: TableRef) -> str:
    """Where the table lives, for messages and reports."""
    uri = getattr(path, "table_uri", None)
    return str(path) if uri is None else str(uri)


def opened(path: str | Path, *, storage_options: dict[str, str] | None = None) -> TableRef:
    """The table at ``path`` read once, for a check that reads it several times; ``path`` when there is none yet.

    Every reader here takes the result in place of a path, and one read gives
    them all one version of the table. It is the log alone where
    :mod:`include.readers.delta_log` takes the table: a reader that needs the
    files (:func:`file_count`, :func:`positions_from_rows`) opens them itself.
    """
    table = _log(path, storage_options)
    return path if table is None else table


@dataclass(frozen=True)
class TableProgress:
    """Where a bronze table stands (:class:`include.contract.table_stand.Stand`) and the table's version."""

    path: str
    table_version: int
    stand: Stand

    @property
    def commit(self) -> BronzeCommit:
        return self.stand.commit

    @property
    def commit_version(self) -> int | None:
        return self.stand.commit_version

    @property
    def next_offsets(self) -> PositionMap:
        return self.stand.next_offsets

    @property
    def epoch(self) -> int:
        return self.stand.epoch

    @property
    def restore(self) -> Restore | None:
        return self.stand.restore


def _has_rows(table: DeltaTable | None, where: str) -> bool:
    import pyarrow as pa

    if table is None:  # its log was read a moment ago: the table went away since (someone removed it)
        raise PipelineError(f"{where}: the table went away while where it stands was being read; run again",
                            table=where)
    counts = pa.table(table.get_add_actions(flatten=True)).column("num_records")
    # A file without statistics (another tool wrote it) may hold rows: never take it for an empty table.
    return any(n is None or n > 0 for n in counts.to_pylist())


def read_progress(path: TableRef, pipeline: str, topics: Mapping[str, Iterable[int]] | None = None, *,
                  storage_options: dict[str, str] | None = None) -> TableProgress | None:  # fmt: skip
    """Where the bronze table at ``path`` stands for ``pipeline``; ``None`` for no table, or no progress and no rows.

    Reads the table's state (txn actions, carried by every log checkpoint)
    for ``topics`` (``{topic: partitions}``; those the newest commit names
    are added), and the newest commits of its history: only as far back as
    the last progress commit, so the cost does not grow with the history.
    Raises :class:`include.contract.table_stand.PositionUnknownError` when the table
    holds rows but no position can be read.
    """
    table = _log(path, storage_options)
    if table is None:
        return None
    version = table.version()
    probe = table.transaction_version
    wanted: dict[str, set[int]] = {t: set(p) for t, p in (topics or {}).items()}
    found: dict[str, Any] = {}

    def covered(entries: Sequence[HistoryEntry]) -> Verdict:
        for entry in entries:  # the newest of our commits names the topics it knew
            commit = BronzeCommit.from_user_metadata(entry.user_metadata, version=entry.version)
            if commit is not None and commit.pipeline == pipeline:
                for t, parts in commit.next_offsets.items():
                    wanted.setdefault(t, set()).update(parts)
                break
        found["state"] = state = table_stand.read_state(probe, pipeline, wanted)
        if state is not None:  # the commits back to the state's version are all resolve() needs
            return version - state.commit_version + 2
        return any(BronzeCommit.from_user_metadata(e.user_metadata, version=e.version) for e in entries)

    entries = list(read_until(lambda limit: history_entries(table.history(limit)), covered))
    state = found["state"]
    stand = table_stand.resolve(
        pipeline=pipeline, state=state, history=entries,
        # Only a table whose state holds no stand may be one that has rows but no position: only then the files.
        has_rows=state is not None or _has_rows(_open(table, storage_options), _where(path)),
        txn_seen=lambda c: probe(bronze_app_id(c.pipeline, c.epoch)) is not None,
        path=_where(path),
    )  # fmt: skip
    return None if stand is None else TableProgress(_where(path), version, stand)


def positions_from_rows(path: TableRef, *, storage_options: dict[str, str] | None = None) -> PositionMap:
    """Max offset + 1 of every topic-partition among the rows of the bronze table at ``path``.

    Reads the ``topic``, ``partition`` and ``offset`` columns of every file:
    a full scan, done once when an operator asks to re-establish a position
    that the table's state and history no longer hold.
    """
    import pyarrow.dataset as ds

    table = _open(path, storage_options)
    if table is None:
        return {}
    found: PositionMap = {}
    data = ds.dataset(table.file_uris(), format="parquet")
    result = data.to_table(columns=["topic", "partition", "offset"]).group_by(["topic", "partition"]).aggregate(
        [("offset", "max")]
    )
    for row in result.to_pylist():
        found.setdefault(row["topic"], {})[int(row["partition"])] = int(row["offset_max"]) + 1
    return found


def _entries_after(path: TableRef, version: int | None,
                   storage_options: dict[str, str] | None) -> tuple[int | None, list[dict[str, Any]]]:  # fmt: skip
    """The table's current version and its log entries after ``version`` (``None``: all), newest first.

    Reads only those entries, so the cost follows the number of new commits,
    not the table's history. ``(None, [])`` when there is no table.
    """
    table = _log(path, storage_options)
    if table is None:
        return None, []
    current = table.version()
    start = -1 if version is None else version
    if current <= start:
        return current, []
    return current, [e for e in table.history(current - start) if int(e["version"]) > start]


def commits_since(path: TableRef, version: int | None, *,
                  storage_options: dict[str, str] | None = None) -> tuple[int | None, list[tuple[int, BronzeCommit]]]:  # fmt: skip
    """The table's current version and our bronze commits after ``version`` (``None``: all), oldest first."""
    current, entries = _entries_after(path, version, storage_options)
    found = []
    for entry in entries:
        v = int(entry["version"])
        commit = BronzeCommit.from_user_metadata(entry.get("userMetadata"), version=v)
        if commit is not None:
            found.append((v, commit))
    return current, sorted(found, key=lambda item: item[0])


def file_count(path: TableRef, *, storage_options: dict[str, str] | None = None) -> int | None:
    """How many data files the table's current version holds; ``None`` when there is no table yet."""
    table = _open(path, storage_options)
    return None if table is None else len(table.file_uris())


def table_version(path: TableRef, *, storage_options: dict[str, str] | None = None) -> int | None:
    """The table's current version; ``None`` when there is no table yet."""
    table = _log(path, storage_options)
    return None if table is None else table.version()


def silver_commits_since(path: TableRef, version: int | None, *,
                         storage_options: dict[str, str] | None = None) -> tuple[SilverCommit | None, list[SilverCommit]]:  # fmt: skip
    """Silver's last batch commit at or before ``version``, and its batch commits after it (oldest first).

    Reads the log entries after ``version``, and before it only as far back
    as the newest batch commit (schema changes and maintenance are skipped).
    """
    table = _log(path, storage_options)
    if table is None:
        return None, []
    current = table.version()
    start = -1 if version is None else version
    def split(entries: Sequence[dict[str, Any]]) -> tuple[SilverCommit | None, list[SilverCommit]]:
        # Each commit kept with its version as an int: the commit's own ``version`` field is optional.
        after: list[tuple[int, SilverCommit]] = []
        previous: SilverCommit | None = None
        for entry in entries:  # newest first
            v = int(entry["version"])
            commit = SilverCommit.from_user_metadata(entry.get("userMetadata"), version=v)
            if commit is None:
                continue
            if v > start:
                after.append((v, commit))
            elif previous is None:
                previous = commit
        return previous, [c for _, c in sorted(after, key=lambda item: item[0])]

    entries = read_until(table.history, lambda found: start < 0 or split(found)[0] is not None,
                         first=max(current - start, 0) + FIRST_READ)  # fmt: skip
    return split(entries)


#: Epochs probed past the last one found: a transform epoch that crashed before its first
#: silver commit leaves a gap in the numbers.
_EPOCH_GAP = 8


def silver_stand(path: TableRef, pipeline: str, *,
                 storage_options: dict[str, str] | None = None) -> SilverStand | None:  # fmt: skip
    """Where the transform stands (:func:`include.contract.silver_stand.resolve_silver_stand`), read with delta-rs.

    delta-rs cannot list a table's txn app ids, so the epochs are probed:
    from the newest batch commit's epoch while the log holds one, else from 0,
    until :data:`_EPOCH_GAP` numbers in a row are missing.
    """
    table = _log(path, storage_options)
    if table is None:
        return None
    entries = read_until(table.history, silver_history_covered)
    newest = newest_silver_commit(entries)
    state: dict[int, int] = {}
    epoch, missing = (newest.epoch if newest else 0), 0
    while missing < _EPOCH_GAP:
        version = table.transaction_version(silver_app_id(pipeline, epoch))
        if version is None:
            missing += 1
        else:
            state[epoch], missing = int(version), 0
        epoch += 1
    return resolve_silver_stand(state, newest, entries)


def quarantine_rows_since(path: TableRef, version: int | None, *,
                          storage_options: dict[str, str] | None = None) -> dict[tuple[int, int], int]:  # fmt: skip
    """Rows each quarantine append after ``version`` holds, by ``(epoch, batch_id)``, from Delta's own metrics."""

    def batch_of(meta: str | None) -> tuple[int, int] | None:
        commit = SilverCommit.from_user_metadata(meta)
        return None if commit is None else (commit.epoch, commit.batch_id)

    return _rows_by_batch(path, version, storage_options, batch_of)


def unrouted_rows_since(path: TableRef, version: int | None, *,
                        storage_options: dict[str, str] | None = None) -> dict[tuple[int, int], int]:  # fmt: skip
    """Rows each unrouted records' quarantine append after ``version`` holds, by ``(epoch, batch_id)`` (a routed
    transform's), from Delta's own metrics."""
    return _rows_by_batch(path, version, storage_options, unrouted_batch)


def _rows_by_batch(path: TableRef, version: int | None, storage_options: dict[str, str] | None,
                   batch_of: Callable[[str | None], tuple[int, int] | None]) -> dict[tuple[int, int], int]:  # fmt: skip
    """Rows each append after ``version`` holds (Delta's ``numOutputRows``), by the ``(epoch, batch_id)`` that
    ``batch_of`` reads from its ``userMetadata`` (commits it gives ``None`` for are left out)."""
    found: dict[tuple[int, int], int] = {}
    for entry in _entries_after(path, version, storage_options)[1]:
        key = batch_of(entry.get("userMetadata"))
        if key is not None:
            found[key] = found.get(key, 0) + int((entry.get("operationMetrics") or {}).get("numOutputRows", 0))
    return found


def quarantine_selected(path: TableRef, selection: ReplaySelection, *, storage_options: dict[str, str] | None = None,
                        reasons: dict[str, int] | None = None) -> tuple[int, int]:  # fmt: skip
    """``(rows selection takes, rows in all)`` of the quarantine table at ``path`` (``(0, 0)``: no table).

    Reads the four columns the selection looks at, for the count a ``replay_quarantine`` request is
    refused on before a cluster starts, a batch of rows at a time: the memory it takes does not grow with
    the quarantine (which a producer fills). ``reasons``, when given, gets the rows taken per reason.
    """
    table = _open(path, storage_options)
    if table is None:
        return 0, 0
    data = table.to_pyarrow_dataset()
    columns = [c for c in ("reason", "fields", "timestamp", "replay_outcome") if c in data.schema.names]
    selected = total = 0
    for batch in data.to_batches(columns=columns, batch_size=QUARANTINE_BATCH_ROWS):
        total += batch.num_rows
        for row in batch.to_pylist():
            if selection.matches(row):
                selected += 1
                if reasons is not None:
                    reasons[str(row.get("reason"))] = reasons.get(str(row.get("reason")), 0) + 1
    return selected, total


def bronze_rows_in(path: TableRef, spans: Mapping[tuple[str, int], tuple[int, int]], *,
                   storage_options: dict[str, str] | None = None) -> dict[tuple[str, int], int]:  # fmt: skip
    """Per ``(topic, partition)``, bronze's rows with an offset in ``[lo, hi)`` (no table: none), counted
    by pyarrow over the files Delta's statistics do not rule out."""
    import pyarrow.dataset as ds

    table = _open(path, storage_options)
    if table is None:
        return dict.fromkeys(spans, 0)
    data = table.to_pyarrow_dataset()
    return {
        (topic, partition): data.count_rows(filter=(ds.field("topic") == topic) & (ds.field("partition") == partition)
                                            & (ds.field("offset") >= lo) & (ds.field("offset") < hi))
        if lo < hi else 0
        for (topic, partition), (lo, hi) in spans.items()
    }  # fmt: skip


#: Quarantine rows one step of :func:`quarantine_selected` holds as Python values.
QUARANTINE_BATCH_ROWS = 10_000


def backfill_commits_since(path: TableRef, version: int | None, *,
                           storage_options: dict[str, str] | None = None) -> list[tuple[int, BackfillCommit, dict[str, Any]]]:  # fmt: skip
    """Backfill commits after ``version`` (oldest first), each with Delta's own operation metrics."""
    found = []
    for entry in _entries_after(path, version, storage_options)[1]:
        commit = BackfillCommit.from_user_metadata(entry.get("userMetadata"), version=int(entry["version"]))
        if commit is not None:
            found.append((int(entry["version"]), commit, dict(entry.get("operationMetrics") or {})))
    return sorted(found, key=lambda item: item[0])


#: Commits that only rewrite or delete files already read (maintenance, ``spark_jobs/maintain_tables.py``):
#: never a record a reader has not seen, so where a reader of bronze must end is the version before them.
REWRITE_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})


def _newest_data_version(entries: Sequence[dict[str, Any]], before: int) -> int:
    """The newest version among ``entries`` (newest first) that is not a :data:`REWRITE_OPERATIONS` commit;
    ``before`` when they all are."""
    for entry in entries:
        if entry.get("operation") not in REWRITE_OPERATIONS or entry.get("userMetadata"):
            return int(entry["version"])
    return before


def bronze_rows_by_version(path: TableRef, since: int, *,
                           storage_options: dict[str, str] | None = None) -> tuple[int | None, dict[int, int]]:  # fmt: skip
    """Bronze's newest version that may hold records (maintenance commits after it left out), and the
    rows each of our commits (ingestion and backfill) from ``since`` on wrote."""
    current, entries = _entries_after(path, since - 1, storage_options)
    rows: dict[int, int] = {}
    for entry in entries:
        v, meta = int(entry["version"]), entry.get("userMetadata")
        commit = BronzeCommit.from_user_metadata(meta, version=v)
        if commit is not None:
            rows[v] = commit.rows
            continue
        backfill = BackfillCommit.from_user_metadata(meta, version=v)
        if backfill is not None:
            rows[v] = backfill.inserted
    if current is None:
        return current, rows
    return _newest_data_version(entries, since - 1), rows


def silver_pending(bronze: TableRef, stand: SilverStand | None, *,
                   storage_options: dict[str, str] | None = None) -> int:
    """Records bronze holds that the transform standing at ``stand`` (``None``: it never committed) has not
    applied, from bronze's own commits after the stand; only the commits since the stand are read.

    A stand inside a bronze version (a batch that ended between its files) counts that version whole:
    an upper bound, never a miss.
    """
    _, rows = bronze_rows_by_version(bronze, _pending_since(stand), storage_options=storage_options)
    return sum(rows.values())


def silver_lags(bronze: TableRef, silvers: Mapping[K, TableRef], pipeline: str, *,
                bronze_options: dict[str, str] | None = None,
                silver_options: dict[str, str] | None = None) -> dict[K, int]:  # fmt: skip
    """Records bronze holds that each silver table (a routed transform has one per route) has not applied, as
    :func:`silver_pending` counts them from each one's :func:`silver_stand`; bronze's commits are read once,
    from the stand furthest behind."""
    since = {key: _pending_since(silver_stand(path, pipeline, storage_options=silver_options))
             for key, path in silvers.items()}  # fmt: skip
    if not since:
        return {}
    _, rows = bronze_rows_by_version(bronze, min(since.values()), storage_options=bronze_options)
    return {key: sum(n for v, n in rows.items() if v >= start) for key, start in since.items()}


def _pending_since(stand: SilverStand | None) -> int:
    """The first bronze version a transform standing at ``stand`` has not read whole (``None``: 0)."""
    return 0 if stand is None else stand.bronze_end.version


def bronze_data_version(path: TableRef, *, storage_options: dict[str, str] | None = None) -> int | None:
    """Bronze's newest version that may hold records: the current one, less trailing maintenance commits."""
    table = _log(path, storage_options)
    if table is None:
        return None
    current = table.version()
    found = _newest_data_version(read_until(table.history, lambda e: _newest_data_version(e, -1) >= 0), -1)
    return found if found >= 0 else current
