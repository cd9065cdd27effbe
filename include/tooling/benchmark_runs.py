"""What a DAG run costs when there is little or nothing to do, and whether its checks stay flat as
history grows; the DAG-run half of ``python -m include.tooling.benchmark``.

Every figure comes from real ``airflow dags test`` runs of one pipeline's DAG
(bronze only, the demo's cluster: one transient standalone worker, 1 core,
1g) against the benchmark's broker, in an embedded Airflow (SQLite):

1. **fixed cost**: a first run of ``--small-records`` records creates the
   table; then, per repetition, a run with no new records (its
   ``wait_for_lag`` skips, so no cluster may start: checked) and a run of
   ``--small-records`` new records (checked: the ledger says that many rows).
   End to end is the first task's start to the last task's end as Airflow
   recorded them; the ``airflow dags test`` process (CLI start and DAG parse
   included) is shown beside it, and the cluster's start and stop apart.
2. **history**: for each level in ``--history`` (bronze commits), one DAG
   run with a small ``max_offsets_per_trigger`` writes as many micro-batch
   commits as it takes to reach the level (the Delta commits and Spark
   checkpoint batches a long-lived pipeline accumulates); then the same small
   run is measured ``--run-repetitions`` times. The Airflow-side checks
   (check_request, wait_for_lag, preflight, check_continuity, mirror_offsets,
   record_run) should cost the same at every level; the report gives the
   last level's cost against the first level's (against the small run's with
   one level) and the bronze data files before each run, which is what
   opening the table with delta-rs reads the metadata of.
3. **side by side through bronze and silver** (:func:`measure_side_by_side`):
   pipelines of the demo's shape on one topic of the demo's order events,
   each with its own cluster section, read the same new events in turn. The
   benchmark's ``silver`` part compares the pipeline's defaults with a cluster
   forced; its ``crossover`` part compares local mode with the run's own
   cluster at growing backlogs (:data:`CROSSOVER_MODES`, :data:`CROSSOVER_SIZES`).

Task durations are read from Airflow's own ``task_instance`` rows. Each task's
own work is also read from the run's log: the execution API's "Task started"
and final state update for the task instance. The two differ in the first task
of each ``dags test`` process, whose ``task_instance`` start date is set before
Airflow's in-process execution API server starts (about 3 s here); a deployed
API server is already running.
"""

from __future__ import annotations

import json
import re
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from include.contract.errors import PipelineError
from include.readers import delta_progress, run_ledger
from include.tooling import airflow_local, local_s3

#: Tasks of a bronze-only pipeline on a transient cluster, in DAG order.
DAG_TASKS = (
    "check_request", "wait_for_lag", "preflight", "start_cluster", "ingest", "stop_cluster",
    "check_continuity", "mirror_offsets", "record_run",
)  # fmt: skip
#: The Airflow-side checks whose cost must not grow with history.
CHECK_TASKS = (
    "check_request",
    "wait_for_lag",
    "preflight",
    "check_continuity",
    "mirror_offsets",
    "record_run",
)
#: The demo pipeline's cluster (include/pipelines/demo_orders.yaml) with local mode off: every run with
#: records starts the transient cluster, so the fixed cost and history parts measure the same thing.
CLUSTER = {"profile": "local_standalone", "workers": 1, "worker_cores": 1, "worker_memory": "1g",
           "local_max_records": 0}  # fmt: skip
#: A pipeline file without a ``cluster`` section: the pipeline's defaults decide where a run goes.
DEFAULTS = None
#: Where the crossover part runs the same backlog: local mode and the run's own cluster with the same
#: cores, one and two (local mode never takes more cores than the machine has).
CROSSOVER_MODES: dict[str, dict] = {
    "local[1]": {"workers": 1, "local_max_records": 1_000_000_000},
    "cluster, 1 worker": {"workers": 1, "local_max_records": 0},
    "local[2]": {"workers": 2, "local_max_records": 1_000_000_000},
    "cluster, 2 workers": {"workers": 2, "local_max_records": 0},
}
#: Backlogs of the crossover part, records a run.
CROSSOVER_SIZES = (1_000, 200_000, 1_000_000)
_CHOICE = re.compile(r"^SUMMARY start_cluster: (?P<choice>.+)$", re.MULTILINE)


