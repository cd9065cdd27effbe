"""The value-formats part of the benchmark: its report and its place among the parts (no timing here)."""

from __future__ import annotations

from include.tooling import benchmark
from include.tooling.benchmark_formats import FormatsParams, FormatsReport, _orders, render_formats_markdown


def test_report_gives_records_per_second_side_by_side_and_the_ratio():
    report = FormatsReport(FormatsParams(records=1000, repetitions=2), registry="http://r/apis/ccompat/v7",
                           silver_rows=700, quarantined={"json": 0, "avro": 0})  # fmt: skip
    report.seconds = {"json": [2.0, 1.0], "avro": [4.0, 2.0]}
    report.decode_s = {"json": [0.5, 0.7], "avro": [1.0, 1.2]}
    text = render_formats_markdown(report)
    assert "| json | 750 (500–1,000) | 1.5 | 0.6 | 0 |" in text
    assert "| avro | 375 (250–500) | 3.0 | 1.1 | 0 |" in text
    assert "Avro / JSON records/s: **0.50**." in text
    assert "Both formats gave the same 700 silver rows." in text


def test_the_orders_repeat_keys_and_are_the_same_for_a_seed():
    orders = _orders(500)
    assert orders == _orders(500) and len({o["order_id"] for o in orders}) < 500


def test_formats_is_a_part_but_not_a_default_one():
    assert "formats" in benchmark.PARTS and "formats" not in benchmark.DEFAULT_PARTS
    args = benchmark.build_arg_parser().parse_args(["--parts", "formats", "--format-records", "1000"])
    assert args.parts == ("formats",) and args.format_records == 1000
