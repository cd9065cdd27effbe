"""Which records a route takes (section ``transform.routes.<route>.match``).

Loads into a :class:`~include.contract.routes.RouteMatch`, whose
:meth:`~include.contract.routes.RouteMatch.matches` defines what each key
means; the Spark job evaluates the same conditions as column expressions.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from include.config.errors import _invalid, _problem
from include.config.sections import _SECTION_CONFIG, _Section
from include.config.validators import _check_topics
from include.contract.routes import MATCH_KEYS, RouteMatch, ValueMatch

#: A record's full name: dotted Avro or Protobuf names.
_FULL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _texts(value: Any, expected: str, pattern: re.Pattern[str] | None = None) -> tuple[str, ...]:
    """One string or a non-empty list of distinct strings (each ``pattern`` matches whole, if given)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        hint = "; quote it: values are compared as text" if isinstance(value, (int, float, bool)) else ""
        raise _invalid(f"{expected}, or a non-empty list of them", value, hint)
    for i, item in enumerate(items):
        at = "" if isinstance(value, str) else f"[{i}]"
        if not isinstance(item, str) or not item or (pattern is not None and not pattern.fullmatch(item)):
            hint = "; quote it: values are compared as text" if isinstance(item, (int, float, bool)) else ""
            raise _invalid(expected, item, hint, at=at)
        if item in items[:i]:
            raise _invalid("each value once", item, " a second time", at=at)
    return tuple(items)


def _value_match(what: str) -> BeforeValidator:
    """A mapping of one name to a text or a list of texts: ``{event_type: order}``."""

    def check(value: Any) -> dict[str, tuple[str, ...]]:
        if not isinstance(value, dict) or len(value) != 1:
            raise _invalid(f"a mapping of one {what} name to its value or a list of values, e.g. {{type: order}}",
                           value)  # fmt: skip
        ((name, values),) = value.items()
        if not isinstance(name, str) or not name:
            raise _invalid(f"a {what} name (text)", name)
        return {name: _texts(values, f"a text value of {what} {name}", None)}

    return BeforeValidator(check)


def _check_topic(value: Any) -> tuple[str, ...]:
    return _check_topics([value] if isinstance(value, str) else value)


def _check_key_pattern(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _invalid("a regular expression found in the Kafka key (anchor it with ^ and $ for the whole key)",
                       value)  # fmt: skip
    try:
        re.compile(value)
    except re.error as exc:
        raise _invalid(f"a valid regular expression ({exc})", value) from None
    return value


def _check_full_names(value: Any) -> tuple[str, ...]:
    return _texts(value, "a record's full name (namespace and name, e.g. shop.Order)", _FULL_NAME)


def _check_subjects(value: Any) -> tuple[str, ...]:
    return _texts(value, "a registry subject")


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class MatchSection(_Section):
    """Which records a route takes (section ``transform.routes.<route>.match``): every key given must hold."""

    topic: Annotated[str | tuple[str, ...], BeforeValidator(_check_topic)] | None = Field(
        default=None, description="A topic name or a list of them: the record's topic is one of them."
    )
    header: Annotated[dict[str, str | tuple[str, ...]], _value_match("header")] | None = Field(
        default=None,
        description="A mapping of one header name to a value or a list of values, e.g. {event_type: order}: a "
        "Kafka header of that name carries one of them (its bytes read as UTF-8 text; with several headers of "
        "the name, any of them). Quote numbers: values are compared as text.",
        json_schema_extra={"minProperties": 1, "maxProperties": 1},
    )
    key: Annotated[str, BeforeValidator(_check_key_pattern)] | None = Field(
        default=None,
        description="A regular expression (Java's, as Spark's rlike reads it; checked with Python's re) found "
        "anywhere in the Kafka key read as UTF-8 text; anchor it with ^ and $ to match the whole key. A "
        "record without a key never matches.",
    )
    field: Annotated[dict[str, str | tuple[str, ...]], _value_match("field")] | None = Field(
        default=None,
        description="A mapping of one field name to a value or a list of values: the record value is a JSON "
        "object (as text, or behind the Confluent wire format's header, as JSON Schema serializers write it) "
        "whose top-level field of that name is one of them, as text (a string's characters; a number or "
        "boolean as JSON writes it). A value that is not a JSON object never matches.",
        json_schema_extra={"minProperties": 1, "maxProperties": 1},
    )
    record_name: Annotated[str | tuple[str, ...], BeforeValidator(_check_full_names)] | None = Field(
        default=None,
        description="A record's full name or a list of them (e.g. shop.Order): the value is in the Confluent "
        "wire format and the schema registry says its schema id names a record (Avro) or message (Protobuf) "
        "of one of these names. Needs a route of the transform reading values through a schema registry.",
    )
    subject: Annotated[str | tuple[str, ...], BeforeValidator(_check_subjects)] | None = Field(
        default=None,
        description="A registry subject or a list of them: the schema id the value carries is registered "
        "under one of them. Needs a schema registry, as record_name.",
    )

    @classmethod
    def _expected(cls, value: Any) -> str:
        return f"a mapping with one or more of {', '.join(MATCH_KEYS)}"

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: Any) -> dict[str, Any]:
        if not any(data.get(k) is not None for k in MATCH_KEYS):
            raise _problem(f"expected at least one of {', '.join(MATCH_KEYS)} (every one given must hold), got "
                           "none")  # fmt: skip
        return data

    def spec(self) -> RouteMatch:
        """The match as the Spark job evaluates it."""
        return RouteMatch(topic=_tuple(self.topic), header=_item(self.header), key=self.key,
                          field=_item(self.field), record_name=_tuple(self.record_name),
                          subject=_tuple(self.subject))  # fmt: skip


def _tuple(value: str | tuple[str, ...] | None) -> tuple[str, ...] | None:
    return (value,) if isinstance(value, str) else value


def _item(value: dict[str, str | tuple[str, ...]] | None) -> ValueMatch | None:
    if value is None:
        return None
    ((name, values),) = value.items()
    return ValueMatch(name, _tuple(values) or ())
