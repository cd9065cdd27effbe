"""Lag and preflight: what a run will read, and whether it is safe to read it.

Pure functions over two snapshots taken without a JVM: the bronze table's
next offsets (from the Delta log, :mod:`include.readers.delta_progress`) and Kafka's
per-partition earliest and latest offsets and topic ids
(:class:`include.contract.offsets.TopicState`, read by :mod:`include.readers.kafka_state`).
The DAG's lag sensor and preflight task call them; each rule has a unit test
without a broker.

Terms: ``next`` is the table's next offset of a partition (where the next run
resumes), ``earliest`` Kafka's log start offset, ``latest`` its last stable
offset (what a read_committed reader can reach).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from include.contract import actions
from include.contract.offsets import Gap, PositionMap, TopicState
from include.contract.retention import PartitionForecast, duration_text, soonest

# Severity of a finding: BLOCKING stops the run before any cluster starts,
# DATA_LOSS follows the pipeline's data-loss policy, INFO is only reported.
BLOCKING = "blocking"
DATA_LOSS = "data_loss"
INFO = "info"


@dataclass(frozen=True)
class PartitionLag:
    """How far one partition's table position is behind Kafka."""

    topic: str
    partition: int
    next_offset: int | None
    earliest: int
    latest: int

    @property
    def start(self) -> int:
        """Where the next run reads from: the table's position, or Kafka's earliest if lost or unseen."""
        return self.earliest if self.next_offset is None else max(self.next_offset, self.earliest)

    @property
    def lag(self) -> int:
        """Offsets Kafka holds that the table has not read (holes included, so an upper bound of records)."""
        return max(0, self.latest - self.start)

    @property
    def lost(self) -> int:
        """Offsets deleted by Kafka before the table read them."""
        if self.next_offset is None:
            return 0
        return max(0, min(self.earliest, self.latest) - self.next_offset)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "next_offset": self.next_offset,
            "earliest": self.earliest,
            "latest": self.latest,
            "lag": self.lag,
            "lost": self.lost,
        }


@dataclass(frozen=True)
class LagReport:
    """Per-partition lag of a pipeline at one moment."""

    partitions: tuple[PartitionLag, ...]
    table_version: int | None
    oldest_pending: datetime | None = None
    #: Why the table's position cannot be used as it is (unreadable, or undone by a RESTORE); the
    #: preflight refuses the run with the action that fixes it.
    position_problem: str | None = None
    #: ``starting_offsets: latest`` and the table has not fixed where "latest" was yet: the next
    #: run records it, so records produced after that moment are read.
    start_unfixed: bool = False
    #: Records bronze holds that silver has not applied (a transform that failed or was never run); ``None``
    #: without a transform. They are work: a run with them pending is never skipped.
    silver_pending: int | None = None
    #: Per partition with unread records, the time left before Kafka's retention may delete them
    #: (:mod:`include.contract.retention`).
    retention: tuple[PartitionForecast, ...] = ()
    #: Why the time left is not known (e.g. the topic's settings could not be read); ``None`` when it is.
    retention_note: str | None = None

    @property
    def retention_left(self) -> PartitionForecast | None:
        """The partition whose unread records retention may delete first (``None``: none is bounded)."""
        return soonest(self.retention)

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    @property
    def total_lost(self) -> int:
        return sum(p.lost for p in self.partitions)

    def oldest_pending_age_s(self, now: datetime) -> float | None:
        """Seconds since the oldest unread record was written to Kafka; ``None`` without one."""
        if self.oldest_pending is None:
            return None
        return max(0.0, (now - self.oldest_pending).total_seconds())

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        return {
            "total_lag": self.total_lag,
            "total_lost": self.total_lost,
            "table_version": self.table_version,
            "oldest_pending": self.oldest_pending.isoformat() if self.oldest_pending else None,
            "oldest_pending_age_s": None if now is None else self.oldest_pending_age_s(now),
            "position_problem": self.position_problem,
            "start_unfixed": self.start_unfixed,
            "silver_pending": self.silver_pending,
            "partitions": [p.to_json() for p in self.partitions],
            "retention_left_s": None if self.retention_left is None else self.retention_left.left_s,
            "retention": [f.to_json() for f in self.retention],
            "retention_note": self.retention_note,
        }

    def summary_line(self, now: datetime) -> str:
        if self.position_problem:
            return f"position of the table unusable: {self.position_problem}"
        age = self.oldest_pending_age_s(now)
        busy = sum(1 for p in self.partitions if p.lag)
        text = f"lag {self.total_lag} records over {busy}/{len(self.partitions)} partitions"
        if age is not None:
            text += f", oldest pending record {age:.0f}s old"
        if self.total_lost:
            text += f", {self.total_lost} records lost to retention"
        if self.start_unfixed:
            text += "; the starting position 'latest' is not fixed in the table yet"
        if self.silver_pending:
            text += f"; silver lag {self.silver_pending} records (in bronze, not applied to silver)"
        first = self.retention_left
        if first is not None and first.left_s is not None:
            text += (f"; Kafka's retention ({first.bound}) may delete unread records of {first.topic} "
                     f"partition {first.partition} in {duration_text(first.left_s)} at the soonest")  # fmt: skip
        if self.retention_note:
            text += f"; time left before retention deletes unread records unknown: {self.retention_note}"
        return text


