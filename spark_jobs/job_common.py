"""What the ingestion and transform jobs share: their session, their Delta commit records, crash failpoints.

Each job marks every micro-batch with one Delta commit whose ``userMetadata``
names the batch (epoch and batch id) and whose ``txn`` actions say where the
table stands (read back from the snapshot's state, :func:`txn_versions`).
Both can be killed right after that commit for crash tests.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from include import settings
from include.contract.errors import (
    ContractError,
    DeltaCommitError,
    IngestionError,
    JobConfigError,
    PipelineError,
    StaleLockError,
    TableOwnershipError,
    TransformError,
    batch_failure,
)
from include.contract.jobs import bronze_app_id, lock_app_id

if TYPE_CHECKING:
    from delta.tables import DeltaTable
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

    from include.contract.table_stand import Stand
    from include.readers.spark_checkpoint import Files

log = logging.getLogger("kde_jobs")


class BatchCommit(Protocol):
    # Read-only: the commit records are frozen dataclasses.
    @property
    def epoch(self) -> int: ...

    @property
    def batch_id(self) -> int: ...


C = TypeVar("C", bound=BatchCommit)
T = TypeVar("T")
#: ``Commit.from_user_metadata``: the commit's record, or ``None`` for other writers' commits.
Parser = Callable[..., C | None]


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


class HadoopFiles:
    """Checkpoint reads (:class:`include.readers.spark_checkpoint.Files`) through the job's Hadoop filesystem:
    what an object-store checkpoint takes, with the credentials the session was built with."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm: Any = spark.sparkContext._jvm
        self._conf: Any = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs(self, path: str) -> tuple[Any, Any]:
        p = self._jvm.org.apache.hadoop.fs.Path(path)
        return p.getFileSystem(self._conf), p

    def exists(self, path: str) -> bool:
        """Whether a file or folder (a key or a prefix, on an object store) is at ``path``."""
        fs, p = self._fs(path)
        return bool(_hadoop_io(path, lambda: fs.exists(p)))

    def children(self, path: str) -> list[tuple[str, bool]]:
        """``(name, is_folder)`` of each entry under ``path``; empty when there is none."""
        fs, p = self._fs(path)
        try:
            return _hadoop_io(path, lambda: [(s.getPath().getName(), bool(s.isDirectory())) for s in fs.listStatus(p)])
        except FileNotFoundError:
            return []

    def read_bytes(self, path: str) -> bytes:
        """The whole file, in one request (no existence check first): :class:`FileNotFoundError` when there
        is none, :class:`OSError` for another Hadoop error."""
        fs, p = self._fs(path)

        def read() -> bytes:
            stream = fs.open(p)
            try:
                return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()

        return _hadoop_io(path, read)


def _hadoop_io(path: str, call: Callable[[], T]) -> T:
    """``call()``, a Hadoop error raised as :class:`FileNotFoundError` (a missing file) or :class:`OSError`
    naming ``path``, as local reads raise them."""
    from py4j.protocol import Py4JJavaError

    try:
        return call()
    except Py4JJavaError as exc:
        java = exc.java_exception
        error = FileNotFoundError if java.getClass().getName().endswith("FileNotFoundException") else OSError
        raise error(f"{path}: {java.toString()}") from None


def checkpoint_files(spark: SparkSession, root: str) -> Files:
    """How a job reads the checkpoints under ``root``: local file reads for a folder, the session's Hadoop
    filesystem for an object store."""
    from include.contract.locations import local_path
    from include.readers import spark_checkpoint

    return spark_checkpoint.LOCAL if local_path(root) is not None else HadoopFiles(spark)


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


