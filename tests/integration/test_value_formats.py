"""Avro and JSON Schema values against real Kafka, Spark and Delta (and a real schema registry).

Values are written here with fastavro (Python) and decoded by the job with
Spark's ``from_avro`` (JVM): two independent Avro implementations. Every
assertion compares with what was produced, computed here.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, timedelta
from decimal import Decimal
from pathlib import Path

import fastavro
import pytest

from include.contract.transform_spec import FieldSpec, TransformSpec, ValueSchema
from include.readers.schema_registry import frame
from tests.integration.job_helpers import ORDERS_SPEC as ORDERS
from tests.integration.job_helpers import (
    T0,
    assert_accounted,
    ingest,
    quarantine,
    silver,
    silver_commits,
    transform,
    transform_args,
)
from tests.kafka_helpers import produce

pytestmark = pytest.mark.integration

ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}  # fmt: skip
#: v1 plus a field with a default: a writer of v1 is readable with v2 and the other way round.
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}
#: amount as a string: a reader of v2 cannot read it (no promotion from string to decimal bytes).
ORDER_BAD = {**ORDER_V1, "fields": [f if f["name"] != "amount" else {"name": "amount", "type": "int"}
                                    for f in ORDER_V1["fields"]]}  # fmt: skip
JSON_SCHEMA = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
               "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}}  # fmt: skip
#: The JSON tests' orders, read as Avro (tombstones are not what these tests are about).
SPEC = replace(ORDERS, format="avro", tombstones="quarantine")


def avro(schema: dict, order_id: str, minute: int, amount: str | int = "10.00", **extra) -> bytes:
    """One order as plain Avro binary, written by fastavro."""
    out = io.BytesIO()
    record = {"order_id": order_id, "customer": extra.pop("customer", None),
              "amount": Decimal(amount) if isinstance(amount, str) else amount,
              "event_time": T0 + timedelta(minutes=minute), **extra}  # fmt: skip
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def registry_transform(spark, lake, name: str, spec, registry) -> Callable[..., dict]:
    """The transform job against the suite's schema registry: a function of the run id, giving the summary."""
    from spark_jobs import bronze_to_silver

    registry_file = lake / "registry.json"
    registry_file.parent.mkdir(parents=True, exist_ok=True)
    registry_file.write_text(json.dumps({"url": registry.url}))

    def run(run_id: str = "run-1") -> dict:
        args = [*transform_args(lake, name, spec=spec, run_id=run_id), "--registry-file", str(registry_file)]
        return bronze_to_silver.run(spark, bronze_to_silver.parse_config(args)).to_json()

    return run


def newest(produced: dict[str, tuple[int, str]], order_id: str, minute: int, amount: str) -> None:
    if order_id not in produced or produced[order_id][0] <= minute:
        produced[order_id] = (minute, amount)


