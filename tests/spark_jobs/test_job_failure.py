"""A job's failure goes to its summary file as data, which the task side reads back as the same error."""

from __future__ import annotations

import json
from types import SimpleNamespace

from include.contract.errors import PipelineError, summary_failure
from include.contract.offsets import OffsetError
from spark_jobs import job_common, run_steps


def test_write_failure_puts_the_error_class_and_fields_in_the_summary_file(tmp_path):
    path = tmp_path / "ingest-summary.json"
    cfg = SimpleNamespace(pipeline="orders", run_id="r1", summary_path=str(path))
    job_common.write_failure("kafka_to_bronze", cfg, OffsetError("refusing", topic="t", partition=4, offsets=(9, 8)))
    written = json.loads(path.read_text())
    assert written["failed"] is True and written["run_id"] == "r1" and written["job"] == "kafka_to_bronze"
    back = summary_failure(written)
    assert type(back) is OffsetError and (back.partition, back.offsets, back.pipeline) == (4, (9, 8), "orders")


def test_a_foreign_failure_is_written_under_the_base_with_its_class_name(tmp_path):
    path = tmp_path / "s.json"
    job_common.write_failure("maintain_tables", SimpleNamespace(pipeline="p", run_id="r", summary_path=str(path)),
                             KeyError("x"))  # fmt: skip
    back = summary_failure(json.loads(path.read_text()))
    assert type(back) is PipelineError and str(back) == "KeyError: 'x'"


def test_a_later_steps_error_file_keeps_the_message_and_adds_the_error_as_data(tmp_path):
    path = tmp_path / "transform-error.json"
    run_steps._write_error(str(path), "bronze_to_silver", "boom", None, OffsetError("boom", topic="t", partition=0))
    written = json.loads(path.read_text())
    assert written["error"] == "boom" and written["job"] == "bronze_to_silver"
    assert PipelineError.from_dict(written["failure"]).where == "t-0"
