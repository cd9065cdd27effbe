"""Unit tests of include/config/: loading, validation messages, derived paths, job args.

Bad files are written to ``tmp_path``; every rejection is checked for the
file, the field path and the "expected ..., got ..." part of the message.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from croniter import croniter

from include import settings
from include.config import (
    ClusterConfig,
    KafkaConfig,
    KubernetesConfig,
    LagConfig,
    MaintenanceConfig,
    PipelineConfig,
    PipelineConfigError,
    PipelineFile,
    SchemaField,
    TablesConfig,
    TablesSection,
    TransformSection,
    load_pipeline,
    load_pipelines,
    loader,
    pipeline,
    reference,
)
from include.config.route_match import MatchSection
from include.config.transform import RouteSection
from include.contract import jobs
from include.contract.transform_spec import DEFAULT_MAX_VALUE_BYTES, FieldSpec, TransformSpec
from spark_jobs import ingest_plan

EXAMPLE = settings.PROJECT_ROOT / "include" / "pipelines" / "demo_orders.yaml"
BASE: dict[str, Any] = {
    "kafka": {"connection_id": "kafka_default", "topics": ["orders"]},
    "schedule": "@hourly",
}


class _Delete:
    """Marks a key the case removes; its repr names the test case the same way in every process."""

    def __repr__(self) -> str:
        return "<deleted>"


DELETE = _Delete()


@pytest.fixture(autouse=True)
def _no_lakehouse_env(monkeypatch):
    monkeypatch.delenv(settings.LAKEHOUSE_ROOT_ENV, raising=False)


def _config(**changes: Any) -> dict[str, Any]:
    """BASE with ``changes`` applied; keys are dotted field paths, DELETE removes a key."""
    return _apply(copy.deepcopy(BASE), changes)


def _apply(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def _write(tmp_path: Path, data: Any, name: str = "orders.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def _error(path: Path) -> PipelineConfigError:
    with pytest.raises(PipelineConfigError) as info:
        load_pipeline(path)
    return info.value


def _set(field: str, value: Any) -> dict[str, Any]:
    return _config(**{field: value})


# --------------------------------------------------------------------------- the example file


def test_example_file_loads_with_its_declared_values():
    cfg = load_pipeline(EXAMPLE)
    lake = settings.VAR_DIR / "lakehouse"
    assert cfg == PipelineConfig(
        name="demo_orders",
        description="Order events from the demo shop, landed raw in bronze, current state per order in silver.",
        kafka=KafkaConfig(
            connection_id="kafka_default",
            topics=("demo.orders",),
            topic_pattern=None,
            starting_offsets="earliest",
            max_offsets_per_trigger=20000,
            options={"max.partition.fetch.bytes": "4194304"},
        ),
        tables=TablesConfig(
            lakehouse_root=str(lake),
            bronze_path=str(lake / "demo_orders" / "bronze"),
            checkpoint_root=str(lake / "demo_orders" / "_checkpoints" / "bronze"),
            ledger_path=str(lake / "demo_orders" / "_runs"),
            silver_path=str(lake / "demo_orders" / "silver"),
            quarantine_path=str(lake / "demo_orders" / "quarantine"),
            transform_checkpoint_root=str(lake / "demo_orders" / "_checkpoints" / "silver"),
            lock_path=str(lake / "demo_orders" / "_lock"),
        ),
        schedule="*/10 * * * *",
        source_path="include/pipelines/demo_orders.yaml",
        lag=LagConfig(min_records=1, max_wait_minutes=60.0),
        data_loss_policy="fail",
        cluster=ClusterConfig("local_standalone", 1, 1, "1g", None, local_max_records=10000),
        retries=2,
        tags=("demo", "kafka", "bronze", "silver"),
        transform=TransformSpec(
            fields=(
                FieldSpec("order_id", "string", required=True),
                FieldSpec("customer_id", "string", required=True),
                FieldSpec("amount", "decimal(10,2)", required=True, minimum=0),
                FieldSpec("currency", "string", allowed=("EUR", "USD", "GBP")),
                FieldSpec("status", "string", allowed=("created", "paid", "shipped")),
                FieldSpec("event_time", "timestamp", required=True),
            ),
            key=("order_id",),
            ordering="event_time",
            tombstones="delete",
            new_fields="add",
        ),
        maintenance=MaintenanceConfig(every_runs=50, daily_window=None, zorder_by={"silver": ("customer_id",)}),
    )


def test_every_shipped_pipeline_file_is_valid():
    configs, errors = load_pipelines(EXAMPLE.parent)
    assert errors == {}
    assert "demo_orders" in configs


def test_minimal_file_gets_documented_defaults(tmp_path):
    cfg = load_pipeline(_write(tmp_path, BASE, "orders.yaml"))
    assert cfg.name == "orders"
    assert cfg.description == ""
    assert cfg.kafka == KafkaConfig("kafka_default", ("orders",))
    assert cfg.kafka.starting_offsets == "earliest" and cfg.kafka.max_offsets_per_trigger is None
    assert cfg.lag == LagConfig(min_records=1, max_wait_minutes=60.0)
    assert cfg.data_loss_policy == "fail"
    assert cfg.cluster == ClusterConfig("local_standalone", 1, 1, "1g", None)
    assert cfg.retries == 2 and cfg.tags == ()
    assert cfg.transform is None
    assert cfg.source_path == str(tmp_path / "orders.yaml")


def test_config_is_frozen(tmp_path):
    cfg = load_pipeline(_write(tmp_path, BASE))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.kafka.topics = ("x",)  # type: ignore[misc]


def test_every_key_is_documented_in_its_field_description():
    # The models' Field descriptions are the configuration reference (and the JSON Schema's descriptions).
    sections = (PipelineFile, KafkaConfig, TablesSection, LagConfig, ClusterConfig, KubernetesConfig,
                TransformSection, RouteSection, MatchSection, SchemaField)  # fmt: skip
    for cls in sections:
        assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"
        missing = [name for name, f in cls.__pydantic_fields__.items() if not (f.description or "").strip()]
        assert missing == [], f"{cls.__name__} keys without a Field description: {missing}"
    # What a pipeline loads into holds the file's keys, plus where it came from and a routed transform's routes.
    loaded = {f.name for f in dataclasses.fields(PipelineConfig)}
    assert loaded == {*PipelineFile.__pydantic_fields__, "source_path", "routing"}
    assert {f.name for f in dataclasses.fields(TablesConfig)} == set(TablesSection.__pydantic_fields__)


def test_loading_imports_no_kafka_spark_or_airflow():
    code = (
        "import sys; import include.config as pc; "
        f"pc.load_pipeline({str(EXAMPLE)!r}); "
        "heavy = ('airflow', 'pyspark', 'confluent_kafka', 'deltalake', 'delta', 'spark_jobs', 'py4j'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=settings.PROJECT_ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- rejections

# (field path to set, bad value, field named in the error, fragment of "expected ...", fragment of "got ...")
BAD_VALUES = [
    ("kafka.max_offsets_per_trigger", 0, None, "a positive integer", "0 (int)"),
    ("kafka.max_offsets_per_trigger", -5, None, "a positive integer", "-5 (int)"),
    ("kafka.max_offsets_per_trigger", True, None, "a positive integer", "true (bool)"),
    ("kafka.max_offsets_per_trigger", 1.5, None, "a positive integer", "1.5 (float)"),
    ("kafka.max_offsets_per_trigger", "3", None, "a positive integer", "'3' (str); write the number"),
    ("kafka.max_offsets_per_trigger", [1], None, "a positive integer", "[1] (list)"),
    ("kafka.starting_offsets", "newest", None, "'earliest', 'latest'", "'newest' (str)"),
    ("kafka.starting_offsets", "EARLIEST", None, "'earliest', 'latest'", "'EARLIEST' (str)"),
    ("kafka.starting_offsets", None, None, "'earliest', 'latest'", "got null"),
    ("kafka.starting_offsets", 1, None, "'earliest', 'latest'", "1 (int)"),
    ("kafka.connection_id", DELETE, None, "Airflow Kafka connection", "nothing (the key is missing)"),
    ("kafka.connection_id", "", None, "Airflow Kafka connection", "'' (str)"),
    ("kafka.connection_id", 5, None, "Airflow Kafka connection", "5 (int)"),
    ("kafka.connection_id", "has space", None, "at most 250 characters", "'has space' (str)"),
    ("kafka.connection_id", "b1:9092,b2:9092", None, "Airflow Kafka connection", "looks like broker"),
    ("kafka.topics", "orders", None, "a non-empty list of topic names", "'orders' (str); write [orders]"),
    ("kafka.topics", [], None, "a non-empty list of topic names", "[] (list)"),
    ("kafka.topics", {"a": 1}, None, "a non-empty list of topic names", "(dict)"),
    ("kafka.topics", ["ok", "bad topic"], "kafka.topics[1]", "a Kafka topic name", "'bad topic' (str)"),
    ("kafka.topics", ["a" * 250], "kafka.topics[0]", "at most 249 characters", "(str)"),
    ("kafka.topics", [".."], "kafka.topics[0]", "a Kafka topic name", "'..' (str)"),
    ("kafka.topics", [3], "kafka.topics[0]", "a Kafka topic name", "3 (int)"),
    ("kafka.topics", ["a,b"], "kafka.topics[0]", "a Kafka topic name", "'a,b' (str)"),
    ("kafka.topics", ["a", "a"], "kafka.topics[1]", "each topic once", "'a' (str) a second time"),
    ("kafka.options", "x", None, "a mapping of Kafka consumer settings", "'x' (str)"),
    (
        "kafka.options",
        {"max.poll.records": 500},
        "kafka.options['max.poll.records']",
        "a string value",
        "500 (int) (quote the value)",
    ),
    ("kafka.options", {"check.crcs": True}, "kafka.options['check.crcs']", "a string value", "true (bool)"),
    # Keys that make the client load classes or read the worker's environment and files.
    *[("kafka.options", {key: value}, f"kafka.options[{key!r}]", "loads no code and reads nothing", repr(key))
      for key, value in [("config.providers", "env"),
                         ("config.providers.env.class",
                          "org.apache.kafka.common.config.provider.EnvVarConfigProvider"),
                         ("metric.reporters", "com.example.Reporter"),
                         ("consumer.interceptor", "com.example.Interceptor"),
                         ("partition.assignment.strategy.class", "x"),
                         ("key.serializer.classes", "x")]],
    ("kafka.options", {"client.id": "${env:AIRFLOW__CORE__FERNET_KEY}"}, "kafka.options['client.id']",
     "a literal value, not a config provider reference", "'${env:AIRFLOW__CORE__FERNET_KEY}' (str)"),
    ("kafka.options", {"group.id": "g"}, "kafka.options['group.id']", "does not manage", "'group.id' (str)"),
    (
        "kafka.options",
        {"auto.offset.reset": "latest"},
        "kafka.options['auto.offset.reset']",
        "does not manage",
        "kafka.starting_offsets",
    ),
    (
        "kafka.options",
        {"isolation.level": "read_uncommitted"},
        "kafka.options['isolation.level']",
        "does not manage",
        "read_committed",
    ),
    (
        "kafka.options",
        {"value.deserializer": "x"},
        "kafka.options['value.deserializer']",
        "does not manage",
        "as bytes",
    ),
    (
        "kafka.options",
        {"kafka.max.poll.records": "1"},
        "kafka.options['kafka.max.poll.records']",
        "without the 'kafka.' prefix",
        "'kafka.max.poll.records' (str)",
    ),
    (
        "kafka.options",
        {"maxOffsetsPerTrigger": "1"},
        "kafka.options['maxOffsetsPerTrigger']",
        "a Kafka consumer setting name",
        "'maxOffsetsPerTrigger' (str)",
    ),
    ("kafka.topic_pattern", "orders.*", "kafka.topics", "exactly one of kafka.topics", "got both"),
    ("name", "has space", None, "letters, digits", "'has space' (str)"),
    ("name", "-lead", None, "starting with a letter or digit", "'-lead' (str)"),
    ("name", "a/b", None, "letters, digits", "'a/b' (str)"),
    ("name", "a" * 201, None, "at most 200 characters", "(str)"),
    ("name", "", None, "letters, digits", "'' (str)"),
    ("name", 5, None, "letters, digits", "5 (int)"),
    ("description", 5, None, "a string", "5 (int)"),
    ("tables", "x", None, "a mapping with keys lakehouse_root", "'x' (str)"),
    ("tables.lakehouse_root", 5, None, "a folder path or URI", "5 (int)"),
    ("tables.lakehouse_root", "", None, "a folder path or URI", "'' (str)"),
    ("tables.bronze_path", ["x"], None, "a folder path or URI", "['x'] (list)"),
    ("tables.checkpoint_root", None, None, "a folder path or URI", "got null"),
    ("tables.deleted_file_retention_days", 6, None, "an integer >= 7", "6 (int)"),
    ("tables.deleted_file_retention_days", "7", None, "an integer >= 7", "'7' (str)"),
    ("tables.log_retention_days", 5, None, "an integer >= tables.deleted_file_retention_days (7)", "5 (int)"),
    ("tables.log_retention_days", 0, None, "a positive integer", "0 (int)"),
    ("schedule", DELETE, None, "5-field cron expression", "nothing (the key is missing)"),
    ("schedule", "", None, "5-field cron expression", "'' (str)"),
    ("schedule", 5, None, "5-field cron expression", "5 (int)"),
    ("schedule", True, None, "or null for manual runs only", "true (bool)"),
    ("schedule", "* * * *", None, "5-field cron expression", "it has 4 fields"),
    ("schedule", "0 * * * * *", None, "5-field cron expression", "it has 6 fields"),
    ("schedule", "every 10 minutes", None, "5-field cron expression", "it has 3 fields"),
    ("schedule", "60 * * * *", None, "5-field cron expression", "minute '60'"),
    ("schedule", "0 24 * * *", None, "5-field cron expression", "hour '24'"),
    ("schedule", "0 0 0 * *", None, "5-field cron expression", "day-of-month '0'"),
    ("schedule", "0 0 32 * *", None, "5-field cron expression", "day-of-month '32'"),
    ("schedule", "0 0 * 13 *", None, "5-field cron expression", "month '13'"),
    ("schedule", "0 0 * 0 *", None, "5-field cron expression", "month '0'"),
    ("schedule", "0 0 * * 8", None, "5-field cron expression", "day-of-week '8'"),
    ("schedule", "*/0 * * * *", None, "5-field cron expression", "step '0'"),
    ("schedule", "5-1 * * * *", None, "5-field cron expression", "runs backwards"),
    ("schedule", "x * * * *", None, "5-field cron expression", "minute 'x'"),
    ("schedule", "0 0 ? * *,", None, "5-field cron expression", "day-of-week '*,'"),
    ("schedule", "? 0 * * *", None, "5-field cron expression", "minute '?'"),
    ("schedule", "0 0 * * 1#6", None, "5-field cron expression", "day-of-week '1#6'"),
    ("schedule", "0 0 * feb-jan *", None, "5-field cron expression", "runs backwards"),
    ("schedule", "@once", None, "@hourly, @daily", "'@once' (str)"),
    ("schedule", "@continuous", None, "@hourly, @daily", "'@continuous' (str)"),
    ("schedule", "@hourlyy", None, "@hourly, @daily", "'@hourlyy' (str)"),
    ("schedule", "*/70 * * * *", None, "5-field cron", "minute '*/70': step '70' must be an integer from 1 to 59"),
    ("schedule", "0 */24 * * *", None, "5-field cron", "hour '*/24': step '24' must be an integer from 1 to 23"),
    ("schedule", "0 0 * * fri-mon", None, "5-field cron expression", "range 'fri-mon' runs backwards"),
    ("schedule", "0 0 3-L * *", None, "5-field cron expression", "day-of-month '3-L': 'L' is not one of"),
    ("schedule", "0 0 ?,1 * *", None, "5-field cron expression", "day-of-month '?,1': croniter refuses it"),
    ("lag", "x", None, "a mapping with keys min_records", "'x' (str)"),
    ("lag.min_records", -1, None, "an integer >= 0", "-1 (int)"),
    ("lag.min_records", "1", None, "an integer >= 0", "'1' (str)"),
    ("lag.min_records", False, None, "an integer >= 0", "false (bool)"),
    ("lag.min_records", 1.0, None, "an integer >= 0", "1.0 (float)"),
    ("lag.min_records", None, None, "an integer >= 0", "got null"),
    ("lag.max_wait_minutes", 0, None, "a positive number of minutes", "0 (int)"),
    ("lag.max_wait_minutes", -1.5, None, "a positive number of minutes", "-1.5 (float)"),
    ("lag.max_wait_minutes", "60", None, "a positive number of minutes", "'60' (str)"),
    ("lag.max_wait_minutes", True, None, "a positive number of minutes", "true (bool)"),
    ("lag.max_wait_minutes", float("inf"), None, "a positive number of minutes", "inf (float)"),
    ("lag.max_wait_minutes", float("nan"), None, "a positive number of minutes", "nan (float)"),
    ("data_loss_policy", "ignore", None, "'fail', 'record_and_continue'", "'ignore' (str)"),
    ("data_loss_policy", "Fail", None, "'fail', 'record_and_continue'", "'Fail' (str); did you mean 'fail'?"),
    ("data_loss_policy", None, None, "'fail', 'record_and_continue'", "got null"),
    ("cluster", ["x"], None, "a mapping with keys profile", "['x'] (list)"),
    ("cluster.profile", "k8s", None, "'local_standalone', 'existing_master'", "'k8s' (str)"),
    ("cluster.workers", 0, None, "an integer from 1 to 8", "0 (int)"),
    ("cluster.workers", 9, None, "an integer from 1 to 8", "9 (int)"),
    ("cluster.workers", "2", None, "an integer from 1 to 8", "'2' (str)"),
    ("cluster.workers", True, None, "an integer from 1 to 8", "true (bool)"),
    ("cluster.worker_cores", 0, None, "a positive integer", "0 (int)"),
    ("cluster.worker_cores", "1", None, "a positive integer", "'1' (str)"),
    ("cluster.worker_memory", 1024, None, "a Spark size with a unit", "1024 (int)"),
    ("cluster.worker_memory", "1024", None, "a Spark size with a unit", "'1024' (str)"),
    ("cluster.worker_memory", "1x", None, "a Spark size with a unit", "'1x' (str)"),
    ("cluster.worker_memory", "1pb", None, "a Spark size with a unit", "'1pb' (str)"),
    ("cluster.worker_memory", "1.5g", None, "a Spark size with a unit", "'1.5g' (str)"),
    ("cluster.worker_memory", "", None, "a Spark size with a unit", "'' (str)"),
    ("cluster.worker_memory", "449m", None, "at least 450m", "'449m' (str); Spark refuses"),
    ("cluster.local_max_records", -1, None, "an integer >= 0", "-1 (int)"),
    ("cluster.local_max_records", "5000", None, "an integer >= 0", "'5000' (str)"),
    ("cluster.records_per_worker", 1.5, None, "an integer >= 0", "1.5 (float)"),
    (
        "cluster.master_connection_id",
        "spark_default",
        None,
        "no master connection with profile local",
        "'spark_default' (str)",
    ),
    (
        "cluster.profile",
        "existing_master",
        "cluster.master_connection_id",
        "required with profile existing_master",
        "nothing (the key is missing)",
    ),
    ("retries", -1, None, "an integer from 0 to 10", "-1 (int)"),
    ("retries", 11, None, "an integer from 0 to 10", "11 (int)"),
    ("retries", "2", None, "an integer from 0 to 10", "'2' (str)"),
    ("retries", True, None, "an integer from 0 to 10", "true (bool)"),
    ("retries", None, None, "an integer from 0 to 10", "got null"),
    ("tags", "demo", None, "a list of strings", "'demo' (str)"),
    ("tags", [""], "tags[0]", "a non-empty string", "'' (str)"),
    ("tags", ["ok", 1], "tags[1]", "a non-empty string", "1 (int)"),
    ("tags", ["a" * 101], "tags[0]", "at most 100 characters", "(str)"),
    ("tags", ["a", "a"], "tags[1]", "each tag once", "'a' (str) a second time"),
]


@pytest.mark.parametrize(
    ("field", "value", "named", "expected", "got"),
    BAD_VALUES,
    ids=[f"{f}={v!r}"[:60] for f, v, *_ in BAD_VALUES],
)
def test_bad_value_is_rejected_naming_file_field_and_expectation(
    tmp_path, field, value, named, expected, got
):
    path = _write(tmp_path, _set(field, value))
    err = _error(path)
    message = str(err)
    assert message.startswith(f"{path}: {named or field}: expected "), message
    assert expected in message.split(", got ")[0], message
    assert got in message, message
    assert (err.file, err.field) == (str(path), named or field)


def test_every_problem_of_a_file_is_reported_one_line_each(tmp_path):
    path = _write(tmp_path, _config(**{"cluster.workers": 9, "retries": "2", "tags": "demo"}))
    err = _error(path)
    assert str(err).splitlines() == [
        f"{path}: cluster.workers: expected an integer from 1 to 8, got 9 (int)",
        f"{path}: retries: expected an integer from 0 to 10, got '2' (str); write the number without quotes",
        f"{path}: tags: expected a list of strings, got 'demo' (str)",
    ]
    assert (err.file, err.field, [e.field for e in err.more]) == (str(path), "cluster.workers", ["retries", "tags"])
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


def test_message_format_matches_the_documented_example(tmp_path):
    path = _write(tmp_path, _set("kafka.max_offsets_per_trigger", "lots"))
    assert (
        str(_error(path))
        == f"{path}: kafka.max_offsets_per_trigger: expected a positive integer, got 'lots' (str)"
    )


@pytest.mark.parametrize(
    "text", ["kafka:\n  connection_id: k\n  topics: [orders]\nschedule: '@hourly'\nretries: '3'\n"]
)
def test_quoted_yaml_number_is_not_coerced(tmp_path, text):
    err = _error(_write(tmp_path, text))
    assert err.field == "retries" and "got '3' (str)" in str(err)


def test_topics_and_topic_pattern_are_exclusive_neither_is_an_error(tmp_path):
    err = _error(_write(tmp_path, _set("kafka.topics", DELETE)))
    assert err.field == "kafka.topics"
    assert "expected exactly one of kafka.topics (a list of names) and kafka.topic_pattern" in str(err)
    assert "got neither" in str(err)


@pytest.mark.parametrize("pattern", ["orders[", "(unclosed", "*orders", ""])
def test_invalid_topic_pattern_is_rejected(tmp_path, pattern):
    path = _write(tmp_path, _config(**{"kafka.topics": DELETE, "kafka.topic_pattern": pattern}))
    err = _error(path)
    assert str(err).startswith(f"{path}: kafka.topic_pattern: expected ")
    assert repr(pattern) in str(err)


def test_checkpoint_inside_the_bronze_table_is_rejected(tmp_path):
    path = _write(
        tmp_path, _config(**{"tables.bronze_path": "/lake/t", "tables.checkpoint_root": "/lake/t/_cp"})
    )
    err = _error(path)
    assert err.field == "tables.checkpoint_root"
    assert "expected a folder apart from the bronze table" in str(err) and "'/lake/t/_cp'" in str(err)


def test_bronze_table_inside_the_checkpoint_folder_is_rejected(tmp_path):
    path = _write(
        tmp_path, _config(**{"tables.bronze_path": "/lake/cp/t", "tables.checkpoint_root": "/lake/cp"})
    )
    assert _error(path).field == "tables.checkpoint_root"


def test_file_name_that_is_not_a_valid_name_needs_an_explicit_name(tmp_path):
    path = _write(tmp_path, BASE, "my orders.yaml")
    err = _error(path)
    assert err.field == "name" and "got the file name 'my orders'" in str(err)
    assert load_pipeline(_write(tmp_path, _set("name", "my_orders"), "my orders.yaml")).name == "my_orders"


@pytest.mark.parametrize(
    ("text", "field", "got"),
    [
        ("", "(top level)", "got null"),
        ("- a\n- b\n", "(top level)", "['a', 'b'] (list)"),
        ("just text\n", "(top level)", "'just text' (str)"),
        ("kafka:\n  connection_id: k\n  topics: [o]\nschedule: null\non: 1\n", "[True]", "true (bool)"),
    ],
)
def test_document_that_is_not_a_mapping_of_text_keys_is_rejected(tmp_path, text, field, got):
    path = _write(tmp_path, text)
    err = _error(path)
    assert str(err).startswith(f"{path}: {field}: expected "), str(err)
    assert got in str(err)


def test_unreadable_file_is_an_error_naming_it(tmp_path):
    path = tmp_path / "orders.yaml"
    path.write_bytes(b"\xff\xfe bad utf-8")
    err = _error(path)
    assert str(err).startswith(f"{path}: (file): expected a readable UTF-8 YAML file")


# --------------------------------------------------------------------------- secrets

SECRET_PLACES = [
    ("kafka.options", "bootstrap.servers"),
    ("kafka.options", "kafka.bootstrap.servers"),
    ("kafka.options", "security.protocol"),
    ("kafka.options", "sasl.jaas.config"),
    ("kafka.options", "sasl.mechanism"),
    ("kafka.options", "ssl.truststore.location"),
    ("kafka.options", "ssl.key.password"),
    ("kafka.options", "password"),
    ("kafka", "bootstrap_servers"),
    ("kafka", "sasl_password"),
    ("kafka", "security_protocol"),
    ("kafka", "ssl"),
    ("kafka", "api_key"),
    ("", "bootstrap.servers"),
    ("", "password"),
    ("cluster", "secret_token"),
]


@pytest.mark.parametrize(("section", "key"), SECRET_PLACES)
def test_connection_and_security_settings_are_refused_without_echoing_them(tmp_path, section, key):
    data = copy.deepcopy(BASE)
    node = data
    for part in filter(None, section.split(".")):
        node = node.setdefault(part, {})
    node[key] = "hunter2-s3cr3t"
    path = _write(tmp_path, data)
    message = str(_error(path))
    if section == "kafka.options":
        shown_key = f"{section}[{key!r}]"
    elif key.isidentifier():
        shown_key = f"{section}.{key}" if section else key
    else:
        shown_key = f"{section}[{key!r}]"
    assert message.startswith(f"{path}: {shown_key}: expected no broker addresses or security settings"), (
        message
    )
    assert "Airflow connection named by kafka.connection_id" in message
    assert "hunter2" not in message


@pytest.mark.parametrize("key", ["max.poll.records", "fetch.min.bytes", "client.rack", "check.crcs"])
def test_ordinary_consumer_options_are_accepted(tmp_path, key):
    cfg = load_pipeline(_write(tmp_path, _set("kafka.options", {key: "1"})))
    assert cfg.kafka.options == {key: "1"}


# --------------------------------------------------------------------------- unknown keys


@pytest.mark.parametrize(
    ("section", "key", "suggestion"),
    [
        ("", "schedul", "schedule"),
        ("", "retry", "retries"),
        ("", "Tags", "tags"),
        ("kafka", "topic", "topics"),
        ("kafka", "max_offset_per_trigger", "max_offsets_per_trigger"),
        ("tables", "bronze", "bronze_path"),
        ("lag", "min_record", "min_records"),
        ("cluster", "worker", "workers"),
        ("cluster", "zzz", None),
        ("", "format", None),
        ("", "transfrom", "transform"),
        ("transform", "schemafile", "schema_file"),
        ("transform", "tombstone", "tombstones"),
    ],
)
def test_unknown_key_is_rejected_with_a_suggestion_when_close(tmp_path, section, key, suggestion):
    data = copy.deepcopy(BASE)
    (data.setdefault(section, {}) if section else data)[key] = 1
    path = _write(tmp_path, data)
    message = str(_error(path))
    field = f"{section}.{key}" if section else key
    assert message.startswith(f"{path}: {field}: expected one of "), message
    assert f"got unknown key {key!r}" in message
    if suggestion:
        assert message.endswith(f"did you mean {suggestion!r}?")
    else:
        assert "did you mean" not in message


# --------------------------------------------------------------------------- YAML syntax


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("kafka:\n  connection_id: k\n  topics: [orders\nschedule: '@hourly'\n", 4, "expected valid YAML"),
        ("kafka:\n  connection_id: k\n topics: [orders]\nschedule: '@hourly'\n", 3, "expected valid YAML"),
        ('kafka:\n  connection_id: k\n  topics: [o]\nschedule: "@hourly\n', 5, "expected valid YAML"),
        ("kafka:\n\tconnection_id: k\n", 2, "expected valid YAML"),
        (
            "schedule: null\nkafka:\n  topics: [a]\n  connection_id: k\n  topics: [b]\n",
            5,
            "duplicate key 'topics'",
        ),
        ("schedule: null\nschedule: '@daily'\n", 2, "duplicate key 'schedule'"),
        ("a: 1\n---\nb: 2\n", 2, "expected valid YAML"),
    ],
)
def test_yaml_syntax_error_names_file_and_line(tmp_path, text, line, problem):
    path = _write(tmp_path, text)
    message = str(_error(path))
    assert message.startswith(f"{path}: line {line}, column "), message
    assert problem in message


def test_yaml_merge_keys_are_not_mistaken_for_duplicates(tmp_path):
    # A key given both by a merge (<<) and explicitly is YAML's override idiom, not a duplicate.
    text = (
        "kafka:\n  connection_id: k\n  topics: [o]\nschedule: null\ntags: [o]\n"
        "cluster:\n  <<: {workers: 2, worker_cores: 3}\n  workers: 3\n"
    )
    cfg = load_pipeline(_write(tmp_path, text))
    assert (cfg.cluster.workers, cfg.cluster.worker_cores, cfg.tags) == (3, 3, ("o",))


def test_yaml_aliases_are_refused_before_they_expand(tmp_path):
    # Nine levels of ten aliases each: 10**9 strings if expanded, from a few hundred bytes.
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    text = "kafka: {connection_id: k, topics: [o]}\nschedule: null\n" + "\n".join(levels) + "\ntags: *a9\n"
    path = _write(tmp_path, text)
    message = str(_error(path))
    assert message == (f"{path}: line 4, column 10: expected no YAML aliases, got *a0; "
                       "write the value out where it is used")  # fmt: skip


# --------------------------------------------------------------------------- valid variants


@pytest.mark.parametrize(
    "expr",
    [
        "*/10 * * * *",
        "0 * * * *",
        "0 0 * * 0",
        "0 0 * * 7",
        "0 0 1 */3 *",
        "5/10 * * * *",
        "0-59/30 * * * *",
        "0 6,18 * * mon-fri",
        "0 0 * JAN-MAR SUN",
        "0 0 ? * *",
        "0 0 * * ?",
        "0 0 L * *",
        "0 0 15W * *",
        "0 0 * * sun#2",
        "0 0 * * mon-fri/2",
        "15 3 1,15 * *",
    ],
)
def test_valid_cron_is_accepted_and_croniter_agrees(tmp_path, expr):
    croniter(expr)  # the library Airflow evaluates schedules with
    assert load_pipeline(_write(tmp_path, _set("schedule", expr))).schedule == expr


@pytest.mark.parametrize(
    "expr",
    [
        "60 * * * *",
        "0 24 * * *",
        "0 0 32 * *",
        "0 0 * 13 *",
        "0 0 * * 8",
        "*/0 * * * *",
        # '?' or 'W' in a list: the hand-made parser let these through, and Airflow then refused the DAG.
        "0 0 ?,1 * *",
        "0 0 * * mon,?",
        "0 0 15W,L * *",
        "0 0 * * sun,1#5",
    ],
)
def test_cron_that_croniter_refuses_is_refused_too(tmp_path, expr):
    with pytest.raises(Exception):  # noqa: B017 - croniter's error classes vary by version
        croniter(expr)
    assert _error(_write(tmp_path, _set("schedule", expr))).field == "schedule"


@pytest.mark.parametrize(
    "expr",
    [
        "*/70 * * * *",
        "*/60 * * * *",
        "1/70 * * * *",
        "0 */24 * * *",
        "0 0 */32 * *",
        "0 0 * */13 *",
        "0 0 * * */8",
        "5-1 * * * *",
        "0 0 * feb-jan *",
        "0 0 * * fri-mon",
        "0 0 3-L * *",
        "0 0 0-0 * *",
        "0 0 * 0-0 *",
        "0 0 W1 * *",
        "0 0 * * L1",
    ],
)
def test_cron_that_croniter_lets_through_is_still_refused(tmp_path, expr):
    # croniter runs '*/70' in the minute field once an hour, wraps '5-1' around and takes '0-0' as a day
    # of the month; cron refuses them, and a schedule that does not do what it says must fail at load.
    croniter(expr)
    err = _error(_write(tmp_path, _set("schedule", expr)))
    assert err.field == "schedule" and err.problem.startswith("expected a 5-field cron expression")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("@hourly", "@hourly"),
        ("@quarterly", "@quarterly"),
        ("  */5   *  * * *  ", "*/5 * * * *"),
    ],
)
def test_schedule_presets_null_and_whitespace(tmp_path, value, expected):
    assert load_pipeline(_write(tmp_path, _set("schedule", value))).schedule == expected


# A Wednesday noon: the weekday schedule's longest gap ahead is its weekend.
_WEDNESDAY = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedule", "margin", "expected_s"),
    [
        ("*/10 * * * *", None, 2 * 600),
        ("@hourly", None, 2 * 3600),
        ("@quarterly", None, 2 * 92 * 86400),  # Jan-Apr, Apr-Jul, Jul-Oct, Oct-Jan: the longest is 92 days
        ("0 9 * * 1-5", None, 2 * 3 * 86400),
        (None, None, 1440 * 60),
        ("*/10 * * * *", 45, 45 * 60),
        (None, 90.5, 90.5 * 60),
    ],
)
def test_retention_margin_is_twice_the_schedules_longest_gap_a_day_without_one_or_what_the_file_says(
    tmp_path, schedule, margin, expected_s
):
    data = _config(**{"schedule": schedule, "lag.retention_margin_minutes": margin if margin else DELETE})
    assert load_pipeline(_write(tmp_path, data)).retention_margin_s(_WEDNESDAY) == expected_s


@pytest.mark.parametrize("value", [0, -5, "60", True])
def test_retention_margin_must_be_a_positive_number_of_minutes(tmp_path, value):
    err = _error(_write(tmp_path, _set("lag.retention_margin_minutes", value)))
    assert err.field == "lag.retention_margin_minutes" and "positive number of minutes" in err.problem


@pytest.mark.parametrize(
    ("changes", "attribute", "expected"),
    [
        ({"kafka.max_offsets_per_trigger": None}, "kafka.max_offsets_per_trigger", None),
        ({"kafka.max_offsets_per_trigger": 1}, "kafka.max_offsets_per_trigger", 1),
        ({"kafka.starting_offsets": "latest"}, "kafka.starting_offsets", "latest"),
        ({"kafka.topics": ["a.b", "c_d", "E-1"]}, "kafka.topics", ("a.b", "c_d", "E-1")),
        (
            {"kafka.topics": DELETE, "kafka.topic_pattern": r"^orders\..*"},
            "kafka.topic_pattern",
            r"^orders\..*",
        ),
        ({"kafka.topics": None, "kafka.topic_pattern": "o.*"}, "kafka.topics", ()),
        ({"lag.min_records": 0}, "lag.min_records", 0),
        ({"lag.max_wait_minutes": 0.5}, "lag.max_wait_minutes", 0.5),
        ({"lag": None}, "lag", LagConfig()),
        ({"data_loss_policy": "record_and_continue"}, "data_loss_policy", "record_and_continue"),
        ({"cluster.workers": 8, "cluster.worker_cores": 4}, "cluster.workers", 8),
        ({"cluster.worker_memory": "2G"}, "cluster.worker_memory", "2g"),
        ({"cluster.worker_memory": "512mb"}, "cluster.worker_memory", "512m"),
        ({"cluster.worker_memory": "460800k"}, "cluster.worker_memory", "460800k"),
        ({"cluster.master_connection_id": None}, "cluster.master_connection_id", None),
        (
            {"cluster.profile": "existing_master", "cluster.master_connection_id": "spark_prod"},
            "cluster.master_connection_id",
            "spark_prod",
        ),
        ({"retries": 0}, "retries", 0),
        ({"retries": 10}, "retries", 10),
        ({"tags": ["a", "b"]}, "tags", ("a", "b")),
        ({"name": "Orders.v2-eu_1"}, "name", "Orders.v2-eu_1"),
        ({"description": "multi\nline"}, "description", "multi\nline"),
    ],
)
def test_valid_values_are_accepted(tmp_path, changes, attribute, expected):
    cfg = load_pipeline(_write(tmp_path, _config(**changes)))
    value: Any = cfg
    for part in attribute.split("."):
        value = getattr(value, part)
    assert value == expected


# --------------------------------------------------------------------------- derived paths


def test_default_paths_hang_off_var_lakehouse(tmp_path):
    cfg = load_pipeline(_write(tmp_path, BASE, "orders.yaml"))
    root = settings.VAR_DIR / "lakehouse"
    assert cfg.tables == TablesConfig(
        str(root), str(root / "orders" / "bronze"), str(root / "orders" / "_checkpoints" / "bronze"),
        str(root / "orders" / "_runs"), str(root / "orders" / "silver"), str(root / "orders" / "quarantine"),
        str(root / "orders" / "_checkpoints" / "silver"), str(root / "orders" / "_lock"),
    )


def test_lakehouse_root_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KDE_LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    cfg = load_pipeline(_write(tmp_path, _set("name", "sales")))
    assert cfg.tables.lakehouse_root == str(tmp_path / "lake")
    assert cfg.tables.bronze_path == str(tmp_path / "lake" / "sales" / "bronze")
    assert cfg.tables.checkpoint_root == str(tmp_path / "lake" / "sales" / "_checkpoints" / "bronze")


def test_lakehouse_root_in_the_file_wins_and_relative_paths_are_from_the_project(tmp_path, monkeypatch):
    monkeypatch.setenv("KDE_LAKEHOUSE_ROOT", "/elsewhere")
    monkeypatch.chdir(tmp_path)
    cfg = load_pipeline(_write(tmp_path, _set("tables.lakehouse_root", "data/lake/")))
    root = settings.PROJECT_ROOT / "data" / "lake"
    assert cfg.tables.lakehouse_root == str(root)
    assert cfg.tables.bronze_path == str(root / "orders" / "bronze")


def test_uri_lakehouse_root_is_kept_as_a_uri(tmp_path):
    cfg = load_pipeline(_write(tmp_path, _set("tables.lakehouse_root", "s3a://bucket/lake/")))
    assert cfg.tables == TablesConfig(
        "s3a://bucket/lake", "s3a://bucket/lake/orders/bronze", "s3a://bucket/lake/orders/_checkpoints/bronze",
        "s3a://bucket/lake/orders/_runs", "s3a://bucket/lake/orders/silver", "s3a://bucket/lake/orders/quarantine",
        "s3a://bucket/lake/orders/_checkpoints/silver", "s3a://bucket/lake/orders/_lock",
    )


def test_each_derived_path_can_be_overridden(tmp_path):
    data = _config(**{"tables.lakehouse_root": "/lake", "tables.bronze_path": "/tables/orders_raw"})
    cfg = load_pipeline(_write(tmp_path, data))
    silver = ("/lake/orders/silver", "/lake/orders/quarantine", "/lake/orders/_checkpoints/silver", "/lake/orders/_lock")
    assert cfg.tables == TablesConfig(
        "/lake", "/tables/orders_raw", "/lake/orders/_checkpoints/bronze", "/lake/orders/_runs", *silver
    )
    data = _config(**{"tables.lakehouse_root": "/lake", "tables.checkpoint_root": "/cp/orders"})
    cfg = load_pipeline(_write(tmp_path, data))
    assert cfg.tables == TablesConfig(
        "/lake", "/lake/orders/bronze", "/cp/orders", "/lake/orders/_runs", *silver
    )
    data = _config(**{
        "tables.lakehouse_root": "/lake",
        "tables.silver_path": "/gold/orders",
        "tables.quarantine_path": "/q/orders",
        "tables.transform_checkpoint_root": "/cp/orders_silver",
    })
    cfg = load_pipeline(_write(tmp_path, data))
    assert cfg.tables == TablesConfig(
        "/lake", "/lake/orders/bronze", "/lake/orders/_checkpoints/bronze", "/lake/orders/_runs",
        "/gold/orders", "/q/orders", "/cp/orders_silver", "/lake/orders/_lock",
    )


# --------------------------------------------------------------------------- load_pipelines


def test_one_bad_file_does_not_stop_the_others(tmp_path):
    _write(tmp_path, BASE, "a.yaml")
    bad = _write(tmp_path, _set("retries", "many"), "b.yaml")
    _write(tmp_path, _set("kafka.topics", ["c"]), "c.yml")
    _write(tmp_path, "kafka: topics: [d]\n", "d.yaml")
    _write(tmp_path, "not: [valid", ".hidden.yaml")
    _write(tmp_path, "ignored", "README.md")
    configs, errors = load_pipelines(tmp_path)
    assert sorted(configs) == ["a", "c"]
    assert configs["c"].kafka.topics == ("c",)
    assert sorted(errors) == [str(bad), str(tmp_path / "d.yaml")]
    assert errors[str(bad)] == f"{bad}: retries: expected an integer from 0 to 10, got 'many' (str)"
    assert errors[str(tmp_path / "d.yaml")].startswith(f"{tmp_path / 'd.yaml'}: line 1, column ")


def test_duplicate_name_is_an_error_of_the_second_file(tmp_path):
    first = _write(tmp_path, BASE, "a.yaml")
    second = _write(tmp_path, _set("name", "a"), "b.yaml")
    configs, errors = load_pipelines(tmp_path)
    assert list(configs) == ["a"] and configs["a"].source_path == str(first)
    assert errors == {
        str(
            second
        ): f"{second}: name: expected a name no other pipeline uses, got 'a', already used by {first}"
    }


def test_shared_bronze_table_is_an_error_of_the_second_file(tmp_path):
    _write(tmp_path, _set("tables.bronze_path", "/lake/shared"), "a.yaml")
    second = _write(tmp_path, _set("tables.bronze_path", "/lake/shared"), "b.yaml")
    configs, errors = load_pipelines(tmp_path)
    assert list(configs) == ["a"]
    assert errors[str(second)] == (
        f"{second}: tables.bronze_path: expected the bronze table apart from every location of the other "
        "pipelines (neither inside the other), got '/lake/shared', the same location as tables.bronze_path "
        f"'/lake/shared' of pipeline 'a' ({tmp_path / 'a.yaml'}); give each pipeline its own folders"
    )


def test_shared_checkpoint_folder_is_an_error_of_the_second_file(tmp_path):
    _write(tmp_path, _set("tables.checkpoint_root", "/cp/shared"), "a.yaml")
    second = _write(tmp_path, _set("tables.checkpoint_root", "/cp/shared"), "b.yaml")
    _, errors = load_pipelines(tmp_path)
    assert errors[str(second)].startswith(f"{second}: tables.checkpoint_root: expected the bronze checkpoint folder "
                                          "apart from every location of the other pipelines")  # fmt: skip


@pytest.mark.parametrize(
    ("a", "b", "field", "relation"),
    [
        # B's bronze inside A's: A's VACUUM would delete B's files.
        ({"tables.bronze_path": "/tables/a"}, {"tables.bronze_path": "/tables/a/b"}, "bronze_path",
         "inside tables.bronze_path '/tables/a' of pipeline 'a'"),
        ({"tables.ledger_path": "/runs"}, {"tables.ledger_path": "/runs"}, "ledger_path",
         "the same location as tables.ledger_path '/runs' of pipeline 'a'"),
        ({"tables.bronze_path": "/tables/a"}, {"tables.ledger_path": "/tables/a"}, "ledger_path",
         "the same location as tables.bronze_path '/tables/a' of pipeline 'a'"),
        ({"tables.silver_path": "/gold/a/silver"}, {"tables.quarantine_path": "/gold"}, "quarantine_path",
         "a folder holding tables.silver_path '/gold/a/silver' of pipeline 'a'"),
    ],
    ids=["nested-bronze", "shared-ledger", "ledger-on-bronze", "above-silver"],
)  # fmt: skip
def test_a_location_inside_equal_to_or_above_another_pipelines_is_refused(tmp_path, a, b, field, relation):
    first = _write(tmp_path, _config(**{"tables.lakehouse_root": "/lake", **a}), "a.yaml")
    second = _write(tmp_path, _config(**{"tables.lakehouse_root": "/lake", **b}), "b.yaml")
    configs, errors = load_pipelines(tmp_path)
    assert list(configs) == ["a"]
    assert list(errors) == [str(second)]
    assert errors[str(second)].startswith(f"{second}: tables.{field}: expected ")
    assert f"{relation} ({first}); give each pipeline its own folders" in errors[str(second)]


@pytest.mark.parametrize(("a", "b"), [
    ("{root}/lake/a_orders/bronze", "file://{root}/lake/a_orders/bronze"),  # a scheme on a local path
    ("{root}/lake/a_orders/bronze", "{root}/lake/../lake/a_orders/bronze/"),
    ("{root}/lake/a_orders/bronze", "{root}/linked/a_orders/bronze"),  # a symlink to the same folder
    ("s3a://Bucket/lake/a/bronze", "s3://bucket/lake//a/bronze"),  # a scheme alias, a host's case
])  # fmt: skip
def test_two_spellings_of_one_table_location_are_one_location(tmp_path, a, b):
    # Compared as strings, these let two pipelines share a table, and one's VACUUM delete the other's files.
    (tmp_path / "lake").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "lake")
    (tmp_path / "pipes").mkdir()
    _write(tmp_path / "pipes", _set("tables.bronze_path", a.format(root=tmp_path)), "a.yaml")
    second = _write(tmp_path / "pipes", _set("tables.bronze_path", b.format(root=tmp_path)), "b.yaml")
    configs, errors = load_pipelines(tmp_path / "pipes")
    assert list(configs) == ["a"], errors
    assert "the same location as tables.bronze_path" in errors[str(second)]


def test_a_table_may_not_lie_in_the_run_folders_or_hold_them(tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "VAR_DIR", tmp_path / "var")
    (tmp_path / "pipes").mkdir()
    for tables, relation in (({"tables.lakehouse_root": str(tmp_path / "var" / "runs" / "x")}, "inside"),
                             ({"tables.lakehouse_root": str(tmp_path / "lh"), "tables.bronze_path": str(tmp_path / "var")},
                              "a folder holding")):  # fmt: skip
        path = _write(tmp_path / "pipes", _config(**tables), "a.yaml")
        configs, errors = load_pipelines(tmp_path / "pipes")
        assert configs == {}
        assert "apart from the run folders (KDE_VAR_DIR/runs), where the jobs' credentials are, got" in errors[str(path)]
        assert relation in errors[str(path)]
    # the default, <KDE_VAR_DIR>/lakehouse, is apart from them
    _write(tmp_path / "pipes", _set("tables.lakehouse_root", str(tmp_path / "var" / "lakehouse")), "a.yaml")
    assert list(load_pipelines(tmp_path / "pipes")[0]) == ["a"]


def test_unexpected_loader_failure_is_contained_to_its_file(tmp_path, monkeypatch):
    _write(tmp_path, BASE, "a.yaml")
    boom = _write(tmp_path, BASE, "boom.yaml")
    real = loader.load_pipeline

    def flaky(path):
        if Path(path).name == "boom.yaml":
            raise RuntimeError("bug")
        return real(path)

    monkeypatch.setattr(loader, "load_pipeline", flaky)
    configs, errors = load_pipelines(tmp_path)
    assert list(configs) == ["a"]
    assert errors == {str(boom): f"{boom}: (file): unexpected error while loading: RuntimeError: bug"}


def test_missing_folder_is_reported_not_raised(tmp_path):
    configs, errors = load_pipelines(tmp_path / "nope")
    assert configs == {}
    assert list(errors) == [str(tmp_path / "nope")]
    assert "(folder): expected a folder of pipeline files" in errors[str(tmp_path / "nope")]


# --------------------------------------------------------------------------- the ingestion's arguments for a pipeline


def _ingest_args(cfg, bootstrap_servers, run_id, run_type, summary_path):
    return jobs.IngestArgs.for_pipeline(cfg, bootstrap_servers=bootstrap_servers, run_id=run_id,
                                        run_type=run_type, summary_path=summary_path).to_args()  # fmt: skip


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"kafka.topics": ["a", "b.c", "d-e"], "kafka.max_offsets_per_trigger": 20000},
        {
            "kafka.topics": DELETE,
            "kafka.topic_pattern": r"^orders\.(eu|us)$",
            "kafka.starting_offsets": "latest",
        },
        {"kafka.topics": DELETE, "kafka.topic_pattern": "-weird.*"},
        {"tables.lakehouse_root": "s3a://bucket/lake", "tables.checkpoint_root": "/mnt/cp/orders"},
        {"kafka.options": {"max.poll.records": "500"}},
        {"tables.log_retention_days": 90, "tables.deleted_file_retention_days": 14},
    ],
)
@pytest.mark.parametrize("run_type", pipeline.RUN_TYPES)
def test_ingest_job_args_parse_back_into_the_same_values(tmp_path, changes, run_type):
    cfg = load_pipeline(_write(tmp_path, _config(**changes)))
    argv = _ingest_args(
        cfg,
        "b1:9092,b2:9092", "-scheduled__2024-05-01T00:00:00+00:00", run_type, "/tmp/s.json"
    )
    job = ingest_plan.parse_config(argv)
    assert job == ingest_plan.IngestConfig(
        pipeline=cfg.name,
        bootstrap_servers="b1:9092,b2:9092",
        bronze_path=cfg.tables.bronze_path,
        checkpoint_root=cfg.tables.checkpoint_root,
        topics=cfg.kafka.topics,
        topic_pattern=cfg.kafka.topic_pattern,
        starting_offsets=cfg.kafka.starting_offsets,
        max_offsets_per_trigger=cfg.kafka.max_offsets_per_trigger,
        run_id="-scheduled__2024-05-01T00:00:00+00:00",
        run_type=run_type,
        summary_path="/tmp/s.json",
        kafka_options={},  # options travel in --kafka-options-file, never on the command line
        table_properties={
            "delta.logRetentionDuration": f"interval {cfg.tables.log_retention_days} days",
            "delta.deletedFileRetentionDuration": f"interval {cfg.tables.deleted_file_retention_days} days",
        },
    )
    assert not any("500" in arg or "options" in arg for arg in argv)


def test_ingest_job_args_for_the_example():
    cfg = load_pipeline(EXAMPLE)
    lake = settings.VAR_DIR / "lakehouse" / "demo_orders"
    assert _ingest_args(cfg, "127.0.0.1:9092", "r1", "scheduled", "/tmp/s.json") == [
        "--pipeline=demo_orders",
        "--bootstrap-servers=127.0.0.1:9092",
        "--topics=demo.orders",
        f"--bronze-path={lake / 'bronze'}",
        f"--checkpoint-root={lake / '_checkpoints' / 'bronze'}",
        "--starting-offsets=earliest",
        "--max-offsets-per-trigger=20000",
        "--run-id=r1",
        "--run-type=scheduled",
        "--summary-path=/tmp/s.json",
        "--table-property=delta.logRetentionDuration=interval 30 days",
        "--table-property=delta.deletedFileRetentionDuration=interval 7 days",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bootstrap_servers": ""}, "bootstrap_servers: expected a non-empty string, got '' (str)"),
        ({"run_id": " "}, "run_id: expected a non-empty string"),
        ({"summary_path": None}, "summary_path: expected a non-empty string, got null"),
        ({"run_type": "adhoc"}, "run_type: expected one of 'scheduled', 'manual'"),
    ],
)
def test_ingest_job_args_rejects_bad_runtime_values(kwargs, message):
    cfg = load_pipeline(EXAMPLE)
    args = {"bootstrap_servers": "b:9092", "run_id": "r", "run_type": "manual", "summary_path": "/s.json"}
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        _ingest_args(cfg, **{**args, **kwargs})


# --------------------------------------------------------------------------- JSON Schema


def test_checked_in_json_schema_is_current():
    assert reference.SCHEMA_PATH.read_text() == reference.pipeline_schema_json(), (
        f"docs/pipeline.schema.json is stale; regenerate it with: {reference.SCHEMA_COMMAND}"
    )


def test_schema_command_prints_the_schema(capsys):
    assert reference.main(["--schema"]) == 0
    assert capsys.readouterr().out == reference.pipeline_schema_json()


def test_json_schema_accepts_the_files_the_loader_accepts():
    # Editors check pipeline files against the schema: it must not flag a file that loads.
    jsonschema = pytest.importorskip("jsonschema")  # comes with Airflow
    schema = json.loads(reference.pipeline_schema_json())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    files = {str(p): yaml.safe_load(p.read_text()) for p in sorted(EXAMPLE.parent.glob("*.yaml"))}
    files["BASE + TRANSFORM"] = _transform_config()  # 'status: string', the short form of a field
    for name, data in files.items():
        assert [e.message for e in validator.iter_errors(data)] == [], name
    assert not validator.is_valid({**BASE, "retries": 11})
    assert not validator.is_valid({**BASE, "schedul": "@daily"})


# --------------------------------------------------------------------------- the error type


def test_error_is_a_value_error_that_survives_pickling(tmp_path):
    path = _write(tmp_path, _set("retries", "x"))
    err = _error(path)
    assert isinstance(err, ValueError)
    copy_ = pickle.loads(pickle.dumps(err))
    assert (copy_.file, copy_.field, copy_.problem, str(copy_)) == (
        err.file,
        err.field,
        err.problem,
        str(err),
    )


def test_ledger_path_defaults_beside_the_tables_and_may_not_sit_inside_bronze(tmp_path):
    path = _write(tmp_path, _config(**{"tables.lakehouse_root": "/lake"}))
    assert load_pipeline(path).tables.ledger_path == "/lake/orders/_runs"
    path = _write(tmp_path, _config(**{"tables.bronze_path": "/lake/b", "tables.ledger_path": "/lake/b/_runs"}))
    err = _error(path)
    assert err.field == "tables.ledger_path"
    assert "apart from the bronze table" in err.problem


# --------------------------------------------------------------------------- transform

TRANSFORM: dict[str, Any] = {
    "format": "json",
    "schema": {
        "order_id": {"type": "string"},
        "customer_id": {"type": "string", "required": True, "max_length": 64},
        "amount": {"type": "decimal(10,2)", "required": True, "minimum": 0},
        "quantity": {"type": "int", "minimum": 1, "maximum": 1000},
        "currency": {"type": "string", "allowed": ["EUR", "USD", "GBP"]},
        "status": "string",
        "event_time": {"type": "timestamp"},
    },
    "key": "order_id",
    "ordering": "event_time",
    "tombstones": "delete",
    "new_fields": "add",
    "max_value_bytes": 2048,
}
#: What TRANSFORM loads into: key and ordering fields become required.
TRANSFORM_SPEC = TransformSpec(
    fields=(
        FieldSpec("order_id", "string", required=True),
        FieldSpec("customer_id", "string", required=True, max_length=64),
        FieldSpec("amount", "decimal(10,2)", required=True, minimum=0),
        FieldSpec("quantity", "int", minimum=1, maximum=1000),
        FieldSpec("currency", "string", allowed=("EUR", "USD", "GBP")),
        FieldSpec("status", "string"),
        FieldSpec("event_time", "timestamp", required=True),
    ),
    key=("order_id",),
    ordering="event_time",
    format="json",
    tombstones="delete",
    new_fields="add",
    max_value_bytes=2048,
)


def _transform_config(**changes: Any) -> dict[str, Any]:
    """BASE plus TRANSFORM with ``changes`` applied (dotted paths from the top, DELETE removes)."""
    return _apply({**copy.deepcopy(BASE), "transform": copy.deepcopy(TRANSFORM)}, changes)


def test_full_transform_section_loads_into_its_spec(tmp_path):
    cfg = load_pipeline(_write(tmp_path, _transform_config()))
    assert cfg.transform == TRANSFORM_SPEC


def test_transform_written_by_hand_normalises_types_and_forces_key_and_ordering_required(tmp_path):
    text = """\
