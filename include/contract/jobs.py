"""One contract per job: its command line, and the names both sides must agree on.

Pure Python, no I/O: the Airflow side builds a job's command line with
``<Job>Args(...).to_args()``; the job parses it with
``<Job>Args.from_args(argv)`` (the argparser is generated from the dataclass).
Each job's summary is in :mod:`include.contract.summaries`. This module ships
to the cluster with ``--py-files`` like the rest of the contract.

Also defined here, once: the run types, the pipeline-name rule, the Delta app
ids of bronze, silver and quarantine, and the DAG's task ids.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Self

from include.contract.errors import (
    JobConfigError,
    MaintenanceConfigError,
    PipelineError,
    StepsFileError,
    TransformError,
)

# --------------------------------------------------------------------------- names both sides share

#: ``--run-type`` of the ingestion job: how the DAG run came about (the trigger form's rebuild action included).
RUN_TYPES = ("scheduled", "manual", "backfill", "rebuild_checkpoint")
#: ``--run-type`` of the backfill job.
BACKFILL_RUN_TYPES = ("manual", "backfill")
#: A pipeline name: the job's ``--pipeline`` and, as is, a valid Airflow dag_id (``^[\w.-]+$``).
PIPELINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

#: The DAG's task ids, which the DAG factory, the operators and the record task name (and XComs are read by).
CHECK_REQUEST_TASK = "check_request"
WAIT_FOR_LAG_TASK = "wait_for_lag"
PREFLIGHT_TASK = "preflight"
START_CLUSTER_TASK = "start_cluster"
STOP_CLUSTER_TASK = "stop_cluster"
INGEST_TASK = "ingest"
TRANSFORM_TASK = "transform"
MAINTAIN_TASK = "maintain"
CHECK_CONTINUITY_TASK = "check_continuity"
MIRROR_OFFSETS_TASK = "mirror_offsets"
RECORD_RUN_TASK = "record_run"
#: The key of a step's XCom (a job task's summary, ``check_continuity``'s report) that says which of
#: Airflow's tries reported it: ``record_run`` records how many tries each step took.
TRY_NUMBER_KEY = "try_number"


def bronze_app_prefix(pipeline: str) -> str:
    """The stem of every Delta app id the ingestion writes to bronze for ``pipeline``."""
    return f"kafka-delta-elt:{pipeline}:bronze"


def bronze_app_id(pipeline: str, epoch: int) -> str:
    """Delta ``txnAppId`` of one checkpoint epoch of a pipeline's ingestion.

    A new checkpoint restarts Spark's batch ids at 0; Delta silently skips a
    write whose ``txnVersion`` is not above the one recorded for its app id,
    so each checkpoint epoch gets its own app id.
    """
    return f"{bronze_app_prefix(pipeline)}:epoch-{epoch}"


def lock_app_id(pipeline: str) -> str:
    """Delta ``txnAppId`` whose version is the newest run-lock epoch that wrote to a table of ``pipeline``.

    The fencing token: a job refuses to commit to a table that records a
    newer epoch than its own (a run that took the lock over wrote there), and
    a bronze commit carries its epoch under this id atomically. Outside the
    ``...:bronze:`` app ids, which say where bronze stands.
    """
    return f"kafka-delta-elt:{pipeline}:lock"


#: Stem of the silver app ids: ``kde-silver.<pipeline>.e<epoch>``.
SILVER_APP_PREFIX = "kde-silver"
#: Stem of the quarantine app ids: ``kde-quarantine.<pipeline>.e<epoch>``.
QUARANTINE_APP_PREFIX = "kde-quarantine"


def silver_app_id(pipeline: str, epoch: int) -> str:
    """Delta ``txnAppId`` of every silver batch commit of one transform epoch.

    Its version (``silver_stand.silver_txn_version``) is where silver stands
    in bronze: part of the table's state, so Delta's log cleanup never removes
    it. One app id per epoch, because a new epoch may restart inside the
    version the last one ended in (its versions must only grow under one app
    id, or Delta skips the write).
    """
    return f"{SILVER_APP_PREFIX}.{pipeline}.e{epoch}"


def quarantine_app_id(pipeline: str, epoch: int) -> str:
    """Delta ``txnAppId`` of the quarantine appends of one transform epoch (a replayed batch is skipped)."""
    return f"{QUARANTINE_APP_PREFIX}.{pipeline}.e{epoch}"


# --------------------------------------------------------------------------- command lines


class ContractArgumentParser(argparse.ArgumentParser):
    """``argparse``, but a bad argument raises ``error_type`` instead of exiting.

    A job's caller prints the message and exits 2 before any session starts;
    plain ``argparse`` would print its usage and ``sys.exit(2)`` itself (on
    Python 3.11 even with ``exit_on_error=False`` for a missing or unknown
    argument). ``--help`` prints and exits 0 as usual.
    """

    def __init__(self, *args: Any, error_type: type[Exception], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error_type = error_type

    def error(self, message: str) -> NoReturn:
        """Raise ``error_type`` with argparse's message, which names the argument and what it expected."""
        raise self.error_type(f"{message} (--help lists the arguments of {self.prog})")


