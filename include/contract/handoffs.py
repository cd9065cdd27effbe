"""What the tasks of a DAG run hand each other through XCom, one frozen dataclass per hand-off.

Each hand-off has ``to_xcom()`` (the JSON-serialisable dict Airflow stores: plain keys, so a run an
older release started still reads) and ``from_xcom()`` (lenient:
a missing key is its default, as a task that ended early leaves it). The readers at the bottom take
the Airflow context (or the pulled value) and return the hand-off, so no consumer walks ``.get`` chains.

The task ids are :mod:`include.contract.jobs`' (``CHECK_REQUEST_TASK`` ...); the keys of the side
XComs a task leaves when it ends on purpose are here, beside the classes they carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from include.contract.actions import NORMAL, OffsetRequest, known
from include.contract.jobs import (
    CHECK_REQUEST_TASK,
    MIRROR_OFFSETS_TASK,
    START_CLUSTER_TASK,
)
from include.contract.json_values import Json, JsonDict

#: The key of a task's return value.
RETURN_KEY = "return_value"
#: ``check_request``: why the request was refused (a :class:`Refusal`).
REFUSED_KEY = "refused"
#: ``wait_for_lag``: the lag report when the run has nothing to do (a :class:`LagSeen`).
LAG_KEY = "lag"
#: ``preflight`` and ``check_continuity``: the report of a verdict that failed the task.
FAILED_REPORT_KEY = "failed_report"


def _dict(value: object) -> JsonDict:
    return dict(value) if isinstance(value, Mapping) else {}


def _dicts(value: object) -> tuple[JsonDict, ...]:
    return tuple(dict(v) for v in value if isinstance(v, Mapping)) if isinstance(value, list | tuple) else ()


def _strs(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


def _ints(value: object) -> tuple[int, ...]:
    return tuple(v for v in value if isinstance(v, int)) if isinstance(value, list | tuple) else ()


def _positions(value: object) -> dict[str, dict[str, int]]:
    """A position map as JSON (topic -> partition as text -> offset)."""
    return {
        str(t): {str(p): int(str(o)) for p, o in _dict(parts).items()} for t, parts in _dict(value).items()
    }


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class RequestPlan:
    """``check_request``'s XCom: what the run will do, checked, and the lock epoch it holds."""

    action: str = NORMAL
    reason: str = ""
    requested_by: str | None = None
    #: The request in a few words, for task logs.
    describe: str = "normal run"
    #: A backfill's ranges (:class:`include.contract.offsets.BackfillRange` JSON).
    ranges: tuple[JsonDict, ...] = ()
    #: A backfill by time's window (``from``, ``to``: ISO times).
    time_range: dict[str, str] | None = None
    notes: tuple[str, ...] = ()
    #: A backfill's offsets to re-read; ``None`` for any other action.
    offsets: int | None = None
    #: ``skip_offsets``' ranges, checked by the preflight.
    skip: tuple[OffsetRequest, ...] | None = None
    #: ``replay_quarantine``'s selection and how many records it takes (the transform's replay file).
    replay: JsonDict | None = None
    lock_epoch: int | None = None
    #: A dry run's report (:meth:`include.contract.dry_run.DryRunReport.to_json`); ``None``: the run is real.
    dry_run: JsonDict | None = None

    @property
    def is_backfill(self) -> bool:
        """Whether the run re-reads ranges with ``kafka_backfill`` (its action's spec says so)."""
        spec = known(self.action)
        return spec is not None and spec.backfill

    def to_xcom(self) -> JsonDict:
        """The plan as ``check_request`` returns it."""
        out: JsonDict = {"action": self.action, "reason": self.reason, "requested_by": self.requested_by,
                         "describe": self.describe, "ranges": [dict(r) for r in self.ranges],
                         "time_range": dict(self.time_range) if self.time_range else None, "notes": list(self.notes)}  # fmt: skip
        if self.offsets is not None:
            out["offsets"] = self.offsets
        if self.skip is not None:
            out["skip"] = [r.to_json() for r in self.skip]
        if self.replay is not None:
            out["replay"] = dict(self.replay)
        if self.lock_epoch is not None:
            out["lock_epoch"] = self.lock_epoch
        if self.dry_run is not None:
            out["dry_run"] = dict(self.dry_run)
        return out

    @classmethod
    def from_xcom(cls, value: object) -> RequestPlan:
        """The plan :meth:`to_xcom` wrote; no value (no ``check_request`` yet) is a normal run's."""
        data = _dict(value)
        window = data.get("time_range")
        skip = data.get("skip")
        return cls(
            action=_str(data.get("action")) or NORMAL, reason=str(data.get("reason") or ""),
            requested_by=_str(data.get("requested_by")), describe=str(data.get("describe") or "normal run"),
            ranges=_dicts(data.get("ranges")), notes=_strs(data.get("notes")), offsets=_int(data.get("offsets")),
            time_range={str(k): str(v) for k, v in window.items()} if isinstance(window, Mapping) else None,
            skip=tuple(OffsetRequest.from_json(dict(r)) for r in skip if isinstance(r, Mapping))
            if isinstance(skip, list) else None,
            replay=_dict(data["replay"]) if isinstance(data.get("replay"), Mapping) else None,
            lock_epoch=_int(data.get("lock_epoch")),
            dry_run=_dict(data["dry_run"]) if isinstance(data.get("dry_run"), Mapping) else None,
        )  # fmt: skip


