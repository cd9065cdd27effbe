"""Adding one more cluster profile, value format and trigger-form action is what docs/extending.md says it is.

The test copies the product's code into a folder of its own and adds a throwaway profile, format and action
there the way docs/extending.md tells a newcomer to: each its modules, plus its line in each registry. A fresh
interpreter in that copy then loads a pipeline file that uses all three, builds its DAG (the trigger form) and
runs ``check_request`` with the new action. The same script in the project itself is refused at the loader,
so the only thing that made the copy accept them is what the test added.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from include import settings

ROOT = Path(settings.PROJECT_ROOT)

PROFILE_RULES = '''"""throwaway_cluster: a test's profile, with the default rules (a master connection required)."""

from include.config.profiles.base import ClusterProfileRules


class ThrowawayRules(ClusterProfileRules):
    """A master connection, as existing_master; no other rule."""

    name = "throwaway_cluster"
    description = "throwaway_cluster: a test's profile."
'''

PROFILE_RUNTIME = '''"""throwaway_cluster at run time: a driver on this machine, described, never submitted by the test."""

from include.config import ClusterConfig
from include.orchestration.profiles.base import DriverHereProfile


class Throwaway(DriverHereProfile):
    """What the DAG asks of the profile before any job runs."""

    name = "throwaway_cluster"

    def describe(self, cluster: ClusterConfig) -> str:
        return f"Spark jobs run on the throwaway cluster of connection {cluster.master_connection_id}."

    def submit_hook(self, cfg, request):
        raise NotImplementedError("the test submits nothing")
'''

FORMAT_RUNTIME = '''"""throwaway_text: each value is text, read as JSON (a test's format)."""

from include.contract.value_formats import THROWAWAY_TEXT


class ThrowawayValues:
    """The value cast to text."""

    rules = THROWAWAY_TEXT

    def open(self, schemas, where):
        raise NotImplementedError

    def writer(self, schemas, found):
        raise NotImplementedError

    def value_text(self, df, plan, max_value_bytes):
        from pyspark.sql import functions as F

        return df, F.col("_kafka_value").cast("string"), F.lit(None).cast("string")
'''

FORMAT_RULES = '''
THROWAWAY_TEXT = FormatRules(name="throwaway_text", description="throwaway_text: a test's format.",
                             noun="a throwaway value")
