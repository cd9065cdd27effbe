"""A local schema registry for the demo and the tests: Apicurio Registry, with its Confluent-compatible API.

Apicurio Registry (Apache-2.0) is published on Maven Central as a Quarkus
application's classes, not as a runnable jar, so the first use builds one:
a small Maven project depending on ``io.apicurio:apicurio-registry-app``,
packaged by ``quarkus-maven-plugin`` into ``quarkus-app/quarkus-run.jar``
under the project's cache (about 45 s and 230 MB of downloads once; a marker
then makes every later use instant). It keeps its schemas in memory: each
start is an empty registry.

Version 2.4.2.Final is the newest whose whole dependency tree the package
registry this project uses serves. Three gaps are bridged in the build, each
named where it is done: a JSON Schema library published elsewhere comes from
its Maven Central fork (same package), one Quarkus deployment module is
installed from its nearest served version, and Quarkus is told to index the
application jar, which ships without an index.

``python -m include.tooling.local_registry build`` builds it ahead of time.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from include import settings
from include.contract.errors import PipelineError
from include.ports import free_port
from include.tooling import java_server

APICURIO_VERSION = "2.4.2.Final"
#: The Quarkus version Apicurio's parent POM of that release builds with.
QUARKUS_VERSION = "2.16.4.Final"
#: ``io.apicurio:apicurio-common-app-components-config-index-deployment`` as the app asks for it, and the
#: nearest version the package registry serves (its runtime class is the same in both).
CONFIG_INDEX_WANTED, CONFIG_INDEX_SERVED = "0.1.18.Final", "0.1.10.Final"
#: Where the Confluent-compatible API lives under the registry's address.
CCOMPAT_PATH = "/apis/ccompat/v7"


class RegistryError(PipelineError, RuntimeError):
    """The registry could not be built or started; the message has the build's or the server's own words."""


_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.kafka-delta-elt</groupId>
  <artifactId>apicurio-registry-local</artifactId>
  <version>1</version>
  <packaging>jar</packaging>
  <properties><project.build.sourceEncoding>UTF-8</project.build.sourceEncoding></properties>
  <dependencyManagement><dependencies>
    <dependency><groupId>io.apicurio</groupId><artifactId>apicurio-registry</artifactId>
      <version>{APICURIO_VERSION}</version><type>pom</type><scope>import</scope></dependency>
  </dependencies></dependencyManagement>
  <dependencies>
    <dependency><groupId>io.apicurio</groupId><artifactId>apicurio-registry-app</artifactId>
      <version>{APICURIO_VERSION}</version>
      <!-- published only outside Maven Central; its fork below has the same package -->
      <exclusions><exclusion><groupId>com.github.everit-org.json-schema</groupId>
        <artifactId>org.everit.json.schema</artifactId></exclusion></exclusions></dependency>
    <dependency><groupId>com.github.erosb</groupId><artifactId>everit-json-schema</artifactId>
      <version>1.14.2</version></dependency>
  </dependencies>
  <build><plugins>
    <!-- the config-index deployment module at the version the app asks for is not served: install the
         nearest served one under that version, in this build's own local repository -->
    <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-dependency-plugin</artifactId>
      <version>3.6.1</version>
      <executions><execution><id>fetch-config-index-deployment</id><phase>initialize</phase>
        <goals><goal>copy</goal></goals>
        <configuration><artifactItems><artifactItem><groupId>io.apicurio</groupId>
          <artifactId>apicurio-common-app-components-config-index-deployment</artifactId>
          <version>{CONFIG_INDEX_SERVED}</version><type>jar</type>
          <destFileName>config-index-deployment.jar</destFileName></artifactItem></artifactItems>
          <outputDirectory>${{project.build.directory}}/shim</outputDirectory></configuration>
      </execution></executions></plugin>
    <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-install-plugin</artifactId>
      <version>3.1.1</version>
      <executions><execution><id>install-config-index-deployment</id><phase>initialize</phase>
        <goals><goal>install-file</goal></goals>
        <configuration><file>${{project.build.directory}}/shim/config-index-deployment.jar</file>
          <pomFile>${{project.basedir}}/config-index-deployment.pom</pomFile></configuration>
      </execution></executions></plugin>
    <plugin><groupId>io.quarkus</groupId><artifactId>quarkus-maven-plugin</artifactId>
      <version>{QUARKUS_VERSION}</version>
      <configuration><properties>
        <!-- the app jar has no Jandex index: without this Quarkus finds none of its beans -->
        <quarkus.index-dependency.registry-app.group-id>io.apicurio</quarkus.index-dependency.registry-app.group-id>
        <quarkus.index-dependency.registry-app.artifact-id>apicurio-registry-app</quarkus.index-dependency.registry-app.artifact-id>
      </properties></configuration>
      <executions><execution><goals><goal>build</goal></goals></execution></executions></plugin>
  </plugins></build>
</project>
"""

# Quarkus refuses a deployment module that does not depend on its runtime module, so the installed one
# gets this POM rather than a generated one.
_SHIM_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.apicurio</groupId>
  <artifactId>apicurio-common-app-components-config-index-deployment</artifactId>
  <version>{CONFIG_INDEX_WANTED}</version>
  <dependencies>
    <dependency><groupId>io.apicurio</groupId><artifactId>apicurio-common-app-components-config-index</artifactId>
      <version>{CONFIG_INDEX_WANTED}</version></dependency>
    <dependency><groupId>io.quarkus</groupId><artifactId>quarkus-arc-deployment</artifactId>
      <version>{QUARKUS_VERSION}</version></dependency>
    <dependency><groupId>io.quarkus</groupId><artifactId>quarkus-core-deployment</artifactId>
      <version>{QUARKUS_VERSION}</version></dependency>
  </dependencies>
