"""A table's properties and owner, and Delta commands whose commit carries the job's metadata.

Every job checks, before it writes, that the table belongs to its pipeline
(:func:`check_owner`, :data:`OWNER_PROPERTY`), and sets the run's table
properties in a commit that holds no progress (:func:`apply_table_properties`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from include.contract.errors import TableOwnershipError
from spark_jobs.delta_commits import Fence, check_fence, delta_snapshot
from spark_jobs.hadoop_files import checkpoint_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("table_properties")


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


def apply_to_tables(spark: SparkSession, paths: Iterable[str], properties: dict[str, str], fence: Fence,
                    owner: str) -> None:  # fmt: skip
    """:func:`apply_table_properties` on each of ``paths``, logging what each one got."""
    for path in paths:
        properties_set = apply_table_properties(spark, path, properties, fence, owner=owner)
        if properties_set:
            log.info("%s table properties set: %s", path, ", ".join(f"{k}={v}" for k, v in properties_set.items()))


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
