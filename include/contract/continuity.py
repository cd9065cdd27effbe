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

With a transform, :func:`check_transform` proves that every bronze record the
run's silver batches read is accounted for (upserted, deleted, quarantined,
superseded or recognised as replayed), that the batches chain over the bronze
log up to its end, and that quarantine got what the batches say.

Pure logic: Kafka is reached only through the ``count_records`` callable the
caller passes, so the rules have unit tests without a broker.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from include.contract import actions
from include.contract.offsets import (
    BackfillCommit,
    BackfillRange,
    BronzeCommit,
    Gap,
    OffsetRange,
    PositionMap,
    flatten,
)
from include.contract.silver_stand import COUNT_KEYS, BronzePosition, SilverCommit, SilverStand

#: ``(topic, partition, from, until) -> committed records Kafka holds there``; may raise.
RecordCounter = Callable[[str, int, int, int], int]


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
        _verify_holes(
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


def _verify_holes(
    topic: str,
    partition: int,
    frm: int,
    until: int,
    rows: int,
    where: str,
    count_records: RecordCounter | None,
    violations: list[str],
    notes: list[str],
) -> None:
    span = f"{topic}-{partition} [{frm}, {until})"
    if count_records is None:
        notes.append(f"{span}: {until - frm - rows} offset holes not verified against Kafka")
        return
    try:
        held = count_records(topic, partition, frm, until)
    except Exception as exc:  # noqa: BLE001 - an unverifiable range is reported, not fatal
        notes.append(f"{span}: offset holes not verified against Kafka: {exc}")
        return
    if held != rows:
        violations.append(
            f"{span}: {where} holds {rows} rows but Kafka holds {held} committed records in that range "
            f"({'records missing' if held > rows else 'more rows than records'})"
        )


@dataclass
class TransformCheck:
    """Whether the run's silver batches account for every bronze record they read."""

    commits: int
    read: int
    counts: dict[str, int]
    violations: list[str]
    notes: list[str]

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "commits": self.commits,
            "read": self.read,
            **self.counts,
            "violations": list(self.violations),
            "notes": list(self.notes),
        }

    def summary_line(self) -> str:
        parts = ", ".join(f"{self.counts[k]} {k}" for k in COUNT_KEYS if self.counts.get(k))
        verdict = "accounted" if self.ok else "NOT ACCOUNTED"
        return f"transform {verdict}: {self.read} read in {self.commits} batches ({parts or 'nothing'})"


