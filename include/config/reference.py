"""The pipeline file's JSON Schema and Markdown reference, generated from the models.

``python -m include.config.reference --schema`` prints ``docs/pipeline.schema.json``
(for editors); ``--reference`` prints ``docs/pipeline-file.md``. Unit tests keep
both files equal to what this module generates.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from include import settings
from include.config.pipeline import _PIPELINE_FILE, PipelineFile
from include.config.sections import _Section

#: Where the pipeline file's JSON Schema is checked in (a unit test keeps it current).
SCHEMA_PATH = settings.PROJECT_ROOT / "docs" / "pipeline.schema.json"
SCHEMA_COMMAND = ".venv/bin/python -m include.config.reference --schema > docs/pipeline.schema.json"


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
REFERENCE_COMMAND = ".venv/bin/python -m include.config.reference --reference > docs/pipeline-file.md"

#: The hand-written top of ``docs/pipeline-file.md``; the tables below it are generated from the models.
REFERENCE_HEADER = f"""# Pipeline file reference

<!-- Generated from the pydantic models in include/config/ (pipeline.py, sections.py, cluster.py,
     kubernetes.py, transform.py, transform_fields.py, value_schema.py); do not edit by hand. Regenerate with: {REFERENCE_COMMAND} -->

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


def _entry_name(key: str) -> str:
    """How the reference names an entry of the mapping at ``key``: ``<route>`` for routes, else ``<field>``."""
    return "<route>" if key == "routes" else "<field>"


def _subclasses(cls: type) -> list[type]:
    """Every subclass of ``cls``, however deep (a route's section extends the transform's rules)."""
    found: list[type] = []
    direct: type
    for direct in cls.__subclasses__():
        found += [direct, *_subclasses(direct)]
    return found


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
        return str(kind)
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
        return _reference_value(field.get_default(call_default_factory=True))
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
                below.append((1, f"{key}.{_entry_name(name)}", mapped))
        for _, key, child in sorted(below, key=lambda item: item[0]):
            visit(key, child)

    visit("", schema)
    # a section's title is its class name
    models = {model.__name__: model for model in _subclasses(_Section)}
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
                below = f"{key}.{_entry_name(name)}"
                kind += f" ([{heading(below)}](#{_reference_slug(heading(below))}))"
            default = "*required*" if name in required else _reference_default(model, name, prop)
            meaning = _reference_text(prop.get("description", ""))
            lines.append(f"| `{key}` | {kind} | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m include.config.reference --schema | --reference``: print the JSON Schema or the reference."""
    parser = argparse.ArgumentParser(
        prog="python -m include.config.reference",
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
