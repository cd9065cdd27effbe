"""Pinned JVM dependencies, resolved once with Maven into the project's cache, and the project's own
Spark SQL functions, compiled once from ``include/spark/jvm/src``.

Five bundles:

- ``spark``: the Spark Kafka connector, Delta Lake, Spark's Avro functions and protobuf-java (with its
  JSON printer), minus every jar that pyspark already ships (two copies of a class on one classpath is
  how ``NoSuchMethodError`` happens).
- ``kafka``: an Apache Kafka broker with its command-line tools
  (``kafka-consumer-groups``, ``kafka-consumer-perf-test`` classes).
- ``s3``: Hadoop's S3A filesystem (``hadoop-aws``) and the three AWS SDK modules it uses (S3, STS,
  the transfer manager; about 20 MB instead of the SDK's 600 MB bundle), for a lakehouse on
  ``s3a://``; minus pyspark's jars as for ``spark``. Resolved on first use only.
- ``s3proxy``: an S3-compatible server (s3proxy, filesystem backend) that the tests and
  ``make demo STORE=s3`` start. Resolved on first use only.
- ``debezium``: Debezium's PostgreSQL connector, for the change-data-capture tests. On first use only.

The functions (:func:`udf_jar`; Protobuf values, ``kde_protobuf_json``) are compiled with the JDK's
``javac`` against pyspark's jars and the ``spark`` bundle, into a jar whose name carries a hash of
the sources and that classpath, so a changed source is a new jar (and a new class-data-sharing archive).

The first call runs ``mvn dependency:copy-dependencies`` against Maven's
default repository, with a private local repository under ``.cache/m2``; a
marker file then makes every later call offline and instant.

Run ``python -m include.spark.jvm_deps`` to resolve ``spark`` and ``kafka`` ahead of time (what
``make setup`` does), or ``python -m include.spark.jvm_deps s3 s3proxy`` for the others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from include import settings
from include.contract.errors import ContractError, PipelineError


class JvmDependencyError(PipelineError, RuntimeError):
    """Maven could not resolve a bundle; the message carries Maven's own error."""


@dataclass(frozen=True)
class Artifact:
    """One Maven coordinate; ``exclude_transitive`` keeps its dependencies out."""

    group: str
    artifact: str
    version: str
    exclusions: tuple[tuple[str, str], ...] = ()

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


_S = settings.SCALA_BINARY
_SPARK_MINOR = ".".join(settings.SPARK_VERSION.split(".")[:2])

#: Hadoop's mini clusters (HDFS, YARN) for the tests; its cluster manager's classes name JUnit's API, which
#: the jar does not carry.
_MINICLUSTER = (
    Artifact("org.apache.hadoop", "hadoop-client-minicluster", settings.HADOOP_VERSION),
    Artifact("org.junit.jupiter", "junit-jupiter-api", "5.10.2"),
)

