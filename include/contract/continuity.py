"""Continuity check after a run: the offset ranges a run wrote chain, count and match.

Given the table's position before the run and the bronze commits the run
made (from the Delta log), it proves per partition that

- every range starts exactly where the previous one ended (the first one where
  the table stood before the run), so there is no gap and no overlap, except
  over a data-loss gap recorded in the same commit;
- each range holds as many rows as offsets, or, where it holds fewer (offset
  holes: transaction markers, aborted records, compaction), Kafka confirms
  that it holds no more committed records in that range than the table got;
- the positions the last commit records are where the ranges ended, and the
  Spark checkpoint that will resume next stands at the same place.

With a transform, :func:`include.contract.transform_check.check_transform` checks
silver's batches; with a backfill, :func:`include.contract.backfill_check.check_backfill`
its ranges. Their verdicts join this one in :class:`ContinuityReport`.

Pure logic: Kafka is reached only through the ``count_records`` callable the
caller passes, so the rules have unit tests without a broker.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from include.contract import actions
from include.contract.backfill_check import BackfillCheck
from include.contract.offset_holes import RecordCounter, verify_holes
from include.contract.offsets import (
    BronzeCommit,
    Gap,
    OffsetRange,
    PositionMap,
    flatten,
)
from include.contract.transform_check import TransformCheck


@dataclass
class PartitionResult:
    """One partition's part of a run."""

    topic: str
    partition: int
    from_offset: int | None = None
    until_offset: int | None = None
    rows: int = 0
    ranges: int = 0
    holes: int = 0
    gaps: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "from": self.from_offset,
            "until": self.until_offset,
            "rows": self.rows,
            "ranges": self.ranges,
            "holes": self.holes,
            "gaps": self.gaps,
        }


@dataclass
class ContinuityReport:
    """The verdict, the per-partition figures behind it, and every violation found."""

    run_id: str
    commits: int
    rows: int
    partitions: list[PartitionResult]
    violations: list[str]
    notes: list[str]
    transform: TransformCheck | None = None
    backfill: BackfillCheck | None = None
    #: Rows and commits of the run that an earlier try of its job wrote before it died (Airflow retried it).
    earlier_tries_rows: int = 0
    earlier_tries_commits: int = 0

    @property
    def ok(self) -> bool:
        return (
            not self.violations
            and (self.transform is None or self.transform.ok)
            and (self.backfill is None or self.backfill.ok)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "run_id": self.run_id,
            "commits": self.commits,
            "rows": self.rows,
            "earlier_tries_rows": self.earlier_tries_rows,
            "earlier_tries_commits": self.earlier_tries_commits,
            "partitions": [p.to_json() for p in self.partitions],
            "violations": list(self.violations)
            + (self.transform.violations if self.transform else [])
            + (self.backfill.violations if self.backfill else []),
            "notes": list(self.notes)
            + (self.transform.notes if self.transform else [])
            + (self.backfill.notes if self.backfill else []),
            "transform": self.transform.to_json() if self.transform else None,
            "backfill": self.backfill.to_json() if self.backfill else None,
        }

    def summary_line(self) -> str:
        verdict = "CONTINUOUS" if self.ok else f"BROKEN ({len(self.violations)} violations)"
        holes = sum(p.holes for p in self.partitions)
        gaps = sum(len(p.gaps) for p in self.partitions)
        extra = f", {holes} offset holes" if holes else ""
        extra += f", {gaps} recorded gaps" if gaps else ""
        if self.backfill is not None:
            extra += f"; {self.backfill.summary_line()}"
        if self.transform is not None:
            extra += f"; {self.transform.summary_line()}"
        return (
            f"continuity: {verdict}: {self.commits} commits, {self.rows} rows over "
            f"{sum(1 for p in self.partitions if p.ranges)} partitions{extra}"
        )


def earlier_tries(report: Mapping[str, Any] | None) -> tuple[int, int]:
    """``(rows, commits)`` that earlier, retried tries of a run's ingest or backfill committed before
    they died, from a continuity report's JSON (:meth:`ContinuityReport.to_json`); ``(0, 0)`` without one."""
    report = report or {}
    backfill = report.get("backfill") or {}
    rows = int(report.get("earlier_tries_rows") or 0) + int(backfill.get("earlier_tries_inserted") or 0)
    commits = int(report.get("earlier_tries_commits") or 0) + int(backfill.get("earlier_tries_commits") or 0)
    return rows, commits


