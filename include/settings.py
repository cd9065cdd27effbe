"""Process-wide settings: every ``KDE_*`` environment variable the project reads, typed, with its default.

Every path the project writes to on its own (jar cache, local broker data,
the demo lakehouse) hangs off two folders, both ignored by git, read once at
import:

- ``KDE_CACHE_DIR`` (default ``<project>/.cache``): downloaded jars and the
  Maven repository; kept between runs so later runs are offline.
- ``KDE_VAR_DIR`` (default ``<project>/var``): runtime state of the local
  broker, demo tables and the embedded Airflow home.

The other variables are read by a function, each time it is called: tests,
the demo and the benchmarks set them in a running process (before loading
pipeline files, around one submit), and a value read at import would miss
that. A ``*_ENV`` constant names each variable, for code that sets it in a
child's environment or names it in a message.

The Spark jobs import this module too (``--py-files`` ships it), so it
imports only the standard library.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PROJECT_ROOT: Path = Path(__file__).resolve().parent.parent

CACHE_DIR: Path = Path(os.environ.get("KDE_CACHE_DIR", PROJECT_ROOT / ".cache")).resolve()
VAR_DIR: Path = Path(os.environ.get("KDE_VAR_DIR", PROJECT_ROOT / "var")).resolve()

#: Versions of the JVM parts. The Python side (pyspark, delta-spark) is pinned
#: in requirements.txt to match these.
SPARK_VERSION = "4.2.0"
SCALA_BINARY = "2.13"
DELTA_VERSION = "4.4.0"
KAFKA_BROKER_VERSION = "4.3.1"
#: spark-token-provider-kafka-0-10 is not published on Maven Central for any
#: Spark release after 4.0.0 that this machine can reach; 4.0.0's classes are
#: the ones spark-sql-kafka-0-10 4.2.0 calls (checked by the integration tests,
#: which run every Kafka read through them).
SPARK_TOKEN_PROVIDER_VERSION = "4.0.0"
#: hadoop-aws must be the Hadoop that pyspark ships (hadoop-client-api-<version>.jar).
HADOOP_VERSION = "3.5.0"
#: The AWS SDK that hadoop-aws 3.5.0 and Spark 4.2.0 were built and tested with.
AWS_SDK_VERSION = "2.35.4"
#: The S3-compatible server the tests and ``make demo STORE=s3`` start: 4.0.0 is the first
#: release whose filesystem stores answer ``If-None-Match: *`` atomically.
S3PROXY_VERSION = "4.0.0"
#: Debezium's PostgreSQL connector for the change-data-capture tests: 3.6.1 is built on Kafka 4.3, the
#: Connect runtime of the kafka bundle.
DEBEZIUM_VERSION = "3.6.1.Final"
#: protobuf-java and protobuf-java-util for transform.format protobuf; 4.26 or newer for
#: JsonFormat's alwaysPrintFieldsWithNoPresence.
PROTOBUF_JAVA_VERSION = "4.36.2"

#: Overrides the default ``tables.lakehouse_root`` of every pipeline file.
LAKEHOUSE_ROOT_ENV = "KDE_LAKEHOUSE_ROOT"
#: Folder of pipeline files, instead of ``include/pipelines`` (tests, deployments).
PIPELINES_DIR_ENV = "KDE_PIPELINES_DIR"
#: Folders (separated by ``os.pathsep``) besides a pipeline file's own whose files a pipeline file may name
#: as its schema files (include/config/owned_files.py); an operator's setting, never a pipeline file's.
PIPELINE_FILE_ROOTS_ENV = "KDE_PIPELINE_FILE_ROOTS"
#: ``KDE_SPARK_LOG_LEVEL=INFO`` (or DEBUG, ...) brings Spark's own INFO lines back into the task log.
SPARK_LOG_LEVEL_ENV = "KDE_SPARK_LOG_LEVEL"
#: Spark's log levels, most verbose first.
SPARK_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR")
#: ``KDE_CDS=off`` leaves the class-data-sharing archives unused (for comparing, or a JVM that rejects the flags).
CDS_ENV = "KDE_CDS"
#: The deadline, in seconds, every Kafka call of a monitoring page shares.
MONITOR_TIMEOUT_ENV = "KDE_MONITOR_TIMEOUT_S"
#: Seconds Airflow waits before a task's first retry (then doubling, at most 10 minutes); 30 by default.
RETRY_DELAY_ENV = "KDE_RETRY_DELAY_S"
#: The password of the local broker's SASL/PLAIN user (``local_kafka start --sasl-plain-user``).
KAFKA_SASL_PASSWORD_ENV = "KDE_KAFKA_SASL_PASSWORD"
#: For the crash-recovery tests: ``kill-after-<stage>-commit:<batch id>`` makes a Spark job SIGKILL
#: spark-submit's whole process group right after that batch's commit, before Spark commits the batch
#: to its checkpoint: the crash window exactly-once must survive.
#: ``kill-driver-after-<stage>-commit:<batch id>`` kills only the Python driver (under Airflow, the
#: process group is the task runner's too). ``kill[-driver]-before-silver-commit:<batch id>`` kills the
#: transform with nothing of the batch written. Several points are separated by commas.
FAILPOINT_ENV = "KDE_FAILPOINT"
#: A folder that makes each failpoint fire a bounded number of times (once, or ``<point>*<n>``) and
#: records each firing there: under a real scheduler the retried try runs in the same environment, and
#: must pass the point it died at. Unset: a point fires every time it is reached.
FAILPOINT_STATE_ENV = "KDE_FAILPOINT_STATE"
#: The file holding the secret of the run's transient Spark cluster, set by the submitting task for
#: the job's driver (include/spark/spark_cluster.py).
SPARK_SECRET_FILE_ENV = "KDE_SPARK_SECRET_FILE"
#: Names the owner-only JSON file of the object store's Hadoop secrets (``fs.s3a.access.key`` ...) a job's
#: driver builds its session with.
STORAGE_SECRETS_FILE_ENV = "KDE_STORAGE_SECRETS_FILE"


def lakehouse_root_override() -> str | None:
    """``KDE_LAKEHOUSE_ROOT`` as set (stripped), or ``None`` when it is unset or blank.

    The pipeline loader turns it into the default ``tables.lakehouse_root``.
    """
    return os.environ.get(LAKEHOUSE_ROOT_ENV, "").strip() or None


def pipelines_dir() -> Path:
    """Where the pipeline files are read from: ``KDE_PIPELINES_DIR``, else ``<project>/include/pipelines``."""
    return Path(os.environ.get(PIPELINES_DIR_ENV) or PROJECT_ROOT / "include" / "pipelines")


def pipeline_file_roots() -> tuple[Path, ...]:
    """``KDE_PIPELINE_FILE_ROOTS``: the folders, besides a pipeline file's own, its schema files may be in."""
    return tuple(Path(p) for p in os.environ.get(PIPELINE_FILE_ROOTS_ENV, "").split(os.pathsep) if p.strip())


