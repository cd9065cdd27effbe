"""Pure decisions of the ingestion job: its configuration, which checkpoint to
resume, and the offset ranges one micro-batch wrote. No Spark, no I/O, so each
rule has a unit test.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from include.contract.errors import JobConfigError as JobConfigError  # the jobs and tests import it here
from include.contract.jobs import RUN_TYPES as RUN_TYPES  # the job's --run-type choices, by their old name
from include.contract.jobs import ContractArgumentParser, IngestArgs
from include.contract.offsets import (
    BronzeCommit,
    Gap,
    OffsetError,
    OffsetRange,
    PositionMap,
    flatten,
    positions_from_json,
    positions_to_json,
    skip_gaps,
)
from include.readers.spark_checkpoint import CheckpointState
from spark_jobs.delta_commits import fence_of
from spark_jobs.job_common import parse_table_properties

#: Kafka consumer settings the bronze job reads with unless the pipeline's ``kafka.options`` set
#: them. Spark's Kafka source asks its consumer for records one ``poll`` at a time, and Kafka's
#: default of 500 records a poll made the poll loop a visible share of a large drain; the larger
#: fetch and socket buffers let one round trip carry more of a backlog. With
#: :data:`NO_DICTIONARY_COLUMNS` they bring the drain level with a plain Spark job's
#: (``make bench``, docs/performance.md).
CONSUMER_DEFAULTS: dict[str, str] = {
    "max.poll.records": "10000",
    "max.partition.fetch.bytes": "8388608",
    "receive.buffer.bytes": "1048576",
}

#: Bronze columns whose values are (nearly) all distinct: Parquet's writer starts each column
#: chunk with a dictionary, finds it does not pay, and writes the values plain after all (the
#: files show PLAIN only). Asking for plain encoding up front skips the attempt; the bytes on
#: disk are the same (Parquet's ``parquet.enable.dictionary#<column>``).
NO_DICTIONARY_COLUMNS: tuple[str, ...] = ("value", "offset", "timestamp")


@dataclass(frozen=True)
class IngestConfig:
    """Everything one ingestion run needs (see ``spark_jobs/kafka_to_bronze.py --help``)."""

    pipeline: str
    bootstrap_servers: str
    bronze_path: str
    checkpoint_root: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    run_id: str = "manual"
    run_type: str = "manual"
    summary_path: str | None = None
    admin_timeout_s: float = 30.0
    #: Kafka client settings from ``--kafka-options-file``, applied as ``kafka.<name>``; they may hold
    #: secrets (a JAAS config, a private key), so the config's repr leaves them out.
    kafka_options: dict[str, str] = field(default_factory=dict, repr=False)
    #: Data-loss gaps the orchestrator's preflight accepted for this run.
    accepted_gaps: tuple[Gap, ...] = ()
    #: Offsets an operator's ``skip_offsets`` passes, each from where the table stands on its partition.
    skipped: tuple[Gap, ...] = ()
    #: Kafka topic ids seen by the preflight; recorded in every commit so the
    #: next preflight can tell a recreated topic from the one the table read.
    topic_ids: dict[str, str] = field(default_factory=dict)
    #: Why a new checkpoint epoch was asked for (the trigger form's rebuild action), or ``None``.
    rebuild_reason: str | None = None
    #: Where a position action chosen at preflight makes the table stand (``positions``, ``reason``,
    #: ``action``, maybe ``undone``), or ``None``.
    position_reset: dict[str, Any] | None = None
    #: Delta table properties bronze carries (``--table-property``: the pipeline's retention).
    table_properties: dict[str, str] = field(default_factory=dict)
    #: The run lock's epoch this run holds (``--lock-epoch``), or ``None`` outside a DAG run.
    lock_epoch: int | None = None

    @property
    def fence(self) -> tuple[str, int] | None:
        """``(pipeline, lock epoch)`` every bronze commit of this run carries, or ``None``."""
        return fence_of(self.pipeline, self.lock_epoch)

    def source_options(self) -> dict[str, str]:
        """Options for ``readStream.format("kafka")`` (without the starting offsets).

        :data:`CONSUMER_DEFAULTS` first, then the pipeline's ``kafka.options``
        (which may override them), then the settings exactly-once needs.
        """
        opts = {f"kafka.{k}": v for k, v in {**CONSUMER_DEFAULTS, **self.kafka_options}.items()}
        opts.update({
            "kafka.bootstrap.servers": self.bootstrap_servers,
            # Aborted records of transactional producers must never reach bronze.
            "kafka.isolation.level": "read_committed",
            "includeHeaders": "true",
            # Retention outrunning the pipeline must stop the run, not shrink it.
            "failOnDataLoss": "true",
        })  # fmt: skip
        if self.topic_pattern:
            opts["subscribePattern"] = self.topic_pattern
        else:
            opts["subscribe"] = ",".join(self.topics)
        if self.max_offsets_per_trigger:
            opts["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        return opts


def build_arg_parser() -> ContractArgumentParser:
    """The job's command line: :class:`include.contract.jobs.IngestArgs`, which the orchestrator renders."""
    return IngestArgs.parser()


