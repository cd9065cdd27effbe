"""A dry run of a backfill or a quarantine replay: what the real run would do, and nothing done.

``check_request`` builds the report from the same reads and rules the real run
checks with (the request's plan against Kafka and the table, then the
preflight's verdict), plus what only a dry run asks: per partition, how many of
the range's offsets Kafka still holds and how many bronze has already; for a
replay, the records it selects by reason; and an estimate of the run's time and
cluster from the run ledger. A request the real run would refuse is reported
with the refusal's own message. The report is the ledger row's only payload:
a dry run starts no cluster and takes no lock.

Pure: the caller (:mod:`include.orchestration.dry_run`) reads; everything here
has a unit test without a broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from include.contract.retention import duration_text

#: Ledger runs an estimate looks at, newest first.
ESTIMATE_RUNS = 20


@dataclass(frozen=True)
class RangeDryRun:
    """One partition's range of a backfill, against what Kafka and bronze hold now."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    #: Kafka's log start and read_committed end of the partition now.
    earliest: int
    latest: int
    #: Bronze rows of the partition with an offset in the part of the range Kafka holds.
    in_bronze: int

    @property
    def offsets(self) -> int:
        return self.until_offset - self.from_offset

    @property
    def held(self) -> int:
        """Offsets of the range Kafka still holds."""
        return max(0, min(self.until_offset, self.latest) - max(self.from_offset, self.earliest))

    @property
    def would_insert(self) -> int:
        """Records the backfill would add to bronze: those Kafka holds that bronze lacks (offsets, so at most
        that many on a transactional topic, whose markers take offsets)."""
        return max(0, self.held - self.in_bronze)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "from": self.from_offset,
                "until": self.until_offset, "earliest": self.earliest, "latest": self.latest,
                "offsets": self.offsets, "held": self.held, "in_bronze": self.in_bronze,
                "would_insert": self.would_insert}  # fmt: skip

    def line(self) -> str:
        """The range in one log line."""
        gone = self.offsets - self.held
        return (f"{self.topic}-{self.partition} [{self.from_offset}, {self.until_offset}): {self.offsets} offsets, "
                f"{self.held} held by Kafka" + (f" ({gone} deleted by retention)" if gone else "")
                + f", {self.in_bronze} already in bronze, would insert {self.would_insert}")  # fmt: skip


@dataclass(frozen=True)
class Estimate:
    """How long the run would take, from the ledger's recent runs, and the cluster it would get."""

    #: ``None``: the ledger holds too few runs to tell.
    seconds: float | None
    #: How the figure was reached, or why there is none.
    basis: str
    #: The cluster the run would start (``include.orchestration.cluster_sizing``'s reason); ``None`` for a
    #: replay, which runs in a normal run's cluster.
    cluster: str | None = None

    def text(self) -> str:
        figure = f"about {duration_text(self.seconds)}" if self.seconds is not None else "no time estimate"
        return f"{figure} ({self.basis})" + (f"; {self.cluster}" if self.cluster else "")


def estimate(runs: Sequence[Mapping[str, Any]], records: int) -> tuple[float | None, str]:
    """Seconds a run reading ``records`` would take: a line ``fixed + records / rate`` fitted by least squares
    to the ledger's recent successful runs that read records (``runs`` newest first, ledger rows).

    A run's time is mostly fixed cost for a small backlog, so a rate from one run would be wrong by its
    fixed cost: at least two runs of different sizes are needed, else there is no figure and the basis
    says why.
    """
    points = [(float(r["rows"]), float(r["duration_s"])) for r in runs[:ESTIMATE_RUNS]
              if r.get("outcome") == "success" and (r.get("rows") or 0) > 0
              and isinstance(r.get("duration_s"), int | float)]  # fmt: skip
    sizes = {x for x, _ in points}
    if len(sizes) < 2:
        return None, (f"the ledger's last {ESTIMATE_RUNS} runs hold {len(points)} successful run(s) that read records, "
                      f"of {len(sizes)} size(s); an estimate needs two sizes at least")  # fmt: skip
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    slope = max(slope, 0.0)
    fixed = max(mean_y - slope * mean_x, 0.0)
    rate = f"{1 / slope:,.0f} records/s" if slope > 0 else "no measurable cost per record"
    return fixed + slope * records, f"{n} recent runs: {fixed:.0f} s fixed, {rate}"


@dataclass(frozen=True)
class DryRunReport:
    """What a backfill or a replay would do now (:mod:`include.contract.dry_run`)."""

    action: str
    #: The real run's refusal, word for word; ``None`` when it would run.
    refused: str | None = None
    ranges: tuple[RangeDryRun, ...] = ()
    #: A replay's selection: ``rows`` it takes, ``reasons`` (reason -> rows) and, on a routed pipeline, the
    #: ``route`` whose quarantine it reads.
    replay: Mapping[str, Any] | None = None
    estimate: Estimate | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def would_insert(self) -> int:
        return sum(r.would_insert for r in self.ranges)

    def summary(self) -> str:
        """The report in one line: the ledger's reason and the log's summary."""
        if self.refused is not None:
            return f"dry run of {self.action}: the run would be refused: {self.refused}"
        if self.replay is not None:
            route = self.replay.get("route")
            text = (f"dry run of {self.action}: would replay {self.replay.get('rows', 0)} quarantined records"
                    + (f" of route {route!r}" if route else ""))  # fmt: skip
        else:
            offsets = sum(r.offsets for r in self.ranges)
            held = sum(r.held for r in self.ranges)
            bronze = sum(r.in_bronze for r in self.ranges)
            text = (f"dry run of {self.action}: would insert {self.would_insert} records into bronze: "
                    f"{len(self.ranges)} range(s) of {offsets} offsets, {held} held by Kafka, {bronze} already "
                    "in bronze")  # fmt: skip
        return text + (f"; {self.estimate.text()}" if self.estimate else "")

    def lines(self) -> list[str]:
        """The report's detail, one line per range or reason, then its notes."""
        out = [r.line() for r in self.ranges]
        reasons = ((self.replay or {}).get("reasons") or {}).items()
        for reason, rows in sorted(reasons, key=lambda i: (-i[1], i[0])):
            out.append(f"{rows} quarantined with reason: {reason}")
        return out + list(self.notes)

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "refused": self.refused,
            "summary": self.summary(),
            "ranges": [r.to_json() for r in self.ranges],
            "would_insert": None if self.refused or self.replay is not None else self.would_insert,
            "replay": dict(self.replay) if self.replay is not None else None,
            "estimate_s": self.estimate.seconds if self.estimate else None,
            "estimate_basis": self.estimate.basis if self.estimate else None,
            "cluster": self.estimate.cluster if self.estimate else None,
            "notes": list(self.notes),
        }


def ranges_against(ranges: Iterable[Mapping[str, Any]], kafka: Mapping[tuple[str, int], tuple[int, int]],
                   in_bronze: Mapping[tuple[str, int], int]) -> tuple[RangeDryRun, ...]:  # fmt: skip
    """The plan's ranges (``topic``, ``partition``, ``from``, ``until``: the plan's XCom) against Kafka's
    ``(earliest, latest)`` per partition and bronze's rows in the part of each Kafka holds."""
    out = []
    for r in ranges:
        key = (str(r["topic"]), int(r["partition"]))
        earliest, latest = kafka[key]
        out.append(RangeDryRun(key[0], key[1], int(r["from"]), int(r["until"]), earliest, latest,
                               in_bronze.get(key, 0)))  # fmt: skip
    return tuple(out)