def check_transform(
    *,
    previous: SilverCommit | None,
    commits: Sequence[SilverCommit],
    bronze_rows: dict[int, int],
    bronze_version: int | None,
    quarantine_rows: dict[tuple[int, int], int],
    expected: dict[str, Any] | None = None,
    stand_before: SilverStand | None = None,
) -> TransformCheck:
    """Check the silver batch commits one run wrote (oldest first).

    ``previous`` is silver's last batch commit before the run; ``stand_before``
    where the transform stood before the run, from silver's state, which
    chains the run's first batch when log cleanup has removed ``previous``
    (only to the bronze version then: the state does not keep the file index
    inside it, which the check says); ``bronze_rows``
    the rows of each bronze version the batches may have read; ``bronze_version``
    bronze's version now (the transform must have read up to it);
    ``quarantine_rows`` the rows each quarantine append holds by ``(epoch,
    batch_id)``, from the quarantine table's own commit metrics; ``expected``
    the job's summary, whose totals must match the commits.
    """
    violations: list[str] = []
    notes: list[str] = []
    position = previous.bronze_end if previous else BronzePosition(0)
    epoch = previous.epoch if previous else None
    version_only = False
    restore = stand_before.restore if stand_before is not None else None
    if stand_before is not None and restore is not None and restore.bronze_from is not None:
        # What the RESTORE undid is read again: the run must start where silver stood at the restored version.
        position, epoch = restore.bronze_from, stand_before.epoch
        notes.append(
            f"silver was restored to {restore.restored_to} (silver version {restore.version}); the run "
            f"re-reads bronze from version {position.version}, where silver stood then"
        )
    elif previous is None and stand_before is not None:
        position, epoch, version_only = stand_before.bronze_end, stand_before.epoch, True
        notes.append(
            f"silver's batch commit before this run (epoch {stand_before.epoch} batch {stand_before.batch_id}) is "
            f"no longer in its log (log cleanup); the run's first batch is chained to silver's state, bronze "
            f"version {position.version}, without the file index inside it"
        )
    for c in commits:
        where = f"silver version {c.version} (epoch {c.epoch} batch {c.batch_id})"
        if c.read != c.accounted:
            violations.append(
                f"{where} read {c.read} bronze records but accounts for {c.accounted}: {c.counts}"
            )
        # From the state alone the previous end is known to its bronze version, not the file index in it.
        follows_state = (
            version_only
            and stand_before is not None
            and (c.epoch, c.batch_id, c.bronze_start.version)
            == (
                epoch,
                stand_before.batch_id + 1,
                position.version,
            )
        )
        if epoch is not None and c.epoch != epoch and c.bronze_start == BronzePosition(position.version):
            notes.append(f"{where} starts a new checkpoint epoch at bronze version {position.version}")
        elif c.bronze_start != position and not follows_state:
            violations.append(
                f"{where} starts at bronze {c.bronze_start.to_json()} but the previous batch ended at "
                f"{position.to_json()}"
            )
        version_only = False
        q = c.counts.get("quarantined", 0)
        held = quarantine_rows.get((c.epoch, c.batch_id))
        if q and held is None:
            notes.append(
                f"{where}: its quarantine append is not among this run's quarantine commits "
                "(an earlier attempt wrote it)"
            )
        elif (held or 0) != q:
            violations.append(f"{where} quarantined {q} records but the quarantine commit holds {held}")
        position, epoch = c.bronze_end, c.epoch
    read = sum(c.read for c in commits)
    counts = {k: sum(c.counts.get(k, 0) for c in commits) for k in COUNT_KEYS}
    if bronze_version is not None and position != BronzePosition(bronze_version + 1):
        violations.append(
            f"the transform stopped at bronze {position.to_json()} but bronze is at version {bronze_version}: "
            "records in bronze were not transformed"
        )
    start = commits[0].bronze_start if commits else position
    if commits and start.index == -1 and position.index == -1:
        in_bronze = sum(bronze_rows.get(v, 0) for v in range(start.version, position.version))
        # Whole versions were read: every row of them, including rows silver already held
        # (a rebuilt epoch re-reading a version, or rows a backfill put back), was read once.
        if read != in_bronze:
            violations.append(
                f"the run's batches read {read} records but bronze versions "
                f"{start.version}..{position.version - 1} hold {in_bronze}"
            )
    elif commits:
        notes.append("a batch boundary falls inside a bronze version; records read not compared per version")
    if expected is not None:
        _check_reported(expected, commits, violations, notes)
    return TransformCheck(len(commits), read, counts, violations, notes)


def _check_reported(expected: dict[str, Any], commits: Sequence[SilverCommit], violations: list[str],
                    notes: list[str]) -> None:  # fmt: skip
    """The job's totals must be those of the silver commits its try wrote (its summary's batches name their
    versions). Every try of a run counts: an earlier try that Airflow retried may have committed batches
    before it died; they are checked like the rest above and named here, and must all precede the
    reporting try's own."""
    batches = expected.get("batches", [])
    named = all("silver_version" in b for b in batches)
    versions = {b["silver_version"] for b in batches if b.get("silver_version") is not None}
    mine = [c for c in commits if c.version in versions] if named else list(commits)
    earlier = [c for c in commits if named and c.version not in versions]
    if earlier:
        first = min(versions, default=None)
        late = [
            c.version for c in earlier if first is not None and c.version is not None and c.version > first
        ]
        if late:
            violations.append(
                f"silver version(s) {', '.join(map(str, late))} of this run were committed after the reporting "
                f"try's first batch (silver version {first}) by another driver of the run"
            )
        notes.append(
            f"silver version(s) {', '.join(str(c.version) for c in earlier)} ({sum(c.read for c in earlier)} "
            "bronze records read) were written by an earlier try of this run's transform, which ended before "
            "it could report; they are accounted for with the rest"
        )
    reported = {k: int(expected.get(k, 0)) for k in ("read", *COUNT_KEYS)}
    found = {
        "read": sum(c.read for c in mine),
        **{k: sum(c.counts.get(k, 0) for c in mine) for k in COUNT_KEYS},
    }
    # A summary without the batches' versions (an older job) cannot tell its commits from a replay's.
    skipped = not named and any(b.get("skipped_replay") for b in batches)
    if reported != found and not skipped:
        violations.append(f"the job reported {reported} but its silver commits in this run hold {found}")


