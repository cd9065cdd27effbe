"""The project's own OpenLineage facets, where no standard facet fits.

Each facet is an attrs class on OpenLineage's base facets, so the client
serialises it with ``_producer`` and ``_schemaURL`` like any other. Their JSON
Schema ships as ``docs/lineage-facets.schema.json`` (:data:`SCHEMA_ID`); its
``$defs`` are named after the classes. The keys a facet goes under in an event
start with ``kde_`` (:data:`KEYS`), so they never meet a standard facet's name.

Only :mod:`include.orchestration.lineage` imports this module, and only from
inside its functions: OpenLineage's client is loaded when a transport is set,
never while a DAG file is parsed.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attr
from openlineage.client.generated.base import RunFacet

#: The ``$id`` of docs/lineage-facets.schema.json; a facet's ``_schemaURL`` is this and its ``$defs`` entry.
SCHEMA_ID = "urn:kafka-delta-elt:openlineage-facets:1"


def _schema(name: str) -> str:
    return f"{SCHEMA_ID}#/$defs/{name}"


@attr.define
class KafkaOffsetsRunFacet(RunFacet):
    """The Kafka offsets a run's ingest (or backfill) step committed to bronze, per topic and partition:
    ``{topic: {partition: {"from": first offset, "until": one past the last, "rows": rows written}}}``."""

    kind: str
    rows: int
    commits: int
    epoch: int | None = None
    bronzeVersion: int | None = None  # noqa: N815 - OpenLineage's field naming
    partitions: dict[str, dict[str, dict[str, Any]]] = attr.field(factory=dict)
    _additional_skip_redact: ClassVar[list[str]] = ["kind", "rows", "commits", "epoch", "bronzeVersion", "partitions"]

    @staticmethod
    def _get_schema() -> str:
        return _schema("KafkaOffsetsRunFacet")


@attr.define
class TransformOutcomeRunFacet(RunFacet):
    """Where the bronze records a transform read went: each outcome's count, the silver version it ended
    at, and a ``replay_quarantine`` run's replay outcomes; with routes, the totals, each route's own and the
    records no route took."""

    read: int
    upserted: int
    deleted: int
    quarantined: int
    superseded: int
    replayed: int = 0
    skipped: int = 0
    truncatedRows: int = 0  # noqa: N815
    epoch: int | None = None
    silverVersion: int | None = None  # noqa: N815
    quarantineFields: dict[str, int] = attr.field(factory=dict)  # noqa: N815
    replay: dict[str, Any] | None = None
    #: A routed transform: each route's own outcome, by route name.
    routes: dict[str, dict[str, Any]] | None = None
    #: A routed transform: the records no route took (``{policy, records, quarantined}``).
    unrouted: dict[str, Any] | None = None
    _additional_skip_redact: ClassVar[list[str]] = [
        "read", "upserted", "deleted", "quarantined", "superseded", "replayed", "skipped", "truncatedRows",
        "epoch", "silverVersion", "quarantineFields", "replay", "routes", "unrouted",
    ]  # fmt: skip

    @staticmethod
    def _get_schema() -> str:
        return _schema("TransformOutcomeRunFacet")


@attr.define
class ContinuityRunFacet(RunFacet):
    """The continuity check's verdict on the run: whether its commits chain on from where the table stood
    before it, with the per-partition offset ranges read back from bronze's log and every violation."""

    continuous: bool
    commits: int
    rows: int
    partitions: list[dict[str, Any]] = attr.field(factory=list)
    violations: list[str] = attr.field(factory=list)
    notes: list[str] = attr.field(factory=list)
    #: Of ``rows`` and ``commits``: what an earlier try of the run's job committed before it died and
    #: Airflow retried it. That try's own ``FAIL`` event could not know; this is where it is counted.
    earlierTriesRows: int = 0  # noqa: N815 - OpenLineage facet fields are camelCase
    earlierTriesCommits: int = 0  # noqa: N815
    _additional_skip_redact: ClassVar[list[str]] = [
        "continuous", "commits", "rows", "partitions", "earlierTriesRows", "earlierTriesCommits"]  # fmt: skip

    @staticmethod
    def _get_schema() -> str:
        return _schema("ContinuityRunFacet")


@attr.define
class MaintenanceRunFacet(RunFacet):
    """What table maintenance did to each table (files and bytes before and after, or why it skipped one)."""

    tables: dict[str, dict[str, Any]] = attr.field(factory=dict)
    _additional_skip_redact: ClassVar[list[str]] = ["tables"]

    @staticmethod
    def _get_schema() -> str:
        return _schema("MaintenanceRunFacet")


#: Event facet key -> facet class.
KEYS: dict[str, type[RunFacet]] = {
    "kde_kafkaOffsets": KafkaOffsetsRunFacet,
    "kde_transformOutcome": TransformOutcomeRunFacet,
    "kde_continuity": ContinuityRunFacet,
    "kde_maintenance": MaintenanceRunFacet,
}
