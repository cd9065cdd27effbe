"""One summary per job: what it wrote for a run, as a frozen dataclass with ``to_json``/``from_json``.

Pure Python, no I/O. A job checks its summary against its class before writing
it (so a summary the task side could not read fails in the job), and the task
reads it with the same class. A missing or mistyped field is a
:class:`~include.contract.errors.PipelineError` naming the job and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from include.contract.errors import PipelineError
from include.contract.json_values import JsonDict


def _need(
    data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], job: str, strict: bool = True
) -> Any:
    """``data[key]`` if it is a ``kind``; else an error naming the field, or (not ``strict``) ``None``."""
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind in (int, float, (int, float)):
        if not strict:
            return None
        expected = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise PipelineError(f"{job} summary: field {key!r} is {value!r}; expected {expected}")
    return value


@dataclass(frozen=True)
class IngestSummary:
    """What ``kafka_to_bronze`` wrote for a run (its summary file and the ingest task's XCom)."""

    run_id: str
    epoch: int | None
    rows: int
    commits: int
    batches: tuple[JsonDict, ...]
    bronze_version: int | None
    duration_s: float | None
    partitions: dict[str, dict[str, JsonDict]]
    checkpoint_rebuilt: JsonDict | None = None
    position_set: JsonDict | None = None
    #: The whole summary as the job wrote it (per-batch detail, phases, offsets), kept for the XCom.
    raw: JsonDict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, strict: bool = True) -> IngestSummary:
        """Read a summary; raises :class:`PipelineError` naming a missing or mistyped field.

        Not ``strict`` (the run's record, which must be written whatever a task
        left): such a field is ``None`` (``rows`` 0) instead.
        """
        job = "kafka_to_bronze"
        version = data.get("bronze_version")
        duration = _need(data, "duration_s", (int, float), job, strict)
        return cls(
            run_id=str(data.get("run_id") or ""),
            epoch=_need(data, "epoch", int, job, strict),
            rows=_need(data, "rows", int, job, strict) or 0,
            commits=int(data.get("commits") or 0),
            batches=tuple(_need(data, "batches", list, job, strict) or ()),
            bronze_version=int(version) if version is not None else None,
            duration_s=float(duration) if duration is not None else None,
            partitions=dict(data.get("partitions") or {}),
            checkpoint_rebuilt=data.get("checkpoint_rebuilt"),
            position_set=data.get("position_set"),
            raw=dict(data),
        )

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON data: what the job wrote, with this record's fields over it."""
        return {
            **self.raw,
            "run_id": self.run_id,
            "epoch": self.epoch,
            "rows": self.rows,
            "commits": self.commits,
            "batches": list(self.batches),
            "bronze_version": self.bronze_version,
            "duration_s": self.duration_s,
            "partitions": self.partitions,
            "checkpoint_rebuilt": self.checkpoint_rebuilt,
            "position_set": self.position_set,
        }


#: ``kind`` of a backfill's summary, which the ingest task returns in the ingest summary's place.
BACKFILL_KIND = "backfill"


