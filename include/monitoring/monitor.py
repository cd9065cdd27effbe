"""What the monitoring page shows about a pipeline, gathered without a JVM and in bounded time.

One *snapshot* per pipeline joins three sources that no single tool shows
together:

- **Kafka** (confluent-kafka, through the pipeline's Airflow connection):
  each partition's earliest and latest offsets, the timestamps of the oldest
  pending records and the consumer-group mirror's offsets;
- **the bronze table** (delta-rs): its position (the newest bronze commit's
  next offsets) and the Kafka timestamp of the last record it holds per
  partition;
- **the run ledger** (delta-rs): the recent runs, the gaps they recorded and
  the manual actions with who asked and why.

Every Kafka call shares one deadline (``timeout_s``), so a slow or dead broker
makes the snapshot say "unreachable" within seconds instead of hanging the
page. A source that fails is reported in the snapshot (``kafka``, ``table``,
``ledger``: ``ok`` and ``error``); the others are still shown. Snapshots are
plain JSON-ready dicts: the page renders them and the JSON endpoints return
them as they are.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from include.config import PipelineConfig
from include.contract.actions import DRY_RUN, NORMAL, known
from include.contract.errors import PipelineError
from include.contract.preflight import measure_lag
from include.contract.retention import PartitionForecast, duration_text, soonest
from include.readers import delta_progress, kafka_calls, kafka_state, run_ledger
from include.readers.object_store import TableOptions

if TYPE_CHECKING:
    from include.contract.offsets import PositionMap

#: The whole Kafka part of one snapshot must finish within this many seconds.
DEFAULT_TIMEOUT_S = 5.0
#: Runs listed on the page and plotted in its charts.
RUNS_SHOWN = 50
#: Recorded gaps and manual actions listed (newest first).
EVENTS_SHOWN = 100
#: Runs searched for the gaps, manual actions and maintenance the page lists: what the page reads
#: of the ledger stops growing with it.
HISTORY_RUNS = 1_000
#: The ledger columns the page shows; a run's row also names every commit it made, which it does not.
LEDGER_COLUMNS = (
    "run_id", "run_type", "action", "outcome", "reason", "started_at", "finished_at", "duration_s", "rows",
    "commits", "lag_before", "lag_after", "lost", "retention_left_s", "continuity", "quarantined",
    "bronze_version_after", "requested_by", "request_reason", "partitions_json", "gaps_json", "maintenance_json",
)  # fmt: skip
#: Ledgers whose rows are kept between page views, at most: one per pipeline a worker shows.
_CACHED_LEDGERS = 256
#: Offsets searched below a partition's next offset for its last ingested record; widened when
#: the window holds none (transaction markers and compaction leave holes).
_LAST_RECORD_WINDOW = 1_000
#: Connection settings whose values must never reach the page, not even inside an error message.
_SECRET_KEY = re.compile(r"password|secret|jaas|token|ssl\.key|credential", re.IGNORECASE)
#: Below this, a Kafka call is not worth starting: it would only time out.
_MIN_CALL_S = 0.5
#: How a note says that an extra (not the offsets) was left out because the Kafka deadline had passed.
OUT_OF_TIME = "skipped: out of time"


class LedgerCache:
    """The rows the page last read of each ledger, with the ledger version they were read at.

    Pages refresh every 30 s and any signed-in user may ask: a view of an
    unchanged ledger costs one version lookup instead of a read. The version
    keys the entry, so the page is never behind a run the ledger records.
    """

    def __init__(self, size: int = _CACHED_LEDGERS) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[int, list[dict[str, Any]]]] = {}

    def recent_runs(self, path: str, *, storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """The newest :data:`HISTORY_RUNS` runs of the ledger at ``path`` (only :data:`LEDGER_COLUMNS`), newest
        first; the caller must not change them (they are shared with later views).

        ``storage_options``: delta-rs options of a ledger on an object store (``None``: a local one).
        """
        version = run_ledger.ledger_version(path, storage_options=storage_options)
        if version is None:
            return []
        with self._lock:
            hit = self._rows.get(path)
        if hit is not None and hit[0] == version:
            return hit[1]
        rows = run_ledger.newest_runs(path, files=HISTORY_RUNS, columns=LEDGER_COLUMNS, limit=HISTORY_RUNS,
                                      storage_options=storage_options)  # fmt: skip
        with self._lock:
            if path not in self._rows and len(self._rows) >= self._size:
                self._rows.pop(next(iter(self._rows)))
            self._rows[path] = (version, rows)
        return rows


#: One per process: the monitoring plugin's web server keeps it across requests.
LEDGER_CACHE = LedgerCache()


class _NoConnection(RuntimeError):
    """The pipeline's Kafka connection could not be resolved, so Kafka was not asked."""


