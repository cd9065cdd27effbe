"""Where the transform stands: silver's batch commit record, its position in bronze, and how it is read back.

Pure data and rules, shared by both sides: the Spark job
``spark_jobs/bronze_to_silver.py`` writes a :class:`SilverCommit` with each
batch and its position as a txn action (:func:`silver_txn_version`); the
Airflow tasks (``include/readers/delta_progress.py``, ``include/contract/continuity.py``)
and the job read where silver stands with :func:`resolve_silver_stand`.
Nothing here imports Spark.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from include.contract.errors import ContractError
from include.contract.jobs import SILVER_APP_PREFIX

#: ``userMetadata`` marker of a silver batch commit, and of a silver schema change.
SILVER_KIND = "kde-silver"
SCHEMA_KIND = "kde-silver-schema"
#: ``userMetadata`` marker of the commit that applies a source table's truncate (change events).
TRUNCATE_KIND = "kde-silver-truncate"
#: What a batch did with each record it read; they add up to ``read``.
#: ``skipped``: change events that are no row change (``transform.envelope``), such as the tombstone after a
#: delete.
COUNT_KEYS = ("upserted", "deleted", "quarantined", "superseded", "replayed", "skipped")


@dataclass(frozen=True)
class BronzePosition:
    """A place in the bronze table's log, as the Delta streaming source counts it.

    ``index`` -1 means "before the first file of ``version``": every version
    before it has been read whole. A larger index means part of ``version`` has.
    """

    version: int
    index: int = -1

    def to_json(self) -> dict[str, int]:
        return {"version": self.version, "index": self.index}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BronzePosition:
        return cls(int(data["version"]), int(data.get("index", -1)))


@dataclass(frozen=True)
class SilverCommit:
    """What one transform micro-batch did, written with it as the silver commit's ``userMetadata``.

    Every batch makes exactly one silver commit (a MERGE, or a properties-only
    commit when nothing changed silver), so the commits chain over the bronze
    log: each ``bronze_start`` is the previous ``bronze_end``.
    """

    pipeline: str
    run_id: str
    epoch: int
    batch_id: int
    bronze_start: BronzePosition
    bronze_end: BronzePosition
    read: int
    counts: dict[str, int]
    quarantine_fields: dict[str, int]
    fields_added: tuple[dict[str, str], ...] = ()
    fields_ignored: dict[str, str] | None = None
    #: Distinct field names the batch left out of silver, named in ``fields_ignored`` or not.
    fields_unknown: int | None = None
    version: int | None = None
    #: The registry schema the batch read values with: ``{subject, version, id}`` (absent for other formats).
    value_schema: dict[str, Any] | None = None
    #: The route whose silver table this is (a routed transform), or ``None``.
    route: str | None = None
    #: Where the batch's bronze records went across the routes (:class:`~include.contract.routes.RoutingAccount`'s
    #: JSON), the same in every route's commit of the batch; ``None`` without routes.
    routing: dict[str, Any] | None = None

    @property
    def accounted(self) -> int:
        """Records the batch says where they went; equals ``read`` when nothing is lost."""
        return sum(self.counts.get(k, 0) for k in COUNT_KEYS)

    def to_user_metadata(self) -> str:
        return json.dumps(
            {
                "kind": SILVER_KIND,
                "pipeline": self.pipeline,
                "run_id": self.run_id,
                "epoch": self.epoch,
                "batch_id": self.batch_id,
                "bronze_start": self.bronze_start.to_json(),
                "bronze_end": self.bronze_end.to_json(),
                "read": self.read,
                "counts": self.counts,
                "quarantine_fields": self.quarantine_fields,
                "fields_added": list(self.fields_added),
                "fields_ignored": self.fields_ignored or {},
                **({"fields_unknown": self.fields_unknown} if self.fields_unknown else {}),
                **({"value_schema": self.value_schema} if self.value_schema else {}),
                **({"route": self.route, "routing": self.routing} if self.route is not None else {}),
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_user_metadata(cls, text: str | None, *, version: int | None = None) -> SilverCommit | None:
        """The commit's record, or ``None`` for commits that are not transform batches."""
        if not text or not text.startswith("{"):
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("kind") != SILVER_KIND:
            return None
        return cls(
            pipeline=data["pipeline"],
            run_id=data["run_id"],
            epoch=int(data["epoch"]),
            batch_id=int(data["batch_id"]),
            bronze_start=BronzePosition.from_json(data["bronze_start"]),
            bronze_end=BronzePosition.from_json(data["bronze_end"]),
            read=int(data["read"]),
            counts={k: int(v) for k, v in data["counts"].items()},
            quarantine_fields={k: int(v) for k, v in data.get("quarantine_fields", {}).items()},
            fields_added=tuple(data.get("fields_added", ())),
            fields_ignored=data.get("fields_ignored") or {},
            fields_unknown=int(data["fields_unknown"]) if data.get("fields_unknown") is not None else None,
            version=version,
            value_schema=data.get("value_schema"),
            route=data.get("route"),
            routing=data.get("routing"),
        )


