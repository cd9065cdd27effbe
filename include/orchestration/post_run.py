"""The reads behind the tasks after the Spark steps: the continuity check and the consumer group's offsets.

``check_continuity`` checks the commits the run wrote against where the preflight saw the tables
(:func:`transform_versions` is that starting point for silver); ``mirror_offsets`` commits the table's
position to the pipeline's consumer group and measures the lag after the run from the same reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from include.config import PipelineConfig
from include.contract import backfill_check, transform_check
from include.contract.continuity import ContinuityReport, check_run
from include.contract.handoffs import TransformBefore
from include.contract.locations import local_path
from include.contract.offsets import PositionMap
from include.contract.preflight import LagReport
from include.contract.routes import SilverTarget
from include.contract.silver_stand import SilverStand
from include.contract.transform_check import TransformCheck
from include.orchestration.preflight_run import KAFKA_TIMEOUT_S, lag_report, read_progress
from include.readers import delta_progress, kafka_state, spark_checkpoint
from include.readers.object_store import TableOptions


def checkpoint_position(cfg: PipelineConfig) -> PositionMap | None:
    """Committed offsets of the newest checkpoint epoch, or ``None`` when it is not a local folder."""
    root = local_path(cfg.tables.checkpoint_root)
    if root is None:
        return None
    epochs = spark_checkpoint.epoch_dirs(root)
    if not epochs:
        return None
    state = spark_checkpoint.read_state(epochs[max(epochs)])
    return state.position if state else None


def check_continuity(cfg: PipelineConfig, client: dict[str, str], *, run_id: str, version_before: int | None,
                     start: PositionMap | None, job_summary: dict[str, Any] | None,
                     transform_before: TransformBefore | None = None, transform_summary: dict[str, Any] | None = None,
                     options: TableOptions | None = None) -> ContinuityReport:  # fmt: skip
    """Check the commits this run wrote (the Delta log after ``version_before``).

    ``start`` is where the table stood at ``version_before`` (from the preflight).
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    options = options or TableOptions(cfg)
    bronze_options = options("bronze_path")
    # Opened once: every read below sees one version.
    bronze = delta_progress.opened(cfg.tables.bronze_path, storage_options=bronze_options)
    _, commits = delta_progress.commits_since(bronze, version_before, storage_options=bronze_options)

    def count(topic: str, partition: int, frm: int, until: int) -> int:
        return kafka_state.count_records(client, topic, partition, frm, until, timeout_s=KAFKA_TIMEOUT_S)

    backfill = job_summary is not None and job_summary.get("kind") == "backfill"
    report = check_run(
        run_id=run_id,
        start=start,
        commits=commits,
        checkpoint_position=checkpoint_position(cfg),
        expected_rows=None if job_summary is None or backfill else int(job_summary["rows"]),
        count_records=count,
        dag_id=cfg.name,
        job_versions=None if job_summary is None or backfill else reported_versions(job_summary),
    )
    if backfill:
        report.backfill = backfill_check.check_backfill(
            run_id=run_id, commits=delta_progress.backfill_commits_since(bronze, version_before,
                                                                         storage_options=bronze_options),
            expected=job_summary, count_records=count,
        )  # fmt: skip
    if cfg.has_transform:
        report.transform = check_transform(cfg, before=transform_before or TransformBefore(), job_summary=transform_summary,
                                           bronze=bronze, options=options)  # fmt: skip
    return report


def reported_versions(job_summary: Mapping[str, Any]) -> set[int] | None:
    """The Delta versions the reporting try of ingest committed (its summary's batches); ``None`` when the
    summary does not list them, and every commit of the run is taken as that try's."""
    batches = job_summary.get("batches")
    if not isinstance(batches, list) or any("delta_version" not in b for b in batches):
        return None
    return {int(b["delta_version"]) for b in batches if b.get("delta_version") is not None}


