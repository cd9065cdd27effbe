"""Where the bronze table stands, kept in the table's *state*, and the one reader of it.

A commit's ``userMetadata`` is history: Delta's expired-log cleanup deletes
old commits, and a log checkpoint never carries ``commitInfo``. So every
bronze commit also writes Delta ``txn`` (SetTransaction) actions, which are
part of the table's state and carried by every checkpoint forever, the way
kafka-delta-ingest keeps its offsets:

====================================================  ==================================
app id                                                version
====================================================  ==================================
``kafka-delta-elt:<pipeline>:bronze:next:<topic>:<p>``  the partition's next offset
``kafka-delta-elt:<pipeline>:bronze:partitions:<t>``    partitions of topic ``t`` the table knows
``kafka-delta-elt:<pipeline>:bronze:topic-id:<t>``      56-bit fingerprint of ``t``'s Kafka topic id
``kafka-delta-elt:<pipeline>:bronze:epoch``             checkpoint epoch of the last progress commit
``kafka-delta-elt:<pipeline>:bronze:batch``             its batch id (+1, so an initial commit is 0)
``kafka-delta-elt:<pipeline>:bronze:commit-version``    the table version that commit was read at + 1
====================================================  ==================================

Kafka topic names hold only ``[A-Za-z0-9._-]``, so ``:`` separates safely.

:func:`resolve` is the single decision both the Airflow side (delta-rs) and
the Spark job (the JVM's snapshot) make from what they read: the state, the
newest commits of the history (for detail, and to see a RESTORE), and whether
the table holds rows. It never falls back to "no progress yet" while the
table has rows, and it notices a RESTORE that took progress away. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from include.contract.jobs import bronze_app_id, bronze_app_prefix
from include.contract.offsets import BronzeCommit, OffsetError, PositionMap, flatten

#: ``app id -> version`` of the table's state, or ``None`` when it has none for that id.
Probe = Callable[[str], "int | None"]


class PositionUnknownError(OffsetError):
    """The bronze table holds rows but where it stands cannot be established; the run must not start."""


def _prefix(pipeline: str) -> str:
    return bronze_app_prefix(pipeline)


def next_app_id(pipeline: str, topic: str, partition: int) -> str:
    """App id whose version is the partition's next offset."""
    return f"{_prefix(pipeline)}:next:{topic}:{partition}"


def partitions_app_id(pipeline: str, topic: str) -> str:
    return f"{_prefix(pipeline)}:partitions:{topic}"


def topic_id_app_id(pipeline: str, topic: str) -> str:
    return f"{_prefix(pipeline)}:topic-id:{topic}"


def epoch_app_id(pipeline: str) -> str:
    return f"{_prefix(pipeline)}:epoch"


def batch_app_id(pipeline: str) -> str:
    return f"{_prefix(pipeline)}:batch"


def commit_version_app_id(pipeline: str) -> str:
    return f"{_prefix(pipeline)}:commit-version"


def topic_id_fingerprint(topic_id: str) -> int:
    """A txn version (non-negative long) standing for a Kafka topic id."""
    return int.from_bytes(hashlib.sha256(topic_id.encode()).digest()[:7], "big")


def stand_actions(
    *,
    pipeline: str,
    epoch: int,
    batch_id: int,
    read_version: int,
    next_offsets: PositionMap,
    topic_ids: Mapping[str, str],
) -> list[tuple[str, int]]:
    """The ``(app id, version)`` txn actions a bronze commit writes beside its rows.

    ``batch_id`` is -1 for a commit that only fixes a starting position.
    ``read_version`` is the table version the commit's transaction read
    (-1 for a new table): a RESTORE committed after it undid this commit.
    The epoch's own app id (:func:`include.contract.jobs.bronze_app_id`) is kept too,
    so Delta's own idempotency check sees the batch.
    """
    actions = [
        (epoch_app_id(pipeline), epoch),
        (batch_app_id(pipeline), batch_id + 1),
        (commit_version_app_id(pipeline), read_version + 1),
    ]
    if batch_id >= 0:
        actions.append((bronze_app_id(pipeline, epoch), batch_id))
    for topic, parts in sorted(next_offsets.items()):
        actions.append((partitions_app_id(pipeline, topic), max(parts) + 1 if parts else 0))
        actions += [(next_app_id(pipeline, topic, p), int(o)) for p, o in sorted(parts.items())]
    for topic, tid in sorted(topic_ids.items()):
        actions.append((topic_id_app_id(pipeline, topic), topic_id_fingerprint(tid)))
    return actions