@dataclass(frozen=True)
class SchedulerView:
    """What Airflow's scheduler knows of a pipeline's DAG (``None``: not known, e.g. not parsed yet)."""

    paused: bool | None = None
    next_run_at: datetime | None = None


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def redact(text: str, config: Mapping[str, Any] | None) -> str:
    """``text`` with the values of the connection's secret settings replaced by ``***``."""
    for key, value in (config or {}).items():
        if _SECRET_KEY.search(str(key)) and value and str(value) in text:
            text = text.replace(str(value), "***")
    return text


def _run_view(row: dict[str, Any], dag_id: str) -> dict[str, Any]:
    ranges = [
        {"topic": p.get("topic"), "partition": p.get("partition"), "from": p.get("from"),
         "until": p.get("until"), "rows": p.get("rows") or 0}
        for p in row.get("partitions_json") or [] if p.get("rows")
    ]  # fmt: skip
    return {
        "run_id": row["run_id"],
        "run_type": row.get("run_type"),
        "action": row.get("action") or NORMAL,
        "outcome": row.get("outcome"),
        "reason": row.get("reason") or "",
        "error": _error_view(row.get("error_json")),
        "started_at": _iso(row.get("started_at")),
        "finished_at": _iso(row.get("finished_at")),
        "duration_s": row.get("duration_s"),
        "rows": row.get("rows"),
        "commits": row.get("commits"),
        "lag_before": row.get("lag_before"),
        "lag_after": row.get("lag_after"),
        "lost": row.get("lost"),
        "retention_left_s": row.get("retention_left_s"),
        "continuity": row.get("continuity"),
        "quarantined": row.get("quarantined"),
        "bronze_version_after": row.get("bronze_version_after"),
        "requested_by": row.get("requested_by"),
        "request_reason": row.get("request_reason"),
        "ranges": ranges,
        "link": run_link(dag_id, row["run_id"]),
    }


def _error_view(data: Any) -> dict[str, Any] | None:
    """A run's recorded job error (ledger ``error_json``) for the page: class, text and the fields that are set."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return None
    if not isinstance(data, dict):
        return None
    error = PipelineError.from_dict(data)
    fields = {k: v for k, v in error.fields().items() if v is not None and k != "cause"}
    return {"class": str(data.get("class") or type(error).__name__), "text": str(error), "fields": fields,
            "action": error.action}


def dag_link(dag_id: str) -> str:
    """The DAG's page in the Airflow UI (relative to the UI's root)."""
    from urllib.parse import quote

    return f"/dags/{quote(dag_id, safe='')}"


def run_link(dag_id: str, run_id: str) -> str:
    """A DAG run's page in the Airflow UI (relative to the UI's root)."""
    from urllib.parse import quote

    return f"{dag_link(dag_id)}/runs/{quote(run_id, safe='')}"


def _history(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Recorded gaps and manual actions in ledger rows (newest first)."""
    gaps, actions = [], []
    for row in rows:
        finished = _iso(row.get("finished_at"))
        for g in row.get("gaps_json") or []:
            gaps.append({"run_id": row["run_id"], "finished_at": finished, "topic": g.get("topic"),
                         "partition": g.get("partition"), "from": g.get("from"), "until": g.get("until"),
                         "lost": (g["until"] - g["from"]) if g.get("until") is not None and g.get("from") is not None
                         else None, "reason": g.get("reason") or ""})  # fmt: skip
        action = row.get("action") or NORMAL
        spec = known(action)
        if spec is None or spec.manual:  # a name no spec has (an older ledger's) is shown as asked
            actions.append({"run_id": row["run_id"], "finished_at": finished, "run_type": row.get("run_type"),
                            "action": action, "requested_by": row.get("requested_by"),
                            "reason": row.get("request_reason") or "", "outcome": row.get("outcome"),
                            # A dry run's report in one line: what the action would do, or its refusal.
                            "report": row.get("reason") if row.get("outcome") == DRY_RUN else None})  # fmt: skip
    return gaps[:EVENTS_SHOWN], actions[:EVENTS_SHOWN]


