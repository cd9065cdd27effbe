"""Reading a Structured Streaming checkpoint of a Kafka query, without Spark.

A checkpoint folder holds, per micro-batch ``N``, ``offsets/N`` (the end
offsets of batch ``N``, written *before* the batch runs) and ``commits/N``
(written *after* its sink finished), plus ``sources/0/0``: the offsets the
query started from. A batch with ``offsets/N`` but no ``commits/N`` is
pending: the next start replays it with the same offsets.

Each pipeline keeps its checkpoints under one root, one folder per epoch
(``<root>/epoch=<N>``), so the epoch of a checkpoint is in its path.

Paths are strings (or local :class:`~pathlib.Path`). Every read goes
through a :class:`Files`: :data:`LOCAL` for a folder of this machine, or a
job's Hadoop filesystem for an object store (``spark_jobs.hadoop_files``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from include.contract.errors import PipelineError
from include.contract.offsets import PositionMap, positions_from_json

_EPOCH_DIR = re.compile(r"^epoch=(\d+)$")
T = TypeVar("T")


class CheckpointError(PipelineError, RuntimeError):
    """A checkpoint file exists but cannot be read; the message names the file."""


class Files(Protocol):
    """The few reads a checkpoint takes, on whatever filesystem holds it."""

    def exists(self, path: str) -> bool:
        """Whether a file or folder is at ``path``."""
        ...

    def children(self, path: str) -> list[tuple[str, bool]]:
        """``(name, is_folder)`` of each entry of the folder ``path``; empty when there is none."""
        ...

    def read_bytes(self, path: str) -> bytes:
        """The whole file at ``path``; raises :class:`FileNotFoundError` when there is none, another
        :class:`OSError` when it cannot be read."""
        ...


class LocalFiles:
    """:class:`Files` of this machine's filesystem."""

    def exists(self, path: str) -> bool:  # noqa: D102
        return Path(path).exists()

    def children(self, path: str) -> list[tuple[str, bool]]:  # noqa: D102
        # scandir: the entry types come with the listing, no stat per batch file.
        try:
            with os.scandir(path) as entries:
                return [(e.name, e.is_dir()) for e in entries]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read_bytes(self, path: str) -> bytes:  # noqa: D102
        return Path(path).read_bytes()


LOCAL = LocalFiles()


def child(path: str | Path, *names: str) -> str:
    """``path/name/...`` for a local path or a URI alike (``Path`` would fold ``s3a://`` to ``s3a:/``)."""
    return "/".join([str(path).rstrip("/"), *names])


def _read_log_file(path: str, files: Files, *, missing_ok: bool = False) -> PositionMap | None:
    """The Kafka source offsets in an ``offsets/N`` or ``sources/0/0`` file; with ``missing_ok``, ``None`` when
    there is no such file (one request on an object store, not an existence check and a read)."""
    try:
        data = files.read_bytes(path)
    except OSError as exc:
        if missing_ok and isinstance(exc, FileNotFoundError):
            return None
        raise CheckpointError(f"{path}: cannot read checkpoint file: {exc}") from exc
    text = data.decode("utf-8", errors="replace")
    # offsets/N: "v1", batch metadata, then one line per source. sources/0/0 has
    # a binary length prefix before "v1". The source's offsets are the last line.
    lines = [ln.strip("\x00 \t") for ln in text.splitlines() if ln.strip("\x00 \t")]
    if len(lines) < 2 or not lines[-1].startswith("{"):
        raise CheckpointError(f"{path}: not a Kafka offsets log entry (expected a JSON last line)")
    try:
        return positions_from_json(json.loads(lines[-1]))
    except (ValueError, AttributeError, TypeError) as exc:
        raise CheckpointError(f"{path}: malformed Kafka offsets: {exc}") from exc


def batch_ids(folder: str | Path, files: Files = LOCAL) -> list[int]:
    """The batch ids of a checkpoint's ``offsets`` or ``commits`` folder, in order."""
    return sorted(int(name) for name, is_folder in files.children(str(folder)) if name.isdigit())


@dataclass(frozen=True)
class CheckpointState:
    """Where one checkpoint stands."""

    path: str
    initial: PositionMap | None
    last_committed_batch: int | None
    committed: PositionMap | None
    pending_batch: int | None
    pending: PositionMap | None

    @property
    def position(self) -> PositionMap | None:
        """Where the next new batch will start: the last committed end, else the initial offsets."""
        return self.committed if self.committed is not None else self.initial


def batch_progress(path: str | Path, files: Files = LOCAL) -> tuple[int | None, int | None] | None:
    """``(last committed batch, first pending batch after it)`` of the checkpoint at ``path``.

    ``None`` if no query ever started there. Independent of the source, so
    the Kafka and the Delta-source checkpoints are read alike.
    """
    if not files.exists(child(path, "metadata")):
        return None
    offsets = batch_ids(child(path, "offsets"), files)
    commits = set(batch_ids(child(path, "commits"), files))
    committed_ids = [b for b in offsets if b in commits]
    last = committed_ids[-1] if committed_ids else None
    pending_ids = [b for b in offsets if b not in commits and (last is None or b > last)]
    return last, pending_ids[0] if pending_ids else None


