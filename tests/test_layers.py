"""The package tree is the architecture: each layer of ``include/`` imports only from layers below it.

docs/architecture.md describes the layers; this test keeps the code to it, so a
shortcut upward (a task-layer module reaching into local tooling, the offset
contract reading Kafka) fails here instead of growing quietly. Two more rules:
``spark_jobs`` sits above all of ``include/`` (the jobs import the contract), so
only ``include/tooling`` (dev code that drives the jobs: the benchmark, the CDS
archive's training run) may import it; and no two modules of ``include/`` import
each other, even through others or lazily inside a function.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from include import settings
from include.spark import spark_submit

ROOT = settings.PROJECT_ROOT
#: Bottom to top. A module may import from its own layer and any layer before it.
LAYERS = ("contract", "config", "readers", "spark", "orchestration", "monitoring", "tooling")
#: Modules directly under include/ that every layer may use.
BASE = {"include", "include.settings", "include.ports", "include.private_files"}
#: The only part of include/ that may import spark_jobs: dev code that drives the jobs, never shipped in
#: the Airflow image and never imported by a DAG, the plugin or a task.
MAY_IMPORT_JOBS = "include.tooling"


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


def _module_name(path: Path, root: Path = ROOT) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _import_edges(path: Path, known: set[str], top: str) -> set[str]:
    """The modules of ``known`` under package ``top`` that the file imports, lazy imports too.

    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b`` (``c`` is a name in it).
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == top)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == top:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return found & known


def _import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package tree it imports (itself left out)."""
    files = {_module_name(p, root): p for p in sorted((root / package).rglob("*.py")) if "__pycache__" not in p.parts}
    return {m: _import_edges(p, set(files), package) - {m} for m, p in files.items()}


def _cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_a_cycle_through(graph, sorted(c)[0], c) for c in components]


def _a_cycle_through(graph: Mapping[str, Iterable[str]], start: str, component: set[str]) -> list[str]:
    """The shortest path from ``start`` back to itself inside ``component`` (one exists: it is strongly connected)."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    return [*paths[node], start]
                if nxt in component and nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{start}: no cycle in {sorted(component)}")


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
    module = _module_name(path)
    own = _layer(module)
    upward = sorted(m for m in _imports(path) if _layer(m) > own)
    assert not upward, (
        f"{path.relative_to(ROOT)} (layer {LAYERS[own] if own >= 0 else 'base'}) imports {upward} from a layer above it; "
        f"move the shared piece down or the importer up (order, bottom to top: {', '.join(LAYERS)})"
    )


def test_no_import_cycle_between_modules_of_include():
    cycles = _cycles(_import_graph(ROOT, "include"))
    assert not cycles, "import cycles in include/ (move the shared piece into a module both can import):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


