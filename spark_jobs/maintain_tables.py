"""Table maintenance of a pipeline: compaction, VACUUM and a log checkpoint on each of its Spark tables.

Runs as the last step of a run's Spark application (``spark_jobs/run_steps.py``)
when the preflight found maintenance due, so it runs on the run's cluster and
inside the pipeline's lock, after the ingest and the transform committed; or
alone, when the maintain task is retried::

    spark-submit ... spark_jobs/maintain_tables.py --pipeline orders \\
        --table bronze=/lake/orders/bronze --table silver=/lake/orders/silver \\
        --zorder-by silver=customer_id --summary-path ...

Per table, in this order:

1. ``OPTIMIZE`` (bin-packing, or Z-order by the columns ``--zorder-by`` names):
   its commit only rewrites files (``dataChange=false``), so the transform's
   stream skips it and the offsets it carries stay where they were.
2. ``VACUUM`` with the table's own ``delta.deletedFileRetentionDuration``
   (the pipeline's ``tables.deleted_file_retention_days``, never below
   Delta's 7-day safety default); Delta refuses anything shorter.
3. A log checkpoint of the newest version, so readers (delta-rs in the
   Airflow tasks, Spark) replay one Parquet file and few commits; Delta's
   own log cleanup runs with it.

None of these commits may look like progress: every commit this step made is
read back, and one carrying ``userMetadata`` or a ``txn`` action fails the
step (the progress readers rely on it, see ``include/contract/table_stand.py``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from include.contract import summaries as contract
from include.contract.errors import (
    MaintenanceConfigError,
    MaintenanceError,
)
from include.contract.jobs import MAINTAINED_TABLES, ContractArgumentParser, MaintainArgs
from include.contract.routes import ROUTE_NAME, UNROUTED
from spark_jobs.delta_commits import check_fence, delta_snapshot, fence_of
from spark_jobs.job_common import JobStep, job_main, write_summary
from spark_jobs.table_properties import check_owner, delta_table_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

#: The tables a pipeline may maintain, in the order they are done.
TABLES = MAINTAINED_TABLES
#: Session settings a progress commit sets for its own command; never set while maintenance commits.
PROGRESS_CONFS = (
    "spark.databricks.delta.commitInfo.userMetadata",
    "spark.databricks.delta.write.txnAppId",
    "spark.databricks.delta.write.txnVersion",
)


@dataclass(frozen=True)
class MaintenanceConfig:
    """The tables to maintain (name -> location), in :data:`TABLES` order, and what to do to them."""

    pipeline: str
    tables: dict[str, str]
    zorder_by: dict[str, tuple[str, ...]] = field(default_factory=dict)
    optimize: bool = True
    vacuum: bool = True
    checkpoint: bool = True
    run_id: str = "manual"
    summary_path: str | None = None
    #: The run lock's epoch this run holds (``--lock-epoch``), or ``None`` outside a DAG run.
    lock_epoch: int | None = None


def _pair(option: str, text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    kind, dot, route = name.partition(".")
    named = not dot or kind != "bronze" and (ROUTE_NAME.fullmatch(route) is not None or route == UNROUTED)
    if not sep or kind not in TABLES or not named or not value:
        raise MaintenanceConfigError(
            f"argument {option}: expected <table>=<value> with <table> one of {', '.join(TABLES)} (silver and "
            f"quarantine also as silver.<route>, quarantine.<route>), got {text!r}"
        )
    return name, value


def build_arg_parser() -> ContractArgumentParser:
    """The job's command line: :class:`include.contract.jobs.MaintainArgs`, which the orchestrator renders."""
    return MaintainArgs.parser()


def parse_config(argv: list[str]) -> MaintenanceConfig:
    """Parse and check the job's arguments; raises :class:`MaintenanceConfigError` naming the argument."""
    a = MaintainArgs.from_args(argv)
    given = dict(_pair("--table", t) for t in a.table)
    zorder = {}
    for text in a.zorder_by:
        name, columns = _pair("--zorder-by", text)
        if name not in given:
            raise MaintenanceConfigError(f"argument --zorder-by: table {name!r} is not among the --table arguments")
        zorder[name] = tuple(c for c in columns.split(",") if c)
    return MaintenanceConfig(
        pipeline=a.pipeline, tables=dict(sorted(given.items(), key=lambda i: TABLES.index(i[0].partition(".")[0]))),
        zorder_by=zorder,
        optimize=a.optimize, vacuum=a.vacuum, checkpoint=a.checkpoint,
        run_id=a.run_id, summary_path=a.summary_path, lock_epoch=a.lock_epoch,
    )  # fmt: skip


def _first(df: DataFrame) -> Row:
    """The first row of ``df`` (a command's one-row answer: DESCRIBE DETAIL, OPTIMIZE's metrics)."""
    row = df.first()
    if row is None:
        raise MaintenanceError("Delta answered a command with no row where it always gives one")
    return row


def _detail(spark: SparkSession, path: str) -> tuple[int, int]:
    row = _first(spark.sql(f"DESCRIBE DETAIL {delta_table_sql(path)}").select("numFiles", "sizeInBytes"))
    return int(row["numFiles"]), int(row["sizeInBytes"])


def _commits_after(spark: SparkSession, path: str, version: int) -> list[Any]:
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history(50)
    return [r for r in history.select("version", "operation", "userMetadata", "operationMetrics").collect()
            if r["version"] > version]  # fmt: skip