@dataclass(frozen=True)
class Refusal:
    """``check_request``'s XCom ``refused``: why the run's request was refused (a string on the wire)."""

    message: str

    def to_xcom(self) -> str:
        """The message, as the ledger's reason quotes it."""
        return self.message

    @classmethod
    def from_xcom(cls, value: object) -> Refusal | None:
        """The refusal, or ``None`` when the request was not refused."""
        return cls(value) if isinstance(value, str) and value else None


@dataclass(frozen=True)
class LagSeen:
    """``wait_for_lag``'s XCom (or its ``lag`` key when it skipped): the lag report it decided on, or, for a
    manual action that runs whatever the lag, the action alone."""

    #: :meth:`include.contract.preflight.LagReport.to_json`; empty when no lag was measured.
    report: JsonDict = field(default_factory=dict)
    #: The manual action that ran without measuring the lag.
    action: str | None = None

    @property
    def total_lag(self) -> int | None:
        """Records waiting in Kafka, if measured."""
        return _int(self.report.get("total_lag"))

    def partitions(self) -> dict[tuple[str, int], JsonDict]:
        """The report's partitions by ``(topic, partition)``."""
        return {(str(p["topic"]), int(str(p["partition"]))): p for p in _dicts(self.report.get("partitions"))}

    def retention_left_s(self) -> dict[tuple[str, int], float | None]:
        """Per unread partition, the seconds left before retention may delete its records, if measured."""
        return {(str(f["topic"]), int(str(f["partition"]))): _float(f.get("left_s"))
                for f in _dicts(self.report.get("retention"))}  # fmt: skip

    def to_xcom(self) -> JsonDict:
        """The report, or ``{"action": ...}``."""
        return {"action": self.action} if self.action is not None else dict(self.report)

    @classmethod
    def from_xcom(cls, value: object) -> LagSeen:
        """What :meth:`to_xcom` wrote (nothing: an empty report)."""
        data = _dict(value)
        if set(data) == {"action"}:
            return cls(action=_str(data["action"]))
        return cls(report=data)


@dataclass(frozen=True)
class TransformBefore:
    """Where silver and quarantine stood at the preflight: where the run's transform check starts."""

    silver_version: int | None = None
    quarantine_version: int | None = None
    #: :meth:`include.contract.transform_spec.SilverStand.to_json`, or ``None``.
    silver_stand: JsonDict | None = None
    #: A routed transform: each route's own (its silver and quarantine), by route name; ``None`` otherwise.
    routes: dict[str, TransformBefore] | None = None
    #: A routed transform: the unrouted records' quarantine table's version.
    unrouted_version: int | None = None

    def to_xcom(self) -> JsonDict:
        """The keys, as the preflight's result holds them (a routed transform's routes and unrouted version too)."""
        out: JsonDict = {"silver_version": self.silver_version, "quarantine_version": self.quarantine_version,
                         "silver_stand": self.silver_stand}  # fmt: skip
        if self.routes is not None:
            out["routes"] = {name: r.to_xcom() for name, r in self.routes.items()}
            out["unrouted_version"] = self.unrouted_version
        return out

    @classmethod
    def from_xcom(cls, value: object) -> TransformBefore:
        """What :meth:`to_xcom` wrote."""
        data = _dict(value)
        stand = data.get("silver_stand")
        routes = data.get("routes")
        return cls(_int(data.get("silver_version")), _int(data.get("quarantine_version")),
                   _dict(stand) if isinstance(stand, Mapping) else None,
                   {str(n): cls.from_xcom(r) for n, r in routes.items()} if isinstance(routes, Mapping) else None,
                   _int(data.get("unrouted_version")))  # fmt: skip


