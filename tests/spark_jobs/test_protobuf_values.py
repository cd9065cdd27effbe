"""Protobuf values through the real decode: protoc's descriptor sets, the project's Java function, the field rules.

The registry's answers are recorded in Apicurio Registry 2.4.2.Final's shape (a schema, its type and its
references); tests/integration/test_value_formats.py runs the same against the real registry. Values are
built with protobuf's Python package from a module protoc generated (tests/protobuf_helpers.py).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from urllib.parse import quote

import pytest

from include.contract.errors import ValueSchemaError
from include.contract.transform_spec import FieldSpec, TransformSpec, ValueSchema
from include.readers.schema_registry import RegistryClient
from spark_jobs import silver_rules
from spark_jobs.formats.schemas import ValueSchemas
from tests import protobuf_helpers as pb
from tests.fakes import recorded_registry
from tests.spark_jobs.helpers import bronze

pytestmark = pytest.mark.integration

URL = "http://registry:8080/apis/ccompat/v7"
COMMON = {"name": "shop/common.proto", "subject": "shop/common.proto", "version": 1}
ONLY_REFUND = 'syntax = "proto3";\npackage shop;\nmessage Refund { string order_id = 1; int64 cents = 2; }\n'
#: orders.proto with a google.protobuf.Any field: printing it needs the type registry of what it wraps.
WITH_ANY = pb.text("orders.proto").replace('import "shop/common.proto";', 'import "shop/common.proto";\n'
                                           'import "google/protobuf/any.proto";').replace(
    "  int32 priority = 9;", "  int32 priority = 9;\n  google.protobuf.Any extra = 10;")


def _answers() -> dict[str, tuple[int, dict]]:
    def proto(text: str, *refs: dict) -> dict:
        return {"schema": text, "schemaType": "PROTOBUF", "references": list(refs)}

    return {
        f"{URL}/subjects/orders-value/versions/latest": (200, {"id": 1, "version": 1, **proto(pb.text("orders.proto"), COMMON)}),
        f"{URL}/subjects/{quote('shop/common.proto', safe='')}/versions/1": (200, {"id": 2, "version": 1,
                                                                                 **proto(pb.text("shop/common.proto"))}),
        f"{URL}/subjects/refunds-value/versions/latest": (200, {"id": 4, "version": 1, **proto(ONLY_REFUND)}),
        f"{URL}/schemas/ids/1": (200, proto(pb.text("orders.proto"), COMMON)),
        f"{URL}/schemas/ids/3": (200, proto(pb.orders_v2(), COMMON)),
        f"{URL}/schemas/ids/4": (200, proto(ONLY_REFUND)),
        f"{URL}/schemas/ids/5": (200, proto(pb.text("orders.proto"), {**COMMON, "subject": "gone", "version": 3})),
        f"{URL}/schemas/ids/6": (200, {"schema": '{"type":"string"}'}),
        f"{URL}/schemas/ids/7": (200, proto('syntax = "proto3";\nmessage Broken { string order_id = 1 }\n')),
        f"{URL}/schemas/ids/8": (200, proto(WITH_ANY, COMMON)),
    }  # fmt: skip


def _client() -> RegistryClient:
    return recorded_registry(URL, _answers())[0]


def _spec(subject: str = "orders-value", **changes) -> TransformSpec:
    fields = (
        FieldSpec("order_id", "string", required=True), FieldSpec("quantity", "long", required=True),
        FieldSpec("amount", "decimal(10,2)", required=True), FieldSpec("event_time", "timestamp", required=True),
        FieldSpec("priority", "int", required=True), FieldSpec("note", "string"),
    )  # fmt: skip
    return TransformSpec(fields=fields, key=("order_id",), ordering="event_time", format="protobuf",
                         value_schema=ValueSchema(registry="sr", subject=subject), **changes)  # fmt: skip


@pytest.fixture(scope="module")
def orders_pb2(tmp_path_factory):
    return pb.orders_module(tmp_path_factory.mktemp("generated"))


def _order(orders_pb2, order_id: str, **fields):
    order = orders_pb2.Order(order_id=order_id, quantity=fields.pop("quantity", 2), amount=fields.pop("amount", "12.50"))
    order.event_time.FromJsonString(fields.pop("event_time", "2026-03-01T10:00:00Z"))
    order.tags["source"] = "test"  # a map: its entry type is in the descriptor, not in the message indexes
    order.lines.add(sku="s1", count=1)
    for name, value in fields.items():
        setattr(order, name, value)
    return order.SerializeToString()


def test_values_decode_with_their_writer_schema_and_meet_the_field_rules(spark, orders_pb2, tmp_path):
    spec = _spec()
    values = ValueSchemas(spark, spec, client=_client())
    assert values.recorded() == {"subject": "orders-value", "version": 1, "id": 1, "type": "PROTOBUF"}
    order_v2 = pb.message_class(pb.orders_v2(), "shop.Order", tmp_path)(order_id="o2", quantity=5, amount="1.00",
                                                                          channel="app", priority=3)  # fmt: skip
    order_v2.event_time.FromJsonString("2026-03-01T11:00:00Z")
    good = _order(orders_pb2, "o1", quantity=9007199254740993, note="gift")
    from google.protobuf import any_pb2

    packed = any_pb2.Any()
    packed.Pack(orders_pb2.Refund(order_id="r", cents=1))
    wrapped = packed.SerializeToString()
    rows = [
        (b"o1", pb.framed(1, [1], good)),  # priority 0: a proto3 default is a value, not a missing field
        (b"o2", pb.framed(3, [1], order_v2.SerializeToString())),  # a newer writer: channel is not declared
        (b"r1", pb.framed(1, [0], orders_pb2.Refund(order_id="r1", cents=5).SerializeToString())),
        (b"t1", pb.framed(1, [1], good[:-3])),
        (b"i1", pb.framed(1, [7], good)),
        (b"m1", pb.framed(1, [1], good, magic=1)),
        (b"f4", pb.framed(4, [0], b"")),
        (b"f5", pb.framed(5, [1], good)),
        (b"f6", pb.framed(6, [1], good)),
        (b"f7", pb.framed(7, [0], b"")),
        (b"u9", pb.framed(999, [1], good)),
        (b"a8", pb.framed(8, [1], good + b"\x52" + bytes([len(wrapped)]) + wrapped)),  # field 10: an Any
    ]  # fmt: skip
    df = bronze(spark, rows)
    decoded = silver_rules.decode(df, spec, spec.fields, values.plan(df))
    plan = decoded._jdf.queryExecution().executedPlan().toString()
    assert "EvalPython" not in plan and "kde_protobuf_json" in plan  # decoded in the JVM, never in Python
    got = {bytes(r["_kafka_key"]).decode(): r for r in decoded.collect()}
    problems = {k: [f"{p['field']}: {p['message']}" for p in r["_problems"]] for k, r in got.items()}

    assert problems["o1"] == [] and problems["o2"] == [], problems
    o1 = got["o1"]
    assert (o1["quantity"], o1["amount"], o1["priority"], o1["note"]) == (9007199254740993, Decimal("12.50"), 0, "gift")
    assert o1["event_time"] == datetime(2026, 3, 1, 10, 0)
    assert (got["o2"]["quantity"], got["o2"]["priority"], got["o2"]["note"]) == (5, 3, None)  # unset optional: null

    assert any(p.startswith("quantity: ") and "required" in p for p in problems["r1"]), problems["r1"]
    assert "schema id 1: the bytes do not parse as shop.Order: While parsing a protocol message, the input ended " \
           "unexpectedly" in problems["t1"][0], problems["t1"]  # fmt: skip
    assert "schema id 1: message index [7] is out of range: the schema has 2 top-level message type(s)" in problems["i1"][0]
    assert "expected the Confluent wire format" in problems["m1"][0]
    assert "schema id 4: has no message declaring every declared field (order_id, quantity" in problems["f4"][0]
    assert "schema id 5: imports a schema that is not registered: " in problems["f5"][0] and "'gone'" in problems["f5"][0]
    assert "schema id 6: a schema of type AVRO" in problems["f6"][0]
    assert "schema id 7: protoc cannot compile it: schema_id_7.proto:2:" in problems["f7"][0], problems["f7"]
    assert "schema id 999: unknown to schema registry" in problems["u9"][0]
    assert "schema id 8: shop.Order cannot be printed as JSON: " in problems["a8"][0], problems["a8"]


def test_the_function_follows_nested_message_indexes_past_map_entries(spark, orders_pb2):
    from pyspark.sql import functions as F

    values = ValueSchemas(spark, _spec(), client=_client())
    df = bronze(spark, [(b"l", pb.framed(1, [1, 0], orders_pb2.Order.Line(sku="x", count=3).SerializeToString())),
                        (b"z", pb.framed(1, [1, 1], b""))])  # fmt: skip
    writer = values.plan(df).writers[0]
    out = df.select(F.call_function("kde_protobuf_json", F.expr("substring(value, 6)"), F.lit(writer.descriptor),
                                    F.lit(writer.file), F.lit("t"), F.lit(1 << 20)).alias("r")).collect()  # fmt: skip
    assert (out[0]["r"]["json"], out[0]["r"]["error"]) == ('{"sku":"x","count":3}', None)
    assert out[1]["r"]["error"] == "message index [1, 1] is out of range: shop.Order has 1 nested message type(s)"


def test_json_that_would_pass_its_bound_is_an_error_naming_it_not_an_allocation(spark, orders_pb2):
    """Fields print at their defaults, so an empty sub-message of a repeated field (2 bytes) prints as 21
    characters: the function writes into a buffer that refuses to grow past the bound it is given."""
    from pyspark.sql import functions as F

    values = ValueSchemas(spark, _spec(), client=_client())
    order = orders_pb2.Order(order_id="o", quantity=1, amount="1.00")
    for _ in range(1000):
        order.lines.add()
    payload = order.SerializeToString()
    df = bronze(spark, [(b"o", pb.framed(1, [1], payload))])
    writer = values.plan(df).writers[0]

    def call(bound: int):
        return df.select(F.call_function("kde_protobuf_json", F.expr("substring(value, 6)"), F.lit(writer.descriptor),
                                         F.lit(writer.file), F.lit("b"), F.lit(bound)).alias("r")).collect()[0]["r"]  # fmt: skip

    whole = call(1 << 20)
    assert whole["error"] is None and whole["json"].count('{"sku":"","count":0}') == 1000
    assert len(whole["json"]) > 10 * len(payload)
    bounded = call(len(whole["json"]) - 1)
    assert bounded["json"] is None
    assert bounded["error"] == (f"shop.Order prints as more than {len(whole['json']) - 1} characters of JSON, the "
                                "bound transform.max_value_bytes sets (16 times it, at most 256 MiB); raise "
                                "transform.max_value_bytes, or fix the producer")  # fmt: skip
    assert call(len(whole["json"]))["json"] == whole["json"]  # the bound itself is allowed


def test_the_transforms_bound_on_protobuf_json_follows_max_value_bytes(spark, orders_pb2):
    """A value within max_value_bytes decodes with a JSON bound of 16 times it; one over it is not decoded
    at all, and its problem is its size."""
    spec = _spec(max_value_bytes=77)  # a bound of 1232, a literal nothing else in the plan holds
    values = ValueSchemas(spark, spec, client=_client())
    small = _order(orders_pb2, "o1")
    big = orders_pb2.Order(order_id="o" * 200, quantity=1, amount="1.00").SerializeToString()
    small, big = pb.framed(1, [1], small), pb.framed(1, [1], big)
    df = bronze(spark, [(b"s", small), (b"b", big)])
    decoded = silver_rules.decode(df, spec, spec.fields, values.plan(df))
    plan = decoded._jdf.queryExecution().executedPlan().toString()
    assert "1232" in plan and "1024" not in plan, "the JSON bound is not 16 times max_value_bytes"
    got = {bytes(r["_kafka_key"]).decode(): [p["message"] for p in r["_problems"]] for r in decoded.collect()}
    assert len(small) <= 77 and got["s"] == [], got
    assert got["b"] == [f"value: expected at most 77 bytes, got {len(big)} bytes"], got


def test_a_reader_schema_without_the_declared_fields_stops_the_run_naming_its_messages(spark):
    with pytest.raises(ValueSchemaError) as err:
        ValueSchemas(spark, _spec("refunds-value"), client=_client())
    assert "the reader schema (subject 'refunds-value' version 1 (id 4)): has no message declaring every declared " \
           "field (order_id, quantity, amount, event_time, priority, note); its messages: shop.Refund (order_id, " \
           "cents)" in str(err.value), str(err.value)  # fmt: skip