def measure_lag(
    table_next: PositionMap | None,
    kafka: Mapping[str, TopicState],
    *,
    table_version: int | None = None,
    starting_offsets: str = "earliest",
) -> LagReport:
    """Per-partition lag of the table (``None`` = no table yet) against Kafka.

    On a first run with ``starting_offsets == "latest"`` the job starts at the
    end of each partition, so there is no lag to read; the report says the
    start is not fixed yet, so the run goes on and the job records it.
    """
    rows = []
    for topic in sorted(kafka):
        known = (table_next or {}).get(topic, {})
        for p, state in sorted(kafka[topic].partitions.items()):
            nxt = known.get(p)
            if nxt is None and table_next is None and starting_offsets == "latest":
                nxt = state.latest
            rows.append(PartitionLag(topic, p, nxt, state.earliest, state.latest))
    unfixed = table_next is None and starting_offsets == "latest"
    return LagReport(tuple(rows), table_version, start_unfixed=unfixed)


@dataclass(frozen=True)
class Decision:
    """What the lag sensor does now: ``proceed``, ``wait`` or ``skip``, and why."""

    action: str
    reason: str


def lag_decision(report: LagReport, *, min_records: int, max_wait_s: float, now: datetime,
                 retention_margin_s: float | None = None) -> Decision:  # fmt: skip
    """Proceed at ``min_records`` of lag, once the oldest pending record waited ``max_wait_s``, or when
    Kafka's retention may delete unread records within ``retention_margin_s``.

    Nothing new and nothing lost: skip, so the run starts no cluster. Lost
    records always proceed, so the preflight reports them.
    """
    total = report.total_lag
    if report.position_problem:
        return Decision("proceed", "the table's position is unusable; preflight decides")
    if report.start_unfixed:
        return Decision(
            "proceed", "starting_offsets is latest and no run has fixed where that was; this run does"
        )
    if report.total_lost:
        return Decision("proceed", f"{report.total_lost} records were lost to retention; preflight decides")
    if report.silver_pending:
        # Silver's lag is work whatever min_records says: a transform that failed runs again now.
        return Decision(
            "proceed",
            f"silver lag {report.silver_pending} records: bronze holds records silver has not applied; "
            "this run's transform applies them",
        )
    if total == 0:
        return Decision("skip", "no new records in any partition")
    if total >= min_records:
        return Decision("proceed", f"lag {total} >= min_records {min_records}")
    first = report.retention_left
    if first is not None and first.left_s is not None and retention_margin_s is not None \
            and first.left_s < retention_margin_s:  # fmt: skip
        return Decision(
            "proceed",
            f"lag {total} < min_records {min_records}, but Kafka's retention ({first.bound}) may delete unread "
            f"records of {first.topic} partition {first.partition} in {duration_text(first.left_s)}, within "
            f"the retention margin of {duration_text(retention_margin_s)}",
        )
    age = report.oldest_pending_age_s(now)
    if age is not None and age >= max_wait_s:
        return Decision(
            "proceed",
            f"lag {total} < min_records {min_records}, but the oldest record "
            f"waited {age:.0f}s >= {max_wait_s:.0f}s",
        )
    return Decision("wait", f"lag {total} < min_records {min_records}")


