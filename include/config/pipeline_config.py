"""Pipeline configuration: one YAML file per pipeline, typed and validated when loaded.

A pipeline file (``include/pipelines/<name>.yaml``) declares what one Airflow
DAG ingests and how: topics, starting position, tables, schedule, lag
thresholds, data-loss policy, cluster profile and, optionally, how bronze
records become silver rows (the ``transform`` section). :func:`load_pipeline` turns it
into a frozen :class:`PipelineConfig` or raises :class:`PipelineConfigError`
whose message names the file, the field and what was expected against what
was found, e.g.::

    include/pipelines/orders.yaml: kafka.max_offsets_per_trigger: expected a positive integer, got 'lots' (str)

The file is read by pydantic models: :class:`PipelineFile` and its sections.
Their ``Field(description=...)`` texts are the configuration reference, and
``docs/pipeline.schema.json`` is generated from them
(``python -m include.config.pipeline_config --schema``). The ``kafka``, ``lag``,
``cluster`` and ``cluster.kubernetes`` sections load as they are written, so
their models are also what the rest of the project reads; ``tables``,
``transform`` and the top level have defaults that depend on the pipeline's
name, the environment or another file, so they load into
:class:`TablesConfig`, :class:`~include.contract.transform_spec.TransformSpec` and
:class:`PipelineConfig`.

Every check raises a pydantic error carrying this project's own message
("expected ..., got ..."): YAML has no types beyond what it guesses, and a
user needs "write the number without quotes", not "Input should be a valid
integer". :func:`load_pipeline` turns pydantic's ``ValidationError`` into one
line per problem.

The DAG factory calls :func:`load_pipelines` while Airflow parses DAG files, so
this module imports only the standard library, PyYAML, pydantic, croniter,
:mod:`include.settings`, :mod:`include.contract.transform_spec` and
:mod:`include.contract.maintenance`: no Kafka, Spark or
Airflow, no network.

Broker addresses and security settings never appear in a pipeline file; they
live in the Airflow connection named by ``kafka.connection_id``. Keys that look
like them are rejected wherever they appear.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

import yaml
from croniter import CroniterBadTypeRangeError, CroniterError, croniter
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic_core import ArgsKwargs, PydanticCustomError, PydanticUseDefault

from include import settings
from include.contract import jobs
from include.contract.errors import PipelineError
from include.contract.maintenance import Window
from include.contract.transform_spec import (
    DEFAULT_MAX_VALUE_BYTES,
    FIELD_NAME,
    FORMATS,
    KEY_TYPES,
    NEW_FIELD_POLICIES,
    NUMERIC_TYPES,
    ORDERING_TYPES,
    SCHEMA_FORMATS,
    SIMPLE_TYPES,
    SUBJECT_STRATEGIES,
    SYSTEM_PREFIX,
    TOMBSTONE_POLICIES,
    FieldSpec,
    TransformSpec,
    ValueSchema,
    is_decimal,
    normalize_type,
    subject_name,
)

#: Prefix of the consumer group that mirrors a pipeline's offsets (``kafka-delta-elt.<name>``).
CONSUMER_GROUP_PREFIX = "kafka-delta-elt."
#: Delta's own defaults for ``delta.logRetentionDuration`` and
#: ``delta.deletedFileRetentionDuration``; the second is also the floor
#: (VACUUM's safety check refuses less).
DEFAULT_LOG_RETENTION_DAYS = 30
DEFAULT_DELETED_FILE_RETENTION_DAYS = 7
#: Environment variable overriding the default ``tables.lakehouse_root``.
LAKEHOUSE_ROOT_ENV = "KDE_LAKEHOUSE_ROOT"

STARTING_OFFSETS = ("earliest", "latest")
DATA_LOSS_POLICIES = ("fail", "record_and_continue")
CLUSTER_PROFILES = ("local_standalone", "existing_master", "kubernetes")
#: ``cluster.kubernetes.delete_driver_pod`` choices: when the operator removes a finished driver pod.
DRIVER_POD_DELETION = ("on_success", "always", "never")
#: Airflow's cron presets (``airflow.utils.dates.cron_presets``). ``@once`` and
#: ``@continuous`` are left out: a pipeline runs on a cron or by hand (null).
SCHEDULE_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
#: ``--run-type`` choices of ``spark_jobs/kafka_to_bronze.py``, defined once in the job's contract.
RUN_TYPES = jobs.RUN_TYPES

#: Same rule as the job's ``--pipeline`` (``spark_jobs.ingest_plan``), which is
#: also a valid Airflow dag_id (``^[\w.-]+$``, at most 250 characters); the
#: length cap leaves room for a prefix or suffix the DAG factory may add.
NAME_MAX_LEN = 200
_NAME = jobs.PIPELINE_NAME
#: Kafka's legal topic names (``org.apache.kafka.common.internals.Topic``).
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
#: Airflow's ``RE_SANITIZE_CONN_ID`` and ``CONN_ID_MAX_LEN``.
_CONN_ID = re.compile(r"^[\w#!()\-.:/\\]{1,250}$")
_BROKER_LIST = re.compile(r"^[\w.-]+:\d+(,\s*[\w.-]+:\d+)*$")
#: Airflow's ``TAG_MAX_LEN``.
TAG_MAX_LEN = 100
_OPTION_KEY = re.compile(r"^[a-z][a-z0-9]*(\.[a-z0-9]+)*$")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_MEMORY = re.compile(r"^(\d+)([kmgt])b?$", re.IGNORECASE)
#: Kubernetes names: a DNS-1123 label (namespaces) and subdomain (service
#: accounts, claims, secrets); secret keys are file names.
_K8S_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_K8S_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_K8S_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_IMAGE = re.compile(r"^[^\s]+$")
#: Spark refuses executors with less than 1.5 x its 300 MiB reserved memory.
_MIN_MEMORY_BYTES = 450 * 1024**2
#: Largest ``transform.max_value_bytes``: 64 MiB.
MAX_VALUE_BYTES_LIMIT = 64 * 1024**2
#: Where the project lives inside the Kubernetes image (``cluster.kubernetes.app_dir``).
DEFAULT_APP_DIR = "/opt/kafka-delta-elt"

#: Consumer settings a pipeline file may not set in ``kafka.options``, and why.
_MANAGED_OPTIONS = {
    "group.id": "the pipeline's consumer group is managed by the pipeline, not by the Spark source",
    "auto.offset.reset": "use kafka.starting_offsets instead",
    "enable.auto.commit": "Spark's Kafka source refuses it; offsets are tracked in the bronze table",
    "key.deserializer": "Spark's Kafka source refuses it; keys and values are always read as bytes",
    "value.deserializer": "Spark's Kafka source refuses it; keys and values are always read as bytes",
    "interceptor.classes": "Spark's Kafka source refuses it",
    "isolation.level": "the ingestion job always reads with read_committed",
}
_SECRET_WORDS = (
    "password",
    "secret",
    "jaas",
    "keystore",
    "truststore",
    "credential",
    "token",
    "api.key",
    "apikey",
    "username",
)
_CONNECTION_KEYS = ("bootstrap.servers", "bootstrap", "brokers", "security.protocol", "sasl", "ssl")

#: The tables and folders of ``tables`` that must lie apart: key, default
#: path under ``<lakehouse_root>/<name>``, what it is, and whether it is a
#: folder (checkpoints) or a table location. An overlap is reported on the
#: later key of a pair, unless only the earlier one was set in the file.
_TABLE_LOCATIONS = (
    ("bronze_path", ("bronze",), "the bronze table", False),
    ("checkpoint_root", ("_checkpoints", "bronze"), "the bronze checkpoint folder", True),
    ("ledger_path", ("_runs",), "the run ledger", False),
    ("silver_path", ("silver",), "the silver table", False),
    ("quarantine_path", ("quarantine",), "the quarantine table", False),
    ("transform_checkpoint_root", ("_checkpoints", "silver"), "the transform checkpoint folder", True),
)
#: What profile ``kubernetes`` needs in ``cluster.kubernetes``.
_KUBERNETES_REQUIRED = ("image", "namespace", "service_account", "shared_volume_claim", "shared_dir")
#: What ``existing_master`` (client mode) may set there: the executors' image and namespace.
_KUBERNETES_CLIENT_KEYS = ("image", "namespace")
#: Table locations the pods of profile ``kubernetes`` read or write: key, and
#: whether a URI is allowed (checkpoints are read with local file I/O).
_POD_LOCATIONS = (
    ("bronze_path", True),
    ("checkpoint_root", False),
    ("silver_path", True),
    ("quarantine_path", True),
    ("transform_checkpoint_root", False),
)
_TYPE_EXPECTED = (
    f"a field type: one of {', '.join(SIMPLE_TYPES)}, or decimal(p,s) with precision p "
    "from 1 to 38 and scale s from 0 to p"
)
#: Other spellings of a field type, for the did-you-mean of an unknown type.
_TYPE_ALIASES = {
    "str": "string",
    "text": "string",
    "varchar": "string",
    "integer": "int",
    "bigint": "long",
    "float": "double",
    "number": "double",
    "bool": "boolean",
    "datetime": "timestamp",
    "decimal": "decimal(p,s)",
    "numeric": "decimal(p,s)",
    "object": "json",
}
_NAME_EXPECTED = (
    f"letters, digits, '_', '.' or '-', starting with a letter or digit, at most {NAME_MAX_LEN} characters"
)
_FIELD_NAME_EXPECTED = (
    "a field name (letters, digits and '_', starting with a letter, at most 128 characters)"
)
_SCHEDULE_EXPECTED = (
    "a 5-field cron expression (minute hour day-of-month month day-of-week), "
    f"one of {', '.join(SCHEDULE_PRESETS)}, or null for manual runs only"
)


class PipelineConfigError(PipelineError, ValueError):
    """A pipeline file is invalid. The message is ``<file>: <field>: <what was expected, what was found>``.

    One line per problem: ``file``, ``field`` and ``problem`` are the first
    one's, ``more`` holds the others (pydantic checks every key, not only up
    to the first bad one).
    """

    def __init__(
        self, file: str, field: str, problem: str, more: Sequence[PipelineConfigError] = ()
    ) -> None:
        self.file = file
        self.field = field
        self.problem = problem
        self.more = tuple(more)
        lines = [f"{file}: {field}: {problem}", *(f"{e.file}: {e.field}: {e.problem}" for e in self.more)]
        super().__init__("\n".join(lines))

    def __reduce__(self):  # keeps the error picklable despite the custom __init__
        return (type(self), (self.file, self.field, self.problem, self.more))


# --------------------------------------------------------------------------- how a check reports

#: Error type of every check below; its context carries the message and where below the value it applies.
_PROBLEM = "pipeline_file"


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


#: Stands for a required key the file leaves out, so that the key's own check
#: says what it expected (pydantic's "Field required" would not).
_MISSING: Any = _Missing()


def _problem(text: str, at: str = "") -> PydanticCustomError:
    """A validation error with this project's message.

    ``at`` continues the field path below the value being checked (``.topics``,
    ``['group.id']``, ``[2]``): checks that look inside a mapping or list say
    which entry is wrong.
    """
    return PydanticCustomError(_PROBLEM, "{problem}", {"problem": text, "at": at})


def _invalid(expected: str, value: Any, hint: str = "", at: str = "") -> PydanticCustomError:
    """The usual problem: ``expected <expected>, got <value> (<type>)<hint>``."""
    return _problem(f"expected {expected}, got {_describe(value)}{hint}", at)


def _describe(value: Any) -> str:
    if value is _MISSING:
        return "nothing (the key is missing)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (bool)"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def _choices(values: Sequence[str]) -> str:
    return ", ".join(repr(v) for v in values)


def _did_you_mean(word: Any, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, candidates, n=1) if isinstance(word, str) else []
    return f"; did you mean {close[0]!r}?" if close else ""


def _unquote_hint(value: Any) -> str:
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+(\.\d+)?\s*", value):
        return "; write the number without quotes"
    return ""


def _suffix(key: Any) -> str:
    """How ``key`` continues a field path: ``.name`` for plain names, ``['a.b']`` or ``[0]`` otherwise."""
    if isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f".{key}"
    return f"[{key!r}]"


def _is_connection_setting(key: str) -> bool:
    """Whether ``key`` names a broker address or security setting, in any spelling."""
    k = key.strip().lower().replace("_", ".").replace("-", ".")
    k = k.removeprefix("kafka.")
    return (
        k in _CONNECTION_KEYS or k.startswith(("sasl.", "ssl.")) or any(word in k for word in _SECRET_WORDS)
    )


def _connection_setting_problem(key: str) -> str:
    return (
        f"expected no broker addresses or security settings in a pipeline file, got {key!r}; "
        "put them in the Airflow connection named by kafka.connection_id"
    )


def _check_keys(value: Any, keys: Sequence[str], expected: str, at: str = "") -> dict[str, Any]:
    """``value`` as a mapping whose keys are all in ``keys``; what every section of the file gets."""
    if not isinstance(value, dict):
        raise _invalid(expected, value, at=at)
    for key in value:
        key_at = at + _suffix(key)
        if not isinstance(key, str):
            raise _invalid("a text key (quote it)", key, at=key_at)
        if key in keys:
            continue
        # A declared key is never a connection setting, even when its name
        # holds such a word (cluster.kubernetes.kafka_options_secret).
        if _is_connection_setting(key):
            raise _problem(_connection_setting_problem(key), key_at)
        raise _problem(
            f"expected one of {', '.join(keys)}, got unknown key {key!r}{_did_you_mean(key, keys)}", key_at
        )
    return value


# --------------------------------------------------------------------------- value types
#
# Each is the type pydantic (and the JSON Schema) sees, plus a check that
# runs first on the value as YAML gave it and raises this project's message.


def _integer(low: int, high: int | None = None, expected: str | None = None) -> Any:
    """An integer from ``low`` (to ``high``); YAML booleans and quoted numbers are refused."""
    if expected is None:
        if high is not None:
            expected = f"an integer from {low} to {high}"
        else:
            expected = "a positive integer" if low == 1 else f"an integer >= {low}"

    def check(value: Any) -> int:
        in_range = isinstance(value, int) and low <= value and (high is None or value <= high)
        if isinstance(value, bool) or not in_range:
            raise _invalid(expected, value, _unquote_hint(value))
        return value

    return Annotated[int, Field(ge=low, le=high), BeforeValidator(check)]


def _choice(choices: tuple[str, ...]) -> Any:
    """One of ``choices``, spelled exactly (``Fail`` is not ``fail``, but gets a did-you-mean)."""

    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise _invalid(f"one of {_choices(choices)}", value, _did_you_mean(value, choices))
        return value

    return Annotated[Literal[choices], BeforeValidator(check)]


def _text(expected: str = "a non-empty string") -> Any:
    """A non-empty string, stripped."""

    def check(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _invalid(expected, value)
        return value.strip()

    return Annotated[str, BeforeValidator(check)]


def _matching(pattern: re.Pattern[str], expected: str, if_null: str | None = None) -> Any:
    """A string ``pattern`` matches whole; null stands for ``if_null`` when one is given."""

    def check(value: Any) -> str:
        if value is None and if_null is not None:
            return if_null
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise _invalid(expected, value)
        return value

    return Annotated[str, BeforeValidator(check)]


def _connection_id(what: str) -> Any:
    """The id of an Airflow connection: never the broker or master addresses themselves."""
    expected = f"the id of an Airflow {what} connection"

    def check(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _invalid(expected, value)
        conn = value.strip()
        if _BROKER_LIST.fullmatch(conn):
            hint = "; that looks like broker addresses, which belong in the connection itself"
            raise _invalid(expected, value, hint)
        if not _CONN_ID.fullmatch(conn):
            raise _invalid(f"{expected} (letters, digits and #!()-.:/\\_, at most 250 characters)", value)
        return conn

    return Annotated[str, BeforeValidator(check)]


def _folder(if_null: str | None = None) -> Any:
    """An absolute path inside a container (no URI); null stands for ``if_null`` when one is given."""

    def check(value: Any) -> str:
        if value is None and if_null is not None:
            return if_null
        if not isinstance(value, str) or not value.startswith("/") or "//" in value or ":" in value:
            raise _invalid("an absolute path (e.g. /mnt/kde)", value)
        return os.path.normpath(value)

    return Annotated[str, BeforeValidator(check)]


def _check_name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value) or len(value) > NAME_MAX_LEN:
        raise _invalid(_NAME_EXPECTED, value)
    return value


def _check_string(value: Any) -> str:
    if not isinstance(value, str):
        raise _invalid("a string", value)
    return value


@dataclass(frozen=True)
class _NotOneSource:
    """Stands for ``kafka.topics`` when it and ``kafka.topic_pattern`` are both given, or neither."""

    found: str


def _check_topics(value: Any) -> tuple[str, ...]:
    if isinstance(value, _NotOneSource):
        raise _problem(
            "expected exactly one of kafka.topics (a list of names) and "
            f"kafka.topic_pattern (a regex), got {value.found}"
        )
    if value is None:  # kafka.topic_pattern is used instead
        return ()
    if not isinstance(value, (list, tuple)) or not value:
        hint = f"; write [{value}]" if isinstance(value, str) else ""
        raise _invalid("a non-empty list of topic names", value, hint)
    for i, topic in enumerate(value):
        if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
            expected = "a Kafka topic name (letters, digits, '.', '_', '-'; at most 249 characters)"
            raise _invalid(expected, topic, at=f"[{i}]")
        if topic in value[:i]:
            raise _invalid("each topic once", topic, " a second time", at=f"[{i}]")
    return tuple(value)


def _check_topic_pattern(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _invalid("a regular expression of topic names", value)
    try:
        re.compile(value.strip())
    except re.error as exc:
        raise _invalid(f"a valid regular expression ({exc})", value) from None
    return value.strip()


def _check_options(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _invalid("a mapping of Kafka consumer settings to string values", value)
    for key, setting in value.items():
        at = f"[{key!r}]"  # setting names hold dots: always bracketed
        if not isinstance(key, str):
            raise _invalid("a text key (quote it)", key, at=at)
        if _is_connection_setting(key):
            raise _problem(_connection_setting_problem(key), at)
        if key.startswith("kafka."):
            expected = "a Kafka setting name without the 'kafka.' prefix (the job adds it)"
            raise _invalid(expected, key, at=at)
        if key in _MANAGED_OPTIONS:
            raise _invalid("a setting the pipeline does not manage", key, f": {_MANAGED_OPTIONS[key]}", at=at)
        if not _OPTION_KEY.fullmatch(key):
            expected = (
                "a Kafka consumer setting name (lower-case words joined by dots, e.g. 'max.poll.records')"
            )
            raise _invalid(expected, key, at=at)
        if not isinstance(setting, str):
            hint = " (quote the value)" if isinstance(setting, (int, float, bool)) else ""
            raise _invalid("a string value", setting, hint, at=at)
    return dict(value)


def _check_minutes(value: Any) -> float:
    positive = isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    if isinstance(value, bool) or not positive:
        raise _invalid("a positive number of minutes", value, _unquote_hint(value))
    return float(value)


def _check_memory(value: Any) -> str:
    expected = "a Spark size with a unit, like '512m' or '2g', of at least 450m"
    match = _MEMORY.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise _invalid(expected, value)
    amount, unit = int(match.group(1)), match.group(2).lower()
    if amount * 1024 ** "kmgt".index(unit) * 1024 < _MIN_MEMORY_BYTES:
        raise _invalid(expected, value, "; Spark refuses executors below 450m")
    return f"{amount}{unit}"


def _check_tags(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise _invalid("a list of strings", value)
    for i, tag in enumerate(value):
        if not isinstance(tag, str) or not tag.strip() or len(tag) > TAG_MAX_LEN:
            raise _invalid(f"a non-empty string of at most {TAG_MAX_LEN} characters", tag, at=f"[{i}]")
        if tag in value[:i]:
            raise _invalid("each tag once", tag, " a second time", at=f"[{i}]")
    return tuple(value)


# --------------------------------------------------------------------------- cron

#: Cron's five fields: name, lowest and highest value, and names standing for low, low + 1, ...
_CRON_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    ("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
    # 0 and 7 are both Sunday, as in cron.
    ("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)


def _check_schedule(value: Any) -> str:
    """A preset, or a 5-field cron expression both croniter (what Airflow runs it with) and cron accept."""
    if not isinstance(value, str) or not value.strip():
        raise _invalid(_SCHEDULE_EXPECTED, value)
    text = value.strip()
    if text.startswith("@"):
        if text not in SCHEDULE_PRESETS:
            raise _invalid(_SCHEDULE_EXPECTED, value)
        return text
    parts = text.split()
    if len(parts) != 5:  # croniter also takes seconds and years, which Airflow's cron does not
        raise _invalid(_SCHEDULE_EXPECTED, value, f": it has {len(parts)} fields")
    for i, part in enumerate(parts):
        problem = _cron_field_problem(i, part)
        if problem:
            raise _invalid(_SCHEDULE_EXPECTED, value, f": {_CRON_FIELDS[i][0]} {part!r}: {problem}")
    expression = " ".join(parts)
    problem = _croniter_problem(expression, expression)
    if problem:
        raise _invalid(_SCHEDULE_EXPECTED, value, f": {problem}")
    return expression


def _cron_field_problem(index: int, part: str) -> str | None:
    """Why field ``index`` of a cron expression is invalid, or ``None``.

    The syntax is an allowlist, as croniter takes more than cron means: it
    runs ``*/70`` in the minute field hourly, wraps ``5-1`` around and takes
    ``0-0`` as a day of the month, ``L1`` as a day of the week and ``W1``.
    Allowed: ``*``, values and names, ``a-b`` ranges forwards, ``/step`` up to
    the field's highest value, lists; ``?``, ``L`` and ``nW`` in
    day-of-month, ``?`` and ``d#n`` in day-of-week. croniter (what Airflow
    runs the schedule with) then has the last word on the field.
    """
    name, low, high, names = _CRON_FIELDS[index]
    for item in part.split(","):
        problem = _cron_item_problem(item, name, low, high, names)
        if problem:
            return problem
    # The field alone, so that croniter's verdict is about this field.
    problem = _croniter_problem(" ".join(part if i == index else "*" for i in range(5)), part)
    return problem and f"{problem}; the field takes {_cron_values(low, high, names)}"


def _cron_item_problem(item: str, name: str, low: int, high: int, names: tuple[str, ...]) -> str | None:
    """Why one comma-separated item of a cron field is outside the allowed syntax, or ``None``."""
    if item == "?" and name in ("day-of-month", "day-of-week"):  # "no specific value"
        return None
    if name == "day-of-month" and (item.upper() == "L" or re.fullmatch(r"\d+[Ww]", item)):
        # L: the month's last day; nW: the weekday nearest day n.
        if item.upper() == "L" or 1 <= int(item[:-1]) <= 31:
            return None
        return f"{item!r} needs a day from 1 to 31"
    if name == "day-of-week" and "#" in item:  # d#n: the n-th such day of the month
        day, _, nth = item.partition("#")
        if _cron_value(day, low, names) not in range(low, high + 1) or nth not in ("1", "2", "3", "4", "5"):
            return f"{item!r} must be a day of the week, '#' and 1-5"
        return None
    base, slash, step = item.partition("/")
    if slash and not (step.isdigit() and 1 <= int(step) <= high):
        return f"step {step!r} must be an integer from 1 to {high}"
    if base == "*":
        return None
    first, dash, last = base.partition("-")
    for text in (first, last) if dash else (first,):
        if _cron_value(text, low, names) not in range(low, high + 1):
            return f"{text!r} is not one of the {_cron_values(low, high, names)}"
    if dash and _cron_value(last, low, names) < _cron_value(first, low, names):
        return f"range {base!r} runs backwards"
    return None


def _cron_value(text: str, low: int, names: tuple[str, ...]) -> int | None:
    if text.isdigit():
        return int(text)
    if text.lower() in names:
        return low + names.index(text.lower())
    return None


def _cron_values(low: int, high: int, names: tuple[str, ...]) -> str:
    return f"values {low}-{high}" + (f" or names like {names[1]!r}" if names else "")


def _croniter_problem(expression: str, shown: str) -> str | None:
    """What croniter says against ``expression``, naming ``shown`` where it names the expression."""
    try:
        croniter(expression)
    except (CroniterError, CroniterBadTypeRangeError) as exc:
        return "croniter refuses it: " + re.sub(r"^\[.*?\]", lambda _: repr(shown), str(exc))
    return None


# --------------------------------------------------------------------------- the sections

#: Unknown keys are errors, so a typo never falls back to a default silently (_check_keys reports them
#: first, with a did-you-mean; "forbid" also puts additionalProperties: false in the JSON Schema).
_SECTION_CONFIG = ConfigDict(extra="forbid")


def _without_default(schema: dict[str, Any]) -> None:
    """JSON Schema of a key that may be left out but not set to null: null is no value to write."""
    schema.pop("default", None)


def _optional(description: str) -> Any:
    """A key that may be left out (then ``None``: the loader works out its value) but not set to null."""
    return Field(None, description=description, json_schema_extra=_without_default)


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class _Section:
    """What every mapping of the file gets before its keys are checked one by one."""

    @model_validator(mode="before")
    @classmethod
    def _read_mapping(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, ArgsKwargs):  # built in code (tests, dataclasses.replace), not read from a file
            return data
        data = cls._check_mapping(cls._shorthand(data))
        fields = cls.__pydantic_fields__
        missing = {key: _MISSING for key, f in fields.items() if f.is_required() and key not in data}
        return cls._check_given({**data, **missing}, info)

    @classmethod
    def _keys(cls) -> tuple[str, ...]:
        return tuple(cls.__pydantic_fields__)

    @classmethod
    def _expected(cls, value: Any) -> str:
        """What the section must be, for a message about ``value``, which is not a mapping."""
        return f"a mapping with keys {', '.join(cls._keys())}"

    @classmethod
    def _check_mapping(cls, data: Any, at: str = "") -> dict[str, Any]:
        return _check_keys(data, cls._keys(), cls._expected(data), at)

    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """The mapping a shorter way of writing the section stands for."""
        return data

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Rules on which keys are given (with null as not given), before their values are checked."""
        return data


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class KafkaConfig(_Section):
    """Where the records come from (section ``kafka``)."""

    connection_id: _connection_id("Kafka") = Field(
        description="Required. Id of the Airflow connection (type kafka) to the Kafka cluster. Bootstrap "
        "servers and every security setting (SASL, SSL, passwords) live in that connection's extra JSON, in "
        "librdkafka's names, never in the pipeline file."
    )
    topics: Annotated[tuple[str, ...], BeforeValidator(_check_topics)] = Field(
        (),
        description="List of topic names to ingest. Give exactly one of topics and topic_pattern.",
    )
    topic_pattern: Annotated[str, BeforeValidator(_check_topic_pattern)] | None = Field(
        None,
        description="Regular expression of topic names to ingest (Spark's subscribePattern; checked with "
        "Python's re, which agrees with Java for ordinary patterns). Give exactly one of topics and "
        "topic_pattern.",
    )
    starting_offsets: _choice(STARTING_OFFSETS) = Field(
        "earliest",
        description="earliest (default) or latest: where partitions start on the pipeline's first run. "
        "Later runs resume where the bronze table stands; partitions and topics found later start at their "
        "earliest offset. latest is fixed once: the first run records Kafka's end offsets in a position commit "
        "(no rows; shown in the task log and the ledger's position_set_json), and every record produced after "
        "it lands.",
    )
    max_offsets_per_trigger: _integer(1) | None = Field(
        None,
        description="Positive integer, or null (default) for no cap: at most this many records per "
        "micro-batch (Spark's maxOffsetsPerTrigger). A larger backlog is written as several Delta commits "
        "in the same run.",
    )
    options: Annotated[dict[str, str], BeforeValidator(_check_options)] = Field(
        default_factory=dict,
        description="Mapping of extra, non-secret Kafka consumer settings, e.g. max.poll.records: \"500\". "
        "Keys are Kafka's own names without a kafka. prefix; values are strings (quote numbers and "
        "booleans). Settings Spark or the pipeline manage (group.id, auto.offset.reset, isolation.level, "
        "deserializers, ...) are refused. Default empty. They override the ingestion job's read defaults "
        "(max.poll.records 10000, max.partition.fetch.bytes 8388608, receive.buffer.bytes 1048576) and reach "
        "the job through an owner-only file, never its command line.",
    )

    @classmethod
    def _expected(cls, value: Any) -> str:
        if value is _MISSING or value is None:  # the section left out: say what it needs
            return "a mapping with connection_id and topics or topic_pattern"
        return super()._expected(value)

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        topics, pattern = data.get("topics"), data.get("topic_pattern")
        if (topics is None) == (pattern is None):
            # Reported by the check of topics, after connection_id's and before the values'.
            data = {**data, "topics": _NotOneSource("both" if topics is not None else "neither")}
        return data


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class TablesSection(_Section):
    """Where the records go (section ``tables``).

    Relative local paths in the file are taken from the project folder (not
    from the working directory, which differs between Airflow's processes);
    URIs such as ``s3a://bucket/lake`` are kept as written. The six tables and
    folders (bronze, silver, quarantine, ledger and both checkpoint folders)
    must lie apart: none may be another or sit inside another. The silver ones
    have their defaults even when the pipeline has no ``transform`` section.
    """

    lakehouse_root: _text("a folder path or URI") = _optional(
        "Folder or URI under which the pipeline's tables and checkpoints live. Default: the environment "
        "variable KDE_LAKEHOUSE_ROOT if set, else <project>/var/lakehouse (KDE_VAR_DIR/lakehouse)."
    )
    bronze_path: _text("a folder path or URI") = _optional(
        "Location of the Delta bronze table. Default: <lakehouse_root>/<name>/bronze."
    )
    checkpoint_root: _text("a folder path or URI") = _optional(
        "Folder holding the ingestion job's Spark checkpoints, one per epoch. Default: "
        "<lakehouse_root>/<name>/_checkpoints/bronze. Must be neither the bronze table's folder nor inside "
        "it (nor the other way round). The job reads it with local file I/O, so it must be a local or "
        "mounted path."
    )
    ledger_path: _text("a folder path or URI") = _optional(
        "Location of the run-ledger Delta table (one row per DAG run: ranges, rows, lag, outcome). "
        "Default: <lakehouse_root>/<name>/_runs."
    )
    silver_path: _text("a folder path or URI") = _optional(
        "Location of the Delta silver table the transform writes (one row per key). Default: "
        "<lakehouse_root>/<name>/silver."
    )
    quarantine_path: _text("a folder path or URI") = _optional(
        "Location of the Delta table of records the transform refused (with the reason). Default: "
        "<lakehouse_root>/<name>/quarantine."
    )
    transform_checkpoint_root: _text("a folder path or URI") = _optional(
        "Folder holding the transform job's checkpoints. Default: "
        "<lakehouse_root>/<name>/_checkpoints/silver."
    )
    log_retention_days: _integer(1) = Field(
        DEFAULT_LOG_RETENTION_DAYS,
        description="Days Delta keeps each table's commit files (delta.logRetentionDuration of bronze, "
        "silver, quarantine and the ledger). Default 30, Delta's own. It bounds time travel and how long a "
        "commit's detail (ranges, counts) and a RESTORE stay visible; where a table stands does not depend "
        "on it (it is in the table's state). At least deleted_file_retention_days.",
    )
    deleted_file_retention_days: _integer(DEFAULT_DELETED_FILE_RETENTION_DAYS) = Field(
        DEFAULT_DELETED_FILE_RETENTION_DAYS,
        description="Days a file a commit removed stays on disk before VACUUM may delete it "
        "(delta.deletedFileRetentionDuration). Default 7, and never less: Delta's safety default, which "
        "protects readers in flight, the transform's stream reading bronze versions it has not read yet, "
        "and backfills by time travel. Both retention settings are set on the tables by the jobs (bronze "
        "after ingest, silver and quarantine after the transform) and by record_run (the ledger), in one "
        "property commit and only when a value changes.",
    )

    @model_validator(mode="after")
    def _log_outlives_files(self) -> TablesSection:
        # Time travel to a version needs its commit and its files; a shorter log makes the longer file
        # retention useless.
        if self.log_retention_days < self.deleted_file_retention_days:
            files_days = self.deleted_file_retention_days
            expected = f"an integer >= tables.deleted_file_retention_days ({files_days})"
            raise _invalid(expected, self.log_retention_days, at=".log_retention_days")
        return self


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class LagConfig(_Section):
    """When a run has enough new data to start a cluster (section ``lag``)."""

    min_records: _integer(0) = Field(
        1,
        description="Integer >= 0, default 1. The lag sensor lets the run proceed once the total lag (new "
        "records over all partitions) is at least this many records.",
    )
    max_wait_minutes: Annotated[float, Field(gt=0), BeforeValidator(_check_minutes)] = Field(
        60.0,
        description="Positive number of minutes, default 60. When fewer than min_records are waiting, the "
        "run proceeds anyway once the oldest of them has waited this long in Kafka, so a trickle is never "
        "held back forever. With no new record at all the run is skipped at once (no cluster is started).",
    )


