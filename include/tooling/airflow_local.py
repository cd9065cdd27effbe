"""An embedded Airflow for the demo, the tests and the benchmark: SQLite, this project's DAGs.

``airflow dags test`` runs a real DAG run (every task, in order, with XComs,
trigger rules and setup/teardown) without a scheduler; ``airflow standalone``
with the same environment serves the UI on the same metadata database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from include import settings

if TYPE_CHECKING:
    from include.tooling.warm_airflow import WarmAirflow, WarmCommand


def environment(home: Path, *, kafka_bootstrap: str | None = None, pipelines_dir: Path | None = None,
                extra: Mapping[str, str] | None = None) -> dict[str, str]:  # fmt: skip
    """Environment for Airflow commands: its home, this project's DAG folder and the Kafka connection."""
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(settings.PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(settings.PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        # SQLite lets one writer in at a time; a command arriving while `airflow standalone`'s scheduler
        # writes waits up to 30 s (Python's default of 5 s is overrun on a loaded small machine, and
        # `airflow backfill create` then fails with "database is locked").
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}?timeout=30",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # `airflow standalone` starts its components as `airflow ...` from PATH.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join(p for p in (str(settings.PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p),
    })  # fmt: skip
    if kafka_bootstrap:
        env["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}
        )
    if pipelines_dir is not None:
        env["KDE_PIPELINES_DIR"] = str(pipelines_dir)
    env.update(extra or {})
    return env


def airflow_command(*args: str) -> list[str]:
    """``airflow <args>`` with this interpreter's Airflow."""
    return [str(Path(sys.executable).with_name("airflow")), *args]


