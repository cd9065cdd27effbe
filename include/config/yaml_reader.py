"""Reading a YAML file of the pipeline configuration (a pipeline file or a schema file it names).

PyYAML keeps the last of two equal keys silently; a pipeline file with a key
written twice is refused instead, with the line of the second one. Aliases
(``*name``) are refused too: a few hundred bytes of nested aliases expand to
millions of values in every process that loads the file (the DAG processor,
every monitoring page) and in every error message that shows them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from include.config.errors import PipelineConfigError


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


# The C loader when PyYAML was built with libyaml, else the Python one: a base chosen at import time,
# which a type checker cannot follow (both are SafeLoaders).
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
    """The YAML document in ``path``, named ``shown`` in errors; raises :class:`PipelineConfigError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelineConfigError(
            shown, "(file)", f"expected a readable UTF-8 YAML file, got {exc}"
        ) from None
    return _parse_yaml(text, shown)


def _parse_yaml(text: str, shown: str) -> Any:
    """The YAML document ``text`` of the file ``shown``; raises :class:`PipelineConfigError` naming the line."""
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent):
                mark = event.start_mark
                assert mark is not None  # the parser marks every event it yields
                raise PipelineConfigError(
                    shown,
                    f"line {mark.line + 1}, column {mark.column + 1}",
                    f"expected no YAML aliases, got *{event.anchor}; write the value out where it is used",
                )
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
