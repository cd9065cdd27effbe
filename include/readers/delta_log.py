"""What a Delta table's log alone says — its version, its newest commits, its ``txn`` state — without its file list.

delta-rs builds a table's whole file list (every data file's metadata) on
open, whatever is read after: on a bronze table of thousands of micro-batch
commits and files that is several times the cost of an open at ten commits,
and every check of a run opens bronze once.
Where the table stands needs none of that: the ``txn`` actions of the last
log checkpoint (one column of it) and of the commits after it, and the
``commitInfo`` of the newest commits. :func:`read` reads just those, the way
the Delta protocol defines them (the newest ``txn`` per app id wins).

It reads a local table only, and only a layout it knows; for anything else
(a remote URI, a V2 or incomplete checkpoint, a gap in the log, a
catalog-managed table, a file it cannot read) it returns ``None`` and the
caller opens the table with delta-rs, which reads the same state.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from include.contract.locations import local_path

_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_CHECKPOINT_PART = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
#: A V2 checkpoint (``<v>.checkpoint.<uuid>.json|parquet``) names sidecar files: left to delta-rs.
_CHECKPOINT_V2 = re.compile(r"^\d{20}\.checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet)$")
#: Table features under which the ``<v>.json`` files are not the whole log (commits held by a coordinator
#: or a catalog): this reader leaves those tables to delta-rs, the job's ``LogHistory`` to Delta's history.
LOG_NOT_IN_COMMIT_FILES = frozenset({"catalogManaged", "catalogOwned-preview", "coordinatedCommits-preview"})
#: Table features this reader leaves to delta-rs: the above, and V2 checkpoints (sidecar files).
_UNHANDLED_FEATURES = LOG_NOT_IN_COMMIT_FILES | {"v2Checkpoint"}


@dataclass
class LogView:
    """A table's log at one version: what :class:`deltalake.DeltaTable` offers for ``version``, ``history``
    and ``transaction_version``, read from the log alone."""

    table_uri: str
    _version: int
    _txn: dict[str, int]
    _commits: set[int] = field(repr=False)
    _infos: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False)

    def version(self) -> int:
        """The table's newest commit version."""
        return self._version

    def transaction_version(self, app_id: str) -> int | None:
        """The version of the table's ``txn`` for ``app_id`` (its state), or ``None`` when it has none."""
        return self._txn.get(app_id)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The ``commitInfo`` of the newest ``limit`` commits the log still holds, newest first, each with its
        ``version`` (as delta-rs's ``DeltaTable.history`` gives it)."""
        found: list[dict[str, Any]] = []
        for v in sorted((c for c in self._commits if c <= self._version), reverse=True):
            if limit is not None and len(found) >= limit:
                break
            if v not in self._infos:
                try:
                    path = Path(self.table_uri) / "_delta_log" / f"{v:020d}.json"
                    self._infos[v] = commit_info(path.read_text(encoding="utf-8"))
                except FileNotFoundError:  # removed by log cleanup since the listing: no longer history
                    continue
            found.append({**self._infos[v], "version": v})
        return found


def commit_info(text: str) -> dict[str, Any]:
    """The ``commitInfo`` action of one commit file's text (``{}`` when it has none)."""
    for line in text.splitlines():
        if '"commitInfo"' in line:
            action = json.loads(line)
            if "commitInfo" in action:
                return dict(action["commitInfo"])
    return {}


def _features(protocol: dict[str, Any] | None) -> set[str]:
    if not protocol:
        return set()
    return set(protocol.get("readerFeatures") or ()) | set(protocol.get("writerFeatures") or ())


def _checkpoint_files(names: list[str], latest: int) -> tuple[int, list[str]] | None:
    """The newest complete classic checkpoint at or below ``latest``: its version and files."""
    single: dict[int, str] = {}
    parts: dict[tuple[int, int], set[int]] = {}
    for name in names:
        if m := _CHECKPOINT.match(name):
            single[int(m[1])] = name
        elif m := _CHECKPOINT_PART.match(name):
            parts.setdefault((int(m[1]), int(m[3])), set()).add(int(m[2]))
    complete: dict[int, list[str]] = {v: [n] for v, n in single.items() if v <= latest}
    for (v, total), have in parts.items():
        if v <= latest and have == set(range(1, total + 1)) and v not in complete:
            complete[v] = [f"{v:020d}.checkpoint.{i:010d}.{total:010d}.parquet" for i in range(1, total + 1)]
    if not complete:
        return None
    v = max(complete)
    return v, complete[v]


def read(path: str | Path) -> LogView | None:
    """The log of the local Delta table at ``path``; ``None`` when it is not one this reader takes
    (see the module's doc): the caller then opens it with delta-rs."""
    root = local_path(path)
    if root is None:
        return None
    try:
        names = os.listdir(root / "_delta_log")
    except OSError:
        return None
    # A long-lived log holds thousands of names (commits, their .crc files, checkpoints): one cheap pass.
    commits = {int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()}
    checkpoints = [n for n in names if ".checkpoint." in n]
    if not commits or any(_CHECKPOINT_V2.match(n) for n in checkpoints):
        return None
    latest = max(commits)
    checkpoint = _checkpoint_files(checkpoints, latest)
    start = checkpoint[0] + 1 if checkpoint else 0
    if any(v not in commits for v in range(start, latest + 1)):
        return None  # a gap: only delta-rs's own replay may say what the table is
    txn: dict[str, int] = {}
    protocol: dict[str, Any] | None = None
    infos: dict[int, dict[str, Any]] = {}
    try:
        if checkpoint is not None:
            import pyarrow.parquet as pq

            for name in checkpoint[1]:
                columns = pq.ParquetFile(root / "_delta_log" / name).read(columns=["txn", "protocol"])
                # A checkpoint is mostly add actions: drop the other rows before making Python objects.
                for action in columns.column("txn").drop_null().to_pylist():
                    txn[action["appId"]] = int(action["version"])
                for action in columns.column("protocol").drop_null().to_pylist():
                    protocol = action
        for v in range(start, latest + 1):
            with open(root / "_delta_log" / f"{v:020d}.json", encoding="utf-8") as fh:
                for line in fh:
                    # One action a line: the file actions (thousands in an OPTIMIZE commit) are not parsed.
                    if not line.strip() or line.startswith(('{"add"', '{"remove"')):
                        continue
                    action = json.loads(line)
                    if "txn" in action:
                        txn[action["txn"]["appId"]] = int(action["txn"]["version"])
                    elif "protocol" in action:
                        protocol = action["protocol"]
                    elif "commitInfo" in action:
                        infos[v] = dict(action["commitInfo"])
            infos.setdefault(v, {})
    except (OSError, ValueError, KeyError, TypeError, NotImplementedError):  # pyarrow's errors derive from these
        return None  # a file that vanished or that this reader cannot take: delta-rs reads it
    if _features(protocol) & _UNHANDLED_FEATURES:
        return None
    return LogView(str(root), latest, txn, commits, infos)