@dataclass(frozen=True)
class StateStand:
    """What the table's txn actions say: the last progress commit and the positions."""

    epoch: int
    batch_id: int
    commit_version: int
    next_offsets: PositionMap
    #: ``topic -> fingerprint`` of the Kafka topic id the table read.
    topic_id_fingerprints: dict[str, int] = field(default_factory=dict)


def read_state(probe: Probe, pipeline: str, topics: Mapping[str, Iterable[int]]) -> StateStand | None:
    """The stand recorded in the table's state for ``topics`` (``{topic: partitions}`` to look at).

    Partitions beyond those given are looked up too, as far as the table
    recorded partitions for the topic. ``None``: the table's state holds no
    stand of this pipeline (a new table, or one written before stands were kept).
    """
    epoch = probe(epoch_app_id(pipeline))
    if epoch is None:
        return None
    batch = probe(batch_app_id(pipeline))
    version = probe(commit_version_app_id(pipeline))
    if batch is None or version is None:
        raise PositionUnknownError(
            f"the bronze table's state records epoch {epoch} of pipeline {pipeline!r} without its batch "
            "or commit version: it was written by another tool, not by this pipeline"
        )
    positions: PositionMap = {}
    fingerprints: dict[str, int] = {}
    for topic, parts in sorted(topics.items()):
        known = probe(partitions_app_id(pipeline, topic)) or 0
        for p in sorted(set(parts) | set(range(known))):
            offset = probe(next_app_id(pipeline, topic, p))
            if offset is not None:
                positions.setdefault(topic, {})[p] = offset
        fp = probe(topic_id_app_id(pipeline, topic))
        if fp is not None:
            fingerprints[topic] = fp
    return StateStand(int(epoch), int(batch) - 1, int(version) - 1, positions, fingerprints)


@dataclass(frozen=True)
class HistoryEntry:
    """One commit of the newest history: what :func:`resolve` needs of it."""

    version: int
    operation: str | None
    parameters: Mapping[str, object]
    user_metadata: str | None


def history_entries(raw: list[dict[str, Any]]) -> list[HistoryEntry]:
    """delta-rs ``history()`` rows (or Spark's, as dicts) as :class:`HistoryEntry`, newest first."""
    return [
        HistoryEntry(
            int(e["version"]),
            e.get("operation"),
            dict(e.get("operationParameters") or {}),
            e.get("userMetadata"),
        )
        for e in sorted(raw, key=lambda e: -int(e["version"]))
    ]


@dataclass(frozen=True)
class Restore:
    """A RESTORE committed after the table's last progress commit."""

    version: int
    restored_to: str
    #: The newest progress commit the restored table still holds, if history still has it.
    restored_commit: tuple[int, BronzeCommit] | None


@dataclass(frozen=True)
class Stand:
    """Where the bronze table stands: the verdict every reader acts on.

    ``commit`` is the last progress commit (from history when it is still
    there, else rebuilt from the state with no ranges); ``source`` says which.
    ``restore`` is set when a RESTORE took progress away since: the position
    is then not to be used until an operator chooses (see the preflight).
    """

    commit: BronzeCommit
    commit_version: int | None
    source: str
    restore: Restore | None = None

    @property
    def next_offsets(self) -> PositionMap:
        return self.commit.next_offsets

    @property
    def epoch(self) -> int:
        return self.commit.epoch


def recorded_partitions(app_ids: Iterable[str], pipeline: str) -> list[tuple[str, int]]:
    """The ``(topic, partition)`` pairs whose next offset the state records, from a full list of app ids."""
    head = f"{_prefix(pipeline)}:next:"
    found = []
    for app in app_ids:
        if app.startswith(head):
            topic, _, partition = app[len(head) :].rpartition(":")
            if topic and partition.isdigit():
                found.append((topic, int(partition)))
    return sorted(found)


