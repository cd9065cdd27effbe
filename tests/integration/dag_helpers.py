"""A test pipeline: its file, its tables and how to run its DAG (``airflow dags test``)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import yaml

from include.readers import run_ledger
from include.spark import cluster_state, leftovers
from include.tooling import airflow_local, local_kafka
from include.tooling.warm_airflow import WarmAirflow, WarmCommand
from tests.processes import processes_naming

ORDERS_TRANSFORM = {
    "schema": {
        "order_id": {"type": "string", "required": True},
        "amount": {"type": "decimal(10,2)", "required": True, "minimum": 0},
        "event_time": {"type": "timestamp", "required": True},
    },
    "key": "order_id",
    "ordering": "event_time",
    "tombstones": "delete",
    "new_fields": "add",
}


#: The transient standalone cluster with local mode off: every run starts it. Tests of the cluster itself
#: (a run from start to teardown, teardown after a killed driver, credentials reaching executors, the
#: transform on an executor) use it; the scale-out test sets its own two workers. Every other test
#: pipeline has no cluster section: the defaults run its small backlogs in local mode inside the driver.
STANDALONE = {"profile": "local_standalone", "workers": 1, "worker_cores": 1, "worker_memory": "512m",
              "local_max_records": 0}  # fmt: skip


def order_at_10h(order_id: str, minute: int, amount: float, **extra) -> bytes:
    """An order event (JSON) as :data:`ORDERS_TRANSFORM` expects it, at 10:<minute> on 2026-03-01 (``minute``
    0 to 59), of ``amount``; ``extra`` adds fields. The in-process job tests' orders count their minutes from
    midnight instead: :func:`tests.integration.job_helpers.order_after_t0`."""
    return json.dumps({"order_id": order_id, "amount": amount,
                       "event_time": f"2026-03-01T10:{minute:02d}:00Z", **extra}).encode()  # fmt: skip


class Pipeline:
    """One pipeline of a test: its file, its tables and how to run its DAG."""

    def __init__(self, root: Path, name: str, topic: str, bootstrap: str, airflow_home: Path,
                 warm: WarmAirflow | None = None) -> None:  # fmt: skip
        self.name, self.topic, self.bootstrap = name, topic, bootstrap
        #: :meth:`run` forks its ``airflow dags test`` from this warm server (see include/tooling/warm_airflow.py).
        self.warm = warm
        self.dir = root / "pipelines"
        self.lake = root / "lake"
        self.var = root / "var"
        self.dir.mkdir(parents=True)
        self.airflow_home = airflow_home
        self.runs = 0
        self.write()

    def write(self, **changes) -> None:
        data = {
            "name": self.name,
            "kafka": {"connection_id": "kafka_default", "topics": [self.topic], "max_offsets_per_trigger": 400},
            "schedule": None,
            "lag": {"min_records": 1, "max_wait_minutes": 1},
            "data_loss_policy": "fail",
            "retries": 0,
            "tags": ["test"],
        }
        data.update(changes)
        (self.dir / f"{self.name}.yaml").write_text(yaml.safe_dump(data))

    def environment(self, **env: str) -> dict[str, str]:
        """The environment of this pipeline's Airflow commands, with ``env`` added."""
        return airflow_local.environment(
            self.airflow_home, kafka_bootstrap=self.bootstrap, pipelines_dir=self.dir,
            extra={"KDE_LAKEHOUSE_ROOT": str(self.lake), "KDE_VAR_DIR": str(self.var), **env},
        )  # fmt: skip

    def run(self, conf: dict | None = None, **env: str):
        """One DAG run with ``airflow dags test`` (``conf``: the trigger form's params); (process, log)."""
        self.runs += 1
        log = self.var / f"dag-run-{self.runs}.log"
        proc = airflow_local.dags_test(self.environment(**env), self.name, conf, log_file=log, warm=self.warm)
        return proc, log.read_text()

    def start(self, **env: str) -> tuple[subprocess.Popen | WarmCommand, Path]:
        """Start one DAG run (``airflow dags test``, with ``env`` added) in the background, forked from
        :attr:`warm` when set; (the process or forked command, its log file)."""
        self.runs += 1
        log = self.var / f"dag-run-{self.runs}.log"
        return airflow_local.start_dags_test(self.environment(**env), self.name, log_file=log, warm=self.warm), log

    def ledger(self) -> list[dict]:
        return run_ledger.read_runs(self.lake / self.name / "_runs")

    def bronze_keys(self) -> list[tuple[int, int]]:
        return bronze_keys_of(self.lake / self.name / "bronze")

    def run_dirs(self) -> list[Path]:
        root = self.var / "runs" / self.name
        return sorted(root.iterdir()) if root.exists() else []


def assert_ok(proc, log: str) -> None:
    """A DAG run (what :meth:`Pipeline.run` returns) succeeded; if not, the message is its log's end."""
    assert proc.returncode == 0, log[-6000:]



