"""A routed transform: bronze's new records, each into the silver table of the route(s) that take it.

One stream over bronze, one checkpoint, one epoch for every route. Per
micro-batch :class:`RoutedBatchWriter` routes the batch once
(:mod:`spark_jobs.routing`), counts where every record goes (the batch's
:class:`~include.contract.routes.RoutingAccount`), applies
``transform.unrouted`` to the records no route takes, then hands each route
its records through that route's own :class:`~spark_jobs.silver_writer.SilverBatchWriter`
(its rules, its silver and quarantine tables).

Exactly once, per route: each route's silver commit is its batch's
completion mark and carries where the route stands in bronze (a txn action
of its own table), exactly as a single-table transform's does. A batch that
Spark replays after a crash is skipped by the routes that hold it and applied
by the others; the unrouted records' quarantine append carries its own app
id and the batch id, so Delta drops a repeat of it. Every route's commit of a
batch carries the batch's account, so the check after a run proves that the
batch's bronze records were all routed or counted as unrouted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from include.contract import summaries as contract
from include.contract.errors import TransformError
from include.contract.jobs import quarantine_app_id
from include.contract.routes import UNROUTED, Routing, RoutingAccount, unrouted_metadata
from include.readers import spark_checkpoint
from include.readers.schema_registry import RegistryClient
from spark_jobs import routing as routes
from spark_jobs.delta_commits import check_fence
from spark_jobs.formats.schemas import read_registry_file
from spark_jobs.hadoop_files import checkpoint_files
from spark_jobs.job_common import BatchWriter, PhaseTimer, failpoint, keep_for_batch, release, write_summary
from spark_jobs.silver_writer import SilverBatchWriter, open_writer, run_summary
from spark_jobs.table_properties import apply_to_tables, check_owner
from spark_jobs.transform_plan import (
    TransformConfig,
    TransformPlan,
    already_in_silver,
    drain_bronze,
    is_delta,
    plan_routed,
    read_checkpoint,
    read_silver_stand,
)
from spark_jobs.transform_summary import TransformSummary

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("bronze_to_silver")


@dataclass
class RoutedSummary:
    """What a routed transform run did: each route's :class:`TransformSummary` and each batch's account."""

    pipeline: str
    run_id: str
    epoch: int
    routes: dict[str, TransformSummary]
    unrouted_policy: str
    #: Per batch written (not skipped by every route): ``{batch_id, account, duration_s, phases}``.
    accounts: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        unrouted = sum(int(a["account"]["unrouted"]) for a in self.accounts)
        return {
            "pipeline": self.pipeline,
            "run_id": self.run_id,
            "epoch": self.epoch,
            "routes": {name: s.to_json() for name, s in self.routes.items()},
            "unrouted": {
                "policy": self.unrouted_policy,
                "records": unrouted,
                "quarantined": unrouted if self.unrouted_policy == "quarantine" else 0,
            },
            "bronze_read": sum(int(a["account"]["bronze"]) for a in self.accounts),
            "accounts": list(self.accounts),
            "duration_s": round(self.duration_s, 3),
            "phases_s": {k: round(v, 3) for k, v in self.phases_s.items()},
        }

    def describe(self) -> str:
        """The summary line: the records read, each route's outcome, the unrouted."""
        s = self.to_json()
        parts = ", ".join(f"{name} {r['read']} read ({r['upserted']} upserted, {r['quarantined']} quarantined)"
                          for name, r in s["routes"].items())  # fmt: skip
        return (f"epoch={self.epoch} bronze_read={s['bronze_read']} routes: {parts}; unrouted "
                f"{s['unrouted']['records']} ({self.unrouted_policy}) duration={self.duration_s:.1f}s")  # fmt: skip