class RunBenchmarkError(PipelineError, RuntimeError):
    """A DAG run failed, or did something other than what the measurement needs."""


@dataclass(frozen=True)
class TaskTiming:
    """One task instance of a DAG run as Airflow recorded it."""

    task_id: str
    state: str | None
    start: datetime | None
    end: datetime | None
    #: The task instance's id, as the execution API logs it (hex, no dashes).
    ti_id: str | None = None

    @property
    def seconds(self) -> float | None:
        """Start to end (0 for a task skipped without running), ``None`` when Airflow has no dates."""
        return (self.end - self.start).total_seconds() if self.start and self.end else None

    @property
    def ran(self) -> bool:
        """Whether the task did its work: Airflow dates a task it skips too, so the state decides."""
        return self.state not in (None, "skipped", "upstream_failed", "removed")


@dataclass(frozen=True)
class DagRunTiming:
    """One measured DAG run."""

    kind: str
    repetition: int
    commits_before: int
    rows: int
    wall_s: float
    tasks: dict[str, TaskTiming] = field(default_factory=dict)
    #: Seconds of each task's own work (task id -> seconds), from the execution API's log lines.
    own: dict[str, float] = field(default_factory=dict)
    #: Where the run's Spark application ran and why (``start_cluster``'s summary line), if it ran.
    choice: str | None = None
    #: Data files of the bronze table before the run (what opening it with delta-rs reads the metadata of).
    files_before: int = 0
    #: The transform's micro-batches as its summary reports them (``batch_id``, ``read``, ``duration_s``,
    #: ``phases``); empty when the run has no transform.
    transform_batches: tuple[dict[str, Any], ...] = ()

    def own_s(self, task_id: str) -> float:
        """The task's own work in seconds (0 for a task that did not run)."""
        return self.own.get(task_id, 0.0)

    @property
    def own_total_s(self) -> float:
        """Every task's own work in this run."""
        return sum(self.own.values())

    @property
    def end_to_end_s(self) -> float:
        """The first task's start to the last task's end."""
        starts = [t.start for t in self.tasks.values() if t.start]
        ends = [t.end for t in self.tasks.values() if t.end]
        return (max(ends) - min(starts)).total_seconds()

    @property
    def cluster_started(self) -> bool:
        """Whether the run's ``start_cluster`` task ran."""
        t = self.tasks.get("start_cluster")
        return t is not None and t.ran

    def task_s(self, task_id: str) -> float:
        """Seconds of one task; 0 for a task that did not run."""
        t = self.tasks.get(task_id)
        return (t.seconds or 0.0) if t else 0.0


@dataclass(frozen=True)
class RunParams:
    """What the DAG-run half measures (``python -m include.tooling.benchmark --help``)."""

    small_records: int = 1000
    history: tuple[int, ...] = (10, 200)
    repetitions: int = 3
    partitions: int = 6
    record_bytes: int = 200
    timeout_s: float = 1800.0


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


_API_LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\dT[\d:.]+)Z? \[\w+\s*\] (?P<event>Task started|Task instance state updated)\s.*?"
    r"(?:new_state=(?P<state>\w+)\s.*?)?ti_id=(?P<ti>[0-9a-fA-F-]+)"
)


def ti_key(ti_id: str) -> str:
    """A task instance id as both the metadata database (hex) and the API's log (a UUID) can name it."""
    return ti_id.replace("-", "").lower()