def last_ingested(bronze_path: str, next_offsets: Mapping[tuple[str, int], int], *,
                  storage_options: dict[str, str] | None = None) -> dict[tuple[str, int], datetime | None]:  # fmt: skip
    """Kafka timestamp of the newest record bronze holds below each partition's next offset.

    Reads only a window of offsets under the position (Delta's file statistics
    skip the other files), widening it for partitions where the window is
    empty, so the cost does not grow with the table.
    """
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    found: dict[tuple[str, int], datetime | None] = {key: None for key in next_offsets}
    todo = {key: nxt for key, nxt in next_offsets.items() if nxt > 0}
    if not todo:
        return found
    dataset = DeltaTable(bronze_path, storage_options=storage_options).to_pyarrow_dataset()
    window = _LAST_RECORD_WINDOW
    while todo:
        expr = None
        for (topic, partition), nxt in todo.items():
            one = ((pc.field("topic") == topic) & (pc.field("partition") == partition)
                   & (pc.field("offset") < nxt) & (pc.field("offset") >= max(0, nxt - window)))  # fmt: skip
            expr = one if expr is None else expr | one
        table = dataset.to_table(columns=["topic", "partition", "offset", "timestamp"], filter=expr)
        newest: dict[tuple[str, int], tuple[int, datetime]] = {}
        for row in table.to_pylist():
            key = (row["topic"], row["partition"])
            if key not in newest or row["offset"] > newest[key][0]:
                newest[key] = (row["offset"], row["timestamp"])
        for key, (_, stamp) in newest.items():
            found[key] = stamp
        # Partitions whose whole offset range was searched without a record hold none.
        todo = {key: nxt for key, nxt in todo.items() if key not in newest and nxt - window > 0}
        window *= 10
    return found


def view_options(cfg: PipelineConfig, get_connection: Callable[[str], Any] | None = None) -> TableOptions:
    """The delta-rs options of ``cfg``'s tables for one page view, the connection looked up as Airflow's server
    processes do (:func:`include.readers.connections.server_connection`: the page is not a task)."""
    from include.readers.connections import server_connection

    return TableOptions(cfg, get_connection=get_connection or server_connection)


def maintenance_view(cfg: PipelineConfig, rows: list[dict[str, Any]], *,
                     options: TableOptions | None = None) -> dict[str, Any]:  # fmt: skip
    """Files per table now (delta-rs; ``None``: no table yet) and the newest run that maintained each.

    ``options``: the view's :func:`view_options` (``None``: made here).
    """
    options = options or view_options(cfg)
    paths = {**cfg.table_locations(), "ledger": cfg.tables.ledger_path}
    files: dict[str, int | None] = {}
    for name, path in paths.items():
        try:
            # The table names are TablesConfig's fields without "_path" (a route's: silver.<route>, in silver_path).
            files[name] = delta_progress.file_count(path, storage_options=options(f"{name.partition('.')[0]}_path"))
        except Exception:  # noqa: BLE001 - a table the page cannot open shows no count
            files[name] = None
    last: dict[str, dict[str, Any]] = {}
    for row in rows:  # newest first
        for name, done in ((row.get("maintenance_json") or {}).get("tables") or {}).items():
            if name in paths and name not in last and isinstance(done, dict) and "files_before" in done:
                last[name] = {"run_id": row.get("run_id"), "at": _iso(row.get("finished_at")),
                              "files_before": done.get("files_before"), "files_after": done.get("files_after")}  # fmt: skip
    m = cfg.maintenance
    policy = " or ".join(w for w in (f"every {m.every_runs} runs" if m.every_runs else "",
                                     f"daily {m.daily_window} UTC" if m.daily_window else "") if w)  # fmt: skip
    return {"policy": policy or "never", "tables": [{"table": n, "files": files[n], "last": last.get(n)} for n in paths]}


