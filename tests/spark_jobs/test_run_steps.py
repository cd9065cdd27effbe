"""Tests of spark_jobs/run_steps.py: the steps file of a run's one Spark application, and a later step's error file.

No session: every test here ends before one would start (write_failure's tests are in test_job_common.py).
"""

from __future__ import annotations

import json

import pytest

from include.contract.errors import PipelineError
from include.contract.offsets import OffsetError
from spark_jobs import run_steps


def test_a_later_steps_error_file_keeps_the_message_and_adds_the_error_as_data(tmp_path):
    path = tmp_path / "transform-error.json"
    run_steps._write_error(str(path), "bronze_to_silver", "boom", None, OffsetError("boom", topic="t", partition=0))
    written = json.loads(path.read_text())
    assert written["error"] == "boom" and written["job"] == "bronze_to_silver"
    assert PipelineError.from_dict(written["failure"]).where == "t-0"


@pytest.mark.parametrize(("content", "message"), [
    ("not json", "cannot read the steps file"),
    (json.dumps({"steps": []}), "field 'steps' must be a non-empty list"),
    (json.dumps({"steps": [{"job": "rm_rf", "args": []}]}), "steps\\[0\\].job is 'rm_rf'; expected one of"),
    (json.dumps({"steps": [{"job": "kafka_to_bronze", "args": "--x"}]}), "steps\\[0\\].args must be a list"),
    (json.dumps({"steps": [{"job": "kafka_to_bronze", "args": []}, {"job": "bronze_to_silver", "args": []}]}),
     "steps\\[1\\].error_path is missing"),
])  # fmt: skip
def test_a_bad_steps_file_is_refused_naming_the_file_and_field(tmp_path, content, message):
    path = tmp_path / "steps.json"
    path.write_text(content)
    with pytest.raises(run_steps.StepsFileError, match=message) as info:
        run_steps.read_steps(str(path))
    assert str(path) in str(info.value)


def test_a_bad_step_argument_exits_2_before_any_session(tmp_path, capsys):
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({"pipeline": "orders", "steps": [{"job": "kafka_to_bronze", "args": ["--pipeline=x"]}]}))
    assert run_steps.main(["--steps-file", str(path)]) == 2
    assert "kafka_to_bronze: bad argument" in capsys.readouterr().err


def test_a_bad_steps_argument_exits_2_naming_it_and_help_exits_0(capsys):
    assert run_steps.main([]) == 2
    # The message is argparse's own, not its exit status ("bad argument: 2").
    assert "run_steps: bad argument: the following arguments are required: --steps-file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        run_steps.main(["--help"])
    assert done.value.code == 0 and "--steps-file STEPS_FILE" in capsys.readouterr().out
