"""Routes: which route takes a record, and a batch's routing account (pure logic)."""

from __future__ import annotations

import json

import pytest

from include.contract.errors import ContractError
from include.contract.routes import (
    RoutedRecord,
    RouteMatch,
    RouteSpec,
    Routing,
    RoutingAccount,
    ValueMatch,
    WriterSchema,
    account,
    json_field_text,
    targets_of,
)
from include.contract.transform_spec import FieldSpec, TransformSpec

SPEC = TransformSpec(
    fields=(FieldSpec("id", "string", True), FieldSpec("ts", "long", True)), key=("id",), ordering="ts"
)


def framed(schema: int, body: bytes) -> bytes:
    return b"\x00" + schema.to_bytes(4, "big") + body


def record(**kw: object) -> RoutedRecord:
    return RoutedRecord(**{"topic": "events", "key": None, "value": None, **kw})  # type: ignore[arg-type]


def route(name: str, **match: object) -> RouteSpec:
    return RouteSpec(name, RouteMatch(**match), SPEC, f"/l/silver/{name}", f"/l/quarantine/{name}")  # type: ignore[arg-type]


def test_a_match_needs_a_condition() -> None:
    with pytest.raises(ContractError, match="at least one of topic, header, key"):
        RouteMatch()


@pytest.mark.parametrize(
    ("match", "rec", "expected"),
    [
        ({"topic": ("a", "b")}, record(topic="b"), True),
        ({"topic": ("a",)}, record(topic="b"), False),
        ({"header": ValueMatch("kind", ("order",))}, record(headers=(("kind", b"order"),)), True),
        # Any header of the name may carry the value; a header without a value never matches.
        (
            {"header": ValueMatch("kind", ("order",))},
            record(headers=(("kind", b"x"), ("kind", b"order"))),
            True,
        ),
        ({"header": ValueMatch("kind", ("order",))}, record(headers=(("kind", None),)), False),
        ({"header": ValueMatch("kind", ("order",))}, record(headers=(("Kind", b"order"),)), False),
        ({"key": "^ord-"}, record(key=b"ord-1"), True),
        ({"key": "ord-"}, record(key=b"x-ord-1"), True),  # found anywhere, like Spark's rlike
        ({"key": "^ord-"}, record(key=b"x-ord-1"), False),
        ({"key": "."}, record(key=None), False),
        ({"field": ValueMatch("type", ("order",))}, record(value=b'{"type": "order"}'), True),
        ({"field": ValueMatch("n", ("2",))}, record(value=b'{"n": 2}'), True),
        ({"field": ValueMatch("type", ("order",))}, record(value=framed(7, b'{"type":"order"}')), True),
        ({"field": ValueMatch("type", ("order",))}, record(value=b"\x02\x04ab"), False),
        ({"field": ValueMatch("type", ("order",))}, record(value=b'["order"]'), False),
        ({"record_name": ("acme.Order",)}, record(writer=WriterSchema(3, "acme.Order")), True),
        ({"record_name": ("acme.Order",)}, record(writer=WriterSchema(4, "acme.Payment")), False),
        ({"record_name": ("acme.Order",)}, record(), False),
        ({"subject": ("acme.Order",)}, record(writer=WriterSchema(3, "acme.Order", ("acme.Order",))), True),
        # Every condition given must hold.
        ({"topic": ("events",), "key": "^o"}, record(key=b"p1"), False),
        ({"topic": ("events",), "key": "^o"}, record(key=b"o1"), True),
    ],
)
def test_matches(match: dict[str, object], rec: RoutedRecord, expected: bool) -> None:
    assert RouteMatch(**match).matches(rec) is expected  # type: ignore[arg-type]


def test_json_field_text() -> None:
    assert json_field_text(b'{"a": {"b": 1}}', "a") == '{"b":1}'
    assert json_field_text(b'{"a": true}', "a") == "true"
    assert json_field_text(b'{"a": null}', "a") is None
    assert json_field_text(b"not json", "a") is None


def test_assign_first_and_all() -> None:
    routes = (route("orders", key="^o"), route("vip", header=ValueMatch("vip", ("1",))))
    rec = record(key=b"o1", headers=(("vip", b"1"),))
    first = Routing(routes, "/l/quarantine/unrouted")
    every = Routing(routes, "/l/quarantine/unrouted", overlap="all")
    assert first.assign(rec) == ("orders",)
    assert every.assign(rec) == ("orders", "vip")
    assert first.assign(record(key=b"p")) == ()


def test_routing_refuses_repeated_and_reserved_names() -> None:
    with pytest.raises(ContractError, match="repeat"):
        Routing((route("a", key="x"), route("a", key="y")), "/q")
    with pytest.raises(ContractError, match="not 'unrouted'"):
        route("unrouted", key="x")
    with pytest.raises(ContractError, match="at least one route"):
        Routing((), "/q")


def test_account_balances_copies_and_unrouted() -> None:
    routes = ("orders", "vip")
    # Four records: one to orders, one to both (overlap all), one unrouted, one to vip.
    got = account([("orders",), ("orders", "vip"), (), ("vip",)], [1, 2, 0, 1], routes)
    assert got == RoutingAccount(
        bronze=4, matched={"orders": 2, "vip": 2}, unrouted=1, overlapping=1, extra=1
    )
    assert got.balanced and got.problems(routes) == []
    lost = RoutingAccount(bronze=5, matched={"orders": 2, "vip": 2}, unrouted=1, extra=1)
    assert lost.problems(routes) == ["5 bronze records != 4 routed - 1 extra copies + 1 unrouted"]
    assert "the transform has" in RoutingAccount(1, {"orders": 1}, 0).problems(routes)[0]


def test_json_round_trips() -> None:
    routing = Routing(
        (route("orders", topic=("t",), header=ValueMatch("k", ("a", "b")), key="^o", field=ValueMatch("f", ("x",))),
         route("pay", record_name=("acme.Payment",), subject=("acme.Payment",))),
        "/l/quarantine/unrouted", unrouted="fail", overlap="all",
    )  # fmt: skip
    again = Routing.from_json(json.loads(json.dumps(routing.to_json())))
    assert again == routing
    acc = RoutingAccount(3, {"orders": 2, "pay": 1}, 0, 1, 0)
    assert RoutingAccount.from_json(json.loads(json.dumps(acc.to_json()))) == acc
    assert [(t.route, t.silver_path) for t in targets_of(routing)] == [("orders", "/l/silver/orders"),
                                                                        ("pay", "/l/silver/pay")]  # fmt: skip
    assert routing.route("pay").match.needs_registry and not routing.route("orders").match.needs_registry
    with pytest.raises(ContractError, match="the routes are orders, pay"):
        routing.route("clicks")


def test_describe() -> None:
    match = RouteMatch(header=ValueMatch("kind", ("order",)), key="^o-", record_name=("a.B", "a.C"))
    assert match.describe() == "header kind = order and key ~ ^o- and record_name one of a.B, a.C"