def _health(snap: dict[str, Any]) -> dict[str, Any]:
    failing, warning = [], []
    if not snap["kafka"]["ok"]:
        failing.append("Kafka unreachable")
    if not snap["table"]["ok"]:
        failing.append("bronze table unreadable")
    if not snap["ledger"]["ok"]:
        failing.append("run ledger unreadable")
    if snap["open_gaps"]:
        lost = sum(g["records"] for g in snap["open_gaps"])
        failing.append(f"{lost} records deleted by Kafka before they were read")
    last = snap["last_run"]
    if last is not None:
        if last["outcome"] == "failed":
            failing.append(f"last run failed: {last['reason']}" if last["reason"] else "last run failed")
            action = (last.get("error") or {}).get("action")
            if action:
                failing.append(f"to fix it, trigger the pipeline with action {action!r}")
        if last["continuity"] == "BROKEN":
            failing.append("last run's continuity check found a break")
        if last["quarantined"]:
            warning.append(f"{last['quarantined']} records quarantined in the last run")
    behind = (snap.get("silver_lag") or {}).get("records")
    if behind:
        warning.append(f"silver lag: {behind} records in bronze not applied to silver yet; the next run's "
                       "transform applies them")  # fmt: skip
    if snap["paused"] and snap["lag"]["records"]:
        warning.append(f"DAG paused with {snap['lag']['records']} records waiting")
    risk = _retention_risk(snap)
    if risk:
        warning.append(risk)
    at_risk = bool(risk)
    if failing:
        return {"state": "failing", "reasons": failing + warning, "at_risk": at_risk}
    if warning:
        return {"state": "warning", "reasons": warning, "at_risk": at_risk}
    if last is None:
        return {"state": "unknown", "reasons": ["no runs recorded yet"], "at_risk": False}
    return {"state": "ok", "reasons": [], "at_risk": False}


def _retention_risk(snap: dict[str, Any]) -> str | None:
    """Why Kafka's retention puts unread records at risk: the time left is under the pipeline's margin, or
    the DAG is paused while it runs out (nothing will read them). ``None`` when neither holds."""
    lag = snap["lag"]
    left, margin = lag.get("retention_left_s"), lag.get("retention_margin_s")
    if left is None:
        return None
    where = f"unread records of {lag['retention_at']} in {duration_text(left)} at the soonest ({lag['retention_bound']})"
    if margin is not None and left < margin:
        return (f"at risk: Kafka's retention may delete {where}, within the retention margin of "
                f"{duration_text(margin)}; the next run proceeds at once")  # fmt: skip
    if snap["paused"]:
        return f"at risk: the DAG is paused and Kafka's retention may delete {where}; unpause it"
    return None