def spark_log_level() -> str:
    """The driver's log level from ``KDE_SPARK_LOG_LEVEL`` (any case), ``WARN`` when unset or blank.

    Raises ``ValueError`` naming the variable for a level Spark does not have.
    """
    raw = os.environ.get(SPARK_LOG_LEVEL_ENV, "WARN")
    level = raw.strip().upper() or "WARN"
    if level not in SPARK_LOG_LEVELS:
        raise ValueError(
            f"environment variable {SPARK_LOG_LEVEL_ENV}={raw!r}: expected one of "
            f"{', '.join(SPARK_LOG_LEVELS)} (unset it for WARN)"
        )
    return level


def cds_disabled() -> bool:
    """Whether ``KDE_CDS=off`` (or 0, false, no) turns the archives and the short-job flags off."""
    return os.environ.get(CDS_ENV, "").lower() in ("off", "0", "false", "no")


def monitor_timeout_s(default: float) -> float:
    """``KDE_MONITOR_TIMEOUT_S`` as seconds; ``default`` when it is unset, not a number or not positive."""
    try:
        value = float(os.environ.get(MONITOR_TIMEOUT_ENV) or default)
    except ValueError:
        return default
    return value if value > 0 else default


def retry_delay_s(default: float = 30.0) -> float:
    """``KDE_RETRY_DELAY_S``: seconds before a task's first retry; ``default`` when unset or blank.

    Raises ``ValueError`` naming the variable for a value that is not a number from 1 to 600.
    """
    raw = os.environ.get(RETRY_DELAY_ENV, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 1 <= value <= 600:
        raise ValueError(f"environment variable {RETRY_DELAY_ENV}={raw!r}: expected seconds from 1 to 600 "
                         f"(unset it for {default:.0f})")  # fmt: skip
    return value


def kafka_sasl_password() -> str:
    """``KDE_KAFKA_SASL_PASSWORD``, empty when unset."""
    return os.environ.get(KAFKA_SASL_PASSWORD_ENV, "")


def failpoint() -> str | None:
    """``KDE_FAILPOINT``: where a Spark job should kill itself (e.g. ``kill-after-bronze-commit:1``) or stop
    (``stop-before-bronze-commit:1``), if anywhere; several points separated by commas."""
    return os.environ.get(FAILPOINT_ENV)


def failpoint_state_dir() -> Path | None:
    """``KDE_FAILPOINT_STATE``: the folder recording how often each failpoint has fired, or ``None``."""
    value = os.environ.get(FAILPOINT_STATE_ENV, "").strip()
    return Path(value) if value else None


def spark_secret() -> str | None:
    """The secret of the cluster a job's driver joins, read from the file ``KDE_SPARK_SECRET_FILE`` names;
    ``None`` when it names none or the file is absent (local mode, or a cluster without authentication)."""
    path = os.environ.get(SPARK_SECRET_FILE_ENV)
    if not path:
        return None
    try:
        return Path(path).read_text().strip() or None
    except FileNotFoundError:
        return None


def storage_secrets() -> dict[str, str]:
    """The object store's Hadoop secrets from the file ``KDE_STORAGE_SECRETS_FILE`` names; empty without one."""
    path = os.environ.get(STORAGE_SECRETS_FILE_ENV)
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    return {str(k): str(v) for k, v in data.items()}