def history_rows(table: DeltaTable, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` entries of a ``DeltaTable``'s history as dicts, with the columns the readers use."""
    rows = table.history(limit).select("version", "operation", "operationParameters", "userMetadata").collect()
    return [r.asDict() for r in rows]


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
    txns = txn_versions(spark, snapshot)
    topics = {t: set(p) for t, p in partitions.items()}
    for topic, partition in table_stand.recorded_partitions(txns, pipeline):
        topics.setdefault(topic, set()).add(partition)
    state = table_stand.read_state(txns.get, pipeline, topics)
    version = int(snapshot.version())
    table = DeltaTable.forPath(spark, path)
    entries = read_until(
        lambda limit: table_stand.history_entries(history_rows(table, limit)),
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


#: The table property that names the pipeline a table belongs to: written with the run's other table
#: properties, by the first run that writes the table (or, for a table an earlier version made, the
#: first run since), and read by every job before it writes (:func:`check_owner`).
OWNER_PROPERTY = "kde.pipeline"
#: What a location may hold and still take a new table: what Spark's writers leave when a first write
#: dies before its commit (part files, their checksums, an empty log folder), and partition folders.
_LEFT_BY_A_FIRST_WRITE = re.compile(r"^(\.?part-.*|_SUCCESS|_delta_log|[^=]+=.*)$")


def check_owner(spark: SparkSession, path: str, pipeline: str, what: str) -> None:
    """Refuse (:class:`TableOwnershipError`) to write ``what`` (``silver``) at ``path`` for ``pipeline`` when the
    Delta table there belongs to another pipeline (:data:`OWNER_PROPERTY`), or when the location holds files
    and no Delta table (a new table is made only where nothing else is). A table without the property, made
    by an earlier version, is adopted: the pipeline loader has already refused two pipeline files that name
    one location, and the run's table properties mark it."""
    from delta.tables import DeltaTable

    if DeltaTable.isDeltaTable(spark, path):
        jvm: Any = spark.sparkContext._jvm
        configuration = dict(jvm.scala.jdk.javaapi.CollectionConverters.asJava(
            delta_snapshot(spark, path).metadata().configuration()))  # fmt: skip
        owner = configuration.get(OWNER_PROPERTY)
        if owner is not None and owner != pipeline:
            error = TableOwnershipError(
                f"{path}: the Delta table there belongs to pipeline {owner!r} (table property {OWNER_PROPERTY}), "
                f"not to {pipeline!r}; give tables.{what}_path of pipeline {pipeline!r} a location of its own",
                pipeline=pipeline, table=path)  # fmt: skip
            error.owner = owner
            raise error
        return
    from include.contract.locations import local_path

    files = checkpoint_files(spark, path)
    local = local_path(path)
    where = str(local) if local is not None else path  # a file:// URI read as its path
    if not files.exists(where):
        return
    foreign = sorted(name for name, _ in files.children(where) if not _LEFT_BY_A_FIRST_WRITE.match(name))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise TableOwnershipError(
            f"{path}: the location of {what} holds {shown} and no Delta table; a new table is made only in an "
            f"empty location, since maintenance deletes what a table does not reference. Give tables.{what}_path "
            f"of pipeline {pipeline!r} an empty location, or move those files away",
            pipeline=pipeline, table=path)  # fmt: skip


def apply_table_properties(spark: SparkSession, path: str, properties: dict[str, str], fence: Fence = None, *,
                           owner: str | None = None) -> dict[str, str]:  # fmt: skip
    """Set ``properties`` on the Delta table at ``path`` where they differ, in one commit; returns those set.

    Nothing is written when the table carries them already (or does not
    exist yet: the next run sets them). The commit holds no progress, as
    every reader of where a table stands expects of other writers' commits.
    ``fence``: refused when the table records a newer lock epoch (:func:`check_fence`).
    ``owner``: the pipeline the table belongs to, set as :data:`OWNER_PROPERTY` with the rest.
    """
    from delta.tables import DeltaTable

    if owner is not None:
        properties = {**properties, OWNER_PROPERTY: owner}
    if not properties or not DeltaTable.isDeltaTable(spark, path):
        return {}
    jvm: Any = spark.sparkContext._jvm
    snapshot = delta_snapshot(spark, path)
    check_fence(spark, path, fence, snapshot)
    current = dict(jvm.scala.jdk.javaapi.CollectionConverters.asJava(snapshot.metadata().configuration()))
    changed = {k: v for k, v in properties.items() if current.get(k) != v}
    if changed:
        quoted = ", ".join(f"'{_sql_text(k)}' = '{_sql_text(v)}'" for k, v in changed.items())
        spark.sql(f"ALTER TABLE delta.`{path.replace('`', '``')}` SET TBLPROPERTIES ({quoted})")
    return dict(sorted(changed.items()))


def _sql_text(text: str) -> str:
    """``text`` for a Spark SQL string literal in single quotes."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


def delta_table_sql(path: str) -> str:
    """The Delta table at ``path`` as Spark SQL names it (``delta.`<path>```), backquotes escaped."""
    return "delta.`" + path.replace("`", "``") + "`"


def with_user_metadata(spark: SparkSession, metadata: str, action: Callable[[], object], *,
                       txn: tuple[str, int] | None = None) -> None:  # fmt: skip
    """Run a Delta command whose commit must carry ``metadata`` (MERGE and ALTER take no write option).

    ``txn`` ``(app id, version)`` adds a txn action to the commit: Delta's DML
    commands (MERGE, UPDATE, DELETE) take it from the session, and skip the
    command when the table records that version or a later one. ALTER TABLE
    ignores it.
    """
    confs = {"spark.databricks.delta.commitInfo.userMetadata": metadata}
    if txn is not None:
        confs["spark.databricks.delta.write.txnAppId"] = txn[0]
        confs["spark.databricks.delta.write.txnVersion"] = str(txn[1])
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        action()
    finally:
        for key in confs:
            spark.conf.unset(key)


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


def write_failure(job: str, cfg: Any, exc: BaseException) -> None:
    """Write the job's failure, as data, where its summary would have gone (nothing without a path).

    The task reads it back and raises the same error class with the same
    fields (:func:`include.contract.errors.summary_failure`): an error crosses
    to Airflow as fields, not as a line of a log to search.
    """
    from include.contract.errors import as_pipeline_error, failure_summary

    pipeline = getattr(cfg, "pipeline", None)
    error = as_pipeline_error(exc, pipeline=pipeline)
    write_summary(getattr(cfg, "summary_path", None),
                  failure_summary(error, pipeline=str(pipeline), run_id=str(getattr(cfg, "run_id", "")), job=job))


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
