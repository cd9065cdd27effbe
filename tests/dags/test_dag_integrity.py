"""DAG integrity: the ``dags/`` folder parses in Airflow's own DagBag into one DAG per demo pipeline.

In process, as the DAG processor parses it: no scheduler, no metadata
database, no connection (parsing reads the pipeline files and nothing else;
tests/integration/test_pipeline_dag.py checks that in a fresh interpreter on a
migrated Airflow home). Airflow 3's DagBag takes no ``include_examples``: the
examples are a DAG bundle of their own, never read from ``dag_folder``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from include import settings
from include.config import load_pipelines
from include.contract.jobs import START_CLUSTER_TASK, STOP_CLUSTER_TASK

DAGS = settings.PROJECT_ROOT / "dags"
DEMO_PIPELINES = settings.PROJECT_ROOT / "include" / "pipelines"
#: Tasks whose retries the DAG sets itself: a cluster's start is retried once, its teardown twice.
OWN_RETRIES = {START_CLUSTER_TASK: 1, STOP_CLUSTER_TASK: 2}


@pytest.fixture
def dag_bag(tmp_path, monkeypatch):
    """``dag_bag(pipelines_folder)``: the ``dags/`` folder parsed by a DagBag with the pipelines read from that folder.

    Run folders and tables point under ``tmp_path``: parsing must create
    nothing there, nor in the project's ``var/``.
    """
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setattr(settings, "VAR_DIR", tmp_path / "var")
    monkeypatch.setenv("KDE_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv(settings.LAKEHOUSE_ROOT_ENV, str(tmp_path / "lake"))

    def parse(pipelines: Path) -> DagBag:
        monkeypatch.setenv(settings.PIPELINES_DIR_ENV, str(pipelines))
        return DagBag(dag_folder=str(DAGS))

    return parse


def test_the_demo_pipelines_parse_into_one_dag_each_with_their_retries_and_tags(dag_bag, tmp_path):
    bag = dag_bag(DEMO_PIPELINES)
    assert bag.import_errors == {}
    configs, errors = load_pipelines(DEMO_PIPELINES)
    assert errors == {} and sorted(configs) == ["demo_orders", "demo_payments"]
    assert sorted(bag.dag_ids) == sorted(configs)
    for name, cfg in configs.items():
        dag = bag.dags[name]  # not get_dag(), which asks the metadata database
        assert dag.fileloc.endswith("dags/kafka_pipelines.py")
        assert set(dag.tags) == {"kafka-delta-elt", *cfg.tags} and cfg.tags
        wrong = {t.task_id: t.retries for t in dag.tasks if t.retries != OWN_RETRIES.get(t.task_id, cfg.retries)}
        assert wrong == {}, f"{name}: tasks whose retries are not the pipeline's {cfg.retries}"
        assert {"check_request", "ingest", "record_run"} <= set(dag.task_ids)
    assert not (tmp_path / "var").exists() and not (tmp_path / "lake").exists(), "parsing wrote files"


def test_an_invalid_pipeline_file_is_an_import_error_naming_it_and_the_others_still_load(dag_bag, tmp_path):
    pipelines = tmp_path / "pipelines"
    shutil.copytree(DEMO_PIPELINES, pipelines)
    bad = {"kafka": {"connection_id": "kafka_default", "topics": ["t2"], "max_offsets_per_trigger": "lots"},
           "schedule": None}  # fmt: skip
    (pipelines / "bad_one.yaml").write_text(yaml.safe_dump(bad))
    bag = dag_bag(pipelines)
    ((error_file, message),) = bag.import_errors.items()
    assert Path(error_file).name == "pipeline_file_errors.py"
    assert "1 invalid pipeline file(s)" in message
    assert f"{pipelines / 'bad_one.yaml'}: kafka.max_offsets_per_trigger: expected a positive integer" in message
    assert sorted(bag.dag_ids) == ["demo_orders", "demo_payments"]