def own_work_seconds(log_text: str) -> dict[str, float]:
    """Per task instance id (hex, no dashes): seconds from the execution API's "Task started" to its
    last state update that sets a state (success, failed, skipped, up_for_reschedule, ...).

    What the task itself did, as the API saw it; unlike the ``task_instance``
    start date it excludes the in-process API server's own start in the first
    task of ``airflow dags test``.
    """
    started: dict[str, datetime] = {}
    ended: dict[str, datetime] = {}
    for line in log_text.splitlines():
        m = _API_LINE.match(line)
        if m is None:
            continue
        ti, at = ti_key(m["ti"]), datetime.fromisoformat(m["at"])
        if m["event"] == "Task started":
            started.setdefault(ti, at)
        elif m["state"] and ti in started:
            ended[ti] = at
    return {ti: (ended[ti] - started[ti]).total_seconds() for ti in ended}


def read_return_value(db: Path, dag_id: str, run_id: str, task_id: str) -> Any:
    """What task ``task_id`` of DAG run ``run_id`` returned (its ``return_value`` XCom), ``None`` without one."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = 'return_value'",
            (dag_id, run_id, task_id),
        ).fetchone()
    if row is None or row[0] is None:
        return None
    value = json.loads(row[0])
    # The column holds JSON; a value stored as JSON text inside it is read once more.
    return json.loads(value) if isinstance(value, str) else value


def read_task_timings(db: Path, dag_id: str) -> tuple[str, dict[str, TaskTiming]]:
    """The newest DAG run of ``dag_id`` in the SQLite metadata database ``db``: run id and its tasks."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)
        ).fetchone()
        if row is None:
            raise RunBenchmarkError(f"{db}: no DAG run of {dag_id!r}")
        tasks = {
            task_id: TaskTiming(task_id, state, _parse_time(start), _parse_time(end),
                                ti_key(str(ti_id)) if ti_id else None)
            for ti_id, task_id, state, start, end in conn.execute(
                "SELECT id, task_id, state, start_date, end_date FROM task_instance WHERE dag_id = ? AND run_id = ?",
                (dag_id, row[0]),
            )
        }
    return row[0], tasks


