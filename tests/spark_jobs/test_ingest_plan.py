"""Unit tests of spark_jobs/ingest_plan.py: configuration, checkpoint choice and batch ranges.

Pure logic: checkpoints are given as :class:`CheckpointState` values and the
table's progress as a :class:`BronzeCommit`, the way the job builds them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from include.contract.offsets import BronzeCommit, Gap, OffsetError, OffsetRange
from include.readers.spark_checkpoint import CheckpointState
from spark_jobs.ingest_plan import (
    CONSUMER_DEFAULTS,
    RUN_TYPES,
    CheckpointPlan,
    IngestConfig,
    JobConfigError,
    batch_ranges,
    checkpoint_matches_table,
    parse_config,
    plan_checkpoint,
    resume_offsets,
    stats_from_files,
)

# --------------------------------------------------------------------------- parse_config

REQUIRED = [
    "--pipeline", "orders",
    "--bootstrap-servers", "broker-1:9092,broker-2:9092",
    "--bronze-path", "/lake/bronze/orders",
    "--checkpoint-root", "/lake/_checkpoints/orders",
]  # fmt: skip


def _args(*extra: str, topics: str | None = "orders.v1") -> list[str]:
    argv = list(REQUIRED)
    if topics is not None:
        argv += ["--topics", topics]
    return argv + list(extra)


def _replace(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def test_parse_config_minimal_defaults():
    cfg = parse_config(_args())
    assert cfg == IngestConfig(
        pipeline="orders",
        bootstrap_servers="broker-1:9092,broker-2:9092",
        bronze_path="/lake/bronze/orders",
        checkpoint_root="/lake/_checkpoints/orders",
        topics=("orders.v1",),
        topic_pattern=None,
        starting_offsets="earliest",
        max_offsets_per_trigger=None,
        run_id="manual",
        run_type="manual",
        summary_path=None,
        admin_timeout_s=30.0,
        kafka_options={},
    )


def test_parse_config_all_options(tmp_path):
    opts = tmp_path / "kafka.json"
    opts.write_text(json.dumps({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "retries": 5}))
    cfg = parse_config(_args(
        "--starting-offsets", "latest",
        "--max-offsets-per-trigger", "5000",
        "--run-id", "scheduled__2024-05-01T00:00:00+00:00",
        "--run-type", "scheduled",
        "--summary-path", "/tmp/summary.json",
        "--admin-timeout-s", "2.5",
        "--kafka-options-file", str(opts),
    ))  # fmt: skip
    assert cfg.starting_offsets == "latest"
    assert cfg.max_offsets_per_trigger == 5000
    assert cfg.run_id == "scheduled__2024-05-01T00:00:00+00:00"
    assert cfg.run_type == "scheduled"
    assert cfg.summary_path == "/tmp/summary.json"
    assert cfg.admin_timeout_s == 2.5
    assert cfg.kafka_options == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "retries": "5"}


def test_parse_config_topic_list_is_split_and_trimmed():
    cfg = parse_config(_args(topics=" a , b,,c ,"))
    assert cfg.topics == ("a", "b", "c")
    assert cfg.topic_pattern is None


def test_parse_config_topic_pattern():
    cfg = parse_config(_args("--topic-pattern", r"orders\..*", topics=None))
    assert cfg.topics == ()
    assert cfg.topic_pattern == r"orders\..*"


@pytest.mark.parametrize(
    "missing",
    ["--pipeline", "--bootstrap-servers", "--bronze-path", "--checkpoint-root"],
)
def test_parse_config_required_argument_missing(missing):
    argv = _args()
    i = argv.index(missing)
    del argv[i : i + 2]
    with pytest.raises(JobConfigError) as exc:
        parse_config(argv)
    assert "required" in str(exc.value)
    assert missing in str(exc.value)


def test_parse_config_nothing_given_names_all_required():
    with pytest.raises(JobConfigError) as exc:
        parse_config([])
    for name in ("--pipeline", "--bootstrap-servers", "--bronze-path", "--checkpoint-root"):
        assert name in str(exc.value)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(_args(topics=None), id="neither"),
        pytest.param(_args(topics=" , ,"), id="blank-topic-list"),
        pytest.param(_args("--topic-pattern", "orders.*"), id="both"),
    ],
)
def test_parse_config_exactly_one_of_topics_or_pattern(argv):
    with pytest.raises(JobConfigError) as exc:
        parse_config(argv)
    assert "--topics" in str(exc.value)
    assert "--topic-pattern" in str(exc.value)


@pytest.mark.parametrize(
    ("value", "shown"),
    [("abc", "'abc'"), ("0", "got 0"), ("-3", "got -3"), ("1.5", "'1.5'"), ("", "''")],
)
def test_parse_config_max_offsets_per_trigger_must_be_positive_int(value, shown):
    with pytest.raises(JobConfigError) as exc:
        parse_config(_args("--max-offsets-per-trigger", value))
    msg = str(exc.value)
    assert "--max-offsets-per-trigger" in msg
    assert "positive integer" in msg
    assert shown in msg


@pytest.mark.parametrize(("value", "shown"), [("soon", "'soon'"), ("0", "got 0.0"), ("-1", "got -1.0")])
def test_parse_config_admin_timeout_must_be_positive_number(value, shown):
    with pytest.raises(JobConfigError) as exc:
        parse_config(_args("--admin-timeout-s", value))
    assert "--admin-timeout-s" in str(exc.value)
    assert shown in str(exc.value)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_parse_config_admin_timeout_rejects_non_finite(value):
    with pytest.raises(JobConfigError, match="--admin-timeout-s"):
        parse_config(_args("--admin-timeout-s", value))


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--starting-offsets", "beginning"), ("--run-type", "nightly")],
)
def test_parse_config_choices(flag, value):
    with pytest.raises(JobConfigError) as exc:
        parse_config(_args(flag, value))
    assert flag in str(exc.value)
    assert value in str(exc.value)


@pytest.mark.parametrize("run_type", RUN_TYPES)
def test_parse_config_accepts_every_run_type(run_type):
    assert parse_config(_args("--run-type", run_type)).run_type == run_type


@pytest.mark.parametrize(
    "name",
    ["orders:v2", "my pipeline", "_orders", ".hidden", "a/b", "", "ordèrs"],
)
def test_parse_config_bad_pipeline_name(name):
    with pytest.raises(JobConfigError) as exc:
        parse_config(_replace(_args(), "--pipeline", name))
    assert "--pipeline" in str(exc.value)
    assert repr(name) in str(exc.value)


@pytest.mark.parametrize("name", ["orders", "Orders_2", "orders.v1-eu", "0rders"])
def test_parse_config_good_pipeline_name(name):
    assert parse_config(_replace(_args(), "--pipeline", name)).pipeline == name


def test_parse_config_pipeline_name_with_trailing_newline_is_rejected():
    with pytest.raises(JobConfigError, match="--pipeline"):
        parse_config(_replace(_args(), "--pipeline", "orders\n"))


@pytest.mark.parametrize("pattern", ["orders[", "(unclosed", "*orders"])
def test_parse_config_bad_topic_pattern(pattern):
    with pytest.raises(JobConfigError) as exc:
        parse_config(_args("--topic-pattern", pattern, topics=None))
    assert "--topic-pattern" in str(exc.value)
    assert "not a valid regex" in str(exc.value)
    assert repr(pattern) in str(exc.value)


def test_parse_config_kafka_options_file_missing(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(JobConfigError) as exc:
        parse_config(_args("--kafka-options-file", str(missing)))
    assert "--kafka-options-file" in str(exc.value)
    assert str(missing) in str(exc.value)


def test_parse_config_kafka_options_file_not_json(tmp_path):
    f = tmp_path / "opts.json"
    f.write_text("security.protocol=SSL\n")
    with pytest.raises(JobConfigError) as exc:
        parse_config(_args("--kafka-options-file", str(f)))
    assert "--kafka-options-file" in str(exc.value)
    assert str(f) in str(exc.value)


@pytest.mark.parametrize("content", ['["security.protocol", "SSL"]', '"SSL"', "42", "null"])
def test_parse_config_kafka_options_file_not_an_object(tmp_path, content):
    f = tmp_path / "opts.json"
    f.write_text(content)
    with pytest.raises(JobConfigError) as exc:
        parse_config(_args("--kafka-options-file", str(f)))
    assert "--kafka-options-file" in str(exc.value)
    assert "JSON object" in str(exc.value)


def test_parse_config_kafka_options_file_empty_object(tmp_path):
    f = tmp_path / "opts.json"
    f.write_text("{}")
    assert parse_config(_args("--kafka-options-file", str(f))).kafka_options == {}


def test_job_config_error_is_a_value_error():
    assert issubclass(JobConfigError, ValueError)


# --------------------------------------------------------------------------- source_options


def test_source_options_with_topics(tmp_path):
    f = tmp_path / "opts.json"
    f.write_text(json.dumps({"security.protocol": "SSL", "ssl.truststore.location": "/etc/ts.jks"}))
    cfg = parse_config(
        _args("--max-offsets-per-trigger", "1000", "--kafka-options-file", str(f), topics="a,b")
    )
    assert cfg.source_options() == {
        "kafka.max.poll.records": "10000",
        "kafka.max.partition.fetch.bytes": "8388608",
        "kafka.receive.buffer.bytes": "1048576",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.location": "/etc/ts.jks",
        "kafka.bootstrap.servers": "broker-1:9092,broker-2:9092",
        "kafka.isolation.level": "read_committed",
        "includeHeaders": "true",
        "failOnDataLoss": "true",
        "subscribe": "a,b",
        "maxOffsetsPerTrigger": "1000",
    }


def test_source_options_with_pattern_and_no_limit():
    opts = parse_config(_args("--topic-pattern", "orders.*", topics=None)).source_options()
    assert opts["subscribePattern"] == "orders.*"
    assert "subscribe" not in opts
    assert "maxOffsetsPerTrigger" not in opts
    assert "startingOffsets" not in opts
    assert opts["kafka.isolation.level"] == "read_committed"
    assert opts["failOnDataLoss"] == "true"
    assert opts["includeHeaders"] == "true"


def test_source_options_safety_settings_cannot_be_overridden_by_kafka_options(tmp_path):
    f = tmp_path / "opts.json"
    f.write_text(json.dumps({
        "isolation.level": "read_uncommitted",
        "bootstrap.servers": "elsewhere:9092",
        "security.protocol": "SSL",
    }))  # fmt: skip
    opts = parse_config(_args("--kafka-options-file", str(f))).source_options()
    assert opts["kafka.isolation.level"] == "read_committed"
    assert opts["kafka.bootstrap.servers"] == "broker-1:9092,broker-2:9092"
    assert opts["kafka.security.protocol"] == "SSL"


def test_the_pipelines_kafka_options_override_the_consumer_defaults(tmp_path):
    f = tmp_path / "opts.json"
    f.write_text(json.dumps({"max.poll.records": "500", "fetch.min.bytes": "1"}))
    opts = parse_config(_args("--kafka-options-file", str(f))).source_options()
    assert opts["kafka.max.poll.records"] == "500"
    assert opts["kafka.fetch.min.bytes"] == "1"
    assert opts["kafka.receive.buffer.bytes"] == CONSUMER_DEFAULTS["receive.buffer.bytes"]
    without = parse_config(_args()).source_options()
    assert {k: without[f"kafka.{k}"] for k in CONSUMER_DEFAULTS} == CONSUMER_DEFAULTS


def test_source_options_all_values_are_strings(tmp_path):
    f = tmp_path / "opts.json"
    f.write_text(json.dumps({"request.timeout.ms": 20000}))
    opts = parse_config(
        _args("--max-offsets-per-trigger", "7", "--kafka-options-file", str(f))
    ).source_options()
    assert opts["kafka.request.timeout.ms"] == "20000"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in opts.items())


# --------------------------------------------------------------------------- plan_checkpoint helpers

ROOT = Path("/lake/_checkpoints/orders")


def state(
    epoch: int = 1,
    *,
    initial=None,
    last: int | None = None,
    committed=None,
    pending_batch: int | None = None,
    pending=None,
) -> CheckpointState:
    return CheckpointState(
        path=ROOT / f"epoch={epoch}",
        initial=initial,
        last_committed_batch=last,
        committed=committed,
        pending_batch=pending_batch,
        pending=pending,
    )


def table(next_offsets, *, epoch: int = 1, batch_id: int = 3) -> BronzeCommit:
    return BronzeCommit(
        pipeline="orders",
        run_id="r1",
        run_type="scheduled",
        epoch=epoch,
        batch_id=batch_id,
        ranges=(),
        next_offsets=next_offsets,
    )


PARTS = {"t": [0, 1]}


# --------------------------------------------------------------------------- plan_checkpoint


def test_first_run():
    plan = plan_checkpoint(table=None, checkpoints={}, partitions=PARTS, starting_offsets="earliest")
    assert plan == CheckpointPlan(
        epoch=1, starting_offsets="earliest", rebuilt_reason=None, previous_epoch=None
    )


def test_first_run_keeps_configured_latest():
    plan = plan_checkpoint(table=None, checkpoints={}, partitions=PARTS, starting_offsets="latest")
    assert plan == CheckpointPlan(1, "latest", None, None)


def test_first_run_retried_before_any_commit_resumes_same_epoch():
    # Killed during the very first batch: neither Spark nor Delta committed anything.
    ck = state(1, initial={"t": {0: 0, 1: 0}}, pending_batch=0, pending={"t": {0: 5, 1: 5}})
    plan = plan_checkpoint(table=None, checkpoints={1: ck}, partitions=PARTS, starting_offsets="earliest")
    assert plan == CheckpointPlan(1, "earliest", None, None)


def test_resume_matching_checkpoint_keeps_epoch():
    ck = state(2, initial={"t": {0: 0, 1: 0}}, last=3, committed={"t": {0: 10, 1: 20}})
    plan = plan_checkpoint(
        table=table({"t": {0: 10, 1: 20}}, epoch=2, batch_id=3),
        checkpoints={1: state(1, initial={"t": {0: 0, 1: 0}}), 2: ck},
        partitions=PARTS,
        starting_offsets="earliest",
    )
    assert plan == CheckpointPlan(
        epoch=2, starting_offsets="earliest", rebuilt_reason=None, previous_epoch=None
    )


def test_resume_checkpoint_started_from_the_table():
    # A rebuilt checkpoint that has not committed a batch yet: its initial offsets are the table's.
    ck = state(2, initial={"t": {0: 10, 1: 20}})
    plan = plan_checkpoint(
        table=table({"t": {0: 10, 1: 20}}, epoch=1, batch_id=7),
        checkpoints={2: ck},
        partitions=PARTS,
        starting_offsets="earliest",
    )
    assert plan.epoch == 2
    assert plan.rebuilt_reason is None


def test_checkpoint_deleted_with_table_progress_starts_new_epoch_at_table_offsets():
    plan = plan_checkpoint(
        table=table({"t": {0: 10, 1: 20}}, epoch=3, batch_id=5),
        checkpoints={},
        partitions={"t": [0, 1, 2], "u": [0]},
        starting_offsets="earliest",
    )
    assert plan.epoch == 4
    assert plan.previous_epoch is None
    assert plan.rebuilt_reason == "no checkpoint found"
    assert json.loads(plan.starting_offsets) == {"t": {"0": 10, "1": 20, "2": -2}, "u": {"0": -2}}


def test_checkpoint_folder_empty_with_table_progress():
    plan = plan_checkpoint(
        table=table({"t": {0: 10, 1: 20}}, epoch=1),
        checkpoints={1: None},
        partitions=PARTS,
        starting_offsets="latest",
    )
    assert plan.epoch == 2
    assert plan.previous_epoch == 1
    assert plan.rebuilt_reason == "checkpoint of epoch 1 was never started or is empty"
    assert json.loads(plan.starting_offsets) == {"t": {"0": 10, "1": 20}}


def test_a_damaged_checkpoint_heals_with_a_new_epoch_at_the_table_naming_the_file():
    plan = plan_checkpoint(
        table=table({"t": {0: 10, 1: 20}}, epoch=1),
        checkpoints={1: None},
        partitions=PARTS,
        starting_offsets="earliest",
        damaged={1: "/c/epoch=1/offsets/3: line 2 is not JSON"},
    )
    assert (plan.epoch, plan.previous_epoch) == (2, 1)
    assert plan.rebuilt_reason == "checkpoint of epoch 1 is damaged: /c/epoch=1/offsets/3: line 2 is not JSON"
    assert json.loads(plan.starting_offsets) == {"t": {"0": 10, "1": 20}}


def test_checkpoint_folder_empty_without_table_progress_uses_configured_offsets():
    plan = plan_checkpoint(table=None, checkpoints={1: None}, partitions=PARTS, starting_offsets="latest")
    assert plan.epoch == 2
    assert plan.starting_offsets == "latest"
    assert plan.previous_epoch == 1
    assert "epoch 1" in plan.rebuilt_reason


def test_crash_after_delta_commit_before_spark_commit_resumes_same_epoch():
    # Batch 4 was written to Delta (table says batch 4) but commits/4 was never written.
    ck = state(
        2,
        initial={"t": {0: 0, 1: 0}},
        last=3,
        committed={"t": {0: 10, 1: 20}},
        pending_batch=4,
        pending={"t": {0: 15, 1: 22}},
    )
    plan = plan_checkpoint(
        table=table({"t": {0: 15, 1: 22}}, epoch=2, batch_id=4),
        checkpoints={2: ck},
        partitions=PARTS,
        starting_offsets="earliest",
    )
    assert plan == CheckpointPlan(
        epoch=2, starting_offsets="earliest", rebuilt_reason=None, previous_epoch=None
    )


def test_crash_after_first_delta_commit_resumes_same_epoch():
    ck = state(1, initial={"t": {0: 0, 1: 0}}, pending_batch=0, pending={"t": {0: 5, 1: 6}})
    plan = plan_checkpoint(
        table=table({"t": {0: 5, 1: 6}}, epoch=1, batch_id=0),
        checkpoints={1: ck},
        partitions=PARTS,
        starting_offsets="earliest",
    )
    assert plan == CheckpointPlan(1, "earliest", None, None)


def test_pending_batch_with_other_id_than_table_is_a_mismatch():
    ck = state(2, last=3, committed={"t": {0: 10, 1: 20}}, pending_batch=4, pending={"t": {0: 15, 1: 22}})
    plan = plan_checkpoint(
        table=table({"t": {0: 15, 1: 22}}, epoch=2, batch_id=5),
        checkpoints={2: ck},
        partitions=PARTS,
        starting_offsets="earliest",
    )
    assert plan.epoch == 3
    assert plan.rebuilt_reason is not None
    assert json.loads(plan.starting_offsets) == {"t": {"0": 15, "1": 22}}


def test_pending_batch_with_other_offsets_than_table_is_a_mismatch():
    ck = state(2, last=3, committed={"t": {0: 10, 1: 20}}, pending_batch=4, pending={"t": {0: 15, 1: 23}})
    plan = plan_checkpoint(
        table=table({"t": {0: 15, 1: 22}}, epoch=2, batch_id=4),
        checkpoints={2: ck},
        partitions=PARTS,
        starting_offsets="earliest",
    )
    assert plan.epoch == 3
    assert plan.previous_epoch == 2
    assert "t-0 table 15 vs checkpoint 10" in plan.rebuilt_reason


def test_checkpoint_not_matching_table_starts_new_epoch_and_names_offsets():
    ck = state(2, initial={"t": {0: 0, 1: 0}}, last=3, committed={"t": {0: 7, 1: 20}})
    plan = plan_checkpoint(
        table=table({"t": {0: 10, 1: 20}}, epoch=2, batch_id=6),
        checkpoints={1: state(1), 2: ck},
        partitions=PARTS,
        starting_offsets="earliest",
    )
    assert plan.epoch == 3
    assert plan.previous_epoch == 2
    assert json.loads(plan.starting_offsets) == {"t": {"0": 10, "1": 20}}
    reason = plan.rebuilt_reason
    assert str(ROOT / "epoch=2") in reason
    assert "does not match the table" in reason
    assert "t-0 table 10 vs checkpoint 7" in reason
    assert "t-1" not in reason  # partition 1 matches


def test_mismatch_reason_lists_partitions_missing_on_either_side():
    ck = state(1, last=0, committed={"t": {0: 10, 2: 4}})
    reason = checkpoint_matches_table(ck, table({"t": {0: 10, 1: 8}}, epoch=1))
    assert reason == (
        f"checkpoint {ROOT / 'epoch=1'} does not match the table: "
        "t-1 table 8 vs checkpoint None; t-2 table none vs checkpoint 4"
    )


def test_mismatch_reason_is_capped_at_ten_partitions():
    ck = state(1, last=0, committed={"t": {p: 0 for p in range(30)}})
    reason = checkpoint_matches_table(ck, table({"t": {p: 1 for p in range(30)}}, epoch=1))
    assert reason.count(" vs checkpoint ") == 10
    assert "t-9 table 1 vs checkpoint 0" in reason
    assert "t-10 " not in reason


def test_checkpoint_without_any_offsets_does_not_match_table_progress():
    ck = state(1)  # metadata only
    reason = checkpoint_matches_table(ck, table({"t": {0: 4}}))
    assert "t-0 table 4 vs checkpoint None" in reason


def test_checkpoint_with_commits_but_no_table_progress_is_rebuilt():
    ck = state(1, initial={"t": {0: 0, 1: 0}}, last=2, committed={"t": {0: 9, 1: 9}})
    plan = plan_checkpoint(table=None, checkpoints={1: ck}, partitions=PARTS, starting_offsets="earliest")
    assert plan == CheckpointPlan(
        epoch=2,
        starting_offsets="earliest",
        rebuilt_reason=(
            f"checkpoint {ROOT / 'epoch=1'} has committed batch 2 but the bronze table records no progress"
        ),
        previous_epoch=1,
    )


def test_table_epoch_newer_than_newest_checkpoint():
    # The checkpoint of epoch 3 wrote the table's last commit and was deleted; epoch 2's is
    # still there and, by coincidence, even stands at the same offsets: it must not be reused,
    # or its txnAppId (epoch 2) would not match the table's history.
    ck = state(2, initial={"t": {0: 0, 1: 0}}, last=1, committed={"t": {0: 10, 1: 20}})
    plan = plan_checkpoint(
        table=table({"t": {0: 10, 1: 20}}, epoch=3, batch_id=0),
        checkpoints={1: state(1), 2: ck},
        partitions=PARTS,
        starting_offsets="earliest",
    )
    assert plan.epoch == 4
    assert plan.previous_epoch == 2
    assert plan.rebuilt_reason == "checkpoint of epoch 3 that wrote the table's last commit is gone"
    assert json.loads(plan.starting_offsets) == {"t": {"0": 10, "1": 20}}


def test_new_epoch_is_above_every_older_epoch_folder():
    # Even an old mismatching epoch number is never reused.
    ck = state(5, last=0, committed={"t": {0: 1, 1: 1}})
    plan = plan_checkpoint(
        table=table({"t": {0: 10, 1: 20}}, epoch=2),
        checkpoints={3: None, 5: ck, 4: None},
        partitions=PARTS,
        starting_offsets="earliest",
    )
    assert plan.epoch == 6
    assert plan.previous_epoch == 5


def test_matching_checkpoint_ignores_partition_order_and_new_kafka_partitions():
    # Partitions Kafka gained since are Spark's business; only recorded positions must match.
    ck = state(1, last=0, committed={"t": {1: 20, 0: 10}})
    plan = plan_checkpoint(
        table=table({"t": {0: 10, 1: 20}}),
        checkpoints={1: ck},
        partitions={"t": [0, 1, 2, 3]},
        starting_offsets="earliest",
    )
    assert plan == CheckpointPlan(1, "earliest", None, None)


def test_checkpoint_matches_table_none_when_equal():
    ck = state(1, last=0, committed={"t": {0: 10}})
    assert checkpoint_matches_table(ck, table({"t": {0: 10}})) is None
    assert checkpoint_matches_table(state(1, initial={"t": {0: 0}}), None) is None


# --------------------------------------------------------------------------- resume_offsets


def test_resume_offsets_lists_every_kafka_partition():
    out = resume_offsets({"t": {0: 10, 1: 20}}, {"t": [2, 0, 1], "new": [1, 0]})
    assert out == {"new": {"0": -2, "1": -2}, "t": {"0": 10, "1": 20, "2": -2}}
    assert list(out["t"]) == ["0", "1", "2"]


def test_resume_offsets_is_valid_spark_json():
    text = json.dumps(resume_offsets({"t": {0: 5}}, {"t": [0, 1]}), separators=(",", ":"))
    assert text == '{"t":{"0":5,"1":-2}}'


def test_resume_offsets_partition_gone_raises():
    with pytest.raises(OffsetError) as exc:
        resume_offsets({"t": {0: 10, 1: 20, 2: 30}, "u": {0: 1}}, {"t": [0], "u": [0]})
    msg = str(exc.value)
    assert "t-1, t-2" in msg
    assert "no longer exist in Kafka" in msg
    assert "u-0" not in msg


def test_plan_checkpoint_partition_gone_raises():
    with pytest.raises(OffsetError, match="t-1"):
        plan_checkpoint(
            table=table({"t": {0: 10, 1: 20}}),
            checkpoints={},
            partitions={"t": [0]},
            starting_offsets="earliest",
        )


# --------------------------------------------------------------------------- batch_ranges


def test_batch_ranges_dense():
    ranges = batch_ranges(
        start={"t": {0: 10, 1: 20}},
        end={"t": {0: 15, 1: 23}},
        stats={("t", 0): (5, 10, 14), ("t", 1): (3, 20, 22)},
        batch_id=4,
    )
    assert ranges == [OffsetRange("t", 0, 10, 15, 5), OffsetRange("t", 1, 20, 23, 3)]


def test_batch_ranges_sorted_by_topic_and_partition():
    ranges = batch_ranges(
        start={"b": {0: 0}, "a": {1: 0, 0: 0}},
        end={"b": {0: 1}, "a": {1: 1, 0: 1}},
        stats={("b", 0): (1, 0, 0), ("a", 1): (1, 0, 0), ("a", 0): (1, 0, 0)},
        batch_id=0,
    )
    assert [r.topic_partition for r in ranges] == [("a", 0), ("a", 1), ("b", 0)]


def test_batch_ranges_with_holes():
    # Transaction markers / aborted / compacted offsets: fewer rows than offsets.
    ranges = batch_ranges(
        start={"t": {0: 10}},
        end={"t": {0: 20}},
        stats={("t", 0): (6, 10, 18)},
        batch_id=1,
    )
    assert ranges == [OffsetRange("t", 0, 10, 20, 6)]
    assert ranges[0].holes == 4


def test_batch_ranges_hole_only_range():
    # Only a commit marker (or only aborted records) between 10 and 12: no rows, still a range.
    ranges = batch_ranges(start={"t": {0: 10}}, end={"t": {0: 12}}, stats={}, batch_id=2)
    assert ranges == [OffsetRange("t", 0, 10, 12, 0)]


def test_batch_ranges_partition_without_progress_has_no_range():
    ranges = batch_ranges(
        start={"t": {0: 10, 1: 20}},
        end={"t": {0: 12, 1: 20}},
        stats={("t", 0): (2, 10, 11)},
        batch_id=3,
    )
    assert ranges == [OffsetRange("t", 0, 10, 12, 2)]


def test_batch_ranges_nothing_new():
    assert batch_ranges(start={"t": {0: 10}}, end={"t": {0: 10}}, stats={}, batch_id=3) == []


def test_batch_ranges_partition_appearing_mid_run_starts_at_its_min_offset():
    ranges = batch_ranges(
        start={"t": {0: 10}},
        end={"t": {0: 10, 1: 8}},
        stats={("t", 1): (5, 3, 7)},
        batch_id=5,
    )
    assert ranges == [OffsetRange("t", 1, 3, 8, 5)]


def test_batch_ranges_partition_appearing_mid_run_without_records_has_no_range():
    ranges = batch_ranges(start={"t": {0: 10}}, end={"t": {0: 10, 1: 4}}, stats={}, batch_id=5)
    assert ranges == []


def test_batch_ranges_without_start_takes_min_offsets():
    ranges = batch_ranges(start=None, end={"t": {0: 6}}, stats={("t", 0): (4, 2, 5)}, batch_id=0)
    assert ranges == [OffsetRange("t", 0, 2, 6, 4)]


@pytest.mark.parametrize(
    ("low", "high"),
    [
        pytest.param(9, 14, id="below-start"),
        pytest.param(10, 15, id="at-end"),
        pytest.param(3, 30, id="both"),
    ],
)
def test_batch_ranges_records_outside_range_raise(low, high):
    with pytest.raises(OffsetError) as exc:
        batch_ranges(start={"t": {0: 10}}, end={"t": {0: 15}}, stats={("t", 0): (5, low, high)}, batch_id=7)
    msg = str(exc.value)
    assert "t-0" in msg
    assert "batch 7" in msg
    assert f"{low}..{high}" in msg
    assert "[10, 15)" in msg


def test_batch_ranges_records_for_partition_without_progress_raise():
    with pytest.raises(
        OffsetError, match=r"t-0: batch 1 read offsets 10\.\.10, outside its range \[10, 10\)"
    ):
        batch_ranges(start={"t": {0: 10}}, end={"t": {0: 10}}, stats={("t", 0): (1, 10, 10)}, batch_id=1)


def test_batch_ranges_more_rows_than_offsets_raise():
    with pytest.raises(OffsetError, match="6 rows cannot come from range"):
        batch_ranges(start={"t": {0: 10}}, end={"t": {0: 15}}, stats={("t", 0): (6, 10, 14)}, batch_id=1)


def test_batch_ranges_end_before_start_raises():
    with pytest.raises(OffsetError) as exc:
        batch_ranges(start={"t": {2: 50}}, end={"t": {2: 3}}, stats={}, batch_id=9)
    msg = str(exc.value)
    assert "t-2" in msg
    assert "batch 9 ends at 3, before its start 50" in msg
    assert "recreated" in msg


def test_batch_ranges_end_before_start_with_records_raises():
    with pytest.raises(OffsetError, match="t-2: batch 9"):
        batch_ranges(start={"t": {2: 50}}, end={"t": {2: 3}}, stats={("t", 2): (2, 0, 1)}, batch_id=9)


def test_batch_ranges_records_from_partition_missing_in_end_offsets_raise():
    with pytest.raises(OffsetError) as exc:
        batch_ranges(
            start={"t": {0: 0}},
            end={"t": {0: 2}},
            stats={("t", 0): (2, 0, 1), ("u", 3): (1, 7, 7)},
            batch_id=2,
        )
    assert "batch 2" in str(exc.value)
    assert "('u', 3)" in str(exc.value)


# --------------------------------------------------------------------------- accepted data-loss gaps


def test_gaps_start_a_new_epoch_past_the_gap_even_with_a_matching_checkpoint():
    ck = state(2, initial={"t": {0: 0, 1: 0}}, last=3, committed={"t": {0: 10, 1: 20}})
    gap = Gap("t", 1, 20, 35, "retention")
    plan = plan_checkpoint(
        table=table({"t": {0: 10, 1: 20}}, epoch=2, batch_id=3),
        checkpoints={2: ck},
        partitions=PARTS,
        starting_offsets="earliest",
        gaps=(gap,),
    )
    assert plan.epoch == 3
    assert plan.previous_epoch == 2
    assert json.loads(plan.starting_offsets) == {"t": {"0": 10, "1": 35}}
    assert "t-1 [20, 35)" in plan.rebuilt_reason


def test_gap_not_starting_at_the_table_position_is_refused():
    with pytest.raises(OffsetError, match=r"t-1: gap \[25, 35\) does not start at the table's next offset 20"):
        plan_checkpoint(
            table=table({"t": {0: 10, 1: 20}}),
            checkpoints={},
            partitions=PARTS,
            starting_offsets="earliest",
            gaps=(Gap("t", 1, 25, 35),),
        )


def test_gaps_without_a_table_are_refused():
    with pytest.raises(OffsetError, match="need a bronze table"):
        plan_checkpoint(table=None, checkpoints={}, partitions=PARTS, starting_offsets="earliest",
                        gaps=(Gap("t", 0, 0, 5),))  # fmt: skip


def test_parse_config_preflight_file(tmp_path):
    path = tmp_path / "preflight.json"
    path.write_text(json.dumps({
        "topic_ids": {"orders.v1": "abc"},
        "accepted_gaps": [{"topic": "orders.v1", "partition": 2, "from": 5, "until": 9, "reason": "retention"}],
    }))  # fmt: skip
    cfg = parse_config(_args("--preflight-file", str(path)))
    assert cfg.topic_ids == {"orders.v1": "abc"}
    assert cfg.accepted_gaps == (Gap("orders.v1", 2, 5, 9, "retention"),)


@pytest.mark.parametrize("content", ['[1]', '{"accepted_gaps": [{"topic": "t"}]}', "not json"])
def test_parse_config_bad_preflight_file_names_the_file(tmp_path, content):
    path = tmp_path / "preflight.json"
    path.write_text(content)
    with pytest.raises(JobConfigError, match=r"--preflight-file .*preflight\.json"):
        parse_config(_args("--preflight-file", str(path)))


# --------------------------------------------------------------------------- ranges from the files' statistics


def _file_stats(rows: int, topic: tuple[str, str], partition: tuple[int, int], offset: tuple[int, int]) -> str:
    return json.dumps({
        "numRecords": rows,
        "minValues": {"topic": topic[0], "partition": partition[0], "offset": offset[0]},
        "maxValues": {"topic": topic[1], "partition": partition[1], "offset": offset[1]},
        "nullCount": {"topic": 0, "partition": 0, "offset": 0},
    })  # fmt: skip


def test_stats_from_files_sums_the_files_of_one_partition():
    files = [
        _file_stats(5, ("orders", "orders"), (0, 0), (10, 14)),
        _file_stats(3, ("orders", "orders"), (0, 0), (15, 19)),  # a hole at 16/17: 3 rows over 5 offsets
        _file_stats(2, ("payments", "payments"), (0, 0), (7, 8)),
    ]
    assert stats_from_files(files, {"orders", "payments"}) == {
        ("orders", 0): (8, 10, 19),
        ("payments", 0): (2, 7, 8),
    }


def test_stats_from_files_accepts_a_shortened_topic_when_only_one_topic_fits():
    long_topic = "a-very-long-topic-name-beyond-thirty-two-characters"
    # Delta keeps a prefix as the min and something above the value as the max.
    files = [_file_stats(4, (long_topic[:32], long_topic[:32] + "\U0010ffff"), (2, 2), (0, 3))]
    assert stats_from_files(files, {long_topic, "other"}) == {(long_topic, 2): (4, 0, 3)}


@pytest.mark.parametrize(
    ("stats", "topics"),
    [
        pytest.param([None], {"t"}, id="no statistics"),
        pytest.param([json.dumps({"numRecords": 3})], {"t"}, id="statistics without min/max"),
        pytest.param([_file_stats(4, ("t", "t"), (0, 1), (0, 9))], {"t"}, id="two partitions in one file"),
        pytest.param([_file_stats(4, ("a", "b"), (0, 0), (0, 9))], {"a", "b"}, id="two topics in one file"),
        pytest.param(
            [_file_stats(4, ("same-prefix", "same-prefix\U0010ffff"), (0, 0), (0, 9))],
            {"same-prefix-1", "same-prefix-2"}, id="a shortened topic two topics fit",
        ),
        pytest.param([_file_stats(4, ("x", "x"), (0, 0), (0, 9))], {"t"}, id="a topic the batch did not read"),
    ],
)
def test_stats_from_files_gives_up_when_a_file_is_not_one_partition(stats, topics):
    assert stats_from_files(stats, topics) is None


def test_stats_from_files_skips_empty_files():
    assert stats_from_files([json.dumps({"numRecords": 0, "minValues": {}, "maxValues": {}})], {"t"}) == {}
