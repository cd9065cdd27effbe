"""The checks of single values of a pipeline file, and the value types built on them.

Each value type is the type pydantic (and the JSON Schema) sees, plus a check
that runs first on the value as YAML gave it and raises this project's
message (:mod:`include.config.errors`). Broker addresses and security settings
never appear in a pipeline file; keys that look like them are refused
wherever they appear.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BeforeValidator, Field
from pydantic.fields import FieldInfo

from include.config.errors import _choices, _did_you_mean, _invalid, _problem, _suffix, _unquote_hint
from include.contract import jobs

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
_MEMORY = re.compile(r"^(\d+)([kmgt])b?$", re.IGNORECASE)
#: Spark refuses executors with less than 1.5 x its 300 MiB reserved memory.
_MIN_MEMORY_BYTES = 450 * 1024**2
#: Consumer settings a pipeline file may not set in ``kafka.options``, and why.
#: Consumer settings that make the Kafka client load a class or read the worker's environment and files
#: (config providers, interceptors, metric reporters, login and callback handlers): a pipeline file may
#: be written by someone who must not reach those.
_CODE_OPTION = re.compile(r"^config\.providers(\.|$)|\.class(es)?$|^metric\.reporters$|interceptor")
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
_NAME_EXPECTED = (
    f"letters, digits, '_', '.' or '-', starting with a letter or digit, at most {NAME_MAX_LEN} characters"
)


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


# Each is what pydantic (and the JSON Schema) reads beside a value's type, ``Annotated[int, *_integer(1)]``
# or ``Annotated[str, _text()]``: a check that runs first on the value as YAML gave it and raises this
# project's message (and for integers the bounds the JSON Schema shows).
def _integer(
    low: int, high: int | None = None, expected: str | None = None
) -> tuple[FieldInfo, BeforeValidator]:
    """An integer from ``low`` (to ``high``); YAML booleans and quoted numbers are refused."""
    if expected is None:
        if high is not None:
            expected = f"an integer from {low} to {high}"
        else:
            expected = "a positive integer" if low == 1 else f"an integer >= {low}"

    def check(value: Any) -> int:
        in_range = isinstance(value, int) and low <= value and (high is None or value <= high)
        if isinstance(value, bool) or not isinstance(value, int) or not in_range:
            raise _invalid(expected, value, _unquote_hint(value))
        return value

    return Field(ge=low, le=high), BeforeValidator(check)


def _choice(choices: tuple[str, ...]) -> BeforeValidator:
    """One of ``choices``, spelled exactly (``Fail`` is not ``fail``, but gets a did-you-mean).

    Beside the ``Literal`` of the same choices: ``Annotated[Literal["a", "b"], _choice(("a", "b"))]``.
    """

    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise _invalid(f"one of {_choices(choices)}", value, _did_you_mean(value, choices))
        return value

    return BeforeValidator(check)


def _text(expected: str = "a non-empty string") -> BeforeValidator:
    """A non-empty string, stripped."""

    def check(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _invalid(expected, value)
        return value.strip()

    return BeforeValidator(check)


def _matching(pattern: re.Pattern[str], expected: str, if_null: str | None = None) -> BeforeValidator:
    """A string ``pattern`` matches whole; null stands for ``if_null`` when one is given."""

    def check(value: Any) -> str:
        if value is None and if_null is not None:
            return if_null
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise _invalid(expected, value)
        return value

    return BeforeValidator(check)


def _connection_id(what: str) -> BeforeValidator:
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

    return BeforeValidator(check)


def _folder(if_null: str | None = None) -> BeforeValidator:
    """An absolute path inside a container (no URI); null stands for ``if_null`` when one is given."""

    def check(value: Any) -> str:
        if value is None and if_null is not None:
            return if_null
        # Whitespace is refused: these paths go into JVM options, where a space would start a second option.
        if (
            not isinstance(value, str)
            or not value.startswith("/")
            or "//" in value
            or ":" in value
            or any(c.isspace() for c in value)
        ):
            raise _invalid("an absolute path without spaces (e.g. /mnt/kde)", value)
        return os.path.normpath(value)

    return BeforeValidator(check)


def _check_name(value: Any) -> str:
    """A pipeline name: what a DAG id, a table folder and a consumer group all accept."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or len(value) > NAME_MAX_LEN:
        raise _invalid(_NAME_EXPECTED, value)
    return value