def progress_commit(entry: HistoryEntry, pipeline: str) -> BronzeCommit | None:
    """The bronze progress record of ``pipeline`` that ``entry`` carries, if any."""
    commit = BronzeCommit.from_user_metadata(entry.user_metadata, version=entry.version)
    return commit if commit is not None and commit.pipeline == pipeline else None


def resolve(
    *,
    pipeline: str,
    state: StateStand | None,
    history: Sequence[HistoryEntry],
    has_rows: bool,
    txn_seen: Callable[[BronzeCommit], bool],
    path: str,
) -> Stand | None:
    """Where the table at ``path`` stands, from its state and its newest ``history`` (newest first).

    ``txn_seen(commit)``: the table's state holds the txn
    of that commit's epoch (metadata copied by another writer has none).
    Returns ``None`` only for a table with no progress and no rows; raises
    :class:`PositionUnknownError` when the table has rows but no readable
    position.
    """
    newest: tuple[int, BronzeCommit] | None = None
    for entry in history:
        commit = progress_commit(entry, pipeline)
        if commit is not None and txn_seen(commit):
            newest = (entry.version, commit)
            break

    if state is None:
        if newest is not None:
            # Written before stands were kept in the state: history is all there is.
            return Stand(
                newest[1], newest[0], "history", _restore_after(newest[0], history, pipeline, txn_seen)
            )
        if has_rows:
            raise PositionUnknownError(
                f"bronze table {path} holds rows but neither its state nor its retained history records "
                f"where pipeline {pipeline!r} stands (Delta's log cleanup removed the commits that did, "
                "or another tool wrote the rows)"
            )
        return None

    if newest is not None and (newest[1].epoch, newest[1].batch_id) == (state.epoch, state.batch_id):
        mine, theirs = flatten(newest[1].next_offsets), flatten(state.next_offsets)
        wrong = [
            f"{t}-{p} commit {o} vs state {theirs.get((t, p))}"
            for (t, p), o in sorted(mine.items())
            if (t, p) in theirs and theirs[(t, p)] != o
        ]
        if wrong:
            raise PositionUnknownError(
                f"bronze table {path}: the state and Delta version {newest[0]} disagree on where the table "
                "stands: " + "; ".join(wrong[:10])
            )
        commit, source, version = newest[1], "history", newest[0]
    else:
        commit = BronzeCommit(
            pipeline=pipeline,
            run_id="(table state)",
            run_type="state",
            epoch=state.epoch,
            batch_id=state.batch_id,
            ranges=(),
            next_offsets=state.next_offsets,
            extra={"topic_id_fingerprints": dict(state.topic_id_fingerprints)},
        )
        source, version = "state", state.commit_version
    return Stand(commit, version, source, _restore_after(state.commit_version, history, pipeline, txn_seen))


def _restore_after(
    version: int, history: Sequence[HistoryEntry], pipeline: str, txn_seen: Callable[[BronzeCommit], bool]
) -> Restore | None:
    """The newest RESTORE committed after ``version``, with the progress commit it went back to."""
    for entry in history:  # newest first
        if entry.version <= version:
            return None
        if (entry.operation or "").upper() != "RESTORE":
            continue
        target = entry.parameters.get("version")
        restored_to = (
            f"version {target}"
            if target not in (None, "")
            else f"timestamp {entry.parameters.get('timestamp')}"
        )
        found = None
        if target not in (None, ""):
            for older in history:
                if older.version <= int(str(target)):
                    commit = progress_commit(older, pipeline)
                    if commit is not None and txn_seen(commit):
                        found = (older.version, commit)
                        break
        return Restore(entry.version, restored_to, found)
    return None


def recorded_topic_ids(commit: BronzeCommit, current: Mapping[str, str]) -> dict[str, str]:
    """The Kafka topic ids ``commit`` saw, comparable with ``current`` (Kafka's ids now).

    A commit from history names them; a stand rebuilt from the state has
    only fingerprints, which stand for the current id when they match it and
    for an unknown other id when they do not.
    """
    named = {str(k): str(v) for k, v in (commit.extra.get("topic_ids") or {}).items()}
    for topic, fp in (commit.extra.get("topic_id_fingerprints") or {}).items():
        now = current.get(topic)
        if now and topic_id_fingerprint(now) == int(fp):
            named[topic] = now
        else:
            named[topic] = f"(fingerprint {int(fp):014x})"
    return named