@dataclass(frozen=True)
class Finding:
    """One preflight observation about a topic or partition."""

    kind: str
    severity: str
    topic: str
    partition: int | None
    message: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "topic": self.topic,
            "partition": self.partition,
            "message": self.message,
            "numbers": self.numbers,
        }


@dataclass(frozen=True)
class PreflightReport:
    """Every finding, the gaps the policy accepted, and whether the run may start."""

    findings: tuple[Finding, ...]
    accepted_gaps: tuple[Gap, ...]
    blocking: tuple[Finding, ...]
    topic_ids: dict[str, str]
    policy: str
    #: Where a position action (re-establish, after a RESTORE) makes the table stand: the job records
    #: it in a commit of its own and starts a new checkpoint epoch there.
    position_reset: dict[str, Any] | None = None
    #: Offsets ``skip_offsets`` passes at ingest: the job records them as gaps in a commit of its own,
    #: before any batch, and starts a new checkpoint epoch after them.
    skipped: tuple[Gap, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.blocking

    def failure_message(self, pipeline: str) -> str:
        lines = [f"preflight of pipeline {pipeline!r} stopped the run before any cluster started:"]
        lines += [f"  - {f.message}" for f in self.blocking]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "policy": self.policy,
            "findings": [f.to_json() for f in self.findings],
            "blocking": [f.message for f in self.blocking],
            "accepted_gaps": [g.to_json() for g in self.accepted_gaps],
            "topic_ids": dict(self.topic_ids),
            "position_reset": self.position_reset,
            "skipped": [g.to_json() for g in self.skipped],
        }

    def job_file(self) -> dict[str, Any]:
        """What the ingestion job's ``--preflight-file`` takes."""
        found = {
            "topic_ids": dict(self.topic_ids),
            "accepted_gaps": [g.to_json() for g in self.accepted_gaps],
        }
        if self.position_reset is not None:
            found["position_reset"] = dict(self.position_reset)
        if self.skipped:
            found["skipped"] = [g.to_json() for g in self.skipped]
        return found

    def summary_line(self) -> str:
        if not self.findings:
            return "preflight: ok, every partition continues where the table stands"
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f.kind] = counts.get(f.kind, 0) + 1
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        verdict = "ok" if self.ok else "FAILED"
        gaps = f", {len(self.accepted_gaps)} gaps recorded" if self.accepted_gaps else ""
        return f"preflight: {verdict} ({kinds}{gaps})"


def preflight(
    *,
    table_next: PositionMap | None,
    recorded_topic_ids: Mapping[str, str],
    kafka: Mapping[str, TopicState],
    configured_topics: tuple[str, ...],
    policy: str,
    dag_id: str = "<dag_id>",
) -> PreflightReport:
    """Compare the table's next offsets with what Kafka holds now, per partition.

    ``recorded_topic_ids`` are the ids the table's last commit saw;
    ``configured_topics`` the pipeline's topic list (empty for a pattern).
    ``policy`` is the pipeline's ``data_loss_policy``: ``fail`` makes lost
    records blocking, ``record_and_continue`` turns them into accepted gaps.
    ``dag_id`` names the DAG in the actions a refusal offers.
    """
    findings: list[Finding] = _missing_topics(configured_topics, kafka)
    gaps: list[Gap] = []
    positions = table_next or {}
    for topic in sorted(positions):
        state = kafka.get(topic)
        if state is None:
            findings += _gone_topic(topic, positions[topic], configured_topics)
            continue
        recreated = _recreated_topic(topic, state, recorded_topic_ids.get(topic))
        if recreated is not None:
            findings.append(recreated)
            continue
        _check_recorded_partitions(topic, positions[topic], state, policy, dag_id, findings, gaps)
        _check_new_partitions(topic, positions[topic], state, policy, dag_id, findings, gaps)
    if table_next is not None:
        findings += _new_topics(kafka, positions)
    return _report(findings, gaps, kafka, policy)


