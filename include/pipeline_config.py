"""Pipeline configuration: one YAML file per pipeline, typed and validated when loaded.

A pipeline file (``include/pipelines/<name>.yaml``) declares what one Airflow
DAG ingests and how: topics, starting position, tables, schedule, lag
thresholds, data-loss policy, cluster profile and, optionally, how bronze
records become silver rows (the ``transform`` section). :func:`load_pipeline` turns it
into a frozen :class:`PipelineConfig` or raises :class:`PipelineConfigError`
whose message names the file, the field and what was expected against what
was found, e.g.::

    include/pipelines/orders.yaml: kafka.max_offsets_per_trigger: expected a positive integer, got 'lots' (str)

The DAG factory calls :func:`load_pipelines` while Airflow parses DAG files, so
this module imports only the standard library, PyYAML, :mod:`include.settings`
and :mod:`include.transform_spec`: no Kafka, Spark or Airflow, no network.

Broker addresses and security settings never appear in a pipeline file; they
live in the Airflow connection named by ``kafka.connection_id``. Keys that look
like them are rejected wherever they appear.

The class docstrings below are the configuration reference: each ``Attributes``
entry is one key of the file.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from include import settings
from include.transform_spec import (
    DEFAULT_MAX_VALUE_BYTES,
    FIELD_NAME,
    FORMATS,
    KEY_TYPES,
    NEW_FIELD_POLICIES,
    NUMERIC_TYPES,
    ORDERING_TYPES,
    SIMPLE_TYPES,
    SYSTEM_PREFIX,
    TOMBSTONE_POLICIES,
    FieldSpec,
    TransformSpec,
    is_decimal,
    normalize_type,
)

#: Prefix of the consumer group that mirrors a pipeline's offsets (``kafka-delta-elt.<name>``).
CONSUMER_GROUP_PREFIX = "kafka-delta-elt."
#: Delta's own defaults for ``delta.logRetentionDuration`` and
#: ``delta.deletedFileRetentionDuration``; the second is also the floor
#: (VACUUM's safety check refuses less).
DEFAULT_LOG_RETENTION_DAYS = 30
DEFAULT_DELETED_FILE_RETENTION_DAYS = 7
#: Environment variable overriding the default ``tables.lakehouse_root``.
LAKEHOUSE_ROOT_ENV = "KDE_LAKEHOUSE_ROOT"

STARTING_OFFSETS = ("earliest", "latest")
DATA_LOSS_POLICIES = ("fail", "record_and_continue")
CLUSTER_PROFILES = ("local_standalone", "existing_master", "kubernetes")
#: ``cluster.kubernetes.delete_driver_pod`` choices: when the operator removes a finished driver pod.
DRIVER_POD_DELETION = ("on_success", "always", "never")
#: Airflow's cron presets (``airflow.utils.dates.cron_presets``). ``@once`` and
#: ``@continuous`` are left out: a pipeline runs on a cron or by hand (null).
SCHEDULE_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
#: ``--run-type`` choices of ``spark_jobs/kafka_to_bronze.py``; a unit test keeps
#: this equal to ``spark_jobs.ingest_plan.RUN_TYPES`` (not imported here so that
#: loading configs at DAG-parse time stays free of the job's modules).
RUN_TYPES = ("scheduled", "manual", "backfill", "rebuild_checkpoint")

#: Same rule as the job's ``--pipeline`` (``spark_jobs.ingest_plan``), which is
#: also a valid Airflow dag_id (``^[\w.-]+$``, at most 250 characters); the
#: length cap leaves room for a prefix or suffix the DAG factory may add.
NAME_MAX_LEN = 200
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: Kafka's legal topic names (``org.apache.kafka.common.internals.Topic``).
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
#: Airflow's ``RE_SANITIZE_CONN_ID`` and ``CONN_ID_MAX_LEN``.
_CONN_ID = re.compile(r"^[\w#!()\-.:/\\]{1,250}$")
_BROKER_LIST = re.compile(r"^[\w.-]+:\d+(,\s*[\w.-]+:\d+)*$")
#: Airflow's ``TAG_MAX_LEN``.
TAG_MAX_LEN = 100
_OPTION_KEY = re.compile(r"^[a-z][a-z0-9]*(\.[a-z0-9]+)*$")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_MEMORY = re.compile(r"^(\d+)([kmgt])b?$", re.IGNORECASE)
#: Kubernetes names: a DNS-1123 label (namespaces) and subdomain (service
#: accounts, claims, secrets); secret keys are file names.
_K8S_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_K8S_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_K8S_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_IMAGE = re.compile(r"^[^\s]+$")
#: Spark refuses executors with less than 1.5 x its 300 MiB reserved memory.
_MIN_MEMORY_BYTES = 450 * 1024**2
#: Largest ``transform.max_value_bytes``: 64 MiB.
MAX_VALUE_BYTES_LIMIT = 64 * 1024**2

#: Consumer settings a pipeline file may not set in ``kafka.options``, and why.
_MANAGED_OPTIONS = {
    "group.id": "the pipeline's consumer group is managed by the pipeline, not by the Spark source",
    "auto.offset.reset": "use kafka.starting_offsets instead",
    "enable.auto.commit": "Spark's Kafka source refuses it; offsets are tracked in the bronze table",
    "key.deserializer": "Spark's Kafka source refuses it; keys and values are always read as bytes",
    "value.deserializer": "Spark's Kafka source refuses it; keys and values are always read as bytes",
    "interceptor.classes": "Spark's Kafka source refuses it",
    "isolation.level": "the ingestion job always reads with read_committed",
}


class PipelineConfigError(ValueError):
    """A pipeline file is invalid. The message is ``<file>: <field>: <what was expected, what was found>``."""

    def __init__(self, file: str, field: str, problem: str) -> None:
        self.file = file
        self.field = field
        self.problem = problem
        super().__init__(f"{file}: {field}: {problem}")

    def __reduce__(self):  # keeps the error picklable despite the custom __init__
        return (type(self), (self.file, self.field, self.problem))


# --------------------------------------------------------------------------- the configuration


@dataclass(frozen=True)
class KafkaConfig:
    """Where the records come from (section ``kafka``).

    Attributes:
        connection_id: Required. Id of the Airflow connection to the Kafka
            cluster. Bootstrap servers and every security setting (SASL, SSL,
            passwords) live in that connection, never in the pipeline file.
        topics: List of topic names to ingest. Give exactly one of ``topics``
            and ``topic_pattern``.
        topic_pattern: Regular expression of topic names to ingest (Spark's
            ``subscribePattern``; checked with Python's ``re``, which agrees
            with Java for ordinary patterns). Give exactly one of ``topics``
            and ``topic_pattern``.
        starting_offsets: ``earliest`` (default) or ``latest``: where
            partitions start on the pipeline's first run. Later runs resume
            where the bronze table stands; partitions added later start at
            their earliest offset.
        max_offsets_per_trigger: Positive integer, or null (default) for no
            cap: at most this many records per micro-batch (Spark's
            ``maxOffsetsPerTrigger``). A larger backlog is written as several
            Delta commits in the same run.
        options: Mapping of extra, non-secret Kafka consumer settings, e.g.
            ``max.poll.records: "500"``. Keys are Kafka's own names without a
            ``kafka.`` prefix; values are strings (quote numbers and booleans).
            Settings Spark or the pipeline manage (``group.id``,
            ``auto.offset.reset``, ``isolation.level``, deserializers, ...) are
            refused.
    """

    connection_id: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TablesConfig:
    """Where the records go (section ``tables``).

    Relative local paths in the file are taken from the project folder (not
    from the working directory, which differs between Airflow's processes);
    URIs such as ``s3a://bucket/lake`` are kept as written. The six tables and
    folders below (bronze, silver, quarantine, ledger and both checkpoint
    folders) must lie apart: none may be another or sit inside another. The
    silver ones have their defaults even when the pipeline has no
    ``transform`` section.

    Attributes:
        lakehouse_root: Folder or URI under which the pipeline's tables and
            checkpoints live. Default: the environment variable
            ``KDE_LAKEHOUSE_ROOT`` if set, else ``<project>/var/lakehouse``
            (``KDE_VAR_DIR``/lakehouse).
        bronze_path: Location of the Delta bronze table. Default:
            ``<lakehouse_root>/<name>/bronze``.
        checkpoint_root: Folder holding the job's Spark checkpoints, one per
            epoch. Default: ``<lakehouse_root>/<name>/_checkpoints/bronze``.
            Must be neither the bronze table's folder nor inside it (nor the
            other way round). The ingestion job reads it with local file I/O
            today, so it must be a local or mounted path.
        ledger_path: Location of the run-ledger Delta table (one row per DAG
            run: ranges, rows, lag, outcome). Default:
            ``<lakehouse_root>/<name>/_runs``.
        silver_path: Location of the Delta silver table the ``transform``
            writes (one row per key). Default: ``<lakehouse_root>/<name>/silver``.
        quarantine_path: Location of the Delta table of records the
            ``transform`` refused (with the reason). Default:
            ``<lakehouse_root>/<name>/quarantine``.
        transform_checkpoint_root: Folder holding the transform job's
            checkpoints. Default: ``<lakehouse_root>/<name>/_checkpoints/silver``.
        log_retention_days: Days Delta keeps each table's commit files
            (``delta.logRetentionDuration`` of bronze, silver, quarantine and
            the ledger). Default 30, Delta's own. It bounds time travel and
            how long a commit's detail (ranges, counts) and a ``RESTORE``
            stay visible; where a table stands does not depend on it (it is
            in the table's state). At least ``deleted_file_retention_days``.
        deleted_file_retention_days: Days a file a commit removed stays on
            disk before ``VACUUM`` may delete it (``delta.deletedFileRetentionDuration``).
            Default 7, and never less: Delta's safety default, which protects
            readers in flight, the transform's stream reading bronze versions
            it has not read yet, and backfills by time travel.
    """

    lakehouse_root: str
    bronze_path: str
    checkpoint_root: str
    ledger_path: str
    silver_path: str
    quarantine_path: str
    transform_checkpoint_root: str
    log_retention_days: int = DEFAULT_LOG_RETENTION_DAYS
    deleted_file_retention_days: int = DEFAULT_DELETED_FILE_RETENTION_DAYS

    def retention_properties(self) -> dict[str, str]:
        """The Delta table properties the pipeline's tables carry for its retention settings."""
        return {
            "delta.logRetentionDuration": f"interval {self.log_retention_days} days",
            "delta.deletedFileRetentionDuration": f"interval {self.deleted_file_retention_days} days",
        }


@dataclass(frozen=True)
class LagConfig:
    """When a run has enough new data to start a cluster (section ``lag``).

    Attributes:
        min_records: Integer >= 0, default 1. The lag sensor lets the run
            proceed once the total lag (new records over all partitions) is at
            least this many records.
        max_wait_minutes: Positive number of minutes, default 60. When fewer
            than ``min_records`` are waiting, the run proceeds anyway once the
            oldest of them has waited this long in Kafka, so a trickle is
            never held back forever. With no new record at all the run is
            skipped at once (no cluster is started).
    """

    min_records: int = 1
    max_wait_minutes: float = 60.0


@dataclass(frozen=True)
class KubernetesConfig:
    """Kubernetes settings of the cluster (section ``cluster.kubernetes``).

    With profile ``kubernetes`` (cluster mode), ``spark-submit`` asks the
    Kubernetes API for a driver pod per job, the driver asks for
    ``cluster.workers`` executor pods, and Spark deletes the executor pods
    when the job ends; the operator then deletes the driver pod (see
    ``delete_driver_pod``). The driver runs in a pod, not on the Airflow
    worker, so:

    - the job code is baked into ``image`` (nothing is uploaded): the
      project's ``spark_jobs/`` folder and the ``--py-files`` archive
      ``kde_jobs.zip`` (``include.spark_submit.package_py_files``) under
      ``app_dir``, and the Kafka connector and Delta jars that
      ``include/jvm_deps.py`` pins in the image's ``$SPARK_HOME/jars``;
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

    Attributes:
        image: Required. Container image of the driver and executor pods
            (``spark.kubernetes.container.image``), e.g.
            ``registry.example/kafka-delta-elt:1.4``.
        namespace: Kubernetes namespace of the pods
            (``spark.kubernetes.namespace``): a DNS label. Required with
            profile ``kubernetes``; optional with ``existing_master`` (the
            Spark connection's ``namespace`` extra, else ``default``).
        service_account: Service account of the driver pod, allowed to
            create and delete pods, services and config maps in
            ``namespace`` (``spark.kubernetes.authenticate.driver.serviceAccountName``).
            Required with profile ``kubernetes``.
        app_dir: Absolute path of the project inside ``image``, default
            ``/opt/kafka-delta-elt``: it holds ``spark_jobs/*.py`` and
            ``kde_jobs.zip``, submitted as ``local://`` URIs.
        shared_volume_claim: Required with profile ``kubernetes``: name of a
            ReadWriteMany persistent volume claim in ``namespace``, mounted at
            ``shared_dir`` in the driver and executor pods.
        shared_dir: Required with profile ``kubernetes``: absolute path where
            that volume is mounted, the same on the Airflow workers and in
            the pods. Run files live in ``<shared_dir>/runs/<name>/<run>``.
            ``tables.checkpoint_root`` and ``tables.transform_checkpoint_root``
            must lie inside it, and so must ``tables.bronze_path``,
            ``silver_path`` and ``quarantine_path`` unless they are URIs.
        kafka_options_secret: Name of a Kubernetes secret in ``namespace``
            whose key ``kafka_options_key`` holds the job's Kafka client
            settings as a JSON object in the Java client's names (e.g.
            ``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``),
            with any non-secret consumer settings besides. Mounted read-only
            in the driver pod at ``/etc/kafka-delta-elt/kafka``. Optional
            (a plaintext broker needs none). With profile ``kubernetes``,
            ``kafka.options`` must be empty: put them in this secret.
        kafka_options_key: Key of that secret, default ``kafka-options.json``.
        delete_driver_pod: ``on_success`` (default): the operator deletes a
            driver pod that finished well and keeps a failed one for
            ``kubectl logs``; ``always``; ``never``.
    """

    image: str
    namespace: str | None = None
    service_account: str | None = None
    app_dir: str = "/opt/kafka-delta-elt"
    shared_volume_claim: str | None = None
    shared_dir: str | None = None
    kafka_options_secret: str | None = None
    kafka_options_key: str = "kafka-options.json"
    delete_driver_pod: str = "on_success"


@dataclass(frozen=True)
class ClusterConfig:
    """The Spark cluster a run uses (section ``cluster``).

    Attributes:
        profile: ``local_standalone`` (default): each run starts a Spark
            standalone master and ``workers`` workers on 127.0.0.1 and stops
            them afterwards (setup and teardown tasks). ``existing_master``:
            submit in client mode (the driver runs on the Airflow worker) to
            the running cluster named by ``master_connection_id``
            (``spark://``, ``yarn`` or ``k8s://``); no cluster is started or
            stopped. ``kubernetes``: submit in cluster mode to the
            ``k8s://`` master of ``master_connection_id``; Spark creates the
            driver and executor pods of each job and removes them (see
            :class:`KubernetesConfig`; unit-tested only, not run here).
        workers: Integer from 1 to 8, default 1: number of workers a
            ``local_standalone`` run starts (one executor each); with the
            other profiles, the number of executors requested
            (``spark.executor.instances``).
        worker_cores: Positive integer, default 1: cores per worker, which is
            also each executor's ``spark.executor.cores``.
        worker_memory: Spark size string with a unit (``k``, ``m``, ``g`` or
            ``t``, e.g. ``"512m"``, ``"2g"``), default ``"1g"``, at least
            ``450m`` (Spark's minimum for an executor): what each worker
            offers, and each executor's ``spark.executor.memory``. Stored
            lower-case without a trailing ``b``.
        master_connection_id: Id of the Airflow Spark connection whose host is
            the master URL (``spark://``, ``yarn``, ``k8s://``). Required with
            ``existing_master`` and ``kubernetes`` (where it must name a
            ``k8s://https://...`` master), refused with ``local_standalone``.
            With ``existing_master``, the connection's ``queue`` extra (YARN)
            and ``namespace`` extra (Kubernetes) are used; its
            ``deploy-mode`` extra is overridden by the profile.
        kubernetes: Section: Kubernetes settings (see
            :class:`KubernetesConfig`). Required with ``kubernetes``;
            optional with ``existing_master`` (``image``, ``namespace``);
            refused with ``local_standalone``. Null when absent.
        local_max_records: Integer >= 0, default 0 (off); ``local_standalone``
            only. A run whose backlog (the preflight's lag, or a backfill's
            offsets) is at most this many records runs its Spark application
            in local mode inside the driver (``local[k]``, k = ``workers`` x
            ``worker_cores``, at most this machine's cores): no cluster
            starts, no executor warms up. The choice and its reason are in
            ``start_cluster``'s log and the ledger's ``cluster_choice``.
        records_per_worker: Integer >= 0, default 0 (off); ``local_standalone``
            only. Above ``local_max_records``, the run starts
            ceil(backlog / records_per_worker) workers, at least 1 and at
            most ``workers``; 0 always starts ``workers``.
    """

    profile: str = "local_standalone"
    workers: int = 1
    worker_cores: int = 1
    worker_memory: str = "1g"
    master_connection_id: str | None = None
    kubernetes: KubernetesConfig | None = None
    local_max_records: int = 0
    records_per_worker: int = 0

    @property
    def transient(self) -> bool:
        """Whether each run starts and stops its own cluster (setup and teardown tasks)."""
        return self.profile == "local_standalone"


@dataclass(frozen=True)
class PipelineConfig:
    """One pipeline: the top level of a pipeline file.

    Attributes:
        name: Pipeline name, default the file name without ``.yaml``: letters,
            digits, ``_``, ``.`` and ``-``, starting with a letter or digit, at
            most 200 characters. It names the DAG, the table folders and the
            Delta ``txnAppId``; renaming a pipeline starts it afresh.
        description: Free text shown with the DAG. Default empty.
        kafka: Required section: the source (see :class:`KafkaConfig`).
        tables: Section: the target locations (see :class:`TablesConfig`).
        schedule: Required key: a 5-field cron expression (``minute hour
            day-of-month month day-of-week``, e.g. ``"*/10 * * * *"``), one of
            the presets ``@hourly``, ``@daily``, ``@weekly``, ``@monthly``,
            ``@quarterly``, ``@yearly``, or null for manual runs only.
        lag: Section: lag sensor thresholds (see :class:`LagConfig`).
        data_loss_policy: ``fail`` (default): a run stops before starting the
            cluster when Kafka retention deleted records the table has not
            read yet. ``record_and_continue``: the run records the gap
            (partition, offsets, record count) and continues after it.
        cluster: Section: the Spark cluster (see :class:`ClusterConfig`).
        retries: Integer from 0 to 10, default 2: Airflow retries per task.
        tags: List of strings, default empty: Airflow DAG tags (at most 100
            characters each, no duplicates).
        transform: Optional section: how bronze records become silver rows
            (a :class:`~include.transform_spec.TransformSpec`); null (the
            default) when absent. Keys:

            - ``format``: ``json`` (default, the only one): each record value
              is a JSON object.
            - ``schema``: mapping of field name to its type (``status:
              string``) or to a mapping with the keys ``type`` (required),
              ``required`` (true/false, default false), ``minimum`` and
              ``maximum`` (numbers; int, long, double and decimal fields),
              ``allowed`` (non-empty list of distinct strings for string
              fields, of integers for int and long fields) and ``max_length``
              (positive integer; string and json fields). Types: ``string``,
              ``int``, ``long``, ``double``, ``boolean``, ``date``,
              ``timestamp``, ``json`` or ``decimal(p,s)`` (precision 1-38,
              scale 0-p; quote it inside ``{...}``, where the comma splits).
              Field names: letters, digits and ``_``, starting with a letter,
              at most 128 characters (``_`` names are silver's own columns);
              no two may differ only in case (Delta column names are
              case-insensitive).
            - ``schema_file``: instead of ``schema`` (give exactly one): a
              YAML file holding that same mapping; a relative path is taken
              from the pipeline file's folder.
            - ``key``: required: a field name or a list of them, the silver
              table's MERGE key; each of type string, int, long, date or
              boolean. Key fields are required.
            - ``ordering``: required: the field telling which record of a key
              is newer (int, long, double, date, timestamp or string; not a
              key field). It is required.
            - ``tombstones``: ``quarantine`` (default) or ``delete`` (a record
              with a null value deletes its key).
            - ``new_fields``: ``ignore`` (default) or ``add`` (undeclared
              fields become silver columns).
            - ``max_value_bytes``: positive integer, at most 64 MiB, default
              1048576: larger record values go to quarantine.
        source_path: Not a key: the file this configuration was loaded from,
            as shown in error messages.
    """

    name: str
    kafka: KafkaConfig
    tables: TablesConfig
    schedule: str | None
    source_path: str
    description: str = ""
    lag: LagConfig = field(default_factory=LagConfig)
    data_loss_policy: str = "fail"
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    retries: int = 2
    tags: tuple[str, ...] = ()
    transform: TransformSpec | None = None

    @property
    def consumer_group(self) -> str:
        """Kafka consumer group mirroring the bronze table's next offsets, for lag tooling."""
        return CONSUMER_GROUP_PREFIX + self.name

    def ingest_job_args(
        self, bootstrap_servers: str, run_id: str, run_type: str, summary_path: str
    ) -> list[str]:
        """Arguments of ``spark_jobs/kafka_to_bronze.py`` for one run of this pipeline.

        ``bootstrap_servers`` comes from the Airflow connection. Every flag is
        rendered as ``--flag=value`` so that a value starting with ``-`` (a
        topic pattern, a run id) is never read as a flag. ``kafka.options`` and
        the connection's security settings are not rendered: they go to the
        job through ``--kafka-options-file`` so they never show in a command
        line.
        """
        for arg, value in (
            ("bootstrap_servers", bootstrap_servers),
            ("run_id", run_id),
            ("summary_path", summary_path),
        ):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{arg}: expected a non-empty string, got {_describe(value)}")
        if run_type not in RUN_TYPES:
            raise ValueError(f"run_type: expected one of {_choices(RUN_TYPES)}, got {_describe(run_type)}")
        kafka = self.kafka
        args = [f"--pipeline={self.name}", f"--bootstrap-servers={bootstrap_servers}"]
        if kafka.topic_pattern is not None:
            args.append(f"--topic-pattern={kafka.topic_pattern}")
        else:
            args.append(f"--topics={','.join(kafka.topics)}")
        args += [
            f"--bronze-path={self.tables.bronze_path}",
            f"--checkpoint-root={self.tables.checkpoint_root}",
            f"--starting-offsets={kafka.starting_offsets}",
        ]
        if kafka.max_offsets_per_trigger is not None:
            args.append(f"--max-offsets-per-trigger={kafka.max_offsets_per_trigger}")
        args += [f"--run-id={run_id}", f"--run-type={run_type}", f"--summary-path={summary_path}"]
        args += [f"--table-property={k}={v}" for k, v in self.tables.retention_properties().items()]
        return args


# --------------------------------------------------------------------------- loading


def load_pipeline(path: str | os.PathLike[str]) -> PipelineConfig:
    """Read and validate one pipeline file; raises :class:`PipelineConfigError`."""
    path = Path(path)
    shown = _display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelineConfigError(
            shown, "(file)", f"expected a readable UTF-8 YAML file, got {exc}"
        ) from None
    data = _parse_yaml(text, shown)
    return _Checker(shown, path.parent).pipeline(data, path.stem)


def load_pipelines(
    folder: str | os.PathLike[str],
) -> tuple[dict[str, PipelineConfig], dict[str, str]]:
    """Load every ``*.yaml``/``*.yml`` file directly in ``folder``.

    Returns the valid pipelines by name and the errors by file path. One bad
    file never stops the others. Files are read in name order; a pipeline whose
    name, bronze, silver or quarantine table or checkpoint folder an earlier
    file already uses is an error of the later file (two pipelines writing one
    table would corrupt it).
    Hidden files (editor backups) are skipped.
    """
    folder = Path(folder)
    configs: dict[str, PipelineConfig] = {}
    errors: dict[str, str] = {}
    if not folder.is_dir():
        shown = _display_path(folder)
        errors[shown] = str(
            PipelineConfigError(
                shown, "(folder)", "expected a folder of pipeline files, got nothing at that path"
            )
        )
        return configs, errors
    files = sorted(
        p
        for p in folder.iterdir()
        if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file()
    )
    owners: dict[tuple[str, str], str] = {}
    for path in files:
        shown = _display_path(path)
        try:
            config = load_pipeline(path)
            claims = [
                ("name", "name", config.name),
                ("bronze table", "tables.bronze_path", config.tables.bronze_path),
                ("checkpoint folder", "tables.checkpoint_root", config.tables.checkpoint_root),
                ("silver table", "tables.silver_path", config.tables.silver_path),
                ("quarantine table", "tables.quarantine_path", config.tables.quarantine_path),
                (
                    "transform checkpoint folder",
                    "tables.transform_checkpoint_root",
                    config.tables.transform_checkpoint_root,
                ),
            ]
            for what, field_path, value in claims:
                owner = owners.get((what, value))
                if owner is not None:
                    raise PipelineConfigError(
                        shown,
                        field_path,
                        f"expected a {what} no other pipeline uses, got {value!r}, already used by {owner}",
                    )
            for what, _, value in claims:
                owners[(what, value)] = shown
            configs[config.name] = config
        except PipelineConfigError as exc:
            errors[shown] = str(exc)
        except Exception as exc:  # noqa: BLE001 - a loader bug on one file must not hide every other pipeline
            errors[shown] = f"{shown}: (file): unexpected error while loading: {type(exc).__name__}: {exc}"
    return configs, errors


def _display_path(path: Path) -> str:
    """``path`` relative to the project when inside it (short, same on every machine), else as given."""
    try:
        return str(path.resolve().relative_to(settings.PROJECT_ROOT))
    except (OSError, ValueError):
        return str(path)


def default_lakehouse_root() -> str:
    """``KDE_LAKEHOUSE_ROOT`` if set (relative to the working directory, like the
    other ``KDE_*`` folders in :mod:`include.settings`), else ``<KDE_VAR_DIR>/lakehouse``.

    Read at call time, not import time, so one process can load with different settings.
    """
    env = os.environ.get(LAKEHOUSE_ROOT_ENV, "").strip()
    if not env:
        return str(settings.VAR_DIR / "lakehouse")
    if _URI.match(env):
        return env.rstrip("/")
    return os.path.abspath(os.path.expanduser(env))


# --------------------------------------------------------------------------- YAML


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe loader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable key: construct_mapping reports it with its position
            continue
        if duplicate:
            raise _DuplicateKey(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _parse_yaml(text: str, shown: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        problem = exc.problem or "unreadable"
        if exc.context:
            problem = f"{problem} ({exc.context})"
        raise PipelineConfigError(
            shown, where, f"expected valid YAML, got a syntax error: {problem}"
        ) from None
    except yaml.YAMLError as exc:
        raise PipelineConfigError(
            shown, "(file)", f"expected valid YAML, got a syntax error: {exc}"
        ) from None


# --------------------------------------------------------------------------- validation


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()

_TOP_KEYS = (
    "name",
    "description",
    "kafka",
    "tables",
    "schedule",
    "lag",
    "data_loss_policy",
    "cluster",
    "retries",
    "tags",
    "transform",
)
_KAFKA_KEYS = (
    "connection_id",
    "topics",
    "topic_pattern",
    "starting_offsets",
    "max_offsets_per_trigger",
    "options",
)
_TABLES_KEYS = (
    "lakehouse_root",
    "bronze_path",
    "checkpoint_root",
    "ledger_path",
    "silver_path",
    "quarantine_path",
    "transform_checkpoint_root",
    "log_retention_days",
    "deleted_file_retention_days",
)
#: The tables and folders of ``tables`` that must lie apart: key, default
#: path under ``<lakehouse_root>/<name>``, what it is, and whether it is a
#: folder (checkpoints) or a table location. An overlap is reported on the
#: later key of a pair, unless only the earlier one was set in the file.
_TABLE_LOCATIONS = (
    ("bronze_path", ("bronze",), "the bronze table", False),
    ("checkpoint_root", ("_checkpoints", "bronze"), "the bronze checkpoint folder", True),
    ("ledger_path", ("_runs",), "the run ledger", False),
    ("silver_path", ("silver",), "the silver table", False),
    ("quarantine_path", ("quarantine",), "the quarantine table", False),
    ("transform_checkpoint_root", ("_checkpoints", "silver"), "the transform checkpoint folder", True),
)
_TRANSFORM_KEYS = (
    "format",
    "schema",
    "schema_file",
    "key",
    "ordering",
    "tombstones",
    "new_fields",
    "max_value_bytes",
)
_FIELD_KEYS = ("type", "required", "minimum", "maximum", "allowed", "max_length")
_TYPE_EXPECTED = (
    f"a field type: one of {', '.join(SIMPLE_TYPES)}, or decimal(p,s) with precision p "
    "from 1 to 38 and scale s from 0 to p"
)
#: Other spellings of a field type, for the did-you-mean of an unknown type.
_TYPE_ALIASES = {
    "str": "string",
    "text": "string",
    "varchar": "string",
    "integer": "int",
    "bigint": "long",
    "float": "double",
    "number": "double",
    "bool": "boolean",
    "datetime": "timestamp",
    "decimal": "decimal(p,s)",
    "numeric": "decimal(p,s)",
    "object": "json",
}
_LAG_KEYS = ("min_records", "max_wait_minutes")
_CLUSTER_KEYS = ("profile", "workers", "worker_cores", "worker_memory", "master_connection_id", "kubernetes",
                 "local_max_records", "records_per_worker")
_KUBERNETES_KEYS = (
    "image",
    "namespace",
    "service_account",
    "app_dir",
    "shared_volume_claim",
    "shared_dir",
    "kafka_options_secret",
    "kafka_options_key",
    "delete_driver_pod",
)
#: What profile ``kubernetes`` needs in ``cluster.kubernetes``.
_KUBERNETES_REQUIRED = ("image", "namespace", "service_account", "shared_volume_claim", "shared_dir")
#: What ``existing_master`` (client mode) may set there: the executors' image and namespace.
_KUBERNETES_CLIENT_KEYS = ("image", "namespace")
#: Table locations the pods of profile ``kubernetes`` read or write: key, and
#: whether a URI is allowed (checkpoints are read with local file I/O).
_POD_LOCATIONS = (
    ("bronze_path", True),
    ("checkpoint_root", False),
    ("silver_path", True),
    ("quarantine_path", True),
    ("transform_checkpoint_root", False),
)

_SECRET_WORDS = (
    "password",
    "secret",
    "jaas",
    "keystore",
    "truststore",
    "credential",
    "token",
    "api.key",
    "apikey",
    "username",
)
_CONNECTION_KEYS = ("bootstrap.servers", "bootstrap", "brokers", "security.protocol", "sasl", "ssl")


def _is_connection_setting(key: str) -> bool:
    """Whether ``key`` names a broker address or security setting, in any spelling."""
    k = key.strip().lower().replace("_", ".").replace("-", ".")
    k = k.removeprefix("kafka.")
    return (
        k in _CONNECTION_KEYS or k.startswith(("sasl.", "ssl.")) or any(word in k for word in _SECRET_WORDS)
    )


def _describe(value: Any) -> str:
    if value is _MISSING:
        return "nothing (the key is missing)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (bool)"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def _choices(values: Sequence[str]) -> str:
    return ", ".join(repr(v) for v in values)


def _child(path: str, key: Any) -> str:
    if isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


def _is_within(inner: str, outer: str) -> bool:
    a, b = PurePosixPath(inner), PurePosixPath(outer)
    return a == b or b in a.parents


class _Checker:
    """Validates the parsed YAML of one file; every error names ``file``.

    ``folder`` is the file's folder: relative paths in the file (``transform.schema_file``) start there.
    """

    def __init__(self, file: str, folder: Path) -> None:
        self.file = file
        self.folder = folder

    def error(self, field_path: str, problem: str) -> PipelineConfigError:
        return PipelineConfigError(self.file, field_path, problem)

    def expected(self, field_path: str, expected: str, value: Any, hint: str = "") -> PipelineConfigError:
        return self.error(field_path, f"expected {expected}, got {_describe(value)}{hint}")

    # -- generic shapes

    def mapping(self, value: Any, path: str, keys: Sequence[str], *, optional: bool) -> Mapping[str, Any]:
        if value is _MISSING or (value is None and optional):
            return {}
        if not isinstance(value, dict):
            raise self.expected(path or "(top level)", f"a mapping with keys {', '.join(keys)}", value)
        for key in value:
            key_path = _child(path, key)
            if not isinstance(key, str):
                raise self.expected(key_path, "a text key (quote it)", key)
            # A declared key is never a connection setting, even when its name
            # holds such a word (cluster.kubernetes.kafka_options_secret).
            if key not in keys and _is_connection_setting(key):
                raise self.error(key_path, _connection_setting_problem(key))
            if key not in keys:
                close = difflib.get_close_matches(key, keys, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise self.error(
                    key_path, f"expected one of {', '.join(keys)}, got unknown key {key!r}{hint}"
                )
        return value

    def integer(self, value: Any, path: str, default: int, low: int, high: int | None = None) -> int:
        if value is _MISSING:
            return default
        if high is not None:
            expected = f"an integer from {low} to {high}"
        elif low == 1:
            expected = "a positive integer"
        else:
            expected = f"an integer >= {low}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.expected(path, expected, value, _unquote_hint(value))
        if value < low or (high is not None and value > high):
            raise self.expected(path, expected, value)
        return value

    def text(self, value: Any, path: str, expected: str = "a non-empty string") -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.expected(path, expected, value)
        return value.strip()

    def choice(self, value: Any, path: str, choices: Sequence[str], default: str) -> str:
        if value is _MISSING:
            return default
        if value not in choices or not isinstance(value, str):
            close = difflib.get_close_matches(value, choices, n=1) if isinstance(value, str) else []
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise self.expected(path, f"one of {_choices(choices)}", value, hint)
        return value

    def connection_id(self, value: Any, path: str, what: str) -> str:
        expected = f"the id of an Airflow {what} connection"
        conn = self.text(value, path, expected)
        if _BROKER_LIST.fullmatch(conn):
            raise self.expected(
                path,
                expected,
                value,
                "; that looks like broker addresses, which belong in the connection itself",
            )
        if not _CONN_ID.fullmatch(conn):
            raise self.expected(
                path, f"{expected} (letters, digits and #!()-.:/\\_, at most 250 characters)", value
            )
        return conn

    # -- sections

    def pipeline(self, data: Any, stem: str) -> PipelineConfig:
        if not isinstance(data, dict):
            raise self.expected("(top level)", "a mapping of pipeline settings (kafka, schedule, ...)", data)
        top = self.mapping(data, "", _TOP_KEYS, optional=False)
        name = self.name(top.get("name", _MISSING), stem)
        description = top.get("description", "")
        if not isinstance(description, str):
            raise self.expected("description", "a string", description)
        kafka = self.kafka(top.get("kafka", _MISSING))
        tables = self.tables(top.get("tables", _MISSING), name)
        schedule = self.schedule(top.get("schedule", _MISSING))
        lag_data = self.mapping(top.get("lag", _MISSING), "lag", _LAG_KEYS, optional=True)
        lag = LagConfig(
            min_records=self.integer(lag_data.get("min_records", _MISSING), "lag.min_records", 1, 0),
            max_wait_minutes=self.minutes(lag_data.get("max_wait_minutes", _MISSING), "lag.max_wait_minutes"),
        )
        policy = self.choice(
            top.get("data_loss_policy", _MISSING), "data_loss_policy", DATA_LOSS_POLICIES, "fail"
        )
        cluster = self.cluster(top.get("cluster", _MISSING))
        if cluster.profile == "kubernetes":
            self.pod_reachable(tables, kafka, cluster.kubernetes)
        retries = self.integer(top.get("retries", _MISSING), "retries", 2, 0, 10)
        tags = self.tags(top.get("tags", _MISSING))
        transform = self.transform(top.get("transform", _MISSING))
        return PipelineConfig(
            name=name,
            kafka=kafka,
            tables=tables,
            schedule=schedule,
            source_path=self.file,
            description=description,
            lag=lag,
            data_loss_policy=policy,
            cluster=cluster,
            retries=retries,
            tags=tags,
            transform=transform,
        )

    def name(self, value: Any, stem: str) -> str:
        expected = (
            f"letters, digits, '_', '.' or '-', starting with a letter or digit, "
            f"at most {NAME_MAX_LEN} characters"
        )
        if value is _MISSING:
            if _NAME.fullmatch(stem) and len(stem) <= NAME_MAX_LEN:
                return stem
            raise self.error(
                "name",
                f"expected {expected}, got the file name {stem!r} (str); "
                "rename the file or set name explicitly",
            )
        if not isinstance(value, str) or not _NAME.fullmatch(value) or len(value) > NAME_MAX_LEN:
            raise self.expected("name", expected, value)
        return value

    def kafka(self, value: Any) -> KafkaConfig:
        if value is _MISSING or value is None:
            raise self.expected("kafka", "a mapping with connection_id and topics or topic_pattern", value)
        data = self.mapping(value, "kafka", _KAFKA_KEYS, optional=False)
        conn = self.connection_id(data.get("connection_id", _MISSING), "kafka.connection_id", "Kafka")
        topics_value = data.get("topics")
        pattern_value = data.get("topic_pattern")
        if (topics_value is None) == (pattern_value is None):
            both = "both" if topics_value is not None else "neither"
            raise self.error(
                "kafka.topics",
                "expected exactly one of kafka.topics (a list of names) and "
                f"kafka.topic_pattern (a regex), got {both}",
            )
        topics: tuple[str, ...] = ()
        pattern: str | None = None
        if topics_value is not None:
            topics = self.topics(topics_value)
        else:
            pattern = self.text(pattern_value, "kafka.topic_pattern", "a regular expression of topic names")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise self.expected(
                    "kafka.topic_pattern", f"a valid regular expression ({exc})", pattern_value
                ) from None
        starting = self.choice(
            data.get("starting_offsets", _MISSING), "kafka.starting_offsets", STARTING_OFFSETS, "earliest"
        )
        max_value = data.get("max_offsets_per_trigger")
        max_offsets = (
            None if max_value is None else self.integer(max_value, "kafka.max_offsets_per_trigger", 1, 1)
        )
        options = self.options(data.get("options", _MISSING))
        return KafkaConfig(conn, topics, pattern, starting, max_offsets, options)

    def topics(self, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            hint = f"; write [{value}]" if isinstance(value, str) else ""
            raise self.expected("kafka.topics", "a non-empty list of topic names", value, hint)
        seen: set[str] = set()
        for i, topic in enumerate(value):
            path = f"kafka.topics[{i}]"
            if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
                raise self.expected(
                    path, "a Kafka topic name (letters, digits, '.', '_', '-'; at most 249 characters)", topic
                )
            if topic in seen:
                raise self.expected(path, "each topic once", topic, " a second time")
            seen.add(topic)
        return tuple(value)

    def options(self, value: Any) -> dict[str, str]:
        if value is _MISSING or value is None:
            return {}
        if not isinstance(value, dict):
            raise self.expected(
                "kafka.options", "a mapping of Kafka consumer settings to string values", value
            )
        options: dict[str, str] = {}
        for key, setting in value.items():
            path = f"kafka.options[{key!r}]"  # setting names hold dots: always bracketed
            if not isinstance(key, str):
                raise self.expected(path, "a text key (quote it)", key)
            if _is_connection_setting(key):
                raise self.error(path, _connection_setting_problem(key))
            if key.startswith("kafka."):
                raise self.expected(
                    path, "a Kafka setting name without the 'kafka.' prefix (the job adds it)", key
                )
            if key in _MANAGED_OPTIONS:
                raise self.expected(
                    path, "a setting the pipeline does not manage", key, f": {_MANAGED_OPTIONS[key]}"
                )
            if not _OPTION_KEY.fullmatch(key):
                raise self.expected(
                    path,
                    "a Kafka consumer setting name (lower-case words joined by dots, "
                    "e.g. 'max.poll.records')",
                    key,
                )
            if not isinstance(setting, str):
                hint = " (quote the value)" if isinstance(setting, (int, float, bool)) else ""
                raise self.expected(path, "a string value", setting, hint)
            options[key] = setting
        return options

    def tables(self, value: Any, name: str) -> TablesConfig:
        data = self.mapping(value, "tables", _TABLES_KEYS, optional=True)
        expected = "a folder path or URI"
        root_value = data.get("lakehouse_root", _MISSING)
        root = (
            default_lakehouse_root()
            if root_value is _MISSING
            else _location(self.text(root_value, "tables.lakehouse_root", expected))
        )
        locations: dict[str, str] = {}
        explicit: set[str] = set()
        for key, default, _, _ in _TABLE_LOCATIONS:
            given = data.get(key, _MISSING)
            if given is _MISSING:
                locations[key] = _join_location(root, name, *default)
            else:
                locations[key] = _location(self.text(given, f"tables.{key}", expected))
                explicit.add(key)
        for j, (key, _, _, key_is_folder) in enumerate(_TABLE_LOCATIONS):
            for other, _, _, other_is_folder in _TABLE_LOCATIONS[:j]:
                here, there = locations[key], locations[other]
                if not (_is_within(here, there) or _is_within(there, here)):
                    continue
                blamed, against, is_folder = key, other, key_is_folder
                if key not in explicit and other in explicit:  # report the key the file set
                    blamed, against, is_folder = other, key, other_is_folder
                what = next(w for k, _, w, _ in _TABLE_LOCATIONS if k == against)
                raise self.error(
                    f"tables.{blamed}",
                    f"expected {'a folder' if is_folder else 'a location'} apart from {what} "
                    f"(neither inside the other), got {locations[blamed]!r} with tables.{against} "
                    f"{locations[against]!r}",
                )
        files_days = self.integer(data.get("deleted_file_retention_days", _MISSING),
                                  "tables.deleted_file_retention_days", DEFAULT_DELETED_FILE_RETENTION_DAYS,
                                  DEFAULT_DELETED_FILE_RETENTION_DAYS)  # fmt: skip
        log_days = self.integer(data.get("log_retention_days", _MISSING), "tables.log_retention_days",
                                DEFAULT_LOG_RETENTION_DAYS, 1)  # fmt: skip
        if log_days < files_days:
            # Time travel to a version needs its commit and its files; a shorter log makes the longer file
            # retention useless.
            raise self.expected("tables.log_retention_days",
                                f"an integer >= tables.deleted_file_retention_days ({files_days})", log_days)  # fmt: skip
        return TablesConfig(
            lakehouse_root=root,
            bronze_path=locations["bronze_path"],
            checkpoint_root=locations["checkpoint_root"],
            ledger_path=locations["ledger_path"],
            silver_path=locations["silver_path"],
            quarantine_path=locations["quarantine_path"],
            transform_checkpoint_root=locations["transform_checkpoint_root"],
            log_retention_days=log_days,
            deleted_file_retention_days=files_days,
        )

    def schedule(self, value: Any) -> str | None:
        expected = (
            "a 5-field cron expression (minute hour day-of-month month day-of-week), "
            f"one of {', '.join(SCHEDULE_PRESETS)}, or null for manual runs only"
        )
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.expected("schedule", expected, value)
        text = value.strip()
        if text.startswith("@"):
            if text not in SCHEDULE_PRESETS:
                raise self.expected("schedule", expected, value)
            return text
        parts = text.split()
        if len(parts) != 5:
            raise self.expected("schedule", expected, value, f": it has {len(parts)} fields")
        for part, spec in zip(parts, _CRON_FIELDS, strict=True):
            problem = _cron_field_problem(part, spec)
            if problem:
                raise self.expected("schedule", expected, value, f": {spec.name} {part!r}: {problem}")
        return " ".join(parts)

    def minutes(self, value: Any, path: str) -> float:
        if value is _MISSING:
            return 60.0
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise self.expected(path, "a positive number of minutes", value, _unquote_hint(value))
        return float(value)

    def cluster(self, value: Any) -> ClusterConfig:
        data = self.mapping(value, "cluster", _CLUSTER_KEYS, optional=True)
        profile = self.choice(
            data.get("profile", _MISSING), "cluster.profile", CLUSTER_PROFILES, "local_standalone"
        )
        workers = self.integer(data.get("workers", _MISSING), "cluster.workers", 1, 1, 8)
        cores = self.integer(data.get("worker_cores", _MISSING), "cluster.worker_cores", 1, 1)
        memory = self.memory(data.get("worker_memory", _MISSING), "cluster.worker_memory")
        master = data.get("master_connection_id", _MISSING)
        if profile != "local_standalone":
            if master is _MISSING or master is None:
                raise self.expected(
                    "cluster.master_connection_id",
                    f"the id of an Airflow Spark connection (required with profile {profile})",
                    master,
                )
            master = self.connection_id(master, "cluster.master_connection_id", "Spark")
        elif master is _MISSING or master is None:
            master = None
        else:
            raise self.expected(
                "cluster.master_connection_id",
                "no master connection with profile local_standalone (set "
                "cluster.profile: existing_master or kubernetes to use one)",
                master,
            )
        kubernetes = self.kubernetes(data.get("kubernetes", _MISSING), profile)
        sizing = {}
        for key in ("local_max_records", "records_per_worker"):
            sizing[key] = self.integer(data.get(key, _MISSING), f"cluster.{key}", 0, 0)
            if sizing[key] and profile != "local_standalone":
                raise self.expected(
                    f"cluster.{key}",
                    f"0 or no value with profile {profile} (sizing the cluster to the backlog needs the "
                    "run's own cluster: profile local_standalone)",
                    sizing[key],
                )
        return ClusterConfig(profile, workers, cores, memory, master, kubernetes, **sizing)

    def kubernetes(self, value: Any, profile: str) -> KubernetesConfig | None:
        path = "cluster.kubernetes"
        if value is _MISSING or value is None:
            if profile == "kubernetes":
                raise self.expected(
                    path,
                    f"a mapping with keys {', '.join(_KUBERNETES_REQUIRED)} (required with profile kubernetes)",
                    value,
                )
            return None
        if profile == "local_standalone":
            raise self.expected(
                path,
                "no kubernetes section with profile local_standalone (it runs on this machine)",
                value,
            )
        data = self.mapping(value, path, _KUBERNETES_KEYS, optional=False)
        if profile == "existing_master":
            for key in data:
                if key not in _KUBERNETES_CLIENT_KEYS:
                    raise self.error(
                        f"{path}.{key}",
                        f"expected only {', '.join(_KUBERNETES_CLIENT_KEYS)} with profile existing_master "
                        f"(client mode: the driver runs on the Airflow worker), got {key!r}; "
                        "it applies to profile kubernetes",
                    )
        required = _KUBERNETES_REQUIRED if profile == "kubernetes" else ("image",)
        for key in required:
            if data.get(key) is None:
                raise self.expected(
                    f"{path}.{key}", f"a value (required with profile {profile})", data.get(key, _MISSING)
                )

        def name(key: str, pattern: re.Pattern[str], what: str) -> str | None:
            given = data.get(key)
            if given is None:
                return None
            if not isinstance(given, str) or not pattern.fullmatch(given):
                raise self.expected(f"{path}.{key}", what, given)
            return given

        def folder(key: str, default: str | None) -> str | None:
            given = data.get(key)
            if given is None:
                return default
            if not isinstance(given, str) or not given.startswith("/") or "//" in given or ":" in given:
                raise self.expected(f"{path}.{key}", "an absolute path (e.g. /mnt/kde)", given)
            return os.path.normpath(given)

        dns_label = "a Kubernetes namespace name (lower-case letters, digits and '-', at most 63 characters)"
        dns_name = (
            "a Kubernetes object name (lower-case letters, digits, '-' and '.', at most 253 characters)"
        )
        image = name("image", _IMAGE, "a container image reference without spaces, e.g. 'registry/app:1.0'")
        delete = self.choice(
            data.get("delete_driver_pod", _MISSING),
            f"{path}.delete_driver_pod",
            DRIVER_POD_DELETION,
            "on_success",
        )
        return KubernetesConfig(
            image=image or "",
            namespace=name("namespace", _K8S_LABEL, dns_label),
            service_account=name("service_account", _K8S_SUBDOMAIN, dns_name),
            app_dir=folder("app_dir", KubernetesConfig.app_dir) or KubernetesConfig.app_dir,
            shared_volume_claim=name("shared_volume_claim", _K8S_SUBDOMAIN, dns_name),
            shared_dir=folder("shared_dir", None),
            kafka_options_secret=name("kafka_options_secret", _K8S_SUBDOMAIN, dns_name),
            kafka_options_key=name(
                "kafka_options_key", _K8S_SECRET_KEY, "a secret key (letters, digits, '-', '_' and '.')"
            )
            or KubernetesConfig.kafka_options_key,
            delete_driver_pod=delete,
        )

    def pod_reachable(self, tables: TablesConfig, kafka: KafkaConfig, k8s: KubernetesConfig | None) -> None:
        """Profile ``kubernetes``: what the driver pod reads must be in the image, the shared volume or a secret."""
        if k8s is None or k8s.shared_dir is None:  # cluster() already refused it
            return
        for key, uri_ok in _POD_LOCATIONS:
            location = getattr(tables, key)
            if uri_ok and _URI.match(location):
                continue
            if not _is_within(location, k8s.shared_dir):
                allowed = "a URI or a path" if uri_ok else "a path"
                raise self.expected(
                    f"tables.{key}",
                    f"{allowed} inside cluster.kubernetes.shared_dir {k8s.shared_dir!r} with profile "
                    "kubernetes (the driver and executor pods see only that volume)",
                    location,
                )
        if kafka.options:
            raise self.error(
                "kafka.options",
                "expected no options with profile kubernetes, got "
                f"{', '.join(sorted(kafka.options))}; the driver pod reads its Kafka settings only from "
                "the secret cluster.kubernetes.kafka_options_secret, so put them in its JSON",
            )

    def memory(self, value: Any, path: str) -> str:
        if value is _MISSING:
            return "1g"
        expected = "a Spark size with a unit, like '512m' or '2g', of at least 450m"
        match = _MEMORY.fullmatch(value.strip()) if isinstance(value, str) else None
        if match is None:
            raise self.expected(path, expected, value)
        amount, unit = int(match.group(1)), match.group(2).lower()
        if amount * 1024 ** "kmgt".index(unit) * 1024 < _MIN_MEMORY_BYTES:
            raise self.expected(path, expected, value, "; Spark refuses executors below 450m")
        return f"{amount}{unit}"

    def tags(self, value: Any) -> tuple[str, ...]:
        if value is _MISSING:
            return ()
        if not isinstance(value, list):
            raise self.expected("tags", "a list of strings", value)
        seen: set[str] = set()
        for i, tag in enumerate(value):
            if not isinstance(tag, str) or not tag.strip() or len(tag) > TAG_MAX_LEN:
                raise self.expected(
                    f"tags[{i}]", f"a non-empty string of at most {TAG_MAX_LEN} characters", tag
                )
            if tag in seen:
                raise self.expected(f"tags[{i}]", "each tag once", tag, " a second time")
            seen.add(tag)
        return tuple(value)

    # -- transform

    def transform(self, value: Any) -> TransformSpec | None:
        if value is _MISSING or value is None:
            return None
        data = self.mapping(value, "transform", _TRANSFORM_KEYS, optional=False)
        fmt = self.choice(data.get("format", _MISSING), "transform.format", FORMATS, "json")
        schema_value = data.get("schema")
        file_value = data.get("schema_file")
        if (schema_value is None) == (file_value is None):
            both = "both" if schema_value is not None else "neither"
            raise self.error(
                "transform.schema",
                "expected exactly one of transform.schema (a mapping of field names to types) and "
                f"transform.schema_file (a YAML file holding that mapping), got {both}",
            )
        if schema_value is not None:
            fields = self.fields(schema_value, "transform.schema")
            declared_in = "transform.schema"
        else:
            fields, schema_shown = self.schema_file(file_value)
            declared_in = f"the schema file {schema_shown}"
        by_name = {f.name: f for f in fields}
        key = self.key(data.get("key", _MISSING), by_name, declared_in)
        ordering = self.ordering(data.get("ordering", _MISSING), by_name, declared_in, key)
        tombstones = self.choice(
            data.get("tombstones", _MISSING), "transform.tombstones", TOMBSTONE_POLICIES, "quarantine"
        )
        new_fields = self.choice(
            data.get("new_fields", _MISSING), "transform.new_fields", NEW_FIELD_POLICIES, "ignore"
        )
        max_bytes = data.get("max_value_bytes", _MISSING)
        if max_bytes is _MISSING:
            max_bytes = DEFAULT_MAX_VALUE_BYTES
        elif (
            isinstance(max_bytes, bool)
            or not isinstance(max_bytes, int)
            or not 1 <= max_bytes <= MAX_VALUE_BYTES_LIMIT
        ):
            raise self.expected(
                "transform.max_value_bytes",
                f"a positive integer of at most {MAX_VALUE_BYTES_LIMIT} (64 MiB)",
                max_bytes,
                _unquote_hint(max_bytes),
            )
        required = {*key, ordering}
        return TransformSpec(
            fields=tuple(replace(f, required=True) if f.name in required else f for f in fields),
            key=key,
            ordering=ordering,
            format=fmt,
            tombstones=tombstones,
            new_fields=new_fields,
            max_value_bytes=max_bytes,
        )

    def schema_file(self, value: Any) -> tuple[tuple[FieldSpec, ...], str]:
        """The fields of ``transform.schema_file`` and the file as shown; errors in it name that file."""
        field_path = "transform.schema_file"
        expected = "the path of a YAML file of fields (relative to the pipeline file's folder)"
        path = Path(os.path.expanduser(self.text(value, field_path, expected)))
        if not path.is_absolute():
            path = self.folder / path
        path = Path(os.path.normpath(path))
        shown = _display_path(path)
        if not path.is_file():
            raise self.expected(field_path, f"{expected}; looked for {shown!r}, which is not a file", value)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PipelineConfigError(
                shown, "(file)", f"expected a readable UTF-8 YAML file, got {exc}"
            ) from None
        data = _parse_yaml(text, shown)
        return _Checker(shown, path.parent).fields(data, ""), shown

    def fields(self, value: Any, path: str) -> tuple[FieldSpec, ...]:
        if not isinstance(value, dict) or not value:
            raise self.expected(
                path or "(top level)",
                "a non-empty mapping of field names to a type or to field settings",
                value,
            )
        specs: list[FieldSpec] = []
        seen: dict[str, str] = {}  # lower-case name -> name as declared
        for name, spec in value.items():
            field_path = _child(path, name)
            if not isinstance(name, str):
                raise self.expected(field_path, "a text key (quote it)", name)
            if not FIELD_NAME.fullmatch(name):
                hint = (
                    "; names starting with '_' are reserved for silver's own columns"
                    if name.startswith(SYSTEM_PREFIX)
                    else ""
                )
                raise self.expected(
                    field_path,
                    "a field name (letters, digits and '_', starting with a letter, at most 128 characters)",
                    name,
                    hint,
                )
            other = seen.get(name.lower())
            if other is not None:
                raise self.expected(
                    field_path,
                    f"a field name that differs from {other!r} in more than case "
                    "(Delta column names are case-insensitive)",
                    name,
                )
            seen[name.lower()] = name
            specs.append(self.field_spec(spec, field_path, name))
        return tuple(specs)

    def field_spec(self, value: Any, path: str, name: str) -> FieldSpec:
        if isinstance(value, str):  # shorthand: just the type
            return FieldSpec(name, self.field_type(value, path))
        if not isinstance(value, dict):
            raise self.expected(
                path, f"a field type (e.g. string) or a mapping with keys {', '.join(_FIELD_KEYS)}", value
            )
        split = value.get("type")
        if isinstance(split, str) and split.strip().lower().startswith("decimal(") and ")" not in split:
            # {type: decimal(10,2)}: in a flow mapping the comma ends the value and '2)' becomes a key.
            raise self.expected(
                f"{path}.type",
                _TYPE_EXPECTED,
                split,
                '; inside {...} quote the type, e.g. "decimal(10,2)", as a bare comma ends the value',
            )
        data = self.mapping(value, path, _FIELD_KEYS, optional=False)
        type_name = self.field_type(data.get("type", _MISSING), f"{path}.type")
        required = data.get("required", False)
        if not isinstance(required, bool):
            raise self.expected(f"{path}.required", "true or false", required)
        ranged = type_name in NUMERIC_TYPES or is_decimal(type_name)
        bounds: dict[str, float | None] = {}
        for bound in ("minimum", "maximum"):
            number = data.get(bound, _MISSING)
            bound_path = f"{path}.{bound}"
            if number is _MISSING:
                bounds[bound] = None
                continue
            if not ranged:
                raise self.expected(
                    bound_path,
                    f"no {bound} on {type_name} fields (only int, long, double and decimal fields take one)",
                    number,
                )
            if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
                raise self.expected(bound_path, "a number", number, _unquote_hint(number))
            bounds[bound] = number
        minimum, maximum = bounds["minimum"], bounds["maximum"]
        if minimum is not None and maximum is not None and maximum < minimum:
            raise self.expected(f"{path}.maximum", f"a number >= the minimum {minimum!r}", maximum)
        max_length = data.get("max_length", _MISSING)
        if max_length is _MISSING:
            max_length = None
        elif type_name not in ("string", "json"):
            raise self.expected(
                f"{path}.max_length",
                f"no max_length on {type_name} fields (only string and json fields take one)",
                max_length,
            )
        else:
            max_length = self.integer(max_length, f"{path}.max_length", 1, 1)
        allowed = self.allowed(data.get("allowed", _MISSING), f"{path}.allowed", type_name)
        for i, item in enumerate(allowed or ()):
            outside = (minimum is not None and item < minimum) or (maximum is not None and item > maximum)
            too_long = max_length is not None and len(item) > max_length
            if (type_name != "string" and outside) or (type_name == "string" and too_long):
                rule = (
                    f"max_length {max_length}"
                    if type_name == "string"
                    else f"minimum {minimum!r} and maximum {maximum!r}"
                )
                raise self.expected(f"{path}.allowed[{i}]", f"a value the field's {rule} let through", item)
        return FieldSpec(name, type_name, required, minimum, maximum, allowed, max_length)

    def field_type(self, value: Any, path: str) -> str:
        canonical = normalize_type(value) if isinstance(value, str) else None
        if canonical is None:
            hint = ""
            if isinstance(value, str):
                word = value.strip().lower()
                close = [_TYPE_ALIASES[word]] if word in _TYPE_ALIASES else []
                close = close or difflib.get_close_matches(word, SIMPLE_TYPES, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
            raise self.expected(path, _TYPE_EXPECTED, value, hint)
        return canonical

    def allowed(self, value: Any, path: str, type_name: str) -> tuple[Any, ...] | None:
        if value is _MISSING:
            return None
        if type_name == "string":
            what = "string"
        elif type_name in ("int", "long"):
            what = "integer"
        else:
            raise self.expected(
                path,
                f"no allowed list on {type_name} fields (only string, int and long fields take one)",
                value,
            )
        if not isinstance(value, list) or not value:
            hint = (
                f"; write [{value}]" if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
            )
            raise self.expected(path, f"a non-empty list of {what}s", value, hint)
        seen: set[Any] = set()
        for i, item in enumerate(value):
            item_path = f"{path}[{i}]"
            if what == "string" and not isinstance(item, str):
                hint = ""
                if isinstance(item, bool):
                    hint = "; quote it (YAML reads yes, no, on, off, true and false as booleans)"
                elif isinstance(item, (int, float)):
                    hint = "; quote it"
                raise self.expected(item_path, "a string", item, hint)
            if what == "integer" and (isinstance(item, bool) or not isinstance(item, int)):
                raise self.expected(item_path, "an integer", item, _unquote_hint(item))
            if item in seen:
                raise self.expected(item_path, "each value once", item, " a second time")
            seen.add(item)
        return tuple(value)

    def declared_field(
        self, value: Any, path: str, fields: Mapping[str, FieldSpec], declared_in: str
    ) -> FieldSpec:
        if isinstance(value, str) and value in fields:
            return fields[value]
        hint = ""
        if isinstance(value, str):
            same = [n for n in fields if n.lower() == value.lower()]
            close = same or difflib.get_close_matches(value, list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
        raise self.expected(path, f"the name of a field declared in {declared_in}", value, hint)

    def key(self, value: Any, fields: Mapping[str, FieldSpec], declared_in: str) -> tuple[str, ...]:
        if isinstance(value, str):
            items = [(value, "transform.key")]
        elif isinstance(value, list) and value:
            items = [(item, f"transform.key[{i}]") for i, item in enumerate(value)]
        else:
            raise self.expected(
                "transform.key",
                f"a field name or a non-empty list of field names declared in {declared_in}",
                value,
            )
        names: list[str] = []
        for item, path in items:
            spec = self.declared_field(item, path, fields, declared_in)
            if spec.type not in KEY_TYPES:
                raise self.expected(
                    path, f"a key field of type {', '.join(KEY_TYPES)}", item, f", a {spec.type} field"
                )
            if spec.name in names:
                raise self.expected(path, "each key field once", item, " a second time")
            names.append(spec.name)
        return tuple(names)

    def ordering(
        self, value: Any, fields: Mapping[str, FieldSpec], declared_in: str, key: tuple[str, ...]
    ) -> str:
        spec = self.declared_field(value, "transform.ordering", fields, declared_in)
        if spec.type not in ORDERING_TYPES:
            raise self.expected(
                "transform.ordering",
                f"an ordering field of type {', '.join(ORDERING_TYPES)}",
                value,
                f", a {spec.type} field",
            )
        if spec.name in key:
            raise self.expected("transform.ordering", "a field that is not part of transform.key", value)
        return spec.name


def _connection_setting_problem(key: str) -> str:
    return (
        f"expected no broker addresses or security settings in a pipeline file, got {key!r}; "
        "put them in the Airflow connection named by kafka.connection_id"
    )


def _unquote_hint(value: Any) -> str:
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+(\.\d+)?\s*", value):
        return "; write the number without quotes"
    return ""


def _location(value: str) -> str:
    """A location from the file: URIs as written, local paths absolute (relative to the project)."""
    if _URI.match(value):
        return value.rstrip("/")
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = settings.PROJECT_ROOT / path
    return os.path.normpath(path)


def _join_location(root: str, *parts: str) -> str:
    if _URI.match(root):
        return "/".join((root.rstrip("/"), *parts))
    return str(Path(root, *parts))


# --------------------------------------------------------------------------- cron


@dataclass(frozen=True)
class _CronField:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] stands for low + i
    question_mark: bool = False  # '?' ("no specific value") is allowed


_CRON_FIELDS = (
    _CronField("minute", 0, 59),
    _CronField("hour", 0, 23),
    _CronField("day-of-month", 1, 31, question_mark=True),
    _CronField(
        "month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
    ),
    # 0 and 7 are both Sunday, as in cron.
    _CronField("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat"), question_mark=True),
)


def _cron_value(text: str, spec: _CronField) -> int | None:
    if text.isdigit():
        value = int(text)
        return value if spec.low <= value <= spec.high else None
    if text.lower() in spec.names:
        return spec.low + spec.names.index(text.lower())
    return None


def _cron_field_problem(part: str, spec: _CronField) -> str | None:
    """Why ``part`` is not a valid cron field, or ``None``.

    Standard syntax (``*``, values, names, ``a-b`` ranges, ``/step``, lists)
    plus what Airflow's croniter also accepts: ``?``, ``L`` and ``nW`` in
    day-of-month, ``d#n`` in day-of-week.
    """
    bounds = f"values {spec.low}-{spec.high}" + (f" or names like {spec.names[1]!r}" if spec.names else "")
    for item in part.split(","):
        if spec.question_mark and item == "?":
            continue
        if spec.name == "day-of-month" and (item.upper() == "L" or re.fullmatch(r"\d+[Ww]", item)):
            if item.upper() == "L" or 1 <= int(item[:-1]) <= 31:
                continue
            return f"{item!r} needs a day from 1 to 31"
        if spec.name == "day-of-week" and "#" in item:
            day, _, nth = item.partition("#")
            if _cron_value(day, spec) is None or nth not in ("1", "2", "3", "4", "5"):
                return f"{item!r} must be a day of the week, '#' and 1-5"
            continue
        base, slash, step = item.partition("/")
        if slash and not (step.isdigit() and 1 <= int(step) <= spec.high):
            return f"step {step!r} must be an integer from 1 to {spec.high}"
        if base == "*":
            continue
        first, dash, last = base.partition("-")
        start = _cron_value(first, spec)
        if start is None:
            return f"{first!r} is not one of the {bounds}"
        if dash:
            end = _cron_value(last, spec)
            if end is None:
                return f"{last!r} is not one of the {bounds}"
            if end < start:
                return f"range {base!r} runs backwards"
    return None