#: Bronze columns a Z-order may name (the others are Kafka's raw bytes and headers).
BRONZE_ZORDER_COLUMNS = ("topic", "partition", "offset", "timestamp", "key")


def _check_flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _invalid("true or false", value)
    return value


def _check_window(value: Any) -> str:
    if not isinstance(value, str):
        raise _invalid("a daily UTC window HH:MM-HH:MM (e.g. \"02:00-05:00\"), or null", value)
    try:
        return str(Window.parse(value))
    except ValueError as exc:
        raise _invalid("a daily UTC window HH:MM-HH:MM whose start and end differ (e.g. \"02:00-05:00\")",
                       value) from exc  # fmt: skip


def _check_zorder(value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict):
        raise _invalid("a mapping of table (bronze or silver) to a list of column names", value)
    out: dict[str, tuple[str, ...]] = {}
    for table, columns in value.items():
        if table not in ("bronze", "silver"):
            raise _invalid("bronze or silver (the tables a Z-order helps readers of)", table,
                           _did_you_mean(table, ("bronze", "silver")), at=_suffix(table))  # fmt: skip
        if (not isinstance(columns, (list, tuple)) or not columns
                or not all(isinstance(c, str) and c for c in columns) or len(set(columns)) != len(columns)):  # fmt: skip
            raise _invalid("a non-empty list of distinct column names", columns, at=_suffix(table))
        if table == "bronze":
            wrong = [c for c in columns if c not in BRONZE_ZORDER_COLUMNS]
            if wrong:
                raise _invalid(f"columns among {', '.join(BRONZE_ZORDER_COLUMNS)}", wrong[0],
                               _did_you_mean(wrong[0], BRONZE_ZORDER_COLUMNS), at=_suffix(table))  # fmt: skip
        out[table] = tuple(columns)
    return out


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class MaintenanceConfig(_Section):
    """Compaction, VACUUM and log checkpoints of the pipeline's tables (section ``maintenance``).

    Bronze, silver and quarantine are maintained by Spark as the last step of a
    run that reads records (on its cluster, inside the pipeline's lock); the
    run ledger by ``record_run`` before it writes the run's row. Each is due
    after ``every_runs`` runs, or once per ``daily_window``. What was done
    (files and bytes before and after, seconds) is the ledger row's
    ``maintenance_json``; maintenance commits never count as progress.
    """

    every_runs: _integer(1) | None = Field(
        50,
        description="Positive integer or null, default 50: maintain the tables on every Nth run (runs with no "
        "new records count; bronze, silver and quarantine, which such runs leave unchanged, are then done "
        "on the next run that reads records). null: only in daily_window.",
    )
    daily_window: Annotated[str, BeforeValidator(_check_window)] | None = Field(
        None,
        description="\"HH:MM-HH:MM\" in UTC (it may pass midnight) or null (the default): also maintain once on "
        "the first run starting in this window each day. With every_runs and daily_window both null the "
        "pipeline is never maintained.",
    )
    optimize: Annotated[bool, BeforeValidator(_check_flag)] = Field(
        True, description="true (default): compact small files (Delta OPTIMIZE; delta-rs for the ledger)."
    )
    zorder_by: Annotated[dict[str, tuple[str, ...]], BeforeValidator(_check_zorder)] = Field(
        default_factory=dict,
        description="Mapping, default empty: per table (bronze or silver) the columns OPTIMIZE Z-orders its "
        f"files by, e.g. {{silver: [customer_id]}}. Bronze columns: {', '.join(BRONZE_ZORDER_COLUMNS)}; silver "
        "columns: fields of transform.schema.",
    )
    vacuum: Annotated[bool, BeforeValidator(_check_flag)] = Field(
        True,
        description="true (default): VACUUM each table with its own delta.deletedFileRetentionDuration "
        "(tables.deleted_file_retention_days, never under Delta's 7 days).",
    )
    checkpoint: Annotated[bool, BeforeValidator(_check_flag)] = Field(
        True,
        description="true (default): write a Delta log checkpoint of each table's newest version (Delta's "
        "log cleanup of commits older than tables.log_retention_days runs with it).",
    )

    @property
    def enabled(self) -> bool:
        """Whether the pipeline's tables are ever maintained."""
        return self.every_runs is not None or self.daily_window is not None

    @property
    def window(self) -> Window | None:
        """:attr:`daily_window` parsed."""
        return Window.parse(self.daily_window) if self.daily_window else None