def read_state(path: str | Path, files: Files = LOCAL) -> CheckpointState | None:
    """The state of the Kafka-source checkpoint at ``path``; ``None`` if no query ever started there."""
    progress = batch_progress(path, files)
    if progress is None:
        return None
    last, pending = progress
    return CheckpointState(
        path=str(path),
        initial=initial_offsets(path, files),
        last_committed_batch=last,
        committed=_read_log_file(child(path, "offsets", str(last)), files) if last is not None else None,
        pending_batch=pending,
        pending=_read_log_file(child(path, "offsets", str(pending)), files) if pending is not None else None,
    )


def batch_offsets(path: str | Path, batch_id: int, files: Files = LOCAL) -> PositionMap | None:
    """End offsets of ``batch_id`` (``offsets/<batch_id>``), or ``None`` if there is none."""
    return _read_log_file(child(path, "offsets", str(batch_id)), files, missing_ok=True)


def initial_offsets(path: str | Path, files: Files = LOCAL) -> PositionMap | None:
    """The offsets the query in ``path`` started from (``sources/0/0``)."""
    return _read_log_file(child(path, "sources", "0", "0"), files, missing_ok=True)


def _log_entry_damage(path: str, files: Files, *, binary_prefix: bool = False) -> str | None:
    """Why Spark could not parse the metadata-log entry ``path`` ("v1" then JSON lines), or ``None``."""
    try:
        data = files.read_bytes(path)
    except OSError as exc:
        return f"{path}: cannot be read ({exc})"
    text = data.decode("utf-8", errors="replace")
    lines = [ln.strip("\x00 \t") for ln in text.splitlines() if ln.strip("\x00 \t")]
    if binary_prefix and lines:
        lines[0] = lines[0][lines[0].find("v"):] if "v" in lines[0] else lines[0]
    if not lines or not lines[0].startswith("v"):
        return f"{path}: expected a version line ('v1') first, found {text[:40]!r} ({len(data)} bytes)"
    if len(lines) < 2:
        return f"{path}: holds only its version line ({len(data)} bytes): truncated"
    for n, line in enumerate(lines[1:], 2):
        try:
            json.loads(line)
        except ValueError as exc:
            return f"{path}: line {n} is not JSON ({exc}): truncated or garbled"
    return None


def damage(path: str | Path, files: Files = LOCAL) -> str | None:
    """Why Spark could not resume the checkpoint at ``path``, naming the file and what is wrong; ``None`` if whole.

    Checks what a restart reads: ``metadata``, the newest two ``offsets``
    entries, the newest ``commits`` entry and ``sources/0/0``. A truncated or
    garbled file (a full disk, a bad copy) makes Spark fail on every start.
    """
    meta = child(path, "metadata")
    if files.exists(meta):
        try:
            json.loads(files.read_bytes(meta).decode("utf-8").strip().splitlines()[0])
        except (OSError, ValueError, IndexError) as exc:
            return f"{meta}: not the query's JSON metadata ({exc})"
    offsets = batch_ids(child(path, "offsets"), files)
    for batch in offsets[-2:]:
        why = _log_entry_damage(child(path, "offsets", str(batch)), files)
        if why:
            return why
    commits = batch_ids(child(path, "commits"), files)
    if commits:
        why = _log_entry_damage(child(path, "commits", str(commits[-1])), files)
        if why:
            return why
    source = child(path, "sources", "0", "0")
    if files.exists(source):
        return _log_entry_damage(source, files, binary_prefix=True)
    return None


def epoch_dirs(root: str | Path, files: Files = LOCAL) -> dict[int, str]:
    """``{epoch: folder}`` for every ``epoch=N`` folder under a pipeline's checkpoint root."""
    found = {}
    for name, is_folder in files.children(str(root)):
        m = _EPOCH_DIR.match(name)
        if m and is_folder:
            found[int(m.group(1))] = child(root, name)
    return found


def read_epochs(root: str | Path, read: Callable[[str, Files], T | None],
                files: Files = LOCAL) -> tuple[dict[int, T | None], dict[int, str]]:  # fmt: skip
    """Each epoch folder under ``root`` read with ``read``, and why the damaged ones cannot be resumed.

    A damaged checkpoint (see :func:`damage`) reads as ``None``, like an empty
    one: the table is the source of truth, so the job starts a new epoch where
    the table stands, and the reason names the file and what was wrong.
    """
    states: dict[int, T | None] = {}
    damaged: dict[int, str] = {}
    for epoch, folder in epoch_dirs(root, files).items():
        why = damage(folder, files)
        if why is None:
            try:
                states[epoch] = read(folder, files)
                continue
            except CheckpointError as exc:
                why = str(exc)
        states[epoch], damaged[epoch] = None, why
    return states, damaged


def epoch_dir(root: str | Path, epoch: int) -> str:
    """The checkpoint folder of ``epoch`` under ``root``."""
    return child(root, f"epoch={epoch}")
