"""The fault soak under a real scheduler: the way users run the pipeline, with faults, and exact tables after.

The other soak (:mod:`tests.soak.soak`) drives each run with ``airflow dags test``; this one starts
Airflow's components one by one (API server, DAG processor, scheduler; LocalExecutor, each task its
own process) on an Airflow home of its own, and lets the scheduler run the pipeline on a one-minute
cron with the pipeline's default ``retries: 2``, while a producer keeps writing orders (plain and
transactional batches, aborted ones, late events, tombstones, bad records). Backfills, quarantine
replays and normal runs are triggered through the REST API between the scheduled runs.

Three settings are shortened so that 30 faults fit a session, and only these: the delay before a
task's first retry (``KDE_RETRY_DELAY_S`` 5 s instead of 30 s, then doubling as usual), the
scheduler's ``task_instance_heartbeat_timeout`` (60 s instead of 300 s: how long a task whose
process died unseen waits before it is failed and retried) and its ``orphaned_tasks_check_interval``
(60 s instead of 300 s: how long a task whose scheduler died waits before the new scheduler resets it).

Each fault is injected into the run under way by a watcher on the processes and the tables' logs
(no failpoint); the soak then waits for that run to end. At the end the producer stops, the
scheduler catches up, and everything is compared with an independent read-committed read of the
topic: bronze (every record once), silver (the newest per key), quarantine (every bad record once)
and the consumer group; every DAG run must have succeeded, and the ledger's rows say how many tries
their steps took.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from include import ports
from include.readers import run_ledger
from include.readers.kafka_admin import create_topic, watermarks
from include.tooling import airflow_local, local_kafka
from tests.integration.dag_helpers import ORDERS_TRANSFORM, Pipeline
from tests.soak.soak import Producer, _kill, bounce, exact_problems, soak_processes

#: Every fault the scheduler soak injects, and what it does.
FAULTS: dict[str, str] = {
    "commit_gap": "SIGKILL of the Spark driver the moment a bronze commit lands, before Spark's checkpoint commit",
    "silver_gap": "SIGKILL of the driver the moment a silver commit lands, before the transform's checkpoint commit",
    "driver": "SIGKILL of the Spark driver at a random moment of its life",
    "task": "SIGKILL of the Airflow task process that runs spark-submit (its supervisor reports the failure)",
    "scheduler": "SIGKILL of the scheduler and every process under it (its LocalExecutor workers, the running task) "
                 "mid-run, as a container restart does; started again seconds later",
    "broker": "the broker killed or stopped mid-run and restarted on its port seconds later",
    "backfill": "a backfill_offsets run (REST) over records deleted from bronze, its driver killed on its commit",
    "replay": "a replay_quarantine run (REST), its driver killed on its first quarantine or silver commit",
    "maintenance": "SIGKILL of the driver on the first OPTIMIZE or VACUUM commit of a run's maintenance",
}
#: Kinds whose moment is a random delay after a driver starts.
TIMED = {"driver", "task", "scheduler", "broker"}
#: Maintenance every few runs, so that the maintenance kind finds one soon.
MAINTENANCE_EVERY = 3
USER, PASSWORD = "soak", "soak-password"
#: How long one fault may take: its run, the retries it causes, and the wait for a driver to appear.
FAULT_TIMEOUT_S = 420


@dataclass
class SchedulerFault:
    """One fault: whether it hit a run, how, and how that run ended."""

    kind: str
    step: int
    injected: bool = False
    detail: str = ""
    run_id: str = ""
    run_state: str = ""
    tries: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class SchedulerSoak:
    """The soak's broker, pipeline, producer and Airflow components, and how one fault is injected."""

    def __init__(self, root: Path, seed: int, *, log=print) -> None:
        self.root, self.seed, self.log = root, seed, log
        self.rng = random.Random(seed)
        self.name = f"ssoak_{seed % 100000}"
        self.topic = f"ssoak-{seed % 100000}.orders"
        self.broker_dir = root / "kafka"
        self.broker = local_kafka.start(self.broker_dir)
        self.kafka_port = int(self.broker.bootstrap_servers.rsplit(":", 1)[1])
        self.bootstrap = self.broker.bootstrap_servers
        create_topic(self.bootstrap, self.topic, 3)
        self.pipeline = Pipeline(root, self.name, self.topic, self.bootstrap, root / "airflow")
        self.lake, self.var = self.pipeline.lake, self.pipeline.var
        self._write_pipeline()
        self.env = self.pipeline.environment(
            **airflow_local.login_environment(root / "auth", USER, PASSWORD),
            KDE_RETRY_DELAY_S="5", AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT="60",
            AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL="60",
        )  # fmt: skip
        airflow_local.migrate(self.env)
        self.port = ports.free_port()
        self.components: dict[str, object] = {}
        for component in ("api-server", "dag-processor", "scheduler"):
            self.start_component(component)
            if component == "api-server":
                airflow_local.wait_until_serving(self.components[component], self.port,
                                                 log_file=self._log_file(component))  # fmt: skip
        self.api = airflow_local.AirflowApi(self.port, USER, PASSWORD)
        self.api.wait_for_dag(self.name)
        self.producer = Producer(self.bootstrap, self.topic, random.Random(seed + 1))
        self.results: list[SchedulerFault] = []

    # -- set-up --

    def _write_pipeline(self) -> None:
        """Bronze and silver, the default retries (the key left out), a one-minute cron, maintenance every few
        runs, 250 records a micro-batch (a run's backlog makes several commits to fault between)."""
        self.pipeline.write(transform=ORDERS_TRANSFORM, schedule="* * * * *", maintenance={"every_runs": MAINTENANCE_EVERY},
                            kafka={"connection_id": "kafka_default", "topics": [self.topic],
                                   "max_offsets_per_trigger": 250})  # fmt: skip
        path = self.pipeline.dir / f"{self.name}.yaml"
        path.write_text(path.read_text().replace("retries: 0\n", ""))

    def _log_file(self, component: str) -> Path:
        return self.var / f"{component}.log"

    def start_component(self, component: str) -> None:
        self.components[component] = airflow_local.start_component(self.env, component, port=self.port,
                                                                    log_file=self._log_file(component))  # fmt: skip

    def close(self) -> None:
        self.producer.close()
        for component in reversed(list(self.components)):
            airflow_local.stop_standalone(self.components[component])  # type: ignore[arg-type]
        for pid in soak_processes(self.var):
            _kill(pid)
        self.broker.stop()

    def warm_up(self) -> None:
        """Unpause the DAG with records waiting, and wait for its first scheduled run to succeed: the tables
        exist before the first fault."""
        self.producer.resume(500)
        self.api.unpause(self.name)
        deadline = time.monotonic() + FAULT_TIMEOUT_S
        while not any(r["outcome"] == "success" for r in run_ledger.read_runs(self.lake / self.name / "_runs")):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no run of {self.name} succeeded within {FAULT_TIMEOUT_S}s: "
                                   f"{[(r['dag_run_id'], r['state']) for r in self.api.runs(self.name)]}")  # fmt: skip
            time.sleep(3)
        self.producer.pause()

    # -- what is running --

    def drivers(self) -> list[int]:
        """The pids of the Spark drivers (spark-submit JVMs) of this soak's runs."""
        return [pid for pid, (kind, _) in soak_processes(self.var).items() if kind == "driver"]

    def active_run(self) -> dict | None:
        """The DAG run that is running now, if any (``max_active_runs`` is 1)."""
        running = [r for r in self.api.runs(self.name) if r["state"] == "running"]
        return running[-1] if running else None

    def bounce_broker(self, hard: bool, down_s: float) -> None:
        self.broker = bounce(self.broker, self.broker_dir, self.kafka_port, hard=hard, down_s=down_s)

    def restart_scheduler(self, down_s: float) -> None:
        """SIGKILL the scheduler with every process under it (its LocalExecutor workers and the tasks they run,
        as when its container restarts), and start it again ``down_s`` later."""
        proc = self.components["scheduler"]
        tree = _descendants(proc.pid)  # type: ignore[attr-defined]
        for pid in [proc.pid, *tree]:  # type: ignore[attr-defined]
            _kill(pid)
        proc.wait()  # type: ignore[attr-defined]
        time.sleep(down_s)
        self.start_component("scheduler")

    # -- one fault --

    def fault(self, step: int, kind: str) -> SchedulerFault:
        """Inject ``kind`` into the next run it can hit; wait for that run to end."""
        rng = random.Random(self.seed * 1000 + step)
        result = SchedulerFault(kind, step)
        started = time.monotonic()
        self.producer.resume(rng.randrange(300, 1200))
        if rng.random() < 0.25:  # a normal run through the REST API, queued behind the scheduled ones
            self._trigger(f"soak-normal-{step}", {})
        wanted_run = None
        if kind == "backfill":
            wanted_run = self._start_backfill(step, rng)
        elif kind == "replay":
            wanted_run = self._start_replay(step)
        if kind in ("backfill", "replay") and wanted_run is None:
            result.detail = "nothing to backfill or replay yet"
            return self._done(result, started)
        self._inject(result, rng, wanted_run)
        self.producer.pause()
        if result.run_id:
            run = self.api.wait_for_run(self.name, result.run_id, timeout_s=FAULT_TIMEOUT_S)
            result.run_state = run["state"]
            result.tries = {t: int(ti.get("try_number") or 0)
                            for t, ti in self.api.task_instances(self.name, result.run_id).items()}  # fmt: skip
        return self._done(result, started)

    def _done(self, result: SchedulerFault, started: float) -> SchedulerFault:
        result.seconds = time.monotonic() - started
        self.results.append(result)
        retried = {t: n for t, n in result.tries.items() if n > 1}
        self.log(f"scheduler soak fault {result.step} {result.kind}: {'injected' if result.injected else 'missed'} "
                 f"({result.detail}); run {result.run_id or '-'} {result.run_state or '-'}, retried {retried}, "
                 f"{result.seconds:.0f}s")  # fmt: skip
        return result

    def _inject(self, result: SchedulerFault, rng: random.Random, wanted_run: str | None) -> None:
        """Watch the processes and the tables' logs, and hit the run under way (``wanted_run`` when given)."""
        logs = {t: self.lake / self.name / t / "_delta_log" for t in ("bronze", "silver", "quarantine")}
        seen = {t: _json_files(folder) for t, folder in logs.items()}
        delay = rng.uniform(0, 25)
        first_driver: float | None = None
        run: dict | None = None
        drivers: list[int] = []
        asked = scanned = 0.0
        # Maintenance comes every MAINTENANCE_EVERY runs: its fault may wait that many runs for its moment.
        deadline = time.monotonic() + FAULT_TIMEOUT_S * (MAINTENANCE_EVERY if result.kind == "maintenance" else 1)
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now - asked > 1.0:  # the REST API once a second, the processes ten times, the logs every turn
                run, asked = self.active_run(), now
            if run is None or (wanted_run is not None and run["dag_run_id"] != wanted_run):
                seen = {t: _json_files(folder) for t, folder in logs.items()}
                first_driver = None
                time.sleep(0.5)
                continue
            if now - scanned > 0.1:
                drivers, scanned = self.drivers(), now
            if drivers and first_driver is None:
                first_driver = now
            new = {t: _json_files(folder) - seen[t] for t, folder in logs.items()}
            if self._hit(result, rng, drivers, new, logs, first_driver is not None and now - first_driver >= delay):
                result.injected, result.run_id = True, run["dag_run_id"]
                return
            time.sleep(0.02)
        result.detail = result.detail or "no run gave the fault its moment in time"

    def _hit(self, result: SchedulerFault, rng: random.Random, drivers: list[int], new: dict[str, set[str]],
             logs: dict[str, Path], due: bool) -> bool:  # fmt: skip
        """Inject ``result.kind`` if its moment has come; whether it did."""
        kind = result.kind
        if kind in ("commit_gap", "backfill") and new["bronze"] and drivers:
            result.detail = f"driver {drivers} on bronze {sorted(new['bronze'])[-1]}"
        elif kind == "silver_gap" and new["silver"] and drivers:
            result.detail = f"driver {drivers} on silver {sorted(new['silver'])[-1]}"
        elif kind == "replay" and (new["silver"] or new["quarantine"]) and drivers:
            result.detail = f"driver {drivers} on {sorted(new['silver'] | new['quarantine'])[-1]}"
        elif kind == "maintenance" and drivers and _maintenance_commit(logs, new):
            result.detail = f"driver {drivers} on {_maintenance_commit(logs, new)}"
        elif kind in TIMED and due and drivers:
            if kind == "driver":
                result.detail = f"driver {drivers}"
            elif kind == "task":
                parents = sorted({_parent(pid) for pid in drivers})
                result.detail = f"task process {parents} of driver {drivers}"
                return any([_kill(pid) for pid in parents])
            elif kind == "scheduler":
                down = rng.uniform(1, 8)
                self.restart_scheduler(down)
                result.detail = f"scheduler killed, down {down:.1f}s"
                return True
            else:
                hard, down = rng.random() < 0.5, rng.uniform(0.5, 8)
                threading.Thread(target=self.bounce_broker, args=(hard, down)).start()
                result.detail = f"broker {'killed' if hard else 'stopped'}, down {down:.1f}s"
                return True
        else:
            return False
        return any([_kill(pid) for pid in drivers])

    def _start_backfill(self, step: int, rng: random.Random) -> str | None:
        """Delete a few records of a partition from bronze (as a bad cleanup would; scheduled runs go on, and
        the transform's stream skips change commits) and trigger the backfill that puts them back; its run id."""
        from deltalake import DeltaTable

        bronze = DeltaTable(str(self.lake / self.name / "bronze"))
        part = rng.randrange(3)
        offsets = bronze.to_pyarrow_table(columns=["partition", "offset"], filters=[("partition", "=", part)])
        held = sorted(offsets.column("offset").to_pylist())
        if len(held) < 40:
            return None
        low = held[rng.randrange(len(held) - 30)]
        until = low + 25
        for attempt in range(5):  # a scheduled run's commit may land between the read and the delete
            try:
                DeltaTable(str(self.lake / self.name / "bronze")).delete(
                    f'"partition" = {part} AND "offset" >= {low} AND "offset" < {until}')
                break
            except Exception:  # noqa: BLE001 - delta-rs' commit conflict; read the table again
                if attempt == 4:
                    raise
                time.sleep(1)
        conf = {"action": "backfill_offsets", "reason": f"soak step {step}: records deleted from bronze",
                "offset_ranges": [{"topic": self.topic, "partition": part, "from": low, "until": until}]}  # fmt: skip
        return self._trigger(f"soak-backfill-{step}", conf)

    def _start_replay(self, step: int) -> str | None:
        from deltalake import DeltaTable

        path = self.lake / self.name / "quarantine"
        if not DeltaTable.is_deltatable(str(path)):
            return None
        conf = {"action": "replay_quarantine", "reason": f"soak step {step}: rules unchanged, replayed anyway"}
        return self._trigger(f"soak-replay-{step}", conf)

    def _trigger(self, run_id: str, conf: dict) -> str:
        status, answer = self.api.trigger(self.name, conf, run_id=run_id)
        if status != 200:
            raise RuntimeError(f"the soak's trigger of {run_id} was refused: {status} {answer}")
        return run_id

    def _wait_quiet(self, timeout_s: float = FAULT_TIMEOUT_S) -> None:
        """Wait, with the DAG paused, until no task of its runs is running or queued: the tables stand still (a
        paused DAG's run stays running, its next tasks unscheduled)."""
        deadline = time.monotonic() + timeout_s
        while True:
            busy = [(r["dag_run_id"], t) for r in self.api.runs(self.name) if r["state"] in ("running", "queued")
                    for t, ti in self.api.task_instances(self.name, r["dag_run_id"]).items()
                    if ti.get("state") in ("running", "queued")]  # fmt: skip
            if not busy:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"tasks still running after {timeout_s:.0f}s: {busy}")
            time.sleep(2)

    # -- the end --

    def finish(self) -> list[str]:
        """Stop producing, let the scheduler catch up (a run that starts after the last record was written and
        succeeds), and compare everything; the problems found."""
        self.producer.pause()
        written = {p: high for p, (_, high) in watermarks(self.bootstrap, self.topic).items()}
        deadline = time.monotonic() + 2 * FAULT_TIMEOUT_S
        while True:
            rows = run_ledger.read_runs(self.lake / self.name / "_runs")
            newest = next((r for r in rows if r["outcome"] == "success"), None)
            caught_up = newest is not None and all(
                p["next_offset"] == written.get(p["partition"]) for p in newest["partitions_json"])
            if caught_up and newest["silver_read"] is not None:
                break
            if time.monotonic() > deadline:
                return [f"the scheduler did not catch up with the topic's ends {written} in time"]
            time.sleep(5)
        self.api.request("PATCH", f"/api/v2/dags/{self.name}", {"is_paused": True})
        self._wait_quiet()
        problems, _, _ = exact_problems(self.bootstrap, self.topic, self.lake / self.name, self.name)
        runs = self.api.runs(self.name)
        failed = [r["dag_run_id"] for r in runs if r["state"] == "failed"]
        if failed:
            problems.append(f"runs that failed: {failed}")
        left = sorted(str(p) for p in self.var.glob(f"runs/{self.name}/*/secrets"))
        if left:
            problems.append(f"credentials left in run folders after their tasks ended: {left}")
        ledger = run_ledger.read_runs(self.lake / self.name / "_runs")
        broken = [r["run_id"] for r in ledger if r["outcome"] == "success" and r["continuity"] != "CONTINUOUS"]
        if broken:
            problems.append(f"successful runs without a CONTINUOUS verdict: {broken}")
        return problems

    def report(self) -> str:
        runs = self.api.runs(self.name)
        ledger = run_ledger.read_runs(self.lake / self.name / "_runs")
        lines = [f"scheduler soak: seed {self.seed}, {len(self.results)} faults, "
                 f"{sum(r.injected for r in self.results)} injected; {len(runs)} DAG runs "
                 f"({dict(Counter(r['state'] for r in runs))}, by type {dict(Counter(r['run_type'] for r in runs))})",
                 f"{'fault':<12} {'count':>5} {'injected':>8} {'run succeeded':>13} {'retried':>7}"]  # fmt: skip
        for kind in FAULTS:
            rs = [r for r in self.results if r.kind == kind]
            if rs:
                lines.append(f"{kind:<12} {len(rs):>5} {sum(r.injected for r in rs):>8} "
                             f"{sum(r.run_state == 'success' for r in rs):>13} "
                             f"{sum(any(n > 1 for n in r.tries.values()) for r in rs):>7}")  # fmt: skip
        tried = Counter(t for r in ledger for t, n in (r.get("tries_json") or {}).items() if n and n > 1)
        lines.append(f"ledger: {len(ledger)} rows, {sum(1 for r in ledger if (r.get('tries') or 1) > 1)} with a "
                     f"retried step ({dict(tried)}); producer {dict(self.producer.sent)}, "
                     f"{len(self.producer.errors)} send errors during bounces")  # fmt: skip
        return "\n".join(lines)


def plan(seed: int, faults: int, only: list[str] | None = None) -> list[str]:
    """``faults`` fault kinds in an order the seed shuffles, every kind in turn (``only`` restricts them)."""
    kinds = list(only or FAULTS)
    unknown = sorted(set(kinds) - set(FAULTS))
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; expected some of {', '.join(FAULTS)}")
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < faults:
        cycle = kinds[:]
        rng.shuffle(cycle)
        out += cycle
    return out[:faults]


def _json_files(folder: Path) -> set[str]:
    try:
        return {p.name for p in folder.glob("*.json")}
    except OSError:
        return set()


def _maintenance_commit(logs: dict[str, Path], new: dict[str, set[str]]) -> str | None:
    """The first of the new commits that is an OPTIMIZE or a VACUUM, as ``table/file``, or ``None``."""
    for table, names in new.items():
        for name in sorted(names):
            try:
                text = (logs[table] / name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                info = json.loads(line).get("commitInfo") if line.strip() else None
                if info and str(info.get("operation", "")).startswith(("OPTIMIZE", "VACUUM")):
                    return f"{table}/{name} ({info['operation']})"
    return None


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (children first found by their parent pid in /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parents.setdefault(_parent(int(entry.name)), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        out += children
        todo += children
    return out


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1
