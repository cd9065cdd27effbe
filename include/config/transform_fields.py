"""The fields of a transform's record (``transform.schema``, or the YAML schema file ``transform.schema_file``).

Each field's type and checks (:class:`SchemaField`), the mapping of names to
fields, and reading a schema file beside the pipeline file; they load into the
:class:`~include.contract.transform_spec.FieldSpec` tuple the Spark job reads.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    Field,
    GetJsonSchemaHandler,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic_core import PydanticUseDefault

from include.config import owned_files
from include.config.errors import (
    _config_error,
    _did_you_mean,
    _display_path,
    _invalid,
    _problem,
    _suffix,
    _unquote_hint,
)
from include.config.sections import _SECTION_CONFIG, _optional, _Section
from include.config.yaml_reader import _parse_yaml
from include.contract.transform_spec import (
    FIELD_NAME,
    NUMERIC_TYPES,
    SIMPLE_TYPES,
    SYSTEM_PREFIX,
    FieldSpec,
    is_decimal,
    normalize_type,
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
_FIELD_NAME_EXPECTED = (
    "a field name (letters, digits and '_', starting with a letter, at most 128 characters)"
)


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
        default=False, description="true or false (default): the key must be present with a non-null value."
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
            if isinstance(item, str):  # a string field's value: _check_allowed takes strings for no other
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


def _file_beside(value: Any, folder: Path, expected: str, at: str) -> tuple[Path, str]:
    """A file the pipeline file names (``~`` expanded, relative to ``folder``) and how messages show it."""
    if not isinstance(value, str) or not value.strip():
        raise _invalid(expected, value, at=at)
    path = Path(os.path.expanduser(value.strip()))
    path = Path(os.path.normpath(path if path.is_absolute() else folder / path))
    return path, _display_path(path)


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
    try:
        text = owned_files.read_owned(owned_files.check_owned(path, shown, folder), shown)
    except (OSError, owned_files.NotOwnedFile) as exc:
        # Never what the file holds: it may be a file the pipeline does not own.
        raise _problem(f"expected {expected}: {exc}", ".schema_file") from None
    data = _parse_yaml(text, shown)
    try:
        return _SCHEMA_FILE.validate_python(data), shown
    except ValidationError as exc:
        # A ValueError: pydantic carries it out of the pipeline file's validation as it is.
        raise _config_error(exc, shown) from None
