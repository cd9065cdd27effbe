"""docker-compose.yaml started for real, under Podman: from nothing to two exact scheduled runs and back down.

A tier of its own (``make test-compose``; marker ``compose_stack``), as neither ``make test`` nor
``make test-all`` has the time for it. What it does, in order:

1. builds every image here (``tests/compose_stack/podman.py``): a Debian 12 base with debootstrap,
   stand-ins for the public Postgres, Kafka, Spark and Airflow images, and the project's image from
   ``docker/airflow.Dockerfile`` with the stand-in passed as its base; checks the project's image holds
   no ``.venv``, ``.cache`` or ``include/tooling``;
2. starts the stack with Debian's ``docker-compose`` (1.29) on ``podman system service``, with
   ``docker/compose.host-network.yaml`` (no DNS between containers here) and a small override of its
   own: the example pipeline files, ``orders_local_standalone`` given a two-minute schedule;
3. runs the health checks itself (there is no systemd for Podman's timers) until every service is
   healthy, then runs the guide's own commands to create the topic and produce the demo's orders;
4. unpauses ``orders_local_standalone`` and lets the stack's scheduler run it twice, more orders arriving
   between the runs; checks bronze and silver with delta-rs on the lakehouse volume against Kafka and
   the producer's counts, the monitoring JSON with a token, and the page in Chromium;
5. triggers ``orders_existing_master``, whose jobs run on the stack's Spark master and worker;
6. ``down -v``: no container or volume of the stack is left.

What this proves and what it does not (Compose's bridge network, the public images themselves) is in
docs/docker-compose.md.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from include import settings
from include.readers import run_ledger
from include.readers.kafka_admin import watermarks
from include.tooling import airflow_local
from include.tooling.demo import produce_orders
from tests.compose_stack import podman as pm
from tests.requirements_pins import requirement_pin

pytestmark = [pytest.mark.integration, pytest.mark.compose_stack]

ROOT = settings.PROJECT_ROOT
GUIDE = ROOT / "docs" / "docker-compose.md"
PROJECT = "kdecompose"
SCHEDULED, EXISTING = "orders_local_standalone", "orders_existing_master"
TOPIC = "demo.orders"
#: The Kafka listener the stack publishes for clients outside it, and the API server (host network).
EXTERNAL_KAFKA, API_PORT, SPARK_MASTER_UI = "localhost:9094", 8080, 8090
ADMIN = ("admin", "admin")
ARTEFACTS = ROOT / "var" / "test-artifacts" / "compose"
LATER_ORDERS = 2000


def log(message: str) -> None:
    print(f"[compose {time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Stack:
    """The running stack: Podman, its compose command, the REST API and what the test measured."""

    podman: pm.Podman
    compose: Callable[..., subprocess.CompletedProcess]
    api: airflow_local.AirflowApi
    health: pm.HealthChecker
    work: Path
    built: pm.Built
    timings: dict[str, float]
    disk_before: int

    def volume(self, name: str) -> Path:
        out = self.podman.run("volume", "inspect", "--format", "{{.Mountpoint}}", f"{PROJECT}_{name}", quiet=True)
        return Path(out.stdout.decode().strip())

    def lake(self, pipeline: str, table: str) -> str:
        return str(self.volume("lakehouse") / pipeline / table)

    def ledger(self, pipeline: str) -> list[dict]:
        return run_ledger.read_runs(self.lake(pipeline, "_runs"))


def _test_override(work: Path) -> Path:
    """The example pipeline files, the local_standalone one on a two-minute schedule, in every Airflow service."""
    pipelines = work / "pipelines"
    pipelines.mkdir(parents=True, exist_ok=True)
    for name in (SCHEDULED, EXISTING):
        data = yaml.safe_load((ROOT / "docker" / "pipelines" / f"{name}.yaml").read_text())
        if name == SCHEDULED:
            data["schedule"] = "*/2 * * * *"
        (pipelines / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    pipelines.chmod(0o755)
    for f in pipelines.iterdir():
        f.chmod(0o644)
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    airflow = [n for n, s in compose["services"].items() if s.get("image") == pm.PROJECT_IMAGE]
    override = {"services": {n: {"environment": {"KDE_PIPELINES_DIR": "/opt/kde-test/pipelines"},
                                 "volumes": [f"{pipelines}:/opt/kde-test/pipelines:ro"]} for n in airflow}}  # fmt: skip
    path = work / "compose.test.yaml"
    path.write_text(yaml.safe_dump(override))
    return path


def _resolved(podman: pm.Podman, files: list[Path], variables: dict[str, str], work: Path) -> Path:
    """The files merged by Compose itself (``config``), less the published ports.

    Podman's Docker API refuses port bindings on the host network (Docker's discards them with a
    warning), and an override cannot remove a list Compose 1.29 merges; the ports bind on the host
    anyway.
    """
    merged = yaml.safe_load(pm.compose_command(podman, PROJECT, files, variables)("config").stdout)
    for service in merged["services"].values():
        service.pop("ports", None)
    path = work / "compose.resolved.yaml"
    path.write_text(yaml.safe_dump(merged, sort_keys=False))
    return path


def _sent(counts: dict[str, int]) -> int:
    """The records a producer's answer says it sent (its ``bad <field>`` keys break ``bad`` down again)."""
    return sum(v for k, v in counts.items() if not k.startswith("bad "))


