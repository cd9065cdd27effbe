"""The backfill job's pure parts: its arguments and request file, and capping ranges at the table's position."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from include.contract.offsets import BackfillRange
from spark_jobs.ingest_plan import JobConfigError
from spark_jobs.kafka_backfill import cap_at_position, merge_conflicts, parse_config

ROOT = Path(__file__).resolve().parents[2]

REQUEST = {
    "action": "backfill_time",
    "reason": "late records",
    "requested_by": "alice",
    "ranges": [{"topic": "orders", "partition": 0, "from": 10, "until": 20},
               {"topic": "orders", "partition": 1, "from": 0, "until": 5}],
    "time_range": {"from": "2026-11-20T00:00:00+00:00", "to": "2026-11-20T01:00:01+01:00"},
}  # fmt: skip


def argv(request_file, *extra: str) -> list[str]:
    return ["--pipeline", "orders", "--bootstrap-servers", "127.0.0.1:9092", "--bronze-path", "lake/orders/bronze",
            "--request-file", str(request_file), *extra]  # fmt: skip


def write_request(tmp_path, data) -> object:
    path = tmp_path / "request.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_importing_the_job_does_not_import_spark():
    code = "import sys, spark_jobs.kafka_backfill; print(sorted(m for m in sys.modules if m.startswith('pyspark')))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_request_file_is_parsed(tmp_path):
    cfg = parse_config(argv(write_request(tmp_path, REQUEST), "--run-id", "r-9", "--run-type", "backfill",
                            "--summary-path", "out/summary.json"))  # fmt: skip
    assert cfg.ranges == (BackfillRange("orders", 0, 10, 20), BackfillRange("orders", 1, 0, 5))
    assert (cfg.pipeline, cfg.bootstrap_servers, cfg.bronze_path) == ("orders", "127.0.0.1:9092",
                                                                       "lake/orders/bronze")  # fmt: skip
    assert (cfg.action, cfg.reason, cfg.requested_by) == ("backfill_time", "late records", "alice")
    assert (cfg.run_id, cfg.run_type, cfg.summary_path) == ("r-9", "backfill", "out/summary.json")
    assert cfg.time_range == REQUEST["time_range"]
    assert cfg.kafka_options == {}
    assert cfg.window_micros() == (1_795_132_800_000_000, 1_795_132_801_000_000)



def test_the_time_window_is_exact_to_the_microsecond_past_2038(tmp_path):
    # 2040-01-01T00:00:00.002 is 2208988800002000 us; a float of seconds times 10**6 gave ...001999.
    window = {"from": "2040-01-01T00:00:00.002+00:00", "to": "2040-01-01T01:00:00.000001+01:00"}
    cfg = parse_config(argv(write_request(tmp_path, REQUEST | {"time_range": window})))
    assert cfg.window_micros() == (2_208_988_800_002_000, 2_208_988_800_000_001)

def test_request_without_time_range_or_reason(tmp_path):
    data = {"action": "backfill_offsets", "ranges": [{"topic": "orders", "partition": 2, "from": 0, "until": 1}]}
    cfg = parse_config(argv(write_request(tmp_path, data)))
    assert (cfg.reason, cfg.requested_by, cfg.time_range) == ("", None, None)
    assert cfg.window_micros() is None
    assert (cfg.run_id, cfg.run_type) == ("manual", "manual")


def test_kafka_options_file_is_read(tmp_path):
    options = tmp_path / "kafka.json"
    options.write_text(json.dumps({"security.protocol": "SASL_SSL", "request.timeout.ms": 5000}))
    cfg = parse_config(argv(write_request(tmp_path, REQUEST), "--kafka-options-file", str(options)))
    assert cfg.kafka_options == {"security.protocol": "SASL_SSL", "request.timeout.ms": "5000"}


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        ("{not json", r"JSONDecodeError"),
        ("[]", r"TypeError"),
        ({k: v for k, v in REQUEST.items() if k != "ranges"}, r"KeyError\('ranges'\)"),
        ({k: v for k, v in REQUEST.items() if k != "action"}, r"KeyError\('action'\)"),
        (REQUEST | {"ranges": [{"topic": "orders", "partition": 0, "from": 10}]}, r"KeyError\('until'\)"),
        (REQUEST | {"time_range": {"from": "2026-11-20T00:00:00", "to": "2026-11-21T00:00:00+00:00"}},
         r"time_range\.from has no time zone"),
        (REQUEST | {"time_range": {"from": "2026-11-20T00:00:00+00:00", "to": "2026-11-21T00:00:00"}},
         r"time_range\.to has no time zone"),
        (REQUEST | {"time_range": {"from": "2026-11-20T00:00:00+00:00"}}, r"KeyError\('to'\)"),
        (REQUEST | {"time_range": {"from": "monday", "to": "tuesday"}}, r"Invalid isoformat string: 'monday'"),
        (REQUEST | {"ranges": [{"topic": "orders", "partition": 0, "from": 20, "until": 10}]},
         r"orders-0: backfill range \[20, 10\) is not a valid offset range"),
    ],
    ids=["bad-json", "not-an-object", "no-ranges", "no-action", "range-without-until", "naive-from", "naive-to",
         "time-range-without-to", "not-a-time", "reversed-range"],
)  # fmt: skip
def test_bad_request_file_names_the_argument(tmp_path, data, detail):
    path = write_request(tmp_path, data)
    with pytest.raises(JobConfigError, match=rf"^--request-file {path}: expected .*'ranges'.*: .*{detail}"):
        parse_config(argv(path))


def test_missing_request_file_names_the_argument(tmp_path):
    with pytest.raises(JobConfigError, match=r"--request-file .*nowhere\.json: .*FileNotFoundError"):
        parse_config(argv(tmp_path / "nowhere.json"))


def test_partition_in_two_ranges_is_refused(tmp_path):
    data = REQUEST | {"ranges": REQUEST["ranges"] + [{"topic": "orders", "partition": 0, "from": 30, "until": 40}]}
    path = write_request(tmp_path, data)
    with pytest.raises(JobConfigError, match=rf"^--request-file {path}: a partition appears in two ranges: "
                                             r"\[\('orders', 0\), \('orders', 0\), \('orders', 1\)\]$"):  # fmt: skip
        parse_config(argv(path))


def test_same_partition_of_two_topics_is_allowed(tmp_path):
    data = REQUEST | {"ranges": [{"topic": "orders", "partition": 0, "from": 0, "until": 5},
                                 {"topic": "payments", "partition": 0, "from": 0, "until": 5}]}  # fmt: skip
    assert [r.topic for r in parse_config(argv(write_request(tmp_path, data))).ranges] == ["orders", "payments"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pipeline", "orders", "--bootstrap-servers", "b:9092", "--bronze-path", "p"],
         r"the following arguments are required: --request-file"),
        (["--run-type", "scheduled"], r"--run-type: invalid choice: 'scheduled'"),
        (["--admin-timeout-s", "0"], r"--admin-timeout-s: expected a positive number, got 0"),
    ],
    ids=["no-request-file", "bad-run-type", "zero-timeout"],
)
def test_bad_arguments_name_the_argument(tmp_path, args, message):
    full = args if args[0] == "--pipeline" else argv(write_request(tmp_path, REQUEST), *args)
    with pytest.raises(JobConfigError, match=message):
        parse_config(full)


# --------------------------------------------------------------------------- cap_at_position


POSITION = {"orders": {0: 100, 1: 50}}


def test_ranges_below_the_position_are_kept_whole():
    ranges = (BackfillRange("orders", 0, 10, 100), BackfillRange("orders", 1, 0, 20))
    assert cap_at_position(ranges, POSITION) == (list(ranges), [])


def test_range_crossing_the_position_is_cut_there():
    kept, notes = cap_at_position((BackfillRange("orders", 0, 90, 150),), POSITION)
    assert kept == [BackfillRange("orders", 0, 90, 100)]
    assert notes == ["orders-0: [100, 150) is not ingested yet and is left to the next normal run"]


@pytest.mark.parametrize(
    ("r", "note"),
    [
        (BackfillRange("orders", 0, 100, 130), "orders-0: [100, 130) is not ingested yet"),
        (BackfillRange("orders", 1, 60, 70), "orders-1: [60, 70) is not ingested yet"),
        (BackfillRange("orders", 2, 0, 10), "orders-2: [0, 10) is not ingested yet"),
        (BackfillRange("payments", 0, 5, 9), "payments-0: [5, 9) is not ingested yet"),
    ],
    ids=["at-position", "past-position", "unknown-partition", "unknown-topic"],
)
def test_range_the_table_has_not_passed_is_dropped_with_a_note(r, note):
    kept, notes = cap_at_position((r,), POSITION)
    assert kept == []
    assert notes == [f"{note} and is left to the next normal run"]


def test_cap_keeps_the_order_and_resets_counts():
    ranges = (BackfillRange("orders", 1, 40, 60, 20, 5), BackfillRange("payments", 0, 0, 5),
              BackfillRange("orders", 0, 0, 10, 10, 10))  # fmt: skip
    kept, notes = cap_at_position(ranges, POSITION)
    assert kept == [BackfillRange("orders", 1, 40, 50), BackfillRange("orders", 0, 0, 10)]
    assert notes == ["orders-1: [50, 60) is not ingested yet and is left to the next normal run",
                     "payments-0: [0, 5) is not ingested yet and is left to the next normal run"]  # fmt: skip


def test_the_merge_is_retried_on_every_delta_commit_conflict_and_nothing_else():
    import delta.exceptions
    from delta.exceptions import captured
    from pyspark.errors.exceptions.captured import AnalysisException

    # What py4j raises for Delta's io.delta.exceptions.* (these classes do not inherit from one another).
    raised = [getattr(captured, name) for name in delta.exceptions.__all__]
    assert len(raised) == 8 and all(issubclass(cls, merge_conflicts()) for cls in raised)
    # Any other failure of the MERGE ends the job, whatever its text says (the old rule matched "Concurrent").
    assert not issubclass(AnalysisException, merge_conflicts())
