"""Delta through the driver's JVM: a table's snapshot and txn actions, the run lock's fence, where bronze
stands, and the one commit that carries a batch's rows with its position.

Each job marks every micro-batch with one Delta commit whose ``userMetadata``
names the batch (epoch and batch id) and whose ``txn`` actions say where the
table stands (read back from the snapshot's state, :func:`txn_versions`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from include.contract.errors import ContractError, DeltaCommitError, StaleLockError
from include.contract.jobs import bronze_app_id, lock_app_id
from include.readers.delta_log import LOG_NOT_IN_COMMIT_FILES, commit_info
from spark_jobs.hadoop_files import checkpoint_files

if TYPE_CHECKING:
    from delta.tables import DeltaTable
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from include.contract.table_stand import Stand


class BatchCommit(Protocol):
    # Read-only: the commit records are frozen dataclasses.
    @property
    def epoch(self) -> int: ...

    @property
    def batch_id(self) -> int: ...


C = TypeVar("C", bound=BatchCommit)


#: ``Commit.from_user_metadata``: the commit's record, or ``None`` for other writers' commits.
Parser = Callable[..., C | None]


def _jvm_seq(jvm: Any, items: list[Any]) -> Any:
    """A Scala immutable ``Seq`` of ``items`` (py4j proxies)."""
    values = jvm.java.util.ArrayList()
    for item in items:
        values.add(item)
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(values).toList()


def delta_snapshot(spark: SparkSession, path: str) -> Any:
    """The current snapshot of the Delta table at ``path`` in the JVM (py4j proxy), brought up to date."""
    jvm: Any = spark.sparkContext._jvm
    return jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).update(
        False, jvm.scala.Option.empty(), jvm.scala.Option.empty())  # fmt: skip


def txn_versions(spark: SparkSession, snapshot: Any) -> dict[str, int]:
    """The txn actions (app id -> version) of a Delta snapshot of the JVM.

    From the version's checksum file when Delta wrote the transactions there
    (it does for up to ``spark.databricks.delta.setTransactionsInCrc.maxAllowed``
    of them, 100 by default), which costs no Spark job; otherwise from the
    replayed state (a Spark job over the log: about half a second per new
    version on a warm local driver, several seconds on a cold executor).
    """
    jvm: Any = spark.sparkContext._jvm
    crc = snapshot.checksumOpt()
    if crc.isDefined() and crc.get().setTransactions().isDefined():
        text = jvm.org.apache.spark.sql.delta.util.JsonUtils.mapper().writeValueAsString(crc.get().setTransactions().get())
        return {t["appId"]: int(t["version"]) for t in json.loads(text)}
    return {str(k): int(v) for k, v in jvm.scala.jdk.javaapi.CollectionConverters.asJava(snapshot.transactions()).items()}


#: ``(pipeline, lock epoch)`` of the run a job works for; ``None`` when it runs outside a DAG run's lock.
Fence = tuple[str, int] | None


def fence_of(pipeline: str, lock_epoch: int | None) -> Fence:
    """The fence of a job given ``--lock-epoch`` (``None`` without one: a job run by hand)."""
    return (pipeline, lock_epoch) if lock_epoch is not None else None


def stale_lock(path: str, fence: Fence, table_epoch: int | None) -> StaleLockError | None:
    """The error when the table at ``path`` records a newer lock epoch than ``fence``'s, else ``None``."""
    if fence is None or table_epoch is None or table_epoch <= fence[1]:
        return None
    pipeline, epoch = fence
    error = StaleLockError(
        f"{path}: this run holds the run lock of pipeline {pipeline!r} at epoch {epoch}, but the table records "
        f"epoch {table_epoch}: a later run took the lock over (Airflow said this run was no longer running), "
        "so this run's commit was refused and it writes nothing more. Nothing to repair: the later run goes on "
        "from where the table stands. Find out why this run was taken for dead (a lost worker, a run marked "
        "failed by hand) in the later run's check_request log",
        pipeline=pipeline, table=path, action="none: the run holding the lock carries on",
    )  # fmt: skip
    error.lock_epoch, error.table_epoch = epoch, table_epoch
    return error