_K8S_NAME = "a Kubernetes object name (lower-case letters, digits, '-' and '.', at most 253 characters)"


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class KubernetesConfig(_Section):
    """Kubernetes settings of the cluster (section ``cluster.kubernetes``).

    With profile ``kubernetes`` (cluster mode), ``spark-submit`` asks the
    Kubernetes API for a driver pod per job, the driver asks for
    ``cluster.workers`` executor pods, and Spark deletes the executor pods
    when the job ends; the operator then deletes the driver pod (see
    ``delete_driver_pod``). The driver runs in a pod, not on the Airflow
    worker, so:

    - the job code is baked into ``image`` (nothing is uploaded): the
      project's ``spark_jobs/`` folder and the ``--py-files`` archive
      ``kde_jobs.zip`` (``include.spark.spark_submit.package_py_files``) under
      ``app_dir``, and the Kafka connector and Delta jars that
      ``include/spark/jvm_deps.py`` pins in the image's ``$SPARK_HOME/jars``;
    - the run's request files (preflight result, backfill request,
      transform spec) and the job's summary JSON go through ``shared_dir``,
      a volume mounted at that same path on the Airflow workers and, from
      the claim ``shared_volume_claim``, in the driver and executor pods;
      checkpoints and local table paths must lie inside it too;
    - Kafka client settings come from the Kubernetes secret
      ``kafka_options_secret``, mounted in the driver pod only; they never
      pass through Airflow or the command line.

    Not exercised on a real Kubernetes cluster here: the submit command is
    unit-tested only.

    With profile ``existing_master`` and a ``k8s://`` master (client mode:
    the driver stays on the Airflow worker), only ``image`` and
    ``namespace`` may be given; ``image`` is then required for the executor
    pods (checked when the task runs, as only then is the master known).
    """

    image: _matching(_IMAGE, "a container image reference without spaces, e.g. 'registry/app:1.0'") = Field(
        description="Required whenever the section is given (it is needed with profile kubernetes, and with "
        "existing_master on a k8s:// master). Container image of the driver and executor pods "
        "(spark.kubernetes.container.image), e.g. registry.example/kafka-delta-elt:1.4. It holds spark_jobs/ "
        "and kde_jobs.zip under app_dir, and the Kafka connector and Delta jars in $SPARK_HOME/jars."
    )
    namespace: _matching(
        _K8S_LABEL, "a Kubernetes namespace name (lower-case letters, digits and '-', at most 63 characters)"
    ) | None = Field(
        None,
        description="Kubernetes namespace of the pods (spark.kubernetes.namespace): a DNS label. Required "
        "with profile kubernetes; optional with existing_master (the Spark connection's namespace extra, "
        "else default).",
    )
    service_account: _matching(_K8S_SUBDOMAIN, _K8S_NAME) | None = Field(
        None,
        description="Service account of the driver pod, allowed to create and delete pods, services and "
        "config maps in namespace (spark.kubernetes.authenticate.driver.serviceAccountName). Required with "
        "profile kubernetes.",
    )
    app_dir: _folder(if_null=DEFAULT_APP_DIR) = Field(
        DEFAULT_APP_DIR,
        description="Absolute path of the project inside image, default /opt/kafka-delta-elt: it holds "
        "spark_jobs/*.py and kde_jobs.zip, submitted as local:// URIs.",
    )
    shared_volume_claim: _matching(_K8S_SUBDOMAIN, _K8S_NAME) | None = Field(
        None,
        description="Required with profile kubernetes: name of a ReadWriteMany persistent volume claim in "
        "namespace, mounted at shared_dir in the driver and executor pods.",
    )
    shared_dir: _folder() | None = Field(
        None,
        description="Required with profile kubernetes: absolute path where that volume is mounted, the "
        "same on the Airflow workers and in the pods. Run files live in <shared_dir>/runs/<name>/<run>. "
        "tables.checkpoint_root and tables.transform_checkpoint_root must lie inside it, and so must "
        "tables.bronze_path, silver_path and quarantine_path unless they are URIs.",
    )
    kafka_options_secret: _matching(_K8S_SUBDOMAIN, _K8S_NAME) | None = Field(
        None,
        description="Name of a Kubernetes secret in namespace whose key kafka_options_key holds the job's "
        "Kafka client settings as a JSON object in the Java client's names (e.g. security.protocol, "
        "sasl.mechanism, sasl.jaas.config), with any non-secret consumer settings besides. Mounted "
        "read-only in the driver pod at /etc/kafka-delta-elt/kafka. Optional (a plaintext broker needs "
        "none). With profile kubernetes, kafka.options must be empty: put them in this secret.",
    )
    kafka_options_key: _matching(
        _K8S_SECRET_KEY, "a secret key (letters, digits, '-', '_' and '.')", if_null="kafka-options.json"
    ) = Field("kafka-options.json", description="Key of that secret, default kafka-options.json.")
    delete_driver_pod: _choice(DRIVER_POD_DELETION) = Field(
        "on_success",
        description="on_success (default): the operator deletes a driver pod that finished well and keeps a "
        "failed one for kubectl logs; always; never.",
    )


