"""Podman for the Compose test: a configuration of its own, images built here, a Docker API for Compose.

No image registry is reachable where the tests run and there is no Docker engine, so:

- Podman runs with a ``containers.conf``, ``storage.conf`` and ``registries.conf`` this module writes
  under the project's ignored cache folder (``CONTAINERS_CONF`` and friends point at them; ``/etc`` is
  never touched): runc, cgroupfs, the vfs storage driver, no default ulimits (they cannot be set in
  this sandbox), no registry to search;
- every image is built here: a Debian 12 root made with ``debootstrap`` from Debian's archive (the
  host's own apt sources say where that is), then stand-ins for the public images docker-compose.yaml
  names (``images/*.Containerfile``), then the project's own image from ``docker/airflow.Dockerfile``
  with the stand-in Airflow base passed as its build argument;
- ``podman system service`` serves the Docker API that Debian's ``docker-compose`` talks to.

Builds use the host network, the host's extra CA certificates (mounted, never copied into the repo)
and a ``pip.conf`` naming the CA bundle they end up in.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from include import settings
from include.spark import jvm_deps

ROOT = settings.PROJECT_ROOT
IMAGES = Path(__file__).resolve().parent / "images"
#: Podman's configuration, storage and socket: the project's ignored cache folder, so built images are
#: kept for the next run (``make clean-containers`` removes them).
STATE = settings.CACHE_DIR / "containers"
#: The tag docker-compose.yaml gives the project's image (its Airflow services run it, none builds it here).
PROJECT_IMAGE = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())["services"]["airflow-init"]["image"]
#: Every image this module builds is named under it; :func:`remove_stale` untags the ones no longer current.
LOCAL_PREFIX = "localhost/kde-test/"
BASE_IMAGE = f"{LOCAL_PREFIX}debian:bookworm"
#: The stand-ins and the compose variable (or the Dockerfile's build argument) each replaces.
STAND_INS = {
    "airflow-base": "AIRFLOW_BASE_IMAGE",
    "postgres": "KDE_POSTGRES_IMAGE",
    "kafka": "KDE_KAFKA_IMAGE",
    "spark": "KDE_SPARK_IMAGE",
}
SUITE = "bookworm"
TOOLS = ("podman", "runc", "debootstrap", "docker-compose")


class PodmanError(RuntimeError):
    """A Podman, debootstrap or Compose command failed; the message holds the command and its output."""


def missing_tools() -> list[str]:
    """The programs this test needs that are not on PATH (``make container-tools`` installs them)."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def _write_config(state: Path) -> dict[str, str]:
    conf = state / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "containers.conf").write_text(
        "[containers]\n"
        "default_ulimits = []\n"  # the defaults cannot be set in this sandbox
        'log_driver = "k8s-file"\n'
        "[engine]\n"
        'runtime = "runc"\n'  # crun refuses the hybrid cgroup layout here; runc does not
        'cgroup_manager = "cgroupfs"\n'  # no systemd
        'events_logger = "file"\n'
    )
    (conf / "storage.conf").write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{state / "storage"}"\nrunroot = "{state / "run"}"\n'
    )
    (conf / "registries.conf").write_text('unqualified-search-registries = []\nshort-name-mode = "permissive"\n')
    return {
        "CONTAINERS_CONF": str(conf / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(conf / "storage.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(conf / "registries.conf"),
    }


class Podman:
    """The ``podman`` command with this module's configuration; every call is logged to ``log``."""

    def __init__(self, state: Path = STATE, *, log: Callable[[str], None] = print) -> None:
        self.state = state
        self.log = log
        self.env = {**os.environ, **_write_config(state)}
        self.socket = state / "run" / "docker.sock"

    def run(self, *args: str, timeout: float = 600, check: bool = True, stdin: bytes | None = None,
            quiet: bool = False, output: Path | None = None) -> subprocess.CompletedProcess:  # fmt: skip
        """``podman <args>``; raises :class:`PodmanError` with its output when ``check`` and it fails.

        ``output``: a file that gets the command's output too (a build's steps).
        """
        if not quiet:
            self.log("podman " + " ".join(args))
        proc = subprocess.run(["podman", *args], env=self.env, input=stdin, capture_output=True, timeout=timeout)
        if output is not None:
            output.write_bytes(proc.stdout + proc.stderr)
        if check and proc.returncode != 0:
            raise PodmanError(f"podman {' '.join(args)} exited {proc.returncode}:\n"
                              f"{proc.stderr.decode(errors='replace')[-4000:]}")  # fmt: skip
        return proc

    def image_exists(self, ref: str) -> bool:
        return self.run("image", "exists", ref, check=False, quiet=True).returncode == 0

    def image_id(self, ref: str) -> str:
        return self.run("image", "inspect", "--format", "{{.Id}}", ref, quiet=True).stdout.decode().strip()

    def disk_bytes(self) -> int:
        """Bytes under Podman's storage (vfs keeps every layer as a full copy)."""
        out = subprocess.run(["du", "-sb", str(self.state / "storage")], capture_output=True, text=True, check=False)
        return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout else 0

    def serve(self) -> subprocess.Popen:
        """``podman system service`` on :attr:`socket`, the Docker API docker-compose talks to."""
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        log = (self.state / "service.log").open("wb")
        proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{self.socket}"],
                                env=self.env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 60
        while not self.socket.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise PodmanError(f"podman system service did not start: {(self.state / 'service.log').read_text()}")
            time.sleep(0.2)
        return proc


# --------------------------------------------------------------------------- the Debian base


def host_debian_sources() -> tuple[str, list[Path]]:
    """The Debian archive this host's apt uses (for ``debootstrap``) and the sources files naming it.

    Read from the host at run time: the address is the machine's, never written in the repo.
    """
    apt = Path("/etc/apt")
    files = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.sources")),
             *sorted((apt / "sources.list.d").glob("*.list"))]  # fmt: skip
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text()
        for block in re.split(r"\n\s*\n", text):
            uris = re.search(r"^URIs:\s*(\S+)", block, re.MULTILINE)
            suites = re.search(r"^Suites:\s*(.+)$", block, re.MULTILINE)
            if uris and suites and SUITE in suites.group(1).split() and "debian-archive-keyring" in block:
                return uris.group(1), [path]
        line = re.search(rf"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+{SUITE}\s", text, re.MULTILINE)
        if line:
            return line.group(1), [path]
    raise PodmanError(f"no Debian {SUITE} archive in {apt}/sources.list(.d): debootstrap needs one")


def _host_apt_options() -> list[Path]:
    """The host's apt settings about fetching (``Acquire::``): a snapshot archive needs them inside too."""
    folder = Path("/etc/apt/apt.conf.d")
    return [p for p in sorted(folder.glob("*")) if p.is_file() and "Acquire::" in p.read_text(errors="replace")]


def build_debian_base(podman: Podman, work: Path) -> str:
    """``BASE_IMAGE``: Debian 12 (minbase) from ``debootstrap``, with the host's apt sources. Kept once built."""
    if podman.image_exists(BASE_IMAGE):
        return BASE_IMAGE
    mirror, sources = host_debian_sources()
    rootfs = work / "debian-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    podman.log(f"debootstrap --variant=minbase {SUITE} (Debian's archive from the host's apt sources)")
    proc = subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirror],
                          capture_output=True, text=True, timeout=1200)  # fmt: skip
    if proc.returncode != 0:
        raise PodmanError(f"debootstrap failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    for path in sources:
        shutil.copy(path, rootfs / "etc/apt" / path.relative_to("/etc/apt"))
    for path in _host_apt_options():
        shutil.copy(path, rootfs / "etc/apt/apt.conf.d" / path.name)
    tar = subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True, check=True, timeout=600)
    podman.run("import", "--change", 'CMD ["/bin/bash"]', "-", BASE_IMAGE, stdin=tar.stdout, timeout=600)
    shutil.rmtree(rootfs, ignore_errors=True)
    return BASE_IMAGE


