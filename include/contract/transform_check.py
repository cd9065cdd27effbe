"""The transform's check after a run: silver's batches account for every bronze record they read.

:func:`check_transform` proves that every bronze record the run's silver
batches read is accounted for (upserted, deleted, quarantined, superseded or
recognised as replayed), that the batches chain over the bronze log up to its
end, and that quarantine got what the batches say. Pure logic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from include.contract.routes import RoutingAccount
from include.contract.silver_stand import COUNT_KEYS, BronzePosition, SilverCommit, SilverStand


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
        parts = ", ".join(f"{self.counts[k]} {k}" for k in (*COUNT_KEYS, "unrouted") if self.counts.get(k))
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
    routed: bool = False,
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
    the job's summary, whose totals must match the commits. ``routed``: the
    commits are one route's (:func:`check_routed` compares what they read with
    bronze per batch, and a new epoch of the routes' one stream may start
    before where this route stood, re-reading what it holds).
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
        elif routed and epoch is not None and c.epoch != epoch and c.bronze_start.index == -1 and (
                c.bronze_start.version < position.version):  # fmt: skip
            notes.append(f"{where} starts a new checkpoint epoch at bronze version {c.bronze_start.version}, before "
                         f"where this route stood ({position.version}): the routes' stream re-reads from the least "
                         "of their stands, and what this route holds is recognised as replayed")  # fmt: skip
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
    if routed:
        pass  # a route reads what its match takes, not every row: check_routed compares per batch
    elif commits and start.index == -1 and position.index == -1:
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


@dataclass(frozen=True)
class RouteRun:
    """One route's silver batch commits of a run (oldest first) and what the check chains them to (as
    :func:`check_transform` takes them)."""

    previous: SilverCommit | None
    commits: tuple[SilverCommit, ...]
    quarantine_rows: dict[tuple[int, int], int]
    stand_before: SilverStand | None = None


def check_routed(
    *,
    routes: Mapping[str, RouteRun],
    bronze_rows: dict[int, int],
    bronze_version: int | None,
    unrouted_rows: dict[tuple[int, int], int],
    unrouted_policy: str,
    expected: Mapping[str, Any] | None = None,
) -> TransformCheck:
    """Check a routed transform's run: each route as :func:`check_transform` checks a silver table, then per
    batch across the routes.

    Every route's commit of a batch carries the same :class:`RoutingAccount`,
    which must add up (bronze = routed - extra copies + unrouted), name the
    route's own read, and match bronze's rows in the batch's versions; the
    unrouted records' quarantine append (``unrouted_rows`` by ``(epoch,
    batch_id)``) holds the account's unrouted records under ``unrouted:
    quarantine`` and nothing under the other policies. ``expected`` is the
    job's routed summary, each route's part checked against that route's commits.
    """
    violations: list[str] = []
    notes: list[str] = []
    counts = dict.fromkeys(COUNT_KEYS, 0)
    batches: dict[tuple[int, int], SilverCommit] = {}
    reported = (expected or {}).get("routes") or {}
    for name, run in routes.items():
        check = check_transform(previous=run.previous, commits=run.commits, bronze_rows=bronze_rows,
                                bronze_version=bronze_version, quarantine_rows=run.quarantine_rows,
                                expected=reported.get(name) if expected is not None else None,
                                stand_before=run.stand_before, routed=True)  # fmt: skip
        violations += [f"route {name}: {v}" for v in check.violations]
        notes += [f"route {name}: {n}" for n in check.notes]
        for k in COUNT_KEYS:
            counts[k] += check.counts.get(k, 0)
        for c in run.commits:
            where = f"route {name}: silver version {c.version} (epoch {c.epoch} batch {c.batch_id})"
            if c.route != name:
                violations.append(f"{where} was written as route {c.route!r}'s batch")
            if c.routing is None:
                violations.append(f"{where} carries no routing account")
                continue
            account = RoutingAccount.from_json(c.routing)
            if account.matched.get(name) != c.read:
                violations.append(f"{where} read {c.read} records but its batch's account routed "
                                  f"{account.matched.get(name)} to it")  # fmt: skip
            same = batches.setdefault((c.epoch, c.batch_id), c)
            if (same.routing, same.bronze_start, same.bronze_end) != (
                c.routing,
                c.bronze_start,
                c.bronze_end,
            ):
                violations.append(f"{where} disagrees with route {same.route}'s commit of the batch: "
                                  f"{c.routing} over bronze {c.bronze_start.to_json()}..{c.bronze_end.to_json()}, "
                                  f"not {same.routing} over {same.bronze_start.to_json()}..{same.bronze_end.to_json()}")  # fmt: skip
    read = unrouted = 0
    for (epoch, batch_id), c in sorted(batches.items()):
        where = f"batch {batch_id} of epoch {epoch}"
        account = RoutingAccount.from_json(c.routing or {})
        violations += [f"{where}: {p}" for p in account.problems(list(routes))]
        read += account.bronze
        unrouted += account.unrouted
        if c.bronze_start.index == -1 and c.bronze_end.index == -1:
            in_bronze = sum(
                bronze_rows.get(v, 0) for v in range(c.bronze_start.version, c.bronze_end.version)
            )
            if in_bronze != account.bronze:
                violations.append(f"{where} read {account.bronze} bronze records but bronze versions "
                                  f"{c.bronze_start.version}..{c.bronze_end.version - 1} hold {in_bronze}")  # fmt: skip
        else:
            notes.append(f"{where}: a batch boundary falls inside a bronze version; its records are not compared "
                         "with bronze's")  # fmt: skip
        held = unrouted_rows.get((epoch, batch_id))
        if unrouted_policy == "quarantine":
            if account.unrouted and held is None:
                notes.append(f"{where}: its unrouted records' quarantine append is not among this run's commits "
                             "(an earlier attempt wrote it)")  # fmt: skip
            elif (held or 0) != account.unrouted:
                violations.append(f"{where} counted {account.unrouted} unrouted records but their quarantine "
                                  f"append holds {held}")  # fmt: skip
        elif held:
            violations.append(
                f"{where} appended {held} unrouted records to quarantine under policy {unrouted_policy}"
            )
    check = TransformCheck(len(batches), read, {**counts, "unrouted": unrouted}, violations, notes)
    return check