#: The backlog up to which a local_standalone run stays in local mode unless its file says otherwise: the
#: largest ``make bench`` measured local mode faster at, below where a cluster of as many cores paid off.
LOCAL_MAX_RECORDS_DEFAULT = 200_000


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class ClusterConfig(_Section):
    """The Spark cluster a run uses (section ``cluster``)."""

    profile: _choice(CLUSTER_PROFILES) = Field(
        "local_standalone",
        description="local_standalone (default): each run starts a Spark standalone master and "
        "cluster.workers workers on 127.0.0.1 and stops them afterwards (setup and teardown tasks). "
        "existing_master: submit in client mode (the driver runs on the Airflow worker) to the running "
        "cluster named by master_connection_id (spark://, yarn or k8s://); no cluster is started or stopped. "
        "kubernetes: submit in cluster mode to the k8s:// master of master_connection_id; Spark creates the "
        "driver and executor pods of each job and removes them (see cluster.kubernetes; unit-tested only, "
        "not run here).",
    )
    workers: _integer(1, 8) = Field(
        1,
        description="Integer from 1 to 8, default 1: number of workers a local_standalone run starts (one "
        "executor each); with the other profiles, the number of executors requested "
        "(spark.executor.instances).",
    )
    worker_cores: _integer(1) = Field(
        1,
        description="Positive integer, default 1: cores per worker, which is also each executor's "
        "spark.executor.cores.",
    )
    worker_memory: Annotated[str, BeforeValidator(_check_memory)] = Field(
        "1g",
        description="Spark size string with a unit (k, m, g or t, e.g. \"512m\", \"2g\"), default \"1g\", at "
        "least 450m (Spark's minimum for an executor): what each worker offers, and each executor's "
        "spark.executor.memory. Stored lower-case without a trailing b.",
    )
    master_connection_id: _connection_id("Spark") | None = Field(
        None,
        description="Id of the Airflow Spark connection whose host is the master URL (spark://, yarn, "
        "k8s://). Required with existing_master and kubernetes (where it must name a k8s://https://... "
        "master), refused with local_standalone. With existing_master, the connection's queue extra (YARN) "
        "and namespace extra (Kubernetes) are used; its deploy-mode extra is overridden by the profile.",
    )
    kubernetes: KubernetesConfig | None = Field(
        None,
        description="Section: Kubernetes settings. Required with kubernetes; optional with existing_master "
        "(image, namespace); refused with local_standalone. Null when absent.",
    )
    local_max_records: _integer(0) = Field(
        LOCAL_MAX_RECORDS_DEFAULT,
        description="Integer >= 0, default 200000; local_standalone only. A run whose backlog (the preflight's "
        "lag, or a backfill's offsets) is at most this many records runs its Spark application in local mode "
        "inside the driver (local[k], k = workers x worker_cores, at most this machine's cores): no cluster "
        "starts, no executor warms up. On one machine a cluster with as many cores takes longer up to a few "
        "hundred thousand records a run, its start and its executors' warm-up being the difference (make "
        "bench, docs/performance.md). 0 always starts the cluster. The choice and its reason are in "
        "start_cluster's log and the ledger's cluster_choice.",
    )
    records_per_worker: _integer(0) = Field(
        0,
        description="Integer >= 0, default 0 (off); local_standalone only. Above local_max_records, the run "
        "starts ceil(backlog / records_per_worker) workers, at least 1 and at most workers; 0 always starts "
        "workers.",
    )

    @property
    def transient(self) -> bool:
        """Whether each run starts and stops its own cluster (setup and teardown tasks)."""
        return self.profile == "local_standalone"

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        profile = data.get("profile", "local_standalone")
        if profile not in CLUSTER_PROFILES:  # the profile's own check says what is wrong
            return data
        if profile != "local_standalone" and data.get("local_max_records") is None:
            data = {**data, "local_max_records": 0}  # sizing to the backlog is local_standalone's alone
        master = data.get("master_connection_id")
        if profile == "local_standalone" and master is not None:
            expected = (
                "no master connection with profile local_standalone (set cluster.profile: existing_master "
                "or kubernetes to use one)"
            )
            raise _invalid(expected, master, at=".master_connection_id")
        if profile != "local_standalone" and master is None:
            expected = f"the id of an Airflow Spark connection (required with profile {profile})"
            raise _invalid(expected, data.get("master_connection_id", _MISSING), at=".master_connection_id")
        k8s = data.get("kubernetes")
        if k8s is None:
            if profile == "kubernetes":
                required = ", ".join(_KUBERNETES_REQUIRED)
                expected = f"a mapping with keys {required} (required with profile kubernetes)"
                raise _invalid(expected, data.get("kubernetes", _MISSING), at=".kubernetes")
            return data
        if profile == "local_standalone":
            expected = "no kubernetes section with profile local_standalone (it runs on this machine)"
            raise _invalid(expected, k8s, at=".kubernetes")
        KubernetesConfig._check_mapping(k8s, ".kubernetes")  # an unknown key is the first thing to fix
        if profile == "existing_master":
            for key in k8s:
                if key not in _KUBERNETES_CLIENT_KEYS:
                    raise _problem(
                        f"expected only {', '.join(_KUBERNETES_CLIENT_KEYS)} with profile existing_master "
                        f"(client mode: the driver runs on the Airflow worker), got {key!r}; "
                        "it applies to profile kubernetes",
                        f".kubernetes{_suffix(key)}",
                    )
        for key in _KUBERNETES_REQUIRED if profile == "kubernetes" else ("image",):
            if k8s.get(key) is None:
                expected = f"a value (required with profile {profile})"
                raise _invalid(expected, k8s.get(key, _MISSING), at=f".kubernetes.{key}")
        return data

    @model_validator(mode="after")
    def _sizing_needs_its_own_cluster(self) -> ClusterConfig:
        for key in ("local_max_records", "records_per_worker"):
            if getattr(self, key) and self.profile != "local_standalone":
                expected = (
                    f"0 or no value with profile {self.profile} (sizing the cluster to the backlog needs the "
                    "run's own cluster: profile local_standalone)"
                )
                raise _invalid(expected, getattr(self, key), at=f".{key}")
        return self