def _guide_commands() -> list[list[str]]:
    """The guide's "To try them" commands (create the topic, produce the orders), as argument lists."""
    text = GUIDE.read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.DOTALL) if "--create --topic" in b)
    joined = re.sub(r"\\\n\s*", " ", block)
    commands = [shlex.split(line) for line in joined.splitlines() if line.startswith("docker compose ")]
    assert len(commands) == 2, f"{GUIDE.name}: expected the topic and the producer commands, got {commands}"
    # Debian's docker-compose (1.29) allocates a terminal for exec unless told not to; Compose v2 does not.
    return [[c[2], "-T", *c[3:]] if c[2] == "exec" else c[2:] for c in commands]


def _wait_healthy(stack_health: pm.HealthChecker, services: set[str], timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        status = dict(stack_health.status)
        if all(status.get(s) == "healthy" for s in services):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not healthy within {timeout_s:.0f}s: {status}")
        time.sleep(5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    missing = pm.missing_tools()
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: make container-tools installs them")
    work = tmp_path_factory.mktemp("compose")
    podman = pm.Podman(log=log)
    disk_before = podman.disk_bytes()
    timings: dict[str, float] = {}
    started = time.monotonic()
    built = pm.build_images(podman, work / "build")
    timings["images"] = time.monotonic() - started
    log(f"images built or reused in {timings['images']:.0f}s: {built.seconds}")
    service = podman.serve()
    files = [ROOT / "docker-compose.yaml", ROOT / "docker" / "compose.host-network.yaml", _test_override(work)]
    compose = pm.compose_command(podman, PROJECT, [_resolved(podman, files, built.variables, work)], built.variables)
    health = pm.HealthChecker(podman, PROJECT)
    health.start()
    api = airflow_local.AirflowApi(API_PORT, *ADMIN, host="127.0.0.1")
    s = Stack(podman, compose, api, health, work, built, timings, disk_before)
    try:
        started = time.monotonic()
        compose("up", "-d", "--no-build", timeout=1800)
        timings["up"] = time.monotonic() - started
        yield s
    finally:
        logs = compose("logs", "--no-color", "--tail", "300", check=False)
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        (ARTEFACTS / "compose-logs.txt").write_text(logs.stdout + logs.stderr)
        compose("down", "-v", "--remove-orphans", check=False, timeout=600)
        health.stop()
        pm.stop_exec_monitors(health.seen)
        service.terminate()
        service.wait(timeout=60)
        podman.run("container", "prune", "--force", check=False)
        podman.run("image", "prune", "--force", check=False, timeout=1800)
        log(f"disk under Podman's storage: {podman.disk_bytes() / 2**30:.1f} GiB after pruning "
            f"({disk_before / 2**30:.1f} GiB before the test); timings {timings}")  # fmt: skip


def test_the_project_image_holds_no_dev_files_and_runs_the_pinned_airflow(stack):
    found = pm.image_paths(stack.podman, pm.PROJECT_IMAGE, "/opt/kde/.venv", "/opt/kde/.cache",
                           "/opt/kde/include/tooling", "/opt/kde/include/spark/jvm_deps.py",
                           "/opt/kde/dags/kafka_pipelines.py", "/opt/kde-cache/jars")  # fmt: skip
    assert found == {"/opt/kde/.venv": False, "/opt/kde/.cache": False, "/opt/kde/include/tooling": False,
                     "/opt/kde/include/spark/jvm_deps.py": True, "/opt/kde/dags/kafka_pipelines.py": True,
                     "/opt/kde-cache/jars": True}  # fmt: skip
    out = stack.podman.run("run", "--rm", "--network", "host", pm.PROJECT_IMAGE, "version").stdout.decode()
    assert out.strip().splitlines()[-1] == requirement_pin("apache-airflow"), out


def test_every_service_becomes_healthy_and_the_init_completes(stack):
    started = time.monotonic()
    services = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())["services"]
    long_running = {n for n, s in services.items() if s.get("restart") != "no"}
    _wait_healthy(stack.health, long_running)
    stack.timings["healthy"] = time.monotonic() - started + stack.timings["up"]
    inspect = stack.podman.run("ps", "--all", "--filter", "label=com.docker.compose.service=airflow-init",
                               "--filter", f"label=com.docker.compose.project={PROJECT}", "--format", "json")  # fmt: skip
    (init,) = json.loads(inspect.stdout)
    assert init["State"] == "exited" and init["ExitCode"] == 0, init
    # The secrets airflow-init generated are the Airflow uid's alone.
    secrets = stack.volume("kde-var") / "secrets"
    modes = {p.name: (p.stat().st_uid, oct(p.stat().st_mode & 0o777)) for p in secrets.iterdir()}
    assert modes == {n: (50000, "0o400") for n in ("jwt_secret", "api_secret_key", "fernet_key")}, modes


def test_the_stack_scheduler_runs_the_pipeline_twice_and_the_tables_are_exact(stack):
    api, compose = stack.api, stack.compose
    topic_cmd, produce_cmd = _guide_commands()
    compose(*topic_cmd, timeout=300)
    produced = compose(*produce_cmd, timeout=900).stdout.strip().splitlines()[-1]
    first = ast.literal_eval(produced)
    log(f"the guide's producer: {first}")
    api.wait_for_dag(SCHEDULED, timeout_s=300)
    started = time.monotonic()
    api.unpause(SCHEDULED)
    run1 = _next_scheduled_success(api, SCHEDULED, after=set())
    (row1,) = [r for r in stack.ledger(SCHEDULED) if r["run_id"] == run1["dag_run_id"]]
    assert row1["rows"] == _sent(first), "the first run read the guide's orders"
    second = produce_orders(EXTERNAL_KAFKA, LATER_ORDERS, _sent(first), topic=TOPIC)
    marks = watermarks(EXTERNAL_KAFKA, TOPIC)
    in_kafka = sum(high - low for low, high in marks.values())
    assert in_kafka == _sent(first) + _sent(second)
    # A run the scheduler queued while the first ran may start before the later orders are in: the
    # scheduled runs go on until the ledger holds the topic, each of them a success.
    ended = {run1["dag_run_id"]}
    while sum(r["rows"] for r in stack.ledger(SCHEDULED)) < in_kafka:
        assert len(ended) < 5, f"{len(ended)} scheduled runs and the ledger still short: {stack.ledger(SCHEDULED)}"
        ended.add(_next_scheduled_success(api, SCHEDULED, after=ended)["dag_run_id"])
    stack.timings["scheduled runs"] = time.monotonic() - started
    api.unpause(SCHEDULED, paused=True)
    _wait_no_active_run(api, SCHEDULED)

    from deltalake import DeltaTable

    bronze = DeltaTable(stack.lake(SCHEDULED, "bronze")).to_pyarrow_table(columns=["partition", "offset"])
    keys = list(zip(bronze.column("partition").to_pylist(), bronze.column("offset").to_pylist(), strict=True))
    assert len(keys) == len(set(keys)) == in_kafka, "bronze holds every record once"
    runs = stack.ledger(SCHEDULED)
    by_id = {r["run_id"]: r for r in runs}
    reading = [by_id[i] for i in ended if by_id[i]["rows"]]
    assert len(reading) == 2, f"the guide's orders, then the later ones: {runs}"
    for row in runs:  # a run that found nothing new is skipped before it checks continuity
        assert (row["outcome"], row["continuity"]) in {("success", "CONTINUOUS"), ("skipped", "not checked")}, row
    assert sum(r["rows"] for r in runs) == in_kafka
    transformed = [r for r in runs if r["outcome"] == "success"]  # a skipped run has no transform counts
    assert all(r["silver_read"] is None for r in runs if r["outcome"] == "skipped"), runs
    read = sum(r["silver_read"] for r in transformed)
    accounted = sum(r["silver_upserted"] + r["silver_deleted"] + r["quarantined"] + r["superseded"]
                    for r in transformed)  # fmt: skip
    assert read == accounted == in_kafka
    quarantine = DeltaTable(stack.lake(SCHEDULED, "quarantine")).to_pyarrow_table(columns=["partition"])
    assert quarantine.num_rows == first["bad"] + second["bad"], "the spoiled orders, and only they"
    silver = DeltaTable(stack.lake(SCHEDULED, "silver")).to_pyarrow_table(columns=["order_id"])
    ids = silver.column("order_id").to_pylist()
    assert len(ids) == len(set(ids)) > 0


def _next_scheduled_success(api: airflow_local.AirflowApi, dag_id: str, *, after: set[str],
                            timeout_s: float = 1200) -> dict:  # fmt: skip
    """The next scheduled run (not one of ``after``) once it has ended; it must have succeeded."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for run in api.runs(dag_id):
            if run["run_type"] == "scheduled" and run["dag_run_id"] not in after and run["state"] in ("success", "failed"):
                assert run["state"] == "success", (run, api.task_instances(dag_id, run["dag_run_id"]))
                log(f"{dag_id}: scheduled run {run['dag_run_id']} succeeded")
                return run
        time.sleep(5)
    raise AssertionError(f"no scheduled run of {dag_id} ended within {timeout_s:.0f}s: {api.runs(dag_id)}")


def _wait_no_active_run(api: airflow_local.AirflowApi, dag_id: str, timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while any(r["state"] in ("queued", "running") for r in api.runs(dag_id)):
        assert time.monotonic() < deadline, f"a run of {dag_id} still active after {timeout_s:.0f}s"
        time.sleep(5)


def test_the_monitoring_json_with_a_token_and_the_page_in_a_browser(stack):
    status, answer = stack.api.request("GET", "/kde-monitor/api/pipelines")
    assert status == 200, answer
    listed = {p["pipeline"]: p for p in answer["pipelines"]}
    assert set(listed) == {SCHEDULED, EXISTING}
    snap = listed[SCHEDULED]
    assert snap["kafka"]["ok"] is True, snap["kafka"]
    assert snap["lag"]["records"] == 0, snap["lag"]
    ledger = stack.ledger(SCHEDULED)
    assert sorted(r["run_id"] for r in snap["runs"]) == sorted(r["run_id"] for r in ledger), snap["runs"]
    assert {r["outcome"] for r in snap["runs"]} <= {"success", "skipped"}, snap["runs"]
    newest = snap["runs"][0]
    status, answer = stack.api.request("GET", "/kde-monitor/api/pipelines", token=False)
    assert status == 401, answer

    from selenium.webdriver.common.by import By

    from include.tooling.browser import browser, wait_for

    driver = browser(stack.work / "chromium")
    try:
        driver.get(f"http://127.0.0.1:{API_PORT}/kde-monitor/")
        wait_for(driver, "input[name=username], input#username")
        driver.find_element(By.CSS_SELECTOR, "input[name=username], input#username").send_keys(ADMIN[0])
        driver.find_element(By.CSS_SELECTOR, "input[type=password]").send_keys(ADMIN[1])
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        row = wait_for(driver, f"tr[data-pipeline='{SCHEDULED}']", timeout=60)
        assert newest["outcome"] in row.text and f"{newest['rows']:,} rows" in row.text, (newest, row.text)
        lag = driver.find_element(By.CSS_SELECTOR, f"tr[data-pipeline='{SCHEDULED}'] [data-col=lag]").text
        assert lag.startswith("0 records"), lag
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTEFACTS / "overview.png"))
    finally:
        driver.quit()


def test_the_existing_master_pipeline_runs_on_the_stack_spark_master(stack):
    api = stack.api
    api.wait_for_dag(EXISTING, timeout_s=300)
    api.unpause(EXISTING)
    started = time.monotonic()
    status, answer = api.trigger(EXISTING, run_id="on-the-stack-master")
    assert status == 200, answer
    run = api.wait_for_run(EXISTING, "on-the-stack-master", timeout_s=1200)
    stack.timings["existing_master run"] = time.monotonic() - started
    assert run["state"] == "success", api.task_instances(EXISTING, "on-the-stack-master")
    (row,) = stack.ledger(EXISTING)
    in_kafka = sum(high - low for low, high in watermarks(EXTERNAL_KAFKA, TOPIC).values())
    assert (row["outcome"], row["continuity"], row["rows"]) == ("success", "CONTINUOUS", in_kafka), row
    # The jobs were applications of the stack's master, run by its worker.
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{SPARK_MASTER_UI}/json/", timeout=30) as resp:
        master = json.loads(resp.read())
    # One application per run: the run's steps share one driver (spark_jobs/run_steps.py).
    apps = [(a["name"], a["state"]) for a in master.get("completedapps") or []]
    assert apps == [(f"run:{EXISTING}", "FINISHED")], apps
    assert master["aliveworkers"] == 1


def test_down_removes_every_container_and_volume(stack):
    stack.compose("down", "-v", "--remove-orphans", timeout=600)
    left = stack.podman.run("ps", "--all", "--filter", f"label=com.docker.compose.project={PROJECT}", "--format",
                            "json").stdout  # fmt: skip
    assert json.loads(left or b"[]") == []
    volumes = stack.podman.run("volume", "ls", "--format", "{{.Name}}").stdout.decode().split()
    assert not [v for v in volumes if v.startswith(f"{PROJECT}_")], volumes