@dataclass(frozen=True)
class PreflightResult:
    """``preflight``'s XCom (and its ``failed_report`` when the verdict blocked the run): the verdict
    (:meth:`include.contract.preflight.PreflightReport.to_json`) and what the jobs and the checks need."""

    #: The verdict's own keys (``ok``, ``policy``, ``findings``, ``blocking``, ``accepted_gaps``, ...).
    verdict: JsonDict = field(default_factory=dict)
    #: What the ingestion job's ``--preflight-file`` takes.
    job_file: JsonDict = field(default_factory=dict)
    lag: JsonDict = field(default_factory=dict)
    table_version: int | None = None
    #: Where the table stood (:func:`include.contract.offsets.positions_to_json`), or ``None``.
    table_next: dict[str, dict[str, int]] | None = None
    transform_before: TransformBefore | None = None
    #: Why the tables' maintenance is due in this run, or ``None``.
    maintenance_due: str | None = None

    _OWN = ("job_file", "lag", "table_version", "table_next", "transform_before", "maintenance")

    @property
    def blocking(self) -> tuple[str, ...]:
        """The messages of the findings that blocked the run."""
        return _strs(self.verdict.get("blocking"))

    @property
    def findings(self) -> list[Json]:
        """Every finding, as JSON."""
        return list(_dicts(self.verdict.get("findings")))

    def gaps(self) -> list[JsonDict]:
        """The gaps the run records: those accepted and those ``skip_offsets`` passed."""
        return [*_dicts(self.verdict.get("accepted_gaps")), *_dicts(self.verdict.get("skipped"))]

    @property
    def topic_ids(self) -> Json:
        """The topic ids the preflight saw."""
        return self.verdict.get("topic_ids")

    def to_xcom(self) -> JsonDict:
        """The verdict's keys and the preflight's own, as ``preflight`` returns them."""
        return {
            **self.verdict, "job_file": dict(self.job_file), "lag": dict(self.lag), "table_version": self.table_version,
            "table_next": {t: dict(p) for t, p in self.table_next.items()} if self.table_next is not None else None,
            "transform_before": self.transform_before.to_xcom() if self.transform_before else None,
            "maintenance": {"due": self.maintenance_due} if self.maintenance_due else None,
        }  # fmt: skip

    @classmethod
    def from_xcom(cls, value: object) -> PreflightResult:
        """What :meth:`to_xcom` wrote (nothing: an empty result)."""
        data = _dict(value)
        before, table_next = data.get("transform_before"), data.get("table_next")
        return cls(
            verdict={k: v for k, v in data.items() if k not in cls._OWN}, job_file=_dict(data.get("job_file")),
            lag=_dict(data.get("lag")), table_version=_int(data.get("table_version")),
            table_next=_positions(table_next) if isinstance(table_next, Mapping) else None,
            transform_before=TransformBefore.from_xcom(before) if isinstance(before, Mapping) else None,
            maintenance_due=_str(_dict(data.get("maintenance")).get("due")),
        )  # fmt: skip


@dataclass(frozen=True)
class ClusterStart:
    """``start_cluster``'s XCom: where the run's Spark application runs, and why so."""

    master_url: str | None = None
    #: ``local`` (in the driver) or ``cluster`` (a standalone cluster started for the run).
    mode: str | None = None
    workers: int = 0
    choice: str | None = None
    backlog: int | None = None
    #: The started cluster's own keys (:meth:`include.spark.cluster_state.StandaloneCluster.to_json`).
    cluster: JsonDict = field(default_factory=dict)

    def to_xcom(self) -> JsonDict:
        """The cluster's keys and the choice's."""
        return {**self.cluster, "master_url": self.master_url, "mode": self.mode, "workers": self.workers,
                "choice": self.choice, "backlog": self.backlog}  # fmt: skip

    @classmethod
    def from_xcom(cls, value: object) -> ClusterStart:
        """What :meth:`to_xcom` wrote (nothing: no cluster started)."""
        data = _dict(value)
        own = ("master_url", "mode", "workers", "choice", "backlog")
        return cls(_str(data.get("master_url")), _str(data.get("mode")), _int(data.get("workers")) or 0,
                   _str(data.get("choice")), _int(data.get("backlog")),
                   {k: v for k, v in data.items() if k not in own})  # fmt: skip