def check_run(
    *,
    run_id: str,
    start: PositionMap | None,
    commits: Sequence[tuple[int, BronzeCommit]],
    checkpoint_position: PositionMap | None,
    expected_rows: int | None = None,
    count_records: RecordCounter | None = None,
    dag_id: str = "<dag_id>",
    job_versions: Collection[int] | None = None,
) -> ContinuityReport:
    """Check the commits one run wrote, in Delta version order, against the table's prior position.

    ``start`` is the table's next offsets before the run (``None``: the table
    was empty); ``checkpoint_position`` the committed offsets of the Spark
    checkpoint the next run resumes (``None``: not readable from here, e.g.
    object storage, which is reported as a note); ``expected_rows`` the rows
    the job reported; ``count_records`` verifies ranges with holes.

    ``job_versions`` are the Delta versions the reporting try of the job
    committed (its summary's batches). Every try of a run counts: a try that
    Airflow retried may have committed batches before it died, and those
    commits belong to the run as much as the last try's. They are chained with
    the rest, and ``expected_rows`` is compared with the reporting try's own
    commits; an earlier try's commit after the reporting try's first one is a
    second driver of the run still writing, a violation. ``None``: every
    commit of the run is the reporting try's.
    """
    walk = _Walk(position=flatten(start or {}))
    by_version: dict[int, int] = {}
    for version, commit in commits:
        before = walk.rows
        _check_commit(
            walk,
            f"Delta version {version}",
            commit,
            run_id=run_id,
            dag_id=dag_id,
            count_records=count_records,
        )
        if commit.batch_id >= 0:  # a position or skip commit (batch -1) is no try's batch
            by_version[version] = walk.rows - before
    earlier = {v: n for v, n in by_version.items() if job_versions is not None and v not in job_versions}
    mine = walk.rows - sum(earlier.values())
    if earlier:
        _check_earlier_tries(walk, earlier, job_versions or ())
    _check_the_end(walk, start, checkpoint_position, expected_rows, mine)
    return ContinuityReport(
        run_id=run_id,
        commits=len(commits),
        rows=walk.rows,
        partitions=[walk.results[tp] for tp in sorted(walk.results)],
        violations=walk.violations,
        notes=walk.notes,
        earlier_tries_rows=sum(earlier.values()),
        earlier_tries_commits=len(earlier),
    )


def _check_earlier_tries(walk: _Walk, earlier: dict[int, int], job_versions: Collection[int]) -> None:
    """The run's commits the reporting try did not write: an earlier try's, all before the reporting try's."""
    first = min(job_versions, default=None)
    late = sorted(v for v in earlier if first is not None and v > first)
    if late:
        walk.violations.append(
            f"Delta version(s) {', '.join(map(str, late))} of this run were committed after the reporting "
            f"try's first commit (version {first}) by another driver of the run: an earlier try was still "
            "writing"
        )
    versions = sorted(earlier)
    walk.notes.append(
        f"Delta version(s) {', '.join(map(str, versions))} ({sum(earlier.values())} rows in {len(versions)} "
        "commits) were written by an earlier try of this run's job, which ended before it could report; "
        "they chain with the rest and count for the run"
    )


@dataclass
class _Walk:
    """What :func:`check_run` has found so far, walking the run's commits in version order."""

    #: Each partition's next offset: where the next commit's range must start.
    position: dict[tuple[str, int], int]
    results: dict[tuple[str, int], PartitionResult] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    last: BronzeCommit | None = None
    rows: int = 0

    def result(self, tp: tuple[str, int]) -> PartitionResult:
        return self.results.setdefault(tp, PartitionResult(tp[0], tp[1]))


def _check_commit(
    walk: _Walk,
    where: str,
    commit: BronzeCommit,
    *,
    run_id: str,
    dag_id: str,
    count_records: RecordCounter | None,
) -> None:
    """One commit: written by this run; a recorded reset moves the position and is only noted; otherwise its
    gaps and ranges must continue where the table stood, and its next offsets be where its ranges end."""
    if commit.run_id != run_id:
        walk.violations.append(
            f"{where} was written by run {commit.run_id!r}, not by this run {run_id!r}: another "
            "writer committed to the table during the run"
        )
    reset = commit.extra.get("position_set")
    if reset is not None and not commit.ranges:
        _follow_reset(walk, where, commit, reset)
    else:
        _follow_gaps(walk, where, commit)
        for r in sorted(commit.ranges):
            _follow_range(walk, where, r, dag_id=dag_id, count_records=count_records)
        _check_next_offsets(walk, where, commit)
    walk.last = commit