BUNDLES: dict[str, tuple[Artifact, ...]] = {
    "spark": (
        Artifact(
            "org.apache.spark",
            f"spark-sql-kafka-0-10_{_S}",
            settings.SPARK_VERSION,
            exclusions=(("org.apache.spark", f"spark-token-provider-kafka-0-10_{_S}"),),
        ),
        Artifact(
            "org.apache.spark",
            f"spark-token-provider-kafka-0-10_{_S}",
            settings.SPARK_TOKEN_PROVIDER_VERSION,
            exclusions=(("*", "*"),),
        ),
        Artifact("io.delta", f"delta-spark_{_SPARK_MINOR}_{_S}", settings.DELTA_VERSION),
        # from_avro / to_avro for transform.format avro (its Avro library is pyspark's own).
        Artifact("org.apache.spark", f"spark-avro_{_S}", settings.SPARK_VERSION),
        # transform.format protobuf: DynamicMessage and JsonFormat in the project's kde_protobuf_json
        # (pyspark's own copies are shaded inside other jars, so nothing clashes).
        Artifact("com.google.protobuf", "protobuf-java", settings.PROTOBUF_JAVA_VERSION),
        Artifact("com.google.protobuf", "protobuf-java-util", settings.PROTOBUF_JAVA_VERSION),
    ),
    "kafka": (
        Artifact("org.apache.kafka", f"kafka_{_S}", settings.KAFKA_BROKER_VERSION),
        Artifact("org.apache.kafka", "kafka-tools", settings.KAFKA_BROKER_VERSION),
        # The broker logs through slf4j 1.7; without a binding its log is lost.
        Artifact("org.apache.logging.log4j", "log4j-slf4j-impl", "2.25.4"),
    ),
    "s3": (
        Artifact("org.apache.hadoop", "hadoop-aws", settings.HADOOP_VERSION,
                 exclusions=(("software.amazon.awssdk", "bundle"),)),  # fmt: skip
        *(Artifact("software.amazon.awssdk", module, settings.AWS_SDK_VERSION)
          for module in ("s3", "sts", "s3-transfer-manager")),  # fmt: skip
    ),
    "s3proxy": (
        Artifact("org.gaul", "s3proxy", settings.S3PROXY_VERSION),
        # Maven's nearest-wins picks jclouds' jackson-annotations 2.18; s3proxy's Jackson 3 needs the
        # 2.22 its BOM names (JsonSerializeAs).
        Artifact("com.fasterxml.jackson.core", "jackson-annotations", "2.22"),
    ),
    # HDFS (a NameNode and a DataNode in one JVM, Hadoop's MiniDFSCluster), for the tests of a lakehouse on
    # hdfs://; the clients are pyspark's own Hadoop and delta-rs's.
    "hadoop": _MINICLUSTER,
    # YARN (a ResourceManager and a NodeManager in one JVM, Hadoop's MiniYARNCluster started by the tests'
    # own main), for the tests of profile existing_master on yarn: the minicluster jar leaves out the
    # Bouncy Castle provider and PKIX classes its ResourceManager loads, at the version Hadoop builds with.
    "yarn": (
        *_MINICLUSTER,
        Artifact("org.bouncycastle", "bcprov-jdk18on", "1.82"),
        Artifact("org.bouncycastle", "bcpkix-jdk18on", "1.82"),
    ),
    # Kafka Connect itself is the kafka bundle's (connect-runtime comes with kafka-tools); only the
    # connector and its own libraries are resolved here.
    "debezium": (
        Artifact("io.debezium", "debezium-connector-postgres", settings.DEBEZIUM_VERSION,
                 exclusions=(("org.apache.kafka", "*"),)),  # fmt: skip
    ),
}
#: What ``make setup`` resolves; the others on first use.
SETUP_BUNDLES = ("spark", "kafka")
#: What each bundle is for and what its first use downloads, as the resolve announces it.
BUNDLE_PURPOSE = {
    "spark": "the jobs' Kafka connector, Delta Lake, spark-avro and protobuf-java",
    "kafka": "the local Kafka broker and Kafka's tools",
    "s3": "S3A and the AWS SDK's S3 modules, for a pipeline whose tables are on S3 (about 13 MB)",
    "s3proxy": "the local S3-compatible server of make demo STORE=s3, the store tests and the bench (about 100 MB)",
    "debezium": "Debezium's PostgreSQL connector for the change-data-capture tests' Kafka Connect worker",
    "hadoop": "Hadoop's mini HDFS, for the tests of a lakehouse on hdfs:// (about 105 MB)",
    "yarn": "Hadoop's mini YARN, for the tests of profile existing_master on yarn (about 115 MB)",
}
#: Bundles whose jars join pyspark's on one classpath: a jar pyspark ships is left out.
_ON_PYSPARK = ("spark", "s3")

#: Jars Maven resolves for the spark bundle that must not join pyspark's own:
#: commons-logging clashes with pyspark's jcl-over-slf4j; shims and
#: jackson-datatype-jdk8 belong to older versions of libraries pyspark ships.
_SPARK_EXTRA_EXCLUDES = frozenset({"commons-logging", "shims", "jackson-datatype-jdk8"})

# Spark's parent POM declares a second repository that this network cannot
# reach; Maven gives up on the whole build when a declared repository fails
# to answer, so every repository but Maven's default one is mapped to a
# folder that does not exist (answers "not found", and Maven moves on).
_MAVEN_SETTINGS = """<settings>
  <mirrors>
    <mirror>
      <id>default-repository-only</id>
      <mirrorOf>*,!central</mirrorOf>
      <url>file:///nonexistent-maven-repository</url>
    </mirror>
  </mirrors>
</settings>
"""