def test_an_avro_topic_read_with_a_schema_file_lands_exactly_once_and_bad_values_in_quarantine(
    spark, bootstrap, make_topic, unique_name, lake
):
    topic = make_topic(unique_name, partitions=3)
    spec = replace(SPEC, value_schema=ValueSchema(file="order.avsc", text=json.dumps(ORDER_V1)))
    expected: dict[str, tuple[int, str]] = {}
    records = []
    for i in range(90):  # 30 keys, each updated three times, out of order across partitions
        key, minute, amount = f"o{i % 30}", (i * 7) % 50, f"{i}.25"
        records.append((i % 3, key.encode(), avro(ORDER_V1, key, minute, amount, customer=f"c{i % 4}")))
        newest(expected, key, minute, amount)
    produce(bootstrap, topic, records)
    good = avro(ORDER_V1, "z", 1)
    produce(bootstrap, topic, [(0, b"g", b"\x02garbage that is no order"), (1, b"t", good[:4]), (2, b"e", b"")])
    ingest(spark, bootstrap, lake, unique_name, topic)
    first = transform(spark, lake, unique_name, spec=spec)

    assert (first["read"], first["quarantined"]) == (93, 3)
    rows = silver(spark, lake)
    assert {k: (int((r["event_time"].replace(tzinfo=UTC) - T0).total_seconds() // 60), str(r["amount"]))
            for k, r in rows.items()} == expected  # fmt: skip
    reasons = {(r["partition"], r["offset"]): r["reason"] for r in quarantine(spark, lake).values()}
    assert sorted(reasons.values()) == sorted([
        "value: the bytes do not decode as Avro with the reader schema",
        "value: the bytes do not decode as Avro with the reader schema",
        "value: expected an Avro record, got an empty value (0 bytes)",
    ])  # fmt: skip
    held = {bytes(r["value"]) for r in quarantine(spark, lake).values()}
    assert held == {b"\x02garbage that is no order", good[:4], b""}  # raw bytes kept: nothing is lost

    # The next run reads exactly the new records.
    produce(bootstrap, topic, [(1, b"o1", avro(ORDER_V1, "o1", 99, "1.00")), (2, b"n", avro(ORDER_V1, "n", 5))])
    ingest(spark, bootstrap, lake, unique_name, topic)
    second = transform(spark, lake, unique_name, spec=spec, run_id="run-2")
    assert (second["read"], second["upserted"], second["quarantined"]) == (2, 2, 0)
    assert str(silver(spark, lake)["o1"]["amount"]) == "1.00"
    assert_accounted(spark, lake)


@pytest.mark.full
def test_a_registry_topic_resolves_each_writer_schema_and_quarantines_by_schema_id(
    spark, bootstrap, make_topic, unique_name, lake, schema_registry
):
    topic = make_topic(unique_name, partitions=2)
    subject = f"{topic}-value"
    v1 = schema_registry.register(subject, ORDER_V1)
    foreign = schema_registry.register(f"{topic}-other", JSON_SCHEMA, schema_type="JSON")
    incompatible = schema_registry.register(f"{topic}-legacy", ORDER_BAD)
    spec = replace(SPEC, value_schema=ValueSchema(registry="test", subject=subject, subject_strategy="topic_name"))
    run = registry_transform(spark, lake, unique_name, spec, schema_registry)

    produce(bootstrap, topic, [
        (0, b"a", frame(v1, avro(ORDER_V1, "a", 1, "5.00"))),
        (1, b"b", frame(v1, avro(ORDER_V1, "b", 1, "6.00"))),
        (0, b"u", frame(999_999, avro(ORDER_V1, "u", 1))),          # an id the registry does not know
        (1, b"j", frame(foreign, b'{"order_id": "j"}')),            # a JSON Schema id in an Avro topic
        (0, b"l", frame(incompatible, avro(ORDER_BAD, "l", 1, amount=7))),  # amount int: reader cannot read it
        (1, b"p", avro(ORDER_V1, "p", 1)),                          # not framed
        (0, b"x", frame(v1, b"\x09\x09\x09")),                      # framed, but not an order
    ])  # fmt: skip
    ingest(spark, bootstrap, lake, unique_name, topic)
    first = run("run-1")

    assert (first["read"], first["upserted"], first["quarantined"]) == (7, 2, 5)
    assert first["value_schema"] == {"subject": subject, "version": 1, "id": v1, "type": "AVRO"}
    reasons = {r["key"].decode(): r["reason"] for r in quarantine(spark, lake).values()}
    assert reasons["u"].startswith("value: schema id 999999: unknown to schema registry ") and "404" in reasons["u"]
    assert reasons["j"] == (f"value: schema id {foreign}: a schema of type JSON in schema registry {schema_registry.url}; "
                            "transform.format avro reads AVRO values")  # fmt: skip
    assert reasons["l"].startswith(f"value: schema id {incompatible}: written with a schema the reader schema (id "
                                   f"{v1}) cannot read: TYPE_MISMATCH at /fields/2/type")  # fmt: skip
    assert reasons["p"].startswith("value: expected the Confluent wire format (magic byte 0, a 4-byte schema id, "
                                   "then the payload), got ")  # fmt: skip
    assert reasons["x"] == f"value: the bytes do not decode as Avro with writer schema id {v1}"

    # Evolution: v2 adds a field with a default. The next run reads with the latest (v2): v1 records get the
    # default, v2 records their own value, and under new_fields: add the field becomes a silver column.
    v2 = schema_registry.register(subject, ORDER_V2)
    produce(bootstrap, topic, [
        (0, b"c", frame(v2, avro(ORDER_V2, "c", 2, "8.00", channel="app"))),
        (1, b"d", frame(v1, avro(ORDER_V1, "d", 2, "9.00"))),
        (0, b"a", frame(v2, avro(ORDER_V2, "a", 3, "5.50", channel="shop"))),
    ])  # fmt: skip
    ingest(spark, bootstrap, lake, unique_name, topic)
    second = run("run-2")

    assert (second["read"], second["upserted"], second["quarantined"]) == (3, 3, 0)
    assert second["value_schema"] == {"subject": subject, "version": 2, "id": v2, "type": "AVRO"}
    assert [(f["name"], f["type"]) for f in second["fields_added"]] == [("channel", "string")]
    rows = silver(spark, lake)
    assert {k: (str(r["amount"]), r["channel"]) for k, r in rows.items()} == {
        "a": ("5.50", "shop"), "b": ("6.00", None), "c": ("8.00", "app"), "d": ("9.00", "web")}  # fmt: skip
    recorded = [(c.run_id, c.value_schema["version"]) for c in silver_commits(spark, lake) if c.read]
    assert recorded == [("run-1", 1), ("run-2", 2)]
    assert_accounted(spark, lake)


@pytest.mark.full
def test_a_json_schema_topic_drops_the_header_and_quarantines_unknown_ids(
    spark, bootstrap, make_topic, unique_name, lake, schema_registry
):
    topic = make_topic(unique_name, partitions=1)
    subject = f"{topic}-value"
    sid = schema_registry.register(subject, JSON_SCHEMA, schema_type="JSON")
    spec = replace(SPEC, format="json_schema",
                   value_schema=ValueSchema(registry="test", subject=subject, subject_strategy="topic_name"))  # fmt: skip
    value = {"order_id": "a", "amount": 3.5, "event_time": "2026-03-01T00:01:00Z"}
    produce(bootstrap, topic, [
        (0, b"a", frame(sid, json.dumps(value).encode())),
        (0, b"u", frame(999_998, json.dumps({**value, "order_id": "u"}).encode())),
        (0, b"n", json.dumps({**value, "order_id": "n"}).encode()),
    ])  # fmt: skip
    ingest(spark, bootstrap, lake, unique_name, topic)
    result = registry_transform(spark, lake, unique_name, spec, schema_registry)()

    assert (result["read"], result["upserted"], result["quarantined"]) == (3, 1, 2)
    assert str(silver(spark, lake)["a"]["amount"]) == "3.50"
    reasons = {r["key"].decode(): r["reason"] for r in quarantine(spark, lake).values()}
    assert reasons["u"].startswith("value: schema id 999998: unknown to schema registry")
    assert reasons["n"].startswith("value: expected the Confluent wire format")


def _debezium_avro_schemas(prefix: str) -> tuple[dict, dict]:
    """The key and value schemas Debezium's Avro converter gives ``<prefix>.public.accounts`` of
    ``tests/fixtures/debezium`` (record names as Debezium's; the row's columns as that table's)."""
    ns = f"{prefix}.public.accounts"
    text = ["null", "string"]
    row = {"type": "record", "name": "Value", "namespace": ns, "fields": [
        {"name": "id", "type": "int"}, {"name": "owner", "type": "string"},
        *({"name": n, "type": text, "default": None} for n in ("balance", "body", "updated", "opened", "seen"))]}
    long_ = ["null", "long"]
    source = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql", "fields": [
        *({"name": n, "type": "string"} for n in ("version", "connector", "name")),
        {"name": "ts_ms", "type": "long"}, {"name": "snapshot", "type": text, "default": None},
        {"name": "db", "type": "string"}, {"name": "sequence", "type": text, "default": None},
        *({"name": n, "type": long_, "default": None} for n in ("ts_us", "ts_ns")),
        {"name": "schema", "type": "string"}, {"name": "table", "type": "string"},
        *({"name": n, "type": long_, "default": None} for n in ("txId", "lsn", "xmin")),
        {"name": "origin", "type": text, "default": None}, {"name": "origin_lsn", "type": long_, "default": None}]}
    block = {"type": "record", "name": "block", "namespace": "event", "fields": [
        {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
        {"name": "data_collection_order", "type": "long"}]}
    value = {"type": "record", "name": "Envelope", "namespace": ns, "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", f"{ns}.Value"], "default": None},
        {"name": "source", "type": source}, {"name": "transaction", "type": ["null", block], "default": None},
        {"name": "op", "type": "string"},
        *({"name": n, "type": long_, "default": None} for n in ("ts_ms", "ts_us", "ts_ns"))]}
    key = {"type": "record", "name": "Key", "namespace": ns, "fields": [{"name": "id", "type": "int"}]}
    return key, value  # fmt: skip


