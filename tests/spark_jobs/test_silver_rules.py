"""The transform's rules on small inline DataFrames (real Spark, no Kafka, no tables).

Each bad record must come out with a problem that names its field and what
was expected; each good one with typed values and no problem.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

import pytest

from include.contract.transform_spec import FieldSpec, TransformSpec
from spark_jobs import new_fields, silver_rules, silver_table
from tests.spark_jobs.helpers import bronze

# Real Spark: `-m "not integration"` (the quick unit run) leaves these out.
pytestmark = pytest.mark.integration

SPEC = TransformSpec(
    fields=(
        FieldSpec("order_id", "string", required=True),
        FieldSpec("amount", "decimal(10,2)", required=True, minimum=0),
        FieldSpec("quantity", "int", minimum=1, maximum=1000),
        FieldSpec("currency", "string", allowed=("EUR", "USD")),
        FieldSpec("paid", "boolean"),
        FieldSpec("note", "string", max_length=10),
        FieldSpec("event_time", "timestamp", required=True),
    ),
    key=("order_id",),
    ordering="event_time",
    tombstones="delete",
    max_value_bytes=400,
)


def record(**fields) -> bytes:
    base = {"order_id": "o1", "amount": 10.5, "event_time": "2026-01-01T00:00:00Z"}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not _DROP}).encode()


_DROP = object()


def problems_by_offset(spark, values, spec=SPEC) -> dict[int, list[tuple[str, str]]]:
    decoded = silver_rules.decode(bronze(spark, values), spec, spec.fields)
    return {r["_kafka_offset"]: [(p["field"], p["message"]) for p in r["_problems"]] for r in decoded.collect()}


def test_good_records_decode_to_typed_values_without_problems(spark):
    values = [
        (b"o1", record(quantity=3, currency="EUR", paid=True, note="hi")),
        (b"o2", record(order_id="o2", amount="7.25", quantity="4", paid="false")),  # castable text
    ]
    decoded = silver_rules.decode(bronze(spark, values), SPEC, SPEC.fields).orderBy("_kafka_offset").collect()
    assert [r["_problems"] for r in decoded] == [[], []]
    first, second = decoded
    assert (first["amount"], first["quantity"], first["paid"], first["event_time"]) == (
        Decimal("10.50"), 3, True, datetime(2026, 1, 1, 0, 0),
    )  # fmt: skip
    assert (second["amount"], second["quantity"], second["paid"]) == (Decimal("7.25"), 4, False)


@pytest.mark.parametrize(
    ("value", "field", "expected"),
    [
        (b'{"order_id": "o1", "amount": ', "value", "got text that is not valid JSON"),
        (b'{"order_id": "o1", "order_id": "o2"}', "value", "not valid JSON (or repeats a key)"),
        (b"\xff\xfe\x00garbage", "value", "expected UTF-8 text, got bytes that are not valid UTF-8"),
        (b"", "value", "expected a JSON object, got an empty value (0 bytes)"),
        (b"[1, 2]", "value", "expected a JSON object, got a JSON array"),
        (b"x" * 401, "value", "expected at most 400 bytes, got 401 bytes"),
        (record(amount=_DROP), "amount", "amount: required, got nothing (the field is missing)"),
        (record(amount=None), "amount", "amount: required, got null"),
        (record(amount="abc"), "amount", 'amount: expected decimal(10,2), got a string "abc"'),
        (record(amount=12.345), "amount", "amount: expected decimal(10,2), got 12.345, which does not fit"),
        (record(amount=-1), "amount", "amount: expected at least 0, got -1"),
        (record(quantity=2.5), "quantity", "quantity: expected an int (32-bit integer), got 2.5, which does not"),
        (record(quantity=5000), "quantity", "quantity: expected at most 1000, got 5000"),
        (record(quantity=[1]), "quantity", "quantity: expected an int (32-bit integer), got a JSON array [1]"),
        (record(currency="JPY"), "currency", "currency: expected one of 'EUR', 'USD', got \"JPY\""),
        (record(paid=1), "paid", "paid: expected true or false, got a number 1"),
        (record(note={"a": 1}), "note", 'note: expected a string, got a JSON object {"a":1}'),
        (record(note="x" * 11), "note", "note: expected at most 10 characters, got 11 characters"),
        (record(event_time=1767225600), "event_time", "event_time: expected a timestamp string"),
        (record(event_time="yesterday"), "event_time", 'got a string "yesterday"'),
    ],
)
def test_each_bad_record_gets_a_problem_naming_its_field(spark, value, field, expected):
    found = problems_by_offset(spark, [(b"o1", value)])[0]
    assert [f for f, _ in found] == [field], found
    assert expected in found[0][1]


def test_an_unreadable_record_has_one_problem_not_one_per_field(spark):
    found = problems_by_offset(spark, [(b"o1", b"not json at all")])[0]
    assert [f for f, _ in found] == ["value"]


def test_several_bad_fields_are_all_reported(spark):
    found = problems_by_offset(spark, [(b"o1", record(amount="x", currency="JPY"))])[0]
    assert [f for f, _ in found] == ["amount", "currency"]


def test_tombstones_follow_the_policy(spark):
    values = [(b"o1", None), (None, None)]
    deleting = problems_by_offset(spark, values)
    assert deleting[0] == []  # deletes o1, named by the Kafka key
    assert deleting[1][0][0] == "order_id" and "tombstone deletes the row named by its Kafka key" in deleting[1][0][1]
    quarantining = TransformSpec(**{**SPEC.__dict__, "tombstones": "quarantine"})
    kept = problems_by_offset(spark, values, quarantining)
    assert [p[0][0] for p in kept.values()] == ["value", "value"]
    assert "transform.tombstones is 'quarantine'" in kept[0][0][1]


def test_quarantine_rows_keep_the_raw_bytes_and_every_reason(spark):
    values = [(b"k\xff", b"\xff\xfe"), (b"o2", record(order_id="o2"))]
    decoded = silver_rules.decode(bronze(spark, values), SPEC, SPEC.fields)
    rows = silver_rules.quarantine_rows(decoded, "run-1", 3, 7).collect()
    assert len(rows) == 1
    row = rows[0]
    assert (row["topic"], row["partition"], row["offset"], bytes(row["key"]), bytes(row["value"])) == (
        "t", 0, 0, b"k\xff", b"\xff\xfe",
    )  # fmt: skip
    assert (row["fields"], row["run_id"], row["epoch"], row["batch_id"]) == (["value"], "run-1", 3, 7)
    assert "not valid UTF-8" in row["reason"]


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ("BIGINT", "long"), ("DECIMAL(3,0)", "long"), ("DECIMAL(20,0)", "double"), ("DECIMAL(4,2)", "double"),
        ("DOUBLE", "double"), ("BOOLEAN", "boolean"), ("STRING", "string"), ("OBJECT<a: BIGINT>", "json"),
        ("ARRAY<STRING>", "json"), ("VARIANT", "json"), ("VOID", None), (None, None),
    ],
)  # fmt: skip
def test_infer_type_of_new_fields(schema, expected):
    assert new_fields.infer_type(schema) == expected


def test_new_fields_are_planned_by_policy(spark):
    values = [
        (b"o1", record(coupon="SAVE10", weight=1.5, tags=["a"], empty=None, **{"bad-name": 1, "Amount": 3})),
        (b"o2", record(order_id="o2", coupon="X", weight=2)),
    ]
    adding = TransformSpec(**{**SPEC.__dict__, "new_fields": "add"})
    decoded = silver_rules.decode(bronze(spark, values), adding, adding.fields)
    new = new_fields.plan_new_fields(decoded, adding, adding.fields)
    added, ignored = new.added, new.ignored
    assert {f.name: f.type for f in added} == {"coupon": "string", "weight": "double", "tags": "json"}
    assert set(ignored) == {"bad-name", "Amount", "empty"}
    assert "differs only in case" in ignored["Amount"]
    assert (new.unknown, new.refused, new.waiting) == (3, False, ("empty",))
    ignoring = new_fields.plan_new_fields(decoded, SPEC, SPEC.fields)
    assert set(ignoring.ignored) == {"coupon", "weight", "tags", "empty", "bad-name", "Amount"}
    assert (ignoring.added, ignoring.unknown, ignoring.refused) == ([], 6, False)


def _limited(spec: TransformSpec, **limits) -> TransformSpec:
    from dataclasses import replace

    return replace(spec, limits=replace(spec.limits, **limits))


def test_a_batch_records_only_so_many_unknown_field_names_and_counts_the_rest(spark):
    # One producer bug: a new key in every record (a uuid in its name).
    values = [(f"o{i}".encode(), record(order_id=f"o{i}", **{f"k{i:03d}": i})) for i in range(40)]
    spec = _limited(SPEC, field_names=5)
    new = new_fields.plan_new_fields(silver_rules.decode(bronze(spark, values), spec, spec.fields), spec, spec.fields)
    assert list(new.ignored) == ["k000", "k001", "k002", "k003", "k004"]
    assert (new.added, new.unknown, new.refused) == ([], 40, False)


def test_new_columns_beyond_the_runs_cap_are_refused_and_their_records_quarantined_naming_the_cap(spark):
    values = [(b"o1", record(alpha="a", beta="b")), (b"o2", record(order_id="o2", gamma="c")),
              (b"o3", record(order_id="o3", **{"bad-name": 1})), (b"o4", record(order_id="o4"))]  # fmt: skip
    spec = _limited(TransformSpec(**{**SPEC.__dict__, "new_fields": "add"}), new_columns=2)
    decoded = silver_rules.decode(bronze(spark, values), spec, spec.fields)
    new = new_fields.plan_new_fields(decoded, spec, spec.fields, budget=1)
    assert [f.name for f in new.added] == ["alpha"] and new.refused
    allowed = [f.name for f in spec.fields] + [f.name for f in new.added]
    refused = new_fields.refuse_new_fields(decoded, allowed, 2)
    problems = {r["_kafka_offset"]: [p["message"] for p in r["_problems"]]
                for r in refused.select("_kafka_offset", "_problems").collect()}  # fmt: skip
    message = "beyond transform.limits.new_columns (2 new silver columns a run)"
    assert [m for m in problems[0] if message in m] == [
        "new field beta beyond transform.limits.new_columns (2 new silver columns a run); raise the limit or fix "
        "the producer, then replay these records (trigger-form action replay_quarantine)"
    ]
    assert any(message in m and "gamma" in m for m in problems[1])
    assert problems[2] == [] and problems[3] == []  # an unusable name is ignored, not refused; no new field
    assert new_fields.plan_new_fields(decoded, spec, spec.fields, budget=0).added == []


def test_a_new_column_past_silvers_total_cap_is_refused_naming_that_cap(spark):
    values = [(b"o1", record(alpha="a"))]
    spec = _limited(TransformSpec(**{**SPEC.__dict__, "new_fields": "add"}), silver_columns=len(SPEC.fields))
    decoded = silver_rules.decode(bronze(spark, values), spec, spec.fields)
    # silver holds every column the cap allows: the run's budget is what the table has left, none
    new = new_fields.plan_new_fields(decoded, spec, spec.fields, budget=0)
    assert new.added == [] and new.refused
    cap = f"transform.limits.silver_columns ({len(SPEC.fields)} silver columns in all)"
    refused = new_fields.refuse_new_fields(decoded, [f.name for f in spec.fields], cap)
    (row,) = refused.select("_problems").collect()
    assert [p["message"] for p in row["_problems"]] == [
        f"new field alpha beyond {cap}; raise the limit or fix the producer, then replay these records "
        "(trigger-form action replay_quarantine)"
    ]


def test_a_framed_value_whose_schema_id_is_beyond_the_batch_cap_names_the_cap(spark):
    from spark_jobs.formats.base import ValuePlan

    framed = [(b"k", b"\x00\x00\x00\x00\x07{}"), (b"k", b"\x00\x00\x00\x00\x09{}")]
    spec = TransformSpec(**{**SPEC.__dict__, "format": "json_schema"})
    plan = ValuePlan("json_schema", framed=True, reader="{}", writers=(), source="the registry", id_cap=3)
    decoded = silver_rules.decode(bronze(spark, framed), spec, spec.fields, plan)
    messages = sorted(p["message"] for r in decoded.collect() for p in r["_problems"] if p["field"] == "value")
    assert messages == [
        f"value: schema id {n} was not looked up: the batch holds more than transform.limits.schema_ids (3) "
        "distinct schema ids; raise the limit or fix the producer, then replay these records (trigger-form action "
        "replay_quarantine)" for n in (7, 9)
    ]


def _classify(spark, values, current_rows=()):
    decoded = silver_rules.decode(bronze(spark, values), SPEC, SPEC.fields)
    valid = decoded.where("size(_problems) = 0")
    current = spark.createDataFrame(
        list(current_rows), "order_id string, event_time timestamp, _kafka_partition int, _kafka_offset long"
    )
    out = silver_table.classify(valid, current, SPEC).collect()
    return {r["_kafka_offset"]: r["_action"] for r in out}


def ts(hour: int) -> str:
    return f"2026-01-01T{hour:02d}:00:00Z"


def test_newest_by_ordering_wins_within_a_batch_whatever_the_offsets(spark):
    values = [
        (b"o1", record(event_time=ts(5))),
        (b"o1", record(event_time=ts(9))),
        (b"o1", record(event_time=ts(7))),  # late: older than offset 1
        (b"o2", record(order_id="o2", event_time=ts(1))),
    ]
    assert _classify(spark, values) == {0: "superseded", 1: "insert", 2: "superseded", 3: "insert"}


def test_equal_ordering_is_broken_by_the_kafka_offset(spark):
    values = [(b"o1", record(event_time=ts(5))), (b"o1", record(event_time=ts(5)))]
    assert _classify(spark, values) == {0: "superseded", 1: "insert"}


def test_a_record_older_than_silver_never_overwrites_it(spark):
    current = [("o1", datetime(2026, 1, 1, 8), 0, 40)]
    assert _classify(spark, [(b"o1", record(event_time=ts(6)))], current) == {0: "superseded"}
    assert _classify(spark, [(b"o1", record(event_time=ts(9)))], current) == {0: "update"}


def test_the_record_silver_already_holds_is_recognised_as_replayed(spark):
    current = [("o1", datetime(2026, 1, 1, 5), 0, 0)]
    assert _classify(spark, [(b"o1", record(event_time=ts(5)))], current) == {0: "replayed"}


def test_a_tombstone_deletes_and_an_older_late_record_does_not_bring_the_key_back(spark):
    current = [("o1", datetime(2026, 1, 1, 8), 0, 0)]
    # the tombstone (offset 1) is newer than silver's row in the log: it deletes
    assert _classify(spark, [(b"o0", record(order_id="o0")), (b"o1", None)], current)[1] == "delete"
    # record at 09:00, then its tombstone, then a late 07:00 record: the delete stands
    values = [(b"o1", record(event_time=ts(9))), (b"o1", None), (b"o1", record(event_time=ts(7)))]
    assert _classify(spark, values) == {0: "superseded", 1: "delete", 2: "superseded"}
    # a newer record after the tombstone brings the key back
    values = [(b"o1", record(event_time=ts(9))), (b"o1", None), (b"o1", record(event_time=ts(10)))]
    assert _classify(spark, values) == {0: "superseded", 1: "superseded", 2: "insert"}