@dataclass
class BackfillCheck:
    """Whether a backfill's commit says what Delta and Kafka confirm."""

    commits: int
    read: int
    inserted: int
    violations: list[str]
    notes: list[str]
    #: Rows an earlier try of the run's backfill inserted before it died (Airflow retried it), in ``inserted``,
    #: and its commits, in ``commits``.
    earlier_tries_inserted: int = 0
    earlier_tries_commits: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "commits": self.commits,
            "read": self.read,
            "inserted": self.inserted,
            "earlier_tries_inserted": self.earlier_tries_inserted,
            "earlier_tries_commits": self.earlier_tries_commits,
            "present": self.read - self.inserted,
            "violations": list(self.violations),
            "notes": list(self.notes),
        }

    def summary_line(self) -> str:
        verdict = "confirmed" if self.ok else "NOT CONFIRMED"
        return (
            f"backfill {verdict}: {self.read} records re-read, {self.inserted} inserted, "
            f"{self.read - self.inserted} were there already"
        )


def check_backfill(
    *,
    run_id: str,
    commits: Sequence[tuple[int, BackfillCommit, dict[str, Any]]],
    expected: dict[str, Any] | None,
    count_records: RecordCounter | None = None,
) -> BackfillCheck:
    """Check a backfill run's bronze commit against Delta's metrics, the job and Kafka.

    ``commits`` are the backfill commits after the run's starting version
    (with Delta's operation metrics); ``expected`` is the job's summary. Per
    range of a backfill by offsets, the records read must be all Kafka holds
    there (:func:`_verify_holes` when fewer than the offsets). A backfill that
    inserted nothing writes no commit.
    """
    violations: list[str] = []
    notes: list[str] = []
    mine = [(v, c, m) for v, c, m in commits if c.run_id == run_id]
    for v, c, _ in commits:
        if c.run_id != run_id:
            notes.append(f"Delta version {v} is a backfill of another run ({c.run_id})")
    if len(mine) > 1:
        violations.append(
            f"the run wrote {len(mine)} backfill commits (versions "
            f"{', '.join(str(v) for v, _, _ in mine)}); expected at most one"
        )
    read = inserted = 0
    checked: list[tuple[str, tuple[BackfillRange, ...], dict[str, Any] | None]] = []
    for v, commit, metrics in mine:
        where = f"Delta version {v}"
        done = metrics.get("numTargetRowsInserted")
        if done is None or int(done) != commit.inserted:
            violations.append(
                f"{where} says it inserted {commit.inserted} rows but Delta's metrics say {done}"
            )
        read += commit.read
        inserted += commit.inserted
        checked.append((where, commit.ranges, commit.time_range))
    earlier = earlier_commits = 0
    if expected is not None:
        # Every try counts: a commit of the run at another version than the one the reporting try names (its
        # own, or none when it found nothing missing) is an earlier try's, which died after committing.
        named = "bronze_version" in expected  # a summary without it (an older job): every commit is its own
        own = [c for v, c, _ in mine if not named or v == expected["bronze_version"]]
        earlier, earlier_commits = inserted - sum(c.inserted for c in own), len(mine) - len(own)
        if earlier:
            notes.append(
                f"{earlier} rows were inserted by an earlier try of this run's backfill, which ended "
                "before it could report; the retried try found them there"
            )
        if int(expected.get("inserted", 0)) != inserted - earlier:
            violations.append(
                f"the job reported {expected.get('inserted')} rows inserted but its backfill commits "
                f"in this run hold {inserted - earlier}"
            )
        if not mine:
            read = int(expected.get("read", 0))
            if not int(expected.get("inserted", 0)):
                notes.append("nothing was missing, so the backfill wrote no commit")
            ranges = tuple(BackfillRange.from_json(r) for r in expected.get("ranges") or ())
            checked.append(("the backfill", ranges, expected.get("time_range")))
    for where, ranges, time_range in checked:
        if time_range:
            notes.append(f"{where}: records inside the time window were not recounted in Kafka")
            continue
        for r in ranges:
            if r.read < r.until_offset - r.from_offset:
                _verify_holes(
                    r.topic,
                    r.partition,
                    r.from_offset,
                    r.until_offset,
                    r.read,
                    where,
                    count_records,
                    violations,
                    notes,
                )
    return BackfillCheck(len(mine), read, inserted, violations, notes, earlier, earlier_commits)
