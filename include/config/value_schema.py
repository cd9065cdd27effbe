"""Where the values of a schema format find their schema (section ``transform.value_schema``).

A schema file beside the pipeline file (an ``.avsc``, for the formats whose
:class:`~include.contract.value_formats.FormatRules` take one) or a schema
registry's subject; it resolves into the
:class:`~include.contract.transform_spec.ValueSchema` the Spark job reads.
Which formats need a value schema, and which take a file, is
:mod:`include.contract.value_formats`; the loader checks the pair.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo
from pydantic.dataclasses import dataclass as pydantic_dataclass

from include import settings
from include.config import owned_files
from include.config.errors import _invalid, _problem
from include.config.sections import _SECTION_CONFIG, _Section
from include.config.transform_fields import _file_beside
from include.config.validators import _choice, _text
from include.contract.transform_spec import SUBJECT_STRATEGIES, SubjectStrategy, ValueSchema, subject_name

_AVSC_EXPECTED = "the path of an Avro schema file (.avsc, JSON; relative to the pipeline file's folder)"


def _check_version(value: Any) -> int | None:
    if value == "latest":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid("'latest' or a registered version number (a positive integer)", value)
    return value


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class ValueSchemaSection(_Section):
    """Where ``avro``, ``json_schema`` and ``protobuf`` values find their schema (section ``transform.value_schema``).

    Give exactly one of ``file`` (Avro only: each value is plain Avro binary
    written with the file's schema) and ``registry`` (each value is in the
    Confluent wire format; the reader schema is a subject's version and each
    record's writer schema is looked up by the id it carries).
    """

    file: Annotated[str, _text(_AVSC_EXPECTED)] | None = Field(
        default=None,
        description="An Avro schema file (.avsc), relative to the pipeline file's folder: the record schema "
        "every value was written with (plain Avro binary, no header). Read when the pipeline file is loaded. "
        "It must be a regular file of at most 1 MiB inside the pipelines folder (symlinks resolved) or under a "
        "folder the operator lists in KDE_PIPELINE_FILE_ROOTS; any other path is refused unread.",
    )
    registry: Annotated[str, _text("an Airflow connection id")] | None = Field(
        default=None,
        description="The Airflow connection (type http: host and port, or url in its extra; login and "
        "password when the registry wants them) of a Confluent-compatible schema registry. Values are in the "
        "Confluent wire format (magic byte 0, 4-byte schema id, payload).",
    )
    subject_strategy: Annotated[SubjectStrategy, _choice(SUBJECT_STRATEGIES)] = Field(
        default="topic_name",
        description="With registry: how the reader schema's subject is named, as Confluent's serializers do: "
        "topic_name (default: <topic>-value; needs exactly one topic in kafka.topics), record_name "
        "(<record_name>) or topic_record_name (<topic>-<record_name>).",
    )
    record_name: Annotated[str, _text("a record's full name, e.g. shop.Order")] | None = Field(
        default=None,
        description="With registry: the record's full name, for subject_strategy record_name and "
        "topic_record_name.",
    )
    subject: Annotated[str, _text("a registry subject")] | None = Field(
        default=None, description="With registry: the subject itself, instead of subject_strategy."
    )
    version: Annotated[int | None, BeforeValidator(_check_version)] = Field(
        default=None,
        description="With registry: latest (the default: the subject's newest version when the run starts) or "
        "a version number. The version read with is recorded in every silver batch commit.",
        json_schema_extra=lambda s: s.update(
            {
                "anyOf": [{"type": "integer", "minimum": 1}, {"const": "latest"}, {"type": "null"}],
                "default": "latest",
            }
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
                    raise _problem(
                        f"expected no {key} with a schema file (it names a registry subject)", f".{key}"
                    )
            folder = Path((info.context or {}).get("folder", "."))
            data = {**data, "file": _read_avro_schema_file(file, folder)[1]}  # shown: how messages name it
        return data

    def resolve(self, topics: tuple[str, ...], pattern: str | None) -> ValueSchema:
        """The :class:`ValueSchema` the Spark job reads: the registry subject named, or the file's schema."""
        if self.file is not None:
            shown = Path(self.file)
            # The loader checked that the file is the pipeline's own; here it must still be a bounded regular file.
            text, _ = _read_avro_schema_file(
                self.file, settings.PROJECT_ROOT if not shown.is_absolute() else Path("/"), owned=False
            )
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
        return ValueSchema(
            registry=self.registry,
            subject=subject,
            subject_strategy=self.subject_strategy,
            version=self.version,
        )


class _ValueSchemaProblem(Exception):
    """A value schema that cannot be resolved: the key of ``transform.value_schema`` to blame, and why."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key, self.message = key, message


def _read_avro_schema_file(value: Any, folder: Path, *, owned: bool = True) -> tuple[str, str]:
    """The text of ``transform.value_schema.file`` and the file as shown; it must hold an Avro record schema.

    ``owned``: the file must be the pipeline file's own (:mod:`include.config.owned_files`); a job reading
    the file the loader already checked passes ``False``, and the file must still be a bounded regular file.
    """
    path, shown = _file_beside(value, folder, _AVSC_EXPECTED, ".file")
    try:
        real = owned_files.check_owned(path, shown, folder if owned else path.parent)
        text = owned_files.read_owned(real, shown)
    except (OSError, owned_files.NotOwnedFile) as exc:
        raise _problem(f"expected {_AVSC_EXPECTED}: {exc}", ".file") from None
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise _problem(f"expected the Avro schema file {shown} to hold JSON, got: {exc}", ".file") from None
    if (
        not isinstance(schema, dict)
        or schema.get("type") != "record"
        or not isinstance(schema.get("fields"), list)
    ):
        raise _problem(
            f"expected the Avro schema file {shown} to hold a record schema "
            '({"type": "record", "name": ..., "fields": [...]}), got '
            + (f"type {schema.get('type')!r}" if isinstance(schema, dict) else type(schema).__name__),
            ".file",
        )
    return text, shown