_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^-]*(?:-[A-Za-z0-9.]+)?)\.jar$")


def artifact_id_of(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients`` (version stripped)."""
    match = _JAR_NAME.match(jar_name)
    if not match:
        raise ContractError(f"not a versioned jar file name: {jar_name!r}")
    return match.group("artifact")


def _pom(bundle: str, artifacts: tuple[Artifact, ...]) -> str:
    deps = []
    for a in artifacts:
        excl = "".join(
            f"<exclusion><groupId>{g}</groupId><artifactId>{x}</artifactId></exclusion>"
            for g, x in a.exclusions
        )
        excl_xml = f"<exclusions>{excl}</exclusions>" if excl else ""
        deps.append(
            f"<dependency><groupId>{a.group}</groupId><artifactId>{a.artifact}</artifactId>"
            f"<version>{a.version}</version>{excl_xml}</dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>local.kafka-delta-elt</groupId><artifactId>{bundle}-bundle</artifactId>"
        f"<version>1</version><dependencies>{''.join(deps)}</dependencies></project>"
    )


def _bundle_dir(bundle: str) -> Path:
    artifacts = BUNDLES[bundle]
    digest = hashlib.sha256(
        json.dumps([a.coordinate for a in artifacts] + sorted(_SPARK_EXTRA_EXCLUDES)).encode()
    ).hexdigest()[:12]
    return settings.CACHE_DIR / "jars" / f"{bundle}-{digest}"


def pyspark_dir() -> Path:
    """The installed pyspark package's folder (Spark's distribution), found without importing pyspark:
    its import costs a quarter of a second, which every Airflow task that only needs a path would pay."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise PipelineError("pyspark is not installed in this Python; run `make setup`")
    return Path(spec.origin).resolve().parent


def pyspark_version() -> str:
    """The installed pyspark's version, read from its package metadata (no import)."""
    from importlib.metadata import version

    return version("pyspark")


def _pyspark_artifact_ids() -> set[str]:
    jars = pyspark_dir() / "jars"
    return {artifact_id_of(p.name) for p in jars.glob("*.jar") if _JAR_NAME.match(p.name)}


def resolve(bundle: str) -> list[Path]:
    """Return the jar files of ``bundle``, downloading them on first use."""
    if bundle not in BUNDLES:
        raise KeyError(f"unknown JVM bundle {bundle!r}; expected one of {sorted(BUNDLES)}")
    target = _bundle_dir(bundle)
    marker = target / ".complete"
    if not marker.exists():
        _download(bundle, target)
        marker.write_text("\n".join(a.coordinate for a in BUNDLES[bundle]) + "\n")
    return sorted(target.glob("*.jar"))