def parse_config(argv: list[str]) -> IngestConfig:
    """Parse and validate the job's arguments; raises :class:`JobConfigError` naming the argument."""
    args = IngestArgs.from_args(argv).check()
    kafka_options = read_kafka_options_file(args.kafka_options_file)
    gaps, topic_ids, reset, skipped = _read_preflight_file(args.preflight_file)
    try:
        properties = parse_table_properties(list(args.table_property))
    except ValueError as exc:
        raise JobConfigError(str(exc)) from None
    return IngestConfig(
        pipeline=args.pipeline,
        bootstrap_servers=args.bootstrap_servers,
        bronze_path=args.bronze_path,
        checkpoint_root=args.checkpoint_root,
        topics=args.topics,
        topic_pattern=args.topic_pattern,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        run_id=args.run_id,
        run_type=args.run_type,
        summary_path=args.summary_path,
        admin_timeout_s=args.admin_timeout_s or IngestConfig.admin_timeout_s,
        kafka_options=kafka_options,
        accepted_gaps=gaps,
        skipped=skipped,
        topic_ids=topic_ids,
        rebuild_reason=(args.rebuild_checkpoint or "").strip() or None,
        position_reset=reset,
        table_properties=properties,
        lock_epoch=args.lock_epoch,
    )


def read_kafka_options_file(name: str | None) -> dict[str, str]:
    """The extra Kafka client settings of ``--kafka-options-file`` (empty without one)."""
    if not name:
        return {}
    path = Path(name)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise JobConfigError(f"--kafka-options-file {path}: cannot read a JSON object: {exc}") from None
    if not isinstance(data, dict):
        raise JobConfigError(f"--kafka-options-file {path}: expected a JSON object of settings")
    return {str(k): str(v) for k, v in data.items()}