class DagRunBench:
    """One pipeline of the benchmark: its file, its embedded Airflow and its measured runs."""

    def __init__(self, work: Path, bootstrap: str, topic: str, params: RunParams, *,
                 airflow_home: Path | None = None, produce: Callable[[int], None], log: Callable[[str], None],
                 cluster: dict | None = CLUSTER, transform: dict | None = None,
                 store: local_s3.LocalS3 | None = None) -> None:  # fmt: skip
        """``cluster``: the pipeline file's ``cluster`` section; ``None`` (:data:`DEFAULTS`) leaves it out.
        ``store``: a local S3-compatible server to keep the lakehouse on (a bucket of its own), reached through
        the Airflow connection ``aws_default``; ``None``: a folder of ``work``."""
        self.work, self.bootstrap, self.topic, self.params = work, bootstrap, topic, params
        self.cluster, self.transform = cluster, transform
        self.name = f"benchmark_{'silver' if transform else 'runs'}_{uuid.uuid4().hex[:8]}"
        self.pipelines = work / "pipelines"
        self.var = work / "var"
        self.logs = work / "dag-logs"
        for folder in (self.pipelines, self.var, self.logs):
            folder.mkdir(parents=True, exist_ok=True)
        #: The lakehouse root (a folder or an ``s3a://`` URI), and delta-rs's options for it.
        self.lake, self.options, store_env = str(work / "lake"), None, {}
        if store is not None:
            self.lake = f"{store.create_bucket(f'bench-{uuid.uuid4().hex[:8]}')}/lake"
            self.options = store.settings().object_store_options()
            store_env = {"AIRFLOW_CONN_AWS_DEFAULT": json.dumps(store.connection())}
        self.home = airflow_home or work / "airflow"
        self.env = airflow_local.environment(
            self.home, kafka_bootstrap=bootstrap, pipelines_dir=self.pipelines,
            extra={"KDE_LAKEHOUSE_ROOT": self.lake, "KDE_VAR_DIR": str(self.var), **store_env},
        )  # fmt: skip
        self._produce, self._log = produce, log
        self.runs: list[DagRunTiming] = []
        self._count = 0

    @property
    def bronze(self) -> str:
        return f"{self.lake}/{self.name}/bronze"

    def write_pipeline(self, max_offsets_per_trigger: int | None) -> None:
        """The pipeline file the DAG is built from (read again by every ``dags test``)."""
        data = {
            "name": self.name,
            "kafka": {
                "connection_id": "kafka_default",
                "topics": [self.topic],
                "max_offsets_per_trigger": max_offsets_per_trigger,
            },  # fmt: skip
            "schedule": None,
            "lag": {"min_records": 1, "max_wait_minutes": 1},
            "data_loss_policy": "fail",
            "retries": 0,
            "tags": ["benchmark"],
        }
        if self.cluster is not None:
            data["cluster"] = self.cluster
        if self.transform is not None:
            data["transform"] = self.transform
        (self.pipelines / f"{self.name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))

    def commits(self) -> int:
        """Commits in the bronze table (0 before the first run)."""
        version = delta_progress.table_version(self.bronze, storage_options=self.options)
        return 0 if version is None else version + 1

    def run(self, kind: str, repetition: int, *, expect_rows: int | None) -> DagRunTiming:
        """One ``airflow dags test`` run; raises unless it succeeded and read ``expect_rows`` rows
        (``None``: a run with nothing to read, which must start no cluster)."""
        self._count += 1
        log_file = self.logs / f"run{self._count:03d}-{kind}.log"
        before = self.commits()
        files = delta_progress.file_count(self.bronze, storage_options=self.options) or 0
        started = time.monotonic()
        proc = airflow_local.dags_test(
            self.env, self.name, log_file=log_file, timeout_s=self.params.timeout_s
        )
        wall = time.monotonic() - started
        if proc.returncode != 0:
            tail = log_file.read_text(errors="replace")[-3000:]
            raise RunBenchmarkError(
                f"DAG run {self._count} ({kind}) exited {proc.returncode}; end of {log_file}:\n{tail}"
            )
        run_id, tasks = read_task_timings(self.home / "airflow.db", self.name)
        not_ok = {t: x.state for t, x in tasks.items() if x.state not in ("success", "skipped")}
        if not_ok:
            raise RunBenchmarkError(
                f"DAG run {self._count} ({kind}): tasks not successful {not_ok}; log {log_file}"
            )
        latest = run_ledger.read_runs(f"{self.lake}/{self.name}/_runs", limit=1, storage_options=self.options)
        rows = int(latest[0]["rows"] or 0) if latest else 0
        if expect_rows is None:
            ran = {t: x.state for t, x in tasks.items() if x.ran and t in ("start_cluster", "ingest")}
            if ran or tasks["ingest"].state != "skipped":
                raise RunBenchmarkError(f"DAG run {self._count} ({kind}) had nothing to read but ran {ran or 'ingest'}: "
                                        f"{[(t, x.state) for t, x in tasks.items()]}")  # fmt: skip
            rows = 0
        elif rows != expect_rows:
            raise RunBenchmarkError(
                f"DAG run {self._count} ({kind}) read {rows} rows, expected {expect_rows}"
            )
        text = log_file.read_text(errors="replace")
        by_ti = own_work_seconds(text)
        own = {t: by_ti[x.ti_id] for t, x in tasks.items() if x.ti_id in by_ti}
        if missing := [t for t, x in tasks.items() if x.ran and t not in own]:
            raise RunBenchmarkError(f"DAG run {self._count} ({kind}): the execution API logged no start and end for "
                                    f"{missing}; log {log_file}")  # fmt: skip
        choice = _CHOICE.search(text)
        transform = read_return_value(self.home / "airflow.db", self.name, run_id, "transform")
        batches = tuple(transform.get("batches") or ()) if isinstance(transform, dict) else ()
        timing = DagRunTiming(kind, repetition, before, rows, wall, tasks, own, choice["choice"] if choice else None,
                              files, batches)
        self._log(f"  {kind} run {repetition}: {wall:.1f}s (dags test), end to end {timing.end_to_end_s:.1f}s, "
                  f"{rows} rows, bronze commits before {before}")  # fmt: skip
        return timing

    def measure(self) -> list[DagRunTiming]:
        """Both parts, in order; returns (and keeps) every measured run."""
        p = self.params
        self.write_pipeline(None)
        self._produce(p.small_records)
        self.runs.append(self.run("first", 1, expect_rows=p.small_records))
        for rep in range(1, p.repetitions + 1):
            self.runs.append(self.run("empty", rep, expect_rows=None))
            self._produce(p.small_records)
            self.runs.append(self.run("small", rep, expect_rows=p.small_records))
        for level in p.history:
            self.build_history(level)
            for rep in range(1, p.repetitions + 1):
                self._produce(p.small_records)
                self.runs.append(self.run(f"history {level}", rep, expect_rows=p.small_records))
        return self.runs


    def check_transform(self, run: DagRunTiming) -> DagRunTiming:
        """``run``, once its transform task is known to have succeeded."""
        if run.tasks.get("transform") is None or run.tasks["transform"].state != "success":
            raise RunBenchmarkError(f"DAG run {self._count} ({run.kind}): the transform did not run: {run.tasks}")
        return run

    def build_history(self, level: int) -> None:
        """Bring bronze to about ``level`` commits with one DAG run of many small micro-batches."""
        needed = level - self.commits()
        if needed <= 0:
            return
        per_batch = self.params.partitions * 10
        self.write_pipeline(per_batch)
        self._log(f"building history: {needed} micro-batch commits of {per_batch} records in one DAG run")
        self._produce(needed * per_batch)
        self.run(f"build {level}", 1, expect_rows=needed * per_batch)
        self.write_pipeline(None)
        self._log(f"  bronze now holds {self.commits()} commits")


def measure_side_by_side(benches: dict[str, DagRunBench], produce: Callable[[int], None],
                         sizes: Sequence[int], repetitions: int, first_records: int) -> list[DagRunTiming]:  # fmt: skip
    """Pipelines of one topic (each with its own tables and cluster section) through bronze and silver:
    a first run each that creates the tables (not reported), then per size and repetition ``size`` new
    events, read by each pipeline in turn (the order rotating, so no pipeline always runs first). Each
    run's kind is ``"<label> <size>"``."""
    produce(first_records)
    for bench in benches.values():
        bench.write_pipeline(None)
        bench.run("first", 1, expect_rows=first_records)
    runs: list[DagRunTiming] = []
    labels = list(benches)
    turn = 0
    for size in sizes:
        for rep in range(1, repetitions + 1):
            produce(size)
            for label in labels[turn:] + labels[:turn]:
                runs.append(benches[label].check_transform(benches[label].run(f"{label} {size}", rep,
                                                                              expect_rows=size)))  # fmt: skip
            turn = (turn + 1) % len(labels)
    return runs


# --------------------------------------------------------------------------- report


def _by_label_and_size(runs: Sequence[DagRunTiming]) -> dict[tuple[str, int], list[DagRunTiming]]:
    found: dict[tuple[str, int], list[DagRunTiming]] = {}
    for r in runs:
        label, _, size = r.kind.rpartition(" ")
        if label and size.isdigit():
            found.setdefault((label, int(size)), []).append(r)
    return found


def render_side_by_side_markdown(runs: Sequence[DagRunTiming], labels: Sequence[str], title: str,
                                 intro: str) -> str:  # fmt: skip
    """One row per backlog size, one column per pipeline: end to end s (first task start → last task
    end), median (min–max), and below the table where each pipeline's runs went (start_cluster)."""
    cells = _by_label_and_size(runs)
    sizes = sorted({size for _, size in cells})
    lines = [f"## {title}", "", intro, "",
             "| new records a run | " + " | ".join(f"{label}: end to end s" for label in labels) + " |",
             "|---|" + "---|" * len(labels)]  # fmt: skip
    for size in sizes:
        lines.append(f"| {size:,} | " + " | ".join(
            median_range([r.end_to_end_s for r in cells.get((label, size), [])]) for label in labels) + " |")
    lines.append("")
    for label in labels:
        ran = [r for size in sizes for r in cells.get((label, size), [])]
        if ran:
            lines.append(f"- {label}: {'local mode' if ran[0].choice and 'local[' in ran[0].choice else 'cluster'}: "
                         f"{ran[-1].choice or '—'}")  # fmt: skip
    lines += task_lines(cells, labels, sizes)
    lines += transform_batch_lines(cells, labels, sizes)
    return "\n".join(lines) + "\n"


def task_lines(cells: dict[tuple[str, int], list[DagRunTiming]], labels: Sequence[str],
               sizes: Sequence[int]) -> list[str]:  # fmt: skip
    """Per backlog, a table of each task's own work per pipeline (the tasks in the order they started), and
    what is left of end to end: Airflow's own part between the tasks. Seconds, median (min–max)."""
    lines: list[str] = []
    for size in sizes:
        runs = {label: cells.get((label, size), []) for label in labels}
        tasks = list(dict.fromkeys(t.task_id for rs in runs.values() for r in rs
                                   for t in sorted(r.tasks.values(), key=lambda t: t.start or datetime.max)
                                   if t.task_id in r.own))  # fmt: skip
        if not tasks:
            continue
        lines += ["", f"Where a run of {size:,} new records spends its time: each task's own work (the execution API's "
                  "start to end of the task), and Airflow's part between them (end to end minus the tasks' own work). "
                  "Seconds, median (min–max); a dash for a task that did not run.", "",
                  "| task | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]  # fmt: skip
        for task_id in tasks:
            row = [median_range([r.own_s(task_id) for r in rs]) if any(task_id in r.own for r in rs) else "—"
                   for rs in runs.values()]  # fmt: skip
            lines.append(f"| {task_id} | " + " | ".join(row) + " |")
        between = [median_range([r.end_to_end_s - r.own_total_s for r in rs]) if rs else "—" for rs in runs.values()]
        lines.append("| Airflow between the tasks | " + " | ".join(between) + " |")
    return lines


def first_batch(run: DagRunTiming) -> dict[str, Any] | None:
    """The first micro-batch the run's transform committed: the first of the run's Spark application, so
    the one that pays the JVM's warm-up, Spark's code generation and Delta's first reads."""
    done = [b for b in run.transform_batches if not b.get("skipped_replay")]
    return done[0] if done else None


#: The batch writer's phases that are reading the batch's rows and writing silver's files: what a batch
#: costs beyond them is the transform's own (the issue's "beyond reading and writing", as the ingest
#: micro-batch table has it). ``silver_write`` is Delta's append or MERGE call with its commit.
READ_AND_WRITE_PHASES = ("read", "silver_write")


def beyond_read_and_write(batch: dict[str, Any]) -> float | None:
    """A batch's seconds less its reading and writing phases; ``None`` for a batch whose timer lacks either
    (a report of a version that did not time them apart)."""
    phases = batch.get("phases", {})
    if not all(name in phases for name in READ_AND_WRITE_PHASES):
        return None
    return float(batch["duration_s"]) - sum(float(phases[name]) for name in READ_AND_WRITE_PHASES)


def transform_batch_lines(cells: dict[tuple[str, int], list[DagRunTiming]], labels: Sequence[str],
                          sizes: Sequence[int]) -> list[str]:  # fmt: skip
    """A table of the transform's first micro-batch per pipeline and backlog: its seconds and each phase of
    the writer's own timer, median (min–max); empty when no run had a transform."""
    rows = [(label, size, batches) for size in sizes for label in labels
            if (batches := [b for r in cells.get((label, size), []) if (b := first_batch(r))])]  # fmt: skip
    if not rows:
        return []
    phases = list(dict.fromkeys(name for _, _, batches in rows for b in batches for name in b.get("phases", {})))
    lines = ["", "The transform's first micro-batch of each run (cold: the first of the run's Spark application), by "
             "the batch writer's own timer (`spark_jobs/silver_writer.py`): `read` is reading the batch's rows from "
             "bronze, `silver_write` Delta's append or MERGE into silver with its commit; *beyond* is the batch less "
             "those two, the transform's own cost. Seconds, median (min–max).", "",
             "| pipeline | records | batch s | beyond s | " + " | ".join(f"{name} s" for name in phases) + " |",
             "|---|---|---|---|" + "---|" * len(phases)]  # fmt: skip
    for label, size, batches in rows:
        beyond = [x for b in batches if (x := beyond_read_and_write(b)) is not None]
        cells_ = [median_range([float(b["duration_s"]) for b in batches]), median_range(beyond)]
        cells_ += [median_range([float(b.get("phases", {}).get(name, 0.0)) for b in batches]) for name in phases]
        lines.append(f"| {label} | {size:,} | " + " | ".join(cells_) + " |")
    return lines


def crossover_verdict(runs: Sequence[DagRunTiming], pairs: Sequence[tuple[str, str]]) -> list[str]:
    """Per (local mode, cluster) pair with the same cores: the smallest backlog at which the cluster's
    median end to end beat local mode's, or that it never did up to the largest backlog measured."""
    cells = _by_label_and_size(runs)
    lines = []
    for local, cluster in pairs:
        sizes = sorted(size for (label, size) in cells if label == local and (cluster, size) in cells)
        if not sizes:
            continue
        ratios = {size: statistics.median(r.end_to_end_s for r in cells[(cluster, size)])
                  / statistics.median(r.end_to_end_s for r in cells[(local, size)]) for size in sizes}  # fmt: skip
        won = [size for size in sizes if ratios[size] < 1]
        shown = ", ".join(f"{size:,}: {ratios[size]:.2f}x" for size in sizes)
        lines.append(f"- {cluster} / {local}, end to end ({shown}): "
                     + (f"the cluster pays off from {won[0]:,} records a run" if won
                        else f"local mode is faster at every backlog measured, up to {sizes[-1]:,} records"))
    return lines


def median_range(values: Sequence[float], fmt: Callable[[float], str] = "{:.1f}".format) -> str:
    """A report cell: ``median (min–max)`` of ``values`` in ``fmt``, the value alone, or "—" for none."""
    if not values:
        return "—"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}–{fmt(max(values))})"


