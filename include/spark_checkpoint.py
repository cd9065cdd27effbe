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
from dataclasses import dataclass
from pathlib import Path

from include.offsets import PositionMap, positions_from_json

_EPOCH_DIR = re.compile(r"^epoch=(\d+)$")


class CheckpointError(RuntimeError):
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


def epoch_dir(root: Path, epoch: int) -> Path:
    """The checkpoint folder of ``epoch`` under ``root``."""
    return Path(root) / f"epoch={epoch}"