def _missing_topics(configured_topics: tuple[str, ...], kafka: Mapping[str, TopicState]) -> list[Finding]:
    """A topic the pipeline file names that Kafka does not have blocks the run."""
    return [
        Finding(
            "topic_missing",
            BLOCKING,
            topic,
            None,
            f"topic {topic!r} does not exist in Kafka; create it or remove it from the pipeline file",
        )
        for topic in configured_topics
        if topic not in kafka
    ]


def _gone_topic(topic: str, parts: Mapping[int, int], configured_topics: tuple[str, ...]) -> list[Finding]:
    """A topic the table read that Kafka no longer has blocks the run, unless the pipeline file still names it
    (then :func:`_missing_topics` already reported it)."""
    if topic in configured_topics:
        return []
    return [
        Finding(
            "topic_gone",
            BLOCKING,
            topic,
            None,
            f"topic {topic!r} is recorded in the bronze table ({len(parts)} partitions) but no "
            "longer exists in Kafka; its unread records, if any, cannot be accounted for",
        )
    ]


def _recreated_topic(topic: str, state: TopicState, recorded: str | None) -> Finding | None:
    """A topic whose id differs from the one the table read was deleted and recreated: its offsets cannot
    continue the table's chain, so the run is blocked (and its partitions are not compared)."""
    if not (recorded and state.topic_id and recorded != state.topic_id):
        return None
    return Finding(
        "topic_recreated",
        BLOCKING,
        topic,
        None,
        f"topic {topic!r} was deleted and recreated: the table read topic id {recorded}, Kafka "
        f"now has {state.topic_id}. Nothing was written. Its offsets restart and cannot continue "
        "the table's chain, and no trigger-form action can join them: if the recreation was "
        "intended, give the pipeline a new name in its file (new tables, read from the new "
        "topic's start), or move this pipeline's bronze table and checkpoints aside",
        {"recorded_topic_id": recorded, "topic_id": state.topic_id},
    )


def _check_recorded_partitions(
    topic: str,
    parts: Mapping[int, int],
    state: TopicState,
    policy: str,
    dag_id: str,
    findings: list[Finding],
    gaps: list[Gap],
) -> None:
    """Each partition the table read: gone from Kafka or offsets gone backwards block the run; records Kafka
    deleted before they were read are a gap (data loss, blocking or accepted by ``policy``)."""
    for p in sorted(parts):
        nxt = parts[p]
        where = f"{topic}-{p}"
        kp = state.partitions.get(p)
        if kp is None:
            findings.append(
                Finding(
                    "partition_gone",
                    BLOCKING,
                    topic,
                    p,
                    f"partition {where} is recorded in the bronze table (next offset {nxt}) but Kafka no "
                    f"longer has it ({len(state.partitions)} partitions now); was the topic recreated?",
                    {"next_offset": nxt},
                )
            )
        elif nxt > kp.latest:
            findings.append(
                Finding(
                    "offsets_backwards",
                    BLOCKING,
                    topic,
                    p,
                    f"partition {where}: Kafka's latest offset {kp.latest} is below the table's next "
                    f"offset {nxt}; offsets went backwards (topic recreated or truncated). Nothing was "
                    "written; check the topic before going on",
                    {"next_offset": nxt, "latest": kp.latest},
                )
            )
        elif nxt < kp.earliest:
            gaps.append(Gap(topic, p, nxt, kp.earliest, "deleted by Kafka before it was read"))
            findings.append(_loss_finding(topic, p, nxt, kp.earliest, policy, dag_id))


