"""What every job shares: its session, its entry point and failure envelope, batch errors, crash failpoints.

A job's ``main`` is :func:`job_main` over its :class:`JobStep`; a failure of
the run, any member of the error family, is written as the one failure
envelope (:mod:`include.contract.failure`) where its summary would have gone.
Delta through the JVM is :mod:`spark_jobs.delta_commits`, table properties and
owners :mod:`spark_jobs.table_properties`, Hadoop file reads
:mod:`spark_jobs.hadoop_files`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from include import settings
from include.contract.errors import (
    IngestionError,
    JobConfigError,
    PipelineError,
    TransformError,
    as_pipeline_error,
    batch_failure,
)
from include.contract.failure import Failure

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("kde_jobs")


def build_session(app_name: str) -> SparkSession:
    """A job's SparkSession; master, jars and resources come from spark-submit.

    On a run's transient cluster, the cluster's secret is set here, in the
    session's configuration: on the spark-submit command line ``ps`` would
    show it to every local user. So are an object store's keys.
    """
    from pyspark.sql import SparkSession

    from include import settings

    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    )
    secret = settings.spark_secret()
    if secret is not None:
        builder = builder.config("spark.authenticate", "true").config("spark.authenticate.secret", secret)
    # The object store's keys, for the driver and (in the Hadoop configuration Spark ships) the executors.
    for key, value in settings.storage_secrets().items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    return builder.getOrCreate()


class BatchWriter:
    """A ``foreachBatch`` sink that keeps the :class:`PipelineError` a batch raised.

    Spark re-raises a batch's exception to the job only as a JVM trace; the
    job's top level reports the kept error itself, fields and all
    (:func:`include.contract.errors.batch_failure`). Subclasses write a batch
    in :meth:`_write`.
    """

    #: The error a batch raised, as it was raised.
    error: PipelineError | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        try:
            self._write(df, batch_id)
        except PipelineError as exc:
            self.error = exc
            raise

    def _write(self, df: DataFrame, batch_id: int) -> None:
        raise NotImplementedError

    def drain(self, stream: DataFrame, *, job: str, pipeline: str, checkpoint: str,
              error: type[IngestionError | TransformError], stage: str) -> StreamingQuery:  # fmt: skip
        """Run the streaming frame ``stream`` through this writer until it holds nothing more
        (``Trigger.AvailableNow``), with its checkpoint in ``checkpoint``; returns the finished query.

        A failed batch raises ``error`` (``stage`` names the job's part in the message) carrying the batch's
        own :class:`PipelineError` when it raised one (:func:`include.contract.errors.batch_failure`).
        """
        query = (
            stream.writeStream.queryName(f"{job}:{pipeline}:{uuid.uuid4().hex[:8]}")
            .foreachBatch(self)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination()
        except Exception as exc:  # StreamingQueryException: the batch's own error is on the writer
            raise batch_failure(error, stage, pipeline, self.error, exc) from exc
        return query


def keep_for_batch(df: DataFrame, kept: list[DataFrame]) -> DataFrame:
    """``df`` computed once for the several reads a batch makes of it; added to ``kept`` for :func:`release`.

    In local mode (the default for a small backlog) an eager local checkpoint: its rows are computed
    here and every later plan starts from them, so neither each count nor silver's MERGE, which
    analyses its source several times, analyses and plans ``df``'s own plan again (a join with silver
    and every field rule): the fixed cost of a small batch. On a cluster a persist instead: a lost
    executor's cached blocks are computed again, where a local checkpoint's would fail the batch.
    """
    from pyspark import StorageLevel

    if (df.sparkSession.sparkContext.master or "").startswith("local"):
        df = df.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)
    else:
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
    kept.append(df)
    return df


def release(kept: list[DataFrame]) -> None:
    """Free what the batch kept (:func:`keep_for_batch`, or a plain persist), newest first."""
    for df in reversed(kept):
        plan = df._jdf.queryExecution().analyzed()
        if plan.getClass().getSimpleName() == "LogicalRDD":
            # A local checkpoint's blocks are no cache entry: unpersist() would leave them to the GC.
            plan.rdd().unpersist(False)
        else:
            df.unpersist()
    kept.clear()


class PhaseTimer:
    """Seconds per named phase of a step, each lap the time since the previous one (or since the timer began).

    A name given again adds to its phase, so a step that runs in parts reports one figure for it.
    """

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, name: str) -> float:
        """Close the phase ``name`` now; returns its seconds in this lap."""
        now = time.monotonic()
        seconds = now - self._last
        self.phases[name] = self.phases.get(name, 0.0) + seconds
        self._last = now
        return seconds

    def line(self) -> str:
        """The phases for a log line: ``decode 0.41s, classify 0.12s``."""
        return ", ".join(f"{name} {seconds:.2f}s" for name, seconds in self.phases.items())


def parse_table_properties(pairs: list[str], flag: str = "--table-property") -> dict[str, str]:
    """``KEY=VALUE`` arguments as a dict; raises ``ValueError`` naming the flag and the bad one."""
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip() or any(q in pair for q in "'`"):
            raise JobConfigError(f"{flag}: expected KEY=VALUE without quotes (e.g. delta.logRetentionDuration="
                             f"interval 30 days), got {pair!r}")  # fmt: skip
        found[key.strip()] = value.strip()
    return found


def _armed(name: str) -> bool:
    """Whether the failpoint ``name`` of ``KDE_FAILPOINT`` is set and fires now.

    An entry is ``<name>`` or ``<name>*<times>``. With ``KDE_FAILPOINT_STATE`` set, each firing is
    recorded there first (an exclusive create, so two drivers never take one firing), and a point that
    has fired its times no more: under a real scheduler the retried try runs in the same environment
    and must get past the point its earlier try died at.
    """
    for entry in (e.strip() for e in (settings.failpoint() or "").split(",")):
        point, _, times = entry.partition("*")
        if point != name:
            continue
        state = settings.failpoint_state_dir()
        if state is None:
            return True
        state.mkdir(parents=True, exist_ok=True)
        for n in range(int(times or 1)):
            try:
                (state / f"{point.replace(':', '@')}.{n}").open("x").close()
            except FileExistsError:
                continue
            return True
        return False
    return False


def failpoint(stage: str, batch_id: int, *, when: str = "after") -> None:
    """Kill the job if ``KDE_FAILPOINT`` (:func:`include.settings.failpoint`) asks for it ``when`` (``after`` or
    ``before``) ``stage``'s commit of ``batch_id``."""
    for point in (f"kill-{when}-{stage}-commit:{batch_id}", f"kill-driver-{when}-{stage}-commit:{batch_id}"):
        if not _armed(point):
            continue
        log.warning("failpoint %s: killing the job %s the %s commit of batch %s", point, when, stage, batch_id)
        sys.stdout.flush()
        if point.startswith("kill-driver"):
            os.kill(os.getpid(), signal.SIGKILL)
        os.killpg(os.getpgid(0), signal.SIGKILL)


