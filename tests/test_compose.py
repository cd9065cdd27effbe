"""docker-compose.yaml kept in step with the project, without a Docker engine.

No engine runs where these tests run, so the compose stack itself is never
started here. Instead each test pins one fact the stack depends on to its
source of truth: image versions to ``requirements.txt``, ``constraints.txt``
and ``include/settings.py``; connection addresses to the listeners and ports
the services actually use (resolved with the project's own
``include.readers.connections``); shared paths to the volumes behind them; the
service list to ``docs/docker-compose.md``.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from include import settings
from include.config import load_pipelines
from include.readers import connections
from include.settings import LAKEHOUSE_ROOT_ENV
from tests.requirements_pins import requirement_pin

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yaml"
DOC = ROOT / "docs" / "docker-compose.md"
AIRFLOW_DOCKERFILE = ROOT / "docker" / "airflow.Dockerfile"
HOST_NETWORK = ROOT / "docker" / "compose.host-network.yaml"

#: Services the stack is useless without; the guide and the file must both name them.
CORE_SERVICES = {
    "postgres",
    "kafka",
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "spark-master",
    "spark-worker",
}
#: The Airflow 3 component each long-running Airflow service runs.
AIRFLOW_COMPONENTS = {
    "airflow-api-server": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
AIRFLOW_SERVICES = {"airflow-init", *AIRFLOW_COMPONENTS}
SPARK_SERVICES = ("spark-master", "spark-worker")
PROJECT_FOLDERS = ("dags", "plugins", "include", "spark_jobs")
#: Debian's docker-compose package ships the Compose specification's JSON schema.
COMPOSE_SPEC_SCHEMAS = (Path("/usr/lib/python3/dist-packages/compose/config/compose_spec.json"),)
EXACT_VERSION = re.compile(r"\d+\.\d+\.\d+(?:-|$)")
#: Images whose releases have two-part versions (PostgreSQL since 10: 17.9 is a patch release).
EXACT_VERSION_BY_REPO = {"postgres": re.compile(r"\d+\.\d+(?:-|$)")}


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The compose file as YAML data (anchors and merge keys resolved, as Compose does)."""
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), "no services mapping"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The compose file's services by name."""
    return compose["services"]


def env_of(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a mapping (Compose accepts a list of ``KEY=VALUE`` too)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def volume_mounts(service: dict[str, Any]) -> dict[str, str]:
    """``{container path: source}`` of a service's short-syntax volume entries."""
    mounts = {}
    for entry in service.get("volumes") or []:
        assert isinstance(entry, str), f"expected short volume syntax, got {entry!r}"
        source, target = entry.split(":")[:2]
        mounts[target] = source
    return mounts


def command_args(service: dict[str, Any]) -> list[str]:
    """A service's command as a list of arguments."""
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(a) for a in command]


def option_value(args: list[str], option: str) -> str:
    """The value after ``option`` in a command line; fails the test when it is missing."""
    assert option in args, f"expected {option} in {args}"
    return args[args.index(option) + 1]


#: ``${KDE_<NAME>_IMAGE:-<default>}``: the public image unless a variable names another (the Podman test does).
IMAGE_VARIABLE = re.compile(r"\$\{(KDE_[A-Z]+_IMAGE):-([^}]+)\}")


def image_of(service: dict[str, Any]) -> str:
    """A service's image as users get it: the default of its ``${KDE_..._IMAGE:-...}`` variable, else as written."""
    match = IMAGE_VARIABLE.fullmatch(str(service["image"]))
    return match.group(2) if match else str(service["image"])


def image_ref(image: str) -> tuple[str, str | None]:
    """``repo:tag`` -> (repo, tag); the tag is None when there is none (a registry port is not a tag)."""
    name = image.split("@", 1)[0]
    repo, sep, tag = name.rpartition(":")
    if not sep or "/" in tag:
        return name, None
    return repo, tag


