"""One error family: every product error is a PipelineError whose fields travel as data."""

from __future__ import annotations

import ast
import json
import pickle

import pytest

from include import settings
from include.contract import errors
from include.contract.errors import (
    IngestionError,
    PipelineError,
    TransformError,
    batch_failure,
)
from include.contract.offsets import OffsetError, OffsetRange
from include.contract.table_stand import PositionUnknownError

#: Private control-flow exceptions that never leave their module.
PRIVATE = {"_DuplicateKey", "_LoginRequired", "_NoConnection", "_ValueSchemaProblem"}


def _exception_classes() -> list[tuple[str, str, list[str]]]:
    """``(file, class, base names)`` of every class in product code whose name or bases say it is an error."""
    found = []
    for folder in ("include", "spark_jobs", "dags", "plugins"):
        for path in sorted((settings.PROJECT_ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = [ast.unparse(b) for b in node.bases]
                if node.name.endswith("Error") or any(b.endswith(("Error", "Exception")) for b in bases):
                    found.append((str(path.relative_to(settings.PROJECT_ROOT)), node.name, bases))
    return found


def test_every_exception_class_of_the_product_derives_from_the_base():
    import importlib

    classes = _exception_classes()
    assert len(classes) > 30  # the scan sees the product's errors
    outside = []
    for file, name, _bases in classes:
        if name in PRIVATE:
            continue
        module = importlib.import_module(file.removesuffix(".py").replace("/", "."))
        cls = getattr(module, name)
        if not issubclass(cls, PipelineError):
            outside.append(f"{file}: {name}")
    assert outside == []


def test_existing_classes_keep_their_builtin_bases_and_names():
    from include.config import PipelineConfigError
    from include.contract.actions import RequestError
    from spark_jobs.ingest_plan import JobConfigError
    from spark_jobs.kafka_to_bronze import IngestionError as Reexported

    assert issubclass(OffsetError, ValueError) and issubclass(RequestError, ValueError)
    assert issubclass(PipelineConfigError, ValueError) and issubclass(JobConfigError, ValueError)
    assert issubclass(IngestionError, RuntimeError) and Reexported is IngestionError


def test_an_offset_error_carries_partition_and_offsets_and_renders_todays_message():
    with pytest.raises(OffsetError) as caught:
        OffsetRange("orders", 3, 20, 10, 0)
    exc = caught.value
    assert (exc.topic, exc.partition, exc.offsets) == ("orders", 3, (20, 10))
    assert str(exc) == "orders-3: range [20, 10) is not a valid offset range (expected 0 <= from <= until)"
    assert repr(exc) == f"OffsetError({str(exc)!r})"


@pytest.mark.parametrize("error", [
    OffsetError("gap", pipeline="orders", topic="orders", partition=1, offsets=(5, 9), table="/lake/b",
                version=7, action="rebuild_checkpoint"),
    PositionUnknownError("no stand", pipeline="orders", table="/lake/b"),
    PipelineError("plain"),
])  # fmt: skip
def test_to_dict_and_from_dict_round_trip_class_fields_and_text(error):
    data = json.loads(json.dumps(error.to_dict()))
    back = PipelineError.from_dict(data)
    assert type(back) is type(error)
    assert back.fields() == error.fields()
    assert str(back) == str(error)
    assert back.args == error.args


def test_a_subclass_with_its_own_init_round_trips_and_still_pickles():
    from include.config import PipelineConfigError

    error = PipelineConfigError("orders.yaml", "kafka.topics", "expected a list")
    back = PipelineError.from_dict(error.to_dict())
    assert type(back) is PipelineConfigError and str(back) == "orders.yaml: kafka.topics: expected a list"
    again = pickle.loads(pickle.dumps(error))
    assert (again.file, again.field, again.problem) == ("orders.yaml", "kafka.topics", "expected a list")


def test_an_unknown_class_comes_back_as_the_base_keeping_its_name():
    back = PipelineError.from_dict({"class": "GoneError", "module": "somewhere.else", "message": "m", "fields": {}})
    assert type(back) is PipelineError and str(back) == "GoneError: m"


def test_a_batch_error_survives_the_streaming_query_as_data():
    recorded = OffsetError("batch 2 starts at 5 but the bronze table stands at 4", topic="orders", partition=0,
                           offsets=(5, 4), action="rebuild_checkpoint")  # fmt: skip
    jvm_trace = RuntimeError("StreamingQueryException: ...\n  File ...\norg.apache.spark...")
    error = batch_failure(IngestionError, "ingestion", "orders", recorded, jvm_trace)
    assert isinstance(error, IngestionError)
    assert str(error) == ("ingestion of pipeline 'orders' failed: OffsetError: orders-0: batch 2 starts at 5 but "
                          "the bronze table stands at 4")  # fmt: skip
    assert (error.partition, error.offsets, error.action) == (0, (5, 4), "rebuild_checkpoint")
    assert error.cause is recorded
    back = PipelineError.from_dict(json.loads(json.dumps(error.to_dict())))
    assert type(back) is IngestionError and str(back) == str(error)
    assert type(back.cause) is OffsetError and back.cause.offsets == (5, 4) and str(back.cause) == str(recorded)


def test_a_failure_outside_our_code_keeps_the_traces_first_line_only():
    error = batch_failure(TransformError, "transform", "orders", None, RuntimeError("boom\nat org.apache..."))
    assert str(error) == "transform of pipeline 'orders' failed: boom" and error.cause is None


def test_as_pipeline_error_wraps_a_foreign_error_with_its_class_name():
    wrapped = errors.as_pipeline_error(KeyError("k"), pipeline="orders")
    assert type(wrapped) is PipelineError and str(wrapped) == "KeyError: 'k'" and wrapped.pipeline == "orders"
