"""The sections of a pipeline file: ``kafka``, ``tables``, ``lag`` and ``maintenance``, as pydantic models, and
the base every section's model shares (``cluster`` is :mod:`include.config.cluster`, ``cluster.kubernetes``
:mod:`include.config.kubernetes`).

Their ``Field(description=...)`` texts are the configuration reference
(``docs/pipeline-file.md``, :mod:`include.config.reference`). ``kafka``,
``lag`` and ``maintenance`` load as they
are written, so these models are also what the rest of the project reads;
``tables`` has defaults that depend on the pipeline's name and the
environment, so it loads into :class:`~include.config.pipeline.TablesConfig`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args

from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic.fields import FieldInfo
from pydantic_core import ArgsKwargs

from include.config.errors import _MISSING, _did_you_mean, _invalid, _suffix
from include.config.validators import (
    _check_keys,
    _check_minutes,
    _check_options,
    _check_topic_pattern,
    _check_topics,
    _choice,
    _connection_id,
    _integer,
    _NotOneSource,
    _text,
)
from include.contract.maintenance import Window

#: Delta's own defaults for ``delta.logRetentionDuration`` and
#: ``delta.deletedFileRetentionDuration``; the second is also the floor
#: (VACUUM's safety check refuses less).
DEFAULT_LOG_RETENTION_DAYS = 30
DEFAULT_DELETED_FILE_RETENTION_DAYS = 7
StartingOffsets = Literal["earliest", "latest"]
STARTING_OFFSETS: tuple[str, ...] = get_args(StartingOffsets)
#: Unknown keys are errors, so a typo never falls back to a default silently (_check_keys reports them
#: first, with a did-you-mean; "forbid" also puts additionalProperties: false in the JSON Schema).
_SECTION_CONFIG = ConfigDict(extra="forbid")


def _without_default(schema: dict[str, Any]) -> None:
    """JSON Schema of a key that may be left out but not set to null: null is no value to write."""
    schema.pop("default", None)


def _optional(description: str) -> Any:
    """A key that may be left out (then ``None``: the loader works out its value) but not set to null."""
    return Field(default=None, description=description, json_schema_extra=_without_default)


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class _Section:
    """What every mapping of the file gets before its keys are checked one by one."""

    if TYPE_CHECKING:  # set by pydantic on every pydantic dataclass
        __pydantic_fields__: ClassVar[dict[str, FieldInfo]]

    @model_validator(mode="before")
    @classmethod
    def _read_mapping(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, ArgsKwargs):  # built in code (tests, dataclasses.replace), not read from a file
            return data
        data = cls._check_mapping(cls._shorthand(data))
        fields = cls.__pydantic_fields__
        missing = {key: _MISSING for key, f in fields.items() if f.is_required() and key not in data}
        return cls._check_given({**data, **missing}, info)

    @classmethod
    def _keys(cls) -> tuple[str, ...]:
        return tuple(cls.__pydantic_fields__)

    @classmethod
    def _expected(cls, value: Any) -> str:
        """What the section must be, for a message about ``value``, which is not a mapping."""
        return f"a mapping with keys {', '.join(cls._keys())}"

    @classmethod
    def _check_mapping(cls, data: Any, at: str = "") -> dict[str, Any]:
        return _check_keys(data, cls._keys(), cls._expected(data), at)

    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """The mapping a shorter way of writing the section stands for."""
        return data

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Rules on which keys are given (with null as not given), before their values are checked."""
        return data


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class KafkaConfig(_Section):
    """Where the records come from (section ``kafka``)."""

    connection_id: Annotated[str, _connection_id("Kafka")] = Field(
        description="Required. Id of the Airflow connection (type kafka) to the Kafka cluster. Bootstrap "
        "servers and every security setting (SASL, SSL, passwords) live in that connection's extra JSON, in "
        "librdkafka's names, never in the pipeline file."
    )
    topics: Annotated[tuple[str, ...], BeforeValidator(_check_topics)] = Field(
        default=(),
        description="List of topic names to ingest. Give exactly one of topics and topic_pattern.",
    )
    topic_pattern: Annotated[str, BeforeValidator(_check_topic_pattern)] | None = Field(
        default=None,
        description="Regular expression of topic names to ingest (Spark's subscribePattern; checked with "
        "Python's re, which agrees with Java for ordinary patterns). Give exactly one of topics and "
        "topic_pattern.",
    )
    starting_offsets: Annotated[StartingOffsets, _choice(STARTING_OFFSETS)] = Field(
        default="earliest",
        description="earliest (default) or latest: where partitions start on the pipeline's first run. "
        "Later runs resume where the bronze table stands; partitions and topics found later start at their "
        "earliest offset. latest is fixed once: the first run records Kafka's end offsets in a position commit "
        "(no rows; shown in the task log and the ledger's position_set_json), and every record produced after "
        "it lands.",
    )
    max_offsets_per_trigger: Annotated[int, *_integer(1)] | None = Field(
        default=None,
        description="Positive integer, or null (default) for no cap: at most this many records per "
        "micro-batch (Spark's maxOffsetsPerTrigger). A larger backlog is written as several Delta commits "
        "in the same run.",
    )
    options: Annotated[dict[str, str], BeforeValidator(_check_options)] = Field(
        default_factory=dict,
        description='Mapping of extra, non-secret Kafka consumer settings, e.g. max.poll.records: "500". '
        "Keys are Kafka's own names without a kafka. prefix; values are strings (quote numbers and "
        "booleans). Settings Spark or the pipeline manage (group.id, auto.offset.reset, isolation.level, "
        "deserializers, ...) are refused, and so are settings that make the client load code or read the "
        "worker's environment and files (config.providers*, *.class and *.classes keys, interceptors, "
        "metric.reporters) and ${...} provider references in values. Default empty. They override the ingestion job's read defaults "
        "(max.poll.records 10000, max.partition.fetch.bytes 8388608, receive.buffer.bytes 1048576) and reach "
        "the job through an owner-only file, never its command line.",
    )

    @classmethod
    def _expected(cls, value: Any) -> str:
        if value is _MISSING or value is None:  # the section left out: say what it needs
            return "a mapping with connection_id and topics or topic_pattern"
        return super()._expected(value)

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        topics, pattern = data.get("topics"), data.get("topic_pattern")
        if (topics is None) == (pattern is None):
            # Reported by the check of topics, after connection_id's and before the values'.
            data = {**data, "topics": _NotOneSource("both" if topics is not None else "neither")}
        return data


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class TablesSection(_Section):
    """Where the records go (section ``tables``).

    Relative local paths in the file are taken from the project folder (not
    from the working directory, which differs between Airflow's processes);
    URIs such as ``s3a://bucket/lake`` are kept as written. The six tables and
    folders (bronze, silver, quarantine, ledger and both checkpoint folders)
    must lie apart: none may be another or sit inside another, and none may be,
    sit inside or hold one of another pipeline's (the later file in name order
    is refused, naming both). The silver ones have their defaults even when the
    pipeline has no ``transform`` section.
    """

    lakehouse_root: Annotated[str, _text("a folder path or URI")] = _optional(
        "Folder or URI under which the pipeline's tables and checkpoints live. Default: the environment "
        "variable KDE_LAKEHOUSE_ROOT if set, else <project>/var/lakehouse (KDE_VAR_DIR/lakehouse)."
    )
    bronze_path: Annotated[str, _text("a folder path or URI")] = _optional(
        "Location of the Delta bronze table. Default: <lakehouse_root>/<name>/bronze."
    )
    checkpoint_root: Annotated[str, _text("a folder path or URI")] = _optional(
        "Folder holding the ingestion job's Spark checkpoints, one per epoch. Default: "
        "<lakehouse_root>/<name>/_checkpoints/bronze. Must be neither the bronze table's folder nor inside "
        "it (nor the other way round). The job reads it with local file I/O, so it must be a local or "
        "mounted path."
    )
    ledger_path: Annotated[str, _text("a folder path or URI")] = _optional(
        "Location of the run-ledger Delta table (one row per DAG run: ranges, rows, lag, outcome). "
        "Default: <lakehouse_root>/<name>/_runs."
    )
    silver_path: Annotated[str, _text("a folder path or URI")] = _optional(
        "Location of the Delta silver table the transform writes (one row per key). Default: "
        "<lakehouse_root>/<name>/silver."
    )
    quarantine_path: Annotated[str, _text("a folder path or URI")] = _optional(
        "Location of the Delta table of records the transform refused (with the reason). Default: "
        "<lakehouse_root>/<name>/quarantine."
    )
    transform_checkpoint_root: Annotated[str, _text("a folder path or URI")] = _optional(
        "Folder holding the transform job's checkpoints. Default: "
        "<lakehouse_root>/<name>/_checkpoints/silver."
    )
    lock_path: Annotated[str, _text("a folder path or URI")] = _optional(
        "Folder or object-store prefix holding the pipeline's run lock (one run at a time, whichever Airflow "
        "worker runs it). Default: <lakehouse_root>/<name>/_lock. Every worker that runs the pipeline must "
        "reach the same one, as it reaches the tables: a shared or mounted filesystem that refuses to create "
        "a name twice (local disks, NFS), an hdfs:// folder (HDFS refuses a second create of a name), or an "
        "s3a:// (s3://) prefix of a store that refuses a PUT with If-None-Match: * when the name exists (AWS S3 "
        "does), reached with tables.storage_connection_id."
    )
    storage_connection_id: Annotated[str, _text("an Airflow connection id")] = Field(
        default="aws_default",
        description="Airflow connection (type aws) with which the Airflow side reaches locations on an object "
        "store (s3a:// or s3://): login and password are the access key pair; its extra may hold "
        "aws_session_token, endpoint_url (an S3-compatible store), region_name and config_kwargs "
        '{"s3": {"addressing_style": "path"}}, and allowed_roots: the s3://bucket/prefix URIs the pipeline\'s '
        "locations on the store must lie under, the connection owner's limit (a location elsewhere is refused "
        "before any task reads or writes it). Unused while every location is a local path.",
    )
    log_retention_days: Annotated[int, *_integer(1)] = Field(
        default=DEFAULT_LOG_RETENTION_DAYS,
        description="Days Delta keeps each table's commit files (delta.logRetentionDuration of bronze, "
        "silver, quarantine and the ledger). Default 30, Delta's own. It bounds time travel and how long a "
        "commit's detail (ranges, counts) and a RESTORE stay visible; where a table stands does not depend "
        "on it (it is in the table's state). At least deleted_file_retention_days.",
    )
    deleted_file_retention_days: Annotated[int, *_integer(DEFAULT_DELETED_FILE_RETENTION_DAYS)] = Field(
        default=DEFAULT_DELETED_FILE_RETENTION_DAYS,
        description="Days a file a commit removed stays on disk before VACUUM may delete it "
        "(delta.deletedFileRetentionDuration). Default 7, and never less: Delta's safety default, which "
        "protects readers in flight, the transform's stream reading bronze versions it has not read yet, "
        "and backfills by time travel. Both retention settings are set on the tables by the jobs (bronze "
        "after ingest, silver and quarantine after the transform) and by record_run (the ledger), in one "
        "property commit and only when a value changes.",
    )

    @model_validator(mode="after")
    def _log_outlives_files(self) -> TablesSection:
        # Time travel to a version needs its commit and its files; a shorter log makes the longer file
        # retention useless.
        if self.log_retention_days < self.deleted_file_retention_days:
            files_days = self.deleted_file_retention_days
            expected = f"an integer >= tables.deleted_file_retention_days ({files_days})"
            raise _invalid(expected, self.log_retention_days, at=".log_retention_days")
        return self