def files_holding(root: Path, needles: tuple[str, ...]) -> list[str]:
    """Files under ``root`` whose bytes hold one of ``needles`` (a secret's leak scan): ``"<file> holds <needle>"``."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path} holds {n!r}" for n in needles if n.encode() in data]
    return found


def bronze_keys_of(path: Path | str, storage_options: dict[str, str] | None = None) -> list[tuple[int, int]]:
    """Every (partition, offset) row of the bronze table at ``path``, duplicates kept."""
    from deltalake import DeltaTable

    table = DeltaTable(str(path), storage_options=storage_options).to_pyarrow_table(columns=["partition", "offset"])
    return list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))


def group_lags(bootstrap: str, group: str) -> dict[int, str]:
    proc = local_kafka.run_kafka_tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    assert proc.returncode == 0, proc.stderr
    lags = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[0] == group:
            lags[int(parts[2])] = parts[5]
    return lags


def assert_no_cluster_left(p: Pipeline) -> None:
    """No process of any run's cluster or job is left, nor the stopped clusters' scratch (the executors'
    copies of the jars, ``local/``, ``tmp/``) or the drivers' (``scratch/``): a run folder keeps logs and
    state only."""
    for folder in p.run_dirs():
        assert cluster_state.running_processes(folder / "cluster") == []
        scratch = [f for f in (folder / "cluster").glob("worker-*/*/*/*") if f.name not in leftovers.EXECUTOR_LOGS]
        scratch += [d for d in (folder / "cluster" / "local", folder / "cluster" / "tmp") if d.exists()]
        assert scratch == [], f"the teardown left its cluster's scratch in {folder}"
        assert not (folder / "scratch").exists(), f"a job task left its driver's scratch in {folder}"
    assert processes_naming(p.var) == [], "a Spark process of this test is still running"


#: The Airflow connection a :class:`StorePipeline` reaches its store with.
STORE_CONNECTION = "aws_test"


class StorePipeline(Pipeline):
    """A test pipeline whose lakehouse is ``<bucket>/lake`` on the server."""

    def __init__(self, root: Path, name: str, topic: str, bootstrap: str, airflow_home: Path, warm, server) -> None:
        self.server = server
        self.bucket = server.create_bucket(f"lake-{uuid.uuid4().hex[:10]}")
        self.uri = f"{self.bucket}/lake"
        self.connection = json.dumps(server.connection())
        super().__init__(root, name, topic, bootstrap, airflow_home, warm=warm)

    def write(self, **changes) -> None:
        tables = {"lakehouse_root": self.uri, "storage_connection_id": STORE_CONNECTION, **changes.pop("tables", {})}
        super().write(tables=tables, **changes)

    def environment(self, **env: str) -> dict[str, str]:
        return super().environment(**{f"AIRFLOW_CONN_{STORE_CONNECTION.upper()}": self.connection, **env})

    @property
    def options(self) -> dict[str, str]:
        """delta-rs options for the server."""
        return self.server.settings().object_store_options()

    def table(self, name: str):
        from deltalake import DeltaTable

        return DeltaTable(f"{self.uri}/{self.name}/{name}", storage_options=self.options)

    def ledger(self) -> list[dict]:
        return run_ledger.read_runs(f"{self.uri}/{self.name}/_runs", storage_options=self.options)

    def bronze_keys(self) -> list[tuple[int, int]]:
        return bronze_keys_of(f"{self.uri}/{self.name}/bronze", self.options)

    def listing(self, *parts: str) -> list[str]:
        """The names directly under ``<lake>/<pipeline>/<parts>/``, listed through the server's S3 API (objects
        and the prefixes that group others, not the empty marker object Hadoop's S3A writes for a folder), sorted."""
        import obstore
        from obstore.store import from_url

        from include.contract.locations import comparable

        config, client = self.server.settings().obstore_args()
        # comparable(): the s3:// spelling of the s3a:// location, as obstore names the scheme
        store = from_url(comparable("/".join([self.uri, self.name, *parts])), config=config, client_options=client)
        answer = obstore.list_with_delimiter(store)
        prefixes = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in answer["common_prefixes"]]
        objects = [str(o["path"]).rsplit("/", 1)[-1] for o in answer["objects"]]
        return sorted(prefixes + [name for name in objects if name])  # not the folder's own S3A marker




class HdfsPipeline(Pipeline):
    """A test pipeline whose lakehouse is ``<folder>/lake`` on the session's HDFS; no connection reaches it (the
    NameNode is in the URI)."""

    def __init__(self, root: Path, name: str, topic: str, bootstrap: str, airflow_home: Path, warm, server) -> None:
        self.server = server
        self.uri = f"{server.uri}/{uuid.uuid4().hex[:10]}/lake"
        super().__init__(root, name, topic, bootstrap, airflow_home, warm=warm)

    def write(self, **changes) -> None:
        super().write(tables={"lakehouse_root": self.uri, **changes.pop("tables", {})}, **changes)

    @property
    def options(self) -> None:
        """delta-rs needs no options for an ``hdfs://host:port`` URI."""
        return None

    def table(self, name: str):
        from deltalake import DeltaTable

        return DeltaTable(f"{self.uri}/{self.name}/{name}")

    def ledger(self) -> list[dict]:
        return run_ledger.read_runs(f"{self.uri}/{self.name}/_runs")

    def bronze_keys(self) -> list[tuple[int, int]]:
        return bronze_keys_of(f"{self.uri}/{self.name}/bronze")

    def listing(self, *parts: str) -> list[str]:
        """The names directly under ``<lake>/<pipeline>/<parts>/``, listed through the NameNode, sorted."""
        from hdfs_native import Client

        folder = "/".join([self.uri, self.name, *parts])
        path = "/" + folder.split("://", 1)[1].split("/", 1)[1]
        try:
            return sorted(s.path.rsplit("/", 1)[-1] for s in Client(self.server.uri).list_status(path))
        except FileNotFoundError:
            return []