def _span(values: Sequence[int], fmt: Callable[[int], str] = str) -> str:
    """A report cell for counts that may differ between repetitions: ``low`` or ``low–high``."""
    low, high = min(values), max(values)
    return fmt(low) if low == high else f"{fmt(low)}–{fmt(high)}"


def _commits(runs: Sequence[DagRunTiming]) -> str:
    return _span([r.commits_before for r in runs])


def render_runs_markdown(runs: Sequence[DagRunTiming], params: RunParams) -> str:
    """The DAG-run sections of the benchmark's markdown."""
    by_kind: dict[str, list[DagRunTiming]] = {}
    for r in runs:
        by_kind.setdefault(r.kind, []).append(r)
    lines: list[str] = []
    fixed = [k for k in ("first", "empty", "small") if k in by_kind]
    lines += [] if not fixed else [
        "## Fixed cost of a DAG run",
        "",
        f"`airflow dags test` of a bronze-only pipeline (transient standalone cluster: {CLUSTER['workers']} worker, "
        f"{CLUSTER['worker_cores']} core, {CLUSTER['worker_memory']}); small run = {params.small_records:,} new records "
        f"of {params.record_bytes} B over {params.partitions} partitions; seconds, median (min–max) over "
        f"{params.repetitions} repetition(s).",
        "",
        "| run | cluster started | dags test process s | end to end s (first task start → last task end) "
        "| start_cluster s | ingest s | stop_cluster s | all other tasks s | every task's own work s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cluster_tasks = ("start_cluster", "ingest", "stop_cluster")
    for kind, label in (("first", "first run (creates the table)"), ("empty", "no new records"),
                        ("small", f"{params.small_records:,} new records")):  # fmt: skip
        rs = by_kind.get(kind)
        if not rs:
            continue
        started = {r.cluster_started for r in rs}
        lines.append("| " + " | ".join([
            label,
            "yes" if started == {True} else "no" if started == {False} else "sometimes",
            median_range([r.wall_s for r in rs]),
            median_range([r.end_to_end_s for r in rs]),
            *(median_range([r.task_s(t) for r in rs]) for t in cluster_tasks),
            median_range([sum(r.task_s(t) for t in DAG_TASKS if t not in cluster_tasks) for r in rs]),
            median_range([r.own_total_s for r in rs]),
        ]) + " |")  # fmt: skip
    levels = [(k, rs) for k, rs in by_kind.items() if k.startswith("history ")]
    small = by_kind.get("small")
    if levels:
        lines += [
            "",
            "## Cost of the checks as history grows",
            "",
            f"The same {params.small_records:,}-record run after the bronze table holds more commits (history built "
            "by one DAG run with `max_offsets_per_trigger` "
            f"{params.partitions * 10}, one Delta commit and one Spark checkpoint batch per micro-batch). "
            "Each task's own work in seconds (the execution API's start to end of the task), median (min–max).",
            "",
            "| bronze commits before the run | " + " | ".join(CHECK_TASKS) + " | checks total | ingest "
            "| bronze data files before the run |",
            "|---|" + "---|" * (len(CHECK_TASKS) + 3),
        ]
        for _, rs in ([("small", small)] if small else []) + levels:
            lines.append("| " + " | ".join([
                _commits(rs),
                *(median_range([r.own_s(t) for r in rs]) for t in CHECK_TASKS),
                median_range([sum(r.own_s(t) for t in CHECK_TASKS) for r in rs]),
                median_range([r.own_s("ingest") for r in rs]),
                _span([r.files_before for r in rs], "{:,}".format),
            ]) + " |")  # fmt: skip
        # Against the first history level when there are two (the "after 2,000 against after 10"),
        # else against the small run's 2–3 commits.
        base = levels[0][1] if len(levels) > 1 or not small else small
        last = levels[-1][1]
        before = statistics.median(sum(r.own_s(t) for t in CHECK_TASKS) for r in base)
        after = statistics.median(sum(r.own_s(t) for t in CHECK_TASKS) for r in last)
        if before:
            lines += ["", f"Checks total at {_commits(last)} commits / at {_commits(base)} commits: "
                          f"**{after / before:.2f}x** (medians)."]  # fmt: skip
    lines += [
        "",
        "- dags test process: the whole `airflow dags test` command (interpreter and Airflow start, DAG parse, "
        "every task, run bookkeeping); end to end and task seconds are Airflow's `task_instance` start and end dates.",
        "- own work: from the execution API's \"Task started\" to the task's final state update, per task, from the "
        "run's log. The first task's `task_instance` start date is set before `dags test` starts its in-process "
        "execution API server (about 3 s on this machine), so that task's Airflow duration holds the server's start; "
        "a deployed API server is already running.",
        "- no new records: `wait_for_lag` skips the run, so `start_cluster`, `ingest` and `stop_cluster` never start "
        "(checked on every such run); `record_run` still writes the run's ledger row.",
        "- `airflow dags test` runs the tasks one at a time in one process and looks for runnable tasks once a "
        "second, so a skipped run's end-to-end time is mostly that polling; a real scheduler adds its own latency "
        "instead (`scheduler_heartbeat_sec`, executor start of each task process).",
        "- every measured run is checked: all tasks succeeded or were skipped, and the run ledger's row says the "
        "number of records produced for it.",
    ]
    return "\n".join(lines) + "\n"
