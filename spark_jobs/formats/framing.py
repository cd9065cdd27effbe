"""The Confluent wire format's header, which the registry formats share: magic byte 0, the writer schema's 4-byte id.

:func:`frame` splits a framed value into ``_sid`` (its schema id) and
``_payload`` (what follows the header) and gives the reason a value cannot be
read before its format decodes it: no header, an id whose writer schema the run
refused, or an id the batch did not look up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from include.readers.schema_registry import HEADER_BYTES

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from spark_jobs.formats.base import ValuePlan


def has_header(value: Column) -> Column:
    """Whether the binary column ``value`` starts with the wire format's header: magic byte 0 and room for the id."""
    from pyspark.sql import functions as F

    return (F.octet_length(value) >= HEADER_BYTES) & (F.hex(F.substring(value, 1, 1)) == "00")


def schema_id_of(value: Column) -> Column:
    """The 4-byte schema id after ``value``'s magic byte; null for a value without the header."""
    from pyspark.sql import functions as F

    return F.when(has_header(value), F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long"))


def frame(df: DataFrame, plan: ValuePlan) -> tuple[DataFrame, Column]:
    """``df`` plus ``_sid`` (the 4-byte id after magic byte 0; null for plain values) and ``_payload``, and the
    value's problem so far (null for a missing value, which the record's own checks name)."""
    from pyspark.sql import functions as F

    value = F.col("_kafka_value")
    size = F.octet_length(value)
    present = value.isNotNull() & (size > 0)
    if plan.framed:
        sid = schema_id_of(value)
        payload = F.expr(f"substring(_kafka_value, {HEADER_BYTES + 1})")
    else:
        sid, payload = F.lit(None).cast("long"), value
    df = df.select("*", sid.alias("_sid"), payload.alias("_payload"))
    problem = F.when(~present, F.lit(None).cast("string"))
    if plan.framed:
        problem = _framing_problem(problem, plan, F.col("_sid"))
    return df, problem


def _framing_problem(problem: Column, plan: ValuePlan, sid: Column) -> Column:
    """``problem`` with the framed value's own: no header, a refused writer id, an id not looked up."""
    from pyspark.sql import functions as F

    value = F.col("_kafka_value")
    problem = problem.when(
        sid.isNull(),
        F.concat(
            F.lit("value: expected the Confluent wire format (magic byte 0, a 4-byte schema id, then the "
                  "payload), got "),
            F.octet_length(value).cast("string"),
            F.lit(" bytes starting with 0x"),
            F.lower(F.hex(F.substring(value, 1, HEADER_BYTES))),
        ),
    )  # fmt: skip
    for w in plan.writers:
        if w.problem:
            problem = problem.when(sid == w.id, F.lit(f"value: schema id {w.id}: {w.problem}"))
    known = [w.id for w in plan.writers]
    # Every id of the batch within transform.limits.schema_ids was looked up before decode; any other id
    # is one beyond the cap (or, without a cap reached, this code's fault).
    why = (" was not looked up in this batch" if plan.id_cap is None else
           f" was not looked up: the batch holds more than transform.limits.schema_ids ({plan.id_cap}) "
           "distinct schema ids; raise the limit or fix the producer, then replay these records "
           "(trigger-form action replay_quarantine)")  # fmt: skip
    return problem.when(
        ~sid.isin(*known) if known else F.lit(True),
        F.concat(F.lit("value: schema id "), sid.cast("string"), F.lit(why)),
    )