def _read_preflight_file(
    name: str | None,
) -> tuple[tuple[Gap, ...], dict[str, str], dict[str, Any] | None, tuple[Gap, ...]]:
    if not name:
        return (), {}, None, ()
    path = Path(name)
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise TypeError("expected a JSON object")
        gaps = tuple(Gap.from_json(g) for g in data.get("accepted_gaps") or ())
        skipped = tuple(Gap.from_json(g) for g in data.get("skipped") or ())
        topic_ids = {str(k): str(v) for k, v in (data.get("topic_ids") or {}).items()}
        reset = data.get("position_reset")
        if reset is not None:
            reset = dict(reset)
            reset["positions"] = positions_to_json(positions_from_json(reset["positions"]))
            reset["reason"] = str(reset["reason"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise JobConfigError(
            f"--preflight-file {path}: expected {{'topic_ids': {{topic: id}}, 'accepted_gaps': [...], "
            f"'position_reset': {{'positions': ..., 'reason': ...}} or none, 'skipped': [...] or none}}: {exc!r}"
        ) from None
    return gaps, topic_ids, reset, skipped


@dataclass(frozen=True)
class CheckpointPlan:
    """Which checkpoint this run uses and, for a new one, where it starts."""

    epoch: int
    starting_offsets: str
    rebuilt_reason: str | None = None
    previous_epoch: int | None = None


def _same_positions(a: PositionMap | None, b: PositionMap) -> bool:
    return a is not None and flatten(a) == flatten(b)


def checkpoint_matches_table(
    state: CheckpointState, table: BronzeCommit | None, epoch: int | None = None
) -> str | None:
    """``None`` if resuming ``state`` (of ``epoch``) continues exactly where the table stands, else why not."""
    if table is None:
        if state.last_committed_batch is None:
            return None
        return (
            f"checkpoint {state.path} has committed batch {state.last_committed_batch} "
            "but the bronze table records no progress"
        )
    positions = table.next_offsets
    if _same_positions(state.position, positions):
        return None
    # Killed after the Delta commit of a batch, before Spark's own commit: the
    # replay of that batch is recognised by its txn version and skipped.
    if (
        (epoch is None or epoch == table.epoch)
        and state.pending_batch == table.batch_id
        and _same_positions(state.pending, positions)
    ):
        return None
    mismatched = []
    mine = flatten(state.position or {})
    for tp, offset in sorted(flatten(positions).items()):
        if mine.get(tp) != offset:
            mismatched.append(f"{tp[0]}-{tp[1]} table {offset} vs checkpoint {mine.get(tp)}")
    for tp in sorted(set(mine) - set(flatten(positions))):
        mismatched.append(f"{tp[0]}-{tp[1]} table none vs checkpoint {mine[tp]}")
    return f"checkpoint {state.path} does not match the table: " + "; ".join(mismatched[:10])


def plan_checkpoint(
    *,
    table: BronzeCommit | None,
    checkpoints: Mapping[int, CheckpointState | None],
    partitions: Mapping[str, list[int]],
    starting_offsets: str,
    gaps: tuple[Gap, ...] = (),
    rebuild: str | None = None,
    damaged: Mapping[int, str] | None = None,
) -> CheckpointPlan:
    """Decide the epoch and starting offsets of this run.

    ``table`` is the latest bronze commit (the source of truth), ``checkpoints``
    the state of each ``epoch=N`` folder, ``partitions`` what Kafka has now.
    The newest checkpoint is resumed when it continues exactly where the table
    stands; otherwise a new epoch starts at the table's next offsets (partitions
    the table has not seen start at their earliest offset).

    Accepted ``gaps`` (records Kafka deleted before they were read) always
    start a new epoch: the old checkpoint would resume inside the gap. So
    does ``rebuild`` (the reason a user asked for a new checkpoint), and a
    newest checkpoint in ``damaged`` (epoch -> which file, what is wrong).
    """
    latest = max(checkpoints) if checkpoints else None
    reason: str | None
    if gaps:
        if table is None:
            raise OffsetError("accepted data-loss gaps need a bronze table to continue from; it has none")
        moved = skip_gaps(table.next_offsets, gaps)
        described = ", ".join(f"{g.topic}-{g.partition} [{g.from_offset}, {g.until_offset})" for g in gaps)
        return CheckpointPlan(
            epoch=max([0, *checkpoints, table.epoch]) + 1,
            starting_offsets=json.dumps(resume_offsets(moved, partitions)),
            rebuilt_reason=f"continuing after accepted data-loss gaps: {described}",
            previous_epoch=latest,
        )
    if rebuild:
        reason = f"rebuild requested: {rebuild}"
    elif latest is None:
        reason = None if table is None else "no checkpoint found"
    else:
        state = checkpoints[latest]
        if state is None and latest in (damaged or {}):
            reason = f"checkpoint of epoch {latest} is damaged: {(damaged or {})[latest]}"
        elif state is None:
            reason = f"checkpoint of epoch {latest} was never started or is empty"
        elif table is not None and table.epoch > latest:
            reason = f"checkpoint of epoch {table.epoch} that wrote the table's last commit is gone"
        else:
            reason = checkpoint_matches_table(state, table, latest)
            if reason is None:
                return CheckpointPlan(epoch=latest, starting_offsets=starting_offsets)
    new_epoch = max([0, *checkpoints, *([table.epoch] if table else [])]) + 1
    if table is None:
        return CheckpointPlan(new_epoch, starting_offsets, reason, latest)
    return CheckpointPlan(
        epoch=new_epoch,
        starting_offsets=json.dumps(resume_offsets(table.next_offsets, partitions)),
        rebuilt_reason=reason,
        previous_epoch=latest,
    )


def resume_offsets(positions: PositionMap, partitions: Mapping[str, list[int]]) -> dict[str, dict[str, int]]:
    """Spark ``startingOffsets`` JSON for every partition Kafka has now.

    Spark requires each current partition to be listed; partitions the table
    has not seen start at earliest (-2). A partition the table has read that
    Kafka no longer has is an error: its records cannot be accounted for.
    """
    gone = [
        f"{t}-{p}"
        for t, parts in positions.items()
        if t in partitions
        for p in parts
        if p not in partitions[t]
    ]
    if gone:
        raise OffsetError(
            f"partitions {', '.join(sorted(gone))} are recorded in the bronze table but no longer "
            "exist in Kafka; a topic was recreated or shrunk (run the preflight check)"
        )
    result: PositionMap = {}
    for topic, parts in partitions.items():
        known = positions.get(topic, {})
        result[topic] = {p: known.get(p, -2) for p in parts}
    return positions_to_json(result)


def batch_ranges(
    *,
    start: PositionMap | None,
    end: PositionMap,
    stats: Mapping[tuple[str, int], tuple[int, int, int]],
    batch_id: int,
) -> list[OffsetRange]:
    """The offset ranges batch ``batch_id`` consumed.

    ``start``/``end`` are Spark's offsets before and after the batch (from the
    checkpoint's offset log); ``stats`` maps each topic-partition to
    ``(rows, min offset, max offset)`` of the records actually read. A range
    may hold fewer rows than offsets (holes), never records outside it.
    """
    begin = flatten(start or {})
    ranges = []
    for tp, until in sorted(flatten(end).items()):
        # A partition the batch read no record of: its bounds below are never looked at.
        rows, low, high = stats.get(tp, (0, until, until))
        frm = begin.get(tp)
        if frm is None:
            # A partition that appeared during the run: Spark read it from its
            # earliest offset, which the offset log does not record.
            frm = low if rows else until
        if rows and (low < frm or high >= until):
            raise OffsetError(
                f"{tp[0]}-{tp[1]}: batch {batch_id} read offsets {low}..{high}, outside its "
                f"range [{frm}, {until})"
            )
        if until < frm:
            raise OffsetError(
                f"{tp[0]}-{tp[1]}: batch {batch_id} ends at {until}, before its start {frm} "
                "(offsets went backwards: was the topic recreated?)"
            )
        if until > frm:
            ranges.append(OffsetRange(tp[0], tp[1], frm, until, rows))
    extra = set(stats) - set(flatten(end))
    if extra:
        raise OffsetError(f"batch {batch_id} read partitions missing from its end offsets: {sorted(extra)}")
    return ranges


def stats_from_files(stats_json: list[str | None], topics: set[str]) -> dict[tuple[str, int], tuple[int, int, int]] | None:
    """Rows, min and max offset per topic-partition of a batch, from Delta's statistics of the files it wrote.

    Each task of a Kafka micro-batch reads one topic-partition's range, and
    Delta's writer records each file's ``numRecords`` and min/max of every
    column as it writes it, so the batch is read once (no counting pass).
    A file counts only if its statistics pin it to one topic-partition: the
    partition's min equals its max, and exactly one of the batch's ``topics``
    lies between the topic's min and max (Delta may shorten long strings, the
    min to a prefix and the max to something above the value, so an interval
    test, never equality). Anything else (statistics turned off for these
    columns, a file holding two partitions because a writer option shuffled
    the rows) returns ``None``: the caller counts the written files instead.
    """
    result: dict[tuple[str, int], tuple[int, int, int]] = {}
    for text in stats_json:
        if not text:
            return None
        stats = json.loads(text)
        rows = stats.get("numRecords")
        low, high = stats.get("minValues", {}), stats.get("maxValues", {})
        if rows is None:
            return None
        if rows == 0:
            continue
        values = (low.get("topic"), high.get("topic"), low.get("partition"), high.get("partition"),
                  low.get("offset"), high.get("offset"))  # fmt: skip
        if any(v is None for v in values):
            return None
        t_low, t_high, p_low, p_high, o_low, o_high = values
        if p_low != p_high:
            return None
        candidates = [t for t in topics if t_low <= t <= t_high]
        if len(candidates) != 1:
            return None
        tp = (candidates[0], int(p_low))
        seen = result.get(tp)
        result[tp] = (
            (int(rows), int(o_low), int(o_high))
            if seen is None
            else (seen[0] + int(rows), min(seen[1], int(o_low)), max(seen[2], int(o_high)))
        )
    return result
