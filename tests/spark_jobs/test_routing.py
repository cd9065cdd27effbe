"""Routing as Spark columns against its definition in Python (real Spark, no Kafka, no tables).

Every record of a mixed batch goes to the routes :meth:`Routing.assign` (the pure oracle) gives it, and the
batch's account is what counting the oracle's answers gives.
"""

from __future__ import annotations

import json

import pytest

from include.contract.routes import (
    RoutedRecord,
    RouteMatch,
    RouteSpec,
    Routing,
    ValueMatch,
    WriterSchema,
    account,
)
from include.readers.schema_registry import frame
from spark_jobs import routing
from tests.spark_jobs.helpers import ACCOUNTS_SPEC, T0

pytestmark = pytest.mark.integration

SCHEMA = ("topic string, partition int, offset long, timestamp timestamp, key binary, value binary, "
          "headers array<struct<key:string,value:binary>>")  # fmt: skip


def _route(name: str, **match: object) -> RouteSpec:
    return RouteSpec(name, RouteMatch(**match), ACCOUNTS_SPEC, f"/s/{name}", f"/q/{name}")  # type: ignore[arg-type]


ROUTES = (
    _route("orders", header=ValueMatch("kind", ("order", "order.v2"))),
    _route("vip", key="^vip-"),
    _route("clicks", field=ValueMatch("type", ("click",)), topic=("web",)),
    _route("payments", record_name=("shop.Payment",)),
)
WRITERS = {7: WriterSchema(7, "shop.Payment", ("shop.Payment",)), 8: WriterSchema(8, "shop.Refund", ("shop.Refund",))}
RECORDS = [
    RoutedRecord("shop", b"o1", b"{}", (("kind", b"order"),)),
    RoutedRecord("shop", b"vip-2", b"{}", (("kind", b"order.v2"),)),  # orders and vip
    RoutedRecord("shop", b"vip-3", None),  # vip only, a tombstone
    RoutedRecord("web", b"c1", b'{"type": "click", "n": 1}'),
    RoutedRecord("shop", b"c2", b'{"type": "click"}'),  # the field, but not the topic
    RoutedRecord("web", b"c3", frame(9, b'{"type":"click"}')),  # JSON behind the wire format's header
    RoutedRecord("shop", b"p1", frame(7, b"\x02avro"), writer=WRITERS[7]),
    RoutedRecord("shop", b"r1", frame(8, b"\x02avro"), writer=WRITERS[8]),  # a record name no route takes
    RoutedRecord("shop", None, b"not json", (("kind", None), ("other", b"order"))),
    RoutedRecord("shop", b"\xff\xfe", b'{"type": 5}'),
]


def _frame(spark):  # type: ignore[no-untyped-def]
    rows = [(r.topic, 0, i, T0, r.key, r.value, [{"key": n, "value": v} for n, v in r.headers])
            for i, r in enumerate(RECORDS)]  # fmt: skip
    return spark.createDataFrame(rows, SCHEMA)


@pytest.mark.parametrize("overlap", ["first", "all"])
def test_spark_routes_every_record_as_the_oracle_does_and_counts_it(spark, overlap: str) -> None:
    policy = Routing(ROUTES, "/q/unrouted", overlap=overlap)
    routed = routing.with_routes(_frame(spark), policy, WRITERS)
    got = {r["offset"]: tuple(r[routing.ROUTES_COLUMN]) for r in routed.collect()}
    expected = {i: policy.assign(rec) for i, rec in enumerate(RECORDS)}
    assert got == expected
    matched = [len(Routing(ROUTES, "/q/unrouted", overlap="all").assign(rec)) for rec in RECORDS]
    found, first = routing.account_of(routed, policy)
    assert found == account(list(expected.values()), matched, policy.names)
    assert found.balanced and found.unrouted == 4 and found.overlapping == 1
    assert first == ("shop", 0, 4)  # the first unrouted record: c2, whose topic the clicks route does not take
    vip = [r["offset"] for r in routing.routed_to(routed, "vip").collect()]
    assert vip == ([1, 2] if overlap == "all" else [2])


def test_unrouted_records_keep_their_bytes_and_name_the_routes(spark) -> None:
    policy = Routing(ROUTES, "/q/unrouted")
    routed = routing.with_routes(_frame(spark), policy, WRITERS)
    reason = routing.unrouted_reason(policy, capped=False)
    rows = routing.unrouted_rows(routed, reason, "run-1", 3, 5).orderBy("offset").collect()
    assert [(r["offset"], bytes(r["value"]) if r["value"] is not None else None) for r in rows] == [
        (i, RECORDS[i].value) for i in (4, 7, 8, 9)]  # fmt: skip
    assert {(r["reason"], tuple(r["fields"]), r["epoch"], r["batch_id"]) for r in rows} == {
        (reason, (routing.UNROUTED_FIELD,), 3, 5)}  # fmt: skip
    assert reason.startswith("no route matches the record (routes: orders: header kind = one of order, order.v2; ")


def test_a_bronze_table_without_headers_matches_no_header_condition(spark) -> None:
    frame_ = _frame(spark).drop("headers")
    routed = routing.with_routes(frame_, Routing(ROUTES, "/q/unrouted"), WRITERS)
    assert [r["offset"] for r in routed.collect() if "orders" in r[routing.ROUTES_COLUMN]] == []


def test_record_full_names() -> None:
    avro = {"type": "record", "name": "Payment", "namespace": "shop", "fields": []}
    assert routing.record_full_name(json.dumps(avro), "AVRO") == "shop.Payment"
    assert routing.record_full_name(json.dumps({**avro, "name": "x.Y"}), "AVRO") == "x.Y"
    assert routing.record_full_name(json.dumps({**avro, "namespace": None}), "AVRO") == "Payment"
    assert routing.record_full_name('syntax = "proto3";', "PROTOBUF") is None
