"""Fields the records carry that silver does not have: which become columns, which stay out, which are refused.

Within the caps of ``transform.limits``: a batch brings at most a few names to
the driver (:func:`plan_new_fields`), and a record that would need a column past
a cap gets a problem naming it (:func:`refuse_new_fields`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from include.contract.transform_spec import FIELD_NAME, FieldSpec, TransformSpec
from spark_jobs.field_rules import INTEGER_KINDS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


#: The ``field`` of the problem a record gets for a new field beyond ``transform.limits.new_columns``.
NEW_FIELD_PROBLEM = "(new field)"


def infer_type(variant_schema: str | None) -> str | None:
    """The silver type for a new field whose values Spark's ``schema_of_variant_agg`` described.

    Integers become ``long``, fractions ``double``, text ``string``, objects,
    arrays and mixed kinds ``json`` (their JSON text); ``None`` when every value
    was null (the field is added once a value shows its type).
    """
    if not variant_schema or variant_schema == "VOID":
        return None
    s = variant_schema.upper()
    if s in INTEGER_KINDS:
        return "long"
    if s.startswith("DECIMAL("):
        precision, scale = (int(x) for x in s[len("DECIMAL(") : -1].split(","))
        return "long" if scale == 0 and precision <= 18 else "double"
    if s in ("DOUBLE", "FLOAT"):
        return "double"
    if s == "BOOLEAN":
        return "boolean"
    if s == "STRING":
        return "string"
    return "json"


def unknown_fields(decoded: DataFrame, known: Iterable[str]) -> DataFrame:
    """Distinct top-level keys of readable records that are not in ``known`` (a small DataFrame ``name``)."""
    from pyspark.sql import functions as F

    return (
        decoded.where("_object")
        .select(F.explode(F.json_object_keys(F.col("_text"))).alias("name"))
        .where(~F.col("name").isin(*known))
        .distinct()
    )


@dataclass(frozen=True)
class NewFields:
    """What a batch does about the fields its records carry that silver does not have.

    ``added``: fields that become silver columns. ``ignored``: at most
    ``transform.limits.field_names`` names, each with why it stays out.
    ``unknown``: how many distinct names stay out in all (named or not).
    ``refused``: records carrying a usable new name beyond the run's column
    cap go to quarantine (:func:`refuse_new_fields`). ``waiting``: usable
    names with only nulls so far, to be added once a value shows a type (never
    refused meanwhile).
    """

    added: list[FieldSpec]
    ignored: dict[str, str]
    unknown: int
    refused: bool
    waiting: tuple[str, ...] = ()


def plan_new_fields(decoded: DataFrame, spec: TransformSpec, fields: Sequence[FieldSpec], *,
                    budget: int | None = None) -> NewFields:  # fmt: skip
    """New fields seen in this batch, within the caps of ``transform.limits``.

    With ``new_fields: add``, a new field with a usable name becomes a column of
    the type its values show (:func:`infer_type`), up to ``budget`` columns
    (what is left of ``limits.new_columns`` this run); with ``ignore``, or when
    the name cannot be a column, it is reported and left out of silver. Only
    the first names in order are brought to the driver, so a producer writing
    a new name into every record costs a count, not a list of them all.
    """
    from pyspark.sql import functions as F

    limits = spec.limits
    budget = limits.new_columns if budget is None else max(0, budget)
    known = [f.name for f in fields]
    lowered = {n.lower(): n for n in known}
    unknown = unknown_fields(decoded, known)
    wanted = limits.field_names + budget + 1
    names = sorted(r["name"] for r in unknown.orderBy("name").limit(wanted).collect())
    total = len(names) if len(names) < wanted else unknown.count()
    ignored: dict[str, str] = {}
    usable = []
    for name in names:
        if spec.new_fields == "ignore":
            ignored[name] = "transform.new_fields is 'ignore'"
        elif not FIELD_NAME.fullmatch(name):
            ignored[name] = "not usable as a column name (letters, digits and '_', starting with a letter)"
        elif name.lower() in lowered:
            ignored[name] = f"differs only in case from field {lowered[name.lower()]!r}"
        else:
            usable.append(name)
    # More usable names than the cap allows, or names never brought here: records with such names
    # are refused by one exact filter, whatever this sample holds.
    refused = spec.new_fields == "add" and (len(usable) > budget or len(names) < total)
    usable = usable[:budget]
    added, waiting = [], []
    if usable:
        parsed = F.try_parse_json(F.col("_text"))  # parsed again only here: a new field is rare
        row = (
            decoded.where(F.size("_problems") == 0)
            .agg(*(F.schema_of_variant_agg(F.variant_get(parsed, f"$.{n}", "variant")).alias(n) for n in usable))
            .collect()[0]
        )
        for name in usable:
            inferred = infer_type(row[name])
            if inferred is None:
                ignored[name] = "only null values so far; added once a value shows its type"
                waiting.append(name)
            else:
                added.append(FieldSpec(name=name, type=inferred))
    named = dict(sorted(ignored.items())[: limits.field_names])
    return NewFields(added=added, ignored=named, unknown=total - len(added), refused=refused, waiting=tuple(waiting))


def refuse_new_fields(decoded: DataFrame, allowed: Sequence[str], cap: int | str) -> DataFrame:
    """``decoded`` with a problem for each readable record that carries a usable field name not in ``allowed``:
    silver has taken the columns a cap allows, and such a record would need more. ``cap`` names the cap
    (``transform.limits.silver_columns (500 silver columns in all)``); a number is the run's
    ``transform.limits.new_columns``."""
    from pyspark.sql import functions as F

    named = cap if isinstance(cap, str) else f"transform.limits.new_columns ({cap} new silver columns a run)"
    lowered = sorted({a.lower() for a in allowed})
    keys = F.json_object_keys(F.col("_text"))
    beyond = F.filter(keys, lambda k: k.rlike(f"^{FIELD_NAME.pattern}$") & ~F.lower(k).isin(*lowered))
    problem = F.struct(
        F.lit(NEW_FIELD_PROBLEM).alias("field"),
        F.concat(
            F.lit("new field "), beyond[0],
            F.lit(f" beyond {named}; raise the limit "
                  "or fix the producer, then replay these records (trigger-form action replay_quarantine)"),
        ).alias("message"),
    )  # fmt: skip
    refused = F.col("_object") & (F.size(beyond) > 0)
    return decoded.withColumn(
        "_problems", F.when(refused, F.concat(F.col("_problems"), F.array(problem))).otherwise(F.col("_problems"))
    )
