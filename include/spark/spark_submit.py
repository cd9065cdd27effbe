"""How the Spark jobs are launched: the settings and driver options of every job, the
``--py-files`` archive, spark-submit's binary and environment, and a local session for
tests and notebooks.

The orchestrator builds its spark-submit command through Airflow's Spark
provider (``include/orchestration/profiles/``); the stand-alone command
the benchmark and the tests use is dev tooling: ``include/tooling/job_submit.py``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from include import settings
from include.spark import jvm_cds, jvm_deps

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Modules the jobs import, shipped to the cluster in one zip.
_SHIPPED = (
    "spark_jobs",
    "include/__init__.py",
    # Standard library only: where the jobs read their KDE_* variables.
    "include/settings.py",
    # The offset contract, whole: the jobs and the Airflow tasks check the same rules.
    "include/contract",
    "include/readers/__init__.py",
    "include/readers/spark_checkpoint.py",
    # The transform's driver asks the schema registry (standard library only).
    "include/readers/schema_registry.py",
    # A commit file's commitInfo, read as the checks read it (standard library and include.contract only).
    "include/readers/delta_log.py",
)

#: Settings every job session gets: Delta's SQL extension, and small defaults
#: sized for incremental batches (not whole-table rewrites).
BASE_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.shuffle.partitions": "4",
    # Delta replays its log with this many tasks; the default (50) costs
    # seconds per commit on a small table.
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.ui.showConsoleProgress": "false",
    # The transform caches each micro-batch (decode, quarantine, classify);
    # compressing that short-lived cache cost more than it saved.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}


#: Every driver and executor of a job: the Kafka client enables no config provider, whatever a setting
#: asks (Kafka's advice for configurations it did not write; the pipeline file refuses those keys too).
KAFKA_JVM_FLAGS = "-Dorg.apache.kafka.automatic.config.providers=none"

#: The driver's log4j2 settings: Spark, Delta and Kafka at WARN, so the task log stays readable.
LOG_CONFIG = "spark_jobs/log4j2.properties"


def driver_java_options(project_root: str | Path | None = None, *, short_job: bool = False) -> str:
    """``spark.driver.extraJavaOptions`` of every job: the project's log settings and level, and on
    this machine the class-data-sharing archive when it was built (``include/spark/jvm_cds.py``).

    ``project_root``: where the driver sees the project (a container image's
    app folder for a driver pod); this machine's project by default.
    ``short_job``: a run's driver as the orchestrator submits it (see :func:`include.spark.jvm_cds.driver_options`).
    """
    level = settings.spark_log_level()
    root = settings.PROJECT_ROOT if project_root is None else project_root
    config = f"{str(root).rstrip('/')}/{LOG_CONFIG}"
    # Known harmless warnings stay hidden at WARN; a more verbose switch shows those loggers too.
    levels = settings.SPARK_LOG_LEVELS
    quiet = level if levels.index(level) < levels.index("WARN") else "ERROR"
    options = (f"-Dlog4j.configurationFile={config} -Dkde.spark.log.level={level} -Dkde.spark.log.quiet={quiet} "
               f"{KAFKA_JVM_FLAGS}")  # fmt: skip
    if project_root is None:
        cds = jvm_cds.driver_options(short_job=short_job)
        if cds:
            options += " " + cds
    return options


#: A job archive no checkout has built or used for this long is removed by the next build.
STALE_ARCHIVE_S = 7 * 86400


def package_py_files(target_dir: Path | None = None) -> Path:
    """Zip the job code for ``--py-files``: ``<target_dir>/<fingerprint>/kde_jobs.zip``, built once per
    fingerprint of the shipped sources' paths and bytes.

    One folder per fingerprint, never one path rewritten: a running job's
    Python reads its archive by path as it imports (zipimport), so a checkout
    of other code sharing the cache (an older commit, another work tree)
    must not replace the file under it, which would fail that job with "bad
    local file header". Archives no build has used for
    :data:`STALE_ARCHIVE_S` are removed.
    """
    target_dir = target_dir or (settings.CACHE_DIR / "build")
    root = settings.PROJECT_ROOT
    files: list[Path] = []
    for entry in _SHIPPED:
        path = root / entry
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    fingerprint = digest.hexdigest()
    zip_path = target_dir / fingerprint[:16] / "kde_jobs.zip"
    if zip_path.exists():
        os.utime(zip_path)  # in use: kept by the pruning below
        return zip_path
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = zip_path.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            zf.write(f, f.relative_to(root).as_posix())
        zf.comment = fingerprint.encode()
    tmp.replace(zip_path)
    _prune_archives(target_dir, keep=zip_path.parent)
    return zip_path


def _prune_archives(target_dir: Path, *, keep: Path) -> None:
    """Remove the archive folders no build has used for :data:`STALE_ARCHIVE_S` (another process may remove
    one at the same time: what is gone already is skipped)."""
    import shutil
    import time

    stale = time.time() - STALE_ARCHIVE_S
    for folder in target_dir.iterdir():
        archive = folder / "kde_jobs.zip"
        try:
            if folder != keep and folder.is_dir() and archive.stat().st_mtime < stale:
                shutil.rmtree(folder)
        except FileNotFoundError:
            continue


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    return jvm_deps.pyspark_dir()


def spark_submit_binary() -> str:
    """pyspark's own ``spark-submit``."""
    return str(spark_home() / "bin" / "spark-submit")


def submit_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for running spark-submit: its Spark home and this Python."""
    env = dict(os.environ if base is None else base)
    env["SPARK_HOME"] = str(spark_home())
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def dies_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes a child process die with the process that starts it (Linux).

    The spark-submit JVM of a job is the driver: when the Airflow task process
    running it is killed (OOM killer, a lost worker, ``kill -9``), the kernel
    then SIGKILLs the driver too, instead of leaving it to finish the job
    unwatched, possibly beside the next run's driver on the same checkpoint.
    The signal follows the thread that starts the child, and the hook's
    ``submit`` waits for the child in that thread. ``None`` where ``prctl``
    does not exist; a child whose parent is already gone exits at once.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(137)

    return arm


#: ``prctl`` option: the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


#: Generated classes a long-lived in-process session keeps (Spark's default: 100). One round of ingest
#: and transform needs about 110, so with the default every round compiled them all again (Janino, then
#: the JIT on the new classes). A one-run spark-submit gains nothing, so only these sessions set it.
SESSION_CODEGEN_CACHE_ENTRIES = 1000


def local_session(
    app_name: str, *, warehouse: Path, cores: int = 2, driver_memory: str = "2g"
) -> SparkSession:
    """An in-process ``local[cores]`` SparkSession with the project's jars and settings, for a process that
    runs many jobs in it (the test suite, the benchmark's in-session parts)."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.jars", ",".join(str(j) for j in jvm_deps.spark_jars()))
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.codegen.cache.maxEntries", str(SESSION_CODEGEN_CACHE_ENTRIES))
    )
    for key, value in BASE_CONF.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