def _check_string(value: Any) -> str:
    """Any string, the empty one included."""
    if not isinstance(value, str):
        raise _invalid("a string", value)
    return value


@dataclass(frozen=True)
class _NotOneSource:
    """Stands for ``kafka.topics`` when it and ``kafka.topic_pattern`` are both given, or neither."""

    found: str


def _check_topics(value: Any) -> tuple[str, ...]:
    """``kafka.topics``: distinct legal topic names; empty when ``kafka.topic_pattern`` is used instead."""
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
    """``kafka.topic_pattern``: a regular expression Python compiles, stripped."""
    if not isinstance(value, str) or not value.strip():
        raise _invalid("a regular expression of topic names", value)
    try:
        re.compile(value.strip())
    except re.error as exc:
        raise _invalid(f"a valid regular expression ({exc})", value) from None
    return value.strip()


def _check_options(value: Any) -> dict[str, str]:
    """``kafka.options``: consumer settings with string values, none a connection or managed setting."""
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
        if _CODE_OPTION.search(key):
            raise _invalid(
                "a consumer setting that loads no code and reads nothing of the worker",
                key,
                ": config providers, *.class(es) keys, interceptors and metric reporters make the "
                "Kafka client load classes or read the environment and files of the machine it "
                "runs on; set authentication through the pipeline's Airflow connection",
                at=at,
            )
        if not _OPTION_KEY.fullmatch(key):
            expected = (
                "a Kafka consumer setting name (lower-case words joined by dots, e.g. 'max.poll.records')"
            )
            raise _invalid(expected, key, at=at)
        if not isinstance(setting, str):
            hint = " (quote the value)" if isinstance(setting, (int, float, bool)) else ""
            raise _invalid("a string value", setting, hint, at=at)
        if "${" in setting:
            raise _invalid(
                "a literal value, not a config provider reference",
                setting,
                ": ${...} asks a provider for a value of the worker's environment or files",
                at=at,
            )
    return dict(value)


def _check_minutes(value: Any) -> float:
    """A positive number of minutes, as a float."""
    positive = isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    if isinstance(value, bool) or not positive:
        raise _invalid("a positive number of minutes", value, _unquote_hint(value))
    return float(value)


def _check_memory(value: Any) -> str:
    """A Spark memory size with a unit, at least what Spark accepts for an executor, in Spark's spelling."""
    expected = "a Spark size with a unit, like '512m' or '2g', of at least 450m"
    match = _MEMORY.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise _invalid(expected, value)
    amount, unit = int(match.group(1)), match.group(2).lower()
    if amount * 1024 ** "kmgt".index(unit) * 1024 < _MIN_MEMORY_BYTES:
        raise _invalid(expected, value, "; Spark refuses executors below 450m")
    return f"{amount}{unit}"


def _check_tags(value: Any) -> tuple[str, ...]:
    """``tags``: distinct non-empty strings, each short enough for an Airflow DAG tag."""
    if not isinstance(value, (list, tuple)):
        raise _invalid("a list of strings", value)
    for i, tag in enumerate(value):
        if not isinstance(tag, str) or not tag.strip() or len(tag) > TAG_MAX_LEN:
            raise _invalid(f"a non-empty string of at most {TAG_MAX_LEN} characters", tag, at=f"[{i}]")
        if tag in value[:i]:
            raise _invalid("each tag once", tag, " a second time", at=f"[{i}]")
    return tuple(value)