# --------------------------------------------------------------------------- where silver stands

#: Bits of a silver txn version that hold the batch id; the bronze version sits above them.
BATCH_BITS = 24
MAX_BATCH_ID = (1 << BATCH_BITS) - 1


def silver_txn_version(bronze_version: int, batch_id: int) -> int:
    """``bronze_version`` (the version the next batch reads) and the batch id in one txn version.

    Within an epoch batch ids only grow and the bronze version never falls, so
    the packed value only grows: Delta's rule for one app id.
    """
    if not 0 <= batch_id <= MAX_BATCH_ID:
        raise ContractError(
            f"batch id {batch_id} does not fit silver's position record (at most {MAX_BATCH_ID} batches per "
            "epoch); move the transform's checkpoint folder (tables.transform_checkpoint_root) aside: the next "
            "run starts a new epoch where silver stands"
        )
    if bronze_version < 0 or bronze_version >= 1 << (63 - BATCH_BITS):
        raise ContractError(f"bronze version {bronze_version} does not fit silver's position record")
    return (bronze_version << BATCH_BITS) | batch_id


@dataclass(frozen=True)
class SilverRestore:
    """A RESTORE of silver committed after the transform's last batch: it undid what those batches did.

    ``bronze_from`` is where silver stood in bronze at the restored version
    (``None`` when the log no longer says); the transform re-reads bronze from
    there in a new epoch, and classify leaves what silver still holds as it is.
    """

    version: int
    restored_to: str
    bronze_from: BronzePosition | None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "restored_to": self.restored_to,
            "bronze_from": self.bronze_from.to_json() if self.bronze_from else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SilverRestore:
        start = data.get("bronze_from")
        return cls(
            int(data["version"]), str(data["restored_to"]), BronzePosition.from_json(start) if start else None
        )


@dataclass(frozen=True)
class SilverStand:
    """Where the transform stands: its epoch, last batch and the bronze version the next batch reads.

    ``commit`` is the batch's full record while the log still holds its commit;
    ``source`` says where the stand was read from: ``history`` (a table written
    before positions were kept in its state), ``state`` (the commit was removed
    by log cleanup) or ``both``.
    """

    epoch: int
    batch_id: int
    bronze_end: BronzePosition
    source: str
    commit: SilverCommit | None = None
    restore: SilverRestore | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "batch_id": self.batch_id,
            "bronze_end": self.bronze_end.to_json(),
            "source": self.source,
            "restore": self.restore.to_json() if self.restore else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SilverStand:
        restore = data.get("restore")
        return cls(
            int(data["epoch"]),
            int(data["batch_id"]),
            BronzePosition.from_json(data["bronze_end"]),
            str(data["source"]),
            restore=SilverRestore.from_json(restore) if restore else None,
        )

    @classmethod
    def from_txn(cls, epoch: int, version: int) -> SilverStand:
        """The stand a silver txn action records (no commit record)."""
        return cls(epoch, version & MAX_BATCH_ID, BronzePosition(version >> BATCH_BITS), "state")


def silver_epochs(app_ids: dict[str, int], pipeline: str) -> dict[int, int]:
    """Epoch -> txn version of the silver position actions among a table's txn actions."""
    prefix = f"{SILVER_APP_PREFIX}.{pipeline}.e"
    return {
        int(a[len(prefix) :]): v
        for a, v in app_ids.items()
        if a.startswith(prefix) and a[len(prefix) :].isdigit()
    }


