"""Routed transforms in the pipeline file: what loads, the shared keys each route inherits, and each refusal
named by file, field and what was expected."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from include import settings
from include.config import PipelineConfigError, load_pipeline
from include.contract.routes import RouteMatch, ValueMatch

ORDER = {"order_id": "string", "amount": "double", "ts": "long"}
ROUTED: dict[str, Any] = {
    "kafka": {"connection_id": "kafka_default", "topics": ["shop"]},
    "schedule": None,
    "transform": {
        "format": "avro",
        "value_schema": {"registry": "registry_default", "subject_strategy": "record_name"},
        "tombstones": "delete",
        "routes": {
            "orders": {
                "match": {"record_name": "shop.Order"},
                "schema": ORDER,
                "key": "order_id",
                "ordering": "ts",
            },
            "payments": {
                "match": {"record_name": ["shop.Payment"]},
                "value_schema": {"version": 2},
                "schema": {"payment_id": "string", "ts": "long"},
                "key": "payment_id",
                "ordering": "ts",
                "tombstones": "quarantine",
            },
            "clicks": {
                "match": {"header": {"kind": "click"}, "key": "^c-"},
                "format": "json",
                "schema": {"click_id": "string", "ts": "long"},
                "key": "click_id",
                "ordering": "ts",
            },
        },
        "unrouted": "ignore",
        "overlap": "all",
    },
}


@pytest.fixture(autouse=True)
def _no_lakehouse_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(settings.LAKEHOUSE_ROOT_ENV, raising=False)


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "shop.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _changed(*edits: tuple[str, Any]) -> dict[str, Any]:
    """ROUTED with each dotted key set (``...`` deletes it)."""
    data = copy.deepcopy(ROUTED)
    for dotted, value in edits:
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        if value is ...:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def test_a_routed_file_loads_each_route_with_the_shared_keys_and_its_own(tmp_path: Path) -> None:
    cfg = load_pipeline(_write(tmp_path, ROUTED))
    assert cfg.transform is None and cfg.routing is not None and cfg.has_transform
    routing = cfg.routing
    assert routing.names == ("orders", "payments", "clicks")
    assert (routing.unrouted, routing.overlap) == ("ignore", "all")
    orders, payments, clicks = routing.routes
    # Shared keys: format, value_schema (key by key) and tombstones; a route's own value wins.
    assert (orders.transform.format, orders.transform.tombstones) == ("avro", "delete")
    assert payments.transform.tombstones == "quarantine"
    # The one record name a route takes names its reader subject under subject_strategy record_name.
    assert orders.transform.value_schema is not None and orders.transform.value_schema.subject == "shop.Order"
    vs = payments.transform.value_schema
    assert vs is not None and (vs.subject, vs.version, vs.registry) == ("shop.Payment", 2, "registry_default")
    assert clicks.transform.format == "json" and clicks.transform.value_schema is None
    assert clicks.match == RouteMatch(header=ValueMatch("kind", ("click",)), key="^c-")
    assert orders.match == RouteMatch(record_name=("shop.Order",))
    # Tables: a folder per route under silver_path and quarantine_path, and the unrouted records' quarantine.
    assert orders.silver_path == str(Path(cfg.tables.silver_path, "orders"))
    assert clicks.quarantine_path == str(Path(cfg.tables.quarantine_path, "clicks"))
    assert routing.unrouted_path == str(Path(cfg.tables.quarantine_path, "unrouted"))
    assert [(t.route, t.silver_path) for t in cfg.silver_targets()] == [
        (r.name, r.silver_path) for r in routing.routes
    ]


def test_defaults_of_the_routing_policies(tmp_path: Path) -> None:
    cfg = load_pipeline(_write(tmp_path, _changed(("transform.unrouted", ...), ("transform.overlap", ...))))
    assert cfg.routing is not None and (cfg.routing.unrouted, cfg.routing.overlap) == ("quarantine", "first")


def test_a_pipeline_without_routes_has_one_target(tmp_path: Path) -> None:
    data = {**ROUTED, "transform": {"schema": ORDER, "key": "order_id", "ordering": "ts"}}
    cfg = load_pipeline(_write(tmp_path, data))
    assert cfg.routing is None and cfg.transform is not None
    (target,) = cfg.silver_targets()
    assert (target.route, target.silver_path, target.quarantine_path) == (
        None, cfg.tables.silver_path, cfg.tables.quarantine_path)  # fmt: skip


@pytest.mark.parametrize(
    ("edits", "field", "expected"),
    [
        ((("transform.key", "order_id"),), "transform.key",
         "expected no transform.key beside transform.routes (each route states its own), got 'order_id' (str); "
         "move key into each route"),
        ((("transform.schema", ORDER),), "transform.schema", "move schema into each route"),
        ((("transform.routes", {}),), "transform.routes", "expected a mapping of route names to routes"),
        ((("transform.routes.Orders", ROUTED["transform"]["routes"]["orders"]),), "transform.routes.Orders",
         "expected a route name: lower-case letters"),
        ((("transform.routes.unrouted", ROUTED["transform"]["routes"]["orders"]),), "transform.routes.unrouted",
         "names the unrouted records' quarantine"),
        ((("transform.routes.orders.match", ...),), "transform.routes.orders.match",
         "expected a mapping with one or more of topic, header, key, field, record_name, subject, got nothing"),
        ((("transform.routes.orders.match", {}),), "transform.routes.orders.match",
         "expected at least one of topic, header, key, field, record_name, subject"),
        ((("transform.routes.clicks.match.header", {"kind": 1}),), "transform.routes.clicks.match.header",
         "quote it: values are compared as text"),
        ((("transform.routes.clicks.match.header", {"a": "1", "b": "2"}),), "transform.routes.clicks.match.header",
         "a mapping of one header name"),
        ((("transform.routes.clicks.match.key", "(unclosed"),), "transform.routes.clicks.match.key",
         "a valid regular expression"),
        ((("transform.routes.orders.match.record_name", "shop Order"),), "transform.routes.orders.match.record_name",
         "a record's full name"),
        ((("transform.routes.orders.key", ...),), "transform.routes.orders.key", "the key is missing"),
        ((("transform.routes.orders.key", "customer"),), "transform.routes.orders.key",
         "the name of a field declared in transform.schema"),
        ((("transform.routes.orders.colour", "red"),), "transform.routes.orders.colour", "unknown key"),
        ((("transform.routes.payments.value_schema.registry", "other_registry"),),
         "transform.routes.payments.value_schema.registry",
         "expected the schema registry connection every route reads through ('registry_default', route orders)"),
        ((("transform.format", "json"), ("transform.value_schema", ...),
          ("transform.routes.payments.match", {"record_name": "shop.Payment"}),
          ("transform.routes.orders.match", {"key": "^o"}),
          ("transform.routes.payments.value_schema", ...)),
         "transform.routes.payments.match.record_name", "expected a route of the transform to read values through"),
        ((("transform.routes.orders.format", "avro"), ("transform.routes.payments.value_schema", ...),
          ("transform.value_schema", ...)),
         "transform.routes.orders.value_schema", "expected a value_schema section for format avro"),
        ((("maintenance.zorder_by.silver", ["order_id"]),), "maintenance.zorder_by.silver",
         "expected no silver Z-order with transform.routes"),
    ],
)  # fmt: skip
def test_a_bad_routed_transform_names_the_field(tmp_path: Path, edits: tuple[tuple[str, Any], ...], field: str,
                                                expected: str) -> None:  # fmt: skip
    path = _write(tmp_path, _changed(*edits))
    with pytest.raises(PipelineConfigError) as info:
        load_pipeline(path)
    lines = str(info.value).splitlines()
    assert any(ln.startswith(f"{path.name}: {field}: ") or f": {field}: " in ln for ln in lines), lines
    assert expected in str(info.value)


@pytest.mark.parametrize("key", ["unrouted", "overlap"])
def test_routing_policies_without_routes_are_refused(tmp_path: Path, key: str) -> None:
    data = {**ROUTED, "transform": {"schema": ORDER, "key": "order_id", "ordering": "ts", key: "first"}}
    with pytest.raises(PipelineConfigError) as info:
        load_pipeline(_write(tmp_path, data))
    assert f"transform.{key}: expected no transform.{key} without transform.routes" in str(info.value)


def test_replay_quarantine_of_a_routed_pipeline_reads_the_named_routes_quarantine(tmp_path: Path) -> None:
    from include.contract.actions import RequestError
    from include.contract.replay import ReplaySelection
    from include.orchestration.request_plan import replay_quarantine_path

    cfg = load_pipeline(_write(tmp_path, ROUTED))
    assert replay_quarantine_path(cfg, ReplaySelection(route="payments")) == str(
        Path(cfg.tables.quarantine_path, "payments"))  # fmt: skip
    with pytest.raises(RequestError) as unnamed:
        replay_quarantine_path(cfg, ReplaySelection())
    assert str(unnamed.value) == (
        f"quarantine_route: pipeline {cfg.name!r} routes its records, and each route has its own quarantine; name one "
        f"of its routes ({', '.join(cfg.routing.names)}), got none"
    )  # fmt: skip
    with pytest.raises(RequestError, match=r"got 'refunds'$"):
        replay_quarantine_path(cfg, ReplaySelection(route="refunds"))
    with pytest.raises(RequestError, match=r"^quarantine_route: records no route took .* are not replayed; add a route "
                                           r"that matches them"):  # fmt: skip
        replay_quarantine_path(cfg, ReplaySelection(route="unrouted"))
    single = load_pipeline(_write(tmp_path, {**ROUTED, "name": "single", "transform": {
        "schema": ORDER, "key": "order_id", "ordering": "ts"}}))  # fmt: skip
    assert replay_quarantine_path(single, ReplaySelection()) == single.tables.quarantine_path
    with pytest.raises(RequestError, match=r"does not route its records .*; clear quarantine_route$"):
        replay_quarantine_path(single, ReplaySelection(route="payments"))
