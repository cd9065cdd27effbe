"""The task log's one-line summary of each step's result, from the summary the job wrote."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from include.contract.json_values import Json
from include.contract.summaries import (
    BackfillSummary,
    MaintainSummary,
    RoutedTransformSummary,
    TransformSummary,
    ingest_step_summary,
)


def ingest_summary_text(summary: Mapping[str, Any]) -> str:
    """One line saying what the ingest (or backfill) step wrote to bronze."""
    s = ingest_step_summary(summary)
    if isinstance(s, BackfillSummary):
        return (
            f"backfill re-read {s.read} records in {len(s.ranges)} ranges, "
            f"inserted {s.inserted} missing from bronze, {s.present} were there already; "
            f"bronze version {s.bronze_version}, {s.duration_s:.1f}s in the job"
            + "".join(f"; {n}" for n in s.notes)
        )
    rebuilt = s.checkpoint_rebuilt
    return (
        f"{s.rows} rows in {len(s.batches)} batches, epoch {s.epoch}, "
        f"bronze version {s.bronze_version}, {s.duration_s:.1f}s in the job"
        + (f", checkpoint rebuilt: {rebuilt['reason']}" if rebuilt else "")
        + (f"; position set ({s.position_set['reason']}): {s.position_set['positions']}"
           if s.position_set else "")
    )


def _number(value: Json) -> float:
    """A count or a measure a job's summary holds (a JSON number; anything else reads as 0)."""
    return float(value) if isinstance(value, int | float) else 0.0


def maintain_summary_text(s: Mapping[str, Any]) -> str:
    """One line per run: each table's files and bytes before and after."""
    parts = []
    for name, t in MaintainSummary.from_json(s).tables.items():
        if "files_before" not in t:
            parts.append(f"{name} {t.get('skipped') or t.get('error')}")
            continue
        parts.append(f"{name} files {t['files_before']} -> {t['files_after']}, "
                     f"{_number(t['bytes_before']) / 1e6:.1f} -> {_number(t['bytes_after']) / 1e6:.1f} MB "
                     f"in {_number(t['seconds']):.1f}s")  # fmt: skip
    return "; ".join(parts) or "no table"


def transform_summary_text(summary: Mapping[str, Any]) -> str:
    """One line saying where the records a transform read went; a routed transform's says it per route."""
    if "routes" in summary:
        return routed_summary_text(summary)
    s = TransformSummary.from_json(summary)
    bad = ", ".join(f"{n} {f}" for f, n in sorted(s.quarantine_fields.items(), key=lambda i: -i[1]))
    text = (
        f"read {s.read} from bronze: {s.upserted} upserted, {s.deleted} deleted, "
        f"{s.quarantined} quarantined{f' ({bad})' if bad else ''}, {s.superseded} superseded by newer"
    )
    if s.replayed:
        text += f", {s.replayed} already applied"
    if s.skipped:
        text += f", {s.skipped} skipped (change events that are no row change)"
    if s.truncated_rows:
        text += f"; source truncates deleted {s.truncated_rows} silver rows"
    text += f"; silver version {s.silver_version}, epoch {s.epoch}, {s.duration_s:.1f}s in the job"
    if s.replay is not None:
        counted = s.replay.get("outcomes")
        outcomes = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(counted.items() if isinstance(counted, dict)
                                                                            else ()))  # fmt: skip
        text += f"; quarantine replay: {s.replay.get('selected', 0)} selected" + (f": {outcomes}" if outcomes else "")
    if s.fields_added:
        text += "; fields added: " + ", ".join(f"{f['name']} {f['type']}" for f in s.fields_added)
    if s.fields_ignored:
        text += "; fields ignored: " + ", ".join(sorted(s.fields_ignored))
        if s.fields_unknown > len(s.fields_ignored):
            text += f" and {s.fields_unknown - len(s.fields_ignored)} more (transform.limits.field_names)"
    if s.checkpoint_rebuilt:
        text += f"; checkpoint rebuilt: {s.checkpoint_rebuilt['reason']}"
    if s.value_schema:
        vs = s.value_schema
        text += f"; values read with subject {vs['subject']} version {vs['version']} (schema id {vs['id']})"
    return text


def routed_summary_text(summary: Mapping[str, Any]) -> str:
    """One line for a routed transform: the bronze records read, where they went per route, the unrouted."""
    s = RoutedTransformSummary.from_json(summary)
    unrouted = s.unrouted
    policy = unrouted.get("policy", "quarantine")
    kept = {"quarantine": "quarantined", "ignore": "counted and left in bronze"}.get(str(policy), str(policy))
    routes = "; ".join(f"route {name}: {transform_summary_text(r.raw)}" for name, r in s.routes.items())
    return (f"read {s.bronze_read} from bronze, routed in {len(s.accounts)} batch(es); {unrouted.get('records', 0)} "
            f"unrouted ({kept}); {routes}")