def dockerfile_args(path: Path) -> dict[str, str]:
    """The defaults of a Dockerfile's ``ARG NAME=default`` lines."""
    return dict(re.findall(r"^\s*ARG\s+(\w+)=(\S+)", path.read_text(), re.IGNORECASE | re.MULTILINE))


def dockerfile_bases(path: Path) -> list[str]:
    """The images of a Dockerfile's ``FROM`` lines, a ``${ARG}`` replaced by the argument's default."""
    args = dockerfile_args(path)
    bases = []
    for line in path.read_text().splitlines():
        match = re.match(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", line, re.IGNORECASE)
        if match:
            bases.append(re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), match.group(1)))
    return bases


def airflow_base_image() -> tuple[str, str]:
    """(Airflow version, Python version) of the project image's base ``apache/airflow:<v>-python<py>``."""
    bases = [b for b in dockerfile_bases(AIRFLOW_DOCKERFILE) if image_ref(b)[0] == "apache/airflow"]
    assert len(bases) == 1, f"expected one apache/airflow base image, got {bases}"
    match = re.fullmatch(r"(\d+\.\d+\.\d+)-python(\d+\.\d+)", image_ref(bases[0])[1] or "")
    assert match, f"expected apache/airflow:<version>-python<major.minor>, got {bases[0]}"
    return match.group(1), match.group(2)


def locked_python() -> str:
    """The Python major.minor ``constraints.txt`` was locked on (its header says; else this interpreter)."""
    header = ROOT.joinpath("constraints.txt").read_text().splitlines()[0]
    match = re.search(r"Python (\d+\.\d+)", header)
    return match.group(1) if match else f"{sys.version_info.major}.{sys.version_info.minor}"


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """Kafka ``NAME://host:port,...`` -> ``{NAME: (host, port)}``."""
    result = {}
    for item in value.split(","):
        match = re.fullmatch(r"\s*([A-Za-z0-9_]+)://([^:]*):(\d+)\s*", item)
        assert match, f"not a Kafka listener: {item!r}"
        result[match.group(1)] = (match.group(2), int(match.group(3)))
    return result


def published(service: dict[str, Any]) -> dict[int, int]:
    """``{container port: host port}`` of a service's short-syntax ``ports``."""
    result = {}
    for entry in service.get("ports") or []:
        parts = str(entry).split(":")
        assert len(parts) in (2, 3), f"expected HOST:CONTAINER, got {entry!r}"
        result[int(parts[-1].split("/")[0])] = int(parts[-2])
    return result


def connection_from_env(value: str) -> SimpleNamespace:
    """An ``AIRFLOW_CONN_*`` JSON value as the attributes ``include.readers.connections`` reads."""
    data = json.loads(value)
    return SimpleNamespace(
        conn_type=data.get("conn_type"),
        host=data.get("host"),
        port=data.get("port"),
        extra_dejson=data.get("extra") or {},
    )


def documented_services() -> list[str]:
    """The service names in the first column of the guide's "Services" table."""
    text = DOC.read_text()
    section = re.search(r"^## Services\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert section, f"{DOC.name} has no '## Services' section"
    return re.findall(r"^\|\s*`([^`]+)`\s*\|", section.group(1), re.MULTILINE)


def one_shot(service: dict[str, Any]) -> bool:
    """A service that runs to completion (never restarted) rather than serving."""
    return str(service.get("restart", "no")) == "no"


# --------------------------------------------------------------------------- the file itself


def test_compose_file_parses_with_known_top_level_keys(compose: dict[str, Any]) -> None:
    allowed = {"services", "volumes", "networks", "configs", "secrets", "name"}
    unknown = {k for k in compose if k not in allowed and not str(k).startswith("x-")}
    assert not unknown, f"unknown top-level keys: {sorted(unknown)}"
    assert CORE_SERVICES <= set(compose["services"]), sorted(CORE_SERVICES - set(compose["services"]))


def test_compose_file_validates_against_the_compose_spec_schema(compose: dict[str, Any]) -> None:
    schema_file = next((p for p in COMPOSE_SPEC_SCHEMAS if p.exists()), None)
    if schema_file is None:
        pytest.skip("no Compose specification schema here (apt-get install docker-compose ships one)")
    import jsonschema

    schema = json.loads(schema_file.read_text())
    # Round-trip through JSON: the schema speaks of JSON types, YAML gives ints where Compose takes both.
    errors = sorted(
        jsonschema.Draft201909Validator(schema).iter_errors(json.loads(json.dumps(compose))),
        key=lambda e: list(e.absolute_path),
    )
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:10])


