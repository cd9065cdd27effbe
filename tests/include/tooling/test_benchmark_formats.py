"""The side-by-side transform parts of the benchmark (formats, cdc): their reports, the change events the cdc
part writes, and their place among the parts (no timing here)."""

from __future__ import annotations

import json

from include.tooling import benchmark
from include.tooling.benchmark_formats import (
    CDC_MODES,
    SideBySideParams,
    SideBySideReport,
    _orders,
    debezium_changes,
    render_cdc_markdown,
    render_formats_markdown,
)


def test_report_gives_records_per_second_side_by_side_and_the_ratio():
    report = SideBySideReport(SideBySideParams(records=1000, repetitions=2), registry="http://r/apis/ccompat/v7",
                              silver_rows=700, quarantined={"json": 0, "avro": 0, "protobuf": 0})  # fmt: skip
    report.seconds = {"json": [2.0, 1.0], "avro": [4.0, 2.0], "protobuf": [5.0, 5.0]}
    report.decode_s = {"json": [0.5, 0.7], "avro": [1.0, 1.2], "protobuf": [2.0, 2.0]}
    text = render_formats_markdown(report)
    assert "| json | 750 (500–1,000) | 1.5 | 0.6 | 0 |" in text
    assert "| avro | 375 (250–500) | 3.0 | 1.1 | 0 |" in text
    assert "| protobuf | 200 (200–200) | 5.0 | 2.0 | 0 |" in text
    assert "Avro / JSON records/s: **0.50**." in text and "Protobuf / Avro records/s: **0.53**." in text
    assert "Every format gave the same 700 silver rows." in text
    summary = benchmark.summary_lines(benchmark.BenchmarkReport(benchmark.BenchmarkParams(), machine="m", topic="t",
                                                               broker="b", produce_s=0.0, formats=report))  # fmt: skip
    assert any("1,000 Protobuf values" in line and "5.0 s / 3.0 s / 1.5 s: **1.67x** Avro's time" in line
               for line in summary), summary  # fmt: skip


def test_cdc_report_puts_debezium_beside_the_upsert_and_the_summary_gives_the_ratio():
    report = SideBySideReport(SideBySideParams(records=1000, repetitions=2), CDC_MODES, silver_rows=700,
                              quarantined={"upsert": 0, "debezium": 0})  # fmt: skip
    report.seconds = {"upsert": [1.0, 1.0], "debezium": [1.5, 1.5]}
    report.decode_s = {"upsert": [0.2, 0.2], "debezium": [0.4, 0.4]}
    text = render_cdc_markdown(report)
    assert "| upsert | 1,000 (1,000–1,000) | 1.0 | 0.2 | 0 |" in text
    assert "| debezium | 667 (667–667) | 1.5 | 0.4 | 0 |" in text
    assert "Debezium / upsert records/s: **0.67**." in text
    summary = benchmark.summary_lines(benchmark.BenchmarkReport(benchmark.BenchmarkParams(), machine="m", topic="t", broker="b",
                                                               produce_s=0.0, cdc=report))
    assert any("1,000 Debezium change events" in line and "**1.50x**" in line for line in summary), summary


def test_the_orders_repeat_keys_and_are_the_same_for_a_seed():
    orders = _orders(500)
    assert orders == _orders(500) and len({o["order_id"] for o in orders}) < 500


def test_change_events_create_then_update_each_key_in_one_partition_at_growing_positions():
    orders = _orders(300)
    changes = debezium_changes(orders, 4)
    assert len(changes) == len(orders)
    partition_of: dict[str, int] = {}
    last = 0
    for order, (partition, key, value) in zip(orders, changes, strict=True):
        event = json.loads(value)
        key_id = json.loads(key)["order_id"]
        assert key_id == order["order_id"] == event["after"]["order_id"]
        assert event["op"] == ("u" if key_id in partition_of else "c")
        assert partition_of.setdefault(key_id, partition) == partition
        previous, lsn = (int(x) for x in json.loads(event["source"]["sequence"]))
        assert previous < lsn == event["source"]["lsn"] and lsn > last
        last = lsn
        assert event["after"]["amount"] == order["amount"] and event["after"]["event_time"].endswith("Z")
    assert {op for op in (json.loads(v)["op"] for _, _, v in changes)} == {"c", "u"}


def test_formats_and_cdc_are_default_parts_of_the_same_size():
    assert {"formats", "cdc", "routes"} <= set(benchmark.DEFAULT_PARTS)
    args = benchmark.build_arg_parser().parse_args(["--parts", "formats,cdc", "--format-records", "1000",
                                                   "--cdc-changes", "500"])  # fmt: skip
    assert args.parts == ("formats", "cdc") and args.format_records == 1000 and args.cdc_changes == 500
    assert benchmark.BenchmarkParams().cdc.records == benchmark.BenchmarkParams().formats.records == 100_000
