"""One declared field's rules, as JVM expressions over a parsed record: its parts, its type check and its bounds.

A field's problem is a message naming the field, what was expected and what was
found (:func:`field_problem`), or null when its value is fine.
:mod:`spark_jobs.silver_rules` reads every field of a record with these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from include.contract.transform_spec import FieldSpec, is_decimal, spark_type

if TYPE_CHECKING:
    from pyspark.sql import Column


#: Variant kinds of integer values (``schema_of_variant``).
INTEGER_KINDS = ("BIGINT", "INT", "SMALLINT", "TINYINT")
_NUMBER_KINDS = (*INTEGER_KINDS, "DOUBLE", "FLOAT")


def describe_type(type_name: str) -> str:
    """How a field type reads in a quarantine reason."""
    return {
        "string": "a string",
        "int": "an int (32-bit integer)",
        "long": "a long (64-bit integer)",
        "double": "a number",
        "boolean": "true or false",
        "date": "a date string like '2026-01-31'",
        "timestamp": "a timestamp string like '2026-01-31T12:00:00Z'",
        "json": "any JSON value",
    }.get(type_name, type_name)


def kind_text(kind: Column) -> Column:
    """A JSON value's kind (from ``schema_of_variant``) in words."""
    from pyspark.sql import functions as F

    return (
        F.when(kind.startswith("OBJECT"), F.lit("a JSON object"))
        .when(kind.startswith("ARRAY"), F.lit("a JSON array"))
        .when(kind == "STRING", F.lit("a string"))
        .when(kind == "BOOLEAN", F.lit("a boolean"))
        .when(kind == "VOID", F.lit("null"))
        .otherwise(F.lit("a number"))
    )


def _kind_ok(type_name: str, kind: Column) -> Column:
    from pyspark.sql import functions as F

    if type_name == "json":
        return F.lit(True)
    if type_name == "string":
        return ~(kind.startswith("OBJECT") | kind.startswith("ARRAY"))
    if type_name in ("int", "long", "double") or is_decimal(type_name):
        return kind.isin("STRING", *_NUMBER_KINDS) | kind.startswith("DECIMAL")
    if type_name == "boolean":
        return kind.isin("BOOLEAN", "STRING")
    return kind == "STRING"  # date, timestamp: ISO text only, never epoch numbers of unknown unit


def _needs_exact_check(f: FieldSpec) -> bool:
    return f.type in ("int", "long") or is_decimal(f.type)


def field_parts(f: FieldSpec, v: Column, i: int) -> list[Column]:
    """Field ``f``'s own columns, read once from the parsed record ``v``: ``_fv{i}`` (its JSON value as a
    variant), ``_val{i}`` (its typed value) and, for integer and decimal types, ``_dbl{i}`` (its value
    as a double, to tell whether the typed value kept it exactly).
    """
    from pyspark.sql import functions as F

    path = f"$.{f.name}"
    fv = F.variant_get(v, path, "variant")
    value = F.to_json(fv) if f.type == "json" else F.try_variant_get(v, path, spark_type(f.type))
    parts = [fv.alias(f"_fv{i}"), value.alias(f"_val{i}")]
    if _needs_exact_check(f):
        parts.append(F.try_variant_get(v, path, "double").alias(f"_dbl{i}"))
    return parts


def field_problem(f: FieldSpec, i: int) -> Column:
    """The problem of field ``f`` (a message naming it, or null when the value is fine), from the columns
    :func:`field_parts` made and ``_kind{i}`` (the value's kind from ``schema_of_variant``).

    Numbers must fit the type exactly: ``2.5`` is no ``int`` and ``12.345`` no
    ``decimal(10,2)``, instead of being truncated or rounded quietly.
    """
    from pyspark.sql import functions as F

    fv, value, kind = F.col(f"_fv{i}"), F.col(f"_val{i}"), F.col(f"_kind{i}")
    snippet = F.substring(F.to_json(fv), 1, 80)
    expected = f"{f.name}: expected {describe_type(f.type)}, got "
    wrong_type = F.concat(F.lit(expected), kind_text(kind), F.lit(" "), snippet)
    problem = F.when(
        fv.isNull(),
        F.lit(f"{f.name}: required, got nothing (the field is missing)") if f.required else F.lit(None),
    )
    problem = problem.when(
        F.is_variant_null(fv), F.lit(f"{f.name}: required, got null") if f.required else F.lit(None)
    )
    problem = problem.when(~_kind_ok(f.type, kind), wrong_type).when(value.isNull(), wrong_type)
    if _needs_exact_check(f):
        problem = problem.when(
            F.col(f"_dbl{i}") != value.cast("double"),
            F.concat(
                F.lit(f"{f.name}: expected {describe_type(f.type)}, got "),
                snippet,
                F.lit(", which does not fit without rounding"),
            ),
        )
    if f.minimum is not None:
        problem = problem.when(
            value < F.lit(f.minimum),
            F.concat(F.lit(f"{f.name}: expected at least {f.minimum:g}, got "), snippet),
        )
    if f.maximum is not None:
        problem = problem.when(
            value > F.lit(f.maximum),
            F.concat(F.lit(f"{f.name}: expected at most {f.maximum:g}, got "), snippet),
        )
    if f.allowed is not None:
        shown = ", ".join(repr(a) for a in f.allowed)
        problem = problem.when(
            ~value.isin(*f.allowed), F.concat(F.lit(f"{f.name}: expected one of {shown}, got "), snippet)
        )
    if f.max_length is not None:
        problem = problem.when(
            F.length(value) > f.max_length,
            F.concat(
                F.lit(f"{f.name}: expected at most {f.max_length} characters, got "),
                F.length(value).cast("string"),
                F.lit(" characters"),
            ),
        )
    return problem