# --------------------------------------------------------------------------- transform


def _check_field_type(value: Any) -> str:
    canonical = normalize_type(value) if isinstance(value, str) else None
    if canonical is None:
        hint = ""
        if isinstance(value, str):
            word = value.strip().lower()
            hint = f"; did you mean {_TYPE_ALIASES[word]!r}?" if word in _TYPE_ALIASES else ""
            hint = hint or _did_you_mean(word, SIMPLE_TYPES)
        raise _invalid(_TYPE_EXPECTED, value, hint)
    return canonical


def _check_required(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _invalid("true or false", value)
    return value


def _check_bound(value: Any, info: ValidationInfo) -> int | float:
    """``minimum`` or ``maximum``: a number, on numeric fields only, the maximum at least the minimum."""
    bound, type_name = info.field_name, info.data.get("type")
    if type_name is not None and not (type_name in NUMERIC_TYPES or is_decimal(type_name)):
        expected = f"no {bound} on {type_name} fields (only int, long, double and decimal fields take one)"
        raise _invalid(expected, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _invalid("a number", value, _unquote_hint(value))
    minimum = info.data.get("minimum")
    if bound == "maximum" and minimum is not None and value < minimum:
        raise _invalid(f"a number >= the minimum {minimum!r}", value)
    return value


def _check_allowed(value: Any, info: ValidationInfo) -> tuple[str | int, ...]:
    type_name = info.data.get("type")
    if type_name is None:  # the type is wrong (and reported): which values fit it cannot be told
        raise PydanticUseDefault()
    if type_name not in ("string", "int", "long"):
        expected = f"no allowed list on {type_name} fields (only string, int and long fields take one)"
        raise _invalid(expected, value)
    what = "string" if type_name == "string" else "integer"
    if not isinstance(value, list) or not value:
        hint = f"; write [{value}]" if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
        raise _invalid(f"a non-empty list of {what}s", value, hint)
    for i, item in enumerate(value):
        if what == "string" and not isinstance(item, str):
            hint = ""
            if isinstance(item, bool):
                hint = "; quote it (YAML reads yes, no, on, off, true and false as booleans)"
            elif isinstance(item, (int, float)):
                hint = "; quote it"
            raise _invalid("a string", item, hint, at=f"[{i}]")
        if what == "integer" and (isinstance(item, bool) or not isinstance(item, int)):
            raise _invalid("an integer", item, _unquote_hint(item), at=f"[{i}]")
        if item in value[:i]:
            raise _invalid("each value once", item, " a second time", at=f"[{i}]")
    return tuple(value)


def _check_max_length(value: Any, info: ValidationInfo) -> int:
    type_name = info.data.get("type")
    if type_name is not None and type_name not in ("string", "json"):
        expected = f"no max_length on {type_name} fields (only string and json fields take one)"
        raise _invalid(expected, value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid("a positive integer", value, _unquote_hint(value))
    return value


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class SchemaField(_Section):
    """One field of the record value (an entry of ``transform.schema``): its type, or its settings."""

    type: Annotated[str, BeforeValidator(_check_field_type)] = Field(
        description="Required: string, int, long, double, boolean, date, timestamp, json or decimal(p,s) "
        "(precision 1-38, scale 0-p; quote it inside {...}, where the comma splits). Writing only the type "
        "(status: string) is short for {type: string}."
    )
    required: Annotated[bool, BeforeValidator(_check_required)] = Field(
        False, description="true or false (default): the key must be present with a non-null value."
    )
    minimum: Annotated[int | float, BeforeValidator(_check_bound)] = _optional(
        "Smallest allowed value; int, long, double and decimal fields only. Left out: no lower bound."
    )
    maximum: Annotated[int | float, BeforeValidator(_check_bound)] = _optional(
        "Largest allowed value, at least minimum; int, long, double and decimal fields only. Left out: no "
        "upper bound."
    )
    allowed: Annotated[tuple[str | int, ...], BeforeValidator(_check_allowed)] = _optional(
        "The only values allowed: a non-empty list of distinct strings for string fields, of integers for "
        "int and long fields; each within minimum, maximum and max_length. Left out: any value of the type."
    )
    max_length: Annotated[int, Field(ge=1), BeforeValidator(_check_max_length)] = _optional(
        "Positive integer: at most this many characters; string and json fields only. Left out: no limit."
    )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        # The type alone (status: string) is read by _shorthand; the schema says so too, for editors.
        return {"anyOf": [{"type": "string", "description": "The field's type alone."}, handler(core_schema)]}

    @classmethod
    def _expected(cls, value: Any) -> str:
        return f"a field type (e.g. string) or {super()._expected(value)}"

    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):  # just the type
            return {"type": _check_field_type(data)}
        split = data.get("type") if isinstance(data, dict) else None
        if isinstance(split, str) and split.strip().lower().startswith("decimal(") and ")" not in split:
            # {type: decimal(10,2)}: in a flow mapping the comma ends the value and '2)' becomes a key.
            hint = '; inside {...} quote the type, e.g. "decimal(10,2)", as a bare comma ends the value'
            raise _invalid(_TYPE_EXPECTED, split, hint, at=".type")
        return data

    @model_validator(mode="after")
    def _allowed_values_pass_the_other_rules(self) -> SchemaField:
        low, high, longest = self.minimum, self.maximum, self.max_length
        for i, item in enumerate(self.allowed or ()):
            if self.type == "string":
                rule, outside = f"max_length {longest}", longest is not None and len(item) > longest
            else:
                rule = f"minimum {low!r} and maximum {high!r}"
                outside = (low is not None and item < low) or (high is not None and item > high)
            if outside:
                raise _invalid(f"a value the field's {rule} let through", item, at=f".allowed[{i}]")
        return self

    def spec(self, name: str, required: bool) -> FieldSpec:
        """The field as the transform job reads it; ``required`` forces it (key and ordering fields)."""
        required = self.required or required
        return FieldSpec(name, self.type, required, self.minimum, self.maximum, self.allowed, self.max_length)


def _check_schema(value: Any) -> dict[str, Any]:
    """The mapping of field names to fields: names Delta and Spark SQL take, none twice in any case."""
    if not isinstance(value, dict) or not value:
        raise _invalid("a non-empty mapping of field names to a type or to field settings", value)
    seen: dict[str, str] = {}  # lower-case name -> name as declared
    for name in value:
        at = _suffix(name)
        if not isinstance(name, str):
            raise _invalid("a text key (quote it)", name, at=at)
        if not FIELD_NAME.fullmatch(name):
            reserved = name.startswith(SYSTEM_PREFIX)
            hint = "; names starting with '_' are reserved for silver's own columns" if reserved else ""
            raise _invalid(_FIELD_NAME_EXPECTED, name, hint, at=at)
        other = seen.setdefault(name.lower(), name)
        if other != name:
            expected = (
                f"a field name that differs from {other!r} in more than case "
                "(Delta column names are case-insensitive)"
            )
            raise _invalid(expected, name, at=at)
    return value


_Schema = Annotated[dict[str, SchemaField], BeforeValidator(_check_schema)]
_SCHEMA_FILE_EXPECTED = "the path of a YAML file of fields (relative to the pipeline file's folder)"
#: Checks a schema file's content, which has no pipeline around it.
_SCHEMA_FILE = TypeAdapter(_Schema)


def _declared_in(info: ValidationInfo) -> str:
    """Where the fields that ``transform.key`` and ``ordering`` name are declared."""
    shown = info.data.get("schema_file")
    return f"the schema file {shown}" if shown else "transform.schema"


def _check_key(value: Any, info: ValidationInfo) -> str | tuple[str, ...]:
    if isinstance(value, str):  # one field; whether it is declared is checked with the schema
        return value
    if not isinstance(value, (list, tuple)) or not value:
        expected = f"a field name or a non-empty list of field names declared in {_declared_in(info)}"
        raise _invalid(expected, value)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise _invalid(f"the name of a field declared in {_declared_in(info)}", item, at=f"[{i}]")
    return tuple(value)


def _check_ordering(value: Any, info: ValidationInfo) -> str:
    if not isinstance(value, str):
        raise _invalid(f"the name of a field declared in {_declared_in(info)}", value)
    return value


_AVSC_EXPECTED = "the path of an Avro schema file (.avsc, JSON; relative to the pipeline file's folder)"


def _check_format(value: Any) -> str:
    if value == "protobuf":
        raise _invalid(
            f"one of {_choices(FORMATS)}", value,
            "; protobuf is not supported yet: decoding it in the JVM needs Spark's spark-protobuf module, which "
            "this project does not ship",
        )  # fmt: skip
    if not isinstance(value, str) or value not in FORMATS:
        raise _invalid(f"one of {_choices(FORMATS)}", value, _did_you_mean(value, FORMATS))
    return value


def _check_version(value: Any) -> int | None:
    if value == "latest":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid("'latest' or a registered version number (a positive integer)", value)
    return value


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class ValueSchemaSection(_Section):
    """Where ``avro`` and ``json_schema`` values find their schema (section ``transform.value_schema``).

    Give exactly one of ``file`` (Avro only: each value is plain Avro binary
    written with the file's schema) and ``registry`` (each value is in the
    Confluent wire format; the reader schema is a subject's version and each
    record's writer schema is looked up by the id it carries).
    """

    file: _text(_AVSC_EXPECTED) | None = Field(
        None,
        description="An Avro schema file (.avsc), relative to the pipeline file's folder: the record schema "
        "every value was written with (plain Avro binary, no header). Read when the pipeline file is loaded.",
    )
    registry: _text("an Airflow connection id") | None = Field(
        None,
        description="The Airflow connection (type http: host and port, or url in its extra; login and "
        "password when the registry wants them) of a Confluent-compatible schema registry. Values are in the "
        "Confluent wire format (magic byte 0, 4-byte schema id, payload).",
    )
    subject_strategy: _choice(SUBJECT_STRATEGIES) = Field(
        "topic_name",
        description="With registry: how the reader schema's subject is named, as Confluent's serializers do: "
        "topic_name (default: <topic>-value; needs exactly one topic in kafka.topics), record_name "
        "(<record_name>) or topic_record_name (<topic>-<record_name>).",
    )
    record_name: _text("a record's full name, e.g. shop.Order") | None = Field(
        None, description="With registry: the record's full name, for subject_strategy record_name and "
        "topic_record_name."
    )
    subject: _text("a registry subject") | None = Field(
        None, description="With registry: the subject itself, instead of subject_strategy."
    )
    version: Annotated[int | None, BeforeValidator(_check_version)] = Field(
        None,
        description="With registry: latest (the default: the subject's newest version when the run starts) or "
        "a version number. The version read with is recorded in every silver batch commit.",
        json_schema_extra=lambda s: s.update(
            {"anyOf": [{"type": "integer", "minimum": 1}, {"const": "latest"}, {"type": "null"}], "default": "latest"}
        ),
    )

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        file, registry = data.get("file"), data.get("registry")
        if (file is None) == (registry is None):
            raise _problem(
                "expected exactly one of transform.value_schema.file (an Avro schema file) and "
                "transform.value_schema.registry (a schema registry's Airflow connection), got "
                + ("both" if file is not None else "neither"),
            )
        if file is not None:
            for key in ("record_name", "subject", "version"):
                if data.get(key) is not None and data.get(key) != "latest":
                    raise _problem(f"expected no {key} with a schema file (it names a registry subject)", f".{key}")
            folder = Path((info.context or {}).get("folder", "."))
            data = {**data, "file": _read_avro_schema_file(file, folder)[1]}  # shown: how messages name it
        return data

    def resolve(self, topics: tuple[str, ...], pattern: str | None) -> ValueSchema:
        """The :class:`ValueSchema` the Spark job reads: the registry subject named, or the file's schema."""
        if self.file is not None:
            shown = Path(self.file)
            text, _ = _read_avro_schema_file(self.file, settings.PROJECT_ROOT if not shown.is_absolute() else Path("/"))
            return ValueSchema(file=self.file, text=text)
        subject = self.subject
        if subject is None:
            if self.subject_strategy != "record_name" and (pattern or len(topics) != 1):
                raise _ValueSchemaProblem(
                    "subject_strategy",
                    f"expected one topic in kafka.topics for subject strategy {self.subject_strategy} (the "
                    f"subject is named after the topic), got {'a topic_pattern' if pattern else len(topics)}; "
                    "set transform.value_schema.subject, or use subject_strategy record_name",
                )
            if self.subject_strategy != "topic_name" and self.record_name is None:
                raise _ValueSchemaProblem(
                    "record_name",
                    f"expected the record's full name (e.g. shop.Order) for subject strategy "
                    f"{self.subject_strategy}, got none",
                )
            subject = subject_name(self.subject_strategy, topics[0] if topics else None, self.record_name)
        return ValueSchema(registry=self.registry, subject=subject, subject_strategy=self.subject_strategy,
                           version=self.version)  # fmt: skip


class _ValueSchemaProblem(Exception):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key, self.message = key, message


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class TransformSection(_Section):
    """How bronze records become silver rows (section ``transform``; without it the pipeline stops at bronze).

    Loads into a :class:`~include.contract.transform_spec.TransformSpec`.
    """

    format: Annotated[Literal[FORMATS], BeforeValidator(_check_format)] = Field(
        "json",
        description="json (default): each record value is a JSON object. avro: Avro binary, decoded in the JVM "
        "by Spark's from_avro (needs value_schema). json_schema: a JSON object behind the Confluent wire "
        "format's header, as Confluent's JSON Schema serializer writes it (needs value_schema.registry). "
        "protobuf is refused: decoding it needs Spark's spark-protobuf module, which this project does not "
        "ship.",
    )
    schema: _Schema | None = Field(
        None,
        description="Mapping of field name to its type (status: string) or to its settings. Field names: "
        "letters, digits and _, starting with a letter, at most 128 characters (_ names are silver's own "
        "columns); no two may differ only in case (Delta column names are case-insensitive). Give exactly "
        "one of schema and schema_file.",
    )
    schema_file: _text(_SCHEMA_FILE_EXPECTED) | None = Field(
        None,
        description="Instead of schema: a YAML file holding that same mapping; a relative path is taken from "
        "the pipeline file's folder. Errors in it name that file.",
    )
    key: Annotated[str | tuple[str, ...], BeforeValidator(_check_key)] = Field(
        description="Required: a field name or a list of them, the silver table's MERGE key; each of type "
        "string, int, long, date or boolean. Key fields are required."
    )
    ordering: Annotated[str, BeforeValidator(_check_ordering)] = Field(
        description="Required: the field telling which record of a key is newer (int, long, double, date, "
        "timestamp or string; not a key field). It is required; the Kafka offset breaks ties."
    )
    tombstones: _choice(TOMBSTONE_POLICIES) = Field(
        "quarantine",
        description="quarantine (default): a record with a null value goes to quarantine. delete: it deletes "
        "its key, taken from the Kafka key (its text for a one-field key, a JSON object for more); silver keeps "
        "the row with _deleted = true and its last ordering value, so an older event arriving later cannot "
        "bring it back, and a newer one does.",
    )
    new_fields: _choice(NEW_FIELD_POLICIES) = Field(
        "ignore",
        description="ignore (default): a field the schema does not declare is left out of silver and named "
        "in the job's summary. add: it becomes a silver column of the type its values show (integers long, "
        "fractions double, text string, objects, arrays or mixed values json), added in a schema-change "
        "commit that records it; later values of another type go to quarantine.",
    )
    max_value_bytes: _integer(
        1, MAX_VALUE_BYTES_LIMIT, f"a positive integer of at most {MAX_VALUE_BYTES_LIMIT} (64 MiB)"
    ) = Field(
        DEFAULT_MAX_VALUE_BYTES,
        description="Positive integer, at most 64 MiB, default 1048576: larger record values go to "
        "quarantine.",
    )
    value_schema: ValueSchemaSection | None = Field(
        None,
        description="Section, required for format avro and json_schema and refused for json: where the "
        "value's schema comes from, exactly one of a schema file and a schema registry.",
    )

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        schema, schema_file = data.get("schema"), data.get("schema_file")
        if (schema is None) == (schema_file is None):
            raise _problem(
                "expected exactly one of transform.schema (a mapping of field names to types) and "
                "transform.schema_file (a YAML file holding that mapping), got "
                + ("both" if schema is not None else "neither"),
                ".schema",
            )
        if schema_file is not None:
            folder = Path((info.context or {}).get("folder", "."))
            schema, shown = _read_schema_file(schema_file, folder)
            data = {**data, "schema": schema, "schema_file": shown}  # shown: how messages name the file
        return data

    @model_validator(mode="after")
    def _key_and_ordering_are_declared(self) -> TransformSection:
        declared_in = f"the schema file {self.schema_file}" if self.schema_file else "transform.schema"
        fields = self.schema or {}

        def declared(name: str, at: str) -> SchemaField:
            if name in fields:
                return fields[name]
            same = [n for n in fields if n.lower() == name.lower()]
            hint = f"; did you mean {same[0]!r}?" if same else _did_you_mean(name, list(fields))
            raise _invalid(f"the name of a field declared in {declared_in}", name, hint, at=at)

        key = self.key_fields()
        for i, name in enumerate(key):
            at = ".key" if isinstance(self.key, str) else f".key[{i}]"
            field_type = declared(name, at).type
            if field_type not in KEY_TYPES:
                expected = f"a key field of type {', '.join(KEY_TYPES)}"
                raise _invalid(expected, name, f", a {field_type} field", at=at)
            if name in key[:i]:
                raise _invalid("each key field once", name, " a second time", at=at)
        field_type = declared(self.ordering, ".ordering").type
        if field_type not in ORDERING_TYPES:
            expected = f"an ordering field of type {', '.join(ORDERING_TYPES)}"
            raise _invalid(expected, self.ordering, f", a {field_type} field", at=".ordering")
        if self.ordering in key:
            raise _invalid("a field that is not part of transform.key", self.ordering, at=".ordering")
        return self

    def key_fields(self) -> tuple[str, ...]:
        """The key field names, however ``key`` was written."""
        return (self.key,) if isinstance(self.key, str) else self.key

    def spec(self) -> TransformSpec:
        """The transform as the Spark job reads it; key and ordering fields are required."""
        required = {*self.key_fields(), self.ordering}
        return TransformSpec(
            fields=tuple(f.spec(name, name in required) for name, f in (self.schema or {}).items()),
            key=self.key_fields(),
            ordering=self.ordering,
            format=self.format,
            tombstones=self.tombstones,
            new_fields=self.new_fields,
            max_value_bytes=self.max_value_bytes,
        )


def _file_beside(value: Any, folder: Path, expected: str, at: str) -> tuple[Path, str]:
    """A file the pipeline file names (``~`` expanded, relative to ``folder``) and how messages show it."""
    if not isinstance(value, str) or not value.strip():
        raise _invalid(expected, value, at=at)
    path = Path(os.path.expanduser(value.strip()))
    path = Path(os.path.normpath(path if path.is_absolute() else folder / path))
    return path, _display_path(path)


def _read_avro_schema_file(value: Any, folder: Path) -> tuple[str, str]:
    """The text of ``transform.value_schema.file`` and the file as shown; it must hold an Avro record schema."""
    path, shown = _file_beside(value, folder, _AVSC_EXPECTED, ".file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _invalid(f"{_AVSC_EXPECTED}; cannot read {shown!r}: {exc}", value, at=".file") from None
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise _problem(f"expected the Avro schema file {shown} to hold JSON, got: {exc}", ".file") from None
    if not isinstance(schema, dict) or schema.get("type") != "record" or not isinstance(schema.get("fields"), list):
        raise _problem(
            f"expected the Avro schema file {shown} to hold a record schema "
            '({"type": "record", "name": ..., "fields": [...]}), got '
            + (f"type {schema.get('type')!r}" if isinstance(schema, dict) else type(schema).__name__),
            ".file",
        )
    return text, shown


def _read_schema_file(value: Any, folder: Path) -> tuple[dict[str, SchemaField], str]:
    """The fields of ``transform.schema_file`` and the file as shown; errors in it name that file."""
    expected = _SCHEMA_FILE_EXPECTED
    path, shown = _file_beside(value, folder, expected, ".schema_file")
    try:
        is_file = path.is_file()
    except OSError:  # e.g. a name too long for the file system: no such file either
        is_file = False
    if not is_file:
        raise _invalid(f"{expected}; looked for {shown!r}, which is not a file", value, at=".schema_file")
    data = _read_yaml(path, shown)
    try:
        return _SCHEMA_FILE.validate_python(data), shown
    except ValidationError as exc:
        # A ValueError: pydantic carries it out of the pipeline file's validation as it is.
        raise _config_error(exc, shown) from None


# --------------------------------------------------------------------------- the file and what it loads into


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(**_SECTION_CONFIG, title="Pipeline file"))
class PipelineFile(_Section):
    """One pipeline: the top level of a pipeline file (``include/pipelines/<name>.yaml``).

    One file = one pipeline = one Airflow DAG. Unknown keys are errors, so a
    typo never falls back to a default silently.
    """

    name: Annotated[str, BeforeValidator(_check_name)] = _optional(
        "Pipeline name, default the file name without .yaml: letters, digits, _, . and -, starting with a "
        "letter or digit, at most 200 characters. It names the DAG, the table folders, the Delta txnAppId "
        "and the consumer group (kafka-delta-elt.<name>); renaming a pipeline starts it afresh."
    )
    description: Annotated[str, BeforeValidator(_check_string)] = Field(
        "", description="Free text shown with the DAG. Default empty."
    )
    kafka: KafkaConfig = Field(description="Required section: the source.")
    tables: TablesSection | None = Field(
        None,
        description="Section: the target locations. Left out or null: every location at its default under "
        "lakehouse_root.",
    )
    schedule: Annotated[str, BeforeValidator(_check_schedule)] | None = Field(
        description="Required key: a 5-field cron expression (minute hour day-of-month month day-of-week, "
        "e.g. \"*/10 * * * *\"; a step is at most the field's highest value and a range runs forwards), one "
        "of the presets @hourly, @daily, @weekly, @monthly, @quarterly, @yearly, or null for manual runs "
        "only. Runs never overlap (max_active_runs=1)."
    )
    lag: LagConfig | None = Field(
        None,
        description="Section: lag sensor thresholds. Left out or null: its keys' defaults (a run proceeds at "
        "the first new record).",
    )
    data_loss_policy: _choice(DATA_LOSS_POLICIES) = Field(
        "fail",
        description="fail (default): a run stops before starting the cluster when Kafka retention deleted "
        "records the table has not read yet. record_and_continue: the run records the gap (partition, "
        "offsets, record count) and continues after it.",
    )
    cluster: ClusterConfig | None = Field(
        None,
        description="Section: the Spark cluster. Left out or null: its keys' defaults (profile "
        "local_standalone, one worker of 1 core and 1g).",
    )
    retries: _integer(0, 10) = Field(
        2,
        description="Integer from 0 to 10, default 2: Airflow retries per task (exponential back-off, at "
        "most 10 minutes apart).",
    )
    tags: Annotated[tuple[str, ...], BeforeValidator(_check_tags)] = Field(
        (),
        description="List of strings, default empty: Airflow DAG tags (at most 100 characters each, no "
        "duplicates); kafka-delta-elt is always added.",
    )
    transform: TransformSection | None = Field(
        None,
        description="Optional section: how bronze records become silver rows; without it (the default, or "
        "null) the pipeline stops at bronze.",
    )
    maintenance: MaintenanceConfig | None = Field(
        None,
        description="Section: compaction, VACUUM and log checkpoints of the pipeline's tables. Left out or "
        "null: its keys' defaults (every 50 runs, every operation on). To turn maintenance off, set "
        "maintenance.every_runs and maintenance.daily_window both to null.",
    )

    @classmethod
    def _expected(cls, value: Any) -> str:
        return "a mapping of pipeline settings (kafka, schedule, ...)"


_PIPELINE_FILE = TypeAdapter(PipelineFile)


@dataclass(frozen=True)
class TablesConfig:
    """Where the records go: :class:`TablesSection` with every location worked out.

    Local paths are absolute; URIs are as written, without a trailing ``/``.
    """

    lakehouse_root: str
    bronze_path: str
    checkpoint_root: str
    ledger_path: str
    silver_path: str
    quarantine_path: str
    transform_checkpoint_root: str
    log_retention_days: int = DEFAULT_LOG_RETENTION_DAYS
    deleted_file_retention_days: int = DEFAULT_DELETED_FILE_RETENTION_DAYS

    def retention_properties(self) -> dict[str, str]:
        """The Delta table properties the pipeline's tables carry for its retention settings."""
        return {
            "delta.logRetentionDuration": f"interval {self.log_retention_days} days",
            "delta.deletedFileRetentionDuration": f"interval {self.deleted_file_retention_days} days",
        }


@dataclass(frozen=True)
class PipelineConfig:
    """One loaded pipeline: a :class:`PipelineFile` with its name, tables and transform worked out.

    Each field is the key of the same name (see :class:`PipelineFile`), with
    its default filled in; ``transform`` is a
    :class:`~include.contract.transform_spec.TransformSpec` or ``None``.
    ``source_path`` is not a key: the file this configuration was loaded
    from, as shown in error messages.
    """

    name: str
    kafka: KafkaConfig
    tables: TablesConfig
    schedule: str | None
    source_path: str
    description: str = ""
    lag: LagConfig = field(default_factory=LagConfig)
    data_loss_policy: str = "fail"
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    retries: int = 2
    tags: tuple[str, ...] = ()
    transform: TransformSpec | None = None
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)

    @property
    def consumer_group(self) -> str:
        """Kafka consumer group mirroring the bronze table's next offsets, for lag tooling."""
        return CONSUMER_GROUP_PREFIX + self.name

    def ingest_job_args(
        self, bootstrap_servers: str, run_id: str, run_type: str, summary_path: str
    ) -> list[str]:
        """Arguments of ``spark_jobs/kafka_to_bronze.py`` for one run of this pipeline (its contract renders them)."""
        return jobs.IngestArgs.for_pipeline(self, bootstrap_servers=bootstrap_servers, run_id=run_id,
                                            run_type=run_type, summary_path=summary_path).to_args()


# --------------------------------------------------------------------------- loading


def load_pipeline(path: str | os.PathLike[str]) -> PipelineConfig:
    """Read and validate one pipeline file; raises :class:`PipelineConfigError`."""
    path = Path(path)
    shown = _display_path(path)
    data = _read_yaml(path, shown)
    try:
        file = _PIPELINE_FILE.validate_python(data, context={"folder": path.parent})
    except ValidationError as exc:
        raise _config_error(exc, shown) from None
    return _loaded(file, shown, path.stem)


def load_pipelines(
    folder: str | os.PathLike[str],
) -> tuple[dict[str, PipelineConfig], dict[str, str]]:
    """Load every ``*.yaml``/``*.yml`` file directly in ``folder``.

    Returns the valid pipelines by name and the errors by file path. One bad
    file never stops the others. Files are read in name order; a pipeline whose
    name, bronze, silver or quarantine table or checkpoint folder an earlier
    file already uses is an error of the later file (two pipelines writing one
    table would corrupt it).
    Hidden files (editor backups) are skipped.
    """
    folder = Path(folder)
    configs: dict[str, PipelineConfig] = {}
    errors: dict[str, str] = {}
    if not folder.is_dir():
        shown = _display_path(folder)
        errors[shown] = str(
            PipelineConfigError(
                shown, "(folder)", "expected a folder of pipeline files, got nothing at that path"
            )
        )
        return configs, errors
    files = sorted(
        p
        for p in folder.iterdir()
        if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file()
    )
    owners: dict[tuple[str, str], str] = {}
    for path in files:
        shown = _display_path(path)
        try:
            config = load_pipeline(path)
            claims = [
                ("name", "name", config.name),
                ("bronze table", "tables.bronze_path", config.tables.bronze_path),
                ("checkpoint folder", "tables.checkpoint_root", config.tables.checkpoint_root),
                ("silver table", "tables.silver_path", config.tables.silver_path),
                ("quarantine table", "tables.quarantine_path", config.tables.quarantine_path),
                (
                    "transform checkpoint folder",
                    "tables.transform_checkpoint_root",
                    config.tables.transform_checkpoint_root,
                ),
            ]
            for what, field_path, value in claims:
                owner = owners.get((what, value))
                if owner is not None:
                    raise PipelineConfigError(
                        shown,
                        field_path,
                        f"expected a {what} no other pipeline uses, got {value!r}, already used by {owner}",
                    )
            for what, _, value in claims:
                owners[(what, value)] = shown
            configs[config.name] = config
        except PipelineConfigError as exc:
            errors[shown] = str(exc)
        except Exception as exc:  # noqa: BLE001 - a loader bug on one file must not hide every other pipeline
            errors[shown] = f"{shown}: (file): unexpected error while loading: {type(exc).__name__}: {exc}"
    return configs, errors


def _loaded(file: PipelineFile, shown: str, stem: str) -> PipelineConfig:
    """The configuration ``file`` stands for: what depends on its name, the environment or other keys."""
    name = file.name
    if name is None:
        if not (_NAME.fullmatch(stem) and len(stem) <= NAME_MAX_LEN):
            raise PipelineConfigError(
                shown,
                "name",
                f"expected {_NAME_EXPECTED}, got the file name {stem!r} (str); "
                "rename the file or set name explicitly",
            )
        name = stem
    tables = _tables(file.tables or TablesSection(), name, shown)
    cluster = file.cluster or ClusterConfig()
    if cluster.profile == "kubernetes" and cluster.kubernetes is not None:
        _check_pods_reach(shown, tables, file.kafka, cluster.kubernetes)
    return PipelineConfig(
        name=name,
        kafka=file.kafka,
        tables=tables,
        schedule=file.schedule,
        source_path=shown,
        description=file.description,
        lag=file.lag or LagConfig(),
        data_loss_policy=file.data_loss_policy,
        cluster=cluster,
        retries=file.retries,
        tags=file.tags,
        transform=_transform(file, shown),
        maintenance=_maintenance(file, shown),
    )


def _transform(file: PipelineFile, shown: str) -> TransformSpec | None:
    """The transform's spec, its value schema named (registry subject) or read (schema file) and checked."""
    section = file.transform
    if section is None:
        return None
    spec, vs = section.spec(), section.value_schema
    if spec.format in SCHEMA_FORMATS and vs is None:
        raise PipelineConfigError(shown, "transform.value_schema", (
            f"expected a value_schema section for format {spec.format} (file: an Avro schema file, or "
            "registry: a schema registry's Airflow connection), got none"))  # fmt: skip
    if vs is None:
        return spec
    if spec.format not in SCHEMA_FORMATS:
        raise PipelineConfigError(shown, "transform.value_schema", (
            f"expected no value_schema for format {spec.format} (it is for {' and '.join(SCHEMA_FORMATS)}); "
            "set transform.format or remove the section"))  # fmt: skip
    if spec.format == "json_schema" and vs.file is not None:
        raise PipelineConfigError(shown, "transform.value_schema.file", (
            "expected registry for format json_schema (its values carry registry schema ids), got a schema file; "
            "a schema file is for format avro"))  # fmt: skip
    try:
        value_schema = vs.resolve(file.kafka.topics or (), file.kafka.topic_pattern)
    except _ValueSchemaProblem as exc:
        raise PipelineConfigError(shown, f"transform.value_schema.{exc.key}", exc.message) from None
    if value_schema.text is not None:
        names = [f.get("name") for f in json.loads(value_schema.text)["fields"] if isinstance(f, dict)]
        for f in spec.fields:
            if f.name not in names:
                raise PipelineConfigError(shown, f"transform.schema.{f.name}", (
                    f"expected a field of the Avro record in {value_schema.file} ({', '.join(map(str, names))}), "
                    f"got {f.name!r}" + _did_you_mean(f.name, [str(n) for n in names])))  # fmt: skip
    return replace(spec, value_schema=value_schema)


def _maintenance(file: PipelineFile, shown: str) -> MaintenanceConfig:
    """The ``maintenance`` section, its silver Z-order checked against the transform's fields."""
    section = file.maintenance or MaintenanceConfig()
    columns = section.zorder_by.get("silver")
    if columns:
        if file.transform is None:
            raise PipelineConfigError(shown, "maintenance.zorder_by.silver",
                                      "expected no silver Z-order: the pipeline has no transform section, so no silver table")  # fmt: skip
        declared = tuple(f.name for f in file.transform.spec().fields)
        wrong = [c for c in columns if c not in declared]
        if wrong:
            raise PipelineConfigError(shown, "maintenance.zorder_by.silver", (
                f"expected fields of transform.schema ({', '.join(declared)}), got {wrong[0]!r}"
                + _did_you_mean(wrong[0], declared)
            ))  # fmt: skip
    return section


def _tables(section: TablesSection, name: str, shown: str) -> TablesConfig:
    """Every location of ``section``, defaults under ``<lakehouse_root>/<name>``; none inside another."""
    root = default_lakehouse_root() if section.lakehouse_root is None else _location(section.lakehouse_root)
    locations: dict[str, str] = {}
    explicit: set[str] = set()
    for key, default, _, _ in _TABLE_LOCATIONS:
        given = getattr(section, key)
        if given is None:
            locations[key] = _join_location(root, name, *default)
        else:
            locations[key] = _location(given)
            explicit.add(key)
    for j, (key, _, _, key_is_folder) in enumerate(_TABLE_LOCATIONS):
        for other, _, _, other_is_folder in _TABLE_LOCATIONS[:j]:
            here, there = locations[key], locations[other]
            if not (_is_within(here, there) or _is_within(there, here)):
                continue
            blamed, against, is_folder = key, other, key_is_folder
            if key not in explicit and other in explicit:  # report the key the file set
                blamed, against, is_folder = other, key, other_is_folder
            what = next(w for k, _, w, _ in _TABLE_LOCATIONS if k == against)
            raise PipelineConfigError(
                shown,
                f"tables.{blamed}",
                f"expected {'a folder' if is_folder else 'a location'} apart from {what} "
                f"(neither inside the other), got {locations[blamed]!r} with tables.{against} "
                f"{locations[against]!r}",
            )
    return TablesConfig(
        lakehouse_root=root,
        **locations,
        log_retention_days=section.log_retention_days,
        deleted_file_retention_days=section.deleted_file_retention_days,
    )


def _check_pods_reach(shown: str, tables: TablesConfig, kafka: KafkaConfig, k8s: KubernetesConfig) -> None:
    """Profile ``kubernetes``: what the driver pod reads is in the image, the shared volume or a secret."""
    if k8s.shared_dir is None:  # ClusterConfig already refused it
        return
    for key, uri_ok in _POD_LOCATIONS:
        location = getattr(tables, key)
        if uri_ok and _URI.match(location):
            continue
        if not _is_within(location, k8s.shared_dir):
            allowed = "a URI or a path" if uri_ok else "a path"
            raise PipelineConfigError(
                shown,
                f"tables.{key}",
                f"expected {allowed} inside cluster.kubernetes.shared_dir {k8s.shared_dir!r} with profile "
                "kubernetes (the driver and executor pods see only that volume), got "
                f"{_describe(location)}",
            )
    if kafka.options:
        raise PipelineConfigError(
            shown,
            "kafka.options",
            "expected no options with profile kubernetes, got "
            f"{', '.join(sorted(kafka.options))}; the driver pod reads its Kafka settings only from "
            "the secret cluster.kubernetes.kafka_options_secret, so put them in its JSON",
        )


def _config_error(exc: ValidationError, shown: str) -> PipelineConfigError:
    """Pydantic's errors for the file ``shown`` as one :class:`PipelineConfigError`, a line per problem."""
    found: list[PipelineConfigError] = []
    for error in exc.errors(include_url=False):
        ctx = error.get("ctx") or {}
        nested = ctx.get("error")
        if isinstance(nested, PipelineConfigError):  # from a schema file: it names that file
            found += [PipelineConfigError(e.file, e.field, e.problem) for e in (nested, *nested.more)]
            continue
        field_path = ("".join(_suffix(part) for part in error["loc"]) + ctx.get("at", "")).removeprefix(".")
        if error["type"] == _PROBLEM:
            problem = error["msg"]
        else:  # one of pydantic's own checks, which the ones above should have run before
            problem = f"expected a valid value ({error['msg']}), got {_describe(error['input'])}"
        found.append(PipelineConfigError(shown, field_path or "(top level)", problem))
    first, *more = found
    return PipelineConfigError(first.file, first.field, first.problem, more)


def _display_path(path: Path) -> str:
    """``path`` relative to the project when inside it (short, same on every machine), else as given."""
    try:
        return str(path.resolve().relative_to(settings.PROJECT_ROOT))
    except (OSError, ValueError):
        return str(path)


def default_lakehouse_root() -> str:
    """``KDE_LAKEHOUSE_ROOT`` if set (relative to the working directory, like the
    other ``KDE_*`` folders in :mod:`include.settings`), else ``<KDE_VAR_DIR>/lakehouse``.

    Read at call time, not import time, so one process can load with different settings.
    """
    env = os.environ.get(LAKEHOUSE_ROOT_ENV, "").strip()
    if not env:
        return str(settings.VAR_DIR / "lakehouse")
    if _URI.match(env):
        return env.rstrip("/")
    return os.path.abspath(os.path.expanduser(env))


def _location(value: str) -> str:
    """A location from the file: URIs as written, local paths absolute (relative to the project)."""
    if _URI.match(value):
        return value.rstrip("/")
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = settings.PROJECT_ROOT / path
    return os.path.normpath(path)


def _join_location(root: str, *parts: str) -> str:
    if _URI.match(root):
        return "/".join((root.rstrip("/"), *parts))
    return str(Path(root, *parts))


def _is_within(inner: str, outer: str) -> bool:
    a, b = PurePosixPath(inner), PurePosixPath(outer)
    return a == b or b in a.parents


# --------------------------------------------------------------------------- YAML


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe loader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable key: construct_mapping reports it with its position
            continue
        if duplicate:
            raise _DuplicateKey(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: Path, shown: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelineConfigError(
            shown, "(file)", f"expected a readable UTF-8 YAML file, got {exc}"
        ) from None
    return _parse_yaml(text, shown)


def _parse_yaml(text: str, shown: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        problem = exc.problem or "unreadable"
        if exc.context:
            problem = f"{problem} ({exc.context})"
        raise PipelineConfigError(
            shown, where, f"expected valid YAML, got a syntax error: {problem}"
        ) from None
    except yaml.YAMLError as exc:
        raise PipelineConfigError(
            shown, "(file)", f"expected valid YAML, got a syntax error: {exc}"
        ) from None


# --------------------------------------------------------------------------- JSON Schema

#: Where the pipeline file's JSON Schema is checked in (a unit test keeps it current).
SCHEMA_PATH = settings.PROJECT_ROOT / "docs" / "pipeline.schema.json"
SCHEMA_COMMAND = ".venv/bin/python -m include.config.pipeline_config --schema > docs/pipeline.schema.json"


def pipeline_schema_json() -> str:
    """The JSON Schema of a pipeline file, as checked in at ``docs/pipeline.schema.json``.

    Generated from :class:`PipelineFile`, so editors (e.g. with a
    ``# yaml-language-server: $schema=...`` line) show the same keys,
    defaults and descriptions the loader uses.
    """
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **_PIPELINE_FILE.json_schema()}
    return json.dumps(schema, indent=2) + "\n"


#: Where the pipeline-file reference is checked in (a unit test keeps it equal to :func:`pipeline_reference_markdown`).
REFERENCE_PATH = settings.PROJECT_ROOT / "docs" / "pipeline-file.md"
REFERENCE_COMMAND = ".venv/bin/python -m include.config.pipeline_config --reference > docs/pipeline-file.md"

#: The hand-written top of ``docs/pipeline-file.md``; the tables below it are generated from the models.
REFERENCE_HEADER = f"""# Pipeline file reference

<!-- Generated from the pydantic models in include/config/pipeline_config.py; do not edit by hand.
     Regenerate with: {REFERENCE_COMMAND} -->

A pipeline is one YAML file, and one file is one Airflow DAG. This page lists
every key a pipeline file may hold: its type or allowed values, its default,
and what it means. It is generated from the same pydantic models that load
the files and that the editor schema
[`pipeline.schema.json`](pipeline.schema.json) is made from, so it cannot
drift from what the loader accepts. The commented example is
[`include/pipelines/demo_orders.yaml`](../include/pipelines/demo_orders.yaml).

## How a file is read

- **Where.** Every `*.yaml` and `*.yml` file directly in `include/pipelines/`
  is a pipeline (hidden files are skipped). `KDE_PIPELINES_DIR` names another
  folder; every Airflow process that parses the DAGs must see it. A
  pipeline's name defaults to its file name.
- **Unknown keys are errors**, in every section, with a did-you-mean: a typo
  never falls back to a default silently.
- **Errors name the file and the field**, one line per problem, with what
  was expected and what was found, e.g.
  `include/pipelines/orders.yaml: kafka.max_offsets_per_trigger: expected a positive integer, got 'lots' (str)`.
  A file with an error does not stop the other pipelines: their DAGs load,
  and the errors show as an import error of
  [`dags/pipeline_file_errors.py`](../dags/pipeline_file_errors.py) in the
  Airflow UI and in `airflow dags list-import-errors`.
- **No broker addresses or secrets.** They live in the Airflow connection
  that `kafka.connection_id` names; a key that looks like one (bootstrap
  servers, SASL, SSL, passwords, tokens) is refused wherever it appears.
- **Editor support.** With a first line
  `# yaml-language-server: $schema=../../docs/pipeline.schema.json` (the path
  from `include/pipelines/`), an editor with the YAML language server checks
  the file as it is written and shows these descriptions.

In the tables, *required* marks a key that must be given; a default of `—`
means the key has no fixed default and its meaning says what leaving it out
does. A key whose type is *section* is a mapping of the keys in the table it
links to.
"""


def _reference_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower-case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _reference_object(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any] | None:
    """The object schema (one with properties) ``node`` stands for, through ``$ref`` and ``anyOf``."""
    if "$ref" in node:
        return _reference_object(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    if "properties" in node:
        return node
    for choice in node.get("anyOf", ()):
        found = _reference_object(choice, defs)
        if found is not None:
            return found
    return None


def _reference_mapping(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any] | None:
    """The object schema of each value of a mapping of names to sections (``transform.schema``)."""
    for choice in [node, *node.get("anyOf", ())]:
        values = choice.get("additionalProperties")
        if isinstance(values, dict):
            return _reference_object(values, defs)
    return None


def _reference_type(node: dict[str, Any]) -> str:
    """A property's type in words: allowed values, bounds, or ``section``."""
    if "$ref" in node:
        return "section"
    if "anyOf" in node:
        return " or ".join(dict.fromkeys(_reference_type(choice) for choice in node["anyOf"]))
    if "enum" in node:
        return ", ".join(f"`{value}`" for value in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    kind = node.get("type")
    if kind in ("integer", "number"):
        low, high = node.get("minimum"), node.get("maximum")
        if low is not None and high is not None:
            return f"{kind} {low}–{high}"
        if low is not None:
            return f"{kind} ≥ {low}"
        if node.get("exclusiveMinimum") is not None:
            return f"{kind} > {node['exclusiveMinimum']}"
        return kind
    if kind == "boolean":
        return "`true`, `false`"
    if kind == "array":
        items = node.get("items", {})
        kinds = [choice.get("type") for choice in items.get("anyOf", [items])]
        if all(k in ("string", "integer", "number") for k in kinds):
            return "list of " + " or ".join(f"{k}s" for k in kinds)
        return f"list of {_reference_type(items)}"
    if kind == "object":
        values = node.get("additionalProperties")
        return f"mapping to {_reference_type(values)}" if isinstance(values, dict) else "mapping"
    return kind or "any"


def _reference_value(value: Any) -> str:
    if isinstance(value, str) and value:
        return f"`{value}`"
    return f"`{json.dumps(value)}`"


def _reference_default(model: type[_Section] | None, name: str, prop: dict[str, Any]) -> str:
    """A key's default as the table shows it; ``—`` where the loader works it out or a section is left out."""
    if "default" in prop:
        leads_on = "$ref" in prop or any("$ref" in choice for choice in prop.get("anyOf", ()))
        return "—" if prop["default"] is None and leads_on else _reference_value(prop["default"])
    field = model.__pydantic_fields__.get(name) if model is not None else None
    if field is not None and field.default_factory is not None:  # a mapping or list that starts empty
        return _reference_value(field.default_factory())
    return "—"


def _reference_text(text: str, in_table: bool = True) -> str:
    """Plain text (a description) as Markdown that renders as written; code spans are kept as they are."""
    parts = re.split(r"(`[^`]*`)", text.replace("``", "`"))
    for i in range(0, len(parts), 2):
        part = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", r"\*")
        parts[i] = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\_", part)
    out = "".join(parts)
    return " ".join(out.replace("|", r"\|").split()) if in_table else out


def _reference_intro(description: str) -> str:
    """A section's docstring for readers: paragraphs that point into the code (Sphinx roles) left out."""
    paragraphs = [p for p in description.split("\n\n") if not re.search(r":(class|func|mod|data|meth):", p)]
    return _reference_text("\n\n".join(paragraphs), in_table=False)


def pipeline_reference_markdown() -> str:
    """The pipeline-file reference, ``docs/pipeline-file.md``: one table per section of :class:`PipelineFile`.

    Generated from the same JSON Schema as ``docs/pipeline.schema.json``, so
    every key, type, default and description is the loader's own.
    """
    schema = _PIPELINE_FILE.json_schema()
    defs = schema.get("$defs", {})
    sections: list[tuple[str, dict[str, Any]]] = []

    def heading(path: str) -> str:
        return f"`{path}`" if path else "Top level"

    def visit(path: str, node: dict[str, Any]) -> None:
        sections.append((path, node))
        below = []  # sections first, then mappings of sections: the order a reader meets them in
        for name, prop in node.get("properties", {}).items():
            key = f"{path}.{name}" if path else name
            child = _reference_object(prop, defs)
            if child is not None:
                below.append((0, key, child))
            mapped = _reference_mapping(prop, defs)
            if mapped is not None:
                below.append((1, f"{key}.<field>", mapped))
        for _, key, child in sorted(below, key=lambda item: item[0]):
            visit(key, child)

    visit("", schema)
    models = {model.__name__: model for model in _Section.__subclasses__()}  # a section's title is its class name
    lines = [REFERENCE_HEADER.rstrip("\n")]
    for path, node in sections:
        lines += ["", f"## {heading(path)}", ""]
        if node.get("description"):
            lines += [_reference_intro(node["description"]), ""]
        lines += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        required = set(node.get("required", ()))
        model = PipelineFile if not path else models.get(node.get("title", ""))
        for name, prop in node["properties"].items():
            key = f"{path}.{name}" if path else name
            kind = _reference_type(prop)
            if _reference_object(prop, defs) is not None:
                kind += f" ([{heading(key)}](#{_reference_slug(heading(key))}))"
            elif _reference_mapping(prop, defs) is not None:
                below = f"{key}.<field>"
                kind += f" ([{heading(below)}](#{_reference_slug(heading(below))}))"
            default = "*required*" if name in required else _reference_default(model, name, prop)
            meaning = _reference_text(prop.get("description", ""))
            lines.append(f"| `{key}` | {kind} | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m include.config.pipeline_config --schema | --reference``: print the JSON Schema or the reference."""
    parser = argparse.ArgumentParser(
        prog="python -m include.config.pipeline_config",
        description="Print the JSON Schema of a pipeline file, or its Markdown reference.",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--schema", action="store_true", help=f"print the JSON Schema: {SCHEMA_COMMAND}")
    which.add_argument("--reference", action="store_true", help=f"print the reference: {REFERENCE_COMMAND}")
    args = parser.parse_args(argv)
    sys.stdout.write(pipeline_schema_json() if args.schema else pipeline_reference_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
