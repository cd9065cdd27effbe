"""The Spark driver's class-data-sharing flags: an archive that ``make setup`` built is used when present.

A short job spends much of its life loading and verifying Spark's, Delta's
and Scala's classes. Java's dynamic CDS archive (``-XX:ArchiveClassesAtExit``)
records the classes a JVM loaded; a later JVM started with
``-XX:SharedArchiveFile`` maps them instead of parsing them again. This module
only names an existing archive (and the short-job JIT flags); training and
building one drives the Spark jobs, which is dev tooling:
``include/tooling/jvm_cds_build.py`` (``make setup``).

Safety: the archive's name carries a fingerprint of what it was built from
(pyspark, the jars, the Java binary); an archive that does not match is not
named at all, and Java itself refuses a stale archive silently and loads the
classes as usual (``-Xshare:auto``, its CDS log off). A missing archive never
fails a run.

Why: a run's application is short, and loading Spark's, Delta's and
Scala's classes from jars is a large share of it. Mapping them from the
archive saves seconds of CPU at every driver start (docs/performance.md).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from include import settings
from include.spark import jvm_deps

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
    try:
        jars = jvm_deps.spark_jars()
    except Exception:  # noqa: BLE001 - no jars yet: nothing to archive against
        return None
    return java_fingerprint(jvm_deps.pyspark_version(), *sorted(j.name for j in jars))


def sharing_flags(path: Path | None) -> list[str]:
    """The flags that map the archive at ``path``: none when it is missing or empty, or the switch is off.

    Java checks the archive itself and, with ``-Xshare:auto``, quietly loads
    the classes as usual from an archive it refuses (another class path or JVM).
    """
    if settings.cds_disabled() or path is None or not path.is_file() or path.stat().st_size == 0:
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
    if settings.cds_disabled():
        return ""
    flags = sharing_flags(archive_path())
    if short_job:
        flags.append(SHORT_JOB_FLAGS)
    return " ".join(flags)