</project>
"""

# Apicurio's POMs declare repositories this network cannot reach; each maps to a folder that does not
# exist (answers "not found" at once) so Maven moves on to its default repository.
_MAVEN_SETTINGS = """<settings><mirrors><mirror><id>default-repository-only</id><mirrorOf>*,!central</mirrorOf>
  <url>file:///nonexistent-maven-repository</url></mirror></mirrors></settings>
"""


def app_dir() -> Path:
    """Where the built registry lives (``quarkus-run.jar`` and its ``lib/``)."""
    return settings.CACHE_DIR / "registry" / f"apicurio-{APICURIO_VERSION}"


def build() -> Path:
    """The registry's runnable jar, built on first use (one build at a time: test workers may ask together)."""
    target = app_dir()
    jar = target / "quarkus-run.jar"
    if (target / ".complete").exists() and jar.exists():
        return jar
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists() and jar.exists():  # built by whoever held the lock before
            return jar
        return _build(target, jar)


def _build(target: Path, jar: Path) -> Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RegistryError("Maven ('mvn') is not on PATH; it is needed once to build the schema registry")
    print(f"building Apicurio Registry {APICURIO_VERSION} with Maven (first use only)...", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="kde-registry-") as work:
        work_dir = Path(work)
        (work_dir / "pom.xml").write_text(_POM)
        (work_dir / "config-index-deployment.pom").write_text(_SHIM_POM)
        (work_dir / "settings.xml").write_text(_MAVEN_SETTINGS)
        # The app jar's own application.properties asks for a legacy jar; only a system property beats it.
        (work_dir / ".mvn").mkdir()
        (work_dir / ".mvn" / "maven.config").write_text("-Dquarkus.package.type=fast-jar\n")
        cmd = [mvn, "-B", "-q", "-s", str(work_dir / "settings.xml"),
               # Its own local repository: the installed stand-in module must not reach the Spark bundle's.
               f"-Dmaven.repo.local={settings.CACHE_DIR / 'm2-registry'}", "package"]  # fmt: skip
        proc = subprocess.run(cmd, cwd=work_dir, capture_output=True, text=True)
        built = work_dir / "target" / "quarkus-app"
        if proc.returncode != 0 or not (built / "quarkus-run.jar").exists():
            errors = [ln for ln in proc.stdout.splitlines() if "ERROR" in ln][:8]
            raise RegistryError(f"Maven could not build Apicurio Registry {APICURIO_VERSION}: "
                                + ("\n".join(errors) or proc.stderr[-2000:]))  # fmt: skip
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(built, target)
    (target / ".complete").write_text(f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}\n")
    return jar


def _request(url: str, body: dict | None = None, method: str = "GET") -> tuple[int, dict | list]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (loopback)
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@dataclass
class LocalRegistry:
    """A running local registry."""

    port: int
    process: subprocess.Popen
    log: Path

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL (what a registry connection's ``url`` holds)."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    def register(self, subject: str, schema: dict | str, schema_type: str = "AVRO",
                 references: Sequence[tuple[str, str, int]] = ()) -> int:  # fmt: skip
        """Register ``schema`` under ``subject`` (as a producer's serializer does); returns its global id.
        ``references``: ``(import name, subject, version)`` of the schemas it imports, registered before it."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        body = {"schema": text, **({"schemaType": schema_type} if schema_type != "AVRO" else {}),
                **({"references": [{"name": n, "subject": s, "version": v} for n, s, v in references]}
                   if references else {})}  # fmt: skip
        status, answer = _request(f"{self.url}/subjects/{urllib.parse.quote(subject, safe='')}/versions", body, "POST")
        if status != 200 or not isinstance(answer, dict) or "id" not in answer:
            raise RegistryError(f"registering a schema under {subject!r} failed: HTTP {status} {answer}")
        return int(answer["id"])

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the server (its schemas are gone with it)."""
        java_server.stop(self.process, timeout_s)


def start(log_dir: Path, *, port: int | None = None, timeout_s: float = 90.0) -> LocalRegistry:
    """Start an empty in-memory registry on ``port`` (a free one by default); waits until it answers."""
    jar = build()
    port = port or free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "registry.log"
    cmd = [java_server.java(), "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={port}", "-jar", str(jar)]  # fmt: skip
    registry = LocalRegistry(port, java_server.launch(cmd, cwd=log_dir, log=log), log)
    java_server.wait_ready(registry.process, lambda: _request(f"{registry.url}/subjects")[0] == 200,
                           name="the schema registry", port=port, log=log, timeout_s=timeout_s, error=RegistryError)
    return registry


def main(argv: list[str] | None = None) -> int:
    """``build``: build the registry ahead of time; ``run``: start one in the foreground."""
    p = argparse.ArgumentParser(prog="local_registry", description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("build", "run"))
    p.add_argument("--port", type=int, default=None)
    a = p.parse_args(argv)
    if a.command == "build":
        print(build())
        return 0
    registry = start(settings.VAR_DIR / "registry", port=a.port)
    print(f"schema registry at {registry.url} (Ctrl-C stops it)")
    try:
        registry.process.wait()
    except KeyboardInterrupt:
        registry.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
