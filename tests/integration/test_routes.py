"""One topic into three tables against real Kafka, Spark, Delta and a real schema registry.

The topic mixes two Avro record kinds (registered under their record names, subject strategy record_name) and
JSON click events told apart by a header, plus records no route takes. Each route's silver is compared with
an oracle computed here from what was produced; the check after the run (:func:`check_routed`, what the
continuity task runs) reads the tables back. A driver killed between two routes' commits of one batch applies
no route's batch twice and loses none.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, timedelta
from decimal import Decimal
from pathlib import Path

import fastavro
import pytest

from include.contract.errors import TransformError
from include.contract.routes import RoutedRecord, RouteMatch, RouteSpec, Routing, ValueMatch, WriterSchema
from include.contract.transform_check import RouteRun, TransformCheck, check_routed
from include.contract.transform_spec import FieldSpec, TransformSpec, ValueSchema
from include.readers import delta_progress
from include.readers.schema_registry import frame
from include.tooling import airflow_local
from tests.integration.job_helpers import T0, ingest, run_killed_by_failpoint
from tests.kafka_helpers import produce_with_headers

pytestmark = pytest.mark.integration

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}  # fmt: skip
PAYMENT = {"type": "record", "name": "Payment", "namespace": "shop", "fields": [
    {"name": "payment_id", "type": "string"},
    {"name": "order_id", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}  # fmt: skip


def _spec(key: str, *fields: FieldSpec, fmt: str = "avro", subject: str | None = None) -> TransformSpec:
    value_schema = ValueSchema(registry="test", subject=subject, subject_strategy="record_name") if subject else None
    return TransformSpec(fields=(FieldSpec(key, "string", True), *fields, FieldSpec("event_time", "timestamp", True)),
                         key=(key,), ordering="event_time", format=fmt, value_schema=value_schema)  # fmt: skip


def routing(lake: Path, **changes: str) -> Routing:
    """The three routes, their tables under ``lake``."""
    routes = (
        RouteSpec("orders", RouteMatch(record_name=("shop.Order",)),
                  _spec("order_id", FieldSpec("amount", "decimal(10,2)", True), subject="shop.Order"),
                  str(lake / "silver" / "orders"), str(lake / "quarantine" / "orders")),
        RouteSpec("payments", RouteMatch(record_name=("shop.Payment",)),
                  _spec("payment_id", FieldSpec("order_id", "string", True), subject="shop.Payment"),
                  str(lake / "silver" / "payments"), str(lake / "quarantine" / "payments")),
        RouteSpec("clicks", RouteMatch(header=ValueMatch("kind", ("click",))),
                  _spec("click_id", FieldSpec("page", "string"), fmt="json"),
                  str(lake / "silver" / "clicks"), str(lake / "quarantine" / "clicks")),
    )  # fmt: skip
    return Routing(routes, str(lake / "quarantine" / "unrouted"), **changes)


def routed_args(lake: Path, name: str, policy: Routing, registry_url: str, run_id: str) -> list[str]:
    spec_file, registry_file = lake / f"spec-{run_id}.json", lake / "registry.json"
    spec_file.parent.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(json.dumps({"routing": policy.to_json()}))
    registry_file.write_text(json.dumps({"url": registry_url}))
    return ["--pipeline", name, "--bronze-path", str(lake / "bronze"), "--silver-path", str(lake / "silver"),
            "--quarantine-path", str(lake / "quarantine"), "--checkpoint-root", str(lake / "checkpoints" / "silver"),
            "--spec-file", str(spec_file), "--run-id", run_id, "--registry-file", str(registry_file)]  # fmt: skip


def run_routed(spark, lake: Path, name: str, policy: Routing, registry_url: str, run_id: str = "run-1") -> dict:  # type: ignore[no-untyped-def]
    from spark_jobs import bronze_to_silver

    return bronze_to_silver.run(spark, bronze_to_silver.parse_config(
        routed_args(lake, name, policy, registry_url, run_id))).to_json()  # fmt: skip


def avro(schema: dict, **record: object) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


class Produced:
    """What the test produced, and the oracle: per route, the newest row of each key; the unrouted records."""

    def __init__(self, policy: Routing, writers: dict[int, WriterSchema]) -> None:
        self.policy = policy
        self.writers = writers
        self.records: list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]] = []
        self.newest: dict[str, dict[str, tuple[int, str]]] = {r: {} for r in policy.names}
        self.unrouted: list[bytes] = []

    def add(self, partition: int, key: bytes, value: bytes, minute: int, what: str,
            headers: tuple[tuple[str, bytes], ...] = ()) -> None:  # fmt: skip
        writer = self.writers.get(int.from_bytes(value[1:5], "big")) if value[:1] == b"\x00" else None
        routes = self.policy.assign(RoutedRecord("t", key, value, headers, writer))
        for route in routes:
            rows = self.newest[route]
            if key.decode() not in rows or rows[key.decode()][0] <= minute:
                rows[key.decode()] = (minute, what)
        if not routes:
            self.unrouted.append(value)
        self.records.append((partition, key, value, list(headers)))


def produce_mix(bootstrap: str, topic: str, produced: Produced, ids: dict[str, int], start: int, count: int) -> None:
    """``count`` records from ``start`` on: orders, payments and clicks, keys updated several times, and every
    seventh record of no kind a route takes."""
    for i in range(start, start + count):
        minute, partition = (i * 7) % 60, i % 3
        kind = i % 7
        if kind in (0, 1, 2):
            key = f"o{i % 11}"
            value = frame(ids["order"], avro(ORDER, order_id=key, amount=Decimal(f"{i}.50"),
                                             event_time=T0 + timedelta(minutes=minute)))  # fmt: skip
            produced.add(partition, key.encode(), value, minute, f"{i}.50")
        elif kind in (3, 4):
            key = f"p{i % 5}"
            value = frame(ids["payment"], avro(PAYMENT, payment_id=key, order_id=f"o{i}",
                                               event_time=T0 + timedelta(minutes=minute)))  # fmt: skip
            produced.add(partition, key.encode(), value, minute, f"o{i}")
        elif kind == 5:
            key = f"c{i % 13}"
            value = json.dumps({"click_id": key, "page": f"/p{i}",
                                "event_time": (T0 + timedelta(minutes=minute)).isoformat()}).encode()  # fmt: skip
            produced.add(partition, key.encode(), value, minute, f"/p{i}", (("kind", b"click"),))
        else:  # JSON without the header: no route takes it
            value = json.dumps({"click_id": f"x{i}", "event_time": T0.isoformat()}).encode()
            produced.add(partition, f"x{i}".encode(), value, minute, "", (("kind", b"view"),))
    produce_with_headers(bootstrap, topic, produced.records[-count:])


def silver_of(spark, path: str, key: str, column: str) -> dict[str, tuple[int, str]]:  # type: ignore[no-untyped-def]
    rows = spark.read.format("delta").load(path).where("not _deleted").collect()
    return {r[key]: (int((r["event_time"].replace(tzinfo=UTC) - T0).total_seconds() // 60), str(r[column]))
            for r in rows}  # fmt: skip


def checked(policy: Routing, lake: Path) -> TransformCheck:
    """The check the continuity task runs, over every commit the tables hold."""
    runs = {}
    for r in policy.routes:
        previous, commits = delta_progress.silver_commits_since(r.silver_path, None)
        runs[r.name] = RouteRun(previous, tuple(commits), delta_progress.quarantine_rows_since(r.quarantine_path, None))
    since = min(c.bronze_start.version for run in runs.values() for c in run.commits)
    version, rows = delta_progress.bronze_rows_by_version(str(lake / "bronze"), since)
    unrouted = delta_progress.unrouted_rows_since(policy.unrouted_path, None)
    return check_routed(routes=runs, bronze_rows=rows, bronze_version=version, unrouted_rows=unrouted,
                        unrouted_policy=policy.unrouted)  # fmt: skip


@pytest.fixture
def registered(schema_registry) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {"order": schema_registry.register("shop.Order", ORDER),
            "payment": schema_registry.register("shop.Payment", PAYMENT)}  # fmt: skip


def _writers(ids: dict[str, int]) -> dict[int, WriterSchema]:
    return {ids["order"]: WriterSchema(ids["order"], "shop.Order", ("shop.Order",)),
            ids["payment"]: WriterSchema(ids["payment"], "shop.Payment", ("shop.Payment",))}  # fmt: skip


def assert_routes_hold_the_oracle(spark, policy: Routing, produced: Produced) -> None:  # type: ignore[no-untyped-def]
    columns = {"orders": ("order_id", "amount"), "payments": ("payment_id", "order_id"), "clicks": ("click_id", "page")}
    for r in policy.routes:
        key, column = columns[r.name]
        assert silver_of(spark, r.silver_path, key, column) == produced.newest[r.name], r.name
    held = sorted(bytes(row["value"]) for row in spark.read.format("delta").load(policy.unrouted_path).collect())
    assert held == sorted(produced.unrouted)


def test_three_record_kinds_of_one_topic_land_each_in_its_route_exactly_once(
    spark, bootstrap, make_topic, unique_name, lake, schema_registry, registered
):  # type: ignore[no-untyped-def]
    topic = make_topic(unique_name, partitions=3)
    policy = routing(lake)
    produced = Produced(policy, _writers(registered))
    produce_mix(bootstrap, topic, produced, registered, 0, 140)
    ingest(spark, bootstrap, lake, unique_name, topic)
    first = run_routed(spark, lake, unique_name, policy, schema_registry.url)

    assert first["bronze_read"] == 140
    assert first["unrouted"] == {"policy": "quarantine", "records": 20, "quarantined": 20}
    assert {name: r["read"] for name, r in first["routes"].items()} == {"orders": 60, "payments": 40, "clicks": 20}
    assert_routes_hold_the_oracle(spark, policy, produced)
    verdict = checked(policy, lake)
    assert verdict.ok, verdict.violations

    # The next run reads exactly the new records, into the routes that take them.
    produce_mix(bootstrap, topic, produced, registered, 140, 21)
    ingest(spark, bootstrap, lake, unique_name, topic)
    second = run_routed(spark, lake, unique_name, policy, schema_registry.url, run_id="run-2")
    assert second["bronze_read"] == 21 and second["unrouted"]["records"] == 3
    assert_routes_hold_the_oracle(spark, policy, produced)
    assert checked(policy, lake).ok


def test_a_driver_killed_between_two_routes_commits_applies_no_batch_twice_and_loses_none(
    spark, bootstrap, make_topic, unique_name, lake, schema_registry, registered
):  # type: ignore[no-untyped-def]
    topic = make_topic(unique_name, partitions=3)
    policy = routing(lake)
    produced = Produced(policy, _writers(registered))
    produce_mix(bootstrap, topic, produced, registered, 0, 70)
    ingest(spark, bootstrap, lake, unique_name, topic)
    # The first route (orders) commits batch 0, then the driver dies: payments and clicks hold nothing yet.
    run_killed_by_failpoint("spark_jobs/bronze_to_silver.py",
                            routed_args(lake, unique_name, policy, schema_registry.url, "run-1"),
                            "kill-after-silver-commit:0")  # fmt: skip
    assert [c.route for c in delta_progress.silver_commits_since(policy.routes[0].silver_path, None)[1]] == ["orders"]
    assert not delta_progress.silver_commits_since(policy.routes[1].silver_path, None)[1]

    again = run_routed(spark, lake, unique_name, policy, schema_registry.url, run_id="run-2")
    orders = again["routes"]["orders"]
    assert [b["skipped_replay"] for b in orders["batches"]] == [True]  # the batch its silver holds is not redone
    assert {name: r["read"] for name, r in again["routes"].items()} == {"orders": 0, "payments": 20, "clicks": 10}
    assert_routes_hold_the_oracle(spark, policy, produced)
    verdict = checked(policy, lake)
    assert verdict.ok, verdict.violations
    # Each route holds batch 0 of epoch 0 exactly once.
    for r in policy.routes:
        batches = [(c.epoch, c.batch_id) for c in delta_progress.silver_commits_since(r.silver_path, None)[1]]
        assert batches == [(0, 0)], (r.name, batches)


@pytest.mark.full  # a policy of the routed run; the fast tier keeps exactly-once and the kill
def test_unrouted_fail_stops_the_batch_before_any_route_writes_and_names_the_record(
    spark, bootstrap, make_topic, unique_name, lake, schema_registry, registered
):  # type: ignore[no-untyped-def]
    topic = make_topic(unique_name, partitions=3)
    policy = routing(lake, unrouted="fail")
    produced = Produced(policy, _writers(registered))
    produce_mix(bootstrap, topic, produced, registered, 0, 7)  # the seventh, offset 2 of partition 0, is of no route
    ingest(spark, bootstrap, lake, unique_name, topic)
    with pytest.raises(TransformError) as failed:
        run_routed(spark, lake, unique_name, policy, schema_registry.url)
    assert f"the first at topic {topic} partition 0 offset 2; no route matches the record" in str(failed.value)
    assert "add a route that takes it, or set transform.unrouted" in str(failed.value)
    assert (failed.value.topic, failed.value.partition, failed.value.offsets) == (topic, 0, (2,))
    for r in policy.routes:
        assert not delta_progress.silver_commits_since(r.silver_path, None)[1], r.name
    # Set to quarantine, the next run writes the batch whole.
    quarantined = replace(policy, unrouted="quarantine")
    run_routed(spark, lake, unique_name, quarantined, schema_registry.url, run_id="run-2")
    assert_routes_hold_the_oracle(spark, quarantined, produced)
    assert checked(quarantined, lake).ok


@pytest.mark.full  # a policy of the routed run; the fast tier keeps exactly-once and the kill
def test_overlap_all_gives_a_record_to_each_route_that_matches_and_counts_the_copy(
    spark, bootstrap, make_topic, unique_name, lake, schema_registry, registered
):  # type: ignore[no-untyped-def]
    topic = make_topic(unique_name, partitions=3)
    base = routing(lake)
    # A fourth route takes every record keyed o1: the orders of that key go to both.
    audit = RouteSpec("audit", RouteMatch(key="^o1$"), base.routes[0].transform, str(lake / "silver" / "audit"),
                      str(lake / "quarantine" / "audit"))  # fmt: skip
    policy = replace(base, routes=(*base.routes, audit), overlap="all")
    produced = Produced(policy, _writers(registered))
    produce_mix(bootstrap, topic, produced, registered, 0, 70)
    ingest(spark, bootstrap, lake, unique_name, topic)
    summary = run_routed(spark, lake, unique_name, policy, schema_registry.url)
    copies = sum(1 for p, k, v, h in produced.records if k == b"o1")
    assert summary["routes"]["audit"]["read"] == copies > 0
    extra = sum(a["account"]["extra"] for a in summary["accounts"])
    assert extra == copies
    assert checked(policy, lake).ok


@pytest.mark.full  # the routed DAG test replays a route through the form; this one checks the tables in detail
def test_replay_quarantine_of_one_route_applies_its_fixed_records_to_its_silver_and_leaves_the_others(
    spark, bootstrap, make_topic, unique_name, lake, schema_registry, registered
):  # type: ignore[no-untyped-def]
    from include.contract.replay import ReplaySelection
    from spark_jobs import bronze_to_silver

    topic = make_topic(unique_name, partitions=3)
    fixed = routing(lake)
    clicks = fixed.routes[2]
    # Before the fix the clicks route requires a page: the clicks produced without one are quarantined.
    strict = replace(fixed, routes=(*fixed.routes[:2], replace(clicks, transform=replace(clicks.transform, fields=tuple(
        replace(f, required=True) if f.name == "page" else f for f in clicks.transform.fields)))))  # fmt: skip
    produced = Produced(fixed, _writers(registered))
    produce_mix(bootstrap, topic, produced, registered, 0, 70)
    pageless = [(i % 3, f"n{i}".encode(), json.dumps({"click_id": f"n{i}", "event_time": T0.isoformat()}).encode(),
                 [("kind", b"click")]) for i in range(4)]  # fmt: skip
    produce_with_headers(bootstrap, topic, pageless)
    ingest(spark, bootstrap, lake, unique_name, topic)
    first = run_routed(spark, lake, unique_name, strict, schema_registry.url)
    assert first["routes"]["clicks"]["quarantined"] == 4
    before = {r.name: len(delta_progress.silver_commits_since(r.silver_path, None)[1]) for r in fixed.routes}

    request = lake / "replay.json"
    request.write_text(json.dumps(ReplaySelection(field="page", route="clicks").to_json()))
    args = [*routed_args(lake, unique_name, fixed, schema_registry.url, "run-2"), "--replay-file", str(request)]
    second = bronze_to_silver.run(spark, bronze_to_silver.parse_config(args)).to_json()

    replayed = second["routes"]["clicks"]["replay"]
    assert (replayed["selected"], replayed["outcomes"]) == (4, {"applied": 4}), replayed
    assert all(second["routes"][name].get("replay") is None for name in ("orders", "payments"))
    held = silver_of(spark, clicks.silver_path, "click_id", "page")
    assert {k for k in held if k.startswith("n")} == {f"n{i}" for i in range(4)}
    outcomes = {r["replay_outcome"] for r in spark.read.format("delta").load(clicks.quarantine_path).collect()}
    assert outcomes == {"applied"}
    for r in fixed.routes[:2]:  # the other routes' quarantines are not touched by the replay (none was written)
        assert not Path(r.quarantine_path).exists(), r.name
    after = {r.name: len(delta_progress.silver_commits_since(r.silver_path, None)[1]) for r in fixed.routes}
    assert after == before  # a replay's commit is not a batch commit
    verdict = checked(fixed, lake)
    assert verdict.ok, verdict.violations

    # A request file naming a route the pipeline does not have is refused before anything runs.
    request.write_text(json.dumps(ReplaySelection(route="refunds").to_json()))
    with pytest.raises(TransformError, match=r"route: expected one of the pipeline's routes \(orders, payments, "
                                             r"clicks\), got 'refunds'"):  # fmt: skip
        bronze_to_silver.parse_config([*routed_args(lake, unique_name, fixed, schema_registry.url, "run-3"),
                                       "--replay-file", str(request)])  # fmt: skip


@pytest.mark.full
def test_a_routed_pipeline_runs_as_a_dag_and_its_continuity_check_proves_every_batch(pipeline, bootstrap):  # type: ignore[no-untyped-def]
    p = pipeline
    rules = {"ordering": "event_time", "tombstones": "quarantine"}

    def transform(most: int) -> dict:
        return {
            "unrouted": "quarantine",
            "routes": {
                "orders": {"match": {"header": {"kind": "order"}}, "key": "order_id", **rules, "schema": {
                    "order_id": "string", "amount": {"type": "double", "maximum": most}, "event_time": "timestamp"}},
                "clicks": {"match": {"header": {"kind": ["click", "tap"]}}, "key": "click_id", **rules,
                           "schema": {"click_id": "string", "page": "string", "event_time": "timestamp"}},
            },
        }  # fmt: skip

    p.write(retries=2, transform=transform(500))
    records = []
    for i in range(30):  # ten orders, each updated three times
        at = (T0 + timedelta(minutes=i)).isoformat()
        records.append((i % 3, f"o{i % 10}".encode(), json.dumps(
            {"order_id": f"o{i % 10}", "amount": float(i), "event_time": at}).encode(), [("kind", b"order")]))
    for i in range(20):
        at = (T0 + timedelta(minutes=i)).isoformat()
        records.append((i % 3, f"c{i}".encode(), json.dumps({"click_id": f"c{i}", "page": f"/{i}", "event_time": at})
                        .encode(), [("kind", b"tap" if i % 2 else b"click")]))
    for i in range(5):  # no route takes a view
        records.append((i % 3, f"v{i}".encode(), b'{"view": 1}', [("kind", b"view")]))
    # Above the orders route's maximum: quarantined by that route until the file allows it.
    records.append((0, b"big", json.dumps({"order_id": "big", "amount": 1000.0, "event_time": T0.isoformat()}).encode(),
                    [("kind", b"order")]))  # fmt: skip
    produce_with_headers(bootstrap, p.topic, records)

    proc, log = p.run()
    assert proc.returncode == 0, log[-5000:]
    (row,) = p.ledger()
    assert (row["outcome"], row["rows"], row["continuity"]) == ("success", 56, "CONTINUOUS"), row["reason"]
    check = row["transform_json"]["check"]
    assert check["ok"] is True and check["unrouted"] == 5, check
    assert (row["silver_read"], row["silver_upserted"], row["superseded"]) == (56, 30, 20)
    from deltalake import DeltaTable

    root = p.lake / p.name

    def orders() -> dict[str, float]:
        rows = DeltaTable(str(root / "silver" / "orders")).to_pyarrow_table().to_pylist()
        return {r["order_id"]: r["amount"] for r in rows}

    assert orders() == {f"o{k}": float(20 + k) for k in range(10)}  # the newest of each key
    clicks = DeltaTable(str(root / "silver" / "clicks")).to_pyarrow_table().to_pylist()
    assert sorted(r["click_id"] for r in clicks) == sorted(f"c{i}" for i in range(20))
    held = DeltaTable(str(root / "quarantine" / "unrouted")).to_pyarrow_table().to_pylist()
    assert sorted(bytes(r["key"]) for r in held) == [f"v{i}".encode() for i in range(5)]
    lines = airflow_local.summary_lines(log)
    assert any(line.startswith("transform: read 56 from bronze, routed in 1 batch(es); 5 unrouted (quarantined)")
               for line in lines), lines  # fmt: skip

    # The file now allows the amount: the orders route's quarantine is replayed through the form, dry run first.
    p.write(retries=2, transform=transform(5000))
    conf = {"action": "replay_quarantine", "reason": "large orders are allowed now", "quarantine_route": "orders"}
    proc, log = p.run({**conf, "dry_run": True})
    assert proc.returncode == 0, log[-5000:]
    dry = p.ledger()[0]
    assert dry["outcome"] == "dry_run" and dry["request_json"]["dry_run"]["replay"]["rows"] == 1, dry
    assert dry["reason"].startswith("dry run of replay_quarantine: would replay 1 quarantined records of route "
                                    "'orders'"), dry["reason"]  # fmt: skip
    proc, log = p.run(conf)
    assert proc.returncode == 0, log[-5000:]
    row = p.ledger()[0]
    assert (row["outcome"], row["action"], row["continuity"]) == ("success", "replay_quarantine", "CONTINUOUS"), row
    lines = airflow_local.summary_lines(log)
    assert any("route orders: " in line and "quarantine replay: 1 selected: 1 applied" in line for line in lines), lines
    assert orders() == {**{f"o{k}": float(20 + k) for k in range(10)}, "big": 1000.0}