#: ``lag.retention_margin_minutes``' default for a pipeline without a schedule: a day.
UNSCHEDULED_RETENTION_MARGIN_MINUTES = 1440


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class LagConfig(_Section):
    """When a run has enough new data to start a cluster (section ``lag``)."""

    min_records: Annotated[int, *_integer(0)] = Field(
        default=1,
        description="Integer >= 0, default 1. The lag sensor lets the run proceed once the total lag (new "
        "records over all partitions) is at least this many records.",
    )
    max_wait_minutes: Annotated[float, Field(gt=0), BeforeValidator(_check_minutes)] = Field(
        default=60.0,
        description="Positive number of minutes, default 60. When fewer than min_records are waiting, the "
        "run proceeds anyway once the oldest of them has waited this long in Kafka, so a trickle is never "
        "held back forever. With no new record at all the run is skipped at once (no cluster is started).",
    )
    retention_margin_minutes: Annotated[float, Field(gt=0), BeforeValidator(_check_minutes)] | None = Field(
        default=None,
        description="Positive number of minutes, or null (the default): twice the schedule's interval (its "
        "longest gap between runs), or "
        f"{UNSCHEDULED_RETENTION_MARGIN_MINUTES} (a day) for a pipeline with schedule null. When Kafka's retention "
        "may delete records the table has not read within this long, the run proceeds at once whatever "
        "min_records says, and the monitoring page shows the pipeline at risk. The time left is a lower bound "
        "per partition from the topic's retention.ms and retention.bytes (docs/retention.md).",
    )


