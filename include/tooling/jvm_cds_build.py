"""Training and building the Spark driver's class-data-sharing archive (``make setup``).

Dev tooling: the training run drives the project's own jobs (``spark_jobs``),
so it lives here, not in ``include/spark``; the product side, which only
names an archive that exists, is :mod:`include.spark.jvm_cds`.

The archive is trained by one real, small run of the project's own commit path
and transform (:func:`training_run`) on a local session, without Kafka; Java
writes the classes the JVM loaded at its exit (``-XX:ArchiveClassesAtExit``).
A failed build never fails setup: it says why and setup goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from include import settings
from include.spark import jvm_cds


def training_run(work: Path) -> None:
    """What the archive learns from: a bronze commit through the project's commit path, then the transform."""
    from include.contract.errors import TransformError
    from include.contract.jobs import TransformArgs
    from include.contract.transform_spec import FieldSpec, TransformSpec
    from include.spark.spark_submit import local_session
    from spark_jobs import bronze_to_silver
    from spark_jobs.delta_commits import commit_with_stand

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
        except TransformError:
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
        [sys.executable, "-c", f"from pathlib import Path; from include.tooling.jvm_cds_build import training_run; "
                               f"training_run(Path({str(tmp / 'work')!r}))"],
        cwd=settings.PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        return f"exit {proc.returncode}; its output ends:\n{(proc.stdout + proc.stderr)[-2000:]}\n"
    return None


def build(*, force: bool = False, timeout_s: float = 600) -> Path | None:
    """Build the driver archive if it is missing; its path, or ``None`` (with the reason printed)."""
    return build_archive(jvm_cds.archive_path(), lambda partial, tmp: _train_driver(partial, tmp, timeout_s),
                         what="jvm_cds (Spark jobs)", force=force)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """``make setup``: build the driver's archive once; never fails setup."""
    # No options, but --help must explain instead of starting a minutes-long training run,
    # and a mistyped option must be refused rather than ignored.
    argparse.ArgumentParser(prog="python -m include.tooling.jvm_cds_build", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)  # fmt: skip
    path = build()
    if path is not None:
        print(f"jvm_cds: driver class-data-sharing archive {path} ({path.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