def pipeline_snapshot(
    cfg: PipelineConfig,
    kafka_config: Mapping[str, str] | None,
    *,
    kafka_error: str | None = None,
    scheduler: SchedulerView | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    get_connection: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """Everything the page shows about one pipeline (see the module docstring).

    ``kafka_config`` is the connection's confluent-kafka settings, or ``None``
    with ``kafka_error`` saying why there are none (e.g. a missing
    connection). No exception escapes for a source that fails; it is reported
    in the snapshot instead. ``get_connection`` looks up the connection of
    tables on an object store (default: as Airflow's server processes do).
    """
    started = time.monotonic()
    scheduler = scheduler or SchedulerView()
    snap: dict[str, Any] = {
        "pipeline": cfg.name,
        "dag_id": cfg.name,
        "description": cfg.description,
        "source": {"connection_id": cfg.kafka.connection_id,
                   "bootstrap_servers": (kafka_config or {}).get("bootstrap.servers"),
                   "topics": list(cfg.kafka.topics), "topic_pattern": cfg.kafka.topic_pattern},  # fmt: skip
        "tables": {"bronze": cfg.tables.bronze_path,
                   "silver": cfg.tables.silver_path if cfg.transform is not None else None,
                   "ledger": cfg.tables.ledger_path},  # fmt: skip
        "routes": [{"route": r.name, "match": r.match.describe(), "silver": r.silver_path,
                    "quarantine": r.quarantine_path} for r in cfg.routing.routes] if cfg.routing else None,  # fmt: skip
        "unrouted": {"policy": cfg.routing.unrouted, "quarantine": cfg.routing.unrouted_path}
        if cfg.routing else None,
        "schedule": cfg.schedule,
        "paused": scheduler.paused,
        "next_run_at": _iso(scheduler.next_run_at),
        "links": {"dag": dag_link(cfg.name), "last_run": None},
    }

    # One connection lookup for the view's every table on an object store; a failed one shows in each section.
    options = view_options(cfg, get_connection)
    progress = None
    try:
        bronze_options = options("bronze_path")
        # Kafka is read after the table (it may be down): the configured topics, and what the newest
        # commit names, are looked up in the table's state.
        progress = delta_progress.read_progress(cfg.tables.bronze_path, cfg.name, {t: () for t in cfg.kafka.topics},
                                                storage_options=bronze_options)  # fmt: skip
        # The table is opened a second time only when it holds none of our commits (or is absent).
        version = progress.table_version if progress \
            else delta_progress.table_version(cfg.tables.bronze_path, storage_options=bronze_options)  # fmt: skip
        snap["table"] = {"ok": True, "error": None, "exists": version is not None, "version": version,
                         "epoch": progress.epoch if progress else None,
                         "position_from": progress.stand.source if progress else None,
                         "restored": progress.restore.restored_to if progress and progress.restore else None}  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - shown on the page; the other sources still are
        snap["table"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "exists": None, "version": None,
                         "epoch": None, "position_from": None, "restored": None}  # fmt: skip

    try:
        rows = LEDGER_CACHE.recent_runs(str(cfg.tables.ledger_path), storage_options=options("ledger_path"))
        snap["ledger"] = {"ok": True, "error": None}
    except Exception as exc:  # noqa: BLE001
        rows = []
        snap["ledger"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    snap["runs"] = [_run_view(r, cfg.name) for r in rows[:RUNS_SHOWN]]
    snap["last_run"] = snap["runs"][0] if snap["runs"] else None
    if snap["last_run"]:
        snap["links"]["last_run"] = snap["last_run"]["link"]
    snap["gaps"], snap["manual_actions"] = _history(rows)
    snap["maintenance"] = maintenance_view(cfg, rows, options=options)

    snap["silver_lag"] = _silver_lag(cfg, options) if cfg.has_transform else None
    table_next = progress.next_offsets if progress else None
    _kafka_part(snap, cfg, kafka_config, kafka_error, table_next, timeout_s, now, options)
    snap["health"] = _health(snap)
    snap["checked_at"] = now().isoformat()
    snap["elapsed_s"] = round(time.monotonic() - started, 3)
    return snap


def _silver_lag(cfg: PipelineConfig, options: TableOptions) -> dict[str, Any]:
    """Records bronze holds that silver has not applied, read from the tables alone (Kafka need not answer); with
    routes, each route's and the most of them."""
    try:
        lags = delta_progress.silver_lags(cfg.tables.bronze_path, {t.route: t.silver_path for t in cfg.silver_targets()},
                                          cfg.name, bronze_options=options("bronze_path"),
                                          silver_options=options("silver_path"))  # fmt: skip
        return {"records": max(lags.values(), default=0), "error": None,
                **({"routes": lags} if cfg.routing is not None else {})}
    except Exception as exc:  # noqa: BLE001 - shown on the page; the other sources still are
        return {"records": None, "error": f"{type(exc).__name__}: {exc}"}


def _kafka_part(snap: dict[str, Any], cfg: PipelineConfig, config: Mapping[str, str] | None, error: str | None,
                table_next: PositionMap | None, timeout_s: float,
                now: Callable[[], datetime], options: TableOptions) -> None:  # fmt: skip
    """Fill ``kafka``, ``partitions``, ``lag`` and ``open_gaps``; on failure, from the table alone.

    ``timeout_s`` bounds the Kafka calls together, counted from the first of them: the table's
    reads before them (a fresh API server's first use of delta-rs and pyarrow among them) are
    not Kafka's time.
    """
    positions = {(t, p): o for t, parts in (table_next or {}).items() for p, o in parts.items()}
    stamps: dict[tuple[str, int], datetime | None] = {}
    if positions:
        try:
            stamps = last_ingested(cfg.tables.bronze_path, positions, storage_options=options("bronze_path"))
        except Exception as exc:  # noqa: BLE001 - the timestamps are a nicety; the offsets still show
            snap["table"]["error"] = f"last ingested timestamps: {type(exc).__name__}: {exc}"

    deadline = time.monotonic() + timeout_s

    def left() -> float:
        return deadline - time.monotonic()

    report, pending, group = None, {}, {}
    forecasts: tuple[PartitionForecast, ...] = ()
    retention_note: str | None = None
    try:
        if config is None:
            raise _NoConnection(f"Kafka not asked: {error or 'no connection settings'}")
        topics = kafka_state.read_topics(config, topics=cfg.kafka.topics, pattern=cfg.kafka.topic_pattern,
                                         timeout_s=max(left(), _MIN_CALL_S))  # fmt: skip
        report = measure_lag(table_next, topics, starting_offsets=cfg.kafka.starting_offsets)
        waiting = {(p.topic, p.partition): p.start for p in report.partitions if p.lag}
        notes = []
        # The extras are worth a call only while time is left; the offsets above are the essentials.
        if waiting and left() > _MIN_CALL_S:
            first = kafka_state.first_records(config, waiting, timeout_s=left())
            pending = {k: r.at if r else None for k, r in first.items()}
            if left() > _MIN_CALL_S:
                forecasts, retention_note = kafka_state.retention_forecasts(config, report.partitions, first,
                                                                            now=now(), timeout_s=left())  # fmt: skip
            else:
                retention_note = f"retention settings {OUT_OF_TIME}"
                notes.append(retention_note)
        elif waiting:
            notes.append(f"oldest pending timestamps {OUT_OF_TIME}")
        keys = [(p.topic, p.partition) for p in report.partitions]
        if keys and left() > _MIN_CALL_S:
            group = kafka_state.group_offsets(config, cfg.consumer_group, keys, timeout_s=left())
        elif keys:
            notes.append(f"consumer-group offsets {OUT_OF_TIME}")
        snap["kafka"] = {"ok": True, "error": None, "notes": notes}
    except Exception as exc:  # noqa: BLE001 - any Kafka failure is shown, never raised into the page
        text = redact(str(exc), config)
        if report is not None:  # the offsets were read; only an extra failed
            snap["kafka"] = {"ok": True, "error": f"partly read: {text}", "notes": []}
        elif isinstance(exc, kafka_calls.KafkaUnavailableError):
            snap["kafka"] = {"ok": False, "error": f"broker unreachable: {text}", "notes": []}
        else:  # no connection, unknown topic settings, authentication refused, ...
            snap["kafka"] = {"ok": False, "error": text, "notes": []}

    partitions: list[dict[str, Any]] = []
    by_partition = {(f.topic, f.partition): f for f in forecasts}
    if report is not None:
        for p in report.partitions:
            key = (p.topic, p.partition)
            partitions.append({
                "topic": p.topic, "partition": p.partition, "earliest": p.earliest, "latest": p.latest,
                "next_offset": p.next_offset, "lag": p.lag, "lost_now": p.lost,
                "last_ingested_at": _iso(stamps.get(key)), "oldest_pending_at": _iso(pending.get(key)),
                "group_offset": group.get(key),
                "retention_left_s": by_partition[key].left_s if key in by_partition else None,
                "retention_bound": by_partition[key].bound if key in by_partition else None,
            })  # fmt: skip
    else:
        for (topic, partition), nxt in sorted(positions.items()):
            partitions.append({
                "topic": topic, "partition": partition, "earliest": None, "latest": None, "next_offset": nxt,
                "lag": None, "lost_now": None, "last_ingested_at": _iso(stamps.get((topic, partition))),
                "oldest_pending_at": None, "group_offset": None, "retention_left_s": None, "retention_bound": None,
            })  # fmt: skip
    snap["partitions"] = partitions
    snap["open_gaps"] = [
        {"topic": p["topic"], "partition": p["partition"], "from": p["next_offset"],
         "until": p["next_offset"] + p["lost_now"], "records": p["lost_now"]}
        for p in partitions if p["lost_now"]
    ]  # fmt: skip
    oldest = min((v for v in pending.values() if v is not None), default=None)
    snap["lag"] = {
        "records": report.total_lag if report is not None else None,
        "partitions_behind": sum(1 for p in report.partitions if p.lag) if report is not None else None,
        "oldest_pending_at": _iso(oldest),
        "oldest_pending_age_s": max(0.0, (now() - oldest).total_seconds()) if oldest else None,
        **_retention_view(cfg, forecasts, retention_note, now()),
    }


def _retention_view(cfg: PipelineConfig, forecasts: tuple[PartitionForecast, ...], note: str | None,
                    now: datetime) -> dict[str, Any]:  # fmt: skip
    """The lag's retention keys: the least time left before Kafka's retention may delete unread records,
    where, by which setting, the margin under which a run proceeds at once, and why it is unknown."""
    first = soonest(forecasts)
    return {
        "retention_left_s": first.left_s if first else None,
        "retention_at": f"{first.topic}[{first.partition}]" if first else None,
        "retention_bound": first.bound if first else None,
        "retention_margin_s": cfg.retention_margin_s(now),
        "retention_note": note,
    }
