"""Reports invalid pipeline files as an Airflow DAG import error.

The pipeline DAGs (``kafka_pipelines.py``) load every valid pipeline file and
skip the invalid ones, so one bad file never takes the other pipelines down.
This file defines no DAG: when a pipeline file is invalid, importing it fails
with each error (file, field, what was expected), which Airflow shows in the
UI's "DAG Import Errors" list and in ``airflow dags list-import-errors``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from include.config import load_pipelines  # noqa: E402
from include.contract.errors import PipelineError  # noqa: E402
from include.settings import pipelines_dir  # noqa: E402


class InvalidPipelineFiles(PipelineError, ValueError):
    """One or more pipeline files failed validation; the message lists each error."""


_, _errors = load_pipelines(pipelines_dir())
if _errors:
    raise InvalidPipelineFiles(
        f"{len(_errors)} invalid pipeline file(s); their DAGs were not created:\n"
        + "\n".join(f"  {line}" for message in _errors.values() for line in message.splitlines())
    )