def test_documented_services_are_the_compose_services(services: dict[str, Any]) -> None:
    documented = documented_services()
    assert len(documented) == len(set(documented)), f"a service is listed twice: {documented}"
    assert set(documented) == set(services), (
        f"only in {DOC.name}: {sorted(set(documented) - set(services))}; "
        f"only in docker-compose.yaml: {sorted(set(services) - set(documented))}"
    )
    assert CORE_SERVICES <= set(documented)


def test_every_public_image_can_be_replaced_by_a_variable_whose_default_is_it(services: dict[str, Any]) -> None:
    # A builder with no registry (the Podman test, an air-gapped site) passes images it built itself; what
    # users pull stays the default, pinned by the tests below.
    for name, svc in services.items():
        if "build" in svc:
            continue
        match = IMAGE_VARIABLE.fullmatch(str(svc["image"]))
        assert match, f"{name}: image {svc['image']!r} is not ${{KDE_<NAME>_IMAGE:-<public image>}}"
        assert match.group(1) == f"KDE_{name.split('-')[0].upper()}_IMAGE", f"{name}: variable {match.group(1)}"
    text = AIRFLOW_DOCKERFILE.read_text()
    assert re.search(r"^FROM \$\{AIRFLOW_BASE_IMAGE\}$", text, re.MULTILINE), "the base is not a build argument"
    assert image_ref(dockerfile_args(AIRFLOW_DOCKERFILE)["AIRFLOW_BASE_IMAGE"])[0] == "apache/airflow"
    assert image_of({"image": "${KDE_KAFKA_IMAGE:-apache/kafka:4.3.1}"}) == "apache/kafka:4.3.1"


def test_every_image_is_pinned_to_an_exact_version(services: dict[str, Any]) -> None:
    images = {name: image_of(svc) for name, svc in services.items() if "image" in svc}
    images.update({f"{AIRFLOW_DOCKERFILE.name} FROM": base for base in dockerfile_bases(AIRFLOW_DOCKERFILE)})
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, f"{name}: neither image nor build"
    for where, image in images.items():
        repo, tag = image_ref(image)
        assert tag, f"{where}: {image} has no tag"
        exact = EXACT_VERSION_BY_REPO.get(repo, EXACT_VERSION)
        assert tag != "latest" and exact.match(tag), f"{where}: {image} is not pinned to an exact version"


def test_long_running_services_have_health_checks(services: dict[str, Any]) -> None:
    assert one_shot(services["airflow-init"]), "airflow-init must run once, not restart"
    for name, svc in services.items():
        if one_shot(svc):
            continue
        check = svc.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name}: no health check"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), f"{name}: health check {check['test']!r}"


def test_health_checks_survive_podmans_docker_api(services: dict[str, Any]) -> None:
    # Podman's Docker API (4.3) joins a CMD health check's arguments with spaces and splits them again
    # on whitespace: a `python -c "<one-liner>"` becomes a SyntaxError and `bash -c "<script>"` runs
    # `bash -c exec`, healthy whatever the service does. CMD-SHELL keeps its one string.
    override = yaml.safe_load(HOST_NETWORK.read_text())["services"]
    checks = {f"{COMPOSE_FILE.name}: {n}": s["healthcheck"]["test"] for n, s in services.items() if s.get("healthcheck")}
    checks |= {f"{HOST_NETWORK.name}: {n}": s["healthcheck"]["test"] for n, s in override.items() if s.get("healthcheck")}
    for where, test in checks.items():
        if test[0] == "CMD":
            spaced = [a for a in test[1:] if re.search(r"\s", str(a))]
            assert not spaced, f"{where}: CMD argument(s) with whitespace {spaced}: use CMD-SHELL with one string"
        else:
            assert test[0] == "CMD-SHELL" and len(test) == 2, f"{where}: CMD-SHELL takes one string, got {test!r}"