def _txn_in_commit(spark: SparkSession, path: str, version: int) -> bool:
    """Whether the commit file of ``version`` holds a txn action (read as text: one JSON action per line)."""
    import json

    jvm: Any = spark.sparkContext._jvm
    log_path = jvm.org.apache.hadoop.fs.Path(f"{path.rstrip('/')}/_delta_log/{version:020d}.json")
    fs = log_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.open(log_path)
    try:
        reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))
        while (line := reader.readLine()) is not None:
            if "txn" in json.loads(line):
                return True
    finally:
        stream.close()
    return False


def maintain_table(spark: SparkSession, name: str, path: str, cfg: MaintenanceConfig) -> dict[str, Any]:
    """Maintain one table; returns its figures (files and bytes before/after, each operation's metrics, seconds)."""
    from delta.tables import DeltaTable

    started = time.monotonic()
    snapshot = delta_snapshot(spark, path)
    check_fence(spark, path, fence_of(cfg.pipeline, cfg.lock_epoch), snapshot)
    version_before = int(snapshot.version())
    files_before, bytes_before = _detail(spark, path)
    out: dict[str, Any] = {"path": path, "version_before": version_before, "files_before": files_before,
                           "bytes_before": bytes_before}  # fmt: skip
    table = DeltaTable.forPath(spark, path)
    if cfg.optimize:
        t = time.monotonic()
        columns = cfg.zorder_by.get(name)
        builder = table.optimize()
        metrics = _first(builder.executeZOrderBy(*columns) if columns else builder.executeCompaction())["metrics"]
        out["optimize"] = {"files_removed": int(metrics["numFilesRemoved"]), "files_added": int(metrics["numFilesAdded"]),
                           "zorder_by": list(columns or ()), "seconds": round(time.monotonic() - t, 3)}  # fmt: skip
    if cfg.vacuum:
        t = time.monotonic()
        table.vacuum()  # the table's own delta.deletedFileRetentionDuration
        out["vacuum"] = {"files_deleted": None, "seconds": round(time.monotonic() - t, 3)}
    if cfg.checkpoint:
        t = time.monotonic()
        snapshot = delta_snapshot(spark, path)
        snapshot.deltaLog().checkpoint()  # of the newest version
        out["checkpoint"] = {"version": int(snapshot.version()), "seconds": round(time.monotonic() - t, 3)}
    # One read of the history this step wrote: VACUUM's own count, and the proof that nothing is progress.
    commits = _commits_after(spark, path, version_before)
    for row in commits:
        if row["operation"] == "VACUUM END" and "vacuum" in out:
            out["vacuum"]["files_deleted"] = int((row["operationMetrics"] or {}).get("numDeletedFiles", 0))
        if row["userMetadata"] is not None or _txn_in_commit(spark, path, int(row["version"])):
            raise MaintenanceError(
                f"table {name} ({path}): maintenance commit {row['version']} ({row['operation']}) carries "
                f"{'userMetadata' if row['userMetadata'] is not None else 'a txn action'}, so it could pass for "
                "progress; nothing was lost, but stop maintenance (maintenance.every_runs: null) and report this"
            )
    out["commits"] = sorted((int(r["version"]), r["operation"]) for r in commits)
    out["files_after"], out["bytes_after"] = _detail(spark, path)
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


def run(spark: SparkSession, cfg: MaintenanceConfig) -> dict[str, Any]:
    """Maintain every existing table of ``cfg``; writes and returns the summary."""
    from delta.tables import DeltaTable

    started = time.monotonic()
    saved = {k: spark.conf.get(k, None) for k in PROGRESS_CONFS}
    for key in PROGRESS_CONFS:
        spark.conf.unset(key)
    # VACUUM lists the table's folder in parallelPartitionDiscovery.parallelism tasks (10,000 by
    # default): 20-30 s of empty tasks on a small cluster. Its START/END commits say what it deleted.
    extra = {"spark.sql.sources.parallelPartitionDiscovery.parallelism": str(max(2, spark.sparkContext.defaultParallelism)),
             "spark.databricks.delta.vacuum.logging.enabled": "true"}  # fmt: skip
    previous = {k: spark.conf.get(k, None) for k in extra}
    for key, value in extra.items():
        spark.conf.set(key, value)
    tables: dict[str, dict[str, Any]] = {}
    try:
        for name, path in cfg.tables.items():
            if not DeltaTable.isDeltaTable(spark, path):
                tables[name] = {"path": path, "skipped": "no table yet"}
                continue
            # VACUUM deletes every file a table does not reference: never another pipeline's table's.
            check_owner(spark, path, cfg.pipeline, name)
            tables[name] = maintain_table(spark, name, path, cfg)
            t = tables[name]
            print(f"maintain {name}: files {t['files_before']} -> {t['files_after']}, "
                  f"bytes {t['bytes_before']} -> {t['bytes_after']}, {t['seconds']:.1f}s", flush=True)  # fmt: skip
    finally:
        for key, old in {**previous, **saved}.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)
    summary = {"pipeline": cfg.pipeline, "run_id": cfg.run_id, "tables": tables,
               "duration_s": round(time.monotonic() - started, 3)}  # fmt: skip
    write_summary(cfg.summary_path, contract.MaintainSummary.from_json(summary).to_json())
    return summary


def describe(summary: dict[str, Any]) -> str:
    """One line: files before -> after per table."""
    parts = [f"{n} files {t['files_before']}->{t['files_after']}" if "files_before" in t else f"{n} {t['skipped']}"
             for n, t in summary["tables"].items()]  # fmt: skip
    return "; ".join(parts) + f" in {summary['duration_s']:.1f}s"


STEP = JobStep(
    "maintain_tables", parse=parse_config, bad_argument=MaintenanceConfigError, run=run,
    describe=describe,
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Entry point: args -> session -> run -> summary line; exit 2 on bad arguments."""
    return job_main(STEP, argv)


if __name__ == "__main__":
    sys.exit(main())
