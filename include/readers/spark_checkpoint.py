"""Reading a Structured Streaming checkpoint of a Kafka query, without Spark.

A checkpoint folder holds, per micro-batch ``N``, ``offsets/N`` (the end
offsets of batch ``N``, written *before* the batch runs) and ``commits/N``
(written *after* its sink finished), plus ``sources/0/0``: the offsets the
query started from. A batch with ``offsets/N`` but no ``commits/N`` is
pending: the next start replays it with the same offsets.

Each pipeline keeps its checkpoints under one root, one folder per epoch
(``<root>/epoch=<N>``), so the epoch of a checkpoint is in its path.

Only local (or mounted) paths are read here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from include.contract.errors import PipelineError
from include.contract.offsets import PositionMap, positions_from_json

_EPOCH_DIR = re.compile(r"^epoch=(\d+)$")
T = TypeVar("T")


class CheckpointError(PipelineError, RuntimeError):
    """A checkpoint file exists but cannot be read; the message names the file."""


def _read_log_file(path: Path) -> PositionMap:
    """The Kafka source offsets in an ``offsets/N`` or ``sources/0/0`` file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint file: {exc}") from exc
    # offsets/N: "v1", batch metadata, then one line per source. sources/0/0 has
    # a binary length prefix before "v1". The source's offsets are the last line.
    lines = [ln.strip("\x00 \t") for ln in text.splitlines() if ln.strip("\x00 \t")]
    if len(lines) < 2 or not lines[-1].startswith("{"):
        raise CheckpointError(f"{path}: not a Kafka offsets log entry (expected a JSON last line)")
    try:
        return positions_from_json(json.loads(lines[-1]))
    except (ValueError, AttributeError, TypeError) as exc:
        raise CheckpointError(f"{path}: malformed Kafka offsets: {exc}") from exc


def batch_ids(folder: Path) -> list[int]:
    """The batch ids of a checkpoint's ``offsets`` or ``commits`` folder, in order."""
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


@dataclass(frozen=True)
class CheckpointState:
    """Where one checkpoint stands."""

    path: Path
    initial: PositionMap | None
    last_committed_batch: int | None
    committed: PositionMap | None
    pending_batch: int | None
    pending: PositionMap | None

    @property
    def position(self) -> PositionMap | None:
        """Where the next new batch will start: the last committed end, else the initial offsets."""
        return self.committed if self.committed is not None else self.initial


def batch_progress(path: Path) -> tuple[int | None, int | None] | None:
    """``(last committed batch, first pending batch after it)`` of the checkpoint at ``path``.

    ``None`` if no query ever started there. Independent of the source, so
    the Kafka and the Delta-source checkpoints are read alike.
    """
    path = Path(path)
    if not (path / "metadata").exists():
        return None
    offsets = batch_ids(path / "offsets")
    commits = set(batch_ids(path / "commits"))
    committed_ids = [b for b in offsets if b in commits]
    last = committed_ids[-1] if committed_ids else None
    pending_ids = [b for b in offsets if b not in commits and (last is None or b > last)]
    return last, pending_ids[0] if pending_ids else None


def read_state(path: Path) -> CheckpointState | None:
    """The state of the Kafka-source checkpoint at ``path``; ``None`` if no query ever started there."""
    path = Path(path)
    progress = batch_progress(path)
    if progress is None:
        return None
    last, pending = progress
    initial_file = path / "sources" / "0" / "0"
    initial = _read_log_file(initial_file) if initial_file.exists() else None
    return CheckpointState(
        path=path,
        initial=initial,
        last_committed_batch=last,
        committed=_read_log_file(path / "offsets" / str(last)) if last is not None else None,
        pending_batch=pending,
        pending=_read_log_file(path / "offsets" / str(pending)) if pending is not None else None,
    )


def batch_offsets(path: Path, batch_id: int) -> PositionMap | None:
    """End offsets of ``batch_id`` (``offsets/<batch_id>``), or ``None`` if there is none."""
    f = Path(path) / "offsets" / str(batch_id)
    return _read_log_file(f) if f.exists() else None


def initial_offsets(path: Path) -> PositionMap | None:
    """The offsets the query in ``path`` started from (``sources/0/0``)."""
    f = Path(path) / "sources" / "0" / "0"
    return _read_log_file(f) if f.exists() else None


def _log_entry_damage(path: Path, *, binary_prefix: bool = False) -> str | None:
    """Why Spark could not parse the metadata-log entry ``path`` ("v1" then JSON lines), or ``None``."""
    try:
        data = path.read_bytes()
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


def damage(path: Path) -> str | None:
    """Why Spark could not resume the checkpoint at ``path``, naming the file and what is wrong; ``None`` if whole.

    Checks what a restart reads: ``metadata``, the newest two ``offsets``
    entries, the newest ``commits`` entry and ``sources/0/0``. A truncated or
    garbled file (a full disk, a bad copy) makes Spark fail on every start.
    """
    path = Path(path)
    meta = path / "metadata"
    if meta.exists():
        try:
            json.loads(meta.read_text(encoding="utf-8").strip().splitlines()[0])
        except (OSError, ValueError, IndexError) as exc:
            return f"{meta}: not the query's JSON metadata ({exc})"
    offsets = batch_ids(path / "offsets")
    for batch in offsets[-2:]:
        why = _log_entry_damage(path / "offsets" / str(batch))
        if why:
            return why
    commits = batch_ids(path / "commits")
    if commits:
        why = _log_entry_damage(path / "commits" / str(commits[-1]))
        if why:
            return why
    source = path / "sources" / "0" / "0"
    if source.exists():
        return _log_entry_damage(source, binary_prefix=True)
    return None


def epoch_dirs(root: Path) -> dict[int, Path]:
    """``{epoch: folder}`` for every ``epoch=N`` folder under a pipeline's checkpoint root."""
    root = Path(root)
    if not root.is_dir():
        return {}
    found = {}
    for p in root.iterdir():
        m = _EPOCH_DIR.match(p.name)
        if m and p.is_dir():
            found[int(m.group(1))] = p
    return found


def read_epochs(root: Path, read: Callable[[Path], T]) -> tuple[dict[int, T | None], dict[int, str]]:
    """Each epoch folder under ``root`` read with ``read``, and why the damaged ones cannot be resumed.

    A damaged checkpoint (see :func:`damage`) reads as ``None``, like an empty
    one: the table is the source of truth, so the job starts a new epoch where
    the table stands, and the reason names the file and what was wrong.
    """
    states: dict[int, T | None] = {}
    damaged: dict[int, str] = {}
    for epoch, folder in epoch_dirs(root).items():
        why = damage(folder)
        if why is None:
            try:
                states[epoch] = read(folder)
                continue
            except CheckpointError as exc:
                why = str(exc)
        states[epoch], damaged[epoch] = None, why
    return states, damaged


def epoch_dir(root: Path, epoch: int) -> Path:
    """The checkpoint folder of ``epoch`` under ``root``."""
    return Path(root) / f"epoch={epoch}"
