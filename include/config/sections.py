"""The sections of a pipeline file: ``kafka``, ``tables``, ``lag``, ``maintenance``, ``cluster`` and
``cluster.kubernetes``, as pydantic models.

Their ``Field(description=...)`` texts are the configuration reference
(``docs/pipeline-file.md``, :mod:`include.config.reference`). ``kafka``,
``lag``, ``maintenance``, ``cluster`` and ``cluster.kubernetes`` load as they
are written, so these models are also what the rest of the project reads;
``tables`` has defaults that depend on the pipeline's name and the
environment, so it loads into :class:`~include.config.pipeline.TablesConfig`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args

from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic.fields import FieldInfo
from pydantic_core import ArgsKwargs

from include.config.errors import _MISSING, _did_you_mean, _invalid, _problem, _suffix
from include.config.validators import (
    _check_keys,
    _check_memory,
    _check_minutes,
    _check_options,
    _check_topic_pattern,
    _check_topics,
    _choice,
    _connection_id,
    _folder,
    _integer,
    _matching,
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
ClusterProfile = Literal["local_standalone", "existing_master", "kubernetes"]
CLUSTER_PROFILES: tuple[str, ...] = get_args(ClusterProfile)
#: ``cluster.kubernetes.delete_driver_pod`` choices: when the operator removes a finished driver pod.
DriverPodDeletion = Literal["on_success", "always", "never"]
DRIVER_POD_DELETION: tuple[str, ...] = get_args(DriverPodDeletion)
#: Kubernetes names: a DNS-1123 label (namespaces) and subdomain (service
#: accounts, claims, secrets); secret keys are file names.
_K8S_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_K8S_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_K8S_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_IMAGE = re.compile(r"^[^\s]+$")
#: Where the project lives inside the Kubernetes image (``cluster.kubernetes.app_dir``).
DEFAULT_APP_DIR = "/opt/kafka-delta-elt"
#: What profile ``kubernetes`` needs in ``cluster.kubernetes``.
_KUBERNETES_REQUIRED = ("image", "namespace", "service_account", "shared_volume_claim", "shared_dir")
#: What ``existing_master`` (client mode) may set there: the executors' image and namespace.
_KUBERNETES_CLIENT_KEYS = ("image", "namespace")
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
        "a name twice (local disks, NFS), or an s3a:// (s3://) prefix of a store that refuses a PUT with "
        "If-None-Match: * when the name exists (AWS S3 does), reached with tables.storage_connection_id."
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


_K8S_NAME = "a Kubernetes object name (lower-case letters, digits, '-' and '.', at most 253 characters)"


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class KubernetesConfig(_Section):
    """Kubernetes settings of the cluster (section ``cluster.kubernetes``).

    With profile ``kubernetes`` (cluster mode), ``spark-submit`` asks the
    Kubernetes API for a driver pod per job, the driver asks for
    ``cluster.workers`` executor pods, and Spark deletes the executor pods
    when the job ends; the operator then deletes the driver pod (see
    ``delete_driver_pod``). The driver runs in a pod, not on the Airflow
    worker, so:

    - the job code is baked into ``image`` (nothing is uploaded): the
      project's ``spark_jobs/`` folder and the ``--py-files`` archive
      ``kde_jobs.zip`` (``include.spark.spark_submit.package_py_files``) under
      ``app_dir``, and the jars of ``include.spark.jvm_deps.spark_jars()`` (the
      Kafka connector, Delta, spark-avro, protobuf-java and the project's own
      functions) in the image's ``$SPARK_HOME/jars``;
    - the run's request files (preflight result, backfill request,
      transform spec) and the job's summary JSON go through ``shared_dir``,
      a volume mounted at that same path on the Airflow workers and, from
      the claim ``shared_volume_claim``, in the driver and executor pods;
      checkpoints and local table paths must lie inside it too;
    - Kafka client settings come from the Kubernetes secret
      ``kafka_options_secret``, mounted in the driver pod only; they never
      pass through Airflow or the command line.

    Not exercised on a real Kubernetes cluster here: the submit command is
    unit-tested only.

    With profile ``existing_master`` and a ``k8s://`` master (client mode:
    the driver stays on the Airflow worker), only ``image`` and
    ``namespace`` may be given; ``image`` is then required for the executor
    pods (checked when the task runs, as only then is the master known).
    """

    image: Annotated[
        str, _matching(_IMAGE, "a container image reference without spaces, e.g. 'registry/app:1.0'")
    ] = Field(
        description="Required whenever the section is given (it is needed with profile kubernetes, and with "
        "existing_master on a k8s:// master). Container image of the driver and executor pods "
        "(spark.kubernetes.container.image), e.g. registry.example/kafka-delta-elt:1.4. It holds spark_jobs/ "
        "and kde_jobs.zip under app_dir, and the jars of include.spark.jvm_deps.spark_jars() in $SPARK_HOME/jars."
    )
    namespace: (
        Annotated[
            str,
            _matching(
                _K8S_LABEL,
                "a Kubernetes namespace name (lower-case letters, digits and '-', at most 63 characters)",
            ),
        ]
        | None
    ) = Field(
        default=None,
        description="Kubernetes namespace of the pods (spark.kubernetes.namespace): a DNS label. Required "
        "with profile kubernetes; optional with existing_master (the Spark connection's namespace extra, "
        "else default).",
    )
    service_account: Annotated[str, _matching(_K8S_SUBDOMAIN, _K8S_NAME)] | None = Field(
        default=None,
        description="Service account of the driver pod, allowed to create and delete pods, services and "
        "config maps in namespace (spark.kubernetes.authenticate.driver.serviceAccountName). Required with "
        "profile kubernetes.",
    )
    app_dir: Annotated[str, _folder(if_null=DEFAULT_APP_DIR)] = Field(
        default=DEFAULT_APP_DIR,
        description="Absolute path of the project inside image, default /opt/kafka-delta-elt: it holds "
        "spark_jobs/*.py and kde_jobs.zip, submitted as local:// URIs.",
    )
    shared_volume_claim: Annotated[str, _matching(_K8S_SUBDOMAIN, _K8S_NAME)] | None = Field(
        default=None,
        description="Required with profile kubernetes: name of a ReadWriteMany persistent volume claim in "
        "namespace, mounted at shared_dir in the driver and executor pods.",
    )
    shared_dir: Annotated[str, _folder()] | None = Field(
        default=None,
        description="Required with profile kubernetes: absolute path where that volume is mounted, the "
        "same on the Airflow workers and in the pods. Run files live in <shared_dir>/runs/<name>/<run>. "
        "tables.bronze_path, silver_path, quarantine_path, checkpoint_root and transform_checkpoint_root must "
        "lie inside it unless they are URIs.",
    )
    kafka_options_secret: Annotated[str, _matching(_K8S_SUBDOMAIN, _K8S_NAME)] | None = Field(
        default=None,
        description="Name of a Kubernetes secret in namespace whose key kafka_options_key holds the job's "
        "Kafka client settings as a JSON object in the Java client's names (e.g. security.protocol, "
        "sasl.mechanism, sasl.jaas.config), with any non-secret consumer settings besides. Mounted "
        "read-only in the driver pod at /etc/kafka-delta-elt/kafka. Optional (a plaintext broker needs "
        "none). With profile kubernetes, kafka.options must be empty: put them in this secret.",
    )
    kafka_options_key: Annotated[
        str,
        _matching(
            _K8S_SECRET_KEY, "a secret key (letters, digits, '-', '_' and '.')", if_null="kafka-options.json"
        ),
    ] = Field(default="kafka-options.json", description="Key of that secret, default kafka-options.json.")
    registry_secret: Annotated[str, _matching(_K8S_SUBDOMAIN, _K8S_NAME)] | None = Field(
        default=None,
        description="Name of a Kubernetes secret in namespace whose key registry_secret_key holds the schema "
        "registry's settings as a JSON object (url, and username and password if it needs them). Mounted "
        "read-only in the driver pod at /etc/kafka-delta-elt/registry. Required with profile kubernetes when "
        "transform.value_schema names a registry: the credentials never pass through Airflow or the shared "
        "volume.",
    )
    registry_secret_key: Annotated[
        str,
        _matching(
            _K8S_SECRET_KEY,
            "a secret key (letters, digits, '-', '_' and '.')",
            if_null="schema-registry.json",
        ),
    ] = Field(default="schema-registry.json", description="Key of that secret, default schema-registry.json.")
    delete_driver_pod: Annotated[DriverPodDeletion, _choice(DRIVER_POD_DELETION)] = Field(
        default="on_success",
        description="on_success (default): the operator deletes a driver pod that finished well and keeps a "
        "failed one for kubectl logs; always; never.",
    )


#: The backlog up to which a local_standalone run stays in local mode unless its file says otherwise: the
#: largest ``make bench`` measured local mode faster at, below where a cluster of as many cores paid off.
LOCAL_MAX_RECORDS_DEFAULT = 200_000


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class ClusterConfig(_Section):
    """The Spark cluster a run uses (section ``cluster``)."""

    profile: Annotated[ClusterProfile, _choice(CLUSTER_PROFILES)] = Field(
        default="local_standalone",
        description="local_standalone (default): each run starts a Spark standalone master and "
        "cluster.workers workers on 127.0.0.1 and stops them afterwards (setup and teardown tasks). "
        "existing_master: submit in client mode (the driver runs on the Airflow worker) to the running "
        "cluster named by master_connection_id (spark://, yarn or k8s://); no cluster is started or stopped. "
        "kubernetes: submit in cluster mode to the k8s:// master of master_connection_id; Spark creates the "
        "driver and executor pods of each job and removes them (see cluster.kubernetes; unit-tested only, "
        "not run here).",
    )
    workers: Annotated[int, *_integer(1, 8)] = Field(
        default=1,
        description="Integer from 1 to 8, default 1: number of workers a local_standalone run starts (one "
        "executor each); with the other profiles, the number of executors requested "
        "(spark.executor.instances).",
    )
    worker_cores: Annotated[int, *_integer(1)] = Field(
        default=1,
        description="Positive integer, default 1: cores per worker, which is also each executor's "
        "spark.executor.cores.",
    )
    worker_memory: Annotated[str, BeforeValidator(_check_memory)] = Field(
        default="1g",
        description='Spark size string with a unit (k, m, g or t, e.g. "512m", "2g"), default "1g", at '
        "least 450m (Spark's minimum for an executor): what each worker offers, and each executor's "
        "spark.executor.memory. Stored lower-case without a trailing b.",
    )
    master_connection_id: Annotated[str, _connection_id("Spark")] | None = Field(
        default=None,
        description="Id of the Airflow Spark connection whose host is the master URL (spark://, yarn, "
        "k8s://). Required with existing_master and kubernetes (where it must name a k8s://https://... "
        "master), refused with local_standalone. With existing_master, the connection's queue extra (YARN) "
        "and namespace extra (Kubernetes) are used; its deploy-mode extra is overridden by the profile.",
    )
    kubernetes: KubernetesConfig | None = Field(
        default=None,
        description="Section: Kubernetes settings. Required with kubernetes; optional with existing_master "
        "(image, namespace); refused with local_standalone. Null when absent.",
    )
    local_max_records: Annotated[int, *_integer(0)] = Field(
        default=LOCAL_MAX_RECORDS_DEFAULT,
        description="Integer >= 0, default 200000; local_standalone only. A run whose backlog (the preflight's "
        "lag, or a backfill's offsets) is at most this many records runs its Spark application in local mode "
        "inside the driver (local[k], k = workers x worker_cores, at most this machine's cores): no cluster "
        "starts, no executor warms up. On one machine a cluster with as many cores takes longer up to a few "
        "hundred thousand records a run, its start and its executors' warm-up being the difference (make "
        "bench, docs/performance.md). 0 always starts the cluster. The choice and its reason are in "
        "start_cluster's log and the ledger's cluster_choice.",
    )
    records_per_worker: Annotated[int, *_integer(0)] = Field(
        default=0,
        description="Integer >= 0, default 0 (off); local_standalone only. Above local_max_records, the run "
        "starts ceil(backlog / records_per_worker) workers, at least 1 and at most workers; 0 always starts "
        "workers.",
    )

    @property
    def transient(self) -> bool:
        """Whether each run starts and stops its own cluster (setup and teardown tasks)."""
        return self.profile == "local_standalone"

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        profile = data.get("profile", "local_standalone")
        if profile not in CLUSTER_PROFILES:  # the profile's own check says what is wrong
            return data
        if profile != "local_standalone" and data.get("local_max_records") is None:
            data = {**data, "local_max_records": 0}  # sizing to the backlog is local_standalone's alone
        master = data.get("master_connection_id")
        if profile == "local_standalone" and master is not None:
            expected = (
                "no master connection with profile local_standalone (set cluster.profile: existing_master "
                "or kubernetes to use one)"
            )
            raise _invalid(expected, master, at=".master_connection_id")
        if profile != "local_standalone" and master is None:
            expected = f"the id of an Airflow Spark connection (required with profile {profile})"
            raise _invalid(expected, data.get("master_connection_id", _MISSING), at=".master_connection_id")
        k8s = data.get("kubernetes")
        if k8s is None:
            if profile == "kubernetes":
                required = ", ".join(_KUBERNETES_REQUIRED)
                expected = f"a mapping with keys {required} (required with profile kubernetes)"
                raise _invalid(expected, data.get("kubernetes", _MISSING), at=".kubernetes")
            return data
        if profile == "local_standalone":
            expected = "no kubernetes section with profile local_standalone (it runs on this machine)"
            raise _invalid(expected, k8s, at=".kubernetes")
        KubernetesConfig._check_mapping(k8s, ".kubernetes")  # an unknown key is the first thing to fix
        if profile == "existing_master":
            for key in k8s:
                if key not in _KUBERNETES_CLIENT_KEYS:
                    raise _problem(
                        f"expected only {', '.join(_KUBERNETES_CLIENT_KEYS)} with profile existing_master "
                        f"(client mode: the driver runs on the Airflow worker), got {key!r}; "
                        "it applies to profile kubernetes",
                        f".kubernetes{_suffix(key)}",
                    )
        for key in _KUBERNETES_REQUIRED if profile == "kubernetes" else ("image",):
            if k8s.get(key) is None:
                expected = f"a value (required with profile {profile})"
                raise _invalid(expected, k8s.get(key, _MISSING), at=f".kubernetes.{key}")
        return data

    @model_validator(mode="after")
    def _sizing_needs_its_own_cluster(self) -> ClusterConfig:
        for key in ("local_max_records", "records_per_worker"):
            if getattr(self, key) and self.profile != "local_standalone":
                expected = (
                    f"0 or no value with profile {self.profile} (sizing the cluster to the backlog needs the "
                    "run's own cluster: profile local_standalone)"
                )
                raise _invalid(expected, getattr(self, key), at=f".{key}")
        return self
