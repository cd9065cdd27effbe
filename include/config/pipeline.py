"""The top level of a pipeline file (:class:`PipelineFile`) and what one loads into (:class:`PipelineConfig`).

A pipeline file is read by :class:`PipelineFile` and its sections; the keys
whose value depends on the pipeline's name, the environment or another file
are then worked out by :mod:`include.config.loader` into a
:class:`PipelineConfig`, which holds the same keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BeforeValidator, ConfigDict, Field, TypeAdapter
from pydantic.dataclasses import dataclass as pydantic_dataclass

from include.config.cluster import ClusterConfig
from include.config.cron import _check_schedule, schedule_interval_s
from include.config.sections import (
    _SECTION_CONFIG,
    DEFAULT_DELETED_FILE_RETENTION_DAYS,
    DEFAULT_LOG_RETENTION_DAYS,
    UNSCHEDULED_RETENTION_MARGIN_MINUTES,
    KafkaConfig,
    LagConfig,
    MaintenanceConfig,
    TablesSection,
    _optional,
    _Section,
)
from include.config.transform import TransformSection
from include.config.validators import _check_name, _check_string, _check_tags, _choice, _integer
from include.contract import jobs
from include.contract.errors import ContractError
from include.contract.routes import UNROUTED, Routing, SilverTarget, registry_of, targets_of
from include.contract.transform_spec import TransformSpec

#: Prefix of the consumer group that mirrors a pipeline's offsets (``kafka-delta-elt.<name>``).
CONSUMER_GROUP_PREFIX = "kafka-delta-elt."
DataLossPolicy = Literal["fail", "record_and_continue"]
DATA_LOSS_POLICIES: tuple[str, ...] = get_args(DataLossPolicy)
#: ``--run-type`` choices of ``spark_jobs/kafka_to_bronze.py``, defined once in the job's contract.
RUN_TYPES = jobs.RUN_TYPES


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(**_SECTION_CONFIG, title="Pipeline file"))
class PipelineFile(_Section):
    """One pipeline: the top level of a pipeline file (``include/pipelines/<name>.yaml``).

    One file = one pipeline = one Airflow DAG. Unknown keys are errors, so a
    typo never falls back to a default silently.
    """

    name: Annotated[str, BeforeValidator(_check_name)] = _optional(
        "Pipeline name, default the file name without .yaml: letters, digits, _, . and -, starting with a "
        "letter or digit, at most 200 characters. It names the DAG, the table folders, the Delta txnAppId "
        "and the consumer group (kafka-delta-elt.<name>); renaming a pipeline starts it afresh."
    )
    description: Annotated[str, BeforeValidator(_check_string)] = Field(
        default="", description="Free text shown with the DAG. Default empty."
    )
    kafka: KafkaConfig = Field(description="Required section: the source.")
    tables: TablesSection | None = Field(
        default=None,
        description="Section: the target locations. Left out or null: every location at its default under "
        "lakehouse_root.",
    )
    schedule: Annotated[str, BeforeValidator(_check_schedule)] | None = Field(
        description="Required key: a 5-field cron expression (minute hour day-of-month month day-of-week, "
        'e.g. "*/10 * * * *"; a step is at most the field\'s highest value and a range runs forwards), one '
        "of the presets @hourly, @daily, @weekly, @monthly, @quarterly, @yearly, or null for manual runs "
        "only. Runs never overlap (max_active_runs=1)."
    )
    lag: LagConfig | None = Field(
        default=None,
        description="Section: lag sensor thresholds. Left out or null: its keys' defaults (a run proceeds at "
        "the first new record).",
    )
    data_loss_policy: Annotated[DataLossPolicy, _choice(DATA_LOSS_POLICIES)] = Field(
        default="fail",
        description="fail (default): a run stops before starting the cluster when Kafka retention deleted "
        "records the table has not read yet. record_and_continue: the run records the gap (partition, "
        "offsets, record count) and continues after it.",
    )
    cluster: ClusterConfig | None = Field(
        default=None,
        description="Section: the Spark cluster. Left out or null: its keys' defaults (profile "
        "local_standalone, one worker of 1 core and 1g).",
    )
    retries: Annotated[int, *_integer(0, 10)] = Field(
        default=2,
        description="Integer from 0 to 10, default 2: Airflow retries per task (exponential back-off, at "
        "most 10 minutes apart).",
    )
    tags: Annotated[tuple[str, ...], BeforeValidator(_check_tags)] = Field(
        default=(),
        description="List of strings, default empty: Airflow DAG tags (at most 100 characters each, no "
        "duplicates); kafka-delta-elt is always added.",
    )
    transform: TransformSection | None = Field(
        default=None,
        description="Optional section: how bronze records become silver rows; without it (the default, or "
        "null) the pipeline stops at bronze.",
    )
    maintenance: MaintenanceConfig | None = Field(
        default=None,
        description="Section: compaction, VACUUM and log checkpoints of the pipeline's tables. Left out or "
        "null: its keys' defaults (every 50 runs, every operation on). To turn maintenance off, set "
        "maintenance.every_runs and maintenance.daily_window both to null.",
    )

    @classmethod
    def _expected(cls, value: Any) -> str:
        return "a mapping of pipeline settings (kafka, schedule, ...)"


_PIPELINE_FILE = TypeAdapter(PipelineFile)


@dataclass(frozen=True)
class TablesConfig:
    """Where the records go: :class:`TablesSection` with every location worked out.

    Local paths are absolute; URIs are as written, without a trailing ``/``.
    """

    lakehouse_root: str
    bronze_path: str
    checkpoint_root: str
    ledger_path: str
    silver_path: str
    quarantine_path: str
    transform_checkpoint_root: str
    lock_path: str
    storage_connection_id: str = "aws_default"
    log_retention_days: int = DEFAULT_LOG_RETENTION_DAYS
    deleted_file_retention_days: int = DEFAULT_DELETED_FILE_RETENTION_DAYS

    def retention_properties(self) -> dict[str, str]:
        """The Delta table properties the pipeline's tables carry for its retention settings."""
        return {
            "delta.logRetentionDuration": f"interval {self.log_retention_days} days",
            "delta.deletedFileRetentionDuration": f"interval {self.deleted_file_retention_days} days",
        }


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class PipelineConfig(PipelineFile):
    """One loaded pipeline: a :class:`PipelineFile` with its name, tables and transform worked out.

    The keys whose value the file states as written (``description``,
    ``kafka``, ``schedule``, ``data_loss_policy``, ``retries``, ``tags``) are
    :class:`PipelineFile`'s own fields, with their checks and defaults. The
    keys below are declared again because their loaded value has another type:
    ``name`` is always known, ``tables`` has every location worked out, the
    sections a file may leave out are filled in, and ``transform`` is a
    :class:`~include.contract.transform_spec.TransformSpec` or ``None``.
    ``source_path`` is not a key: the file this configuration was loaded
    from, as shown in error messages. Nor is ``routing``: a transform with
    routes loads into it (a :class:`~include.contract.routes.Routing`), and
    ``transform`` is then ``None``.
    """

    name: str
    # Re-declared with the loaded type, which is not the file section's type: the dataclass is frozen, so
    # nothing writes a TablesSection (or a TransformSection) through the base class.
    tables: TablesConfig  # type: ignore[assignment]
    lag: LagConfig = Field(default_factory=LagConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    transform: TransformSpec | None = None  # type: ignore[assignment]  # as tables, above
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    source_path: str
    #: A transform with routes: its routes, in the file's order (``transform`` is then ``None``).
    routing: Routing | None = None

    @property
    def has_transform(self) -> bool:
        """Whether the pipeline transforms bronze into silver: one table, or one per route."""
        return self.transform is not None or self.routing is not None

    def transform_spec(self) -> TransformSpec:
        """The transform's spec (a pipeline without routes); :class:`~include.contract.errors.ContractError`
        naming the pipeline otherwise."""
        if self.transform is None:
            why = "its transform has routes" if self.routing is not None else "it has no transform section"
            raise ContractError(f"pipeline {self.name!r} has no single transform spec: {why}")
        return self.transform

    def registry_connection(self) -> str | None:
        """The schema registry connection the transform reads values through (every route names the same one)."""
        return registry_of(t.spec for t in self.silver_targets())

    def table_locations(self) -> dict[str, str]:
        """The pipeline's tables (name -> location): bronze, and silver and quarantine with a transform; with routes
        ``silver.<route>`` and ``quarantine.<route>`` per route and ``quarantine.unrouted``."""
        tables = {"bronze": self.tables.bronze_path}
        for target in self.silver_targets():
            suffix = "" if target.route is None else f".{target.route}"
            tables[f"silver{suffix}"], tables[f"quarantine{suffix}"] = (
                target.silver_path,
                target.quarantine_path,
            )
        if self.routing is not None:
            tables[f"quarantine.{UNROUTED}"] = self.routing.unrouted_path
        return tables

    def silver_targets(self) -> tuple[SilverTarget, ...]:
        """The silver tables the transform writes, each with its quarantine and rules: one, or one per route."""
        if self.routing is not None:
            return targets_of(self.routing)
        if self.transform is None:
            return ()
        return (SilverTarget(None, self.transform, self.tables.silver_path, self.tables.quarantine_path),)

    def retention_margin_s(self, now: datetime) -> float:
        """Seconds of ``lag.retention_margin_minutes``, or its default: twice the schedule's longest gap
        between runs after ``now``, or :data:`UNSCHEDULED_RETENTION_MARGIN_MINUTES` without a schedule."""
        if self.lag.retention_margin_minutes is not None:
            return self.lag.retention_margin_minutes * 60
        if self.schedule is None:
            return UNSCHEDULED_RETENTION_MARGIN_MINUTES * 60
        return 2 * schedule_interval_s(self.schedule, now)

    @property
    def consumer_group(self) -> str:
        """Kafka consumer group mirroring the bronze table's next offsets, for lag tooling."""
        return CONSUMER_GROUP_PREFIX + self.name