@pytest.mark.full
def test_debezium_change_events_in_avro_through_the_registry_land_as_the_json_ones_do(
    spark, bootstrap, make_topic, unique_name, lake, schema_registry
):
    """Debezium's events from tests/fixtures/debezium, written as its Avro converter writes them (key and value
    in Avro, framed with registry ids): the same silver as the JSON events give (tests/spark_jobs/test_cdc_rules)."""
    from tests.spark_jobs.helpers import ACCOUNTS_SPEC as CAPTURED

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "debezium" / "postgres-json.jsonl"
    records = [json.loads(line) for line in fixture.read_text().splitlines()]
    records = [r for r in records if r["topic"].endswith(".public.accounts")]
    prefix = records[0]["topic"].split(".")[0]
    topic = make_topic(unique_name, partitions=3)
    key_schema, value_schema = _debezium_avro_schemas(prefix)
    key_id = schema_registry.register(f"{topic}-key", key_schema)
    value_id = schema_registry.register(f"{topic}-value", value_schema)

    def encoded(schema: dict, schema_id: int, data: dict) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(schema), data)
        return frame(schema_id, out.getvalue())

    def avro_record(r: dict) -> tuple[int, bytes | None, bytes | None]:
        key = encoded(key_schema, key_id, json.loads(r["key"])) if r["key"] else None
        return r["partition"], key, encoded(value_schema, value_id, json.loads(r["value"])) if r["value"] else None

    # The JSON tests' spec without the column the Avro schema below leaves out.
    spec = replace(CAPTURED, fields=CAPTURED.fields[:4], format="avro",
                   value_schema=ValueSchema(registry="test", subject=f"{topic}-value", subject_strategy="topic_name"))
    run = registry_transform(spark, lake, unique_name, spec, schema_registry)

    # First what came before the truncate, then the truncate (the one keyless event) and the insert after it.
    later = [r for r in records if r["key"] is None or json.loads(r["key"])["id"] == 5]
    produce(bootstrap, topic, [avro_record(r) for r in records if r not in later])
    ingest(spark, bootstrap, lake, unique_name, topic)
    first = run("run-1")
    assert (first["quarantined"], first["skipped"]) == (0, 2), quarantine(spark, lake)
    rows = {k: r for k, r in silver(spark, lake, key="id").items() if not r["_deleted"]}
    assert {k: (r["owner"], str(r["balance"]), len(r["body"] or "")) for k, r in rows.items()} == {
        2: ("bobby", "20.00", 10000), 4: ("ann", "12.00", 5)}  # fmt: skip

    produce(bootstrap, topic, [avro_record(r) for r in later])
    ingest(spark, bootstrap, lake, unique_name, topic)
    second = run("run-2")
    assert (second["truncated_rows"], second["upserted"], second["quarantined"]) == (2, 1, 0)
    rows = {k: r for k, r in silver(spark, lake, key="id").items() if not r["_deleted"]}
    assert {k: r["owner"] for k, r in rows.items()} == {5: "eve"}
    assert_accounted(spark, lake)


