"""The bronze table's progress, read from the Delta log with delta-rs (no JVM).

Cost: opening the table reads its last log checkpoint and the commits after
it; the progress itself comes from the newest commits' ``userMetadata``
(``history(limit)``), so the answer does not get slower as runs accumulate.
Nothing here reads data files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from include.offsets import BronzeCommit, PositionMap, txn_app_id


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
    from deltalake import DeltaTable

    path = str(path)
    if not DeltaTable.is_deltatable(path, storage_options=storage_options):
        return None
    table = DeltaTable(path, storage_options=storage_options)
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
                return TableProgress(path, version, int(entry["version"]), commit)
        if len(entries) < limit or (max_commits is not None and limit >= max_commits):
            return None
        limit *= 10



def commits_since(path: str | Path, version: int | None, *,
                  storage_options: dict[str, str] | None = None) -> tuple[int | None, list[tuple[int, BronzeCommit]]]:  # fmt: skip
    """The table's current version and our bronze commits after ``version`` (``None``: all), oldest first.

    Reads only the log entries after ``version``, so the cost follows the
    number of new commits, not the table's history.
    """
    from deltalake import DeltaTable

    path = str(path)
    if not DeltaTable.is_deltatable(path, storage_options=storage_options):
        return None, []
    table = DeltaTable(path, storage_options=storage_options)
    current = table.version()
    start = -1 if version is None else version
    if current <= start:
        return current, []
    found = []
    for entry in table.history(current - start):
        v = int(entry["version"])
        if v <= start:
            continue
        commit = BronzeCommit.from_user_metadata(entry.get("userMetadata"), version=v)
        if commit is not None:
            found.append((v, commit))
    return current, sorted(found, key=lambda item: item[0])
