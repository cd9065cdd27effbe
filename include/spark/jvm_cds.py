"""A class-data-sharing archive for the Spark driver: built once by ``make setup``, used when present.

A short job spends much of its life loading and verifying Spark's, Delta's
and Scala's classes. Java's dynamic CDS archive (``-XX:ArchiveClassesAtExit``)
records the classes a JVM loaded; a later JVM started with
``-XX:SharedArchiveFile`` maps them instead of parsing them again. The archive
is trained by one real, small run of the project's own commit path and
transform (:func:`training_run`) on a local session, without Kafka.

Safety: the archive's name carries a fingerprint of what it was built from
(pyspark, the jars, the Java binary); an archive that does not match is not
named at all, and Java itself refuses a stale archive silently and loads the
classes as usual (``-Xshare:auto``, its CDS log off). A missing archive or a
failed build never fails a run; the build says why it failed and setup goes on.

Why: a run's application is short, and loading Spark's, Delta's and
Scala's classes from jars is a large share of it. Mapping them from the
archive saves seconds of CPU at every driver start (docs/performance.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from include import settings
from include.spark import jvm_deps

#: ``KDE_CDS=off`` leaves the archive unused (for comparing, or a JVM that rejects the flags).
CDS_ENV = "KDE_CDS"
_QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    java = Path(home) / "bin" / "java" if home else None
    if java is None or not java.exists():
        found = shutil.which("java")
        java = Path(found) if found else None
    return java.resolve() if java else None


def java_fingerprint(*parts: str) -> str | None:
    """A key for an archive of this machine's Java binary and ``parts`` (what else it was built from);
    ``None`` without Java."""
    java = _java()
    if java is None:
        return None
    return hashlib.sha256("\n".join([str(java), str(java.stat().st_mtime_ns), *parts]).encode()).hexdigest()[:16]


def fingerprint() -> str | None:
    """What the driver archive must have been built from to be used now; ``None`` without Java or jars."""
    import pyspark

    try:
        jars = jvm_deps.spark_jars()
    except Exception:  # noqa: BLE001 - no jars yet: nothing to archive against
        return None
    return java_fingerprint(pyspark.__version__, *sorted(j.name for j in jars))


def disabled() -> bool:
    """Whether ``KDE_CDS=off`` (or 0, false, no) turns the archives and the short-job flags off."""
    return os.environ.get(CDS_ENV, "").lower() in ("off", "0", "false", "no")


def sharing_flags(path: Path | None) -> list[str]:
    """The flags that map the archive at ``path``: none when it is missing or empty, or the switch is off.

    Java checks the archive itself and, with ``-Xshare:auto``, quietly loads
    the classes as usual from an archive it refuses (another class path or JVM).
    """
    if disabled() or path is None or not path.is_file() or path.stat().st_size == 0:
        return []
    return [f"-XX:SharedArchiveFile={path}", *_QUIET.split()]


def archive_path() -> Path | None:
    """Where the driver archive for this machine's pyspark, jars and Java lives (it may not exist)."""
    key = fingerprint()
    return settings.CACHE_DIR / "cds" / f"driver-{key}.jsa" if key else None


#: The executors of a run's own cluster whose backlog is at most :data:`SHORT_JOB_MAX_RECORDS`: C1,
#: which compiles sooner than the full tiered JIT (an executor may run several tasks at once, so its
#: collector is left to Java). Without tiers Java reserves only 48 MB for compiled code, which one
#: application running ingest, transform and maintenance fills: Java then turns its compiler off
#: ("CodeCache is full") and the rest of the run is interpreted. The reservation costs nothing until used.
SHORT_EXECUTOR_FLAGS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
#: The JVM flags of a driver whose own work is short (``short_job``): C1, and the serial collector,
#: which spends no threads of a small machine on a small heap.
SHORT_JOB_FLAGS = f"{SHORT_EXECUTOR_FLAGS} -XX:+UseSerialGC"
#: The largest backlog measured no slower with C1 than with the full JIT (1,000,000 records drained
#: in local[2]: 11.3 and 12.2 s vs 11.4 and 11.6 s); above it, or when the backlog is not known,
#: executors keep Java's defaults.
SHORT_JOB_MAX_RECORDS = 1_000_000


def driver_options(*, short_job: bool) -> str:
    """The driver's CDS flags: the archive when it exists and matches, else nothing.

    ``short_job``: the driver of a run the orchestrator submits. On a cluster
    it only plans and commits (executors process the data); in local mode the
    cluster sizing gave it a backlog of at most ``cluster.local_max_records``.
    Either way its life is seconds, so it gets :data:`SHORT_JOB_FLAGS`: C1
    compiles the hot code sooner than the full JIT, and a drain of up to
    :data:`SHORT_JOB_MAX_RECORDS` is no slower for it. A driver started
    without it (the benchmark's jobs) keeps Java's defaults.
    """
    if disabled():
        return ""
    flags = sharing_flags(archive_path())
    if short_job:
        flags.append(SHORT_JOB_FLAGS)
    return " ".join(flags)


