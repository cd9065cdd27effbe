"""Tests of spark_jobs/run_steps.py: the steps file of a run's one Spark application, and a later step's error file.

No session: every test here ends before one would start, or runs the steps on a stand-in for it.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from include.contract.errors import IngestionError, StepsFileError
from include.contract.failure import read_failure
from include.contract.offsets import OffsetError
from include.contract.steps_file import RunStep, StepsFile
from spark_jobs import run_steps
from spark_jobs.job_common import JobStep


def _planned(tmp_path, name: str, run, error_path: str | None = None) -> run_steps.PlannedStep:
    step = JobStep(name, parse=lambda args: None, bad_argument=ValueError, run=run, describe=lambda r: f"r={r}")
    cfg = SimpleNamespace(pipeline="orders", run_id="r1", summary_path=str(tmp_path / f"{name}-summary.json"))
    return run_steps.PlannedStep(step, cfg, error_path)


def _fails(error: BaseException):
    def run(spark, cfg):
        raise error

    return run


def test_a_later_steps_failure_is_the_one_envelope_in_its_error_file_and_the_application_exits_0(tmp_path, capsys):
    path = tmp_path / "transform-error.json"
    cause = OffsetError("batch 3 starts at 9", topic="t", partition=0, offsets=(9, 8))
    error = IngestionError("transform of pipeline 'orders' failed", pipeline="orders")
    error.cause = cause
    planned = [_planned(tmp_path, "kafka_to_bronze", lambda spark, cfg: 5),
               _planned(tmp_path, "bronze_to_silver", _fails(error), str(path))]  # fmt: skip
    assert run_steps._run(None, planned, "orders") == 0
    failure = read_failure(json.loads(path.read_text()))
    assert failure is not None and (failure.job, failure.run_id, failure.traceback) == ("bronze_to_silver", "r1", None)
    back = failure.error()
    assert type(back) is IngestionError and type(back.cause) is OffsetError and back.cause.offsets == (9, 8)
    assert "(written to" in capsys.readouterr().err


def test_a_later_steps_bug_is_written_with_its_class_name_and_traceback(tmp_path):
    path = tmp_path / "maintain-error.json"
    planned = [_planned(tmp_path, "kafka_to_bronze", lambda spark, cfg: 5),
               _planned(tmp_path, "maintain_tables", _fails(KeyError("x")), str(path))]  # fmt: skip
    assert run_steps._run(None, planned, "orders") == 0
    failure = read_failure(json.loads(path.read_text()))
    assert failure is not None and "KeyError" in (failure.traceback or "")
    assert str(failure.error()) == "KeyError: 'x'" and failure.error().pipeline == "orders"


def test_the_first_steps_failure_goes_to_its_summary_and_the_application_exits_1(tmp_path):
    planned = [_planned(tmp_path, "kafka_to_bronze", _fails(OffsetError("gap", topic="t", partition=1))),
               _planned(tmp_path, "bronze_to_silver", lambda spark, cfg: 1, str(tmp_path / "e.json"))]  # fmt: skip
    assert run_steps._run(None, planned, "orders") == 1
    failure = read_failure(json.loads((tmp_path / "kafka_to_bronze-summary.json").read_text()))
    assert failure is not None and type(failure.error()) is OffsetError and not (tmp_path / "e.json").exists()


def test_the_steps_file_round_trips_through_its_contract(tmp_path):
    steps = StepsFile("orders", (RunStep("kafka_to_bronze", ("--pipeline=orders",)),
                                 RunStep("bronze_to_silver", ("--a",), str(tmp_path / "e.json"))))  # fmt: skip
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(steps.to_json()))
    assert run_steps.read_steps(str(path)) == steps


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
    with pytest.raises(StepsFileError, match=message) as info:
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