def positive(cast: type[int] | type[float]) -> Callable[[str], int | float]:
    """An argparse ``type``: a positive, finite ``cast`` (argparse puts the argument's name before the error)."""
    expected = "a positive integer" if cast is int else "a positive number"

    def parse(text: str) -> int | float:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
        return value

    return parse


def _arg(
    *,
    help: str | None = None,
    choices: Sequence[str] | None = None,
    kind: str = "value",
    parse: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    default: Any = MISSING,
) -> Any:
    """A dataclass field of a job's command line.

    ``kind``: ``value`` (``--flag=value``), ``list`` (repeatable flag, a tuple),
    ``csv`` (one flag, comma-separated, a tuple), ``off`` (a bool that
    defaults to ``True`` and is turned off by ``--no-<name>``). A field
    without a default is a required flag.
    """
    meta = {"help": help, "choices": choices, "kind": kind, "parse": parse, "metavar": metavar}
    if default is MISSING:
        return field(metadata=meta)
    if isinstance(default, (list, tuple, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def _lock_epoch() -> Any:
    """``--lock-epoch``: the run lock's epoch the run holds; the job refuses to commit where a newer one wrote."""
    return _arg(default=None, parse=positive(int), help="the run lock's epoch this run holds")


def _flag(name: str, kind: str) -> str:
    return f"--no-{name.replace('_', '-')}" if kind == "off" else f"--{name.replace('_', '-')}"


class JobArgs:
    """Base of a job's arguments: a frozen dataclass whose fields are its flags (see :func:`_arg`)."""

    #: The job's program name (its module under ``spark_jobs/``).
    prog: ClassVar[str] = ""
    #: What the job does, for ``--help``.
    description: ClassVar[str] = ""
    #: The error a bad argument raises (the job exits 2 with its message).
    error_type: ClassVar[type[PipelineError]] = JobConfigError
    if TYPE_CHECKING:  # set by @dataclass on each job's arguments class; what fields() reads
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @classmethod
    def parser(cls) -> ContractArgumentParser:
        """The job's argparser, generated from the dataclass's fields."""
        p = ContractArgumentParser(
            prog=cls.prog, description=cls.description or None, error_type=cls.error_type
        )
        for f in fields(cls):
            meta = f.metadata
            kind = meta.get("kind", "value")
            required = f.default is MISSING and f.default_factory is MISSING
            if kind == "off":
                p.add_argument(_flag(f.name, kind), dest=f.name, action="store_false", help=meta.get("help"))
                continue
            options: dict[str, Any] = {
                "dest": f.name,
                "help": meta.get("help"),
                "metavar": meta.get("metavar"),
            }
            if meta.get("choices"):
                options["choices"] = list(meta["choices"])
            if meta.get("parse"):
                options["type"] = meta["parse"]
            if kind == "list":
                options.update(action="append", default=[], required=required)
            elif required:
                options["required"] = True
            else:
                options["default"] = None if kind == "csv" else f.default
            p.add_argument(_flag(f.name, kind), **options)
        return p

    @classmethod
    def from_args(cls, argv: Sequence[str]) -> Self:
        """Parse a command line; raises :attr:`error_type` naming the argument on a bad one."""
        parsed = vars(cls.parser().parse_args(list(argv)))
        values = {}
        for f in fields(cls):
            value = parsed[f.name]
            kind = f.metadata.get("kind", "value")
            if kind == "list":
                value = tuple(value)
            elif kind == "csv":
                value = tuple(v.strip() for v in (value or "").split(",") if v.strip())
            values[f.name] = value
        return cls(**values)

    def to_args(self) -> list[str]:
        """The command line, every flag as ``--flag=value`` so a value starting with ``-`` is never a flag."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            kind = f.metadata.get("kind", "value")
            if kind == "off":
                if not value:
                    out.append(_flag(f.name, kind))
            elif kind == "list":
                out += [f"{_flag(f.name, kind)}={v}" for v in value]
            elif kind == "csv":
                if value:
                    out.append(f"{_flag(f.name, kind)}={','.join(value)}")
            elif value is not None:
                out.append(f"{_flag(f.name, kind)}={value}")
        return out


def _describe(value: Any) -> str:
    """A value as the pipeline file's messages show it: ``null``, ``true (bool)``, ``'x' (str)``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (bool)"
    text = repr(value)
    return f"{text[:77] + '...' if len(text) > 80 else text} ({type(value).__name__})"


def _check_pipeline(error: type[PipelineError], name: str) -> None:
    if not PIPELINE_NAME.fullmatch(name):
        raise error(f"--pipeline: expected letters, digits, '.', '_' or '-', got {name!r}", pipeline=name)


@dataclass(frozen=True, kw_only=True)
class IngestArgs(JobArgs):
    """``spark_jobs/kafka_to_bronze.py``: drain new Kafka records into the bronze table."""

    prog: ClassVar[str] = "kafka_to_bronze"
    description: ClassVar[str] = "Drain new Kafka records into a Delta bronze table."
    error_type: ClassVar[type[PipelineError]] = JobConfigError

    # The order of the fields is the order of the command line.
    pipeline: str = _arg(help="pipeline name; part of the Delta txnAppId")
    bootstrap_servers: str = _arg()
    topics: tuple[str, ...] = _arg(kind="csv", default=(), help="comma-separated topic names")
    topic_pattern: str | None = _arg(default=None, help="Java regex of topic names (instead of --topics)")
    bronze_path: str = _arg()
    checkpoint_root: str = _arg(help="folder holding one checkpoint per epoch")
    starting_offsets: str = _arg(
        default="earliest",
        choices=("earliest", "latest"),
        help="where partitions start on the pipeline's first run",
    )
    max_offsets_per_trigger: int | None = _arg(default=None, parse=positive(int))
    run_id: str = _arg(default="manual")
    run_type: str = _arg(default="manual", choices=RUN_TYPES)
    summary_path: str | None = _arg(default=None, help="write the run summary JSON here")
    lock_epoch: int | None = _lock_epoch()
    table_property: tuple[str, ...] = _arg(
        kind="list",
        default=(),
        metavar="KEY=VALUE",
        help="a Delta table property bronze carries (repeatable), e.g. its retention",
    )
    admin_timeout_s: float | None = _arg(default=None, parse=positive(float), help="default 30")
    kafka_options_file: str | None = _arg(
        default=None, help="JSON object of extra Kafka client settings (e.g. security); not logged"
    )
    preflight_file: str | None = _arg(
        default=None,
        help='JSON from the preflight check: {"topic_ids": {topic: id}, "accepted_gaps": [gap, ...]}',
    )
    rebuild_checkpoint: str | None = _arg(
        default=None,
        metavar="REASON",
        help="start a new checkpoint epoch at the table's next offsets, for this reason",
    )

    @classmethod
    def for_pipeline(
        cls, cfg: Any, *, bootstrap_servers: str, run_id: str, run_type: str, summary_path: str
    ) -> IngestArgs:
        """The ingestion's arguments for one run of the pipeline ``cfg`` (a ``PipelineConfig``).

        ``kafka.options`` and the connection's security settings are not
        arguments: they reach the job through ``--kafka-options-file``, so they
        never show in a command line. Raises ``ValueError`` naming a bad value.
        """
        for arg, value in (
            ("bootstrap_servers", bootstrap_servers),
            ("run_id", run_id),
            ("summary_path", summary_path),
        ):
            if not isinstance(value, str) or not value.strip():
                raise JobConfigError(f"{arg}: expected a non-empty string, got {_describe(value)}")
        if run_type not in RUN_TYPES:
            raise JobConfigError(
                f"run_type: expected one of {', '.join(map(repr, RUN_TYPES))}, got {_describe(run_type)}"
            )
        kafka, tables = cfg.kafka, cfg.tables
        return cls(
            pipeline=cfg.name,
            bootstrap_servers=bootstrap_servers,
            bronze_path=tables.bronze_path,
            checkpoint_root=tables.checkpoint_root,
            topics=() if kafka.topic_pattern is not None else tuple(kafka.topics),
            topic_pattern=kafka.topic_pattern,
            starting_offsets=kafka.starting_offsets,
            max_offsets_per_trigger=kafka.max_offsets_per_trigger,
            run_id=run_id,
            run_type=run_type,
            summary_path=summary_path,
            table_property=tuple(f"{k}={v}" for k, v in tables.retention_properties().items()),
        )

    def check(self) -> IngestArgs:
        """Rules across flags; raises :class:`JobConfigError` naming the argument."""
        if bool(self.topics) == bool(self.topic_pattern):
            raise JobConfigError("give exactly one of --topics (a list) or --topic-pattern (a regex)")
        _check_pipeline(JobConfigError, self.pipeline)
        if self.topic_pattern:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                raise JobConfigError(
                    f"--topic-pattern: not a valid regex ({exc}): {self.topic_pattern!r}"
                ) from None
        return self


@dataclass(frozen=True, kw_only=True)
class BackfillArgs(JobArgs):
    """``spark_jobs/kafka_backfill.py``: insert the records of offset ranges bronze lacks."""

    prog: ClassVar[str] = "kafka_backfill"
    description: ClassVar[str] = "Insert the records of Kafka offset ranges bronze lacks."
    error_type: ClassVar[type[PipelineError]] = JobConfigError

    pipeline: str = _arg()
    bootstrap_servers: str = _arg()
    bronze_path: str = _arg()
    request_file: str = _arg(
        help='JSON: {"action", "reason", "requested_by", "ranges": [{topic, partition, from, '
        'until}], "time_range": {"from": iso, "to": iso} | null}'
    )
    run_id: str = _arg(default="manual")
    run_type: str = _arg(default="manual", choices=BACKFILL_RUN_TYPES)
    summary_path: str | None = _arg(default=None)
    lock_epoch: int | None = _lock_epoch()
    admin_timeout_s: float | None = _arg(default=None, parse=positive(float), help="default 30")
    kafka_options_file: str | None = _arg(default=None)


@dataclass(frozen=True, kw_only=True)
class TransformArgs(JobArgs):
    """``spark_jobs/bronze_to_silver.py``: bronze's new records into silver and quarantine."""

    prog: ClassVar[str] = "bronze_to_silver"
    error_type: ClassVar[type[PipelineError]] = TransformError

    pipeline: str = _arg()
    bronze_path: str = _arg()
    silver_path: str = _arg()
    quarantine_path: str = _arg()
    checkpoint_root: str = _arg()
    spec_file: str = _arg()
    run_id: str = _arg()
    summary_path: str | None = _arg(default=None)
    lock_epoch: int | None = _lock_epoch()
    max_files_per_trigger: int | None = _arg(default=None, parse=positive(int))
    table_property: tuple[str, ...] = _arg(kind="list", default=(), metavar="KEY=VALUE")
    registry_file: str | None = _arg(
        default=None, help="JSON {url, username, password} of the schema registry"
    )
    replay_file: str | None = _arg(
        default=None,
        help="JSON selection of quarantined records to replay after the batches (replay_quarantine)",
    )


#: The tables maintenance may touch, in the order it does them.
MAINTAINED_TABLES = ("bronze", "silver", "quarantine")


@dataclass(frozen=True, kw_only=True)
class MaintainArgs(JobArgs):
    """``spark_jobs/maintain_tables.py``: compact, VACUUM and checkpoint a pipeline's tables."""

    prog: ClassVar[str] = "maintain_tables"
    description: ClassVar[str] = "Compact, VACUUM and checkpoint a pipeline's tables."
    error_type: ClassVar[type[PipelineError]] = MaintenanceConfigError

    pipeline: str = _arg()
    table: tuple[str, ...] = _arg(kind="list", help="<bronze|silver|quarantine>=<location>")
    zorder_by: tuple[str, ...] = _arg(kind="list", default=(), help="<table>=<column>[,<column>...]")
    optimize: bool = _arg(kind="off", default=True)
    vacuum: bool = _arg(kind="off", default=True)
    checkpoint: bool = _arg(kind="off", default=True)
    run_id: str = _arg(default="manual")
    summary_path: str | None = _arg(default=None)
    lock_epoch: int | None = _lock_epoch()

    @classmethod
    def for_tables(
        cls,
        pipeline: str,
        tables: Mapping[str, str],
        *,
        zorder_by: Mapping[str, Sequence[str]],
        optimize: bool,
        vacuum: bool,
        checkpoint: bool,
        run_id: str,
        summary_path: str,
        lock_epoch: int | None = None,
    ) -> MaintainArgs:
        """The arguments for ``tables`` (name -> location); Z-order columns of other tables are left out."""
        return cls(
            pipeline=pipeline,
            table=tuple(f"{n}={p}" for n, p in tables.items()),
            zorder_by=tuple(f"{n}={','.join(c)}" for n, c in zorder_by.items() if n in tables),
            optimize=optimize,
            vacuum=vacuum,
            checkpoint=checkpoint,
            run_id=run_id,
            summary_path=summary_path,
            lock_epoch=lock_epoch,
        )


@dataclass(frozen=True, kw_only=True)
class StepsArgs(JobArgs):
    """``spark_jobs/run_steps.py``: a run's steps in one Spark application."""

    prog: ClassVar[str] = "run_steps"
    description: ClassVar[str] = "Run a run's job steps in one Spark application."
    error_type: ClassVar[type[PipelineError]] = StepsFileError

    steps_file: str = _arg(help="JSON: the pipeline and each step's job and arguments")