def test_the_host_network_file_covers_every_service_and_resolves_every_name(services: dict[str, Any]) -> None:
    override = yaml.safe_load(HOST_NETWORK.read_text())["services"]
    assert set(override) == set(services), f"{HOST_NETWORK.name} must put every service on the host network"
    # The names the stack addresses its services by: in settings, commands and the hostname it sets.
    said = json.dumps([[env_of(s), command_args(s), s.get("hostname")] for s in services.values()])
    addressed = {n for n in services if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", said)}
    assert {"postgres", "kafka", "spark-master", "airflow-scheduler"} <= addressed, addressed
    for name, svc in override.items():
        assert svc.get("network_mode") == "host", f"{HOST_NETWORK.name}: {name} is not on the host network"
        hosts = dict(h.split(":", 1) for h in svc.get("extra_hosts") or [])
        assert set(hosts) <= set(services) and set(hosts.values()) == {"127.0.0.1"}, hosts
        unresolved = addressed - set(hosts)
        assert not unresolved, f"{HOST_NETWORK.name}: {name} cannot resolve {sorted(unresolved)}"


def test_the_host_network_file_moves_only_the_spark_master_ui_off_the_api_servers_port(
    services: dict[str, Any],
) -> None:
    # On one network namespace the master's UI (8080 in the container) would take the API server's port;
    # the override moves it and nothing else of the master's command, and its health check follows it.
    master = yaml.safe_load(HOST_NETWORK.read_text())["services"]["spark-master"]
    original, moved = command_args(services["spark-master"]), command_args(master)
    ui_port = option_value(moved, "--webui-port")
    assert ui_port != "8080" and option_value(original, "--webui-port") == "8080"

    def without_ui_port(args: list[str]) -> list[str]:
        at = args.index("--webui-port")
        return args[:at] + args[at + 2 :]

    assert without_ui_port(moved) == without_ui_port(original)
    assert f"/dev/tcp/127.0.0.1/{ui_port} " in master["healthcheck"]["test"][1]
    others = {n: s for n, s in yaml.safe_load(HOST_NETWORK.read_text())["services"].items() if n != "spark-master"}
    assert all(set(s) <= {"network_mode", "extra_hosts"} for s in others.values()), others


def test_depends_on_names_existing_services_with_meetable_conditions(services: dict[str, Any]) -> None:
    graph: dict[str, set[str]] = {}
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        deps = {d: {"condition": "service_started"} for d in deps} if isinstance(deps, list) else deps
        graph[name] = set(deps)
        for dep, spec in deps.items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            condition = spec.get("condition", "service_started")
            if condition == "service_healthy":
                assert services[dep].get("healthcheck"), f"{name} waits for {dep} healthy, which has no check"
            elif condition == "service_completed_successfully":
                assert one_shot(services[dep]), f"{name} waits for {dep} to complete, but it restarts"
            else:
                assert condition == "service_started", f"{name} -> {dep}: unknown condition {condition}"
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"depends_on cycle: {' -> '.join((*path, node))}"
        if node not in done:
            for dep in graph[node]:
                visit(dep, (*path, node))
            done.add(node)

    for name in graph:
        visit(name, ())
    for name in AIRFLOW_COMPONENTS:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"


# --------------------------------------------------------------------------- versions


def test_airflow_image_matches_requirements_and_the_locked_python(services: dict[str, Any]) -> None:
    airflow_version, python_version = airflow_base_image()
    assert airflow_version == requirement_pin("apache-airflow")
    assert airflow_version == requirement_pin("apache-airflow", ROOT / "constraints.txt")
    assert python_version == locked_python()
    for name in AIRFLOW_SERVICES:
        svc = services[name]
        assert svc["build"]["dockerfile"] == "docker/airflow.Dockerfile", name
        assert (ROOT / svc["build"]["context"]).resolve() == ROOT, name
        # The local tag says what it was built from, so `docker images` does not mislead.
        assert image_ref(svc["image"])[1] == f"{airflow_version}-python{python_version}", name


def test_airflow_image_installs_the_locked_requirements_and_the_jars() -> None:
    text = AIRFLOW_DOCKERFILE.read_text()
    assert re.search(r"^COPY\b.*\brequirements\.txt\b.*\bconstraints\.txt\b", text, re.MULTILINE)
    assert re.search(r"pip install\b.*-r\s+\S*requirements\.txt", text)
    # requirements.txt applies the lock itself; the image relies on that line.
    assert "-c constraints.txt" in ROOT.joinpath("requirements.txt").read_text().splitlines()
    assert "python -m include.spark.jvm_deps" in text
    ignore_file = ROOT / "docker" / "airflow.Dockerfile.dockerignore"
    rules = [r.strip() for r in ignore_file.read_text().splitlines() if r.strip() and not r.startswith("#")]
    # Everything is excluded first, so .venv, .cache and var never reach the build context.
    assert rules[0] == "*", rules
    assert not {"!.venv", "!.venv/", "!.cache", "!.cache/", "!var", "!var/"} & set(rules), rules


def dockerignore_excludes(rules: list[str], path: str) -> bool:
    """Whether a ``.dockerignore`` keeps ``path`` (relative, ``/``-separated) out of the build context.

    Docker's rules, as far as this project's file uses them: the last matching rule wins, ``!`` re-includes,
    ``*`` stays within one path segment, ``**`` spans any, and a rule matching a folder covers what is in it.
    """
    excluded = False
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rule.removeprefix("!").strip("/")
        regex = "".join(
            ".*" if part == "**" else "[^/]*" if part == "*" else "[^/]" if part == "?" else re.escape(part)
            for part in re.split(r"(\*\*|\*|\?)", pattern)
        )
        if re.fullmatch(f"{regex}(?:/.*)?", path):
            excluded = not negate
    return excluded


def test_the_airflow_image_ships_no_local_tooling() -> None:
    # include/tooling is dev code (the benchmark, the demo, the CDS archive build that drives the jobs):
    # a scheduler or worker never imports it (tests/test_layers.py), so the image leaves it out.
    ignore_file = ROOT / "docker" / "airflow.Dockerfile.dockerignore"
    rules = [r.strip() for r in ignore_file.read_text().splitlines() if r.strip() and not r.startswith("#")]
    sources = [
        src
        for line in AIRFLOW_DOCKERFILE.read_text().splitlines()
        if re.match(r"(?:COPY|ADD)\s", line)
        for src in [a for a in shlex.split(line)[1:] if not a.startswith("--")][:-1]
    ]
    shipped = {
        str(f.relative_to(ROOT))
        for src in sources
        for f in ([ROOT / src] if (ROOT / src).is_file() else (ROOT / src).rglob("*"))
        if f.is_file() and not dockerignore_excludes(rules, str(f.relative_to(ROOT)))
    }
    assert not sorted(f for f in shipped if f.startswith("include/tooling/")), "the Airflow image copies include/tooling"
    # What the image runs at build time and what the DAGs import still go in.
    assert {"include/spark/jvm_deps.py", "include/orchestration/dag_factory.py", "dags/kafka_pipelines.py"} <= shipped
    # The matcher itself: a folder rule covers its files, the last rule wins, * stays in one segment.
    assert dockerignore_excludes(["*", "!include/", "include/tooling"], "include/tooling/demo.py")
    assert not dockerignore_excludes(["*", "!include/", "include/tooling"], "include/spark/jvm_cds.py")
    assert dockerignore_excludes(["**/__pycache__"], "include/spark/__pycache__/x.pyc")
    assert not dockerignore_excludes(["include/*.py"], "include/spark/jvm_cds.py")


def test_spark_image_matches_pyspark_settings_and_the_airflow_java(services: dict[str, Any]) -> None:
    images = {image_of(services[name]) for name in SPARK_SERVICES}
    assert len(images) == 1, f"master and worker run different images: {images}"
    repo, tag = image_ref(images.pop())
    assert repo == "apache/spark"
    match = re.fullmatch(r"(\d+\.\d+\.\d+)-scala(\d+\.\d+)-java(\d+)-python3-ubuntu", tag or "")
    assert match, f"expected <spark>-scala<x.y>-java<n>-python3-ubuntu, got {tag}"
    spark_version, scala, java = match.groups()
    assert spark_version == requirement_pin("pyspark") == settings.SPARK_VERSION
    assert scala == settings.SCALA_BINARY == "2.13"
    jdk = re.findall(r"openjdk-(\d+)-j(?:re|dk)", AIRFLOW_DOCKERFILE.read_text())
    assert jdk == [java], f"the Airflow image installs OpenJDK {jdk}, the Spark image runs Java {java}"


def test_spark_jobs_need_no_python_on_the_executors() -> None:
    # The Spark image's Python (3.10) differs from the driver's (3.11); that is
    # harmless only while executors never start a Python worker. A function written in Java
    # (registerJavaFunction) runs in the executors' JVM, and so does a py4j call on a JVM object (a LogicalRDD's
    # rdd(), with its parentheses), unlike a Python DataFrame's .rdd property.
    python_on_executors = re.compile(
        r"\budf\b(?!\.registerJavaFunction\b)|pandas_udf|\bmapIn(?:Pandas|Arrow)\b|\bapplyIn(?:Pandas|Arrow)\b|\.rdd\b(?!\()"
        r"|\bforeachPartition\b|\.foreach\(|\bUserDefinedFunction\b|\btransformWithStateInPandas\b"
    )
    found = [
        f"{path.relative_to(ROOT)}:{no}: {line.strip()}"
        for path in sorted(ROOT.joinpath("spark_jobs").rglob("*.py"))
        for no, line in enumerate(path.read_text().splitlines(), 1)
        if python_on_executors.search(line.split("#", 1)[0])
    ]
    assert not found, "code that runs Python on executors (see docs/docker-compose.md):\n" + "\n".join(found)
    assert python_on_executors.search("df.rdd.map(f)") and not python_on_executors.search("q.foreachBatch(f)")
    assert python_on_executors.search("df.rdd") and not python_on_executors.search("plan.rdd().unpersist(False)")
    assert python_on_executors.search('spark.udf.register("f", f)')
    assert not python_on_executors.search('spark.udf.registerJavaFunction("f", "kde.functions.F", "string")')


def test_kafka_image_is_the_broker_version_the_tests_run(services: dict[str, Any]) -> None:
    repo, tag = image_ref(image_of(services["kafka"]))
    assert repo == "apache/kafka"
    assert tag == settings.KAFKA_BROKER_VERSION


# --------------------------------------------------------------------------- connections and ports


def test_kafka_connection_names_the_broker_internal_listener(services: dict[str, Any]) -> None:
    kafka_env = env_of(services["kafka"])
    internal = kafka_env["KAFKA_INTER_BROKER_LISTENER_NAME"]
    advertised = listeners(kafka_env["KAFKA_ADVERTISED_LISTENERS"])
    bound = listeners(kafka_env["KAFKA_LISTENERS"])
    protocols = dict(item.split(":") for item in kafka_env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert internal in advertised and internal in bound
    assert advertised[internal][1] == bound[internal][1], (
        "internal listener advertises another port than it binds"
    )
    for name in AIRFLOW_SERVICES:
        value = env_of(services[name])["AIRFLOW_CONN_KAFKA_DEFAULT"]
        conn = connection_from_env(value)
        assert conn.conn_type == "kafka"
        client = connections.kafka_client_config("kafka_default", get_connection=lambda _id, c=conn: c)
        servers = [s.rsplit(":", 1) for s in client["bootstrap.servers"].split(",")]
        assert [(host, int(port)) for host, port in servers] == [advertised[internal]], name
        assert servers[0][0] in ("kafka", services["kafka"].get("hostname")), name
        # No security settings in the connection: the listener must be plain.
        assert "security.protocol" not in client and protocols[internal] == "PLAINTEXT"


def test_kafka_external_listener_is_published_where_it_advertises(services: dict[str, Any]) -> None:
    kafka_env = env_of(services["kafka"])
    advertised = listeners(kafka_env["KAFKA_ADVERTISED_LISTENERS"])
    bound = listeners(kafka_env["KAFKA_LISTENERS"])
    ports = published(services["kafka"])
    external = [n for n in advertised if n != kafka_env["KAFKA_INTER_BROKER_LISTENER_NAME"]]
    assert external, "no listener for clients outside the compose network"
    for name in external:
        host, port = advertised[name]
        assert host == "localhost" and ports.get(bound[name][1]) == port, (name, advertised[name], ports)
    controller = kafka_env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert controller not in advertised and bound[controller][1] not in ports
    assert kafka_env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"1@kafka:{bound[controller][1]}"


def test_spark_connection_names_the_master_service_and_port(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    master_args = command_args(services["spark-master"])
    assert "org.apache.spark.deploy.master.Master" in master_args
    host, port = option_value(master_args, "--host"), int(option_value(master_args, "--port"))
    assert host == "spark-master" == services["spark-master"].get("hostname", host)
    expected = f"spark://{host}:{port}"
    worker_args = command_args(services["spark-worker"])
    assert worker_args[-1] == expected, "the worker registers with another master"
    for name in AIRFLOW_SERVICES:
        conn = connection_from_env(env_of(services[name])["AIRFLOW_CONN_SPARK_COMPOSE"])
        assert conn.conn_type == "spark"
        monkeypatch.setattr(connections, "_get_connection", lambda _id, c=conn: c)
        assert connections.spark_master("spark_compose") == expected, name


def test_uis_are_published(services: dict[str, Any]) -> None:
    assert 8080 in published(services["airflow-api-server"])
    assert int(option_value(command_args(services["spark-master"]), "--webui-port")) in published(
        services["spark-master"]
    )
    host_ports = [p for svc in services.values() for p in published(svc).values()]
    assert len(host_ports) == len(set(host_ports)), f"a host port is published twice: {sorted(host_ports)}"


# --------------------------------------------------------------------------- paths and volumes


def test_lakehouse_volume_is_at_the_same_path_in_airflow_and_spark(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    roots = {env_of(services[name])[LAKEHOUSE_ROOT_ENV] for name in AIRFLOW_SERVICES}
    assert len(roots) == 1, f"Airflow services disagree on {LAKEHOUSE_ROOT_ENV}: {roots}"
    root = roots.pop()
    assert root.startswith("/"), f"{LAKEHOUSE_ROOT_ENV} must be an absolute container path, got {root}"
    sources = {name: volume_mounts(services[name]).get(root) for name in (*AIRFLOW_SERVICES, *SPARK_SERVICES)}
    assert len(set(sources.values())) == 1, f"{root} is not one volume everywhere: {sources}"
    volume = next(iter(sources.values()))
    assert volume and volume in (compose.get("volumes") or {}), f"{root} must be a named volume, got {volume}"
    # One owner on both sides: the uid airflow-init gives the volume to.
    uid = env_of(services["airflow-init"])["AIRFLOW_UID"]
    for name in SPARK_SERVICES:
        assert str(services[name].get("user", "")).split(":")[0] == uid, name


def test_project_folders_are_mounted_under_one_project_root(services: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES:
        svc, env = services[name], env_of(services[name])
        mounts = {source: target for target, source in volume_mounts(svc).items()}
        targets = {folder: mounts.get(f"./{folder}") for folder in PROJECT_FOLDERS}
        assert all(targets.values()), f"{name}: not mounted: {[f for f, t in targets.items() if not t]}"
        project_root = {str(Path(t).parent) for t in targets.values()}
        assert len(project_root) == 1, f"{name}: folders under different roots: {targets}"
        (project_root,) = project_root
        # include/settings.py finds the project (spark_jobs/, the jars) from include/'s parent.
        for folder, target in targets.items():
            assert target == f"{project_root}/{folder}", name
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == targets["dags"], name
        assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == targets["plugins"], name
        assert project_root in env["PYTHONPATH"].split(":"), name
        assert env["KDE_PIPELINES_DIR"] == mounts.get("./docker", "") + "/pipelines", name


def test_example_pipelines_load_and_use_the_compose_connections(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = env_of(services["airflow-scheduler"])
    monkeypatch.setenv(LAKEHOUSE_ROOT_ENV, env[LAKEHOUSE_ROOT_ENV])
    pipelines, errors = load_pipelines(ROOT / "docker" / "pipelines")
    assert not errors, errors
    profiles = {cfg.cluster.profile for cfg in pipelines.values()}
    assert {"local_standalone", "existing_master"} <= profiles, profiles
    defined = {k.removeprefix("AIRFLOW_CONN_").lower() for k in env if k.startswith("AIRFLOW_CONN_")}
    for cfg in pipelines.values():
        assert cfg.kafka.connection_id in defined, cfg.name
        if cfg.cluster.profile == "existing_master":
            assert cfg.cluster.master_connection_id in defined, cfg.name
        assert cfg.tables.bronze_path.startswith(env[LAKEHOUSE_ROOT_ENV] + "/"), cfg.tables.bronze_path


# --------------------------------------------------------------------------- Airflow's own wiring


def test_airflow_components_share_one_configuration(services: dict[str, Any]) -> None:
    envs = {name: env_of(services[name]) for name in AIRFLOW_SERVICES}
    shared_keys = [k for k in envs["airflow-scheduler"] if k.startswith(("AIRFLOW", "KDE_"))]
    for name, env in envs.items():
        for key in shared_keys:
            assert env.get(key) == envs["airflow-scheduler"][key], (
                f"{name}: {key} differs from the scheduler's"
            )
    env = envs["airflow-scheduler"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert re.search(r"@postgres:5432/", env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    api = re.fullmatch(r"http://([^:/]+):(\d+)/execution/", env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert (
        api
        and api.group(1) == "airflow-api-server"
        and int(api.group(2)) in published(services[api.group(1)])
    )
    for name, component in AIRFLOW_COMPONENTS.items():
        assert command_args(services[name]) == [component], name
    # Every component must read the same JWT secret: from a file on a volume they all mount.
    for key in ("AIRFLOW__API_AUTH__JWT_SECRET_CMD", "AIRFLOW__API__SECRET_KEY_CMD"):
        path = env[key].removeprefix("cat ").strip()
        for name in AIRFLOW_SERVICES:
            assert any(path.startswith(t + "/") for t in volume_mounts(services[name])), f"{name}: {path}"


def test_init_service_runs_the_init_script_from_the_mounted_docker_folder(services: dict[str, Any]) -> None:
    init = services["airflow-init"]
    entrypoint = init["entrypoint"]
    entrypoint = shlex.split(entrypoint) if isinstance(entrypoint, str) else entrypoint
    scripts = [arg for arg in entrypoint if arg.endswith(".sh")]
    assert len(scripts) == 1, entrypoint
    docker_dir = {source: target for target, source in volume_mounts(init).items()}["./docker"]
    assert scripts[0].startswith(docker_dir + "/"), (scripts[0], docker_dir)
    script = ROOT / "docker" / scripts[0].removeprefix(docker_dir + "/")
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert "airflow db migrate" in text
    # The secrets the components read must be the ones the script writes.
    env = env_of(services["airflow-scheduler"])
    for key in (
        "AIRFLOW__API_AUTH__JWT_SECRET_CMD",
        "AIRFLOW__API__SECRET_KEY_CMD",
        "AIRFLOW__CORE__FERNET_KEY_CMD",
    ):
        name = Path(env[key].removeprefix("cat ").strip()).name
        assert re.search(rf"^new_secret {name} ", text, re.MULTILINE), f"{script.name} never writes {name}"
