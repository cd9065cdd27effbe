"""What each task of a pipeline's run read and wrote, as OpenLineage datasets and facets (docs/lineage.md).

Airflow's OpenLineage provider asks an operator for its lineage through
``get_openlineage_facets_on_start/complete/failure``, and only when a
transport is configured; with none, nothing here ever runs. The operators
(:mod:`include.orchestration.job_operator`, and the continuity check in
:mod:`include.orchestration.tasks`) answer with the functions below, from
what their step already holds in memory: the pipeline file, and the summary
or report the step returned. No table or Kafka read happens here: the
provider gives extraction a few seconds, and a failure is only a warning in
the task's log, never a failed run.

Datasets are named the OpenLineage way (its naming spec): a topic is
``kafka://<first bootstrap host>:<port>`` / ``<topic>``; a table on this
machine is ``file`` / its absolute path; on S3 (``s3a://`` or ``s3://``) it is
``s3://<bucket>`` / its key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from include.config import PipelineConfig
from include.contract.continuity import earlier_tries
from include.contract.errors import ContractError
from include.contract.summaries import (
    BackfillSummary,
    MaintainSummary,
    RoutedTransformSummary,
    TransformSummary,
    ingest_step_summary,
)

if TYPE_CHECKING:  # the provider is imported only when lineage is asked for
    from typing import TypeAlias

    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.facet_v2 import RunFacet

    #: What each function here returns: input and output datasets, and run facets (lineage_facets' among them).
    Lineage: TypeAlias = OperatorLineage[Dataset, RunFacet]

#: Kafka's port when a bootstrap server names none.
KAFKA_DEFAULT_PORT = 9092
#: The name of the transform's field-rule assertions in the data-quality facet on bronze.
FIELD_RULES = "field rules"


def kafka_namespace(bootstrap_servers: str) -> str:
    """``kafka://host:port`` of the first server in ``bootstrap.servers`` (a listener prefix such as
    ``SASL_SSL://`` dropped, Kafka's default port added when none is given)."""
    first = bootstrap_servers.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    if not first:
        raise ContractError(f"no bootstrap server in {bootstrap_servers!r}")
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit() or (host.count(":") and not host.endswith("]")):
        host, port = first, str(KAFKA_DEFAULT_PORT)  # no port, or a bare IPv6 address
    return f"kafka://{host}:{port}"


def table_dataset(location: str) -> tuple[str, str]:
    """``(namespace, name)`` of a table at ``location``: a local path (or ``file:`` URI) is ``file`` and
    its absolute path; ``s3a://bucket/key`` and ``s3://bucket/key`` are ``s3://bucket`` and ``key``."""
    parts = urlsplit(location)
    if parts.scheme in ("s3a", "s3"):
        if not parts.netloc:
            raise ContractError(f"no bucket in {location!r}")
        return f"s3://{parts.netloc}", parts.path.strip("/")
    if parts.scheme == "file":
        return "file", os.path.abspath(parts.path)
    if parts.scheme and len(parts.scheme) > 1:  # not a Windows drive letter
        raise ContractError(f"{location!r}: lineage names only local and S3 tables")
    return "file", os.path.abspath(location)


def _dataset(kind: type, location: str, **facets: Any) -> Any:
    namespace, name = table_dataset(location)
    return kind(namespace=namespace, name=name, **facets)