def _follow_reset(walk: _Walk, where: str, commit: BronzeCommit, reset: dict[str, Any]) -> None:
    """A recorded reset (starting_offsets latest, or an operator's position action): the chain continues from
    where it says, and the report says so."""
    position = walk.position
    moved = [
        f"{t}-{p} {position.get((t, p))} -> {o}"
        for (t, p), o in sorted(flatten(commit.next_offsets).items())
        if position.get((t, p)) != o
    ]
    walk.notes.append(
        f"{where} sets the position ({reset.get('reason', '')}): " + ("; ".join(moved[:10]) or "unchanged")
    )
    position.update(flatten(commit.next_offsets))


def _follow_gaps(walk: _Walk, where: str, commit: BronzeCommit) -> None:
    """The commit's recorded gaps (offsets Kafka no longer had): each must start where the table stood, and the
    position moves past it."""
    for g in (Gap.from_json(g) for g in commit.extra.get("gaps", ())):
        tp = (g.topic, g.partition)
        if walk.position.get(tp, g.from_offset) != g.from_offset:
            walk.violations.append(
                f"{g.topic}-{g.partition}: {where} records a gap [{g.from_offset}, {g.until_offset}) "
                f"but the table stood at {walk.position.get(tp)}"
            )
        walk.result(tp).gaps.append(g.to_json())
        walk.position[tp] = g.until_offset


def _follow_range(
    walk: _Walk, where: str, r: OffsetRange, *, dag_id: str, count_records: RecordCounter | None
) -> None:
    """One range of the commit: it must continue at the partition's position (a gap or an overlap otherwise,
    a gap naming the backfill that reads it again); its rows and holes count, and holes are verified."""
    tp = r.topic_partition
    pr = walk.result(tp)
    expected = walk.position.get(tp)
    if expected is not None and r.from_offset != expected:
        kind = "gap" if r.from_offset > expected else "overlap"
        missing = abs(r.from_offset - expected)
        todo = ""
        if kind == "gap":  # the skipped offsets can be read again on request
            todo = "; if bronze lacks those records, trigger " + actions.action_hint(
                dag_id,
                actions.BACKFILL_OFFSETS,
                offset_ranges=[
                    {"topic": r.topic, "partition": r.partition, "from": expected, "until": r.from_offset}
                ],
            )
        walk.violations.append(
            f"{r.topic}-{r.partition}: {where} range [{r.from_offset}, {r.until_offset}) does not "
            f"continue at {expected}: {kind} of {missing} offsets{todo}"
        )
    if pr.from_offset is None:
        pr.from_offset = r.from_offset
    pr.until_offset = r.until_offset
    pr.rows += r.rows
    pr.ranges += 1
    pr.holes += r.holes
    walk.rows += r.rows
    walk.position[tp] = r.until_offset
    if r.holes:
        verify_holes(
            r.topic,
            r.partition,
            r.from_offset,
            r.until_offset,
            r.rows,
            where,
            count_records,
            walk.violations,
            walk.notes,
        )


def _check_next_offsets(walk: _Walk, where: str, commit: BronzeCommit) -> None:
    """The commit's recorded next offsets must be where its ranges and gaps left each partition; a partition it
    names for the first time, with no records yet, joins the position there."""
    recorded = flatten(commit.next_offsets)
    for tp, offset in sorted(walk.position.items()):
        if recorded.get(tp) != offset:
            walk.violations.append(
                f"{tp[0]}-{tp[1]}: {where} records next offset {recorded.get(tp)} but its ranges "
                f"end at {offset}"
            )
    for tp in sorted(set(recorded) - set(walk.position)):
        walk.position[tp] = recorded[tp]  # a partition first seen with no records yet


def _check_the_end(
    walk: _Walk,
    start: PositionMap | None,
    checkpoint_position: PositionMap | None,
    expected_rows: int | None,
    reported_try_rows: int,
) -> None:
    """After the last commit: the job's reported rows must be its try's commits' rows, and the Spark checkpoint
    the next run resumes must stand where the table now does (a note when it cannot be read from here)."""
    if expected_rows is not None and expected_rows != reported_try_rows:
        walk.violations.append(
            f"the job reported {expected_rows} rows but its commits in this run hold {reported_try_rows}"
        )
    final = flatten(walk.last.next_offsets) if walk.last else flatten(start or {})
    if checkpoint_position is None:
        walk.notes.append("Spark checkpoint not compared (not readable from here)")
    elif final and flatten(checkpoint_position) != final:
        mine = flatten(checkpoint_position)
        diffs = [
            f"{t}-{p} table {o} vs checkpoint {mine.get((t, p))}"
            for (t, p), o in sorted(final.items())
            if mine.get((t, p)) != o
        ]
        walk.violations.append(
            "the Spark checkpoint does not stand where the table does: " + "; ".join(diffs[:10])
        )
