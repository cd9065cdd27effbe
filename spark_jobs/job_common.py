"""What the ingestion and transform jobs share: their session, their Delta commit records, crash failpoints.

Each job marks every micro-batch with one Delta commit whose ``userMetadata``
names the batch (epoch and batch id). Both find their newest such commit the
same way, confirm the commit they just wrote the same way, and can be killed
right after it for crash tests.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

log = logging.getLogger("kde_jobs")

#: ``kill-after-<stage>-commit:<batch id>`` SIGKILLs spark-submit's whole process
#: group right after that batch's commit, before Spark commits the batch to its
#: checkpoint: the crash window exactly-once must survive.
#: ``kill-driver-after-<stage>-commit:<batch id>`` kills only the Python driver
#: (under Airflow, the process group is the task runner's too).
FAILPOINT_ENV = "KDE_FAILPOINT"


class BatchCommit(Protocol):
    epoch: int
    batch_id: int


C = TypeVar("C", bound=BatchCommit)
#: ``Commit.from_user_metadata``: the commit's record, or ``None`` for other writers' commits.
Parser = Callable[..., C | None]


def build_session(app_name: str):
    """A job's SparkSession; master, jars and resources come from spark-submit."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .getOrCreate()
    )


def newest_commit(spark, path: str, parse: Parser) -> C | None:
    """The table's newest commit that ``parse`` recognises (``None``: no table, or none yet).

    Reads only the last commits (growing the window only while the newest
    ones are other writers', e.g. OPTIMIZE), never data files.
    """
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return None
    table = DeltaTable.forPath(spark, path)
    limit = 20
    while True:
        rows = table.history(limit).select("version", "userMetadata").collect()
        for row in rows:  # newest first
            commit = parse(row["userMetadata"], version=row["version"])
            if commit is not None:
                return commit
        if len(rows) < limit:
            return None
        limit *= 10


def confirm_newest_commit(spark, path: str, parse: Parser, epoch: int, batch_id: int,
                          error: type[Exception]) -> int:  # fmt: skip
    """The version of the commit just written for ``(epoch, batch_id)``; raises ``error`` if it is not the newest."""
    from delta.tables import DeltaTable

    row = DeltaTable.forPath(spark, path).history(1).collect()[0]
    commit = parse(row["userMetadata"], version=row["version"])
    if commit is None or (commit.epoch, commit.batch_id) != (epoch, batch_id):
        raise error(
            f"{path}: after writing batch {batch_id} of epoch {epoch}, the newest commit "
            f"(version {row['version']}) is not that batch; another writer is using the table"
        )
    return int(row["version"])


def with_user_metadata(spark, metadata: str, action: Callable[[], object]) -> None:
    """Run a Delta command whose commit must carry ``metadata`` (MERGE and ALTER take no write option)."""
    key = "spark.databricks.delta.commitInfo.userMetadata"
    spark.conf.set(key, metadata)
    try:
        action()
    finally:
        spark.conf.unset(key)


def failpoint(stage: str, batch_id: int) -> None:
    """Kill the job if :data:`FAILPOINT_ENV` asks for it after ``stage``'s commit of ``batch_id``."""
    point = os.environ.get(FAILPOINT_ENV)
    if point in (f"kill-after-{stage}-commit:{batch_id}", f"kill-driver-after-{stage}-commit:{batch_id}"):
        log.warning("failpoint %s: killing the job after the %s commit of batch %s", point, stage, batch_id)
        sys.stdout.flush()
        if point.startswith("kill-driver"):
            os.kill(os.getpid(), signal.SIGKILL)
        os.killpg(os.getpgid(0), signal.SIGKILL)


def root_message(exc: BaseException, markers: tuple[str, ...]) -> str:
    """Our own error message out of Spark's wrapping of a failed ``foreachBatch`` (a long JVM trace)."""
    text = str(exc)
    for marker in markers:
        if marker in text:
            return marker + text.split(marker, 1)[1].split("\n", 1)[0]
    return text.split("\n", 1)[0][:2000]


def write_summary(path: str | None, summary: dict) -> None:
    """Write a job's summary JSON where the orchestrator reads it (nothing without a path)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(summary, indent=2))


def job_main(name: str, argv: list[str] | None, *, parse: Callable[[list[str]], Any],
             bad_argument: type[Exception] | tuple[type[Exception], ...], run: Callable[[Any, Any], Any],
             failure: tuple[type[Exception], ...], describe: Callable[[Any], str]) -> int:  # fmt: skip
    """What every job's ``main`` does: args -> session -> run -> one result line.

    Exit 2 on a ``bad_argument`` (before any session starts), 1 on a
    ``failure`` of the run (its message on stderr), 0 with ``describe(result)``
    printed otherwise. The session is stopped in every case.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = parse(sys.argv[1:] if argv is None else argv)
    except bad_argument as exc:
        print(f"{name}: bad argument: {exc}", file=sys.stderr)
        return 2
    spark = build_session(f"{name}:{cfg.pipeline}")
    try:
        result = run(spark, cfg)
    except failure as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(f"{name}: pipeline={cfg.pipeline} {describe(result)}")
    return 0
