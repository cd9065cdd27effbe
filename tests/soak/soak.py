"""The fault soak: random kills and bounces across real DAG runs, exact set equality after each fault.

One pipeline with bronze and silver on a broker of the soak's own (so it can
bounce it), real ``airflow dags test`` runs (forked from a warm server of the
soak's own, :mod:`include.tooling.warm_airflow`), real Spark (local mode inside
the driver, or the transient standalone cluster for the faults that need
one) and real Delta tables. A producer thread writes keyed orders all the
time a faulted run is under way: plain and transactional batches (some
aborted), late events, tombstones and a few bad records.

For each fault: a run starts, the fault is injected at a random moment of it
(no failpoint: by signals, timing and a watcher on the tables' files), the
producer pauses, the next runs go on until one succeeds, and then
:meth:`Soak.check` compares everything with an independent read-committed
read of the topic. The seed replays the sequence of faults and moments (the
machine's timing still varies).

The soak stands in for the Airflow scheduler in one place: ``airflow dags
test`` has no scheduler, so when a fault kills the process running a DAG run,
or that process ends without finishing its run, nothing would ever mark that
run failed. The soak then does what the scheduler's heartbeat timeout does:
it marks the run and its unfinished tasks failed in the metadata database
(:meth:`Soak.fail_dead_run`), and says so when no fault of its own was the cause.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from include.orchestration import run_lock
from include.readers import kafka_state, run_ledger
from include.readers.kafka_admin import create_topic, watermarks
from include.spark import cluster_state
from include.tooling import airflow_local, local_kafka
from include.tooling.warm_airflow import WarmAirflow, WarmCommand
from tests.integration.dag_helpers import ORDERS_TRANSFORM, STANDALONE, Pipeline
from tests.kafka_helpers import read_committed

#: Every fault the soak injects, and what it does.
FAULTS: dict[str, str] = {
    "driver": "SIGKILL of the Spark driver JVM at a random moment of its life",
    "executor": "SIGKILL of a Spark executor of the transient standalone cluster",
    "worker": "SIGKILL of the standalone worker (its executors die with it)",
    "master": "SIGKILL of the standalone master (the job is stopped, as for a lost worker)",
    "task": "SIGKILL of the Airflow process running the DAG run (`airflow dags test`), children left alone",
    "broker": "the broker killed or stopped mid-run and restarted on its port seconds later",
    "commit_gap": "SIGKILL of the driver the moment a bronze commit lands, before Spark's checkpoint commit",
    "merge": "SIGKILL of the driver while the silver MERGE writes its files, before its commit",
    "lock_holder": "SIGKILL of the run holding the pipeline's lock while a second run waits for it",
}
CLUSTER_FAULTS = {"executor", "worker", "master"}
#: Faults that end the run they hit (the others may leave it to finish).
ENDS_RUN = {"driver", "task", "commit_gap", "merge", "worker", "master"}
KEYS = 400
#: The soak pipeline's maintenance.every_runs: a slice of 20-odd runs maintains its tables twice or so (every 4
#: made the CI slice 8 minutes longer: each maintenance costs about 35 s in a fresh local-mode driver).
MAINTENANCE_EVERY = 8


def _classify(cmdline: str) -> str:
    if "org.apache.spark.deploy.SparkSubmit" in cmdline:
        return "driver"
    if "CoarseGrainedExecutorBackend" in cmdline:
        return "executor"
    if "org.apache.spark.deploy.worker.Worker" in cmdline:
        return "worker"
    if "org.apache.spark.deploy.master.Master" in cmdline:
        return "master"
    if " dags test " in f" {cmdline} ":
        return "task"
    return "other"


def soak_processes(var: Path, server: str | None = None) -> dict[int, tuple[str, str]]:
    """Live processes started for the soak's runs (their environment names ``var``, or they belong to one of its
    runs' clusters): pid -> (kind, cmdline).

    Processes with the warm Airflow server's command line ``server`` are left out: the server lives
    the whole soak, and the commands it forks carry its environment and command line (the soak holds
    each one's handle and waits for its end). The Spark processes those commands start carry the
    run's own environment, so they are found.
    """
    # A run's cluster daemons and executors start with a minimal environment (no KDE_VAR_DIR): they carry
    # their cluster's id instead, which its state file in the run folder names.
    markers = {f"KDE_VAR_DIR={var}".encode()}
    for state in var.glob(f"runs/*/*/cluster/{cluster_state.STATE_FILE}"):
        try:
            markers.add(f"{cluster_state.MARKER_ENV}={json.loads(state.read_text())['cluster_id']}".encode())
        except (OSError, ValueError, KeyError):
            continue
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if markers.isdisjoint((entry / "environ").read_bytes().split(b"\0")):
                continue
            cmdline = _cmdline(int(entry.name))
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if server is not None and cmdline == server:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue
        found[int(entry.name)] = (_classify(cmdline), cmdline)
    return found


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()


# --- the producer --------------------------------------------------------------------------------------


class Producer:
    """Writes keyed orders continuously while running; :meth:`pause` returns at a batch boundary."""

    def __init__(self, bootstrap: str, topic: str, rng: random.Random) -> None:
        self.bootstrap, self.topic, self.rng = bootstrap, topic, rng
        # Its send errors are counted in ``errors``; librdkafka's own lines about a bounced broker
        # (one per connection attempt) would drown the soak's log.
        self._config = {"bootstrap.servers": bootstrap, "log_level": 2}
        self.tick = 0
        self.sent = Counter()
        self.errors: list[str] = []
        self._run = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = False
        #: Records left before this resume's budget is spent (``None``: no budget).
        self._left: int | None = None
        # resume() and the loop's "budget spent: idle" step exclude each other, so a resume is never
        # followed by a stale idle mark that would let pause() return in the middle of a batch.
        self._budget_lock = threading.Lock()
        self._plain = None
        self._tx = None
        self._thread = threading.Thread(target=self._loop, name="soak-producer", daemon=True)
        self._thread.start()

    def resume(self, budget: int | None = None) -> None:
        """Write until :meth:`pause`, or until ``budget`` more records are written (then idle)."""
        with self._budget_lock:
            self._left = budget
            self._idle.clear()
            self._run.set()

    def pause(self, timeout_s: float = 120) -> None:
        self._run.clear()
        if not self._idle.wait(timeout_s):
            raise TimeoutError(f"the soak's producer did not reach a batch boundary within {timeout_s}s")

    def close(self) -> None:
        self._stop = True
        self._run.set()
        self._thread.join(60)
        # Dropped here, before the broker stops, so librdkafka does not go on reconnecting to it.
        self._plain = self._tx = None

    def _record(self) -> tuple[bytes, bytes | None, str]:
        key = f"k{self.rng.randrange(KEYS)}"
        roll = self.rng.random()
        self.tick += 1
        if roll < 0.05:
            return key.encode(), None, "tombstone"
        if roll < 0.07:
            bad = self.rng.choice([b'{"order_id": "' + key.encode() + b'", "amount": ', b"not json at all",
                                   json.dumps({"order_id": key, "amount": -1, "event_time": _time(self.tick)}).encode()])
            return key.encode(), bad, "bad"
        tick, kind = self.tick, "event"
        if roll < 0.17:
            tick, kind = max(0, self.tick - self.rng.randrange(1, 300)), "late"
        value = {"order_id": key, "amount": round(self.rng.uniform(0, 500), 2), "event_time": _time(tick)}
        return key.encode(), json.dumps(value).encode(), kind

    def _loop(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka import Producer as KafkaProducer

        while not self._stop:
            if not self._run.is_set():
                self._idle.set()
                self._run.wait()
                continue
            with self._budget_lock:
                spent = self._left is not None and self._left <= 0
                if spent:
                    self._idle.set()
            if spent:
                time.sleep(0.05)
                continue
            batch = [self._record() for _ in range(self.rng.randrange(5, 25))]
            if self._left is not None:
                self._left -= len(batch)
            transactional = self.rng.random() < 0.25
            try:
                if transactional:
                    if self._tx is None:
                        self._tx = KafkaProducer({**self._config, "transactional.id": f"soak-{self.topic}"})
                        self._tx.init_transactions(60)
                    self._tx.begin_transaction()
                    for key, value, _ in batch:
                        self._tx.produce(self.topic, key=key, value=value)
                    self._tx.flush(60)
                    if self.rng.random() < 0.3:
                        self._tx.abort_transaction(60)
                        self.sent["aborted"] += len(batch)
                    else:
                        self._tx.commit_transaction(60)
                        self.sent.update(kind for _, _, kind in batch)
                else:
                    if self._plain is None:
                        self._plain = KafkaProducer({**self._config, "enable.idempotence": True, "linger.ms": 5})
                    for key, value, _ in batch:
                        self._plain.produce(self.topic, key=key, value=value)
                    self._plain.flush(60)
                    self.sent.update(kind for _, _, kind in batch)
            except KafkaException as exc:
                # A broker bounce: what was not acknowledged may or may not be in the log; the
                # checks read the log itself. A transactional producer starts over.
                self.errors.append(str(exc)[:200])
                if transactional and self._tx is not None:
                    try:
                        self._tx.abort_transaction(30)
                    except KafkaException:
                        self._tx = None
            time.sleep(self.rng.uniform(0.2, 0.6))
        self._idle.set()


# --- the independent reference ---------------------------------------------------------------------------


def is_bad(value: bytes) -> bool:
    """Whether the orders transform must quarantine ``value`` (the soak writes only these kinds of bad)."""
    try:
        data = json.loads(value)
    except ValueError:
        return True
    return not isinstance(data, dict) or data.get("amount", 0) < 0


def newest_per_key(records: list[tuple[int, int, bytes | None, bytes | None]]) -> dict[str, tuple]:
    """Silver as docs/silver.md defines it, computed record by record from the log.

    Per key, in log order: an event replaces the state when its event time is
    not older; a tombstone deletes the key at the newest event time seen
    before it. A key stays in one partition (keyed records, a fixed partition
    count), so log order is offset order within it. Returns key ->
    (deleted, event_time or None, partition, offset).
    """
    state: dict[str, tuple] = {}
    for partition, offset, key, value in sorted(records, key=lambda r: (r[0], r[1])):
        if value is not None and is_bad(value):
            continue
        if value is None:
            k = key.decode()
            old = state.get(k)
            state[k] = (True, old[1] if old else None, partition, offset)
            continue
        data = json.loads(value)
        k, t = data["order_id"], data["event_time"]
        old = state.get(k)
        if old is None or old[1] is None or t >= old[1]:
            state[k] = (False, t, partition, offset)
    return state


# --- one fault -------------------------------------------------------------------------------------------


@dataclass
class FaultResult:
    """One fault: whether it hit the run, how, and what the runs and checks after it found."""

    kind: str
    seed_step: int
    injected: bool
    detail: str
    runs_to_recover: int = 0
    duplicates: int = 0
    losses: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    during: str = "faulted run"


class Soak:
    """The soak's broker, pipeline, producer and Airflow home, and how a fault is run and checked."""

    def __init__(self, root: Path, seed: int, *, log=print, recovery_bounce: float = 0.75,
                 early_companions: bool = False, round_records: int | None = None) -> None:  # fmt: skip
        """``recovery_bounce``: the share of rounds whose first recovery run gets a broker bounce.
        ``early_companions``: the faults a run may live through come in its first seconds, before the
        fault that ends it is likely to (the smoke, where a companion that misses costs a round).
        ``round_records``: at most this many records produced per faulted run (``None``: as many as the
        run lasts). Records still arrive while the run runs; the cap keeps a slow machine's longer runs
        from meeting ever larger backlogs, which made the smoke's cost follow the machine's load."""
        self.root, self.seed, self.log = root, seed, log
        self.recovery_bounce, self.early_companions = recovery_bounce, early_companions
        self.round_records = round_records
        self.name = f"soak_{seed % 100000}"
        self.topic = f"soak-{seed % 100000}.orders"
        self.broker_dir = root / "kafka"
        self.broker = local_kafka.start(self.broker_dir)
        self.port = int(self.broker.bootstrap_servers.rsplit(":", 1)[1])
        self.bootstrap = self.broker.bootstrap_servers
        create_topic(self.bootstrap, self.topic, 3)
        self.airflow_home = root / "airflow"
        airflow_local.migrate(airflow_local.environment(self.airflow_home))
        self.pipeline = Pipeline(root, self.name, self.topic, self.bootstrap, self.airflow_home)
        # Each run's `airflow dags test` is forked from a warm server (Airflow imported and its in-process
        # execution API built once), as the integration tests' runs are: a "task" fault SIGKILLs the
        # forked command's own pid, which leaves its children alone as for a real process.
        self.warm = self.pipeline.warm = WarmAirflow(self.pipeline.environment())
        self.server = _cmdline(self.warm.pid)
        self.lake, self.var = self.pipeline.lake, self.pipeline.var
        self.results: list[FaultResult] = []
        #: Faults since the last :meth:`settle`, and when their first round started.
        self._unsettled: list[FaultResult] = []
        self._started: float | None = None
        self.last_duplicates = self.last_losses = 0
        self.producer = Producer(self.bootstrap, self.topic, random.Random(seed + 1))
        self.write_pipeline(None)

    # -- set-up --

    def write_pipeline(self, cluster: dict | None) -> None:
        """The soak pipeline's file, with ``cluster`` as its cluster section (``None``: the defaults, which run
        its backlogs in local mode)."""
        # Maintenance (OPTIMIZE, VACUUM, checkpoints) every few runs, so faults also land in and around it.
        # 250 records a micro-batch: a faulted run's backlog (a few hundred) makes several commits, so a
        # commit_gap fault drawn for the run's second commit finds one.
        self.pipeline.write(**({"cluster": cluster} if cluster else {}), transform=ORDERS_TRANSFORM, kafka={
            "connection_id": "kafka_default", "topics": [self.topic], "max_offsets_per_trigger": 250},
            maintenance={"every_runs": MAINTENANCE_EVERY})  # fmt: skip

    def close(self) -> None:
        self.producer.close()
        for pid in soak_processes(self.var, self.server):
            _kill(pid)
        self.warm.stop()
        self.broker.stop()

    # -- the scheduler's part --

    def running_runs(self) -> list[str]:
        with sqlite3.connect(self.airflow_home / "airflow.db", timeout=60) as db:
            rows = db.execute("SELECT run_id FROM dag_run WHERE dag_id = ? AND state IN ('running', 'queued')",
                              (self.name,)).fetchall()  # fmt: skip
        return [r[0] for r in rows]

    def fail_dead_run(self, run_id: str) -> None:
        """Mark a run whose process was killed failed, as the scheduler's task heartbeat timeout would."""
        with sqlite3.connect(self.airflow_home / "airflow.db", timeout=60) as db:
            db.execute("UPDATE task_instance SET state = 'failed' WHERE dag_id = ? AND run_id = ? AND state IN "
                       "('running', 'queued', 'scheduled', 'up_for_reschedule', 'up_for_retry', 'deferred')",
                       (self.name, run_id))  # fmt: skip
            db.execute("UPDATE dag_run SET state = 'failed' WHERE dag_id = ? AND run_id = ?", (self.name, run_id))

    # -- the broker --

    def bounce_broker(self, hard: bool, down_s: float) -> None:
        self.broker = bounce(self.broker, self.broker_dir, self.port, hard=hard, down_s=down_s)

    # -- one fault --

    def run_round(self, step: int, kinds: list[str], *, settle: bool = True) -> list[FaultResult]:
        """One faulted run carrying ``kinds`` (see :func:`rounds`), then, with ``settle``, :meth:`settle`.

        Without ``settle`` the faults stack: the next faulted run starts from
        whatever this one left (a dead run's lock, a half-written checkpoint,
        a batch committed to bronze but not to Spark's checkpoint), and one
        later :meth:`settle` recovers from them all and checks.
        """
        self._started = self._started or time.monotonic()
        rng = random.Random(self.seed * 1000 + step)
        self.write_pipeline(STANDALONE if set(kinds) & CLUSTER_FAULTS or rng.random() < 0.1 else None)
        results = [FaultResult(kind, step, injected=False, detail="") for kind in kinds]
        self.producer.resume(self.round_records)
        time.sleep(rng.uniform(0.5, 1.5))  # so the run finds a backlog and does not skip
        try:
            if kinds == ["lock_holder"]:
                self._lock_holder_round(rng, results[0])
            else:
                self._run_with_faults(rng, results)
        finally:
            self.producer.pause()
        self._unsettled += results
        if settle:
            self.settle(step, rng)
        else:
            self.log(f"soak round {step}: " + "; ".join(
                f"{r.kind} {'injected' if r.injected else 'missed'} ({r.detail})" for r in results))  # fmt: skip
        return results

    def settle(self, step: int, rng: random.Random | None = None) -> None:
        """The runs that recover from every fault since the last check, then the checks.

        Three times in four (:attr:`recovery_bounce`) the broker is also bounced
        during the first recovery run: a run must live through a bounce, or fail
        cleanly and be followed by one that recovers.
        """
        rng = rng or random.Random(self.seed * 1000 + step)
        self.write_pipeline(None)
        in_recovery = ([FaultResult("broker", step, injected=False, detail="", during="recovery run")]
                       if rng.random() < self.recovery_bounce else [])  # fmt: skip
        results, self._unsettled = self._unsettled + in_recovery, []
        runs = self.recover(results, in_recovery, rng)
        problems = self.check()
        seconds, self._started = time.monotonic() - (self._started or time.monotonic()), None
        for r in results:
            r.runs_to_recover, r.seconds = runs, seconds
            r.problems += problems
            r.duplicates, r.losses = self.last_duplicates, self.last_losses
        self.results += results
        self.log(f"soak round {step}: " + "; ".join(
            f"{r.kind} {'injected' if r.injected else 'missed'} ({r.detail})" for r in results)
            + f"; {runs} runs to recover; {seconds:.0f}s; {'; '.join(problems) or 'exact'}")  # fmt: skip

    def _run_with_faults(self, rng: random.Random, results: list[FaultResult]) -> tuple[int, Path]:
        """Run once and inject each fault of ``results`` at its random moment, from one watching loop.

        A kind may come more than once: each executor kill takes an executor
        not killed before (Spark starts a new one), and a broker bounce waits
        for the one before it to end. Each fault's detail ends with the run's
        exit code. Returns the run's exit code and log; without faults it is a
        plain run.
        """
        proc, log = self.pipeline.start()
        t0 = time.monotonic()
        bronze_log = self.lake / self.name / "bronze" / "_delta_log"
        silver = self.lake / self.name / "silver"
        seen = {"bronze": _files(bronze_log, "*.json"), "silver": _files(silver, "*.parquet")}
        pending: list[tuple[FaultResult, dict]] = []
        early = self.early_companions
        for r in results:
            if r.kind in ("driver", "executor", "worker", "master"):
                life = {"driver": 25, "executor": 2 if early else 10, "worker": 25, "master": 25}[r.kind]
                spec = {"after": rng.uniform(0, life), "first_seen": None}
            elif r.kind in ("task", "broker"):
                latest = 4 if early and r.kind == "broker" else 20
                spec = {"at": rng.uniform(1, latest), "hard": rng.random() < 0.5, "down": rng.uniform(0.5, 8)}
            else:  # commit_gap: the first or second new commit of the run; merge: its first data file
                spec = {"nth": rng.randrange(0, 2) if r.kind == "commit_gap" else 0}
            pending.append((r, spec))
        procs: dict[int, tuple[str, str]] = {}
        killed: set[int] = set()
        last_scan = 0.0
        bounce: threading.Thread | None = None
        while proc.poll() is None and pending:
            now = time.monotonic()
            if now - last_scan > 0.1:
                procs, last_scan = soak_processes(self.var, self.server), now
            for item in list(pending):
                r, spec = item
                kind = r.kind
                if kind in ("driver", "executor", "worker", "master"):
                    pids = [pid for pid, (k, _) in procs.items() if k == kind and pid not in killed]
                    if pids and spec["first_seen"] is None:
                        spec["first_seen"] = now
                    if pids and now - spec["first_seen"] >= spec["after"]:
                        r.injected = any([_kill(pid) for pid in pids])
                        killed.update(pids)
                        r.detail = f"{kind} {pids} {spec['after']:.1f}s after it started"
                        pending.remove(item)
                elif kind == "task" and now - t0 >= spec["at"]:
                    r.injected = _kill(proc.pid)
                    r.detail = f"dags test pid {proc.pid} at {spec['at']:.1f}s"
                    proc.wait()
                    for run_id in self.running_runs():
                        self.fail_dead_run(run_id)
                    pending.remove(item)
                elif kind == "broker" and now - t0 >= spec["at"] and (bounce is None or not bounce.is_alive()):
                    bounce = threading.Thread(target=self.bounce_broker, args=(spec["hard"], spec["down"]))
                    bounce.start()
                    r.injected = True
                    r.detail = (f"{'killed' if spec['hard'] else 'stopped'} at {now - t0:.1f}s, "
                                f"down {spec['down']:.1f}s")  # fmt: skip
                    pending.remove(item)
                elif kind in ("commit_gap", "merge"):
                    folder, pattern, key = ((bronze_log, "*.json", "bronze") if kind == "commit_gap"
                                            else (silver, "*.parquet", "silver"))  # fmt: skip
                    new = _files(folder, pattern) - seen[key]
                    if len(new) > spec["nth"]:
                        # The scan of up to 0.1 s ago: a fresh walk of /proc would only delay the kill.
                        drivers = [pid for pid, (k, _) in procs.items() if k == "driver"]
                        r.injected = any([_kill(pid) for pid in drivers])
                        r.detail = f"driver {drivers} on {sorted(new)[-1]}"
                        pending.remove(item)
            time.sleep(0.01)
        for r, _ in pending:
            r.detail = "the run ended first"
        code = self._finish(proc, log)
        if bounce is not None:
            bounce.join()
        for r in results:
            r.detail += f"; run exit {code}{why_failed(log) if code else ''}"
        return code, log

    def _finish(self, proc: subprocess.Popen | WarmCommand, log: Path, timeout_s: float = 600) -> int:
        """The run's exit code; a run still going after ``timeout_s`` is stopped and fails the soak with
        what its log says (the log itself lives in the test's temporary folder, gone on a CI machine)."""
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            if isinstance(proc, WarmCommand):
                proc.give_up()  # its stacks into its log: where a hung run stood
            else:
                _kill(proc.pid)
            raise RunHung(f"DAG run {log.name} did not end within {timeout_s:.0f}s; what its log says:\n"
                          f"{log_digest(log)}") from None  # fmt: skip
        # No soak run is under way once this one ended. A run the database still calls running was left so by a
        # `dags test` that ended without finishing it (a crash of its own): it would hold the pipeline's lock
        # for ever, as a run on a lost worker would until the scheduler's heartbeat timeout failed it.
        for run_id in self.running_runs():
            self.fail_dead_run(run_id)
            self.log(f"soak: {log.name} ended (exit {code}) and left run {run_id} marked running; marked failed "
                     f"as the scheduler would. What its log says:\n{log_digest(log, tail=30)}")  # fmt: skip
        return code

    def _lock_holder_round(self, rng: random.Random, result: FaultResult) -> None:
        holder, holder_log = self.pipeline.start()
        lock = self.pipeline.lake / self.name / "_lock"  # tables.lock_path's default
        run_id = None
        deadline = time.monotonic() + 120
        while holder.poll() is None and time.monotonic() < deadline and run_id is None:
            run_id = (run_lock.holder(lock) or {}).get("run_id")
            if run_id is None:
                time.sleep(0.05)
        if run_id is None:
            result.detail = f"the holder never took the lock; exit {self._finish(holder, holder_log)}"
            return
        waiter, waiter_log = self.pipeline.start()
        delay = rng.uniform(0.5, 20)
        try:
            holder.wait(delay)
            result.detail = f"the holder ended before {delay:.1f}s"
        except subprocess.TimeoutExpired:
            result.injected = _kill(holder.pid)
            holder.wait()
            self.fail_dead_run(run_id)
            result.detail = f"holder {run_id} killed after {delay:.1f}s"
        code = self._finish(waiter, waiter_log)
        result.detail += f"; the waiting run's exit {code}{why_failed(waiter_log) if code else ''}"

    # -- recovery and checks --

    def recover(self, results: list[FaultResult], faults: list[FaultResult], rng: random.Random,
                limit: int = 4) -> int:  # fmt: skip
        """Runs until one succeeds (the producer is paused, so that one has caught up); how many it took.

        ``faults`` are injected into the first of them; only that run may fail
        for them. Any other failed run is a problem of every fault of the round.
        """
        for n in range(1, limit + 1):
            injected = faults if n == 1 else []
            code, log = self._run_with_faults(rng, injected)
            if code == 0:
                return n
            if any(f.injected for f in injected):
                continue
            for r in results:
                r.problems.append(f"recovery run {n} failed{why_failed(log)}, log {log}")
        return limit

    def check(self) -> list[str]:
        """Everything against an independent read-committed read of the topic; the problems found."""
        problems, self.last_duplicates, self.last_losses = exact_problems(self.bootstrap, self.topic,
                                                                          self.lake / self.name, self.name)  # fmt: skip
        # Runs that found nothing new are skipped (continuity "not checked"); the newest run that read
        # something must have succeeded with its offsets continuous.
        runs = run_ledger.read_runs(self.lake / self.name / "_runs")
        newest = next((r for r in runs if r["outcome"] != "skipped"), None)
        if newest is None or (newest["outcome"], newest["continuity"]) != ("success", "CONTINUOUS"):
            problems.append(f"ledger: the last run that read records is "
                            f"{newest and (newest['outcome'], newest['continuity'])}")  # fmt: skip

        left = soak_processes(self.var, self.server)
        if left:
            problems.append(f"processes left: {[(pid, k, c[:120]) for pid, (k, c) in left.items()]}")
            for pid in left:
                _kill(pid)
        return problems

    # -- the report --

    def report(self) -> str:
        rows: dict[str, list[FaultResult]] = defaultdict(list)
        for r in self.results:
            rows[r.kind if r.during == "faulted run" else f"{r.kind} ({r.during})"].append(r)
        lines = [f"fault soak: seed {self.seed}, {len(self.results)} faults, "
                 f"{sum(r.injected for r in self.results)} injected, {self.pipeline.runs} DAG runs",
                 f"{'fault':<22} {'count':>5} {'injected':>8} {'runs to recover':>16} {'duplicates':>10} "
                 f"{'losses':>6} {'problems':>8}"]  # fmt: skip
        for kind in sorted(rows, key=lambda k: (list(FAULTS).index(k.split()[0]), k)):
            rs = rows[kind]
            recover = Counter(r.runs_to_recover for r in rs)
            lines.append(f"{kind:<22} {len(rs):>5} {sum(r.injected for r in rs):>8} "
                         f"{', '.join(f'{n}x{c}' for n, c in sorted(recover.items())):>16} "
                         f"{sum(r.duplicates for r in rs):>10} {sum(r.losses for r in rs):>6} "
                         f"{sum(bool(r.problems) for r in rs):>8}")  # fmt: skip
        lines.append(f"producer: {dict(self.producer.sent)}; send errors during bounces: {len(self.producer.errors)}")
        rows_ = run_ledger.read_runs(self.lake / self.name / "_runs")
        done = Counter(name for r in rows_ for name, t in ((r.get("maintenance_json") or {}).get("tables") or {}).items()
                       if isinstance(t, dict) and "files_before" in t)  # fmt: skip
        lines.append(f"maintenance (every {MAINTENANCE_EVERY} runs): tables maintained by {dict(sorted(done.items()))} "
                     "runs; every check after them passed or is listed above")  # fmt: skip
        return "\n".join(lines)


def exact_problems(bootstrap: str, topic: str, table: Path, name: str) -> tuple[list[str], int, int]:
    """Bronze, silver, quarantine and the consumer group of pipeline ``name`` (tables under ``table``) against an
    independent read-committed read of ``topic``: (the problems found, bronze's duplicates, its losses)."""
    from deltalake import DeltaTable

    problems: list[str] = []
    records = read_committed(bootstrap, topic)
    bronze = DeltaTable(str(table / "bronze")).to_pyarrow_table(columns=["partition", "offset"])
    got = Counter(zip(bronze.column("partition").to_pylist(), bronze.column("offset").to_pylist(), strict=True))
    want = {(p, o) for p, o, _, _ in records}
    duplicates = sum(n - 1 for n in got.values() if n > 1)
    losses = len(want - set(got))
    extra = set(got) - want
    if duplicates or losses or extra:
        problems.append(f"bronze: {duplicates} duplicates, {losses} lost, "
                        f"{len(extra)} not in the topic, e.g. {sorted(want - set(got))[:3]}")  # fmt: skip

    silver = DeltaTable(str(table / "silver")).to_pyarrow_table(
        columns=["order_id", "_deleted", "event_time", "_kafka_partition", "_kafka_offset"]).to_pylist()
    keys = Counter(r["order_id"] for r in silver)
    if any(n > 1 for n in keys.values()):
        problems.append(f"silver: keys held twice: {[k for k, n in keys.items() if n > 1][:5]}")
    expected = newest_per_key(records)
    actual = {r["order_id"]: (r["_deleted"], r["_kafka_partition"], r["_kafka_offset"]) for r in silver}
    want_silver = {k: (v[0], v[2], v[3]) for k, v in expected.items()}
    if actual != want_silver:
        wrong = sorted(k for k in set(actual) | set(want_silver) if actual.get(k) != want_silver.get(k))
        problems.append(f"silver: {len(wrong)} keys differ from the newest per key, e.g. "
                        f"{[(k, actual.get(k), want_silver.get(k)) for k in wrong[:3]]}")  # fmt: skip

    quarantine = DeltaTable(str(table / "quarantine")).to_pyarrow_table(columns=["partition", "offset"])
    q = Counter(zip(quarantine.column("partition").to_pylist(), quarantine.column("offset").to_pylist(),
                    strict=True))  # fmt: skip
    bad = {(p, o) for p, o, _, v in records if v is not None and is_bad(v)}
    if any(n > 1 for n in q.values()) or set(q) != bad:
        problems.append(f"quarantine: {sum(n - 1 for n in q.values())} duplicates, "
                        f"{len(bad - set(q))} missing, {len(set(q) - bad)} not bad")  # fmt: skip

    ends = {p: high for p, (_, high) in watermarks(bootstrap, topic).items()}
    group = {p: n for (_, p), n in kafka_state.group_offsets(
        {"bootstrap.servers": bootstrap}, f"kafka-delta-elt.{name}", [(topic, p) for p in ends]).items()}  # fmt: skip
    if group != ends:
        problems.append(f"consumer group: {group}, topic ends {ends}")
    return problems, duplicates, losses


class RunHung(AssertionError):
    """A soak DAG run that did not end in time; the message carries what its log says."""


def why_failed(log: Path) -> str:
    """A failed run's reason as its log states it (``record_run``'s summary line), for a fault's detail:
    ``": <reason>"``, or nothing when the log has none."""
    lines = [ln for ln in airflow_local.summary_lines("\n".join(_lines(log))) if ln.startswith("record_run:")]
    return f": {lines[-1].removeprefix('record_run: ')[:400]}" if lines else ""


def log_digest(log: Path, tail: int = 80) -> str:
    """A run's log in short: each task's start, end and summary, then its last ``tail`` lines (where a run
    given up on has its stacks)."""
    lines = _lines(log)
    marked = [ln[:300] for ln in lines if ln.startswith(("SUMMARY ", "check_request:")) or "[DAG TEST] " in ln]
    return "\n".join([*marked[-60:], f"-- the last {tail} lines --", *(ln[:500] for ln in lines[-tail:])])


def _lines(log: Path) -> list[str]:
    try:
        return log.read_text(errors="replace").splitlines()
    except OSError:
        return []


def bounce(broker: local_kafka.LocalBroker, data_dir: Path, port: int, *, hard: bool,
           down_s: float) -> local_kafka.LocalBroker:  # fmt: skip
    """Kill (``hard``) or stop ``broker``, wait ``down_s``, and start it again on its folder and port; the new one."""
    if hard:
        _kill(broker.pid)
        while local_kafka.status(data_dir) is not None:
            time.sleep(0.05)
    else:
        broker.stop()
    time.sleep(down_s)
    return local_kafka.start(data_dir, port=port)


def _files(folder: Path, pattern: str) -> set[str]:
    try:
        return {p.name for p in folder.glob(pattern)}
    except OSError:
        return set()


def _time(tick: int) -> str:
    return (datetime(2026, 3, 1, tzinfo=UTC) + timedelta(seconds=tick)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def retry_missed(plan: list[list[str]], step: int, results: list[FaultResult], wanted: set[str]) -> bool:
    """Plan each fault of round ``step`` that missed and whose kind never hit, alone, right after it.

    A fault misses when its run ends first (a broker bounce of the same run
    failed it, say); waiting for the kind's next turn in the shuffled cycle
    would cost a whole cycle of rounds. A retry carries no companion that
    could end its run first, and draws its own moment (each step has its own
    random stream). Returns whether it planned one.
    """
    missed = [r.kind for r in results if not r.injected and r.kind in wanted and r.during == "faulted run"]
    for kind in reversed(list(dict.fromkeys(missed))):
        plan.insert(step + 1, [kind])
    return bool(missed)


def smoke_rounds(seed: int) -> list[list[str]]:
    """The fault smoke: each kind once, in as few faulted runs as the kinds allow.

    One run per run-ending kind and the lock holder's two runs, in an order
    the seed shuffles; the two kinds a run may live through ride along, the
    broker bounce with the first run that ends by a fault outside the cluster
    and the executor kill with the first that ends by one inside it, so no
    run is spent on them alone. A companion that misses (its run ended
    first) is retried alone by :func:`retry_missed`.
    """
    leading = [k for k in FAULTS if k in ENDS_RUN or k == "lock_holder"]
    random.Random(seed).shuffle(leading)
    plan = [[kind] for kind in leading]
    for companion, ridden_by in (("broker", ENDS_RUN - CLUSTER_FAULTS), ("executor", ENDS_RUN & CLUSTER_FAULTS)):
        next(run for run in plan if run[0] in ridden_by).append(companion)
    return plan


def rounds(seed: int, faults: int, only: list[str] | None = None) -> list[list[str]]:
    """The soak's faulted runs, each a list of fault kinds: at least ``faults`` faults in all.

    Each run gets one fault that ends it (driver, task, commit gap, MERGE,
    worker, master) or the lock holder's kill (two runs of its own), taken
    in turn from a list shuffled per cycle, so every kind comes up; a run
    that ends by a fault also gets three to five of the faults a run may
    live through (a broker bounce, an executor killed), drawn at random, a
    kind possibly more than once.
    ``only`` restricts the kinds.
    """
    kinds = list(only or FAULTS)
    unknown = sorted(set(kinds) - set(FAULTS))
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; expected some of {', '.join(FAULTS)}")
    rng = random.Random(seed)
    leading = [k for k in kinds if k in ENDS_RUN or k == "lock_holder"]
    companions = [k for k in kinds if k not in leading]
    out: list[list[str]] = []
    cycle: list[str] = []
    while sum(map(len, out)) < faults:
        if not cycle:
            cycle = leading[:] or [""]
            rng.shuffle(cycle)
        first = cycle.pop()
        if first == "lock_holder":
            out.append([first])
            continue
        extra = [rng.choice(companions) for _ in range(rng.choice([3, 4, 5]))] if companions else []
        out.append([k for k in (first, *extra) if k])
    return out
