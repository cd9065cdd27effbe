"""The backfill's check after a run: the ranges it re-read are in bronze, counted against Kafka's.

Pure logic: Kafka is reached only through the ``count_records`` callable the
caller passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from include.contract.offset_holes import RecordCounter, verify_holes
from include.contract.offsets import BackfillCommit, BackfillRange


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
    there (:func:`verify_holes` when fewer than the offsets). A backfill that
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
                verify_holes(
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
