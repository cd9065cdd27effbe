"""Transform job: what is new in bronze → typed, deduplicated silver rows, and a quarantine.

Submitted after the ingestion job, to the same cluster (``include/orchestration/step_operators.py``)::

    spark-submit ... --py-files kde_jobs.zip spark_jobs/bronze_to_silver.py \\
        --pipeline orders --bronze-path lakehouse/orders/bronze \\
        --silver-path lakehouse/orders/silver --quarantine-path lakehouse/orders/quarantine \\
        --checkpoint-root lakehouse/orders/_checkpoints/silver --spec-file transform.json \\
        --run-id <airflow run id> --summary-path transform-summary.json

One run: read where the transform stands in the bronze log (silver's txn
action, with its last batch commit while the log holds it; a RESTORE of
silver after it sends it back) → resume the checkpoint if it matches, else
start a new epoch there → ``readStream`` delta bronze with ``Trigger.AvailableNow`` → per
micro-batch: decode and validate (``silver_rules``), add new fields if the
pipeline says so, append bad records to quarantine (idempotent
``txnAppId``/``txnVersion``), MERGE the newest record per key into silver in
one commit carrying the batch's counts → write the run summary.

Exactly once: a batch's silver commit is its completion mark, and carries
where the transform stands as a txn action (:func:`include.contract.jobs.silver_app_id`),
which log checkpoints keep after Delta's log cleanup removed the commit. A
batch Spark replays after a crash is skipped when silver already has its
commit; a quarantine append it repeats is dropped by Delta (same app id and
version).

This module parses the arguments and wires the parts: where the run starts
(:mod:`spark_jobs.transform_plan`), the batch writer (:mod:`spark_jobs.silver_writer`)
and the run's summary (:mod:`spark_jobs.transform_summary`).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from include.contract import summaries as contract
from include.contract.errors import TransformError
from include.contract.jobs import TransformArgs
from include.contract.replay import ReplaySelection
from include.contract.routes import Routing
from include.contract.transform_spec import TransformSpec
from include.readers import spark_checkpoint
from spark_jobs import routed_transform
from spark_jobs.hadoop_files import checkpoint_files
from spark_jobs.job_common import (
    JobStep,
    job_main,
    parse_table_properties,
    write_summary,
)
from spark_jobs.routed_transform import RoutedSummary
from spark_jobs.silver_writer import open_writer, run_summary
from spark_jobs.table_properties import apply_to_tables, check_owner
from spark_jobs.transform_plan import (
    TransformConfig,
    drain_bronze,
    is_delta,
    plan_transform,
    read_checkpoint,
    read_silver_stand,
)
from spark_jobs.transform_summary import TransformSummary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = logging.getLogger("bronze_to_silver")


def parse_config(argv: list[str]) -> TransformConfig:
    """Arguments → :class:`TransformConfig`; the spec comes as a JSON file written by the operator."""
    a = TransformArgs.from_args(argv)
    routing = None
    try:
        data = json.loads(Path(a.spec_file).read_text())
        if "routing" in data:
            routing = Routing.from_json(data["routing"])
            spec = routing.routes[0].transform
        else:
            spec = TransformSpec.from_json(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TransformError(f"{a.spec_file}: cannot read the transform spec: {exc}") from None
    try:
        properties = parse_table_properties(list(a.table_property))
    except ValueError as exc:
        raise TransformError(str(exc)) from None
    replay = None
    if a.replay_file:
        try:
            replay = ReplaySelection.from_json(json.loads(Path(a.replay_file).read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise TransformError(f"{a.replay_file}: cannot read the replay request: {exc}") from None
        _check_replay_route(a.replay_file, replay, routing)
    return TransformConfig(a.pipeline, a.bronze_path, a.silver_path, a.quarantine_path, a.checkpoint_root,
                           spec, a.run_id, a.summary_path, a.max_files_per_trigger, properties,
                           a.registry_file, a.lock_epoch, replay, routing)  # fmt: skip


def _check_replay_route(path: str, replay: ReplaySelection, routing: Routing | None) -> None:
    """The replay's route against the spec's routes. The Airflow side checked it against the pipeline file;
    a request file written by hand may not have been."""
    if routing is None and replay.route:
        raise TransformError(f"{path}: route: expected none (the pipeline does not route its records), got "
                             f"{replay.route!r}; clear quarantine_route")  # fmt: skip
    if routing is not None and replay.route not in routing.names:
        raise TransformError(f"{path}: route: expected one of the pipeline's routes ({', '.join(routing.names)}), "
                             f"got {replay.route!r}; name the route whose quarantine to replay")  # fmt: skip


def run(spark: SparkSession, cfg: TransformConfig) -> TransformSummary | RoutedSummary:
    """One transform run on an existing session; returns (and writes) its summary."""
    if cfg.routing is not None:
        return routed_transform.run(spark, cfg, cfg.routing)
    started = time.monotonic()
    check_owner(spark, cfg.silver_path, cfg.pipeline, "silver")
    check_owner(spark, cfg.quarantine_path, cfg.pipeline, "quarantine")
    last = read_silver_stand(spark, cfg.silver_path, cfg.pipeline)
    if last is not None and last.source == "state":
        log.warning("silver's batch commit of epoch %s batch %s is no longer in its log (log cleanup); "
                    "the transform stands at bronze version %s as silver's state records",
                    last.epoch, last.batch_id, last.bronze_end.version)  # fmt: skip
    root = cfg.checkpoint_root
    files = checkpoint_files(spark, root)
    checkpoints, damaged = spark_checkpoint.read_epochs(root, read_checkpoint, files)
    plan = plan_transform(last, checkpoints, damaged)
    if plan.rebuilt_reason:
        log.warning("starting transform checkpoint epoch %s at bronze version %s: %s",
                    plan.epoch, plan.start.version, plan.rebuilt_reason)  # fmt: skip
    summary = run_summary(cfg, plan, last)
    phases = summary.phases_s
    phases["plan"] = time.monotonic() - started
    if is_delta(spark, cfg.bronze_path):
        checkpoint = spark_checkpoint.epoch_dir(root, plan.epoch)
        writer = open_writer(spark, cfg, plan, checkpoint, last, files, summary)
        phases["silver_schema"] = time.monotonic() - started - sum(phases.values())
        drain_bronze(spark, cfg, plan, checkpoint, checkpoints.get(plan.epoch), writer, writer.skip_replay)
        if cfg.replay is not None:
            summary.replay = writer.replay_quarantine(cfg.replay)
            phases["replay"] = time.monotonic() - started - sum(phases.values())
        writer.record_columns()
    apply_to_tables(spark, (cfg.silver_path, cfg.quarantine_path), cfg.table_properties, cfg.fence, cfg.pipeline)
    summary.duration_s = time.monotonic() - started
    phases["stream"] = summary.duration_s - sum(phases.values())
    log.info("transform phases: %s", ", ".join(f"{k} {v:.1f}s" for k, v in phases.items()))
    write_summary(cfg.summary_path, contract.TransformSummary.from_json(summary.to_json()).to_json())
    return summary


def _describe(summary: TransformSummary | RoutedSummary) -> str:
    if isinstance(summary, RoutedSummary):
        return summary.describe()
    s = summary.to_json()
    return (f"epoch={summary.epoch} read={s['read']} upserted={s['upserted']} deleted={s['deleted']} "
            f"quarantined={s['quarantined']} superseded={s['superseded']} duration={summary.duration_s:.1f}s")  # fmt: skip


#: The job as a step of a run's Spark application (``spark_jobs/run_steps.py``).
STEP = JobStep("bronze_to_silver", parse=parse_config, bad_argument=TransformError,
               run=run, describe=_describe)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Entry point: args -> session -> run -> summary line; exit 2 on bad arguments."""
    return job_main(STEP, argv)


if __name__ == "__main__":
    sys.exit(main())
