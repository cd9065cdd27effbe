"""Quarantined records replayed after their cause is fixed, against real Kafka, Spark and Delta.

Records are produced to the session broker, ingested and transformed by the real jobs under a pipeline
file that refuses a currency; then the pipeline file allows it and the transform replays the quarantine.
Assertions compare silver and quarantine with what was produced, computed here.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, timedelta

import pytest

from include.contract.replay import ReplaySelection
from include.contract.transform_spec import FieldSpec
from tests.integration.job_helpers import ORDERS_SPEC as ORDERS
from tests.integration.job_helpers import (
    T0,
    assert_accounted,
    ingest,
    order_after_t0,
    quarantine,
    run_killed_by_failpoint,
    silver,
    transform,
    transform_args,
)
from tests.kafka_helpers import produce

pytestmark = pytest.mark.integration

STRICT = replace(ORDERS, fields=(*ORDERS.fields, FieldSpec("currency", "string", allowed=("EUR", "USD"))),
                 tombstones="quarantine")  # fmt: skip
#: The fix: GBP is a currency now.
FIXED = replace(STRICT, fields=(*ORDERS.fields, FieldSpec("currency", "string", allowed=("EUR", "USD", "GBP"))))


def replay_file(lake, selection: ReplaySelection, name: str = "replay.json") -> str:
    import json

    path = lake / name
    path.write_text(json.dumps(selection.to_json()))
    return str(path)


def replay(spark, lake, name, selection: ReplaySelection, run_id: str) -> dict:
    from spark_jobs import bronze_to_silver

    args = [*transform_args(lake, name, spec=FIXED, run_id=run_id), "--replay-file", replay_file(lake, selection)]
    return bronze_to_silver.run(spark, bronze_to_silver.parse_config(args)).to_json()


def outcomes(spark, lake) -> dict[str, str | None]:
    return {r["key"].decode(): r["replay_outcome"] for r in quarantine(spark, lake).values()}


def produce_orders(bootstrap, topic) -> None:
    produce(bootstrap, topic, [
        (0, b"o1", order_after_t0("o1", 1, currency="GBP")),    # older than o1's EUR event: must not win
        (0, b"o1", order_after_t0("o1", 5, currency="EUR")),
        (1, b"o2", order_after_t0("o2", 2, currency="GBP")),
        (1, b"o3", order_after_t0("o3", 1, amount=-5, currency="EUR")),  # another cause: not fixed
        (2, b"o4", order_after_t0("o4", 3, currency="GBP")),
    ])  # fmt: skip


def test_replay_after_a_fix_applies_what_now_passes_in_order_and_keeps_what_still_fails(
    spark, bootstrap, make_topic, unique_name, lake
):
    topic = make_topic(unique_name, partitions=3)
    produce_orders(bootstrap, topic)
    ingest(spark, bootstrap, lake, unique_name, topic)
    first = transform(spark, lake, unique_name, spec=STRICT)
    assert (first["upserted"], first["quarantined"]) == (1, 4)

    # The fix, then a replay of the currency problems only.
    result = replay(spark, lake, unique_name, ReplaySelection(field="currency"), "run-replay")["replay"]
    assert (result["selected"], result["outcomes"]) == (3, {"applied": 2, "superseded": 1})
    rows = silver(spark, lake)
    assert {k: (r["currency"], (r["event_time"].replace(tzinfo=UTC) - T0) // timedelta(minutes=1))
            for k, r in rows.items()} == {"o1": ("EUR", 5), "o2": ("GBP", 2), "o4": ("GBP", 3)}  # fmt: skip
    assert outcomes(spark, lake) == {"o1": "superseded", "o2": "applied", "o3": None, "o4": "applied"}
    assert len(quarantine(spark, lake)) == 4  # quarantine keeps every record

    # Everything not replayed to an end: o3 only, which fails again and says why now.
    again = replay(spark, lake, unique_name, ReplaySelection(), "run-replay-2")["replay"]
    assert (again["selected"], again["outcomes"]) == (1, {"still_failing": 1})
    held = {r["key"].decode(): r for r in quarantine(spark, lake).values()}
    assert held["o3"]["replay_outcome"] == "still_failing" and held["o3"]["replay_run_id"] == "run-replay-2"
    assert held["o3"]["reason"] == "amount: expected at least 0, got -5"
    # A third replay of the currency problems finds nothing left to take.
    assert replay(spark, lake, unique_name, ReplaySelection(field="currency"), "run-replay-3")["replay"][
        "selected"] == 0  # fmt: skip
    assert_accounted(spark, lake)


@pytest.mark.full
def test_a_replay_killed_between_its_silver_and_quarantine_commits_is_finished_by_the_next_one(
    spark, bootstrap, make_topic, unique_name, lake
):
    topic = make_topic(unique_name, partitions=3)
    produce_orders(bootstrap, topic)
    ingest(spark, bootstrap, lake, unique_name, topic)
    transform(spark, lake, unique_name, spec=STRICT)
    args = [*transform_args(lake, unique_name, spec=FIXED, run_id="run-replay"),
            "--replay-file", replay_file(lake, ReplaySelection(field="currency"))]  # fmt: skip
    run_killed_by_failpoint("spark_jobs/bronze_to_silver.py", args, "kill-after-replay-silver-commit:0")
    # The crash window: silver holds the replayed rows, quarantine does not say so yet.
    assert set(silver(spark, lake)) == {"o1", "o2", "o4"}
    assert set(outcomes(spark, lake).values()) == {None}

    result = replay(spark, lake, unique_name, ReplaySelection(field="currency"), "run-replay-retry")["replay"]
    assert result["selected"] == 3 and result["silver_version"] is None  # silver is not changed again
    assert outcomes(spark, lake) == {"o1": "superseded", "o2": "applied", "o3": None, "o4": "applied"}
    assert {k: r["currency"] for k, r in silver(spark, lake).items()} == {"o1": "EUR", "o2": "GBP", "o4": "GBP"}