kafka: {connection_id: kafka_default, topics: [orders]}
schedule: null
transform:
  schema:
    order_id: {type: String}
    shop: {type: INT}
    amount:
      type: Decimal(10, 2)
      minimum: 0.01
    price:
      type: decimal(12,3)
    status: string
    tags: json
    event_time: {type: timestamp, required: false}
  key: [order_id, shop]
  ordering: event_time
"""
    spec = load_pipeline(_write(tmp_path, text)).transform
    assert spec == TransformSpec(
        fields=(
            FieldSpec("order_id", "string", required=True),
            FieldSpec("shop", "int", required=True),
            FieldSpec("amount", "decimal(10,2)", minimum=0.01),
            FieldSpec("price", "decimal(12,3)"),
            FieldSpec("status", "string"),
            FieldSpec("tags", "json"),
            FieldSpec("event_time", "timestamp", required=True),
        ),
        key=("order_id", "shop"),
        ordering="event_time",
    )
    assert (spec.format, spec.tombstones, spec.new_fields, spec.max_value_bytes) == (
        "json",
        "quarantine",
        "ignore",
        DEFAULT_MAX_VALUE_BYTES,
    )


def test_unquoted_decimal_in_a_flow_mapping_gets_a_quoting_hint(tmp_path):
    text = (
        "kafka: {connection_id: k, topics: [o]}\nschedule: null\ntransform:\n"
        "  schema:\n    id: string\n    ts: timestamp\n    amount: {type: decimal(10,2), required: true}\n"
        "  key: id\n  ordering: ts\n"
    )
    path = _write(tmp_path, text)
    err = _error(path)
    assert (err.file, err.field) == (str(path), "transform.schema.amount.type")
    assert err.problem.startswith("expected a field type: one of string")
    assert "got 'decimal(10' (str); inside {...} quote the type" in err.problem
    quoted = text.replace("decimal(10,2)", '"decimal(10,2)"')
    spec = load_pipeline(_write(tmp_path, quoted)).transform
    assert spec is not None and spec.field_named("amount") == FieldSpec("amount", "decimal(10,2)", True)


@pytest.mark.parametrize("value", [DELETE, None])
def test_no_transform_section_means_no_transform(tmp_path, value):
    assert load_pipeline(_write(tmp_path, _set("transform", value))).transform is None


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"transform.max_value_bytes": 64 * 1024**2}, {"max_value_bytes": 64 * 1024**2}),
        ({"transform.max_value_bytes": 1}, {"max_value_bytes": 1}),
        ({"transform.format": DELETE, "transform.tombstones": "quarantine"}, {"tombstones": "quarantine"}),
        ({"transform.new_fields": "ignore"}, {"new_fields": "ignore"}),
        ({"transform.key": ["order_id"]}, {"key": ("order_id",)}),
        ({"transform.schema.day": "date", "transform.ordering": "day"}, {"ordering": "day"}),
        ({"transform.schema.seq": "long", "transform.ordering": "seq"}, {"ordering": "seq"}),
        ({"transform.schema.n": "double", "transform.ordering": "n"}, {"ordering": "n"}),
        ({"transform.schema.ok": "boolean", "transform.key": ["order_id", "ok"]}, {"key": ("order_id", "ok")}),
        (
            {"transform.envelope": "debezium", "transform.ordering": DELETE, "transform.tombstones": DELETE},
            {"envelope": "debezium", "source": None, "ordering": None, "tombstones": "delete", "cdc": True},
        ),
        (
            {"transform.envelope": "debezium", "transform.source": "postgres", "transform.ordering": DELETE,
             "transform.tombstones": DELETE},
            {"source": "postgresql"},
        ),
    ],
)
def test_valid_transform_variants_are_accepted(tmp_path, changes, expected):
    spec = load_pipeline(_write(tmp_path, _transform_config(**changes))).transform
    assert spec is not None
    assert {name: getattr(spec, name) for name in expected} == expected


def test_transform_spec_survives_a_json_round_trip(tmp_path):
    changes = {"transform.schema.quantity.allowed": [1, 2, 5], "transform.schema.amount.maximum": 99.5}
    spec = load_pipeline(_write(tmp_path, _transform_config(**changes))).transform
    assert spec is not None and spec.field_named("quantity").allowed == (1, 2, 5)
    assert TransformSpec.from_json(spec.to_json()) == spec
    assert TransformSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


# (changes to BASE + TRANSFORM, field named in the error, fragment of "expected ...", fragment of "got ...")
_CDC = {"transform.envelope": "debezium", "transform.ordering": DELETE, "transform.tombstones": DELETE}
TRANSFORM_BAD = [
    ({**_CDC, "transform.ordering": "event_time"}, "transform.ordering", "no transform.ordering with transform."
     "envelope (the source database's commit position", "'event_time' (str); remove transform.ordering"),
    ({**_CDC, "transform.tombstones": "delete"}, "transform.tombstones", "no transform.tombstones with",
     "'delete' (str); remove"),
    ({"transform.source": "postgresql"}, "transform.source", "no transform.source without transform.envelope",
     "set transform.envelope: debezium, or remove"),
    ({**_CDC, "transform.envelope": "maxwell"}, "transform.envelope", "one of 'debezium'", "'maxwell' (str)"),
    ({**_CDC, "transform.source": "mysql"}, "transform.source", "one of 'postgresql'",
     "MySQL and MariaDB change events are not supported yet"),
    ({**_CDC, "transform.source": "postgis"}, "transform.source", "one of 'postgresql'", "did you mean"),
    ({"transform": "x"}, "transform", "a mapping with keys format, schema, schema_file", "'x' (str)"),
    ({"transform.ordring": "x"}, "transform.ordring", "one of format, schema", "did you mean 'ordering'?"),
    ({"transform.format": "xml"}, "transform.format", "one of 'json', 'avro', 'json_schema'", "'xml' (str)"),
    ({"transform.schema_file": "s.yaml"}, "transform.schema", "exactly one of transform.schema", "got both"),
    ({"transform.schema": DELETE}, "transform.schema", "exactly one of transform.schema", "got neither"),
    ({"transform.schema": {}}, "transform.schema", "a non-empty mapping of field names", "{} (dict)"),
    ({"transform.schema": ["a"]}, "transform.schema", "a non-empty mapping of field names", "['a'] (list)"),
    (
        {"transform.schema.order-id": "string"},
        "transform.schema['order-id']",
        "a field name (letters, digits and '_', starting with a letter",
        "'order-id' (str)",
    ),
    (
        {"transform.schema._ts": "timestamp"},
        "transform.schema._ts",
        "a field name",
        "'_ts' (str); names starting with '_' are reserved for silver's own columns",
    ),
    ({"transform.schema." + "a" * 129: "string"}, "transform.schema." + "a" * 129, "at most 128", "(str)"),
    ({"transform.schema.9lives": "int"}, "transform.schema['9lives']", "starting with a letter", "'9lives'"),
    (
        {"transform.schema.Order_ID": "string"},
        "transform.schema.Order_ID",
        "differs from 'order_id' in more than case (Delta column names are case-insensitive)",
        "'Order_ID' (str)",
    ),
    ({"transform.schema.status": None}, "transform.schema.status", "a field type (e.g. string) or", "got null"),
    ({"transform.schema.status": "strng"}, "transform.schema.status", "a field type", "did you mean 'string'?"),
    (
        {"transform.schema.amount.type": "money"},
        "transform.schema.amount.type",
        "one of string, int, long, double, boolean, date, timestamp, json, or decimal(p,s)",
        "'money' (str)",
    ),
    ({"transform.schema.amount.type": "decimal(40,2)"}, "transform.schema.amount.type", "1 to 38", "(str)"),
    ({"transform.schema.amount.type": "decimal(5,6)"}, "transform.schema.amount.type", "0 to p", "(str)"),
    ({"transform.schema.amount.type": "integer"}, "transform.schema.amount.type", "a field type", "'int'?"),
    ({"transform.schema.amount.type": "bigint"}, "transform.schema.amount.type", "a field type", "'long'?"),
    ({"transform.schema.amount.type": 5}, "transform.schema.amount.type", "a field type", "5 (int)"),
    ({"transform.schema.amount.type": DELETE}, "transform.schema.amount.type", "a field type", "nothing"),
    (
        {"transform.schema.amount.requird": True},
        "transform.schema.amount.requird",
        "one of type, required, minimum, maximum, allowed, max_length",
        "unknown key 'requird'; did you mean 'required'?",
    ),
    ({"transform.schema.amount.required": "yes"}, "transform.schema.amount.required", "true or false", "'yes'"),
    (
        {"transform.schema.status": {"type": "string", "minimum": 1}},
        "transform.schema.status.minimum",
        "no minimum on string fields (only int, long, double and decimal fields",
        "1 (int)",
    ),
    (
        {"transform.schema.event_time.maximum": 5},
        "transform.schema.event_time.maximum",
        "no maximum on timestamp fields",
        "5 (int)",
    ),
    ({"transform.schema.quantity.minimum": True}, "transform.schema.quantity.minimum", "a number", "true (bool)"),
    (
        {"transform.schema.quantity.minimum": "0"},
        "transform.schema.quantity.minimum",
        "a number",
        "'0' (str); write the number",
    ),
    ({"transform.schema.amount.minimum": float("nan")}, "transform.schema.amount.minimum", "a number", "nan"),
    (
        {"transform.schema.quantity.minimum": 10, "transform.schema.quantity.maximum": 5},
        "transform.schema.quantity.maximum",
        "a number >= the minimum 10",
        "5 (int)",
    ),
    (
        {"transform.schema.event_time.allowed": ["x"]},
        "transform.schema.event_time.allowed",
        "no allowed list on timestamp fields (only string, int and long fields",
        "['x'] (list)",
    ),
    (
        {"transform.schema.amount.allowed": [1]},
        "transform.schema.amount.allowed",
        "no allowed list on decimal(10,2) fields",
        "[1] (list)",
    ),
    ({"transform.schema.currency.allowed": []}, "transform.schema.currency.allowed", "non-empty list", "[]"),
    (
        {"transform.schema.currency.allowed": "EUR"},
        "transform.schema.currency.allowed",
        "a non-empty list of strings",
        "'EUR' (str); write [EUR]",
    ),
    (
        {"transform.schema.currency.allowed": ["EUR", "EUR"]},
        "transform.schema.currency.allowed[1]",
        "each value once",
        "'EUR' (str) a second time",
    ),
    (
        {"transform.schema.currency.allowed": ["EUR", 1]},
        "transform.schema.currency.allowed[1]",
        "a string",
        "1 (int); quote it",
    ),
    (
        {"transform.schema.currency.allowed": ["EUR", False]},
        "transform.schema.currency.allowed[1]",
        "a string",
        "false (bool); quote it (YAML reads yes, no",
    ),
    (
        {"transform.schema.quantity.allowed": ["1"]},
        "transform.schema.quantity.allowed[0]",
        "an integer",
        "'1' (str); write the number",
    ),
    ({"transform.schema.quantity.allowed": [True]}, "transform.schema.quantity.allowed[0]", "an integer", "true"),
    ({"transform.schema.quantity.allowed": [1.5]}, "transform.schema.quantity.allowed[0]", "an integer", "1.5"),
    (
        {"transform.schema.quantity.allowed": [1, 2000]},
        "transform.schema.quantity.allowed[1]",
        "minimum 1 and maximum 1000",
        "2000 (int)",
    ),
    (
        {"transform.schema.customer_id.allowed": ["x" * 65]},
        "transform.schema.customer_id.allowed[0]",
        "max_length 64",
        "(str)",
    ),
    (
        {"transform.schema.quantity.max_length": 5},
        "transform.schema.quantity.max_length",
        "no max_length on int fields (only string and json fields",
        "5 (int)",
    ),
    ({"transform.schema.customer_id.max_length": 0}, "transform.schema.customer_id.max_length", "positive", "0"),
    (
        {"transform.schema.customer_id.max_length": 1.5},
        "transform.schema.customer_id.max_length",
        "a positive integer",
        "1.5 (float)",
    ),
    ({"transform.key": DELETE}, "transform.key", "a field name or a non-empty list", "nothing (the key is"),
    ({"transform.key": []}, "transform.key", "a field name or a non-empty list", "[] (list)"),
    (
        {"transform.key": "orderid"},
        "transform.key",
        "the name of a field declared in transform.schema",
        "'orderid' (str); did you mean 'order_id'?",
    ),
    ({"transform.key": "ORDER_ID"}, "transform.key", "declared in transform.schema", "did you mean 'order_id'?"),
    ({"transform.key": ["order_id", 1]}, "transform.key[1]", "the name of a field declared", "1 (int)"),
    (
        {"transform.key": ["order_id", "amount"]},
        "transform.key[1]",
        "a key field of type string, int, long, date, boolean",
        "'amount' (str), a decimal(10,2) field",
    ),
    ({"transform.key": "event_time"}, "transform.key", "a key field of type", "a timestamp field"),
    (
        {"transform.key": ["order_id", "order_id"]},
        "transform.key[1]",
        "each key field once",
        "'order_id' (str) a second time",
    ),
    ({"transform.ordering": DELETE}, "transform.ordering", "the name of a field declared", "nothing"),
    ({"transform.ordering": ["event_time"]}, "transform.ordering", "the name of a field", "(list)"),
    ({"transform.ordering": "evnt_time"}, "transform.ordering", "declared", "did you mean 'event_time'?"),
    (
        {"transform.ordering": "order_id"},
        "transform.ordering",
        "a field that is not part of transform.key",
        "'order_id' (str)",
    ),
    (
        {"transform.schema.flag": "boolean", "transform.ordering": "flag"},
        "transform.ordering",
        "an ordering field of type int, long, double, date, timestamp, string",
        "'flag' (str), a boolean field",
    ),
    ({"transform.ordering": "amount"}, "transform.ordering", "an ordering field", "a decimal(10,2) field"),
    ({"transform.tombstones": "drop"}, "transform.tombstones", "one of 'quarantine', 'delete'", "'drop' (str)"),
    ({"transform.new_fields": "Add"}, "transform.new_fields", "one of 'ignore', 'add'", "did you mean 'add'?"),
    ({"transform.max_value_bytes": 0}, "transform.max_value_bytes", "at most 67108864 (64 MiB)", "0 (int)"),
    ({"transform.max_value_bytes": 64 * 1024**2 + 1}, "transform.max_value_bytes", "64 MiB", "67108865 (int)"),
    ({"transform.max_value_bytes": "1024"}, "transform.max_value_bytes", "a positive", "write the number"),
    ({"transform.max_value_bytes": True}, "transform.max_value_bytes", "a positive", "true (bool)"),
    (
        {"transform.schema": DELETE, "transform.schema_file": ""},
        "transform.schema_file",
        "the path of a YAML file of fields",
        "'' (str)",
    ),
    (
        {"transform.schema": DELETE, "transform.schema_file": 5},
        "transform.schema_file",
        "the path of a YAML file of fields",
        "5 (int)",
    ),
]


@pytest.mark.parametrize(
    ("changes", "named", "expected", "got"),
    TRANSFORM_BAD,
    ids=[f"{next(iter(c))}={next(iter(c.values()))!r}"[:70] for c, *_ in TRANSFORM_BAD],
)
def test_bad_transform_is_rejected_naming_file_field_and_expectation(tmp_path, changes, named, expected, got):
    path = _write(tmp_path, _transform_config(**changes))
    err = _error(path)
    message = str(err)
    assert message.startswith(f"{path}: {named}: expected "), message
    assert expected in message.split(", got ")[0], message
    assert got in message, message
    assert (err.file, err.field) == (str(path), named)


def _schema_files(tmp_path: Path, schema: Any, file_value: str = "schemas/orders.schema.yaml") -> Path:
    """A pipeline in ``tmp_path/pipes`` using TRANSFORM with its schema in a file; returns the pipeline file."""
    (tmp_path / "pipes" / "schemas").mkdir(parents=True)
    _write(tmp_path / "pipes" / "schemas", schema, "orders.schema.yaml")
    data = _transform_config(**{"transform.schema": DELETE, "transform.schema_file": file_value})
    return _write(tmp_path / "pipes", data)


def test_schema_file_relative_to_the_pipeline_file_loads_like_an_inline_schema(tmp_path, monkeypatch):
    path = _schema_files(tmp_path, TRANSFORM["schema"])
    monkeypatch.chdir(tmp_path)  # not the pipeline file's folder: the path must not depend on it
    assert load_pipeline(path).transform == TRANSFORM_SPEC
    assert load_pipeline(Path("pipes") / "orders.yaml").transform == TRANSFORM_SPEC


@pytest.mark.parametrize(
    "file_value",
    ["../pipes/schemas/orders.schema.yaml", "./schemas//orders.schema.yaml", "{root}/pipes/schemas/orders.schema.yaml"],
)
def test_schema_file_path_spellings(tmp_path, file_value):
    path = _schema_files(tmp_path, TRANSFORM["schema"], file_value.format(root=tmp_path))
    assert load_pipeline(path).transform == TRANSFORM_SPEC


def test_schema_file_that_is_missing_names_the_path_looked_for(tmp_path):
    path = _schema_files(tmp_path, TRANSFORM["schema"], "schemas/typo.schema.yaml")
    err = _error(path)
    assert (err.file, err.field) == (str(path), "transform.schema_file")
    assert str(tmp_path / "pipes" / "schemas" / "typo.schema.yaml") in err.problem
    assert err.problem.endswith("got 'schemas/typo.schema.yaml' (str)")


SECRET = "supersecretvalue-abcdef-0123456789"


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_a_schema_file_outside_the_pipelines_folder_is_refused_without_reading_it(tmp_path, how):
    # A secrets file the DAG processor can read: the loader once printed its content in the import error.
    secret = tmp_path / "secrets" / "jwt_secret"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    value = {"absolute": str(secret), "dotdot": "../secrets/jwt_secret", "symlink": "schemas/linked.yaml"}[how]
    path = _schema_files(tmp_path, TRANSFORM["schema"], value)
    (tmp_path / "pipes" / "schemas" / "linked.yaml").symlink_to(secret)
    for field in ("transform.schema_file", "transform.value_schema.file"):
        data = _transform_config(**{"transform.schema": DELETE, "transform.schema_file": value})
        if field.endswith("value_schema.file"):
            data = _transform_config(**{"transform.format": "avro", "transform.value_schema": {"file": value}})
        path = _write(tmp_path / "pipes", data)
        err = _error(path)
        assert err.field == field, str(err)
        assert SECRET not in str(err) and "supersecret" not in str(err)
        assert f"resolves to {secret}, outside the pipelines folder {tmp_path / 'pipes'}" in err.problem
        assert "KDE_PIPELINE_FILE_ROOTS" in err.problem  # the fix


def test_a_root_the_operator_lists_lets_a_pipeline_file_name_a_schema_there(tmp_path, monkeypatch):
    shared = tmp_path / "shared-schemas"
    shared.mkdir()
    _write(shared, TRANSFORM["schema"], "orders.schema.yaml")
    path = _schema_files(tmp_path, TRANSFORM["schema"], str(shared / "orders.schema.yaml"))
    assert "outside the pipelines folder" in _error(path).problem
    monkeypatch.setenv(settings.PIPELINE_FILE_ROOTS_ENV, str(shared))
    assert load_pipeline(path).transform == TRANSFORM_SPEC


@pytest.mark.parametrize("kind", ["device", "fifo", "large"])
def test_a_schema_file_that_is_not_a_bounded_regular_file_is_refused_before_it_is_read(tmp_path, monkeypatch, kind):
    import os

    path = _schema_files(tmp_path, TRANSFORM["schema"], "schemas/odd.yaml")
    odd = tmp_path / "pipes" / "schemas" / "odd.yaml"
    if kind == "device":  # /dev/zero once hung the DAG processor: only a file under a listed root may be read
        monkeypatch.setenv(settings.PIPELINE_FILE_ROOTS_ENV, "/dev")
        odd.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.write_text("a: string\n" + "#" * (2 << 20))
    data = _transform_config(**{"transform.format": "avro", "transform.value_schema": {"file": "schemas/odd.yaml"}})
    err = _error(_write(tmp_path / "pipes", data))  # the value_schema path: the schema_file one checks is_file first
    assert err.field == "transform.value_schema.file"
    assert ("is not a regular file" if kind != "large" else "over the 1048576 a schema file may hold") in err.problem
    assert path.exists()


def test_a_pipeline_file_that_links_outside_its_folder_is_refused_unread(tmp_path):
    secret = tmp_path / "elsewhere.yaml"
    secret.write_text(f"name: {SECRET}\n")
    (tmp_path / "pipes").mkdir()
    (tmp_path / "pipes" / "orders.yaml").symlink_to(secret)
    configs, errors = load_pipelines(tmp_path / "pipes")
    assert configs == {} and SECRET not in str(errors)
    assert "resolves to" in next(iter(errors.values())) and "outside the pipelines folder" in next(iter(errors.values()))


def test_schema_file_that_is_a_folder_is_refused(tmp_path):
    err = _error(_schema_files(tmp_path, TRANSFORM["schema"], "schemas"))
    assert err.field == "transform.schema_file" and "which is not a file" in err.problem


@pytest.mark.parametrize(
    ("schema", "field", "problem"),
    [
        (
            {**TRANSFORM["schema"], "amount": {"type": "money"}},
            "amount.type",
            "expected a field type: one of string",
        ),
        ({**TRANSFORM["schema"], "status": "strng"}, "status", "did you mean 'string'?"),
        ({**TRANSFORM["schema"], "quantity": {"type": "int", "maximum": "x"}}, "quantity.maximum", "a number"),
        ({**TRANSFORM["schema"], "currency": {"type": "string", "alowed": []}}, "currency.alowed", "unknown key"),
        ({**TRANSFORM["schema"], "_ts": "timestamp"}, "_ts", "reserved for silver's own columns"),
        (["order_id"], "(top level)", "expected a non-empty mapping of field names"),
        ("", "(top level)", "got null"),
        ("order_id: {type: string\n", "line 2, column 1", "expected valid YAML"),
    ],
)
def test_error_inside_the_schema_file_names_that_file(tmp_path, schema, field, problem):
    _schema_files(tmp_path, schema)
    schema_path = tmp_path / "pipes" / "schemas" / "orders.schema.yaml"
    err = _error(tmp_path / "pipes" / "orders.yaml")
    assert (err.file, err.field) == (str(schema_path), field), str(err)
    assert str(err).startswith(f"{schema_path}: {field}: ")
    assert problem in err.problem


def test_key_and_ordering_checked_against_the_schema_file(tmp_path):
    path = _schema_files(tmp_path, {"id": "string", "ts": "timestamp"})
    err = _error(path)  # TRANSFORM's key is order_id, not declared in the file
    schema_path = tmp_path / "pipes" / "schemas" / "orders.schema.yaml"
    assert (err.file, err.field) == (str(path), "transform.key")
    assert f"expected the name of a field declared in the schema file {schema_path}, got 'order_id'" in str(err)


def test_schema_file_in_the_project_is_shown_relative_to_it(tmp_path, monkeypatch):
    # An error inside a schema file names it the way pipeline files are named: relative to the project.
    monkeypatch.setattr(settings, "PROJECT_ROOT", tmp_path)
    _schema_files(tmp_path, {**TRANSFORM["schema"], "amount": {"type": "money"}})
    err = _error(tmp_path / "pipes" / "orders.yaml")
    assert (err.file, err.field) == ("pipes/schemas/orders.schema.yaml", "amount.type")
    assert str(err).startswith("pipes/schemas/orders.schema.yaml: amount.type: expected a field type")


# --------------------------------------------------------------------------- silver table paths


def test_silver_paths_default_beside_bronze_even_without_a_transform(tmp_path):
    cfg = load_pipeline(_write(tmp_path, _set("tables.lakehouse_root", "/lake")))
    assert cfg.transform is None
    assert (cfg.tables.silver_path, cfg.tables.quarantine_path, cfg.tables.transform_checkpoint_root) == (
        "/lake/orders/silver",
        "/lake/orders/quarantine",
        "/lake/orders/_checkpoints/silver",
    )


@pytest.mark.parametrize(
    ("tables", "field", "problem"),
    [
        (
            {"bronze_path": "/lake/b", "silver_path": "/lake/b/silver"},
            "tables.silver_path",
            "expected a location apart from the bronze table (neither inside the other), "
            "got '/lake/b/silver' with tables.bronze_path '/lake/b'",
        ),
        (
            {"silver_path": "/lake/s", "quarantine_path": "/lake/s"},
            "tables.quarantine_path",
            "expected a location apart from the silver table",
        ),
        (
            {"checkpoint_root": "/cp", "transform_checkpoint_root": "/cp/silver"},
            "tables.transform_checkpoint_root",
            "expected a folder apart from the bronze checkpoint folder (neither inside the other), "
            "got '/cp/silver' with tables.checkpoint_root '/cp'",
        ),
        (
            {"ledger_path": "/lake/runs", "transform_checkpoint_root": "/lake/runs/_cp"},
            "tables.transform_checkpoint_root",
            "expected a folder apart from the run ledger",
        ),
        (
            {"silver_path": "/lake/s", "ledger_path": "/lake/s/_runs"},
            "tables.silver_path",
            "expected a location apart from the run ledger",
        ),
        (
            # Only the bronze path is set; the silver default is inside it: the key set is reported.
            {"lakehouse_root": "/lake", "bronze_path": "/lake/orders"},
            "tables.bronze_path",
            "expected a location apart from the bronze checkpoint folder (neither inside the other), "
            "got '/lake/orders' with tables.checkpoint_root '/lake/orders/_checkpoints/bronze'",
        ),
        (
            {"lakehouse_root": "/lake", "quarantine_path": "/lake/orders/silver/_q"},
            "tables.quarantine_path",
            "expected a location apart from the silver table",
        ),
    ],
)
def test_overlapping_table_locations_are_rejected(tmp_path, tables, field, problem):
    path = _write(tmp_path, _config(**{f"tables.{k}": v for k, v in tables.items()}))
    err = _error(path)
    assert (err.file, err.field) == (str(path), field), str(err)
    assert problem in err.problem


def test_shared_silver_table_is_an_error_of_the_second_file(tmp_path):
    _write(tmp_path, _set("tables.silver_path", "/lake/shared"), "a.yaml")
    second = _write(tmp_path, _set("tables.silver_path", "/lake/shared"), "b.yaml")
    configs, errors = load_pipelines(tmp_path)
    assert list(configs) == ["a"]
    assert errors[str(second)].startswith(f"{second}: tables.silver_path: expected the silver table apart from every "
                                          "location of the other pipelines")  # fmt: skip


@pytest.mark.parametrize(("section", "field", "message"), [
    ({"every_runs": 0}, "maintenance.every_runs", "expected a positive integer, got 0 (int)"),
    ({"daily_window": "25:00-01:00"}, "maintenance.daily_window", "expected a daily UTC window HH:MM-HH:MM"),
    ({"daily_window": "02:00-02:00"}, "maintenance.daily_window", "whose start and end differ"),
    ({"vacuum": "yes"}, "maintenance.vacuum", "expected true or false, got 'yes' (str)"),
    ({"every_rus": 3}, "maintenance.every_rus", "did you mean 'every_runs'?"),
    ({"zorder_by": {"gold": ["x"]}}, "maintenance.zorder_by.gold", "expected bronze or silver"),
    ({"zorder_by": {"bronze": ["value"]}}, "maintenance.zorder_by.bronze", "expected columns among topic, partition"),
    ({"zorder_by": {"silver": []}}, "maintenance.zorder_by.silver", "expected a non-empty list of distinct column"),
    ({"zorder_by": {"silver": ["custmer_id"]}}, "maintenance.zorder_by.silver",
     "expected fields of transform.schema (amount, currency, customer_id, event_time, order_id, status), got "
     "'custmer_id'; did you mean 'customer_id'?"),
])  # fmt: skip
def test_a_bad_maintenance_section_names_the_field_and_what_was_expected(tmp_path, section, field, message):
    path = tmp_path / "orders.yaml"
    path.write_text(EXAMPLE.read_text().replace("maintenance:\n", "old_maintenance:\n") + "\n"
                    + yaml.safe_dump({"maintenance": section}))  # fmt: skip
    data = yaml.safe_load(path.read_text())
    data.pop("old_maintenance")
    path.write_text(yaml.safe_dump(data))  # keys sorted: the schema's fields too
    with pytest.raises(PipelineConfigError) as err:
        load_pipeline(path)
    assert f"{field}: " in str(err.value) and message in str(err.value), str(err.value)


def test_maintenance_is_on_by_default_and_off_with_both_nulls(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("kafka: {connection_id: k, topics: [t]}\nschedule: null\n")
    assert load_pipeline(path).maintenance.enabled and load_pipeline(path).maintenance.every_runs == 50
    path.write_text("kafka: {connection_id: k, topics: [t]}\nschedule: null\nmaintenance: {every_runs: null}\n")
    assert not load_pipeline(path).maintenance.enabled
    path.write_text("kafka: {connection_id: k, topics: [t]}\nschedule: null\nmaintenance: {zorder_by: {silver: [a]}}\n")
    with pytest.raises(PipelineConfigError, match="maintenance.zorder_by.silver: expected no silver Z-order"):
        load_pipeline(path)


# --------------------------------------------------------------------------- transform.format and value_schema

_AVSC = {"type": "record", "name": "Payment", "namespace": "shop", "fields": [
    {"name": "payment_id", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "paid_at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}  # fmt: skip


def _avro_file(tmp_path: Path, value_schema: Any, fmt: str = "avro", topics: Any = ("payments",),
               fields: Any = None) -> Path:  # fmt: skip
    (tmp_path / "schemas").mkdir(exist_ok=True)
    (tmp_path / "schemas" / "payment.avsc").write_text(json.dumps(_AVSC))
    transform = {"format": fmt, "schema": fields or {"payment_id": "string", "amount": "double", "paid_at": "timestamp"},
                 "key": "payment_id", "ordering": "paid_at"}  # fmt: skip
    if value_schema is not None:
        transform["value_schema"] = value_schema
    return _write(tmp_path, {"kafka": {"connection_id": "k", "topics": list(topics)}, "schedule": None,
                             "transform": transform}, "payments.yaml")  # fmt: skip


def test_an_avro_schema_file_is_read_into_the_spec_from_the_pipeline_files_folder(tmp_path):
    spec = load_pipeline(_avro_file(tmp_path, {"file": "schemas/payment.avsc"})).transform
    assert spec.format == "avro" and json.loads(spec.value_schema.text) == _AVSC
    assert spec.value_schema.file.endswith("schemas/payment.avsc") and spec.value_schema.registry is None
    assert TransformSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


@pytest.mark.parametrize(("value_schema", "topics", "subject", "version"), [
    ({"registry": "sr"}, ["payments"], "payments-value", None),
    ({"registry": "sr", "version": 3}, ["payments"], "payments-value", 3),
    ({"registry": "sr", "version": "latest"}, ["payments"], "payments-value", None),
    ({"registry": "sr", "subject_strategy": "record_name", "record_name": "shop.Payment"}, ["a", "b"],
     "shop.Payment", None),
    ({"registry": "sr", "subject_strategy": "topic_record_name", "record_name": "shop.Payment"}, ["payments"],
     "payments-shop.Payment", None),
    ({"registry": "sr", "subject": "custom"}, ["a", "b"], "custom", None),
])  # fmt: skip
def test_a_registry_names_the_reader_schemas_subject_and_version(tmp_path, value_schema, topics, subject, version):
    vs = load_pipeline(_avro_file(tmp_path, value_schema, topics=topics)).transform.value_schema
    assert (vs.registry, vs.subject, vs.version, vs.text) == ("sr", subject, version, None)


@pytest.mark.parametrize(("value_schema", "fmt", "topics", "field", "message"), [
    (None, "avro", ["p"], "transform.value_schema", "expected a value_schema section for format avro"),
    ({"registry": "sr"}, "json", ["p"], "transform.value_schema", "expected no value_schema for format json"),
    ({"file": "schemas/payment.avsc", "registry": "sr"}, "avro", ["p"], "transform.value_schema",
     "expected exactly one of transform.value_schema.file"),
    ({}, "avro", ["p"], "transform.value_schema", "got neither"),
    ({"file": "schemas/payment.avsc"}, "json_schema", ["p"], "transform.value_schema.file",
     "expected registry for format json_schema"),
    ({"file": "schemas/missing.avsc"}, "avro", ["p"], "transform.value_schema.file",
     "schemas/missing.avsc': No such file or directory"),
    ({"file": "schemas/payment.avsc", "version": 2}, "avro", ["p"], "transform.value_schema.version",
     "expected no version with a schema file"),
    ({"registry": "sr"}, "avro", ["a", "b"], "transform.value_schema.subject_strategy",
     "expected one topic in kafka.topics for subject strategy topic_name (the subject is named after the topic), "
     "got 2; set transform.value_schema.subject"),
    ({"registry": "sr", "subject_strategy": "record_name"}, "avro", ["p"], "transform.value_schema.record_name",
     "expected the record's full name (e.g. shop.Order) for subject strategy record_name, got none"),
    ({"registry": "sr", "subject_strategy": "topic"}, "avro", ["p"], "transform.value_schema.subject_strategy",
     "expected one of 'topic_name', 'record_name', 'topic_record_name', got 'topic' (str)"),
    ({"registry": "sr", "version": 0}, "avro", ["p"], "transform.value_schema.version",
     "expected 'latest' or a registered version number (a positive integer), got 0 (int)"),
    ({"file": "schemas/payment.avsc"}, "protobuf", ["p"], "transform.value_schema.file",
     "expected registry for format protobuf (its values carry registry schema ids), got a schema file"),
    (None, "protobuf", ["p"], "transform.value_schema", "expected a value_schema section for format protobuf"),
])  # fmt: skip
def test_a_bad_value_schema_names_the_field_and_what_was_expected(tmp_path, value_schema, fmt, topics, field, message):
    err = str(_error(_avro_file(tmp_path, value_schema, fmt, topics)))
    assert f"{field}: " in err and message in err, err


def test_protobuf_values_are_read_through_a_registry_and_never_as_change_events(tmp_path):
    spec = load_pipeline(_avro_file(tmp_path, {"registry": "sr"}, "protobuf")).transform
    assert (spec.format, spec.value_schema.registry, spec.value_schema.subject) == ("protobuf", "sr", "payments-value")
    cdc = _write(tmp_path, {"kafka": {"connection_id": "k", "topics": ["db.public.orders"]}, "schedule": None,
                            "transform": {"format": "protobuf", "envelope": "debezium", "value_schema": {"registry": "sr"},
                                          "schema": {"id": "long"}, "key": "id"}}, "cdc.yaml")  # fmt: skip
    err = str(_error(cdc))
    assert "transform.format: expected format json or avro with transform.envelope" in err, err


def test_a_field_the_avro_record_lacks_is_refused_with_the_records_fields(tmp_path):
    err = str(_error(_avro_file(tmp_path, {"file": "schemas/payment.avsc"},
                                fields={"payment_id": "string", "amout": "double", "paid_at": "timestamp"})))  # fmt: skip
    assert "transform.schema.amout: expected a field of the Avro record in" in err
    assert "(payment_id, amount, paid_at), got 'amout'; did you mean 'amount'?" in err


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "to hold JSON"),
    ('{"type": "enum", "name": "E", "symbols": ["A"]}', "to hold a record schema"),
])  # fmt: skip
def test_an_avro_schema_file_that_is_not_a_record_schema_is_refused(tmp_path, content, message):
    path = _avro_file(tmp_path, {"file": "schemas/payment.avsc"})
    (tmp_path / "schemas" / "payment.avsc").write_text(content)
    err = str(_error(path))
    assert "transform.value_schema.file: expected the Avro schema file" in err and message in err, err
