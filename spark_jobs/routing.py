"""Which route takes each bronze record of a batch, as column expressions, and the batch's routing account.

The conditions are :class:`~include.contract.routes.RouteMatch`'s, whose
:meth:`~include.contract.routes.RouteMatch.matches` defines them in Python;
here each becomes a column over bronze's own columns (``topic``, ``key``,
``value``, ``headers``), so a batch is routed in the plan that reads it, and
its account (:class:`~include.contract.routes.RoutingAccount`) is one
aggregation. Matches on a record name or subject need the registry's answer
for the schema ids the batch holds, looked up once per id and run
(:class:`WriterNames`).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from include.contract.errors import TransformError
from include.contract.routes import RouteMatch, Routing, RoutingAccount, WriterSchema
from include.readers.schema_registry import HEADER_BYTES, RegistryClient, SchemaRegistryError, is_not_found
from spark_jobs.formats.framing import has_header, schema_id_of
from spark_jobs.formats.schemas import chosen_ids, schema_id_counts

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger("bronze_to_silver")

#: The array column of the routes that take a record (after ``overlap``), and how many matched it.
ROUTES_COLUMN = "_routes"
MATCHED_COLUMN = "_matched"
#: The field name an unrouted record's quarantine row names.
UNROUTED_FIELD = "_route"


class WriterNames:
    """The registry's record name and subjects of each schema id a run's batches carry, looked up once per id.

    At most ``cap`` distinct ids a batch are looked up (the routes' largest
    ``transform.limits.schema_ids``); a record under another id matches no
    ``record_name`` or ``subject`` condition, and its unrouted reason says why.
    """

    def __init__(self, client: RegistryClient, cap: int) -> None:
        self.client = client
        self.cap = cap
        self.known: dict[int, WriterSchema] = {}
        #: Whether the last batch held more distinct ids than the cap.
        self.capped = False

    def lookup(self, bronze: DataFrame) -> dict[int, WriterSchema]:
        """The writer schemas of the ids ``bronze`` carries (within the cap), from the registry or this run's
        earlier lookups."""
        counts = schema_id_counts(bronze, self.cap, set(self.known))
        ids = chosen_ids(counts, known=set(self.known), cap=self.cap)
        self.capped = len(counts) > len(ids)
        for schema_id in ids:
            if schema_id not in self.known:
                self.known[schema_id] = self._writer(schema_id)
        return {i: self.known[i] for i in ids}

    def _writer(self, schema_id: int) -> WriterSchema:
        try:
            found = self.client.schema_by_id(schema_id)
            subjects = self.client.subjects_of(schema_id)
        except SchemaRegistryError as exc:
            if is_not_found(exc):
                log.warning("schema id %s is unknown to the registry; its records match no record_name or subject",
                            schema_id)  # fmt: skip
                return WriterSchema(schema_id, None, ())
            raise TransformError(f"routing: cannot look up writer schema id {schema_id}: {exc}") from None
        return WriterSchema(schema_id, record_full_name(found.schema, found.schema_type), subjects)


def record_full_name(schema: str, schema_type: str) -> str | None:
    """An Avro record schema's full name (``namespace.name``, or a dotted name as written); ``None`` for other
    schema types, whose records ``record_name`` does not match (``subject`` does)."""
    if schema_type.upper() != "AVRO":
        return None
    try:
        data = json.loads(schema)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    name, namespace = data["name"], data.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def match_column(match: RouteMatch, columns: list[str], writers: dict[int, WriterSchema]) -> Column:
    """The column that is true where a record meets ``match`` (never null)."""
    from pyspark.sql import functions as F

    conditions: list[Column] = []
    if match.topic is not None:
        conditions.append(F.col("topic").isin(*match.topic))
    if match.header is not None:
        name, values = match.header.name, list(match.header.values)
        if "headers" in columns:
            conditions.append(F.exists("headers", lambda h: (h["key"] == F.lit(name))
                                       & h["value"].cast("string").isin(*values)))  # fmt: skip
        else:  # a bronze table written before headers were kept
            conditions.append(F.lit(False))
    if match.key is not None:
        conditions.append(F.col("key").cast("string").rlike(match.key))
    if match.field is not None:
        value = F.col("value")
        text = F.when(has_header(value), F.expr(f"substring(value, {HEADER_BYTES + 1})")).otherwise(value).cast("string")
        path = "$['" + match.field.name.replace("\\", "\\\\").replace("'", "\\'") + "']"
        conditions.append(F.get_json_object(text, path).isin(*match.field.values))
    if match.record_name is not None or match.subject is not None:
        ids = [i for i, w in sorted(writers.items())
               if (match.record_name is None or w.record_name in match.record_name)
               and (match.subject is None or set(w.subjects) & set(match.subject))]  # fmt: skip
        conditions.append(schema_id_of(F.col("value")).isin(*ids) if ids else F.lit(False))
    combined = conditions[0]
    for c in conditions[1:]:
        combined = combined & c
    return F.coalesce(combined, F.lit(False))


def with_routes(bronze: DataFrame, routing: Routing, writers: dict[int, WriterSchema]) -> DataFrame:
    """``bronze`` with :data:`ROUTES_COLUMN` (the routes that take each record, by ``overlap``) and
    :data:`MATCHED_COLUMN` (how many routes matched it)."""
    from pyspark.sql import functions as F

    columns = bronze.columns
    names = F.array(*[F.when(match_column(r.match, columns, writers), F.lit(r.name)) for r in routing.routes])
    matched = F.filter(names, lambda n: n.isNotNull())
    taken = F.slice(matched, 1, 1) if routing.overlap == "first" else matched
    return bronze.select("*", taken.alias(ROUTES_COLUMN), F.size(matched).alias(MATCHED_COLUMN))


def account_of(routed: DataFrame, routing: Routing) -> tuple[RoutingAccount, tuple[str, int, int] | None]:
    """The batch's :class:`RoutingAccount`, and the first unrouted record (topic, partition, offset) or ``None``,
    in one aggregation over ``routed`` (:func:`with_routes`)."""
    from pyspark.sql import functions as F

    taken = F.size(ROUTES_COLUMN)
    unrouted = taken == 0
    first = F.min(F.when(unrouted, F.struct("topic", "partition", "offset")))
    row = routed.agg(
        F.count("*").alias("bronze"),
        F.count(F.when(unrouted, 1)).alias("unrouted"),
        F.count(F.when(F.col(MATCHED_COLUMN) > 1, 1)).alias("overlapping"),
        F.coalesce(F.sum(F.when(taken > 1, taken - 1)), F.lit(0)).alias("extra"),
        first.alias("first"),
        *[F.count(F.when(F.array_contains(ROUTES_COLUMN, r.name), 1)).alias(f"r{i}")
          for i, r in enumerate(routing.routes)],
    ).collect()[0]  # fmt: skip
    account = RoutingAccount(
        bronze=int(row["bronze"]),
        matched={r.name: int(row[f"r{i}"]) for i, r in enumerate(routing.routes)},
        unrouted=int(row["unrouted"]),
        overlapping=int(row["overlapping"]),
        extra=int(row["extra"]),
    )
    at = row["first"]
    return account, None if at is None else (str(at["topic"]), int(at["partition"]), int(at["offset"]))


def routed_to(routed: DataFrame, name: str) -> DataFrame:
    """The records of ``routed`` route ``name`` takes, with bronze's own columns only."""
    from pyspark.sql import functions as F

    return routed.where(F.array_contains(ROUTES_COLUMN, name)).drop(ROUTES_COLUMN, MATCHED_COLUMN)


def unrouted_reason(routing: Routing, capped: bool) -> str:
    """Why a record is unrouted, as its quarantine row and the ``fail`` policy's error say."""
    routes = "; ".join(f"{r.name}: {r.match.describe()}" for r in routing.routes)
    extra = (" (the batch held more schema ids than transform.limits.schema_ids; records under the ids not looked "
             "up match no record_name or subject)") if capped else ""  # fmt: skip
    return (f"no route matches the record (routes: {routes}){extra}; add a route that takes it, or set "
            "transform.unrouted")


def unrouted_rows(routed: DataFrame, reason: str, run_id: str, epoch: int, batch_id: int) -> DataFrame:
    """The unrouted records as quarantine rows (the columns of :func:`spark_jobs.silver_rules.quarantine_rows`)."""
    from pyspark.sql import functions as F

    return routed.where(F.size(ROUTES_COLUMN) == 0).select(
        "topic", "partition", "offset", "timestamp", "key", "value",
        F.lit(reason).alias("reason"),
        F.array(F.lit(UNROUTED_FIELD)).alias("fields"),
        F.lit(run_id).alias("run_id"),
        F.lit(epoch).alias("epoch"),
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.current_timestamp().alias("quarantined_at"),
    )  # fmt: skip
