"""The bronze table's progress, read from the Delta log with delta-rs (no JVM).

Cost: opening the table reads its last log checkpoint and the commits after
it; the progress itself comes from the newest commits' ``userMetadata``
(``history(limit)``), so the answer does not get slower as runs accumulate.
Nothing here reads data files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from include.offsets import BackfillCommit, BronzeCommit, PositionMap, txn_app_id
from include.transform_spec import SilverCommit


def _open(path: str | Path, storage_options: dict[str, str] | None):
    """The Delta table at ``path`` (delta-rs), or ``None`` when there is none yet."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path), storage_options=storage_options):
        return None
    return DeltaTable(str(path), storage_options=storage_options)


@dataclass(frozen=True)
class TableProgress:
    """Where a bronze table stands: its newest bronze commit and the table version."""

    path: str
    table_version: int
    commit_version: int
    commit: BronzeCommit

    @property
    def next_offsets(self) -> PositionMap:
        return self.commit.next_offsets

    @property
    def epoch(self) -> int:
        return self.commit.epoch


def read_progress(path: str | Path, *, storage_options: dict[str, str] | None = None,
                  max_commits: int | None = None) -> TableProgress | None:  # fmt: skip
    """The newest bronze commit of the table at ``path``; ``None`` for no table or no progress yet.

    Commits without our metadata (OPTIMIZE, VACUUM, a manual MERGE) are
    skipped. The search window starts at the last 20 commits and widens only
    while it finds none of ours (``max_commits`` caps it).
    """
    table = _open(path, storage_options)
    if table is None:
        return None
    version = table.version()
    limit = 20
    while True:
        entries = table.history(limit)
        for entry in entries:  # newest first
            commit = BronzeCommit.from_user_metadata(entry.get("userMetadata"), version=entry["version"])
            if commit is not None:
                if table.transaction_version(txn_app_id(commit.pipeline, commit.epoch)) is None:
                    # Our writer always sets txnAppId with the metadata; its
                    # absence means the metadata was copied by another writer.
                    continue
                return TableProgress(str(path), version, int(entry["version"]), commit)
        if len(entries) < limit or (max_commits is not None and limit >= max_commits):
            return None
        limit *= 10



def _entries_after(path: str | Path, version: int | None,
                   storage_options: dict[str, str] | None) -> tuple[int | None, list[dict]]:  # fmt: skip
    """The table's current version and its log entries after ``version`` (``None``: all), newest first.

    Reads only those entries, so the cost follows the number of new commits,
    not the table's history. ``(None, [])`` when there is no table.
    """
    table = _open(path, storage_options)
    if table is None:
        return None, []
    current = table.version()
    start = -1 if version is None else version
    if current <= start:
        return current, []
    return current, [e for e in table.history(current - start) if int(e["version"]) > start]


def commits_since(path: str | Path, version: int | None, *,
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


def table_version(path: str | Path, *, storage_options: dict[str, str] | None = None) -> int | None:
    """The table's current version; ``None`` when there is no table yet."""
    table = _open(path, storage_options)
    return None if table is None else table.version()


def silver_commits_since(path: str | Path, version: int | None, *,
                         storage_options: dict[str, str] | None = None) -> tuple[SilverCommit | None, list[SilverCommit]]:  # fmt: skip
    """Silver's last batch commit at or before ``version``, and its batch commits after it (oldest first).

    Reads the log entries after ``version``, and before it only as far back
    as the newest batch commit (schema changes and maintenance are skipped).
    """
    table = _open(path, storage_options)
    if table is None:
        return None, []
    current = table.version()
    start = -1 if version is None else version
    limit = max(current - start, 0) + 20
    while True:
        entries = table.history(limit)
        after, previous = [], None
        for entry in entries:  # newest first
            commit = SilverCommit.from_user_metadata(entry.get("userMetadata"), version=int(entry["version"]))
            if commit is None:
                continue
            if commit.version > start:
                after.append(commit)
            elif previous is None:
                previous = commit
        if previous is not None or start < 0 or len(entries) < limit:
            return previous, sorted(after, key=lambda c: c.version)
        limit *= 10


def quarantine_rows_since(path: str | Path, version: int | None, *,
                          storage_options: dict[str, str] | None = None) -> dict[tuple[int, int], int]:  # fmt: skip
    """Rows each quarantine append after ``version`` holds, by ``(epoch, batch_id)``, from Delta's own metrics."""
    found: dict[tuple[int, int], int] = {}
    for entry in _entries_after(path, version, storage_options)[1]:
        commit = SilverCommit.from_user_metadata(entry.get("userMetadata"), version=int(entry["version"]))
        if commit is not None:
            key = (commit.epoch, commit.batch_id)
            found[key] = found.get(key, 0) + int((entry.get("operationMetrics") or {}).get("numOutputRows", 0))
    return found


def backfill_commits_since(path: str | Path, version: int | None, *,
                           storage_options: dict[str, str] | None = None) -> list[tuple[int, BackfillCommit, dict]]:  # fmt: skip
    """Backfill commits after ``version`` (oldest first), each with Delta's own operation metrics."""
    found = []
    for entry in _entries_after(path, version, storage_options)[1]:
        commit = BackfillCommit.from_user_metadata(entry.get("userMetadata"), version=int(entry["version"]))
        if commit is not None:
            found.append((int(entry["version"]), commit, dict(entry.get("operationMetrics") or {})))
    return sorted(found, key=lambda item: item[0])


def bronze_rows_by_version(path: str | Path, since: int, *,
                           storage_options: dict[str, str] | None = None) -> tuple[int | None, dict[int, int]]:  # fmt: skip
    """Bronze's current version and the rows each of our commits (ingestion and backfill) from ``since`` on wrote."""
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
    return current, rows