@dataclass(frozen=True)
class BackfillSummary:
    """What ``kafka_backfill`` re-read and inserted."""

    run_id: str
    read: int
    inserted: int
    present: int
    ranges: tuple[JsonDict, ...]
    bronze_version: int | None
    duration_s: float | None
    notes: tuple[str, ...] = ()
    #: Rows inserted, commits (0 or 1) and per-partition ranges, in the ingest summary's shape.
    rows: int = 0
    commits: int = 0
    partitions: dict[str, dict[str, JsonDict]] = field(default_factory=dict)
    raw: JsonDict = field(default_factory=dict, repr=False, compare=False)

    #: A backfill moves no position and starts no epoch; the run's record reads these of either summary.
    epoch: ClassVar[None] = None
    position_set: ClassVar[None] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, strict: bool = True) -> BackfillSummary:
        """Read a summary; raises :class:`PipelineError` naming a missing or mistyped field (see
        :meth:`IngestSummary.from_json` for ``strict``)."""
        job = "kafka_backfill"
        version = data.get("bronze_version")
        duration = _need(data, "duration_s", (int, float), job, strict)
        return cls(
            run_id=str(data.get("run_id") or ""),
            read=_need(data, "read", int, job, strict) or 0,
            inserted=_need(data, "inserted", int, job, strict) or 0,
            present=_need(data, "present", int, job, strict) or 0,
            ranges=tuple(_need(data, "ranges", list, job, strict) or ()),
            bronze_version=int(version) if version is not None else None,
            duration_s=float(duration) if duration is not None else None,
            notes=tuple(str(n) for n in data.get("notes") or ()),
            rows=int(data.get("rows") or 0),
            commits=int(data.get("commits") or 0),
            partitions=dict(data.get("partitions") or {}),
            raw=dict(data),
        )

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON data, marked as a backfill's."""
        return {
            **self.raw,
            "kind": BACKFILL_KIND,
            "run_id": self.run_id,
            "read": self.read,
            "inserted": self.inserted,
            "present": self.present,
            "ranges": list(self.ranges),
            "bronze_version": self.bronze_version,
            "duration_s": self.duration_s,
            "notes": list(self.notes),
            "rows": self.rows,
            "commits": self.commits,
            "partitions": self.partitions,
        }


def ingest_step_summary(data: Mapping[str, Any], *, strict: bool = True) -> IngestSummary | BackfillSummary:
    """The ingest task's summary: a backfill's when it says so, else an ingestion's."""
    kind = BackfillSummary if data.get("kind") == BACKFILL_KIND else IngestSummary
    return kind.from_json(data, strict=strict)


