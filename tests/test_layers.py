"""The package tree is the architecture: each layer of ``include/`` imports only from layers below it.

docs/architecture.md describes the layers; this test keeps the code to it, so a
shortcut upward (a task-layer module reaching into local tooling, the offset
contract reading Kafka) fails here instead of growing quietly.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from include import settings
from include.spark import spark_submit

ROOT = settings.PROJECT_ROOT
#: Bottom to top. A module may import from its own layer and any layer before it.
LAYERS = ("contract", "config", "readers", "spark", "orchestration", "monitoring", "tooling")
#: Modules directly under include/ that every layer may use.
BASE = {"include", "include.settings", "include.ports"}


def _imports(path: Path) -> set[str]:
    """Every ``include...`` module the file imports, lazy imports inside functions too."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "include")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "include":
            if node.module == "include":
                found.update(f"include.{a.name}" for a in node.names)
            else:
                found.add(node.module)
    return found


def _layer(module: str) -> int:
    parts = module.split(".")
    if module in BASE or len(parts) < 2:
        return -1
    if parts[1] not in LAYERS:
        raise AssertionError(f"{module}: include/{parts[1]} is not a layer; add it to LAYERS and docs/architecture.md")
    return LAYERS.index(parts[1])


def _modules(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _modules("include"), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_layer_imports_only_from_layers_below(path: Path):
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    own = _layer(module)
    upward = sorted(m for m in _imports(path) if _layer(m) > own)
    assert not upward, (
        f"{path.relative_to(ROOT)} (layer {LAYERS[own] if own >= 0 else 'base'}) imports {upward} from a layer above it; "
        f"move the shared piece down or the importer up (order, bottom to top: {', '.join(LAYERS)})"
    )


def test_dags_and_the_plugin_never_import_local_tooling():
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in _imports(p) if m.startswith("include.tooling"))
        for folder in ("dags", "plugins")
        for p in _modules(folder)
    }
    assert not {k: v for k, v in offenders.items() if v}, offenders


def test_the_jobs_import_only_what_the_py_files_archive_ships():
    shipped = set()
    for entry in spark_submit._SHIPPED:
        path = ROOT / entry
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            shipped.add(".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
    missing = {
        str(p.relative_to(ROOT)): sorted(m for m in _imports(p) if m not in shipped)
        for p in _modules("spark_jobs")
    }
    assert not {k: v for k, v in missing.items() if v}, (
        f"spark_jobs import modules --py-files does not ship (a cluster's executors would fail on import): {missing}"
    )
