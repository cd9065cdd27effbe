"""One topic, many tables: a transform's routes, which route takes a record, and a batch's routing account.

A pipeline's ``transform`` may declare routes instead of one silver table
(``transform.routes`` in the pipeline file, :mod:`include.config.transform`).
Each route has a match, its own silver table, quarantine table and transform
(fields, key, ordering, value format); bronze is written once and the
transform's one stream hands each record to the route(s) whose match it
meets. A record no route takes follows ``transform.unrouted``.

Pure data and rules, shared by both sides: the loader builds a
:class:`Routing`; the Spark job (``spark_jobs/routing.py``) evaluates the same
match as column expressions, and :meth:`RouteMatch.matches` here is its
definition in Python (:meth:`Routing.assign` and :func:`account` with it: the
tests' oracle, which the Spark columns must agree with). Every route's batch commit carries the batch's
:class:`RoutingAccount`, so the check after a run proves per batch that every
bronze record went to a route or was counted as unrouted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from include.contract.errors import ContractError
from include.contract.transform_spec import TransformSpec

#: What a record no route takes does: goes to the unrouted quarantine table (default), is only counted, or
#: fails the transform naming its topic, partition and offset (nothing of the batch is written).
UnroutedPolicy = Literal["quarantine", "ignore", "fail"]
UNROUTED_POLICIES: tuple[str, ...] = get_args(UnroutedPolicy)
#: What a record several routes match does: goes to the first of them in the file's order (default), or to
#: each of them.
OverlapPolicy = Literal["first", "all"]
OVERLAP_POLICIES: tuple[str, ...] = get_args(OverlapPolicy)
#: A route's name: it names the route's tables' folders, its Delta app ids and its lineage datasets.
ROUTE_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
#: The folder of the unrouted records' quarantine table beside the routes' quarantine tables; no route may
#: take the name.
UNROUTED = "unrouted"
#: ``userMetadata`` marker of an unrouted records' quarantine append.
UNROUTED_KIND = "kde-unrouted"
#: The match keys, in the order a match is described.
MATCH_KEYS = ("topic", "header", "key", "field", "record_name", "subject")
#: The Confluent wire format's magic byte, before a 4-byte schema id.
_MAGIC = 0


@dataclass(frozen=True)
class ValueMatch:
    """A named item (a Kafka header, a value's top-level field) whose text is one of ``values``."""

    name: str
    values: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "values": list(self.values)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ValueMatch:
        return cls(str(data["name"]), tuple(str(v) for v in data["values"]))

    def describe(self, what: str) -> str:
        shown = self.values[0] if len(self.values) == 1 else "one of " + ", ".join(self.values)
        return f"{what} {self.name} = {shown}"


@dataclass(frozen=True)
class WriterSchema:
    """What the schema registry says of the schema id a value carries: its record's full name and subjects."""

    schema_id: int
    record_name: str | None
    subjects: tuple[str, ...] = ()


@dataclass(frozen=True)
class RoutedRecord:
    """A bronze record as routing sees it (the tests' oracle and the pure reader)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    #: The registry's answer for the schema id the value carries, when it carries one.
    writer: WriterSchema | None = None


@dataclass(frozen=True)
class RouteMatch:
    """Which records a route takes: every condition given must hold (at least one is given).

    Attributes:
        topic: The record's topic is one of these.
        header: A header of that name has one of these values (its bytes as UTF-8 text); with several
            headers of the name, any of them.
        key: A Java regular expression found in the Kafka key (its bytes as UTF-8 text; anchor it with ``^``
            and ``$`` to match the whole key); a record without a key never matches.
        field: The value is a JSON object (as text, or behind the Confluent wire format's 5-byte header) whose
            top-level field of that name, as text (a string's characters, anything else as JSON writes it),
            is one of these; any other value never matches.
        record_name: The full name (namespace and name) of the writer schema the value's schema id names in
            the registry is one of these.
        subject: The writer schema's id is registered under one of these subjects.
    """

    topic: tuple[str, ...] | None = None
    header: ValueMatch | None = None
    key: str | None = None
    field: ValueMatch | None = None
    record_name: tuple[str, ...] | None = None
    subject: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.given():
            raise ContractError("a route's match needs at least one of " + ", ".join(MATCH_KEYS))

    def given(self) -> tuple[str, ...]:
        """The match keys this match sets, in :data:`MATCH_KEYS`' order."""
        return tuple(k for k in MATCH_KEYS if getattr(self, k) is not None)

    @property
    def needs_registry(self) -> bool:
        """Whether the match asks the schema registry (``record_name`` or ``subject``)."""
        return self.record_name is not None or self.subject is not None

    def describe(self) -> str:
        """The match as a message shows it: ``header kind = order and key ~ ^o-``."""
        parts: list[str] = []
        for k in self.given():
            value = getattr(self, k)
            if isinstance(value, ValueMatch):
                parts.append(value.describe(k))
            elif isinstance(value, tuple):
                parts.append(f"{k} = {value[0]}" if len(value) == 1 else f"{k} one of {', '.join(value)}")
            else:
                parts.append(f"key ~ {value}")
        return " and ".join(parts)

    def matches(self, record: RoutedRecord) -> bool:
        """Whether ``record`` meets every condition (what the job's column expression computes)."""
        if self.topic is not None and record.topic not in self.topic:
            return False
        if self.header is not None:
            texts = {_text(v) for n, v in record.headers if n == self.header.name}
            if not texts & set(self.header.values):
                return False
        if self.key is not None and (
            record.key is None or re.search(self.key, _text(record.key) or "") is None
        ):
            return False
        if self.field is not None and json_field_text(record.value, self.field.name) not in self.field.values:
            return False
        if self.record_name is not None and (
            record.writer is None or record.writer.record_name not in self.record_name
        ):
            return False
        return self.subject is None or (
            record.writer is not None and bool(set(record.writer.subjects) & set(self.subject))
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in self.given():
            value = getattr(self, k)
            out[k] = (
                value.to_json()
                if isinstance(value, ValueMatch)
                else list(value)
                if isinstance(value, tuple)
                else value
            )
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RouteMatch:
        def names(k: str) -> tuple[str, ...] | None:
            return tuple(str(v) for v in data[k]) if data.get(k) is not None else None

        def item(k: str) -> ValueMatch | None:
            return ValueMatch.from_json(data[k]) if data.get(k) is not None else None

        return cls(topic=names("topic"), header=item("header"), key=data.get("key"), field=item("field"),
                   record_name=names("record_name"), subject=names("subject"))  # fmt: skip


def _text(value: bytes | None) -> str | None:
    """Bytes as UTF-8 text, as Spark's ``CAST(binary AS STRING)`` reads them (bad bytes replaced)."""
    return None if value is None else value.decode("utf-8", errors="replace")


def json_field_text(value: bytes | None, name: str) -> str | None:
    """The top-level field ``name`` of a JSON object value as text, or ``None`` (no such field, null, not JSON).

    A value behind the Confluent wire format's header (magic byte 0 and a
    4-byte schema id, as a JSON Schema serializer writes it) is read after it.
    A string field is its characters; any other value is its JSON text.
    """
    if value is None:
        return None
    body = value[5:] if len(value) > 5 and value[0] == _MAGIC else value
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get(name) is None:
        return None
    found = data[name]
    return found if isinstance(found, str) else json.dumps(found, separators=(",", ":"))


@dataclass(frozen=True)
class RouteSpec:
    """One route: its match, its transform and its tables."""

    name: str
    match: RouteMatch
    transform: TransformSpec
    silver_path: str
    quarantine_path: str

    def __post_init__(self) -> None:
        if not ROUTE_NAME.fullmatch(self.name) or self.name == UNROUTED:
            raise ContractError(f"route name {self.name!r}: expected {ROUTE_NAME.pattern}, not {UNROUTED!r}")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "match": self.match.to_json(), "transform": self.transform.to_json(),
                "silver_path": self.silver_path, "quarantine_path": self.quarantine_path}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RouteSpec:
        return cls(name=str(data["name"]), match=RouteMatch.from_json(data["match"]),
                   transform=TransformSpec.from_json(dict(data["transform"])), silver_path=str(data["silver_path"]),
                   quarantine_path=str(data["quarantine_path"]))  # fmt: skip


@dataclass(frozen=True)
class Routing:
    """A transform's routes, in the file's order, and its policies.

    Attributes:
        routes: The routes; the first one a record matches takes it under ``overlap: first``.
        unrouted: :data:`UNROUTED_POLICIES`.
        overlap: :data:`OVERLAP_POLICIES`.
        unrouted_path: The quarantine table of the records no route takes (``unrouted: quarantine``).
    """

    routes: tuple[RouteSpec, ...]
    unrouted_path: str
    unrouted: str = "quarantine"
    overlap: str = "first"

    def __post_init__(self) -> None:
        names = [r.name for r in self.routes]
        if not names:
            raise ContractError("a routed transform needs at least one route")
        if len(set(names)) != len(names):
            raise ContractError(f"route names repeat: {names}")
        if self.unrouted not in UNROUTED_POLICIES or self.overlap not in OVERLAP_POLICIES:
            raise ContractError(f"unrouted {self.unrouted!r} / overlap {self.overlap!r}: not a policy")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.routes)

    def route(self, name: str) -> RouteSpec:
        """The route named ``name``; :class:`ContractError` naming the routes there are."""
        for r in self.routes:
            if r.name == name:
                return r
        raise ContractError(f"no route {name!r}; the routes are {', '.join(self.names)}")

    def assign(self, record: RoutedRecord) -> tuple[str, ...]:
        """The routes that take ``record``, by its matches and ``overlap``; empty: it is unrouted."""
        matched = tuple(r.name for r in self.routes if r.match.matches(record))
        return matched[:1] if self.overlap == "first" else matched

    def to_json(self) -> dict[str, Any]:
        return {"routes": [r.to_json() for r in self.routes], "unrouted": self.unrouted, "overlap": self.overlap,
                "unrouted_path": self.unrouted_path}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Routing:
        return cls(routes=tuple(RouteSpec.from_json(r) for r in data["routes"]),
                   unrouted_path=str(data["unrouted_path"]), unrouted=str(data.get("unrouted", "quarantine")),
                   overlap=str(data.get("overlap", "first")))  # fmt: skip


@dataclass(frozen=True)
class RoutingAccount:
    """Where one batch's bronze records went, carried by every route's commit of the batch.

    ``bronze`` records were read; ``matched[r]`` went to route ``r``; a record
    several routes matched is ``overlapping`` and, under ``overlap: all``, adds
    ``copies - 1`` to ``extra``; ``unrouted`` matched none (quarantined, counted
    or fatal, by the policy). So ``bronze = Σ matched - extra + unrouted``.
    """

    bronze: int
    matched: dict[str, int]
    unrouted: int
    overlapping: int = 0
    extra: int = 0

    @property
    def balanced(self) -> bool:
        return self.bronze == sum(self.matched.values()) - self.extra + self.unrouted

    def problems(self, routes: Sequence[str]) -> list[str]:
        """Why the account does not add up, or names other routes than ``routes``; empty when it holds."""
        out: list[str] = []
        if set(self.matched) != set(routes):
            out.append(f"the account names routes {sorted(self.matched)}, the transform has {sorted(routes)}")
        if not self.balanced:
            out.append(
                f"{self.bronze} bronze records != {sum(self.matched.values())} routed - {self.extra} extra copies "
                f"+ {self.unrouted} unrouted"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return {"bronze": self.bronze, "matched": dict(self.matched), "unrouted": self.unrouted,
                "overlapping": self.overlapping, "extra": self.extra}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoutingAccount:
        return cls(bronze=int(data["bronze"]), matched={str(k): int(v) for k, v in data["matched"].items()},
                   unrouted=int(data["unrouted"]), overlapping=int(data.get("overlapping", 0)),
                   extra=int(data.get("extra", 0)))  # fmt: skip


def account(
    assigned: Sequence[tuple[str, ...]], matched_counts: Sequence[int], routes: Sequence[str]
) -> RoutingAccount:
    """The :class:`RoutingAccount` of a batch from each record's assigned routes and how many routes it matched
    (before ``overlap: first`` kept one): the pure form of what the job counts in one aggregation."""
    matched = dict.fromkeys(routes, 0)
    for names in assigned:
        for n in names:
            matched[n] += 1
    return RoutingAccount(
        bronze=len(assigned),
        matched=matched,
        unrouted=sum(1 for names in assigned if not names),
        overlapping=sum(1 for n in matched_counts if n > 1),
        extra=sum(len(names) - 1 for names in assigned if names),
    )


def unrouted_metadata(pipeline: str, run_id: str, epoch: int, batch_id: int, account: RoutingAccount) -> str:
    """The ``userMetadata`` of batch ``batch_id``'s unrouted records' quarantine append."""
    return json.dumps({"kind": UNROUTED_KIND, "pipeline": pipeline, "run_id": run_id, "epoch": epoch,
                       "batch_id": batch_id, "routing": account.to_json()}, separators=(",", ":"))  # fmt: skip


def unrouted_batch(text: str | None) -> tuple[int, int] | None:
    """``(epoch, batch_id)`` of an unrouted records' quarantine append from its ``userMetadata``; ``None`` for
    any other commit."""
    if not text or not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("kind") != UNROUTED_KIND:
        return None
    return int(data["epoch"]), int(data["batch_id"])


@dataclass(frozen=True)
class SilverTarget:
    """One silver table a transform writes, with its quarantine and the rules for its records.

    A pipeline without routes has one, ``route`` ``None``: ``tables.silver_path``
    and ``tables.quarantine_path``. A routed pipeline has one per route.
    """

    route: str | None
    spec: TransformSpec
    silver_path: str
    quarantine_path: str


def registry_of(specs: Iterable[TransformSpec]) -> str | None:
    """The schema registry connection the first of ``specs`` that reads through one names (a pipeline's
    routes all name the same one: the loader checks it)."""
    return next((s.value_schema.registry for s in specs if s.value_schema and s.value_schema.registry), None)


def targets_of(routing: Routing) -> tuple[SilverTarget, ...]:
    """A routed transform's silver targets, in the routes' order."""
    return tuple(SilverTarget(r.name, r.transform, r.silver_path, r.quarantine_path) for r in routing.routes)
