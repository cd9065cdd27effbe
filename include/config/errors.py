"""How a pipeline file's problems are reported: :class:`PipelineConfigError` and the checks' errors.

Every check raises a pydantic error carrying this project's own message
("expected ..., got ..."): YAML has no types beyond what it guesses, and a
user needs "write the number without quotes", not "Input should be a valid
integer". :func:`_config_error` turns pydantic's ``ValidationError`` into one
:class:`PipelineConfigError` with a line per problem, each naming the file
and the field.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from include import settings
from include.contract.errors import PipelineError


class PipelineConfigError(PipelineError, ValueError):
    """A pipeline file is invalid. The message is ``<file>: <field>: <what was expected, what was found>``.

    One line per problem: ``file``, ``field`` and ``problem`` are the first
    one's, ``more`` holds the others (pydantic checks every key, not only up
    to the first bad one).
    """

    def __init__(self, file: str, field: str, problem: str, more: Sequence[PipelineConfigError] = ()) -> None:
        self.file = file
        self.field = field
        self.problem = problem
        self.more = tuple(more)
        lines = [f"{file}: {field}: {problem}", *(f"{e.file}: {e.field}: {e.problem}" for e in self.more)]
        super().__init__("\n".join(lines))

    def __reduce__(self) -> tuple[Any, ...]:  # keeps the error picklable despite the custom __init__
        return (type(self), (self.file, self.field, self.problem, self.more))


#: Error type of every check of this package; its context carries the message and where below the
#: value it applies.
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
    """``value`` as a message shows what was found: its repr (cut at 80 characters) and its type."""
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
    """``values`` quoted and joined, for an ``expected one of ...`` message."""
    return ", ".join(repr(v) for v in values)


def _did_you_mean(word: Any, candidates: Sequence[str]) -> str:
    """``; did you mean 'x'?`` for the candidate closest to ``word``, or nothing."""
    close = difflib.get_close_matches(word, candidates, n=1) if isinstance(word, str) else []
    return f"; did you mean {close[0]!r}?" if close else ""


def _unquote_hint(value: Any) -> str:
    """A hint for a number written in quotes, which YAML reads as a string; else nothing."""
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+(\.\d+)?\s*", value):
        return "; write the number without quotes"
    return ""


def _suffix(key: Any) -> str:
    """How ``key`` continues a field path: ``.name`` for plain names, ``['a.b']`` or ``[0]`` otherwise."""
    if isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f".{key}"
    return f"[{key!r}]"


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
        else:  # one of pydantic's own checks, which this package's checks should have run before
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
