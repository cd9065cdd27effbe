"""A range with fewer rows than offsets, checked against Kafka's count of its committed records.

Offset holes (transaction markers, aborted records, compaction) leave a range
with fewer rows than offsets; Kafka confirms the range holds no more committed
records than the table got. Pure logic: Kafka is reached only through the
:data:`RecordCounter` the caller passes, so the rules have unit tests without a
broker.
"""

from __future__ import annotations

from collections.abc import Callable

#: ``(topic, partition, from, until) -> committed records Kafka holds there``; may raise.
RecordCounter = Callable[[str, int, int, int], int]


def verify_holes(
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
    """Count the range ``[frm, until)`` of ``topic``-``partition``, which holds ``rows`` rows in ``where``, with
    ``count_records``: a different count is a violation, no counter or a failed count a note."""
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