# --------------------------------------------------------------------------- images


def _stage(name: str, context: Path) -> None:
    """The build context of stand-in ``name``: its Containerfile, its scripts, and the jars it carries."""
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    prefix = name.split("-")[0]
    for path in IMAGES.iterdir():
        if path.name.startswith(prefix) or (name == "kafka" and path.name == "log4j2.properties"):
            shutil.copy2(path, context / path.name)
    if name == "kafka":
        (context / "libs").mkdir()
        for jar in jvm_deps.resolve("kafka"):
            _link_or_copy(str(jar), str(context / "libs" / jar.name))
    elif name == "spark":
        spark = jvm_deps.pyspark_dir()
        for part in ("bin", "jars"):
            shutil.copytree(spark / part, context / "spark" / part, copy_function=_link_or_copy)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _digest(context: Path, base_id: str) -> str:
    """A tag for a stand-in: its base and what its context holds (names, sizes, small files' bytes)."""
    h = hashlib.sha256(base_id.encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(context)).encode())
        size = path.stat().st_size
        h.update(str(size).encode())
        if size < 1 << 20:
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


@dataclass
class BuildSettings:
    """What every build here is given: the host network, the host's extra CAs, a pip.conf naming them."""

    work: Path
    options: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        pip_conf = self.work / "pip.conf"
        # The bundle update-ca-certificates writes when a build installs ca-certificates, with the
        # mounted extra CAs in it; pip's own bundle would not trust a host that needs those.
        pip_conf.write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\ntimeout = 180\n")
        self.options = ["--network", "host", "--volume", f"{pip_conf}:/etc/pip.conf:ro"]
        extra_ca = Path("/usr/local/share/ca-certificates")
        if extra_ca.is_dir() and any(extra_ca.iterdir()):
            self.options += ["--volume", f"{extra_ca}:{extra_ca}:ro"]