def check_fence(spark: SparkSession, path: str, fence: Fence, snapshot: Any = None) -> None:
    """Refuse (:class:`StaleLockError`) to write to ``path`` when the table records a newer lock epoch.

    For commits that cannot carry the epoch themselves (MERGE, OPTIMIZE): a
    check just before the commit. Bronze's own batch commits carry it
    atomically (:func:`commit_with_stand`).
    """
    if fence is None:
        return
    from delta.tables import DeltaTable

    if snapshot is None:
        if not DeltaTable.isDeltaTable(spark, path):
            return
        snapshot = delta_snapshot(spark, path)
    error = stale_lock(path, fence, txn_versions(spark, snapshot).get(lock_app_id(fence[0])))
    if error is not None:
        raise error


def history_rows(table: DeltaTable, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` entries of a ``DeltaTable``'s history as dicts, with the columns the readers use."""
    rows = table.history(limit).select("version", "operation", "operationParameters", "userMetadata").collect()
    return [r.asDict() for r in rows]


class LogHistory:
    """A table's newest commits as :func:`history_rows` gives them, read from its commit files.

    ``DeltaTable.history`` builds a DataFrame of every commit's ``CommitInfo``
    and runs a Spark job over the log; on a driver's first use that costs
    seconds of warm-up (its encoder's code generation), paid by every run
    before its first batch. Where the table stands needs only each newest
    commit's operation, parameters and ``userMetadata``, which the Delta
    protocol puts in the ``commitInfo`` action of ``_delta_log/<version>.json``;
    those are read here one file at a time through the job's filesystem, from
    the snapshot's version down, stopping where log cleanup has removed the
    older files (as Delta's history does). Reads are kept, so a widening
    read (:func:`include.contract.history.read_until`) reads each file once.
    A table whose log is not all in those files goes to Delta's history.
    """

    def __init__(self, spark: SparkSession, path: str, snapshot: Any) -> None:
        from include.contract.locations import local_path

        local = local_path(path)
        self._log = f"{local if local is not None else path.rstrip('/')}/_delta_log"
        self._files = checkpoint_files(spark, path)
        self._version = int(snapshot.version())
        self._read: list[dict[str, Any]] = []
        self._complete = self._version < 0
        jvm: Any = spark.sparkContext._jvm
        features = set(jvm.scala.jdk.javaapi.CollectionConverters.asJava(snapshot.protocol().writerFeatureNames()))
        self._delta = None
        if features & LOG_NOT_IN_COMMIT_FILES:
            from delta.tables import DeltaTable

            self._delta = DeltaTable.forPath(spark, path)

    def rows(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` commits, newest first: ``version``, ``operation``, ``operationParameters``
        (each value a string, as Delta's ``CommitInfo`` holds them) and ``userMetadata``."""
        if self._delta is not None:
            return history_rows(self._delta, limit)
        while len(self._read) < limit and not self._complete:
            version = self._version - len(self._read)
            try:
                text = self._files.read_bytes(f"{self._log}/{version:020d}.json").decode("utf-8")
            except FileNotFoundError:  # removed by log cleanup: Delta's history ends there too
                self._complete = True
                break
            info = commit_info(text)
            params = info.get("operationParameters") or {}
            self._read.append({
                "version": version,
                "operation": info.get("operation"),
                "operationParameters": {k: v if v is None or isinstance(v, str) else json.dumps(v)
                                        for k, v in params.items()},
                "userMetadata": info.get("userMetadata"),
            })  # fmt: skip
            self._complete = version == 0
        return self._read[:limit]


def _num_files(snapshot: Any) -> int:
    """Files in the snapshot, from its checksum file when there is one (no state replay)."""
    crc = snapshot.checksumOpt()
    return int(crc.get().numFiles()) if crc.isDefined() else int(snapshot.numOfFiles())


def read_table_stand(spark: SparkSession, path: str, pipeline: str, partitions: dict[str, list[int]]) -> Stand | None:
    """Where the bronze table stands (:func:`include.contract.table_stand.resolve`), read through Spark's Delta.

    The same decision the Airflow side makes with delta-rs: the table's state
    (its txn actions, every one of them, so partitions Kafka no longer has
    are seen too), the newest commits back to the last progress commit, and
    whether the table has files. ``None``: no table, or no progress and no rows.
    """
    from delta.tables import DeltaTable

    from include.contract import table_stand
    from include.contract.history import FIRST_READ, read_until

    if not DeltaTable.isDeltaTable(spark, path):
        return None
    snapshot = delta_snapshot(spark, path)
    history = LogHistory(spark, path, snapshot)
    txns = txn_versions(spark, snapshot)
    topics = {t: set(p) for t, p in partitions.items()}
    for topic, partition in table_stand.recorded_partitions(txns, pipeline):
        topics.setdefault(topic, set()).add(partition)
    state = table_stand.read_state(txns.get, pipeline, topics)
    version = int(snapshot.version())
    entries = read_until(
        lambda limit: table_stand.history_entries(history.rows(limit)),
        # With a state, the commits back to its version are all that resolve() needs.
        lambda found: state is not None or any(table_stand.progress_commit(e, pipeline) for e in found),
        first=FIRST_READ if state is None else max(FIRST_READ, version - state.commit_version + 2),
    )
    return table_stand.resolve(
        pipeline=pipeline, state=state, history=entries, has_rows=_num_files(snapshot) > 0,
        txn_seen=lambda c: bronze_app_id(c.pipeline, c.epoch) in txns, path=path,
    )  # fmt: skip


@dataclass(frozen=True)
class WrittenFile:
    """A data file the commit adds: its path relative to the table (URL-encoded, as in the log) and Delta's stats JSON."""

    path: str
    stats: str | None


#: ``finish(read_version, files)`` -> ``(userMetadata, txn actions)`` of the commit, decided once the files are written.
Finish = Callable[[int, list[WrittenFile]], tuple[str, list[tuple[str, int]]]]


def commit_with_stand(spark: SparkSession, path: str, df: DataFrame | None, *, finish: Finish,
                      idempotency: tuple[str, int] | None, schema: StructType | None = None,
                      fence: Fence = None) -> int | None:  # fmt: skip
    """Append ``df`` (or nothing, for ``None``) to the Delta table at ``path`` in one commit with txn actions.

    The rows are read once: Delta writes the files (collecting each file's
    statistics as it goes), then ``finish(read_version, files)`` decides the
    commit's ``userMetadata`` and the ``(app id, version)`` txn actions that
    travel in the same atomic commit as the rows (where the table stands, see
    :mod:`include.contract.table_stand`); Spark's DataFrame writer can set only one.
    An exception in ``finish`` leaves the written files uncommitted: they are
    never part of the table (VACUUM removes them).
    ``idempotency`` is ``(app id, version)``: when the table already records
    that version or a later one, nothing is written and ``None`` returned
    (a replayed batch), as Delta's ``txnAppId``/``txnVersion`` options do.
    A table that does not exist yet is created by this commit, with the
    schema of ``df`` (or ``schema``, a PySpark ``StructType``, when there are
    no rows), all columns nullable as Delta's writer makes them.
    ``fence`` ``(pipeline, lock epoch)``: the commit carries the epoch, and is
    refused (:class:`StaleLockError`) when the table records a newer one, or
    when a commit carrying one wins the race against it.
    Returns the committed table version.
    """
    jvm: Any = spark.sparkContext._jvm
    delta = jvm.org.apache.spark.sql.delta
    txn = delta.DeltaLog.forTable(spark._jsparkSession, path).startTransaction()
    versions = txn_versions(spark, txn.snapshot()) if idempotency is not None or fence is not None else {}
    if fence is not None:
        error = stale_lock(path, fence, versions.get(lock_app_id(fence[0])))
        if error is not None:
            raise error
        # A concurrent commit that carries a lock epoch (a takeover's fence) now fails this one.
        txn.readTxn().addOne(lock_app_id(fence[0]))
    if idempotency is not None:
        app, version = idempotency
        if versions.get(app, -1) >= version:
            return None
        # As txn.txnVersion would: a concurrent commit of the same app id now fails this one.
        txn.readTxn().addOne(app)
    if int(txn.readVersion()) < 0:
        if df is not None:
            jschema = df._jdf.schema()
        elif schema is not None:
            jschema = jvm.org.apache.spark.sql.types.DataType.fromJson(schema.json())
        else:
            raise ContractError(f"{path}: a first commit needs the rows or the table's schema; neither was given")
        schema_json = jschema.asNullable().json()
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        no_options = loader.loadClass("scala.collection.immutable.Map$").getField("MODULE$").get(None).empty()
        created = jvm.scala.Some(jvm.java.lang.Long.valueOf(int(time.time() * 1000)))
        txn.updateMetadataForNewTable(delta.actions.Metadata(
            str(uuid.uuid4()), None, None, delta.actions.Format("parquet", no_options), schema_json,
            _jvm_seq(jvm, []), no_options, created,
        ))  # fmt: skip
    files = txn.writeFiles(df._jdf) if df is not None else _jvm_seq(jvm, [])
    written = []
    # One Java view of the Seq: apply(i) on a Scala List walks it from the head every time.
    for action in jvm.scala.jdk.javaapi.CollectionConverters.asJava(files):
        if action.getClass().getSimpleName() != "AddFile":
            raise DeltaCommitError(f"{path}: Delta's writer returned a {action.getClass().getSimpleName()} for an append")
        written.append(WrittenFile(str(action.path()), action.stats()))
    user_metadata, txns = finish(int(txn.readVersion()), written)
    if fence is not None:
        txns = [*txns, (lock_app_id(fence[0]), fence[1])]
    now = jvm.scala.Some(jvm.java.lang.Long.valueOf(int(time.time() * 1000)))
    marks = [delta.actions.SetTransaction(app, int(v), now) for app, v in txns]
    none = jvm.scala.Option.empty()
    operation = getattr(delta, "DeltaOperations$Write")(
        jvm.org.apache.spark.sql.SaveMode.Append, none, none, jvm.scala.Some(user_metadata),
        none, none, none, none, none,
    )  # fmt: skip
    from delta.exceptions import ConcurrentTransactionException  # its import makes py4j raise it

    try:
        return int(txn.commit(files.toList().appendedAll(_jvm_seq(jvm, marks)), operation))
    except ConcurrentTransactionException:
        check_fence(spark, path, fence)  # raises when a newer epoch's commit won the race
        raise


def confirm_newest_commit(spark: SparkSession, path: str, parse: Parser[C], epoch: int, batch_id: int,
                          error: type[Exception]) -> tuple[int, str, dict[str, str]]:  # fmt: skip
    """``(version, operation, operation metrics)`` of the commit just written for ``(epoch, batch_id)``.

    Raises ``error`` if that commit is not the newest.
    """
    from delta.tables import DeltaTable

    row = DeltaTable.forPath(spark, path).history(1).collect()[0]
    commit = parse(row["userMetadata"], version=row["version"])
    if commit is None or (commit.epoch, commit.batch_id) != (epoch, batch_id):
        raise error(
            f"{path}: after writing batch {batch_id} of epoch {epoch}, the newest commit "
            f"(version {row['version']}) is not that batch; another writer is using the table"
        )
    return int(row["version"]), row["operation"], dict(row["operationMetrics"] or {})