def training_run(work: Path) -> None:
    """What the archive learns from: a bronze commit through the project's commit path, then the transform."""
    from include.contract.jobs import TransformArgs
    from include.contract.transform_spec import FieldSpec, TransformSpec
    from include.spark.spark_submit import local_session
    from spark_jobs import bronze_to_silver
    from spark_jobs.job_common import commit_with_stand

    spark = local_session("cds-training", warehouse=work / "warehouse", cores=1, driver_memory="1g")
    try:
        # The Kafka source's classes, without a broker: defining the stream connects to nothing.
        _ = spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9").option(
            "subscribe", "cds-training").load().schema  # fmt: skip
        rows = spark.createDataFrame(
            [(b"k1", b'{"id": "a", "ts": "2026-01-01T00:00:00Z"}', "t", 0, 0)],
            "key binary, value binary, topic string, partition int, offset long",
        )
        commit_with_stand(spark, str(work / "bronze"), rows, finish=lambda version, files: ("{}", []),
                          idempotency=("cds-training", 0))  # fmt: skip
        spec = TransformSpec(fields=(FieldSpec("id", "string", required=True), FieldSpec("ts", "timestamp")),
                             key=("id",), ordering="ts")  # fmt: skip
        spec_file = work / "spec.json"
        spec_file.write_text(json.dumps(spec.to_json()))
        cfg = bronze_to_silver.parse_config(TransformArgs(
            pipeline="cds-training", bronze_path=str(work / "bronze"), silver_path=str(work / "silver"),
            quarantine_path=str(work / "quarantine"), checkpoint_root=str(work / "checkpoints"),
            spec_file=str(spec_file), run_id="cds",
        ).to_args())  # fmt: skip
        try:
            bronze_to_silver.run(spark, cfg)
        except bronze_to_silver.TransformError:
            pass  # the training rows need not be valid bronze; the classes are loaded either way
    finally:
        spark.stop()


def build_archive(path: Path | None, train: Callable[[Path, Path], str | None], *, what: str,
                  force: bool = False) -> Path | None:  # fmt: skip
    """Build the archive at ``path`` if it is missing; its path, or ``None`` with the reason printed.

    ``train(partial, tmp)`` runs a JVM with ``-XX:ArchiveClassesAtExit=partial`` (``tmp`` is a scratch
    folder) and returns why it failed, or ``None``. Older archives of the same kind (the name's prefix
    before its key) are removed first; the new one is moved into place whole. ``what`` names the kind in
    the messages, e.g. ``jobs``. Never raises for a failed training run: setup goes on without it.
    """
    if path is None:
        print(f"{what}: no Java or no jars yet; no class-data-sharing archive", file=sys.stderr)
        return None
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob(f"{path.name.split('-', 1)[0]}-*.jsa"):
        old.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="kde-cds-") as tmp:
        partial = Path(tmp) / "archive.jsa"
        problem = train(partial, Path(tmp))
        if problem is None and (not partial.is_file() or partial.stat().st_size == 0):
            problem = "the training JVM wrote no archive"
        if problem is not None:
            print(f"{what}: the training run failed ({problem}); it starts without an archive", file=sys.stderr)
            return None
        shutil.move(str(partial), str(path.with_suffix(".tmp")))
        os.replace(path.with_suffix(".tmp"), path)
    return path


def _train_driver(partial: Path, tmp: Path, timeout_s: float) -> str | None:
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--driver-java-options -XX:ArchiveClassesAtExit={partial} "
                                                 "pyspark-shell"}  # fmt: skip
    env.pop("PYSPARK_GATEWAY_PORT", None)
    proc = subprocess.run(
        [sys.executable, "-c", f"from pathlib import Path; from include.spark.jvm_cds import training_run; "
                               f"training_run(Path({str(tmp / 'work')!r}))"],
        cwd=settings.PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        return f"exit {proc.returncode}; its output ends:\n{(proc.stdout + proc.stderr)[-2000:]}\n"
    return None


def build(*, force: bool = False, timeout_s: float = 600) -> Path | None:
    """Build the driver archive if it is missing; its path, or ``None`` (with the reason printed)."""
    return build_archive(archive_path(), lambda partial, tmp: _train_driver(partial, tmp, timeout_s),
                         what="jvm_cds (Spark jobs)", force=force)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """``make setup``: build the driver's archive once; never fails setup."""
    # No options, but --help must explain instead of starting a minutes-long training run,
    # and a mistyped option must be refused rather than ignored.
    argparse.ArgumentParser(prog="python -m include.spark.jvm_cds", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)  # fmt: skip
    path = build()
    if path is not None:
        print(f"jvm_cds: driver class-data-sharing archive {path} ({path.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