@dataclass(frozen=True)
class TransformSummary:
    """Where the records a transform read went (``bronze_to_silver``)."""

    run_id: str
    epoch: int | None
    read: int | None
    upserted: int | None
    deleted: int | None
    quarantined: int | None
    superseded: int | None
    silver_version: int | None
    duration_s: float | None
    replayed: int = 0
    #: Change events that are no row change (``transform.envelope``): the tombstone after a delete, ...
    skipped: int = 0
    quarantine_fields: dict[str, int] = field(default_factory=dict)
    fields_added: tuple[JsonDict, ...] = ()
    #: Field -> why it was ignored.
    fields_ignored: dict[str, str] = field(default_factory=dict)
    #: Distinct field names left out of silver, named in ``fields_ignored`` or not.
    fields_unknown: int = 0
    checkpoint_rebuilt: JsonDict | None = None
    value_schema: JsonDict | None = None
    #: A ``replay_quarantine`` run's replay: ``{selected, outcomes, silver_version, quarantine_version, selection}``.
    replay: JsonDict | None = None
    #: Silver rows deleted by source truncates (change events).
    truncated_rows: int = 0
    #: Silver's columns after the run, ``{name, type}`` (Spark SQL types); empty when bronze did not exist yet.
    silver_columns: tuple[JsonDict, ...] = ()
    raw: JsonDict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, strict: bool = True) -> TransformSummary:
        """Read a summary; raises :class:`PipelineError` naming a missing or mistyped field (see
        :meth:`IngestSummary.from_json` for ``strict``: such a count is ``None``)."""
        job = "bronze_to_silver"
        version = data.get("silver_version")
        duration = _need(data, "duration_s", (int, float), job, strict)
        return cls(
            run_id=str(data.get("run_id") or ""),
            epoch=_need(data, "epoch", int, job, strict),
            read=_need(data, "read", int, job, strict),
            upserted=_need(data, "upserted", int, job, strict),
            deleted=_need(data, "deleted", int, job, strict),
            quarantined=_need(data, "quarantined", int, job, strict),
            superseded=_need(data, "superseded", int, job, strict),
            silver_version=int(version) if version is not None else None,
            duration_s=float(duration) if duration is not None else None,
            replayed=int(data.get("replayed") or 0),
            skipped=int(data.get("skipped") or 0),
            quarantine_fields=dict(data.get("quarantine_fields") or {}),
            fields_added=tuple(data.get("fields_added") or ()),
            fields_ignored=dict(data.get("fields_ignored") or {}),
            fields_unknown=int(data.get("fields_unknown") or 0),
            checkpoint_rebuilt=data.get("checkpoint_rebuilt"),
            value_schema=data.get("value_schema"),
            replay=data.get("replay"),
            truncated_rows=int(data.get("truncated_rows") or 0),
            silver_columns=tuple(data.get("silver_columns") or ()),
            raw=dict(data),
        )

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON data: what the job wrote, with this record's fields over it."""
        out = {**self.raw}
        for f in fields(self):
            value = getattr(self, f.name)
            optional = f.default is not MISSING or f.default_factory is not MISSING
            # An optional field the job left out stays out: readers tell "absent" from "zero" (replayed).
            if f.name == "raw" or optional and f.name not in self.raw and not value:
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class RoutedTransformSummary:
    """What a routed transform did (``bronze_to_silver`` with ``transform.routes``): each route's
    :class:`TransformSummary`, the records no route took, and each batch's routing account."""

    run_id: str
    epoch: int | None
    routes: dict[str, TransformSummary]
    #: ``{policy, records, quarantined}``: the records no route took, by ``transform.unrouted``.
    unrouted: JsonDict
    bronze_read: int | None
    duration_s: float | None
    accounts: tuple[JsonDict, ...] = ()
    raw: JsonDict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, strict: bool = True) -> RoutedTransformSummary:
        """Read a summary; raises :class:`PipelineError` naming a missing or mistyped field (a route's, by its
        name); not ``strict``, see :meth:`IngestSummary.from_json`."""
        job = "bronze_to_silver"
        routes = _need(data, "routes", dict, job, strict) or {}
        read: dict[str, TransformSummary] = {}
        for name, summary in routes.items():
            if not isinstance(summary, Mapping):
                raise PipelineError(
                    f"{job} summary: route {name!r} is {summary!r}; expected a summary object"
                )
            try:
                read[str(name)] = TransformSummary.from_json(summary, strict=strict)
            except PipelineError as exc:
                raise PipelineError(f"{job} summary of route {name!r}: {exc}") from None
        duration = _need(data, "duration_s", (int, float), job, strict)
        return cls(
            run_id=str(data.get("run_id") or ""),
            epoch=_need(data, "epoch", int, job, strict),
            routes=read,
            unrouted=dict(_need(data, "unrouted", dict, job, strict) or {}),
            bronze_read=_need(data, "bronze_read", int, job, strict),
            duration_s=float(duration) if duration is not None else None,
            accounts=tuple(data.get("accounts") or ()),
            raw=dict(data),
        )

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON data: what the job wrote, with this record's fields over it."""
        return {
            **self.raw,
            "run_id": self.run_id,
            "epoch": self.epoch,
            "routes": {name: s.to_json() for name, s in self.routes.items()},
            "unrouted": self.unrouted,
            "bronze_read": self.bronze_read,
            "duration_s": self.duration_s,
            "accounts": list(self.accounts),
        }


@dataclass(frozen=True)
class MaintainSummary:
    """What ``maintain_tables`` did to each table: files and bytes before and after, or why it was skipped."""

    run_id: str
    tables: dict[str, JsonDict]
    raw: JsonDict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MaintainSummary:
        """Read a summary; raises :class:`PipelineError` naming a missing or mistyped field."""
        return cls(
            run_id=str(data.get("run_id") or ""),
            tables=dict(_need(data, "tables", dict, "maintain_tables")),
            raw=dict(data),
        )

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON data."""
        return {**self.raw, "run_id": self.run_id, "tables": self.tables}
