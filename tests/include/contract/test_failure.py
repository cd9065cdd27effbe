"""The one failure envelope: every class of the error family, and a nested cause, come back as they were."""

from __future__ import annotations

import ast
import importlib
import json

import pytest

from include import settings
from include.contract.errors import (
    FailureEnvelopeError,
    IngestionError,
    PipelineError,
    StaleLockError,
    TransformError,
    family_class,
)
from include.contract.failure import FAILURE_VERSION, VERSION_KEY, Failure, read_failure
from include.contract.offsets import OffsetError


def _family() -> list[type[PipelineError]]:
    """Every class of the error family the product defines (each module that defines one imported first)."""
    for folder in ("include", "spark_jobs", "dags"):
        for path in sorted((settings.PROJECT_ROOT / folder).rglob("*.py")):
            if "tooling" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            if any(isinstance(n, ast.ClassDef) and any(ast.unparse(b).endswith("Error") for b in n.bases)
                   for n in ast.walk(tree)):  # fmt: skip
                importlib.import_module(".".join(path.relative_to(settings.PROJECT_ROOT).with_suffix("").parts))
    found, todo = [], [PipelineError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda c: c.__name__)


FAMILY = _family()


def _an_error(cls: type[PipelineError]) -> PipelineError:
    """An instance of ``cls`` with every common field set (through the base's fields when ``cls`` has an
    ``__init__`` of its own)."""
    fields = {"pipeline": "orders", "topic": "t", "partition": 3, "offsets": (5, 9), "table": "/lake/b",
              "version": 7, "action": "rebuild_checkpoint"}  # fmt: skip
    try:
        return cls("went wrong", **fields)
    except TypeError:
        data = {"class": cls.__name__, "module": cls.__module__, "message": "went wrong",
                "fields": {**fields, "offsets": [5, 9]}}  # fmt: skip
        return PipelineError.from_dict(data)


def _round_trip(error: PipelineError, traceback: str | None = None) -> PipelineError:
    failure = Failure.of(error, job="kafka_to_bronze", pipeline="orders", run_id="r1", traceback=traceback)
    back = read_failure(json.loads(json.dumps(failure.to_json())), source="summary.json")
    assert back == failure
    return back.error()


def test_the_family_is_all_there():
    names = {c.__name__ for c in FAMILY}
    assert {"OffsetError", "StaleLockError", "PipelineConfigError", "KafkaRangeError", "DescriptorError"} <= names
    assert len(FAMILY) > 30


@pytest.mark.parametrize("cls", FAMILY, ids=lambda c: c.__name__)
def test_every_class_of_the_family_round_trips_through_the_envelope(cls):
    error = _an_error(cls)
    assert type(error) is cls
    back = _round_trip(error)
    assert type(back) is cls and back.fields() == error.fields() and str(back) == str(error)
    assert family_class(cls.__name__, cls.__module__) is cls


def test_a_nested_cause_comes_back_as_the_class_it_was():
    stale = StaleLockError("a newer run holds the lock", pipeline="orders", table="/lake/b")
    stale.lock_epoch, stale.table_epoch = 3, 4
    for outer in (IngestionError, TransformError):
        error = outer("the batch failed", pipeline="orders")
        error.cause = stale
        back = _round_trip(error)
        assert type(back) is outer and type(back.cause) is StaleLockError
        assert (back.cause.lock_epoch, back.cause.table_epoch, back.cause.table) == (3, 4, "/lake/b")


def test_an_unknown_class_comes_back_as_the_base_naming_it():
    data = Failure.of(OffsetError("m"), job="j", pipeline="p", run_id="r").to_json()
    data["error"] = {**data["error"], "class": "GoneError", "module": "somewhere.else"}
    failure = read_failure(data)
    assert failure is not None
    back = failure.error()
    assert type(back) is PipelineError and str(back) == "GoneError: m"


def test_a_result_summary_is_no_failure_and_the_traceback_travels():
    assert read_failure({"run_id": "r1", "rows": 3}) is None and read_failure(None) is None
    data = Failure.of(PipelineError("KeyError: 'x'"), job="j", pipeline="p", run_id="r", traceback="Traceback ...")
    assert data.to_json()[VERSION_KEY] == FAILURE_VERSION
    assert read_failure(data.to_json()) == data and data.traceback == "Traceback ..."


def test_an_envelope_of_another_version_is_refused_naming_both_versions():
    data = {**Failure.of(OffsetError("m"), job="j", pipeline="p", run_id="r").to_json(), VERSION_KEY: 2}
    with pytest.raises(FailureEnvelopeError, match=r"ingest-summary.json: a failure envelope of version 2; this "
                                                   r"code reads version 1"):  # fmt: skip
        read_failure(data, source="ingest-summary.json")


@pytest.mark.parametrize(("change", "message"), [
    ({"error": "boom"}, "field 'error' must be an object"),
    ({"job": None}, "field 'job' must be a string"),
    ({"run_id": 3}, "field 'run_id' must be a string or null"),
])  # fmt: skip
def test_a_malformed_envelope_is_refused_naming_the_field(change, message):
    data = {**Failure.of(OffsetError("m"), job="j", pipeline="p", run_id="r").to_json(), **change}
    with pytest.raises(FailureEnvelopeError, match=message):
        read_failure(data, source="s.json")