@dataclass(frozen=True)
class ClusterStop:
    """``stop_cluster``'s XCom: the processes stopped and any left."""

    stopped: tuple[int, ...] = ()
    left: tuple[int, ...] = ()

    def to_xcom(self) -> JsonDict:
        """The two pid lists."""
        return {"stopped": list(self.stopped), "left": list(self.left)}

    @classmethod
    def from_xcom(cls, value: object) -> ClusterStop:
        """What :meth:`to_xcom` wrote."""
        data = _dict(value)
        return cls(_ints(data.get("stopped")), _ints(data.get("left")))


@dataclass(frozen=True)
class ContinuityResult:
    """``check_continuity``'s XCom (and its ``failed_report``):
    :meth:`include.contract.continuity.ContinuityReport.to_json` and the try that reported it."""

    report: JsonDict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the run's commits chain on."""
        return self.report.get("ok") is True

    @property
    def violations(self) -> tuple[str, ...]:
        """What broke the chain."""
        return _strs(self.report.get("violations"))

    @property
    def notes(self) -> tuple[str, ...]:
        """What the check noticed without failing the run."""
        return _strs(self.report.get("notes"))

    def partitions(self) -> tuple[JsonDict, ...]:
        """Each partition's range the run's commits hold."""
        return _dicts(self.report.get("partitions"))

    def to_xcom(self) -> JsonDict:
        """The report."""
        return dict(self.report)

    @classmethod
    def from_xcom(cls, value: object) -> ContinuityResult | None:
        """The result, or ``None`` when the check did not report."""
        return cls(dict(value)) if isinstance(value, Mapping) and value else None


@dataclass(frozen=True)
class MirrorResult:
    """``mirror_offsets``' XCom: the offsets committed to the consumer group, and the lag after the run."""

    group: str = ""
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    #: :meth:`include.contract.preflight.LagReport.to_json` after the run, from the same reads.
    lag_after: JsonDict | None = None

    def to_xcom(self) -> JsonDict:
        """The three keys."""
        return {"group": self.group, "offsets": {t: dict(p) for t, p in self.offsets.items()},
                "lag_after": self.lag_after}  # fmt: skip

    @classmethod
    def from_xcom(cls, value: object) -> MirrorResult:
        """What :meth:`to_xcom` wrote."""
        data = _dict(value)
        lag = data.get("lag_after")
        return cls(
            str(data.get("group") or ""),
            _positions(data.get("offsets")),
            _dict(lag) if isinstance(lag, Mapping) else None,
        )


# --------------------------------------------------------------------------- readers


#: ``start_cluster``'s master URL as a Jinja template, for an operator's templated ``master``: rendered when
#: the task starts, and shown in the UI's rendered fields.
MASTER_URL_TEMPLATE = "{{ ti.xcom_pull(task_ids='" + START_CLUSTER_TASK + "')['master_url'] }}"


def pull(context: Mapping[str, Any], task_id: str, key: str = RETURN_KEY) -> object:
    """The XCom ``key`` of ``task_id`` in this DAG run; ``None`` without a task instance.

    Every XCom the product reads goes through here (``tests/test_layers.py`` checks it), mostly by way of
    the typed readers below."""
    ti = context.get("ti")
    return ti.xcom_pull(task_ids=task_id, key=key) if ti is not None else None


def push(ti: Any, key: str, value: object) -> None:
    """Leave ``value`` in this task's XCom ``key`` (a side key such as :data:`REFUSED_KEY`), when the task
    instance can take one."""
    if ti is not None and hasattr(ti, "xcom_push"):
        ti.xcom_push(key=key, value=value)


def request_plan(context: Mapping[str, Any]) -> RequestPlan:
    """``check_request``'s plan of this run."""
    return RequestPlan.from_xcom(pull(context, CHECK_REQUEST_TASK))


def cluster_start(context: Mapping[str, Any]) -> ClusterStart:
    """What ``start_cluster`` reported (no value: nothing started)."""
    return ClusterStart.from_xcom(pull(context, START_CLUSTER_TASK))


def mirror_result(context: Mapping[str, Any]) -> MirrorResult | None:
    """What ``mirror_offsets`` committed, if it reported."""
    value = pull(context, MIRROR_OFFSETS_TASK)
    return MirrorResult.from_xcom(value) if isinstance(value, Mapping) else None