class RoutedBatchWriter(BatchWriter):
    """``foreachBatch`` sink of a routed transform: route the batch, apply the unrouted policy, write each route."""

    def __init__(self, spark: SparkSession, cfg: TransformConfig, routing: Routing, plan: TransformPlan,
                 writers: dict[str, SilverBatchWriter], names: routes.WriterNames | None,
                 summary: RoutedSummary) -> None:  # fmt: skip
        self.spark = spark
        self.cfg = cfg
        self.routing = routing
        self.plan = plan
        self.writers = writers
        self.names = names
        self.summary = summary

    def skip_replay(self, batch_id: int | None) -> None:
        """A batch with nothing left to read: each route records whether it holds the checkpoint's pending batch."""
        for writer in self.writers.values():
            writer.skip_replay(batch_id)

    def _write(self, df: DataFrame, batch_id: int) -> None:
        from pyspark import StorageLevel

        started = time.monotonic()
        if all(already_in_silver(w.last, w.plan, batch_id) for w in self.writers.values()):
            self.skip_replay(batch_id)  # every route holds the batch: an earlier attempt wrote it all
            return
        timer = PhaseTimer()
        cached = [df.persist(StorageLevel.MEMORY_AND_DISK)]
        try:
            writers = self.names.lookup(cached[0]) if self.names is not None else {}
            routed = keep_for_batch(routes.with_routes(cached[0], self.routing, writers), cached)
            account, first = routes.account_of(routed, self.routing)
            timer.lap("route")
            problems = account.problems(self.routing.names)
            if problems:
                raise TransformError(f"batch {batch_id}: the routing account does not add up: {'; '.join(problems)}")
            capped = self.names is not None and self.names.capped
            if first is not None and self.routing.unrouted == "fail":
                topic, partition, offset = first
                raise TransformError(
                    f"batch {batch_id}: {account.unrouted} record(s) of the batch match no route, the first at topic "
                    f"{topic} partition {partition} offset {offset}; {routes.unrouted_reason(self.routing, capped)} "
                    "(transform.unrouted is fail: "
                    "nothing of the batch was written, and the next run reads it again)",
                    topic=topic, partition=partition, offsets=(offset,), table=self.cfg.bronze_path,
                )  # fmt: skip
            if account.unrouted and self.routing.unrouted == "quarantine":
                self._quarantine_unrouted(routed, account, batch_id, capped)
            timer.lap("unrouted")
            failpoint("routes", batch_id, when="before")  # routed and counted, no route written
            for name, writer in self.writers.items():
                writer.account = account
                writer._write(routes.routed_to(routed, name), batch_id)
                failpoint(f"route_{name}", batch_id)  # this route committed, the next ones not yet
            timer.lap("routes")
        finally:
            release(cached)
        self.summary.accounts.append({"batch_id": batch_id, "account": account.to_json(),
                                      "duration_s": round(time.monotonic() - started, 3),
                                      "phases": {k: round(v, 3) for k, v in timer.phases.items()}})  # fmt: skip
        log.info("batch %s routed: %s (%s)", batch_id, account.to_json(), timer.line())

    def _quarantine_unrouted(self, routed: DataFrame, account: RoutingAccount, batch_id: int,
                             capped: bool) -> None:  # fmt: skip
        """The batch's unrouted records appended to the unrouted quarantine table, idempotently (its own app id
        and the batch id: a replayed batch's repeat is dropped by Delta)."""
        path = self.routing.unrouted_path
        check_fence(self.spark, path, self.cfg.fence)
        rows = routes.unrouted_rows(routed, routes.unrouted_reason(self.routing, capped), self.cfg.run_id,
                                    self.plan.epoch, batch_id)  # fmt: skip
        meta = unrouted_metadata(self.cfg.pipeline, self.cfg.run_id, self.plan.epoch, batch_id, account)
        (
            rows.write.format("delta").mode("append")
            .option("txnAppId", quarantine_app_id(f"{self.cfg.pipeline}.{UNROUTED}", self.plan.epoch))
            .option("txnVersion", batch_id)
            .option("userMetadata", meta)
            .save(path)
        )  # fmt: skip


def run(spark: SparkSession, cfg: TransformConfig, routing: Routing) -> RoutedSummary:
    """One routed transform run on an existing session; returns (and writes) its summary."""
    started = time.monotonic()
    for r in routing.routes:
        check_owner(spark, r.silver_path, cfg.pipeline, f"route {r.name}'s silver")
        check_owner(spark, r.quarantine_path, cfg.pipeline, f"route {r.name}'s quarantine")
    check_owner(spark, routing.unrouted_path, cfg.pipeline, "the unrouted records' quarantine")
    lasts = {r.name: read_silver_stand(spark, r.silver_path, cfg.pipeline) for r in routing.routes}
    root = cfg.checkpoint_root
    files = checkpoint_files(spark, root)
    checkpoints, damaged = spark_checkpoint.read_epochs(root, read_checkpoint, files)
    plans = plan_routed(lasts, checkpoints, damaged)
    # The stream starts where the route furthest behind stands: resumed mid-batch, the routes that hold the
    # batch stand after it, and the others must still read it.
    plan = min(plans.values(), key=lambda p: (p.start.version, p.start.index))
    if plan.rebuilt_reason:
        log.warning("starting transform checkpoint epoch %s at bronze version %s: %s", plan.epoch,
                    plan.start.version, plan.rebuilt_reason)  # fmt: skip
    summary = RoutedSummary(cfg.pipeline, cfg.run_id, plan.epoch, {}, routing.unrouted)
    summary.phases_s["plan"] = time.monotonic() - started
    checkpoint = spark_checkpoint.epoch_dir(root, plan.epoch)
    writers: dict[str, SilverBatchWriter] = {}
    if is_delta(spark, cfg.bronze_path):
        for r in routing.routes:
            route_cfg, route_plan, last = cfg.for_route(r), plans[r.name], lasts[r.name]
            summary.routes[r.name] = run_summary(route_cfg, route_plan, last)
            writers[r.name] = open_writer(spark, route_cfg, route_plan, checkpoint, last, files, summary.routes[r.name])
            writers[r.name].route = r.name
        summary.phases_s["silver_schema"] = time.monotonic() - started - sum(summary.phases_s.values())
        batches = RoutedBatchWriter(spark, cfg, routing, plan, writers, _writer_names(cfg, routing), summary)
        drain_bronze(spark, cfg, plan, checkpoint, checkpoints.get(plan.epoch), batches, batches.skip_replay)
        if cfg.replay is not None:
            replayed = time.monotonic()
            summary.routes[cfg.replay.route].replay = writers[cfg.replay.route].replay_quarantine(cfg.replay)
            summary.phases_s["replay"] = time.monotonic() - replayed
        for writer in writers.values():
            writer.record_columns()
    apply_to_tables(spark, (*(p for r in routing.routes for p in (r.silver_path, r.quarantine_path)),
                            routing.unrouted_path), cfg.table_properties, cfg.fence, cfg.pipeline)  # fmt: skip
    summary.duration_s = time.monotonic() - started
    summary.phases_s["stream"] = summary.duration_s - sum(summary.phases_s.values())
    write_summary(cfg.summary_path, contract.RoutedTransformSummary.from_json(summary.to_json()).to_json())
    return summary


def _writer_names(cfg: TransformConfig, routing: Routing) -> routes.WriterNames | None:
    """The registry lookups of record names and subjects, when a route's match needs them."""
    if not any(r.match.needs_registry for r in routing.routes):
        return None
    settings = read_registry_file(cfg.registry_file)
    client = RegistryClient(settings["url"], username=settings.get("username"), password=settings.get("password"))
    return routes.WriterNames(client, max(r.transform.limits.schema_ids for r in routing.routes))
