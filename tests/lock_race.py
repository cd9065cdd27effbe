"""Two processes racing for the run lock, round after round: who won each round."""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass, field
from pathlib import Path

from include.orchestration.run_lock import Folder, HdfsFolder, LocalFolder, ObjectStoreFolder, acquire, holder

DAG = "orders_dag"


@dataclass(frozen=True)
class Rounds:
    """The lock folder of each round: ``<root>/round-<n>/_lock``, on a filesystem, an HDFS (an ``hdfs://`` root)
    or (with ``config``, obstore's settings) an object store. Plain data, so that it reaches a spawned process."""

    root: str
    config: dict[str, str] | None = None
    client_options: dict[str, str] = field(default_factory=dict)

    def __call__(self, n: int) -> Folder:
        if self.root.startswith("hdfs://"):
            return HdfsFolder(f"{self.root}/round-{n}/_lock")
        if self.config is None:
            return Path(self.root) / f"round-{n}" / "_lock"
        return ObjectStoreFolder(f"{self.root}/round-{n}/_lock", self.config, self.client_options)


def _race(folder_of: Rounds, name: str, rounds: int, attempts: int, barrier, results) -> None:
    wins: dict[int, list[str]] = {}
    try:
        for n in range(rounds):
            folder = folder_of(n)
            barrier.wait(timeout=60)
            for i in range(attempts):
                mine = f"{name}-{n}-{i}"

                def run_state(dag_id: str, run_id: str, mine: str = mine) -> str | None:
                    return None if run_id == mine else "running"  # every other run is live

                if acquire(folder, dag_id=DAG, run_id=mine, run_state=run_state)["run_id"] == mine:
                    wins.setdefault(n, []).append(mine)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        barrier.abort()
        results.put((name, wins, repr(exc)))
        return
    results.put((name, wins, None))


def race_for_lock(folder_of: Rounds, *, rounds: int, attempts: int) -> dict[int, list[str]]:
    """Processes ``a`` and ``b`` each try ``attempts`` times per round to take the lock in ``folder_of(round)``
    (every other run counts as live); returns each round's winners, of both processes."""
    # Spawned, not forked: a fork of a process whose object-store client already runs its I/O threads hangs.
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(folder_of, name, rounds, attempts, barrier, results))
             for name in ("a", "b")]  # fmt: skip
    for p in procs:
        p.start()
    try:
        reports = [results.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert [(name, error) for name, _, error in reports if error] == []
    assert [p.exitcode for p in procs] == [0, 0]
    found = {name: wins for name, wins, _ in reports}
    return {n: found["a"].get(n, []) + found["b"].get(n, []) for n in range(rounds)}


def assert_one_winner_per_round(folder_of: Rounds, *, rounds: int, attempts: int) -> None:
    """:func:`race_for_lock`, then: exactly one run won each round, and the lock's holder is that run."""
    winners = race_for_lock(folder_of, rounds=rounds, attempts=attempts)
    for n in range(rounds):
        assert len(winners[n]) == 1, f"round {n}: {winners[n]}"
        assert holder(folder_of(n))["run_id"] == winners[n][0]


def assert_creates_once(folder: LocalFolder | ObjectStoreFolder | HdfsFolder, *, emptied: set[str] | None) -> None:
    """A lock folder's own contract, on an empty ``folder``: a name is created once, the second create is refused,
    a read returns what the first wrote, the listing names it, and a remove (twice: the second finds nothing) takes
    it away. ``emptied``: what the listing says afterwards (``None`` where the folder goes with its last file, as
    an object store's prefix does)."""
    name = "00000000000000000001.json"
    assert folder.create(name, '{"run_id": "r1"}') is True
    assert folder.create(name, '{"run_id": "r2"}') is False
    assert folder.read(name) == '{"run_id": "r1"}'
    assert folder.names() == {name}
    folder.remove(name)
    folder.remove(name)  # gone already: no error
    assert folder.names() == emptied