def _check_new_partitions(
    topic: str,
    parts: Mapping[int, int],
    state: TopicState,
    policy: str,
    dag_id: str,
    findings: list[Finding],
    gaps: list[Gap],
) -> None:
    """Each partition Kafka has that the table never read: noted, read from its earliest offset; offsets
    below that are already deleted, a gap like any other."""
    for p in sorted(set(state.partitions) - set(parts)):
        kp = state.partitions[p]
        findings.append(
            Finding(
                "partition_added",
                INFO,
                topic,
                p,
                f"partition {topic}-{p} is new to the table; it is read from its earliest offset "
                f"{kp.earliest}",
                {"earliest": kp.earliest, "latest": kp.latest},
            )
        )
        if kp.earliest > 0:
            # A new partition starts at offset 0: anything below earliest is gone.
            gaps.append(Gap(topic, p, 0, kp.earliest, "deleted by Kafka before it was read"))
            findings.append(_loss_finding(topic, p, 0, kp.earliest, policy, dag_id))


def _new_topics(kafka: Mapping[str, TopicState], positions: PositionMap) -> list[Finding]:
    """Topics Kafka has that the (non-empty) table never read: noted, read from their earliest offsets."""
    return [
        Finding(
            "topic_added",
            INFO,
            topic,
            None,
            f"topic {topic!r} is new to the table ({len(kafka[topic].partitions)} partitions); it is "
            "read from its earliest offsets",
        )
        for topic in sorted(set(kafka) - set(positions))
    ]


def _report(
    findings: list[Finding], gaps: list[Gap], kafka: Mapping[str, TopicState], policy: str
) -> PreflightReport:
    """The verdict: blocking findings, plus data loss when ``policy`` is ``fail``; otherwise the gaps are
    accepted and recorded by the run."""
    blocking = [f for f in findings if f.severity == BLOCKING]
    if policy == "fail":
        blocking += [f for f in findings if f.severity == DATA_LOSS]
    return PreflightReport(
        findings=tuple(findings),
        accepted_gaps=() if policy == "fail" else tuple(gaps),
        blocking=tuple(blocking),
        topic_ids={t: s.topic_id for t, s in sorted(kafka.items()) if s.topic_id},
        policy=policy,
    )


def _loss_finding(topic: str, partition: int, frm: int, until: int, policy: str, dag_id: str) -> Finding:
    lost = until - frm
    where = f"{topic}-{partition}"
    if policy == "fail":
        todo = (
            f"Nothing was written. To accept the loss and go on, trigger "
            f"{actions.action_hint(dag_id, actions.ACKNOWLEDGE_GAP)}: the gap is recorded with your "
            "reason and the run continues after it. Or set data_loss_policy: record_and_continue in the "
            "pipeline file, and raise the topic's retention.ms so the pipeline keeps up"
        )
    else:
        todo = "data_loss_policy is record_and_continue: the gap is recorded and the run continues after it"
    return Finding(
        "data_loss",
        DATA_LOSS,
        topic,
        partition,
        f"partition {where}: {lost} records (offsets {frm} to {until - 1}) were deleted by Kafka "
        f"(retention or delete-records) before the pipeline read them. {todo}",
        {"from": frm, "until": until, "lost": lost},
    )


def ledger_overlap(
    table_next: PositionMap | None, ledger_end: PositionMap, *, run: str, fix: str
) -> Finding | None:
    """The run ledger as a second witness: a start below the end its last successful ``run`` recorded is an overlap.

    ``ledger_end`` is that run's next offset per partition. Reading from the
    table's lower position would write those offsets a second time, so the
    run is refused with both numbers per partition and ``fix`` (the action
    that re-establishes a position both agree on).
    """
    behind = []
    for topic, parts in sorted(ledger_end.items()):
        for p, end in sorted(parts.items()):
            start = (table_next or {}).get(topic, {}).get(p)
            if start is None or start < end:
                behind.append((topic, p, start, end))
    if not behind:
        return None
    listed = "; ".join(
        f"{t}-{p} table {'none' if s is None else s} < ledger {e}" for t, p, s, e in behind[:10]
    )
    return Finding(
        "ledger_ahead",
        BLOCKING,
        behind[0][0],
        behind[0][1],
        f"the bronze table stands below where the run ledger says run {run} left it ({listed}); starting there "
        f"would ingest those offsets a second time. Nothing was read. If the table lost those commits, trigger {fix}",
        {"partitions": [{"topic": t, "partition": p, "table": s, "ledger": e} for t, p, s, e in behind]},
    )