def ingest_lineage(cfg: PipelineConfig, bootstrap_servers: str, summary: Mapping[str, Any] | None) -> Lineage:
    """The ingest task: the topics it read into bronze. With the step's summary (an ingestion's or a
    backfill's): the topics it actually read, each with its row count, bronze's new version and row
    count, and the offsets per partition (run facet ``kde_kafkaOffsets``). Without one (the task starting
    or failing): the topics the pipeline names (none for a ``topic_pattern``) and bronze."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import dataset_version_dataset
    from openlineage.client.facet_v2 import input_statistics_input_dataset as stats_in
    from openlineage.client.facet_v2 import output_statistics_output_dataset as stats_out

    from include.orchestration.lineage_facets import KafkaOffsetsRunFacet

    namespace = kafka_namespace(bootstrap_servers)
    if summary is None:
        inputs: list[Dataset] = [InputDataset(namespace=namespace, name=t) for t in cfg.kafka.topics or ()]
        return OperatorLineage(inputs=inputs, outputs=[_dataset(OutputDataset, cfg.tables.bronze_path)])
    s = ingest_step_summary(summary, strict=False)
    rows_of = {topic: sum(rows for p in parts.values() if isinstance(rows := p.get("rows"), int))
               for topic, parts in s.partitions.items()}  # fmt: skip
    inputs = [
        InputDataset(namespace=namespace, name=topic,
                     inputFacets={"inputStatistics": stats_in.InputStatisticsInputDatasetFacet(rowCount=rows)})
        for topic, rows in sorted(rows_of.items())
    ]  # fmt: skip
    facets: dict[str, Any] = {}
    if s.bronze_version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(s.bronze_version))
    bronze = _dataset(OutputDataset, cfg.tables.bronze_path, facets=facets, outputFacets={
        "outputStatistics": stats_out.OutputStatisticsOutputDatasetFacet(rowCount=s.rows)})  # fmt: skip
    backfill = isinstance(s, BackfillSummary)
    offsets = KafkaOffsetsRunFacet(
        kind="backfill" if backfill else "ingest", rows=s.rows, commits=s.commits, epoch=s.epoch,
        bronzeVersion=s.bronze_version, partitions={t: dict(p) for t, p in s.partitions.items()},
    )  # fmt: skip
    return OperatorLineage(inputs=inputs, outputs=[bronze], run_facets={"kde_kafkaOffsets": offsets})


def transform_lineage(cfg: PipelineConfig, summary: Mapping[str, Any] | None) -> Lineage:
    """The transform task: bronze in; silver and quarantine out. With the step's summary: the field
    rules as data-quality assertions on bronze (one failed assertion per field that sent records to
    quarantine, with the count; one passing assertion when none did), silver's schema and version, each
    output's row count, and the outcome counts (run facet ``kde_transformOutcome``)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import data_quality_assertions_dataset as dq
    from openlineage.client.facet_v2 import dataset_version_dataset, schema_dataset
    from openlineage.client.facet_v2 import output_statistics_output_dataset as stats_out

    from include.orchestration.lineage_facets import TransformOutcomeRunFacet

    tables = cfg.tables
    targets = cfg.silver_targets()
    unrouted_path = [cfg.routing.unrouted_path] if cfg.routing is not None else []
    if summary is None:
        return OperatorLineage(inputs=[_dataset(InputDataset, tables.bronze_path)],
                               outputs=[_dataset(OutputDataset, p) for t in targets
                                        for p in (t.silver_path, t.quarantine_path)]
                               + [_dataset(OutputDataset, p) for p in unrouted_path])  # fmt: skip
    routed = RoutedTransformSummary.from_json(summary, strict=False) if cfg.routing is not None else None
    parts = routed.routes if routed is not None else {"": TransformSummary.from_json(summary, strict=False)}
    assertions: list[Any] = []
    outputs: list[Any] = []
    for target in targets:
        s = parts.get(target.route or "")
        if s is None:
            continue
        # With routes each field is named route.field: two routes may have fields of one name.
        prefix = f"{target.route}." if target.route else ""
        assertions += [
            dq.Assertion(assertion=FIELD_RULES, success=False, column=f"{prefix}{field}", actual=str(count),
                         expected="0", description=f"{count} records quarantined for field {prefix}{field!r}")
            for field, count in sorted(s.quarantine_fields.items())
        ]  # fmt: skip
        silver_facets: dict[str, Any] = {}
        if s.silver_columns:
            silver_facets["schema"] = schema_dataset.SchemaDatasetFacet(fields=[
                schema_dataset.SchemaDatasetFacetFields(name=str(c["name"]), type=str(c["type"])) for c in s.silver_columns])  # fmt: skip
        if s.silver_version is not None:
            silver_facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(s.silver_version))
        outputs.append(_dataset(OutputDataset, target.silver_path, facets=silver_facets, outputFacets={
            "outputStatistics": stats_out.OutputStatisticsOutputDatasetFacet(rowCount=(s.upserted or 0) + (s.deleted or 0))}))  # fmt: skip
        outputs.append(_dataset(OutputDataset, target.quarantine_path, outputFacets={
            "outputStatistics": stats_out.OutputStatisticsOutputDatasetFacet(rowCount=s.quarantined or 0)}))  # fmt: skip
    quarantined = sum(s.quarantined or 0 for s in parts.values())
    if not assertions:
        assertions = [dq.Assertion(assertion=FIELD_RULES, success=True, actual=str(quarantined), expected="0",
                                   description="no record was quarantined")]  # fmt: skip
    bronze = _dataset(InputDataset, tables.bronze_path,
                      inputFacets={"dataQualityAssertions": dq.DataQualityAssertionsDatasetFacet(assertions=assertions)})  # fmt: skip
    if routed is None:
        s = parts[""]
        outcome = TransformOutcomeRunFacet(
            read=s.read or 0, upserted=s.upserted or 0, deleted=s.deleted or 0, quarantined=s.quarantined or 0,
            superseded=s.superseded or 0, replayed=s.replayed, skipped=s.skipped, truncatedRows=s.truncated_rows,
            epoch=s.epoch, silverVersion=s.silver_version, quarantineFields=dict(s.quarantine_fields), replay=s.replay,
        )  # fmt: skip
    else:
        unrouted = routed.unrouted
        outputs += [_dataset(OutputDataset, p, outputFacets={"outputStatistics": stats_out.OutputStatisticsOutputDatasetFacet(
            rowCount=int(str(unrouted.get("quarantined") or 0)))}) for p in unrouted_path]  # fmt: skip
        totals = {k: sum(getattr(s, k) or 0 for s in parts.values())
                  for k in ("upserted", "deleted", "quarantined", "superseded", "replayed", "skipped", "truncated_rows")}  # fmt: skip
        outcome = TransformOutcomeRunFacet(
            read=routed.bronze_read or 0, upserted=totals["upserted"], deleted=totals["deleted"],
            quarantined=totals["quarantined"], superseded=totals["superseded"], replayed=totals["replayed"],
            skipped=totals["skipped"], truncatedRows=totals["truncated_rows"], epoch=routed.epoch,
            routes={name: {"read": s.read or 0, "upserted": s.upserted or 0, "deleted": s.deleted or 0,
                           "quarantined": s.quarantined or 0, "superseded": s.superseded or 0,
                           "replayed": s.replayed, "silverVersion": s.silver_version}
                    for name, s in parts.items()},
            unrouted=dict(unrouted),
            # A replay runs on one route; its selection names it.
            replay=next((s.replay for s in parts.values() if s.replay is not None), None),
        )  # fmt: skip
    return OperatorLineage(inputs=[bronze], outputs=outputs, run_facets={"kde_transformOutcome": outcome})


