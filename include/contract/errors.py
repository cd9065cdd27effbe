"""One error family: every error of the pipeline is a :class:`PipelineError` whose fields are its data.

Pure Python, no I/O: the Spark jobs raise these, the Airflow side re-raises
them, and both import this one module (it ships to the cluster with
``--py-files``). An error crosses from a job to its task as data, never as
text to search for: the job writes it in its failure envelope
(:mod:`include.contract.failure`, built on :meth:`PipelineError.to_dict`), the
task reads the envelope back and raises the same class with the same fields
(:meth:`PipelineError.from_dict`, which finds the class in the family's
registry, :func:`family_class`).

The fields every error may carry (``None`` when they do not apply):

- ``pipeline``, ``topic``, ``partition``, ``offsets`` (``(from, until)`` or one
  offset), ``table`` (a path), ``version`` (a Delta version);
- ``action``: the trigger-form action or the step that fixes it, so the task
  log, the run ledger and the monitor can name the fix without parsing text.

The errors the jobs raise are defined here rather than in ``spark_jobs/`` so
the Airflow side knows every class a job can report.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

#: The XCom key under which a failed job task leaves its error's :meth:`PipelineError.to_dict` for ``record_run``.
ERROR_XCOM_KEY = "error"

#: The fields every :class:`PipelineError` carries, in the order :meth:`PipelineError.to_dict` writes them.
COMMON_FIELDS = ("pipeline", "topic", "partition", "offsets", "table", "version", "action")

_REGISTRY: dict[str, type[PipelineError]] = {}


class PipelineError(Exception):
    """Base of every error of the pipeline; its fields are its data and ``str()`` renders them.

    ``message`` says what went wrong. ``str(error)`` puts ``<topic>-<partition>:``
    before it when both fields are set (the way every offset message has
    always begun), so a message built from fields reads as one written by hand.
    Subclasses with data of their own list those attribute names in
    :attr:`extra_fields`; they travel in :meth:`to_dict` too.
    """

    #: Attributes of a subclass, beyond :data:`COMMON_FIELDS`, that :meth:`to_dict` carries.
    extra_fields: ClassVar[tuple[str, ...]] = ()
    #: Those of :attr:`extra_fields` that hold another error of the family (a job's failed batch): written as
    #: its :meth:`to_dict`, read back as the class it was.
    nested_errors: ClassVar[tuple[str, ...]] = ()
    #: Whether ``str()`` starts with ``<topic>-<partition>:``; off for a job's wrapper, whose message
    #: quotes its cause's text (which starts so already).
    render_where: ClassVar[bool] = True

    def __init__(
        self,
        message: str = "",
        *,
        pipeline: str | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offsets: tuple[int, ...] | None = None,
        table: str | None = None,
        version: int | None = None,
        action: str | None = None,
    ) -> None:
        self.message = message
        self.pipeline = pipeline
        self.topic = topic
        self.partition = partition
        self.offsets = tuple(offsets) if offsets is not None else None
        self.table = table
        self.version = version
        self.action = action
        # args hold the rendered text, so repr() and code reading args[0] see what str() says.
        super().__init__(str(self))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # By name: the job and the task import the same module, so one name means one class.
        _REGISTRY.setdefault(cls.__name__, cls)

    @property
    def where(self) -> str:
        """``<topic>-<partition>`` when the error is about one partition, else ``""``."""
        if self.render_where and self.topic is not None and self.partition is not None:
            return f"{self.topic}-{self.partition}"
        return ""

    def __str__(self) -> str:
        message = getattr(self, "message", None)
        if message is None:  # built without our __init__ (a subclass with its own)
            return super().__str__()
        return f"{self.where}: {message}" if self.where else message

    def fields(self) -> dict[str, Any]:
        """The error's data: :data:`COMMON_FIELDS` and the subclass's :attr:`extra_fields`."""
        out = {name: getattr(self, name, None) for name in COMMON_FIELDS}
        if out["offsets"] is not None:
            out["offsets"] = list(out["offsets"])
        out.update({name: _plain(getattr(self, name, None)) for name in self.extra_fields})
        return out

    def to_dict(self) -> dict[str, Any]:
        """The error as JSON-ready data: class, module, message, fields, and the rendered text."""
        message = getattr(self, "message", None)
        return {
            "class": type(self).__name__,
            "module": type(self).__module__,
            "message": message if message is not None else Exception.__str__(self),
            "fields": self.fields(),
            "text": str(self),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PipelineError:
        """The error :meth:`to_dict` wrote, as an instance of the same class (``PipelineError`` if unknown).

        The class comes from the family's registry (:func:`family_class`); the
        instance is built from the fields without calling a subclass's own
        ``__init__`` (whose arguments differ), so every class round-trips. A
        nested error (:attr:`nested_errors`) comes back as its own class too.
        """
        name = str(data.get("class") or "PipelineError")
        message = str(data.get("message") or "")
        target = family_class(name, str(data.get("module") or "")) or PipelineError
        fields = dict(data.get("fields") or {})
        error = target.__new__(target)
        error.message = message
        for key in COMMON_FIELDS:
            setattr(error, key, fields.get(key))
        if error.offsets is not None:
            error.offsets = tuple(error.offsets)
        for key in target.extra_fields:
            value = fields.get(key)
            if key in target.nested_errors and isinstance(value, Mapping):
                value = PipelineError.from_dict(value)
            setattr(error, key, value)
        if target is PipelineError and name != "PipelineError":
            # A class this side does not know: keep its name in the text rather than lose it.
            error.message = f"{name}: {message}"
        Exception.__init__(error, str(error))
        return error


def family_class(name: str, module: str = "") -> type[PipelineError] | None:
    """The class of the error family called ``name``, or ``None`` when this side has none of that name.

    The registry holds every subclass defined so far (each registers itself by
    name: the job and the task import the same modules, so one name means one
    class). A class not loaded yet is looked for by importing ``module`` first,
    when that is one of ours (``include.``).
    """
    if name == "PipelineError":
        return PipelineError
    if name not in _REGISTRY and module.startswith("include."):
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    return _REGISTRY.get(name)


def _plain(value: Any) -> Any:
    """``value`` as JSON data (tuples as lists, nested errors as their dicts)."""
    if isinstance(value, PipelineError):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def as_pipeline_error(exc: BaseException, *, pipeline: str | None = None) -> PipelineError:
    """``exc`` itself when it is one of ours; otherwise a :class:`PipelineError` naming its class and first line."""
    if isinstance(exc, PipelineError):
        if pipeline is not None and exc.pipeline is None:
            exc.pipeline = pipeline
        return exc
    first = str(exc).split("\n", 1)[0][:2000]
    return PipelineError(f"{type(exc).__name__}: {first}", pipeline=pipeline)


# --------------------------------------------------------------------------- the jobs' errors


class JobConfigError(PipelineError, ValueError):
    """A job argument is missing or of the wrong type; the message names the argument."""


class KafkaSourceError(PipelineError, RuntimeError):
    """Kafka cannot serve the configured topics (unreachable broker, missing topic)."""


class IngestionError(PipelineError, RuntimeError):
    """The ingestion's streaming query failed; ``cause`` is the batch's own error, when it was ours."""

    extra_fields = ("cause",)
    nested_errors = ("cause",)
    render_where = False
    cause: PipelineError | None = None


class BackfillError(PipelineError, RuntimeError):
    """The backfill cannot be carried out as asked; nothing was written."""


class TransformError(PipelineError, RuntimeError):
    """The transform cannot go on; ``cause`` is a failed batch's own error, when it was ours."""

    extra_fields = ("cause",)
    nested_errors = ("cause",)
    render_where = False
    cause: PipelineError | None = None


