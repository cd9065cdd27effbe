"""A dry run's reads: the request planned and checked as the real run would be, and what it would do.

``check_request`` calls :func:`dry_run_report` for a request with ``dry_run: true``
instead of taking the pipeline's lock; the run's other tasks then skip and
``record_run`` writes the report to the ledger. Everything here reads (Kafka
through confluent-kafka, the tables and the ledger through delta-rs): no JVM,
no cluster, no write. The report itself is :mod:`include.contract.dry_run`.
"""

from __future__ import annotations

import os

from include.config import PipelineConfig
from include.contract.actions import RequestError, RunRequest
from include.contract.dry_run import DryRunReport, Estimate, estimate, ranges_against
from include.orchestration import cluster_sizing, preflight_run, request_plan
from include.readers import delta_progress, kafka_state
from include.readers.object_store import TableOptions

#: What an estimate reads of the ledger's runs.
ESTIMATE_COLUMNS = ("outcome", "rows", "duration_s")


def dry_run_report(cfg: PipelineConfig, client: dict[str, str], request: RunRequest, *,
                   cpu_count: int | None = None) -> DryRunReport:  # fmt: skip
    """What ``request`` would do now (:class:`DryRunReport`): refused with the real run's own message where
    ``check_request``'s plan or the preflight would refuse it, else per range or per reason what it would
    insert or replay, and the time and cluster it would take."""
    options = TableOptions(cfg)
    reasons: dict[str, int] = {}  # a replay's selected rows per reason, from the plan's one pass over quarantine
    try:
        plan = request_plan.plan_request(cfg, client, request, options=options, reasons=reasons)
    except RequestError as exc:
        return DryRunReport(request.action, refused=str(exc))
    # One read of the ledger for the preflight's witness and for the estimate.
    runs = preflight_run.preflight_ledger(cfg, options=options, extra_columns=ESTIMATE_COLUMNS)
    verdict, lag, _ = preflight_run.run_preflight(cfg, client, request, ledger_rows=runs, options=options)
    if not verdict.ok:
        return DryRunReport(request.action, refused=verdict.failure_message(cfg.name), notes=plan.notes)
    if plan.replay is not None:
        assert request.replay is not None
        rows = int(str(plan.replay["rows"]))
        # A replay runs inside a normal run, on the cluster the normal run's backlog chooses.
        route = {"route": request.replay.route} if request.replay.route else {}
        return DryRunReport(request.action, replay={"rows": rows, "reasons": reasons, **route},
                            estimate=Estimate(*estimate(runs, rows)), notes=plan.notes)  # fmt: skip
    # Kafka's offsets as the preflight just read them; only a topic the table read that no longer matches
    # the pipeline's topics (planned by name) is asked for again.
    kafka = {(p.topic, p.partition): (p.earliest, p.latest) for p in lag.partitions}
    missing = sorted({str(r["topic"]) for r in plan.ranges} - {t for t, _ in kafka})
    if missing:
        topics = kafka_state.read_topics(client, topics=missing, timeout_s=preflight_run.KAFKA_TIMEOUT_S)
        kafka |= {(t, p): (s.earliest, s.latest) for t, state in topics.items() for p, s in state.partitions.items()}
    spans = {}
    for r in plan.ranges:
        key = (str(r["topic"]), int(str(r["partition"])))
        earliest, latest = kafka[key]
        spans[key] = (max(int(str(r["from"])), earliest), min(int(str(r["until"])), latest))
    in_bronze = delta_progress.bronze_rows_in(cfg.tables.bronze_path, spans, storage_options=options("bronze_path"))
    offsets = plan.offsets or 0
    cluster = cluster_sizing.choose(cfg.cluster, offsets, cpu_count or os.cpu_count() or 1).reason
    return DryRunReport(request.action, ranges=ranges_against(plan.ranges, kafka, in_bronze),
                        estimate=Estimate(*estimate(runs, offsets), cluster=cluster), notes=plan.notes)  # fmt: skip