def migrate(env: Mapping[str, str]) -> None:
    """Create or upgrade the metadata database."""
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(airflow_command("db", "migrate"), env=dict(env), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def _dags_test_command(dag_id: str, conf: Mapping | None) -> list[str]:
    args = ["dags", "test", dag_id]
    if conf:
        args += ["-c", json.dumps(dict(conf))]
    return airflow_command(*args)


def dags_test(env: Mapping[str, str], dag_id: str, conf: Mapping | None = None, *,
              log_file: Path | None = None, timeout_s: float = 900,
              warm: WarmAirflow | None = None) -> subprocess.CompletedProcess:  # fmt: skip
    """Run one DAG run with ``airflow dags test``; returns the process (exit 1 when the run failed).

    ``warm``: fork the command from this warm server when it accepts ``env``
    (:mod:`include.tooling.warm_airflow`); its output is then in ``log_file`` and ``stdout``.
    """
    command = _dags_test_command(dag_id, conf)
    if warm is not None and log_file is not None and warm.accepts(env):
        return warm.completed(command[1:], env, log_file=log_file, timeout_s=timeout_s)
    proc = subprocess.run(command, env=dict(env), capture_output=True, text=True, timeout=timeout_s)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text(proc.stdout + proc.stderr)
    return proc


def start_dags_test(env: Mapping[str, str], dag_id: str, conf: Mapping | None = None, *, log_file: Path,
                    warm: WarmAirflow | None = None) -> subprocess.Popen | WarmCommand:  # fmt: skip
    """Start one DAG run with ``airflow dags test`` in the background, its output going to ``log_file``.

    ``warm``: fork it from this warm server when it accepts ``env``; the :class:`WarmCommand` returned
    is handled like the process (``pid``, ``poll``, ``wait``, ``returncode``).
    """
    if warm is not None and warm.accepts(env):
        return warm.start(_dags_test_command(dag_id, conf)[1:], env, log_file=log_file)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("wb") as out:
        return subprocess.Popen(_dags_test_command(dag_id, conf), env=dict(env), stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip


def summary_lines(output: str) -> list[str]:
    """The one-line ``SUMMARY`` each task prints, in the order they ran."""
    lines = []
    for line in output.splitlines():
        if "SUMMARY " in line:
            lines.append(line.split("SUMMARY ", 1)[1].strip())
    return lines


def start_standalone(env: Mapping[str, str], *, port: int, log_file: Path) -> subprocess.Popen:
    """``airflow standalone`` (scheduler, DAG processor, triggerer, API server; LocalExecutor) on ``port``.

    Runs in its own process group, so :func:`stop_standalone` stops every
    component and the task processes it started.
    """
    return _start_server(env, ("standalone",), port=port, log_file=log_file)


def start_api_server(env: Mapping[str, str], *, port: int, log_file: Path) -> subprocess.Popen:
    """``airflow api-server`` alone (UI, REST API and plugins, no scheduler) on 127.0.0.1:``port``.

    Stop it with :func:`stop_standalone`; wait for it with :func:`wait_until_serving`.
    """
    return _start_server(env, ("api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
                         port=port, log_file=log_file)  # fmt: skip


#: The Airflow components a deployment runs, each its own process: what ``airflow standalone`` starts in one.
COMPONENTS = ("api-server", "dag-processor", "scheduler", "triggerer")


def start_component(env: Mapping[str, str], component: str, *, port: int, log_file: Path) -> subprocess.Popen:
    """One Airflow component (:data:`COMPONENTS`) on its own, with the LocalExecutor, all of them reaching the API
    server on 127.0.0.1:``port``: what a test that restarts the scheduler mid-run starts one by one.

    Stop it with :func:`stop_standalone`; wait for the API server with :func:`wait_until_serving`.
    """
    if component not in COMPONENTS:
        raise ValueError(f"unknown Airflow component {component!r}; expected one of {', '.join(COMPONENTS)}")
    if component == "api-server":
        return start_api_server(env, port=port, log_file=log_file)
    return _start_server(env, (component,), port=port, log_file=log_file)


def _start_server(env: Mapping[str, str], args: tuple[str, ...], *, port: int, log_file: Path) -> subprocess.Popen:
    env = dict(env)
    env.update({
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    })  # fmt: skip
    log_file.parent.mkdir(parents=True, exist_ok=True)
    out = log_file.open("ab")
    return subprocess.Popen(airflow_command(*args), env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip


def wait_until_serving(proc: subprocess.Popen, port: int, *, timeout_s: float = 180, log_file: Path | None = None) -> None:
    """Wait until the API server on ``port`` answers its health endpoint; raise if it exits or never does."""
    import time
    import urllib.request

    # No proxies: urlopen would send 127.0.0.1 through an http_proxy of the environment (urllib
    # bypasses only what no_proxy lists), and the server would never seem to answer.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            tail = log_file.read_text()[-3000:] if log_file and log_file.exists() else ""
            raise RuntimeError(f"the Airflow API server exited with {proc.returncode} before serving:\n{tail}")
        try:
            with opener.open(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Airflow API server did not answer on port {port} within {timeout_s:.0f}s")
        time.sleep(1)


def stop_standalone(proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """Stop what :func:`start_standalone` started (SIGTERM to the group, then SIGKILL)."""
    import os
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout_s)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        pass
    try:  # task processes and Spark clusters the components left behind
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def login_environment(folder: Path, user: str, password: str, role: str = "admin") -> dict[str, str]:
    """Settings for Airflow's simple auth manager with one user (its passwords file written in ``folder``)."""
    folder.mkdir(parents=True, exist_ok=True)
    passwords = folder / "simple-auth-passwords.json"
    passwords.write_text(json.dumps({user: password}))
    passwords.chmod(0o600)
    return {
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{user}:{role}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
    }


class AirflowApi:
    """Airflow's REST API (v2) on ``127.0.0.1:port``, as a user of the simple auth manager.

    What the scheduler tests, the soak and the Compose test drive a running Airflow with: trigger runs,
    unpause DAGs, read runs and task instances (with their try numbers) as the UI shows them.
    """

    def __init__(self, port: int, user: str, password: str, *, host: str = "127.0.0.1") -> None:
        self.root = f"http://{host}:{port}"
        self._login = {"username": user, "password": password}
        self._token: str | None = None

    def request(self, method: str, path: str, body: object = None, *, timeout: float = 60,
                token: bool = True) -> tuple[int, object]:  # fmt: skip
        """``method path`` with ``body`` as JSON; (HTTP status, the answer's JSON or text). Never raises on a status."""
        import urllib.error
        import urllib.request

        headers = {"Content-Type": "application/json"} if body is not None else {}
        if token:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.root + path, data=data, headers=headers, method=method)
        # No proxies (see wait_until_serving).
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=timeout) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def token(self) -> str:
        """A JWT from ``POST /auth/token``, asked once."""
        if self._token is None:
            status, answer = self.request("POST", "/auth/token", self._login, token=False)
            if status not in (200, 201) or not isinstance(answer, dict):
                raise RuntimeError(f"Airflow refused the login of {self._login['username']!r}: {status} {answer}")
            self._token = str(answer["access_token"])
        return self._token

    def _ok(self, method: str, path: str, body: object = None) -> dict:
        status, answer = self.request(method, path, body)
        if status >= 300 or not isinstance(answer, dict):
            raise RuntimeError(f"{method} {path} answered {status}: {str(answer)[:2000]}")
        return answer

    def wait_for_dag(self, dag_id: str, *, timeout_s: float = 180) -> dict:
        """The DAG once the DAG processor has parsed it."""
        import time

        deadline = time.monotonic() + timeout_s
        while True:
            status, answer = self.request("GET", f"/api/v2/dags/{dag_id}")
            if status == 200 and isinstance(answer, dict):
                return answer
            if time.monotonic() > deadline:
                raise RuntimeError(f"DAG {dag_id!r} did not appear within {timeout_s:.0f}s: {status} {answer}")
            time.sleep(2)

    def unpause(self, dag_id: str, *, paused: bool = False) -> None:
        """Let the scheduler run ``dag_id``'s runs (``paused=True``: stop it creating new ones)."""
        self._ok("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})

    def trigger(self, dag_id: str, conf: dict | None = None, *, run_id: str | None = None) -> tuple[int, object]:
        """``POST /api/v2/dags/{dag_id}/dagRuns`` (a manual run, no logical date); (status, answer)."""
        body: dict[str, object] = {"logical_date": None, "conf": conf or {}}
        if run_id:
            body["dag_run_id"] = run_id
        return self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)

    def runs(self, dag_id: str) -> list[dict]:
        """Every run of ``dag_id``, oldest first."""
        answer = self._ok("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=run_after&limit=1000")
        return list(answer.get("dag_runs") or [])

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict]:
        """The run's task instances by task id (``state``, ``try_number``, ...)."""
        import urllib.parse

        answer = self._ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances")
        return {ti["task_id"]: ti for ti in answer.get("task_instances") or []}

    def wait_for_run(self, dag_id: str, run_id: str, *, timeout_s: float = 900) -> dict:
        """The run once it has ended (``success`` or ``failed``)."""
        import time
        import urllib.parse

        deadline = time.monotonic() + timeout_s
        while True:
            run = self._ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")
            if run.get("state") in ("success", "failed"):
                return run
            if time.monotonic() > deadline:
                raise RuntimeError(f"run {run_id} of {dag_id} did not end within {timeout_s:.0f}s: {run.get('state')}")
            time.sleep(3)