def transform_versions(cfg: PipelineConfig, *, options: TableOptions | None = None) -> TransformBefore:
    """Silver's and quarantine's versions now, and where the transform stands: where the run's transform check starts.

    The stand comes from silver's state, so the check can chain the run's first
    batch to it even when log cleanup has removed the batch commit before it.
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    options = options or TableOptions(cfg)
    silver_options, quarantine_options = options("silver_path"), options("quarantine_path")

    def before(silver_path: str, quarantine_path: str) -> TransformBefore:
        silver = delta_progress.opened(silver_path, storage_options=silver_options)
        stand = delta_progress.silver_stand(silver, cfg.name, storage_options=silver_options)
        return TransformBefore(
            silver_version=delta_progress.table_version(silver, storage_options=silver_options),
            quarantine_version=delta_progress.table_version(quarantine_path, storage_options=quarantine_options),
            silver_stand=stand.to_json() if stand is not None else None,
        )  # fmt: skip

    if cfg.routing is None:
        return before(cfg.tables.silver_path, cfg.tables.quarantine_path)
    # Routes' tables lie under silver_path and quarantine_path: the same store, the same options.
    return TransformBefore(
        routes={r.name: before(r.silver_path, r.quarantine_path) for r in cfg.routing.routes},
        unrouted_version=delta_progress.table_version(cfg.routing.unrouted_path, storage_options=quarantine_options),
    )  # fmt: skip


def check_transform(cfg: PipelineConfig, *, before: TransformBefore, job_summary: dict[str, Any] | None,
                    bronze: delta_progress.TableRef | None = None,
                    options: TableOptions | None = None) -> TransformCheck:  # fmt: skip
    """Check the silver batches written since ``before`` (:func:`transform_versions` of the preflight).

    ``bronze`` is bronze :func:`include.readers.delta_progress.opened` by the caller (``None``: opened here).
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    options = options or TableOptions(cfg)
    bronze = cfg.tables.bronze_path if bronze is None else bronze
    bronze_options = options("bronze_path")
    silver_options, quarantine_options = options("silver_path"), options("quarantine_path")

    def route_run(target: SilverTarget, at: TransformBefore) -> transform_check.RouteRun:
        previous, commits = delta_progress.silver_commits_since(target.silver_path, at.silver_version,
                                                                storage_options=silver_options)  # fmt: skip
        quarantined = delta_progress.quarantine_rows_since(target.quarantine_path, at.quarantine_version,
                                                           storage_options=quarantine_options)  # fmt: skip
        stand = at.silver_stand
        return transform_check.RouteRun(previous, tuple(commits), quarantined,
                                        SilverStand.from_json(stand) if stand else None)  # fmt: skip

    # A route's table is checked from where the preflight found it (a table it did not know yet: from its start).
    runs = {t.route or "": route_run(t, (before.routes or {}).get(t.route, TransformBefore()) if t.route else before)
            for t in cfg.silver_targets()}  # fmt: skip
    starts = [c.bronze_start.version for run in runs.values() for c in run.commits]
    if starts:  # only the bronze versions the batches read: cost follows the run, not the history
        bronze_version, rows = delta_progress.bronze_rows_by_version(bronze, min(starts), storage_options=bronze_options)
    else:
        bronze_version, rows = delta_progress.bronze_data_version(bronze, storage_options=bronze_options), {}
    if cfg.routing is None:
        (run,) = runs.values()
        return transform_check.check_transform(
            previous=run.previous, commits=run.commits, bronze_rows=rows, bronze_version=bronze_version,
            quarantine_rows=run.quarantine_rows, expected=job_summary, stand_before=run.stand_before,
        )  # fmt: skip
    unrouted = delta_progress.unrouted_rows_since(cfg.routing.unrouted_path, before.unrouted_version,
                                                  storage_options=quarantine_options)  # fmt: skip
    return transform_check.check_routed(routes=runs, bronze_rows=rows, bronze_version=bronze_version,
                                        unrouted_rows=unrouted, unrouted_policy=cfg.routing.unrouted,
                                        expected=job_summary)  # fmt: skip


def mirror_offsets(cfg: PipelineConfig, client: dict[str, str], *,
                   options: TableOptions | None = None) -> tuple[dict[str, dict[str, int]], LagReport]:  # fmt: skip
    """Commit the table's next offsets as the pipeline's consumer-group offsets; returns them and the lag after.

    The lag comes from the same read of Kafka and of the table, so
    ``record_run`` need not open bronze and ask Kafka once more.
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    topics = kafka_state.read_topics(client, topics=cfg.kafka.topics, pattern=cfg.kafka.topic_pattern,
                                     timeout_s=KAFKA_TIMEOUT_S)  # fmt: skip
    progress = read_progress(cfg, topics, options=options)
    lag = lag_report(cfg, client, topics, progress)
    if progress is None:
        return {}, lag
    positions = {(t, p): o for t, parts in progress.next_offsets.items() for p, o in parts.items()}
    kafka_state.commit_group_offsets(client, cfg.consumer_group, positions, timeout_s=KAFKA_TIMEOUT_S)
    committed = {t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(progress.next_offsets.items())}
    return committed, lag
