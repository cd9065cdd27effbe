"""What a transform run did: each micro-batch's result and the run's summary, as the job writes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from include.contract.silver_stand import (
    COUNT_KEYS,
    BronzePosition,
    SilverCommit,
)


@dataclass
class BatchResult:
    """What one micro-batch did, for the run summary."""

    batch_id: int
    commit: SilverCommit | None
    skipped_replay: bool
    duration_s: float
    #: Seconds per step of the writer, in order, for profiling.
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class TransformSummary:
    """The machine-readable result of one transform run."""

    pipeline: str
    run_id: str
    epoch: int
    checkpoint_rebuilt: dict[str, Any] | None
    start: BronzePosition
    batches: list[BatchResult] = field(default_factory=list)
    fields_added: list[dict[str, Any]] = field(default_factory=list)
    #: Silver rows deleted by source truncates (change events), in commits of their own.
    truncated_rows: int = 0
    #: What a ``replay_quarantine`` run's replay did (:class:`spark_jobs.quarantine_replay.ReplayResult`).
    replay: dict[str, Any] | None = None
    duration_s: float = 0.0
    #: The registry schema values were read with (``{subject, version, id, type}``); ``None`` otherwise.
    value_schema: dict[str, Any] | None = None
    #: Seconds per phase of the run (silver's last commit and plan, silver's schema, the stream).
    phases_s: dict[str, float] = field(default_factory=dict)
    #: Ignored field names the summary names (``transform.limits.field_names``).
    field_names_shown: int = 20
    #: Silver's columns after the run (``{name, type}``, Spark SQL types), for lineage's schema facet.
    silver_columns: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        done = [b.commit for b in self.batches if b.commit is not None]
        totals = {k: sum(c.counts.get(k, 0) for c in done) for k in COUNT_KEYS}
        qfields: dict[str, int] = {}
        ignored: dict[str, str] = {}
        for c in done:
            for k, v in c.quarantine_fields.items():
                qfields[k] = qfields.get(k, 0) + v
            ignored.update(c.fields_ignored or {})
        # As many names as one batch records (transform.limits.field_names), however many batches ran.
        ignored = dict(sorted(ignored.items())[: self.field_names_shown])
        versions = [c.version for c in done if c.version is not None]
        return {
            "pipeline": self.pipeline,
            "run_id": self.run_id,
            "epoch": self.epoch,
            "checkpoint_rebuilt": self.checkpoint_rebuilt,
            "bronze_start": self.start.to_json(),
            "bronze_end": done[-1].bronze_end.to_json() if done else self.start.to_json(),
            "read": sum(c.read for c in done),
            **totals,
            "quarantine_fields": qfields,
            "fields_added": self.fields_added,
            "fields_ignored": ignored,
            # The most distinct names one batch left out of silver: batches see the same names again.
            "fields_unknown": max((c.fields_unknown or 0 for c in done), default=0),
            "silver_version": max(versions) if versions else None,
            "silver_columns": self.silver_columns,
            "value_schema": self.value_schema,
            **({"truncated_rows": self.truncated_rows} if self.truncated_rows else {}),
            **({"replay": self.replay} if self.replay is not None else {}),
            "batches": [
                {
                    "batch_id": b.batch_id,
                    "skipped_replay": b.skipped_replay,
                    "silver_version": b.commit.version if b.commit else None,
                    "read": b.commit.read if b.commit else 0,
                    "counts": b.commit.counts if b.commit else {},
                    "duration_s": round(b.duration_s, 3),
                    "phases": {k: round(v, 3) for k, v in b.phases.items()},
                }
                for b in self.batches
            ],
            "duration_s": round(self.duration_s, 3),
            "phases_s": {k: round(v, 3) for k, v in self.phases_s.items()},
        }