@dataclass
class Built:
    """The images the stack runs, and what building them took."""

    variables: dict[str, str]
    seconds: dict[str, float]


def build_images(podman: Podman, work: Path) -> Built:
    """Every image the stack needs, built here (a stand-in is rebuilt only when its inputs change)."""
    work.mkdir(parents=True, exist_ok=True)
    builds = BuildSettings(work)
    seconds: dict[str, float] = {}
    started = time.monotonic()
    base = build_debian_base(podman, work)
    seconds["debian base"] = time.monotonic() - started
    base_id = podman.image_id(base)
    variables: dict[str, str] = {}
    for name, variable in STAND_INS.items():
        started = time.monotonic()
        context = work / "contexts" / name
        _stage(name, context)
        tag = f"{LOCAL_PREFIX}{name}:{_digest(context, base_id)}"
        if not podman.image_exists(tag):
            podman.run("build", *builds.options, "--build-arg", f"BASE={base}", "--file",
                       str(context / f"{name}.Containerfile"), "--tag", tag, str(context), timeout=1800,
                       output=work / f"{name}.build.log")  # fmt: skip
        variables[variable] = tag
        seconds[name] = time.monotonic() - started
        shutil.rmtree(context, ignore_errors=True)
    started = time.monotonic()
    airflow_base = variables.pop("AIRFLOW_BASE_IMAGE")
    # The build cache is pruned after each test (vfs copies every layer): a tag named after the image's
    # inputs is what lets an unchanged project skip the build.
    built_tag = f"{LOCAL_PREFIX}project:{_project_digest(podman.image_id(airflow_base))}"
    if not podman.image_exists(built_tag):
        # The Dockerfile's own ignore file is a BuildKit convention: named here, so Podman reads it too.
        podman.run("build", *builds.options, "--build-arg", f"AIRFLOW_BASE_IMAGE={airflow_base}",
                   "--file", str(ROOT / "docker" / "airflow.Dockerfile"),
                   "--ignorefile", str(ROOT / "docker" / "airflow.Dockerfile.dockerignore"),
                   "--tag", built_tag, str(ROOT), timeout=3600, output=work / "project.build.log")  # fmt: skip
    podman.run("tag", built_tag, PROJECT_IMAGE)
    seconds["project image"] = time.monotonic() - started
    remove_stale(podman, {BASE_IMAGE, built_tag, *variables.values(), airflow_base})
    return Built(variables, seconds)


def remove_stale(podman: Podman, current: set[str]) -> list[str]:
    """Untag this module's images that are not ``current`` (built from inputs since changed); returns them.

    vfs keeps every layer as a full copy, so each stale set costs gigabytes; untagged, the image prune
    after the test removes them. Chosen by name from the listing: a reference filter matches images by
    what they share, and would take the project's own tag with them.
    """
    listed = podman.run("images", "--format", "{{.Repository}}:{{.Tag}}", quiet=True).stdout.decode().split()
    stale = sorted({ref for ref in listed if ref.startswith(LOCAL_PREFIX) and ref not in current})
    for ref in stale:
        podman.run("untag", ref, ref, check=False)  # that name only: without one, untag drops every name
    return stale


def _project_digest(base_id: str) -> str:
    """What the project's image is built from: its base, the Dockerfile, its ignore file and every file
    under what the Dockerfile copies (a superset of what the ignore file lets in)."""
    h = hashlib.sha256(base_id.encode())
    sources = ["docker/airflow.Dockerfile", "docker/airflow.Dockerfile.dockerignore", "requirements.txt",
               "constraints.txt", "include", "dags", "plugins", "spark_jobs", "docker"]  # fmt: skip
    for source in sources:
        path = ROOT / source
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            if "__pycache__" not in f.parts:
                h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