class ValueSchemaError(PipelineError, RuntimeError):
    """The run cannot read values at all (no reader schema, a declared field it lacks); nothing was written."""


class MaintenanceConfigError(PipelineError, ValueError):
    """A maintenance job argument is missing or malformed; the message names the argument."""


class MaintenanceError(PipelineError, RuntimeError):
    """Maintenance could not be done, or wrote a commit that could pass for progress."""


class StaleLockError(PipelineError, RuntimeError):
    """A newer run holds the pipeline's lock: this run's commit was refused, and it wrote nothing more.

    ``lock_epoch`` is the epoch this run took; ``table_epoch`` the newer one the table carries.
    """

    extra_fields = ("lock_epoch", "table_epoch")
    lock_epoch: int | None = None
    table_epoch: int | None = None


class TableOwnershipError(PipelineError, RuntimeError):
    """A table location belongs to another pipeline, or holds files that are no table at all; nothing was
    written. ``owner`` is the pipeline the table names, when it names one."""

    extra_fields = ("owner",)
    owner: str | None = None


class ContractError(PipelineError, ValueError):
    """A value breaks a rule a function of the pipeline states: an argument out of range, a record or a string
    not in the form it must have. The message names the value and the rule; reaching it is a bug, or data
    that should not have got this far."""


class DeltaCommitError(PipelineError, RuntimeError):
    """Delta's writer or log answered something a commit of the pipeline cannot use; nothing was committed."""


class FailureEnvelopeError(PipelineError, ValueError):
    """A failure envelope (:mod:`include.contract.failure`) this side cannot read: another version, or a field
    missing or of the wrong type. The message names the file and the field."""


class StepsFileError(PipelineError, ValueError):
    """The ``--steps-file`` argument or the file it names cannot be used; the message names the argument or field."""


def batch_failure(
    job_error: type[IngestionError | TransformError],
    what: str,
    pipeline: str,
    recorded: PipelineError | None,
    exc: BaseException,
) -> PipelineError:
    """The error a job raises when its streaming query failed.

    ``recorded``: the error the batch function raised and stored before Spark
    wrapped it in a JVM trace; its class name, message and fields are kept
    (``cause``, the error itself) instead of being searched for in the trace. Without one (a
    failure outside our code) the trace's first line is the message.
    """
    if recorded is not None:
        error = job_error(
            f"{what} of pipeline {pipeline!r} failed: {type(recorded).__name__}: {recorded}",
            pipeline=pipeline,
            topic=recorded.topic,
            partition=recorded.partition,
            offsets=recorded.offsets,
            table=recorded.table,
            version=recorded.version,
            action=recorded.action,
        )
        error.cause = recorded
        return error
    first = str(exc).split("\n", 1)[0][:2000]
    return job_error(f"{what} of pipeline {pipeline!r} failed: {first}", pipeline=pipeline)
