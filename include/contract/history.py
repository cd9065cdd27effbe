"""Reading a Delta table's history only as far back as a question needs.

Every reader of a table's commits (where bronze or silver stands, the batch
commits since a version, bronze's newest data version) asks the same thing:
the newest N entries, widened until they answer the question or the whole
history has been read. Reading all of it would make each run's cost grow with
the table's age; reading a fixed number would miss a commit that lies further
back after many maintenance or schema commits. One loop decides how far, so
every reader widens the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from include.contract.errors import ContractError

E = TypeVar("E")

#: Entries read first: enough for a table whose newest commit is one of ours, the usual case.
FIRST_READ = 20
#: Each further read takes this many times the last one, so a long history costs a few reads.
WIDEN = 10

#: What a reader says about the entries read so far: ``True`` they answer the question,
#: ``False`` read further back, or an ``int``: that many newest entries are known to answer it.
Verdict = bool | int


def read_until(
    read: Callable[[int], Sequence[E]], covered: Callable[[Sequence[E]], Verdict], *, first: int = FIRST_READ
) -> Sequence[E]:
    """The newest entries ``read(limit)`` returns (newest first), widened until ``covered`` accepts them.

    Stops when ``covered(entries)`` is ``True``, when it returns a count no
    larger than the entries already read, or when ``read`` returned fewer than
    asked for (the whole history). Otherwise the next read asks for
    :data:`WIDEN` times as many, capped at a count ``covered`` returned.
    """
    if first < 1:
        raise ContractError(f"first must be at least 1, got {first}")
    limit = first
    while True:
        entries = read(limit)
        verdict = covered(entries)
        if verdict is True or len(entries) < limit:
            return entries
        if verdict is False:
            limit *= WIDEN
        elif verdict <= limit:
            return entries
        else:
            limit = min(limit * WIDEN, verdict)
