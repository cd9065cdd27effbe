"""Kafka → Delta pipelines: one Airflow DAG per pipeline file in ``include/pipelines/``.

Each DAG waits for lag, checks offsets before and after, runs the ingestion
job on a Spark cluster that exists only for the run, and records the run. The
DAGs are built by ``include.orchestration.dag_factory``; parsing this file reads the pipeline
files and nothing else (no connection, Kafka, Spark or Delta access).
Invalid pipeline files are reported by ``pipeline_file_errors.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Airflow puts the DAG folder on sys.path, not the project root that holds include/.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from include.orchestration.dag_factory import build_dags  # noqa: E402

_dags, _errors = build_dags()
for _dag_id, _dag in _dags.items():
    globals()[_dag_id] = _dag