#: Bronze columns a Z-order may name (the others are Kafka's raw bytes and headers).
BRONZE_ZORDER_COLUMNS = ("topic", "partition", "offset", "timestamp", "key")


def _check_flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _invalid("true or false", value)
    return value


def _check_window(value: Any) -> str:
    if not isinstance(value, str):
        raise _invalid('a daily UTC window HH:MM-HH:MM (e.g. "02:00-05:00"), or null', value)
    try:
        return str(Window.parse(value))
    except ValueError as exc:
        raise _invalid(
            'a daily UTC window HH:MM-HH:MM whose start and end differ (e.g. "02:00-05:00")', value
        ) from exc


def _check_zorder(value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict):
        raise _invalid("a mapping of table (bronze or silver) to a list of column names", value)
    out: dict[str, tuple[str, ...]] = {}
    for table, columns in value.items():
        if table not in ("bronze", "silver"):
            raise _invalid(
                "bronze or silver (the tables a Z-order helps readers of)",
                table,
                _did_you_mean(table, ("bronze", "silver")),
                at=_suffix(table),
            )
        if (
            not isinstance(columns, (list, tuple))
            or not columns
            or not all(isinstance(c, str) and c for c in columns)
            or len(set(columns)) != len(columns)
        ):
            raise _invalid("a non-empty list of distinct column names", columns, at=_suffix(table))
        if table == "bronze":
            wrong = [c for c in columns if c not in BRONZE_ZORDER_COLUMNS]
            if wrong:
                raise _invalid(
                    f"columns among {', '.join(BRONZE_ZORDER_COLUMNS)}",
                    wrong[0],
                    _did_you_mean(wrong[0], BRONZE_ZORDER_COLUMNS),
                    at=_suffix(table),
                )
        out[table] = tuple(columns)
    return out


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class MaintenanceConfig(_Section):
    """Compaction, VACUUM and log checkpoints of the pipeline's tables (section ``maintenance``).

    Bronze, silver and quarantine are maintained by Spark as the last step of a
    run that reads records (on its cluster, inside the pipeline's lock); the
    run ledger by ``record_run`` before it writes the run's row. Each is due
    after ``every_runs`` runs, or once per ``daily_window``. What was done
    (files and bytes before and after, seconds) is the ledger row's
    ``maintenance_json``; maintenance commits never count as progress.
    """

    every_runs: Annotated[int, *_integer(1)] | None = Field(
        default=50,
        description="Positive integer or null, default 50: maintain the tables on every Nth run (runs with no "
        "new records count; bronze, silver and quarantine, which such runs leave unchanged, are then done "
        "on the next run that reads records). null: only in daily_window.",
    )
    daily_window: Annotated[str, BeforeValidator(_check_window)] | None = Field(
        default=None,
        description='"HH:MM-HH:MM" in UTC (it may pass midnight) or null (the default): also maintain once on '
        "the first run starting in this window each day. With every_runs and daily_window both null the "
        "pipeline is never maintained.",
    )
    optimize: Annotated[bool, BeforeValidator(_check_flag)] = Field(
        default=True,
        description="true (default): compact small files (Delta OPTIMIZE; delta-rs for the ledger).",
    )
    zorder_by: Annotated[dict[str, tuple[str, ...]], BeforeValidator(_check_zorder)] = Field(
        default_factory=dict,
        description="Mapping, default empty: per table (bronze or silver) the columns OPTIMIZE Z-orders its "
        f"files by, e.g. {{silver: [customer_id]}}. Bronze columns: {', '.join(BRONZE_ZORDER_COLUMNS)}; silver "
        "columns: fields of transform.schema.",
    )
    vacuum: Annotated[bool, BeforeValidator(_check_flag)] = Field(
        default=True,
        description="true (default): VACUUM each table with its own delta.deletedFileRetentionDuration "
        "(tables.deleted_file_retention_days, never under Delta's 7 days).",
    )
    checkpoint: Annotated[bool, BeforeValidator(_check_flag)] = Field(
        default=True,
        description="true (default): write a Delta log checkpoint of each table's newest version (Delta's "
        "log cleanup of commits older than tables.log_retention_days runs with it).",
    )

    run_folders_keep_days: Annotated[int, *_integer(1)] = Field(
        default=14,
        description="Positive integer, default 14: a run's folder on the Airflow worker (job summaries, "
        "logs, executor output, <KDE_VAR_DIR>/runs/<name>/<run>) is removed by record_run once it is older "
        "than this many days. Never the folder of a run that holds the pipeline's lock or has just written "
        "to its folder.",
    )
    run_folders_keep: Annotated[int, *_integer(1)] = Field(
        default=200,
        description="Positive integer, default 200: record_run also removes the folders of runs older than "
        "the newest this many, whatever their age.",
    )

    @property
    def enabled(self) -> bool:
        """Whether the pipeline's tables are ever maintained."""
        return self.every_runs is not None or self.daily_window is not None

    @property
    def window(self) -> Window | None:
        """:attr:`daily_window` parsed."""
        return Window.parse(self.daily_window) if self.daily_window else None