def stop_point(stage: str, batch_id: int) -> None:
    """Stop this driver process (SIGSTOP) if ``KDE_FAILPOINT`` is ``stop-before-<stage>-commit:<batch_id>``:
    a worker paused in the middle of a commit, until something sends it SIGCONT."""
    if _armed(f"stop-before-{stage}-commit:{batch_id}"):
        log.warning("failpoint stop-before-%s-commit:%s: stopping the driver before its commit", stage, batch_id)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGSTOP)


def write_failure(job: str, cfg: Any, exc: BaseException, *, path: str | None = None,
                  traceback: str | None = None) -> None:  # fmt: skip
    """Write the job's failure envelope (:class:`include.contract.failure.Failure`) to ``path``, by default
    where its summary would have gone (nothing without a path).

    The task reads it back and raises the same error class with the same
    fields (:func:`include.contract.failure.read_failure`): an error crosses
    to Airflow as fields, not as a line of a log to search. ``traceback``: the
    trace of an error outside the family, for the task's log.
    """
    pipeline = getattr(cfg, "pipeline", None)
    error = as_pipeline_error(exc, pipeline=pipeline)
    failure = Failure.of(error, job=job, pipeline=pipeline, run_id=getattr(cfg, "run_id", None), traceback=traceback)
    write_summary(path or getattr(cfg, "summary_path", None), failure.to_json())


def write_summary(path: str | None, summary: dict[str, Any]) -> None:
    """Write a job's summary JSON where the orchestrator reads it (nothing without a path).

    The jobs pass their summary through its contract class first
    (:mod:`include.contract.jobs`), so a summary the task side could not read
    fails in the job, not in Airflow.
    """
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(summary, indent=2))


@dataclass(frozen=True)
class JobStep:
    """One job of a run, as a step the driver can run on an existing session.

    ``parse`` turns the job's arguments into its config (raising
    ``bad_argument``); ``run(spark, cfg)`` does the work and writes the
    summary; ``describe(result)`` is the one-line result. Any member of the
    error family that ``run`` raises is the step's failure, written as data.
    """

    name: str
    parse: Callable[[list[str]], Any]
    bad_argument: type[Exception] | tuple[type[Exception], ...]
    run: Callable[[SparkSession, Any], Any]
    describe: Callable[[Any], str]


def job_main(step: JobStep, argv: list[str] | None) -> int:
    """What every job's ``main`` does: args -> session -> run -> one result line.

    Exit 2 on a bad argument (before any session starts), 1 on a failure of
    the run, any member of the error family (its message on stderr, the error
    as data in the summary file), 0 with the result line printed otherwise. An
    error outside the family (a bug) goes through with its traceback. The
    session is stopped in every case.
    """
    configure_logging()
    try:
        cfg = step.parse(sys.argv[1:] if argv is None else argv)
    except step.bad_argument as exc:
        print(f"{step.name}: bad argument: {exc}", file=sys.stderr)
        return 2
    spark = build_session(f"{step.name}:{cfg.pipeline}")
    try:
        result = step.run(spark, cfg)
    except PipelineError as exc:
        print(f"{step.name}: {exc}", file=sys.stderr)
        write_failure(step.name, cfg, exc)
        return 1
    finally:
        spark.stop()
    print(f"{step.name}: pipeline={cfg.pipeline} {step.describe(result)}")
    return 0


def configure_logging() -> None:
    """The jobs' own Python log lines: what each batch did, at INFO, one line each."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # py4j logs every call at INFO; nobody reads that in a task log.
    logging.getLogger("py4j").setLevel(logging.WARNING)
