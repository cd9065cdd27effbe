"""The fault soak: random faults across real DAG runs, exact set equality after each.

``make test`` runs the smoke (each kind once, a fixed seed); ``make test-all``
adds the slice (30 faults, the same seed); ``make soak`` runs the long mode
(``SOAK_FAULTS=300``, a random seed). ``SOAK_SEED`` replays a sequence.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.soak.soak import FAULTS, Soak, retry_missed, rounds, smoke_rounds

pytestmark = pytest.mark.integration

#: The seed of the slice and the smoke: fixed, so that every run injects the same faults in the same order.
SLICE_SEED = 20261124
#: The slice's limit: about twice what its 20-odd faulted and recovery runs take beside the rest of the suite
#: on a slow machine, so that a slow day does not fail on it alone. Each of its runs has its own limit.
SLICE_TIMEOUT_S = 70 * 60


def _play(soak: Soak, plan: list[list[str]], faults: int, wanted: set[str], *, stacked: bool = False) -> None:
    """Rounds of ``plan`` until ``faults`` faults have hit a run and every kind in ``wanted`` has hit once.

    A fault whose moment comes after its run ended does not count; a kind in
    ``wanted`` that missed and never hit is tried again alone in the next round.
    ``stacked``: the rounds' faulted runs follow one another, and one
    recovery and check come at the end; otherwise each round has its own.
    """
    step = 0
    done: list = []
    while step < len(plan):
        hit = {r.kind for r in done if r.injected}
        if sum(r.injected for r in done) >= faults and wanted <= hit:
            break
        results = soak.run_round(step, plan[step], settle=not stacked)
        done += results
        retry_missed(plan, step, results, wanted - hit)
        step += 1
    if stacked:
        soak.settle(step)


def _assert_exact(soak: Soak, faults: int, wanted: set[str]) -> None:
    failed = [r for r in soak.results if r.problems]
    assert not failed, "\n".join(f"fault {r.seed_step} {r.kind} ({r.detail}): {r.problems}" for r in failed)
    injected = [r for r in soak.results if r.injected]
    assert len(injected) >= faults, f"only {len(injected)} of {len(soak.results)} faults hit a run"
    assert {r.kind for r in injected} >= wanted, f"a kind of fault never hit a run: {wanted - {r.kind for r in injected}}"


def _report(soak: Soak, record_property) -> None:
    report = soak.report()
    print(report)
    # Printed again in the run's terminal summary, pass or fail, also under xdist (see tests/conftest.py).
    record_property("soak_report", report)


#: The smoke's limit: its ten-odd runs take about a quarter of it beside the rest of the fast tier on a
#: slow machine.
SMOKE_TIMEOUT_S = 30 * 60


#: Records produced per faulted run of the smoke, at most: several micro-batches (the soak pipeline reads
#: 250 a batch) for the faults to land between, whatever the run's length.
SMOKE_ROUND_RECORDS = 1_500


@pytest.mark.timeout(SMOKE_TIMEOUT_S)
def test_each_fault_kind_once_loses_and_duplicates_nothing(tmp_path_factory, record_property):
    """The fault smoke of ``make test``: every kind hits a real DAG run, and everything is exact after them.

    One faulted run per run-ending kind (the lock holder's round has two runs),
    the broker bounce and the executor kill riding along early in two of them
    (:func:`tests.soak.soak.smoke_rounds`). The faults stack: each faulted run
    starts from what the one before left, and the runs that recover and the
    exact checks come once, after the last. The slice and the long soak
    recover and check after each round, and bounce the broker in recovery runs.
    """
    soak = Soak(tmp_path_factory.mktemp("smoke"), SLICE_SEED, recovery_bounce=0.0, early_companions=True,
                round_records=SMOKE_ROUND_RECORDS)
    try:
        _play(soak, smoke_rounds(SLICE_SEED), len(FAULTS), set(FAULTS), stacked=True)
    finally:
        _report(soak, record_property)
        soak.close()
    _assert_exact(soak, len(FAULTS), set(FAULTS))


@pytest.mark.full
@pytest.mark.timeout(0 if os.environ.get("SOAK_FAULTS") else SLICE_TIMEOUT_S)
def test_random_faults_across_runs_lose_and_duplicate_nothing(tmp_path_factory, record_property):
    faults = int(os.environ.get("SOAK_FAULTS", "30"))
    seed_text = os.environ.get("SOAK_SEED", str(SLICE_SEED))
    seed = random.SystemRandom().randrange(10**9) if seed_text == "random" else int(seed_text)
    only = [k for k in os.environ.get("SOAK_KINDS", "").split(",") if k]
    print(f"fault soak: seed {seed} (replay with SOAK_SEED={seed}), {faults} faults")
    # A run long enough to meet every kind twice must see each hit at least once.
    wanted = set(only or FAULTS) if faults >= 2 * len(FAULTS) else set()
    soak = Soak(tmp_path_factory.mktemp("soak"), seed)
    try:
        # The seed fixes the sequence of kinds and moments.
        _play(soak, rounds(seed, faults * 3, only), faults, wanted)
    finally:
        _report(soak, record_property)
        soak.close()
    _assert_exact(soak, faults, wanted)