def resolve_silver_stand(
    state: dict[int, int], newest: SilverCommit | None, history: Sequence[dict[str, Any]] = ()
) -> SilverStand | None:
    """Where the transform stands, from silver's txn actions (``state``, epoch -> version) and its newest batch commit.

    The one further along wins: a batch commit always carries its txn action,
    so history ahead of state means a table written before positions were
    kept in state (its next commit records them), and state ahead of history
    means log cleanup removed the commit. When both name the same batch they
    must agree on the bronze version, or the table is refused. ``history``
    (the log's newest entries, as Spark's or delta-rs's ``history()`` rows,
    back to the newest batch commit) shows a RESTORE after it
    (:class:`SilverRestore`): txn actions do not follow a RESTORE, files do.
    """
    stand = _stand(state, newest)
    if stand is None or not history:
        return stand
    return replace(stand, restore=_restore_after(stand, history))


def newest_silver_commit(
    history: Sequence[dict[str, Any]], *, at_or_before: int | None = None
) -> SilverCommit | None:
    """The newest transform batch commit among ``history()`` rows (Spark's or delta-rs's), optionally at or before a version."""
    for entry in sorted(history, key=lambda e: -int(e["version"])):
        version = int(entry["version"])
        if at_or_before is not None and version > at_or_before:
            continue
        commit = SilverCommit.from_user_metadata(entry.get("userMetadata"), version=version)
        if commit is not None:
            return commit
    return None


def silver_history_covered(history: Sequence[dict[str, Any]]) -> bool:
    """Whether ``history`` (the newest entries) reaches back far enough for :func:`resolve_silver_stand`.

    It must hold the newest batch commit, and every version a RESTORE after
    it went back to; when the log holds no batch commit, all of it is needed.
    """
    commit = newest_silver_commit(history)
    if commit is None:
        return False
    newest = commit.version
    assert newest is not None  # newest_silver_commit gives its commit the version it was read at
    targets = [
        int(str(t))
        for e in history
        if int(e["version"]) > newest
        and str(e.get("operation") or "").upper() == "RESTORE"
        and (t := (e.get("operationParameters") or {}).get("version")) not in (None, "")
    ]
    return min(int(e["version"]) for e in history) <= min([newest, *targets])


def _restore_after(stand: SilverStand, history: Sequence[dict[str, Any]]) -> SilverRestore | None:
    """The newest RESTORE after the stand's batch commit that took batches away, with where silver then stood."""
    after = stand.commit.version if stand.commit is not None and stand.commit.version is not None else -1
    entries = sorted(history, key=lambda e: -int(e["version"]))
    for entry in entries:  # newest first: the newest RESTORE decides what silver holds
        if int(entry["version"]) <= after:
            return None
        if str(entry.get("operation") or "").upper() != "RESTORE":
            continue
        params = entry.get("operationParameters") or {}
        target = params.get("version")
        if target in (None, ""):
            return SilverRestore(int(entry["version"]), f"timestamp {params.get('timestamp')}", None)
        target = int(str(target))
        held = newest_silver_commit(entries, at_or_before=target)
        if held is not None and held.version == after:
            return None  # restored to a version that still holds the last batch: nothing of ours undone
        if held is None and stand.commit is None and target >= min(int(e["version"]) for e in entries):
            return None  # the batch is older than the whole log left, so every logged version holds it
        return SilverRestore(
            int(entry["version"]),
            f"version {target}",
            BronzePosition(held.bronze_end.version) if held else None,
        )
    return None


def _stand(state: dict[int, int], newest: SilverCommit | None) -> SilverStand | None:
    from_state = None
    if state:
        epoch = max(state)
        from_state = SilverStand.from_txn(epoch, state[epoch])
    if newest is None:
        return from_state
    from_history = SilverStand(newest.epoch, newest.batch_id, newest.bronze_end, "history", newest)
    if from_state is None:
        return from_history
    here, there = (from_state.epoch, from_state.batch_id), (newest.epoch, newest.batch_id)
    if here == there:
        if from_state.bronze_end.version != newest.bronze_end.version:
            raise ContractError(
                f"silver's state says epoch {newest.epoch} batch {newest.batch_id} ended at bronze version "
                f"{from_state.bronze_end.version}, its commit (version {newest.version}) says "
                f"{newest.bronze_end.version}; another writer has used the transform's app id"
            )
        return SilverStand(newest.epoch, newest.batch_id, newest.bronze_end, "both", newest)
    return from_state if here > there else from_history