'''

ACTION_SPEC = (
    '    ActionSpec("throwaway_action", "Throwaway: a test\'s action, a normal run with a reason"),\n'
)

#: Run in the copy (and, as the control, in the project): the loader, the DAG's form, ``check_request``.
SCRIPT = """
import json, sys
from include.config import load_pipeline
from include.contract.errors import PipelineError
try:
    cfg = load_pipeline(sys.argv[1])
except PipelineError as exc:
    print(json.dumps({"refused": str(exc)}))
    raise SystemExit(0)
from include.orchestration.tasks import FailTask
from include.orchestration import dag_factory, tasks
from include.orchestration.profiles import profile_of
from spark_jobs.formats.registry import value_format

dag = dag_factory.build_dag(cfg)

def request(params):
    return tasks.check_request(cfg, dag_id=cfg.name, run_id="manual__1", params=params, run_type="manual",
                               requested_by="ann", data_interval=(None, None), run_state=lambda _d, _r: None)

try:
    request({"action": "throwaway_action"})
    refusal = None
except FailTask as exc:
    refusal = str(exc)
planned = request({"action": "throwaway_action", "reason": "trying the new action"})
print(json.dumps({
    "profile": profile_of(cfg.cluster).name, "transient": profile_of(cfg.cluster).transient,
    "doc": dag.doc_md, "format": value_format(cfg.transform.format).rules.noun,
    "form": dag.params.get_param("action").schema["enum"], "refusal": refusal,
    "done": planned.is_done, "plan": planned.xcom_value,
}))
"""


def _replace_once(path: Path, old: str, new: str) -> None:
    """``old`` -> ``new`` in ``path``: the registry's shape is what docs/extending.md describes, or this fails."""
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: expected one {old!r}; docs/extending.md describes this registry"
    path.write_text(text.replace(old, new))


def _add_throwaways(copy: Path) -> None:
    """The newcomer's edits: a profile, a format and an action, each its modules and its registry lines."""
    profiles = copy / "include" / "config" / "profiles"
    (profiles / "throwaway_cluster.py").write_text(PROFILE_RULES)
    _replace_once(profiles / "__init__.py", "from include.config.profiles.local_standalone import LocalStandaloneRules",
                  "from include.config.profiles.local_standalone import LocalStandaloneRules\n"
                  "from include.config.profiles.throwaway_cluster import ThrowawayRules")  # fmt: skip
    _replace_once(profiles / "__init__.py", "KubernetesRules())", "KubernetesRules(), ThrowawayRules())")
    runtime = copy / "include" / "orchestration" / "profiles"
    (runtime / "throwaway_cluster.py").write_text(PROFILE_RUNTIME)
    _replace_once(runtime / "__init__.py", "from include.orchestration.profiles.local_standalone import LocalStandalone",
                  "from include.orchestration.profiles.local_standalone import LocalStandalone\n"
                  "from include.orchestration.profiles.throwaway_cluster import Throwaway")  # fmt: skip
    _replace_once(runtime / "__init__.py", "Kubernetes())", "Kubernetes(), Throwaway())")

    formats = copy / "include" / "contract" / "value_formats.py"
    _replace_once(formats, "\n#: Every format by name", FORMAT_RULES + "\n#: Every format by name")
    _replace_once(formats, "JSON_SCHEMA, PROTOBUF)}", "JSON_SCHEMA, PROTOBUF, THROWAWAY_TEXT)}")
    (copy / "spark_jobs" / "formats" / "throwaway_text.py").write_text(FORMAT_RUNTIME)
    registry = copy / "spark_jobs" / "formats" / "registry.py"
    _replace_once(registry, "from spark_jobs.formats.protobuf import ProtobufValues",
                  "from spark_jobs.formats.protobuf import ProtobufValues\n"
                  "from spark_jobs.formats.throwaway_text import ThrowawayValues")  # fmt: skip
    _replace_once(registry, '    "protobuf": ProtobufValues,\n', '    "protobuf": ProtobufValues,\n    "throwaway_text": ThrowawayValues,\n')

    _replace_once(copy / "include" / "contract" / "actions.py", "\n)}  # fmt: skip", "\n" + ACTION_SPEC + ")}  # fmt: skip")


def _run(project: Path, pipeline: Path, tmp_path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(project), "KDE_VAR_DIR": str(tmp_path / "var"),
           settings.LAKEHOUSE_ROOT_ENV: str(tmp_path / "lake"), "KDE_CACHE_DIR": str(settings.CACHE_DIR)}  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(pipeline)], cwd=project, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def throwaway_pipeline(tmp_path) -> Path:
    """A pipeline file that uses the throwaway profile and format."""
    path = tmp_path / "throwaway.yaml"
    path.write_text(yaml.safe_dump({
        "kafka": {"connection_id": "kafka_test", "topics": ["t"]}, "schedule": None,
        "cluster": {"profile": "throwaway_cluster", "master_connection_id": "spark_elsewhere"},
        "transform": {"format": "throwaway_text", "schema": {"id": {"type": "string"}, "at": {"type": "timestamp"}},
                      "key": "id", "ordering": "at"},
    }))  # fmt: skip
    return path


def test_a_profile_a_format_and_an_action_are_their_modules_and_registry_lines(tmp_path, throwaway_pipeline):
    copy = tmp_path / "project"
    keep = shutil.ignore_patterns("__pycache__", "tooling", "pipelines", "jvm")
    for part in ("include", "spark_jobs"):
        shutil.copytree(ROOT / part, copy / part, ignore=keep)
    _add_throwaways(copy)

    got = _run(copy, throwaway_pipeline, tmp_path)
    assert got["profile"] == "throwaway_cluster" and got["transient"] is False
    assert "on the throwaway cluster of connection spark_elsewhere" in got["doc"]
    assert got["format"] == "a throwaway value"
    assert "throwaway_action" in got["form"] and "normal" in got["form"]
    assert "reason: required for action 'throwaway_action'" in got["refusal"]
    assert got["done"] is True
    assert got["plan"]["action"] == "throwaway_action" and got["plan"]["reason"] == "trying the new action"
    assert got["plan"]["requested_by"] == "ann"


def test_without_the_additions_the_project_refuses_the_same_pipeline_file(tmp_path, throwaway_pipeline):
    got = _run(ROOT, throwaway_pipeline, tmp_path)
    assert "throwaway_cluster" in got["refused"] and "expected one of" in got["refused"]