def continuity_lineage(cfg: PipelineConfig, report: Mapping[str, Any] | None) -> Lineage:
    """The continuity check: it reads bronze (and silver, with a transform). With its report: the
    verdict as a data-quality assertion on bronze, and the report (run facet ``kde_continuity``)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset
    from openlineage.client.facet_v2 import data_quality_assertions_dataset as dq

    from include.orchestration.lineage_facets import ContinuityRunFacet

    read = [cfg.tables.bronze_path] + [t.silver_path for t in cfg.silver_targets()]
    if report is None:
        return OperatorLineage(inputs=[_dataset(InputDataset, path) for path in read])
    ok = bool(report.get("ok"))
    violations = [str(v) for v in report.get("violations") or ()]
    verdict = dq.Assertion(assertion="offset continuity", success=ok, expected="0 violations",
                           actual=f"{len(violations)} violations",
                           description="the run's commits chain on from where the table stood before it")  # fmt: skip
    inputs = [_dataset(InputDataset, cfg.tables.bronze_path,
                       inputFacets={"dataQualityAssertions": dq.DataQualityAssertionsDatasetFacet(assertions=[verdict])})]  # fmt: skip
    inputs += [_dataset(InputDataset, path) for path in read[1:]]
    earlier_rows, earlier_commits = earlier_tries(report)
    facet = ContinuityRunFacet(
        continuous=ok, commits=int(report.get("commits") or 0), rows=int(report.get("rows") or 0),
        partitions=list(report.get("partitions") or ()), violations=violations,
        notes=[str(n) for n in report.get("notes") or ()],
        earlierTriesRows=earlier_rows, earlierTriesCommits=earlier_commits,
    )  # fmt: skip
    return OperatorLineage(inputs=inputs, run_facets={"kde_continuity": facet})


def maintain_lineage(cfg: PipelineConfig, summary: Mapping[str, Any] | None) -> Lineage:
    """Table maintenance: the tables it rewrote (compaction, VACUUM, log checkpoint) and what it did to
    each (run facet ``kde_maintenance``). Without a summary nothing is known yet (maintenance may not be
    due): no dataset."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import OutputDataset

    from include.orchestration.lineage_facets import MaintenanceRunFacet

    if summary is None:
        return OperatorLineage()
    s = MaintainSummary.from_json(summary)
    locations = {**cfg.table_locations(), "ledger": cfg.tables.ledger_path}
    outputs = [_dataset(OutputDataset, locations[name]) for name in s.tables if name in locations]
    return OperatorLineage(outputs=outputs, run_facets={"kde_maintenance": MaintenanceRunFacet(tables=dict(s.tables))})