def test_the_cycle_check_finds_a_cycle_through_a_lazy_import(tmp_path: Path):
    # The shape the CDS archive's training once had: each side imported the other inside a function.
    pkg = tmp_path / "include" / "spark"
    pkg.mkdir(parents=True)
    for init in (tmp_path / "include" / "__init__.py", pkg / "__init__.py"):
        init.write_text("")
    (pkg / "cds.py").write_text("def train():\n    from include.spark.submit import session\n")
    (pkg / "submit.py").write_text("def options():\n    from include.spark import cds\n")
    (pkg / "deps.py").write_text("from include.spark import submit\n")
    assert _cycles(_import_graph(tmp_path, "include")) == [["include.spark.cds", "include.spark.submit", "include.spark.cds"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_only_tooling_imports_the_spark_jobs():
    jobs = {_module_name(p) for p in _modules("spark_jobs")}
    offenders = {
        str(p.relative_to(ROOT)): sorted(_import_edges(p, jobs, "spark_jobs"))
        for p in _modules("include")
        if not _module_name(p).startswith(MAY_IMPORT_JOBS)
    }
    assert not {k: v for k, v in offenders.items() if v}, (
        f"include/ modules import spark_jobs, which sits above include/ (the jobs import the contract); only "
        f"{MAY_IMPORT_JOBS} (dev code that drives the jobs) may: {offenders}"
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


#: Built-in exceptions product code does not raise: each failure is a member of the error family
#: (``include.contract.errors.PipelineError``), which carries its topic, partition, table and fix as data.
BARE = {"Exception", "RuntimeError", "ValueError"}
#: Product modules that may still raise them, and why.
MAY_RAISE_BARE = {
    # The base module every layer imports; it imports only the standard library, so not the family (which
    # is the contract layer's). Its errors are a bad environment variable, at process start.
    "include/settings.py",
}


def _bare_raises(path: Path) -> list[str]:
    """``line: name`` of each ``raise`` of a name in :data:`BARE` (called or not) in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id in BARE:
                found.append((node.lineno, target.id))
    return [f"{line}: {name}" for line, name in sorted(found)]


def _product_modules() -> list[Path]:
    return [p for folder in ("include", "spark_jobs", "dags", "plugins") for p in _modules(folder)
            if not _module_name(p).startswith("include.tooling")]  # fmt: skip


def test_product_code_raises_the_error_family_not_bare_builtins():
    offenders = {
        str(p.relative_to(ROOT)): found
        for p in _product_modules()
        if str(p.relative_to(ROOT)) not in MAY_RAISE_BARE and (found := _bare_raises(p))
    }
    assert not offenders, (
        f"product code raises {sorted(BARE)} itself; raise a member of the error family instead "
        f"(include/contract/errors.py, or a subclass of PipelineError beside the code), so the failure "
        f"carries its fields: {offenders}"
    )


def test_the_bare_raise_check_finds_a_raise_of_a_builtin(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("def f(x):\n    if x:\n        raise ValueError('no')\n    raise RuntimeError\n"
                      "def g():\n    raise KeyError('fine')\n")  # fmt: skip
    assert _bare_raises(module) == ["3: ValueError", "4: RuntimeError"]
    assert {str(p.relative_to(ROOT)) for p in _product_modules()} >= MAY_RAISE_BARE, "an exemption names no module"


def test_all_product_code_is_type_checked_strictly():
    # mypy names a module of dags/ and plugins/ by its file name alone (no package), so the strict override
    # lists each by name: a new file left out would be checked without the strict flags.
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = set(next(o["module"] for o in config["overrides"] if o.get("disallow_untyped_defs")))
    files = {p.stem for folder in ("dags", "plugins") for p in _modules(folder) if p.stem != "__init__"}
    assert files <= strict, f"add {sorted(files - strict)} to the strict override in pyproject.toml"
    layers = [layer for layer in LAYERS if layer != "tooling"]  # dev code, not type-checked yet
    missing = [layer for layer in layers if f"include/{layer}" not in config["files"]
               or f"include.{layer}.*" not in strict]  # fmt: skip
    assert not missing and {"dags", "plugins"} <= set(config["files"]), missing
    # The Spark jobs, a package: one pattern covers every module of it.
    assert "spark_jobs" in config["files"] and "spark_jobs.*" in strict, "spark_jobs is not type-checked strictly"


#: The most lines a product module may have: one concern per module, so a newcomer reads one file for it.
MAX_LINES = 600


def _oversized(paths: Iterable[Path], root: Path = ROOT, limit: int = MAX_LINES) -> dict[str, int]:
    """``path: lines`` of each file of ``paths`` longer than ``limit`` lines."""
    sizes = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in paths}
    return {path: lines for path, lines in sorted(sizes.items()) if lines > limit}


def test_no_product_module_is_over_the_line_limit():
    oversized = _oversized(_product_modules())
    assert not oversized, (
        f"product modules over {MAX_LINES} lines (split each by concern into modules of 150-450 lines; "
        f"include/tooling is exempt): " + ", ".join(f"{path} ({lines})" for path, lines in oversized.items())
    )


def test_the_line_limit_check_finds_an_oversized_module(tmp_path: Path):
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "fits.py").write_text("x = 1\n" * MAX_LINES)
    assert _oversized(sorted(tmp_path.glob("*.py")), root=tmp_path) == {"big.py": MAX_LINES + 1}


#: The one module that reads and writes XComs: every hand-off between tasks is a typed record there.
XCOM_MODULE = "include/contract/handoffs.py"


def _xcom_calls(path: Path) -> list[str]:
    """``line: text`` of each XCom read or write in the file: a call of ``xcom_pull``/``xcom_push``, or a
    template string that pulls one."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and node.attr in {"xcom_pull", "xcom_push"}:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "xcom_pull" in node.value:
            found.append((node.lineno, "a template that pulls an XCom"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def test_xcoms_are_read_and_written_only_through_the_contracts_hand_offs():
    offenders = {
        str(p.relative_to(ROOT)): found
        for p in _product_modules()
        if str(p.relative_to(ROOT)) != XCOM_MODULE and (found := _xcom_calls(p))
    }
    assert not offenders, (
        f"XComs read or written outside {XCOM_MODULE}; use its typed readers (request_plan, preflight_result, "
        f"cluster_start, ...) or pull/push there, so every hand-off has one record class: {offenders}"
    )


def test_the_xcom_check_finds_a_pull_a_push_and_a_template(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("def f(ti):\n    ti.xcom_push(key='k', value=1)\n    return ti.xcom_pull(task_ids='t')\n"
                      "MASTER = \"{{ ti.xcom_pull(task_ids='s') }}\"\n")  # fmt: skip
    assert _xcom_calls(module) == ["2: xcom_push", "3: xcom_pull", "4: a template that pulls an XCom"]
    assert (ROOT / XCOM_MODULE).exists() and _xcom_calls(ROOT / XCOM_MODULE), "the hand-offs module moved"


#: The records that cross a task or process boundary: XComs, the jobs' summaries, steps.json, the failure
#: envelope. Their fields are typed (a JSON value at most), never ``Any``.
HAND_OFF_MODULES = ("include/contract/handoffs.py", "include/contract/summaries.py",
                    "include/contract/steps_file.py", "include/contract/failure.py")  # fmt: skip


def _any_fields(path: Path) -> list[str]:
    """``Class.field`` of each class-level field annotated with ``Any`` (anywhere in its type) in the file."""
    found = []
    for cls in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(cls, ast.ClassDef):
            for node in cls.body:
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and any(
                    isinstance(n, ast.Name) and n.id == "Any" for n in ast.walk(node.annotation)
                ):
                    found.append(f"{cls.name}.{node.target.id}")
    return found


def test_hand_off_records_have_no_field_typed_any():
    offenders = {m: found for m in HAND_OFF_MODULES if (found := _any_fields(ROOT / m))}
    assert not offenders, f"type these fields (include/contract/json_values.Json for a JSON value): {offenders}"


def test_the_any_field_check_finds_one(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("class R:\n    a: int\n    b: dict[str, Any]\n    c: 'Json'\n")
    assert _any_fields(module) == ["R.b"]


def _test_module_imports(path: Path) -> list[str]:
    """Each module named ``test_...`` (its last dotted part) that the file imports, lazy imports too:
    ``import a.test_b``, ``from a.test_b import c``, ``from a import test_b``, relative ones with their dots."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            found.add(module)
            found.update(f"{module}.{a.name}" if node.module else f"{module}{a.name}" for a in node.names)
    return sorted(m for m in found if m.rsplit(".", 1)[-1].startswith("test_"))


def test_no_test_module_imports_another_test_module():
    # A test module is not a library: importing one runs its module code again under another name and ties
    # its tests' helpers to the importer. Shared helpers live in a module without the test_ prefix.
    offenders = [f"{p.relative_to(ROOT)}: {module}" for p in sorted((ROOT / "tests").rglob("*.py"))
                 for module in _test_module_imports(p)]  # fmt: skip
    assert not offenders, (
        "test modules import test modules; move what they share into a helper module beside them (no test_ "
        "prefix, as tests/spark_jobs/helpers.py) and import it from there: " + ", ".join(offenders)
    )


def test_the_test_module_import_check_finds_one(tmp_path: Path):
    module = tmp_path / "test_m.py"
    module.write_text("import os\nimport tests.test_a\nfrom tests.b.test_c import helper\n"
                      "from tests.d import test_e, fine\nfrom .test_f import g\nfrom . import test_h\n"
                      "from tests import helpers\nimport pytest\n"
                      "def f():\n    from tests.test_i import j\n")  # fmt: skip
    assert _test_module_imports(module) == [
        ".test_f", ".test_h", "tests.b.test_c", "tests.d.test_e", "tests.test_a", "tests.test_i"
    ]
