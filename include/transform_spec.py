"""The bronze → silver transform of a pipeline: record schema, merge key, ordering and policies.

Pure data, shared by both sides: ``include/pipeline_config.py`` builds a
:class:`TransformSpec` from the pipeline file (and validates it there, with
file and field in every error); the Spark job ``spark_jobs/bronze_to_silver.py``
receives it as JSON. Nothing here imports Spark or YAML.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

#: Simple field types and what a JSON value must be to take them.
SIMPLE_TYPES = ("string", "int", "long", "double", "boolean", "date", "timestamp", "json")
#: ``decimal(precision, scale)``: 1 <= precision <= 38, 0 <= scale <= precision.
DECIMAL = re.compile(r"decimal\(\s*(\d{1,2})\s*,\s*(\d{1,2})\s*\)")
NUMERIC_TYPES = ("int", "long", "double")
#: Types an ordering field may have: ones whose order means "newer".
ORDERING_TYPES = ("int", "long", "double", "date", "timestamp", "string")
#: Types a merge key field may have.
KEY_TYPES = ("string", "int", "long", "date", "boolean")

TOMBSTONE_POLICIES = ("quarantine", "delete")
NEW_FIELD_POLICIES = ("ignore", "add")
FORMATS = ("json",)

#: Field and column names: what Delta and Spark SQL take without quoting.
FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")
#: Silver's own columns start with ``_``; record fields never do.
SYSTEM_PREFIX = "_"

DEFAULT_MAX_VALUE_BYTES = 1024 * 1024


def normalize_type(text: str) -> str | None:
    """The canonical spelling of a field type (``'Decimal(10, 2)'`` → ``'decimal(10,2)'``), or ``None``."""
    t = text.strip().lower()
    if t in SIMPLE_TYPES:
        return t
    m = DECIMAL.fullmatch(t)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if 1 <= precision <= 38 and 0 <= scale <= precision:
            return f"decimal({precision},{scale})"
    return None


def is_decimal(type_name: str) -> bool:
    """Whether ``type_name`` (canonical) is a decimal type."""
    return type_name.startswith("decimal(")


def spark_type(type_name: str) -> str:
    """The Spark SQL type of a field type; ``json`` fields are kept as their JSON text."""
    return {"long": "bigint", "json": "string"}.get(type_name, type_name)


@dataclass(frozen=True)
class FieldSpec:
    """One declared field of the record value.

    Attributes:
        name: The JSON key and the silver column name.
        type: Canonical type (see :data:`SIMPLE_TYPES`, or ``decimal(p,s)``).
        required: The key must be present with a non-null value.
        minimum: For numeric and decimal fields: the smallest allowed value.
        maximum: For numeric and decimal fields: the largest allowed value.
        allowed: The only values allowed (strings for ``string``, integers for
            ``int``/``long``).
        max_length: For ``string`` and ``json`` fields: at most this many characters.
    """

    name: str
    type: str
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None
    allowed: tuple[Any, ...] | None = None
    max_length: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "required": self.required,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "allowed": list(self.allowed) if self.allowed is not None else None,
            "max_length": self.max_length,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FieldSpec:
        allowed = data.get("allowed")
        return cls(
            name=data["name"],
            type=data["type"],
            required=bool(data.get("required", False)),
            minimum=data.get("minimum"),
            maximum=data.get("maximum"),
            allowed=tuple(allowed) if allowed is not None else None,
            max_length=data.get("max_length"),
        )


@dataclass(frozen=True)
class TransformSpec:
    """How bronze records become silver rows (section ``transform`` of a pipeline file).

    Attributes:
        fields: The declared fields, in column order.
        key: Names of the fields that identify a row (the MERGE key); each is required.
        ordering: Name of the field that says which record of a key is newer
            (event time); required. Kafka offset breaks ties.
        format: Record value format; ``json`` (a JSON object per record).
        tombstones: ``quarantine`` or ``delete`` (a null value deletes its key,
            named by the Kafka key).
        new_fields: ``ignore`` or ``add`` (fields not declared become silver columns).
        max_value_bytes: Larger values go to quarantine.
    """

    fields: tuple[FieldSpec, ...]
    key: tuple[str, ...]
    ordering: str
    format: str = "json"
    tombstones: str = "quarantine"
    new_fields: str = "ignore"
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES

    def field_named(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "fields": [f.to_json() for f in self.fields],
            "key": list(self.key),
            "ordering": self.ordering,
            "tombstones": self.tombstones,
            "new_fields": self.new_fields,
            "max_value_bytes": self.max_value_bytes,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TransformSpec:
        return cls(
            fields=tuple(FieldSpec.from_json(f) for f in data["fields"]),
            key=tuple(data["key"]),
            ordering=data["ordering"],
            format=data.get("format", "json"),
            tombstones=data.get("tombstones", "quarantine"),
            new_fields=data.get("new_fields", "ignore"),
            max_value_bytes=int(data.get("max_value_bytes", DEFAULT_MAX_VALUE_BYTES)),
        )


#: ``userMetadata`` marker of a silver batch commit, and of a silver schema change.
SILVER_KIND = "kde-silver"
SCHEMA_KIND = "kde-silver-schema"
#: What a batch did with each record it read; they add up to ``read``.
COUNT_KEYS = ("upserted", "deleted", "quarantined", "superseded", "replayed")


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
    version: int | None = None

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
            version=version,
        )