def image_paths(podman: Podman, image: str, *paths: str) -> dict[str, bool]:
    """Whether each path exists in ``image`` (a throw-away container lists them)."""
    script = "; ".join(f'[ -e "{p}" ] && echo "yes {p}" || echo "no {p}"' for p in paths)
    out = podman.run("run", "--rm", "--network", "host", "--entrypoint", "bash", image, "-c", script).stdout.decode()
    found = dict(reversed(line.split(" ", 1)) for line in out.splitlines() if " " in line)
    return {p: found.get(p) == "yes" for p in paths}


# --------------------------------------------------------------------------- health checks


class HealthChecker(threading.Thread):
    """Runs the containers' health checks, as Podman's systemd timers would (there is no systemd here).

    Each running container of the Compose project that has a health check gets ``podman healthcheck
    run`` every ``starting_s`` until it is healthy, then every ``healthy_s`` (the Airflow checks start a
    Python that imports Airflow: on two cores, checking them as often as a starting service would cost
    most of a core). Podman records each result, which the Docker API, and so Compose's
    ``depends_on: condition: service_healthy``, reads.
    """

    def __init__(self, podman: Podman, project: str, *, starting_s: float = 10.0, healthy_s: float = 60.0) -> None:
        super().__init__(daemon=True, name="healthchecks")
        self.podman, self.project = podman, project
        self.starting_s, self.healthy_s = starting_s, healthy_s
        self.status: dict[str, str] = {}
        #: Every container id of the project it has seen, for :func:`stop_exec_monitors` after ``down``.
        self.seen: set[str] = set()
        self._checked: dict[str, float] = {}
        self._stop = threading.Event()

    def containers(self) -> dict[str, str]:
        """``{service: container id}`` of the project's running containers."""
        out = self.podman.run("ps", "--filter", f"label=com.docker.compose.project={self.project}", "--format",
                              "json", check=False, quiet=True).stdout  # fmt: skip
        found = {}
        for c in json.loads(out or b"[]"):
            service = (c.get("Labels") or {}).get("com.docker.compose.service")
            if service and c.get("State") == "running":
                found[service] = c["Id"]
        self.seen.update(found.values())
        return found

    def check_once(self) -> dict[str, str]:
        """Check every container that is due; returns ``{service: "healthy" or the check's last line}``."""
        now = time.monotonic()
        for service, cid in self.containers().items():
            every = self.healthy_s if self.status.get(service) == "healthy" else self.starting_s
            if now - self._checked.get(service, 0.0) < every:
                continue
            self._checked[service] = now
            proc = self.podman.run("healthcheck", "run", cid, check=False, quiet=True, timeout=120)
            out = (proc.stdout + proc.stderr).decode(errors="replace").strip()
            if "no defined healthcheck" in out or "has no healthcheck" in out:
                continue
            self.status[service] = "healthy" if proc.returncode == 0 else (out.splitlines() or ["unhealthy"])[-1]
        return dict(self.status)

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.check_once()
            except (subprocess.SubprocessError, OSError, ValueError):
                pass  # a container that went away between the listing and its check
            self._stop.wait(2.0)

    def stop(self) -> None:
        self._stop.set()


def stop_exec_monitors(container_ids: set[str]) -> int:
    """Stop the ``conmon`` processes left watching exec sessions (``compose exec``) of removed containers.

    Podman 4.3's Docker API leaves one per exec session behind when the container goes away; the test
    must not leave processes on the machine. Returns how many it stopped.
    """
    stopped = 0
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(b"conmon") or b"-c" not in argv:
            continue
        at = argv.index(b"-c")
        if at + 1 < len(argv) and argv[at + 1].decode(errors="replace") in container_ids:
            try:
                os.kill(int(proc.name), signal.SIGTERM)
                stopped += 1
            except (OSError, ValueError):
                pass
    return stopped


def compose_command(podman: Podman, project: str, files: list[Path], variables: Mapping[str, str]) -> Callable:
    """A function running ``docker-compose -p project -f ... <args>`` against Podman's Docker API."""
    env = {**podman.env, **variables, "DOCKER_HOST": f"unix://{podman.socket}", "COMPOSE_HTTP_TIMEOUT": "600",
           "DOCKER_BUILDKIT": "0"}  # fmt: skip
    base = ["docker-compose", "--project-name", project, "--project-directory", str(ROOT)]
    for f in files:
        base += ["--file", str(f)]

    def compose(*args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
        podman.log("docker-compose " + " ".join(args))
        proc = subprocess.run([*base, *args], env=env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise PodmanError(f"docker-compose {' '.join(args)} exited {proc.returncode}:\n"
                              f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")  # fmt: skip
        return proc

    return compose
