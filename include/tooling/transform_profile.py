"""Where the bronze → silver transform spends its time, phase by phase, on a silver of many keys.

Runs the demo pipeline (``include/pipelines/demo_orders.yaml``: its transform
spec, its tables under a temporary lakehouse) on a local broker and an
in-process Spark, with the demo's own order events (new orders, updates,
late events, tombstones, about 1 in 100 spoiled): ``--orders`` events, then
the real ingestion and transform jobs with the arguments the DAG gives them
(the first transform, mostly inserts); then ``--batches`` times
``--events`` more events, ingested and transformed (a MERGE into the full
silver). Prints each transform batch's phases (decode, counting, classify,
the silver commit and its confirmation) and Delta's metrics of the newest
silver commit.

    make profile-transform                     # or: python -m include.tooling.transform_profile
    make profile-transform PROFILE_ARGS="--orders 100000"

A profile, not a comparison: the figures are one machine's, for finding
where a batch's seconds go; ``make bench`` holds the side-by-side figures.
The Kafka consumer options of the pipeline file are not passed (the DAG
sends them in a file); each job reads its whole backlog in one batch unless
``--max-offsets-per-trigger`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from include.config import load_pipeline
from include.contract.jobs import IngestArgs, positive
from include.readers.kafka_admin import create_topic
from include.settings import LAKEHOUSE_ROOT_ENV
from include.tooling import demo, local_kafka


def _silver_commit(spark, path: str) -> dict:
    """The operation and metrics of silver's newest data commit (a run may end with a properties commit)."""
    from delta.tables import DeltaTable

    rows = DeltaTable.forPath(spark, path).history(5).collect()
    row = next((r for r in rows if r["operation"] in ("WRITE", "MERGE")), rows[0])
    wanted = ("numTargetRowsUpdated", "numTargetRowsInserted", "numTargetRowsCopied", "scanTimeMs",
              "rewriteTimeMs", "executionTimeMs", "numOutputRows")  # fmt: skip
    return {"operation": row["operation"], **{k: v for k, v in (row["operationMetrics"] or {}).items() if k in wanted}}


def main(argv: list[str] | None = None) -> int:
    """Run the profile and print one JSON line per transform run."""
    p = argparse.ArgumentParser(prog="python -m include.tooling.transform_profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--orders", type=positive(int), default=500_000, help="events of the first run (default %(default)s)")
    p.add_argument("--events", type=positive(int), default=2_000, help="events of each later run (default %(default)s)")
    p.add_argument("--batches", type=positive(int), default=3, help="later runs (default %(default)s)")
    p.add_argument("--max-offsets-per-trigger", type=positive(int), default=None,
                   help="cap each ingestion micro-batch (default: none, one batch per run)")  # fmt: skip
    args = p.parse_args(argv)

    from include.orchestration.job_args import transform_job_args
    from include.spark.spark_submit import local_session
    from spark_jobs import bronze_to_silver, kafka_to_bronze
    from spark_jobs.ingest_plan import parse_config
    from spark_jobs.routed_transform import RoutedSummary

    root = Path(tempfile.mkdtemp(prefix="kde-transform-profile-"))
    os.environ[LAKEHOUSE_ROOT_ENV] = str(root / "lakehouse")
    cfg = load_pipeline(demo.PIPELINE_FILE)
    cfg = replace(cfg, kafka=replace(cfg.kafka, max_offsets_per_trigger=args.max_offsets_per_trigger))
    broker = local_kafka.start(root / "kafka")
    try:
        spark = local_session("kde-transform-profile", warehouse=root / "warehouse")
        create_topic(broker.bootstrap_servers, demo.TOPIC, demo.PARTITIONS)
        produced = 0
        for n in range(args.batches + 1):
            count = args.orders if n == 0 else args.events
            demo.produce_orders(broker.bootstrap_servers, count, produced)
            produced += count
            run_id, folder = f"profile-{n}", root / "runs" / f"profile-{n}"
            folder.mkdir(parents=True)
            ingest = IngestArgs.for_pipeline(cfg, bootstrap_servers=broker.bootstrap_servers, run_id=run_id,
                                             run_type="manual", summary_path=str(folder / "ingest.json")).to_args()
            kafka_to_bronze.run(spark, parse_config(ingest))
            started = time.monotonic()
            summary = bronze_to_silver.run(spark, bronze_to_silver.parse_config(
                transform_job_args(cfg, folder, run_id, folder / "transform.json")))  # fmt: skip
            if isinstance(summary, RoutedSummary):
                raise SystemExit("the transform profile takes a pipeline without routes")
            seconds = time.monotonic() - started
            batches = [{"batch": b.batch_id, "seconds": round(b.duration_s, 2),
                        **{k: round(v, 2) for k, v in b.phases.items()}} for b in summary.batches]  # fmt: skip
            print(json.dumps({"run": "first" if n == 0 else f"later-{n}", "events": count, "seconds": round(seconds, 2),
                              "batches": batches, "silver_commit": _silver_commit(spark, cfg.tables.silver_path)}),
                  flush=True)  # fmt: skip
        spark.stop()
        return 0
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
