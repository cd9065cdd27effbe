"""The one failure envelope: what a failed job or step hands to the operator that submitted it.

Pure Python, no I/O. Every job (``spark_jobs/job_common.job_main``) and every
step of a run's application (``spark_jobs/run_steps.py``) that fails writes
one :class:`Failure` as JSON: a job where its summary would have gone, a later
step of the application to its own error file. The operator reads either with
:func:`read_failure` and raises :meth:`Failure.error`: the same class with the
same fields, a nested cause (a failed batch's own error) as the class it was.

The JSON, version 1 (``error`` is :meth:`~include.contract.errors.PipelineError.to_dict`)::

    {"failure_version": 1, "job": "bronze_to_silver", "pipeline": "orders", "run_id": "...",
     "error": {"class": "TransformError", "module": "include.contract.errors", "message": "...",
               "fields": {"topic": null, ..., "cause": {"class": "OffsetError", ...}}, "text": "..."},
     "traceback": null}

``failure_version`` marks the file as a failure (a job's result summary has no
such key) and says how to read it: a version this side does not know is a
:class:`~include.contract.errors.FailureEnvelopeError` naming both versions,
never a guess. A change to the shape bumps :data:`FAILURE_VERSION`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from include.contract.errors import FailureEnvelopeError, PipelineError
from include.contract.json_values import Json

#: The version of the envelope this code writes and reads.
FAILURE_VERSION = 1
#: The key that marks a JSON object as a failure envelope, and holds its version.
VERSION_KEY = "failure_version"


@dataclass(frozen=True)
class Failure:
    """A failed job or step: who failed (``job``, ``pipeline``, ``run_id``) and the error, as data.

    ``error_class`` and ``error_module`` name the error's class (the reader
    rebuilds it from the family's registry); ``message`` and ``fields`` are
    its data, ``text`` what ``str()`` of it said. ``traceback``: the Python
    traceback of an error outside the family (a bug in a later step), else
    ``None``.
    """

    job: str
    pipeline: str | None
    run_id: str | None
    error_class: str
    error_module: str
    message: str
    text: str
    fields: Mapping[str, Json] = field(default_factory=dict)
    traceback: str | None = None
    version: int = FAILURE_VERSION

    @classmethod
    def of(
        cls,
        error: PipelineError,
        *,
        job: str,
        pipeline: str | None,
        run_id: str | None,
        traceback: str | None = None,
    ) -> Failure:
        """The envelope of ``error``, which ``job`` raised in ``run_id`` of ``pipeline``."""
        data = error.to_dict()
        return cls(
            job=job,
            pipeline=pipeline,
            run_id=run_id,
            error_class=data["class"],
            error_module=data["module"],
            message=data["message"],
            text=data["text"],
            fields=data["fields"],
            traceback=traceback,
        )

    def error_data(self) -> dict[str, Any]:
        """The error as :meth:`~include.contract.errors.PipelineError.to_dict` writes it."""
        return {
            "class": self.error_class,
            "module": self.error_module,
            "message": self.message,
            "fields": dict(self.fields),
            "text": self.text,
        }

    def error(self) -> PipelineError:
        """The error, rebuilt as the class it was (``PipelineError`` naming a class this side does not know)."""
        return PipelineError.from_dict(self.error_data())

    def to_json(self) -> dict[str, Any]:
        """The envelope as JSON-ready data (the module docstring shows it)."""
        return {
            VERSION_KEY: self.version,
            "job": self.job,
            "pipeline": self.pipeline,
            "run_id": self.run_id,
            "error": self.error_data(),
            "traceback": self.traceback,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, source: str = "the failure file") -> Failure:
        """The envelope :meth:`to_json` wrote; :class:`FailureEnvelopeError` naming ``source`` and the field when
        it is of another version or a field is missing or of the wrong type."""
        version = data.get(VERSION_KEY)
        if version != FAILURE_VERSION:
            raise FailureEnvelopeError(
                f"{source}: a failure envelope of version {version!r}; this code reads version {FAILURE_VERSION}. "
                "The job and the operator run different releases: deploy one release to the Airflow workers "
                "and to the jobs (the Spark image, or the --py-files archive)"
            )
        error = data.get("error")
        if not isinstance(error, Mapping):
            raise FailureEnvelopeError(
                f"{source}: field 'error' must be an object (the error's class and fields)"
            )
        return cls(
            job=_text(data, "job", source),
            pipeline=_optional_text(data, "pipeline", source),
            run_id=_optional_text(data, "run_id", source),
            error_class=_text(error, "class", source, within="error."),
            error_module=_text(error, "module", source, within="error."),
            message=_text(error, "message", source, within="error."),
            text=_text(error, "text", source, within="error."),
            fields=_fields(error, source),
            traceback=_optional_text(data, "traceback", source),
        )


def read_failure(data: object, *, source: str = "the failure file") -> Failure | None:
    """The failure envelope ``data`` (a parsed JSON file) holds, or ``None`` when it is no envelope (a job's
    result summary); :class:`FailureEnvelopeError` for an envelope this side cannot read."""
    if not isinstance(data, Mapping) or VERSION_KEY not in data:
        return None
    return Failure.from_json(data, source=source)


def _text(data: Mapping[str, Any], key: str, source: str, *, within: str = "") -> str:
    """``data[key]``, a string; the error names ``source`` and the field."""
    value = _optional_text(data, key, source, within=within)
    if value is None:
        raise FailureEnvelopeError(f"{source}: field '{within}{key}' must be a string, got None")
    return value


def _optional_text(data: Mapping[str, Any], key: str, source: str, *, within: str = "") -> str | None:
    """``data[key]``, a string or ``None``; the error names ``source`` and the field."""
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    raise FailureEnvelopeError(f"{source}: field '{within}{key}' must be a string or null, got {value!r}")


def _fields(error: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The error's ``fields`` object (empty when absent)."""
    fields = error.get("fields") or {}
    if not isinstance(fields, Mapping):
        raise FailureEnvelopeError(f"{source}: field 'error.fields' must be an object, got {fields!r}")
    return dict(fields)