def _download(bundle: str, target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmDependencyError("Maven ('mvn') is not on PATH; it is needed once to fetch jars")
    if target.exists():
        shutil.rmtree(target)
    staging = target.with_name(target.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    with tempfile.TemporaryDirectory(prefix=f"kde-{bundle}-") as work:
        work_dir = Path(work)
        (work_dir / "pom.xml").write_text(_pom(bundle, BUNDLES[bundle]))
        (work_dir / "settings.xml").write_text(_MAVEN_SETTINGS)
        cmd = [
            mvn, "-B", "-q", "-s", str(work_dir / "settings.xml"),
            f"-Dmaven.repo.local={settings.CACHE_DIR / 'm2'}",
            "dependency:copy-dependencies", "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]  # fmt: skip
        print(f"resolving JVM bundle {bundle!r} ({BUNDLE_PURPOSE.get(bundle, 'jars')}) with Maven, first use only ...",
              file=sys.stderr)  # fmt: skip
        proc = subprocess.run(cmd, cwd=work_dir, capture_output=True, text=True)
        if proc.returncode != 0:
            errors = [ln for ln in proc.stdout.splitlines() if "ERROR" in ln][:5]
            raise JvmDependencyError(
                f"Maven could not resolve bundle {bundle!r} "
                f"({', '.join(a.coordinate for a in BUNDLES[bundle])}): "
                + ("\n".join(errors) or proc.stderr[-2000:])
            )
    if bundle in _ON_PYSPARK:
        shipped = _pyspark_artifact_ids()
        for jar in staging.glob("*.jar"):
            name = artifact_id_of(jar.name)
            if name in shipped or name in _SPARK_EXTRA_EXCLUDES:
                jar.unlink()
    staging.rename(target)


def spark_jars() -> list[Path]:
    """Jars to put on ``spark.jars``: Kafka connector, Delta Lake, spark-avro, protobuf-java and the
    project's own functions (:func:`udf_jar`)."""
    jars = resolve("spark")
    return [*jars, udf_jar(jars)]


#: The Java sources of the project's Spark SQL functions.
UDF_SOURCES = Path(__file__).resolve().parent / "jvm" / "src"


def udf_jar(spark_bundle: list[Path] | None = None) -> Path:
    """The jar of the project's Spark SQL functions, compiled on first use (``make setup`` does it), against
    Spark's SQL API (and the Scala library its ``Row`` needs) from pyspark and ``spark_bundle``'s protobuf
    jars (the ``spark`` bundle, resolved when not given)."""
    sources = sorted(UDF_SOURCES.rglob("*.java"))
    pyspark_jars = pyspark_dir() / "jars"
    classpath = [p for pattern in ("spark-sql-api_*.jar", "scala-library-*.jar")
                 for p in sorted(pyspark_jars.glob(pattern))]  # fmt: skip
    classpath += [p for p in (spark_bundle or resolve("spark")) if p.name.startswith("protobuf-java")]
    digest = hashlib.sha256()
    for src in sources:
        digest.update(str(src.relative_to(UDF_SOURCES)).encode() + b"\0" + src.read_bytes() + b"\0")
    digest.update("\0".join(p.name for p in classpath).encode())
    tag = digest.hexdigest()[:12]
    target = settings.CACHE_DIR / "jars" / f"functions-{tag}" / f"kde-functions-{tag}.jar"
    if target.exists():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise JvmDependencyError("javac (a JDK 17) is not on PATH; it is needed once to compile the project's "
                                 f"Spark SQL functions in {UDF_SOURCES}")  # fmt: skip
    print(f"compiling the project's Spark SQL functions ({len(sources)} Java files), first use only ...",
          file=sys.stderr)  # fmt: skip
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kde-functions-") as work:
        classes = Path(work) / "classes"
        cmd = [javac, "--release", "17", "-nowarn", "-encoding", "UTF-8", "-d", str(classes),
               "-cp", ":".join(str(p) for p in classpath), *(str(s) for s in sources)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise JvmDependencyError(f"javac could not compile {UDF_SOURCES}: {(proc.stdout + proc.stderr)[-3000:]}")
        staging = target.with_suffix(".partial")
        with zipfile.ZipFile(staging, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for f in sorted(classes.rglob("*.class")):
                jar.write(f, f.relative_to(classes).as_posix())
        staging.rename(target)
    return target


def s3_jars() -> list[Path]:
    """Jars to add to ``spark.jars`` for a lakehouse on ``s3a://``: S3A and the AWS SDK's S3 modules."""
    return resolve("s3")


def kafka_classpath() -> str:
    """Classpath for running the Kafka broker and Kafka's command-line tools."""
    return ":".join(str(p) for p in resolve("kafka"))


def main(argv: list[str] | None = None) -> int:
    """``make setup``: resolve the bundles every run needs ahead of time (or those named)."""
    # No options, but --help must explain instead of starting Maven downloads,
    # and a mistyped option must be refused rather than ignored.
    p = argparse.ArgumentParser(prog="python -m include.spark.jvm_deps", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("bundles", nargs="*", metavar="BUNDLE",
                   help=f"bundles to resolve, of {', '.join(BUNDLES)} (default: {' '.join(SETUP_BUNDLES)})")  # fmt: skip
    names = p.parse_args(argv).bundles or SETUP_BUNDLES
    unknown = [n for n in names if n not in BUNDLES]
    if unknown:
        p.error(f"unknown bundle(s) {', '.join(unknown)}; expected some of {', '.join(BUNDLES)}")
    for name in names:
        jars = resolve(name)
        print(f"{name}: {len(jars)} jars in {jars[0].parent}")
    if "spark" in names:
        print(f"the project's Spark SQL functions: {udf_jar()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