#: The orders of the Protobuf test, as tests/fixtures/protobuf/orders.proto declares them.
PROTOBUF_SPEC = TransformSpec(
    fields=(FieldSpec("order_id", "string", required=True), FieldSpec("quantity", "long", required=True),
            FieldSpec("amount", "decimal(10,2)", required=True, minimum=0),
            FieldSpec("event_time", "timestamp", required=True)),
    key=("order_id",), ordering="event_time", format="protobuf", new_fields="add",
)  # fmt: skip


@pytest.mark.full
def test_a_protobuf_topic_with_imports_and_two_message_types_decodes_against_the_real_registry(
    spark, bootstrap, make_topic, unique_name, lake, schema_registry, tmp_path
):
    """Confluent-framed Protobuf values of a schema that imports another registered schema and a well-known
    type and holds two message types; Apicurio holds the schemas and the job reads their references."""
    from tests import protobuf_helpers as pb

    orders_pb2 = pb.orders_module(tmp_path / "generated")
    topic = make_topic(unique_name, partitions=3)
    subject = f"{topic}-value"
    schema_registry.register("shop/common.proto", pb.text("shop/common.proto"), schema_type="PROTOBUF")
    common = [("shop/common.proto", "shop/common.proto", 1)]
    v1 = schema_registry.register(subject, pb.text("orders.proto"), schema_type="PROTOBUF", references=common)
    spec = replace(PROTOBUF_SPEC, value_schema=ValueSchema(registry="test", subject=subject))
    run = registry_transform(spark, lake, unique_name, spec, schema_registry)

    def order(cls, order_id: str, minute: int, amount: str, **extra) -> bytes:
        msg = cls(order_id=order_id, quantity=2**53 + minute, amount=amount, **extra)
        msg.event_time.FromDatetime((T0 + timedelta(minutes=minute)).replace(tzinfo=None))
        msg.price.currency = "EUR"  # a message of the imported file
        return msg.SerializeToString()

    expected: dict[str, tuple[int, str]] = {}
    records = []
    for i in range(60):  # 20 keys, each three times, out of order across partitions
        key, minute, amount = f"o{i % 20}", (i * 7) % 50, f"{i}.25"
        records.append((i % 3, key.encode(), pb.framed(v1, [1], order(orders_pb2.Order, key, minute, amount))))
        newest(expected, key, minute, amount)
    good = order(orders_pb2.Order, "z", 1, "1.00")
    refund = orders_pb2.Refund(order_id="r", cents=100).SerializeToString()
    records += [
        (0, b"r", pb.framed(v1, [0], refund)),           # the file's other message: no quantity, amount, event_time
        (1, b"t", pb.framed(v1, [1], good[:-2])),        # cut short
        (2, b"i", pb.framed(v1, [2], good)),             # a third top-level message the file does not have
        (0, b"u", pb.framed(999_999, [1], good)),        # an id the registry does not know
        (1, b"n", good),                                 # not framed
    ]  # fmt: skip
    produce(bootstrap, topic, records)
    ingest(spark, bootstrap, lake, unique_name, topic)
    first = run("run-1")

    assert (first["read"], first["quarantined"]) == (65, 5), quarantine(spark, lake)
    assert first["value_schema"] == {"subject": subject, "version": 1, "id": v1, "type": "PROTOBUF"}
    rows = silver(spark, lake)
    assert {k: (int((r["event_time"].replace(tzinfo=UTC) - T0).total_seconds() // 60), str(r["amount"]))
            for k, r in rows.items()} == expected  # fmt: skip
    # int64 above 2^53, exact: through a double, 2^53 + an odd minute would come back even
    assert {k: r["quantity"] - 2**53 for k, r in rows.items()} == {k: minute for k, (minute, _) in expected.items()}
    assert any(minute % 2 for minute, _ in expected.values()), "no odd quantity: the check above shows nothing"
    reasons = {r["key"].decode(): r["reason"] for r in quarantine(spark, lake).values()}
    assert reasons["r"].startswith("quantity: required, got nothing"), reasons["r"]
    assert reasons["t"].startswith(f"value: schema id {v1}: the bytes do not parse as shop.Order: "), reasons["t"]
    assert reasons["i"] == (f"value: schema id {v1}: message index [2] is out of range: the schema has 2 top-level "
                            "message type(s)")  # fmt: skip
    assert reasons["u"].startswith("value: schema id 999999: unknown to schema registry ") and "404" in reasons["u"]
    assert reasons["n"].startswith("value: expected the Confluent wire format (magic byte 0, a 4-byte schema id")
    held = {r["key"].decode(): bytes(r["value"]) for r in quarantine(spark, lake).values()}
    assert held["n"] == good and held["t"] == records[-4][2]  # raw bytes kept: nothing is lost

    # Evolution: v2 adds a field. Each record is read with its own writer schema; the reader is now v2, and
    # under new_fields: add the new field becomes a silver column (absent, so null, in v1 records).
    v2 = schema_registry.register(subject, pb.orders_v2(), schema_type="PROTOBUF", references=common)
    order_v2 = pb.message_class(pb.orders_v2(), "shop.Order", tmp_path / "v2")
    produce(bootstrap, topic, [
        (0, b"c", pb.framed(v2, [1], order(order_v2, "c", 60, "8.00", channel="app"))),
        (1, b"o1", pb.framed(v1, [1], order(orders_pb2.Order, "o1", 61, "9.00"))),
    ])  # fmt: skip
    ingest(spark, bootstrap, lake, unique_name, topic)
    second = run("run-2")
    assert (second["read"], second["upserted"], second["quarantined"]) == (2, 2, 0)
    assert second["value_schema"]["id"] == v2
    assert [(f["name"], f["type"]) for f in second["fields_added"]] == [("channel", "string")]
    rows = silver(spark, lake)
    assert (rows["c"]["channel"], str(rows["c"]["amount"]), rows["o1"]["channel"], str(rows["o1"]["amount"])) == (
        "app", "8.00", None, "9.00")  # fmt: skip
    assert_accounted(spark, lake)
